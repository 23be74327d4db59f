"""Integer arithmetic for launch grids and autotuning keys on the host, on every call.

Why not `triton.cdiv` / `triton.next_power_of_2`: in triton 3.6 they are `ConstexprFunction` objects, usable
inside kernels, whose call costs ~3.5 µs on the host against ~0.3 µs for the same arithmetic in plain Python
(this repository's 2-core CPU). A split-plan forward made ~6 such calls and a backward ~12, on a call whose host
time already decides its speed on short batches (kernels/gdpa/PERF.md, the production run of 1a75745). Inside
`@triton.jit` code keep `tl.cdiv` and Triton's own.
"""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for integers, b > 0."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n, as triton.next_power_of_2 for every n >= 1 (each caller's n is)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


GRID_YZ_MAX = 65535  # CUDA's limit on a grid's y and z extents (x may reach 2^31 - 1)


def rows_grid(tiles: int, rows: int) -> tuple[int, ...]:
    """The Triton kernels' grid: `tiles` along x (a sequence's tiles side by side, sharing its K/V in L2) and
    `rows` (sequences · heads) along y — folded over z where they pass CUDA's y limit, which a RecSys batch does
    (16,384 sequences of 4 heads is 65,536): `Triton Error [CUDA]: invalid argument` otherwise. The kernel then
    takes its row as y + z · (y's extent) and exits past the last (`SPLIT_ROWS`, launch.row_args)."""
    if rows <= GRID_YZ_MAX:
        return (tiles, rows)
    return (tiles, GRID_YZ_MAX, cdiv(rows, GRID_YZ_MAX))
