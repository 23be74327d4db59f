"""Exact references, one sequence at a time in fp32 (or fp64): the ground truth of the correctness gate.

`gdpa_reference` follows docs/DESIGN.md §3 to the letter: S = alpha·QKᵀ, P = act(S)·qk_scale, O = P V, keys
j ≥ Lk do not exist, causal keeps j ≤ i (top-left aligned, HSTU). `softmax_reference` is the usual
softmax attention, causal bottom-right aligned as FlashAttention does it (identical when Lq == Lk).
Both are differentiable, so gradients come from autograd on the same code.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kernels.activations import get_activation
from kernels.registry import CaseSpec, Provider, register
from workloads.batch import JaggedBatch


def _expand_kv(t: torch.Tensor, groups: int) -> torch.Tensor:
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def _causal_mask(lq: int, lk: int, device, bottom_right: bool) -> torch.Tensor:
    i = torch.arange(lq, device=device)[:, None]
    j = torch.arange(lk, device=device)[None, :]
    shift = (lk - lq) if bottom_right else 0
    return j <= i + shift


def gdpa_sequence(q, k, v, spec: CaseSpec) -> torch.Tensor:
    """One sequence: q [Lq, H, D], k/v [Lk, Hkv, D] -> [Lq, H, D], computed in q's dtype."""
    groups = q.shape[1] // k.shape[1]
    k, v = _expand_kv(k, groups), _expand_kv(v, groups)
    s = spec.alpha * torch.einsum("qhd,khd->hqk", q, k)
    p = get_activation(spec.activation)(s) * spec.qk_scale
    if spec.causal:
        p = p * _causal_mask(q.shape[0], k.shape[0], q.device, bottom_right=False)
    return torch.einsum("hqk,khd->qhd", p, v)


def softmax_sequence(q, k, v, spec: CaseSpec) -> torch.Tensor:
    groups = q.shape[1] // k.shape[1]
    k, v = _expand_kv(k, groups), _expand_kv(v, groups)
    s = spec.resolved_softmax_scale(q.shape[-1]) * torch.einsum("qhd,khd->hqk", q, k)
    if spec.causal:
        s = s.masked_fill(~_causal_mask(q.shape[0], k.shape[0], q.device, bottom_right=True), float("-inf"))
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p)  # a fully masked row (or Lk == 0) attends to nothing: output 0
    return torch.einsum("hqk,khd->qhd", p, v)


SEQUENCE_FNS = {"gdpa": gdpa_sequence, "softmax": softmax_sequence}


def reference_outputs(
    batch: JaggedBatch,
    spec: CaseSpec,
    semantics: str = "gdpa",
    seqs: Sequence[int] | None = None,
    dtype: torch.dtype = torch.float32,
    grads: bool = False,
):
    """Reference output rows of the chosen sequences (concatenated in order), and optionally grads.

    Returns (out, None) or (out, (dq, dk, dv)) where each tensor holds only the rows of `seqs` (q rows
    for out/dq, kv rows for dk/dv), in the order given. Upcasts to `dtype` before any arithmetic.
    """
    fn = SEQUENCE_FNS[semantics]
    seqs = range(batch.B) if seqs is None else seqs
    outs, dqs, dks, dvs = [], [], [], []
    for b in seqs:
        qs, ks = batch.q_rows(b), batch.kv_rows(b)
        q = batch.q[qs].detach().to(dtype).requires_grad_(grads)
        k = batch.k[ks].detach().to(dtype).requires_grad_(grads)
        v = batch.v[ks].detach().to(dtype).requires_grad_(grads)
        with torch.set_grad_enabled(grads):
            o = fn(q, k, v, spec)
        if grads:
            do = batch.dout[qs].to(dtype)
            if o.numel():
                dq, dk, dv = torch.autograd.grad(o, (q, k, v), do, allow_unused=True)
            else:
                dq = dk = dv = None
            dqs.append(torch.zeros_like(q) if dq is None else dq)
            dks.append(torch.zeros_like(k) if dk is None else dk)
            dvs.append(torch.zeros_like(v) if dv is None else dv)
        outs.append(o.detach())
    out = torch.cat(outs) if outs else batch.q.new_zeros((0, *batch.q.shape[1:]), dtype=dtype)
    if not grads:
        return out, None
    return out, (torch.cat(dqs), torch.cat(dks), torch.cat(dvs))


class _ReferenceBase(Provider):
    """The exact reference as a timed provider: a floor, and a check that the harness itself works."""

    scores_memory = "per_sequence"

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        fn = SEQUENCE_FNS[self.semantics]
        outs = []
        for b in range(batch.B):
            qs, ks = batch.q_rows(b), batch.kv_rows(b)
            q = batch.q[qs].float()
            o = fn(q, batch.k[ks].float(), batch.v[ks].float(), spec)
            outs.append(o)
        if not outs:
            return batch.q.new_zeros(batch.q.shape)
        return torch.cat(outs).to(batch.q.dtype)


@register
class ReferenceProvider(_ReferenceBase):
    name = "reference"
    description = "exact GDPA, one sequence at a time in fp32 (the correctness ground truth)"


@register
class SoftmaxReferenceProvider(_ReferenceBase):
    name = "reference_softmax"
    semantics = "softmax"
    description = "exact softmax attention, one sequence at a time in fp32"
