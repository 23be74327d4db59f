"""`gdpa-bench history add|report|check`: the performance history of runs across commits (docs/DESIGN.md §7).

The store and its series are the results layer's (results.history_store, results.history_series), the
page is the reports' (reports.history): this module reads the command line and prints. Like the report
step (bench.cli.reporting) it draws for people, so it may import reports (tests/test_structure.py).
"""

from __future__ import annotations

import argparse
import sys

from bench.cli import options
from bench.cli.options import Command
from bench.errors import EXIT_FAILED, MAX_LINE, UsageError
from results.files import ResultsWriteError
from support.inputs import InputError, check_path_text, integer
from support.text import one_line, regex_error

DEFAULT_STORE = "runs/history"


def _store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", default=DEFAULT_STORE, metavar="DIR", help=f"the history store folder (default {DEFAULT_STORE})"
    )


def arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(
        dest="history_command", metavar="{add,report,check}", required=True, parser_class=type(parser)
    )
    add = sub.add_parser("add", help="append a run's cases to the store (made when missing; the same run again: no-op)")
    options.run_dir(add)
    _store(add)
    add.add_argument(
        "--max-samples",
        type=integer,
        metavar="N",
        help="keep at most N samples per case, evenly spaced (default: all; the median and band are of all)",
    )
    add.set_defaults(history=add_command)
    rep = sub.add_parser("report", help="history.html (+ PNGs): per case its trend over commits and its steps")
    _store(rep)
    rep.add_argument("--only", metavar="REGEX", help="the cases whose id matches this regex")
    rep.add_argument("--out", metavar="DIR", help="where history.html and plots/ go (default: the store folder)")
    rep.set_defaults(history=report_command)
    chk = sub.add_parser("check", help="exit 1 when the run's cases sit on a confirmed step down of their series")
    _store(chk)
    options.run_dir(chk)
    chk.set_defaults(history=check_command)


def run(args: argparse.Namespace) -> int:
    from results.history_store import HistoryError

    try:
        return args.history(args)
    except HistoryError as exc:
        raise UsageError(str(exc)) from None


def add_command(args: argparse.Namespace) -> int:
    from results.history_store import add_run

    what, e = add_run(args.store, args.run_dir, args.max_samples)
    run = f"run {e['run_id']} (commit {e['commit'][:10]}, {e['ok']}/{e['cases']} cases ok"
    run += f", {e['config_name']} on {e['gpu']})"
    said = {
        "added": f"added {run} to {args.store}",
        "unchanged": f"unchanged: {run} is already in {args.store}",
        "updated": f"updated {run} in {args.store}: its cases changed since it was added",
    }
    print(said[what])
    return 0


def report_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from reports.history import render_history
    from results.history_store import HistoryError, open_store

    if args.only is not None:
        if (why := regex_error(args.only)) is not None:
            raise UsageError(f"--only: not a valid regular expression: {why}")
    store = open_store(args.store)
    try:  # `--out ''` would be the current folder
        out = Path(check_path_text(args.out, "--out")) if args.out is not None else store.path
    except InputError as exc:
        raise UsageError(str(exc)) from None
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: is a file; allowed: a folder (history.html and its plots go there)")
    try:
        paths = render_history(store, out, args.only)
    except (HistoryError, ResultsWriteError):
        raise
    except OSError as exc:
        raise ResultsWriteError.of(out / "history.html", exc) from None
    except Exception as exc:  # a drawing bug: one line, not exit 0 (the store is only read)
        print(f"history report failed: {one_line(exc, MAX_LINE)}", file=sys.stderr)
        return EXIT_FAILED
    print(f"html: {paths['html']}")
    return 0


def check_command(args: argparse.Namespace) -> int:
    from results.history_series import check_run
    from results.history_store import open_store

    result = check_run(open_store(args.store), args.run_dir)
    for f in result.flagged:
        s, gate = f["step"], f["gate"]
        print(
            f"slower: {f['id']}: step {s['size']:+.1%} at {s['commit_after'][:10]} (after {s['commit_before'][:10]}, "
            f"{s['runs_after']} runs on it); vs that run: {gate['message']}"
        )
    e = result.entry
    print(
        f"history check: {len(result.flagged)} of {result.checked} cases with a series sit on a confirmed step "
        f"down (commit {e['commit'][:10]}; {result.earlier_runs} earlier runs of {e['config_name']} on {e['gpu']})",
        file=sys.stderr,
    )
    return EXIT_FAILED if result.flagged else 0


COMMANDS = (  # it reads run folders and runs no kernel: it starts without torch (Command.runs_kernels)
    Command(
        "history",
        "performance history across commits: add a run, report trends, check for steps",
        arguments,
        run,
        runs_kernels=False,
    ),
)
