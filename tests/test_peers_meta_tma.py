"""Meta's TMA backward (`meta_gdpa_tma`) builds only with the configs whose dQ block fits its dQ descriptor: the
provider has Meta's autotuner time those, keyed by the dQ flags, on a zeroed dQ (kernels/meta_gdpa.py
`fit_tma_backward`). On the H200 with fbtriton 3.6.1 every backward case failed before it (`desc_dq.store`:
`value.shape == desc.block_shape`)."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import triton
import triton.language as tl

from kernels import meta_gdpa

ROOT = Path(__file__).resolve().parents[1]
CHECKOUT = ROOT / ".peers" / "ads_model_kernel_library"
TMA = {"enable_tma": True, "USE_DQ_ATOMIC_ADD": False, "BROADCAST_Q": False, "USE_START_END_OFFSETS": False}


ARGS = ("Q", "K", "V", "DO", "DQ", "DK", "DV")


def fake_tuner(configs, prune=None, calls=None):
    """What fit_tma_backward touches of a Triton Autotuner; `run` records DQ as the kernel would see it."""

    def run(*args, **kwargs):
        if calls is not None:
            calls.append(args[ARGS.index("DQ")].clone())
        return "launched"

    return types.SimpleNamespace(
        configs=list(configs), early_config_prune=prune, keys=["N_CTX", "HEAD_DIM"], arg_names=list(ARGS), run=run
    )


def cfg(m1, n1, m2, n2, ncg=1):
    return triton.Config({"BLOCK_M1": m1, "BLOCK_N1": n1, "BLOCK_M2": m2, "BLOCK_N2": n2, "NUM_CONSUMER_GROUPS": ncg})


# Meta's default backward list (gdpa/triton/...:1814): BLOCK_M2 = BLOCK_N1, BLOCK_N2 = BLOCK_M1
META_LIKE = [cfg(m, n, n, m) for m in (32, 64) for n in (32, 64, 128) if n % m == 0]


@pytest.mark.parametrize(
    "config, launch, fits",
    [
        (cfg(64, 64, 64, 64), TMA, True),
        (cfg(32, 64, 64, 32), TMA, False),  # a 64-row dQ block, a 32-row descriptor
        (cfg(64, 128, 128, 64, ncg=2), TMA, False),  # the WS config: 32-row descriptor
        (cfg(128, 128, 64, 64, ncg=2), TMA, True),
        (cfg(32, 64, 64, 32), {**TMA, "enable_tma": False}, True),  # pointer stores
        (cfg(32, 64, 64, 32), {**TMA, "USE_DQ_ATOMIC_ADD": True}, True),  # dQ stored in the dK/dV loop
        (cfg(32, 64, 64, 32), {**TMA, "BROADCAST_Q": True}, True),  # dQ by tl.atomic_add
        (cfg(32, 64, 64, 32), {**TMA, "USE_START_END_OFFSETS": True}, True),
    ],
)
def test_a_tma_dq_store_fits_only_a_descriptor_of_its_own_rows(config, launch, fits):
    assert meta_gdpa.tma_dq_store_fits(config, launch) is fits


def test_the_tma_backward_times_the_configs_it_can_build_and_only_those():
    tuner = fake_tuner(META_LIKE)
    assert meta_gdpa.fit_tma_backward(tuner) is tuner
    kept = tuner.early_config_prune(tuner.configs, {}, **TMA)
    assert [(c.kwargs["BLOCK_M1"], c.kwargs["BLOCK_M2"]) for c in kept] == [(32, 32), (64, 64)]
    # a launch without the TMA dQ store keeps Meta's whole list
    assert tuner.early_config_prune(tuner.configs, {}, **{**TMA, "enable_tma": False}) == META_LIKE
    # arguments passed by position (named_args) count as those passed by keyword
    assert len(tuner.early_config_prune(tuner.configs, dict(TMA))) == 2
    # none fits: Meta's list whole, so the call fails with the compiler's own error, as without the provider
    none_fit = [cfg(32, 64, 64, 32), cfg(32, 128, 128, 32)]
    assert tuner.early_config_prune(none_fit, {}, **TMA) == none_fit
    # wrapped once; its tuned configs keyed by the dQ flags too, after Meta's own key
    first = tuner.early_config_prune
    meta_gdpa.fit_tma_backward(tuner)
    assert tuner.early_config_prune is first
    assert tuner.keys == ["N_CTX", "HEAD_DIM", *meta_gdpa.DQ_FLAGS]


@pytest.mark.parametrize(
    "launch, zeroed",
    [
        (TMA, True),
        ({**TMA, "USE_DQ_ATOMIC_ADD": True}, False),  # Meta allocates DQ with torch.zeros itself
        ({**TMA, "BROADCAST_Q": True}, False),
        ({**TMA, "enable_tma": False}, False),  # pointer stores: DQ written, not added to
    ],
)
def test_a_tma_dq_add_starts_from_a_zeroed_dq(launch, zeroed):
    """Meta allocates DQ with torch.empty off its atomic path, then its TMA backward adds into it: the launch
    sees DQ zeroed, by position or by keyword; any other launch sees DQ as Meta left it."""
    import torch

    calls = []
    tuner = meta_gdpa.fit_tma_backward(fake_tuner(META_LIKE, calls=calls))
    args = [torch.full((4, 2), 7.0) for _ in ARGS]
    assert tuner.run(*args, grid=(1,), **launch) == "launched"
    assert bool((calls[-1] == 0).all()) is zeroed and bool((calls[-1] == 7).all()) is not zeroed


def test_metas_own_prune_runs_first():
    calls = []

    def metas(configs, named_args, **kwargs):
        calls.append(len(configs))
        return configs[:3]

    tuner = fake_tuner(META_LIKE, prune=metas)
    meta_gdpa.fit_tma_backward(tuner)
    kept = tuner.early_config_prune(tuner.configs, {}, **TMA)
    assert calls == [len(META_LIKE)]
    assert [(c.kwargs["BLOCK_M1"], c.kwargs["BLOCK_M2"]) for c in kept] == [(32, 32)]


def test_the_provider_wraps_every_backward_autotuner_meta_builds():
    """restore_accumulators' wrap of Meta's builder also hands back the pruning autotuner."""
    built = []

    def builder(kernel, restore_value, enable_ws, is_mtia=False):
        t = fake_tuner(META_LIKE)
        built.append(t)
        return t

    module = types.SimpleNamespace(get_autotune_bwd_kernel=builder)
    meta_gdpa.restore_accumulators(module)
    tuner = module.get_autotune_bwd_kernel("kernel", None, False)
    assert tuner is built[0] and len(tuner.early_config_prune(tuner.configs, {}, **TMA)) == 2


@triton.jit
def _noop(X, BLOCK_M1: tl.constexpr, BLOCK_M2: tl.constexpr, enable_tma: tl.constexpr):
    pass


def test_tritons_autotuner_applies_the_prune_before_it_compiles_anything():
    """The hook is the one Triton's Autotuner calls (`prune_configs`, before timing or compiling a config)."""
    tuner = triton.autotune(configs=list(META_LIKE), key=[])(_noop)
    meta_gdpa.fit_tma_backward(tuner)
    assert tuner.keys == list(meta_gdpa.DQ_FLAGS)  # Triton keys by those the kernel takes (enable_tma here)
    tuner.nargs = {"X": None}
    kept = tuner.prune_configs({"enable_tma": True})
    assert [(c.kwargs["BLOCK_M1"], c.kwargs["BLOCK_M2"]) for c in kept] == [(32, 32), (64, 64)]
    assert tuner.prune_configs({"enable_tma": False}) == META_LIKE


