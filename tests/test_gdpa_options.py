"""Provider options contract (kernels/registry.py) and the GDPA op's options, its backend table and
length-band plans (kernels/gdpa/backends.py, plan.py), and that a default call never reads device memory
back (CPU, Triton interpreter)."""

import contextlib
import dataclasses
import os
import sys
import types

import pytest
import torch

from kernels.gdpa import GDPAOptions, backends, gdpa
from kernels.gdpa.bands import WHOLE, Band
from kernels.gdpa.call import GDPACall
from kernels.gdpa.plan import Stage, plan
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
    assert (opts.fwd_plan, opts.bwd_plan) == (None, None)
    d = {
        "backend": "triton",
        "fwd_tiles": [128, 32, 8, 3, 128],
        "dkdv_tiles": None,
        "dq_tiles": [64, 32, 4, 3],
        "fwd_plan": None,
        "bwd_plan": None,
        "concurrent_stages": True,
    }
    opts = GDPAOptions.from_dict(d)
    assert opts.fwd_tiles == (128, 32, 8, 3, 128) and opts.to_dict() == d
    assert GDPAOptions.from_dict(opts.to_dict()) == opts
    assert GDPAOptions(backend="hopper").merged({"fwd_tiles": [64, 32, 4, 1]}).to_dict() == {
        "backend": "hopper",
        "fwd_tiles": [64, 32, 4, 1],
        "dkdv_tiles": None,
        "dq_tiles": None,
        "fwd_plan": None,
        "bwd_plan": None,
        "concurrent_stages": True,
    }
    planned = GDPAOptions.from_dict({"fwd_plan": [["triton", 0, 128], {"backend": "hopper", "lo": 128}]})
    assert planned.fwd_plan == (("triton", 0, 128), ("hopper", 128, None))
    assert planned.to_dict()["fwd_plan"] == [["triton", 0, 128], ["hopper", 128, None]]
    assert GDPAOptions.from_dict(planned.to_dict()) == planned
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.backend = "auto"  # frozen: built once, shared by every call


@pytest.mark.parametrize(
    "options,message",
    [
        (
            {"fwd_tile": [64, 32, 4, 1]},
            "unknown option 'fwd_tile'; allowed: backend, fwd_tiles, dkdv_tiles, dq_tiles, fwd_plan, bwd_plan, "
            "concurrent_stages",
        ),
        (
            {"backend": "cuda"},
            "backend: expected one of auto, packed, hopper, hopper_persistent, owned, triton, got 'cuda'",
        ),
        ({"concurrent_stages": "yes"}, "concurrent_stages: expected true or false, got 'yes'"),
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
        ({"fwd_plan": [["triton", 0, 128]]}, "fwd_plan: expected a list of [backend, lo, hi] (hi null = no bound)"),
        ({"bwd_plan": [["triton", 5, None]]}, "bwd_plan: expected a list of [backend, lo, hi]"),
        ({"fwd_plan": []}, "fwd_plan: expected a list of [backend, lo, hi]"),
        ({"fwd_plan": "triton"}, "fwd_plan: expected a list of [backend, lo, hi]"),
        ({"fwd_plan": [["triton", 0, 100], ["hopper", 128, None]]}, "fwd_plan: bands must meet end to start"),
        (
            {"fwd_plan": [["cuda", 0, None]]},
            "fwd_plan: backend 'cuda'; allowed: packed, hopper, hopper_persistent, owned, triton",
        ),
        ({"fwd_plan": [["triton", 0, 0], ["triton", 0, None]]}, "fwd_plan: band hi must be an integer > lo (0)"),
        ({"fwd_plan": [["triton", False, None]]}, "fwd_plan: expected a list of [backend, lo, hi]"),
        ({"fwd_plan": [{"backend": "triton", "top": 3}]}, "fwd_plan: unknown key 'top'; allowed: backend, lo, hi"),
        (
            {"backend": "triton", "fwd_plan": [["triton", 0, None]]},
            "fwd_plan: pins the backends itself; leave backend at 'auto' (got 'triton')",
        ),
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


# ------------------------------------------------------------------------- backend table and plans
def _batch(q_len=(5, 0, 9), kv_len=(7, 3, 4), **kw):
    return make_batch(list(q_len), list(kv_len), H=4, Hkv=2, D=16, dtype=torch.float32, seed=1, **kw)


def _call(b, max_q=None, max_kv=None, self_attention=False, **math):
    kv_offsets = b.q_offsets if self_attention else b.kv_offsets
    return GDPACall(
        b.q, b.k, b.v, b.q_offsets, kv_offsets, b.max_q if max_q is None else max_q,
        b.max_kv if max_kv is None else max_kv, **math,
    )  # fmt: skip


def test_hopper_backend_on_cpu_is_a_one_line_error_and_auto_runs_triton_with_the_reason():
    b = _batch()
    why = backends.unavailable("hopper", b.q.device)
    assert why  # no Hopper kernel runs on a CPU, whatever is installed
    with pytest.raises(ValueError) as exc:
        gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, options=GDPAOptions(backend="hopper"))
    assert str(exc.value) == f"gdpa: backend='hopper' cannot run this call: hopper unavailable: {why}"
    record = {}
    out = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, record=record)
    assert record["dispatch"]["fwd"]["backend"] == "packed" and out.shape == b.q.shape  # short: the table packs it
    assert get_provider("gdpa_hopper").availability(torch.device("cpu")) == why
    # the backward, which the table prefers on Hopper everywhere, says why it runs Triton (cross-attention
    # beyond 128 tokens, which the packed row does not take)
    packed_why = backends.unsupported("packed", _call(b, 300, 300))
    assert plan("bwd", _call(b, 300, 300), GDPAOptions()) == [
        Stage("triton", WHOLE, f"triton: packed does not support this call: {packed_why}; hopper unavailable: {why}")
    ]


