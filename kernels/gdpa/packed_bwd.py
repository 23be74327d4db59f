"""Packed GDPA backward: one program per (pack, KV head) owns every query and key of its sequences.

So one unit computes all three gradients of its pack in one pass, 5 GEMMs per score block and no atomics
(bwd.py needs a dK/dV and a dQ kernel, 7 GEMMs, because its programs own only a tile of one side). The
pack's PACK keys are the M side of every GEMM (wgmma-sized, 128 on the H200); query sub-blocks of BLOCK_M
rows stream past them:

    Sᵀ = K Qᵀ;  Pᵀ, act'ᵀ;  dV += Pᵀ dO;  dPᵀ = V dOᵀ;  dSᵀ = act'ᵀ ⊙ dPᵀ;  dK += dSᵀ Q;  dQᵀ = Kᵀ dSᵀ

A sub-block's dQ is complete when it is computed (its queries have no keys outside the pack), so it is
stored at once, scaled; dK and dV stay in registers until the end: 2 × [128, 128] fp32 = 128 registers a
thread at 8 warps, which is why BLOCK_M is 32 or 16 at D = 128 (at 64 the four [128, BLOCK_M] fp32 score
tiles would push the total past 255 and spill). Every dQ row of a packed sequence and every dK/dV row is
written once, zeros where the other side is empty; rows of other sequences are never touched.
"""

import torch
import triton
import triton.language as tl

from kernels.gdpa import launch
from kernels.gdpa.activations import act_fwd_bwd_scaled, p_fold
from kernels.gdpa.call import GDPACall
from kernels.gdpa.packed_fwd import plan_arguments, run
from kernels.gdpa.packed_plan import PackPlan, load_pack, partner_ranges
from kernels.gdpa.stages import dkdv_step, store_dkdv


@triton.jit
def _bwd_unit(
    Q,
    K,
    V,
    DO,
    DQ,
    DK,
    DV,
    Plan,
    p,
    hk,
    max_packs,
    stride_qm,
    stride_qh,
    stride_km,
    stride_kh,
    stride_vm,
    stride_vh,
    stride_dom,
    stride_doh,
    stride_dqm,
    stride_dqh,
    stride_dkm,
    stride_dkh,
    stride_dvm,
    stride_dvh,
    alpha,
    qk_scale,
    GROUPS: tl.constexpr,
    D: tl.constexpr,
    PACK: tl.constexpr,
    MAXSEQ: tl.constexpr,
    BLOCK_M: tl.constexpr,
    ACT: tl.constexpr,
    HW_TANH: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):
    q0, k0, q_lo, q_hi, k_lo, k_hi = load_pack(Plan, p, max_packs, MAXSEQ)
    n_q = tl.max(q_hi, axis=0)
    n_k = tl.max(k_hi, axis=0)
    offs_n = tl.arange(0, PACK)
    offs_d = tl.arange(0, D)
    kv_ok = offs_n < n_k
    # each key row's queries: the pack rows [q_start, q_end) of its sequence, computed once per unit
    q_start, q_end = partner_ranges(offs_n, k_lo, k_hi, q_lo, q_hi)
    kv_rows = (k0 + offs_n)[:, None]
    k = tl.load(K + kv_rows * stride_km + hk * stride_kh + offs_d[None, :], mask=kv_ok[:, None], other=0.0)
    v = tl.load(V + kv_rows * stride_vm + hk * stride_vh + offs_d[None, :], mask=kv_ok[:, None], other=0.0)
    dk = tl.zeros([PACK, D], dtype=tl.float32)
    dv = tl.zeros([PACK, D], dtype=tl.float32)
    ds_scale = qk_scale * alpha
    FOLD: tl.constexpr = Q.dtype.element_ty != tl.float16  # P' in fp16's range? (activations.py)
    dv_scale = qk_scale * p_fold(alpha, ACT, FOLD)  # what P' left out
    for g in range(GROUPS):
        h = hk * GROUPS + g
        for m0 in range(0, n_q, BLOCK_M):
            offs_m = m0 + tl.arange(0, BLOCK_M)
            q_ok = offs_m < n_q
            q_rows = (q0 + offs_m)[:, None]
            q = tl.load(Q + q_rows * stride_qm + h * stride_qh + offs_d[None, :], mask=q_ok[:, None], other=0.0)
            do = tl.load(DO + q_rows * stride_dom + h * stride_doh + offs_d[None, :], mask=q_ok[:, None], other=0.0)
            s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)  # [PACK, BLOCK_M]
            p_t, dact_t = act_fwd_bwd_scaled(s_t, alpha, ACT, HW_TANH, FOLD)
            keep = (q_start[:, None] <= offs_m[None, :]) & (offs_m[None, :] < q_end[:, None])
            if CAUSAL:
                keep = keep & (offs_n[:, None] <= offs_m[None, :])  # a sequence's key rows are its query rows
            dk, dv, ds_t = dkdv_step(k, v, q, do, p_t, dact_t, keep, dk, dv, PRECISION)
            dq_t = tl.dot(tl.trans(k), ds_t, input_precision=PRECISION)  # [D, BLOCK_M]: M = D keeps wgmma sizes
            dq_at = (q0 + offs_m)[None, :] * stride_dqm + h * stride_dqh + offs_d[:, None]
            tl.store(DQ + dq_at, (dq_t * ds_scale).to(DQ.dtype.element_ty), mask=q_ok[None, :])
    store_dkdv(
        DK, DV, kv_rows, hk, offs_d, kv_ok, dk, dv, ds_scale, dv_scale, stride_dkm, stride_dkh, stride_dvm, stride_dvh
    )


