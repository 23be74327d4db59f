"""Issue 31 on a GPU (`pytest -m gpu`): the kernel breakdown finds the kernels of our op's forward and backward
(backend auto, triton, hopper) and of FA4's; the NVML sampler leaves a host-bound call's samples as they are
without it; CUDA-graph timing gives a device time at or under the event median (equal for a long kernel);
a trace per case opens as Perfetto's JSON; and a harness run meets the issue's bars on a small config.

Every test prints a JSON line with what it measured (`pytest -m gpu -s` shows them): the numbers behind a
pass or a failure, for the log that is committed beside the run."""

from __future__ import annotations

import json
import re
import statistics

import numpy as np
import pytest
import torch

from bench.case.graph_timing import graph_time
from bench.case.timing import l2_flush_buffer, time_cuda
from bench.profiling import breakdown as bd
from bench.profiling import trace_events as te
from kernels.registry import CaseSpec, get_provider
from tests.test_breakdown_trace import check_perfetto_json
from workloads.batch import make_batch

pytestmark = pytest.mark.gpu
PROVIDERS = {  # provider -> what its kernels' names contain
    "gdpa": r"gdpa",
    "gdpa_triton": r"gdpa_(fwd|bwd)",
    "gdpa_hopper": r"gdpa",
    "fa4": r"flash",
}
# The kernel sum of a GPU-bound call against its event-timed median: below 1 by the launch gaps between
# its kernels and the events' own latency (µs on a ~1 ms call), above 1 never by more than the events'
# resolution. [0.90, 1.05] holds every GPU-bound case of the H200 production run at e444f34 (0.94-1.06
# for FA4 and the backwards) with room; the op's forward recorded no kernel at all there (issue 31).
SANE = (0.90, 1.05)


def dev() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    return torch.device("cuda", 0)


def provider_here(name: str):
    p = get_provider(name)
    reason = p.availability(dev())
    if reason:
        pytest.skip(f"{name}: {reason}")
    return p


def long_batch():
    """GPU-bound: 64 sequences of 1024-2047 tokens (~0.6 ms forward on an H200, host work ~0.1 ms)."""
    lengths = np.random.default_rng(0).integers(1024, 2048, 64)
    return make_batch(lengths, lengths, H=4, D=128, dtype=torch.bfloat16, device=dev(), seed=0)


def short_batch():
    """Host-bound: issue 22's short band, 846 sequences under 128 tokens (tens of µs of GPU work per
    forward, ~0.1 ms of the op's Python)."""
    lengths = np.random.default_rng(0).integers(1, 128, 846)
    return make_batch(lengths, lengths, H=4, D=128, dtype=torch.bfloat16, device=dev(), seed=0)


def built(p, batch, mode: str):
    spec = CaseSpec(mode=mode, activation="fast_gelu")  # a softmax provider ignores the activation
    reason = p.unsupported(batch, spec)
    if reason:
        pytest.skip(reason)
    fn = p.build(batch, spec, mode)
    fn()  # compile, autotune, the op's measured choice
    torch.cuda.synchronize()
    return fn


def show(**figures) -> None:
    print(json.dumps(figures, default=str))


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("name", list(PROVIDERS))
def test_the_breakdown_finds_every_providers_kernels(name, mode):
    p = provider_here(name)
    d = dev()
    fn = built(p, long_batch(), mode)
    timed = time_cuda(fn, warmup_ms=50, rep_ms=300, device=d)
    rec = bd.kernel_breakdown(fn, d, calls=5, flush=l2_flush_buffer(d), warm_ms=200)
    ratio = (rec["sum_ms"] or 0) / timed.median_ms
    show(test="breakdown", provider=name, mode=mode, median_ms=timed.median_ms, ratio=ratio, record=rec)
    assert rec["error"] is None and rec["source"] == "cuda", rec["error"]
    assert rec["n_kernels"] > 0 and SANE[0] <= ratio <= SANE[1], ratio
    assert any(re.search(PROVIDERS[name], r["name"], re.I) for r in rec["rows"]), [r["name"] for r in rec["rows"]]
    assert all(r["rule"] in ("launch", "device time", "launch; device time") for r in rec["rows"])
    assert rec["unattributed_ms"] < 0.05 * rec["sum_ms"]


