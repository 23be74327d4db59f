"""Softmax baselines (fa4, sdpa_flash, sdpa_cudnn, torch_varlen) and the softmax reference.

CPU tests: availability and skip reasons, argument plumbing through fakes, the reference against torch's
math SDPA, and the dense SDPA path (pad/unpad views) on the math backend. `gpu` tests check every
available provider against the fp32 reference on an H200 (`pytest -m gpu`).
"""

from __future__ import annotations

import dataclasses
import math
import sys

import pytest
import torch
import torch.nn.functional as F

import kernels.fa4 as fa4
import kernels.sdpa as sdpa
import kernels.torch_varlen as tv
from kernels import registry
from kernels.reference import reference_outputs, softmax_sequence
from kernels.registry import CaseSpec
from workloads.batch import make_batch

TOL = 2e-2


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _fake_gpu(monkeypatch, cap=(9, 0), name="NVIDIA H200"):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)


# ---------------------------------------------------------------------------------------------------
# registration


def test_providers_registered_with_softmax_semantics():
    for name, cls in [
        ("fa4", fa4.FA4Provider),
        ("sdpa_flash", sdpa.SDPAFlashProvider),
        ("sdpa_cudnn", sdpa.SDPACuDNNProvider),
        ("torch_varlen", tv.TorchVarlenProvider),
    ]:
        assert registry._REGISTRY[name] is cls
        assert cls.semantics == "softmax"
        assert cls.description
    for module in ("kernels.fa4", "kernels.sdpa", "kernels.torch_varlen"):
        assert module in registry.PROVIDER_MODULES


# ---------------------------------------------------------------------------------------------------
# fa4


def test_modules_import_without_flash_attn():
    """A fresh interpreter where flash_attn cannot be imported still imports all three modules."""
    import subprocess

    code = (
        "import sys; sys.modules['flash_attn'] = None; import torch; "
        "import kernels.fa4 as f, kernels.sdpa, kernels.torch_varlen; "
        "print(f.FA4Provider().availability(torch.device('cuda', 0)))"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]),
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "flash-attn-4 not installed (pip install -e '.[fa4]')"


def test_fa4_missing_package_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    monkeypatch.delitem(sys.modules, "flash_attn.cute", raising=False)
    _fake_gpu(monkeypatch)  # even with a GPU, a missing package is the reason
    reason = fa4.FA4Provider().availability(torch.device("cuda"))
    assert reason == "flash-attn-4 not installed (pip install -e '.[fa4]')"


def test_fa4_reports_its_package_probe(monkeypatch):
    monkeypatch.setattr(fa4, "_package_reason", lambda: "flash-attn-4 is installed but cutlass is missing: x")
    _fake_gpu(monkeypatch)  # the package's reason comes before any device check
    assert fa4.FA4Provider().availability(torch.device("cuda")) == "flash-attn-4 is installed but cutlass is missing: x"


def test_fa4_no_cuda_reason(monkeypatch):
    monkeypatch.setattr(fa4, "_package_reason", lambda: None)
    _no_cuda(monkeypatch)
    assert fa4.FA4Provider().availability(torch.device("cuda")) == "CUDA not available"


@pytest.mark.parametrize(
    "cap,ok", [((9, 0), True), ((10, 0), True), ((10, 3), True), ((8, 0), False), ((8, 9), False), ((12, 0), False)]
)
def test_fa4_compute_capability(monkeypatch, cap, ok):
    monkeypatch.setattr(fa4, "_package_reason", lambda: None)
    _fake_gpu(monkeypatch, cap=cap, name="NVIDIA TestGPU")
    reason = fa4.FA4Provider().availability(torch.device("cuda", 0))
    if ok:
        assert reason is None
    else:
        assert reason == (
            "needs an NVIDIA GPU of compute capability 9.0 (Hopper) or 10.x (Blackwell); "
            f"found NVIDIA TestGPU sm_{cap[0]}{cap[1]}"
        )


def test_fa4_cpu_device_reason(monkeypatch):
    monkeypatch.setattr(fa4, "_package_reason", lambda: None)
    _fake_gpu(monkeypatch)
    assert "CUDA devices only" in fa4.FA4Provider().availability(torch.device("cpu"))