@triton.jit
def packed_bwd_kernel(
    Q,
    K,
    V,
    DO,
    DQ,
    DK,
    DV,
    Plan,
    Counter,
    max_packs,
    stride_qm,
    stride_qh,
    stride_km,
    stride_kh,
    stride_vm,
    stride_vh,
    stride_dom,
    stride_doh,
    stride_dqm,
    stride_dqh,
    stride_dkm,
    stride_dkh,
    stride_dvm,
    stride_dvh,
    alpha,
    qk_scale,
    rows_q_bucket,
    band_lo,
    band_hi,
    HKV: tl.constexpr,
    GROUPS: tl.constexpr,
    D: tl.constexpr,
    PACK: tl.constexpr,
    MAXSEQ: tl.constexpr,
    BLOCK_M: tl.constexpr,
    ACT: tl.constexpr,
    HW_TANH: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):
    n_units = tl.load(Plan) * HKV
    nprog = tl.num_programs(0)
    u = tl.program_id(0)
    while u < n_units:
        nxt = tl.atomic_add(Counter, 1, sem="relaxed") + nprog
        _bwd_unit(
            Q,
            K,
            V,
            DO,
            DQ,
            DK,
            DV,
            Plan,
            u // HKV,
            u % HKV,
            max_packs,
            stride_qm,
            stride_qh,
            stride_km,
            stride_kh,
            stride_vm,
            stride_vh,
            stride_dom,
            stride_doh,
            stride_dqm,
            stride_dqh,
            stride_dkm,
            stride_dkh,
            stride_dvm,
            stride_dvh,
            alpha,
            qk_scale,
            GROUPS,
            D,
            PACK,
            MAXSEQ,
            BLOCK_M,
            ACT,
            HW_TANH,
            CAUSAL,
            PRECISION,
        )
        u = nxt


# (BLOCK_M, num_warps, num_stages; registers from ptxas for sm90, bf16, D 128: docs/experiments/
# packed_compile.py); speed measured once, per config not yet (PERF.md, "Packed short sequences"): one 8-warp CTA
# per SM at 255 registers (32-row sub-blocks spill 84 B, as bwd.py's shipped dK/dV kernel spills 92; 16-row
# ones none); 16 warps cap each thread at 128 and spill 236 B, traded for twice the warps to hide the
# loads; 64-row sub-blocks only where D <= 64 leaves registers for them (pruned below).
BWD_CONFIGS = [
    (32, 8, 2),
    (16, 8, 2),
    (32, 16, 2),
    (64, 8, 2),
]
INTERPRETER_TILES = (16, 4, 1)
PROGRAMS_PER_SM = 2


def tile_config(tiles) -> triton.Config:
    m, w, s = tiles
    return triton.Config({"BLOCK_M": m}, num_warps=w, num_stages=s)


def _prune(configs, named_args, **kwargs):
    args = {**named_args, **kwargs}
    # dK and dV accumulators: PACK * D fp32 each, spread over the CTA's threads; keep their share <= 128
    # registers and a sub-block no taller than the pack
    kept = [
        c
        for c in configs
        if 2 * args["PACK"] * args["D"] <= 128 * 32 * c.num_warps
        and c.kwargs["BLOCK_M"] <= args["PACK"]
        and (c.kwargs["BLOCK_M"] < 64 or args["D"] <= 64)
    ]
    return kept or configs[:1]


packed_bwd_kernel_tuned = triton.autotune(
    configs=[tile_config(t) for t in BWD_CONFIGS],
    key=["rows_q_bucket", "band_lo", "band_hi", "HKV", "GROUPS", "D", "PACK", "ACT", "CAUSAL"],
    prune_configs_by={"early_config_prune": _prune},
    reset_to_zero=["Counter"],  # each timing run must find the units untaken
)(packed_bwd_kernel)


def backward(call: GDPACall, do: torch.Tensor, plan: PackPlan, out, record=None, name: str = "packed_bwd"):
    """Write the dq, dk, dv rows (`out`) of the plan's sequences (one persistent launch, tiles autotuned)."""
    q, k, v = call.q, call.k, call.v
    dq, dk, dv = out
    operands = launch.operands(q=q, k=k, v=v, do=do, dq=dq, dk=dk, dv=dv)
    args = dict(**operands, HKV=call.heads_kv, **plan_arguments(call, plan))
    units = lambda meta: plan.max_packs * call.heads_kv
    run(
        packed_bwd_kernel,
        packed_bwd_kernel_tuned,
        args,
        units,
        PROGRAMS_PER_SM,
        q.device,
        record,
        name,
        INTERPRETER_TILES,
        tile_config,
    )
    return dq, dk, dv
