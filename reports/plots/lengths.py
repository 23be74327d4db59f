"""Workload length histograms: one PNG per workload through workloads.plot, and one grid of all."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports.plots.common import PlotWarning, figure, grid, placeholder, save, slug, write_csv

# ------------------------------------------------------------------------------- 5. length histograms

LENGTHS_COLUMNS = ("workload", "seq", "q_len", "kv_len")


def fallback_length_histogram(q_lengths: Any, kv_lengths: Any, path: str | Path, title: str) -> None:
    """Used only when `workloads.plot` cannot be imported or fails: Q and KV length histograms."""
    fig = figure(6.4, 3.6)
    ax = fig.add_subplot()
    _draw_lengths(ax, np.asarray(q_lengths), np.asarray(kv_lengths))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    save(fig, Path(path))


def _draw_lengths(ax: Any, q: np.ndarray, kv: np.ndarray) -> None:
    hi = int(max(q.max(initial=1), kv.max(initial=1)))
    bins = np.linspace(0, hi + 1, min(60, hi + 2))
    # np.histogram + stairs: same picture as ax.hist, far fewer artists (faster to draw).
    if q.size:
        ax.stairs(
            np.histogram(q, bins)[0], bins, fill=True, alpha=0.45, color="#1f77b4", label=f"Q (mean {q.mean():.0f})"
        )
    if kv.size:
        ax.stairs(np.histogram(kv, bins)[0], bins, lw=1.5, color="#d62728", label=f"KV (mean {kv.mean():.0f})")
    ax.set_xlabel("length")
    ax.set_ylabel("sequences")
    ax.grid(True, alpha=0.3)


def _length_histogram_fn() -> Callable[..., Any]:
    try:
        from workloads.plot import plot_length_histogram  # noqa: PLC0415  (a fallback draws when it fails)
    except ImportError as e:
        warnings.warn(f"workloads.plot unavailable ({e}); drawing length histograms locally", PlotWarning, stacklevel=3)
        return fallback_length_histogram
    return plot_length_histogram


def plot_length_histograms(workloads: dict, out_dir: str | Path) -> list[Path]:
    """One `lengths_<workload>.png` per workload via `workloads.plot.plot_length_histogram`, plus the
    grid `workload_lengths.png` and `workload_lengths.csv` (every sequence's Q and KV length)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, csv = out_dir / "workload_lengths.png", out_dir / "workload_lengths.csv"
    items = []
    for name, w in (workloads or {}).items():
        if not isinstance(w, dict):
            continue
        q = np.asarray([x for x in (w.get("q_lengths") or []) if x is not None], dtype=np.int64)
        kv = np.asarray([x for x in (w.get("kv_lengths") or []) if x is not None], dtype=np.int64)
        if q.size or kv.size:
            items.append((str(name), q, kv))
    if not items:
        placeholder(png, "no workload lengths recorded in results.json", "workload length distributions")
        return [png, write_csv(pd.DataFrame(), csv, LENGTHS_COLUMNS)]
    written: list[Path] = []
    fn = _length_histogram_fn()
    for name, q, kv in items:
        path = out_dir / f"lengths_{slug(name)}.png"
        title = name  # plot_length_histogram adds B and the means itself
        try:
            fn(q, kv, path, title)
        except Exception as e:
            warnings.warn(
                f"workloads.plot.plot_length_histogram failed for {name}: {e!r}; drawing locally",
                PlotWarning,
                stacklevel=2,
            )
            fallback_length_histogram(q, kv, path, title)
        if path.exists():
            written.append(path)
    nr, nc = grid(len(items), 4)
    fig = figure(4.2 * nc, 2.9 * nr + 0.5)
    axes = fig.subplots(nr, nc, squeeze=False).ravel()
    rows = []
    for ax, (name, q, kv) in zip(axes, items, strict=False):
        _draw_lengths(ax, q, kv)
        ax.set_title(f"{name}  (B={max(q.size, kv.size)})", fontsize=9)
        ax.legend(fontsize=7)
        n = max(q.size, kv.size)
        qq = np.concatenate([q, np.full(n - q.size, -1)]) if q.size < n else q
        kk = np.concatenate([kv, np.full(n - kv.size, -1)]) if kv.size < n else kv
        rows.append(pd.DataFrame({"workload": name, "seq": np.arange(n), "q_len": qq, "kv_len": kk}))
    for ax in axes[len(items) :]:
        ax.set_axis_off()
    fig.suptitle("workload length distributions (filled: Q lengths, red outline: KV lengths)", fontsize=11)
    save(fig, png)
    lengths = pd.concat(rows, ignore_index=True).replace(-1, pd.NA)
    return [*written, png, write_csv(lengths, csv, LENGTHS_COLUMNS)]
