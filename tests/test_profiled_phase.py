"""No timed measurement follows a profiler session in the same process (issue 31, docs/DESIGN.md §5): a sweep
times every case first (samples, the bands' timings) and profiles them after its last timed case
(bench.profiling.later), in process, in a worker and in each shard's worker; a run stopped between the
phases resumes into its views without timing anything again; a GPU fault in the profiled phase is the
case's, and a fresh worker profiles the rest. On CPU (the Triton interpreter's path)."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
import test_faults
import torch

import bench.case.timing
import bench.profiling.breakdown
import bench.sweep.runner
from bench.cli.parser import main
from results.files import read_results

fault_providers = test_faults.fault_providers  # the fixture: the test providers here and in the workers
TIMED_LINE = re.compile(r"^\s+s/\S+: ")  # a timed case's line (`  <id>: <rate> ...`)


def config(tmp_path, providers="[naive_eager]", bands=True, max_lens="8, 12", fill=0.5):
    p = tmp_path / "cfg.yaml"
    p.write_text(
        textwrap.dedent(f"""
        name: phases
        device: cpu
        providers: {providers}
        modes: [fwd, bwd]
        timing: {{warmup_ms: 1, rep_ms: 2, min_reps: 2, max_reps: 2}}
        power: {{enabled: false}}
        hardware: {{calibrate: false}}
        breakdown: {{enabled: true, calls: 1, warm_ms: 0}}
        sets:
          - {{name: s, B: 4, H: 2, D: 16, dtype: fp32, activation: silu, max_len: [{max_lens}],
             lengths: {{family: uniform_fill, fill: {fill}}}, kv: {{rule: self}}}}
        """)
        + ("bands: {only: 'fwd/L=12/', edges: [6]}\n" if bands else "")
    )
    return p


@pytest.fixture
def timeline(monkeypatch):
    """Every timed window (the runner's timer: samples and the bands' timings) and every profiler session of
    this process, in order: ("timed", torch's profiler on?) / ("profiler", None)."""
    events: list[tuple[str, bool | None]] = []
    time_cpu, profile = bench.case.timing.time_cpu, bench.profiling.breakdown.profile

    def timed(*a, **k):
        events.append(("timed", torch.autograd.profiler._is_profiler_enabled))
        return time_cpu(*a, **k)

    def profiled(*a, **k):
        events.append(("profiler", None))
        return profile(*a, **k)

    monkeypatch.setattr(bench.case.timing, "time_cpu", timed)
    monkeypatch.setattr(bench.profiling.breakdown, "profile", profiled)
    return events


def check_order(events) -> None:
    kinds = [k for k, _ in events]
    assert "profiler" in kinds
    if "timed" in kinds:
        last_timed = len(kinds) - 1 - kinds[::-1].index("timed")
        assert last_timed < kinds.index("profiler"), kinds  # no timed window after a profiler session
    assert not any(on for k, on in events if k == "timed")


def cases_of(run) -> dict[str, dict]:
    return {c["id"]: c for c in read_results(run)["cases"]}


def test_the_timeline_guard_sees_a_timing_after_a_profiler_session():
    """The check the tests below rely on fails on the order the sweep had before (a breakdown per case)."""
    with pytest.raises(AssertionError):
        check_order([("timed", False), ("profiler", None), ("timed", False), ("profiler", None)])
    check_order([("timed", False), ("timed", False), ("profiler", None), ("profiler", None)])


def test_a_sweep_times_every_case_before_its_first_profiler_session(tmp_path, timeline):
    run = tmp_path / "run"
    assert main(["run", str(config(tmp_path)), "--out", str(run), "--no-progress", "--no-report"]) == 0
    check_order(timeline)
    cases = cases_of(run)
    banded = [c for c in cases.values() if c.get("bands")]
    band_rows = [r for c in banded for r in c["bands"]["rows"] if r["status"] == "ok"]
    timed = sum(k == "timed" for k, _ in timeline)
    profiled = sum(k == "profiler" for k, _ in timeline)
    assert timed == len(cases) + len(band_rows) and profiled == len(cases) + len(band_rows)
    assert len(banded) == 1 and len(band_rows) == 2
    for c in cases.values():
        k = c["kernels"]
        assert c["status"] == "ok" and k["error"] is None and k["rows"] and k["pass_calls"] == 2
        assert k["pass_median_ms"] > 0 and c["host_bound"] is None  # CPU: no GPU verdict
    for r in band_rows:  # each band profiled too, in the second phase
        assert r["kernel_ms"] > 0 and r["pass_median_ms"] > 0 and r["idle_share"] is None
    assert banded[0]["bands"]["kernel_sum_ms"] == pytest.approx(sum(r["kernel_ms"] for r in band_rows))


def test_a_run_stopped_between_the_phases_resumes_into_its_views(tmp_path, monkeypatch, timeline):
    """Every case timed and written, then the run is stopped before its profiled phase: the cases are there
    without views; `--resume` gives them their views, times nothing again, and keeps every sample."""
    cfg, run = config(tmp_path), tmp_path / "run"
    real = bench.sweep.runner.profile_recorded

    def stopped(*_, **__):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench.sweep.runner, "profile_recorded", stopped)
    main(["run", str(cfg), "--out", str(run), "--no-progress", "--no-report"])
    data = read_results(run)
    before = {c["id"]: c for c in data["cases"]}
    assert data["meta"]["interrupted"] is True and len(before) == 4
    assert all(c["status"] == "ok" and "kernels" not in c for c in before.values())
    banded = next(c for c in before.values() if c.get("bands"))
    assert all("kernel_ms" not in r for r in banded["bands"]["rows"] if r["status"] == "ok")
    monkeypatch.setattr(bench.sweep.runner, "profile_recorded", real)
    timeline.clear()
    assert main(["run", str(cfg), "--resume", str(run), "--no-progress", "--no-report"]) == 0
    assert [k for k, _ in timeline] == ["profiler"] * (4 + 2)  # the views only: nothing timed again
    after = cases_of(run)
    assert read_results(run)["meta"]["interrupted"] is False
    for cid, c in after.items():
        assert c["times_ms"] == before[cid]["times_ms"] and c["kernels"]["error"] is None
    rows = [r for r in after[banded["id"]]["bands"]["rows"] if r["status"] == "ok"]
    assert rows and all(r["kernel_ms"] > 0 for r in rows)
    timeline.clear()  # a second resume: nothing left to do
    assert main(["run", str(cfg), "--resume", str(run), "--no-progress", "--no-report"]) == 0
    assert timeline == [] and cases_of(run) == after


