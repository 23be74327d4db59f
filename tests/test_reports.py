"""Reports: metrics arithmetic, every plot (PNG + CSV), report.md / report.html, headless Chromium."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib import image as mpimg

from reports import plots
from reports.plots import lengths as lengths_plot
from reports.plots.power import MAX_BAND_LABELS, MAX_BINS, POWER_PLOT_COLUMNS
from reports.plots.registry import PlotData
from reports.render import render_report
from results import figures, frame
from results.figures import min_bytes, tflops, utilization
from results.files import ResultsError
from results.frame import load_run
from results.power_csv import read_power

FIX = Path(__file__).parent / "fixtures"
PNG_SIG = b"\x89PNG\r\n\x1a\n"


def _load_synth():
    spec = importlib.util.spec_from_file_location("gdpa_synth", FIX / "synth.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


synth = _load_synth()

# A plot that silently fell back to a placeholder (or to the local histogram) is a test failure.
pytestmark = pytest.mark.filterwarnings("error::reports.plots.PlotWarning")


def pixel_variance(path: Path) -> float:
    img = mpimg.imread(str(path))
    gray = img[..., :3].mean(axis=-1) if img.ndim == 3 else img
    return float(gray.var())


def assert_png(path: Path, min_var: float = 1e-3) -> None:
    assert path.exists(), path
    assert path.read_bytes()[:8] == PNG_SIG, f"{path} is not a PNG"
    var = pixel_variance(path)
    assert var > min_var, f"{path} looks blank (pixel variance {var:.2e})"


def run_from(tmp: Path, results: dict, power: pd.DataFrame | None = None) -> Path:
    return synth.write_run(tmp, results, power)


# ------------------------------------------------------------------------------------------ metrics


def test_tflops_and_utilization_arithmetic():
    assert tflops(2e12, 2.0) == pytest.approx(1000.0)  # 2e12 FLOP in 2 ms = 1e15 FLOP/s
    assert tflops(4.0 * 4 * 128 * 1152 * 1024 * 1024, 1.0) == pytest.approx(
        2473.901162496
    )  # peer set1 L=1024 fill=1 fwd in 1 ms
    assert math.isnan(tflops(None, 1.0)) and math.isnan(tflops(1e12, 0)) and math.isnan(tflops(1e12, None))
    np.testing.assert_allclose(tflops([1e12, 3e12], [1.0, 2.0]), [1000.0, 1500.0])
    assert utilization(494.5, 989) == pytest.approx(0.5)
    assert math.isnan(utilization(100, None)) and math.isnan(utilization(100, 0))
    assert figures.energy_per_call(500, 2.0) == pytest.approx(1.0)
    assert figures.tflops_per_watt(350, 700) == pytest.approx(0.5)
    assert figures.ceiling_for({"bf16": 989}, "bf16") == 989 and math.isnan(figures.ceiling_for({}, "bf16"))
    assert figures.ceiling_for(700.0, "fp32") == 700.0


def test_min_bytes_and_intensity_by_hand():
    case = {
        "mode": "fwd",
        "dtype": "bf16",
        "flops": 4.0e9,
        "workload": {"total_q": 1000, "total_kv": 2000, "H": 4, "Hkv": 2, "D": 64},
    }
    Q, K = 1000 * 4 * 64, 2000 * 2 * 64  # 256 000 elements each
    assert min_bytes(case) == 2 * (2 * Q + 2 * K) == 2_048_000
    assert min_bytes({**case, "mode": "bwd"}) == 2 * (3 * Q + 4 * K) == 3_584_000
    assert min_bytes({**case, "mode": "fwd_bwd"}) == 2_048_000 + 3_584_000
    assert min_bytes({**case, "dtype": "fp32"}) == 4_096_000
    assert math.isnan(min_bytes({"mode": "fwd", "dtype": "bf16"}))
    # flattened rows work too, and the frame carries intensity = flops / min_bytes
    df = frame.cases_frame([{**case, "id": "s/fwd/L=8/p", "status": "ok", "times_ms": [1.0, 1.0, 1.0]}])
    assert df.loc[0, "min_bytes"] == 2_048_000
    assert df.loc[0, "intensity"] == pytest.approx(4.0e9 / 2_048_000)
    assert min_bytes(df.iloc[0]) == 2_048_000


def _case(provider, median, *, L=1024, mode="fwd", status="ok", fill=1.0, **kw):
    return synth.make_case(
        provider, L=L, mode=mode, fill=fill, status=status, samples=[median] * 5 if status == "ok" else None, **kw
    )


def test_speedup_vs_baseline_per_shape_and_override(tmp_path):
    cases = [
        _case("fa4", 2.0, L=512),
        _case("gdpa_triton", 1.0, L=512),
        _case("naive", 4.0, L=512),
        _case("fa4", 1.0, L=1024, status="failed", error="boom"),
        _case("gdpa_triton", 1.5, L=1024),
        _case("fa4", 3.0, L=512, mode="bwd"),
        _case("gdpa_triton", 2.0, L=512, mode="bwd"),
    ]
    path = run_from(tmp_path, synth.make_results(cases))
    _, df, _ = load_run(path)
    s = df.set_index("id")["speedup"]
    assert s["set1/fwd/L=512/fill=1.0/gdpa_triton"] == pytest.approx(2.0)
    assert s["set1/fwd/L=512/fill=1.0/naive"] == pytest.approx(0.5)
    assert s["set1/fwd/L=512/fill=1.0/fa4"] == pytest.approx(1.0)
    assert math.isnan(s["set1/fwd/L=1024/fill=1.0/gdpa_triton"])  # baseline failed on that shape
    assert s["set1/bwd/L=512/fill=1.0/gdpa_triton"] == pytest.approx(1.5)  # mode is part of the shape
    _, df2, _ = load_run(path / "results.json", baseline="naive")
    s2 = df2.set_index("id")["speedup"]
    assert s2["set1/fwd/L=512/fill=1.0/gdpa_triton"] == pytest.approx(4.0)
    assert math.isnan(s2["set1/bwd/L=512/fill=1.0/gdpa_triton"])  # no naive on that shape
    assert df2.attrs["baseline"] == "naive"


def test_load_run_derives_utilization_energy_and_keys(tmp_path):
    c = _case("gdpa_triton", 2.0, L=512, power={"avg_w": 600.0, "energy_j_per_call": None, "tflops_per_w": None})
    c["flops"] = 989e9  # 989e9 FLOP in 2 ms = 494.5 TFLOP/s
    c["util_peak"] = c["util_measured"] = None  # recorded none: derived from the run's ceilings
    _, df, wl = load_run(run_from(tmp_path, synth.make_results([c])))
    r = df.iloc[0]
    assert r["shape"] == "set1/fwd/L=512/fill=1.0" and r["panel"] == "set1/fwd/fill=1.0"
    assert r["tflops"] == pytest.approx(494.5)
    assert r["util_peak"] == pytest.approx(0.5)  # peak_tflops.bf16 = 989
    assert r["util_measured"] == pytest.approx(494.5 / 700.0)  # measured_gemm_tflops = 700
    assert r["energy_j_per_call"] == pytest.approx(600.0 * 2.0 / 1000)  # estimated from avg W × time
    assert r["tflops_per_w"] == pytest.approx(494.5 / 600.0)
    assert r["workload.total_q"] > 0 and r["power.avg_w"] == 600.0 and r["sweep.fill"] == 1.0
    assert r["label"] == "gdpa_triton" and set(wl) == {"set1/L=512/fill=1.0"}


def test_each_case_keeps_the_utilization_of_the_ceiling_it_was_measured_against(tmp_path):
    # a run resumed on another machine (or merged across GPUs) timed each case against its own GPU's GEMM
    # ceiling; the run-level one is the last calibration: it must not rewrite the cases' figures
    first, later = (_case("gdpa", 2.0, L=L) for L in (512, 1024))
    for c in (first, later):
        c["flops"] = 1338e9  # 669 TFLOP/s
    first["util_measured"], later["util_measured"] = 669.0 / 669.0, None
    data = synth.make_results([first, later])
    data["meta"]["measured_gemm_tflops"] = 700.0
    _, df, _ = load_run(run_from(tmp_path, data))
    util = df.set_index("id")["util_measured"]
    assert util[first["id"]] == pytest.approx(1.0) and util[later["id"]] == pytest.approx(669.0 / 700.0)


def test_load_run_tolerates_missing_fields(tmp_path):
    res = {
        "schema": "gdpa-bench/1",
        "meta": {},
        "cases": [
            {"id": "s/fwd/L=8/p", "status": "ok", "times_ms": [1.0, 2.0, 3.0]},
            {"id": "s/fwd/L=8/q", "semantics": "softmax", "status": "skipped", "error": None, "times_ms": None},
            {"id": "lonely", "power": None, "workload": None},
        ],
    }
    (tmp_path / "results.json").write_text(json.dumps(res))
    _, df, wl = load_run(tmp_path)
    assert list(df["shape"]) == ["s/fwd/L=8", "s/fwd/L=8", "lonely"]
    assert df.loc[0, "median_ms"] == 2.0 and df.loc[0, "max_len"] == 8 and df.loc[0, "provider"] == "p"
    assert math.isnan(df.loc[0, "tflops"]) and math.isnan(df.loc[0, "util_peak"])
    assert df.loc[1, "label"] == "q (softmax)"
    assert df.loc[2, "status"] == "failed"  # no status recorded: not trusted
    assert wl == {}


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        (json.dumps({"schema": "gdpa-bench/0", "cases": []}), "expected 'gdpa-bench/1'"),
        (json.dumps([1, 2]), "expected a JSON object"),
        (json.dumps({"schema": "gdpa-bench/1", "cases": [{"no": "id"}]}), 'has no string "id"'),
    ],
)
def test_load_run_rejects_bad_files(tmp_path, content, needle):
    p = tmp_path / "results.json"
    if content is not None:
        p.write_text(content)
    with pytest.raises(ResultsError) as e:
        load_run(p)
    msg = str(e.value)
    assert needle in msg and str(p) in msg and "\n" not in msg


# ------------------------------------------------------------------------------- full render (H200-like)


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    run = tmp_path_factory.mktemp("run") / "h200-20261201T100000Z"
    shutil.copytree(FIX / "run_h200", run)
    # Capture what make_all_plots returns inside render_report (one render for the whole module).
    import reports.render as render_mod

    captured: list = []
    real = render_mod.make_all_plots

    def spy(*a, **k):
        captured.extend(real(*a, **k))
        return captured

    render_mod.make_all_plots = spy
    try:
        out = render_report(run)
    finally:
        render_mod.make_all_plots = real
    meta, cases, wl = load_run(run)
    return {
        "run": run,
        "out": out,
        "meta": meta,
        "cases": cases,
        "workloads": wl,
        "files": captured,
        "html": out["html"].read_text(encoding="utf-8"),
        "md": out["md"].read_text(encoding="utf-8"),
    }


def _csv(run: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(run / "plots" / name)


def test_every_plot_written_valid_and_not_blank(h200):
    d = h200["run"] / "plots"
    for name in ("tflops_vs_length", "speedup", "power_timeline", "roofline", "workload_lengths"):
        assert_png(d / f"{name}.png")
        assert (d / f"{name}.csv").exists()
    assert (d / "power_timeline_cases.csv").exists()
    per_wl = sorted(d.glob("lengths_*.png"))
    assert len(per_wl) == len(h200["workloads"]) == 9
    for p in per_wl:
        assert_png(p)


def test_plot_csvs_hold_the_plotted_rows(h200):
    run, cases = h200["run"], h200["cases"]
    ok = cases[cases["status"] == "ok"]
    tf = _csv(run, "tflops_vs_length.csv")
    pts = tf[tf["kind"] == "case"]
    assert set(pts["id"]) == set(ok["id"]) and len(pts) == len(ok)
    got = pts.set_index("id")["tflops"]
    np.testing.assert_allclose(got[ok["id"]].to_numpy(), ok["tflops"].to_numpy(), rtol=1e-9)
    assert (pts.loc[pts["provider"] == "fa4", "label"] == "fa4 (softmax)").all()
    ceil = tf[tf["kind"] == "ceiling"]
    assert {989.0, 700.0} <= set(ceil["tflops"])

    sp = _csv(run, "speedup.csv")
    expect = ok[ok["speedup"].notna() & (ok["provider"] != "fa4")]
    assert set(sp["shape"] + "/" + sp["provider"]) == set(expect["id"])
    np.testing.assert_allclose(sp["speedup"], sp["baseline_median_ms"] / sp["median_ms"], rtol=1e-9)

    rf = _csv(run, "roofline.csv")
    assert len(rf[rf["kind"] == "case"]) == len(ok)
    roof = rf[(rf["kind"] == "roof") & rf["name"].str.startswith("roof:")]
    assert roof["tflops"].max() == pytest.approx(700.0)  # measured GEMM ceiling
    assert roof["intensity"].min() * 4.27 == pytest.approx(roof["tflops"].min())  # bandwidth roof: 4.27 TB/s

    power = pd.read_csv(run / "power.csv", keep_default_na=False)
    pt = _csv(run, "power_timeline.csv")
    assert len(pt) == len(power)  # short run: not downsampled
    bands = _csv(run, "power_timeline_cases.csv")
    assert set(bands["case_id"]) == set(power.loc[power["case_id"] != "", "case_id"])
    assert 0 < bands["labelled"].sum() <= MAX_BAND_LABELS

    wl = _csv(run, "workload_lengths.csv")
    assert len(wl) == sum(len(w["q_lengths"]) for w in h200["workloads"].values())
    first = next(iter(h200["workloads"]))
    assert wl.loc[wl["workload"] == first, "q_len"].tolist() == h200["workloads"][first]["q_lengths"]


def test_html_is_self_contained_with_tables_failures_and_images(h200):
    html = h200["html"]
    assert '<table class="summary">' in html and "Summary per shape" in html
    assert 'id="failures-and-skips"' in html
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.00 GiB" in html
    assert "rel_err 3.1e-01 &gt; tolerance 2.0e-02 on out" in html  # the incorrect case, escaped
    assert "fa4: head_dim 128 with seqlen_k 256 bwd unsupported" in html  # the skipped case
    assert html.count("data:image/png;base64,") >= 5 + 9
    assert "fa4 (softmax)" in html and "NVIDIA H200" in html and "h200" in html
    assert '<table class="workloads">' in html and "top-1% work share" in html
    # no external resource of any kind
    refs = re.findall(r"""\b(?:src|href)\s*=\s*["']([^"']*)""", html, re.I)
    assert refs and all(r.startswith(("data:", "#")) for r in refs), [r[:40] for r in refs]
    assert not re.search(r"""\b(?:src|href)\s*=\s*[^"'\s>]""", html, re.I)  # no unquoted attribute
    assert not re.search(r"url\(\s*['\"]?https?:", html, re.I) and "@import" not in html
    assert "<script" not in html.lower()


def test_markdown_report_has_tables(h200):
    md = h200["md"]
    assert md.startswith("# gdpa-bench report: h200 on NVIDIA H200")
    assert "| set | mode | L | sweep | dtype | best GDPA | TFLOP/s |" in md
    assert "## Failures and skips" in md and "set1/bwd/L=1024/fill=1.0/naive" in md
    assert "![" in md and "(plots/tflops_vs_length.png)" in md
    assert "gdpa_triton vs fa4 (softmax)" in md
    rows = [row for row in md.splitlines() if row.startswith("| set1 | fwd | 1024 | fill=1.0 |")]
    assert len(rows) == 1 and "| gdpa_triton |" in rows[0] and "| fa4 (softmax) |" in rows[0]


def test_make_all_plots_returns_every_file(h200):
    files = h200["files"]
    assert files and all(Path(f).exists() for f in files)
    on_disk = {p.name for p in (h200["run"] / "plots").iterdir()}
    assert {Path(f).name for f in files} == on_disk
    assert all(Path(f).parent == h200["run"] / "plots" for f in files)


# ------------------------------------------------------------------------------ edge runs and fallbacks


def _small_results(meta: dict | None = None) -> dict:
    cases = [
        _case("fa4", 2.0, L=256),
        _case("gdpa_triton", 1.6, L=256),
        _case("fa4", 6.0, L=512),
        _case("gdpa_triton", 5.0, L=512),
        synth.make_case("naive", L=512, status="failed", error="RuntimeError: kaboom in naive"),
    ]
    return synth.make_results(cases, meta)


def test_a_run_on_another_card_than_its_configs_target_says_so(tmp_path):
    """configs/ci.yaml names the H200; the device tool lent H100s for it on 2026-12-06: the overview says which card
    ran, and says nothing where the card is the target (or the config names none)."""
    h100 = synth.gpu_meta(hardware_target="H200", gpu="NVIDIA H100 80GB HBM3")
    html = render_report(run_from(tmp_path / "a", _small_results(h100)))["html"].read_text()
    assert "The config was written for H200; this run is on NVIDIA H100 80GB HBM3" in html
    for meta in (synth.gpu_meta(hardware_target="H200"), synth.gpu_meta(hardware_target=None)):
        html = render_report(run_from(tmp_path / str(id(meta)), _small_results(meta)))["html"].read_text()
        assert "The config was written for" not in html


def test_render_without_power_data_and_cap_mismatch(tmp_path):
    meta = synth.gpu_meta(
        power_cap_w=750,
        enforced_power_limit_w=1000,
        monitor={"available": False, "unavailable_reason": "nvidia-ml-py is not installed", "power_source": None},
    )
    run = run_from(tmp_path, _small_results(meta))  # no power.csv
    out = render_report(run)
    html = out["html"].read_text()
    assert "No power data: nvidia-ml-py is not installed" in html
    assert "differs from the limit the GPU enforced" in html and "⚠ differs from the cap" in html
    png = run / "plots" / "power_timeline.png"
    assert_png(png, min_var=1e-5)  # the message is drawn
    empty = pd.read_csv(run / "plots" / "power_timeline.csv")
    assert empty.empty and list(empty.columns) == list(POWER_PLOT_COLUMNS)
    assert "RuntimeError: kaboom in naive" in html


def test_power_timeline_placeholder_reason_and_downsampling(tmp_path):
    meta = synth.gpu_meta(monitor={"available": False, "unavailable_reason": "NVML: insufficient permissions"})
    plots.draw_plot("power_timeline", tmp_path / "a", PlotData(meta, pd.DataFrame(), {}))
    assert_png(tmp_path / "a" / "power_timeline.png", min_var=1e-5)
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "power.csv").write_text(
        "time_s,gpu_index,power_w,sm_clock_mhz,mem_clock_mhz,temperature_c,reasons,case_id\n"
    )
    empty = read_power(tmp_path / "e")
    assert empty is not None and empty.empty and read_power(tmp_path / "nowhere") is None
    files = plots.draw_plot(
        "power_timeline", tmp_path / "e" / "plots", PlotData(synth.gpu_meta(), pd.DataFrame(), {}, empty)
    )
    assert_png(files[0], min_var=1e-5) and pd.read_csv(files[1]).empty
    res = synth.make_results([_case("gdpa_triton", 1.0, L=256), _case("fa4", 1.2, L=256)])
    power = synth.power_frame(res, dt=0.001, per_case_s=3.0, gap_s=0.5, gpus=2)  # 2 × 7000 samples
    assert len(power) > 2 * MAX_BINS
    power.to_csv(tmp_path / "power.csv", index=False)
    files = plots.draw_plot(
        "power_timeline", tmp_path / "b", PlotData(res["meta"], pd.DataFrame(), {}, read_power(tmp_path))
    )
    assert_png(files[0])
    drawn = pd.read_csv(files[1])
    assert set(drawn["gpu_index"]) == {0, 1}
    assert (drawn.groupby("gpu_index").size() <= MAX_BINS).all()
    assert (drawn["power_w_max"] >= drawn["power_w"] - 1e-9).all()
    assert drawn["power_w_max"].max() == pytest.approx(power["power_w"].max())
    assert len(pd.read_csv(files[2])) == 2 * 2  # two cases on each of two GPUs


