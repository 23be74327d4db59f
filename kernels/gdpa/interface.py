"""Public GDPA entry point: `gdpa(...)`, validated arguments, autograd wrapped once.

    out = gdpa(q, k, v, q_offsets, kv_offsets, max_seq_len_q, max_seq_len_kv,
               activation="fast_gelu", alpha=1.0, qk_scale=1.0, causal=False)

q `[ΣLq, H, D]`, k/v `[ΣLk, Hkv, D]` (H % Hkv == 0), int32 offsets `[B+1]`, out like q. Differentiable
in q, k and v. Tile configs are autotuned on first use per power-of-two bucket of the max lengths and
total rows; the environment variables GDPA_FWD_CONFIG / GDPA_DKDV_CONFIG / GDPA_DQ_CONFIG
("BLOCK_M,BLOCK_N,num_warps,num_stages" and optionally ",maxnreg", a per-thread register cap, 0 = none)
pin a config instead (used to reproduce a tuning decision, or to slow the kernel on purpose when
testing the regression gate).
"""
from __future__ import annotations

import contextlib
import os

import torch
import triton

from kernels.activations import ACTIVATION_NAMES
from kernels.gdpa import bwd as _bwd
from kernels.gdpa import fwd as _fwd
from kernels.gdpa.schedule import TileSchedule

SUPPORTED_HEAD_DIMS = (16, 32, 64, 128)
# outputs are allocated through this name so tests can poison them (an unwritten element then shows)
_empty_like = torch.empty_like
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _bucket(n: int) -> int:
    return triton.next_power_of_2(max(int(n), 16))


def _buckets(q, k, max_q, max_kv) -> tuple[int, int, int, int]:
    """The autotuning key's shape part: max lengths and total rows, each rounded up to a power of two.
    Total rows tell a half-filled batch from a full one of the same max length: their best tiles differ
    (set1 L=512 fill 0.5 vs 1.0: tied vs 6% apart), and keyed on max length alone the first batch seen
    chose for both — so a case's config depended on which case ran before it in the process."""
    return _bucket(max_q), _bucket(max_kv), _bucket(q.shape[0]), _bucket(k.shape[0])


def _pinned(env: str):
    raw = os.environ.get(env)
    if not raw:
        return None
    try:
        cfg = tuple(int(x) for x in raw.split(","))
    except ValueError:
        cfg = ()
    if len(cfg) not in (4, 5):
        raise ValueError(f"{env}={raw!r}: expected BLOCK_M,BLOCK_N,num_warps,num_stages[,maxnreg] (integers)")
    return cfg


PINNED_KERNELS: dict = {}
# the config each kernel last launched with, by its pinning variable (the harness records it per case:
# autotuning runs in every process, and near-tied configs can win differently in two runs)
LAUNCHED: dict[str, str] = {}


def _launch(tuned, plain, interpret_cfg, env, grid_of, args, consts, on_config=None):
    """Run `plain` with a fixed config (interpreter or pinned) or `tuned` (autotuned on first use);
    returns what triton's launch returns (the compiled kernel, for register / spill counts).
    `on_config(BLOCK_M)` prepares arguments that depend on the fixed config (the autotuned path does
    that in the configs' pre-hooks)."""
    cfg = interpret_cfg if args[0].device.type == "cpu" else _pinned(env)
    schedule = " schedule=compact" if consts.get("COMPACT") else ""
    if cfg is None:
        kernel = tuned[lambda meta: grid_of(meta["BLOCK_M"], meta["BLOCK_N"])](*args, **consts)
        LAUNCHED[env] = f"autotuned: {tuned.best_config}{schedule}"
        return kernel
    LAUNCHED[env] = f"{'interpreter' if args[0].device.type == 'cpu' else 'pinned'}: {cfg}{schedule}"
    m, n, w, s = cfg[:4]
    if on_config is not None:
        on_config(m)
    extra = {"maxnreg": cfg[4]} if len(cfg) == 5 and cfg[4] > 0 else {}
    kernel = plain[grid_of(m, n)](*args, **consts, BLOCK_M=m, BLOCK_N=n, num_warps=w, num_stages=s, **extra)
    PINNED_KERNELS[env] = kernel  # tune.py reports its registers, spills and shared memory
    return kernel


