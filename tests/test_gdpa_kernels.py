"""GDPA Triton kernels against the exact reference.

CPU: the Triton interpreter (TRITON_INTERPRET=1, set by conftest), fp32/fp16 — the interpreter's bf16
tl.dot is wrong in triton 3.6 — tiny jagged batches with zero-length and length-1 sequences, GQA,
alpha/qk_scale != 1, every activation, causal and not. Outputs are poisoned with NaN before each call,
so an element the kernel forgets to write fails the comparison. GPU (`-m gpu`): bf16 at the peer shapes.
"""
import math

import numpy as np
import pytest
import torch

import kernels.gdpa.interface as gi
from kernels.activations import ACTIVATION_NAMES
from kernels.gdpa import gdpa
from kernels.reference import reference_outputs
from kernels.registry import CaseSpec
from workloads import make_batch

CPU = not torch.cuda.is_available()


@pytest.fixture
def poisoned(monkeypatch):
    monkeypatch.setattr(gi, "_empty_like", lambda t: torch.full_like(t, float("nan")))


BWD_IMPLS = list(gi.BWD_IMPLS)  # split dQ kernel, pointer atomics, TMA reductions (pointer on CPU)


def rel(a, b):
    a, b = a.double(), b.double()
    e = ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
    return e if math.isfinite(e) else math.inf  # max() skips a NaN that is not first: make it the worst


def run_and_compare(q_len, kv_len, *, H=4, Hkv=2, D=16, dtype=torch.float32, act="fast_gelu", alpha=0.7,
                    qk_scale=1.3, causal=False, seed=None, device="cpu"):
    seed = np.random.SeedSequence().entropy % 2**31 if seed is None else seed  # fresh inputs each case
    b = make_batch(q_len, kv_len, H=H, Hkv=Hkv, D=D, dtype=dtype, device=device, seed=seed)
    bg = b.with_grad()
    out = gdpa(bg.q, bg.k, bg.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, activation=act,
               alpha=alpha, qk_scale=qk_scale, causal=causal)
    grads = torch.autograd.grad(out, (bg.q, bg.k, bg.v), b.dout)
    spec = CaseSpec(activation=act, alpha=alpha, qk_scale=qk_scale, causal=causal)
    ref, rgrads = reference_outputs(b, spec, grads=True, dtype=torch.float64)
    return [rel(out, ref)] + [rel(g, r) for g, r in zip(grads, rgrads)], seed


Q_LEN = [5, 0, 17, 33, 1, 9]
KV_LEN = [7, 3, 0, 40, 1, 16]


@pytest.mark.parametrize("impl", ["atomic"])
@pytest.mark.parametrize("act,causal", [("fast_gelu", False), ("fast_silu", True), ("relu", False)])
def test_atomic_dq_backward_matches_reference(poisoned, monkeypatch, impl, act, causal):
    """The 5-GEMM backward (dQ added into an fp32 accumulator from the dK/dV kernel), GQA, empty rows."""
    monkeypatch.setenv("GDPA_BWD_IMPL", impl)
    kv = Q_LEN if causal else KV_LEN
    errs, seed = run_and_compare(Q_LEN, kv, act=act, causal=causal)
    assert max(errs) < 1e-5, f"seed {seed}: out/dq/dk/dv rel errors {errs}"


@pytest.mark.parametrize("act,causal", [("fast_gelu", False), ("silu", True), ("relu_square", False)])
def test_software_pipelined_forward_matches_reference(poisoned, monkeypatch, act, causal):
    """GDPA_FWD_PIPE=1: S of the next key tile computed before this tile's activation (a tune variant)."""
    monkeypatch.setenv("GDPA_FWD_PIPE", "1")
    q_len = [5, 0, 17, 33, 1, 48]  # 0, 1, 2 and 3 whole 16-key tiles, plus tails
    kv = q_len if causal else [7, 3, 0, 40, 1, 64]
    errs, seed = run_and_compare(q_len, kv, act=act, causal=causal)
    assert max(errs) < 1e-5, f"seed {seed}: out/dq/dk/dv rel errors {errs}"


SKEWED = [3, 0, 1, 200, 2, 0, 3, 1, 2, 3, 1, 2]  # one long history among short ones, and empties
SKEWED_SMALL = [3, 0, 1, 70, 2, 0, 3, 1, 2, 3, 1, 2]  # same shape, cheaper in the interpreter


