"""GDPA on Hopper (sm90): FlashAttention-4's warp-specialized CuTe-DSL kernels with the GDPA pointwise.

A row of the backend table (kernels/gdpa/backends.py) beside the Triton kernels. Forward: FA4's
`FlashAttentionForwardSm90` with its softmax replaced by act(alpha*s) (fwd.py); backward: FA4's
`FlashAttentionBackwardSm90` with its per-query-block pointwise replaced (bwd.py); activations written once
for device and CPU checks (activations.py); configuration, compile cache and launches (launch.py).
Design, measurements and what limits each gap: NOTES.md beside this file.

Importing this package is cheap and works anywhere: flash-attn-4 (and its CuTe DSL) is imported on the
first call of `unavailable()`, `forward()` or `backward()`, never at import.

Contract (kernels/gdpa/backends.py):
    unavailable(device) -> str | None               why this backend cannot run on `device`
    unsupported(call) -> str | None                 host-only: shapes, dtypes, activation (call: GDPACall)
    forward(call, band, options, out=None, record=None) -> out
    backward(call, do, band, options, out=None, record=None) -> (dq, dk, dv)
`band` (kernels/gdpa/bands.py) restricts a launch to the sequences of one length band through FA4's seqused
vectors; `out` is written in place (the rows of the band's sequences). No call reads device memory back.
Causal follows HSTU (key j kept for query i >= j): the kernels apply it per sequence from the top-left
corner, which is FA4's (bottom-right) causal mask only where Lq == Lk — self-attention, q_offsets ==
kv_offsets. `unsupported` refuses a causal call whose q and k row totals differ; with equal totals it
cannot see unequal per-sequence lengths without reading the offsets (a host sync), so that case is the
caller's contract (the harness's correctness gate would flag it).
"""

from __future__ import annotations

import torch

from kernels.activations import ACTIVATION_NAMES
from support.optional import import_problem

INSTALL_HINT = "pip install -e '.[fa4]'"
SUPPORTED_HEAD_DIMS = (64, 128)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
# every activation the op knows (kernels/activations.py is a light module: names and CPU math only)
SUPPORTED_ACTIVATIONS = ACTIVATION_NAMES
SM100_REASON = (
    "sm100 (Blackwell) not supported yet: the GDPA pointwise is written for FA4's sm90 kernels "
    "(FA4's sm100 kernels need the same port; kernels/gdpa/hopper/NOTES.md)"
)

_PACKAGE_REASON: list = []  # [reason or None] once flash-attn-4's import was tried
_DEVICE_REASON: dict = {}


def _package_reason() -> str | None:
    if not _PACKAGE_REASON:
        modules = ("cutlass.cute", "flash_attn.cute.flash_bwd_sm90", "flash_attn.cute.flash_fwd_sm90")
        _PACKAGE_REASON.append(import_problem(modules, "flash-attn-4", ("flash_attn", "cutlass"), INSTALL_HINT))
    return _PACKAGE_REASON[0]


def unavailable(device) -> str | None:
    """None where the Hopper kernels can run on `device`, else why not (cached per device)."""
    device = torch.device(device)
    if device not in _DEVICE_REASON:
        _DEVICE_REASON[device] = _package_reason() or _device_reason(device)
    return _DEVICE_REASON[device]


def _device_reason(device: torch.device) -> str | None:
    if device.type != "cuda":
        return f"runs on CUDA devices only, not {device.type}"
    if not torch.cuda.is_available():
        return "CUDA not available"
    major, minor = torch.cuda.get_device_capability(device)
    if major in (10, 11):
        return SM100_REASON
    if (major, minor) != (9, 0):
        return f"needs an sm90 (Hopper) GPU; found {torch.cuda.get_device_name(device)} sm_{major}{minor}"
    return None


def unsupported(call) -> str | None:
    """None where this call (kernels.gdpa.call.GDPACall) is supported (host-only checks: no device memory
    is read)."""
    q, k, v = call.q, call.k, call.v
    if q.dtype not in SUPPORTED_DTYPES:
        return f"dtype {str(q.dtype).replace('torch.', '')} not supported; allowed: float16, bfloat16"
    if k.dtype != q.dtype or v.dtype != q.dtype:
        return "q, k and v must share one dtype"
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        return "q, k, v must be [rows, heads, head_dim]"
    if q.shape[2] not in SUPPORTED_HEAD_DIMS:
        return f"head dim {q.shape[2]} not supported; allowed: {', '.join(map(str, SUPPORTED_HEAD_DIMS))}"
    if k.shape[2] != q.shape[2] or v.shape[2] != q.shape[2]:
        return "q, k and v must share one head dim"
    if k.shape[1] != v.shape[1] or k.shape[0] != v.shape[0]:
        return "k and v must have the same shape"
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        return f"query heads {q.shape[1]} not a multiple of key/value heads {k.shape[1]}"
    if call.activation not in ACTIVATION_NAMES:
        return f"activation {call.activation!r} not supported; allowed: {', '.join(ACTIVATION_NAMES)}"
    if call.causal and q.shape[0] != k.shape[0]:
        return (
            "causal needs self-attention lengths (Lq == Lk per sequence); q and k row totals differ "
            f"({q.shape[0]} vs {k.shape[0]})"
        )
    return None


def forward(call, band, options=None, out=None, record=None):
    """Write `out` [ΣLq, H, D] (new when None) for the sequences of `band`: qk_scale * act(alpha * Q K^T) V
    per sequence. `options` (GDPAOptions) pins nothing here: the Hopper kernels have one configuration."""
    from kernels.gdpa.hopper import launch

    return launch.forward(call, band, out=out, record=record)


def backward(call, do, band, options=None, out=None, record=None):
    """(dq, dk, dv) like (q, k, v), the rows of `band`'s sequences written: by one CTA per SM walking the key
    tiles longest queries first up to 2,048 sequences, by FA4's grid of one CTA per key tile above
    (plans.backward_walks says why)."""
    from kernels.gdpa.hopper import launch, plans

    return launch.backward(call, do, band, out=out, record=record, persistent=plans.backward_walks(call.batch))


__all__ = [
    "SUPPORTED_ACTIVATIONS",
    "SUPPORTED_DTYPES",
    "SUPPORTED_HEAD_DIMS",
    "backward",
    "forward",
    "unavailable",
    "unsupported",
]
