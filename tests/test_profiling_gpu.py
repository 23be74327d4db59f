"""Issue 31 on a GPU (`pytest -m gpu`): the kernel breakdown finds the kernels of our op's forward and backward
(backend auto, triton, hopper) and of FA4's, its kernel sum judged against the event-timed median of its own
profiler pass; the NVML sampler leaves a host-bound call's samples as they are without it; CUDA-graph timing
gives a device time at or under the event median (equal for a long kernel); a trace per case opens as
Perfetto's JSON; a harness run meets the issue's bars on a small config; and no case of a harness run is
timed after a profiler session of its process (a host-bound case timed after other cases, whose breakdowns
came before its samples until the profiled phase moved them after every timed case, times as it does first).

The two harness runs go through the CLI, so they run in fresh worker processes: this pytest process has run
profiler sessions by then, and a profiler session slows every later call of its process
(tests/profiler_after_gpu.py shows torch doing it).

Every test prints a JSON line with what it measured (`pytest -m gpu -s` shows them): the numbers behind a
pass or a failure, for the log that is committed beside the run."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.case.device import harness_stream
from bench.case.graph_timing import graph_time
from bench.case.timing import l2_flush_buffer, time_cuda
from bench.profiling import breakdown as bd
from bench.profiling import trace_events as te
from kernels.registry import CaseSpec, get_provider
from tests.test_breakdown_trace import check_perfetto_json
from workloads.batch import make_batch

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
PROVIDERS = {  # provider -> what its kernels' names contain
    "gdpa": r"gdpa",
    "gdpa_triton": r"gdpa_(fwd|bwd)",
    "gdpa_hopper": r"gdpa",
    "fa4": r"flash",
}
# The kernel sum of a GPU-bound call against the event-timed median of the breakdown's own pass (the same
# clock, the same moment): below 1 by the launch gaps between its kernels and the events' own latency (µs on
# a ~1 ms call), above 1 never by more than the events' resolution. Against a separate timing of the call
# the H200 gave 0.91-0.99 for every provider here (774bbd5), the harness's long gdpa forward 1.079 (its
# samples ran at another clock than the breakdown's calls); the op's forward recorded no kernel at all at
# e444f34 (issue 31). [0.90, 1.05]: accounted or launch gaps (results.figures.accounting).
SANE = (0.90, 1.05)


def _pythonpath() -> str:
    """The repository first, then the caller's PYTHONPATH: on the GPU machine that holds the site folder the
    session installed the packages into (pydantic, FA4), which a child started with the repository alone lacks
    (the harness runs of this file failed so on the H200, 2026-12-02: No module named 'pydantic')."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


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
    timed = time_cuda(fn, warmup_ms=50, rep_ms=300, device=d)  # reported: another moment than the pass
    rec = bd.kernel_breakdown(fn, d, calls=5, flush=l2_flush_buffer(d), warm_ms=200)
    assert rec["error"] is None and rec["source"] == "cuda", rec["error"]
    ratio = (rec["pass_sum_ms"] or 0) / rec["pass_median_ms"]  # the same calls: kernels vs events
    apart = (rec["sum_ms"] or 0) / timed.median_ms
    show(test="breakdown", provider=name, mode=mode, median_ms=timed.median_ms, sum_over_pass=ratio,
         sum_over_median=apart, record=rec)  # fmt: skip
    assert rec["pass_calls"] >= 10 and rec["n_kernels"] > 0 and SANE[0] <= ratio <= SANE[1], ratio
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


