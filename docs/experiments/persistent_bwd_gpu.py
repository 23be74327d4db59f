"""Issue 30 on the H200: the persistent Hopper backward (kernels/gdpa/hopper/persistent_bwd.py) against FA4's grid.

Checks the persistent backward against FA4's one-key-tile-per-CTA grid of the same kernel (whole batch and
bands, outputs NaN-poisoned: the band's rows written, every other row left as it was; dK/dV bit for bit without
GQA, dQ to fp32 rounding) and against the fp32 reference, then times on the production batches: the grid vs
the persistent kernel over the whole batch, over [128, inf) and over an empty band, the backward plans that
use it (Hopper alone, packed or Triton below 128 + Hopper above), `auto`, and FA4's backward.

    # anywhere with flash-attn-4 (CPU is fine): compile the kernels the run needs into DIR
    CUTE_DSL_ARCH=sm_90a python docs/experiments/persistent_bwd_gpu.py --prebuild DIR
    # on the GPU machine (writes $OUT/persistent_bwd_gpu.json; prints a short table last)
    PYTHONPATH=. python docs/experiments/persistent_bwd_gpu.py --kernels DIR

Timing: triton.testing.do_bench median (L2 flushed), every variant of one batch in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import torch
from jagged_gpu import B, D, H, bench, make, rel

from workloads.pairing import build_lengths

SMS = 132  # the H200's SM count: the persistent grid the prebuilt kernels are compiled for
PLANS = {
    "hopper": {"backend": "hopper"},
    "packed|H128": {"bwd_plan": [["packed", 0, 128], ["hopper", 128, None]]},
    "T|H128": {"bwd_plan": [["triton", 0, 128], ["hopper", 128, None]]},
    "auto": {},
}
EDGE = [0, 1, 63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 300, 511, 512, 513, 700, 3]
CHECKS = (  # name, activation, causal, heads_kv, alpha, qk_scale
    ("fast_gelu", "fast_gelu", False, 4, 1.0, 1.0),
    ("causal silu", "silu", True, 4, 0.6, 0.8),
    ("gelu GQA", "gelu", False, 2, 0.7, 1.3),
    ("fast_gelu alpha<0", "fast_gelu", False, 4, -0.5, 1.0),
)


def workloads():
    out = []
    for name, family, params, max_len in (
        ("lognormal 2048", "lognormal", {"preset": "ml-20m"}, 2048),
        ("lognormal 4096", "lognormal", {"preset": "ml-20m"}, 4096),
        ("spike 4096", "spike", {"p": 0.02, "base": "lognormal", "preset": "ml-20m"}, 4096),
        ("uniform 2048", "uniform_fill", {"fill": 1.0}, 2048),
    ):
        q, _ = build_lengths(family, params, "self", {}, batch_size=B, max_len=max_len, seed=0)
        out.append((name, q))
    return out


def prebuild(directory: str) -> None:
    from kernels.gdpa.hopper import launch, prebuild

    launch.use_kernel_dir(directory)
    for banded in (False, True):
        for act, causal, groups, batch, max_len in (
            ("fast_gelu", False, 1, 1152, 4096),
            ("fast_gelu", False, 1, len(EDGE), 700),
            ("silu", True, 1, len(EDGE), 700),
            ("gelu", False, 2, len(EDGE), 700),
        ):
            keys = prebuild.prebuild(torch.bfloat16, 128, groups, act, causal, batch, max_len, max_len, banded, SMS)
            print(banded, act, causal, groups, batch, len(keys), flush=True)


def check(log, results) -> bool:
    from kernels.gdpa.bands import Band
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.hopper import launch
    from kernels.reference import reference_outputs
    from kernels.registry import CaseSpec

    rows = []
    for name, act, causal, hkv, alpha, qk in CHECKS:
        b, kv_off = make(EDGE, EDGE, True, heads_kv=hkv, seed=len(rows))
        spec = CaseSpec(mode="bwd", activation=act, alpha=alpha, qk_scale=qk, causal=causal)
        _, ref = reference_outputs(b.with_grad(), spec, grads=True)
        call = GDPACall(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, act, alpha, qk, causal)
        rows_of = torch.repeat_interleave(torch.tensor(EDGE), torch.tensor(EDGE)).to(b.q.device)
        for band in (Band(), Band(200), Band(0, 100), Band(5000)):
            try:
                got = {}
                for persistent in (False, True):
                    out = tuple(torch.full_like(t, float("nan")) for t in (b.q, b.k, b.v))
                    got[persistent] = launch.backward(call, b.dout, band, out=out, persistent=persistent)
                torch.cuda.synchronize()
                inside = (rows_of >= band.lo) & (rows_of < band.hi_arg)
                row = {"case": name, "band": band.describe(), "ok": True}
                for i, g in enumerate(("dq", "dk", "dv")):
                    pers, grid = got[True][i], got[False][i]
                    row[f"{g}_untouched"] = bool(torch.isnan(pers[~inside]).all())
                    if bool(inside.any()):
                        row[f"{g}_vs_ref"] = rel(pers[inside], ref[i][inside])
                        row[f"{g}_vs_grid"] = rel(pers[inside], grid[inside])
                        row[f"{g}_equal_grid"] = bool(torch.equal(pers[inside], grid[inside]))
                        row["ok"] &= row[f"{g}_vs_ref"] < 3e-3
                    row["ok"] &= row[f"{g}_untouched"]
                rows.append(row)
            except Exception:
                rows.append(
                    {"case": name, "band": band.describe(), "ok": False, "error": traceback.format_exc()[-900:]}
                )
            log(json.dumps(rows[-1]))
    results["check"] = rows
    return all(r["ok"] for r in rows)


def time_workload(log, results, name, lengths):
    from kernels.gdpa import GDPAOptions
    from kernels.gdpa.bands import Band
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.hopper import launch
    from kernels.gdpa.interface import run_pass

    b, kv_off = make(lengths, lengths, True)
    call = GDPACall(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, "fast_gelu", 1.0, 1.0, False)
    sq = np.asarray(lengths, dtype=np.float64) ** 2
    fl = 2.5 * 4 * H * D * float(sq.sum())
    long_share = float(sq[np.asarray(lengths) >= 128].sum() / sq.sum())
    row = {"workload": name, "max_len": b.max_q, "flops_bwd": fl, "share_ge_128": long_share, "bwd": {}}

    def timed(label, fn, flops):
        try:
            fn()
            torch.cuda.synchronize()
            ms = bench(fn)
            row["bwd"][label] = {"ms": ms, "tflops": flops / ms * 1e-9}
        except Exception as exc:
            row["bwd"][label] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        log(f"  {name} {label}: {row['bwd'][label]}")

    do = b.dout
    grads = tuple(torch.empty_like(t) for t in (b.q, b.k, b.v))
    for persist in (False, True):
        tag = "persistent" if persist else "fa4 grid"
        timed(f"hopper {tag}", lambda p=persist: launch.backward(call, do, out=grads, persistent=p), fl)
        timed(f"hopper {tag} [128,inf)", lambda p=persist: launch.backward(call, do, Band(128), out=grads,
              persistent=p), fl * long_share)  # fmt: skip
        timed(f"hopper {tag} empty band", lambda p=persist: launch.backward(call, do, Band(1 << 20), out=grads,
              persistent=p), 1.0)  # fmt: skip
    for label, opts in PLANS.items():
        o = GDPAOptions(**opts)
        timed(label, lambda o=o: run_pass("bwd", call, o, None, do=do), fl)
    try:
        from flash_attn.cute import flash_attn_varlen_func as fa4

        qg, kg, vg = (t.detach().requires_grad_() for t in (b.q, b.k, b.v))
        res = fa4(qg, kg, vg, cu_seqlens_q=b.q_offsets, cu_seqlens_k=kv_off, max_seqlen_q=b.max_q,
                  max_seqlen_k=b.max_kv)  # fmt: skip
        o = res[0] if isinstance(res, tuple) else res
        timed("fa4", lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True), fl)
    except Exception as exc:
        row["fa4_error"] = f"{type(exc).__name__}: {exc}"
    results["timing"].append(row)


def table(results):
    print("\nbackward TFLOP/s (ms), B=1152 H=4 D=128 bf16 fast_gelu, H200")
    for row in results["timing"]:
        fa4 = row["bwd"].get("fa4", {}).get("ms")
        print(f"== {row['workload']} ([128, inf) {row['share_ge_128']:.2f} of the work)")
        for k, v in row["bwd"].items():
            extra = f"  x{fa4 / v['ms']:.2f} fa4" if fa4 and "ms" in v and "band" not in k else ""
            print(f"  {k:<34} " + (f"{v['tflops']:7.1f} ({v['ms']:.3f} ms){extra}" if "ms" in v else v["error"][:90]))
    bad = [f"{r['case']}/{r['band']}" for r in results.get("check", []) if not r["ok"]]
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
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    logf = open(out_dir / "persistent_bwd_gpu.log", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    from kernels.gdpa.hopper import launch

    if opts.kernels:
        launch.use_kernel_dir(opts.kernels)
    results = {"device": torch.cuda.get_device_name(), "timing": []}
    ok = check(log, results)
    for name, lengths in workloads():
        time_workload(log, results, name, lengths)
        (out_dir / "persistent_bwd_gpu.json").write_text(json.dumps(results, indent=1))
    table(results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
