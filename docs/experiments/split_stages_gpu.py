"""Issue 30: where a split forward's time goes beyond its stages' own (PERF.md "What the log-normal forward bar
needs, in parts": graph 0.580 ms against 0.548 for the bands run alone, and the events 0.026 ms over the graph).

For each batch, `auto`'s forward plan (read from the op's record) is timed as users call it and taken apart,
every variant in interleaved rounds (the power cap moves the clock between them, so each round times them all):

- `auto`: the op with its defaults (the plan its first call chose);
- `sequential`: that plan pinned with `concurrent_stages=False` (the stages one after the other on one stream);
- `<backend>[lo, hi)`: each stage alone, its backend called directly over its band (what the stage costs
  when nothing shares the SMs with it);
- `  <backend> piece [lo, hi)`: a stage that spans several of the harness's bands (edges 128, 512, 1024), by the same
  backend over each of them, and the packed backend over [0, 128): one tile configuration over the bands against
  each its own;
- `hopper`: the Hopper backend over the whole batch (one persistent launch);
- with `--matrix`: `  <backend> band [lo, hi)`, Triton and Hopper over each of the harness's bands and the packed
  backend over [0, 128), each alone: which backend is slow where (every row with a band also gets its TFLOP/s
  from the band's work, 4·H·D·Σ L² over its sequences).

Each variant's device time is its CUDA-graph replay (bench.case.graph_timing: no host), beside the event-timed
median (triton's do_bench, L2 flushed): events − graph is host time the GPU waited for. What it separates:
sum of the stages alone against `sequential` (the cost of a second launch: its tail and the gap), `sequential`
against `auto` (what running the stages at once wins back), and events against graph.

    # on the GPU machine, FA4 installed, the Hopper kernels in $GDPA_HOPPER_KERNEL_DIR (or compiled there):
    PYTHONPATH=. python docs/experiments/split_stages_gpu.py [--rounds 3] [--rep 100] [--only lognormal/L=2048 ...] \
        [--matrix]
    # -> $OUT/split_stages.json, rewritten after each batch
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

B, H, D = 1152, 4, 128
BAND_EDGES = (128, 512, 1024)  # configs/production.yaml's `bands.edges`
WORKLOADS = {  # configs/production.yaml's sets (self-attention, seed 0, unsorted): name -> (family, params, max_len)
    "lognormal/L=2048": ("lognormal", {"preset": "ml-20m"}, 2048),
    "lognormal/L=4096": ("lognormal", {"preset": "ml-20m"}, 4096),
    "spike/L=4096": ("spike", {"p": 0.02, "base": "lognormal", "preset": "ml-20m"}, 4096),
    "uniform/L=2048": ("uniform_fill", {"fill": 1.0}, 2048),
}


def batch(family: str, params: dict, max_len: int, device):
    import numpy as np
    import torch

    from workloads.pairing import build_lengths

    lengths, _ = build_lengths(family, params, "self", {}, batch_size=B, max_len=max_len, seed=0)
    lengths = np.asarray(lengths, dtype=np.int64)
    g = torch.Generator(device=device).manual_seed(0)
    n = int(lengths.sum())
    q, k, v = ((torch.randn(n, H, D, generator=g, device=device) * D**-0.25).to(torch.bfloat16) for _ in range(3))
    offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=device)
    return q, k, v, offsets, int(lengths.max())


def variants(q, k, v, offsets, max_len, matrix: bool = False) -> tuple[dict, list]:
    """{name: callable} and auto's stages [(backend, lo, hi)] for one batch (auto's first call made here)."""
    import torch

    from kernels.gdpa import GDPAOptions, gdpa
    from kernels.gdpa import backends as gdpa_backends
    from kernels.gdpa.bands import Band
    from kernels.gdpa.call import GDPACall

    record: dict = {}
    with torch.no_grad():
        gdpa(q, k, v, offsets, offsets, max_len, max_len, record=record)
    stages = [(s["backend"], *_bounds(s["band"])) for s in record["dispatch"]["fwd"]["stages"]]
    plan = tuple((b, lo, hi) for b, lo, hi in stages)
    pinned = GDPAOptions(fwd_plan=plan) if len(plan) > 1 else None

    def op(options=None):
        def fn():
            with torch.no_grad():
                return gdpa(q, k, v, offsets, offsets, max_len, max_len, options=options)

        return fn

    out = {"auto": op()}
    if pinned is not None:
        out["sequential"] = op(dataclasses.replace(pinned, concurrent_stages=False))
        call = GDPACall(q, k, v, offsets, offsets, max_len, max_len)
        for name, lo, hi in stages:
            out[f"{name}[{lo}, {'inf' if hi is None else hi})"] = _alone(
                gdpa_backends.module(name), call, Band(lo, hi), pinned
            )
            # a stage over several of the harness's bands, in pieces by the same backend: one tile configuration
            # over the bands against each its own (PERF.md: the combining cost's first explanation)
            cuts = [e for e in BAND_EDGES if lo < e and (hi is None or e < hi)]
            if cuts:
                for a, b in itertools.pairwise([lo, *cuts, hi]):
                    label = f"  {name} piece [{a}, {'inf' if b is None else b})"
                    out[label] = _alone(gdpa_backends.module(name), call, Band(a, b), pinned)
        if stages[0][1] == 0 and stages[0][0] != "packed" and "packed" in gdpa_backends.NAMES:
            out["  packed piece [0, 128)"] = _alone(gdpa_backends.module("packed"), call, Band(0, 128), pinned)
    out["hopper"] = op(GDPAOptions(backend="hopper"))
    if matrix:
        call = GDPACall(q, k, v, offsets, offsets, max_len, max_len)
        for a, b in itertools.pairwise([0, *BAND_EDGES, None]):
            for name in ("triton", "hopper", "packed"):
                if name == "packed" and a != 0:
                    continue  # its tiles hold several sequences of < 128 tokens
                label = f"  {name} band [{a}, {'inf' if b is None else b})"
                out[label] = _alone(gdpa_backends.module(name), call, Band(a, b), GDPAOptions())
    return out, stages


def band_tflop(lengths, name: str) -> float:
    """The forward's TFLOP of the sequences a row covers (its `[lo, hi)`, or the whole batch)."""
    import numpy as np

    lo, hi = _bounds(name[name.index("[") :].strip()) if "[" in name else (0, None)
    inside = (lengths >= lo) & (lengths < (np.inf if hi is None else hi))
    return 4 * H * D * float((lengths[inside].astype(np.float64) ** 2).sum()) / 1e12


