"""Calibration: the measured GEMM ceiling (and its power) and the device copy bandwidth.

Utilization is reported against both the datasheet peak and a GEMM measured in the same run, because
the datasheet peak is not reachable under a binding power cap (docs/DESIGN.md §5; the measured H200
figures are in §8).

- ``tflops_fresh``: median of single timed GEMMs (CUDA events), each on an otherwise idle queue, after
  warm-up: what a short kernel sees before the power cap bites.
- ``tflops_sustained``: a back-to-back loop of >= ``seconds`` (under ``monitor.measure`` when a
  monitor is given, which also yields the power dict): what a long sweep sees.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch

from bench.monitor import PowerMonitor, run_for

__all__ = ["calibrate_copy", "calibrate_gemm"]

_FRESH_REPS = 10


def _cuda_device(device: Any, what: str) -> torch.device:
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{what} needs a CUDA GPU, but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})"
        )
    dev = torch.device(device)
    if dev.type != "cuda":
        raise RuntimeError(f"{what} needs a CUDA device, got {device!r}")
    if dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _event_times_ms(fn, reps: int, device: torch.device) -> list[float]:
    """Time ``reps`` single calls with CUDA events, synchronizing after each."""
    times = []
    with torch.cuda.device(device):
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(device)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return times


def calibrate_gemm(
    device: Any = "cuda",
    monitor: PowerMonitor | None = None,
    n: int = 8192,
    dtype: torch.dtype = torch.bfloat16,
    seconds: float = 2.0,
    settle_s: float = 2.0,
) -> dict:
    """Measure an n×n×n GEMM: fresh and sustained TFLOP/s, plus power during the sustained loop.

    Operands are random normal (zeros would let the hardware save power and flatter the numbers).
    The GPU idles ``settle_s`` first: right after sustained load the power controller still holds the
    clocks down, so "fresh" would otherwise read below "sustained" (docs/DESIGN.md §8 has the figures).
    Returns {"n", "dtype", "settle_s", "flops_per_call", "tflops_fresh" (median), "fresh_ms" (every timed sample),
    "tflops_sustained", "sustained_calls", "sustained_seconds", "power": measure dict or None}.
    ``power`` is None without a monitor, or when it is unavailable (see ``monitor.info()``).
    Raises RuntimeError when CUDA is not available.
    """
    dev = _cuda_device(device, "calibrate_gemm")
    n = int(n)
    flops = 2.0 * n * n * n
    gen = torch.Generator(device=dev)
    gen.manual_seed(0)
    a = torch.randn(n, n, device=dev, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=dev, dtype=dtype, generator=gen)
    out = torch.empty(n, n, device=dev, dtype=dtype)

    def gemm() -> None:
        torch.matmul(a, b, out=out)

    def sync() -> None:
        torch.cuda.synchronize(dev)

    with torch.cuda.device(dev):
        sync()
        if settle_s > 0:
            time.sleep(settle_s)
        for _ in range(5):  # cuBLAS heuristics, clocks up
            gemm()
        sync()
        fresh_ms = _event_times_ms(gemm, _FRESH_REPS, dev)
        tflops_fresh = flops / (statistics.median(fresh_ms) * 1e-3) / 1e12

        power = None
        if monitor is not None and monitor.available:
            power = monitor.measure(
                gemm, sync=sync, min_seconds=seconds, flops_per_call=flops, case_id=f"calibrate/gemm/n={n}"
            )
        if power is not None:
            calls, secs = power["calls"], power["seconds"]
        else:
            calls, secs = run_for(gemm, sync=sync, min_seconds=seconds)

    return {
        "n": n,
        "dtype": str(dtype).removeprefix("torch."),
        "settle_s": settle_s,
        "flops_per_call": flops,
        "tflops_fresh": tflops_fresh,
        "fresh_ms": fresh_ms,
        "tflops_sustained": flops * calls / secs / 1e12,
        "sustained_calls": calls,
        "sustained_seconds": secs,
        "power": power,
    }


def calibrate_copy(device: Any = "cuda", nbytes: int = 2**31) -> dict:
    """Device-to-device copy bandwidth, counting bytes read + written (2 × nbytes per copy).

    Returns {"nbytes", "tb_per_s" (from the median), "ms_median", "times_ms"}.
    Raises RuntimeError when CUDA is not available.
    """
    dev = _cuda_device(device, "calibrate_copy")
    nbytes = int(nbytes)
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    src.random_(0, 256)
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    with torch.cuda.device(dev):
        for _ in range(3):
            copy()
        torch.cuda.synchronize(dev)
        times = _event_times_ms(copy, _FRESH_REPS, dev)
    ms = statistics.median(times)
    return {
        "nbytes": nbytes,
        "tb_per_s": 2.0 * nbytes / (ms * 1e-3) / 1e12,
        "ms_median": ms,
        "times_ms": times,
    }
