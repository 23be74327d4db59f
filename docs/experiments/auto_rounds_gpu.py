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
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "experiments"))

SCHEMES = ("rounds", "reversed", "no-flush", "alone")
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
            result["batches"][name] = {"order": [n for n, _ in fns], "summary": table, "segments": raw}
            print(f"\n{name} forward (median of {args.rounds} rounds; alone: 1 s settle + 300 ms)")
            print(f"  {'candidate':<50}" + "".join(f"{s:>26}" for s in SCHEMES))
            print(f"  {'':<50}" + "".join(f"{'ms   MHz   kcyc':>26}" for _ in SCHEMES))
            for n, _ in fns:
                cells = []
                for s in SCHEMES:
                    c = table[s][n]
                    cell = f"{c['ms']:>9.3f} {c['mhz'] or 0:>6.0f} {c['kcycles'] or 0:>9.0f}" if c["ms"] else "n/a"
                    cells.append(cell)
                print(f"  {n:<50}" + "".join(f"{x:>26}" for x in cells))
            (out_dir / "auto_rounds.json").write_text(json.dumps(result, indent=1))
    finally:
        mon.stop()
        mon.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
