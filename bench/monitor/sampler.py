"""The background sampler: one GPU read through NVML every `period_ms`, samples kept in compact typed arrays
(56 bytes each: 10 h at 10 ms is ~200 MB), tagged with the case that ran.

The reads run in a process of their own (bench/monitor/child.py, `sampler: "process"`, the default with the
real pynvml): a sampling thread in the interpreter that makes the timed calls took the GIL every period and
made host-bound calls bimodal (issue 31). The timed process asks the child for its samples only between
timed regions (a case's boundaries, a window's start and end) and tags them with the case that ran at
their time. A thread (`sampler: "thread"`) remains for an NVML stand-in object, which cannot cross
processes (tests), and as the fallback when the child cannot start (`info()["sampler_note"]` says why)."""

from __future__ import annotations

import bisect
import math
import threading
import time
from array import array
from collections.abc import Callable
from typing import Any

from bench.monitor.child import COLUMNS, resolve
from bench.monitor.measure import power_of_window, run_for
from bench.monitor.nvml import MISSING, NvmlDevice, PowerReadError
from bench.monitor.reasons import decode_reasons
from bench.monitor.remote import SamplerGone, SamplerProcess
from bench.monitor.summary import AT_CAP_FRACTION
from results.files import atomic_write
from results.power_csv import power_csv_text
from support.text import one_line

CHILD_COLUMNS = tuple(name for name, _ in COLUMNS)


