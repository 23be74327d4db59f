"""Issue 30: a persistent forward whose one loop runs every (query tile, key block) of the short-key work.

Where keys are few (Meta's set 2 and production's short_kv: every sequence's K/V 256 rows; set 1 at L = 256),
fwd.py's program per (query tile, sequence·head) runs 2-8 key blocks between a cold start (offsets, then Q and
the first K/V) and an O store, so the pipeline fills and drains once per tile. Here a few programs
per SM walk a list of (sequence, query tile) items × heads, and the key loop has a constant trip count
(KV_BLOCKS = cdiv(max keys, BLOCK_N)): Triton's `tl.range(..., flatten=True)` (its FuseNestedLoops pass, the
persistent-matmul tutorial's loop) then makes the item and key loops one loop, so the loads of the next item's
key blocks are issued while this item's last blocks compute. A key block past a sequence's keys is masked, not
skipped (the flattened loop cannot vary its inner trip count), so this suits batches whose key lengths sit
near their max: set 2 (fixed 256), set 1 (fixed L), not a jagged self-attention band.

The item list is built on the device (cumsum + searchsorted over the per-sequence tile counts, no host sync);
its cost is timed apart. What it answers, on the GPU (CUDA-graph medians, L2 not flushed: the batch is ~0.3-2 GB):

    PYTHONPATH=. python docs/experiments/flat_fwd_gpu.py [--reps 50] [--only NAME ...] [--op] > $OUT/flat_fwd.jsonl

one JSON line a (shape, variant): the variant's median ms, TFLOP/s, its max error against fwd.py's output, and
`fwd.py autotuned` (what the op's Triton backend runs) beside it; with --op (FA4 installed, the Hopper kernels
in $GDPA_HOPPER_KERNEL_DIR) also `gdpa` as users call it (auto's plan). Variants: FLATTEN on/off × tiles, and
`kvres` where every key length is ≤ 256: one program per (sequence, head) holding K and V in shared memory
while it walks the query tiles (only Q loaded in its loop).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kernels.gdpa.activations import act_fwd_scaled, p_fold  # noqa: E402
from kernels.gdpa.bands import sequence_in_band  # noqa: E402

B, H, D = 1152, 4, 128


@triton.jit
def flat_fwd_kernel(
    Q,
    K,
    V,
    Out,
    q_offsets,
    kv_offsets,
    items,
    n_items_ptr,
    stride_qm,
    stride_qh,
    stride_km,
    stride_kh,
    stride_vm,
    stride_vh,
    stride_om,
    stride_oh,
    alpha,
    qk_scale,
    H: tl.constexpr,
    GROUPS: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    KV_BLOCKS: tl.constexpr,
    ACT: tl.constexpr,
    HW_TANH: tl.constexpr,
    FLATTEN: tl.constexpr,
    PRECISION: tl.constexpr,
):
    # items[j] = the j-th (sequence, query tile) as b * 65536 + tile; unit u = item u // H, head u % H, so the
    # heads of one item run on neighbouring programs at once and share nothing but L2 of its Q rows' lines
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    n_units = tl.load(n_items_ptr) * H
    o_scale = qk_scale * p_fold(alpha, ACT, Q.dtype.element_ty != tl.float16)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    for u in tl.range(pid, n_units, nprog, flatten=FLATTEN):
        it = tl.load(items + u // H)
        h = u % H
        b = it // 65536
        m0 = (it % 65536) * BLOCK_M
        q_start = tl.load(q_offsets + b)
        lq = tl.load(q_offsets + b + 1) - q_start
        kv_start = tl.load(kv_offsets + b)
        lk = tl.load(kv_offsets + b + 1) - kv_start
        hk = h // GROUPS
        offs_m = m0 + tl.arange(0, BLOCK_M)
        q = tl.load(
            Q + (q_start + offs_m)[:, None] * stride_qm + h * stride_qh + offs_d[None, :],
            mask=(offs_m < lq)[:, None],
            other=0.0,
        )
        acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
        for j in range(0, KV_BLOCKS):
            cols = j * BLOCK_N + offs_n
            kv_ok = cols < lk
            k = tl.load(
                K + (kv_start + cols)[:, None] * stride_km + hk * stride_kh + offs_d[None, :],
                mask=kv_ok[:, None],
                other=0.0,
            )
            v = tl.load(
                V + (kv_start + cols)[:, None] * stride_vm + hk * stride_vh + offs_d[None, :],
                mask=kv_ok[:, None],
                other=0.0,
            )
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
            p = act_fwd_scaled(s, alpha, ACT, HW_TANH, v.dtype != tl.float16)
            p = tl.where(kv_ok[None, :], p, 0.0)
            acc = tl.dot(p.to(v.dtype), v, acc, input_precision=PRECISION)
        tl.store(
            Out + (q_start + offs_m)[:, None] * stride_om + h * stride_oh + offs_d[None, :],
            (acc * o_scale).to(Out.dtype.element_ty),
            mask=(offs_m < lq)[:, None],
        )


@triton.jit
def kvres_fwd_kernel(
    Q,
    K,
    V,
    Out,
    q_offsets,
    kv_offsets,
    stride_qm,
    stride_qh,
    stride_km,
    stride_kh,
    stride_vm,
    stride_vh,
    stride_om,
    stride_oh,
    alpha,
    qk_scale,
    band_lo,
    band_hi,
    H: tl.constexpr,
    GROUPS: tl.constexpr,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HALF: tl.constexpr,
    ACT: tl.constexpr,
    HW_TANH: tl.constexpr,
    PRECISION: tl.constexpr,
):
    # one program per (sequence, head) with at most 2·HALF keys: K and V read once, in two halves that stay in
    # shared memory while the loop walks the sequence's query tiles (only Q is loaded in the loop, pipelined)
    b = tl.program_id(0) // H
    h = tl.program_id(0) % H
    q_start, lq, kv_start, lk, outside = sequence_in_band(q_offsets, kv_offsets, b, band_lo, band_hi)
    if outside:
        return
    hk = h // GROUPS
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, HALF)
    ok0 = offs_n < lk
    ok1 = offs_n + HALF < lk
    kv_rows = (kv_start + offs_n)[:, None]
    k0 = tl.load(K + kv_rows * stride_km + hk * stride_kh + offs_d[None, :], mask=ok0[:, None], other=0.0)
    v0 = tl.load(V + kv_rows * stride_vm + hk * stride_vh + offs_d[None, :], mask=ok0[:, None], other=0.0)
    k1 = tl.load(K + (kv_rows + HALF) * stride_km + hk * stride_kh + offs_d[None, :], mask=ok1[:, None], other=0.0)
    v1 = tl.load(V + (kv_rows + HALF) * stride_vm + hk * stride_vh + offs_d[None, :], mask=ok1[:, None], other=0.0)
    o_scale = qk_scale * p_fold(alpha, ACT, Q.dtype.element_ty != tl.float16)
    fold = v0.dtype != tl.float16
    for m0 in tl.range(0, lq, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        q_ok = (offs_m < lq)[:, None]
        q = tl.load(Q + (q_start + offs_m)[:, None] * stride_qm + h * stride_qh + offs_d[None, :], mask=q_ok, other=0.0)
        p = act_fwd_scaled(tl.dot(q, tl.trans(k0), input_precision=PRECISION), alpha, ACT, HW_TANH, fold)
        acc = tl.dot(tl.where(ok0[None, :], p, 0.0).to(v0.dtype), v0, input_precision=PRECISION)
        p = act_fwd_scaled(tl.dot(q, tl.trans(k1), input_precision=PRECISION), alpha, ACT, HW_TANH, fold)
        acc = tl.dot(tl.where(ok1[None, :], p, 0.0).to(v1.dtype), v1, acc, input_precision=PRECISION)
        o_ptrs = Out + (q_start + offs_m)[:, None] * stride_om + h * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, (acc * o_scale).to(Out.dtype.element_ty), mask=q_ok)


def kvres_forward(q, k, v, q_offsets, kv_offsets, tiles, band=(0, 1 << 30), out=None):
    """kvres_fwd_kernel over the sequences of `band` (min(Lq, Lk) in [lo, hi)), every one of them with ≤ 2·HALF
    keys (tiles: BLOCK_M, HALF, warps, stages)."""
    import torch

    bm, half, warps, stages = tiles[:4]
    out = torch.empty_like(q) if out is None else out
    extra = {"maxnreg": tiles[4]} if len(tiles) > 4 else {}
    kvres_fwd_kernel[((q_offsets.shape[0] - 1) * q.shape[1],)](
        q,
        k,
        v,
        out,
        q_offsets,
        kv_offsets,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        out.stride(0),
        out.stride(1),
        1.0,
        1.0,
        band[0],
        band[1],
        H=q.shape[1],
        GROUPS=q.shape[1] // k.shape[1],
        D=q.shape[2],
        BLOCK_M=bm,
        HALF=half,
        ACT="fast_gelu",
        HW_TANH=q.is_cuda,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=warps,
        num_stages=stages,
        **extra,
    )
    return out


def item_list(q_offsets, kv_offsets, block_m: int, max_q: int, band=(0, 1 << 30)):
    """(items, n_items) on the device: every (sequence, query tile) of the sequences of `band` in order, no host
    sync (the list is sized by the host's bound batch × cdiv(max_q, block_m); n_items is read by the kernel)."""
    import torch

    lq = (q_offsets[1:] - q_offsets[:-1]).to(torch.int64)
    key = torch.minimum(lq, (kv_offsets[1:] - kv_offsets[:-1]).to(torch.int64))
    tiles = torch.where((key >= band[0]) & (key < band[1]), (lq + block_m - 1) // block_m, 0)
    ends = torch.cumsum(tiles, 0)
    bound = int(q_offsets.shape[0] - 1) * triton.cdiv(max(max_q, 1), block_m)
    j = torch.arange(bound, device=q_offsets.device)
    b = torch.searchsorted(ends, j, right=True)
    b = torch.clamp(b, max=tiles.shape[0] - 1)
    first = ends[b] - tiles[b]
    items = (b * 65536 + (j - first)).to(torch.int32)
    return items, ends[-1:].to(torch.int32)


def flat_forward(q, k, v, q_offsets, kv_offsets, max_q, max_kv, tiles, flatten, per_sm, out=None, plan=None):
    """flat_fwd_kernel over `plan` (item_list's; the whole batch when None); max_kv bounds the keys of every
    sequence the plan holds (it sets the key loop's trip count)."""
    import torch

    bm, bn, warps, stages = tiles[:4]
    out = torch.empty_like(q) if out is None else out
    items, n_items = plan if plan is not None else item_list(q_offsets, kv_offsets, bm, max_q)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 1
    grid = (max(1, min(items.shape[0] * q.shape[1], sms * per_sm)),)
    extra = {"maxnreg": tiles[4]} if len(tiles) > 4 else {}
    flat_fwd_kernel[grid](
        q,
        k,
        v,
        out,
        q_offsets,
        kv_offsets,
        items,
        n_items,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        out.stride(0),
        out.stride(1),
        1.0,
        1.0,
        H=q.shape[1],
        GROUPS=q.shape[1] // k.shape[1],
        D=q.shape[2],
        BLOCK_M=bm,
        BLOCK_N=bn,
        KV_BLOCKS=triton.cdiv(max_kv, bn),
        ACT="fast_gelu",
        HW_TANH=q.is_cuda,
        FLATTEN=flatten,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        num_warps=warps,
        num_stages=stages,
        **extra,
    )
    return out


SHAPES = {  # configs/peers-h200.yaml's sets 1 and 2, configs/production.yaml's short_kv (seed 0, unsorted):
    # name -> (family, family params, kv rule, rule params, max_len)
    # (a sixth item, a band (lo, hi): only the sequences with lo <= min(Lq, Lk) < hi)
    "set2/L=2048": ("uniform_fill", {"fill": 1.0}, "fixed_kv", {"kv_len": 256}, 2048),
    "set2/L=512": ("uniform_fill", {"fill": 1.0}, "fixed_kv", {"kv_len": 256}, 512),
    "set1/L=256/fill=1.0": ("uniform_fill", {"fill": 1.0}, "fixed_kv", {}, 256),
    "set1/L=256/fill=0.5": ("uniform_fill", {"fill": 0.5}, "fixed_kv", {}, 256),
    "set1/L=512/fill=0.5": ("uniform_fill", {"fill": 0.5}, "fixed_kv", {}, 512),
    "short_kv/L=4096": ("lognormal", {"preset": "ml-20m"}, "fixed_kv", {"kv_len": 256}, 4096),
    # self-attention bands of production's log-normal max-2048 batch (PERF.md "Each backend over each band")
    "lognormal/L=2048 [0, 128)": ("lognormal", {"preset": "ml-20m"}, "self", {}, 2048, (0, 128)),
    "lognormal/L=2048 [128, 256)": ("lognormal", {"preset": "ml-20m"}, "self", {}, 2048, (128, 256)),
    "lognormal/L=2048 [0, 256)": ("lognormal", {"preset": "ml-20m"}, "self", {}, 2048, (0, 256)),
}
TILES = [(128, 64, 8, 2), (128, 64, 8, 3), (128, 32, 8, 3, 128), (128, 128, 8, 2), (64, 64, 4, 3, 168), (64, 128, 4, 2)]
KVRES_TILES = [
    (128, 128, 8, 2),
    (128, 128, 8, 1),
    (64, 128, 4, 2),
]  # ptxas sm_90a: 255 regs (4 B spilled), no spill, 4 B


def batch(family: str, params: dict, rule: str, rule_params: dict, max_len: int, band=None, *, device, dtype):
    """(q, k, v, q_offsets, kv_offsets, max_q, max_kv, flop, rows): max_kv and flop over the band's sequences,
    rows the band's query rows (a bool mask on the device)."""
    import numpy as np
    import torch

    from workloads.pairing import build_lengths

    lq, lk = build_lengths(family, params, rule, rule_params, batch_size=B, max_len=max_len, seed=0)
    lq, lk = np.asarray(lq, dtype=np.int64), np.asarray(lk, dtype=np.int64)
    g = torch.Generator(device=device).manual_seed(0)
    q = (torch.randn(int(lq.sum()), H, D, generator=g, device=device) * D**-0.25).to(dtype)
    k, v = ((torch.randn(int(lk.sum()), H, D, generator=g, device=device) * D**-0.25).to(dtype) for _ in range(2))
    qo = torch.tensor(np.concatenate([[0], np.cumsum(lq)]), dtype=torch.int32, device=device)
    ko = torch.tensor(np.concatenate([[0], np.cumsum(lk)]), dtype=torch.int32, device=device)
    key = np.minimum(lq, lk)
    inside = np.ones(B, bool) if band is None else (key >= band[0]) & (key < band[1])
    flop = 4.0 * H * D * float((lq[inside].astype(np.float64) * lk[inside]).sum())
    rows = torch.tensor(np.repeat(inside, lq), device=device)
    return q, k, v, qo, ko, int(lq.max()), int(lk[inside].max(initial=0)), flop, rows


def graph_ms(fn, reps: int) -> float:
    import statistics

    import torch

    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    times = []
    for _ in range(reps):
        a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        e.record()
        e.synchronize()
        times.append(a.elapsed_time(e))
    return statistics.median(times)


def measured(row: dict, run, ref, flop: float, reps: int, rows) -> dict:
    """row + the variant's max error against fwd.py and its CUDA-graph median; a config that does not compile or
    fit is a row with its error, not the end of the probe."""
    import torch

    try:
        out = run(out=None)
        torch.cuda.synchronize()
        row["max_err"] = float((out[rows].float() - ref[rows].float()).abs().max())
        ms = graph_ms(lambda: run(out=out), reps)
        row.update(ms=ms, tflops=flop / ms / 1e9)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return row


def shape_rows(name: str, workload: tuple, reps: int, per_sms, op: bool) -> None:
    import torch

    from kernels.gdpa import fwd as gdpa_fwd
    from kernels.gdpa.bands import WHOLE, Band
    from kernels.gdpa.call import GDPACall

    family, params, rule, rule_params, max_len, *banded = workload
    band = banded[0] if banded else None
    q, k, v, qo, ko, max_q, max_kv, flop, rows = batch(
        family, params, rule, rule_params, max_len, band, device=torch.device("cuda"), dtype=torch.bfloat16
    )
    call = GDPACall(q, k, v, qo, ko, max_q, int((ko[1:] - ko[:-1]).max()))
    whole = WHOLE if band is None else Band(*band)
    kernel_band = (0, 1 << 30) if band is None else band
    record: dict = {}
    ref = gdpa_fwd.forward(call, whole, record=record)
    ms = graph_ms(lambda: gdpa_fwd.forward(call, whole), reps)
    tiles = next(v["tiles"] for key, v in record.items() if key.startswith("fwd"))
    row = {"shape": name, "variant": "fwd.py autotuned", "tiles": tiles, "ms": ms}
    print(json.dumps(row | {"tflops": flop / ms / 1e9}), flush=True)

    def show(row, run):
        print(json.dumps(measured(row, run, ref, flop, reps, rows)), flush=True)

    if op and band is None:
        from kernels.gdpa import gdpa

        def public(out=None):
            with torch.no_grad():
                return gdpa(q, k, v, qo, ko, call.max_q, call.max_kv)

        show({"shape": name, "variant": "gdpa (auto)"}, public)
    for tiles in TILES:  # the same tiles on fwd.py: persistence and the flattened loop apart from the tile shape
        show({"shape": name, "variant": "fwd.py pinned", "tiles": list(tiles)},
             functools.partial(gdpa_fwd.forward, call, whole, tiles))  # fmt: skip
    plans = {}
    for tiles in TILES:
        bm = tiles[0]
        if bm not in plans:
            plans[bm] = item_list(qo, ko, bm, max_q, kernel_band)
            pms = graph_ms(functools.partial(item_list, qo, ko, bm, max_q, kernel_band), reps)
            print(json.dumps({"shape": name, "variant": f"item list BLOCK_M {bm}", "ms": pms}), flush=True)
        for flatten in (True, False):
            for per_sm in per_sms:
                row = {"shape": name, "variant": f"flat flatten={flatten} per_sm={per_sm}", "tiles": list(tiles)}
                show(row, functools.partial(flat_forward, q, k, v, qo, ko, max_q, max_kv, tiles, flatten, per_sm,
                                            plan=plans[bm]))  # fmt: skip
    for tiles in KVRES_TILES if max_kv <= 2 * 128 else []:
        show({"shape": name, "variant": "kvres", "tiles": list(tiles)},
             functools.partial(kvres_forward, q, k, v, qo, ko, tiles, kernel_band))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--per-sm", type=int, nargs="+", default=[2])
    ap.add_argument("--only", nargs="*", default=None, help="shape names (default: all)")
    ap.add_argument("--op", action="store_true", help="also the public op with its defaults")
    args = ap.parse_args()
    for name, workload in SHAPES.items():
        if args.only is None or name in args.only:
            shape_rows(name, workload, args.reps, args.per_sm, args.op)


if __name__ == "__main__":
    main()
