"""GDPA forward: O_b = (act(alpha · Q_b K_bᵀ) · qk_scale) V_b over a jagged batch (docs/DESIGN.md §3).

One program computes one BLOCK_M tile of query rows of one (sequence, head) and streams that
sequence's keys in BLOCK_N tiles. There is no running max and no rescale: each tile's contribution is
final, so the inner loop is GEMM → activation → GEMM. Key tiles that lie wholly inside the sequence
(and, for causal, wholly left of the diagonal) run without masks; only the last (or diagonal) tiles pay
for masking. Masked loads, never act(0) = 0, keep a tile from reading the next sequence's keys.
"""

import triton
import triton.language as tl

from kernels.gdpa import launch
from kernels.gdpa.activations import act_fwd_scaled, p_fold
from kernels.gdpa.bands import WHOLE, Band, sequence_in_band
from kernels.gdpa.call import GDPACall
from kernels.gdpa.grid_math import cdiv, rows_grid
from kernels.gdpa.tiles import triton_config


@triton.jit
def _fwd_tile(
    acc,
    q,
    k_ptrs,
    v_ptrs,
    start_n,
    lk,
    offs_m,
    offs_n,
    stride_km,
    stride_vm,
    alpha,
    ACT: tl.constexpr,
    HW_TANH: tl.constexpr,
    CAUSAL: tl.constexpr,
    MASKED: tl.constexpr,
    PRECISION: tl.constexpr,
):
    cols = start_n + offs_n
    if MASKED:
        kv_ok = cols < lk
        k = tl.load(k_ptrs + start_n * stride_km, mask=kv_ok[:, None], other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vm, mask=kv_ok[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs + start_n * stride_km)
        v = tl.load(v_ptrs + start_n * stride_vm)
    p = act_fwd_scaled(tl.dot(q, tl.trans(k), input_precision=PRECISION), alpha, ACT, HW_TANH, v.dtype != tl.float16)
    if MASKED:
        keep = kv_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        p = tl.where(keep, p, 0.0)
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
    return acc


@triton.jit(do_not_specialize=["n_rows"])
def gdpa_fwd_kernel(
    Q,
    K,
    V,
    Out,
    q_offsets,
    kv_offsets,
    stride_qm,
    stride_qh,
    stride_km,
    stride_kh,
    stride_vm,
    stride_vh,
    stride_om,
    stride_oh,
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
    # int64 row offsets: batches beyond 2^31 elements must not wrap
    q_ptrs = Q + (q_start + offs_m)[:, None] * stride_qm + h * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=(offs_m < lq)[:, None], other=0.0)
    k_ptrs = K + (kv_start + offs_n)[:, None] * stride_km + hk * stride_kh + offs_d[None, :]
    v_ptrs = V + (kv_start + offs_n)[:, None] * stride_vm + hk * stride_vh + offs_d[None, :]

    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    hi = lk
    full_end = (lk // BLOCK_N) * BLOCK_N
    if CAUSAL:
        hi = tl.minimum(lk, m0 + BLOCK_M)
        full_end = tl.minimum(full_end, m0)  # BLOCK_M % BLOCK_N == 0: tiles before m0 are unmasked
    for start_n in tl.range(0, full_end, BLOCK_N):
        acc = _fwd_tile(
            acc,
            q,
            k_ptrs,
            v_ptrs,
            start_n,
            lk,
            offs_m,
            offs_n,
            stride_km,
            stride_vm,
            alpha,
            ACT,
            HW_TANH,
            CAUSAL,
            False,
            PRECISION,
        )
    for start_n in range(full_end, hi, BLOCK_N):
        acc = _fwd_tile(
            acc,
            q,
            k_ptrs,
            v_ptrs,
            start_n,
            lk,
            offs_m,
            offs_n,
            stride_km,
            stride_vm,
            alpha,
            ACT,
            HW_TANH,
            CAUSAL,
            True,
            PRECISION,
        )

    o_ptrs = Out + (q_start + offs_m)[:, None] * stride_om + h * stride_oh + offs_d[None, :]
    # qk_scale is linear: applied once per output element here, not once per score in the loop
    o_scale = qk_scale * p_fold(alpha, ACT, Q.dtype.element_ty != tl.float16)  # what P' left out
    tl.store(o_ptrs, (acc * o_scale).to(Out.dtype.element_ty), mask=(offs_m < lq)[:, None])


# (BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]; tiles.py), autotuned per launch.TUNING_KEY.
# PERF.md v3: two CTAs per SM (registers capped at 128, ≤ 96 KB shared) win short keys by 20–26% and tie
# at L = 2048, where the uncapped one-CTA 128/64/8/3 stays within 1%. BLOCK_M % BLOCK_N == 0 in every
# config: the causal forward runs whole key tiles unmasked up to its first query row.
FWD_CONFIGS = [
    (128, 64, 8, 3),
    (128, 32, 8, 3, 128),
    (128, 64, 8, 2, 128),
    (64, 32, 4, 3, 168),
]

gdpa_fwd_kernel_tuned = triton.autotune(
    configs=[triton_config(cfg) for cfg in FWD_CONFIGS],
    key=[*launch.TUNING_KEY, "H", "GROUPS", "D", "ACT", "CAUSAL"],
)(gdpa_fwd_kernel)


def forward(call: GDPACall, band: Band = WHOLE, tiles=None, out=None, record=None):
    """Write `out` (new when None) `[ΣLq, H, D]` for the sequences of `band` in one launch (tiles None:
    autotuned); with `record`, what ran goes to record["fwd"] (whole batch) or record["fwd <band>"]."""
    q, k, v = call.q, call.k, call.v
    out = launch.new_output(q) if out is None else out
    if call.batch == 0 or call.rows_q == 0:
        return out
    if call.causal and tiles is not None and tiles[0] % tiles[1]:
        raise ValueError(f"gdpa: fwd_tiles {list(tiles)}: a causal forward needs BLOCK_M to be a multiple of BLOCK_N")
    max_q = band.bound(call.max_q, call.self_attention)
    args = dict(
        **launch.operands(q=q, k=k, v=v, o=out),
        q_offsets=call.q_offsets,
        kv_offsets=call.kv_offsets,
        alpha=call.alpha,
        qk_scale=call.qk_scale,
        **launch.tuning_key(call, band),
        **launch.row_args(call.batch * call.heads),
        H=call.heads,
        GROUPS=call.groups,
        **launch.common_constants(q, call.activation, call.causal),
    )
    launch.run(
        gdpa_fwd_kernel,
        gdpa_fwd_kernel_tuned,
        args,
        lambda block_m, block_n: rows_grid(cdiv(max(max_q, 1), block_m), call.batch * call.heads),
        tiles,
        q.device,
        record,
        launch.record_name("fwd", band),
    )
    return out
