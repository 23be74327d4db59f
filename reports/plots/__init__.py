"""Plots of one run. Each plot writes a PNG and, beside it, a CSV of exactly the data drawn.

Files (under `<run_dir>/plots/`):

- `tflops_vs_length.png/.csv`: TFLOP/s vs max length, one line per provider, one panel per set × mode ×
  other sweep values; datasheet peak and measured GEMM ceiling as horizontal lines (CSV rows
  `kind=ceiling`).
- `speedup.png/.csv`: speedup vs the baseline provider per shape (grouped bars per panel), a 1.0 line.
- `power_timeline.png/.csv` + `power_timeline_cases.csv`: power (W) and SM clock (MHz) over time from
  power.csv, the power cap and the enforced limit, each case a shaded band (`_cases.csv`: the bands);
  samples with a throttle reason (power cap, thermal, slowdown, brake) as red ticks. Downsampled to
  ≤ 4000 bins per GPU (mean power, max power, mean clock per bin) when longer; the CSV holds what is drawn.
- `roofline.png/.csv`: arithmetic intensity vs TFLOP/s (log-log), one point per ok case, the compute and
  bandwidth roof (CSV rows `kind=roof` are the roof polylines).
- `lengths_<workload>.png`: one per workload, drawn by `workloads.plot.plot_length_histogram` (a local
  fallback draws it when that module is missing or raises).
- `workload_lengths.png/.csv`: all workloads in one grid (Q and KV length histograms per workload); the
  CSV lists every sequence's lengths.

A plot with nothing to draw still writes its PNG (a message saying why) and a CSV with headers only.
Only the object-oriented Matplotlib API is used (Figure + FigureCanvasAgg): no pyplot global state.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from reports.plots.common import PlotWarning, placeholder, provider_colors
from reports.plots.lengths import LENGTHS_COLUMNS, fallback_length_histogram, plot_length_histograms
from reports.plots.power import BAND_COLUMNS, MAX_BAND_LABELS, MAX_BINS, POWER_PLOT_COLUMNS, plot_power_timeline
from reports.plots.roofline import ROOFLINE_COLUMNS, plot_roofline
from reports.plots.speedup import SPEEDUP_COLUMNS, plot_speedup
from reports.plots.tflops import TFLOPS_COLUMNS, plot_tflops_vs_length
from results.power_csv import read_power

__all__ = [
    "BAND_COLUMNS",
    "LENGTHS_COLUMNS",
    "MAX_BAND_LABELS",
    "MAX_BINS",
    "POWER_PLOT_COLUMNS",
    "ROOFLINE_COLUMNS",
    "SPEEDUP_COLUMNS",
    "TFLOPS_COLUMNS",
    "PlotWarning",
    "fallback_length_histogram",
    "make_all_plots",
    "placeholder",
    "plot_length_histograms",
    "plot_power_timeline",
    "plot_roofline",
    "plot_speedup",
    "plot_tflops_vs_length",
    "provider_colors",
]


# ----------------------------------------------------------------------------------------------- all


def make_all_plots(
    run_dir: str | Path, meta: dict, cases: pd.DataFrame, workloads: dict, baseline: str | None = None
) -> list[Path]:
    """Every plot of a run into `<run_dir>/plots/`; returns every file written (PNGs and CSVs).

    A plot that raises is replaced by a placeholder PNG naming the error (and a `PlotWarning`), so one
    broken plot never stops the report.
    """
    run_dir = Path(run_dir)
    if run_dir.is_file():
        run_dir = run_dir.parent
    out = run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    power = read_power(run_dir)
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
        except Exception as e:
            warnings.warn(f"plot {name} failed: {e!r}", PlotWarning, stacklevel=2)
            written.append(placeholder(out / f"{name}.png", f"plot failed: {type(e).__name__}: {e}", name))
    return written