def test_render_with_zero_ok_cases(tmp_path):
    run = tmp_path / "cpu"
    shutil.copytree(FIX / "run_cpu", run)
    out = render_report(run)
    html, md = out["html"].read_text(), out["md"].read_text()
    assert "No case finished ok" in html and "RuntimeError: boom" in html
    assert "gdpa_triton: needs CUDA (device=cpu)" in html
    assert "## Summary per shape" in md and "| set | mode | L |" in md
    # a CPU run draws no empty frame: what has no data is one sentence (issue 32)
    for name in ("tflops_vs_length", "speedup", "roofline", "power_timeline"):
        assert not (run / "plots" / f"{name}.png").exists() and not (run / "plots" / f"{name}.csv").exists()
    not_drawn = next(line for line in md.splitlines() if line.startswith("Not drawn, having no data in this run: "))
    assert "tflops_vs_length — no ok cases" in not_drawn and "power_timeline — no power data" in not_drawn
    assert "The plot" not in md  # no "The plot X was not drawn." beside it
    # the same run on a GPU keeps its placeholders: there an empty plot is news
    data = json.loads((run / "results.json").read_text())
    data["meta"].update(device="cuda", gpu="NVIDIA H200")
    (run / "results.json").write_text(json.dumps(data))
    render_report(run)
    for name in ("tflops_vs_length", "speedup", "roofline", "power_timeline"):
        assert_png(run / "plots" / f"{name}.png", min_var=1e-5)
        assert pd.read_csv(run / "plots" / f"{name}.csv").empty
    assert (run / "report.html").read_text().count("data:image/png;base64,") >= 5
    # and each placeholder's caption says what it shows, not what the plot would have
    assert "power and SM clock over time: not drawn — no power data" in (run / "report.md").read_text()


