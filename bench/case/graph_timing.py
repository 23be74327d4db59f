"""The device time of a call from CUDA-graph replay (`timing.cuda_graph: true`), beside the event-timed samples.

A call whose host work (Python, argument checks, launches) takes about as long as its kernels is timed by
the events around it at host speed: the GPU waits between the flush and the first kernel. Replaying a graph
takes the host out: `calls` calls are captured into one graph, each preceded by the same L2 flush as the
timed samples, and a second graph holds the flushes alone; both are replayed `replays` times, alternately,
with a pair of events around each replay, and the call's device time is (median of the calls' replays −
median of the flushes' replays) / calls — what Triton's `do_bench_cudagraph` measures, with tritonbench's
flush-in-the-graph correction. Nothing here runs inside the timed samples: it runs after them.

A provider whose call cannot be captured (a host sync, a launch onto the legacy default stream, a library
that refuses capture) is recorded with why (`error`, with the error raised inside the capture), and the case
keeps its event timing. A kept forward's backward runs on its forward's stream, so the harness builds and
times every case on a stream of its own (bench.case.device.harness_stream) and captures on it: on the legacy
default stream each process's first backward capture failed (the H200, 2026-12-02), and the ones after it
captured only because torch.cuda.graph's exit had left its capture stream current. A graph the device has
no room for is not attempted (`capture_room`): PyTorch keeps a failed capture's memory pool reserved until
the process exits (pytorch/pytorch#190348), and one capture out of memory then took every later one with it.
The first call of a shape class must
already have run (autotuning, the op's measured backend choice: both need the GPU's answer, which a
capture cannot give): the runner's untimed first call and the samples did that.

The record (`cuda_graph`, docs/DESIGN.md §6): {ms (device time per call), calls (per graph), replays,
flush_ms (the flush's share per call, subtracted), error, memory, sm_clock_mhz}. `sm_clock_mhz`: the median of
the SM clock read after each round of replays (the runner's NVML reader; None without one). The replays run
after the samples, and under a power cap at another clock: a 70 ms GPU-bound call's samples at a falling clock
read 8 ms over its graph time on an H100 (2026-12-06), which `host_bound` took for host time until the two were
compared in SM cycles (bench.profiling.views). `memory`: the caching allocator around the
capture (GiB allocated and reserved before it, one call's peak allocation, reserved after the graphs are
released): on the H200 (2026-12-02, twice) 75 of 128 production captures ran out of memory with 90-137 GiB
reserved and 1-11 GiB allocated.
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
GIB = float(1 << 30)
CAPTURE_HEADROOM = 1.25  # a graph's pool over one call's peak allocation (rounding to segments, the graph)
CAPTURE_SLACK = 1 << 30  # and what the driver needs besides


def calls_per_graph(median_ms: float | None) -> int:
    """How many calls one graph holds: TARGET_MS of them at the event-timed median, within [1, MAX_CALLS]."""
    if not median_ms or median_ms <= 0 or not math.isfinite(median_ms):
        return 1
    return max(1, min(MAX_CALLS, math.ceil(TARGET_MS / median_ms)))


def _capture(body: Callable[[], None], device: torch.device, pools: list) -> torch.cuda.CUDAGraph:
    """The graph of `body`, its memory pool appended to `pools` (kept until the graph is released)."""
    graph = torch.cuda.CUDAGraph()
    pool = torch.cuda.MemPool()  # its own pool, held here, so that a failed capture's can be released
    pools.append(pool)
    before = torch.cuda.current_stream(device)
    # On the harness's own stream (bench.case.device.harness_stream) the capture runs on the stream the case's
    # calls were built and timed on: a kept forward's backward runs on its forward's stream
    stream = None if before == torch.cuda.default_stream(device) else before
    try:
        # "global": any CUDA call from another thread that would break the capture is an error, so a call
        # whose kernels run elsewhere (not captured) fails loudly instead of replaying an empty graph
        with torch.cuda.graph(graph, pool=pool.id, stream=stream, capture_error_mode="global"):
            body()
    except Exception:
        graph.reset()
        release_failed_pool(device, pool)
        raise
    finally:
        # torch.cuda.graph's exit skips restoring the stream when ending the capture raises: the capture stream
        # then stayed current for the rest of the process (the H200 runs of 2026-12-02)
        torch.cuda.set_stream(before)
    torch.cuda.synchronize(device)
    return graph


def release_failed_pool(device: torch.device, pool: torch.cuda.MemPool) -> None:
    """What a failed capture can leave in PyTorch's allocator, undone (after `graph.reset()`): the pool still
    marked as being captured into, and the graph's use of it, which CUDAGraph.reset() gives back only after a
    capture that ended in torch 2.11 (pytorch/pytorch#190348): the pool and its memory then stayed reserved
    until the process exited. Only the uses beyond the MemPool object's own are released, so a torch that did
    it already is left as it is (releasing a use twice breaks every later empty_cache)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        torch._C._cuda_endAllocateToPool(index, pool.id)
    except RuntimeError:
        pass  # this torch's capture_end did it
    uses = getattr(pool, "use_count", None)  # a torch without it: nothing released (never twice)
    for _ in range(4 if uses else 0):  # the failed graph's use; bounded, whatever this torch counts
        if uses() <= 1:
            break
        torch._C._cuda_releasePool(index, pool.id)


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
    clock: Callable[[], float | None] | None = None,
) -> dict:
    """The `cuda_graph` record of `fn` (warmed: its first call has run) on `device`; `clock()`: the SM clock
    now (MHz, or None), read between replays, outside the events."""
    n = calls_per_graph(median_ms)
    out: dict = {"ms": None, "calls": n, "replays": replays, "flush_ms": None, "error": None, "memory": None,
                 "sm_clock_mhz": None}  # fmt: skip
    graphs, pools = [], []
    try:
        torch.cuda.synchronize(device)
        # A graph allocates from a private pool that cannot reuse the caching allocator's free blocks: in the
        # H200 production run of 2026-12-02 the cases' cached blocks (137 GiB reserved, ~2 allocated) left
        # every capture after the 40th out of memory. Cached free blocks go back to the driver first.
        gc.collect()
        torch.cuda.empty_cache()
        out["memory"] = allocator_state(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        side = torch.cuda.Stream(device)  # warm the side stream's allocations before capture (torch's advice)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        out["memory"]["call_peak_gib"] = round(peak / GIB, 3)

        def calls():
            for _ in range(n):
                if flush is not None:
                    flush.zero_()
                fn()

        def flushes():
            for _ in range(n):
                flush.zero_()

        room = capture_room(device, peak, n)
        if room is not None:
            out["error"] = room
            return out
        graphs.append(_capture(calls, device, pools))
        if flush is not None:
            graphs.append(_capture(flushes, device, pools))
        for g in graphs:
            g.replay()  # the first replay uploads the graph
        torch.cuda.synchronize(device)
        times: list[list[float]] = [[] for _ in graphs]
        clocks: list[float] = []
        for _ in range(replays):
            for g, t in zip(graphs, times, strict=True):
                t.append(_replay_ms(g))
            mhz = clock() if clock is not None else None  # after the round's events have synced
            if mhz is not None:
                clocks.append(float(mhz))
        whole = statistics.median(times[0])
        flush_ms = statistics.median(times[1]) / n if flush is not None else 0.0
        out.update(ms=max(whole / n - flush_ms, 0.0), flush_ms=flush_ms if flush is not None else None,
                   sm_clock_mhz=statistics.median(clocks) if clocks else None)  # fmt: skip
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        if is_sticky_cuda_error(exc):
            raise  # the GPU faulted: the case's error (bench.case.faults)
        out["error"] = f"the call cannot be captured in a CUDA graph: {capture_failure(exc)}"
    finally:
        try:
            for g in graphs:
                g.reset()  # the graph and its pool released now, whatever else still refers to the object
            del graphs, pools  # each pool's last use: freed by the empty_cache below
            torch.cuda.synchronize(device)
            gc.collect()
            torch.cuda.empty_cache()  # the graphs' private pools, freed with them, back to the driver
            if out["memory"] is not None:
                out["memory"]["reserved_after_gib"] = allocator_state(device)["reserved_gib"]
        except Exception as exc:  # a capture that failed leaves its error for the next sync
            if is_sticky_cuda_error(exc):
                raise
    return out


def capture_failure(exc: BaseException) -> str:
    """The failure and what it was raised during: a capture that failed inside the body ends with
    torch.cuda.graph's exit raising `operation failed due to a previous error during capture`, the body's own
    error only its context (the H200's uniform/bwd/L=2048/gdpa capture of 2026-12-02 recorded only the former)."""
    seen, parts, e = set(), [], exc
    while e is not None and id(e) not in seen and len(parts) < 3:
        seen.add(id(e))
        parts.append(one_line(e))
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
    return parts[0] + "".join(f" (raised during: {p})" for p in parts[1:])


def allocator_state(device: torch.device) -> dict:
    """{allocated_gib, reserved_gib}: what PyTorch's caching allocator holds on `device` now."""
    return {
        "allocated_gib": round(torch.cuda.memory_allocated(device) / GIB, 3),
        "reserved_gib": round(torch.cuda.memory_reserved(device) / GIB, 3),
    }


def capture_room(device: torch.device, peak_bytes: int, calls: int) -> str | None:
    """None when the device has room for a graph of `calls` calls whose one call allocates `peak_bytes` at its
    peak (calls in one capture reuse each other's freed blocks), else why it is not captured. A capture that
    runs out of memory is not only lost: PyTorch keeps a failed capture's pool reserved until the process
    exits (pytorch/pytorch#190348, fixed after the H200's torch 2.11), which cascaded into 74 lost captures."""
    free, _ = torch.cuda.mem_get_info(device)
    # what the cache holds unused (the warm-up call's blocks) torch.cuda.graph gives back before it captures
    free += torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    need = int(peak_bytes * CAPTURE_HEADROOM) + CAPTURE_SLACK
    if need <= free:
        return None
    return (
        f"not captured: a graph of {calls} call(s) needs about {need / GIB:.1f} GiB (one call's peak "
        f"{peak_bytes / GIB:.1f} GiB) and {free / GIB:.1f} GiB are free; a capture that runs out of memory keeps "
        "its pool until the process exits (pytorch#190348)"
    )