def test_profile_run_bands_times_every_band_before_their_breakdowns(tmp_path, timeline):
    cfg, run = config(tmp_path, bands=False), tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(run), "--no-progress", "--no-report"]) == 0
    timeline.clear()
    argv = ["profile", str(cfg), "--only", "fwd/", "--bands", "--band-edges", "6", "--run", str(run)]
    assert main(argv) == 0
    check_order(timeline)
    banded = [c for c in cases_of(run).values() if c.get("bands")]
    assert len(banded) == 2
    assert all(r["kernel_ms"] > 0 for c in banded for r in c["bands"]["rows"] if r["status"] == "ok")


def segments(out: str) -> list[list[str]]:
    """A worker's lines per worker process (each opens with `gdpa-bench: N cases from ...`)."""
    parts: list[list[str]] = []
    for ln in out.splitlines():
        if re.sub(r"^\[[^]]*\] ", "", ln).startswith("gdpa-bench: ") and " cases from " in ln:
            parts.append([])
        if parts:
            parts[-1].append(ln)
    return parts


def check_worker_order(lines: list[str]) -> None:
    """In one worker's output no timed case's line comes after its profiled phase began."""
    start = next((i for i, ln in enumerate(lines) if "profiling views of" in ln), len(lines))
    late = [ln for ln in lines[start:] if TIMED_LINE.match(re.sub(r"^\[[^]]*\] ", "", ln))]
    assert not late, late


