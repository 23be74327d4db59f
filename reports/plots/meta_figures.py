"""TFLOP/s in the layout of Meta's published GDPA figures, so that a run on another GPU can be laid beside
them: ads_model_kernel_library `gdpa/README.md` (B200) shows one figure per attention type × sparsity ×
pass — self attention at sparsity 1.0 and 0.5 (its benchmark's set 1: jagged Q of fill s, K/V of length
L), cross attention with short KV at sparsity 1.0 (set 2: K/V of length 256) — each grouped bars of
Tensor Core TFLOP/s per sequence length 256..2048, one bar per kernel. Here they are the panels of one
figure: a row per attention type × sparsity, forward left and backward right.

Drawn only for a run with those sets: Meta's benchmark shapes (`gdpa/scripts/benchmark.py`: B=1152, H=4,
D=128, uniform-fill lengths, K/V of one fixed length per set, not causal). TFLOP/s are the run's, which
count FLOPs as Meta's script does (forward 4·H·D·ΣLq·Lk, backward 2.5× that).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from reports.plots.common import each_provider, figure, legend, ok_cases, provider_colors
from reports.plots.registry import Drawing, NothingToPlot, PlotData, plot

B, H, D, SHORT_KV = 1152, 4, 128, 256  # Meta's benchmark.py: B, H, DIM, set 2's fixed KV length
# The published figures, in their order: (attention, fill) per row, with its title and x axis
ROWS = (
    ("self", 1.0, "Self attention", "QKV length"),
    ("self", 0.5, "Self attention", "QKV length"),
    ("short_kv", 1.0, "Cross attention short KV", f"Q length (KV {SHORT_KV})"),
)
MODES = (("fwd", "Fwd"), ("bwd", "Bwd"))
COLUMNS = tuple("panel attention fill mode max_len provider label semantics tflops median_ms id".split())
CAPTION = (
    "TFLOP/s in the layout of Meta's published GDPA figures (ads_model_kernel_library gdpa/README.md): "
    "self attention at sparsity (fill) 1.0 and 0.5, cross attention with KV 256 at 1.0, forward and "
    "backward; one bar per provider and sequence length. Drawn for runs with Meta's benchmark sets "
    "(B=1152, H=4, D=128)."
)


def meta_cases(cases: pd.DataFrame) -> pd.DataFrame:
    """The cases of Meta's benchmark sets, with their `attention` (`self`: K/V of length L; `short_kv`:
    K/V of length 256 at every L) and `fill`; fwd and bwd only."""
    need = ("workload.family", "workload.pairing", "workload.B", "workload.H", "workload.D", "workload.max_kv")
    if cases.empty or any(c not in cases.columns for c in need):
        return cases.iloc[0:0].assign(attention=[], fill=[])
    c = cases[
        (cases["workload.family"] == "uniform_fill")
        & (cases["workload.pairing"] == "fixed_kv")
        & (cases["workload.causal"] != True)  # noqa: E712 (a missing flag is not causal)
        & (cases["workload.B"] == B)
        & (cases["workload.H"] == H)
        & (cases["workload.D"] == D)
        & cases["mode"].isin([m for m, _ in MODES])
        & cases["max_len"].notna()
    ]
    fill = c["sweep.fill"] if "sweep.fill" in c.columns else pd.Series(float("nan"), index=c.index)
    if "workload.params.fill" in c.columns:
        fill = fill.fillna(c["workload.params.fill"])
    c = c.assign(fill=pd.to_numeric(fill, errors="coerce"))
    attention = pd.Series(None, index=c.index, dtype=object)
    for _, rows in c.groupby("set", dropna=False):  # a set is one attention type over its lengths
        kv, lens = rows["workload.max_kv"], rows["max_len"]
        if (kv == lens).all():
            attention[rows.index] = "self"
        elif (kv == SHORT_KV).all():
            attention[rows.index] = "short_kv"
    c = c.assign(attention=attention)
    wanted = {(a, f) for a, f, _, _ in ROWS}
    return c[[(a, f) in wanted for a, f in zip(c["attention"], c["fill"], strict=True)]]


def has_meta_sets(data: PlotData) -> bool:
    return not meta_cases(data.cases).empty


@plot("meta_figures", order=15, columns=COLUMNS, caption=CAPTION, when=has_meta_sets)
def meta_figures(data: PlotData, out: Path) -> Drawing:
    mine = meta_cases(data.cases)
    ok = ok_cases(mine)
    ok = ok[ok["tflops"].notna()].drop_duplicates(["attention", "fill", "mode", "max_len", "provider"], keep="last")
    if ok.empty:
        raise NothingToPlot("no ok case of Meta's benchmark sets: nothing to plot", "Meta's figure layout")
    rows = [r for r in ROWS if ((ok["attention"] == r[0]) & (ok["fill"] == r[1])).any()]
    colors = provider_colors(data.cases["provider"].dropna())
    fig = figure(6.2 * len(MODES), 3.4 * len(rows) + 1.0)
    axes = fig.subplots(len(rows), len(MODES), squeeze=False)
    drawn, handles = [], {}
    for (attention, fill, title, xlabel), ax_row in zip(rows, axes, strict=True):
        for (mode, mode_title), ax in zip(MODES, ax_row, strict=True):
            sub = ok[(ok["attention"] == attention) & (ok["fill"] == fill) & (ok["mode"] == mode)]
            panel = f"{title} {mode_title} sparsity = {fill}"
            ax.set_title(panel, fontsize=10)
            if sub.empty:
                ax.text(0.5, 0.5, "no ok case", ha="center", va="center", transform=ax.transAxes, color="gray")
                ax.set_axis_off()
                continue
            drawn.append(_bars(ax, sub, panel, colors, handles))
            ax.set_xlabel(xlabel)
            ax.set_ylabel("TFLOP/s")
            ax.grid(True, axis="y", alpha=0.3)
            ax.set_axisbelow(True)
    legend(fig, handles, "TFLOP/s in the layout of Meta's published GDPA figures (fill = Meta's sparsity)")
    table = pd.concat(drawn, ignore_index=True)[list(COLUMNS)]
    table["max_len"] = table["max_len"].astype("Int64")
    return Drawing(fig, {"": table})


def _bars(ax: Any, sub: pd.DataFrame, panel: str, colors: dict, handles: dict) -> pd.DataFrame:
    """Grouped bars: a group per sequence length, a bar per provider; the rows drawn."""
    lens = sorted(sub["max_len"].astype(int).unique())
    series = list(each_provider(sub))
    width = 0.8 / max(1, len(series))
    rows = []
    for j, (prov, s, label, soft) in enumerate(series):
        xs = [lens.index(int(L)) + (j - (len(series) - 1) / 2) * width for L in s["max_len"]]
        bars = ax.bar(xs, s["tflops"], width, color=colors.get(prov), hatch="//" if soft else None, label=label)
        handles.setdefault(label, bars)
        rows.append(s.assign(panel=panel, label=label))
    ax.set_xticks(range(len(lens)), [str(v) for v in lens])
    return pd.concat(rows)
