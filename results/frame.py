"""The results frame: the cases of results.json as one pandas row each, with the figures derived from them
(`load_run`, `cases_frame`). Reading and flattening the files is `results.files` (docs/DESIGN.md §6); the
figures are computed by `results.figures` and `results.power`, the same functions the runner records them
with.

- Speedup of a provider on a shape = median_ms(baseline) / median_ms(provider), both on the same shape
  (the case id without its last `/provider` segment, so the mode is part of the shape). Same FLOPs on
  both sides, so this is also the TFLOP/s ratio. NaN when the baseline or the provider is not `ok`.
- Energy per call: the runner's `power.energy_j_per_call` (NVML energy counter); when absent but an
  average power is known, estimated as avg_w · median_ms / 1000. TFLOP/s per W likewise falls back to
  tflops / avg_w. `power_w`: the one power figure shown (`results.power.headline_w`);
  `power_above_cap` / `power_estimators_apart`: its flags (`results.power.power_flags`).

Every reader here tolerates missing or null fields (older or partial runs, CPU runs without power or
peaks): a missing number becomes NaN and is shown as "—" by the report.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernels.registry import MODES
from results.figures import (
    ceiling_for,
    energy_per_call,
    field,
    intensity,
    min_bytes,
    number,
    tflops,
    tflops_per_watt,
    utilization,
)
from results.files import flatten_cases, read_results
from results.power import power_flags

#: Columns kept as Python objects (lists) rather than flattened.
LIST_FIELDS = ("times_ms", "power.reasons")


def load_run(path: str | Path, baseline: str | None = None) -> tuple[dict, pd.DataFrame, dict]:
    """(meta, cases, workloads) of a run. `path`: the run folder or its results.json.

    `cases` has one row per case: the scalar fields, nested dicts flattened with dotted names
    (`power.avg_w`, `workload.total_q`, `sweep.fill`, `correctness.rel_err`), plus derived columns (see
    `add_metrics`). `baseline` overrides `meta.baseline_provider` for the speedup column. Raises
    `ResultsError` (one line) for a missing or invalid results.json.

        from results import load_run
        meta, cases, workloads = load_run("runs/smoke-20261201T100000Z")
        cases[cases.status == "ok"][["id", "tflops", "util_peak"]]
    """
    data = read_results(path)
    meta = data["meta"]
    workloads = data["workloads"]
    cases = cases_frame(data["cases"], meta, baseline=baseline)
    return meta, cases, workloads


# ------------------------------------------------------------------------------------------- flattening


def shape_key(case_id: str) -> str:
    """The shape of a case: its id without the last `/provider` segment (mode included)."""
    return case_id.rsplit("/", 1)[0] if "/" in case_id else case_id


def panel_key(shape: str) -> str:
    """A shape with its `L=` segment removed: set/mode/other sweep values (one plot panel)."""
    parts = [p for p in shape.split("/") if not re.fullmatch(r"L=\d+", p)]
    return "/".join(parts)


def provider_label(provider: Any, semantics: Any) -> str:
    """How a provider is named in every table and legend: softmax ones say so."""
    name = str(provider) if provider not in (None, "") else "?"
    return f"{name} (softmax)" if semantics == "softmax" else name


def case_keys(case: dict) -> dict:
    """The keys a report groups by, derived from a case (with fallbacks from its id for old runs)."""
    cid = str(case.get("id", ""))
    parts = cid.split("/")
    shape = shape_key(cid)
    keys: dict[str, Any] = {"shape": shape, "panel": panel_key(shape)}
    keys["set"] = case.get("set") if case.get("set") is not None else (parts[0] if len(parts) > 1 else None)
    keys["provider"] = (
        case.get("provider") if case.get("provider") is not None else (parts[-1] if len(parts) > 1 else None)
    )
    keys["mode"] = case.get("mode") if case.get("mode") is not None else next((p for p in parts if p in MODES), None)
    if case.get("max_len") is not None:
        keys["max_len"] = case["max_len"]
    else:
        m = re.search(r"(?:^|/)L=(\d+)(?:/|$)", cid)
        keys["max_len"] = int(m.group(1)) if m else field(case, "workload.max_q")
    sweep = case.get("sweep")
    if isinstance(sweep, dict) and sweep:
        keys["sweep_label"] = ", ".join(f"{k}={v}" for k, v in sweep.items())
    else:  # from the id: every k=v segment but L=
        keys["sweep_label"] = ", ".join(p for p in parts[:-1] if "=" in p and not p.startswith("L="))
    keys["semantics"] = case.get("semantics") if case.get("semantics") is not None else "gdpa"
    keys["label"] = provider_label(keys["provider"], keys["semantics"])
    times = case.get("times_ms")
    keys["times_ms"] = [float(t) for t in times if number(t) == number(t)] if isinstance(times, list) else []
    reasons = field(case, "power.reasons")
    keys["power.reasons"] = list(reasons) if isinstance(reasons, list) else []
    keys["n_samples"] = len(keys["times_ms"])
    return keys


#: Columns every cases frame has, whatever the input held (missing → NaN/None).
BASE_COLUMNS = (
    "id",
    "shape",
    "panel",
    "set",
    "max_len",
    "sweep_label",
    "provider",
    "semantics",
    "label",
    "mode",
    "dtype",
    "activation",
    "status",
    "error",
    "flops",
    "median_ms",
    "p20_ms",
    "p80_ms",
    "tflops",
    "util_peak",
    "util_measured",
    "times_ms",
    "n_samples",
    "gpu_index",
    "tc_util_ncu",
    "ncu_sm_clock_mhz",
    "correctness.rel_err",
    "correctness.tolerance",
    "correctness.passed",
    "power.avg_w",
    "power.avg_w_from_energy",
    "power.avg_w_same_span",
    "power.cap_w",
    "power.peak_w",
    "power.energy_j_per_call",
    "power.tflops_per_w",
    "power.frac_at_cap",
    "power.sm_clock_mhz_median",
    "power.reasons",
    "power.calls",
    "power.seconds",
    "workload.name",
    "workload.family",
    "workload.B",
    "workload.H",
    "workload.Hkv",
    "workload.D",
    "workload.causal",
    "workload.max_q",
    "workload.max_kv",
    "workload.total_q",
    "workload.total_kv",
    "workload.padding_waste",
    "workload.flop_waste",
    "workload.imbalance",
)
NUMERIC_COLUMNS = (
    "max_len",
    "flops",
    "median_ms",
    "p20_ms",
    "p80_ms",
    "tflops",
    "util_peak",
    "util_measured",
    "gpu_index",
    "tc_util_ncu",
    "ncu_sm_clock_mhz",
    "correctness.rel_err",
    "correctness.tolerance",
    "power.avg_w",
    "power.avg_w_from_energy",
    "power.avg_w_same_span",
    "power.cap_w",
    "power.peak_w",
    "power.energy_j_per_call",
    "power.tflops_per_w",
    "power.frac_at_cap",
    "power.sm_clock_mhz_median",
    "power.calls",
    "power.seconds",
    "workload.B",
    "workload.H",
    "workload.Hkv",
    "workload.D",
    "workload.max_q",
    "workload.max_kv",
    "workload.total_q",
    "workload.total_kv",
    "workload.padding_waste",
    "workload.flop_waste",
    "workload.imbalance",
)


def cases_frame(cases: Iterable[dict], meta: dict | None = None, baseline: str | None = None) -> pd.DataFrame:
    """Flatten `cases` (as in results.json) into a DataFrame and add the derived metrics."""
    cases = list(cases)
    df = flatten_cases(cases)
    keys = pd.DataFrame([case_keys(c) for c in cases], index=df.index if len(df) else None)
    for col in keys.columns:
        df[col] = keys[col] if len(keys) else pd.Series(dtype=object)
    for col in BASE_COLUMNS:
        if col not in df.columns:
            df[col] = pd.Series([[] for _ in range(len(df))] if col in LIST_FIELDS else [None] * len(df), dtype=object)
    for col in NUMERIC_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    for col in ("status", "provider", "semantics", "mode", "dtype", "set", "label"):
        df[col] = df[col].astype(object)
    # A case without a status cannot be trusted: treat it as failed.
    df["status"] = df["status"].where(df["status"].notna(), "failed")
    return add_metrics(df, meta or {}, baseline=baseline)


def baseline_provider(meta: dict, override: str | None = None) -> str | None:
    return override or (meta.get("baseline_provider") if isinstance(meta, dict) else None) or None


def add_metrics(df: pd.DataFrame, meta: dict, baseline: str | None = None) -> pd.DataFrame:
    """Derived columns: tflops, util_peak, util_measured, speedup, energy_j_per_call, tflops_per_w,
    min_bytes, intensity, ok. Runner values are recomputed from flops/median when possible (same
    formula) and kept where the inputs are missing; non-ok cases get NaN timings."""
    df = df.copy()
    ok = df["status"] == "ok"
    df["ok"] = ok
    for col in ("median_ms", "p20_ms", "p80_ms", "tflops", "util_peak", "util_measured"):
        df.loc[~ok, col] = np.nan
    # A median from the samples when the runner left it out.
    need = ok & df["median_ms"].isna()
    for i in df.index[need]:
        t = df.at[i, "times_ms"]
        if isinstance(t, list) and t:
            df.at[i, "median_ms"] = float(np.median(t))
    calc = tflops(df["flops"].to_numpy(), df["median_ms"].to_numpy()) if len(df) else np.array([])
    df["tflops"] = np.where(np.isfinite(calc), calc, df["tflops"].to_numpy(dtype=float)) if len(df) else df["tflops"]
    peaks = meta.get("peak_tflops") or {}
    gemm = meta.get("measured_gemm_tflops")
    util_p, util_m, energy, per_w, mb, ai = [], [], [], [], [], []
    for _, r in df.iterrows():
        up = utilization(r["tflops"], ceiling_for(peaks, r["dtype"]))
        util_p.append(up if not math.isnan(up) else r["util_peak"])
        um = utilization(r["tflops"], ceiling_for(gemm, r["dtype"]))
        util_m.append(um if not math.isnan(um) else r["util_measured"])
        e = r["power.energy_j_per_call"]
        energy.append(
            e if not math.isnan(e) else (energy_per_call(r["power.avg_w"], r["median_ms"]) if r["ok"] else math.nan)
        )
        tw = r["power.tflops_per_w"]
        per_w.append(tw if not math.isnan(tw) else tflops_per_watt(r["tflops"], r["power.avg_w"]))
        b = min_bytes(r)
        mb.append(b)
        ai.append(intensity(r["flops"], b))
    df["util_peak"] = np.asarray(util_p, dtype=float)
    df["util_measured"] = np.asarray(util_m, dtype=float)
    df["energy_j_per_call"] = np.asarray(energy, dtype=float)
    flags = [power_flags(_power_of(r)) for _, r in df.iterrows()]
    df["power_w"] = np.asarray([number(f["headline_w"]) for f in flags], dtype=float)
    df["power_above_cap"] = np.asarray([bool(f["above_cap"]) for f in flags], dtype=bool)
    df["power_estimators_apart"] = np.asarray([bool(f["estimators_disagree"]) for f in flags], dtype=bool)
    df["tflops_per_w"] = np.asarray(per_w, dtype=float)
    df["min_bytes"] = np.asarray(mb, dtype=float)
    df["intensity"] = np.asarray(ai, dtype=float)
    base = baseline_provider(meta, baseline)
    df["speedup"] = speedup_vs_baseline(df, base)
    df.attrs["baseline"] = base
    return df


def _power_of(row: pd.Series) -> dict:
    """A flattened row's `power.*` columns as the case's `power` dict (missing values None)."""
    missing = lambda v: v is None or (isinstance(v, float) and math.isnan(v))
    return {k[len("power.") :]: None if missing(v) else v for k, v in row.items() if k.startswith("power.")}


def speedup_vs_baseline(df: pd.DataFrame, baseline: str | None) -> pd.Series:
    """median_ms(baseline on the same shape) / median_ms(case), aligned with `df`; NaN when the
    baseline is unknown, missing for that shape, or either side is not ok. The baseline's own rows
    get 1.0 when ok."""
    out = pd.Series(np.nan, index=df.index, dtype=float)
    if not baseline or df.empty:
        return out
    ok = (df["status"] == "ok") & (df["median_ms"] > 0)
    base = df[ok & (df["provider"] == baseline)].groupby("shape")["median_ms"].min()
    for i, r in df[ok].iterrows():
        b = base.get(r["shape"])
        if b is not None and b == b:
            out.at[i] = float(b) / float(r["median_ms"])
    return out
