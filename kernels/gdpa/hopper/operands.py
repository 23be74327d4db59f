"""Tensors as the Hopper kernels take them: CuTe dtypes, operand layout, cached device-side constants."""

from __future__ import annotations

from collections import OrderedDict

import cutlass
import torch

TORCH_TO_CUTE = {torch.float16: cutlass.Float16, torch.bfloat16: cutlass.BFloat16}

_CONSTANTS: OrderedDict = OrderedDict()
_CONSTANTS_MAX = 8


def filled(device: torch.device, shape: tuple, value: float) -> torch.Tensor:
    """A read-only fp32 tensor of `value`, cached (one fill launch per new (device, shape, value))."""
    key = (device, shape, value)
    t = _CONSTANTS.get(key)
    if t is None:
        t = torch.full(shape, value, dtype=torch.float32, device=device)
        _CONSTANTS[key] = t
        if len(_CONSTANTS) > _CONSTANTS_MAX:
            _CONSTANTS.popitem(last=False)
    else:
        _CONSTANTS.move_to_end(key)
    return t


def as_kernel_operand(t: torch.Tensor) -> torch.Tensor:
    # the kernels need a unit stride on the head dim and 16-byte aligned rows (TMA)
    return t if t.stride(-1) == 1 and (t.stride(-2) * t.element_size()) % 16 == 0 else t.contiguous()


def cute_dtype(t: torch.Tensor):
    return TORCH_TO_CUTE[t.dtype]
