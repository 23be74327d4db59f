"""The metric table (results.metrics) is the one source of a case record's fields, the results frame's
columns, the report's tables and the field reference in docs/DESIGN.md §6: each is checked against it
here, and adding a metric is shown to take one row."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest

from bench.monitor.measure import power_of_window
from reports.sections import build_sections
from results import metrics
from results.files import ResultsWriter
from results.frame import cases_frame, load_run
from results.metric_row import KINDS, VIEWS
from results.metrics import METRICS, WORKLOAD_METRICS, Metric, field_reference, shown_in
from results.record import UndeclaredField, check_case_record, new_case_record
from workloads.stats import STATS_KEYS, length_stats

ROOT = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures"


def _synth():
    spec = importlib.util.spec_from_file_location("gdpa_synth_metrics", FIX / "synth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


synth = _synth()


def keys_of(block: str, table=METRICS) -> set[str]:
    return {m.key for m in table if m.block == block}


def test_names_are_unique_and_rows_are_well_formed():
    for table in (METRICS, WORKLOAD_METRICS):
        names = [m.name for m in table]
        assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]
        for m in table:
            assert m.kind in KINDS and m.description, m
            assert all(v in VIEWS for v in m.shown), m
            assert bool(m.shown) == bool(m.header), f"{m.name}: a shown row needs a header, and only a shown row"
            if m.block is not None:
                assert any(b.name == m.block and b.kind in ("block", "table") for b in table), f"{m.name}: no {m.block}"
            if m.source == "frame":
                assert m.block is None, f"{m.name}: a derived column is a top-level column"


def test_the_blank_record_is_every_always_present_row_in_table_order():
    rec = new_case_record(id="s/fwd/L=8/p")
    expected = [m.name for m in METRICS if m.in_record and m.block is None and not m.optional]
    assert list(rec) == expected
    assert rec["times_ms"] == [] and rec["status"] is None and rec["id"] == "s/fwd/L=8/p"


def test_an_undeclared_field_is_refused_before_it_is_written(tmp_path):
    writer = ResultsWriter(tmp_path, {"started_at": "x"})
    rec = new_case_record(id="a/fwd/L=8/p", status="ok")
    with pytest.raises(UndeclaredField, match="'made_up'"):
        writer.add_case({**rec, "made_up": 1})
    with pytest.raises(UndeclaredField, match=r"'power\.made_up'"):
        check_case_record({**rec, "power": {"avg_w": 1.0, "made_up": 2}})
    with pytest.raises(UndeclaredField):
        new_case_record(id="x", tflops_typo=1.0)
    writer.add_case(rec)  # a declared record is written
    assert [c["id"] for c in writer.data["cases"]] == ["a/fwd/L=8/p"]


def test_the_monitors_power_dict_is_exactly_the_declared_block():
    window = {
        "power_w": [690.0, 700.0, 705.0],
        "sm_clock_mhz": [1700, 1650, 1600],
        "temperature_c": [60, 61, 62],
        "reason_masks": [0, 4, 4],
        "times_s": [0.0, 0.1, 0.2],
        "energy_times_s": [0.0, 0.1, 0.2],
        "energy_mj": [0, 70_000, 140_000],
    }
    power = power_of_window(
        window, calls=10, seconds=0.2, wall_s=0.2, e0=0, e1=140_000, cap_w=700.0, flops_per_call=1e9
    )
    power.update(settle_s=1.0, power_source="instant", monitor_error=None)  # what PowerMonitor.measure adds
    assert set(power) == keys_of("power")


def test_the_workload_block_and_the_workload_entry_are_exactly_declared():
    from bench.config.models import load_config

    w = load_config(ROOT / "configs" / "smoke.yaml").cases[0].workload
    q, kv = w.lengths()
    assert set(w.record_fields(length_stats(q, kv))) == keys_of("workload")
    assert [m.key for m in WORKLOAD_METRICS if m.block == "stats"] == list(STATS_KEYS)


def test_the_gate_writes_the_declared_correctness_block():
    import torch

    from bench.case.gate import correctness
    from kernels.registry import CaseSpec, get_provider
    from workloads.batch import make_batch

    b = make_batch([3, 5], [3, 5], H=2, D=16, dtype=torch.float32, seed=0)
    got = correctness(get_provider("naive_eager"), b, CaseSpec(), "fwd", 1e-2, 4, 0)
    assert set(got) == keys_of("correctness")


def test_every_frame_column_exists_and_derived_rows_are_computed():
    df = cases_frame(synth.h200_run()["cases"], synth.gpu_meta())
    for m in metrics.frame_columns():
        assert m.name in df.columns, m.name
    ok = df[df["ok"]]
    assert ok["tflops"].notna().all() and ok["power_w"].notna().any() and ok["intensity"].notna().all()
    assert df.loc[~df["ok"], "median_ms"].isna().all()


def test_report_tables_follow_the_views(tmp_path):
    meta, cases, workloads = load_run(synth.write_run(tmp_path, synth.h200_run()))
    _, sections = build_sections(meta, cases, workloads, [], "fa4")
    tables = {b.css: b for s in sections for b in s.blocks if hasattr(b, "css")}
    assert tables["cases"].headers == [m.header for m in shown_in("cases")]
    summary = tables["summary"].headers
    assert summary[6 : 6 + len(shown_in("summary"))] == [m.header for m in shown_in("summary")]
    assert tables["workloads"].headers[1:] == [m.header for m in shown_in("workloads", WORKLOAD_METRICS)]


def test_the_design_doc_holds_the_generated_field_reference():
    text = (ROOT / "docs" / "DESIGN.md").read_text()
    m = re.search(
        r"<!-- fields: generated by `gdpa-bench fields`, do not edit by hand -->\n(.*)\n<!-- end of fields -->",
        text,
        re.S,
    )
    assert m, "docs/DESIGN.md §6 lost its generated field reference"
    assert m.group(1) == field_reference(), (
        "docs/DESIGN.md §6 is stale: paste the output of `gdpa-bench fields` between its markers"
    )


def test_adding_a_metric_is_one_row(tmp_path, monkeypatch):
    """The worked example of results/metrics.py: one new row — the bandwidth the compulsory bytes take —
    and nothing else appears in the frame, in the report's cases table and in the field reference."""
    row = Metric(
        "achieved_tb_s", "TB/s", "frame", "min_bytes / (median_ms · 1e-3) / 1e12",
        "bandwidth the compulsory bytes would take at the measured time", shown=("cases",), header="TB/s",
        fmt="frac", derive=lambda df, meta: df["min_bytes"] / df["median_ms"] / 1e9,
    )  # fmt: skip
    at = next(i for i, m in enumerate(METRICS) if m.name == "intensity") + 1
    monkeypatch.setattr(metrics, "METRICS", (*METRICS[:at], row, *METRICS[at:]))

    run = synth.write_run(tmp_path, synth.h200_run())
    meta, cases, workloads = load_run(run)
    ok = cases[cases["ok"]].iloc[0]
    assert ok["achieved_tb_s"] == pytest.approx(ok["min_bytes"] / ok["median_ms"] / 1e9)
    _, sections = build_sections(meta, cases, workloads, [], "fa4")
    table = next(b for s in sections for b in s.blocks if getattr(b, "css", "") == "cases")
    col = table.headers.index("TB/s")
    assert table.headers[col - 1] == "FLOP/B" and any(r[col] == f"{ok['achieved_tb_s']:.3f}" for r in table.rows)
    assert "| `achieved_tb_s` | TB/s | frame |" in field_reference()
    assert not math.isnan(ok["achieved_tb_s"])


def test_sm_cycles_are_the_median_at_the_samples_own_clock():
    """`sm_mcycles` = median_ms · sm_clock_mhz / 1000: two kernels at a binding power cap compare by it where time
    only says which one drew less power a cycle; a case without a clock reading has none (NaN, not 0)."""
    cases = synth.h200_run()["cases"][:3]
    cases[0] = {**cases[0], "median_ms": 2.0, "sm_clock_mhz": 1650.0}
    cases[1] = {**cases[1], "median_ms": 2.0, "sm_clock_mhz": 1980.0}
    cases[2] = {**cases[2], "sm_clock_mhz": None}
    df = cases_frame(cases, synth.gpu_meta())
    assert df["sm_mcycles"].iloc[0] == pytest.approx(3.3) and df["sm_mcycles"].iloc[1] == pytest.approx(3.96)
    assert math.isnan(df["sm_mcycles"].iloc[2])
