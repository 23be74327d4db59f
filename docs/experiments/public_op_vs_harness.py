"""Is the harness's figure the user's figure? The public `kernels.gdpa.gdpa()` called with its defaults
against the harness's own provider callable, on the 12 peer shapes, forward and backward (issue 16).

    PYTHONPATH=. python docs/experiments/public_op_vs_harness.py [--out DIR] [--rounds 3] [--rep-ms 200]

Shapes: set 1 (jagged Q, uniform fill 0.5 / 1.0, K/V of length L) and set 2 (fill 1.0, K/V of length 256)
at L = 256 … 2048; B = 1152, H = 4, D = 128, bf16, fast_gelu; lengths from the workloads' uniform_fill rule
(seed 0, as configs/h200.yaml). One process, one batch per shape shared by every variant:
  public        gdpa(q, k, v, q_offsets, kv_offsets, max_q, max_kv) — defaults: backend "auto",
                validate "host"; bwd: torch.autograd.grad of one kept forward graph
  harness       get_provider("gdpa").build(batch, spec, mode) — what `python -m bench run` times
  public_full   as public with validate="full" (reads the offsets back every call: the old default)
Timing: triton.testing.do_bench (CUDA events, L2 cleared before each call), median; the variants are
interleaved round by round and each one's figure is the median over rounds. FLOPs: fwd 4·H·D·ΣLq·Lk,
bwd 2.5× (the peers' convention). Prints TFLOP/s and public / harness per case; writes CSV to --out.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics

import numpy as np
import torch
import triton.testing

from kernels.gdpa import gdpa
from kernels.registry import CaseSpec, get_provider
from workloads import build_lengths, make_batch

B, H, D = 1152, 4, 128
LENGTHS = (256, 512, 1024, 2048)
SHAPES = [(f"set1/L={L}/fill={fill}", L, fill, L) for L in LENGTHS for fill in (0.5, 1.0)] + [
    (f"set2/L={L}", L, 1.0, 256) for L in LENGTHS
]
FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5}


def public_callable(b, mode: str, validate: str):
    if mode == "fwd":
        return lambda: gdpa(b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, validate=validate)
    g = b.with_grad()
    out = gdpa(g.q, g.k, g.v, g.q_offsets, g.kv_offsets, g.max_q, g.max_kv, validate=validate)
    return lambda: torch.autograd.grad(out, (g.q, g.k, g.v), b.dout, retain_graph=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "runs/public_op_vs_harness"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rep-ms", type=int, default=200)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device("cuda")
    provider = get_provider("gdpa")
    rows = []
    print(f"{'case':32s} {'public':>8s} {'harness':>8s} {'pub/har':>8s} {'full':>8s}  (TFLOP/s)", flush=True)
    for name, L, fill, kv_len in SHAPES:
        q_len, kv = build_lengths(
            "uniform_fill", {"fill": fill}, "fixed_kv", {"kv_len": kv_len}, batch_size=B, max_len=L, seed=0
        )
        b = make_batch(q_len, kv, H=H, D=D, dtype=torch.bfloat16, device=dev, seed=0)
        fwd_flops = 4.0 * H * D * float((np.asarray(q_len) * np.asarray(kv)).sum())
        for mode in ("fwd", "bwd"):
            fns = {
                "public": public_callable(b, mode, "host"),
                "harness": provider.build(b, CaseSpec(mode=mode, activation="fast_gelu"), mode),
                "public_full": public_callable(b, mode, "full"),
            }
            for fn in fns.values():
                fn()  # compile / autotune outside the timed calls
            torch.cuda.synchronize()
            ms = {k: [] for k in fns}
            for _ in range(a.rounds):
                for k, fn in fns.items():
                    ms[k].append(triton.testing.do_bench(fn, warmup=25, rep=a.rep_ms, return_mode="median"))
            flops = fwd_flops * FLOP_FACTOR[mode]
            tf = {k: flops / (statistics.median(v) * 1e-3) / 1e12 for k, v in ms.items()}
            ratio = tf["public"] / tf["harness"]
            case = f"{name}/{mode}"
            print(
                f"{case:32s} {tf['public']:8.1f} {tf['harness']:8.1f} {ratio:8.3f} {tf['public_full']:8.1f}", flush=True
            )
            rows.append(
                dict(
                    case=case,
                    mode=mode,
                    public_tflops=round(tf["public"], 2),
                    harness_tflops=round(tf["harness"], 2),
                    public_over_harness=round(ratio, 4),
                    public_full_tflops=round(tf["public_full"], 2),
                    **{f"{k}_ms": [round(x, 4) for x in v] for k, v in ms.items()},
                    kernel_config=provider.kernel_configs(),
                )
            )
            del fns
            torch.cuda.empty_cache()
    worst = min(rows, key=lambda r: r["public_over_harness"])
    best = max(rows, key=lambda r: r["public_over_harness"])
    print(
        f"public / harness: min {worst['public_over_harness']:.3f} ({worst['case']}), "
        f"max {best['public_over_harness']:.3f} ({best['case']}); bar: within 5% on all {len(rows)}"
    )
    path = os.path.join(a.out, "public_op_vs_harness.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
