"""Check and time GDPA kernel variants in one GPU call (the PERF.md loop).

Forward: loads (pointer / TMA) × triton warp specialization × tile config. Backward (whole, dQ+dK+dV):
the split kernels as shipped against the atomic-dQ kernel (pointer atomics / TMA reductions) per tile.

    PYTHONPATH=. python -m kernels.gdpa.tune --out DIR [--quick]
    PYTHONPATH=. python -m kernels.gdpa.tune --profile-once fwd   # one launch, for ncu

Every variant is checked against the fp32 reference on a jagged bf16 batch before it is timed; a variant
that fails the check is reported and not timed. Timing: triton.testing.do_bench (CUDA events, L2 cleared
between calls), median. Writes tune.csv under --out and prints a short table last.
"""
from __future__ import annotations

import argparse
import csv
import itertools
import os
import re
import sys
import time

import numpy as np
import torch

from kernels.gdpa import bwd as _bwd
from kernels.gdpa import fwd as _fwd
from kernels.gdpa.interface import PINNED_KERNELS, bwd_dkdv, bwd_dq, gdpa_backward, gdpa_forward
from kernels.reference import reference_outputs
from kernels.registry import CaseSpec
from workloads.batch import make_batch

PEER_B, PEER_H, PEER_D = 1152, 4, 128


