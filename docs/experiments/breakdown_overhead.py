"""Issue 26's bar "timing with the kernel breakdown on differs by <= 2% from one with it off".

The breakdown is a profiler pass after a case's samples, so it cannot slow the case's own samples; what it
could do is leave the profiler (CUPTI) costing something in the cases timed after it. This script runs the
same cases three times in one process — breakdown off, on, off again — through the harness (`bench.run`,
configs/production.yaml's cases, no energy loop, longer sample windows so that run-to-run noise stays
under the bar) and compares each case's median with the breakdown on against the mean of the two off runs.

    PYTHONPATH=. python docs/experiments/breakdown_overhead.py [--only REGEX] [--rep-ms 1000]   # writes $OUT/
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

import bench  # noqa: E402

BAR_CASES = r"^(lognormal/(fwd|bwd)/L=2048/sort=False|uniform/(fwd|bwd)/L=2048)/(gdpa|fa4)$"
BAR = 0.02


def config(breakdown: bool, rep_ms: float) -> dict:
    cfg = yaml.safe_load((ROOT / "configs" / "production.yaml").read_text())
    for view in ("bands", "counters"):
        cfg.pop(view, None)
    cfg["breakdown"] = {"enabled": breakdown}
    cfg["power"] = {"energy_loop_s": 0, "settle_s": 0}
    cfg["hardware"] = {**cfg.get("hardware", {}), "calibrate": False}
    cfg["timing"] = {"warmup_ms": 100, "rep_ms": rep_ms, "min_reps": 20}
    return cfg


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=BAR_CASES)
    p.add_argument("--rep-ms", type=float, default=1000.0)
    a = p.parse_args()
    out = Path(os.environ.get("OUT", "runs")) / "breakdown_overhead"
    medians: dict[str, dict[str, float]] = {}
    for tag, on in (("off1", False), ("on", True), ("off2", False)):
        df = bench.run(config(on, a.rep_ms), only=a.only, out=out / tag)
        for _, r in df[df["status"] == "ok"].iterrows():
            medians.setdefault(r["id"], {})[tag] = float(r["median_ms"])
    rows, worst = [], 0.0
    for cid, m in medians.items():
        if len(m) < 3:
            continue
        off = (m["off1"] + m["off2"]) / 2
        change = m["on"] / off - 1
        worst = max(worst, abs(change))
        rows.append({"id": cid, **m, "change_vs_off": change, "off_noise": m["off2"] / m["off1"] - 1})
        print(f"{cid:45s} off {m['off1']:.4g} / {m['off2']:.4g} ms, on {m['on']:.4g} ms: {100 * change:+.2f}%")
    verdict = "within" if worst <= BAR else "NOT within"
    print(f"worst change {100 * worst:.2f}%: {verdict} {100 * BAR:.0f}%")
    (out / "breakdown_overhead.json").write_text(json.dumps({"rows": rows, "worst": worst}, indent=1))
    return 0 if rows and worst <= BAR else 1


if __name__ == "__main__":
    sys.exit(main())
