"""The op's entry as users meet it (kernels/gdpa/interface.py): inputs the argument checks let through must
still be computed right, and the ones they cannot compute right must raise one line naming the argument.
Each case here came from a review of the op (2026-12-04): a strided offsets view read other entries, a
double backward returned zeros, `causal="False"` meant causal, and a CPU without the interpreter failed deep
inside Triton under the default backend.

CPU: the Triton interpreter (TRITON_INTERPRET=1, set by conftest), fp32. GPU (`-m gpu`): the same on the H200
in bf16, where a strided offsets view would read past the batch.
"""

from __future__ import annotations

import pytest
import torch

from kernels.gdpa import GDPAOptions, choice, gdpa
from kernels.reference import reference_outputs
from kernels.registry import CaseSpec
from workloads import make_batch

BACKENDS = [GDPAOptions(), GDPAOptions(backend="triton"), GDPAOptions(backend="packed")]


def _batch(device="cpu", dtype=torch.float32, lengths=(5, 9, 0, 3)):
    return make_batch(list(lengths), list(lengths), H=2, Hkv=2, D=16, dtype=dtype, device=device, seed=3)


def _strided(offsets: torch.Tensor) -> torch.Tensor:
    """The same values as a column of a [B+1, 2] table, its other column poison: stride 2."""
    table = torch.stack([offsets, torch.full_like(offsets, 10_000)], dim=1)
    view = table[:, 0]
    assert view.stride(0) == 2 and torch.equal(view, offsets)
    return view


@pytest.mark.parametrize("options", BACKENDS, ids=lambda o: o.backend)
def test_a_strided_offsets_view_is_computed_as_its_values_say(options):
    b = _batch()
    m = int(max(b.q_lengths))
    want = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, m, m, activation="raw", options=options)
    off = _strided(b.q_offsets)
    got = gdpa(b.q, b.k, b.v, off, _strided(b.kv_offsets), m, m, activation="raw", options=options, validate="full")
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_double_backward_raises_instead_of_returning_zeros():
    b = _batch()
    q, k, v = (t.clone().requires_grad_(True) for t in (b.q, b.k, b.v))
    m = int(max(b.q_lengths))
    out = gdpa(q, k, v, b.q_offsets, b.kv_offsets, m, m, activation="gelu")
    (g,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
    # a gradient penalty's backward (torch's once_differentiable convention: the error comes when a backward
    # reaches the second-order term, as loss.backward() does; before, it returned zeros for it)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        (g.square().sum() + out.sum()).backward()


@pytest.mark.parametrize(
    "over,msg",
    [
        (dict(causal="False"), "causal must be True or False, got 'False'"),
        (dict(causal=None), "causal must be True or False, got None"),
        (dict(alpha=True), "alpha must be a real number, got True"),
        (dict(record=[]), "record must be a dict or None, got list"),
    ],
)
def test_arguments_of_the_wrong_kind_raise_one_line(over, msg):
    b = _batch()
    with pytest.raises(ValueError) as exc:
        gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, 9, 9, **over)
    assert msg in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(ValueError, match=r"^gdpa: q: dtype torch.float64 not supported"):
        gdpa(b.q.double(), b.k.double(), b.v.double(), b.q_offsets, b.kv_offsets, 9, 9)


def test_the_default_backend_on_a_cpu_without_the_interpreter_says_so(monkeypatch):
    import triton

    b = _batch()
    choice.forget()
    monkeypatch.setattr(triton.knobs.runtime, "interpret", False)
    with pytest.raises(ValueError, match=r"^gdpa: backend='auto' .*set TRITON_INTERPRET=1"):
        gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, 9, 9)
    choice.forget()


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("options", BACKENDS, ids=lambda o: o.backend)
def test_gpu_strided_offsets_views_forward_and_backward(options):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    lengths = (100, 7, 0, 128, 31, 64)
    b = _batch("cuda", torch.bfloat16, lengths)
    bg, m = b.with_grad(), max(lengths)
    kw = dict(activation="fast_gelu", alpha=0.7, qk_scale=0.5, options=options)
    out = gdpa(bg.q, bg.k, bg.v, _strided(b.q_offsets), _strided(b.kv_offsets), m, m, **kw)
    grads = torch.autograd.grad(out, (bg.q, bg.k, bg.v), b.dout)
    spec = CaseSpec(activation="fast_gelu", alpha=0.7, qk_scale=0.5)
    ref, rgrads = reference_outputs(b, spec, grads=True)
    for name, got, want in zip(("out", "dq", "dk", "dv"), (out, *grads), (ref, *rgrads), strict=True):
        err = ((got.float() - want).norm() / want.norm().clamp_min(1e-6)).item()
        assert err <= 3e-3, f"{name}: rel err {err:.2e}"