def test_a_fault_in_the_profiled_phase_is_the_cases_and_a_fresh_worker_profiles_the_rest(
    tmp_path, fault_providers, capfd
):
    """A worker process (`--isolation process`): test_sim_profiled_fault faults the GPU only under the
    profiler, in its forward at L=6 (its backward case profiles the backward alone). The first worker times
    all 8 cases, then faults in its profiled phase: that case `failed`; a fresh worker, which times nothing,
    profiles the rest."""
    provider = "{name: test_sim_profiled_fault, options: {fault_at: 6}}"
    cfg = config(tmp_path, f"[naive_eager, {provider}]", bands=False, max_lens="6, 9", fill=1.0)
    run = tmp_path / "run"
    rc = main(["run", str(cfg), "--out", str(run), "--no-progress", "--no-report", "--isolation", "process"])
    out = capfd.readouterr().out
    assert rc == 0, out[-3000:]
    assert out.count("a fresh worker process (pid") == 1
    workers = segments(out)
    assert len(workers) == 2 and [sum(bool(TIMED_LINE.match(ln)) for ln in w) for w in workers] == [8, 0]
    for lines in workers:
        check_worker_order(lines)
    for cid, c in cases_of(run).items():
        if cid == "s/fwd/L=6/test_sim_profiled_fault":
            assert c["status"] == "failed" and "in its profiled views, after its samples" in c["error"], c
            assert "illegal memory access" in c["error"] and c["times_ms"] == []
        else:
            assert c["status"] == "ok" and c["kernels"]["error"] is None and c["kernels"]["rows"], (cid, c)


def test_each_shard_times_its_cases_before_profiling_them_and_a_resume_fills_what_is_missing(tmp_path, capfd):
    cfg, run = config(tmp_path, bands=False), tmp_path / "run"
    assert main(["run", str(cfg), "--out", str(run), "--gpus", "0,1", "--no-progress"]) == 0
    capfd.readouterr()
    logs = sorted((run / "shards").glob("gpu*.log"))
    assert len(logs) == 2
    for log in logs:
        lines = log.read_text().splitlines()
        assert any("profiling views of" in ln for ln in lines), lines
        check_worker_order(lines)
    cases = cases_of(run)
    assert len(cases) == 4 and all(c["kernels"]["error"] is None for c in cases.values())
    # a shard stopped between its phases: its case recorded without its views, in the merge and the shard
    gone = sorted(cases)[0]
    for path in [run / "results.json", *(run / "shards").glob("gpu*/results.json")]:
        data = json.loads(path.read_text())
        for c in data["cases"]:
            if c["id"] == gone:
                del c["kernels"]
        path.write_text(json.dumps(data))
    assert main(["run", str(cfg), "--resume", str(run), "--gpus", "0,1", "--no-progress"]) == 0
    out = capfd.readouterr().out
    assert "1 recorded without their profiled views: timed again with them" in out
    after = cases_of(run)
    assert after[gone]["kernels"]["error"] is None and len(after) == 4
    assert all(after[c]["times_ms"] == cases[c]["times_ms"] for c in after if c != gone)


def test_the_passs_own_calls_are_timed_as_the_samples_are(monkeypatch):
    """GPU path with stand-ins: per call the flush, the start event, the call, the end event, with no sync
    inside a chunk (a GPU-bound call queues ahead as in the samples); a sync after each chunk; chunks as the
    timer's (bench.case.timing.chunk_size)."""
    log: list[str] = []

    class Event:
        n = 0

        def __init__(self, enable_timing=False):
            Event.n += 1
            self.t = Event.n

        def record(self):
            log.append("event")

        def elapsed_time(self, end):
            return 0.5

    class Flush:
        def zero_(self):
            log.append("flush")

    monkeypatch.setattr(torch.cuda, "Event", Event)
    times = bench.profiling.breakdown.timed_calls(
        lambda: log.append("call"), lambda: log.append("sync"), Flush(), True, (1e9, 3, 5)
    )
    assert times == [0.5] * 5
    one = ["flush", "event", "call", "event"]
    assert log == one * 3 + ["sync"] + one * 2 + ["sync"]  # chunks of 3 (min calls) then the rest to 5