def _reference_rows(call, band, out, do=None, grads=None):
    """What a correct backend writes for the sequences of `band`: exact GDPA (and its gradients) per
    sequence, read on the host (a fake backend may; the real ones never do)."""
    from kernels.reference import gdpa_sequence

    q_off, kv_off = call.q_offsets.tolist(), call.kv_offsets.tolist()
    spec = CaseSpec(activation=call.activation, alpha=call.alpha, qk_scale=call.qk_scale, causal=call.causal)
    for i in range(call.batch):
        qs, ks = slice(q_off[i], q_off[i + 1]), slice(kv_off[i], kv_off[i + 1])
        key = min(qs.stop - qs.start, ks.stop - ks.start)
        if not (band.lo <= key < (band.hi if band.hi is not None else 1 << 40)):
            continue
        q, k, v = (t.detach().requires_grad_(grads is not None) for t in (call.q[qs], call.k[ks], call.v[ks]))
        with torch.set_grad_enabled(grads is not None):
            o = gdpa_sequence(q, k, v, spec)
        if grads is None:
            out[qs] = o
        else:
            g = torch.autograd.grad(o, (q, k, v), do[qs], allow_unused=True) if o.numel() else (None,) * 3
            for dst, src, rows, ref in zip(grads, g, (qs, ks, ks), (q, k, v), strict=True):
                dst[rows] = torch.zeros_like(ref) if src is None else src
    return out if grads is None else grads


class FakeHopper:
    """Stands in for kernels/gdpa/hopper: available, supports what `unsupported_reason` allows, records each
    launch's band, and writes exact GDPA rows for the sequences of its band only — so a plan that mixes it
    with Triton must stitch one correct output."""

    def __init__(self, unsupported_reason=None, available_reason=None):
        self.calls = []
        self.module = types.ModuleType(backends.ROWS["hopper"].module)
        self.module.unavailable = lambda device: available_reason
        self.module.unsupported = lambda call: unsupported_reason
        self.module.forward = self.forward
        self.module.backward = self.backward

    def forward(self, call, band, options, out=None, record=None):
        self.calls.append(("fwd", band))
        out = torch.full_like(call.q, float("nan")) if out is None else out
        if record is not None:
            record["hopper_fwd"] = {"kernel": "fake"}
        return _reference_rows(call, band, out)

    def backward(self, call, do, band, options, out=None, record=None):
        self.calls.append(("bwd", band))
        out = tuple(torch.full_like(t, float("nan")) for t in (call.q, call.k, call.v)) if out is None else out
        return _reference_rows(call, band, None, do=do, grads=out)


@pytest.fixture
def fake_hopper(monkeypatch):
    @contextlib.contextmanager
    def install(**kw):
        fake = FakeHopper(**kw)
        monkeypatch.setitem(sys.modules, backends.ROWS["hopper"].module, fake.module)
        # the persistent backward's row: the same stand-in (kernels/gdpa/hopper/persistent_backend.py)
        monkeypatch.setitem(sys.modules, backends.ROWS["hopper_persistent"].module, fake.module)
        backends.load.cache_clear()
        try:
            yield fake
        finally:
            backends.load.cache_clear()

    yield install
    backends.load.cache_clear()


