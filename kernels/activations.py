"""GDPA activations in PyTorch (docs/DESIGN.md §3): the exact forms the reference and the naive baselines use.

Names are stable: configs and results refer to them. The Triton kernels implement the same table in
`kernels/gdpa/activations.py`; `fast_*` differ there only by using the hardware tanh approximation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

_SQRT_2_OVER_PI = 0.7978845608028654


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def _relu_square(x: torch.Tensor) -> torch.Tensor:
    r = torch.relu(x)
    return r * r


def _hardswish(x: torch.Tensor) -> torch.Tensor:
    return x * torch.clamp(x + 3.0, 0.0, 6.0) / 6.0


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "raw": lambda x: x,
    "relu": torch.relu,
    "relu_square": _relu_square,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.01),
    "gelu": lambda x: 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "gelu_tanh": _gelu_tanh,
    "fast_gelu": _gelu_tanh,
    "silu": lambda x: x * torch.sigmoid(x),
    "fast_silu": lambda x: x * (0.5 * torch.tanh(0.5 * x) + 0.5),
    "hardswish": _hardswish,
}

ACTIVATION_NAMES = tuple(ACTIVATIONS)

# What a PyTorch user would call for each activation: torch's own (single-kernel) functions where they
# exist. The naive baselines use these; written-out formulas would launch one kernel per operation over
# the padded B·H·L² score tensor and understate what eager PyTorch can do.
TORCH_NATIVE: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    **ACTIVATIONS,
    "relu_square": lambda x: torch.square(torch.relu(x)),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "fast_gelu": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "fast_silu": F.silu,
    "hardswish": F.hardswish,
}


def get_activation(name: str, native: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
    try:
        return (TORCH_NATIVE if native else ACTIVATIONS)[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; allowed: {', '.join(ACTIVATION_NAMES)}") from None
