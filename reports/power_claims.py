"""A run's power counts (results.power.power_counts) as the sentences a report or the README states:
`gdpa-bench power-checks RUN_DIR` prints them."""

from __future__ import annotations

from results.power import ABOVE_CAP_MARGIN, ESTIMATOR_TOLERANCE, THERMAL_REASONS

SHOWN_THERMAL = 5  # ids named in the thermal sentence; the rest counted


def claims(counts: dict) -> list[str]:
    """The counts as sentences for a report or the README."""
    n = counts["with_power"]
    if not n:
        return [f"No power data: {counts['ok']} ok case(s), none with a power measurement."]
    cap = f"{counts['cap_w']:.0f} W" if counts["cap_w"] else "the cap"
    coarse = counts.get("coarse_counter") or 0
    lines = [
        f"{n} of {counts['ok']} ok cases have a power measurement (energy loop).",
        f"sw_power_cap was set during the energy loop of {counts['sw_power_cap']} of {n} cases.",
    ]
    judged_cap = n - counts["above_cap_unknown"]
    if judged_cap:
        lines.append(
            f"{counts['above_cap']} of {judged_cap} cases average above {cap} + {ABOVE_CAP_MARGIN:.0%} (energy counter)"
            + (f"; {unknown} without a cap or a figure" if (unknown := counts["above_cap_unknown"] - coarse) else "")
            + "."
        )
    if coarse:
        lines.append(
            f"{coarse} of {n} cases cannot be judged by either flag: their energy loops were too short for the "
            f"energy counter (a step every ~100 ms) to resolve {ESTIMATOR_TOLERANCE:.0%} (`power.energy_loop_s`: "
            "1 s or more resolves it)."
        )
    judged = n - counts["estimators_unknown"]
    if judged:
        lines.append(
            f"{counts['estimators_disagree']} of {judged} cases have their two power estimators (energy counter; "
            f"samples over the same span) more than {ESTIMATOR_TOLERANCE:.0%} apart"
            + (f"; {counts['estimators_unknown']} cannot be judged" if counts["estimators_unknown"] else "")
            + "."
        )
    elif not coarse:
        lines.append("The estimator agreement cannot be judged: no case records avg_w_same_span (an older run).")
    hot = counts.get("thermal") or {}
    if hot:
        named = "; ".join(f"{cid} ({what})" for cid, what in list(hot.items())[:SHOWN_THERMAL])
        more = f"; and {len(hot) - SHOWN_THERMAL} more" if len(hot) > SHOWN_THERMAL else ""
        lines.append(
            f"{len(hot)} of {n} cases ran with a thermal clock reason ({', '.join(THERMAL_REASONS)}): temperature, "
            f"not only the power cap, set their clock, so their times say as much about the card's state as about "
            f"the kernel: {named}{more}."
        )
    return lines
