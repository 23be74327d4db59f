"""The plot registry: a plot is one function in one module of this package, decorated with `@plot` and its
caption, and the skeleton every plot shares is here — where its files go, the placeholder PNG and the
header-only CSVs when there is nothing to draw, the CSVs of exactly what was drawn.

A plot module is found by `reports.plots` without being listed anywhere, and the report shows every
registered plot under its caption (reports.sections), so a new plot is one new module:

    CAPTION = "TFLOP/s per watt of every ok case."

    @plot("tflops_per_watt", order=60, columns=("id", "tflops_per_w"), caption=CAPTION)
    def tflops_per_watt(data: PlotData, out: Path) -> Drawing:
        ok = cases_to_draw(data.cases, None, "no ok cases: nothing to plot", "TFLOP/s per watt")
        fig = figure(8, 4)
        fig.add_subplot().bar(range(len(ok)), ok["tflops_per_w"])
        return Drawing(fig, {"": ok[["id", "tflops_per_w"]]})
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from reports.cpu_notes import is_cpu_run
from reports.plots.common import ok_cases, placeholder, save, write_csv


@dataclass(frozen=True)
class PlotData:
    """What a plot draws from: the run's meta, its results frame, its workloads, its power.csv (None when
    absent) and the baseline provider of the speedups."""

    meta: dict
    cases: pd.DataFrame
    workloads: dict
    power: pd.DataFrame | None = None
    baseline: str | None = None


class NothingToPlot(Exception):
    """A plot with nothing to draw: its PNG says `why` under `title`, its CSVs hold only headers."""

    def __init__(self, why: str, title: str):
        super().__init__(why)
        self.why, self.title = why, title


def cases_to_draw(
    cases: pd.DataFrame, where: Callable[[pd.DataFrame], pd.Series] | None, why: str, title: str
) -> pd.DataFrame:
    """The ok cases `where` keeps (common.ok_cases); none: NothingToPlot(why, title), the placeholder."""
    ok = ok_cases(cases, where)
    if ok.empty:
        raise NothingToPlot(why, title)
    return ok


@dataclass
class Drawing:
    """What a plot function returns: the figure, the rows drawn per CSV (key: the suffix of the file name,
    "" for `<name>.csv`) and any other PNG it wrote itself (`extras`)."""

    figure: Figure
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    extras: list[Path] = field(default_factory=list)
    caption: str = ""  # the caption of what was drawn, when it is not the registered one (a CPU run's)


class PlotFiles(list):
    """`make_all_plots`'s files (PNGs and CSVs) and what the report says of each plot: `captions` ({name:
    the caption of what it drew}, where that is not the registered caption) and `not_drawn` ({name: why}):
    on a CPU run a plot with nothing to draw writes no file — the GPU-only plots were empty frames under
    captions about power and speedups."""

    def __init__(self, *args):
        super().__init__(*args)
        self.captions: dict[str, str] = {}
        self.not_drawn: dict[str, str] = {}


@dataclass(frozen=True)
class Plot:
    name: str  # the files: <name>.png, <name><suffix>.csv
    caption: str  # what the report says under it
    order: int  # its place in the report
    tables: dict[str, tuple[str, ...]]  # CSV suffix -> its columns
    draw: Callable[[PlotData, Path], Drawing]
    extras_title: str = ""  # the report's collapsed section for the extra PNGs
    extras_prefix: str = ""  # their file names start with this; the rest is each one's caption
    when: Callable[[PlotData], bool] | None = None  # drawn only for the runs this holds for (None: every run)

    def files(self, out: Path) -> tuple[Path, list[Path]]:
        return out / f"{self.name}.png", [out / f"{self.name}{suffix}.csv" for suffix in self.tables]


PLOTS: dict[str, Plot] = {}


def plot(
    name: str,
    *,
    caption: str,
    order: int,
    columns: tuple[str, ...] | None = None,
    tables: dict[str, tuple[str, ...]] | None = None,
    extras_title: str = "",
    extras_prefix: str = "",
    when: Callable[[PlotData], bool] | None = None,
) -> Callable:
    """Register the decorated `fn(data, out) -> Drawing` as plot `name` (`columns`: its one CSV's;
    `tables`: {suffix: columns} for several; `when`: the runs it is for — for any other run it writes no
    file and the report leaves it out). A plot without a caption is refused here, so no plot is drawn
    that the report cannot show."""
    if not caption or not caption.strip():
        raise ValueError(f"plot {name!r}: a caption is required (the report shows it under the plot)")

    def register(fn: Callable[[PlotData, Path], Drawing]) -> Callable[[PlotData, Path], Drawing]:
        if name in PLOTS and PLOTS[name].draw is not fn:
            raise ValueError(f"plot {name!r} is registered twice")
        cols = tables if tables is not None else {"": tuple(columns or ())}
        PLOTS[name] = Plot(name, caption.strip(), order, cols, fn, extras_title, extras_prefix, when)
        return fn

    return register


def registered() -> list[Plot]:
    """Every plot, in report order."""
    return sorted(PLOTS.values(), key=lambda p: (p.order, p.name))


def draw(p: Plot, data: PlotData, out: Path, files: PlotFiles | None = None) -> list[Path]:
    """Draw plot `p` into the folder `out`: its extras, its PNG and its CSVs, in that order (nothing for a
    run its `when` excludes, nor on a CPU run for a plot with nothing to draw). `files` collects its caption
    and why it was not drawn."""
    if p.when is not None and not p.when(data):
        return []
    png, csvs = p.files(out)
    try:
        drawing = p.draw(data, out)
    except NothingToPlot as empty:
        if is_cpu_run(data.meta):  # nothing to draw on a CPU: no frame, one sentence in the report
            if files is not None:
                files.not_drawn[p.name] = empty.why
            return []
        placeholder(png, empty.why, empty.title)
        if files is not None:  # the caption says what the placeholder shows, not what the plot would have
            files.captions[p.name] = f"{empty.title or p.name}: not drawn — {empty.why}."
        return [png, *(write_csv(pd.DataFrame(), csv, cols) for csv, cols in zip(csvs, p.tables.values(), strict=True))]
    if drawing.caption and files is not None:
        files.captions[p.name] = drawing.caption
    save(drawing.figure, png)
    tables = [drawing.tables.get(suffix, pd.DataFrame()) for suffix in p.tables]
    written = [write_csv(t, csv, cols) for t, csv, cols in zip(tables, csvs, p.tables.values(), strict=True)]
    return [*drawing.extras, png, *written]
