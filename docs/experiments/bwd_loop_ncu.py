"""Issue 30: where our Hopper backward's main loop spends its issue slots, against FA4's (Nsight Compute).

One call each of our Hopper backward (the op pinned to `backend="hopper"`, its default plan) and FA4's
backward on a uniform batch (B 128, H 4, D 128, every sequence 2048: the shape where our loop runs 0.85-0.9x
FA4's), profiled with `ncu --set full --clock-control none` (the clocks stay as the machine has them), only
between cudaProfilerStart/Stop, after both have compiled and warmed up. Writes the raw metrics of every kernel
to $OUT/bwd_loop_ncu.csv.gz and prints, for the two main-loop kernels, the pipes' issue shares (FMA, ALU,
XU = MUFU, tensor), issue-slot use, the top warp stall reasons and the instruction counts; then, per kernel, the
stall samples per SASS instruction (where the warps wait: the wgmma waits, the PdS barrier, the pointwise) summed
by opcode and the top instructions ($OUT/bwd_loop_sass_<kernel>.csv.gz).

`--batch B --length L` profiles another uniform batch: `--batch 2048 --length 128` is where a key tile's own cost
is 59% of the persistent walk's tile (kernels/gdpa/PERF.md "dK in its own buffer": 10.3 µs a key tile + 2.3 a
query block) — the stall page of the walk (the Hopper backward up to 2,048 sequences) beside FA4's grid there says
whether those 10 µs are the prologue's first TMA latency, the epilogue, or the dQ warp's last reduce-add.

    # on the GPU machine, FA4 installed, the Hopper kernels in $GDPA_HOPPER_KERNEL_DIR (or compiled there):
    PYTHONPATH=. python docs/experiments/bwd_loop_ncu.py [--batch B --length L]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

B, H, D, L = 128, 4, 128, 2048


def child(B: int = B, L: int = L) -> None:
    import torch

    from kernels.gdpa import GDPAOptions, gdpa
    from workloads.batch import make_batch

    b = make_batch([L] * B, [L] * B, H=H, Hkv=H, D=D, dtype=torch.bfloat16, device="cuda", seed=0)
    q, k, v = (t.detach().requires_grad_() for t in (b.q, b.k, b.v))
    do = b.dout

    def ours():
        o = gdpa(q, k, v, b.q_offsets, b.q_offsets, b.max_q, b.max_q, options=GDPAOptions(backend="hopper"))
        return o, lambda: torch.autograd.grad(o, (q, k, v), do)

    def fa4():
        from flash_attn.cute import flash_attn_varlen_func

        res = flash_attn_varlen_func(q, k, v, cu_seqlens_q=b.q_offsets, cu_seqlens_k=b.q_offsets,
                                     max_seqlen_q=b.max_q, max_seqlen_k=b.max_q)  # fmt: skip
        o = res[0] if isinstance(res, tuple) else res
        return o, lambda: torch.autograd.grad(o, (q, k, v), do)

    calls = {}
    for name, make in (("gdpa_hopper", ours), ("fa4", fa4)):
        for _ in range(3):  # compile, autotune, warm
            _, grad = make()
            grad()
        calls[name] = make()[1]
    torch.cuda.synchronize()
    for name, grad in calls.items():
        torch.cuda.nvtx.range_push(name)
        torch.cuda.profiler.start()
        grad()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        torch.cuda.nvtx.range_pop()
        print(f"profiled {name}", flush=True)


SHOW = (  # (label, raw metric)
    ("duration ms", "gpu__time_duration.sum"),
    ("registers", "launch__registers_per_thread"),
    ("issue active %", "sm__inst_issued.avg.pct_of_peak_sustained_active"),
    ("pipe fma %", "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"),
    ("pipe alu %", "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active"),
    ("pipe xu %", "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"),
    ("pipe fp16 %", "sm__inst_executed_pipe_fp16.avg.pct_of_peak_sustained_active"),
    ("tensor (gmma) %", "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("tensor (hmma) %", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
    ("inst executed", "smsp__inst_executed.sum"),
    ("dram %", "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("local spill bytes", "lts__t_sectors_srcunit_l1_aperture_local.sum"),
)


def rows_of(text: str) -> list[dict]:
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    return rows[1:] if rows and rows[0].get("ID", "").strip() == "" else rows  # the units row


def summarize(rows: list[dict], top: int = 2, shape: str = f"uniform B {B} L {L} H {H} D {D} bf16 fast_gelu") -> None:
    """The `top` longest kernels' pipes, issue slots, stalls and instruction counts (fwd_bands_ncu.py too)."""

    def num(r, m):
        try:
            return float(str(r.get(m, "")).replace(",", ""))
        except ValueError:
            return None

    main = sorted(rows, key=lambda r: -(num(r, "gpu__time_duration.sum") or 0))[:top]
    print(f"\n{len(rows)} kernels profiled; the {top} longest, {shape}:")
    for r in main:
        print(f"== {r.get('Kernel Name', '?')[:110]}")
        for label, m in SHOW:
            val = num(r, m)
            if val is not None:
                val = val * 1e-6 if m == "gpu__time_duration.sum" else val
                print(f"   {label:<18} {val:,.3f}")
        stalls = [(k, num(r, k)) for k in r if k.startswith("smsp__average_warp_latency_issue_stalled_")
                  and k.endswith(".ratio")]  # fmt: skip
        stalls = sorted(((k, v) for k, v in stalls if v), key=lambda kv: -kv[1])[:6]
        if stalls:
            print("   stalls (cycles per issued instruction): " + ", ".join(
                f"{k.split('stalled_')[1].split('.')[0]} {v:.2f}" for k, v in stalls))  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=B, help=f"sequences (default {B})")
    p.add_argument("--length", type=int, default=L, help=f"every sequence's length (default {L})")
    args = p.parse_args()
    if args.batch < 1 or args.length < 1:
        p.error(f"--batch {args.batch} --length {args.length}: allowed: positive whole numbers")
    if args.child:
        child(args.batch, args.length)
        return 0
    ncu = shutil.which("ncu")
    if not ncu:
        print("ncu not found on PATH")
        return 2
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    rep = Path("/tmp/bwd_loop.ncu-rep")
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--set", "full", "--import-source", "no",
           "--export", str(rep), "--force-overwrite", sys.executable, __file__, "--child",
           "--batch", str(args.batch), "--length", str(args.length)]  # fmt: skip
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    if proc.returncode != 0:
        return proc.returncode
    raw = subprocess.run([ncu, "--import", str(rep), "--csv", "--page", "raw", "--print-units", "base"],
                         capture_output=True, text=True)  # fmt: skip
    with gzip.open(out / "bwd_loop_ncu.csv.gz", "wt") as fh:
        fh.write(raw.stdout)
    summarize(rows_of(raw.stdout), shape=f"uniform B {args.batch} L {args.length} H {H} D {D} bf16 fast_gelu")
    for tag, kernel in (("gdpa_hopper", "regex:GDPABackwardSm90"), ("fa4", "regex:FlashAttentionBackwardSm90")):
        where_stalled(ncu, rep, tag, kernel, out)
    return 0


