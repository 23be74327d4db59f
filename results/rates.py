"""A FLOP rate in the unit its magnitude reads in: 612 TFLOP/s on a GPU, 1.73 MFLOP/s for the Triton
interpreter on a CPU (`1.728e-06 TFLOP/s` was how a CPU run read). results.json and the CSVs keep TFLOP/s
(`tflops`, the schema's unit, docs/DESIGN.md §6); only what people read is scaled — progress lines, report
tables, `gdpa-bench table`, the plots' axes — and a scaled figure always carries its unit."""

from __future__ import annotations

import math

# (the unit, TFLOP/s in one of it), largest first
UNITS = (("TFLOP/s", 1.0), ("GFLOP/s", 1e-3), ("MFLOP/s", 1e-6), ("kFLOP/s", 1e-9), ("FLOP/s", 1e-12))


def unit_for(tflops: float) -> tuple[str, float]:
    """The largest unit in which `tflops` is at least 1 (FLOP/s below that; TFLOP/s for 0 and above)."""
    x = abs(tflops)
    if x == 0 or not math.isfinite(x):
        return UNITS[0]
    return next(((name, size) for name, size in UNITS if x >= size), UNITS[-1])


def rate(tflops: float, digits: int = 4) -> str:
    """`612.3 TFLOP/s`, `1.728 MFLOP/s`, `580 MFLOP/s`: `digits` significant digits in the unit of its
    magnitude (a whole number above them, never `5.8e+02`)."""
    name, size = unit_for(tflops)
    x = tflops / size
    return f"{x:.0f} {name}" if abs(x) >= 10**digits else f"{x:.{digits}g} {name}"