def test_render_legacy_run_with_missing_fields(tmp_path):
    res = {
        "schema": "gdpa-bench/1",
        "meta": {"gpu": "NVIDIA H100"},
        "cases": [
            {
                "id": "set1/fwd/L=128/fill=1.0/gdpa_triton",
                "status": "ok",
                "flops": 1e12,
                "median_ms": 4.0,
                "times_ms": [4.0, 4.1, 3.9],
            },
            {"id": "set1/fwd/L=256/fill=1.0/gdpa_triton", "status": "ok", "flops": 4e12, "times_ms": [8.0]},
            {
                "id": "set1/fwd/L=256/fill=1.0/fa4",
                "semantics": "softmax",
                "status": "failed",
                "error": "ImportError: x",
            },
        ],
    }
    (tmp_path / "results.json").write_text(json.dumps(res))
    out = render_report(tmp_path / "results.json", baseline="fa4")
    html = out["html"].read_text()
    assert "ImportError: x" in html and "—" in html
    tf = pd.read_csv(tmp_path / "plots" / "tflops_vs_length.csv")
    assert sorted(tf.loc[tf["kind"] == "case", "tflops"]) == pytest.approx([250.0, 500.0])
    assert_png(tmp_path / "plots" / "tflops_vs_length.png")


def test_length_histograms_go_through_workloads_plot(tmp_path, monkeypatch):
    calls = []
    real = lengths_plot.plot_length_histogram

    def spy(q_lengths, kv_lengths, path, title):
        calls.append((np.asarray(q_lengths), np.asarray(kv_lengths), Path(path), title))
        real(q_lengths, kv_lengths, path, title)

    monkeypatch.setattr(lengths_plot, "plot_length_histogram", spy)
    wl = {
        "set1/L=64/fill=0.5": synth.make_workload("set1", 64, 0.5, B=16),
        "set2/L=64/fill=1.0": synth.make_workload("set2", 64, 1.0, B=16),
    }
    files = plots.draw_plot("workload_lengths", tmp_path, PlotData({}, pd.DataFrame(), wl))
    assert [c[3] for c in calls] == list(wl)
    assert calls[0][0].tolist() == wl["set1/L=64/fill=0.5"]["q_lengths"]
    assert calls[1][1].tolist() == [256] * 16
    assert [c[2].name for c in calls] == ["lengths_set1_L-64_fill-0.5.png", "lengths_set2_L-64_fill-1.0.png"]
    names = [Path(f).name for f in files]
    assert names[:2] == [c[2].name for c in calls]
    assert names[-2:] == ["workload_lengths.png", "workload_lengths.csv"]
    for f in files[:3]:
        assert_png(f)
    assert len(pd.read_csv(tmp_path / "workload_lengths.csv")) == 32


