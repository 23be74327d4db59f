"""The config sections of the profiling views (docs/DESIGN.md §5, "Where the time goes"):

    breakdown:           # the kernels one call launches, per case (a profiler pass after every timed case)
      enabled: null      # null: on for GPU runs, off on the CPU; true / false force it
      calls: 3           # calls profiled per case
      warm_ms: 200       # back-to-back uncounted calls first, so the counted ones run at the timed clocks
      trace: false       # keep the Kineto trace (RUN_DIR/traces/<case id>-<hash>.json, for Perfetto) of
                         # every case (true) or of the cases a regex matches
    counters:            # Nsight Compute per selected case, after the sweep (one ncu process for all)
      only: REGEX        # the case ids to profile (none: off)
      keep: false        # keep the .ncu-rep under RUN_DIR/ncu/
      timeout_s: 1800
    bands:               # each selected case's batch split by length, every band timed alone
      only: REGEX        # the case ids to split (none: off)
      edges: [128, 512, 1024]   # band edges of min(Lq, Lk); null: 64, 128, 256, ... up to the max length

A regex that matches none of the config's cases is a config error (one line), as are edges that do not
increase.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bench.errors import ConfigError
from support.text import regex_error
from workloads.bands import check_edges

MAX_TIMEOUT_S = 86_400.0  # one ncu child for every selected case: bounded like any other budget
MAX_EDGES = 64  # 2**64 tokens is past any length a batch can address


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def check_regex(v: str | None) -> str | None:
    """`v` unless it is not a valid Python regular expression (a ValueError: pydantic's one line)."""
    if v is not None:
        if (why := regex_error(v)) is not None:
            raise ValueError(f"{v!r} is not a valid regular expression ({why}); allowed: a Python regex")
    return v


class Breakdown(_Section):
    enabled: bool | None = None
    calls: int = Field(3, ge=1, le=100)
    warm_ms: float = Field(200.0, ge=0, le=10_000)
    trace: bool | str = False

    @field_validator("trace", mode="before")
    @classmethod
    def _trace(cls, v):
        if isinstance(v, str):
            return check_regex(v)
        if not isinstance(v, bool):
            raise ValueError(f"{v!r}; allowed: true, false, or a regex over case ids")
        return v

    def traced(self, case_id: str) -> bool:
        """Whether `case_id`'s trace is kept."""
        return bool(re.search(self.trace, case_id)) if isinstance(self.trace, str) else self.trace

    @field_validator("calls", mode="before")
    @classmethod
    def _int(cls, v):
        if isinstance(v, bool):
            raise ValueError(f"{v!r} is a boolean; allowed: an integer")
        return v

    def on(self, device_type: str) -> bool:
        return self.enabled if self.enabled is not None else device_type == "cuda"


class Counters(_Section):
    only: str | None = None
    keep: bool = False
    timeout_s: float = Field(1800.0, gt=0, le=MAX_TIMEOUT_S)

    _only = field_validator("only")(check_regex)


class Bands(_Section):
    only: str | None = None
    edges: list[int] | None = Field(None, max_length=MAX_EDGES)

    _only = field_validator("only")(check_regex)

    @field_validator("edges", mode="before")
    @classmethod
    def _edges(cls, v):
        return v if v is None else check_edges(v if isinstance(v, list) else [v])


SECTIONS = ("breakdown", "counters", "bands")


def sections_record(model) -> dict:
    """The three sections as a run's meta records them (`profiling_config`)."""
    return {k: getattr(model, k).model_dump() for k in SECTIONS}


# Rough seconds of the views for the cost model (bench.shard.cost; `gdpa-bench list`): a profiler
# session's start, stop and parse; an ncu replay of one call's kernels in the shared child process, with
# its share of the child's start-up and compiles; one band's build, first call and gate beyond its timing;
# a CUDA-graph time (two captures of ~20 ms of calls, 2 x 10 replays: bench.case.graph_timing).
BREAKDOWN_S = 0.3
COUNTERS_S = 15.0
BAND_SETUP_S = 2.0
GRAPH_S = 0.6


def profiling_cost(case_id: str, n_bands: Callable[[], int], model, call_s: float, device: str) -> float:
    """Estimated wall seconds the views add to one case: `n_bands()` counts its non-empty bands (drawn only
    when the case is selected), `call_s` is a call's estimated time. Each band is measured as the case is
    (bench.profiling.views.measure): its samples, graph time and, on a GPU, its breakdown."""
    t, cost = model.timing, 0.0
    graph = GRAPH_S if t.cuda_graph and device == "cuda" else 0.0
    breakdown = 0.0
    if model.breakdown.on(device):
        breakdown = BREAKDOWN_S + model.breakdown.warm_ms / 1e3 + (model.breakdown.calls + 1) * call_s
    cost += graph + breakdown
    if model.bands.only and re.search(model.bands.only, case_id):
        per_band = BAND_SETUP_S + t.warmup_ms / 1e3 + t.rep_ms / 1e3 + graph + (breakdown if device == "cuda" else 0)
        cost += n_bands() * per_band + 3 * call_s
    if model.counters.only and re.search(model.counters.only, case_id) and device == "cuda":
        cost += COUNTERS_S
    return cost


def check_selections(model, case_ids: list[str], path) -> None:
    """`counters.only`, `bands.only` and a `breakdown.trace` regex must each match one of the config's cases."""
    trace = model.breakdown.trace if isinstance(model.breakdown.trace, str) else None
    for field, only in (("counters.only", model.counters.only), ("bands.only", model.bands.only)) + (
        (("breakdown.trace", trace),) if trace is not None else ()
    ):
        if only is not None and not any(re.search(only, cid) for cid in case_ids):
            example = case_ids[0] if case_ids else "none"
            raise ConfigError(
                f"{path}: {field}: {only!r} matches none of the config's {len(case_ids)} cases; "
                f"allowed: a regex over case ids such as {example!r}"
            )