def _precision(dtype: torch.dtype) -> str:
    # fp32 inputs: exact fp32 products (tf32 would fail an fp32 correctness check); 16-bit: tensor cores
    return "ieee" if dtype == torch.float32 else "tf32"


TANH_MODES = {"exact": 0, "f32": 1, "f16x2": 2}
DEFAULT_BWD_IMPL = "split"


def _tanh_mode(device: torch.device) -> int:
    if device.type != "cuda":
        return 0  # interpreter: no inline PTX
    name = os.environ.get("GDPA_TANH", "f32")
    if name not in TANH_MODES:
        raise ValueError(f"GDPA_TANH={name!r}; allowed: {', '.join(TANH_MODES)}")
    return TANH_MODES[name]


def _common_consts(q, activation, causal):
    return dict(D=q.shape[2], ACT=activation, HW_TANH=_tanh_mode(q.device),
                CAUSAL=bool(causal), PRECISION=_precision(q.dtype))


_allocator_set = False


def _fwd_impl():
    """(tuned, plain) forward kernels; GDPA_FWD_IMPL=ptr|tma picks pointer loads or TMA descriptors."""
    global _allocator_set
    impl = os.environ.get("GDPA_FWD_IMPL", "ptr")
    if impl == "ptr":
        return _fwd.gdpa_fwd_kernel_tuned, _fwd.gdpa_fwd_kernel
    if impl != "tma":
        raise ValueError(f"GDPA_FWD_IMPL={impl!r}; allowed: ptr, tma")
    if not _allocator_set:
        # device-side TMA descriptors live in a global scratch buffer that triton asks us for
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                      device=torch.cuda.current_device()
                                                                      if torch.cuda.is_available() else "cpu"))
        _allocator_set = True
    return _fwd.gdpa_fwd_tma_kernel_tuned, _fwd.gdpa_fwd_tma_kernel


def _on_device_of(t: torch.Tensor):
    # Triton launches on the *current* CUDA device: make that the inputs' device (cuda:1 tensors from a
    # process whose current device is 0 would otherwise be rejected or run on the wrong GPU)
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def gdpa_forward(q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale, causal):
    with _on_device_of(q):
        return _gdpa_forward(q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale,
                             causal)


