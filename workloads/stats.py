"""Workload statistics (docs/DESIGN.md §4): token counts, padding and FLOP-area waste, imbalance, tile
efficiency, a hash.

`work_pairs` is the per-sequence count of (query, key) score pairs a kernel computes; FLOPs are
4·H·D·Σ work_pairs (docs/DESIGN.md §3), so this is the one place that decides what "causal" costs.
`tile_efficiency` is how much of the score area a tiled kernel computes is useful: the share of its
work that jaggedness lets a kernel with that tile keep.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np

STATS_KEYS = (
    "B",
    "total_q",
    "total_kv",
    "mean_q",
    "p50_q",
    "p90_q",
    "p99_q",
    "max_q",
    "mean_kv",
    "p50_kv",
    "p90_kv",
    "p99_kv",
    "max_kv",
    "padding_waste",
    "padding_waste_kv",
    "flop_waste",
    "imbalance",
    "top1pct_work_share",
    "total_work_pairs",
    "lengths_sha256",
    "tile_eff_64",
    "tile_eff_128",
)
#: The square tiles `stats` reports the tile efficiency at (`tile_eff_<t>`).
STAT_TILES = (64, 128)


def _pair(q_lengths, kv_lengths) -> tuple[np.ndarray, np.ndarray]:
    q = np.asarray(q_lengths).astype(np.int64).reshape(-1)
    k = np.asarray(kv_lengths).astype(np.int64).reshape(-1)
    if q.shape != k.shape:
        raise ValueError(f"q_lengths and kv_lengths differ in size: {q.shape[0]} vs {k.shape[0]}")
    if (q.size and q.min() < 0) or (k.size and k.min() < 0):
        raise ValueError("sequence lengths must be >= 0")
    return q, k


def work_pairs(q_lengths, kv_lengths, causal: bool = False, bottom_right: bool = False) -> np.ndarray:
    """Score pairs (i, j) computed per sequence, int64.

    Non-causal: Lq·Lk. Causal (top-left aligned, j <= i, diagonal kept: HSTU's convention, GDPA's):
    sum_{i<Lq} min(i+1, Lk) = m(m+1)/2 + (Lq-m)·Lk with m = min(Lq, Lk): the first m rows form a
    triangle, every later row sees all Lk keys. `bottom_right` (softmax attention's causal, FlashAttention's:
    j <= i + Lk - Lq): the last row sees all Lk keys, each row above one fewer, down to none,
    m·Lk - m(m-1)/2. The two agree where Lq == Lk."""
    q, k = _pair(q_lengths, kv_lengths)
    if not causal:
        return q * k
    m = np.minimum(q, k)
    if bottom_right:
        return m * k - m * (m - 1) // 2
    return m * (m + 1) // 2 + (q - m) * k


def computed_pairs(q_lengths, kv_lengths, tile_m: int, tile_n: int | None = None, causal: bool = False) -> np.ndarray:
    """Score pairs per sequence a kernel with `tile_m` × `tile_n` tiles (query rows × keys) computes, int64.

    Non-causal: ceil(Lq/m)·m · ceil(Lk/n)·n. Causal (j <= i): every tile with an unmasked pair is computed
    whole: query tile b (rows < min((b+1)·m, Lq)) needs ceil(min((b+1)·m, Lq, Lk) / n) key tiles."""
    q, k = _pair(q_lengths, kv_lengths)
    m = int(tile_m)
    n = m if tile_n is None else int(tile_n)
    if m <= 0 or n <= 0:
        raise ValueError(f"tile sizes must be positive, got {m} x {n}")
    q_tiles = -(-q // m)
    if not causal:
        return q_tiles * m * (-(-k // n) * n)
    out = np.zeros_like(q)
    for b in range(int(q_tiles.max(initial=0))):
        rows_end = np.minimum((b + 1) * m, q)
        out += np.where(b < q_tiles, -(-np.minimum(rows_end, k) // n) * m * n, 0)
    return out


def tile_efficiency(q_lengths, kv_lengths, tile_m: int, tile_n: int | None = None, causal: bool = False) -> float:
    """Useful over computed score area at a `tile_m` × `tile_n` tile: Σ work_pairs / Σ computed_pairs
    (causal: the unmasked pairs over the computed tiles' pairs). 1.0 when nothing is computed."""
    computed = int(computed_pairs(q_lengths, kv_lengths, tile_m, tile_n, causal).sum())
    useful = int(work_pairs(q_lengths, kv_lengths, causal).sum())
    return useful / computed if computed > 0 else 1.0


def lengths_sha256(q_lengths, kv_lengths) -> str:
    """sha256 hex of the int64 little-endian bytes of q_lengths followed by kv_lengths."""
    q, k = _pair(q_lengths, kv_lengths)
    h = hashlib.sha256()
    h.update(q.astype("<i8").tobytes())
    h.update(k.astype("<i8").tobytes())
    return h.hexdigest()


def _r(x: float) -> float:
    return round(float(x), 6)


def _dist(x: np.ndarray, suffix: str) -> dict:
    if x.size == 0:
        return {
            f"mean_{suffix}": 0.0,
            f"p50_{suffix}": 0.0,
            f"p90_{suffix}": 0.0,
            f"p99_{suffix}": 0.0,
            f"max_{suffix}": 0,
        }
    p50, p90, p99 = np.percentile(x, [50, 90, 99])  # numpy's default (linear) interpolation
    return {
        f"mean_{suffix}": _r(x.mean()),
        f"p50_{suffix}": _r(p50),
        f"p90_{suffix}": _r(p90),
        f"p99_{suffix}": _r(p99),
        f"max_{suffix}": int(x.max()),
    }


def length_stats(q_lengths, kv_lengths, *, causal: bool = False) -> dict:
    """The per-workload statistics of docs/DESIGN.md §4, as JSON-ready Python types (keys: `STATS_KEYS`).

    padding_waste(_kv) = 1 - ΣL/(B·maxL): the share of a padded [B, maxL] layout that is padding.
    flop_waste = 1 - Σw/(B·maxLq·maxLk), w = work_pairs(causal): the share of a dense padded
    [B, maxLq, maxLk] score area that is never needed (for causal the masked half counts as waste).
    imbalance = max(w)/mean(w); top1pct_work_share = share of Σw in the ceil(1% of B) sequences with
    the largest w; tile_eff_<t> = `tile_efficiency` at a t × t tile (t in STAT_TILES). Degenerate batches
    (B = 0, all-zero lengths) have nothing to waste or balance: the wastes are 0.0, imbalance is 1.0, the
    top-1% share is 0.0 and the tile efficiencies 1.0, never a division by zero.
    Floats are rounded to 6 decimals.
    """
    q, k = _pair(q_lengths, kv_lengths)
    B = int(q.shape[0])
    w = work_pairs(q, k, causal=causal)
    total_q, total_kv, total_w = int(q.sum()), int(k.sum()), int(w.sum())
    max_q = int(q.max(initial=0))
    max_kv = int(k.max(initial=0))

    def waste(used: int, area: int) -> float:
        return _r(1.0 - used / area) if area > 0 else 0.0

    if total_w > 0:
        top = max(1, math.ceil(0.01 * B))
        top_share = _r(np.sort(w)[::-1][:top].sum() / total_w)
        imbalance = _r(w.max() / w.mean())
    else:
        top_share, imbalance = 0.0, 1.0

    out = {"B": B, "total_q": total_q, "total_kv": total_kv}
    out.update(_dist(q, "q"))
    out.update(_dist(k, "kv"))
    out.update(
        {
            "padding_waste": waste(total_q, B * max_q),
            "padding_waste_kv": waste(total_kv, B * max_kv),
            "flop_waste": waste(total_w, B * max_q * max_kv),
            "imbalance": imbalance,
            "top1pct_work_share": top_share,
            "total_work_pairs": total_w,
            "lengths_sha256": lengths_sha256(q, k),
        }
    )
    out.update({f"tile_eff_{t}": _r(tile_efficiency(q, k, t, causal=causal)) for t in STAT_TILES})
    assert tuple(out) == STATS_KEYS
    return out
