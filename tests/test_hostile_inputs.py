"""The last hostile inputs of issue 32 (a kit of 127 cases at e444f34: these 11 were not handled), in
tests/test_bad_inputs.py's style — the CLI in this process (`_run_here`), one line and exit 2 (`_check`):

- an empirical lengths text file that starts with a UTF-8 byte-order mark (editors write one) is read;
- `bench.run({...})` takes numpy integers, floats and bools as their Python values, nested too;
- `report RUN` checks `meta.peak_tflops` and the workloads' lengths as `compare` checks the cases;
- a disk that fills while results.json/.csv are rewritten leaves them describing the same cases, and one
  that fills during the report leaves the run folder as it was, said in one line.
"""

from __future__ import annotations

import builtins
import copy
import errno
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_bad_inputs import BASE, DIR, Bad, _check, _run_here, cfg_set, empirical, results

from bench.cli.parser import main
from bench.config import load_config

BOM = "\ufeff"


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("bom.txt", BOM + "3\n5\n7\n"),
        ("bom_commas.txt", BOM + "3,5,7"),
        ("bom_comment.txt", BOM + "# lengths\n3 5 7\n"),
    ],
)
def test_a_lengths_file_with_a_byte_order_mark_is_read(name, content, tmp_path, monkeypatch, capsys):
    files = {"cfg.yaml": empirical(name), name: content.encode("utf-8")}
    o = _run_here(Bad("bom", ("workloads", "cfg.yaml", "--out", "w"), "", files), tmp_path / "cwd", monkeypatch, capsys)
    assert o.rc == 0, o.stderr[-2000:]
    cfg = load_config(tmp_path / "cwd" / "cfg.yaml")
    assert set(cfg.cases[0].workload.lengths()[0]) <= {3, 5, 7}
    from workloads.empirical import load_lengths

    assert load_lengths(tmp_path / "cwd" / name).tolist() == [3, 5, 7]
    # a table's header after a BOM is the column's name, not '\ufeffuser'
    (tmp_path / "t.csv").write_bytes((BOM + "user,len\n1,3\n2,5\n").encode())
    assert load_lengths(tmp_path / "t.csv", column="user").tolist() == [1, 2]


def _numpy_config() -> tuple[dict, dict]:
    """The same config twice: with numpy values (nested in lists and mappings too) and with Python's."""
    plain = cfg_set(B=3, max_len=[8, 12], alpha=0.5, causal=True, lengths={"family": "uniform_fill", "fill": 0.5})
    plain["timing"]["rep_ms"] = 2.0
    numpy = copy.deepcopy(plain)
    s = numpy["sets"][0]
    s.update(B=np.int64(3), max_len=[np.int32(8), np.uint16(12)], alpha=np.float32(0.5), causal=np.bool_(True))
    s["lengths"]["fill"] = np.float64(0.5)
    numpy["timing"]["rep_ms"] = np.float16(2.0)
    return numpy, plain


def test_the_api_takes_numpy_scalars_as_their_python_values(tmp_path, monkeypatch):
    import bench

    monkeypatch.chdir(tmp_path)
    numpy, plain = _numpy_config()
    a, b = load_config(numpy), load_config(plain)
    assert a.sha256 == b.sha256 and [c.id for c in a.cases] == [c.id for c in b.cases]
    w = a.cases[0].workload
    assert type(w.B) is int and type(w.alpha) is float and w.causal is True
    df = bench.run(numpy, out="nb")
    assert len(df) == 2 and (df["status"] == "ok").all(), df[["id", "status", "error"]]
    assert json.loads((tmp_path / "nb" / "results.json").read_text())["meta"]["config_data"]["sets"][0]["B"] == 3


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (np.array([8, 16]), "numpy.ndarray"),
        (np.complex64(1), "numpy.complex64"),
        (pd.Timestamp("2026-01-01"), "Timestamp"),
        (object(), "object"),
    ],
    ids=["array", "complex", "timestamp", "object"],
)
def test_other_foreign_objects_are_still_refused_with_the_fix(value, needle, tmp_path, monkeypatch):
    import bench

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as exc:
        bench.run(cfg_set(max_len=value))
    msg = str(exc.value)
    assert "\n" not in msg and needle in msg and "sets[0].max_len" in msg, msg
    if isinstance(value, np.ndarray):
        assert "x.tolist()" in msg, msg
    assert list(tmp_path.iterdir()) == []


def _report_bad(name: str, needle: str, **change) -> Bad:
    doc = results()
    for where, value in change.items():
        part, key = where.split("__")
        doc[part][key] = value
    return Bad(f"report_{name}", ("report", "run"), needle, {"run": DIR, "run/results.json": json.dumps(doc)})


def _workload(**fields) -> dict:
    return {"q_lengths": [3, 5], "kv_lengths": [8, 8], "stats": {"B": 2}, **fields}