# ------------------------------------------------------------------------------------ headless Chromium


def test_chromium_screenshot_of_report(request, tmp_path):
    exe = shutil.which("chromium")
    if exe is None:
        if os.environ.get("GDPA_REQUIRE_CHROMIUM"):
            pytest.fail("GDPA_REQUIRE_CHROMIUM is set but `chromium` is not on PATH (apt-get install -y chromium)")
        pytest.skip("chromium not installed (set GDPA_REQUIRE_CHROMIUM=1 to make this a failure)")
    h200 = request.getfixturevalue("h200")
    shot = tmp_path / "shot.png"
    cmd = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        f"--screenshot={shot}",
        "--window-size=1400,2000",
        h200["out"]["html"].resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert shot.exists(), f"chromium wrote no screenshot (rc {proc.returncode}): {proc.stderr[-2000:]}"
    assert shot.read_bytes()[:8] == PNG_SIG
    img = mpimg.imread(str(shot))
    assert img.shape[0] == 2000 and img.shape[1] == 1400
    var = pixel_variance(shot)
    assert var > 5e-3, f"screenshot looks blank (pixel variance {var:.2e}; a blank page is 0)"
    gray = img[..., :3].mean(axis=-1)
    assert (gray < 0.5).mean() > 0.005  # text and plot lines are drawn


