"""TFLOP/s vs max sequence length: one line per provider, one panel per set × mode × sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from reports.plots.common import each_provider, fmt_num, panel_figure, panel_title, provider_colors
from reports.plots.registry import Drawing, PlotData, cases_to_draw, plot
from results.figures import ceiling_for
from results.rates import unit_for

TFLOPS_COLUMNS = tuple("kind panel set mode sweep max_len provider label semantics dtype tflops median_ms id".split())


def _caption(unit: str, softmax: bool, peak: bool, gemm: bool) -> str:
    """The report's caption of what was drawn."""
    ceilings = " and ".join(
        x for x, shown in (("the datasheet peak", peak), ("the measured GEMM ceiling", gemm)) if shown
    )
    return (
        f"Achieved {unit} vs max sequence length, one line per provider"
        + (" (dashed: softmax)" if softmax else "")
        + (f", with {ceilings}" if ceilings else "")
        + "."
    )


CAPTION = _caption("TFLOP/s", softmax=True, peak=True, gemm=True)  # everything drawn: a GPU run


@plot("tflops_vs_length", order=10, columns=TFLOPS_COLUMNS, caption=CAPTION)
def tflops_vs_length(data: PlotData, out: Path) -> Drawing:
    """TFLOP/s vs max sequence length; one line per provider, one panel per set × mode × sweep."""
    cases, meta = data.cases, data.meta
    timed = lambda ok: ok["tflops"].notna() & ok["max_len"].notna()
    ok = cases_to_draw(cases, timed, "no ok cases with timings: nothing to plot", "TFLOP/s vs max sequence length")
    ok = ok.drop_duplicates("id", keep="last")
    colors = provider_colors(cases["provider"].dropna())
    peaks = meta.get("peak_tflops") or {}
    gemm = meta.get("measured_gemm_tflops")
    rows, ceil_rows = [], []
    grid = panel_figure(ok, 5.0, 3.6)
    handles: dict[str, Any] = {}
    softmax, units = False, set()
    for ax, panel, sub in grid:
        # each panel's axis in the unit its rates read in (a CPU run's are MFLOP/s); the CSV keeps TFLOP/s
        unit, size = unit_for(float(sub["tflops"].max()))
        units.add(unit)
        for prov, s, label, soft in each_provider(sub):
            softmax |= soft
            s = s.sort_values("max_len")
            (line,) = ax.plot(
                s["max_len"],
                s["tflops"] / size,
                marker="o",
                ms=4,
                lw=1.8,
                color=colors.get(prov),
                ls="--" if soft else "-",
                label=label,
            )
            handles.setdefault(label, line)
            rows.append(s.assign(kind="case", panel=panel, sweep=s["sweep_label"], provider=prov, label=label))
        ymax = float(sub["tflops"].max())
        for dtype in sorted(sub["dtype"].dropna().astype(str).unique()):
            pk = ceiling_for(peaks, dtype)
            if pk == pk and pk > 0:
                lab = f"datasheet peak {dtype} ({fmt_num(pk)})"
                h = ax.axhline(pk / size, color="black", ls=":", lw=1.2, label=lab)
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
                h = ax.axhline(g / size, color="dimgray", ls="-.", lw=1.2, label=lab)
                handles.setdefault("measured GEMM ceiling", h)
                ceil_rows.append(dict(kind="ceiling", panel=panel, label=lab, dtype=dtype, tflops=g))
                ymax = max(ymax, g)
        for r in ceil_rows:
            if r["panel"] == panel:
                ax.annotate(
                    r["label"],
                    (0.01, r["tflops"] / size),
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
        low = sub["tflops"][sub["tflops"] > 0]
        if len(low) and ymax / float(low.min()) > 100:  # e.g. an interpreted kernel beside eager PyTorch (CPU)
            ax.set_yscale("log")
        else:
            ax.set_ylim(0, ymax / size * 1.1)
        ax.set_xlabel("max sequence length L")
        ax.set_ylabel(unit)
        ax.set_title(panel_title(panel), fontsize=10)
        ax.grid(True, alpha=0.3)
    drawn = {"softmax": softmax, "peak": "datasheet peak" in handles, "gemm": "measured GEMM ceiling" in handles}
    unit = units.pop() if len(units) == 1 else "FLOP/s (each panel in the unit of its rates)"
    grid.finish(handles, _title(unit, **drawn))
    table = pd.concat([*rows, pd.DataFrame(ceil_rows)], ignore_index=True)[list(TFLOPS_COLUMNS)]
    table["max_len"] = table["max_len"].astype("Int64")
    return Drawing(grid.figure, {"": table}, caption=_caption(unit, **drawn))


def _title(unit: str, softmax: bool, peak: bool, gemm: bool) -> str:
    """The figure's title, naming only the line styles drawn (a CPU run has no datasheet peak, no GEMM)."""
    keys = [("dashed: softmax providers", softmax), ("dotted: datasheet peak", peak), ("dash-dot: measured GEMM", gemm)]
    styles = "; ".join(k for k, shown in keys if shown)
    return f"achieved {unit}" + (f" ({styles})" if styles else "")
