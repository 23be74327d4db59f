"""Plots of one run. Each plot writes a PNG and, beside it, a CSV of exactly the data drawn.

Files (under `<run_dir>/plots/`):

| file | what |
|---|---|
| `tflops_vs_length.png/.csv` | TFLOP/s vs max length, one line per provider, one panel per set × mode × other sweep values; datasheet peak and measured GEMM ceiling as horizontal lines (CSV rows `kind=ceiling`) |
| `speedup.png/.csv` | speedup vs the baseline provider per shape (grouped bars per panel), 1.0 line |
| `power_timeline.png/.csv` + `power_timeline_cases.csv` | power (W) and SM clock (MHz) over time from power.csv, the power cap and the enforced limit, each case a shaded band (`_cases.csv`: the bands); samples with a throttle reason (power cap, thermal, slowdown, brake) as red ticks. Downsampled to ≤ 4000 bins per GPU (mean power, max power, mean clock per bin) when longer — the CSV holds what is drawn |
| `roofline.png/.csv` | arithmetic intensity vs TFLOP/s (log-log), one point per ok case, the compute and bandwidth roof (CSV rows `kind=roof` are the roof polylines) |
| `lengths_<workload>.png` | one per workload, drawn by `workloads.plot.plot_length_histogram` (a local fallback draws it when that module is missing or raises) |
| `workload_lengths.png/.csv` | all workloads in one grid (Q and KV length histograms per workload); the CSV lists every sequence's lengths |

A plot with nothing to draw still writes its PNG (a message saying why) and a CSV with headers only.
Only the object-oriented Matplotlib API is used (Figure + FigureCanvasAgg): no pyplot global state.
"""
from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from reports.metrics import (
    MODES,
    baseline_provider,
    load_power,
    peak_for,
    provider_label,
)

DPI = 110
MAX_BINS = 4000
MAX_BAND_LABELS = 14
MODE_MARKERS = {"fwd": "o", "bwd": "s", "fwd_bwd": "^"}
THROTTLE_RE = re.compile(r"power|thermal|slowdown|brake", re.I)


class PlotWarning(UserWarning):
    """A plot could not be drawn (a placeholder PNG was written instead)."""


# -------------------------------------------------------------------------------------------- helpers


def _figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, facecolor="white")
    return path


def _write_csv(df: pd.DataFrame, path: Path, columns: Sequence[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    df = df.reindex(columns=list(columns)) if len(df) else pd.DataFrame(columns=list(columns))
    df.to_csv(path, index=False)
    return path


def placeholder(path: Path, message: str, title: str | None = None) -> Path:
    """A PNG that says why there is no plot."""
    fig = _figure(8, 2.6)
    ax = fig.add_subplot()
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=12)
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=12, wrap=True,
            bbox=dict(boxstyle="round", facecolor="#f3f3f3", edgecolor="#999999"))
    return _save(fig, path)


def _grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = max(1, min(max_cols, n))
    return math.ceil(n / cols), cols


def provider_colors(providers: Sequence[str]) -> dict[str, Any]:
    """A stable colour per provider name (tab10, then tab20 beyond ten)."""
    from matplotlib import colormaps

    names = sorted({str(p) for p in providers if p is not None})
    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {p: cmap(i % cmap.N) for i, p in enumerate(names)}


def _panel_order(df: pd.DataFrame) -> list[str]:
    """Panels sorted by set, mode (fwd, bwd, fwd_bwd) and sweep label."""
    keys = df[["panel", "set", "mode", "sweep_label"]].drop_duplicates("panel")
    keys = keys.assign(_m=keys["mode"].map(lambda m: MODES.index(m) if m in MODES else 9))
    keys = keys.sort_values(["set", "_m", "sweep_label"], key=lambda s: s.astype(str) if s.name != "_m" else s)
    return list(keys["panel"])


def _panel_title(panel: str) -> str:
    return panel.replace("/", " · ")


def _provider_order(df: pd.DataFrame) -> list[str]:
    """GDPA providers first, then softmax ones, each alphabetical."""
    pairs = df[["provider", "semantics"]].drop_duplicates("provider")
    pairs = pairs.assign(_s=(pairs["semantics"] == "softmax").astype(int)).sort_values(["_s", "provider"])
    return [str(p) for p in pairs["provider"]]


