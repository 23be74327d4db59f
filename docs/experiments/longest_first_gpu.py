"""Issue 30: the longest-first order's own cost and result on the GPU (kernels/gdpa/hopper/longest_first.py, landed
2026-12-06), without FA4: the order kernel alone over the production batches' lengths, checked against numpy's stable
sort and timed from its CUPTI kernel rows (torch.profiler), beside a copy of the same lengths (a floor: one small
launch).

    # on the GPU machine, from the repository root:
    PYTHONPATH=. python3 docs/experiments/longest_first_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.gdpa.hopper.longest_first import longest_first_order
from workloads.pairing import build_lengths

BATCHES = {  # configs/production.yaml's self-attention sets (seed 0), and the largest batch the order takes
    "lognormal 2048": ("lognormal", {"preset": "ml-20m"}, 2048, 1152),
    "lognormal 4096": ("lognormal", {"preset": "ml-20m"}, 4096, 1152),
    "hstu_sl 4096": ("hstu_sl", {"fill": 0.5, "alpha": 1.7}, 4096, 1152),
    "spike 4096": ("spike", {"p": 0.02, "base": "lognormal", "preset": "ml-20m"}, 4096, 1152),
    "lognormal 2048, B 2048": ("lognormal", {"preset": "ml-20m"}, 2048, 2048),
}


def expected(lengths: np.ndarray, tile: int) -> np.ndarray:
    order = np.lexsort((np.arange(len(lengths)), -lengths))
    counts = np.concatenate([[0], np.cumsum(-(-lengths[order] // tile))])
    return np.concatenate([counts, order]).astype(np.int32)


def kernel_us(fn, calls: int = 50) -> dict:
    """Median device time per call of each kernel `fn` launches (CUPTI)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times: dict[str, list] = {}
    for event in prof.events():
        if event.device_type.name == "CUDA":
            times.setdefault(event.name, []).append(event.device_time)
    return {name[:40]: float(np.median(t)) for name, t in times.items()}


def main() -> int:
    device = torch.device("cuda", 0)
    print(torch.cuda.get_device_name(0))
    failures = 0
    for name, (family, params, max_len, batch) in BATCHES.items():
        lengths, _ = build_lengths(family, params, "self", {}, batch_size=batch, max_len=max_len, seed=0)
        lengths = np.asarray(lengths, dtype=np.int64)
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=device)
        got = longest_first_order(offsets, offsets, 128).cpu().numpy()
        ok = np.array_equal(got, expected(lengths, 128))
        failures += not ok
        order_us = kernel_us(lambda o=offsets: longest_first_order(o, o, 128))
        copy_us = kernel_us(lambda o=offsets: o.clone())
        print(f"{name:<26} B {batch:>6}  {'ok' if ok else 'WRONG'}  order {order_us}  a copy {copy_us}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
