"""Issue 17 on the H200 in one call: correctness of the Hopper GDPA backend (kernels/gdpa/hopper) against the
fp32 reference, and its TFLOP/s against FA4 (softmax) and our Triton kernel on the 12 peer shapes and a
log-normal production batch, all in one process.

    # anywhere with flash-attn-4 (CPU is fine): compile every kernel the run needs into DIR
    CUTE_DSL_ARCH=sm_90a python docs/experiments/hopper_gpu.py --prebuild DIR
    # on the GPU machine (writes $OUT/hopper_gpu.json and a log; prints a short table last)
    PYTHONPATH=. python docs/experiments/hopper_gpu.py --kernels DIR [--budget-s 400] [--skip-timing]

Correctness: relative Frobenius error ||got - ref|| / ||ref|| of out, dq, dk, dv over all rows of a batch
(fp32 autograd reference, kernels/reference.py), outputs poisoned with NaN before each call (an element a
kernel never writes shows as NaN), lengths at tile edges (0, 1, 63, 64, 65, 79, 80, 81, 127, 128, 129, ...),
every activation, causal, GQA, head dims 64/128, fp16/bf16, alpha < 0, a batch above the scheduler-hint size.
Timing: triton.testing.do_bench median; FLOPs 4*H*D*sum(Lq*Lk) (fwd), 2.5x that (bwd) as in results/figures.py;
the peer shapes are built by workloads.pairing.build_lengths exactly as configs/h200.yaml builds them, and
five production sets as configs/production.yaml builds them (unsorted).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernels.gdpa.call import GDPACall  # noqa: E402
from workloads.pairing import build_lengths  # noqa: E402

ACTIVATIONS = (
    "raw",
    "relu",
    "relu_square",
    "leaky_relu",
    "gelu",
    "gelu_tanh",
    "fast_gelu",
    "silu",
    "fast_silu",
    "hardswish",
)
EDGE = [0, 1, 63, 64, 65, 79, 80, 81, 127, 128, 129, 191, 192, 193, 255, 256, 257, 300]
TOL = {torch.bfloat16: 3e-3, torch.float16: 1e-3}
B_PEER, H_PEER, D_PEER = 1152, 4, 128


def correctness_plan():
    """(name, activation, dtype, D, H, Hkv, causal, q_lengths, kv_lengths, alpha, qk_scale)."""
    rng = np.random.default_rng(7)
    edge_q = np.array(EDGE)
    edge_k = np.array(EDGE[::-1])  # cross lengths: every q length meets a different k length
    plan = []
    for act in ACTIVATIONS:
        plan.append((f"{act}", act, torch.bfloat16, 128, 4, 4, False, edge_q, edge_k, 0.7, 1.3))
    for act in ("fast_gelu", "silu", "raw"):
        plan.append((f"{act} causal", act, torch.bfloat16, 128, 4, 4, True, edge_q, edge_q, 0.9, 0.8))
    plan.append(("fast_gelu gqa 4:2", "fast_gelu", torch.bfloat16, 128, 4, 2, False, edge_q, edge_k, 1.0, 1.0))
    plan.append(("gelu gqa 4:1 causal", "gelu", torch.bfloat16, 128, 4, 1, True, edge_q, edge_q, 1.0, 1.0))
    plan.append(("fast_gelu d64", "fast_gelu", torch.bfloat16, 64, 4, 4, False, edge_q, edge_k, 1.0, 1.0))
    plan.append(("silu d64 causal gqa", "silu", torch.bfloat16, 64, 4, 2, True, edge_q, edge_q, 0.5, 2.0))
    plan.append(("fast_gelu fp16", "fast_gelu", torch.float16, 128, 4, 4, False, edge_q, edge_k, 1.0, 1.0))
    plan.append(("hardswish fp16 d64", "hardswish", torch.float16, 64, 2, 2, False, edge_q, edge_k, 1.0, 0.5))
    plan.append(("fast_gelu alpha<0", "fast_gelu", torch.bfloat16, 128, 4, 4, False, edge_q, edge_k, -0.6, 1.0))
    plan.append(("relu alpha<0 causal", "relu", torch.bfloat16, 128, 4, 4, True, edge_q, edge_q, -1.0, 1.0))
    long_q = np.array([0, 1, 63, 65, 159, 160, 161, 500, 513, 640, 700, 257])  # max_q >= 2 max_kv
    short_k = np.array([0, 5, 64, 128, 129, 1, 200, 256, 3, 80, 81, 250])
    plan.append(("fast_gelu long q", "fast_gelu", torch.bfloat16, 128, 4, 4, False, long_q, short_k, 0.8, 1.1))
    plan.append(("raw long q gqa", "raw", torch.bfloat16, 128, 4, 2, False, long_q, short_k, 1.0, 1.0))
    lq = rng.integers(0, 200, size=300)  # above the scheduler-hint batch size (256)
    plan.append(
        ("fast_gelu B=300", "fast_gelu", torch.bfloat16, 128, 4, 4, False, lq, rng.integers(0, 200, 300), 1.0, 1.0)
    )
    plan.append(("silu B=300 causal", "silu", torch.bfloat16, 128, 4, 4, True, lq, lq, 1.0, 1.0))
    return plan


def peer_shapes():
    """(name, q_lengths, kv_lengths) of configs/h200.yaml's 12 peer shapes, plus a production batch."""
    shapes = []
    for fill in (1.0, 0.5):
        for L in (256, 512, 1024, 2048):
            q, k = build_lengths(
                "uniform_fill", {"fill": fill}, "fixed_kv", {"kv_len": L}, batch_size=B_PEER, max_len=L, seed=0
            )
            shapes.append((f"set1 L={L} fill={fill}", q, k))
    for L in (256, 512, 1024, 2048):
        q, k = build_lengths(
            "uniform_fill", {"fill": 1.0}, "fixed_kv", {"kv_len": 256}, batch_size=B_PEER, max_len=L, seed=0
        )
        shapes.append((f"set2 L={L} kv=256", q, k))
    for name, rule, params, max_len in (
        ("lognormal max=2048", "self", {}, 2048),
        ("lognormal max=4096", "self", {}, 4096),
        ("target_history 4096", "target_history", {"max_targets": 256}, 4096),
        ("seeds 4096", "seeds", {"num_seeds": 192}, 4096),
        ("short_kv 4096", "fixed_kv", {"kv_len": 256}, 4096),
    ):
        q, k = build_lengths(
            "lognormal", {"preset": "ml-20m"}, rule, params, batch_size=B_PEER, max_len=max_len, seed=0
        )
        shapes.append((name, q, k))
    return shapes


