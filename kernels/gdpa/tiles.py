"""Tile configs as the kernels' autotuners and GDPAOptions spell them:
(BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]).

The optional fifth value caps registers per thread (0 = no cap). It exists for occupancy: at 178
registers and 128 KB of shared memory the 8-warp forward fits one CTA per SM, so one CTA's activation
leaves the tensor pipe idle; capped at 128 registers with ≤ 96 KB two CTAs share an SM and one's GEMMs
run under the other's activation (kernels/gdpa/PERF.md, v3)."""

import triton


def launch_kwargs(tiles) -> dict:
    """Keyword arguments of one kernel launch with these tiles."""
    m, n, w, s = tiles[:4]
    extra = {"maxnreg": tiles[4]} if len(tiles) > 4 and tiles[4] else {}
    return dict(BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=s, **extra)


def triton_config(tiles) -> triton.Config:
    kw = launch_kwargs(tiles)
    return triton.Config({"BLOCK_M": kw.pop("BLOCK_M"), "BLOCK_N": kw.pop("BLOCK_N")}, **kw)


def tiles_of(config: triton.Config) -> tuple:
    """The tiles of an autotuner's config, spelt as GDPAOptions takes them back."""
    tiles = (config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], config.num_warps, config.num_stages)
    return (*tiles, config.maxnreg) if config.maxnreg else tiles
