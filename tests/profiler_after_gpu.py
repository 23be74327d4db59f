"""Run by tests/test_profiling_gpu.py in a fresh interpreter (no profiler session has run in it yet): a
host-bound call's median before and after one kernel breakdown, 6 timings each. Kineto keeps CUPTI's
callbacks subscribed after a session unless TEARDOWN_CUPTI=1 (torch leaves it unset), which adds host time
to every later launch; the harness profiles every case, so every case after the first would pay it. Prints
one JSON line."""

import json
import os

import numpy as np
import torch

from bench.case.timing import l2_flush_buffer, time_cuda
from bench.profiling import breakdown as bd
from kernels.registry import CaseSpec, get_provider
from workloads.batch import make_batch

d = torch.device("cuda", 0)
lengths = np.random.default_rng(0).integers(1, 128, 846)
batch = make_batch(lengths, lengths, H=4, D=128, dtype=torch.bfloat16, device=d, seed=0)
fn = get_provider("gdpa_triton").build(batch, CaseSpec(mode="fwd"), "fwd")
fn()
torch.cuda.synchronize()


def medians() -> list[float]:
    return [time_cuda(fn, warmup_ms=20, rep_ms=150, device=d).median_ms for _ in range(6)]


before = medians()
bd.kernel_breakdown(fn, d, calls=3, flush=l2_flush_buffer(d), warm_ms=100)
after = medians()
print(json.dumps({"TEARDOWN_CUPTI": os.environ.get("TEARDOWN_CUPTI"), "before": before, "after": after}))
