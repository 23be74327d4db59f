"""A sweep in a worker process (bench.shard.worker) under issue 25's guards and with issue 26's views, on CPU:
one writer per run folder (the parent holds the lock, each worker inherits it: bench.sweep.runlock), the memory
check where the device is (the worker), and the profiling views in the worker; a fault inside a view is
the case's (bench.case.faults)."""

import os
import subprocess
import sys
import time

import pytest
import test_faults
import yaml
from test_faults import ROOT, check_contained, config, env

from bench.cli.parser import main
from bench.errors import EXIT_BAD_INPUT, EXIT_CONTEXT_LOST, UsageError
from bench.sweep.runlock import LOCK_FILE, inherited_lock, run_folder_lock
from results.files import read_results

fault_providers = test_faults.fault_providers  # the fixture: the test providers here and in the workers


def bench_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "bench", *map(str, args)]


# ------------------------------------------------------------------------------- the inherited lock


def test_a_worker_holds_the_lock_its_parent_passes_down(tmp_path):
    run = tmp_path / "run"
    with run_folder_lock(run, "--out") as fd:
        with inherited_lock(run, os.dup(fd), "--out"):  # the same open file: the same lock, not a refusal
            with pytest.raises(UsageError, match="another gdpa-bench is writing this run folder"):
                with run_folder_lock(run, "--resume"):
                    pass
        # an open of the lock file that is not the holder's is refused, as a second writer is
        other = os.open(run / LOCK_FILE, os.O_RDWR)
        with pytest.raises(UsageError, match=r"--lock-fd \d+: another gdpa-bench is writing this run folder \(pid "):
            with inherited_lock(run, other, "--out"):
                pass
        os.close(other)
        stranger = os.open(tmp_path / "elsewhere", os.O_RDWR | os.O_CREAT)
        with pytest.raises(UsageError, match="not this folder's lock file"):
            with inherited_lock(run, stranger, "--out"):
                pass
        os.close(stranger)
    with pytest.raises(UsageError, match="not this folder's open lock file"):
        with inherited_lock(run, 987, "--out"):  # no such descriptor
            pass


