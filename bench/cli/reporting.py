"""The commands that present results: report, compare (the CI gate), table, power-checks, fields.

With bench.sweep.report (`render`: a finished run's report, which run, merge and profile draw) this is one
of the two places under bench/ that draw for people (tests/test_structure.py holds it). The figures come
from the results layer; reports/ only lays them out.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from bench.cli import options
from bench.cli.options import Command
from bench.errors import EXIT_FAILED, MAX_LINE, UsageError
from results.files import ResultsWriteError
from support.text import one_line, regex_error


def _read(path: str, checked: bool = False) -> dict:
    """A results file (or run folder), or the one-line usage error of a missing or malformed one (`checked`:
    also what `report` checks before it draws: the cases as compare reads them, the fields the report uses)."""
    from results.checks import check_report_fields, check_results
    from results.files import ResultsError, read_results, results_path

    try:
        data = read_results(path)
        if checked:
            where = str(results_path(path)) if Path(path).is_dir() else path
            check_results(data, where)
            check_report_fields(data, where)
        return data
    except ResultsError as exc:
        raise UsageError(str(exc)) from None


# --------------------------------------------------------------------------------------------- report


def report_arguments(parser: argparse.ArgumentParser) -> None:
    options.run_dir(parser)
    parser.add_argument("--baseline", help="provider to compute speedups against")


def report(args: argparse.Namespace) -> int:
    from bench.sweep.rundir import folder_option
    from reports.render import render_report
    from results.checks import check_report_fields, check_results
    from results.files import ResultsError, results_path

    run_dir = folder_option(args.run_dir, "report")
    source = results_path(run_dir)  # results.json, or the results.json.gz a committed run keeps
    if not source.exists():
        raise UsageError(f"{run_dir}: no results.json in this folder")
    data = _read(str(run_dir))
    try:
        check_results(data, str(source))  # what compare accepts, and nothing else
        check_report_fields(data, str(source))  # and what the plots draw with
    except ResultsError as exc:
        raise UsageError(str(exc)) from None
    if args.baseline is not None:
        cases = data["cases"]
        labels = list(dict.fromkeys(str(c["provider"]) for c in cases if c.get("provider") is not None))
        if args.baseline not in labels:
            raise UsageError(
                f"--baseline {args.baseline}: not a provider of {source}; allowed: "
                + (", ".join(labels) or "none (no case records a provider)")
            )
    try:
        paths = render_report(run_dir, baseline=args.baseline)
    except ResultsError as exc:
        raise UsageError(str(exc)) from None
    except ResultsWriteError:
        raise
    except OSError as exc:
        raise ResultsWriteError.of(run_dir / "report.md", exc) from None
    except Exception as exc:  # a report bug: said in one line, and not exit 0
        print(f"report rendering failed: {one_line(exc, MAX_LINE)}", file=sys.stderr)
        return EXIT_FAILED
    for kind, p in paths.items():
        print(f"{kind}: {p}")
    return 0


# -------------------------------------------------------------------------------------------- compare


def compare_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", help="baseline results.json (or its run folder)")
    parser.add_argument("current", help="current results.json (or its run folder)")
    parser.add_argument("--format", choices=("md", "json"), default="md", help="output format (default md)")
    options.compare_settings(parser)


def compare(args: argparse.Namespace) -> int:
    """Exit 0 when no case fails the gate, 1 otherwise (the failing cases named on the last lines)."""
    from reports.compare import format_markdown, json_document, setting_notes, summary_lines
    from reports.cpu_notes import compare_notes
    from results.checks import check_results, work_differs
    from results.files import ResultsError, clean
    from results.verdicts import BadSetting, CompareSettings, compare_checked, regressions, timeline_clocks

    try:
        settings = CompareSettings(
            args.threshold, args.alpha, args.min_samples, args.drift_threshold, args.allow_missing
        )
    except BadSetting as exc:
        raise UsageError(f"--{exc.setting.replace('_', '-')} {exc.why}") from None
    base, cur = _read(args.baseline), _read(args.current)
    try:  # a gate that read a malformed file as "nothing slower" would pass anything
        base_cases, cur_cases = check_results(base, args.baseline), check_results(cur, args.current)
    except ResultsError as exc:
        raise UsageError(str(exc)) from None
    if not set(base_cases) & set(cur_cases):
        raise UsageError(
            f"no common case ids between {args.baseline} ({len(base_cases)} cases) and {args.current} "
            f"({len(cur_cases)} cases)"
        )
    differs = work_differs(base_cases, cur_cases)
    if differs is not None:
        raise UsageError(
            f"{args.current}: case {differs}; allowed: runs of the same workloads under each case id "
            "(a config changed: record a new baseline)"
        )
    timelines = timeline_clocks(args.baseline), timeline_clocks(args.current)
    rows = compare_checked(base_cases, cur_cases, settings, *timelines)
    tail = summary_lines(rows)
    # why nothing is gated, and how the runs measured differently, before the verdict
    tail[1:1] = compare_notes(base, cur, rows, settings.min_samples) + setting_notes(base, cur)
    if args.format == "json":
        doc = json_document(rows, args.baseline, args.current, settings)
        print(json.dumps(clean(doc), indent=1, default=str))
        print("\n".join(tail).strip(), file=sys.stderr)
    else:
        print(format_markdown(rows, args.baseline, args.current, base, cur, settings))
        print("\n".join(tail))
    return EXIT_FAILED if regressions(rows) else 0


# ---------------------------------------------------------------------------- table, power-checks, fields


def table_arguments(parser: argparse.ArgumentParser) -> None:
    options.run_dir(parser)
    parser.add_argument("--providers", metavar="A,B", help="comma-separated provider labels, in column order")
    parser.add_argument("--modes", default="fwd,bwd", help="comma-separated modes (default fwd,bwd)")
    parser.add_argument("--only", metavar="REGEX", help="the cases whose id matches this regex (rows)")


def table(args: argparse.Namespace) -> int:

    from kernels.modes import MODES
    from reports.table import tflops_table
    from results.files import results_path

    data = _read(args.run_dir, checked=True)
    modes = [m.strip() for m in args.modes.split(",")]
    for m in modes:
        if m not in MODES:
            raise UsageError(f"--modes {m}: not a mode; allowed: {', '.join(MODES)} (comma-separated)")
    providers = [p.strip() for p in args.providers.split(",")] if args.providers else None
    recorded = list(dict.fromkeys(str(c["provider"]) for c in data["cases"] if c.get("provider") is not None))
    for p in providers or []:
        if p not in recorded:
            raise UsageError(
                f"--providers {p}: not a provider of {results_path(args.run_dir)}; allowed: "
                + (", ".join(recorded) or "none (no case records a provider)")
            )
    if args.only:
        if (why := regex_error(args.only)) is not None:
            raise UsageError(f"--only: not a valid regular expression: {why}")
        ids = [str(c.get("id")) for c in data["cases"]]
        if not any(re.search(args.only, i) for i in ids):
            raise UsageError(
                f"--only {args.only}: matches no case of {results_path(args.run_dir)}; its case ids look like "
                + (ids[0] if ids else "nothing (no cases)")
            )
    print(tflops_table(data, providers, modes, args.only))
    return 0


def power_checks(args: argparse.Namespace) -> int:
    from reports.power_claims import claims
    from results.power import power_counts

    print("\n".join(claims(power_counts(_read(args.run_dir, checked=True)["cases"]))))
    return 0


def fields(args: argparse.Namespace) -> int:
    from results.metrics import field_reference

    print(field_reference())
    return 0


COMMANDS = (  # none of them runs a kernel: they start without torch (Command.runs_kernels)
    Command(
        "report", "re-render report.md/.html and plots from results.json", report_arguments, report, runs_kernels=False
    ),
    Command("compare", "CI perf-regression gate: exit 1 on regression", compare_arguments, compare, runs_kernels=False),
    Command(
        "table",
        "a Markdown TFLOP/s table (shapes x provider/mode) of a run, for READMEs",
        table_arguments,
        table,
        runs_kernels=False,
    ),
    Command(
        "power-checks",
        "a run's power counts: at the cap, above it, estimators apart",
        options.run_dir,
        power_checks,
        runs_kernels=False,
    ),
    Command(
        "fields",
        "what every field of results.json and of the results frame means (Markdown)",
        lambda p: None,
        fields,
        runs_kernels=False,
    ),
)
