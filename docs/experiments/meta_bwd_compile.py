"""Cross-compile Meta's GDPA backward kernel (`_gdpa_bwd` of the meta_gdpa checkout) for sm90 on a machine
without a GPU, before and after `kernels.meta_gdpa.accept_object_annotations`.

On the H200 every meta_gdpa backward failed to compile (`NameError('object is not defined')`: the kernel
annotates its arguments `object`). Run from the repository root with the checkout in `.peers/`:

    TRITON_CACHE_DIR=$(mktemp -d) PYTHONPATH=. python docs/experiments/meta_bwd_compile.py

2026-12-01, Triton 3.6.0, checkout 2c128ab: before, NameError; after, ttir … cubin in 12 s. A compile, not a
run: the H200 is where it runs, through the correctness gate.
"""

from importlib import import_module

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.code_generator import CodeGenerator
from triton.runtime.jit import JITFunction

torch.cuda.get_device_capability = lambda *_: (9, 0)  # Meta's module asks at import; CPU-only torch asserts

from kernels import meta_gdpa  # noqa: E402
from kernels.registry import get_provider  # noqa: E402

POINTERS = dict.fromkeys(("Q", "K", "V", "DO", "DQ", "DK", "DV"), "*bf16") | dict.fromkeys(
    ("Q_offsets", "K_offsets", "Out_offsets"), "*i32"
)
INTS = {"stride_qm", "stride_km", "stride_qh", "stride_kh", "stride_d", "stride_dom", "stride_doh", "Z", "H", "G"}
INTS |= {"N_CTX", "N_CTX_KV"}
# what Meta's launcher passes for a meta_gdpa case (D 128, no fused qkv, no TMA), with one of its configs
CONSTEXPRS = dict(
    FUSED_QKV=False,
    FUSED_KV=False,
    SORT_BY_SEQ_LENGTH=False,
    BLOCK_D=128,
    HEAD_DIM=128,
    BLOCK_M1=32,
    BLOCK_N1=128,
    BLOCK_M2=128,
    BLOCK_N2=32,
    USE_START_END_OFFSETS=False,
    WINDOW_SIZE=None,
    BROADCAST_Q=False,
    USE_DQ_ATOMIC_ADD=False,
    enable_tma=False,
    NUM_CONSUMER_GROUPS=1,
    IS_DENSE_KV=False,
    activation_enum_int=3,
    USE_I64_IDX=False,
)


def main() -> None:
    module = get_provider("meta_gdpa").peer_module()
    varargs = import_module(module.__name__.rsplit(".", 1)[0] + ".vararg_kernel")
    kernel = varargs.unroll_varargs(module._gdpa_bwd, N=0, unroll_as_const=True)
    kernel = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn)
    signature, constexprs = {}, {}
    for name in kernel.arg_names:
        if name in POINTERS:
            signature[name] = POINTERS[name]
        elif name in INTS:
            signature[name] = "i32"
        elif name == "qk_scale":
            signature[name] = "fp32"
        else:  # the block sizes and flags, and the optional tensors our calls leave None
            signature[name], constexprs[name] = "constexpr", CONSTEXPRS.get(name)

    def build():
        source = ASTSource(kernel, signature=signature, constexprs=constexprs)
        return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 2})

    CodeGenerator.builtin_namespace.pop("object", None)
    try:
        build()
        print("before the fix: compiled")
    except Exception as exc:  # the compile error is the finding
        print("before the fix:", type(exc).__name__, str(exc).strip().splitlines()[-1][:100])
    meta_gdpa.accept_object_annotations()
    print("after the fix: compiled to", ", ".join(build().asm))


if __name__ == "__main__":
    main()