@pytest.mark.parametrize("D", [64, 96, 128])
def test_fa4_supported_head_dims(D):
    b = make_batch([3, 5], [4, 6], H=4, Hkv=2, D=D)
    p = fa4.FA4Provider()
    # activation / alpha / qk_scale are GDPA parameters: a softmax provider ignores them
    assert p.unsupported(b, CaseSpec(activation="silu", alpha=0.5, qk_scale=0.1, causal=True)) is None


@pytest.mark.parametrize("D", [32, 80, 256])
def test_fa4_unsupported_head_dim(D):
    reason = fa4.FA4Provider().unsupported(make_batch([3], [3], H=2, D=D), CaseSpec())
    assert reason == f"head dim {D} not supported by this FA4 provider (allowed: 64, 96, 128)"


def test_fa4_unsupported_dtype():
    reason = fa4.FA4Provider().unsupported(make_batch([3], [3], H=2, D=64, dtype=torch.float32), CaseSpec())
    assert reason == "FA4 runs fp16/bf16 only, not float32"


def _fake_varlen_func(calls, returns_tuple):
    """Mimics flash_attn_varlen_func's contract with the exact reference (differentiable, CPU)."""

    def fn(
        q,
        k,
        v,
        qv=None,
        cu_seqlens_q=None,
        cu_seqlens_k=None,
        max_seqlen_q=None,
        max_seqlen_k=None,
        softmax_scale=None,
        causal=False,
        **extra,
    ):
        assert qv is None and not extra
        calls.append(
            dict(
                cu_seqlens_q=cu_seqlens_q,
                cu_seqlens_k=cu_seqlens_k,
                max_seqlen_q=max_seqlen_q,
                max_seqlen_k=max_seqlen_k,
                softmax_scale=softmax_scale,
                causal=causal,
            )
        )
        spec = CaseSpec(causal=causal, softmax_scale=softmax_scale)
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        outs = [
            softmax_sequence(
                q[cq[i] : cq[i + 1]].float(), k[ck[i] : ck[i + 1]].float(), v[ck[i] : ck[i + 1]].float(), spec
            )
            for i in range(len(cq) - 1)
        ]
        out = torch.cat(outs).to(q.dtype)
        lse = torch.zeros(q.shape[1], q.shape[0])
        return (out, lse) if returns_tuple else out

    return fn


@pytest.mark.parametrize("returns_tuple", [True, False])
@pytest.mark.parametrize("mode", ["fwd", "bwd", "fwd_bwd"])
def test_fa4_forward_plumbing_and_warm_build(monkeypatch, returns_tuple, mode):
    calls = []
    monkeypatch.setattr(fa4, "_import_varlen_func", lambda: _fake_varlen_func(calls, returns_tuple))
    b = make_batch([3, 0, 7], [5, 2, 7], H=4, Hkv=2, D=64, dtype=torch.float32, seed=1)
    spec = CaseSpec(mode=mode, causal=True, softmax_scale=0.3)
    fn = fa4.FA4Provider().build(b, spec, mode)
    assert len(calls) == 1  # build() ran the callable once: compilation is outside the timed region
    c = calls[0]
    assert c["cu_seqlens_q"] is b.q_offsets and c["cu_seqlens_k"] is b.kv_offsets
    assert c["cu_seqlens_q"].dtype == torch.int32
    assert (c["max_seqlen_q"], c["max_seqlen_k"]) == (7, 7)
    assert isinstance(c["max_seqlen_q"], int)
    assert c["softmax_scale"] == 0.3 and c["causal"] is True
    res = fn()
    ref, grads = reference_outputs(b, spec, "softmax", grads=True)
    if mode == "fwd":
        assert res.shape == b.q.shape
        assert rel_err(res, ref) < 1e-5
    else:
        for g, r in zip(res, grads, strict=True):
            assert rel_err(g, r) < 1e-5
    default_scale = CaseSpec()
    fa4.FA4Provider().forward(b, default_scale)
    assert calls[-1]["softmax_scale"] == pytest.approx(1 / 8) and calls[-1]["causal"] is False


# ---------------------------------------------------------------------------------------------------
# sdpa (dense)

SDPA_CLASSES = [sdpa.SDPAFlashProvider, sdpa.SDPACuDNNProvider]


@pytest.mark.parametrize("cls", SDPA_CLASSES)
def test_sdpa_no_cuda_reason(monkeypatch, cls):
    _no_cuda(monkeypatch)
    assert cls().availability(torch.device("cuda")) == "CUDA not available"


