"""A kernel that faults the GPU does not take the sweep down (bench.case.faults, bench.shard.worker), on CPU:
tests/fault_providers.py poisons its process the way a sticky CUDA error does."""

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bench.case.faults import is_sticky_cuda_error
from bench.cli.parser import main
from bench.errors import EXIT_CONTEXT_LOST
from bench.shard.worker import WorkerProcess, resume_in_place
from results.files import ResultsWriter, read_results

ROOT = Path(__file__).resolve().parents[1]
FAULT_AT = 6  # the sets' first max length: every case after the fault's is one a poisoned process would fail

CONFIG = """
name: faults
device: cpu
providers:
  - naive_eager
  - test_sim_ok
  - {{name: test_sim_fault, options: {{fault_at: {fault_at}, sleep_s: {sleep_s}}}}}
modes: [fwd, bwd]
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
    max_len: [{max_lens}]
    lengths: {{family: uniform_fill, fill: [1.0]}}
"""


def config(tmp_path: Path, max_lens="6, 9", sleep_s=0.0) -> Path:
    p = tmp_path / "faults.yaml"
    p.write_text(textwrap.dedent(CONFIG.format(fault_at=FAULT_AT, sleep_s=sleep_s, max_lens=max_lens)))
    return p


def env() -> dict:
    pythonpath = os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, GDPA_BENCH_PROVIDERS="fault_providers", PYTHONPATH=pythonpath, PYTHONUNBUFFERED="1")


def bench(*args, timeout=240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bench", *map(str, args)]
    return subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout)


def faulting(case_id: str) -> bool:
    return f"L={FAULT_AT}/" in case_id and case_id.endswith("/test_sim_fault")


def check_contained(run: Path, n_cases: int, faults: int = 2) -> list[dict]:
    """Every case recorded; the faulting ones `failed` with CUDA's error on one line, every other `ok`."""
    cases = read_results(run)["cases"]
    assert len(cases) == n_cases
    for c in cases:
        if faulting(c["id"]):
            assert c["status"] == "failed", c
            assert "an illegal memory access was encountered" in c["error"] and "\n" not in c["error"]
        else:
            assert c["status"] == "ok", (c["id"], c["status"], c["error"])
    assert sum(faulting(c["id"]) for c in cases) == faults  # fwd (and bwd) at the faulting length
    return cases


@pytest.fixture
def fault_providers(monkeypatch):
    """The providers registered in this process (a parent run here) and in the workers it starts."""
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    for name, value in env().items():
        monkeypatch.setenv(name, value)
    import fault_providers

    fault_providers.reset()
    yield fault_providers
    fault_providers.reset()


