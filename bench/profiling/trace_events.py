"""Which profiled call each device activity belongs to, read from the Kineto trace (Chrome trace JSON, what
`torch.profiler.profile.export_chrome_trace` writes; the format Perfetto and chrome://tracing load).

The breakdown (bench.profiling.breakdown) runs each counted call inside a `gdpa_bench::call` range, each L2 flush
inside a `gdpa_bench::l2_flush` range, the warm-up inside `gdpa_bench::warm` and the pass's event-timed calls each
inside a `gdpa_bench::pass_call` range with their flushes in `gdpa_bench::timed` ranges (no synchronize between
them: they are timed as the samples are); every other range is followed by a synchronize before the next one opens.
A device activity (a kernel, memset or memcpy) is placed by the first of two rules that applies:

- `launch`: it links by its CUPTI `correlation` id to the runtime or driver API call that enqueued it
  (`cudaLaunchKernel`, `cuLaunchKernel(Ex)`, `cudaMemsetAsync`, ...), on whatever thread, and belongs to
  the range whose host window holds that call's timestamp. This finds a kernel whatever launched it: a torch
  op, autograd's device thread (a backward), Triton's launcher (a driver-API call with no torch op around
  it: our op's forward since e444f34 skips autograd.Function), a CuTe DSL launch through tvm-ffi. Reading
  `FunctionEvent.kernels` instead (what the breakdown did before) sees only kernels a torch op claims.
- `device time`: an activity whose launch the trace lacks (a launch API the profiler does not record) falls
  back to its own GPU start: range i owns the device time [start_i, start_{i+1}), since the synchronize
  after it drains the GPU before range i+1 opens.

An activity neither rule places (its launch outside every range, or device time before the first range:
a stray thread's kernel, the profiler's own) is unattributed: counted, never folded into a call.

Only the trace format's documented keys are read (`traceEvents`; per event `ph`, `cat`, `name`, `ts`,
`dur`, `args.correlation`), and the category names of both the torch 2.11 and 2.13 Kineto (`kernel`,
`gpu_memset`, `gpu_memcpy`, `cuda_runtime`, `cuda_driver`, `user_annotation`), with the older capitalised
ones accepted too.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

CALL_RANGE = "gdpa_bench::call"
FLUSH_RANGE = "gdpa_bench::l2_flush"
WARM_RANGE = "gdpa_bench::warm"
TIMED_RANGE = "gdpa_bench::timed"  # the flushes of the pass's event-timed calls (bench.profiling.breakdown)
PASS_CALL_RANGE = "gdpa_bench::pass_call"  # one event-timed call of the pass: its kernels are `pass_us`
RANGES = (CALL_RANGE, FLUSH_RANGE, WARM_RANGE, TIMED_RANGE, PASS_CALL_RANGE)
DEVICE_CATS = frozenset({"kernel", "gpu_memset", "gpu_memcpy", "memset", "memcpy", "concurrent_kernel"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
BY_LAUNCH, BY_DEVICE_TIME = "launch", "device time"


def _number(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if x == x else None


def _correlation(e: dict) -> int | None:
    args = e.get("args")
    if not isinstance(args, dict):
        return None
    for key in ("correlation", "correlation_id"):  # the second: older Kineto builds
        if isinstance(args.get(key), (int, float)) and not isinstance(args.get(key), bool):
            return int(args[key])
    return None


def complete_events(trace: dict) -> list[dict]:
    """The trace's complete events (`ph: X`) with a numeric start and duration."""
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    out = []
    for e in events if isinstance(events, list) else []:
        if isinstance(e, dict) and e.get("ph") == "X" and _number(e.get("ts")) is not None:
            out.append(e)
    return out


def _cat(e: dict) -> str:
    return str(e.get("cat", "")).lower()


def host_ranges(events: list[dict]) -> list[tuple[float, float, str]]:
    """(start µs, end µs, name) of every flush, warm and call range on the host, in time order. On a GPU
    the profiler also projects each range onto the device (`gpu_user_annotation`): not a window."""
    out = []
    for e in events:
        cat = _cat(e)
        if e.get("name") in RANGES and cat not in DEVICE_CATS and "gpu" not in cat:
            start = float(e["ts"])
            out.append((start, start + (_number(e.get("dur")) or 0.0), e["name"]))
    return sorted(out)


def _window(t: float, spans: list[tuple[float, float, str]]) -> str | None:
    """The range whose host window holds `t` (the ranges never overlap), or None."""
    i = bisect.bisect_right(spans, (t, float("inf"), "")) - 1
    return spans[i][2] if i >= 0 and spans[i][0] <= t <= spans[i][1] else None


def _device_window(t: float, spans: list[tuple[float, float, str]]) -> str | None:
    """The range that owns device time `t`: the last one opened at or before it."""
    i = bisect.bisect_right(spans, (t, float("inf"), "")) - 1
    return spans[i][2] if i >= 0 else None


@dataclass
class Attribution:
    """Per kernel name of the call ranges: [µs, launches]; the rules that placed it; the flushes' and the
    warm-up's activities; what no rule placed."""

    calls: dict[str, list[float]] = field(default_factory=dict)
    rules: dict[str, set[str]] = field(default_factory=dict)
    by_rule: dict[str, int] = field(default_factory=lambda: {BY_LAUNCH: 0, BY_DEVICE_TIME: 0})
    flushed: int = 0  # activities of the flush ranges
    other_us: float = 0.0  # device time of the flush and warm ranges
    unattributed: int = 0
    unattributed_us: float = 0.0
    pass_us: float = 0.0  # device time of the pass's event-timed calls (the `pass_call` ranges)
    ranges: list[tuple[float, float, str]] = field(default_factory=list)

    @property
    def pass_ranges(self) -> int:
        return sum(1 for *_, name in self.ranges if name == PASS_CALL_RANGE)

    def rule_of(self, name: str) -> str:
        return "; ".join(r for r in (BY_LAUNCH, BY_DEVICE_TIME) if r in self.rules.get(name, ()))


def attribute(trace: dict) -> Attribution:
    """Place every device activity of `trace` (see the module doc)."""
    events = complete_events(trace)
    spans = host_ranges(events)
    launches: dict[int, float] = {}
    for e in events:
        if _cat(e) in LAUNCH_CATS and (c := _correlation(e)) is not None:
            launches.setdefault(c, float(e["ts"]))
    out = Attribution(ranges=spans)
    for e in events:
        if _cat(e) not in DEVICE_CATS:
            continue
        dur = _number(e.get("dur")) or 0.0
        corr = _correlation(e)
        if corr is not None and corr in launches:
            where, rule = _window(launches[corr], spans), BY_LAUNCH
        else:
            where, rule = _device_window(float(e["ts"]), spans), BY_DEVICE_TIME
        if where is None:
            out.unattributed += 1
            out.unattributed_us += dur
            continue
        if where == PASS_CALL_RANGE:
            out.pass_us += dur
            continue
        if where != CALL_RANGE:
            out.flushed += where == FLUSH_RANGE
            out.other_us += dur
            continue
        name = str(e.get("name", "?"))
        t = out.calls.setdefault(name, [0.0, 0])
        t[0] += dur
        t[1] += 1
        out.rules.setdefault(name, set()).add(rule)
        out.by_rule[rule] += 1
    return out
