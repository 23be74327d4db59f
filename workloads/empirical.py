"""Loading user-provided sequence lengths for the `empirical` length family (docs/DESIGN.md §4).

Three inputs, chosen by the arguments and the file's suffix:
- a text file of integers, one per line or separated by whitespace/commas (`#` starts a comment);
  this is also how a `.csv` file without `column`/`user_column` is read;
- a column of lengths in a CSV/TSV or Parquet table: `column="name"`;
- an interaction log (one row per event) in a CSV/TSV or Parquet table: `user_column="user_id"`; the
  rows of each user are counted and every user's count is one length (e.g. MovieLens ratings.csv with
  user_column="userId" gives the per-user history lengths the lognormal presets were fitted to).
A Parquet file with a single column needs no `column`.

Every problem (missing or unreadable file, a directory, missing column, empty file, non-integer,
negative or out-of-range data, a broken table) is a `LengthsFileError` (a ValueError): one line that
names the file, the column and line/row where there is one, and what is allowed.
"""

from __future__ import annotations

import functools
import os
import re

import numpy as np

from support.text import one_line

_PARQUET = (".parquet", ".pq")
_TABLE_SEP = {".csv": ",", ".tsv": "\t"}
_INT = re.compile(r"[+-]?[0-9]+")  # ASCII digits: int() and numpy also read "٣" (Arabic-Indic) as 3
_SPLIT = re.compile(r"[\s,]+")
INT64_MAX = int(np.iinfo(np.int64).max)
_ALLOWED = f"integers in [0, {INT64_MAX}] (lengths above max_len are clipped to it)"
_ALLOWED_TEXT = "integers >= 0 separated by whitespace, commas or newlines (for a table, give column= or user_column=)"
_KINDS = "a text file of integers, a CSV/TSV table or a Parquet file"


class LengthsFileError(ValueError):
    """A lengths file that cannot be used. `str()` is one line: the file, where in it, what is allowed."""

    def __init__(self, path, message: str):
        self.path = str(path)
        super().__init__(one_line(f"{path}: {message}", 400))  # pandas/pyarrow messages can span lines


