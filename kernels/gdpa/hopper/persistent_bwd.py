"""A persistent schedule for FA4's sm90 varlen backward: a grid of one CTA per SM walking the batch's key tiles.

FA4's sm90 backward runs one CTA per key tile (`SingleTileVarlenScheduler` with the roles of Q and K swapped),
over a grid sized by every key row of the batch whatever its `seqused` vectors say: a launch over one length
band pays for the CTAs of every other sequence, and each short sequence pays a CTA's prologue (barrier setup,
K/V/Q TMA latency) for one or two query blocks. Here the grid is the SM count and CTA c runs key tiles c,
c + grid, c + 2·grid, ... of FA4's own tile order (persistent.PersistentVarlenScheduler, as the forward).

FA4's three roles loop over tiles already (the load warp, the dQ-store warp and the MMA warpgroups each hold
a scheduler and advance in step), but one thing is written for one tile per CTA: the epilogue stages dK and
dV in the shared memory of K and V (`epilogue_dKV`: sK / sV, or sV as fp32 for GQA's reduce-adds) and leaves
its TMA stores in flight, while the load warp, once the tile's last query block is issued, would load the
next tile's K and V into that memory. So the MMA warps and the load warp meet on a named barrier (`KV_FREE`)
once the epilogue's stores have read shared memory, before the load warp moves to its next tile
(`prefetch_next_work`, which only the load warp calls, once per tile, after the tile's loads). Both sides wait
(`bar.sync`): with the MMA side only arriving, a run of key tiles without query blocks (an epilogue of zeros, no
loads) could let the MMA warps arrive for two tiles before the load warp's one, completing a phase without it
and leaving the load warp waiting in the next one. The load warp reaches the barrier once its tile's last loads
are issued, before the MMA warps finish that tile, so the MMA side does not wait there. What the barrier costs:
the next tile's K/V/Q loads no longer overlap this tile's epilogue (letting them start under its dK half, with dK
in a buffer of its own, measured no faster: kernels/gdpa/PERF.md "dK in its own buffer").
"""

from __future__ import annotations

import contextlib
import threading

import cutlass.cute as cute
from flash_attn.cute import flash_bwd_sm90 as fa4_bwd_sm90
from flash_attn.cute.named_barrier import NamedBarrierBwd

from kernels.gdpa.hopper.persistent import LongestFirstScheduler, PersistentVarlenScheduler

# The first hardware barrier id after FA4's backward ones (0 is __syncthreads; NamedBarrierBwd runs 1..11)
KV_FREE = max(int(b) for b in NamedBarrierBwd) + 1
assert KV_FREE < 16, "sm90 has 16 named barriers"


class PersistentBackwardScheduler(PersistentVarlenScheduler):
    """The forward's persistent varlen walk; before its next tile the load warp waits until the MMA warps'
    epilogue no longer reads K's and V's shared memory (`KV_FREE`, which PersistentBackwardMixin's MMA threads
    wait on too).
    `THREADS`: the MMA threads plus the load warp (a class constant, like NUM_CTAS)."""

    THREADS = 288

    def initial_work_tile_info(self, *, loc=None, ip=None):
        # FA4's backward launches with programmatic dependent launch, and only its load and dQ warps wait for the
        # launch before it, the load warp after its first decode: every role waits here, before it reads the
        # scheduling operand that launch wrote (the tile counts, or the order and place index)
        cute.arch.griddepcontrol_wait()
        return super().initial_work_tile_info(loc=loc, ip=ip)

    def prefetch_next_work(self, *, loc=None, ip=None):
        cute.arch.barrier(barrier_id=KV_FREE, number_of_threads=self.THREADS)


def persistent_backward_scheduler(num_ctas: int, mma_threads: int, longest_first: bool = False) -> type:
    """The scheduler class for a grid of `num_ctas` CTAs whose MMA warpgroups hold `mma_threads` threads.

    `longest_first`: the walk goes over the sequences longest queries first (a key tile's cost is its sequence's
    query blocks) and reads each key tile's sequence from a place index in one load, as the persistent forward
    does (persistent.LongestFirstScheduler; its hint operand is `longest_first.longest_first_order`'s with the
    roles of queries and keys swapped, as FA4's backward swaps them). Without it every key tile binary-searches
    the tile counts in every warp, and the static stride hands each CTA whatever key tiles land on it: the walk
    was 2-7% slower than FA4's grid (kernels/gdpa/PERF.md "The persistent Hopper backward")."""
    name = f"PersistentBackwardScheduler{num_ctas}x{mma_threads}{'LongestFirst' if longest_first else ''}"
    threads = int(mma_threads) + cute.arch.WARP_SIZE
    bases = (PersistentBackwardScheduler, LongestFirstScheduler) if longest_first else (PersistentBackwardScheduler,)
    return type(name, bases, {"NUM_CTAS": int(num_ctas), "THREADS": threads})


class PersistentBackwardMixin:
    """For a subclass of FlashAttentionBackwardSm90: after each tile's dK/dV epilogue, its TMA stores' reads
    of shared memory complete, then the MMA threads meet the load warp on `KV_FREE`."""

    def epilogue_dKV(self, *args, **kwargs):
        # FA4 runs the epilogue on every tile (zeros for a tile with no query block) only with varlen queries,
        # which launch.py always passes: otherwise an empty tile would never arrive and its load warp would wait
        assert self.is_varlen_q, "the persistent backward needs cu_seqlens_q (varlen queries)"
        result = super().epilogue_dKV(*args, **kwargs)
        cute.arch.cp_async_bulk_wait_group(0, read=True)  # the thread that issued the stores: they have read
        cute.arch.barrier(barrier_id=KV_FREE, number_of_threads=self.num_mma_threads + cute.arch.WARP_SIZE)
        return result


_SWAP_LOCK = threading.Lock()


@contextlib.contextmanager
def backward_scheduler(scheduler: type | None):
    """FA4's backward `__call__` picks its varlen scheduler from the module global `SingleTileVarlenScheduler`:
    point it at `scheduler` while our kernel is traced (None: FA4's), and restore it afterwards."""
    with _SWAP_LOCK:
        original = fa4_bwd_sm90.SingleTileVarlenScheduler
        if scheduler is not None:
            fa4_bwd_sm90.SingleTileVarlenScheduler = scheduler
        try:
            yield
        finally:
            fa4_bwd_sm90.SingleTileVarlenScheduler = original
