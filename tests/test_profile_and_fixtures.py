"""The naive baseline's activations, and the committed real H200 results (ncu parsing: test_profiling.py)."""

import json
from pathlib import Path

import torch

from kernels.activations import ACTIVATIONS, TORCH_NATIVE
from reports.render import render_report
from results.files import read_results
from results.frame import load_run

ROOT = Path(__file__).resolve().parents[1]


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
    data = read_results(ex)
    assert data["meta"]["gpu"] == "NVIDIA H200"
    for name in ("tflops_vs_length", "speedup", "power_timeline", "roofline", "workload_lengths"):
        assert (ex / "plots" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    ours = [c for c in data["cases"] if c["provider"] == "gdpa_triton"]
    assert len(ours) == 36 and all(c["status"] == "ok" for c in ours)  # 12 peer shapes x 3 modes
    fwd = next(c for c in ours if c["id"] == "set1/fwd/L=2048/fill=1.0/gdpa_triton")
    if fwd.get("tc_util_ncu") is not None:  # present when `bench profile --run` was run on the example
        assert 0 < fwd["tc_util_ncu"] < 1
