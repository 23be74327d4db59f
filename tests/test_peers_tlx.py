"""meta_gdpa_tlx on CPU (issue 33): Meta's TLX GDPA megakernel loaded from a stand-in checkout
(tests/fixtures/peers: its entry point computing its math with torch, its sibling a top-level import as in
the real module), mapped onto GDPA and checked by the correctness gate; its skip lines (needs sm100, needs
Meta's Triton fork); the config that names it."""

import os
import sys
import types
from pathlib import Path

import pytest
import torch
import triton.language as tl
from triton.runtime.jit import JITFunction

from bench.case.gate import correctness
from bench.config.models import load_config
from kernels import meta_gdpa
from kernels import meta_gdpa_tlx as tlx
from kernels import peer_checkout as pc
from kernels.registry import CaseSpec, get_provider
from workloads.batch import make_batch

ROOT = Path(__file__).resolve().parents[1]
META_FIX = ROOT / "tests" / "fixtures" / "peers" / "ads_model_kernel_library"
SRC = META_FIX / "gdpa_megakernel" / "src"
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    """No `.peers/`, no autotune choice and no megakernel module left behind by another test."""
    monkeypatch.setattr(pc, "PEERS_ROOT", tmp_path / "no-peers")
    monkeypatch.setattr(tlx, "_process_autotune", [])
    monkeypatch.delenv("ADS_MKL_DISABLE_AUTOTUNE", raising=False)
    yield
    pc.unmount(tlx.TLX_PEER)
    pc.unmount(meta_gdpa.PEER)


def batch():
    return make_batch([5, 0, 17, 9, 1], [7, 4, 12, 0, 3], H=4, Hkv=2, D=64, dtype=torch.float16, seed=3)


def gate(p, b, spec, mode="fwd"):
    return correctness(p, b, spec, mode, 2e-2, 8, 0)


def test_it_loads_flat_from_the_checkout_and_maps_onto_gdpa_with_no_scale():
    p = get_provider("meta_gdpa_tlx", {"path": str(META_FIX)})
    b = batch()
    for act in ("fast_gelu", "gelu_tanh", "relu", "silu"):
        assert p.unsupported(b, CaseSpec(activation=act)) is None
        assert gate(p, b, CaseSpec(activation=act))["passed"], act
    assert gate(p, b, CaseSpec(mode="bwd"), "bwd")["passed"]
    mod = sys.modules[tlx.MODULE]
    assert Path(mod.__file__).is_relative_to(SRC) and Path(sys.modules["tlx_math"].__file__).is_relative_to(SRC)
    call = mod.CALLS[-1]
    assert call["enable_tma"] and call["enable_ws"] and call["cpu_query_offset"] is None
    assert call["autotune_off"] == "1"  # Meta's one known config, as its OSS tests run it
    assert mod.CALLS[1]["activation"] == "gelu_approx"  # Meta's name for our gelu_tanh
    cfg = p.kernel_configs()
    assert cfg["source"] == "path" and cfg["autotune"] is False and cfg["activation"] == "fast_gelu"


def test_what_it_does_not_compute_is_unsupported_with_the_reason():
    p = get_provider("meta_gdpa_tlx", {"path": str(META_FIX)})
    b = batch()
    assert "no causal mask" in p.unsupported(b, CaseSpec(causal=True))
    assert "alpha and qk_scale must be 1, got 1 and 0.5" in p.unsupported(b, CaseSpec(qk_scale=0.5))
    assert "got 0.3 and 1" in p.unsupported(b, CaseSpec(alpha=0.3))
    b32 = make_batch([5, 3], [5, 3], H=2, D=32, dtype=torch.float16, seed=1)
    assert "head dim 32 not supported" in p.unsupported(b32, CaseSpec())
    # a qk_scale that the kernel silently dropped would fail the gate: it is unsupported instead
    assert not gate(p, b, CaseSpec(qk_scale=0.5))["passed"]


def test_off_blackwell_it_is_skipped_needing_sm100_and_on_stock_triton_needing_the_fork():
    p = get_provider("meta_gdpa_tlx", {"path": str(META_FIX)})
    reason = p.availability(CPU)
    assert reason.startswith("needs sm100 (a Blackwell GPU")
    fork = tlx.tlx_reason()  # stock Triton here: no triton.language.extra.tlx
    assert fork.startswith("needs Meta's Triton fork fbtriton==3.6.1 (triton.language.extra.tlx); triton ")
    assert "environment: {prepend_path: [DIR]}" in fork
    missing = get_provider("meta_gdpa_tlx").availability(CPU)
    assert "git clone https://github.com/facebookresearch/ads_model_kernel_library" in missing


