"""`flex_attention`: PyTorch's own jagged attention path, `torch.nn.attention.flex_attention`, on the
packed layout with a document mask: a softmax speed reference like `fa4`.

The batch stays packed, as a user holds it: q `[ΣLq, H, D]` is viewed as `[1, H, ΣLq, D]` (no copy),
and a `BlockMask` lets query row i see key row j only within the same sequence (and, causal, only keys
j ≤ i + Lk − Lq of it: bottom-right aligned as FlashAttention and `kernels.reference.softmax_sequence`).
The block mask is built once per batch, outside the timed call (`build`), with its mask function
compiled on CUDA so the ΣLq×ΣLk mask is never materialised. `flex_attention` itself is compiled once
per shape bucket — dtype, heads, head dim, causal — with dynamic sequence lengths on CUDA, so a sweep
over lengths reuses one compiled kernel; on CPU Inductor's flex template fails on dynamic shapes (torch
2.13: a C++ compile error), so there it is compiled per shape. Option `compile: false` runs it eagerly
(its unfused reference path: for checks, not for speed). On CPU it runs forward only: torch has no
FlexAttention backward there.
"""

from __future__ import annotations

import functools

import torch

from kernels import peer_checkout as pc
from kernels.registry import CaseSpec, Provider, register
from workloads.batch import JaggedBatch

BLOCK = 128  # flex_attention's default sparse block size
OPTIONS = {"compile": (bool, True)}


def _flex():
    from torch.nn.attention import flex_attention as fa

    return fa


@functools.cache
def compiled_flex(dynamic: bool):
    """One compiled flex_attention per process and mode: Dynamo's guards tell the shape buckets apart."""
    return torch.compile(_flex().flex_attention, dynamic=dynamic)


def keep_saved_buffers() -> None:
    """A graph compiled under autograd donates its saved buffers to its backward by default, so that
    backward runs once; the harness times `autograd.grad(..., retain_graph=True)` on one forward graph again
    and again (torch raises "compiled with non-empty donated buffers"). Donation is switched off for the
    process before anything compiles (a per-call config patch was not enough on the H200: the flag is read
    where the compiled graph is cached, not where it is called)."""
    from torch._functorch import config

    config.donated_buffer = False


def _padded(t: torch.Tensor, n: int, fill: int) -> torch.Tensor:
    """`t` followed by `fill` up to length n: indices in flex's padding past the last block row map to no sequence."""
    out = torch.full((n,), fill, dtype=torch.int32, device=t.device)
    out[: t.numel()] = t
    return out


def document_block_mask(batch: JaggedBatch, causal: bool):
    """The BlockMask of a packed jagged batch: sequence b's queries see sequence b's keys only."""
    fa = _flex()
    dev = batch.device
    tq, tk = batch.total_q, batch.total_kv
    nq, nk = -(-tq // BLOCK) * BLOCK, -(-tk // BLOCK) * BLOCK
    ql = torch.as_tensor(batch.q_lengths, device=dev)
    kl = torch.as_tensor(batch.kv_lengths, device=dev)
    seq = torch.arange(batch.B, device=dev, dtype=torch.int32)
    q_doc_raw = torch.repeat_interleave(seq, ql)
    k_doc_raw = torch.repeat_interleave(seq, kl)
    q_doc = _padded(q_doc_raw, nq, -1)
    k_doc = _padded(k_doc_raw, nk, -2)  # padding never matches
    if causal:
        q_start = torch.cumsum(ql, 0) - ql
        k_start = torch.cumsum(kl, 0) - kl
        q_pos = torch.arange(tq, device=dev) - q_start[q_doc_raw]
        k_pos = _padded(torch.arange(tk, device=dev) - k_start[k_doc_raw], nk, 0)
        q_lim = _padded(q_pos + (kl - ql)[q_doc_raw], nq, -1)  # the last key position row i may see

        def mask_mod(b, h, qi, ki):
            return (q_doc[qi] == k_doc[ki]) & (k_pos[ki] <= q_lim[qi])

    else:

        def mask_mod(b, h, qi, ki):
            return q_doc[qi] == k_doc[ki]

    return fa.create_block_mask(mask_mod, None, None, tq, tk, device=dev, BLOCK_SIZE=BLOCK, _compile=dev.type == "cuda")


@register
class FlexAttentionProvider(Provider):
    name = "flex_attention"
    semantics = "softmax"
    process_setup_s = 60.0  # Inductor compiles of the fwd and bwd templates and of the block-mask builder
    description = (
        "torch.nn.attention.flex_attention on the packed jagged layout with a document BlockMask (built "
        "outside the timed call); softmax; compiled once per shape bucket; fwd + bwd via autograd"
    )

    def __init__(self, options=None):
        super().__init__(options)
        keep_saved_buffers()
        self._mask: tuple | None = None  # (q_offsets, kv_offsets, causal, BlockMask) of one batch

    def parse_options(self, options: dict) -> dict:
        return pc.parse_options(self.name, options, OPTIONS)

    def options_record(self) -> dict:
        return dict(self.options)

    def availability(self, device: torch.device) -> str | None:
        try:
            _flex()
        except ImportError as exc:
            return f"torch {torch.__version__} has no torch.nn.attention.flex_attention ({exc})"
        if torch.device(device).type not in ("cuda", "cpu"):
            return f"runs on CUDA or CPU, not {torch.device(device).type}"
        return None

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        if batch.H % batch.Hkv:
            return f"H={batch.H} is not a multiple of Hkv={batch.Hkv}"
        if batch.total_q == 0 or batch.total_kv == 0:
            return "an empty batch (no query or no key rows)"
        if batch.k.shape[2] != batch.D or batch.v.shape[2] != batch.D:
            return "flex_attention provider needs the same head dim for q, k and v"
        if spec.mode != "fwd" and batch.device.type == "cpu":
            return f"FlexAttention has no backward on CPU (torch {torch.__version__} raises NotImplementedError)"
        return None

    def block_mask(self, batch: JaggedBatch, causal: bool):
        m = self._mask
        if m is not None and m[0] is batch.q_offsets and m[1] is batch.kv_offsets and m[2] == causal:
            return m[3]
        self._mask = None  # free the previous batch's mask before building this one
        mask = document_block_mask(batch, causal)
        self._mask = (batch.q_offsets, batch.kv_offsets, causal, mask)
        return mask

    def _fn(self, device: torch.device):
        if not self.options["compile"]:
            return _flex().flex_attention
        return compiled_flex(device.type == "cuda")

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        mask = self.block_mask(batch, bool(spec.causal))
        q, k, v = (t.transpose(0, 1).unsqueeze(0) for t in (batch.q, batch.k, batch.v))
        out = self._fn(batch.device)(
            q,
            k,
            v,
            block_mask=mask,
            scale=spec.resolved_softmax_scale(batch.D),
            enable_gqa=batch.H != batch.Hkv,
        )
        return out[0].transpose(0, 1)

    def build(self, batch: JaggedBatch, spec: CaseSpec, mode: str):
        self.block_mask(batch, bool(spec.causal))  # outside the timed call
        return super().build(batch, spec, mode)

    def kernel_configs(self) -> dict | None:
        return {"compiled": self.options["compile"], "block_size": BLOCK}
