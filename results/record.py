"""A case record, the entry of one case in results.json (docs/DESIGN.md §6): the figures that follow from
its timed samples. (The kernel op's `record=` is something else: the dict a GDPA call fills with what it
ran, stored here as `kernel_config`.)"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from results import metrics
from results.drift import drift
from results.figures import tflops, utilization
from results.metrics import Metric


class UndeclaredField(ValueError):
    """A record holds a field no row of the metric table declares: a harness bug, caught before it is
    written (add the row to results.metrics)."""


def new_case_record(**identity) -> dict:
    """A case record before the case runs: every always-present field of the metric table, empty, with
    `identity` (what the runner knows of the case) filled in."""
    always = [m for m in metrics.METRICS if m.in_record and not m.block and not m.optional]
    rec = {m.name: [] if m.kind == "list" else None for m in always}
    rec.update(identity)
    check_case_record(rec)
    return rec


def check_case_record(rec: dict) -> None:
    """Raise `UndeclaredField` naming the first field, key of a block or column of a table that the metric
    table does not declare."""
    _check(rec, metrics.METRICS, "case record")


def check_workload_entry(entry: dict) -> None:
    """The same for a workload's entry in results.json's `workloads`."""
    _check(entry, metrics.WORKLOAD_METRICS, "workload entry")


def _check(record: dict, table: tuple[Metric, ...], what: str, parent: str = "") -> None:
    kinds = {m.name: m.kind for m in table if m.in_record}
    for key, value in record.items():
        name = f"{parent}.{key}" if parent else key
        if name not in kinds:
            raise UndeclaredField(f"{what} field {name!r} is not declared in results.metrics")
        if kinds[name] == "block" and isinstance(value, dict):
            _check(value, table, what, name)
        elif kinds[name] == "table" and isinstance(value, list):
            for row in value:
                if isinstance(row, dict):
                    _check(row, table, what, name)


def _known(x: float) -> float | None:
    return None if math.isnan(x) else x


class TimedSamples(Protocol):
    """What the timer gives (bench.case.timing.Samples): every sample in measurement order and its quantiles."""

    times_ms: list[float]
    median_ms: float
    p20_ms: float
    p80_ms: float


def chunk_clocks(samples: TimedSamples) -> list[list]:
    """[samples so far, SM clock MHz] at each of the timer's chunks (bench.case.power), or [] when the clock
    was not read per chunk."""
    ends, clocks = getattr(samples, "chunk_ends", None), getattr(samples, "chunk_clocks_mhz", None)
    if not ends or not clocks or len(ends) != len(clocks):
        return []
    return [[int(n), None if c is None else float(c)] for n, c in zip(ends, clocks, strict=True)]


def samples_clock(chunk_clocks: list) -> float | None:
    """The SM clock (MHz) of the median timed sample, from the readings after each chunk ([samples so far,
    MHz] pairs, `chunk_clocks`): each sample gets the clock interpolated between the readings around it (before
    the first one, the first), then the median over the samples. A plain median of one reading per chunk
    weighed the first chunk's 5 samples like the last chunk's 1,000 (a review of the measurement path,
    2026-12-05: a window capped after 0.1 s recorded its uncapped clock, and compare normalised by it); giving
    each chunk's samples its end reading alone leant late. None without a reading."""
    known = [(int(n), float(c)) for n, c in chunk_clocks if c is not None and n is not None and int(n) > 0]
    if not known:
        return None
    total = max(int(n) for n, _ in chunk_clocks if n is not None)
    ends, clocks = zip(*known, strict=True)
    return float(np.median(np.interp(np.arange(1, total + 1), ends, clocks)))


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
        "chunk_clocks": chunk_clocks(samples),
        "drift": d,
        "drift_p": p,
        "tflops": _known(rate),
        "util_peak": _known(utilization(rate, peak_tflops)),
        "util_measured": _known(utilization(rate, gemm_tflops)),
    }
