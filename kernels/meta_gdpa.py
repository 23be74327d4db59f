"""`meta_gdpa`: Meta's Triton GDPA (facebookresearch/ads_model_kernel_library, `gdpa/triton`, Apache-2.0),
imported from the user's checkout (kernels/peer_checkout.py: option `path`, the installed package
`ads_mkl.ops.oss.gdpa`, or `.peers/ads_model_kernel_library`). Forward and backward go through its own
autograd op (`torch.ops.gdpa.generalized_dot_product_attention` with `register_autograd`).

Semantics, from its source (gdpa/triton/triton_generalized_dot_product_attention.py at 2c128ab):
`p = act(q·kᵀ)` then `p *= qk_scale` (:279-306), `acc += p·v`: O = act(QKᵀ)·qk_scale·V — our GDPA with
alpha = 1 (it has no pre-activation scale) and the same qk_scale; no causal mask (`assert not is_causal`,
:3139); query rows beyond max_seq_len_q are not computed (`qlen = min(qlen, N_CTX)`, :603), so we pass
the batch maxima. Activations by Meta's names (gdpa/triton/math.py `Activation`): ours map one to one,
`gelu_tanh` being their `gelu_approx`. On CPU tensors the op dispatches to a softmax fallback
(`cpu_generalized_dot_product_attention`, :3974): the provider runs on CUDA only.

Variants, as provider options with labels in a config (like our tiles): `enable_persistent`,
`enable_tma`, `enable_ws` (forward flags, :3100-3130) and `bwd_opt_tech`, the backward techniques: the
backward uses a technique only when its forward flag is on too (:3452-3455), so an ineffective
combination is a config error here rather than a mislabelled run. `enable_ws` needs Meta's Triton fork
(facebookexperimental/triton, `tl.async_task`; Meta's own benchmark requires it, gdpa/scripts/benchmark.py:69;
on stock Triton its warp-specialization config keywords are dropped, :107-122): without the fork that
label is skipped with the reason. With the fork (`fbtriton`, in the entry's own environment:
bench.sweep.environments) its WS autotune configs pass `num_consumer_groups` / `num_buffers_warp_spec` (:361,
:1849; BLOCK_N 32 is left out, "32 will cause ws hang", :368); before the first case the provider builds
Meta's WS kernels once on a small batch (`ws_build_check`), so a fork that cannot build them for this GPU
skips the label with what failed: the failing source line of Meta's kernel and the compiler's message
(`compile_error_summary`), the compiler's log the traceback in the run's errors.log. The PyPI forks do not
build them for sm_90a at 2c128ab: fbtriton 3.6.1 and 3.7.4 accept the two config keywords and drop them, and
Meta's TMA descriptors, sized BLOCK // NUM_CONSUMER_GROUPS rows, then meet BLOCK-row accumulators in the
front end (`acc = tl.dot(p, v, acc)`: "accumulator shape is incompatible"; the backward's
`dv += tl.dot(ppT, do)`) — docs/experiments/meta_ws_compile.py cross-compiles them without a GPU.
Meta's TMA backward (`meta_gdpa_tma`, fbtriton's `store_reduce`) builds only with the configs of its list whose
dQ block fits its dQ descriptor, and adds dQ into a `torch.empty` tensor: the provider has its autotuner time
only those and zeroes dQ first (`fit_tma_backward`; every other config failed the fork's front end on the H200,
and with it every backward case).
"""

from __future__ import annotations

import re

import torch

from kernels import peer_checkout as pc
from kernels.registry import TRITON_AUTOTUNE_BYTES, CaseSpec, register
from support.text import one_line
from workloads.batch import JaggedBatch

PEER = pc.Peer(
    key="ads_model_kernel_library",
    title="Meta's GDPA (facebookresearch/ads_model_kernel_library)",
    url="https://github.com/facebookresearch/ads_model_kernel_library",
    package="ads_mkl.ops.oss",
    importable="ads_mkl.ops.oss.gdpa",
    package_dir="",
    marker="gdpa/triton/triton_generalized_dot_product_attention.py",
)
MODULE = "ads_mkl.ops.oss.gdpa.triton.triton_generalized_dot_product_attention"
SRC = "gdpa/triton/triton_generalized_dot_product_attention.py"

