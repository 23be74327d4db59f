"""A provider's own environment (issue 33, bench.sweep.environments), on CPU: a provider entry's cases run in a
worker started with its site folders first on PYTHONPATH (here one holding a stand-in Triton build whose
version differs) or with another interpreter (a venv), everything else as for every case, and the record
says which environment and which Triton ran each case; bad environments are one line, exit 2, before the
first case."""

import os
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest
import yaml

from bench.cli.parser import main
from bench.config.models import ConfigError, load_config
from bench.errors import EXIT_BAD_INPUT, UsageError
from bench.sweep.environments import Leg, for_cases, pending, split
from results.files import read_results

ROOT = Path(__file__).resolve().parents[1]

# The installed Triton's code under the site folder's name, with a version of its own: `import triton` in a
# worker with this folder first on PYTHONPATH is a different build, as Meta's fbtriton would be.
STAND_IN = """
import os as _os, sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
_site = _os.path.dirname(_here)
_real = next(
    _os.path.join(p, "triton", "__init__.py")
    for p in _sys.path
    if p and _os.path.abspath(p) != _site and _os.path.isfile(_os.path.join(p, "triton", "__init__.py"))
)
__path__ = [_os.path.dirname(_real)]
__file__ = _real
exec(compile(open(_real).read(), _real, "exec"))
__file__ = _os.path.join(_here, "__init__.py")
__version__ = "3.99.0+standin"
"""


def stand_in_site(root: Path) -> Path:
    site = root / "site"
    (site / "triton").mkdir(parents=True)
    (site / "triton" / "__init__.py").write_text(STAND_IN)
    info = site / "standin_triton-3.99.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: standin-triton\nVersion: 3.99.0\n")
    (info / "RECORD").write_text("triton/__init__.py,,\n")
    return site


def config(tmp_path: Path, environment: dict | None, name="naive_other", also_default=True) -> Path:
    providers = (["naive_eager"] if also_default else []) + [
        {"name": "naive_eager", "label": name, "environment": environment}
    ]
    cfg = {
        "name": "envs",
        "device": "cpu",
        "providers": providers,
        "modes": ["fwd"],
        "timing": {"warmup_ms": 1, "rep_ms": 2, "min_reps": 2, "max_reps": 2},
        "power": {"enabled": False},
        "hardware": {"calibrate": False},
        "sets": [{"name": "s", "B": 2, "H": 2, "D": 16, "dtype": "fp32", "activation": "silu", "max_len": [6, 9]}],
    }
    path = tmp_path / "envs.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(cfg: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bench", "run", str(cfg), "--out", str(out), "--no-progress", "--no-report", *extra]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_provider_runs_in_its_own_site_folders_and_the_record_says_which_triton(tmp_path):
    site = stand_in_site(tmp_path)
    cfg, out = config(tmp_path, {"prepend_path": [str(site)]}), tmp_path / "run"
    proc = run(cfg, out)  # on CPU: an environment makes the worker the default
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = read_results(out)
    cases = {c["id"]: c for c in data["cases"]}
    assert len(cases) == 4 and {c["status"] for c in cases.values()} == {"ok"}
    import triton

    for cid, c in cases.items():
        e = c["environment"]
        assert e["python"] == sys.executable
        assert c["correctness"]["passed"] and c["times_ms"]  # the same gate and timer as every case
        if cid.endswith("/naive_other"):
            assert e["declared"] == {"prepend_path": [str(site)]}
            assert (e["triton"], e["triton_package"], e["triton_path"]) == (
                "3.99.0+standin",
                "standin-triton 3.99.0",
                str(site / "triton"),
            )
        else:
            assert e["declared"] is None and e["triton"] == triton.__version__
            assert Path(e["triton_path"]) == Path(triton.__file__).parent
    # the same batch (same seed) in both workers; the run's meta keeps the harness's own versions
    w = {c["workload"]["lengths_sha256"] for c in cases.values() if "/L=6/" in c["id"]}
    assert len(w) == 1
    assert data["meta"]["triton"] == triton.__version__
    assert data["meta"]["providers"]["naive_other"]["environment"] == {"prepend_path": [str(site)]}
    # the second worker continues the folder on the same machine and code: one session (results.files.sessions)
    assert "sessions" not in data["meta"] and not any("session" in c for c in data["cases"])
    # one worker per environment, the harness's own first
    assert [c["provider"] for c in data["cases"]] == ["naive_eager", "naive_eager", "naive_other", "naive_other"]
    assert "the cases of naive_other: a worker with " in proc.stdout and "triton 3.99.0+standin" in proc.stdout


