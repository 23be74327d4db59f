"""The Hopper GDPA backend (kernels/gdpa/hopper): its contract on any machine, the activation math its
kernels run (checked here through torch on the CPU), and — marked `gpu`, on an H100/H200 with flash-attn-4 —
forward and backward against the fp32 reference."""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import kernels.gdpa.hopper as hopper
from kernels.activations import ACTIVATION_NAMES, get_activation
from kernels.gdpa.hopper import activations as hopper_acts

ROOT = Path(__file__).resolve().parents[1]


def _qkv(dtype=torch.bfloat16, d=128, h=4, hkv=4, rows=8, krows=8):
    q = torch.zeros(rows, h, d, dtype=dtype)
    k = torch.zeros(krows, hkv, d, dtype=dtype)
    return q, k, torch.zeros_like(k)


# ----------------------------------------------------------------------------------------------- contract
def test_import_is_cheap_and_does_not_touch_flash_attn():
    code = (
        "import sys, kernels.gdpa.hopper as h; "
        "bad = [m for m in ('flash_attn', 'cutlass', 'quack') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_activation_of_the_op_is_supported():
    assert set(hopper.SUPPORTED_ACTIVATIONS) == set(ACTIVATION_NAMES)
    assert set(hopper_acts.NAMES) == set(ACTIVATION_NAMES)


def test_unavailable_without_flash_attn(monkeypatch):
    monkeypatch.setattr(hopper, "_PACKAGE_REASON", [])
    monkeypatch.setattr(hopper, "_DEVICE_REASON", {})
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import flash_attn... raises ImportError
    monkeypatch.setitem(sys.modules, "flash_attn.cute", None)
    monkeypatch.setitem(sys.modules, "flash_attn.cute.flash_fwd_sm90", None)
    monkeypatch.setitem(sys.modules, "flash_attn.cute.flash_bwd_sm90", None)
    assert hopper.unavailable("cpu") == "flash-attn-4 not installed (pip install -e '.[fa4]')"


@pytest.mark.parametrize(
    ("capability", "expect"),
    [
        ((10, 0), "sm100 (Blackwell) not supported yet"),
        ((8, 0), "needs an sm90 (Hopper) GPU"),
        ((9, 0), None),
    ],
)
def test_unavailable_by_device(monkeypatch, capability, expect):
    monkeypatch.setattr(hopper, "_PACKAGE_REASON", [None])  # as if flash-attn-4 imported
    monkeypatch.setattr(hopper, "_DEVICE_REASON", {})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some GPU")
    reason = hopper.unavailable("cuda:0")
    assert reason is None if expect is None else reason.startswith(expect)
    assert hopper.unavailable("cpu") == "runs on CUDA devices only, not cpu"


def test_unavailable_is_cached_per_device(monkeypatch):
    monkeypatch.setattr(hopper, "_PACKAGE_REASON", [None])
    monkeypatch.setattr(hopper, "_DEVICE_REASON", {})
    calls = []
    monkeypatch.setattr(hopper, "_device_reason", lambda device: calls.append(device) or "no")
    assert hopper.unavailable("cpu") == hopper.unavailable("cpu") == "no"
    assert len(calls) == 1


def _call(q, k, v, activation="fast_gelu", causal=False):
    from kernels.gdpa.call import GDPACall

    offsets = torch.zeros(2, dtype=torch.int32)
    return GDPACall(q, k, v, offsets, offsets, q.shape[0], k.shape[0], activation, 1.0, 1.0, causal)


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({}, None),
        ({"dtype": torch.float32}, "dtype float32 not supported"),
        ({"d": 96}, "head dim 96 not supported"),
        ({"d": 64}, None),
        ({"dtype": torch.float16}, None),
        ({"hkv": 2}, None),
        ({"hkv": 3}, "query heads 4 not a multiple of key/value heads 3"),
        ({"activation": "tanh"}, "activation 'tanh' not supported"),
        ({"causal": True}, None),
        ({"causal": True, "krows": 9}, "causal needs self-attention lengths"),
        ({"krows": 9}, None),
    ],
)
def test_unsupported(change, expect):
    q, k, v = _qkv(**{n: change[n] for n in ("dtype", "d", "hkv", "krows") if n in change})
    reason = hopper.unsupported(_call(q, k, v, change.get("activation", "fast_gelu"), change.get("causal", False)))
    assert reason is None if expect is None else reason.startswith(expect), reason


def test_unsupported_mixed_dtypes_and_head_dims():
    q, k, v = _qkv()
    assert hopper.unsupported(_call(q, k.half(), v, "relu")) == "q, k and v must share one dtype"
    assert hopper.unsupported(_call(q, k[..., :64], v[..., :64], "relu")) == "q, k and v must share one head dim"


@pytest.mark.parametrize("sequences, walks", [(1, True), (1152, True), (2048, True), (2049, False), (16500, False)])
def test_the_backends_backward_walks_where_it_goes_longest_first(monkeypatch, sequences, walks):
    """The Hopper row's backward is the persistent walk up to 2,048 sequences (where it goes longest first),
    FA4's grid above (plans.backward_walks); the pinned `hopper_persistent` row walks at every size and is no
    candidate of auto's (backends.py)."""
    if importlib.util.find_spec("flash_attn") is None:
        pytest.skip("needs flash-attn-4 (the fa4 extra)")
    from kernels.gdpa import backends
    from kernels.gdpa.bands import WHOLE
    from kernels.gdpa.hopper import launch, persistent_backend

    seen = []

    def backward(call, do, band, out=None, record=None, persistent=False):
        seen.append(persistent)

    monkeypatch.setattr(launch, "backward", backward)
    call = types.SimpleNamespace(batch=sequences)
    hopper.backward(call, None, WHOLE)
    persistent_backend.backward(call, None, WHOLE)
    assert seen == [walks, True]
    assert backends.ROWS["hopper_persistent"].prefer == {} and "bwd" in backends.ROWS["hopper"].prefer


