"""Issue 30: what a Hopper forward tile costs beyond its key blocks (kernels/gdpa/PERF.md "Each backend over each band":
the persistent forward runs [512, 1024) of log-normal 2048 at 369 TFLOP/s and [1024, inf) at 529, and the own-O patch,
which took the Q wait off each tile boundary, moved nothing — "the tile boundary's cost is the epilogue and the next
tile's first, unoverlapped QK block" is the hypothesis left to measure before building on it).

Uniform batches of one length L (self-attention, H 4, D 128, bf16, fast_gelu), the batch size set so that every
batch holds about the same score area (B·L² = WORK; below L = 256 less, MAX_TOKENS): a tile of L has n = L/128 key
blocks. Under a model `time = tiles / SMs × (a + b·n)`, per tile `time·SMs/tiles` is linear in
n: the slope b is a key block's cost and the intercept a the tile's own (prologue, epilogue, the unoverlapped first
and last block), in µs of one SM and in key blocks (a/b). Timed for the op pinned to `hopper` (the persistent forward,
longest first), to `triton`, and for FA4's own forward (softmax, one CTA per tile: its tile cost for reference), each
as CUDA-graph replays (bench.case.graph_timing: no host time), interleaved in rounds (the power cap moves the clock);
NVML's SM clock read between replays is kept beside each figure. A "tile" is 128 query rows for all three
(Triton's autotuner may run 64-row tiles: its figures are per 128 rows, its intercept two of its tiles' own cost).

    # on the GPU machine, FA4 installed, the Hopper kernels in $GDPA_HOPPER_KERNEL_DIR (h200_session.sh env):
    PYTHONPATH=. python docs/experiments/tile_cost_gpu.py [--lengths 128 256 512 1024 2048] [--rounds 3]
    # -> $OUT/tile_cost.json and a table; ~2 min with the compiles

`--pass bwd` (2026-12-07, twenty-eighth session: hopper/NOTES.md "The persistent backward's tile boundary"): the
same for the Hopper backward's main kernel and its dQ postprocess, called as the backend calls them
(`launch.backward`), as the persistent walk (`walk`) and FA4's grid (`grid`); a tile is a 128-row key tile and
its steps are 64-row query blocks, so the intercept is a key tile's own cost (prologue, epilogue, the next tile's
loads under `KV_FREE`) in µs of one SM and in query blocks. -> $OUT/tile_cost_bwd.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

H, D, TILE = 4, 128, 128
NAMES = ("hopper", "triton", "fa4")  # providers() keys, in the table's order
WORK = 320 * 2048**2  # B·L²: B 320 at L 2048 (over FA4's 256-sequence scheduler-hint threshold at every L)


MAX_TOKENS = 6_000_000  # ~6 GB a tensor at H 4, D 128: q, k, v and three outputs stay far inside an H100's 80 GB


MAX_ROWS = 65535 // H  # the 2026-12-07 H100 run's batches (rows on grid y alone before the rows fold landed)


def batch_size(length: int, most: int = MAX_ROWS) -> int:
    return max(1, min(WORK // length**2, MAX_TOKENS // length, most))


def fit(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares y = a + b·x over (x, y); None with fewer than two distinct x."""
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def providers(q, k, v, offsets, length):
    """{name: fn} for one batch: the op pinned to each backend, and FA4's forward."""
    import torch
    from flash_attn.cute import flash_attn_varlen_func

    from kernels.gdpa import GDPAOptions, gdpa

    def op(backend):
        options = GDPAOptions(backend=backend)

        def fn():
            with torch.no_grad():
                return gdpa(q, k, v, offsets, offsets, length, length, options=options)

        return fn

    def fa4():
        with torch.no_grad():
            return flash_attn_varlen_func(
                q, k, v, cu_seqlens_q=offsets, cu_seqlens_k=offsets, max_seqlen_q=length, max_seqlen_k=length
            )

    return {"hopper": op("hopper"), "triton": op("triton"), "fa4": fa4}


BWD_NAMES, BWD_STEP = ("walk", "grid"), 64  # the backward's providers; its query block (the plan's tile_m at D 128)


