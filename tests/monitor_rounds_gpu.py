"""Run by tests/test_profiling_gpu.py in a fresh interpreter: our op's forward on the short band (846
sequences of 1-127 tokens, host-bound) timed in interleaved rounds with no monitor, the sampler process
and the thread sampler (off, process, thread, off, ...: clocks and temperature drift alike for all three),
8 rounds of 150 ms each after one discarded round. Prints one JSON line: every round's samples per kind.

Why a fresh interpreter: a profiler session leaves host time on every later call of its process
(tests/profiler_after_gpu.py), and the test file runs breakdowns before this; on the H200 (2026-12-02) the
rounds timed in that pytest process spread so that the process sampler's p80 read +4.3% over off."""

import json

import numpy as np
import torch

from bench.case.timing import time_cuda
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
samples: dict[str, list[float]] = {"off": [], "process": [], "thread": []}


def one_round() -> list[float]:
    return time_cuda(fn, warmup_ms=20, rep_ms=150, device=d).times_ms


try:
    one_round()  # discarded: the first round after the build
    for _ in range(8):
        for kind, mon in (("off", None), ("process", process), ("thread", thread)):
            if mon is not None:
                mon.start()
            samples[kind] += one_round()
            if mon is not None:
                mon.stop()
    sampled = {"sampler": process.sampler, "process_samples": len(process)}
finally:
    process.close()
    thread.close()
print(json.dumps({"samples": samples, **sampled}))
