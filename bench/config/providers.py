"""A config's provider entries as labelled `ProviderSpec`s (docs/DESIGN.md §11), and the provider
modules a user adds through GDPA_BENCH_PROVIDERS. Every problem is one line: a `ConfigError` naming the
file and the entry, or a `UsageError` naming the module that does not import."""

from __future__ import annotations

from bench.config.cases import ProviderSpec
from bench.errors import ConfigError, UsageError
from kernels.registry import ProviderModuleError, get_provider, plugin_failures, provider_names
from support.suggest import did_you_mean


def _spec(entry, where: str, known: list[str], path) -> ProviderSpec:
    if entry.name not in known:
        # the provider may be one a plugin that did not load would have added: say so
        broken = "".join(f"; {f.source.describe()} did not load ({f.error})" for f in plugin_failures()[:1])
        raise ConfigError(
            f"{path}: {where}: unknown provider {entry.name!r}; allowed: {', '.join(known)}"
            + did_you_mean(entry.name, known)
            + broken
        )
    try:
        get_provider(entry.name, entry.options or None)  # parses the options: a bad one fails here
    except ValueError as exc:
        raise ConfigError(f"{path}: {where}.options: {exc}") from None
    environment = None if entry.environment is None else entry.environment.model_dump(exclude_none=True)
    return ProviderSpec(entry.label or entry.name, entry.name, dict(entry.options), environment)


def load_provider_modules() -> list[str]:
    """The registered provider names, after importing the modules named in GDPA_BENCH_PROVIDERS; a module
    that does not import is a one-line UsageError naming it."""
    try:
        return provider_names()
    except ProviderModuleError as exc:
        raise UsageError(str(exc)) from None


def resolve_providers(model, path) -> tuple[list[ProviderSpec], dict[str, list[ProviderSpec]]]:
    """The labelled providers of a validated config model (`bench.config.BenchConfig`) and of each of
    its sets that has its own list; one-line errors naming `path`."""
    known = load_provider_modules()
    top: list[ProviderSpec] = []
    defined: dict[str, ProviderSpec] = {}
    for i, e in enumerate(model.providers):
        spec = _spec(e, f"providers.{i}", known, path)
        if spec.label in defined:
            raise ConfigError(
                f"{path}: providers.{i}: the label {spec.label!r} is used twice; give each entry its own label"
            )
        defined[spec.label] = spec
        top.append(spec)
    per_set: dict[str, list[ProviderSpec]] = {}
    for s in model.sets:
        if s.providers is None:
            continue
        specs: list[ProviderSpec] = []
        for i, e in enumerate(s.providers):
            where = f"sets.{s.name}.providers.{i}"
            if e.label is None and not e.options and e.environment is None and e.name in defined:
                spec = defined[e.name]  # a label (or a plain name) defined at the top level
            else:
                spec = _spec(e, where, known, path)
                if spec.label in defined and defined[spec.label] != spec:
                    raise ConfigError(
                        f"{path}: {where}: the label {spec.label!r} is already defined with other "
                        "options; give this entry its own label"
                    )
                defined.setdefault(spec.label, spec)
            if any(p.label == spec.label for p in specs):
                raise ConfigError(f"{path}: {where}: the label {spec.label!r} is listed twice")
            specs.append(spec)
        per_set[s.name] = specs
    return top, per_set
