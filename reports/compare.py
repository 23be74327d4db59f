"""`python -m bench compare BASELINE CURRENT`: the CI performance-regression gate (issues 9, 19).

    python -m bench compare BASE CURRENT [--threshold 0.05] [--alpha 0.01] [--format md|json] [--min-samples 5]
                                         [--drift-threshold 0.03] [--allow-missing]
    python -m reports.compare BASE CURRENT ...        (the same, without the bench CLI)

BASE and CURRENT are results.json files (schema `gdpa-bench/1`) or run folders holding one. Both are
checked strictly before anything is compared (see `check_results`): a gate that reads a malformed file
as "nothing slower" would pass anything. Cases are matched by id. For each case present and ok in both:

- change = (median_cur − median_base) / median_base, medians of the raw samples (`times_ms`; the
  recorded `median_ms` when a file kept no samples);
- p = two-sided Mann-Whitney U test of the two sample sets (scipy.stats.mannwhitneyu);
- when both runs have an SM clock for the case, the clock-normalised change: the current time
  scaled by clock_cur / clock_base (time × clock ∝ cycles), so a slowdown that only comes from a lower
  clock (power cap, thermals) shows up as ≈ 0 there. The clock is the case's
  `power.sm_clock_mhz_median` (the energy loop's), else the median `sm_clock_mhz` of the run's
  power.csv samples tagged with the case id (the monitor samples every case, energy loop or not:
  configs/ci.yaml runs with the loop off);
- drift of each run = (median of the last tenth of its samples − median of the first tenth) / median
  of the first tenth, in measurement order (computed from 20 samples up: a tenth of fewer is one
  sample), and its p-value (Mann-Whitney, first tenth vs last tenth). The Mann-Whitney test of the
  two runs assumes each sample set is one stationary distribution; a case whose time moved while it
  was measured (clock or power state settling) breaks that. A drift counts when it exceeds
  `--drift-threshold` and is significant at alpha, so that the noise of a short sample set is not
  called drift (with alpha 0.01 a tenth needs >= 5 samples, i.e. >= 50 samples, to ever count).

Verdicts (significant means p < alpha; n = samples in each run):

- `failed` (fails the gate): ok in the baseline, not ok now (the message carries the current error).
- `missing` (fails the gate unless `--allow-missing`): in the baseline, not in the current run.
- `slower` (fails) / `faster`: significant and |change| > threshold.
- `drifting`: the drift of either run exceeds `--drift-threshold` (default 3%) and is significant; the
  wall-time verdict (kept in `wall_verdict`) is not trusted. Fails the gate only if the wall-time
  verdict is `slower` and the clock-normalised change also exceeds the threshold, or no clock data
  can explain the slowdown (CPU runs, old baselines).
- `ambiguous`: significant and threshold/2 < |change| ≤ threshold (a real but sub-threshold change);
  or not significant while |change| > threshold (too noisy to confirm a change that large); or fewer
  than `--min-samples` samples on a side while |change| > threshold.
- `same`: everything else: not significant and |change| ≤ threshold, or a tiny change
  (≤ threshold/2), or not ok in either run.
- `new`: in the current run only (or not ok in the baseline and ok now).

Why drifting + slower fails only without a clock explanation: a case whose samples drift has a
median that depends on where in the drift the window fell, so its wall-time change alone proves
nothing; the clock-normalised change removes the part a clock change explains. When it is still
beyond the threshold the kernel needs more cycles than before: a regression. When no clock was
recorded nothing explains the slowdown away, so the gate stays conservative and fails.

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

import numpy as np

from reports.results import STATUSES, ResultsError, read_power, read_results

VERDICTS = ("failed", "missing", "slower", "drifting", "ambiguous", "faster", "new", "same")
PROG = "python -m bench compare"
# fewest samples for a drift figure: a tenth of them is then at least two samples
MIN_DRIFT_SAMPLES = 20


# ------------------------------------------------------------------------------------------ input check


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))


def _short(x: Any, limit: int = 40) -> str:
    r = repr(x)
    return r if len(r) <= limit else r[:limit - 3] + "..."


def check_results(data: Any, where: str) -> dict[str, dict]:
    """The cases of one results document by id, after checking every field the gate reads.

    `data`: a results dict (schema, meta, cases) or a bare list of case dicts. Raises `ResultsError` with
    one line naming `where` (the file), the case and the field, and what is allowed."""
    if isinstance(data, dict):
        meta = data.get("meta")
        # reports' reader turns a missing/null meta into {}; the runner always writes a filled one
        if not isinstance(meta, dict) or not meta:
            raise ResultsError(f"{where}: meta: missing, null or empty (got {_short(meta)}); allowed: the object "
                               f"the runner writes (gpu, git_sha, started_at, ...)")
        cases = data.get("cases")
    elif isinstance(data, list):
        cases = data
    else:
        raise ResultsError(f"{where}: expected a results object, got {type(data).__name__}")
    if not isinstance(cases, list):
        raise ResultsError(f"{where}: cases: expected a list of case objects, got {type(cases).__name__}")
    out: dict[str, dict] = {}
    for i, c in enumerate(cases):
        at = f"{where}: cases[{i}]"
        if not isinstance(c, dict):
            raise ResultsError(f"{at}: expected a case object, got {_short(c)}")
        cid = c.get("id")
        if not isinstance(cid, str) or not cid:
            raise ResultsError(f"{at}: id: missing or not a string (got {_short(cid)}); allowed: the case id")
        at = f"{at} ({cid})"
        if cid in out:
            first = next(j for j, x in enumerate(cases) if isinstance(x, dict) and x.get("id") == cid)
            raise ResultsError(f"{at}: id: the same id as cases[{first}]; allowed: each case once")
        _check_case(c, at)
        out[cid] = c
    return out


def _check_case(c: dict, at: str) -> None:
    st = c.get("status")
    if st not in STATUSES:
        what = "missing" if "status" not in c else _short(st)
        raise ResultsError(f"{at}: status: {what}; allowed: {', '.join(STATUSES)}")
    t = c.get("times_ms")
    if t is not None:
        if not isinstance(t, list):
            raise ResultsError(f"{at}: times_ms: {_short(t)} is not a list; allowed: a list of times in ms (> 0)")
        for j, x in enumerate(t):
            if not _number(x) or x <= 0:
                raise ResultsError(f"{at}: times_ms[{j}]: {_short(x)} is not a time; allowed: finite numbers "
                                   f"> 0 (milliseconds)")
    m = c.get("median_ms")
    if m is not None and (not _number(m) or m <= 0):
        raise ResultsError(f"{at}: median_ms: {_short(m)}; allowed: a number > 0 (milliseconds) or null")
    if st == "ok" and not t and m is None:
        raise ResultsError(f"{at}: status 'ok' but no timing: times_ms empty or missing and median_ms missing; "
                           f"allowed: an ok case carries its samples")
    p = c.get("power")
    if p is not None:
        if not isinstance(p, dict):
            raise ResultsError(f"{at}: power: {_short(p)}; allowed: an object or null")
        clk = p.get("sm_clock_mhz_median")
        if clk is not None and (not _number(clk) or clk <= 0):
            raise ResultsError(f"{at}: power.sm_clock_mhz_median: {_short(clk)}; allowed: a number > 0 (MHz) "
                               f"or null")


# ----------------------------------------------------------------------------------------- per case


def _samples(case: dict) -> np.ndarray:
    return np.asarray(case.get("times_ms") or [], dtype=float)


def _median(case: dict, samples: np.ndarray) -> float:
    if samples.size:
        return float(np.median(samples))
    m = case.get("median_ms")
    return float(m) if m is not None else math.nan


def _clock(case: dict, timeline: dict[str, float]) -> tuple[float, str | None]:
    """(SM clock in MHz, where it came from) of a case; NaN when neither source has one."""
    v = (case.get("power") or {}).get("sm_clock_mhz_median")
    if v is not None:
        return float(v), "power"
    v = timeline.get(case["id"])
    return (float(v), "power.csv") if v is not None else (math.nan, None)


def timeline_clocks(path) -> dict[str, float]:
    """Median `sm_clock_mhz` per case id over a run's power.csv samples ({} without a usable file)."""
    df = read_power(path)
    if df is None or df.empty:
        return {}
    df = df[(df["case_id"] != "") & df["sm_clock_mhz"].notna() & (df["sm_clock_mhz"] > 0)]
    return {str(k): float(v) for k, v in df.groupby("case_id")["sm_clock_mhz"].median().items()}


