"""`run --resume RUN_DIR --retry-failed`: a run's failed cases (a kernel fixed since, a hang, a lost GPU) run
again; their records move to results.json `meta.retried`, every other case stays as it was recorded
(bench.sweep.rundir.retry_failed)."""

from __future__ import annotations

import json

import pytest
import yaml

from bench.cli.parser import main
from results.files import read_results

CFG = {
    "name": "retry",
    "device": "cpu",
    "providers": ["naive_eager", "reference"],
    "modes": ["fwd"],
    "timing": {"warmup_ms": 1, "rep_ms": 2, "min_reps": 2, "max_reps": 2},
    "power": {"enabled": False},
    "hardware": {"calibrate": False},
    "sets": [
        {
            "name": "s",
            "B": 3,
            "H": 2,
            "D": 16,
            "dtype": "fp32",
            "max_len": [8, 16],
            "lengths": {"family": "uniform_fill", "fill": 0.5},
        }
    ],
}


def failed_run(tmp_path, capsys):
    """A finished run whose first case is then marked failed (what a faulting kernel leaves)."""
    cfg, out = tmp_path / "cfg.yaml", tmp_path / "run"
    cfg.write_text(yaml.safe_dump(CFG))
    assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--no-report"]) == 0
    data = json.loads((out / "results.json").read_text())
    bad = data["cases"][0]
    bad.update(status="failed", error="CompilationError: at 27:4 (the kernel before its fix)", median_ms=None)
    (out / "results.json").write_text(json.dumps(data))
    capsys.readouterr()
    return cfg, out, bad["id"], {c["id"]: c for c in data["cases"][1:]}


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_resumed_run_runs_its_failed_cases_again_and_keeps_their_old_records(tmp_path, capsys, isolation):
    cfg, out, bad, kept = failed_run(tmp_path, capsys)
    args = ["run", str(cfg), "--resume", str(out), "--no-progress", "--no-report", "--isolation", isolation]
    assert main(args) == 0  # without --retry-failed: nothing to run
    assert [c["status"] for c in read_results(out)["cases"]].count("failed") == 1
    assert main([*args, "--retry-failed"]) == 0
    said = capsys.readouterr().out
    assert f"--retry-failed: 1 failed case(s) of {out} to run again" in said
    data = read_results(out)
    cases = {c["id"]: c for c in data["cases"]}
    assert cases[bad]["status"] == "ok" and cases[bad]["median_ms"] > 0
    assert all(cases[i] == c for i, c in kept.items())  # the others exactly as recorded
    (old,) = data["meta"]["retried"]
    assert old["id"] == bad and old["status"] == "failed" and old["error"].startswith("CompilationError")
    assert old["retried_at"]
    assert main([*args, "--retry-failed"]) == 0  # nothing failed now: nothing moves
    assert len(read_results(out)["meta"]["retried"]) == 1


@pytest.mark.parametrize("isolation", ["none", "process"])
def test_a_retry_limited_by_only_keeps_the_failed_cases_it_does_not_run(tmp_path, capsys, isolation):
    cfg, out = tmp_path / "cfg.yaml", tmp_path / "run"
    cfg.write_text(yaml.safe_dump(CFG))
    assert main(["run", str(cfg), "--out", str(out), "--no-progress", "--no-report"]) == 0
    data = json.loads((out / "results.json").read_text())
    for case in data["cases"]:
        case.update(status="failed", error="a hang", median_ms=None)
    (out / "results.json").write_text(json.dumps(data))
    ids = [c["id"] for c in data["cases"]]
    (chosen,) = [i for i in ids if i.endswith("L=16/naive_eager")]
    args = ["run", str(cfg), "--resume", str(out), "--no-progress", "--no-report", "--isolation", isolation]
    capsys.readouterr()
    assert main([*args, "--retry-failed", "--only", "L=16/naive_eager"]) == 0
    assert f"--retry-failed: 1 failed case(s) of {out} to run again" in capsys.readouterr().out
    data = read_results(out)
    status = {c["id"]: c["status"] for c in data["cases"]}
    assert sorted(status) == sorted(ids)  # no case left the run's results
    assert status.pop(chosen) == "ok" and set(status.values()) == {"failed"}
    assert [c["id"] for c in data["meta"]["retried"]] == [chosen]


@pytest.mark.parametrize(
    "extra, line",
    [
        ([], "--retry-failed: only with --resume RUN_DIR"),
        (["--gpus", "0,1"], "--retry-failed: only with --resume RUN_DIR"),
    ],
)
def test_retry_failed_needs_a_run_to_resume(tmp_path, capsys, extra, line):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(CFG))
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--retry-failed", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err


def test_retry_failed_is_not_for_a_sharded_run(tmp_path, capsys):
    cfg, out, _, _ = failed_run(tmp_path, capsys)
    assert main(["run", str(cfg), "--resume", str(out), "--retry-failed", "--gpus", "0,1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--retry-failed: not with --gpus" in err[0], err
    assert [c["status"] for c in read_results(out)["cases"]].count("failed") == 1  # nothing moved


def test_a_refused_retry_changes_nothing(tmp_path, capsys, monkeypatch):
    """Every check runs before the failed records move: a run refused (here: no memory for its cases) keeps
    results.json as it was."""
    from bench.config import resources

    cfg, out, _, _ = failed_run(tmp_path, capsys)
    before = (out / "results.json").read_text()
    monkeypatch.setattr(resources, "free_bytes", lambda device: 1)
    args = ["run", str(cfg), "--resume", str(out), "--no-progress", "--no-report", "--isolation", "none"]
    assert main([*args, "--retry-failed"]) == 2
    assert (out / "results.json").read_text() == before


def test_the_python_api_retries_failed_cases(tmp_path, capsys):
    import bench

    cfg, out, bad, _ = failed_run(tmp_path, capsys)
    with pytest.raises(ValueError, match=r"^retry_failed=True: only with resume="):
        bench.run(cfg, out=tmp_path / "other", retry_failed=True)
    with pytest.raises(ValueError, match=r"^retry_failed='yes'"):
        bench.run(cfg, resume=out, retry_failed="yes")
    df = bench.run(cfg, resume=out, retry_failed=True)
    assert (df["status"] == "ok").all() and bad in set(df["id"])
    assert [c["id"] for c in read_results(out)["meta"]["retried"]] == [bad]
