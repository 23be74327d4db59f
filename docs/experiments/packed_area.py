"""Issue 30, predicted on a CPU: score area and program counts of the ways to run the short band.

For the production log-normal batches (configs/production.yaml, built by workloads.pairing.build_lengths as
the config builds them; B 1152, H 4, D 128) and the band of sequences shorter than 128 tokens, this counts
what each design computes: the useful score area (Σ L², causal Σ L(L+1)/2), the area a design's tiles cover,
the programs that do work and those launched, and the bytes it must move. Nothing is timed; the lead times
on the H200 (docs/experiments/packed_gpu.py). Output: a Markdown table (kernels/gdpa/PERF.md, "Packed short
sequences (issue 30)").

    PYTHONPATH=. python docs/experiments/packed_area.py [--sorted] [--causal]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from workloads.pairing import build_lengths  # noqa: E402

B, H, D, HI = 1152, 4, 128, 128
PACK, MAXSEQ = 128, 16  # kernels/gdpa/packed_plan.py


def cdiv(a, b):
    return -(-a // b)


def next_fit(lengths, cap=PACK, maxseq=MAXSEQ, chunk=None, contiguous=True):
    """Packs (lists of lengths) of greedy next-fit over the band's sequences in batch order. `contiguous`
    (the shipped plan, kernels/gdpa/packed_plan.py): a pack is a run of consecutive batch sequences, so a
    sequence outside the band closes it (its rows are then one block of the batch, loaded without a row
    map); with `chunk`, packs never span a chunk of `chunk` consecutive batch sequences (the device plan's
    parallel form)."""
    packs, cur, fill = [], [], 0
    for i, (L, inside) in enumerate(lengths):
        if cur and ((chunk and i % chunk == 0) or (contiguous and not inside)):
            packs.append(cur)
            cur, fill = [], 0
        if not inside:
            continue
        if cur and (fill + L > cap or len(cur) == maxseq):
            packs.append(cur)
            cur, fill = [], 0
        cur.append(L)
        fill += L
    return packs + ([cur] if cur else [])


def first_fit_decreasing(band, cap=PACK, maxseq=MAXSEQ):
    bins: list[list[int]] = []
    for L in sorted(band, reverse=True):
        for b in bins:
            if sum(b) + L <= cap and len(b) < maxseq:
                b.append(L)
                break
        else:
            bins.append([L])
    return bins


def tile_area(L, bm, bn, causal):
    """Score area today's one-sequence-per-tile kernels cover for one sequence (fwd.py: key tiles up to the
    sequence end, causal up to the query tile's last row)."""
    area = 0
    for m0 in range(0, L, bm):
        hi = min(L, m0 + bm) if causal else L
        area += bm * cdiv(hi, bn) * bn
    return area


