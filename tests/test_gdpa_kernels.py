"""GDPA Triton kernels against the exact reference.

CPU: the Triton interpreter (TRITON_INTERPRET=1, set by conftest), fp32/fp16 — the interpreter's bf16
tl.dot is wrong in triton 3.6 — tiny jagged batches with zero-length and length-1 sequences, GQA,
alpha/qk_scale != 1, every activation, causal and not, pinned tiles through GDPAOptions. Outputs are
poisoned with NaN before each call (kernels.gdpa.launch.poisoned_outputs), so an element the kernel
forgets to write fails the comparison. GPU (`-m gpu`): bf16 at the peer shapes.
"""

import math

import numpy as np
import pytest
import torch

from kernels.activations import ACTIVATION_NAMES
from kernels.gdpa import GDPAOptions, gdpa
from kernels.gdpa.launch import poisoned_outputs
from kernels.reference import reference_outputs
from kernels.registry import CaseSpec
from workloads import make_batch

CPU = not torch.cuda.is_available()
TRITON = GDPAOptions(backend="triton")  # these tests check the Triton kernels, wherever auto would go


@pytest.fixture
def poisoned():
    with poisoned_outputs():
        yield


def rel(a, b):
    a, b = a.double(), b.double()
    e = ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
    return e if math.isfinite(e) else math.inf  # max() skips a NaN that is not first: make it the worst


def run_and_compare(
    q_len,
    kv_len,
    *,
    H=4,
    Hkv=2,
    D=16,
    dtype=torch.float32,
    act="fast_gelu",
    alpha=0.7,
    qk_scale=1.3,
    causal=False,
    seed=None,
    device="cpu",
    options=TRITON,
    record=None,
):
    seed = np.random.SeedSequence().entropy % 2**31 if seed is None else seed  # fresh inputs each case
    b = make_batch(q_len, kv_len, H=H, Hkv=Hkv, D=D, dtype=dtype, device=device, seed=seed)
    bg = b.with_grad()
    out = gdpa(
        bg.q,
        bg.k,
        bg.v,
        b.q_offsets,
        b.kv_offsets,
        b.max_q,
        b.max_kv,
        activation=act,
        alpha=alpha,
        qk_scale=qk_scale,
        causal=causal,
        options=options,
        record=record,
    )
    grads = torch.autograd.grad(out, (bg.q, bg.k, bg.v), b.dout)
    spec = CaseSpec(activation=act, alpha=alpha, qk_scale=qk_scale, causal=causal)
    ref, rgrads = reference_outputs(b, spec, grads=True, dtype=torch.float64)
    return [rel(out, ref)] + [rel(g, r) for g, r in zip(grads, rgrads, strict=True)], seed


Q_LEN = [5, 0, 17, 33, 1, 9]
KV_LEN = [7, 3, 0, 40, 1, 16]


SKEWED_SMALL = [3, 0, 1, 70, 2, 0, 3, 1, 2, 3, 1, 2]  # one long history among short ones, and empties


@pytest.mark.parametrize("causal,tiles", [(False, (16, 16)), (True, (16, 16)), (False, (16, 32)), (True, (32, 16))])
def test_pinned_tiles_match_reference(poisoned, causal, tiles):
    """Tiles pinned through GDPAOptions in forward, dK/dV and dQ, on the small jagged batch and a skewed
    one; every output element checked. Unequal BLOCK_M / BLOCK_N tell the query-tiled kernels' grids
    from the key-tiled dK/dV one."""
    opts = GDPAOptions(backend="triton", fwd_tiles=(*tiles, 4, 1), dkdv_tiles=(*tiles, 4, 1), dq_tiles=(*tiles, 4, 1))
    for q_len, kv_len in ((Q_LEN, Q_LEN if causal else KV_LEN), (SKEWED_SMALL, SKEWED_SMALL)):
        record = {}
        errs, seed = run_and_compare(q_len, kv_len, act="fast_gelu", causal=causal, options=opts, record=record)
        assert max(errs) < 1e-4, (q_len, errs, seed)
        assert {record[k]["source"] for k in ("fwd", "dkdv", "dq")} == {"pinned"}
        assert record["fwd"]["tiles"] == [*tiles, 4, 1]