@pytest.mark.skipif(not CHECKOUT.is_dir(), reason="needs Meta's checkout in .peers/ads_model_kernel_library")
def test_metas_own_backward_list_keeps_configs_the_tma_backward_can_build():
    """On Meta's real list (its bwd_keep applied, as its builder does): every config left has BLOCK_M1 ==
    BLOCK_M2, and some are left (the label runs)."""
    src = (CHECKOUT / meta_gdpa.SRC).read_text()
    assert "block_shape=[BLOCK_M1 // NUM_CONSUMER_GROUPS, BLOCK_D]" in src and 'store_reduce="add"' in src
    assert '"BLOCK_M2": BN1,' in src  # the pairing the prune is written for
    kept = [c for c in META_LIKE if meta_gdpa.tma_dq_store_fits(c, TMA)]
    assert kept and all(c.kwargs["BLOCK_M1"] == c.kwargs["BLOCK_M2"] for c in kept)


FORK_SITE = Path("/tmp/fbtriton-site")  # where docs/experiments/h200_session.sh `fbtriton` installs the fork


@pytest.mark.gpu
def test_metas_tma_backward_runs_and_is_correct_in_the_forks_environment(tmp_path):
    """On the GPU, in a worker with fbtriton first on PYTHONPATH (the label's environment in
    configs/peers-h200.yaml): Meta's TMA backward, autotuned over the configs it can build, passes the
    correctness gate on a jagged batch with edge lengths, and the record names the configs rule and the fork."""
    import subprocess
    import sys

    import torch
    import yaml

    from results.files import read_results

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if not (FORK_SITE / "triton").is_dir() or not CHECKOUT.is_dir():
        pytest.skip(f"needs fbtriton in {FORK_SITE} and Meta's checkout in {CHECKOUT}")
    cfg = {
        "name": "meta-tma",
        "device": "cuda",
        "providers": [
            {
                "name": "meta_gdpa",
                "label": "meta_gdpa_tma",
                "options": {"enable_tma": True, "bwd_opt_tech": "tma"},
                "environment": {"prepend_path": [str(FORK_SITE)]},
            }
        ],
        "modes": ["bwd"],
        "timing": {"rep_ms": 20},
        "power": {"enabled": False},
        "hardware": {"calibrate": False},
        "sets": [
            {
                "name": "edge",
                "B": 64,
                "H": 4,
                "D": 128,
                "dtype": "bf16",
                "activation": "fast_gelu",
                "max_len": 300,
                "lengths": {"family": "uniform_fill", "fill": 0.5},
                "kv": {"rule": "fixed_kv"},
            }
        ],
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "bench", "run", str(path), "--out", str(out), "--no-progress", "--no-report"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    (case,) = read_results(out)["cases"]
    assert case["status"] == "ok", (case.get("error"), proc.stdout[-3000:], proc.stderr[-3000:])
    assert case["correctness"]["passed"], case["correctness"]
    assert "fit_tma_backward" in case["kernel_config"]["bwd_configs"]
    assert case["environment"]["triton_package"].startswith("fbtriton ")
