"""Host-bound cases told apart (issue 31): the GPU idle share and `host_bound` flag, the bands measured as the
whole case with their kernels and why their sum is not the whole batch's, the CUDA-graph record's bounds,
and the report's lines about them. CPU only: the GPU side is tests/test_profiling_gpu.py."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from bench.case.graph_timing import MAX_CALLS, calls_per_graph
from bench.case.timing import Samples
from bench.config.models import load_config
from bench.profiling.bands import band_kernels, case_bands, kernels_pending, why_apart
from bench.profiling.views import CaseProfiling, at_clock
from kernels.registry import get_provider
from reports.profiling import profiling_warnings
from results.figures import HOST_BOUND_IDLE, accounting, host_bound, idle_share
from tests.test_breakdown_trace import cpu_config


def test_idle_share_the_host_bound_flag_and_the_accounting():
    assert idle_share(0.75, 1.0) == pytest.approx(0.25) and host_bound(0.75, 1.0) is True
    assert idle_share(0.95, 1.0) == pytest.approx(0.05) and host_bound(0.95, 1.0) is False
    assert host_bound(1.0 - HOST_BOUND_IDLE, 1.0) is False  # exactly 10% idle is not above it
    assert idle_share(1.3, 1.0) == 0.0  # kernels overlapping on several streams: never negative
    for k, m in ((None, 1.0), (1.0, None), (1.0, 0.0), (float("nan"), 1.0)):
        assert math.isnan(idle_share(k, m)) and host_bound(k, m) is None and accounting(k, m) is None
    verdicts = {r: accounting(r, 1.0) for r in (1.06, 1.05, 1.0, 0.95, 0.949, 0.92, 0.90, 0.899, 0.5)}
    assert verdicts == {
        1.06: "kernels over the call",
        1.05: "accounted",
        1.0: "accounted",
        0.95: "accounted",
        0.949: "launch gaps",  # neither host-bound nor fully accounted
        0.92: "launch gaps",
        0.90: "launch gaps",
        0.899: "host-bound",
        0.5: "host-bound",
    }
    for r in verdicts:  # the verdict and the flag never disagree
        assert (accounting(r, 1.0) == "host-bound") == host_bound(r, 1.0), r


def test_a_gpu_breakdown_is_judged_against_its_own_passs_median(tmp_path):
    """The H200's long gdpa forward: kernel sum 0.668 ms, the case's median 0.619 ms (its samples ran at a
    higher clock than the breakdown's calls: 1.079, past the bar), the pass's own event median 0.690 ms
    (0.968: accounted). The verdict reads the pass; the case's median is reported beside it."""
    model = load_config(cpu_config(tmp_path, "{enabled: true, calls: 1}")).model
    views = CaseProfiling(model, torch.device("cpu"), timer=None)
    kernels = {"source": "cuda", "sum_ms": 0.668, "pass_median_ms": 0.690}
    assert views.judge(kernels, {"median_ms": 0.619}) == {"host_bound": False}
    assert kernels["sum_over_pass"] == pytest.approx(0.668 / 0.690) and kernels["accounting"] == "accounted"
    assert kernels["sum_over_median"] == pytest.approx(0.668 / 0.619) and kernels["idle_share"] == pytest.approx(
        1 - 0.668 / 0.690
    )
    gaps = {"source": "cuda", "sum_ms": 0.92, "pass_median_ms": 1.0}
    assert views.judge(gaps, {"median_ms": 0.95}) == {"host_bound": False} and gaps["accounting"] == "launch gaps"
    host = {"source": "cuda", "sum_ms": 0.087, "pass_median_ms": 0.30}
    assert views.judge(host, {"median_ms": 0.16}) == {"host_bound": True} and host["accounting"] == "host-bound"
    cpu = {"source": "cpu", "sum_ms": 0.5, "pass_median_ms": 2.0}
    assert views.judge(cpu, {"median_ms": 2.0}) == {} and "idle_share" not in cpu and "accounting" not in cpu
    assert views.judge({"source": "cuda", "sum_ms": None, "error": "no kernel"}, {"median_ms": 2.0}) == {}
    no_pass = {"source": "cuda", "sum_ms": 1.0, "pass_median_ms": None}
    assert views.judge(no_pass, {"median_ms": 2.0}) == {"host_bound": None} and no_pass["accounting"] is None
    # the H200 peers run of 2026-12-06 (no CUDA graph): HSTU's causal forward read host-bound in the pass (0.233 ms
    # of kernels in a 0.462 ms call under the profiler) while its samples were its kernels' (0.231 ms); gdpa's
    # samples of the same batch read 0.402 ms of 0.229 ms kernels: that one is host-bound as users run it
    hstu = {"source": "cuda", "sum_ms": 0.2329, "pass_median_ms": 0.4620}
    assert views.judge(hstu, {"median_ms": 0.2306}) == {"host_bound": False} and hstu["accounting"] == "host-bound"
    ours = {"source": "cuda", "sum_ms": 0.2286, "pass_median_ms": 0.4130}
    assert views.judge(ours, {"median_ms": 0.4017}) == {"host_bound": True}


def test_host_bound_is_read_from_the_cuda_graph_time_where_the_case_has_one(tmp_path):
    """The H200's log-normal 2048 `gdpa` forward (2026-12-02): kernels 0.626 ms of a 0.859 ms call under the
    profiler (27% idle: the pass's verdict, `host-bound`), but its CUDA-graph time 0.597 ms of a 0.609 ms
    timed median (1.8% idle): not host-bound as users run it. Where the graph time is missing (a capture
    that failed, or `timing.cuda_graph` off) the pass and the samples decide together: the kernel sum under 90% of
    both; the short band's 0.087 ms graph of a 0.25 ms median is host-bound."""
    model = load_config(cpu_config(tmp_path, "{enabled: true, calls: 1}")).model
    views = CaseProfiling(model, torch.device("cpu"), timer=None)
    pass_says = {"source": "cuda", "sum_ms": 0.64, "pass_sum_ms": 0.626, "pass_median_ms": 0.859}
    rec = {"median_ms": 0.609, "cuda_graph": {"ms": 0.597, "error": None}}
    assert views.judge(pass_says, rec) == {"host_bound": False} and pass_says["accounting"] == "host-bound"
    failed = {"median_ms": 0.609, "cuda_graph": {"ms": None, "error": "the call cannot be captured: ..."}}
    # no graph: the pass's verdict stands only where the samples agree; here they put the kernels at 103% of the call
    assert views.judge(dict(pass_says), failed) == {"host_bound": False}
    assert views.judge(dict(pass_says), {**failed, "median_ms": 0.80}) == {"host_bound": True}
    short = {"source": "cuda", "sum_ms": 0.089, "pass_median_ms": 0.19}
    assert views.judge(short, {"median_ms": 0.249, "cuda_graph": {"ms": 0.0873}}) == {"host_bound": True}


def test_a_clock_the_cap_moved_between_samples_and_replays_is_not_host_time(tmp_path):
    """The H100's uniform 4096 `gdpa_hopper` forward (2026-12-06, 300 ms windows): 5 samples, median 70.81 ms at
    1500 MHz, while the clock rose; its CUDA-graph time after them 62.28 ms — 12% under the median, which read
    `host-bound` for a 60 ms GPU-bound call. At the samples' clock (the replays at 1710 MHz) the graph is 71.0 ms:
    not host-bound. A host-bound call stays one whatever its clocks; a missing clock leaves the plain verdict."""
    model = load_config(cpu_config(tmp_path, "{enabled: true, calls: 1}")).model
    views = CaseProfiling(model, torch.device("cpu"), timer=None)
    assert at_clock(62.28, 1710.0, 1500.0) == pytest.approx(62.28 * 1710 / 1500)
    assert at_clock(62.28, None, 1500.0) is None and at_clock(None, 1710.0, 1500.0) is None
    assert at_clock(62.28, 1710.0, 0.0) is None

    def judged(graph_ms, graph_mhz, median_ms, samples_mhz):
        scaled = at_clock(graph_ms, graph_mhz, samples_mhz)
        g = {"ms": graph_ms, "sm_clock_mhz": graph_mhz, "ms_at_samples_clock": scaled}
        k = {"source": "cuda", "sum_ms": graph_ms, "pass_median_ms": graph_ms}
        return views.judge(k, {"median_ms": median_ms, "sm_clock_mhz": samples_mhz, "cuda_graph": g})["host_bound"]

    assert judged(62.28, 1710.0, 70.81, 1500.0) is False  # the clock explains the gap
    assert judged(62.28, 1500.0, 70.81, 1500.0) is True  # the same clock: the gap is the host's
    assert judged(62.28, None, 70.81, 1500.0) is True  # no clock read: the plain comparison
    assert judged(0.0873, 1980.0, 0.249, 1980.0) is True  # the short band, host-bound at one clock
    assert judged(0.0873, 1600.0, 0.249, 1980.0) is True  # and with the replays slower: more idle, still host
    assert judged(0.0873, 1980.0, 0.249, 1600.0) is True  # a clock never clears a gap it cannot explain
    assert judged(66.0, 1500.0, 70.81, 1400.0) is False  # under 10% idle as measured: no clock makes it host-bound


def test_the_runners_clock_reader_reads_only_a_running_monitor():
    from bench.case.power import CasePower

    class Monitor:
        available = True

        def sample_now(self):
            return {"sm_clock_mhz": 1755}

    assert CasePower(None, None, timer=None, sync=lambda: None).clock_now() is None  # CPU run, power off
    assert CasePower(Monitor(), None, timer=None, sync=lambda: None).clock_now() == 1755.0
    Monitor.available = False
    assert CasePower(Monitor(), None, timer=None, sync=lambda: None).clock_now() is None


def test_why_the_bands_do_not_sum_to_the_whole_batch():
    assert why_apart(1.05, [], None) is None and why_apart(None, [], None) is None
    short = {"label": "<128", "idle_share": 0.52}
    long = {"label": "≥1024", "idle_share": 0.01}
    host = why_apart(1.26, [short, long], 1.02)
    assert "1.26× the whole batch" in host and "<128 (GPU idle 52%)" in host and "≥1024" not in host
    assert "host time, not kernel time" in host
    kernels = why_apart(1.4, [long], 1.35)
    assert "host-bound" not in kernels and "the kernels cost more apart" in kernels
    assert "no kernel breakdown" in why_apart(0.8, [{"label": "x", "idle_share": None}], None)
    # the case's own rule: a band's CUDA-graph time, where it has one, outranks the profiler pass's idle share
    # (f50d6fb, log-normal 2048 bwd: 512-1023 read 54% idle in its pass, 0.281 ms graph of a 0.287 ms call)
    busy = {"label": "512–1023", "idle_share": 0.54, "graph_ms": 0.281, "median_ms": 0.2866}
    slow = {"label": "<128", "idle_share": 0.05, "graph_ms": 0.07, "median_ms": 0.2}
    both = why_apart(1.3, [busy, slow], 1.02)
    assert "512–1023" not in both and "<128 (graph 0.070 ms of a 0.200 ms call)" in both


def test_bands_are_timed_then_profiled_and_explain_their_sum(tmp_path):
    """Two bands through a real provider; the stand-ins time each band 1 ms (the timed phase: `measure`, no
    profiler) and give the short band's kernels 0.3 ms on a 1 ms pass (host-bound), the long band's 0.9 ms
    (the profiled phase: `band_kernels`, each band built again); the whole batch timed 1.2 ms on 1.15 ms of
    kernels. The bands sum to 2 ms (1.67×) while their kernels sum to 1.04× the whole's: host time."""
    cfg = load_config(cpu_config(tmp_path, "{enabled: true, calls: 1}"))
    model, case = cfg.model, next(c for c in cfg.cases if c.mode == "fwd")
    provider = get_provider("naive_eager")
    timed, profiled = [], []

    graphs = iter([0.3, 0.95])  # the short band's GPU time is 30% of its call; the long band's 95%

    def measure(fn):
        fn()  # it is the band's callable: it runs
        timed.append(fn)
        return {"samples": Samples.of([1.0, 1.0, 1.0]), "graph_ms": next(graphs), "note": None, "profiled_later": True}

    kernel_ms = iter([0.3, 0.9])

    def profile(fn):
        fn()
        profiled.append(fn)
        return {"source": "cuda", "sum_ms": next(kernel_ms), "pass_median_ms": 1.0, "error": None}

    q = np.array([3, 5, 12, 16])
    whole = {"median_ms": 1.2, "kernels": {"sum_ms": 1.15}, "kernel_config": None}
    gate = CaseProfiling(model, torch.device("cpu"), timer=None).gate()
    cpu = torch.device("cpu")
    b = case_bands(case, provider, q, q, [8], cpu, measure, gate, whole)
    assert len(timed) == 2 and not profiled and [r["status"] for r in b["rows"]] == ["ok", "ok"]
    assert kernels_pending(b) and all("kernel_ms" not in r for r in b["rows"]) and b["kernel_sum_ms"] is None
    # the graph times tell the host-bound band before any breakdown
    assert b["sum_over_whole"] == pytest.approx(2.0 / 1.2) and "<8 (graph 0.300 ms of a 1.000 ms call)" in b["why"]
    assert "≥8" not in b["why"]
    b = band_kernels(case, provider, b, q, q, cpu, profile, whole)
    rows = {r["label"]: r for r in b["rows"]}
    assert len(profiled) == 2 and not kernels_pending(b) and timed[0] is not profiled[0]  # built again
    assert rows["<8"]["idle_share"] == pytest.approx(0.7) and rows["≥8"]["idle_share"] == pytest.approx(0.1)
    assert rows["<8"]["graph_ms"] == 0.3 and rows["<8"]["kernel_ms"] == 0.3 and rows["<8"]["rel_err"] is not None
    assert rows["<8"]["pass_median_ms"] == 1.0 and rows["<8"]["median_ms"] == 1.0
    assert b["sum_over_whole"] == pytest.approx(2.0 / 1.2) and b["kernel_sum_ms"] == pytest.approx(1.2)
    assert b["kernel_sum_over_whole"] == pytest.approx(1.2 / 1.15)
    assert "<8 (graph 0.300 ms of a 1.000 ms call)" in b["why"] and "host time" in b["why"] and "≥8" not in b["why"]
    again = band_kernels(case, provider, b, q, q, cpu, profile, whole)  # nothing pending: nothing profiled
    assert len(profiled) == 2 and again["rows"] == b["rows"]
    graphs = iter([0.3, 0.95])
    whole_without_kernels = {"median_ms": 2.0, "kernels": None}
    b = case_bands(case, provider, q, q, [8], cpu, measure, None, whole_without_kernels)
    assert b["why"] is None and b["kernel_sum_over_whole"] is None  # 2.0 / 2.0: within 10%


def test_the_graph_holds_about_20_ms_of_calls_within_bounds():
    assert calls_per_graph(0.1) == 200 and calls_per_graph(1.0) == 20 and calls_per_graph(50.0) == 1
    assert calls_per_graph(0.001) == MAX_CALLS and calls_per_graph(None) == 1 and calls_per_graph(float("nan")) == 1


def test_cuda_graph_timing_on_a_cpu_run_records_nothing(tmp_path):
    import json

    from bench.cli.parser import main

    cfg = cpu_config(tmp_path, "{enabled: false}")
    cfg.write_text(cfg.read_text().replace("timing: {", "timing: {cuda_graph: true, "))
    assert main(["run", str(cfg), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    cases = data["cases"]
    assert all(c["status"] == "ok" and "cuda_graph" not in c and c["host_bound"] is None for c in cases)
    assert data["meta"]["timing_stream"] is None  # a CPU run has no CUDA stream of its own


def test_the_report_says_which_cases_are_host_bound_and_why_bands_are_apart():
    cases = pd.DataFrame(
        {
            "id": ["a/fwd/x", "b/fwd/x", "c/fwd/x", "d/fwd/x"],
            "host_bound": [True, False, None, False],
            "kernels.accounting": ["host-bound", "launch gaps", None, "kernels over the call"],
            "bands.why": [None, "the bands sum to 1.26× the whole batch; host-bound bands: <128", None, None],
        }
    )
    lines = profiling_warnings(cases)
    assert len(lines) == 4
    assert lines[0].startswith("1 of 3 cases with a GPU breakdown are host-bound") and "a/fwd/x" in lines[0]
    assert lines[1].startswith("1 case(s) with launch gaps") and "not host-bound and not fully accounted" in lines[1]
    assert lines[1].endswith(": b/fwd/x.") and lines[2].startswith("1 case(s) whose kernels sum to more than 105%")
    assert lines[3] == "b/fwd/x: the bands sum to 1.26× the whole batch; host-bound bands: <128."
    assert profiling_warnings(pd.DataFrame({"id": ["a"]})) == []


def test_the_issue_bars_script_reads_a_run_folder(tmp_path):
    """docs/experiments/profiling_bars.py on a synthetic run: each bar fails where it should, one line each."""
    import gzip
    import json
    import subprocess
    import sys
    from pathlib import Path

    def case(cid, provider, median, p80, kernels=None, **extra):
        k = {"error": None, "n_kernels": 2, "sum_ms": median, "profiled_calls": 3} | (kernels or {})
        return {"id": cid, "provider": provider, "mode": "fwd", "status": "ok", "median_ms": median, "p80_ms": p80,
                "kernels": k, **extra}  # fmt: skip

    auto = {"dispatch": {"fwd": {"backend": "triton"}}}
    profiled_host_bound = {"pass_median_ms": 0.642, "n_kernels": 1, "accounting": "host-bound"}
    graph_bound = {"host_bound": False, "cuda_graph": {"ms": 0.371}}
    cases = [
        case("a/fwd/L=8/gdpa", "gdpa", 1.02, 1.30, kernel_config=auto),  # p80 8% over the pinned backend's
        case("a/fwd/L=8/gdpa_triton", "gdpa_triton", 1.0, 1.2),
        case("b/fwd/L=8/fa4", "fa4", 1.0, 1.1, {"error": "the profiler recorded no kernel", "n_kernels": None}),
        case("c/fwd/L=8/fa4", "fa4", 1.0, 1.1, {"sum_ms": 0.5}, host_bound=True, cuda_graph={"ms": 0.5}),
        case("d/fwd/L=8/fa4", "fa4", 1.0, 1.1, {"sum_ms": 0.5}, host_bound=True),  # no graph time beside it
        case("e/fwd/L=8/fa4", "fa4", 1.0, 1.1, bands={"sum_over_whole": 1.26, "why": None, "rows": []}),
        case("f/fwd/L=8/fa4", "fa4", 1.0, 1.1, bands={"sum_over_whole": 1.26, "why": "host-bound bands", "rows": []}),
        # the H200's long gdpa forward: 1.079 over the samples' median, 0.968 over its own pass's: accounted
        case("g/fwd/L=8/fa4", "fa4", 0.619, 0.7, {"sum_ms": 0.668, "pass_median_ms": 0.690}),
        case("h/fwd/L=8/fa4", "fa4", 1.0, 1.1, {"sum_ms": 0.92, "pass_median_ms": 1.0, "accounting": "launch gaps"}),
        case("i/fwd/L=8/fa4", "fa4", 1.0, 1.1, {"sum_ms": 0.92, "pass_median_ms": 1.0, "n_kernels": 1}),
        case("j/fwd/L=8/fa4", "fa4", 1.0, 1.1, {"sum_ms": 1.0, "pass_median_ms": 0.9}),  # kernels over the call
        # judged on the pass's own calls' kernels (pass_sum_ms), not the counted calls' (sum_ms 1.1)
        case("k/fwd/L=8/fa4", "fa4", 1.0, 1.1, {"sum_ms": 1.1, "pass_median_ms": 1.0, "pass_sum_ms": 0.99}),
        case("l/fwd/L=8/fa4", "fa4", 1.0, 1.1, {"trace": "traces/l.json"}),  # kept gzipped, as committed
        # flagged host-bound by the profiled pass, but its graph time is its median: the profiler's host time
        case(
            "m/fwd/L=8/fa4",
            "fa4",
            1.0,
            1.1,
            {"sum_ms": 0.7, "idle_share": 0.3},
            host_bound=True,
            cuda_graph={"ms": 0.98},
        ),
        case(
            "n/fwd/L=8/fa4", "fa4", 1.0, 1.1, cuda_graph={"ms": None, "error": "cannot be captured: CUDA out of memory"}
        ),
        # host-bound under the profiler only (the H200's short gdpa_hopper backward: 0.580 of its pass): judged on
        # its graph time, the call's device time: 0.372 / 0.371 accounted, 0.30 / 0.371 not
        case("o/fwd/L=8/fa4", "fa4", 0.38, 0.4, {**profiled_host_bound, "sum_ms": 0.372}, **graph_bound),
        case("p/fwd/L=8/fa4", "fa4", 0.38, 0.4, {**profiled_host_bound, "sum_ms": 0.30}, **graph_bound),
        # one kernel, short of its pass by the profiler's host time (the H200's seeds/fwd/L=4096/sort=True/gdpa:
        # 0.912 of its pass, 1.03 of its graph time): judged on the graph time, as a host-bound pass is
        case(
            "q/fwd/L=8/fa4",
            "fa4",
            0.306,
            0.31,
            {"sum_ms": 0.309, "pass_median_ms": 0.339, "n_kernels": 1},
            host_bound=False,
            cuda_graph={"ms": 0.301},
        ),
    ]
    (tmp_path / "results.json").write_text(json.dumps({"schema": "gdpa-bench/1", "cases": cases}))
    ranges = [{"ph": "X", "cat": "user_annotation", "name": "gdpa_bench::call", "pid": 1, "tid": 1, "ts": 10 * i,
               "dur": 5} for i in range(3)]  # fmt: skip
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "l.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": ranges}).encode()))
    script = Path(__file__).resolve().parents[1] / "docs" / "experiments" / "profiling_bars.py"
    out = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    assert out.returncode == 1, out.stderr
    failing = [ln.split(":")[0] for ln in lines[:-1]]
    assert failing == [
        "a/fwd/L=8/gdpa",
        "b/fwd/L=8/fa4",
        "d/fwd/L=8/fa4",
        "e/fwd/L=8/fa4",
        "i/fwd/L=8/fa4",
        "j/fwd/L=8/fa4",
        "m/fwd/L=8/fa4",
        "n/fwd/L=8/fa4",
        "p/fwd/L=8/fa4",
    ]
    assert "p80_ms +8.3%" in lines[0] and "median_ms" not in lines[0] and "no kernel" in lines[1]
    assert lines[0].endswith("SM clock None vs None MHz")  # the clocks beside it (none in this run)
    assert "kernel sum / median 0.500" in lines[2]  # a run without the pass's median: judged on the samples'
    assert "kernel sum / pass median 0.920 (launch gaps on a call of one kernel)" in lines[4]
    assert "kernel sum / pass median 1.111" in lines[5]
    assert "CUDA-graph time is 0.980 of its median (GPU idle 2.0%; 30.0% in the profiled pass)" in lines[6]
    assert lines[7].endswith("CUDA-graph capture out of memory")
    assert "kernel sum / pass median 0.467, host_bound False" in lines[8]
    assert lines[-1] == "18 ok cases, 3 host-bound, 1 with launch gaps, 1 traces: 9 bar(s) failed"


