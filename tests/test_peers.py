"""Peer providers on CPU (issue 23): meta_gdpa, meta_gdpa_cute and hstu loaded from stand-in checkouts
(tests/fixtures/peers: the peers' entry points computing their math with torch) by a path option, by
import and by the default `.peers/` folder; their skip lines; option validation at config load; the
semantics mappings checked by the correctness gate against our fp32 reference; flex_attention for real."""

import importlib
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.case.gate import correctness
from bench.config.models import ConfigError, load_config
from kernels import hstu, meta_gdpa, meta_gdpa_cute
from kernels import peer_checkout as pc
from kernels.registry import PROVIDER_MODULES, CaseSpec, get_provider
from workloads.batch import make_batch

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "peers"
META_FIX = FIX / "ads_model_kernel_library"
HSTU_FIX = FIX / "generative-recommenders"
CPU = torch.device("cpu")
TOL = 2e-2


@pytest.fixture(autouse=True)
def no_default_checkouts(monkeypatch, tmp_path):
    """No `.peers/` (a developer's real checkouts must not leak in) and no peer module left behind."""
    monkeypatch.setattr(pc, "PEERS_ROOT", tmp_path / "no-peers")
    yield
    pc.unmount(meta_gdpa.PEER)
    pc.unmount(hstu.PEER)


def gate(provider, batch, spec, mode="fwd"):
    return correctness(provider, batch, spec, mode, TOL, 8, 0)


def cross_batch(dtype=torch.float16, H=4, Hkv=2, D=64):
    return make_batch([5, 0, 17, 9, 1], [7, 4, 12, 0, 3], H=H, Hkv=Hkv, D=D, dtype=dtype, seed=3)


def self_batch(lengths=(5, 0, 17, 9, 1, 30), dtype=torch.float16, H=2, D=32):
    return make_batch(list(lengths), list(lengths), H=H, D=D, dtype=dtype, seed=4)


def stand_in(module: str):
    return importlib.import_module(module)


# ---------------------------------------------------------------------------------------- registry


def test_the_peer_providers_are_registered_with_their_semantics():
    for module in ("kernels.flex_attention", "kernels.meta_gdpa", "kernels.meta_gdpa_cute", "kernels.hstu"):
        assert module in PROVIDER_MODULES
    sem = {n: get_provider(n).semantics for n in ("meta_gdpa", "meta_gdpa_cute", "hstu", "flex_attention")}
    assert sem == {"meta_gdpa": "gdpa", "meta_gdpa_cute": "gdpa", "hstu": "gdpa", "flex_attention": "softmax"}


# ---------------------------------------------------------------------------------- meta_gdpa: load


def test_meta_gdpa_loads_from_the_path_option_and_maps_onto_gdpa():
    p = get_provider("meta_gdpa", {"path": str(META_FIX)})
    batch = cross_batch()
    for act, meta_name in (
        ("fast_gelu", "fast_gelu"),
        ("gelu_tanh", "gelu_approx"),
        ("silu", "silu"),
        ("relu", "relu"),
    ):
        spec = CaseSpec(mode="fwd", activation=act, qk_scale=0.7)
        assert p.unsupported(batch, spec) is None
        res = gate(p, batch, spec)
        assert res["passed"], (act, res)
        assert stand_in(meta_gdpa.MODULE).CALLS[-1]["activation"] == meta_name
    res = gate(p, batch, CaseSpec(mode="bwd", activation="gelu", qk_scale=1.5), "bwd")
    assert res["passed"] and set(res["per_tensor"]) == {"out", "dq", "dk", "dv"}, res
    mod = sys.modules[meta_gdpa.MODULE]
    assert Path(mod.__file__).is_relative_to(META_FIX)
    rec = p.kernel_configs()
    assert rec["source"] == "path" and str(META_FIX) in rec["origin"] and rec["activation"] == "gelu"
    call = stand_in(meta_gdpa.MODULE).CALLS[-1]
    assert (call["max_seq_len_q"], call["max_seq_len_kv"], call["qk_scale"]) == (17, 12, 1.5)


