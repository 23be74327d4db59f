"""Issue 30, half packs: which backward tile config faults? (2026-12-07: the half-packs patch's GPU tests and A/B hit an
illegal memory access in the packed backward; the 8-warp (32, 8, 2) config passed every activation at both pack
sizes.) Runs one config of kernels/gdpa/packed_bwd.BWD_CONFIGS, alone, on a batch with sequences of both pack sizes
(bf16, H 4, KV heads 2, D from argv), in this process: run it once per config in a fresh process, since a fault
poisons the CUDA context. From a tree with the patch applied (patch_ab.sh's AB_DRY copy):

    for i in 0 1 2 3 4 5 6; do timeout 60 python3 docs/experiments/half_packs_configs_gpu.py $i 128; done
"""

import sys

import torch

sys.path.insert(0, "tests")
from test_gdpa_packed import compare

from kernels.gdpa import GDPAOptions, packed_bwd

index, d = int(sys.argv[1]), int(sys.argv[2])
cfg = packed_bwd.BWD_CONFIGS[index]
packed_bwd.packed_bwd_kernel_tuned.configs = [packed_bwd.tile_config(cfg)]
tiles = (64, 64, 4, 2)
options = GDPAOptions(
    fwd_plan=[["triton", 0, None]],
    bwd_plan=[["packed", 0, 129], ["triton", 129, None]],
    fwd_tiles=tiles,
    dkdv_tiles=tiles,
    dq_tiles=tiles,
)
lengths = [1, 0, 64, 1, 63, 65, 0, 128, 30, 3, 100, 28, 129]
record = {}
errs = compare(lengths, H=4, Hkv=2, D=d, dtype=torch.bfloat16, device="cuda", seed=5, options=options, record=record)
torch.cuda.synchronize()
ran = {k: v.get("tiles") for k, v in record.items() if k.startswith("packed_bwd")}
print(f"config {cfg} D {d}: max rel. error {max(errs):.2e} ran {ran}", flush=True)
