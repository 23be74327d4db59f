"""Peer providers on a GPU (`pytest -m gpu`): the real peers' code from `.peers/` (README "Peer kernels"),
each checked against our fp32 reference by the correctness gate on jagged edge lengths, forward and backward.
A peer that cannot run here (no checkout, no sm100, no Triton fork) skips with its provider's reason.
The full comparison with timings is docs/experiments/peers_gpu.py."""

import pytest
import torch

from bench.case.gate import correctness
from kernels import meta_gdpa
from kernels.registry import CaseSpec, get_provider
from workloads.batch import make_batch

pytestmark = pytest.mark.gpu
EDGE = [0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 300]


def provider_here(name, options=None):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    p = get_provider(name, options)
    reason = p.availability(torch.device("cuda"))
    if reason:
        pytest.skip(reason)
    return p


def check(p, batch, spec, mode):
    assert p.unsupported(batch, spec) is None
    res = correctness(p, batch, spec, mode, 2e-2, batch.B, 0)
    assert res["passed"], res


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("activation", ["fast_gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("options", [{}, {"enable_tma": True, "bwd_opt_tech": "tma"}], ids=["base", "tma"])
def test_meta_gdpa_matches_the_reference(mode, activation, options):
    """Heads sharing K/V (GQA), where Meta's backward adds dK/dV atomically: its autotuner restores them
    between configs only through the provider (meta_gdpa.restore_accumulators; the first backward failed the
    gate on the H200 without it). Its TMA backward needs its fork's `store_reduce`: on stock Triton the case
    is unsupported with that reason, which the test checks before it skips."""
    p = provider_here("meta_gdpa", options)
    b = make_batch(EDGE, EDGE[::-1], H=4, Hkv=2, D=128, dtype=torch.bfloat16, device="cuda", seed=1)
    spec = CaseSpec(mode=mode, activation=activation, qk_scale=0.5)
    if mode == "bwd" and options and meta_gdpa.store_reduce_reason():
        assert p.unsupported(b, spec) == meta_gdpa.store_reduce_reason()
        pytest.skip(p.unsupported(b, spec))
    check(p, b, spec, mode)


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("causal", [False, True])
def test_flex_attention_matches_softmax(mode, causal):
    p = provider_here("flex_attention")
    b = make_batch(EDGE, EDGE[::-1], H=4, Hkv=2, D=128, dtype=torch.bfloat16, device="cuda", seed=3)
    check(p, b, CaseSpec(mode=mode, causal=causal), mode)


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
def test_meta_gdpa_cute_matches_the_reference(mode):
    p = provider_here("meta_gdpa_cute")
    b = make_batch(EDGE, EDGE[::-1], H=4, D=128, dtype=torch.bfloat16, device="cuda", seed=4)
    check(p, b, CaseSpec(mode=mode, activation="fast_gelu"), mode)


@pytest.mark.parametrize("mode", ["fwd", "bwd"])
@pytest.mark.parametrize("D", [64, 128])
def test_hstu_matches_causal_silu_gdpa(mode, D):
    # last in the file: HSTU's kernel has faulted the GPU on some lengths (issue 23), which poisons the process
    p = provider_here("hstu")
    b = make_batch(EDGE, EDGE, H=2, D=D, dtype=torch.bfloat16, device="cuda", seed=2)
    spec = CaseSpec(mode=mode, activation="silu", alpha=D**-0.5, qk_scale=1 / 320, causal=True)
    check(p, b, spec, mode)
