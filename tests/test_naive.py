"""The naive PyTorch baselines compute GDPA exactly (they are baselines, not approximations)."""

import math

import numpy as np
import pytest
import torch

from kernels.naive import naive_gdpa
from kernels.reference import reference_outputs
from kernels.registry import CaseSpec, get_provider
from workloads import make_batch


def rel(a, b):
    a, b = a.double(), b.double()
    e = ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
    return e if math.isfinite(e) else math.inf  # max() skips a NaN that is not first: make it the worst


@pytest.mark.parametrize(
    "act,causal,alpha,qk_scale",
    [
        ("fast_gelu", False, 1.0, 1.0),
        ("fast_gelu", False, 0.6, 1.7),
        ("silu", True, 0.8, 0.5),
        ("relu", False, 1.3, 1.0),
        ("raw", True, 1.0, 2.0),
    ],
)
def test_naive_eager_matches_reference(act, causal, alpha, qk_scale):
    ql = [5, 0, 17, 1, 9]
    kl = ql if causal else [7, 3, 0, 1, 16]
    b = make_batch(ql, kl, H=4, Hkv=2, D=16, dtype=torch.float64, seed=int(np.random.SeedSequence().entropy % 2**31))
    bg = b.with_grad()
    out = naive_gdpa(bg.q, bg.k, bg.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, act, alpha, qk_scale, causal)
    grads = torch.autograd.grad(out, (bg.q, bg.k, bg.v), b.dout)
    spec = CaseSpec(activation=act, alpha=alpha, qk_scale=qk_scale, causal=causal)
    ref, rgrads = reference_outputs(b, spec, grads=True, dtype=torch.float64)
    errs = [rel(out, ref)] + [rel(g, r) for g, r in zip(grads, rgrads, strict=True)]
    assert max(errs) < 1e-10, errs


def test_naive_compiled_backward_replays():
    """`bwd` mode replays one backward graph (retain_graph=True): compiled autograd must allow it."""
    b = make_batch([6, 3], [6, 5], H=2, D=16, dtype=torch.float32, seed=2)
    fn = get_provider("naive_compiled").build(b, CaseSpec(mode="bwd"), "bwd")
    first = [g.clone() for g in fn()]
    second = fn()
    assert all(torch.allclose(x, y) for x, y in zip(first, second, strict=True))
