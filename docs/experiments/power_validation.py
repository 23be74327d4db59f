"""Which per-window power estimator is right? A long fixed-work loop, measured three ways (issue 19).

    python docs/experiments/power_validation.py [--seconds 20] [--window 1.0] [--sizes 8192,2048]
                                                [--device 0] [--cap-w 700] [--csv out.csv]

For each GEMM size (bf16, square; 8192 ~ 1.5 ms per call, 2048 ~ 25 us: a launch-bound loop like the
short cases of docs/example-h200), after a warm-up that reaches the power cap's steady state, two loops of
`--seconds` each, both made of back-to-back `--window` windows of the same fixed work:

A. the monitor's own method: `PowerMonitor.measure()` windows back to back. Each returns the sampled
   average (`avg_w`), the headline counter estimate (`avg_w_from_energy`, "counter_ticks": the energy
   counter as read by the sampler thread) and the plain start/end delta (`avg_w_from_energy_delta`).
B. the proposed fix: the loop's own thread reads the energy counter between batches (the GPU kept fed
   two batches ahead, so it never idles) and each window's power is the energy between the first and
   last counter change it saw, over the time between those reads; the same formula the monitor uses
   (`energy_from_ticks`), fed by an observer whose reads are never starved of the GIL. Reported beside
   it, on the same windows: the sampler thread's ticks (the current observer) and the sampled average.

The reference for each loop: the total energy-counter delta over the whole loop divided by its wall time
(counter read after a sync at both ends; its step error is at most two counter steps over the loop, so
~1% at 20 s, printed as `ref ±`). The GPU does the same work throughout, so every window's true average
power is the loop's average up to the power-cap controller's own fluctuation, which the spread of the
estimators (sd) bounds from above.

C. the settling of the power cap: after `--idle` seconds idle (as a case's energy loop starts after the
   correctness check), the loop in 0.5 s windows for `--settle-seconds`: power by the loop thread's
   ticks and by the samples, the share of samples with the sw_power_cap reason, the SM clock. In the
   committed example run, loops that start from idle and get capped hold ~724 W for their whole first
   second; this shows how long the controller takes to come down to the cap (the pre-roll the energy
   loop needs, docs/experiments/power-estimators.md).

Printed per size and loop: each estimator's mean error against the reference, its spread over windows,
its worst window, the windows it puts above cap + 3%, and how late each observer saw the counter's
changes at the window ends (the "bracket": time since that observer's previous read, an upper bound on
its lag; ticks are only as good as these brackets). `--csv` writes every window.

Read-only use of bench.monitor: PowerMonitor (start/stop, measure, energy_mj, window, len, read_energy)
and energy_from_ticks / summarize_samples. Runs on a CUDA GPU with NVML (nvidia-ml-py).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.monitor import PowerMonitor, energy_from_ticks, summarize_samples  # noqa: E402


def ticks_with_brackets(times: list[float], values: list) -> dict | None:
    """`energy_from_ticks` plus how well its two end ticks are pinned: for the first and last counter
    change seen, the time since the previous read (the change happened inside that bracket)."""
    pairs = [(t, v) for t, v in zip(times, values, strict=True) if v is not None and t == t]
    est = energy_from_ticks([t for t, _ in pairs], [v for _, v in pairs])
    if est is None:
        return None
    changes = [i for i in range(1, len(pairs)) if pairs[i][1] != pairs[i - 1][1]]
    first, last = changes[0], changes[-1]
    return {
        "watts": est[0],
        "span_s": est[1],
        "bracket_start_ms": (pairs[first][0] - pairs[first - 1][0]) * 1e3,
        "bracket_end_ms": (pairs[last][0] - pairs[last - 1][0]) * 1e3,
        "changes": len(changes),
        "step_ms": statistics.median((pairs[b][0] - pairs[a][0]) * 1e3 for a, b in itertools.pairwise(changes))
        if len(changes) > 2
        else math.nan,
    }


class Reference:
    """Energy counter delta over a whole loop (reads after a sync, by the loop's thread)."""

    def __init__(self, mon: PowerMonitor, sync):
        self.mon, self.sync = mon, sync

    def __enter__(self):
        self.sync()
        self.e0, self.t0 = self.mon.energy_mj(), time.monotonic()
        return self

    def __exit__(self, *exc):
        self.sync()
        self.e1, self.t1 = self.mon.energy_mj(), time.monotonic()

    @property
    def watts(self) -> float:
        return (self.e1 - self.e0) / 1e3 / (self.t1 - self.t0)

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


def loop_a(fn, sync, mon: PowerMonitor, seconds: float, window: float) -> tuple[list[dict], Reference]:
    """Back-to-back `measure()` windows: the monitor's method exactly as the runner calls it."""
    rows = []
    with Reference(mon, sync) as ref:
        while time.monotonic() - ref.t0 < seconds:
            i0 = len(mon)
            p = mon.measure(fn, sync=sync, min_seconds=window)
            w = mon.window(i0)
            seen = ticks_with_brackets(w["energy_times_s"], w["energy_mj"]) or {}
            rows.append(
                {
                    "loop": "A",
                    "samples_w": p["avg_w"],
                    "ticks_sampler_w": p["avg_w_from_energy"],
                    "energy_source": p["energy_source"],
                    "delta_w": p["avg_w_from_energy_delta"],
                    "sampler_bracket_start_ms": seen.get("bracket_start_ms"),
                    "sampler_bracket_end_ms": seen.get("bracket_end_ms"),
                    "step_ms": seen.get("step_ms"),
                    "seconds": p["seconds"],
                    "calls": p["calls"],
                }
            )
    return rows, ref


def cuda_fence():
    import torch

    ev = torch.cuda.Event()
    ev.record()
    return ev


def loop_b(
    fn, sync, mon: PowerMonitor, seconds: float, window: float, batch: int, fence=cuda_fence
) -> tuple[list[dict], Reference]:
    """One continuous loop; the loop's thread reads the counter after launching each batch. `fence()`
    marks the end of a batch on the device (an object with `synchronize()`)."""
    polls: list[tuple[float, int | None, int]] = []  # (time after the read, counter mJ, sampler length)
    pending: list = []
    mon.read_energy = True  # the sampler thread reads the counter too: the current observer, same windows
    try:
        with Reference(mon, sync) as ref:
            while time.monotonic() - ref.t0 < seconds:
                for _ in range(batch):
                    fn()
                pending.append(fence())
                if len(pending) > 2:  # keep two batches queued: the GPU never waits for these reads
                    pending.pop(0).synchronize()
                e = mon.energy_mj()
                polls.append((time.monotonic(), e, len(mon)))
    finally:
        mon.read_energy = False
    whole = ticks_with_brackets([p[0] for p in polls], [p[1] for p in polls])
    ref.ticks_w = whole["watts"] if whole else math.nan  # the whole loop by the loop thread's ticks
    rows = []
    start = polls[0][0]
    while start + window <= polls[-1][0]:
        inside = [p for p in polls if start <= p[0] < start + window]
        own = ticks_with_brackets([p[0] for p in inside], [p[1] for p in inside]) or {}
        w = mon.window(inside[0][2], inside[-1][2])
        seen = ticks_with_brackets(w["energy_times_s"], w["energy_mj"]) or {}
        summary = summarize_samples(w["power_w"], w["sm_clock_mhz"], None, w["reason_masks"], cap_w=mon.cap_w())
        rows.append(
            {
                "loop": "B",
                "t_s": start - polls[0][0],
                "samples_w": summary["avg_w"],
                "frac_sw_power_cap": summary["frac_sw_power_cap"],
                "sm_clock_mhz": summary["sm_clock_mhz_median"],
                "ticks_sampler_w": seen.get("watts"),
                "ticks_loop_w": own.get("watts"),
                "sampler_bracket_start_ms": seen.get("bracket_start_ms"),
                "sampler_bracket_end_ms": seen.get("bracket_end_ms"),
                "loop_bracket_start_ms": own.get("bracket_start_ms"),
                "loop_bracket_end_ms": own.get("bracket_end_ms"),
                "step_ms": own.get("step_ms"),
                "seconds": window,
                "calls": None,
            }
        )
        start += window
    return rows, ref


def validate(fn, sync, mon: PowerMonitor, a, batch: int, cap: float | None, size=None, fence=cuda_fence) -> list[dict]:
    """Loops A, B and C for one workload (see the module docstring): prints their tables, returns the windows."""
    rows_a, ref_a = loop_a(fn, sync, mon, a.seconds, a.window)
    rows_b, ref_b = loop_b(fn, sync, mon, a.seconds, a.window, batch, fence)
    steps = [r["step_ms"] for r in rows_a + rows_b if r.get("step_ms") == r.get("step_ms") and r.get("step_ms")]
    step_ms = statistics.median(steps) if steps else math.nan
    print(f" A: PowerMonitor.measure() windows (the runner's energy loop); counter step seen ~{step_ms:.0f} ms")
    print("\n".join(summarise(rows_a, ref_a, cap, step_ms)))
    print(" B: one loop, the counter also read by the loop's thread")
    print("\n".join(summarise(rows_b, ref_b, cap, step_ms)))
    # C: from idle into the loop, in short windows: how long until the cap controller settles
    sync()
    time.sleep(a.idle)
    rows_c, _ = loop_b(fn, sync, mon, a.settle_seconds, 0.5, batch, fence)
    print(
        f" C: after {a.idle:g} s idle, the loop in 0.5 s windows (loop-thread ticks W / sampled W / "
        f"share of samples with sw_power_cap / SM MHz):"
    )
    for r in rows_c:
        r["loop"] = "C"
        cap_share = r["frac_sw_power_cap"]
        print(
            f"  {r['t_s']:5.2f} s  {r['ticks_loop_w'] or math.nan:6.1f}  {r['samples_w'] or math.nan:6.1f}  "
            f"{cap_share if cap_share is not None else math.nan:4.2f}  {r['sm_clock_mhz'] or math.nan:5.0f}"
        )
    for r, ref in [(r, ref_a) for r in rows_a] + [(r, ref_b) for r in rows_b] + [(r, None) for r in rows_c]:
        r.update(size=size, reference_w=ref.watts if ref else None)
    return rows_a + rows_b + rows_c


def gemm(n: int, device):
    import torch

    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b, out=out)


