"""The Hopper backend with its persistent backward at every batch size: a row of the backend table of its own
(backends.py), so that the walk can be pinned (`backend="hopper_persistent"`) and compared with the grid.

The Hopper row's own backward is this walk up to 2,048 sequences, where it goes longest first and led FA4's grid on
every measured set (plans.backward_walks); past that it is the grid, and this row the walk in batch order. So the
row is no longer one of auto's candidates: at every batch it would time the Hopper row's kernel again, or the
batch-order walk that ran 2-7% behind the grid on the H200's log-normal and spike bands (PERF.md "The persistent
Hopper backward"). Its forward is the Hopper row's (persistent already).
"""

from __future__ import annotations

from kernels.gdpa.hopper import forward, unavailable, unsupported


def backward(call, do, band, options=None, out=None, record=None):
    """(dq, dk, dv) like (q, k, v), the rows of `band`'s sequences written, by one CTA per SM walking the
    band's key tiles."""
    from kernels.gdpa.hopper import launch

    return launch.backward(call, do, band, out=out, record=record, persistent=True)


__all__ = ["backward", "forward", "unavailable", "unsupported"]
