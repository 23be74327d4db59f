"""The series of the history store and the steps found in them (`gdpa-bench history report|check`).

A series is one case id within one (config sha256, GPU model) group, its ok runs in commit-time order
(results.history_store). Its value per run is the log of the run's median time, so a step is a ratio
and a 15% step reads the same at 0.1 ms and at 20 ms.

Steps are change points found by PELT (ruptures, `Pelt(model="l2")`): the segmentation that minimises
the within-segment squared error plus a penalty per change. The penalty makes each change a significance
test at the gate's alpha (results.verdicts.CompareSettings, 0.01): a change between two levels reduces
the squared error by σ²·F, F following F(1, n − 2) when there is none, so the penalty is σ² times the
F(1, n − 2) critical value at alpha / m (Bonferroni over the m places a change can take in n runs). σ is
the run-to-run noise of that series, estimated from the series itself: first from the median absolute
successive difference (one step moves one difference only), then from the residuals of the segmentation
it gives, until the segmentation stops changing. No size is written here: how big a change must be to
count follows from the series' noise and length (12 runs, a step after 6: with 0.2% run-to-run noise a
3% step is found every time; with 1% noise a 5% step 9 times in 10, a 15% one always; with 5% noise a 5%
step hardly ever). A series without steps finds one at most 1% of the time, at any length.
A segment holds at least `MIN_RUNS` runs: one slow run alone is what `compare` against the baseline
judges; the series confirms a step once a second run sits on it.

`check_run` asks of a run whether its cases sit on a step down: the series up to and including that run
(later runs are not known to it) ends in a segment slower than the one before, and the gate's own
statistics (results.verdicts.compare_case: the Mann-Whitney test, the threshold, the clock rules) call
the run "slower" than the last run before the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import ruptures
from scipy import stats

from results.history_store import Store, order_key, read_run
from results.verdicts import CompareSettings, compare_case

MIN_RUNS = 2
#: At most this many passes of segmenting and re-estimating the noise (a fixed point comes in 2-3).
PASSES = 20


def _rss(y: np.ndarray, ends: list[int]) -> float:
    start, total = 0, 0.0
    for end in ends:
        seg = y[start:end]
        total += float(((seg - seg.mean()) ** 2).sum())
        start = end
    return total


def change_points(y: np.ndarray, alpha: float = CompareSettings.alpha) -> list[int]:
    """The indices where a new segment of `y` starts (none for a series too short to hold two segments,
    or one without noise and without change)."""
    y = np.asarray(y, dtype=float)
    n = len(y)
    if n < 2 * MIN_RUNS:
        return []
    d = np.diff(y)
    sigma = 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2)  # the MAD, as a σ
    sigma = sigma or math.sqrt(float(np.mean(d**2)) / 2)  # half the differences equal: their RMS
    if sigma == 0:
        return []
    critical = float(stats.f.isf(alpha / (n - 2 * MIN_RUNS + 1), 1, n - 2))
    algo = ruptures.Pelt(model="l2", min_size=MIN_RUNS, jump=1).fit(y.reshape(-1, 1))
    ends: list[int] = []
    for _ in range(PASSES):
        again = algo.predict(pen=critical * sigma**2)
        if again == ends:
            break
        ends = again
        sigma = math.sqrt(_rss(y, ends) / max(1, n - len(ends))) or sigma
    return ends[:-1]


# -------------------------------------------------------------------------------------------- series


def with_order(frame: pd.DataFrame, runs: list[dict]) -> pd.DataFrame:
    """`frame` with `order`: each run's place in commit-time order (its entry's position in `runs`)."""
    position = {e["run_id"]: i for i, e in enumerate(sorted(runs, key=order_key))}
    return frame.assign(order=frame["run_id"].map(position))


def each_series(frame: pd.DataFrame):
    """(config sha256, GPU, case id, the ok runs in order) for every series with a timed run."""
    ok = frame[(frame["status"] == "ok") & frame["median_ms"].gt(0)]
    for (sha, gpu, cid), rows in ok.groupby(["config_sha256", "gpu", "id"], sort=True):
        yield sha, gpu, cid, rows.sort_values("order", kind="stable").reset_index(drop=True)


def series_steps(rows: pd.DataFrame, alpha: float = CompareSettings.alpha) -> list[dict]:
    """The steps of one series (rows in order): the runs each side of the change and its size, the ratio
    of the medians of the runs' medians after and before it, minus one (> 0: slower)."""
    y = np.log(rows["median_ms"].to_numpy(dtype=float))
    starts = change_points(y, alpha)
    bounds = [0, *starts, len(rows)]
    out = []
    for i, b in enumerate(starts):
        before, after = rows.iloc[bounds[i] : b], rows.iloc[b : bounds[i + 2]]
        m0, m1 = float(before["median_ms"].median()), float(after["median_ms"].median())
        out.append(
            dict(
                at=b,
                commit_before=rows.at[b - 1, "commit"],
                commit_after=rows.at[b, "commit"],
                time_before=rows.at[b - 1, "commit_time"],
                time_after=rows.at[b, "commit_time"],
                run_before=rows.at[b - 1, "run_id"],
                run_after=rows.at[b, "run_id"],
                median_before_ms=m0,
                median_after_ms=m1,
                size=m1 / m0 - 1,
                runs_before=len(before),
                runs_after=len(after),
            )
        )
    return out


