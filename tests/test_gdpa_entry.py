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


# ---------------------------------------------------------------- the second review (2026-12-05)


def test_the_op_is_not_traced_by_torch_compile():
    """TorchDynamo traced into the Triton launches and the compiled forward came back unwritten (the H200): the
    op is opaque to it, so a compiled function computes what the eager call does."""
    b = _batch()
    m = int(max(b.q_lengths))

    def f(q, k, v):
        return gdpa(q, k, v, b.q_offsets, b.kv_offsets, m, m, activation="gelu", options=GDPAOptions(backend="triton"))

    want = f(b.q, b.k, b.v)
    got = torch.compile(f, backend="eager")(b.q, b.k, b.v)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_one_strided_view_for_both_offsets_stays_self_attention():
    """The same strided view as q_offsets and kv_offsets: one contiguous copy, so the op still sees one offsets
    tensor (self-attention; packed refused cross-attention longer than 128 when each side got its own copy)."""
    b = _batch(lengths=(150, 9, 0, 3))
    m = int(max(b.q_lengths))
    options = GDPAOptions(backend="packed")
    want = gdpa(b.q, b.k, b.v, b.q_offsets, b.q_offsets, m, m, activation="raw", options=options)
    view = _strided(b.q_offsets)
    got = gdpa(b.q, b.k, b.v, view, view, m, m, activation="raw", options=options)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    table = view._base  # two view objects of one column: the same storage, shape and strides
    got = gdpa(b.q, b.k, b.v, table[:, 0], table[:, 0], m, m, activation="raw", options=options)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_stage_that_raises_still_joins_the_side_streams(monkeypatch):
    """run_concurrently joins every side stream into the caller's even when a stage raises (streams stood in
    for: the order of the calls is what is checked)."""
    from kernels.gdpa import concurrent

    calls = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def wait_stream(self, other):
            calls.append((self.name, "waits", other.name))

    main, side = Stream("main"), Stream("side")
    monkeypatch.setattr(concurrent.torch.cuda, "current_stream", lambda device=None: main)
    monkeypatch.setattr(concurrent, "side_streams", lambda device, n: [side])
    monkeypatch.setattr(concurrent.torch.cuda, "stream", lambda s: __import__("contextlib").nullcontext())

    def fails():
        calls.append("second stage raises")
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        concurrent.run_concurrently(torch.device("cuda"), [lambda: calls.append("first stage"), fails])
    assert calls == [("side", "waits", "main"), "first stage", "second stage raises", ("main", "waits", "side")]


def test_auto_chooses_its_plan_on_the_inputs_device(monkeypatch):
    """backend="auto" times candidates with events on the current device: the choice runs inside the inputs'
    device context (cuda:1 inputs were timed against device 0's idle stream)."""
    from kernels.gdpa import interface

    entered, seen = [], []

    class Device:
        def __init__(self, t):
            self.t = t

        def __enter__(self):
            entered.append("inputs' device")

        def __exit__(self, *exc):
            entered.append("left")

    monkeypatch.setattr(interface, "_on_device_of", Device)
    real = choice.plan_for
    monkeypatch.setattr(choice, "plan_for", lambda *a, **k: (seen.append(list(entered)), real(*a, **k))[1])
    b = _batch()
    m = int(max(b.q_lengths))
    gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, m, m, activation="raw")
    assert seen == [["inputs' device"]]


@pytest.mark.gpu
@pytest.mark.parametrize("options", [GDPAOptions(), GDPAOptions(backend="triton")], ids=lambda o: o.backend)
def test_gpu_a_compiled_model_computes_what_the_eager_op_does(options):
    """torch.compile (inductor) around the op, forward and backward, against the eager call (on the H200 the
    compiled forward was never written; the default options raised about events)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    lengths = (300, 7, 0, 128, 650, 64)
    b = make_batch(list(lengths), list(lengths), H=4, Hkv=2, D=64, dtype=torch.bfloat16, device="cuda", seed=5)
    m = max(lengths)

    def f(q, k, v):
        o = b.q_offsets
        return gdpa(q, k, v, o, o, m, m, activation="gelu", alpha=-0.5, qk_scale=0.7, causal=True, options=options)

    spec = CaseSpec(activation="gelu", alpha=-0.5, qk_scale=0.7, causal=True)
    ref, rgrads = reference_outputs(b, spec, grads=True)
    for fn in (f, torch.compile(f)):
        q, k, v = (t.clone().requires_grad_(True) for t in (b.q, b.k, b.v))
        out = fn(q, k, v)
        grads = torch.autograd.grad(out, (q, k, v), b.dout)
        for name, got, want in zip(("out", "dq", "dk", "dv"), (out, *grads), (ref, *rgrads), strict=True):
            err = ((got.float() - want).norm() / want.norm().clamp_min(1e-6)).item()
            assert err <= 3e-3, f"{fn.__name__ if fn is f else 'compiled'} {name}: rel err {err:.2e}"
