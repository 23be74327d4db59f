"""Workload length histograms: one PNG per workload (workloads.plot, the same picture `gdpa-bench workloads`
draws) and one grid of all of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports.plots.common import figure, grid, slug
from reports.plots.registry import Drawing, NothingToPlot, PlotData, plot
from workloads.plot import plot_length_histogram

LENGTHS_COLUMNS = ("workload", "seq", "q_len", "kv_len")


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


CAPTION = "Length distributions of every workload (Q filled, KV outlined)."


@plot(
    "workload_lengths",
    order=50,
    columns=LENGTHS_COLUMNS,
    extras_title="Per-workload length histograms",
    extras_prefix="lengths_",
    caption=CAPTION,
)
def workload_lengths(data: PlotData, out: Path) -> Drawing:
    """One `lengths_<workload>.png` per workload and the grid of all; the CSV holds every sequence's Q and
    KV length."""
    items = []
    for name, w in (data.workloads or {}).items():
        if not isinstance(w, dict):
            continue
        q = np.asarray([x for x in (w.get("q_lengths") or []) if x is not None], dtype=np.int64)
        kv = np.asarray([x for x in (w.get("kv_lengths") or []) if x is not None], dtype=np.int64)
        if q.size or kv.size:
            items.append((str(name), q, kv))
    if not items:
        raise NothingToPlot("no workload lengths recorded in results.json", "workload length distributions")
    extras = []
    for name, q, kv in items:
        path = out / f"lengths_{slug(name)}.png"
        plot_length_histogram(q, kv, path, name)  # it adds B and the means to the title itself
        extras.append(path)
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
    lengths = pd.concat(rows, ignore_index=True).replace(-1, pd.NA)
    return Drawing(fig, {"": lengths}, extras)