def test_the_monitor_leaves_a_host_bound_calls_samples_unchanged():
    """Our op's forward on the short band (host-bound) timed the harness's way with the monitor on (the
    sampler process paused for the samples, the clock read between their chunks: bench.case.power) and with
    no monitor, interleaved with the order rotated each round (clocks, temperature and a round's place after
    another kind's round weigh alike on all: 2026-12-03's H200 read off 17% over harness with off always
    first), 8 rounds of 150 ms each
    after one discarded round, in a fresh interpreter (tests/monitor_rounds_gpu.py: this process has run
    profiler sessions, which leave host time on its later calls). Bar: the median over the rounds of each
    round's p50 and p80 with the monitor on at most 3% over off (a sampler can only add host time; the p50 also
    at most 3% under). Why per round: on the H200 at 1a75745 every kind's last round ran slow (round p50 off
    0.2767, harness 0.1698 ms against ~0.115 before it), the host and not a sampler, and the pooled p80 then
    said how much of each kind's samples that one round held (harness +11%, p50 +1.3%). Why 3%:
    the issue's own bar for two providers running the same kernel. Why one-sided at p80: this call's p80 is
    the host's own noise (docs/experiments/host_speed_gpu.py). Measured alongside for the record (printed,
    not asserted): the sampler process running through the samples (p50 +13% on 2026-12-02 at 5455802) and
    the thread sampler (+45%), what the pause replaced."""
    dev()
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "monitor_rounds_gpu.py")],
        env=os.environ | {"PYTHONPATH": _pythonpath()}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if "skip" in r:
        pytest.skip(r["skip"])
    samples = r["samples"]
    q = {k: (statistics.median(r["round_p50"][k]), statistics.median(r["round_p80"][k])) for k in samples}
    pooled = {k: (statistics.median(v), float(np.percentile(v, 80))) for k, v in samples.items()}
    show(test="monitor", rounds_p50_p80_ms=q, pooled_p50_p80_ms=pooled, n={k: len(v) for k, v in samples.items()},
         sampler=r["sampler"], clocks=r["harness_clocks"], round_p50=r["round_p50"],
         round_p80=r["round_p80"])  # fmt: skip
    assert all(len(r["round_p50"][k]) == len(r["round_p80"][k]) == 8 for k in samples)
    assert r["sampler"] == "process" and r["process_samples"] > 50  # it sampled through its rounds
    assert all(c is not None and c > 0 for c in r["harness_clocks"])  # the clock read between chunks
    assert q["harness"][0] == pytest.approx(q["off"][0], rel=0.03), ("p50", q)
    assert q["harness"][1] <= q["off"][1] * 1.03, ("p80", q)


def test_cuda_graph_time_is_the_device_time():
    """A long kernel (an elementwise product over 2 GiB into 2 GiB: bound by HBM, not by the SM clock, which an
    8192³ GEMM at the power cap moves between two windows — 1.570 vs 1.521 ms on the H200 at 12:10 on 2026-12-03):
    the graph's time per call equals the event median within 3% (both time the GPU). Not `dst.copy_(src)`: a
    device-to-device memcpy, which a graph holds as a memcpy node run by the copy engines (1.546 ms against the
    eager copy kernel's 1.007 on the H200 at 1a75745): another operation, not the same one without the host.
    Our op's forward on the short band (host-bound): the graph's time is under the event median, by the host
    time the events include, and within 25% of the breakdown's kernel sum (the graph also drops the launch gaps
    between the op's kernels, which the sum never counted).
    """
    d = dev()
    flush = l2_flush_buffer(d)
    src = torch.empty(2**30, device=d, dtype=torch.bfloat16).fill_(1.0)
    dst = torch.empty_like(src)
    scale = lambda: torch.mul(src, 2.0, out=dst)
    scale()
    timed = time_cuda(scale, warmup_ms=50, rep_ms=300, device=d)
    reads = []
    clock = lambda: reads.append(len(reads)) or 1000.0 + len(reads)  # 1001, 1002, ...: one read a round
    g = graph_time(scale, d, flush, timed.median_ms, clock=clock)
    show(test="graph elementwise", median_ms=timed.median_ms, graph=g)
    assert g["error"] is None and g["ms"] <= timed.median_ms * 1.01
    assert g["ms"] == pytest.approx(timed.median_ms, rel=0.03)
    assert len(reads) == g["replays"] and g["sm_clock_mhz"] == 1005.5  # read after each round, the median kept
    assert graph_time(scale, d, flush, timed.median_ms)["sm_clock_mhz"] is None  # no reader, no clock
    fn = built(provider_here("gdpa_triton"), short_batch(), "fwd")
    timed = time_cuda(fn, warmup_ms=50, rep_ms=300, device=d)
    g = graph_time(fn, d, flush, timed.median_ms)
    k = bd.kernel_breakdown(fn, d, calls=5, flush=flush, warm_ms=100)
    show(test="graph gdpa short", median_ms=timed.median_ms, graph=g, kernel_ms=k["sum_ms"])
    assert g["error"] is None and 0 < g["ms"] < timed.median_ms
    assert g["ms"] == pytest.approx(k["sum_ms"], rel=0.25)


