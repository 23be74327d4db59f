"""Environment capture (bench.sweep.env, in results meta and the report), and the `gdpa-bench` console script's
--version and `list`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from bench.cli.parser import main
from bench.monitor import device_facts
from bench.sweep import env
from reports.environment import environment_table, gpus_used

ROOT = Path(__file__).resolve().parents[1]


def test_collect_records_what_asv_records(monkeypatch):
    monkeypatch.setenv("GDPA_TEST_MARK", "1")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/x")
    monkeypatch.delenv("GDPA_GIT_SHA", raising=False)
    info = env.collect(torch.device("cpu"))
    assert info["cpu"] and info["cpu_count"] >= 1 and info["ram_gb"] > 0 and info["os"]
    assert info["python"] and info["torch"] == torch.__version__ and info["triton"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = bool(
        subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    )
    assert info["git_commit"] == head and info["git_dirty"] is dirty
    assert info["git_sha"] == head + ("-dirty" if dirty else "") and info["git_commit_time"]
    assert info["env"]["GDPA_TEST_MARK"] == "1" and info["env"]["TRITON_CACHE_DIR"] == "/tmp/x"
    assert "PATH" not in info["env"] and "gpu_count" not in info  # the runner records GPUs used
    assert info["gpu"] is None and info["gpu_uuid"] is None and info["gpu_ecc_mode"] is None


def test_git_sha_from_the_environment_when_there_is_no_git(monkeypatch):
    monkeypatch.setattr(env, "_git", lambda *a: None)
    monkeypatch.setenv("GDPA_GIT_SHA", "abc123")
    st = env.git_state()
    assert st["git_sha"] == "abc123" and st["git_dirty"] is None and st["git_source"] == "$GDPA_GIT_SHA"


def test_git_sha_from_the_environment_wins_over_a_stale_repository(monkeypatch):
    """A lent GPU machine's copy of the tree carries the checkout's .git as the session began: commits made since
    are not its HEAD. $GDPA_GIT_SHA, set by the caller, names the files' commit; the record keeps both."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    monkeypatch.setenv("GDPA_GIT_SHA", "0123abcd")
    st = env.git_state()
    assert st["git_sha"] == st["git_commit"] == "0123abcd" and st["git_dirty"] is None
    assert st["git_source"] == f"$GDPA_GIT_SHA (the repository's HEAD: {head})"
    monkeypatch.setenv("GDPA_GIT_SHA", head[:12])  # the same commit: nothing stale to say
    assert env.git_state()["git_source"] == "$GDPA_GIT_SHA"