def drift(samples) -> tuple[float | None, float | None]:
    """(drift, p) of `samples` in measurement order: drift = (median of the last tenth − median of the
    first tenth) / median of the first tenth; p = two-sided Mann-Whitney U test of the two tenths.
    (None, None) below `MIN_DRIFT_SAMPLES` samples."""
    s = np.asarray(samples, dtype=float)
    if s.size < MIN_DRIFT_SAMPLES:
        return None, None
    from scipy.stats import mannwhitneyu

    k = s.size // 10
    first, last = s[:k], s[-k:]
    d = (float(np.median(last)) - float(np.median(first))) / float(np.median(first))
    p = float(mannwhitneyu(first, last, alternative="two-sided").pvalue)
    return d, (p if math.isfinite(p) else 1.0)


def _row(cid: str, verdict: str, message: str, **kw: Any) -> dict:
    row = dict(id=cid, verdict=verdict, wall_verdict=None, fails_gate=verdict in ("slower", "failed", "missing"),
               base_status=None, cur_status=None, base_median_ms=None, cur_median_ms=None, change=None,
               p_value=None, n_base=0, n_cur=0, base_drift=None, cur_drift=None, base_drift_p=None,
               cur_drift_p=None, base_clock_mhz=None,
               cur_clock_mhz=None, clock_norm_change=None, clock_source=None, message=message)
    row.update(kw)
    return row


