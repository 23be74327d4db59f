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

from bench.cases import Case, ProviderSpec, as_list, cases_of, expand_set
from bench.errors import ConfigError
from bench.provider_specs import resolve_providers
from kernels.activations import ACTIVATION_NAMES
from support.text import one_line
from workloads import check_family_params, check_pairing_params, check_workload, resolve_family_params

DTYPES = ("bf16", "fp16", "fp32")
DICT_SOURCE = "<config dict>"  # how errors name a config given as a Python dict
LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")

__all__ = ["DICT_SOURCE", "BenchConfig", "LoadedConfig", "default_run_dir", "load_config"]


def _no_bools(v: Any) -> Any:
    """YAML `true` is a Python bool, and pydantic takes a bool for an int: `max_len: true` would run L=1."""
    for x in v if isinstance(v, list) else [v]:
        if isinstance(x, bool):
            raise ValueError(f"{x!r} is a boolean; allowed: an integer")
    return v


def _every(ok, message: str):
    """A validator: every value of a field that may be swept (one value or a list) passes `ok`, else
    `message` with the first one that does not."""

    def validate(v):
        for x in as_list(v):
            if not ok(x):
                raise ValueError(message.format(x))
        return v

    return validate


def _no_repeats(v: list | None) -> list | None:
    if v is not None:
        dup = next((m for i, m in enumerate(v) if m in v[:i]), None)
        if dup is not None:
            raise ValueError(f"{dup!r} is listed twice; allowed: each mode once")
    return v


class _Strict(BaseModel):
    # NaN and inf are never a sensible setting: `alpha: .nan` turned every case INCORRECT
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Timing(_Strict):
    warmup_ms: float = Field(25.0, gt=0)
    rep_ms: float = Field(100.0, gt=0)
    min_reps: int = Field(5, ge=1)
    max_reps: int = Field(2000, ge=1)
    flush_l2: bool = True
    cuda_graph: bool = False

    _ints = field_validator("min_reps", "max_reps", mode="before")(_no_bools)

    @model_validator(mode="after")
    def _reps(self):
        if self.min_reps > self.max_reps:
            raise ValueError(
                f"min_reps ({self.min_reps}) is above max_reps ({self.max_reps}); allowed: min_reps <= max_reps"
            )
        return self


class Correctness(_Strict):
    enabled: bool = True
    tolerance: float = Field(2e-2, gt=0)
    max_check_seqs: int = Field(16, ge=1)

    _ints = field_validator("max_check_seqs", mode="before")(_no_bools)


class Power(_Strict):
    enabled: bool = True
    period_ms: float = Field(10.0, gt=0)
    energy_loop_s: float = Field(1.0, ge=0)
    # The case runs back to back this long before the energy window opens, so the window starts loaded,
    # with NVML's 100 ms power reading refreshed and the cap controller past its first-second transient
    # (docs/DESIGN.md §5; docs/experiments/power-estimators.md).
    settle_s: float = Field(1.0, ge=0)
    # The energy loop before the timed samples instead of after: the samples then start in the
    # power-capped steady state rather than in whatever state the previous case left (docs/DESIGN.md §5).
    energy_loop_first: bool = False
    # case ids matching this regex are timed twice, with and without the sampling thread, to measure
    # what monitoring costs
    overhead_check: str | None = None

    @field_validator("overhead_check")
    @classmethod
    def _regex(cls, v):
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"{v!r} is not a valid regular expression ({exc}); allowed: a Python regex") from None
        return v


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

    _ints = field_validator("B", "H", "Hkv", "D", "max_len", "seed", mode="before")(_no_bools)
    _modes = field_validator("modes")(_no_repeats)

    _providers = field_validator("providers", mode="before")(_entries)

    _seed = field_validator("seed")(_every(lambda n: n >= 0, "seeds must be integers >= 0, got {!r}"))
    _activation = field_validator("activation")(
        _every(lambda a: a in ACTIVATION_NAMES, f"unknown activation {{!r}}; allowed: {', '.join(ACTIVATION_NAMES)}")
    )
    _max_len = field_validator("max_len")(
        _every(lambda n: isinstance(n, int) and n > 0, "max lengths must be positive integers, got {!r}")
    )

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

    _modes = field_validator("modes")(_no_repeats)

    _providers = field_validator("providers", mode="before")(_entries)

    @field_validator("name")
    @classmethod
    def _run_name(cls, v):
        # the name is the run folder's prefix under output_dir: no separator, no `..`
        if v is not None and not LABEL_RE.fullmatch(v):
            raise ValueError(
                f"{v!r} cannot name a run folder; allowed: letters, digits and _ . + - (not starting with . or -)"
            )
        return v

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
    elif err["type"] in ("literal_error", "finite_number"):
        msg = f"{msg}, got {err.get('input')!r}"
    return f"{path}: {_loc(tuple(loc))}: {msg}"


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a config with `name:` twice is a mistake."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` may be overridden, by design
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    seen = key in first
                except TypeError:  # an unhashable key: SafeLoader reports it
                    continue
                if seen:
                    raise yaml.constructor.ConstructorError(
                        None,
                        None,
                        f"the key {key!r} appears twice (first on line {first[key] + 1})",
                        key_node.start_mark,
                    )
                first[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


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
        data = yaml.load(raw, Loader=_UniqueKeyLoader)
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

    base_dir = None if isinstance(source, Mapping) else path.parent

    def workload_ok(set_name: str, B: int):
        def check(family, params, rule, rule_params, max_len, seed, sort) -> dict:
            """Everything about one workload, before any case runs: its parameters, then its lengths
            drawn (every empirical file read). A relative file path is the config folder's."""
            if not isinstance(family, str):
                raise ConfigError(f"{path}: sets.{set_name}.lengths.family: required (a length family name)")
            try:
                check_family_params(family, params, max_len=max_len)
            except ValueError as exc:
                raise ConfigError(f"{path}: sets.{set_name}.lengths: {exc}") from None
            try:
                check_pairing_params(rule, rule_params)
            except ValueError as exc:
                raise ConfigError(f"{path}: sets.{set_name}.kv: {exc}") from None
            try:
                check_workload(
                    family,
                    params,
                    rule,
                    rule_params,
                    batch_size=B,
                    max_len=max_len,
                    seed=seed,
                    sort=sort,
                    base_dir=base_dir,
                )
            except ValueError as exc:
                raise ConfigError(f"{path}: sets.{set_name}: {one_line(exc, type_name=False)}") from None
            return resolve_family_params(family, params, base_dir)

        return check

    cases: list[Case] = []
    for s in model.sets:
        workloads = expand_set(s, workload_ok(s.name, s.B))
        cases += cases_of(workloads, list(s.modes or model.modes), per_set.get(s.name, top))
    return LoadedConfig(
        path=path,
        model=model,
        sha256=hashlib.sha256(raw).hexdigest(),
        cases=cases,
        providers=labels,
        data=data if isinstance(source, Mapping) else None,
    )
