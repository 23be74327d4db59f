"""PyTorch's own varlen attention, `torch.nn.attention.varlen.varlen_attn`, on the jagged layout.

It takes our layout as is: q `[ΣLq, H, D]`, k/v `[ΣLk, Hkv, D]`, `cu_seq_q/k` = our int32 offsets,
`max_q/max_k` = the batch maxima, and runs aten's FlashAttention-2 varlen kernel (softmax semantics,
causal bottom-right aligned). Backward is registered through `torch.library` autograd.

The signature moved between torch releases, so the call is built from the installed function's
parameters instead of being hard-coded:
- torch 2.13 (read here): `varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *,
  return_aux=None, scale=None, window_size=(-1, -1), enable_gqa=False, seqused_k=None,
  block_table=None, num_splits=None)`; causal is `window_size=(-1, 0)`.
- torch 2.11 (read on the H200 machine): `varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q,
  max_k, *, return_aux=None, scale=None, window_size=(-1, -1))`: scale and causal, but no enable_gqa,
  so GQA (Hkv < H) cases are unsupported there.
- an earlier form seen in copies of the module: `varlen_attn(..., max_q, max_k, is_causal=False,
  return_aux=None)` (no scale, no GQA); handled through `is_causal`.
A feature the installed signature lacks makes the case unsupported, with the reason; nothing is
emulated.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from kernels.flash_limits import shape_reason
from kernels.registry import CaseSpec, Provider, capability_reason, cuda_reason, register
from support.text import one_line
from workloads.batch import JaggedBatch


@functools.cache
def _load() -> tuple[Callable[..., Any] | None, str | None]:
    """(varlen_attn, None) or (None, reason)."""
    try:
        varlen = importlib.import_module("torch.nn.attention.varlen")
    except ImportError:
        return None, (
            f"torch {torch.__version__} has no torch.nn.attention.varlen "
            "(PyTorch's varlen attention needs a newer torch)"
        )
    fn = getattr(varlen, "varlen_attn", None)
    if fn is None:
        return None, f"torch {torch.__version__}: torch.nn.attention.varlen has no varlen_attn"
    return fn, None


@functools.cache
def _params() -> dict[str, inspect.Parameter]:
    """The installed varlen_attn's parameters (read once: no inspect in the timed call)."""
    fn, _ = _load()
    if fn is None:
        return {}
    try:
        return dict(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return {}


def varlen_kwargs(batch: JaggedBatch, spec: CaseSpec, params: dict) -> tuple[dict | None, str | None]:
    """Keyword arguments for the installed varlen_attn, or (None, the reason it cannot do the case)."""
    kw: dict[str, Any] = {}
    version = torch.__version__
    if spec.causal:
        if "window_size" in params:
            kw["window_size"] = (-1, 0)  # a tuple: 2.13 tests `window_size == (-1, 0)` for causal
        elif "is_causal" in params:
            kw["is_causal"] = True
        else:
            return None, f"torch {version} varlen_attn has no causal option"
    scale = spec.resolved_softmax_scale(batch.D)
    if "scale" in params:
        kw["scale"] = scale
    elif abs(scale * batch.D**0.5 - 1.0) > 1e-12:
        return None, (
            f"torch {version} varlen_attn has no scale argument (fixed 1/sqrt(D)); "
            f"softmax_scale={scale} is not expressible"
        )
    if batch.Hkv != batch.H:
        if "enable_gqa" in params:
            kw["enable_gqa"] = True
        else:
            return None, f"torch {version} varlen_attn has no GQA (enable_gqa); Hkv={batch.Hkv} < H={batch.H}"
    return kw, None


@register
class TorchVarlenProvider(Provider):
    name = "torch_varlen"
    semantics = "softmax"
    description = (
        "torch.nn.attention.varlen.varlen_attn (aten FlashAttention-2 varlen kernel) on the "
        "jagged layout; softmax; fwd + bwd via its registered autograd"
    )

    _trial: ClassVar[dict] = {}  # device index -> {"fwd": reason|None, "bwd": reason|None}

    def availability(self, device: torch.device) -> str | None:
        _fn, reason = _load()
        if reason:
            return reason
        needs = "an NVIDIA GPU of compute capability >= 8.0 (FlashAttention-2)"
        reason = cuda_reason(device) or capability_reason(device, lambda major, minor: major >= 8, needs)
        return reason or self._trial_result(torch.device(device))["fwd"]

    def _trial_result(self, device: torch.device) -> dict:
        idx = device.index if device.index is not None else torch.cuda.current_device()
        if idx not in self._trial:
            self._trial[idx] = self._trial_call(torch.device("cuda", idx))
        return self._trial[idx]

    def _trial_call(self, device: torch.device) -> dict:
        """Tiny forward, then backward, on this device: what the installed torch can really do."""
        from workloads.batch import make_batch

        result = {"fwd": None, "bwd": None}
        b = make_batch([3, 64], [5, 64], H=2, D=64, dtype=torch.bfloat16, device=device).with_grad()
        try:
            out = self.forward(b, CaseSpec())
            torch.cuda.synchronize(device)
        except Exception as exc:  # the failure is the reason
            reason = f"torch {torch.__version__} varlen_attn trial call failed: {one_line(exc)}"
            result["fwd"] = result["bwd"] = reason
            return result
        try:
            torch.autograd.grad(out, (b.q, b.k, b.v), torch.ones_like(out))
            torch.cuda.synchronize(device)
        except Exception as exc:  # the failure is the reason
            result["bwd"] = f"torch {torch.__version__} varlen_attn has no working backward: {one_line(exc)}"
        return result

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        reason = shape_reason(batch, "varlen_attn")
        if reason:
            return reason
        _, reason = varlen_kwargs(batch, spec, _params())
        if reason:
            return reason
        if spec.mode in ("bwd", "fwd_bwd"):
            return self._bwd_reason(batch.device)
        return None

    def _bwd_reason(self, device: torch.device) -> str | None:
        """Why backward cannot run on `device` (from the cached trial call), or None."""
        if device.type != "cuda" or not torch.cuda.is_available():
            return None  # availability() already says why nothing runs here
        return self._trial_result(device)["bwd"]

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        fn, reason = _load()
        if fn is None:
            raise RuntimeError(reason)
        kw, reason = varlen_kwargs(batch, spec, _params())
        if kw is None:
            raise RuntimeError(reason)
        out = fn(
            batch.q, batch.k, batch.v, batch.q_offsets, batch.kv_offsets, int(batch.max_q), int(batch.max_kv), **kw
        )
        return out[0] if isinstance(out, (tuple, list)) else out
