"""The power estimators of a committed run, compared (issue 19; docs/experiments/power-estimators.md).

    python docs/experiments/power_estimators.py [RUN_DIR]       # default docs/example-h200; CPU only

Reads results.json and power.csv and prints every figure the write-up quotes: how many ok cases each
estimator puts above the cap and above cap + 3%, the spread between them, what they correlate with, the
energy counter's step as the plain delta reveals it, the refresh period of the instant power field in
power.csv, how long "1 s of timed samples" really was, and the drift inside the timed samples.

Each case's `power` (bench/monitor, energy loop of ~1 s) holds three estimates of the same window:
- `avg_w`: mean of the NVML instant-power samples (every 10 ms; the field itself refreshes ~every 100 ms);
- `avg_w_from_energy` (`energy_source` "counter_ticks", the report's energy figure): energy between the
  first and last energy-counter change the sampler thread saw in the window, over the time between
  those two readings (bench.monitor.summary.energy_from_ticks);
- `avg_w_from_energy_delta`: the counter read at the window's start and end by the loop's own thread.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from results.drift import drift  # noqa: E402  (the repository on the path first)
from results.files import read_results  # noqa: E402


def _pct(a) -> str:
    return " ".join(f"{x:+.1f}" for x in np.asarray(a) * 100)


def main(run_dir: Path) -> None:
    data = read_results(run_dir)
    meta = data["meta"]
    cap = float(meta.get("power_cap_w") or meta.get("enforced_power_limit_w"))
    ok = [c for c in data["cases"] if c["status"] == "ok" and c.get("power")]
    print(
        f"run {run_dir} (commit {meta.get('git_sha')}, {meta.get('gpu')}, cap {cap:.0f} W): {len(ok)} ok cases "
        f"with a power record"
    )

    def col(k):
        return np.array([np.nan if c["power"].get(k) is None else c["power"][k] for c in ok], float)

    samples, ticks, delta = col("avg_w"), col("avg_w_from_energy"), col("avg_w_from_energy_delta")
    seconds, calls = col("seconds"), col("calls")
    sources = pd.Series([c["power"].get("energy_source") for c in ok]).value_counts().to_dict()
    print(
        f"energy_source: {sources}; energy loop {np.min(seconds):.2f}-{np.max(seconds):.2f} s "
        f"(median {np.median(seconds):.2f}), {np.median(col('n_samples')):.0f} samples"
    )

    print("\n== cases above the cap, by estimator")
    for name, a in (("samples (avg_w)", samples), ("counter ticks (headline)", ticks), ("counter delta", delta)):
        print(
            f"{name:26s} > {cap:.0f} W: {int((a > cap).sum()):3d}   > {cap * 1.03:.0f} W (cap + 3%): "
            f"{int((a > cap * 1.03).sum()):3d}   max {np.nanmax(a):.1f} W   median {np.nanmedian(a):.1f} W"
        )

    print("\n== differences (percentiles 0, 5, 25, 50, 75, 95, 100; in %)")
    q = [0, 5, 25, 50, 75, 95, 100]
    for name, r in (
        ("ticks vs samples", ticks / samples - 1),
        ("delta vs samples", delta / samples - 1),
        ("ticks vs delta", ticks / delta - 1),
    ):
        print(f"{name:17s} {_pct(np.nanpercentile(r, q))}   |r| > 5%: {int((np.abs(r) > 0.05).sum())}")

    per_call_ms = seconds / calls * 1e3
    r_ticks, r_delta = ticks / samples - 1, delta / samples - 1
    print("\n== what the differences follow (Pearson r)")
    for name, x in (
        ("log10 per-call time", np.log10(per_call_ms)),
        ("samples avg_w", samples),
        ("peak/avg", col("peak_w") / samples),
        ("frac_at_cap", col("frac_at_cap")),
    ):
        print(
            f"{name:20s} ticks-samples {np.corrcoef(x, r_ticks)[0, 1]:+.2f}   "
            f"delta-samples {np.corrcoef(x, r_delta)[0, 1]:+.2f}"
        )
    for lo, hi in ((0.01, 1), (1, 10), (10, 1e4)):
        m = (per_call_ms >= lo) & (per_call_ms < hi)
        print(
            f"per call {lo:g}-{hi:g} ms: {int(m.sum()):3d} cases, median ticks-samples "
            f"{np.median(r_ticks[m]) * 100:+.1f}%, delta-samples {np.median(r_delta[m]) * 100:+.1f}%, "
            f"ticks > cap+3%: {int((ticks[m] > cap * 1.03).sum())}"
        )

    # the plain delta covers a whole number of counter steps: energy / sampled power = steps x step length
    covered = delta / samples * seconds
    hist, edges = np.histogram(covered, bins=np.arange(0.90, 1.20, 0.02))
    print("\n== seconds of energy the plain delta covers (delta/samples x loop seconds): whole counter steps")
    for n, e in zip(hist, edges, strict=False):
        print(f"  {e:.2f}-{e + 0.02:.2f} s {'#' * int(n)}")

    power = pd.read_csv(run_dir / "power.csv", keep_default_na=False)
    t = power["time_s"].astype(float).to_numpy()
    p = power["power_w"].astype(float).to_numpy()
    changes = np.flatnonzero(np.diff(p) != 0) + 1
    refresh = np.diff(t[changes]) * 1e3
    gaps = np.diff(t) * 1e3
    print(f"\n== power.csv: {len(power)} samples, columns {', '.join(power.columns)} (no energy column)")
    print(f"sample gaps ms p10/p50/p90/p99: {' '.join(f'{x:.1f}' for x in np.percentile(gaps, [10, 50, 90, 99]))}")
    print(
        f"instant power field refresh ms p5/p25/p50/p75/p95: "
        f"{' '.join(f'{x:.1f}' for x in np.percentile(refresh, [5, 25, 50, 75, 95]))}"
    )

    loops = energy_loops(power, {c["id"]: c for c in ok})
    print(
        f"\n== the energy loop inside power.csv: located for {len(loops)} of {len(ok)} cases (the run of "
        f"n_samples rows whose mean is avg_w)"
    )
    lo = pd.DataFrame(loops)
    lo["ticks_vs_middle"] = lo.ticks / lo.middle - 1
    lo["ticks_vs_samples"] = lo.ticks / lo.samples - 1
    lo["first_vs_middle"] = lo.first / lo.middle - 1
    print(
        f"ticks vs samples: r = {np.corrcoef(lo.ticks_vs_samples, lo.first_vs_middle)[0, 1]:+.2f} with the first "
        f"100 ms of the loop against its middle"
    )
    print(
        f"ticks vs the samples of the middle only (first and last 100 ms left out), p5/p25/p50/p75/p95 %: "
        f"{_pct(np.percentile(lo.ticks_vs_middle, [5, 25, 50, 75, 95]))}; |difference| > 5%: "
        f"{int((lo.ticks_vs_middle.abs() > 0.05).sum())} cases (all samples: "
        f"{int((lo.ticks_vs_samples.abs() > 0.05).sum())})"
    )
    print(f"power in the 10 samples before the loop: median {lo.before.median():.0f} W")
    r_gaps = np.corrcoef(lo.ticks_vs_samples, lo.gaps_over_15)[0, 1]
    print(
        f"sampler gaps inside the loop: p99 median {lo.gap_p99.median():.1f} ms, max median "
        f"{lo.gap_max.median():.1f} ms; r(ticks vs samples, share of gaps > 15 ms) = {r_gaps:+.2f} "
        f"(a starved sampler thread would read late)"
    )
    groups = (
        ("sw_power_cap in every sample", lo.cap_share >= 0.99),
        ("sw_power_cap in 30-99%", (lo.cap_share >= 0.3) & (lo.cap_share < 0.99)),
        ("sw_power_cap in 1-30%", (lo.cap_share > 0) & (lo.cap_share < 0.3)),
        ("never capped", lo.cap_share == 0),
    )
    for name, m in groups:
        g = lo[m]
        print(
            f"{name:29s} {len(g):3d} cases, ticks median {g.ticks.median():.0f} W, > cap+3%: "
            f"{int((g.ticks > cap * 1.03).sum()):2d}"
        )
        for what, key, fmt in (
            ("W", "w_by_tenth", "{:5.0f}"),
            ("capped", "cap_by_tenth", "{:5.2f}"),
            ("SM MHz", "mhz_by_tenth", "{:5.0f}"),
        ):
            prof = (
                np.nanmedian(np.vstack(g[key].to_numpy()), axis=0)
                if what != "capped"
                else np.nanmean(np.vstack(g[key].to_numpy()), axis=0)
            )
            print(f"    {what:7s} by tenth of the loop: {' '.join(fmt.format(x) for x in prof)}")

    timed = [c for c in data["cases"] if c["status"] == "ok"]
    n = np.array([len(c["times_ms"]) for c in timed])
    total = np.array([sum(c["times_ms"]) / 1e3 for c in timed])
    print(f"\n== timed samples: {len(timed)} ok cases, budget timing.rep_ms = 1000 ms")
    print(
        f"sum of sample times s min/p5/median/p95/max: "
        f"{' '.join(f'{x:.2f}' for x in np.percentile(total, [0, 5, 50, 95, 100]))}; < 0.9 s: "
        f"{int((total < 0.9).sum())}, > 1.1 s: {int((total > 1.1).sum())}"
    )
    i = int(np.argmax(total))
    print(f"longest: {timed[i]['id']}: {n[i]} samples x {np.median(timed[i]['times_ms']):.0f} ms (min_reps floor)")
    d = [drift(c["times_ms"]) for c in timed]
    dv = np.array([x[0] if x[0] is not None else np.nan for x in d])
    dp = np.array([x[1] if x[1] is not None else np.nan for x in d])
    print(
        f"drift (first vs last tenth): computed for {int(np.isfinite(dv).sum())} cases; |drift| > 3%: "
        f"{int((np.abs(dv) > 0.03).sum())} (significant at 0.01: {int(((np.abs(dv) > 0.03) & (dp < 0.01)).sum())}),"
        f" max |drift| {np.nanmax(np.abs(dv)) * 100:.1f}%"
    )
    share = {c["id"]: c["power"].get("frac_sw_power_cap") or 0.0 for c in ok}
    for name, keep in (
        ("never capped", lambda f: f == 0),
        ("sw_power_cap in < 30%", lambda f: 0 < f < 0.3),
        ("sw_power_cap in >= 30%", lambda f: f >= 0.3),
    ):
        ix = [i for i, c in enumerate(timed) if c["id"] in share and keep(share[c["id"]]) and np.isfinite(dv[i])]
        big = [i for i in ix if abs(dv[i]) > 0.03]
        print(
            f"  {name:23s} {len(ix):3d} cases with a drift figure: |drift| > 3% in {len(big):2d}, "
            f"{sum(dv[i] > 0 for i in big):2d} of them slower at the end; median {np.median(dv[ix]) * 100:+.1f}%"
        )
    capped = sum("sw_power_cap" in (c["power"].get("reasons") or []) for c in ok)
    print(f"\nsw_power_cap seen during the energy loop: {capped} of {len(ok)} cases")


def energy_loops(power: pd.DataFrame, cases: dict) -> list[dict]:
    """Each case's energy-loop samples, found in power.csv as the run of `n_samples` consecutive rows of
    the case whose mean power equals the recorded `avg_w`; their profile over the loop."""
    out = []
    for cid, g in power[power.case_id.isin(list(cases))].groupby("case_id", sort=False):
        p = cases[cid]["power"]
        n = int(p["n_samples"])
        w = g.power_w.astype(float).to_numpy()
        t = g.time_s.astype(float).to_numpy()
        sums = np.concatenate([[0.0], np.cumsum(w)])
        k = np.flatnonzero(np.abs((sums[n:] - sums[:-n]) / n - p["avg_w"]) < 1e-3)
        if len(k) != 1:
            continue
        k = int(k[0])
        lw, lt = w[k : k + n], t[k : k + n] - t[k]
        reasons = g.reasons.to_numpy()[k : k + n]
        capped = np.array(["sw_power_cap" in r for r in reasons], float)
        mhz = pd.to_numeric(g.sm_clock_mhz, errors="coerce").to_numpy()[k : k + n]
        tenth = np.minimum((lt / lt[-1] * 10).astype(int), 9)
        out.append(
            {
                "id": cid,
                "samples": p["avg_w"],
                "ticks": p["avg_w_from_energy"],
                "cap_share": capped.mean(),
                "first": lw[lt < 0.1].mean(),
                "middle": lw[(lt >= 0.1) & (lt <= lt[-1] - 0.1)].mean(),
                "before": w[max(0, k - 10) : k].mean() if k else np.nan,
                "gap_p99": np.percentile(np.diff(lt) * 1e3, 99),
                "gap_max": np.diff(lt).max() * 1e3,
                "gaps_over_15": float((np.diff(lt) > 0.015).mean()),
                "w_by_tenth": [lw[tenth == i].mean() for i in range(10)],
                "cap_by_tenth": [capped[tenth == i].mean() for i in range(10)],
                "mhz_by_tenth": [np.nanmedian(mhz[tenth == i]) for i in range(10)],
            }
        )
    return out


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "example-h200")