def _nan_to_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def compare_case(cid: str, b: dict | None, c: dict | None, threshold: float, alpha: float,
                 min_samples: int, drift_threshold: float = 0.03, base_timeline: dict | None = None,
                 cur_timeline: dict | None = None) -> dict:
    """The verdict for one case id (see the module docstring); cases already passed `check_results`.
    `*_timeline`: per-case SM clocks from each run's power.csv (`timeline_clocks`)."""
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
    (db, db_p), (dc, dc_p) = drift(sb), drift(sc)
    kw: dict[str, Any] = dict(base_status=bs, cur_status=cs, base_median_ms=mb, cur_median_ms=mc,
                              n_base=int(sb.size), n_cur=int(sc.size), base_drift=db, cur_drift=dc,
                              base_drift_p=db_p, cur_drift_p=dc_p)
    change = (mc - mb) / mb
    kw["change"] = change
    (clk_b, src_b), (clk_c, src_c) = _clock(b, base_timeline or {}), _clock(c, cur_timeline or {})
    if clk_b == clk_b and clk_c == clk_c:
        kw.update(base_clock_mhz=clk_b, cur_clock_mhz=clk_c, clock_norm_change=(mc * clk_c / clk_b - mb) / mb,
                  clock_source=src_b if src_b == src_c else f"{src_b} / {src_c}")
    verdict, msg = _wall_verdict(change, sb, sc, threshold, alpha, min_samples, kw)
    cn = kw.get("clock_norm_change")
    if verdict == "slower" and cn is not None and abs(cn) <= threshold:
        msg += f"; clock-normalised {cn:+.1%}: the SM clock fell {clk_b:.0f}→{clk_c:.0f} MHz (power/thermal?)"
    drifts = [(side, d, p) for side, d, p in (("baseline", db, db_p), ("current", dc, dc_p))
              if d is not None and abs(d) > drift_threshold and p < alpha]
    if not drifts:
        return _row(cid, verdict, msg, wall_verdict=verdict, **kw)
    what = ", ".join(f"{d:+.1%} (p={p:.2g}) in the {side} run" for side, d, p in drifts)
    msg = (f"{msg}; drift {what} (first vs last tenth of the samples, > {drift_threshold:.0%}): "
           f"wall time alone says {verdict}")
    fails = False
    if verdict == "slower":
        if cn is None:
            fails, msg = True, msg + "; no clock data to explain the slowdown: fails the gate"
        elif cn > threshold:
            fails, msg = True, msg + f"; clock-normalised {cn:+.1%} is slower too: fails the gate"
        else:
            msg += f"; clock-normalised {cn:+.1%} is within {threshold:.0%}: not a regression"
    return _row(cid, "drifting", msg, wall_verdict=verdict, fails_gate=fails, **kw)


