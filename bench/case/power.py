"""Power of one case (docs/DESIGN.md §5): the energy loop, before or after the timed samples, the SM clock
while the samples were taken, and the optional monitor-overhead check (the same case timed with the
sampling thread stopped)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable

from bench.case.timing import Samples
from bench.config.cases import Case
from results.record import samples_clock


class CasePower:
    """`monitor`: a started PowerMonitor or None (CPU run, power disabled); `timer(fn) -> Samples` times
    a callable the way the runner does; `sync()` waits for the device."""

    def __init__(self, monitor, power_cfg, timer: Callable[[Callable], Samples], sync: Callable[[], None]):
        self.monitor, self.cfg, self.timer, self.sync = monitor, power_cfg, timer, sync

    @property
    def available(self) -> bool:
        return self.monitor is not None and self.monitor.available

    def time_samples(self, fn: Callable) -> tuple[Samples, float | None]:
        """The case's timed samples and the median SM clock (MHz) they ran at (None: no sampler running),
        recorded whether or not the energy loop runs (compare normalises times by it).

        With `power.pause_for_samples` (the default) the sampler is paused for them and the clock is read
        in this process after each of the timer's chunks, once its calls have synced: no NVML read overlaps
        a timed call. A sampler process running through the samples moved a host-bound call's p50 by 13% on
        the H200 (2026-12-02; why a read in another process costs this one's launches is not established).
        The readings stay in the timeline (power.csv) under the case's id."""
        if not self.available or not getattr(self.monitor, "running", False):
            return self.timer(fn), None
        if not self.cfg.pause_for_samples:
            mark = len(self.monitor)
            samples = self.timer(fn)
            clocks = [c for c in self.monitor.window(mark)["sm_clock_mhz"] if c is not None]
            return samples, self._median(clocks) or self.clock_now()
        readings: list[dict | None] = []
        self.monitor.stop()
        try:
            samples = self.timer(fn, between=lambda: readings.append(self.monitor.sample_now()))
        finally:
            self.monitor.start()
        clocks = [r["sm_clock_mhz"] if r else None for r in readings]
        if isinstance(samples, Samples) and len(clocks) == len(samples.chunk_ends):
            # each chunk's clock beside its samples: the power cap moves the clock inside one window (the H200,
            # 2026-12-03: 1905 -> 1575 MHz over a case's last chunk), which the median alone hides
            samples.chunk_clocks_mhz = clocks
            return samples, samples_clock([[n, c] for n, c in zip(samples.chunk_ends, clocks, strict=True)])
        return samples, self._median([c for c in clocks if c is not None])

    def clock_now(self) -> float | None:
        """One reading now (a window shorter than one sampling period has none of its own; the CUDA-graph
        replays'); None without a running monitor."""
        if not self.available:
            return None
        now = self.monitor.sample_now() or {}
        return None if now.get("sm_clock_mhz") is None else float(now["sm_clock_mhz"])

    @staticmethod
    def _median(clocks: list) -> float | None:
        return float(statistics.median(clocks)) if clocks else None

    def before_samples(self, case: Case, rec: dict, fn: Callable, flops: float) -> None:
        if self.cfg.energy_loop_first:
            self.energy_loop(case, rec, fn, flops)

    def after_samples(self, case: Case, rec: dict, fn: Callable, flops: float) -> None:
        if not self.available:
            return
        if self.cfg.overhead_check and re.search(self.cfg.overhead_check, case.id):
            self.overhead_check(rec, fn)
        if not self.cfg.energy_loop_first:
            self.energy_loop(case, rec, fn, flops)

    def overhead_check(self, rec: dict, fn: Callable) -> None:
        """`monitor_overhead`: the case timed with the sampler running, stopped, and running again ("with" the
        mean of the two, so a clock drifting over the three windows cancels). The samples themselves ran with it
        paused under `pause_for_samples` (the default), so they cannot be the "with" side (the check read ~0%
        whatever monitoring cost). A sampler that is not running leaves the check out, said in the record."""
        if not getattr(self.monitor, "running", False):
            rec["monitor_overhead"] = {"error": "the sampler was not running: nothing to compare"}
            return
        first = self.timer(fn).median_ms
        self.monitor.stop()
        try:
            without = self.timer(fn).median_ms
        finally:
            self.monitor.start()
        with_ms = (first + self.timer(fn).median_ms) / 2
        rec["monitor_overhead"] = {
            "median_ms_with": with_ms,
            "median_ms_without": without,
            "overhead": with_ms / without - 1.0,
        }

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