def all_steps(frame: pd.DataFrame) -> pd.DataFrame:
    """Every step of every series of `frame` (with `order`): one row each, series keys first."""
    rows = []
    for sha, gpu, cid, s in each_series(frame):
        for step in series_steps(s):
            keys = dict(config_sha256=sha, gpu=gpu, id=cid, label=s.at[0, "label"], panel=s.at[0, "panel"])
            rows.append({**keys, "max_len": s.at[0, "max_len"], **step})
    columns = ["config_sha256", "gpu", "id", "label", "panel", "max_len", "at", "commit_before", "commit_after"]
    columns += ["time_before", "time_after", "run_before", "run_after", "median_before_ms", "median_after_ms"]
    columns += ["size", "runs_before", "runs_after"]
    return pd.DataFrame(rows, columns=columns)


# --------------------------------------------------------------------------------------------- check


def case_record(row: pd.Series) -> dict:
    """A store row as the case record `compare_case` reads (samples in ms, the clocks where it looks)."""
    times = [t / 1e6 for t in row["times_ns"]]
    clock = row["sm_clock_mhz"]
    power_clock = row["power_sm_clock_mhz"]
    return dict(
        id=row["id"],
        status=row["status"],
        times_ms=times,
        median_ms=None if math.isnan(row["median_ms"]) else float(row["median_ms"]),
        sm_clock_mhz=None if math.isnan(clock) else float(clock),
        power={"sm_clock_mhz_median": None if math.isnan(power_clock) else float(power_clock)},
    )


def _timeline(row: pd.Series) -> dict[str, float]:
    v = row["timeline_sm_clock_mhz"]
    return {} if math.isnan(v) else {row["id"]: float(v)}


@dataclass
class CheckResult:
    """What `history check` found: `flagged` (one dict per case on a confirmed step down: id, step, the
    gate's row), how many cases had a series to look at (`checked`), and the run's `entry`."""

    entry: dict
    flagged: list[dict]
    checked: int
    earlier_runs: int


def check_run(store: Store, run_dir, settings: CompareSettings | None = None) -> CheckResult:
    """The cases of `run_dir` that sit on a step down of their series (module docstring). The run need
    not be in the store: its rows are read from the folder (and replace the stored ones of the same run)."""
    settings = settings or CompareSettings()
    entry, rows = read_run(run_dir)
    runs = [e for e in store.runs if e["run_id"] != entry["run_id"]]
    same = [e for e in runs if (e["config_sha256"], e["gpu"]) == (entry["config_sha256"], entry["gpu"])]
    earlier = [e for e in same if order_key(e) <= order_key(entry)]
    frame = store.frame()
    frame = frame[frame["run_id"].isin({e["run_id"] for e in earlier})]
    frame = with_order(pd.concat([frame, rows], ignore_index=True), [*earlier, entry])
    flagged, checked = [], 0
    newest = len(earlier)
    for _, _, cid, s in each_series(frame):
        if s.at[len(s) - 1, "order"] != newest or len(s) < 2 * MIN_RUNS:
            continue  # not ok in this run (compare's `failed`), or too few runs for a series to confirm
        checked += 1
        steps = series_steps(s, settings.alpha)
        if not steps or steps[-1]["size"] <= 0:
            continue
        step = steps[-1]
        before, cur = s.iloc[step["at"] - 1], s.iloc[len(s) - 1]
        row = compare_case(cid, case_record(before), case_record(cur), settings, _timeline(before), _timeline(cur))
        if row["fails_gate"] and row["verdict"] in ("slower", "drifting"):
            flagged.append(dict(id=cid, step=step, gate=row))
    return CheckResult(entry, flagged, checked, len(earlier))
