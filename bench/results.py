"""results.json (schema `gdpa-bench/1`, DESIGN §6) and results.csv, rewritten after every case.

Each write goes to a temporary file that is then renamed over the old one, so a run killed at any
moment leaves a valid results.json holding every case finished before the kill.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

SCHEMA = "gdpa-bench/1"


def _clean(obj):
    """JSON has no NaN/Inf: write them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def flatten_case(case: dict) -> dict:
    """One CSV row: scalar fields, nested dicts flattened with dots, sample lists left out."""
    row = {}
    for key, val in case.items():
        if key == "times_ms":
            row["n_samples"] = len(val or [])
        elif isinstance(val, dict):
            for k2, v2 in val.items():
                if isinstance(v2, dict):
                    for k3, v3 in v2.items():
                        if not isinstance(v3, (list, dict)):
                            row[f"{key}.{k2}.{k3}"] = v3
                elif isinstance(v2, list):
                    row[f"{key}.{k2}"] = "|".join(map(str, v2))
                else:
                    row[f"{key}.{k2}"] = v2
        elif not isinstance(val, list):
            row[key] = val
    return row


class ResultsWriter:
    def __init__(self, run_dir: Path, meta: dict, existing: dict | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.data = existing or {"schema": SCHEMA, "meta": meta, "workloads": {}, "cases": []}
        if existing:
            old = self.data["meta"]
            resumed = old.get("resumed_at", []) + [meta.get("started_at")]
            keep = {k: old[k] for k in ("started_at",) if old.get(k)}
            old.update({k: v for k, v in meta.items() if v is not None})
            old.update(keep, resumed_at=resumed)
        self.flush()

    @property
    def json_path(self) -> Path:
        return self.run_dir / "results.json"

    @property
    def csv_path(self) -> Path:
        return self.run_dir / "results.csv"

    def done_ids(self) -> set[str]:
        return {c["id"] for c in self.data["cases"]}

    def add_workload(self, name: str, entry: dict) -> None:
        self.data["workloads"][name] = entry

    def add_case(self, case: dict) -> None:
        cases = self.data["cases"]
        cases[:] = [c for c in cases if c["id"] != case["id"]]
        cases.append(case)
        self.flush()

    def update_meta(self, **fields) -> None:
        self.data["meta"].update(fields)
        self.flush()

    def flush(self) -> None:
        _atomic_write(self.json_path, json.dumps(_clean(self.data), indent=1))
        rows = [flatten_case(c) for c in self.data["cases"]]
        _atomic_write(self.csv_path, pd.DataFrame(rows).to_csv(index=False) if rows else "id\n")


def load_results(path: str | Path) -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    data = json.loads(path.read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema is {data.get('schema')!r}, expected {SCHEMA!r}")
    return data
