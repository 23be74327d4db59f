"""Issue 31's bars, read from a run folder: what a configs/production.yaml run must show to close it.

- every ok case has a kernel breakdown without error, with kernels, and its kernel sum against the call timed
  in the same profiler pass (`kernels.sum_over_pass`: the kernels of the pass's event-timed calls,
  `pass_sum_ms`, over their median; docs/DESIGN.md §5) in [0.95, 1.05] (`accounted`), or
  flagged `host_bound` with its CUDA-graph time (`cuda_graph.ms`, or the reason it could not capture), or in
  [0.90, 0.95) on a call of more than one kernel (`launch gaps`: the GPU idles between its kernels); a
  single-kernel call there, and a sum over 1.05, fail. A pass that was host-bound under the profiler (its
  own host time per launch: the H200 run of 2026-12-02 at e0f4875 had 11 such GPU-bound calls, 0.52-0.89 of
  the pass) is judged on kernel sum / CUDA-graph time instead, the call's device time, with the same bars.
  Runs before the pass's own median (no `pass_median_ms`) are judged on kernel sum / median;
- a case flagged `host_bound` whose CUDA-graph time is within 10% of its median fails (the flag then came from
  the profiler's own host time in the pass, not from the call); a CUDA-graph capture that ran out of memory
  fails (the case fitted to be timed: the memory is the harness's);
- every band case's bands sum within 10% of the whole batch, or `bands.why` says why not;
- `gdpa` (auto) and the pinned backend that ran the same kernel (its one-backend dispatch) agree within 3% at
  p50 and p80 (the line adds both cases' SM clocks and CUDA-graph times: a clock step of the power cap
  between two cases timed seconds apart moves a GPU-bound call, host time a short one; with `chunk_clocks`
  in the run, also both in SM cycles, each sample at its chunk's clock — printed, not judged);
- every kept trace (`kernels.trace`, or its .gz beside it in a committed run) is Chrome trace JSON with its
  call ranges (what Perfetto's JSON loader reads).

Each failing case is one line; the last line counts them. Exit 1 when any bar fails.

    python docs/experiments/profiling_bars.py RUN_DIR
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.profiling.trace_events import CALL_RANGE, complete_events, host_ranges  # noqa: E402
from results.figures import judged_kernel_ms  # noqa: E402
from results.files import read_results  # noqa: E402

RATIO = (0.95, 1.05)
GAPS = 0.90  # down to here a multi-kernel call's missing share is its launch gaps (below: host-bound)
BANDS = 0.10
SAME_KERNEL = 0.03


def breakdown_bar(c: dict) -> str | None:
    k = c.get("kernels") or {}
    if k.get("error") or not k.get("n_kernels"):
        return f"no breakdown: {k.get('error') or 'no kernels block'}"
    call, what = (k["pass_median_ms"], "pass median") if k.get("pass_median_ms") else (c["median_ms"], "median")
    ratio = judged_kernel_ms(k) / call
    if RATIO[0] <= ratio <= RATIO[1]:
        return None
    if GAPS <= ratio < RATIO[0] and k["n_kernels"] > 1:
        return None  # launch gaps between the call's kernels: reported, explained
    g = c.get("cuda_graph") or {}
    if g.get("ms") and (k.get("accounting") == "host-bound" or ratio < RATIO[0]):
        # the pass was host-bound under the profiler (its own host time per launch), the call as users run it
        # need not be: the kernels must then account for the call's device time, its CUDA-graph time (also
        # for a one-kernel call short of its pass median: no launch gap can explain it, the profiler's host
        # time can; the H200 run of 2026-12-03: seeds/fwd/L=4096/sort=True/gdpa 0.912 of its pass, 1.03 of
        # its graph time)
        on_device = judged_kernel_ms(k) / g["ms"]
        if RATIO[0] <= on_device <= RATIO[1] or (GAPS <= on_device < RATIO[0] and k["n_kernels"] > 1):
            return None
    if c.get("host_bound") and (g.get("ms") is not None or g.get("error")):
        return None
    gaps = " (launch gaps on a call of one kernel)" if GAPS <= ratio < RATIO[0] else ""
    return f"kernel sum / {what} {ratio:.3f}{gaps}, host_bound {c.get('host_bound')}, cuda_graph {g or 'absent'}"


def host_bound_bar(c: dict) -> str | None:
    """A case flagged host-bound must be one: where its CUDA-graph time (the device time, no host) is within
    10% of its timed median, the GPU did not idle on the call as users run it, and the flag came from the
    profiled pass's own host time (the H200, 2026-12-02: log-normal 2048 `gdpa` forward idle 27% under the
    profiler, 1.8% by its graph time)."""
    g = (c.get("cuda_graph") or {}).get("ms")
    if not c.get("host_bound") or g is None or not c.get("median_ms"):
        return None
    idle = 1 - g / c["median_ms"]
    if idle > 1 - GAPS:
        return None
    under = (c.get("kernels") or {}).get("idle_share")
    return f"host_bound, but its CUDA-graph time is {g / c['median_ms']:.3f} of its median (GPU idle {idle:.1%}; " + (
        f"{under:.1%} in the profiled pass)" if under is not None else "the pass's idle share unknown)"
    )


def graph_bar(c: dict) -> str | None:
    """A capture that ran out of memory is the harness's, not the provider's: the case fitted to be timed."""
    err = (c.get("cuda_graph") or {}).get("error") or ""
    return "CUDA-graph capture out of memory" if "out of memory" in err.lower() else None


def launch_gaps(c: dict) -> bool:
    k = c.get("kernels") or {}
    return k.get("accounting") == "launch gaps" and breakdown_bar(c) is None


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
    # the evidence beside it: the clocks the samples ran at (the power cap's) and the device times
    graphs = [(x.get("cuda_graph") or {}).get("ms") for x in (c, pinned)]
    if bad:
        bad.append(f"SM clock {c.get('sm_clock_mhz')} vs {pinned.get('sm_clock_mhz')} MHz")
        if None not in graphs:
            bad.append(f"CUDA-graph {graphs[0]:.4g} vs {graphs[1]:.4g} ms")
        cycles = [kilocycles(x) for x in (c, pinned)]
        if all(cycles):
            p50, p80 = (float(np.percentile(cycles[0], q) / np.percentile(cycles[1], q) - 1) for q in (50, 80))
            bad.append(f"in SM cycles (each chunk's clock) p50 {p50:+.1%} p80 {p80:+.1%}")
    return f"auto vs gdpa_{ran}: " + ", ".join(bad) if bad else None


def kilocycles(c: dict) -> list[float] | None:
    """Each sample × the SM clock read at the end of its chunk (`chunk_clocks`: ms × MHz = thousands of
    cycles), or None when the run did not keep the clocks per chunk."""
    chunks, times = c.get("chunk_clocks") or [], c.get("times_ms") or []
    if not chunks or chunks[-1][0] != len(times) or any(mhz is None for _, mhz in chunks):
        return None
    out, start = [], 0
    for end, mhz in chunks:
        out += [t * mhz for t in times[start:end]]
        start = end
    return out


def trace_bar(run: Path, c: dict) -> str | None:
    rel = (c.get("kernels") or {}).get("trace")
    if not rel:
        return None
    path = run / rel
    if not path.exists() and path.with_name(path.name + ".gz").exists():  # a committed run keeps it gzipped
        path = path.with_name(path.name + ".gz")
    try:
        text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        data = json.loads(text)
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
    cases = {c["id"]: c for c in read_results(run)["cases"]}
    ok = [c for c in cases.values() if c.get("status") == "ok"]
    failed, traces = 0, 0
    for c in ok:
        checks = [breakdown_bar(c), host_bound_bar(c), graph_bar(c), bands_bar(c), trace_bar(run, c)]
        checks += [same_kernel_bar(c, cases)] if c.get("provider") == "gdpa" else []
        traces += bool((c.get("kernels") or {}).get("trace"))
        for why in filter(None, checks):
            failed += 1
            print(f"{c['id']}: {why}")
    host_bound = sum(bool(c.get("host_bound")) for c in ok)
    gaps = sum(launch_gaps(c) for c in ok)
    counts = f"{len(ok)} ok cases, {host_bound} host-bound, {gaps} with launch gaps, {traces} traces"
    print(f"{counts}: {failed} bar(s) failed")
    return 1 if failed or not ok else 0


if __name__ == "__main__":
    sys.exit(main())
