"""Kernel breakdown: per shape, one stacked bar per provider — the kernels one call launches, by time per
call — with the case's timed median beside it (the bar's height is the kernels' sum: the gap to the median
is launch gaps and host work between kernels)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib import colormaps
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from kernels.modes import MODES
from reports.plots.common import figure, grid, legend, ok_cases, panel_title
from reports.plots.registry import Drawing, NothingToPlot, PlotData, plot
from results.frame import table_frame
from results.kernel_names import short_kernel_name
from results.metrics import table_columns

KEEP = ("id", "shape", "set", "mode", "sweep_label", "max_len", "provider", "label", "median_ms", "kernels.source")
COLUMNS = (*KEEP, *(m.name for m in table_columns("kernels.rows")), "short")
TOP_KERNELS = 12  # kernels with their own colour (by total time over the run); the rest are "other kernels"
OTHER = "other kernels"
CAPTION = (
    "Kernel breakdown: the kernels one call launches, stacked per provider and shape (time per call); the black "
    "line is the case's timed median."
)


def _shape_order(rows: pd.DataFrame) -> list[str]:
    keys = rows.drop_duplicates("shape")
    keys = keys.assign(
        _m=keys["mode"].map(lambda m: MODES.index(m) if m in MODES else 9),
        _s=keys["set"].astype(str),
        _w=keys["sweep_label"].astype(str),
        _L=keys["max_len"].fillna(-1),
    ).sort_values(["_s", "_m", "_w", "_L"], kind="stable")
    return list(keys["shape"])


@plot("kernel_breakdown", order=60, columns=COLUMNS, caption=CAPTION)
def kernel_breakdown(data: PlotData, out: Path) -> Drawing:
    rows = table_frame(ok_cases(data.cases), "kernels.rows", KEEP)
    if rows.empty:
        why = "no case has a kernel breakdown (recorded on GPU runs; config `breakdown.enabled`)"
        raise NothingToPlot(why, "kernel breakdown")
    rows["short"] = rows["kernels.rows.name"].map(short_kernel_name)
    ms = pd.to_numeric(rows["kernels.rows.ms"], errors="coerce").fillna(0.0)
    rows["kernels.rows.ms"] = ms
    top = list(rows.assign(ms=ms).groupby("short")["ms"].sum().sort_values(ascending=False).index[:TOP_KERNELS])
    cmap = colormaps["tab20"]
    colors = {name: cmap(i % cmap.N) for i, name in enumerate(top)} | {OTHER: "#bdbdbd"}
    shapes = _shape_order(rows)
    n_rows, n_cols = grid(len(shapes), 4)
    fig = figure(4.3 * n_cols, 3.3 * n_rows + 1.4)
    for i, shape in enumerate(shapes):
        ax = fig.add_subplot(n_rows, n_cols, i + 1)
        sub = rows[rows["shape"] == shape]
        labels = list(dict.fromkeys(sub.sort_values("label")["label"]))
        for x, label in enumerate(labels):
            k = sub[sub["label"] == label]
            key = k["short"].where(k["short"].isin(top), OTHER)
            bottom = 0.0
            for name, t in k.groupby(key, sort=False)["kernels.rows.ms"].sum().items():
                ax.bar(x, t, bottom=bottom, color=colors[name], width=0.7, edgecolor="white", linewidth=0.4)
                bottom += t
            median = k["median_ms"].iloc[0]
            if median == median:
                ax.plot([x - 0.42, x + 0.42], [median, median], color="black", lw=1.4)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel("ms per call", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(panel_title(shape), fontsize=8)
        ax.grid(True, axis="y", alpha=0.25)
    handles = {name: Patch(color=colors[name]) for name in [*top, OTHER]}
    handles["timed median"] = Line2D([], [], color="black", lw=1.4)
    legend(fig, handles, "kernel breakdown: the kernels one call launches (bars) vs the timed median (line)")
    return Drawing(fig, {"": rows})
