"""Public GDPA entry point: `gdpa(...)`, its argument checks, and the autograd op over both backends.

    out = gdpa(q, k, v, q_offsets, kv_offsets, max_seq_len_q, max_seq_len_kv,
               activation="fast_gelu", alpha=1.0, qk_scale=1.0, causal=False)

q `[ΣLq, H, D]`, k/v `[ΣLk, Hkv, D]` (H % Hkv == 0), int32 offsets `[B+1]`, out like q. Differentiable
in q, k and v. A call with the default `validate="host"` never reads device memory back (no host sync):
the GPU keeps working through Python and the next launch. Each pass runs the plan plan.py makes (one or more
launches, each one backend of backends.py over one length band); tiles, backend and plans: options.py.
"""

from __future__ import annotations

import contextlib
import functools
import numbers
from typing import NoReturn

import torch

from kernels.activations import ACTIVATION_NAMES
from kernels.gdpa import backends, choice, concurrent, launch, plan
from kernels.gdpa.call import GDPACall, same_offsets
from kernels.gdpa.options import GDPAOptions

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DEFAULT_OPTIONS = GDPAOptions()  # frozen: one instance serves every call that passes none (no per-call parse)
VALIDATE = {
    "host": "shapes, dtypes, devices and arguments only, no host sync",
    "full": "also reads the offsets back and checks them, a host sync",
}


def _on_device_of(t: torch.Tensor):
    # Triton launches on the *current* CUDA device: make that the inputs' device (cuda:1 tensors from a
    # process whose current device is 0 would otherwise be rejected or run on the wrong GPU)
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _stage(mode: str, call: GDPACall, options: GDPAOptions, stage, record: dict | None, do, out):
    backend = backends.module(stage.backend)
    if mode == "fwd":
        return backend.forward(call, stage.band, options, out=out, record=record)
    return backend.backward(call, do, stage.band, options, out=out, record=record)


def _launch(mode: str, call: GDPACall, options: GDPAOptions, stages, record: dict | None, do=None):
    """Run `stages`; the caller (run_pass) has made the inputs' device the current one."""
    if len(stages) == 1 or not options.concurrent_stages or not concurrent.applies(call.q.device):
        result = None
        for stage in stages:
            result = _stage(mode, call, options, stage, record, do, result)
        return result
    # every stage writes its band's rows of one set of outputs, made here: concurrent.py
    out = launch.new_output(call.q) if mode == "fwd" else tuple(map(launch.new_output, (call.q, call.k, call.v)))
    heaviest_first = [  # the top band holds the longest sequences: the most work per sequence
        functools.partial(_stage, mode, call, options, stage, record, do, out) for stage in reversed(stages)
    ]
    concurrent.run_concurrently(call.q.device, heaviest_first)
    return out


def run_pass(mode: str, call: GDPACall, options: GDPAOptions, record: dict | None, do=None):
    """Run one pass ("fwd": out; "bwd": (dq, dk, dv)) as its plan says — pinned, or for backend="auto" the
    fastest candidate of plan.candidates, measured once per shape class (choice.py): each stage's backend
    over its band, all writing into one set of outputs."""
    # on the inputs' device: auto's timing records events on, and syncs, the current device (cuda:1 inputs timed
    # against device 0's idle stream chose a plan by host noise and cached it; the op-entry review, 2026-12-05)
    with _on_device_of(call.q):
        stages, measured = choice.plan_for(mode, call, options, lambda s: _launch(mode, call, options, s, None, do))
        if record is not None:
            record.setdefault("dispatch", {})[mode] = plan.record(stages, measured)
        return _launch(mode, call, options, stages, record, do)


class _GDPAFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, q_offsets, kv_offsets, facts, options, record):
        call = GDPACall(q, k, v, q_offsets, kv_offsets, *facts)
        out = run_pass("fwd", call, options, record)
        ctx.save_for_backward(q, k, v, q_offsets, kv_offsets)
        ctx.facts, ctx.options, ctx.record = facts, options, record
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable  # the kernels' gradients record no graph: a double
    def backward(ctx, do):  # backward raises rather than silently returning zeros
        q, k, v, q_offsets, kv_offsets = ctx.saved_tensors
        call = GDPACall(q, k, v, q_offsets, kv_offsets, *ctx.facts)
        dq, dk, dv = run_pass("bwd", call, ctx.options, ctx.record, do=do)
        return dq, dk, dv, None, None, None, None, None


def _fail(msg: str) -> NoReturn:
    """Raise the one-line error of a bad argument. Each check formats its message only when it fails: the
    checks run on every call, and formatting ~20 messages cost ~35 µs of host time per call."""
    raise ValueError(f"gdpa: {msg}")


def _describe(value) -> str:
    return "a tensor (reading it would sync the GPU)" if isinstance(value, torch.Tensor) else repr(value)


