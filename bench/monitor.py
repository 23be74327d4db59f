"""NVML power monitor: a background sampler plus a measured-loop helper (DESIGN.md §5 "Power").

What it records, every ``period_ms`` (default 10 ms), on one GPU:

- power in W: the ``NVML_FI_DEV_POWER_INSTANT`` field when the driver supports it (``power_source ==
  "instant"``), else ``nvmlDeviceGetPowerUsage`` (``"average"``: a ~1 s moving average on Ampere and
  later, so peaks are smoothed and the power-at-cap fraction lags; ``info()["power_source_note"]``
  says so and why the field was not used);
- SM and memory clocks (MHz), GPU temperature (C), and the clock-event ("throttle") reason mask,
  decoded to stable names by :func:`decode_reasons`;
- the case id set by :meth:`PowerMonitor.begin_case` / :meth:`PowerMonitor.end_case`.

:meth:`PowerMonitor.measure` runs a callable in a loop for at least ``min_seconds`` and returns the
DESIGN §6 ``power`` dict; energy per call comes from ``nvmlDeviceGetTotalEnergyConsumption`` (mJ).
That counter (like the instant field) only moves about every 100 ms (H200, driver 580), so inside
a measure() window the sampler also reads it every sample and the power is taken between the first
and last counter update seen in the window (:func:`energy_from_ticks`); a plain start/end delta is
the fallback.

Cost per sample (H200, driver 580): one field-values call for power plus two clock, one temperature
and one reason read, ~1-5 us each; the energy read costs ~4 ms of CPU, so it is only made inside
measure() windows. The thread sleeps in between.

Failure policy: the monitor never raises because of NVML. If NVML cannot be loaded or initialised,
``available`` is False and ``unavailable_reason`` says why in one line; every method is then a no-op
(``measure`` returns None). If the power read fails while sampling, the thread stops, ``error`` is
set, and everything else keeps working. A failing clock/temperature/reason read records None for that
field only. Exceptions raised by the *measured callable* do propagate (the runner records the case
as failed); the monitor is left in its previous state.

The monitor only reads: it never calls an ``nvmlDeviceSet*`` function (no clock or power-limit
changes, DESIGN §5).
"""

from __future__ import annotations

import csv
import math
import os
import statistics
import threading
import time
from array import array
from typing import Any, Callable

__all__ = [
    "REASON_BITS",
    "SW_POWER_CAP",
    "AT_CAP_FRACTION",
    "decode_reasons",
    "gpu_index_from_device",
    "summarize_samples",
    "run_for",
    "energy_from_ticks",
    "PowerMonitor",
    "CSV_COLUMNS",
]

# NVML clocks-event reason bits (nvml.h: nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*).
# The names are part of results.json: keep them stable.
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
# A sample counts as "at the power cap" when its power is >= this fraction of the cap.
AT_CAP_FRACTION = 0.97

CSV_COLUMNS = (
    "time_s",
    "gpu_index",
    "power_w",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temperature_c",
    "reasons",
    "case_id",
)

_NVML_SUCCESS = 0
# nvmlValueType_t -> member of the c_nvmlValue_t union
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
_MISSING = -1  # sentinel for "not read" in the integer sample columns


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