def _fmt_num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name.replace("=", "-")).strip("_") or "workload"


def _ok(cases: pd.DataFrame) -> pd.DataFrame:
    return cases[cases["status"] == "ok"] if len(cases) else cases


# --------------------------------------------------------------------------------- 1. TFLOP/s vs length

TFLOPS_COLUMNS = ("kind", "panel", "set", "mode", "sweep", "max_len", "provider", "label", "semantics",
                  "dtype", "tflops", "median_ms", "id")


def plot_tflops_vs_length(cases: pd.DataFrame, meta: dict, out_dir: str | Path) -> list[Path]:
    """TFLOP/s vs max sequence length; one line per provider, one panel per set × mode × sweep."""
    out_dir = Path(out_dir)
    png, csv = out_dir / "tflops_vs_length.png", out_dir / "tflops_vs_length.csv"
    ok = _ok(cases)
    ok = ok[ok["tflops"].notna() & ok["max_len"].notna()].drop_duplicates("id", keep="last") if len(ok) else ok
    if ok.empty:
        placeholder(png, "no ok cases with timings: nothing to plot", "TFLOP/s vs max sequence length")
        return [png, _write_csv(pd.DataFrame(), csv, TFLOPS_COLUMNS)]
    panels = _panel_order(ok)
    colors = provider_colors(cases["provider"].dropna())
    peaks = meta.get("peak_tflops") or {}
    gemm = meta.get("measured_gemm_tflops")
    rows, ceil_rows = [], []
    nr, nc = _grid(len(panels))
    fig = _figure(5.0 * nc, 3.6 * nr + 0.9)
    axes = fig.subplots(nr, nc, squeeze=False).ravel()
    handles: dict[str, Any] = {}
    for ax, panel in zip(axes, panels):
        sub = ok[ok["panel"] == panel]
        for prov in _provider_order(sub):
            s = sub[sub["provider"] == prov].sort_values("max_len")
            soft = (s["semantics"] == "softmax").any()
            label = provider_label(prov, "softmax" if soft else "gdpa")
            (line,) = ax.plot(s["max_len"], s["tflops"], marker="o", ms=4, lw=1.8, color=colors.get(prov),
                              ls="--" if soft else "-", label=label)
            handles.setdefault(label, line)
            for _, r in s.iterrows():
                rows.append(dict(kind="case", panel=panel, set=r["set"], mode=r["mode"], sweep=r["sweep_label"],
                                 max_len=int(r["max_len"]), provider=prov, label=label, semantics=r["semantics"],
                                 dtype=r["dtype"], tflops=r["tflops"], median_ms=r["median_ms"], id=r["id"]))
        ymax = float(sub["tflops"].max())
        for dtype in sorted(sub["dtype"].dropna().astype(str).unique()):
            pk = peak_for(peaks, dtype)
            if pk == pk and pk > 0:
                lab = f"datasheet peak {dtype} ({_fmt_num(pk)})"
                h = ax.axhline(pk, color="black", ls=":", lw=1.2, label=lab)
                handles.setdefault("datasheet peak", h)
                ceil_rows.append(dict(kind="ceiling", panel=panel, label=lab, dtype=dtype, tflops=pk))
                ymax = max(ymax, pk)
            g = peak_for(gemm, dtype)
            if g == g and g > 0 and not any(r["label"].startswith("measured GEMM") and r["panel"] == panel for r in ceil_rows):
                lab = f"measured GEMM ({_fmt_num(g)})"
                h = ax.axhline(g, color="dimgray", ls="-.", lw=1.2, label=lab)
                handles.setdefault("measured GEMM ceiling", h)
                ceil_rows.append(dict(kind="ceiling", panel=panel, label=lab, dtype=dtype, tflops=g))
                ymax = max(ymax, g)
        for r in ceil_rows:
            if r["panel"] == panel:
                ax.annotate(r["label"], (0.01, r["tflops"]), xycoords=("axes fraction", "data"),
                            xytext=(0, 2), textcoords="offset points", fontsize=7, color="dimgray")
        ax.set_xscale("log", base=2)
        lens = sorted(sub["max_len"].astype(int).unique())
        ax.set_xticks(lens, [str(v) for v in lens])
        ax.minorticks_off()
        ax.set_ylim(0, ymax * 1.1)
        ax.set_xlabel("max sequence length L")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(_panel_title(panel), fontsize=10)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_axis_off()
    _legend(fig, handles, "achieved TFLOP/s (dashed: softmax providers; dotted: datasheet peak; dash-dot: measured GEMM)")
    _save(fig, png)
    table = pd.DataFrame(rows + ceil_rows)
    table["max_len"] = table["max_len"].astype("Int64") if "max_len" in table else pd.NA
    return [png, _write_csv(table, csv, TFLOPS_COLUMNS)]


