"""Issue 30 on the H200: the persistent Hopper forward (kernels/gdpa/hopper/persistent.py) against FA4's grid.

Checks the persistent forward against the fp32 reference (whole batch and one band; outputs NaN-poisoned: rows
of the band written, every other row left as it was), then times on the production batches: FA4's one-tile-
per-CTA grid vs the persistent grid, over the whole batch, over the long band and over an empty band, and
the forward plans that the cheaper band makes worth having (Triton short band + persistent Hopper long band).

    # anywhere with flash-attn-4 (CPU is fine): compile the kernels the run needs into DIR
    CUTE_DSL_ARCH=sm_90a python docs/experiments/persistent_gpu.py --prebuild DIR
    # on the GPU machine (writes $OUT/persistent_gpu.json; prints a short table last)
    PYTHONPATH=. python docs/experiments/persistent_gpu.py --kernels DIR

Timing: triton.testing.do_bench median (L2 flushed), every variant of one batch in one process.
"""

from __future__ import annotations

import argparse
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

SMS = 132  # the H200's SM count: the persistent grid the prebuilt kernels are compiled for
PLANS = {
    "triton": {"backend": "triton"},
    "hopper": {"backend": "hopper"},
    "T|H512": {"fwd_plan": [["triton", 0, 512], ["hopper", 512, None]]},
    "T|H256": {"fwd_plan": [["triton", 0, 256], ["hopper", 256, None]]},
    "T|H1024": {"fwd_plan": [["triton", 0, 1024], ["hopper", 1024, None]]},
    "T|H128": {"fwd_plan": [["triton", 0, 128], ["hopper", 128, None]]},
    "auto": {},
}


def workloads():
    out = []
    for name, family, params, rule, rule_params, max_len in (
        ("lognormal 2048", "lognormal", {"preset": "ml-20m"}, "self", {}, 2048),
        ("lognormal 4096", "lognormal", {"preset": "ml-20m"}, "self", {}, 4096),
        ("spike 4096", "spike", {"p": 0.02, "base": "lognormal", "preset": "ml-20m"}, "self", {}, 4096),
        ("uniform 2048", "uniform_fill", {"fill": 1.0}, "self", {}, 2048),
        ("set1 L=256 fill=0.5", "uniform_fill", {"fill": 0.5}, "self", {}, 256),
        ("short_kv 4096", "lognormal", {"preset": "ml-20m"}, "fixed_kv", {"kv_len": 256}, 4096),
    ):
        q, k = build_lengths(family, params, rule, rule_params, batch_size=B, max_len=max_len, seed=0)
        out.append((name, q, k, rule == "self"))
    return out


def prebuild(directory: str) -> None:
    from kernels.gdpa.hopper import launch
    from kernels.gdpa.hopper.scheduler import tile_counts_kernel

    launch.use_kernel_dir(directory)
    for ctas in (0, SMS):
        for banded in (False, True):
            for act, causal, groups, batch in (
                ("fast_gelu", False, 1, 1152),
                ("fast_gelu", False, 1, 16),
                ("silu", True, 1, 16),
                ("gelu", False, 2, 16),
            ):
                launch.forward_kernel(torch.bfloat16, 128, groups, act, causal, batch, banded, ctas)
                print(ctas, banded, act, causal, groups, batch, flush=True)
    for banded in (False, True):
        tile_counts_kernel(128, 1, banded)


def check(log, results) -> bool:
    from kernels.gdpa.bands import Band
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.hopper import launch
    from kernels.reference import reference_outputs
    from kernels.registry import CaseSpec

    edge = [0, 1, 63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 300, 511, 512, 513, 700, 3]
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
        for band in (Band(), Band(200), Band(0, 100), Band(5000)):
            try:
                out = torch.full_like(b.q, float("nan"))
                launch.forward(call, band, out=out, persistent=True)
                torch.cuda.synchronize()
                inside = (rows_of >= band.lo) & (rows_of < band.hi_arg)
                err = rel(out[inside], ref[inside]) if bool(inside.any()) else 0.0
                untouched = bool(torch.isnan(out[~inside]).all())
                ok = err == err and err < 3e-3 and untouched
                rows.append({"case": name, "band": band.describe(), "err": err, "untouched": untouched, "ok": ok})
            except Exception:
                error = traceback.format_exc()[-900:]
                rows.append({"case": name, "band": band.describe(), "ok": False, "error": error})
            log(json.dumps(rows[-1]))
    results["check"] = rows
    return all(r["ok"] for r in rows)


