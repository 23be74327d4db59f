"""Compiling every Hopper kernel a call will launch, ahead of time and without a GPU.

Kernels compile against symbolic shapes (launch.py), so a CPU machine with the same flash-attn-4 /
nvidia-cutlass-dsl versions fills a kernel directory (`launch.use_kernel_dir`, CUTE_DSL_ARCH=sm_90a) that a GPU
machine then loads instead of compiling: docs/experiments/hopper_gpu.py and jagged_gpu.py `--prebuild DIR`.
"""

from __future__ import annotations

import torch

from kernels.gdpa.hopper.launch import (
    SCHEDULER_HINT_MIN_BATCH,
    TORCH_TO_CUTE,
    backward_kernel,
    forward_config,
    forward_kernel,
    hdim_multiple,
)
from kernels.gdpa.hopper.postprocess import postprocess_kernel
from kernels.gdpa.hopper.scheduler import tile_counts_kernel


def prebuild(
    dtype: torch.dtype,
    head_dim: int,
    groups: int,
    activation: str,
    causal: bool,
    batch: int,
    max_q: int,
    max_kv: int,
    banded: bool = False,
    sms: int = 132,
) -> list:
    """Compile (or load) every kernel a forward + backward call with these arguments launches (over the
    whole batch, or over one length band when `banded`), without running anything: no GPU needed. The
    forward twice: persistent over `sms` CTAs (the GPU's SM count: 132 on an H100/H200 SXM; what a call
    launches) and FA4's one-tile grid (what experiments compare it with); the backward's main kernel the same
    two ways. Returns the cache keys."""
    keys = [forward_kernel(dtype, head_dim, groups, activation, causal, batch, banded, ctas)[2] for ctas in (sms, 0)]
    for ctas in (sms, 0):
        _, plan, key = backward_kernel(dtype, head_dim, groups, activation, causal, batch, max_q, max_kv, banded, ctas)
        keys.append(key)
    cfg, hint, cdtype, mult = plan.cfg, batch > SCHEDULER_HINT_MIN_BATCH, TORCH_TO_CUTE[dtype], hdim_multiple(plan.cfg)
    posts = [(cfg.m_block_size, 128 if cfg.dQ_single_wg else cfg.num_wg * 128, cfg.AtomLayoutMdQ, cfg.dQ_swapAB)]
    if groups > 1:
        posts.append((cfg.n_block_size, cfg.num_wg * 128, cfg.AtomLayoutNdKV, cfg.dKV_swapAB))
    for tile, threads, atom, swap in posts:
        keys.append(postprocess_kernel(cdtype, head_dim, tile, threads, atom, swap, mult, hint, banded)[1])
    if hint:
        fcfg = forward_config(head_dim, groups, batch, banded)
        for tile, mult_q in (
            (fcfg.tile_m, groups if fcfg.pack_gqa else 1),
            (cfg.m_block_size, 1),
            (cfg.n_block_size, 1),
        ):
            keys.append(tile_counts_kernel(tile, mult_q, banded)[1])
    return keys
