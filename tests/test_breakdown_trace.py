"""The kernel breakdown's attribution from the Kineto trace (bench.profiling.trace_events, issue 31): synthetic Chrome
trace JSON with each way a kernel reaches the GPU, the GPU record built from it, and a case's trace kept in
the run folder in the format Perfetto's JSON loader reads."""

from __future__ import annotations

import contextlib
import gzip
import json
import textwrap
from pathlib import Path

import pytest
import torch

from bench.cli.parser import main
from bench.profiling import breakdown as bd
from bench.profiling import trace_events as te
from results.files import read_results

ROOT = Path(__file__).resolve().parents[1]
MAIN, AUTOGRAD = 100, 200  # thread ids: the calling thread, autograd's device thread


def host(name, ts, dur, tid=MAIN, cat="user_annotation"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def launch(ts, corr, name="cudaLaunchKernel", cat="cuda_runtime", tid=MAIN):
    args = {"correlation": corr}
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": 2, "args": args}


def device(name, ts, dur, corr=None, cat="kernel"):
    args = {"device": 0, "stream": 7} | ({"correlation": corr} if corr is not None else {})
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args}


def one_call(t0: float, corr0: int) -> list[dict]:
    """A flush then a call at t0: a Triton kernel launched through the driver API with no torch op around it,
    an autograd op on another thread launching dq and a memset, and a kernel whose launch is not recorded
    (placed by its device time, after the call range closed but before the next flush)."""
    c = corr0
    return [
        host(te.FLUSH_RANGE, t0, 20),
        launch(t0 + 2, c, "cudaMemsetAsync"),
        device("Memset (Device)", t0 + 5, 10, c, cat="gpu_memset"),
        host(te.CALL_RANGE, t0 + 30, 40),
        launch(t0 + 32, c + 1, "cuLaunchKernel", cat="cuda_driver"),  # Triton's launcher
        device("_gdpa_fwd_kernel", t0 + 40, 50, c + 1),
        host("autograd::engine::evaluate_function: GDPABackward", t0 + 35, 20, tid=AUTOGRAD, cat="cpu_op"),
        launch(t0 + 36, c + 2, tid=AUTOGRAD),
        device("dq_kernel", t0 + 95, 30, c + 2),
        launch(t0 + 37, c + 3, "cudaMemsetAsync", tid=AUTOGRAD),
        device("Memset (Device)", t0 + 126, 1, c + 3, cat="gpu_memset"),
        device("cutlass_kernel_fwd", t0 + 128, 6, None),  # no launch recorded: its device time places it
        {"ph": "X", "cat": "gpu_user_annotation", "name": te.CALL_RANGE, "pid": 0, "tid": 7, "ts": t0 + 40, "dur": 90},
        {"ph": "s", "cat": "ac2g", "id": c + 1, "pid": 1, "tid": MAIN, "ts": t0 + 32, "name": "ac2g"},
    ]


def synthetic_trace() -> dict:
    events = [
        device("profiler_start_kernel", -50, 4),  # orphan: no launch, before every range
        host(te.WARM_RANGE, 0, 100),
        launch(10, 1),
        device("_gdpa_fwd_kernel", 12, 50, 1),  # the warm-up's: not counted
        launch(150, 2, tid=999),  # a stray thread between the ranges: placed nowhere
        device("stray_kernel", 152, 7, 2),
    ]
    events += one_call(200, 10) + one_call(400, 20)
    return {"schemaVersion": 1, "traceEvents": events}


def test_every_kernel_is_placed_whatever_launched_it():
    found = te.attribute(synthetic_trace())
    assert found.calls == {
        "_gdpa_fwd_kernel": [100.0, 2],  # driver-API launches inside the call ranges, no torch op
        "dq_kernel": [60.0, 2],  # launched from another thread while the caller waited in its range
        "Memset (Device)": [2.0, 2],  # the accumulator memset counts; the flush's memset does not
        "cutlass_kernel_fwd": [12.0, 2],
    }
    assert found.rule_of("_gdpa_fwd_kernel") == te.BY_LAUNCH
    assert found.rule_of("cutlass_kernel_fwd") == te.BY_DEVICE_TIME
    assert found.by_rule == {te.BY_LAUNCH: 6, te.BY_DEVICE_TIME: 2}
    assert found.flushed == 2 and found.other_us == 50 + 2 * 10  # the warm-up and the flushes
    assert found.unattributed == 2 and found.unattributed_us == 4 + 7  # the orphan and the stray thread's
    assert [r[2] for r in found.ranges].count(te.CALL_RANGE) == 2  # the GPU-side projection is no range