def gpu_index_from_device(device: Any = None, *, visible_devices: str | None = None) -> int:
    """NVML device index for a torch device, an int, or a string such as ``"cuda:1"``.

    ``"cuda"`` / ``torch.device("cuda")`` / None mean index 0. NVML numbers GPUs physically and
    ignores ``CUDA_VISIBLE_DEVICES``, while torch numbers the visible ones; when
    ``CUDA_VISIBLE_DEVICES`` (or ``visible_devices``) is a list of integers, the logical index is
    mapped through it (``CUDA_VISIBLE_DEVICES=2,3`` and ``cuda:1`` give 3). UUID/MIG entries cannot be
    mapped to an index without NVML, so the logical index is returned unchanged for them.
    """
    if device is None:
        logical = 0
    elif isinstance(device, bool):
        raise ValueError(f"not a GPU device: {device!r}")
    elif isinstance(device, int):
        logical = device
    else:
        dev_type = getattr(device, "type", None)
        if dev_type is not None:  # torch.device
            if dev_type != "cuda":
                raise ValueError(f"not a CUDA device: {device!r}")
            logical = 0 if device.index is None else int(device.index)
        else:
            text = str(device).strip().lower()
            if text.isdigit():
                logical = int(text)
            elif text == "cuda":
                logical = 0
            elif text.startswith("cuda:") and text[5:].isdigit():
                logical = int(text[5:])
            else:
                raise ValueError(f"not a CUDA device: {device!r} (expected an int, 'cuda' or 'cuda:N')")
    if logical < 0:
        raise ValueError(f"device index must be >= 0, got {logical}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible_devices is None else visible_devices
    if visible:
        entries = [e.strip() for e in visible.split(",") if e.strip()]
        if entries and all(e.isdigit() for e in entries) and logical < len(entries):
            return int(entries[logical])
    return logical


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().replace("\n", " ") or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _decode_name(name: Any) -> str:
    if isinstance(name, bytes):
        return name.decode("utf-8", "replace")
    return str(name)


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
        out["frac_at_cap"] = sum(a or b for a, b in zip(power_hit, reason_hit)) / n

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


def run_for(
    fn: Callable[[], Any],
    *,
    sync: Callable[[], Any],
    min_seconds: float,
    clock: Callable[[], float] = time.perf_counter,
    on_start: Callable[[], Any] | None = None,
) -> tuple[int, float]:
    """Call ``fn()`` back to back until >= ``min_seconds`` of wall time have passed; (calls, seconds).

    ``sync()`` runs before the start time is read (then ``on_start()``, if given) and after each batch
    of calls, never per call. Batches double (1, 1, 2, 4, ...) and the last one is sized from the rate
    seen so far, so the loop ends close to ``min_seconds``: checking only the host clock would let
    the host queue up to ~1000 launches ahead of the GPU (on an H200, a 1 s loop of 8192³ GEMMs ran
    1.85 s before the final sync returned). About log2(calls) syncs, each a few-µs bubble.
    ``seconds`` is read after the final sync, so it covers all ``calls``. At least one call is made.
    """
    sync()
    if on_start is not None:
        on_start()
    t0 = clock()
    calls = 0
    batch = 1
    while True:
        for _ in range(batch):
            fn()
        calls += batch
        sync()
        elapsed = clock() - t0
        if elapsed >= min_seconds:
            return calls, elapsed
        per_call = elapsed / calls
        need = math.ceil((min_seconds - elapsed) / per_call) if per_call > 0 else calls
        batch = max(1, min(need, calls))


def energy_from_ticks(times_s: list[float], energy_mj: list[int | None]) -> tuple[float, float] | None:
    """Average power (W) between the first and last update of the energy counter seen in a window.

    NVML's energy counter advances in steps (every ~100 ms on an H200 with driver 580), so a plain
    end-minus-start delta is off by up to one step at each end. Inside measure() windows the sampler
    reads the counter every sample; a *tick* is a reading that differs from the previous one, and the
    energy between the first and last tick over the time between them is the power over that span.
    Returns (watts, span_s), or None with fewer than two ticks.
    """
    ticks: list[tuple[float, int]] = []
    prev = None
    for t, e in zip(times_s, energy_mj):
        if e is None:
            continue
        if prev is not None and e != prev:
            ticks.append((t, e))
        prev = e
    if len(ticks) < 2:
        return None
    (ta, ea), (tb, eb) = ticks[0], ticks[-1]
    if tb <= ta or eb <= ea:
        return None
    return (eb - ea) / 1000.0 / (tb - ta), tb - ta


class _PowerReadError(Exception):
    pass


class PowerMonitor:
    """Samples one GPU's power, clocks, temperature and clock-event reasons through NVML.

    Usage::

        mon = PowerMonitor(device_index=0, power_cap_w=750)
        meta["power_monitor"] = mon.info()
        mon.start()                       # optional: a continuous timeline for power.csv
        mon.begin_case("set1/fwd/...")
        power = mon.measure(fn, sync=torch.cuda.synchronize, min_seconds=1.0, flops_per_call=f)
        mon.end_case()
        mon.stop(); mon.write_csv(run_dir / "power.csv")

    ``nvml`` injects an object exposing the pynvml functions and constants used (tests pass a
    stand-in); by default ``pynvml`` (package ``nvidia-ml-py``) is imported.
    """

    def __init__(
        self,
        device_index: int = 0,
        period_ms: float = 10.0,
        power_cap_w: float | None = None,
        nvml: Any = None,
    ):
        self.device_index = int(device_index)
        self.period_ms = float(period_ms)
        if not self.period_ms > 0:
            raise ValueError(f"period_ms must be > 0, got {period_ms}")
        self.power_cap_w = None if power_cap_w is None else float(power_cap_w)
        self.available = False
        self.unavailable_reason: str | None = None
        self.power_source: str | None = None
        self.power_source_note: str | None = None
        self.enforced_power_limit_w: float | None = None
        self.default_power_limit_w: float | None = None
        self.gpu_name: str | None = None
        self.error: str | None = None

        self._nvml = None
        self._handle = None
        self._reasons_fn: Callable | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop_event: threading.Event | None = None
        self._t0: float | None = None
        self._case_id = ""
        self._case_names: list[str] = [""]
        self._case_index: dict[str, int] = {"": 0}
        self._markers: list[dict] = []
        # Samples are kept in compact typed arrays (56 bytes/sample: 10 h at 10 ms is ~200 MB).
        self._t = array("d")
        self._power = array("d")
        self._sm = array("i")
        self._mem = array("i")
        self._temp = array("i")
        self._mask = array("q")
        self._case = array("i")
        # Energy counter readings (mJ) and their times, taken only inside measure() windows: one read
        # costs ~4 ms of CPU on an H200 (driver 580) where every other read costs ~1-5 us.
        self._energy = array("q")
        self._energy_t = array("d")
        self._read_energy = False

        self._open(nvml)

    # ------------------------------------------------------------------ setup
    def _open(self, nvml: Any) -> None:
        if nvml is None:
            try:
                import pynvml as nvml  # type: ignore[no-redef]
            except Exception as exc:  # ImportError, or a broken install
                self.unavailable_reason = f"NVML not available: cannot import pynvml (nvidia-ml-py): {_one_line(exc)}"
                return
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:
            self.unavailable_reason = f"NVML not available: nvmlInit failed: {_one_line(exc)}"
            return
        try:
            self._handle = nvml.nvmlDeviceGetHandleByIndex(self.device_index)
        except Exception as exc:
            self.unavailable_reason = (
                f"NVML not available: no handle for GPU index {self.device_index}: {_one_line(exc)}"
            )
            self._shutdown_quietly()
            return

        self.gpu_name = self._try(lambda: _decode_name(nvml.nvmlDeviceGetName(self._handle)))
        enforced = self._try(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle))
        self.enforced_power_limit_w = None if enforced is None else enforced / 1000.0
        default = self._try(lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(self._handle))
        self.default_power_limit_w = None if default is None else default / 1000.0

        # Pick the power source by probing the instantaneous field once.
        instant_problem = None
        try:
            value = self._read_instant_mw()
            if value <= 0:
                instant_problem = f"field returned {value} mW"
        except Exception as exc:
            instant_problem = _one_line(exc)
        if instant_problem is None:
            self.power_source = "instant"
            self.power_source_note = (
                "NVML_FI_DEV_POWER_INSTANT field (instantaneous power; refreshed about every 100 ms on an H200)"
            )
        else:
            try:
                nvml.nvmlDeviceGetPowerUsage(self._handle)
            except Exception as exc:
                self.unavailable_reason = (
                    f"NVML power not readable on GPU {self.device_index}: instant field: {instant_problem}; "
                    f"nvmlDeviceGetPowerUsage: {_one_line(exc)}"
                )
                self._shutdown_quietly()
                return
            self.power_source = "average"
            self.power_source_note = (
                f"NVML_FI_DEV_POWER_INSTANT unavailable ({instant_problem}); using nvmlDeviceGetPowerUsage, "
                "a ~1 s moving average on recent GPUs: peak_w is smoothed and frac_power_at_cap lags"
            )

        # Clock-event reasons: the new name first, then the deprecated one (older drivers/bindings).
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(nvml, name, None)
            if fn is None:
                continue
            try:
                fn(self._handle)
            except Exception:
                continue
            self._reasons_fn = fn
            break
        self.available = True

    def _try(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception:
            return None

    def _shutdown_quietly(self) -> None:
        shutdown = getattr(self._nvml, "nvmlShutdown", None)
        if shutdown is not None:
            try:
                shutdown()
            except Exception:
                pass

    def close(self) -> None:
        """Stop sampling and release NVML (nvmlShutdown). Samples stay readable."""
        self.stop()
        if self.available:
            self._shutdown_quietly()
            self.available = False
            self.unavailable_reason = "closed"

    def __enter__(self) -> "PowerMonitor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ reads
    def _read_instant_mw(self) -> float:
        nvml = self._nvml
        values = nvml.nvmlDeviceGetFieldValues(self._handle, [nvml.NVML_FI_DEV_POWER_INSTANT])
        fv = values[0]
        ret = getattr(fv, "nvmlReturn", _NVML_SUCCESS)
        if ret != getattr(nvml, "NVML_SUCCESS", _NVML_SUCCESS):
            raise _PowerReadError(f"NVML_FI_DEV_POWER_INSTANT returned status {ret}")
        member = _VALUE_MEMBERS.get(getattr(fv, "valueType", 1), "uiVal")
        return float(getattr(fv.value, member))

    def _read_power_w(self) -> float:
        if self.power_source == "instant":
            return self._read_instant_mw() / 1000.0
        return float(self._nvml.nvmlDeviceGetPowerUsage(self._handle)) / 1000.0

    def _read_int(self, fn: Callable[[], Any]) -> int:
        try:
            return int(fn())
        except Exception:
            return _MISSING

    def sample_now(self) -> dict | None:
        """Take one sample synchronously, outside the thread (e.g. to mark a boundary).

        Returns the sample dict; None when unavailable or when the power read failed (then
        ``error`` is set). Never raises.
        """
        if not self.available:
            return None
        try:
            return self._sample(as_dict=True)
        except Exception as exc:
            self.error = f"NVML power read failed: {_one_line(exc)}"
            return None

    def _sample(self, as_dict: bool = False) -> dict | None:
        """Read and store one sample (its dict if ``as_dict``). Raises _PowerReadError if power fails."""
        nvml, h = self._nvml, self._handle
        try:
            power = self._read_power_w()
        except Exception as exc:
            raise _PowerReadError(_one_line(exc)) from exc
        t = time.monotonic()
        sm = self._read_int(lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
        mem = self._read_int(lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM))
        temp = self._read_int(lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))
        mask = _MISSING if self._reasons_fn is None else self._read_int(lambda: self._reasons_fn(h))
        energy, t_energy = _MISSING, math.nan
        if self._read_energy:
            t_before = time.monotonic()
            energy = self._read_int(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h))
            t_energy = 0.5 * (t_before + time.monotonic())
        with self._lock:
            if self._t0 is None:
                self._t0 = t
            case = self._case_index[self._case_id]
            self._t.append(t)
            self._power.append(power)
            self._sm.append(sm)
            self._mem.append(mem)
            self._temp.append(temp)
            self._mask.append(mask)
            self._energy.append(energy)
            self._energy_t.append(t_energy)
            self._case.append(case)
            return self._sample_dict(len(self._t) - 1) if as_dict else None

    def energy_mj(self) -> int | None:
        """Total energy since the driver loaded (mJ), or None if unavailable or the read fails."""
        if not self.available:
            return None
        try:
            value = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except Exception:
            return None
        return None if value is None else int(value)

    # ----------------------------------------------------------------- thread
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the background sampler (no-op if unavailable or already running)."""
        if not self.available or self.running:
            return
        self.error = None
        with self._lock:
            if self._t0 is None:
                self._t0 = time.monotonic()
        stop_event = threading.Event()
        thread = threading.Thread(
            target=self._loop, args=(stop_event,), name=f"PowerMonitor-gpu{self.device_index}", daemon=True
        )
        self._stop_event, self._thread = stop_event, thread
        thread.start()

    def stop(self) -> None:
        """Stop the sampler and wait for its thread to end (no-op if not running)."""
        thread, stop_event = self._thread, self._stop_event
        if stop_event is not None:
            stop_event.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._thread = None
        self._stop_event = None

    def _loop(self, stop_event: threading.Event) -> None:
        period = self.period_ms / 1000.0
        next_t = time.monotonic()
        while not stop_event.is_set():
            try:
                self._sample()
            except _PowerReadError as exc:
                self.error = f"NVML power read failed: {exc}"
                return
            except Exception as exc:  # a bug here must not kill the benchmark either
                self.error = f"power monitor stopped: {type(exc).__name__}: {_one_line(exc)}"
                return
            next_t += period
            delay = next_t - time.monotonic()
            if delay < 0:  # fell behind (GIL held by the benchmark): skip missed slots
                next_t = time.monotonic()
                delay = 0.0
            stop_event.wait(delay)

    # ------------------------------------------------------------------ cases
    def begin_case(self, case_id: str) -> None:
        """Tag the following samples with ``case_id`` (recorded in samples, power.csv and markers())."""
        case_id = str(case_id)
        now = time.monotonic()
        with self._lock:
            if case_id not in self._case_index:
                self._case_index[case_id] = len(self._case_names)
                self._case_names.append(case_id)
            self._case_id = case_id
            self._markers.append({"time_s": self._rel(now), "event": "begin", "case_id": case_id})

    def end_case(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self._case_id:
                self._markers.append({"time_s": self._rel(now), "event": "end", "case_id": self._case_id})
            self._case_id = ""

    def markers(self) -> list[dict]:
        """Case boundaries: [{"time_s", "event": "begin"|"end", "case_id"}] on the samples' time axis."""
        with self._lock:
            return [dict(m) for m in self._markers]

    def _rel(self, t: float) -> float:
        if self._t0 is None:
            self._t0 = t
        return t - self._t0

    # ---------------------------------------------------------------- samples
    def _sample_dict(self, i: int) -> dict:
        mask = self._mask[i]
        return {
            "time_s": self._t[i] - (self._t0 or 0.0),
            "gpu_index": self.device_index,
            "power_w": self._power[i],
            "sm_clock_mhz": None if self._sm[i] == _MISSING else self._sm[i],
            "mem_clock_mhz": None if self._mem[i] == _MISSING else self._mem[i],
            "temperature_c": None if self._temp[i] == _MISSING else self._temp[i],
            "reasons": None if mask == _MISSING else decode_reasons(mask),
            "case_id": self._case_names[self._case[i]],
        }

    def __len__(self) -> int:
        return len(self._t)

    def samples(self) -> list[dict]:
        """Every sample so far (a copy). ``reasons`` is None where the reason read failed."""
        with self._lock:
            return [self._sample_dict(i) for i in range(len(self._t))]

    def clear(self) -> None:
        """Drop recorded samples and markers (the time origin is kept)."""
        with self._lock:
            for arr in (
                self._t, self._power, self._sm, self._mem, self._temp, self._mask, self._case, self._energy, self._energy_t
            ):
                del arr[:]
            self._markers.clear()

    def write_csv(self, path: Any) -> None:
        """Write power.csv: one row per sample, columns :data:`CSV_COLUMNS`; reasons joined with "|",
        missing values empty."""
        rows = self.samples()
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(CSV_COLUMNS)
            for s in rows:
                writer.writerow(
                    [
                        f"{s['time_s']:.6f}",
                        s["gpu_index"],
                        f"{s['power_w']:.3f}",
                        "" if s["sm_clock_mhz"] is None else s["sm_clock_mhz"],
                        "" if s["mem_clock_mhz"] is None else s["mem_clock_mhz"],
                        "" if s["temperature_c"] is None else s["temperature_c"],
                        "" if s["reasons"] is None else "|".join(s["reasons"]),
                        s["case_id"],
                    ]
                )

    # ------------------------------------------------------------------- info
    def cap_w(self) -> float | None:
        """The cap that frac_at_cap is measured against: the configured cap, else the enforced limit."""
        return self.power_cap_w if self.power_cap_w is not None else self.enforced_power_limit_w

    def info(self) -> dict:
        return {
            "available": self.available,
            "unavailable_reason": self.unavailable_reason,
            "power_source": self.power_source,
            "power_source_note": self.power_source_note,
            "enforced_power_limit_w": self.enforced_power_limit_w,
            "default_power_limit_w": self.default_power_limit_w,
            "power_cap_w": self.power_cap_w,
            "period_ms": self.period_ms,
            "gpu_name": self.gpu_name,
            "device_index": self.device_index,
            "at_cap_rule": (
                f"a sample is at cap when power >= {AT_CAP_FRACTION} x cap_w or the sw_power_cap reason is set"
            ),
            "error": self.error,
        }

    # ---------------------------------------------------------------- measure
    def measure(
        self,
        fn: Callable[[], Any],
        *,
        sync: Callable[[], Any],
        min_seconds: float = 1.0,
        flops_per_call: float | None = None,
        case_id: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> dict | None:
        """Run ``fn()`` in a loop for >= ``min_seconds`` with sampling on; return the power dict.

        The loop is :func:`run_for` (sync before the start, then after doubling batches of calls).
        Returns None without calling ``fn`` when the monitor is unavailable. Otherwise a dict with:

        - ``avg_w``, ``peak_w``, ``n_samples``: the sampler's readings inside the window;
        - ``avg_w_from_energy``: power from the NVML energy counter, and ``energy_j_per_call`` =
          ``avg_w_from_energy * seconds / calls``. ``energy_source`` says how: ``"counter_ticks"``
          (between the first and last counter update the sampler saw inside the window, when they
          span >= half of it; removes the counter's ~100 ms step error), ``"counter"`` (counter
          delta between the start and end of the window), or ``"samples"`` (counter unreadable:
          ``avg_w * seconds``; ``avg_w_from_energy`` is then None); ``avg_w_from_energy_delta``
          always holds the plain start/end delta (None if unreadable), for comparison;
        - ``tflops`` (if ``flops_per_call``), ``tflops_per_w`` (over ``avg_w_from_energy``, else
          ``avg_w``);
        - ``frac_at_cap``: share of samples with power >= 0.97 x cap OR the sw_power_cap reason
          (parts: ``frac_power_at_cap``, ``frac_sw_power_cap``); ``cap_w`` = the configured cap,
          else the enforced limit;
        - ``sm_clock_mhz_median``, ``temperature_c_max``, ``reasons`` (sorted names seen in any
          sample of the window), ``calls``, ``seconds``, ``power_source``, ``monitor_error``.

        If the sampler dies mid-run the sample fields may be None; if neither samples nor the energy
        counter gave anything, None is returned. NVML problems never raise; exceptions from
        ``fn``/``sync`` do (the sampler and case markers are restored first).

        If the sampler was not running it is started for the window and stopped afterwards.
        ``clock`` is injectable for tests.
        """
        if not self.available:
            return None
        owns_thread = not self.running
        if owns_thread:
            self.start()
        prev_case = self._case_id
        if case_id is not None:
            self.begin_case(case_id)
        self._read_energy = True
        marks: dict[str, Any] = {}

        def on_start() -> None:
            with self._lock:
                marks["i0"] = len(self._t)
            marks["e0"] = self.energy_mj()
            marks["m0"] = time.monotonic()

        try:
            calls, seconds = run_for(fn, sync=sync, min_seconds=min_seconds, clock=clock, on_start=on_start)
            e1 = self.energy_mj()
            m1 = time.monotonic()
            with self._lock:
                i0, i1 = marks["i0"], len(self._t)
                window = (
                    list(self._power[i0:i1]),
                    [None if v == _MISSING else v for v in self._sm[i0:i1]],
                    [None if v == _MISSING else v for v in self._temp[i0:i1]],
                    [None if v == _MISSING else v for v in self._mask[i0:i1]],
                )
                energies = [None if v == _MISSING else v for v in self._energy[i0:i1]]
                energy_times = list(self._energy_t[i0:i1])
            monitor_error = self.error
        finally:
            self._read_energy = False
            if case_id is not None:
                self.end_case()
                if prev_case:
                    self.begin_case(prev_case)
            if owns_thread:
                self.stop()

        result = summarize_samples(*window, cap_w=self.cap_w())
        e0 = marks["e0"]
        avg_w_from_energy = None
        energy_source = None
        delta_w = None
        if e0 is not None and e1 is not None and e1 > e0 and seconds > 0:
            delta_w = (e1 - e0) / 1000.0 / seconds
        ticks = energy_from_ticks(energy_times, energies)
        if ticks is not None and ticks[1] >= 0.5 * (m1 - marks["m0"]):
            avg_w_from_energy, energy_source = ticks[0], "counter_ticks"
        elif delta_w is not None:
            avg_w_from_energy, energy_source = delta_w, "counter"
        if avg_w_from_energy is not None:
            energy_j = avg_w_from_energy * seconds
        elif result["avg_w"] is not None:
            energy_source = "samples"
            energy_j = result["avg_w"] * seconds
        else:
            return None  # nothing measured: no samples and no energy counter

        tflops = None
        if flops_per_call is not None and seconds > 0:
            tflops = flops_per_call * calls / seconds / 1e12
        watts = avg_w_from_energy if avg_w_from_energy is not None else result["avg_w"]
        tflops_per_w = tflops / watts if tflops is not None and watts else None
        result.update(
            {
                "energy_j_per_call": energy_j / calls,
                "energy_source": energy_source,
                "avg_w_from_energy": avg_w_from_energy,
                "avg_w_from_energy_delta": delta_w,
                "tflops": tflops,
                "tflops_per_w": tflops_per_w,
                "cap_w": self.cap_w(),
                "calls": calls,
                "seconds": seconds,
                "power_source": self.power_source,
                "monitor_error": monitor_error,
            }
        )
        return result