def test_causal_forward_rejects_pinned_tiles_that_split_a_key_tile():
    """The causal forward runs whole key tiles unmasked up to its first query row: BLOCK_M % BLOCK_N."""
    with pytest.raises(ValueError, match=r"fwd_tiles \[16, 32, 4, 1\]: a causal forward needs BLOCK_M"):
        run_and_compare([3, 5], [3, 5], causal=True, options=GDPAOptions(backend="triton", fwd_tiles=(16, 32, 4, 1)))


@pytest.mark.parametrize("act", ACTIVATION_NAMES)
@pytest.mark.parametrize("causal", [False, True])
def test_forward_and_grads_every_activation(poisoned, act, causal):
    kv = Q_LEN if causal else KV_LEN  # causal is self-attention
    errs, seed = run_and_compare(Q_LEN, kv, act=act, causal=causal)
    assert max(errs) < 1e-5, f"seed {seed}: out/dq/dk/dv rel errors {errs}"


def test_fp16_mha_and_nonpow2_lengths(poisoned):
    errs, seed = run_and_compare(
        [31, 2, 19], [23, 45, 1], H=2, Hkv=2, D=32, dtype=torch.float16, act="silu", alpha=0.5, qk_scale=0.25
    )
    assert max(errs) < 5e-3, f"seed {seed}: {errs}"


@pytest.mark.parametrize("act", ["fast_gelu", "silu", "gelu"])
def test_fp16_alpha_zero_and_big_scores_keep_finite_zero_gradients(poisoned, act):
    """alpha = 0: act(0) = 0, so every gradient is exactly 0. The backward's P' (activations.py) leaves
    alpha·p_fold to dV, which fp16's range could not hold for scores past 65504 — the fp16 kernels scale P back."""
    b = make_batch([7, 5], [6, 9], H=2, D=16, dtype=torch.float16, seed=4).with_grad()
    with torch.no_grad():
        b.q.mul_(200.0), b.k.mul_(200.0)  # |q·k| ~ 1e5: past fp16's range as a bare score
    out = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, activation=act, alpha=0.0, options=TRITON)
    grads = torch.autograd.grad(out, (b.q, b.k, b.v), torch.randn_like(out))
    for g in (out, *grads):
        assert torch.isfinite(g).all() and torch.equal(g, torch.zeros_like(g))


@pytest.mark.parametrize("act", ["fast_gelu", "gelu_tanh", "silu"])
def test_large_scores_keep_the_derivative_exact(poisoned, act):
    """alpha·s in the hundreds (alpha 60): where tanh saturates the GELU forms' derivative is exactly 1; a form
    that added 0.5 to a = P'·poly before t multiplied lost it to rounding past alpha·s ~ 430 (dQ, dK ~50% off)."""
    errs, seed = run_and_compare(Q_LEN, KV_LEN, act=act, alpha=60.0)
    assert max(errs) < 1e-5, f"seed {seed}: out/dq/dk/dv rel errors {errs}"


def test_gqa_four_query_heads_per_kv_head(poisoned):
    errs, seed = run_and_compare([12, 20], [20, 9], H=8, Hkv=2, act="gelu")
    assert max(errs) < 1e-5, f"seed {seed}: {errs}"


def test_all_sequences_empty_and_empty_batch():
    b = make_batch([0, 0], [3, 0], H=2, D=16, dtype=torch.float32)
    out = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, 0, 3)
    assert out.shape == (0, 2, 16)


