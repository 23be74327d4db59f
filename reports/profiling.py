"""The report's "Where the time goes" section (docs/DESIGN.md §5): the kernel breakdown, the Nsight Compute
counters and the length bands of the cases that have them. Each view is a table with one row per case and
a long table with one row per kernel or band; their columns are the metric table's views `kernels`,
`counters` and `bands` (results.metrics), the long tables those of `kernels.rows`, `counters.kernels` and
`bands.rows`. The plots of the same data (kernel_breakdown, length_bands) are in the Plots section."""

from __future__ import annotations

import pandas as pd

from reports.document import Section, Table, cell
from results.frame import table_frame
from results.kernel_names import short_kernel_name
from results.metrics import metric, shown_in, table_columns

# Per view: the field that says a case has it, its long table, the intro and the plot that draws it.
VIEWS = {
    "kernels": (
        "kernels.source",
        "kernels.rows",
        "Kernel breakdown",
        "The kernels one call launches: a short profiler pass after the timed samples, the L2 flushed before "
        "each call as in the samples, with launches and time per call (plot: kernel_breakdown). Each kernel is "
        'placed in its call by the launch API call it links to in the trace, on any thread ("launch"), else '
        "by its device time. A kernel sum below the median is launch gaps and host work between kernels; a case "
        "whose GPU idled more than 10% of the call is host-bound: its median times the host, and its CUDA-graph "
        "time (timing.cuda_graph) the GPU.",
    ),
    "counters": (
        "counters.status",
        "counters.kernels",
        "Hardware counters",
        "Nsight Compute over one call per case, clocks untouched: per kernel the tensor-pipe activity, SM and "
        "DRAM throughput (% of peak), achieved occupancy (% of the SM's warps), registers per thread and "
        "local-memory loads and stores (register spills or local arrays); per case the duration-weighted tensor "
        "pipe and the measured intensity (useful FLOPs / DRAM bytes) and throughput (useful FLOPs / kernel "
        "time), which the roofline marks with a star.",
    ),
    "bands": (
        "bands.key",
        "bands.rows",
        "Length bands",
        "Each case's batch split by min(Lq, Lk), every band's sub-batch gated and timed alone: its share of the "
        "sequences, the work and the time (its median over the bands' sum; plot: length_bands), and the bands' "
        "sum against the whole batch. Each band is measured as the whole case is (the same timer and flush, "
        "its kernels, its GPU idle share); a band of short sequences launched alone can be host-bound, and a "
        "sum more than 10% from the whole batch says why. The jaggedness ceiling is the batch's tile efficiency "
        "at the kernel's tile × the kernel's long-sequence speed (its fastest band): what it would reach if "
        "jaggedness cost only the partial tiles.",
    ),
}


# On a CPU run the bands' jaggedness ceiling compares interpreted band timings with each other: noise that
# read "achieved / ceiling 195.8%". Those columns are left out there, and the intro says why.
CPU_HIDDEN = {"bands": ("bands.ceiling_tflops", "bands_achieved")}
CPU_NOTE = {
    "bands": (
        " On this CPU run the jaggedness ceiling and the batch's share of it are not shown: the bands' timings "
        "(the Triton interpreter, eager PyTorch) are noise, and a ceiling built from them is no ceiling."
    )
}


def view_blocks(cases: pd.DataFrame, view: str, cpu: bool = False) -> list:
    """The intro, the per-case table and the long table of one view; [] when no case has it. `cpu`: a CPU
    run, whose timings compare nothing (reports.cpu_notes): the figures that compare them are left out."""
    has, table, _, intro = VIEWS[view]
    sub = cases[cases[has].notna()] if len(cases) and has in cases else cases.iloc[0:0]
    if sub.empty:
        return []
    hidden = CPU_HIDDEN.get(view, ()) if cpu else ()
    per_case = [m for m in shown_in(view) if m.name not in hidden]
    if cpu and view in CPU_NOTE:
        intro += CPU_NOTE[view]
    status = next((i for i, m in enumerate(per_case) if m.key == "status"), None)
    blocks: list = [
        intro,
        Table(
            [m.header for m in per_case],
            [[cell(m, r) for m in per_case] for _, r in sub.iterrows()],
            css=view,
            status_col=status,
        ),
    ]
    columns = [metric("id"), *shown_in(view, table_columns(table))]
    rows = table_frame(sub, table)
    name = f"{table}.name"
    if name in rows:  # profilers' kernel names run to hundreds of characters
        rows[name] = rows[name].map(short_kernel_name)
    status = next((i for i, m in enumerate(columns) if m.key == "status"), None)
    long = Table(
        [m.header for m in columns],
        [[cell(m, r) for m in columns] for _, r in rows.iterrows()],
        css=view,
        status_col=status,
        empty="No rows recorded.",
    )
    blocks.append(Section(f"{VIEWS[view][2]}: every row", [long], collapsed=view == "kernels"))
    return blocks


MAX_NAMED = 5  # cases a warning names before "and N more"


def _named(ids: list[str]) -> str:
    more = f" and {len(ids) - MAX_NAMED} more" if len(ids) > MAX_NAMED else ""
    return ", ".join(ids[:MAX_NAMED]) + more


def profiling_warnings(cases: pd.DataFrame) -> list[str]:
    """The overview's lines about the views: host-bound cases, and band cases whose bands do not sum to
    within 10% of the whole batch (with why)."""
    out = []
    if "host_bound" in cases:
        judged = cases[cases["host_bound"].notna()]
        bound = judged[judged["host_bound"].astype(bool)]
        if len(bound):
            out.append(
                f"{len(bound)} of {len(judged)} cases with a GPU breakdown are host-bound (the GPU idled more than "
                f"10% of the call, `host_bound`): their medians time the host's work per call, their kernel sum "
                f"and CUDA-graph time (`timing.cuda_graph`) the GPU's: {_named(list(bound['id']))}."
            )
    if "bands.why" in cases:
        apart = cases[cases["bands.why"].notna()]
        out += [f"{r['id']}: {r['bands.why']}." for _, r in apart.iterrows()]
    return out


def profiling_section(cases: pd.DataFrame, cpu: bool = False) -> Section | None:
    """The section, or None when no case has a kernel breakdown, counters or bands (`cpu`: a CPU run)."""
    parts = [Section(VIEWS[v][2], blocks) for v in VIEWS if (blocks := view_blocks(cases, v, cpu))]
    return Section("Where the time goes", parts) if parts else None
