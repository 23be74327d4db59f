"""Why did `gdpa` read host-bound on HSTU's shortest causal case? (issue 30's HSTU bar.) In the H200 peers run of
2026-12-06 (docs/experiments/h200-2026-12-06h, main at 32e8a9b) causal_silu_256/fwd/L=256/fill=0.5 ran our Triton
forward at 0.2286 ms of kernel time (HSTU's 0.2329) but its samples read 0.4017 ms (HSTU 0.2306) and its
back-to-back energy loop 0.306 ms a call: the op's host time per call was over 0.3 ms, where the production run
at f50d6fb had it under 0.245 ms (target_history forward, not host-bound) and the op's own Python is ~43 µs on
the 2-core CI machine with its launch stubbed out. That case ran right after HSTU's first case in the same
process; HSTU's module sets Triton's global allocator (`triton.set_allocator`) and imports its peer package.

In one fresh process, on that case's batch: the op's host time per call (200 calls, no sync between them) and
300 ms of event-timed samples as the harness takes them, for `gdpa`, `gdpa_triton` and the op called without the
provider's `record`, then the same again after
HSTU's provider ran the case once (its compile and autotune), then after gc.collect() + gc.freeze(); the
non-causal set1/fwd/L=256/fill=0.5 beside it at each stage. Each row also says whether Triton's launch hooks are
set. Run it from the repository root on the GPU machine (the peers' checkouts in .peers/):

    PYTHONPATH=. python docs/experiments/host_after_peer_gpu.py > $OUT/host_after_peer_gpu.jsonl
"""

import gc
import json
import time

import numpy as np
import torch
import triton

from bench.case.timing import time_cuda
from bench.config.models import load_config
from kernels.gdpa import gdpa
from kernels.registry import get_provider

CASES = ("causal_silu_256/fwd/L=256/fill=0.5", "set1/fwd/L=256/fill=0.5")


def no_grad_op(batch, spec):
    with torch.no_grad():  # as the registry's forward closure runs it
        return gdpa(*batch.call_args(), **spec.gdpa_math())


def host_us(fn, calls: int = 200) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = (time.perf_counter() - t0) / calls * 1e6
    torch.cuda.synchronize()
    return round(dt, 1)


def main() -> None:
    d = torch.device("cuda", 0)
    config = load_config("configs/peers-h200.yaml")
    built = {}
    for prefix in CASES:
        case = next(c for c in config.cases if c.id == f"{prefix}/gdpa")
        batch = case.workload.batch(d, case.workload.lengths())
        fns = {name: get_provider(name).build(batch, case.spec, case.mode) for name in ("gdpa", "gdpa_triton")}
        # the public op as a user calls it, without the harness's `record` (the provider passes one)
        fns["op-no-record"] = lambda batch=batch, spec=case.spec: no_grad_op(batch, spec)
        for name, fn in fns.items():
            fn()  # compile, autotune, auto's measurement: outside every figure below
            built[(prefix, name)] = fn
        if prefix.startswith("causal"):
            hstu_case = (batch, case.spec, case.mode)
    torch.cuda.synchronize()

    def stage(label: str) -> None:
        for (prefix, name), fn in built.items():
            t = np.asarray(time_cuda(fn, warmup_ms=25, rep_ms=300, device=d).times_ms)
            row = {"stage": label, "case": prefix, "provider": name, "host_us": host_us(fn),
                   "p20": round(float(np.percentile(t, 20)), 4), "p50": round(float(np.median(t)), 4),
                   "p80": round(float(np.percentile(t, 80)), 4),
                   "launch_hooks": [triton.knobs.runtime.launch_enter_hook is not None,
                                    triton.knobs.runtime.launch_exit_hook is not None]}  # fmt: skip
            print(json.dumps(row), flush=True)

    stage("fresh")
    hstu = get_provider("hstu").build(*hstu_case)
    hstu()
    torch.cuda.synchronize()
    print(json.dumps({"stage": "hstu", "host_us": host_us(hstu)}), flush=True)
    stage("after-hstu")
    gc.collect()
    gc.freeze()
    stage("after-hstu-gc-freeze")


if __name__ == "__main__":
    main()
