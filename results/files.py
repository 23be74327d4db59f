"""The run folder's result files (docs/DESIGN.md §6): results.json, results.csv, results.parquet.

`results.json` (schema `gdpa-bench/1`) is the source of truth; `results.csv`, `results.parquet` and the
report are derived from it. `bench` writes these files through this module and `reports` reads them
through it, so the schema and the flattening exist once (power.csv: `results.power_csv`).

Writes go to a temporary file that is renamed over the old one (`atomic_write`): a run killed at any
moment leaves a valid results.json holding every case finished before the kill.
"""

from __future__ import annotations

import errno
import json
import math
import os
import secrets
import zlib
from pathlib import Path
from typing import Any

import pandas as pd

from results.record import check_case_record, check_workload_entry
from support.inputs import InputError, MiB, check_path_text, load_json, read_regular

SCHEMA = "gdpa-bench/1"
STATUSES = ("ok", "incorrect", "failed", "skipped")
#: The largest results.json read (a 324-case H200 run with every sample is ~3.5 MiB).
MAX_RESULTS_BYTES = 512 * MiB

__all__ = [
    "SCHEMA",
    "STATUSES",
    "ResultsError",
    "ResultsWriteError",
    "ResultsWriter",
    "atomic_write",
    "atomic_write_together",
    "clean",
    "csv_frame",
    "flatten_case",
    "flatten_cases",
    "make_dir",
    "read_results",
    "results_path",
    "write_parquet",
    "write_synced",
]


class ResultsError(ValueError):
    """A results file that cannot be used: missing, not JSON, or not schema `gdpa-bench/1` (one line)."""


def clean(obj: Any) -> Any:
    """JSON has no NaN/Inf: write them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    return obj


#: Significant digits of a timed sample in results.json: six keep 1e-5 of a sample, far finer than a CUDA
#: event resolves (~0.5 us: 5e-4 of a 1 ms call); the digits past them are float noise, a third of the file.
SAMPLE_DIGITS = 6


def _sample(t: Any) -> Any:
    return float(f"{t:.{SAMPLE_DIGITS}g}") if isinstance(t, float) and math.isfinite(t) else t


def results_json_text(data: dict) -> str:
    """results.json's text: one line per top-level field, per workload and per case (a diff names the case
    that changed; a case's samples are one line, not one line each), samples to SAMPLE_DIGITS digits."""

    def one(v: Any) -> str:
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)

    def case(c: dict) -> dict:
        times = c.get("times_ms")
        return {**c, "times_ms": [_sample(t) for t in times]} if isinstance(times, list) else c

    data = clean(data)
    lines = ["{"]
    for i, (key, value) in enumerate(data.items()):
        end = "," if i < len(data) - 1 else ""
        if key == "workloads" and isinstance(value, dict):
            rows = [f"{one(name)}:{one(entry)}" for name, entry in value.items()]
            lines += [f"{one(key)}:{{", ",\n".join(rows), "}" + end] if rows else [f"{one(key)}:{{}}{end}"]
        elif key == "cases" and isinstance(value, list):
            rows = [one(case(c)) if isinstance(c, dict) else one(c) for c in value]
            lines += [f"{one(key)}:[", ",\n".join(rows), "]" + end] if rows else [f"{one(key)}:[]{end}"]
        else:
            lines.append(f"{one(key)}:{one(value)}{end}")
    return "\n".join([*lines, "}"]) + "\n"


class ResultsWriteError(Exception):
    """A run file could not be written (disk full, read-only, no permission): one line naming the file."""

    @classmethod
    def of(cls, path: Path, exc: OSError) -> ResultsWriteError:
        code = errno.errorcode.get(exc.errno or 0, "")
        why = exc.strerror or str(exc) or type(exc).__name__
        return cls(f"{path}: cannot write ({why}{', ' + code if code else ''})")


def _drop(tmp: Path) -> None:
    try:
        tmp.unlink(missing_ok=True)
    except OSError:
        pass  # the write failed already; a temp file that cannot be removed is not a second error