def uniform_fill(n: int, fill: float, batch: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lo = max(1, int((2 * fill - 1) * n)) if fill >= 0.5 else 1
    hi = n if fill >= 0.5 else max(1, int(2 * fill * n))
    return rng.integers(lo, hi + 1, size=batch)


def peer_shapes(quick: bool):
    shapes = []
    for L in (256, 512, 1024, 2048):
        shapes.append((f"set1/L={L}/fill=1.0", L, 1.0, L))
        shapes.append((f"set1/L={L}/fill=0.5", L, 0.5, L))
        shapes.append((f"set2/L={L}", L, 1.0, 256))
    if quick:
        keep = {"set1/L=2048/fill=1.0", "set1/L=512/fill=1.0", "set1/L=2048/fill=0.5", "set2/L=2048",
                "set1/L=256/fill=1.0"}
        shapes = [s for s in shapes if s[0] in keep]
    return shapes


def production_shapes():
    """configs/production.yaml's reference for load balance: uniform fill 1.0 against log-normal
    (MovieLens-20M fit) and HSTU stochastic lengths at the same maximum (self-attention, unsorted)."""
    return [("uniform/L=2048", 2048, ("uniform_fill", {"fill": 1.0}), None),
            ("lognormal/L=2048", 2048, ("lognormal", {"preset": "ml-20m"}), None),
            ("uniform/L=4096", 4096, ("uniform_fill", {"fill": 1.0}), None),
            ("lognormal/L=4096", 4096, ("lognormal", {"preset": "ml-20m"}), None),
            ("hstu_sl/L=4096", 4096, ("hstu_sl", {"fill": 0.5, "alpha": 1.7}), None)]


def build(name, L, fill, kv, seed=0, batch=PEER_B):
    if isinstance(fill, tuple):  # a production length family, self-attention
        from workloads.pairing import build_lengths
        ql, kl = build_lengths(fill[0], fill[1], "self", {}, batch_size=batch, max_len=L, seed=seed)
    else:
        ql = uniform_fill(L, fill, batch, seed)
        kl = np.full(batch, kv)
    b = make_batch(ql, kl, H=PEER_H, D=PEER_D, dtype=torch.bfloat16, device="cuda", seed=seed)
    flops = 4.0 * PEER_H * PEER_D * float((np.asarray(ql, np.int64) * np.asarray(kl, np.int64)).sum())
    return b, flops


def rel(a, b):
    e = ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()
    return e if np.isfinite(e) else float("inf")  # so max() over several tensors cannot skip a NaN


def check(kind: str, act: str) -> float:
    """Relative error of the current variant on a small jagged bf16 batch (fresh inputs, NaN-poisoned
    outputs), GQA, alpha and qk_scale != 1."""
    ql = np.array([1, 0, 127, 128, 129, 300, 513, 64, 1000, 17])
    kl = np.array([5, 3, 0, 128, 200, 300, 7, 1024, 999, 17])
    b = make_batch(ql, kl, H=4, Hkv=2, D=128, dtype=torch.bfloat16, device="cuda",
                   seed=int(time.time()) % 1000)
    spec = CaseSpec(activation=act, alpha=0.8, qk_scale=1.25)
    ref, grads = reference_outputs(b, spec, grads=(kind != "fwd"))
    args = (b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, act, 0.8, 1.25, False)
    poison = float("nan")
    if kind == "fwd":
        return rel(gdpa_forward(*args), ref)
    if kind == "dkdv":
        dk, dv = torch.full_like(b.k, poison), torch.full_like(b.v, poison)
        bwd_dkdv(b.dout, *args, dk=dk, dv=dv)
        return max(rel(dk, grads[1]), rel(dv, grads[2]))
    if kind == "dq":
        dq = torch.full_like(b.q, poison)
        bwd_dq(b.dout, *args, dq=dq)
        return rel(dq, grads[0])
    got = gdpa_backward(b.dout, *args)
    return max(rel(g, r) for g, r in zip(got, grads))


def bench(fn) -> float:
    import triton.testing
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _label(cfg) -> str:
    # BLOCK_M/BLOCK_N/warps/stages, then "r<maxnreg>" when the registers are capped
    return "/".join(map(str, cfg[:4])) + (f"/r{cfg[4]}" if len(cfg) > 4 and cfg[4] else "")


def _env(cfg) -> str:
    return ",".join(map(str, cfg))


def variants(fwd_configs=None, dkdv_configs=None, dq_configs=None):
    """(kind, label, environment) of every variant the sweep checks and times; `fwd_configs` replaces
    the shipped forward tile configs (to try new ones without editing fwd.py); `dkdv_configs` /
    `dq_configs` add pinned configs of the split backward's two kernels, timed one kernel at a time."""
    fwd_configs = fwd_configs or _fwd.FWD_CONFIGS
    out = []
    for impl, ws, cfg in itertools.product(("ptr", "tma"), ("0", "1"), fwd_configs):
        if impl == "tma" and ws == "0":
            continue  # measured slower than pointer loads in v1 (PERF.md); kept only as a WS candidate
        out.append(("fwd", f"{impl}{'+ws' if ws == '1' else ''}/{_label(cfg)}",
                    {"GDPA_FWD_IMPL": impl, "GDPA_FWD_WS": ws, "GDPA_FWD_CONFIG": _env(cfg)}))
    for cfg in fwd_configs:
        out.append(("fwd", f"ptr+pipe/{_label(cfg)}",
                    {"GDPA_FWD_IMPL": "ptr", "GDPA_FWD_PIPE": "1", "GDPA_FWD_CONFIG": _env(cfg)}))
    # each half of the split backward on its own, per tile config (the pair with the least time wins)
    for cfg in dkdv_configs or ():
        out.append(("dkdv", f"dkdv/{_label(cfg)}", {"GDPA_DKDV_CONFIG": _env(cfg)}))
    for cfg in dq_configs or ():
        out.append(("dq", f"dq/{_label(cfg)}", {"GDPA_DQ_CONFIG": _env(cfg)}))
    # launch schedules (schedule.py): the whole-grid one against one program per existing tile
    for kind, sched in itertools.product(("fwd", "bwd"), ("grid", "compact")):
        out.append((kind, f"sched={sched}", {"GDPA_SCHEDULE": sched}))
    # the split backward as shipped (both kernels autotuned), then the atomic dQ backward per tile config
    out.append(("bwd", "split/autotuned", {"GDPA_BWD_IMPL": "split"}))
    for impl, cfg in itertools.product(("atomic", "atomic_tma"), _bwd.ATOMIC_DKDV_CONFIGS):
        out.append(("bwd", f"{impl}/{'/'.join(map(str, cfg))}",
                    {"GDPA_BWD_IMPL": impl, "GDPA_DKDV_CONFIG": ",".join(map(str, cfg))}))
    return out


VARIANT_ENV = ("GDPA_SCHEDULE", "GDPA_FWD_IMPL", "GDPA_FWD_WS", "GDPA_FWD_PIPE", "GDPA_FWD_CONFIG", "GDPA_BWD_IMPL", "GDPA_DKDV_CONFIG",
               "GDPA_DQ_CONFIG")


# GEMM work of each timed kind in units of the forward's 4·H·D·ΣLq·Lk: the backward by the peers'
# 2.5× convention; its two split kernels by the GEMMs they really run (dK/dV 4, dQ 3 of the forward's 2)
FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "dkdv": 2.0, "dq": 1.5}
PINNED_ENV = {"fwd": "GDPA_FWD_CONFIG", "dkdv": "GDPA_DKDV_CONFIG", "dq": "GDPA_DQ_CONFIG"}


