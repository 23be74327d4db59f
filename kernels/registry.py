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
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from kernels.modes import MODES, SEMANTICS
from support.environment import PROVIDER_MODULES as PROVIDER_MODULES_VARIABLE
from support.environment import provider_modules
from support.text import one_line
from workloads.batch import JaggedBatch

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


#: triton.testing.do_bench's L2-flush buffer (the NVIDIA driver's get_empty_cache_for_benchmark, triton 3.6)
TRITON_AUTOTUNE_BYTES = 256 * 2**20


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
    # Bytes a GPU call of a new shape allocates beside the case's tensors while it tunes, then frees: a
    # Triton autotuner's timing flushes L2 with a buffer of its own (TRITON_AUTOTUNE_BYTES). The H200 saw
    # it as our Triton backward peaking 256 MiB over the estimate (tests/test_resources.py, 2026-12-02).
    autotune_bytes: ClassVar[int] = 0

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

    def replay_options(self, kernel_config: dict | None) -> dict | None:
        """Options to lay over this provider's own so that a fresh instance in another process runs what a case
        recorded (`kernel_config`, from `kernel_configs()`): the views measured in a child process (Nsight
        Compute's) then describe the kernels that were timed. None (the default): its options already do."""
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


# An installed package adds providers by declaring an entry point in this group (as pytest, asv and
# tritonbench plugins are found): `[project.entry-points."gdpa_bench.providers"] my_kernels = "my_pkg.providers"`.
ENTRY_POINT_GROUP = "gdpa_bench.providers"
BUILT_IN = "built-in"
ENV_MODULE = f"${PROVIDER_MODULES_VARIABLE}"
PLUGIN = "plugin"
CODE = "code"


@dataclass(frozen=True)
class ProviderSource:
    """Where a provider came from: `kind` is built-in, $GDPA_BENCH_PROVIDERS, plugin (an entry point of an
    installed distribution) or code (registered by a module imported some other way)."""

    kind: str
    module: str
    distribution: str | None = None
    version: str | None = None
    entry_point: str | None = None  # `name = value` as the distribution declares it

    def describe(self) -> str:
        """One phrase for `gdpa-bench env`: `built-in`, `plugin my-kernels 0.1.0 (entry point ...)`, ..."""
        if self.kind == PLUGIN:
            dist = " ".join(x for x in (self.distribution or "an unnamed distribution", self.version) if x)
            return f"plugin {dist} (entry point {self.entry_point})"
        if self.kind == ENV_MODULE:
            return f"{ENV_MODULE} module {self.module}"
        if self.kind == CODE:
            return f"registered by {self.module}"
        return BUILT_IN

    def record(self) -> dict:
        return {"kind": self.kind, "module": self.module, "distribution": self.distribution,
                "version": self.version, "entry_point": self.entry_point}  # fmt: skip


@dataclass(frozen=True)
class PluginFailure:
    """An entry point of the group that did not load: its providers are left out, the others run."""

    source: ProviderSource
    error: str

    def line(self) -> str:
        s = self.source
        return one_line(
            f"warning: provider plugin {s.distribution or '?'}{' ' + s.version if s.version else ''} (entry point "
            f"{s.entry_point}) does not load: {self.error}; its providers are left out, the others run",
            600,
        )


_REGISTRY: dict[str, type[Provider]] = {}
_SOURCES: dict[str, ProviderSource] = {}  # names registered while a known source loaded
_FAILURES: list[PluginFailure] = []
_loaded = False
_plugins_loaded = False


def register(cls: type[Provider]) -> type[Provider]:
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.semantics not in SEMANTICS:
        raise ValueError(f"{cls.__name__}.semantics must be one of {SEMANTICS}")
    _REGISTRY[cls.name] = cls
    return cls


def _track(source: ProviderSource, load: Callable[[], Any]) -> Any:
    """Run `load` (an import); every name it registers (or re-registers) comes from `source`."""
    before = dict(_REGISTRY)
    try:
        return load()
    finally:
        for name, cls in _REGISTRY.items():
            if before.get(name) is not cls:
                _SOURCES[name] = source