def test_a_fake_fork_with_tlx_passes_the_fork_check(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton.language.extra.tlx", types.ModuleType("triton.language.extra.tlx"))
    assert tlx.tlx_reason() is None


def test_load_balancing_passes_a_host_copy_of_the_offsets_made_once_per_batch():
    p = get_provider("meta_gdpa_tlx", {"path": str(META_FIX), "load_balancing": True})
    b = batch()
    fn = p.build(b, CaseSpec(), "fwd")
    fn()
    fn()
    calls = sys.modules[tlx.MODULE].CALLS[-2:]
    host = calls[0]["cpu_query_offset"]
    assert host is calls[1]["cpu_query_offset"] and host.device.type == "cpu"
    assert torch.equal(host, b.q_offsets.cpu())


def test_autotune_is_one_setting_per_process():
    first = get_provider("meta_gdpa_tlx", {"path": str(META_FIX), "autotune": True})
    b = batch()
    assert gate(first, b, CaseSpec())["passed"] and os.environ["ADS_MKL_DISABLE_AUTOTUNE"] == "0"
    other = get_provider("meta_gdpa_tlx", {"path": str(META_FIX)})
    assert "autotune: False in a process whose first call ran autotune: True" in other.unsupported(b, CaseSpec())


def test_a_top_level_module_of_its_name_loaded_elsewhere_is_a_skip_reason(tmp_path, monkeypatch):
    other = tmp_path / "tlx_gdpa_megakernel.py"
    other.write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import tlx_gdpa_megakernel  # noqa: F401

    p = get_provider("meta_gdpa_tlx", {"path": str(META_FIX)})
    with pytest.raises(pc.PeerLoadError, match="a module tlx_gdpa_megakernel is already loaded from"):
        p.peer_module()
    del sys.modules["tlx_gdpa_megakernel"]


def test_b200_names_it_in_its_own_environment():
    cfg = load_config(ROOT / "configs" / "b200.yaml")
    spec = cfg.providers["meta_gdpa_tlx"]
    assert spec.name == "meta_gdpa_tlx" and spec.environment == {"prepend_path": ["/tmp/fbtriton-site"]}
    assert any(c.label == "meta_gdpa_tlx" for c in cfg.cases)


# --------------------------------------------------------------------- meta_gdpa_ws: the build check


class FakeCompilationError(Exception):
    """A Triton compile error's shape: where (first line), the source, what (last line)."""


def test_a_ws_label_is_built_once_before_its_cases_and_says_what_failed(monkeypatch, tmp_path):
    options = {"path": str(META_FIX), "enable_tma": True, "enable_ws": True, "bwd_opt_tech": "tma_ws"}
    p = get_provider("meta_gdpa", options)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    meta_gdpa.ws_build_check(p, CPU)  # the stand-in builds (forward and backward): nothing raised
    call = sys.modules[meta_gdpa.MODULE].CALLS[-1]
    assert call["enable_ws"] is True and call["bwd_opt_tech"] == "tma_ws"

    def broken(*a, **k):
        raise FakeCompilationError(
            "at 12:8:\n    with tl.async_task([0]):\n        ^\nasync_task: not supported on sm_90"
        )

    monkeypatch.setattr(p, "forward", broken)
    with pytest.raises(RuntimeError) as exc:
        meta_gdpa.ws_build_check(p, CPU)
    msg = str(exc.value)
    assert msg.startswith("enable_ws: Meta's WS kernels do not build with triton ") and "for sm_90 " in msg
    assert msg.endswith("FakeCompilationError: at 12:8: ... async_task: not supported on sm_90")
    assert isinstance(exc.value.__cause__, FakeCompilationError)  # the compiler's log, for errors.log

    # in a run: the label is skipped with that line and errors.log has the traceback
    monkeypatch.setattr(meta_gdpa, "fork_reason", lambda: None)
    monkeypatch.setattr(meta_gdpa.MetaGDPAProvider, "device_reason", lambda self, d: None)
    monkeypatch.setattr(meta_gdpa.MetaGDPAProvider, "forward", broken)
    import bench

    cfg = {
        "device": "cpu",
        "providers": [{"name": "meta_gdpa", "label": "meta_gdpa_ws", "options": options}],
        "modes": ["fwd"],
        "timing": {"warmup_ms": 1, "rep_ms": 2, "min_reps": 2, "max_reps": 2},
        "power": {"enabled": False},
        "hardware": {"calibrate": False},
        "sets": [{"name": "s", "B": 2, "H": 2, "D": 64, "dtype": "fp16", "max_len": 8}],
    }
    df = bench.run(cfg, out=str(tmp_path / "run"))
    assert list(df.status) == ["skipped"]
    expected = "availability check failed: RuntimeError: enable_ws: Meta's WS kernels do not build"
    assert df.iloc[0]["error"].startswith(expected)
    log = (tmp_path / "run" / "errors.log").read_text()
    assert "(availability of meta_gdpa_ws)" in log and "FakeCompilationError" in log and "tl.async_task" in log


def _inner_dot(acc, p, v):
    return tl.dot(p, v, acc)


def _outer_dot(X, BLOCK: tl.constexpr):
    p = tl.zeros([BLOCK // 2, BLOCK], tl.float16)
    v = tl.zeros([BLOCK, BLOCK], tl.float16)
    acc = tl.zeros([BLOCK, BLOCK], tl.float32)
    acc = _inner_jit(acc, p, v)
    tl.store(X + tl.arange(0, BLOCK), tl.sum(acc, 0))


# compiled, not interpreted, whatever TRITON_INTERPRET says: the error chain is the compiler's
_inner_jit = JITFunction(_inner_dot)


def _front_end_error() -> BaseException:
    """A real Triton front-end failure, compiled for sm_90 without a GPU (the front end runs before any
    backend pass): an accumulator of the wrong shape one jitted call down, as Meta's WS forward hits it with
    fbtriton 3.6.1 and 3.7.4 (`acc = tl.dot(p, v, acc)`: "accumulator shape is incompatible")."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(JITFunction(_outer_dot), signature={"X": "*fp32", "BLOCK": "constexpr"}, constexprs={"BLOCK": 64})
    try:
        triton.compile(src, target=GPUTarget("cuda", 90, 32))
    except Exception as exc:
        return exc
    raise AssertionError("the mismatched accumulator compiled")


def test_a_ws_build_failure_names_the_failing_line_and_the_compilers_message(monkeypatch):
    """Triton's outermost CompilationError shows only the call site and a caret; the skip reason reads the
    chain to its end: every jitted call's line down to the failing one, and the innermost message."""
    exc = _front_end_error()
    assert str(exc).strip().splitlines()[-1].strip() == "^"  # what the reason used to end with
    options = {"path": str(META_FIX), "enable_tma": True, "enable_ws": True, "bwd_opt_tech": "tma_ws"}
    p = get_provider("meta_gdpa", options)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))

    def broken(*a, **k):
        raise exc

    monkeypatch.setattr(p, "forward", broken)
    with pytest.raises(RuntimeError) as got:
        meta_gdpa.ws_build_check(p, CPU)
    msg = str(got.value)
    tail = msg.split("(traceback: errors.log): ", 1)[1]
    assert tail.startswith("CompilationError at `return tl.dot(p, v, acc)`: AssertionError"), msg
    assert tail.endswith("accumulator shape is incompatible') (via `acc = _inner_jit(acc, p, v)`)"), msg
    assert "\n" not in msg and got.value.__cause__ is exc
    # what a run records (the runner's one line, 300 characters) keeps the failing line and the message, even
    # below a deep call chain (the H200's reason once ended at "`acc = tl.d...")
    from support.text import one_line

    deep = RuntimeError(msg.replace("(via ", "(via " + "`_gdpa_fwd_compute(Q, Q_offsets, K, K_offsets, V...` -> " * 3))
    recorded = one_line(f"availability check failed: {one_line(deep)}")
    assert "`return tl.dot(p, v, acc)`" in recorded and "accumulator shape is incompatible" in recorded, recorded
    assert meta_gdpa.compile_error_summary(ValueError("first\nlast")) == "ValueError: first ... last"
