"""workloads/: length families, pairing rules, sorting, statistics and the histogram (CPU, fast)."""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import pytest
from scipy import stats as sps

import workloads
from workloads import (
    FAMILIES,
    LOGNORMAL_PRESETS,
    PAIRINGS,
    REQUIRED,
    build_lengths,
    check_family_params,
    check_pairing_params,
    family_params,
    length_stats,
    lengths_sha256,
    pair_lengths,
    plot_length_histogram,
    register_family,
    sample_lengths,
    sort_by_length,
    work_pairs,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- registry and determinism


def test_exports_and_registry():
    assert workloads.JaggedBatch and workloads.make_batch  # pre-existing exports kept
    assert set(FAMILIES) == {"uniform_fill", "hstu_sl", "lognormal", "zipf", "spike", "empirical"}
    assert tuple(PAIRINGS) == ("self", "fixed_kv", "target_history", "seeds")
    for name, fam in FAMILIES.items():
        assert fam.sample.__doc__ and len(fam.sample.__doc__) > 80, name  # sources documented
    assert family_params("uniform_fill") == {"fill": REQUIRED}
    assert family_params("zipf") == {"gamma": REQUIRED, "min_len": 1}
    assert family_params("lognormal")["min_len"] == 20
    assert family_params("empirical") == {"path": REQUIRED, "column": None, "user_column": None}


@pytest.mark.parametrize(
    "family,params",
    [
        ("uniform_fill", {"fill": 0.5}),
        ("hstu_sl", {"fill": 0.8, "alpha": 1.7}),
        ("lognormal", {"preset": "ml-20m"}),
        ("zipf", {"gamma": 2.0}),
        ("spike", {"p": 0.05, "base": "zipf", "gamma": 1.7}),
    ],
)
def test_deterministic_and_independent_of_global_state(family, params):
    np.random.seed(1)
    a = sample_lengths(family, 500, 512, 7, **params)
    np.random.seed(2)
    np.random.random(10)
    b = sample_lengths(family, 500, 512, 7, **params)
    c = sample_lengths(family, 500, 512, 8, **params)
    assert a.dtype == np.int64 and a.shape == (500,)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.min() >= 1 and a.max() <= 512


def test_seed_gives_pinned_lengths():
    # PCG64 + Generator.integers: these values must be the same on every machine
    got = sample_lengths("uniform_fill", 8, 1024, 0, fill=0.5)
    assert got.tolist() == GOLDEN_UNIFORM_FILL


GOLDEN_UNIFORM_FILL = [872, 653, 524, 277, 316, 42, 78, 17]


def test_register_a_new_family_in_one_place():
    @register_family("constant_test", value=workloads.params.Param(REQUIRED, workloads.params.integer(0)))
    def constant_test(batch_size, max_len, seed, *, value):
        """Test-only family."""
        return np.full(batch_size, value, dtype=np.int64)

    try:
        assert sample_lengths("constant_test", 3, 10, value=4).tolist() == [4, 4, 4]
        with pytest.raises(RuntimeError, match="outside"):
            sample_lengths("constant_test", 3, 10, value=11)  # the contract guard catches a bad family
        with pytest.raises(ValueError, match="registered twice"):
            register_family("constant_test")(constant_test)
    finally:
        del FAMILIES["constant_test"]


# ---------------------------------------------------------------- uniform_fill (the peer rule)


def test_uniform_fill_full_is_all_n():
    assert (sample_lengths("uniform_fill", 1152, 2048, 3, fill=1.0) == 2048).all()


@pytest.mark.parametrize(
    "fill,n,lo,hi",
    [
        (0.5, 64, 1, 64),  # (2s-1)N = 0 -> max(1, 0) = 1
        (0.75, 100, 50, 100),  # floor(0.5 * 100)
        (0.75, 10, 5, 10),
        (0.3, 100, 1, 60),  # floor(2 * 0.3 * 100)
        (0.3, 1024, 1, 614),  # floor(614.4)
        # the peer computes int((s*2 - 1) * N) in floats: (0.6*2 - 1) = 0.19999999999999996, so 199, not
        # the exact 200; we keep the peer's arithmetic so our batches match its batches
        (0.6, 1000, 199, 1000),
    ],
)
def test_uniform_fill_exact_bounds_both_ends_hit(fill, n, lo, hi):
    L = sample_lengths("uniform_fill", 50_000, n, 0, fill=fill)
    assert L.min() == lo and L.max() == hi
    if hi - lo < 100:  # every value of the inclusive range appears
        assert set(np.unique(L).tolist()) == set(range(lo, hi + 1))


@pytest.mark.parametrize(
    "fill,n,expected",
    [
        (0.3, 1, {1}),
        (0.75, 1, {1}),
        (1.0, 1, {1}),
        (0.1, 2, {1}),  # floor(0.4) = 0 -> at least 1
        (0.75, 3, {1, 2, 3}),  # floor(1.5) = 1
        (0.2, 5, {1, 2}),  # floor(2.0) = 2
    ],
)
def test_uniform_fill_tiny_n(fill, n, expected):
    assert set(sample_lengths("uniform_fill", 2000, n, 0, fill=fill).tolist()) == expected


@pytest.mark.parametrize("fill", [0.1, 0.25, 0.5, 0.75, 0.9, 1.0])
def test_uniform_fill_mean_is_fill_times_n(fill):
    n = 1024
    L = sample_lengths("uniform_fill", 40_000, n, 1, fill=fill)
    assert abs(L.mean() - fill * n) < 0.01 * n


# ---------------------------------------------------------------- hstu_sl


def test_hstu_sl_spike_at_t_and_never_above_n():
    n, alpha = 1024, 1.6
    t = 256  # floor(1024^0.8) = 256 exactly: guards the float floor
    L = sample_lengths("hstu_sl", 40_000, n, 0, fill=1.0, alpha=alpha)
    assert set(np.unique(L).tolist()) == {t, n}
    # L = N > T is cut with probability 1 - N^a / N^2 = 1 - 1024^-0.4 = 0.9375
    assert abs((L == t).mean() - 0.9375) < 0.01

    U = sample_lengths("uniform_fill", 40_000, n, 5, fill=0.5)
    H = sample_lengths("hstu_sl", 40_000, n, 5, fill=0.5, alpha=alpha)
    assert H.max() <= n and H.min() >= 1
    assert np.array_equal(H[U <= t], U[U <= t])  # short histories are untouched
    assert ((H == U) | (H == t)).all()  # long ones are kept or cut to exactly T
    values, counts = np.unique(H, return_counts=True)
    assert values[np.argmax(counts)] == t and counts.max() > 20 * np.median(counts)
    # longer histories are cut more often: P(cut) = 1 - N^a/L^2 grows with L
    long_ = U > 900
    mid = (U > t) & (U < 400)
    assert (H[long_] == t).mean() > (H[mid] == t).mean() + 0.3


def test_hstu_sl_alpha_2_is_a_no_op():
    a = sample_lengths("uniform_fill", 1000, 512, 9, fill=0.7)
    b = sample_lengths("hstu_sl", 1000, 512, 9, fill=0.7, alpha=2.0)
    assert np.array_equal(a, b)


# ---------------------------------------------------------------- lognormal


@pytest.mark.parametrize("preset", list(LOGNORMAL_PRESETS))
def test_lognormal_preset_median(preset):
    p = LOGNORMAL_PRESETS[preset]
    L = sample_lengths("lognormal", 20_000, 1_000_000, 0, preset=preset)
    median = p["loc"] + p["scale"]  # Z = 0
    assert abs(np.median(L) - median) <= 0.05 * median
    assert L.min() == 20 and (L == 20).any()  # loc ~ 19 < min_len 20: the clip binds


def test_lognormal_values_match_the_formula():
    z = np.random.default_rng(4).standard_normal(1000)
    expected = np.clip(np.rint(19.078 + 43.087 * np.exp(1.609 * z)), 20, 4096).astype(np.int64)
    assert np.array_equal(sample_lengths("lognormal", 1000, 4096, 4, preset="ml-20m"), expected)


def test_lognormal_min_len_max_len_and_overrides():
    L = sample_lengths("lognormal", 5000, 256, 0, preset="ml-100k", min_len=50)
    assert L.min() == 50 and L.max() == 256 and (L == 256).any()
    explicit = sample_lengths("lognormal", 1000, 4096, 2, s=1.0, loc=18.678, scale=38.901)
    override = sample_lengths("lognormal", 1000, 4096, 2, preset="ml-100k", s=1.0)
    assert np.array_equal(explicit, override)
    assert not np.array_equal(override, sample_lengths("lognormal", 1000, 4096, 2, preset="ml-100k"))
    # N below the default min_len: lengths all N, no error
    assert (sample_lengths("lognormal", 100, 16, 0, preset="ml-25m") == 16).all()


# ---------------------------------------------------------------- zipf


def test_zipf_exponent_and_support():
    n, gamma, B = 50, 2.0, 200_000
    L = sample_lengths("zipf", B, n, 0, gamma=gamma)
    assert L.min() == 1 and L.max() <= n
    k = np.arange(1, n + 1)
    p = k**-gamma / (k**-gamma).sum()
    observed = np.bincount(L, minlength=n + 1)[1:]
    # frequency ratios follow k^-gamma: P(1)/P(2) = 4, P(1)/P(4) = 16
    assert abs(observed[0] / observed[1] - 4.0) < 0.2
    assert abs(observed[0] / observed[3] - 16.0) < 1.5
    assert (p * B >= 5).all()  # every bin has enough expected mass for a chi-square test
    assert sps.chisquare(observed, p * B).pvalue > 1e-3
    # the same test rejects a slightly wrong exponent, so it has the power to catch one
    q = k**-2.1 / (k**-2.1).sum()
    assert sps.chisquare(observed, q * B).pvalue < 1e-6


def test_zipf_min_len_and_top_of_support():
    L = sample_lengths("zipf", 100_000, 40, 3, gamma=1.7, min_len=5)
    assert L.min() == 5 and L.max() == 40  # both ends of the finite support are reached
    assert (np.bincount(L)[5:] > 0).all()


# ---------------------------------------------------------------- spike


def test_spike_fraction_and_base():
    n = 1000
    base = sample_lengths("uniform_fill", 40_000, n, 2, fill=0.3)  # never reaches N (max 600)
    L = sample_lengths("spike", 40_000, n, 2, p=0.1, base="uniform_fill", fill=0.3)
    assert abs((L == n).mean() - 0.1) < 0.01
    assert np.array_equal(L[L != n], base[L != n])
    assert np.array_equal(sample_lengths("spike", 500, n, 2, p=0.0, base="uniform_fill", fill=0.3), base[:500])
    assert (sample_lengths("spike", 500, n, 2, p=1.0, base="zipf", gamma=2.0) == n).all()
    L = sample_lengths("spike", 20_000, 2048, 0, p=0.02, base="lognormal", preset="ml-20m")
    assert 0.02 < (L == 2048).mean() < 0.04  # the spike plus lognormal's own tail clipped at N


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "family,params,needles",
    [
        ("nope", {}, ["'nope'", "allowed:", "uniform_fill", "zipf", "empirical"]),
        ("uniform_fill", {"fil": 0.5}, ["unknown param 'fil'", "allowed: fill"]),
        ("uniform_fill", {}, ["missing required param 'fill'"]),
        ("uniform_fill", {"fill": 0}, ["fill=0", "allowed:", "(0, 1]"]),
        ("uniform_fill", {"fill": 1.5}, ["fill=1.5", "(0, 1]"]),
        ("uniform_fill", {"fill": "half"}, ["fill='half'"]),
        ("uniform_fill", {"fill": float("nan")}, ["fill=nan"]),
        ("hstu_sl", {"fill": 1.0, "alpha": 2.5}, ["alpha=2.5", "(0, 2]", "1.6, 2.0"]),
        ("hstu_sl", {"fill": 1.0}, ["missing required param 'alpha'"]),
        ("lognormal", {}, ["preset or all of s, loc, scale", "ml-20m"]),
        ("lognormal", {"s": 1.0, "loc": 1.0}, ["missing scale"]),
        ("lognormal", {"preset": "ml-1b"}, ["preset='ml-1b'", "ml-100k"]),
        ("lognormal", {"preset": "ml-20m", "s": 0}, ["s=0", "(0, inf)"]),
        ("lognormal", {"preset": "ml-20m", "scale": -1}, ["scale=-1"]),
        ("lognormal", {"preset": "ml-20m", "min_len": 0}, ["min_len=0", "[1, max_len=1024]"]),
        ("zipf", {"gamma": 0}, ["gamma=0", "(0, inf)"]),
        ("zipf", {"gamma": 2, "min_len": 2000}, ["min_len=2000", "[1, max_len=1024]"]),
        ("zipf", {"gamma": 2, "min_len": 2.5}, ["min_len=2.5", "integer"]),
        ("spike", {"p": 1.5, "base": "zipf", "gamma": 2}, ["p=1.5", "[0, 1]"]),
        ("spike", {"p": 0.1, "base": "spike"}, ["base='spike'", "allowed:", "uniform_fill"]),
        ("spike", {"p": 0.1, "base": "nope"}, ["base='nope'", "lognormal"]),
        ("spike", {"p": 0.1, "base": "zipf", "gama": 2}, ["unknown param 'gama'", "p, base, gamma, min_len"]),
        ("spike", {"p": 0.1, "base": "uniform_fill", "fill": 0}, ["fill=0"]),
        ("empirical", {}, ["missing required param 'path'"]),
        ("empirical", {"path": "x.csv", "column": "a", "user_column": "b"}, ["not both"]),
    ],
)
def test_family_validation_errors(family, params, needles):
    with pytest.raises(ValueError) as e:
        sample_lengths(family, 8, 1024, 0, **params)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))