def _alone(backend, call, band, options):
    """One stage's backend over its band, nothing else on the GPU beside it."""
    import torch

    def fn():
        with torch.no_grad():
            return backend.forward(call, band, options)

    return fn


def _bounds(band: str) -> tuple[int, int | None]:
    """'[128, 512)' or '[1024, inf)' -> (lo, hi)."""
    lo, hi = band.strip("[)").split(",")
    return int(lo), None if hi.strip() == "inf" else int(hi)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rep", type=int, default=100, help="do_bench's rep (ms) per variant and round")
    ap.add_argument("--matrix", action="store_true", help="also each backend over each band alone")
    ap.add_argument("--only", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS), help="these batches")
    args = ap.parse_args()
    import torch
    from triton.testing import do_bench

    from bench.case.graph_timing import graph_time
    from bench.case.timing import l2_flush_buffer

    device = torch.device("cuda", 0)
    flush = l2_flush_buffer(device)
    result = {"gpu": torch.cuda.get_device_name(0), "rounds": args.rounds, "rep_ms": args.rep, "cases": {}}
    out = Path(os.environ.get("OUT", "/tmp/out"))
    out.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        family, params, max_len = WORKLOADS[name]
        q, k, v, offsets, longest = batch(family, params, max_len, device)
        fns, stages = variants(q, k, v, offsets, longest, args.matrix)
        lengths = offsets.diff().cpu().numpy()
        for fn in fns.values():
            fn()  # compiles, autotunes
        torch.cuda.synchronize()
        events: dict[str, list] = {n: [] for n in fns}
        graphs: dict[str, list] = {n: [] for n in fns}
        for _ in range(args.rounds):
            for n, fn in fns.items():
                ms = float(do_bench(fn, warmup=25, rep=args.rep, return_mode="median"))
                events[n].append(ms)
                graphs[n].append(graph_time(fn, device, flush, ms)["ms"])
        rows = {
            n: {
                "events_ms": statistics.median(events[n]),
                "graph_ms": _median(graphs[n]),
                "rounds": events[n],
                "tflop": band_tflop(lengths, n),
            }
            for n in fns
        }
        alone = [r["graph_ms"] for n, r in rows.items() if "[" in n and not n.startswith("  ")]
        summary = {
            "stages": stages,
            "stages_alone_sum_graph_ms": sum(alone) if alone and None not in alone else None,
            "rows": rows,
        }
        result["cases"][name] = summary
        print(f"\n{name}: auto's plan {' + '.join(f'{b}[{lo}, {hi})' for b, lo, hi in stages)}")
        print(f"  {'variant':<28} {'events ms':>10} {'graph ms':>10} {'TFLOP/s':>8}")
        for n, r in rows.items():
            g = r["graph_ms"]
            rate = f"{r['tflop'] / g * 1e3:.0f}" if g else "n/a"
            print(f"  {n:<28} {r['events_ms']:>10.4f} {f'{g:.4f}' if g is not None else 'n/a':>10} {rate:>8}")
        if summary["stages_alone_sum_graph_ms"] is not None:
            print(f"  {'stages alone, summed':<28} {'':>10} {summary['stages_alone_sum_graph_ms']:>10.4f}")
        # after each batch: a call cut off by the device's time limit keeps the batches done
        (out / "split_stages.json").write_text(json.dumps(result, indent=1))
    return 0


def _median(values: list) -> float | None:
    known = [x for x in values if x is not None]
    return statistics.median(known) if known else None


if __name__ == "__main__":
    sys.exit(main())