def _legend(fig: Figure, handles: dict[str, Any], title: str) -> None:
    fig.suptitle(title, fontsize=11)
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), loc="outside lower center",
                   ncols=min(6, len(handles)), fontsize=8, frameon=False)


# ------------------------------------------------------------------------------------------ 2. speedup

SPEEDUP_COLUMNS = ("panel", "shape", "max_len", "provider", "label", "speedup", "median_ms",
                   "baseline", "baseline_median_ms")


def plot_speedup(cases: pd.DataFrame, meta: dict, out_dir: str | Path, baseline: str | None = None) -> list[Path]:
    """Speedup of every provider vs the baseline provider, per shape: grouped bars per panel."""
    out_dir = Path(out_dir)
    png, csv = out_dir / "speedup.png", out_dir / "speedup.csv"
    base = baseline or cases.attrs.get("baseline") or baseline_provider(meta)
    title = "speedup vs baseline"
    if not base:
        placeholder(png, "no baseline provider (meta.baseline_provider unset)", title)
        return [png, _write_csv(pd.DataFrame(), csv, SPEEDUP_COLUMNS)]
    ok = _ok(cases)
    base_rows = ok[ok["provider"] == base] if len(ok) else ok
    base_sem = base_rows["semantics"].iloc[0] if len(base_rows) else None
    if len(cases) and base_sem is None:
        sem = cases.loc[cases["provider"] == base, "semantics"]
        base_sem = sem.iloc[0] if len(sem) else None
    base_label = provider_label(base, base_sem)
    pts = _recompute_speedup(ok, base)
    if pts.empty:
        why = f"baseline '{base_label}' has no ok case" if base_rows.empty else "no other provider has an ok case on a baseline shape"
        placeholder(png, f"no speedup data: {why}", f"speedup vs {base_label}")
        return [png, _write_csv(pd.DataFrame(), csv, SPEEDUP_COLUMNS)]
    base_ms = base_rows.groupby("shape")["median_ms"].min()
    panels = _panel_order(pts)
    colors = provider_colors(cases["provider"].dropna())
    nr, nc = _grid(len(panels), 2)
    fig = _figure(6.2 * nc, 3.7 * nr + 0.9)
    axes = fig.subplots(nr, nc, squeeze=False).ravel()
    rows, handles = [], {}
    for ax, panel in zip(axes, panels):
        sub = pts[pts["panel"] == panel]
        lens = sorted(sub["max_len"].astype(int).unique())
        provs = _provider_order(sub)
        width = 0.8 / max(1, len(provs))
        nbars = len(provs) * len(lens)
        for j, prov in enumerate(provs):
            s = sub[sub["provider"] == prov]
            soft = (s["semantics"] == "softmax").any()
            label = provider_label(prov, "softmax" if soft else "gdpa")
            xs, ys = [], []
            for _, r in s.iterrows():
                xs.append(lens.index(int(r["max_len"])) + (j - (len(provs) - 1) / 2) * width)
                ys.append(float(r["speedup"]))
                rows.append(dict(panel=panel, shape=r["shape"], max_len=int(r["max_len"]), provider=prov, label=label,
                                 speedup=r["speedup"], median_ms=r["median_ms"], baseline=base,
                                 baseline_median_ms=base_ms.get(r["shape"])))
            bars = ax.bar(xs, ys, width=width * 0.95, color=colors.get(prov), label=label,
                          hatch="//" if soft else None, edgecolor="white" if not soft else "black", lw=0.5)
            handles.setdefault(label, bars)
            if nbars <= 16:
                for x, y in zip(xs, ys):
                    ax.annotate(f"{y:.2f}", (x, y), ha="center", va="bottom", fontsize=7,
                                xytext=(0, 1), textcoords="offset points")
        ax.axhline(1.0, color="black", lw=1, ls="--")
        ax.set_xticks(range(len(lens)), [str(v) for v in lens])
        ax.set_xlabel("max sequence length L")
        ax.set_ylabel(f"speedup vs {base_label} (×)")
        ax.set_title(_panel_title(panel), fontsize=10)
        ax.set_ylim(0, max(1.15, float(sub["speedup"].max()) * 1.15))
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_axis_off()
    _legend(fig, handles, f"speedup vs {base_label} on the same shape (time ratio; > 1 is faster; dashed line = 1.0)")
    _save(fig, png)
    return [png, _write_csv(pd.DataFrame(rows), csv, SPEEDUP_COLUMNS)]


