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

from bench.case.timing import Samples
from bench.cli.parser import main
from reports import table
from results.files import SAMPLE_DIGITS
from results.record import timing_fields

ROOT = Path(__file__).resolve().parents[1]


PENDING = "(table: after the H200 run)"  # where a README table waits for its run to be committed


def readme_tables() -> list[tuple[list[str], str]]:
    """Every `python -m bench table ...` the README names: its arguments and the block after it (the
    table's lines, or the line saying it waits for its run)."""
    text = (ROOT / "README.md").read_text()
    out = []
    for m in re.finditer(r"`python -m bench table ([^`]+)`", text):
        lines = text[m.end() :].splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("|") or line == PENDING)
        block = []
        for line in lines[start:]:
            if not line.startswith("|") and line != PENDING:
                break
            block.append(line)
        out.append((shlex.split(m.group(1)), "\n".join(block)))
    return out


def test_readme_tables_are_fresh_renders_of_the_committed_runs(capsys):
    tables = readme_tables()
    assert [args[0] for args, _ in tables] == ["docs/example-h200", "docs/example-h200-peers"]
    for args, block in tables:
        if not (ROOT / args[0]).is_dir():  # the run is not committed yet: the README says so, no figures
            assert block == PENDING, args
            continue
        assert main(["table", str(ROOT / args[0]), *args[1:]]) == 0
        fresh = capsys.readouterr().out.strip()
        assert fresh.count("\n") >= 13  # header, rule, 12 peer shapes
        assert block == fresh


def test_the_readme_peer_table_command_on_a_synthetic_run(tmp_path, capsys):
    """The README's meta_gdpa vs gdpa vs fa4 command on a run shaped like configs/peers-h200.yaml: Meta's
    sets only (not the causal SiLU ones), the providers in the order named, fwd then bwd."""
    args = next(args for args, _ in readme_tables() if args[0] == "docs/example-h200-peers")
    cases, rate = [], {}
    for set_, fill in (("set1", 0.5), ("set1", 1.0), ("set2", 1.0)):
        for mode in ("fwd", "bwd", "fwd_bwd"):
            for L in (256, 512):
                for i, (p, sem) in enumerate((("fa4", "softmax"), ("gdpa", "gdpa"), ("meta_gdpa", "gdpa"))):
                    cid = f"{set_}/{mode}/L={L}" + (f"/fill={fill}" if set_ == "set1" else "") + f"/{p}"
                    rate[cid] = 100.0 * (i + 1) + L / 64 + (mode == "bwd")
                    status = "failed" if cid == "set2/bwd/L=512/meta_gdpa" else "ok"
                    cases.append(
                        dict(id=cid, provider=p, semantics=sem, mode=mode, max_len=L, status=status, tflops=rate[cid])
                        | ({"median_ms": 1.0} if status == "ok" else {})
                    )
                # Meta's WS variant in its own environment, skipped where the fork cannot build it
                wid = f"{set_}/{mode}/L={L}" + (f"/fill={fill}" if set_ == "set1" else "") + "/meta_gdpa_ws"
                cases.append(dict(id=wid, provider="meta_gdpa_ws", mode=mode, max_len=L, status="skipped", tflops=None))
    for p in ("hstu", "gdpa"):
        cases.append(
            dict(id=f"causal_silu_256/fwd/L=256/fill=1.0/{p}", provider=p, mode="fwd", status="ok", tflops=9.0)
            | {"median_ms": 1.0}
        )
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(
        json.dumps({"schema": "gdpa-bench/1", "meta": {"gpu": "NVIDIA H200"}, "workloads": {}, "cases": cases})
    )
    assert main(["table", str(run), *args[1:]]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == (
        "| shape | meta_gdpa fwd | meta_gdpa_ws fwd | gdpa fwd | fa4 (softmax) fwd | meta_gdpa bwd | meta_gdpa_ws bwd"
        " | gdpa bwd | fa4 (softmax) bwd |"
    )
    assert [line.split(" | ")[0] for line in lines[2:]] == [
        "| set1/L=256/fill=0.5",
        "| set1/L=512/fill=0.5",
        "| set1/L=256/fill=1.0",
        "| set1/L=512/fill=1.0",
        "| set2/L=256",
        "| set2/L=512",
    ]
    first = lines[2].strip("| ").split(" | ")[1:]
    ids = [f"set1/{m}/L=256/fill=0.5/{p}" for m in ("fwd", "bwd") for p in ("meta_gdpa", "ws", "gdpa", "fa4")]
    assert first == [f"{rate[i]:.0f}" if i in rate else "—" for i in ids]  # skipped: a dash
    assert lines[-1].strip("| ").split(" | ")[5] == "failed"  # set2/bwd/L=512/meta_gdpa
    assert main(["table", str(run), "--providers", "meta_gdpa,hstu_typo"]) == 2
    assert "--providers hstu_typo: not a provider of" in capsys.readouterr().err


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
        # the median of the samples as timed; results.json keeps them to SAMPLE_DIGITS significant digits
        assert rec["median_ms"] == pytest.approx(float(np.median(times)), rel=10.0 ** (1 - SAMPLE_DIGITS))
        assert rec["p20_ms"] < rec["median_ms"] < rec["p80_ms"]
        assert rec["tflops"] == pytest.approx(rec["flops"] / (rec["median_ms"] * 1e-3) / 1e12, rel=1e-12)
        assert rec["util_peak"] == pytest.approx(rec["tflops"] / 0.002, rel=1e-12)
        assert rec["util_measured"] is None  # no GEMM is measured on a CPU
    # the report reads the same numbers
    by_id = df.set_index("id")
    for rec in data["cases"]:
        assert by_id.loc[rec["id"], "tflops"] == pytest.approx(rec["tflops"], rel=1e-12)
        assert by_id.loc[rec["id"], "util_peak"] == pytest.approx(rec["util_peak"], rel=1e-12)
