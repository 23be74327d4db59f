"""Memory before allocation (bench.config.resources, issue 25): the estimates bound what a case really allocates, a
case that does not fit is `skipped` with its need and what is free, and the host's free memory honours an
address-space limit (`ulimit -v`)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch
import yaml

from bench.cli.parser import main
from bench.config import resources
from bench.config.cases import Workload
from bench.config.resources import HOST_HEADROOM, Shape, batch_need, case_need, host_free_bytes

ROOT = Path(__file__).resolve().parents[1]

# One case in a fresh process: a small case first (libraries' one-time buffers), then the measured one;
# the peak resident set grows by what the batch and the case allocate.
MEASURE = """
import json, sys
import torch
from bench.config.cases import Workload
from bench.case.gate import correctness
from bench.config.resources import Shape, batch_need, case_need
from kernels.registry import CaseSpec, get_provider

torch.set_num_threads(1)
prov, mode, L = sys.argv[1], sys.argv[2], int(sys.argv[3])

def workload(n):
    return Workload(name="s/L", set="s", max_len=n, sweep={}, B=8, H=4, Hkv=4, D=64, dtype="fp32",
                    activation="fast_gelu", alpha=1.0, qk_scale=1.0, causal=False, family="uniform_fill",
                    family_params={"fill": 0.5}, rule="self", rule_params={}, seed=0, sort_by_length=False)

def case(w, batch):
    p, spec = get_provider(prov), CaseSpec(mode=mode)
    correctness(p, batch, spec, mode, 0.02, 16, 0)
    fn = p.build(batch, spec, mode)
    fn(); fn()
    return p

