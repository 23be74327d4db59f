"""Cross-compile the packed GDPA kernels (kernels/gdpa/packed_*.py) for sm90 on a machine without a GPU and
print what ptxas says of each config: registers, spills, shared memory — the register-pressure half of
issue 30's design, checked before the H200 runs it (docs/experiments/packed_gpu.py measures the time).

    TRITON_CACHE_DIR=$(mktemp -d) PYTHONPATH=. python docs/experiments/packed_compile.py [--dtype bf16] [--d 128]

A compile, not a run: the H200 is where correctness and speed are measured.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kernels.gdpa import packed_bwd, packed_fwd, packed_plan  # noqa: E402

PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def signature(kernel, dtype: str, constexprs: dict) -> dict:
    sig = {}
    for name in kernel.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in ("Plan", "Counter", "q_offsets", "kv_offsets"):
            sig[name] = "*i32"
        elif name[0].isupper():
            sig[name] = f"*{dtype}"
        elif name in ("alpha", "qk_scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def attributes(kernel, sig: dict) -> dict:
    """What a launch specializes: 16-byte aligned pointers and strides divisible by 16 (the production
    layouts: H·D and D elements), so the gathered row loads vectorize as they will on the GPU."""
    aligned = [i for i, name in enumerate(kernel.arg_names) if sig[name].startswith("*") or name.startswith("stride")]
    return {(i,): [["tt.divisibility", 16]] for i in aligned}


def compile_one(kernel, dtype: str, constexprs: dict, warps: int, stages: int, maxnreg=None) -> str:
    sig = signature(kernel, dtype, constexprs)
    src = ASTSource(kernel, signature=sig, constexprs=constexprs, attrs=attributes(kernel, sig))
    options = {"num_warps": warps, "num_stages": stages} | ({"maxnreg": maxnreg} if maxnreg else {})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "k.ptx")
        Path(ptx).write_text(compiled.asm["ptx"])
        cmd = [str(PTXAS), "-v", "--gpu-name", "sm_90a", ptx, "-o", os.path.join(tmp, "k.cubin")]
        if maxnreg:
            cmd[2:2] = ["--maxrregcount", str(maxnreg)]
        log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return (
        f"{regs.group(1) if regs else '?'} regs, spills {spill.group(1)}/{spill.group(2)} B, "
        f"shared {compiled.metadata.shared} B"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--act", default="fast_gelu")
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    common = dict(
        D=args.d,
        ACT=args.act,
        HW_TANH=True,
        CAUSAL=args.causal,
        PRECISION="ieee" if args.dtype == "fp32" else "tf32",
        PACK=128,
        MAXSEQ=packed_plan.MAXSEQ,
        GROUPS=1,
    )
    print(f"packed kernels, sm90, {args.dtype}, D {args.d}, {args.act}, causal {args.causal}")
    for tiles in packed_fwd.FWD_CONFIGS:
        m, n, w, s = tiles[:4]
        consts = dict(common, H=4, BLOCK_M=m, BLOCK_N=n)
        info = compile_one(packed_fwd.packed_fwd_kernel, args.dtype, consts, w, s, tiles[4] if len(tiles) > 4 else None)
        print(f"  fwd {list(tiles)}: {info}")
    for m, w, s in packed_bwd.BWD_CONFIGS:
        consts = dict(common, HKV=4, BLOCK_M=m)
        print(f"  bwd {[m, w, s]}: {compile_one(packed_bwd.packed_bwd_kernel, args.dtype, consts, w, s)}")
    consts = dict(PACK=128, MAXSEQ=packed_plan.MAXSEQ, CHUNK=packed_plan.CHUNK, LANES=32)
    print(f"  plan (32 lanes, 1 warp): {compile_one(packed_plan.pack_plan_kernel, 'i32', consts, 1, 1)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
