"""Launching the Hopper GDPA kernels: compile keys, tensor plumbing, records (the plans: plans.py).

Kernels are compiled once per key (everything that changes the generated code: pass, dtype, head dim,
activation, causal, GQA ratio, tiles, scheduler hint) through our own cache (cache.py), never FA4's.

No call path reads device memory back: lengths stay on the device, alpha and qk_scale reach the kernels as
float launch arguments and cached constant fp32 tensors, never through a host sync.
"""

from __future__ import annotations

import functools

import cutlass.cute as cute
import torch
from cutlass import Float32, Int32
from flash_attn.cute.interface import BwdConfig
from flash_attn.cute.utils import AuxData
from quack.compile_utils import make_fake_tensor

from kernels.gdpa.bands import WHOLE, Band, used_lengths
from kernels.gdpa.call import GDPACall
from kernels.gdpa.hopper import activations
from kernels.gdpa.hopper.accumulators import first_touch_dq, zeros_for_band
from kernels.gdpa.hopper.bwd import GDPABackwardSm90, GDPABackwardSm90Persistent
from kernels.gdpa.hopper.cache import (
    COMPILE_SECONDS,
    compiled,
    compiled_keys,
    fake_i32_vector,
    fake_stream,
    use_kernel_dir,
)
from kernels.gdpa.hopper.device_ops import DEVICE_OPS
from kernels.gdpa.hopper.fwd import GDPAForwardSm90, GDPAForwardSm90Persistent, scores_object
from kernels.gdpa.hopper.grid_bwd import GridBackwardScheduler
from kernels.gdpa.hopper.longest_first import longest_first_order
from kernels.gdpa.hopper.operands import TORCH_TO_CUTE, as_kernel_operand, cute_dtype, filled
from kernels.gdpa.hopper.persistent import persistent_scheduler
from kernels.gdpa.hopper.persistent_bwd import backward_scheduler, persistent_backward_scheduler
from kernels.gdpa.hopper.plans import (
    SCHEDULER_HINT_MIN_BATCH,
    BackwardPlan,
    ForwardConfig,
    backward_plan,
    forward_config,
)
from kernels.gdpa.hopper.postprocess import postprocess
from kernels.gdpa.hopper.scheduler import tile_counts
from kernels.gdpa.launch import record_name

# outputs are allocated through this name so tests can poison them (an element the kernels miss then shows)
_empty_like = torch.empty_like


def _fake_varlen(b1, banded: bool) -> tuple:
    """The varlen operands of a compile: cu_seqlens_q, cu_seqlens_k ([B+1]) and, over one length band,
    seqused_q, seqused_k (else None)."""
    used = (fake_i32_vector(cute.sym_int()), fake_i32_vector(cute.sym_int())) if banded else (None, None)
    return (fake_i32_vector(b1), fake_i32_vector(b1), *used)


def _compile_forward(dtype, head_dim: int, groups: int, activation: str, causal: bool, cfg: ForwardConfig):
    act = activations.build(activation, DEVICE_OPS)
    sym = cute.sym_int
    total_q, total_k, h, h_kv, b1 = sym(), sym(), sym(), (sym() if groups > 1 else None), sym()
    h_kv = h if h_kv is None else h_kv
    div = 128 // dtype.width
    q, o = (make_fake_tensor(dtype, (total_q, h, head_dim), divisibility=div) for _ in range(2))
    k, v = (make_fake_tensor(dtype, (total_k, h_kv, head_dim), divisibility=div) for _ in range(2))
    qk_scale = make_fake_tensor(Float32, (h,), divisibility=1)
    # longest first: the hint holds [counts (B+1) | order (B)] (persistent.LongestFirstScheduler), another size
    cu_blocks = fake_i32_vector(sym()) if cfg.longest_first else (fake_i32_vector(b1) if cfg.scheduler_hint else None)
    kernel_cls, scheduler = GDPAForwardSm90, None
    assert cfg.persistent_ctas or not cfg.longest_first, "longest first is a persistent grid's order"
    if cfg.persistent_ctas:
        scheduler = persistent_scheduler(cfg.persistent_ctas, cfg.longest_first)
        kernel_cls = GDPAForwardSm90Persistent
    kernel = kernel_cls(dtype, head_dim, groups, activation=act, is_causal=causal, cfg=cfg)
    with scores_object(act, scheduler):
        return cute.compile(
            kernel,
            q,
            k,
            v,
            o,
            None,
            Float32(1.0),
            *_fake_varlen(b1, cfg.banded),
            None,
            None,
            None,
            qk_scale,
            None,
            AuxData(),
            cu_blocks,
            None,
            fake_stream(),
            options="--enable-tvm-ffi",
        )