def peak():  # this process's resident high-water mark (ru_maxrss may carry the forking parent's)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
case(workload(16), workload(16).batch("cpu"))
w = workload(L)
q, kv = w.lengths()
r0 = peak()
batch = w.batch("cpu", (q, kv))
r1 = peak()
p = case(w, batch)
r2 = peak()
s = Shape.of(w, q, kv)
print(json.dumps({"batch": [batch_need(s), r1 - r0], "case": [case_need(s, mode, p.scores_memory, True), r2 - r1]}))
"""


@pytest.mark.parametrize(
    ("provider", "mode", "L"), [("naive_eager", "fwd", 1024), ("naive_eager", "bwd", 768), ("reference", "bwd", 512)]
)
def test_estimates_bound_what_a_case_allocates(provider, mode, L):
    p = subprocess.run(
        [sys.executable, "-c", MEASURE, provider, mode, str(L)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1"),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    estimate, measured = got["case"]
    assert measured > 50 * 2**20  # large enough that page and allocator noise is small beside it
    # within what the host check allows for (HOST_HEADROOM) above, and not absurdly far below
    assert measured <= estimate / HOST_HEADROOM, got
    assert estimate <= 3 * measured, got
    assert got["batch"][1] <= got["batch"][0] / HOST_HEADROOM + 4 * 2**20, got


def _workload(L: int, dtype: str = "bf16") -> tuple[Workload, Shape]:
    w = Workload(
        name=f"s/L={L}",
        set="s",
        max_len=L,
        sweep={},
        B=4,
        H=2,
        Hkv=2,
        D=16,
        dtype=dtype,
        activation="fast_gelu",
        alpha=1.0,
        qk_scale=1.0,
        causal=False,
        family="uniform_fill",
        family_params={"fill": 1.0},
        rule="self",
        rule_params={},
        seed=0,
        sort_by_length=False,
    )
    q, kv = w.lengths()
    return w, Shape.of(w, q, kv)


def test_batch_estimate_is_the_batch_tensors_plus_their_fp32_draw():
    from bench.config.resources import ALLOCATOR_ROUND

    w, s = _workload(64)
    b = w.batch("cpu")
    tensors = sum(t.numel() * t.element_size() for t in (b.q, b.k, b.v, b.dout, b.q_offsets, b.kv_offsets))
    fp32_draw = 4 * max(s.total_q * s.H, s.total_kv * s.Hkv) * s.D
    assert tensors + fp32_draw <= batch_need(s) <= tensors + fp32_draw + 16 * (s.B + 1) + 5 * ALLOCATOR_ROUND
    assert s.total_q == 4 * 64 and s.max_pairs == 64 * 64 and s.sum_pairs == 4 * 64 * 64


def test_the_batch_is_drawn_with_one_fp32_copy_alive_at_a_time(monkeypatch):
    """make_batch scales its fp32 draw in place: two fp32 copies alive at once took 35 MB more than
    batch_need on the H200 (B 64, H 4, D 128, ΣL 33,442)."""
    import workloads.batch as wb

    live, peak = [0], [0]
    real_randn = torch.randn

    def counted(*args, **kwargs):
        t = real_randn(*args, **kwargs)
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        weakref.finalize(t, lambda: live.__setitem__(0, live[0] - 1))
        return t

    monkeypatch.setattr(wb.torch, "randn", counted)
    real_mul = torch.Tensor.__mul__
    monkeypatch.setattr(torch.Tensor, "__mul__", lambda a, b: pytest.fail("an out-of-place scale") or real_mul(a, b))
    w, _ = _workload(64)
    w.batch("cpu")
    assert peak[0] == 1


def test_case_estimate_follows_the_provider_memory_model():
    _, s = _workload(512)
    padded, tiles = case_need(s, "fwd", "padded", False), case_need(s, "fwd", "tiles", False)
    assert padded > tiles + 3 * 2 * s.B * s.H * 512 * 512  # the padded score tensors
    assert case_need(s, "bwd", "tiles", False) > tiles  # the gradients and autograd's copies
    assert case_need(s, "fwd", "tiles", True) >= tiles  # the gate's reference of the longest sequence


def _config(tmp_path: Path, max_len) -> Path:
    cfg = {
        "name": "mem",
        "device": "cpu",
        "providers": ["naive_eager"],
        "modes": ["fwd"],
        "timing": {"warmup_ms": 1, "rep_ms": 2, "min_reps": 2, "max_reps": 2},
        "power": {"enabled": False},
        "hardware": {"calibrate": False},
        "sets": [
            {
                "name": "s",
                "B": 4,
                "H": 2,
                "D": 16,
                "dtype": "fp32",
                "max_len": max_len,
                "lengths": {"family": "uniform_fill", "fill": 1.0},
            }
        ],
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_case_that_does_not_fit_is_skipped_with_its_need(tmp_path, monkeypatch, capsys):
    _, small = _workload(8, "fp32")  # as _config's set
    need_small = batch_need(small) + case_need(small, "fwd", "padded", True)  # more than the check's need
    free = int(2 * need_small / HOST_HEADROOM)  # the small workload fits, the big one does not
    monkeypatch.setattr(resources, "free_bytes", lambda device: free)
    monkeypatch.setattr("bench.sweep.runner.free_bytes", lambda device: free)
    out = tmp_path / "run"
    assert main(["run", str(_config(tmp_path, [8, 1024])), "--out", str(out), "--no-progress", "--no-report"]) == 0
    cases = {c["id"]: c for c in json.loads((out / "results.json").read_text())["cases"]}
    assert cases["s/fwd/L=8/naive_eager"]["status"] == "ok"
    big_case = cases["s/fwd/L=1024/naive_eager"]
    assert big_case["status"] == "skipped" and big_case["error"].startswith("needs "), big_case
    assert f"{free / 2**30:.3g} GiB free on cpu" in big_case["error"]
    # and with nothing that fits, the run is refused before anything is written
    monkeypatch.setattr(resources, "free_bytes", lambda device: 1024)
    assert main(["run", str(_config(tmp_path, [8])), "--out", str(tmp_path / "none"), "--no-progress"]) == 2
    assert "no selected case fits in memory" in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_host_free_memory_honours_the_address_space_limit(monkeypatch):
    vm = resources._status_kib("VmSize") * 1024
    limit = vm + 2**30
    monkeypatch.setattr(resources.resource, "getrlimit", lambda which: (limit, resource.RLIM_INFINITY))
    assert host_free_bytes() <= 2**30
    monkeypatch.setattr(resources.resource, "getrlimit", lambda which: (vm // 2, resource.RLIM_INFINITY))
    assert host_free_bytes() == 0


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["naive_eager", "reference", "gdpa_triton", "gdpa", "fa4"])
@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_estimates_bound_cuda_peaks(provider, mode):
    """On a GPU: the estimate bounds the peak PyTorch allocates for the batch and the case (run on the
    device machine: pytest -m gpu tests/test_resources.py)."""
    from bench.case.gate import correctness
    from kernels.registry import CaseSpec, get_provider

    p = get_provider(provider)
    dev = torch.device("cuda")
    if p.availability(dev):
        pytest.skip(p.availability(dev))
    w = Workload(
        name="s/L",
        set="s",
        max_len=1024,
        sweep={},
        B=64,
        H=4,
        Hkv=4,
        D=128,
        dtype="bf16",
        activation="fast_gelu",
        alpha=1.0,
        qk_scale=1.0,
        causal=False,
        family="uniform_fill",
        family_params={"fill": 0.5},
        rule="self",
        rule_params={},
        seed=0,
        sort_by_length=False,
    )
    q, kv = w.lengths()
    s = Shape.of(w, q, kv)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    batch = w.batch(dev, (q, kv))
    batch_peak = torch.cuda.max_memory_allocated() - base
    torch.cuda.reset_peak_memory_stats()
    spec = CaseSpec(mode=mode)
    correctness(p, batch, spec, mode, 0.05, 16, 0)
    fn = p.build(batch, spec, mode)
    fn()
    fn()
    torch.cuda.synchronize()
    case_peak = torch.cuda.max_memory_allocated() - base - batch_peak
    assert batch_peak <= batch_need(s)
    # a GPU case is skipped only when its expected peak exceeds what is free (HEADROOM["cuda"] = 1): the
    # expectation must be that peak within 25%, and not so far above that cases which fit are skipped
    need = case_need(s, mode, p.scores_memory, True, p.autotune_bytes)  # a first call tunes on a GPU
    untuned = case_need(s, mode, p.scores_memory, True)  # a shape an earlier test tuned tunes nothing now
    print({"provider": provider, "mode": mode, "case_peak": case_peak, "need": need, "batch_peak": batch_peak})
    assert 0.25 * untuned <= case_peak <= 1.25 * need + 64 * 2**20, (case_peak, need)