def _value(v: int) -> int | None:
    return None if v == MISSING else v


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
    stand-in; it samples in a thread), or names one as ``"module:attr"`` (an object, or a function making
    one, that the sampler process imports too); by default ``pynvml`` (package ``nvidia-ml-py``) is
    imported. ``sampler``: ``"process"`` (the default where the stand-in can cross processes) or
    ``"thread"``. The monitor never raises because of NVML (bench.monitor.nvml); exceptions of a measured
    callable do propagate.
    """

    def __init__(
        self,
        device_index: int = 0,
        period_ms: float = 10.0,
        power_cap_w: float | None = None,
        nvml: Any = None,
        sampler: str | None = None,
    ):
        self.device_index = int(device_index)
        self.period_ms = float(period_ms)
        if not self.period_ms > 0:
            raise ValueError(f"period_ms must be > 0, got {period_ms}")
        self.power_cap_w = None if power_cap_w is None else float(power_cap_w)
        self.error: str | None = None
        self._nvml_spec = nvml if isinstance(nvml, str) else None
        self.device = NvmlDevice(self.device_index, resolve(nvml) if isinstance(nvml, str) else nvml)
        crosses = nvml is None or self._nvml_spec is not None  # an object lives in this process only
        if sampler not in (None, "process", "thread"):
            raise ValueError(f"sampler must be 'process' or 'thread', got {sampler!r}")
        self.sampler = sampler or ("process" if crosses else "thread")
        if self.sampler == "process" and not crosses:
            raise ValueError("sampler='process' needs nvml=None or a 'module:attr' name, not an object")
        self.sampler_note: str | None = None
        self._remote: SamplerProcess | None = None
        self._timeline: tuple[array, array] = (array("d"), array("i"))  # (time, case) of each case boundary
        for name in (
            "available",
            "unavailable_reason",
            "power_source",
            "power_source_note",
            "enforced_power_limit_w",
            "default_power_limit_w",
            "gpu_name",
        ):
            setattr(self, name, getattr(self.device, name))
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop_event: threading.Event | None = None
        self._t0: float | None = None
        self._case_id = ""
        self._case_names: list[str] = [""]
        self._case_index: dict[str, int] = {"": 0}
        self._markers: list[dict] = []
        self._t, self._power = array("d"), array("d")
        self._sm, self._mem, self._temp, self._mask, self._case = (
            array("i"),
            array("i"),
            array("i"),
            array("q"),
            array("i"),
        )
        # The energy counter is read only inside measure() windows: one read costs milliseconds of CPU
        # where every other read costs microseconds (docs/DESIGN.md §8).
        self._energy, self._energy_t = array("q"), array("d")
        self._read_energy = False

    @property
    def read_energy(self) -> bool:
        """Whether each sample also reads the energy counter (only inside measure() windows)."""
        return self._read_energy

    @read_energy.setter
    def read_energy(self, on: bool) -> None:
        self._read_energy = bool(on)
        self._ask("energy", self._read_energy)

    # ------------------------------------------------------- the sampler process
    def _ask(self, op: str, *args: Any) -> dict | None:
        """One request to the sampler process, its samples stored; None without one (or when it is gone:
        then `error` says why and sampling has stopped)."""
        if self._remote is None:
            return None
        try:
            if op == "quit":
                reply, self._remote = self._remote.close(), None
            else:
                reply = self._remote.ask(op, *args)
        except SamplerGone as exc:
            self._remote, self.error = None, f"power monitor stopped: {exc}"
            return None
        if reply is None:
            return None
        self._store(reply["columns"])
        self.error = reply["error"] or self.error
        return reply

    def _store(self, cols: dict) -> None:
        """The child's samples, each tagged with the case that ran at its time (the boundaries' timeline)."""
        times, cases = self._timeline
        with self._lock:
            if cols["t"] and self._t0 is None:
                self._t0 = cols["t"][0]
            for t in cols["t"]:
                at = bisect.bisect_right(times, t) - 1
                self._case.append(cases[at] if at >= 0 else 0)
            for name, arr in zip(CHILD_COLUMNS, self._columns(), strict=True):
                arr.extend(cols[name])

    def _columns(self) -> tuple[array, ...]:
        """The sample arrays in the child's column order (bench.monitor.child.COLUMNS)."""
        return (self._t, self._power, self._sm, self._mem, self._temp, self._mask, self._energy, self._energy_t)

    def _pull(self) -> None:
        if self._remote is not None:
            self._ask("pull")

    def close(self) -> None:
        """Stop sampling, end the sampler process and release NVML (nvmlShutdown). Samples stay readable."""
        self.stop()
        self._ask("quit")
        if self.available:
            self.device.shutdown()
            self.available = False
            self.unavailable_reason = "closed"

    def __enter__(self) -> PowerMonitor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------- samples
    def sample_now(self) -> dict | None:
        """Take one sample synchronously, outside the thread (e.g. to mark a boundary).

        Returns the sample dict; None when unavailable or when the power read failed (then
        ``error`` is set). Never raises.
        """
        if not self.available:
            return None
        self._pull()  # the process's samples first: the timeline stays in time order
        try:
            return self._sample(as_dict=True)
        except Exception as exc:
            self.error = f"NVML power read failed: {one_line(exc, type_name=False)}"
            return None

    def _sample(self, as_dict: bool = False) -> dict | None:
        """Read and store one sample (its dict if ``as_dict``). Raises PowerReadError if power fails."""
        dev = self.device
        try:
            power = dev.read_power_w()
        except Exception as exc:
            raise PowerReadError(one_line(exc, type_name=False)) from exc
        t = time.monotonic()
        sm, mem, temp, mask = dev.read_sm_clock(), dev.read_mem_clock(), dev.read_temperature(), dev.read_reason_mask()
        energy, t_energy = MISSING, math.nan
        if self.read_energy:
            t_before = time.monotonic()
            energy = dev.read_energy_mj()
            t_energy = 0.5 * (t_before + time.monotonic())
        with self._lock:
            if self._t0 is None:
                self._t0 = t
            for arr, v in (
                (self._t, t),
                (self._power, power),
                (self._sm, sm),
                (self._mem, mem),
                (self._temp, temp),
                (self._mask, mask),
                (self._energy, energy),
                (self._energy_t, t_energy),
                (self._case, self._case_index[self._case_id]),
            ):
                arr.append(v)
            return self._sample_dict(len(self._t) - 1) if as_dict else None

    def energy_mj(self) -> int | None:
        """Total energy since the driver loaded (mJ), or None if unavailable or the read fails."""
        if not self.available:
            return None
        return _value(self.device.read_energy_mj())

    def _sample_dict(self, i: int) -> dict:
        mask = self._mask[i]
        return {
            "time_s": self._t[i] - (self._t0 or 0.0),
            "gpu_index": self.device_index,
            "power_w": self._power[i],
            "sm_clock_mhz": _value(self._sm[i]),
            "mem_clock_mhz": _value(self._mem[i]),
            "temperature_c": _value(self._temp[i]),
            "reasons": None if mask == MISSING else decode_reasons(mask),
            "case_id": self._case_names[self._case[i]],
        }

    def __len__(self) -> int:
        self._pull()
        return len(self._t)

    def samples(self, start: int = 0) -> list[dict]:
        """The samples so far from index `start` on (a copy). ``reasons`` is None where the reason read failed."""
        self._pull()
        with self._lock:
            return [self._sample_dict(i) for i in range(start, len(self._t))]

    def window(self, start: int, stop: int | None = None) -> dict:
        """Samples `start:stop` as parallel lists (None = not read): times_s (monotonic, the power
        read's), power_w, sm_clock_mhz, temperature_c, reason_masks, energy_mj, energy_times_s."""
        self._pull()
        with self._lock:
            sl = slice(start, len(self._t) if stop is None else stop)
            return {
                "times_s": list(self._t[sl]),
                "power_w": list(self._power[sl]),
                "sm_clock_mhz": [_value(v) for v in self._sm[sl]],
                "temperature_c": [_value(v) for v in self._temp[sl]],
                "reason_masks": [_value(v) for v in self._mask[sl]],
                "energy_mj": [_value(v) for v in self._energy[sl]],
                "energy_times_s": list(self._energy_t[sl]),
            }

    def clear(self) -> None:
        """Drop recorded samples and markers (the time origin is kept)."""
        self._pull()
        with self._lock:
            for arr in (*self._columns(), self._case):
                del arr[:]
            self._markers.clear()

    def write_csv(self, path: Any) -> None:
        """power.csv (results.power_csv.POWER_COLUMNS): one row per sample; reasons joined with "|", missing
        values empty."""
        atomic_write(path, power_csv_text(self.samples()))

    # ----------------------------------------------------------------- thread
    @property
    def running(self) -> bool:
        if self._remote is not None:
            reply = self._ask("pull")
            return bool(reply and reply["sampling"])
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the background sampler (no-op if unavailable or already running): the sampler process,
        started once and kept between stop() and start(), or the thread."""
        if not self.available or self.running:
            return
        self.error = None
        with self._lock:
            if self._t0 is None:
                self._t0 = time.monotonic()
        if self.sampler == "process":
            try:
                if self._remote is None:
                    self._remote = SamplerProcess(self.device_index, self.period_ms, self._nvml_spec)
            except SamplerGone as exc:  # sample anyway, in a thread, and say why
                self.sampler, self.sampler_note = "thread", f"sampling in a thread: {exc}"
            else:
                self._ask("start")
                return
        stop_event = threading.Event()
        thread = threading.Thread(
            target=self._loop, args=(stop_event,), name=f"PowerMonitor-gpu{self.device_index}", daemon=True
        )
        self._stop_event, self._thread = stop_event, thread
        thread.start()

    def stop(self) -> None:
        """Stop sampling (the process keeps its samples for the next pull) or wait for the thread to end
        (no-op if not running)."""
        self._ask("stop")
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
            except PowerReadError as exc:
                self.error = f"NVML power read failed: {exc}"
                return
            except Exception as exc:  # a bug here must not kill the benchmark either
                self.error = f"power monitor stopped: {one_line(exc)}"
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
            self._timeline[0].append(now)
            self._timeline[1].append(self._case_index[case_id])

    def end_case(self) -> None:
        now = time.monotonic()
        with self._lock:
            if self._case_id:
                self._markers.append({"time_s": self._rel(now), "event": "end", "case_id": self._case_id})
            self._case_id = ""
            self._timeline[0].append(now)
            self._timeline[1].append(0)
        self._pull()  # the child keeps only a case's samples at a time

    @property
    def case_id(self) -> str:
        return self._case_id

    def markers(self) -> list[dict]:
        """Case boundaries: [{"time_s", "event": "begin"|"end", "case_id"}] on the samples' time axis."""
        with self._lock:
            return [dict(m) for m in self._markers]

    def _rel(self, t: float) -> float:
        if self._t0 is None:
            self._t0 = t
        return t - self._t0

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
            "sampler": self.sampler,
            "sampler_note": self.sampler_note,
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
        settle_s: float = 0.0,
        flops_per_call: float | None = None,
        case_id: str | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> dict | None:
        """Run ``fn()`` in a loop for >= ``min_seconds`` with sampling on; return the power dict.

        The loop is :func:`run_for` (sync, the ``settle_s`` pre-roll, then the window: doubling batches
        of calls with a sync after each). Returns None without calling ``fn`` when the monitor is
        unavailable; otherwise the power dict (its fields: `bench.monitor.measure.power_of_window`).

        If the sampler dies mid-run the sample fields may be None; if neither samples nor the energy
        counter gave anything, None is returned. NVML problems never raise; exceptions from
        ``fn``/``sync`` do (the sampler and case markers are restored first). If the sampler was not
        running it is started for the window and stopped afterwards. ``clock`` is injectable for tests.
        """
        if not self.available:
            return None
        owns_thread = not self.running
        if owns_thread:
            self.start()
        prev_case = self._case_id
        if case_id is not None:
            self.begin_case(case_id)
        marks: dict[str, Any] = {"s0": time.monotonic()}

        def on_start() -> None:
            self.read_energy = True  # a counter read costs ms of CPU: only inside the window
            marks["i0"] = len(self)
            marks["e0"] = self.energy_mj()
            marks["m0"] = time.monotonic()

        try:
            calls, seconds = run_for(
                fn, sync=sync, min_seconds=min_seconds, clock=clock, on_start=on_start, settle_s=settle_s
            )
            e1 = self.energy_mj()
            m1 = time.monotonic()
            window = self.window(marks["i0"])
            monitor_error = self.error
        finally:
            self.read_energy = False
            if case_id is not None:
                self.end_case()
                if prev_case:
                    self.begin_case(prev_case)
            if owns_thread:
                self.stop()
        result = power_of_window(
            window,
            calls=calls,
            seconds=seconds,
            wall_s=m1 - marks["m0"],
            e0=marks["e0"],
            e1=e1,
            cap_w=self.cap_w(),
            flops_per_call=flops_per_call,
        )
        if result is not None:
            result.update(
                settle_s=marks["m0"] - marks["s0"], power_source=self.power_source, monitor_error=monitor_error
            )
        return result
