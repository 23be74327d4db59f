"""The packed GDPA kernels (kernels/gdpa/packed*.py, issue 30) against the exact reference.

CPU: the Triton interpreter, fp32/fp16 (the interpreter's bf16 tl.dot is wrong in triton 3.6), packs of 16
rows and plan chunks of 8 sequences (monkeypatched, so tiny batches reach every edge: a pack exactly full,
a sequence filling one alone, the sequence cap, zero-length sequences between, chunk and band boundaries),
outputs NaN-poisoned so an unwritten row fails. GPU (`-m gpu`): bf16, the shipped 128-row packs, the
production log-normal batch's short band, autotuned.
"""

import contextlib
import math
import os
import sys

import numpy as np
import pytest
import torch

from kernels.activations import ACTIVATION_NAMES
from kernels.gdpa import GDPAOptions, backends, gdpa, packed, packed_bwd, packed_fwd, packed_plan
from kernels.gdpa.bands import Band
from kernels.gdpa.call import GDPACall
from kernels.gdpa.launch import poisoned_outputs
from kernels.gdpa.packed_bwd import BWD_CONFIGS
from kernels.gdpa.packed_fwd import FWD_CONFIGS
from kernels.gdpa.plan import candidates, label, plan
from kernels.reference import reference_outputs
from kernels.registry import CaseSpec
from workloads import make_batch

PACKED = GDPAOptions(fwd_plan=[["packed", 0, None]], bwd_plan=[["packed", 0, None]])


@pytest.fixture
def small_packs(monkeypatch):
    monkeypatch.setattr(packed, "PACK_ROWS", 16)
    monkeypatch.setattr(packed_plan, "CHUNK", 8)
    with poisoned_outputs():
        yield


def rel(a, b):
    a, b = a.double(), b.double()
    e = ((a - b).norm() / b.norm().clamp_min(1e-30)).item()
    return e if math.isfinite(e) else math.inf


def compare(q_len, kv_len=None, *, H=4, Hkv=2, D=16, dtype=torch.float32, act="fast_gelu", alpha=-0.7,
            qk_scale=1.3, causal=False, options=PACKED, device="cpu", record=None, seed=0):  # fmt: skip
    """(out, dq, dk, dv) relative errors of one call through the public op; kv_len None: self-attention
    (one offsets tensor, as the packed backend needs for sequences longer than a pack)."""
    b = make_batch(q_len, q_len if kv_len is None else kv_len, H=H, Hkv=Hkv, D=D, dtype=dtype, device=device, seed=seed)
    bg = b.with_grad()
    kv_offsets = b.q_offsets if kv_len is None else b.kv_offsets
    out = gdpa(
        bg.q, bg.k, bg.v, b.q_offsets, kv_offsets, b.max_q, b.max_kv,
        activation=act, alpha=alpha, qk_scale=qk_scale, causal=causal, options=options, record=record,
    )  # fmt: skip
    grads = torch.autograd.grad(out, (bg.q, bg.k, bg.v), b.dout)
    spec = CaseSpec(activation=act, alpha=alpha, qk_scale=qk_scale, causal=causal)
    ref, ref_grads = reference_outputs(b, spec, grads=True, dtype=torch.float64)
    return [rel(out, ref)] + [rel(g, r) for g, r in zip(grads, ref_grads, strict=True)]


# ------------------------------------------------------------------------------------------ the plan
def host_plan(lq, lk, band, pack, chunk, maxseq=packed_plan.MAXSEQ):
    """The device plan's rule on the host: runs of consecutive in-band sequences that fit, next-fit, closed
    by an out-of-band sequence, a full pack, the sequence cap or a chunk edge; empty sequences ride along."""
    packs, first, held, fq, fk = [], None, 0, 0, 0
    for b, (a, c) in enumerate(zip(lq, lk, strict=True)):
        if held and b % chunk == 0:
            packs.append((first, held))
            held = 0
        empty = a == 0 and c == 0
        inside = band.lo <= min(a, c) < band.hi_arg and a <= pack and c <= pack and not empty
        if held and ((not inside and not empty) or (inside and (fq + a > pack or fk + c > pack or held == maxseq))):
            packs.append((first, held))
            held = 0
        if inside or (empty and 0 < held < maxseq):
            if held == 0:
                first, fq, fk = b, 0, 0
            held, fq, fk = held + 1, fq + a, fk + c
    return packs + ([(first, held)] if held else [])


