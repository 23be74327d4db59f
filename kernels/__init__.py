"""Kernels under test: our GDPA Triton kernels, baselines, and the exact reference, behind one registry.

The registry's names are loaded on first use: `kernels.modes` (and with it the results layer, `compare`,
`fields`) must be importable without torch, which kernels.registry imports.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CaseSpec", "Provider", "get_provider", "provider_names", "register"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kernels import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'kernels' has no attribute {name!r}")
