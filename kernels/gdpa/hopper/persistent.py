"""A persistent schedule for FA4's sm90 varlen forward: a grid of one CTA per SM walking the batch's tiles.

FA4's sm90 forward sizes its varlen grid by every row of the batch (`total_q + B·(tile_m − 1)` tiles per
head) whatever its `seqused` vectors say, and each CTA runs one tile. A launch over one length band then pays
for the CTAs of every other sequence: 0.132 ms for an empty band on the H200 (PERF.md "Jagged batches"), and
every short sequence pays a CTA's prologue (barrier setup, Q/K/V TMA latency) for one or two key blocks.

Here the grid is `num_ctas` CTAs (the SM count: the kernel holds one CTA per SM), and CTA c runs tiles c,
c + num_ctas, c + 2·num_ctas, … of FA4's own tile order, decoded by FA4's varlen decoder (warp scan, or the
cumulative tile-count hint above 256 sequences). Sequences outside the band have 0 tiles (`seqused` = 0), so
they cost nothing, and a CTA's next tile reuses its barriers and overlaps its K/V loads with this one's tail.

FA4's forward loops over tiles already (producer and consumers each hold a scheduler and advance in step),
but it was written for one tile per CTA in one respect: the consumers release Q's shared memory before the
last key block, and the epilogue then stages O in that same buffer (`sO` aliases `sQ`). With a next tile,
the producer could land the next Q in the buffer while O is staged there. `DeferredQRelease` holds the
release back until the epilogue's TMA store has read the buffer (FA4's epilogue waits for that on its store
warp, and the Q barrier completes only when every consumer warp has arrived), so the next Q load waits for
the epilogue instead. What that costs: the next tile's Q load is no longer hidden under this tile's last
block; the K/V loads still are.
"""

from __future__ import annotations

import dataclasses
import inspect

import cutlass
import cutlass.cute as cute
from cutlass import Int32
from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
from flash_attn.cute.tile_scheduler import SchedulingMode, SingleTileVarlenScheduler


class PersistentVarlenScheduler(SingleTileVarlenScheduler):
    """FA4's varlen tile decoding, walked by a fixed grid: tile index += grid size after each tile.

    `NUM_CTAS` is a class constant (a subclass per value, `persistent_scheduler`): the grid is chosen when
    the kernel is compiled, which happens without a GPU (cross-compiles), so it cannot be read from the
    device then."""

    NUM_CTAS = 132

    @classmethod
    def get_grid_shape(cls, params, *, loc=None, ip=None):
        decoder = params.decoder
        tile_m = decoder.tile_shape_mn[0]
        tiles_per_head = (params.total_q + decoder.num_batch * (tile_m - 1)) // tile_m
        return (cutlass.min(Int32(cls.NUM_CTAS), tiles_per_head * decoder.num_head), Int32(1), Int32(1))

    @classmethod
    def create(cls, params, ctx=None, *, loc=None, ip=None):
        tile_idx, split_idx, _ = cute.arch.block_idx()
        return cls(params, tile_idx, split_idx, loc=loc, ip=ip)

    def advance_to_next_work(self, *, loc=None, ip=None):
        # FA4's version marks the scheduler spent after its one tile; here the CTA strides to its next one
        # (a tile index past the batch's last tile decodes as invalid, which ends the CTA's loop)
        self._tile_idx += cute.arch.grid_dim()[0]
        return self.get_current_work()


class LongestFirstScheduler(PersistentVarlenScheduler):
    """The persistent walk over the sequences in the order `longest_first.longest_first_order` wrote on the device,
    longest keys first, so the static stride's CTAs end together (longest_first.py says why).

    FA4's varlen decoder already walks a `virtual_batch_idx` order (its tile-count hint then counted in that
    order), but its sm90 forward's `__call__` passes none. The kernel's one per-batch scheduling operand, the
    tile-count hint, carries both here: [cu (B+1) | order (B)], split into the two again before FA4 builds
    its decoder from them."""

    @staticmethod
    def to_underlying_arguments(args, *, scheduling_mode=SchedulingMode.STATIC, loc=None, ip=None):
        packed, batch = args.cu_total_m_blocks_ptr, args.num_batch
        counts = cute.make_tensor(packed.iterator, cute.make_layout(batch + 1))
        order = cute.make_tensor(packed.iterator + (batch + 1), cute.make_layout(batch))
        args = dataclasses.replace(args, cu_total_m_blocks_ptr=counts, virtual_batch_idx_ptr=order)
        return SingleTileVarlenScheduler.to_underlying_arguments(args, scheduling_mode=scheduling_mode, loc=loc, ip=ip)


def persistent_scheduler(num_ctas: int, longest_first: bool = False) -> type:
    """The scheduler class for a grid of `num_ctas` CTAs (walking the sequences longest first: its hint
    operand is `longest_first.longest_first_order`'s)."""
    base = LongestFirstScheduler if longest_first else PersistentVarlenScheduler
    return type(f"{base.__name__}{num_ctas}", (base,), {"NUM_CTAS": int(num_ctas)})


class DeferredQRelease:
    """FA4's Q pipeline as mma() sees it, with the consumer release held back: mma() releases Q before the
    last key block; `release_now()` (called after the epilogue) does it instead."""

    def __init__(self, pipeline):
        self._pipeline = pipeline

    def __getattr__(self, name):
        if name == "_pipeline":  # not set yet (a copy under construction): no recursion
            raise AttributeError(name)
        return getattr(self._pipeline, name)

    # mma()'s tile loop carries the pipeline as a run-time value: carry the one inside
    def __extract_mlir_values__(self):
        return cutlass.extract_mlir_values(self._pipeline)

    def __new_from_mlir_values__(self, values):
        return DeferredQRelease(cutlass.new_from_mlir_values(self._pipeline, values))

    def consumer_release_w_index(self, *args, **kwargs):
        pass  # released by release_now() once the epilogue no longer needs the buffer

    def release_now(self):
        self._pipeline.consumer_release_w_index(0)


_MMA_SIGNATURE = inspect.signature(FlashAttentionForwardSm90.mma)


class PersistentForwardMixin:
    """For a subclass of FlashAttentionForwardSm90: Q's shared memory released after the epilogue, so the
    forward may run several tiles per CTA (`persistent_scheduler`)."""

    def mma(self, *args, **kwargs):
        bound = _MMA_SIGNATURE.bind(self, *args, **kwargs)
        self._deferred_q = DeferredQRelease(bound.arguments["pipeline_q"])
        bound.arguments["pipeline_q"] = self._deferred_q
        return super().mma(*bound.args[1:], **bound.kwargs)

    def epilogue(self, *args, **kwargs):
        result = super().epilogue(*args, **kwargs)
        self._deferred_q.release_now()
        return result