def test_sdpa_cudnn_missing_reason(monkeypatch):
    _fake_gpu(monkeypatch)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: False)
    assert sdpa.SDPACuDNNProvider().availability(torch.device("cuda", 0)) == "cuDNN not available in this torch build"


def test_sdpa_backend_disabled_reasons(monkeypatch):
    _fake_gpu(monkeypatch)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cuda, "is_flash_attention_available", lambda: False)
    assert (
        sdpa.SDPAFlashProvider().availability(torch.device("cuda", 0))
        == "this torch build has no FlashAttention SDPA kernels"
    )
    monkeypatch.setattr(torch.backends.cuda, "is_flash_attention_available", lambda: True)
    monkeypatch.setattr(torch.backends.cuda, "flash_sdp_enabled", lambda: False)
    monkeypatch.setattr(torch.backends.cuda, "cudnn_sdp_enabled", lambda: False)
    assert "FLASH_ATTENTION SDPA backend is disabled" in sdpa.SDPAFlashProvider().availability(torch.device("cuda", 0))
    assert "CUDNN_ATTENTION SDPA backend is disabled" in sdpa.SDPACuDNNProvider().availability(torch.device("cuda", 0))


def test_sdpa_trial_failure_is_the_reason_and_cached(monkeypatch):
    _fake_gpu(monkeypatch)
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(sdpa._DenseSDPA, "_trial", {})
    tries = []

    def trial(self, device):
        tries.append(device)
        return {"fwd": "the CUDNN_ATTENTION SDPA backend is not usable on X: trial call failed (boom)", "bwd": "same"}

    monkeypatch.setattr(sdpa.SDPACuDNNProvider, "_trial_call", trial)
    p = sdpa.SDPACuDNNProvider()
    for _ in range(3):
        assert "trial call failed" in p.availability(torch.device("cuda", 0))
    assert len(tries) == 1


def test_sdpa_backward_failure_makes_bwd_modes_unsupported(monkeypatch):
    monkeypatch.setattr(
        sdpa._DenseSDPA, "_bwd_reason", lambda self, device: "the FLASH_ATTENTION SDPA backward is not usable on X"
    )
    b = make_batch([16, 16], [16, 16], H=4, D=64)
    p = sdpa.SDPAFlashProvider()
    assert p.unsupported(b, CaseSpec(mode="fwd")) is None
    for mode in ("bwd", "fwd_bwd"):
        assert p.unsupported(b, CaseSpec(mode=mode)) == "the FLASH_ATTENTION SDPA backward is not usable on X"


@pytest.mark.parametrize("cls", SDPA_CLASSES)
def test_sdpa_unsupported_reasons(cls):
    p = cls()
    full = make_batch([16, 16], [16, 16], H=4, Hkv=2, D=64)
    assert p.unsupported(full, CaseSpec(causal=True)) is None
    jagged = make_batch([16, 9], [16, 12], H=4, D=64)
    assert (
        p.unsupported(jagged, CaseSpec())
        == "dense SDPA backend cannot mask padded keys; jagged lengths (fill < 1) need a varlen kernel"
    )
    kv_short = make_batch([16, 16], [8, 8], H=4, D=64)  # the peer's set 2: fine without causal
    assert p.unsupported(kv_short, CaseSpec()) is None
    assert p.unsupported(kv_short, CaseSpec(causal=True)) == sdpa.CAUSAL_REASON
    assert "head dim 100 not supported" in p.unsupported(make_batch([4], [4], H=2, D=100), CaseSpec())
    assert "head dim 512 not supported" in p.unsupported(make_batch([4], [4], H=2, D=512), CaseSpec())
    assert p.unsupported(make_batch([4], [4], H=2, D=64, dtype=torch.float32), CaseSpec()).endswith(
        "runs fp16/bf16 only, not float32"
    )


def test_dense_views_roundtrip_and_refuse_jagged():
    b = make_batch([5, 5, 5], [7, 7, 7], H=4, Hkv=2, D=8, dtype=torch.float32)
    q4 = sdpa.to_dense(b.q, b.B, b.max_q)
    assert q4.shape == (3, 4, 5, 8) and q4.data_ptr() == b.q.data_ptr()  # a view, no copy
    for i in range(3):
        assert torch.equal(q4[i].transpose(0, 1), b.q[b.q_rows(i)])
    assert torch.equal(sdpa.from_dense(q4), b.q)
    assert sdpa.is_full_length(b)
    jag = make_batch([5, 3], [7, 7], H=4, D=8)
    assert not sdpa.is_full_length(jag)
    with pytest.raises(ValueError, match="full-length"):
        sdpa.to_dense(jag.q, jag.B, jag.max_q)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Hkv", [4, 2, 1])