def prebuild(directory: str) -> None:
    from kernels.gdpa.hopper import launch, prebuild

    launch.use_kernel_dir(directory)
    todo = {
        (dt, d, h // hkv, act, causal, len(lq), int(lq.max()), int(lk.max()))
        for (_, act, dt, d, h, hkv, causal, lq, lk, _, _) in correctness_plan()
    }
    todo |= {
        (torch.bfloat16, D_PEER, 1, "fast_gelu", False, len(lq), int(lq.max()), int(lk.max()))
        for _, lq, lk in peer_shapes()
    }
    for args in sorted(todo, key=repr):
        t0 = time.time()
        prebuild.prebuild(*args)
        print(f"prebuilt {args} in {time.time() - t0:.1f}s", flush=True)
    size = sum(p.stat().st_size for p in Path(directory).glob("*.o"))
    print(f"{len(list(Path(directory).glob('*.o')))} kernels, {size / 2**20:.1f} MiB in {directory}")


# ------------------------------------------------------------------------------------------------------------
def walks(call) -> bool:
    """The backward the Hopper backend runs for this call: the persistent walk or FA4's grid (plans.py)."""
    from kernels.gdpa.hopper.plans import backward_walks

    return backward_walks(call.batch)


def _offsets(lengths, device):
    o = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=o[1:])
    return torch.tensor(o, dtype=torch.int32, device=device)


