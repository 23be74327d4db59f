"""The Hopper backward's paired query blocks (kernels/gdpa/hopper/bwd.py `pair_blocks`), checked without a GPU:
the block range it pairs over is FA4's, the plans that pair, and in the cross-compiled sm_90a code a block's dK
GEMM still in flight when the next block's S and dP GEMMs issue. The numbers themselves are checked on the H200 by
tests/test_gdpa_hopper.py's `test_matches_fp32_reference` (every split case runs paired blocks)."""

import importlib.util
import re

import pytest

from tests.hopper_sass import backward_sass

needs_fa4 = pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="needs flash-attn-4 (fa4 extra)")


@needs_fa4
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("tile_m", "tile_n"), [(64, 128), (80, 128), (128, 128)])
def test_the_paired_block_range_is_fa4s(causal, tile_m, tile_n):
    """The pairing counts blocks from the first FA4's loop runs: m_block_range must be FA4's own
    BlockInfo.get_m_block_min_max (its Python body, run on ints) for every length pair and key tile."""
    from types import SimpleNamespace

    from flash_attn.cute.block_info import BlockInfo

    from kernels.gdpa.hopper.bwd import m_block_range

    fa4 = BlockInfo.get_m_block_min_max.__wrapped__
    info = BlockInfo(tile_m, tile_n, causal, False, False, None, None)
    lengths = (0, 1, 63, 64, 65, 127, 128, 129, 200, 257, 640)
    for seqlen_q in lengths:
        for seqlen_k in lengths:
            for n_block in range(max(1, -(-seqlen_k // tile_n))):
                want = fa4(info, SimpleNamespace(seqlen_q=seqlen_q, seqlen_k=seqlen_k), n_block)
                got = m_block_range(seqlen_q, seqlen_k, n_block, tile_m, tile_n, causal)
                assert tuple(got) == tuple(want), (seqlen_q, seqlen_k, n_block)


@needs_fa4  # kernels.gdpa.hopper.launch imports the CuTe DSL
def test_the_split_plans_pair_blocks_and_the_fused_ones_do_not():
    """Paired fused plans serialize every wgmma in ptxas (the 80x128 and head-dim-64 ones: 64-68 full waits where
    unpaired has 2, PERF.md), so only the split 64x128 plans pair."""
    from kernels.gdpa.hopper.launch import backward_plan

    for causal in (False, True):
        plan = backward_plan(128, causal, 2048, 2048)
        assert plan.split and plan.pairs and plan.variant == "split64x2"
    assert backward_plan(128, False, 2048, 256).pairs  # long queries too (the A/B patch)
    assert not backward_plan(64, False, 2048, 2048).pairs  # head dim 64: fused 128x128


@needs_fa4
def test_pairing_refuses_a_single_q_slot():
    """Block m holds its Q slot while block m+1 waits for its own: with one slot the load warp could never refill
    it (a hang on the GPU), so the kernel refuses to be built that way."""
    import dataclasses

    import cutlass

    from kernels.gdpa.hopper import activations
    from kernels.gdpa.hopper.bwd import GDPABackwardSm90
    from kernels.gdpa.hopper.device_ops import DEVICE_OPS
    from kernels.gdpa.hopper.launch import backward_plan

    cfg = backward_plan(128, False, 2048, 2048).cfg
    act = activations.build("fast_gelu", DEVICE_OPS)
    build = dict(activation=act, is_causal=False, split_pointwise=True)
    GDPABackwardSm90(cutlass.BFloat16, 128, 1, cfg=cfg, pair_blocks=True, **build)
    one_slot = dataclasses.replace(cfg, num_stages_Q=1, num_stages_dO=1, num_stages_PdS=1)  # FA4: dO, PdS <= Q
    GDPABackwardSm90(cutlass.BFloat16, 128, 1, cfg=one_slot, pair_blocks=False, **build)
    with pytest.raises(AssertionError, match="Q_stage >= 2"):
        GDPABackwardSm90(cutlass.BFloat16, 128, 1, cfg=one_slot, pair_blocks=True, **build)


def _full_waits_and_runs(sass: str) -> tuple[int, int]:
    """(wgmma full waits, the most wgmma groups issued between two of them) in the MMA warpgroups' code."""
    waits, groups, longest = 0, 0, 0
    for line in sass.splitlines():
        if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line:
            waits, groups = waits + 1, 0
        elif re.search(r"\bHGMMA\.\S+ .*\bgsb0\b", line):  # the last HGMMA of a group carries gsb0
            groups += 1
            longest = max(longest, groups)
    return waits, longest


@pytest.mark.parametrize(("activation", "causal"), [("fast_gelu", False), ("silu", True)])
def test_a_paired_block_leaves_its_dk_gemm_in_flight_under_the_next_blocks_s_and_dp(tmp_path, activation, causal):
    """Cross-compiled for sm_90a, disassembled with Triton's cuobjdump. One block per loop step: ptxas waits for
    every wgmma group at the loop's back edge, so at most 3 groups issue between full waits (dV, dQ, dK after
    the dP wait). Paired: block m's dV, dQ, dK and block m+1's S, dP issue before the next full wait (5), and
    the kernel has at most twice the unpaired full waits (a serialized schedule has one per GEMM)."""
    found = {
        pairs: _full_waits_and_runs(
            backward_sass(tmp_path / str(pairs), activation, causal, plan_changes={"pairs": pairs})
        )
        for pairs in (True, False)
    }
    (waits_1, run_1), (waits_2, run_2) = found[False], found[True]
    assert run_1 == 3, found
    assert run_2 == 5, found
    assert waits_2 <= 2 * waits_1, found