def test_a_gpu_trace_links_each_kernel_to_its_launch_and_opens_as_perfetto_json(tmp_path):
    """The trace's own structure on this torch: every kernel of the op's Triton forward links by its
    correlation id to a launch API call (cuda_driver: Triton's cuLaunchKernel) inside a call range."""
    d = dev()
    fn = built(provider_here("gdpa_triton"), long_batch(), "fwd")
    dest = tmp_path / "traces" / bd.trace_name("gpu/fwd/gdpa_triton")
    rec = bd.kernel_breakdown(fn, d, calls=3, flush=l2_flush_buffer(d), warm_ms=50, trace_path=dest)
    check_perfetto_json(dest, calls=3)
    trace = json.loads(dest.read_text())
    cats = sorted({str(e.get("cat")) for e in te.complete_events(trace)})
    found = te.attribute(trace)
    show(test="trace", categories=cats, by_rule=found.by_rule, rows=rec["rows"], bytes=dest.stat().st_size)
    assert rec["error"] is None and rec["trace"] == str(dest)
    assert {"kernel", "user_annotation"} <= set(cats) and ({"cuda_runtime", "cuda_driver"} & set(cats))
    ours = [r for r in rec["rows"] if "gdpa_fwd" in r["name"]]
    assert ours and all(r["rule"] == "launch" for r in ours), rec["rows"]


def _round(fn, d) -> list[float]:
    return time_cuda(fn, warmup_ms=20, rep_ms=150, device=d).times_ms


def test_the_monitor_leaves_a_host_bound_calls_samples_unchanged():
    """Our op's forward on the short band (host-bound) timed with the sampler process running and with it
    stopped, interleaved (off, on, off, on, ...: clocks and temperature drift alike for both), 8 rounds of
    150 ms each after one discarded round. Bar: the pooled p50 and p80 with the monitor on within 3% of
    off. Why 3%: the issue's own bar for two providers running the same kernel; the thread sampler moved
    this call's p80 by +40% and p50 by +19% on the H200 (issue 31), an order of magnitude over it, while
    interleaved rounds of one condition agree to ~1%. The thread sampler is measured alongside for the
    record (printed, not asserted: it is what the process replaced)."""
    from bench.monitor import PowerMonitor, gpu_index_from_device

    d = dev()
    fn = built(provider_here("gdpa"), short_batch(), "fwd")
    process = PowerMonitor(device_index=gpu_index_from_device(d), period_ms=10.0)
    if not process.available:
        pytest.skip(f"no NVML: {process.unavailable_reason}")
    thread = PowerMonitor(device_index=gpu_index_from_device(d), period_ms=10.0, sampler="thread")
    samples: dict[str, list[float]] = {"off": [], "process": [], "thread": []}
    try:
        _round(fn, d)  # discarded: the first round after the build
        for _ in range(8):
            for kind, mon in (("off", None), ("process", process), ("thread", thread)):
                if mon is not None:
                    mon.start()
                    assert mon.running
                samples[kind] += _round(fn, d)
                if mon is not None:
                    mon.stop()
        assert process.sampler == "process" and len(process) > 50  # it sampled through its rounds
    finally:
        process.close()
        thread.close()
    q = {k: (statistics.median(v), float(np.percentile(v, 80))) for k, v in samples.items()}
    show(test="monitor", p50_p80_ms=q, n={k: len(v) for k, v in samples.items()})
    for i, what in enumerate(("p50", "p80")):
        assert q["process"][i] == pytest.approx(q["off"][i], rel=0.03), (what, q)


