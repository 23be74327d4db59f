"""What `gdpa-bench compare BASE CURRENT` prints: the verdicts (results.verdicts, where the rules are) as
Markdown or JSON, and the closing lines that name every case failing the gate."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from results.drift import MIN_DRIFT_SAMPLES
from results.verdicts import VERDICTS, CompareSettings, counts, regressions

# ----------------------------------------------------------------------------------------------- output


def _pct(x: Any) -> str:
    return f"{x:+.1%}" if isinstance(x, (int, float)) and math.isfinite(x) else "—"


def _ms(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) and math.isfinite(x) else "—"


def _p(x: Any) -> str:
    return f"{x:.2g}" if isinstance(x, (int, float)) and math.isfinite(x) else "—"


def _describe(path: str, results: dict) -> str:
    m = results.get("meta") or {}
    bits = [str(m.get(k)) for k in ("gpu", "git_sha", "started_at") if m.get(k)]
    runs = m.get("sessions")
    if isinstance(runs, list) and len(runs) > 1:  # resumed on another machine or commit (results.files.sessions)
        bits.append(f"{len(runs)} sessions: the latest shown")
    return f"`{path}`" + (f" ({', '.join(bits)})" if bits else "")


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def format_markdown(
    rows: list[dict], base_path: str, cur_path: str, base: dict, cur: dict, settings: CompareSettings
) -> str:
    order = {v: i for i, v in enumerate(VERDICTS)}
    lines = [
        "## gdpa-bench compare",
        "",
        f"- baseline: {_describe(base_path, base)}",
        f"- current: {_describe(cur_path, cur)}",
        f"- threshold {settings.threshold:.1%}, alpha {settings.alpha:g}, min samples {settings.min_samples}, "
        f"drift threshold {settings.drift_threshold:.1%} (first vs last tenth of a case's samples, from "
        f"{MIN_DRIFT_SAMPLES} samples, significant at alpha)"
        + (", missing cases allowed" if settings.allow_missing else ""),
        "",
    ]
    gb, gc = (base.get("meta") or {}).get("gpu"), (cur.get("meta") or {}).get("gpu")
    if gb and gc and gb != gc:
        lines += [f"> **Warning:** baseline GPU `{gb}` differs from current GPU `{gc}`.", ""]
    c = counts(rows)
    lines += ["| verdict | cases |", "|---|---|"] + [f"| {v} | {c[v]} |" for v in VERDICTS] + [""]
    lines += [
        "| case | verdict | base ms | current ms | change | p | clock-norm change | drift base | drift cur | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: (order.get(r["verdict"], 99), r["id"])):
        v = r["verdict"] + (" (fails)" if r["verdict"] == "drifting" and r["fails_gate"] else "")
        lines.append(
            f"| {_cell(r['id'])} | {v} | {_ms(r['base_median_ms'])} | {_ms(r['cur_median_ms'])} | "
            f"{_pct(r['change'])} | {_p(r['p_value'])} | {_pct(r['clock_norm_change'])} | "
            f"{_pct(r['base_drift'])} | {_pct(r['cur_drift'])} | {_cell(r['message'])} |"
        )
    return "\n".join(lines)


def summary_lines(rows: list[dict]) -> list[str]:
    bad = regressions(rows)
    if not bad:
        extra = [f"{n} {v}" for v in ("drifting", "missing") if (n := sum(r["verdict"] == v for r in rows))]
        return [
            "",
            f"OK: no case slower or failed ({len(rows)} compared"
            + (f"; {', '.join(extra)}, not failing" if extra else "")
            + ").",
        ]
    out = ["", f"REGRESSION: {len(bad)} case(s) fail the gate (slower, failed, missing, or drifting and slower):"]
    for r in bad:
        hint = "; --allow-missing accepts this" if r["verdict"] == "missing" else ""
        out.append(f"- {r['verdict']}: {r['id']} ({r['message']}{hint})")
    return out


# How a run measured, where a difference moves every median or lets a wrong kernel through: compared by
# `setting_notes`, said before compare's verdict (the work itself is checked per case: results.checks).
MEASUREMENT_SETTINGS = (
    ("timing", "flush_l2"),
    ("timing", "cuda_graph"),
    ("correctness", "enabled"),
    ("correctness", "tolerance"),
)


# What a run ran on, where a difference moves medians without any change of code: the card first (an H100 for a
# baseline taken on an H200: the device tool lent H100s for `nvidia-h200` in every session of 2026-12-06), then the
# software under the kernels. Compared by `machine_notes`, said before the verdict like the settings.
MACHINE = ("gpu", "power_cap_w", "enforced_power_limit_w")
SOFTWARE = ("driver", "cuda", "torch", "triton", "flash_attn")


def machine_notes(base: dict, cur: dict) -> list[str]:
    """A line where the runs' GPU or its power limit differ, and one where the driver or the libraries under the
    kernels do (none where the meta records agree or do not say)."""

    def differing(keys: tuple) -> list[str]:
        out = []
        for key in keys:
            values = [(data.get("meta") or {}).get(key) if isinstance(data, dict) else None for data in (base, cur)]
            if None not in values and str(values[0]) != str(values[1]):
                out.append(f"{key} {values[0]} in the baseline, {values[1]} here")
        return out

    notes = []
    if hardware := differing(MACHINE):
        notes.append(
            "note: the runs ran on different hardware ("
            + "; ".join(hardware)
            + "): a change below may be the machine's, not the code's; compare runs of one kind of GPU."
        )
    if software := differing(SOFTWARE):
        notes.append("note: the software under the kernels differs (" + "; ".join(software) + ").")
    return notes


def setting_notes(base: dict, cur: dict) -> list[str]:
    """One line naming every measurement setting the two runs' meta record differently (none: no line), after
    the machine's (`machine_notes`)."""
    differ = []
    for block, key in MEASUREMENT_SETTINGS:
        values = []
        for data in (base, cur):
            meta = data.get("meta") if isinstance(data, dict) else None
            section = meta.get(block) if isinstance(meta, dict) else None
            values.append(section.get(key) if isinstance(section, dict) else None)
        if None not in values and values[0] != values[1]:
            differ.append(f"{block}.{key} {values[0]} in the baseline, {values[1]} here")
    notes = machine_notes(base, cur)
    if not differ:
        return notes
    return [
        *notes,
        "note: the runs measured differently ("
        + "; ".join(differ)
        + "): a change below may be the setting's, not the kernel's (a run without the correctness gate "
        "times kernels nothing checked).",
    ]


def json_document(rows: list[dict], base_path: str, cur_path: str, settings: CompareSettings) -> dict:
    """The `--format json` document: the settings, the counts, every row and the ids failing the gate."""
    return {
        "baseline": base_path,
        "current": cur_path,
        **dataclasses.asdict(settings),
        "min_drift_samples": MIN_DRIFT_SAMPLES,
        "counts": counts(rows),
        "cases": rows,
        "regressions": [r["id"] for r in regressions(rows)],
    }