def test_keys_past_sequence_end_are_never_read(poisoned):
    """Huge values in the *next* sequence's keys must not leak into this one (masked loads). The Triton
    kernels' property, NaN included; the packed backend computes a pack's sequences in one GEMM, where finite
    values cannot leak (exact zeros off the block diagonal: tests/test_gdpa_packed.py) but 0 · NaN can."""
    b = make_batch([6, 6], [5, 6], H=2, D=16, dtype=torch.float32, seed=3)
    k, v = b.k.clone(), b.v.clone()
    k[5:], v[5:] = 1e4, float("nan")  # sequence 1's keys: poison for sequence 0's last tile
    out = gdpa(b.q, k, v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, activation="raw", options=TRITON)
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
    a = dict(q=b.q, k=b.k, v=b.v, q_offsets=b.q_offsets, kv_offsets=b.kv_offsets, max_seq_len_q=4, max_seq_len_kv=5)
    a.update(over)
    return a


HOST_CHECKS = [
    (lambda a: dict(k=a["k"].half()), "share a dtype"),
    (lambda a: dict(q=a["q"].to(torch.int32)), "not supported"),
    (lambda a: dict(q_offsets=a["q_offsets"].long()), "q_offsets must be int32"),
    (lambda a: dict(q=torch.zeros(7, 3, 16)), "H (3) must be a multiple of Hkv (2)"),
    (
        lambda a: dict(q=torch.zeros(7, 4, 24), k=torch.zeros(7, 2, 24), v=torch.zeros(7, 2, 24)),
        "head_dim 24 not supported",
    ),
    (lambda a: dict(kv_offsets=torch.tensor([0, 2], dtype=torch.int32)), "both are [B+1]"),
    (lambda a: dict(v=a["v"][:, :1]), "same shape"),
    (lambda a: dict(max_seq_len_q=torch.tensor(4)), "max_seq_len_q must be an integer >= 0, got a tensor"),
    (lambda a: dict(max_seq_len_kv=-1), "max_seq_len_kv must be an integer >= 0, got -1"),
    (lambda a: dict(alpha=torch.tensor(0.5)), "alpha must be a real number, got a tensor"),
]
# these need the offsets' values: only validate="full" reads them (a host sync)
OFFSET_CHECKS = [
    (lambda a: dict(q_offsets=torch.tensor([0, 5, 3], dtype=torch.int32)), "non-decreasing"),
    (lambda a: dict(kv_offsets=torch.tensor([0, 2, 6], dtype=torch.int32)), "kv_offsets[-1] = 6"),
    (lambda a: dict(q_offsets=torch.tensor([1, 3, 7], dtype=torch.int32)), "q_offsets[0] must be 0"),
    (lambda a: dict(max_seq_len_q=3), "exceeds the given max length"),
]


@pytest.mark.parametrize("validate", ["host", "full"])
@pytest.mark.parametrize("over,msg", HOST_CHECKS)
def test_invalid_arguments_raise_value_error(over, msg, validate):
    a = _args()
    a.update(over(a))
    with pytest.raises(ValueError) as exc:
        gdpa(**a, validate=validate)
    assert msg in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("over,msg", OFFSET_CHECKS)
def test_invalid_offsets_raise_value_error_when_fully_validated(over, msg):
    a = _args()
    a.update(over(a))
    with pytest.raises(ValueError) as exc:
        gdpa(**a, validate="full")
    assert msg in str(exc.value) and "\n" not in str(exc.value)


def test_unknown_activation_and_causal_cross_attention():
    with pytest.raises(ValueError, match="unknown activation 'swish'"):
        gdpa(**_args(), activation="swish")
    # equal row counts, different offsets: only the offsets' values tell (validate="full")
    with pytest.raises(ValueError, match="causal=True needs self-attention"):
        gdpa(**_args(), causal=True, validate="full")
    # different row counts: caught on the host
    a = _args()
    b = make_batch([3, 4], [2, 6], H=4, Hkv=2, D=16, dtype=torch.float32)
    a.update(k=b.k, v=b.v, kv_offsets=b.kv_offsets, max_seq_len_kv=6)
    with pytest.raises(ValueError, match=r"causal=True needs self-attention .* q has 7 rows, k has 8"):
        gdpa(**a, causal=True)