def temp_name(path: Path) -> Path:
    """A temporary file beside `path`, unique to this process and call: two writers never share one."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def write_synced(path: Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8) to a new file `path` and sync it to disk: the file a rename then puts in
    place is whole. An existing `path` is an error (FileExistsError), never overwritten."""
    binary = isinstance(data, bytes)
    with open(path, "xb" if binary else "x", encoding=None if binary else "utf-8") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write `data` (text or bytes) to `path` through a temporary file and a rename: never a half-written file.

    An OSError (disk full, read-only, no permission) leaves no temporary file and is raised as a
    one-line `ResultsWriteError`; the previous file, if any, is untouched."""
    path = Path(path)
    tmp = temp_name(path)
    try:
        write_synced(tmp, data)
        os.replace(tmp, path)
    except OSError as exc:
        raise ResultsWriteError.of(path, exc) from None
    finally:
        _drop(tmp)


def atomic_write_together(files: list[tuple[Path, str]]) -> None:
    """Write files that describe the same thing (results.json and its results.csv) so that a failed write
    leaves them as they were: every temporary file is written and synced before the first rename, so a disk
    that fills while any of them is written replaces none. Should a later rename fail after an earlier one
    stood (a file system turned read-only in between), the stale later file is removed: a derived file
    never describes other cases than the one before it. One-line `ResultsWriteError` naming the file."""
    tmps: list[Path] = []
    path = Path(files[0][0])
    try:
        for path, text in files:  # `path` names the file in the error below
            tmps.append(temp_name(Path(path)))
            write_synced(tmps[-1], text)
        for i, ((path, _), tmp) in enumerate(zip(files, tmps, strict=True)):
            try:
                os.replace(tmp, path)
            except OSError:
                if i:
                    _drop(Path(path))
                raise
    except OSError as exc:
        raise ResultsWriteError.of(Path(path), exc) from None
    finally:
        for tmp in tmps:
            _drop(tmp)


def make_dir(path: Path) -> None:
    """`mkdir -p`, with the one-line `ResultsWriteError` of `atomic_write`."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultsWriteError.of(Path(path), exc) from None


# ------------------------------------------------------------------------------------------- reading


def results_path(path: str | Path) -> Path:
    """The results file for `path` (a run folder or the file itself): the folder's results.json, or its
    gzip-compressed results.json.gz where only that is there (how a committed example run keeps the tracked
    tree small, as it keeps power.csv.gz: tests/test_small_tree.py). Runs write results.json, never the .gz."""
    p = Path(path)
    if not p.is_dir():
        return p
    plain, packed = p / "results.json", p / "results.json.gz"
    return packed if packed.exists() and not plain.exists() else plain


def _gunzip(raw: bytes, limit: int, where: str) -> bytes:
    """`raw` decompressed, refused (one line) past `limit` bytes or when it is no gzip stream."""
    inflate = zlib.decompressobj(wbits=31)  # gzip framing
    try:
        out = inflate.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise ResultsError(f"{where}: not gzip ({exc}); allowed: a results.json, or it gzipped") from None
    if len(out) > limit or inflate.unconsumed_tail:
        raise ResultsError(f"{where}: decompresses past {limit // MiB} MiB; allowed: a results.json of at most that")
    return out


def read_results(path: str | Path) -> dict:
    """Read and validate a results file (a run folder or its results.json); `ResultsError` otherwise.

    The returned dict always has `meta` (dict), `workloads` (dict) and `cases` (list of dicts, each
    with a string `id`)."""
    try:
        p = results_path(check_path_text(path, "results"))
        if not p.exists():
            where = f"{path}: no results.json in this folder" if Path(path).is_dir() else f"{p}: no such file"
            raise ResultsError(where)
        # bounded, never a FIFO; depth, integer width and key types checked (support.inputs)
        raw = read_regular(p, kind="a results.json file", max_bytes=MAX_RESULTS_BYTES, what=str(p))
        if p.name.endswith(".gz"):
            raw = _gunzip(raw, MAX_RESULTS_BYTES, str(p))
        data = load_json(raw, str(p))
    except InputError as e:
        raise ResultsError(str(e)) from None
    if not isinstance(data, dict):
        raise ResultsError(f'{p}: expected a JSON object with "schema": "{SCHEMA}", got {type(data).__name__}')
    schema = data.get("schema")
    if schema != SCHEMA:
        raise ResultsError(f"{p}: schema is {schema!r}, expected {SCHEMA!r}")
    cases = data.get("cases", [])
    if cases is None:
        cases = []
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise ResultsError(f'{p}: "cases" must be a list of objects')
    for i, c in enumerate(cases):
        if not isinstance(c.get("id"), str) or not c.get("id"):
            raise ResultsError(f'{p}: cases[{i}] has no string "id"')
    data["cases"] = cases
    if not isinstance(data.get("meta"), dict):
        data["meta"] = {}
    if not isinstance(data.get("workloads"), dict):
        data["workloads"] = {}
    _check_meta_lists(data["meta"], p)
    return data


