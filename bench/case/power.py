"""Power of one case (docs/DESIGN.md §5): the energy loop, before or after the timed samples, the SM clock
while the samples were taken, and the optional monitor-overhead check (the same case timed with the
sampling thread stopped)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable

from bench.case.timing import Samples
from bench.config.cases import Case


class CasePower:
    """`monitor`: a started PowerMonitor or None (CPU run, power disabled); `timer(fn) -> Samples` times
    a callable the way the runner does; `sync()` waits for the device."""

    def __init__(self, monitor, power_cfg, timer: Callable[[Callable], Samples], sync: Callable[[], None]):
        self.monitor, self.cfg, self.timer, self.sync = monitor, power_cfg, timer, sync

    @property
    def available(self) -> bool:
        return self.monitor is not None and self.monitor.available

    def mark(self) -> int | None:
        """Where the sampler's record stands before the timed samples (None: it is not sampling)."""
        if not self.available or not getattr(self.monitor, "running", False):
            return None
        return len(self.monitor)

    def clock_since(self, mark: int | None) -> float | None:
        """The median SM clock (MHz) of the sampler's readings since `mark`: the clock the timed samples
        ran at, recorded whether or not the energy loop runs (compare normalises times by it). A window
        shorter than one sampling period takes one reading now."""
        if mark is None:
            return None
        clocks = [c for c in self.monitor.window(mark)["sm_clock_mhz"] if c is not None]
        if not clocks:
            now = self.monitor.sample_now() or {}
            clocks = [now["sm_clock_mhz"]] if now.get("sm_clock_mhz") is not None else []
        return float(statistics.median(clocks)) if clocks else None

    def before_samples(self, case: Case, rec: dict, fn: Callable, flops: float) -> None:
        if self.cfg.energy_loop_first:
            self.energy_loop(case, rec, fn, flops)

    def after_samples(self, case: Case, rec: dict, fn: Callable, flops: float) -> None:
        if not self.available:
            return
        if self.cfg.overhead_check and re.search(self.cfg.overhead_check, case.id):
            self.monitor.stop()
            try:
                without = self.timer(fn)
            finally:
                self.monitor.start()
            rec["monitor_overhead"] = {
                "median_ms_with": rec["median_ms"],
                "median_ms_without": without.median_ms,
                "overhead": rec["median_ms"] / without.median_ms - 1.0,
            }
        if not self.cfg.energy_loop_first:
            self.energy_loop(case, rec, fn, flops)

    def energy_loop(self, case: Case, rec: dict, fn: Callable, flops: float) -> None:
        """`fn` back to back for `power.energy_loop_s` seconds under the monitor: the case's `power`."""
        if not self.available or self.cfg.energy_loop_s <= 0:
            return
        rec["power"] = self.monitor.measure(
            fn,
            sync=self.sync,
            min_seconds=self.cfg.energy_loop_s,
            settle_s=self.cfg.settle_s,
            flops_per_call=flops,
            case_id=case.id,
        )
