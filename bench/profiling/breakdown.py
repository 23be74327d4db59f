"""Kernel breakdown of one case: the kernels a timed call launches, each with its calls and time per call.

A short pass after the timed samples (and the energy loop), so the samples are never taken under a
profiler: the case's callable runs `calls` times under `torch.profiler` (CUPTI on a GPU), each call inside
a `gdpa_bench::call` range and, as the timer does, preceded by the L2 flush inside a `gdpa_bench::l2_flush`
range (synchronized inside it, so no range's window overlaps the next); uncounted calls in a
`gdpa_bench::warm` range come first, back to back for `warm_ms` (the profiler's first-call costs, and the
clocks a power-capped GPU regains while the profiler starts). A kernel belongs to the range in
whose time window the op that launched it started, on whatever thread: a backward launches from
autograd's device thread while the calling thread waits inside its range. Memsets and copies count as
kernels: a backward's accumulator memset is part of what a call costs.

On a CPU run (the Triton interpreter) the "kernels" are the CPU profiler's ops inside the call ranges,
each by its self time, plus the time of the call range itself outside any op (`(outside torch ops)`): the
pipeline is exercised end to end, the figures say nothing about a GPU.

The record (`kernels`, docs/DESIGN.md §6; each key and each column of `rows` a row of results.metrics):
{source: cuda | cpu, profiled_calls, sum_ms (kernel time per call), n_kernels (launches per call), rows:
[{name, calls (per call), ms (per call), share}], unattributed_ms (GPU: device time per call that no
launching op claimed; ~0), error}.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

CALL_RANGE = "gdpa_bench::call"
FLUSH_RANGE = "gdpa_bench::l2_flush"
WARM_RANGE = "gdpa_bench::warm"  # one call before the counted ones: the profiler's own first-call costs
OUTSIDE_OPS = "(outside torch ops)"
MAX_WARM_CALLS = 500  # bounds the events a warm-up of very short calls records
MAX_ROWS = 24  # a call launching more distinct kernels keeps its longest ones and one `(other)` row
_KINETO_NOISE = re.compile(r"profiler_(start|stop)\s*$")


@contextlib.contextmanager
def _quiet_profiler_log():
    """Kineto prints a `profiler_start` / `profiler_stop` line to stderr per session (not switchable off
    in torch 2.13): per case that would interleave the sweep's progress. Anything else written to stderr
    meanwhile is passed on."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a captured or replaced stderr: nothing to tidy
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().decode(errors="replace").splitlines() if not _KINETO_NOISE.search(ln)]
            if kept:
                print("\n".join(kept), file=sys.stderr)


RANGES = (CALL_RANGE, FLUSH_RANGE, WARM_RANGE)


def windows(events: Iterable[Any]) -> list[tuple[float, float, str]]:
    """(start µs, end µs, range name) of every flush, warm and call range, in time order."""
    cpu = torch.autograd.DeviceType.CPU
    out = [(e.time_range.start, e.time_range.end, e.name) for e in events if e.name in RANGES and e.device_type == cpu]
    return sorted(out)


def window_of(t: float, spans: list[tuple[float, float, str]]) -> str | None:
    """The range whose window holds time `t` (the ranges never overlap), or None."""
    i = bisect.bisect_right(spans, (t, float("inf"), "")) - 1
    if i >= 0 and spans[i][0] <= t <= spans[i][1]:
        return spans[i][2]
    return None


def device_totals(events: Iterable[Any]) -> tuple[dict[str, list[float]], int, float]:
    """({kernel name: [µs, count]} of the calls' kernels, kernels of the flushes, µs of the flush and warm
    kernels). A kernel belongs to the range in whose window the op that launched it started — whatever the
    thread: a backward launches from autograd's device thread while the calling thread waits in its range."""
    events = list(events)
    spans = windows(events)
    totals: dict[str, list[float]] = {}
    flushed, other_us = 0, 0.0
    for e in events:
        kernels = getattr(e, "kernels", None) or []
        if not kernels:
            continue
        where = window_of(e.time_range.start, spans)
        if where != CALL_RANGE:
            flushed += len(kernels) if where == FLUSH_RANGE else 0
            other_us += sum(float(k.duration) for k in kernels)
            continue
        for k in kernels:
            t = totals.setdefault(k.name, [0.0, 0])
            t[0] += float(k.duration)
            t[1] += 1
    return totals, flushed, other_us


def device_event_us(events: Iterable[Any]) -> float:
    """Every device activity the profiler recorded (kernels, memsets, copies; not the ranges' GPU-side
    projections), in µs: what the attribution above must account for."""
    cuda = torch.autograd.DeviceType.CUDA
    return sum(
        float(e.time_range.end - e.time_range.start)
        for e in events
        if e.device_type == cuda and not getattr(e, "is_user_annotation", False)
    )