def test_a_failed_capture_says_what_failed_inside_it():
    """torch.cuda.graph's exit raises `operation failed due to a previous error during capture` when the body
    failed; the body's own error is its context, and the record names both."""
    from bench.case.graph_timing import capture_failure

    try:
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore lines")
        except RuntimeError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture") from None
    except RuntimeError as plain:
        assert capture_failure(plain) == f"RuntimeError: {plain}"
    try:
        try:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore lines")
        except RuntimeError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")  # noqa: B904
    except RuntimeError as chained:
        assert capture_failure(chained) == (
            "RuntimeError: CUDA error: operation failed due to a previous error during capture (raised during: "
            "RuntimeError: CUDA error: operation not permitted when stream is capturing)"
        )


def test_a_graph_time_with_its_allocator_state_is_a_declared_record():
    """The H200 production run of 2026-12-02 crashed at its first graph time: `cuda_graph.memory` was declared
    a block, so the record check refused its keys. The record graph_time writes passes the check and reads
    back into the cases frame."""
    from results.frame import cases_frame
    from results.record import UndeclaredField, check_case_record, new_case_record

    rec = new_case_record(id="s/fwd/L=8/gdpa", provider="gdpa", mode="fwd", status="ok")
    memory = {"allocated_gib": 1.2, "reserved_gib": 3.4, "call_peak_gib": 0.5, "reserved_after_gib": 1.5}
    rec["cuda_graph"] = {"ms": 0.1, "calls": 200, "replays": 10, "flush_ms": 0.01, "error": None, "memory": memory}
    check_case_record(rec)
    frame = cases_frame([rec])
    assert frame.loc[0, "cuda_graph.ms"] == 0.1
    rec["cuda_graph"]["made_up"] = 1
    with pytest.raises(UndeclaredField, match=r"'cuda_graph\.made_up'"):
        check_case_record(rec)


