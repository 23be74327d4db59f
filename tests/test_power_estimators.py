"""The power fix of issue 19 (docs/experiments/power-estimators.md): a settle pre-roll before the energy
window, both estimators over the same span, one headline, the above-cap and disagreement flags, the
clock of the timed samples, and the counts a README states about a run."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from test_monitor import CONST, FakeClock, make

from bench import monitor as M
from bench.case.power import CasePower
from bench.cli.parser import main
from bench.config.models import Power
from bench.monitor.measure import power_of_window
from reports.power_claims import claims
from results.power import power_counts, power_flags

ROOT = Path(__file__).resolve().parents[1]


def test_run_for_settles_before_the_window_opens():
    clock = FakeClock(step=1 / 16)
    events = []
    calls, seconds = M.run_for(
        lambda: (events.append("fn"), clock.tick()),
        sync=lambda: events.append("sync"),
        min_seconds=0.75,
        clock=clock,
        on_start=lambda: events.append("start"),
        settle_s=0.5,
    )
    start = events.index("start")
    # the pre-roll: 8 calls (0.5 s) in doubling batches, each batch synced, none of them counted
    assert events[:2] == ["sync", "fn"] and events[start - 1] == "sync" and events[:start].count("fn") == 8
    assert (calls, seconds) == (12, 0.75)  # the window alone, exactly as without a pre-roll
    assert events[start:].count("fn") == 12


def _window(power_in_span: float, counter_w: float, n: int = 100, idle_samples: int = 10):
    """A 1 s window sampled every 10 ms: `idle_samples` at 400 W (the idle-to-load start NVML still
    shows), then `power_in_span`; the counter steps every 100 ms at `counter_w`, seen by the next read."""
    times = [i / 100 for i in range(n)]
    power = [400.0] * idle_samples + [power_in_span] * (n - idle_samples)
    updates = [0.105 + k / 10 for k in range(9)]
    energy_t = [t + 0.001 for t in times]
    energy = [5_000_000 + round(counter_w * 100) * sum(u <= t for u in updates) for t in energy_t]
    return {
        "times_s": times,
        "power_w": power,
        "sm_clock_mhz": [1980] * n,
        "temperature_c": [60] * n,
        "reason_masks": [0] * n,
        "energy_mj": energy,
        "energy_times_s": energy_t,
    }


def test_both_estimators_cover_the_same_span():
    w = _window(730.0, 730.0)
    r = power_of_window(w, calls=100, seconds=1.0, wall_s=1.0, e0=None, e1=None, cap_w=700.0, flops_per_call=1e12)
    assert r["energy_source"] == "counter_ticks"
    assert r["avg_w_from_energy"] == pytest.approx(730.0)  # 8 steps of 73 J over 0.8 s
    assert r["energy_span_s"] == pytest.approx(0.8) and r["counter_step_ms"] == pytest.approx(100.0)
    # the whole-window average carries the stale idle start; the same span does not
    assert r["avg_w"] == pytest.approx((10 * 400 + 90 * 730) / 100)
    assert r["avg_w_same_span"] == pytest.approx(730.0) and r["n_samples_same_span"] == 80
    assert r["headline_w"] == r["avg_w_from_energy"]
    assert r["estimator_diff"] == pytest.approx(0.0) and r["estimators_disagree"] is False
    assert r["above_cap"] is True  # 730 W > 700 W + 3%
    assert r["energy_j_per_call"] == pytest.approx(730.0 * 1.0 / 100)


def test_estimators_more_than_5_percent_apart_are_flagged():
    r = power_of_window(
        _window(650.0, 700.0), calls=10, seconds=1.0, wall_s=1.0, e0=None, e1=None, cap_w=700.0, flops_per_call=None
    )
    assert r["estimator_diff"] == pytest.approx(650 / 700 - 1) and r["estimators_disagree"] is True
    assert r["above_cap"] is False  # 700 W is within cap + 3%


def test_power_flags_without_a_counter_or_a_cap():
    assert power_flags({"avg_w": 500.0, "cap_w": None}) == {
        "headline_w": 500.0,
        "estimator_diff": None,
        "estimators_disagree": None,
        "above_cap": None,
    }
    f = power_flags({"avg_w": 500.0, "avg_w_from_energy": 722.0, "avg_w_same_span": 700.0, "cap_w": 700})
    assert f["headline_w"] == 722.0 and f["above_cap"] is True and f["estimators_disagree"] is False


def test_measure_settles_first_and_reads_the_counter_only_in_the_window():
    t0 = time.monotonic()
    mon, fake = make([CONST], cycle=True, energy=lambda: 1_000_000 + round(700_000 * (time.monotonic() - t0)))

    def fn():
        time.sleep(0.002)

    r = mon.measure(fn, sync=lambda: None, min_seconds=0.15, settle_s=0.15, case_id="c")
    assert r["settle_s"] >= 0.15
    tagged = [s for s in mon.samples() if s["case_id"] == "c"]
    assert r["n_samples"] < len(tagged)  # the pre-roll's samples are the case's, not the window's
    assert r["seconds"] >= 0.15 and r["avg_w_same_span"] == pytest.approx(690.0)
    # the counter (ms of CPU per read on a GPU) is read only inside the window: about one read per
    # window sample, plus the start and end reads, never during the pre-roll
    assert fake.calls["energy"] <= r["n_samples"] + 4


def chunked_timer(chunks: int):
    """A stand-in for the harness's timer: `chunks` chunks of one call each, `between()` after each."""

    def timer(fn, between=None):
        for _ in range(chunks):
            fn()
            if between is not None:
                between()
        return "samples"

    return timer