def _recompute_speedup(ok: pd.DataFrame, base: str) -> pd.DataFrame:
    from reports.metrics import speedup_vs_baseline

    if ok.empty:
        return ok
    ok = ok.copy()
    ok["speedup"] = speedup_vs_baseline(ok, base)
    return ok[ok["speedup"].notna() & (ok["provider"] != base)]


# ------------------------------------------------------------------------------------ 3. power timeline

POWER_PLOT_COLUMNS = ("time_s", "gpu_index", "power_w", "power_w_max", "sm_clock_mhz", "throttled", "case_id")
BAND_COLUMNS = ("gpu_index", "case_id", "provider", "start_s", "end_s", "labelled")


def _downsample(g: pd.DataFrame) -> pd.DataFrame:
    g = g.assign(throttled=g["reasons"].map(lambda s: bool(THROTTLE_RE.search(s or ""))))
    if len(g) <= MAX_BINS:
        return g.assign(power_w_max=g["power_w"])
    edges = np.linspace(g["time_s"].min(), g["time_s"].max(), MAX_BINS + 1)
    b = np.clip(np.searchsorted(edges, g["time_s"].to_numpy(), side="right") - 1, 0, MAX_BINS - 1)
    agg = g.assign(_b=b).groupby("_b").agg(
        time_s=("time_s", "mean"), gpu_index=("gpu_index", "first"), power_w=("power_w", "mean"),
        power_w_max=("power_w", "max"), sm_clock_mhz=("sm_clock_mhz", "mean"), throttled=("throttled", "any"),
        case_id=("case_id", "first"),
    )
    return agg.reset_index(drop=True)