# meta's lists a resumed run extends (ResultsWriter, bench.sweep.rundir.retry_failed): what each holds
_META_LISTS = {"sessions": dict, "resumed_at": str, "retried": dict, "config_history": dict}


def _check_meta_lists(meta: dict, p: Path) -> None:
    """A resume appends to these: a hand-edited or damaged one is one line naming it, not a traceback there."""
    for key, kind in _META_LISTS.items():
        value = meta.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(x, kind) or x is None for x in value):
            what = "objects" if kind is dict else "strings"
            raise ResultsError(f"{p}: meta.{key} must be a list of {what}, got {str(value)[:60]}")


# ---------------------------------------------------------------------------------------- flattening


def flatten_cases(cases: list[dict]) -> pd.DataFrame:
    """One row per case: nested dicts become dotted columns (`power.avg_w`, `workload.total_q`) through
    `pandas.json_normalize`; lists (`times_ms`, `power.reasons`) stay lists."""
    if not cases:
        return pd.DataFrame()
    return pd.json_normalize([dict(c) for c in cases], sep=".")


def flatten_case(case: dict) -> dict:
    """One case as a flat dict (the row `flatten_cases` gives it)."""
    return flatten_cases([case]).iloc[0].to_dict()


def csv_frame(cases: list[dict]) -> pd.DataFrame:
    """results.csv: the flat rows, `times_ms` replaced by `n_samples`, `chunk_clocks` left to results.json
    (per-chunk detail, like the samples), other lists joined with "|" (lists of records as JSON), and no
    column that is empty in every row."""
    df = flatten_cases(cases)
    if df.empty:
        return pd.DataFrame({"id": []})
    df = df.drop(columns=[c for c in ("chunk_clocks",) if c in df.columns])
    if "times_ms" in df.columns:
        pos = list(df.columns).index("times_ms")
        n = df["times_ms"].map(lambda t: len(t) if isinstance(t, list) else 0)
        df = df.drop(columns="times_ms")
        df.insert(pos, "n_samples", n)
    for col in df.columns:
        if df[col].map(lambda v: isinstance(v, list)).any():
            df[col] = df[col].map(_csv_list)
    return df.dropna(axis=1, how="all")


def _csv_list(v: Any) -> Any:
    """A list cell of results.csv: values joined with "|"; a list of records as JSON."""
    if not isinstance(v, list):
        return v
    return _as_text(v) if _records(v) else "|".join(map(str, v))


def write_parquet(cases: list[dict], path: Path) -> Path:
    """results.parquet: the flat rows with `times_ms` kept as a list column (pandas + pyarrow), its samples
    to SAMPLE_DIGITS digits as in results.json.

    Columns whose values mix types (a sweep axis that is a number in one set and a word in another) are
    written as strings: Parquet needs one type per column."""
    df = flatten_cases(cases)
    for col in df.columns:
        if col == "times_ms":  # the samples as results.json keeps them
            df[col] = df[col].map(lambda t: [_sample(x) for x in t] if isinstance(t, list) else t)
            continue
        values = [v for v in df[col] if not _missing(v)]
        kinds = {type(v) for v in values}
        # a list of records (`kernels.rows`, `bands.rows`) is JSON text: its records differ in their keys
        if (
            dict in kinds
            or any(_records(v) or _mixed_list(v) for v in values)
            or (len(kinds) > 1 and not kinds <= {int, float})
        ):
            df[col] = df[col].map(lambda v: None if _missing(v) else _as_text(v))
    df = df.dropna(axis=1, how="all")
    tmp = temp_name(Path(path))
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except OSError as exc:
        raise ResultsWriteError.of(Path(path), exc) from None
    finally:
        _drop(tmp)
    return Path(path)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _records(v: Any) -> bool:
    """A non-empty list of dicts (a table inside a case: `kernels.rows`, `bands.rows`, `counters.kernels`)."""
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _mixed_list(v: Any) -> bool:
    """A list Parquet cannot type: lists inside it (`counters.replayed.fwd_plan`: [[backend, lo, hi], ...]) or
    elements of several kinds (words beside numbers)."""
    if not isinstance(v, list):
        return False
    kinds = {type(x) for x in v if not _missing(x)}
    return any(k in (list, tuple, dict) for k in kinds) or (len(kinds) > 1 and not kinds <= {int, float})


def _as_text(v: Any) -> str:
    return json.dumps(clean(v)) if isinstance(v, (list, dict)) else str(v)


