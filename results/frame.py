"""The results frame: the cases of results.json as one pandas row each (`load_run`, `cases_frame`), with a
column for every row of the metric table (results.metrics) and the derived rows computed by the table's
`derive` functions — the same figures (results.figures, results.power) the runner records with.

Every reader here tolerates missing or null fields (older or partial runs, CPU runs without power or
peaks): a missing number becomes NaN and is shown as "—" by the report; identity fields an older run
lacks are read back from the case id (`case_keys`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernels.modes import MODES
from results import metrics
from results.band_ceiling import recorded_right
from results.figures import field, number
from results.files import flatten_cases, read_results


def load_run(path: str | Path, baseline: str | None = None) -> tuple[dict, pd.DataFrame, dict]:
    """(meta, cases, workloads) of a run. `path`: the run folder or its results.json.

    `cases` has one row per case: the scalar fields, nested dicts flattened with dotted names
    (`power.avg_w`, `workload.total_q`, `sweep.fill`, `correctness.rel_err`), plus the derived columns of
    the metric table (results.metrics). `baseline` overrides `meta.baseline_provider` for the speedup column. Raises
    `ResultsError` (one line) for a missing or invalid results.json.

        from results import load_run
        meta, cases, workloads = load_run("runs/smoke-20261201T100000Z")
        cases[cases.status == "ok"][["id", "tflops", "util_peak"]]
    """
    data = read_results(path)
    meta = data["meta"]
    workloads = data["workloads"]
    # a band view recorded with another tile than its kernel's longest band ran: its ceiling recomputed
    cases = cases_frame([recorded_right(c, workloads) for c in data["cases"]], meta, baseline=baseline)
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


def cases_frame(cases: Iterable[dict], meta: dict | None = None, baseline: str | None = None) -> pd.DataFrame:
    """Flatten `cases` (as in results.json) into one row each: a column per row of the metric table
    (results.metrics; missing values NaN/None), the derived rows computed in table order."""
    cases, meta = list(cases), meta or {}
    df = flatten_cases(cases)
    keys = pd.DataFrame([case_keys(c) for c in cases], index=df.index if len(df) else None)
    for col in [c for c in keys.columns if c in df.columns]:  # in place: the record's column order stays
        df[col] = keys[col]
    missing = {
        m.name: pd.Series([[] if m.kind in ("list", "table") else None for _ in df.index], index=df.index, dtype=object)
        for m in metrics.frame_columns()
        if m.name not in df.columns and m.name not in keys.columns
    }
    new_keys = keys[[c for c in keys.columns if c not in df.columns]]
    df = pd.concat([df, new_keys, pd.DataFrame(missing, index=df.index)], axis=1)
    for m in metrics.frame_columns():
        if m.kind == "number":
            df[m.name] = pd.to_numeric(df[m.name], errors="coerce").astype(float)
        elif m.kind == "text":
            df[m.name] = df[m.name].astype(object)
        elif m.kind in ("list", "table"):  # a case without it: an empty list, as for a case with none
            df[m.name] = df[m.name].map(lambda v: v if isinstance(v, list) else [])
    # A case without a status cannot be trusted: treat it as failed; only an ok case has timings.
    df["status"] = df["status"].where(df["status"].notna(), "failed")
    df["ok"] = df["status"] == "ok"
    for m in metrics.frame_columns():
        if m.source == "timer" and m.kind == "number":
            df.loc[~df["ok"], m.name] = np.nan
    missing = df["ok"] & df["median_ms"].isna()  # a median from the samples when the runner left it out
    for i in df.index[missing]:
        if df.at[i, "times_ms"]:
            df.at[i, "median_ms"] = float(np.median(df.at[i, "times_ms"]))
    df.attrs["baseline"] = baseline_provider(meta, baseline)
    for m in metrics.METRICS:
        if m.derive is not None:
            df[m.name] = m.derive(df, meta)
    return df.copy()  # one block per dtype again after the columns added one by one


def table_frame(cases: pd.DataFrame, table: str, keep: Iterable[str] = ("id", "label")) -> pd.DataFrame:
    """A table inside the cases (`kernels.rows`, `bands.rows`, `counters.kernels`) in long form: one row per
    entry, the case's `keep` columns first, then every column the metric table declares for it (named
    `table.column`; missing values None), in entry order."""
    keep, columns = list(keep), [m.name for m in metrics.table_columns(table)]
    rows = [
        {**{k: case[k] for k in keep}, **{c: entry.get(c.rsplit(".", 1)[1]) for c in columns}}
        for _, case in (cases.iterrows() if len(cases) and table in cases else [])
        for entry in (case[table] if isinstance(case[table], list) else [])
        if isinstance(entry, dict)
    ]
    return pd.DataFrame(rows, columns=[*keep, *columns])


def baseline_provider(meta: dict, override: str | None = None) -> str | None:
    return override or (meta.get("baseline_provider") if isinstance(meta, dict) else None) or None
