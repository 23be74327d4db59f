"""Why our FA4 backward reads faster than the docs/DESIGN.md §8 anchor (issue 6): time FA4's backward the ways a
benchmark script commonly does it, on the peer shapes (set 1, fill 1.0), in one process.

    PYTHONPATH=. python docs/experiments/fa4_bwd_gap.py [--out DIR]

Variants (all: CUDA events around the call, L2 flushed before each call, median of every sample):
  grad          torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)   <- what the harness times
  backward      out.backward(dout, retain_graph=True) into leaf .grad that are never cleared: every call
                after the first also runs one `.grad += g` add per input
  zero+backward q/k/v.grad.zero_() then out.backward(...): a zero kernel and an add kernel per input
  none+backward .grad = None then out.backward(...): AccumulateGrad takes the new tensor, no add
  no_maxseqlen  grad, with max_seqlen_q/k left to FA4 (None)
  fwdbwd-fwd    median(fwd + bwd) - median(fwd)
TFLOP/s use the harness convention (bwd = 2.5 × 4·H·D·ΣLq·Lk).
"""

from __future__ import annotations

import argparse
import csv
import os

import numpy as np
import torch

from bench.case.timing import time_cuda
from workloads.batch import make_batch

B, H, D = 1152, 4, 128


def time_length(L: int, fa4) -> list[dict]:
    """Every variant at one length. A function per length, so that the closures below see this length's
    tensors and all of them are freed on return, before the next length allocates."""
    lens = np.full(B, L)
    b = make_batch(lens, lens, H=H, D=D, dtype=torch.bfloat16, device="cuda", seed=L)
    flops = 2.5 * 4.0 * H * D * float((lens * lens).sum())
    q, k, v = (t.detach().clone().requires_grad_() for t in (b.q, b.k, b.v))
    dout = b.dout

    def call(maxlen=True):
        kw = dict(max_seqlen_q=L, max_seqlen_k=L) if maxlen else {}
        r = fa4(q, k, v, cu_seqlens_q=b.q_offsets, cu_seqlens_k=b.kv_offsets, softmax_scale=D**-0.5, **kw)
        return r[0] if isinstance(r, (tuple, list)) else r

    out = call()
    out_nomax = None
    try:
        out_nomax = call(maxlen=False)
    except Exception as exc:  # a variant FA4 refuses is a result
        print(f"L={L} no_maxseqlen: FA4 refused: {str(exc).splitlines()[0][:160]}")

    def zero_backward():
        for t in (q, k, v):
            t.grad.zero_()
        out.backward(dout, retain_graph=True)

    def none_backward():
        for t in (q, k, v):
            t.grad = None
        out.backward(dout, retain_graph=True)

    def fwd():
        with torch.no_grad():
            call()

    def fwd_bwd():
        torch.autograd.grad(call(), (q, k, v), dout)

    variants = {
        "grad": lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
        "backward": lambda: out.backward(dout, retain_graph=True),
        "zero+backward": zero_backward,
        "none+backward": none_backward,
    }
    if out_nomax is not None:
        variants["no_maxseqlen"] = lambda: torch.autograd.grad(out_nomax, (q, k, v), dout, retain_graph=True)
    rows = []
    for name, fn in variants.items():
        fn()  # compile / allocate outside the timed region
        s = time_cuda(fn, warmup_ms=100, rep_ms=1000, min_reps=20)
        rows.append(
            dict(
                L=L,
                variant=name,
                median_ms=s.median_ms,
                p20_ms=s.p20_ms,
                p80_ms=s.p80_ms,
                n=len(s.times_ms),
                tflops=flops / s.median_ms / 1e9,
            )
        )
    tf = time_cuda(fwd, warmup_ms=100, rep_ms=1000, min_reps=20).median_ms
    tfb = time_cuda(fwd_bwd, warmup_ms=100, rep_ms=1000, min_reps=20).median_ms
    rows.append(
        dict(L=L, variant="fwdbwd-fwd", median_ms=tfb - tf, p20_ms="", p80_ms="", n="", tflops=flops / (tfb - tf) / 1e9)
    )
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.environ.get("OUT", "runs/fa4_bwd_gap"))
    p.add_argument("--lengths", default="256,512,1024,2048")
    a = p.parse_args()
    from flash_attn.cute import flash_attn_varlen_func as fa4

    os.makedirs(a.out, exist_ok=True)
    rows = []
    for L in map(int, a.lengths.split(",")):
        length_rows = time_length(L, fa4)
        for r in length_rows:
            print(f"L={L:5d} {r['variant']:14s} {r['median_ms']:8.3f} ms {r['tflops']:6.0f} TFLOP/s", flush=True)
        rows += length_rows
        torch.cuda.empty_cache()
    with open(os.path.join(a.out, "fa4_bwd_gap.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print("\nFA4 backward TFLOP/s (set 1, fill 1.0):")
    Ls = sorted({r["L"] for r in rows})
    print("variant        " + " ".join(f"L={L:<6d}" for L in Ls))
    for name in dict.fromkeys(r["variant"] for r in rows):
        vals = {r["L"]: r["tflops"] for r in rows if r["variant"] == name}
        print(f"{name:14s} " + " ".join(f"{vals.get(L, float('nan')):8.0f}" for L in Ls))


if __name__ == "__main__":
    main()
