"""The measured loop of a case's power (docs/DESIGN.md §5): run a callable for at least N seconds with the
sampler on, then turn the window's samples and energy-counter readings into the case's `power` dict."""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.monitor.summary import counter_ticks, energy_from_ticks, summarize_samples
from results.power import power_flags


def run_for(
    fn: Callable[[], Any],
    *,
    sync: Callable[[], Any],
    min_seconds: float,
    clock: Callable[[], float] = time.perf_counter,
    on_start: Callable[[], Any] | None = None,
    settle_s: float = 0.0,
) -> tuple[int, float]:
    """Call ``fn()`` back to back until >= ``min_seconds`` of wall time have passed; (calls, seconds).

    ``sync()`` runs first; then, when ``settle_s`` > 0, the same loop runs for ``settle_s`` seconds
    uncounted (the pre-roll: the window then opens with the GPU loaded and its power state settled,
    docs/DESIGN.md §5); then ``on_start()``, if given, and the clock starts. Syncs run after each batch
    of calls, never per call. Batches double (1, 1, 2, 4, ...) and the last one is sized from the rate
    seen so far, so the loop ends close to ``min_seconds``: checking only the host clock would let the
    host queue far more launches than the window holds before the final sync (docs/DESIGN.md §5).
    About log2(calls) syncs, each a few-µs bubble. ``seconds`` is read after the final sync, so it
    covers all ``calls``. At least one call is made.
    """
    sync()
    if settle_s > 0:
        _loop(fn, sync, settle_s, clock)
    if on_start is not None:
        on_start()
    return _loop(fn, sync, min_seconds, clock)


def _loop(fn: Callable[[], Any], sync: Callable[[], Any], seconds: float, clock: Callable[[], float]):
    t0 = clock()
    calls = 0
    batch = 1
    while True:
        for _ in range(batch):
            fn()
        calls += batch
        sync()
        elapsed = clock() - t0
        if elapsed >= seconds:
            return calls, elapsed
        per_call = elapsed / calls
        need = math.ceil((seconds - elapsed) / per_call) if per_call > 0 else calls
        batch = max(1, min(need, calls))


def power_of_window(
    window: dict,
    *,
    calls: int,
    seconds: float,
    wall_s: float,
    e0: int | None,
    e1: int | None,
    cap_w: float | None,
    flops_per_call: float | None,
) -> dict | None:
    """The `power` dict of one measured window (`PowerMonitor.measure`), with:

    - ``avg_w``, ``peak_w``, ``n_samples``: the sampler's readings inside the window;
    - ``avg_w_from_energy``: power from the NVML energy counter, and ``energy_j_per_call`` =
      ``avg_w_from_energy * seconds / calls``. ``energy_source`` says how: ``"counter_ticks"``
      (between the first and last counter update the sampler saw inside the window, when they
      span >= half of it; removes the counter's step error), ``"counter"`` (counter delta between
      the start and end of the window), or ``"samples"`` (counter unreadable: ``avg_w * seconds``;
      ``avg_w_from_energy`` is then None); ``avg_w_from_energy_delta`` always holds the plain
      start/end delta (None if unreadable), for comparison; ``energy_span_s``: the time the counter
      figure covers, ``counter_step_ms``: the median time between counter updates;
    - ``avg_w_same_span`` (``n_samples_same_span``): the samples' average over the counter
      figure's span: the second estimator of the same energy;
    - ``headline_w`` (the one figure a report shows: ``avg_w_from_energy``, else ``avg_w``),
      ``estimator_diff`` / ``estimators_disagree`` (``avg_w_same_span`` vs the counter, > 5%) and
      ``above_cap`` (headline > cap + 3%): `results.power.power_flags`;
    - ``settle_s``: the pre-roll's length (s);
    - ``tflops`` (if ``flops_per_call``), ``tflops_per_w`` (over ``avg_w_from_energy``, else
      ``avg_w``);
    - ``frac_at_cap``: share of samples with power >= 0.97 x cap OR the sw_power_cap reason
      (parts: ``frac_power_at_cap``, ``frac_sw_power_cap``); ``cap_w`` = the configured cap,
      else the enforced limit;
    - ``sm_clock_mhz_median``, ``temperature_c_max``, ``reasons`` (sorted names seen in any
      sample of the window), ``calls``, ``seconds``, ``power_source``, ``monitor_error``.

    `window`: the sampler's readings inside it (`PowerMonitor.window`); `e0`/`e1`: the energy counter
    (mJ) read at its start and end; `wall_s`: the monotonic span between those two reads. None when
    neither samples nor the counter gave anything."""
    power_w = window["power_w"]
    result = summarize_samples(
        power_w, window["sm_clock_mhz"], window["temperature_c"], window["reason_masks"], cap_w=cap_w
    )
    delta_w = None
    if e0 is not None and e1 is not None and e1 > e0 and seconds > 0:
        delta_w = (e1 - e0) / 1000.0 / seconds
    avg_w_from_energy, energy_source, span = None, None, None
    ticks = counter_ticks(window["energy_times_s"], window["energy_mj"])
    from_ticks = energy_from_ticks(window["energy_times_s"], window["energy_mj"])
    if from_ticks is not None and from_ticks[1] >= 0.5 * wall_s:
        avg_w_from_energy, energy_source = from_ticks[0], "counter_ticks"
        span = (ticks[0][0], ticks[-1][0])
    elif delta_w is not None:
        avg_w_from_energy, energy_source = delta_w, "counter"
    if avg_w_from_energy is not None:
        energy_j = avg_w_from_energy * seconds
    elif result["avg_w"] is not None:
        energy_source = "samples"
        energy_j = result["avg_w"] * seconds
    else:
        return None  # nothing measured: no samples and no energy counter
    # the samples over the span the counter figure covers: the same stretch of the loop, two instruments
    times = window.get("times_s") or []
    if span is not None and len(times) == len(power_w):
        same = [p for t, p in zip(times, power_w, strict=True) if span[0] <= t <= span[1]]
    else:
        same = list(power_w)  # the delta (or the samples themselves) covers the whole window
    tflops = flops_per_call * calls / seconds / 1e12 if flops_per_call is not None and seconds > 0 else None
    watts = avg_w_from_energy if avg_w_from_energy is not None else result["avg_w"]
    steps = [b[0] - a[0] for a, b in itertools.pairwise(ticks)]
    result.update(
        {
            "energy_j_per_call": energy_j / calls,
            "energy_source": energy_source,
            "avg_w_from_energy": avg_w_from_energy,
            "avg_w_from_energy_delta": delta_w,
            "energy_span_s": (span[1] - span[0]) if span else (seconds if energy_source == "counter" else None),
            "counter_step_ms": 1e3 * statistics.median(steps) if steps else None,
            "avg_w_same_span": math.fsum(same) / len(same) if same else None,
            "n_samples_same_span": len(same),
            "tflops": tflops,
            "tflops_per_w": tflops / watts if tflops is not None and watts else None,
            "cap_w": cap_w,
            "calls": calls,
            "seconds": seconds,
        }
    )
    result.update(power_flags(result))
    return result
