"""Which (sequence, head, tile) a program works on: the launch grid of every GDPA kernel.

`grid`: programs (tile, sequence·head) over the longest sequence's tile count — simple, and what a
uniform batch wants. On a skewed batch (production histories: median 59 rows under a 2048 maximum)
almost every program finds its tile past its sequence's end and exits: 66k of 74k programs at the
peer's B=1152, H=4, L=2048 log-normal batch.

`compact`: one program per tile that exists. Per launch the host enqueues a cumulative tile count per
sequence for this config's tile size (`TileSchedule.grid`, three small device ops, no host sync); a
program finds its sequence by binary search over those counts. The grid is sized by an upper bound the
host knows without reading lengths back (Σ rows / tile + sequences), so only up to one program per
sequence·head is spare.

GDPA_SCHEDULE=grid (the default) | compact | auto (compact when the grid would hold more than twice
the programs the bound allows). Timed on an H200 (kernels/gdpa/PERF.md, v3.1): the forward gains 0–0.5%
on log-normal batches (the exiting programs were nearly free), the backward +8% at max 4096 and −8% on
a uniform batch — so the default stays `grid`.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

SCHEDULES = ("grid", "compact", "auto")
DEFAULT_SCHEDULE = "grid"


@triton.jit
def locate_tile(tile_offsets, n_seqs, search_steps, HEADS: tl.constexpr, COMPACT: tl.constexpr):
    """(sequence, head, tile index within the sequence) of this program; sequence == n_seqs means
    'no tile' (a spare program of the compact grid)."""
    if COMPACT:
        pid = tl.program_id(0)
        head = pid % HEADS
        t = pid // HEADS
        # the largest b with tile_offsets[b] <= t (empty sequences share their successor's offset)
        lo = 0
        hi = n_seqs
        for _ in range(search_steps):
            mid = (lo + hi + 1) // 2
            ok = tl.load(tile_offsets + mid) <= t
            lo = tl.where(ok, mid, lo)
            hi = tl.where(ok, hi, mid - 1)
        tile = t - tl.load(tile_offsets + lo)
        return lo, head, tile
    else:
        bh = tl.program_id(1)
        return bh // HEADS, bh % HEADS, tl.program_id(0)


def _choice() -> str:
    name = os.environ.get("GDPA_SCHEDULE", DEFAULT_SCHEDULE)
    if name not in SCHEDULES:
        raise ValueError(f"GDPA_SCHEDULE={name!r}; allowed: {', '.join(SCHEDULES)}")
    return name


class TileSchedule:
    """The launch grid of one kernel call over the sequences described by `offsets` (int32 [B+1])."""

    def __init__(self, offsets: torch.Tensor, rows: int, max_len: int, heads: int, min_block: int = 64):
        self.offsets, self.rows, self.max_len, self.heads = offsets, int(rows), max(int(max_len), 1), heads
        self.n_seqs = offsets.numel() - 1
        name = _choice()
        if name == "auto":
            grid = triton.cdiv(self.max_len, min_block) * self.n_seqs
            name = "compact" if grid > 2 * self._bound(min_block) else "grid"
        self.compact = name == "compact"
        self.search_steps = max(self.n_seqs, 1).bit_length() + 1
        if self.compact:
            self._lengths = (offsets[1:] - offsets[:-1]).to(torch.int32)
            self.tile_offsets = torch.zeros(self.n_seqs + 1, dtype=torch.int32, device=offsets.device)
        else:
            self.tile_offsets = offsets  # unused by the kernel; any int32 pointer will do

    def _bound(self, block: int) -> int:
        # Σ ceil(l / block) <= Σ l / block + n: known on the host without reading lengths back
        return self.rows // block + self.n_seqs

    def args(self) -> tuple:
        return self.tile_offsets, self.n_seqs, self.search_steps

    def grid(self, block: int) -> tuple:
        """The grid for tiles of `block` rows; for compact schedules also (re)writes the cumulative
        tile counts for that block size, on the current stream, ahead of the launch."""
        if not self.compact:
            return triton.cdiv(self.max_len, block), self.n_seqs * self.heads
        torch.cumsum((self._lengths + (block - 1)) // block, 0, dtype=torch.int32, out=self.tile_offsets[1:])
        return max(self._bound(block), 1) * self.heads,