# ------------------------------------------------------------------------------- activation math (torch)
class TorchOps:
    """The primitive ops of hopper/activations.py as torch (float64) code."""

    @staticmethod
    def const(value):
        return value

    @staticmethod
    def fmax(a, b):
        return torch.maximum(a, torch.as_tensor(b, dtype=a.dtype))

    @staticmethod
    def fmin(a, b):
        return torch.minimum(a, torch.as_tensor(b, dtype=a.dtype))

    @staticmethod
    def select(cond, a, b):
        return torch.where(cond, torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64))

    tanh = tanh_approx = staticmethod(torch.tanh)
    erf = staticmethod(torch.erf)
    exp2 = staticmethod(torch.exp2)

    @staticmethod
    def rcp(x):
        return 1.0 / x


def _reference(name, x):
    x = x.detach().clone().requires_grad_(True)
    y = get_activation(name)(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), g


@pytest.mark.parametrize("fold", [True, False], ids=["P'", "P"])
@pytest.mark.parametrize("name", ACTIVATION_NAMES)
@pytest.mark.parametrize(("alpha", "qk"), [(1.0, 1.0), (0.3, 0.7), (2.5, 1.9)])
def test_activation_forward_and_backward_match_torch(name, alpha, qk, fold):
    """forward: act(alpha*s) = out_scale * forward(s); backward: (P', act'(alpha*s)) with qk*act(alpha*s) =
    alpha*qk*p_fold*P' where the activation folds its scale into dV (p_fold), else P' = qk*act(alpha*s)."""
    act = hopper_acts.build(name, TorchOps(), fold)  # fold=False: the fp16 kernels' P = qk*act
    s = torch.linspace(-9.0, 9.0, 4001, dtype=torch.float64) / alpha
    s = s[(s * alpha + 3.0).abs() > 1e-6]  # hardswish's kinks at +-3 have no single derivative
    s = s[(s * alpha - 3.0).abs() > 1e-6]
    ref_v, ref_g = _reference(name, alpha * s)
    consts, out_scale = act.forward_setup(alpha)
    torch.testing.assert_close(out_scale * act.forward(s, consts), ref_v, rtol=1e-9, atol=1e-9)
    p, g = act.backward(s, act.backward_row(act.backward_setup(alpha), qk))
    scale = 1.0 if act.p_fold is None else alpha * qk * act.p_fold
    torch.testing.assert_close(p * scale, qk * ref_v, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(
        torch.broadcast_to(torch.as_tensor(g, dtype=torch.float64), s.shape), ref_g, rtol=1e-9, atol=1e-9
    )


@pytest.mark.parametrize("fold", [True, False], ids=["P'", "P"])
@pytest.mark.parametrize("name", ACTIVATION_NAMES)
def test_masked_scores_contribute_exactly_zero(name, fold):
    """The forward selects -inf to 0; the backward raises -inf to masked_floor (in fp32, as the kernel does),
    where P and dS must be exactly 0, or selects for activations without a floor; rows past a sequence end
    get qk_scale from the kernel like any other (-inf makes them 0)."""
    act = hopper_acts.build(name, TorchOps(), fold)
    consts, _ = act.forward_setup(1.0)
    zero = torch.zeros(3, dtype=torch.float64)
    assert torch.equal(torch.as_tensor(act.forward(zero, consts), dtype=torch.float64), zero)
    if act.masked_floor is None:
        assert name in ("raw", "leaky_relu")
        return
    for alpha in (1e-3, 0.125, 1.0, 30.0):
        for qk in (1e-3, 1.0, 50.0):
            s = torch.full((2,), act.masked_floor, dtype=torch.float32)
            with torch.no_grad():
                p, g = act.backward(
                    s,
                    act.backward_row(
                        act.backward_setup(torch.tensor(alpha, dtype=torch.float32)),
                        torch.tensor(qk, dtype=torch.float32),
                    ),
                )
            assert torch.equal(torch.as_tensor(p).abs(), torch.zeros(2)), (alpha, qk, p)
            assert torch.equal(torch.as_tensor(g).abs(), torch.zeros(2)), (alpha, qk, g)


# ------------------------------------------------------------------------------------------------ GPU
def _gpu_reason():
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    return hopper.unavailable("cuda")


gpu = pytest.mark.gpu
needs_hopper = pytest.mark.skipif(_gpu_reason() is not None, reason=str(_gpu_reason()))
EDGE = [0, 1, 63, 64, 65, 79, 80, 81, 127, 128, 129, 192, 193, 257]


def _batch(q_lengths, kv_lengths, h, hkv, d, dtype, seed):
    from workloads.batch import make_batch

    return make_batch(
        np.asarray(q_lengths), np.asarray(kv_lengths), H=h, Hkv=hkv, D=d, dtype=dtype, device="cuda", seed=seed
    )


def _relerr(got, ref):
    assert torch.isfinite(got).all(), "non-finite values (an element the kernel never wrote stays NaN)"
    return float((got.float() - ref).norm() / ref.norm().clamp_min(1e-30))


# what a poisoned allocation holds: NaN, and in an int32 dQ tile counter a value past dq_first_touch.DQ_STORED (a
# counter the launch failed to zero makes every key tile add onto the NaN instead of waiting for a store that never
# comes)
POISON_COUNT = 0x7FF00000


def _poisoned_empty(*shape, dtype=torch.float32, **kw):
    return torch.full(shape, math.nan if dtype.is_floating_point else POISON_COUNT, dtype=dtype, **kw)


@pytest.fixture
def poisoned(monkeypatch):
    from kernels.gdpa.hopper import accumulators, launch

    # kernels compiled ahead (docs/experiments/hopper_gpu.py --prebuild DIR; the same cases) load instead of
    # compiling on the GPU machine when GDPA_HOPPER_KERNEL_DIR names DIR (kernels/gdpa/hopper/cache.py)
    monkeypatch.setattr(launch, "_empty_like", lambda t: torch.full_like(t, math.nan))
    # the fp32 accumulators and dQ's tile counters: what the launch leaves unwritten must never be read
    monkeypatch.setattr(accumulators, "_empty", _poisoned_empty)


LONG_Q = [0, 1, 63, 65, 159, 160, 161, 500, 513, 640]  # against SHORT_K: max_q >= 2 max_kv
SHORT_K = [0, 5, 64, 128, 129, 1, 200, 256, 80, 81]


@gpu
@needs_hopper
@pytest.mark.parametrize(
    ("activation", "causal", "h", "hkv", "d", "dtype", "alpha", "qk", "long_q"),
    [
        *[(a, False, 4, 4, 128, torch.bfloat16, 0.7, 1.3, False) for a in ACTIVATION_NAMES],
        ("fast_gelu", True, 4, 4, 128, torch.bfloat16, 1.0, 1.0, False),
        ("silu", True, 4, 4, 128, torch.bfloat16, 0.5, 2.0, False),
        ("silu", True, 4, 2, 64, torch.bfloat16, 1.0, 1.0, False),
        ("fast_gelu", False, 4, 4, 64, torch.bfloat16, 1.0, 1.0, False),
        ("hardswish", False, 2, 2, 64, torch.float16, 1.0, 0.5, False),
        ("fast_gelu", False, 4, 4, 128, torch.float16, 1.0, 1.0, False),
        ("relu", True, 4, 4, 128, torch.bfloat16, -0.8, 1.0, False),
        ("fast_gelu", False, 4, 4, 128, torch.bfloat16, 1.0, 1.0, True),
        ("raw", False, 4, 2, 128, torch.bfloat16, 0.6, 1.0, True),
        # dV's scale where P' left it out: GQA's postprocess (p_fold 0.5, and None), alpha = 0 (bf16 P', fp16 P)
        ("fast_gelu", False, 4, 2, 128, torch.bfloat16, 0.7, 1.3, False),
        ("hardswish", False, 4, 2, 128, torch.bfloat16, 1.0, 1.0, False),
        ("fast_gelu", True, 4, 4, 128, torch.bfloat16, 0.0, 1.0, False),
        ("silu", False, 4, 4, 128, torch.float16, 0.0, 1.0, False),
    ],
)
def test_matches_fp32_reference(poisoned, activation, causal, h, hkv, d, dtype, alpha, qk, long_q):
    """Every backward plan (launch.backward_plan) is among these: split 64x128 with paired query blocks
    (head dim 128), fused 128x128 (head dim 64). The backward both ways: the backend's own (the persistent walk,
    longest first, at these batch sizes) and FA4's grid (the backend's above 2,048 sequences)."""
    from kernels.gdpa.bands import WHOLE
    from kernels.gdpa.hopper import launch
    from kernels.reference import reference_outputs
    from kernels.registry import CaseSpec

    q_lengths, kv = (LONG_Q, SHORT_K) if long_q else (EDGE, EDGE if causal else EDGE[::-1])
    batch = _batch(q_lengths, kv, h, hkv, d, dtype, seed=3)
    spec = CaseSpec(mode="bwd", activation=activation, alpha=alpha, qk_scale=qk, causal=causal)
    ref_out, ref_grads = reference_outputs(batch, spec, "gdpa", dtype=torch.float32, grads=True)
    call = _batch_call(batch, batch.max_q, batch.max_kv, activation, alpha, qk, causal)
    record = {}
    out = launch.forward(call, record=record)
    grid = launch.backward(call, batch.dout, persistent=False)  # FA4's grid: the backend's above 2,048 sequences
    grads = hopper.backward(call, batch.dout, WHOLE, record=record)  # the backend's own: the persistent walk here
    tol = 3e-3 if dtype == torch.bfloat16 else 1e-3
    for name, got, ref in zip(("out", "dq", "dk", "dv"), (out, *grads), (ref_out, *ref_grads), strict=True):
        assert _relerr(got, ref) <= tol, name
    for name, got, ref in zip(("dq", "dk", "dv"), grid, ref_grads, strict=True):
        assert _relerr(got, ref) <= tol, ("grid", name)
    assert record["hopper_fwd"]["tile"] and record["hopper_bwd"]["activation"] == activation
    expect = "fused" if d == 64 else "split"
    assert record["hopper_bwd"]["pointwise"] == expect
    assert record["hopper_bwd"]["query_blocks_per_step"] == (2 if expect == "split" else 1)  # bwd.py pair_blocks
    assert record["hopper_bwd"]["scheduler"].endswith("CTAs + longest first"), record["hopper_bwd"]


def _batch_call(batch, max_q, max_kv, activation, alpha, qk, causal):
    from kernels.gdpa.call import GDPACall

    return GDPACall(
        batch.q, batch.k, batch.v, batch.q_offsets, batch.kv_offsets, max_q, max_kv, activation, alpha, qk, causal
    )


@gpu
@needs_hopper
def test_scheduler_hint_batch_and_empty_inputs(poisoned):
    """B > 256 takes the tile-count hint path; zero-length sequences and empty batches are exact zeros."""
    from kernels.gdpa.hopper import launch
    from kernels.reference import reference_outputs
    from kernels.registry import CaseSpec

    rng = np.random.default_rng(0)
    lq, lk = rng.integers(0, 200, 300), rng.integers(0, 200, 300)
    batch = _batch(lq, lk, 4, 4, 128, torch.bfloat16, seed=5)
    spec = CaseSpec(mode="bwd", activation="fast_gelu")
    ref_out, ref_grads = reference_outputs(batch, spec, "gdpa", dtype=torch.float32, grads=True)
    call = _batch_call(batch, batch.max_q, batch.max_kv, "fast_gelu", 1.0, 1.0, False)
    out = launch.forward(call)
    grads = launch.backward(call, batch.dout)
    for got, ref in zip((out, *grads), (ref_out, *ref_grads), strict=True):
        assert _relerr(got, ref) <= 3e-3
    empty = _batch([0, 5], [0, 0], 2, 2, 64, torch.bfloat16, seed=1)  # queries, no keys anywhere
    call = _batch_call(empty, 5, 0, "silu", 1.0, 1.0, False)
    assert torch.equal(launch.forward(call), torch.zeros_like(empty.q))
    dq, dk, dv = launch.backward(call, empty.dout)
    assert torch.equal(dq, torch.zeros_like(dq)) and dk.numel() == dv.numel() == 0


# ------------------------------------------------------------------------------ persistent forward, CPU
_PERSISTENT_PTX = """
import os, sys, pathlib
import cutlass
from kernels.gdpa.hopper import launch
for ctas in (0, 132):
    config = launch.forward_config(128, 1, 1152, True, ctas)
    launch._compile_forward(cutlass.BFloat16, 128, 1, "fast_gelu", False, config)
for ptx in sorted(pathlib.Path(os.environ["CUTE_DSL_DUMP_DIR"]).glob("*.ptx")):
    print(("PERSISTENT " if "Persistent" in ptx.name else "GRID ") + str(ptx))
"""


_TMA_OFFSET = re.compile(r"\[%r\d+\+(\d+)\]")


def _tma_offsets(ptx: str, direction: str) -> set[int]:
    """Shared-memory byte offsets of the TMA copies in `ptx`: `direction` "load" (global to shared: the
    destination) or "store" (shared to global: the source)."""
    kind = "shared::cta.global" if direction == "load" else "global.shared::cta"
    lines = [line for line in ptx.splitlines() if "cp.async.bulk.tensor" in line and kind in line]
    return {int(match) for line in lines for match in _TMA_OFFSET.findall(line)}


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="needs flash-attn-4 (the fa4 extra)")
def test_persistent_forward_stages_o_outside_q_and_releases_q_before_the_epilogue(tmp_path):
    """Cross-compiled for sm_90a (no GPU): FA4's one-tile grid stages O in Q's shared memory (its TMA store
    reads where Q's load wrote); the persistent forward stages O in a buffer of its own, so its consumers keep
    FA4's release of Q before the last key block (no arrive on a barrier between the epilogue's store wait and
    the stride to the next tile) and the next tile's Q lands under this tile's tail."""
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _PERSISTENT_PTX], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    found = dict(line.split(" ", 1) for line in run.stdout.splitlines() if line.startswith(("PERSISTENT", "GRID")))
    grid, persistent = (Path(found[kind]).read_text() for kind in ("GRID", "PERSISTENT"))

    grid_o = _tma_offsets(grid, "store")
    assert grid_o and grid_o <= _tma_offsets(grid, "load")  # FA4: O where Q was loaded
    q_buffer = range(min(grid_o), max(grid_o) + 16384)  # two 16 KB boxes (64 columns of bf16 x 128 rows)
    persistent_o = _tma_offsets(persistent, "store")
    assert persistent_o and not any(offset in q_buffer for offset in persistent_o)
    assert q_buffer.start in _tma_offsets(persistent, "load")  # Q's buffer is where FA4 has it

    tail = persistent[persistent.rindex("cp.async.bulk.wait_group.read") :]
    assert "%nctaid.x" in tail and "mbarrier.arrive" not in tail.split("%nctaid.x", 1)[0]
    # each epilogue entered by every consumer thread together (FA4's epilogue barrier has two counts)
    assert re.search(r"bar\.sync\s+7, 256;", persistent) and not re.search(r"bar\.sync\s+7,", grid)