def _relerr(got, ref):
    got, ref = got.float(), ref.float()
    if not torch.isfinite(got).all():
        return math.nan
    return float((got - ref).norm() / ref.norm().clamp_min(1e-30))


def check_correctness(log, results):
    from kernels.gdpa.hopper import launch
    from kernels.reference import reference_outputs
    from kernels.registry import CaseSpec
    from workloads.batch import make_batch

    nan_like = lambda t: torch.full_like(t, math.nan)
    launch._empty_like = nan_like  # poison every output the backend allocates
    rows = []
    for name, act, dtype, D, H, Hkv, causal, lq, lk, alpha, qk in correctness_plan():
        row = {"case": name}
        try:
            batch = make_batch(lq, lk, H=H, Hkv=Hkv, D=D, dtype=dtype, device="cuda", seed=len(rows))
            spec = CaseSpec(mode="bwd", activation=act, alpha=alpha, qk_scale=qk, causal=causal)
            ref_out, (ref_dq, ref_dk, ref_dv) = reference_outputs(batch, spec, "gdpa", dtype=torch.float32, grads=True)
            call = GDPACall(
                batch.q, batch.k, batch.v, batch.q_offsets, batch.kv_offsets, batch.max_q, batch.max_kv,
                act, alpha, qk, causal,
            )  # fmt: skip
            out = launch.forward(call)
            dq, dk, dv = launch.backward(call, batch.dout, persistent=walks(call))
            torch.cuda.synchronize()
            row.update(
                out=_relerr(out, ref_out), dq=_relerr(dq, ref_dq), dk=_relerr(dk, ref_dk), dv=_relerr(dv, ref_dv)
            )
            worst = max(row[n] if not math.isnan(row[n]) else math.inf for n in ("out", "dq", "dk", "dv"))
            row["ok"] = worst <= TOL[dtype]
        except Exception:
            row["error"] = traceback.format_exc()[-2000:]
            row["ok"] = False
        rows.append(row)
        log(
            f"[check] {name:<24} "
            + " ".join(f"{n}={row[n]:.2e}" for n in ("out", "dq", "dk", "dv") if n in row)
            + ("  OK" if row["ok"] else "  FAIL")
            + (f"\n{row['error']}" if "error" in row else "")
        )
    launch._empty_like = torch.empty_like
    results["correctness"] = rows
    return all(r["ok"] for r in rows)


# ------------------------------------------------------------------------------------------------------------
TRITON_TILES = {  # the autotuner's choices in docs/example-h200 (pinned here: no autotuning in this run;
    # the production shapes take the nearest peer shape's: their own autotuned tiles may be faster)
    256: ((64, 32, 4, 3, 168), (64, 128, 8, 3), (64, 32, 4, 3, 168)),
    512: ((128, 32, 8, 3, 128), (64, 128, 8, 3), (128, 64, 8, 3)),
    1024: ((128, 32, 8, 3, 128), (64, 128, 8, 3), (128, 64, 8, 3)),
    2048: ((128, 64, 8, 3), (64, 128, 8, 3), (128, 64, 8, 3)),
}
TRITON_TILES_SHORT_KV = ((128, 32, 8, 3, 128), (64, 128, 8, 3), (64, 32, 4, 3, 168))


def _triton_call(name, max_q, max_kv):
    """gdpa(..., backend triton, tiles pinned) if the op takes options (issue 16), else None."""
    try:
        from kernels.gdpa import gdpa
        from kernels.gdpa.options import GDPAOptions
    except Exception:
        return None
    short_kv = max_kv <= 256 < max_q  # set 2 and the short-KV production set
    fwd_t, dkdv_t, dq_t = (
        TRITON_TILES_SHORT_KV
        if short_kv
        else TRITON_TILES[min(TRITON_TILES, key=lambda L: abs(L - min(max(max_q, 256), 2048)))]
    )
    options = GDPAOptions(backend="triton", fwd_tiles=fwd_t, dkdv_tiles=dkdv_t, dq_tiles=dq_t)
    return lambda q, k, v, qo, ko, mq, mk: gdpa(
        q, k, v, qo, ko, mq, mk, activation="fast_gelu", alpha=1.0, qk_scale=1.0, causal=False, options=options
    )


