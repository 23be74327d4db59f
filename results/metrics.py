"""The metric table: every field of a case record, every column the results frame derives from them, and
every workload statistic a report shows, declared once (docs/DESIGN.md §6).

One row drives everything about its field:
- the case record: `results.record.new_case_record` starts every always-present field empty, and
  `results.record.check_case_record` refuses a field (or a block's key) no row declares, so the record
  cannot drift from this table;
- the results frame (`results.frame`): every scalar row is a column, numeric rows are floats, and a row with
  `derive` is computed there, in table order (so a row may use the rows above it);
- the report's tables (`reports.sections`): a row lists the views that show it (`shown`), in table order,
  under its `header`, formatted by its `fmt`;
- the docs: DESIGN.md §6's field reference is `field_reference()` (`gdpa-bench fields`), checked by a test.

To add a metric, add a row here (and a test of its value); e.g. the achieved share of the HBM bandwidth:

    Metric("hbm_share", "fraction", "frame", "min_bytes / (median_ms · 1e-3) / (hbm_tb_s · 1e12)",
           "share of the datasheet HBM bandwidth the compulsory bytes would take", shown=("cases",),
           header="HBM share", derive=lambda df, meta: df["min_bytes"] / df["median_ms"] / 1e9 / meta["hbm_tb_s"]),
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from results.figures import (
    ceiling_for,
    energy_per_call,
    intensity,
    min_bytes,
    number,
    speedup_vs_baseline,
    tflops,
    tflops_per_watt,
    utilization,
)
from results.power import power_flags

VIEWS = ("summary", "cases", "workloads")  # the report's tables (reports.sections)
KINDS = ("number", "text", "flag", "list", "object", "block")
# how a unit reads in a table cell (reports.document.fmt), unless a row says otherwise
UNIT_FORMATS = {
    "TFLOP/s": "tflops",
    "ms": "ms",
    "fraction": "pct",
    "×": "x",
    "W": "whole",
    "MHz": "whole",
    "FLOP/B": "whole",
    "J": "sci",
    "TFLOP/s/W": "frac",
    "count": "int",
    "tokens": "int",
}
Derive = Callable[[pd.DataFrame, dict], "pd.Series | np.ndarray"]


@dataclass(frozen=True)
class Metric:
    """One field: `name` is its path in the record (`power.avg_w`: key `avg_w` of the block `power`) and its
    frame column. `source` says what writes it: a stage of the runner (`config`, `provider`, `gate`,
    `timer`, `monitor`, `energy loop`, `overhead check`, `runner`), `lengths` (the statistics of the drawn
    lengths: workloads.stats), `profile`, `merge`, or `frame` (derived when results are read). `kind`:
    number, text, flag, list, object (kept whole), block (a dict whose keys are the rows `name.*`).
    `optional`: present only where it applies (else every record has it, empty until set)."""

    name: str
    unit: str
    source: str
    formula: str
    description: str
    shown: tuple[str, ...] = ()
    header: str = ""
    kind: str = "number"
    fmt: str = ""
    optional: bool = False
    derive: Derive | None = None
    span_to: str = ""  # a cell showing this row and another as a range ("p20–p80 ms")

    @property
    def block(self) -> str | None:
        """The block this row is a key of (`power` for `power.avg_w`), None at the top level."""
        return self.name.split(".", 1)[0] if "." in self.name else None

    @property
    def key(self) -> str:
        return self.name.split(".", 1)[-1]

    @property
    def cell_format(self) -> str:
        return self.fmt or UNIT_FORMATS.get(self.unit, "")

    @property
    def in_record(self) -> bool:
        """A field of the record (or of the `workloads` entry), not a column only the frame derives."""
        return self.source != "frame"


def _rows_map(df: pd.DataFrame, fn: Callable[[pd.Series], float]) -> np.ndarray:
    return np.asarray([fn(r) for _, r in df.iterrows()], dtype=float) if len(df) else np.array([], dtype=float)


def _recorded_else(df: pd.DataFrame, computed: np.ndarray, recorded: str) -> np.ndarray:
    """The computed figure, or the recorded one where the inputs were missing."""
    if not len(df):
        return computed
    return np.where(np.isfinite(computed), computed, df[recorded].to_numpy(dtype=float))


def _tflops(df: pd.DataFrame, meta: dict) -> np.ndarray:
    return _recorded_else(df, tflops(df["flops"].to_numpy(), df["median_ms"].to_numpy()), "tflops")


def _utilization(ceiling: str, column: str) -> Derive:
    def derive(df: pd.DataFrame, meta: dict) -> np.ndarray:
        value = meta.get(ceiling) or ({} if ceiling == "peak_tflops" else None)
        return _recorded_else(
            df, _rows_map(df, lambda r: utilization(r["tflops"], ceiling_for(value, r["dtype"]))), column
        )

    return derive


def _power_of(row: pd.Series) -> dict:
    """A frame row's `power.*` columns as the case's `power` dict (missing values None)."""
    missing = lambda v: v is None or (isinstance(v, float) and math.isnan(v))
    return {k[len("power.") :]: None if missing(v) else v for k, v in row.items() if k.startswith("power.")}


def _flag(name: str) -> Derive:
    return lambda df, meta: np.asarray([bool(power_flags(_power_of(r))[name]) for _, r in df.iterrows()], dtype=bool)


def _energy(df: pd.DataFrame, meta: dict) -> np.ndarray:
    estimate = _rows_map(df, lambda r: energy_per_call(r["power.avg_w"], r["median_ms"]) if r["ok"] else math.nan)
    return np.where(df["power.energy_j_per_call"].notna(), df["power.energy_j_per_call"], estimate)


def _per_watt(df: pd.DataFrame, meta: dict) -> np.ndarray:
    estimate = _rows_map(df, lambda r: tflops_per_watt(r["tflops"], r["power.avg_w"]))
    return np.where(df["power.tflops_per_w"].notna(), df["power.tflops_per_w"], estimate)


# The rows in display order: a view shows its rows in this order, and a block's keys are in record order.
# fmt: off
METRICS: tuple[Metric, ...] = (
    Metric("id", "", "config", "", "`<set>/<mode>/L=<max_len>/<axis>=<value>.../<label>`: the case's name", kind="text",
      shown=("cases",), header="case"),
    Metric("set", "", "config", "", "the config's set (a sweep of workloads)", kind="text"),
    Metric("max_len", "tokens", "config", "", "the largest length the set's length family draws (L)", fmt="len"),
    Metric("sweep", "", "config", "", "{axis: value} of every swept axis besides L", kind="object"),
    Metric("provider", "", "config", "", "the provider's label (the config's; default its registry name)", kind="text"),
    Metric("label", "", "frame", "provider, + ' (softmax)' for softmax providers",
      "how tables and legends name the provider", kind="text", shown=("cases",), header="provider"),
    Metric("provider_name", "", "config", "", "the provider's registry name", kind="text"),
    Metric("provider_options", "", "provider", "", "the options in force (`options_record()`); null without options",
      kind="object"),
    Metric("semantics", "", "provider", "", "`gdpa` or `softmax` (softmax providers are speed references)",
      kind="text"),
    Metric("mode", "", "config", "", "`fwd`, `bwd` or `fwd_bwd`", kind="text"),
    Metric("dtype", "", "config", "", "the inputs' dtype: bf16, fp16, fp32", kind="text"),
    Metric("activation", "", "config", "", "GDPA's activation; `softmax` for softmax providers", kind="text"),
    Metric("workload", "", "config", "", "the workload's parameters and the statistics of its lengths", kind="block"),
    Metric("workload.name", "", "config", "", "the workload (`<set>/L=<max_len>/<axis>=<value>...`)", kind="text"),
    Metric("workload.family", "", "config", "", "the length family (docs/DESIGN.md §4)", kind="text"),
    Metric("workload.params", "", "config", "", "the family's parameters", kind="object"),
    Metric("workload.pairing", "", "config", "", "the Q/KV pairing rule", kind="text"),
    Metric("workload.pairing_params", "", "config", "", "the pairing rule's parameters", kind="object"),
    Metric("workload.sorted", "", "config", "", "sequences sorted by work, longest first", kind="flag"),
    Metric("workload.B", "count", "config", "", "sequences in the batch"),
    Metric("workload.H", "count", "config", "", "query heads"),
    Metric("workload.Hkv", "count", "config", "", "key/value heads (GQA when below H)"),
    Metric("workload.D", "count", "config", "", "head dimension"),
    Metric("workload.causal", "", "config", "", "causal mask (j ≤ i, diagonal kept)", kind="flag"),
    Metric("workload.alpha", "", "config", "", "pre-activation scale"),
    Metric("workload.qk_scale", "", "config", "", "post-activation scale"),
    Metric("workload.max_q", "tokens", "lengths", "max Lq", "the longest query sequence"),
    Metric("workload.max_kv", "tokens", "lengths", "max Lk", "the longest key sequence"),
    Metric("workload.total_q", "tokens", "lengths", "ΣLq", "query rows of the packed tensor"),
    Metric("workload.total_kv", "tokens", "lengths", "ΣLk", "key rows of the packed tensor"),
    Metric("workload.padding_waste", "fraction", "lengths", "1 − ΣLq / (B·max Lq)", "padding a dense layout would add"),
    Metric("workload.flop_waste", "fraction", "lengths", "1 − ΣLqLk / (B·max Lq·max Lk)",
      "FLOP area a dense layout wastes"),
    Metric("workload.imbalance", "", "lengths", "max(LqLk) / mean(LqLk)", "work of the largest sequence over the mean",
      fmt="frac"),
    Metric("workload.seed", "count", "config", "", "the seed the lengths and inputs are drawn with"),
    Metric("workload.lengths_sha256", "", "lengths", "", "a hash of the Q and KV lengths", kind="text"),
    Metric("status", "", "runner", "",
      "`ok` timed · `incorrect` failed the gate, not timed · `failed` raised (e.g. out of memory) or faulted the GPU · "
        "`skipped` cannot run here or unsupported",
      kind="text", shown=("cases",), header="status"),
    Metric("ok", "", "frame", "status == 'ok'", "the case was timed", kind="flag"),
    Metric("flops", "FLOP", "runner", "4·H·D·Σ unmasked pairs; bwd ×2.5, fwd_bwd ×3.5",
      "useful FLOPs per call, the peers' convention (docs/DESIGN.md §3)", fmt="sci"),
    Metric("times_ms", "ms", "timer", "", "every timed sample, in measurement order", kind="list"),
    Metric("median_ms", "ms", "timer", "median of times_ms", "time per call", shown=("cases",), header="median ms"),
    Metric("p20_ms", "ms", "timer", "20th percentile of times_ms", "a fast call", shown=("cases",), header="p20–p80 ms",
      span_to="p80_ms"),
    Metric("p80_ms", "ms", "timer", "80th percentile of times_ms", "a slow call"),
    Metric("n_samples", "count", "frame", "len(times_ms)", "timed samples", shown=("cases",), header="n", fmt="count"),
    Metric("timed_s", "s", "timer", "Σ times_ms / 1000", "the timed window the samples add up to", fmt="ms"),
    Metric("drift", "fraction", "timer", "(median of the last tenth − median of the first tenth) / first tenth",
      "did the time move while measured (null under 20 samples; results.drift)"),
    Metric("drift_p", "", "timer", "Mann-Whitney U, first vs last tenth", "the drift's p-value", fmt="sci"),
    Metric("sm_clock_mhz", "MHz", "monitor", "median SM clock of the sampler's readings during the samples",
      "the clock the samples ran at (compare normalises by it); null without the monitor"),
    Metric("tflops", "TFLOP/s", "timer", "flops / (median_ms · 1e-3) / 1e12", "achieved rate (results.figures.tflops)",
      shown=("summary", "cases"), header="TFLOP/s", derive=_tflops),
    Metric("util_peak", "fraction", "timer", "tflops / meta.peak_tflops[dtype]", "share of the datasheet dense peak",
      shown=("summary", "cases"), header="util peak", derive=_utilization("peak_tflops", "util_peak")),
    Metric("util_measured", "fraction", "timer", "tflops / meta.measured_gemm_tflops",
      "share of the GEMM ceiling measured in the run", shown=("summary", "cases"), header="util GEMM",
      derive=_utilization("measured_gemm_tflops", "util_measured")),
    Metric("speedup", "×", "frame", "median_ms(baseline, same shape) / median_ms",
      "time ratio vs the baseline provider on the same shape (> 1: faster)", shown=("cases",), header="speedup",
      derive=lambda df, meta: speedup_vs_baseline(df, df.attrs.get("baseline"))),
    Metric("correctness", "", "gate", "", "the correctness gate (docs/DESIGN.md §9); null when the gate is off",
      kind="block"),
    Metric("correctness.rel_err", "", "gate", "‖out − ref‖ / ‖ref‖ in fp64, the worst tensor",
      "relative error against the exact reference", shown=("cases",), header="rel err", fmt="sci"),
    Metric("correctness.tolerance", "", "gate", "", "the largest rel_err that passes", fmt="sci"),
    Metric("correctness.passed", "", "gate", "rel_err ≤ tolerance, no NaN/Inf", "the case passed the gate",
      kind="flag"),
    Metric("correctness.per_tensor", "", "gate", "", "{out[, dq, dk, dv]: rel_err}", kind="object"),
    Metric("correctness.checked_seqs", "count", "gate", "", "sequences compared with the reference"),
    Metric("energy_j_per_call", "J", "frame", "power.energy_j_per_call, else power.avg_w · median_ms / 1000",
      "energy per call", shown=("summary", "cases"), header="J/call", derive=_energy),
    Metric("power_w", "W", "frame", "power.avg_w_from_energy, else power.avg_w (results.power.headline_w)",
      "the one power figure a report shows", shown=("summary", "cases"), header="W (energy counter)",
      derive=lambda df, meta: _rows_map(df, lambda r: number(power_flags(_power_of(r))["headline_w"]))),
    Metric("power_above_cap", "", "frame", "power.above_cap", "flagged above the cap + 3%", kind="flag",
      derive=_flag("above_cap")),
    Metric("power_estimators_apart", "", "frame", "power.estimators_disagree",
      "flagged: the two power estimators more than 5% apart", kind="flag", derive=_flag("estimators_disagree")),
    Metric("power", "", "energy loop", "", "power during the energy loop (docs/DESIGN.md §5); null without the monitor",
      kind="block"),
    Metric("power.n_samples", "count", "energy loop", "", "sampler readings in the window"),
    Metric("power.avg_w", "W", "energy loop", "mean of the readings", "the samples' average power over the window"),
    Metric("power.peak_w", "W", "energy loop", "max of the readings", "the highest reading", shown=("cases",),
      header="peak W"),
    Metric("tflops_per_w", "TFLOP/s/W", "frame", "power.tflops_per_w, else tflops / power.avg_w", "efficiency",
      shown=("cases",), header="TFLOP/s/W", derive=_per_watt),
    Metric("power.frac_at_cap", "fraction", "energy loop", "share of readings with power ≥ 0.97·cap or sw_power_cap",
      "how much of the loop ran at the power cap", shown=("summary", "cases"), header="at cap"),
    Metric("power.frac_power_at_cap", "fraction", "energy loop", "share of readings with power ≥ 0.97·cap",
      "the power part of frac_at_cap"),
    Metric("power.frac_sw_power_cap", "fraction", "energy loop", "share of readings with the sw_power_cap reason",
      "the reason part of frac_at_cap"),
    Metric("power.sm_clock_mhz_median", "MHz", "energy loop", "median SM clock of the readings", "the loop's SM clock",
      shown=("cases",), header="SM MHz"),
    Metric("power.temperature_c_max", "°C", "energy loop", "", "the hottest reading"),
    Metric("power.reasons", "", "energy loop", "", "clock-event reasons seen in any reading (sw_power_cap, thermal, …)",
      kind="list", shown=("cases",), header="reasons"),
    Metric("power.energy_j_per_call", "J", "energy loop", "avg_w_from_energy · seconds / calls",
      "energy per call from the energy counter"),
    Metric("power.energy_source", "", "energy loop", "", "counter_ticks · counter · samples: how the energy was read",
      kind="text"),
    Metric("power.avg_w_from_energy", "W", "energy loop", "Δ energy counter / Δt between its first and last step",
      "the headline power estimator"),
    Metric("power.avg_w_from_energy_delta", "W", "energy loop", "(counter at end − at start) / seconds",
      "the plain start/end delta, for comparison"),
    Metric("power.energy_span_s", "s", "energy loop", "", "the time the counter figure covers", fmt="ms"),
    Metric("power.counter_step_ms", "ms", "energy loop", "", "median time between counter updates"),
    Metric("power.avg_w_same_span", "W", "energy loop", "mean of the readings over energy_span_s",
      "the second estimator of the same energy"),
    Metric("power.n_samples_same_span", "count", "energy loop", "", "readings over energy_span_s"),
    Metric("power.tflops", "TFLOP/s", "energy loop", "flops · calls / seconds / 1e12", "the loop's rate"),
    Metric("power.tflops_per_w", "TFLOP/s/W", "energy loop", "power.tflops / headline_w", "the loop's efficiency"),
    Metric("power.cap_w", "W", "energy loop", "", "the configured cap, else the enforced limit"),
    Metric("power.calls", "count", "energy loop", "", "calls in the window"),
    Metric("power.seconds", "s", "energy loop", "", "the window's length", fmt="ms"),
    Metric("power.headline_w", "W", "energy loop", "avg_w_from_energy, else avg_w (results.power.headline_w)",
      "the one power figure a report shows"),
    Metric("power.estimator_diff", "fraction", "energy loop", "avg_w_same_span / avg_w_from_energy − 1",
      "how far the two estimators are apart"),
    Metric("power.estimators_disagree", "", "energy loop", "|estimator_diff| > 5%", "flag", kind="flag"),
    Metric("power.above_cap", "", "energy loop", "headline_w > cap_w · 1.03", "flag", kind="flag"),
    Metric("power.settle_s", "s", "energy loop", "", "the pre-roll before the window opened", fmt="ms"),
    Metric("power.power_source", "", "energy loop", "", "instant (NVML field) or average (~1 s NVML average)",
      kind="text"),
    Metric("power.monitor_error", "", "energy loop", "", "an NVML error while the loop ran, or null", kind="text"),
    Metric("gpu_index", "count", "runner", "", "the GPU that ran the case (null on CPU)"),
    Metric("gpu_name", "", "runner", "", "its name", kind="text"),
    Metric("kernel_config", "", "provider", "",
      "what the provider ran (`kernel_configs()`): for the GDPA op the backend and reason per pass, tiles, "
        "registers, spills",
      kind="object"),
    Metric("wall_s", "s", "runner", "", "wall time of the whole case (gate, build, timing, energy loop)", fmt="ms"),
    Metric("min_bytes", "B", "frame", "elem · (2Q + 2K) fwd, (3Q + 4K) bwd, both for fwd_bwd",
      "compulsory HBM traffic (results.figures.min_bytes)", fmt="sci",
      derive=lambda df, meta: _rows_map(df, min_bytes)),
    Metric("intensity", "FLOP/B", "frame", "flops / min_bytes", "arithmetic intensity", shown=("cases",),
      header="FLOP/B", derive=lambda df, meta: _rows_map(df, lambda r: intensity(r["flops"], r["min_bytes"]))),
    Metric("error", "", "runner", "", "null, or why the case is not ok (one line)", kind="text", shown=("cases",),
      header="error"),
    Metric("monitor_overhead", "", "overhead check", "", "the case timed again with the sampler stopped", kind="block",
      optional=True),
    Metric("monitor_overhead.median_ms_with", "ms", "overhead check", "", "median with the sampler on"),
    Metric("monitor_overhead.median_ms_without", "ms", "overhead check", "", "median with it stopped"),
    Metric("monitor_overhead.overhead", "fraction", "overhead check", "with / without − 1", "what monitoring costs"),
    Metric("tc_util_ncu", "fraction", "profile", "sm__pipe_tensor_op_hmma_cycles_active (% of peak sustained)",
      "tensor-pipe activity read by Nsight Compute", optional=True),
    Metric("ncu_sm_clock_mhz", "MHz", "profile", "", "the SM clock under Nsight Compute", optional=True),
    Metric("ncu_kernels", "", "profile", "", "the kernels profiled", kind="object", optional=True),
    Metric("ncu_duration_ms", "ms", "profile", "", "their total duration", optional=True),
    Metric("ncu_report", "", "profile", "", "the kept .ncu-rep file", kind="text", optional=True),
    Metric("host", "", "merge", "", "the host that ran the case (merged runs)", kind="text", optional=True),
    Metric("node", "count", "merge", "", "its node (cluster runs)", optional=True),
    Metric("local_gpu_index", "count", "merge", "", "its GPU on that node (cluster runs)", optional=True),
    # identity read back from the id for runs that lack the fields (results.frame.case_keys)
    Metric("shape", "", "frame", "id without its last `/label`", "the shape: cases on one shape compare", kind="text"),
    Metric("panel", "", "frame", "shape without its `L=` segment", "one plot panel", kind="text"),
    Metric("sweep_label", "", "frame", "`axis=value, ...` of sweep", "the swept values besides L", kind="text"),
)
# fmt: on
# What the run's `workloads` entry holds per workload, and the statistics the report shows.
# fmt: off
WORKLOAD_METRICS: tuple[Metric, ...] = (
    Metric("q_lengths", "tokens", "lengths", "", "every sequence's query length", kind="list"),
    Metric("kv_lengths", "tokens", "lengths", "", "every sequence's key length", kind="list"),
    Metric("stats", "", "lengths", "", "the statistics of the lengths (workloads.stats)", kind="block"),
    Metric("stats.B", "count", "lengths", "", "sequences", shown=("workloads",), header="B"),
    Metric("stats.total_q", "tokens", "lengths", "ΣLq", "query rows", shown=("workloads",), header="total Q"),
    Metric("stats.total_kv", "tokens", "lengths", "ΣLk", "key rows", shown=("workloads",), header="total KV"),
    Metric("stats.mean_q", "tokens", "lengths", "", "mean Lq", shown=("workloads",), header="mean Q", fmt="whole"),
    Metric("stats.p50_q", "tokens", "lengths", "", "median Lq", shown=("workloads",), header="p50 Q", fmt="whole"),
    Metric("stats.p90_q", "tokens", "lengths", "", "90th percentile of Lq", shown=("workloads",), header="p90 Q",
      fmt="whole"),
    Metric("stats.p99_q", "tokens", "lengths", "", "99th percentile of Lq", shown=("workloads",), header="p99 Q",
      fmt="whole"),
    Metric("stats.max_q", "tokens", "lengths", "", "max Lq", shown=("workloads",), header="max Q"),
    Metric("stats.mean_kv", "tokens", "lengths", "", "mean Lk", shown=("workloads",), header="mean KV", fmt="whole"),
    Metric("stats.p50_kv", "tokens", "lengths", "", "median Lk"),
    Metric("stats.p90_kv", "tokens", "lengths", "", "90th percentile of Lk"),
    Metric("stats.p99_kv", "tokens", "lengths", "", "99th percentile of Lk"),
    Metric("stats.max_kv", "tokens", "lengths", "", "max Lk", shown=("workloads",), header="max KV"),
    Metric("stats.padding_waste", "fraction", "lengths", "1 − ΣLq / (B·max Lq)", "padding of a dense Q layout",
      shown=("workloads",), header="padding waste Q"),
    Metric("stats.padding_waste_kv", "fraction", "lengths", "1 − ΣLk / (B·max Lk)", "padding of a dense KV layout",
      shown=("workloads",), header="padding waste KV"),
    Metric("stats.flop_waste", "fraction", "lengths", "1 − ΣLqLk / (B·max Lq·max Lk)",
      "FLOP area a dense layout wastes", shown=("workloads",), header="FLOP waste"),
    Metric("stats.imbalance", "", "lengths", "max(LqLk) / mean(LqLk)", "work of the largest sequence over the mean",
      shown=("workloads",), header="imbalance", fmt="frac"),
    Metric("stats.top1pct_work_share", "fraction", "lengths", "", "share of the work in the largest 1% of sequences",
      shown=("workloads",), header="top-1% work share"),
    Metric("stats.total_work_pairs", "count", "lengths", "Σ unmasked (q, k) pairs", "the work FLOPs are counted on"),
    Metric("stats.lengths_sha256", "", "lengths", "", "a hash of the Q and KV lengths", kind="text"),
    Metric("family", "", "config", "", "the length family", kind="text"),
    Metric("params", "", "config", "", "its parameters", kind="object"),
    Metric("pairing", "", "config", "", "the Q/KV pairing rule", kind="text"),
    Metric("pairing_params", "", "config", "", "its parameters", kind="object"),
)
# fmt: on


def shown_in(view: str, table: tuple[Metric, ...] | None = None) -> list[Metric]:
    """The rows a report view shows, in order."""
    return [m for m in (METRICS if table is None else table) if view in m.shown]


def frame_columns() -> list[Metric]:
    """The results frame's columns: every row but the blocks and the objects kept whole."""
    return [m for m in METRICS if m.kind not in ("block", "object")]


def field_reference() -> str:
    """The field reference of docs/DESIGN.md §6, as Markdown (`gdpa-bench fields` prints it)."""

    def table(rows: list[Metric]) -> list[str]:
        out = ["| field | unit | source | formula | description | shown |", "|---|---|---|---|---|---|"]
        for m in rows:
            shown = ", ".join(f'{v} "{m.header}"' for v in m.shown)
            when = " Only where it applies." if m.optional else ""
            cells = [f"`{m.name}`", m.unit, m.source, m.formula, m.description + when, shown]
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return out

    groups = [
        ("**cases** — one record per case; a block's keys are `block.key`:", [m for m in METRICS if m.in_record]),
        (
            "**derived when read** (`results.load_run`'s frame; not in results.json):",
            [m for m in METRICS if not m.in_record],
        ),
        ("**workloads** — per workload name:", list(WORKLOAD_METRICS)),
    ]
    return "\n\n".join(title + "\n\n" + "\n".join(table(rows)) for title, rows in groups)
