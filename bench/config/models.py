"""Benchmark configs: YAML (or a dict) → validated models → the cases a run executes (docs/DESIGN.md §7).

A config names the hardware target and power cap, the workload sets (shapes, dtype, activation,
max lengths, length family and its parameters, the Q/KV pairing rule, seeds), the providers, the modes,
the baseline provider, timing budgets and the output directory. Any list-valued workload field is a
sweep axis (bench.config.cases).

A provider entry is a registry name or a mapping `{name, label, options}`: the same provider may run
twice with different options under two labels, e.g. `{name: gdpa_triton, label: gdpa_triton_pinned,
options: {fwd_tiles: [64, 32, 4, 1]}}`. The label (default: the name) names the cases and must be
unique; a set's `providers:` may repeat a label defined at the top level by naming it. Options are
parsed by the provider when the config loads, so a bad option is a config error.

Every problem becomes one `ConfigError` line naming the file, the field and what is allowed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bench.config.cases import Case, ProviderSpec, as_list, cases_of, expand_set, sweep_points
from bench.config.profiling import Bands, Breakdown, Counters, check_regex, check_selections
from bench.config.providers import resolve_providers
from bench.config.resources import check_host_for_lengths
from bench.config.source import DICT_SOURCE, read_config
from bench.config.validation import validation_message
from bench.errors import ConfigError
from kernels.activations import ACTIVATION_NAMES
from support.inputs import InputError, check_path_text
from support.suggest import did_you_mean
from support.text import one_line
from workloads import check_family_params, check_pairing_params, check_workload, resolve_family_params
from workloads.lengths import MAX_LENGTH

DTYPES = ("bf16", "fp16", "fp32")
MAX_NAME = 64  # characters of a config, set or provider name: they become folder names and case ids
MAX_BUDGET_MS = 60_000.0  # a case's warm-up or sample budget
MAX_REPS = 1_000_000
MAX_LOOP_S = 600.0  # the energy loop, its settle pre-roll, the GEMM calibration
MAX_SEED = 2**63 - 1
MAX_WORKLOADS = 10_000  # per config: each one's lengths are drawn when the config loads
MAX_CASE_TIMEOUT_S = 7 * 86_400.0  # the watchdog's deadline per case (a full autotune sweep may take hours)
LABEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")

__all__ = ["DICT_SOURCE", "BenchConfig", "LoadedConfig", "default_run_dir", "load_config"]


def _no_bools(v: Any) -> Any:
    """YAML `true` is a Python bool, and pydantic takes a bool for an int: `max_len: true` would run L=1."""
    for x in v if isinstance(v, list) else [v]:
        if isinstance(x, bool):
            raise ValueError(f"{x!r} is a boolean; allowed: an integer")
    return v


def _every(ok, message: str, choices: tuple = ()):
    """A validator: every value of a field that may be swept (one value or a list) passes `ok`, else
    `message` with the first one that does not (and the closest of `choices`). An empty list would drop
    the set silently: it is refused."""

    def validate(v):
        if isinstance(v, (list, tuple)) and not v:
            raise ValueError("an empty list; allowed: a value, or a list of at least one value to sweep")
        for x in as_list(v):
            if not ok(x):
                raise ValueError(message.format(x) + did_you_mean(x, choices))
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
    # bounded so that no config can time one case for hours (`rep_ms: 1e9, max_reps: 1e9` never ended)
    warmup_ms: float = Field(25.0, gt=0, le=MAX_BUDGET_MS)
    rep_ms: float = Field(100.0, gt=0, le=MAX_BUDGET_MS)
    min_reps: int = Field(5, ge=1, le=MAX_REPS)
    max_reps: int = Field(2000, ge=1, le=MAX_REPS)
    flush_l2: bool = True
    cuda_graph: bool = False
    # A case still running this long after it started (batch, gate, compile, samples, power, views) is
    # hung: its worker process is killed, the case recorded `failed`, a fresh worker goes on (DESIGN §5)
    case_timeout_s: float = Field(600.0, gt=0, le=MAX_CASE_TIMEOUT_S)

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
    max_check_seqs: int = Field(16, ge=1, le=MAX_LENGTH)

    _ints = field_validator("max_check_seqs", mode="before")(_no_bools)


class Power(_Strict):
    enabled: bool = True
    period_ms: float = Field(10.0, ge=1, le=10_000)
    energy_loop_s: float = Field(1.0, ge=0, le=MAX_LOOP_S)
    # The case runs back to back this long before the energy window opens, so the window starts loaded,
    # with NVML's 100 ms power reading refreshed and the cap controller past its first-second transient
    # (docs/DESIGN.md §5; docs/experiments/power-estimators.md).
    settle_s: float = Field(1.0, ge=0, le=MAX_LOOP_S)
    # The energy loop before the timed samples instead of after: the samples then start in the
    # power-capped steady state rather than in whatever state the previous case left (docs/DESIGN.md §5).
    energy_loop_first: bool = False
    # The sampler paused while a case's timed samples run, the GPU read once after each chunk of them,
    # outside every timed call: sampling through them moved a host-bound call's p50 by 13% even from a
    # process of its own (the H200, 2026-12-02; docs/DESIGN.md §5). False: sample through them.
    pause_for_samples: bool = True
    # case ids matching this regex are timed twice, with and without the sampling thread, to measure
    # what monitoring costs
    overhead_check: str | None = None

    _overhead_check = field_validator("overhead_check")(check_regex)


class Hardware(_Strict):
    target: str | None = Field(None, max_length=MAX_NAME)  # the GPU this config was written for; informational
    gpu: str | None = Field(None, max_length=MAX_NAME)  # override the detected name for the datasheet table
    power_cap_w: float | None = Field(None, gt=0, le=100_000)
    peak_tflops: dict[str, float] | None = None
    hbm_tb_s: float | None = Field(None, gt=0, le=1_000_000)
    calibrate: bool = True
    calibrate_seconds: float = Field(2.0, gt=0, le=MAX_LOOP_S)

    @field_validator("peak_tflops")
    @classmethod
    def _dtypes(cls, v):
        if v is not None:
            bad = [k for k in v if k not in DTYPES]
            if bad:
                hint = did_you_mean(bad[0], DTYPES)
                raise ValueError(f"unknown dtype {bad[0]!r}; allowed: {', '.join(DTYPES)}{hint}")
            low = next((k for k, x in v.items() if not 0 < x <= 1e7), None)
            if low is not None:
                raise ValueError(f"{low}: {v[low]!r}; allowed: a number of TFLOP/s > 0")
        return v


class Environment(_Strict):
    """Where a provider's cases run when not in the harness's own environment (bench.sweep.environments): another
    interpreter, and/or site folders first on the worker's PYTHONPATH (e.g. one holding another `triton`).
    The paths are checked when a run starts, not here: a config names folders of the machine it runs on."""

    python: str | None = None
    prepend_path: list[str] | None = Field(None, min_length=1, max_length=64)

    @field_validator("python")
    @classmethod
    def _python(cls, v):
        return None if v is None else _path_text(v)

    @field_validator("prepend_path")
    @classmethod
    def _folders(cls, v):
        return None if v is None else [_path_text(x) for x in v]

    @model_validator(mode="after")
    def _some(self):
        if self.python is None and self.prepend_path is None:
            raise ValueError("empty; allowed: {python: PATH} and/or {prepend_path: [DIR, ...]}")
        return self


def _path_text(v: str) -> str:
    try:
        return check_path_text(v, repr(v))
    except InputError as exc:
        raise ValueError(str(exc)) from None


class ProviderEntry(_Strict):
    name: str = Field(min_length=1, max_length=MAX_NAME)
    label: str | None = Field(None, max_length=MAX_NAME)
    options: dict[str, Any] = Field(default_factory=dict)
    environment: Environment | None = None

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
    name: str = Field(min_length=1, max_length=MAX_NAME)
    # int32 offsets address the packed tensors: no size beyond that (memory is checked per case, bench.config.resources)
    B: int = Field(gt=0, le=MAX_LENGTH)
    H: int = Field(gt=0, le=MAX_LENGTH)
    Hkv: int | None = Field(None, gt=0, le=MAX_LENGTH)
    D: int = Field(gt=0, le=MAX_LENGTH)
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
    modes: list[Literal["fwd", "bwd", "fwd_bwd"]] | None = Field(None, min_length=1)
    providers: list[ProviderEntry] | None = Field(None, min_length=1)

    _ints = field_validator("B", "H", "Hkv", "D", "max_len", "seed", mode="before")(_no_bools)
    _modes = field_validator("modes")(_no_repeats)

    _providers = field_validator("providers", mode="before")(_entries)

    _seed = field_validator("seed")(
        _every(lambda n: 0 <= n <= MAX_SEED, "seeds must be integers in [0, 2**63 - 1], got {!r}")
    )
    _activation = field_validator("activation")(
        _every(
            lambda a: a in ACTIVATION_NAMES,
            f"unknown activation {{!r}}; allowed: {', '.join(ACTIVATION_NAMES)}",
            ACTIVATION_NAMES,
        )
    )
    _max_len = field_validator("max_len")(
        _every(
            lambda n: isinstance(n, int) and 0 < n <= MAX_LENGTH,
            f"max lengths must be integers in [1, {MAX_LENGTH}], got {{!r}}",
        )
    )
    _sort = field_validator("sort_by_length")(_every(lambda b: True, ""))

    @field_validator("name")
    @classmethod
    def _set_name(cls, v):
        # it starts every case id, which --gpus workers pass one per line, and names histogram files
        if not LABEL_RE.fullmatch(v):
            raise ValueError(f"{v!r}: allowed: letters, digits and _ . + - (not starting with . or -)")
        return v

    @field_validator("lengths", "kv")
    @classmethod
    def _axes(cls, v, info):
        for key, val in v.items():
            try:
                _every(lambda x: True, "")(val)
            except ValueError as exc:
                raise ValueError(f"{info.field_name}.{key}: {exc}") from None
        return v

    @model_validator(mode="after")
    def _heads(self):
        hkv = self.Hkv or self.H
        if self.H % hkv:
            raise ValueError(f"H ({self.H}) must be a multiple of Hkv ({hkv})")
        if sweep_points(self) > MAX_WORKLOADS:
            raise ValueError(
                f"its sweep has {sweep_points(self):,} workloads (the product of its list lengths); allowed: at "
                f"most {MAX_WORKLOADS:,} per config"
            )
        return self


class BenchConfig(_Strict):
    name: str | None = Field(None, max_length=MAX_NAME)
    description: str = Field("", max_length=10_000)
    device: Literal["cuda", "cpu"] = "cuda"
    hardware: Hardware = Hardware()
    providers: list[ProviderEntry] = Field(min_length=1)
    baseline: str | None = None
    modes: list[Literal["fwd", "bwd", "fwd_bwd"]] = Field(["fwd", "bwd", "fwd_bwd"], min_length=1)
    timing: Timing = Timing()
    correctness: Correctness = Correctness()
    power: Power = Power()
    breakdown: Breakdown = Breakdown()  # the profiling views: bench/config/profiling.py
    counters: Counters = Counters()
    bands: Bands = Bands()
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

    @field_validator("output_dir")
    @classmethod
    def _output_dir(cls, v):
        return _path_text(v)

    @model_validator(mode="after")
    def _names(self):
        seen = set()
        for s in self.sets:
            if s.name in seen:
                raise ValueError(f"sets: the name {s.name!r} is used twice")
            seen.add(s.name)
        n = sum(sweep_points(s) for s in self.sets)
        if n > MAX_WORKLOADS:
            raise ValueError(f"sets: {n:,} workloads in all; allowed: at most {MAX_WORKLOADS:,} per config")
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


def load_config(source: str | Path | Mapping) -> LoadedConfig:
    """Validate a config (a YAML file, or a dict with the same fields) and expand its cases.

    Raises `ConfigError` with one line naming the file (or `<config dict>`), the field and what is
    allowed."""
    path, data, raw = read_config(source)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of config fields")
    try:
        model = BenchConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(validation_message(exc, data, path, BenchConfig)) from None
    top, per_set = resolve_providers(model, path)
    labels = {p.label: p for p in top}
    for specs in per_set.values():
        labels.update({p.label: p for p in specs if p.label not in labels})
    if model.baseline is None:
        model = model.model_copy(update={"baseline": top[0].label})
    elif model.baseline not in labels:
        raise ConfigError(
            f"{path}: baseline: {model.baseline!r} is not one of the config's providers; allowed: {', '.join(labels)}"
            + did_you_mean(model.baseline, labels)
        )

    base_dir = None if isinstance(source, Mapping) else path.parent

    def workload_ok(set_name: str, B: int):
        check_host_for_lengths(B, f"{path}: sets.{set_name}")

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
                q, kv = check_workload(
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
            tokens = max(int(q.sum()), int(kv.sum()))
            if tokens > MAX_LENGTH:
                raise ConfigError(
                    f"{path}: sets.{set_name}: L={max_len}: {tokens:,} tokens in one batch; allowed: at most "
                    f"{MAX_LENGTH:,} (the int32 offsets of the packed tensors)"
                )
            return resolve_family_params(family, params, base_dir)

        return check

    cases: list[Case] = []
    for s in model.sets:
        workloads = expand_set(s, workload_ok(s.name, s.B))
        cases += cases_of(workloads, list(s.modes or model.modes), per_set.get(s.name, top))
    check_selections(model, [c.id for c in cases], path)
    return LoadedConfig(
        path=path,
        model=model,
        sha256=hashlib.sha256(raw).hexdigest(),
        cases=cases,
        providers=labels,
        data=data if isinstance(source, Mapping) else None,
    )
