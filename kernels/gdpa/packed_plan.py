"""The pack plan of the packed GDPA kernels (packed.py): which short sequences share one tile, built on the device.

A *pack* is a run of at most MAXSEQ consecutive batch sequences whose queries fit PACK rows and whose keys
fit PACK rows. Its kernels (packed_fwd.py, packed_bwd.py) compute it as one tile with a block-diagonal mask,
so a 128-row tile holds ~2 production sequences instead of one, and a backward program owns every query
and key of its sequences (no atomics, no split dK/dV + dQ launches). Consecutive, because then a pack's
rows are one block of the batch on each side: loads need no row map, and the mask compares each row's
position with the row range of its sequence's other side, computed once per program. (Packing any in-band
sequences, skipping the longer ones between them, fills 14% fewer packs on the production batch but needs a
per-row gather map inside the key loop: ~70 registers more at 64×32 tiles, measured with ptxas,
docs/experiments/packed_compile.py.)

The plan is built by one single-program launch per call, nothing read back (no host sync). Greedy next-fit
(walk the batch in order; a sequence outside the band, a full pack or MAXSEQ positions close the open pack)
is sequential; its parallel form here splits the batch into chunks of CHUNK consecutive sequences, walks
all chunks at once (one lane each; a rolled loop whose step prefetches the next step's offsets — unrolled,
the compile took 69 s at CHUNK = 16 and grew faster than the chunk), and never lets a pack span a chunk: at
most one extra, part-filled pack per chunk (519 packs vs 517 for the exact sequential walk on the
production log-normal batch: docs/experiments/packed_area.py). A prefix sum over the lanes numbers the
packs; the walk runs twice (count, then write) so nothing is stored and re-read within the launch. Cost,
estimated, not measured: B = 1152 is one block of 32 lanes in one warp, 2 × 64 steps of ~30 dependent
instructions (~2k cycles a walk) plus a few L2 misses per lane (its offsets span 2–3 cache lines; later
steps hit L1): ~3–5 µs with the launch; B sequences take ceil(B / (CHUNK · 128)) blocks of up to 128 lanes.

Plan buffer (int32, one tensor): [0] the number of packs, [1] the kernels' work counter (zeroed here, taken
by atomics), then per pack `first` (its first batch sequence), `count` (its batch positions; a sequence
with no rows on either side rides along without opening a pack), `q0` and `k0` (its first query and key
rows), then per pack and position its sequence's query rows `[q_lo, q_hi)` and key rows `[k_lo, k_hi)`
relative to q0 and k0, four `[max_packs, MAXSEQ]` arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.gdpa.bands import Band
from kernels.gdpa.grid_math import cdiv, next_power_of_2

MAXSEQ = 16  # batch positions per pack: the kernels map rows to sequences with a [rows, MAXSEQ] compare
CHUNK = 64  # consecutive batch sequences walked by one lane; packs never span two chunks
HEADER = 2  # n_packs, work counter
_HEADER = tl.constexpr(HEADER)


@triton.jit
def _walk(
    q_offsets,
    kv_offsets,
    Plan,
    first,
    n_seqs,
    max_packs,
    base,
    band_lo,
    band_hi,
    PACK: tl.constexpr,
    MAXSEQ: tl.constexpr,
    CHUNK: tl.constexpr,
    WRITE: tl.constexpr,
):
    # one lane per chunk of CHUNK sequences starting at `first`; returns the packs each chunk opens
    zero = first * 0
    fill_q, fill_k, held, npk = zero, zero, zero, zero
    ok = first < n_seqs
    q0 = tl.load(q_offsets + first, mask=ok, other=0)
    k0 = tl.load(kv_offsets + first, mask=ok, other=0)
    q_next = tl.load(q_offsets + first + 1, mask=ok, other=0)
    k_next = tl.load(kv_offsets + first + 1, mask=ok, other=0)
    starts = Plan + _HEADER
    counts = starts + max_packs
    q_first = counts + max_packs
    k_first = q_first + max_packs
    slots = k_first + max_packs
    stride = max_packs * MAXSEQ
    for i in range(CHUNK):
        b = first + i
        ok = b < n_seqs
        q1, k1 = q_next, k_next
        # one step ahead: the next offsets arrive (from L1, after a lane's first line) while this step runs
        q_next = tl.load(q_offsets + b + 2, mask=b + 1 < n_seqs, other=0)
        k_next = tl.load(kv_offsets + b + 2, mask=b + 1 < n_seqs, other=0)
        lq = q1 - q0
        lk = k1 - k0
        key = tl.minimum(lq, lk)
        empty = (lq == 0) & (lk == 0)  # writes nothing: rides along in an open pack, opens none
        inside = ok & (key >= band_lo) & (key < band_hi) & (lq <= PACK) & (lk <= PACK) & ~empty
        full = (fill_q + lq > PACK) | (fill_k + lk > PACK) | (held == MAXSEQ)
        close = (held > 0) & ok & ((~inside & ~empty) | (inside & full))
        if WRITE:
            tl.store(counts + base + npk - 1, held, mask=close)
        fill_q = tl.where(close, 0, fill_q)
        fill_k = tl.where(close, 0, fill_k)
        held = tl.where(close, 0, held)
        join = inside | (ok & empty & (held > 0) & (held < MAXSEQ))
        opens = join & (held == 0)
        npk += opens.to(tl.int32)
        if WRITE:
            p = base + npk - 1
            tl.store(starts + p, b, mask=opens)
            tl.store(q_first + p, q0, mask=opens)
            tl.store(k_first + p, k0, mask=opens)
            # the sequence's rows in its pack, so that a program finds its pack in one load latency
            at = slots + p * MAXSEQ + held
            tl.store(at, fill_q, mask=join)
            tl.store(at + stride, fill_q + lq, mask=join)
            tl.store(at + 2 * stride, fill_k, mask=join)
            tl.store(at + 3 * stride, fill_k + lk, mask=join)
        fill_q = tl.where(join, fill_q + lq, fill_q)
        fill_k = tl.where(join, fill_k + lk, fill_k)
        held = tl.where(join, held + 1, held)
        q0, k0 = q1, k1
    if WRITE:
        tl.store(counts + base + npk - 1, held, mask=held > 0)
    return npk


@triton.jit
def pack_plan_kernel(
    q_offsets,
    kv_offsets,
    Plan,
    n_seqs,
    max_packs,
    band_lo,
    band_hi,
    PACK: tl.constexpr,
    MAXSEQ: tl.constexpr,
    CHUNK: tl.constexpr,
    LANES: tl.constexpr,
):
    lane = tl.arange(0, LANES)
    done = tl.sum(lane * 0, axis=0)  # packs numbered so far, carried across blocks of LANES chunks
    for c0 in range(0, n_seqs, LANES * CHUNK):
        first = c0 + lane * CHUNK
        npk = _walk(
            q_offsets, kv_offsets, Plan, first, n_seqs, max_packs, 0, band_lo, band_hi, PACK, MAXSEQ, CHUNK, False
        )
        base = done + tl.cumsum(npk, axis=0) - npk
        _walk(q_offsets, kv_offsets, Plan, first, n_seqs, max_packs, base, band_lo, band_hi, PACK, MAXSEQ, CHUNK, True)
        done += tl.sum(npk, axis=0)
    tl.store(Plan, done)
    tl.store(Plan + 1, 0)


@triton.jit
def load_pack(Plan, p, max_packs, MAXSEQ: tl.constexpr):
    """Pack `p` as (q0, k0): its first query and key rows in the batch (int64), and [MAXSEQ] vectors of
    its sequences' query and key rows relative to them (q_lo, q_hi, k_lo, k_hi; empty past the pack). No
    address waits for another load: the slots past the count hold stale values until masked."""
    j = tl.arange(0, MAXSEQ)
    starts = Plan + _HEADER
    count = tl.load(starts + max_packs + p)
    q0 = tl.load(starts + 2 * max_packs + p)
    k0 = tl.load(starts + 3 * max_packs + p)
    at = starts + 4 * max_packs + p * MAXSEQ + j
    stride = max_packs * MAXSEQ
    used = j < count
    q_lo = tl.where(used, tl.load(at), 0)
    q_hi = tl.where(used, tl.load(at + stride), 0)
    k_lo = tl.where(used, tl.load(at + 2 * stride), 0)
    k_hi = tl.where(used, tl.load(at + 3 * stride), 0)
    return q0.to(tl.int64), k0.to(tl.int64), q_lo, q_hi, k_lo, k_hi


@triton.jit
def partner_ranges(r, lo, hi, other_lo, other_hi):
    """For pack rows `r` of one side, the pack rows [start, end) of the other side that belong to the same
    sequence (empty for an unused row): what the block-diagonal mask compares positions with."""
    hit = (lo[None, :] <= r[:, None]) & (r[:, None] < hi[None, :])
    start = tl.sum(tl.where(hit, other_lo[None, :], 0), axis=1)
    end = tl.sum(tl.where(hit, other_hi[None, :], 0), axis=1)
    return start, end


@dataclass(frozen=True)
class PackPlan:
    """A plan on the device and what the host knows of it: its buffer, the bound on its pack count (the
    kernels' grids are sized by it, their programs read the true count), the pack capacity."""

    buffer: torch.Tensor
    max_packs: int
    pack: int
    band: Band

    @property
    def counter(self) -> torch.Tensor:
        return self.buffer[1:2]  # a view: the autotuner zeroes only it between its timing runs


def build(q_offsets: torch.Tensor, kv_offsets: torch.Tensor, band: Band, pack: int) -> PackPlan:
    """Enqueue the plan of the sequences in `band` that fit `pack` rows on both sides (one launch)."""
    n_seqs = q_offsets.shape[0] - 1
    max_packs = max(n_seqs, 1)  # every pack holds a sequence; the kernels read the true count
    buffer = torch.empty(HEADER + max_packs * (4 + 4 * MAXSEQ), dtype=torch.int32, device=q_offsets.device)
    lanes = min(128, max(16, next_power_of_2(cdiv(max(n_seqs, 1), CHUNK))))
    pack_plan_kernel[(1,)](
        q_offsets,
        kv_offsets,
        buffer,
        n_seqs,
        max_packs,
        band.lo,
        band.hi_arg,
        PACK=pack,
        MAXSEQ=MAXSEQ,
        CHUNK=CHUNK,
        LANES=lanes,
        num_warps=max(1, lanes // 32),
    )
    return PackPlan(buffer, max_packs, pack, band)


def read(plan: PackPlan) -> list[tuple[int, int]]:
    """The packs of a plan as (first sequence, number of batch positions): for tests and experiments only
    — it reads the device back."""
    host = plan.buffer.cpu().tolist()
    n, mp = host[0], plan.max_packs
    return [(host[HEADER + p], host[HEADER + mp + p]) for p in range(n)]
