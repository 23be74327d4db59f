"""Launching one GDPA Triton kernel: pinned tiles or the autotuner, and the record of what ran.

Shared by the launchers in fwd.py and bwd.py. Nothing here reads device memory: a launch is enqueued
and returns (the autotuner's first call per tuning key times its configs, which waits for the GPU).
"""

from __future__ import annotations

import contextlib

import torch

from kernels.gdpa import grid_math
from kernels.gdpa.bands import Band
from kernels.gdpa.call import GDPACall
from kernels.gdpa.grid_math import next_power_of_2
from kernels.gdpa.tiles import launch_kwargs, tiles_of

# The CPU interpreter runs one fixed tile unless the caller pins one (autotuning it would only cost time)
INTERPRETER_TILES = (16, 16, 4, 1)

# Shape part of every kernel's autotuning key: max lengths and total rows, each rounded up to a power of
# two, and the length band the launch runs (bands.py). Total rows tell a half-filled batch from a full one of
# the same max length: their best tiles differ (set1 L=512 fill 0.5 vs 1.0: tied vs 6% apart), and keyed on
# max length alone the first batch seen chose for both — so a case's config depended on which case ran
# before it in the process. A band of short sequences wants other tiles than the whole batch.
TUNING_KEY = ["max_q_bucket", "max_kv_bucket", "rows_q_bucket", "rows_kv_bucket", "band_lo", "band_hi"]


def _bucket(n: int) -> int:
    return next_power_of_2(max(int(n), 16))


def tuning_key(call: GDPACall, band: Band) -> dict:
    """The launch arguments that key the autotuners (and carry the band to the kernel)."""
    return dict(
        max_q_bucket=_bucket(band.bound(call.max_q, call.self_attention)),
        max_kv_bucket=_bucket(band.bound(call.max_kv, call.self_attention)),
        rows_q_bucket=_bucket(call.rows_q),
        rows_kv_bucket=_bucket(call.rows_kv),
        band_lo=band.lo,
        band_hi=band.hi_arg,
    )


def row_args(rows: int) -> dict:
    """The kernels' row count (sequences · heads) and whether grid_math.rows_grid folds it over z: a constexpr, so
    a launch within CUDA's y limit compiles to the kernel it always was."""
    return dict(n_rows=rows, SPLIT_ROWS=rows > grid_math.GRID_YZ_MAX)


def record_name(kernel: str, band: Band) -> str:
    """Where `record` keeps a launch: the kernel's name, with the band when the launch runs one."""
    return kernel if band.whole else f"{kernel} {band.describe()}"


KERNEL_NAMES = {"o": "Out"}  # an operand's argument name in the kernels, where it is not its upper case


def operands(**tensors: torch.Tensor) -> dict:
    """The `[rows, heads, D]` operands as the kernels take them: each under its name with its row and head
    strides. operands(q=q, do=do) -> {Q: q, stride_qm: q.stride(0), stride_qh: q.stride(1), DO: do, ...}."""
    args = {}
    for name, t in tensors.items():
        args |= {
            KERNEL_NAMES.get(name, name.upper()): t,
            f"stride_{name}m": t.stride(0),
            f"stride_{name}h": t.stride(1),
        }
    return args


def common_constants(q: torch.Tensor, activation: str, causal: bool) -> dict:
    """Compile-time constants every GDPA kernel takes."""
    return dict(
        D=q.shape[2],
        ACT=activation,
        CAUSAL=bool(causal),
        # the hardware tanh is inline PTX, which the CPU interpreter cannot run
        HW_TANH=q.device.type == "cuda",
        # fp32 inputs: exact fp32 products (tf32 would fail an fp32 correctness check)
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )


# Test seam (documented, not private): while `poisoned_outputs()` is active every output the kernels
# write (out, dq, dk, dv) starts filled with NaN instead of uninitialised memory, so an element a kernel
# forgets to write shows in the comparison with the reference.
_output_fill: float | None = None


def new_output(like: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(like) if _output_fill is None else torch.full_like(like, _output_fill)


@contextlib.contextmanager
def poisoned_outputs(value: float = float("nan")):
    global _output_fill
    previous, _output_fill = _output_fill, value
    try:
        yield
    finally:
        _output_fill = previous


def run(plain, tuned, args: dict, grid, tiles, device: torch.device, record: dict | None, name: str) -> None:
    """Launch `plain` with pinned `tiles`, or `tuned` (autotuned) when tiles is None; in the CPU
    interpreter unpinned tiles are INTERPRETER_TILES. `grid(BLOCK_M, BLOCK_N)` is the launch grid.
    With `record`, record[name] says what ran: the tiles, where they came from ("autotuned", "pinned",
    "interpreter"), the grid, and on a GPU the compiled kernel's registers, spills and shared memory."""
    interpreter = device.type != "cuda"
    source = "pinned"
    if tiles is None and interpreter:
        tiles, source = INTERPRETER_TILES, "interpreter"
    if tiles is None:
        kernel = tuned[lambda meta: grid(meta["BLOCK_M"], meta["BLOCK_N"])](**args)
        if record is None:
            return
        tiles, source = tiles_of(tuned.best_config), "autotuned"
    else:
        kernel = plain[grid(tiles[0], tiles[1])](**args, **launch_kwargs(tiles))
        if record is None:
            return
    entry = {"tiles": list(tiles), "source": source, "interpreter": interpreter, "grid": list(grid(tiles[0], tiles[1]))}
    if getattr(kernel, "n_regs", None) is not None:  # a compiled kernel (the interpreter returns None)
        entry.update(n_regs=kernel.n_regs, n_spills=kernel.n_spills, shared_bytes=kernel.metadata.shared)
    record[name] = entry
