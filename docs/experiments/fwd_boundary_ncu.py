"""Issue 30: where the persistent Hopper forward's warps wait at a tile boundary (Nsight Compute, per SASS instruction).

tile_cost_gpu.py measured a tile's own cost at ~2.8 key blocks (kernels/gdpa/PERF.md "A forward tile's own cost,
measured"), and hopper/NOTES.md "The persistent forward's tile boundary" lists what could make it: the first QK
GEMM waited at once and its activation, the last PV GEMM, the epilogue, the next Q's load (held back until the
epilogue's store has read O out of Q's buffer) and FA4's varlen tile decode (a binary search over the batch's
cumulative tile counts, ~11 dependent loads, then the per-sequence counts and a warp scan, once per tile in every
warp). Which of them the consumers actually wait in is a question the stall samples answer: one call of the op
pinned to `hopper` on a uniform batch of L = 512 (4 key blocks a tile: ~40% of a tile is its own) and of L = 2048
(16: the control), each profiled alone with `ncu --set full --clock-control none`, then ncu's source page of each
(every SASS instruction's warp-state samples) summed by opcode and by the boundary's parts, recognised from the
SASS: mbarrier waits (`SYNCS…TRYWAIT`: the Q, K, V pipelines), wgmma waits (`WARPGROUP.DEPBAR`), named barriers
(`BAR`), the decode's global loads (`LDG`, the only ones in the kernel: every operand moves by TMA), MUFU (the
activation), the TMA store and its wait (`UTMASTG`, `UTMACMDFLUSH`/`DEPBAR`). Pages to
$OUT/fwd_boundary_sass_L<L>.csv.gz, raw metrics to $OUT/fwd_boundary_ncu_L<L>.csv.gz.

    # on the GPU machine, FA4 installed, the Hopper kernels in $GDPA_HOPPER_KERNEL_DIR (h200_session.sh env):
    PYTHONPATH=. python docs/experiments/fwd_boundary_ncu.py [--lengths 512 2048]   # ~2 min
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
from bwd_loop_ncu import rows_of, source_rows, summarize

H, D = 4, 128
TOKENS = 1 << 19  # 524,288 query rows: 1,024 sequences of 512, 256 of 2048 — thousands of tiles, ~1 ms a call
KERNEL = "regex:GDPAForwardSm90Persistent"

# The boundary's parts, by the SASS opcode a warp waits at (the first match wins; the rest is "other")
PARTS = (
    ("mbarrier wait (Q/K/V pipelines, the O store's turn)", ("SYNCS",)),
    ("wgmma wait", ("WARPGROUP.DEPBAR", "WARPGROUP.ARRIVE", "HGMMA", "WARPGROUP")),
    ("named barrier", ("BAR",)),
    ("global load (the tile decode)", ("LDG",)),
    ("shuffle/vote (the decode's warp scan)", ("SHFL", "VOTE", "POPC")),
    ("TMA store and its wait", ("UTMASTG", "UTMACMDFLUSH", "UBLKCP", "DEPBAR")),
    ("MUFU (the activation)", ("MUFU",)),
    ("FP32 / ALU pointwise", ("FMUL", "FFMA", "FADD", "FMNMX", "F2FP", "HFMA2", "HMUL2", "FSEL", "FSETP")),
)


def child(length: int) -> None:
    import torch

    from kernels.gdpa import GDPAOptions, gdpa
    from workloads.batch import make_batch

    batch = TOKENS // length
    b = make_batch([length] * batch, [length] * batch, H=H, Hkv=H, D=D, dtype=torch.bfloat16, device="cuda", seed=0)
    options = GDPAOptions(backend="hopper")

    def call():
        with torch.no_grad():
            return gdpa(b.q, b.k, b.v, b.q_offsets, b.q_offsets, length, length, options=options)

    for _ in range(3):  # compile, warm
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"profiled hopper, {batch} sequences of {length}", flush=True)


def part_of(source: str) -> str:
    """The boundary part a SASS line's opcode belongs to (its predicate, `@P0` / `@!P1`, skipped)."""
    words = source.split()
    op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "?")
    for name, prefixes in PARTS:
        if any(op.startswith(p) for p in prefixes):
            return name
    return "other"


def by_part(rows: list[dict], stall: str) -> dict[str, float]:
    """Stall samples summed by boundary part, as shares of all samples."""

    def samples(r):
        try:
            return float(str(r.get(stall) or 0).replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(samples(r) for r in rows) or 1.0
    parts: dict[str, float] = {}
    for r in rows:
        name = part_of((r.get("Source") or "").strip())
        parts[name] = parts.get(name, 0.0) + samples(r) / total
    return dict(sorted(parts.items(), key=lambda kv: -kv[1]))


def profile(ncu: str, length: int, out: Path) -> dict[str, float] | None:
    rep = Path(f"/tmp/fwd_boundary_L{length}.ncu-rep")
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--set", "full", "--import-source", "no",
           "--kernel-name", KERNEL, "--export", str(rep), "--force-overwrite",
           sys.executable, __file__, "--child", str(length)]  # fmt: skip
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    print(proc.stdout[-1500:], proc.stderr[-1500:])
    if proc.returncode != 0:
        return None
    raw = subprocess.run([ncu, "--import", str(rep), "--csv", "--page", "raw", "--print-units", "base"],
                         capture_output=True, text=True)  # fmt: skip
    with gzip.open(out / f"fwd_boundary_ncu_L{length}.csv.gz", "wt") as fh:
        fh.write(raw.stdout)
    summarize(rows_of(raw.stdout), top=1, shape=f"uniform L {length}, H {H}, D {D}, bf16 fast_gelu, hopper")
    page = subprocess.run([ncu, "--import", str(rep), "--page", "source", "--csv", "--print-source", "sass",
                           "--kernel-name", KERNEL], capture_output=True, text=True)  # fmt: skip
    with gzip.open(out / f"fwd_boundary_sass_L{length}.csv.gz", "wt") as fh:
        fh.write(page.stdout)
    rows, stall = source_rows(page.stdout)
    if not rows or stall is None:
        print(f"L {length}: no per-instruction stall samples ({page.stderr.strip()[-300:] or 'empty source page'})")
        return None
    return by_part(rows, stall)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    args = p.parse_args()
    if args.child:
        child(args.child)
        return 0
    ncu = shutil.which("ncu")
    if not ncu:
        print("ncu not found on PATH")
        return 2
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    table = {length: profile(ncu, length, out) for length in args.lengths}
    names = [name for name, _ in PARTS] + ["other"]
    print("\nwarp stall samples by the boundary's part (share of all samples in the persistent forward):")
    print(f"  {'part':55s}" + "".join(f"{'L ' + str(n):>10s}" for n in args.lengths))
    for name in names:
        cells = [(table[n] or {}).get(name) for n in args.lengths]
        print(f"  {name:55s}" + "".join(f"{c:10.1%}" if c is not None else f"{'—':>10s}" for c in cells))
    return 0 if all(table.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