def _entry_points() -> list:
    """The group's entry points, each once (a distribution on sys.path twice lists its entry points twice)."""
    from importlib.metadata import entry_points

    seen, out = set(), []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if (ep.name, ep.value) not in seen:
            seen.add((ep.name, ep.value))
            out.append(ep)
    return sorted(out, key=lambda ep: ep.name)


def _plugin_source(ep) -> ProviderSource:
    dist = getattr(ep, "dist", None)
    name = version = None
    if dist is not None:
        try:
            name, version = dist.metadata["Name"], dist.version
        except Exception:  # broken metadata: the entry point still names itself
            pass
    return ProviderSource(PLUGIN, ep.value.split(":")[0], name, version, f"{ep.name} = {ep.value}")


def _load_plugin(ep) -> None:
    """Load one entry point: a module whose import registers its providers, or a Provider class (registered
    here). Whatever goes wrong is a `PluginFailure` — one line naming the distribution and the error — and
    the registry is left as it was before (a plugin never replaces a provider another source registered)."""
    source = _plugin_source(ep)
    before, sources_before = dict(_REGISTRY), dict(_SOURCES)
    try:
        target = _track(source, ep.load)
        if isinstance(target, type) and issubclass(target, Provider):
            if _REGISTRY.get(target.name) is not target:
                _track(source, lambda: register(target))
        elif not isinstance(target, types.ModuleType):
            raise TypeError(f"{ep.value} is {type(target).__name__}, not a module or a Provider subclass")
        taken = [n for n, cls in before.items() if _REGISTRY.get(n) is not cls]
        if taken:
            owner = _source_of(taken[0], before[taken[0]], sources_before)
            raise ValueError(
                f"it registers {taken[0]!r}, a name already taken ({owner.describe()}); give its provider another name"
            )
    except BaseException as exc:  # ImportError, or anything the module raises while it loads (SystemExit too)
        if isinstance(exc, KeyboardInterrupt):
            raise
        _REGISTRY.clear()
        _REGISTRY.update(before)
        _SOURCES.clear()
        _SOURCES.update(sources_before)
        failure = PluginFailure(source, one_line(exc))
        _FAILURES.append(failure)
        print(failure.line(), file=sys.stderr, flush=True)


def _load_all() -> None:
    """Import every provider module: the built-in ones, the entry points of installed plugins (group
    `gdpa_bench.providers`; one that fails is one line on stderr and left out), then the modules named in
    GDPA_BENCH_PROVIDERS (comma-separated module paths) — how a user adds a kernel without touching this
    package. A GDPA_BENCH_PROVIDERS module that does not import is a `ProviderModuleError` (one line,
    raised again on the next call): the user named it for this run."""
    global _loaded, _plugins_loaded
    if _loaded:
        return
    for module in PROVIDER_MODULES:
        _track(ProviderSource(BUILT_IN, module), lambda m=module: importlib.import_module(m))
    if not _plugins_loaded:
        _plugins_loaded = True  # once per process: a failing plugin is reported once
        for ep in _entry_points():
            _load_plugin(ep)
    for module in provider_modules():
        try:
            _track(ProviderSource(ENV_MODULE, module), lambda m=module: importlib.import_module(m))
        except Exception as exc:  # ImportError, or anything the module raises while it loads
            raise ProviderModuleError(
                f"{PROVIDER_MODULES_VARIABLE}: the module {module!r} does not import ({one_line(exc)}); allowed: "
                "comma-separated importable module paths"
            ) from None
    _loaded = True


def provider_source(name: str, cls: type[Provider] | None = None) -> ProviderSource:
    """Where provider `name` came from (a module imported before the registry loaded, as tests do, is
    recognised by its module)."""
    cls = cls or provider_class(name)
    return _source_of(name, cls, _SOURCES) if _REGISTRY.get(name, cls) is cls else _source_of(name, cls, {})


def _source_of(name: str, cls: type[Provider], sources: dict[str, ProviderSource]) -> ProviderSource:
    src = sources.get(name)
    if src is not None:
        return src
    module = cls.__module__
    if module in PROVIDER_MODULES:
        return ProviderSource(BUILT_IN, module)
    if module in provider_modules():
        return ProviderSource(ENV_MODULE, module)
    return ProviderSource(CODE, module)


def plugin_failures() -> list[PluginFailure]:
    """The plugins that did not load in this process (after the registry loaded)."""
    _load_all()
    return list(_FAILURES)


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
