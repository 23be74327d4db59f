"""Whether a refactor of the Triton kernels kept the grid kernels' code: every fwd.py / bwd.py grid kernel at every
config, full and causal, cross-compiled for sm_90a (no GPU) from a checkout, its PTX instructions written to a file
(debug sections, line records and label names left out). Run it on two checkouts and compare the files:
    python docs/experiments/grid_ptx_same.py /path/to/checkout OUT.txt
(2026-12-07: main against issue30-walk.patch applied — 18 of 18 identical instruction streams.)"""

import sys, re

root = sys.argv[1]
sys.path[:0] = [root, root + "/docs/experiments"]
import packed_compile, triton
from packed_compile import signature, attributes, ASTSource, GPUTarget
from kernels.gdpa import bwd, fwd

out = []
for causal in (False, True):
    for name, kern, cfgs, heads in (
        ("dkdv", bwd.gdpa_bwd_dkdv_kernel, bwd.DKDV_CONFIGS, "HKV"),
        ("dq", bwd.gdpa_bwd_dq_kernel, bwd.DQ_CONFIGS, "H"),
        ("fwd", fwd.gdpa_fwd_kernel, fwd.FWD_CONFIGS, "H"),
    ):
        for tiles in cfgs:
            m, n, w, s = tiles[:4]
            c = {
                heads: 4,
                "GROUPS": 1,
                "D": 128,
                "BLOCK_M": m,
                "BLOCK_N": n,
                "ACT": "silu" if causal else "fast_gelu",
                "HW_TANH": True,
                "CAUSAL": causal,
                "PRECISION": "tf32",
            }
            sig = signature(kern, "bf16", c)
            src = ASTSource(kern, signature=sig, constexprs=c, attrs=attributes(kern, sig))
            opts = {"num_warps": w, "num_stages": s} | ({"maxnreg": tiles[4]} if len(tiles) > 4 else {})
            ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts).asm["ptx"]
            ptx = "\n".join(
                l.strip()
                for l in ptx.splitlines()
                if l.strip().endswith(";") and not l.strip().startswith((".b8", ".b32", ".b64", ".loc", ".file"))
            )
            ptx = re.sub(r"\$L__\w+", "L", ptx)
            out.append(f"== {name} {tiles} {causal}\n{ptx}")
open(sys.argv[2], "w").write("\n".join(out))