# our activation name -> Meta's (gdpa/triton/math.py Activation; PyTorch equivalents at math.py:58-74)
ACTIVATIONS = {
    "raw": "raw",
    "relu": "relu",
    "relu_square": "relu_square",
    "leaky_relu": "leaky_relu",
    "gelu": "gelu",
    "gelu_tanh": "gelu_approx",
    "fast_gelu": "fast_gelu",
    "silu": "silu",
    "fast_silu": "fast_silu",
    "hardswish": "hardswish",
}
HEAD_DIMS = (64, 96, 128)  # gdpa/README.md "Head dims"; gdpa/src/interface.py (the CuTe kernel) takes the same
DTYPES = (torch.float16, torch.bfloat16)
# backward technique -> the forward flag it needs (ctx.* at :3452-3455)
BWD_TECHS = {
    "persistent": "enable_persistent",
    "tma": "enable_tma",
    "ws": "enable_ws",
    "dq_atomic_add": "use_dq_atomic_add",
}
OPTIONS = {
    "path": (str, None),
    "enable_persistent": (bool, False),
    "enable_tma": (bool, False),
    "enable_ws": (bool, False),
    "use_dq_atomic_add": (bool, False),
    "bwd_opt_tech": (str, "base"),
}


_TECH = r"dq_atomic_add|[A-Za-z0-9]+"


def bwd_techs(value: str) -> list[str]:
    """The techniques named in a `bwd_opt_tech` string ("base", or e.g. "tma_ws", "persistent+tma");
    ValueError naming what is allowed."""
    if value == "base":
        return []
    names = re.findall(_TECH, value) if re.fullmatch(rf"(?:{_TECH})(?:[_+,](?:{_TECH}))*", value) else [value]
    bad = next((t for t in names if t not in BWD_TECHS), None)
    if bad is not None:
        raise ValueError(
            f"bwd_opt_tech {value!r}: {bad!r} is not a backward technique; allowed: base, or "
            f"{', '.join(BWD_TECHS)} joined by _ or +"
        )
    return names


def jagged_arguments(batch: JaggedBatch) -> dict:
    """The batch as the keyword arguments Meta's GDPA entry points (base and TLX) take; not causal: the
    kernels have no causal mask (skip_reason refuses causal cases first)."""
    return {
        "query": batch.q,
        "key": batch.k,
        "value": batch.v,
        "query_offset": batch.q_offsets,
        "key_offset": batch.kv_offsets,
        "max_seq_len_q": int(batch.max_q),
        "max_seq_len_kv": int(batch.max_kv),
        "is_causal": False,
    }


def shape_reason(batch: JaggedBatch, kernel: str) -> str | None:
    """None when Meta's kernels (its Triton GDPA and its CuTe one: the same limits) take the batch's dtype,
    head dims and head counts; `kernel` names the one asked in the reason."""
    if batch.dtype not in DTYPES:
        return f"{kernel} runs fp16/bf16, not {str(batch.dtype).replace('torch.', '')}"
    if batch.D not in HEAD_DIMS or batch.k.shape[2] != batch.D or batch.v.shape[2] != batch.D:
        return f"head dim {batch.D} not supported (allowed: {', '.join(map(str, HEAD_DIMS))}, same for q, k, v)"
    if batch.H % batch.Hkv:
        return f"H={batch.H} is not a multiple of Hkv={batch.Hkv}"
    return None


def fork_reason() -> str | None:
    """None when Meta's Triton fork is installed (it adds tl.async_task), else why `enable_ws` cannot run."""
    import triton
    import triton.language as tl

    if hasattr(tl, "async_task"):
        return None
    return (
        "enable_ws needs Meta's Triton fork (facebookexperimental/triton: tl.async_task, required by Meta's "
        f"benchmark, gdpa/scripts/benchmark.py:69); triton {triton.__version__} here has none"
    )


WS_PROBE = (2, 128, 2, 128)  # sequences, length, heads, head dim of the batch the WS build is checked on


