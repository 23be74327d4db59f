"""Where the naive eager forward's time goes, against the docs/DESIGN.md §8 anchor (issue 2: naive eager forward,
set 1 fill 1.0, about 54 / 81 / 108 TFLOP/s at L = 256 / 512 / 1024 in an independent run).

    PYTHONPATH=. python docs/experiments/naive_gap.py [--out DIR] [--lengths 256,512,1024]

Variants, each a step further from what the harness times (all: CUDA events, L2 flushed before each
call, median of every sample; FLOPs 4·H·D·ΣLq·Lk as everywhere):
  harness       kernels.naive.naive_gdpa on the jagged batch: pad, transpose, matmul, F.gelu(tanh),
                masked_fill, matmul, unpad  <- what `naive_eager` runs
  dense         the same math on inputs already padded and laid out [B, H, L, D]: no pad/unpad/transposes
  dense_nomask  as dense, without the masked_fill (at fill 1.0 nothing is masked)
  gemms_only    the two matmuls alone (the activation replaced by nothing)
Then one call of `harness` under torch.profiler: the CUDA kernels by total time (what the O(L²) score
passes and the O(L·D) layout work really cost).
"""

from __future__ import annotations

import argparse
import csv
import os

import numpy as np
import torch
import torch.nn.functional as F

from bench.case.timing import time_cuda
from kernels.naive import naive_gdpa
from workloads.batch import make_batch

B, H, D = 1152, 4, 128


def time_length(L: int, dev: torch.device, profile_dir: str | None) -> list[dict]:
    """Every variant at one length, then (if profile_dir) the profile of `harness`. A function per length,
    so that the lambdas below see this length's tensors and all of them are freed on return."""
    lengths = np.full(B, L)
    b = make_batch(lengths, lengths, H=H, D=D, dtype=torch.bfloat16, device=dev, seed=0, with_dout=False)
    flops = 4.0 * H * D * float((lengths * lengths).sum())
    qd, kd, vd = (t.view(B, L, H, D).transpose(1, 2).contiguous() for t in (b.q, b.k, b.v))
    keep = torch.ones(B, 1, 1, L, dtype=torch.bool, device=dev)
    variants = {
        "harness": lambda: naive_gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, L, L, "fast_gelu", 1.0, 1.0, False),
        "dense": lambda: torch.matmul(
            F.gelu(torch.matmul(qd, kd.transpose(-1, -2)), approximate="tanh").masked_fill(~keep, 0.0), vd
        ),
        "dense_nomask": lambda: torch.matmul(F.gelu(torch.matmul(qd, kd.transpose(-1, -2)), approximate="tanh"), vd),
        "gemms_only": lambda: torch.matmul(torch.matmul(qd, kd.transpose(-1, -2)), vd),
    }
    rows = []
    for name, fn in variants.items():
        fn()
        torch.cuda.synchronize()
        s = time_cuda(fn, warmup_ms=100, rep_ms=400, min_reps=5, device=dev)
        rows.append(
            dict(
                L=L,
                variant=name,
                median_ms=round(s.median_ms, 3),
                p20_ms=round(s.p20_ms, 3),
                p80_ms=round(s.p80_ms, 3),
                tflops=round(flops / s.median_ms / 1e9, 1),
            )
        )
        print(f"L={L:5d} {name:13s} {s.median_ms:9.3f} ms {rows[-1]['tflops']:7.1f} TFLOP/s", flush=True)
        torch.cuda.empty_cache()
    if profile_dir is not None:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            variants["harness"]()
            torch.cuda.synchronize()
        try:
            table = prof.key_averages().table(sort_by="device_time_total", row_limit=15, max_name_column_width=70)
        except (AttributeError, KeyError, ValueError):  # older torch spells it cuda_time_total
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=15, max_name_column_width=70)
        print(f"\n== profiler, harness variant, L={L}\n{table}", flush=True)
        with open(os.path.join(profile_dir, f"profile_L{L}.txt"), "w") as f:
            f.write(table)
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "runs/naive_gap"))
    p.add_argument("--lengths", default="256,512,1024")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    dev = torch.device("cuda")
    lengths = [int(x) for x in a.lengths.split(",")]
    for L in lengths:
        rows += time_length(L, dev, a.out if L == max(lengths) else None)  # profile the longest
        torch.cuda.empty_cache()
    with open(os.path.join(a.out, "naive_gap.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