# ----------------------------------------------------------------------------------------------------------
# forward
# ----------------------------------------------------------------------------------------------------------
def forward_kernel(
    dtype: torch.dtype,
    head_dim: int,
    groups: int,
    activation: str,
    causal: bool,
    batch: int,
    banded: bool = False,
    persistent_ctas: int = 0,
):
    """(compiled forward, its config, its cache key) for these arguments; compiles on first use."""
    cfg, cdtype = forward_config(head_dim, groups, batch, banded, persistent_ctas), TORCH_TO_CUTE[dtype]
    key = ("fwd", cdtype, head_dim, groups, activation, bool(causal), cfg)
    return compiled(key, lambda: _compile_forward(cdtype, head_dim, groups, activation, bool(causal), cfg)), cfg, key


def _band_vectors(call: GDPACall, band: Band):
    """(used_q, used_kv) for a launch over one band (FA4's seqused), or (None, None) for the whole batch."""
    return (None, None) if band.whole else used_lengths(call.q_offsets, call.kv_offsets, band)


@functools.cache
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def forward(call: GDPACall, band: Band = WHOLE, out=None, record=None, persistent: bool = True):
    """Write `out` (new when None) for the sequences of `band`: qk_scale * act(alpha * Q K^T) V. `persistent`:
    one CTA per SM walking the band's tiles (persistent.py), else FA4's grid of one CTA per tile."""
    q, k, v = (as_kernel_operand(t) for t in (call.q, call.k, call.v))
    out = _empty_like(q) if out is None else out
    batch = call.batch
    if q.shape[0] == 0 or batch == 0:
        return out
    if k.shape[0] == 0:  # no keys anywhere: min(Lq, Lk) = 0 for every sequence, an empty sum each
        return out.zero_() if band.lo == 0 else out
    ctas = sm_count(q.device) if persistent else 0
    fn, cfg, key = forward_kernel(
        q.dtype, call.head_dim, call.groups, call.activation, call.causal, batch, not band.whole, ctas
    )
    with torch.cuda.device(q.device):
        used_q, used_k = _band_vectors(call, band)
        cu_blocks, multiplier = None, call.groups if cfg.pack_gqa else 1
        if cfg.longest_first:
            cu_blocks = longest_first_order(
                call.q_offsets,
                call.kv_offsets,
                cfg.tile_m,
                multiplier,
                used_q,
                used_k,
                rows_q=q.shape[0],
                max_q=call.max_q,
                stride=cfg.persistent_ctas,
            )
        elif cfg.scheduler_hint:
            cu_blocks = tile_counts(call.q_offsets, cfg.tile_m, multiplier, used=used_q)
        qk = filled(q.device, (call.heads,), float(call.qk_scale))
        fn(
            q,
            k,
            v,
            out,
            None,
            float(call.alpha),
            call.q_offsets,
            call.kv_offsets,
            used_q,
            used_k,
            None,
            None,
            None,
            qk,
            None,
            AuxData(None, None),
            cu_blocks,
            None,
        )
    if record is not None:
        record[record_name("hopper_fwd", band)] = {
            "kernel": "GDPAForwardSm90 (FA4 FlashAttentionForwardSm90)",
            "tile": [cfg.tile_m, cfg.tile_n],
            "pack_gqa": cfg.pack_gqa,
            "scheduler": (f"persistent, {cfg.persistent_ctas} CTAs" if cfg.persistent_ctas else "FA4 one tile per CTA")
            + (" + longest first" if cfg.longest_first else (" + tile-count hint" if cfg.scheduler_hint else "")),
            "band": band.describe(),
            "activation": call.activation,
            "compile_s": COMPILE_SECONDS.get(key, 0.0),
        }
    return out


