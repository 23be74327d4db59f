"""Issue 31's bars, read from a run folder: what a configs/production.yaml run must show to close it.

- every ok case has a kernel breakdown without error, with kernels, and kernel sum / median in [0.95, 1.05]
  or flagged `host_bound` with its CUDA-graph time (`cuda_graph.ms`, or the reason it could not capture);
- every band case's bands sum within 10% of the whole batch, or `bands.why` says why not;
- `gdpa` (auto) and the pinned backend that ran the same kernel (its one-backend dispatch) agree within 3% at
  p50 and p80;
- every kept trace (`kernels.trace`) is Chrome trace JSON with its call ranges (what Perfetto's JSON loader
  reads).

Each failing case is one line; the last line counts them. Exit 1 when any bar fails.

    python docs/experiments/profiling_bars.py RUN_DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.profiling.trace_events import CALL_RANGE, complete_events, host_ranges  # noqa: E402

RATIO = (0.95, 1.05)
BANDS = 0.10
SAME_KERNEL = 0.03


def breakdown_bar(c: dict) -> str | None:
    k = c.get("kernels") or {}
    if k.get("error") or not k.get("n_kernels"):
        return f"no breakdown: {k.get('error') or 'no kernels block'}"
    ratio = k["sum_ms"] / c["median_ms"]
    if RATIO[0] <= ratio <= RATIO[1]:
        return None
    g = c.get("cuda_graph") or {}
    if c.get("host_bound") and (g.get("ms") is not None or g.get("error")):
        return None
    return f"kernel sum / median {ratio:.3f}, host_bound {c.get('host_bound')}, cuda_graph {g or 'absent'}"


def bands_bar(c: dict) -> str | None:
    b = c.get("bands")
    if not b:
        return None
    over = b.get("sum_over_whole")
    if b.get("error") or over is None:
        return f"bands not complete: {b.get('error') or [r['status'] for r in b.get('rows', [])]}"
    return None if abs(over - 1) <= BANDS or b.get("why") else f"bands sum {over:.3f}× the whole, no why"


def same_kernel_bar(c: dict, cases: dict) -> str | None:
    ran = ((c.get("kernel_config") or {}).get("dispatch") or {}).get(c["mode"], {}).get("backend")
    pinned = cases.get(c["id"].rsplit("/", 1)[0] + f"/gdpa_{ran}")
    if not ran or "+" in ran or pinned is None or pinned.get("status") != "ok":
        return None
    apart = [(q, c[q] / pinned[q] - 1) for q in ("median_ms", "p80_ms")]
    bad = [f"{q} {d:+.1%}" for q, d in apart if abs(d) > SAME_KERNEL]
    return f"auto vs gdpa_{ran}: " + ", ".join(bad) if bad else None


def trace_bar(run: Path, c: dict) -> str | None:
    rel = (c.get("kernels") or {}).get("trace")
    if not rel:
        return None
    try:
        data = json.loads((run / rel).read_text())
        events = complete_events(data)
    except (OSError, ValueError) as exc:
        return f"trace {rel}: {exc}"
    calls = [n for *_, n in host_ranges(events)].count(CALL_RANGE)
    missing = [e.get("name") for e in events if not {"ph", "ts", "dur", "pid", "tid"} <= set(e)]
    if not isinstance(data.get("traceEvents"), list) or missing or calls != c["kernels"]["profiled_calls"]:
        return f"trace {rel}: {calls} call ranges, events without ph/ts/dur/pid/tid: {missing[:3]}"
    return None


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("run", type=Path)
    run = a.parse_args().run
    cases = {c["id"]: c for c in json.loads((run / "results.json").read_text())["cases"]}
    ok = [c for c in cases.values() if c.get("status") == "ok"]
    failed, traces = 0, 0
    for c in ok:
        checks = [breakdown_bar(c), bands_bar(c), trace_bar(run, c)]
        checks += [same_kernel_bar(c, cases)] if c.get("provider") == "gdpa" else []
        traces += bool((c.get("kernels") or {}).get("trace"))
        for why in filter(None, checks):
            failed += 1
            print(f"{c['id']}: {why}")
    host_bound = sum(bool(c.get("host_bound")) for c in ok)
    print(f"{len(ok)} ok cases, {host_bound} host-bound, {traces} traces: {failed} bar(s) failed")
    return 1 if failed or not ok else 0


if __name__ == "__main__":
    sys.exit(main())