def calls_per(fn, sync, seconds: float) -> int:
    """How many calls take about `seconds` (for loop B's batch size)."""
    sync()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.2:
        fn()
        n += 1
        if n % 16 == 0:
            sync()
    sync()
    return max(1, int(n * seconds / (time.perf_counter() - t0)))


def summarise(rows: list[dict], ref: Reference, cap_w: float | None, step_ms: float) -> list[str]:
    out = []
    ref_err = 2 * step_ms / 1e3 / ref.seconds if step_ms == step_ms else math.nan
    out.append(
        f"  reference {ref.watts:.1f} W over {ref.seconds:.1f} s (counter delta; ± {ref_err:.1%} from its "
        f"{step_ms:.0f} ms steps), {len(rows)} windows"
    )
    if getattr(ref, "ticks_w", None) is not None:
        out.append(
            f"  (the same loop by the loop thread's first-to-last counter change: {ref.ticks_w:.1f} W, "
            f"{ref.ticks_w / ref.watts - 1:+.2%} from the reference)"
        )
    for key, label in (
        ("samples_w", "sampled average (instant field)"),
        ("ticks_sampler_w", "counter ticks, sampler thread (current)"),
        ("delta_w", "counter start/end delta"),
        ("ticks_loop_w", "counter ticks, loop thread (proposed)"),
    ):
        vals = [r[key] for r in rows if r.get(key) is not None]
        if not vals:
            continue
        err = [v / ref.watts - 1 for v in vals]
        over = sum(v > cap_w * 1.03 for v in vals) if cap_w else 0
        out.append(
            f"  {label:42s} mean {statistics.fmean(vals):6.1f} W  error {statistics.fmean(err):+6.2%}  "
            f"sd {statistics.pstdev(err):5.2%}  worst {max(err, key=abs):+6.2%}  > cap+3%: {over}"
        )
    for who in ("sampler", "loop"):
        s = [r[f"{who}_bracket_start_ms"] for r in rows if r.get(f"{who}_bracket_start_ms") is not None]
        e = [r[f"{who}_bracket_end_ms"] for r in rows if r.get(f"{who}_bracket_end_ms") is not None]
        if s and e:
            out.append(
                f"  {who:7s} thread brackets at the first / last tick: median {statistics.median(s):5.1f} / "
                f"{statistics.median(e):5.1f} ms, max {max(s):5.1f} / {max(e):5.1f} ms"
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="length of each loop (default 20)")
    ap.add_argument("--window", type=float, default=1.0, help="window of each estimate (default 1.0 s)")
    ap.add_argument("--sizes", default="8192,2048", help="square bf16 GEMM sizes (default 8192,2048)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--cap-w", type=float, default=None, help="the power cap (default: the enforced limit)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of the loop before measuring (default 5)")
    ap.add_argument("--idle", type=float, default=3.0, help="idle seconds before loop C (default 3)")
    ap.add_argument("--settle-seconds", type=float, default=8.0, help="length of loop C (default 8)")
    ap.add_argument("--csv", help="write every window here")
    a = ap.parse_args()

    import torch

    device = torch.device("cuda", a.device)
    torch.cuda.set_device(device)

    def sync():
        torch.cuda.synchronize(device)

    mon = PowerMonitor(device_index=a.device, period_ms=10.0, power_cap_w=a.cap_w)
    if not mon.available:
        print(f"NVML not available: {mon.unavailable_reason}", file=sys.stderr)
        return 2
    cap = a.cap_w or mon.enforced_power_limit_w
    print(
        f"{mon.gpu_name} (GPU {a.device}), power source {mon.power_source}, cap {cap} W, "
        f"loops of {a.seconds:g} s in {a.window:g} s windows"
    )
    mon.start()
    all_rows = []
    try:
        for n in (int(s) for s in a.sizes.split(",")):
            fn = gemm(n, device)
            batch = calls_per(fn, sync, 0.005)  # ~5 ms of GPU work between two counter reads
            sync()
            t_end = time.monotonic() + a.warmup
            while time.monotonic() < t_end:
                for _ in range(batch):
                    fn()
                sync()
            per_call_us = 5e3 / batch
            print(
                f"\n== bf16 GEMM {n}x{n}x{n}: ~{per_call_us:.0f} us per call, loop B reads the counter every "
                f"{batch} calls"
            )
            all_rows += validate(fn, sync, mon, a, batch, cap, size=n)
    finally:
        mon.stop()
    if a.csv:
        keys = sorted({k for r in all_rows for k in r})
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(all_rows)
        print(f"\nwindows: {a.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
