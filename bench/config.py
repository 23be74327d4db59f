"""Benchmark configs: YAML (or a dict) → validated models → the cases a run executes (docs/DESIGN.md §7).

A config names the hardware target and power cap, the workload sets (shapes, dtype, activation,
max lengths, length family and its parameters, the Q/KV pairing rule, seeds), the providers, the modes,
the baseline provider, timing budgets and the output directory. Any list-valued workload field is a
sweep axis (bench.cases).

A provider entry is a registry name or a mapping `{name, label, options}`: the same provider may run
twice with different options under two labels, e.g. `{name: gdpa_triton, label: gdpa_triton_pinned,
options: {fwd_tiles: [64, 32, 4, 1]}}`. The label (default: the name) names the cases and must be
unique; a set's `providers:` may repeat a label defined at the top level by naming it. Options are
parsed by the provider when the config loads, so a bad option is a config error.

Every problem becomes one `ConfigError` line naming the file, the field and what is allowed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bench.cases import Case, ProviderSpec, Workload, as_list, cases_of, dtype_of, expand_set
from bench.errors import ConfigError
from kernels.activations import ACTIVATION_NAMES
from kernels.registry import MODES, get_provider, provider_names
from workloads import check_family_params, check_pairing_params

DTYPES = ("bf16", "fp16", "fp32")
DICT_SOURCE = "<config dict>"  # how errors name a config given as a Python dict
LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")

__all__ = [
    "DICT_SOURCE",
    "MODES",
    "BenchConfig",
    "Case",
    "ConfigError",
    "LoadedConfig",
    "ProviderSpec",
    "Workload",
    "default_run_dir",
    "dtype_of",
    "load_config",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Timing(_Strict):
    warmup_ms: float = Field(25.0, gt=0)
    rep_ms: float = Field(100.0, gt=0)
    min_reps: int = Field(5, ge=1)
    max_reps: int = Field(2000, ge=1)
    flush_l2: bool = True
    cuda_graph: bool = False


class Correctness(_Strict):
    enabled: bool = True
    tolerance: float = Field(2e-2, gt=0)
    max_check_seqs: int = Field(16, ge=1)


class Power(_Strict):
    enabled: bool = True
    period_ms: float = Field(10.0, gt=0)
    energy_loop_s: float = Field(1.0, ge=0)
    # The energy loop before the timed samples instead of after: the samples then start in the
    # power-capped steady state rather than in whatever state the previous case left (docs/DESIGN.md §5).
    energy_loop_first: bool = False
    # case ids matching this regex are timed twice, with and without the sampling thread, to measure
    # what monitoring costs
    overhead_check: str | None = None


class Hardware(_Strict):
    target: str | None = None  # the GPU this config was written for (e.g. B200); informational
    gpu: str | None = None  # override the detected name for the datasheet table
    power_cap_w: float | None = Field(None, gt=0)
    peak_tflops: dict[str, float] | None = None
    hbm_tb_s: float | None = Field(None, gt=0)
    calibrate: bool = True
    calibrate_seconds: float = Field(2.0, gt=0)

    @field_validator("peak_tflops")
    @classmethod
    def _dtypes(cls, v):
        if v is not None:
            bad = [k for k in v if k not in DTYPES]
            if bad:
                raise ValueError(f"unknown dtype {bad[0]!r}; allowed: {', '.join(DTYPES)}")
        return v


class ProviderEntry(_Strict):
    name: str = Field(min_length=1)
    label: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("label")
    @classmethod
    def _label(cls, v):
        if v is not None and not LABEL_RE.fullmatch(v):
            raise ValueError(f"label {v!r}: allowed: letters, digits and _ . + - (it becomes part of case ids)")
        return v


def _entries(v):
    """A provider list may mix names and mappings: a name is `{name: ...}`."""
    return [{"name": e} if isinstance(e, str) else e for e in v] if isinstance(v, list) else v


class WorkloadSet(_Strict):
    name: str = Field(min_length=1)
    B: int = Field(gt=0)
    H: int = Field(gt=0)
    Hkv: int | None = Field(None, gt=0)
    D: int = Field(gt=0)
    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    activation: str | list[str] = "fast_gelu"
    alpha: float = 1.0
    qk_scale: float = 1.0
    causal: bool = False
    max_len: int | list[int]
    lengths: dict[str, Any] = Field(default_factory=lambda: {"family": "uniform_fill", "fill": 1.0})
    kv: dict[str, Any] = Field(default_factory=lambda: {"rule": "self"})
    seed: int | list[int] = 0
    sort_by_length: bool | list[bool] = False
    modes: list[Literal["fwd", "bwd", "fwd_bwd"]] | None = None
    providers: list[ProviderEntry] | None = None

    @field_validator("providers", mode="before")
    @classmethod
    def _provider_entries(cls, v):
        return _entries(v)

    @field_validator("activation")
    @classmethod
    def _activation(cls, v):
        for a in as_list(v):
            if a not in ACTIVATION_NAMES:
                raise ValueError(f"unknown activation {a!r}; allowed: {', '.join(ACTIVATION_NAMES)}")
        return v

    @field_validator("max_len")
    @classmethod
    def _max_len(cls, v):
        for n in as_list(v):
            if not isinstance(n, int) or n <= 0:
                raise ValueError(f"max lengths must be positive integers, got {n!r}")
        return v

    @model_validator(mode="after")
    def _heads(self):
        hkv = self.Hkv or self.H
        if self.H % hkv:
            raise ValueError(f"H ({self.H}) must be a multiple of Hkv ({hkv})")
        return self


class BenchConfig(_Strict):
    name: str | None = None
    description: str = ""
    device: Literal["cuda", "cpu"] = "cuda"
    hardware: Hardware = Hardware()
    providers: list[ProviderEntry] = Field(min_length=1)
    baseline: str | None = None
    modes: list[Literal["fwd", "bwd", "fwd_bwd"]] = ["fwd", "bwd", "fwd_bwd"]
    timing: Timing = Timing()
    correctness: Correctness = Correctness()
    power: Power = Power()
    output_dir: str = "runs"
    sets: list[WorkloadSet] = Field(min_length=1)

    @field_validator("providers", mode="before")
    @classmethod
    def _provider_entries(cls, v):
        return _entries(v)

    @model_validator(mode="after")
    def _names(self):
        seen = set()
        for s in self.sets:
            if s.name in seen:
                raise ValueError(f"sets: the name {s.name!r} is used twice")
            seen.add(s.name)
        return self


@dataclass
class LoadedConfig:
    path: Path  # the file, or Path(DICT_SOURCE) for a dict
    model: BenchConfig
    sha256: str
    cases: list[Case] = field(default_factory=list)
    providers: dict[str, ProviderSpec] = field(default_factory=dict)  # label -> spec, config order
    data: dict | None = None  # the config itself when it was given as a dict (no file to point at)

    @property
    def name(self) -> str:
        if self.model.name:
            return self.model.name
        return "config" if str(self.path) == DICT_SOURCE else self.path.stem

    @property
    def baseline(self) -> str | None:
        return self.model.baseline


def default_run_dir(cfg: LoadedConfig) -> Path:
    """`<output_dir>/<config name>-<UTC time>`: where a run goes without --out."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path(cfg.model.output_dir) / f"{cfg.name}-{stamp}"


