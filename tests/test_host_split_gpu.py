"""docs/experiments/host_split_gpu.py times the op's host work on the GPU machine: the cases it reads must be
configs/production.yaml's, for every provider it builds, or the probe dies at its first line there."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("host_split_gpu", ROOT / "docs" / "experiments" / "host_split_gpu.py")
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)


def test_the_probes_cases_are_the_production_configs(monkeypatch):
    from bench.config.models import load_config

    monkeypatch.chdir(ROOT)
    ids = {case.id for case in load_config("configs/production.yaml").cases}
    wanted = {f"{prefix}/{name}" for prefix in probe.CASES for name in probe.PROVIDERS}
    assert wanted <= ids, sorted(wanted - ids)
    assert {"sort=False", "sort=True"} == {prefix.rsplit("/", 1)[1] for prefix in probe.CASES}


def test_the_host_measures_are_numbers_on_any_machine():
    assert probe.host_loop_us() > 0
    mhz = probe.core_mhz()
    assert mhz is None or mhz > 0


def test_the_profiles_case_is_a_production_config(monkeypatch):
    """docs/experiments/host_split_profile_gpu.py profiles one of those cases: it must be there too."""
    from bench.config.models import load_config

    spec = importlib.util.spec_from_file_location(
        "host_split_profile_gpu", ROOT / "docs" / "experiments" / "host_split_profile_gpu.py"
    )
    profile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(profile)
    monkeypatch.chdir(ROOT)
    ids = {case.id for case in load_config("configs/production.yaml").cases}
    assert {f"{profile.CASE}/gdpa", f"{profile.CASE}/gdpa_hopper"} <= ids
