"""The functions behind the metric table's derived rows (results.metrics: a row's `derive`), each
`(frame, meta) -> column`: the frame computes them in table order, so a row may use the rows above it.
They call the same figures (results.figures, results.power) the runner records with."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from results.figures import ceiling_for, energy_per_call, number, tflops, tflops_per_watt, utilization
from results.kernel_names import short_kernel_name
from results.power import counter_resolves, power_flags

Derive = Callable[[pd.DataFrame, dict], "pd.Series | np.ndarray"]
TOP_KERNELS = 3  # kernels named in a case's `kernels_top`


def rows_map(df: pd.DataFrame, fn: Callable[[pd.Series], float]) -> np.ndarray:
    return np.asarray([fn(r) for _, r in df.iterrows()], dtype=float) if len(df) else np.array([], dtype=float)


def recorded_else(df: pd.DataFrame, computed: np.ndarray, recorded: str) -> np.ndarray:
    """The computed figure, or the recorded one where the inputs were missing."""
    if not len(df):
        return computed
    return np.where(np.isfinite(computed), computed, df[recorded].to_numpy(dtype=float))


def tflops_column(df: pd.DataFrame, meta: dict) -> np.ndarray:
    return recorded_else(df, tflops(df["flops"].to_numpy(), df["median_ms"].to_numpy()), "tflops")


def cycles_column(df: pd.DataFrame, meta: dict) -> np.ndarray:
    """Millions of SM cycles a call: the median at the samples' own clock (NaN where no clock was read)."""
    clock = pd.to_numeric(df["sm_clock_mhz"], errors="coerce") if "sm_clock_mhz" in df else np.nan
    return (pd.to_numeric(df["median_ms"], errors="coerce") * clock / 1e3).to_numpy(dtype=float)


def recorded_first(df: pd.DataFrame, recorded: str, computed: Callable[[], np.ndarray]) -> np.ndarray:
    """The recorded figure, or the computed one where the case recorded none (older runs, CPU runs)."""
    fallback = np.asarray(computed(), dtype=float)
    if not len(df) or recorded not in df:
        return fallback
    kept = pd.to_numeric(df[recorded], errors="coerce").to_numpy(dtype=float)
    return np.where(np.isfinite(kept), kept, fallback)


def utilization_column(ceiling: str, column: str) -> Derive:
    """The case's own utilization: a run resumed or merged across GPUs measured its cases against each
    machine's ceiling, so the run-level `meta[ceiling]` (the last calibration, or the shards' median) only
    fills in where a case recorded none."""

    def derive(df: pd.DataFrame, meta: dict) -> np.ndarray:
        value = meta.get(ceiling) or ({} if ceiling == "peak_tflops" else None)
        return recorded_first(
            df, column, lambda: rows_map(df, lambda r: utilization(r["tflops"], ceiling_for(value, r["dtype"])))
        )

    return derive


def power_of(row: pd.Series) -> dict:
    """A frame row's `power.*` columns as the case's `power` dict (missing values None)."""
    missing = lambda v: v is None or (isinstance(v, float) and math.isnan(v))
    return {k[len("power.") :]: None if missing(v) else v for k, v in row.items() if k.startswith("power.")}


def power_flag(name: str) -> Derive:
    return lambda df, meta: np.asarray([bool(power_flags(power_of(r))[name]) for _, r in df.iterrows()], dtype=bool)


def headline_column(df: pd.DataFrame, meta: dict) -> np.ndarray:
    return rows_map(df, lambda r: number(power_flags(power_of(r))["headline_w"]))


def _loop_figure(r: pd.Series, recorded: str, from_headline: Callable[[dict, float], float], estimate: float) -> float:
    """A power-derived figure of one row: the recorded one (over the counter's figure), recomputed from the
    headline where that was a start/end delta too coarse to be it (results.power.counter_resolves), else
    `estimate` where the case recorded none."""
    power = power_of(r)
    if power.get("energy_source") == "counter" and not counter_resolves(power):
        head = number(power_flags(power)["headline_w"])
        return from_headline(power, head) if head == head else estimate
    kept = number(power.get(recorded))
    return kept if kept == kept else estimate


def energy_column(df: pd.DataFrame, meta: dict) -> np.ndarray:
    def per_call(power: dict, w: float) -> float:
        seconds, calls = number(power.get("seconds")), number(power.get("calls"))
        return w * seconds / calls if seconds == seconds and calls == calls and calls > 0 else math.nan

    return rows_map(
        df,
        lambda r: _loop_figure(
            r, "energy_j_per_call", per_call, energy_per_call(r["power.avg_w"], r["median_ms"]) if r["ok"] else math.nan
        ),
    )


def per_watt_column(df: pd.DataFrame, meta: dict) -> np.ndarray:
    return rows_map(
        df,
        lambda r: _loop_figure(
            r,
            "tflops_per_w",
            lambda power, w: tflops_per_watt(power.get("tflops"), w),
            tflops_per_watt(r["tflops"], r["power.avg_w"]),
        ),
    )


def ratio_column(numerator: str, denominator: str, recorded: str | None = None) -> Derive:
    """numerator / denominator where both are known and the denominator positive, else NaN (with `recorded`:
    that field where the case has it)."""

    def ratio(df: pd.DataFrame) -> np.ndarray:
        a, b = (pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float) for c in (numerator, denominator))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(b > 0, a / b, np.nan)

    return lambda df, meta: recorded_first(df, recorded, lambda: ratio(df)) if recorded else ratio(df)


def top_kernels(df: pd.DataFrame, meta: dict) -> list:
    """Per case the first kernels of its breakdown (recorded longest first) by short name and share:
    `dq 61%; dkdv 30%; Memset (Device) 2%`."""

    def top(rows) -> str | None:
        named = [r for r in rows if isinstance(r, dict)][:TOP_KERNELS] if isinstance(rows, list) else []
        share = lambda r: f" {r['share']:.0%}" if isinstance(r.get("share"), (int, float)) else ""
        return "; ".join(short_kernel_name(r.get("name")) + share(r) for r in named) or None

    return [top(rows) for rows in df["kernels.rows"]]