def ws_build_check(provider, device: torch.device) -> None:
    """Build and run Meta's warp-specialized forward (and backward, with a `ws` technique) once on a small
    batch; a RuntimeError naming the Triton build and the GPU, with the compiler's error chained, when it
    cannot (the runner records it as the skip reason and logs the traceback)."""
    import triton

    from workloads.batch import make_batch

    n, length, heads, dim = WS_PROBE
    b = make_batch([length] * n, [length] * n, H=heads, D=dim, dtype=torch.bfloat16, device=device, seed=0)
    spec = CaseSpec(mode="fwd_bwd", activation="fast_gelu")
    try:
        if "ws" in bwd_techs(provider.options["bwd_opt_tech"]):
            provider.build(b, spec, "fwd_bwd")()
        else:
            provider.build(b, spec, "fwd")()
        torch.cuda.synchronize(device)
    except Exception as exc:
        major, minor = torch.cuda.get_device_capability(device)
        raise RuntimeError(
            # the Triton's folder is in the case's record (`environment`); here it would push the message
            # past the 300 characters a skip reason keeps
            f"enable_ws: Meta's WS kernels do not build with triton {triton.__version__} for sm_{major}{minor} "
            f"(traceback: errors.log): {compile_error_summary(exc)}"
        ) from exc


def compile_error_summary(exc: BaseException) -> str:
    """One line saying what a build failure was. A Triton front-end error is a chain of CompilationErrors, one
    per jitted call on the way down, whose outermost one shows only the call site and a caret (what
    `str(exc)` gives); the chain is read to its end: the failing source line and the innermost message, or
    the root exception's, with its type, first (a skip reason is cut at 300 characters), then the lines of
    the calls above it (`via a -> b`). Anything else: its type, and the first and last lines of its text."""
    chain, seen, e = [], set(), exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__
    levels = [c for c in chain if type(c).__name__ == "CompilationError" and getattr(c, "node", None) is not None]
    if not levels:
        lines = [x.strip() for x in str(exc).strip().splitlines() if x.strip()]
        what = " ... ".join(dict.fromkeys([lines[0], lines[-1]])) if lines else ""
        return f"{type(exc).__name__}: {one_line(what)}"

    def source_line(err) -> str:
        lineno = getattr(err.node, "lineno", None)
        src_lines = (err.src or "").split("\n")
        text = src_lines[lineno - 1].strip() if lineno and lineno <= len(src_lines) else "?"
        return text if len(text) <= 60 else text[:57] + "..."

    inner, root = levels[-1], chain[-1]
    # the root cause chained below the innermost level (fbtriton), or in its message (stock Triton's repr)
    message = f"{type(root).__name__}: {root}" if root is not inner else (inner.error_message or "no message")
    via = " -> ".join(f"`{source_line(c)}`" for c in levels[:-1])
    return one_line(f"CompilationError at `{source_line(inner)}`: {message}" + (f" (via {via})" if via else ""))


def store_reduce_reason() -> str | None:
    """None when this Triton's tensor descriptors take `store_reduce` (Meta's fork), else why Meta's TMA
    backward cannot compile here: it writes dQ with `desc_dq.store(..., store_reduce="add")` (SRC:2593), and
    stock Triton 3.6's `tensor_descriptor.store(offsets, value)` has no such keyword (the H200 failed every
    tma backward so, 2026-12-02)."""
    import inspect

    import triton
    from triton.language import core

    if "store_reduce" in inspect.signature(core.tensor_descriptor.store).parameters:
        return None
    return (
        f"bwd_opt_tech tma stores dQ with store_reduce='add' ({SRC}:2593), a keyword of Meta's Triton fork "
        f"(fbtriton); triton {triton.__version__} here has none"
    )


def restore_accumulators(module) -> None:
    """Meta's backward adds dK/dV atomically when heads share K/V (G > 1, GQA: SRC:2370, :2387) and dQ with
    `use_dq_atomic_add`, but asks its autotuner to restore them between configs only for start/end offsets
    (`restore_value`, :3648-3670): the first backward of a shape returned the sum of every config's run
    (the H200's GQA gate failed so, 2026-12-02). Its autotuner builder is wrapped once for this process so
    DQ, DK and DV are always restored between the configs it times (what Triton's `restore_value` is for),
    and a TMA backward times only the configs it can build, on a zeroed dQ (`fit_tma_backward`); the kernel and
    its configs are Meta's."""
    build = getattr(module, "get_autotune_bwd_kernel", None)  # a checkout without it: nothing to wrap
    if build is None or getattr(build, "_gdpa_bench_restores", False):
        return

    def with_accumulators(kernel, restore_value, enable_ws, is_mtia=False):
        names = tuple(dict.fromkeys((*(restore_value or ()), "DQ", "DK", "DV")))
        return fit_tma_backward(build(kernel, names, enable_ws, is_mtia=is_mtia))

    with_accumulators._gdpa_bench_restores = True
    module.get_autotune_bwd_kernel = with_accumulators