_PERSISTENT_BWD_PTX = """
import os, sys, pathlib
import cutlass
from kernels.gdpa.hopper import launch
plan = launch.backward_plan(128, False, 2048, 2048)
for ctas in (0, 132):
    launch._compile_backward(cutlass.BFloat16, 128, 1, "fast_gelu", False, plan, True, True, ctas)
for ptx in sorted(pathlib.Path(os.environ["CUTE_DSL_DUMP_DIR"]).glob("*.ptx")):
    print(("PERSISTENT " if "Persistent" in ptx.name else "GRID ") + str(ptx))
"""


@pytest.fixture(scope="module")
def backward_ptx(tmp_path_factory) -> dict:
    """The split backward of head dim 128 (fast_gelu), one-tile grid and persistent, cross-compiled for sm_90a
    (no GPU): {"GRID": ptx path, "PERSISTENT": ptx path}."""
    if importlib.util.find_spec("flash_attn") is None:
        pytest.skip("needs flash-attn-4 (the fa4 extra)")
    dump = tmp_path_factory.mktemp("bwd_ptx")
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": str(dump)}
    run = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _PERSISTENT_BWD_PTX], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return dict(line.split(" ", 1) for line in run.stdout.splitlines() if line.startswith(("PERSISTENT", "GRID")))


