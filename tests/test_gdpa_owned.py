"""The owned backward (kernels/gdpa/owned*.py, issue 30) against the exact reference.

CPU: the Triton interpreter (its tiles are 16 x 16: launch.INTERPRETER_TILES), fp32/fp16, sequences of 1–4 key
blocks so a query block's dQ is stored by its first key block, read and added by the middle ones and written by
its last (causal: the block holding its last row), outputs NaN-poisoned so an unwritten row fails, OWNED_ROWS
shrunk to 40 so a band's longer sequences reach the split kernels. GPU (`-m gpu`): bf16, autotuned, the shapes
where the dQ accumulator costs the Hopper backward most.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_gdpa_packed import compare

from kernels.activations import ACTIVATION_NAMES
from kernels.gdpa import GDPAOptions, backends, owned
from kernels.gdpa.bands import Band
from kernels.gdpa.call import GDPACall
from kernels.gdpa.launch import poisoned_outputs
from kernels.gdpa.owned_bwd import OWNED_CONFIGS
from kernels.gdpa.plan import candidates, label
from workloads import make_batch

OWNED = GDPAOptions(backend="owned")
# 0 and 1 tokens, one key block exactly (16), one block and a row (17), three blocks and a row (49), 40 (the
# shrunk edge) and 41 (over it: the split kernels)
EDGES = [5, 0, 16, 17, 3, 49, 1, 40, 41, 33]


@pytest.fixture
def small_edge(monkeypatch):
    monkeypatch.setattr(owned, "OWNED_ROWS", 40)
    with poisoned_outputs():
        yield


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_owned_matches_the_reference_across_key_blocks(small_edge, causal):
    record = {}
    errs = compare(EDGES, causal=causal, options=OWNED, record=record)
    assert max(errs) < 1e-5, errs
    # the band's short sequences on the owned kernel, the rest on the split ones; the forward is Triton's
    assert record["dispatch"]["bwd"]["backend"] == "owned"
    assert {"owned_bwd [0, 41)", "dkdv [41, inf)", "dq [41, inf)", "fwd"} <= set(record)
    assert record["owned_bwd [0, 41)"]["grid"] == [len(EDGES) * 2]  # sequences x KV heads


@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_every_activation(small_edge, act):
    causal = ACTIVATION_NAMES.index(act) % 2 == 1
    errs = compare([5, 0, 33, 3, 17, 1, 40], causal=causal, act=act, options=OWNED)
    assert max(errs) < 1e-5, (act, causal, errs)


def test_cross_attention_gqa_fp16_and_empty_partners(small_edge):
    """Queries and keys with their own offsets (owned whatever their lengths), a sequence with no keys (its dQ is
    zero though no key block runs) and one with no queries (dK, dV zero), 4 query heads per KV head, fp16."""
    q_len, kv_len = [5, 0, 37, 3, 16, 2, 70], [50, 9, 0, 6, 33, 15, 1]
    errs = compare(q_len, kv_len, H=8, Hkv=2, D=32, dtype=torch.float16, act="silu", alpha=0.5, qk_scale=0.25,
                   options=OWNED)  # fmt: skip
    assert max(errs) < 5e-3, errs


def test_a_scratch_full_of_garbage_changes_nothing(small_edge, monkeypatch):
    """The dQ scratch is never zeroed: every row a key block reads was stored by the block before it. Filled with
    NaN instead of left uninitialised, the gradients must not change."""
    real_empty = torch.empty
    monkeypatch.setattr(
        owned.owned_bwd.torch, "empty", lambda *a, **k: real_empty(*a, **k).fill_(float("nan"))
    )  # fmt: skip
    errs = compare(EDGES, causal=True, options=OWNED, act="gelu", alpha=-0.7)
    assert max(errs) < 1e-5, errs


def _call(lengths, max_len):
    b = make_batch(lengths, lengths, H=2, D=16, dtype=torch.float32)
    return GDPACall(b.q, b.k, b.v, b.q_offsets, b.q_offsets, max_len, max_len, "fast_gelu", 1.0, 1.0, False)


def test_the_backend_splits_at_its_edge_and_auto_times_it_for_the_backward_only():
    call = _call([5, 3, 9], 2048)
    edge = owned.OWNED_ROWS + 1
    assert owned.split(call, Band(0)) == (Band(0, edge), Band(edge))
    assert owned.split(call, Band(100, 700)) == (Band(100, edge), Band(edge, 700))
    assert owned.split(call, Band(600)) == (None, Band(600))
    assert owned.split(_call([5, 3, 9], 300), Band(0)) == (Band(0, edge), None)  # nothing reaches the rest
    assert "owned" in [label(c) for c in candidates("bwd", call, GDPAOptions())]
    assert "owned" not in [label(c) for c in candidates("fwd", call, GDPAOptions())]
    assert backends.ROWS["owned"].prefer == {"bwd": ()}  # never the table's pick before it is measured


COMPILE = """
import sys
from packed_compile import compile_one, signature
from kernels.gdpa import owned_bwd