def test_the_timed_samples_run_with_the_sampler_paused_and_read_the_clock_between_chunks():
    """The default (`power.pause_for_samples`): no sample is taken while a timed call runs, one reading in
    this process after each chunk gives the clock, and the sampler runs again afterwards."""
    mon, _ = make([CONST], cycle=True)
    running_in_calls, calls = [], []

    def fn():
        running_in_calls.append(mon.running)
        t0 = time.monotonic()
        time.sleep(0.03)  # three sampling periods of the stand-in monitor
        calls.append((t0, time.monotonic()))

    power = CasePower(mon, Power(), timer=chunked_timer(3), sync=lambda: None)
    assert power.time_samples(fn) == ("samples", None)  # not sampling: no clock
    mon.start()
    try:
        before, calls[:] = len(mon), []
        assert power.time_samples(fn) == ("samples", 1755.0)
        assert running_in_calls[3:] == [False] * 3 and mon.running
        taken = mon.window(before)["times_s"]
        assert sum(t > b for t in taken for _, b in calls[:1]) >= 3  # the three readings between chunks
        assert not any(a <= t <= b for t in taken for a, b in calls)  # none while a timed call ran
    finally:
        mon.stop()


def test_each_chunks_clock_is_kept_beside_its_samples():
    """The clock read after each chunk goes with that chunk's samples into the record (`chunk_clocks`: the
    power cap moves the clock inside one window, which the median alone hides)."""
    from bench.case.timing import Samples
    from results.record import timing_fields

    mon, _ = make([CONST], cycle=True)

    def timer(fn, between=None):
        for _ in range(2):
            fn()
            between()
        return Samples.of([1.0, 1.1, 1.0, 1.2, 1.3, 1.2], chunk_ends=[3, 6])

    power = CasePower(mon, Power(), timer=timer, sync=lambda: None)
    mon.start()
    try:
        samples, clock = power.time_samples(lambda: time.sleep(0.02))
    finally:
        mon.stop()
    assert clock == 1755.0 and samples.chunk_clocks_mhz == [1755.0, 1755.0]
    assert timing_fields(samples, 1e9, None, None)["chunk_clocks"] == [[3, 1755.0], [6, 1755.0]]
    assert timing_fields(Samples.of([1.0, 2.0]), 1e9, None, None)["chunk_clocks"] == []  # not read per chunk


