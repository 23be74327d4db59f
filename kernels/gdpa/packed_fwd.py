"""Packed GDPA forward: the sequences of a pack plan (packed_plan.py) as block-diagonal tiles.

A unit of work is (pack, head, query sub-tile of BLOCK_M rows). A pack's rows are one block of the batch
on each side, so the loads are fwd.py's; each query row knows the key rows [k_start, k_end) of its own
sequence (computed once per unit), the mask keeps a score only inside that range (causal: also left of the
diagonal), and the key loop runs only the BLOCK_N blocks that some row of the sub-tile needs. As in fwd.py
there is no running max: each key block's contribution is final. Every query row of a packed sequence is
written exactly once (zeros where it has no keys); rows of other sequences are never touched.

The grid is persistent: a few programs per SM take units from a counter (one atomic per unit, issued
before the unit's work so its latency hides), so the launch costs no empty programs for the packs the
host cannot count, and it fills the SMs whatever occupancy the autotuned config reaches.
"""

import functools

import torch
import triton
import triton.language as tl

from kernels.gdpa import launch
from kernels.gdpa.activations import act_fwd_scaled, p_fold
from kernels.gdpa.call import GDPACall
from kernels.gdpa.grid_math import next_power_of_2
from kernels.gdpa.packed_plan import MAXSEQ, PackPlan, load_pack, partner_ranges