def time_workload(log, results, name, ql, kl, self_att):
    from kernels.gdpa import GDPAOptions
    from kernels.gdpa.bands import Band
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.hopper import launch
    from kernels.gdpa.interface import run_pass

    b, kv_off = make(ql, kl, self_att)
    call = GDPACall(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, "fast_gelu", 1.0, 1.0, False)
    fl = 4 * H * D * float((np.asarray(ql, dtype=np.float64) * np.asarray(kl, dtype=np.float64)).sum())
    key = np.minimum(np.asarray(ql), np.asarray(kl))
    long_share = float((np.asarray(ql, dtype=np.float64) * np.asarray(kl))[key >= 512].sum()) * 4 * H * D / fl
    row = {"workload": name, "max_q": b.max_q, "max_kv": b.max_kv, "flops_fwd": fl, "long_share": long_share, "fwd": {}}

    def timed(label, fn, flops):
        try:
            fn()
            torch.cuda.synchronize()
            ms = bench(fn)
            row["fwd"][label] = {"ms": ms, "tflops": flops / ms * 1e-9}
        except Exception as exc:
            row["fwd"][label] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        log(f"  {name} {label}: {row['fwd'][label]}")

    out = torch.empty_like(b.q)
    single = launch.forward(call, out=torch.empty_like(b.q), persistent=False)
    persistent = launch.forward(call, out=torch.empty_like(b.q), persistent=True)
    row["persistent_vs_single_rel"] = rel(persistent, single)
    for persist in (False, True):
        tag = "persistent" if persist else "fa4 grid"
        timed(f"hopper {tag}", lambda p=persist: launch.forward(call, out=out, persistent=p), fl)
        timed(f"hopper {tag} [512,inf)", lambda p=persist: launch.forward(call, Band(512), out=out, persistent=p),
              fl * long_share)  # fmt: skip
        timed(f"hopper {tag} empty band", lambda p=persist: launch.forward(call, Band(1 << 20), out=out, persistent=p),
              1.0)  # fmt: skip
    for label, opts in PLANS.items():
        o = GDPAOptions(**opts)
        timed(label, lambda o=o: run_pass("fwd", call, o, None), fl)
    try:
        from flash_attn.cute import flash_attn_varlen_func as fa4

        timed("fa4", lambda: fa4(b.q, b.k, b.v, cu_seqlens_q=b.q_offsets, cu_seqlens_k=kv_off,
                                 max_seqlen_q=b.max_q, max_seqlen_k=b.max_kv), fl)  # fmt: skip
    except Exception as exc:
        row["fa4_error"] = f"{type(exc).__name__}: {exc}"
    results["timing"].append(row)


def table(results):
    print("\nforward TFLOP/s (ms), B=1152 H=4 D=128 bf16 fast_gelu, H200")
    for row in results["timing"]:
        fa4 = row["fwd"].get("fa4", {}).get("ms")
        print(f"== {row['workload']} (long band {row['long_share']:.2f} of work; persistent vs FA4-grid output "
              f"rel {row['persistent_vs_single_rel']:.1e})")  # fmt: skip
        for k, v in row["fwd"].items():
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
    t0 = time.time()
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    logf = open(out_dir / "persistent_gpu.log", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    from kernels.gdpa.hopper import launch

    if opts.kernels:
        launch.use_kernel_dir(opts.kernels)
    results = {"gpu": torch.cuda.get_device_name(), "sms": launch.sm_count(torch.device("cuda")), "timing": []}
    try:
        log(f"[check] all ok: {check(log, results)} at {time.time() - t0:.0f}s")
        for name, ql, kl, self_att in workloads():
            time_workload(log, results, name, ql, kl, self_att)
            log(f"[{name}] done at {time.time() - t0:.0f}s")
    finally:
        results["wall_s"] = round(time.time() - t0, 1)
        (out_dir / "persistent_gpu.json").write_text(json.dumps(results, indent=1, default=str))
        table(results)
        print(f"wall {results['wall_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
