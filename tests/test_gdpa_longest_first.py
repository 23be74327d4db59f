"""The persistent Hopper forward's sequence order (kernels/gdpa/hopper/longest_first.py): the device kernel under
Triton's interpreter (no GPU, no flash-attn), and the plan and the kernel's compile where flash-attn-4 is there.
The order's effect on the forward's output is checked on the GPU (tests/test_gdpa_hopper.py: the persistent
forward bit for bit against FA4's one-tile grid, which walks the batch in its order)."""

from __future__ import annotations

import importlib.util
import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from kernels.gdpa.hopper.longest_first import LONGEST_FIRST_MAX_BATCH, blocks_bound, longest_first_order

ROOT = Path(__file__).resolve().parents[1]


def _offsets(lengths) -> torch.Tensor:
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)


def _expected(len_q, len_k, tile, multiplier):
    len_q, len_k = np.asarray(len_q), np.asarray(len_k)
    order = np.lexsort((np.arange(len(len_k)), -len_k))  # longest keys first, ties in batch order
    blocks = -(-len_q[order] * multiplier // tile)
    return np.concatenate([[0], np.cumsum(blocks)]), order


STRIDE = 132  # the persistent grid's CTAs: how far past the last tile a CTA's walk reads the place index


def _order(q_offsets, kv_offsets, tile, multiplier=1, used_q=None, used_k=None, lengths_q=None):
    """longest_first_order with the host numbers the launcher passes (the batch's rows and longest query)."""
    lq = np.diff(q_offsets.numpy()) if lengths_q is None else lengths_q
    return longest_first_order(
        q_offsets,
        kv_offsets,
        tile,
        multiplier,
        used_q,
        used_k,
        rows_q=int(q_offsets[-1]),
        max_q=int(lq.max(initial=0)),
        stride=STRIDE,
    ).numpy()


def _check_places(got, n, counts, rows_q, tile, multiplier):
    """The place index after [cu | order]: flat query tile f holds the position v with cu[v] <= f < cu[v + 1],
    and n (invalid) from the last tile up to FA4's bound plus a persistent stride."""
    places = got[2 * n + 1 :]
    assert places.shape == (blocks_bound(rows_q, n, tile, multiplier, STRIDE),)
    total = int(counts[-1])
    expected = np.repeat(np.arange(n), np.diff(counts))
    np.testing.assert_array_equal(places[:total], expected)
    assert (places[total:] == n).all()


@pytest.mark.parametrize("n", [1, 37, 300])
@pytest.mark.parametrize("tile,multiplier", [(128, 1), (128, 4), (192, 1)])
@pytest.mark.parametrize("cross", [False, True])
def test_the_order_is_longest_keys_first_and_the_counts_follow_it(n, tile, multiplier, cross):
    rng = np.random.default_rng(n + tile + multiplier)
    len_q = rng.integers(0, 600, n)
    len_q[rng.random(n) < 0.1] = 0  # empty sequences sort last and count no tile
    len_k = rng.integers(0, 600, n) if cross else len_q
    got = _order(_offsets(len_q), _offsets(len_k), tile, multiplier)
    counts, order = _expected(len_q, len_k, tile, multiplier)
    np.testing.assert_array_equal(got[n + 1 : 2 * n + 1], order)
    np.testing.assert_array_equal(got[: n + 1], counts)
    _check_places(got, n, counts, int(len_q.sum()), tile, multiplier)


def test_one_bands_lengths_order_its_sequences_and_leave_the_rest_last():
    """With FA4's seqused vectors (a banded launch), the sequences outside the band have length 0 there: they
    count no tile and come after the band's, in batch order."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 3000, 200)
    used = np.where(lengths >= 1024, lengths, 0)
    offsets = _offsets(lengths)
    used_t = torch.tensor(used, dtype=torch.int32)
    got = _order(offsets, offsets, 128, 1, used_t, used_t)
    counts, order = _expected(used, used, 128, 1)
    np.testing.assert_array_equal(got[201:401], order)
    np.testing.assert_array_equal(got[:201], counts)
    inside = int((used > 0).sum())
    assert set(got[201 : 201 + inside]) == set(np.flatnonzero(used)) and got[200] == got[inside]
    _check_places(got, 200, counts, int(lengths.sum()), 128, 1)  # the bound is the whole batch's


def test_a_batch_sorted_longest_first_keeps_its_order():
    lengths = np.array([900, 700, 700, 300, 128, 127, 5, 0, 0])
    offsets = _offsets(lengths)
    got = _order(offsets, offsets, 128)
    np.testing.assert_array_equal(got[len(lengths) + 1 : 2 * len(lengths) + 1], np.arange(len(lengths)))


def test_a_batch_of_several_key_chunks_is_ordered_the_same():
    """Each program walks the batch's keys in chunks of 512: ties across chunks keep batch order."""
    rng = np.random.default_rng(11)
    len_q = rng.integers(0, 40, 1500)  # few distinct lengths: many ties, most across chunks
    got = _order(_offsets(len_q), _offsets(len_q), 16)
    counts, order = _expected(len_q, len_q, 16, 1)
    np.testing.assert_array_equal(got[1501:3001], order)
    np.testing.assert_array_equal(got[:1501], counts)
    _check_places(got, 1500, counts, int(len_q.sum()), 16, 1)


def test_the_order_is_made_for_at_most_the_limit():
    offsets = torch.zeros(LONGEST_FIRST_MAX_BATCH + 2, dtype=torch.int32)
    with pytest.raises(ValueError, match="at most"):
        _order(offsets, offsets, 128)


def _fa4_decode(tile_idx, heads, counts, order, len_q, tile, multiplier):
    """FA4's varlen decode in its hint mode (flash_attn/cute/tile_scheduler.py `VarlenDecoder.decode` with
    `cu_total_m_blocks_ptr` and `virtual_batch_idx_ptr`, `_num_m_blocks`, `_decode_work_tile`), in numpy: a
    binary search of the counts for the virtual position, the warp's groups of 31 positions whose query-tile
    counts it reads through the order, the ballot inside the group, then the real sequence. None past the last
    tile."""
    n = len(order)

    def blocks(v):
        return -(-int(len_q[order[v]]) * multiplier // tile) if v < n else 0

    lo, hi = 0, n
    while lo < hi:  # utils.get_batch_from_cu_tensor
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if counts[mid + 1] <= tile_idx // heads else (lo, mid)
    group = lo // 31 * 31
    start = int(counts[group]) * heads
    while True:
        if group >= n:
            return None
        per = np.array([blocks(v) for v in range(group, group + 31)])
        cumulative = np.cumsum(per)
        if start + cumulative[-1] * heads > tile_idx:
            break
        start += cumulative[-1] * heads
        group += 31
    lane = int(((start + cumulative * heads) <= tile_idx).sum())
    start += (cumulative[lane - 1] if lane else 0) * heads
    within = tile_idx - start
    return int(order[group + lane]), within % per[lane], within // per[lane]  # sequence, query tile, head


@pytest.mark.parametrize("trial", range(12))
def test_fa4s_decoder_walks_every_tile_once_in_that_order(trial):
    """The counts and the order, read as FA4's decoder reads them, give every (sequence, query tile, head) of the
    launch exactly once, and the sequences come longest keys first: whole and banded, cross-attention, the GQA
    multiplier, both forward tiles, over 31-sequence group boundaries."""
    rng = np.random.default_rng(trial)
    n, heads = int(rng.integers(1, 140)), int(rng.integers(1, 5))
    tile, multiplier = (128, 192)[trial % 2], (1, 2, 4)[trial % 3]
    len_q, len_k = rng.integers(0, 900, n), rng.integers(0, 900, n)
    len_q[rng.random(n) < 0.2] = 0
    used = None
    if trial % 4 == 3:  # one band: FA4's seqused vectors, 0 outside it
        inside = np.minimum(len_q, len_k) >= 300
        used = (np.where(inside, len_q, 0), np.where(inside, len_k, 0))
    got = _order(
        _offsets(len_q),
        _offsets(len_k),
        tile,
        multiplier,
        *(torch.tensor(u, dtype=torch.int32) for u in used or ()),
        lengths_q=len_q,
    )
    counts, order, places = got[: n + 1], got[n + 1 : 2 * n + 1], got[2 * n + 1 :]
    lq, lk = used if used is not None else (len_q, len_k)
    walked, t = [], 0
    while (work := _fa4_decode(t, heads, counts, order, lq, tile, multiplier)) is not None:
        walked.append(work)
        t += 1
    expected = {(b, m, h) for b in range(n) for h in range(heads) for m in range(-(-int(lq[b]) * multiplier // tile))}
    assert len(walked) == len(set(walked)) and set(walked) == expected
    first_seen = list(dict.fromkeys(b for b, _, _ in walked))
    assert all(lk[a] >= lk[b] for a, b in itertools.pairwise(first_seen)), "not longest keys first"
    # the place index decodes every tile as the search does, and each persistent CTA's walk (tiles c, c + STRIDE,
    # ... up to its first invalid one) reads inside it
    assert [_fa4_place_decode(t, heads, counts, order, places) for t in range(len(walked) + 1)] == [*walked, None]
    for c in range(STRIDE):
        t = c
        while _fa4_place_decode(t, heads, counts, order, places) is not None:
            t += STRIDE


def _fa4_place_decode(tile_idx, heads, counts, order, places):
    """FA4's decode with `blocks_to_batch_idx_ptr` (tile_scheduler.py `VarlenDecoder.decode`, its
    `use_blocks_to_batch` branch, then `_decode_work_tile`): one load of the tile's place, its tile range from the
    counts, the real sequence through the order. None where the place is invalid; an index past the place
    vector fails (the kernel would read out of bounds)."""
    n = len(order)
    assert tile_idx // heads < len(places), "read past the place index"
    v = int(places[tile_idx // heads])
    if v >= n:
        return None
    per = int(counts[v + 1] - counts[v])
    within = tile_idx - int(counts[v]) * heads
    return int(order[v]), within % per, within // per  # sequence, query tile, head


_needs_fa4 = pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="needs flash-attn-4")


@_needs_fa4
def test_only_the_persistent_grid_walks_longest_first():
    from kernels.gdpa.hopper.plans import forward_config

    assert forward_config(128, 1, 1152, persistent_ctas=132).longest_first
    assert forward_config(64, 2, 10, banded=True, persistent_ctas=132).longest_first
    assert not forward_config(128, 1, 1152, persistent_ctas=0).longest_first  # FA4's grid: its own order
    assert not forward_config(128, 1, LONGEST_FIRST_MAX_BATCH + 1, persistent_ctas=132).longest_first


_COMPILE = """
import dataclasses, os, pathlib
import cutlass
from kernels.gdpa.hopper import launch
dump = pathlib.Path(os.environ["CUTE_DSL_DUMP_DIR"])
def compile_(name, head_dim, groups, causal, banded, longest_first=True):
    config = launch.forward_config(head_dim, groups, 1152, banded, 132)
    assert config.longest_first
    config = dataclasses.replace(config, longest_first=longest_first)
    launch._compile_forward(cutlass.BFloat16, head_dim, groups, "fast_gelu", causal, config)
    (ptx,) = dump.glob("cutlass*.ptx")  # named by the signature: the next compile would write over it
    print(name, ptx.rename(dump / f"{name}.ptx"))
compile_("BATCH_ORDER", 128, 1, False, False, longest_first=False)
compile_("LONGEST_FIRST", 128, 1, False, False)
compile_("BANDED", 128, 1, False, True)
compile_("CAUSAL_GQA", 128, 2, True, False)
compile_("D64", 64, 1, False, True)
"""


def _params(ptx: str) -> int:
    start = ptx.index(".entry")
    return ptx[start : ptx.index(")", start)].count(".param")


@_needs_fa4
def test_the_longest_first_forward_cross_compiles(tmp_path):
    """Cross-compiled for sm_90a (no GPU): the persistent forward with its hint operand split into the tile counts,
    FA4's virtual batch order and the place index (persistent.LongestFirstScheduler) builds whole and banded, causal
    with GQA packing, and at head dim 64; the kernel takes the order and the index as two operands more than the
    batch-order one, and its tile decode reads a tile's place in one load where the batch order searches."""
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _COMPILE], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    found = {name: Path(path).read_text() for name, path in (line.split(" ", 1) for line in run.stdout.splitlines())}
    assert set(found) == {"BATCH_ORDER", "LONGEST_FIRST", "BANDED", "CAUSAL_GQA", "D64"}
    assert _params(found["LONGEST_FIRST"]) == _params(found["BATCH_ORDER"]) + 2  # the order and the place index
    # no warp scan and no binary search: a tile's sequence is one load (main at e680132: 88 shuffles, 60 global
    # loads, 3,642 PTX lines; with the place index 4, 24 and 2,660)
    assert found["LONGEST_FIRST"].count("shfl.sync") * 10 < found["BATCH_ORDER"].count("shfl.sync")
    assert found["LONGEST_FIRST"].count("ld.global") < found["BATCH_ORDER"].count("ld.global")


_COMPILE_BWD = """
import os, pathlib
import torch
from kernels.gdpa.hopper import launch
dump = pathlib.Path(os.environ["CUTE_DSL_DUMP_DIR"])
def compile_(name, batch, groups, causal, banded):
    key = launch.backward_kernel(torch.bfloat16, 128, groups, "fast_gelu", causal, batch, 2048, 2048, banded, 132)[2]
    (ptx,) = dump.glob("cutlass*Persistent*.ptx")  # named by the signature: the next compile would write over it
    print(name, ("longest first",) in key, ptx.rename(dump / f"{name}.ptx"))
compile_("BATCH_ORDER", 4096, 1, False, False)
compile_("LONGEST_FIRST", 1152, 1, False, False)
compile_("BANDED_GQA", 1152, 2, False, True)
compile_("CAUSAL", 1152, 1, True, False)
launch.backward_kernel(torch.bfloat16, 128, 1, "fast_gelu", False, 1152, 2048, 2048, False, 0)  # FA4's grid
(grid,) = [p for p in dump.glob("cutlass*.ptx") if p.name.endswith(".sm_90a.ptx")]
print("GRID", "-", grid.rename(dump / "GRID.ptx"))
"""


@_needs_fa4
def test_the_persistent_backward_walks_longest_first_and_reads_places(tmp_path):
    """Cross-compiled for sm_90a (no GPU): the persistent backward up to LONGEST_FIRST_MAX_BATCH sequences takes the
    forward's longest-first scheduler (persistent_bwd.persistent_backward_scheduler; its operand made with the roles
    of queries and keys swapped, as FA4's backward swaps them): it builds whole, banded with GQA and causal, takes
    the order and the place index as two operands more, and its three roles' tile decodes lose their warp scans
    (at 87fd521, batch order: 148 shuffles and 5,217 PTX lines; longest first: 4 and 3,739). Past the limit the
    batch order stays. Every role waits for the launch before it (programmatic dependent launch) before its first
    decode."""
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _COMPILE_BWD], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [line.split(" ") for line in run.stdout.splitlines()]
    assert {name: flag for name, flag, _ in rows} == {
        "BATCH_ORDER": "False",
        "LONGEST_FIRST": "True",
        "BANDED_GQA": "True",
        "CAUSAL": "True",
        "GRID": "-",
    }
    found = {name: Path(path).read_text() for name, _, path in rows}
    assert _params(found["LONGEST_FIRST"]) == _params(found["BATCH_ORDER"]) + 2
    assert found["LONGEST_FIRST"].count("shfl.sync") * 10 < found["BATCH_ORDER"].count("shfl.sync")
    # FA4 launches its backward with programmatic dependent launch; its load and dQ warps wait for the launch
    # before (2 waits), its MMA warps do not. Every role of the persistent walk and of FA4's grid as we launch it
    # waits before its first decode too (3 more), since the operand they decode from (the order and the places,
    # or the tile counts) is that launch's
    for name in ("BATCH_ORDER", "LONGEST_FIRST", "GRID"):
        assert found[name].count("griddepcontrol.wait") == 2 + 3, name
