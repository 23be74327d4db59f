"""Issue 30 on the H200: two tile choices of the Hopper kernels that FA4's defaults settle and GDPA may not.

**Forward: a wider key tile** (tile_n 176 or 192 against FA4's 128). FA4 picks 128x128 for its sm90 forward at
head dim 128 (interface._tile_size_fwd_sm90: its Python kernel spills with more), where FA3's C++ kernel runs
128x176 on non-causal calls and FA4's own sm90_config_search ranks 128x192 and 128x176 first (least shared
memory traffic per block). The GDPA forward keeps no softmax state (no row max, row sum or rescale of O), so
it has the registers: cross-compiled for sm_90a (docs/experiments/hopper_sass.py's counts) 176 and 192 hold
168 registers with no stack and no serialized wgmma, where 224 and 256 spill 40-153 stores and wait on every
wgmma (and a 3-warpgroup 192x128 spills 101). Shared memory at 2 K/V stages: 208 KB (176), ~225 KB (192).
Where it can show: the long sequences, which the forward runs at FA4's speed today (uniform 1.00-1.02x,
hstu_sl 1.02-1.04x, spike 1.07x in docs/example-h200-production).

**Backward: the fused pointwise on 64x128 tiles.** The shipped plan is split64 (P and G under the dP GEMM, G
packed to fp16, dS after the wait: 16 B of stack, 3 spilled stores / 7 loads); fused80 runs long queries against
short keys. Fused on 64x128 tiles was never timed (NOTES.md run 2 had fused80, split80, split64); it compiles
to 8 B of stack (2 / 6) and 96 F2FP against 112. The deferred schedule's measurement (PERF.md) said where the
pointwise sits matters less than what it costs: fused64 is the same work with less packing.

The product code is not changed: `launch.forward_config` / `launch.backward_plan` are wrapped for the run, so the
kernels differ in the tile or plan alone (both are part of the compile keys). Checks first (fp32 reference on
edge lengths — causal silu, GQA gelu, alpha < 0 — the whole batch and one band, outputs NaN-poisoned: a band's
rows written, every other row left as it was), then the production batches timed per variant in interleaved
rounds, so the power cap's clock drift falls on every variant alike.

    # anywhere with flash-attn-4 (CPU is fine): compile the kernels the run needs into DIR
    CUTE_DSL_ARCH=sm_90a python docs/experiments/hopper_variants_gpu.py --prebuild DIR
    # on the GPU machine (writes $OUT/hopper_variants_gpu.json and .log; prints a short table last)
    PYTHONPATH=. python docs/experiments/hopper_variants_gpu.py --kernels DIR [--only fwd|bwd]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import torch
from jagged_gpu import B, D, H, bench, make, rel

from workloads.pairing import build_lengths

SMS = 132  # the H200's persistent grid, as persistent_gpu.py
ROUNDS = 3
FWD = (128, 176, 192)  # tile_n; 128 is what ships
BWD = ("split64", "fused64", "fused80")  # split64 is what ships (for D 128 unless max_q >= 2 max_kv)


@contextlib.contextmanager
def variant(mode: str, name):
    """The Hopper launcher with one forward tile width or one backward plan while inside."""
    from flash_attn.cute.interface import _tile_size_bwd_sm90

    from kernels.gdpa.hopper import launch

    attr = "forward_config" if mode == "fwd" else "backward_plan"
    original = getattr(launch, attr)
    if mode == "fwd":

        def chosen(*args, **kwargs):
            return dataclasses.replace(original(*args, **kwargs), tile_n=name)

    else:
        causal_tiles = name.endswith("64")  # FA4's causal 64x128, else its non-causal 80x128

        def chosen(head_dim, causal, max_q, max_kv):
            cfg = _tile_size_bwd_sm90(head_dim, head_dim, causal or causal_tiles, False)
            return launch.BackwardPlan(cfg, name.startswith("split"))

    setattr(launch, attr, chosen)
    try:
        yield
    finally:
        setattr(launch, attr, original)


def names(mode):
    return FWD if mode == "fwd" else BWD


def workloads():
    out = []
    for name, family, params, rule, rule_params, max_len in (
        ("uniform 2048", "uniform_fill", {"fill": 1.0}, "self", {}, 2048),
        ("hstu_sl 4096", "hstu_sl", {"fill": 0.5, "alpha": 1.7}, "self", {}, 4096),
        ("spike 4096", "spike", {"p": 0.02, "base": "lognormal", "preset": "ml-20m"}, "self", {}, 4096),
        ("lognormal 4096", "lognormal", {"preset": "ml-20m"}, "self", {}, 4096),
        ("lognormal 2048", "lognormal", {"preset": "ml-20m"}, "self", {}, 2048),
        ("short_kv 4096", "lognormal", {"preset": "ml-20m"}, "fixed_kv", {"kv_len": 256}, 4096),
    ):
        q, k = build_lengths(family, params, rule, rule_params, batch_size=B, max_len=max_len, seed=0)
        out.append((name, q, k, rule == "self"))
    return out


CHECKS = (  # name, activation, causal, self-attention, K/V heads, alpha, qk_scale
    ("self fast_gelu", "fast_gelu", False, True, 4, 1.0, 1.0),
    ("self causal silu", "silu", True, True, 4, 0.6, 0.8),
    ("cross gelu GQA", "gelu", False, False, 2, 0.7, 1.3),
    ("cross fast_gelu alpha<0", "fast_gelu", False, False, 4, -0.5, 1.0),
)


def prebuild(directory: str) -> None:
    """The kernels of the variants only (what the run launches: the persistent forward, FA4's backward grid,
    its postprocess and tile counts), into their own directory: the shipped ones are in the session's .hk."""
    from kernels.gdpa.hopper import launch
    from kernels.gdpa.hopper.scheduler import tile_counts_kernel

    launch.use_kernel_dir(directory)
    calls = [(act, causal, 4 // hkv, 21, 700, 700) for _, act, causal, _, hkv, _, _ in CHECKS]
    calls += [("fast_gelu", False, 1, B, max_q, max_kv) for max_q, max_kv in ((4096, 4096), (4096, 256))]
    dtype = torch.bfloat16
    for mode in ("fwd", "bwd"):
        for name in names(mode)[1:]:  # the shipped variant comes first
            with variant(mode, name):
                for banded in (False, True):
                    for act, causal, groups, batch, max_q, max_kv in calls:
                        if mode == "fwd":
                            launch.forward_kernel(dtype, 128, groups, act, causal, batch, banded, SMS)
                            continue
                        _, plan, _ = launch.backward_kernel(
                            dtype, 128, groups, act, causal, batch, max_q, max_kv, banded
                        )
                        cfg, hint = plan.cfg, batch > launch.SCHEDULER_HINT_MIN_BATCH
                        posts = [(cfg.m_block_size, cfg.num_wg * 128, cfg.AtomLayoutMdQ, cfg.dQ_swapAB)]
                        if groups > 1:
                            posts.append((cfg.n_block_size, cfg.num_wg * 128, cfg.AtomLayoutNdKV, cfg.dKV_swapAB))
                        for tile, threads, atom, swap in posts:
                            mult = launch.hdim_multiple(cfg)
                            launch.postprocess_kernel(
                                launch.TORCH_TO_CUTE[dtype], 128, tile, threads, atom, swap, mult, hint, banded
                            )
                        if hint:
                            tile_counts_kernel(cfg.m_block_size, 1, banded)
            print(mode, name, flush=True)


def check(log, results) -> bool:
    from kernels.gdpa.bands import Band
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.hopper import launch
    from kernels.reference import reference_outputs
    from kernels.registry import CaseSpec

    edge = [0, 1, 63, 64, 65, 79, 80, 81, 127, 128, 129, 175, 176, 177, 192, 193, 255, 256, 511, 700, 3]
    rows = []
    for name, act, causal, self_att, hkv, alpha, qk in CHECKS:
        ql, kl = edge, edge if self_att else edge[::-1]
        b, kv_off = make(ql, kl, self_att, heads_kv=hkv, seed=len(rows))
        spec = CaseSpec(mode="fwd_bwd", activation=act, alpha=alpha, qk_scale=qk, causal=causal)
        ref_out, ref_grads = reference_outputs(b, spec, grads=True)
        call = GDPACall(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, act, alpha, qk, causal)
        key = torch.minimum(torch.tensor(ql), torch.tensor(kl))
        q_rows = torch.repeat_interleave(key, torch.tensor(ql)).to(b.q.device)
        k_rows = torch.repeat_interleave(key, torch.tensor(kl)).to(b.q.device)
        for mode in ("fwd", "bwd"):
            for vname in names(mode):
                for band in (Band(), Band(150)):
                    row = {"case": name, "mode": mode, "variant": vname, "band": band.describe()}
                    try:
                        with variant(mode, vname):
                            if mode == "fwd":
                                got = [
                                    launch.forward(call, band, out=torch.full_like(b.q, float("nan")), persistent=True)
                                ]
                                want, rows_of = [ref_out], [q_rows]
                            else:
                                out = tuple(torch.full_like(t, float("nan")) for t in (b.q, b.k, b.v))
                                got = list(launch.backward(call, b.dout, band, out=out))
                                want, rows_of = list(ref_grads), [q_rows, k_rows, k_rows]
                        torch.cuda.synchronize()
                        errs, untouched = [], True
                        for g, w, r in zip(got, want, rows_of, strict=True):
                            inside = (r >= band.lo) & (r < band.hi_arg)
                            errs.append(rel(g[inside], w[inside]) if bool(inside.any()) else 0.0)
                            untouched &= bool(torch.isnan(g[~inside]).all())
                        row.update(
                            err=max(errs), untouched=untouched, ok=all(e == e and e < 3e-3 for e in errs) and untouched
                        )
                    except Exception:
                        row.update(ok=False, error=traceback.format_exc()[-900:])
                    rows.append(row)
                    log(json.dumps(row))
    results["check"] = rows
    return all(r["ok"] for r in rows)


def time_workload(log, results, modes, name, ql, kl, self_att):
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.hopper import launch

    b, kv_off = make(ql, kl, self_att)
    call = GDPACall(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, "fast_gelu", 1.0, 1.0, False)
    fl = 4 * H * D * float((np.asarray(ql, dtype=np.float64) * np.asarray(kl, dtype=np.float64)).sum())
    do = torch.randn_like(b.q)
    outs = (torch.empty_like(b.q), torch.empty_like(b.k), torch.empty_like(b.v))
    launches = {
        "fwd": (lambda: launch.forward(call, out=outs[0], persistent=True), fl),
        "bwd": (lambda: launch.backward(call, do, out=outs), 2.5 * fl),
    }
    row = {"workload": name, "flops_fwd": fl, "ms": {}}
    for mode in modes:
        fn, flops = launches[mode]
        for vname in names(mode):
            with variant(mode, vname):
                fn()  # compile or load before the rounds
        for _ in range(ROUNDS):  # interleaved: each round times every variant once
            for vname in names(mode):
                with variant(mode, vname):
                    row["ms"].setdefault(f"{mode} {vname}", []).append(bench(fn))
        for vname in names(mode):
            ms = float(np.median(row["ms"][f"{mode} {vname}"]))
            log(f"  {name} {mode} {vname}: {ms:.4f} ms, {flops / ms * 1e-9:.1f} TFLOP/s")
    results["timing"].append(row)


def table(results):
    print("\nHopper kernels by variant, ms (median of interleaved rounds), B=1152 H=4 D=128 bf16 fast_gelu, H200")
    for mode in ("fwd", "bwd"):
        print(f"{mode:<16} " + " ".join(f"{v!s:>9}" for v in names(mode)) + "   shipped/best")
        for row in results["timing"]:
            ms = [float(np.median(row["ms"][f"{mode} {v}"])) for v in names(mode) if f"{mode} {v}" in row["ms"]]
            if len(ms) == len(names(mode)):
                cols = " ".join(f"{m:9.3f}" for m in ms)
                print(f"{row['workload']:<16} {cols}   {ms[0] / min(ms):.3f}x")
    bad = [f"{r['case']}/{r['mode']}/{r['variant']}/{r['band']}" for r in results.get("check", []) if not r["ok"]]
    n = len(results.get("check", []))
    print(f"check: {n - len(bad)}/{n} ok" + (f"; FAILED {bad}" if bad else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prebuild", metavar="DIR")
    ap.add_argument("--kernels", metavar="DIR")
    ap.add_argument("--only", choices=("fwd", "bwd"), help="time one pass (the checks run both)")
    opts = ap.parse_args()
    if opts.prebuild:
        prebuild(opts.prebuild)
        return 0
    t0 = time.time()
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    logf = open(out_dir / "hopper_variants_gpu.log", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    from kernels.gdpa.hopper import launch

    if opts.kernels:
        launch.use_kernel_dir(opts.kernels)
    modes = (opts.only,) if opts.only else ("fwd", "bwd")
    results = {"gpu": torch.cuda.get_device_name(), "fwd": FWD, "bwd": BWD, "rounds": ROUNDS, "timing": []}
    try:
        log(f"[check] all ok: {check(log, results)} at {time.time() - t0:.0f}s")
        for name, ql, kl, self_att in workloads():
            time_workload(log, results, modes, name, ql, kl, self_att)
            log(f"[{name}] done at {time.time() - t0:.0f}s")
    finally:
        results["wall_s"] = round(time.time() - t0, 1)
        (out_dir / "hopper_variants_gpu.json").write_text(json.dumps(results, indent=1, default=str))
        table(results)
        print(f"wall {results['wall_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