def _plan(mode, max_len, backend="auto", self_attention=True, **opts):
    b = _batch(q_len=(5, 3, 9), kv_len=(5, 3, 9))
    return plan(mode, _call(b, max_len, max_len, self_attention), GDPAOptions(backend=backend, **opts))


def test_auto_plan_follows_the_table_by_length_band(fake_hopper):
    source = backends.ROWS["hopper"].source
    packed_source = backends.ROWS["packed"].source
    short = Stage("packed", Band(0, 128), f"packed: preferred for min(Lq, Lk) in [0, 128) ({packed_source})")
    with fake_hopper():
        assert [(s.backend, s.band) for s in _plan("fwd", 2048)] == [
            ("packed", Band(0, 128)),
            ("triton", Band(128, 512)),
            ("hopper", Band(512)),
        ]
        assert _plan("fwd", 2048)[2].reason == f"hopper: preferred for min(Lq, Lk) in [512, inf) ({source})"
        # bands no sequence can reach are dropped; a plan of one stage runs the whole batch, unfiltered
        assert [(s.backend, s.band) for s in _plan("fwd", 300)] == [("packed", Band(0, 128)), ("triton", Band(128))]
        assert [(s.backend, s.band) for s in _plan("fwd", 100)] == [("packed", WHOLE)]
        # cross-attention beyond a pack is not the packed row's
        assert [(s.backend, s.band) for s in _plan("fwd", 300, self_attention=False)] == [("triton", WHOLE)]
        assert _plan("bwd", 2048) == [
            short,
            Stage("hopper", Band(128), f"hopper: preferred for min(Lq, Lk) in [0, inf) ({source})"),
        ]
        assert _plan("fwd", 16, backend="hopper") == [Stage("hopper", WHOLE, "hopper: backend='hopper' requested")]
        assert _plan("fwd", 4096, backend="triton") == [Stage("triton", WHOLE, "triton: backend='triton' requested")]
        pinned = _plan("fwd", 64, fwd_plan=[["hopper", 0, 10], ["triton", 10, None]])
        assert [(s.backend, s.band, s.reason) for s in pinned] == [
            ("hopper", Band(0, 10), "hopper: fwd_plan pinned"),
            ("triton", Band(10), "triton: fwd_plan pinned"),
        ]
    with fake_hopper(unsupported_reason="head dim 16 not supported; allowed: 64, 128"):
        assert _plan("fwd", 4096) == [
            short,
            Stage(
                "triton",
                Band(128),
                "triton: preferred for [0, inf); hopper does not support this call: head dim 16 not supported; "
                "allowed: 64, 128",
            ),
        ]
        with pytest.raises(ValueError, match=r"^gdpa: backend='hopper' cannot run this call: hopper does not support"):
            _plan("bwd", 4096, backend="hopper")
        with pytest.raises(ValueError, match=r"^gdpa: fwd_plan's backend 'hopper' cannot run this call: hopper does"):
            _plan("fwd", 64, fwd_plan=[["hopper", 0, None]])
    with fake_hopper(available_reason="not sm90 (got sm80)"):
        assert _plan("bwd", 4096) == [
            short,
            Stage("triton", Band(128), "triton: hopper unavailable: not sm90 (got sm80)"),
        ]


