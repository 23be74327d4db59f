"""Run by tests/test_profiling_gpu.py in a fresh interpreter: our op's forward on the short band (846 sequences of
1-127 tokens, host-bound) timed in interleaved rounds (off, harness, process, thread; the order rotated each round
so clocks, temperature drift and a round's place weigh alike on all): no monitor; the harness's way
(bench.case.power.CasePower's time_samples with the sampler process paused for the samples, the clock read between
their chunks); the sampler process running through them; the thread sampler. 8 rounds of 150 ms each after one
discarded round. Prints one JSON line: every round's samples per kind.

Why a fresh interpreter: a profiler session leaves host time on every later call of its process
(tests/profiler_after_gpu.py), and the test file runs breakdowns before this; on the H200 (2026-12-02) the rounds
timed in that pytest process spread so that the process sampler's p80 read +4.3% over off."""

import json

import numpy as np
import torch

from bench.case.power import CasePower
from bench.case.timing import time_cuda
from bench.config.models import Power
from bench.monitor import PowerMonitor, gpu_index_from_device
from kernels.registry import CaseSpec, get_provider
from workloads.batch import make_batch

d = torch.device("cuda", 0)
lengths = np.random.default_rng(0).integers(1, 128, 846)
batch = make_batch(lengths, lengths, H=4, D=128, dtype=torch.bfloat16, device=d, seed=0)
fn = get_provider("gdpa").build(batch, CaseSpec(mode="fwd", activation="fast_gelu"), "fwd")
fn()  # compile, autotune, the op's measured choice
torch.cuda.synchronize()
process = PowerMonitor(device_index=gpu_index_from_device(d), period_ms=10.0)
if not process.available:
    print(json.dumps({"skip": f"no NVML: {process.unavailable_reason}"}))
    raise SystemExit(0)
thread = PowerMonitor(device_index=gpu_index_from_device(d), period_ms=10.0, sampler="thread")
samples: dict[str, list[float]] = {"off": [], "harness": [], "process": [], "thread": []}
clocks: list[float | None] = []
round_p50: dict[str, list[float]] = {}
round_p80: dict[str, list[float]] = {}


def one_round(between=None) -> list[float]:
    return time_cuda(fn, warmup_ms=20, rep_ms=150, device=d, between=between).times_ms


harness = CasePower(process, Power(), timer=lambda f, between=None: one_round(between), sync=torch.cuda.synchronize)
try:
    one_round()  # discarded: the first round after the build
    kinds = [("off", None), ("harness", process), ("process", process), ("thread", thread)]
    for r in range(8):
        for kind, mon in kinds[r % 4 :] + kinds[: r % 4]:  # each kind first in two rounds, after each other kind
            if mon is not None:
                mon.start()
            if kind == "harness":
                times, clock = harness.time_samples(fn)
                clocks.append(clock)
            else:
                times = one_round()
            samples[kind] += times
            round_p50.setdefault(kind, []).append(round(float(np.median(times)), 4))
            round_p80.setdefault(kind, []).append(round(float(np.percentile(times, 80)), 4))
            if mon is not None:
                mon.stop()
    sampled = {
        "sampler": process.sampler,
        "process_samples": len(process),
        "harness_clocks": clocks,
        "round_p50": round_p50,
        "round_p80": round_p80,
    }
finally:
    process.close()
    thread.close()
print(json.dumps({"samples": samples, **sampled}))
