"""workloads.empirical and the `empirical` length family: user files of lengths or interactions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from workloads import LengthsFileError, check_workload, load_lengths, resolve_family_params, sample_lengths


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
    log = pd.DataFrame({"userId": ["a", "a", "a", "b", "c", "c", None], "movieId": [1, 2, 3, 1, 5, 6, 7]})
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


@pytest.mark.parametrize(
    "name,content,params,needles",
    [
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
        ("adir", "<dir>", {}, ["adir: is a directory", "allowed: a text file of integers"]),
        ("words.txt", "3\n4\n\nfive 6\n", {}, ["line 4: non-integer value 'five'"]),
        ("neg2.txt", "# c\n3\n7 -4\n", {}, ["line 3: negative length -4", "allowed: integers in [0, "]),
        (
            "big.txt",
            "3\n12345678901234567890123\n",
            {},
            [
                "line 2: value '12345678901234567890123' is out of range (23 digits)",
                "allowed: integers in [0, 9223372036854775807]",
            ],
        ),
        (
            "bignum.csv",
            "len\n2\n12345678901234567890123\n",
            {"column": "len"},
            ["column 'len', data row 2: value 12345678901234567890123 is out of range"],
        ),
        ("huge.csv", "len\n2\n1e30\n", {"column": "len"}, ["data row 2: value 1e+30 is out of range"]),
        ("negcol.csv", "len\n2\n3\n-1\n", {"column": "len"}, ["column 'len', data row 3: negative length -1"]),
        ("mixed.csv", "len\n2\nabc\n", {"column": "len"}, ["data row 2: non-integer value 'abc'"]),
        ("zeros2.txt", "0 0", {}, ["no positive lengths", "allowed: at least one length > 0"]),
        ("log.csv", "user,item\n1,3\n", {"user_column": "userId"}, ["no column 'userId'", "allowed: user, item"]),
        ("nouser.csv", "user,item\n,3\n,4\n", {"user_column": "user"}, ["column 'user' has no user ids"]),
        ("binary.csv", b"len\n\xff\xfe\x00\x01\n", {"column": "len"}, ["binary.csv"]),
        (
            "quote.csv",
            'len\n2\n"3\n4\n',
            {"column": "len"},
            ["not a readable CSV table (ParserError: ", "EOF inside string"],
        ),
    ],
)
def test_empirical_errors(tmp_path, name, content, params, needles):
    f = tmp_path / name
    if content == "<dir>":
        f.mkdir()
    elif isinstance(content, bytes):
        f.write_bytes(content)
    elif content is not None:
        f.write_text(content)
    with pytest.raises(LengthsFileError) as e:
        _draw(f, **params)
    msg = str(e.value)
    assert isinstance(e.value, ValueError) and e.value.path == str(f)
    assert "\n" not in msg and msg.startswith(f"{f}: "), msg  # one line, naming the file first
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_parquet_missing_column_and_ambiguous_table(tmp_path):
    pq = tmp_path / "two.parquet"
    pd.DataFrame({"a": [1], "b": [2]}).to_parquet(pq)
    with pytest.raises(ValueError, match=r"no column 'c'; allowed: a, b"):
        _draw(pq, column="c")
    with pytest.raises(ValueError, match=r"has 2 columns, give column="):
        _draw(pq)


def test_parquet_cells_that_are_not_lengths_or_ids(tmp_path):
    pq = tmp_path / "odd.parquet"
    pd.DataFrame({"flag": [True, False], "nested": [[1, 2], [3]], "n": [4, 5]}).to_parquet(pq)
    with pytest.raises(LengthsFileError, match=r"column 'flag', data row 1: booleans are not lengths"):
        load_lengths(pq, column="flag")
    with pytest.raises(LengthsFileError, match=r"column 'nested', data row 1: non-integer value array"):
        load_lengths(pq, column="nested")
    with pytest.raises(LengthsFileError, match=r"column 'nested' holds values that are not ids"):
        load_lengths(pq, user_column="nested")
    assert load_lengths(pq, column="n").tolist() == [4, 5]


def test_bad_arguments_name_the_file(tmp_path):
    f = tmp_path / "l.txt"
    f.write_text("1 2")
    with pytest.raises(LengthsFileError, match="not both"):
        load_lengths(f, column="a", user_column="b")
    with pytest.raises(LengthsFileError, match=r"bad value column=3; allowed: a column name"):
        load_lengths(f, column=3)
    with pytest.raises(ValueError, match=r"bad empirical path 5; allowed: a file path"):
        load_lengths(5)


def test_relative_path_resolves_against_base_dir(tmp_path, monkeypatch):
    cfg_dir = tmp_path / "configs"
    cfg_dir.mkdir()
    (cfg_dir / "lengths.txt").write_text("5 9\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert load_lengths("lengths.txt", base_dir=cfg_dir).tolist() == [5, 9]
    with pytest.raises(LengthsFileError, match=r"elsewhere/lengths\.txt: empirical lengths file not found"):
        load_lengths("lengths.txt")  # no base_dir: the current directory

    p = resolve_family_params("empirical", {"path": "lengths.txt", "column": None}, cfg_dir)
    assert p == {"path": str(cfg_dir / "lengths.txt"), "column": None}
    absolute = str(cfg_dir / "lengths.txt")
    assert resolve_family_params("empirical", {"path": absolute}, elsewhere)["path"] == absolute
    spike = resolve_family_params("spike", {"p": 0.1, "base": "empirical", "path": "lengths.txt"}, cfg_dir)
    assert spike["path"] == absolute and spike["p"] == 0.1
    assert resolve_family_params("uniform_fill", {"fill": 0.5}, cfg_dir) == {"fill": 0.5}
    assert resolve_family_params("empirical", {"path": 5}, cfg_dir) == {"path": 5}  # left for the check

    q, k = check_workload(
        "empirical", {"path": "lengths.txt"}, "self", {}, batch_size=50, max_len=8, seed=0, base_dir=cfg_dir
    )
    assert set(q.tolist()) == {5, 8} and np.array_equal(q, k)  # 9 clipped to max_len
    q2, _ = check_workload(
        "spike",
        {"p": 0.0, "base": "empirical", "path": "lengths.txt"},
        batch_size=50,
        max_len=8,
        seed=0,
        base_dir=cfg_dir,
    )
    assert np.array_equal(q, q2)
    with pytest.raises(LengthsFileError, match=r"elsewhere/lengths\.txt"):
        check_workload("empirical", {"path": "lengths.txt"}, batch_size=50, max_len=8)


def test_check_workload_reads_the_file_and_reports_its_problem(tmp_path):
    f = tmp_path / "l.txt"
    f.write_text("4\n4.5\n")
    with pytest.raises(LengthsFileError, match=r"l.txt: line 2: non-integer value '4.5'"):
        check_workload("empirical", {"path": str(f)}, "fixed_kv", {}, batch_size=4, max_len=8)
