"""Per-case agreement of two runs of one config (e.g. `--gpus all` against `--device 0`).

    python docs/experiments/shard_agreement.py ONE/results.json TWO/results.json --csv OUT.csv

Prints the statuses that differ, the |ΔTFLOP/s| distribution over cases ok in both (timed samples and
the energy loop), and the worst cases with the kernel config each run chose. Exit 1 if a case that ran
in both is more than --tolerance apart (or a status differs), so it can gate a re-measurement.
"""

from __future__ import annotations

import argparse
import sys

import pandas as pd

sys.path.insert(0, __import__("os").path.dirname(__file__) + "/../..")
from results.files import read_results as load_results


def frame(path: str) -> pd.DataFrame:
    rows = []
    for c in load_results(path)["cases"]:
        rows.append(
            {
                "case": c["id"],
                "status": c["status"].split(":")[0],
                "tflops": c.get("tflops"),
                "energy_tflops": (c.get("power") or {}).get("tflops"),
                "gpu_index": c.get("gpu_index"),
                "reps": len(c.get("times_ms") or []),
                "kernel_config": str(c.get("kernel_config") or ""),
            }
        )
    return pd.DataFrame(rows).set_index("case")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("one"), ap.add_argument("two")
    ap.add_argument("--csv", help="write the per-case table here")
    ap.add_argument("--tolerance", type=float, default=0.05, help="relative TFLOP/s difference allowed")
    a = ap.parse_args(argv)
    d = frame(a.one).join(frame(a.two), lsuffix="_one", rsuffix="_two", how="outer")
    d["delta_pct"] = 100 * (d.tflops_two / d.tflops_one - 1)
    d["energy_delta_pct"] = 100 * (d.energy_tflops_two / d.energy_tflops_one - 1)
    if a.csv:
        d.round(4).to_csv(a.csv)
    status_diff = d[d.status_one != d.status_two]
    ok = d[(d.status_one == "ok") & (d.status_two == "ok")].copy()
    ab = ok.delta_pct.abs()
    print(f"cases: {len(d)}; ok in both: {len(ok)}; statuses differ: {len(status_diff)}")
    for case, r in status_diff.iterrows():
        print(f"  status {case}: {r.status_one} vs {r.status_two}")
    if len(ok):
        print(
            f"|ΔTFLOP/s| median {ab.median():.2f}%  p90 {ab.quantile(0.9):.2f}%  max {ab.max():.2f}%  "
            f"within 2%: {(ab <= 2).sum()}/{len(ok)}  within 5%: {(ab <= 5).sum()}/{len(ok)}"
        )
        eab = ok.energy_delta_pct.abs().dropna()
        if len(eab):
            print(f"energy loop |ΔTFLOP/s| median {eab.median():.2f}%  max {eab.max():.2f}%")
        print("worst:")
        for case, r in ok.assign(ab=ab).sort_values("ab", ascending=False).head(8).iterrows():
            same = (
                "same config"
                if r.kernel_config_one == r.kernel_config_two
                else f"configs differ: {r.kernel_config_one} | {r.kernel_config_two}"
            )
            print(
                f"  {r.delta_pct:+6.2f}% (energy {r.energy_delta_pct:+6.2f}%) {case} "
                f"[gpu {r.gpu_index_two:.0f}; {r.tflops_one:.1f} vs {r.tflops_two:.1f}] "
                f"{same if r.kernel_config_one else ''}"
            )
    bad = len(status_diff) > 0 or (len(ok) and ab.max() > 100 * a.tolerance)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