@pytest.mark.parametrize(
    "n,chunk,band,self_attention",
    [(300, 2, Band(0, 129), True), (90, 8, Band(3, 12), False), (40, 64, Band(0), False)],
    ids=["two plan blocks", "band edges", "one chunk"],
)
def test_the_device_plan_is_the_host_rule(monkeypatch, n, chunk, band, self_attention):
    monkeypatch.setattr(packed_plan, "CHUNK", chunk)
    rng = np.random.default_rng(n)
    lq = rng.integers(0, 20, n)
    lq[rng.random(n) < 0.2] = 0
    lk = lq if self_attention else np.where(rng.random(n) < 0.3, 0, rng.integers(0, 20, n))
    lq[5:30] = 1  # a run of tiny sequences meets the cap on sequences per pack
    if self_attention:
        lk = lq
    off = lambda x: torch.tensor(np.concatenate([[0], np.cumsum(x)]), dtype=torch.int32)
    got = packed_plan.read(packed_plan.build(off(lq), off(lk), band, 16))
    assert got == host_plan(lq.tolist(), lk.tolist(), band, 16, chunk)
    covered = [b for first, count in got for b in range(first, first + count)]
    wanted = [b for b in range(n) if band.lo <= min(lq[b], lk[b]) < band.hi_arg and 0 < max(lq[b], lk[b]) <= 16]
    assert set(wanted) <= set(covered) and len(covered) == len(set(covered))
    assert all(sum(lq[f : f + c]) <= 16 and sum(lk[f : f + c]) <= 16 for f, c in got)


def test_an_empty_band_or_batch_plans_nothing(small_packs):
    off = torch.tensor([0, 5, 9], dtype=torch.int32)
    assert packed_plan.read(packed_plan.build(off, off, Band(10, 20), 16)) == []
    empty = torch.zeros(1, dtype=torch.int32)
    assert packed_plan.read(packed_plan.build(empty, empty, Band(0), 16)) == []


# ----------------------------------------------------------------------------------- forward + grads
# A pack of 16 rows: 16 fills one alone, 8+8 and 5+11 fill one exactly, 17 is above a pack (Triton runs it),
# zeros sit between, twenty 1s meet the cap of 16 sequences per pack; chunks of 8 sequences cut runs.
EDGES = [16, 8, 8, 0, 0, 5, 11, 17, 3, 0, 4, 2, *([1] * 20), 15, 0, 9, 30, 1]


@pytest.mark.parametrize(
    "causal,fwd_plan,bwd_plan",
    [
        (False, [["packed", 0, None]], [["packed", 0, None]]),
        (True, [["packed", 0, None]], [["packed", 0, None]]),
        (True, [["packed", 0, 8], ["triton", 8, None]], [["triton", 0, 3], ["packed", 3, 12], ["triton", 12, None]]),
    ],
    ids=["packed alone", "packed alone causal", "mixed causal"],
)
def test_pack_edges_match_the_reference(small_packs, causal, fwd_plan, bwd_plan):
    options = GDPAOptions(fwd_plan=fwd_plan, bwd_plan=bwd_plan)
    record = {}
    errs = compare(EDGES, causal=causal, options=options, record=record)
    assert max(errs) < 1e-5, errs
    assert {s["backend"] for s in record["dispatch"]["fwd"]["stages"]} == {f[0] for f in fwd_plan}
    if len(fwd_plan) == 1:  # packed over [0, inf): packs up to 16 tokens, Triton above
        assert {"packed_fwd [0, 17)", "fwd [17, inf)", "packed_bwd [0, 17)", "dkdv [17, inf)"} <= set(record)
        assert record["packed_fwd [0, 17)"]["source"] == "interpreter"