# ----------------------------------------------------------------------------------------------------------
# backward
# ----------------------------------------------------------------------------------------------------------
def _padded_rows(total: int, batch: int, tile: int) -> int:
    # FA4's per-sequence padded layout of the fp32 accumulators and row statistics: every sequence
    # starts on a tile boundary (SeqlenInfo.offset_padded)
    return (total + (batch + 1) * tile - 1) // tile * tile


def hdim_multiple(cfg: BwdConfig) -> int:
    return 64 if cfg.dKV_swapAB else 32


def _compile_backward(
    dtype,
    head_dim: int,
    groups: int,
    activation: str,
    causal: bool,
    plan: BackwardPlan,
    hint: bool,
    banded: bool,
    persistent_ctas: int = 0,
    longest_first: bool = False,
):
    act = activations.build(activation, DEVICE_OPS, fold=dtype is not TORCH_TO_CUTE[torch.float16])  # fp16: P
    kernel_cls, scheduler = GDPABackwardSm90, GridBackwardScheduler
    assert persistent_ctas or not longest_first, "longest first is a persistent grid's order"
    if persistent_ctas:
        kernel_cls = GDPABackwardSm90Persistent
        scheduler = persistent_backward_scheduler(persistent_ctas, plan.cfg.num_wg * 128, longest_first)
    kernel = kernel_cls(
        dtype,
        head_dim,
        groups,
        activation=act,
        is_causal=causal,
        cfg=plan.cfg,
        split_pointwise=plan.split,
        pair_blocks=plan.pairs,
    )
    with backward_scheduler(scheduler):
        return _compile_backward_kernel(kernel, dtype, head_dim, groups, banded, hint, longest_first)


def _compile_backward_kernel(kernel, dtype, head_dim: int, groups: int, banded: bool, hint: bool, longest_first: bool):
    sym = cute.sym_int
    total_q, total_k, h, b1 = sym(), sym(), sym(), sym()
    h_kv = sym() if groups > 1 else h
    q_rows_padded, q_accum, k_accum, q_tiles = sym(), sym(), sym(), sym()
    div = 128 // dtype.width
    q, do = (make_fake_tensor(dtype, (total_q, h, head_dim), divisibility=div) for _ in range(2))
    k, v = (make_fake_tensor(dtype, (total_k, h_kv, head_dim), divisibility=div) for _ in range(2))
    row_stats = make_fake_tensor(Float32, (h, q_rows_padded), divisibility=4)
    dq_accum = make_fake_tensor(Float32, (h, q_accum), divisibility=4)
    # the first-touch counters ride in FA4's mdQ_semaphore slot (dq_first_touch.py)
    dq_tile_counts = make_fake_tensor(Int32, (h, q_tiles), divisibility=1)
    if groups > 1:  # several query heads add into one dK, dV: fp32 accumulators + postprocess
        dk, dv = (make_fake_tensor(Float32, (h_kv, k_accum), divisibility=4) for _ in range(2))
    else:
        dk, dv = (make_fake_tensor(dtype, (total_k, h_kv, head_dim), divisibility=div) for _ in range(2))
    return cute.compile(
        kernel,
        q,
        k,
        v,
        do,
        row_stats,
        row_stats,
        dq_accum,
        dk,
        dv,
        Float32(1.0),
        *_fake_varlen(b1, banded),
        None,
        None,
        dq_tile_counts,
        None,
        None,
        AuxData(),
        None,
        # longest first: [counts (B+1) | order (B) | places], another size
        fake_i32_vector(sym()) if longest_first else (fake_i32_vector(b1) if hint else None),
        fake_stream(),
        options="--enable-tvm-ffi",
    )


