"""Issue 30 on the H200: the Hopper forward on 64-row query tiles for the bands of medium-length sequences.

Why (kernels/gdpa/PERF.md, "Where issue 30's log-normal 2048 bars stand"): the forward bar's 420 TFLOP/s is 97%
of the batch's jaggedness ceiling at 128-row tiles, so the sequences below 1024 must run on smaller tiles than
the Hopper kernel's 128 rows — today Triton's 64x32, which runs them at half the Hopper stage's rate per FLOP
(38.3% of the work in 0.3125 ms against 61.7% in 0.2581; the [128, 512) band 0.125 ms for 16.4%). FA4's sm90
forward builds with tile_m 64 (one MMA warpgroup beside the producer: 256 threads, which FA4 derives from the
tile's MMA layout and asserts it supports; cross-compiled for sm_90a
without a GPU; ptxas: 255 registers, no stack, no spill — one CTA per SM, as the 128-row kernel): a 64-row tile
halves the query rows a sequence of 128-511 tokens leaves empty in its last tile.

Predicted (log-normal 2048, B 1152, H 4, D 128, bf16, fast_gelu): at the long band's rate (547 TFLOP/s) times
the 64-row tile efficiency (~0.78 for [128, 512), ~0.93 for [512, 1024)) and ~0.85 for one MMA warpgroup without
a ping-pong partner: [128, 512) 0.125 -> ~0.10 ms, [512, 1024) level with Triton (~0.096); the plan
Triton [0, 128) + Hopper-64 [128, 1024) + Hopper [1024, inf) 0.569 -> ~0.54 ms. Wrong if one MMA warpgroup
cannot keep the tensor pipe busy through the activation (its intra-warpgroup overlap of the next QK^T is all it
has) — then the 64-row kernel loses its tile savings to a lower rate, as the band timings will show.

The product code is not changed: inside `tile_m64()` the launcher's forward config and kernel classes are
swapped (tile_m is part of the compile key, so both variants stay cached side by side). Checks first (fp32
reference on edge lengths, causal silu, GQA gelu, alpha < 0; the band's rows within 3e-3, every other row
left NaN), then the production batches timed per plan in interleaved rounds.

    # anywhere with flash-attn-4 (CPU is fine): compile the 64-row kernels the run needs into DIR
    CUTE_DSL_ARCH=sm_90a python docs/experiments/hopper_m64_gpu.py --prebuild DIR
    # on the GPU machine (writes $OUT/hopper_m64_gpu.json and .log; prints a short table last)
    PYTHONPATH=. python docs/experiments/hopper_m64_gpu.py --kernels DIR
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import torch
from jagged_gpu import B, D, H, bench, make, rel

from workloads.pairing import build_lengths

SMS = 132
ROUNDS = 3
CHECKS = (  # name, activation, causal, self-attention, K/V heads, alpha, qk_scale
    ("self fast_gelu", "fast_gelu", False, True, 4, 1.0, 1.0),
    ("self causal silu", "silu", True, True, 4, 0.6, 0.8),
    ("cross gelu GQA", "gelu", False, False, 2, 0.7, 1.3),
    ("cross fast_gelu alpha<0", "fast_gelu", False, False, 4, -0.5, 1.0),
)
CHECK_LENGTHS = [0, 1, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257, 300, 511, 512, 700, 3, 70, 130, 450, 20]


@contextlib.contextmanager
def tile_m64():
    """The Hopper launcher with 64-row query tiles (one MMA warpgroup, 256 threads) while inside."""
    from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90

    from kernels.gdpa.hopper import fwd, launch
    from kernels.gdpa.hopper.persistent import PersistentForwardMixin

    class Forward64(fwd.GDPAForwardSm90):
        def __init__(self, dtype, head_dim, qhead_per_kvhead, *, activation, is_causal, cfg):
            FlashAttentionForwardSm90.__init__(
                self, dtype, head_dim, head_dim, qhead_per_kvhead, is_causal=is_causal, is_local=False,
                pack_gqa=cfg.pack_gqa, tile_m=64, tile_n=cfg.tile_n, num_stages=2, num_threads=256,
                Q_in_regs=False, intra_wg_overlap=True, mma_pv_is_rs=True,
            )  # fmt: skip
            self.activation = activation

    class Forward64Persistent(PersistentForwardMixin, Forward64):
        pass

    saved = launch.forward_config, launch.GDPAForwardSm90, launch.GDPAForwardSm90Persistent
    config = saved[0]
    launch.forward_config = lambda *a, **k: dataclasses.replace(config(*a, **k), tile_m=64)
    launch.GDPAForwardSm90, launch.GDPAForwardSm90Persistent = Forward64, Forward64Persistent
    try:
        yield
    finally:
        launch.forward_config, launch.GDPAForwardSm90, launch.GDPAForwardSm90Persistent = saved


def prebuild(directory: str) -> None:
    from kernels.gdpa.hopper import launch

    launch.use_kernel_dir(directory)
    with tile_m64():
        for _, act, causal, _, hkv, _, _ in CHECKS:
            for banded in (False, True):
                launch.forward_kernel(torch.bfloat16, D, H // hkv, act, causal, len(CHECK_LENGTHS), banded, SMS)
        for banded in (False, True):
            launch.forward_kernel(torch.bfloat16, D, 1, "fast_gelu", False, B, banded, SMS)
            print("tile_m 64 banded" if banded else "tile_m 64 whole batch", flush=True)


def _stage(call, lo, hi, kind, out):
    from kernels.gdpa import GDPAOptions, hopper, triton_backend
    from kernels.gdpa.bands import WHOLE, Band

    band = WHOLE if (lo, hi) == (0, None) else Band(lo, hi)
    if kind == "triton":
        return triton_backend.forward(call, band, GDPAOptions(), out=out)
    with tile_m64() if kind == "hopper64" else contextlib.nullcontext():
        return hopper.forward(call, band, out=out)


def run_plan(call, stages):
    from kernels.gdpa.launch import new_output

    out = new_output(call.q)
    for kind, lo, hi in stages:
        _stage(call, lo, hi, kind, out)
    return out


def check(log) -> bool:
    from kernels.gdpa.call import GDPACall
    from kernels.reference import reference_outputs
    from kernels.registry import CaseSpec

    ok = True
    rng = np.random.default_rng(0)
    for name, act, causal, self_att, hkv, alpha, qk in CHECKS:
        ql = np.array(CHECK_LENGTHS)
        kl = ql if self_att else np.array(rng.permutation(CHECK_LENGTHS))
        b, kv_off = make(ql, kl, self_att, heads_kv=hkv, dtype=torch.bfloat16)
        call = GDPACall(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, act, alpha, qk, causal)
        ref, _ = reference_outputs(b, CaseSpec(activation=act, alpha=alpha, qk_scale=qk, causal=causal))
        for lo, hi in ((0, None), (128, 512), (64, 1024)):
            out = torch.full_like(b.q, float("nan"))
            _stage(call, lo, hi, "hopper64", out)
            torch.cuda.synchronize()
            key = np.minimum(ql, kl)
            inside = (key >= lo) & (key < (hi if hi is not None else 1 << 30))
            mine = torch.as_tensor(np.repeat(inside, ql), device=out.device)  # per query row: its sequence's
            err = rel(out[mine], ref[mine]) if bool(mine.any()) else 0.0
            untouched = bool(torch.isnan(out[~mine]).all()) if bool((~mine).any()) else True
            good = err <= 3e-3 and untouched
            ok &= good
            log(f"check {name} band [{lo}, {hi}): rel err {err:.2e}, other rows untouched {untouched}: "
                + ("ok" if good else "FAILED"))  # fmt: skip
    return ok


PLANS = {  # label: stages (kind, lo, hi), in launch order
    "T|H1024 (shipped split)": [("triton", 0, 1024), ("hopper", 1024, None)],
    "T|H512": [("triton", 0, 512), ("hopper", 512, None)],
    "T128|M1024|H": [("triton", 0, 128), ("hopper64", 128, 1024), ("hopper", 1024, None)],
    "T128|M512|H": [("triton", 0, 128), ("hopper64", 128, 512), ("hopper", 512, None)],
    "T256|M1024|H": [("triton", 0, 256), ("hopper64", 256, 1024), ("hopper", 1024, None)],
    "T128|M": [("triton", 0, 128), ("hopper64", 128, None)],
    "M (64-row Hopper alone)": [("hopper64", 0, None)],
    "H (128-row Hopper alone)": [("hopper", 0, None)],
}
BANDS = ((128, 512), (512, 1024), (1024, None))


def time_batch(log, name, family, params, max_len) -> dict:
    from kernels.gdpa import gdpa
    from kernels.gdpa.call import GDPACall

    ql, kl = build_lengths(family, params, "self", {}, batch_size=B, max_len=max_len, seed=0)
    b, kv_off = make(ql, kl, True)
    call = GDPACall(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, "fast_gelu", 1.0, 1.0, False)
    flops = 4 * H * D * float((np.asarray(ql, dtype=np.float64) ** 2).sum())
    fns = {label: (lambda s=stages: run_plan(call, s)) for label, stages in PLANS.items()}
    fns["auto (gdpa as shipped)"] = lambda: gdpa(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv)
    for lo, hi in BANDS:
        for kind in ("triton", "hopper64", "hopper"):
            fns[f"band [{lo}, {hi}) {kind}"] = lambda lo=lo, hi=hi, kind=kind: run_plan(call, [(kind, lo, hi)])
    for fn in fns.values():
        fn()  # compiles and autotunes outside the timing
    torch.cuda.synchronize()
    times = {label: [] for label in fns}
    for _ in range(ROUNDS):
        for label, fn in fns.items():
            times[label].append(bench(fn))
    row = {"batch": name, "flops": flops, "ms": {k: statistics.median(v) for k, v in times.items()}, "rounds": times}
    for label, ms in row["ms"].items():
        rate = f"  {flops / ms * 1e-9:.0f} TFLOP/s" if "band" not in label else ""
        log(f"{name:<16} {label:<28} {ms:.4f} ms{rate}")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prebuild", metavar="DIR")
    ap.add_argument("--kernels", metavar="DIR")
    args = ap.parse_args()
    if args.prebuild:
        prebuild(args.prebuild)
        return 0
    from kernels.gdpa.hopper import launch

    if args.kernels:
        launch.use_kernel_dir(args.kernels)
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    results = {"checks_ok": None, "batches": []}
    try:
        results["checks_ok"] = check(log)
        if not results["checks_ok"]:
            log("a check failed: no timings")
        else:
            for name, family, params, max_len in (
                ("lognormal 2048", "lognormal", {"preset": "ml-20m"}, 2048),
                ("lognormal 4096", "lognormal", {"preset": "ml-20m"}, 4096),
                ("spike 4096", "spike", {"p": 0.02, "base": "lognormal", "preset": "ml-20m"}, 4096),
            ):
                results["batches"].append(time_batch(log, name, family, params, max_len))
    except Exception:
        log(traceback.format_exc())
    (out / "hopper_m64_gpu.json").write_text(json.dumps(results, indent=1))
    (out / "hopper_m64_gpu.log").write_text("\n".join(lines) + "\n")
    log("\n| plan | " + " | ".join(r["batch"] for r in results["batches"]) + " |")
    for label in PLANS | {"auto (gdpa as shipped)": None}:
        log(f"| {label} | " + " | ".join(f"{r['ms'][label]:.4f}" for r in results["batches"]) + " |")
    return 0 if results["checks_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