def test_lock_fd_is_internal_to_a_worker(tmp_path, fault_providers, capsys):
    cfg = config(tmp_path)
    assert main(["run", str(cfg), "--out", str(tmp_path / "a"), "--lock-fd", "5"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--lock-fd: internal to a worker process" in err[0], err
    # a worker whose descriptor is not the folder's lock writes nothing
    out = tmp_path / "b"
    assert main(["run", str(cfg), "--out", str(out), "--worker", "--lock-fd", "987", "--providers", "naive_eager"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--lock-fd 987: not this folder's open lock file" in err[0], err
    assert not (out / "results.json").exists()


def test_no_other_writer_takes_the_folder_while_workers_come_and_go(tmp_path, fault_providers):
    """The parent holds the folder from before its first worker until after its last, across the fresh
    workers after each fault: every attempt of another writer meanwhile is refused, naming the parent."""
    cfg, run = config(tmp_path, sleep_s=0.05), tmp_path / "run"
    log = tmp_path / "parent.log"
    cmd = bench_cmd("run", cfg, "--out", run, "--no-progress", "--no-report", "--isolation", "process")
    attempts, refused_naming_parent = 0, 0
    with open(log, "w") as out:
        parent = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 300
            while not (run / "results.json").exists():  # from here on the parent holds the lock
                assert parent.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            while parent.poll() is None:
                assert time.monotonic() < deadline, log.read_text()
                try:
                    with run_folder_lock(run, "--resume"):  # only once the run is over: its last line printed
                        assert "\ndone: " in log.read_text(), "another writer took the folder during the run"
                        break
                except UsageError as exc:
                    attempts += 1
                    refused_naming_parent += f"(pid {parent.pid} on " in str(exc)
                time.sleep(0.02)
            rc = parent.wait(timeout=60)
        finally:
            if parent.poll() is None:
                parent.kill()
    text = log.read_text()
    assert rc == 0, text[-3000:]
    assert text.count("a fresh worker process (pid") == 2, text[-3000:]  # both restart windows were crossed
    assert attempts >= 10 and refused_naming_parent == attempts, (attempts, refused_naming_parent)
    check_contained(run, 12)
    with run_folder_lock(run, "--resume"):  # free once the parent has ended
        pass


def test_a_second_run_of_a_worker_run_s_folder_is_refused(tmp_path, fault_providers, capsys):
    cfg, run = config(tmp_path, max_lens="9", sleep_s=0.3), tmp_path / "run"
    cmd = bench_cmd("run", cfg, "--out", run, "--no-progress", "--no-report", "--isolation", "process")
    parent = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (run / "results.json").exists() or not read_results(run)["cases"]:
            assert parent.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        for iso in ("process", "none"):
            argv = ["run", str(cfg), "--resume", str(run), "--no-progress", "--no-report", "--isolation", iso]
            assert main(argv) == EXIT_BAD_INPUT
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and f"another gdpa-bench is writing this run folder (pid {parent.pid} on " in err[0]
        assert parent.wait(timeout=300) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
    assert [c["status"] for c in read_results(run)["cases"]] == ["ok", "ok", "ok", "ok", "ok", "ok"]


# ------------------------------------------------------------------------------- the memory check


def test_the_worker_checks_the_memory_and_refuses_a_run_where_nothing_fits(tmp_path, fault_providers):
    """The parent opens no CUDA context, so the memory estimate is the worker's: one line, exit 2."""
    cfg = yaml.safe_load(config(tmp_path).read_text())
    cfg["sets"][0].update(H=100_000, D=100_000)
    path, run = tmp_path / "huge.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run(
        bench_cmd("run", path, "--out", run, "--no-progress", "--isolation", "process"),
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == EXIT_BAD_INPUT, proc.stdout + proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no selected case fits in memory"), err
    assert "Traceback" not in proc.stdout + proc.stderr
    assert sorted(p.name for p in run.iterdir()) == [LOCK_FILE]  # no case, no results: a rerun may use it


# ------------------------------------------------------------------------------- the profiling views


VIEWS = {"breakdown": {"enabled": True, "calls": 1}, "bands": {"only": "/L=6/fill=1.0/test_sim_ok$"}}


def test_the_profiling_views_run_in_the_workers_once_per_case(tmp_path, fault_providers, capfd):
    """Issue 26's views run in the worker with their case; a fresh worker after a fault resumes, so each
    case is recorded once with its views, and Nsight Compute after the sweep sees every selected case,
    those of the workers before included."""
    cfg = yaml.safe_load(config(tmp_path).read_text())
    cfg.update(VIEWS, counters={"only": "/test_sim_ok$"})
    path, run = tmp_path / "views.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump(cfg))
    rc = main(["run", str(path), "--out", str(run), "--no-progress", "--no-report", "--isolation", "process"])
    out = capfd.readouterr().out
    assert rc == 0, out[-3000:]
    assert out.count("a fresh worker process (pid") == 2
    cases = {c["id"]: c for c in check_contained(run, 12)}
    for cid, c in cases.items():
        if c["status"] == "ok":
            assert c["kernels"]["error"] is None and c["kernels"]["rows"], (cid, c["kernels"])
        sim_ok = cid.endswith("/test_sim_ok")
        assert (c.get("bands") is not None) == (sim_ok and "/L=6/" in cid), cid
        if sim_ok:
            assert c["counters"]["status"] == "skipped" and "needs a CUDA GPU" in c["counters"]["reason"], c
    for c in cases.values():
        if c.get("bands") is not None:
            assert c["bands"]["error"] is None and {r["status"] for r in c["bands"]["rows"]} <= {"ok", "empty"}, c
            assert any(r["status"] == "ok" for r in c["bands"]["rows"]), c["bands"]


@pytest.mark.parametrize("view", ["breakdown", "bands"])
def test_a_fault_inside_a_view_is_the_case_s(tmp_path, fault_providers, monkeypatch, capsys, view):
    """A sticky CUDA error in the kernel breakdown or a length band: the case is `failed` with it and the
    sweep stops (a view's other failures only lose the view)."""
    import bench.profiling.bands
    import bench.profiling.views

    def fault(*a, **k):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    if view == "breakdown":
        monkeypatch.setattr(bench.profiling.views, "kernel_breakdown", fault)
    else:
        monkeypatch.setattr(bench.profiling.bands, "make_batch", fault)
    cfg = yaml.safe_load(config(tmp_path).read_text())
    cfg.update(VIEWS)
    path, run = tmp_path / "views.yaml", tmp_path / "run"
    path.write_text(yaml.safe_dump(cfg))
    rc = main(["run", str(path), "--out", str(run), "--no-progress", "--no-report", "--providers", "test_sim_ok"])
    assert rc == EXIT_CONTEXT_LOST, capsys.readouterr().out
    cases = read_results(run)["cases"]
    assert len(cases) == 1 and cases[0]["status"] == "failed", cases
    assert "an illegal memory access" in cases[0]["error"]


# ------------------------------------------------------------------------------- the Python API


def test_the_python_api_reports_a_fault_and_resumes_past_it(tmp_path, fault_providers):
    """`bench.run` runs in the calling process (`--isolation none`): a fault ends it with
    `df.attrs["context_lost"]`; `resume=` from a fresh process (here: the stand-in context cleaned)
    continues to the next fault, keeping what was recorded."""
    import bench

    cfg, run = config(tmp_path), tmp_path / "run"
    df = bench.run(str(cfg), out=str(run))
    assert list(df.status) == ["ok", "ok", "failed"] and df.attrs["interrupted"] is False
    assert df.attrs["context_lost"].startswith("RuntimeError: CUDA error: an illegal memory access")
    fault_providers.reset()  # a fresh process
    df = bench.run(str(cfg), resume=str(run))
    assert len(df) == 6 and list(df.status) == ["ok", "ok", "failed", "ok", "ok", "failed"]  # one workload: fwd, bwd
    assert df.attrs["context_lost"] is not None and df.iloc[-1]["id"] == "s/bwd/L=6/fill=1.0/test_sim_fault"
    clean = bench.run(str(cfg), out=str(tmp_path / "clean"), providers="naive_eager")
    assert clean.attrs["context_lost"] is None and set(clean.status) == {"ok"}
