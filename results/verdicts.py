"""The CI gate's verdicts (`gdpa-bench compare BASE CURRENT`): per case the change of the median, the
Mann-Whitney test of the two sample sets, the clock-normalised change and the drift of each run.

The two runs (results.json files, schema `gdpa-bench/1`, or run folders holding one) are both
checked strictly before anything is compared (`results.checks`): a gate that reads a malformed file
as "nothing slower" would pass anything. Cases are matched by id. For each case present and ok in both:

- change = (median_cur − median_base) / median_base, medians of the raw samples (`times_ms`; the
  recorded `median_ms` when a file kept no samples);
- p = two-sided Mann-Whitney U test of the two sample sets (scipy.stats.mannwhitneyu);
- when both runs have an SM clock for the case, the clock-normalised change: the current time
  scaled by clock_cur / clock_base (time × clock ∝ cycles), so a slowdown that only comes from a lower
  clock (power cap, thermals) shows up as ≈ 0 there. The clock is the case's `sm_clock_mhz` (the
  median SM clock while its timed samples ran), else `power.sm_clock_mhz_median` (the energy loop's),
  else the median `sm_clock_mhz` of the run's power.csv samples tagged with the case id (older runs);
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from results.checks import check_results
from results.drift import drift
from results.power import thermal
from results.power_csv import read_power
from results.record import samples_clock

VERDICTS = ("failed", "missing", "slower", "drifting", "ambiguous", "faster", "new", "same")


class BadSetting(ValueError):
    """A compare setting out of range: `setting` names it, `why` says what is allowed."""

    def __init__(self, setting: str, why: str):
        self.setting, self.why = setting, why
        super().__init__(f"{setting} {why}")


@dataclass(frozen=True)
class CompareSettings:
    """How `compare` judges a case (the rules above): the relative median change that counts
    (`threshold`), the significance level of the tests (`alpha`), the fewest samples per side to run a
    test (`min_samples`), the first-vs-last-tenth change that makes a run drifting (`drift_threshold`;
    inf: off), and whether a case the current run lacks is allowed (`allow_missing`)."""

    threshold: float = 0.05
    alpha: float = 0.01
    min_samples: int = 5
    drift_threshold: float = 0.03
    allow_missing: bool = False

    def __post_init__(self):
        if not (math.isfinite(self.threshold) and self.threshold >= 0):
            raise BadSetting("threshold", f"must be ≥ 0, got {self.threshold}")
        if not (0 < self.alpha < 1):
            raise BadSetting("alpha", f"must be in (0, 1), got {self.alpha}")
        if self.min_samples < 1:
            raise BadSetting("min_samples", f"must be ≥ 1, got {self.min_samples}")
        if not self.drift_threshold > 0:  # NaN fails this too
            raise BadSetting("drift_threshold", f"must be > 0 (inf: off), got {self.drift_threshold}")


def _samples(case: dict) -> np.ndarray:
    return np.asarray(case.get("times_ms") or [], dtype=float)


def _median(case: dict, samples: np.ndarray) -> float:
    if samples.size:
        return float(np.median(samples))
    m = case.get("median_ms")
    return float(m) if m is not None else math.nan


def _clock(case: dict, timeline: dict[str, float]) -> tuple[float, str | None]:
    """(SM clock in MHz, where it came from) of a case; NaN when no source has one. First the clock of
    the timed samples themselves (`sm_clock_mhz`, runs since issue 19), then the energy loop's, then the
    run's power.csv samples tagged with the case."""
    chunks = case.get("chunk_clocks")
    v = samples_clock(chunks) if isinstance(chunks, list) and chunks else None
    if v is None:  # runs before the per-chunk readings (2026-12-03) or without them
        v = case.get("sm_clock_mhz")
    if v is not None:
        return float(v), "timed"
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


def _row(cid: str, verdict: str, message: str, **kw: Any) -> dict:
    """A compare row: what the verdict sets, every other field unset (None; the sample counts 0)."""
    fails = verdict in ("slower", "failed", "missing")
    row = {"id": cid, "verdict": verdict, "wall_verdict": None, "fails_gate": fails}
    row |= dict.fromkeys("base_status cur_status base_median_ms cur_median_ms change p_value".split())
    row |= {"n_base": 0, "n_cur": 0}
    row |= dict.fromkeys("base_drift cur_drift base_drift_p cur_drift_p base_clock_mhz cur_clock_mhz".split())
    row |= {"clock_norm_change": None, "clock_source": None, "message": message}
    return row | kw


