"""What a run executes: concrete workloads, labelled providers and the cases (workload × mode × provider).

A config's set is a sweep: every list-valued workload field is an axis and the workloads are the
cartesian product; every swept axis appears in the case id (`set1/fwd/L=1024/fill=1.0/gdpa_triton`, the
peer benchmark's naming, docs/DESIGN.md §4). The id's last segment is the provider's *label*: the
provider name, or the label a config gave a provider entry with options (docs/DESIGN.md §11).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from kernels.registry import CaseSpec, provider_class
from results.figures import case_flops
from workloads import build_lengths, make_batch, resolve_pairing_params, work_pairs


def dtype_of(name: str) -> torch.dtype:
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


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

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """The (q_lengths, kv_lengths) of this workload: deterministic in its parameters and seed."""
        return build_lengths(
            self.family,
            self.family_params,
            self.rule,
            self.rule_params,
            batch_size=self.B,
            max_len=self.max_len,
            seed=self.seed,
            sort=self.sort_by_length,
        )

    def batch(self, device, lengths: tuple[np.ndarray, np.ndarray] | None = None):
        """The jagged batch on `device` (`lengths` when already built, else `self.lengths()`)."""
        q, kv = lengths if lengths is not None else self.lengths()
        # a `self` pairing is self-attention: one offsets tensor, as its callers pass it (make_batch)
        return make_batch(
            q, kv, H=self.H, Hkv=self.Hkv, D=self.D, dtype=dtype_of(self.dtype), device=device, seed=self.seed,
            self_attention=self.rule == "self",
        )  # fmt: skip

    def flops(self, mode: str, lengths: tuple[np.ndarray, np.ndarray], semantics: str = "gdpa") -> float:
        """The FLOPs of one call in `mode` on these lengths (the peers' convention: results.figures), for a
        provider of `semantics`: a softmax provider's causal mask is bottom-right aligned, GDPA's top-left."""
        q, kv = lengths
        pairs = work_pairs(q, kv, causal=self.causal, bottom_right=semantics == "softmax")
        return case_flops(self.H, self.D, pairs.sum(), mode)

    def record_fields(self, wstats: dict) -> dict:
        """The case record's `workload` block: the parameters and the statistics of its lengths."""
        return {
            "name": self.name,
            "family": self.family,
            "params": self.family_params,
            "pairing": self.rule,
            "pairing_params": self.rule_params,
            "sorted": self.sort_by_length,
            "B": self.B,
            "H": self.H,
            "Hkv": self.Hkv,
            "D": self.D,
            "causal": self.causal,
            "alpha": self.alpha,
            "qk_scale": self.qk_scale,
            "max_q": wstats["max_q"],
            "max_kv": wstats["max_kv"],
            "total_q": wstats["total_q"],
            "total_kv": wstats["total_kv"],
            "padding_waste": wstats["padding_waste"],
            "flop_waste": wstats["flop_waste"],
            "imbalance": wstats["imbalance"],
            "seed": self.seed,
            "lengths_sha256": wstats["lengths_sha256"],
            "tile_eff_64": wstats["tile_eff_64"],
            "tile_eff_128": wstats["tile_eff_128"],
        }


@dataclass(frozen=True)
class ProviderSpec:
    """A provider as a config names it: registry name, the label cases use, its options, and the environment
    its cases run in (None: the harness's own; else `{python: PATH}` and/or `{prepend_path: [DIR, ...]}`)."""

    label: str
    name: str
    options: dict = field(default_factory=dict)
    environment: dict | None = None


@dataclass(frozen=True)
class Case:
    """One case: a workload, a mode and a labelled provider."""

    id: str
    workload: Workload
    mode: str
    provider: ProviderSpec

    @property
    def label(self) -> str:
        """The provider's label: the case id's last segment and the results' `provider`."""
        return self.provider.label

    @property
    def semantics(self) -> str:
        """What the provider computes (`gdpa` or `softmax`), from its registered class: `gdpa` for a name
        the registry does not know (the case then fails on its provider, with that error)."""
        try:
            return provider_class(self.provider.name).semantics
        except Exception:
            return "gdpa"

    def flops(self, lengths: tuple[np.ndarray, np.ndarray]) -> float:
        """The FLOPs of one call of this case on these lengths (Workload.flops, this provider's semantics)."""
        return self.workload.flops(self.mode, lengths, self.semantics)

    @property
    def spec(self) -> CaseSpec:
        """What the case computes, as the providers take it."""
        w = self.workload
        return CaseSpec(mode=self.mode, activation=w.activation, alpha=w.alpha, qk_scale=w.qk_scale, causal=w.causal)

    def identity_fields(
        self,
        semantics: str,
        options: dict | None,
        wstats: dict,
        flops: float,
        gpu_index: int | None,
        gpu_name: str | None,
    ) -> dict:
        """What the case record says about the case before it runs (results.record.new_case_record)."""
        w = self.workload
        return {
            "id": self.id,
            "set": w.set,
            "max_len": w.max_len,
            "sweep": dict(w.sweep),
            "provider": self.label,
            "provider_name": self.provider.name,
            "provider_options": options,
            "semantics": semantics,
            "mode": self.mode,
            "dtype": w.dtype,
            "activation": w.activation if semantics == "gdpa" else "softmax",
            "workload": w.record_fields(wstats),
            "flops": flops,
            "gpu_index": gpu_index,
            "gpu_name": gpu_name,
        }


def as_list(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _fmt(v: Any) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def sweep_points(s) -> int:
    """How many workloads `expand_set` makes of a set: the product of its axes' lengths, counted before
    anything is expanded (five 100-value axes are 10^10 workloads)."""
    n = 1
    for v in (s.max_len, s.activation, s.seed, s.sort_by_length):
        n *= len(as_list(v))
    for params, own in ((s.lengths, "family"), (s.kv, "rule")):
        for key, v in params.items():
            n *= 1 if key == own else len(as_list(v))
    return n


def expand_set(s, check) -> list[Workload]:
    """The workloads of one validated `WorkloadSet`. `check(family, params, rule, rule_params, L, seed,
    sort)` validates one workload completely (raising the config loader's one-line errors) and returns
    the family parameters the run samples with (file paths made absolute); the case ids keep the values
    as the config wrote them."""
    lengths = dict(s.lengths)
    family = lengths.pop("family", None)
    kv = dict(s.kv)
    rule = kv.pop("rule", "self")
    axes: dict[str, list] = {}
    for key, val in lengths.items():
        axes[f"lengths.{key}"] = as_list(val)
    for key, val in kv.items():
        axes[f"kv.{key}"] = as_list(val)
    axes["activation"] = as_list(s.activation)
    axes["seed"] = as_list(s.seed)
    axes["sort_by_length"] = as_list(s.sort_by_length)
    swept = {
        k
        for k, v in {
            **lengths,
            **kv,
            "activation": s.activation,
            "seed": s.seed,
            "sort_by_length": s.sort_by_length,
        }.items()
        if isinstance(v, (list, tuple))
    }
    out = []
    keys = list(axes)
    for L in as_list(s.max_len):
        for combo in itertools.product(*(axes[k] for k in keys)):
            point = dict(zip(keys, combo, strict=True))
            fparams = {k.split(".", 1)[1]: v for k, v in point.items() if k.startswith("lengths.")}
            rparams = {k.split(".", 1)[1]: v for k, v in point.items() if k.startswith("kv.")}
            run_params = check(family, fparams, rule, rparams, L, point["seed"], point["sort_by_length"])
            rparams = resolve_pairing_params(rule, rparams, L)  # what the workload records it ran with
            sweep = {}
            for k, v in point.items():
                short = k.split(".", 1)[-1]
                if short in swept:
                    sweep["sort" if short == "sort_by_length" else short] = v
            label = "/".join([f"L={L}"] + [f"{k}={_fmt(v)}" for k, v in sweep.items()])
            out.append(
                Workload(
                    name=f"{s.name}/{label}",
                    set=s.name,
                    max_len=L,
                    sweep=sweep,
                    B=s.B,
                    H=s.H,
                    Hkv=s.Hkv or s.H,
                    D=s.D,
                    dtype=s.dtype,
                    activation=point["activation"],
                    alpha=s.alpha,
                    qk_scale=s.qk_scale,
                    causal=s.causal,
                    family=family,
                    family_params=run_params,
                    rule=rule,
                    rule_params=rparams,
                    seed=point["seed"],
                    sort_by_length=point["sort_by_length"],
                )
            )
    return out


def cases_of(workloads: list[Workload], modes: list[str], providers: list[ProviderSpec]) -> list[Case]:
    """workload × mode × provider, in that nesting order (the runner builds each batch once)."""
    cases = []
    for w in workloads:
        rest = w.name.split("/", 1)[1]
        for mode in modes:
            for p in providers:
                cases.append(Case(id=f"{w.set}/{mode}/{rest}/{p.label}", workload=w, mode=mode, provider=p))
    return cases


def select(cases: list[Case], only: str | None = None, labels: list[str] | None = None) -> list[Case]:
    """The cases whose id matches the regex `only` and whose provider label is in `labels`."""
    if only:
        rx = re.compile(only)
        cases = [c for c in cases if rx.search(c.id)]
    if labels:
        cases = [c for c in cases if c.label in labels]
    return cases
