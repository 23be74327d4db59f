"""The packed GDPA kernels as a row of the backend table (backends.py): several short sequences per tile.

Issue 30. A sequence whose queries and keys both fit PACK_ROWS rows is computed in a *pack*, a tile shared
with its neighbours under a block-diagonal mask (packed_plan.py builds the packs on the device; packed_fwd.py
and packed_bwd.py compute them). Over a band that reaches longer sequences (self-attention: min(Lq, Lk) =
the length), this backend runs the part above PACK_ROWS on the Triton kernels (fwd.py, bwd.py) with the
caller's Triton tiles — so `packed` alone, or a plan's `[packed, 0, None]`, runs any batch it supports:
packs for the short sequences, Triton for the rest. Every output row is written once.

Limits (`unsupported`): cross-attention (queries and keys with their own offsets) only where every
sequence fits a pack, i.e. max_seq_len_q and max_seq_len_kv <= PACK_ROWS. Everything else the op accepts
runs: every activation, alpha (any sign) and qk_scale, causal, GQA, head dims 16–128, fp16/bf16/fp32,
zero-length sequences.

One difference from the Triton kernels' masked loads: a pack's sequences share its GEMMs, so a NaN or inf
in one sequence's inputs (V forward; Q, K, dO backward) reaches the other sequences of its pack through the
mask's zeros (0 · NaN). Finite values never do: the zeros are exact.
"""

from __future__ import annotations

from kernels.gdpa import bwd, fwd, launch, packed_bwd, packed_fwd, packed_plan
from kernels.gdpa.bands import Band
from kernels.gdpa.call import GDPACall
from kernels.gdpa.triton_backend import unavailable

__all__ = ["PACK_ROWS", "backward", "forward", "split", "unavailable", "unsupported"]

PACK_ROWS = 128  # rows of a pack on each side: the M side of the backward's GEMMs, a wgmma-sized 128


def unsupported(call: GDPACall) -> str | None:
    if not call.self_attention and max(call.max_q, call.max_kv) > PACK_ROWS:
        return (
            f"cross-attention is packed only where every sequence fits a pack: max_seq_len_q and max_seq_len_kv "
            f"<= {PACK_ROWS} (got {call.max_q}, {call.max_kv})"
        )
    return None


def split(call: GDPACall, band: Band) -> tuple[Band | None, Band | None]:
    """(the part of `band` computed in packs, the part left to the Triton kernels); None where a part is
    empty or no sequence can reach it."""
    if not call.self_attention:
        return band, None  # unsupported() guarantees every sequence fits
    edge = PACK_ROWS + 1  # self-attention: a sequence of PACK_ROWS tokens fills a pack alone
    packed = Band(band.lo, min(band.hi_arg, edge)) if band.lo < edge else None
    rest = Band(max(band.lo, edge), band.hi) if band.hi_arg > edge else None
    reach = lambda b: b if b is not None and b.reachable(call.max_q, call.max_kv) else None
    return reach(packed), reach(rest)


def forward(call: GDPACall, band: Band, options, out=None, record=None):
    out = launch.new_output(call.q) if out is None else out
    if call.batch == 0 or call.rows_q == 0:
        return out
    packed, rest = split(call, band)
    if packed is not None and call.rows_kv == 0:
        packed, rest = None, band  # every row is zero: Triton's kernel writes them (no pointer to empty keys)
    if packed is not None:
        plan = packed_plan.build(call.q_offsets, call.kv_offsets, packed, PACK_ROWS)
        packed_fwd.forward(call, plan, out, record, launch.record_name("packed_fwd", packed))
    if rest is not None:
        fwd.forward(call, rest, tiles=options.fwd_tiles, out=out, record=record)
    return out


def backward(call: GDPACall, do, band: Band, options, out=None, record=None):
    do = do.contiguous()
    out = tuple(launch.new_output(t) for t in (call.q, call.k, call.v)) if out is None else out
    if call.batch == 0:
        return out
    packed, rest = split(call, band)
    if packed is not None and (call.rows_q == 0 or call.rows_kv == 0):
        packed, rest = None, band  # every gradient row is zero: Triton's kernels write them
    if packed is not None:
        plan = packed_plan.build(call.q_offsets, call.kv_offsets, packed, PACK_ROWS)
        packed_bwd.backward(call, do, plan, out, record, launch.record_name("packed_bwd", packed))
    if rest is not None:
        bwd.backward(call, do, rest, options.dkdv_tiles, options.dq_tiles, out=out, record=record)
    return out
