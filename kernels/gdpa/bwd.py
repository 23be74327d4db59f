"""GDPA backward (DESIGN §3): dV = Pᵀ dO; dP = dO Vᵀ; dS = act'(S)·qk_scale·alpha ⊙ dP; dQ = dS K; dK = dSᵀ Q.

No softmax means no LSE and no row-sum preprocessing: each score tile is recomputed from Q and K.
`dkdv` owns a BLOCK_N tile of keys of one KV head and loops over every query row (and, for GQA, every
query head of its group) accumulating dK and dV in registers. dQ comes one of two ways:
- split (7 GEMM-equivalents per tile pair): a separate `dq` kernel owns a BLOCK_M tile of queries and
  recomputes S and dP for it; no atomics, deterministic.
- atomic (5 GEMM-equivalents): `dkdv` also forms dS·K for its key tile and adds it into an fp32 dQ
  accumulator, either with per-element atomics (ATOMIC_DQ=1) or with TMA bulk reductions through a
  host-built descriptor (ATOMIC_DQ=2); summation order then varies from run to run.
The linear scales (qk_scale on P, qk_scale·alpha on dS) are applied once per output element in the
epilogues, not per score. Every output row is written, including rows of sequences whose partner side
is empty (their gradient is zero).
"""
import torch
import triton
import triton.language as tl

from kernels.gdpa.activations import act_fwd_bwd_scaled
from kernels.gdpa.schedule import locate_tile
from kernels.gdpa.tiles import triton_config


@triton.jit
def gdpa_bwd_dkdv_kernel(Q, K, V, DO, DK, DV, DQ_ACC, q_offsets, kv_offsets,
                         stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh,
                         stride_dom, stride_doh, stride_dkm, stride_dkh, stride_dvm, stride_dvh,
                         stride_dqm, stride_dqh,
                         alpha, qk_scale, max_q_bucket, max_kv_bucket,
                         rows_q_bucket, rows_kv_bucket,
                         tile_offsets, n_seqs, search_steps,
                         HKV: tl.constexpr, GROUPS: tl.constexpr, D: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr,
                         HW_TANH: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                         ATOMIC_DQ: tl.constexpr = 0, COMPACT: tl.constexpr = False):
    b, hk, pid_n = locate_tile(tile_offsets, n_seqs, search_steps, HKV, COMPACT)
    if b >= n_seqs:
        return
    kv_start = tl.load(kv_offsets + b).to(tl.int64)
    lk = (tl.load(kv_offsets + b + 1) - kv_start).to(tl.int32)
    n0 = pid_n * BLOCK_N
    if n0 >= lk:
        return
    q_start = tl.load(q_offsets + b).to(tl.int64)
    lq = (tl.load(q_offsets + b + 1) - q_start).to(tl.int32)

    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    kv_ok = offs_n < lk
    kv_rows = (kv_start + offs_n)[:, None]
    k = tl.load(K + kv_rows * stride_km + hk * stride_kh + offs_d[None, :], mask=kv_ok[:, None], other=0.0)
    v = tl.load(V + kv_rows * stride_vm + hk * stride_vh + offs_d[None, :], mask=kv_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, D], dtype=tl.float32)
    lo = 0
    if CAUSAL:
        lo = (n0 // BLOCK_M) * BLOCK_M  # query rows i < n0 see none of these keys
    for g in range(GROUPS):
        h = hk * GROUPS + g
        q_ptrs = Q + (q_start + offs_m)[:, None] * stride_qm + h * stride_qh + offs_d[None, :]
        do_ptrs = DO + (q_start + offs_m)[:, None] * stride_dom + h * stride_doh + offs_d[None, :]
        for start_m in range(lo, lq, BLOCK_M):
            rows = start_m + offs_m
            q_ok = rows < lq
            q = tl.load(q_ptrs + start_m * stride_qm, mask=q_ok[:, None], other=0.0)
            do = tl.load(do_ptrs + start_m * stride_dom, mask=q_ok[:, None], other=0.0)
            s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)  # [BLOCK_N, BLOCK_M]
            p_t, dact_t = act_fwd_bwd_scaled(s_t, alpha, ACT, HW_TANH)
            keep = q_ok[None, :] & kv_ok[:, None]
            if CAUSAL:
                keep = keep & (offs_n[:, None] <= rows[None, :])
            p_t = tl.where(keep, p_t, 0.0)
            dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PRECISION)
            dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
            ds_t = tl.where(keep, dact_t * dp_t, 0.0).to(q.dtype)
            dk = tl.dot(ds_t, q, dk, input_precision=PRECISION)
            if ATOMIC_DQ == 1:
                dq_part = tl.dot(tl.trans(ds_t), k, input_precision=PRECISION)  # [BLOCK_M, D], unscaled
                dq_ptrs = DQ_ACC + (q_start + rows)[:, None] * stride_dqm + h * stride_dqh + offs_d[None, :]
                tl.atomic_add(dq_ptrs, dq_part, mask=q_ok[:, None], sem="relaxed")
            elif ATOMIC_DQ == 2:
                dq_part = tl.dot(tl.trans(ds_t), k, input_precision=PRECISION)
                # DQ_ACC is a [ΣLq, H·D] descriptor: rows past this sequence's end carry zeros (masked
                # dS), so reducing them into the next sequence's rows adds nothing
                DQ_ACC.atomic_add([(q_start + start_m).to(tl.int32), h * D], dq_part)

    ds_scale = qk_scale * alpha
    tl.store(DK + kv_rows * stride_dkm + hk * stride_dkh + offs_d[None, :],
             (dk * ds_scale).to(DK.dtype.element_ty), mask=kv_ok[:, None])
    tl.store(DV + kv_rows * stride_dvm + hk * stride_dvh + offs_d[None, :],
             (dv * qk_scale).to(DV.dtype.element_ty), mask=kv_ok[:, None])


