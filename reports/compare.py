"""`gdpa-bench compare BASE CURRENT`: the CI performance-regression gate (issues 9, 19) — its markdown and
its command line. The verdicts and their rules: results.verdicts.

    python -m bench compare BASE CURRENT [--threshold 0.05] [--alpha 0.01] [--format md|json] [--min-samples 5]
                                         [--drift-threshold 0.03] [--allow-missing]

Exit status: 0 when no case fails the gate; 1 otherwise, the offending cases named on the last lines; 2 with
one line on stderr for bad input (missing file, invalid JSON, wrong schema, malformed case or meta, no
common case, a bad option).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from results.checks import check_results
from results.drift import MIN_DRIFT_SAMPLES, drift
from results.files import ResultsError, clean, read_results
from results.verdicts import VERDICTS, compare_case, compare_checked, compare_runs, counts, regressions, timeline_clocks

__all__ = [
    "MIN_DRIFT_SAMPLES",
    "VERDICTS",
    "check_results",
    "compare_case",
    "compare_main",
    "compare_runs",
    "counts",
    "drift",
    "format_markdown",
    "regressions",
    "summary_lines",
]
PROG = "python -m bench compare"


# ----------------------------------------------------------------------------------------------- output


def _pct(x: Any) -> str:
    return f"{x:+.1%}" if isinstance(x, (int, float)) and math.isfinite(x) else "—"


def _ms(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) and math.isfinite(x) else "—"


def _p(x: Any) -> str:
    return f"{x:.2g}" if isinstance(x, (int, float)) and math.isfinite(x) else "—"


def _describe(path: str, results: dict) -> str:
    m = results.get("meta") or {}
    bits = [str(m.get(k)) for k in ("gpu", "git_sha", "started_at") if m.get(k)]
    return f"`{path}`" + (f" ({', '.join(bits)})" if bits else "")


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def format_markdown(
    rows: list[dict],
    base_path: str,
    cur_path: str,
    base: dict,
    cur: dict,
    threshold: float,
    alpha: float,
    min_samples: int,
    drift_threshold: float = 0.03,
    allow_missing: bool = False,
) -> str:
    order = {v: i for i, v in enumerate(VERDICTS)}
    lines = [
        "## gdpa-bench compare",
        "",
        f"- baseline: {_describe(base_path, base)}",
        f"- current: {_describe(cur_path, cur)}",
        f"- threshold {threshold:.1%}, alpha {alpha:g}, min samples {min_samples}, drift threshold "
        f"{drift_threshold:.1%} (first vs last tenth of a case's samples, from {MIN_DRIFT_SAMPLES} samples, "
        f"significant at alpha)" + (", missing cases allowed" if allow_missing else ""),
        "",
    ]
    gb, gc = (base.get("meta") or {}).get("gpu"), (cur.get("meta") or {}).get("gpu")
    if gb and gc and gb != gc:
        lines += [f"> **Warning:** baseline GPU `{gb}` differs from current GPU `{gc}`.", ""]
    c = counts(rows)
    lines += ["| verdict | cases |", "|---|---|"] + [f"| {v} | {c[v]} |" for v in VERDICTS] + [""]
    lines += [
        "| case | verdict | base ms | current ms | change | p | clock-norm change | drift base | drift cur | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (order.get(r["verdict"], 99), r["id"])):
        v = r["verdict"] + (" (fails)" if r["verdict"] == "drifting" and r["fails_gate"] else "")
        lines.append(
            f"| {_cell(r['id'])} | {v} | {_ms(r['base_median_ms'])} | {_ms(r['cur_median_ms'])} | "
            f"{_pct(r['change'])} | {_p(r['p_value'])} | {_pct(r['clock_norm_change'])} | "
            f"{_pct(r['base_drift'])} | {_pct(r['cur_drift'])} | {_cell(r['message'])} |"
        )
    return "\n".join(lines)


def summary_lines(rows: list[dict]) -> list[str]:
    bad = regressions(rows)
    if not bad:
        extra = [f"{n} {v}" for v in ("drifting", "missing") if (n := sum(r["verdict"] == v for r in rows))]
        return [
            "",
            f"OK: no case slower or failed ({len(rows)} compared"
            + (f"; {', '.join(extra)}, not failing" if extra else "")
            + ").",
        ]
    out = ["", f"REGRESSION: {len(bad)} case(s) fail the gate (slower, failed, missing, or drifting and slower):"]
    for r in bad:
        hint = "; --allow-missing accepts this" if r["verdict"] == "missing" else ""
        out.append(f"- {r['verdict']}: {r['id']} ({r['message']}{hint})")
    return out


# -------------------------------------------------------------------------------------------------- CLI


class _BadUsage(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line on stderr, exit 2 (argparse would add its usage block)
        raise _BadUsage(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Compare two gdpa-bench runs; exit 1 on a regression.")
    p.add_argument("baseline", help="baseline results.json (or its run folder)")
    p.add_argument("current", help="current results.json (or its run folder)")
    p.add_argument(
        "--threshold",
        type=float,
        default=0.05,
        help="relative median change that counts as a regression (default 0.05 = 5%%)",
    )
    p.add_argument(
        "--alpha", type=float, default=0.01, help="significance level of the Mann-Whitney U test (default 0.01)"
    )
    p.add_argument("--format", choices=("md", "json"), default="md", help="output format (default md)")
    p.add_argument("--min-samples", type=int, default=5, help="fewest samples per side to run the test (default 5)")
    p.add_argument(
        "--drift-threshold",
        type=float,
        default=0.03,
        help="a case whose first and last tenth of samples differ by more is 'drifting' (default 0.03; "
        "inf turns the check off)",
    )
    p.add_argument(
        "--allow-missing",
        action="store_true",
        help="a case of the baseline absent from the current run does not fail the gate",
    )
    return p


def _check_options(a: argparse.Namespace) -> str | None:
    if not (math.isfinite(a.threshold) and a.threshold >= 0):
        return f"--threshold must be ≥ 0, got {a.threshold}"
    if not (0 < a.alpha < 1):
        return f"--alpha must be in (0, 1), got {a.alpha}"
    if a.min_samples < 1:
        return f"--min-samples must be ≥ 1, got {a.min_samples}"
    if not a.drift_threshold > 0:  # NaN fails this too
        return f"--drift-threshold must be > 0 (inf: off), got {a.drift_threshold}"
    return None


def compare_main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m bench compare`; returns the exit status (0 ok, 1 regression, 2 bad input)."""
    parser = _parser()
    if argv is not None and any(x in ("-h", "--help") for x in argv):
        parser.print_help()
        return 0
    try:
        args = parser.parse_args(argv)
    except _BadUsage as e:
        return _bad(f"{e} (see {PROG} --help)")
    problem = _check_options(args)
    if problem:
        return _bad(problem)
    try:
        base = read_results(args.baseline)
        cur = read_results(args.current)
        bc = check_results(base, args.baseline)
        cc = check_results(cur, args.current)
    except ResultsError as e:
        return _bad(str(e))
    if not set(bc) & set(cc):
        return _bad(
            f"no common case ids between {args.baseline} ({len(bc)} cases) and {args.current} ({len(cc)} cases)"
        )
    rows = compare_checked(
        bc,
        cc,
        args.threshold,
        args.alpha,
        args.min_samples,
        args.drift_threshold,
        args.allow_missing,
        timeline_clocks(args.baseline),
        timeline_clocks(args.current),
    )
    tail = summary_lines(rows)
    if args.format == "json":
        doc = {
            "baseline": args.baseline,
            "current": args.current,
            "threshold": args.threshold,
            "alpha": args.alpha,
            "min_samples": args.min_samples,
            "drift_threshold": args.drift_threshold,
            "min_drift_samples": MIN_DRIFT_SAMPLES,
            "allow_missing": args.allow_missing,
            "counts": counts(rows),
            "cases": rows,
            "regressions": [r["id"] for r in regressions(rows)],
        }
        print(json.dumps(clean(doc), indent=1, default=str))
        print("\n".join(tail).strip(), file=sys.stderr)
    else:
        print(
            format_markdown(
                rows,
                args.baseline,
                args.current,
                base,
                cur,
                args.threshold,
                args.alpha,
                args.min_samples,
                args.drift_threshold,
                args.allow_missing,
            )
        )
        print("\n".join(tail))
    return 1 if regressions(rows) else 0


def _bad(message: str) -> int:
    print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(compare_main())
