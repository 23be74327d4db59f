"""Honest timing: every sample kept, L2 flushed before each call, budgets in milliseconds (nvbench-style).

GPU: one pair of CUDA events around each call; before each call the L2 is flushed by writing a buffer
twice its size, so no call is timed on data the previous call left in cache. The warmup is a budget in
ms turned into a count from a three-call estimate. `rep_ms` is the sum of the timed samples: they are
taken in chunks that double, sized from the recent samples' mean, with a sync between chunks, until
they add up to `rep_ms`, within [min_reps, max_reps] (`chunk_size`). The samples are always event-timed
calls as a user makes them; `timing.cuda_graph` adds a device time from CUDA-graph replay beside them,
after them (bench.case.graph_timing). CPU (the smoke config under the Triton interpreter): wall clock per call,
the same budget; the numbers only prove the pipeline works.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class Samples:
    times_ms: list[float]
    median_ms: float
    p20_ms: float
    p80_ms: float
    chunk_ends: list[int] = field(default_factory=list)  # the number of samples at each chunk's sync
    chunk_clocks_mhz: list[float | None] = field(default_factory=list)  # the SM clock read there (CasePower)

    @classmethod
    def of(cls, times: list[float], chunk_ends: list[int] | None = None) -> Samples:
        a = np.asarray(times, dtype=float)
        quantiles = float(np.median(a)), float(np.percentile(a, 20)), float(np.percentile(a, 80))
        return cls([float(t) for t in a], *quantiles, list(chunk_ends or []))


_flush_buffers: dict[int, torch.Tensor] = {}


def l2_flush_buffer(device: torch.device) -> torch.Tensor:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _flush_buffers:
        l2 = getattr(torch.cuda.get_device_properties(idx), "L2_cache_size", 0) or 64 * 2**20
        _flush_buffers[idx] = torch.empty(2 * l2, dtype=torch.int8, device=device)
    return _flush_buffers[idx]


def warmup_count(estimate_ms: float, warmup_ms: float) -> int:
    return max(1, int(warmup_ms / max(estimate_ms, 1e-3)))


def chunk_size(times_ms: list[float], rep_ms: float, min_reps: int, max_reps: int) -> int:
    """How many more samples to take (0: done). Done at `max_reps`, or once the samples add up to
    `rep_ms` with at least `min_reps` of them. The first chunk is `min_reps` samples; after that a chunk
    is what the rest of the budget needs at the recent samples' mean (the later half: a clock that drops
    under a power cap shows there first), at most as many as were taken so far (chunks double, as
    `bench.monitor.run_for`'s batches do), so only the last chunk's error can overshoot the window."""
    n, total = len(times_ms), math.fsum(times_ms)
    if n >= max_reps or (n >= min_reps and total >= rep_ms):
        return 0
    if n == 0:
        want = min_reps
    else:
        recent = times_ms[n // 2 :]
        want = min(math.ceil((rep_ms - total) / max(math.fsum(recent) / len(recent), 1e-6)), n)
    return min(max(want, min_reps - n, 1), max_reps - n)


def time_cuda(
    fn: Callable[[], object],
    *,
    warmup_ms: float,
    rep_ms: float,
    min_reps: int = 5,
    max_reps: int = 2000,
    flush_l2: bool = True,
    device: torch.device | None = None,
    between: Callable[[], object] | None = None,
) -> Samples:
    """The samples of `fn` (each between a pair of events, the L2 flushed before it), taken in chunks that each
    end with a device sync; `between()` runs after each chunk's sync, outside every timed call (the harness
    reads the GPU's clock there: bench.case.power.CasePower.time_samples), and each chunk after the first
    starts with an untimed call (`prime`)."""
    device = device or torch.device("cuda", torch.cuda.current_device())
    flush = l2_flush_buffer(device) if flush_l2 else None
    call = fn
    # estimate with a few flushed calls
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    est = []
    for _ in range(3):
        if flush is not None:
            flush.zero_()
        start.record()
        call()
        end.record()
        torch.cuda.synchronize(device)
        est.append(start.elapsed_time(end))
    for _ in range(warmup_count(float(np.median(est)), warmup_ms)):
        call()
    times: list[float] = []
    chunk_ends: list[int] = []
    while n := chunk_size(times, rep_ms, min_reps, max_reps):
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        if times:
            prime(call, flush)
        for i in range(n):
            if flush is not None:
                flush.zero_()
            starts[i].record()
            call()
            ends[i].record()
        torch.cuda.synchronize(device)
        times += [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
        chunk_ends.append(len(times))
        if between is not None:
            between()
    return Samples.of(times, chunk_ends)


def prime(call: Callable[[], object], flush: torch.Tensor | None) -> None:
    """One untimed call after a chunk's sync, so the host is a call ahead of the GPU again when the next
    chunk's first sample starts, as it is for every other sample (the warm-up calls do it for the first
    chunk). Without it that sample's events hold the call's host time: the GPU, idle after the sync, runs each
    kernel as the host issues it. The H200 production run of 2026-12-03 (docs/example-h200-production,
    logs/README.md) read every chunk's first sample at 1.2-3x the case's median, for every provider; on a case
    of 12 samples, 3 of them, which decided its p80."""
    if flush is not None:
        flush.zero_()
    call()


def time_cpu(
    fn: Callable[[], object], *, warmup_ms: float, rep_ms: float, min_reps: int = 3, max_reps: int = 50, **_
) -> Samples:
    # the caller has already warmed fn once; then calls until `warmup_ms` has passed (at least one)
    start = time.perf_counter()
    fn()
    while (time.perf_counter() - start) * 1e3 < warmup_ms:
        fn()
    times: list[float] = []
    while chunk_size(times, rep_ms, min_reps, max_reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return Samples.of(times)


def time_call(
    fn: Callable[[], object], timing, device: torch.device, between: Callable[[], object] | None = None
) -> Samples:
    """Time `fn` on `device` as a config's `timing` section says (GPU: `time_cuda`, else `time_cpu`, which has
    no chunks to run `between` after)."""
    t = timing
    window = dict(warmup_ms=t.warmup_ms, rep_ms=t.rep_ms, min_reps=t.min_reps, max_reps=t.max_reps)
    if device.type == "cuda":
        with torch.cuda.device(device):
            return time_cuda(fn, **window, flush_l2=t.flush_l2, device=device, between=between)
    return time_cpu(fn, **window)


def sync_for(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None
