"""power.csv is written as the sweep goes, case by case (results.power_csv.PowerTimeline): a worker killed
between cases (a hang's deadline, a segfault, the OOM killer) leaves the timeline of every case it recorded,
as results.json keeps their records. On the CPU the runner starts no monitor, so these tests give it one
that samples a stand-in NVML (tests/fake_nvml.py) in a thread."""

from __future__ import annotations

import pytest
import torch

from bench.config import load_config
from bench.monitor import PowerMonitor
from bench.sweep import runner as runner_mod
from results.power_csv import TIMELINE_GAP_S, read_power
from tests.fake_nvml import CONST, FakeNVML

CONFIG = {
    "device": "cpu",
    "providers": ["naive_eager"],
    "modes": ["fwd"],
    "timing": {"warmup_ms": 1, "rep_ms": 20, "min_reps": 3, "max_reps": 50},
    "power": {"enabled": False},
    "hardware": {"calibrate": False},
    "sets": [{"name": "s", "B": 2, "H": 2, "D": 16, "dtype": "fp32", "max_len": [6, 9, 12]}],
}


@pytest.fixture
def sampled(monkeypatch):
    """Runners that sample a stand-in NVML every millisecond from the sweep's start on."""

    def start_monitor(self):
        self.monitor = PowerMonitor(period_ms=1.0, nvml=FakeNVML([CONST], cycle=True), sampler="thread")
        self.monitor.start()

    monkeypatch.setattr(runner_mod.Runner, "_start_monitor", start_monitor)


def _run(run_dir, cfg, phase=None, resume=False):
    runner = runner_mod.Runner(cfg, run_dir, torch.device("cpu"), resume=resume, progress=False, phase=phase)
    return runner.run(cfg.cases)


def test_each_recorded_case_is_in_power_csv_before_the_next_case_begins(sampled, tmp_path):
    cfg = load_config(CONFIG)
    ids = [c.id for c in cfg.cases]
    seen: dict[str, list[str]] = {}

    def phase(case_id, name):
        if name == "batch" and case_id:  # a case begins: what would survive a kill now
            df = read_power(tmp_path / "run")
            seen[case_id] = [] if df is None else sorted(set(df["case_id"]) - {""})

    assert _run(tmp_path / "run", cfg, phase) == {"ok": len(ids)}
    assert seen[ids[0]] == []
    for k in range(1, len(ids)):
        assert seen[ids[k]] == sorted(ids[:k]), k
    df = read_power(tmp_path / "run")
    assert set(df["case_id"]) - {""} == set(ids)
    assert (tmp_path / "run" / "power.csv").read_text().count("time_s") == 1
    assert df["time_s"].is_monotonic_increasing


def test_a_resumed_run_appends_its_timeline_after_the_recorded_one(sampled, tmp_path):
    cfg = load_config(CONFIG)
    ids = [c.id for c in cfg.cases]
    _run(tmp_path / "run", load_config({**CONFIG, "sets": [{**CONFIG["sets"][0], "max_len": [6]}]}))
    first = read_power(tmp_path / "run")
    assert set(first["case_id"]) - {""} == {ids[0]}
    assert _run(tmp_path / "run", cfg, resume=True) == {"ok": len(ids) - 1}
    df = read_power(tmp_path / "run")
    assert df.iloc[: len(first)]["time_s"].tolist() == first["time_s"].tolist()  # the first session's, as it was
    later = df.iloc[len(first) :]
    assert set(later["case_id"]) - {""} == set(ids[1:])
    assert later["time_s"].min() >= first["time_s"].max() + TIMELINE_GAP_S - 1e-6