def test_auto_times_its_candidates_once_per_shape_class_and_keeps_the_fastest(fake_hopper, monkeypatch):
    from kernels.gdpa import choice
    from kernels.gdpa.plan import candidates, label

    speed = {
        "packed[0, 128)+triton[128, 512)+hopper[512, inf)": 2.0,
        "packed": 1.2,
        "triton": 1.0,
        "hopper": 3.0,
        "triton[0, 256)+hopper[256, inf)": 2.5,
        "triton[0, 512)+hopper[512, inf)": 1.8,
        "triton[0, 1024)+hopper[1024, inf)": 1.5,
    }
    current, runs = [None], []

    def fake_time(fn, flush):
        assert flush.numel() >= 50 << 20  # the L2 is flushed before each call (the H200's is 50 MB)
        fn()
        return speed[current[0]]

    def run(stages):
        current[0] = label(stages)
        runs.append(label(stages))

    monkeypatch.setattr(choice, "MEASURED_ON", ("cpu",))
    monkeypatch.setattr(choice, "_time_ms", fake_time)
    choice.forget()
    b = _batch(q_len=(5, 3, 9), kv_len=(5, 3, 9))
    call = _call(b, 2048, 2048, self_attention=True)
    with fake_hopper():
        options = GDPAOptions()
        found = candidates("fwd", call, options)
        # the table's plan, each backend alone, then the splits of backends.SPLITS not yet among them
        assert [label(c) for c in found] == [
            "packed[0, 128)+triton[128, 512)+hopper[512, inf)",
            "packed",
            "hopper",
            "triton",
            "triton[0, 256)+hopper[256, inf)",
            "triton[0, 512)+hopper[512, inf)",
            "triton[0, 1024)+hopper[1024, inf)",
        ]
        # the backward's: the owned backward too, a candidate of that pass only, and the owned / Hopper splits; the
        # pinned-only persistent row (the Hopper row's backward is its walk up to 2,048 sequences) in neither pass
        assert [label(c) for c in candidates("bwd", call, options)] == [
            "packed[0, 128)+hopper[128, inf)",
            "packed",
            "hopper",
            "owned",
            "triton",
            "owned[0, 256)+hopper[256, inf)",
            "owned[0, 512)+hopper[512, inf)",
        ]
        stages, measured = choice.plan_for("fwd", call, options, run)
        assert [s.backend for s in stages] == ["triton"] and measured == speed
        # a warm-up run each, then choice.ROUNDS timed rounds over all candidates in turn
        assert runs == [label(c) for c in found] * (1 + choice.ROUNDS)
        n = len(runs)
        assert choice.plan_for("fwd", call, options, run) == (stages, speed) and len(runs) == n  # cached
        # another shape class (other max lengths) measures again; a pinned backend times nothing
        other = _call(b, 8192, 8192, self_attention=True)
        assert choice.plan_for("fwd", other, options, run)[1] == speed and len(runs) == 2 * n
        pinned = GDPAOptions(backend="hopper")
        assert choice.plan_for("fwd", call, pinned, run) == (candidates("fwd", call, pinned)[0], None)
        assert len(runs) == 2 * n
        # a split whose edge no sequence reaches is not a candidate; max 300 reaches 256 only
        short = _call(b, 300, 300, self_attention=True)
        assert [label(c) for c in candidates("fwd", short, options)] == [
            "packed[0, 128)+triton[128, inf)",
            "packed",
            "hopper",
            "triton",
            "triton[0, 256)+hopper[256, inf)",
        ]
        # a candidate that raises is not skipped in silence
        choice.forget()

        def broken(stages):
            if stages[-1].backend == "hopper":
                raise RuntimeError("illegal memory access")

        with pytest.raises(RuntimeError, match="illegal memory access"):
            choice.plan_for("fwd", call, options, broken)
        # a split within SPLIT_MARGIN of the fastest one-backend plan loses to it; further ahead, it wins
        choice.forget()
        speed.update({"triton[0, 1024)+hopper[1024, inf)": 0.99, "triton": 1.0})
        assert [s.backend for s in choice.plan_for("fwd", call, options, run)[0]] == ["triton"]
        choice.forget()
        speed["triton[0, 1024)+hopper[1024, inf)"] = 0.97
        assert [s.backend for s in choice.plan_for("fwd", call, options, run)[0]] == ["triton", "hopper"]
    choice.forget()


def test_shape_classes_tell_apart_the_batches_a_power_of_two_merged():
    """The production log-normal (ΣL 178,378) and spike (ΣL 255,909) batches at max 4096, and target_history
    (ΣLq 147,316, max q 256) vs seeds (221,184, 192), ran each other's measured choice under power-of-two
    classes; at 3 significant bits they are measured apart, while nearby batches still share one class."""
    from kernels.gdpa.choice import bucket

    assert bucket(178_378) != bucket(255_909) and bucket(147_316) != bucket(221_184) and bucket(256) != bucket(192)
    assert bucket(178_378) == bucket(190_000) == 196_608 and bucket(4096) == bucket(3977) == 4096
    assert [bucket(n) for n in (0, 1, 5, 7, 9, 1000)] == [0, 1, 5, 7, 10, 1024]
    assert all(n <= bucket(n) < 1.25 * n + 1 for n in range(1, 5000))


def test_a_backend_module_that_fails_its_contract_is_unavailable(monkeypatch):
    broken = types.ModuleType(backends.ROWS["hopper"].module)  # lacks the contract's functions
    monkeypatch.setitem(sys.modules, backends.ROWS["hopper"].module, broken)
    backends.load.cache_clear()
    try:
        assert _plan("bwd", 4096)[-1].reason == (
            "triton: hopper unavailable: kernels.gdpa.hopper lacks unavailable, unsupported, forward, backward"
        )
    finally:
        backends.load.cache_clear()


