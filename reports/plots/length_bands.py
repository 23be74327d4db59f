"""Length bands: per workload and mode, for each band of the batch its share of the work (grey), of the
sequences (outlined) and, per provider, of the time the bands took when each was timed alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from reports.plots.common import figure, grid, legend, provider_colors
from reports.plots.registry import Drawing, NothingToPlot, PlotData, plot
from results.frame import table_frame
from results.metrics import table_columns

KEEP = ("id", "workload.name", "mode", "provider", "label")
COLUMNS = (*KEEP, *(m.name for m in table_columns("bands.rows")))
CAPTION = (
    "Length bands: per band of each split batch its share of the work (grey), of the sequences (outlined) and, "
    "per provider, of the time the bands took when each was timed alone."
)


@plot("length_bands", order=70, columns=COLUMNS, caption=CAPTION)
def length_bands(data: PlotData, out: Path) -> Drawing:
    rows = table_frame(data.cases, "bands.rows", KEEP)
    if rows.empty:
        raise NothingToPlot("no case was split into length bands (config `bands.only`, or profile --bands)", "bands")
    share = lambda col: pd.to_numeric(col, errors="coerce").fillna(0.0).to_numpy(dtype=float)
    panels = list(dict.fromkeys(zip(rows["workload.name"], rows["mode"], strict=True)))
    colors = provider_colors(data.cases["provider"].dropna())  # the colours every plot gives these providers
    names = dict(zip(rows["provider"], rows["label"], strict=True))
    n_rows, n_cols = grid(len(panels), 2)
    fig = figure(7.0 * n_cols, 3.6 * n_rows + 1.2)
    for i, (workload, mode) in enumerate(panels):
        ax = fig.add_subplot(n_rows, n_cols, i + 1)
        sub = rows[(rows["workload.name"] == workload) & (rows["mode"] == mode)]
        bands = sub.drop_duplicates("bands.rows.label").sort_values("bands.rows.lo")
        providers = list(dict.fromkeys(sub.sort_values("label")["provider"]))
        width = 0.8 / (1 + len(providers))
        x = np.arange(len(bands))
        ax.bar(x - 0.4 + width / 2, share(bands["bands.rows.work_share"]), width, color="#9e9e9e")
        ax.bar(x - 0.4 + width / 2, share(bands["bands.rows.seq_share"]), width, fill=False, edgecolor="black", lw=0.8)
        for j, prov in enumerate(providers):
            mine = sub[sub["provider"] == prov].set_index("bands.rows.label").reindex(bands["bands.rows.label"])
            ax.bar(x - 0.4 + width * (j + 1.5), share(mine["bands.rows.time_share"]), width, color=colors.get(prov))
        ax.set_xticks(x)
        ax.set_xticklabels(bands["bands.rows.label"], fontsize=8)
        ax.set_xlabel("band of min(Lq, Lk)", fontsize=8)
        ax.set_ylabel("share", fontsize=8)
        ax.set_ylim(0, 1)
        ax.grid(True, axis="y", alpha=0.25)
        ax.set_title(f"{workload} · {mode}", fontsize=9)
    handles = {"share of work": Patch(color="#9e9e9e"), "share of sequences": Patch(fill=False, edgecolor="black")}
    handles |= {f"share of time: {label}": Patch(color=colors.get(prov)) for prov, label in names.items()}
    legend(fig, handles, "length bands: share of the work vs share of the time, each band timed alone")
    return Drawing(fig, {"": rows})
