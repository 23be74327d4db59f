"""The Hopper backward's dQ warp without a zeroed accumulator: first-touch.

FA4's sm90 backward bulk-reduce-adds every key tile's dQ into an fp32 accumulator its preprocess zeroed (for GDPA,
a memset of rows x heads x head dim x 4 bytes on the call's critical path: kernels/gdpa/PERF.md "dQ without its
memset"). Here one int32 counter a query tile (accumulators.first_touch_dq, zeroed by the launch) decides how each
key tile's dQ reaches the accumulator: the first to arrive stores it with a plain bulk copy, waits for the store to
land and releases a DQ_STORED mark; every later one waits for that mark and reduce-adds. `FirstTouchDQ` is the mixin
GDPABackwardSm90 puts before FA4's class; launch.py passes the counters in FA4's `mdQ_semaphore` slot.
"""

from __future__ import annotations

from collections.abc import Callable

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op
from flash_attn.cute import barrier as fa4_barrier
from flash_attn.cute.named_barrier import NamedBarrierBwd
from quack import copy_utils

# A dQ tile's counter (accumulators.first_touch_dq) once the first key tile's store into it has landed; below it,
# the number of key tiles that have arrived
DQ_STORED = 1 << 20


@dsl_user_op
def _atomic_add(ptr: cute.Pointer, val: Int32, *, loc=None, ip=None) -> Int32:
    """`atom.add` on a global int32 (relaxed, GPU scope): the value before the add."""
    old = llvm.inline_asm(
        T.i32(),
        [ptr.toint(loc=loc, ip=ip).ir_value(), Int32(val).ir_value(loc=loc, ip=ip)],
        "atom.relaxed.gpu.global.add.s32 $0, [$1], $2;",
        "=r,l,r",
        has_side_effects=True,
        is_align_stack=False,
        asm_dialect=llvm.AsmDialect.AD_ATT,
    )
    return Int32(old)


class FirstTouchDQ:
    """FA4's `dQaccum_store` with first-touch where launch.py hands it tile counters (before FA4's class in the
    MRO: `super()` is FA4's own)."""

    def dQaccum_store(
        self,
        mdQaccum,
        sdQaccum,
        block_info,
        TileSchedulerCls,
        SeqlenInfoCls,
        blocksparse_tensors=None,
        mdQ_semaphore=None,
    ):
        """The dQ warp: FA4's (a bulk reduce-add of every query block's dQ into an accumulator of zeros), or, with
        the tile counters launch.py passes in FA4's `mdQ_semaphore` slot, first-touch (`_dQaccum_first_touch`)."""
        args = (mdQaccum, sdQaccum, block_info, TileSchedulerCls, SeqlenInfoCls)
        if mdQ_semaphore is None:
            return super().dQaccum_store(*args, blocksparse_tensors, mdQ_semaphore)
        assert self.is_varlen_q and not (self.deterministic or self.use_block_sparsity), "first-touch dQ: varlen"
        return self._dQaccum_first_touch(*args, mdQ_semaphore)

    @cute.jit
    def _dQaccum_first_touch(
        self,
        mdQaccum: cute.Tensor,
        sdQaccum: cute.Tensor,
        block_info,
        TileSchedulerCls: cutlass.Constexpr[Callable],
        SeqlenInfoCls: cutlass.Constexpr[Callable],
        mCount: cute.Tensor,
    ):
        """FA4's dQ warp loop (the same hand-offs with the MMA warpgroups, per query block and dQ chunk), where
        each query tile's counter (mCount[head, tile of FA4's padded layout], zeroed by the launch) decides how
        the block's dQ reaches the accumulator: the key tile that arrives first stores it, waits for the store to
        land and marks the counter DQ_STORED (release); every later one waits for that mark (acquire) and adds.
        So the accumulator holds no zeros to begin with (FA4's deterministic mode orders its adds the same way,
        by a counter per tile: flash_attn.cute.barrier). One lane does the counting and the copies."""
        # FA4 launches this kernel as a programmatic dependent of the one before (use_pdl): only its load warp waits
        # for that grid (griddepcontrol.wait), and this warp's first counter add could pass the zeroing launch's
        # stores (a review found it, 2026-12-06)
        cute.arch.griddepcontrol_wait()
        lane = cute.arch.lane_idx()
        chunks = self.num_wg_dQ
        sync_threads = self.num_threads_per_warp_group + cute.arch.WARP_SIZE
        tile_scheduler = TileSchedulerCls()
        work_tile = tile_scheduler.initial_work_tile_info()
        while work_tile.is_valid_tile:
            n_block, head_idx, batch_idx, _ = work_tile.tile_idx
            seqlen = SeqlenInfoCls(batch_idx)
            gdQaccum = cute.local_tile(
                cute.domain_offset((seqlen.padded_offset_q * self.tile_hdim,), mdQaccum[None, head_idx]),
                (cute.make_layout((self.tile_m * self.tile_hdim // chunks, chunks)),),
                (None,),
            )
            counters = mCount[head_idx, None].iterator + seqlen.padded_offset_q // self.tile_m
            m_block_min, m_block_max = block_info.get_m_block_min_max(seqlen, n_block)
            for m_block in cutlass.range(m_block_min, m_block_max, unroll=1):
                for wg in cutlass.range_constexpr(chunks):
                    cute.arch.cp_async_bulk_wait_group(chunks - 1 - wg, read=True)  # the last block's copies read
                    empty = int(NamedBarrierBwd.dQEmptyWG0) + wg
                    cute.arch.barrier_arrive(barrier_id=empty, number_of_threads=sync_threads)
                counter = counters + m_block
                arrived = Int32(1)
                if lane == 0:
                    arrived = _atomic_add(counter, Int32(1))  # 0: no key tile reached this query tile before
                for wg in cutlass.range_constexpr(chunks):
                    cute.arch.barrier(barrier_id=int(NamedBarrierBwd.dQFullWG0) + wg, number_of_threads=sync_threads)
                    if lane == 0:
                        src, dst = sdQaccum[None, wg].iterator, gdQaccum[(None, wg), m_block].iterator
                        if arrived == 0:
                            copy_utils.cpasync_bulk_s2g(src, dst, self.tma_copy_bytes["dQ"])
                        else:
                            if const_expr(wg == 0):
                                stored = fa4_barrier.ld_acquire(counter)
                                while stored < DQ_STORED:
                                    stored = fa4_barrier.ld_acquire(counter)
                                # the acquire orders generic-proxy accesses; the reduce-add is an async-proxy one
                                cute.arch.fence_proxy("async.global")
                            copy_utils.cpasync_reduce_bulk_add_f32(src, dst, self.tma_copy_bytes["dQ"])
                    cute.arch.cp_async_bulk_commit_group()
                if lane == 0:
                    if arrived == 0:
                        cute.arch.cp_async_bulk_wait_group(0, read=False)  # the stores landed in global memory
                        fa4_barrier.red_release(counter, DQ_STORED)
            tile_scheduler.advance_to_next_work()
            work_tile = tile_scheduler.get_current_work()
        cute.arch.cp_async_bulk_wait_group(0, read=True)