@pytest.mark.parametrize("self_attention", [True, False])
def test_a_plan_over_two_backends_writes_every_row_once_forward_and_backward(fake_hopper, self_attention):
    """Bands split between the (fake, exact) Hopper backend and the Triton interpreter: one output, equal
    to the reference, with the backward planned differently from the forward."""
    from kernels.gdpa.launch import poisoned_outputs
    from kernels.reference import reference_outputs

    lengths = [5, 0, 17, 9, 30, 12, 1]
    b = make_batch(lengths, lengths, H=4, Hkv=2, D=16, dtype=torch.float32, seed=4).with_grad()
    kv_off = b.q_offsets if self_attention else b.kv_offsets
    spec = CaseSpec(mode="bwd", activation="silu", alpha=0.8, qk_scale=1.2, causal=True)
    ref, ref_grads = reference_outputs(b, spec, grads=True)
    opts = GDPAOptions(
        fwd_plan=[["triton", 0, 6], ["hopper", 6, 13], ["triton", 13, None]],
        bwd_plan=[["hopper", 0, 10], ["triton", 10, None]],
    )
    record = {}
    with fake_hopper() as fake, poisoned_outputs():
        out = gdpa(
            b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv,
            activation="silu", alpha=0.8, qk_scale=1.2, causal=True, options=opts, record=record,
        )  # fmt: skip
        grads = torch.autograd.grad(out, (b.q, b.k, b.v), b.dout)
    assert fake.calls == [("fwd", Band(6, 13)), ("bwd", Band(0, 10))]
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4)
    for got, want in zip(grads, ref_grads, strict=True):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-4)
    assert record["dispatch"]["fwd"]["backend"] == "triton+hopper"
    assert [s["band"] for s in record["dispatch"]["fwd"]["stages"]] == ["[0, 6)", "[6, 13)", "[13, inf)"]
    assert {"fwd [0, 6)", "fwd [13, inf)", "dkdv [10, inf)", "dq [10, inf)", "hopper_fwd"} <= set(record)
    if self_attention:  # the Triton launch of a bounded band sizes its grid by the band, not the batch
        assert record["fwd [0, 6)"]["grid"] == [1, 7 * 4]


def test_forward_and_backward_plan_independently(fake_hopper):
    """Short sequences keep the forward on Triton; the backward goes to Hopper (the table)."""
    b = _batch().with_grad()
    with fake_hopper() as fake:
        record = {}
        out = gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, 100, 600, record=record)
        assert fake.calls == [] and record["fwd"]["source"] == "interpreter"
        torch.autograd.grad(out, (b.q, b.k, b.v), b.dout)
        assert fake.calls == [("bwd", WHOLE)]
        assert record["dispatch"]["fwd"]["backend"] == "triton" and record["dispatch"]["bwd"]["backend"] == "hopper"


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


@pytest.mark.parametrize(
    "options,kernels",
    [
        (None, {"packed_fwd", "packed_bwd"}),  # short sequences: the table packs them
        (GDPAOptions(backend="triton", fwd_tiles=(16, 32, 4, 1)), {"fwd", "dkdv", "dq"}),
    ],
)
def test_a_default_call_reads_nothing_back_forward_and_backward(options, kernels):
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
    assert set(record) == {"dispatch", *kernels}


def test_a_call_without_a_graph_skips_autograd_and_gives_the_same_output(monkeypatch):
    """Under no_grad (or with inputs that need no gradient) the op runs its forward without
    autograd.Function (host time per call: docs/experiments/host_overhead.py); the output and the record
    are the autograd path's."""
    from kernels.gdpa import interface

    b = _batch()
    args = (b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv)
    with_graph, rec_graph = None, {}
    leaves = [t.clone().requires_grad_(True) for t in (b.q, b.k, b.v)]
    with_graph = gdpa(*leaves, *args[3:], activation="silu", record=rec_graph).detach()
    applied = []
    real_apply = interface._GDPAFunction.apply

    def counted(*a):
        applied.append(1)
        return real_apply(*a)

    monkeypatch.setattr(interface._GDPAFunction, "apply", counted)
    rec_plain = {}
    with torch.no_grad():
        plain = gdpa(*args, activation="silu", record=rec_plain)
    assert applied == [] and torch.equal(plain, with_graph) and rec_plain == rec_graph
    gdpa(*args, activation="silu")  # grad mode on, but nothing requires a gradient
    assert applied == []
    out = gdpa(*leaves, *args[3:], activation="silu")
    assert applied == [1] and out.requires_grad


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
