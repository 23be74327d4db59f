"""GDPA backward (docs/DESIGN.md §3): dV = Pᵀ dO; dP = dO Vᵀ; dS = act'(S)·qk_scale·alpha ⊙ dP;
dQ = dS K; dK = dSᵀ Q.

No softmax means no LSE and no row-sum preprocessing: each score tile is recomputed from Q and K.
`dkdv` owns a BLOCK_N tile of keys of one KV head and loops over every query row (and, for GQA, every
query head of its group) accumulating dK and dV in registers. A separate `dq` kernel owns a BLOCK_M
tile of queries and recomputes S and dP for it: 7 GEMM-equivalents per tile pair for the 5 the FLOP
convention counts, but no atomics and deterministic (the 5-GEMM atomic-dQ form measured 32–45% slower:
PERF.md, "Rejected variants").
The linear scales (qk_scale, and the factor act_fwd_bwd_scaled's P' leaves out, on P; qk_scale·alpha on
dS) are applied once per output element in the epilogues, not per score. Every output row is written,
including rows of sequences whose partner side is empty (their gradient is zero).
"""

import triton
import triton.language as tl

from kernels.gdpa import launch
from kernels.gdpa.activations import act_fwd_bwd_scaled, p_fold
from kernels.gdpa.bands import WHOLE, Band, sequence_in_band
from kernels.gdpa.call import GDPACall
from kernels.gdpa.grid_math import cdiv, rows_grid
from kernels.gdpa.stages import dkdv_step, store_dkdv
from kernels.gdpa.tiles import triton_config


@triton.jit(do_not_specialize=["n_rows"])
def gdpa_bwd_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    DK,
    DV,
    q_offsets,
    kv_offsets,
    stride_qm,
    stride_qh,
    stride_km,
    stride_kh,
    stride_vm,
    stride_vh,
    stride_dom,
    stride_doh,
    stride_dkm,
    stride_dkh,
    stride_dvm,
    stride_dvh,
    alpha,
    qk_scale,
    max_q_bucket,
    max_kv_bucket,
    rows_q_bucket,
    rows_kv_bucket,
    band_lo,
    band_hi,
    n_rows,
    HKV: tl.constexpr,
    GROUPS: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACT: tl.constexpr,
    HW_TANH: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
    SPLIT_ROWS: tl.constexpr,
):
    # grid: (key tiles of the longest sequence of the band, sequences · KV heads[, folded over z]: grid_math.rows_grid);
    # a tile past its sequence's end, or of a sequence outside the band [band_lo, band_hi) (bands.py), exits
    pid_n = tl.program_id(0)
    row = tl.program_id(1)
    if SPLIT_ROWS:
        row += tl.program_id(2) * tl.num_programs(1)
        if row >= n_rows:
            return
    b = row // HKV
    hk = row % HKV
    q_start, lq, kv_start, lk, outside = sequence_in_band(q_offsets, kv_offsets, b, band_lo, band_hi)
    n0 = pid_n * BLOCK_N
    if (n0 >= lk) | outside:
        return

    offs_n = n0 + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    kv_ok = offs_n < lk
    kv_rows = (kv_start + offs_n)[:, None]
    k = tl.load(K + kv_rows * stride_km + hk * stride_kh + offs_d[None, :], mask=kv_ok[:, None], other=0.0)
    v = tl.load(V + kv_rows * stride_vm + hk * stride_vh + offs_d[None, :], mask=kv_ok[:, None], other=0.0)
    FOLD: tl.constexpr = Q.dtype.element_ty != tl.float16  # P' in fp16's range? (activations.py)
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
            p_t, dact_t = act_fwd_bwd_scaled(s_t, alpha, ACT, HW_TANH, FOLD)
            keep = q_ok[None, :] & kv_ok[:, None]
            if CAUSAL:
                keep = keep & (offs_n[:, None] <= rows[None, :])
            dk, dv, _ = dkdv_step(k, v, q, do, p_t, dact_t, keep, dk, dv, PRECISION)

    ds_scale = qk_scale * alpha
    dv_scale = qk_scale * p_fold(alpha, ACT, FOLD)  # what P' left out
    store_dkdv(
        DK, DV, kv_rows, hk, offs_d, kv_ok, dk, dv, ds_scale, dv_scale, stride_dkm, stride_dkh, stride_dvm, stride_dvh
    )


