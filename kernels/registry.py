"""Provider registry: every kernel the harness can time, registered by name (tritonbench-style).

A provider is one class in one module. It says its name and semantics (`gdpa` or `softmax`), whether it
can run here (and why not), whether it supports a given case (and why not), and builds zero-argument
callables for `fwd`, `bwd` and `fwd_bwd` so that every piece of setup happens outside the timed region.

Options: a provider may take named options (a config's provider entry
`{name: gdpa_triton, label: pinned, options: {fwd_tiles: [64, 32, 4, 1]}}`). They are parsed once, when
the provider is instantiated (`get_provider(name, options)`), so a bad option is an error at config
load, never mid-sweep; `options_record()` is what the runner stores per case as `provider_options`.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from support.environment import PROVIDER_MODULES as PROVIDER_MODULES_VARIABLE
from support.environment import provider_modules
from support.text import one_line
from workloads.batch import JaggedBatch

MODES = ("fwd", "bwd", "fwd_bwd")
SEMANTICS = ("gdpa", "softmax")

# Modules that hold providers; each registers itself on import. A module whose optional dependency is
# missing still imports: the provider then reports itself unavailable with the reason.
PROVIDER_MODULES = (
    "kernels.reference",
    "kernels.naive",
    "kernels.gdpa.provider",
    "kernels.fa4",
    "kernels.sdpa",
    "kernels.torch_varlen",
    "kernels.flex_attention",
    "kernels.meta_gdpa",
    "kernels.meta_gdpa_cute",
    "kernels.meta_gdpa_tlx",
    "kernels.hstu",
)


@dataclass(frozen=True)
class CaseSpec:
    """What to compute, independent of the data: the math of one case."""

    mode: str = "fwd"
    activation: str = "fast_gelu"
    alpha: float = 1.0
    qk_scale: float = 1.0
    causal: bool = False
    softmax_scale: float | None = None  # softmax providers; None means 1/sqrt(D)

    def gdpa_math(self) -> dict:
        """activation, alpha, qk_scale, causal: the keywords of a GDPA call (kernels.gdpa.gdpa, GDPACall)."""
        return {"activation": self.activation, "alpha": self.alpha, "qk_scale": self.qk_scale, "causal": self.causal}

    def resolved_softmax_scale(self, head_dim: int) -> float:
        return self.softmax_scale if self.softmax_scale is not None else 1.0 / math.sqrt(head_dim)


class Provider:
    name: ClassVar[str] = ""
    semantics: ClassVar[str] = "gdpa"
    description: ClassVar[str] = ""
    # Seconds of one-time work per process that all of this provider's cases share (a JIT compile
    # cache). The multi-GPU sharder keeps such a provider's cases on one worker, so one process pays it.
    process_setup_s: ClassVar[float] = 0.0
    # How the scores take memory, for the harness's estimate before anything is allocated
    # (bench.config.resources): "tiles" (a fused kernel: O(tokens)), "padded" (B·H·maxLq·maxLk score tensors
    # of the padded layout), "padded_fused" (the same, activation and mask fused by a compiler),
    # "per_sequence" (fp32, one sequence at a time; with autograd the graph keeps every sequence's).
    scores_memory: ClassVar[str] = "tiles"

    def __init__(self, options: Mapping[str, Any] | None = None):
        self.options = self.parse_options(dict(options or {}))

    def parse_options(self, options: dict) -> Any:
        """Validate `options` and return their parsed form (kept as `self.options`). Raise ValueError
        with one line naming the option and what is allowed. The default takes no options."""
        if options:
            raise ValueError(f"{self.name}: takes no options, got {', '.join(map(repr, options))}")
        return None

    def options_record(self) -> dict | None:
        """JSON-able form of the options in force (recorded per case as `provider_options`); None when
        the provider has none."""
        return None

    def availability(self, device: torch.device) -> str | None:
        """None when this provider can run on `device`; otherwise the reason it cannot."""
        return None

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        """None when this case is supported; otherwise the reason it is not (the case is `skipped`)."""
        return None

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        """Output `[ΣLq, H, D]`, differentiable with respect to batch.q, batch.k, batch.v."""
        raise NotImplementedError

    def kernel_configs(self) -> dict | None:
        """What this provider ran for the case just built and run once (e.g. autotuned tile configs),
        recorded per case as `kernel_config` (JSON-able); None when it has nothing to say."""
        return None

    def build(self, batch: JaggedBatch, spec: CaseSpec, mode: str) -> Callable[[], Any]:
        """A zero-argument callable that does exactly the work timed for `mode`.

        The default goes through `forward` and autograd. `bwd` keeps one forward graph alive and times
        `torch.autograd.grad` only (no accumulation into .grad, so no extra add kernels are timed).
        """
        if mode == "fwd":
            b = batch

            def run_fwd():
                with torch.no_grad():
                    return self.forward(b, spec)

            return run_fwd
        b = batch.with_grad()
        inputs = (b.q, b.k, b.v)
        dout = batch.dout
        if mode == "bwd":
            out = self.forward(b, spec)
            return lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True)
        if mode == "fwd_bwd":

            def run_fwd_bwd():
                out = self.forward(b, spec)
                return torch.autograd.grad(out, inputs, dout)

            return run_fwd_bwd
        raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")


def cuda_reason(device) -> str | None:
    """None where `device` is a CUDA device of this machine, else why not: a GPU-only provider's first
    availability check."""
    if not torch.cuda.is_available():
        return "CUDA not available"
    device = torch.device(device)
    return None if device.type == "cuda" else f"runs on CUDA devices only, not {device}"


def capability_reason(device, ok: Callable[[int, int], bool], needs: str) -> str | None:
    """None where the CUDA `device`'s compute capability (major, minor) is `ok`, else `needs ...; found ...`."""
    major, minor = torch.cuda.get_device_capability(device)
    if ok(major, minor):
        return None
    return f"needs {needs}; found {torch.cuda.get_device_name(device)} sm_{major}{minor}"


