"""The backward's dQ postprocess (and GQA's dK/dV one): FA4's `FlashAttentionBackwardPostprocess`, compiled through
our cache and launched on the fp32 accumulators the backward's main kernel leaves (launch.backward)."""

from __future__ import annotations

import cutlass.cute as cute
from cutlass import Float32
from flash_attn.cute.flash_bwd_postprocess import FlashAttentionBackwardPostprocess
from quack.compile_utils import make_fake_tensor

from kernels.gdpa.hopper.cache import compiled, fake_i32_vector, fake_stream


def _compile_postprocess(
    dtype,
    head_dim: int,
    tile: int,
    num_threads: int,
    atom_layout: int,
    swap_ab: bool,
    hdim_multiple: int,
    hint: bool,
    banded: bool,
):
    sym = cute.sym_int
    total, h, accum, b1 = sym(), sym(), sym(), sym()
    post = FlashAttentionBackwardPostprocess(
        dtype, head_dim, 90, tile, num_threads, atom_layout, swap_ab, hdim_multiple_of=hdim_multiple
    )
    return cute.compile(
        post,
        make_fake_tensor(Float32, (h, accum), divisibility=4),
        make_fake_tensor(dtype, (total, h, head_dim), divisibility=128 // dtype.width),
        Float32(1.0),
        fake_i32_vector(b1),
        fake_i32_vector(sym()) if banded else None,
        None,
        fake_i32_vector(b1) if hint else None,
        fake_stream(),
        options="--enable-tvm-ffi",
    )


def postprocess_kernel(dtype, head_dim, tile, num_threads, atom_layout, swap_ab, hdim_multiple, hint, banded):
    key = ("post", dtype, head_dim, tile, num_threads, atom_layout, swap_ab, hdim_multiple, hint, banded)
    return compiled(
        key,
        lambda: _compile_postprocess(
            dtype, head_dim, tile, num_threads, atom_layout, swap_ab, hdim_multiple, hint, banded
        ),
    ), key


def postprocess(accum, out, scale, offsets, used, dtype, head_dim, tile, threads, atom, swap_ab, mult, cu_blocks):
    banded = used is not None
    fn = postprocess_kernel(dtype, head_dim, tile, threads, atom, swap_ab, mult, cu_blocks is not None, banded)[0]
    fn(accum, out, float(scale), offsets, used, None, cu_blocks)