def _time_one(name, lq, lk, row):
    """Fill `row` with the TFLOP/s of each backend on one shape (and the Hopper backend's accuracy)."""
    from flash_attn.cute import flash_attn_varlen_func
    from flash_attn.cute.interface import _flash_attn_bwd
    from triton.testing import do_bench

    from kernels.gdpa.hopper import launch
    from kernels.reference import gdpa_sequence
    from kernels.registry import CaseSpec

    bench = lambda fn: do_bench(fn, warmup=25, rep=250, return_mode="median")
    flops = 4 * H_PEER * D_PEER * float((lq * lk).sum())
    torch.manual_seed(0)
    qo, ko = _offsets(lq, "cuda"), _offsets(lk, "cuda")
    mq, mk = int(lq.max()), int(lk.max())
    scale = D_PEER**-0.25  # inputs as workloads/batch.py draws them
    q = torch.randn(int(lq.sum()), H_PEER, D_PEER, device="cuda", dtype=torch.bfloat16) * scale
    k = torch.randn(int(lk.sum()), H_PEER, D_PEER, device="cuda", dtype=torch.bfloat16) * scale
    v = torch.randn_like(k) * scale
    do = torch.randn_like(q)
    call = GDPACall(q, k, v, qo, ko, mq, mk, "fast_gelu", 1.0, 1.0, False)
    record = {}
    out = launch.forward(call, record=record)
    grads = launch.backward(call, do, record=record, persistent=walks(call))
    errs = {"out": 0.0, "dq": 0.0, "dk": 0.0, "dv": 0.0}  # on the first three non-empty sequences
    qo_h, ko_h, spec = qo.cpu().numpy(), ko.cpu().numpy(), CaseSpec(activation="fast_gelu")
    for b in [i for i in range(len(lq)) if lq[i] and lk[i]][:3]:
        qs, ks = slice(qo_h[b], qo_h[b + 1]), slice(ko_h[b], ko_h[b + 1])
        qb, kb, vb = (t[s].float().requires_grad_(True) for t, s in ((q, qs), (k, ks), (v, ks)))
        ob = gdpa_sequence(qb, kb, vb, spec)
        ref = torch.autograd.grad(ob, (qb, kb, vb), do[qs].float())
        for n, got, r in (
            ("out", out[qs], ob),
            ("dq", grads[0][qs], ref[0]),
            ("dk", grads[1][ks], ref[1]),
            ("dv", grads[2][ks], ref[2]),
        ):
            errs[n] = max(errs[n], _relerr(got, r.detach()))
    row["relerr"], row["record"] = errs, record
    row["hopper_fwd"] = flops / bench(lambda: launch.forward(call)) * 1e-9
    row["hopper_bwd"] = 2.5 * flops / bench(lambda: launch.backward(call, do, persistent=walks(call))) * 1e-9
    varlen = dict(cu_seqlens_q=qo, cu_seqlens_k=ko, max_seqlen_q=mq, max_seqlen_k=mk)
    row["fa4_fwd"] = flops / bench(lambda: flash_attn_varlen_func(q, k, v, **varlen)) * 1e-9
    o_sm, lse = flash_attn_varlen_func(q, k, v, **varlen, return_lse=True)[:2]
    row["fa4_bwd"] = 2.5 * flops / bench(lambda: _flash_attn_bwd(q, k, v, o_sm, do, lse, **varlen)) * 1e-9
    triton = _triton_call(name, mq, mk)
    if triton is not None:
        try:
            row["triton_fwd"] = flops / bench(lambda: triton(q, k, v, qo, ko, mq, mk)) * 1e-9
            qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
            og = triton(qg, kg, vg, qo, ko, mq, mk)
            row["triton_bwd"] = (
                2.5 * flops / bench(lambda: torch.autograd.grad(og, (qg, kg, vg), do, retain_graph=True)) * 1e-9
            )
        except Exception:
            row["triton_error"] = traceback.format_exc()[-1500:]


