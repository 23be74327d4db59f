"""Owned GDPA backward: one program per (sequence, KV head) owns all of that sequence's scores.

Issue 30, the backward on short sequences. Our split backward (bwd.py) needs a dK/dV and a dQ kernel, 7 GEMMs
per score block, because each of its programs owns a tile of one side only; the Hopper backward (FA4's) does 5
GEMMs but adds every dQ partial into a global fp32 accumulator that has to be zeroed before and converted after
the main kernel — whole-batch passes that cost 0.24 ms at B 1152 × H 4 × D 128 whatever the sequences' lengths
(set 1 L=256 fill 0.5 and HSTU's causal SiLU 256 in docs/example-h200-peers: 26% of our call; kernels/gdpa/PERF.md).
A program that owns a whole sequence needs neither: it walks the key blocks in order, each block's dK and dV in
registers for the query loop under it (packed_bwd.py's unit, for one sequence of any length), and a query block's
dQ partial goes to a scratch row of this program's own — stored by the first key block that reaches the block,
read back and added by the next, written scaled to dQ by the last — so no atomics, no zeroing, no conversion
pass, and a sequence of one key block never touches the scratch:

    for each key block:   Sᵀ = K Qᵀ;  Pᵀ, act'ᵀ;  dV += Pᵀ dO;  dPᵀ = V dOᵀ;  dSᵀ = act'ᵀ ⊙ dPᵀ;  dK += dSᵀ Q;
                          dQᵀ (+)= Kᵀ dSᵀ

It is HSTU's loop order (generative-recommenders, `_hstu_attn_bwd` without SEQUENCE_PARALLEL), with the partials
in fp32 instead of the bf16 dQ. The price: a sequence's blocks run in one program, so the grid is B × KV heads
and the longest sequence sets the tail — the backend (owned.py) keeps it to the short ones.
"""

import torch
import triton
import triton.language as tl

from kernels.gdpa import launch
from kernels.gdpa.activations import act_fwd_bwd_scaled, p_fold
from kernels.gdpa.bands import Band, sequence_in_band
from kernels.gdpa.call import GDPACall
from kernels.gdpa.stages import dkdv_step, store_dkdv
from kernels.gdpa.tiles import triton_config


@triton.jit
def _dq_partial(
    DQ,
    DQ_PART,
    dq_t,
    q_rows,
    h,
    offs_d,
    q_ok,
    n0,
    hi,
    stride_dqm,
    stride_dqh,
    stride_pm,
    stride_ph,
    dq_scale,
    BLOCK_N: tl.constexpr,
):
    """One key block's dQᵀ [D, BLOCK_M] for query rows `q_rows`: added to the partial of the key blocks before it
    (none before the sequence's first), then kept in the scratch or, from the last key block that reaches
    these rows (`hi`: the end of their keys), written scaled to DQ."""
    part = DQ_PART + q_rows[None, :] * stride_pm + h * stride_ph + offs_d[:, None]
    if n0 > 0:
        dq_t += tl.load(part, mask=q_ok[None, :], other=0.0)
    if n0 + BLOCK_N >= hi:
        at = q_rows[None, :] * stride_dqm + h * stride_dqh + offs_d[:, None]
        tl.store(DQ + at, (dq_t * dq_scale).to(DQ.dtype.element_ty), mask=q_ok[None, :])
    else:
        tl.store(part, dq_t, mask=q_ok[None, :])