@pytest.mark.parametrize("lk", [6, 9])
def test_dense_sdpa_math_backend_matches_reference(causal, Hkv, lk):
    """The providers' forward path (views + SDPA + unview) on CPU, with the math backend."""
    from torch.nn.attention import SDPBackend

    lq = 6
    lk = lq if causal else lk
    b = make_batch([lq] * 3, [lk] * 3, H=4, Hkv=Hkv, D=16, dtype=torch.float64, seed=3).with_grad()
    spec = CaseSpec(causal=causal, softmax_scale=0.37)
    out = sdpa.dense_sdpa(b, spec, [SDPBackend.MATH])
    ref, grads = reference_outputs(b, spec, "softmax", dtype=torch.float64, grads=True)
    assert out.shape == b.q.shape
    assert rel_err(out, ref) < 1e-12
    got = torch.autograd.grad(out, (b.q, b.k, b.v), b.dout.to(out.dtype))
    for g, r, t in zip(got, grads, (b.q, b.k, b.v), strict=True):
        assert g.shape == t.shape
        assert rel_err(g, r) < 1e-12


def test_dense_sdpa_gqa_without_enable_gqa(monkeypatch):
    """Older torch (no enable_gqa): k/v are expanded inside forward, same result."""
    from torch.nn.attention import SDPBackend

    monkeypatch.setattr(sdpa, "HAS_ENABLE_GQA", False)
    b = make_batch([5, 5], [5, 5], H=6, Hkv=2, D=8, dtype=torch.float64)
    out = sdpa.dense_sdpa(b, CaseSpec(causal=True), [SDPBackend.MATH])
    ref, _ = reference_outputs(b, CaseSpec(causal=True), "softmax", dtype=torch.float64)
    assert rel_err(out, ref) < 1e-12


def test_sdpa_has_enable_gqa_here():
    assert sdpa.HAS_ENABLE_GQA  # torch >= 2.5


# ---------------------------------------------------------------------------------------------------
# softmax reference against torch's math SDPA


def _math_sdpa(q, k, v, **kw):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q, k, v, **kw)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Hkv", [4, 1])
def test_softmax_reference_vs_sdpa_full_length(causal, Hkv):
    B, L, H, D = 3, 11, 4, 16
    b = make_batch([L] * B, [L] * B, H=H, Hkv=Hkv, D=D, dtype=torch.float64, seed=7)
    spec = CaseSpec(causal=causal)
    ref, grads = reference_outputs(b, spec, "softmax", dtype=torch.float64, grads=True)
    q, k, v = (t.detach().view(B, L, -1, D).transpose(1, 2).requires_grad_() for t in (b.q, b.k, b.v))
    o = _math_sdpa(q, k, v, is_causal=causal, enable_gqa=Hkv != H)
    o_j = o.transpose(1, 2).reshape(B * L, H, D)
    assert rel_err(o_j, ref) < 1e-12
    dq, dk, dv = torch.autograd.grad(o_j, (q, k, v), b.dout.double())
    for g, r in zip((dq, dk, dv), grads, strict=True):
        assert rel_err(g.transpose(1, 2).reshape(r.shape), r) < 1e-12


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_reference_vs_sdpa_jagged_per_sequence(causal):
    """Jagged batch (zero-length and Lq != Lk included): each sequence on its own through SDPA, with an
    explicit bottom-right causal mask, against the batched reference."""
    ql = [5, 0, 9, 4, 1, 7]
    kl = [5, 3, 12, 4, 6, 0] if not causal else [8, 0, 12, 4, 6, 7]
    H, Hkv, D = 4, 2, 8
    b = make_batch(ql, kl, H=H, Hkv=Hkv, D=D, dtype=torch.float64, seed=11)
    spec = CaseSpec(causal=causal, softmax_scale=0.5)
    ref, grads = reference_outputs(b, spec, "softmax", dtype=torch.float64, grads=True)
    outs, dqs, dks, dvs = [], [], [], []
    for i in range(b.B):
        qs, ks = b.q_rows(i), b.kv_rows(i)
        lq, lk = ql[i], kl[i]
        q = b.q[qs].detach().transpose(0, 1)[None].requires_grad_()
        k = b.k[ks].detach().transpose(0, 1)[None].requires_grad_()
        v = b.v[ks].detach().transpose(0, 1)[None].requires_grad_()
        if lq == 0 or lk == 0:  # nothing to attend to: output rows (if any) are zero, grads zero
            outs.append(torch.zeros(lq, H, D, dtype=torch.float64))
            dqs.append(torch.zeros(lq, H, D, dtype=torch.float64))
            dks.append(torch.zeros(lk, Hkv, D, dtype=torch.float64))
            dvs.append(torch.zeros(lk, Hkv, D, dtype=torch.float64))
            continue
        mask = None
        if causal:
            assert lq <= lk  # no fully masked rows (SDPA would give NaN there)
            mask = torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)
        o = _math_sdpa(q, k, v, attn_mask=mask, scale=0.5, enable_gqa=True)[0].transpose(0, 1)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), b.dout[qs].double())
        outs.append(o.detach())
        dqs.append(dq[0].transpose(0, 1))
        dks.append(dk[0].transpose(0, 1))
        dvs.append(dv[0].transpose(0, 1))
    assert rel_err(torch.cat(outs), ref) < 1e-12
    for mine, r in zip((dqs, dks, dvs), grads, strict=True):
        assert rel_err(torch.cat(mine), r) < 1e-12