@triton.jit(do_not_specialize=["n_rows"])
def gdpa_bwd_dq_kernel(
    Q,
    K,
    V,
    DO,
    DQ,
    q_offsets,
    kv_offsets,
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
    alpha,
    qk_scale,
    max_q_bucket,
    max_kv_bucket,
    rows_q_bucket,
    rows_kv_bucket,
    band_lo,
    band_hi,
    n_rows,
    H: tl.constexpr,
    GROUPS: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACT: tl.constexpr,
    HW_TANH: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
    SPLIT_ROWS: tl.constexpr,
):
    # grid: (query tiles of the longest sequence of the band, sequences · heads[, folded over z]: grid_math.rows_grid);
    # a tile past its sequence's end, or of a sequence outside the band [band_lo, band_hi) (bands.py), exits
    pid_m = tl.program_id(0)
    row = tl.program_id(1)
    if SPLIT_ROWS:
        row += tl.program_id(2) * tl.num_programs(1)
        if row >= n_rows:
            return
    b = row // H
    h = row % H
    q_start, lq, kv_start, lk, outside = sequence_in_band(q_offsets, kv_offsets, b, band_lo, band_hi)
    m0 = pid_m * BLOCK_M
    if (m0 >= lq) | outside:
        return
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
        _, dact = act_fwd_bwd_scaled(tl.dot(q, tl.trans(k), input_precision=PRECISION), alpha, ACT, HW_TANH, True)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        keep = kv_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        ds = tl.where(keep, dact * dp, 0.0)
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PRECISION)
    tl.store(
        DQ + q_rows * stride_dqm + h * stride_dqh + offs_d[None, :],
        (dq * (qk_scale * alpha)).to(DQ.dtype.element_ty),
        mask=q_ok[:, None],
    )


# (BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]; tiles.py), autotuned per launch.TUNING_KEY.
# PERF.md v1–v3: dkdv 64/128/8/3 wins every shape (with two CTAs per SM its capped registers spill dK/dV);
# dq 128/64/8/3, and 64/32/4/3 capped at 168 registers +4% at L = 256.
DKDV_CONFIGS = [
    (64, 128, 8, 3),
    (64, 64, 4, 3),
]
DQ_CONFIGS = [
    (128, 64, 8, 3),
    (128, 64, 8, 2),
    (64, 32, 4, 3, 168),
]

gdpa_bwd_dkdv_kernel_tuned = triton.autotune(
    configs=[triton_config(cfg) for cfg in DKDV_CONFIGS],
    key=[*launch.TUNING_KEY, "HKV", "GROUPS", "D", "ACT", "CAUSAL"],
)(gdpa_bwd_dkdv_kernel)
gdpa_bwd_dq_kernel_tuned = triton.autotune(
    configs=[triton_config(cfg) for cfg in DQ_CONFIGS],
    key=[*launch.TUNING_KEY, "H", "GROUPS", "D", "ACT", "CAUSAL"],
)(gdpa_bwd_dq_kernel)


def _inputs(call: GDPACall, do, band: Band) -> dict:
    """Arguments the dK/dV and dQ kernels share."""
    q, k, v = call.q, call.k, call.v
    return dict(
        **launch.operands(q=q, k=k, v=v, do=do),
        q_offsets=call.q_offsets,
        kv_offsets=call.kv_offsets,
        alpha=call.alpha,
        qk_scale=call.qk_scale,
        **launch.tuning_key(call, band),
        GROUPS=call.groups,
        **launch.common_constants(q, call.activation, call.causal),
    )


def backward(call: GDPACall, do, band: Band = WHOLE, dkdv_tiles=None, dq_tiles=None, out=None, record=None):
    """(dq, dk, dv) with the rows of `band`'s sequences written (`out`: the three tensors to write into,
    new when None): one dK/dV and one dQ launch (tiles None: autotuned); with `record`, record["dkdv"] and
    record["dq"] (with the band when not the whole batch) say what ran (launch.run). Every row of the band
    is written, zeros where the partner side of a sequence is empty."""
    q, k, v = call.q, call.k, call.v
    do = do.contiguous()
    dq, dk, dv = (launch.new_output(t) for t in (q, k, v)) if out is None else out
    n_seqs = call.batch
    if n_seqs == 0:
        return dq, dk, dv
    shared = _inputs(call, do, band)
    max_q = band.bound(call.max_q, call.self_attention)
    max_kv = band.bound(call.max_kv, call.self_attention)
    if k.shape[0] > 0:
        rows = launch.row_args(n_seqs * call.heads_kv)
        args = dict(shared, **launch.operands(dk=dk, dv=dv), **rows, HKV=call.heads_kv)
        launch.run(
            gdpa_bwd_dkdv_kernel,
            gdpa_bwd_dkdv_kernel_tuned,
            args,
            lambda block_m, block_n: rows_grid(cdiv(max(max_kv, 1), block_n), n_seqs * call.heads_kv),
            dkdv_tiles,
            q.device,
            record,
            launch.record_name("dkdv", band),
        )
    if q.shape[0] > 0:
        args = dict(shared, **launch.operands(dq=dq), **launch.row_args(n_seqs * call.heads), H=call.heads)
        launch.run(
            gdpa_bwd_dq_kernel,
            gdpa_bwd_dq_kernel_tuned,
            args,
            lambda block_m, block_n: rows_grid(cdiv(max(max_q, 1), block_m), n_seqs * call.heads),
            dq_tiles,
            q.device,
            record,
            launch.record_name("dq", band),
        )
    return dq, dk, dv
