"""Whether a refactor of the Triton kernels kept the grid kernels' code: every fwd.py / bwd.py grid kernel at every
config, full and causal, cross-compiled for sm_90a (no GPU) from a checkout, its PTX instructions written to a file
(debug sections, line records and label names left out). Run it on two checkouts and compare the files:
    python docs/experiments/grid_ptx_same.py /path/to/checkout OUT.txt
(2026-12-07: main against issue30-walk.patch applied — 18 of 18 identical instruction streams.)"""

import importlib
import re
import sys


def instructions(ptx: str) -> str:
    lines = (line.strip() for line in ptx.splitlines())
    kept = [line for line in lines if line.endswith(";") and not line.startswith((".b8", ".b32", ".b64", ".loc"))]
    return re.sub(r"\$L__\w+", "L", "\n".join(kept))


def main(root: str, out: str) -> None:
    sys.path[:0] = [root, root + "/docs/experiments"]
    triton = importlib.import_module("triton")
    compiler = importlib.import_module("packed_compile")
    bwd = importlib.import_module("kernels.gdpa.bwd")
    fwd = importlib.import_module("kernels.gdpa.fwd")
    kernels = (
        ("dkdv", bwd.gdpa_bwd_dkdv_kernel, bwd.DKDV_CONFIGS, "HKV"),
        ("dq", bwd.gdpa_bwd_dq_kernel, bwd.DQ_CONFIGS, "H"),
        ("fwd", fwd.gdpa_fwd_kernel, fwd.FWD_CONFIGS, "H"),
    )
    found = []
    for causal in (False, True):
        for name, kernel, configs, heads in kernels:
            for tiles in configs:
                m, n, w, s = tiles[:4]
                c = {heads: 4, "GROUPS": 1, "D": 128, "BLOCK_M": m, "BLOCK_N": n, "HW_TANH": True,
                     "ACT": "silu" if causal else "fast_gelu", "CAUSAL": causal, "PRECISION": "tf32"}  # fmt: skip
                sig = compiler.signature(kernel, "bf16", c)
                src = compiler.ASTSource(kernel, signature=sig, constexprs=c, attrs=compiler.attributes(kernel, sig))
                opts = {"num_warps": w, "num_stages": s} | ({"maxnreg": tiles[4]} if len(tiles) > 4 else {})
                ptx = triton.compile(src, target=compiler.GPUTarget("cuda", 90, 32), options=opts).asm["ptx"]
                found.append(f"== {name} {tiles} {causal}\n{instructions(ptx)}")
    with open(out, "w") as f:
        f.write("\n".join(found))


if __name__ == "__main__":
    main(*sys.argv[1:3])
