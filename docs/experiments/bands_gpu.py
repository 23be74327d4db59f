"""Issue 26's cross-check of the harness's length bands: the same bands timed by an independent script.

The harness (`bands:` in configs/production.yaml, bench/profiling/bands.py) splits a case's batch by min(Lq, Lk), builds
each band's sub-batch and times it with its own timer. This script shares only the lengths with it (drawn
by workloads.pairing.build_lengths, as the config draws them): it builds its own tensors, calls the public
GDPA op and FlashAttention-4 directly, and times with `triton.testing.do_bench` (median, L2 flushed). The
bar: every band's time within 10% of the harness's.

    # on the GPU machine (writes $OUT/bands_gpu.json, prints a table)
    PYTHONPATH=. python docs/experiments/bands_gpu.py [--rep 100]
    # anywhere, afterwards: each band against a harness run's results.json (exit 1 if any is > 10% apart)
    python docs/experiments/bands_gpu.py --compare RUN_DIR/results.json --against $OUT/bands_gpu.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from kernels.gdpa import gdpa  # noqa: E402
from workloads.pairing import build_lengths  # noqa: E402

B, H, D = 1152, 4, 128
EDGES = (128, 512, 1024)  # configs/production.yaml's bands
WORKLOADS = {  # harness workload name -> (family, params), self-attention, max length 2048, seed 0, unsorted
    "lognormal/L=2048/sort=False": ("lognormal", {"preset": "ml-20m"}),
    "uniform/L=2048": ("uniform_fill", {"fill": 1.0}),
}
PROVIDERS = ("gdpa", "fa4")
MODES = ("fwd", "bwd")
TOLERANCE = 0.10


def band_label(lo: int, hi: int | None) -> str:
    return f"≥{lo}" if hi is None else (f"<{hi}" if lo == 0 else f"{lo}–{hi - 1}")


def bands(q: np.ndarray, k: np.ndarray):
    key = np.minimum(q, k)
    bounds = [0, *EDGES]
    for lo, hi in zip(bounds, [*EDGES, None], strict=True):
        idx = np.flatnonzero((key >= lo) & (key < hi if hi is not None else True))
        yield band_label(lo, hi), idx


def make(q_len: np.ndarray, k_len: np.ndarray, device, seed: int = 0):
    g = torch.Generator(device=device).manual_seed(seed)

    def randn(n):
        return (torch.randn(n, H, D, generator=g, device=device) * D**-0.25).to(torch.bfloat16)

    def offsets(lengths):
        return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device=device)

    nq, nk = int(q_len.sum()), int(k_len.sum())
    return dict(
        q=randn(nq), k=randn(nk), v=randn(nk), dout=randn(nq),
        qo=offsets(q_len), ko=offsets(k_len), max_q=int(q_len.max()), max_k=int(k_len.max()),
    )  # fmt: skip


def call(provider: str, t: dict):
    if provider == "gdpa":
        return lambda q, k, v: gdpa(q, k, v, t["qo"], t["ko"], t["max_q"], t["max_k"], activation="fast_gelu")
    from flash_attn.cute import flash_attn_varlen_func  # optional: the fa4 extra

    def fa4(q, k, v):
        out = flash_attn_varlen_func(
            q, k, v, cu_seqlens_q=t["qo"], cu_seqlens_k=t["ko"], max_seqlen_q=t["max_q"],
            max_seqlen_k=t["max_k"], softmax_scale=1 / math.sqrt(D), causal=False,
        )  # fmt: skip
        return out[0] if isinstance(out, (tuple, list)) else out

    return fa4


def timed(provider: str, mode: str, t: dict, rep: int) -> float:

    op = call(provider, t)
    if mode == "fwd":

        def fn():
            with torch.no_grad():
                return op(t["q"], t["k"], t["v"])
    else:
        leaves = [x.detach().clone().requires_grad_(True) for x in (t["q"], t["k"], t["v"])]
        out = op(*leaves)

        def fn():
            return torch.autograd.grad(out, leaves, t["dout"], retain_graph=True)

    fn()  # compile / autotune / the op's measured choice, untimed
    torch.cuda.synchronize()
    return float(do_bench(fn, warmup=25, rep=rep, return_mode="median"))


def measure(rep: int) -> dict:
    device = torch.device("cuda", 0)
    out = {"gpu": torch.cuda.get_device_name(0), "rep_ms": rep, "edges": list(EDGES), "cases": {}}
    for name, (family, params) in WORKLOADS.items():
        q, k = build_lengths(family, params, "self", {}, batch_size=B, max_len=2048, seed=0)
        q, k = np.asarray(q, dtype=np.int64), np.asarray(k, dtype=np.int64)
        whole = make(q, k, device)
        for mode in MODES:
            for provider in PROVIDERS:
                set_name, rest = name.split("/", 1)
                cid = f"{set_name}/{mode}/{rest}/{provider}"
                t0 = time.perf_counter()
                rec = {"whole_ms": timed(provider, mode, whole, rep), "bands": []}
                for label, idx in bands(q, k):
                    ms = timed(provider, mode, make(q[idx], k[idx], device), rep) if len(idx) else None
                    rec["bands"].append({"label": label, "n_seqs": len(idx), "ms": ms})
                rec["wall_s"] = time.perf_counter() - t0
                out["cases"][cid] = rec
                print(cid, json.dumps(rec), flush=True)
    return out


def compare(results_json: Path, ours_json: Path) -> int:
    harness = {c["id"]: c for c in json.loads(results_json.read_text())["cases"] if c.get("bands")}
    ours = json.loads(ours_json.read_text())["cases"]
    worst, lines = 0.0, ["| case | band | harness ms | script ms | ratio |", "|---|---|---|---|---|"]
    for cid, rec in ours.items():
        rows = {r["label"]: r for r in (harness.get(cid) or {}).get("bands", {}).get("rows", [])}
        for b in rec["bands"]:
            h = rows.get(b["label"], {}).get("median_ms")
            if h is None or b["ms"] is None:
                continue
            ratio = h / b["ms"]
            worst = max(worst, abs(ratio - 1))
            lines.append(f"| {cid} | {b['label']} | {h:.4g} | {b['ms']:.4g} | {ratio:.3f} |")
    print("\n".join(lines))
    verdict = "within" if worst <= TOLERANCE else "NOT within"
    print(f"\nworst band {100 * worst:.1f}% apart: {verdict} {100 * TOLERANCE:.0f}%")
    return 0 if worst <= TOLERANCE and len(lines) > 2 else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rep", type=int, default=100, help="do_bench's time budget per measurement, ms")
    p.add_argument("--compare", type=Path, help="a harness run's results.json to compare with")
    p.add_argument("--against", type=Path, help="with --compare: this script's bands_gpu.json")
    a = p.parse_args()
    if a.compare:
        return compare(a.compare, a.against)
    data = measure(a.rep)
    dest = Path(os.environ.get("OUT", ".")) / "bands_gpu.json"
    dest.write_text(json.dumps(data, indent=1))
    print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