def _resources(kind: str) -> str:
    """Registers per thread, spills and shared memory of the pinned kernel just run ("" if autotuned)."""
    k = PINNED_KERNELS.get(PINNED_ENV.get(kind, ""))
    if k is None:
        return ""
    return f"regs={k.n_regs} spills={k.n_spills} smem={k.metadata.shared // 1024}K"


def run(out_dir: str, quick: bool, act: str, only: str | None = None, select: str | None = None,
        fwd_configs=None, dkdv_configs=None, dq_configs=None, production: bool = False) -> None:
    os.makedirs(out_dir, exist_ok=True)
    rows = []
    path = os.path.join(out_dir, "tune.csv")
    f = open(path, "w", newline="")
    w = csv.DictWriter(f, fieldnames=["kind", "variant", "shape", "rel_err", "ms", "tflops", "resources",
                                       "error"])
    w.writeheader()

    def emit(row):
        rows.append(row)
        w.writerow(row)
        f.flush()

    shapes = production_shapes() if production else peer_shapes(quick)
    batches = {s[0]: build(*s) for s in shapes}
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    bm = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = bench(lambda: a @ bm)
    emit(dict(kind="gemm", variant="cublas 8192^3", shape="", rel_err="", ms=ms,
              tflops=2 * 8192**3 / ms / 1e9, error=""))
    del a, bm

    for kind, label, env in variants(fwd_configs, dkdv_configs, dq_configs):
        if (only and only != kind) or (select and not re.search(select, label)):
            continue
        for name in VARIANT_ENV:
            os.environ.pop(name, None)
        os.environ.update(env)
        PINNED_KERNELS.clear()
        base = dict(kind=kind, variant=label, resources="")
        try:
            err = check(kind, act)
        except Exception as exc:  # a variant that does not compile is a result, not a crash
            msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            emit(dict(base, shape="check", rel_err="", ms="", tflops="", error=msg))
            print(f"{kind} {label}: FAILED {msg}", flush=True)
            continue
        emit(dict(base, shape="check", rel_err=err, ms="", tflops="", error=""))
        if not err < 2e-2:
            print(f"{kind} {label}: INCORRECT rel_err={err:.3g}", flush=True)
            continue
        for name, (b, flops) in batches.items():
            args = (b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, act, 1.0, 1.0, False)
            fn = {"fwd": lambda: gdpa_forward(*args), "bwd": lambda: gdpa_backward(b.dout, *args),
                  "dkdv": lambda: bwd_dkdv(b.dout, *args), "dq": lambda: bwd_dq(b.dout, *args)}[kind]
            fl = flops * FLOP_FACTOR[kind]
            try:
                t = bench(fn)
            except Exception as exc:
                emit(dict(base, shape=name, rel_err=err, ms="", tflops="", error=str(exc)[:200]))
                continue
            emit(dict(base, shape=name, rel_err=err, ms=t, tflops=fl / t / 1e9, resources=_resources(kind),
                      error=""))
        print(f"{kind} {label}: err {err:.2e} {_resources(kind)} " + " ".join(
            f"{r['shape']}={r['tflops']:.0f}" for r in rows[-len(batches):] if r["tflops"] != ""), flush=True)
    for name in VARIANT_ENV:
        os.environ.pop(name, None)
    f.close()
    summarize(rows)


def summarize(rows):
    print("\n== best variant per kind and shape (TFLOP/s; bwd by the 2.5x convention, dkdv/dq by their own"
          " GEMMs) ==")
    timed = [r for r in rows if r["tflops"] != "" and r["shape"] not in ("check", "")]
    for kind in ("fwd", "bwd", "dkdv", "dq"):
        for shape in sorted({r["shape"] for r in timed}):
            cand = [r for r in timed if r["kind"] == kind and r["shape"] == shape]
            if cand:
                best = max(cand, key=lambda r: r["tflops"])
                print(f"{kind:5s} {shape:22s} {best['tflops']:7.1f} {best['ms']:.3f} ms  "
                      f"{best['variant']}")
    gemm = [r for r in rows if r["kind"] == "gemm"]
    if gemm:
        print(f"gemm 8192^3 bf16: {gemm[0]['tflops']:.0f} TFLOP/s")


