"""FA4's sm90 varlen backward grid (one CTA per key tile) as the Hopper backend launches it past 2,048 sequences
(plans.backward_walks; below, the persistent walk of persistent_bwd.py).

FA4 launches its backward with programmatic dependent launch (PDL): a launch may start before the one before it
has finished, and a kernel reads that launch's output only after `griddepcontrol.wait`. FA4's load and dQ warps
wait before their first loads; its MMA warps decode their first tile without waiting, from the tile counts
(above 256 sequences) that launch.py writes with a Triton kernel just before. Nothing ordered the two; no test
ever saw a wrong tile. Here every role waits before its first decode, as the persistent walk's roles do.
"""

from __future__ import annotations

import cutlass.cute as cute
from flash_attn.cute.tile_scheduler import SingleTileVarlenScheduler


class GridBackwardScheduler(SingleTileVarlenScheduler):
    """FA4's one-CTA-per-key-tile varlen scheduler, every role waiting for the launch before it first."""

    @classmethod
    def create(cls, params, ctx=None, *, loc=None, ip=None):
        # FA4's `create` builds its own class by name: this one, so the roles get the wait below
        tile_idx, split_idx, _ = cute.arch.block_idx()
        return cls(params, tile_idx, split_idx, loc=loc, ip=ip)

    def initial_work_tile_info(self, *, loc=None, ip=None):
        cute.arch.griddepcontrol_wait()
        return super().initial_work_tile_info(loc=loc, ip=ip)
