"""The correctness gate (docs/DESIGN.md §9): before a case is timed, its output (and gradients in the
backward modes) must match the exact reference on a subset of sequences, within a relative Frobenius
tolerance and with no NaN/Inf. A case that fails is recorded `incorrect` and not timed.
"""

from __future__ import annotations

import numpy as np
import torch

from kernels.reference import reference_outputs
from kernels.registry import CaseSpec, Provider


def check_sequences(q_lengths: np.ndarray, kv_lengths: np.ndarray, k: int, seed: int) -> list[int]:
    """Which sequences the gate checks: the longest, the shortest, an empty one if any, then random."""
    B = len(q_lengths)
    if B <= k:
        return list(range(B))
    work = q_lengths * np.maximum(kv_lengths, 1)
    chosen = list(dict.fromkeys([int(np.argmax(work)), int(np.argmin(work))]))
    empty = np.flatnonzero((q_lengths == 0) | (kv_lengths == 0))
    if empty.size and int(empty[0]) not in chosen:
        chosen.append(int(empty[0]))
    rng = np.random.default_rng(seed + 7919)
    for b in rng.permutation(B):
        if len(chosen) >= k:
            break
        if int(b) not in chosen:
            chosen.append(int(b))
    return sorted(set(chosen))


def rows_of(offsets: np.ndarray, lengths: np.ndarray, seqs: list[int]) -> torch.Tensor:
    """The token rows of sequences `seqs` in a jagged tensor with these offsets."""
    idx = [np.arange(offsets[b], offsets[b] + lengths[b]) for b in seqs]
    return torch.from_numpy(np.concatenate(idx) if idx else np.zeros(0, dtype=np.int64))


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    """‖out − ref‖ / ‖ref‖ in fp64; inf when `out` has a NaN/Inf (or ref is zero and out is not)."""
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("inf")
    denom = ref.norm().item()
    diff = (out - ref).norm().item()
    if denom == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / denom


def correctness(
    provider: Provider, batch, spec: CaseSpec, mode: str, tolerance: float, max_seqs: int, seed: int
) -> dict:
    """Compare the provider with the exact reference on a subset of sequences (output, and grads in
    the backward modes); {"rel_err" (the worst tensor), "tolerance", "passed", "per_tensor",
    "checked_seqs"}."""
    seqs = check_sequences(batch.q_lengths, batch.kv_lengths, max_seqs, seed)
    q_idx = rows_of(batch.q_offsets_host, batch.q_lengths, seqs).to(batch.device)
    kv_idx = rows_of(batch.kv_offsets_host, batch.kv_lengths, seqs).to(batch.device)
    grads = mode != "fwd"
    ref_out, ref_grads = reference_outputs(batch, spec, provider.semantics, seqs, grads=grads)
    if grads:
        b = batch.with_grad()
        out = provider.forward(b, spec)
        got = torch.autograd.grad(out, (b.q, b.k, b.v), batch.dout)
        pairs = {
            "out": (out.detach()[q_idx], ref_out),
            "dq": (got[0][q_idx], ref_grads[0]),
            "dk": (got[1][kv_idx], ref_grads[1]),
            "dv": (got[2][kv_idx], ref_grads[2]),
        }
        del out, got, b
    else:
        with torch.no_grad():
            out = provider.forward(batch, spec)
        pairs = {"out": (out[q_idx], ref_out)}
        del out
    per = {k: rel_err(o, r) for k, (o, r) in pairs.items()}
    worst = max(per.values())
    return {
        "rel_err": worst,
        "tolerance": tolerance,
        "passed": bool(worst <= tolerance),
        "per_tensor": per,
        "checked_seqs": len(seqs),
    }
