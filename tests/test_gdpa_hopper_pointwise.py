"""What the Hopper backward's pointwise costs in FP32 instructions a score, read from the cross-compiled sm_90a
code (no GPU): P' leaves alpha*qk_scale*p_fold to dV (activations.py), so fast_gelu's pointwise is 9 FP32 ops a
score where P = qk*act took 10, silu's 5 where it took 8, fast_silu's 6 where it took 7 (each + 1 for dS = G*dP).
The gradients themselves are checked on the H200 by tests/test_gdpa_hopper.py's `test_matches_fp32_reference`
(every activation)."""

import re

import pytest

from tests.hopper_sass import backward_sass

SCORES = 32  # a thread's scores per query block: the split plan's 64x128 block over 256 MMA threads


def pointwise_fp32(sass: str) -> int:
    """FFMA + FMUL + FADD from the wait under the dP GEMM (the first `gsb0, 0x1` wait after the second 64x64
    HGMMA group: S, then dP) to the dV GEMM (the first 64x128 HGMMA): the pointwise, the mask branch and dS."""
    lines, groups, start = sass.splitlines(), 0, None
    for i, line in enumerate(lines):
        if re.search(r"HGMMA\.64x64\S* .*\bgsb0\b", line):
            groups += 1
        if start is None and groups == 2 and "WARPGROUP.DEPBAR.LE gsb0, 0x1" in line:
            start = i
        if start is not None and re.search(r"HGMMA\.64x128", line):
            return sum(1 for ln in lines[start:i] if re.search(r"\b(FFMA|FMUL|FADD)\b", ln))
    raise AssertionError("no dP wait followed by a dV GEMM in this SASS")


@pytest.mark.parametrize(("activation", "per_score"), [("fast_gelu", 9), ("silu", 5), ("fast_silu", 6)])
def test_the_backward_pointwise_fp32_ops_a_score(tmp_path, activation, per_score):
    """At most the activation's ops + 1 (dS) a score, with half an op a score of slack for address and mask
    arithmetic. Measured: fast_gelu 328, silu 193, fast_silu 226; with P = qk*act(alpha*s) (before P') 361, 290, 259."""
    found = pointwise_fp32(backward_sass(tmp_path / "sass", activation))
    assert found <= SCORES * (per_score + 1.5), found


@pytest.mark.parametrize("name", ["gelu_tanh", "fast_gelu", "fast_silu", "silu", "gelu"])
def test_the_derivative_holds_at_large_scores_in_fp32(name):
    """act'(alpha*s) in fp32, as the kernel computes it, for alpha*s up to 3000: where t = tanh(.) is 1 the GELU
    forms' derivative is exactly 1 (a form adding a = P'(hK0 + hca s^2) to 0.5 before t multiplies rounded it to 0
    or 2 once a passed 2^23, alpha*s ~ 430: dQ and dK half wrong at such scores)."""
    import torch

    from kernels.gdpa.hopper import activations as hopper_acts
    from tests.test_gdpa_hopper import TorchOps, _reference

    act = hopper_acts.build(name, TorchOps())
    for alpha in (1.0, 0.125):
        s = torch.linspace(-3000.0, 3000.0, 60001, dtype=torch.float32) / alpha
        r = act.backward_row(act.backward_setup(torch.tensor(alpha, dtype=torch.float32)), torch.tensor(1.0))
        _, g = act.backward(s, tuple(torch.as_tensor(c, dtype=torch.float32) for c in r))
        _, ref_g = _reference(name, alpha * s.double())
        worst = float((g.double() - ref_g).abs().max())
        assert worst <= 1e-5, f"{name} alpha {alpha}: act' off by {worst}"