def test_no_sample_holds_the_host_time_a_chunks_sync_exposes():
    """A call of 0.25 ms host work (a spin in Python) then ~0.9 ms of GPU work (a 4 GiB copy: HBM-bound, the
    clock at the power cap does not move it): in a loop the host stays a call ahead and each sample is the
    copy. A chunk's sync leaves the GPU idle; without the primer (bench.case.timing.prime) the next sample
    starts with nothing queued and reads host + copy (the H200 production run of 2026-12-03: 1.2-3x the
    median on every chunk's first sample). Bar: every chunk's first sample within 10% of the median."""
    import time

    d = dev()
    src = torch.empty(2**30, device=d, dtype=torch.bfloat16).fill_(1.0)
    dst = torch.empty_like(src)

    def call():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 250e-6:
            pass
        dst.copy_(src)

    call()
    t = time_cuda(call, warmup_ms=20, rep_ms=150, device=d).times_ms
    median = statistics.median(t)
    firsts, n = [], 5
    while n < len(t):  # chunks of 5, 5, 10, 20, ... (bench.case.timing.chunk_size)
        firsts.append(t[n])
        n *= 2
    show(test="chunk firsts", median_ms=median, firsts_ms=firsts, n=len(t))
    assert len(t) > 20 and firsts
    assert max(firsts) <= 1.10 * median, (firsts, median)


def _fill_the_allocator_cache(d) -> None:
    """Allocate until the GPU is full, then free it all: the caching allocator keeps the blocks (free to
    PyTorch's default pool, not to a CUDA graph's private pool), as a sweep's earlier cases leave them."""
    blocks = []
    for size in (2**30, 2**28, 2**24):
        while True:
            try:
                blocks.append(torch.empty(size, dtype=torch.uint8, device=d))
            except torch.OutOfMemoryError:
                break
    del blocks


def test_a_graph_capture_does_not_run_out_of_the_memory_earlier_cases_cached():
    """The production run of 2026-12-02 (docs/example-h200-production): every capture after the 40th case
    ran out of memory with 137 GiB reserved by PyTorch and ~2 GiB allocated: a graph's private pool cannot
    take the default pool's cached free blocks. With the GPU's memory all cached and free, the capture
    still succeeds, and what the graphs held goes back to the driver after them."""
    d = dev()
    fn = built(provider_here("gdpa_triton"), long_batch(), "fwd")
    timed = time_cuda(fn, warmup_ms=20, rep_ms=100, device=d)
    _fill_the_allocator_cache(d)
    cached = torch.cuda.memory_reserved(d)
    g = graph_time(fn, d, l2_flush_buffer(d), timed.median_ms)
    show(test="graph after a full cache", reserved_before=cached, reserved_after=torch.cuda.memory_reserved(d),
         free_after=torch.cuda.mem_get_info(d)[0], graph=g)  # fmt: skip
    assert g["error"] is None and g["ms"] > 0, g
    assert torch.cuda.memory_reserved(d) < 0.5 * cached
    mem = g["memory"]  # the allocator around the capture: the graphs' pools released after it
    assert mem["allocated_gib"] <= mem["reserved_gib"] and mem["reserved_after_gib"] <= mem["reserved_gib"] + 0.25, mem


