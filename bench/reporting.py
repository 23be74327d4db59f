"""Rendering a run's report from the commands that finish a run: a report bug never loses a sweep."""

from __future__ import annotations

import sys
from pathlib import Path


def render(run_dir: Path) -> None:
    """report.md/.html and plots/ for `run_dir`; a failure is one line on stderr, never an exception."""
    try:
        from reports.render import render_report  # noqa: PLC0415  (Matplotlib only when a report is drawn)
    except ImportError as exc:
        print(f"report not rendered: {exc}", file=sys.stderr)
        return
    try:
        paths = render_report(run_dir)
        print(f"report: {paths.get('html') or paths}", flush=True)
    except Exception as exc:  # a report bug must not lose a finished sweep
        print(f"report rendering failed: {type(exc).__name__}: {exc}", file=sys.stderr)
