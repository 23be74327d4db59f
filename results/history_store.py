"""The performance-history store (docs/DESIGN.md §6, "The history store"): every run a CI job makes, kept
so that a case's time can be followed across commits (`gdpa-bench history add|report|check`).

A store is a folder, embedded, no server:

    history.json                        the index: schema `gdpa-bench-history/1`, one entry per run
    parquet/<run_id>-<content>.parquet  one file per run: one row per case

An entry keys its run by commit, commit time, GPU model and config sha256; a row keys its case by case id
and provider label. A *series* is one case id within one (config sha256, GPU) group: runs of another
config or another GPU model are never mixed into it. Each Parquet file's sha256 is in the index, so a file
that was truncated or edited is refused, not read as fewer runs.

Writes are atomic: the new run's file is written beside the others under a temporary name and renamed,
then the index is replaced the same way (`results.files.atomic_write`); a failure at any point leaves the
store as it was (the new file is removed again). The run's file name carries a digest of its content, so
re-adding a run whose cases changed (a resumed run) never overwrites the file the old index names.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import io
import json
import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from results.checks import check_results
from results.drift import MIN_DRIFT_SAMPLES
from results.files import (
    ResultsError,
    ResultsWriteError,
    atomic_write,
    make_dir,
    read_results,
    results_path,
    sessions,
)
from results.frame import case_keys
from results.verdicts import timeline_clocks
from support.inputs import InputError, MiB, check_path_text, load_json, read_regular

SCHEMA = "gdpa-bench-history/1"
INDEX = "history.json"
#: Not `runs/`: the repository ignores every folder of that name (run output), and a store may be committed.
RUNS = "parquet"
LOCK = ".history.lock"
#: The largest index or run file read (a 324-case H200 run with every sample is ~0.2 MiB of Parquet).
MAX_INDEX_BYTES = 64 * MiB
MAX_RUN_BYTES = 256 * MiB
_FILE = re.compile(rf"{RUNS}/[0-9a-f]{{16}}-[0-9a-f]{{12}}\.parquet")

#: One row per case. `times_ns`: every timed sample in measurement order, in integer nanoseconds (CUDA
#: events resolve 0.5 µs at best, so nothing is lost, and delta-encoded integers take ~40% less room than
#: floats). The three clocks are the sources `compare` reads, in its order (results.verdicts._clock).
COLUMNS = pa.schema(
    [
        ("run_id", pa.string()),
        ("config_sha256", pa.string()),
        ("gpu", pa.string()),
        ("commit", pa.string()),
        ("commit_time", pa.string()),
        ("id", pa.string()),
        ("provider", pa.string()),
        ("label", pa.string()),
        ("semantics", pa.string()),
        ("set", pa.string()),
        ("mode", pa.string()),
        ("panel", pa.string()),
        ("shape", pa.string()),
        ("max_len", pa.float64()),
        ("sweep_label", pa.string()),
        ("status", pa.string()),
        ("median_ms", pa.float64()),
        ("p20_ms", pa.float64()),
        ("p80_ms", pa.float64()),
        ("sm_clock_mhz", pa.float64()),
        ("power_sm_clock_mhz", pa.float64()),
        ("timeline_sm_clock_mhz", pa.float64()),
        ("times_ns", pa.list_(pa.int64())),
    ]
)
#: What an index entry holds, each with its type (checked when the index is read).
ENTRY = {
    "run_id": str,
    "file": str,
    "sha256": str,
    "content": str,
    "commit": str,
    "dirty": (bool, type(None)),
    "commit_time": str,
    "commit_time_source": str,
    "gpu": str,
    "config_name": (str, type(None)),
    "config_sha256": str,
    "config_sha_source": str,
    "started_at": (str, type(None)),
    "host": (str, type(None)),
    "source": str,
    "cases": int,
    "ok": int,
    "max_samples": (int, type(None)),
    "added_at": str,
}
#: The meta blocks a config sha256 is derived from when a run does not record one (runs before the field).
CONFIG_BLOCKS = ("config_name", "config_data", "providers", "baseline_provider", "timing", "correctness")


class HistoryError(ValueError):
    """A store, run folder or store file that cannot be used: one line naming it and what is allowed."""


@dataclass(frozen=True)
class Store:
    """An opened store: its folder and its index entries (oldest commit first)."""

    path: Path
    runs: list[dict]

    def frame(self) -> pd.DataFrame:
        """Every run's rows, each file checked against the index first (`HistoryError` otherwise)."""
        frames = [read_run_file(self.path, e) for e in self.runs]
        return pd.concat(frames, ignore_index=True) if frames else empty_frame()


def empty_frame() -> pd.DataFrame:
    return COLUMNS.empty_table().to_pandas()


