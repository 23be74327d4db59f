"""Speedup vs the baseline provider per shape: grouped bars per panel."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from reports.plots.common import (
    figure,
    grid,
    legend,
    ok_cases,
    panel_order,
    panel_title,
    placeholder,
    provider_colors,
    provider_order,
    save,
    write_csv,
)
from results.figures import speedup_vs_baseline
from results.frame import baseline_provider, provider_label

# ------------------------------------------------------------------------------------------ 2. speedup

SPEEDUP_COLUMNS = (
    "panel",
    "shape",
    "max_len",
    "provider",
    "label",
    "speedup",
    "median_ms",
    "baseline",
    "baseline_median_ms",
)


def plot_speedup(cases: pd.DataFrame, meta: dict, out_dir: str | Path, baseline: str | None = None) -> list[Path]:
    """Speedup of every provider vs the baseline provider, per shape: grouped bars per panel."""
    out_dir = Path(out_dir)
    png, csv = out_dir / "speedup.png", out_dir / "speedup.csv"
    base = baseline or cases.attrs.get("baseline") or baseline_provider(meta)
    title = "speedup vs baseline"
    if not base:
        placeholder(png, "no baseline provider (meta.baseline_provider unset)", title)
        return [png, write_csv(pd.DataFrame(), csv, SPEEDUP_COLUMNS)]
    ok = ok_cases(cases)
    base_rows = ok[ok["provider"] == base] if len(ok) else ok
    base_sem = base_rows["semantics"].iloc[0] if len(base_rows) else None
    if len(cases) and base_sem is None:
        sem = cases.loc[cases["provider"] == base, "semantics"]
        base_sem = sem.iloc[0] if len(sem) else None
    base_label = provider_label(base, base_sem)
    pts = recompute_speedup(ok, base)
    if pts.empty:
        why = (
            f"baseline '{base_label}' has no ok case"
            if base_rows.empty
            else "no other provider has an ok case on a baseline shape"
        )
        placeholder(png, f"no speedup data: {why}", f"speedup vs {base_label}")
        return [png, write_csv(pd.DataFrame(), csv, SPEEDUP_COLUMNS)]
    base_ms = base_rows.groupby("shape")["median_ms"].min()
    panels = panel_order(pts)
    colors = provider_colors(cases["provider"].dropna())
    nr, nc = grid(len(panels), 2)
    fig = figure(6.2 * nc, 3.7 * nr + 0.9)
    axes = fig.subplots(nr, nc, squeeze=False).ravel()
    rows, handles = [], {}
    for ax, panel in zip(axes, panels, strict=False):
        sub = pts[pts["panel"] == panel]
        lens = sorted(sub["max_len"].astype(int).unique())
        provs = provider_order(sub)
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
                rows.append(
                    dict(
                        panel=panel,
                        shape=r["shape"],
                        max_len=int(r["max_len"]),
                        provider=prov,
                        label=label,
                        speedup=r["speedup"],
                        median_ms=r["median_ms"],
                        baseline=base,
                        baseline_median_ms=base_ms.get(r["shape"]),
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
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    legend(fig, handles, f"speedup vs {base_label} on the same shape (time ratio; > 1 is faster; dashed line = 1.0)")
    save(fig, png)
    return [png, write_csv(pd.DataFrame(rows), csv, SPEEDUP_COLUMNS)]


def recompute_speedup(ok: pd.DataFrame, base: str) -> pd.DataFrame:
    if ok.empty:
        return ok
    ok = ok.copy()
    ok["speedup"] = speedup_vs_baseline(ok, base)
    return ok[ok["speedup"].notna() & (ok["provider"] != base)]
