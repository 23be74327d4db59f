"""A row of the metric table (results.metrics): what one field of the results is, where it comes from, and how
the report shows it."""

from __future__ import annotations

from dataclasses import dataclass

from results.derived import Derive

# the report's tables: reports.sections; "Where the time goes" (kernels, counters, bands): reports.profiling
VIEWS = ("summary", "cases", "workloads", "kernels", "counters", "bands")
KINDS = ("number", "text", "flag", "list", "object", "block", "table")
# how a unit reads in a table cell (reports.document.fmt), unless a row says otherwise
UNIT_FORMATS = {
    "TFLOP/s": "tflops",
    "ms": "ms",
    "fraction": "pct",
    "×": "x",
    "W": "whole",
    "MHz": "whole",
    "FLOP/B": "whole",
    "J": "sci",
    "TFLOP/s/W": "frac",
    "count": "int",
    "tokens": "int",
    "%": "percent",
}


@dataclass(frozen=True)
class Metric:
    """One field: `name` is its path in the record (`power.avg_w`: key `avg_w` of the block `power`;
    `kernels.rows.ms`: column `ms` of the table `kernels.rows`) and its frame column. `source` says what
    writes it: a stage of the runner (`config`, `provider`, `gate`, `timer`, `monitor`, `energy loop`,
    `overhead check`, `graph`, `breakdown`, `bands`, `runner`), `lengths` (the statistics of the drawn lengths:
    workloads.stats), `profile` (Nsight Compute), `merge`, or `frame` (derived when results are read).
    `kind`: number, text, flag, list, object (kept whole), block (a dict whose keys are the rows `name.*`),
    table (a list of dicts whose keys are the rows `name.*`). `optional`: present only where it applies
    (else every record has it, empty until set)."""

    name: str
    unit: str
    source: str
    formula: str
    description: str
    shown: tuple[str, ...] = ()
    header: str = ""
    kind: str = "number"
    fmt: str = ""
    optional: bool = False
    derive: Derive | None = None
    span_to: str = ""  # a cell showing this row and another as a range ("p20–p80 ms")

    @property
    def block(self) -> str | None:
        """The block or table this row is a key of (`power` for `power.avg_w`, `kernels.rows` for
        `kernels.rows.ms`), None at the top level."""
        return self.name.rsplit(".", 1)[0] if "." in self.name else None

    @property
    def key(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def cell_format(self) -> str:
        return self.fmt or UNIT_FORMATS.get(self.unit, "")

    @property
    def in_record(self) -> bool:
        """A field of the record (or of the `workloads` entry), not a column only the frame derives."""
        return self.source != "frame"


# The rows in display order: a view shows its rows in this order, and a block's keys are in record order.


def block_rows(block: str, source: str, view: str = ""):
    """The maker of one block's rows: `make(key, unit, formula, description, header="", **kw)` is the row
    `<block>.<key>` that `source` writes; with a header it is shown in `view` (when the block has one)."""

    def make(key: str, unit: str, formula: str, description: str, header: str = "", **kw) -> Metric:
        if header and view:
            kw.setdefault("shown", (view,))
        return Metric(f"{block}.{key}", unit, source, formula, description, header=header, **kw)

    return make
