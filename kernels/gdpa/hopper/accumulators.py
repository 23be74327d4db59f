"""The backward's fp32 accumulators (dQ, and dK/dV under GQA) zeroed over one length band's tiles only.

FA4's backward adds each key tile's dQ into a [heads, padded rows · head dim] fp32 accumulator in FA4's padded
varlen layout (sequence b starts at row (offset_b + b·tile) // tile · tile: SeqlenInfoQK.padded_offset_q), one
tile of `tile` rows at a time, and the postprocess reads back the rows a launch's `seqused` says. A launch over a
length band touches its sequences' tiles only, so only those need zeros: `torch.zeros` over the whole buffer
cost a banded launch as much as the whole batch's (0.1-0.2 ms of memset at B 1152, PERF.md). One small Triton
launch zeroes, per head and band sequence, the contiguous span of its ceil(used_b / tile) tiles; the rest of
the buffer stays as allocated (never read).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.gdpa.grid_math import cdiv

BLOCK = 4096  # fp32 elements a program zeroes (per head)


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
    accum = torch.empty(heads, rows * hdim, dtype=torch.float32, device=offsets.device)
    span_max = cdiv(max(int(max_len), 1), tile) * tile * hdim
    if used.numel() and accum.numel():
        grid = (used.numel(), cdiv(span_max, BLOCK))
        _zero_band_tiles[grid](accum, offsets, used, heads, accum.stride(0), TILE=tile, HDIM=hdim, BLOCK=BLOCK)
    return accum