def test_cuda_graph_time_is_the_device_time():
    """A long kernel (an 8192³ bf16 GEMM): the graph's time per call equals the event median within 3% (both
    time the GPU). Our op's forward on the short band (host-bound): the graph's time is under the event
    median, by the host time the events include, and within 25% of the breakdown's kernel sum (the graph
    also drops the launch gaps between the op's kernels, which the sum never counted)."""
    d = dev()
    flush = l2_flush_buffer(d)
    a = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
    gemm = lambda: a @ a
    gemm()
    timed = time_cuda(gemm, warmup_ms=50, rep_ms=300, device=d)
    g = graph_time(gemm, d, flush, timed.median_ms)
    show(test="graph gemm", median_ms=timed.median_ms, graph=g)
    assert g["error"] is None and g["ms"] <= timed.median_ms * 1.01
    assert g["ms"] == pytest.approx(timed.median_ms, rel=0.03)
    fn = built(provider_here("gdpa_triton"), short_batch(), "fwd")
    timed = time_cuda(fn, warmup_ms=50, rep_ms=300, device=d)
    g = graph_time(fn, d, flush, timed.median_ms)
    k = bd.kernel_breakdown(fn, d, calls=5, flush=flush, warm_ms=100)
    show(test="graph gdpa short", median_ms=timed.median_ms, graph=g, kernel_ms=k["sum_ms"])
    assert g["error"] is None and 0 < g["ms"] < timed.median_ms
    assert g["ms"] == pytest.approx(k["sum_ms"], rel=0.25)


@pytest.mark.parametrize("name", ["gdpa", "fa4"])
def test_cuda_graph_capture_failures_are_recorded_and_leave_the_gpu_usable(name):
    """A retained autograd backward (its engine launches onto the forward's stream) may not capture: either
    a device time or a one-line reason, and the call still runs and times afterwards."""
    d = dev()
    fn = built(provider_here(name), long_batch(), "bwd")
    timed = time_cuda(fn, warmup_ms=20, rep_ms=100, device=d)
    g = graph_time(fn, d, l2_flush_buffer(d), timed.median_ms)
    show(test="graph bwd", provider=name, median_ms=timed.median_ms, graph=g)
    assert (g["ms"] is not None and g["error"] is None) or (g["ms"] is None and "captured" in g["error"])
    if g["ms"] is not None:
        assert g["ms"] <= timed.median_ms * 1.02
    again = time_cuda(fn, warmup_ms=20, rep_ms=100, device=d)
    assert again.median_ms == pytest.approx(timed.median_ms, rel=0.10)