# ------------------------------------------------------------------------------------------- a run's rows


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) and v.strip() else None


def _utc(text: str, where: str) -> str:
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise HistoryError(
            f"{where}: {text!r} is not an ISO 8601 time; allowed: e.g. 2026-12-01T10:00:00+00:00"
        ) from None
    t = t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)  # a naive time is the UTC the harness writes
    return t.astimezone(dt.timezone.utc).isoformat()


def run_keys(meta: dict, where: str) -> dict:
    """The keys of a run from its meta: commit, commit time, GPU model, config sha256 (each with where it
    came from when not recorded as such)."""
    commit = _text(meta.get("git_commit")) or (_text(meta.get("git_sha")) or "").removesuffix("-dirty") or None
    if commit is None:
        raise HistoryError(
            f"{where}: meta.git_commit: not recorded; allowed: a run made in a git checkout (or with $GDPA_GIT_SHA "
            "set): a history orders runs by commit"
        )
    if _text(meta.get("git_commit_time")):
        commit_time, time_source = _utc(meta["git_commit_time"], f"{where}: meta.git_commit_time"), "git"
    elif _text(meta.get("started_at")):  # $GDPA_GIT_SHA runs record no commit time: the run's own start
        commit_time, time_source = _utc(meta["started_at"], f"{where}: meta.started_at"), "started_at"
    else:
        raise HistoryError(
            f"{where}: meta.git_commit_time and meta.started_at: neither recorded; allowed: a run's meta"
        )
    sha = _text(meta.get("config_sha256"))
    if sha is not None:
        sha_source = "recorded"
    else:  # derived the same way for every such run: the blocks are canonical JSON, keys sorted
        blocks = {k: meta.get(k) for k in CONFIG_BLOCKS}
        sha = hashlib.sha256(json.dumps(blocks, sort_keys=True, default=str).encode()).hexdigest()
        sha_source = "derived from meta " + ", ".join(CONFIG_BLOCKS)
    gpu = _text(meta.get("gpu")) or ("CPU " + meta["cpu"] if _text(meta.get("cpu")) else "CPU")
    dirty = meta.get("git_dirty") if isinstance(meta.get("git_dirty"), bool) else None
    return dict(
        commit=commit,
        dirty=dirty if dirty is not None else (str(meta.get("git_sha") or "").endswith("-dirty") or None),
        commit_time=commit_time,
        commit_time_source=time_source,
        gpu=gpu,
        config_name=_text(meta.get("config_name")),
        config_sha256=sha,
        config_sha_source=sha_source,
        started_at=_text(meta.get("started_at")),
        host=_text(meta.get("host")),
    )


