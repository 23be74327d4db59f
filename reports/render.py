"""Render a run's report: `report.md` and a self-contained `report.html` in the run folder.

The HTML has its CSS inline and every image embedded as a `data:image/png;base64,` URI: one file that
can be mailed or attached to a CI run, with no external resource. The Markdown links the PNGs under
`plots/` by relative path.

Sections: title (config, GPU, date) · warnings · environment · summary per shape · plots · failures and
skips · workload statistics · every case. Softmax providers are labelled "(softmax)" everywhere; any
missing number is shown as "—". A run with zero ok cases (or no power data) still renders.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from reports.metrics import MODES, best_by_shape, load_run, provider_label
from reports.plots import make_all_plots

DASH = "—"

# ------------------------------------------------------------------------------------------ formatting


def _isnum(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(float(v))


def fmt(v: Any, kind: str = "") -> str:
    """One cell: numbers by `kind`, None/NaN/missing as "—"."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return DASH
    if kind == "str" or not _isnum(v):
        if isinstance(v, (list, tuple)):
            return ", ".join(str(x) for x in v) if v else DASH
        s = str(v)
        return s if s.strip() else DASH
    x = float(v)
    if kind == "tflops":
        return f"{x:,.1f}"
    if kind == "ms":
        return f"{x:.4g}"
    if kind == "pct":
        return f"{100 * x:.1f}%"
    if kind == "x":
        return f"{x:.2f}×"
    if kind == "w":
        return f"{x:,.0f}"
    if kind == "int":
        return f"{int(round(x)):,}"
    if kind == "len":
        return str(int(round(x)))
    if kind == "frac":
        return f"{x:.3f}"
    if kind == "sci":
        return f"{x:.2e}"
    return f"{x:.4g}"


def _date(s: Any) -> str:
    if not isinstance(s, str) or not s:
        return DASH
    try:
        d = _dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return s
    if d.tzinfo is not None:
        d = d.astimezone(_dt.timezone.utc)
    return d.strftime("%Y-%m-%d %H:%M UTC")


# ---------------------------------------------------------------------------------------- document model


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    css: str = ""
    status_col: int | None = None  # index of a status column (coloured in HTML)
    empty: str = "(none)"


@dataclass
class Image:
    path: Path
    caption: str
    csv: list[Path] = field(default_factory=list)


@dataclass
class Section:
    title: str
    blocks: list[Any] = field(default_factory=list)  # str (paragraph), Table, Image, Section (details), ("warn", str)
    collapsed: bool = False


# ------------------------------------------------------------------------------------------- sections


