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
import html
import os
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reports.document import DASH, Image, Section, Table
from reports.plots import make_all_plots
from reports.sections import build_sections
from results.files import ResultsWriteError, write_synced
from results.frame import load_run

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
            elif isinstance(b, tuple) and b[0] == "note":
                out.extend([f"> **Note — {b[1]}**", ""])
            elif isinstance(b, Table):
                out.extend([_md_table(b), ""])
            elif isinstance(b, Image):
                rel = b.path.relative_to(run_dir).as_posix() if b.path.is_relative_to(run_dir) else b.path.as_posix()
                out.extend([f"![{b.caption}]({rel})", ""])
                data = ", ".join(
                    f"[{c.name}]({c.relative_to(run_dir).as_posix() if c.is_relative_to(run_dir) else c})"
                    for c in b.csv
                )
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
.banner{background:#e8f0fe;border:1px solid #8ab4f8;border-left:6px solid #1a73e8;padding:10px 14px;margin:8px 0;
 font-weight:600}
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
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]

    def emit(blocks: Iterable[Any], level: int) -> None:
        for b in blocks:
            if isinstance(b, str):
                out.append(f"<p>{html.escape(b)}</p>")
            elif isinstance(b, tuple) and b[0] == "warn":
                out.append(f'<div class="warn"><strong>Warning:</strong> {html.escape(b[1])}</div>')
            elif isinstance(b, tuple) and b[0] == "note":
                out.append(f'<div class="banner">{html.escape(b[1])}</div>')
            elif isinstance(b, Table):
                out.append(_html_table(b))
            elif isinstance(b, Image):
                if not b.path.exists():
                    out.append(f'<p class="empty">missing plot {html.escape(b.path.name)}</p>')
                    continue
                data = ", ".join(html.escape(c.name) for c in b.csv)
                cap = html.escape(b.caption) + (f" <em>Data: {data} (beside the PNG in plots/).</em>" if data else "")
                out.append(
                    f'<figure><img alt="{html.escape(b.path.stem)}" src="{_data_uri(b.path)}">'
                    f"<figcaption>{cap}</figcaption></figure>"
                )
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
    invalid results.json, and `ResultsWriteError` (one line naming the file) when a report file cannot be
    written — disk full, read-only — after putting the run folder back as it was (`_ReportSwap`).
    """
    src = Path(run_dir)
    out_dir = src if src.is_dir() else src.parent
    meta, cases, workloads = load_run(src, baseline=baseline)
    base = cases.attrs.get("baseline")
    md_path, html_path = out_dir / "report.md", out_dir / "report.html"
    with _ReportSwap(out_dir) as swap:
        files = make_all_plots(out_dir, meta, cases, workloads, baseline=base)
        title, sections = build_sections(meta, cases, workloads, files, base)
        swap.stage(md_path, to_markdown(title, sections, out_dir))
        swap.stage(html_path, to_html(title, sections))
    return {"md": md_path, "html": html_path, "plots": out_dir / "plots"}


class _ReportSwap:
    """The report's files replaced all or none. The old plots/ is moved aside (into a hidden folder of the
    run folder) before the new one is drawn, report.md and .html are written there first, and only when
    everything is written do they replace the old ones; any failure — a disk that fills halfway through the
    plots — removes what was drawn and moves the old files back, so the run folder is as it was, and the
    error is one line (before, it was a plot warning, an error, and a folder of old and new plots)."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.aside = out_dir / f".report.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        self.staged: list[tuple[Path, Path]] = []  # (temporary file, its place)
        self.moved: list[Path] = []  # the old files moved aside, by their place in the run folder
        self.drawing = False  # plots/ is this render's from here on

    def __enter__(self) -> _ReportSwap:
        try:
            self.aside.mkdir()
            self._move_aside(self.out_dir / "plots")
            self.drawing = True
        except OSError as exc:
            self._restore()
            raise self._error(exc) from None
        return self

    def stage(self, path: Path, text: str) -> None:
        tmp = self.aside / path.name
        write_synced(tmp, text)
        self.staged.append((tmp, path))

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is None:
            try:
                for tmp, path in self.staged:
                    self._move_aside(path)
                    os.replace(tmp, path)
            except OSError as failed:
                exc = failed
            else:
                shutil.rmtree(self.aside, ignore_errors=True)
                return False
        self._restore()  # whatever failed (a full disk, a report bug, Ctrl-C): the folder as it was
        if isinstance(exc, OSError):
            raise self._error(exc) from None
        return False

    def _move_aside(self, path: Path) -> None:
        if path.exists():
            os.rename(path, self.aside / f"old.{path.name}")
            self.moved.append(path)

    def _restore(self) -> None:
        if self.drawing:
            shutil.rmtree(self.out_dir / "plots", ignore_errors=True)  # what was drawn, if anything
        try:
            for tmp, path in self.staged:
                if not tmp.exists() and path not in self.moved:  # put in place where there was none
                    path.unlink(missing_ok=True)
            for path in reversed(self.moved):  # an old file put back over its replacement
                if path.is_dir():
                    shutil.rmtree(path)
                os.replace(self.aside / f"old.{path.name}", path)
        except OSError:
            return  # an old file that cannot be moved back stays in the hidden folder rather than be lost
        shutil.rmtree(self.aside, ignore_errors=True)

    def _error(self, exc: OSError) -> ResultsWriteError:
        name = Path(exc.filename) if exc.filename else self.out_dir / "report.md"
        if name.parent == self.aside:  # report.md/.html are written beside the old plots first
            name = self.out_dir / name.name.removeprefix("old.")
        err = ResultsWriteError.of(name, exc)
        return ResultsWriteError(f"{err}; the report was not written: the run folder is as it was before")