def _number(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else math.nan


def case_row(case: dict, timeline: dict[str, float], max_samples: int | None = None) -> dict:
    """One case as a store row (`COLUMNS` less the run's keys). The median is compare's: of the samples,
    else the recorded `median_ms`; p20/p80 as recorded, else of the samples; a case not ok has none.
    `max_samples`: keep at most that many samples, evenly spaced in measurement order (the median and the
    band stay those of all samples; the gate's tests and the drift then run on the ones kept)."""
    keys = case_keys(case)
    ok = case.get("status") == "ok"
    times = np.asarray(keys["times_ms"] if ok else [], dtype=float)
    median, p20, p80 = (_number(case.get(k)) if ok else math.nan for k in ("median_ms", "p20_ms", "p80_ms"))
    if times.size:
        median = float(np.median(times))
        p20 = p20 if p20 == p20 else float(np.percentile(times, 20))
        p80 = p80 if p80 == p80 else float(np.percentile(times, 80))
    if max_samples is not None and times.size > max_samples:
        times = times[np.linspace(0, times.size - 1, max_samples).round().astype(int)]
    return dict(
        id=case["id"],
        provider=None if keys["provider"] is None else str(keys["provider"]),
        label=keys["label"],
        semantics=str(keys["semantics"]),
        set=None if keys["set"] is None else str(keys["set"]),
        mode=keys["mode"],
        panel=keys["panel"],
        shape=keys["shape"],
        max_len=_number(keys["max_len"]),
        sweep_label=keys["sweep_label"],
        status=str(case.get("status")),
        median_ms=median,
        p20_ms=p20,
        p80_ms=p80,
        sm_clock_mhz=_number(case.get("sm_clock_mhz")),
        power_sm_clock_mhz=_number((case.get("power") or {}).get("sm_clock_mhz_median")),
        timeline_sm_clock_mhz=_number(timeline.get(case["id"])),
        times_ns=np.rint(times * 1e6).astype(np.int64).tolist(),
    )


def read_run(run_dir: str | Path, max_samples: int | None = None) -> tuple[dict, pd.DataFrame]:
    """(index entry less its file fields, rows) of a run folder or results.json, checked as `compare`
    checks a run (results.checks): a malformed run is refused, never stored as fewer cases. `max_samples`:
    see `case_row` (None: every sample)."""
    if max_samples is not None and max_samples < MIN_DRIFT_SAMPLES:
        raise HistoryError(f"--max-samples {max_samples}: allowed: at least {MIN_DRIFT_SAMPLES} (what a drift needs)")
    try:
        data = read_results(run_dir)
        cases = check_results(data, str(run_dir))
    except ResultsError as exc:
        raise HistoryError(str(exc)) from None
    if not cases:
        raise HistoryError(f"{results_path(run_dir)}: cases: none recorded; allowed: a run with at least one case")
    keys = run_keys(data["meta"], str(run_dir))
    commits = sorted({str(r.get("git_sha")) for r in sessions(data["meta"]) if isinstance(r, dict)})
    if len(commits) > 1:
        raise HistoryError(
            f"{results_path(run_dir)}: meta.sessions: its cases were measured at {len(commits)} commits "
            f"({', '.join(commits)}); allowed: a run of one commit (a history orders runs by commit): rerun "
            "the cases of the other sessions at one commit"
        )
    ident = [keys["config_sha256"], keys["gpu"], data["meta"].get("gpu_uuid"), keys["host"]]
    ident += [data["meta"].get("git_sha"), keys["started_at"]]
    run_id = hashlib.sha256(json.dumps(ident, default=str).encode()).hexdigest()[:16]
    timeline = timeline_clocks(run_dir)
    records = [case_row(c, timeline, max_samples) for c in cases.values()]
    # what a resumed run changes: its cases, their statuses and samples
    what = [[r["id"], r["status"], r["median_ms"], r["times_ns"]] for r in records]
    content = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:12]
    rows = pd.DataFrame(records)
    for k in ("config_sha256", "gpu", "commit", "commit_time"):
        rows.insert(0, k, keys[k])
    rows.insert(0, "run_id", run_id)
    rows = pa.Table.from_pandas(rows, schema=COLUMNS, preserve_index=False).to_pandas()
    entry = dict(
        run_id=run_id,
        content=content,
        **keys,
        source=str(run_dir),
        cases=len(rows),
        ok=int((rows["status"] == "ok").sum()),
        max_samples=max_samples,
    )
    return entry, rows


# ------------------------------------------------------------------------------------------------ files


def parquet_bytes(rows: pd.DataFrame) -> bytes:
    # no pandas metadata, no Arrow schema copy, no min/max statistics: the reader casts to COLUMNS and
    # reads whole files, and the three took a quarter of a file (the stores are kept, in CI and in docs/)
    table = pa.Table.from_pandas(rows, schema=COLUMNS, preserve_index=False).replace_schema_metadata(None)
    buf = io.BytesIO()
    pq.write_table(
        table,
        buf,
        compression="zstd",
        # samples as deltas (no dictionary for them: Parquet encodes a column one way or the other)
        use_dictionary=[c for c in COLUMNS.names if c != "times_ns"],
        column_encoding={"times_ns": "DELTA_BINARY_PACKED"},
        write_statistics=False,
        store_schema=False,
    )
    return buf.getvalue()


def read_run_file(store: Path, entry: dict) -> pd.DataFrame:
    path = store / entry["file"]
    where = f"{path}"
    try:
        raw = read_regular(path, kind="a run file of the history store", max_bytes=MAX_RUN_BYTES, what=where)
    except InputError as exc:
        raise HistoryError(f"{exc} (listed in {store / INDEX})") from None
    if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
        raise HistoryError(f"{where}: corrupt: its sha256 differs from the one {store / INDEX} records")
    try:
        table = pq.read_table(pa.BufferReader(raw))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise HistoryError(f"{where}: not a readable Parquet file ({exc})") from None
    missing = [c for c in COLUMNS.names if c not in table.column_names]
    if missing:
        raise HistoryError(f"{where}: columns {', '.join(missing)} missing; allowed: a file `history add` wrote")
    return table.select(COLUMNS.names).cast(COLUMNS).to_pandas()


def _check_entry(e: Any, i: int, where: str) -> dict:
    at = f"{where}: runs[{i}]"
    if not isinstance(e, dict):
        raise HistoryError(f"{at}: not an object; allowed: a run entry")
    for k, kind in ENTRY.items():
        if k not in e or not isinstance(e[k], kind) or (kind is int and isinstance(e[k], bool)):
            raise HistoryError(f"{at}: {k}: missing or of the wrong type; allowed: the entry `history add` writes")
    if not _FILE.fullmatch(e["file"]):  # never a path out of the store
        raise HistoryError(f"{at}: file: {e['file']!r}; allowed: {RUNS}/<run id>-<content>.parquet")
    return e


