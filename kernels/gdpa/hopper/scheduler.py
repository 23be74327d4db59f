"""The scheduling metadata FA4's varlen tile scheduler can take: cumulative per-sequence tile counts.

FA4's scheduler decodes which sequence a tile belongs to by a warp scan over all sequences unless it is
handed these counts (FA4 passes them above 256 sequences, interface.BIN_BATCH_SEARCH_THRESH). They are
computed on the device by FA4's CuSeqlensToBlocksKernel, compiled in our cache: no host sync.
"""

from __future__ import annotations

import cutlass.cute as cute
import torch
from flash_attn.cute.cu_blocks_kernel import CuSeqlensToBlocksKernel

from kernels.gdpa.hopper.cache import compiled, fake_i32_vector, fake_stream


def _compile_tile_counts(tile: int, multiplier: int, banded: bool):
    b1 = cute.sym_int()
    return cute.compile(
        CuSeqlensToBlocksKernel(tile=tile, seqlen_q_multiplier=multiplier),
        fake_i32_vector(b1),
        None,
        fake_i32_vector(b1),
        fake_i32_vector(cute.sym_int()) if banded else None,
        None,
        None,
        fake_stream(),
        options="--enable-tvm-ffi",
    )


def tile_counts_kernel(tile: int, multiplier: int, banded: bool = False):
    key = ("tile_counts", tile, multiplier, banded)
    return compiled(key, lambda: _compile_tile_counts(tile, multiplier, banded)), key


def tile_counts(
    offsets: torch.Tensor, tile: int, multiplier: int = 1, used: torch.Tensor | None = None
) -> torch.Tensor:
    """Cumulative per-sequence tile counts [B+1] (int32, on the device), computed on the device; with `used`
    (FA4's seqused: the lengths a banded launch runs) counted from those lengths."""
    fn = tile_counts_kernel(tile, multiplier, used is not None)[0]
    out = torch.empty_like(offsets)
    fn(out, None, offsets, used, None, None)
    return out
