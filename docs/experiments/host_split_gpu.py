"""Why did one log-normal 2048 forward read host-bound? (issue 30's "host time included".) In f20b010's H100
production run (docs/experiments/h100-2026-12-07g) lognormal/fwd/L=2048/sort=True/gdpa ran the plan auto had chosen
on its unsorted twin (triton[0, 256) + hopper[256, inf), kernel sums 0.516 and 0.502 ms) but its samples read 0.694
ms against a CUDA-graph time of 0.5135, noisy (0.64-0.80), and its back-to-back energy loop 0.663 ms a call; the
unsorted case, just before it, read 0.536 (tight) and 0.543 back to back. So the op's host time a call was ~0.66 ms
in one case and under 0.54 in the other: how far under is what decides whether a slower host flips a case.

In one process, on the two batches as configs/production.yaml builds them: each provider's host time a call (200
calls, nothing synchronised between them: what the CPU spends before the GPU waits) and 300 ms of event-timed
samples as the harness takes them, for `gdpa` (auto's split plan), `gdpa_hopper` and `gdpa_triton`; eight rounds,
each with the host's speed (a fixed pure-Python loop) and this core's clock, so a slow round shows whether the host
or the op changed. Prints a JSON line a row and, last, each provider's host time against its GPU time.

    PYTHONPATH=. python docs/experiments/host_split_gpu.py > $OUT/host_split_gpu.jsonl
"""

from __future__ import annotations

import json
import os
import time

import numpy as np
import torch

from bench.case.timing import time_cuda
from bench.config.models import load_config
from kernels.registry import get_provider

CASES = ("lognormal/fwd/L=2048/sort=False", "lognormal/fwd/L=2048/sort=True")
PROVIDERS = ("gdpa", "gdpa_hopper", "gdpa_triton")
ROUNDS = 8


def host_us(fn, calls: int = 200) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return round(dt, 1)


def host_loop_us() -> float:
    t0 = time.perf_counter()
    acc = 0
    for i in range(200_000):
        acc += i & 7
    return round((time.perf_counter() - t0) * 1e6)


def core_mhz() -> float | None:
    try:
        core = os.sched_getcpu()
        for block in open("/proc/cpuinfo").read().split("\n\n"):
            if block.startswith(f"processor\t: {core}\n"):
                return float(block.split("cpu MHz\t\t: ")[1].split("\n")[0])
    except (OSError, IndexError, ValueError, AttributeError):
        return None
    return None


def main() -> None:
    d = torch.device("cuda", 0)
    config = load_config("configs/production.yaml")
    built = {}
    for prefix in CASES:
        case = next(c for c in config.cases if c.id == f"{prefix}/gdpa")
        batch = case.workload.batch(d, case.workload.lengths())
        for name in PROVIDERS:
            fn = get_provider(name).build(batch, case.spec, case.mode)
            fn()  # compile, autotune, auto's measurement: outside every figure below
            built[(prefix, name)] = fn
    torch.cuda.synchronize()
    rows = []
    for r in range(ROUNDS):
        speed = {"round": r, "host_loop_us": host_loop_us(), "core_mhz": core_mhz()}
        for (prefix, name), fn in built.items():
            t = np.asarray(time_cuda(fn, warmup_ms=25, rep_ms=300, device=d).times_ms)
            row = {**speed, "case": prefix, "provider": name, "host_us": host_us(fn),
                   "p20": round(float(np.percentile(t, 20)), 4), "p50": round(float(np.median(t)), 4),
                   "p80": round(float(np.percentile(t, 80)), 4)}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
    for key in built:
        mine = [r for r in rows if (r["case"], r["provider"]) == key]
        host = [r["host_us"] for r in mine]
        gpu = [r["p50"] * 1e3 for r in mine]
        print(json.dumps({"case": key[0], "provider": key[1], "host_us_median": float(np.median(host)),
                          "host_us_max": max(host), "p50_us_median": round(float(np.median(gpu)), 1),
                          "host_over_p50": round(float(np.median(host)) / float(np.median(gpu)), 3)}))  # fmt: skip


if __name__ == "__main__":
    main()
