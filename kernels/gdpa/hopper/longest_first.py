"""The order in which the persistent Hopper forward walks a batch's sequences: longest keys first.

The persistent forward (persistent.py) gives CTA c the tiles c, c + grid, c + 2·grid, … of FA4's varlen tile
order. In batch order that static stride hands each CTA whatever tiles land on it, and an unsorted jagged batch
leaves the busiest CTA 2.6% (hstu_sl 4096), 7% (spike 4096) or 17% (log-normal 4096) above the mean; walking
the sequences longest first, 0.4%, 1.6% and 2.7% (a model: docs/experiments/persistent_balance.py). The H100
run of 2026-12-06 timed `gdpa_hopper`'s sorted batches 3-6% faster than the same batches unsorted
(kernels/gdpa/PERF.md "Longest first"). The tiles of one sequence stay together, so the CTAs working at one time
still share its keys and values in L2 (a cost-balanced split of the tile list into one contiguous range per
CTA would not).

FA4's varlen decoder walks such an order when given a `virtual_batch_idx` and the tile-count hint counted in
that order; `persistent.LongestFirstScheduler` hands it both from the one tensor made here, in one launch (where
the batch-order hint took one too: scheduler.tile_counts) and nothing read back. No sort: each program ranks its
block of sequences against the whole batch (a sequence's place is the number of sequences ahead of it, its
tile-count prefix their tiles), B² comparisons over the GPU's SMs. On an H100 at 1152 sequences (kernels/gdpa/PERF.md
"Longest first"): a one-program bitonic sort (tl.sort of 64-bit keys) took 48-53 µs, against 3 µs for FA4's
batch-order hint, and took back most of what the order gained; ranking with 18 programs of 64 sequences, 9 chunks
of 128 keys each, 22-24 µs (each chunk waits on its loads). Here 72 programs of 16 walk 3 chunks of 512. Triton
compiles it on the GPU machine at its first call (the Hopper kernels' prebuild does not cover it). No flash-attn
import: the CPU tests run it under Triton's interpreter.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# B² comparisons: on an H100 the order took 6.7 µs at B 1152 and 266 µs at B 16384 (2026-12-06,
# docs/experiments/h100-2026-12-06f/longest_first_v3_gpu.log), ~9 µs extrapolated here; above it the persistent
# forward keeps FA4's batch order (plans.forward_config)
LONGEST_FIRST_MAX_BATCH = 2048


@triton.jit
def _lengths(offsets, used, b, valid, HAS_USED: tl.constexpr):
    if HAS_USED:
        return tl.load(used + b, mask=valid, other=0)
    return tl.load(offsets + b + 1, mask=valid, other=0) - tl.load(offsets + b, mask=valid, other=0)


@triton.jit
def _longest_first_kernel(
    q_offsets,
    kv_offsets,
    used_q,
    used_k,
    out,
    n,
    tile,
    multiplier,
    max_tiles,
    n_blocks,
    HAS_USED: tl.constexpr,
    BLOCK_I: tl.constexpr,
    BLOCK_J: tl.constexpr,
):
    i = tl.program_id(0) * BLOCK_I + tl.arange(0, BLOCK_I)
    valid_i = i < n
    len_i = _lengths(kv_offsets, used_k, i, valid_i, HAS_USED)
    ahead = tl.zeros([BLOCK_I], tl.int32)
    tiles_ahead = tl.zeros([BLOCK_I], tl.int32)
    for start in range(0, n, BLOCK_J):
        j = start + tl.arange(0, BLOCK_J)
        valid_j = j < n
        len_j = tl.where(valid_j, _lengths(kv_offsets, used_k, j, valid_j, HAS_USED), -1)  # -1: never ahead
        tiles_j = (_lengths(q_offsets, used_q, j, valid_j, HAS_USED) * multiplier + tile - 1) // tile
        # a tile's cost is its key blocks: longer keys first, and of equal keys the smaller index (a batch
        # already sorted longest first keeps its order)
        longer = len_j[None, :] > len_i[:, None]
        before = longer | ((len_j[None, :] == len_i[:, None]) & (j[None, :] < i[:, None]))
        ahead += tl.sum(before.to(tl.int32), 1)
        tiles_ahead += tl.sum(tl.where(before, tiles_j[None, :], 0), 1)
    tiles_i = (_lengths(q_offsets, used_q, i, valid_i, HAS_USED) * multiplier + tile - 1) // tile
    tl.store(out + 1 + ahead, tiles_ahead + tiles_i, mask=valid_i)
    tl.store(out + n + 1 + ahead, i, mask=valid_i)
    tl.store(out + i, 0, mask=i == 0)
    # the flat tile -> place index FA4's decoder reads in one load: each sequence writes its place over its tiles
    blocks = out + 2 * n + 1
    for t in range(0, max_tiles):
        tl.store(blocks + tiles_ahead + t, ahead, mask=valid_i & (t < tiles_i))
    # past the last tile, up to what a persistent CTA's stride reaches: n, an invalid place (the walk's end)
    last = valid_i & (ahead == n - 1)
    total = tl.sum(tl.where(last, tiles_ahead + tiles_i, 0))
    if tl.sum(last.to(tl.int32)) > 0:
        for start in range(0, n_blocks, BLOCK_J):
            f = start + tl.arange(0, BLOCK_J)
            tl.store(blocks + f, tl.zeros([BLOCK_J], tl.int32) + n, mask=(f >= total) & (f < n_blocks))


def blocks_bound(rows_q: int, batch: int, tile: int, multiplier: int, stride: int) -> int:
    """Entries of the flat tile index: FA4's bound on a launch's query tiles a head (`interface._blocks_to_batch_size`:
    every sequence's last tile partial) plus what one stride of a persistent grid of `stride` CTAs reaches past it."""
    return (rows_q * multiplier + batch * (tile - 1)) // tile + 1 + stride


def longest_first_order(
    q_offsets: torch.Tensor,
    kv_offsets: torch.Tensor,
    tile: int,
    multiplier: int = 1,
    used_q: torch.Tensor | None = None,
    used_k: torch.Tensor | None = None,
    *,
    rows_q: int,
    max_q: int,
    stride: int,
) -> torch.Tensor:
    """[cu (B+1) | order (B) | place (N)], int32 on the device: `order` lists the sequences longest keys first
    (FA4's `virtual_batch_idx`), `cu` their cumulative query-tile counts in that order (the tile-count hint, as
    `tile_counts` makes it in batch order), `place` each flat query tile's position in the order (FA4's
    `blocks_to_batch_idx`: its decoder then finds a tile's sequence in one load, not a binary search over `cu`),
    B past the last tile, N = `blocks_bound(rows_q, B, tile, multiplier, stride)`. With `used_q`, `used_k` (one
    band's lengths) from those; `rows_q` and `max_q` are the batch's rows and longest query (host numbers)."""
    n = q_offsets.shape[0] - 1
    if n > LONGEST_FIRST_MAX_BATCH:
        raise ValueError(f"longest_first_order: {n} sequences; it orders at most {LONGEST_FIRST_MAX_BATCH}")
    n_blocks = blocks_bound(rows_q, n, tile, multiplier, stride)
    out = torch.empty(2 * n + 1 + n_blocks, dtype=torch.int32, device=q_offsets.device)
    # many small programs and few key chunks each: a chunk's loads wait on global memory, so the chunks a
    # program walks in turn, not the comparisons, set its time
    _longest_first_kernel[(triton.cdiv(max(n, 1), 16),)](
        q_offsets,
        kv_offsets,
        used_q if used_q is not None else q_offsets,
        used_k if used_k is not None else kv_offsets,
        out,
        n,
        tile,
        multiplier,
        (max_q * multiplier + tile - 1) // tile,
        n_blocks,
        HAS_USED=used_q is not None,
        BLOCK_I=16,
        BLOCK_J=512,
    )
    return out
