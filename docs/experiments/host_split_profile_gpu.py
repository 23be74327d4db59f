"""Where does `gdpa`'s host time go on the log-normal 2048 forward's split plan? host_split_gpu.py (2026-12-07,
H100: docs/experiments/h100-2026-12-07i) measured ~590 us of host time a call against ~200 for either backend alone
and ~610 us of GPU time: the split plan is within 5% of host-bound. This runs 300 calls of each under cProfile
(nothing synchronised between them) and prints the functions that hold the most own time, then cumulative.

    PYTHONPATH=. python docs/experiments/host_split_profile_gpu.py > $OUT/host_split_profile.txt
"""

from __future__ import annotations

import cProfile
import io
import pstats

import torch

from bench.config.models import load_config
from kernels.registry import get_provider

CASE = "lognormal/fwd/L=2048/sort=False"


def main() -> None:
    d = torch.device("cuda", 0)
    config = load_config("configs/production.yaml")
    case = next(c for c in config.cases if c.id == f"{CASE}/gdpa")
    batch = case.workload.batch(d, case.workload.lengths())
    for name in ("gdpa", "gdpa_hopper"):
        fn = get_provider(name).build(batch, case.spec, case.mode)
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        for key in ("tottime", "cumulative"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(28)
            print(f"==== {name} by {key} (300 calls)\n" + s.getvalue(), flush=True)


if __name__ == "__main__":
    main()
