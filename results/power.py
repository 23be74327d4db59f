"""Whether a case's power figures add up (docs/DESIGN.md §5), and a run's counts of the cases that do not
(`gdpa-bench power-checks RUN_DIR` prints them as sentences: reports.power_claims).

Per case (the runner stores `power_flags` in each case's `power`): `above_cap` when the headline power
(the energy counter's, `avg_w_from_energy`) exceeds the cap by more than `ABOVE_CAP_MARGIN`;
`estimators_disagree` when the sampled power over the same span (`avg_w_same_span`) differs from the
headline by more than `ESTIMATOR_TOLERANCE`. Runs recorded before these fields existed are judged from
their own fields where they can be (the cap check), and said to lack the rest.
"""

from __future__ import annotations

import math
from typing import Any

ABOVE_CAP_MARGIN = 0.03  # a case above cap × 1.03 is flagged: the cap controller's overshoot is ~3%
ESTIMATOR_TOLERANCE = 0.05  # counter and samples over the same span: within 5%, or the case is flagged
# NVML's clock-event reasons that say temperature, not the power cap, set the clock (bench.monitor.reasons)
THERMAL_REASONS = ("sw_thermal", "hw_thermal", "hw_slowdown")


def _num(x: Any) -> float | None:
    known = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if known else None


def counter_resolution(power: dict) -> float | None:
    """How finely the energy counter's figure is timed, as a fraction of it: its step-to-step figure
    (`counter_ticks`) knows each end step to within one sample period, 2 / n_samples_same_span; the plain
    start/end delta (`counter`: too few steps in the window) is off by up to one counter step at each end,
    2 · counter_step_ms / seconds. None where the record does not say."""
    source = power.get("energy_source")
    if source == "counter_ticks":
        n = _num(power.get("n_samples_same_span"))
        return 2.0 / n if n else None
    if source == "counter":
        step, seconds = _num(power.get("counter_step_ms")), _num(power.get("seconds"))
        return 2.0 * step / 1e3 / seconds if step is not None and seconds else None
    return None


def counter_resolves(power: dict) -> bool:
    """Whether the counter's figure resolves ESTIMATOR_TOLERANCE: the flags judge a case only then. An H200
    steps its counter every ~100 ms: docs/example-h200-peers' 0.3 s energy loops gave spans of 0.18-0.29 s
    (18-29 samples: 7-11%), and 3 plain deltas of 918-946 W where every sample read 766 W or less (67%). A
    record too old to say either is judged as it was."""
    resolution = counter_resolution(power)
    if resolution is not None:
        return resolution <= ESTIMATOR_TOLERANCE
    # a delta recorded with no step: fewer than two steps in its window
    return not (power.get("energy_source") == "counter" and "counter_step_ms" in power)


def headline_w(power: dict) -> float | None:
    """The one power figure a report shows: the energy counter's average, else the samples' over the same
    span (counter unreadable, or only its plain start/end delta, coarser than the tolerance: `counter_resolves`).
    A step-to-step figure stays the headline however short its span: its ends are off by a sample period at
    most, not by a counter step."""
    w = _num(power.get("avg_w_from_energy"))
    if w is not None and (power.get("energy_source") != "counter" or counter_resolves(power)):
        return w
    same = _num(power.get("avg_w_same_span"))
    return same if same is not None else _num(power.get("avg_w"))


def power_flags(power: dict) -> dict:
    """`headline_w`, `estimator_diff` (samples over the same span ÷ headline − 1), `estimators_disagree`
    and `above_cap` (None where a figure or the cap is missing, or the counter's figure cannot be judged)
    of one case's `power` dict."""
    head, cap = headline_w(power), _num(power.get("cap_w"))
    counter, same = _num(power.get("avg_w_from_energy")), _num(power.get("avg_w_same_span"))
    diff = same / counter - 1.0 if counter and same is not None else None
    judged = counter is None or counter_resolves(power)  # no counter: the samples alone, judged as they are
    return {
        "headline_w": head,
        "estimator_diff": diff,
        "estimators_disagree": None if diff is None or not judged else abs(diff) > ESTIMATOR_TOLERANCE,
        "above_cap": None if head is None or not cap or not judged else head > cap * (1.0 + ABOVE_CAP_MARGIN),
    }


def thermal(power: dict | None) -> str | None:
    """`sw_thermal at 68 °C` where a case's energy loop saw a thermal reason (THERMAL_REASONS), else None: its
    clock was held down by temperature, so its time says as much about the card's state as about the kernel
    (f20b010's H100 production run: the uniform 4096 cases at 68-70 °C, `sw_thermal` and no power cap)."""
    reasons = [r for r in ((power or {}).get("reasons") or []) if r in THERMAL_REASONS]
    if not reasons:
        return None
    temp = _num((power or {}).get("temperature_c_max"))
    return ", ".join(reasons) + (f" at {temp:.0f} °C" if temp is not None else "")


def power_counts(cases: list[dict]) -> dict:
    """Counts over the ok cases with a `power` dict: how many saw `sw_power_cap`, were above cap + 3%,
    or had their two estimators more than 5% apart (`*_unknown`: cases that cannot be judged; of them
    `coarse_counter`: an energy loop too short for the counter to resolve the tolerance); `thermal`: the ids
    of those whose clock temperature held down (`thermal`), with what their record says."""
    out = {"ok": 0, "with_power": 0, "sw_power_cap": 0, "above_cap": 0, "estimators_disagree": 0, "thermal": {}}
    out |= {"above_cap_unknown": 0, "estimators_unknown": 0, "coarse_counter": 0, "cap_w": None}
    for c in cases:
        if c.get("status") != "ok":
            continue
        out["ok"] += 1
        p = c.get("power")
        if not isinstance(p, dict):
            continue
        out["with_power"] += 1
        out["cap_w"] = out["cap_w"] or _num(p.get("cap_w"))
        out["sw_power_cap"] += "sw_power_cap" in (p.get("reasons") or [])
        if (hot := thermal(p)) is not None:
            out["thermal"][str(c.get("id"))] = hot
        flags = power_flags(p)
        out["coarse_counter"] += _num(p.get("avg_w_from_energy")) is not None and not counter_resolves(p)
        for key, unknown in (("above_cap", "above_cap_unknown"), ("estimators_disagree", "estimators_unknown")):
            if flags[key] is None:
                out[unknown] += 1
            else:
                out[key] += bool(flags[key])
    return out