# ----------------------------------------------------------------------------------------- providers


def _spec(entry: ProviderEntry, where: str, known: list[str], path) -> ProviderSpec:
    if entry.name not in known:
        raise ConfigError(f"{path}: {where}: unknown provider {entry.name!r}; allowed: {', '.join(known)}")
    try:
        get_provider(entry.name, entry.options or None)  # parses the options: a bad one fails here
    except ValueError as exc:
        raise ConfigError(f"{path}: {where}.options: {exc}") from None
    return ProviderSpec(label=entry.label or entry.name, name=entry.name, options=dict(entry.options))


def resolve_providers(model: BenchConfig, path) -> tuple[list[ProviderSpec], dict[str, list[ProviderSpec]]]:
    """The labelled providers of the config and of each set that has its own list; one-line errors."""
    known = provider_names()
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
            if e.label is None and not e.options and e.name in defined:
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


# ------------------------------------------------------------------------------------------- loading


def _loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if p not in ("function-after",)) or "(top level)"


def _validation_message(exc: ValidationError, data: dict, path) -> str:
    err = exc.errors()[0]
    loc = list(err["loc"])
    # name sets by their `name` rather than their index, so the message points at the YAML
    if len(loc) >= 2 and loc[0] == "sets" and isinstance(loc[1], int):
        sets = data.get("sets") or []
        if loc[1] < len(sets) and isinstance(sets[loc[1]], dict) and "name" in sets[loc[1]]:
            loc[1] = sets[loc[1]]["name"]
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] == "literal_error":
        msg = f"{msg}, got {err.get('input')!r}"
    return f"{path}: {_loc(tuple(loc))}: {msg}"


def _read(source: str | Path | Mapping) -> tuple[Path, dict, bytes]:
    if isinstance(source, Mapping):
        data = dict(source)
        raw = json.dumps(data, sort_keys=True, default=str).encode()
        return Path(DICT_SOURCE), data, raw
    path = Path(source)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    raw = path.read_bytes()
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    return path, data, raw


def load_config(source: str | Path | Mapping) -> LoadedConfig:
    """Validate a config (a YAML file, or a dict with the same fields) and expand its cases.

    Raises `ConfigError` with one line naming the file (or `<config dict>`), the field and what is
    allowed."""
    path, data, raw = _read(source)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of config fields")
    try:
        model = BenchConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_validation_message(exc, data, path)) from None
    top, per_set = resolve_providers(model, path)
    labels = {p.label: p for p in top}
    for specs in per_set.values():
        labels.update({p.label: p for p in specs if p.label not in labels})
    if model.baseline is None:
        model = model.model_copy(update={"baseline": top[0].label})
    elif model.baseline not in labels:
        raise ConfigError(
            f"{path}: baseline: {model.baseline!r} is not one of the config's providers; allowed: {', '.join(labels)}"
        )

    def family_ok(set_name: str):
        def check(family, params, max_len):
            if not isinstance(family, str):
                raise ConfigError(f"{path}: sets.{set_name}.lengths.family: required (a length family name)")
            try:
                check_family_params(family, params, max_len=max_len)
            except ValueError as exc:
                raise ConfigError(f"{path}: sets.{set_name}.lengths: {exc}") from None

        return check

    def pairing_ok(set_name: str):
        def check(rule, params):
            try:
                check_pairing_params(rule, params)
            except ValueError as exc:
                raise ConfigError(f"{path}: sets.{set_name}.kv: {exc}") from None

        return check

    cases: list[Case] = []
    for s in model.sets:
        workloads = expand_set(s, family_ok(s.name), pairing_ok(s.name))
        cases += cases_of(workloads, list(s.modes or model.modes), per_set.get(s.name, top))
    return LoadedConfig(
        path=path,
        model=model,
        sha256=hashlib.sha256(raw).hexdigest(),
        cases=cases,
        providers=labels,
        data=data if isinstance(source, Mapping) else None,
    )
