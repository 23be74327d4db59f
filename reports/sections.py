"""The sections of a run's report, built once and written as Markdown and as HTML (reports.render).

Overview (counts, warnings) · environment · summary per shape · plots · where the time goes (reports.profiling:
when a case has a kernel breakdown, counters or bands) · failures and skips · workload statistics · every
case. Softmax providers are labelled "(softmax)" everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from kernels.modes import MODES
from reports.cpu_notes import cpu_banner, ratios_shown
from reports.document import DASH, Image, Section, Table, cell, fmt, fmt_date, isnum
from reports.environment import environment_table
from reports.plots import load_plot_modules
from reports.plots.registry import registered
from reports.profiling import profiling_section, profiling_warnings
from results.derived import power_of
from results.frame import provider_label
from results.metrics import WORKLOAD_METRICS, shown_in
from results.power import ABOVE_CAP_MARGIN, ESTIMATOR_TOLERANCE, counter_resolves, thermal
from results.rates import rate

# ------------------------------------------------------------------------------------------- sections


def _shape_sort_key(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(
        _m=df["mode"].map(lambda m: MODES.index(m) if m in MODES else 9),
        _set=df["set"].astype(str),
        _sw=df["sweep_label"].astype(str),
        _L=df["max_len"].fillna(-1),
    ).sort_values(["_set", "_m", "_sw", "_L"], kind="stable")


def best_by_shape(df: pd.DataFrame, semantics: str) -> pd.DataFrame:
    """Per shape, the ok case of `semantics` with the highest TFLOP/s (lowest time) — one row each."""
    sub = df[(df["status"] == "ok") & (df["semantics"] == semantics) & df["median_ms"].notna()]
    if sub.empty:
        return sub
    idx = sub.groupby("shape")["median_ms"].idxmin()
    return sub.loc[idx.values].set_index("shape", drop=False)


def _warnings(meta: dict, cases: pd.DataFrame) -> list[str]:
    out = []
    cap, enf = meta.get("power_cap_w"), meta.get("enforced_power_limit_w")
    if isnum(cap) and isnum(enf) and float(cap) != float(enf):
        out.append(
            f"The configured power cap ({fmt(cap, 'whole')} W) differs from the limit the GPU enforced "
            f"({fmt(enf, 'whole')} W): power numbers are reported against the cap, but the GPU "
            f"{'could draw more' if float(enf) > float(cap) else 'was held below it'}."
        )
    target, gpu = str(meta.get("hardware_target") or "").strip(), meta.get("gpu")
    if target and isinstance(gpu, str) and target.lower() not in gpu.lower():
        out.append(
            f"The config was written for {target}; this run is on {gpu}: its figures are that card's, and "
            "its ratios stand for the target's only as a proxy."
        )
    if meta.get("interrupted"):
        out.append("The run was interrupted: the results are partial.")
    elif "finished_at" in meta and meta.get("finished_at") is None:
        out.append("The run has no finish time (still running or killed): the results may be partial.")
    n_ok = int((cases["status"] == "ok").sum()) if len(cases) else 0
    if len(cases) == 0:
        out.append("No cases were recorded.")
    elif n_ok == 0:
        out.append("No case finished ok: there are no timings to show (see Failures and skips).")
    with_power = int(cases["power_w"].notna().sum()) if "power_w" in cases else 0
    above = int(cases["power_above_cap"].sum()) if with_power else 0
    apart = int(cases["power_estimators_apart"].sum()) if with_power else 0
    coarse = (
        sum(
            r.get("power.avg_w_from_energy") == r.get("power.avg_w_from_energy") and not counter_resolves(power_of(r))
            for _, r in cases[cases["power_w"].notna()].iterrows()
        )
        if with_power and "power.avg_w_from_energy" in cases
        else 0
    )
    if above:
        out.append(
            f"{above} of {with_power - coarse} cases average above the power cap + {ABOVE_CAP_MARGIN:.0%} (energy "
            "counter; their `power.above_cap`)."
        )
    if coarse:
        out.append(
            f"{coarse} of {with_power} cases' energy loops were too short for the energy counter to resolve "
            f"{ESTIMATOR_TOLERANCE:.0%}: their power figures are shown, not flagged (`gdpa-bench power-checks`)."
        )
    if apart:
        out.append(
            f"{apart} of {with_power} cases have their two power estimators (energy counter; samples over the same "
            f"span) more than {ESTIMATOR_TOLERANCE:.0%} apart (`power.estimators_disagree`)."
        )
    hot = (
        [
            r["id"]
            for _, r in cases[cases["power_w"].notna() & (cases["status"] == "ok")].iterrows()
            if thermal(power_of(r))
        ]
        if with_power
        else []
    )
    if hot:
        out.append(
            f"{len(hot)} of {with_power} cases ran with a thermal clock reason: temperature, not only the power cap, "
            f"set their clock (the cases table's `reasons`; `gdpa-bench power-checks` names them): {', '.join(hot[:5])}"
            + (f" and {len(hot) - 5} more." if len(hot) > 5 else ".")
        )
    mon = meta.get("monitor") if isinstance(meta.get("monitor"), dict) else None
    if mon is not None and mon.get("available") is False:
        out.append(f"No power data: {mon.get('unavailable_reason') or 'monitor unavailable'}.")
    return out + profiling_warnings(cases)


def _summary(cases: pd.DataFrame, baseline: str | None, ratios: bool = True) -> Table:
    if cases.empty:
        return Table(["shape"], [], empty="No cases recorded.")
    if not ratios:
        return _summary_unranked(cases)
    shapes = _shape_sort_key(cases.drop_duplicates("shape"))
    best_g, best_s = best_by_shape(cases, "gdpa"), best_by_shape(cases, "softmax")
    others = [p for p in _providers(cases) if p != baseline] if ratios else []
    labels = _labels(cases)
    base_label = labels.get(baseline, baseline or DASH)
    columns = shown_in("summary")
    headers = ["set", "mode", "L", "sweep", "dtype", "best GDPA", *(m.header for m in columns)]
    headers += ["best softmax", "TFLOP/s"]
    headers += [f"{labels.get(p, p)} vs {base_label}" for p in others]
    rows = []
    for _, s in shapes.iterrows():
        shape = s["shape"]
        g = best_g.loc[shape] if shape in best_g.index else None
        x = best_s.loc[shape] if shape in best_s.index else None
        row = [fmt(s["set"]), fmt(s["mode"]), fmt(s["max_len"], "len"), fmt(s["sweep_label"]), fmt(s["dtype"])]
        row += [str(g["label"]), *(cell(m, g) for m in columns)] if g is not None else [DASH] * (1 + len(columns))
        row += [str(x["label"]), fmt(x["tflops"], "tflops")] if x is not None else [DASH, DASH]
        sub = cases[cases["shape"] == shape]
        for p in others:
            v = sub.loc[sub["provider"] == p, "speedup"]
            row.append(fmt(v.iloc[0], "x") if len(v) else DASH)
        rows.append(row)
    return Table(headers, rows, css="summary")


def _summary_unranked(cases: pd.DataFrame) -> Table:
    """A CPU run's summary: per shape every provider's rate, side by side and unranked — the fastest by
    interpreter noise (once the fp32 `reference`) is no "best GDPA"."""
    shapes = _shape_sort_key(cases.drop_duplicates("shape"))
    providers, labels = _providers(cases), _labels(cases)
    headers = ["set", "mode", "L", "sweep", "dtype", *(labels.get(p, p) for p in providers)]
    rows = []
    for _, s in shapes.iterrows():
        sub = cases[cases["shape"] == s["shape"]]
        row = [fmt(s["set"]), fmt(s["mode"]), fmt(s["max_len"], "len"), fmt(s["sweep_label"]), fmt(s["dtype"])]
        for p in providers:
            mine = sub[sub["provider"] == p]
            if mine.empty:
                row.append(DASH)
            else:
                r = mine.iloc[0]
                ok = r["status"] == "ok" and isnum(r["tflops"])
                row.append(rate(float(r["tflops"]), 3) if ok else str(r["status"]))  # each with its unit
        rows.append(row)
    return Table(headers, rows, css="summary")


def _providers(cases: pd.DataFrame) -> list[str]:
    pairs = cases[["provider", "semantics"]].dropna(subset=["provider"]).drop_duplicates("provider")
    pairs = pairs.assign(_s=(pairs["semantics"] == "softmax").astype(int)).sort_values(["_s", "provider"])
    return [str(p) for p in pairs["provider"]]


def _labels(cases: pd.DataFrame) -> dict[str, str]:
    return {
        str(r["provider"]): provider_label(r["provider"], r["semantics"])
        for _, r in cases.drop_duplicates("provider").iterrows()
        if r["provider"] is not None
    }


def _cases_table(cases: pd.DataFrame, ratios: bool = True) -> Table:
    columns = [m for m in shown_in("cases") if ratios or m.name != "speedup"]
    rows = [[cell(m, r) for m in columns] for _, r in (_shape_sort_key(cases).iterrows() if len(cases) else [])]
    status = next(i for i, m in enumerate(columns) if m.name == "status")
    return Table([m.header for m in columns], rows, css="cases", status_col=status, empty="No cases recorded.")


def _failures(cases: pd.DataFrame) -> Table:
    bad = cases[cases["status"] != "ok"] if len(cases) else cases
    order = {"failed": 0, "incorrect": 1, "skipped": 2}
    rows = []
    if len(bad):
        bad = bad.assign(_o=bad["status"].map(lambda s: order.get(s, 3))).sort_values(["_o", "id"], kind="stable")
        for _, r in bad.iterrows():
            rows.append([fmt(r["id"]), fmt(r["label"]), fmt(r["status"]), fmt(r["error"])])
    return Table(
        ["case", "provider", "status", "error"],
        rows,
        css="failures",
        status_col=2,
        empty="None: every case finished ok.",
    )


def _workload_table(workloads: dict, cases: pd.DataFrame) -> Table:
    columns = shown_in("workloads", WORKLOAD_METRICS)
    stats: dict[str, dict] = {}
    for name, w in (workloads or {}).items():
        if isinstance(w, dict):
            st = w.get("stats") if isinstance(w.get("stats"), dict) else {}
            made = {k: w.get(k) for k in ("family", "params", "pairing", "pairing_params")}
            stats[str(name)] = {**made, **{f"stats.{k}": v for k, v in st.items()}}
    if not stats and len(cases):  # older runs: what the cases carry
        for _, r in cases.drop_duplicates("workload.name").iterrows():
            if r["workload.name"] is None:
                continue
            stats[str(r["workload.name"])] = {m.name: r.get(f"workload.{m.key}") for m in columns}
    rows = [[name] + [cell(m, st) for m in columns] for name, st in stats.items()]
    return Table(
        ["workload"] + [m.header for m in columns],
        rows,
        css="workloads",
        empty="No workload statistics recorded.",
    )


def _plot_blocks(files: list[Path]) -> list[Any]:
    """Every registered plot under its caption, in report order: a plot drawn but not shown cannot happen
    (a plot needs a caption to register), and one registered but not drawn says so — unless it is drawn
    only for some runs (`when`) and this is not one."""
    by_name = {f.name: f for f in files}
    captions, not_drawn = getattr(files, "captions", {}), getattr(files, "not_drawn", {})
    blocks: list[Any] = []
    load_plot_modules()
    for p in registered():
        png, csvs = p.files(Path("."))
        if png.name not in by_name:
            if p.when is None and p.name not in not_drawn:
                blocks.append(f"The plot {p.name} was not drawn.")
            continue
        caption = captions.get(p.name, p.caption)
        blocks.append(Image(by_name[png.name], caption, [by_name[c.name] for c in csvs if c.name in by_name]))
        extras = [f for f in files if p.extras_prefix and f.name.startswith(p.extras_prefix) and f.suffix == ".png"]
        if extras:
            images = [Image(f, f.stem.removeprefix(p.extras_prefix)) for f in extras]
            blocks.append(Section(p.extras_title, images, collapsed=True))
    if not_drawn:  # a CPU run: what has no data here is said once, first, not drawn as empty frames
        blocks.insert(
            0, "Not drawn, having no data in this run: " + "; ".join(f"{n} — {w}" for n, w in not_drawn.items())
        )
    return blocks


def build_sections(
    meta: dict, cases: pd.DataFrame, workloads: dict, plot_files: list[Path], baseline: str | None
) -> tuple[str, list[Section]]:
    """The report as (title, sections), shared by the Markdown and HTML writers."""
    title = (
        f"gdpa-bench report: {meta.get('config_name') or meta.get('config') or 'run'} on "
        f"{meta.get('gpu') or (str(meta.get('device') or 'CPU')).upper()} — {fmt_date(meta.get('started_at'))}"
    )
    counts = cases["status"].value_counts().to_dict() if len(cases) else {}
    count_s = f"{len(cases)} cases: " + ", ".join(
        f"{counts.get(s, 0)} {s}" for s in ("ok", "failed", "incorrect", "skipped")
    )
    extra = {k: v for k, v in counts.items() if k not in ("ok", "failed", "incorrect", "skipped")}
    if extra:
        count_s += ", " + ", ".join(f"{v} {k}" for k, v in extra.items())
    base_label = _labels(cases).get(baseline, baseline) if len(cases) else baseline
    ratios = ratios_shown(meta)
    samples = cases["n_samples"].max() if "n_samples" in cases and len(cases) else None
    banner = cpu_banner(meta, int(samples) if isnum(samples) else None)
    top = Section(
        "Overview",
        ([("note", banner)] if banner else []) + [count_s + "."] + [("warn", w) for w in _warnings(meta, cases)],
    )
    env = Section("Environment", [environment_table(meta, baseline)])
    intro = (
        "Per shape: the fastest GDPA provider (its TFLOP/s, utilization of the datasheet peak and of the "
        "measured GEMM ceiling, energy per call, average power from the energy counter over the same loop, "
        "fraction of power samples at the cap), the fastest softmax provider, and every provider's speedup vs "
        f"the baseline {base_label or DASH} (time ratio on the same shape)."
        if ratios
        else "Per shape, every provider's rate (in the unit of its size), unranked: a CPU run's timings compare "
        "nothing (see the note above), so no provider is called the fastest and no speedup is shown."
    )
    summ = Section("Summary per shape", [intro, _summary(cases, baseline, ratios)])
    plots = Section("Plots", _plot_blocks(plot_files) or ["No plots were written."])
    fails = Section("Failures and skips", [_failures(cases)])
    wl = Section(
        "Workload statistics",
        [
            "Padding waste 1−ΣL/(B·maxL); FLOP waste 1−ΣLqLk/(B·maxLq·maxLk); imbalance max(LqLk)/mean(LqLk); "
            "top-1% share: fraction of the work in the largest 1% of sequences; tile efficiency at a t×t tile: "
            "useful over computed score area, ΣLqLk / Σ⌈Lq/t⌉t·⌈Lk/t⌉t (causal: unmasked pairs over the computed "
            "tiles' pairs).",
            _workload_table(workloads, cases),
        ],
    )
    allc = Section("All cases", [_cases_table(cases, ratios)])
    where = profiling_section(cases, cpu=not ratios)
    return title, [top, env, summ, plots, *([where] if where else []), fails, wl, allc]