@pytest.mark.parametrize("schedule", ["grid", "compact"])
@pytest.mark.parametrize("causal,tiles", [(False, (16, 16)), (True, (16, 16)), (False, (16, 32)),
                                          (True, (32, 16))])
def test_compact_tile_schedule_matches_reference(poisoned, monkeypatch, schedule, causal, tiles):
    """Both launch schedules (kernels/gdpa/schedule.py) in forward, dK/dV and dQ, on the small jagged
    batch and on a skewed one whose compact grid has spare programs; every output element checked.
    Unequal BLOCK_M / BLOCK_N tell the query-tiled kernels' schedules from the key-tiled dK/dV one."""
    from kernels.gdpa import bwd as gbwd, fwd as gfwd
    monkeypatch.setenv("GDPA_SCHEDULE", schedule)
    for mod in (gfwd, gbwd):
        monkeypatch.setattr(mod, "INTERPRET_CONFIG", (*tiles, 4, 1))
    for q_len, kv_len in ((Q_LEN, Q_LEN if causal else KV_LEN), (SKEWED_SMALL, SKEWED_SMALL)):
        errs, seed = run_and_compare(q_len, kv_len, act="fast_gelu", causal=causal)
        assert max(errs) < 1e-4, (schedule, q_len, errs, seed)


def test_schedule_choice_follows_the_length_skew(monkeypatch):
    from kernels.gdpa.schedule import TileSchedule
    offsets = lambda lengths: torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
    assert not TileSchedule(offsets(SKEWED), sum(SKEWED), max(SKEWED), heads=4).compact  # default: grid
    monkeypatch.setenv("GDPA_SCHEDULE", "auto")
    skewed = TileSchedule(offsets(SKEWED), sum(SKEWED), max(SKEWED), heads=4)
    uniform = TileSchedule(offsets([200] * 12), 2400, 200, heads=4)
    assert skewed.compact and not uniform.compact
    assert skewed.grid(16) == ((sum(SKEWED) // 16 + len(SKEWED)) * 4,)
    assert skewed.tile_offsets.tolist() == [0, 1, 1, 2, 15, 16, 16, 17, 18, 19, 20, 21, 22]
    assert uniform.grid(16) == (13, 48)
    monkeypatch.setenv("GDPA_SCHEDULE", "persistent")
    with pytest.raises(ValueError, match="GDPA_SCHEDULE"):
        TileSchedule(offsets(SKEWED), sum(SKEWED), max(SKEWED), heads=4)


def test_unknown_backward_impl_is_rejected(monkeypatch):
    monkeypatch.setenv("GDPA_BWD_IMPL", "fastest")
    with pytest.raises(ValueError, match="GDPA_BWD_IMPL='fastest'; allowed: split, atomic, atomic_tma"):
        run_and_compare([3], [3])


@pytest.mark.parametrize("act", ACTIVATION_NAMES)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_grads_every_activation(poisoned, act, causal):
    kv = Q_LEN if causal else KV_LEN  # causal is self-attention
    errs, seed = run_and_compare(Q_LEN, kv, act=act, causal=causal)
    assert max(errs) < 1e-5, f"seed {seed}: out/dq/dk/dv rel errors {errs}"


def test_fp16_mha_and_nonpow2_lengths(poisoned):
    errs, seed = run_and_compare([31, 2, 19], [23, 45, 1], H=2, Hkv=2, D=32, dtype=torch.float16,
                                 act="silu", alpha=0.5, qk_scale=0.25)
    assert max(errs) < 5e-3, f"seed {seed}: {errs}"


def test_gqa_four_query_heads_per_kv_head(poisoned):
    errs, seed = run_and_compare([12, 20], [20, 9], H=8, Hkv=2, act="gelu")
    assert max(errs) < 1e-5, f"seed {seed}: {errs}"


def test_all_sequences_empty_and_empty_batch():
    b = make_batch([0, 0], [3, 0], H=2, D=16, dtype=torch.float32)
    out = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, 0, 3)
    assert out.shape == (0, 2, 16)


def test_keys_past_sequence_end_are_never_read(poisoned):
    """Huge values in the *next* sequence's keys must not leak into this one (masked loads)."""
    b = make_batch([6, 6], [5, 6], H=2, D=16, dtype=torch.float32, seed=3)
    k, v = b.k.clone(), b.v.clone()
    k[5:], v[5:] = 1e4, float("nan")  # sequence 1's keys: poison for sequence 0's last tile
    out = gdpa(b.q, k, v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, activation="raw")
    spec = CaseSpec(activation="raw")
    b.k, b.v = k, v
    ref, _ = reference_outputs(b, spec, seqs=[0], dtype=torch.float64)
    assert torch.isfinite(out[:6]).all()
    assert rel(out[:6], ref) < 1e-6


def test_zero_length_partner_gets_zero_gradient(poisoned):
    """dK/dV rows of a sequence with no queries (and dQ rows with no keys) are written as zeros."""
    b = make_batch([0, 4, 3], [5, 0, 2], H=2, D=16, dtype=torch.float32, seed=5).with_grad()
    out = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv)
    dq, dk, dv = torch.autograd.grad(out, (b.q, b.k, b.v), torch.ones_like(out))
    assert torch.equal(dk[:5], torch.zeros_like(dk[:5])) and torch.equal(dv[:5], torch.zeros_like(dv[:5]))
    assert torch.equal(dq[:4], torch.zeros_like(dq[:4]))
    assert torch.equal(out[:4], torch.zeros_like(out[:4]))