def test_failed_captures_do_not_add_up_to_an_out_of_memory():
    """PyTorch keeps a failed capture's memory pool reserved until the process exits (pytorch#190348): in the
    H200 production runs of 2026-12-02 one failed capture was followed by 74 captures out of memory. Five
    captures that each allocate ~8 GiB and then fail (a host sync inside the capture) leave their memory to
    the driver (release_failed_pool), and a capture after them succeeds."""
    d = dev()
    gib = 1 << 30

    def fails():
        torch.empty(8 * gib, dtype=torch.uint8, device=d).fill_(1)
        torch.cuda.synchronize(d)  # not allowed while capturing: the capture fails

    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved(d)
    errors = [graph_time(fails, d, None, 1.0)["error"] for _ in range(5)]
    torch.cuda.synchronize(d)
    gc.collect()
    torch.cuda.empty_cache()
    held = (torch.cuda.memory_reserved(d) - before) / gib
    calls = [0]

    def raises():  # allocates, then a Python error: the capture itself ends well, torch releases its pool
        torch.empty(8 * gib, dtype=torch.uint8, device=d).fill_(1)
        calls[0] += 1
        if calls[0] > 1:  # the warm-up call passes
            raise ValueError("a provider's own error")

    raised = [graph_time(raises, d, None, 1.0)["error"] for _ in range(3)]
    torch.cuda.synchronize(d)
    gc.collect()
    torch.cuda.empty_cache()  # still works: no pool released twice
    held_after_raises = (torch.cuda.memory_reserved(d) - before) / gib
    fn = built(provider_here("gdpa_triton"), long_batch(), "fwd")
    timed = time_cuda(fn, warmup_ms=20, rep_ms=100, device=d)
    after = graph_time(fn, d, l2_flush_buffer(d), timed.median_ms)
    show(test="failed captures", errors=errors, held_gib=held, raised=raised, held_after_raises=held_after_raises,
         after=after)  # fmt: skip
    # each failed in its body, on the host sync (not out of memory, not for want of room)
    assert all(e and "operation not permitted when stream is capturing" in e for e in errors), errors
    assert held < 4, f"{held:.1f} GiB still reserved after 5 failed captures of 8 GiB each"
    assert all(e and "a provider's own error" in e for e in raised), raised
    assert held_after_raises < 4, f"{held_after_raises:.1f} GiB reserved after 3 captures that raised"
    assert after["error"] is None and after["ms"] > 0, after


@pytest.mark.parametrize("name", ["gdpa", "fa4"])
def test_a_kept_forwards_backward_captures_on_the_harness_stream(name):
    """A kept forward's backward runs on the forward's stream: built and timed on the harness's stream (as the
    runner does) it captures, and its graph time is judged against the event timings that bracket it (on a GPU
    at its power cap the clock moves between two windows: FA4's backward 1.539 ms, its graph 1.590 ms, the
    events again within 10%, the H200 2026-12-02). Bar 5% over the slower of the two: on the H200 at 1a75745,
    hot from a production run, the graphs read +2.5% (gdpa) and +3.8% (fa4) over the bracketing medians, about
    one L2 flush per call (flush_ms 0.040 / 0.043: a backward's dirty lines are written back inside the next
    call's flush in the graph, and after the events close in the samples).
    Built on the legacy default stream it may fail to capture (each process's first backward capture did on
    the H200): then with one line, and the default stream is current again afterwards (torch.cuda.graph's
    exit had left its capture stream current for the rest of the process)."""
    d = dev()
    with harness_stream(d):
        fn = built(provider_here(name), long_batch(), "bwd")
        timed = time_cuda(fn, warmup_ms=20, rep_ms=100, device=d)
        g = graph_time(fn, d, l2_flush_buffer(d), timed.median_ms)
        again = time_cuda(fn, warmup_ms=20, rep_ms=100, device=d)
    legacy = built(provider_here(name), long_batch(), "bwd")
    legacy()
    g0 = graph_time(legacy, d, l2_flush_buffer(d), timed.median_ms)
    show(test="graph bwd", provider=name, median_ms=timed.median_ms, again_ms=again.median_ms, graph=g, legacy=g0)
    assert g["error"] is None and g["ms"] > 0, g
    assert g["ms"] <= max(timed.median_ms, again.median_ms) * 1.05
    assert again.median_ms == pytest.approx(timed.median_ms, rel=0.10)
    assert (g0["ms"] is not None and g0["error"] is None) or (g0["ms"] is None and "captured" in g0["error"])
    assert torch.cuda.current_stream(d) == torch.cuda.default_stream(d)


def bench_run(tmp_path, cfg: dict, name: str, isolation: str = "process") -> tuple[Path, dict]:
    """`python -m bench run` of `cfg` in a process of its own (nothing profiled before it; `isolation`:
    the sweep in a worker process, or in the command's); the run folder and its cases by id (meta: "")."""
    path, run = tmp_path / f"{name}.yaml", tmp_path / name
    path.write_text(json.dumps(cfg))  # YAML reads JSON
    argv = ["run", str(path), "--out", str(run), "--no-progress", "--no-report", "--isolation", isolation]
    out = subprocess.run(
        [sys.executable, "-m", "bench", *argv],
        cwd=ROOT, env=os.environ | {"PYTHONPATH": _pythonpath()}, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    print(out.stdout[-6000:], out.stderr[-3000:])
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if "profiling views of" in ln)
    assert not [ln for ln in lines[start:] if re.match(r"^\s+\w+/(fwd|bwd)/\S+: ", ln)], "a case timed after views"
    data = json.loads((run / "results.json").read_text())
    return run, {c["id"]: c for c in data["cases"]} | {"": data["meta"]}