# ---------------------------------------------------------------------------------- the plot registry


def test_a_plot_without_a_caption_is_refused():
    from reports.plots.registry import plot

    for caption in ("", "   "):
        with pytest.raises(ValueError, match="a caption is required"):
            plot("uncaptioned", caption=caption, order=99, columns=("id",))


def test_every_png_of_a_run_is_in_its_report(h200):
    md = h200["md"]
    for png in (h200["run"] / "plots").glob("*.png"):
        assert f"(plots/{png.name})" in md, f"{png.name} is drawn but not in report.md"


def test_every_plot_module_registers_a_plot():
    import pkgutil

    from reports.plots.registry import registered

    plots.load_plot_modules()
    homes = {p.draw.__module__.rsplit(".", 1)[-1] for p in registered()}
    modules = {m.name for m in pkgutil.iter_modules(plots.__path__)} - {"common", "registry"}
    assert modules == homes


def test_adding_a_plot_is_one_decorated_function(tmp_path, monkeypatch):
    """The worked example of reports/plots/registry.py: one function with its caption — nothing else — and
    the report draws it, writes its CSV and shows it under its caption, in its place."""
    from reports.plots import registry
    from reports.plots.common import figure, ok_cases

    monkeypatch.setattr(registry, "PLOTS", dict(registry.PLOTS))

    @registry.plot("tflops_per_watt", order=35, caption="TFLOP/s per watt of every ok case.", columns=("id", "tflops"))
    def tflops_per_watt(data, out):
        ok = ok_cases(data.cases)
        if ok.empty:
            raise registry.NothingToPlot("no ok cases: nothing to plot", "TFLOP/s per watt")
        fig = figure(8, 4)
        fig.add_subplot().bar(range(len(ok)), ok["tflops"])
        return registry.Drawing(fig, {"": ok[["id", "tflops"]]})

    run = run_from(tmp_path, _small_results())
    md = render_report(run)["md"].read_text()
    assert "![TFLOP/s per watt of every ok case.](plots/tflops_per_watt.png)" in md
    assert md.index("plots/power_timeline.png") < md.index("plots/tflops_per_watt.png") < md.index("plots/roofline.png")
    assert len(pd.read_csv(run / "plots" / "tflops_per_watt.csv")) == 4
    assert_png(run / "plots" / "tflops_per_watt.png")
