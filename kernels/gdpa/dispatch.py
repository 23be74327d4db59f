"""Which backend runs a GDPA call: the Triton kernels (fwd.py, bwd.py) run everything the op accepts;
the Hopper kernel (kernels/gdpa/hopper, issue 17) runs where it is available, supports the call and —
for backend="auto" — the measured rule says it wins. The forward and the backward choose independently.

The Hopper package is imported lazily and defensively: where it is absent or fails to import, the
backend is "unavailable" with that reason. Its contract (kernels/gdpa/hopper/__init__.py):
`unavailable(device)`, `unsupported(q, k, v, activation, causal)`, `forward(...)`, `backward(...)`.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

import torch

from kernels.gdpa.options import GDPAOptions

HOPPER_MODULE = "kernels.gdpa.hopper"
HOPPER_CONTRACT = ("unavailable", "unsupported", "forward", "backward")

# Where backend="auto" picks the Hopper kernel: every length named must be at least its value (an empty
# table: wherever Hopper supports the call). Measured on one H200 with both backends in one process
# (kernels/gdpa/hopper/NOTES.md, run 3): the Hopper forward beats Triton only where queries and keys are
# both long (set 1 L >= 1024: 1.04-1.10x, log-normal max 4096: 1.17x); Triton leads with short queries or
# keys (L <= 512, KV 256, target/seed pairings: 1.2-2.0x). The Hopper backward beats Triton's on all 17
# measured shapes (1.11-1.53x).
HOPPER_MIN_LENGTHS = {
    "fwd": {"max_q": 1024, "max_kv": 1024},
    "bwd": {},
}
RULE_SOURCE = "measured on H200, kernels/gdpa/hopper/NOTES.md"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@functools.cache
def hopper_backend() -> tuple[ModuleType | None, str | None]:
    """(the Hopper backend module, None), or (None, why it cannot be used). Imported once per process."""
    try:
        module = importlib.import_module(HOPPER_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name == HOPPER_MODULE:
            return None, f"the Hopper backend is not in this tree ({HOPPER_MODULE} missing)"
        return None, f"importing {HOPPER_MODULE} failed: {_one_line(exc)}"
    except Exception as exc:  # a broken optional backend must not break the op
        return None, f"importing {HOPPER_MODULE} failed: {_one_line(exc)}"
    missing = [name for name in HOPPER_CONTRACT if not callable(getattr(module, name, None))]
    if missing:
        return None, f"{HOPPER_MODULE} lacks {', '.join(missing)}"
    return module, None


def hopper_unavailable(device: torch.device) -> str | None:
    """None where the Hopper backend can run on `device`, else why not."""
    module, why = hopper_backend()
    if module is None:
        return why
    try:
        return module.unavailable(torch.device(device))
    except Exception as exc:
        return f"availability check failed: {_one_line(exc)}"


def hopper_unsupported(q, k, v, activation: str, causal: bool) -> str | None:
    """None where the (available) Hopper backend supports this call, else why not."""
    module, why = hopper_backend()
    if module is None:
        return why
    try:
        return module.unsupported(q, k, v, activation, causal)
    except Exception as exc:
        return f"support check failed: {_one_line(exc)}"


def _rule(mode: str, max_q: int, max_kv: int) -> str | None:
    """None where the length rule picks Hopper, else the length that keeps the call on Triton."""
    lengths = {"max_q": max_q, "max_kv": max_kv}
    for name, least in HOPPER_MIN_LENGTHS[mode].items():
        if lengths[name] < least:
            return f"{name} {lengths[name]} < {least} (Triton faster there; {RULE_SOURCE})"
    return None


def choose(
    mode: str, q, k, v, max_q: int, max_kv: int, activation: str, causal: bool, options: GDPAOptions
) -> tuple[str, str]:
    """(backend, reason) for the forward (`mode` "fwd") or the backward ("bwd") of one call. Host-only:
    reads shapes, dtypes and devices, never tensor values. backend="hopper" where it cannot run raises
    ValueError (one line); it never falls back."""
    if mode not in HOPPER_MIN_LENGTHS:
        raise ValueError(f"dispatch mode {mode!r}; allowed: {', '.join(HOPPER_MIN_LENGTHS)}")
    if options.backend == "triton":
        return "triton", "triton: backend='triton' requested"
    why = hopper_unavailable(q.device)
    if why is None:
        why_not = hopper_unsupported(q, k, v, activation, causal)
        if options.backend == "hopper":
            if why_not is not None:
                raise ValueError(f"gdpa: backend='hopper' does not support this call: {why_not}")
            return "hopper", "hopper: backend='hopper' requested"
        if why_not is not None:
            return "triton", f"triton: hopper does not support this call: {why_not}"
        slower = _rule(mode, max_q, max_kv)
        if slower is not None:
            return "triton", f"triton: {slower}"
        limits = " and ".join(f"{name} >= {least}" for name, least in HOPPER_MIN_LENGTHS[mode].items())
        return "hopper", f"hopper: {limits or 'faster wherever supported'} ({RULE_SOURCE})"
    if options.backend == "hopper":
        raise ValueError(f"gdpa: backend='hopper' cannot run here: {why}")
    return "triton", f"triton: hopper unavailable: {why}"
