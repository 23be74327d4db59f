"""Provider options contract (kernels/registry.py) and the GDPA op's options, backend dispatch, and
that a default call never reads device memory back (CPU, Triton interpreter)."""

import contextlib
import dataclasses
import os
import sys
import types

import pytest
import torch

from kernels.gdpa import GDPAOptions, dispatch, gdpa
from kernels.registry import CaseSpec, Provider, get_provider
from workloads import make_batch


def test_a_provider_without_options_rejects_any():
    with pytest.raises(ValueError, match=r"^reference: takes no options, got 'fwd_tiles'$"):
        get_provider("reference", {"fwd_tiles": [64, 64, 4, 2]})
    p = get_provider("reference", {})
    assert p.options is None and p.options_record() is None
    assert get_provider("reference").options is None


def test_parse_options_runs_once_at_construction():
    calls = []

    class Counted(Provider):
        name = "counted"

        def parse_options(self, options):
            calls.append(dict(options))
            if set(options) - {"x"}:
                raise ValueError(f"counted: unknown option {sorted(set(options) - {'x'})[0]!r}; allowed: x")
            return options.get("x", 0)

        def options_record(self):
            return {"x": self.options}

    p = Counted({"x": 3})
    assert p.options == 3 and p.options_record() == {"x": 3} and calls == [{"x": 3}]
    with pytest.raises(ValueError, match="unknown option 'y'"):
        Counted({"y": 1})


# ------------------------------------------------------------------------------------- GDPAOptions


def test_options_default_and_round_trip():
    opts = GDPAOptions()
    assert (opts.backend, opts.fwd_tiles, opts.dkdv_tiles, opts.dq_tiles) == ("auto", None, None, None)
    d = {"backend": "triton", "fwd_tiles": [128, 32, 8, 3, 128], "dkdv_tiles": None, "dq_tiles": [64, 32, 4, 3]}
    opts = GDPAOptions.from_dict(d)
    assert opts.fwd_tiles == (128, 32, 8, 3, 128) and opts.to_dict() == d
    assert GDPAOptions.from_dict(opts.to_dict()) == opts
    assert GDPAOptions(backend="hopper").merged({"fwd_tiles": [64, 32, 4, 1]}).to_dict() == {
        "backend": "hopper",
        "fwd_tiles": [64, 32, 4, 1],
        "dkdv_tiles": None,
        "dq_tiles": None,
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.backend = "auto"  # frozen: built once, shared by every call


@pytest.mark.parametrize(
    "options,message",
    [
        ({"fwd_tile": [64, 32, 4, 1]}, "unknown option 'fwd_tile'; allowed: backend, fwd_tiles, dkdv_tiles, dq_tiles"),
        ({"backend": "cuda"}, "backend: expected one of auto, triton, hopper, got 'cuda'"),
        (
            {"fwd_tiles": [128, 64, 8]},
            "fwd_tiles: expected [BLOCK_M, BLOCK_N, num_warps, num_stages(, maxnreg)] integers, got [128, 64, 8]",
        ),
        (
            {"dq_tiles": "128,64,8,3"},
            "dq_tiles: expected [BLOCK_M, BLOCK_N, num_warps, num_stages(, maxnreg)] integers, got '128,64,8,3'",
        ),
        (
            {"dkdv_tiles": [64, 128, 8.0, 3]},
            "dkdv_tiles: expected [BLOCK_M, BLOCK_N, num_warps, num_stages(, maxnreg)] integers, got [64, 128, 8.0, 3]",
        ),
        ({"fwd_tiles": [96, 64, 8, 3]}, "fwd_tiles: BLOCK_M and BLOCK_N must be powers of two >= 16"),
        ({"fwd_tiles": [128, 8, 8, 3]}, "fwd_tiles: BLOCK_M and BLOCK_N must be powers of two >= 16"),
        ({"fwd_tiles": [128, 64, 6, 3]}, "fwd_tiles: num_warps must be 1, 2, 4, 8 or 16, got 6"),
        ({"fwd_tiles": [128, 64, 8, 0]}, "fwd_tiles: num_stages must be >= 1, got 0"),
        ({"fwd_tiles": [128, 64, 8, 3, -1]}, "fwd_tiles: maxnreg must be >= 0"),
        ([("backend", "auto")], "options: expected a mapping with keys backend, fwd_tiles, dkdv_tiles, dq_tiles"),
    ],
)
def test_bad_options_raise_one_line(options, message):
    with pytest.raises(ValueError) as exc:
        GDPAOptions.from_dict(options)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_gdpa_providers_parse_their_options_once_with_their_backend():
    for name, backend in (("gdpa", "auto"), ("gdpa_triton", "triton"), ("gdpa_hopper", "hopper")):
        p = get_provider(name)
        assert p.options == GDPAOptions(backend=backend) and p.options_record()["backend"] == backend
    p = get_provider("gdpa_triton", {"fwd_tiles": [128, 64, 8, 3]})
    assert p.options == GDPAOptions(backend="triton", fwd_tiles=(128, 64, 8, 3))
    with pytest.raises(
        ValueError,
        match=r"^gdpa_triton: fwd_tiles: expected \[BLOCK_M, BLOCK_N, num_warps, "
        r"num_stages\(, maxnreg\)\] integers, got \[64, 32\]$",
    ):
        get_provider("gdpa_triton", {"fwd_tiles": [64, 32]})
    with pytest.raises(ValueError, match=r"^gdpa: unknown option 'schedule'; allowed: backend, "):
        get_provider("gdpa", {"schedule": "compact"})


# --------------------------------------------------------------------------------------- dispatch
def _batch(q_len=(5, 0, 9), kv_len=(7, 3, 4), **kw):
    return make_batch(list(q_len), list(kv_len), H=4, Hkv=2, D=16, dtype=torch.float32, seed=1, **kw)


def test_hopper_backend_on_cpu_is_a_one_line_error_and_auto_picks_triton_with_the_reason():
    b = _batch()
    why = dispatch.hopper_unavailable(b.q.device)
    assert why  # no Hopper kernel runs on a CPU, whatever is installed
    with pytest.raises(ValueError) as exc:
        gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, options=GDPAOptions(backend="hopper"))
    assert str(exc.value) == f"gdpa: backend='hopper' cannot run here: {why}"
    record = {}
    gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, record=record)
    assert record["dispatch"] == {"fwd": {"backend": "triton", "reason": f"triton: hopper unavailable: {why}"}}
    assert get_provider("gdpa_hopper").availability(torch.device("cpu")) == why