COMPILE_OBJECT_ANNOTATED = """
import sys
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from kernels.registry import get_provider


@triton.jit
def doubled(X: object, Y: object, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(Y + i, tl.load(X + i) * 2)


def compile_for_sm90():
    source = ASTSource(doubled, signature={"X": "*fp32", "Y": "*fp32", "N": "constexpr"}, constexprs={"N": 16})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32))


try:
    compile_for_sm90()
    print("before: compiled")
except Exception as exc:
    print("before:", "object is not defined" in str(exc))
get_provider("meta_gdpa", {"path": sys.argv[1]})._entry()
print("after:", "ttir" in compile_for_sm90().asm)
"""


def test_meta_gdpa_lets_triton_compile_kernels_whose_arguments_are_annotated_object(tmp_path):
    """Meta's backward kernel annotates its arguments `object`, which Triton 3.6's code generator could not
    resolve (every meta_gdpa backward failed on the H200). Cross-compiled for sm90, no GPU needed, in a fresh
    interpreter without TRITON_INTERPRET and with its own Triton cache: a kernel so annotated fails to compile
    before the provider calls its entry point and compiles after."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    script = tmp_path / "compile_object_annotated.py"
    script.write_text(COMPILE_OBJECT_ANNOTATED)
    proc = subprocess.run(
        [sys.executable, str(script), str(META_FIX)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.stdout.split() == ["before:", "True", "after:", "True"], proc.stdout + proc.stderr[-2000:]


def test_meta_gdpa_restores_its_atomic_accumulators_between_the_configs_it_tunes():
    """Meta's backward adds dK/dV atomically under GQA but restores them between autotuned configs only with
    start/end offsets: the provider's wrap of its autotuner builder always adds DQ, DK, DV to what Triton
    restores, keeps Meta's own names, and wraps once however often the entry is called."""
    seen = []
    module = types.SimpleNamespace(get_autotune_bwd_kernel=lambda k, rv, ws, is_mtia=False: seen.append(rv) or k)
    meta_gdpa.restore_accumulators(module)
    wrapped = module.get_autotune_bwd_kernel
    meta_gdpa.restore_accumulators(module)
    assert module.get_autotune_bwd_kernel is wrapped
    assert wrapped("kernel", None, False, is_mtia=False) == "kernel"
    wrapped("kernel", ("dts_encoding", "DK"), True)
    assert seen == [("DQ", "DK", "DV"), ("dts_encoding", "DK", "DQ", "DV")]
    meta_gdpa.restore_accumulators(types.SimpleNamespace())  # a checkout without the builder: nothing to wrap


def test_meta_gdpa_tma_backward_is_unsupported_without_store_reduce(monkeypatch):
    """Meta's TMA backward writes dQ with `store_reduce="add"`, a keyword of its Triton fork: on stock Triton
    its backward cases are `unsupported` with that reason (every one failed to compile on the H200); its
    forward, and a Triton whose descriptors take the keyword, are not."""
    p = get_provider("meta_gdpa", {"path": str(META_FIX), "enable_tma": True, "bwd_opt_tech": "tma"})
    b = cross_batch()
    assert "store_reduce" in p.unsupported(b, CaseSpec(mode="bwd")) and "fbtriton" in p.unsupported(
        b, CaseSpec(mode="bwd")
    )
    assert p.unsupported(b, CaseSpec(mode="fwd")) is None
    assert get_provider("meta_gdpa", {"path": str(META_FIX)}).unsupported(b, CaseSpec(mode="bwd")) is None
    from triton.language import core

    monkeypatch.setattr(
        core.tensor_descriptor, "store", lambda self, offsets, value, store_reduce="", _semantic=None: 0
    )
    assert p.unsupported(b, CaseSpec(mode="fwd_bwd")) is None