def test_persistent_backward_loads_the_next_key_tile_only_after_the_epilogue_stores(backward_ptx):
    """In the persistent backward every dK/dV epilogue waits for its TMA stores to have read shared memory
    (`cp.async.bulk.wait_group.read 0`) and then the MMA threads sync on barrier KV_FREE (256 MMA threads + the
    load warp, both sides waiting: with an arrive, two key tiles without queries in a row could complete a phase
    without the load warp); the load warp syncs on it before it strides by the grid size to its next key tile
    (whose K and V land where the epilogue staged dK and dV). FA4's one-tile grid has neither."""
    from kernels.gdpa.hopper.persistent_bwd import KV_FREE

    found = backward_ptx
    lines = [" ".join(ln.split()) for ln in Path(found["PERSISTENT"]).read_text().splitlines()]
    assert not any(ln.startswith(f"bar.arrive {KV_FREE},") for ln in lines)
    syncs = [i for i, ln in enumerate(lines) if ln == f"bar.sync {KV_FREE}, 288;"]
    assert len(syncs) == 3, syncs  # two epilogue call sites, one load warp
    after_stores = [
        i for i in syncs if any(lines[j].startswith("cp.async.bulk.wait_group.read 0") for j in range(i - 4, i))
    ]
    assert len(after_stores) == 2, [lines[max(0, i - 6) : i + 1] for i in syncs]  # the epilogues'
    load = next(i for i in syncs if i not in after_stores)
    assert any("%nctaid.x" in ln for ln in lines[load : load + 4])  # then the stride to the next tile
    grid = Path(found["GRID"]).read_text()
    assert f"bar.arrive {KV_FREE}," not in grid and f"{KV_FREE}, 288" not in grid and "%nctaid.x" not in grid