# the launch's flags that decide how Meta's backward writes dQ (constexprs it passes by keyword, :3755-3760)
DQ_FLAGS = ("enable_tma", "USE_DQ_ATOMIC_ADD", "BROADCAST_Q", "USE_START_END_OFFSETS")


def tma_dq_add(launch: dict) -> bool:
    """Whether this launch of Meta's backward adds dQ through its TMA descriptor (`desc_dq.store(...,
    store_reduce="add")`, SRC:2587): a TMA backward without dQ atomics, start/end offsets or a broadcast Q."""
    return bool(launch.get("enable_tma")) and not any(launch.get(f) for f in DQ_FLAGS[1:])


def tma_dq_store_fits(config, launch: dict) -> bool:
    """Whether Meta's backward can build `config` for a launch with these arguments. Its TMA dQ add stores each
    dQ block of BLOCK_M2 rows through a descriptor of BLOCK_M1 // NUM_CONSUMER_GROUPS rows (SRC:2193, :2587), and
    the fork's front end requires the two to be equal (`validate_store_like`: `value.shape ==
    desc.block_shape`). Meta's default list pairs BLOCK_M2 = BLOCK_N1 with BLOCK_M1 in {32, 64} (:1814), so every
    autotuned TMA backward met a config it could not build, and Triton's autotuner ends the call at the first
    compile error: fbtriton 3.6.1 failed every `meta_gdpa_tma` backward on the H200 (2026-12-05,
    docs/experiments/h200-2026-12-05b; docs/experiments/meta_ws_compile.py --bwd-list default builds each pair)."""
    if not tma_dq_add(launch):
        return True
    k = config.kwargs
    return k["BLOCK_M1"] // k.get("NUM_CONSUMER_GROUPS", 1) == k["BLOCK_M2"]


def fit_tma_backward(tuner):
    """`tuner` (Meta's backward autotuner) made to run Meta's TMA backward as it is meant to, its kernel and its
    configs Meta's:
    - it times only the configs of its list that `tma_dq_store_fits` the launch (its `early_config_prune`
      hook, after Meta's own prune if it had one; when none fits, Meta's list stays whole and the call fails
      with its compiler's error, as without the provider), and its cache of tuned configs is keyed by the dQ
      flags too (`DQ_FLAGS`: a TMA launch of a shape never reuses the config a pointer launch picked);
    - a launch that adds dQ through the descriptor gets DQ zeroed first: Meta allocates it with `torch.empty`
      unless dQ is atomic (:3515-3518), so the add would land on whatever the memory held. The zeroing runs in
      the call (a fill of dQ), as Meta's own `torch.zeros` does on its atomic path; the autotuner's timing
      runs then restore DQ to zeros between configs (restore_accumulators)."""
    if not hasattr(tuner, "configs") or getattr(tuner, "_gdpa_bench_fits_tma", False):
        return tuner
    meta_prune = getattr(tuner, "early_config_prune", None)

    def prune(configs, named_args, **kwargs):
        configs = meta_prune(configs, named_args, **kwargs) if meta_prune else configs
        launch = {**named_args, **kwargs}
        return [c for c in configs if tma_dq_store_fits(c, launch)] or configs

    tuner.early_config_prune = prune
    tuner.keys = [*tuner.keys, *(f for f in DQ_FLAGS if f not in tuner.keys)]
    dq_index = tuner.arg_names.index("DQ") if "DQ" in tuner.arg_names else None
    meta_run = tuner.run

    def run(*args, **kwargs):
        if dq_index is not None and tma_dq_add(kwargs):
            (args[dq_index] if len(args) > dq_index else kwargs["DQ"]).zero_()
        return meta_run(*args, **kwargs)

    tuner.run = run
    tuner._gdpa_bench_fits_tma = True
    return tuner


