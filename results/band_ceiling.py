"""The jaggedness ceiling of a case's band view (bench.profiling.bands): which tile the case's kernel ran, and
the ceiling at that tile. Here, not in the profiler, so that a report drawn from a run recorded before the tile
choice was right recomputes it from the run's own lengths (results.frame.load_run).

Until 2026-12-04 (fifth session) the tile was the last launch the op recorded: a split plan records its stages
heaviest first when they run concurrently, so the log-normal 2048 forward of docs/example-h200-production read
the Triton stage's 64×32 (tile efficiency 93%, ceiling 511 TFLOP/s) where its longest band ran Hopper's
128×128 (80%, 435)."""

from __future__ import annotations

import re

import numpy as np

ASSUMED_TILE = (128, 128)  # FA4's sm90 forward tile at head dim 128; used where a provider records none
TILE_KEYS = {"fwd": ("fwd", "hopper_fwd"), "bwd": ("dkdv", "hopper_bwd"), "fwd_bwd": ("fwd", "hopper_fwd")}


def _band_lo(name: str) -> int:
    """The lower edge of the band a launch's record name carries (`fwd [1024, inf)` -> 1024); -1 for a whole
    batch's launch (no band)."""
    match = re.search(r"\[(\d+),", name)
    return int(match.group(1)) if match else -1


def kernel_tile(kernel_config: dict | None, mode: str) -> tuple[tuple[int, int], str]:
    """The (query, key) tile the case's kernel ran, from its `kernel_config` (the GDPA op records each
    launch's tiles; of a banded plan, the launch over the longest sequences: the band with the highest lower
    edge, whatever order the stages ran and were recorded in), else ASSUMED_TILE."""
    found = []
    for name, entry in (kernel_config or {}).items():
        base = str(name).split(" ", 1)[0]
        if base in TILE_KEYS.get(mode, ()) and isinstance(entry, dict):
            tile = entry.get("tiles") or entry.get("tile")
            if isinstance(tile, (list, tuple)) and len(tile) >= 2:
                found.append((_band_lo(str(name)), (int(tile[0]), int(tile[1])), f"kernel_config[{name!r}]"))
    if not found:
        return ASSUMED_TILE, "assumed (no tile recorded)"
    _, tile, source = max(found, key=lambda f: f[0])
    return tile, source


def ceiling(q_lengths, kv_lengths, tile: tuple[int, int], causal: bool, long_tflops: float | None) -> tuple:
    """(tile efficiency, ceiling TFLOP/s) of a batch at `tile` under its long band's speed."""
    # here, not at the top: the workloads package imports torch, which a command that only reads results
    # (report, table, compare) must not (tests/test_cpu_newcomer.py)
    from workloads.stats import tile_efficiency  # noqa: PLC0415

    eff = tile_efficiency(q_lengths, kv_lengths, tile[0], tile[1], causal=causal)
    return eff, (eff * long_tflops if long_tflops else None)


def recorded_right(case: dict, workloads: dict) -> dict:
    """`case` with its `bands` tile, tile efficiency and ceiling recomputed where the run recorded another tile
    than `kernel_tile` finds (the lengths from the run's `workloads`); the case itself where nothing is to fix."""
    bands, mode = case.get("bands"), case.get("mode")
    if not isinstance(bands, dict) or not isinstance(bands.get("tile"), list) or mode not in TILE_KEYS:
        return case
    tile, source = kernel_tile(case.get("kernel_config"), mode)
    work = case.get("workload") if isinstance(case.get("workload"), dict) else {}
    lengths = workloads.get(work.get("name")) if isinstance(workloads, dict) else None
    if list(tile) == bands["tile"] or not isinstance(lengths, dict) or lengths.get("q_lengths") is None:
        return case
    q = np.asarray(lengths["q_lengths"], dtype=np.int64)
    k = np.asarray(lengths.get("kv_lengths") or lengths["q_lengths"], dtype=np.int64)
    eff, ceil = ceiling(q, k, tile, bool(work.get("causal")), bands.get("long_tflops"))
    fixed = dict(bands, tile=list(tile), tile_eff=eff, ceiling_tflops=ceil)
    fixed["tile_source"] = f"{source} (the report's: the run recorded {bands['tile'][0]}×{bands['tile'][1]})"
    return {**case, "bands": fixed}
