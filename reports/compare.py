"""`python -m bench compare BASELINE CURRENT`: the CI performance-regression gate (issue 9).

    python -m bench compare BASE CURRENT [--threshold 0.05] [--alpha 0.01] [--format md|json] [--min-samples 5]
    python -m reports.compare BASE CURRENT ...        (the same, without the bench CLI)

BASE and CURRENT are results.json files (schema `gdpa-bench/1`) or run folders holding one. Cases are
matched by id. For each case present and ok in both:

- change = (median_cur − median_base) / median_base, medians of the raw samples (`times_ms`; the
  recorded `median_ms` when a file kept no samples);
- p = two-sided Mann-Whitney U test of the two sample sets (scipy.stats.mannwhitneyu);
- when both runs recorded `power.sm_clock_mhz_median`, the clock-normalised change: the current time
  scaled by clock_cur / clock_base (time × clock ∝ cycles), so a slowdown that only comes from a lower
  clock (power cap, thermals) shows up as ≈ 0 there. It is reported, not gated on.

Verdicts (significant means p < alpha; n = samples in each run):

| verdict | when |
|---|---|
| `failed` | ok in the baseline, not ok now (the message carries the current error) |
| `slower` / `faster` | significant and |change| > threshold |
| `ambiguous` | significant and threshold/2 < |change| ≤ threshold (a real but sub-threshold drift); or not significant while |change| > threshold (too noisy to confirm a change that large); or fewer than `--min-samples` samples on a side while |change| > threshold |
| `same` | everything else: not significant and |change| ≤ threshold, or a tiny change (≤ threshold/2), or not ok in either run |
| `missing` | in the baseline, not in the current run |
| `new` | in the current run only (or not ok in the baseline and ok now) |

Exit status: 0 when no case is `slower` or `failed`; 1 otherwise, the offending cases named on the last
lines; 2 with one line on stderr for bad input (missing file, invalid JSON, wrong schema, no common case).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import numpy as np

from reports.metrics import ResultsError, read_results

VERDICTS = ("failed", "slower", "ambiguous", "faster", "missing", "new", "same")
PROG = "python -m bench compare"


def _samples(case: dict) -> np.ndarray:
    t = case.get("times_ms")
    if not isinstance(t, list):
        return np.array([], dtype=float)
    vals = []
    for x in t:
        if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x)):
            vals.append(float(x))
    return np.asarray(vals, dtype=float)


def _median(case: dict, samples: np.ndarray) -> float:
    if samples.size:
        return float(np.median(samples))
    m = case.get("median_ms")
    return float(m) if isinstance(m, (int, float)) and not isinstance(m, bool) and m > 0 else math.nan


def _clock(case: dict) -> float:
    p = case.get("power")
    v = p.get("sm_clock_mhz_median") if isinstance(p, dict) else None
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else math.nan


def _cases(results: dict | list) -> dict[str, dict]:
    cases = results.get("cases", []) if isinstance(results, dict) else results
    return {c["id"]: c for c in (cases or []) if isinstance(c, dict) and isinstance(c.get("id"), str)}


def _row(cid: str, verdict: str, message: str, **kw: Any) -> dict:
    row = dict(id=cid, verdict=verdict, base_status=None, cur_status=None, base_median_ms=None,
               cur_median_ms=None, change=None, p_value=None, n_base=0, n_cur=0, base_clock_mhz=None,
               cur_clock_mhz=None, clock_norm_change=None, message=message)
    row.update(kw)
    return row


def _nan_to_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def compare_case(cid: str, b: dict | None, c: dict | None, threshold: float, alpha: float,
                 min_samples: int) -> dict:
    """The verdict for one case id (see the module docstring)."""
    if c is None:
        return _row(cid, "missing", "in the baseline, not in the current run", base_status=b.get("status"))
    if b is None:
        st = c.get("status")
        msg = "not in the baseline" + (f" (current status {st}: {c.get('error')})" if st != "ok" else "")
        return _row(cid, "new", msg, cur_status=st)
    bs, cs = b.get("status"), c.get("status")
    if bs != "ok":
        if cs == "ok":
            return _row(cid, "new", f"baseline was {bs}; ok now", base_status=bs, cur_status=cs)
        note = f"baseline {bs}, current {cs}" + (f": {c.get('error')}" if c.get("error") else "")
        return _row(cid, "same", f"not ok in either run ({note})", base_status=bs, cur_status=cs)
    if cs != "ok":
        return _row(cid, "failed", f"now {cs}: {c.get('error') or 'no error recorded'}", base_status=bs, cur_status=cs)

    sb, sc = _samples(b), _samples(c)
    mb, mc = _median(b, sb), _median(c, sc)
    kw: dict[str, Any] = dict(base_status=bs, cur_status=cs, base_median_ms=_nan_to_none(mb),
                              cur_median_ms=_nan_to_none(mc), n_base=int(sb.size), n_cur=int(sc.size))
    if not (mb > 0) or not (mc > 0):
        return _row(cid, "ambiguous", "no usable timing in " + ("the baseline" if not mb > 0 else "the current run"), **kw)
    change = (mc - mb) / mb
    kw["change"] = change
    clk_b, clk_c = _clock(b), _clock(c)
    if clk_b == clk_b and clk_c == clk_c:
        kw.update(base_clock_mhz=clk_b, cur_clock_mhz=clk_c, clock_norm_change=(mc * clk_c / clk_b - mb) / mb)
    big = abs(change) > threshold
    if sb.size < min_samples or sc.size < min_samples:
        n = f"{sb.size} vs {sc.size} samples (< {min_samples})"
        if big:
            return _row(cid, "ambiguous", f"{change:+.1%} but too few samples to test: {n}", **kw)
        return _row(cid, "same", f"{change:+.1%}, within the threshold; {n}, not tested", **kw)
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(sb, sc, alternative="two-sided").pvalue)
    if not math.isfinite(p):  # e.g. every sample identical
        p = 1.0
    kw["p_value"] = p
    sig = p < alpha
    tag = f"{change:+.1%}, p={p:.2g}"
    if sig and big:
        verdict = "slower" if change > 0 else "faster"
        msg = tag
        cn = kw.get("clock_norm_change")
        if verdict == "slower" and cn is not None and abs(cn) <= threshold:
            msg += f"; clock-normalised {cn:+.1%}: the SM clock fell {clk_b:.0f}→{clk_c:.0f} MHz (power/thermal?)"
        return _row(cid, verdict, msg, **kw)
    if sig and abs(change) > threshold / 2:
        return _row(cid, "ambiguous", f"{tag}: significant but under the {threshold:.0%} threshold", **kw)
    if not sig and big:
        return _row(cid, "ambiguous", f"{tag}: beyond the {threshold:.0%} threshold but not significant at alpha={alpha:g} (noisy)", **kw)
    return _row(cid, "same", tag, **kw)


def compare_runs(base: dict, cur: dict, threshold: float = 0.05, alpha: float = 0.01,
                 min_samples: int = 5) -> list[dict]:
    """One row per case id in either run (baseline order first, then new ids): id, verdict,
    base/cur status and median, change (fraction), p_value, n_base, n_cur, clocks, clock_norm_change,
    message. `base` and `cur` are results dicts (or lists of case dicts)."""
    bc, cc = _cases(base), _cases(cur)
    ids = list(bc) + [i for i in cc if i not in bc]
    return [compare_case(i, bc.get(i), cc.get(i), threshold, alpha, min_samples) for i in ids]


def counts(rows: list[dict]) -> dict[str, int]:
    out = {v: 0 for v in VERDICTS}
    for r in rows:
        out[r["verdict"]] = out.get(r["verdict"], 0) + 1
    return out


def regressions(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["verdict"] in ("slower", "failed")]


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


def format_markdown(rows: list[dict], base_path: str, cur_path: str, base: dict, cur: dict,
                    threshold: float, alpha: float, min_samples: int) -> str:
    order = {v: i for i, v in enumerate(VERDICTS)}
    lines = ["## gdpa-bench compare", "",
             f"- baseline: {_describe(base_path, base)}", f"- current: {_describe(cur_path, cur)}",
             f"- threshold {threshold:.1%}, alpha {alpha:g}, min samples {min_samples}", ""]
    gb, gc = (base.get("meta") or {}).get("gpu"), (cur.get("meta") or {}).get("gpu")
    if gb and gc and gb != gc:
        lines += [f"> **Warning:** baseline GPU `{gb}` differs from current GPU `{gc}`.", ""]
    c = counts(rows)
    lines += ["| verdict | cases |", "|---|---|"] + [f"| {v} | {c[v]} |" for v in VERDICTS] + [""]
    lines += ["| case | verdict | base ms | current ms | change | p | clock-norm change | note |",
              "|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (order.get(r["verdict"], 99), r["id"])):
        lines.append(f"| {_cell(r['id'])} | {r['verdict']} | {_ms(r['base_median_ms'])} | {_ms(r['cur_median_ms'])} | "
                     f"{_pct(r['change'])} | {_p(r['p_value'])} | {_pct(r['clock_norm_change'])} | {_cell(r['message'])} |")
    return "\n".join(lines)


def _clean(x: Any) -> Any:
    """JSON-safe: NaN/inf become null."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def summary_lines(rows: list[dict]) -> list[str]:
    bad = regressions(rows)
    if not bad:
        return ["", f"OK: no case slower or failed ({len(rows)} compared)."]
    out = ["", f"REGRESSION: {len(bad)} case(s) slower or failed:"]
    for r in bad:
        out.append(f"- {r['verdict']}: {r['id']} ({r['message']})")
    return out


