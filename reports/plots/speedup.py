"""Speedup vs the baseline provider per shape: grouped bars per panel."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reports.cpu_notes import ratios_shown
from reports.plots.common import each_provider, ok_cases, panel_figure, panel_title, provider_colors
from reports.plots.registry import Drawing, NothingToPlot, PlotData, plot
from results.figures import speedup_vs_baseline
from results.frame import baseline_provider, provider_label

SPEEDUP_COLUMNS = tuple("panel shape max_len provider label speedup median_ms baseline baseline_median_ms".split())
CAPTION = "Speedup vs the baseline provider on each shape (> 1: faster than the baseline)."


@plot("speedup", order=20, columns=SPEEDUP_COLUMNS, caption=CAPTION)
def speedup(data: PlotData, out: Path) -> Drawing:
    """Speedup of every provider vs the baseline provider, per shape: grouped bars per panel."""
    cases = data.cases
    base = data.baseline or cases.attrs.get("baseline") or baseline_provider(data.meta)
    if not ratios_shown(data.meta):
        raise NothingToPlot(
            "CPU run: speedups are not drawn (interpreter and eager timings compare nothing)", "speedup"
        )
    if not base:
        raise NothingToPlot("no baseline provider (meta.baseline_provider unset)", "speedup vs baseline")
    ok = ok_cases(cases)
    base_rows = ok[ok["provider"] == base] if len(ok) else ok
    base_sem = base_rows["semantics"].iloc[0] if len(base_rows) else None
    if len(cases) and base_sem is None:
        sem = cases.loc[cases["provider"] == base, "semantics"]
        base_sem = sem.iloc[0] if len(sem) else None
    base_label = provider_label(base, base_sem)
    pts = _against(ok, base)
    if pts.empty:
        why = (
            f"baseline '{base_label}' has no ok case"
            if base_rows.empty
            else "no other provider has an ok case on a baseline shape"
        )
        raise NothingToPlot(f"no speedup data: {why}", f"speedup vs {base_label}")
    base_ms = base_rows.groupby("shape")["median_ms"].min()
    colors = provider_colors(cases["provider"].dropna())
    grid = panel_figure(pts, 6.2, 3.7, max_cols=2)
    rows, handles = [], {}
    for ax, panel, sub in grid:
        lens = sorted(sub["max_len"].astype(int).unique())
        series = list(each_provider(sub))
        width = 0.8 / max(1, len(series))
        nbars = len(series) * len(lens)
        for j, (prov, s, label, soft) in enumerate(series):
            xs = [lens.index(int(L)) + (j - (len(series) - 1) / 2) * width for L in s["max_len"]]
            ys = [float(v) for v in s["speedup"]]
            rows.append(
                s.assign(
                    panel=panel,
                    max_len=s["max_len"].astype(int),
                    provider=prov,
                    label=label,
                    baseline=base,
                    baseline_median_ms=s["shape"].map(base_ms),
                )
            )
            bars = ax.bar(
                xs,
                ys,
                width=width * 0.95,
                color=colors.get(prov),
                label=label,
                hatch="//" if soft else None,
                edgecolor="white" if not soft else "black",
                lw=0.5,
            )
            handles.setdefault(label, bars)
            if nbars <= 16:
                for x, y in zip(xs, ys, strict=True):
                    ax.annotate(
                        f"{y:.2f}",
                        (x, y),
                        ha="center",
                        va="bottom",
                        fontsize=7,
                        xytext=(0, 1),
                        textcoords="offset points",
                    )
        ax.axhline(1.0, color="black", lw=1, ls="--")
        ax.set_xticks(range(len(lens)), [str(v) for v in lens])
        ax.set_xlabel("max sequence length L")
        ax.set_ylabel(f"speedup vs {base_label} (×)")
        ax.set_title(panel_title(panel), fontsize=10)
        ax.set_ylim(0, max(1.15, float(sub["speedup"].max()) * 1.15))
        ax.grid(True, axis="y", alpha=0.3)
    title = f"speedup vs {base_label} on the same shape (time ratio; > 1 is faster; dashed line = 1.0)"
    grid.finish(handles, title)
    return Drawing(grid.figure, {"": pd.concat(rows, ignore_index=True)})


def _against(ok: pd.DataFrame, base: str) -> pd.DataFrame:
    """The ok cases of the other providers with their speedup over `base` (the plot's baseline may be
    another than the frame's)."""
    if ok.empty:
        return ok
    ok = ok.copy()
    ok["speedup"] = speedup_vs_baseline(ok, base)
    return ok[ok["speedup"].notna() & (ok["provider"] != base)]
