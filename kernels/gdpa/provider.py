"""Harness provider `gdpa_triton`: our Triton GDPA kernels through the public `gdpa()` op."""
from __future__ import annotations

import torch

from kernels.gdpa.interface import LAUNCHED, SUPPORTED_HEAD_DIMS, gdpa
from kernels.registry import CaseSpec, Provider, register
from workloads.batch import JaggedBatch


@register
class GDPATritonProvider(Provider):
    name = "gdpa_triton"
    semantics = "gdpa"
    description = "our GDPA Triton kernels (jagged, fwd + split dK/dV and dQ bwd)"

    def availability(self, device: torch.device) -> str | None:
        try:
            import triton  # noqa: F401
        except ImportError:
            return "triton is not installed"
        import os
        if torch.device(device).type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "on CPU the Triton kernels need the interpreter: set TRITON_INTERPRET=1"
        return None

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        if batch.D not in SUPPORTED_HEAD_DIMS:
            return f"head_dim {batch.D} not supported; allowed: {SUPPORTED_HEAD_DIMS}"
        if batch.device.type == "cpu" and batch.dtype == torch.bfloat16:
            return "bf16 tl.dot is wrong in triton 3.6's interpreter; use fp16/fp32 on CPU"
        return None

    def build(self, batch: JaggedBatch, spec: CaseSpec, mode: str):
        LAUNCHED.clear()  # so kernel_configs() reports only this case's launches
        return super().build(batch, spec, mode)

    def kernel_configs(self) -> dict[str, str] | None:
        return dict(LAUNCHED) or None

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        # offsets were validated when the batch was built; skip the host sync in the timed call
        return gdpa(batch.q, batch.k, batch.v, batch.q_offsets, batch.kv_offsets, batch.max_q,
                    batch.max_kv, activation=spec.activation, alpha=spec.alpha,
                    qk_scale=spec.qk_scale, causal=spec.causal, validate_offsets=False)