def _wall_verdict(change: float, sb: np.ndarray, sc: np.ndarray, threshold: float, alpha: float,
                  min_samples: int, kw: dict) -> tuple[str, str]:
    """The verdict on wall time alone (sets kw['p_value'] when the test runs)."""
    big = abs(change) > threshold
    if sb.size < min_samples or sc.size < min_samples:
        n = f"{sb.size} vs {sc.size} samples (< {min_samples})"
        if big:
            return "ambiguous", f"{change:+.1%} but too few samples to test: {n}"
        return "same", f"{change:+.1%}, within the threshold; {n}, not tested"
    from scipy.stats import mannwhitneyu

    p = float(mannwhitneyu(sb, sc, alternative="two-sided").pvalue)
    if not math.isfinite(p):  # e.g. every sample identical
        p = 1.0
    kw["p_value"] = p
    sig = p < alpha
    tag = f"{change:+.1%}, p={p:.2g}"
    if sig and big:
        return ("slower" if change > 0 else "faster"), tag
    if sig and abs(change) > threshold / 2:
        return "ambiguous", f"{tag}: significant but under the {threshold:.0%} threshold"
    if not sig and big:
        return "ambiguous", (f"{tag}: beyond the {threshold:.0%} threshold but not significant at "
                             f"alpha={alpha:g} (noisy)")
    return "same", tag


def compare_runs(base: dict | list, cur: dict | list, threshold: float = 0.05, alpha: float = 0.01,
                 min_samples: int = 5, drift_threshold: float = 0.03, allow_missing: bool = False,
                 base_timeline: dict | None = None, cur_timeline: dict | None = None) -> list[dict]:
    """One row per case id in either run (baseline order first, then new ids): id, verdict, wall_verdict,
    fails_gate, base/cur status and median, change (fraction), p_value, n_base, n_cur, base/cur drift,
    clocks and their source, clock_norm_change, message. `base` and `cur` are results dicts (or lists of
    case dicts); both are checked first (`check_results`, raising `ResultsError`). `*_timeline`: per-case
    SM clocks from each run's power.csv (`timeline_clocks`), used where a case has no power summary."""
    bc, cc = check_results(base, "baseline"), check_results(cur, "current")
    return _compare(bc, cc, threshold, alpha, min_samples, drift_threshold, allow_missing, base_timeline,
                    cur_timeline)


def _compare(bc: dict, cc: dict, threshold: float, alpha: float, min_samples: int, drift_threshold: float,
             allow_missing: bool, base_timeline: dict | None = None, cur_timeline: dict | None = None) -> list[dict]:
    ids = list(bc) + [i for i in cc if i not in bc]
    rows = [compare_case(i, bc.get(i), cc.get(i), threshold, alpha, min_samples, drift_threshold, base_timeline,
                         cur_timeline) for i in ids]
    if allow_missing:
        for r in rows:
            if r["verdict"] == "missing":
                r["fails_gate"] = False
                r["message"] += " (allowed by --allow-missing)"
    return rows


def counts(rows: list[dict]) -> dict[str, int]:
    out = {v: 0 for v in VERDICTS}
    for r in rows:
        out[r["verdict"]] = out.get(r["verdict"], 0) + 1
    return out


