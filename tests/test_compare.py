"""`compare`: the CI perf-regression gate (exit 0 ok, 1 regression, 2 bad input)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.cli.parser import main
from results.verdicts import CompareSettings, compare_runs

FIX = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[1]


def _load_synth():
    spec = importlib.util.spec_from_file_location("gdpa_synth", FIX / "synth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


synth = _load_synth()


def noisy(median: float, n: int = 30, rel: float = 0.02, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return (median * (1 + rel * rng.standard_normal(n))).tolist()


def case(provider: str, samples=None, L: int = 1024, mode: str = "fwd", status: str = "ok", error=None, clock=1980.0):
    return synth.make_case(provider, L=L, mode=mode, samples=samples, status=status, error=error, clock=clock)


def write(tmp: Path, name: str, cases: list[dict], **meta) -> str:
    p = tmp / name
    p.write_text(json.dumps(synth.make_results(cases, synth.gpu_meta(**meta), workloads={})))
    return str(p)


def run(capsys, *argv):
    rc = main(["compare", *(str(a) for a in argv)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def by_id(rows):
    return {r["id"]: r for r in rows}


def test_identical_runs_pass(tmp_path, capsys):
    cases = [
        case("gdpa_triton", noisy(1.0, seed=1)),
        case("fa4", noisy(2.0, seed=2)),
        case("gdpa_triton", noisy(3.0, seed=3), L=2048),
    ]
    b = write(tmp_path, "b.json", cases)
    c = write(tmp_path, "c.json", cases)
    rc, out, _ = run(capsys, b, c)
    assert rc == 0
    assert "| same | 3 |" in out and "| slower | 0 |" in out
    assert out.strip().splitlines()[-1].startswith("OK: no case slower or failed")


def test_runs_measured_differently_are_said_before_the_verdict(tmp_path, capsys):
    """The L2 flush, CUDA graphs or the correctness gate on in one run and off in the other move every median
    or time unchecked kernels: compare names each such setting on a note line."""
    cases = [case("gdpa_triton", noisy(1.0, seed=1)), case("fa4", noisy(2.0, seed=2))]
    timing = {"warmup_ms": 25.0, "rep_ms": 1000.0, "flush_l2": True, "cuda_graph": True}
    gate = {"enabled": True, "tolerance": 0.02, "max_check_seqs": 16}
    b = write(tmp_path, "b.json", cases, timing=timing, correctness=gate)
    same = write(tmp_path, "same.json", cases, timing={**timing, "rep_ms": 300.0}, correctness=gate)
    rc, out, _ = run(capsys, b, same)
    assert rc == 0 and "measured differently" not in out  # the window's length is not such a setting
    c = write(tmp_path, "c.json", cases, timing={**timing, "flush_l2": False}, correctness={**gate, "enabled": False})
    rc, out, _ = run(capsys, b, c)
    (note,) = [line for line in out.splitlines() if "measured differently" in line]
    assert "timing.flush_l2 True in the baseline, False here" in note
    assert "correctness.enabled True in the baseline, False here" in note
    assert "cuda_graph" not in note and "tolerance" not in note
    assert out.strip().splitlines()[-1].startswith("OK: no case slower or failed")  # said, not judged


def test_runs_on_different_gpus_or_software_are_said_before_the_verdict(tmp_path, capsys):
    """An H100 run against an H200 baseline (what the device tool lent on 2026-12-06): compare names the card and
    the libraries that differ on note lines, and judges as before (a note, not a verdict)."""
    cases = [case("gdpa_triton", noisy(1.0, seed=1)), case("fa4", noisy(2.0, seed=2))]
    b = write(tmp_path, "b.json", cases)
    rc, out, _ = run(capsys, b, write(tmp_path, "same.json", cases, git_sha="def5678", host="other-host"))
    assert rc == 0 and "different hardware" not in out and "software" not in out  # commit and host are not these
    h100 = write(tmp_path, "h100.json", cases, gpu="NVIDIA H100 80GB HBM3", triton="3.6.1", driver="580.159.04")
    rc, out, _ = run(capsys, b, h100)
    (hardware,) = [line for line in out.splitlines() if "different hardware" in line]
    assert "gpu NVIDIA H200 in the baseline, NVIDIA H100 80GB HBM3 here" in hardware and "power_cap_w" not in hardware
    (software,) = [line for line in out.splitlines() if "software under the kernels" in line]
    assert "triton 3.6.0 in the baseline, 3.6.1 here" in software and "driver 580.65 in the baseline" in software
    assert "torch" not in software
    assert out.strip().splitlines()[-1].startswith("OK: no case slower or failed")  # said, not judged


def test_ten_percent_slower_is_a_regression(tmp_path, capsys):
    base = [case("gdpa_triton", noisy(1.0, n=25, seed=10)), case("fa4", noisy(2.0, n=25, seed=11))]
    cur = [case("gdpa_triton", noisy(1.10, n=25, seed=12)), case("fa4", noisy(2.0, n=25, seed=13))]
    rc, out, _ = run(capsys, write(tmp_path, "b.json", base), write(tmp_path, "c.json", cur))
    assert rc == 1
    slow_id = "set1/fwd/L=1024/fill=1.0/gdpa_triton"
    last = out.strip().splitlines()
    assert last[-2].startswith("REGRESSION: 1 case(s)")
    assert last[-1].startswith(f"- slower: {slow_id} (+")
    rows = by_id(
        compare_runs(
            json.loads(Path(tmp_path / "b.json").read_text()), json.loads(Path(tmp_path / "c.json").read_text())
        )
    )
    r = rows[slow_id]
    assert r["verdict"] == "slower" and r["p_value"] < 0.01 and 0.07 < r["change"] < 0.13
    assert rows["set1/fwd/L=1024/fill=1.0/fa4"]["verdict"] in ("same", "ambiguous")


def test_overlapping_noise_is_not_a_regression(tmp_path, capsys):
    base = [case("gdpa_triton", noisy(1.0, n=20, rel=0.25, seed=20))]
    cur = [case("gdpa_triton", noisy(1.04, n=20, rel=0.25, seed=21))]
    rc, _, _ = run(capsys, write(tmp_path, "b.json", base), write(tmp_path, "c.json", cur))
    assert rc == 0
    (r,) = compare_runs(synth.make_results(base), synth.make_results(cur))
    assert r["verdict"] in ("same", "ambiguous") and r["p_value"] >= 0.01


def test_failed_case_is_a_regression_with_its_error(tmp_path, capsys):
    base = [case("gdpa_triton", noisy(1.0, seed=30)), case("fa4", noisy(2.0, seed=31))]
    cur = [
        case("gdpa_triton", status="failed", error="triton.runtime.errors.OutOfResources: shared memory"),
        case("fa4", noisy(2.0, seed=31)),
    ]
    rc, out, _ = run(capsys, write(tmp_path, "b.json", base), write(tmp_path, "c.json", cur))
    assert rc == 1
    assert out.strip().splitlines()[-1] == (
        "- failed: set1/fwd/L=1024/fill=1.0/gdpa_triton (now failed: "
        "triton.runtime.errors.OutOfResources: shared memory)"
    )
    rows = by_id(compare_runs(synth.make_results(base), synth.make_results(cur)))
    assert rows["set1/fwd/L=1024/fill=1.0/gdpa_triton"]["verdict"] == "failed"
    assert rows["set1/fwd/L=1024/fill=1.0/fa4"]["verdict"] == "same"


def test_faster_missing_and_new(tmp_path, capsys):
    base = [
        case("gdpa_triton", noisy(1.0, seed=40)),
        case("fa4", noisy(2.0, seed=41)),
        case("naive", noisy(5.0, seed=42)),
    ]
    cur = [
        case("gdpa_triton", noisy(0.8, seed=43)),
        case("fa4", noisy(2.0, seed=41)),
        case("sdpa", noisy(1.5, seed=44)),
    ]
    rows = by_id(
        compare_runs(synth.make_results(base), synth.make_results(cur), CompareSettings(threshold=0.05, alpha=0.01))
    )
    assert rows["set1/fwd/L=1024/fill=1.0/gdpa_triton"]["verdict"] == "faster"
    assert rows["set1/fwd/L=1024/fill=1.0/gdpa_triton"]["change"] == pytest.approx(-0.2, abs=0.03)
    assert rows["set1/fwd/L=1024/fill=1.0/naive"]["verdict"] == "missing"
    assert rows["set1/fwd/L=1024/fill=1.0/sdpa"]["verdict"] == "new"
    b, c = write(tmp_path, "b.json", base), write(tmp_path, "c.json", cur)
    rc, out, _ = run(capsys, b, c)
    assert rc == 1  # a case that vanished from the current run fails the gate (issue 19)
    for line in ("| faster | 1 |", "| missing | 1 |", "| new | 1 |", "| same | 1 |"):
        assert line in out
    assert out.strip().splitlines()[-1] == (
        "- missing: set1/fwd/L=1024/fill=1.0/naive (in the baseline, not in the "
        "current run; --allow-missing accepts this)"
    )
    rc, out, _ = run(capsys, b, c, "--allow-missing")
    assert rc == 0 and "| missing | 1 |" in out
    assert out.strip().splitlines()[-1] == "OK: no case slower or failed (4 compared; 1 missing, not failing)."


def test_clock_normalised_change(tmp_path):
    # 32% slower, but the SM clock fell from 1980 to 1500 MHz: per clock cycle nothing changed.
    base = [case("gdpa_triton", noisy(1.0, seed=50, rel=0.01), clock=1980.0)]
    cur = [case("gdpa_triton", [x * 1.32 for x in noisy(1.0, seed=50, rel=0.01)], clock=1500.0)]
    (r,) = compare_runs(synth.make_results(base), synth.make_results(cur))
    assert r["verdict"] == "slower"  # the gate stays on wall time
    assert r["change"] == pytest.approx(0.32)
    # (1.32 · 1500/1980 − 1) = 0 up to the 1e-6 ms rounding of the stored samples
    assert r["clock_norm_change"] == pytest.approx(1.32 * 1500 / 1980 - 1, abs=1e-5)
    assert "clock-normalised" in r["message"] and "1980→1500" in r["message"]
    assert "(power/thermal?)" in r["message"]  # the record names no reason: the message cannot say which
    hot_power = {"reasons": ["sw_power_cap", "sw_thermal"], "temperature_c_max": 70}
    cur[0]["power"] = {**(cur[0].get("power") or {}), **hot_power}
    (hot,) = compare_runs(synth.make_results(base), synth.make_results(cur))
    assert "1980→1500 MHz (sw_thermal at 70 °C in the current run)" in hot["message"], hot["message"]
    no_clock = [case("gdpa_triton", noisy(1.0, seed=50), clock=None)]
    (r2,) = compare_runs(synth.make_results(no_clock), synth.make_results(cur))
    assert r2["clock_norm_change"] is None


def _power_csv(folder: Path, case_id: str, clock: float, n: int = 30) -> None:
    rows = ["time_s,gpu_index,power_w,sm_clock_mhz,mem_clock_mhz,temperature_c,reasons,case_id"]
    rows += [f"{i * 0.01:.2f},0,650,{clock + (i % 3) - 1:.0f},3201,60,," for i in range(5)]  # untagged: ignored
    rows += [f"{0.05 + i * 0.01:.2f},0,690,{clock + (i % 3) - 1:.0f},3201,60,sw_power_cap,{case_id}" for i in range(n)]
    (folder / "power.csv").write_text("\n".join(rows) + "\n")


def test_clock_from_the_power_timeline_when_the_energy_loop_is_off(tmp_path, capsys):
    # configs/ci.yaml: monitor on, energy loop 0 -> cases carry no power summary, power.csv has the clocks
    base = [case("gdpa_triton", noisy(1.0, seed=50, rel=0.01), clock=None)]
    cur = [case("gdpa_triton", [x * 1.32 for x in noisy(1.0, seed=50, rel=0.01)], clock=None)]
    for c in base + cur:
        c["power"] = None
    for name, cases, clock in (("b", base, 1980.0), ("c", cur, 1500.0)):
        (tmp_path / name).mkdir()
        write(tmp_path / name, "results.json", cases)
        _power_csv(tmp_path / name, GOOD_ID, clock)
    rc, out, _ = run(capsys, tmp_path / "b", tmp_path / "c", "--format", "json")
    (r,) = json.loads(out)["cases"]
    assert rc == 1 and r["verdict"] == "slower" and r["clock_source"] == "power.csv"
    assert (r["base_clock_mhz"], r["cur_clock_mhz"]) == (1980.0, 1500.0)
    assert r["clock_norm_change"] == pytest.approx(1.32 * 1500 / 1980 - 1, abs=1e-5)
    assert "1980→1500" in r["message"]
    # without a power.csv on one side there is no clock to normalise by
    (tmp_path / "c" / "power.csv").unlink()
    rc, out, _ = run(capsys, tmp_path / "b", tmp_path / "c", "--format", "json")
    assert json.loads(out)["cases"][0]["clock_norm_change"] is None


def test_few_samples_and_subthreshold_drift_are_ambiguous():
    few_b = [case("gdpa_triton", [1.0, 1.01, 0.99])]
    few_c = [case("gdpa_triton", [1.2, 1.21, 1.19])]
    (r,) = compare_runs(synth.make_results(few_b), synth.make_results(few_c), CompareSettings(min_samples=5))
    assert r["verdict"] == "ambiguous" and r["p_value"] is None and "too few samples" in r["message"]
    (r,) = compare_runs(synth.make_results(few_b), synth.make_results(few_b), CompareSettings(min_samples=5))
    assert r["verdict"] == "same"
    # 3.5% slower with 0.5% noise and 200 samples: significant, but under the 5% threshold
    drift_b = [case("gdpa_triton", noisy(1.0, n=200, rel=0.005, seed=60))]
    drift_c = [case("gdpa_triton", noisy(1.035, n=200, rel=0.005, seed=61))]
    (r,) = compare_runs(synth.make_results(drift_b), synth.make_results(drift_c))
    assert r["verdict"] == "ambiguous" and r["p_value"] < 1e-6
    # a 1% drift is significant too but tiny: same
    tiny_c = [case("gdpa_triton", noisy(1.01, n=200, rel=0.005, seed=62))]
    (r,) = compare_runs(synth.make_results(drift_b), synth.make_results(tiny_c))
    assert r["verdict"] == "same"


def test_not_ok_in_baseline_is_not_a_regression():
    base = [case("fa4", status="skipped", error="fa4 not installed"), case("naive", status="failed", error="x")]
    cur = [case("fa4", noisy(1.0)), case("naive", status="failed", error="y")]
    rows = by_id(compare_runs(synth.make_results(base), synth.make_results(cur)))
    assert rows["set1/fwd/L=1024/fill=1.0/fa4"]["verdict"] == "new"
    assert rows["set1/fwd/L=1024/fill=1.0/naive"]["verdict"] == "same"


def test_json_format(tmp_path, capsys):
    base = [case("gdpa_triton", noisy(1.0, n=25, seed=70))]
    cur = [case("gdpa_triton", noisy(1.2, n=25, seed=71))]
    rc, out, err = run(capsys, write(tmp_path, "b.json", base), write(tmp_path, "c.json", cur), "--format", "json")
    assert rc == 1
    doc = json.loads(out)
    assert doc["counts"]["slower"] == 1 and doc["regressions"] == ["set1/fwd/L=1024/fill=1.0/gdpa_triton"]
    assert doc["cases"][0]["verdict"] == "slower" and doc["threshold"] == 0.05
    assert "REGRESSION" in err and "set1/fwd/L=1024/fill=1.0/gdpa_triton" in err


def test_threshold_option_and_run_folder_input(tmp_path, capsys):
    base = [case("gdpa_triton", noisy(1.0, n=25, seed=80))]
    cur = [case("gdpa_triton", noisy(1.10, n=25, seed=81))]
    (tmp_path / "b").mkdir()
    write(tmp_path / "b", "results.json", base)
    c = write(tmp_path, "c.json", cur)
    rc, _, _ = run(capsys, tmp_path / "b", c, "--threshold", "0.2")
    assert rc == 0  # 10% is under a 20% threshold
    rc, _, _ = run(capsys, tmp_path / "b", c, "--threshold", "0.05")
    assert rc == 1


@pytest.mark.parametrize(
    "kind", ["missing", "invalid_json", "wrong_schema", "no_common", "bad_option", "unknown_option"]
)
def test_bad_input_exits_2_with_one_clear_line(tmp_path, capsys, kind):
    good = write(tmp_path, "good.json", [case("gdpa_triton", noisy(1.0))])
    bad = tmp_path / "bad.json"
    args = [good, bad]
    if kind == "missing":
        expect = "bad.json: no such file"
    elif kind == "invalid_json":
        bad.write_text('{"schema": "gdpa-bench/1", "cases": [')
        expect = "bad.json: not valid JSON"
    elif kind == "wrong_schema":
        bad.write_text(json.dumps({"schema": "other/2", "cases": []}))
        expect = "bad.json: schema is 'other/2', expected 'gdpa-bench/1'"
    elif kind == "no_common":
        write(tmp_path, "bad.json", [case("fa4", noisy(1.0))])
        expect = "no common case ids"
    elif kind == "bad_option":
        args = [good, good, "--alpha", "2"]
        expect = "--alpha must be in (0, 1)"
    else:
        args = [good, good, "--treshold", "0.1"]
        expect = "unrecognized arguments: --treshold 0.1"
    rc, out, err = run(capsys, *args)
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and expect in lines[0] and lines[0].startswith("error:")
    assert out == ""


def test_committed_fixture_against_itself(capsys):
    rc, out, _ = run(capsys, FIX / "run_h200" / "results.json", FIX / "run_h200")
    assert rc == 0 and "| failed | 0 |" in out


def test_the_cli_entry_point_exit_code(tmp_path):
    base = [case("gdpa_triton", noisy(1.0, n=25, seed=90))]
    cur = [case("gdpa_triton", noisy(1.25, n=25, seed=91))]
    b, c = write(tmp_path, "b.json", base), write(tmp_path, "c.json", cur)
    p = subprocess.run(
        [sys.executable, "-m", "bench", "compare", b, c], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 1 and "slower: set1/fwd/L=1024/fill=1.0/gdpa_triton" in p.stdout
    p = subprocess.run(
        [sys.executable, "-m", "bench", "compare", b, str(tmp_path / "nope.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr and "nope.json: no such file" in p.stderr


# ------------------------------------------------------------------- a gate that cannot be fooled (issue 19)

GOOD_ID = "set1/fwd/L=1024/fill=1.0/gdpa_triton"


def _doc(**case_over):
    c = case("gdpa_triton", noisy(1.0, n=25, seed=3))
    for k, v in case_over.items():
        if v is _DROP:
            c.pop(k, None)
        else:
            c[k] = v
    return synth.make_results([c])


_DROP = object()


def _drop_meta():
    d = synth.make_results([case("gdpa_triton", noisy(1.0))])
    del d["meta"]
    return d


@pytest.mark.parametrize(
    "name,doc,needle",
    [
        (
            "no_status",
            _doc(status=_DROP),
            f"cases[0] ({GOOD_ID}): status: missing; allowed: ok, incorrect, failed, skipped",
        ),
        ("null_status", _doc(status=None), "status: None; allowed: ok, incorrect"),
        ("odd_status", _doc(status="OK"), "status: 'OK'; allowed: ok, incorrect, failed, skipped"),
        (
            "string_samples",
            _doc(times_ms=["1.0", "1.1"]),
            "times_ms[0]: '1.0' is not a time; allowed: finite numbers > 0",
        ),
        ("bool_sample", _doc(times_ms=[1.0, True]), "times_ms[1]: True is not a time"),
        ("zero_sample", _doc(times_ms=[1.0, 0]), "times_ms[1]: 0 is not a time"),
        ("samples_not_list", _doc(times_ms=1.5), "times_ms: 1.5 is not a list"),
        ("median_string", _doc(median_ms="fast"), "median_ms: 'fast'; allowed: a number > 0"),
        ("ok_without_timing", _doc(times_ms=[], median_ms=None), "status 'ok' but no timing"),
        ("power_not_object", _doc(power=[1]), "power: [1]; allowed: an object or null"),
        ("clock_string", _doc(power={"sm_clock_mhz_median": "1980"}), "power.sm_clock_mhz_median: '1980'"),
        ("meta_null", {**_doc(), "meta": None}, "meta: missing, null or empty"),
        ("meta_absent", _drop_meta(), "meta: missing, null or empty"),
        ("meta_list", {**_doc(), "meta": ["gpu"]}, "meta: missing, null or empty"),
        ("case_not_object", {**_doc(), "cases": [5]}, '"cases" must be a list of objects'),
        ("cases_not_list", {**_doc(), "cases": {"a": 1}}, '"cases" must be a list of objects'),
        ("no_id", _doc(id=_DROP), 'cases[0] has no string "id"'),
        ("not_object", [1, 2], "expected a JSON object"),
        (
            "duplicate_id",
            synth.make_results([case("gdpa_triton", noisy(1.0)), case("gdpa_triton", noisy(1.0))]),
            f"cases[1] ({GOOD_ID}): id: the same id as cases[0]",
        ),
    ],
)
@pytest.mark.parametrize("side", ["baseline", "current"])
def test_malformed_results_exit_2_naming_file_and_field(tmp_path, capsys, name, doc, needle, side):
    good = write(tmp_path, "good.json", [case("gdpa_triton", noisy(1.0, n=25, seed=3))])
    bad = tmp_path / f"{name}.json"
    bad.write_text(json.dumps(doc))
    args = [bad, good] if side == "baseline" else [good, bad]
    rc, out, err = run(capsys, *args)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and out == "", (rc, out)
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}"), lines
    assert needle in lines[0], lines[0]


def test_compare_runs_checks_its_input_too():
    from results.files import ResultsError

    good = synth.make_results([case("gdpa_triton", noisy(1.0))])
    with pytest.raises(ResultsError, match=r"^current: cases\[0\] .*status: missing"):
        compare_runs(good, _doc(status=_DROP))
    with pytest.raises(ResultsError, match=r"^baseline: meta: missing"):
        compare_runs({**good, "meta": None}, good)


def ramp(n: int, start: float, end: float, rel: float = 0.003, seed: int = 0) -> list[float]:
    """Samples whose level moves linearly from `start` to `end` over the window (a clock settling)."""
    rng = np.random.default_rng(seed)
    return (np.linspace(start, end, n) * (1 + rel * rng.standard_normal(n))).tolist()


def test_drift_figure():
    from results.drift import drift

    d, p = drift([1.0] * 10 + [1.5] * 80 + [1.1] * 10)
    assert d == pytest.approx(0.1) and p < 1e-3
    assert drift([1.0] * 19) == (None, None)  # a tenth of 19 samples is one sample
    d, p = drift(noisy(1.0, n=40, rel=0.05, seed=5))  # i.i.d. noise: a difference, not a significant one
    assert p > 0.01


def test_drifting_case_gets_its_own_verdict(tmp_path, capsys):
    # baseline steady at 1.0 ms; current ramps 1.0 -> 1.16 ms within its window (median ~1.08: +8%)
    steady = noisy(1.0, n=200, rel=0.003, seed=1)
    drifting = ramp(200, 1.0, 1.16, seed=2)
    rows = compare_runs(
        synth.make_results([case("gdpa_triton", steady, clock=None)]),
        synth.make_results([case("gdpa_triton", drifting, clock=None)]),
    )
    (r,) = rows
    assert r["verdict"] == "drifting" and r["wall_verdict"] == "slower"
    assert r["cur_drift"] == pytest.approx(0.15, abs=0.02) and r["cur_drift_p"] < 1e-6
    assert abs(r["base_drift"]) < 0.01
    assert r["fails_gate"] and "no clock data to explain the slowdown" in r["message"]

    # the same drift explained by the clock (1980 -> 1830 MHz): drifting, not a regression
    cur = [case("gdpa_triton", drifting, clock=1830.0)]
    (r,) = compare_runs(synth.make_results([case("gdpa_triton", steady, clock=1980.0)]), synth.make_results(cur))
    assert r["verdict"] == "drifting" and not r["fails_gate"]
    assert abs(r["clock_norm_change"]) <= 0.05 and "not a regression" in r["message"]
    # a drift with the clock unchanged: slower per clock too, fails
    (r,) = compare_runs(
        synth.make_results([case("gdpa_triton", steady, clock=1980.0)]),
        synth.make_results([case("gdpa_triton", drifting, clock=1980.0)]),
    )
    assert r["verdict"] == "drifting" and r["fails_gate"] and "slower too" in r["message"]

    # identical drifting runs: not `same` on wall time alone, and not a failure either
    (r,) = compare_runs(
        synth.make_results([case("gdpa_triton", drifting)]), synth.make_results([case("gdpa_triton", drifting)])
    )
    assert r["verdict"] == "drifting" and r["wall_verdict"] == "same" and not r["fails_gate"]

    b = write(tmp_path, "b.json", [case("gdpa_triton", steady, clock=1980.0)])
    c = write(tmp_path, "c.json", cur)
    rc, out, _ = run(capsys, b, c)
    assert rc == 0 and "| drifting | 1 |" in out and "| drift base | drift cur |" in out
    row = next(ln for ln in out.splitlines() if ln.startswith(f"| {GOOD_ID} |")).split(" | ")
    assert row[1] == "drifting" and row[7].startswith("-0.") and row[8].startswith("+14.")  # drift base, cur
    assert out.strip().splitlines()[-1] == "OK: no case slower or failed (1 compared; 1 drifting, not failing)."
    # the drift check off: the same files give the plain wall-time verdict
    rc, out, _ = run(capsys, b, c, "--drift-threshold", "inf")
    assert rc == 1 and "| slower | 1 |" in out
    rc, out, _ = run(capsys, b, c, "--format", "json")
    doc = json.loads(out)
    assert doc["drift_threshold"] == 0.03 and doc["cases"][0]["cur_drift"] == pytest.approx(0.15, abs=0.02)


@pytest.mark.parametrize(
    "opt",
    [
        ["--drift-threshold", "0"],
        ["--drift-threshold", "nan"],
        ["--drift-threshold", "x"],
        ["--min-samples", "0"],
        ["--format", "xml"],
    ],
)
def test_bad_options_one_line(tmp_path, capsys, opt):
    good = write(tmp_path, "good.json", [case("gdpa_triton", noisy(1.0))])
    rc, out, err = run(capsys, good, good, *opt)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("error:")
    assert opt[0] in lines[0]


# ------------------------------------------------------------------------- the CPU gate end to end (issue 19)

# A provider module that replaces naive_eager (same name, registered after the built-ins through
# GDPA_BENCH_PROVIDERS) by itself plus a 50 ms stall per forward call: the regression to catch.
SLOWED_NAIVE = """
import time

