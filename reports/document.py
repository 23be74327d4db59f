"""The report as a small document model (paragraphs, tables, images, sections) and the cell format.

Every number in a report goes through `fmt`: one place decides how TFLOP/s, ms, W and fractions read,
and that a missing value is "—". Which format a field takes is its row's in the metric table
(results.metrics: `Metric.cell_format`).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from results.metric_row import Metric
from results.rates import rate

DASH = "—"

# ------------------------------------------------------------------------------------------ formatting


def isnum(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(float(v))


def fmt(v: Any, kind: str = "") -> str:
    """One cell: numbers by `kind`, None/NaN/missing as "—"."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return DASH
    if kind == "params":  # a rule's parameters as `fill=0.5 kv_len=256`; a file by its name
        if not isinstance(v, dict) or not v:
            return DASH
        return " ".join(f"{k}={Path(x).name if k == 'path' and isinstance(x, str) else x}" for k, x in v.items())
    if kind == "str" or not isnum(v):
        if isinstance(v, (list, tuple)):  # a tile reads 128×128
            return ("×" if kind == "tile" else ", ").join(str(x) for x in v) if v else DASH
        s = str(v)
        return s if s.strip() else DASH
    x = float(v)
    if kind == "tflops":  # in the column's TFLOP/s from 1 up; below, a CPU run's rate with its own unit
        return f"{x:,.1f}" if abs(x) >= 1 or x == 0 else rate(x, 3)
    if kind == "ms":
        return f"{x:.4g}"
    if kind == "pct":
        return f"{100 * x:.1f}%"
    if kind == "percent":  # already in percent (Nsight Compute's figures)
        return f"{x:.1f}%"
    if kind == "x":
        return f"{x:.2f}×"
    if kind == "whole":
        return f"{x:,.0f}"
    if kind == "int":
        return f"{round(x):,}"
    if kind == "count":  # how many of something: none is "—"
        return f"{round(x):,}" if x else DASH
    if kind == "len":
        return str(round(x))
    if kind == "frac":
        return f"{x:.3f}"
    if kind == "sci":
        return f"{x:.2e}"
    return f"{x:.4g}"


def cell(m: Metric, row: Any) -> str:
    """A row's value of metric `m` (a frame row or a dict) as a table cell; a range when `m` spans to
    another metric."""
    if m.span_to:
        low, high = row.get(m.name), row.get(m.span_to)
        return f"{fmt(low, m.cell_format)}–{fmt(high, m.cell_format)}" if isnum(low) else DASH
    return fmt(row.get(m.name), m.cell_format)


def fmt_date(s: Any) -> str:
    if not isinstance(s, str) or not s:
        return DASH
    try:
        d = _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return s
    if d.tzinfo is not None:
        d = d.astimezone(_dt.timezone.utc)
    return d.strftime("%Y-%m-%d %H:%M UTC")


# ---------------------------------------------------------------------------------------- document model


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    css: str = ""
    status_col: int | None = None  # index of a status column (coloured in HTML)
    empty: str = "(none)"


@dataclass
class Image:
    path: Path
    caption: str
    csv: list[Path] = field(default_factory=list)


@dataclass
class Section:
    title: str
    blocks: list[Any] = field(default_factory=list)  # str (paragraph), Table, Image, Section (details), ("warn", str)
    collapsed: bool = False
