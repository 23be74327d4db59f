"""The launch-grid arithmetic the op's launchers use on every call (kernels/gdpa/grid_math.py) gives exactly
what triton.cdiv / triton.next_power_of_2 give, so every grid and autotuning key is the one Triton's own
helpers made."""

import triton

from kernels.gdpa.grid_math import cdiv, next_power_of_2


def test_next_power_of_2_is_tritons_for_every_positive_n():
    ns = list(range(1, 70_000)) + [2**k + d for k in range(17, 48) for d in (-1, 0, 1)]
    assert [next_power_of_2(n) for n in ns] == [triton.next_power_of_2(n) for n in ns]


def test_cdiv_is_tritons():
    pairs = [(a, b) for a in range(0, 5000, 7) for b in (1, 2, 3, 16, 64, 80, 128, 1000, 1024)]
    pairs += [(2**40 + 1, 128), (2**40, 128)]
    assert [cdiv(a, b) for a, b in pairs] == [triton.cdiv(a, b) for a, b in pairs]


def test_the_launchers_key_and_grid_with_them():
    """tuning_key's buckets are powers of two >= 16, as before (the autotuners' caches key on them)."""
    import torch

    from kernels.gdpa import launch
    from kernels.gdpa.bands import WHOLE, Band
    from kernels.gdpa.call import GDPACall

    q = torch.zeros(3000, 4, 16)
    offsets = torch.tensor([0, 1000, 3000], dtype=torch.int32)
    call = GDPACall(q, q, q, offsets, offsets, 2000, 2000)
    assert launch.tuning_key(call, WHOLE) == dict(
        max_q_bucket=2048, max_kv_bucket=2048, rows_q_bucket=4096, rows_kv_bucket=4096, band_lo=0,
        band_hi=Band().hi_arg,
    )  # fmt: skip
    assert launch.tuning_key(call, Band(0, 9))["max_q_bucket"] == 16  # a band's bound, floored at 16