from kernels.naive import NaiveEager
from kernels.registry import register


@register
class SlowedNaiveEager(NaiveEager):
    def forward(self, batch, spec):
        time.sleep(0.05)
        return super().forward(batch, spec)
"""
# configs/ci-cpu.yaml explains it: on a shared CPU runner identical runs differed by up to 4.9x on a
# case; the stall makes the slowed cases 50-200x slower.
CPU_GATE_THRESHOLD = "9"


def test_cpu_gate_runs_the_statistics_and_catches_a_slowed_provider(tmp_path, capsys):
    (tmp_path / "slowed_naive.py").write_text(SLOWED_NAIVE)
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",  # no OpenMP spin-waits fighting other processes
        PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    )
    slowed_env = dict(env, GDPA_BENCH_PROVIDERS="slowed_naive", PYTHONPATH=f"{tmp_path}{os.pathsep}{env['PYTHONPATH']}")
    cfg = str(ROOT / "configs" / "ci-cpu.yaml")
    runs = {
        "a": ([], env),
        "b": ([], env),
        # the stall slows the forward; the bwd mode replays a backward graph and is not slowed
        "slow": (["--only", "/fwd/.*naive_eager$"], slowed_env),
    }
    # side by side: the three runs see the same load on the machine at the same time
    # --no-report: the report (plots) would double each run's time and is not what is tested here
    procs = {
        k: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench",
                "run",
                cfg,
                "--out",
                str(tmp_path / k),
                "--no-progress",
                "--no-report",
                *extra,
            ],
            cwd=tmp_path,
            env=e,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k, (extra, e) in runs.items()
    }
    for k, p in procs.items():
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, (k, out[-2000:])

    def gate(cur, *extra):
        rc, out, err = run(
            capsys, tmp_path / "a", tmp_path / cur, "--format", "json", "--threshold", CPU_GATE_THRESHOLD, *extra
        )
        assert rc in (0, 1), err
        return rc, json.loads(out)

    rc, doc = gate("b")
    assert len(doc["cases"]) == 30
    assert rc == 0 and doc["regressions"] == [], doc["regressions"]
    assert all(doc["counts"][v] == 0 for v in ("slower", "failed", "missing", "new"))
    for r in doc["cases"]:  # the statistics ran on every case: no verdict for lack of samples
        assert r["n_base"] >= 5 and r["n_cur"] >= 5 and r["p_value"] is not None, r
        assert "too few samples" not in r["message"]

    rc, doc = gate("slow", "--allow-missing")
    slowed = {r["id"]: r for r in doc["cases"] if r["verdict"] != "missing"}
    assert len(slowed) == 5 and all(i.split("/")[1] == "fwd" and i.endswith("/naive_eager") for i in slowed)
    assert rc == 1 and sorted(doc["regressions"]) == sorted(slowed)
    for r in slowed.values():
        assert r["wall_verdict"] == "slower" and r["p_value"] < 0.01 and r["change"] > 5, r
    rc, doc = gate("slow")  # the 25 cases the slowed run left out fail the gate without --allow-missing
    assert rc == 1 and doc["counts"]["missing"] == 25 and len(doc["regressions"]) == 30


def test_gate_configs_time_long_enough_and_record_clocks():
    from bench.config.models import load_config

    gpu = load_config(ROOT / "configs" / "ci.yaml").model
    assert gpu.timing.rep_ms >= 300 and gpu.timing.min_reps >= 5  # 100 ms windows disagreed by up to 7.4%
    assert gpu.power.enabled and gpu.power.period_ms <= 20  # power.csv carries each case's SM clock
    cpu = load_config(ROOT / "configs" / "ci-cpu.yaml").model
    # 20 samples per case whatever a call takes (the CPU runner honours min_reps): the statistics and the
    # drift check (reports.drift, from 20 samples) run on every case
    assert cpu.device == "cpu" and cpu.timing.min_reps >= 20
