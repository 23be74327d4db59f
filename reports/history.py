"""history.html: the performance history of a store (`gdpa-bench history report`), one self-contained page.

Per (config, GPU) group — runs of another config or GPU model never share a line — the runs, then the
cases grouped as the report groups them (one panel per set × mode × sweep, one plot per length L): per
case its median time over commit time with the p20–p80 band of its samples, its SM clock beneath, and the
steps of its series (results.history_series) marked where they start and listed with the commits before
and after and their size. A series of one run is a table row, not a plot: a trend needs two runs.

The page is written like report.html (reports.render.to_html: CSS inline, PNGs embedded as data URIs);
the PNGs are also kept under plots/ beside it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
from matplotlib import dates as mdates

from reports.document import DASH, Image, Section, Table, fmt, fmt_date
from reports.plots.common import figure, panel_order, panel_title, provider_colors, slug
from reports.render import to_html
from results.files import atomic_write, make_dir
from results.history_series import MIN_RUNS, all_steps, each_series, with_order
from results.history_store import HistoryError, Store
from support.png import save_compact_png

#: Lighter than the report's plots: a history page holds one figure per panel of every config.
DPI = 80
PREFIX = "history_"
#: The clock a case ran at, in the order `compare` looks for it (results.verdicts).
CLOCKS = ("sm_clock_mhz", "power_sm_clock_mhz", "timeline_sm_clock_mhz")


def short(commit: str) -> str:
    return str(commit)[:10]


def clock(rows: pd.DataFrame) -> pd.Series:
    out = rows[CLOCKS[0]]
    for c in CLOCKS[1:]:
        out = out.fillna(rows[c])
    return out


def group_title(entry: dict) -> str:
    return f"{entry['config_name'] or 'config'} · config {entry['config_sha256'][:12]} · {entry['gpu']}"


# ------------------------------------------------------------------------------------------------ plots


def panel_plot(series: dict[str, pd.DataFrame], steps: pd.DataFrame, title: str, path: Path) -> Path:
    """One panel: a trend axes per length L (one line per provider) over a strip of SM clocks."""
    shapes = sorted({s.at[0, "shape"] for s in series.values()}, key=lambda sh: (_length(series, sh), sh))
    cols = min(4, len(shapes))
    rows = math.ceil(len(shapes) / cols)
    fig = figure(max(3.4 * cols, 5.0), 3.0 * rows + 0.7)
    grid = fig.add_gridspec(2 * rows, cols, height_ratios=[2.2, 0.8] * rows)
    colors = provider_colors([s.at[0, "provider"] for s in series.values()])
    handles = {}
    for k, shape in enumerate(shapes):
        r, c = divmod(k, cols)
        ax = fig.add_subplot(grid[2 * r, c])
        clk = fig.add_subplot(grid[2 * r + 1, c], sharex=ax)
        for cid, s in series.items():
            if s.at[0, "shape"] != shape:
                continue
            color = colors.get(s.at[0, "provider"])
            t = pd.to_datetime(s["commit_time"], utc=True)
            ax.fill_between(t, s["p20_ms"], s["p80_ms"], color=color, alpha=0.18, linewidth=0)
            (line,) = ax.plot(t, s["median_ms"], marker="o", markersize=3, linewidth=1.2, color=color)
            handles.setdefault(str(s.at[0, "label"]), line)
            clk.plot(t, clock(s), marker=".", markersize=3, linewidth=0.8, color=color)
            for _, st in steps[steps["id"] == cid].iterrows():
                x = pd.Timestamp(st["time_after"])
                ax.axvline(x, color=color, linestyle="--", linewidth=0.9)
                ax.annotate(
                    f"{st['size']:+.0%}",
                    (x, 1),
                    xycoords=("data", "axes fraction"),
                    xytext=(2, -10),
                    textcoords="offset points",
                    fontsize=7,
                    color=color,
                )
        L = _length(series, shape)
        ax.set_title(f"L={L:.0f}" if L == L else shape, fontsize=9)
        ax.set_ylabel("median ms", fontsize=8)
        ax.tick_params(labelsize=7, labelbottom=False)
        clk.set_ylabel("SM MHz", fontsize=7)
        clk.tick_params(labelsize=7)
        locator = mdates.AutoDateLocator(maxticks=5)
        clk.xaxis.set_major_locator(locator)
        clk.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    fig.suptitle(title, fontsize=10)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="outside lower center",
            ncols=min(6, len(handles)),
            fontsize=8,
            frameon=False,
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_compact_png(fig, path, dpi=DPI, facecolor="white")  # a palette PNG, as the report's plots


def _length(series: dict[str, pd.DataFrame], shape: str) -> float:
    return next(float(s.at[0, "max_len"]) for s in series.values() if s.at[0, "shape"] == shape)


# --------------------------------------------------------------------------------------------- sections


def _steps_text(steps: pd.DataFrame) -> str:
    if steps.empty:
        return DASH
    return "; ".join(f"{r['size']:+.1%} at {short(r['commit_after'])}" for _, r in steps.iterrows())


def steps_table(steps: pd.DataFrame, groups: dict[tuple, dict]) -> Table:
    headers = ["config · GPU", "case", "commit before", "commit after", "size", "median ms before → after", "runs"]
    rows = []
    for _, r in steps.sort_values(["config_sha256", "gpu", "time_after", "id"]).iterrows():
        g = groups[(r["config_sha256"], r["gpu"])]
        rows.append(
            [
                f"{g['config_name'] or 'config'} {r['config_sha256'][:8]} · {r['gpu']}",
                r["id"],
                f"{short(r['commit_before'])} ({fmt_date(r['time_before'])})",
                f"{short(r['commit_after'])} ({fmt_date(r['time_after'])})",
                f"{r['size']:+.1%}",
                f"{fmt(r['median_before_ms'], 'ms')} → {fmt(r['median_after_ms'], 'ms')}",
                f"{r['runs_before']} / {r['runs_after']}",
            ]
        )
    return Table(headers, rows, css="steps", empty="No step in any series.")


def runs_table(entries: list[dict]) -> Table:
    rows = [
        [
            short(e["commit"]) + ("-dirty" if e["dirty"] else ""),
            fmt_date(e["commit_time"]) + (" (run start: no commit time)" if e["commit_time_source"] != "git" else ""),
            fmt_date(e["started_at"]),
            f"{e['ok']} / {e['cases']}",
            e["source"],
        ]
        for e in entries
    ]
    return Table(["commit", "commit time", "run started", "cases ok / all", "added from"], rows, css="runs")


def cases_table(series: dict[str, pd.DataFrame], steps: pd.DataFrame) -> Table:
    """The latest run of each case of a panel. A case is named by what its panel's title leaves out (its
    L and provider label); a panel whose cases have one run each shows no runs, commit or steps columns
    (one value each: the group's runs table says which commit). The steps table names cases in full."""
    trend = any(len(s) > 1 for s in series.values())
    rows = []
    for s in series.values():
        last = s.iloc[len(s) - 1]
        band = f"{fmt(last['p20_ms'], 'ms')}–{fmt(last['p80_ms'], 'ms')}" if last["p20_ms"] == last["p20_ms"] else DASH
        name = " · ".join(x for x in (f"L={fmt(last['max_len'], 'len')}", str(last["label"])) if x)
        row = [name, fmt(last["median_ms"], "ms"), band, fmt(clock(s.iloc[[-1]]).iloc[0], "whole")]
        if trend:
            row[1:1] = [str(len(s)), short(last["commit"])]
            row.append(_steps_text(steps[steps["id"] == last["id"]]))
        rows.append(row)
    headers = ["case", "median ms", "p20–p80 ms", "SM MHz"]
    if trend:
        headers = ["case", "runs", "latest commit", *headers[1:], "steps"]
    return Table(headers, rows, css="cases", empty="No timed case.")


def group_section(entry: dict, entries: list[dict], frame: pd.DataFrame, steps: pd.DataFrame, plots: Path) -> Section:
    key = (entry["config_sha256"], entry["gpu"])
    blocks: list = [runs_table(entries)]
    thinned = sorted({e["max_samples"] for e in entries if e["max_samples"] is not None})
    if thinned:
        blocks.append(
            f"Samples kept per case: at most {', '.join(map(str, thinned))}, evenly spaced in measurement "
            "order (`history add --max-samples`); medians and bands are of all samples."
        )
    if entry["config_sha_source"] != "recorded":
        blocks.append(f"The config sha256 is {entry['config_sha_source']} (the runs do not record one).")
    series = {cid: s for sha, gpu, cid, s in each_series(frame) if (sha, gpu) == key}
    if not series:
        blocks.append("No timed case of these runs (or none that --only selects).")
    points = pd.DataFrame([s.iloc[0] for s in series.values()]) if series else None
    for panel in panel_order(points) if points is not None else []:
        mine = {cid: s for cid, s in series.items() if s.at[0, "panel"] == panel}
        mine = dict(sorted(mine.items(), key=lambda kv: (kv[1].at[0, "max_len"], str(kv[1].at[0, "label"]))))
        drawn = {cid: s for cid, s in mine.items() if len(s) >= MIN_RUNS}
        sub: list = []
        if drawn:
            name = f"{PREFIX}{entry['config_sha256'][:8]}_{slug(entry['gpu'])}_{slug(panel)}.png"
            png = panel_plot(drawn, steps, panel_title(panel), plots / name)
            sub.append(
                Image(
                    png,
                    "Median time per run over commit time, p20–p80 of its samples shaded; SM clock "
                    "beneath; dashed: a step of the series starts (its size beside it).",
                )
            )
        else:
            sub.append("One run per case so far: a trend needs two.")
        sub.append(cases_table(mine, steps))
        blocks.append(Section(panel_title(panel), sub))
    return Section(group_title(entry), blocks)


def build_sections(store: Store, frame: pd.DataFrame, steps: pd.DataFrame, plots: Path) -> tuple[str, list[Section]]:
    groups: dict[tuple, list[dict]] = {}
    for e in store.runs:
        groups.setdefault((e["config_sha256"], e["gpu"]), []).append(e)
    firsts = {k: v[0] for k, v in groups.items()}
    n_series = frame.groupby(["config_sha256", "gpu", "id"]).ngroups if len(frame) else 0
    title = f"gdpa-bench history: {len(store.runs)} runs, {len(groups)} config × GPU groups"
    span = (
        f"{fmt_date(store.runs[0]['commit_time'])} to {fmt_date(store.runs[-1]['commit_time'])}" if store.runs else DASH
    )
    overview = Section(
        "Overview",
        [
            f"Store {store.path}: {len(store.runs)} runs, commits from {span}; {n_series} series (a case of one "
            "config on one GPU model: runs of another config or GPU are another series, never mixed).",
            "Steps: change points of each series' log median time found by PELT (ruptures), each change "
            "significant at the gate's alpha against the series' own run-to-run noise (an F test, Bonferroni "
            f"over the places a change can take); a segment holds at least {MIN_RUNS} runs. "
            "`gdpa-bench history check` fails a run whose cases sit on a step down that the gate's statistics "
            "(Mann-Whitney, threshold, clocks) call slower (docs/DESIGN.md §7).",
        ],
    )
    found = Section("Steps found", [steps_table(steps, firsts)])
    parts = [group_section(firsts[k], v, frame, steps, plots) for k, v in groups.items()]
    return title, [overview, found, *parts]


def render_history(store: Store, out: Path, only: str | None = None) -> dict[str, Path]:
    """Write `out/history.html` and `out/plots/history_*.png` for `store` (cases whose id matches `only`).
    Returns {"html": path, "plots": folder}."""
    frame = with_order(store.frame(), store.runs)
    if only is not None:
        frame = frame[frame["id"].map(lambda cid: re.search(only, cid) is not None)]
        if frame.empty:
            raise HistoryError(f"--only {only!r}: matches no case of the store {store.path}")
    plots = Path(out) / "plots"
    make_dir(Path(out))  # plots/ only once a panel is drawn
    for old in plots.glob(f"{PREFIX}*.png"):  # a panel no longer drawn must not linger beside the page
        old.unlink()
    steps = all_steps(frame)
    title, sections = build_sections(store, frame, steps, plots)
    html_path = Path(out) / "history.html"
    atomic_write(html_path, to_html(title, sections))
    return {"html": html_path, "plots": plots}