def test_size_validation_and_max_len_dependent_checks():
    for kwargs, needle in [
        ({"batch_size": 0}, "batch_size=0"),
        ({"max_len": 0}, "max_len=0"),
        ({"seed": -1}, "seed=-1"),
        ({"batch_size": 2.5}, "batch_size=2.5"),
    ]:
        args = {"batch_size": 4, "max_len": 64, "seed": 0, **kwargs}
        with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
            sample_lengths("uniform_fill", args["batch_size"], args["max_len"], args["seed"], fill=0.5)
    check_family_params("zipf", {"gamma": 2, "min_len": 5000})  # N unknown: range check waits
    with pytest.raises(ValueError, match="min_len=5000"):
        check_family_params("zipf", {"gamma": 2, "min_len": 5000}, max_len=1024)
    check_family_params("spike", {"p": 0.02, "base": "lognormal", "preset": "ml-20m"})


# ---------------------------------------------------------------- pairing rules


def test_pairing_rules():
    L = np.array([5, 1, 7, 3])
    q, k = pair_lengths("self", L, max_len=8)
    assert q.tolist() == k.tolist() == [5, 1, 7, 3] and q.dtype == k.dtype == np.int64
    q, k = pair_lengths("fixed_kv", [5, 1, 7, 3], max_len=8)
    assert q.tolist() == [5, 1, 7, 3] and k.tolist() == [8, 8, 8, 8]  # peer set 1: KV = N
    q, k = pair_lengths("fixed_kv", L, max_len=1024, kv_len=256)
    assert k.tolist() == [256] * 4  # peer set 2
    q, k = pair_lengths("seeds", L, max_len=8, num_seeds=16)
    assert q.tolist() == [16] * 4 and k.tolist() == [5, 1, 7, 3]