def test_a_provider_runs_with_another_interpreter(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False, symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    cfg, out = config(tmp_path, {"python": str(python)}, also_default=False), tmp_path / "run"
    proc = run(cfg, out, "--isolation", "process")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cases = read_results(out)["cases"]
    assert len(cases) == 2 and {c["status"] for c in cases} == {"ok"}
    for c in cases:
        assert c["environment"]["python"] == str(python)  # the venv's, not resolved to the base interpreter
        assert c["environment"]["declared"] == {"python": str(python)}


def test_bad_environments_are_one_line_before_the_first_case(tmp_path, capsys):
    out = tmp_path / "run"
    bare = tmp_path / "bare"  # a venv that cannot import torch
    venv.EnvBuilder(system_site_packages=False, with_pip=False, symlinks=True).create(bare)
    text = tmp_path / "not-python"
    text.write_text("nothing\n")
    for environment, expected in (
        ({"prepend_path": [str(tmp_path / "nope")]}, f"environment.prepend_path: {tmp_path / 'nope'}: no such folder"),
        ({"prepend_path": [str(text)]}, "not a folder"),
        ({"python": str(tmp_path / "nope" / "python")}, "environment.python: "),
        ({"python": str(text)}, "not an executable file"),
        ({"python": str(bare / "bin" / "python")}, "the harness cannot run there: ModuleNotFoundError: No module "),
    ):
        cfg = config(tmp_path, environment)
        assert main(["run", str(cfg), "--out", str(out)]) == EXIT_BAD_INPUT, environment
        line = one_error_line(capsys)
        assert line.startswith(f"error: {cfg}: provider 'naive_other': environment") and expected in line, line
        assert not out.exists()  # nothing written, not even the lock
    site = tmp_path / "site-ok"
    site.mkdir()
    cfg = config(tmp_path, {"prepend_path": [str(site)]})
    assert main(["run", str(cfg), "--out", str(out), "--isolation", "none"]) == EXIT_BAD_INPUT
    line = one_error_line(capsys)
    assert line.startswith("error: --isolation none: provider 'naive_other' names an environment (prepend_path:")
    assert "--providers without naive_other" in line and not out.exists()
    import bench

    with pytest.raises(UsageError, match=r"^bench.run \(it runs every case in this process\): provider 'naive_other'"):
        bench.run(str(cfg), out=str(out))
    # leaving the label out runs the rest in one process, as before
    assert set(bench.run(str(cfg), out=str(out), providers="naive_eager").status) == {"ok"}


def test_the_config_checks_the_shape_of_an_environment(tmp_path):
    for environment, expected in (
        ({}, "empty; allowed: {python: PATH} and/or {prepend_path: [DIR, ...]}"),
        ({"pythn": "x"}, "pythn"),
        ({"prepend_path": []}, "prepend_path"),
        ({"python": ""}, "the path is empty"),
    ):
        with pytest.raises(ConfigError, match=r"providers\.1\.environment") as exc:
            load_config(config(tmp_path, environment))
        assert expected in str(exc.value), str(exc.value)
    # paths are not checked when the config loads: a config names the folders of the machine it runs on
    cfg = load_config(config(tmp_path, {"prepend_path": ["/no/such/folder"]}))
    assert cfg.providers["naive_other"].environment == {"prepend_path": ["/no/such/folder"]}
    peers = load_config(ROOT / "configs" / "peers-h200.yaml")
    assert peers.providers["meta_gdpa_ws"].environment == {"prepend_path": ["/tmp/fbtriton-site"]}
    assert peers.providers["meta_gdpa"].environment is None


def test_legs_are_one_worker_per_environment_narrowed_per_shard(tmp_path):
    cfg = load_config(config(tmp_path, {"prepend_path": ["/x"]}))
    groups = split(cfg.cases)
    assert groups == [(None, ("naive_eager",)), ({"prepend_path": ["/x"]}, ("naive_other",))]
    leg = Leg({"prepend_path": ["/x"]}, ("naive_other",), "/venv/bin/python", ("/x",))
    cmd = ["python3", "-m", "bench", "run", "c.yaml", "--providers", "a,naive_other", "--worker"]
    assert leg.command(cmd) == [
        "/venv/bin/python",
        "-m",
        "bench",
        "run",
        "c.yaml",
        "--providers",
        "naive_other",
        "--worker",
    ]
    assert leg.command(cmd[:5])[-2:] == ["--providers", "naive_other"]
    assert leg.env({"PYTHONPATH": "/repo", "A": "1"}) == {"PYTHONPATH": os.pathsep.join(["/x", "/repo"]), "A": "1"}
    default = Leg(None, ("naive_eager",), sys.executable)
    narrowed = for_cases([default, leg], [c for c in cfg.cases if c.label == "naive_eager"])
    assert narrowed == [default]  # a shard without the environment's cases starts no worker for it
    assert textwrap.dedent(leg.summary()).startswith("naive_other: a worker with /x first on PYTHONPATH")
    # a resumed run starts no worker for an environment whose cases are all recorded
    other = {c.id for c in cfg.cases if c.label == "naive_other"}
    assert pending([default, leg], cfg.cases, other) == [default]
    assert pending([default, leg], cfg.cases, {c.id for c in cfg.cases} - other) == [leg]
    assert pending([default, leg], cfg.cases, {c.id for c in cfg.cases}) == [default]