def time_shapes(log, results, deadline):
    rows = []
    for name, lq, lk in peer_shapes():
        if time.time() > deadline:
            log(f"[time] budget reached before {name}")
            break
        row = {"shape": name, "B": len(lq), "total_q": int(lq.sum()), "total_kv": int(lk.sum())}
        try:
            _time_one(name, lq, lk, row)
        except Exception:
            row["error"] = traceback.format_exc()[-2500:]
        torch.cuda.empty_cache()
        rows.append(row)
        log(
            f"[time] {name:<22} "
            + " ".join(
                f"{n}={row[n]:.1f}"
                for n in ("hopper_fwd", "fa4_fwd", "triton_fwd", "hopper_bwd", "fa4_bwd", "triton_bwd")
                if n in row
            )
            + (f" relerr={max(row['relerr'].values()):.2e}" if "relerr" in row else "")
            + "".join(f"\n{row[n]}" for n in ("error", "triton_error") if n in row)
        )
    results["timing"] = rows


def table(results):
    print("\nTFLOP/s (fwd: 4*H*D*sum(Lq*Lk); bwd 2.5x), B=1152 H=4 D=128 bf16 fast_gelu, H200, one process")
    print(
        f"{'shape':<22}{'hop fwd':>8}{'fa4':>7}{'trit':>7}{'h/fa4':>7}{'h/tr':>6}"
        f"{'hop bwd':>9}{'fa4':>7}{'trit':>7}{'h/fa4':>7}{'h/tr':>6}{'relerr':>9}"
    )
    f = lambda r, n: f"{r[n]:.0f}" if n in r else "-"
    ratio = lambda r, a, b: f"{r[a] / r[b]:.2f}" if a in r and b in r else "-"
    for r in results.get("timing", []):
        print(
            f"{r['shape']:<22}{f(r, 'hopper_fwd'):>8}{f(r, 'fa4_fwd'):>7}{f(r, 'triton_fwd'):>7}"
            f"{ratio(r, 'hopper_fwd', 'fa4_fwd'):>7}{ratio(r, 'hopper_fwd', 'triton_fwd'):>6}"
            f"{f(r, 'hopper_bwd'):>9}{f(r, 'fa4_bwd'):>7}{f(r, 'triton_bwd'):>7}"
            f"{ratio(r, 'hopper_bwd', 'fa4_bwd'):>7}{ratio(r, 'hopper_bwd', 'triton_bwd'):>6}"
            + (f"{max(r['relerr'].values()):>9.1e}" if "relerr" in r else f"{'ERR':>9}")
        )
    bad = [r["case"] for r in results.get("correctness", []) if not r["ok"]]
    print(
        f"correctness: {len(results.get('correctness', [])) - len(bad)}/{len(results.get('correctness', []))} ok"
        + (f"; FAILED: {', '.join(bad)}" if bad else "")
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prebuild", metavar="DIR")
    ap.add_argument("--kernels", metavar="DIR", help="compiled kernels from --prebuild")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--skip-timing", action="store_true")
    opts = ap.parse_args()
    if opts.prebuild:
        prebuild(opts.prebuild)
        return 0
    t0 = time.time()
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    out_dir.mkdir(parents=True, exist_ok=True)
    logf = open(out_dir / "hopper_gpu.log", "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

    from kernels.gdpa.hopper import launch, unavailable

    if opts.kernels:
        launch.use_kernel_dir(opts.kernels)
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "unavailable": unavailable("cuda")}
    log(json.dumps(results))
    try:
        results["correct"] = check_correctness(log, results)
        log(f"[check] done at {time.time() - t0:.0f}s")
        if not opts.skip_timing:
            time_shapes(log, results, t0 + opts.budget_s)
    finally:
        results["compile_s"] = {repr(k)[:120]: v for k, v in launch.COMPILE_SECONDS.items()}
        results["wall_s"] = round(time.time() - t0, 1)
        (out_dir / "hopper_gpu.json").write_text(json.dumps(results, indent=1, default=str))
        table(results)
        print(f"wall {results['wall_s']}s; compile/load seconds total {sum(launch.COMPILE_SECONDS.values()):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