class FakeHopper:
    """Stands in for kernels/gdpa/hopper: available, supports what `unsupported_reason` allows, and
    records its calls (its outputs are not GDPA: these tests check the routing, not the math)."""

    def __init__(self, unsupported_reason=None, available_reason=None):
        self.calls = []
        self.module = types.ModuleType(dispatch.HOPPER_MODULE)
        self.module.unavailable = lambda device: available_reason
        self.module.unsupported = lambda q, k, v, activation, causal: unsupported_reason
        self.module.forward = self.forward
        self.module.backward = self.backward

    def forward(self, q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale, causal, record=None):
        self.calls.append("fwd")
        if record is not None:
            record["hopper_fwd"] = {"kernel": "fake"}
        return torch.zeros_like(q)

    def backward(
        self, do, q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale, causal, record=None
    ):
        self.calls.append("bwd")
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)


@pytest.fixture
def fake_hopper(monkeypatch):
    @contextlib.contextmanager
    def install(**kw):
        fake = FakeHopper(**kw)
        monkeypatch.setitem(sys.modules, dispatch.HOPPER_MODULE, fake.module)
        dispatch.hopper_backend.cache_clear()
        try:
            yield fake
        finally:
            dispatch.hopper_backend.cache_clear()

    yield install
    dispatch.hopper_backend.cache_clear()


def _choose(mode, max_q, max_kv, backend="auto"):
    b = _batch()
    return dispatch.choose(mode, b.q, b.k, b.v, max_q, max_kv, "fast_gelu", False, GDPAOptions(backend=backend))


def test_dispatch_rule_thresholds_and_reasons(fake_hopper):
    with fake_hopper():
        assert _choose("fwd", 1024, 1024) == (
            "hopper",
            "hopper: max_q >= 1024 and max_kv >= 1024 (measured on H200, kernels/gdpa/hopper/NOTES.md)",
        )
        assert _choose("fwd", 2048, 256) == (
            "triton",
            "triton: max_kv 256 < 1024 (Triton faster there; measured on H200, kernels/gdpa/hopper/NOTES.md)",
        )
        assert _choose("fwd", 512, 2048)[1].startswith("triton: max_q 512 < 1024")
        assert _choose("bwd", 16, 512)[0] == "hopper"
        assert _choose("bwd", 16, 16) == (
            "hopper",
            "hopper: faster wherever supported (measured on H200, kernels/gdpa/hopper/NOTES.md)",
        )
        assert _choose("fwd", 16, 16, backend="hopper") == ("hopper", "hopper: backend='hopper' requested")
        assert _choose("fwd", 4096, 4096, backend="triton") == ("triton", "triton: backend='triton' requested")
    with fake_hopper(unsupported_reason="head_dim 16 not supported; allowed: 64, 128"):
        assert _choose("fwd", 4096, 4096) == (
            "triton",
            "triton: hopper does not support this call: head_dim 16 not supported; allowed: 64, 128",
        )
        with pytest.raises(ValueError, match=r"^gdpa: backend='hopper' does not support this call: head_dim 16"):
            _choose("bwd", 4096, 4096, backend="hopper")
    with fake_hopper(available_reason="not sm90 (got sm80)"):
        assert _choose("fwd", 4096, 4096) == ("triton", "triton: hopper unavailable: not sm90 (got sm80)")