def test_softmax_reference_causal_is_bottom_right():
    b = make_batch([2], [5], H=1, D=4, dtype=torch.float64)
    spec = CaseSpec(causal=True)
    ref, _ = reference_outputs(b, spec, "softmax", dtype=torch.float64)
    # row 0 sees keys 0..3, row 1 sees all 5 keys (bottom-right); top-left would give 1 and 2 keys
    q, k, v = b.q[:, 0], b.k[:, 0], b.v[:, 0]
    s = (q @ k.T) / math.sqrt(4)
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    expect = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v
    assert rel_err(ref[:, 0], expect) < 1e-12


# ---------------------------------------------------------------------------------------------------
# torch_varlen

V213_PARAMS = {
    n: None
    for n in (
        "query",
        "key",
        "value",
        "cu_seq_q",
        "cu_seq_k",
        "max_q",
        "max_k",
        "return_aux",
        "scale",
        "window_size",
        "enable_gqa",
        "seqused_k",
        "block_table",
        "num_splits",
    )
}
V211_PARAMS = {
    n: None
    for n in ("query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k", "return_aux", "scale", "window_size")
}  # torch 2.11 (read on the H200)
V_FIRST_PARAMS = {
    n: None for n in ("query", "key", "value", "cu_seq_q", "cu_seq_k", "max_q", "max_k", "is_causal", "return_aux")
}


def test_torch_varlen_signature_here():
    fn, reason = tv._load()
    assert reason is None and fn is not None
    params = tv._params()
    for name in ("cu_seq_q", "cu_seq_k", "max_q", "max_k", "scale", "window_size", "enable_gqa"):
        assert name in params


def test_torch_varlen_no_cuda_reason(monkeypatch):
    _no_cuda(monkeypatch)
    assert tv.TorchVarlenProvider().availability(torch.device("cuda")) == "CUDA not available"


def test_torch_varlen_missing_module_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.nn.attention.varlen", None)
    tv._load.cache_clear()
    tv._params.cache_clear()
    try:
        reason = tv.TorchVarlenProvider().availability(torch.device("cuda"))
        assert reason == (
            f"torch {torch.__version__} has no torch.nn.attention.varlen "
            "(PyTorch's varlen attention needs a newer torch)"
        )
    finally:
        monkeypatch.undo()
        tv._load.cache_clear()
        tv._params.cache_clear()
    assert tv._load()[0] is not None


def test_torch_varlen_old_gpu_reason(monkeypatch):
    _fake_gpu(monkeypatch, cap=(7, 5), name="Tesla T4")
    reason = tv.TorchVarlenProvider().availability(torch.device("cuda", 0))
    assert reason == ("needs an NVIDIA GPU of compute capability >= 8.0 (FlashAttention-2); found Tesla T4 sm_75")


