"""The plot in the layout of Meta's published GDPA figures (reports/plots/meta_figures.py), from synthetic
results: which cases it draws, its panels, and that it is drawn only for a run with Meta's sets."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from reports.plots import draw_plot
from reports.plots.meta_figures import meta_cases
from reports.plots.registry import PlotData
from reports.render import render_report
from results.frame import load_run

FIX = Path(__file__).parent / "fixtures"
spec = importlib.util.spec_from_file_location("gdpa_synth", FIX / "synth.py")
synth = importlib.util.module_from_spec(spec)
spec.loader.exec_module(synth)

pytestmark = pytest.mark.filterwarnings("error::reports.plots.PlotWarning")
PROVIDERS = ("meta_gdpa", "gdpa", "fa4")
LENGTHS = (256, 512, 1024)


def meta_case(provider: str, set_: str, mode: str, L: int, fill: float, B: int = 1152, **kw) -> dict:
    """A case of Meta's benchmark as configs/peers-h200.yaml runs it: K/V of one fixed length per sequence
    (L in set 1, 256 in set 2)."""
    c = synth.make_case(provider, set_=set_, mode=mode, L=L, fill=fill, B=B, n=5, **kw)
    kv = L if set_ == "set1" else 256
    c["workload"].update(pairing="fixed_kv", max_kv=kv, total_kv=B * kv)
    return c


def meta_run(sets=(("set1", 1.0), ("set1", 0.5), ("set2", 1.0)), **kw) -> list[dict]:
    return [
        meta_case(p, s, mode, L, fill, **kw)
        for s, fill in sets
        for mode in ("fwd", "bwd", "fwd_bwd")
        for L in LENGTHS
        for p in PROVIDERS
    ]


def others() -> list[dict]:
    """Cases that are not Meta's sets: a causal one, one of another batch size, a jagged-KV one."""
    causal = meta_case("hstu", "causal_silu_256", "fwd", 256, 1.0)
    causal["workload"]["causal"] = True
    small = meta_case("gdpa", "small", "fwd", 512, 1.0, B=64)
    jagged = synth.make_case("gdpa", set_="set1", mode="fwd", L=512, fill=0.5, B=1152, case_id="jagged/fwd/L=512/gdpa")
    jagged["set"] = "jagged"
    return [causal, small, jagged]


def frame_of(tmp_path: Path, cases: list[dict]) -> pd.DataFrame:
    return load_run(synth.write_run(tmp_path / "run", synth.make_results(cases)))[1]


def test_the_panels_hold_the_ok_fwd_and_bwd_cases_of_meta_s_sets_only(tmp_path):
    cases = meta_run() + others()
    failed = meta_case("meta_gdpa", "set1", "bwd", 2048, 1.0, status="failed", error="boom")
    df = frame_of(tmp_path, [*cases, failed])
    mine = meta_cases(df)
    assert set(mine["set"]) == {"set1", "set2"} and set(mine["mode"]) == {"fwd", "bwd"}
    assert set(zip(mine["attention"], mine["fill"], strict=True)) == {("self", 1.0), ("self", 0.5), ("short_kv", 1.0)}
    files = draw_plot("meta_figures", tmp_path / "plots", PlotData({}, df, {}))
    assert [f.name for f in files] == ["meta_figures.png", "meta_figures.csv"]
    table = pd.read_csv(tmp_path / "plots" / "meta_figures.csv")
    assert len(table) == 3 * 2 * len(LENGTHS) * len(PROVIDERS)  # rows × passes × lengths × providers
    assert set(table["panel"]) == {
        f"{title} {m} sparsity = {f}"
        for title, f in (("Self attention", 1.0), ("Self attention", 0.5), ("Cross attention short KV", 1.0))
        for m in ("Fwd", "Bwd")
    }
    assert "fa4 (softmax)" in set(table["label"]) and 2048 not in set(table["max_len"])
    by_id = df.set_index("id")["tflops"]
    assert all(abs(r.tflops - by_id[r.id]) < 1e-9 for r in table.itertuples())  # the run's TFLOP/s, as recorded
    # set 2 at L=256 has K/V = L too: it is still the short-KV panel, as its set is
    assert set(table.loc[table["id"].str.startswith("set2/"), "attention"]) == {"short_kv"}


def test_only_the_sets_a_run_has_get_a_row(tmp_path):
    df = frame_of(tmp_path, meta_run(sets=(("set2", 1.0),)))
    draw_plot("meta_figures", tmp_path / "plots", PlotData({}, df, {}))
    table = pd.read_csv(tmp_path / "plots" / "meta_figures.csv")
    assert set(table["panel"]) == {
        "Cross attention short KV Fwd sparsity = 1.0",
        "Cross attention short KV Bwd sparsity = 1.0",
    }


def test_drawn_and_shown_only_for_a_run_with_meta_s_sets(tmp_path):
    with_sets = render_report(synth.write_run(tmp_path / "with", synth.make_results(meta_run() + others())))
    md = with_sets["md"].read_text()
    assert "](plots/meta_figures.png)" in md and "Meta's published GDPA figures" in md
    without = tmp_path / "without"
    render_report(synth.write_run(without, synth.make_results(others())))
    md = (without / "report.md").read_text()
    assert not (without / "plots" / "meta_figures.png").exists() and "meta_figures" not in md
    assert "](plots/tflops_vs_length.png)" in md  # the other plots are there


def test_meta_s_sets_without_an_ok_case_say_so(tmp_path):
    cases = [meta_case("meta_gdpa", "set1", "fwd", 256, 1.0, status="skipped", error="no checkout")]
    df = frame_of(tmp_path, cases)
    draw_plot("meta_figures", tmp_path / "plots", PlotData({}, df, {}))
    assert (tmp_path / "plots" / "meta_figures.png").exists()
    assert pd.read_csv(tmp_path / "plots" / "meta_figures.csv").empty