def _args(**over):
    b = make_batch([3, 4], [2, 5], H=4, Hkv=2, D=16, dtype=torch.float32)
    a = dict(q=b.q, k=b.k, v=b.v, q_offsets=b.q_offsets, kv_offsets=b.kv_offsets, max_seq_len_q=4,
             max_seq_len_kv=5)
    a.update(over)
    return a


@pytest.mark.parametrize("over,msg", [
    (lambda a: dict(k=a["k"].half()), "share a dtype"),
    (lambda a: dict(q=a["q"].to(torch.int32)), "not supported"),
    (lambda a: dict(q_offsets=a["q_offsets"].long()), "q_offsets must be int32"),
    (lambda a: dict(q_offsets=torch.tensor([0, 5, 3], dtype=torch.int32)), "non-decreasing"),
    (lambda a: dict(kv_offsets=torch.tensor([0, 2, 6], dtype=torch.int32)), "kv_offsets[-1] = 6"),
    (lambda a: dict(q_offsets=torch.tensor([1, 3, 7], dtype=torch.int32)), "q_offsets[0] must be 0"),
    (lambda a: dict(q=torch.zeros(7, 3, 16)), "H (3) must be a multiple of Hkv (2)"),
    (lambda a: dict(q=torch.zeros(7, 4, 24), k=torch.zeros(7, 2, 24), v=torch.zeros(7, 2, 24)),
     "head_dim 24 not supported"),
    (lambda a: dict(max_seq_len_q=3), "exceeds the given max length"),
    (lambda a: dict(kv_offsets=torch.tensor([0, 2], dtype=torch.int32)), "both are [B+1]"),
    (lambda a: dict(v=a["v"][:, :1]), "same shape"),
])
def test_invalid_arguments_raise_value_error(over, msg):
    a = _args()
    a.update(over(a))
    with pytest.raises(ValueError) as exc:
        gdpa(**a)
    assert msg in str(exc.value)


def test_unknown_activation_and_causal_cross_attention():
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        gdpa(**_args(), activation="swish")
    with pytest.raises(ValueError, match="causal=True needs self-attention"):
        gdpa(**_args(), causal=True)


def test_device_mismatch_is_rejected():
    a = _args()
    a["kv_offsets"] = a["kv_offsets"].to("meta")
    with pytest.raises(ValueError, match="kv_offsets is on meta"):
        gdpa(**a)


# ---------------------------------------------------------------------------------------------- GPU
PEER = [("set1 L=2048 fill=1.0", 2048, 1.0, None), ("set1 L=1024 fill=0.5", 1024, 0.5, None),
        ("set2 L=2048 kv=256", 2048, 1.0, 256), ("set1 L=256 fill=0.5", 256, 0.5, None)]