REPORT_BAD = [
    _report_bad("peak_tflops_text", "meta.peak_tflops", meta__peak_tflops="989"),
    _report_bad("peak_tflops_value_text", "meta.peak_tflops.bf16", meta__peak_tflops={"bf16": "lots"}),
    _report_bad("peak_tflops_negative", "meta.peak_tflops.bf16", meta__peak_tflops={"bf16": -1}),
    _report_bad("gemm_tflops_list", "meta.measured_gemm_tflops", meta__measured_gemm_tflops=[672]),
    _report_bad("hbm_text", "meta.hbm_tb_s", meta__hbm_tb_s="4.8 TB/s"),
    _report_bad("lengths_text", "q_lengths", workloads__s=_workload(q_lengths="3 5")),
    _report_bad("lengths_with_a_word", "kv_lengths[1]", workloads__s=_workload(kv_lengths=[8, "eight"])),
    _report_bad("lengths_negative", "q_lengths[0]", workloads__s=_workload(q_lengths=[-3, 5])),
    _report_bad("lengths_bool", "q_lengths[1]", workloads__s=_workload(q_lengths=[3, True])),
    _report_bad("workload_not_an_object", "workloads['s']", workloads__s="uniform"),
    _report_bad("stats_list", "stats", workloads__s=_workload(stats=[1, 2])),
]


@pytest.mark.parametrize("bad", [pytest.param(b, id=b.id) for b in REPORT_BAD])
def test_report_checks_the_fields_it_draws_with(bad, tmp_path, monkeypatch, capsys):
    _check(bad, _run_here(bad, tmp_path / "cwd", monkeypatch, capsys))


# ------------------------------------------------------------------------------------------ disk full


def _only_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1, lines  # one message: no plot warning beside the error
    return lines[0]


def _ids(run: Path) -> tuple[list[str], list[str]]:
    data = json.loads((run / "results.json").read_text())
    csv = pd.read_csv(run / "results.csv")
    return sorted(c["id"] for c in data["cases"]), sorted(csv["id"]) if "id" in csv else []


TWO_CASES = {**copy.deepcopy(BASE), "providers": ["naive_eager", "reference"]}


@pytest.mark.parametrize("fails_from", range(2, 9))
def test_a_disk_that_fills_while_the_results_are_rewritten_leaves_json_and_csv_alike(
    fails_from, tmp_path, monkeypatch, capsys
):
    """results.json and results.csv are rewritten after every case; the disk fills at the n-th file synced
    (2: the first results.csv, 3/4: the first case's json/csv, ...). Before, a csv that failed after its
    json stood left results.json holding a case results.csv did not."""
    import yaml

    import results.files as files

    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(TWO_CASES))
    real, synced = files.os.fsync, []

    def fsync(fd):
        synced.append(fd)
        if len(synced) >= fails_from:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    assert main(["run", str(tmp_path / "cfg.yaml"), "--out", str(tmp_path / "run"), "--no-progress"]) == 2
    assert "cannot write (No space left on device, ENOSPC)" in _only_line(capsys)
    monkeypatch.undo()
    run = tmp_path / "run"
    assert not list(run.glob(".*.tmp"))
    if (run / "results.json").exists():
        in_json, in_csv = _ids(run)
        assert in_json == in_csv, (in_json, in_csv)


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> Path:
    import yaml

    base = tmp_path_factory.mktemp("report_disk")
    (base / "cfg.yaml").write_text(yaml.safe_dump(TWO_CASES))
    assert main(["run", str(base / "cfg.yaml"), "--out", str(base / "run"), "--no-progress"]) == 0
    return base / "run"


def _tree(run: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(run)): (p.read_bytes() if p.is_file() else None) for p in sorted(run.rglob("*"))}


@pytest.mark.parametrize("victim", ["tflops_vs_length.csv", "roofline.png", "lengths_s_L-8.png", "report.html"])
def test_a_disk_that_fills_during_the_report_leaves_the_run_folder_as_it_was(victim, cpu_run, monkeypatch, capsys):
    before = _tree(cpu_run)
    assert "plots/roofline.png" in before and "report.md" in before
    real_open = builtins.open

    def full(file, mode="r", *a, **k):  # the disk is full when this file (or its temporary) is written
        if isinstance(file, (str, Path)) and any(c in mode for c in "wxa") and victim in Path(file).name:
            raise OSError(errno.ENOSPC, "No space left on device", str(file))
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", full)
    monkeypatch.setattr(io, "open", full)  # pathlib's write_bytes (the palette PNGs) opens through io.open
    capsys.readouterr()
    assert main(["report", str(cpu_run)]) == 2
    line = _only_line(capsys)
    monkeypatch.undo()
    assert f"{victim}: cannot write (No space left on device, ENOSPC)" in line, line
    assert "the report was not written: the run folder is as it was before" in line, line
    assert str(cpu_run) in line and ".tmp" not in line, line
    after = _tree(cpu_run)
    assert sorted(after) == sorted(before)
    assert [k for k in before if before[k] != after[k]] == []
    assert main(["report", str(cpu_run)]) == 0  # with room again, it renders