def test_the_same_kernel_line_gives_the_samples_in_sm_cycles_at_their_chunks_clock():
    """profiling_bars.kilocycles: each sample times the clock read at the end of its chunk (`chunk_clocks`), so
    two cases that ran the same kernel at different points of the power cap compare clock for clock."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "experiments" / "profiling_bars.py"
    spec = importlib.util.spec_from_file_location("profiling_bars", path)
    bars = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bars)
    c = {"times_ms": [1.0, 1.0, 1.2, 1.2], "chunk_clocks": [[2, 1980.0], [4, 1650.0]]}
    assert bars.kilocycles(c) == [1980.0, 1980.0, 1.2 * 1650.0, 1.2 * 1650.0]
    assert bars.kilocycles({"times_ms": [1.0], "chunk_clocks": []}) is None  # not kept per chunk
    assert bars.kilocycles({"times_ms": [1.0, 2.0], "chunk_clocks": [[1, 1980.0]]}) is None  # not every sample
    twin = {"id": "s/fwd/L=8/gdpa_triton", "status": "ok", "median_ms": 1.0, "p80_ms": 1.0,
            "times_ms": [1.0] * 4, "chunk_clocks": [[4, 1980.0]]}  # fmt: skip
    auto = {"id": "s/fwd/L=8/gdpa", "mode": "fwd", "median_ms": 1.1, "p80_ms": 1.2, "kernel_config":
            {"dispatch": {"fwd": {"backend": "triton"}}}, **c}  # fmt: skip
    line = bars.same_kernel_bar(auto, {twin["id"]: twin})
    assert line.startswith("auto vs gdpa_triton: median_ms +10.0%") and "in SM cycles" in line, line
