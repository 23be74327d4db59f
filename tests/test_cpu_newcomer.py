"""What a newcomer met on a CPU machine (issue 32): start-up cost of the commands that only read results,
the messages of a misspelt field, a `--providers` that matches nothing and an API caller's errors."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.cli.parser import main

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.yaml"
# imports a command must not pay for: torch alone takes ~3 s to import on a CPU machine
HEAVY = ("torch", "triton", "matplotlib")
PROBE = """
import json, sys
from bench.cli.parser import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
print(json.dumps({"rc": rc, "heavy": [m for m in HEAVY if m in sys.modules]}), file=sys.stderr)
""".replace("HEAVY", repr(HEAVY))

GOOD_RUN = {
    "schema": "gdpa-bench/1",
    "meta": {"device": "cpu", "config_name": "x", "started_at": "2026-12-01T00:00:00+00:00"},
    "workloads": {},
    "cases": [{"id": "s/fwd/L=8/naive_eager", "status": "ok", "provider": "naive_eager", "mode": "fwd",
               "times_ms": [1.0, 1.1], "median_ms": 1.05, "tflops": 2e-6}],
}  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["fields"], ["compare", "run", "run"], ["table", "run"], ["power-checks", "run"]],
    ids=lambda a: a[0],
)
def test_commands_that_only_read_results_do_not_import_torch(argv, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text(json.dumps(GOOD_RUN))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TRITON_INTERPRET", None)
    p = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    seen = json.loads(p.stderr.strip().splitlines()[-1])
    assert seen["rc"] in (0, None), p.stderr[-2000:]
    assert seen["heavy"] == [], f"{argv[0]} imported {seen['heavy']}"


BASE = yaml.safe_load(SMOKE.read_text())


def _write(tmp_path: Path, data) -> str:
    path = tmp_path / "cfg.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


def test_a_misspelt_required_field_names_the_unknown_key(tmp_path, capsys):
    cfg = copy.deepcopy(BASE)
    cfg["provders"] = cfg.pop("providers")
    assert main(["list", _write(tmp_path, cfg)]) == 2
    line = _error(capsys)
    assert "providers: required field is missing (unknown key 'provders' — did you mean 'providers'?)" in line, line
    # inside a set too
    cfg = copy.deepcopy(BASE)
    cfg["sets"][0]["max_lne"] = cfg["sets"][0].pop("max_len")
    assert main(["list", _write(tmp_path, cfg)]) == 2
    line = _error(capsys)
    assert "sets.tiny.max_len: required field is missing (unknown key 'max_lne' — did you mean 'max_len'?)" in line


def test_providers_that_match_no_case_name_the_configs_providers(capsys):
    assert main(["list", str(SMOKE), "--providers", "gdpa,flex_attention"]) == 2
    line = _error(capsys)
    assert "--providers: unknown provider 'gdpa' (a registered provider, but not one of this config's)" in line
    assert line.endswith("allowed: gdpa_triton, naive_eager, reference"), line  # the config's, not the registry


def test_api_errors_name_the_api_keywords_not_the_cli_options(tmp_path, monkeypatch):
    import bench

    monkeypatch.chdir(tmp_path)
    cfg = copy.deepcopy(BASE)
    (tmp_path / "old").mkdir()
    for kw in ({"resume": "old"}, {"only": "nothing-like-this"}, {"providers": "nope"}, {"only": "("}):
        with pytest.raises(ValueError) as exc:
            bench.run(cfg, **kw)
        msg = str(exc.value)
        assert "--resume" not in msg and "--only" not in msg and "--providers" not in msg, msg
        assert f"{next(iter(kw))}=" in msg, msg


# --------------------------------------------------------------------------------- the CPU report

CPU_RUN = {
    "name": "newcomer",
    "device": "cpu",
    "providers": ["naive_eager", "reference"],
    "baseline": "naive_eager",
    "modes": ["fwd"],
    "timing": {"warmup_ms": 1, "rep_ms": 2, "min_reps": 2, "max_reps": 2},
    "power": {"enabled": False},
    "hardware": {"calibrate": False},
    "bands": {"only": "naive_eager$", "edges": [6]},
    "sets": [{"name": "s", "B": 4, "H": 2, "D": 16, "dtype": "fp32", "max_len": [8, 16],
              "lengths": {"family": "uniform_fill", "fill": 0.5}, "kv": {"rule": "self"}}],
}  # fmt: skip


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    base = tmp_path_factory.mktemp("newcomer")
    (base / "cfg.yaml").write_text(yaml.safe_dump(CPU_RUN))
    out = subprocess.run(
        [sys.executable, "-m", "bench", "run", str(base / "cfg.yaml"), "--out", str(base / "run"), "--no-progress"],
        cwd=base,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return base / "run", out.stdout


def test_a_cpu_run_prints_and_tabulates_rates_in_readable_units(cpu_report, capsys):
    run, stdout = cpu_report
    lines = [line for line in stdout.splitlines() if line.startswith("  s/fwd/")]
    assert lines and all("FLOP/s (" in line and "e-0" not in line for line in lines), lines
    assert not any(" TFLOP/s (" in line for line in lines), lines  # a CPU's rates are k/M/GFLOP/s
    capsys.readouterr()
    assert main(["table", str(run)]) == 0
    table = capsys.readouterr().out
    assert "e-0" not in table and "FLOP/s |" in table, table


def test_a_cpu_report_draws_only_what_has_data_under_captions_of_what_is_drawn(cpu_report):
    run, _ = cpu_report
    md = (run / "report.md").read_text()
    pngs = {p.stem for p in (run / "plots").glob("*.png") if not p.stem.startswith("lengths_")}
    assert pngs == {"tflops_vs_length", "roofline", "workload_lengths", "length_bands"}, pngs
    not_drawn = next(line for line in md.splitlines() if line.startswith("Not drawn, having no data in this run: "))
    for name in ("speedup", "power_timeline", "kernel_breakdown"):
        assert f"{name} — " in not_drawn, not_drawn
    captions = [line for line in md.splitlines() if line.startswith("_")]
    tflops = next(c for c in captions if c.startswith("_Achieved "))
    assert "datasheet" not in tflops and "GEMM" not in tflops and "TFLOP/s" not in tflops, tflops
    roof = next(c for c in captions if c.startswith("_Arithmetic intensity"))
    assert "no roof is drawn" in roof and "HBM" not in roof, roof
    assert "Speedup vs" not in md and "Power and SM clock" not in md and "Kernel breakdown: the kernels" not in md
    csv = (run / "plots" / "tflops_vs_length.csv").read_text().splitlines()
    assert csv[0].split(",").index("tflops") > 0 and "ceiling" not in "".join(csv)  # CSVs keep TFLOP/s


def test_the_cpu_band_view_shows_no_jaggedness_ceiling(cpu_report):
    run, _ = cpu_report
    md = (run / "report.md").read_text()
    bands = md[md.index("### Length bands") :]
    header = next(line for line in bands.splitlines() if line.startswith("| case |"))
    assert "achieved / ceiling" not in header and "ceiling TFLOP/s" not in header, header
    assert "On this CPU run the jaggedness ceiling" in bands
    data = json.loads((run / "results.json").read_text())
    assert any(c.get("bands") for c in data["cases"])  # the figures are still recorded, only not shown


def test_a_cpu_summary_ranks_nothing(cpu_report):
    run, _ = cpu_report
    md = (run / "report.md").read_text()
    summary = md[md.index("## Summary per shape") : md.index("## Plots")]
    header = next(line for line in summary.splitlines() if line.startswith("| set |"))
    assert header == "| set | mode | L | sweep | dtype | naive_eager | reference |", header
    assert "best" not in summary.lower().replace("no provider is called the fastest", "")
