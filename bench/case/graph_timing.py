"""The device time of a call from CUDA-graph replay (`timing.cuda_graph: true`), beside the event-timed samples.

A call whose host work (Python, argument checks, launches) takes about as long as its kernels is timed by
the events around it at host speed: the GPU waits between the flush and the first kernel. Replaying a graph
takes the host out: `calls` calls are captured into one graph, each preceded by the same L2 flush as the
timed samples, and a second graph holds the flushes alone; both are replayed `replays` times, alternately,
with a pair of events around each replay, and the call's device time is (median of the calls' replays −
median of the flushes' replays) / calls — what Triton's `do_bench_cudagraph` measures, with tritonbench's
flush-in-the-graph correction. Nothing here runs inside the timed samples: it runs after them.

A provider whose call cannot be captured (a host sync, a launch onto another stream — e.g. a retained
autograd backward, whose engine launches onto the forward's stream —, a library that refuses capture) is
recorded with why (`error`), and the case keeps its event timing. The first call of a shape class must
already have run (autotuning, the op's measured backend choice: both need the GPU's answer, which a
capture cannot give): the runner's untimed first call and the samples did that.

The record (`cuda_graph`, docs/DESIGN.md §6): {ms (device time per call), calls (per graph), replays,
flush_ms (the flush's share per call, subtracted), error}.
"""

from __future__ import annotations

import gc
import math
import statistics
from collections.abc import Callable

import torch

from bench.case.faults import is_sticky_cuda_error
from support.text import one_line

TARGET_MS = 20.0  # a graph's replay: long enough that the events' own resolution (~µs) is noise
MAX_CALLS = 200  # bounds the capture (and the graph's memory pool) for very short calls
REPLAYS = 10  # as do_bench_cudagraph's retries


def calls_per_graph(median_ms: float | None) -> int:
    """How many calls one graph holds: TARGET_MS of them at the event-timed median, within [1, MAX_CALLS]."""
    if not median_ms or median_ms <= 0 or not math.isfinite(median_ms):
        return 1
    return max(1, min(MAX_CALLS, math.ceil(TARGET_MS / median_ms)))


def _capture(body: Callable[[], None], device: torch.device) -> torch.cuda.CUDAGraph:
    graph = torch.cuda.CUDAGraph()
    # "global": any CUDA call from another thread that would break the capture is an error, so a call
    # whose kernels run elsewhere (not captured) fails loudly instead of replaying an empty graph
    with torch.cuda.graph(graph, capture_error_mode="global"):
        body()
    torch.cuda.synchronize(device)
    return graph


def _replay_ms(graph: torch.cuda.CUDAGraph) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def graph_time(
    fn: Callable[[], object],
    device: torch.device,
    flush: torch.Tensor | None,
    median_ms: float | None,
    replays: int = REPLAYS,
) -> dict:
    """The `cuda_graph` record of `fn` (warmed: its first call has run) on `device`."""
    n = calls_per_graph(median_ms)
    out: dict = {"ms": None, "calls": n, "replays": replays, "flush_ms": None, "error": None}
    graphs = []
    try:
        torch.cuda.synchronize(device)
        # A graph allocates from a private pool that cannot reuse the caching allocator's free blocks: in the
        # H200 production run of 2026-12-02 the cases' cached blocks (137 GiB reserved, ~2 allocated) left
        # every capture after the 40th out of memory. Cached free blocks go back to the driver first.
        gc.collect()
        torch.cuda.empty_cache()
        side = torch.cuda.Stream(device)  # warm the side stream's allocations before capture (torch's advice)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)

        def calls():
            for _ in range(n):
                if flush is not None:
                    flush.zero_()
                fn()

        def flushes():
            for _ in range(n):
                flush.zero_()

        graphs.append(_capture(calls, device))
        if flush is not None:
            graphs.append(_capture(flushes, device))
        for g in graphs:
            g.replay()  # the first replay uploads the graph
        torch.cuda.synchronize(device)
        times: list[list[float]] = [[] for _ in graphs]
        for _ in range(replays):
            for g, t in zip(graphs, times, strict=True):
                t.append(_replay_ms(g))
        whole = statistics.median(times[0])
        flush_ms = statistics.median(times[1]) / n if flush is not None else 0.0
        out.update(ms=max(whole / n - flush_ms, 0.0), flush_ms=flush_ms if flush is not None else None)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        if is_sticky_cuda_error(exc):
            raise  # the GPU faulted: the case's error (bench.case.faults)
        out["error"] = f"the call cannot be captured in a CUDA graph: {one_line(exc)}"
    finally:
        del graphs
        try:
            torch.cuda.synchronize(device)
            gc.collect()
            torch.cuda.empty_cache()  # the graphs' private pools, freed with them, back to the driver
        except Exception as exc:  # a capture that failed leaves its error for the next sync
            if is_sticky_cuda_error(exc):
                raise
    return out