@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_every_activation(small_packs, act):
    causal = ACTIVATION_NAMES.index(act) % 2 == 1
    errs = compare([5, 0, 9, 3, 12, 1, 20], causal=causal, act=act)
    assert max(errs) < 1e-5, (act, causal, errs)


def test_cross_attention_gqa_fp16_and_empty_partners(small_packs):
    """Queries and keys with their own offsets (every sequence within a pack), a sequence with no keys and
    one with no queries (their other side's gradients are zeros), 4 query heads per KV head, fp16."""
    q_len, kv_len = [5, 0, 7, 3, 16, 2, 9], [2, 9, 0, 6, 16, 15, 1]
    errs = compare(q_len, kv_len, H=8, Hkv=2, D=32, dtype=torch.float16, act="silu", alpha=0.5, qk_scale=0.25)
    assert max(errs) < 5e-3, errs


def test_a_shipped_size_pack_at_head_dim_128():
    """The 128-row pack the backend ships (no monkeypatch): 60 + 68 fill one exactly, 127 and 128 one each,
    129 goes to Triton; the interpreter's 16-row sub-tiles each run only their sequences' key blocks."""
    with poisoned_outputs():
        errs = compare([60, 68, 127, 1, 129, 0, 128], D=128, H=2, Hkv=1, causal=True, act="gelu_tanh")
    assert max(errs) < 1e-5, errs


def test_a_neighbours_huge_values_never_leak(small_packs):
    """Two sequences in one pack: the second's huge keys and values (finite) reach no row of the first, the
    block-diagonal mask's zeros are exact. (A NaN or inf there would: 0 · NaN is NaN inside the GEMM; the
    Triton kernels' masked loads never read it.)"""
    b = make_batch([6, 6], [5, 6], H=2, D=16, dtype=torch.float32, seed=3)
    k, v = b.k.clone(), b.v.clone()
    k[5:], v[5:] = 1e4, 1e30
    out = gdpa(b.q, k, v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, activation="raw", options=PACKED)
    b.k, b.v = k, v
    ref, _ = reference_outputs(b, CaseSpec(activation="raw"), seqs=[0], dtype=torch.float64)
    assert rel(out[:6], ref) < 1e-6


# -------------------------------------------------------------------------- the backend in the table
def _call(q_len, kv_len, max_q, max_kv, self_attention):
    b = make_batch(q_len, kv_len, H=4, Hkv=2, D=16, dtype=torch.float32, seed=1)
    kv = b.q_offsets if self_attention else b.kv_offsets
    return GDPACall(b.q, b.k, b.v, b.q_offsets, kv, max_q, max_kv)


def test_cross_attention_beyond_a_pack_is_refused_in_one_line_and_auto_runs_triton():
    call = _call([5, 200], [300, 7], 200, 300, self_attention=False)
    why = backends.cannot_run("packed", call)
    assert why == (
        "packed does not support this call: cross-attention is packed only where every sequence fits a pack: "
        "max_seq_len_q and max_seq_len_kv <= 128 (got 200, 300)"
    )
    with pytest.raises(ValueError, match=r"^gdpa: fwd_plan's backend 'packed' cannot run this call: packed does"):
        plan("fwd", call, GDPAOptions(fwd_plan=[["packed", 0, None]]))
    stages = plan("fwd", call, GDPAOptions())
    assert [s.backend for s in stages] == ["triton"] and "packed does not support" in stages[0].reason


