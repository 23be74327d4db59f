"""NVML power monitor (docs/DESIGN.md §5): a background sampler plus a measured-loop helper.

What it records, every ``period_ms`` (default 10 ms), on one GPU:

- power in W: the ``NVML_FI_DEV_POWER_INSTANT`` field when the driver supports it (``power_source ==
  "instant"``), else ``nvmlDeviceGetPowerUsage`` (``"average"``: a ~1 s moving average on Ampere and
  later, so peaks are smoothed and the power-at-cap fraction lags; ``info()["power_source_note"]``
  says so and why the field was not used);
- SM and memory clocks (MHz), GPU temperature (C), and the clock-event ("throttle") reason mask,
  decoded to stable names by :func:`decode_reasons`;
- the case id set by :meth:`PowerMonitor.begin_case` / :meth:`PowerMonitor.end_case`.

:meth:`PowerMonitor.measure` runs a callable in a loop for at least ``min_seconds`` and returns the
case's ``power`` dict (docs/DESIGN.md §6); energy per call comes from the energy counter.

Failure policy: the monitor never raises because of NVML. If NVML cannot be loaded or initialised,
``available`` is False and ``unavailable_reason`` says why in one line; every method is then a no-op
(``measure`` returns None). If the power read fails while sampling, the thread stops, ``error`` is
set, and everything else keeps working. A failing clock/temperature/reason read records None for that
field only. Exceptions raised by the *measured callable* do propagate (the runner records the case
as failed); the monitor is left in its previous state. The monitor only reads: it never calls an
``nvmlDeviceSet*`` function.

Modules: `reasons` (the reason bits), `nvml` (device access and static facts), `summary` (window
statistics, energy from counter ticks), `measure` (the loop and the power dict), `sampler` (the thread).
"""

from bench.monitor.measure import run_for
from bench.monitor.nvml import NvmlDevice, device_facts, gpu_index_from_device
from bench.monitor.reasons import REASON_BITS, SW_POWER_CAP, decode_reasons
from bench.monitor.sampler import PowerMonitor
from bench.monitor.summary import AT_CAP_FRACTION, energy_from_ticks, summarize_samples

__all__ = [
    "AT_CAP_FRACTION",
    "REASON_BITS",
    "SW_POWER_CAP",
    "NvmlDevice",
    "PowerMonitor",
    "decode_reasons",
    "device_facts",
    "energy_from_ticks",
    "gpu_index_from_device",
    "run_for",
    "summarize_samples",
]