def owned_signature(kernel, dtype, constexprs):
    sig = signature(kernel, dtype, constexprs)
    sig["DQ_PART"] = "*fp32"  # the fp32 scratch; everything else as the packed kernels'
    return sig

causal = sys.argv[1] == "causal"
for m, n, w, s in owned_bwd.OWNED_CONFIGS:
    c = dict(HKV=4, GROUPS=1, D=128, BLOCK_M=m, BLOCK_N=n, ACT="silu" if causal else "fast_gelu", HW_TANH=True,
             CAUSAL=causal, PRECISION="tf32")
    print(m, n, w, s, compile_one(owned_bwd.owned_bwd_kernel, "bf16", c, w, s), flush=True)
"""


@pytest.mark.parametrize("causal", ["full", "causal"])
def test_every_config_compiles_for_sm90_within_its_registers(tmp_path, monkeypatch, causal):
    """The interpreter runs Python, not the compiler: each shipped config is cross-compiled for sm90 here (no GPU,
    a fresh interpreter without TRITON_INTERPRET, its own cache) and ptxas's registers and spills read back, so a
    kernel that does not build, or a config that spills past what owned_bwd.py says of it, fails on the CPU."""
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join([str(root), str(root / "docs/experiments")]))
    (tmp_path / "compile_owned.py").write_text(COMPILE)
    proc = subprocess.run([sys.executable, str(tmp_path / "compile_owned.py"), causal], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if " regs, spills " in line]
    assert proc.returncode == 0 and len(lines) == len(OWNED_CONFIGS), proc.stdout + proc.stderr[-3000:]
    for line in lines:
        spilled = int(line.split("spills ")[1].split("/")[0])
        assert spilled <= 160, line  # 132 B at most today (64x64/8w, fast_gelu); 432 B got 64x128/8w dropped


# ----------------------------------------------------------------------------------------------- GPU


def _gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.mark.gpu
@pytest.mark.parametrize("act", ["fast_gelu", "silu"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_bf16_owned_matches_the_reference(act, causal):
    """Autotuned, bf16, head dim 128: lengths across 128-key blocks (the shipped configs' largest), GQA."""
    _gpu()
    with poisoned_outputs():
        errs = compare([0, 1, 127, 128, 129, 256, 300, 511, 512, 513, 64, 700], H=4, Hkv=2, D=128,
                       dtype=torch.bfloat16, act=act, causal=causal, options=OWNED, device="cuda")  # fmt: skip
    assert max(errs) < 3e-3, errs


@pytest.mark.gpu
def test_gpu_bf16_set1_cross_attention_short_queries():
    """Meta's set 1 shape at fill 0.5 (keys 256, queries up to 256): where the Hopper backward's dQ accumulator
    costs 21% of the call (kernels/gdpa/PERF.md)."""
    _gpu()
    g = torch.Generator().manual_seed(0)
    q_len = torch.randint(0, 257, (64,), generator=g).tolist()
    with poisoned_outputs():
        errs = compare(q_len, [256] * 64, H=4, Hkv=4, D=128, dtype=torch.bfloat16, options=OWNED, device="cuda")
    assert max(errs) < 3e-3, errs