def test_validate_and_options_arguments_are_checked():
    allowed = r"allowed: 'host' \([^()]*no host sync\); 'full' \([^()]*a host sync\)$"
    with pytest.raises(ValueError, match=r"^gdpa: validate='fast'; " + allowed):
        gdpa(**_args(), validate="fast")
    with pytest.raises(ValueError, match="options must be a GDPAOptions, got dict"):
        gdpa(**_args(), options={"backend": "triton"})


def test_device_mismatch_is_rejected():
    a = _args()
    a["kv_offsets"] = a["kv_offsets"].to("meta")
    with pytest.raises(ValueError, match="kv_offsets is on meta"):
        gdpa(**a)


# ---------------------------------------------------------------------------------------------- GPU
PEER = [
    ("set1 L=2048 fill=1.0", 2048, 1.0, None),
    ("set1 L=1024 fill=0.5", 1024, 0.5, None),
    ("set2 L=2048 kv=256", 2048, 1.0, 256),
    ("set1 L=256 fill=0.5", 256, 0.5, None),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,L,fill,kv", PEER, ids=[p[0] for p in PEER])
def test_gpu_bf16_peer_shapes(name, L, fill, kv):
    from bench.case.gate import correctness
    from kernels.registry import get_provider
    from workloads import sample_lengths

    q_len = sample_lengths("uniform_fill", 1152, L, seed=int(torch.randint(1000, ())), fill=fill)
    kv_len = np.full_like(q_len, kv or L)
    b = make_batch(q_len, kv_len, H=4, D=128, dtype=torch.bfloat16, device="cuda", seed=int(torch.randint(1000, ())))
    for mode in ("fwd", "bwd"):
        res = correctness(
            get_provider("gdpa_triton"), b, CaseSpec(mode=mode, activation="fast_gelu"), mode, 2e-2, 16, 0
        )
        assert res["passed"], (name, mode, res)


# one tile config per kernel: these tests check math, and autotuning would compile every config
ONE_CONFIG = GDPAOptions(backend="triton", fwd_tiles=(64, 64, 4, 2), dkdv_tiles=(64, 64, 4, 2), dq_tiles=(64, 64, 4, 2))


def _gpu_activation_check(act):
    for causal in (False, True):
        ql = [1, 0, 127, 130, 257, 64, 300]
        kl = ql if causal else [5, 3, 0, 128, 200, 1, 299]
        errs, seed = run_and_compare(
            ql, kl, H=4, Hkv=2, D=128, dtype=torch.bfloat16, act=act, causal=causal, device="cuda", options=ONE_CONFIG
        )
        assert max(errs) < 2e-2 and all(math.isfinite(e) for e in errs), (act, causal, seed, errs)


@pytest.mark.gpu
@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_gpu_bf16_every_activation_causal_gqa(poisoned, act):
    _gpu_activation_check(act)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_bf16_autotuned_on_a_skewed_batch_records_what_ran(poisoned, causal):
    """The shipped path (autotuned tiles) on a production-like skew, checked against the reference; the
    record names each kernel's tiles and the compiled kernel's registers, spills and shared memory."""
    rng = np.random.default_rng(int(torch.randint(1000, ())))
    ql = np.minimum(rng.lognormal(4.0, 1.2, 240).astype(np.int64), 1200)
    ql[:4] = [0, 1, 1200, 129]
    kl = ql if causal else np.maximum(ql[::-1] - 3, 0)
    record = {}
    errs, seed = run_and_compare(
        ql, kl, H=4, Hkv=2, D=128, dtype=torch.bfloat16, act="fast_gelu", causal=causal, device="cuda", record=record
    )
    assert max(errs) < 2e-2, (causal, seed, errs)
    for kernel in ("fwd", "dkdv", "dq"):
        entry = record[kernel]
        assert entry["source"] == "autotuned" and not entry["interpreter"], record
        assert entry["n_regs"] > 0 and entry["n_spills"] >= 0 and entry["shared_bytes"] > 0, record


@pytest.mark.gpu
@pytest.mark.parametrize("options", [None, ONE_CONFIG], ids=["default", "pinned"])
def test_gpu_default_call_never_syncs(options):
    """After the first call (which compiles and autotunes), forward and backward of gdpa() run with
    CUDA's sync debug mode set to raise on any synchronizing call."""
    b = make_batch(
        [1, 0, 127, 300], [5, 3, 0, 299], H=4, Hkv=2, D=128, dtype=torch.bfloat16, device="cuda", seed=2
    ).with_grad()

    def call():
        out = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, options=options, record={})
        return torch.autograd.grad(out, (b.q, b.k, b.v), b.dout)

    call()
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        call()
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def test_rows_past_the_grid_y_limit_fold_over_z(poisoned, monkeypatch):
    """CUDA caps a grid's y extent at 65,535, and the Triton kernels put sequences · heads there: a batch of 16,384
    sequences of 4 heads failed with `Triton Error [CUDA]: invalid argument`. grid_math.rows_grid folds the rows
    over z past the limit, each kernel recovers its row and exits past the last; here with the limit at 5 (rows
    12 for the forward and dQ, 6 for dK/dV: folded 5 + 5 + 2 and 5 + 1), every output checked against the
    reference and against the unfolded launch bit for bit."""
    from kernels.gdpa import grid_math

    opts = GDPAOptions(backend="triton", fwd_tiles=(16, 16, 4, 1), dkdv_tiles=(16, 16, 4, 1), dq_tiles=(16, 16, 4, 1))
    q_len, kv_len = [5, 17, 9], [7, 3, 40]
    plain, seed = [], 11
    for limit in (grid_math.GRID_YZ_MAX, 5):
        monkeypatch.setattr(grid_math, "GRID_YZ_MAX", limit)
        b = make_batch(q_len, kv_len, H=4, Hkv=2, D=16, dtype=torch.float32, seed=seed)
        bg, record = b.with_grad(), {}
        out = gdpa(bg.q, bg.k, bg.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, options=opts, record=record)
        grads = torch.autograd.grad(out, (bg.q, bg.k, bg.v), b.dout)
        plain.append([out, *grads])
        if limit == 5:
            assert record["fwd"]["grid"] == [2, 5, 3] and record["dq"]["grid"] == [2, 5, 3]
            assert record["dkdv"]["grid"] == [3, 5, 2]
        else:
            assert record["fwd"]["grid"] == [2, 12] and record["dkdv"]["grid"] == [3, 6]
    ref, rgrads = reference_outputs(b, CaseSpec(), grads=True, dtype=torch.float64)
    assert max(rel(a, r) for a, r in zip(plain[1], [ref, *rgrads], strict=True)) < 1e-4
    assert all(torch.equal(a, f) for a, f in zip(plain[0], plain[1], strict=True))


