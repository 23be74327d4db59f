"""Benchmark configs: YAML → validated models → the list of cases a run executes.

A config names the hardware target and power cap, the workload sets (shapes, dtype, activation,
max lengths, length family and its parameters, the Q/KV pairing rule, seeds), the providers, the modes,
the baseline provider, timing budgets and the output directory. Any list-valued workload field is a
sweep axis: the cases are the cartesian product, and every swept axis appears in the case id
(`set1/fwd/L=1024/fill=1.0/gdpa_triton`, the peer benchmark's naming).

Every problem becomes one `ConfigError` line naming the file, the field and what is allowed.
"""
from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kernels.activations import ACTIVATION_NAMES
from kernels.registry import MODES, provider_names

DTYPES = ("bf16", "fp16", "fp32")


class ConfigError(Exception):
    """A bad config: the message is one line, ready to print."""


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
    # run the energy loop before the timed samples instead of after: the samples then start with the GPU
    # in its power-capped steady state rather than in whatever state the previous case left. Alone it
    # did not make short windows reproducible (docs/multi-gpu.md: with it, 60 ms windows of two runs
    # still differed by up to 9.5%); the sample window length did (timing.rep_ms)
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


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


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
    providers: list[str] | None = None

    @field_validator("activation")
    @classmethod
    def _activation(cls, v):
        for a in _as_list(v):
            if a not in ACTIVATION_NAMES:
                raise ValueError(f"unknown activation {a!r}; allowed: {', '.join(ACTIVATION_NAMES)}")
        return v

    @field_validator("max_len")
    @classmethod
    def _max_len(cls, v):
        for n in _as_list(v):
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
    providers: list[str] = Field(min_length=1)
    baseline: str | None = None
    modes: list[Literal["fwd", "bwd", "fwd_bwd"]] = ["fwd", "bwd", "fwd_bwd"]
    timing: Timing = Timing()
    correctness: Correctness = Correctness()
    power: Power = Power()
    output_dir: str = "runs"
    sets: list[WorkloadSet] = Field(min_length=1)

    @model_validator(mode="after")
    def _names(self):
        known = provider_names()
        for where, names in [("providers", self.providers)] + [
                (f"sets.{s.name}.providers", s.providers or []) for s in self.sets]:
            for p in names:
                if p not in known:
                    raise ValueError(f"{where}: unknown provider {p!r}; allowed: {', '.join(known)}")
        if self.baseline is not None and self.baseline not in known:
            raise ValueError(f"baseline: unknown provider {self.baseline!r}; allowed: {', '.join(known)}")
        seen = set()
        for s in self.sets:
            if s.name in seen:
                raise ValueError(f"sets: the name {s.name!r} is used twice")
            seen.add(s.name)
        return self


@dataclass(frozen=True)
class Workload:
    """One concrete workload: a set at one point of its sweep."""

    name: str  # e.g. set1/L=1024/fill=1.0
    set: str
    max_len: int
    sweep: dict  # swept axis -> value (besides L)
    B: int
    H: int
    Hkv: int
    D: int
    dtype: str
    activation: str
    alpha: float
    qk_scale: float
    causal: bool
    family: str
    family_params: dict
    rule: str
    rule_params: dict
    seed: int
    sort_by_length: bool


@dataclass(frozen=True)
class Case:
    id: str
    workload: Workload
    provider: str
    mode: str


@dataclass
class LoadedConfig:
    path: Path
    model: BenchConfig
    sha256: str
    cases: list[Case] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.model.name or self.path.stem


def _fmt(v) -> str:
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if p not in ("function-after",)) or "(top level)"


def _expand_set(s: WorkloadSet, path: Path) -> list[Workload]:
    from workloads import check_family_params, check_pairing_params

    lengths = dict(s.lengths)
    family = lengths.pop("family", None)
    if not isinstance(family, str):
        raise ConfigError(f"{path}: sets.{s.name}.lengths.family: required (a length family name)")
    kv = dict(s.kv)
    rule = kv.pop("rule", "self")
    axes: dict[str, list] = {}
    for key, val in lengths.items():
        axes[f"lengths.{key}"] = _as_list(val)
    for key, val in kv.items():
        axes[f"kv.{key}"] = _as_list(val)
    axes["activation"] = _as_list(s.activation)
    axes["seed"] = _as_list(s.seed)
    axes["sort_by_length"] = _as_list(s.sort_by_length)
    swept = {k for k, v in {**lengths, **kv, "activation": s.activation, "seed": s.seed,
                            "sort_by_length": s.sort_by_length}.items() if isinstance(v, (list, tuple))}
    out = []
    keys = list(axes)
    for L in _as_list(s.max_len):
        for combo in itertools.product(*(axes[k] for k in keys)):
            point = dict(zip(keys, combo))
            fparams = {k.split(".", 1)[1]: v for k, v in point.items() if k.startswith("lengths.")}
            rparams = {k.split(".", 1)[1]: v for k, v in point.items() if k.startswith("kv.")}
            if rule == "fixed_kv" and rparams.get("kv_len") in (None, "max_len"):
                rparams["kv_len"] = L
            try:
                check_family_params(family, fparams, max_len=L)
            except ValueError as exc:
                raise ConfigError(f"{path}: sets.{s.name}.lengths: {exc}") from None
            try:
                check_pairing_params(rule, rparams)
            except ValueError as exc:
                raise ConfigError(f"{path}: sets.{s.name}.kv: {exc}") from None
            sweep = {}
            for k, v in point.items():
                short = k.split(".", 1)[-1]
                if short in swept:
                    sweep["sort" if short == "sort_by_length" else short] = v
            label = "/".join([f"L={L}"] + [f"{k}={_fmt(v)}" for k, v in sweep.items()])
            out.append(Workload(
                name=f"{s.name}/{label}", set=s.name, max_len=L, sweep=sweep, B=s.B, H=s.H,
                Hkv=s.Hkv or s.H, D=s.D, dtype=s.dtype, activation=point["activation"], alpha=s.alpha,
                qk_scale=s.qk_scale, causal=s.causal, family=family, family_params=fparams, rule=rule,
                rule_params=rparams, seed=point["seed"], sort_by_length=point["sort_by_length"]))
    return out


def expand_cases(model: BenchConfig, path: Path) -> list[Case]:
    cases = []
    for s in model.sets:
        modes = s.modes or model.modes
        providers = s.providers or model.providers
        for w in _expand_set(s, path):
            for mode in modes:
                for p in providers:
                    wl = w.name.split("/", 1)[1]
                    cases.append(Case(id=f"{w.set}/{mode}/{wl}/{p}", workload=w, provider=p, mode=mode))
    return cases


def load_config(path: str | Path) -> LoadedConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    raw = path.read_bytes()
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of config fields")
    try:
        model = BenchConfig.model_validate(data)
    except ValidationError as exc:
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
        raise ConfigError(f"{path}: {_loc(tuple(loc))}: {msg}") from None
    if model.baseline is None and model.providers:
        model = model.model_copy(update={"baseline": model.providers[0]})
    loaded = LoadedConfig(path=path, model=model, sha256=hashlib.sha256(raw).hexdigest())
    loaded.cases = expand_cases(model, path)
    return loaded


def dtype_of(name: str):
    import torch
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


__all__ = ["BenchConfig", "Case", "ConfigError", "LoadedConfig", "MODES", "Workload", "dtype_of",
           "expand_cases", "load_config"]
