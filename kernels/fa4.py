"""FlashAttention-4 (`flash-attn-4`, CuTe DSL) on the jagged layout: the softmax baseline to beat.

`flash_attn.cute.flash_attn_varlen_func` (flash-attn-4 4.0.0b36; Hopper sm90 and Blackwell sm100) runs
directly on our layout: q `[ΣLq, H, D]`, k/v `[ΣLk, Hkv, D]` (GQA native), `cu_seqlens_q/k` = our int32
offsets, `max_seqlen_q/k` = the batch maxima. Softmax semantics; causal is bottom-right aligned, as in
`kernels.reference.softmax_sequence`. Forward and backward go through FA4's own autograd function.

Its kernels are JIT-compiled (CuTe DSL) on the first call for each configuration, which takes seconds:
`build()` runs the callable once before returning, so compilation never lands in a timed region.

flash_attn is imported lazily: this module imports on machines without it (the provider then reports
itself unavailable with the install hint).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from kernels.registry import CaseSpec, Provider, capability_reason, cuda_reason, register
from support.optional import import_problem
from workloads.batch import JaggedBatch

INSTALL_HINT = "pip install -e '.[fa4]'"
SUPPORTED_HEAD_DIMS = (64, 96, 128)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)


def _import_varlen_func() -> Callable[..., Any]:
    from flash_attn.cute import flash_attn_varlen_func  # lazy on purpose

    return flash_attn_varlen_func


def varlen_layout(batch: JaggedBatch) -> dict:
    """Our jagged layout in the keywords of FA4's `flash_attn_varlen_func` (and its forks': Meta's CuTe GDPA)."""
    return {
        "cu_seqlens_q": batch.q_offsets,
        "cu_seqlens_k": batch.kv_offsets,
        "max_seqlen_q": int(batch.max_q),
        "max_seqlen_k": int(batch.max_kv),
    }


def _package_reason() -> str | None:
    """None when flash_attn.cute imports; otherwise why not."""
    return import_problem(("flash_attn.cute",), "flash-attn-4", ("flash_attn",), INSTALL_HINT)


@register
class FA4Provider(Provider):
    name = "fa4"
    semantics = "softmax"
    process_setup_s = 20.0  # CuTe DSL JIT of the fwd and bwd kernels, cached in-process
    description = (
        "FlashAttention-4 (flash-attn-4 4.0.0b36, CuTe DSL) flash_attn_varlen_func on the "
        "jagged layout; softmax; Hopper sm90 / Blackwell sm10x; fwd + bwd via its autograd"
    )

    def availability(self, device: torch.device) -> str | None:
        reason = _package_reason()
        if reason:
            return reason
        return cuda_reason(device) or capability_reason(
            device,
            lambda major, minor: (major, minor) == (9, 0) or major == 10,
            "an NVIDIA GPU of compute capability 9.0 (Hopper) or 10.x (Blackwell)",
        )

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        # Softmax provider: activation / alpha / qk_scale belong to GDPA cases and are ignored here.
        if batch.dtype not in SUPPORTED_DTYPES:
            return f"FA4 runs fp16/bf16 only, not {str(batch.dtype).replace('torch.', '')}"
        if batch.D not in SUPPORTED_HEAD_DIMS:
            return (
                f"head dim {batch.D} not supported by this FA4 provider "
                f"(allowed: {', '.join(map(str, SUPPORTED_HEAD_DIMS))})"
            )
        if batch.k.shape[2] != batch.D or batch.v.shape[2] != batch.D:
            return "FA4 provider needs the same head dim for q, k and v"
        if batch.H % batch.Hkv != 0:
            return f"H={batch.H} is not a multiple of Hkv={batch.Hkv}"
        return None

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        fn = _import_varlen_func()
        # Keywords only: the 4th positional parameter of flash_attn_varlen_func is `qv` (MLA).
        res = fn(
            batch.q,
            batch.k,
            batch.v,
            **varlen_layout(batch),
            softmax_scale=spec.resolved_softmax_scale(batch.D),
            causal=bool(spec.causal),
        )
        return res[0] if isinstance(res, (tuple, list)) else res

    def build(self, batch: JaggedBatch, spec: CaseSpec, mode: str) -> Callable[[], Any]:
        fn = super().build(batch, spec, mode)
        fn()  # JIT compile (fwd, and bwd for bwd modes) now, outside any timed region
        if batch.device.type == "cuda":
            torch.cuda.synchronize(batch.device)
        return fn
