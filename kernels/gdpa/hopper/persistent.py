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
the producer could land the next Q in the buffer while O is staged there. `PersistentForwardMixin` gives O
a buffer of its own at the end of FA4's shared storage (32 KB at head dim 128: 192 KB in all, of the
H100/H200's 227), so FA4's early release stands and the next tile's Q loads under this tile's last block
and epilogue, as its K does. (Before, the release was held back to after the epilogue's TMA store, which left
the next Q's load latency on every tile boundary: `git show e680132:kernels/gdpa/hopper/persistent.py`; alone,
without the place index below, taking it off moved nothing, since the consumers' own tile decode took as long:
kernels/gdpa/hopper/NOTES.md "The persistent forward's tile boundary".)
The O buffer is reused by the next tile's epilogue only after this tile's TMA store has read it: FA4's
store warp waits for that (`cp.async.bulk.wait_group.read 0`) before it joins the next epilogue's first
barrier, which every consumer warp passes before writing O.
"""

from __future__ import annotations

import dataclasses
import inspect

import cutlass
import cutlass.cute as cute
from cutlass import Int32
from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
from flash_attn.cute.named_barrier import NamedBarrierFwd
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
    tile-count hint, carries it here with the flat tile index FA4's decoder can read a tile's place from
    (`blocks_to_batch_idx`, which FA4 builds for its sm100 forward; without it every warp binary-searches the
    counts at every tile, ~11 dependent loads before the tile starts): [cu (B+1) | order (B) | place (N)], split
    into the three again before FA4 builds its decoder from them."""

    @staticmethod
    def to_underlying_arguments(args, *, scheduling_mode=SchedulingMode.STATIC, loc=None, ip=None):
        packed, batch = args.cu_total_m_blocks_ptr, args.num_batch
        counts = cute.make_tensor(packed.iterator, cute.make_layout(batch + 1))
        order = cute.make_tensor(packed.iterator + (batch + 1), cute.make_layout(batch))
        places = cute.make_tensor(packed.iterator + (2 * batch + 1), cute.make_layout(packed.shape[0] - 2 * batch - 1))
        args = dataclasses.replace(
            args, cu_total_m_blocks_ptr=counts, virtual_batch_idx_ptr=order, blocks_to_batch_idx_ptr=places
        )
        return SingleTileVarlenScheduler.to_underlying_arguments(args, scheduling_mode=scheduling_mode, loc=loc, ip=ip)


def persistent_scheduler(num_ctas: int, longest_first: bool = False) -> type:
    """The scheduler class for a grid of `num_ctas` CTAs (walking the sequences longest first: its hint
    operand is `longest_first.longest_first_order`'s)."""
    base = LongestFirstScheduler if longest_first else PersistentVarlenScheduler
    return type(f"{base.__name__}{num_ctas}", (base,), {"NUM_CTAS": int(num_ctas)})


_EPILOGUE_SIGNATURE = inspect.signature(FlashAttentionForwardSm90.epilogue)
# the first named barrier FA4's sm90 forward leaves free (it uses 1-6: NamedBarrierFwd)
EPILOGUE_ENTRY_BARRIER = max(NamedBarrierFwd) + 1


class PersistentForwardMixin:
    """For a subclass of FlashAttentionForwardSm90: O staged in shared memory of its own, so Q's buffer is
    free for the next tile from FA4's release before the last key block (`persistent_scheduler`)."""

    def _get_shared_storage_cls(self):
        fa4 = super()._get_shared_storage_cls()
        # FA4's struct, its fields in their order, plus O's: the kernel body allocates whatever struct this
        # returns, so its launch reserves the O buffer too
        fields = dict(fa4._cls.__annotations__)
        fields["sO"] = cute.struct.Align[
            cute.struct.MemRange[self.dtype, cute.cosize(self.sO_layout)], self.buffer_align_bytes
        ]
        storage = cute.struct(type("SharedStorageWithO", (), {"__annotations__": fields}))
        # the epilogue gets FA4's O view (Q's buffer, swizzled for O's TMA store) and moves it by this many
        # elements; both offsets are multiples of the buffer alignment, so the swizzle's phase is unchanged
        self._o_past_q = (storage._offsets["sO"] - storage._offsets["sQ"]) * 8 // self.dtype.width
        return storage

    def epilogue(self, *args, **kwargs):
        bound = _EPILOGUE_SIGNATURE.bind(self, *args, **kwargs)
        sO = bound.arguments["sO"]
        bound.arguments["sO"] = cute.make_tensor(sO.iterator + self._o_past_q, sO.layout)
        # FA4's epilogue uses its named barrier with two counts: every consumer thread, then the same plus the
        # store warp's second arrival. With Q free early, a warp of another warpgroup can finish a one-block
        # next tile and reach that barrier while the store warp has not yet made its second arrival for this
        # tile, completing the wrong phase (and writing O under the store). Here each epilogue starts only once
        # every consumer thread, the store warp included, has left the one before.
        cute.arch.barrier(barrier_id=EPILOGUE_ENTRY_BARRIER, number_of_threads=self.num_epilogue_threads)
        return super().epilogue(*bound.args[1:], **bound.kwargs)
