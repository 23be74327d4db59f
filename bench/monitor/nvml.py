"""NVML access for one GPU: open it, read power / clocks / temperature / reasons / energy, and the static
facts of the device. Every read is guarded: NVML problems give None (or the `MISSING` sentinel in the
sampler's integer columns), never an exception, except a failing *power* read, which the sampler
reports as `PowerReadError`.

The harness only reads: no ``nvmlDeviceSet*`` call exists in bench/ (docs/DESIGN.md §5).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from support.text import one_line

NVML_SUCCESS = 0
MISSING = -1  # "not read" in the sampler's integer columns
# nvmlValueType_t -> member of the c_nvmlValue_t union
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


class PowerReadError(Exception):
    """The power read failed: the sampler stops and records why."""


def decode_name(name: Any) -> str:
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


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


def guarded(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:
        return None


class NvmlDevice:
    """One GPU through NVML. ``available`` is False with ``unavailable_reason`` (one line) when NVML
    cannot be loaded or initialised, or no power reading works; every read is then a no-op.

    ``nvml`` injects an object exposing the pynvml functions and constants used (tests pass a
    stand-in); by default ``pynvml`` (package ``nvidia-ml-py``) is imported."""

    def __init__(self, index: int = 0, nvml: Any = None):
        self.index = int(index)
        self.available = False
        self.unavailable_reason: str | None = None
        self.power_source: str | None = None
        self.power_source_note: str | None = None
        self.enforced_power_limit_w: float | None = None
        self.default_power_limit_w: float | None = None
        self.gpu_name: str | None = None
        self.nvml: Any = None
        self.handle: Any = None
        self.reasons_fn: Callable | None = None
        self._open(nvml)

    def _open(self, nvml: Any) -> None:
        if nvml is None:
            try:
                import pynvml as nvml  # noqa: PLC0415  (optional: nvidia-ml-py; absent means "unavailable")
            except Exception as exc:  # ImportError, or a broken install
                self.unavailable_reason = (
                    f"NVML not available: cannot import pynvml (nvidia-ml-py): {one_line(exc, type_name=False)}"
                )
                return
        self.nvml = nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:
            self.unavailable_reason = f"NVML not available: nvmlInit failed: {one_line(exc, type_name=False)}"
            return
        try:
            self.handle = nvml.nvmlDeviceGetHandleByIndex(self.index)
        except Exception as exc:
            self.unavailable_reason = (
                f"NVML not available: no handle for GPU index {self.index}: {one_line(exc, type_name=False)}"
            )
            self.shutdown()
            return
        h = self.handle
        self.gpu_name = guarded(lambda: decode_name(nvml.nvmlDeviceGetName(h)))
        enforced = guarded(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(h))
        self.enforced_power_limit_w = None if enforced is None else enforced / 1000.0
        default = guarded(lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(h))
        self.default_power_limit_w = None if default is None else default / 1000.0
        if not self._pick_power_source():
            self.shutdown()
            return
        # Clock-event reasons: the new name first, then the deprecated one (older drivers/bindings).
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(nvml, name, None)
            if fn is not None and guarded(lambda fn=fn: (fn(h), True)[1]):
                self.reasons_fn = fn
                break
        self.available = True

    def _pick_power_source(self) -> bool:
        """The instantaneous power field when the driver supports it, else the ~1 s average."""
        instant_problem = None
        try:
            value = self.read_instant_mw()
            if value <= 0:
                instant_problem = f"field returned {value} mW"
        except Exception as exc:
            instant_problem = one_line(exc, type_name=False)
        if instant_problem is None:
            self.power_source = "instant"
            self.power_source_note = (
                "NVML_FI_DEV_POWER_INSTANT field (instantaneous power; the driver refreshes it about every 100 ms)"
            )
            return True
        try:
            self.nvml.nvmlDeviceGetPowerUsage(self.handle)
        except Exception as exc:
            self.unavailable_reason = (
                f"NVML power not readable on GPU {self.index}: instant field: {instant_problem}; "
                f"nvmlDeviceGetPowerUsage: {one_line(exc, type_name=False)}"
            )
            return False
        self.power_source = "average"
        self.power_source_note = (
            f"NVML_FI_DEV_POWER_INSTANT unavailable ({instant_problem}); using nvmlDeviceGetPowerUsage, "
            "a ~1 s moving average on recent GPUs: peak_w is smoothed and frac_power_at_cap lags"
        )
        return True

    def shutdown(self) -> None:
        shutdown = getattr(self.nvml, "nvmlShutdown", None)
        if shutdown is not None:
            guarded(shutdown)

    # ------------------------------------------------------------------ reads
    def read_instant_mw(self) -> float:
        nvml = self.nvml
        fv = nvml.nvmlDeviceGetFieldValues(self.handle, [nvml.NVML_FI_DEV_POWER_INSTANT])[0]
        ret = getattr(fv, "nvmlReturn", NVML_SUCCESS)
        if ret != getattr(nvml, "NVML_SUCCESS", NVML_SUCCESS):
            raise PowerReadError(f"NVML_FI_DEV_POWER_INSTANT returned status {ret}")
        member = VALUE_MEMBERS.get(getattr(fv, "valueType", 1), "uiVal")
        return float(getattr(fv.value, member))

    def read_power_w(self) -> float:
        if self.power_source == "instant":
            return self.read_instant_mw() / 1000.0
        return float(self.nvml.nvmlDeviceGetPowerUsage(self.handle)) / 1000.0

    def read_int(self, fn: Callable[[], Any]) -> int:
        try:
            return int(fn())
        except Exception:
            return MISSING

    def read_sm_clock(self) -> int:
        return self.read_int(lambda: self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))

    def read_mem_clock(self) -> int:
        return self.read_int(lambda: self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_MEM))

    def read_temperature(self) -> int:
        return self.read_int(lambda: self.nvml.nvmlDeviceGetTemperature(self.handle, self.nvml.NVML_TEMPERATURE_GPU))

    def read_reason_mask(self) -> int:
        return MISSING if self.reasons_fn is None else self.read_int(lambda: self.reasons_fn(self.handle))

    def read_energy_mj(self) -> int:
        return self.read_int(lambda: self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))


def device_facts(index: int, nvml: Any = None) -> dict:
    """Static facts of GPU `index` for the environment record: UUID, application and max clocks, ECC,
    persistence and MIG mode, driver. A fact NVML cannot give is None; nothing here raises."""
    keys = (
        "uuid",
        "driver",
        "clocks_applications_mhz",
        "clocks_max_mhz",
        "ecc_mode",
        "persistence_mode",
        "mig_mode",
        "power_limit_default_w",
        "power_limit_enforced_w",
    )
    dev = NvmlDevice(index, nvml)
    facts: dict[str, Any] = dict.fromkeys(keys)
    if dev.nvml is None or dev.handle is None:
        facts["nvml_error"] = dev.unavailable_reason
        return facts
    n, h = dev.nvml, dev.handle

    def call(name: str, *args: Any) -> Any:
        fn = getattr(n, name, None)
        return None if fn is None else guarded(lambda: fn(*args))

    uuid = call("nvmlDeviceGetUUID", h)
    driver = call("nvmlSystemGetDriverVersion")
    facts["uuid"] = None if uuid is None else decode_name(uuid)
    facts["driver"] = None if driver is None else decode_name(driver)
    clock_kinds = (("sm", getattr(n, "NVML_CLOCK_SM", 1)), ("mem", getattr(n, "NVML_CLOCK_MEM", 2)))
    facts["clocks_applications_mhz"] = {k: call("nvmlDeviceGetApplicationsClock", h, c) for k, c in clock_kinds}
    facts["clocks_max_mhz"] = {k: call("nvmlDeviceGetMaxClockInfo", h, c) for k, c in clock_kinds}
    facts["ecc_mode"] = _current(call("nvmlDeviceGetEccMode", h))
    facts["persistence_mode"] = call("nvmlDeviceGetPersistenceMode", h)
    facts["mig_mode"] = _current(call("nvmlDeviceGetMigMode", h))
    facts["power_limit_default_w"] = dev.default_power_limit_w
    facts["power_limit_enforced_w"] = dev.enforced_power_limit_w
    dev.shutdown()
    return facts


def _current(pair: Any) -> Any:
    """NVML returns (current, pending) for ECC and MIG modes: keep the current one."""
    if isinstance(pair, (list, tuple)) and pair:
        return pair[0]
    return pair
