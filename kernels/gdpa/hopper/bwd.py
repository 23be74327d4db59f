"""GDPA backward on Hopper: FlashAttention-4's warp-specialized sm90 backward with the GDPA pointwise.

FA4's `FlashAttentionBackwardSm90` keeps its structure: one CTA per key tile (dK, dV in registers for the
whole query loop), a producer warp streaming Q, dO by TMA, a second warp streaming the fp32 dQ tiles into
a global accumulator with asynchronous bulk reduce-adds, two MMA warpgroups doing the five GEMMs. The one
method replaced is `mma_one_m_block` (one query block against this CTA's key tile):

    FA4 (softmax)                                GDPA (this file)
    P  = exp2(S*scale_log2 - LSE)   under dP     P  = qk*act(alpha*S)
    dS = P * (dP - dPsum)           after dP     dS = act'(alpha*S) * dP

with the same GEMM order, pipeline waits/releases, named barriers and dQ hand-off as FA4. FA4 applies its
softmax_scale to dK (epilogue) and dQ (postprocess); launch.py passes alpha*qk_scale there, so dS carries
neither scale. No LSE and no dPsum: FA4's load warp still streams those slots (one fp32 per query row, with
Q and dO), and they carry alpha and qk_scale instead (cached constant tensors, launch.py); the preprocess
kernel reduces to zeroing the dQ accumulator.

Two pointwise schedules (`split_pointwise`, chosen per shape by launch.backward_plan from H200 timings):
- split: P and G = act'(alpha*S) computed while the dP GEMM runs — G packed to fp16 pairs (half the
  registers of fp32; fp16 carries it to 2^-11, under the bf16 rounding of dS) — then dS = G * dP after the
  wait. Keeping G in fp32 over S's registers instead made ptxas (CUDA 13) serialize every wgmma (C7515).
- fused: P and dS in one pass after the dP wait (fewer live registers where the tile is larger).

Masks run only on blocks that need one (a sequence end inside the block, or the causal diagonal), where
FA4's loop masks every block: FA4's key mask (-inf), then query rows past the sequence end (the last query
block of a sequence reads the next sequence's rows, or TMA zero fill) set to -inf, then -inf raised to the
activation's `masked_floor`, where P and G come out exactly 0 without a select (activations.py).
"""

from __future__ import annotations

from collections.abc import Callable

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import warpgroup
from cutlass.cutlass_dsl import T, dsl_user_op
from flash_attn.cute import utils
from flash_attn.cute.flash_bwd_sm90 import FlashAttentionBackwardSm90
from flash_attn.cute.named_barrier import NamedBarrierBwd
from quack import copy_utils, layout_utils

from kernels.gdpa.hopper.activations import Activation
from kernels.gdpa.hopper.persistent_bwd import PersistentBackwardMixin


@dsl_user_op
def f16x2_to_f32(pair, *, loc=None, ip=None):
    """The two fp16 halves of a 32-bit register as fp32 (low, high)."""
    halves = []
    for pick in ("lo", "hi"):
        halves.append(
            Float32(
                llvm.inline_asm(
                    T.f32(),
                    [Int32(pair).ir_value(loc=loc, ip=ip)],
                    f"{{ .reg .f16 lo, hi; mov.b32 {{lo, hi}}, $1; cvt.f32.f16 $0, {pick}; }}",
                    "=f,r",
                    has_side_effects=False,
                    is_align_stack=False,
                    asm_dialect=llvm.AsmDialect.AD_ATT,
                )
            )
        )
    return halves[0], halves[1]