def test_sticky_cuda_errors_are_told_from_a_case_s_own():
    assert is_sticky_cuda_error(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert is_sticky_cuda_error(RuntimeError("Triton Error [CUDA]: unspecified launch failure"))
    assert is_sticky_cuda_error(RuntimeError("CUDA error: device-side assert triggered\nCompile with ..."))
    assert is_sticky_cuda_error(RuntimeError("CUDA error: misaligned address"))
    try:  # a provider that wraps the CUDA error in its own
        try:
            raise RuntimeError("CUDA error: an illegal instruction was encountered")
        except RuntimeError as inner:
            raise ValueError("hstu forward failed") from inner
    except ValueError as outer:
        assert is_sticky_cuda_error(outer)
    assert not is_sticky_cuda_error(RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB"))
    assert not is_sticky_cuda_error(RuntimeError("CUDA error: invalid argument"))
    assert not is_sticky_cuda_error(ValueError("kernel exploded"))


def test_in_one_process_a_fault_is_recorded_and_ends_the_sweep(tmp_path, fault_providers, capsys):
    """`--isolation none` (the CPU default): the faulting case is `failed`, nothing after it runs in the
    poisoned process, and the last line is the command that continues in a fresh one."""
    cfg, run = config(tmp_path), tmp_path / "run"
    rc = main(["run", str(cfg), "--out", str(run), "--no-progress", "--no-report", "--isolation", "none"])
    out = capsys.readouterr().out
    assert rc == EXIT_CONTEXT_LOST, out
    data = read_results(run)
    ids = [c["id"] for c in data["cases"]]
    assert ids == [
        "s/fwd/L=6/fill=1.0/naive_eager",
        "s/fwd/L=6/fill=1.0/test_sim_ok",
        "s/fwd/L=6/fill=1.0/test_sim_fault",
    ]
    assert [c["status"] for c in data["cases"]] == ["ok", "ok", "failed"]
    assert data["meta"]["interrupted"] is True
    assert "stopped by a CUDA fault (RuntimeError: CUDA error: an illegal memory access" in out
    assert out.strip().splitlines()[-1].endswith(f"--resume {run}")
    assert "== s/fwd/L=6/fill=1.0/test_sim_fault" in (run / "errors.log").read_text()


def test_a_worker_process_ends_at_a_fault_and_a_fresh_one_continues(tmp_path, fault_providers, capfd):
    """`--isolation process` (the GPU default): every case is recorded, each fault costs one worker."""
    cfg, run = config(tmp_path), tmp_path / "run"
    rc = main(["run", str(cfg), "--out", str(run), "--no-progress", "--no-report", "--isolation", "process"])
    out = capfd.readouterr().out
    assert rc == 0, out[-3000:]
    check_contained(run, 12)
    assert out.count("a fresh worker process (pid") == 2 and out.count("resuming:") == 2
    assert out.strip().splitlines()[-1] == f"done: 2 failed, 10 ok. results: {run / 'results.json'}"
    assert read_results(run)["meta"]["interrupted"] is False
    assert not fault_providers.poisoned()  # the faults happened in the workers, not here


def test_sharded_workers_are_restarted_after_a_fault(tmp_path):
    cfg, run = config(tmp_path, max_lens="6, 9, 12"), tmp_path / "run"
    proc = bench("run", cfg, "--gpus", "0,1", "--out", run, "--only", "/fwd/")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_contained(run, 9, faults=1)
    assert proc.stdout.count("a fresh worker after a CUDA fault") == 1
    assert json.loads((run / "multigpu.json").read_text())["sources"][0]["returncode"] == 0


def test_an_interrupted_worker_run_keeps_its_cases_and_resumes(tmp_path, fault_providers, capfd):
    cfg, run = config(tmp_path, max_lens="9", sleep_s=0.3), tmp_path / "run"
    cmd = [sys.executable, "-m", "bench", "run", str(cfg), "--out", str(run), "--no-progress", "--isolation", "process"]
    log = tmp_path / "parent.log"
    with open(log, "w") as out:
        parent = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while not (run / "results.json").exists() or not read_results(run)["cases"]:
                assert parent.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.1)
            parent.send_signal(signal.SIGINT)  # Ctrl-C reaches the parent; it stops its worker
            rc = parent.wait(timeout=120)
        finally:
            if parent.poll() is None:
                parent.kill()
    text = log.read_text()
    assert rc == 130, text[-3000:]
    kept = [c["id"] for c in read_results(run)["cases"]]
    assert 1 <= len(kept) < 6
    resume = text.strip().splitlines()[-1]
    assert resume.startswith("to continue: ") and resume.endswith(f"--resume {run}"), text[-2000:]
    assert main(shlex.split(resume)[5:]) == 0, capfd.readouterr().out[-3000:]  # after `to continue: python -m bench`
    cases = read_results(run)["cases"]
    assert [c["id"] for c in cases][: len(kept)] == kept and len(cases) == 6
    assert all(c["status"] == "ok" for c in cases)


FAKE_WORKER = """
import json, pathlib, sys

if "--out" in sys.argv:  # a worker that records a case, then faults
    path = pathlib.Path(sys.argv[sys.argv.index("--out") + 1]) / "results.json"
    data = json.loads(path.read_text())
    data["cases"].append({"id": f"case{len(data['cases'])}", "status": "failed"})
    path.write_text(json.dumps(data))
sys.exit(3)  # EXIT_CONTEXT_LOST; after --resume without recording anything
"""


def test_a_worker_is_restarted_only_when_it_recorded_a_case(tmp_path):
    """Each fresh worker must record a case before it may be started again: a run cannot loop."""
    out, script = tmp_path / "run", tmp_path / "fake_worker.py"
    script.write_text(FAKE_WORKER)
    ResultsWriter(out, {"config": "x"}, None)
    worker = WorkerProcess(
        [sys.executable, str(script), "--out", str(out)], out, dict(os.environ, PYTHONPATH=str(ROOT))
    )
    assert worker.proc.wait() == EXIT_CONTEXT_LOST and len(read_results(out)["cases"]) == 1
    assert worker.restart_after_fault() and worker.restarts == 1
    assert worker.cmd[-2:] == ["--resume", str(out)]  # the fresh one continues the folder
    assert worker.proc.wait() == EXIT_CONTEXT_LOST and len(read_results(out)["cases"]) == 1
    assert not worker.restart_after_fault() and worker.restarts == 1
    assert resume_in_place(["run", "c.yaml", "--out", "d", "--device", "1"]) == [
        "run",
        "c.yaml",
        "--resume",
        "d",
        "--device",
        "1",
    ]


def test_a_fault_that_surfaces_only_at_the_case_s_closing_synchronize_is_that_case_s(
    tmp_path, fault_providers, monkeypatch, capsys
):
    """CUDA reports a kernel's fault at a later call: when it is the runner's free after the case, the case
    ran "ok" but is recorded `failed` with the fault, and the sweep stops there."""
    import bench.sweep.runner

    frees = []

    def free(device):
        frees.append(device)
        if len(frees) == 2:  # the second case's
            raise RuntimeError("CUDA error: unspecified launch failure")

    monkeypatch.setattr(bench.sweep.runner, "_free", free)
    cfg, run = config(tmp_path), tmp_path / "run"
    rc = main(["run", str(cfg), "--out", str(run), "--no-progress", "--no-report", "--providers", "naive_eager"])
    assert rc == EXIT_CONTEXT_LOST, capsys.readouterr().out
    cases = read_results(run)["cases"]
    assert [c["status"] for c in cases] == ["ok", "failed"]
    assert cases[1]["error"] == "RuntimeError: CUDA error: unspecified launch failure"