def test_a_hopper_module_that_fails_to_import_makes_the_backend_unavailable(monkeypatch):
    broken = types.ModuleType(dispatch.HOPPER_MODULE)  # lacks the contract's functions
    monkeypatch.setitem(sys.modules, dispatch.HOPPER_MODULE, broken)
    dispatch.hopper_backend.cache_clear()
    try:
        assert _choose("fwd", 4096, 4096)[1] == (
            "triton: hopper unavailable: kernels.gdpa.hopper lacks unavailable, unsupported, forward, backward"
        )
    finally:
        dispatch.hopper_backend.cache_clear()


def test_forward_and_backward_choose_their_backends_independently(fake_hopper):
    """max_q 100 keeps the forward on Triton (< 1024); max_kv 600 sends the backward to Hopper (>= 512)."""
    b = _batch().with_grad()
    with fake_hopper() as fake:
        record = {}
        out = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, 100, 600, record=record)
        assert fake.calls == [] and record["fwd"]["source"] == "interpreter"
        torch.autograd.grad(out, (b.q, b.k, b.v), b.dout)
        assert fake.calls == ["bwd"]
        assert record["dispatch"]["fwd"]["backend"] == "triton" and record["dispatch"]["bwd"]["backend"] == "hopper"
        fake.calls.clear()
        gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, 1024, 1024, record=record)
        assert fake.calls == ["fwd"] and record["hopper_fwd"] == {"kernel": "fake"}


# ------------------------------------------------------------------------------------ no host sync
HOST_READS = ("item", "cpu", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__")


@contextlib.contextmanager
def host_reads_raise():
    """Every Tensor method that reads a value back to the host raises, unless Triton's interpreter calls
    it (on a CPU it copies arguments to numpy to run the kernel: on a GPU that is a launch, not a read)."""
    import triton

    triton_dir = os.path.dirname(triton.__file__)

    def guarded(name, original):
        def method(self, *args, **kwargs):
            caller = sys._getframe(1)
            if not caller.f_code.co_filename.startswith(triton_dir):
                raise AssertionError(f"host read: Tensor.{name} from {caller.f_code.co_filename}:{caller.f_lineno}")
            return original(self, *args, **kwargs)

        return method

    with pytest.MonkeyPatch.context() as mp:
        for name in HOST_READS:
            mp.setattr(torch.Tensor, name, guarded(name, getattr(torch.Tensor, name)))
        yield


@pytest.mark.parametrize("options", [None, GDPAOptions(backend="triton", fwd_tiles=(16, 32, 4, 1))])
def test_a_default_call_reads_nothing_back_forward_and_backward(options):
    b = _batch(q_len=(5, 0, 17), kv_len=(7, 3, 20)).with_grad()
    record = {}
    ref = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, options=options)
    ref_grads = torch.autograd.grad(ref, (b.q, b.k, b.v), b.dout)
    with host_reads_raise():
        out = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, options=options, record=record)
        grads = torch.autograd.grad(out, (b.q, b.k, b.v), b.dout)
        with pytest.raises(AssertionError, match=r"host read: Tensor\.cpu"):  # the guard works: "full" reads
            gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, validate="full")
    assert torch.equal(out, ref) and all(torch.equal(g, r) for g, r in zip(grads, ref_grads, strict=True))
    assert set(record) == {"dispatch", "fwd", "dkdv", "dq"}


def test_provider_calls_the_op_with_its_options_and_record():
    p = get_provider("gdpa_triton", {"dkdv_tiles": [32, 16, 4, 1]})
    b = _batch()
    p.build(b, CaseSpec(), "bwd")()
    got = p.kernel_configs()
    assert got["dkdv"]["tiles"] == [32, 16, 4, 1] and got["dkdv"]["source"] == "pinned"
    got["dkdv"]["tiles"] = None
    assert p.kernel_configs()["dkdv"]["tiles"] == [32, 16, 4, 1]  # a copy: the runner's record is its own


def test_the_tile_sweep_config_names_valid_options_matching_its_labels():
    """configs/tune-gdpa.yaml: every candidate parses (a typo would fail the config at load) and its
    label spells the tiles it pins, so a results table reads right."""
    import pathlib
    import re

    import yaml

    cfg = yaml.safe_load((pathlib.Path(__file__).parents[1] / "configs" / "tune-gdpa.yaml").read_text())
    entries = [e for s in cfg["sets"] for e in s["providers"] if isinstance(e, dict)]
    assert len({e["label"] for e in entries}) == 13
    for e in entries:
        p = get_provider(e["name"], e["options"])
        kernel, spelled = re.fullmatch(r"(fwd|dkdv|dq)_(\w+)", e["label"]).groups()
        tiles = p.options_record()[f"{kernel}_tiles"]
        assert spelled == "x".join(map(str, tiles[:4])) + (f"r{tiles[4]}" if len(tiles) > 4 else ""), e