def test_the_split_backward_keeps_act_prime_in_fp32(backward_ptx):
    """G = act'(alpha*s) stays in fp32 from the pointwise under the dP GEMM to dS = G * dP (2026-12-05): packed to
    fp16 pairs it saved no registers (ptxas sank the pack below the wgmma wait) and cost 16 packs and 32 unpacks
    between the dP and dV GEMMs. So no fp16 conversion either way; P and dS are still packed to bf16 pairs."""
    for kind in ("GRID", "PERSISTENT"):
        ptx = Path(backward_ptx[kind]).read_text()
        assert "cvt.f32.f16" not in ptx and "cvt.rn.f16x2.f32" not in ptx, kind
        assert ptx.count("cvt.rn.bf16x2.f32") >= 32, kind  # P and dS: 16 pairs each per thread and block


@gpu
@needs_hopper
def test_persistent_backward_equals_the_one_tile_grid_and_keeps_other_bands(poisoned):
    """The persistent backward computes what FA4's one-key-tile-per-CTA grid computes over the whole batch and
    over bands: dK and dV bit for bit (each key tile's are one CTA's, in one order), dQ to fp32 rounding (its
    tiles reach the accumulator by reduce-adds in another order); a banded launch writes its band's rows only.
    Also GQA (dK/dV through fp32 reduce-adds) and causal silu, both to fp32 rounding. It walks the key tiles
    longest queries first (persistent_bwd.persistent_backward_scheduler; the record says so), so the order and
    the place index FA4's decoder reads reach every key tile."""
    from kernels.gdpa.bands import Band
    from kernels.gdpa.hopper import launch
    from kernels.gdpa.launch import record_name

    rng = np.random.default_rng(3)
    lengths = np.concatenate([rng.integers(0, 130, 600), rng.integers(500, 1500, 40), [0, 1, 127, 128, 129, 512]])
    rng.shuffle(lengths)
    for hkv, act, causal in ((4, "fast_gelu", False), (2, "gelu", False), (4, "silu", True)):
        batch = _batch(lengths, lengths, 4, hkv, 128, torch.bfloat16, seed=8)
        call = _batch_call(batch, batch.max_q, batch.max_q, act, 0.8, 1.2, causal)
        call = call.with_tensors(kv_offsets=call.q_offsets)
        for band in (Band(), Band(512), Band(0, 128)):
            outs, record = [], {}
            for persistent in (False, True):
                out = tuple(torch.full_like(t, float("nan")) for t in (batch.q, batch.k, batch.v))
                outs.append(launch.backward(call, batch.dout, band, out=out, persistent=persistent, record=record))
            assert "longest first" in record[record_name("hopper_bwd", band)]["scheduler"]  # 646 sequences
            rows = torch.repeat_interleave(torch.as_tensor(lengths), torch.as_tensor(lengths)).to(batch.q.device)
            inside = (rows >= band.lo) & (rows < band.hi_arg)
            for name, grid, pers in zip(("dq", "dk", "dv"), *outs, strict=True):
                assert not torch.isnan(pers[inside]).any() and torch.isnan(pers[~inside]).all(), (name, band)
                if name != "dq" and hkv == 4:
                    assert torch.equal(grid[inside], pers[inside]), (name, band, act)
                else:
                    assert _relerr(pers[inside].float(), grid[inside].float()) <= 1e-2, (name, band, act)


