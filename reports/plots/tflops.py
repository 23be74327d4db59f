"""TFLOP/s vs max sequence length: one line per provider, one panel per set × mode × sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from reports.plots.common import (
    figure,
    fmt_num,
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
from results.figures import ceiling_for
from results.frame import provider_label

# --------------------------------------------------------------------------------- 1. TFLOP/s vs length

TFLOPS_COLUMNS = (
    "kind",
    "panel",
    "set",
    "mode",
    "sweep",
    "max_len",
    "provider",
    "label",
    "semantics",
    "dtype",
    "tflops",
    "median_ms",
    "id",
)


def plot_tflops_vs_length(cases: pd.DataFrame, meta: dict, out_dir: str | Path) -> list[Path]:
    """TFLOP/s vs max sequence length; one line per provider, one panel per set × mode × sweep."""
    out_dir = Path(out_dir)
    png, csv = out_dir / "tflops_vs_length.png", out_dir / "tflops_vs_length.csv"
    ok = ok_cases(cases)
    ok = ok[ok["tflops"].notna() & ok["max_len"].notna()].drop_duplicates("id", keep="last") if len(ok) else ok
    if ok.empty:
        placeholder(png, "no ok cases with timings: nothing to plot", "TFLOP/s vs max sequence length")
        return [png, write_csv(pd.DataFrame(), csv, TFLOPS_COLUMNS)]
    panels = panel_order(ok)
    colors = provider_colors(cases["provider"].dropna())
    peaks = meta.get("peak_tflops") or {}
    gemm = meta.get("measured_gemm_tflops")
    rows, ceil_rows = [], []
    nr, nc = grid(len(panels))
    fig = figure(5.0 * nc, 3.6 * nr + 0.9)
    axes = fig.subplots(nr, nc, squeeze=False).ravel()
    handles: dict[str, Any] = {}
    for ax, panel in zip(axes, panels, strict=False):
        sub = ok[ok["panel"] == panel]
        for prov in provider_order(sub):
            s = sub[sub["provider"] == prov].sort_values("max_len")
            soft = (s["semantics"] == "softmax").any()
            label = provider_label(prov, "softmax" if soft else "gdpa")
            (line,) = ax.plot(
                s["max_len"],
                s["tflops"],
                marker="o",
                ms=4,
                lw=1.8,
                color=colors.get(prov),
                ls="--" if soft else "-",
                label=label,
            )
            handles.setdefault(label, line)
            for _, r in s.iterrows():
                rows.append(
                    dict(
                        kind="case",
                        panel=panel,
                        set=r["set"],
                        mode=r["mode"],
                        sweep=r["sweep_label"],
                        max_len=int(r["max_len"]),
                        provider=prov,
                        label=label,
                        semantics=r["semantics"],
                        dtype=r["dtype"],
                        tflops=r["tflops"],
                        median_ms=r["median_ms"],
                        id=r["id"],
                    )
                )
        ymax = float(sub["tflops"].max())
        for dtype in sorted(sub["dtype"].dropna().astype(str).unique()):
            pk = ceiling_for(peaks, dtype)
            if pk == pk and pk > 0:
                lab = f"datasheet peak {dtype} ({fmt_num(pk)})"
                h = ax.axhline(pk, color="black", ls=":", lw=1.2, label=lab)
                handles.setdefault("datasheet peak", h)
                ceil_rows.append(dict(kind="ceiling", panel=panel, label=lab, dtype=dtype, tflops=pk))
                ymax = max(ymax, pk)
            g = ceiling_for(gemm, dtype)
            if (
                g == g
                and g > 0
                and not any(r["label"].startswith("measured GEMM") and r["panel"] == panel for r in ceil_rows)
            ):
                lab = f"measured GEMM ({fmt_num(g)})"
                h = ax.axhline(g, color="dimgray", ls="-.", lw=1.2, label=lab)
                handles.setdefault("measured GEMM ceiling", h)
                ceil_rows.append(dict(kind="ceiling", panel=panel, label=lab, dtype=dtype, tflops=g))
                ymax = max(ymax, g)
        for r in ceil_rows:
            if r["panel"] == panel:
                ax.annotate(
                    r["label"],
                    (0.01, r["tflops"]),
                    xycoords=("axes fraction", "data"),
                    xytext=(0, 2),
                    textcoords="offset points",
                    fontsize=7,
                    color="dimgray",
                )
        ax.set_xscale("log", base=2)
        lens = sorted(sub["max_len"].astype(int).unique())
        ax.set_xticks(lens, [str(v) for v in lens])
        ax.minorticks_off()
        ax.set_ylim(0, ymax * 1.1)
        ax.set_xlabel("max sequence length L")
        ax.set_ylabel("TFLOP/s")
        ax.set_title(panel_title(panel), fontsize=10)
        ax.grid(True, alpha=0.3)
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    legend(
        fig, handles, "achieved TFLOP/s (dashed: softmax providers; dotted: datasheet peak; dash-dot: measured GEMM)"
    )
    save(fig, png)
    table = pd.DataFrame(rows + ceil_rows)
    table["max_len"] = table["max_len"].astype("Int64") if "max_len" in table else pd.NA
    return [png, write_csv(table, csv, TFLOPS_COLUMNS)]