@triton.jit
def _fwd_unit(
    Q,
    K,
    V,
    Out,
    Plan,
    p,
    h,
    sub,
    max_packs,
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
    GROUPS: tl.constexpr,
    D: tl.constexpr,
    MAXSEQ: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACT: tl.constexpr,
    HW_TANH: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):
    q0, k0, q_lo, q_hi, k_lo, k_hi = load_pack(Plan, p, max_packs, MAXSEQ)
    n_q = tl.max(q_hi, axis=0)
    n_k = tl.max(k_hi, axis=0)
    m0 = sub * BLOCK_M
    if m0 < n_q:
        offs_m = m0 + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, D)
        q_ok = offs_m < n_q
        # each query row's keys: the pack rows [k_start, k_end) of its sequence, computed once per unit
        k_start, k_end = partner_ranges(offs_m, q_lo, q_hi, k_lo, k_hi)
        lo = tl.min(tl.where(q_ok, k_start, 1 << 30), axis=0)
        hi = tl.max(k_end, axis=0)
        if CAUSAL:
            hi = tl.minimum(hi, m0 + BLOCK_M)  # self-attention: a sequence's key rows are its query rows
        hk = h // GROUPS
        q_rows = (q0 + offs_m)[:, None]
        q = tl.load(Q + q_rows * stride_qm + h * stride_qh + offs_d[None, :], mask=q_ok[:, None], other=0.0)
        acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
        for n0 in range((lo // BLOCK_N) * BLOCK_N, hi, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            kv_rows = (k0 + offs_n)[:, None]
            kv_ok = (offs_n < n_k)[:, None]  # a block past the pack's keys must not read past the tensor
            k = tl.load(K + kv_rows * stride_km + hk * stride_kh + offs_d[None, :], mask=kv_ok, other=0.0)
            v = tl.load(V + kv_rows * stride_vm + hk * stride_vh + offs_d[None, :], mask=kv_ok, other=0.0)
            s = tl.dot(q, tl.trans(k), input_precision=PRECISION)
            keep = (k_start[:, None] <= offs_n[None, :]) & (offs_n[None, :] < k_end[:, None])
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
            pr = tl.where(keep, act_fwd_scaled(s, alpha, ACT, HW_TANH, v.dtype != tl.float16), 0.0)
            acc = tl.dot(pr.to(v.dtype), v, acc, input_precision=PRECISION)
        o_ptrs = Out + q_rows * stride_om + h * stride_oh + offs_d[None, :]
        o_scale = qk_scale * p_fold(alpha, ACT, Q.dtype.element_ty != tl.float16)  # what P' left out
        tl.store(o_ptrs, (acc * o_scale).to(Out.dtype.element_ty), mask=q_ok[:, None])


@triton.jit
def packed_fwd_kernel(
    Q,
    K,
    V,
    Out,
    Plan,
    Counter,
    max_packs,
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
    rows_q_bucket,
    band_lo,
    band_hi,
    H: tl.constexpr,
    GROUPS: tl.constexpr,
    D: tl.constexpr,
    PACK: tl.constexpr,
    MAXSEQ: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ACT: tl.constexpr,
    HW_TANH: tl.constexpr,
    CAUSAL: tl.constexpr,
    PRECISION: tl.constexpr,
):
    # units in pack-major order: the sub-tiles and heads of one pack run side by side and share its K/V in L2
    SUBS: tl.constexpr = PACK // BLOCK_M
    n_units = tl.load(Plan) * (SUBS * H)
    nprog = tl.num_programs(0)
    u = tl.program_id(0)
    while u < n_units:
        nxt = tl.atomic_add(Counter, 1, sem="relaxed") + nprog
        _fwd_unit(
            Q,
            K,
            V,
            Out,
            Plan,
            u // (SUBS * H),
            (u // SUBS) % H,
            u % SUBS,
            max_packs,
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
            GROUPS,
            D,
            MAXSEQ,
            BLOCK_M,
            BLOCK_N,
            ACT,
            HW_TANH,
            CAUSAL,
            PRECISION,
        )
        u = nxt


# (BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]; registers from ptxas for sm90, bf16, D 128:
# docs/experiments/packed_compile.py); speed measured once, per config not yet (PERF.md, "Packed short sequences"):
# 128-row sub-tiles cover a pack in one unit (204 registers: one CTA per SM; capped at 128, two CTAs, 56 B
# spilled); 64-row ones skip the key blocks of the other half's sequences, at 168 registers three CTAs per
# SM, at 226 two. The row-range mask costs ~20 registers over fwd.py's kernel at the same tiles (180, 164).
FWD_CONFIGS = [
    (128, 64, 8, 2),
    (128, 32, 8, 3, 128),
    (64, 64, 4, 2),
    (64, 32, 4, 3, 168),
]
INTERPRETER_TILES = (16, 16, 4, 1)
PROGRAMS_PER_SM = 4  # more than fit: a program that starts after the counter ran out exits at once


def tile_config(tiles) -> triton.Config:
    m, n, w, s = tiles[:4]
    extra = {"maxnreg": tiles[4]} if len(tiles) > 4 else {}
    return triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s, **extra)


def _prune(configs, named_args, **kwargs):
    # a sub-tile taller than the pack would split nothing (and PACK // BLOCK_M would be 0)
    pack = {**named_args, **kwargs}["PACK"]
    kept = [c for c in configs if max(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) <= pack]
    return kept or configs[-1:]


packed_fwd_kernel_tuned = triton.autotune(
    configs=[tile_config(t) for t in FWD_CONFIGS],
    key=["rows_q_bucket", "band_lo", "band_hi", "H", "GROUPS", "D", "PACK", "ACT", "CAUSAL"],
    prune_configs_by={"early_config_prune": _prune},
    reset_to_zero=["Counter"],  # each timing run must find the units untaken
)(packed_fwd_kernel)


def sm_count(device: torch.device) -> int:
    if device.type != "cuda":
        return 1
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count  # a host query, no sync


def run(plain, tuned, args: dict, units, per_sm: int, device, record, name: str, interpreter_tiles, config):
    """Launch a persistent packed kernel: pinned `interpreter_tiles` on the CPU, else the autotuner.
    `units(meta)` bounds its units from the host (the programs read the true count); `config(tiles)` spells
    a tile tuple as the kernel's meta-parameters. With `record`, record[name] says what ran (launch.run's
    fields: tiles, where they came from, grid, and on a GPU registers, spills, shared memory)."""
    interpreter = device.type != "cuda"
    cap = 2 if interpreter else sm_count(device) * per_sm  # two programs: the interpreter runs the counter path
    grid = lambda meta: (max(1, min(units(meta), cap)),)
    if interpreter:
        cfg = config(interpreter_tiles)
        meta = dict(cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        kernel = plain[grid(cfg.kwargs)](**args, **meta)
        tiles, source = list(interpreter_tiles), "interpreter"
    else:
        kernel = tuned[grid](**args)
        best = tuned.best_config
        tiles = [*best.kwargs.values(), best.num_warps, best.num_stages] + ([best.maxnreg] if best.maxnreg else [])
        source = "autotuned"
        cfg = best
    if record is None:
        return
    entry = {"tiles": tiles, "source": source, "interpreter": interpreter, "grid": list(grid(cfg.kwargs))}
    if getattr(kernel, "n_regs", None) is not None:
        entry.update(n_regs=kernel.n_regs, n_spills=kernel.n_spills, shared_bytes=kernel.metadata.shared)
    record[name] = entry


def plan_arguments(call: GDPACall, plan: PackPlan) -> dict:
    """What the packed forward and backward kernels take besides their operands and head count."""
    return dict(
        Plan=plan.buffer,
        Counter=plan.counter,
        max_packs=plan.max_packs,
        alpha=call.alpha,
        qk_scale=call.qk_scale,
        rows_q_bucket=next_power_of_2(max(call.rows_q, 16)),
        band_lo=plan.band.lo,
        band_hi=plan.band.hi_arg,
        GROUPS=call.groups,
        PACK=plan.pack,
        MAXSEQ=MAXSEQ,
        **launch.common_constants(call.q, call.activation, call.causal),
    )


def forward(call: GDPACall, plan: PackPlan, out: torch.Tensor, record=None, name: str = "packed_fwd") -> torch.Tensor:
    """Write the `out` rows of the plan's sequences (one persistent launch, tiles autotuned)."""
    q, k, v = call.q, call.k, call.v
    args = dict(**launch.operands(q=q, k=k, v=v, o=out), H=call.heads, **plan_arguments(call, plan))
    units = lambda meta: plan.max_packs * (plan.pack // meta["BLOCK_M"]) * call.heads
    run(
        packed_fwd_kernel,
        packed_fwd_kernel_tuned,
        args,
        units,
        PROGRAMS_PER_SM,
        q.device,
        record,
        name,
        INTERPRETER_TILES,
        tile_config,
    )
    return out