def test_the_gpu_record_from_the_trace_and_its_errors():
    rec = bd.device_record(te.attribute(synthetic_trace()), 2, flushed_expected=True)
    assert rec["error"] is None and rec["source"] == "cuda"
    rows = {r["name"]: r for r in rec["rows"]}
    assert rows["dq_kernel"]["ms"] == pytest.approx(0.030) and rows["dq_kernel"]["calls"] == 1
    assert rows["cutlass_kernel_fwd"]["rule"] == "device time" and rows["_gdpa_fwd_kernel"]["rule"] == "launch"
    assert rec["sum_ms"] == pytest.approx((100 + 60 + 2 + 12) / 2 / 1e3) and rec["n_kernels"] == 4
    assert rec["unattributed_ms"] == pytest.approx(11 / 2 / 1e3)
    assert bd.device_record(te.attribute(synthetic_trace()), 3, True)["error"] == (
        "the profiler recorded 2 of 3 call ranges"
    )
    no_flush = {"traceEvents": [e for e in synthetic_trace()["traceEvents"] if e.get("name") != te.FLUSH_RANGE]}
    assert "L2 flush" in bd.device_record(te.attribute(no_flush), 2, True)["error"]
    ranges_only = {"traceEvents": [e for e in synthetic_trace()["traceEvents"] if e.get("name") in te.RANGES]}
    assert "no kernel" in bd.device_record(te.attribute(ranges_only), 2, True)["error"]


def test_odd_events_are_skipped_and_old_category_names_read():
    trace = {
        "traceEvents": [
            "not an event",
            {"ph": "X", "name": "no ts"},
            {"ph": "X", "cat": "kernel", "name": "bad ts", "ts": "soon", "dur": 1},
            {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 5},
            host(te.CALL_RANGE, 0, 10),
            launch(1, 5, cat="Runtime"),
            device("old_kernel", 2, 3, 5, cat="Kernel"),
            device("no_dur", 3, None, None),
        ]
    }
    found = te.attribute(trace)
    assert found.calls == {"old_kernel": [3.0, 1], "no_dur": [0.0, 1]}
    assert te.attribute({}).calls == {} and te.attribute({"traceEvents": "x"}).ranges == []


class _Profiled(contextlib.nullcontext):
    """A profiler stand-in whose trace is the synthetic one (the GPU path without a GPU)."""

    def __init__(self, trace):
        super().__init__(self)
        self.trace = trace

    def export_chrome_trace(self, path):
        Path(path).write_text(json.dumps(self.trace))


def test_a_gpu_breakdown_reads_the_trace_and_keeps_it_where_asked(monkeypatch, tmp_path):
    monkeypatch.setattr(bd, "profile", lambda **_: _Profiled(synthetic_trace()))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    dest = tmp_path / "traces" / "case.json.gz"
    # no event-timed calls here (no CUDA events without a GPU): the pass's median stays unknown
    rec = bd.kernel_breakdown(lambda: None, torch.device("cuda", 0), calls=2, trace_path=dest, window=(0.0, 0, 0))
    assert rec["error"] is None and rec["n_kernels"] == 4 and rec["trace"] == str(dest)
    assert rec["pass_calls"] == 0 and rec["pass_median_ms"] is None
    with gzip.open(dest) as f:
        assert json.load(f) == synthetic_trace()


def test_trace_names_are_safe_and_distinct():
    a, b = bd.trace_name("s/fwd/L=8/a b"), bd.trace_name("s_fwd_L=8_a_b")
    assert a != b and a.startswith("s_fwd_L=8_a_b-") and a.endswith(".json")
    assert "/" not in bd.trace_name("../../etc/passwd") and not bd.trace_name("../x").startswith(".")


def cpu_config(tmp_path: Path, breakdown: str) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(
        textwrap.dedent(f"""
        name: t
        device: cpu
        providers: [naive_eager]
        modes: [fwd, bwd]
        timing: {{warmup_ms: 1, rep_ms: 2, min_reps: 2, max_reps: 2}}
        power: {{enabled: false}}
        hardware: {{calibrate: false}}
        breakdown: {breakdown}
        sets:
          - {{name: s, B: 4, H: 2, D: 16, dtype: fp32, activation: silu, max_len: 16,
             lengths: {{family: uniform_fill, fill: 0.5}}, kv: {{rule: self}}}}
        """)
    )
    return p


def check_perfetto_json(path: Path, calls: int) -> None:
    """What Perfetto's JSON importer (and chrome://tracing) needs: an object with a `traceEvents` list whose
    complete events carry ph, ts, dur, pid and tid, numeric times; and the harness's call ranges in it."""
    data = json.loads(path.read_text())
    assert isinstance(data, dict) and isinstance(data["traceEvents"], list)
    complete = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    assert complete and all({"ph", "ts", "dur", "pid", "tid", "name"} <= set(e) for e in complete)
    assert all(isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) for e in complete)
    assert all(e["dur"] >= 0 for e in complete)
    # the host-side ranges (on a GPU each also has a device-side projection, `gpu_user_annotation`)
    assert [name for *_, name in te.host_ranges(complete)].count(bd.CALL_RANGE) == calls
    assert any(e["name"] == bd.WARM_RANGE for e in complete)


