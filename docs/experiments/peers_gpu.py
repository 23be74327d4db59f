"""Issue 23 on the H200: every peer provider (meta_gdpa and its variants, meta_gdpa_cute, hstu,
flex_attention) checked against our fp32 reference by the harness's own correctness gate, then timed next
to ours (gdpa, gdpa_triton) and FA4, forward and backward, on a few of Meta's benchmark shapes and on causal
SiLU self-attention (HSTU's math). Prints a short table last; writes $OUT/peers_gpu.json and
$OUT/peers_gpu.log when OUT is set.

Setup: the peers' checkouts under the repository's git-ignored `.peers/` (the lead copies /work/peers/*
there), carried to the GPU machine:

    run(command="PYTHONPATH=. python docs/experiments/peers_gpu.py --parts meta,meta_cute", carry=[".peers"])
    run(command="PYTHONPATH=. python docs/experiments/peers_gpu.py --parts hstu,flex,ours,hstu_fault", carry=[".peers"])

(two calls: each stays under the device machine's 10 minutes per command; `--budget-s` caps the timing
of each provider label, the checks always run).

Each provider group runs in its own child process (`--part NAME`): a kernel that faults the GPU poisons
only its own process, and its rows up to the fault are kept (written after every row). The last part
replays the HSTU fault the issue reports (B 5, H 1, D 128, bf16, lengths 92/27/37/121/97, N 148, causal)
and records how that process ended. Correctness: bench.case.gate.correctness (relative Frobenius error of out,
and dq/dk/dv in bwd, against kernels.reference in fp32; tolerance 2e-2 as configs default), on every
sequence of the small edge-length batches and on 8 sampled sequences of the peer shapes. Timing:
bench.case.timing.time_cuda (L2 flushed before each call, 300 ms of samples, median); FLOPs by the peers'
convention (fwd 4·H·D·Σ pairs, causal: unmasked pairs; bwd 2.5×), as bench/record.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.case.gate import correctness  # noqa: E402
from bench.case.timing import time_cuda  # noqa: E402
from kernels.registry import CaseSpec, get_provider  # noqa: E402
from workloads import make_batch  # noqa: E402
from workloads.pairing import build_lengths  # noqa: E402
from workloads.stats import work_pairs  # noqa: E402

OUT = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
TOL = 2e-2
EDGE = [0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 300]
B_PEER, H_PEER, D_PEER = 1152, 4, 128
ALPHA_HSTU = 1.0 / 128**0.5
FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5}

# label -> (provider name, options)
META_VARIANTS = {
    "meta_gdpa": {},
    "meta_gdpa_tma": {"enable_tma": True, "bwd_opt_tech": "tma"},
    "meta_gdpa_persistent": {"enable_persistent": True, "bwd_opt_tech": "persistent"},
    "meta_gdpa_ws": {"enable_tma": True, "enable_ws": True, "bwd_opt_tech": "tma_ws"},
}
PARTS = {
    "meta": {label: ("meta_gdpa", opts) for label, opts in META_VARIANTS.items()},
    "meta_cute": {"meta_gdpa_cute": ("meta_gdpa_cute", {})},
    "hstu": {"hstu": ("hstu", {}), "hstu_tma": ("hstu", {"enable_tma": True})},
    "flex": {"flex_attention": ("flex_attention", {})},
    "ours": {"gdpa": ("gdpa", {}), "gdpa_triton": ("gdpa_triton", {}), "fa4": ("fa4", {})},
}


def log(msg: str) -> None:
    print(msg, flush=True)
    if OUT:
        with (OUT / "peers_gpu.log").open("a") as f:
            f.write(msg + "\n")


def peer_shapes() -> list[tuple[str, np.ndarray, np.ndarray, bool]]:
    """(name, q_lengths, kv_lengths, causal), built exactly as configs/peers-h200.yaml builds them."""
    fam = "uniform_fill"
    out = []
    for L, fill in ((512, 1.0), (2048, 0.5)):
        q, k = build_lengths(fam, {"fill": fill}, "fixed_kv", {}, batch_size=B_PEER, max_len=L)
        out.append((f"set1/L={L}/fill={fill}", q, k, False))
    q, k = build_lengths(fam, {"fill": 1.0}, "fixed_kv", {"kv_len": 256}, batch_size=B_PEER, max_len=1024)
    out.append(("set2/L=1024", q, k, False))
    for L, fill in ((256, 0.5), (1024, 1.0)):
        q, k = build_lengths(fam, {"fill": fill}, "self", {}, batch_size=B_PEER, max_len=L)
        out.append((f"causal_silu/L={L}/fill={fill}", q, k, True))
    return out


def spec_for(semantics: str, causal: bool, mode: str, max_len: int, activation: str = "fast_gelu") -> CaseSpec:
    if causal:  # HSTU's math: silu(alpha·QKᵀ)/N, N = the max length (softmax providers: causal softmax)
        return CaseSpec(mode=mode, activation="silu", alpha=ALPHA_HSTU, qk_scale=1.0 / max_len, causal=True)
    return CaseSpec(mode=mode, activation=activation)


def correctness_plan(label: str, name: str) -> list[tuple[str, dict]]:
    """(case name, make_batch kwargs + spec fields) of the small batches each provider is checked on."""
    cross = {"q": EDGE, "k": EDGE[::-1]}
    same = {"q": EDGE, "k": EDGE}
    plan = []
    if name == "meta_gdpa":
        for act in ("fast_gelu", "gelu", "gelu_tanh", "silu", "relu", "raw"):
            plan.append((f"{act} qk_scale 0.5", {**cross, "act": act, "qk_scale": 0.5}))
        plan.append(("fast_gelu gqa 4:2", {**cross, "Hkv": 2}))
        plan.append(("fast_gelu d64 fp16", {**cross, "D": 64, "dtype": torch.float16}))
    elif name == "meta_gdpa_cute":
        for act in ("fast_gelu", "relu"):
            plan.append((act, {**cross, "act": act}))
        plan.append(("fast_gelu causal self", {**same, "causal": True}))
    elif name == "hstu":
        plan.append(("silu causal N=320", {**same, "act": "silu", "causal": True, "qk_scale": 1 / 320}))
        plan.append(
            ("silu causal N=300 alpha<0", {**same, "act": "silu", "causal": True, "qk_scale": 1 / 300, "alpha": -0.8})
        )
        plan.append(
            (
                "silu causal d64 fp16",
                {**same, "act": "silu", "causal": True, "qk_scale": 1 / 512, "D": 64, "dtype": torch.float16},
            )
        )
    elif name == "flex_attention":
        plan.append(("softmax cross", cross))
        plan.append(("softmax causal cross", {**cross, "causal": True}))
        plan.append(("softmax gqa 4:1 d64", {**cross, "Hkv": 1, "D": 64}))
    else:
        plan.append(("fast_gelu cross", cross))
    return plan


def check_small(label: str, p, dev) -> list[dict]:
    rows = []
    for case, c in correctness_plan(label, p.name):
        for mode in ("fwd", "bwd"):
            batch = make_batch(
                c["q"],
                c["k"],
                H=4,
                Hkv=c.get("Hkv", 4),
                D=c.get("D", 128),
                dtype=c.get("dtype", torch.bfloat16),
                device=dev,
                seed=11,
            )
            spec = CaseSpec(
                mode=mode,
                activation=c.get("act", "fast_gelu"),
                alpha=c.get("alpha", 1.0),
                qk_scale=c.get("qk_scale", 1.0),
                causal=c.get("causal", False),
            )
            row = {"part_label": label, "kind": "check", "case": case, "mode": mode}
            reason = p.unsupported(batch, spec)
            if reason:
                row.update(status="skipped", error=reason)
            else:
                try:
                    res = correctness(p, batch, spec, mode, TOL, batch.B, 0)
                    row.update(
                        status="ok" if res["passed"] else "incorrect",
                        rel_err=res["rel_err"],
                        per_tensor=res["per_tensor"],
                    )
                except Exception as exc:
                    row.update(
                        status="failed", error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                    )
            rows.append(row)
            emit(row)
    return rows


def time_shapes(label: str, p, dev, budget_end: float) -> None:
    for shape, q, k, causal in peer_shapes():
        batch = make_batch(q, k, H=H_PEER, D=D_PEER, dtype=torch.bfloat16, device=dev, seed=0)
        max_len = int(shape.split("L=")[1].split("/")[0])
        for mode in ("fwd", "bwd"):
            row = {"part_label": label, "kind": "time", "case": shape, "mode": mode}
            if time.time() > budget_end:
                row.update(status="skipped", error="out of this part's time budget")
                emit(row)
                continue
            spec = spec_for(p.semantics, causal, mode, max_len)
            reason = p.unsupported(batch, spec)
            if reason:
                row.update(status="skipped", error=reason)
                emit(row)
                continue
            try:
                t0 = time.time()
                res = correctness(p, batch, spec, mode, TOL, 8, 0)
                row.update(rel_err=res["rel_err"])
                if not res["passed"]:
                    row.update(status="incorrect", per_tensor=res["per_tensor"])
                    emit(row)
                    continue
                fn = p.build(batch, spec, mode)
                fn()
                torch.cuda.synchronize(dev)
                setup_s = time.time() - t0
                s = time_cuda(fn, warmup_ms=10, rep_ms=300, min_reps=5, max_reps=500, device=dev)
                flops = 4.0 * H_PEER * D_PEER * float(work_pairs(q, k, causal=causal).sum()) * FLOP_FACTOR[mode]
                row.update(
                    status="ok", median_ms=s.median_ms, tflops=flops / s.median_ms / 1e9, setup_s=round(setup_s, 1)
                )
                del fn
            except Exception as exc:
                row.update(
                    status="failed", error=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                )
                log(traceback.format_exc())
            emit(row)
            torch.cuda.empty_cache()
        del batch


def emit(row: dict) -> None:
    """Log one row and append it to the rows file (the parent collects it, even after a crash)."""
    extra = f" rel_err {row['rel_err']:.2e}" if "rel_err" in row else ""
    extra += f" {row['tflops']:.0f} TFLOP/s ({row['median_ms']:.3f} ms)" if "tflops" in row else ""
    head = f"  {row['part_label']:>22} {row['kind']} {row['case']:<28} {row['mode']:<4}"
    log(f"{head} {row['status']}{extra} {row.get('error', '')}")
    if OUT:
        with (OUT / "peers_gpu_rows.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")


def flex_compile_count() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def run_part(part: str, budget_s: float) -> None:
    dev = torch.device("cuda", 0)
    for label, (name, opts) in PARTS[part].items():
        end = time.time() + budget_s
        p = get_provider(name, opts)
        reason = p.availability(dev)
        log(f"{label}: {'available' if reason is None else 'skipped: ' + reason}")
        if reason is not None:
            emit(
                {
                    "part_label": label,
                    "kind": "availability",
                    "case": "-",
                    "mode": "-",
                    "status": "skipped",
                    "error": reason,
                }
            )
            continue
        before = flex_compile_count() if name == "flex_attention" else 0
        check_small(label, p, dev)
        time_shapes(label, p, dev, end)
        if name == "flex_attention":
            log(f"  flex_attention: {flex_compile_count() - before} Dynamo graphs compiled over all shapes and modes")
        rec = p.kernel_configs()
        if rec:
            log(f"  {label} ran: {json.dumps(rec, default=str)}")


def hstu_fault_case() -> None:
    """The issue's case: HSTU's kernel at its current main on the H200 hit an illegal memory access."""
    dev = torch.device("cuda", 0)
    p = get_provider("hstu")
    batch = make_batch(
        [92, 27, 37, 121, 97], [92, 27, 37, 121, 97], H=1, D=128, dtype=torch.bfloat16, device=dev, seed=0
    )
    for mode in ("fwd", "bwd"):
        spec = CaseSpec(mode=mode, activation="silu", alpha=ALPHA_HSTU, qk_scale=1 / 148, causal=True)
        res = correctness(p, batch, spec, mode, TOL, batch.B, 0)
        torch.cuda.synchronize(dev)
        log(f"  hstu fault case {mode}: rel_err {res['rel_err']:.2e} passed {res['passed']}")


def table(rows: list[dict]) -> str:
    timed = [r for r in rows if r["kind"] == "time"]
    labels = list(dict.fromkeys(r["part_label"] for r in timed))
    keys = list(dict.fromkeys((r["case"], r["mode"]) for r in timed))
    cell = {(r["case"], r["mode"], r["part_label"]): r for r in timed}
    lines = ["| shape | mode | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
    for case, mode in keys:
        vals = []
        for lab in labels:
            r = cell.get((case, mode, lab))
            vals.append("" if r is None else f"{r['tflops']:.0f}" if r["status"] == "ok" else r["status"][:4])
        lines.append(f"| {case} | {mode} | " + " | ".join(vals) + " |")
    checks = [r for r in rows if r["kind"] == "check"]
    lines.append("")
    for lab in dict.fromkeys(r["part_label"] for r in checks):
        mine = [r for r in checks if r["part_label"] == lab]
        errs = [r["rel_err"] for r in mine if "rel_err" in r]
        counts = {s: sum(r["status"] == s for r in mine) for s in ("ok", "incorrect", "failed", "skipped")}
        worst = f"{max(errs):.2e}" if errs else "-"
        lines.append(f"check {lab}: {counts} worst rel_err {worst}")
    return "\n".join(lines)


def main() -> int:
    global OUT
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=[*PARTS, "hstu_fault"], help="(internal) run one part in this process")
    ap.add_argument("--parts", default=",".join([*PARTS, "hstu_fault"]), help="comma-separated parts to run")
    ap.add_argument("--budget-s", type=float, default=60.0, help="timing budget per provider label")
    args = ap.parse_args()
    if args.part == "hstu_fault":
        hstu_fault_case()
        return 0
    if args.part:
        run_part(args.part, args.budget_s)
        return 0
    parts = [x for x in args.parts.split(",") if x]
    unknown = [x for x in parts if x not in (*PARTS, "hstu_fault")]
    if unknown:
        ap.error(f"unknown part {unknown[0]!r}; allowed: {', '.join([*PARTS, 'hstu_fault'])}")
    if OUT is None:  # the parts hand their rows back through a file
        OUT = Path(tempfile.mkdtemp(prefix="peers_gpu_"))
        os.environ["OUT"] = str(OUT)
    OUT.mkdir(parents=True, exist_ok=True)
    import triton
    import triton.language as tl

    log(
        f"{torch.cuda.get_device_name(0)}; torch {torch.__version__}; triton {triton.__version__} "
        f"(tl.async_task: {hasattr(tl, 'async_task')}); peers under {ROOT / '.peers'}"
    )
    for peer in sorted((ROOT / ".peers").glob("*")) if (ROOT / ".peers").exists() else []:
        git = subprocess.run(["git", "-C", str(peer), "rev-parse", "HEAD"], capture_output=True, text=True)
        log(f"  {peer.name}: {git.stdout.strip() or 'not a git checkout'}")
    ended = {}
    for part in parts:
        t0 = time.time()
        cmd = [sys.executable, __file__, "--part", part, "--budget-s", str(args.budget_s)]
        r = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)  # stdout streams through
        tail = (r.stderr.strip().splitlines() or [""])[-1]
        ended[part] = {"rc": r.returncode, "wall_s": round(time.time() - t0, 1), "stderr_tail": tail}
        log(
            f"part {part}: rc {r.returncode} in {time.time() - t0:.0f} s"
            + (f"; stderr: {tail}" if r.returncode else "")
        )
        if r.returncode:
            (OUT / f"peers_gpu_{part}.stderr").write_text(r.stderr[-20000:])
    rows_file = OUT / "peers_gpu_rows.jsonl"
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()] if rows_file.exists() else []
    (OUT / "peers_gpu.json").write_text(json.dumps({"parts": ended, "rows": rows}, indent=1))
    if rows:
        log("\nTFLOP/s (peers' FLOP convention; non-ok: its status):\n" + table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
