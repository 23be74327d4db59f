"""Tile configs as the kernels' autotuners and the pinning environment variables spell them:
(BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]).

The optional fifth value caps registers per thread. It exists for occupancy: at 178 registers and
128 KB of shared memory the 8-warp forward fits one CTA per SM, so one CTA's activation leaves the
tensor pipe idle; capped at 128 registers with ≤ 96 KB two CTAs share an SM and one's GEMMs run under
the other's activation (kernels/gdpa/PERF.md, v3)."""
import triton


def triton_config(cfg, pre_hook=None) -> triton.Config:
    m, n, w, s = cfg[:4]
    maxnreg = cfg[4] if len(cfg) > 4 and cfg[4] else None
    return triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s, maxnreg=maxnreg,
                         pre_hook=pre_hook)
