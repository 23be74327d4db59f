"""ncu output parsing, the naive baseline's activations, and the committed real H200 results."""

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from bench.profile import parse_ncu_csv, summarize
from kernels.activations import ACTIVATIONS, TORCH_NATIVE
from reports.render import render_report
from results.frame import load_run

ROOT = Path(__file__).resolve().parents[1]

HEADER = ",".join(
    f'"{c}"'
    for c in (
        "ID",
        "Process ID",
        "Process Name",
        "Host Name",
        "Kernel Name",
        "Context",
        "Stream",
        "Block Size",
        "Grid Size",
        "Device",
        "CC",
        "gpu__time_duration.sum",
        "sm__cycles_elapsed.avg.per_second",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    )
)
NCU = f"""==PROF== Connected to process 506 (/usr/bin/python3)
==PROF== Profiling "gdpa_fwd_kernel": 0%....50%....100% - 3 passes
{HEADER}
"","","","","","","","","","","","nsecond","cycle/second","%"
"0","506","python3","h","gdpa_fwd_kernel","1","7","(256, 1, 1)","(16, 4608, 1)","0","9.0","30,000,000","1800000000",\
"50.0"
"1","506","python3","h","gdpa_bwd_dq_kernel","1","7","(256, 1, 1)","(16, 4608, 1)","0","9.0","10,000,000","1600000000",\
"70.0"
==PROF== Disconnected from process 506
"""


def test_parse_ncu_csv_and_duration_weighting():
    kernels = parse_ncu_csv(NCU)
    assert [k["name"] for k in kernels] == ["gdpa_fwd_kernel", "gdpa_bwd_dq_kernel"]
    assert kernels[0]["duration_ns"] == 30e6
    s = summarize(kernels)
    assert s["tc_util_ncu"] == pytest.approx((30 * 0.50 + 10 * 0.70) / 40)
    assert s["ncu_sm_clock_mhz"] == pytest.approx((30 * 1800 + 10 * 1600) / 40)
    assert summarize([])["tc_util_ncu"] is None
    assert parse_ncu_csv("==ERROR== The application returned an error code (1).") == []


def test_naive_uses_torch_native_activations_with_identical_math():
    x = torch.randn(4096, dtype=torch.float64) * 4
    for name in ACTIVATIONS:
        assert torch.allclose(ACTIVATIONS[name](x), TORCH_NATIVE[name](x), atol=1e-12), name
    assert TORCH_NATIVE["fast_gelu"] is not ACTIVATIONS["fast_gelu"]


def test_real_h200_baseline_renders(tmp_path):
    """baselines/h200.json is a real results.json from an H200 (the CI baseline): the reporter reads it."""
    data = json.loads((ROOT / "baselines" / "h200.json").read_text())
    assert data["meta"]["gpu"] == "NVIDIA H200" and data["meta"]["git_sha"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(data))
    _, cases, _ = load_run(run)
    ok = cases[cases["status"] == "ok"]
    assert len(ok) == 30 and (ok["tflops"] > 10).all()  # configs/ci.yaml: 2 shapes x 3 modes x 5 providers
    paths = render_report(run)
    html = Path(paths["html"]).read_text()
    assert all(p in html for p in ("gdpa_triton", "gdpa_hopper")) and "data:image/png;base64," in html


def test_committed_example_report_is_complete():
    ex = ROOT / "docs" / "example-h200"
    data = json.loads((ex / "results.json").read_text())
    assert data["meta"]["gpu"] == "NVIDIA H200"
    for name in ("tflops_vs_length", "speedup", "power_timeline", "roofline", "workload_lengths"):
        assert (ex / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    ours = [c for c in data["cases"] if c["provider"] == "gdpa_triton"]
    assert len(ours) == 36 and all(c["status"] == "ok" for c in ours)  # 12 peer shapes x 3 modes
    fwd = next(c for c in ours if c["id"] == "set1/fwd/L=2048/fill=1.0/gdpa_triton")
    if fwd.get("tc_util_ncu") is not None:  # present when `bench profile --run` was run on the example
        assert 0 < fwd["tc_util_ncu"] < 1


FAKE_NCU = textwrap.dedent('''\
    #!{python}
    """A stand-in for ncu: --export writes a report file, --import prints the metrics as ncu does."""
    import sys
    args = sys.argv[1:]
    if "--import" in args:
        print(open({csv!r}).read())
    elif "--export" in args:
        open(args[args.index("--export") + 1], "w").write("ncu-rep")
        print("==PROF== Report: written")
    else:
        print(open({csv!r}).read())
    ''')


def test_profile_keep_keeps_the_report_next_to_the_run(tmp_path):
    from bench.config import load_config
    from bench.profile import ncu_command, profile_case

    csv = tmp_path / "ncu.csv"
    csv.write_text(NCU)
    ncu = tmp_path / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable, csv=str(csv)))
    ncu.chmod(0o755)
    cfg = load_config(ROOT / "configs" / "smoke.yaml")
    cid = "tiny/fwd/L=24/fill=1.0/naive_eager"
    keep = tmp_path / "run" / "ncu"
    keep.mkdir(parents=True)
    cmd = ncu_command(str(ncu), cfg, cid, None, keep / "x.ncu-rep")
    assert "--export" in cmd and "--csv" not in cmd
    r = profile_case(str(ncu), cfg, cid, None, keep)
    assert r["ncu_report"] == str(keep / "tiny_fwd_L=24_fill=1.0_naive_eager.ncu-rep")
    assert Path(r["ncu_report"]).read_text() == "ncu-rep"
    assert r["tc_util_ncu"] == pytest.approx((30 * 0.50 + 10 * 0.70) / 40)
    plain = profile_case(str(ncu), cfg, cid, None, None)
    assert "ncu_report" not in plain and plain["tc_util_ncu"] == r["tc_util_ncu"]
