"""Issue 22 on the H200 in one call: length-band plans for the GDPA op on production batches.

Checks the banded launches (kernels/gdpa/bands.py, plan.py: Triton and Hopper over one length band each,
writing one output) against the fp32 reference, then times, on the configs' production batches:
each length band alone inside the whole batch (a filtered launch), per backend and per Triton tile config;
whole-batch plans (one backend; several bands on their best backends; two streams); FA4 for reference.

    # anywhere with flash-attn-4 (CPU is fine): compile the Hopper kernels the run needs into DIR
    CUTE_DSL_ARCH=sm_90a python docs/experiments/jagged_gpu.py --prebuild DIR
    # on the GPU machine (writes $OUT/jagged_gpu.json and a log; prints a short table last)
    PYTHONPATH=. python docs/experiments/jagged_gpu.py --kernels DIR [--quick]

FLOPs as bench/record.py counts them: fwd 4*H*D*sum(Lq*Lk), bwd 2.5x. Timing: triton.testing.do_bench
median (L2 flushed between calls), every variant of one batch in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from workloads.pairing import build_lengths  # noqa: E402

B, H, D = 1152, 4, 128
BANDS = ((0, 128), (128, 512), (512, 1024), (1024, None))
FWD_TILES = [
    (128, 64, 8, 3),
    (128, 32, 8, 3, 128),
    (128, 64, 8, 2, 128),
    (64, 32, 4, 3, 168),
    (64, 64, 4, 3),
    (64, 64, 4, 2, 128),
    (32, 32, 4, 2),
]
DKDV_TILES = [(64, 128, 8, 3), (64, 64, 4, 3), (32, 64, 4, 2), (64, 64, 4, 2, 128)]
DQ_TILES = [(128, 64, 8, 3), (128, 64, 8, 2), (64, 32, 4, 3, 168), (64, 64, 4, 2)]
PLANS = {
    "T": {"backend": "triton"},
    "H": {"backend": "hopper"},
    "auto": {},
    "T|T128": {"fwd_plan": [["triton", 0, 128], ["triton", 128, None]]},
    "T|H512": {"fwd_plan": [["triton", 0, 512], ["hopper", 512, None]]},
    "T|T128|H512": {"fwd_plan": [["triton", 0, 128], ["triton", 128, 512], ["hopper", 512, None]]},
    "T|T128|H1024": {"fwd_plan": [["triton", 0, 128], ["triton", 128, 1024], ["hopper", 1024, None]]},
    "T|H1024": {"fwd_plan": [["triton", 0, 1024], ["hopper", 1024, None]]},
}
BWD_PLANS = {
    "T": {"backend": "triton"},
    "H": {"backend": "hopper"},
    "auto": {},
    "T|H128": {"bwd_plan": [["triton", 0, 128], ["hopper", 128, None]]},
    "T|H256": {"bwd_plan": [["triton", 0, 256], ["hopper", 256, None]]},
    "T|H512": {"bwd_plan": [["triton", 0, 512], ["hopper", 512, None]]},
}


def workloads(quick: bool):
    """(name, q_lengths, kv_lengths, self_attention) as configs/production.yaml and h200.yaml build them."""
    shapes = []
    for max_len in (2048, 4096):
        q, k = build_lengths("lognormal", {"preset": "ml-20m"}, "self", {}, batch_size=B, max_len=max_len, seed=0)
        shapes.append((f"lognormal {max_len}", q, k, True))
    if quick:
        return shapes
    q, k = build_lengths("uniform_fill", {"fill": 1.0}, "self", {}, batch_size=B, max_len=2048, seed=0)
    shapes.append(("uniform 2048", q, k, True))
    q, k = build_lengths("uniform_fill", {"fill": 0.5}, "fixed_kv", {"kv_len": 256}, batch_size=B, max_len=256)
    shapes.append(("set1 L=256 fill=0.5", q, k, False))
    return shapes


def prebuild(directory: str) -> None:
    from kernels.gdpa.hopper import launch, prebuild

    launch.use_kernel_dir(directory)
    for banded in (False, True):
        for act, causal, groups, max_q, max_kv in (
            ("fast_gelu", False, 1, 2048, 2048),
            ("fast_gelu", False, 1, 4096, 256),  # fused backward plan (queries >= 2x keys)
            ("silu", True, 1, 700, 700),
            ("gelu", False, 2, 700, 700),
        ):
            for batch in (1152, 16):
                keys = prebuild.prebuild(torch.bfloat16, 128, groups, act, causal, batch, max_q, max_kv, banded)
                print(banded, act, causal, groups, batch, len(keys), flush=True)


def make(q_len, k_len, self_attention, dtype=torch.bfloat16, heads=H, heads_kv=H, seed=0):
    from workloads.batch import make_batch

    b = make_batch(q_len, k_len, H=heads, Hkv=heads_kv, D=D, dtype=dtype, device="cuda", seed=seed)
    kv_off = b.q_offsets if self_attention else b.kv_offsets  # self-attention shares one offsets tensor
    return b, kv_off


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def check(log, results):
    """Banded plans against the fp32 reference, outputs NaN-poisoned (every row must be written once)."""
    from kernels.gdpa import GDPAOptions, gdpa
    from kernels.gdpa.hopper import launch as hopper_launch
    from kernels.gdpa.launch import poisoned_outputs
    from kernels.reference import reference_outputs
    from kernels.registry import CaseSpec

    edge = [0, 1, 63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 300, 511, 512, 513, 700, 3]
    rows = []
    poison = lambda t: torch.full_like(t, float("nan"))
    hopper_launch._empty_like = poison
    plans = {
        "fwd T|T|H": {"fwd_plan": [["triton", 0, 64], ["triton", 64, 200], ["hopper", 200, None]]},
        "fwd H|T|H": {"fwd_plan": [["hopper", 0, 100], ["triton", 100, 256], ["hopper", 256, None]]},
        "bwd T|H": {"bwd_plan": [["triton", 0, 128], ["hopper", 128, None]]},
        "bwd H|T": {"bwd_plan": [["hopper", 0, 256], ["triton", 256, None]]},
        "auto": {},
    }
    cases = [
        ("self fast_gelu", "fast_gelu", False, edge, edge, True, 4, 1.0, 1.0),
        ("self causal silu", "silu", True, edge, edge, True, 4, 0.6, 0.8),
        ("cross gelu GQA", "gelu", False, edge, edge[::-1], False, 2, 0.7, 1.3),
        ("cross fast_gelu alpha<0", "fast_gelu", False, edge, edge[::-1], False, 4, -0.5, 1.0),
    ]
    for name, act, causal, ql, kl, self_att, hkv, alpha, qk in cases:
        b, kv_off = make(ql, kl, self_att, heads_kv=hkv, seed=len(rows))
        b = b.with_grad()
        spec = CaseSpec(mode="bwd", activation=act, alpha=alpha, qk_scale=qk, causal=causal)
        ref, ref_grads = reference_outputs(b, spec, grads=True)
        for plan_name, opts in plans.items():
            try:
                record = {}
                with poisoned_outputs():
                    out = gdpa(
                        b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv,
                        activation=act, alpha=alpha, qk_scale=qk, causal=causal,
                        options=GDPAOptions(**opts), record=record,
                    )  # fmt: skip
                    grads = torch.autograd.grad(out, (b.q, b.k, b.v), b.dout)
                errs = [rel(out, ref)] + [rel(g, r) for g, r in zip(grads, ref_grads, strict=True)]
                ok = all(e == e and e < 3e-3 for e in errs)
                rows.append({"case": name, "plan": plan_name, "errs": errs, "ok": ok, "dispatch": record["dispatch"]})
            except Exception:
                rows.append({"case": name, "plan": plan_name, "ok": False, "error": traceback.format_exc()[-800:]})
            log(json.dumps({k: v for k, v in rows[-1].items() if k != "dispatch"}))
    hopper_launch._empty_like = torch.empty_like
    results["check"] = rows
    return all(r["ok"] for r in rows)


def bench(fn, rep=120):
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=20, rep=rep, return_mode="median"))


def time_workload(log, results, name, ql, kl, self_att, full: bool):
    from kernels.gdpa import GDPAOptions, backends
    from kernels.gdpa.bands import Band
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.interface import run_pass

    b, kv_off = make(ql, kl, self_att)
    call = GDPACall(b.q, b.k, b.v, b.q_offsets, kv_off, b.max_q, b.max_kv, "fast_gelu", 1.0, 1.0, False)
    do = b.dout
    work = float((np.asarray(ql, dtype=np.float64) * np.asarray(kl, dtype=np.float64)).sum())
    fl = 4 * H * D * work
    row = {"workload": name, "max_q": b.max_q, "max_kv": b.max_kv, "flops_fwd": fl, "fwd": {}, "bwd": {}, "bands": []}
    tf = lambda ms, mult=1.0: fl * mult / ms * 1e-9

    def timed(section, label, fn, mult):
        try:
            fn()
            torch.cuda.synchronize()
            ms = bench(fn)
            section[label] = {"ms": ms, "tflops": tf(ms, mult)}
        except Exception as exc:
            section[label] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        log(f"  {name} {label}: {section[label]}")

    for label, opts in PLANS.items():
        o = GDPAOptions(**opts)
        timed(row["fwd"], label, lambda o=o: run_pass("fwd", call, o, None), 1.0)
    for label, opts in BWD_PLANS.items():
        o = GDPAOptions(**opts)
        timed(row["bwd"], label, lambda o=o: run_pass("bwd", call, o, None, do=do), 2.5)
    try:
        from flash_attn.cute import flash_attn_varlen_func as fa4

        qv = b.q.detach()
        timed(
            row["fwd"], "fa4",
            lambda: fa4(qv, b.k, b.v, cu_seqlens_q=b.q_offsets, cu_seqlens_k=kv_off, max_seqlen_q=b.max_q,
                        max_seqlen_k=b.max_kv),
            1.0,
        )  # fmt: skip
        qg, kg, vg = (t.detach().clone().requires_grad_(True) for t in (b.q, b.k, b.v))
        res = fa4(
            qg, kg, vg, cu_seqlens_q=b.q_offsets, cu_seqlens_k=kv_off, max_seqlen_q=b.max_q, max_seqlen_k=b.max_kv
        )
        o = res[0] if isinstance(res, tuple) else res
        timed(row["bwd"], "fa4", lambda: torch.autograd.grad(o, (qg, kg, vg), do, retain_graph=True), 2.5)
    except Exception as exc:
        row["fa4_error"] = f"{type(exc).__name__}: {exc}"
    # two streams: the short band on a side stream beside the long one (same outputs, disjoint rows)
    try:
        side = torch.cuda.Stream()
        tri, hop = backends.module("triton"), backends.module("hopper")
        opts = GDPAOptions()

        def two_streams(split=512, hopper_first=True):
            main = torch.cuda.current_stream()
            out = torch.empty_like(b.q)
            side.wait_stream(main)
            if hopper_first:
                hop.forward(call, Band(split), opts, out=out)
                with torch.cuda.stream(side):
                    tri.forward(call, Band(0, split), opts, out=out)
            else:
                with torch.cuda.stream(side):
                    tri.forward(call, Band(0, split), opts, out=out)
                hop.forward(call, Band(split), opts, out=out)
            main.wait_stream(side)
            return out

        for split in (512, 1024):
            for first in (True, False):
                timed(
                    row["fwd"], f"2streams T|H{split} {'H' if first else 'T'} first",
                    lambda s=split, f=first: two_streams(s, f), 1.0,
                )  # fmt: skip
    except Exception as exc:
        row["two_streams_error"] = f"{type(exc).__name__}: {exc}"
    if full:
        lens = np.minimum(np.asarray(ql), np.asarray(kl))
        pair_work = np.asarray(ql, dtype=np.float64) * np.asarray(kl, dtype=np.float64)
        for lo, hi in BANDS:
            inside = (lens >= lo) & (lens < (hi or 1 << 40))
            entry = {"seqs": int(inside.sum()), "work_share": float(pair_work[inside].sum()) / work}
            row["bands"].append(time_band(log, name, call, do, Band(lo, hi), fl * entry["work_share"], entry))
        out = torch.empty_like(b.q)
        hop = backends.module("hopper")
        timed(row["fwd"], "hopper empty band", lambda: hop.forward(call, Band(1 << 20), GDPAOptions(), out=out), 1.0)
    results["timing"].append(row)


def time_band(log, name, call, do, band, band_flops, entry):
    """One band of the batch, launched alone (filtered) per backend and per Triton tile config."""
    from kernels.gdpa import GDPAOptions, backends

    tri, hop = backends.module("triton"), backends.module("hopper")
    entry.update(band=band.describe(), fwd={}, bwd={})

    def timed(section, label, fn, mult):
        try:
            fn()
            torch.cuda.synchronize()
            ms = bench(fn, rep=80)
            entry[section][label] = {"ms": ms, "tflops": band_flops * mult / ms * 1e-9}
        except Exception as exc:
            entry[section][label] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        log(f"  {name} band {entry['band']} {label}: {entry[section][label]}")

    out = torch.empty_like(call.q)
    grads = tuple(torch.empty_like(t) for t in (call.q, call.k, call.v))
    fwd_variants = {"hopper": (hop, GDPAOptions()), "triton auto": (tri, GDPAOptions())}
    fwd_variants.update({f"triton {t}": (tri, GDPAOptions(fwd_tiles=t)) for t in FWD_TILES})
    for label, (backend, o) in fwd_variants.items():
        timed("fwd", label, lambda backend=backend, o=o: backend.forward(call, band, o, out=out), 1.0)
    bwd_variants = {"hopper": (hop, GDPAOptions()), "triton auto": (tri, GDPAOptions())}
    bwd_variants.update(
        {f"triton dkdv {t}": (tri, GDPAOptions(dkdv_tiles=t, dq_tiles=(128, 64, 8, 3))) for t in DKDV_TILES}
    )
    bwd_variants.update(
        {f"triton dq {t}": (tri, GDPAOptions(dkdv_tiles=(64, 128, 8, 3), dq_tiles=t)) for t in DQ_TILES}
    )
    for label, (backend, o) in bwd_variants.items():
        timed("bwd", label, lambda backend=backend, o=o: backend.backward(call, do, band, o, out=grads), 2.5)
    return entry


def table(results):
    print("\nTFLOP/s, B=1152 H=4 D=128 bf16 fast_gelu, H200 (fwd 4*H*D*sum LqLk, bwd 2.5x); ms in brackets")
    for row in results["timing"]:
        print(f"== {row['workload']} (max {row['max_q']}/{row['max_kv']})")
        for section in ("fwd", "bwd"):
            cells = [
                f"{k} {v['tflops']:.0f} ({v['ms']:.3f})" if "ms" in v else f"{k} ERR" for k, v in row[section].items()
            ]
            print(f"  {section}: " + " | ".join(cells))
        for e in row["bands"]:
            for section in ("fwd", "bwd"):
                best = sorted(((v["ms"], k) for k, v in e[section].items() if "ms" in v))[:3]
                print(
                    f"  band {e['band']:<12} {e['seqs']:>5} seqs {e['work_share']:.3f} work {section}: "
                    + " | ".join(f"{k} {ms:.3f}" for ms, k in best)
                )
    bad = [f"{r['case']}/{r['plan']}" for r in results.get("check", []) if not r["ok"]]
    print(
        f"check: {len(results.get('check', [])) - len(bad)}/{len(results.get('check', []))} ok"
        + (f"; FAILED {bad}" if bad else "")
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prebuild", metavar="DIR")
    ap.add_argument("--kernels", metavar="DIR")
    ap.add_argument("--quick", action="store_true", help="log-normal batches only")
    ap.add_argument("--bands", default="lognormal 2048", help="workloads timed band by band (comma-separated)")
    ap.add_argument("--skip-check", action="store_true")
    opts = ap.parse_args()
    if opts.prebuild:
        prebuild(opts.prebuild)
        return 0
    t0 = time.time()
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    logf = open(out_dir / "jagged_gpu.log", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    from kernels.gdpa.hopper import launch

    if opts.kernels:
        launch.use_kernel_dir(opts.kernels)
    results = {"gpu": torch.cuda.get_device_name(), "timing": []}
    try:
        if not opts.skip_check:
            log(f"[check] all ok: {check(log, results)} at {time.time() - t0:.0f}s")
        for name, ql, kl, self_att in workloads(opts.quick):
            time_workload(log, results, name, ql, kl, self_att, name in opts.bands.split(","))
            log(f"[{name}] done at {time.time() - t0:.0f}s")
    finally:
        results["wall_s"] = round(time.time() - t0, 1)
        results["compile_s"] = {repr(k)[:100]: v for k, v in launch.COMPILE_SECONDS.items()}
        (out_dir / "jagged_gpu.json").write_text(json.dumps(results, indent=1, default=str))
        table(results)
        print(f"wall {results['wall_s']}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
