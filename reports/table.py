"""A compact TFLOP/s table (shapes × provider/mode) from results.json, in Markdown — for READMEs:
`gdpa-bench table RUN_DIR [--providers gdpa_triton,fa4] [--modes fwd,bwd]`."""

from __future__ import annotations

import pandas as pd


def tflops_table(data: dict, providers: list[str] | None, modes: list[str]) -> str:
    rows = []
    for c in data["cases"]:
        if c.get("mode") not in modes or (providers and c.get("provider") not in providers):
            continue
        shape = c["id"].rsplit("/", 1)[0].replace(f"/{c['mode']}/", "/")
        val = (
            f"{c['tflops']:.0f}"
            if c.get("status") == "ok" and c.get("tflops")
            else ("OOM" if "out of memory" in (c.get("error") or "") else "—")
        )
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
