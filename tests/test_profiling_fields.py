"""The profiling views' fields are rows of the metric table (results.metrics): the records the harness writes
hold exactly the declared keys and table columns, an undeclared one is refused, a table inside the cases
reads back in long form, and the report's "Where the time goes" tables are the table's views."""

from __future__ import annotations

import json
import textwrap

import pandas as pd
import pytest

from bench.cli.parser import main
from bench.profiling import breakdown as bd
from bench.profiling.counters import not_run, summarize
from bench.profiling.views import CaseProfiling
from reports.document import Section, Table
from reports.profiling import profiling_section
from results.frame import cases_frame, load_run, table_frame
from results.metrics import METRICS, metric, shown_in, table_columns
from results.record import UndeclaredField, check_case_record, new_case_record


def tables_in(section: Section):
    for b in section.blocks:
        if isinstance(b, Section):
            yield from tables_in(b)
        elif isinstance(b, Table):
            yield b


def keys_of(block: str) -> set[str]:
    return {m.key for m in METRICS if m.block == block}


def ncu_kernel(name="k", **over) -> dict:
    row = dict(name=name, duration_ns=2e6, tensor_pct=40.0, sm_clock_hz=1.8e9, sm_pct=70.0, dram_pct=20.0)
    row |= dict(occupancy_pct=12.0, registers=168.0, local_ld=0.0, local_st=4.0, dram_read_bytes=1e6)
    return row | {"dram_write_bytes": 0.0} | over


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A CPU run with a kernel breakdown and length bands on every case (2 cases)."""
    tmp = tmp_path_factory.mktemp("views")
    cfg = tmp / "cfg.yaml"
    cfg.write_text(
        textwrap.dedent("""
        name: t
        device: cpu
        providers: [naive_eager]
        modes: [fwd, bwd]
        timing: {warmup_ms: 1, rep_ms: 2, min_reps: 2, max_reps: 2}
        power: {enabled: false}
        hardware: {calibrate: false}
        breakdown: {enabled: true, calls: 1}
        bands: {only: naive_eager, edges: [8, 16]}
        sets:
          - {name: s, B: 6, H: 2, D: 16, dtype: fp32, activation: silu, max_len: 24,
             lengths: {family: uniform_fill, fill: 0.5}, kv: {rule: self}}
        """)
    )
    assert main(["run", str(cfg), "--out", str(tmp / "run"), "--no-progress"]) == 0
    return tmp / "run"


def test_the_records_hold_exactly_the_declared_fields(run):
    cases = json.loads((run / "results.json").read_text())["cases"]
    for c in cases:
        # a GPU breakdown adds the device-side keys and its verdict; `trace` only where a trace was asked for
        gpu_only = {"unattributed_ms", "pass_sum_ms", "idle_share", "sum_over_pass", "sum_over_median", "accounting"}
        assert set(c["kernels"]) == keys_of("kernels") - gpu_only - {"trace"}
        assert c["kernels"]["pass_calls"] >= 2 and c["kernels"]["pass_median_ms"] > 0
        assert {k for r in c["kernels"]["rows"] for k in r} == keys_of("kernels.rows") - {"rule"}
        assert set(c["bands"]) == keys_of("bands")
        ok = [r for r in c["bands"]["rows"] if r["status"] == "ok"]
        assert ok and all(set(r) == keys_of("bands.rows") for r in ok)
    gpu = bd.summarize({"k": [10.0, 1]}, 1, "cuda", lambda name: "launch")
    gpu |= {"unattributed_ms": 0.0, "trace": "traces/k.json", "pass_median_ms": 0.011, "pass_calls": 10}
    gpu |= {"pass_sum_ms": 0.0105}
    assert CaseProfiling.judge(gpu, {"median_ms": 0.01}) == {"host_bound": False}
    assert set(gpu) == keys_of("kernels") and set(gpu["rows"][0]) == keys_of("kernels.rows")
    counters = summarize([ncu_kernel()], 1e9)
    # `replayed` only where the ncu child replayed a plan (bench.profiling.counters.replaying: the op's cases)
    assert set(counters) == keys_of("counters") - {"replayed"}
    assert set(counters["kernels"][0]) == keys_of("counters.kernels")
    assert set(not_run("skipped", "why")) <= keys_of("counters")


def test_an_undeclared_table_column_is_refused():
    rec = new_case_record(id="s/fwd/L=8/p", status="ok")
    check_case_record({**rec, "kernels": {"rows": [{"name": "k", "ms": 1.0}]}})
    with pytest.raises(UndeclaredField, match=r"'kernels\.rows\.made_up'"):
        check_case_record({**rec, "kernels": {"rows": [{"name": "k", "made_up": 1}]}})
    with pytest.raises(UndeclaredField, match=r"'counters\.kernels\.spills'"):
        check_case_record({**rec, "counters": {"status": "ok", "kernels": [{"spills": 3}]}})
    assert all(m.name not in rec for m in METRICS if m.block in ("kernels", "bands", "counters"))


def test_a_table_reads_back_in_long_form():
    cases = cases_frame(
        [
            {"id": "s/fwd/L=8/a", "status": "ok", "kernels": {"rows": [{"name": "x", "ms": 2.0}, {"name": "y"}]}},
            {"id": "s/fwd/L=8/b", "status": "ok"},
        ]
    )
    assert cases["kernels.rows"].tolist() == [[{"name": "x", "ms": 2.0}, {"name": "y"}], []]
    long = table_frame(cases, "kernels.rows", ("id",))
    assert list(long.columns) == ["id", *(m.name for m in table_columns("kernels.rows"))]
    assert long["id"].tolist() == ["s/fwd/L=8/a"] * 2 and long["kernels.rows.ms"].tolist()[0] == 2.0
    assert pd.isna(long["kernels.rows.ms"].iloc[1]) and long["kernels.rows.share"].isna().all()
    assert table_frame(cases.iloc[0:0], "bands.rows").empty


def test_the_sections_tables_are_the_views(run):
    meta, cases, _ = load_run(run)
    data = json.loads((run / "results.json").read_text())
    data["cases"][0]["counters"] = summarize([ncu_kernel("dq"), ncu_kernel("dkdv", tensor_pct=60.0)], 1e9)
    cases = cases_frame(data["cases"], meta)
    section = profiling_section(cases)
    tables = list(tables_in(section))
    for view, table in (("kernels", "kernels.rows"), ("counters", "counters.kernels"), ("bands", "bands.rows")):
        per_case, long = [t for t in tables if t.css == view]
        assert per_case.headers == [m.header for m in shown_in(view)]
        assert long.headers == [metric("id").header, *(m.header for m in shown_in(view, table_columns(table)))]
    counters = next(t for t in tables if t.css == "counters")
    assert len(counters.rows) == 1 and counters.rows[0][:3] == [data["cases"][0]["id"], "ok", "50.0%"]
    ratio = cases["kernels_over_median"].iloc[0]
    assert ratio == pytest.approx(cases["kernels.sum_ms"].iloc[0] / cases["median_ms"].iloc[0])
    # the report's "sum / median" is the recorded kernels.sum_over_median (the pass's own calls) where there is one
    data["cases"][0]["kernels"]["sum_over_median"] = 0.5
    assert cases_frame(data["cases"], meta)["kernels_over_median"].iloc[0] == 0.5
    assert cases["bands_achieved"].iloc[0] == pytest.approx(
        cases["tflops"].iloc[0] / cases["bands.ceiling_tflops"].iloc[0]
    )
    assert cases["kernels_top"].iloc[0].count("%") == 3


def test_no_view_without_the_data():
    cases = cases_frame([{"id": "s/fwd/L=8/a", "status": "ok", "median_ms": 1.0, "times_ms": [1.0]}])
    assert profiling_section(cases) is None
