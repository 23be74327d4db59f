"""Length bands: one GDPA call split by sequence length into launches that each run the sequences of one band.

A sequence belongs to the band [lo, hi) when min(Lq, Lk) is in it (for self-attention that is its length).
The bands of a plan partition [0, ∞), so every sequence is computed by exactly one launch and every output
row is written once. Membership is decided on the device from the offsets — no host sync: the Triton
kernels compare min(Lq, Lk) with two scalar arguments and exit; the Hopper kernels take FA4's `seqused`
vectors, which `used_lengths` fills with each sequence's lengths inside the band and 0 outside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.gdpa.grid_math import cdiv

UNBOUNDED = 2**31 - 1  # the kernels' "no upper bound" (int32)


@dataclass(frozen=True)
class Band:
    """Sequences with lo <= min(Lq, Lk) < hi (hi None: no upper bound)."""

    lo: int = 0
    hi: int | None = None

    def __post_init__(self):
        if not (isinstance(self.lo, int) and self.lo >= 0):
            raise ValueError(f"band lo must be an integer >= 0, got {self.lo!r}")
        if self.hi is not None and not (isinstance(self.hi, int) and self.hi > self.lo):
            raise ValueError(f"band hi must be an integer > lo ({self.lo}) or None, got {self.hi!r}")

    @property
    def whole(self) -> bool:
        return self.lo == 0 and self.hi is None

    @property
    def hi_arg(self) -> int:
        return UNBOUNDED if self.hi is None else self.hi

    def bound(self, max_len: int, self_attention: bool) -> int:
        """The longest length a sequence of this band can have on one side: max_len, or hi - 1 when the
        band bounds that side (self-attention: min(Lq, Lk) is the length itself)."""
        if self.hi is None or not self_attention:
            return max_len
        return min(max_len, self.hi - 1)

    def reachable(self, max_q: int, max_kv: int) -> bool:
        """False where no sequence can be in this band: min(Lq, Lk) <= min(max_q, max_kv) < lo."""
        return min(max_q, max_kv) >= self.lo

    def describe(self) -> str:
        return f"[{self.lo}, {'inf' if self.hi is None else self.hi})"


WHOLE = Band()


@triton.jit
def sequence_in_band(q_offsets, kv_offsets, b, band_lo, band_hi):
    """(q_start, lq, kv_start, lk, outside) of sequence `b` inside a kernel: row offsets as int64 (batches
    beyond 2^31 elements must not wrap), lengths as int32, and whether its min(Lq, Lk) lies outside the
    band [band_lo, band_hi) — a program of such a sequence exits."""
    q_start = tl.load(q_offsets + b).to(tl.int64)
    lq = (tl.load(q_offsets + b + 1) - q_start).to(tl.int32)
    kv_start = tl.load(kv_offsets + b).to(tl.int64)
    lk = (tl.load(kv_offsets + b + 1) - kv_start).to(tl.int32)
    key = tl.minimum(lq, lk)
    return q_start, lq, kv_start, lk, (key < band_lo) | (key >= band_hi)


@triton.jit
def _used_lengths_kernel(q_offsets, kv_offsets, used_q, used_kv, n_seqs, lo, hi, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n_seqs
    lq = tl.load(q_offsets + idx + 1, mask=ok, other=0) - tl.load(q_offsets + idx, mask=ok, other=0)
    lk = tl.load(kv_offsets + idx + 1, mask=ok, other=0) - tl.load(kv_offsets + idx, mask=ok, other=0)
    key = tl.minimum(lq, lk)
    inside = (key >= lo) & (key < hi)
    tl.store(used_q + idx, tl.where(inside, lq, 0), mask=ok)
    tl.store(used_kv + idx, tl.where(inside, lk, 0), mask=ok)


def used_lengths(q_offsets: torch.Tensor, kv_offsets: torch.Tensor, band: Band) -> tuple[torch.Tensor, torch.Tensor]:
    """(used_q, used_kv), int32 [B] on the device: each sequence's Lq and Lk where it is in `band`, else 0.
    One small launch, enqueued (nothing is read back)."""
    n_seqs = q_offsets.shape[0] - 1
    used_q = torch.empty(n_seqs, dtype=torch.int32, device=q_offsets.device)
    used_kv = torch.empty_like(used_q)
    if n_seqs:
        block = 1024
        _used_lengths_kernel[(cdiv(n_seqs, block),)](
            q_offsets, kv_offsets, used_q, used_kv, n_seqs, band.lo, band.hi_arg, BLOCK=block
        )
    return used_q, used_kv
