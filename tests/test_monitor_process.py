"""The NVML sampler as a process of its own (issue 31; bench/monitor/child.py, bench.monitor.remote): the timed
process runs no sampling thread; samples, case tags, the energy counter's window reads, the failure policy
and power.csv are what the thread gave. The stand-in NVML is imported by name in both processes
(tests/fake_nvml.py)."""

from __future__ import annotations

import csv
import threading
import time

import pytest

from bench.monitor import PowerMonitor
from bench.monitor import remote as R
from tests.fake_nvml import FakeNVML

CONSTANT, FAILING = "tests.fake_nvml:constant", "tests.fake_nvml:failing"


def wait_until(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.005)
    return pred()


@pytest.fixture
def mon():
    m = PowerMonitor(device_index=0, period_ms=2.0, power_cap_w=700.0, nvml=CONSTANT)
    yield m
    m.close()


def test_the_sampler_is_a_process_not_a_thread(mon):
    assert mon.available and mon.sampler == "process" and mon.info()["sampler"] == "process"
    threads = threading.active_count()
    mon.start()
    assert mon.running and threading.active_count() == threads  # nothing of it in the timed interpreter
    assert wait_until(lambda: len(mon) >= 5)
    child = mon._remote.proc
    mon.stop()
    assert not mon.running
    n = len(mon)
    time.sleep(0.05)
    assert len(mon) == n  # nothing is sampled while stopped
    mon.start()  # the same child samples again
    assert mon._remote.proc is child and wait_until(lambda: len(mon) >= n + 5)
    mon.close()
    assert child.poll() == 0 and mon._remote is None
    times = [s["time_s"] for s in mon.samples()]
    assert times == sorted(times) and times[0] >= 0
    assert all(s["power_w"] == 690.0 and s["sm_clock_mhz"] == 1755 for s in mon.samples())


def test_samples_are_tagged_with_the_case_that_ran_at_their_time(mon, tmp_path):
    mon.start()
    assert wait_until(lambda: len(mon) >= 3)
    mon.begin_case("set/fwd/L=8/a")
    time.sleep(0.05)
    mon.end_case()
    time.sleep(0.02)
    mon.begin_case("b")
    assert wait_until(lambda: len([s for s in mon.samples() if s["case_id"] == "b"]) >= 3)
    mon.stop()
    begin, end, _ = (m["time_s"] for m in mon.markers())
    tagged = [s for s in mon.samples() if s["case_id"] == "set/fwd/L=8/a"]
    assert len(tagged) >= 5 and all(begin <= s["time_s"] <= end for s in tagged)
    assert all(s["case_id"] == "" for s in mon.samples() if s["time_s"] < begin)
    mon.write_csv(tmp_path / "power.csv")
    with open(tmp_path / "power.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(mon.samples()) and {r["case_id"] for r in rows} >= {"", "set/fwd/L=8/a", "b"}


def test_the_energy_counter_is_read_only_inside_measure_windows(mon):
    mon.start()
    assert wait_until(lambda: len(mon) >= 5)

    def fn():
        time.sleep(0.001)

    r = mon.measure(fn, sync=lambda: None, min_seconds=0.3, flops_per_call=1e9, case_id="c")
    assert r is not None and r["monitor_error"] is None and r["n_samples"] >= 20
    assert r["energy_source"] == "counter_ticks" and r["avg_w_from_energy"] == pytest.approx(700.0, rel=0.1)
    assert r["avg_w"] == 690.0 and r["frac_at_cap"] == 1.0 and r["reasons"] == ["sw_power_cap"]
    n = len(mon)
    assert wait_until(lambda: len(mon) >= n + 5)
    mon.stop()
    window = mon.window(0)
    inside = [e for e, c in zip(window["energy_mj"], (s["case_id"] for s in mon.samples()), strict=True) if c == "c"]
    outside = window["energy_mj"][:5] + window["energy_mj"][n:]
    assert inside and sum(e is not None for e in inside) >= 0.9 * len(inside)
    assert all(e is None for e in outside)


def test_a_failing_power_read_stops_the_child_and_says_why():
    mon = PowerMonitor(period_ms=2.0, nvml=FAILING)
    try:
        mon.start()
        assert wait_until(lambda: not mon.running)
        assert mon.error == "NVML power read failed: GPU is lost"
        assert len(mon.samples()) == 5 and mon.info()["error"] == mon.error
    finally:
        mon.close()


def test_a_child_that_dies_is_reported_and_its_pulled_samples_kept(mon):
    mon.start()
    assert wait_until(lambda: len(mon) >= 5)
    n = len(mon)
    mon._remote.kill()
    assert not mon.running
    assert mon.error.startswith("power monitor stopped: the sampler process ended")
    assert len(mon) >= n and mon.sample_now() is not None  # the parent's own reads still work


def test_a_child_that_cannot_start_falls_back_to_a_thread(monkeypatch):
    monkeypatch.setattr(R.sys, "executable", "/nonexistent/python")
    mon = PowerMonitor(period_ms=2.0, nvml=CONSTANT)
    try:
        mon.start()
        assert mon.sampler == "thread" and mon._thread is not None
        assert mon.info()["sampler_note"].startswith("sampling in a thread: the sampler process did not start")
        assert wait_until(lambda: len(mon) >= 5)
    finally:
        mon.close()


def test_an_object_stand_in_samples_in_a_thread_and_bad_choices_are_refused():
    mon = PowerMonitor(period_ms=2.0, nvml=FakeNVML([[690_000, 1755, 3201, 61, 0x4, 0]], cycle=True))
    assert mon.sampler == "thread"
    with pytest.raises(ValueError, match="needs nvml=None or a 'module:attr'"):
        PowerMonitor(nvml=FakeNVML([[1, 1, 1, 1, 0, 0]]), sampler="process")
    with pytest.raises(ValueError, match="'process' or 'thread'"):
        PowerMonitor(nvml=CONSTANT, sampler="fiber")


def test_without_nvml_nothing_is_started():
    mon = PowerMonitor(period_ms=1.0)  # the real pynvml: on a machine without a GPU this is unavailable
    if mon.available:
        pytest.skip("NVML works here")
    mon.start()
    assert mon._remote is None and not mon.running and len(mon) == 0