def _shape_sort_key(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(
        _m=df["mode"].map(lambda m: MODES.index(m) if m in MODES else 9),
        _set=df["set"].astype(str), _sw=df["sweep_label"].astype(str), _L=df["max_len"].fillna(-1),
    ).sort_values(["_set", "_m", "_sw", "_L"], kind="stable")


def _warnings(meta: dict, cases: pd.DataFrame) -> list[str]:
    out = []
    cap, enf = meta.get("power_cap_w"), meta.get("enforced_power_limit_w")
    if _isnum(cap) and _isnum(enf) and float(cap) != float(enf):
        out.append(f"The configured power cap ({fmt(cap, 'w')} W) differs from the limit the GPU enforced "
                   f"({fmt(enf, 'w')} W): power numbers are reported against the cap, but the GPU "
                   f"{'could draw more' if float(enf) > float(cap) else 'was held below it'}.")
    if meta.get("interrupted"):
        out.append("The run was interrupted: the results are partial.")
    elif "finished_at" in meta and meta.get("finished_at") is None:
        out.append("The run has no finish time (still running or killed): the results may be partial.")
    n_ok = int((cases["status"] == "ok").sum()) if len(cases) else 0
    if len(cases) == 0:
        out.append("No cases were recorded.")
    elif n_ok == 0:
        out.append("No case finished ok: there are no timings to show (see Failures and skips).")
    mon = meta.get("monitor") if isinstance(meta.get("monitor"), dict) else None
    if mon is not None and mon.get("available") is False:
        out.append(f"No power data: {mon.get('unavailable_reason') or 'monitor unavailable'}.")
    return out


def _environment(meta: dict, baseline: str | None) -> Table:
    mon = meta.get("monitor") if isinstance(meta.get("monitor"), dict) else {}
    gpu = meta.get("gpu")
    count = meta.get("gpu_count")
    gpu_s = f"{gpu} × {count}" if gpu and _isnum(count) and int(count) > 1 else (gpu or f"{DASH} (device {meta.get('device') or '?'})")
    peaks = meta.get("peak_tflops") or {}
    peak_s = ", ".join(f"{k} {fmt(v, 'tflops')}" for k, v in peaks.items()) if isinstance(peaks, dict) and peaks else DASH
    cap, enf = meta.get("power_cap_w"), meta.get("enforced_power_limit_w")
    cap_s = f"{fmt(cap, 'w')} W" if _isnum(cap) else DASH
    enf_s = f"{fmt(enf, 'w')} W" if _isnum(enf) else DASH
    if _isnum(cap) and _isnum(enf) and float(cap) != float(enf):
        enf_s += "  ⚠ differs from the cap"
    gemm = meta.get("measured_gemm_tflops")
    gemm_s = (", ".join(f"{k} {fmt(v, 'tflops')}" for k, v in gemm.items()) if isinstance(gemm, dict)
              else (f"{fmt(gemm, 'tflops')} TFLOP/s" if _isnum(gemm) else f"{DASH} (not measured)"))
    copy = meta.get("measured_copy_tb_s")
    avail = mon.get("available")
    mon_s = ("available" if avail else f"unavailable: {mon.get('unavailable_reason') or 'no reason given'}") \
        if avail is not None else DASH
    src = mon.get("power_source")
    rows = [
        ["GPU", gpu_s], ["device", fmt(meta.get("device"))], ["host", fmt(meta.get("host"))],
        ["driver", fmt(meta.get("driver"))], ["CUDA", fmt(meta.get("cuda"))], ["torch", fmt(meta.get("torch"))],
        ["triton", fmt(meta.get("triton"))], ["python", fmt(meta.get("python"))],
        ["git sha", fmt(meta.get("git_sha"))],
        ["config", f"{fmt(meta.get('config'))} (sha256 {str(meta.get('config_sha256') or DASH)[:12]})"],
        ["started / finished", f"{_date(meta.get('started_at'))} / {_date(meta.get('finished_at'))}"],
        ["power cap (configured)", cap_s], ["enforced power limit", enf_s],
        ["datasheet dense peak (TFLOP/s)", peak_s],
        ["datasheet HBM", f"{fmt(meta.get('hbm_tb_s'))} TB/s" if _isnum(meta.get("hbm_tb_s")) else DASH],
        ["measured GEMM ceiling", gemm_s],
        ["measured copy bandwidth", f"{fmt(copy)} TB/s" if _isnum(copy) else f"{DASH} (not measured)"],
        ["power monitor", mon_s + (f" (source: {src})" if src else "")],
        ["baseline provider (speedups)", fmt(baseline)],
    ]
    return Table(["", ""], rows, css="env")


def _summary(cases: pd.DataFrame, baseline: str | None) -> Table:
    if cases.empty:
        return Table(["shape"], [], empty="No cases recorded.")
    shapes = _shape_sort_key(cases.drop_duplicates("shape"))
    best_g, best_s = best_by_shape(cases, "gdpa"), best_by_shape(cases, "softmax")
    others = [p for p in _providers(cases) if p != baseline]
    labels = _labels(cases)
    base_label = labels.get(baseline, baseline or DASH)
    headers = ["set", "mode", "L", "sweep", "dtype", "best GDPA", "TFLOP/s", "util peak", "util GEMM",
               "J/call", "avg W", "at cap", "best softmax", "TFLOP/s"]
    headers += [f"{labels.get(p, p)} vs {base_label}" for p in others]
    rows = []
    for _, s in shapes.iterrows():
        shape = s["shape"]
        g = best_g.loc[shape] if shape in best_g.index else None
        x = best_s.loc[shape] if shape in best_s.index else None
        row = [fmt(s["set"]), fmt(s["mode"]), fmt(s["max_len"], "len"), fmt(s["sweep_label"]), fmt(s["dtype"])]
        if g is not None:
            row += [str(g["label"]), fmt(g["tflops"], "tflops"), fmt(g["util_peak"], "pct"),
                    fmt(g["util_measured"], "pct"), fmt(g["energy_j_per_call"], "sci"), fmt(g["power.avg_w"], "w"),
                    fmt(g["power.frac_at_cap"], "pct")]
        else:
            row += [DASH] * 7
        row += [str(x["label"]), fmt(x["tflops"], "tflops")] if x is not None else [DASH, DASH]
        sub = cases[cases["shape"] == shape]
        for p in others:
            v = sub.loc[sub["provider"] == p, "speedup"]
            row.append(fmt(v.iloc[0], "x") if len(v) else DASH)
        rows.append(row)
    return Table(headers, rows, css="summary")


def _providers(cases: pd.DataFrame) -> list[str]:
    pairs = cases[["provider", "semantics"]].dropna(subset=["provider"]).drop_duplicates("provider")
    pairs = pairs.assign(_s=(pairs["semantics"] == "softmax").astype(int)).sort_values(["_s", "provider"])
    return [str(p) for p in pairs["provider"]]


def _labels(cases: pd.DataFrame) -> dict[str, str]:
    return {str(r["provider"]): provider_label(r["provider"], r["semantics"])
            for _, r in cases.drop_duplicates("provider").iterrows() if r["provider"] is not None}


def _cases_table(cases: pd.DataFrame) -> Table:
    headers = ["case", "provider", "status", "median ms", "p20–p80 ms", "n", "TFLOP/s", "util peak", "util GEMM",
               "speedup", "rel err", "avg W", "peak W", "J/call", "TFLOP/s/W", "at cap", "SM MHz", "reasons",
               "FLOP/B", "error"]
    rows = []
    for _, r in _shape_sort_key(cases).iterrows() if len(cases) else []:
        p2080 = f"{fmt(r['p20_ms'], 'ms')}–{fmt(r['p80_ms'], 'ms')}" if _isnum(r["p20_ms"]) else DASH
        rows.append([fmt(r["id"]), fmt(r["label"]), fmt(r["status"]), fmt(r["median_ms"], "ms"), p2080,
                     fmt(r["n_samples"], "int") if r["n_samples"] else DASH, fmt(r["tflops"], "tflops"),
                     fmt(r["util_peak"], "pct"), fmt(r["util_measured"], "pct"), fmt(r["speedup"], "x"),
                     fmt(r["correctness.rel_err"], "sci"), fmt(r["power.avg_w"], "w"), fmt(r["power.peak_w"], "w"),
                     fmt(r["energy_j_per_call"], "sci"), fmt(r["tflops_per_w"], "frac"),
                     fmt(r["power.frac_at_cap"], "pct"), fmt(r["power.sm_clock_mhz_median"], "w"),
                     fmt(r["power.reasons"]), fmt(r["intensity"], "w"), fmt(r["error"])])
    return Table(headers, rows, css="cases", status_col=2, empty="No cases recorded.")


def _failures(cases: pd.DataFrame) -> Table:
    bad = cases[cases["status"] != "ok"] if len(cases) else cases
    order = {"failed": 0, "incorrect": 1, "skipped": 2}
    rows = []
    if len(bad):
        bad = bad.assign(_o=bad["status"].map(lambda s: order.get(s, 3))).sort_values(["_o", "id"], kind="stable")
        for _, r in bad.iterrows():
            rows.append([fmt(r["id"]), fmt(r["label"]), fmt(r["status"]), fmt(r["error"])])
    return Table(["case", "provider", "status", "error"], rows, css="failures", status_col=2,
                 empty="None: every case finished ok.")


WORKLOAD_FIELDS = [("B", "B", "int"), ("total Q", "total_q", "int"), ("total KV", "total_kv", "int"),
                   ("mean Q", "mean_q", "w"), ("p50 Q", "p50_q", "w"), ("p90 Q", "p90_q", "w"),
                   ("p99 Q", "p99_q", "w"), ("max Q", "max_q", "int"), ("mean KV", "mean_kv", "w"),
                   ("max KV", "max_kv", "int"), ("padding waste Q", "padding_waste", "pct"),
                   ("padding waste KV", "padding_waste_kv", "pct"), ("FLOP waste", "flop_waste", "pct"),
                   ("imbalance", "imbalance", "frac"), ("top-1% work share", "top1pct_work_share", "pct")]


def _workload_table(workloads: dict, cases: pd.DataFrame) -> Table:
    stats: dict[str, dict] = {}
    for name, w in (workloads or {}).items():
        if isinstance(w, dict):
            st = w.get("stats") if isinstance(w.get("stats"), dict) else {}
            stats[str(name)] = dict(st)
    if not stats and len(cases):  # older runs: what the cases carry
        for _, r in cases.drop_duplicates("workload.name").iterrows():
            if r["workload.name"] is None:
                continue
            stats[str(r["workload.name"])] = {k: r.get(f"workload.{k}") for _, k, _ in WORKLOAD_FIELDS}
    rows = [[name] + [fmt(st.get(k), kind) for _, k, kind in WORKLOAD_FIELDS] for name, st in stats.items()]
    return Table(["workload"] + [h for h, _, _ in WORKLOAD_FIELDS], rows, css="workloads",
                 empty="No workload statistics recorded.")


PLOT_CAPTIONS = {
    "tflops_vs_length": "Achieved TFLOP/s vs max sequence length, one line per provider (dashed: softmax), "
                        "with the datasheet peak and the measured GEMM ceiling.",
    "speedup": "Speedup vs the baseline provider on each shape (> 1: faster than the baseline).",
    "power_timeline": "Power and SM clock over the run; shaded bands are cases; red ticks: a throttle reason was set.",
    "roofline": "Roofline: arithmetic intensity (FLOPs over compulsory HBM bytes) vs achieved TFLOP/s.",
    "workload_lengths": "Length distributions of every workload (Q filled, KV outlined).",
}


def _plot_blocks(files: list[Path]) -> list[Any]:
    by_name = {f.name: f for f in files}
    blocks: list[Any] = []
    for stem, caption in PLOT_CAPTIONS.items():
        png = by_name.get(f"{stem}.png")
        if png is None:
            continue
        csvs = [by_name[n] for n in (f"{stem}.csv", f"{stem}_cases.csv") if n in by_name]
        blocks.append(Image(png, caption, csvs))
    per_wl = [f for f in files if f.name.startswith("lengths_") and f.suffix == ".png"]
    if per_wl:
        blocks.append(Section("Per-workload length histograms", [Image(f, f.stem.removeprefix("lengths_")) for f in per_wl],
                              collapsed=True))
    return blocks


def build_sections(meta: dict, cases: pd.DataFrame, workloads: dict, plot_files: list[Path],
                   baseline: str | None) -> tuple[str, list[Section]]:
    """The report as (title, sections), shared by the Markdown and HTML writers."""
    title = (f"gdpa-bench report: {meta.get('config_name') or meta.get('config') or 'run'} on "
             f"{meta.get('gpu') or (str(meta.get('device') or 'CPU')).upper()} — {_date(meta.get('started_at'))}")
    counts = cases["status"].value_counts().to_dict() if len(cases) else {}
    count_s = f"{len(cases)} cases: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "failed", "incorrect", "skipped"))
    extra = {k: v for k, v in counts.items() if k not in ("ok", "failed", "incorrect", "skipped")}
    if extra:
        count_s += ", " + ", ".join(f"{v} {k}" for k, v in extra.items())
    base_label = _labels(cases).get(baseline, baseline) if len(cases) else baseline
    top = Section("Overview", [count_s + "."] + [("warn", w) for w in _warnings(meta, cases)])
    env = Section("Environment", [_environment(meta, baseline)])
    summ = Section("Summary per shape", [
        f"Per shape: the fastest GDPA provider (its TFLOP/s, utilization of the datasheet peak and of the "
        f"measured GEMM ceiling, energy per call, average power, fraction of power samples at the cap), the "
        f"fastest softmax provider, and every provider's speedup vs the baseline {base_label or DASH} "
        f"(time ratio on the same shape).",
        _summary(cases, baseline)])
    plots = Section("Plots", _plot_blocks(plot_files) or ["No plots were written."])
    fails = Section("Failures and skips", [_failures(cases)])
    wl = Section("Workload statistics", [
        "Padding waste 1−ΣL/(B·maxL); FLOP waste 1−ΣLqLk/(B·maxLq·maxLk); imbalance max(LqLk)/mean(LqLk); "
        "top-1% share: fraction of the work in the largest 1% of sequences.",
        _workload_table(workloads, cases)])
    allc = Section("All cases", [_cases_table(cases)])
    return title, [top, env, summ, plots, fails, wl, allc]


# -------------------------------------------------------------------------------------------- writers


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> str:
    if not t.rows:
        return f"_{t.empty}_"
    if t.css == "env":
        lines = ["| | |", "|---|---|"]
    else:
        lines = ["| " + " | ".join(_md_cell(h) for h in t.headers) + " |", "|" + "---|" * len(t.headers)]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in t.rows]
    return "\n".join(lines)