def test_auto_packs_the_short_band_and_measures_packed_alone():
    """backend="auto" on a CPU: the table's plan (packed under 128, Triton above; Hopper is unavailable);
    among the measured candidates, `packed` alone is packs plus Triton above them, so it runs any batch."""
    call = _call([5, 3, 9], [5, 3, 9], 2048, 2048, self_attention=True)
    stages = plan("fwd", call, GDPAOptions())
    assert [(s.backend, s.band) for s in stages] == [("packed", Band(0, 128)), ("triton", Band(128))]
    assert [label(c) for c in candidates("bwd", call, GDPAOptions())] == [
        "packed[0, 128)+triton[128, inf)",
        "packed",
        "owned",
        "triton",
    ]
    assert packed.split(call, Band(0)) == (Band(0, 129), Band(129))
    assert packed.split(call, Band(100, 200)) == (Band(100, 129), Band(129, 200))
    assert packed.split(call, Band(200)) == (None, Band(200))
    short = _call([5, 3, 9], [5, 3, 9], 100, 100, self_attention=True)
    assert packed.split(short, Band(0)) == (Band(0, 129), None)  # nothing can reach the Triton part


@contextlib.contextmanager
def host_reads_raise():
    """Tensor methods that read values back raise, unless Triton's interpreter calls them (on a CPU it
    copies kernel arguments to numpy: on a GPU that is a launch, not a read)."""
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
        for name in ("item", "cpu", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__"):
            mp.setattr(torch.Tensor, name, guarded(name, getattr(torch.Tensor, name)))
        yield


def test_packed_reads_nothing_back(small_packs):
    b = make_batch([5, 0, 17, 3], [5, 0, 17, 3], H=2, D=16, dtype=torch.float32, seed=2).with_grad()
    with host_reads_raise():
        out = gdpa(b.q, b.k, b.v, b.q_offsets, b.q_offsets, b.max_q, b.max_kv, options=PACKED)
        torch.autograd.grad(out, (b.q, b.k, b.v), b.dout)
    assert torch.isfinite(out).all()


# ---------------------------------------------------------------------------------------------- GPU
@pytest.fixture
def one_config(monkeypatch):
    """One tile config per kernel (these tests check math; autotuning would compile every config per
    activation), the packed ones and Triton's for the sequences above a pack."""
    monkeypatch.setattr(packed_fwd.packed_fwd_kernel_tuned, "configs", [packed_fwd.tile_config(FWD_CONFIGS[0])])
    monkeypatch.setattr(packed_bwd.packed_bwd_kernel_tuned, "configs", [packed_bwd.tile_config(BWD_CONFIGS[0])])
    tiles = (64, 64, 4, 2)
    with poisoned_outputs():
        whole = [["packed", 0, None]]
        yield GDPAOptions(fwd_plan=whole, bwd_plan=whole, fwd_tiles=tiles, dkdv_tiles=tiles, dq_tiles=tiles)


@pytest.mark.gpu
@pytest.mark.parametrize("act", ACTIVATION_NAMES)
def test_gpu_bf16_every_activation_causal_gqa_at_pack_edges(one_config, act):
    ql = [1, 0, 127, 1, 64, 64, 0, 128, 129, 30, 200, 3, 100, 28]
    for causal in (False, True):
        errs = compare(ql, H=4, Hkv=2, D=128, dtype=torch.bfloat16, act=act, causal=causal, device="cuda",
                       options=one_config, seed=7)  # fmt: skip
        assert max(errs) < 2e-2 and all(math.isfinite(e) for e in errs), (act, causal, errs)


@pytest.mark.gpu
def test_gpu_bf16_cross_attention_gqa_head_dim_64(one_config):
    errs = compare([1, 0, 127, 1, 64, 64, 0, 128], [3, 9, 0, 128, 1, 64, 17, 5], H=8, Hkv=2, D=64,
                   dtype=torch.bfloat16, device="cuda", options=one_config)  # fmt: skip
    assert max(errs) < 2e-2 and all(math.isfinite(e) for e in errs), errs


@pytest.mark.gpu
@pytest.mark.parametrize("max_len", [2048])
def test_gpu_bf16_production_lognormal_short_band(max_len):
    """configs/production.yaml's log-normal batch (846 of 1152 sequences under 128 tokens), bf16, the short
    band packed and the rest on Triton, autotuned; every element checked against the fp32 reference
    (relative error <= 3e-3 on output and gradients, issue 30's bar), and the record names what ran."""
    from workloads.pairing import build_lengths

    q, _ = build_lengths("lognormal", {"preset": "ml-20m"}, "self", {}, batch_size=1152, max_len=max_len, seed=0)
    record = {}
    options = GDPAOptions(
        fwd_plan=[["packed", 0, 128], ["triton", 128, None]], bwd_plan=[["packed", 0, 128], ["triton", 128, None]]
    )
    with poisoned_outputs():
        errs = compare(q, H=4, Hkv=4, D=128, dtype=torch.bfloat16, alpha=1.0, qk_scale=1.0, options=options,
                       device="cuda", record=record)  # fmt: skip
    assert max(errs) < 3e-3, errs
    for name in ("packed_fwd [0, 128)", "packed_bwd [0, 128)"):
        entry = record[name]
        assert entry["source"] == "autotuned" and entry["n_regs"] > 0 and entry["n_spills"] >= 0, record


@pytest.mark.gpu
def test_gpu_packed_call_never_syncs(one_config):
    """After the first call, the plan launch and the packed kernels run under CUDA's sync debug mode set to
    raise on any synchronizing call (the plan's pack count stays on the device)."""
    b = make_batch([1, 0, 127, 300, 40, 60], [1, 0, 127, 300, 40, 60], H=4, Hkv=2, D=128, dtype=torch.bfloat16,
                   device="cuda", seed=2).with_grad()  # fmt: skip

    def call():
        out = gdpa(b.q, b.k, b.v, b.q_offsets, b.q_offsets, b.max_q, b.max_kv, options=one_config, record={})
        return torch.autograd.grad(out, (b.q, b.k, b.v), b.dout)

    call()
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        call()
    finally:
        torch.cuda.set_sync_debug_mode(previous)


# ------------------------------------------------------------------------ a split plan's stages at once
def test_a_split_plans_stages_run_at_once_heaviest_first_into_one_set_of_outputs(small_packs, monkeypatch):
    """kernels/gdpa/concurrent.py: with `concurrent_stages` (the default) a plan of several launches makes its
    outputs once and hands every stage the same ones, the top band first (on the GPU each on a stream of its
    own). Here the streams are stood in for by running the launches in the order given: the stages then run
    against band order into NaN-poisoned outputs, and every row must still be written by exactly its stage."""
    from kernels.gdpa import concurrent

    runs = []

    def in_given_order(device, launches):
        runs.append(len(launches))
        los = [launch.args[3].band.lo for launch in launches]  # partial(_stage, mode, call, options, stage, ...)
        assert los == sorted(los, reverse=True), los  # the top band first
        for launch in launches:
            launch()

    monkeypatch.setattr(concurrent, "applies", lambda device: True)
    monkeypatch.setattr(concurrent, "run_concurrently", in_given_order)
    fwd_plan = [["packed", 0, 8], ["triton", 8, None]]
    bwd_plan = [["triton", 0, 3], ["packed", 3, 12], ["triton", 12, None]]
    record = {}
    errs = compare(EDGES, causal=True, options=GDPAOptions(fwd_plan=fwd_plan, bwd_plan=bwd_plan), record=record)
    assert max(errs) < 1e-5, errs
    assert runs == [2, 3]  # the forward's two stages, the backward's three, each pass at once
    one_after_another = GDPAOptions(fwd_plan=fwd_plan, bwd_plan=bwd_plan, concurrent_stages=False)
    assert compare(EDGES, causal=True, options=one_after_another) == pytest.approx(errs, abs=1e-9)
    assert runs == [2, 3]  # concurrent_stages=False: in band order on the caller's stream


def test_the_stages_fork_from_and_join_back_to_the_callers_stream(monkeypatch):
    """The stream protocol of run_concurrently, with stand-in streams: every side stream waits for the
    caller's before its stage is enqueued on it, the last stage runs on the caller's stream, and the caller's
    stream waits for every side stream before the call returns."""
    from kernels.gdpa import concurrent

    log = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def wait_stream(self, other):
            log.append(f"{self.name} waits {other.name}")

    main, current = Stream("main"), []
    monkeypatch.setattr(concurrent.torch.cuda, "current_stream", lambda device=None: current[-1] if current else main)

    @contextlib.contextmanager
    def on(stream):
        current.append(stream)
        yield
        current.pop()

    monkeypatch.setattr(concurrent.torch.cuda, "stream", on)
    monkeypatch.setattr(concurrent, "_SIDE", {0: [Stream("side0"), Stream("side1")]})
    stage = lambda name: lambda: log.append(f"{name} on {concurrent.torch.cuda.current_stream().name}")
    concurrent.run_concurrently(torch.device("cuda", 0), [stage("top"), stage("middle"), stage("short")])
    assert log == [
        "side0 waits main", "top on side0", "side1 waits main", "middle on side1", "short on main",
        "main waits side0", "main waits side1",
    ]  # fmt: skip


@pytest.mark.gpu
def test_gpu_a_split_plan_at_once_equals_it_in_order_and_captures_in_a_graph():
    """configs/production.yaml's log-normal 2048 batch, bf16, under the split plans auto chose on the H200
    (Triton below 1024, Hopper above; packed below 128 where Hopper is not installed): the stages at once
    (the default) give the forward bit for bit and the gradients within bf16 rounding (dQ's atomics) of the
    stages in order; the concurrent forward captured in a CUDA graph (side streams forked from and joined to
    the capturing stream) replays to the same output. The two timings are printed for the record."""
    from triton.testing import do_bench

    from workloads.pairing import build_lengths

    q_len, _ = build_lengths("lognormal", {"preset": "ml-20m"}, "self", {}, batch_size=1152, max_len=2048, seed=0)
    b = make_batch(q_len, q_len, H=4, D=128, dtype=torch.bfloat16, device="cuda", seed=0).with_grad()
    top = "hopper" if backends.module("hopper").unavailable(torch.device("cuda")) is None else "triton"
    low = "triton" if top == "hopper" else "packed"
    split = [[low, 0, 1024 if top == "hopper" else 128], [top, 1024 if top == "hopper" else 128, None]]
    runs = {}
    for name, at_once in (("at once", True), ("in order", False)):
        options = GDPAOptions(fwd_plan=split, bwd_plan=split, concurrent_stages=at_once)

        def fwd(options=options):
            with torch.no_grad():
                return gdpa(b.q, b.k, b.v, b.q_offsets, b.q_offsets, b.max_q, b.max_kv, options=options)

        out = gdpa(b.q, b.k, b.v, b.q_offsets, b.q_offsets, b.max_q, b.max_kv, options=options)
        grads = torch.autograd.grad(out, (b.q, b.k, b.v), b.dout)
        runs[name] = (out.detach(), grads, fwd, do_bench(fwd, warmup=25, rep=200))
    print({"plan": split, "fwd ms": {name: round(r[3], 4) for name, r in runs.items()}})
    (out, grads, fwd, _), (ref_out, ref_grads, _, _) = runs["at once"], runs["in order"]
    assert torch.equal(out, ref_out)
    for g, r in zip(grads, ref_grads, strict=True):
        assert rel(g, r) < 3e-3, rel(g, r)
    fwd()
    torch.cuda.synchronize()
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        captured = fwd()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, ref_out)