def source_rows(text: str) -> tuple[list[dict], str | None]:
    """ncu's source page (`--page source --csv --print-source sass`) as rows, and the name of its all-samples
    stall column (None when the page has none). The page opens with a "Kernel Name" line before its header,
    whose first column is "Address" or, in some ncu versions, a row index before it; ncu ends each row with a
    comma, which csv reads as a last column named None."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    head = next((i for i, ln in enumerate(lines) if '"Source"' in ln and '"Address"' in ln), None)
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[head:])))) if head is not None else []
    stall = next((c for c in (rows[0] if rows else {}) if c and c.startswith("Warp Stall Sampling (All")), None)
    return rows, stall


def where_stalled(ncu: str, rep: Path, tag: str, kernel: str, out: Path, top: int = 12) -> None:
    """The main loop's stall samples per SASS instruction (`--set full` samples warp states: SourceCounters):
    which instructions the warps wait at — the dP GEMM's wgmma wait, the PdS barrier, the pointwise — summed by
    opcode, then the `top` instructions. The page goes to $OUT/bwd_loop_sass_<tag>.csv.gz."""
    cmd = [ncu, "--import", str(rep), "--page", "source", "--csv", "--print-source", "sass", "--kernel-name", kernel]
    page = subprocess.run(cmd, capture_output=True, text=True)
    with gzip.open(out / f"bwd_loop_sass_{tag}.csv.gz", "wt") as fh:
        fh.write(page.stdout)
    rows, stall = source_rows(page.stdout)
    if not rows or stall is None:
        print(f"\n{tag}: no per-instruction stall samples ({page.stderr.strip()[-300:] or 'empty source page'})")
        return

    def samples(r):
        try:
            return float(str(r.get(stall) or 0).replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(samples(r) for r in rows) or 1.0
    by_op: dict[str, float] = {}
    for r in rows:
        op = (r.get("Source") or "?").split()[0] if (r.get("Source") or "").strip() else "?"
        op = op.split(".")[0] if not op.startswith("@") else (r["Source"].split()[1].split(".")[0])
        by_op[op] = by_op.get(op, 0.0) + samples(r)
    print(f"\n{tag}: {len(rows)} SASS instructions, {total:,.0f} stall samples; by opcode:")
    print("   " + ", ".join(f"{op} {v / total:.1%}" for op, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:10]))
    for r in sorted(rows, key=samples, reverse=True)[:top]:
        print(f"   {samples(r) / total:6.1%}  {r.get('Address', '?'):>6}  {(r.get('Source') or '').strip()[:80]}")


if __name__ == "__main__":
    sys.exit(main())
