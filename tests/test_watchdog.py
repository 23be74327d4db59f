"""A kernel that hangs does not hang the sweep (issue 32, bench.case.watchdog), on CPU: the worker reports each
case's phases to its parent, the parent kills a worker whose case runs past `timing.case_timeout_s`
(`--case-timeout`), a fresh worker records the case `failed` with `hung: ...` and the phase, and the rest
runs; in one process the option is refused."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_faults import config, env

from bench.case.watchdog import PHASES, PhaseReporter, Watch, parse_hung
from bench.cli.parser import main
from bench.config.models import load_config
from bench.errors import EXIT_BAD_INPUT
from bench.sweep.runner import Runner
from results.files import read_results

HANG = """
name: hang
device: cpu
providers:
  - naive_eager
  - {{name: test_sim_hang, options: {{hang_at: 6, hang_in: {hang_in}}}}}
modes: [fwd]
timing: {{warmup_ms: 1, rep_ms: 2, min_reps: 2, max_reps: 2}}
power: {{enabled: false}}
hardware: {{calibrate: false}}
sets:
  - name: s
    B: 2
    H: 2
    D: 16
    dtype: fp32
    activation: silu
    max_len: [6, 9]
    lengths: {{family: uniform_fill, fill: [1.0]}}
"""


@pytest.fixture
def providers(monkeypatch):
    for name, value in env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(os.path.dirname(__file__))
    import fault_providers  # noqa: F401  (registers test_sim_hang in this process too)


def hang_config(tmp_path, hang_in="gate"):
    p = tmp_path / "hang.yaml"
    p.write_text(textwrap.dedent(HANG.format(hang_in=hang_in)))
    return p


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# ------------------------------------------------------------------------------------------- the parts


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_the_watch_knows_the_case_in_flight_and_its_deadline():
    r, w = os.pipe()
    clock = Clock()
    watch = Watch(r, 10, clock=clock)
    report = PhaseReporter(w)
    report("a", "batch")
    report("a", "gate")
    os.write(w, b"not json\n")  # a torn line is skipped
    deadline = time.monotonic() + 10
    while watch.phase != "gate":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    clock.t += 4
    watch.report("a", "samples")
    clock.t += 6.5
    over = watch.overdue()
    assert over["id"] == "a" and over["wall_s"] == 10.5
    assert over["error"] == (
        "hung: no progress for 10 s (the case deadline, timing.case_timeout_s: 10 s), in phase samples for the "
        "last 6 s; its worker process was killed"
    )
    watch.report("a", "recorded")
    assert watch.overdue() is None  # between cases nothing runs past a deadline
    watch.report("b", "setup")
    clock.t += 9
    assert watch.overdue() is None  # a new case, a new deadline
    os.close(w)
    watch.thread.join(timeout=10)
    assert not watch.thread.is_alive()  # the worker's exit is the reader's end of file


def test_the_watch_bounds_a_workers_start_before_its_first_case():
    """Silent since it started past `startup_s`: overdue with no case (`id` None); once it reported anything, the
    start is over and only cases have deadlines (ncu's pass after the sweep runs between cases, unbounded here)."""
    r, w = os.pipe()
    clock = Clock()
    watch = Watch(r, 10, clock=clock, startup_s=30)
    clock.t += 29
    assert watch.overdue() is None
    clock.t += 2
    over = watch.overdue()
    assert over["id"] is None and over["wall_s"] == 31 and "reached no case in 31 s" in over["error"]
    watch.report("", "started")  # the runner, once its monitor and calibration are up: no case in flight
    assert watch.case is None
    clock.t += 10_000
    assert watch.overdue() is None
    os.close(w)
    for deadline, startup in ((10, 900), (1200, 1200)):  # the default bound, never below the case deadline
        r2, w2 = os.pipe()
        assert Watch(r2, deadline).startup_s == startup
        os.close(w2)


def test_a_worker_that_never_reaches_a_case_stops_the_run(tmp_path, monkeypatch):
    """A worker stuck before its first case (a driver that hangs its first CUDA call) is killed and the run
    stops with why (a fresh worker would wait the same way), where it used to wait forever."""
    from bench.case import watchdog
    from bench.shard.worker import WorkerProcess

    monkeypatch.setattr(watchdog, "STARTUP_S", 1.0)
    stuck = [sys.executable, "-c", "import time; time.sleep(300)"]
    worker = WorkerProcess(stuck, tmp_path, dict(os.environ), case_timeout_s=0.5)
    seen, t0 = [], time.monotonic()
    worker.wait(on_hang=seen.append)
    assert time.monotonic() - t0 < 60
    assert [o["id"] for o in seen] == [None]
    assert worker.advance() is None and "reached no case in" in worker.stalled
    assert worker.proc.poll() is not None


def test_a_reporter_whose_parent_has_gone_goes_quiet():
    r, w = os.pipe()
    os.close(r)
    report = PhaseReporter(w)
    report("a", "gate")  # EPIPE: no exception reaches the case
    assert report.fd is None
    PhaseReporter()("a", "gate")  # in one process: nothing to report to


def test_a_hung_case_record_is_internal():
    assert parse_hung('{"id": "x", "error": "hung: ...", "wall_s": 3}') == {
        "id": "x",
        "error": "hung: ...",
        "wall_s": 3.0,
    }
    with pytest.raises(ValueError, match="--hung-case: not a hung-case record of the parent"):
        parse_hung("{}")


def test_the_runner_reports_every_phase_of_a_case_in_order(tmp_path):
    cfg = load_config(
        {
            "device": "cpu",
            "providers": ["naive_eager"],
            "modes": ["fwd"],
            "timing": {"warmup_ms": 1, "rep_ms": 2, "min_reps": 2, "max_reps": 2},
            "power": {"enabled": False},
            "hardware": {"calibrate": False},
            "breakdown": {"enabled": True, "calls": 1},
            "sets": [{"name": "s", "B": 2, "H": 2, "D": 16, "dtype": "fp32", "max_len": [6, 9]}],
        }
    )
    seen = []
    import torch

    Runner(cfg, tmp_path / "run", torch.device("cpu"), progress=False, phase=lambda c, p: seen.append((c, p))).run(
        cfg.cases
    )
    assert seen[0] == ("", "started")  # the start is over (monitor, calibration): the watchdog's startup bound
    first = [p for c, p in seen if c == cfg.cases[0].id]
    timed = ["batch", "setup", "gate", "compile", "power", "samples", "power", "views", "recorded"]
    assert first == [*timed, "batch", "views", "recorded"]  # then its breakdown, after every case was timed
    assert set(p for _, p in seen[1:]) <= set(PHASES)
    ids = [c.id for c in cfg.cases]
    assert [c for c, p in seen if p == "recorded"] == ids + ids  # the timed phase, then the profiled one


# ------------------------------------------------------------------------------------------ a real hang


def test_a_case_that_hangs_is_killed_recorded_and_the_sweep_goes_on(tmp_path, providers, capfd):
    run = tmp_path / "run"
    t0 = time.monotonic()
    argv = ["run", str(hang_config(tmp_path)), "--out", str(run), "--no-progress", "--no-report", "--case-timeout", "2"]
    rc = main(argv)
    out = capfd.readouterr().out
    assert rc == 0, out[-3000:]
    cases = {c["id"]: c for c in read_results(run)["cases"]}
    assert len(cases) == 4, list(cases)  # every case once, the hung one among them
    hung = cases.pop("s/fwd/L=6/fill=1.0/test_sim_hang")
    assert hung["status"] == "failed" and hung["times_ms"] == [] and 2 <= hung["wall_s"] < 30
    assert hung["error"].startswith("hung: no progress for 2 s (the case deadline, timing.case_timeout_s: 2 s), ")
    assert "in phase gate for the last" in hung["error"] and "\n" not in hung["error"]
    assert all(c["status"] == "ok" for c in cases.values()), cases
    assert out.count("a fresh worker process (pid") == 1 and "(after the hung case)" in out
    assert f"s/fwd/L=6/fill=1.0/test_sim_hang: {hung['error']}" in out  # the parent says it at once
    assert read_results(run)["meta"]["interrupted"] is False
    assert time.monotonic() - t0 < 120


@pytest.mark.parametrize("how,expected", [("abort", "killed by SIGABRT"), ("segv", "killed by SIGSEGV"),
                                          ("exit", "exit status 7")])  # fmt: skip
def test_a_case_that_ends_its_process_is_recorded_failed_and_the_sweep_goes_on(
    tmp_path, providers, capfd, how, expected
):
    """A segfault, an abort or a library's exit ends the worker under a case: the parent knows which case was in
    flight (its phase reports), a fresh worker records it failed and runs the rest (it used to end the run; a
    SIGKILL from outside still does: test_multigpu's killed worker, for --resume)."""
    cfg = tmp_path / "crash.yaml"
    cfg.write_text(hang_config(tmp_path).read_text().replace(
        "{name: test_sim_hang, options: {hang_at: 6, hang_in: gate}}",
        f"{{name: test_sim_crash, options: {{crash_at: 6, how: {how}}}}}",
    ))  # fmt: skip
    run = tmp_path / "run"
    rc = main(["run", str(cfg), "--out", str(run), "--no-progress", "--no-report", "--isolation", "process"])
    out = capfd.readouterr().out
    assert rc == 0, out[-3000:]
    cases = {c["id"]: c for c in read_results(run)["cases"]}
    assert len(cases) == 4, list(cases)
    crashed = cases.pop("s/fwd/L=6/fill=1.0/test_sim_crash")
    assert (
        crashed["status"] == "failed" and f"the worker process ended under this case ({expected})" in crashed["error"]
    )
    assert "in phase gate" in crashed["error"] and "\n" not in crashed["error"]
    assert all(c["status"] == "ok" for c in cases.values()), cases
    assert "(after the case its process ended under)" in out


PARENT = """
import os, subprocess, sys, time
env = dict(os.environ, GDPA_BENCH_PARENT_PID=str(os.getpid()))
code = "import time; from bench.shard.worker import die_with_parent as d; d(); print(1, flush=True); time.sleep(60)"
child = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True, stdout=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie is dead, whoever reaps it


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_worker_dies_with_its_parent(tmp_path):
    """kill -9 of the parent (or a dropped terminal's SIGHUP) used to leave its worker running unwatched, holding
    the run folder's lock against --resume; the worker now goes with it."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env)
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_a_stop_signal_sent_to_the_worker_alone_ends_the_run_as_interrupted(tmp_path, providers, capfd):
    """SIGTERM to the worker only (a scheduler's, an operator's): its finished cases kept, the case in flight left
    for --resume (not recorded failed: not the kernel's doing), and the command exits 143 as if it got it."""
    cfg = tmp_path / "term.yaml"
    cfg.write_text(hang_config(tmp_path).read_text().replace(
        "{name: test_sim_hang, options: {hang_at: 6, hang_in: gate}}",
        "{name: test_sim_crash, options: {crash_at: 6, how: term}}"))  # fmt: skip
    run = tmp_path / "run"
    rc = main(["run", str(cfg), "--out", str(run), "--no-progress", "--no-report", "--isolation", "process"])
    out = capfd.readouterr()
    assert rc == 143, out.out[-2000:] + out.err[-2000:]
    ids = [c["id"] for c in read_results(run)["cases"]]
    assert "s/fwd/L=6/fill=1.0/test_sim_crash" not in ids and len(ids) == 1


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_thread_a_provider_leaves_running_does_not_keep_the_run_alive(tmp_path, isolation):
    """CPython joins non-daemon threads before any exit handler: a provider's pool thread kept a finished run
    (and, in process isolation, its worker) from ever exiting. Now it waits a grace period, says so, ends."""
    from test_faults import bench

    cfg = tmp_path / "stray.yaml"
    cfg.write_text(hang_config(tmp_path).read_text().replace(
        "{name: test_sim_hang, options: {hang_at: 6, hang_in: gate}}", "test_sim_stray_thread"))  # fmt: skip
    t0 = time.monotonic()
    proc = bench("run", cfg, "--out", tmp_path / "run", "--no-progress", "--no-report", "--isolation", isolation,
                 timeout=150)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "threads still running after the command ended (stray-pool)" in proc.stderr
    assert len(read_results(tmp_path / "run")["cases"]) == 4 and time.monotonic() - t0 < 120


def test_a_ctrl_c_a_kernel_swallows_still_stops_the_sweep_after_that_case(tmp_path, providers, capsys):
    """The signal handler raises once; a library that catches everything swallowed it, and the sweep ran to
    its end. The runner now stops at the next case boundary: the case recorded, the rest left for --resume."""
    cfg = tmp_path / "swallow.yaml"
    cfg.write_text(hang_config(tmp_path).read_text().replace(
        "{name: test_sim_hang, options: {hang_at: 6, hang_in: gate}}",
        "{name: test_sim_swallow, options: {swallow_at: 6}}"))  # fmt: skip
    run = tmp_path / "run"
    rc = main(["run", str(cfg), "--out", str(run), "--no-progress", "--no-report", "--isolation", "none"])
    assert rc == 130
    ids = [c["id"] for c in read_results(run)["cases"]]
    assert "s/fwd/L=6/fill=1.0/test_sim_swallow" in ids and len(ids) < 4, ids


def test_the_option_needs_process_isolation_and_a_sane_value(tmp_path, providers, capsys):
    cfg = hang_config(tmp_path)
    for extra, expected in (
        (["--isolation", "none"], "--case-timeout: needs process isolation"),
        ([], None),
    ):
        for value in ("0", "-1", "nan", "٣"):
            argv = ["run", str(cfg), "--out", str(tmp_path / "x"), "--case-timeout", value, *extra]
            assert main(argv) == EXIT_BAD_INPUT
            assert "--case-timeout" in one_error_line(capsys)
        if expected:
            argv = ["run", str(cfg), "--out", str(tmp_path / "x"), "--case-timeout", "5", *extra]
            assert main(argv) == EXIT_BAD_INPUT
            assert one_error_line(capsys).startswith(f"error: {expected}")
    assert not (tmp_path / "x").exists()
    for flag, value in (("--status-fd", "5"), ("--hung-case", "{}")):
        assert main(["run", str(cfg), "--out", str(tmp_path / "y"), flag, value]) == EXIT_BAD_INPUT
        assert f"{flag}: internal to a worker process" in one_error_line(capsys)


def test_the_default_deadline_leaves_one_process_runs_alone(tmp_path, providers, capsys):
    """`timing.case_timeout_s` has a default; `--isolation none` and bench.run are not refused for it."""
    cfg = config(tmp_path)
    argv = [
        "run",
        str(cfg),
        "--out",
        str(tmp_path / "a"),
        "--no-report",
        "--isolation",
        "none",
        "--providers",
        "naive_eager",
    ]
    assert main(argv) == 0
    import bench

    assert set(bench.run(str(cfg), out=str(tmp_path / "b"), providers="naive_eager").status) == {"ok"}
    assert load_config(cfg).model.timing.case_timeout_s == 600
