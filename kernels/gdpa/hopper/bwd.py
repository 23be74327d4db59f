"""GDPA backward on Hopper: FlashAttention-4's warp-specialized sm90 backward with the GDPA pointwise.

FA4's `FlashAttentionBackwardSm90` keeps its structure: one CTA per key tile (dK, dV in registers for the
whole query loop), a producer warp streaming Q, dO by TMA, a second warp streaming the fp32 dQ tiles into
a global accumulator with asynchronous bulk copies, two MMA warpgroups doing the five GEMMs. The method
replaced for the math is `mma_one_m_block` (one query block against this CTA's key tile):

    FA4 (softmax)                                GDPA (this file)
    P  = exp2(S*scale_log2 - LSE)   under dP     P' = act(alpha*S) / (alpha*p_fold)   (dV scaled: epilogue_dKV)
    dS = P * (dP - dPsum)           after dP     dS = act'(alpha*S) * dP

with the same GEMM order, pipeline waits/releases, named barriers and dQ hand-off as FA4. FA4 applies its
softmax_scale to dK (epilogue) and dQ (postprocess); launch.py passes alpha*qk_scale there, so dS carries
neither scale. No LSE and no dPsum: FA4's load warp still streams those slots (one fp32 per query row, with
Q and dO), and they carry alpha and qk_scale instead (cached constant tensors, launch.py). FA4's preprocess
kernel zeroes the dQ accumulator for its reduce-adds; here nothing does (dq_first_touch.py, first-touch: the first
key tile to reach a query tile stores its dQ there, the others add once that store has landed), so what is left
of a preprocess is the zeroing of one int32 counter a query tile (accumulators.first_touch_dq).

Two pointwise schedules (`split_pointwise`, chosen per shape by launch.backward_plan from H200 timings):
- split: P and G = act'(alpha*S) computed while the dP GEMM runs, G kept in fp32 registers of its own, then
  dS = G * dP after the wait. (G packed to fp16 pairs, as before 2026-12-05, saved no registers: ptxas sank the
  pack below the wait, to its first use, so 16 packs and 32 unpacks sat between the dP and dV GEMMs; kept in
  fp32 over S's registers instead, ptxas (CUDA 13) serialized every wgmma: C7515.)
- fused: P and dS in one pass after the dP wait (fewer live registers where the tile is larger).

Masks run only on blocks that need one (a sequence end inside the block, or the causal diagonal), where
FA4's loop masks every block: FA4's key mask (-inf), then query rows past the sequence end (the last query
block of a sequence reads the next sequence's rows, or TMA zero fill) set to -inf, then -inf raised to the
activation's `masked_floor`, where P and G come out exactly 0 without a select (activations.py).

Paired query blocks (`pair_blocks`, the split plans): FA4's loop runs one query block per iteration, and ptxas
waits for every wgmma group at the loop's back edge, so the tensor pipe drains between blocks whatever the
block's source does (PERF.md "The drain between backward blocks"). FA4's loop is kept; the call of an even
block (counted from the tile's first, `m_block_range`) runs that block and the next as straight-line code and
the odd call returns at once. The first block ends with its dK GEMM in flight and its Q slot held; the second
issues its S and dP GEMMs behind it and releases the held slot once its wait under dP has seen both complete.
The paired fused plans serialize every wgmma in ptxas: they run one block per call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup
from flash_attn.cute import utils
from flash_attn.cute.flash_bwd_sm90 import FlashAttentionBackwardSm90
from flash_attn.cute.named_barrier import NamedBarrierBwd
from quack import copy_utils, layout_utils

from kernels.gdpa.hopper.activations import Activation
from kernels.gdpa.hopper.dq_first_touch import FirstTouchDQ
from kernels.gdpa.hopper.persistent_bwd import PersistentBackwardMixin


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


def m_block_range(seqlen_q, seqlen_k, n_block, tile_m: int, tile_n: int, causal: bool):
    """The query blocks FA4's backward loop runs for key tile `n_block` (its BlockInfo.get_m_block_min_max without
    local windows): [causal: the block of the diagonal's first row, else 0, ceil(seqlen_q / tile_m)). Plain
    arithmetic, so the same function runs on device values and, in the tests, on Python ints."""
    m_block_max = (seqlen_q + tile_m - 1) // tile_m
    m_block_min = 0
    if causal:
        m_block_min = cutlass.max(m_block_min, (n_block * tile_n + seqlen_q - seqlen_k) // tile_m)
    return m_block_min, m_block_max


class GDPABackwardSm90(FirstTouchDQ, FlashAttentionBackwardSm90):
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
        pair_blocks: bool = False,
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
        self.split_pointwise = split_pointwise  # plans.backward_plan picks it by measurement
        self.pair_blocks = pair_blocks  # two query blocks per call of mma_one_m_block (below)
        # a pair holds block m's Q slot while block m+1 waits for its own: two slots at least; and FA4's loop must
        # call every block of [m_block_min, m_block_max) in order (no local window)
        assert not pair_blocks or (self.Q_stage >= 2 and not self.is_local), "pair_blocks: Q_stage >= 2, not local"

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
        cvt_f16(reshape_acc_to_frgA(.)) layout), and G = act'(alpha*s) in fp32 registers of its own (module
        docstring: why not fp16 pairs). With `guard`, -inf scores give P = G = 0 (activations without a
        masked_floor: raw, leaky_relu)."""
        S_f = layout_utils.reshape_acc_to_frgA(acc_S)
        tdVrP = cute.make_rmem_tensor(S_f.shape, self.dtype)
        tGrG = cute.make_rmem_tensor(S_f.shape, Float32)
        P_pairs = cute.recast_tensor(tdVrP, Int32)
        for i in cutlass.range_constexpr(cute.size(P_pairs)):
            p = [None, None]
            for j in cutlass.range_constexpr(2):
                s = S_f[2 * i + j]
                if const_expr(guard):
                    masked = s == -Float32.inf
                    p[j], g_j = self.activation.backward(Float32(0.0) if masked else s, consts)
                    tGrG[2 * i + j] = Float32(0.0) if masked else g_j
                else:
                    p[j], tGrG[2 * i + j] = self.activation.backward(s, consts)
            P_pairs[i] = utils.cvt_f16x2_f32(p[0], p[1], self.dtype)
        return tdVrP, tGrG

    @cute.jit
    def _pointwise_ds(self, tGrG: cute.Tensor, acc_dP: cute.Tensor):
        """After the dP GEMM: dS = G * dP, packed like P (alpha*qk_scale is applied to dQ and dK later)."""
        dP_f = layout_utils.reshape_acc_to_frgA(acc_dP)
        tdKrdS = cute.make_rmem_tensor(dP_f.shape, self.dtype)
        dS_pairs = cute.recast_tensor(tdKrdS, Int32)
        for i in cutlass.range_constexpr(cute.size(dS_pairs)):
            dS_pairs[i] = utils.cvt_f16x2_f32(tGrG[2 * i] * dP_f[2 * i], tGrG[2 * i + 1] * dP_f[2 * i + 1], self.dtype)
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
        """FA4's loop calls this once per query block. With `pair_blocks`, the call of an even block (counted
        from the tile's first) runs it and the next one as straight-line code, and the odd call returns at
        once: the first block's dK GEMM stays in flight under the second block's S and dP GEMMs, where a
        loop iteration per block drains the tensor pipe (ptxas waits for every wgmma group at the loop's back
        edge: PERF.md "The drain between backward blocks")."""
        block = partial(
            self._m_block,
            warp_group_idx=warp_group_idx,
            mma_qk_fn=mma_qk_fn,
            mma_dov_fn=mma_dov_fn,
            mma_pdo_fn=mma_pdo_fn,
            mma_dsq_fn=mma_dsq_fn,
            mma_dsk_fn=mma_dsk_fn,
            copy_P_r2s=copy_P_r2s,
            copy_dS_r2s=copy_dS_r2s,
            pipeline_Q=pipeline_Q,
            pipeline_dO=pipeline_dO,
            tLSEsLSE=tLSEsLSE,
            tLSEsdPsum=tLSEsdPsum,
            tdQsdQaccum=tdQsdQaccum,
            softmax_scale_log2=softmax_scale_log2,
            PdS_barrier=PdS_barrier,
            is_dQ_wg=is_dQ_wg,
            mask_fn=mask_fn,
        )
        if const_expr(not self.pair_blocks):
            consumer_state_Q, consumer_state_dO = block(
                m_block, consumer_state_Q, consumer_state_dO, dKV_accumulate=dKV_accumulate
            )
        else:
            # FA4's block-sparse loop skips blocks: the pairing's parity needs every block in order
            assert not self.use_block_sparsity, "pair_blocks: not with block sparsity"
            mask, _, n_block = _fa4_mask_parts(mask_fn)
            m_block_min, m_block_max = m_block_range(
                mask.seqlen_q, mask.seqlen_k, n_block, self.tile_m, self.tile_n, self.is_causal
            )
            # the states are reassigned from each block's return in every branch: the DSL yields a name out of a
            # dynamic `if` only when the branch assigns it (an advance inside a call would be lost)
            if (m_block - m_block_min) % 2 == 0:
                first_Q = consumer_state_Q.clone()
                consumer_state_Q, consumer_state_dO = block(
                    m_block, consumer_state_Q, consumer_state_dO, dKV_accumulate=dKV_accumulate, drain=False
                )
                if m_block + 1 < m_block_max:
                    consumer_state_Q, consumer_state_dO = block(
                        m_block + 1, consumer_state_Q, consumer_state_dO, dKV_accumulate=True, held_Q=first_Q
                    )
                else:
                    warpgroup.wait_group(0)
                    pipeline_Q.consumer_release(first_Q)
        return consumer_state_Q, consumer_state_dO

    @cute.jit
    def _m_block(
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
        drain: cutlass.Constexpr[bool] = True,
        held_Q=None,
    ):
        """One query block against this CTA's key tile. `drain` False: the block ends with its dK GEMM in
        flight and its Q slot held (the caller releases it); `held_Q`: the previous block's Q state, released
        here once this block's S GEMM and the previous dK GEMM are complete (the wait under the dP GEMM)."""
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
        acc_dP = mma_dov_fn(A_idx=i_dO, wg_wait=1)  # S and a held block's dK GEMM complete
        if const_expr(held_Q is not None):
            pipeline_Q.consumer_release(held_Q)

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
            if const_expr(drain):
                warpgroup.wait_group(0)
                pipeline_Q.consumer_release(consumer_state_Q)
        else:
            if const_expr(not self.mma_dkv_is_rs):
                mma_dsq_fn(A_idx=i_PdS, B_idx=i_Q, zero_init=not dKV_accumulate, wg_wait=1)
            else:
                mma_dsq_fn(tCrA=tdKrdS, B_idx=i_Q, zero_init=not dKV_accumulate, wg_wait=1)
            pipeline_dO.consumer_release(state_dO)
            if const_expr(drain):
                warpgroup.wait_group(0)
                pipeline_Q.consumer_release(consumer_state_Q)
        consumer_state_Q.advance()
        consumer_state_dO.advance()
        return consumer_state_Q, consumer_state_dO

    def mma(self, *args, **kwargs):
        """FA4's `mma()`; its softmax_scale argument (a kernel argument, so valid anywhere in the kernel) is kept
        for `epilogue_dKV`, which FA4 does not hand it."""
        self._softmax_scale = _softmax_scale_of_mma(args, kwargs)
        return super().mma(*args, **kwargs)

    def epilogue_dKV(self, acc_dV, *args, **kwargs):
        """FA4's epilogue, after dV takes the scale the pointwise left out of P. P' = act(alpha*s)/(alpha*p_fold)
        where the activation is alpha times a function of s (activations.py `p_fold`: all but relu_square and
        hardswish, which keep P = qk_scale*act(alpha*s)); so dV is scaled by alpha*qk_scale*p_fold here, once per
        key tile, with alpha*qk_scale FA4's softmax_scale, where P took one or more FP32 ops a score. Without GQA
        only, as FA4 scales dK: with GQA the dK/dV postprocess scales the heads' sum (launch.py)."""
        if self.activation.p_fold is not None and self.qhead_per_kvhead == 1:
            acc_dV.store(acc_dV.load() * (self._softmax_scale * self.activation.p_fold))
        return super().epilogue_dKV(acc_dV, *args, **kwargs)


class GDPABackwardSm90Persistent(PersistentBackwardMixin, GDPABackwardSm90):
    """GDPABackwardSm90 for a persistent grid (persistent_bwd.py): several key tiles per CTA."""


def _softmax_scale_of_mma(args: tuple, kwargs: dict):
    """FA4's `mma(...)` argument `softmax_scale` (the kernel's alpha*qk_scale, launch.py), positional or named."""
    import inspect

    if "softmax_scale" in kwargs:
        return kwargs["softmax_scale"]
    names = [n for n in inspect.signature(FlashAttentionBackwardSm90.mma).parameters if n != "self"]
    if "softmax_scale" not in names:
        raise RuntimeError(
            "GDPABackwardSm90: FA4's FlashAttentionBackwardSm90.mma() no longer takes softmax_scale; this "
            "flash-attn-4 version is not supported"
        )
    return args[names.index("softmax_scale")]
