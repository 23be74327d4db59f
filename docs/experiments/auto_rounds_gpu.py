"""Issue 30: why `auto`'s rounds time `hopper` alone 4-7% slower than the harness does (kernels/gdpa/PERF.md "auto's
finalists timed again, each alone": on uniform 2048 forward the rounds had it 17.02 / 17.52 ms and the harness 16.35,
both on one H100 at the samples' 1555 MHz, so auto runs a split 5.9% behind `gdpa_hopper`).

Each forward candidate of `auto` (kernels.gdpa.plan.candidates, launched as the op launches them) is timed here
four ways in one process, NVML sampled every 10 ms beside it (bench.monitor.PowerMonitor in its own process), each
timed segment tagged so its samples' SM clock and power go with its times:

- `rounds`: auto's own rounds (kernels.gdpa.choice._time_ms, ROUNDS interleaved, the candidates in auto's order);
- `reversed`: the same rounds, the candidates in the opposite order (does a candidate inherit its predecessor's
  clock? the power controller answers in tens of ms);
- `no-flush`: auto's order, no L2 flush between calls (the flush is 256 MB of writes before every call);
- `slices`: a candidate for auto's rounds to become — SLICE_ROUNDS rounds of ~10 ms slices (one call at least,
  not five), each round in a shuffled order, each slice divided by its round's median slice (a power-capped
  clock swings ~25% over ~1 s on an H100 under this load, docs/experiments/h100-2026-12-07b: a fixed order of
  ~100 ms rounds puts a candidate at the same phase every round); its `norm` column is the median ratio times the
  median of the rounds' medians;
- `alone`: each candidate by itself as the harness times a case: 1 s of its own calls, then 300 ms of
  event-timed calls (bench.case.timing.time_cuda, the harness's sampler; its flush is 2x L2).

Per segment: the median call (ms), the samples' median SM clock (MHz) and mean power (W), and ms x MHz (kcycles),
which tells a clock that the history set (same kcycles, another ms) from work that changed (other kcycles).

    # on the GPU machine, FA4 installed, the Hopper kernels in $GDPA_HOPPER_KERNEL_DIR (h200_session.sh env):
    PYTHONPATH=. python docs/experiments/auto_rounds_gpu.py [--only uniform/L=2048 ...]
    # -> $OUT/auto_rounds.json, rewritten after each batch; a table per batch on stdout
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "experiments"))

SCHEMES = ("rounds", "reversed", "no-flush", "slices", "alone")
SLICE_MS, SLICE_ROUNDS = 10.0, 12
SETTLE_S, ALONE_MS = 1.0, 300.0  # h200_session.sh's windows: power.settle_s and timing.rep_ms


def candidates(q, k, v, offsets, max_len):
    """[(label, fn)] in auto's order, each fn one forward of that plan as the op launches it."""
    import torch

    from kernels.gdpa import GDPAOptions, interface
    from kernels.gdpa import plan as gdpa_plan
    from kernels.gdpa.call import GDPACall

    options = GDPAOptions()
    call = GDPACall(q, k, v, offsets, offsets, max_len, max_len)
    out = []
    for stages in gdpa_plan.candidates("fwd", call, options):

        def fn(stages=stages):
            with torch.no_grad():
                return interface._launch("fwd", call, options, stages, None)

        out.append((gdpa_plan.label(stages), fn))
    return out


def segment(mon, tag: str, run) -> dict:
    """`run()` -> ms, inside a monitor case `tag`; its samples' clock and power."""
    import torch

    start = len(mon)
    mon.begin_case(tag)
    ms = run()
    torch.cuda.synchronize()
    mon.end_case()
    rows = [s for s in mon.samples(start) if s["case_id"] == tag]
    clocks = [s["sm_clock_mhz"] for s in rows if s["sm_clock_mhz"] is not None]
    mhz = statistics.median(clocks) if clocks else None
    return {
        "ms": ms,
        "mhz": mhz,
        "w": statistics.fmean(s["power_w"] for s in rows) if rows else None,
        "samples": len(rows),
        "kcycles": ms * mhz if mhz else None,
    }