@gpu
@needs_hopper
def test_persistent_forward_equals_the_one_tile_grid_and_keeps_other_bands(poisoned):
    """The persistent grid computes what FA4's one-tile-per-CTA grid computes, bit for bit, over the whole batch
    and over one band; a banded launch writes the band's rows only (the rest stay as they were). It walks the
    sequences longest first (longest_first.py; the record says so): a shuffled self-attention batch of 646
    sequences (the tile-count hint) and a cross-attention GQA batch of 200 (no hint in batch order; longest
    first always passes one), so the order FA4's decoder reads through `virtual_batch_idx` reaches every tile."""
    from kernels.gdpa.bands import Band
    from kernels.gdpa.hopper import launch
    from kernels.gdpa.launch import record_name

    rng = np.random.default_rng(2)
    lengths = np.concatenate([rng.integers(0, 130, 600), rng.integers(500, 1500, 40), [0, 1, 127, 128, 129, 512]])
    rng.shuffle(lengths)
    batch = _batch(lengths, lengths, 4, 4, 128, torch.bfloat16, seed=7)
    call = _batch_call(batch, batch.max_q, batch.max_q, "fast_gelu", 0.8, 1.2, False)
    self_attention = call.with_tensors(kv_offsets=call.q_offsets), lengths  # one offsets tensor
    lq, lk = rng.integers(0, 700, 200), rng.integers(0, 900, 200)
    batch = _batch(lq, lk, 4, 2, 128, torch.bfloat16, seed=8)
    cross_gqa = _batch_call(batch, batch.max_q, batch.max_kv, "silu", 1.0, 0.5, False), np.minimum(lq, lk)
    for call, band_lengths in (self_attention, cross_gqa):
        for band in (Band(), Band(512), Band(0, 128), Band(1 << 20)):
            record = {}
            grid = launch.forward(call, band, persistent=False)
            persistent = launch.forward(call, band, persistent=True, record=record)
            assert "longest first" in record[record_name("hopper_fwd", band)]["scheduler"]
            assert torch.equal(torch.isnan(grid), torch.isnan(persistent)), band
            assert torch.equal(torch.nan_to_num(grid), torch.nan_to_num(persistent)), band
            q_lengths = call.q_offsets.diff().long().cpu()
            rows = torch.repeat_interleave(torch.as_tensor(band_lengths), q_lengths).to(grid.device)
            inside = (rows >= band.lo) & (rows < band.hi_arg)
            assert not torch.isnan(persistent[inside]).any() and torch.isnan(persistent[~inside]).all(), band


@gpu
@needs_hopper
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), [(2, 2, 64), (2, 2, 128), (4, 1, 128), (6, 2, 128)])
def test_persistent_forward_with_many_short_tiles_a_cta_equals_the_grid_every_time(poisoned, heads, kv_heads, head_dim):
    """Thousands of one- and two-block tiles, ~30 a CTA back to back: each tile's Q lands while the tile before
    stages O (in its own buffer) and stores it. Three launches, each bit for bit FA4's one-tile grid: a race
    between a tile's O and the next tile's Q or O would show as a difference in some launch. GQA packs 4 heads
    a tile (O by TMA) and 3 (128 rows do not divide by 3: O by plain copies, FA4's other epilogue)."""
    from kernels.gdpa.hopper import launch

    lengths = np.random.default_rng(11).integers(1, 300, 2000)
    batch = _batch(lengths, lengths, heads, kv_heads, head_dim, torch.bfloat16, seed=3)
    call = _batch_call(batch, batch.max_q, batch.max_q, "silu", 1.0, 1.0, False)
    call = call.with_tensors(kv_offsets=call.q_offsets)
    grid = launch.forward(call, persistent=False)
    assert not torch.isnan(grid).any()
    for _ in range(3):
        assert torch.equal(launch.forward(call, persistent=True), grid)


