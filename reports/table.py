"""A compact TFLOP/s table (shapes × provider/mode) from results.json, in Markdown — for READMEs:
`gdpa-bench table RUN_DIR [--providers gdpa_triton,fa4] [--modes fwd,bwd] [--only REGEX]`.

A cell is the case's TFLOP/s when it is `ok` (below 1, with its unit: `1.7 MFLOP/s`); otherwise what
happened: `OOM`, `failed`, `incorrect` (failed the correctness gate), or `—` (skipped: the provider cannot
run the case, or no such case).
"""

from __future__ import annotations

import re

import pandas as pd

from results.rates import rate


def cell(case: dict) -> str:
    if case.get("status") == "ok" and case.get("tflops"):
        t = case["tflops"]
        return f"{t:.0f}" if t >= 1 else rate(t, 2)  # below 1 TFLOP/s (a CPU run): with its unit, `1.7 MFLOP/s`
    if "out of memory" in (case.get("error") or ""):
        return "OOM"
    return case["status"] if case.get("status") in ("failed", "incorrect") else "—"


def tflops_table(data: dict, providers: list[str] | None, modes: list[str], only: str | None = None) -> str:
    """The table of the cases of `modes` (and `providers`, in that column order; `only`: a regex over case
    ids), one row per shape."""
    rows = []
    for c in data["cases"]:
        if c.get("mode") not in modes or (providers and c.get("provider") not in providers):
            continue
        if only and not re.search(only, c["id"]):
            continue
        shape = c["id"].rsplit("/", 1)[0].replace(f"/{c['mode']}/", "/")
        val = cell(c)
        label = c["provider"] + (" (softmax)" if c.get("semantics") == "softmax" else "")
        rows.append({"shape": shape, "col": f"{label} {c['mode']}", "val": val, "L": c.get("max_len", 0)})
    if not rows:
        return "(no matching cases)"
    df = pd.DataFrame(rows)
    order = list(dict.fromkeys(df["shape"]))
    labels = list(dict.fromkeys(df["col"].str.rsplit(" ", n=1).str[0]))
    if providers:  # the caller's provider order
        labels.sort(key=lambda lab: providers.index(lab.split(" ")[0]))
    cols = [f"{lab} {m}" for m in modes for lab in labels if f"{lab} {m}" in set(df["col"])]
    t = df.pivot(index="shape", columns="col", values="val").reindex(order)[cols].fillna("—")
    lines = ["| shape | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    lines += [f"| {s} | " + " | ".join(t.loc[s]) + " |" for s in t.index]
    return "\n".join(lines)