def test_target_history_pairing():
    L = sample_lengths("uniform_fill", 20_000, 512, 3, fill=0.5)
    q, k = pair_lengths("target_history", L, max_len=512, seed=3, max_targets=64)
    assert np.array_equal(k, L)
    assert q.min() == 1 and q.max() == 64 and len(np.unique(q)) == 64
    q2, _ = pair_lengths("target_history", L, max_len=512, seed=3, max_targets=64)
    q3, _ = pair_lengths("target_history", L, max_len=512, seed=4, max_targets=64)
    assert np.array_equal(q, q2) and not np.array_equal(q, q3)
    # its own sub-stream: not the family's stream reused (that would correlate Lq with Lk)
    assert abs(np.corrcoef(q, k)[0, 1]) < 0.05


@pytest.mark.parametrize(
    "rule,params,needles",
    [
        ("cross", {}, ["'cross'", "allowed:", "self, fixed_kv, target_history, seeds"]),
        ("self", {"kv_len": 3}, ["unknown param 'kv_len'", "(none)"]),
        ("fixed_kv", {"kv": 3}, ["unknown param 'kv'", "allowed: kv_len"]),
        ("fixed_kv", {"kv_len": 0}, ["kv_len=0", ">= 1"]),
        ("target_history", {}, ["missing required param 'max_targets'"]),
        ("target_history", {"max_targets": 1.5}, ["max_targets=1.5"]),
        ("seeds", {"num_seeds": -2}, ["num_seeds=-2"]),
    ],
)
def test_pairing_validation_errors(rule, params, needles):
    with pytest.raises(ValueError) as e:
        check_pairing_params(rule, params)
    for needle in needles:
        assert needle in str(e.value), (needle, str(e.value))
    with pytest.raises(ValueError):
        pair_lengths(rule, [1, 2], max_len=4, **params)


