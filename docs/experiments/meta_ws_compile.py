"""Meta's warp-specialized GDPA kernels (`meta_gdpa_ws`: `_gdpa_fwd` / `_gdpa_bwd` with enable_tma + enable_ws,
bwd_opt_tech tma_ws, Meta's WS autotune configs) cross-compiled for sm_90a WITHOUT a GPU: the kernel's own JIT
binder builds the signature, constexprs and specialization as JITFunction.run would, then
`triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))`. Issue 33: can Meta's Triton fork build them?

    # fbtriton is cp312 only on PyPI: a Python 3.12 venv with torch (imported, never run on a GPU), the fork
    # unpacked into its own site folder (it installs as `triton`)
    python3.12 -m venv /tmp/v312 && /tmp/v312/bin/pip install torch && /tmp/v312/bin/pip uninstall -y triton
    /tmp/v312/bin/pip download --no-deps --only-binary=:all: fbtriton==3.6.1 -d /tmp/whl
    /tmp/v312/bin/python -m zipfile -e /tmp/whl/fbtriton-*.whl /tmp/fbtriton-site
    PYTHONPATH=/tmp/fbtriton-site /tmp/v312/bin/python docs/experiments/meta_ws_compile.py --out /tmp/meta_ws
    python docs/experiments/meta_ws_compile.py --out /tmp/meta_ws_stock      # stock Triton, for comparison

What it found (2026-12-04, Meta's checkout at 2c128ab; bf16, H 4, D 128, a jagged batch, fast_gelu):
- fbtriton 3.6.1 (`3.6.0+fb.beta`) and 3.7.4: neither kernel compiles with the configs the label runs
  (NUM_CONSUMER_GROUPS 2, num_stages 0). The front end fails on Meta's own shapes: forward `acc = tl.dot(p, v,
  acc)` "accumulator shape is incompatible" (q read through a TMA descriptor of BLOCK_M // NUM_CONSUMER_GROUPS
  = 64 rows, the accumulator 128); backward `dv += tl.dot(ppT, do)` "incompatible dimensions at index 0: 128
  and 64". Stock Triton 3.6.0 fails with the same two errors. fbtriton's `triton.Config` accepts
  `num_consumer_groups` / `num_buffers_warp_spec` and drops them; the kernels hold no `tl.async_task`.
- Diagnosis only (not what the label runs): NUM_CONSUMER_GROUPS forced to 1 with num_stages 1-3, fbtriton
  builds the forward (255 registers, no spills, not warp-specialized); the backward then fails at its dQ
  descriptor store (BLOCK_M1 // NCG rows against BLOCK_M2); with num_stages 0 fbtriton's
  NVGPUWarpSpecialization pass fails on any loop. enable_tma False builds both, without warp specialization.
- 2026-12-05, `--which bwd --bwd-list default` (Meta's plain TMA backward, the label meta_gdpa_tma, enable_ws off),
  fbtriton 3.6.1 (`chmod +x` the unpacked wheel's backends/nvidia/bin first: the zip drops the mode): of the 5
  block pairs Meta's default list keeps, (32, 32, 32) and (64, 64, 64) (BLOCK_M1, BLOCK_N1, BLOCK_M2) build to
  sm_90a cubins; (32, 64, 64), (32, 128, 128), (64, 128, 128) fail in the front end at `desc_dq.store(...,
  store_reduce="add")`: `assert value.shape == desc.block_shape` (the dQ block has BLOCK_M2 rows, the descriptor
  BLOCK_M1 // NUM_CONSUMER_GROUPS) -- the H200's failure of every meta_gdpa_tma backward
  (docs/experiments/h200-2026-12-05b); kernels/meta_gdpa.py's `fit_tma_backward` keeps the two that build.
Options: --which fwd|bwd|both, --bwd-list ws|default, --block-n 64|128 (32 is excluded by Meta: "ws hang"),
--act NAME, --dense, --meta-ws (TRITON_USE_META_WS=1), and for diagnosis --ncg N, --stages N, --no-tma. Per kernel
in --out: <tag>.signature.txt, then <tag>.error.txt (the traceback) or the compiled stages and cubin.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import traceback

ap = argparse.ArgumentParser()
ap.add_argument("--which", default="both", choices=["fwd", "bwd", "both"])
ap.add_argument("--block-n", type=int, default=128)
ap.add_argument("--act", default="fast_gelu")
ap.add_argument("--dense", action="store_true")
ap.add_argument("--ncg", type=int, default=None, help="override the config's NUM_CONSUMER_GROUPS (diagnosis only)")
ap.add_argument("--stages", type=int, default=None, help="override the config's num_stages (diagnosis only)")
ap.add_argument("--no-tma", action="store_true", help="enable_tma False (the label sets it True)")
ap.add_argument("--meta-ws", action="store_true", help="TRITON_USE_META_WS=1 (fbtriton knob)")
ap.add_argument(
    "--bwd-list",
    choices=["ws", "default"],
    default="ws",
    help="the backward's configs: Meta's WS list (the label meta_gdpa_ws), or its default list with enable_ws off "
    "(meta_gdpa_tma: one config per block pair, each compiled)",
)
ap.add_argument("--out", default="/tmp/meta_ws")
ap.add_argument(
    "--checkout", default=os.path.join(os.path.dirname(__file__), "..", "..", ".peers", "ads_model_kernel_library")
)
a = ap.parse_args()
if a.meta_ws:
    os.environ["TRITON_USE_META_WS"] = "1"
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="tcache"))
os.makedirs(a.out, exist_ok=True)

import torch  # noqa: E402

# Meta's module asks the GPU's capability at import (CPU torch raises AssertionError, not RuntimeError)
torch.cuda.get_device_capability = lambda *x, **k: (9, 0)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.compiler.compiler import make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

print(
    f"triton {triton.__version__} from {os.path.dirname(triton.__file__)}; python {sys.version.split()[0]}; "
    f"tl.async_task: {hasattr(tl, 'async_task')}; TRITON_USE_META_WS={os.environ.get('TRITON_USE_META_WS')}"
)


# mount the checkout as ads_mkl.ops.oss (what kernels/peer_checkout.py does)
def _ns(name, paths):
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    m = importlib.util.module_from_spec(spec)
    m.__path__ = paths
    sys.modules[name] = m
    return m


_ns("ads_mkl", [])
_ns("ads_mkl.ops", [])
_ns("ads_mkl.ops.oss", [a.checkout])

# Meta's backward annotates its params `Q: object`; the provider adds `object` to Triton's builtin namespace
# (kernels/meta_gdpa.py accept_object_annotations) -- do the same
from triton.compiler.code_generator import CodeGenerator  # noqa: E402

CodeGenerator.builtin_namespace.setdefault("object", object)

M = importlib.import_module("ads_mkl.ops.oss.gdpa.triton.triton_generalized_dot_product_attention")
from ads_mkl.ops.oss.gdpa.triton.math import activation_string_to_int  # noqa: E402
from ads_mkl.ops.oss.gdpa.triton.vararg_kernel import unroll_varargs  # noqa: E402

target = GPUTarget("cuda", 90, 32)
backend = make_backend(target)

# a realistic jagged batch (Meta benchmark set1: H=4, D=128, bf16), smaller B (same strides/specialization)
H, D, B, L = 4, 128, 64, 1024
if a.dense:
    lens = [L] * B
else:
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(L // 4, L + 1, (B,), generator=g).tolist()
    lens[0] = L
offs = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)  # int32, as workloads/batch.py
T = int(offs[-1])
q = torch.empty(T, H, D, dtype=torch.bfloat16)
k = torch.empty_like(q)
v = torch.empty_like(q)
o = torch.empty_like(q)
act = activation_string_to_int(a.act)
print(f"batch: B={B} T={T} H={H} D={D} bf16, max_len={L}, dense={a.dense}; activation {a.act} -> enum {act}")


def cfg_str(c):
    extra = {n: getattr(c, n) for n in ("num_consumer_groups", "num_buffers_warp_spec") if hasattr(c, n)}
    return f"{c.all_kwargs()} (WS attrs kept on Config: {extra or 'none -- dropped'})"


def compile_kernel(tag, jitfn, args, kwargs, config):
    if a.ncg is not None or a.stages is not None:
        ncg = config.kwargs["NUM_CONSUMER_GROUPS"] if a.ncg is None else a.ncg
        st = config.num_stages if a.stages is None else a.stages
        config = type(config)({**config.kwargs, "NUM_CONSUMER_GROUPS": ncg}, num_warps=config.num_warps, num_stages=st)
        tag += f"_ncg{ncg}_s{st}"
    if a.meta_ws:
        tag += "_metaws"
    kwargs = {**kwargs, **config.all_kwargs()}  # what Autotuner.run passes to JITFunction.run
    kwargs["debug"] = False
    kwargs["sanitize_overflow"] = False
    kwargs["instrumentation_mode"] = triton.knobs.compilation.instrumentation_mode
    binder = create_function_from_signature(jitfn.signature, jitfn.params, backend)
    bound, spec, opts = binder(*args, **kwargs)
    options, signature, constexprs, attrs = jitfn._pack_args(backend, kwargs, bound, spec, opts)
    with open(f"{a.out}/{tag}.signature.txt", "w") as f:
        f.write(
            f"config: {cfg_str(config)}\nsignature: {signature}\nconstexprs: {constexprs}\nattrs: {attrs}\n"
            f"options: {options}\n"
        )
    print(f"[{tag}] config {cfg_str(config)}")
    print(f"[{tag}] non-constexpr params: " + ", ".join(f"{k}:{v}" for k, v in signature.items() if v != "constexpr"))
    print(f"[{tag}] constexprs: " + ", ".join(f"{jitfn.arg_names[p[0]]}={v}" for p, v in constexprs.items()))
    src = ASTSource(jitfn, signature, constexprs, attrs)
    try:
        ck = triton.compile(src, target=target, options=options.__dict__)
    except Exception as exc:
        with open(f"{a.out}/{tag}.error.txt", "w") as f:
            traceback.print_exc(file=f)
        print(f"[{tag}] COMPILE FAILED: {type(exc).__name__}: {exc}"[:4000])
        return None
    for ext, body in ck.asm.items():
        mode = "wb" if isinstance(body, bytes) else "w"
        with open(f"{a.out}/{tag}.{ext}", mode) as f:
            f.write(body)
    md = ck.metadata
    ttgir, ptx = ck.asm.get("ttgir", ""), ck.asm.get("ptx", "")
    tgt = re.search(r"\.target (\S+)", ptx).group(1) if ptx else "?"
    print(
        f"[{tag}] OK: cubin {len(ck.asm['cubin'])} bytes; shared {md.shared} B; num_warps {md.num_warps}; "
        f"num_stages {md.num_stages}; target {tgt}"
    )
    marks = {
        "ttg.warp_specialize": ttgir.count("ttg.warp_specialize"),
        "async_task_id": ttgir.count("async_task_id"),
        "nvws.": ttgir.count("nvws."),
        "ttng.warp_group_dot": ttgir.count("ttng.warp_group_dot"),
        "ttng.async_tma_copy": ttgir.count("ttng.async_tma_copy"),
        "ptx setmaxnreg": ptx.count("setmaxnreg"),
        "ptx wgmma.mma_async": ptx.count("wgmma.mma_async"),
        "ptx cp.async.bulk.tensor": ptx.count("cp.async.bulk.tensor"),
        "ptx mbarrier": ptx.count("mbarrier."),
    }
    print(f"[{tag}] WS/Hopper markers: {marks}")
    tools = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
    cuobj = os.path.join(tools, "cuobjdump")
    if os.path.exists(cuobj):
        r = subprocess.run([cuobj, "--dump-resource-usage", f"{a.out}/{tag}.cubin"], capture_output=True, text=True)
        res = " ".join(x.strip() for x in r.stdout.splitlines() if "REG" in x or "Function" in x)
        print(f"[{tag}] cuobjdump: {res or r.stderr.strip()}")
    return ck


fwd_ok = bwd_ok = None
if a.which in ("fwd", "both"):
    kern = unroll_varargs(M._gdpa_fwd, N=0, unroll_as_const=True)
    cfgs = M.fwd_autotune_configs_ws["default"]
    print("fwd WS configs:", [cfg_str(c) for c in cfgs])
    cfg = next(c for c in cfgs if c.kwargs["BLOCK_N"] == a.block_n)
    args = [
        q,
        offs,
        k,
        offs,
        v,
        o,
        offs,
        None,
        None,  # ..., Out_offsets=q_offsets, ad_to_request_offset, seq_index
        q.stride(0),
        q.stride(1),
        q.stride(2),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        v.stride(0),
        v.stride(1),
        v.stride(2),
        o.stride(0),
        o.stride(1),
        o.stride(2),
        B,
        H,
        1,
    ]
    kw = dict(
        N_CTX=L,
        N_CTX_KV=L,
        qk_scale=1.0 / D**0.5,
        is_predict=False,
        Q_SHAPE_0=T,
        **{
            n: None
            for n in (
                "ts_encoding_params",
                "ts_event_request_even_params",
                "ts_event_request_log_params",
                "ts_adjacent_event_log_params",
                "ts_encoding_bucket_values",
                "ts_event_request_even_bucket_values",
                "ts_event_request_log_bucket_values",
                "ts_adjacent_event_log_bucket_values",
                "pos_emb_params",
                "pos_emb_bucket_values",
            )
        },
        FUSED_QKV=False,
        FUSED_KV=False,
        SORT_BY_SEQ_LENGTH=False,
        HEAD_DIM=D,
        BLOCK_D=D,
        STAGE=1,
        USE_START_END_OFFSETS=False,
        WINDOW_SIZE=None,
        BROADCAST_Q=False,
        enable_tma=not a.no_tma,
        enable_ws=True,
        IS_DENSE_KV=a.dense,
        activation_enum_int=act,
        USE_I64_IDX=False,
    )
    fwd_ok = compile_kernel(f"fwd_bn{a.block_n}{'_notma' if a.no_tma else ''}", kern, args, kw, cfg) is not None

if a.which in ("bwd", "both"):
    kern = unroll_varargs(M._gdpa_bwd, N=0, unroll_as_const=True)
    listed = M.bwd_autotune_configs_ws if a.bwd_list == "ws" else M.bwd_autotune_configs
    cfgs = [c for c in listed["default"] if M.bwd_keep(c)]
    print(f"bwd {a.bwd_list} configs:", [cfg_str(c) for c in cfgs])
    if a.bwd_list == "default":  # one per (BLOCK_M1, BLOCK_N1, BLOCK_M2): the front end's checks see only those
        pairs = {}
        for c in cfgs:
            pairs.setdefault(tuple(c.kwargs[n] for n in ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2")), c)
        cfgs = list(pairs.values())
    cfg = cfgs[0]
    do, dq, dk, dv = (torch.empty_like(q) for _ in range(4))
    args = [
        q,
        offs,
        k,
        offs,
        v,
        None,
        do,
        offs,
        dq,
        dk,
        dv,
        q.stride(0),
        k.stride(0),
        q.stride(1),
        k.stride(1),
        q.stride(2),
        do.stride(0),
        do.stride(1),
        B,
        H,
        1,
        L,
        L,
        1.0 / D**0.5,
    ]
    kw = dict(
        **{
            n: None
            for n in (
                "dts_encoding",
                "dts_event_request_even",
                "dts_event_request_log",
                "dts_adjacent_event_log",
                "dpos_emb",
                "ts_encoding_params",
                "ts_event_request_even_params",
                "ts_event_request_log_params",
                "ts_adjacent_event_log_params",
                "ts_encoding_bucket_values",
                "ts_event_request_even_bucket_values",
                "ts_event_request_log_bucket_values",
                "ts_adjacent_event_log_bucket_values",
                "pos_emb_params",
                "pos_emb_bucket_values",
            )
        },
        FUSED_QKV=False,
        FUSED_KV=False,
        SORT_BY_SEQ_LENGTH=False,
        BLOCK_D=D,
        HEAD_DIM=D,
        USE_START_END_OFFSETS=False,
        WINDOW_SIZE=None,
        BROADCAST_Q=False,
        USE_DQ_ATOMIC_ADD=False,
        enable_tma=not a.no_tma,
        IS_DENSE_KV=a.dense,
        activation_enum_int=act,
        USE_I64_IDX=False,
    )
    if a.bwd_list == "ws":
        bwd_ok = compile_kernel(f"bwd{'_notma' if a.no_tma else ''}", kern, args, kw, cfg) is not None
    else:
        built = {}
        for c in cfgs:
            m1, n1, m2 = (c.kwargs[n] for n in ("BLOCK_M1", "BLOCK_N1", "BLOCK_M2"))
            tag = f"bwd_m1{m1}_n1{n1}_m2{m2}{'_notma' if a.no_tma else ''}"
            built[(m1, n1, m2)] = compile_kernel(tag, kern, args, kw, c) is not None
        for (m1, n1, m2), ok in built.items():
            print(f"bwd BLOCK_M1 {m1} BLOCK_N1 {n1} BLOCK_M2 {m2}: {'builds' if ok else 'FAILS'}")
        bwd_ok = all(built.values())

print(f"RESULT triton {triton.__version__}: fwd {fwd_ok} bwd {bwd_ok} (artifacts in {a.out})")
