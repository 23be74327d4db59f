"""Power and SM clock over the run from power.csv, the cap, and one shaded band per case."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from reports.plots.common import figure, provider_colors
from reports.plots.registry import Drawing, NothingToPlot, PlotData, plot

MAX_BINS = 4000  # per GPU: longer timelines are drawn as bins (mean power, max power, mean clock)
MAX_BAND_LABELS = 14  # case bands labelled, evenly spread, so the text never piles up
THROTTLE_RE = re.compile(r"power|thermal|slowdown|brake", re.I)

POWER_PLOT_COLUMNS = ("time_s", "gpu_index", "power_w", "power_w_max", "sm_clock_mhz", "throttled", "case_id")
BAND_COLUMNS = ("gpu_index", "case_id", "provider", "start_s", "end_s", "labelled")


def _downsample(g: pd.DataFrame) -> pd.DataFrame:
    g = g.assign(throttled=g["reasons"].map(lambda s: bool(THROTTLE_RE.search(s or ""))))
    if len(g) <= MAX_BINS:
        return g.assign(power_w_max=g["power_w"])
    edges = np.linspace(g["time_s"].min(), g["time_s"].max(), MAX_BINS + 1)
    b = np.clip(np.searchsorted(edges, g["time_s"].to_numpy(), side="right") - 1, 0, MAX_BINS - 1)
    agg = (
        g.assign(_b=b)
        .groupby("_b")
        .agg(
            time_s=("time_s", "mean"),
            gpu_index=("gpu_index", "first"),
            power_w=("power_w", "mean"),
            power_w_max=("power_w", "max"),
            sm_clock_mhz=("sm_clock_mhz", "mean"),
            throttled=("throttled", "any"),
            case_id=("case_id", "first"),
        )
    )
    return agg.reset_index(drop=True)


CAPTION = "Power and SM clock over the run; shaded bands are cases; red ticks: a throttle reason was set."


@plot("power_timeline", order=30, tables={"": POWER_PLOT_COLUMNS, "_cases": BAND_COLUMNS}, caption=CAPTION)
def power_timeline(data: PlotData, out: Path) -> Drawing:
    """Power and SM clock over time, the cap and enforced limit, one shaded band per case."""
    power, meta, cases = data.power, data.meta, data.cases
    if power is None or power.empty or power["power_w"].notna().sum() == 0:
        mon = meta.get("monitor") if isinstance(meta.get("monitor"), dict) else {}
        reason = mon.get("unavailable_reason") or (
            "power.csv is missing" if power is None else "power.csv has no samples"
        )
        raise NothingToPlot(f"no power data: {reason}", "power and SM clock over time")
    drawn = pd.concat([_downsample(g) for _, g in power.groupby("gpu_index", sort=True)], ignore_index=True)
    # Case bands: first to last sample of each case on each GPU.
    tagged = power[power["case_id"] != ""]
    bands = (
        tagged.groupby(["gpu_index", "case_id"], sort=False)["time_s"]
        .agg(["min", "max"])
        .reset_index()
        .rename(columns={"min": "start_s", "max": "end_s"})
        .sort_values("start_s", kind="stable")
    )
    if len(power) > 1:
        dt = float(np.nanmedian(np.diff(power["time_s"].to_numpy()))) if len(power) > 1 else 0.0
        bands["end_s"] = bands["end_s"] + max(dt, 0.0)
    bands["provider"] = bands["case_id"].map(lambda c: c.rsplit("/", 1)[-1])
    n = len(bands)
    if n:
        # Label at most MAX_BAND_LABELS bands, evenly spread over time, so the text never piles up.
        bands = bands.reset_index(drop=True)
        pick = set(np.linspace(0, n - 1, min(n, MAX_BAND_LABELS)).round().astype(int).tolist())
        bands["labelled"] = [i in pick for i in range(n)]
    else:
        bands["labelled"] = []
    colors = provider_colors(
        list(bands["provider"]) + (list(cases["provider"].dropna()) if cases is not None and len(cases) else [])
    )
    gpu_colors = ["#1f4e79", "#b03a2e", "#1e8449", "#7d3c98", "#b9770e", "#2e4053", "#117864", "#943126"]

    fig = figure(14, 7.2)
    ax_p, ax_c = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    for _, b in bands.iterrows():
        for ax in (ax_p, ax_c):
            ax.axvspan(b["start_s"], b["end_s"], color=colors.get(b["provider"], "gray"), alpha=0.13, lw=0)
    multi = drawn["gpu_index"].nunique() > 1
    for gi, g in drawn.groupby("gpu_index"):
        c = gpu_colors[int(gi) % len(gpu_colors)]
        tag = f" (GPU {gi})" if multi else ""
        if (g["power_w_max"] > g["power_w"]).any():
            ax_p.fill_between(
                g["time_s"], g["power_w"], g["power_w_max"], color=c, alpha=0.25, lw=0, label=f"bin max power{tag}"
            )
        ax_p.plot(g["time_s"], g["power_w"], color=c, lw=0.9, label=f"power W{tag}")
        ax_c.plot(g["time_s"], g["sm_clock_mhz"], color=c, lw=0.9, label=f"SM clock MHz{tag}")
    cap, enforced = meta.get("power_cap_w"), meta.get("enforced_power_limit_w")
    if isinstance(cap, (int, float)) and not isinstance(cap, bool):
        ax_p.axhline(cap, color="red", ls="--", lw=1.3, label=f"power cap {cap:g} W")
    if isinstance(enforced, (int, float)) and not isinstance(enforced, bool) and enforced != cap:
        ax_p.axhline(enforced, color="darkorange", ls=":", lw=1.5, label=f"enforced limit {enforced:g} W")
    thr = drawn[drawn["throttled"]]
    if len(thr):
        lo = float(np.nanmin(drawn["sm_clock_mhz"])) if drawn["sm_clock_mhz"].notna().any() else 0.0
        ax_c.plot(
            thr["time_s"],
            np.full(len(thr), lo),
            "|",
            color="red",
            ms=8,
            label="throttle reason set (power cap / thermal / slowdown)",
        )
    ytop = max(
        float(np.nanmax(drawn["power_w_max"])),
        *(v for v in (cap, enforced) if isinstance(v, (int, float)) and not isinstance(v, bool)),
    )
    # Head room above the trace for the vertical case labels.
    ax_p.set_ylim(0, ytop * 1.55)
    for _, b in bands[bands["labelled"]].iterrows():
        short = b["case_id"].replace("/fill=", "/f=")
        ax_p.text(
            (b["start_s"] + b["end_s"]) / 2,
            ytop * 1.53,
            short,
            rotation=90,
            ha="center",
            va="top",
            fontsize=6,
            color="#333333",
            clip_on=True,
        )
    ax_p.set_ylabel("power (W)")
    ax_c.set_ylabel("SM clock (MHz)")
    ax_c.set_xlabel("time (s)")
    for ax in (ax_p, ax_c):
        ax.grid(True, alpha=0.3)
    prov_handles = [Patch(color=colors[p], alpha=0.35, label=f"case: {p}") for p in dict.fromkeys(bands["provider"])]
    h1, l1 = ax_p.get_legend_handles_labels()
    ax_p.legend(
        h1 + prov_handles,
        l1 + [h.get_label() for h in prov_handles],
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.005, 1.0),
    )
    ax_c.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0))
    note = f"; {n} cases (shaded), {int(bands['labelled'].sum())} labelled" if n else ""
    src = (meta.get("monitor") or {}).get("power_source") if isinstance(meta.get("monitor"), dict) else None
    fig.suptitle(f"power and SM clock over time{f' (source: {src})' if src else ''}{note}", fontsize=11)
    return Drawing(fig, {"": drawn, "_cases": bands})