@triton.jit
def gdpa_bwd_dq_kernel(Q, K, V, DO, DQ, q_offsets, kv_offsets,
                       stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh,
                       stride_dom, stride_doh, stride_dqm, stride_dqh,
                       alpha, qk_scale, max_q_bucket, max_kv_bucket,
                       rows_q_bucket, rows_kv_bucket,
                       tile_offsets, n_seqs, search_steps,
                       H: tl.constexpr, GROUPS: tl.constexpr, D: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr,
                       HW_TANH: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                       COMPACT: tl.constexpr = False):
    b, h, pid_m = locate_tile(tile_offsets, n_seqs, search_steps, H, COMPACT)
    if b >= n_seqs:
        return
    q_start = tl.load(q_offsets + b).to(tl.int64)
    lq = (tl.load(q_offsets + b + 1) - q_start).to(tl.int32)
    m0 = pid_m * BLOCK_M
    if m0 >= lq:
        return
    kv_start = tl.load(kv_offsets + b).to(tl.int64)
    lk = (tl.load(kv_offsets + b + 1) - kv_start).to(tl.int32)
    hk = h // GROUPS

    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_ok = offs_m < lq
    q_rows = (q_start + offs_m)[:, None]
    q = tl.load(Q + q_rows * stride_qm + h * stride_qh + offs_d[None, :], mask=q_ok[:, None], other=0.0)
    do = tl.load(DO + q_rows * stride_dom + h * stride_doh + offs_d[None, :], mask=q_ok[:, None], other=0.0)
    k_ptrs = K + (kv_start + offs_n)[:, None] * stride_km + hk * stride_kh + offs_d[None, :]
    v_ptrs = V + (kv_start + offs_n)[:, None] * stride_vm + hk * stride_vh + offs_d[None, :]
    dq = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    hi = lk
    if CAUSAL:
        hi = tl.minimum(lk, m0 + BLOCK_M)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        kv_ok = cols < lk
        k = tl.load(k_ptrs + start_n * stride_km, mask=kv_ok[:, None], other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vm, mask=kv_ok[:, None], other=0.0)
        _, dact = act_fwd_bwd_scaled(tl.dot(q, tl.trans(k), input_precision=PRECISION), alpha, ACT,
                                     HW_TANH)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        keep = kv_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        ds = tl.where(keep, dact * dp, 0.0)
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)
    tl.store(DQ + q_rows * stride_dqm + h * stride_dqh + offs_d[None, :],
             (dq * (qk_scale * alpha)).to(DQ.dtype.element_ty), mask=q_ok[:, None])


# (BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]; tiles.py)
# Winners of the 2026-11-30 H200 sweeps (docs/tuning/): dkdv 64/128/8/3 on every shape (no config
# with two CTAs per SM comes close: capping its registers spills dK/dV); dq 128/64/8/3, 64/32/4/3 capped
# at 168 registers +4% at L = 256.
DKDV_CONFIGS = [
    (64, 128, 8, 3),
    (64, 64, 4, 3),
]
DQ_CONFIGS = [
    (128, 64, 8, 3),
    (128, 64, 8, 2),
    (64, 32, 4, 3, 168),
]
# candidates for the atomic-dQ dK/dV kernel (one more GEMM and a [BLOCK_M, D] fp32 tile live per step)
ATOMIC_DKDV_CONFIGS = [
    (64, 128, 8, 3),
    (64, 128, 8, 2),
    (64, 64, 4, 3),
    (128, 64, 8, 2),
]
INTERPRET_CONFIG = (16, 16, 4, 1)


def set_dq_block(nargs):
    """A host-built dQ descriptor's block is one BLOCK_M × D tile; the config decides BLOCK_M."""
    acc = nargs.get("DQ_ACC")
    if hasattr(acc, "block_shape"):
        acc.block_shape = [nargs["BLOCK_M"], nargs["D"]]


def _zero_dq_acc(nargs, reset_only=False):
    # autotuning launches the kernel many times: the atomic dQ accumulator must start at zero each time
    acc = nargs.get("DQ_ACC")
    acc = getattr(acc, "base", acc)
    if isinstance(acc, torch.Tensor):
        acc.zero_()


def _tuned(kernel, configs, key, **kw):
    return triton.autotune(
        configs=[triton_config(cfg, pre_hook=kw.get("config_hook")) for cfg in configs],
        key=["max_q_bucket", "max_kv_bucket", "rows_q_bucket", "rows_kv_bucket", "GROUPS", "D", "ACT", "CAUSAL",
             "COMPACT", *key],
        pre_hook=kw.get("pre_hook"),
    )(kernel)


gdpa_bwd_dkdv_kernel_tuned = _tuned(gdpa_bwd_dkdv_kernel, DKDV_CONFIGS, ["HKV", "ATOMIC_DQ"],
                                    config_hook=set_dq_block, pre_hook=_zero_dq_acc)
gdpa_bwd_dq_kernel_tuned = _tuned(gdpa_bwd_dq_kernel, DQ_CONFIGS, ["H"])