def compare_case(
    cid: str,
    base: dict | None,
    cur: dict | None,
    settings: CompareSettings,
    base_timeline: dict | None = None,
    cur_timeline: dict | None = None,
) -> dict:
    """The verdict for one case id (see the module docstring); cases already passed `check_results`.
    `*_timeline`: per-case SM clocks from each run's power.csv (`timeline_clocks`)."""
    if cur is None:
        return _row(cid, "missing", "in the baseline, not in the current run", base_status=base.get("status"))
    if base is None:
        st = cur.get("status")
        msg = "not in the baseline" + (f" (current status {st}: {cur.get('error')})" if st != "ok" else "")
        return _row(cid, "new", msg, cur_status=st)
    base_status, cur_status = base.get("status"), cur.get("status")
    statuses = dict(base_status=base_status, cur_status=cur_status)
    if base_status != "ok":
        if cur_status == "ok":
            return _row(cid, "new", f"baseline was {base_status}; ok now", **statuses)
        note = f"baseline {base_status}, current {cur_status}" + (f": {cur.get('error')}" if cur.get("error") else "")
        return _row(cid, "same", f"not ok in either run ({note})", **statuses)
    if cur_status != "ok":
        return _row(cid, "failed", f"now {cur_status}: {cur.get('error') or 'no error recorded'}", **statuses)

    base_samples, cur_samples = _samples(base), _samples(cur)
    base_ms, cur_ms = _median(base, base_samples), _median(cur, cur_samples)
    (base_drift, base_drift_p), (cur_drift, cur_drift_p) = drift(base_samples), drift(cur_samples)
    kw: dict[str, Any] = dict(
        **statuses,
        base_median_ms=base_ms,
        cur_median_ms=cur_ms,
        n_base=int(base_samples.size),
        n_cur=int(cur_samples.size),
        base_drift=base_drift,
        cur_drift=cur_drift,
        base_drift_p=base_drift_p,
        cur_drift_p=cur_drift_p,
    )
    change = (cur_ms - base_ms) / base_ms
    kw["change"] = change
    (base_clock, base_src), (cur_clock, cur_src) = _clock(base, base_timeline or {}), _clock(cur, cur_timeline or {})
    if base_clock == base_clock and cur_clock == cur_clock:
        kw.update(
            base_clock_mhz=base_clock,
            cur_clock_mhz=cur_clock,
            clock_norm_change=(cur_ms * cur_clock / base_clock - base_ms) / base_ms,
            clock_source=base_src if base_src == cur_src else f"{base_src} / {cur_src}",
        )
    threshold = settings.threshold
    verdict, msg = _wall_verdict(change, base_samples, cur_samples, settings, kw)
    per_clock = kw.get("clock_norm_change")
    if verdict == "slower" and per_clock is not None and abs(per_clock) <= threshold:
        hot = thermal(cur.get("power"))
        msg += f"; clock-normalised {per_clock:+.1%}: the SM clock fell {base_clock:.0f}→{cur_clock:.0f} MHz " + (
            f"({hot} in the current run)" if hot else "(power/thermal?)"
        )
    drifts = [
        (side, d, p)
        for side, d, p in (("baseline", base_drift, base_drift_p), ("current", cur_drift, cur_drift_p))
        if d is not None and abs(d) > settings.drift_threshold and p < settings.alpha
    ]
    if not drifts:
        return _row(cid, verdict, msg, wall_verdict=verdict, **kw)
    what = ", ".join(f"{d:+.1%} (p={p:.2g}) in the {side} run" for side, d, p in drifts)
    msg = (
        f"{msg}; drift {what} (first vs last tenth of the samples, > {settings.drift_threshold:.0%}): "
        f"wall time alone says {verdict}"
    )
    fails = False
    if verdict == "slower":
        if per_clock is None:
            fails, msg = True, msg + "; no clock data to explain the slowdown: fails the gate"
        elif per_clock > threshold:
            fails, msg = True, msg + f"; clock-normalised {per_clock:+.1%} is slower too: fails the gate"
        else:
            msg += f"; clock-normalised {per_clock:+.1%} is within {threshold:.0%}: not a regression"
    return _row(cid, "drifting", msg, wall_verdict=verdict, fails_gate=fails, **kw)


def _wall_verdict(
    change: float, base_samples: np.ndarray, cur_samples: np.ndarray, settings: CompareSettings, kw: dict
) -> tuple[str, str]:
    """The verdict on wall time alone (sets kw['p_value'] when the test runs)."""
    threshold, alpha, min_samples = settings.threshold, settings.alpha, settings.min_samples
    big = abs(change) > threshold
    if base_samples.size < min_samples or cur_samples.size < min_samples:
        n = f"{base_samples.size} vs {cur_samples.size} samples (< {min_samples})"
        if big:
            return "ambiguous", f"{change:+.1%} but too few samples to test: {n}"
        return "same", f"{change:+.1%}, within the threshold; {n}, not tested"
    from scipy.stats import mannwhitneyu  # noqa: PLC0415  (scipy is slow to import; only when a test runs)

    p = float(mannwhitneyu(base_samples, cur_samples, alternative="two-sided").pvalue)
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
        return "ambiguous", (
            f"{tag}: beyond the {threshold:.0%} threshold but not significant at alpha={alpha:g} (noisy)"
        )
    return "same", tag


def compare_runs(
    base: dict | list,
    cur: dict | list,
    settings: CompareSettings | None = None,
    base_timeline: dict | None = None,
    cur_timeline: dict | None = None,
) -> list[dict]:
    """One row per case id in either run (baseline order first, then new ids): id, verdict, wall_verdict,
    fails_gate, base/cur status and median, change (fraction), p_value, n_base, n_cur, base/cur drift,
    clocks and their source, clock_norm_change, message. `base` and `cur` are results dicts (or lists of
    case dicts); both are checked first (`check_results`, raising `ResultsError`). `*_timeline`: per-case
    SM clocks from each run's power.csv (`timeline_clocks`), used where a case has no power summary."""
    base_cases, cur_cases = check_results(base, "baseline"), check_results(cur, "current")
    return compare_checked(base_cases, cur_cases, settings or CompareSettings(), base_timeline, cur_timeline)


def compare_checked(
    base_cases: dict,
    cur_cases: dict,
    settings: CompareSettings,
    base_timeline: dict | None = None,
    cur_timeline: dict | None = None,
) -> list[dict]:
    """`compare_runs` over cases already checked (`check_results`: {id: case})."""
    ids = list(base_cases) + [i for i in cur_cases if i not in base_cases]
    rows = [compare_case(i, base_cases.get(i), cur_cases.get(i), settings, base_timeline, cur_timeline) for i in ids]
    if settings.allow_missing:
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