def plot_power_timeline(power: pd.DataFrame | None, meta: dict, cases: pd.DataFrame | None,
                        out_dir: str | Path) -> list[Path]:
    """Power and SM clock over time, the cap and enforced limit, one shaded band per case."""
    out_dir = Path(out_dir)
    png = out_dir / "power_timeline.png"
    csv = out_dir / "power_timeline.csv"
    bands_csv = out_dir / "power_timeline_cases.csv"
    if power is None or power.empty or power["power_w"].notna().sum() == 0:
        mon = meta.get("monitor") if isinstance(meta.get("monitor"), dict) else {}
        reason = mon.get("unavailable_reason") or ("power.csv is missing" if power is None else "power.csv has no samples")
        placeholder(png, f"no power data: {reason}", "power and SM clock over time")
        return [png, _write_csv(pd.DataFrame(), csv, POWER_PLOT_COLUMNS),
                _write_csv(pd.DataFrame(), bands_csv, BAND_COLUMNS)]
    drawn = pd.concat([_downsample(g) for _, g in power.groupby("gpu_index", sort=True)], ignore_index=True)
    # Case bands: first to last sample of each case on each GPU.
    tagged = power[power["case_id"] != ""]
    bands = (tagged.groupby(["gpu_index", "case_id"], sort=False)["time_s"].agg(["min", "max"]).reset_index()
             .rename(columns={"min": "start_s", "max": "end_s"}).sort_values("start_s", kind="stable"))
    if len(power) > 1:
        dt = float(np.nanmedian(np.diff(power["time_s"].to_numpy()))) if len(power) > 1 else 0.0
        bands["end_s"] = bands["end_s"] + max(dt, 0.0)
    bands["provider"] = bands["case_id"].map(lambda c: c.rsplit("/", 1)[-1])
    n = len(bands)
    if n:
        # Label at most MAX_BAND_LABELS bands, evenly spread over time, so the text never piles up.
        bands = bands.reset_index(drop=True)
        pick = set(np.linspace(0, n - 1, min(n, MAX_BAND_LABELS)).round().astype(int).tolist())
        bands["labelled"] = [i in pick for i in range(n)]
    else:
        bands["labelled"] = []
    colors = provider_colors(list(bands["provider"]) + (list(cases["provider"].dropna()) if cases is not None and len(cases) else []))
    gpu_colors = ["#1f4e79", "#b03a2e", "#1e8449", "#7d3c98", "#b9770e", "#2e4053", "#117864", "#943126"]

    fig = _figure(14, 7.2)
    ax_p, ax_c = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    for _, b in bands.iterrows():
        for ax in (ax_p, ax_c):
            ax.axvspan(b["start_s"], b["end_s"], color=colors.get(b["provider"], "gray"), alpha=0.13, lw=0)
    multi = drawn["gpu_index"].nunique() > 1
    for gi, g in drawn.groupby("gpu_index"):
        c = gpu_colors[int(gi) % len(gpu_colors)]
        tag = f" (GPU {gi})" if multi else ""
        if (g["power_w_max"] > g["power_w"]).any():
            ax_p.fill_between(g["time_s"], g["power_w"], g["power_w_max"], color=c, alpha=0.25, lw=0,
                              label=f"bin max power{tag}")
        ax_p.plot(g["time_s"], g["power_w"], color=c, lw=0.9, label=f"power W{tag}")
        ax_c.plot(g["time_s"], g["sm_clock_mhz"], color=c, lw=0.9, label=f"SM clock MHz{tag}")
    cap, enforced = meta.get("power_cap_w"), meta.get("enforced_power_limit_w")
    if isinstance(cap, (int, float)) and not isinstance(cap, bool):
        ax_p.axhline(cap, color="red", ls="--", lw=1.3, label=f"power cap {cap:g} W")
    if isinstance(enforced, (int, float)) and not isinstance(enforced, bool) and enforced != cap:
        ax_p.axhline(enforced, color="darkorange", ls=":", lw=1.5, label=f"enforced limit {enforced:g} W")
    thr = drawn[drawn["throttled"]]
    if len(thr):
        lo = float(np.nanmin(drawn["sm_clock_mhz"])) if drawn["sm_clock_mhz"].notna().any() else 0.0
        ax_c.plot(thr["time_s"], np.full(len(thr), lo), "|", color="red", ms=8,
                  label="throttle reason set (power cap / thermal / slowdown)")
    ytop = max(float(np.nanmax(drawn["power_w_max"])),
               *(v for v in (cap, enforced) if isinstance(v, (int, float)) and not isinstance(v, bool)))
    # Head room above the trace for the vertical case labels.
    ax_p.set_ylim(0, ytop * 1.55)
    for _, b in bands[bands["labelled"]].iterrows():
        short = b["case_id"].replace("/fill=", "/f=")
        ax_p.text((b["start_s"] + b["end_s"]) / 2, ytop * 1.53, short, rotation=90, ha="center", va="top",
                  fontsize=6, color="#333333", clip_on=True)
    ax_p.set_ylabel("power (W)")
    ax_c.set_ylabel("SM clock (MHz)")
    ax_c.set_xlabel("time (s)")
    for ax in (ax_p, ax_c):
        ax.grid(True, alpha=0.3)
    prov_handles = [Patch(color=colors[p], alpha=0.35, label=f"case: {p}") for p in dict.fromkeys(bands["provider"])]
    h1, l1 = ax_p.get_legend_handles_labels()
    ax_p.legend(h1 + prov_handles, l1 + [h.get_label() for h in prov_handles], fontsize=7,
                loc="upper left", bbox_to_anchor=(1.005, 1.0))
    ax_c.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    note = f"; {n} cases (shaded), {int(bands['labelled'].sum())} labelled" if n else ""
    src = (meta.get("monitor") or {}).get("power_source") if isinstance(meta.get("monitor"), dict) else None
    fig.suptitle(f"power and SM clock over time{f' (source: {src})' if src else ''}{note}", fontsize=11)
    _save(fig, png)
    return [png, _write_csv(drawn, csv, POWER_PLOT_COLUMNS), _write_csv(bands, bands_csv, BAND_COLUMNS)]