def regressions(rows: list[dict]) -> list[dict]:
    """The rows that fail the gate."""
    return [r for r in rows if r["fails_gate"]]


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
                    threshold: float, alpha: float, min_samples: int, drift_threshold: float = 0.03,
                    allow_missing: bool = False) -> str:
    order = {v: i for i, v in enumerate(VERDICTS)}
    lines = ["## gdpa-bench compare", "",
             f"- baseline: {_describe(base_path, base)}", f"- current: {_describe(cur_path, cur)}",
             f"- threshold {threshold:.1%}, alpha {alpha:g}, min samples {min_samples}, drift threshold "
             f"{drift_threshold:.1%} (first vs last tenth of a case's samples, from {MIN_DRIFT_SAMPLES} samples, "
             f"significant at alpha)"
             + (", missing cases allowed" if allow_missing else ""), ""]
    gb, gc = (base.get("meta") or {}).get("gpu"), (cur.get("meta") or {}).get("gpu")
    if gb and gc and gb != gc:
        lines += [f"> **Warning:** baseline GPU `{gb}` differs from current GPU `{gc}`.", ""]
    c = counts(rows)
    lines += ["| verdict | cases |", "|---|---|"] + [f"| {v} | {c[v]} |" for v in VERDICTS] + [""]
    lines += ["| case | verdict | base ms | current ms | change | p | clock-norm change | drift base | drift cur "
              "| note |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (order.get(r["verdict"], 99), r["id"])):
        v = r["verdict"] + (" (fails)" if r["verdict"] == "drifting" and r["fails_gate"] else "")
        lines.append(f"| {_cell(r['id'])} | {v} | {_ms(r['base_median_ms'])} | {_ms(r['cur_median_ms'])} | "
                     f"{_pct(r['change'])} | {_p(r['p_value'])} | {_pct(r['clock_norm_change'])} | "
                     f"{_pct(r['base_drift'])} | {_pct(r['cur_drift'])} | {_cell(r['message'])} |")
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
        extra = [f"{n} {v}" for v in ("drifting", "missing") if (n := sum(r["verdict"] == v for r in rows))]
        return ["", f"OK: no case slower or failed ({len(rows)} compared"
                + (f"; {', '.join(extra)}, not failing" if extra else "") + ")."]
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
    p.add_argument("--threshold", type=float, default=0.05,
                   help="relative median change that counts as a regression (default 0.05 = 5%%)")
    p.add_argument("--alpha", type=float, default=0.01,
                   help="significance level of the Mann-Whitney U test (default 0.01)")
    p.add_argument("--format", choices=("md", "json"), default="md", help="output format (default md)")
    p.add_argument("--min-samples", type=int, default=5, help="fewest samples per side to run the test (default 5)")
    p.add_argument("--drift-threshold", type=float, default=0.03,
                   help="a case whose first and last tenth of samples differ by more is 'drifting' (default 0.03; "
                        "inf turns the check off)")
    p.add_argument("--allow-missing", action="store_true",
                   help="a case of the baseline absent from the current run does not fail the gate")
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
        return _bad(f"no common case ids between {args.baseline} ({len(bc)} cases) and {args.current} "
                    f"({len(cc)} cases)")
    rows = _compare(bc, cc, args.threshold, args.alpha, args.min_samples, args.drift_threshold, args.allow_missing,
                    timeline_clocks(args.baseline), timeline_clocks(args.current))
    tail = summary_lines(rows)
    if args.format == "json":
        doc = {"baseline": args.baseline, "current": args.current, "threshold": args.threshold, "alpha": args.alpha,
               "min_samples": args.min_samples, "drift_threshold": args.drift_threshold,
               "min_drift_samples": MIN_DRIFT_SAMPLES, "allow_missing": args.allow_missing, "counts": counts(rows),
               "cases": rows, "regressions": [r["id"] for r in regressions(rows)]}
        print(json.dumps(_clean(doc), indent=1, default=str))
        print("\n".join(tail).strip(), file=sys.stderr)
    else:
        print(format_markdown(rows, args.baseline, args.current, base, cur, args.threshold, args.alpha,
                              args.min_samples, args.drift_threshold, args.allow_missing))
        print("\n".join(tail))
    return 1 if regressions(rows) else 0


def _bad(message: str) -> int:
    print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(compare_main())
