"""Kernel breakdown of one case: the kernels a timed call launches, each with its calls and time per call.

A profiler pass that runs only after every timed measurement of its process (the sweep's second phase,
bench.profiling.later: a torch.profiler session leaves host time on every later call of the process, so nothing is
timed after one): the case's callable runs `calls` times under `torch.profiler` (CUPTI on a GPU), each call inside a
`gdpa_bench::call` range and, as the timer does, preceded by the L2 flush inside a `gdpa_bench::l2_flush` range
(synchronized inside it, so no range's window overlaps the next); uncounted calls in a `gdpa_bench::warm` range come
first, back to back for `warm_ms` (the profiler's first-call costs, and the clocks a power-capped GPU regains while
the profiler starts), then calls timed exactly as the samples are (the flush, one event pair per call, no sync
between calls, chunks as bench.case.timing's) for `window` (`pass_median_ms`, `pass_calls`), each inside a
`gdpa_bench::pass_call` range (its flush in a `gdpa_bench::timed` one): on a GPU the kernels of those very calls,
per call, are `pass_sum_ms`, which their event time is judged against (bench.profiling.views: `sum_over_pass`,
`idle_share`, `host_bound`, `accounting`). Judging the counted calls' sum instead set two windows against each
other: the H200 gave 1.098 for our long forward and 1.056 for FA4's (2026-12-02). On a GPU the pass's Kineto trace
(Chrome trace JSON) says which call each kernel belongs to (bench.profiling.trace_events): by the launch API call
its CUPTI correlation id links it to, on whatever thread and whatever launched it (a torch op, autograd's device
thread, Triton's driver-API launcher, a CuTe DSL launch), else by its own device time. Memsets and copies count as
kernels: a backward's accumulator memset is part of what a call costs. With `trace_path` the trace is kept there
(openable in Perfetto's JSON loader or chrome://tracing).

On a CPU run (the Triton interpreter) the "kernels" are the CPU profiler's ops inside the call ranges,
each by its self time, plus the time of the call range itself outside any op (`(outside torch ops)`): the
pipeline is exercised end to end, the figures say nothing about a GPU.

The record (`kernels`, docs/DESIGN.md §6; each key and each column of `rows` a row of results.metrics): {source:
cuda | cpu, profiled_calls, sum_ms (kernel time per call), n_kernels (launches per call), rows: [{name, calls (per
call), ms (per call), share, rule (GPU: what placed it)}], unattributed_ms (GPU: device time per call no rule
placed; ~0), pass_median_ms, pass_calls, pass_sum_ms (GPU: the kernel time per call of the pass's event-timed
calls), trace (the kept trace's path), error}."""

from __future__ import annotations

import bisect
import contextlib
import gzip
import hashlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from bench.case.timing import chunk_size
from bench.profiling.trace_events import (
    CALL_RANGE,
    FLUSH_RANGE,
    PASS_CALL_RANGE,
    RANGES,
    TIMED_RANGE,
    WARM_RANGE,
    Attribution,
    attribute,
)

OUTSIDE_OPS = "(outside torch ops)"
MAX_WARM_CALLS = 500  # bounds the events a warm-up of very short calls records
#: the pass's event-timed calls: (ms, min calls, max calls), as a timing window (bench.case.timing.chunk_size)
PASS_WINDOW = (50.0, 10, 200)
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


def trace_name(case_id: str) -> str:
    """A case's trace file name: its id with each character but letters, digits and `.=-` as `_`, then 8
    hex digits of the id's hash, so two ids that read alike (`a/b`, `a_b`) stay two files."""
    digest = hashlib.sha1(case_id.encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9.=-]+', '_', case_id).strip('._')[:150]}-{digest}.json"


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