def to_markdown(title: str, sections: list[Section], run_dir: Path) -> str:
    out = [f"# {title}", ""]

    def emit(blocks: Iterable[Any], level: int) -> None:
        for b in blocks:
            if isinstance(b, str):
                out.extend([b, ""])
            elif isinstance(b, tuple) and b[0] == "warn":
                out.extend([f"> **Warning:** {b[1]}", ""])
            elif isinstance(b, Table):
                out.extend([_md_table(b), ""])
            elif isinstance(b, Image):
                rel = b.path.relative_to(run_dir).as_posix() if b.path.is_relative_to(run_dir) else b.path.as_posix()
                out.extend([f"![{b.caption}]({rel})", ""])
                data = ", ".join(f"[{c.name}]({c.relative_to(run_dir).as_posix() if c.is_relative_to(run_dir) else c})" for c in b.csv)
                out.extend([f"_{b.caption}_" + (f" Data: {data}." if data else ""), ""])
            elif isinstance(b, Section):
                out.extend([f"{'#' * level} {b.title}", ""])
                emit(b.blocks, level + 1)

    for s in sections:
        out.extend([f"## {s.title}", ""])
        emit(s.blocks, 3)
    return "\n".join(out).rstrip() + "\n"


CSS = """
body{font-family:-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1500px;
 padding:0 16px;color:#1d1d1f;background:#fff;font-size:14px;line-height:1.45}
h1{font-size:22px;border-bottom:2px solid #333;padding-bottom:6px}
h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ccc;padding-bottom:4px}
h3{font-size:15px}
.warn{background:#fff4e5;border-left:4px solid #e67e22;padding:8px 12px;margin:8px 0}
.scroll{overflow-x:auto;margin:8px 0}
table{border-collapse:collapse;font-size:12.5px}
th,td{border:1px solid #d6d6d6;padding:3px 7px;white-space:nowrap}
th{background:#f2f4f7;position:sticky;top:0}
tr:nth-child(even) td{background:#fafbfc}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.err{white-space:normal;min-width:320px;max-width:700px;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
table.env td:first-child{font-weight:600;background:#f7f7f7}
td.st-ok{color:#1e7b34;font-weight:600} td.st-failed{color:#b3261e;font-weight:600}
td.st-incorrect{color:#a3520d;font-weight:600} td.st-skipped{color:#6b6b6b}
figure{margin:14px 0} figure img{max-width:100%;border:1px solid #e3e3e3}
figcaption{color:#555;font-size:13px}
details summary{cursor:pointer;font-weight:600;margin:8px 0}
.empty{color:#666;font-style:italic}
"""