def time_batch(mon, fns, rounds: int) -> dict:
    """{scheme: {label: [segment, ...]}}"""
    import torch

    from bench.case.timing import time_cuda
    from kernels.gdpa import choice

    flush = torch.empty(choice.FLUSH_BYTES, dtype=torch.int8, device="cuda")
    no_flush = torch.empty(1, dtype=torch.int8, device="cuda")
    out: dict = {s: {name: [] for name, _ in fns} for s in SCHEMES}
    for scheme, order, buf in (("rounds", fns, flush), ("reversed", fns[::-1], flush), ("no-flush", fns, no_flush)):
        for r in range(rounds):
            for name, fn in order:
                out[scheme][name].append(
                    segment(mon, f"{scheme}/{r}/{name}", lambda fn=fn, buf=buf: choice._time_ms(fn, buf))
                )
    sizes = {name: slice_calls(fn, flush) for name, fn in fns}
    for r in range(SLICE_ROUNDS):
        order = list(fns)
        random.Random(r).shuffle(order)
        for name, fn in order:
            out["slices"][name].append(
                dict(
                    segment(mon, f"slices/{r}/{name}", lambda fn=fn, n=sizes[name]: timed_calls(fn, flush, n)),
                    round=r,
                )
            )
    for name, fn in fns:

        def alone(fn=fn):
            import time

            end = time.monotonic() + SETTLE_S
            while time.monotonic() < end:
                for _ in range(4):
                    fn()
                torch.cuda.synchronize()
            return time_cuda(fn, warmup_ms=0.0, rep_ms=ALONE_MS).median_ms

        out["alone"][name].append(segment(mon, f"alone/{name}", alone))
    return out


def slice_calls(fn, flush) -> int:
    """Calls in one ~SLICE_MS slice of `fn`, from one timed call (at least one)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush.zero_()
    start.record()
    fn()
    end.record()
    end.synchronize()
    return max(1, min(100, round(SLICE_MS / max(start.elapsed_time(end), 1e-3))))


def timed_calls(fn, flush, n: int) -> float:
    """The median of `n` calls, each between events after an L2 flush (auto's per-call timing, n of them), after one
    untimed call: each segment here ends in a sync (its clock samples need its bounds), and a one-call slice would
    then hold the call's host time (bench/case/timing.py `prime`); the patch's slices run without syncs instead."""
    import torch

    flush.zero_()
    fn()
    pairs = []
    for _ in range(n):
        flush.zero_()
        pair = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        pair[0].record()
        fn()
        pair[1].record()
        pairs.append(pair)
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in pairs)


def normalized(by_name: dict[str, list[dict]]) -> dict[str, float]:
    """Each candidate's slices divided by their round's median slice: the median ratio, times the median of the
    rounds' medians (ms). Where the clock moves between rounds, the ratio within a round does not."""
    rounds: dict[int, dict[str, float]] = {}
    for name, rows in by_name.items():
        for row in rows:
            rounds.setdefault(row["round"], {})[name] = row["ms"]
    medians = {r: statistics.median(v.values()) for r, v in rounds.items()}
    scale = statistics.median(medians.values())
    return {
        name: scale * statistics.median(rounds[row["round"]][name] / medians[row["round"]] for row in rows)
        for name, rows in by_name.items()
    }


def summary(scheme_rows: list[dict]) -> dict:
    def med(key):
        vals = [r[key] for r in scheme_rows if r[key] is not None]
        return statistics.median(vals) if vals else None

    return {key: med(key) for key in ("ms", "mhz", "w", "kcycles")}


def main() -> int:
    from split_stages_gpu import WORKLOADS, batch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=list(WORKLOADS), default=["uniform/L=2048", "lognormal/L=4096"])
    args = ap.parse_args()
    import torch

    from bench.monitor.sampler import PowerMonitor

    device = torch.device("cuda", 0)
    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"gpu": torch.cuda.get_device_name(0), "rounds": args.rounds, "batches": {}}
    mon = PowerMonitor(device_index=0, period_ms=10.0)
    mon.start()
    try:
        for name in args.only:
            family, params, max_len = WORKLOADS[name]
            q, k, v, offsets, longest = batch(family, params, max_len, device)
            fns = candidates(q, k, v, offsets, longest)
            for _, fn in fns:
                fn()  # compiles, autotunes
            torch.cuda.synchronize()
            raw = time_batch(mon, fns, args.rounds)
            table = {s: {n: summary(rows) for n, rows in by.items()} for s, by in raw.items()}
            for n, ms in normalized(raw["slices"]).items():
                table["slices"][n]["norm_ms"] = ms
            result["batches"][name] = {"order": [n for n, _ in fns], "summary": table, "segments": raw}
            print(
                f"\n{name} forward: ms (MHz), the median over {args.rounds} rounds, {SLICE_ROUNDS} slice rounds; alone:"
            )
            print("1 s settle + 300 ms; norm: each slice over its round's median, times the rounds' median (ms)")
            print(f"  {'candidate':<48}" + "".join(f"{s:>16}" for s in SCHEMES) + f"{'norm':>9}")
            for n, _ in fns:
                cells = [f"{table[s][n]['ms']:.3f} ({table[s][n]['mhz'] or 0:.0f})" for s in SCHEMES]
                print(f"  {n:<48}" + "".join(f"{x:>16}" for x in cells) + f"{table['slices'][n]['norm_ms']:>9.3f}")
            (out_dir / "auto_rounds.json").write_text(json.dumps(result, indent=1))
    finally:
        mon.stop()
        mon.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