def test_torch_varlen_kwargs_current_signature():
    b = make_batch([3, 4], [5, 6], H=4, Hkv=2, D=64)
    kw, reason = tv.varlen_kwargs(b, CaseSpec(causal=True, softmax_scale=0.2), V213_PARAMS)
    assert reason is None
    assert kw == {"window_size": (-1, 0), "scale": 0.2, "enable_gqa": True}
    kw, _ = tv.varlen_kwargs(make_batch([3], [3], H=2, D=64), CaseSpec(), V213_PARAMS)
    assert kw == {"scale": 1 / 8}


def test_torch_varlen_kwargs_torch_211_signature():
    mha = make_batch([3, 4], [5, 6], H=4, D=64)
    kw, reason = tv.varlen_kwargs(mha, CaseSpec(causal=True, softmax_scale=0.2), V211_PARAMS)
    assert reason is None and kw == {"window_size": (-1, 0), "scale": 0.2}
    gqa = make_batch([3, 4], [5, 6], H=4, Hkv=1, D=64)
    kw, reason = tv.varlen_kwargs(gqa, CaseSpec(), V211_PARAMS)
    assert kw is None
    assert reason == f"torch {torch.__version__} varlen_attn has no GQA (enable_gqa); Hkv=1 < H=4"


def test_torch_varlen_kwargs_first_signature():
    mha = make_batch([3, 4], [5, 6], H=4, D=64)
    kw, reason = tv.varlen_kwargs(mha, CaseSpec(causal=True), V_FIRST_PARAMS)
    assert reason is None and kw == {"is_causal": True}
    kw, reason = tv.varlen_kwargs(mha, CaseSpec(softmax_scale=0.2), V_FIRST_PARAMS)
    assert kw is None and "has no scale argument" in reason
    gqa = make_batch([3, 4], [5, 6], H=4, Hkv=2, D=64)
    kw, reason = tv.varlen_kwargs(gqa, CaseSpec(), V_FIRST_PARAMS)
    assert kw is None and "has no GQA" in reason
    p = tv.TorchVarlenProvider()
    tv._params.cache_clear()
    try:
        import unittest.mock as um

        with um.patch.object(tv, "_params", lambda: V_FIRST_PARAMS):
            assert "has no GQA" in p.unsupported(gqa, CaseSpec())
    finally:
        tv._params.cache_clear()


def test_torch_varlen_unsupported_reasons(monkeypatch):
    p = tv.TorchVarlenProvider()
    jag = make_batch([3, 0, 9], [5, 2, 9], H=4, Hkv=1, D=128)
    assert p.unsupported(jag, CaseSpec(causal=True, mode="fwd_bwd")) is None  # no CUDA: no trial here
    assert "head dim 100" in p.unsupported(make_batch([3], [3], H=2, D=100), CaseSpec())
    assert "head dim 512" in p.unsupported(make_batch([3], [3], H=2, D=512), CaseSpec())
    assert (
        p.unsupported(make_batch([3], [3], H=2, D=64, dtype=torch.float32), CaseSpec())
        == "varlen_attn runs fp16/bf16 only, not float32"
    )
    monkeypatch.setattr(
        tv.TorchVarlenProvider, "_bwd_reason", lambda self, device: "torch X varlen_attn has no working backward: boom"
    )
    for mode in ("bwd", "fwd_bwd"):
        assert "no working backward" in p.unsupported(jag, CaseSpec(mode=mode))
    assert p.unsupported(jag, CaseSpec(mode="fwd")) is None


def test_torch_varlen_forward_plumbing(monkeypatch):
    seen = {}

    def fake(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, **kw):
        seen.update(cu_seq_q=cu_seq_q, cu_seq_k=cu_seq_k, max_q=max_q, max_k=max_k, **kw)
        return query * 0 + 1

    monkeypatch.setattr(tv, "_load", lambda: (fake, None))
    monkeypatch.setattr(tv, "_params", lambda: V213_PARAMS)
    b = make_batch([3, 0, 9], [5, 2, 9], H=4, Hkv=2, D=64)
    out = tv.TorchVarlenProvider().forward(b, CaseSpec(causal=True))
    assert out.shape == b.q.shape
    assert seen["cu_seq_q"] is b.q_offsets and seen["cu_seq_k"] is b.kv_offsets
    assert (seen["max_q"], seen["max_k"]) == (9, 9)
    assert seen["window_size"] == (-1, 0) and seen["enable_gqa"] is True
    assert seen["scale"] == pytest.approx(1 / 8)


# ---------------------------------------------------------------------------------------------------
# GPU: every available provider against the fp32 reference (bf16, rel Frobenius <= 2e-2)


