"""Histogram of a workload's Q and KV lengths (used by `bench workloads` and the report)."""

from __future__ import annotations

import os

import numpy as np

from support.png import save_compact_png


def plot_length_histogram(q_lengths, kv_lengths, path, title: str = "") -> None:
    """Write a PNG at `path` (parent folders created) with overlaid Q and KV length histograms.

    Uses matplotlib's object API with the Agg canvas, so it never touches pyplot's global backend or
    figure registry: safe on headless machines and inside other code that uses pyplot itself.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    q = np.asarray(q_lengths, dtype=np.int64).reshape(-1)
    k = np.asarray(kv_lengths, dtype=np.int64).reshape(-1)
    fig = Figure(figsize=(7, 4.2), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    both = np.concatenate([q, k])
    if both.size:
        lo, hi = int(both.min()), int(both.max())
        # one bar per integer length when the range is small, else 60 even bins on the shared range
        bins = np.arange(lo, hi + 2) - 0.5 if hi - lo <= 60 else np.linspace(lo, hi, 61)
        ax.hist(q, bins=bins, alpha=0.6, color="tab:blue", label=f"Q (mean {q.mean():.1f}, max {q.max()})")
        ax.hist(
            k,
            bins=bins,
            alpha=0.6,
            color="tab:orange",
            histtype="stepfilled",
            label=f"KV (mean {k.mean():.1f}, max {k.max()})",
        )
        ax.legend(loc="upper right")
    else:
        ax.text(0.5, 0.5, "no sequences", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("sequences")
    head = f"{title}\n" if title else ""
    mq = f"{q.mean():.1f}" if q.size else "-"
    mk = f"{k.mean():.1f}" if k.size else "-"
    ax.set_title(f"{head}B={q.size}, mean Lq={mq}, mean Lk={mk}", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    parent = os.path.dirname(os.fspath(path))
    if parent:
        os.makedirs(parent, exist_ok=True)
    save_compact_png(fig, path)
    fig.clear()  # drop the artists now; the figure was never registered with pyplot
