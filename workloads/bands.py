"""Length bands: a jagged batch split by sequence length, and each band's share of the sequences and the work.

A sequence is in the band [lo, hi) when min(Lq, Lk) is in it — the GDPA op's own band key
(kernels/gdpa/bands.py), which for self-attention is the sequence's length. The bands partition [0, ∞):
`edges` e1 < e2 < ... give [0, e1), [e1, e2), ..., [e_last, ∞), so every sequence is in exactly one band.
The default edges double from 64 up to the batch's longest sequence (64, 128, 256, ..., ≤ max length), so
the last band holds the sequences at the length cap.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workloads.params import MAX_LENGTH
from workloads.stats import STAT_TILES, tile_efficiency, work_pairs

FIRST_EDGE = 64


def default_edges(max_len: int) -> list[int]:
    """64, 128, 256, ... up to `max_len` (at least [64])."""
    edges, e = [], FIRST_EDGE
    while e <= max(int(max_len), FIRST_EDGE):
        edges.append(e)
        e *= 2
    return edges


def edges_for(q_lengths, kv_lengths, edges: Sequence[int] | None = None) -> list[int]:
    """`edges` checked, or the default edges of this batch (up to its longest min(Lq, Lk))."""
    if edges:
        return check_edges(edges)
    key = np.minimum(np.asarray(q_lengths, dtype=np.int64), np.asarray(kv_lengths, dtype=np.int64))
    return default_edges(int(key.max(initial=0)))


def check_edges(edges: Sequence) -> list[int]:
    """The edges as ints, or a one-line ValueError: positive integers, strictly increasing, at least one."""
    out = list(edges)
    if not out:
        raise ValueError("no band edges; allowed: one or more increasing positive integers, e.g. [128, 512, 1024]")
    for e in out:
        if isinstance(e, bool) or not isinstance(e, (int, np.integer)) or not 0 < e <= MAX_LENGTH:
            raise ValueError(
                f"band edge {e!r} is not a positive integer up to {MAX_LENGTH}; allowed: increasing positive integers"
            )
    for a, b in itertools.pairwise(out):
        if b <= a:
            raise ValueError(f"band edges must increase: {b} comes after {a}; allowed: e.g. [128, 512, 1024]")
    return [int(e) for e in out]


@dataclass(frozen=True)
class LengthBand:
    """Sequences with lo <= min(Lq, Lk) < hi (hi None: no upper bound)."""

    lo: int
    hi: int | None

    @property
    def label(self) -> str:
        if self.hi is None:
            return f"≥{self.lo}"
        return f"<{self.hi}" if self.lo == 0 else f"{self.lo}–{self.hi - 1}"

    def members(self, q_lengths, kv_lengths) -> np.ndarray:
        """Indices of the sequences in this band, in batch order."""
        key = np.minimum(np.asarray(q_lengths, dtype=np.int64), np.asarray(kv_lengths, dtype=np.int64))
        inside = key >= self.lo
        if self.hi is not None:
            inside &= key < self.hi
        return np.flatnonzero(inside)


def bands_of(edges: Sequence[int]) -> list[LengthBand]:
    """[0, e1), [e1, e2), ..., [e_last, ∞) for checked edges."""
    edges = check_edges(edges)
    bounds = [0, *edges]
    return [LengthBand(lo, hi) for lo, hi in zip(bounds, [*edges, None], strict=True)]


def band_table(q_lengths, kv_lengths, edges: Sequence[int], causal: bool = False) -> list[dict]:
    """Per band (empty ones included): lo, hi, label, the sequences in it (`n_seqs`, `seq_share`), its work
    (Σ work_pairs: `work_pairs`, `work_share`) and its tile efficiency at the `STAT_TILES` tiles."""
    q = np.asarray(q_lengths, dtype=np.int64)
    k = np.asarray(kv_lengths, dtype=np.int64)
    w = work_pairs(q, k, causal)
    total_w, total_n = int(w.sum()), len(q)
    rows = []
    for band in bands_of(edges):
        idx = band.members(q, k)
        pairs = int(w[idx].sum())
        row = {
            "lo": band.lo,
            "hi": band.hi,
            "label": band.label,
            "n_seqs": len(idx),
            "seq_share": len(idx) / total_n if total_n else 0.0,
            "work_pairs": pairs,
            "work_share": pairs / total_w if total_w else 0.0,
        }
        row.update({f"tile_eff_{t}": tile_efficiency(q[idx], k[idx], t, causal=causal) for t in STAT_TILES})
        rows.append(row)
    return rows