# -------------------------------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Compare two gdpa-bench runs; exit 1 on a regression.")
    p.add_argument("baseline", help="baseline results.json (or its run folder)")
    p.add_argument("current", help="current results.json (or its run folder)")
    p.add_argument("--threshold", type=float, default=0.05,
                   help="relative median change that counts as a regression (default 0.05 = 5%%)")
    p.add_argument("--alpha", type=float, default=0.01, help="significance level of the Mann-Whitney U test (default 0.01)")
    p.add_argument("--format", choices=("md", "json"), default="md", help="output format (default md)")
    p.add_argument("--min-samples", type=int, default=5, help="fewest samples per side to run the test (default 5)")
    return p


def compare_main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m bench compare`; returns the exit status (0 ok, 1 regression, 2 bad input)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed usage and the error
        return int(e.code) if isinstance(e.code, int) else 2
    if not (args.threshold >= 0 and math.isfinite(args.threshold)):
        print(f"{PROG}: error: --threshold must be ≥ 0, got {args.threshold}", file=sys.stderr)
        return 2
    if not (0 < args.alpha < 1):
        print(f"{PROG}: error: --alpha must be in (0, 1), got {args.alpha}", file=sys.stderr)
        return 2
    if args.min_samples < 1:
        print(f"{PROG}: error: --min-samples must be ≥ 1, got {args.min_samples}", file=sys.stderr)
        return 2
    try:
        base = read_results(args.baseline)
        cur = read_results(args.current)
    except ResultsError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    bc, cc = _cases(base), _cases(cur)
    if not set(bc) & set(cc):
        print(f"{PROG}: error: no common case ids between {args.baseline} ({len(bc)} cases) and "
              f"{args.current} ({len(cc)} cases)", file=sys.stderr)
        return 2
    try:
        rows = compare_runs(base, cur, args.threshold, args.alpha, args.min_samples)
    except (TypeError, ValueError, KeyError, AttributeError) as e:
        print(f"{PROG}: error: malformed case data in {args.baseline} or {args.current}: {e}", file=sys.stderr)
        return 2
    tail = summary_lines(rows)
    if args.format == "json":
        doc = {"baseline": args.baseline, "current": args.current, "threshold": args.threshold, "alpha": args.alpha,
               "min_samples": args.min_samples, "counts": counts(rows), "cases": rows,
               "regressions": [r["id"] for r in regressions(rows)]}
        print(json.dumps(_clean(doc), indent=1, default=str))
        print("\n".join(tail).strip(), file=sys.stderr)
    else:
        print(format_markdown(rows, args.baseline, args.current, base, cur, args.threshold, args.alpha, args.min_samples))
        print("\n".join(tail))
    return 1 if regressions(rows) else 0


if __name__ == "__main__":
    sys.exit(compare_main())
