"""GDPA activations in PyTorch (DESIGN §3): the exact forms the reference and the naive baselines use.

Names are stable: configs and results refer to them. The Triton kernels implement the same table in
`kernels/gdpa/activations.py`; `fast_*` differ there only by using the hardware tanh approximation.
"""
from __future__ import annotations

import math
from typing import Callable

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


def get_activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    try:
        return ACTIVATIONS[name]
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; allowed: {', '.join(ACTIVATION_NAMES)}") from None
