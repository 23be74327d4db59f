"""NVML clock-event ("throttle") reasons: the bit table and its stable names (part of results.json)."""

from __future__ import annotations

# nvml.h: nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*). Keep the names stable.
REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks_setting",
}
SW_POWER_CAP = 0x4


def decode_reasons(mask: int) -> list[str]:
    """Names of the clock-event reason bits set in ``mask``, in ascending bit order.

    Bits that NVML may add later (not in :data:`REASON_BITS`) are named ``unknown_0x<bit>`` so that
    nothing is silently dropped. ``0`` (no reason) gives ``[]``.
    """
    mask = int(mask)
    if mask < 0:
        raise ValueError(f"clock-event reason mask must be >= 0, got {mask}")
    names = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(REASON_BITS.get(bit, f"unknown_{bit:#x}"))
        bit <<= 1
    return names