def test_pair_lengths_rejects_bad_lengths():
    with pytest.raises(ValueError, match=">= 0"):
        pair_lengths("self", [1, -1], max_len=4)
    with pytest.raises(ValueError, match="1-D"):
        pair_lengths("self", [[1, 2]], max_len=4)
    with pytest.raises(ValueError, match="integers"):
        pair_lengths("self", [1.5, 2], max_len=4)


def test_sort_by_length_descending_work_stable():
    q, k = sort_by_length([1, 3, 2, 3, 5], [4, 1, 2, 1, 0])  # work 4, 3, 4, 3, 0
    assert q.tolist() == [1, 2, 3, 3, 5] and k.tolist() == [4, 2, 1, 1, 0]
    with pytest.raises(ValueError, match="differ"):
        sort_by_length([1, 2], [1])


def test_build_lengths():
    q, k = build_lengths(
        "uniform_fill", {"fill": 1.0}, "fixed_kv", {"kv_len": 256}, batch_size=1152, max_len=1024, seed=0
    )
    assert (q == 1024).all() and (k == 256).all() and q.shape == (1152,)
    q, k = build_lengths(
        "lognormal",
        {"preset": "ml-20m"},
        "target_history",
        {"max_targets": 32},
        batch_size=300,
        max_len=1024,
        seed=5,
        sort=True,
    )
    w = q * k
    assert (np.diff(w) <= 0).all()
    q2, k2 = build_lengths(
        "lognormal",
        {"preset": "ml-20m"},
        "target_history",
        {"max_targets": 32},
        batch_size=300,
        max_len=1024,
        seed=5,
        sort=True,
    )
    assert np.array_equal(q, q2) and np.array_equal(k, k2)
    with pytest.raises(ValueError, match="unknown pairing rule"):
        build_lengths("zipf", {"gamma": 2}, "nope", {}, batch_size=4, max_len=8)
    with pytest.raises(ValueError, match="unknown param 'fil'"):
        build_lengths("uniform_fill", {"fil": 1}, "self", {}, batch_size=4, max_len=8)


