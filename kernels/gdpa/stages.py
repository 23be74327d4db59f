"""Stages the Triton backward kernels share (bwd.py's per-sequence tiles, packed_bwd.py's packs), one jit
function each, inlined by Triton where they are called: a key tile's dK/dV accumulation over one query tile,
and its scaled stores."""

import triton
import triton.language as tl


@triton.jit
def dkdv_step(k, v, q, do, p_t, dact_t, keep, dk, dv, PRECISION: tl.constexpr):
    """One query tile's share of a key tile's dK and dV (before their scales), from the transposed scores'
    activation p_t and its derivative dact_t; `keep` masks the pairs outside the sequence (and the causal
    ones). Returns (dk, dv, dsᵀ): dsᵀ also feeds a dQ computed in the same loop."""
    p_t = tl.where(keep, p_t, 0.0)
    dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PRECISION)
    dp_t = tl.dot(v, tl.trans(do), input_precision=PRECISION)
    ds_t = tl.where(keep, dact_t * dp_t, 0.0).to(q.dtype)
    dk = tl.dot(ds_t, q, dk, input_precision=PRECISION)
    return dk, dv, ds_t


@triton.jit
def store_dkdv(
    DK, DV, kv_rows, hk, offs_d, kv_ok, dk, dv, dk_scale, dv_scale, stride_dkm, stride_dkh, stride_dvm, stride_dvh
):
    """dK·dk_scale and dV·dv_scale into the key rows `kv_rows` of KV head hk."""
    tl.store(
        DK + kv_rows * stride_dkm + hk * stride_dkh + offs_d[None, :],
        (dk * dk_scale).to(DK.dtype.element_ty),
        mask=kv_ok[:, None],
    )
    tl.store(
        DV + kv_rows * stride_dvm + hk * stride_dvh + offs_d[None, :],
        (dv * dv_scale).to(DV.dtype.element_ty),
        mask=kv_ok[:, None],
    )
