"""What a user would write in PyTorch: pad to max length → matmul → activation → mask → matmul → unpad.

`naive_eager` runs it eagerly; `naive_compiled` is `torch.compile` of the same function (dynamic
shapes, so one compilation serves every max length). Padding and unpadding happen inside the timed
call, as a user pays them. The padded score tensor is B·H·maxLq·maxLk elements: at the peer's largest
shapes it does not fit, and those cases are recorded as out of memory.
"""

from __future__ import annotations

import functools

import torch

from kernels.activations import get_activation
from kernels.registry import CaseSpec, Provider, register
from workloads.batch import JaggedBatch


def _padded_rows(offsets: torch.Tensor, max_len: int, n: int) -> torch.Tensor:
    """For each of the n jagged rows, its row in the flattened padded layout [B·max_len]."""
    B = offsets.numel() - 1
    lengths = (offsets[1:] - offsets[:-1]).long()
    b_idx = torch.repeat_interleave(torch.arange(B, device=offsets.device), lengths, output_size=n)
    return b_idx * max_len + torch.arange(n, device=offsets.device) - offsets[:-1].long()[b_idx]


def _pad(x: torch.Tensor, rows: torch.Tensor, B: int, max_len: int) -> torch.Tensor:
    """[ΣL, H, D] -> [B, max_len, H, D], zeros past each sequence's end. Whole rows are copied by one
    row index (index_copy), not element by element through a (batch, position) index pair."""
    flat = x.new_zeros((B * max_len, *x.shape[1:])).index_copy(0, rows, x)
    return flat.view((B, max_len, *x.shape[1:]))


def naive_gdpa(
    q,
    k,
    v,
    q_offsets,
    kv_offsets,
    max_q: int,
    max_kv: int,
    activation: str,
    alpha: float,
    qk_scale: float,
    causal: bool,
) -> torch.Tensor:
    B = q_offsets.numel() - 1
    q_rows = _padded_rows(q_offsets, max_q, q.shape[0])
    kv_rows = _padded_rows(kv_offsets, max_kv, k.shape[0])
    qp = _pad(q, q_rows, B, max_q)
    kp = _pad(k, kv_rows, B, max_kv)
    vp = _pad(v, kv_rows, B, max_kv)
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        kp = kp.repeat_interleave(groups, dim=2)
        vp = vp.repeat_interleave(groups, dim=2)
    qh, kh, vh = (t.transpose(1, 2) for t in (qp, kp, vp))  # [B, H, L, D]
    # The scales go where a user puts them: alpha on q, qk_scale on the output (O(L·D), not O(L²) work),
    # and not at all when they are 1.
    if alpha != 1.0:
        qh = qh * alpha
    s = torch.matmul(qh, kh.transpose(-1, -2))
    p = get_activation(activation, native=True)(s)
    kv_len = (kv_offsets[1:] - kv_offsets[:-1]).long()
    keep = torch.arange(max_kv, device=q.device)[None, :] < kv_len[:, None]  # [B, Lk]
    keep = keep[:, None, None, :]
    if causal:
        keep = keep & torch.ones(max_q, max_kv, dtype=torch.bool, device=q.device).tril()
    p = p.masked_fill(~keep, 0.0)
    o = torch.matmul(p.to(vh.dtype), vh).transpose(1, 2)  # [B, Lq, H, D]
    o = o.reshape((B * max_q, *o.shape[2:])).index_select(0, q_rows)
    return o * qk_scale if qk_scale != 1.0 else o


class _NaiveBase(Provider):
    scores_memory = "padded"

    def _fn(self):
        return naive_gdpa

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        return self._fn()(*batch.call_args(), **spec.gdpa_math())


@register
class NaiveEager(_NaiveBase):
    name = "naive_eager"
    description = "eager PyTorch: pad, matmul, activation, mask, matmul, unpad"


@functools.cache
def _compiled():
    # Inductor donates saved buffers to the backward by default, which forbids retain_graph=True: the
    # `bwd` mode replays one backward graph many times, so donation must be off (it only saves memory).
    import torch._functorch.config as functorch_config

    functorch_config.donated_buffer = False
    return torch.compile(naive_gdpa, dynamic=True)


@register
class NaiveCompiled(_NaiveBase):
    name = "naive_compiled"
    description = "torch.compile (dynamic shapes) of the naive PyTorch GDPA"
    process_setup_s = 60.0  # Inductor compiles fwd and bwd graphs once (~1 min on the H200 host)
    scores_memory = "padded_fused"

    def _fn(self):
        return _compiled()
