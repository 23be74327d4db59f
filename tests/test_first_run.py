"""A newcomer's first run on a CPU reads right (issue 25): the report opens with what its numbers mean,
shows no speed ratio between an interpreted kernel and eager PyTorch, names each workload's family and
parameters; `compare` of such runs says why nothing is gated; a report that fails is not exit 0; a
resumed run counts every case; the provenance is the package's own repository or nothing."""

from __future__ import annotations

import copy
import errno
import json
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

import bench
from bench.cli.parser import main
from bench.config.models import load_config
from bench.sweep import env

ROOT = Path(__file__).resolve().parents[1]
CFG = {
    "name": "first",
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
            "kv": {"rule": "fixed_kv", "kv_len": 12},
        }
    ],
}


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("first") / "run"
    cfg = out.parent / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(CFG))
    assert main(["run", str(cfg), "--out", str(out), "--no-progress"]) == 0
    return out


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_cpu_report_opens_with_what_its_numbers_mean(cpu_run):
    md = (cpu_run / "report.md").read_text()
    overview = _section(md, "Overview").strip()
    assert overview.startswith("> **Note — CPU run: "), overview[:200]
    assert "say nothing about kernel speed" in overview and "2 sample(s) per case" in overview
    summary = _section(md, "Summary per shape")
    header = next(line for line in summary.splitlines() if line.startswith("| set |"))
    # issue 32: no ranking on a CPU — every provider's rate side by side, none called "best GDPA"
    assert " vs " not in header and "no speedup is shown" in summary and "best" not in header
    assert header == "| set | mode | L | sweep | dtype | naive_eager | reference |", header
    row = next(line for line in summary.splitlines() if line.startswith("| s | fwd | 8 |"))
    assert row.count("FLOP/s |") == 2, row  # each rate with its unit, not `4.07e-07`
    assert 'class="banner"' in (cpu_run / "report.html").read_text()
    assert not (cpu_run / "plots" / "speedup.png").exists()  # no empty frame: no ratio is drawn on a CPU
    assert "speedup — CPU run: speedups are not drawn" in _section(md, "Plots")


def test_the_report_names_each_workloads_family_and_parameters(cpu_run):
    table = _section((cpu_run / "report.md").read_text(), "Workload statistics")
    assert "| workload | length family | its parameters | Q/KV pairing | its parameters |" in table
    assert "| s/L=8 | uniform_fill | fill=0.5 | fixed_kv | kv_len=12 |" in table


def test_a_gpu_run_keeps_its_ratios_and_has_no_banner(cpu_run, tmp_path):
    data = json.loads((cpu_run / "results.json").read_text())
    data["meta"].update(gpu="NVIDIA H200", device="cuda")
    run = tmp_path / "gpu"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(data))
    assert main(["report", str(run)]) == 0
    md = (run / "report.md").read_text()
    assert "Note — CPU run" not in md and "reference vs naive_eager" in md


def test_compare_of_cpu_runs_says_why_nothing_is_gated(cpu_run, capsys):
    capsys.readouterr()
    assert main(["compare", str(cpu_run), str(cpu_run)]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert len(notes) == 2, out[-2000:]
    assert "no case has 5 samples (--min-samples) in both runs" in notes[0]
    assert "CPU runs" in notes[1] and out.rstrip().splitlines()[-1].startswith("OK:")


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        (RuntimeError("a plot bug"), 1, "report rendering failed: RuntimeError: a plot bug"),
        (OSError(errno.ENOSPC, "No space left on device"), 2, "cannot write (No space left on device, ENOSPC)"),
    ],
)
def test_a_report_that_fails_is_not_exit_0(cpu_run, tmp_path, monkeypatch, capsys, raised, code, line):
    import reports.render

    def fail(*a, **k):
        raise raised

    monkeypatch.setattr(reports.render, "render_report", fail)
    run = tmp_path / "copy"
    shutil.copytree(cpu_run, run)
    capsys.readouterr()
    assert main(["report", str(run)]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and line in err[0], err
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(CFG))
    assert main(["run", str(cfg), "--out", str(tmp_path / "r"), "--no-progress", "--only", "L=8/naive"]) == code
    assert json.loads((tmp_path / "r" / "results.json").read_text())["cases"]  # the results are kept


def test_a_resumed_run_counts_every_recorded_case(tmp_path, capsys):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(CFG))
    out = tmp_path / "run"
    args = ["run", str(cfg), "--no-progress", "--no-report"]
    assert main([*args, "--out", str(out), "--only", "L=8/"]) == 0
    capsys.readouterr()
    assert main([*args, "--resume", str(out)]) == 0
    done = capsys.readouterr().out.strip().splitlines()[-1]
    assert done.startswith("done: 4 ok (2 run now, the rest recorded before). results: "), done


def test_the_python_api_resumes_a_run(tmp_path):
    out = tmp_path / "nb"
    first = bench.run(CFG, only="L=8/", out=out)
    assert len(first) == 2
    df = bench.run(CFG, resume=out)
    assert sorted(df["id"]) == sorted(c.id for c in load_config(CFG).cases) and df.attrs["run_dir"] == str(out)
    assert (df["status"] == "ok").all()


def test_the_smoke_config_is_jagged():
    """Every smoke workload whose family can draw uneven lengths does (the lognormal set once drew 33 × 3)."""
    seen = {}
    for c in load_config(ROOT / "configs" / "smoke.yaml").cases:
        seen[c.workload.name] = c.workload
    uneven = [w for w in seen.values() if w.family_params.get("fill", 0.5) != 1.0]
    assert uneven and all(len(set(w.lengths()[0].tolist())) >= 3 for w in uneven), [w.name for w in uneven]


def _git(cwd: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main", *args]
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def test_git_facts_come_only_from_the_packages_own_repository(tmp_path, monkeypatch):
    """An unpacked copy inside another checkout recorded that checkout's sha (seen on the H200)."""
    outer = tmp_path / "outer"
    (outer / "unpacked" / "gdpa-bench").mkdir(parents=True)
    _git(outer, "init", "-q")
    (outer / "f").write_text("x")
    _git(outer, "add", "f")
    _git(outer, "commit", "-qm", "outer")
    (outer / "f").write_text("dirty")
    monkeypatch.delenv("GDPA_GIT_SHA", raising=False)
    inner = outer / "unpacked" / "gdpa-bench"
    monkeypatch.setattr(env, "REPO", inner)
    st = env.git_state()
    assert st["git_sha"] is None and st["git_commit"] is None and st["git_branch"] is None, st
    assert st["package_version"] == version("gdpa-bench")
    _git(inner, "init", "-q")  # its own repository: recorded
    (inner / "g").write_text("y")
    _git(inner, "add", "g")
    _git(inner, "commit", "-qm", "inner")
    head = _git(inner, "rev-parse", "HEAD")
    st = env.git_state()
    assert st["git_commit"] == head and st["git_dirty"] is False and st["git_source"] == "git"
    monkeypatch.setenv("GIT_DIR", str(outer / ".git"))  # a GIT_DIR set for another repository is ignored
    assert env.git_state()["git_commit"] == head


def test_list_warns_when_a_run_would_take_days(tmp_path, capsys):
    cfg = copy.deepcopy(CFG)
    cfg["sets"][0].update(B=1000, H=16, D=128, max_len=4096, lengths={"family": "uniform_fill", "fill": 1.0}, kv={})
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["list", str(path)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: a long run: ~") and "--only" in err[0], err
    assert main(["list", str(ROOT / "configs" / "smoke.yaml")]) == 0
    assert capsys.readouterr().err == ""  # the smoke config: no warning
