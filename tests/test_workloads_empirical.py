"""workloads.empirical and the `empirical` length family: user files of lengths or interactions."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workloads import load_lengths, sample_lengths


def _draw(path, n=1000, **params):
    return sample_lengths("empirical", 20_000, n, 0, path=str(path), **params)


def test_text_file_of_integers(tmp_path):
    f = tmp_path / "lengths.txt"
    f.write_text("# per-user history lengths\n3 5\n7,0\n\n2000  # clipped to N\n")
    assert load_lengths(f).tolist() == [3, 5, 7, 2000]  # zero dropped, file order
    L = _draw(f)
    assert set(np.unique(L).tolist()) == {3, 5, 7, 1000}
    for v in (3, 5, 7, 1000):  # uniform resampling with replacement
        assert abs((L == v).mean() - 0.25) < 0.02
    assert np.array_equal(L, _draw(f))  # seeded
    assert not np.array_equal(L, sample_lengths("empirical", 20_000, 1000, 1, path=str(f)))
    # a .csv without column= is read as comma-separated integers
    g = tmp_path / "plain.csv"
    g.write_text("4,4,9\n")
    assert set(_draw(g).tolist()) == {4, 9}


def test_csv_and_parquet_column(tmp_path):
    df = pd.DataFrame({"user": [10, 11, 12, 13], "hist_len": [2, 0, 30, 5000]})
    csv = tmp_path / "lengths.csv"
    df.to_csv(csv, index=False)
    pq = tmp_path / "lengths.parquet"
    df.to_parquet(pq)
    for path in (csv, pq):
        assert load_lengths(path, column="hist_len").tolist() == [2, 30, 5000]
        assert set(_draw(path, n=256, column="hist_len").tolist()) == {2, 30, 256}
    tsv = tmp_path / "lengths.tsv"
    df.to_csv(tsv, sep="\t", index=False)
    assert load_lengths(tsv, column="hist_len").tolist() == [2, 30, 5000]
    single = tmp_path / "single.parquet"
    pd.DataFrame({"n": [6, 7]}).to_parquet(single)
    assert load_lengths(single).tolist() == [6, 7]  # a one-column Parquet file needs no column=


def test_interaction_log_counts_per_user(tmp_path):
    log = pd.DataFrame({"userId": ["a", "a", "a", "b", "c", "c", None],
                        "movieId": [1, 2, 3, 1, 5, 6, 7]})
    csv = tmp_path / "ratings.csv"
    log.to_csv(csv, index=False)
    pq = tmp_path / "ratings.parquet"
    log.to_parquet(pq)
    for path in (csv, pq):
        assert load_lengths(path, user_column="userId").tolist() == [3, 1, 2]  # row without user dropped
        L = _draw(path, user_column="userId")
        assert set(np.unique(L).tolist()) == {1, 2, 3}
        assert abs(L.mean() - 2.0) < 0.05
        assert set(_draw(path, n=2, user_column="userId").tolist()) == {1, 2}


def test_cache_follows_file_changes(tmp_path):
    f = tmp_path / "l.txt"
    f.write_text("1 2 3")
    assert load_lengths(f).tolist() == [1, 2, 3]
    f.write_text("40 50 60 70")  # different size: a new cache key
    assert load_lengths(f).tolist() == [40, 50, 60, 70]
    with pytest.raises(ValueError):
        load_lengths(f)[0] = 1  # the cached array is read-only


@pytest.mark.parametrize("name,content,params,needles", [
    ("missing.txt", None, {}, ["not found", "missing.txt"]),
    ("empty.txt", "", {}, ["empty"]),
    ("blank.txt", "  \n# nothing\n", {}, ["no integers"]),
    ("floats.txt", "3 4.5 6", {}, ["non-integer value '4.5'", "column="]),
    ("header.csv", "len\n3\n4\n", {}, ["non-integer value 'len'", "column="]),
    ("neg.txt", "3 -4", {}, ["negative length -4"]),
    ("zeros.txt", "0 0", {}, ["no positive lengths"]),
    ("t.csv", "user,len\n1,3\n", {"column": "length"}, ["no column 'length'", "allowed: user, len"]),
    ("t2.csv", "user,len\n1,3\n", {"user_column": "uid"}, ["no column 'uid'", "user, len"]),
    ("t3.csv", "user,len\n1,abc\n2,4\n", {"column": "len"}, ["non-integer value 'abc'"]),
    ("t4.csv", "user,len\n1,2.5\n2,4\n", {"column": "len"}, ["non-integer value 2.5"]),
    ("t5.csv", "user,len\n1,\n2,4\n", {"column": "len"}, ["non-integer value nan", "missing"]),
    ("t6.csv", "user,len\n", {"column": "len"}, ["column 'len' is empty"]),
    ("bad.parquet", "not parquet at all", {"column": "x"}, ["not a readable Parquet file"]),
])
def test_empirical_errors(tmp_path, name, content, params, needles):
    f = tmp_path / name
    if content is not None:
        f.write_text(content)
    with pytest.raises(ValueError) as e:
        _draw(f, **params)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))


def test_parquet_missing_column_and_ambiguous_table(tmp_path):
    pq = tmp_path / "two.parquet"
    pd.DataFrame({"a": [1], "b": [2]}).to_parquet(pq)
    with pytest.raises(ValueError, match=r"no column 'c'; allowed: a, b"):
        _draw(pq, column="c")
    with pytest.raises(ValueError, match=r"has 2 columns, give column="):
        _draw(pq)