def _leftover(p: Path) -> bool:
    return p.name == LOCK or (p.name == RUNS and p.is_dir() and not any(p.iterdir()))


def order_key(e: dict) -> tuple:
    """Runs in commit-time order; runs of one commit by start time."""
    return (e["commit_time"], e.get("started_at") or "", e["run_id"])


def open_store(path: str | Path, create: bool = False) -> Store:
    """The store at `path`. `create`: a missing or empty folder is a new, empty store; otherwise a folder
    without history.json is refused (a store must not be made inside some other folder's files)."""
    try:
        root = Path(check_path_text(path, "--store"))
    except InputError as exc:
        raise HistoryError(str(exc)) from None
    index = root / INDEX
    if root.exists() and not root.is_dir():
        raise HistoryError(f"{root}: is a file; allowed: a history store folder (holding {INDEX})")
    if not index.exists():
        # what a first `history add` that failed half-way may leave: the lock, an empty parquet/ folder
        others = [p.name for p in root.iterdir() if not _leftover(p)] if root.is_dir() else []
        if others:
            raise HistoryError(
                f"{root}: not a history store (no {INDEX}; it holds {len(others)} other file(s), e.g. {others[0]}); "
                "allowed: a store folder, or a new or empty one for `history add`"
            )
        if not create:
            raise HistoryError(
                f"{root}: no history store here (no {INDEX}); `gdpa-bench history add RUN_DIR` makes one"
            )
        return Store(root, [])
    try:
        data = load_json(
            read_regular(index, kind="a history index", max_bytes=MAX_INDEX_BYTES, what=str(index)), str(index)
        )
    except InputError as exc:
        raise HistoryError(str(exc)) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise HistoryError(f"{index}: schema is {got!r}; allowed: {SCHEMA!r} (not a history store)")
    runs = data.get("runs")
    if not isinstance(runs, list):
        raise HistoryError(f"{index}: runs: not a list; allowed: the list of run entries")
    runs = [_check_entry(e, i, str(index)) for i, e in enumerate(runs)]
    seen: set[str] = set()
    for i, e in enumerate(runs):
        if e["run_id"] in seen:
            raise HistoryError(f"{index}: runs[{i}]: run_id {e['run_id']} twice; allowed: each run once")
        seen.add(e["run_id"])
    return Store(root, sorted(runs, key=order_key))


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One writer per store (fcntl.flock, released however the process ends): two CI jobs appending at
    once would otherwise each replace the index with one that lacks the other's run."""
    make_dir(root)
    try:
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise ResultsWriteError.of(root / LOCK, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HistoryError(f"{root}: another `history add` is writing this store; try again when it ends") from None
        yield
    finally:
        os.close(fd)


def add_run(store_path: str | Path, run_dir: str | Path, max_samples: int | None = None) -> tuple[str, dict]:
    """Append a run to the store (made when missing): ("added" | "unchanged" | "updated", its entry).

    The same run (config, GPU, host, commit, start time) added again is "unchanged" and writes nothing;
    one whose cases changed since (a resumed run) replaces its earlier file ("updated"). The whole store
    is read and checked first: nothing is added to a store that is already corrupt."""
    entry, rows = read_run(run_dir, max_samples)
    root = open_store(store_path, create=True).path
    with _locked(root):
        store = open_store(root, create=True)  # again under the lock: another writer may have added since
        store.frame()
        old = next((e for e in store.runs if e["run_id"] == entry["run_id"]), None)
        if old is not None and old["content"] == entry["content"]:
            return "unchanged", old
        raw = parquet_bytes(rows)
        entry = dict(
            entry,
            file=f"{RUNS}/{entry['run_id']}-{entry['content']}.parquet",
            sha256=hashlib.sha256(raw).hexdigest(),
            added_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        )
        entry = {k: entry[k] for k in ENTRY}
        runs = sorted([e for e in store.runs if e is not old] + [entry], key=order_key)
        make_dir(root / RUNS)
        new_file = root / entry["file"]
        atomic_write(new_file, raw)
        try:
            atomic_write(root / INDEX, json.dumps({"schema": SCHEMA, "runs": runs}, indent=1) + "\n")
        except BaseException:
            new_file.unlink(missing_ok=True)  # the index still names the old files only
            raise
        if old is not None and old["file"] != entry["file"]:
            with contextlib.suppress(OSError):  # the index no longer names it; a leftover is harmless
                (root / old["file"]).unlink()
        return ("updated" if old is not None else "added"), entry
