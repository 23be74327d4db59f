"""The figures the project publishes are what the code computes: the README table is a fresh render of
the committed example run, the runner's TFLOP/s come from the median and its utilizations from the
peaks, and the table generator prints the recorded values."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import yaml

from bench.cli import main
from bench.timing import Samples
from reports import table
from results.record import timing_fields

ROOT = Path(__file__).resolve().parents[1]


def readme_table() -> tuple[list[str], str]:
    """The `python -m bench table ...` arguments the README names, and the table block after them."""
    text = (ROOT / "README.md").read_text()
    m = re.search(r"`python -m bench table ([^`]+)`", text)
    assert m, "the README names no `python -m bench table ...` command"
    lines = text[m.end() :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    block = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        block.append(line)
    return shlex.split(m.group(1)), "\n".join(block)


def test_readme_table_is_a_fresh_render_of_the_committed_example(capsys):
    args, block = readme_table()
    assert args[0] == "docs/example-h200"
    assert main(["table", str(ROOT / args[0]), *args[1:]]) == 0
    fresh = capsys.readouterr().out.strip()
    assert fresh.count("\n") >= 13  # header, rule, 12 peer shapes
    assert block == fresh


def test_table_prints_the_recorded_tflops():
    cases = [
        {
            "id": "set1/fwd/L=256/fill=0.5/gdpa_triton",
            "provider": "gdpa_triton",
            "mode": "fwd",
            "max_len": 256,
            "semantics": "gdpa",
            "status": "ok",
            "tflops": 238.6,
        },
        {
            "id": "set1/fwd/L=256/fill=0.5/fa4",
            "provider": "fa4",
            "mode": "fwd",
            "max_len": 256,
            "semantics": "softmax",
            "status": "ok",
            "tflops": 139.5,
        },
        {
            "id": "set1/bwd/L=256/fill=0.5/gdpa_triton",
            "provider": "gdpa_triton",
            "mode": "bwd",
            "max_len": 256,
            "semantics": "gdpa",
            "status": "failed",
            "error": "out of memory: x",
            "tflops": None,
        },
        {
            "id": "set1/bwd/L=256/fill=0.5/fa4",
            "provider": "fa4",
            "mode": "bwd",
            "max_len": 256,
            "semantics": "softmax",
            "status": "skipped",
            "error": "no",
            "tflops": None,
        },
    ]
    out = table.tflops_table({"cases": cases}, ["gdpa_triton", "fa4"], ["fwd", "bwd"])
    assert out.splitlines() == [
        "| shape | gdpa_triton fwd | fa4 (softmax) fwd | gdpa_triton bwd | fa4 (softmax) bwd |",
        "|---|---|---|---|---|",
        "| set1/L=256/fill=0.5 | 239 | 140 | OOM | — |",
    ]


def test_timing_fields_follow_the_median_and_the_ceilings():
    s = Samples.of([4.0, 1.0, 2.0, 3.0, 10.0])  # median 3 ms, p20 1.8 ms
    f = timing_fields(s, flops=6e12, peak_tflops=4000.0, gemm_tflops=1000.0)
    assert f["median_ms"] == 3.0 and f["p20_ms"] == pytest.approx(1.8) and f["times_ms"] == [4.0, 1.0, 2.0, 3.0, 10.0]
    assert f["tflops"] == pytest.approx(2000.0, rel=1e-12)  # 6e12 FLOP in 3 ms
    assert f["util_peak"] == pytest.approx(0.5, rel=1e-12)
    assert f["util_measured"] == pytest.approx(2.0, rel=1e-12)
    none = timing_fields(s, flops=6e12, peak_tflops=None, gemm_tflops=None)
    assert none["util_peak"] is None and none["util_measured"] is None


def test_smoke_run_records_tflops_from_the_median_and_utilization_from_the_peak(tmp_path):
    """A real CPU run of the smoke config, with datasheet peaks given in the config so utilization exists."""
    import bench

    cfg = yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text())
    cfg["hardware"] = {"calibrate": False, "peak_tflops": {"fp32": 0.002, "fp16": 0.004}}
    cfg["timing"].update(min_reps=3, max_reps=3)
    df = bench.run(cfg, only=r"^tiny/(fwd|bwd)/L=24/fill=1\.0/naive_eager$", out=tmp_path / "run")
    assert list(df["status"]) == ["ok", "ok"]
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    assert data["meta"]["peak_tflops"] == {"fp32": 0.002, "fp16": 0.004}
    for rec in data["cases"]:
        times = rec["times_ms"]
        assert len(times) == 3 and len(set(times)) == 3  # distinct samples: median, p20 and p80 differ
        assert rec["median_ms"] == pytest.approx(float(np.median(times)), rel=1e-12)
        assert rec["p20_ms"] < rec["median_ms"] < rec["p80_ms"]
        assert rec["tflops"] == pytest.approx(rec["flops"] / (rec["median_ms"] * 1e-3) / 1e12, rel=1e-12)
        assert rec["util_peak"] == pytest.approx(rec["tflops"] / 0.002, rel=1e-12)
        assert rec["util_measured"] is None  # no GEMM is measured on a CPU
    # the report reads the same numbers
    by_id = df.set_index("id")
    for rec in data["cases"]:
        assert by_id.loc[rec["id"], "tflops"] == pytest.approx(rec["tflops"], rel=1e-12)
        assert by_id.loc[rec["id"], "util_peak"] == pytest.approx(rec["util_peak"], rel=1e-12)
