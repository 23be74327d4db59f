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


def _num(x: Any) -> float | None:
    known = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if known else None


def headline_w(power: dict) -> float | None:
    """The one power figure a report shows: the energy counter's average, else the samples' (counter
    unreadable). `energy_source` says which."""
    w = _num(power.get("avg_w_from_energy"))
    return w if w is not None else _num(power.get("avg_w"))


def power_flags(power: dict) -> dict:
    """`headline_w`, `estimator_diff` (samples over the same span ÷ headline − 1), `estimators_disagree`
    and `above_cap` (None where a figure or the cap is missing) of one case's `power` dict."""
    head, cap = headline_w(power), _num(power.get("cap_w"))
    counter = _num(power.get("avg_w_from_energy"))
    same = _num(power.get("avg_w_same_span"))
    diff = same / counter - 1.0 if counter and same is not None else None
    return {
        "headline_w": head,
        "estimator_diff": diff,
        "estimators_disagree": None if diff is None else abs(diff) > ESTIMATOR_TOLERANCE,
        "above_cap": None if head is None or not cap else head > cap * (1.0 + ABOVE_CAP_MARGIN),
    }


def power_counts(cases: list[dict]) -> dict:
    """Counts over the ok cases with a `power` dict: how many saw `sw_power_cap`, were above cap + 3%,
    or had their two estimators more than 5% apart (`*_unknown`: cases that cannot be judged)."""
    out = {"ok": 0, "with_power": 0, "sw_power_cap": 0, "above_cap": 0, "estimators_disagree": 0}
    out |= {"above_cap_unknown": 0, "estimators_unknown": 0, "cap_w": None}
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
        flags = power_flags(p)
        for key, unknown in (("above_cap", "above_cap_unknown"), ("estimators_disagree", "estimators_unknown")):
            if flags[key] is None:
                out[unknown] += 1
            else:
                out[key] += bool(flags[key])
    return out
