"""The report step: `render` draws a finished run folder's report (run, merge and profile call it; a report
bug never loses a sweep). With bench.cli.reporting (the commands that present results) the one place under
bench/ that draws for people (tests/test_structure.py holds it)."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.errors import MAX_LINE
from results.files import ResultsWriteError
from support.text import one_line


def render(run_dir: Path) -> bool:
    """report.md/.html and plots/ for `run_dir`. True when drawn; False after one line on stderr saying why
    not (the caller exits non-zero: the results are kept, the report is missing). A report file that
    cannot be written (disk full, read-only) is a `ResultsWriteError` (exit 2)."""
    try:
        from reports.render import render_report  # Matplotlib only when a report is drawn
    except ImportError as exc:
        print(f"report not rendered: {exc}", file=sys.stderr)
        return False
    try:
        paths = render_report(run_dir)
    except ResultsWriteError:
        raise
    except OSError as exc:
        raise ResultsWriteError.of(Path(run_dir) / "report.md", exc) from None
    except Exception as exc:  # a report bug must not lose a finished sweep, nor pass for a drawn report
        print(f"report rendering failed: {one_line(exc, MAX_LINE)}", file=sys.stderr)
        return False
    print(f"report: {paths.get('html') or paths}", flush=True)
    return True
