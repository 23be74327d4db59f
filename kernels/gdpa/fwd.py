"""GDPA forward: O_b = (act(alpha · Q_b K_bᵀ) · qk_scale) V_b over a jagged batch (DESIGN §3).

One program computes one BLOCK_M tile of query rows of one (sequence, head) and streams that
sequence's keys in BLOCK_N tiles. There is no running max and no rescale: each tile's contribution is
final, so the inner loop is GEMM → activation → GEMM. Key tiles that lie wholly inside the sequence
(and, for causal, wholly left of the diagonal) run without masks; only the last (or diagonal) tiles pay
for masking. Masked loads, never act(0) = 0, keep a tile from reading the next sequence's keys.
"""
import triton
import triton.language as tl

from kernels.gdpa.activations import act_fwd_scaled
from kernels.gdpa.schedule import locate_tile
from kernels.gdpa.tiles import triton_config


@triton.jit
def _fwd_tile(acc, q, k_ptrs, v_ptrs, start_n, lk, offs_m, offs_n, stride_km, stride_vm,
              alpha, ACT: tl.constexpr, HW_TANH: tl.constexpr, CAUSAL: tl.constexpr,
              MASKED: tl.constexpr, PRECISION: tl.constexpr):
    cols = start_n + offs_n
    if MASKED:
        kv_ok = cols < lk
        k = tl.load(k_ptrs + start_n * stride_km, mask=kv_ok[:, None], other=0.0)
        v = tl.load(v_ptrs + start_n * stride_vm, mask=kv_ok[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs + start_n * stride_km)
        v = tl.load(v_ptrs + start_n * stride_vm)
    p = act_fwd_scaled(tl.dot(q, tl.trans(k), input_precision=PRECISION), alpha, ACT, HW_TANH)
    if MASKED:
        keep = kv_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        p = tl.where(keep, p, 0.0)
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _fwd_unmasked_pipelined(acc, q, k_ptrs, v_ptrs, full_end, stride_km, stride_vm, alpha,
                            BLOCK_N: tl.constexpr, ACT: tl.constexpr, HW_TANH: tl.constexpr,
                            PRECISION: tl.constexpr):
    """The unmasked key loop, software-pipelined by one tile (FA3's intra-warpgroup overlap):
    S_j+1 = Q·K_j+1ᵀ is issued before act(S_j), so the tensor core has work while the same warps run
    the activation — if the compiler leaves the wgmma in flight across it."""
    if full_end > 0:
        s = tl.dot(q, tl.trans(tl.load(k_ptrs)), input_precision=PRECISION)
        for start_n in range(BLOCK_N, full_end, BLOCK_N):
            s_next = tl.dot(q, tl.trans(tl.load(k_ptrs + start_n * stride_km)), input_precision=PRECISION)
            p = act_fwd_scaled(s, alpha, ACT, HW_TANH)
            v = tl.load(v_ptrs + (start_n - BLOCK_N) * stride_vm)
            acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
            s = s_next
        p = act_fwd_scaled(s, alpha, ACT, HW_TANH)
        v = tl.load(v_ptrs + (full_end - BLOCK_N) * stride_vm)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
    return acc


@triton.jit
def gdpa_fwd_kernel(Q, K, V, Out, q_offsets, kv_offsets,
                    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh,
                    stride_om, stride_oh, alpha, qk_scale, max_q_bucket, max_kv_bucket,
                    rows_q_bucket, rows_kv_bucket,
                    tile_offsets, n_seqs, search_steps,
                    H: tl.constexpr, GROUPS: tl.constexpr, D: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr,
                    HW_TANH: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                    COMPACT: tl.constexpr = False, WARP_SPEC: tl.constexpr = False,
                    PIPELINE_S: tl.constexpr = False):
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
    if PIPELINE_S:
        acc = _fwd_unmasked_pipelined(acc, q, k_ptrs, v_ptrs, full_end, stride_km, stride_vm, alpha,
                                      BLOCK_N, ACT, HW_TANH, PRECISION)
    else:
        for start_n in tl.range(0, full_end, BLOCK_N, warp_specialize=WARP_SPEC):
            acc = _fwd_tile(acc, q, k_ptrs, v_ptrs, start_n, lk, offs_m, offs_n, stride_km, stride_vm,
                            alpha, ACT, HW_TANH, CAUSAL, False, PRECISION)
    for start_n in range(full_end, hi, BLOCK_N):
        acc = _fwd_tile(acc, q, k_ptrs, v_ptrs, start_n, lk, offs_m, offs_n, stride_km, stride_vm,
                        alpha, ACT, HW_TANH, CAUSAL, True, PRECISION)

    o_ptrs = Out + (q_start + offs_m)[:, None] * stride_om + h * stride_oh + offs_d[None, :]
    # qk_scale is linear: applied once per output element here, not once per score in the loop
    tl.store(o_ptrs, (acc * qk_scale).to(Out.dtype.element_ty), mask=(offs_m < lq)[:, None])


@triton.jit
def gdpa_fwd_tma_kernel(Q, K, V, Out, q_offsets, kv_offsets,
                        stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh,
                        stride_om, stride_oh, alpha, qk_scale, max_q_bucket, max_kv_bucket,
                        rows_q_bucket, rows_kv_bucket,
                        tile_offsets, n_seqs, search_steps,
                        H: tl.constexpr, GROUPS: tl.constexpr, D: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACT: tl.constexpr,
                        HW_TANH: tl.constexpr, CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
                        COMPACT: tl.constexpr = False, WARP_SPEC: tl.constexpr = False):
    """Same math through per-sequence TMA descriptors: the copy engine zero-fills rows past the
    sequence end on loads and drops them on the store, so no load or store carries a mask."""
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
    q_desc = tl.make_tensor_descriptor(Q + q_start * stride_qm + h * stride_qh, shape=[lq, D],
                                       strides=[stride_qm, 1], block_shape=[BLOCK_M, D])
    o_desc = tl.make_tensor_descriptor(Out + q_start * stride_om + h * stride_oh, shape=[lq, D],
                                       strides=[stride_om, 1], block_shape=[BLOCK_M, D])
    k_desc = tl.make_tensor_descriptor(K + kv_start * stride_km + hk * stride_kh, shape=[lk, D],
                                       strides=[stride_km, 1], block_shape=[BLOCK_N, D])
    v_desc = tl.make_tensor_descriptor(V + kv_start * stride_vm + hk * stride_vh, shape=[lk, D],
                                       strides=[stride_vm, 1], block_shape=[BLOCK_N, D])
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = q_desc.load([m0, 0])
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    hi = lk
    full_end = (lk // BLOCK_N) * BLOCK_N
    if CAUSAL:
        hi = tl.minimum(lk, m0 + BLOCK_M)
        full_end = tl.minimum(full_end, m0)
    for start_n in tl.range(0, full_end, BLOCK_N, warp_specialize=WARP_SPEC):
        k = k_desc.load([start_n, 0])
        v = v_desc.load([start_n, 0])
        p = act_fwd_scaled(tl.dot(q, tl.trans(k), input_precision=PRECISION), alpha, ACT, HW_TANH)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
    for start_n in range(full_end, hi, BLOCK_N):
        k = k_desc.load([start_n, 0])
        v = v_desc.load([start_n, 0])
        cols = start_n + offs_n
        p = act_fwd_scaled(tl.dot(q, tl.trans(k), input_precision=PRECISION), alpha, ACT, HW_TANH)
        keep = (cols < lk)[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        p = tl.where(keep, p, 0.0)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
    o_desc.store([m0, 0], (acc * qk_scale).to(Out.dtype.element_ty))


# (BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]; tiles.py). Autotuned per bucket of max lengths and
# total rows (interface._buckets).
# The 2026-11-30 occupancy sweep (PERF.md v3, docs/tuning/2026-11-30-h200-occupancy.csv): two CTAs per
# SM (registers capped at 128, ≤ 96 KB shared) win short keys by 20–26% and tie at L = 2048, where
# the uncapped one-CTA 128/64/8/3 stays within 1%.
FWD_CONFIGS = [
    (128, 64, 8, 3),
    (128, 32, 8, 3, 128),
    (128, 64, 8, 2, 128),
    (64, 32, 4, 3, 168),
]
INTERPRET_CONFIG = (16, 16, 4, 1)



def _tuned(kernel):
    return triton.autotune(
        configs=[triton_config(cfg) for cfg in FWD_CONFIGS],
        key=["max_q_bucket", "max_kv_bucket", "rows_q_bucket", "rows_kv_bucket", "H", "GROUPS", "D", "ACT",
             "CAUSAL", "COMPACT"],
    )(kernel)


gdpa_fwd_kernel_tuned = _tuned(gdpa_fwd_kernel)
gdpa_fwd_tma_kernel_tuned = _tuned(gdpa_fwd_tma_kernel)