# ---------------------------------------------------------------- work_pairs and stats


def test_work_pairs_causal_matches_brute_force():
    qs, ks, brute = [], [], []
    for lq in range(8):
        for lk in range(8):
            qs.append(lq)
            ks.append(lk)
            brute.append(sum(1 for i in range(lq) for j in range(lk) if j <= i))
    assert work_pairs(qs, ks, causal=True).tolist() == brute
    assert work_pairs(qs, ks).tolist() == [a * b for a, b in zip(qs, ks, strict=True)]
    assert work_pairs(np.array([2048]), np.array([2048]), causal=True).tolist() == [2048 * 2049 // 2]
    assert work_pairs([1], [1]).dtype == np.int64


def test_work_pairs_bottom_right_causal_matches_brute_force():
    """Softmax attention's causal mask (FlashAttention's, j <= i + Lk - Lq): the pairs its kernels compute."""
    qs, ks, brute = [], [], []
    for lq in range(9):
        for lk in range(9):
            qs.append(lq)
            ks.append(lk)
            brute.append(sum(1 for i in range(lq) for j in range(lk) if j <= i + lk - lq))
    assert work_pairs(qs, ks, causal=True, bottom_right=True).tolist() == brute
    square = [i for i, (a, b) in enumerate(zip(qs, ks, strict=True)) if a == b]
    top_left = work_pairs(qs, ks, causal=True)
    assert all(top_left[i] == brute[i] for i in square)  # the conventions agree only where Lq == Lk
    assert work_pairs([16], [1024], causal=True, bottom_right=True).tolist() == [16 * 1024 - 16 * 15 // 2]
    assert work_pairs([4], [4], bottom_right=True).tolist() == [16]  # not causal: Lq * Lk either way


def test_stats_hand_computed():
    q, k = [4, 2, 0, 2], [4, 2, 2, 4]  # work 16, 4, 0, 8 = 28
    s = length_stats(q, k)
    assert list(s) == list(workloads.STATS_KEYS)
    assert set(s) == {
        "B",
        "total_q",
        "total_kv",
        "mean_q",
        "p50_q",
        "p90_q",
        "p99_q",
        "max_q",
        "mean_kv",
        "p50_kv",
        "p90_kv",
        "p99_kv",
        "max_kv",
        "padding_waste",
        "padding_waste_kv",
        "flop_waste",
        "imbalance",
        "top1pct_work_share",
        "total_work_pairs",
        "lengths_sha256",
        "tile_eff_64",
        "tile_eff_128",
    }
    expected = {
        "B": 4,
        "total_q": 8,
        "total_kv": 12,
        "mean_q": 2.0,
        "p50_q": 2.0,
        "p90_q": 3.4,
        "p99_q": 3.94,
        "max_q": 4,
        "mean_kv": 3.0,
        "p50_kv": 3.0,
        "max_kv": 4,
        "padding_waste": 0.5,
        "padding_waste_kv": 0.25,
        "flop_waste": 1 - 28 / 64,
        "imbalance": 16 / 7,
        "top1pct_work_share": 16 / 28,
        "total_work_pairs": 28,
        "tile_eff_64": 28 / (3 * 64 * 64),  # three non-empty sequences, one 64 x 64 tile each
        "tile_eff_128": 28 / (3 * 128 * 128),
    }
    for key, v in expected.items():
        assert s[key] == pytest.approx(v, abs=1e-6), key
    digest = hashlib.sha256(np.array(q, "<i8").tobytes() + np.array(k, "<i8").tobytes()).hexdigest()
    assert s["lengths_sha256"] == digest == lengths_sha256(np.array(q), k)
    assert lengths_sha256(k, q) != digest
    json.dumps(s)  # plain Python types only
    assert type(s["B"]) is int and type(s["total_work_pairs"]) is int and type(s["mean_q"]) is float

    c = length_stats(q, k, causal=True)  # causal work 10, 3, 0, 3 = 16 over the same dense area 64
    assert c["total_work_pairs"] == 16
    assert c["flop_waste"] == pytest.approx(0.75)
    assert c["imbalance"] == pytest.approx(10 / 4)
    assert c["lengths_sha256"] == s["lengths_sha256"]


def test_stats_top1pct_and_imbalance_on_skewed_batch():
    q = np.ones(1000, dtype=np.int64)
    q[:3] = 100  # ceil(1% of 1000) = 10 sequences: 3 heavy + 7 light
    s = length_stats(q, q)
    total = 3 * 100 * 100 + 997
    assert s["top1pct_work_share"] == pytest.approx((30_000 + 7) / total, abs=1e-6)
    assert s["imbalance"] == pytest.approx(10_000 / (total / 1000), abs=1e-6)
    assert length_stats([5], [5])["top1pct_work_share"] == 1.0  # B = 1: ceil(0.01) = 1 sequence


def test_stats_degenerate_batches():
    z = length_stats([0, 0, 0], [0, 0, 0])
    assert z["padding_waste"] == z["padding_waste_kv"] == z["flop_waste"] == 0.0
    assert z["imbalance"] == 1.0 and z["top1pct_work_share"] == 0.0 and z["total_work_pairs"] == 0
    e = length_stats([], [])
    assert e["B"] == 0 and e["max_q"] == 0 and e["mean_kv"] == 0.0 and e["imbalance"] == 1.0
    json.dumps(z), json.dumps(e)
    full = length_stats([8] * 5, [8] * 5)
    assert full["padding_waste"] == 0.0 and full["flop_waste"] == 0.0 and full["imbalance"] == 1.0
    with pytest.raises(ValueError, match="differ"):
        length_stats([1, 2], [1])


# ---------------------------------------------------------------- histogram


def test_plot_length_histogram_writes_png(tmp_path):
    q, k = build_lengths("zipf", {"gamma": 1.7}, "fixed_kv", {"kv_len": 256}, batch_size=500, max_len=1024)
    out = tmp_path / "sub" / "dir" / "hist.png"
    plot_length_histogram(q, k, out, title="zipf 1.7 / fixed_kv")
    data = out.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 2000
    small = tmp_path / "small.png"
    plot_length_histogram([1, 2, 3], [3, 3, 3], str(small))  # lists, narrow range, no title
    assert small.read_bytes()[:8] == PNG_SIGNATURE
    empty = tmp_path / "empty.png"
    plot_length_histogram([], [], empty)
    assert empty.read_bytes()[:8] == PNG_SIGNATURE


# ---------------------------------------------------------------- check_workload: everything a config can hold


def test_check_workload_builds_the_same_lengths_as_build_lengths():
    args = dict(batch_size=64, max_len=128, seed=3, sort=True)
    q, k = workloads.check_workload("zipf", {"gamma": 2.0}, "target_history", {"max_targets": 8}, **args)
    q2, k2 = build_lengths("zipf", {"gamma": 2.0}, "target_history", {"max_targets": 8}, **args)
    assert np.array_equal(q, q2) and np.array_equal(k, k2)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"seed": -1}, "seed=-1; allowed: an integer >= 0"),
        ({"seed": True}, "seed=True"),
        ({"seed": 1.5}, "seed=1.5"),
        ({"max_len": True}, "max_len=True"),  # bool is an int in Python: not a length here
        ({"max_len": 2**40}, "max_len=1099511627776; allowed: an integer in [1, 2147483647]"),
        ({"batch_size": False}, "batch_size=False"),
        ({"sort": "yes"}, "sort_by_length='yes'; allowed: true or false"),
    ],
)
def test_check_workload_sizes_seed_and_bools(kwargs, needle):
    args = {"batch_size": 4, "max_len": 16, "seed": 0, **kwargs}
    with pytest.raises(ValueError) as e:
        workloads.check_workload("uniform_fill", {"fill": 0.5}, "self", {}, **args)
    assert needle in str(e.value)