def backward_kernel(
    dtype: torch.dtype,
    head_dim: int,
    groups: int,
    activation: str,
    causal: bool,
    batch: int,
    max_q: int,
    max_kv: int,
    banded: bool = False,
    persistent_ctas: int = 0,
):
    """(compiled backward main kernel, its plan, its cache key); compiles on first use. `persistent_ctas` > 0:
    a persistent grid of that many CTAs (persistent_bwd.py); 0: FA4's one CTA per key tile."""
    plan, cdtype = backward_plan(head_dim, bool(causal), max_q, max_kv), TORCH_TO_CUTE[dtype]
    hint = batch > SCHEDULER_HINT_MIN_BATCH
    longest_first = forward_config(head_dim, groups, batch, banded, persistent_ctas).longest_first  # the forward's rule
    hint = hint and not longest_first  # the order's operand replaces the hint (one kernel whatever the batch)
    key = ("bwd", cdtype, head_dim, groups, activation, bool(causal), plan, hint, banded)
    key += (("persistent", int(persistent_ctas)),) if persistent_ctas else ()  # FA4's grid keeps its old key
    key += (("longest first",),) if longest_first else ()
    args = (cdtype, head_dim, groups, activation, bool(causal), plan, hint, banded, int(persistent_ctas), longest_first)
    return compiled(key, lambda: _compile_backward(*args)), plan, key


