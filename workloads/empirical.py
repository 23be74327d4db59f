"""Loading user-provided sequence lengths for the `empirical` length family (DESIGN §4).

Three inputs, chosen by the arguments and the file's suffix:
- a text file of integers, one per line or separated by whitespace/commas (`#` starts a comment);
  this is also how a `.csv` file without `column`/`user_column` is read;
- a column of lengths in a CSV/TSV or Parquet table: `column="name"`;
- an interaction log (one row per event) in a CSV/TSV or Parquet table: `user_column="user_id"`; the
  rows of each user are counted and every user's count is one length (e.g. MovieLens ratings.csv with
  user_column="userId" gives the per-user history lengths the lognormal presets were fitted to).
A Parquet file with a single column needs no `column`.

Every problem (missing file, missing column, empty file, non-integer or negative data) is a ValueError
that names the file and what is allowed.
"""
from __future__ import annotations

import functools
import os
import re

import numpy as np

_PARQUET = (".parquet", ".pq")
_TABLE_SEP = {".csv": ",", ".tsv": "\t"}


def load_lengths(path, column: str | None = None, user_column: str | None = None) -> np.ndarray:
    """Per-user lengths from `path`: int64, all > 0 (zero counts are dropped), in file order.

    The result is cached per (file, modification time, size, column, user_column) and read-only: a
    sweep samples the same file once per case and interaction logs can have tens of millions of rows.
    """
    if column is not None and user_column is not None:
        raise ValueError(f"{path}: give column (lengths) or user_column (interaction log), not both")
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"bad empirical path {path!r}; allowed: a file path")
    path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(path):
        raise ValueError(f"empirical lengths file not found: {path}")
    st = os.stat(path)
    if st.st_size == 0:
        raise ValueError(f"{path}: file is empty; expected integers, a column of lengths or an "
                         f"interaction log")
    return _load_cached(path, st.st_mtime_ns, st.st_size, column, user_column)


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, _mtime_ns: int, _size: int, column, user_column) -> np.ndarray:
    suffix = os.path.splitext(path)[1].lower()
    if suffix in _PARQUET:
        raw = _parquet_values(path, column or user_column)
    elif column is not None or user_column is not None:
        raw = _csv_values(path, column or user_column, _TABLE_SEP.get(suffix, ","))
    else:
        raw = _text_values(path)

    if user_column is not None:
        import pandas as pd

        codes, _ = pd.factorize(raw, use_na_sentinel=True)  # order of first appearance: no sorting
        codes = codes[codes >= 0]  # rows without a user id count for nobody
        if codes.size == 0:
            raise ValueError(f"{path}: column {user_column!r} has no user ids")
        counts = np.bincount(codes).astype(np.int64)
    else:
        counts = _as_lengths(raw, path, column)
    counts = counts[counts > 0]
    if counts.size == 0:
        raise ValueError(f"{path}: no positive lengths (all values are 0)")
    counts.setflags(write=False)
    return counts


def _text_values(path: str) -> np.ndarray:
    with open(path, encoding="utf-8", errors="replace") as f:
        body = "\n".join(line.split("#", 1)[0] for line in f)
    tokens = [t for t in re.split(r"[\s,]+", body) if t]
    if not tokens:
        raise ValueError(f"{path}: no integers found (file holds only blanks/comments)")
    try:
        return np.array(tokens).astype(np.int64)
    except ValueError:
        bad = next(t for t in tokens if not re.fullmatch(r"[+-]?\d+", t))
        raise ValueError(f"{path}: non-integer value {bad!r}; allowed: integers separated by "
                         f"whitespace, commas or newlines (for a table, give column= or "
                         f"user_column=)") from None


def _csv_values(path: str, name: str, sep: str) -> np.ndarray:
    import pandas as pd

    try:
        header = list(pd.read_csv(path, sep=sep, nrows=0).columns)
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: file is empty (no header row)") from None
    if name not in header:
        raise ValueError(f"{path}: no column {name!r}; allowed: {', '.join(map(str, header))}")
    series = pd.read_csv(path, sep=sep, usecols=[name])[name]
    if series.empty:
        raise ValueError(f"{path}: column {name!r} is empty")
    return series.to_numpy()


def _parquet_values(path: str, name: str | None) -> np.ndarray:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from None
    try:
        names = list(pq.read_schema(path).names)
    except Exception as e:  # pyarrow raises several types for a file that is not Parquet
        raise ValueError(f"{path}: not a readable Parquet file ({e})") from None
    if name is None:
        if len(names) != 1:
            raise ValueError(f"{path}: has {len(names)} columns, give column= (lengths) or "
                             f"user_column= (interaction log); allowed: {', '.join(names)}")
        name = names[0]
    if name not in names:
        raise ValueError(f"{path}: no column {name!r}; allowed: {', '.join(names)}")
    values = pq.read_table(path, columns=[name]).column(name).to_pandas().to_numpy()
    if values.size == 0:
        raise ValueError(f"{path}: column {name!r} is empty")
    return values


def _as_lengths(values: np.ndarray, path: str, column: str | None) -> np.ndarray:
    """Integer lengths >= 0 from a column/text values; anything else is a clear error."""
    what = f"{path}" + (f" column {column!r}" if column else "")
    v = np.asarray(values)
    if v.dtype.kind in "iu":
        out = v.astype(np.int64)
    else:
        if v.dtype.kind == "b":
            raise ValueError(f"{what}: booleans are not lengths; allowed: integers >= 0")
        try:
            f = v.astype(np.float64)
        except (TypeError, ValueError):
            bad = next((x for x in v if not _int_like(x)), v[0])
            raise ValueError(f"{what}: non-integer value {bad!r}; allowed: integers >= 0") from None
        bad_mask = ~np.isfinite(f) | (f != np.round(f))
        if bad_mask.any():
            bad = v[np.argmax(bad_mask)]
            bad = bad.item() if isinstance(bad, np.generic) else bad  # print 2.5, not np.float64(2.5)
            raise ValueError(f"{what}: non-integer value {bad!r} (missing values "
                             f"count too); allowed: integers >= 0")
        out = f.astype(np.int64)
    if out.size and out.min() < 0:
        raise ValueError(f"{what}: negative length {int(out.min())}; allowed: integers >= 0")
    return out


def _int_like(x) -> bool:
    try:
        return float(x).is_integer()
    except (TypeError, ValueError):
        return False