def _fa4_mask_parts(mask_fn):
    """FA4's mma() hands mma_one_m_block `functools.partial(mask.apply_mask, ..., thr_mma=...)`: the
    AttentionMask (which holds this sequence's lengths) and the MMA thread slice."""
    mask = getattr(getattr(mask_fn, "func", None), "__self__", None)
    keywords = getattr(mask_fn, "keywords", {})
    if mask is None or "thr_mma" not in keywords or "n_block" not in keywords:
        raise RuntimeError(
            "GDPABackwardSm90: FA4's mask_fn is no longer partial(mask.apply_mask, n_block=..., "
            "thr_mma=...); this flash-attn-4 version is not supported"
        )
    return mask, keywords["thr_mma"], keywords["n_block"]


class GDPABackwardSm90(FlashAttentionBackwardSm90):
    def __init__(
        self,
        dtype,
        head_dim: int,
        qhead_per_kvhead: int,
        *,
        activation: Activation,
        is_causal: bool,
        cfg,
        split_pointwise: bool = True,
    ):
        super().__init__(
            dtype,
            head_dim,
            head_dim,
            qhead_per_kvhead,
            is_causal,
            is_local=False,
            deterministic=False,
            tile_m=cfg.m_block_size,
            tile_n=cfg.n_block_size,
            Q_stage=cfg.num_stages_Q,
            dO_stage=cfg.num_stages_dO,
            PdS_stage=cfg.num_stages_PdS,
            SdP_swapAB=cfg.SdP_swapAB,
            dKV_swapAB=cfg.dKV_swapAB,
            dQ_swapAB=cfg.dQ_swapAB,
            AtomLayoutMSdP=cfg.AtomLayoutMSdP,
            AtomLayoutNdKV=cfg.AtomLayoutNdKV,
            AtomLayoutMdQ=cfg.AtomLayoutMdQ,
            num_threads=(cfg.num_wg + 1) * 128,
            V_in_regs=False,
            dQ_single_wg=cfg.dQ_single_wg,
        )
        self.activation = activation
        self.split_pointwise = split_pointwise  # launch.backward_plan picks it by measurement

    @cute.jit
    def _needs_mask(self, m_block: Int32, n_block: Int32, mask) -> Boolean:
        """Whether block (m_block, n_block) has a score FA4's mask or the query-end mask removes."""
        crosses_end = ((m_block + 1) * self.tile_m > mask.seqlen_q) | ((n_block + 1) * self.tile_n > mask.seqlen_k)
        if const_expr(self.is_causal):
            # FA4's causal mask keeps key j for query i iff j <= i + seqlen_k - seqlen_q
            crosses_end = crosses_end | (
                (n_block + 1) * self.tile_n - 1 > m_block * self.tile_m + mask.seqlen_k - mask.seqlen_q
            )
        return crosses_end

    @cute.jit
    def _mask_rows_past_end(self, acc_S: cute.Tensor, m_block: Int32, mask, thr_mma):
        """-inf on query rows >= seqlen_q (only the last query block of a sequence has any)."""
        seqlen_q = mask.seqlen_q
        if (m_block + 1) * self.tile_m > seqlen_q:
            shape = (self.tile_n, self.tile_m) if const_expr(self.SdP_swapAB) else (self.tile_m, self.tile_n)
            row_mode = 1 if const_expr(self.SdP_swapAB) else 0
            coords = layout_utils.reshape_acc_to_mn(
                thr_mma.partition_C(cute.make_identity_tensor(shape)), transpose=self.SdP_swapAB
            )
            acc_S_mn = layout_utils.reshape_acc_to_mn(acc_S, transpose=self.SdP_swapAB)
            for r in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[0])):
                if coords[r, 0][row_mode] + m_block * self.tile_m >= seqlen_q:
                    for c in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[1])):
                        acc_S_mn[r, c] = -Float32.inf

    @cute.jit
    def _pointwise(self, acc_S: cute.Tensor, acc_dP: cute.Tensor, consts, guard: cutlass.Constexpr[bool]):
        """Fused, after the dP GEMM: P = qk*act(alpha*s) and dS = act'(alpha*s)*dP, each pair packed
        to 16 bits as soon as it is computed, in FA4's cvt_f16(reshape_acc_to_frgA(.)) layout. With `guard`,
        -inf scores give P = dS = 0."""
        S_f, dP_f = layout_utils.reshape_acc_to_frgA(acc_S), layout_utils.reshape_acc_to_frgA(acc_dP)
        tdVrP = cute.make_rmem_tensor(S_f.shape, self.dtype)
        tdKrdS = cute.make_rmem_tensor(dP_f.shape, self.dtype)
        P_pairs, dS_pairs = cute.recast_tensor(tdVrP, Int32), cute.recast_tensor(tdKrdS, Int32)
        for i in cutlass.range_constexpr(cute.size(P_pairs)):
            p, ds = [None, None], [None, None]
            for j in cutlass.range_constexpr(2):
                s = S_f[2 * i + j]
                if const_expr(guard):
                    masked = s == -Float32.inf
                    p[j], g = self.activation.backward(Float32(0.0) if masked else s, consts)
                    ds[j] = Float32(0.0) if masked else g * dP_f[2 * i + j]
                else:
                    p[j], g = self.activation.backward(s, consts)
                    ds[j] = g * dP_f[2 * i + j]
            P_pairs[i] = utils.cvt_f16x2_f32(p[0], p[1], self.dtype)
            dS_pairs[i] = utils.cvt_f16x2_f32(ds[0], ds[1], self.dtype)
        return tdVrP, tdKrdS

    @cute.jit
    def _pointwise_under_dp(self, acc_S: cute.Tensor, consts, guard: cutlass.Constexpr[bool]):
        """While the dP GEMM runs: P = qk*act(alpha*s), packed to the 16-bit A operand of the dV GEMM (FA4's
        cvt_f16(reshape_acc_to_frgA(.)) layout), and G = act'(alpha*s), packed to fp16 pairs (half the
        registers of fp32: the price of keeping it beside the in-flight dP accumulator; fp16 carries G to
        2^-11, below the bf16 rounding of dS). With `guard`, -inf scores give P = G = 0 (activations without a
        masked_floor: raw, leaky_relu)."""
        S_f = layout_utils.reshape_acc_to_frgA(acc_S)
        tdVrP = cute.make_rmem_tensor(S_f.shape, self.dtype)
        tGrG = cute.make_rmem_tensor(S_f.shape, cutlass.Float16)
        P_pairs, G_pairs = cute.recast_tensor(tdVrP, Int32), cute.recast_tensor(tGrG, Int32)
        for i in cutlass.range_constexpr(cute.size(P_pairs)):
            p, g = [None, None], [None, None]
            for j in cutlass.range_constexpr(2):
                s = S_f[2 * i + j]
                if const_expr(guard):
                    masked = s == -Float32.inf
                    p[j], g_j = self.activation.backward(Float32(0.0) if masked else s, consts)
                    g[j] = Float32(0.0) if masked else g_j
                else:
                    p[j], g[j] = self.activation.backward(s, consts)
            P_pairs[i] = utils.cvt_f16x2_f32(p[0], p[1], self.dtype)
            G_pairs[i] = utils.cvt_f16x2_f32(g[0], g[1], cutlass.Float16)
        return tdVrP, tGrG

    @cute.jit
    def _pointwise_ds(self, tGrG: cute.Tensor, acc_dP: cute.Tensor):
        """After the dP GEMM: dS = G * dP, packed like P (alpha*qk_scale is applied to dQ and dK later)."""
        dP_f = layout_utils.reshape_acc_to_frgA(acc_dP)
        tdKrdS = cute.make_rmem_tensor(dP_f.shape, self.dtype)
        G_pairs, dS_pairs = cute.recast_tensor(tGrG, Int32), cute.recast_tensor(tdKrdS, Int32)
        for i in cutlass.range_constexpr(cute.size(dS_pairs)):
            g0, g1 = f16x2_to_f32(G_pairs[i])
            dS_pairs[i] = utils.cvt_f16x2_f32(g0 * dP_f[2 * i], g1 * dP_f[2 * i + 1], self.dtype)
        return tdKrdS

    @cute.jit
    def mma_one_m_block(
        self,
        m_block: Int32,
        consumer_state_Q,
        consumer_state_dO,
        warp_group_idx: Int32,
        mma_qk_fn: Callable,
        mma_dov_fn: Callable,
        mma_pdo_fn: Callable,
        mma_dsq_fn: Callable,
        mma_dsk_fn: Callable,
        copy_P_r2s: Callable | None,
        copy_dS_r2s: Callable,
        pipeline_Q: cutlass.pipeline.PipelineAsync,
        pipeline_dO: cutlass.pipeline.PipelineAsync,
        tLSEsLSE: cute.Tensor,
        tLSEsdPsum: cute.Tensor,
        tdQsdQaccum: cute.Tensor | None,
        softmax_scale_log2: Float32,
        PdS_barrier: cutlass.pipeline.NamedBarrier,
        is_dQ_wg: cutlass.Constexpr[bool] = True,
        mask_fn: Callable | None = None,
        score_mod_fn: Callable | None = None,
        score_mod_bwd_fn: Callable | None = None,
        dKV_accumulate: Boolean = True,
    ):
        state_dO = consumer_state_Q if const_expr(self.Q_stage == self.dO_stage) else consumer_state_dO
        i_Q = consumer_state_Q.index
        i_dO = state_dO.index if const_expr(self.dO_stage > 1) else 0
        i_PdS = i_Q if const_expr(self.PdS_stage > 1) else 0
        mask, thr_mma, n_block = _fa4_mask_parts(mask_fn)

        # [GEMM 1] S = Q K^T, [GEMM 2] dP = dO V^T: both issued, S waited for
        pipeline_Q.consumer_wait(consumer_state_Q, pipeline_Q.consumer_try_wait(consumer_state_Q))
        acc_S = mma_qk_fn(A_idx=i_Q, wg_wait=-1)
        tLSEralpha = copy_utils.load_s2r(tLSEsLSE[None, i_Q])  # alpha: the LSE slot (launch.py)
        pipeline_dO.consumer_wait(state_dO, pipeline_dO.consumer_try_wait(state_dO))
        tLSErqk = copy_utils.load_s2r(tLSEsdPsum[None, i_dO])  # qk_scale: the dPsum slot
        acc_dP = mma_dov_fn(A_idx=i_dO, wg_wait=1)

        # [Pointwise] masks only on blocks that cross a sequence end or the causal diagonal (FA4's loop
        # calls its mask on every block), then P and G under the dP GEMM, dS once dP is complete
        lane = cute.arch.lane_idx()
        alpha = self._get_stat(tLSEralpha, 0, lane, shuffle=self.shuffle_LSE)
        qk = self._get_stat(tLSErqk, 0, lane, shuffle=self.shuffle_dPsum)
        consts = self.activation.backward_row(self.activation.backward_setup(alpha), qk)
        guard = const_expr(self.activation.masked_floor is None)
        if self._needs_mask(m_block, n_block, mask):
            mask_fn(acc_S, m_block=m_block)  # FA4's key-length / causal mask: -inf
            self._mask_rows_past_end(acc_S, m_block, mask, thr_mma)
            if const_expr(not guard):
                # -inf -> a floor where this activation's P and G are exactly 0 (alpha > 0: launch.py)
                for i in cutlass.range_constexpr(cute.size(acc_S)):
                    acc_S[i] = cute.arch.fmax(acc_S[i], Float32(self.activation.masked_floor))
        if const_expr(self.split_pointwise):
            tdVrP, tGrG = self._pointwise_under_dp(acc_S, consts, guard)
            if const_expr(not self.mma_dkv_is_rs):
                if const_expr(self.PdS_stage == 1):
                    PdS_barrier.arrive_and_wait()  # the previous dV GEMM may still read the P buffer
                copy_P_r2s(tdVrP, dst_idx=i_PdS)
            warpgroup.wait_group(0)  # dP complete
            tdKrdS = self._pointwise_ds(tGrG, acc_dP)
        else:
            warpgroup.wait_group(0)
            tdVrP, tdKrdS = self._pointwise(acc_S, acc_dP, consts, guard)
            if const_expr(not self.mma_dkv_is_rs):
                if const_expr(self.PdS_stage == 1):
                    PdS_barrier.arrive_and_wait()
                copy_P_r2s(tdVrP, dst_idx=i_PdS)
        if const_expr(not self.mma_dkv_is_rs or (self.PdS_stage == 1 and self.mma_dkv_is_rs)):
            cute.arch.fence_view_async_shared()
            PdS_barrier.arrive_and_wait()
        copy_dS_r2s(tdKrdS, dst_idx=i_PdS)

        # [GEMM 3] dV += P^T dO
        if const_expr(not self.mma_dkv_is_rs):
            mma_pdo_fn(A_idx=i_PdS, B_idx=i_dO, zero_init=not dKV_accumulate, wg_wait=-1)
        else:
            mma_pdo_fn(tCrA=tdVrP, B_idx=i_dO, zero_init=not dKV_accumulate, wg_wait=-1)
        cute.arch.fence_view_async_shared()  # dS in shared memory before the GEMMs read it
        PdS_barrier.arrive_and_wait()

        if const_expr(is_dQ_wg):
            # [GEMM 4] dQ = dS K, [GEMM 5] dK += dS^T Q
            acc_dQ = mma_dsk_fn(A_idx=i_PdS, wg_wait=1)
            pipeline_dO.consumer_release(state_dO)  # the dV GEMM is done with dO
            if const_expr(not self.mma_dkv_is_rs):
                mma_dsq_fn(A_idx=i_PdS, B_idx=i_Q, zero_init=not dKV_accumulate, wg_wait=1)
            else:
                mma_dsq_fn(tCrA=tdKrdS, B_idx=i_Q, zero_init=not dKV_accumulate, wg_wait=1)
            # dQ tile to shared memory for the dQ-reduce warp (bulk reduce-add into the fp32 accumulator)
            cute.arch.barrier(
                barrier_id=int(NamedBarrierBwd.dQEmptyWG0) + warp_group_idx,
                number_of_threads=self.num_threads_per_warp_group + cute.arch.WARP_SIZE,
            )
            cute.autovec_copy(cute.make_tensor(acc_dQ.iterator, cute.make_layout(tdQsdQaccum.shape)), tdQsdQaccum)
            cute.arch.fence_view_async_shared()
            cute.arch.barrier_arrive(
                barrier_id=int(NamedBarrierBwd.dQFullWG0) + warp_group_idx,
                number_of_threads=self.num_threads_per_warp_group + cute.arch.WARP_SIZE,
            )
            warpgroup.wait_group(0)
            pipeline_Q.consumer_release(consumer_state_Q)
        else:
            if const_expr(not self.mma_dkv_is_rs):
                mma_dsq_fn(A_idx=i_PdS, B_idx=i_Q, zero_init=not dKV_accumulate, wg_wait=1)
            else:
                mma_dsq_fn(tCrA=tdKrdS, B_idx=i_Q, zero_init=not dKV_accumulate, wg_wait=1)
            pipeline_dO.consumer_release(state_dO)
            warpgroup.wait_group(0)
            pipeline_Q.consumer_release(consumer_state_Q)
        consumer_state_Q.advance()
        consumer_state_dO.advance()
        return consumer_state_Q, consumer_state_dO


class GDPABackwardSm90Persistent(PersistentBackwardMixin, GDPABackwardSm90):
    """GDPABackwardSm90 for a persistent grid (persistent_bwd.py): several key tiles per CTA."""