@pytest.mark.gpu
def test_gpu_more_sequences_times_heads_than_a_grid_holds_on_y():
    """16,500 sequences of 4 heads (66,000 rows > CUDA's 65,535 on a grid's y): forward and backward through the
    Triton kernels (pinned) and the op's default, against the reference on a sample of sequences."""
    rng = np.random.default_rng(3)
    q_len = rng.integers(1, 9, 16_500)
    b = make_batch(q_len, q_len, H=4, D=64, dtype=torch.bfloat16, device="cuda", seed=3)
    seqs = [0, 1, 8_000, 16_498, 16_499]  # the first and last rows of the fold, and the middle
    ref, (rdq, rdk, rdv) = reference_outputs(b, CaseSpec(), seqs=seqs, grads=True)
    rows = np.concatenate([np.arange(b.q_offsets[s].item(), b.q_offsets[s + 1].item()) for s in seqs])
    for options in (GDPAOptions(backend="triton"), None):
        bg = b.with_grad()
        out = gdpa(bg.q, bg.k, bg.v, b.q_offsets, b.q_offsets, b.max_q, b.max_kv, options=options)
        dq, dk, dv = torch.autograd.grad(out, (bg.q, bg.k, bg.v), b.dout)
        torch.cuda.synchronize()
        assert rel(out[rows], ref) < 2e-2 and rel(dq[rows], rdq) < 2e-2
        assert rel(dk[rows], rdk) < 2e-2 and rel(dv[rows], rdv) < 2e-2


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
    assert max([rel(out, ref)] + [rel(g, r) for g, r in zip(grads, rgrads, strict=True)]) < 2e-2


