"""PyTorch SDPA with one backend forced (FlashAttention-2 inside torch, or cuDNN) on the dense layout.

`torch.nn.functional.scaled_dot_product_attention` takes dense `[B, H, L, D]` tensors. Its FLASH and
cuDNN backends accept no attention mask, so on a jagged batch (some Lq_b < max_q or Lk_b < max_kv) the
padded keys would take part in every softmax: the result would be wrong, not merely slow. These
providers therefore support only full-length batches (every Lq_b == max_q and Lk_b == max_kv, e.g. the
peer's fill 1.0 shapes) and report jagged cases as unsupported, so they are recorded `skipped` rather
than timed on wrong numbers. For full-length batches the jagged→dense conversion is a view
(`[ΣL, H, D]` → `[B, L, H, D]` → transpose to `[B, H, L, D]`) and back; it happens inside `forward`, so
whatever it costs is timed, as a user would pay it.

Causal: `is_causal=True` is top-left aligned in torch; the softmax reference (and FlashAttention) is
bottom-right aligned. They agree when Lq == Lk, so causal with max_q != max_kv is unsupported.
GQA: `enable_gqa=True` where torch's SDPA has it (2.5+), else k/v are expanded inside `forward`.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from kernels.flash_limits import shape_reason
from kernels.registry import CaseSpec, Provider, cuda_reason, register
from support.text import one_line
from workloads.batch import JaggedBatch

JAGGED_REASON = "dense SDPA backend cannot mask padded keys; jagged lengths (fill < 1) need a varlen kernel"
CAUSAL_REASON = (
    "causal with Lq != Lk: torch SDPA's is_causal is top-left aligned, the softmax "
    "reference (FlashAttention convention) is bottom-right aligned"
)


def _sdpa_has_enable_gqa() -> bool:
    try:
        return "enable_gqa" in inspect.signature(F.scaled_dot_product_attention).parameters
    except (TypeError, ValueError):  # a builtin without a signature: read the docstring instead
        return "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or "")


HAS_ENABLE_GQA = _sdpa_has_enable_gqa()


# ---- jagged <-> dense (full-length batches only) -------------------------------------------------


def is_full_length(batch: JaggedBatch) -> bool:
    """True when every sequence has exactly max_q query rows and max_kv key rows (no padding)."""
    return bool(np.all(batch.q_lengths == batch.max_q) and np.all(batch.kv_lengths == batch.max_kv))


def to_dense(x: torch.Tensor, B: int, L: int) -> torch.Tensor:
    """`[B·L, H, D]` → `[B, H, L, D]` as a view (full-length rows only: no padding is added)."""
    if x.shape[0] != B * L:
        raise ValueError(
            f"to_dense: {x.shape[0]} rows is not B·L = {B}·{L}; only full-length batches convert without padding"
        )
    return x.view(B, L, x.shape[1], x.shape[2]).transpose(1, 2)


def from_dense(o: torch.Tensor) -> torch.Tensor:
    """`[B, H, L, D]` → `[B·L, H, D]` (a view when the memory is already `[B, L, H, D]`, else a copy)."""
    B, H, L, D = o.shape
    return o.transpose(1, 2).reshape(B * L, H, D)


def dense_sdpa(batch: JaggedBatch, spec: CaseSpec, backends: Sequence) -> torch.Tensor:
    """SDPA over the full-length batch with only `backends` allowed; output `[ΣLq, H, D]`.

    Differentiable with respect to batch.q/k/v. The `sdpa_kernel` context is entered on every call
    (a few µs of Python) because the restriction must hold while the kernel is chosen.
    """
    from torch.nn.attention import sdpa_kernel

    B = batch.B
    q = to_dense(batch.q, B, batch.max_q)
    k = to_dense(batch.k, B, batch.max_kv)
    v = to_dense(batch.v, B, batch.max_kv)
    kwargs = {}
    if batch.Hkv != batch.H:
        if HAS_ENABLE_GQA:
            kwargs["enable_gqa"] = True
        else:  # older torch: expand k/v here, inside the timed call, as a user would
            groups = batch.H // batch.Hkv
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    with sdpa_kernel(list(backends)):
        o = F.scaled_dot_product_attention(
            q, k, v, is_causal=bool(spec.causal), scale=spec.resolved_softmax_scale(batch.D), **kwargs
        )
    return from_dense(o)


# ---- availability -----------------------------------------------------------------------------


def _torch_backend_reason(batch: JaggedBatch, spec: CaseSpec, backend_name: str) -> str | None:
    """Ask torch itself (can_use_flash_attention / can_use_cudnn_attention, debug on) whether the
    backend takes these dense shapes; its warnings are the reasons. Only meaningful on CUDA tensors."""
    cuda = torch.backends.cuda
    check = getattr(cuda, f"can_use_{backend_name}_attention", None)
    params_cls = getattr(cuda, "SDPAParams", None)
    if check is None or params_cls is None or batch.q.device.type != "cuda" or batch.B == 0:
        return None
    q = to_dense(batch.q, batch.B, batch.max_q)
    k = to_dense(batch.k, batch.B, batch.max_kv)
    v = to_dense(batch.v, batch.B, batch.max_kv)
    gqa = batch.Hkv != batch.H and HAS_ENABLE_GQA
    if batch.Hkv != batch.H and not HAS_ENABLE_GQA:  # forward expands k/v: check those shapes
        groups = batch.H // batch.Hkv
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    try:
        params = params_cls(q, k, v, None, 0.0, bool(spec.causal), gqa)
    except TypeError:  # torch < 2.5: no enable_gqa field
        params = params_cls(q, k, v, None, 0.0, bool(spec.causal))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = check(params, debug=True)
    if ok:
        return None
    msgs = [str(w.message).strip().splitlines()[0] for w in caught if str(w.message).strip()]
    return f"torch says the {backend_name} SDPA backend cannot run this case: " + (
        "; ".join(dict.fromkeys(msgs)) or "no reason given"
    )


class _DenseSDPA(Provider):
    semantics = "softmax"
    backend_attr: str = ""  # SDPBackend member name
    backend_name: str = ""  # flash | cudnn (torch.backends.cuda.can_use_<name>_attention)
    _trial: ClassVar[dict] = {}  # (provider, device index) -> {fwd, bwd: reason|None}; per process

    def _backend(self):
        from torch.nn.attention import SDPBackend

        return getattr(SDPBackend, self.backend_attr)

    def _static_availability(self) -> str | None:
        raise NotImplementedError

    def availability(self, device: torch.device) -> str | None:
        reason = cuda_reason(device) or self._static_availability()
        return reason or self._trial_result(torch.device(device))["fwd"]

    def _trial_result(self, device: torch.device) -> dict:
        idx = device.index if device.index is not None else torch.cuda.current_device()
        key = (self.name, idx)
        if key not in self._trial:
            self._trial[key] = self._trial_call(torch.device("cuda", idx))
        return self._trial[key]

    def _trial_call(self, device: torch.device) -> dict:
        """A tiny forward, then backward, with only this backend allowed: the real usability test.
        Returns {"fwd": reason|None, "bwd": reason|None}."""
        from workloads.batch import make_batch

        gpu = torch.cuda.get_device_name(device)
        b = make_batch([128, 128], [128, 128], H=2, D=64, dtype=torch.bfloat16, device=device, seed=0).with_grad()
        try:
            out = dense_sdpa(b, CaseSpec(), [self._backend()])
            torch.cuda.synchronize(device)
        except Exception as exc:  # the failure is the reason
            reason = f"the {self.backend_attr} SDPA backend is not usable on {gpu}: trial call failed ({one_line(exc)})"
            return {"fwd": reason, "bwd": reason}
        try:
            torch.autograd.grad(out, (b.q, b.k, b.v), torch.ones_like(out))
            torch.cuda.synchronize(device)
        except Exception as exc:  # the failure is the reason
            return {
                "fwd": None,
                "bwd": (
                    f"the {self.backend_attr} SDPA backward is not usable on {gpu}: trial call failed ({one_line(exc)})"
                ),
            }
        return {"fwd": None, "bwd": None}

    def _bwd_reason(self, device: torch.device) -> str | None:
        if device.type != "cuda" or not torch.cuda.is_available():
            return None  # availability() already says why nothing runs here
        return self._trial_result(device)["bwd"]

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        reason = shape_reason(batch, f"{self.backend_attr} SDPA")
        if reason:
            return reason
        if not is_full_length(batch):
            return JAGGED_REASON
        if spec.causal and batch.max_q != batch.max_kv:
            return CAUSAL_REASON
        if spec.mode in ("bwd", "fwd_bwd"):
            reason = self._bwd_reason(batch.device)
            if reason:
                return reason
        return _torch_backend_reason(batch, spec, self.backend_name)

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        return dense_sdpa(batch, spec, [self._backend()])


@register
class SDPAFlashProvider(_DenseSDPA):
    name = "sdpa_flash"
    description = (
        "torch SDPA forced to SDPBackend.FLASH_ATTENTION (FlashAttention-2 in torch) on the "
        "dense [B,H,L,D] view; full-length batches only (no key-padding mask)"
    )
    backend_attr = "FLASH_ATTENTION"
    backend_name = "flash"

    def _static_availability(self) -> str | None:
        cuda = torch.backends.cuda
        if hasattr(cuda, "is_flash_attention_available") and not cuda.is_flash_attention_available():
            return "this torch build has no FlashAttention SDPA kernels"
        if not cuda.flash_sdp_enabled():
            return "the FLASH_ATTENTION SDPA backend is disabled (torch.backends.cuda.enable_flash_sdp)"
        return None


@register
class SDPACuDNNProvider(_DenseSDPA):
    name = "sdpa_cudnn"
    description = (
        "torch SDPA forced to SDPBackend.CUDNN_ATTENTION (cuDNN fused attention) on the "
        "dense [B,H,L,D] view; full-length batches only (no key-padding mask)"
    )
    backend_attr = "CUDNN_ATTENTION"
    backend_name = "cudnn"

    def _static_availability(self) -> str | None:
        if not torch.backends.cudnn.is_available():
            return "cuDNN not available in this torch build"
        enabled = getattr(torch.backends.cuda, "cudnn_sdp_enabled", None)
        if enabled is None:
            return f"torch {torch.__version__} has no cuDNN SDPA backend"
        if not enabled():
            return "the CUDNN_ATTENTION SDPA backend is disabled (torch.backends.cuda.enable_cudnn_sdp)"
        return None