def backward_providers(q, k, v, offsets, length):
    """{name: fn} for one batch: the Hopper backward as the backend launches it, persistent walk and FA4's grid."""
    import torch

    from kernels.gdpa.bands import WHOLE
    from kernels.gdpa.call import GDPACall
    from kernels.gdpa.hopper import launch

    call = GDPACall(q, k, v, offsets, offsets, length, length, "fast_gelu", 1.0, 1.0, False)
    do = torch.randn_like(q)
    grads = tuple(torch.empty_like(t) for t in (q, k, v))

    def walk(persistent):
        return lambda: launch.backward(call, do, WHOLE, out=grads, persistent=persistent)

    return {"walk": walk(True), "grid": walk(False)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 384, 512, 768, 1024, 2048])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pass", dest="mode", choices=("fwd", "bwd"), default="fwd")
    args = ap.parse_args()
    bwd = args.mode == "bwd"
    names, step = (BWD_NAMES, BWD_STEP) if bwd else (NAMES, TILE)
    from kernels.gdpa.hopper.longest_first import LONGEST_FIRST_MAX_BATCH

    json_name = "tile_cost_bwd.json" if bwd else "tile_cost.json"
    import torch
    from triton.testing import do_bench

    from bench.case.graph_timing import graph_time
    from bench.case.timing import l2_flush_buffer
    from bench.monitor.nvml import NvmlDevice

    device = torch.device("cuda", 0)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flush = l2_flush_buffer(device)
    nvml = NvmlDevice(0)

    def clock():
        mhz = nvml.read_sm_clock()
        return None if mhz < 0 else mhz  # MISSING (-1): not read

    out_dir = Path(os.environ.get("OUT", "/tmp/out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"gpu": torch.cuda.get_device_name(0), "sms": sms, "work": WORK, "rows": {}}
    for length in args.lengths:
        b = batch_size(length, LONGEST_FIRST_MAX_BATCH if bwd else MAX_ROWS)  # bwd: the walk longest first throughout
        g = torch.Generator(device=device).manual_seed(0)
        n = b * length
        q, k, v = ((torch.randn(n, H, D, generator=g, device=device) * D**-0.25).to(torch.bfloat16) for _ in range(3))
        offsets = torch.arange(0, n + 1, length, dtype=torch.int32, device=device)
        fns, errors = {}, {}
        for name, fn in (backward_providers if bwd else providers)(q, k, v, offsets, length).items():
            try:
                fn()  # compiles, autotunes
                torch.cuda.synchronize()
                fns[name] = fn
            except Exception as exc:  # recorded, and the other providers go on
                errors[name] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"L {length} {name}: {errors[name]}", flush=True)
        times: dict[str, list] = {name: [] for name in fns}
        clocks: dict[str, list] = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                ms = float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
                rec = graph_time(fn, device, flush, ms, clock=clock)
                times[name].append(rec["ms"] if rec["ms"] is not None else ms)
                clocks[name].append(rec.get("sm_clock_mhz"))
        tiles = b * H * (length // TILE + (length % TILE > 0))  # query tiles (fwd) or key tiles (bwd): 128 rows
        blocks = length / step  # a tile's steps: 128-row key blocks (fwd), 64-row query blocks (bwd)
        row = {"B": b, "tiles": tiles, "key_blocks_per_tile": blocks, "errors": errors}
        for name in fns:
            ms = statistics.median(times[name])
            mhz = [c for c in clocks[name] if c]
            per_tile_us = ms * 1e3 * sms / tiles  # one SM's µs per tile
            row[name] = {
                "ms": ms,
                "rounds_ms": times[name],
                "mhz": statistics.median(mhz) if mhz else None,
                "per_tile_us": per_tile_us,
                "tflops": (2.5 if bwd else 1.0) * 4 * H * D * b * length**2 / ms / 1e9,
            }
        result["rows"][str(length)] = row
        del q, k, v, fns
        torch.cuda.empty_cache()
        (out_dir / json_name).write_text(json.dumps(result, indent=1))

    print(f"\n{result['gpu']}, {sms} SMs, B·L² = {WORK}: per tile = ms × SMs / tiles (µs of one SM)")
    print(f"  {'L':>5} {'B':>6} {'blocks':>6}" + "".join(f"{n + ' ms':>12}{'µs/tile':>9}{'TF/s':>6}" for n in names))
    for length, row in result["rows"].items():
        cells = "".join(
            f"{row[n]['ms']:>12.3f}{row[n]['per_tile_us']:>9.2f}{row[n]['tflops']:>6.0f}"
            if n in row
            else f"{'error':>27}"
            for n in names
        )
        print(f"  {length:>5} {row['B']:>6} {row['key_blocks_per_tile']:>6.1f}{cells}")
    for name in names:
        line = fit([(r["key_blocks_per_tile"], r[name]["per_tile_us"]) for r in result["rows"].values() if name in r])
        if line:
            a, b = line
            result.setdefault("fits", {})[name] = {"tile_us": a, "block_us": b, "tile_in_blocks": a / b if b else None}
            unit = "query block" if bwd else "key block"
            print(f"  {name}: a tile {a:.2f} µs + {b:.2f} µs a {unit} (a tile's own cost = {a / b:.2f} {unit}s)")
    (out_dir / json_name).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
