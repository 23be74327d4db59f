"""power.csv, the NVML timeline of a run (docs/DESIGN.md §5, §6): written by the monitor, stitched by a
resumed run and the shard merge (`append_timeline`, the one stitching rule), read by the report and
`compare`."""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from results.files import ResultsWriteError, atomic_write

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


def timeline_offsets(old: pd.DataFrame | None) -> dict[str, float]:
    """Where each GPU's next segment of a timeline starts: `TIMELINE_GAP_S` after the last sample `old`
    (power.csv cells, `read_power_text`) holds of it; a GPU it does not hold starts at its own 0."""
    if old is None or not len(old):
        return {}
    times = pd.to_numeric(old["time_s"], errors="coerce")
    gpus = old["gpu_index"].astype(str)
    last = times.groupby(gpus).max().dropna()
    return {str(g): float(t) + TIMELINE_GAP_S for g, t in last.items()}


def shift_timeline(new: pd.DataFrame, offsets: dict[str, float], gpu_index: int | None = None) -> pd.DataFrame:
    """`new`'s rows (power.csv cells) with each GPU's times moved by its offset (`timeline_offsets`);
    `gpu_index` relabels them first (a shard's GPU), None keeps their own."""
    new = new.copy()
    if gpu_index is not None:
        new["gpu_index"] = str(gpu_index)
    gpus = pd.to_numeric(new.get("gpu_index", pd.Series("0", index=new.index)), errors="coerce").fillna(0)
    new["gpu_index"] = gpus.astype(int).astype(str)
    times = pd.to_numeric(new["time_s"], errors="coerce")
    for g, offset in offsets.items():
        sel = new["gpu_index"] == g
        times[sel] = times[sel] + offset
    new["time_s"] = times.map(lambda t: "" if math.isnan(t) else f"{t:.6f}")
    return new.reset_index(drop=True)


def append_timeline(old: pd.DataFrame | None, new: pd.DataFrame, gpu_index: int | None = None) -> pd.DataFrame:
    """The one stitching rule of power timelines: each GPU's new segment starts `TIMELINE_GAP_S` after
    the last sample that GPU already has (every monitor starts its clock at 0).

    Frames hold power.csv cells as strings (`read_power_text`). `gpu_index` relabels the new rows (a
    shard's GPU); None keeps their own."""
    new = shift_timeline(new, timeline_offsets(old), gpu_index)
    if old is None or not len(old):
        return new
    return pd.concat([old, new], ignore_index=True)


class PowerTimeline:
    """power.csv written as a run goes: `append` adds the samples of the cases finished since the last call,
    so a process that dies between cases (its worker killed for a hang, a segfault, the OOM killer) leaves
    the timeline of every case it recorded, as results.json keeps their records. A resumed run's segment
    (a fresh worker's, too) starts after what the file holds (`append_timeline`'s rule); without `resume`
    the first append starts the file afresh. Rows are appended, not the file rewritten: a run's timeline
    grows by the case, and rewriting it whole after each case would cost the square of its length."""

    def __init__(self, path: Path, resume: bool):
        self.path = Path(path)
        if resume and self.path.exists():
            try:
                _end_at_a_whole_row(self.path)
            except OSError as exc:
                raise ResultsWriteError.of(self.path, exc) from None
        old = read_power_text(self.path) if resume else None
        self._offsets = timeline_offsets(old)
        self._fresh = old is None or not len(old)  # the header comes with the first rows
        self.appended = 0  # samples written by this process

    def append(self, samples: list[dict]) -> None:
        """Write `samples` (dicts as `power_csv_text` takes them) after the file's rows. An OSError is a
        one-line ResultsWriteError naming the file."""
        if not samples:
            return
        new = pd.read_csv(io.StringIO(power_csv_text(samples)), dtype=str, keep_default_na=False)
        text = shift_timeline(new, self._offsets).to_csv(index=False, header=self._fresh)
        try:
            if self._fresh:
                atomic_write(self.path, text)
            else:
                _end_at_a_whole_row(self.path)  # an append a signal broke off in this process
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as exc:
            raise ResultsWriteError.of(self.path, exc) from None
        self._fresh = False
        self.appended += len(samples)


def _end_at_a_whole_row(path: Path) -> None:
    """Cut a last row a killed process left half-written (no newline after it): appended to, it would join
    the next row into one line of too many cells, and the whole file would no longer parse."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return
        block = min(size, 1 << 16)
        f.seek(size - block)
        tail = f.read(block)
        cut = tail.rfind(b"\n")
        f.truncate(size - block + cut + 1 if cut >= 0 else 0)


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