def summarize(totals: dict[str, list[float]], calls: int, source: str, rule_of: Callable | None = None) -> dict:
    """The `kernels` record from per-name totals over `calls` calls: rows by time, longest first.
    `rule_of(name)`: what placed the kernel (GPU: bench.profiling.trace_events), kept as the row's `rule`."""
    items = sorted(totals.items(), key=lambda kv: -kv[1][0])
    rules = {name: rule_of(name) for name, _ in items} if rule_of is not None else {}
    if len(items) > MAX_ROWS:
        rest = items[MAX_ROWS - 1 :]
        rules["(other)"] = "; ".join(sorted({r for name, _ in rest for r in rules.get(name, "").split("; ") if r}))
        items = [*items[: MAX_ROWS - 1], ("(other)", [sum(v[0] for _, v in rest), sum(v[1] for _, v in rest)])]
    total_us = sum(v[0] for _, v in items)
    rows = [
        {
            "name": name,
            "calls": count / calls,
            "ms": us / calls / 1e3,
            "share": us / total_us if total_us > 0 else None,
            **({"rule": rules.get(name) or None} if rule_of is not None else {}),
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


def device_record(found: Attribution, calls: int, flushed_expected: bool) -> dict:
    """The GPU `kernels` record from the trace's attribution (bench.profiling.trace_events)."""
    ranges = sum(1 for *_, name in found.ranges if name == CALL_RANGE)
    if ranges != calls:
        return _error(f"the profiler recorded {ranges} of {calls} call ranges", calls)
    if flushed_expected and found.flushed == 0:
        return _error("no kernel was attributed to the L2 flush: the calls' kernels cannot be told apart", calls)
    if not found.calls:
        return _error("the profiler recorded no kernel for the calls (CUPTI unavailable?)", calls)
    out = summarize(found.calls, calls, "cuda", found.rule_of)
    # device time no rule placed in a call, a flush or the warm-up: shown, never folded in
    out["unattributed_ms"] = found.unattributed_us / calls / 1e3
    out["pass_sum_ms"] = found.pass_us / found.pass_ranges / 1e3 if found.pass_ranges else None
    return out


def timed_calls(fn, sync, flush, gpu: bool, window: tuple[float, int, int]) -> list[float]:
    """`fn` timed as the samples are (bench.case.timing): GPU, the flush then one event pair per call, no sync
    between the calls of a chunk, each call in a PASS_CALL_RANGE (its events inside, the range's own host
    cost outside them) and each flush in a TIMED_RANGE; CPU, wall clock per call. Chunks as `chunk_size`
    sizes them for `window` (ms, min calls, max calls). The times in ms."""
    ms, lo, hi = window
    times: list[float] = []
    while n := chunk_size(times, ms, lo, hi):
        if not gpu:
            for _ in range(n):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            continue
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            if flush is not None:
                with record_function(TIMED_RANGE):
                    flush.zero_()
            with record_function(PASS_CALL_RANGE):
                starts[i].record()
                fn()
                ends[i].record()
        sync()
        times += [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    return times


def _profiled(fn, sync, flush, calls: int, warm_ms: float, activities, window):
    gpu = ProfilerActivity.CUDA in activities
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
        times = timed_calls(fn, sync, flush, gpu, window)
        sync()
        for _ in range(calls):
            if flush is not None:
                with record_function(FLUSH_RANGE):
                    flush.zero_()
                    sync()
            with record_function(CALL_RANGE):
                fn()
            sync()
    return prof, times


def export_trace(prof, dest: Path | None) -> dict:
    """The pass's Kineto trace as a dict; kept at `dest` when given (gzipped when its name ends in .gz:
    Perfetto and chrome://tracing open both)."""
    with tempfile.TemporaryDirectory(prefix="gdpa-bench-trace-") as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        text = path.read_bytes()
        if dest is not None:
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.name.endswith(".gz"):
                with gzip.open(path.with_suffix(".json.gz"), "wb") as gz:
                    gz.write(text)
                path = path.with_suffix(".json.gz")
            shutil.move(str(path), dest)
    return json.loads(text)


def kernel_breakdown(
    fn: Callable[[], object],
    device: torch.device,
    calls: int = 3,
    flush: torch.Tensor | None = None,
    warm_ms: float = 0.0,
    trace_path: Path | None = None,
    window: tuple[float, int, int] = PASS_WINDOW,
) -> dict:
    """Profile `calls` calls of `fn` (already warmed) and return the `kernels` record. `flush`: the
    timer's L2-flush buffer, zeroed before each call as the timed samples do (None: no flush). `warm_ms`:
    calls run back to back inside the profiler, uncounted, for at least this long first (at most
    MAX_WARM_CALLS): a GPU at its power cap recovers its clocks while the profiler starts, and three calls
    right after that ran a bf16 GEMM 15% faster than its timed median on the H200. `window`: the pass's
    event-timed calls (ms, min calls, max calls; `pass_median_ms`). `trace_path`: keep the pass's trace
    there (recorded as `trace`, the path as given)."""
    gpu = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if gpu else (lambda: None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    sync()
    prof, times = _profiled(fn, sync, flush, calls, warm_ms, activities, window)
    trace = export_trace(prof, trace_path) if gpu or trace_path is not None else None
    kept = {"trace": str(trace_path)} if trace_path is not None else {}
    kept |= {"pass_median_ms": statistics.median(times) if times else None, "pass_calls": len(times)}
    if gpu:
        return {**device_record(attribute(trace), calls, flush is not None), **kept}
    events = list(prof.events())
    ranges = sum(1 for *_, name in windows(events) if name == CALL_RANGE)
    if ranges != calls:
        return {**_error(f"the profiler recorded {ranges} of {calls} call ranges", calls, "cpu"), **kept}
    return {**summarize(cpu_totals(events), calls, "cpu"), **kept}


def _error(message: str, calls: int, source: str = "cuda") -> dict:
    return {"source": source, "profiled_calls": calls, "sum_ms": None, "n_kernels": None, "rows": [], "error": message}


def failed(message: str, calls: int, device: torch.device) -> dict:
    """The record of a breakdown that raised: the case stays ok, its breakdown says why it is missing."""
    return _error(message, calls, "cuda" if device.type == "cuda" else "cpu")
