"""The plots of one run. Each plot is one module of this package: a function decorated with `@plot` (its
caption, its place in the report, its CSV columns; reports.plots.registry), found here without being
listed. Each writes a PNG under `<run_dir>/plots/` and, beside it, a CSV of exactly the data drawn; with
nothing to draw, a PNG that says why and CSVs with headers only — on a GPU run; a CPU run draws only
the plots that have data (the others are one sentence in the report).

- `tflops_vs_length`: TFLOP/s vs max length, one line per provider, one panel per set × mode × other sweep
  values; datasheet peak and measured GEMM ceiling as horizontal lines (CSV rows `kind=ceiling`).
- `meta_figures` (only for a run with Meta's benchmark sets): TFLOP/s in the layout of Meta's published GDPA
  figures — a row per attention type × sparsity, forward and backward, grouped bars per length.
- `speedup`: speedup vs the baseline provider per shape (grouped bars per panel), a 1.0 line.
- `power_timeline` (+ `power_timeline_cases.csv`, the case bands): power (W) and SM clock (MHz) over time
  from power.csv, the power cap and the enforced limit, samples with a throttle reason as red ticks;
  downsampled to ≤ 4000 bins per GPU when longer; the CSV holds what is drawn.
- `roofline`: arithmetic intensity vs TFLOP/s (log-log), one point per ok case, the compute and
  bandwidth roofs (CSV rows `kind=roof`), and a star where Nsight Compute measured a case (`kind=case_measured`).
- `workload_lengths` (+ `lengths_<workload>.png`, one per workload, drawn by workloads.plot): every
  workload's Q and KV length histograms; the CSV lists every sequence's lengths.
- `kernel_breakdown`: per shape, a stacked bar per provider of the kernels one call launches (the cases'
  `kernels`), the timed median as a line; the CSV is `kernels.rows` in long form.
- `length_bands`: per split workload and mode, each band's share of the work, of the sequences and, per
  provider, of the time (the cases' `bands`); the CSV is `bands.rows` in long form.

Only the object-oriented Matplotlib API is used (Figure + FigureCanvasAgg): no pyplot global state.
"""

from __future__ import annotations

import errno
import importlib
import pkgutil
import warnings
from pathlib import Path

import pandas as pd

from reports.plots.common import PlotWarning, placeholder
from reports.plots.registry import PlotData, PlotFiles, draw, registered
from results.power_csv import read_power

# errors of a file that cannot be written: the report stops (reports.render puts the old one back)
WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.EIO}
# the package's own machinery; every other module of it holds plots
_FRAMEWORK = {"common", "registry"}


def load_plot_modules() -> None:
    """Import every plot module of this package (each registers its plots on import)."""
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _FRAMEWORK:
            importlib.import_module(f"{__name__}.{info.name}")


def make_all_plots(
    run_dir: str | Path, meta: dict, cases: pd.DataFrame, workloads: dict, baseline: str | None = None
) -> PlotFiles:
    """Every registered plot of a run into `<run_dir>/plots/`; returns every file written (PNGs and CSVs),
    with each plot's caption for what it drew and, on a CPU run, the plots with nothing to draw (no file).

    A plot that raises is replaced by a placeholder PNG naming the error (and a `PlotWarning`), so one
    broken plot never stops the report; an OSError (a file that cannot be written) is raised.
    """
    run_dir = Path(run_dir)
    if run_dir.is_file():
        run_dir = run_dir.parent
    out = run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    load_plot_modules()
    data = PlotData(meta, cases, workloads, read_power(run_dir), baseline)
    written = PlotFiles()
    for p in registered():
        try:
            written.extend(draw(p, data, out, written))
        except OSError as e:
            if e.errno in WRITE_ERRORS:
                raise  # a file that cannot be written (disk full) is the report's error, not one plot's
            warnings.warn(f"plot {p.name} failed: {e!r}", PlotWarning, stacklevel=2)
            written.append(placeholder(out / f"{p.name}.png", f"plot failed: {type(e).__name__}: {e}", p.name))
        except Exception as e:
            warnings.warn(f"plot {p.name} failed: {e!r}", PlotWarning, stacklevel=2)
            written.append(placeholder(out / f"{p.name}.png", f"plot failed: {type(e).__name__}: {e}", p.name))
    return written


def draw_plot(name: str, out: str | Path, data: PlotData) -> list[Path]:
    """One plot by name into the folder `out` (its files, as `make_all_plots` writes them)."""
    load_plot_modules()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return draw(next(p for p in registered() if p.name == name), data, out)