def test_tiles_carry_a_register_cap_to_triton_and_back():
    from kernels.gdpa.tiles import tiles_of, triton_config

    assert triton_config((128, 32, 8, 3, 128)).maxnreg == 128
    assert triton_config((64, 64, 4, 2)).maxnreg is None and triton_config((64, 64, 4, 2, 0)).maxnreg is None
    assert tiles_of(triton_config((128, 32, 8, 3, 128))) == (128, 32, 8, 3, 128)
    assert tiles_of(triton_config((64, 64, 4, 2))) == (64, 64, 4, 2)


INTERPRETED = {"tiles": [16, 16, 4, 1], "source": "interpreter", "interpreter": True}


@pytest.mark.parametrize("name", ["gdpa_triton", "gdpa"])
@pytest.mark.parametrize("mode,kernels", [("fwd", {"fwd"}), ("bwd", {"fwd", "dkdv", "dq"})])
def test_provider_reports_what_its_kernels_ran_with(name, mode, kernels):
    """The harness stores this per case (`kernel_config`): two runs that autotune differently show it.
    Cross-attention beyond 128 tokens keeps auto off the packed row (tests/test_gdpa_packed.py has it)."""
    from kernels.registry import get_provider

    provider = get_provider(name)
    b = make_batch([5, 0, 17], [7, 3, 200], H=2, D=16, dtype=torch.float32, seed=0)
    other = "bwd" if mode == "fwd" else "fwd"
    provider.build(b, CaseSpec(activation="silu"), other)()
    fn = provider.build(b, CaseSpec(activation="silu"), mode)  # a new case forgets the previous launches
    fn()
    got = provider.kernel_configs()
    assert set(got) == kernels | {"dispatch"}, got
    assert all({k: got[kernel][k] for k in INTERPRETED} == INTERPRETED for kernel in kernels), got
    assert got["fwd"]["grid"] == [2, 3 * 2] and ("dkdv" not in got or got["dkdv"]["grid"] == [13, 3 * 2])
    passes = {"fwd"} if mode == "fwd" else {"fwd", "bwd"}
    assert set(got["dispatch"]) == passes and all(d["backend"] == "triton" for d in got["dispatch"].values())
    if name == "gdpa_triton":
        assert got["dispatch"]["fwd"]["reason"] == "triton: backend='triton' requested"
    else:  # auto: Triton's, and the reason says why the packed row (and, backward, Hopper) cannot run it
        assert got["dispatch"]["fwd"]["reason"].startswith("triton: packed does not support this call: ")
        if mode == "bwd":
            assert "; hopper unavailable: " in got["dispatch"]["bwd"]["reason"]