def pack_fwd_area(pack, bm, bn, causal):
    """Packed forward: query sub-tiles of bm rows; each runs the bn-blocks of the pack that hold keys of its
    sequences (causal: up to its last row)."""
    starts = np.cumsum([0, *pack])
    n = starts[-1]
    area = 0
    for m0 in range(0, n, bm):
        m1 = min(n, m0 + bm)
        first = np.searchsorted(starts, m0, side="right") - 1
        last = np.searchsorted(starts, m1 - 1, side="right") - 1
        lo, hi = starts[first], starts[last + 1]
        if causal:
            hi = min(hi, m1)
        area += bm * (cdiv(hi, bn) - lo // bn) * bn
    return area


def useful(L, causal):
    return L * (L + 1) // 2 if causal else L * L


def analyse(name, lengths, causal):
    band = [int(x) for x in lengths if x < HI]
    inside = [(int(x), x < HI) for x in lengths]
    use = sum(useful(L, causal) for L in band) * H
    rows = sum(band)
    print(f"\n### {name}: {len(band)} of {len(lengths)} sequences, {rows} rows; useful area {use / 1e6:.2f} M scores")
    print(
        f"bytes: fwd (q, k, v read, out written) {rows * H * D * 2 * 4 / 1e6:.0f} MB, "
        f"bwd (q, k, v, do read; dq, dk, dv written) {rows * H * D * 2 * 7 / 1e6:.0f} MB (bf16)\n"
    )
    print(
        "| design | packs | fill | fwd area (useful %) | fwd programs working / launched | "
        "bwd GEMM area (useful %) | bwd programs working / launched |"
    )
    print("|---|---|---|---|---|---|---|")
    for bm, bn in ((64, 32), (128, 64), (128, 32), (64, 64)):
        area = sum(tile_area(L, bm, bn, causal) for L in band) * H
        work = sum(cdiv(L, bm) for L in band) * H
        launched = cdiv(HI - 1, bm) * len(lengths) * H
        print(
            f"| today {bm}×{bn} fwd, one sequence per tile | | | {area / 1e6:.1f} M ({100 * use / area:.0f}%) "
            f"| {work} / {launched} | | |"
        )
    # today's split backward at its shipped tiles: dK/dV 64×128 (4 GEMMs: S, dV, dP, dK), dQ 128×64 (S, dP, dQ)
    dkdv = sum(cdiv(L, 128) * 128 * cdiv(L, 64) * 64 for L in band) * H
    dq = sum(cdiv(L, 128) * 128 * cdiv(L, 64) * 64 for L in band) * H
    gemm = 4 * dkdv + 3 * dq
    work = 2 * len(band) * H
    launched = (cdiv(HI - 1, 128) + cdiv(HI - 1, 128)) * len(lengths) * H
    print(
        f"| today's backward: dK/dV 64×128 + dQ 128×64, one sequence per tile | | | | | "
        f"{gemm / 1e6:.0f} M ({100 * 5 * use / gemm:.0f}%) | {work} / {launched} |"
    )
    shipped = "runs of consecutive sequences, chunks of 64 (shipped)"
    plans = {
        shipped: next_fit(inside, chunk=64),
        "runs of consecutive sequences, exact (sequential)": next_fit(inside),
        "any in-band sequences (a row map per pack), chunks of 64": next_fit(inside, chunk=64, contiguous=False),
        "any in-band sequences, no cap on sequences per pack": next_fit(inside, maxseq=10**9, contiguous=False),
        "first-fit decreasing (a sort, a row map)": first_fit_decreasing(band),
    }
    for label, packs in plans.items():
        fill = rows / (len(packs) * PACK)
        for bm, bn in ((128, 64), (64, 64), (64, 32)):
            area = sum(pack_fwd_area(p, bm, bn, causal) for p in packs) * H
            work = sum(cdiv(sum(p), bm) for p in packs) * H
            # backward: one program per (pack, head) owns its 128 keys, query sub-blocks of 32 rows, 5 GEMMs
            bwd = 5 * sum(PACK * cdiv(sum(p), 32) * 32 for p in packs) * H
            bwd_cell = f"{bwd / 1e6:.0f} M ({100 * 5 * use / bwd:.0f}%)" if (bm, bn) == (128, 64) else ""
            bwd_progs = f"{len(packs) * H} / persistent" if (bm, bn) == (128, 64) else ""
            print(
                f"| packed {bm}×{bn}, {label} | {len(packs)} | {100 * fill:.0f}% | {area / 1e6:.1f} M "
                f"({100 * use / area:.0f}%) | {work} / persistent | {bwd_cell} | {bwd_progs} |"
            )
            if label != shipped:
                break
    # plan-free: fixed 128-row windows of the batch's rows, block-diagonal by per-row sequence id; a window's
    # keys are those of every in-band sequence it touches (a sequence cut by a window edge is loaded twice)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    for w, bn in ((128, 64), (64, 32)):
        area, work = 0, 0
        for m0 in range(0, int(ends[-1]), w):
            m1 = m0 + w
            hit = [
                i
                for i in range(np.searchsorted(ends, m0, side="right"), len(lengths))
                if starts[i] < m1 and lengths[i] < HI and lengths[i] > 0
            ]
            if not hit:
                continue
            lo, hi = starts[hit[0]], ends[hit[-1]]
            if causal:
                hi = min(hi, m1)
            work += 1
            area += w * (cdiv(hi, bn) - lo // bn) * bn
        launched = cdiv(int(ends[-1]), w)
        print(
            f"| plan-free {w}-row windows, keys by {bn} | | | {area * H / 1e6:.1f} M ({100 * use / (area * H):.0f}%) "
            f"| {work * H} / {launched * H} | needs atomics (sequences cut by windows) | |"
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sorted", action="store_true", help="the sort_by_length variant of the sets")
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    for max_len in (2048,):
        q, _ = build_lengths(
            "lognormal", {"preset": "ml-20m"}, "self", {}, batch_size=B, max_len=max_len, seed=0, sort=args.sorted
        )
        analyse(
            f"log-normal max {max_len}{' sorted' if args.sorted else ''}{' causal' if args.causal else ''}",
            q.astype(np.int64),
            args.causal,
        )
    print("\n(the band < 128 holds the same 846 sequences at max 4096: the family truncates only the tail)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
