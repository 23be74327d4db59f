"""The Hopper backend with its persistent backward: a row of the backend table of its own (backends.py), so that
backend="auto" times it against FA4's one-CTA-per-key-tile grid on the first call of a shape class.

Why a row and not a rule: on the H200 the persistent walk (persistent_bwd.py) ran 2-7% behind the grid on the
bands that carry the work of log-normal and spike batches (PERF.md "The persistent Hopper backward"), and the
grid became the default again (d468112); but the production runs before and after that switch put the walk
ahead where the queries are short — seeds 1.142 vs 1.206 ms, target_history 1.007 vs 1.053 (2026-12-02 at
e0f4875 vs 2026-12-03 at fcd901e, two machines) — and no host-known fact tells the two kinds of batch apart.
Its forward is the Hopper row's (persistent already), so the row is a candidate of the backward only.
"""

from __future__ import annotations

from kernels.gdpa.hopper import forward, unavailable, unsupported


def backward(call, do, band, options=None, out=None, record=None):
    """(dq, dk, dv) like (q, k, v), the rows of `band`'s sequences written, by one CTA per SM walking the
    band's key tiles."""
    from kernels.gdpa.hopper import launch

    return launch.backward(call, do, band, out=out, record=record, persistent=True)


__all__ = ["backward", "forward", "unavailable", "unsupported"]
