"""Roofline: arithmetic intensity vs achieved TFLOP/s with the compute and bandwidth roofs. Points are
placed by the analytic FLOPs and compulsory bytes; where Nsight Compute read a case's counters
(bench.profiling.counters), a star marks the measured point (useful FLOPs over the DRAM bytes moved, and over the
kernels' time), with an arrow from the analytic one (CSV rows `kind=case_measured`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from kernels.modes import MODES
from reports.cpu_notes import is_cpu_run
from reports.plots.common import each_provider, figure, fmt_num, provider_colors
from reports.plots.registry import Drawing, PlotData, cases_to_draw, plot
from results.figures import ceiling_for
from results.rates import unit_for

MODE_MARKERS = {"fwd": "o", "bwd": "s", "fwd_bwd": "^"}

ROOFLINE_COLUMNS = tuple("kind name id provider label mode dtype flops min_bytes intensity tflops".split())
CAPTION = (
    "Roofline: arithmetic intensity (FLOPs over compulsory HBM bytes) vs achieved TFLOP/s; a star: the point "
    "Nsight Compute measured (DRAM bytes, kernel time)."
)


@plot("roofline", order=40, columns=ROOFLINE_COLUMNS, caption=CAPTION)
def roofline(data: PlotData, out: Path) -> Drawing:
    """Arithmetic intensity (FLOP/B, log) vs achieved TFLOP/s (log) with the compute and bandwidth roof."""
    cases, meta = data.cases, data.meta
    known = "no ok cases with known sizes and timings: nothing to plot"
    pts = cases_to_draw(cases, lambda ok: (ok["intensity"] > 0) & (ok["tflops"] > 0), known, "roofline")
    dtype = str(pts["dtype"].mode().iloc[0]) if pts["dtype"].notna().any() else None
    peaks = meta.get("peak_tflops") or {}
    sheet_c, meas_c = ceiling_for(peaks, dtype), ceiling_for(meta.get("measured_gemm_tflops"), dtype)
    sheet_b, meas_b = ceiling_for(meta.get("hbm_tb_s"), None), ceiling_for(meta.get("measured_copy_tb_s"), None)
    compute = meas_c if meas_c == meas_c and meas_c > 0 else sheet_c
    bw = meas_b if meas_b == meas_b and meas_b > 0 else sheet_b
    seen = pts[(pts["counters.intensity"] > 0) & (pts["counters.tflops"] > 0)]  # measured by Nsight Compute
    ai = np.concatenate([pts["intensity"].to_numpy(dtype=float), seen["counters.intensity"].to_numpy(dtype=float)])
    lo, hi = float(ai.min()) / 3, float(ai.max()) * 3
    for c, b in ((compute, bw), (sheet_c, sheet_b)):
        if c == c and b == b and c > 0 and b > 0:
            lo, hi = min(lo, c / b / 3), max(hi, c / b * 3)
    xs = np.geomspace(lo, hi, 256)
    fig = figure(12, 6.2)
    ax = fig.add_subplot()
    rows: list[dict] = []
    # the y axis in the unit the rates read in (a CPU run's are MFLOP/s); the CSV keeps TFLOP/s
    unit, size = unit_for(max([float(pts["tflops"].max())] + [c for c in (compute, sheet_c) if c == c and c > 0]))
    roofs: list[str] = []

    def roof(c: float, b: float, name: str, **kw: Any) -> None:
        have_c, have_b = c == c and c > 0, b == b and b > 0
        if not (have_c or have_b):
            return
        roofs.append(name)
        ys = np.minimum(np.full_like(xs, c if have_c else np.inf), b * xs if have_b else np.inf)
        ax.plot(xs, ys / size, **kw)
        # The polyline's corners are enough to redraw it.
        corners = [lo, hi] + ([c / b] if have_c and have_b and lo < c / b < hi else [])
        for x in sorted(corners):
            rows.append(
                dict(
                    kind="roof",
                    name=name,
                    intensity=x,
                    tflops=min(c if have_c else np.inf, b * x if have_b else np.inf),
                )
            )

    measured = (meas_c == meas_c and meas_c > 0) or (meas_b == meas_b and meas_b > 0)
    c_src = "measured GEMM" if meas_c == meas_c and meas_c > 0 else "datasheet"
    b_src = "measured copy" if meas_b == meas_b and meas_b > 0 else "datasheet"
    name = (f"roof: {fmt_num(compute)} TFLOP/s ({c_src})" if compute == compute else "roof: compute unknown") + (
        f", {bw:g} TB/s ({b_src})" if bw == bw else ", bandwidth unknown"
    )
    roof(compute, bw, name, color="black", lw=1.8, label=name)
    if measured and (sheet_c == sheet_c or sheet_b == sheet_b):
        sname = (
            f"datasheet roof: {fmt_num(sheet_c) if sheet_c == sheet_c else '?'} TFLOP/s, {sheet_b:g} TB/s"
            if sheet_b == sheet_b
            else f"datasheet roof: {fmt_num(sheet_c)} TFLOP/s"
        )
        roof(sheet_c, sheet_b, sname, color="gray", lw=1.2, ls=":", label=sname)
    colors = provider_colors(cases["provider"].dropna())
    points = []
    for prov, s, label, soft in each_provider(pts):
        for mode, sm in s.groupby("mode", sort=False):
            ax.scatter(
                sm["intensity"],
                sm["tflops"] / size,
                s=36,
                marker=MODE_MARKERS.get(mode, "D"),
                facecolors="none" if soft else colors.get(prov),
                edgecolors=colors.get(prov),
                linewidths=1.3,
            )
        points.append(s.assign(kind="case", name=label, provider=prov, label=label))
    for _, r in seen.iterrows():
        color = colors.get(r["provider"])
        xy, xy0 = (r["counters.intensity"], r["counters.tflops"] / size), (r["intensity"], r["tflops"] / size)
        ax.annotate("", xy=xy, xytext=xy0, arrowprops=dict(arrowstyle="->", color=color, lw=0.8))
        ax.scatter(*xy, s=110, marker="*", color=color, edgecolors="black", linewidths=0.6, zorder=3)
    if len(seen):
        ncu = {"min_bytes": seen["counters.dram_bytes"], "intensity": seen["counters.intensity"]}
        points.append(seen.assign(kind="case_measured", name=seen["label"], tflops=seen["counters.tflops"], **ncu))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    memory = "memory" if is_cpu_run(meta) else "HBM"  # a CPU has no HBM
    ax.set_xlabel(f"arithmetic intensity (FLOP / byte of compulsory {memory} traffic)")
    ax.set_ylabel(f"achieved {unit}")
    ax.grid(True, which="both", alpha=0.25)
    prov_h = [
        Line2D(
            [],
            [],
            ls="",
            marker="o",
            color=colors.get(p),
            markerfacecolor="none" if soft else colors.get(p),
            label=label,
        )
        for p, _, label, soft in each_provider(pts)
    ]
    mode_h = [
        Line2D([], [], ls="", marker=MODE_MARKERS[m], color="gray", label=m) for m in MODES if m in set(pts["mode"])
    ]
    if len(seen):
        label = "measured (Nsight Compute: DRAM bytes, kernel time)"
        mode_h.append(Line2D([], [], ls="", marker="*", color="gray", markeredgecolor="black", label=label))
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(
        handles + prov_h + mode_h,
        labels + [x.get_label() for x in prov_h + mode_h],
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    others = sorted(set(pts["dtype"].dropna().astype(str)) - {dtype})
    soft = bool((pts["semantics"] == "softmax").any())
    if roofs:
        extra = f"; points also {', '.join(others)}, drawn against this roof" if others else ""
        what = f"roofline (roof: {dtype or 'dtype unknown'}{extra}"
    else:  # no peak known (a CPU): the points alone, and a title that promises no roof
        what = f"arithmetic intensity vs achieved {unit} (no roof: no peak is known for this device"
    ax.set_title(what + ("; hollow markers: softmax providers)" if soft else ")"), fontsize=11)
    table = pd.concat([pd.DataFrame(rows), *points], ignore_index=True)
    return Drawing(fig, {"": table}, caption=CAPTION if roofs else _caption_without_roof(unit, memory, len(seen) > 0))


def _caption_without_roof(unit: str, memory: str, measured: bool) -> str:
    return (
        f"Arithmetic intensity (FLOPs over the compulsory {memory} bytes) vs achieved {unit}, one point per ok "
        "case; no roof is drawn: no compute or bandwidth peak is known for this device"
        + ("; a star: the point Nsight Compute measured." if measured else ".")
    )