def test_a_harness_run_meets_the_issues_bars(tmp_path):
    """A small config through the harness (worker-free: bench.run), every view on: each ok case of every
    provider has its kernels, kernel sum / median in SANE or flagged host_bound with its CUDA-graph time
    beside it; each band case's bands sum within 10% of the whole or say why; a trace per case; the sampler
    a process; and on the host-bound set, where the thread sampler split `gdpa` from the pinned backend
    running the same kernel (issue 31), `gdpa` within 3% of it at p50 and p80. (On the long set two cases
    300 ms apart at the power cap differ by the clock's own steps: the production run's 1 s windows judge
    those.)"""
    import bench

    dev()
    cfg = {
        "name": "issue31",
        "device": "cuda",
        "providers": ["gdpa", "gdpa_triton", "gdpa_hopper", "fa4"],
        "modes": ["fwd", "bwd"],
        "timing": {"warmup_ms": 50, "rep_ms": 300, "cuda_graph": True},
        "power": {"enabled": True, "energy_loop_s": 0.3, "settle_s": 0.2},
        "hardware": {"calibrate": False},
        "breakdown": {"trace": True},
        "bands": {"only": "long/fwd/.*/(gdpa|fa4)$", "edges": [1536]},
        "sets": [
            {"name": "long", "B": 64, "H": 4, "D": 128, "dtype": "bf16", "max_len": 2048,
             "lengths": {"family": "uniform_fill", "fill": 0.75}},  # 1024-2048 tokens: GPU-bound
            {"name": "short", "B": 846, "H": 4, "D": 128, "dtype": "bf16", "max_len": 127,
             "lengths": {"family": "uniform_fill", "fill": 0.5}},  # 1-127 tokens: host-bound
        ],
    }  # fmt: skip
    df = bench.run(cfg, out=tmp_path / "run")
    run = tmp_path / "run"
    data = json.loads((run / "results.json").read_text())
    cases = {c["id"]: c for c in data["cases"]}
    ok = [c for c in cases.values() if c["status"] == "ok"]
    show(test="run", statuses={c["id"]: c["status"] for c in cases.values()}, monitor=data["meta"]["monitor"])
    assert ok and len(df) == len(cases) and data["meta"]["monitor"]["sampler"] == "process"
    for c in ok:
        k, g = c["kernels"], c.get("cuda_graph") or {}
        ratio = (k["sum_ms"] or 0) / c["median_ms"]
        show(id=c["id"], median_ms=c["median_ms"], ratio=ratio, host_bound=c["host_bound"], graph=g)
        assert k["error"] is None and k["n_kernels"] > 0, (c["id"], k["error"])
        assert SANE[0] <= ratio <= SANE[1] or (c["host_bound"] and "cuda_graph" in c), c["id"]
        assert (run / k["trace"]).is_file()
    for c in (c for c in ok if c.get("bands")):
        b = c["bands"]
        show(id=c["id"], bands=b["sum_over_whole"], kernels=b["kernel_sum_over_whole"], why=b["why"])
        assert b["error"] is None and b["sum_over_whole"] is not None
        assert abs(b["sum_over_whole"] - 1) <= 0.10 or b["why"], c["id"]
        assert all(r["kernel_ms"] for r in b["rows"] if r["status"] == "ok")
    for c in (c for c in ok if c["provider"] == "gdpa" and c["set"] == "short"):
        ran = ((c.get("kernel_config") or {}).get("dispatch") or {}).get(c["mode"], {}).get("backend")
        pinned = cases.get(c["id"].rsplit("/", 1)[0] + f"/gdpa_{ran}")
        if pinned is None or pinned["status"] != "ok":
            continue
        show(id=c["id"], ran=ran, auto=(c["median_ms"], c["p80_ms"]), pinned=(pinned["median_ms"], pinned["p80_ms"]))
        assert c["median_ms"] == pytest.approx(pinned["median_ms"], rel=0.03), c["id"]
        assert c["p80_ms"] == pytest.approx(pinned["p80_ms"], rel=0.03), c["id"]


def test_a_profiler_pass_leaves_no_host_time_behind():
    """A fresh interpreter times a host-bound call, runs one kernel breakdown, times it again
    (tests/profiler_after_gpu.py), once as the harness runs (TEARDOWN_CUPTI unset) and once with CUPTI torn
    down after the session (TEARDOWN_CUPTI=1). Bar, for the harness's way: the median after within 3% of
    before (the issue's bar between two providers on one kernel). Should it fail while the torn-down run
    passes, CUPTI's callbacks outlive the session on this torch and every case after the first pays them:
    run the sweep with TEARDOWN_CUPTI=1."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    dev()
    root = Path(__file__).resolve().parents[1]
    runs = {}
    for teardown in (None, "1"):
        env = {k: v for k, v in os.environ.items() if k != "TEARDOWN_CUPTI"} | {"PYTHONPATH": str(root)}
        env |= {"TEARDOWN_CUPTI": teardown} if teardown else {}
        out = subprocess.run(
            [sys.executable, str(root / "tests" / "profiler_after_gpu.py")],
            env=env, capture_output=True, text=True, timeout=600, check=True,
        )  # fmt: skip
        runs[teardown or "unset"] = json.loads(out.stdout.strip().splitlines()[-1])
    show(test="profiler after", runs=runs)
    r = runs["unset"]
    assert statistics.median(r["after"]) == pytest.approx(statistics.median(r["before"]), rel=0.03), runs
