"""Harness providers of the GDPA op, each the public `gdpa()` called as a user calls it (default
`validate="host"`: no host sync in the timed call) with its own options:

- `gdpa`: the op with its defaults (backend "auto": Triton, Hopper or both over length bands, the fastest
  plan measured once per shape class: choice.py);
- `gdpa_triton`: backend "triton" — our Triton kernels;
- `gdpa_hopper`: backend "hopper" — the warp-specialized Hopper kernel (kernels/gdpa/hopper).

A config's provider entry lays its options over these (`{name: gdpa_triton, label: ..., options:
{fwd_tiles: [64, 32, 4, 1]}}`; kernels/gdpa/options.py); they are parsed once, at config load. Each case
records what ran (`kernel_config`: the op's `record` — backend and reason per pass, tiles per kernel).
"""

from __future__ import annotations

import copy
from typing import ClassVar

import torch

from kernels.gdpa import backends
from kernels.gdpa.call import GDPACall
from kernels.gdpa.interface import SUPPORTED_HEAD_DIMS, gdpa
from kernels.gdpa.options import GDPAOptions
from kernels.gdpa.plan import pinned_from_record
from kernels.registry import TRITON_AUTOTUNE_BYTES, CaseSpec, Provider, register
from workloads.batch import JaggedBatch


def _triton_unsupported(batch: JaggedBatch) -> str | None:
    if batch.D not in SUPPORTED_HEAD_DIMS:
        return f"head_dim {batch.D} not supported; allowed: {SUPPORTED_HEAD_DIMS}"
    if batch.device.type == "cpu" and batch.dtype == torch.bfloat16:
        return "bf16 tl.dot is wrong in triton 3.6's interpreter; use fp16/fp32 on CPU"
    return None


class _GDPAOpProvider(Provider):
    backend: ClassVar[str] = "auto"
    autotune_bytes = TRITON_AUTOTUNE_BYTES  # the Triton kernels' tiles (auto: its split candidates too)

    def __init__(self, options=None):
        super().__init__(options)
        self.record: dict = {}

    def parse_options(self, options: dict) -> GDPAOptions:
        try:
            return GDPAOptions(backend=self.backend).merged(options)
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc}") from None

    def options_record(self) -> dict:
        return self.options.to_dict()

    def availability(self, device: torch.device) -> str | None:
        # auto always has the fallback backend; a pinned one must run here
        return backends.unavailable(
            backends.FALLBACK if self.options.backend == "auto" else self.options.backend, device
        )

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        if self.options.backend not in ("auto", backends.FALLBACK):
            call = GDPACall(*batch.call_args(), **spec.gdpa_math())
            return backends.unsupported(self.options.backend, call)
        return _triton_unsupported(batch)

    def build(self, batch: JaggedBatch, spec: CaseSpec, mode: str):
        self.record.clear()  # kernel_configs() reports this case's launches only
        return super().build(batch, spec, mode)

    def kernel_configs(self) -> dict | None:
        return copy.deepcopy(self.record) or None

    def replay_options(self, kernel_config: dict | None) -> dict | None:
        """auto chooses each pass's plan by timing it on the first call of a shape class, so in another process
        (Nsight Compute's child, where every launch is intercepted) it can choose another: the plan each pass
        recorded, pinned, runs the same launches over the same bands there. Tiles are still autotuned there."""
        if self.options.backend != "auto":
            return None
        dispatch = (kernel_config or {}).get("dispatch") or {}
        pinned = {}
        for mode in ("fwd", "bwd"):
            recorded = pinned_from_record(dispatch[mode]) if isinstance(dispatch.get(mode), dict) else None
            if recorded is not None and getattr(self.options, f"{mode}_plan") is None:
                pinned[f"{mode}_plan"] = recorded
        return pinned or None

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        return gdpa(*batch.call_args(), **spec.gdpa_math(), options=self.options, record=self.record)


@register
class GDPAProvider(_GDPAOpProvider):
    name = "gdpa"
    description = "the public GDPA op as a user calls it (backend auto: Hopper or Triton per call)"
    backend = "auto"


@register
class GDPATritonProvider(_GDPAOpProvider):
    name = "gdpa_triton"
    description = "our GDPA Triton kernels (jagged, fwd + split dK/dV and dQ bwd)"
    backend = "triton"


@register
class GDPAHopperProvider(_GDPAOpProvider):
    name = "gdpa_hopper"
    description = "our warp-specialized GDPA kernel for Hopper (kernels/gdpa/hopper)"
    backend = "hopper"
    autotune_bytes = 0  # compiled tiles, nothing tuned at the call