def backward(call: GDPACall, do, band: Band = WHOLE, out=None, record=None, persistent: bool = False):
    """(dq, dk, dv) like (q, k, v) with the rows of `band`'s sequences written (`out`: the tensors to write
    into, new when None). `persistent`: one CTA per SM walking the band's key tiles (persistent_bwd.py), else
    FA4's grid of one CTA per key tile. The Hopper backend picks one by plans.backward_walks."""
    do, q, k, v = (as_kernel_operand(t) for t in (do, call.q, call.k, call.v))
    dq, dk, dv = (_empty_like(t) for t in (q, k, v)) if out is None else out
    alpha, qk_scale = float(call.alpha), float(call.qk_scale)
    # the backward's masking (activations.MASKED_FLOOR) needs alpha > 0: act(alpha*(q.k)) with alpha < 0 is
    # act(|alpha| * ((-q).k)); dL/dq = -dL/d(-q), folded into the dQ postprocess's scale
    dq_sign = 1.0
    if alpha < 0:
        q, alpha, dq_sign = -q, -alpha, -1.0
    batch, heads, head_dim = call.batch, call.heads, call.head_dim
    heads_kv, groups = call.heads_kv, call.groups
    if q.shape[0] == 0 or k.shape[0] == 0 or batch == 0:
        if band.lo == 0:  # min(Lq, Lk) = 0 for every sequence: all of them are in this band, with zero gradients
            dq.zero_(), dk.zero_(), dv.zero_()
        return dq, dk, dv
    banded = not band.whole
    ctas = sm_count(q.device) if persistent else 0
    fn, plan, key = backward_kernel(
        q.dtype, head_dim, groups, call.activation, call.causal, batch, int(call.max_q), int(call.max_kv), banded, ctas
    )
    cfg = plan.cfg
    tile_m, tile_n, mult = cfg.m_block_size, cfg.n_block_size, hdim_multiple(cfg)
    hdim_r = (head_dim + mult - 1) // mult * mult
    hint = batch > SCHEDULER_HINT_MIN_BATCH
    dtype = cute_dtype(q)
    q_rows = _padded_rows(q.shape[0], batch, tile_m)
    q_offsets, kv_offsets = call.q_offsets, call.kv_offsets
    with torch.cuda.device(q.device):
        used_q, used_k = _band_vectors(call, band)
        # no zeros: the first key tile into a query tile stores there (accumulators.py, dq_first_touch.py)
        used = (used_q, used_k)
        dq_accum, dq_tile_counts = first_touch_dq(
            heads, q_rows, hdim_r, q_offsets, kv_offsets, used, tile_m, call.causal
        )
        # FA4's LSE and dPsum slots (one fp32 per query row, streamed with Q and dO): alpha and qk_scale
        rows_alloc = (heads, _bucket(q_rows))
        alpha_rows = filled(q.device, rows_alloc, alpha)
        qk_rows = filled(q.device, rows_alloc, qk_scale)
        if groups > 1:
            k_rows = _padded_rows(k.shape[0], batch, tile_n)
            dk_out, dv_out = (
                zeros_for_band(heads_kv, k_rows, hdim_r, kv_offsets, used_k, tile_n, int(call.max_kv)) for _ in "kv"
            )
        else:
            dk_out, dv_out = dk, dv
        longest = ("longest first",) in key
        cu_blocks_q = tile_counts(q_offsets, tile_m, used=used_q) if hint else None
        # the main kernel's scheduling operand, and GQA's dK/dV postprocess's (batch order)
        cu_blocks_k = tile_counts(kv_offsets, tile_n, used=used_k) if hint and (groups > 1 or not longest) else None
        walk = cu_blocks_k
        if longest:  # FA4's backward swaps the roles: key tiles, their queries' cost
            walk = longest_first_order(
                kv_offsets, q_offsets, tile_n, 1, used_k, used_q, rows_q=k.shape[0], max_q=call.max_kv, stride=ctas
            )
        # FA4 scales dK by its softmax_scale in the epilogue and dQ in the postprocess: alpha * qk_scale
        # there, so the pointwise computes dS without either
        grad_scale = alpha * qk_scale
        fn(
            q,
            k,
            v,
            do,
            alpha_rows,
            qk_rows,
            dq_accum,
            dk_out,
            dv_out,
            grad_scale,
            q_offsets,
            kv_offsets,
            used_q,
            used_k,
            None,
            None,
            dq_tile_counts,
            None,
            None,
            AuxData(None, None),
            None,
            walk,
        )
        post_threads = 128 if cfg.dQ_single_wg else cfg.num_wg * 128
        postprocess(
            dq_accum,
            dq,
            dq_sign * grad_scale,
            q_offsets,
            used_q,
            dtype,
            head_dim,
            tile_m,
            post_threads,
            cfg.AtomLayoutMdQ,
            cfg.dQ_swapAB,
            mult,
            cu_blocks_q,
        )
        if groups > 1:
            dv_scale = activations.dv_scale(call.activation, grad_scale, q.dtype != torch.float16)
            for accum, grad, scale in ((dk_out, dk, grad_scale), (dv_out, dv, dv_scale)):
                postprocess(
                    accum,
                    grad,
                    scale,
                    kv_offsets,
                    used_k,
                    dtype,
                    head_dim,
                    tile_n,
                    cfg.num_wg * 128,
                    cfg.AtomLayoutNdKV,
                    cfg.dKV_swapAB,
                    mult,
                    cu_blocks_k,
                )
    if record is not None:
        record[record_name("hopper_bwd", band)] = {
            "kernel": "GDPABackwardSm90 (FA4 FlashAttentionBackwardSm90) + FA4 dQ postprocess",
            "tile": [tile_m, tile_n],
            "pointwise": "split" if plan.split else "fused",
            "query_blocks_per_step": 2 if plan.pairs else 1,
            "gqa_accumulators": groups > 1,
            "scheduler": (f"persistent, {ctas} CTAs" if ctas else "FA4 one key tile per CTA")
            + (" + longest first" if longest else (" + tile-count hint" if hint else "")),
            "band": band.describe(),
            "activation": call.activation,
            "compile_s": COMPILE_SECONDS.get(key, 0.0),
        }
    return dq, dk, dv


def _bucket(n: int) -> int:
    return 1 << max(int(n) - 1, 1).bit_length()  # cached row tensors: one allocation per power-of-two size


__all__ = [
    "ForwardConfig",
    "backward",
    "backward_plan",
    "compiled_keys",
    "forward",
    "forward_config",
    "use_kernel_dir",
]