# ------------------------------------------------------------------------------ the backward's accumulators
def test_a_banded_backward_zeroes_its_sequences_accumulator_tiles_only():
    """Under Triton's interpreter (CPU, conftest.py): in FA4's padded varlen layout (sequence b from row
    (offset_b + b·tile) // tile · tile), each band sequence's first ceil(used_b / tile) tiles are zeroed for
    every head, nothing else is written (a NaN-filled buffer keeps its NaNs there); without a band the whole
    buffer is zeros."""
    from kernels.gdpa.hopper import accumulators

    lengths = torch.tensor([0, 5, 64, 65, 130, 3, 0, 200])
    used = torch.where((lengths >= 5) & (lengths < 131), lengths, 0).to(torch.int32)  # band [5, 131)
    offsets = torch.nn.functional.pad(torch.cumsum(lengths, 0), (1, 0)).to(torch.int32)
    tile, hdim, heads = 64, 32, 3
    rows = (int(lengths.sum()) + (len(lengths) + 1) * tile - 1) // tile * tile
    empty = accumulators._empty
    accumulators._empty = _poisoned_empty  # on a GPU the memory is what it is; here NaN shows what is written
    try:
        got = accumulators.zeros_for_band(heads, rows, hdim, offsets, used, tile, int(lengths.max()))
    finally:
        accumulators._empty = empty
    expect = torch.full((heads, rows * hdim), float("nan"))
    for b, n in enumerate(used.tolist()):
        start = (int(offsets[b]) + b * tile) // tile * tile * hdim
        expect[:, start : start + (n + tile - 1) // tile * tile * hdim] = 0.0
    assert torch.equal(torch.isnan(got), torch.isnan(expect)) and not got[~torch.isnan(expect)].any()
    whole = accumulators.zeros_for_band(heads, rows, hdim, offsets, None, tile, int(lengths.max()))
    assert whole.shape == (heads, rows * hdim) and not whole.any()


@pytest.mark.parametrize(("banded", "causal"), [(False, False), (True, False), (False, True)],
                         ids=["whole batch", "band [5, 131)", "causal"])  # fmt: skip
def test_dq_first_touch_zeroes_the_tile_counters_of_its_sequences_and_the_dq_no_key_reaches(banded, causal):
    """Under Triton's interpreter: dQ's accumulator is left unwritten except the tiles no key tile reaches — all of a
    launched sequence with queries and no keys; causal, the query blocks before FA4's first block of key tile 0,
    (Lq - Lk) // tile (a causal call that is not self-attention: the op checks that only with validate="full") —
    there its dQ is 0; the int32 counters of every launched sequence's ceil(Lq / tile) tiles, per head, are
    zeroed; nothing else is written (poisoned allocations keep their poison)."""
    from kernels.gdpa.hopper import accumulators

    lq = torch.tensor([0, 5, 64, 65, 130, 3, 0, 200, 70, 9])
    lk = torch.tensor([0, 5, 0, 65, 1, 0, 7, 0, 64, 300])
    q_off, k_off = (torch.nn.functional.pad(torch.cumsum(n, 0), (1, 0)).to(torch.int32) for n in (lq, lk))
    used = (None, None)
    if banded:  # FA4's seqused of band [5, 131) of min(Lq, Lk): a sequence outside it has 0 rows on both sides
        key = torch.minimum(lq, lk)
        inside = (key >= 5) & (key < 131)
        used = tuple(torch.where(inside, n, 0).to(torch.int32) for n in (lq, lk))
    tile, hdim, heads = 64, 32, 3
    rows = (int(lq.sum()) + (len(lq) + 1) * tile - 1) // tile * tile
    empty = accumulators._empty
    accumulators._empty = _poisoned_empty
    try:
        accum, counts = accumulators.first_touch_dq(heads, rows, hdim, q_off, k_off, used, tile, causal)
    finally:
        accumulators._empty = empty
    assert accum.shape == (heads, rows * hdim) and counts.shape == (heads, rows // tile)
    expect_accum = torch.full_like(accum, math.nan)
    expect_counts = torch.full_like(counts, POISON_COUNT)
    for b in range(len(lq)):
        n_q = int(used[0][b]) if banded else int(lq[b])
        n_k = int(used[1][b]) if banded else int(lk[b])
        first = (int(q_off[b]) + b * tile) // tile
        tiles = (n_q + tile - 1) // tile
        expect_counts[:, first : first + tiles] = 0
        unvisited = tiles if not n_k else min(max((n_q - n_k) // tile, 0), tiles) if causal else 0
        expect_accum[:, first * tile * hdim : (first + unvisited) * tile * hdim] = 0.0
    assert torch.equal(counts, expect_counts)
    assert torch.equal(torch.isnan(accum), torch.isnan(expect_accum)) and not accum[~torch.isnan(accum)].any()
    assert not banded or (expect_counts == 0).any()  # the band holds launched sequences
    assert not causal or (~torch.isnan(expect_accum)).sum() > (lq[lk == 0].sum() * heads * hdim)  # 130 vs 1


def test_the_dq_warp_stores_first_and_adds_after_the_store_landed(backward_ptx):
    """The backward's dQ warp (dq_first_touch.py `_dQaccum_first_touch`), in the PTX of the one-tile grid and the
    persistent walk: one `atom.add` on the query tile's counter; the first key tile copies its dQ chunks with plain bulk
    stores, waits for them to complete in global memory (`cp.async.bulk.wait_group 0`, not `.read`) and only then
    releases the DQ_STORED mark (`red.release`); the others spin on an acquire load before their reduce-adds."""
    for kind in ("GRID", "PERSISTENT"):
        lines = [" ".join(ln.split()) for ln in Path(backward_ptx[kind]).read_text().splitlines()]

        def at(prefix, lines=lines):
            return [i for i, ln in enumerate(lines) if ln.startswith(prefix)]

        atoms, stores = at("atom.relaxed.gpu.global.add.s32"), at("cp.async.bulk.global.shared::cta.bulk_group")
        adds, acquires = at("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32"), at("ld.global.acquire.gpu")
        releases = at("red.release.gpu.global.add.s32")
        assert len(atoms) == 1 and len(releases) == 1 and stores and adds and acquires, kind
        assert len(stores) == len(adds), kind  # each dQ chunk either way
        full_waits = [i for i in at("cp.async.bulk.wait_group ") if lines[i] == "cp.async.bulk.wait_group 0;"]
        assert any(max(stores) < i < releases[0] for i in full_waits), kind
        assert atoms[0] < min(stores) and min(acquires) < min(adds), kind
        # the counters were zeroed by the launch before (a programmatic dependent: FA4's use_pdl): this warp waits
        # for that grid before its first add; and a proxy fence between the acquire and the async-proxy reduce-add
        assert any(i < atoms[0] for i in at("griddepcontrol.wait")), kind
        fences = at("fence.proxy.async.global")
        assert fences and all(any(max(acquires) < f < a for f in fences) for a in adds if a > max(acquires)), kind


@gpu
@needs_hopper
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
def test_key_tiles_racing_for_a_query_tile_each_add_exactly_once(poisoned, persistent):
    """Cross-attention with up to 40 key tiles per query tile (keys to 5000), so the first-touch protocol runs under
    contention: every dQ matches the fp32 reference (a key tile lost to a store landing after an add misses one
    40th of the sum; an add onto the poisoned accumulator is NaN) — five calls, and a banded launch keeps the
    other band's rows. GQA, queries without keys, and sequences of one query tile among them."""
    from kernels.gdpa.bands import Band
    from kernels.gdpa.hopper import launch
    from kernels.reference import reference_outputs
    from kernels.registry import CaseSpec

    rng = np.random.default_rng(11)
    lq = np.concatenate([rng.integers(1, 300, 60), [0, 1, 64, 65, 129, 200]])
    lk = np.concatenate([rng.integers(2000, 5000, 60), [4000, 0, 5000, 128, 0, 1]])
    for hkv in (4, 2):
        batch = _batch(lq, lk, 4, hkv, 128, torch.bfloat16, seed=12 + hkv)
        spec = CaseSpec(mode="bwd", activation="fast_gelu", alpha=0.9, qk_scale=1.1)
        _, ref_grads = reference_outputs(batch, spec, "gdpa", dtype=torch.float32, grads=True)
        call = _batch_call(batch, batch.max_q, batch.max_kv, "fast_gelu", 0.9, 1.1, False)
        seq = torch.repeat_interleave(torch.arange(len(lq)), torch.as_tensor(lq)).to(batch.q.device)
        for _ in range(5):
            grads = launch.backward(call, batch.dout, persistent=persistent)
            for name, got, ref in zip(("dq", "dk", "dv"), grads, ref_grads, strict=True):
                assert _relerr(got, ref) <= 3e-3, (name, hkv)
            # per sequence: a lost key tile is ~1/40 of one sequence's dQ, diluted to noise over the whole batch
            dq, ref_dq = grads[0].float(), ref_grads[0]
            worst = max(_relerr(dq[seq == b], ref_dq[seq == b]) for b in range(len(lq)) if lq[b] and lk[b])
            assert worst <= 1e-2, (worst, hkv)
        band = Band(100)
        out = tuple(torch.full_like(t, math.nan) for t in (batch.q, batch.k, batch.v))
        dq = launch.backward(call, batch.dout, band, out=out, persistent=persistent)[0]
        rows = torch.repeat_interleave(torch.as_tensor(np.minimum(lq, lk)), torch.as_tensor(lq)).to(dq.device)
        inside = rows >= band.lo
        assert torch.isnan(dq[~inside]).all() and _relerr(dq[inside].float(), ref_grads[0][inside]) <= 3e-3


@gpu
@needs_hopper
def test_the_hopper_backward_is_the_persistent_walk_and_the_pinned_row_runs_the_same(poisoned):
    """Through the public op at 646 sequences: `backend="hopper"` runs the persistent walk longest first
    (plans.backward_walks), and `backend="hopper_persistent"` (persistent_backend.py, pinned only) the same kernel
    — forward, dK and dV bit for bit, dQ to fp32 rounding (its adds land in any order) — and auto no longer times
    that row in either pass."""
    from kernels.gdpa import GDPAOptions, choice, gdpa
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.plan import candidates, label

    rng = np.random.default_rng(3)  # the batch of the persistent tests above: their kernels, compiled ahead
    lengths = np.concatenate([rng.integers(0, 130, 600), rng.integers(500, 1500, 40), [0, 1, 127, 128, 129, 512]])
    rng.shuffle(lengths)
    batch = _batch(lengths, lengths, 4, 4, 128, torch.bfloat16, seed=9).with_grad()
    runs = {}
    for backend in ("hopper", "hopper_persistent"):
        record = {}
        out = gdpa(batch.q, batch.k, batch.v, batch.q_offsets, batch.q_offsets, batch.max_q, batch.max_kv,
                   options=GDPAOptions(backend=backend), record=record)  # fmt: skip
        runs[backend] = (out.detach(), torch.autograd.grad(out, (batch.q, batch.k, batch.v), batch.dout), record)
    (out, (dq, dk, dv), record), (p_out, (p_dq, p_dk, p_dv), p_record) = runs["hopper"], runs["hopper_persistent"]
    assert p_record["dispatch"]["bwd"]["backend"] == "hopper_persistent", p_record["dispatch"]
    for r in (record, p_record):
        assert r["hopper_bwd"]["scheduler"].endswith("CTAs + longest first"), r["hopper_bwd"]
    assert torch.equal(out, p_out) and torch.equal(dk, p_dk) and torch.equal(dv, p_dv)
    assert _relerr(p_dq.float(), dq.float()) <= 1e-2
    call = GDPACall(batch.q, batch.k, batch.v, batch.q_offsets, batch.q_offsets, batch.max_q, batch.max_kv,
                    "fast_gelu", 1.0, 1.0, False)  # fmt: skip
    choice.forget()
    for mode in ("fwd", "bwd"):
        assert "hopper_persistent" not in [label(c) for c in candidates(mode, call, GDPAOptions())]
