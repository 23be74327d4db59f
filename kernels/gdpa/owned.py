"""The owned backward (owned_bwd.py) as a row of the backend table (backends.py): one program per (sequence,
KV head) computes all of a short sequence's gradients, with no dQ accumulator pass.

Issue 30. Over a band that reaches longer sequences (self-attention: min(Lq, Lk) = the length), the part above
OWNED_ROWS runs on the Triton split kernels (bwd.py) with the caller's Triton tiles — a program per sequence
would leave most SMs idle behind a few long ones. Cross-attention runs owned whatever its lengths (a short
query side bounds the scratch traffic; `auto` times it like any candidate). The forward is Triton's (fwd.py):
this row names the backward only, so `auto` times it as a backward candidate and never as a forward one.

Everything the op accepts runs: every activation, alpha (any sign) and qk_scale, causal, GQA, head dims
16–128, fp16/bf16/fp32, zero-length sequences on either side.
"""

from __future__ import annotations

from kernels.gdpa import bwd, fwd, launch, owned_bwd
from kernels.gdpa.bands import Band
from kernels.gdpa.call import GDPACall
from kernels.gdpa.triton_backend import unavailable

__all__ = ["OWNED_ROWS", "backward", "forward", "split", "unavailable", "unsupported"]

OWNED_ROWS = 512  # the longest self-attention sequence one program owns; longer ones go to the split kernels


def unsupported(call: GDPACall) -> str | None:
    return None  # the op's argument checks (interface.check_arguments) are this backend's limits


def split(call: GDPACall, band: Band) -> tuple[Band | None, Band | None]:
    """(the part of `band` one program per sequence computes, the part left to the split kernels); None where a
    part is empty or no sequence can reach it."""
    if not call.self_attention:
        return band, None
    edge = OWNED_ROWS + 1
    owned = Band(band.lo, min(band.hi_arg, edge)) if band.lo < edge else None
    rest = Band(max(band.lo, edge), band.hi) if band.hi_arg > edge else None
    reach = lambda b: b if b is not None and b.reachable(call.max_q, call.max_kv) else None
    return reach(owned), reach(rest)


def forward(call: GDPACall, band: Band, options, out=None, record=None):
    return fwd.forward(call, band, tiles=options.fwd_tiles, out=out, record=record)


def backward(call: GDPACall, do, band: Band, options, out=None, record=None):
    do = do.contiguous()
    out = tuple(launch.new_output(t) for t in (call.q, call.k, call.v)) if out is None else out
    if call.batch == 0:
        return out
    owned, rest = split(call, band)
    if owned is not None and (call.rows_q == 0 or call.rows_kv == 0):
        owned, rest = None, band  # every gradient row is zero: the split kernels write them
    if owned is not None:
        owned_bwd.backward(call, do, owned, out, record=record)
    if rest is not None:
        bwd.backward(call, do, rest, options.dkdv_tiles, options.dq_tiles, out=out, record=record)
    return out