def cpu_totals(events: Iterable[Any]) -> dict[str, list[float]]:
    """{op name: [self µs, count]} over every op that started inside a call range (any thread), and the
    call ranges' own self time."""
    events = list(events)
    spans = windows(events)
    totals: dict[str, list[float]] = {}
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue
        if e.name in RANGES:
            if e.name == CALL_RANGE:
                t = totals.setdefault(OUTSIDE_OPS, [0.0, 0])
                t[0] += float(e.self_cpu_time_total)
                t[1] += 1
            continue
        if window_of(e.time_range.start, spans) == CALL_RANGE:
            t = totals.setdefault(e.name, [0.0, 0])
            t[0] += float(e.self_cpu_time_total)
            t[1] += 1
    return totals


def summarize(totals: dict[str, list[float]], calls: int, source: str) -> dict:
    """The `kernels` record from per-name totals over `calls` calls: rows by time, longest first."""
    items = sorted(totals.items(), key=lambda kv: -kv[1][0])
    if len(items) > MAX_ROWS:
        rest = items[MAX_ROWS - 1 :]
        items = [*items[: MAX_ROWS - 1], ("(other)", [sum(v[0] for _, v in rest), sum(v[1] for _, v in rest)])]
    total_us = sum(v[0] for _, v in items)
    rows = [
        {
            "name": name,
            "calls": count / calls,
            "ms": us / calls / 1e3,
            "share": us / total_us if total_us > 0 else None,
        }
        for name, (us, count) in items
    ]
    return {
        "source": source,
        "profiled_calls": calls,
        "sum_ms": total_us / calls / 1e3,
        "n_kernels": sum(v[1] for _, v in items) / calls,
        "rows": rows,
        "error": None,
    }


def kernel_breakdown(
    fn: Callable[[], object],
    device: torch.device,
    calls: int = 3,
    flush: torch.Tensor | None = None,
    warm_ms: float = 0.0,
) -> dict:
    """Profile `calls` calls of `fn` (already warmed) and return the `kernels` record. `flush`: the
    timer's L2-flush buffer, zeroed before each call as the timed samples do (None: no flush). `warm_ms`:
    calls run back to back inside the profiler, uncounted, for at least this long first (at most
    MAX_WARM_CALLS): a GPU at its power cap recovers its clocks while the profiler starts, and three calls
    right after that ran a bf16 GEMM 15% faster than its timed median on the H200."""
    gpu = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if gpu else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    sync()
    with _quiet_profiler_log(), profile(activities=activities) as prof:
        with record_function(WARM_RANGE):
            start = time.perf_counter()
            for _ in range(MAX_WARM_CALLS):
                if flush is not None:
                    flush.zero_()
                fn()
                sync()
                if (time.perf_counter() - start) * 1e3 >= warm_ms:
                    break
        for _ in range(calls):
            if flush is not None:
                with record_function(FLUSH_RANGE):
                    flush.zero_()
                    sync()
            with record_function(CALL_RANGE):
                fn()
            sync()
    events = list(prof.events())
    # the host-side ranges only: on a GPU each range also appears as a device-side user annotation
    ranges = sum(1 for *_, name in windows(events) if name == CALL_RANGE)
    if ranges != calls:
        return _error(f"the profiler recorded {ranges} of {calls} call ranges", calls, "cuda" if gpu else "cpu")
    if not gpu:
        return summarize(cpu_totals(events), calls, "cpu")
    totals, flushed, other_us = device_totals(events)
    if flush is not None and flushed == 0:
        return _error("no kernel was attributed to the L2 flush: the calls' kernels cannot be told apart", calls)
    if not totals:
        return _error("the profiler recorded no kernel for the calls (CUPTI unavailable?)", calls)
    out = summarize(totals, calls, "cuda")
    # device time no launching op claimed (neither a call's nor the flush's): shown, never folded in
    out["unattributed_ms"] = max(0.0, device_event_us(events) - out["sum_ms"] * 1e3 * calls - other_us) / calls / 1e3
    return out


def _error(message: str, calls: int, source: str = "cuda") -> dict:
    return {"source": source, "profiled_calls": calls, "sum_ms": None, "n_kernels": None, "rows": [], "error": message}


def failed(message: str, calls: int, device: torch.device) -> dict:
    """The record of a breakdown that raised: the case stays ok, its breakdown says why it is missing."""
    return _error(message, calls, "cuda" if device.type == "cuda" else "cpu")
