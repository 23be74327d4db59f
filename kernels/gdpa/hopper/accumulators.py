"""The backward's fp32 accumulators: dQ's, written first-touch (no zeros), and GQA's dK/dV, zeroed over one band.

FA4's backward adds each key tile's dQ into a [heads, padded rows · head dim] fp32 accumulator in FA4's padded
varlen layout (sequence b starts at row (offset_b + b·tile) // tile · tile: SeqlenInfoQK.padded_offset_q), one
tile of `tile` rows at a time, and the postprocess reads back the rows a launch's `seqused` says. A launch over a
length band touches its sequences' tiles only, so only those need zeros: `torch.zeros` over the whole buffer
cost a banded launch as much as the whole batch's (0.1-0.2 ms of memset at B 1152, PERF.md). One small Triton
launch zeroes, per head and band sequence, the contiguous span of its ceil(used_b / tile) tiles; the rest of
the buffer stays as allocated (never read).

dQ's accumulator is not zeroed at all (`first_touch_dq`): the backward's dQ warp stores the first key tile's dQ
into a query tile and adds the others after that store (dq_first_touch.py), so the ~0.1 ms memset of
0.3 GB before every production backward launch (docs/example-h200-production's kernel breakdown) becomes the
zeroing of one int32 a tile — the count of key tiles that reached it — and of the dQ tiles no key tile reaches
(a band sequence with queries and no keys: its dQ is 0).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.gdpa.grid_math import cdiv

BLOCK = 4096  # fp32 elements a program zeroes (per head)
SEM_BLOCK = 64  # tile counters a step of `_clear_first_touch` zeroes (per head)
_empty = torch.empty  # the allocations this module leaves unwritten: tests poison them


@triton.jit
def _zero_band_tiles(accum, offsets, used, n_heads, stride_h, TILE: tl.constexpr, HDIM: tl.constexpr,
                     BLOCK: tl.constexpr):  # fmt: skip
    b = tl.program_id(0)
    chunk = tl.program_id(1)
    n = tl.load(used + b).to(tl.int64)  # element offsets in int64: a head's buffer may pass 2^31
    start = (tl.load(offsets + b).to(tl.int64) + b * TILE) // TILE * TILE * HDIM
    span = (n + TILE - 1) // TILE * TILE * HDIM
    idx = chunk.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep = idx < span
    for h in range(n_heads):
        tl.store(accum + h * stride_h + start + idx, 0.0, mask=keep)


def zeros_for_band(
    heads: int, rows: int, hdim: int, offsets: torch.Tensor, used: torch.Tensor | None, tile: int, max_len: int
) -> torch.Tensor:
    """A [heads, rows · hdim] fp32 accumulator: all zeros for the whole batch (`used` None), else zeros over
    each sequence's first ceil(used_b / tile) tiles of FA4's padded layout (`max_len`: the longest sequence,
    which bounds the grid) and uninitialized elsewhere."""
    if used is None:
        return torch.zeros(heads, rows * hdim, dtype=torch.float32, device=offsets.device)
    accum = _empty(heads, rows * hdim, dtype=torch.float32, device=offsets.device)
    span_max = cdiv(max(int(max_len), 1), tile) * tile * hdim
    if used.numel() and accum.numel():
        grid = (used.numel(), cdiv(span_max, BLOCK))
        _zero_band_tiles[grid](accum, offsets, used, heads, accum.stride(0), TILE=tile, HDIM=hdim, BLOCK=BLOCK)
    return accum


@triton.jit
def _clear_first_touch(sem, accum, q_offsets, kv_offsets, used_q, used_k, n_heads, sem_stride_h, acc_stride_h,
                       TILE: tl.constexpr, HDIM: tl.constexpr, SEM_BLOCK: tl.constexpr, BLOCK: tl.constexpr,
                       BANDED: tl.constexpr, CAUSAL: tl.constexpr):  # fmt: skip
    # one program per sequence: its tiles' counters to 0; its dQ tiles to 0 where no key tile will reach them
    b = tl.program_id(0)
    q0 = tl.load(q_offsets + b)
    if BANDED:  # FA4's seqused: a sequence outside the band has 0 rows on both sides
        n_q = tl.load(used_q + b)
        n_k = tl.load(used_k + b)
    else:
        n_q = tl.load(q_offsets + b + 1) - q0
        n_k = tl.load(kv_offsets + b + 1) - tl.load(kv_offsets + b)
    first = (q0.to(tl.int64) + b * TILE) // TILE  # FA4's padded layout, in tiles (int64: rows · hdim may pass 2^31)
    tiles = (n_q + TILE - 1) // TILE
    for t0 in range(0, tiles, SEM_BLOCK):
        t = t0 + tl.arange(0, SEM_BLOCK)
        for h in range(n_heads):
            tl.store(sem + h * sem_stride_h + first + t, 0, mask=t < tiles)
    # tiles [0, unvisited) no key tile reaches: all of them without keys; causal, FA4's first query block of key
    # tile 0, (Lq - Lk) // TILE (0 for self-attention; the op refuses other causal calls only when validate="full")
    unvisited = tl.where(n_k == 0, tiles, 0)
    if CAUSAL:
        unvisited = tl.where(n_k == 0, tiles, tl.minimum(tl.maximum((n_q - n_k) // TILE, 0), tiles))
    if unvisited > 0:
        span = unvisited.to(tl.int64) * TILE * HDIM
        for c in range(0, span, BLOCK):
            idx = first * TILE * HDIM + c + tl.arange(0, BLOCK)
            keep = c + tl.arange(0, BLOCK) < span
            for h in range(n_heads):
                tl.store(accum + h * acc_stride_h + idx, 0.0, mask=keep)


def first_touch_dq(
    heads: int,
    rows: int,
    hdim: int,
    q_offsets: torch.Tensor,
    kv_offsets: torch.Tensor,
    used: tuple[torch.Tensor, torch.Tensor] | tuple[None, None],
    tile: int,
    causal: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """dQ's [heads, rows · hdim] fp32 accumulator, unwritten, and its [heads, rows / tile] int32 tile counters
    (dq_first_touch.py), zeroed over the tiles of the launch's sequences (`used`: FA4's seqused vectors of
    a band launch, or (None, None) for the whole batch); the accumulator's tiles no key tile reaches are zeroed
    too (a sequence with queries and no keys; `causal`, the query blocks before key tile 0's first). One launch,
    one program a sequence, nothing read back."""
    accum = _empty(heads, rows * hdim, dtype=torch.float32, device=q_offsets.device)
    sem = _empty(heads, rows // tile, dtype=torch.int32, device=q_offsets.device)
    used_q, used_k = used
    batch = q_offsets.numel() - 1
    if batch > 0 and accum.numel():
        banded = used_q is not None
        _clear_first_touch[(batch,)](
            sem, accum, q_offsets, kv_offsets, used_q if banded else q_offsets, used_k if banded else kv_offsets,
            heads, sem.stride(0), accum.stride(0),
            TILE=tile, HDIM=hdim, SEM_BLOCK=SEM_BLOCK, BLOCK=BLOCK, BANDED=banded, CAUSAL=bool(causal),
        )  # fmt: skip
    return accum, sem
