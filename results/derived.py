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
from results.power import power_flags

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


def utilization_column(ceiling: str, column: str) -> Derive:
    def derive(df: pd.DataFrame, meta: dict) -> np.ndarray:
        value = meta.get(ceiling) or ({} if ceiling == "peak_tflops" else None)
        return recorded_else(
            df, rows_map(df, lambda r: utilization(r["tflops"], ceiling_for(value, r["dtype"]))), column
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


def energy_column(df: pd.DataFrame, meta: dict) -> np.ndarray:
    estimate = rows_map(df, lambda r: energy_per_call(r["power.avg_w"], r["median_ms"]) if r["ok"] else math.nan)
    return np.where(df["power.energy_j_per_call"].notna(), df["power.energy_j_per_call"], estimate)


def per_watt_column(df: pd.DataFrame, meta: dict) -> np.ndarray:
    estimate = rows_map(df, lambda r: tflops_per_watt(r["tflops"], r["power.avg_w"]))
    return np.where(df["power.tflops_per_w"].notna(), df["power.tflops_per_w"], estimate)


def ratio_column(numerator: str, denominator: str) -> Derive:
    """numerator / denominator where both are known and the denominator positive, else NaN."""

    def derive(df: pd.DataFrame, meta: dict) -> np.ndarray:
        a, b = (pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float) for c in (numerator, denominator))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(b > 0, a / b, np.nan)

    return derive


def top_kernels(df: pd.DataFrame, meta: dict) -> list:
    """Per case the first kernels of its breakdown (recorded longest first) by short name and share:
    `dq 61%; dkdv 30%; Memset (Device) 2%`."""

    def top(rows) -> str | None:
        named = [r for r in rows if isinstance(r, dict)][:TOP_KERNELS] if isinstance(rows, list) else []
        share = lambda r: f" {r['share']:.0%}" if isinstance(r.get("share"), (int, float)) else ""
        return "; ".join(short_kernel_name(r.get("name")) + share(r) for r in named) or None

    return [top(rows) for rows in df["kernels.rows"]]