@pytest.mark.gpu
@pytest.mark.parametrize("name,L,fill,kv", PEER, ids=[p[0] for p in PEER])
def test_gpu_bf16_peer_shapes(name, L, fill, kv):
    from bench.runner import correctness
    from kernels.registry import get_provider
    from workloads import sample_lengths
    q_len = sample_lengths("uniform_fill", 1152, L, seed=int(torch.randint(1000, ())), fill=fill)
    kv_len = np.full_like(q_len, kv or L)
    b = make_batch(q_len, kv_len, H=4, D=128, dtype=torch.bfloat16, device="cuda",
                   seed=int(torch.randint(1000, ())))
    for mode in ("fwd", "bwd"):
        res = correctness(get_provider("gdpa_triton"), b, CaseSpec(mode=mode, activation="fast_gelu"), mode,
                          2e-2, 16, 0)
        assert res["passed"], (name, mode, res)


@pytest.fixture
def one_config(monkeypatch):
    """Pin one tile config per kernel: these tests check math, and autotuning would compile every config."""
    for env in ("GDPA_FWD_CONFIG", "GDPA_DKDV_CONFIG", "GDPA_DQ_CONFIG"):
        monkeypatch.setenv(env, "64,64,4,2")


def _gpu_activation_check(act):
    for causal in (False, True):
        ql = [1, 0, 127, 130, 257, 64, 300]
        kl = ql if causal else [5, 3, 0, 128, 200, 1, 299]
        errs, seed = run_and_compare(ql, kl, H=4, Hkv=2, D=128, dtype=torch.bfloat16, act=act, causal=causal,
                                     device="cuda")
        assert max(errs) < 2e-2 and all(math.isfinite(e) for e in errs), (act, causal, seed, errs)


@pytest.mark.gpu
@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_gpu_bf16_every_activation_causal_gqa(poisoned, one_config, act):
    _gpu_activation_check(act)


@pytest.mark.gpu
@pytest.mark.parametrize("impl", BWD_IMPLS)
@pytest.mark.parametrize("act", ["fast_gelu", "silu", "relu_square"])
def test_gpu_bf16_every_backward_impl(poisoned, one_config, monkeypatch, act, impl):
    monkeypatch.setenv("GDPA_BWD_IMPL", impl)
    _gpu_activation_check(act)


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", ["compact", "auto"])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_bf16_compact_schedule_on_a_skewed_batch(poisoned, monkeypatch, schedule, causal):
    """The compact grid at the shipped, autotuned tiles: each config's pre-hook rebuilds the per-sequence
    tile counts for its BLOCK_M (the CPU interpreter only runs fixed configs), on a production-like skew
    where `auto` must pick compact."""
    monkeypatch.setenv("GDPA_SCHEDULE", schedule)
    rng = np.random.default_rng(int(torch.randint(1000, ())))
    ql = np.minimum(rng.lognormal(4.0, 1.2, 240).astype(np.int64), 1200)
    ql[:4] = [0, 1, 1200, 129]
    kl = ql if causal else np.maximum(ql[::-1] - 3, 0)
    gi.LAUNCHED.clear()
    errs, seed = run_and_compare(ql, kl, H=4, Hkv=2, D=128, dtype=torch.bfloat16, act="fast_gelu",
                                 causal=causal, device="cuda")
    assert max(errs) < 2e-2, (schedule, causal, seed, errs)
    launched = {k: v for k, v in gi.LAUNCHED.items() if k.endswith("_CONFIG")}
    assert launched and all("schedule=compact" in v for v in launched.values()), launched


@pytest.mark.gpu
def test_gpu_int64_addressing_beyond_2_pow_31_elements():
    """q holds more than 2^31 elements: row offsets must not wrap in int32."""
    H, D = 8, 128
    rows = 2**31 // (H * D) + 4096
    q_len = np.array([rows - 300, 300])
    kv_len = np.array([16, 16])
    b = make_batch(q_len, kv_len, H=H, D=D, dtype=torch.bfloat16, device="cuda", seed=1, with_dout=False)
    assert b.q.numel() > 2**31
    bg = b.with_grad()
    out = gdpa(bg.q, bg.k, bg.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv)
    b.dout = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (bg.q, bg.k, bg.v), b.dout)
    ref, (rdq, rdk, rdv) = reference_outputs(b, CaseSpec(), seqs=[1], grads=True)
    tail = slice(rows - 300, rows)
    assert rel(out[tail], ref) < 2e-2
    # the last sequence's rows sit past element 2^31 of q, dq, do: the backward addresses them too
    assert rel(dq[tail], rdq) < 2e-2
    assert rel(dk[16:], rdk) < 2e-2 and rel(dv[16:], rdv) < 2e-2


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_gpu_inputs_on_a_device_that_is_not_current():
    """Triton launches on the current device; gdpa() must follow its inputs to cuda:1."""
    torch.cuda.set_device(0)
    b = make_batch([130, 7], [64, 200], H=4, Hkv=2, D=64, dtype=torch.bfloat16, device="cuda:1", seed=4)
    bg = b.with_grad()
    out = gdpa(bg.q, bg.k, bg.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv)
    grads = torch.autograd.grad(out, (bg.q, bg.k, bg.v), b.dout)
    ref, rgrads = reference_outputs(b, CaseSpec(), grads=True)
    assert out.device == torch.device("cuda", 1)
    assert max([rel(out, ref)] + [rel(g, r) for g, r in zip(grads, rgrads)]) < 2e-2