@pytest.mark.parametrize(
    "family,params,rule,rparams,needle",
    [
        ("uniform_fill", {"fill": True}, "self", {}, "fill=True"),
        ("zipf", {"gamma": 2.0, "min_len": True}, "self", {}, "min_len=True"),
        ("uniform_fill", {"fill": 0.5}, "fixed_kv", {"kv_len": True}, "kv_len=True"),
        ("uniform_fill", {"fill": 0.5}, "fixed_kv", {"kv_len": 10**30}, "and <= 2147483647"),
        ("uniform_fill", {"fill": 0.5}, "seeds", {"num_seeds": 1e308}, "num_seeds=1e+308"),
        ("uniform_fill", [0.5], "self", {}, "lengths=[0.5]; allowed: a mapping"),
        ("uniform_fill", {"fill": 0.5}, "self", "x", "kv='x'; allowed: a mapping"),
    ],
)
def test_check_workload_rejects_bools_and_out_of_range_params(family, params, rule, rparams, needle):
    with pytest.raises(ValueError) as e:
        workloads.check_workload(family, params, rule, rparams, batch_size=4, max_len=16)
    assert needle in str(e.value)


_JUNK = [
    None,
    True,
    False,
    -1,
    0,
    0.5,
    3,
    1e308,
    math.nan,
    math.inf,
    -math.inf,
    "x",
    "",
    [],
    {},
    [1],
    10**30,
    "ml-20m",
    "uniform_fill",
    "empirical",
]
_VALID = {
    "uniform_fill": {"fill": 0.5},
    "hstu_sl": {"fill": 0.5, "alpha": 1.8},
    "lognormal": {"preset": "ml-20m"},
    "zipf": {"gamma": 2.0},
    "spike": {"p": 0.1, "base": "uniform_fill", "fill": 0.5},
    "empirical": {"path": "lengths.txt"},
}


