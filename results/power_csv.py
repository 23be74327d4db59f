"""power.csv, the NVML timeline of a run (docs/DESIGN.md §5, §6): written by the monitor, stitched by a
resumed run and the shard merge (`append_timeline`, the one stitching rule), read by the report and
`compare`."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pandas as pd

#: power.csv, one row per NVML sample (docs/DESIGN.md §5).
POWER_COLUMNS = (
    "time_s",
    "gpu_index",
    "power_w",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temperature_c",
    "reasons",
    "case_id",
)
#: Seconds between two stitched segments of one GPU's power timeline (a resumed run, a later shard).
TIMELINE_GAP_S = 1.0


def _cell(v: Any, fmt: str | None = None) -> str:
    if v is None:
        return ""
    return format(v, fmt) if fmt else str(v)


def power_csv_text(samples: list[dict]) -> str:
    """power.csv from sample dicts (keys `POWER_COLUMNS`; `reasons` a list of names or None). Missing
    values are empty cells; reasons are joined with "|"."""
    buf = io.StringIO()
    buf.write(",".join(POWER_COLUMNS) + "\n")
    for s in samples:
        reasons = s.get("reasons")
        row = [
            _cell(s.get("time_s"), ".6f"),
            _cell(s.get("gpu_index")),
            _cell(s.get("power_w"), ".3f"),
            _cell(s.get("sm_clock_mhz")),
            _cell(s.get("mem_clock_mhz")),
            _cell(s.get("temperature_c")),
            "" if reasons is None else "|".join(reasons),
            _csv_quote(str(s.get("case_id") or "")),
        ]
        buf.write(",".join(row) + "\n")
    return buf.getvalue()


def _csv_quote(text: str) -> str:
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(ch in text for ch in ',"\n') else text


def read_power_text(path: Path) -> pd.DataFrame | None:
    """power.csv with every cell kept as written (strings), for stitching files together; None when the
    file is absent, empty or unreadable."""
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (FileNotFoundError, pd.errors.EmptyDataError, pd.errors.ParserError, OSError, UnicodeDecodeError):
        return None
    return df if len(df.columns) else None


def append_timeline(old: pd.DataFrame | None, new: pd.DataFrame, gpu_index: int | None = None) -> pd.DataFrame:
    """The one stitching rule of power timelines: each GPU's new segment starts `TIMELINE_GAP_S` after
    the last sample that GPU already has (every monitor starts its clock at 0).

    Frames hold power.csv cells as strings (`read_power_text`). `gpu_index` relabels the new rows (a
    shard's GPU); None keeps their own."""
    new = new.copy()
    if gpu_index is not None:
        new["gpu_index"] = str(gpu_index)
    gpus = pd.to_numeric(new.get("gpu_index", pd.Series("0", index=new.index)), errors="coerce").fillna(0)
    new["gpu_index"] = gpus.astype(int).astype(str)
    times = pd.to_numeric(new["time_s"], errors="coerce")
    if old is not None and len(old):
        old_t = pd.to_numeric(old["time_s"], errors="coerce")
        old_g = old["gpu_index"].astype(str)
        for g in new["gpu_index"].unique():
            prev = old_t[old_g == g]
            if prev.notna().any():
                sel = new["gpu_index"] == g
                times[sel] = times[sel] + float(prev.max()) + TIMELINE_GAP_S
    new["time_s"] = times.map(lambda t: "" if math.isnan(t) else f"{t:.6f}")
    if old is None or not len(old):
        return new.reset_index(drop=True)
    return pd.concat([old, new], ignore_index=True)


def power_file(path: str | Path) -> Path | None:
    """The power.csv of a run (a run folder, its results.json or the CSV itself), or its gzip-compressed
    power.csv.gz (how a committed example run keeps it small); None when neither exists."""
    p = Path(path)
    if p.name.endswith((".csv", ".csv.gz")):
        return p if p.exists() else None
    folder = p if p.is_dir() else p.parent
    return next((c for c in (folder / "power.csv", folder / "power.csv.gz") if c.exists()), None)


def read_power(path: str | Path) -> pd.DataFrame | None:
    """power.csv (or power.csv.gz, `power_file`) of a run as numbers, sorted by GPU and time, columns
    `POWER_COLUMNS`. None when the file is absent; an empty frame when it is empty or unreadable."""
    p = power_file(path)
    if p is None:
        return None
    text_cols = ("reasons", "case_id")
    try:
        df = pd.read_csv(
            p,
            dtype={c: str for c in text_cols},
            keep_default_na=False,
            na_values={c: [""] for c in POWER_COLUMNS if c not in text_cols},
        )
    except (pd.errors.EmptyDataError, pd.errors.ParserError, OSError, EOFError, UnicodeDecodeError, ValueError):
        return pd.DataFrame(columns=list(POWER_COLUMNS))  # a truncated .gz: EOFError
    for c in POWER_COLUMNS:
        if c not in df.columns:
            df[c] = "" if c in text_cols else math.nan
    for c in POWER_COLUMNS:
        if c not in text_cols:
            df[c] = pd.to_numeric(df[c], errors="coerce")
    for c in text_cols:
        df[c] = df[c].fillna("").astype(str)
    df["gpu_index"] = df["gpu_index"].fillna(0).astype(int)
    return df[df["time_s"].notna()].sort_values(["gpu_index", "time_s"], kind="stable").reset_index(drop=True)