# -------------------------------------------------------------------------------------------- writing


# Where a run's cases were measured: a resumed run whose writer differs in one of these from the run it
# continues (another machine, GPU, driver or commit) records each such session in `meta.sessions`, and every
# case it measures says which (`session`), so no number is attributed to a machine or commit it did not run on.
PROVENANCE = ("host", "gpu", "gpu_uuid", "driver", "git_sha")


def _session(meta: dict) -> dict:
    return {k: meta.get(k) for k in ("started_at", *PROVENANCE)}


def sessions(meta: dict) -> list[dict]:
    """The sessions of a run (`meta.sessions`; one, made of its meta's own fields, when it has none)."""
    recorded = meta.get("sessions")
    return list(recorded) if isinstance(recorded, list) and recorded else [_session(meta)]


class ResultsWriter:
    """results.json + results.csv of one run folder, rewritten after every change.

    `existing` (a resumed run's data) keeps its cases and its first `started_at`; the new run's
    start time is appended to `meta.resumed_at`. Resumed on another machine or commit (PROVENANCE), the
    run's sessions go to `meta.sessions` and each case measured from here on carries `session`, its index
    there; the top-level meta then describes the latest session."""

    def __init__(self, run_dir: Path, meta: dict, existing: dict | None = None):
        self.run_dir = Path(run_dir)
        make_dir(self.run_dir)
        self.data = existing or {"schema": SCHEMA, "meta": meta, "workloads": {}, "cases": []}
        self.session: int | None = None  # the index in meta.sessions new cases carry (None: the run has one)
        if existing:
            old = self.data["meta"]
            runs = sessions(old)
            # None: a field this writer does not know (e.g. a worker of a provider's own environment)
            if any(meta.get(k) is not None and meta.get(k) != runs[-1].get(k) for k in PROVENANCE):
                old["sessions"] = runs = [*runs, _session(meta)]
            if "sessions" in old:
                self.session = len(runs) - 1
            resumed = [*old.get("resumed_at", []), meta.get("started_at")]
            keep = {k: old[k] for k in ("started_at",) if old.get(k)}
            if old.get("config_sha256") != meta.get("config_sha256"):  # resumed from another config (--force)
                mine = {k: old.get(k) for k in ("config", "config_name", "config_sha256")}
                keep["config_history"] = [*old.get("config_history", []), mine]
            old.update({k: v for k, v in meta.items() if v is not None})
            old.update(keep, resumed_at=resumed)
        self.flush()

    @classmethod
    def of(cls, run_dir: Path, data: dict) -> ResultsWriter:
        """A writer over complete results `data` (a merge, a profile update), written as they are."""
        writer = cls.__new__(cls)
        writer.run_dir = Path(run_dir)
        make_dir(writer.run_dir)
        writer.data = data
        writer.flush()
        return writer

    @property
    def json_path(self) -> Path:
        return self.run_dir / "results.json"

    @property
    def csv_path(self) -> Path:
        return self.run_dir / "results.csv"

    @property
    def meta(self) -> dict:
        return self.data["meta"]

    def done_ids(self) -> set[str]:
        return {c["id"] for c in self.data["cases"]}

    def add_workload(self, name: str, entry: dict) -> None:
        check_workload_entry(entry)
        self.data["workloads"][name] = entry

    def add_case(self, case: dict) -> None:
        if self.session is not None:
            case = {**case, "session": self.session}
        check_case_record(case)
        cases = self.data["cases"]
        cases[:] = [c for c in cases if c["id"] != case["id"]]
        cases.append(case)
        self.flush()

    def update_cases(self, fields_by_id: dict[str, dict]) -> None:
        """Add fields to recorded cases (e.g. `bench profile --run`), then rewrite the files."""
        for c in self.data["cases"]:
            if c["id"] in fields_by_id:
                check_case_record(fields_by_id[c["id"]])
                c.update(fields_by_id[c["id"]])
        self.flush()

    def update_meta(self, **fields: Any) -> None:
        self.data["meta"].update(fields)
        self.flush()

    def flush(self) -> None:
        # together: a disk that fills while either is written leaves both as they were (issue 32)
        csv = csv_frame(self.data["cases"]).to_csv(index=False)
        atomic_write_together([(self.json_path, results_json_text(self.data)), (self.csv_path, csv)])

    def write_parquet(self) -> Path:
        return write_parquet(self.data["cases"], self.run_dir / "results.parquet")