def test_any_junk_parameter_is_a_one_line_value_error(tmp_path, monkeypatch):
    """Every family, pairing and size argument given each junk value: the workload either builds or
    raises a one-line ValueError, never another exception (a config loader only catches ValueError)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lengths.txt").write_text("3 5 7\n")
    assert set(_VALID) == set(FAMILIES)
    tried = rejected = 0

    def attempt(*args, **kw):
        nonlocal tried, rejected
        tried += 1
        try:
            workloads.check_workload(*args, **{"batch_size": 5, "max_len": 8, **kw})
        except ValueError as e:
            rejected += 1
            assert "\n" not in str(e) and str(e), (args, kw, str(e))

    for family, valid in _VALID.items():
        names = list(family_params(family)) + (["fill"] if family == "spike" else [])
        for name in names:
            for junk in _JUNK:
                for max_len in (8, 1):
                    attempt(family, {**valid, name: junk}, "self", {}, max_len=max_len)
    for rule in PAIRINGS:
        for name in [*workloads.pairing_params(rule), "zz"]:
            for junk in _JUNK:
                attempt("uniform_fill", {"fill": 0.5}, rule, {name: junk})
    for junk in _JUNK:
        for kw in ({"batch_size": junk}, {"max_len": junk}, {"seed": junk}, {"sort": junk}):
            attempt("uniform_fill", {"fill": 0.5}, "self", {}, **kw)
        attempt(junk, {}, "self", {})
        attempt("uniform_fill", {"fill": 0.5}, junk, {})
    assert tried > 700 and rejected > tried // 2


def test_a_pairing_rule_is_one_decorated_function(monkeypatch):
    """Pairing rules are a registry like the length families: a new rule is one function, and its
    parameters are checked and resolved like every other rule's."""
    from workloads import pairing
    from workloads.params import Param, real

    monkeypatch.setattr(pairing, "PAIRINGS", dict(pairing.PAIRINGS))

    @pairing.register_pairing("half_kv", frac=Param(0.5, real(0, 1, lo_open=True)))
    def half_kv(lengths, max_len, seed, *, frac):
        return lengths.copy(), np.ceil(lengths * frac).astype(np.int64)

    q, k = pairing.build_lengths("uniform_fill", {"fill": 1.0}, "half_kv", {}, batch_size=8, max_len=16, seed=1)
    assert (k == np.ceil(q * 0.5)).all()
    assert pairing.resolve_pairing_params("half_kv", {}, 16) == {"frac": 0.5}
    with pytest.raises(ValueError, match="frac"):
        pairing.check_pairing_params("half_kv", {"frac": 2})
    # a parameter that defaults to the workload's max length (fixed_kv's kv_len) resolves to it
    assert pairing.resolve_pairing_params("fixed_kv", {}, 64) == {"kv_len": 64}
    assert pairing.resolve_pairing_params("fixed_kv", {"kv_len": "max_len"}, 64) == {"kv_len": 64}
    assert pairing.resolve_pairing_params("fixed_kv", {"kv_len": 256}, 64) == {"kv_len": 256}