def _chunk_ends(call_ms: float, rep_ms: float, min_reps: int = 5, max_reps: int = 2000) -> list[int]:
    """The timer's chunk ends for calls of `call_ms` (bench.case.timing.chunk_size, as time_cuda takes them)."""
    from bench.case.timing import chunk_size

    times, ends = [], []
    while n := chunk_size(times, rep_ms, min_reps, max_reps):
        times += [call_ms] * n
        ends.append(len(times))
    return ends


def test_the_samples_clock_is_the_median_samples_interpolated_between_readings():
    """The clock read after each chunk, spread over the samples between readings: the median sample's clock.
    The review's cases: 0.1 ms calls with the cap biting after 640 of 2,000 samples (a median of one reading
    per chunk said 1980: 8 of the 10 chunks end before it), and a clock falling steadily (the chunk's end
    reading alone for its samples said ~1500 where the median sample ran at ~1740)."""
    from results.record import samples_clock

    ends = _chunk_ends(0.1, 1000.0)
    assert ends == [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2000]
    step = [[n, 1980.0 if n <= 640 else 1500.0] for n in ends]
    # the drop lies somewhere in the chunk of samples 641..1280: spread over it, the 1,000th sample at 1710
    assert samples_clock(step) == pytest.approx(1980.0 - 480.0 * 360.5 / 640)  # samples 1,000 and 1,001
    assert samples_clock([[n, 1980.0 if n <= 40 else 1500.0] for n in ends]) == 1500.0  # an early cap
    falling = _chunk_ends(0.78, 1000.0)
    total = falling[-1]
    linear = [[n, 1980.0 - 480.0 * n / total] for n in falling]
    assert samples_clock(linear) == pytest.approx(1740.0, abs=1.0)
    # a chunk without a reading: interpolated over it
    assert samples_clock([[5, 1980.0], [10, None], [20, 1500.0]]) == pytest.approx(1804.0)
    assert samples_clock([[5, None], [10, None]]) is None


def test_time_samples_records_the_median_samples_clock():
    """CasePower.time_samples with the monitor's clock dropping after the 8th chunk: the median sample's clock
    recorded (~1710; 1980, the readings' plain median, before)."""
    from bench.case.timing import Samples

    mon, _ = make([CONST], cycle=True)
    ends = _chunk_ends(0.1, 1000.0)
    readings = iter([{"sm_clock_mhz": 1980.0 if n <= 640 else 1500.0} for n in ends])
    mon.sample_now = lambda: next(readings)

    def timer(fn, between=None):
        for _ in ends:
            between()
        return Samples.of([0.1] * ends[-1], chunk_ends=ends)

    power = CasePower(mon, Power(), timer=timer, sync=lambda: None)
    mon.start()
    try:
        samples, clock = power.time_samples(lambda: None)
    finally:
        mon.stop()
    assert clock == pytest.approx(1710.0, abs=1.0) and samples.chunk_clocks_mhz[7:] == [1980.0, 1500.0, 1500.0]


def test_the_overhead_check_times_with_the_sampler_running():
    """`power.overhead_check` with the samples taken paused: "with" is timed again while the sampler runs,
    "without" while it is stopped (both were without it, so the check read ~0%)."""
    from bench.case.timing import Samples

    mon, _ = make([CONST], cycle=True)
    running = []

    def timer(fn, between=None):
        running.append(mon.running)
        fn()
        return Samples.of([2.0 if mon.running else 1.0] * 3)

    cfg = Power(overhead_check=".", energy_loop_s=0.0)
    power = CasePower(mon, cfg, timer=timer, sync=lambda: None)
    mon.start()
    try:
        rec = {"median_ms": 1.0}  # the samples, timed paused
        power.after_samples(_case_stub(), rec, lambda: None, 1.0)
    finally:
        mon.stop()
    assert running == [True, False, True]  # with, without, with again (a drifting clock cancels)
    assert rec["monitor_overhead"] == {"median_ms_with": 2.0, "median_ms_without": 1.0, "overhead": 1.0}
    rec = {"median_ms": 1.0}
    power.after_samples(_case_stub(), rec, lambda: None, 1.0)  # the sampler stopped: no check, said so
    assert rec["monitor_overhead"] == {"error": "the sampler was not running: nothing to compare"}


def _case_stub():
    class Case:
        id = "set/fwd/L=8/p"

    return Case()


