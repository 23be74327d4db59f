"""Shared pieces of the plots: figures without pyplot state, PNG + CSV writers, colours, panel order."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from kernels.modes import MODES
from results.frame import provider_label
from support.png import save_compact_png

DPI = 96


class PlotWarning(UserWarning):
    """A plot could not be drawn (a placeholder PNG was written instead)."""


# -------------------------------------------------------------------------------------------- helpers


def figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_compact_png(fig, path, dpi=DPI, facecolor="white")  # a palette PNG: small for good


def write_csv(df: pd.DataFrame, path: Path, columns: Sequence[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    df = df.reindex(columns=list(columns)) if len(df) else pd.DataFrame(columns=list(columns))
    df.to_csv(path, index=False)
    return path


def placeholder(path: Path, message: str, title: str | None = None) -> Path:
    """A PNG that says why there is no plot."""
    fig = figure(8, 2.6)
    ax = fig.add_subplot()
    ax.set_axis_off()
    if title:
        ax.set_title(title, fontsize=12)
    ax.text(
        0.5,
        0.5,
        message,
        ha="center",
        va="center",
        fontsize=12,
        wrap=True,
        bbox=dict(boxstyle="round", facecolor="#f3f3f3", edgecolor="#999999"),
    )
    return save(fig, path)


def grid(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = max(1, min(max_cols, n))
    return math.ceil(n / cols), cols


@dataclass
class Panels:
    """A figure with one panel per set × mode × sweep of `points` (panel order); iterating gives each
    panel's axes, name and rows; `finish` hides the spare axes and draws the legend below."""

    figure: Figure
    axes: list[Any]
    names: list[str]
    points: pd.DataFrame

    def __iter__(self) -> Iterator[tuple[Any, str, pd.DataFrame]]:
        for ax, name in zip(self.axes, self.names, strict=False):
            yield ax, name, self.points[self.points["panel"] == name]

    def finish(self, handles: dict[str, Any], title: str) -> None:
        for ax in self.axes[len(self.names) :]:
            ax.set_axis_off()
        legend(self.figure, handles, title)


def panel_figure(points: pd.DataFrame, width: float, height: float, max_cols: int = 3) -> Panels:
    """`Panels` of `width` × `height` inches each, at most `max_cols` a row, with room for a legend below."""
    names = panel_order(points)
    rows, cols = grid(len(names), max_cols)
    fig = figure(width * cols, height * rows + 0.9)
    return Panels(fig, list(fig.subplots(rows, cols, squeeze=False).ravel()), names, points)


def each_provider(points: pd.DataFrame) -> Iterator[tuple[str, pd.DataFrame, str, bool]]:
    """(provider, its rows, its legend label, whether it is a softmax provider), in provider order."""
    for provider in provider_order(points):
        rows = points[points["provider"] == provider]
        soft = bool((rows["semantics"] == "softmax").any())
        yield provider, rows, provider_label(provider, "softmax" if soft else "gdpa"), soft


def provider_colors(providers: Sequence[str]) -> dict[str, Any]:
    """A stable colour per provider name (tab10, then tab20 beyond ten)."""
    names = sorted({str(p) for p in providers if p is not None})
    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {p: cmap(i % cmap.N) for i, p in enumerate(names)}


def panel_order(df: pd.DataFrame) -> list[str]:
    """Panels sorted by set, mode (fwd, bwd, fwd_bwd) and sweep label."""
    keys = df[["panel", "set", "mode", "sweep_label"]].drop_duplicates("panel")
    keys = keys.assign(_m=keys["mode"].map(lambda m: MODES.index(m) if m in MODES else 9))
    keys = keys.sort_values(["set", "_m", "sweep_label"], key=lambda s: s.astype(str) if s.name != "_m" else s)
    return list(keys["panel"])


def panel_title(panel: str) -> str:
    return panel.replace("/", " · ")


def provider_order(df: pd.DataFrame) -> list[str]:
    """GDPA providers first, then softmax ones, each alphabetical."""
    pairs = df[["provider", "semantics"]].drop_duplicates("provider")
    pairs = pairs.assign(_s=(pairs["semantics"] == "softmax").astype(int)).sort_values(["_s", "provider"])
    return [str(p) for p in pairs["provider"]]


def fmt_num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name.replace("=", "-")).strip("_") or "workload"


def ok_cases(cases: pd.DataFrame, where: Callable[[pd.DataFrame], pd.Series] | None = None) -> pd.DataFrame:
    """The ok cases, and of those the rows `where` keeps (an empty frame as it is: it may lack the columns)."""
    ok = cases[cases["status"] == "ok"] if len(cases) else cases
    return ok[where(ok)] if where is not None and len(ok) else ok


def legend(fig: Figure, handles: dict[str, Any], title: str) -> None:
    fig.suptitle(title, fontsize=11)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles.keys()),
            loc="outside lower center",
            ncols=min(6, len(handles)),
            fontsize=8,
            frameon=False,
        )
