"""The Hopper kernels' plans: tiles, scheduler hint and pointwise schedule, from the shape alone (no GPU).

launch.py compiles and launches what these name; the choices are FA4's sm90 ones except where an H200
measurement said otherwise (NOTES.md, PERF.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from flash_attn.cute.interface import BwdConfig, _tile_size_bwd_sm90

from kernels.gdpa.hopper.longest_first import LONGEST_FIRST_MAX_BATCH

# FA4's varlen scheduler decodes a tile's batch by a warp scan over all sequences unless given the
# cumulative tile counts; FA4 passes them above this batch size (interface.BIN_BATCH_SEARCH_THRESH)
SCHEDULER_HINT_MIN_BATCH = 256


@dataclass(frozen=True)
class ForwardConfig:
    tile_m: int
    tile_n: int
    pack_gqa: bool
    scheduler_hint: bool  # cumulative m-block counts handed to FA4's varlen scheduler
    banded: bool = False  # FA4's seqused vectors restrict the launch to one length band (bands.py)
    persistent_ctas: int = 0  # > 0: a persistent grid of this many CTAs (persistent.py); 0: FA4's one tile per CTA
    longest_first: bool = False  # the persistent grid walks the sequences longest first (longest_first.py)


def forward_config(
    head_dim: int, groups: int, batch: int, banded: bool = False, persistent_ctas: int = 0
) -> ForwardConfig:
    # FA4's sm90 choice (_tile_size_fwd_sm90): 192x128 for head dim 64, 128x128 for 128; P from registers
    tile_m = 192 if head_dim <= 64 else 128
    longest_first = persistent_ctas > 0 and batch <= LONGEST_FIRST_MAX_BATCH
    return ForwardConfig(
        tile_m, 128, groups > 1, batch > SCHEDULER_HINT_MIN_BATCH, banded, int(persistent_ctas), longest_first
    )


def backward_walks(batch: int) -> bool:
    """Whether the Hopper backend's backward is the persistent walk (persistent_bwd.py) rather than FA4's grid of
    one CTA per key tile: where the walk goes longest first (up to LONGEST_FIRST_MAX_BATCH sequences). There it
    led the grid by 2-9% on every set of docs/experiments/bwd_longest_first_ab.yaml but uniform 2048 (level) on an
    H100 (PERF.md "The persistent backward, longest first"); past it the walk goes in batch order, 2-7% behind the
    grid on the H200's log-normal and spike bands (PERF.md "The persistent Hopper backward")."""
    return batch <= LONGEST_FIRST_MAX_BATCH


@dataclass(frozen=True)
class BackwardPlan:
    cfg: BwdConfig  # FA4's tile configuration
    split: bool  # pointwise split around the dP GEMM (bwd.py) or fused after it
    pairs: bool = False  # two query blocks per step of FA4's loop (bwd.py `pair_blocks`)

    @property
    def variant(self) -> str:
        return f"{'split' if self.split else 'fused'}{self.cfg.m_block_size}{'x2' if self.pairs else ''}"


def backward_plan(head_dim: int, causal: bool, max_q: int, max_kv: int) -> BackwardPlan:
    """Tiles and pointwise schedule of the backward, by measurement (NOTES.md, H200 run 2):
    - head dim 128, causal: FA4's causal tiles (64x128), split pointwise;
    - head dim 128: 64x128 tiles, split pointwise, paired query blocks — 1.03-1.09x the 80x128 fused one on
      set 1 (80x128 split spills 21 registers and lost to both everywhere); also where queries are at least
      twice as long as keys, where the fused 80x128 one had won by 1.04-1.10x before query blocks were paired:
      since pairs the split one is 1.5-6.7% faster there (short_kv, set 2; PERF.md "Long queries on the
      split plan");
    - head dim 64: FA4's 128x128 tiles, fused (the split one spills 29 registers; not timed)."""
    if head_dim <= 64:
        return BackwardPlan(_tile_size_bwd_sm90(head_dim, head_dim, causal, False), False)
    # FA4's causal tiles = 64x128; paired query blocks (bwd.py), which serialize the fused plans' wgmmas
    return BackwardPlan(_tile_size_bwd_sm90(head_dim, head_dim, True, False), True, pairs=True)
