"""Issue 30 on the H200: a wider key tile for the Hopper forward (tile_n 176 or 192 against FA4's 128).

FA4 picks 128x128 tiles for its sm90 forward at head dim 128 (interface._tile_size_fwd_sm90: its Python kernel
spills with more), where FA3's C++ kernel runs 128x176 on non-causal calls. The GDPA forward keeps no softmax
state (no row max, row sum or rescale of O), so it has the registers: cross-compiled for sm_90a (CUTE_DSL_ARCH,
docs/experiments/hopper_sass.py's counts), 176 and 192 hold 168 registers with no stack and no serialized
wgmma (224 and 256 spill 40-153 stores and wait on every wgmma). Shared memory at 2 K/V stages: 208 KB (176),
~225 KB (192) of the 227 KB. A wider tile halves nothing but the per-key-block costs (barriers, pipeline
waits, the S accumulator's issue slots per wgmma): the long sequences the forward runs at FA4's speed today
(uniform 1.00-1.02x, hstu_sl 1.02-1.04x, spike 1.07x in docs/example-h200-production) are where it can show.

The product code is not changed: `launch.forward_config` is wrapped for the run so the kernels differ in
tile_n alone (ForwardConfig is part of their compile key). Checks first (fp32 reference on edge lengths, causal
silu, GQA gelu, alpha < 0, the whole batch and one band with the outputs NaN-poisoned), then the production
batches' forward timed per tile width, in interleaved rounds so the power cap's clock drift falls on every
width alike.

    # anywhere with flash-attn-4 (CPU is fine): compile the kernels the run needs into DIR
    CUTE_DSL_ARCH=sm_90a python docs/experiments/fwd_tile_n_gpu.py --prebuild DIR
    # on the GPU machine (writes $OUT/fwd_tile_n_gpu.json; prints a short table last)
    PYTHONPATH=. python docs/experiments/fwd_tile_n_gpu.py --kernels DIR
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

TILES = (128, 176, 192)
SMS = 132  # the H200's persistent grid, as persistent_gpu.py
ROUNDS = 3


@contextlib.contextmanager
def tile_n(width: int):
    """launch.forward_config with `tile_n = width` while inside (every forward compiled or looked up then)."""
    from kernels.gdpa.hopper import launch

    original = launch.forward_config

    def wider(*args, **kwargs):
        return dataclasses.replace(original(*args, **kwargs), tile_n=width)

    launch.forward_config = wider
    try:
        yield
    finally:
        launch.forward_config = original


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


def prebuild(directory: str) -> None:
    from kernels.gdpa.hopper import launch

    launch.use_kernel_dir(directory)
    for width in TILES:
        with tile_n(width):
            for banded in (False, True):
                for act, causal, groups, batch in (
                    ("fast_gelu", False, 1, 1152),
                    ("fast_gelu", False, 1, 16),
                    ("silu", True, 1, 16),
                    ("gelu", False, 2, 16),
                ):
                    launch.forward_kernel(torch.bfloat16, 128, groups, act, causal, batch, banded, SMS)
                    print(width, banded, act, causal, groups, batch, flush=True)


def check(log, results) -> bool:
    from kernels.gdpa.bands import Band
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.hopper import launch
    from kernels.reference import reference_outputs
    from kernels.registry import CaseSpec

    edge = [0, 1, 63, 64, 65, 127, 128, 129, 175, 176, 177, 191, 192, 193, 255, 256, 511, 512, 700, 3]
    cases = [
        ("self fast_gelu", "fast_gelu", False, edge, edge, True, 4, 1.0, 1.0),
        ("self causal silu", "silu", True, edge, edge, True, 4, 0.6, 0.8),
        ("cross gelu GQA", "gelu", False, edge, edge[::-1], False, 2, 0.7, 1.3),
        ("cross fast_gelu alpha<0", "fast_gelu", False, edge, edge[::-1], False, 4, -0.5, 1.0),
    ]
    rows = []
    for name, act, causal, ql, kl, self_att, hkv, alpha, qk in cases:
        b, kv_off = make(ql, kl, self_att, heads_kv=hkv, seed=len(rows))
        spec = CaseSpec(mode="fwd", activation=act, alpha=alpha, qk_scale=qk, causal=causal)
        ref = reference_outputs(b, spec, grads=False)[0]
        call = GDPACall(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, act, alpha, qk, causal)
        key = torch.minimum(torch.tensor(ql), torch.tensor(kl))
        rows_of = torch.repeat_interleave(key, torch.tensor(ql)).to(b.q.device)
        for width in TILES:
            for band in (Band(), Band(150)):
                try:
                    out = torch.full_like(b.q, float("nan"))
                    with tile_n(width):
                        launch.forward(call, band, out=out, persistent=True)
                    torch.cuda.synchronize()
                    inside = (rows_of >= band.lo) & (rows_of < band.hi_arg)
                    err = rel(out[inside], ref[inside]) if bool(inside.any()) else 0.0
                    untouched = bool(torch.isnan(out[~inside]).all())
                    ok = err == err and err < 3e-3 and untouched
                    rows.append({"case": name, "tile_n": width, "band": band.describe(), "err": err, "ok": ok,
                                 "untouched": untouched})  # fmt: skip
                except Exception:
                    rows.append({"case": name, "tile_n": width, "band": band.describe(), "ok": False,
                                 "error": traceback.format_exc()[-900:]})  # fmt: skip
                log(json.dumps(rows[-1]))
    results["check"] = rows
    return all(r["ok"] for r in rows)


def time_workload(log, results, name, ql, kl, self_att):
    from kernels.gdpa.bands import Band
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.hopper import launch

    b, kv_off = make(ql, kl, self_att)
    call = GDPACall(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, "fast_gelu", 1.0, 1.0, False)
    pairs = np.asarray(ql, dtype=np.float64) * np.asarray(kl, dtype=np.float64)
    fl = 4 * H * D * float(pairs.sum())
    long_fl = 4 * H * D * float(pairs[np.minimum(np.asarray(ql), np.asarray(kl)) >= 1024].sum())
    out = torch.empty_like(b.q)
    outputs = {}
    for width in TILES:
        with tile_n(width):
            outputs[width] = launch.forward(call, out=torch.empty_like(b.q), persistent=True).clone()
    row = {"workload": name, "flops_fwd": fl, "long_flops": long_fl, "rel_to_128": {}, "ms": {}}
    for width in TILES:
        row["rel_to_128"][width] = rel(outputs[width], outputs[128])
    launches = {"whole": (Band(), fl), "[1024,inf)": (Band(1024), long_fl)}
    for label, (band, flops) in launches.items():
        if not flops:
            continue
        for width in TILES:
            row["ms"].setdefault(f"{label} {width}", [])
        for _ in range(ROUNDS):  # interleaved: each round times every width once
            for width in TILES:
                with tile_n(width):
                    ms = bench(lambda band=band: launch.forward(call, band, out=out, persistent=True))
                row["ms"][f"{label} {width}"].append(ms)
        for width in TILES:
            ms = float(np.median(row["ms"][f"{label} {width}"]))
            log(f"  {name} {label} tile_n {width}: {ms:.4f} ms, {flops / ms * 1e-9:.1f} TFLOP/s")
    try:
        from flash_attn.cute import flash_attn_varlen_func as fa4

        row["fa4_ms"] = bench(lambda: fa4(b.q, b.k, b.v, cu_seqlens_q=b.q_offsets, cu_seqlens_k=kv_off,
                                          max_seqlen_q=b.max_q, max_seqlen_k=b.max_kv))  # fmt: skip
    except Exception as exc:
        row["fa4_error"] = f"{type(exc).__name__}: {exc}"
    results["timing"].append(row)


def table(results):
    print("\nHopper forward (persistent) by tile_n, ms (median of rounds), B=1152 H=4 D=128 bf16 fast_gelu, H200")
    print(f"{'batch':<16} {'launch':<11} " + " ".join(f"{w:>8}" for w in TILES) + "   best/128   fa4")
    for row in results["timing"]:
        for label in ("whole", "[1024,inf)"):
            ms = [float(np.median(row["ms"][f"{label} {w}"])) for w in TILES if f"{label} {w}" in row["ms"]]
            if len(ms) != len(TILES):
                continue
            fa4 = f"{row['fa4_ms']:.3f}" if label == "whole" and "fa4_ms" in row else ""
            widths = " ".join(f"{m:8.3f}" for m in ms)
            print(f"{row['workload']:<16} {label:<11} {widths}   {ms[0] / min(ms):.3f}x   {fa4}")
    bad = [f"{r['case']}/{r['tile_n']}/{r['band']}" for r in results.get("check", []) if not r["ok"]]
    n = len(results.get("check", []))
    print(f"check: {n - len(bad)}/{n} ok" + (f"; FAILED {bad}" if bad else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prebuild", metavar="DIR")
    ap.add_argument("--kernels", metavar="DIR")
    opts = ap.parse_args()
    if opts.prebuild:
        prebuild(opts.prebuild)
        return 0
    t0 = time.time()
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    logf = open(out_dir / "fwd_tile_n_gpu.log", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    from kernels.gdpa.hopper import launch

    if opts.kernels:
        launch.use_kernel_dir(opts.kernels)
    results = {"gpu": torch.cuda.get_device_name(), "tiles": TILES, "rounds": ROUNDS, "timing": []}
    try:
        log(f"[check] all ok: {check(log, results)} at {time.time() - t0:.0f}s")
        for name, ql, kl, self_att in workloads():
            time_workload(log, results, name, ql, kl, self_att)
            log(f"[{name}] done at {time.time() - t0:.0f}s")
    finally:
        results["wall_s"] = round(time.time() - t0, 1)
        (out_dir / "fwd_tile_n_gpu.json").write_text(json.dumps(results, indent=1, default=str))
        table(results)
        print(f"wall {results['wall_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