def _is_numeric_cell(s: str) -> bool:
    t = s.replace(",", "").replace("%", "").replace("×", "").replace("–", "").strip()
    if s == DASH:
        return True
    try:
        float(t)
        return True
    except ValueError:
        return False


def _html_table(t: Table) -> str:
    if not t.rows:
        return f'<p class="empty">{html.escape(t.empty)}</p>'
    parts = [f'<div class="scroll"><table class="{t.css}">']
    if t.css != "env":
        parts.append("<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in t.headers) + "</tr></thead>")
    parts.append("<tbody>")
    err_col = t.headers.index("error") if "error" in t.headers else None
    for row in t.rows:
        cells = []
        for j, c in enumerate(row):
            cls = []
            if t.status_col is not None and j == t.status_col:
                cls.append(f"st-{c}")
            elif j == err_col:
                cls.append("err")
            elif j > 0 and t.css != "env" and _is_numeric_cell(c):
                cls.append("num")
            attr = f' class="{" ".join(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{html.escape(c)}</td>")
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</tbody></table></div>")
    return "".join(parts)


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def to_html(title: str, sections: list[Section]) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>"]

    def emit(blocks: Iterable[Any], level: int) -> None:
        for b in blocks:
            if isinstance(b, str):
                out.append(f"<p>{html.escape(b)}</p>")
            elif isinstance(b, tuple) and b[0] == "warn":
                out.append(f'<div class="warn"><strong>Warning:</strong> {html.escape(b[1])}</div>')
            elif isinstance(b, Table):
                out.append(_html_table(b))
            elif isinstance(b, Image):
                if not b.path.exists():
                    out.append(f'<p class="empty">missing plot {html.escape(b.path.name)}</p>')
                    continue
                data = ", ".join(html.escape(c.name) for c in b.csv)
                cap = html.escape(b.caption) + (f" <em>Data: {data} (beside the PNG in plots/).</em>" if data else "")
                out.append(f'<figure><img alt="{html.escape(b.path.stem)}" src="{_data_uri(b.path)}">'
                           f"<figcaption>{cap}</figcaption></figure>")
            elif isinstance(b, Section):
                if b.collapsed:
                    out.append(f"<details><summary>{html.escape(b.title)}</summary>")
                    emit(b.blocks, level + 1)
                    out.append("</details>")
                else:
                    out.append(f"<h{level}>{html.escape(b.title)}</h{level}>")
                    emit(b.blocks, level + 1)

    for s in sections:
        out.append(f'<section id="{html.escape(s.title.lower().replace(" ", "-"))}"><h2>{html.escape(s.title)}</h2>')
        emit(s.blocks, 3)
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------- entry


def render_report(run_dir: str | Path, baseline: str | None = None) -> dict[str, Path]:
    """Write `report.md`, `report.html` and `plots/` into the run folder.

    `run_dir`: the run folder or its results.json. `baseline` overrides `meta.baseline_provider`.
    Returns {"md": path, "html": path, "plots": plots folder}. Raises `ResultsError` for a missing or
    invalid results.json.
    """
    src = Path(run_dir)
    out_dir = src if src.is_dir() else src.parent
    meta, cases, workloads = load_run(src, baseline=baseline)
    base = cases.attrs.get("baseline")
    files = make_all_plots(out_dir, meta, cases, workloads, baseline=base)
    title, sections = build_sections(meta, cases, workloads, files, base)
    md_path, html_path = out_dir / "report.md", out_dir / "report.html"
    md_path.write_text(to_markdown(title, sections, out_dir), encoding="utf-8")
    html_path.write_text(to_html(title, sections), encoding="utf-8")
    return {"md": md_path, "html": html_path, "plots": out_dir / "plots"}