class _NVML:
    """The part of pynvml that device_facts reads; `fail` names calls that raise."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, fail=()):
        self.fail = set(fail)

    def __getattribute__(self, name):
        if name != "fail" and name in object.__getattribute__(self, "fail"):

            def boom(*a):
                raise RuntimeError("Not Supported")

            return boom
        return object.__getattribute__(self, name)

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("h", i)

    def nvmlDeviceGetFieldValues(self, h, ids):
        return [SimpleNamespace(nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=100_000))]

    def nvmlDeviceGetUUID(self, h):
        return b"GPU-1234"

    def nvmlSystemGetDriverVersion(self):
        return "580.1"

    def nvmlDeviceGetApplicationsClock(self, h, kind):
        return {1: 1980, 2: 3201}[kind]

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return {1: 1980, 2: 3201}[kind]

    def nvmlDeviceGetEccMode(self, h):
        return (1, 1)

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1

    def nvmlDeviceGetMigMode(self, h):
        return (0, 0)


def test_device_facts_and_failing_nvml_queries_give_none():
    f = device_facts(0, _NVML())
    assert f["uuid"] == "GPU-1234" and f["driver"] == "580.1"
    assert f["clocks_applications_mhz"] == {"sm": 1980, "mem": 3201} and f["clocks_max_mhz"]["sm"] == 1980
    assert (f["ecc_mode"], f["persistence_mode"], f["mig_mode"]) == (1, 1, 0)
    broken = device_facts(
        0,
        _NVML(
            fail={"nvmlDeviceGetUUID", "nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode", "nvmlDeviceGetApplicationsClock"}
        ),
    )
    assert broken["uuid"] is None and broken["ecc_mode"] is None and broken["mig_mode"] is None
    assert broken["clocks_applications_mhz"] == {"sm": None, "mem": None} and broken["persistence_mode"] == 1

    class NoInit(_NVML):
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    none = device_facts(0, NoInit())
    assert none["uuid"] is None and "nvmlInit failed" in none["nvml_error"]


def test_report_environment_rows_and_gpus_used():
    meta = {
        "gpu": "NVIDIA H200",
        "gpu_count": 1,
        "gpu_visible": 2,
        "gpu_uuid": "GPU-1",
        "cpu": "Xeon",
        "cpu_count": 64,
        "ram_gb": 2015.6,
        "cudnn": "91002",
        "flash_attn": "4.0.0b36",
        "git_sha": "abc-dirty",
        "git_branch": "main",
        "git_dirty": True,
        "gpu_clocks_applications_mhz": {"sm": 1980, "mem": 3201},
        "gpu_clocks_max_mhz": {"sm": 1980, "mem": 3201},
        "gpu_ecc_mode": 1,
        "gpu_persistence_mode": 1,
        "gpu_mig_mode": 0,
        "env": {"CUDA_VISIBLE_DEVICES": "0", "GDPA_GIT_SHA": "abc"},
    }
    rows = dict(environment_table(meta, "fa4").rows)
    assert rows["GPU"] == "NVIDIA H200"  # one GPU used on a two-GPU host
    assert rows["CPU"] == "Xeon (64 cores)" and rows["RAM"] == "2016 GB" and rows["cuDNN"] == "91002"
    assert rows["git"] == "abc-dirty on main (uncommitted changes)" and rows["flash-attn"] == "4.0.0b36"
    assert rows["GPU clocks: application / max (MHz)"] == "sm 1980, mem 3201 / sm 1980, mem 3201"
    assert rows["GPU modes"] == "ECC 1, persistence 1, MIG 0"
    assert rows["variables"] == "CUDA_VISIBLE_DEVICES=0 GDPA_GIT_SHA=abc"
    assert gpus_used({"gpu": "NVIDIA H200", "gpu_count": 2}) == 1  # an old run: gpu_count was the visible count
    assert gpus_used({"gpu": "NVIDIA H200", "gpu_count": 2, "shards": []}) == 2  # an old merged run: workers
    assert (
        dict(environment_table({"gpu": "NVIDIA H200", "gpu_count": 2, "gpu_visible": 8}, None).rows)["GPU"]
        == "NVIDIA H200 × 2"
    )


def test_bench_env_prints_the_environment(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    for key in (
        "cpu",
        "ram_gb",
        "git_sha",
        "git_dirty",
        "cudnn",
        "flash_attn",
        "gpu_uuid",
        "gpu_mig_mode",
        "$TRITON_INTERPRET",
        "providers:",
    ):
        assert key in out, key


def test_version_and_console_script(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    from importlib.metadata import version

    assert capsys.readouterr().out.strip() == f"gdpa-bench {version('gdpa-bench')}"
    # the console script starts where `python -m bench` does: the signal guard first (bench.__main__)
    assert '\n[project.scripts]\ngdpa-bench = "bench.__main__:entry"\n' in (ROOT / "pyproject.toml").read_text()


def test_list_prints_cases_and_an_estimate(capsys):
    assert (
        main(["list", str(ROOT / "configs" / "smoke.yaml"), "--only", "tiny/fwd/", "--providers", "naive_eager"]) == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out[:-1]] == [
        "tiny/fwd/L=24/fill=0.5/naive_eager",
        "tiny/fwd/L=24/fill=1.0/naive_eager",
        "tiny/fwd/L=40/fill=0.5/naive_eager",
        "tiny/fwd/L=40/fill=1.0/naive_eager",
    ]
    assert all(line.rstrip().endswith(" s") and "~" in line for line in out[:-1])
    assert out[-1].startswith("4 cases; estimated wall time ~") and "on the CPU" in out[-1]
    assert main(["list", str(ROOT / "configs" / "smoke.yaml"), "--only", "nothing-matches"]) == 2


def test_python_m_bench_version_matches():
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--version"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.startswith("gdpa-bench ") and proc.stdout.count("\n") == 1