@triton.jit
def owned_bwd_kernel(
    Q,
    K,
    V,
    DO,
    DQ,
    DQ_PART,
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
    stride_dqm,
    stride_dqh,
    stride_pm,
    stride_ph,
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
    HKV: tl.constexpr,
    GROUPS: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACT: tl.constexpr,
    HW_TANH: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):
    # grid: (sequences · KV heads,); a sequence outside the band [band_lo, band_hi) (bands.py) exits
    b = tl.program_id(0) // HKV
    hk = tl.program_id(0) % HKV
    q_start, lq, kv_start, lk, outside = sequence_in_band(q_offsets, kv_offsets, b, band_lo, band_hi)
    if outside:
        return
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    ds_scale = qk_scale * alpha
    FOLD: tl.constexpr = Q.dtype.element_ty != tl.float16  # P' in fp16's range? (activations.py)
    dv_scale = qk_scale * p_fold(alpha, ACT, FOLD)  # what P' left out
    if lk == 0:  # queries without keys: their gradient is zero, and no key block will write it
        for g in range(GROUPS):
            for m0 in range(0, lq, BLOCK_M):
                rows = m0 + offs_m
                at = (q_start + rows)[:, None] * stride_dqm + (hk * GROUPS + g) * stride_dqh + offs_d[None, :]
                tl.store(DQ + at, tl.zeros([BLOCK_M, D], DQ.dtype.element_ty), mask=(rows < lq)[:, None])

    for n0 in range(0, lk, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
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
            for m0 in range(lo, lq, BLOCK_M):
                rows = m0 + offs_m
                q_ok = rows < lq
                q_rows = q_start + rows
                q_at = Q + q_rows[:, None] * stride_qm + h * stride_qh + offs_d[None, :]
                q = tl.load(q_at, mask=q_ok[:, None], other=0.0)
                do_at = DO + q_rows[:, None] * stride_dom + h * stride_doh + offs_d[None, :]
                do = tl.load(do_at, mask=q_ok[:, None], other=0.0)
                s_t = tl.dot(k, tl.trans(q), input_precision=PRECISION)  # [BLOCK_N, BLOCK_M]
                p_t, dact_t = act_fwd_bwd_scaled(s_t, alpha, ACT, HW_TANH, FOLD)
                keep = q_ok[None, :] & kv_ok[:, None]
                hi = lk
                if CAUSAL:
                    keep = keep & (offs_n[:, None] <= rows[None, :])
                    hi = tl.minimum(lk, m0 + BLOCK_M)  # these rows' keys end at their last row
                dk, dv, ds_t = dkdv_step(k, v, q, do, p_t, dact_t, keep, dk, dv, PRECISION)
                dq_t = tl.dot(tl.trans(k), ds_t, input_precision=PRECISION)  # [D, BLOCK_M]: M = D keeps wgmma sizes
                _dq_partial(
                    DQ, DQ_PART, dq_t, q_rows, h, offs_d, q_ok, n0, hi,
                    stride_dqm, stride_dqh, stride_pm, stride_ph, ds_scale, BLOCK_N,
                )  # fmt: skip
        store_dkdv(
            DK, DV, kv_rows, hk, offs_d, kv_ok, dk, dv, ds_scale, dv_scale,
            stride_dkm, stride_dkh, stride_dvm, stride_dvh,
        )  # fmt: skip
        # the next key block reads the partials this one stored: every thread's stores before any thread's loads
        tl.debug_barrier()


# (BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]; tiles.py), autotuned per launch.TUNING_KEY; not yet timed
# (kernels/gdpa/PERF.md, "The owned backward"). Registers are packed_bwd.py's — dK and dV [BLOCK_N, D] fp32 for
# the whole query loop, four [BLOCK_N, BLOCK_M] score tiles, dQᵀ [D, BLOCK_M] — and ptxas for sm90 (bf16, D 128,
# fast_gelu / causal silu; tests/test_gdpa_owned.py compiles them) gives: 32x128/8w 255 registers, 56 / 20 B
# spilled; 16x128/8w 254 / 242, none; 32x64/8w 28 / 0 B; 64x64/8w 132 / 0 B; 16x64/4w 44 / 0 B. Left out:
# 64x128/8w (432 B) and 32x64/4w (188 B).
OWNED_CONFIGS = [
    (32, 128, 8, 2),
    (16, 128, 8, 2),
    (32, 64, 8, 2),
    (64, 64, 8, 2),
    (16, 64, 4, 2),
]

owned_bwd_kernel_tuned = triton.autotune(
    configs=[triton_config(cfg) for cfg in OWNED_CONFIGS],
    key=[*launch.TUNING_KEY, "HKV", "GROUPS", "D", "ACT", "CAUSAL"],
)(owned_bwd_kernel)


def backward(call: GDPACall, do: torch.Tensor, band: Band, out, tiles=None, record=None):
    """Write the dq, dk, dv rows (`out`) of `band`'s sequences: one launch of B × KV heads programs (tiles None:
    autotuned). The dQ scratch is fp32 like dq, uninitialised: each row is stored before it is read."""
    q, k, v = call.q, call.k, call.v
    dq, dk, dv = out
    if call.batch == 0:
        return out
    dq_part = torch.empty(dq.shape, dtype=torch.float32, device=dq.device)
    args = dict(
        **launch.operands(q=q, k=k, v=v, do=do, dq=dq, dk=dk, dv=dv),
        DQ_PART=dq_part,
        stride_pm=dq_part.stride(0),
        stride_ph=dq_part.stride(1),
        q_offsets=call.q_offsets,
        kv_offsets=call.kv_offsets,
        alpha=call.alpha,
        qk_scale=call.qk_scale,
        **launch.tuning_key(call, band),
        HKV=call.heads_kv,
        GROUPS=call.groups,
        **launch.common_constants(q, call.activation, call.causal),
    )
    grid = lambda block_m, block_n: (call.batch * call.heads_kv,)
    name = launch.record_name("owned_bwd", band)
    launch.run(owned_bwd_kernel, owned_bwd_kernel_tuned, args, grid, tiles, q.device, record, name)
    return out