def test_a_wrong_activation_mapping_fails_the_gate(monkeypatch):
    """The mapping test can fail: relu's numbers under gelu_tanh's name are caught by the gate."""
    monkeypatch.setitem(meta_gdpa.ACTIVATIONS, "gelu_tanh", "relu")
    p = get_provider("meta_gdpa", {"path": str(META_FIX)})
    assert not gate(p, cross_batch(), CaseSpec(activation="gelu_tanh"))["passed"]


def test_meta_gdpa_loads_from_an_importable_package(tmp_path, monkeypatch):
    site = tmp_path / "site"
    shutil.copytree(META_FIX / "gdpa", site / "ads_mkl" / "ops" / "oss" / "gdpa")
    monkeypatch.syspath_prepend(str(site))
    p = get_provider("meta_gdpa")
    assert p.availability(CPU).startswith("runs on CUDA GPUs only")  # found, then the device says no
    assert gate(p, cross_batch(), CaseSpec(activation="hardswish"))["passed"]
    assert Path(sys.modules[meta_gdpa.MODULE].__file__).is_relative_to(site)
    assert p.kernel_configs()["source"] == "import"


def test_meta_gdpa_loads_from_the_default_checkout(tmp_path):
    shutil.copytree(META_FIX, pc.PEERS_ROOT / "ads_model_kernel_library")
    p = get_provider("meta_gdpa")
    assert gate(p, cross_batch(), CaseSpec(activation="leaky_relu"))["passed"]
    assert Path(sys.modules[meta_gdpa.MODULE].__file__).is_relative_to(pc.PEERS_ROOT)


def test_a_relative_path_is_the_repository_roots():
    rel = str(META_FIX.relative_to(ROOT))
    p = get_provider("meta_gdpa", {"path": rel})
    assert gate(p, cross_batch(), CaseSpec(activation="raw"))["passed"]


def test_missing_checkout_is_one_skip_line_saying_how_to_get_it(tmp_path):
    reason = get_provider("meta_gdpa").availability(CPU)
    assert "\n" not in reason
    assert reason.startswith("Meta's GDPA (facebookresearch/ads_model_kernel_library) not found")
    assert f"git clone {meta_gdpa.PEER.url} {pc.PEERS_ROOT / 'ads_model_kernel_library'}" in reason
    assert "provider option path" in reason and "ads_mkl.ops.oss.gdpa is not importable" in reason
    bad = get_provider("meta_gdpa", {"path": str(tmp_path)}).availability(CPU)
    assert bad.startswith(f"options.path {tmp_path}: not a checkout of {meta_gdpa.PEER.url}")
    typo = get_provider("meta_gdpa", {"path": str(tmp_path / "nope")}).availability(CPU)
    assert typo.startswith(f"options.path {tmp_path / 'nope'}: no such folder; get it: git clone")
    for name, url in (("hstu", hstu.PEER.url), ("meta_gdpa_cute", meta_gdpa.PEER.url)):
        r = get_provider(name).availability(CPU)
        assert "not found" in r and f"git clone {url}" in r and "\n" not in r


def test_one_checkout_per_process(tmp_path):
    first = get_provider("meta_gdpa", {"path": str(META_FIX)})
    first._entry()
    copy = tmp_path / "other"
    shutil.copytree(META_FIX, copy)
    reason = get_provider("meta_gdpa", {"path": str(copy)}).availability(torch.device("cuda"))
    assert reason.startswith("ads_mkl.ops.oss is already loaded from") and str(copy) in reason
    # an entry without a path uses the checkout already loaded, not some other copy
    assert get_provider("meta_gdpa").kernel_configs() is None
    same = get_provider("meta_gdpa")
    assert gate(same, cross_batch(), CaseSpec())["passed"] and str(META_FIX) in same.kernel_configs()["origin"]


