"""Issue 30: what the forward's Triton stage does with its SMs on short sequences, against the Hopper stage on the
long ones (Nsight Compute), on the production log-normal max-2048 batch.

The split forward's stages add up (docs/experiments/h200-2026-12-04/grid-share: Triton over [0, 1024) 0.3125 ms
for 38% of the work, the persistent Hopper kernel over [1024, inf) 0.2581 ms for 62%): the Triton stage runs at
half the Hopper stage's rate per FLOP, and v3.1 (kernels/gdpa/PERF.md) ruled out its empty programs. This profiles
one launch per band as the op's backends run it — Triton (kernels/gdpa/fwd.py, autotuned) over [0, 128),
[128, 512), [512, 1024) and [0, 1024), the persistent Hopper kernel over [512, 1024) and [1024, inf) — with
`ncu --set full --clock-control none`, and prints each kernel's pipes, issue slots, top stalls and instruction
counts (bwd_loop_ncu.py's summary), labelled by band in launch order. The raw metrics go to
$OUT/fwd_bands_ncu.csv.gz.

    # on the GPU machine, FA4 installed, the Hopper kernels in $GDPA_HOPPER_KERNEL_DIR (or compiled there):
    PYTHONPATH=. python docs/experiments/fwd_bands_ncu.py
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
from bwd_loop_ncu import rows_of, summarize

B, H, D, MAX_LEN = 1152, 4, 128, 2048
LAUNCHES = (  # (backend, lo, hi): one launch each, in this order
    ("triton", 0, 128),
    ("triton", 128, 512),
    ("triton", 512, 1024),
    ("triton", 0, 1024),
    ("hopper", 512, 1024),
    ("hopper", 1024, None),
)


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
    out = torch.empty_like(b.q)
    launches = [(f"{name} [{lo}, {'inf' if hi is None else hi})", backends.module(name), Band(lo, hi))
                for name, lo, hi in LAUNCHES]  # fmt: skip
    for _ in range(3):  # compile, autotune, warm
        for _, module, band in launches:
            module.forward(call, band, GDPAOptions(), out=out)
    torch.cuda.synchronize()
    for label, module, band in launches:
        torch.cuda.profiler.start()
        module.forward(call, band, GDPAOptions(), out=out)
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
    rep = Path("/tmp/fwd_bands.ncu-rep")
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--set", "full", "--import-source", "no",
           "--export", str(rep), "--force-overwrite", sys.executable, __file__, "--child"]  # fmt: skip
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    if proc.returncode != 0:
        return proc.returncode
    raw = subprocess.run([ncu, "--import", str(rep), "--csv", "--page", "raw", "--print-units", "base"],
                         capture_output=True, text=True)  # fmt: skip
    with gzip.open(out / "fwd_bands_ncu.csv.gz", "wt") as fh:
        fh.write(raw.stdout)
    rows = rows_of(raw.stdout)
    # the kernels in launch order: the Hopper launches add small helper kernels (their tile-count hint)
    for i, r in enumerate(rows):
        print(f"{i:2d} {r.get('Kernel Name', '?')[:90]}")
    labels = ", ".join(f"{n} [{lo}, {'inf' if hi is None else hi})" for n, lo, hi in LAUNCHES)
    shape = f"log-normal max {MAX_LEN} B {B} H {H} D {D} bf16 fast_gelu; launches {labels}"
    summarize(rows, top=len(rows), shape=shape)
    return 0


if __name__ == "__main__":
    sys.exit(main())
