"""Numbers from one window of NVML samples: averages, the at-cap fractions, and energy from the counter."""

from __future__ import annotations

import math
import statistics
from typing import Any

from bench.monitor.reasons import SW_POWER_CAP, decode_reasons

# A sample counts as "at the power cap" when its power is >= this fraction of the cap.
AT_CAP_FRACTION = 0.97


def summarize_samples(
    power_w: list[float],
    sm_clock_mhz: list[int | None] | None = None,
    temperature_c: list[int | None] | None = None,
    reason_masks: list[int | None] | None = None,
    cap_w: float | None = None,
) -> dict:
    """Aggregate one window of samples (parallel lists; None = not read).

    ``frac_power_at_cap``: share of samples with power >= 0.97 * cap (None without a cap).
    ``frac_sw_power_cap``: share of samples with the SW-power-cap reason bit (None if no sample read
    its reasons). ``frac_at_cap`` (the headline): share of samples with either.
    """
    n = len(power_w)
    out: dict[str, Any] = {
        "n_samples": n,
        "avg_w": None,
        "peak_w": None,
        "frac_at_cap": None,
        "frac_power_at_cap": None,
        "frac_sw_power_cap": None,
        "sm_clock_mhz_median": None,
        "temperature_c_max": None,
        "reasons": [],
    }
    if n == 0:
        return out
    sm_clock_mhz = list(sm_clock_mhz) if sm_clock_mhz is not None else [None] * n
    temperature_c = list(temperature_c) if temperature_c is not None else [None] * n
    reason_masks = list(reason_masks) if reason_masks is not None else [None] * n
    out["avg_w"] = math.fsum(power_w) / n
    out["peak_w"] = max(power_w)

    power_hit = [cap_w is not None and p >= AT_CAP_FRACTION * cap_w for p in power_w]
    reason_hit = [m is not None and bool(m & SW_POWER_CAP) for m in reason_masks]
    have_reasons = any(m is not None for m in reason_masks)
    if cap_w is not None:
        out["frac_power_at_cap"] = sum(power_hit) / n
    if have_reasons:
        out["frac_sw_power_cap"] = sum(reason_hit) / n
    if cap_w is not None or have_reasons:
        out["frac_at_cap"] = sum(a or b for a, b in zip(power_hit, reason_hit, strict=True)) / n

    clocks = [c for c in sm_clock_mhz if c is not None]
    if clocks:
        out["sm_clock_mhz_median"] = statistics.median(clocks)
    temps = [t for t in temperature_c if t is not None]
    if temps:
        out["temperature_c_max"] = max(temps)
    seen = 0
    for m in reason_masks:
        if m is not None:
            seen |= m
    out["reasons"] = sorted(decode_reasons(seen))
    return out


def counter_ticks(times_s: list[float], energy_mj: list[int | None]) -> list[tuple[float, int]]:
    """The updates of NVML's energy counter seen in a window: (time, mJ) of every reading that differs
    from the one before it. The counter advances in steps (docs/DESIGN.md §5)."""
    ticks: list[tuple[float, int]] = []
    prev = None
    for t, e in zip(times_s, energy_mj, strict=False):
        if e is None:
            continue
        if prev is not None and e != prev:
            ticks.append((t, e))
        prev = e
    return ticks


def energy_from_ticks(times_s: list[float], energy_mj: list[int | None]) -> tuple[float, float] | None:
    """Average power (W) between the first and last update of the energy counter seen in a window.

    A plain end-minus-start delta is off by up to one counter step at each end. Inside measure() windows
    the sampler reads the counter every sample; the energy between the first and last tick
    (`counter_ticks`) over the time between them is the power over that span.
    Returns (watts, span_s), or None with fewer than two ticks.
    """
    ticks = counter_ticks(times_s, energy_mj)
    if len(ticks) < 2:
        return None
    (ta, ea), (tb, eb) = ticks[0], ticks[-1]
    if tb <= ta or eb <= ea:
        return None
    return (eb - ea) / 1000.0 / (tb - ta), tb - ta
