"""Issue 22 on the H200: does walking sequences longest first (kernels/gdpa/order.py) shorten the Triton
forward's tail on production batches? Triton only (no FA4 needed), one process, interleaved do_bench medians.

    PYTHONPATH=. python docs/experiments/order_gpu.py        # writes $OUT/order_gpu.json, prints a table
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from workloads.pairing import build_lengths  # noqa: E402

B, H, D = 1152, 4, 128
LN = {"preset": "ml-20m"}
SHAPES = [
    ("lognormal 2048", "lognormal", LN, "self", {}, 2048, False),
    ("lognormal 2048 sorted", "lognormal", LN, "self", {}, 2048, True),
    ("lognormal 4096", "lognormal", LN, "self", {}, 4096, False),
    ("lognormal 4096 sorted", "lognormal", LN, "self", {}, 4096, True),
    ("spike 4096", "spike", {"p": 0.02, "base": "lognormal", "preset": "ml-20m"}, "self", {}, 4096, False),
    ("hstu_sl 4096", "hstu_sl", {"fill": 0.5, "alpha": 1.7}, "self", {}, 4096, False),
    ("target_history 4096", "lognormal", LN, "target_history", {"max_targets": 256}, 4096, False),
    ("short_kv 4096", "lognormal", LN, "fixed_kv", {"kv_len": 256}, 4096, False),
    ("set1 L=256 fill=0.5", "uniform_fill", {"fill": 0.5}, "fixed_kv", {"kv_len": 256}, 256, False),
    ("set1 L=2048 fill=0.5", "uniform_fill", {"fill": 0.5}, "fixed_kv", {"kv_len": 2048}, 2048, False),
]


def op(b, kv_off, options):
    from kernels.gdpa import gdpa

    return lambda: gdpa(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, options=options)


def main():
    from triton.testing import do_bench

    from kernels.gdpa import GDPAOptions
    from workloads.batch import make_batch

    out_dir = Path(os.environ.get("OUT", "/tmp"))
    rows = []
    for name, family, params, rule, rule_params, max_len, sort in SHAPES:
        q, k = build_lengths(family, params, rule, rule_params, batch_size=B, max_len=max_len, seed=0, sort=sort)
        b = make_batch(q, k, H=H, D=D, dtype=torch.bfloat16, device="cuda", seed=0)
        kv_off = b.q_offsets if rule == "self" else b.kv_offsets
        flops = 4 * H * D * float((np.asarray(q, dtype=np.float64) * k).sum())
        fns = {order: op(b, kv_off, GDPAOptions(backend="triton", order=order)) for order in ("batch", "longest_first")}
        ms = {n: [] for n in fns}
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        for r in range(3):  # interleaved: clock drift under the power cap hits both alike
            for n in list(fns)[r % 2 :] + list(fns)[: r % 2]:
                ms[n].append(do_bench(fns[n], warmup=20, rep=150, return_mode="median"))
        med = {n: float(np.median(v)) for n, v in ms.items()}
        row = {"shape": name, "ms": med, "tflops": {n: flops / t * 1e-9 for n, t in med.items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out_dir / "order_gpu.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'shape':<24}{'batch':>8}{'lpt':>8}{'lpt/batch':>11}")
    for r in rows:
        t = r["tflops"]
        print(f"{r['shape']:<24}{t['batch']:>8.0f}{t['longest_first']:>8.0f}{t['longest_first'] / t['batch']:>11.3f}")


if __name__ == "__main__":
    main()
