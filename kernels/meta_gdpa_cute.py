"""`meta_gdpa_cute`: Meta's CuTe DSL GDPA (ads_model_kernel_library `gdpa/src`, an sm100 fork of
FlashAttention-4), from the same checkout as `meta_gdpa` (kernels/peer_checkout.py). Blackwell only: on
any other GPU, or without one, it is skipped ("needs sm100").

Called as Meta's benchmark calls it (gdpa/scripts/benchmark.py:240-262, 340-370): `flash_attn_varlen_func`
with `prefer_persistent=True` and the zigzag load-balanced tile maps of
`precompute_for_varline_load_balancing` (forward, and `is_bwd=True` for the backward), computed once per
batch outside the timed call (option `load_balancing: false` leaves them out). Forward and backward go
through its autograd op.

Semantics, from gdpa/src at 2c128ab: O = act(QKᵀ)·V with no scale — `softmax_scale` only reaches an
unused field of its activation objects (activation_utils.py:823-829) and the epilogue applies none
(flash_fwd_sm100.py:3008-3016); act is `relu` or otherwise its gelu (flash_fwd_sm100.py:2915-2936: tanh
fast_gelu, with a degree-6 Taylor form on a fixed share of elements, activation_utils.py:1053-1085). So
cases run with activation fast_gelu (or relu), alpha 1 and qk_scale 1; anything else is unsupported.
Causal (FA4's mask) runs on self-attention batches only, where its alignment and ours agree.
"""

from __future__ import annotations

import torch

from kernels import peer_checkout as pc
from kernels.fa4 import varlen_layout
from kernels.meta_gdpa import PEER, shape_reason
from kernels.registry import CaseSpec, register
from workloads.batch import JaggedBatch

MODULE = "ads_mkl.ops.oss.gdpa.src.interface"
ACTIVATIONS = {"fast_gelu": "fast_gelu", "relu": "relu"}
OPTIONS = {"path": (str, None), "load_balancing": (bool, True)}


def sm100_reason(device: torch.device) -> str | None:
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return "needs sm100 (a Blackwell GPU: its kernels are sm100 CuTe DSL, gdpa/src/flash_fwd_sm100.py); no GPU here"
    major, minor = torch.cuda.get_device_capability(device)
    if major != 10:
        return f"needs sm100 (a Blackwell GPU); found {torch.cuda.get_device_name(device)} sm_{major}{minor}"
    return None


@register
class MetaGDPACuteProvider(pc.PeerProvider):
    name = "meta_gdpa_cute"
    peer, module, option_fields = PEER, MODULE, OPTIONS
    process_setup_s = 30.0  # CuTe DSL JIT of its fwd and bwd kernels, cached in-process
    description = (
        "Meta's CuTe DSL GDPA (ads_model_kernel_library gdpa/src, sm100 FA4 fork) from your checkout; "
        "O = act(QKᵀ)·V, fast_gelu or relu; persistent + zigzag tile maps as Meta's benchmark"
    )

    def __init__(self, options=None):
        super().__init__(options)
        self._maps: tuple | None = None  # (q_offsets, kv_offsets, keywords): one batch's tile maps

    def device_reason(self, device: torch.device) -> str | None:
        return sm100_reason(device)

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        if spec.activation not in ACTIVATIONS:
            return (
                f"Meta's CuTe GDPA computes fast_gelu or relu only (any other name runs its gelu, "
                f"gdpa/src/flash_fwd_sm100.py:2915); got {spec.activation!r}"
            )
        if spec.alpha != 1.0 or spec.qk_scale != 1.0:
            return (
                "Meta's CuTe GDPA applies no scale (O = act(QKᵀ)·V: gdpa/src/flash_fwd_sm100.py:3008); "
                f"alpha and qk_scale must be 1, got {spec.alpha:g} and {spec.qk_scale:g}"
            )
        if spec.causal and not (batch.q_lengths == batch.kv_lengths).all():
            return "causal runs on self-attention batches only (FA4's mask is bottom-right aligned, ours top-left)"
        return shape_reason(batch, "Meta's CuTe GDPA")

    def _tile_maps(self, batch: JaggedBatch) -> dict:
        """Meta's load-balancing maps for this batch (computed once, outside any timed call)."""
        if not self.options["load_balancing"]:
            return {}
        m = self._maps
        if m is not None and m[0] is batch.q_offsets and m[1] is batch.kv_offsets:
            return m[2]
        pre = self.peer_module().precompute_for_varline_load_balancing
        fq = pre(batch.q, batch.q_offsets, batch.kv_offsets)
        bk = pre(batch.q, batch.q_offsets, batch.kv_offsets, is_bwd=True)
        kw = dict(zip(("tile_to_batch_q", "tile_to_head_q", "tile_to_block_q"), fq, strict=True))
        kw.update(zip(("tile_to_batch_k", "tile_to_head_k", "tile_to_block_k"), bk, strict=True))
        self._maps = (batch.q_offsets, batch.kv_offsets, kw)
        return kw

    def build(self, batch: JaggedBatch, spec: CaseSpec, mode: str):
        self._tile_maps(batch)
        return super().build(batch, spec, mode)

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        iface = self.peer_module()
        res = iface.flash_attn_varlen_func(
            q=batch.q,
            k=batch.k,
            v=batch.v,
            **varlen_layout(batch),
            causal=bool(spec.causal),
            prefer_persistent=True if self.options["load_balancing"] else None,
            activation=ACTIVATIONS[spec.activation],
            **self._tile_maps(batch),
        )
        return res[0] if isinstance(res, (tuple, list)) else res

    def kernel_configs(self) -> dict | None:
        fields = self.source_fields()
        return None if fields is None else {**fields, "tile_maps": bool(self.options["load_balancing"])}