def test_with_pause_for_samples_off_the_sampler_runs_through_the_samples():
    mon, _ = make([CONST], cycle=True)
    running_in_calls = []

    def fn():
        running_in_calls.append(mon.running)
        time.sleep(0.03)

    power = CasePower(mon, Power(pause_for_samples=False), timer=chunked_timer(2), sync=lambda: None)
    mon.start()
    try:
        assert power.time_samples(fn) == ("samples", 1755.0)
        assert running_in_calls == [True, True]
        quick = CasePower(mon, Power(pause_for_samples=False), timer=lambda fn, between=None: "s", sync=lambda: None)
        assert quick.time_samples(fn) == ("s", 1755.0)  # a window with no sample of its own takes one reading
    finally:
        mon.stop()


def _case(status="ok", **power):
    return {"id": "x", "status": status, "power": power or None}


def test_a_counter_delta_coarser_than_its_window_is_not_the_headline():
    # docs/example-h200-peers, causal_silu_512 fwd L 512 fill 0.5 gdpa: a 0.3 s loop, too few counter steps for
    # the step-to-step figure, and a start/end delta of 946 W where every sample read 766 W or less
    coarse = {"energy_source": "counter", "avg_w_from_energy": 945.9, "avg_w_same_span": 737.9, "avg_w": 737.9}
    coarse |= {"counter_step_ms": 100.0, "seconds": 0.30, "calls": 468, "energy_j_per_call": 945.9 * 0.3 / 468}
    f = power_flags({**coarse, "cap_w": 700})
    # the samples are the headline; neither flag judges a figure the counter cannot resolve to 5%
    assert f["headline_w"] == 737.9 and f["estimators_disagree"] is None and f["above_cap"] is None
    # a delta over a window of 40 steps resolves it (2 steps = 5%); one without a known step does not
    assert power_flags({**coarse, "seconds": 4.0, "cap_w": 700})["above_cap"] is True
    assert power_flags({**coarse, "seconds": 4.0})["headline_w"] == 945.9
    assert power_flags({**coarse, "counter_step_ms": None})["headline_w"] == 737.9
    # the step-to-step figure stays the headline; its flags need 40 samples between its ends (2 periods: 5%)
    ticks = {"energy_source": "counter_ticks", "avg_w_from_energy": 760.0, "avg_w_same_span": 700.0, "cap_w": 700}
    assert power_flags({**ticks, "n_samples_same_span": 19}) == {
        "headline_w": 760.0,
        "estimator_diff": pytest.approx(700 / 760 - 1),
        "estimators_disagree": None,
        "above_cap": None,
    }
    assert power_flags({**ticks, "n_samples_same_span": 90})["above_cap"] is True
    assert power_counts([{"status": "ok", "power": {**ticks, "n_samples_same_span": 19}}])["coarse_counter"] == 1
    # and the report's J/call and TFLOP/s/W follow the headline
    from results.derived import energy_column, per_watt_column

    row = {"ok": True, "median_ms": 0.5, "tflops": 400.0, "power.avg_w": 737.9}
    row |= {f"power.{k}": v for k, v in (coarse | {"tflops": 380.0, "tflops_per_w": 380.0 / 945.9}).items()}
    df = pd.DataFrame([row])
    assert energy_column(df, {})[0] == pytest.approx(737.9 * 0.3 / 468)
    assert per_watt_column(df, {})[0] == pytest.approx(380.0 / 737.9)


def test_power_counts_and_the_sentences():
    cases = [
        _case(avg_w=690, avg_w_from_energy=730, avg_w_same_span=728, cap_w=700, reasons=["sw_power_cap"]),
        _case(avg_w=600, avg_w_from_energy=640, avg_w_same_span=600, cap_w=700, reasons=[]),
        _case(avg_w=500, avg_w_from_energy=505, cap_w=700, reasons=["sw_power_cap"]),  # older run: no same span
        _case(),  # ok, no power
        _case("failed", avg_w_from_energy=900, cap_w=700),  # not ok: not counted
    ]
    c = power_counts(cases)
    assert c == {
        "ok": 4,
        "with_power": 3,
        "sw_power_cap": 2,
        "above_cap": 1,
        "estimators_disagree": 1,
        "above_cap_unknown": 0,
        "estimators_unknown": 1,
        "coarse_counter": 0,
        "cap_w": 700.0,
        "thermal": {},
    }
    text = "\n".join(claims(c))
    assert "sw_power_cap was set during the energy loop of 2 of 3 cases" in text
    assert "1 of 3 cases average above 700 W + 3%" in text
    assert "1 of 2 cases have their two power estimators" in text and "1 cannot be judged" in text
    assert "thermal" not in text  # no case saw a thermal reason: no sentence


