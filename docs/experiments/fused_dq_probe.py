"""Where the fused dQ's time goes (issue 30, 2026-12-06, eighteenth session; not run yet): the Hopper backward with
docs/experiments/pending/issue30-fused-dq-v2.patch applied (LAG and the conversion's addressing are v2's), timed four
ways on one GPU, each compiled fresh (no kernel folder): FA4's postprocess (unfused), fused (LAG 4), fused with its
landings one block behind (LAG 1, the first build's wait), and fused with the conversion's loads and stores skipped
(the landing protocol alone; dQ then wrong). From a tree holding the patch:
PYTHONPATH=. python3 docs/experiments/fused_dq_probe.py (one line a variant and batch)."""

import dataclasses
import statistics

import numpy as np
import torch

from kernels.gdpa.call import GDPACall
from kernels.gdpa.hopper import cache, dq_fused, launch
from workloads.batch import make_batch

cache._KERNEL_DIR[:] = []


def time_ms(fn, reps=30):
    for _ in range(5):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


rng = np.random.default_rng(0)
batches = {
    "lognormal2048": np.clip(rng.lognormal(4.5, 1.2, 1152), 1, 2048).astype(int),
    "uniform2048x64": np.full(64, 2048),
}
plan0 = launch.backward_plan(128, False, 2048, 2048)
original = {name: getattr(dq_fused.FusedDQStore, name) for name in ("_convert", "_load_for_convert")}


def variant(name):
    cache._COMPILED.clear()
    for k, fn in original.items():
        setattr(dq_fused.FusedDQStore, k, fn)
    fused = name != "unfused"
    dq_fused.FusedDQStore.LAG = 1 if name == "fused-lag1" else 4
    launch.backward_plan = lambda *a, **k: dataclasses.replace(plan0, fused_dq=fused)
    if name == "no-convert":
        import cutlass.cute as cute

        @cute.jit
        def load(self, sConvert, mbar, gdQaccum, m_block):
            if cute.arch.lane_idx() == 0:
                cute.arch.mbarrier_arrive(mbar)

        @cute.jit
        def convert(self, sConvert, mbar, phase, gdQ, m_block, seqlen_q, scale):
            cute.arch.mbarrier_wait(mbar, phase)

        dq_fused.FusedDQStore._load_for_convert = load
        dq_fused.FusedDQStore._convert = convert


for name in ("unfused", "fused", "fused-lag1", "no-convert"):
    variant(name)
    for bname, lengths in batches.items():
        batch = make_batch(lengths, lengths, H=4, Hkv=4, D=128, dtype=torch.bfloat16, device="cuda", seed=1)
        call = GDPACall(batch.q, batch.k, batch.v, batch.q_offsets, batch.kv_offsets, int(lengths.max()),
                        int(lengths.max()), "fast_gelu", 1.0, 1.0, False)  # fmt: skip
        ms = time_ms(lambda call=call, batch=batch: launch.backward(call, batch.dout))
        print(f"{name:12s} {bname:16s} {ms:.3f} ms", flush=True)