def _poison_cuda_allocator():
    """Fill the caching allocator's free memory with NaN so an unwritten output row shows up."""
    x = torch.full((64 << 20,), float("nan"), dtype=torch.float32, device="cuda")
    del x


def _check_provider(p, batch, spec):
    reason = p.availability(batch.device)
    if reason:
        pytest.skip(f"{p.name}: {reason}")
    for mode in ("fwd", "bwd"):
        reason = p.unsupported(batch, dataclasses.replace(spec, mode=mode))
        assert reason is None, f"{p.name} unexpectedly unsupported: {reason}"
    ref, grads = reference_outputs(batch, spec, "softmax", grads=True)
    _poison_cuda_allocator()
    out = p.build(batch, dataclasses.replace(spec, mode="fwd"), "fwd")()
    torch.cuda.synchronize()
    assert out.shape == batch.q.shape and out.dtype == batch.q.dtype
    assert torch.isfinite(out).all(), f"{p.name}: NaN/Inf in output"
    assert rel_err(out.float(), ref) <= TOL
    _poison_cuda_allocator()
    got = p.build(batch, dataclasses.replace(spec, mode="bwd"), "bwd")()
    torch.cuda.synchronize()
    for name, g, r in zip(("dq", "dk", "dv"), got, grads, strict=True):
        assert g.shape == r.shape, f"{p.name} {name} shape"
        assert torch.isfinite(g).all(), f"{p.name}: NaN/Inf in {name}"
        assert rel_err(g.float(), r) <= TOL, f"{p.name} {name}: {rel_err(g.float(), r)}"
    _poison_cuda_allocator()
    got = p.build(batch, dataclasses.replace(spec, mode="fwd_bwd"), "fwd_bwd")()
    for name, g, r in zip(("dq", "dk", "dv"), got, grads, strict=True):
        assert torch.isfinite(g).all() and rel_err(g.float(), r) <= TOL, f"{p.name} fwd_bwd {name}"


JAGGED_Q = [37, 1, 128, 200, 64, 3, 150, 90]
JAGGED_KV = [37, 17, 128, 256, 64, 40, 150, 90]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fa4", "torch_varlen"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("Hkv", [4, 2])
@pytest.mark.parametrize("D", [64, 128])
def test_gpu_varlen_providers_jagged(name, causal, Hkv, D):
    p = registry._REGISTRY[name]()
    seed = int(torch.randint(0, 2**31 - 1, ()).item())  # fresh inputs each run
    b = make_batch(JAGGED_Q, JAGGED_KV, H=4, Hkv=Hkv, D=D, dtype=torch.bfloat16, device="cuda", seed=seed)
    if name == "torch_varlen" and Hkv != 4 and "enable_gqa" not in tv._params():
        # torch 2.11's varlen_attn has no enable_gqa: the case must be declared unsupported, not run
        assert "has no GQA" in p.unsupported(b, CaseSpec(causal=causal))
        pytest.skip(f"torch {torch.__version__} varlen_attn has no GQA")
    _check_provider(p, b, CaseSpec(causal=causal))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fa4", "torch_varlen"])
def test_gpu_varlen_providers_zero_length_sequences(name):
    p = registry._REGISTRY[name]()
    b = make_batch([5, 0, 70, 0, 33], [9, 4, 70, 0, 40], H=4, D=128, dtype=torch.bfloat16, device="cuda", seed=5)
    _check_provider(p, b, CaseSpec())


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sdpa_flash", "sdpa_cudnn"])
@pytest.mark.parametrize("causal,lq,lk", [(False, 128, 128), (True, 256, 256), (False, 96, 256)])
@pytest.mark.parametrize("Hkv", [4, 2])
def test_gpu_sdpa_full_length(name, causal, lq, lk, Hkv):
    p = registry._REGISTRY[name]()
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    b = make_batch([lq] * 6, [lk] * 6, H=4, Hkv=Hkv, D=128, dtype=torch.bfloat16, device="cuda", seed=seed)
    _check_provider(p, b, CaseSpec(causal=causal))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sdpa_flash", "sdpa_cudnn"])
def test_gpu_sdpa_skips_jagged(name):
    p = registry._REGISTRY[name]()
    b = make_batch(JAGGED_Q, JAGGED_KV, H=4, D=128, dtype=torch.bfloat16, device="cuda")
    assert p.unsupported(b, CaseSpec()) == sdpa.JAGGED_REASON
