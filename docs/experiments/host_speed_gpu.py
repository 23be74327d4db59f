"""Is a host-bound call's time the host's speed? (issue 31: `auto` and the pinned backend running the same
kernel timed 0.13 vs 0.25 ms in one harness run, with equal CUDA-graph device time.) In one process, 16
rounds: the host's speed (a fixed pure-Python loop, µs), the CPU's clock (/proc/cpuinfo of this core), the
op's short-band forward (846 sequences of 1-127 tokens, gdpa_triton) event-timed for 150 ms, and every
fourth round a GPU-bound burst first (the long batch, 300 ms), as a sweep's cases alternate. Prints a JSON
line per round and the correlation of call time with host loop time last.

    PYTHONPATH=. python docs/experiments/host_speed_gpu.py
"""

import json
import os
import time

import numpy as np
import torch

from bench.case.timing import time_cuda
from kernels.registry import CaseSpec, get_provider
from workloads.batch import make_batch

d = torch.device("cuda", 0)
rng = np.random.default_rng(0)
short = rng.integers(1, 128, 846)
long = rng.integers(1024, 2048, 64)
p = get_provider("gdpa_triton")
fn = p.build(make_batch(short, short, H=4, D=128, dtype=torch.bfloat16, device=d, seed=0), CaseSpec(), "fwd")
burst = p.build(make_batch(long, long, H=4, D=128, dtype=torch.bfloat16, device=d, seed=0), CaseSpec(), "fwd")
fn(), burst()
torch.cuda.synchronize()


def host_loop_us() -> float:
    t0 = time.perf_counter()
    acc = 0
    for i in range(200_000):
        acc += i & 7
    return (time.perf_counter() - t0) * 1e6


def cpu_mhz() -> float | None:
    cpu = os.sched_getaffinity(0)
    try:
        core = os.sched_getcpu() if hasattr(os, "sched_getcpu") else min(cpu)
        blocks = open("/proc/cpuinfo").read().split("\n\n")
        for b in blocks:
            if f"processor\t: {core}\n" in b + "\n":
                return float(b.split("cpu MHz\t\t: ")[1].split("\n")[0])
    except (OSError, IndexError, ValueError):
        return None
    return None


rows = []
for r in range(16):
    if r % 4 == 3:
        time_cuda(burst, warmup_ms=20, rep_ms=300, device=d)
    loop = host_loop_us()
    s = time_cuda(fn, warmup_ms=20, rep_ms=150, device=d)
    row = {"round": r, "host_loop_us": round(loop), "cpu_mhz": cpu_mhz(), "median_ms": s.median_ms,
           "p80_ms": s.p80_ms, "after_burst": r % 4 == 3}  # fmt: skip
    rows.append(row)
    print(json.dumps(row), flush=True)
x = np.array([r["host_loop_us"] for r in rows])
y = np.array([r["median_ms"] for r in rows])
print(json.dumps({"corr_loop_vs_median": float(np.corrcoef(x, y)[0, 1]), "median_spread": float(y.max() / y.min()),
                  "loop_spread": float(x.max() / x.min()), "cpus": len(os.sched_getaffinity(0))}))  # fmt: skip
