"""Issue 30, half packs: which backward launch faults? On an H100 (2026-12-07, thirty-first session;
docs/experiments/h100-2026-12-07h) the half-packs patch's packed GPU tests passed every activation at both pack sizes
with the 8-warp (32, 8, 2) config, then hit an illegal memory access in the test that forced each config in turn, and
its A/B's autotuned `after` state failed every log-normal backward case the same way. One run of this script is one
launch in a fresh process (a fault poisons the CUDA context), from a tree with the patch applied (patch_ab.sh's
AB_DRY copy):

    python3 docs/experiments/half_packs_configs_gpu.py config I D half|full   # BWD_CONFIGS[I] alone, if _prune keeps it
    python3 docs/experiments/half_packs_configs_gpu.py tiles M W S D half|full # any (BLOCK_M, warps, stages), unpruned
    python3 docs/experiments/half_packs_configs_gpu.py production             # the log-normal 2048 batch, autotuned

`half`: sequences of at most 64 tokens only (the 64-row plan alone); `full`: 65-128 only (the 128-row plan alone);
`production`: both plans in one launch of the plan kernel at 32 lanes each (two warps), as the A/B ran them.
"""

import sys

import torch

sys.path.insert(0, "tests")
from test_gdpa_packed import compare

from kernels.gdpa import GDPAOptions, packed_bwd

TILES = (64, 64, 4, 2)
PACKED = GDPAOptions(
    fwd_plan=[["triton", 0, None]],
    bwd_plan=[["packed", 0, 129], ["triton", 129, None]],
    fwd_tiles=TILES,
    dkdv_tiles=TILES,
    dq_tiles=TILES,
)
LENGTHS = {"half": [1, 0, 64, 1, 63, 30, 3, 28, 0, 17, 40], "full": [65, 100, 128, 0, 127, 66, 90]}


def main() -> None:
    record = {}
    if sys.argv[1] == "production":
        from workloads.pairing import build_lengths

        lengths, _ = build_lengths("lognormal", {"preset": "ml-20m"}, "self", {}, batch_size=1152, max_len=2048, seed=0)
        what = "production log-normal 2048, autotuned"
        options = GDPAOptions(bwd_plan=[["packed", 0, 128], ["hopper", 128, None]], fwd_plan=[["triton", 0, None]])
        errs = compare(lengths, H=4, Hkv=4, D=128, dtype=torch.bfloat16, device="cuda", options=options, record=record)
    else:
        if sys.argv[1] == "tiles":  # a candidate outside BWD_CONFIGS (a workaround's), run as given
            cfg, (d, which) = tuple(int(a) for a in sys.argv[2:5]), (int(sys.argv[5]), sys.argv[6])
            config = packed_bwd.tile_config(cfg)
        else:
            index, d, which = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
            cfg = packed_bwd.BWD_CONFIGS[index]
            configs = [packed_bwd.tile_config(c) for c in packed_bwd.BWD_CONFIGS]
            config = configs[index]
            # `_prune` never returns an empty list (it falls back to the first config): ask it about all of them
            pack = 64 if which == "half" else 128
            if not any(c is config for c in packed_bwd._prune(configs, {"PACK": pack, "D": d})):
                print(f"config {cfg} D {d} {which}: pruned, not run", flush=True)
                return
        packed_bwd.packed_bwd_kernel_tuned.configs = [config]
        what = f"config {cfg} D {d} {which}"
        errs = compare(LENGTHS[which], H=4, Hkv=2, D=d, dtype=torch.bfloat16, device="cuda", seed=5, options=PACKED,
                       record=record)  # fmt: skip
    torch.cuda.synchronize()
    ran = {k: v.get("tiles") for k, v in record.items() if k.startswith("packed_bwd")}
    print(f"{what}: max rel. error {max(errs):.2e}, ran {ran}", flush=True)


if __name__ == "__main__":
    main()