def check_all() -> int:
    """Every activation × causal × dtype × tanh mode, fwd and grads, vs the fp32 reference."""
    from kernels.activations import ACTIVATION_NAMES
    from kernels.gdpa.interface import gdpa
    bad = 0
    for env in ("GDPA_FWD_CONFIG", "GDPA_DKDV_CONFIG", "GDPA_DQ_CONFIG"):
        os.environ[env] = "64,64,4,2"  # one compile per combination: this checks math, not tuning
    combos = [(act, False, torch.bfloat16, "f32") for act in ACTIVATION_NAMES]
    combos += [("fast_gelu", True, torch.bfloat16, "f32"), ("silu", True, torch.bfloat16, "f32"),
               ("fast_gelu", False, torch.float16, "f32"), ("fast_gelu", True, torch.bfloat16, "f16x2"),
               ("fast_silu", False, torch.bfloat16, "f16x2")]
    for act, causal, dtype, tanh in combos:
        os.environ["GDPA_TANH"] = tanh
        ql = np.array([1, 0, 127, 130, 257, 64, 300])
        kl = ql if causal else np.array([5, 3, 0, 128, 200, 1, 299])
        b = make_batch(ql, kl, H=4, Hkv=2, D=64, dtype=dtype, device="cuda", seed=int(time.time() * 1e3) % 9973)
        spec = CaseSpec(activation=act, alpha=0.8, qk_scale=1.25, causal=causal)
        bg = b.with_grad()
        out = gdpa(bg.q, bg.k, bg.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, activation=act,
                   alpha=0.8, qk_scale=1.25, causal=causal)
        grads = torch.autograd.grad(out, (bg.q, bg.k, bg.v), b.dout)
        ref, rgrads = reference_outputs(b, spec, grads=True)
        errs = [rel(out, ref)] + [rel(g, r) for g, r in zip(grads, rgrads)]
        ok = all(e < 2e-2 for e in errs)
        bad += not ok
        print(f"check {act:12s} causal={causal!s:5s} {str(dtype)[6:]:8s} {tanh:5s} "
              + " ".join(f"{e:.1e}" for e in errs) + ("" if ok else "  FAIL"), flush=True)
    os.environ.pop("GDPA_TANH", None)
    return bad


def profile_once(kind: str, act: str) -> None:
    b, _ = build("set1/L=2048/fill=1.0", 2048, 1.0, 2048)
    args = (b.q, b.k, b.v, b.q_offsets, b.kv_offsets, b.max_q, b.max_kv, act, 1.0, 1.0, False)
    if kind == "fwd":
        gdpa_forward(*args)
    elif kind == "dkdv":
        bwd_dkdv(b.dout, *args)
    else:
        bwd_dq(b.dout, *args)
    torch.cuda.synchronize()


def parse_configs(text: str) -> list[tuple[int, int, int, int]]:
    try:
        cfgs = [tuple(int(x) for x in part.split(",")) for part in text.split(";") if part.strip()]
    except ValueError:
        cfgs = []
    if not cfgs or any(len(c) not in (4, 5) for c in cfgs):
        raise argparse.ArgumentTypeError(f"expected 'BLOCK_M,BLOCK_N,num_warps,num_stages[,maxnreg];...', "
                                         f"got {text!r}")
    return cfgs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "runs/tune"))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", choices=("fwd", "bwd", "dkdv", "dq"), help="sweep one kind of variant")
    p.add_argument("--select", metavar="REGEX", help="only variants whose label matches, e.g. '^ptr(\\+pipe)?/'")
    p.add_argument("--fwd-configs", metavar="M,N,W,S;...", type=parse_configs,
                   help="forward tile configs to sweep instead of fwd.FWD_CONFIGS (a 5th value caps registers)")
    p.add_argument("--dkdv-configs", metavar="M,N,W,S[,R];...", type=parse_configs, help="pinned dK/dV configs")
    p.add_argument("--dq-configs", metavar="M,N,W,S[,R];...", type=parse_configs, help="pinned dQ configs")
    p.add_argument("--production", action="store_true",
                   help="time on configs/production.yaml's uniform / log-normal / hstu_sl shapes instead")
    p.add_argument("--activation", default="fast_gelu")
    p.add_argument("--profile-once", choices=("fwd", "dkdv", "dq"))
    p.add_argument("--check-all", action="store_true", help="correctness of every activation, then exit")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("tune needs a CUDA GPU", file=sys.stderr)
        return 2
    if a.check_all:
        return 1 if check_all() else 0
    if a.profile_once:
        profile_once(a.profile_once, a.activation)
    else:
        run(a.out, a.quick, a.activation, a.only, a.select, a.fwd_configs, a.dkdv_configs, a.dq_configs,
            a.production)
    return 0


if __name__ == "__main__":
    sys.exit(main())
