"""Honest timing: every sample kept, L2 flushed before each call, budgets in milliseconds (nvbench-style).

GPU: one pair of CUDA events around each call; before each call the L2 is flushed by writing a buffer
twice its size, so no call is timed on data the previous call left in cache. Warmup and repetition are
budgets in ms, turned into counts from a first estimate, clamped to [min_reps, max_reps]. Optional
CUDA-graph mode replays a captured call (for tiny cases dominated by launch overhead).
CPU (the smoke config under the Triton interpreter): wall clock per call; the numbers only prove the
pipeline works.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Samples:
    times_ms: list[float]
    median_ms: float
    p20_ms: float
    p80_ms: float

    @classmethod
    def of(cls, times: list[float]) -> Samples:
        a = np.asarray(times, dtype=float)
        return cls([float(t) for t in a], float(np.median(a)), float(np.percentile(a, 20)), float(np.percentile(a, 80)))


_flush_buffers: dict[int, torch.Tensor] = {}


def l2_flush_buffer(device: torch.device) -> torch.Tensor:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _flush_buffers:
        l2 = getattr(torch.cuda.get_device_properties(idx), "L2_cache_size", 0) or 64 * 2**20
        _flush_buffers[idx] = torch.empty(2 * l2, dtype=torch.int8, device=device)
    return _flush_buffers[idx]


def _counts(estimate_ms: float, warmup_ms: float, rep_ms: float, min_reps: int, max_reps: int):
    est = max(estimate_ms, 1e-3)
    return max(1, int(warmup_ms / est)), int(min(max_reps, max(min_reps, rep_ms / est)))


def time_cuda(
    fn: Callable[[], object],
    *,
    warmup_ms: float,
    rep_ms: float,
    min_reps: int = 5,
    max_reps: int = 2000,
    flush_l2: bool = True,
    cuda_graph: bool = False,
    device: torch.device | None = None,
) -> Samples:
    device = device or torch.device("cuda", torch.cuda.current_device())
    flush = l2_flush_buffer(device) if flush_l2 else None
    call = fn
    if cuda_graph:
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            fn()  # warm allocations on the side stream before capture
        torch.cuda.current_stream(device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        call = graph.replay
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
    n_warm, n_rep = _counts(float(np.median(est)), warmup_ms, rep_ms, min_reps, max_reps)
    for _ in range(n_warm):
        call()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for i in range(n_rep):
        if flush is not None:
            flush.zero_()
        starts[i].record()
        call()
        ends[i].record()
    torch.cuda.synchronize(device)
    return Samples.of([s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)])


def time_cpu(
    fn: Callable[[], object], *, warmup_ms: float, rep_ms: float, min_reps: int = 3, max_reps: int = 50, **_
) -> Samples:
    # the caller has already warmed fn; this first call gives the estimate (the interpreter is slow)
    t0 = time.perf_counter()
    fn()
    est = (time.perf_counter() - t0) * 1e3
    _, n_rep = _counts(est, warmup_ms, rep_ms, min_reps, max_reps)
    times = []
    for _ in range(n_rep):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return Samples.of(times)


def sync_for(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None