def test_pinned_config_accepts_a_register_cap_and_names_the_variable(monkeypatch):
    from kernels.gdpa.interface import _pinned
    from kernels.gdpa.tiles import triton_config
    monkeypatch.setenv("GDPA_FWD_CONFIG", "128,32,8,3,128")
    assert _pinned("GDPA_FWD_CONFIG") == (128, 32, 8, 3, 128)
    assert triton_config(_pinned("GDPA_FWD_CONFIG")).maxnreg == 128
    assert triton_config((64, 64, 4, 2)).maxnreg is None
    monkeypatch.setenv("GDPA_FWD_CONFIG", "128,32,8")
    with pytest.raises(ValueError, match="GDPA_FWD_CONFIG"):
        _pinned("GDPA_FWD_CONFIG")


@pytest.mark.parametrize("mode,kernels", [("fwd", {"GDPA_FWD_CONFIG"}),
                                          ("bwd", {"GDPA_FWD_CONFIG", "GDPA_DKDV_CONFIG", "GDPA_DQ_CONFIG"})])
def test_provider_reports_the_configs_its_kernels_ran_with(mode, kernels):
    """The harness stores these per case (`kernel_config`): two runs that autotune differently show it."""
    from kernels.registry import get_provider
    provider = get_provider("gdpa_triton")
    b = make_batch([5, 0, 17], [7, 3, 20], H=2, D=16, dtype=torch.float32, seed=0)
    other = "bwd" if mode == "fwd" else "fwd"
    provider.build(b, CaseSpec(activation="silu"), other)()
    fn = provider.build(b, CaseSpec(activation="silu"), mode)  # a new case forgets the previous launches
    fn()
    got = provider.kernel_configs()
    assert set(got) == kernels and all(v == "interpreter: (16, 16, 4, 1)" for v in got.values())


def test_kernel_config_names_an_experiment_variant(monkeypatch):
    from kernels.registry import get_provider
    monkeypatch.setenv("GDPA_FWD_PIPE", "1")
    provider = get_provider("gdpa_triton")
    b = make_batch([5, 17], [7, 20], H=2, D=16, dtype=torch.float32, seed=0)
    provider.build(b, CaseSpec(activation="silu"), "fwd")()
    assert provider.kernel_configs() == {"GDPA_FWD_CONFIG": "interpreter: (16, 16, 4, 1) PIPELINE_S"}


def test_shipped_forward_tiles_allow_the_causal_mask_split():
    from kernels.gdpa.fwd import FWD_CONFIGS
    assert all(m % n == 0 for m, n, *_ in FWD_CONFIGS)  # the causal forward's unmasked key tiles end at m0


def test_autotune_key_tells_a_half_filled_batch_from_a_full_one():
    """Keyed on max length alone, the first batch of a max length chose the tiles for every later one
    (two shards running cases in different orders then timed different configs: 6% apart)."""
    from kernels.gdpa import bwd, fwd
    full, half = make_batch([512] * 8, [512] * 8, H=2, D=16), make_batch([256] * 8, [512] * 8, H=2, D=16)
    assert gi._buckets(full.q, full.k, 512, 512) != gi._buckets(half.q, half.k, 512, 512)
    for tuned in (fwd.gdpa_fwd_kernel_tuned, fwd.gdpa_fwd_tma_kernel_tuned, bwd.gdpa_bwd_dkdv_kernel_tuned,
                  bwd.gdpa_bwd_dq_kernel_tuned):
        assert {"max_q_bucket", "max_kv_bucket", "rows_q_bucket", "rows_kv_bucket"} <= set(tuned.keys)
