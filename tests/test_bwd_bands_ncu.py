"""docs/experiments/bwd_bands_ncu.py profiles the backward's bands on the GPU: what can be checked on a CPU is
checked here before a session spends device time on it — every launch names a backend of the table over a band the
log-normal batch reaches, the profiled child is this script with `--child`, and ncu's failure is passed on."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bwd_bands_ncu", ROOT / "docs" / "experiments" / "bwd_bands_ncu.py")
bands_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bands_script)


def test_every_launch_is_a_backend_row_over_a_band_of_the_batch():
    from kernels.gdpa import backends
    from kernels.gdpa.bands import Band

    assert bands_script.LAUNCHES[0] == ("packed", 0, 128)  # the stage auto runs below 128 on log-normal 2048
    for name, lo, hi in bands_script.LAUNCHES:
        assert name in backends.NAMES
        assert Band(lo, hi).reachable(bands_script.MAX_LEN, bands_script.MAX_LEN)
    assert bands_script.band_label("hopper", 128, None) == "hopper [128, inf)"


def test_the_child_runs_under_ncu_and_a_failing_ncu_is_passed_on(monkeypatch, tmp_path):
    seen = []

    class Failed:
        returncode, stdout, stderr = 3, "", "stopped here"

    monkeypatch.setattr(bands_script.shutil, "which", lambda _: "/usr/bin/ncu")
    monkeypatch.setattr(subprocess, "run", lambda cmd, **_: seen.append(cmd) or Failed())
    monkeypatch.setenv("OUT", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["bwd_bands_ncu.py"])
    assert bands_script.main() == 3
    cmd = seen[0]
    assert cmd[0] == "/usr/bin/ncu" and "--profile-from-start" in cmd and cmd[-1] == "--child"
    assert cmd[-2].endswith("bwd_bands_ncu.py")


def test_without_ncu_it_says_so(monkeypatch, capsys):
    monkeypatch.setattr(bands_script.shutil, "which", lambda _: None)
    monkeypatch.setattr(sys, "argv", ["bwd_bands_ncu.py"])
    assert bands_script.main() == 2
    assert "ncu not found" in capsys.readouterr().out