def check_arguments(
    q, k, v, q_offsets, kv_offsets, max_seq_len_q, max_seq_len_kv, activation, alpha, qk_scale, causal
) -> None:
    """Raise ValueError naming the first bad argument. Reads shapes, dtypes and devices only."""
    tensors = {"q": q, "k": k, "v": v, "q_offsets": q_offsets, "kv_offsets": kv_offsets}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            _fail(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name in ("k", "v", "q_offsets", "kv_offsets"):
        if tensors[name].device != q.device:
            _fail(f"{name} is on {tensors[name].device} but q is on {q.device}; all inputs must share a device")
    if not (q.dim() == 3 and k.dim() == 3 and v.dim() == 3):
        _fail(f"q, k, v must be 3-D [rows, heads, head_dim]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.dtype not in SUPPORTED_DTYPES:
        _fail(f"q: dtype {q.dtype} not supported; allowed: float16, bfloat16, float32")
    if not (k.dtype == q.dtype and v.dtype == q.dtype):
        _fail(f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.shape != v.shape:
        _fail(f"k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    H, D = q.shape[1], q.shape[2]
    Hkv = k.shape[1]
    if k.shape[2] != D:
        _fail(f"head_dim of k ({k.shape[2]}) differs from q ({D})")
    if D not in SUPPORTED_HEAD_DIMS:
        _fail(f"head_dim {D} not supported; allowed: {SUPPORTED_HEAD_DIMS}")
    if not (Hkv > 0 and H % Hkv == 0):
        _fail(f"H ({H}) must be a multiple of Hkv ({Hkv})")
    if activation not in ACTIVATION_NAMES:
        _fail(f"unknown activation {activation!r}; allowed: {', '.join(ACTIVATION_NAMES)}")
    for name in ("q_offsets", "kv_offsets"):
        t = tensors[name]
        if t.dtype != torch.int32:
            _fail(f"{name} must be int32, got {t.dtype}")
        if not (t.dim() == 1 and t.numel() >= 1):
            _fail(f"{name} must be 1-D [B+1]")
    if q_offsets.numel() != kv_offsets.numel():
        _fail(f"q_offsets has {q_offsets.numel()} entries but kv_offsets has {kv_offsets.numel()}; both are [B+1]")
    # host numbers by contract: a tensor here would have to be read back (a sync)
    for name, value in (("max_seq_len_q", max_seq_len_q), ("max_seq_len_kv", max_seq_len_kv)):
        integral = type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))
        if not (integral and value >= 0):
            _fail(f"{name} must be an integer >= 0, got {_describe(value)}")
    for name, value in (("alpha", alpha), ("qk_scale", qk_scale)):
        if not (type(value) is float or (isinstance(value, numbers.Real) and not isinstance(value, bool))):
            _fail(f"{name} must be a real number, got {_describe(value)}")
    if type(causal) is not bool:  # bool("False") is True
        _fail(f"causal must be True or False, got {_describe(causal)}")
    if causal and q.shape[0] != k.shape[0]:
        _fail(
            f"causal=True needs self-attention (q_offsets == kv_offsets); q has {q.shape[0]} rows, k has {k.shape[0]}"
        )


def check_offsets(q, k, q_offsets, kv_offsets, max_seq_len_q, max_seq_len_kv, causal) -> None:
    """The checks that need the offsets' values: reads them back (a host sync)."""
    for name, t, rows, max_len in (
        ("q_offsets", q_offsets, q.shape[0], max_seq_len_q),
        ("kv_offsets", kv_offsets, k.shape[0], max_seq_len_kv),
    ):
        host = t.detach().cpu().long()
        if int(host[0]) != 0:
            _fail(f"{name}[0] must be 0, got {int(host[0])}")
        lengths = host[1:] - host[:-1]
        if not bool((lengths >= 0).all()):
            _fail(f"{name} must be non-decreasing")
        if int(host[-1]) != rows:
            _fail(f"{name}[-1] = {int(host[-1])} but the tensor has {rows} rows")
        if lengths.numel() and int(lengths.max()) > int(max_len):
            _fail(f"a sequence of length {int(lengths.max())} exceeds the given max length {int(max_len)}")
    if causal and not torch.equal(q_offsets.cpu(), kv_offsets.cpu()):
        _fail("causal=True needs self-attention (q_offsets == kv_offsets)")


def _eager_under_compile():
    """`gdpa` with TorchDynamo off, made on the first traced call: under torch.compile Dynamo traced into the
    launches and the forward's output came back unwritten (the op-entry review, 2026-12-05, on the H200), so a
    compiled model calls the op as eager code does (a graph break). Made lazily, not by decorating `gdpa`:
    `torch.compiler.disable` imports torch._dynamo, 1.4 s more for every process that imports the op."""
    global _EAGER
    if _EAGER is None:
        _EAGER = torch.compiler.disable(gdpa, recursive=True)
    return _EAGER


_EAGER = None


def gdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_offsets: torch.Tensor,
    kv_offsets: torch.Tensor,
    max_seq_len_q: int,
    max_seq_len_kv: int,
    *,
    activation: str = "fast_gelu",
    alpha: float = 1.0,
    qk_scale: float = 1.0,
    causal: bool = False,
    options: GDPAOptions | None = None,
    validate: str = "host",
    record: dict | None = None,
) -> torch.Tensor:
    """Generalized dot-product attention over a jagged batch: O = act(alpha·QKᵀ)·qk_scale·V.

    Args:
        q: `[ΣLq, H, D]`; k, v: `[ΣLk, Hkv, D]` with H % Hkv == 0 (GQA); fp16/bf16 (fp32 for tests).
        q_offsets, kv_offsets: int32 `[B+1]`, offsets[0] == 0, non-decreasing, last == rows.
        max_seq_len_q, max_seq_len_kv: Python ints, upper bounds of the per-sequence lengths (they size
            the launch grid; a sequence longer than its bound is not computed in full).
        activation: one of kernels.activations.ACTIVATION_NAMES.
        alpha: scale applied before the activation; qk_scale: scale applied after it.
        causal: keep key j only for query i >= j (HSTU convention); needs q_offsets == kv_offsets in
            value. validate="host" sees only the row totals: offsets that differ per sequence with equal
            totals pass it and give backend-dependent results; validate="full" refuses them.
        options: GDPAOptions — backend ("auto" by default: per length band, the measured table of
            kernels/gdpa/backends.py), pinned plans, pinned tiles per Triton kernel.
        validate: "host" (default) checks shapes, dtypes, devices and arguments without reading device
            memory; "full" also reads the offsets back and checks their values (a host sync: use it
            while developing, not in a timed loop).
        record: a dict to receive what ran: record["dispatch"][mode] = {"backend", "reason", "stages"[, "measured_ms"]}
            for the forward ("fwd") and, when it runs, the backward ("bwd"); record["fwd"], ["dkdv"],
            ["dq"] for each Triton kernel launched over the whole batch (with the band appended, e.g.
            "fwd [0, 128)", for a launch over one band: tiles, where they came from, grid, and on a GPU
            registers, spills and shared memory); the packed backend adds "packed_fwd <band>" / "packed_bwd <band>"
            (the same fields), the Hopper backend its own keys. Each launch
            overwrites its keys.
    Returns:
        `[ΣLq, H, D]` in q's dtype. Zero-length sequences are legal and produce nothing.
    """
    if torch.compiler.is_compiling():  # a flag read (torch.compiler's own): no cost to eager calls
        return _eager_under_compile()(
            q, k, v, q_offsets, kv_offsets, max_seq_len_q, max_seq_len_kv, activation=activation, alpha=alpha,
            qk_scale=qk_scale, causal=causal, options=options, validate=validate, record=record,
        )  # fmt: skip
    if validate not in VALIDATE:
        raise ValueError(
            f"gdpa: validate={validate!r}; allowed: "
            + "; ".join(f"{name!r} ({what})" for name, what in VALIDATE.items())
        )
    if options is None:
        options = DEFAULT_OPTIONS
    elif not isinstance(options, GDPAOptions):
        raise ValueError(
            f"gdpa: options must be a GDPAOptions, got {type(options).__name__} "
            f"(GDPAOptions.from_dict turns a mapping into one)"
        )
    check_arguments(q, k, v, q_offsets, kv_offsets, max_seq_len_q, max_seq_len_kv, activation, alpha, qk_scale, causal)
    if record is not None and not isinstance(record, dict):
        _fail(f"record must be a dict or None, got {type(record).__name__}")
    if validate == "full":
        check_offsets(q, k, q_offsets, kv_offsets, max_seq_len_q, max_seq_len_kv, causal)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    # the kernels read offsets[b] at offsets + b: a strided view (a column of a [B+1, 2] table) would read
    # other entries, silently (issue 30's review: wrong outputs, reads past the rows)
    # (one copy when both are the same view: the op tells self-attention by the offsets' identity)
    same = same_offsets(q_offsets, kv_offsets)
    q_offsets = q_offsets if q_offsets.stride(0) == 1 else q_offsets.contiguous()
    kv_offsets = q_offsets if same else kv_offsets if kv_offsets.stride(0) == 1 else kv_offsets.contiguous()
    facts = (int(max_seq_len_q), int(max_seq_len_kv), activation, float(alpha), float(qk_scale), bool(causal))
    if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)):
        # no graph to record: the forward alone, without autograd.Function's ~25 µs of host time per call
        return run_pass("fwd", GDPACall(q, k, v, q_offsets, kv_offsets, *facts), options, record)
    return _GDPAFunction.apply(q, k, v, q_offsets, kv_offsets, facts, options, record)