class ProviderModuleError(ImportError):
    """A module named in GDPA_BENCH_PROVIDERS does not import: one line naming it."""


_REGISTRY: dict[str, type[Provider]] = {}
_loaded = False


def register(cls: type[Provider]) -> type[Provider]:
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.semantics not in SEMANTICS:
        raise ValueError(f"{cls.__name__}.semantics must be one of {SEMANTICS}")
    _REGISTRY[cls.name] = cls
    return cls


def _load_all() -> None:
    """Import every provider module: the built-in ones, then those named in GDPA_BENCH_PROVIDERS
    (comma-separated module paths) — how a user adds a kernel without touching this package. A user's
    module that does not import is a `ProviderModuleError` (one line), raised again on the next call."""
    global _loaded
    if _loaded:
        return
    for module in PROVIDER_MODULES:
        importlib.import_module(module)
    for module in provider_modules():
        try:
            importlib.import_module(module)
        except Exception as exc:  # ImportError, or anything the module raises while it loads
            raise ProviderModuleError(
                f"{PROVIDER_MODULES_VARIABLE}: the module {module!r} does not import ({one_line(exc)}); allowed: "
                "comma-separated importable module paths"
            ) from None
    _loaded = True


def provider_names() -> list[str]:
    _load_all()
    return list(_REGISTRY)


def provider_class(name: str) -> type[Provider]:
    """The class registered as `name` (its class attributes, without building an instance)."""
    _load_all()
    if name not in _REGISTRY:
        raise KeyError(f"unknown provider {name!r}; known: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def get_provider(name: str, options: Mapping[str, Any] | None = None) -> Provider:
    """A new instance of provider `name` with `options` parsed; ValueError from parse_options
    propagates unchanged (one line, for the config loader to report)."""
    return provider_class(name)(options)