def test_a_case_whose_clock_temperature_held_is_named():
    """f20b010's H100 production run: uniform/bwd/L=4096/gdpa ran at 68 °C with `sw_thermal` and no power cap
    (1470 MHz against FA4's 1560 at the cap): the counts name such cases, the sentence says what that means,
    and the power cap alone, or a not-ok case, is not thermal."""
    hot = {"avg_w": 636, "cap_w": 700, "reasons": ["sw_thermal"], "temperature_c_max": 68}
    cases = [{**_case(**hot), "id": f"uniform/bwd/L=4096/p{i}"} for i in range(7)]
    cases.append({**_case(avg_w=655, cap_w=700, reasons=["sw_power_cap"], temperature_c_max=69), "id": "capped"})
    cases.append({**_case("failed", **hot), "id": "failed"})
    cases.append({**_case(avg_w=700, reasons=["hw_slowdown", "sw_power_cap"]), "id": "slowdown"})
    c = power_counts(cases)
    assert list(c["thermal"]) == [f"uniform/bwd/L=4096/p{i}" for i in range(7)] + ["slowdown"]
    assert c["thermal"]["uniform/bwd/L=4096/p0"] == "sw_thermal at 68 °C"
    assert c["thermal"]["slowdown"] == "hw_slowdown"  # no temperature recorded: none claimed
    text = "\n".join(claims(c))
    assert "8 of 9 cases ran with a thermal clock reason" in text, text
    assert "uniform/bwd/L=4096/p0 (sw_thermal at 68 °C)" in text and "; and 3 more." in text
    assert "capped" not in text and "failed" not in text


def test_power_checks_on_the_committed_example_run(capsys):
    assert main(["power-checks", str(ROOT / "docs" / "example-h200")]) == 0
    out = capsys.readouterr().out
    # the committed run (800127f, settle pre-roll): README and power-estimators.md quote these counts
    assert "sw_power_cap was set during the energy loop of 212 of 293 cases" in out
    assert "0 of 293 cases average above 700 W + 3%" in out
    assert "3 of 293 cases have their two power estimators" in out
    assert main(["power-checks", str(ROOT / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err


def test_the_reports_overview_names_the_cases_temperature_held():
    """The report's overview says which cases ran with a thermal reason (the power-checks sentence in short), and
    says nothing where none did: a run's power-capped cases are not thermal."""
    import importlib.util

    from reports.sections import _warnings
    from results.frame import cases_frame

    spec = importlib.util.spec_from_file_location("gdpa_synth", Path(__file__).parent / "fixtures" / "synth.py")
    synth = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(synth)
    hot = {"avg_w": 636.0, "reasons": ["sw_thermal"], "temperature_c_max": 68}
    cases = [synth.make_case("gdpa", L=L, power=hot) for L in (512, 1024)]
    cases += [synth.make_case("fa4", L=L, power={"avg_w": 690.0}) for L in (512, 1024)]
    lines = [x for x in _warnings({}, cases_frame(cases)) if "thermal" in x]
    assert lines == [
        "2 of 4 cases ran with a thermal clock reason: temperature, not only the power cap, set their clock (the "
        "cases table's `reasons`; `gdpa-bench power-checks` names them): set1/fwd/L=512/fill=1.0/gdpa, "
        "set1/fwd/L=1024/fill=1.0/gdpa."
    ], lines
    cool = cases[2:]
    assert not [x for x in _warnings({}, cases_frame(cool)) if "thermal" in x]