def test_the_passs_timed_calls_are_not_counted_in_the_breakdown():
    from test_breakdown_trace import device, host, launch, one_call

    from bench.profiling import trace_events as te

    events = [host(te.TIMED_RANGE, 0, 100), launch(10, 1), device("_gdpa_fwd_kernel", 12, 50, 1)]
    found = te.attribute({"traceEvents": events + one_call(200, 10)})
    assert found.calls["_gdpa_fwd_kernel"] == [50.0, 1]  # the counted call's alone
    assert found.other_us >= 50.0 and found.unattributed == 0


def test_a_case_that_hangs_in_the_profiled_phase_is_failed_and_the_rest_profiled(tmp_path, fault_providers, capfd):
    """test_sim_hang hangs only under the profiler, on its case at L=6: every case is timed, then its breakdown
    never returns; the parent kills the worker at the case deadline, the fresh one records that case `failed`
    (it was timed: no fresh worker profiles it again) and profiles the rest."""
    provider = "{name: test_sim_hang, options: {hang_at: 6, hang_in: profiled}}"
    cfg = config(tmp_path, f"[naive_eager, {provider}]", bands=False, max_lens="6, 9", fill=1.0)
    run = tmp_path / "run"
    argv = ["run", str(cfg), "--out", str(run), "--no-progress", "--no-report", "--case-timeout", "3"]
    rc = main(argv)
    out = capfd.readouterr().out
    assert rc == 0, out[-3000:]
    assert out.count("a fresh worker process (pid") == 1
    for cid, c in cases_of(run).items():
        if cid == "s/fwd/L=6/test_sim_hang":
            assert c["status"] == "failed" and c["error"].startswith("hung: no progress for 3 s"), c
            assert "in phase views" in c["error"] and c["error"].endswith("(in its profiled views, after its samples)")
        else:
            assert c["status"] == "ok" and c["kernels"]["error"] is None, (cid, c.get("kernels"))


def test_the_passs_event_timed_calls_keep_their_own_kernel_sum():
    """The pass's calls run without a sync between them, so call i+1 is launched while call i's kernels run:
    each call's kernels are placed by their launch into its `pass_call` range (a flush launched between two
    calls goes to its `timed` range), and `pass_sum_ms` is their time per call, what `sum_over_pass` judges
    against the same calls' event median (the counted calls' sum against it mixed two windows)."""
    from test_breakdown_trace import device, host, launch, one_call

    from bench.profiling import breakdown as bd
    from bench.profiling import trace_events as te

    events = []
    for i, t in enumerate((0, 30, 60)):  # host ranges 20 µs apart; the device runs behind them
        events += [host(te.TIMED_RANGE, t, 5), launch(t + 1, 100 + 2 * i, "cudaMemsetAsync")]
        events += [device("Memset (Device)", 10 + 60 * i, 4, 100 + 2 * i, cat="gpu_memset")]
        events += [host(te.PASS_CALL_RANGE, t + 6, 20), launch(t + 8, 101 + 2 * i, "cuLaunchKernel", "cuda_driver")]
        events += [device("_gdpa_fwd_kernel", 15 + 60 * i, 50 + i, 101 + 2 * i)]
    found = te.attribute({"traceEvents": events + one_call(400, 10)})
    assert found.pass_ranges == 3 and found.pass_us == 50 + 51 + 52
    assert found.calls["_gdpa_fwd_kernel"] == [50.0, 1] and found.unattributed == 0  # the counted call's alone
    from bench.profiling.views import CaseProfiling

    rec = bd.device_record(found, 1, True)
    assert rec["pass_sum_ms"] == pytest.approx(0.051) and rec["sum_ms"] != rec["pass_sum_ms"]
    rec["pass_median_ms"] = 0.0515
    CaseProfiling.judge(rec, {"median_ms": 0.06})
    assert rec["sum_over_pass"] == pytest.approx(0.051 / 0.0515) and rec["accounting"] == "accounted"
