"""Reports over a run folder: metrics, plots, report.md/.html, and the `compare` regression gate.

Public entry points (imported lazily so that `compare` does not pay for Matplotlib):

- `load_run(path, baseline=None) -> (meta, cases, workloads)`: a run folder (or its results.json) as
  the run's meta, one DataFrame row per case with the derived metrics, and the workloads (reports.metrics)
- `read_results(path) -> dict`, `read_power(path) -> DataFrame`, `ResultsError`: the files themselves
  (reports.results, the results contract: docs/DESIGN.md §6)
- `make_all_plots(run_dir, meta, cases, workloads, baseline=None) -> list[Path]` (reports.plots)
- `render_report(run_dir, baseline=None) -> {"md", "html", "plots"}` (reports.render)
- `compare_main(argv=None) -> int`, `compare_runs(base, cur, threshold, alpha, min_samples)` (reports.compare)
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "load_run": "reports.metrics",
    "ResultsError": "reports.results",
    "read_results": "reports.results",
    "read_power": "reports.results",
    "make_all_plots": "reports.plots",
    "render_report": "reports.render",
    "compare_main": "reports.compare",
    "compare_runs": "reports.compare",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'reports' has no attribute {name!r}")