def test_provider_pins_tiles_from_its_options():
    from kernels.registry import get_provider

    provider = get_provider("gdpa_triton", {"fwd_tiles": [32, 16, 4, 1], "dq_tiles": [16, 32, 2, 1]})
    assert provider.options_record() == {
        "backend": "triton",
        "fwd_tiles": [32, 16, 4, 1],
        "dkdv_tiles": None,
        "dq_tiles": [16, 32, 2, 1],
        "fwd_plan": None,
        "bwd_plan": None,
        "concurrent_stages": True,
    }
    b = make_batch([5, 40], [7, 20], H=2, D=16, dtype=torch.float32, seed=0)
    provider.build(b, CaseSpec(), "fwd_bwd")()
    got = provider.kernel_configs()
    assert (got["fwd"]["tiles"], got["fwd"]["source"], got["fwd"]["grid"]) == ([32, 16, 4, 1], "pinned", [2, 4])
    assert (got["dq"]["tiles"], got["dq"]["source"]) == ([16, 32, 2, 1], "pinned")
    assert got["dkdv"]["source"] == "interpreter"


def test_shipped_forward_tiles_allow_the_causal_mask_split():
    from kernels.gdpa.fwd import FWD_CONFIGS

    assert all(m % n == 0 for m, n, *_ in FWD_CONFIGS)  # the causal forward's unmasked key tiles end at m0


def test_autotune_key_tells_a_half_filled_batch_from_a_full_one():
    """Keyed on max length alone, the first batch of a max length chose the tiles for every later one
    (two shards running cases in different orders then timed different configs: 6% apart)."""
    from kernels.gdpa import bwd, fwd
    from kernels.gdpa.bands import WHOLE, Band
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.launch import TUNING_KEY, tuning_key

    full, half = make_batch([512] * 8, [512] * 8, H=2, D=16), make_batch([256] * 8, [512] * 8, H=2, D=16)
    call = lambda b: GDPACall(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, 512, 512)
    assert tuning_key(call(full), WHOLE) != tuning_key(call(half), WHOLE)
    assert set(tuning_key(call(full), WHOLE)) == set(TUNING_KEY)
    # a launch over one band of short sequences tunes apart from the whole batch
    assert tuning_key(call(full), Band(0, 128)) != tuning_key(call(full), WHOLE)
    for tuned in (fwd.gdpa_fwd_kernel_tuned, bwd.gdpa_bwd_dkdv_kernel_tuned, bwd.gdpa_bwd_dq_kernel_tuned):
        assert set(TUNING_KEY) <= set(tuned.keys)


@pytest.mark.gpu
def test_gpu_auto_times_a_long_candidate_on_several_calls_a_round():
    """auto's candidate rounds (kernels/gdpa/choice.py): a ~9 ms call is timed on at least 5 calls a round
    after one that sizes the round (do_bench(rep=10) timed it once: hstu_sl unsorted forward on the H200 at
    1a75745 chose a plan 5% behind gdpa_hopper), a 50 µs call on at most 100, and the round's median is the
    call's time (CUDA events around a spin of known length, ~5% at the H200's clocks)."""
    from kernels.gdpa import choice

    flush = torch.empty(choice.FLUSH_BYTES, dtype=torch.int8, device="cuda")
    torch.cuda._sleep(1000)  # the spin kernel's first launch loads it (inside a probe, it made 9 ms 0.34)
    for target_ms, lo, hi in ((9.0, 6, 6), (0.05, 101, 101)):
        torch.cuda.synchronize()
        probe_start, probe_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        probe_start.record()
        torch.cuda._sleep(2_000_000)
        probe_end.record()
        probe_end.synchronize()
        cycles = int(2_000_000 * target_ms / probe_start.elapsed_time(probe_end))
        calls = []
        ms = choice._time_ms(lambda c=cycles, n=calls: (n.append(1), torch.cuda._sleep(c)), flush)
        print(f"target {target_ms} ms: round median {ms:.4f} ms over {len(calls)} calls")
        assert lo <= len(calls) <= hi
        assert ms == pytest.approx(target_ms, rel=0.25)