def test_a_run_keeps_a_trace_per_case_in_the_run_folder(tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(cpu_config(tmp_path, "{enabled: true, calls: 2, trace: true}")), "--out", str(out)]) == 0
    cases = json.loads((out / "results.json").read_text())["cases"]
    assert len(cases) == 2
    for c in cases:
        rel = c["kernels"]["trace"]
        assert rel == f"traces/{bd.trace_name(c['id'])}" and c["kernels"]["error"] is None
        check_perfetto_json(out / rel, calls=2)
        assert c["host_bound"] is None  # a CPU run says nothing about a GPU's idle time
    off = tmp_path / "off"
    assert main(["run", str(cpu_config(tmp_path, "{enabled: true, calls: 1}")), "--out", str(off)]) == 0
    assert not (off / "traces").exists()
    assert all("trace" not in c["kernels"] for c in json.loads((off / "results.json").read_text())["cases"])


def test_a_bad_trace_setting_is_one_line(tmp_path, capsys):
    for bad, says in (
        ("sometimes", "breakdown.trace: 'sometimes' matches none of the config's 2 cases"),
        ("'(unclosed'", "breakdown.trace: '(unclosed' is not a valid regular expression"),
        ("3", "breakdown.trace: 3; allowed: true, false, or a regex over case ids"),
    ):
        assert main(["list", str(cpu_config(tmp_path, f"{{trace: {bad}}}"))]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0] and "Traceback" not in err[0], err


def test_a_trace_regex_keeps_the_matching_cases_traces_only(tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(cpu_config(tmp_path, "{enabled: true, calls: 1, trace: 'bwd/'}")), "--out", str(out)]) == 0
    traced = {c["mode"]: "trace" in c["kernels"] for c in json.loads((out / "results.json").read_text())["cases"]}
    assert traced == {"fwd": False, "bwd": True} and len(list((out / "traces").iterdir())) == 1


def test_profile_trace_as_a_new_run_and_on_a_recorded_one(tmp_path, capsys):
    cfg = cpu_config(tmp_path, "{enabled: false}")
    cfg.write_text(cfg.read_text() + f"output_dir: {tmp_path / 'runs'}\n")
    assert main(["profile", str(cfg), "--only", "fwd/", "--trace"]) == 0
    (new,) = (tmp_path / "runs").iterdir()
    cases = json.loads((new / "results.json").read_text())["cases"]
    assert [c["mode"] for c in cases] == ["fwd"]  # the selected cases only
    check_perfetto_json(new / cases[0]["kernels"]["trace"], calls=3)  # the config's breakdown.calls (default)
    run = tmp_path / "run"  # a run recorded without breakdowns: --run adds them, with their traces
    assert main(["run", str(cfg), "--out", str(run), "--no-progress"]) == 0
    assert main(["profile", str(cfg), "--only", "bwd/", "--trace", "--run", str(run)]) == 0
    by_mode = {c["mode"]: c for c in json.loads((run / "results.json").read_text())["cases"]}
    assert "kernels" not in by_mode["fwd"] and by_mode["bwd"]["kernels"]["error"] is None
    check_perfetto_json(run / by_mode["bwd"]["kernels"]["trace"], calls=3)
    capsys.readouterr()
    assert main(["profile", str(cfg), "--only", "bwd/", "--band-edges", "8", "--trace"]) == 2
    assert "--band-edges: only with --bands" in capsys.readouterr().err


def test_the_committed_h200_trace_opens_as_perfetto_json(tmp_path):
    """Issue 31's trace from the H200 (docs/example-h200-production: the log-normal 2048 `gdpa` forward,
    kept gzipped, which Perfetto also opens): the JSON importer's format, its case's profiled call ranges,
    and every one of its GPU kernels placed in a range (by its launch) or counted as unattributed."""
    import gzip

    run = ROOT / "docs" / "example-h200-production"
    cases = [c for c in read_results(run)["cases"] if (c.get("kernels") or {}).get("trace")]
    assert cases, "the committed production run lost its trace"
    for c in cases:
        plain = tmp_path / Path(c["kernels"]["trace"]).name
        plain.write_bytes(gzip.decompress((run / (c["kernels"]["trace"] + ".gz")).read_bytes()))
        check_perfetto_json(plain, calls=c["kernels"]["profiled_calls"])
        found = te.attribute(json.loads(plain.read_text()))
        assert found.calls and found.by_rule[te.BY_LAUNCH] > 0 and found.pass_ranges == c["kernels"]["pass_calls"]
