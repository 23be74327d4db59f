"""A kernel that really faults or hangs the GPU does not take the sweep down (`pytest -m gpu tests/test_faults_gpu.py`):
`python -m bench run` of a small config with `test_oob_store` (tests/fault_providers_gpu.py: an
out-of-bounds Triton store at one length) records those cases `failed` with CUDA's error and every other
case `ok`, each fault ending one worker process; gdpa_triton's timings match a run without the faulting
provider (a GPU-bound kernel: naive_eager's per-sequence launches measured the host, 0.58-1.0x run to run).
With `test_spin_hang` (a Triton kernel spinning on a flag nobody sets) and `--case-timeout`, the hung case
is killed with its worker, recorded `failed` (`hung: ...`, in phase gate) and the sweep goes on."""

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from results.files import read_results
from results.power_csv import read_power

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
FAULT_AT = 256

CONFIG = f"""
name: gpu-faults
device: cuda
providers:  # tiles pinned: the two runs (faults, control) tune nothing, so each stays well inside its bound
  - name: gdpa_triton
    options: {{fwd_tiles: [128, 64, 8, 3], dkdv_tiles: [64, 128, 8, 3], dq_tiles: [128, 64, 8, 3]}}
  - {{name: test_oob_store, options: {{fault_at: {FAULT_AT}}}}}
modes: [fwd, bwd]
timing: {{warmup_ms: 100, rep_ms: 200, min_reps: 20}}
power: {{enabled: false}}
hardware: {{calibrate: true, calibrate_seconds: 0.5}}  # once: the fresh workers keep the run's
sets:
  - name: s
    B: 512
    H: 4
    D: 128
    dtype: bf16
    activation: fast_gelu
    max_len: [{FAULT_AT}, 512, 1024]
    lengths: {{family: uniform_fill, fill: [1.0]}}
"""


CHILD_S = 200  # each run's bound: a run that passes takes well under a minute on the H200


def bench_run(cfg: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    """`python -m bench run` in a child bounded by CHILD_S; its output printed whole (`pytest -s` keeps it in
    the log: on the H200 these tests failed twice with nothing captured), and a child past its bound fails
    the test with what it had printed and the run folder's case lines."""
    env = dict(
        os.environ,
        GDPA_BENCH_PROVIDERS="fault_providers_gpu",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
    )
    cmd = [sys.executable, "-m", "bench", "run", str(cfg), "--out", str(out), "--no-progress", *extra]
    print("+", " ".join(cmd), flush=True)
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=CHILD_S)
    except subprocess.TimeoutExpired as exc:
        text = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        print(text(exc.stdout)[-6000:], text(exc.stderr)[-4000:], flush=True)
        pytest.fail(f"python -m bench run did not end within {CHILD_S} s (its output above)")
    print(f"exit {proc.returncode}", proc.stdout[-6000:], proc.stderr[-4000:], sep="\n", flush=True)
    return proc


def test_a_gpu_fault_fails_its_cases_only_and_leaves_the_other_timings_alone(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    cfg = tmp_path / "gpu-faults.yaml"
    cfg.write_text(textwrap.dedent(CONFIG))
    proc = bench_run(cfg, tmp_path / "faults", "--no-report")
    assert proc.returncode == 0, proc.stderr[-2000:]
    cases = read_results(tmp_path / "faults")["cases"]
    assert len(cases) == 12
    for c in cases:
        if f"/L={FAULT_AT}/" in c["id"] and c["provider"] == "test_oob_store":
            assert c["status"] == "failed" and "an illegal memory access was encountered" in c["error"], c
        else:
            assert c["status"] == "ok", (c["id"], c["status"], c["error"])
    assert proc.stdout.count("a fresh worker process (pid") == 2  # the fwd and the bwd fault
    # the GEMM ceiling measured by the first worker only; the two fresh ones keep it
    assert proc.stdout.count("calibrating: ") == 1 and proc.stdout.count("not measured again") == 2, proc.stdout
    meta = read_results(tmp_path / "faults")["meta"]
    assert meta["measured_gemm_tflops"] > 100 and meta["calibration"]["session"] == 0
    assert "calibration_history" not in meta

    control = bench_run(cfg, tmp_path / "control", "--no-report", "--providers", "gdpa_triton")
    assert control.returncode == 0
    before = {c["id"]: c["median_ms"] for c in read_results(tmp_path / "control")["cases"]}
    ratios = {c["id"]: c["median_ms"] / before[c["id"]] for c in cases if c["provider"] == "gdpa_triton"}
    print("median with the faulting provider / without:", {k: round(v, 3) for k, v in ratios.items()})
    assert len(ratios) == 6 and all(0.85 < r < 1.18 for r in ratios.values()), ratios
    assert abs(math.log(math.prod(ratios.values())) / len(ratios)) < math.log(1.05), ratios


HANG_AT = 256
HANG_CONFIG = f"""
name: gpu-hang
device: cuda
providers:  # tiles pinned: no autotuning inside the 60 s deadline of the first case
  - {{name: gdpa_triton, options: {{fwd_tiles: [128, 64, 8, 3]}}}}
  - {{name: test_spin_hang, options: {{hang_at: {HANG_AT}}}}}
modes: [fwd]
timing: {{warmup_ms: 20, rep_ms: 50, min_reps: 5}}
power: {{settle_s: 0.1, energy_loop_s: 0.1}}  # power.csv: the killed worker's cases stay in it
hardware: {{calibrate: false}}
sets:
  - name: s
    B: 64
    H: 4
    D: 128
    dtype: bf16
    activation: fast_gelu
    max_len: [{HANG_AT}, 512]
    lengths: {{family: uniform_fill, fill: [1.0]}}
"""


def test_a_kernel_that_hangs_the_gpu_is_killed_recorded_and_the_sweep_goes_on(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    cfg = tmp_path / "gpu-hang.yaml"
    cfg.write_text(textwrap.dedent(HANG_CONFIG))
    proc = bench_run(cfg, tmp_path / "hang", "--no-report", "--case-timeout", "60")
    assert proc.returncode == 0, proc.stderr[-2000:]
    cases = {c["id"]: c for c in read_results(tmp_path / "hang")["cases"]}
    assert len(cases) == 4, list(cases)
    hung = cases.pop(f"s/fwd/L={HANG_AT}/fill=1.0/test_spin_hang")
    assert hung["status"] == "failed" and hung["error"].startswith("hung: no progress for 60 s"), hung
    assert "in phase gate" in hung["error"]
    for c in cases.values():  # the case after the hang ran on the same GPU in a fresh worker
        assert c["status"] == "ok", (c["id"], c["status"], c["error"])
    assert proc.stdout.count("a fresh worker process (pid") == 1
    timeline = read_power(tmp_path / "hang")  # written case by case: the killed worker's first case is in it
    assert set(timeline["case_id"]) - {""} >= set(cases), sorted(set(timeline["case_id"]))
    assert timeline["time_s"].is_monotonic_increasing