def bars_module():
    """docs/experiments/profiling_bars.py: the issue's bars, one per function."""
    spec = importlib.util.spec_from_file_location("profiling_bars", ROOT / "docs" / "experiments" / "profiling_bars.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_harness_run_meets_the_issues_bars(tmp_path):
    """A small config through the harness (the CLI: a fresh worker process), every view on: each ok case of
    every provider has its kernels, its kernel sum against the call timed in the same profiler pass
    (`kernels.sum_over_pass`) in [0.95, 1.05], or host-bound with its CUDA-graph time beside it, or launch
    gaps on a call of several kernels (docs/experiments/profiling_bars.py's bar: the 1.079 of 774bbd5's
    long gdpa forward was its samples' median taken at another clock; `sum_over_median` is printed beside
    it); each band case's bands sum within 10% of the whole or say why; a trace per case; the sampler a
    process; and on the host-bound set, `gdpa` and the pinned backend it dispatched to both host-bound, their
    CUDA-graph device times within 3% (the same kernels; the H200 gave 0.08727 and 0.08725 ms). Their event
    medians are printed, not asserted: there they time the host, whose speed moved 2x round to round in one
    process on the H200 machine (docs/experiments/host_speed_gpu.py), and the two cases run at different
    moments: `gdpa` 0.133 ms, `gdpa_triton` 0.249 ms on 2026-12-02, with the monitor a process of its own.
    The issue's 3% bar between them is judged on the production run (docs/experiments/profiling_bars.py). (On
    the long set two cases 300 ms apart at the power cap differ by the clock's own steps, too.)"""
    dev()
    cfg = {
        "name": "issue31",
        "device": "cuda",
        # gdpa_packed: auto ran the packed backend on the short backward on the H200 (2026-12-03), and its
        # pinned twin must be in the run for the same-kernel check below
        "providers": ["gdpa", "gdpa_triton", "gdpa_hopper", PACKED, "fa4"],
        "modes": ["fwd", "bwd"],
        "timing": {"warmup_ms": 50, "rep_ms": 300, "cuda_graph": True},
        "power": {"enabled": True, "energy_loop_s": 0.3, "settle_s": 0.2},
        "hardware": {"calibrate": False},
        "breakdown": {"trace": True},
        "bands": {"only": "long/fwd/.*/(gdpa|fa4)$", "edges": [1536]},
        "sets": [LONG, SHORT],
    }
    run, cases = bench_run(tmp_path, cfg, "bars")
    meta = cases.pop("")
    bars = bars_module()
    ok = [c for c in cases.values() if c["status"] == "ok"]
    show(test="run", statuses={c["id"]: c["status"] for c in cases.values()}, monitor=meta["monitor"])
    assert ok and meta["monitor"]["sampler"] == "process"
    for c in ok:
        k, g = c["kernels"], c.get("cuda_graph") or {}
        show(id=c["id"], median_ms=c["median_ms"], pass_median_ms=k.get("pass_median_ms"),
             sum_over_pass=k.get("sum_over_pass"), sum_over_median=k.get("sum_over_median"),
             accounting=k.get("accounting"), host_bound=c["host_bound"], graph=g)  # fmt: skip
        assert k["error"] is None and k["n_kernels"] > 0 and k["pass_calls"] >= 5, (c["id"], k["error"])
        assert k["sum_over_pass"] == pytest.approx(k["pass_sum_ms"] / k["pass_median_ms"])
        graph = g.get("ms")  # host_bound: the graph's idle share where it exists, else the pass's verdict
        expect = (1 - graph / c["median_ms"] > 0.10) if graph is not None else k["accounting"] == "host-bound"
        # the replays' SM clock, read with the power monitor on; host-bound only if also at the samples' clock
        assert graph is None or (g["sm_clock_mhz"] or 0) > 100, (c["id"], g)
        if expect and graph is not None and c.get("sm_clock_mhz"):
            assert g["ms_at_samples_clock"] == pytest.approx(graph * g["sm_clock_mhz"] / c["sm_clock_mhz"])
            expect = 1 - g["ms_at_samples_clock"] / c["median_ms"] > 0.10
        assert c["host_bound"] == expect, c["id"]
        assert bars.host_bound_bar(c) is None and bars.graph_bar(c) is None, c["id"]
        assert g.get("ms") is not None, (c["id"], g)  # every backward too, on the harness's stream
        assert bars.breakdown_bar(c) is None, (c["id"], bars.breakdown_bar(c))
        assert bars.trace_bar(run, c) is None, (c["id"], bars.trace_bar(run, c))
    for c in (c for c in ok if c.get("bands")):
        b = c["bands"]
        show(id=c["id"], bands=b["sum_over_whole"], kernels=b["kernel_sum_over_whole"], why=b["why"])
        assert bars.bands_bar(c) is None, (c["id"], bars.bands_bar(c))
        assert all(r["kernel_ms"] and r["pass_median_ms"] for r in b["rows"] if r["status"] == "ok")
    for c in (c for c in ok if c["provider"] == "gdpa" and c["set"] == "short"):
        ran = c["kernel_config"]["dispatch"][c["mode"]]["backend"]
        pinned = cases[c["id"].rsplit("/", 1)[0] + f"/gdpa_{ran}"]
        graphs = [(x.get("cuda_graph") or {}).get("ms") for x in (c, pinned)]
        show(id=c["id"], auto=(c["median_ms"], c["p80_ms"]), pinned=(pinned["median_ms"], pinned["p80_ms"]),
             graph_ms=graphs, same_kernel=bars.same_kernel_bar(c, cases))  # fmt: skip
        assert None not in graphs and graphs[0] == pytest.approx(graphs[1], rel=0.03), (c["id"], graphs)
    # the run has host-bound cases to tell apart (the short set's forwards: 0.11 ms against a 0.087 ms graph on
    # the H200 at 1a75745); which backward is host-bound moves with the host: auto's packed short backward
    # was not (0.2815 ms, graph 0.2772) where its pinned twin was (0.5894, graph 0.2766)
    short_fwd = [c for c in ok if c["set"] == "short" and c["mode"] == "fwd"]
    assert any(c["host_bound"] for c in short_fwd), [(c["id"], c["median_ms"]) for c in short_fwd]


def test_the_counters_profile_the_plan_each_gdpa_case_ran(tmp_path):
    """Nsight Compute profiles in a child process, where `auto` would choose its plan again by timings ncu's
    interception distorts (docs/example-h200-production at f50d6fb: a lone Triton kernel under log-normal 2048's
    counters, where the sweep had timed a Triton + Hopper split). The child now runs each case's recorded plans
    (`counters.replayed`): the kernels ncu saw are those of the backends the plans name."""
    dev()
    from kernels.gdpa.plan import pinned_from_record

    cfg = {
        "name": "replay",
        "device": "cuda",
        "providers": ["gdpa"],
        "modes": ["fwd", "bwd"],
        "timing": {"warmup_ms": 20, "rep_ms": 100},
        "power": {"enabled": False},
        "hardware": {"calibrate": False},
        "counters": {"only": "gdpa$"},
        "sets": [{"name": "logn", "B": 1152, "H": 4, "D": 128, "dtype": "bf16", "max_len": 2048,
                  "lengths": {"family": "lognormal", "preset": "ml-20m"}}],
    }  # fmt: skip
    _, cases = bench_run(tmp_path, cfg, "replay")
    cases.pop("")
    # a kernel name of each backend: Triton's jit functions by name, the Hopper ones CuTe DSL's `kernel_cutlass_...`
    marks = {"triton": "gdpa_", "packed": "packed_", "owned": "owned_", "hopper": "cutlass"}
    marks["hopper_persistent"] = marks["hopper"]
    for c in cases.values():
        counters, dispatch = c["counters"], c["kernel_config"]["dispatch"]
        names = [k["name"] for k in counters.get("kernels") or []]
        show(id=c["id"], status=counters["status"], replayed=counters.get("replayed"), kernels=names,
             plans={m: d["backend"] for m, d in dispatch.items()})  # fmt: skip
        if counters["status"] == "skipped":
            pytest.skip(counters["reason"])  # no ncu, or no permission to read the counters, on this machine
        assert counters["status"] == "ok", counters["reason"]
        assert counters["replayed"] == {f"{m}_plan": pinned_from_record(d) for m, d in dispatch.items()}
        # the call ncu profiles is the case's own pass (a backward case: the backward alone)
        for backend in {s["backend"] for s in dispatch[c["mode"]]["stages"]}:
            assert any(marks[backend] in n for n in names), (c["id"], backend, names)
    import pandas as pd  # the replayed plans are nested lists: results.parquet still holds every case (2026-12-05)

    assert len(pd.read_parquet(tmp_path / "replay" / "results.parquet")) == 2


PACKED = {"name": "gdpa", "label": "gdpa_packed", "options": {"backend": "packed"}}
LONG = {"name": "long", "B": 64, "H": 4, "D": 128, "dtype": "bf16", "max_len": 2048,
        "lengths": {"family": "uniform_fill", "fill": 0.75}}  # 1024-2048 tokens: GPU-bound  # fmt: skip
SHORT = {"name": "short", "B": 846, "H": 4, "D": 128, "dtype": "bf16", "max_len": 127,
         "lengths": {"family": "uniform_fill", "fill": 0.5}}  # 1-127 tokens: host-bound  # fmt: skip


@pytest.mark.parametrize("isolation", ["process", "none"])
def test_no_case_of_a_harness_run_is_timed_after_a_profiler_session(tmp_path, isolation):
    """The harness's property, on the call it failed on (774bbd5: a host-bound gdpa_triton forward, 846
    sequences of 1-127 tokens, timed 0.16 ms in a fresh interpreter and 0.31 ms after one kernel breakdown
    in the same process). One harness run (in a worker process, and in the command's own), breakdown on:
    the short set, then the long set, then the short set again (the same lengths). Until the profiled phase
    the third case was timed after the first two cases' breakdowns; now every case is timed before the first
    breakdown (and the worker's output says so: no case line after "profiling views of", bench_run's check),
    each case has its breakdown, and the two short cases' GPU work per call is the same (kernel sums within
    3%). Their event medians are printed, not asserted: a host-bound call times the host, and on the H200
    machine the third case read +57% over the first in a worker and +7.7% in the command's process with no
    profiler session between them (2026-12-02; docs/experiments/host_speed_gpu.py: the host's own speed
    moved 2x round to round), an effect as large as the profiler's leftover (+17% that day, +90% at 774bbd5).

    Beside it, for the record, torch's own behaviour (tests/profiler_after_gpu.py, a fresh interpreter
    timing the call before and after one breakdown, with and without TEARDOWN_CUPTI): printed, not asserted
    (it is why the harness orders its phases; a torch that stops doing it passes as well)."""
    dev()
    runs = {}
    for teardown in (None, "1") if isolation == "process" else ():
        env = {k: v for k, v in os.environ.items() if k != "TEARDOWN_CUPTI"} | {"PYTHONPATH": _pythonpath()}
        env |= {"TEARDOWN_CUPTI": teardown} if teardown else {}
        out = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "profiler_after_gpu.py")],
            env=env, capture_output=True, text=True, timeout=600, check=True,
        )  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        runs[teardown or "unset"] = {k: statistics.median(r[k]) for k in ("before", "after")}
    show(test="torch: a profiler session, then the same call (medians, ms)", runs=runs)
    cfg = {
        "name": "order",
        "device": "cuda",
        "providers": ["gdpa_triton"],
        "modes": ["fwd"],
        "timing": {"warmup_ms": 100, "rep_ms": 1000},
        "power": {"enabled": False},
        "hardware": {"calibrate": False},
        "breakdown": {"enabled": True},
        "sets": [SHORT | {"name": "short_first"}, LONG, SHORT | {"name": "short_again"}],
    }
    _, cases = bench_run(tmp_path, cfg, "order", isolation)
    cases.pop("")
    first, again = (next(c for c in cases.values() if c["set"] == s) for s in ("short_first", "short_again"))
    assert first["workload"]["lengths_sha256"] == again["workload"]["lengths_sha256"]
    kernels = {c["id"]: (c["kernels"]["sum_ms"], c["kernels"]["pass_median_ms"]) for c in cases.values()}
    quantiles = {c["set"]: (c["median_ms"], c["p80_ms"]) for c in (first, again)}
    show(test="harness order: medians and p80 (ms)", quantiles=quantiles, kernels_and_pass_ms=kernels)
    assert all(c["status"] == "ok" and c["kernels"]["error"] is None for c in cases.values())
    assert again["kernels"]["sum_ms"] == pytest.approx(first["kernels"]["sum_ms"], rel=0.03), kernels