def accept_object_annotations() -> None:
    """Meta's backward kernel declares its arguments `Q: object, ...` (`_gdpa_bwd`, at line 2600 of SRC above).
    Triton 3.6's code generator resolves an annotation as a name, among the kernel's globals and a short
    list of builtins that lacks `object`: every backward failed to compile on the H200 (`NameError('object
    is not defined')`, docs/example-h200-peers/logs/errors.log). `object` joins that list for this process;
    the annotation is then read and dropped, as Triton does with any other."""
    from triton.compiler.code_generator import CodeGenerator

    CodeGenerator.builtin_namespace.setdefault("object", object)


@register
class MetaGDPAProvider(pc.PeerProvider):
    name = "meta_gdpa"
    peer, module, option_fields = PEER, MODULE, OPTIONS
    process_setup_s = 30.0  # Triton autotuning over its config list, per max length, cached in-process
    autotune_bytes = TRITON_AUTOTUNE_BYTES
    description = (
        "Meta's Triton GDPA (ads_model_kernel_library gdpa/triton generalized_dot_product_attention) from "
        "your checkout; O = act(QKᵀ)·qk_scale·V, no alpha, no causal; fwd + bwd via its autograd op"
    )

    def __init__(self, options=None):
        super().__init__(options)
        self._activation: str | None = None

    def parse_options(self, options: dict) -> dict:
        parsed = super().parse_options(options)
        try:
            techs = bwd_techs(parsed["bwd_opt_tech"])
        except ValueError as exc:
            raise ValueError(f"{self.name}: option {exc}") from None
        for tech in techs:
            flag = BWD_TECHS[tech]
            if not parsed[flag]:
                raise ValueError(
                    f"{self.name}: option bwd_opt_tech {parsed['bwd_opt_tech']!r}: {tech!r} has no effect "
                    f"without {flag}: true (Meta's backward uses a technique only when its forward flag is on, "
                    f"{SRC}:3452); allowed: set {flag}: true, or drop {tech!r}"
                )
        return parsed

    def _entry(self):
        accept_object_annotations()
        module = self.peer_module()
        restore_accumulators(module)
        return module.generalized_dot_product_attention

    def availability(self, device) -> str | None:
        reason = super().availability(device)
        if reason is None and self.options["enable_ws"]:
            ws_build_check(self, torch.device(device))  # raises with what failed: the runner logs it
        return reason

    def device_reason(self, device: torch.device) -> str | None:
        if self.options["enable_ws"]:
            reason = fork_reason()
            if reason:
                return reason
        if device.type != "cuda":
            return f"runs on CUDA GPUs only (on CPU tensors Meta's op dispatches to its softmax fallback, {SRC}:3974)"
        return None

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        if spec.causal:
            return f"Meta's Triton GDPA has no causal mask (it asserts not is_causal, {SRC}:3139)"
        if spec.alpha != 1.0:
            return (
                f"Meta's Triton GDPA has no pre-activation scale (O = act(QKᵀ)·qk_scale·V, {SRC}:306); "
                f"alpha must be 1, got {spec.alpha:g}"
            )
        if spec.activation not in ACTIVATIONS:
            return f"activation {spec.activation!r} has no Meta equivalent; allowed: {', '.join(ACTIVATIONS)}"
        if spec.mode != "fwd" and "tma" in bwd_techs(self.options["bwd_opt_tech"]):
            reason = store_reduce_reason()
            if reason:
                return reason
        return shape_reason(batch, "Meta's GDPA")

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        fn = self._entry()
        o = self.options
        self._activation = ACTIVATIONS[spec.activation]
        return fn(
            **jagged_arguments(batch),
            qk_scale=float(spec.qk_scale),
            activation=self._activation,
            enable_persistent=o["enable_persistent"],
            enable_tma=o["enable_tma"],
            enable_ws=o["enable_ws"],
            use_dq_atomic_add=o["use_dq_atomic_add"],
            bwd_opt_tech=o["bwd_opt_tech"],
        )

    def kernel_configs(self) -> dict | None:
        fields = self.source_fields()
        if fields is None:
            return None
        record = {**fields, "activation": self._activation}
        if "tma" in bwd_techs(self.options["bwd_opt_tech"]) and not self.options["use_dq_atomic_add"]:
            record["bwd_configs"] = (
                "Meta's list without those whose dQ block (BLOCK_M2 rows) does not fit its TMA descriptor "
                "(BLOCK_M1 // NUM_CONSUMER_GROUPS rows), on a dQ zeroed before its add: meta_gdpa.fit_tma_backward"
            )
        return record