def test_a_checkout_that_does_not_import_is_a_skip_line(tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(META_FIX, broken)
    (broken / meta_gdpa.PEER.marker).write_text("import cutlass_that_is_not_installed\n")
    reason = get_provider("meta_gdpa", {"path": str(broken)}).availability(torch.device("cuda"))
    assert reason.startswith(f"Meta's GDPA (facebookresearch/ads_model_kernel_library) from the checkout {broken}")
    assert "ModuleNotFoundError: No module named 'cutlass_that_is_not_installed'" in reason


# ----------------------------------------------------------------------------- meta_gdpa: options


def test_meta_gdpa_options_pass_through_and_are_recorded():
    opts = {"path": str(META_FIX), "enable_tma": True, "enable_persistent": True, "bwd_opt_tech": "persistent_tma"}
    p = get_provider("meta_gdpa", opts)
    assert p.options_record() == {**opts, "enable_ws": False, "use_dq_atomic_add": False}
    gate(p, cross_batch(), CaseSpec())
    call = stand_in(meta_gdpa.MODULE).CALLS[-1]
    assert call["enable_tma"] and call["enable_persistent"] and not call["enable_ws"]
    assert call["bwd_opt_tech"] == "persistent_tma"


@pytest.mark.parametrize(
    "options, message",
    [
        ({"turbo": True}, "meta_gdpa: unknown option 'turbo'; allowed: path, enable_persistent"),
        ({"enable_tma": "yes"}, "meta_gdpa: option enable_tma: 'yes' is not allowed; allowed: true or false"),
        ({"enable_tma": 1}, "meta_gdpa: option enable_tma: 1 is not allowed; allowed: true or false"),
        ({"path": ""}, "meta_gdpa: option path: '' is not allowed; allowed: a non-empty string"),
        ({"bwd_opt_tech": "fast"}, "meta_gdpa: option bwd_opt_tech 'fast': 'fast' is not a backward technique"),
        ({"bwd_opt_tech": "tma"}, "meta_gdpa: option bwd_opt_tech 'tma': 'tma' has no effect without enable_tma: true"),
        (
            {"enable_ws": True, "bwd_opt_tech": "ws_dq_atomic_add"},
            "'dq_atomic_add' has no effect without use_dq_atomic_add",
        ),
    ],
)
def test_bad_meta_gdpa_options_are_one_line_config_errors(tmp_path, options, message):
    cfg = {
        "device": "cpu",
        "providers": [{"name": "meta_gdpa", "label": "m", "options": options}],
        "sets": [{"name": "s", "B": 2, "H": 2, "D": 64, "max_len": 8}],
    }
    with pytest.raises(ConfigError) as exc:
        load_config(cfg)
    text = str(exc.value)
    assert "\n" not in text and text.startswith("<config dict>: providers.0.options: ") and message in text


def test_bad_option_at_the_cli_is_exit_2_and_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "device: cpu\nproviders: [{name: hstu, options: {enable_tma: maybe}}]\n"
        "sets: [{name: s, B: 2, H: 2, D: 64, max_len: 8}]\n"
    )
    r = subprocess.run([sys.executable, "-m", "bench", "list", str(path)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = (r.stderr + r.stdout).strip().splitlines()
    assert lines == [
        f"error: {path}: providers.0.options: hstu: option enable_tma: 'maybe' is not allowed; allowed: true or false"
    ]


def test_enable_ws_needs_metas_triton_fork(monkeypatch):
    import triton.language as tl

    p = get_provider("meta_gdpa", {"path": str(META_FIX), "enable_ws": True})
    assert not hasattr(tl, "async_task")  # stock triton: the label is skipped with the reason
    reason = p.availability(torch.device("cuda"))
    assert reason.startswith("enable_ws needs Meta's Triton fork (facebookexperimental/triton: tl.async_task")
    monkeypatch.setattr(tl, "async_task", object(), raising=False)
    assert p.availability(CPU).startswith("runs on CUDA GPUs only")  # the fork is there: on to the device


def test_meta_gdpa_unsupported_cases_say_why():
    p = get_provider("meta_gdpa", {"path": str(META_FIX)})
    b = cross_batch()
    assert "no causal mask" in p.unsupported(self_batch(), CaseSpec(causal=True))
    assert "alpha must be 1, got 0.5" in p.unsupported(b, CaseSpec(alpha=0.5))
    assert "fp16/bf16, not float32" in p.unsupported(cross_batch(torch.float32), CaseSpec())
    assert "head dim 32 not supported" in p.unsupported(cross_batch(D=32), CaseSpec())


# -------------------------------------------------------------------------------- meta_gdpa_cute


def test_meta_gdpa_cute_maps_onto_gdpa_and_precomputes_its_tile_maps_outside_the_timed_call():
    p = get_provider("meta_gdpa_cute", {"path": str(META_FIX)})
    assert p.availability(CPU).startswith("needs sm100 (a Blackwell GPU")
    batch = cross_batch()
    for act in ("fast_gelu", "relu"):
        assert gate(p, batch, CaseSpec(activation=act))["passed"]
    iface = stand_in(meta_gdpa_cute.MODULE)
    fn = p.build(batch, CaseSpec(mode="fwd"), "fwd")
    before = len(iface.PRECOMPUTED)
    for _ in range(3):
        fn()
    assert len(iface.PRECOMPUTED) == before == 2  # once per batch (fwd + bwd maps), never per call
    assert iface.CALLS[-1] == {"activation": "fast_gelu", "prefer_persistent": True, "maps": True}
    assert "fast_gelu or relu only" in p.unsupported(batch, CaseSpec(activation="gelu"))
    assert "alpha and qk_scale must be 1" in p.unsupported(batch, CaseSpec(qk_scale=0.5))
    assert "self-attention batches only" in p.unsupported(batch, CaseSpec(causal=True))
    assert p.unsupported(self_batch(D=64), CaseSpec(causal=True)) is None
    plain = get_provider("meta_gdpa_cute", {"load_balancing": False})
    assert gate(plain, batch, CaseSpec())["passed"] and iface.CALLS[-1]["maps"] is False


# ------------------------------------------------------------------------------------------ hstu


def hstu_spec(mode="fwd", n=64, alpha=0.3):
    return CaseSpec(mode=mode, activation="silu", alpha=alpha, qk_scale=1.0 / n, causal=True)


def test_hstu_maps_exactly_onto_causal_silu_gdpa_with_qk_scale_1_over_n():
    """N = 1/qk_scale (64) above the batch's longest sequence (30): had the provider passed the batch
    maximum as N, every output would be 64/30 too large and the gate would fail."""
    p = get_provider("hstu", {"path": str(HSTU_FIX)})
    batch = self_batch()
    assert p.unsupported(batch, hstu_spec()) is None
    assert gate(p, batch, hstu_spec())["passed"]
    res = gate(p, batch, hstu_spec("bwd", n=37, alpha=-0.8), "bwd")
    assert res["passed"], res
    call = stand_in(hstu.MODULE).CALLS[-1]
    assert call == {"N": 37, "alpha": -0.8, "sort_by_length": False, "enable_tma": False}
    assert p.kernel_configs()["N"] == 37 and p.kernel_configs()["source"] == "path"
    assert Path(sys.modules[hstu.MODULE].__file__).is_relative_to(HSTU_FIX)


def test_hstu_unsupported_cases_say_why():
    p = get_provider("hstu", {"path": str(HSTU_FIX)})
    b = self_batch()
    assert "causal only" in p.unsupported(b, CaseSpec(activation="silu", qk_scale=1 / 64))
    assert "activation must be silu, got 'fast_gelu'" in p.unsupported(b, CaseSpec(causal=True, qk_scale=1 / 64))
    too_small = p.unsupported(b, hstu_spec(n=29))  # the batch has a sequence of 30
    assert "qk_scale must be 1/N with N an integer ≥ 30" in too_small
    assert "qk_scale must be 1/N" in p.unsupported(b, CaseSpec(activation="silu", causal=True, qk_scale=0.3))
    assert "self-attention" in p.unsupported(cross_batch(H=2, Hkv=2), hstu_spec())
    assert "no GQA" in p.unsupported(make_batch([3, 4], [3, 4], H=4, Hkv=2, D=32, dtype=torch.float16), hstu_spec())
    assert "power of 2" in p.unsupported(self_batch(D=48), hstu_spec())
    assert p.availability(CPU).startswith("runs on CUDA GPUs only")


def test_hstu_n_reads_qk_scale_back_exactly():
    assert hstu.hstu_n(1 / 148) == 148 and hstu.hstu_n(0.0009765625) == 1024 and hstu.hstu_n(1.0) == 1
    assert hstu.hstu_n(0.3) is None and hstu.hstu_n(0.0) is None and hstu.hstu_n(-1 / 8) is None


def test_hstu_loads_from_an_importable_package(monkeypatch):
    monkeypatch.syspath_prepend(str(HSTU_FIX))
    p = get_provider("hstu")
    assert gate(p, self_batch(), hstu_spec())["passed"] and p.kernel_configs()["source"] == "import"


# -------------------------------------------------------------------------------- flex_attention


def test_flex_attention_eager_matches_softmax_reference_jagged_gqa_and_causal():
    p = get_provider("flex_attention", {"compile": False})
    assert p.availability(CPU) is None
    cross = cross_batch(torch.float32)
    for spec in (CaseSpec(), CaseSpec(causal=True), CaseSpec(softmax_scale=0.3)):
        res = gate(p, cross, spec)
        assert res["passed"] and res["rel_err"] < 1e-4, (spec, res)
    assert "no backward on CPU" in p.unsupported(cross, CaseSpec(mode="bwd"))
    assert p.unsupported(cross, CaseSpec(mode="fwd")) is None
    out = p.forward(cross, CaseSpec())
    assert out.shape == cross.q.shape
    assert torch.all(out[cross.q_rows(3)] == 0) and cross.kv_lengths[3] == 0  # no keys: zero, as the reference


def test_flex_attention_builds_its_block_mask_once_outside_the_timed_call(monkeypatch):
    from kernels import flex_attention as fx

    built = []
    real = fx.document_block_mask
    monkeypatch.setattr(fx, "document_block_mask", lambda b, c: built.append(c) or real(b, c))
    p = get_provider("flex_attention", {"compile": False})
    batch = self_batch(dtype=torch.float32)
    fn = p.build(batch, CaseSpec(mode="fwd"), "fwd")
    assert built == [False]
    for _ in range(2):
        fn()
    gate(p, batch, CaseSpec())
    assert built == [False]  # one batch, one mask: the gate, the build and every call reuse it
    p.build(batch, CaseSpec(mode="fwd", causal=True), "fwd")()
    assert built == [False, True]


def test_flex_attention_compiled_on_cpu():
    """torch.compile'd flex_attention runs on CPU (Inductor's C++ template, static shapes there)."""
    p = get_provider("flex_attention")
    batch = make_batch([9, 0, 21, 4], [13, 5, 21, 0], H=2, D=16, dtype=torch.float32, seed=1)
    res = gate(p, batch, CaseSpec())
    assert res["passed"] and res["rel_err"] < 1e-4, res
    assert np.isfinite(res["rel_err"])


# --------------------------------------------------------------------------------------- runner


def test_a_cpu_sweep_runs_flex_attention_and_skips_the_gpu_peers_with_their_reasons(tmp_path):
    import bench

    cfg = {
        "device": "cpu",
        "providers": [
            "reference_softmax",
            {"name": "flex_attention", "label": "flex_eager", "options": {"compile": False}},
            {"name": "meta_gdpa", "options": {"path": str(META_FIX)}},
            "hstu",
        ],
        "modes": ["fwd"],
        "timing": {"warmup_ms": 1, "rep_ms": 5, "min_reps": 2, "max_reps": 3},
        "power": {"enabled": False},
        "hardware": {"calibrate": False},
        "sets": [{"name": "s", "B": 3, "H": 2, "D": 64, "dtype": "fp16", "max_len": 16}],
    }
    df = bench.run(cfg, out=tmp_path / "run").set_index("provider")
    assert df.loc["flex_eager", "status"] == "ok" and df.loc["flex_eager", "correctness.passed"]
    assert df.loc["meta_gdpa", "status"] == "skipped"
    assert df.loc["meta_gdpa", "error"].startswith("runs on CUDA GPUs only")
    assert (
        df.loc["hstu", "status"] == "skipped" and "git clone https://github.com/meta-recsys" in df.loc["hstu", "error"]
    )


# --------------------------------------------------------------------------------------- configs


def test_peers_h200_reproduces_metas_benchmark_and_the_causal_silu_sets():
    cfg = load_config(ROOT / "configs" / "peers-h200.yaml")
    sets = {s.name: s for s in cfg.model.sets}
    set1, set2 = sets.pop("set1"), sets.pop("set2")
    for s in (set1, set2):
        assert (s.B, s.H, s.D, s.dtype, s.activation, s.alpha, s.qk_scale, s.causal) == (
            1152,
            4,
            128,
            "bf16",
            "fast_gelu",
            1.0,
            1.0,
            False,
        )  # gdpa/scripts/benchmark.py: B, H, DIM, DTYPE, ACTIVATION, qk_scale=1
        assert s.max_len == [256, 512, 1024, 2048]
    assert set1.lengths == {"family": "uniform_fill", "fill": [0.5, 1.0]} and set1.kv == {"rule": "fixed_kv"}
    assert set2.lengths["fill"] == 1.0 and set2.kv == {"rule": "fixed_kv", "kv_len": 256}
    labels = {c.label for c in cfg.cases if c.workload.set in ("set1", "set2")}
    assert {"meta_gdpa", "gdpa", "gdpa_triton", "gdpa_hopper", "fa4", "flex_attention"} <= labels
    assert {"meta_gdpa_tma", "meta_gdpa_persistent", "meta_gdpa_ws"} <= labels
    assert cfg.providers["meta_gdpa_ws"].options == {"enable_tma": True, "enable_ws": True, "bwd_opt_tech": "tma_ws"}
    assert sorted(s.max_len for s in sets.values()) == [256, 512, 1024, 2048]
    for s in sets.values():  # HSTU's math: qk_scale = 1/N with N the max length, causal silu self-attention
        assert (s.activation, s.causal, s.kv, hstu.hstu_n(s.qk_scale)) == ("silu", True, {"rule": "self"}, s.max_len)
        assert s.alpha == pytest.approx(128**-0.5)
        assert [p.name for p in s.providers] == ["hstu", "gdpa"]
    assert cfg.model.baseline == "meta_gdpa" and cfg.model.hardware.power_cap_w == 700


def test_b200_names_metas_cute_and_triton_gdpa():
    names = {s.name for s in load_config(ROOT / "configs" / "b200.yaml").providers.values()}
    assert {"meta_gdpa_cute", "meta_gdpa", "flex_attention"} <= names


def test_the_environment_table_lists_the_peers_with_their_reasons_on_cpu():
    from bench.sweep.env import provider_table

    rows = {r["provider"]: r for r in provider_table(CPU)}
    assert rows["flex_attention"]["available"]
    for name in ("meta_gdpa", "meta_gdpa_cute", "hstu"):
        assert not rows[name]["available"] and "git clone" in rows[name]["reason"]