# ------------------------------------------------------------------------------------------ 4. roofline

ROOFLINE_COLUMNS = ("kind", "name", "id", "provider", "label", "mode", "dtype", "flops", "min_bytes",
                    "intensity", "tflops")


def plot_roofline(cases: pd.DataFrame, meta: dict, out_dir: str | Path) -> list[Path]:
    """Arithmetic intensity (FLOP/B, log) vs achieved TFLOP/s (log) with the compute and bandwidth roof."""
    out_dir = Path(out_dir)
    png, csv = out_dir / "roofline.png", out_dir / "roofline.csv"
    ok = _ok(cases)
    pts = ok[(ok["intensity"] > 0) & (ok["tflops"] > 0)] if len(ok) else ok
    if pts.empty:
        placeholder(png, "no ok cases with known sizes and timings: nothing to plot", "roofline")
        return [png, _write_csv(pd.DataFrame(), csv, ROOFLINE_COLUMNS)]
    dtype = str(pts["dtype"].mode().iloc[0]) if pts["dtype"].notna().any() else None
    peaks = meta.get("peak_tflops") or {}
    sheet_c, meas_c = peak_for(peaks, dtype), peak_for(meta.get("measured_gemm_tflops"), dtype)
    sheet_b, meas_b = peak_for(meta.get("hbm_tb_s"), None), peak_for(meta.get("measured_copy_tb_s"), None)
    compute = meas_c if meas_c == meas_c and meas_c > 0 else sheet_c
    bw = meas_b if meas_b == meas_b and meas_b > 0 else sheet_b
    ai = pts["intensity"].to_numpy(dtype=float)
    lo, hi = float(ai.min()) / 3, float(ai.max()) * 3
    for c, b in ((compute, bw), (sheet_c, sheet_b)):
        if c == c and b == b and c > 0 and b > 0:
            lo, hi = min(lo, c / b / 3), max(hi, c / b * 3)
    xs = np.geomspace(lo, hi, 256)
    fig = _figure(12, 6.2)
    ax = fig.add_subplot()
    rows: list[dict] = []

    def roof(c: float, b: float, name: str, **kw: Any) -> None:
        have_c, have_b = c == c and c > 0, b == b and b > 0
        if not (have_c or have_b):
            return
        ys = np.minimum(np.full_like(xs, c if have_c else np.inf), b * xs if have_b else np.inf)
        ax.plot(xs, ys, **kw)
        # The polyline's corners are enough to redraw it.
        corners = [lo, hi] + ([c / b] if have_c and have_b and lo < c / b < hi else [])
        for x in sorted(corners):
            rows.append(dict(kind="roof", name=name, intensity=x,
                             tflops=min(c if have_c else np.inf, b * x if have_b else np.inf)))

    measured = (meas_c == meas_c and meas_c > 0) or (meas_b == meas_b and meas_b > 0)
    c_src = "measured GEMM" if meas_c == meas_c and meas_c > 0 else "datasheet"
    b_src = "measured copy" if meas_b == meas_b and meas_b > 0 else "datasheet"
    name = (f"roof: {_fmt_num(compute)} TFLOP/s ({c_src})" if compute == compute else "roof: compute unknown") + \
           (f", {bw:g} TB/s ({b_src})" if bw == bw else ", bandwidth unknown")
    roof(compute, bw, name, color="black", lw=1.8, label=name)
    if measured and (sheet_c == sheet_c or sheet_b == sheet_b):
        sname = f"datasheet roof: {_fmt_num(sheet_c) if sheet_c == sheet_c else '?'} TFLOP/s, " \
                f"{sheet_b:g} TB/s" if sheet_b == sheet_b else f"datasheet roof: {_fmt_num(sheet_c)} TFLOP/s"
        roof(sheet_c, sheet_b, sname, color="gray", lw=1.2, ls=":", label=sname)
    colors = provider_colors(cases["provider"].dropna())
    for prov in _provider_order(pts):
        s = pts[pts["provider"] == prov]
        soft = (s["semantics"] == "softmax").any()
        label = provider_label(prov, "softmax" if soft else "gdpa")
        for mode, sm in s.groupby("mode", sort=False):
            ax.scatter(sm["intensity"], sm["tflops"], s=36, marker=MODE_MARKERS.get(mode, "D"),
                       facecolors="none" if soft else colors.get(prov), edgecolors=colors.get(prov), linewidths=1.3)
        for _, r in s.iterrows():
            rows.append(dict(kind="case", name=label, id=r["id"], provider=prov, label=label, mode=r["mode"],
                             dtype=r["dtype"], flops=r["flops"], min_bytes=r["min_bytes"],
                             intensity=r["intensity"], tflops=r["tflops"]))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP / byte of compulsory HBM traffic)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(True, which="both", alpha=0.25)
    prov_h = [Line2D([], [], ls="", marker="o", color=colors.get(p),
                     markerfacecolor="none" if (pts.loc[pts["provider"] == p, "semantics"] == "softmax").any() else colors.get(p),
                     label=provider_label(p, pts.loc[pts["provider"] == p, "semantics"].iloc[0])) for p in _provider_order(pts)]
    mode_h = [Line2D([], [], ls="", marker=MODE_MARKERS[m], color="gray", label=m) for m in MODES if m in set(pts["mode"])]
    h, l = ax.get_legend_handles_labels()
    ax.legend(h + prov_h + mode_h, l + [x.get_label() for x in prov_h + mode_h], fontsize=8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(f"roofline ({dtype or 'dtype unknown'}; hollow markers: softmax providers)", fontsize=11)
    _save(fig, png)
    return [png, _write_csv(pd.DataFrame(rows), csv, ROOFLINE_COLUMNS)]


# ------------------------------------------------------------------------------- 5. length histograms

LENGTHS_COLUMNS = ("workload", "seq", "q_len", "kv_len")


def _fallback_length_histogram(q_lengths: Any, kv_lengths: Any, path: str | Path, title: str) -> None:
    """Used only when `workloads.plot` cannot be imported or fails: Q and KV length histograms."""
    fig = _figure(6.4, 3.6)
    ax = fig.add_subplot()
    _draw_lengths(ax, np.asarray(q_lengths), np.asarray(kv_lengths))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    _save(fig, Path(path))


def _draw_lengths(ax: Any, q: np.ndarray, kv: np.ndarray) -> None:
    hi = int(max(q.max(initial=1), kv.max(initial=1)))
    bins = np.linspace(0, hi + 1, min(60, hi + 2))
    # np.histogram + stairs: same picture as ax.hist, far fewer artists (faster to draw).
    if q.size:
        ax.stairs(np.histogram(q, bins)[0], bins, fill=True, alpha=0.45, color="#1f77b4",
                  label=f"Q (mean {q.mean():.0f})")
    if kv.size:
        ax.stairs(np.histogram(kv, bins)[0], bins, lw=1.5, color="#d62728", label=f"KV (mean {kv.mean():.0f})")
    ax.set_xlabel("length")
    ax.set_ylabel("sequences")
    ax.grid(True, alpha=0.3)


def _length_histogram_fn() -> Callable[..., Any]:
    try:
        from workloads.plot import plot_length_histogram  # another engineer's module (DESIGN §2)
    except ImportError as e:
        warnings.warn(f"workloads.plot unavailable ({e}); drawing length histograms locally", PlotWarning, stacklevel=3)
        return _fallback_length_histogram
    return plot_length_histogram


def plot_length_histograms(workloads: dict, out_dir: str | Path) -> list[Path]:
    """One `lengths_<workload>.png` per workload via `workloads.plot.plot_length_histogram`, plus the
    grid `workload_lengths.png` and `workload_lengths.csv` (every sequence's Q and KV length)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, csv = out_dir / "workload_lengths.png", out_dir / "workload_lengths.csv"
    items = []
    for name, w in (workloads or {}).items():
        if not isinstance(w, dict):
            continue
        q = np.asarray([x for x in (w.get("q_lengths") or []) if x is not None], dtype=np.int64)
        kv = np.asarray([x for x in (w.get("kv_lengths") or []) if x is not None], dtype=np.int64)
        if q.size or kv.size:
            items.append((str(name), q, kv))
    if not items:
        placeholder(png, "no workload lengths recorded in results.json", "workload length distributions")
        return [png, _write_csv(pd.DataFrame(), csv, LENGTHS_COLUMNS)]
    written: list[Path] = []
    fn = _length_histogram_fn()
    for name, q, kv in items:
        path = out_dir / f"lengths_{_slug(name)}.png"
        title = name  # plot_length_histogram adds B and the means itself
        try:
            fn(q, kv, path, title)
        except Exception as e:  # noqa: BLE001 — someone else's plot must not sink the report
            warnings.warn(f"workloads.plot.plot_length_histogram failed for {name}: {e!r}; drawing locally",
                          PlotWarning, stacklevel=2)
            _fallback_length_histogram(q, kv, path, title)
        if path.exists():
            written.append(path)
    nr, nc = _grid(len(items), 4)
    fig = _figure(4.2 * nc, 2.9 * nr + 0.5)
    axes = fig.subplots(nr, nc, squeeze=False).ravel()
    rows = []
    for ax, (name, q, kv) in zip(axes, items):
        _draw_lengths(ax, q, kv)
        ax.set_title(f"{name}  (B={max(q.size, kv.size)})", fontsize=9)
        ax.legend(fontsize=7)
        n = max(q.size, kv.size)
        qq = np.concatenate([q, np.full(n - q.size, -1)]) if q.size < n else q
        kk = np.concatenate([kv, np.full(n - kv.size, -1)]) if kv.size < n else kv
        rows.append(pd.DataFrame({"workload": name, "seq": np.arange(n), "q_len": qq, "kv_len": kk}))
    for ax in axes[len(items):]:
        ax.set_axis_off()
    fig.suptitle("workload length distributions (filled: Q lengths, red outline: KV lengths)", fontsize=11)
    _save(fig, png)
    lengths = pd.concat(rows, ignore_index=True).replace(-1, pd.NA)
    return written + [png, _write_csv(lengths, csv, LENGTHS_COLUMNS)]


# ----------------------------------------------------------------------------------------------- all


def make_all_plots(run_dir: str | Path, meta: dict, cases: pd.DataFrame, workloads: dict,
                   baseline: str | None = None) -> list[Path]:
    """Every plot of a run into `<run_dir>/plots/`; returns every file written (PNGs and CSVs).

    A plot that raises is replaced by a placeholder PNG naming the error (and a `PlotWarning`), so one
    broken plot never stops the report.
    """
    run_dir = Path(run_dir)
    if run_dir.is_file():
        run_dir = run_dir.parent
    out = run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    power = load_power(run_dir)
    jobs: list[tuple[str, Callable[[], list[Path]]]] = [
        ("tflops_vs_length", lambda: plot_tflops_vs_length(cases, meta, out)),
        ("speedup", lambda: plot_speedup(cases, meta, out, baseline=baseline)),
        ("power_timeline", lambda: plot_power_timeline(power, meta, cases, out)),
        ("roofline", lambda: plot_roofline(cases, meta, out)),
        ("workload_lengths", lambda: plot_length_histograms(workloads, out)),
    ]
    written: list[Path] = []
    for name, job in jobs:
        try:
            written.extend(job())
        except Exception as e:  # noqa: BLE001
            warnings.warn(f"plot {name} failed: {e!r}", PlotWarning, stacklevel=2)
            written.append(placeholder(out / f"{name}.png", f"plot failed: {type(e).__name__}: {e}", name))
    return written