def _show(x, limit: int = 40) -> str:
    r = repr(x.item() if isinstance(x, np.generic) else x)  # 2.5, not np.float64(2.5)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def resolve_path(path, base_dir=None) -> str:
    """`path` made absolute: a relative path is taken from `base_dir` (the folder of the config that
    names the file), or from the current directory when `base_dir` is None. `~` is expanded."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"bad empirical path {path!r}; allowed: a file path")
    p = os.path.expanduser(os.fspath(path))
    if not os.path.isabs(p) and base_dir is not None:
        p = os.path.join(os.fspath(base_dir), p)
    return os.path.abspath(p)


def load_lengths(path, column: str | None = None, user_column: str | None = None, *, base_dir=None) -> np.ndarray:
    """Per-user lengths from `path`: int64, all > 0 (zero counts are dropped), in file order.

    A relative `path` is resolved against `base_dir` (see `resolve_path`). Raises `LengthsFileError`.
    The result is cached per (file, modification time, size, column, user_column) and read-only: a
    sweep samples the same file once per case and interaction logs can have tens of millions of rows.
    """
    if column is not None and user_column is not None:
        raise LengthsFileError(path, "give column (lengths) or user_column (interaction log), not both")
    for name, v in (("column", column), ("user_column", user_column)):
        if v is not None and (not isinstance(v, str) or not v):
            raise LengthsFileError(path, f"bad value {name}={v!r}; allowed: a column name")
    path = resolve_path(path, base_dir)
    if os.path.isdir(path):
        raise LengthsFileError(path, f"is a directory; allowed: {_KINDS}")
    if not os.path.exists(path):
        raise LengthsFileError(path, "empirical lengths file not found")
    if not os.path.isfile(path):
        raise LengthsFileError(path, f"not a regular file; allowed: {_KINDS}")
    try:
        st = os.stat(path)
        if st.st_size == 0:
            raise LengthsFileError(path, "file is empty; expected integers, a column of lengths or an interaction log")
        return _load_cached(path, st.st_mtime_ns, st.st_size, column, user_column)
    except OSError as e:
        raise LengthsFileError(path, f"cannot read it ({e.strerror or e})") from None


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, _mtime_ns: int, _size: int, column, user_column) -> np.ndarray:
    suffix = os.path.splitext(path)[1].lower()
    name = column or user_column
    if suffix in _PARQUET:
        raw, name = _parquet_values(path, name)
    elif name is not None:
        raw = _csv_values(path, name, _TABLE_SEP.get(suffix, ","))
    else:
        raw = _text_values(path)

    if user_column is not None:
        counts = _count_per_user(raw, path, user_column)
    else:
        counts = _as_lengths(raw, path, name)
    counts = counts[counts > 0]
    if counts.size == 0:
        raise LengthsFileError(path, "no positive lengths (all values are 0); allowed: at least one length > 0")
    counts.setflags(write=False)
    return counts


def _text_values(path: str) -> np.ndarray:
    # utf-8-sig: editors (Notepad, Excel's "CSV UTF-8") start a text file with a byte-order mark
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        lines = [line.split("#", 1)[0] for line in f]
    tokens = [t for t in _SPLIT.split("\n".join(lines)) if t]
    if not tokens:
        raise LengthsFileError(path, "no integers found (file holds only blanks/comments); allowed: " + _ALLOWED_TEXT)
    try:
        if not all(t.isascii() for t in tokens):
            raise ValueError("a non-ASCII token")  # numpy would read other scripts' digits as numbers
        values = np.array(tokens).astype(np.int64)
    except (ValueError, OverflowError):
        for k, t in enumerate(tokens):
            at = f"line {_line_of_token(lines, k)}"
            if not _INT.fullmatch(t):
                raise LengthsFileError(path, f"{at}: non-integer value {_show(t)}; allowed: {_ALLOWED_TEXT}") from None
            if len(t.lstrip("+-")) > 19 or abs(int(t)) > INT64_MAX:  # int() of 4300+ digits raises
                raise LengthsFileError(
                    path, f"{at}: value {_show(t)} is out of range ({len(t.lstrip('+-'))} digits); allowed: {_ALLOWED}"
                ) from None
        raise  # numpy rejected a token the checks above accept: a bug here, not bad input
    neg = np.flatnonzero(values < 0)
    if neg.size:
        k = int(neg[0])
        raise LengthsFileError(
            path, f"line {_line_of_token(lines, k)}: negative length {int(values[k])}; allowed: {_ALLOWED}"
        )
    return values


def _line_of_token(lines: list[str], k: int) -> int:
    """1-based line number of the k-th token (comments already removed from `lines`)."""
    seen = 0
    for i, line in enumerate(lines, 1):
        seen += sum(1 for t in _SPLIT.split(line) if t)
        if seen > k:
            return i
    return len(lines)


def _csv_values(path: str, name: str, sep: str) -> np.ndarray:
    import pandas as pd

    kind = "TSV" if sep == "\t" else "CSV"
    try:
        header = list(pd.read_csv(path, sep=sep, nrows=0).columns)
        if name not in header:
            raise LengthsFileError(path, f"no column {name!r}; allowed: {', '.join(map(str, header))}")
        series = pd.read_csv(path, sep=sep, usecols=[name], low_memory=False)[name]
    except pd.errors.EmptyDataError:
        raise LengthsFileError(
            path, f"file is empty (no header row); allowed: a {kind} table with a header row"
        ) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise LengthsFileError(path, f"not a readable {kind} table ({type(e).__name__}: {e})") from None
    if series.empty:
        raise LengthsFileError(path, f"column {name!r} is empty (only a header row); allowed: {_ALLOWED}")
    return series.to_numpy()


def _parquet_values(path: str, name: str | None) -> tuple[np.ndarray, str]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise LengthsFileError(path, "reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        names = list(pq.read_schema(path).names)
    except Exception as e:  # pyarrow raises several types for a file that is not Parquet
        raise LengthsFileError(path, f"not a readable Parquet file ({e})") from None
    if name is None:
        if len(names) != 1:
            raise LengthsFileError(
                path,
                f"has {len(names)} columns, give column= (lengths) or user_column= "
                f"(interaction log); allowed: {', '.join(names)}",
            )
        name = names[0]
    if name not in names:
        raise LengthsFileError(path, f"no column {name!r}; allowed: {', '.join(names)}")
    try:
        values = pq.read_table(path, columns=[name]).column(name).to_pandas().to_numpy()
    except Exception as e:  # a readable footer over broken column data
        raise LengthsFileError(path, f"column {name!r} is not readable ({type(e).__name__}: {e})") from None
    if values.size == 0:
        raise LengthsFileError(path, f"column {name!r} is empty; allowed: {_ALLOWED}")
    return values, name


def _count_per_user(raw: np.ndarray, path: str, user_column: str) -> np.ndarray:
    import pandas as pd

    try:
        codes, _ = pd.factorize(raw, use_na_sentinel=True)  # order of first appearance: no sorting
    except TypeError:  # unhashable cells, e.g. a Parquet list column
        raise LengthsFileError(
            path,
            f"column {user_column!r} holds values that are not ids "
            f"(e.g. {_show(raw[0])}); allowed: numbers or strings, one per row",
        ) from None
    codes = codes[codes >= 0]  # rows without a user id count for nobody
    if codes.size == 0:
        raise LengthsFileError(path, f"column {user_column!r} has no user ids (every row is empty)")
    return np.bincount(codes).astype(np.int64)


def _as_lengths(values: np.ndarray, path: str, column: str | None) -> np.ndarray:
    """Integer lengths >= 0 from table values; anything else names its row and what is allowed."""
    where = f"column {column!r}, " if column else ""
    v = np.asarray(values)

    def fail(i: int, what: str) -> LengthsFileError:
        return LengthsFileError(path, f"{where}data row {i + 1}: {what}; allowed: {_ALLOWED}")

    if v.dtype.kind == "b":
        raise fail(0, "booleans are not lengths")
    if v.dtype.kind in "iu":
        if v.dtype.kind == "u" and v.size and int(v.max()) > INT64_MAX:
            i = int(np.argmax(v > INT64_MAX))
            raise fail(i, f"value {int(v[i])} is out of range")
        out = v.astype(np.int64)
    elif v.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(v) | (v != np.round(v))
        if bad.any():
            i = int(np.argmax(bad))
            raise fail(i, f"non-integer value {_show(v[i])}" + (" (a missing value)" if np.isnan(v[i]) else ""))
        big = np.abs(v) > INT64_MAX  # float64 compares against 2**63 here
        if big.any():
            i = int(np.argmax(big))
            raise fail(i, f"value {_show(v[i])} is out of range")
        out = v.astype(np.int64)
    else:  # object columns: strings, mixed cells, Python ints beyond int64
        out = np.empty(v.shape[0], dtype=np.int64)
        for i, x in enumerate(v):
            n = _int_value(x)
            if n is None:
                missing = x is None or (isinstance(x, float) and np.isnan(x))
                raise fail(i, f"non-integer value {_show(x)}" + (" (a missing value)" if missing else ""))
            if abs(n) > INT64_MAX:
                digits = len(x.strip().lstrip("+-")) if isinstance(x, str) else len(str(abs(n)))
                raise fail(i, f"value {_show(x)} is out of range ({digits} digits)")
            out[i] = n
    neg = np.flatnonzero(out < 0)
    if neg.size:
        raise fail(int(neg[0]), f"negative length {int(out[neg[0]])}")
    return out


def _int_value(x) -> int | None:
    """The integer a table cell holds, or None when it holds something else (bools are not numbers)."""
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return int(x) if np.isfinite(x) and float(x).is_integer() else None
    if isinstance(x, str) and _INT.fullmatch(x.strip()):
        # beyond 19 digits it is out of range whatever it is (and int() refuses 4300+ digits)
        return int(x.strip()) if len(x.strip().lstrip("+-")) <= 19 else INT64_MAX + 1
    return None