def test_a_self_attention_batch_holds_one_offsets_tensor_as_its_callers_pass_it():
    """A `self` pairing builds its batch with one offsets tensor for queries and keys (what the README tells a
    self-attention caller of the op to pass; the op decides self-attention by identity, never by reading the
    GPU), so the op runs its self-attention plans (packed short sequences, band-sized grids) in the harness
    as for users; other pairings keep two tensors; unequal lengths cannot be self-attention."""
    import torch

    from bench.config.cases import Workload
    from kernels.gdpa.call import GDPACall
    from workloads.batch import make_batch

    def workload(rule, rule_params):
        return Workload(name="s/L", set="s", max_len=64, sweep={}, B=6, H=2, Hkv=2, D=16, dtype="fp32",
                        activation="gelu", alpha=1.0, qk_scale=1.0, causal=False, family="uniform_fill",
                        family_params={"fill": 0.5}, rule=rule, rule_params=rule_params, seed=0,
                        sort_by_length=False)  # fmt: skip

    def is_self(b):
        return GDPACall(*b.call_args(), "gelu", 1.0, 1.0, False).self_attention

    b = workload("self", {}).batch("cpu")
    assert b.q_offsets is b.kv_offsets and is_self(b) and is_self(b.with_grad())
    cross = workload("fixed_kv", {"kv_len": 32}).batch("cpu")
    assert cross.q_offsets is not cross.kv_offsets and not is_self(cross)
    lengths = np.array([3, 0, 7, 128, 5])
    two = make_batch(lengths, lengths, H=2, D=16, dtype=torch.float32)  # equal lengths, two tensors: not self
    assert two.q_offsets is not two.kv_offsets and not is_self(two)
    with pytest.raises(ValueError, match="must be equal"):
        make_batch(lengths, lengths + 1, H=2, D=16, dtype=torch.float32, self_attention=True)