def _gdpa_forward(q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale, causal):
    out = _empty_like(q)
    B, H, Hkv = q_offsets.numel() - 1, q.shape[1], k.shape[1]
    if B == 0 or q.shape[0] == 0:
        return out
    pinned = _pinned("GDPA_FWD_CONFIG") if q.is_cuda else None
    if causal and pinned and pinned[0] % pinned[1]:
        # the causal forward runs whole key tiles unmasked up to its first query row
        raise ValueError(f"GDPA_FWD_CONFIG={','.join(map(str, pinned))}: a causal forward needs BLOCK_M "
                         f"to be a multiple of BLOCK_N")
    sched = TileSchedule(q_offsets, q.shape[0], max_q, H)
    args = (q, k, v, out, q_offsets, kv_offsets, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
            v.stride(0), v.stride(1), out.stride(0), out.stride(1), float(alpha), float(qk_scale),
            *_buckets(q, k, max_q, max_kv), *sched.args())
    consts = dict(H=H, GROUPS=H // Hkv, COMPACT=sched.compact, **_common_consts(q, activation, causal))
    if os.environ.get("GDPA_FWD_WS") == "1":
        consts["WARP_SPEC"] = True  # experiment: triton's Hopper warp specialization of the key loop
    if os.environ.get("GDPA_FWD_PIPE") == "1":
        if os.environ.get("GDPA_FWD_IMPL", "ptr") != "ptr":
            raise ValueError("GDPA_FWD_PIPE=1 is a variant of the pointer-load kernel (GDPA_FWD_IMPL=ptr)")
        consts["PIPELINE_S"] = True  # experiment: QKᵀ of the next key tile issued before this activation
    _launch(*_fwd_impl(), _fwd.INTERPRET_CONFIG, "GDPA_FWD_CONFIG", lambda bm, bn: sched.grid(bm), args, consts)
    variant = [f"impl={os.environ['GDPA_FWD_IMPL']}"] if os.environ.get("GDPA_FWD_IMPL", "ptr") != "ptr" else []
    variant += [name for name in ("WARP_SPEC", "PIPELINE_S") if consts.get(name)]
    if variant:  # an experiment variant ran, not the shipped kernel: say so in the per-case record
        LAUNCHED["GDPA_FWD_CONFIG"] += " " + " ".join(variant)
    return out


def _bwd_args(q, k, v, do, q_offsets, kv_offsets, max_q, max_kv, activation, causal):
    B, H, Hkv = q_offsets.numel() - 1, q.shape[1], k.shape[1]
    strides_in = (q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                  do.stride(0), do.stride(1))
    consts = dict(GROUPS=H // Hkv, **_common_consts(q, activation, causal))
    return B, H, Hkv, strides_in, _buckets(q, k, max_q, max_kv), consts


BWD_IMPLS = {"split": 0, "atomic": 1, "atomic_tma": 2}


def _bwd_impl(device: torch.device) -> int:
    """How dQ is formed (see bwd.py): GDPA_BWD_IMPL=split|atomic|atomic_tma."""
    name = os.environ.get("GDPA_BWD_IMPL", DEFAULT_BWD_IMPL)
    if name not in BWD_IMPLS:
        raise ValueError(f"GDPA_BWD_IMPL={name!r}; allowed: {', '.join(BWD_IMPLS)}")
    if device.type != "cuda" and name == "atomic_tma":
        return BWD_IMPLS["atomic"]  # no TMA in the interpreter; same math through pointer atomics
    return BWD_IMPLS[name]


def bwd_dkdv(do, q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale, causal,
             dk=None, dv=None, dq_acc=None):
    """dK and dV (the key-side half of the backward); with `dq_acc` (fp32, zeroed, like q) the same
    launch also adds the unscaled dS·K into it (the atomic backward)."""
    dk = _empty_like(k) if dk is None else dk
    dv = _empty_like(v) if dv is None else dv
    B, H, Hkv, strides_in, buckets, consts = _bwd_args(q, k, v, do, q_offsets, kv_offsets, max_q,
                                                       max_kv, activation, causal)
    if B > 0 and k.shape[0] > 0:
        mode = 0 if dq_acc is None or q.shape[0] == 0 else _bwd_impl(q.device)
        acc, acc_strides = None, (0, 0)
        if mode == 1:
            acc, acc_strides = dq_acc, (dq_acc.stride(0), dq_acc.stride(1))
        elif mode == 2:
            from triton.tools.tensor_descriptor import TensorDescriptor
            rows = dq_acc.shape[0]
            acc = TensorDescriptor(dq_acc, [rows, H * q.shape[2]], [dq_acc.stride(0), 1], [16, q.shape[2]])
        sched = TileSchedule(kv_offsets, k.shape[0], max_kv, Hkv)
        args = (q, k, v, do, dk, dv, acc, q_offsets, kv_offsets, *strides_in, dk.stride(0), dk.stride(1),
                dv.stride(0), dv.stride(1), *acc_strides, float(alpha), float(qk_scale), *buckets,
                *sched.args())
        _launch(_bwd.gdpa_bwd_dkdv_kernel_tuned, _bwd.gdpa_bwd_dkdv_kernel, _bwd.INTERPRET_CONFIG,
                "GDPA_DKDV_CONFIG", lambda bm, bn: sched.grid(bn), args,
                dict(HKV=Hkv, ATOMIC_DQ=mode, COMPACT=sched.compact, **consts),
                on_config=lambda m: _bwd.set_dq_block({"DQ_ACC": acc, "BLOCK_M": m, "D": q.shape[2]}))
    return dk, dv


def bwd_dq(do, q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale, causal,
           dq=None):
    """dQ (the query-side half of the split backward)."""
    dq = _empty_like(q) if dq is None else dq
    B, H, Hkv, strides_in, buckets, consts = _bwd_args(q, k, v, do, q_offsets, kv_offsets, max_q,
                                                       max_kv, activation, causal)
    if B > 0 and q.shape[0] > 0:
        sched = TileSchedule(q_offsets, q.shape[0], max_q, H)
        args = (q, k, v, do, dq, q_offsets, kv_offsets, *strides_in, dq.stride(0), dq.stride(1),
                float(alpha), float(qk_scale), *buckets, *sched.args())
        _launch(_bwd.gdpa_bwd_dq_kernel_tuned, _bwd.gdpa_bwd_dq_kernel, _bwd.INTERPRET_CONFIG,
                "GDPA_DQ_CONFIG", lambda bm, bn: sched.grid(bm), args, dict(H=H, COMPACT=sched.compact, **consts))
    return dq


def gdpa_backward(do, q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale, causal):
    with _on_device_of(q):
        return _gdpa_backward(do, q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale,
                              causal)


def _gdpa_backward(do, q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale, causal):
    do = do.contiguous()
    args = (do, q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale, causal)
    if _bwd_impl(q.device) == 0:
        dk, dv = bwd_dkdv(*args)
        return bwd_dq(*args), dk, dv
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk, dv = bwd_dkdv(*args, dq_acc=dq_acc)
    return dq_acc.mul_(float(qk_scale) * float(alpha)).to(q.dtype), dk, dv


class _GDPAFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale, causal):
        out = gdpa_forward(q, k, v, q_offsets, kv_offsets, max_q, max_kv, activation, alpha, qk_scale,
                           causal)
        ctx.save_for_backward(q, k, v, q_offsets, kv_offsets)
        ctx.args = (max_q, max_kv, activation, alpha, qk_scale, causal)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, q_offsets, kv_offsets = ctx.saved_tensors
        dq, dk, dv = gdpa_backward(do, q, k, v, q_offsets, kv_offsets, *ctx.args)
        return dq, dk, dv, None, None, None, None, None, None, None, None


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(f"gdpa: {msg}")


def validate(q, k, v, q_offsets, kv_offsets, max_seq_len_q, max_seq_len_kv, activation, causal,
             check_offsets: bool = True) -> None:
    """Raise ValueError naming the first bad argument. `check_offsets` reads offsets (a device sync)."""
    tensors = {"q": q, "k": k, "v": v, "q_offsets": q_offsets, "kv_offsets": kv_offsets}
    for name, t in tensors.items():
        _check(isinstance(t, torch.Tensor), f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name in ("k", "v", "q_offsets", "kv_offsets"):
        _check(tensors[name].device == q.device,
               f"{name} is on {tensors[name].device} but q is on {q.device}; all inputs must share a device")
    _check(q.dim() == 3 and k.dim() == 3 and v.dim() == 3,
           f"q, k, v must be 3-D [rows, heads, head_dim]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    _check(q.dtype in SUPPORTED_DTYPES, f"dtype {q.dtype} not supported; allowed: float16, bfloat16, float32")
    _check(k.dtype == q.dtype and v.dtype == q.dtype,
           f"q, k, v must share a dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    _check(k.shape == v.shape, f"k and v must have the same shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    H, D = q.shape[1], q.shape[2]
    Hkv = k.shape[1]
    _check(k.shape[2] == D, f"head_dim of k ({k.shape[2]}) differs from q ({D})")
    _check(D in SUPPORTED_HEAD_DIMS, f"head_dim {D} not supported; allowed: {SUPPORTED_HEAD_DIMS}")
    _check(Hkv > 0 and H % Hkv == 0, f"H ({H}) must be a multiple of Hkv ({Hkv})")
    _check(activation in ACTIVATION_NAMES,
           f"unknown activation {activation!r}; allowed: {', '.join(ACTIVATION_NAMES)}")
    for name in ("q_offsets", "kv_offsets"):
        t = tensors[name]
        _check(t.dtype == torch.int32, f"{name} must be int32, got {t.dtype}")
        _check(t.dim() == 1 and t.numel() >= 1, f"{name} must be 1-D [B+1]")
    _check(q_offsets.numel() == kv_offsets.numel(),
           f"q_offsets has {q_offsets.numel()} entries but kv_offsets has {kv_offsets.numel()}; both are [B+1]")
    _check(int(max_seq_len_q) >= 0 and int(max_seq_len_kv) >= 0, "max_seq_len_q/kv must be >= 0")
    if not check_offsets:
        return
    for name, t, rows, max_len in (("q_offsets", q_offsets, q.shape[0], max_seq_len_q),
                                   ("kv_offsets", kv_offsets, k.shape[0], max_seq_len_kv)):
        host = t.detach().cpu().long()
        _check(int(host[0]) == 0, f"{name}[0] must be 0, got {int(host[0])}")
        lengths = host[1:] - host[:-1]
        _check(bool((lengths >= 0).all()), f"{name} must be non-decreasing")
        _check(int(host[-1]) == rows, f"{name}[-1] = {int(host[-1])} but the tensor has {rows} rows")
        if lengths.numel():
            _check(int(lengths.max()) <= int(max_len),
                   f"a sequence of length {int(lengths.max())} exceeds the given max length {int(max_len)}")
    if causal:
        _check(bool(torch.equal(q_offsets.cpu(), kv_offsets.cpu())),
               "causal=True needs self-attention (q_offsets == kv_offsets)")


def gdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offsets: torch.Tensor,
         kv_offsets: torch.Tensor, max_seq_len_q: int, max_seq_len_kv: int, *,
         activation: str = "fast_gelu", alpha: float = 1.0, qk_scale: float = 1.0,
         causal: bool = False, validate_offsets: bool = True) -> torch.Tensor:
    """Generalized dot-product attention over a jagged batch: O = act(alpha·QKᵀ)·qk_scale·V.

    Args:
        q: `[ΣLq, H, D]`; k, v: `[ΣLk, Hkv, D]` with H % Hkv == 0 (GQA); fp16/bf16 (fp32 for tests).
        q_offsets, kv_offsets: int32 `[B+1]`, offsets[0] == 0, non-decreasing, last == rows.
        max_seq_len_q, max_seq_len_kv: upper bounds of the per-sequence lengths (launch grid size).
        activation: one of kernels.activations.ACTIVATION_NAMES.
        alpha: scale applied before the activation; qk_scale: scale applied after it.
        causal: keep key j only for query i >= j (HSTU convention); needs q_offsets == kv_offsets.
        validate_offsets: read the offsets back to check them (a host sync); turn off in hot loops.
    Returns:
        `[ΣLq, H, D]` in q's dtype. Zero-length sequences are legal and produce nothing.
    """
    validate(q, k, v, q_offsets, kv_offsets, max_seq_len_q, max_seq_len_kv, activation, causal,
             check_offsets=validate_offsets)
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    return _GDPAFunction.apply(q, k, v, q_offsets, kv_offsets, int(max_seq_len_q), int(max_seq_len_kv),
                               activation, float(alpha), float(qk_scale), bool(causal))
