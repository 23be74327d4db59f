"""A pynvml stand-in for the monitor's CPU tests: FakeNVML replays a trace of (power_mw, sm_clock, mem_clock,
temp, reasons_mask, energy_mj) steps; each power read advances it. The factories at the end make the
stand-ins a sampler *process* imports by name (`PowerMonitor(nvml="tests.fake_nvml:constant")`): an object
cannot cross processes, a module path can."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

TRACE_PATH = Path(__file__).parent / "fixtures" / "nvml_trace.json"


def load_trace() -> list[list[int]]:
    """(power_mw, sm_clock, mem_clock, temp, reasons_mask, energy_mj) steps of a recorded H200 trace."""
    return [[int(v) for v in s[:6]] for s in json.loads(TRACE_PATH.read_text())["steps"]]


class FakeNVMLError(Exception):
    def __init__(self, value=999, msg="Unknown Error"):
        super().__init__(msg)
        self.value = value


class FakeNVML:
    """Replays a trace. Step i is served by the i-th power read; other reads see the current step."""

    NVML_FI_DEV_POWER_INSTANT = 186
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_SUCCESS = 0
    NVMLError = FakeNVMLError

    def __init__(
        self,
        steps,
        *,
        instant="ok",  # "ok" | "status" (field error status) | "raises" | "zero"
        average_ok=True,
        cycle=False,
        fail_power_after=None,  # power reads (after rewind) that succeed before every read raises
        energy=None,  # None: from the trace; callable: () -> mJ; "fail": raises
        temp_fails=False,
        reasons_api="event",  # "event" | "throttle" | None
        init_fails=False,
        handle_fails=False,
        enforced_mw=700_000,
        default_mw=700_000,
        name=b"NVIDIA H200",
    ):
        self.steps = [list(s) for s in steps]
        self.instant = instant
        self.average_ok = average_ok
        self.cycle = cycle
        self.fail_power_after = fail_power_after
        self.energy = energy
        self.temp_fails = temp_fails
        self.init_fails = init_fails
        self.handle_fails = handle_fails
        self.enforced_mw = enforced_mw
        self.default_mw = default_mw
        self.name = name
        self.i = -1
        self.power_reads = 0
        self.armed = False  # fail_power_after counts from rewind(), so the monitor's probe succeeds
        self.calls: dict[str, int] = {}
        self.set_calls: list[str] = []
        self.lock = threading.Lock()
        if reasons_api == "event":
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons
        elif reasons_api == "throttle":
            self.nvmlDeviceGetCurrentClocksThrottleReasons = self._reasons

    def __getattr__(self, name):  # only called for attributes that do not exist
        if name.startswith("nvmlDeviceSet"):
            self.set_calls.append(name)  # the monitor must never change clocks or limits
        raise AttributeError(name)

    # helpers for tests
    def rewind(self):
        with self.lock:
            self.i = -1
            self.power_reads = 0
            self.armed = True

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def _step(self):
        i = max(self.i, 0)
        return self.steps[i % len(self.steps)] if self.cycle else self.steps[min(i, len(self.steps) - 1)]

    def _advance_power_mw(self):
        with self.lock:
            if self.armed and self.fail_power_after is not None and self.power_reads >= self.fail_power_after:
                raise FakeNVMLError(15, "GPU is lost")
            self.power_reads += 1
            self.i += 1
            return self._step()[0]

    # pynvml API
    def nvmlInit(self):
        self._count("nvmlInit")
        if self.init_fails:
            raise FakeNVMLError(12, "NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self._count("nvmlShutdown")

    def nvmlDeviceGetHandleByIndex(self, index):
        if self.handle_fails:
            raise FakeNVMLError(2, "Invalid Argument")
        return ("handle", index)

    def nvmlDeviceGetName(self, handle):
        return self.name

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self.enforced_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        return self.default_mw

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        self._count("nvmlDeviceGetFieldValues")
        assert list(field_ids) == [self.NVML_FI_DEV_POWER_INSTANT]
        if self.instant == "raises":
            raise FakeNVMLError(3, "Not Supported")
        if self.instant == "status":
            return [SimpleNamespace(fieldId=186, nvmlReturn=3, valueType=1, value=SimpleNamespace(uiVal=0))]
        mw = 0 if self.instant == "zero" else self._advance_power_mw()
        return [SimpleNamespace(fieldId=186, nvmlReturn=0, valueType=1, value=SimpleNamespace(uiVal=mw))]

    def nvmlDeviceGetPowerUsage(self, handle):
        self._count("nvmlDeviceGetPowerUsage")
        if not self.average_ok:
            raise FakeNVMLError(3, "Not Supported")
        return self._advance_power_mw()

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return self._step()[1] if kind == self.NVML_CLOCK_SM else self._step()[2]

    def nvmlDeviceGetTemperature(self, handle, sensor):
        if self.temp_fails:
            raise FakeNVMLError(3, "Not Supported")
        return self._step()[3]

    def _reasons(self, handle):
        return self._step()[4]

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self._count("energy")
        if self.energy == "fail":
            raise FakeNVMLError(3, "Not Supported")
        if callable(self.energy):
            return self.energy()
        return self._step()[5]


CONST = [690_000, 1755, 3201, 61, 0x4, 0]  # at the 700 W cap, sw_power_cap set
T_ORIGIN = 1_700_000_000.0  # the energy counters below count from a fixed wall-clock origin: both processes agree


def energy_at_700w() -> int:
    """An energy counter (mJ) that advances at 700 W of real time, in 10 ms steps, as NVML's does in ~100 ms
    steps: the parent's and the child's stand-ins read the same value at the same time."""
    return 1_000_000 + int((time.time() - T_ORIGIN) / 0.01) * 7_000


def constant() -> FakeNVML:
    """A GPU held at the cap, sampled for as long as asked."""
    return FakeNVML([CONST], cycle=True, energy=energy_at_700w)


def failing() -> FakeNVML:
    """The power read fails after the probe and five samples ("GPU is lost")."""
    fake = FakeNVML([CONST], cycle=True, fail_power_after=6)
    fake.armed = True
    return fake
