"""Issue 30: what the backward's short-band stage does with its SMs (Nsight Compute), on the production log-normal
max-2048 batch.

In f20b010's H100 production run (docs/experiments/h100-2026-12-07g) the log-normal 2048 backward auto picked,
packed[0, 128) + hopper[128, inf), spent 0.256 ms of its 1.53 in the packed Triton kernel (kernels/gdpa/
packed_bwd.py) for ~3% of the batch's scores: 314 MB moved at ~1.2 TB/s, where the card copies at 3.0 — a
latency-bound kernel at one 8-warp CTA an SM (255 registers). Halving it would carry both log-normal backward bars
on that card (kernels/gdpa/PERF.md "The walk's stall page at L = 128"). This profiles one launch per band as the op's
backends run it — the packed kernel over [0, 128) (its plan launch before it), the persistent Hopper walk over
[0, 128), [128, 256) and [128, inf), the owned Triton backward over [0, 128) — with `ncu --set full --clock-control
none`, prints each kernel's pipes, issue slots, DRAM share, top stalls and instruction counts (bwd_loop_ncu.py's
summary), then the packed kernel's stall samples per SASS instruction (where its warps wait: the loads, a wgmma
wait, the spills). Raw metrics: $OUT/bwd_bands_ncu.csv.gz; the packed kernel's page:
$OUT/bwd_loop_sass_packed_bwd.csv.gz.

    # on the GPU machine, FA4 installed, the Hopper kernels in $GDPA_HOPPER_KERNEL_DIR (or compiled there):
    PYTHONPATH=. python docs/experiments/bwd_bands_ncu.py
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bwd_loop_ncu import rows_of, summarize, where_stalled

B, H, D, MAX_LEN = 1152, 4, 128, 2048
LAUNCHES = (  # (backend, lo, hi): one backward each, in this order
    ("packed", 0, 128),
    ("hopper", 0, 128),
    ("hopper", 128, 256),
    ("hopper", 128, None),
    ("owned", 0, 128),
)


def band_label(name: str, lo: int, hi: int | None) -> str:
    return f"{name} [{lo}, {'inf' if hi is None else hi})"


def child() -> None:
    import torch

    from kernels.gdpa import backends
    from kernels.gdpa.bands import Band
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.options import GDPAOptions
    from workloads.batch import make_batch
    from workloads.pairing import build_lengths

    q_len, _ = build_lengths("lognormal", {"preset": "ml-20m"}, "self", {}, batch_size=B, max_len=MAX_LEN, seed=0)
    b = make_batch(q_len, q_len, H=H, Hkv=H, D=D, dtype=torch.bfloat16, device="cuda", seed=0)
    call = GDPACall(b.q, b.k, b.v, b.q_offsets, b.q_offsets, b.max_q, b.max_q)
    out = tuple(torch.zeros_like(t) for t in (b.q, b.k, b.v))
    launches = [(band_label(name, lo, hi), backends.module(name), Band(lo, hi)) for name, lo, hi in LAUNCHES]
    for _ in range(3):  # compile, autotune, warm
        for _, module, band in launches:
            module.backward(call, b.dout, band, GDPAOptions(), out=out)
    torch.cuda.synchronize()
    for label, module, band in launches:
        torch.cuda.profiler.start()
        module.backward(call, b.dout, band, GDPAOptions(), out=out)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print(f"profiled {label}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child()
        return 0
    ncu = shutil.which("ncu")
    if not ncu:
        print("ncu not found on PATH")
        return 2
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    rep = Path("/tmp/bwd_bands.ncu-rep")
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--set", "full", "--import-source", "no",
           "--export", str(rep), "--force-overwrite", sys.executable, __file__, "--child"]  # fmt: skip
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    if proc.returncode != 0:
        return proc.returncode
    raw = subprocess.run([ncu, "--import", str(rep), "--csv", "--page", "raw", "--print-units", "base"],
                         capture_output=True, text=True)  # fmt: skip
    with gzip.open(out / "bwd_bands_ncu.csv.gz", "wt") as fh:
        fh.write(raw.stdout)
    rows = rows_of(raw.stdout)
    # the kernels in launch order: each backend adds helpers (the pack plan, the walk's order, dQ's postprocess)
    for i, r in enumerate(rows):
        print(f"{i:2d} {r.get('Kernel Name', '?')[:90]}")
    labels = ", ".join(band_label(*launch) for launch in LAUNCHES)
    summarize(rows, top=len(rows), shape=f"log-normal max {MAX_LEN} B {B} H {H} D {D} bf16 fast_gelu; {labels}")
    where_stalled(ncu, rep, "packed_bwd", "regex:packed_bwd_kernel", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
