"""A case record, the entry of one case in results.json (docs/DESIGN.md §6): the figures that follow from
its timed samples. (The kernel op's `record=` is something else: the dict a GDPA call fills with what it
ran, stored here as `kernel_config`.)"""

from __future__ import annotations

import math
from typing import Protocol

from results.drift import drift
from results.figures import tflops, utilization

# the order of results.json's case fields (docs/DESIGN.md §6); the outcome ones start empty
FIELD_ORDER = (
    "id", "set", "max_len", "sweep", "provider", "provider_name", "provider_options", "semantics", "mode", "dtype",
    "activation", "workload", "status", "error", "correctness", "flops", "times_ms", "median_ms", "p20_ms", "p80_ms",
    "timed_s", "drift", "drift_p", "sm_clock_mhz", "tflops", "util_peak", "util_measured", "power", "gpu_index",
    "gpu_name", "kernel_config", "wall_s",
)  # fmt: skip


def new_case_record(**identity) -> dict:
    """A case record before the case runs: `identity` (what the runner knows of the case), every outcome
    field empty."""
    rec = {name: [] if name == "times_ms" else None for name in FIELD_ORDER}
    rec.update(identity)
    return rec


def _known(x: float) -> float | None:
    return None if math.isnan(x) else x


class TimedSamples(Protocol):
    """What the timer gives (bench.timing.Samples): every sample in measurement order and its quantiles."""

    times_ms: list[float]
    median_ms: float
    p20_ms: float
    p80_ms: float


def timing_fields(samples: TimedSamples, flops: float, peak_tflops: float | None, gemm_tflops: float | None) -> dict:
    """The samples and what follows from them: TFLOP/s from the median, utilization over each ceiling,
    the timed window (the samples' sum, s) and the drift of the samples (first vs last tenth, the figure
    compare judges a case by: results.drift)."""
    rate = tflops(flops, samples.median_ms)
    d, p = drift(samples.times_ms)
    return {
        "times_ms": samples.times_ms,
        "median_ms": samples.median_ms,
        "p20_ms": samples.p20_ms,
        "p80_ms": samples.p80_ms,
        "timed_s": sum(samples.times_ms) / 1e3,
        "drift": d,
        "drift_p": p,
        "tflops": _known(rate),
        "util_peak": _known(utilization(rate, peak_tflops)),
        "util_measured": _known(utilization(rate, gemm_tflops)),
    }
