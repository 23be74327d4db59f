"""`python -m bench workloads CONFIG`: the statistics of every workload, and a length histogram each."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.config.models import LoadedConfig
from results.files import ResultsWriteError
from results.metrics import WORKLOAD_METRICS, shown_in
from workloads import length_stats, plot_length_histogram

# the statistics the report's workload table shows (results.metrics), in its order
COLUMNS = ["workload", *(m.key for m in shown_in("workloads", WORKLOAD_METRICS))]


def workload_table(cfg: LoadedConfig) -> tuple[pd.DataFrame, dict]:
    rows, lengths, seen = [], {}, set()
    for case in cfg.cases:
        w = case.workload
        if w.name in seen:
            continue
        seen.add(w.name)
        q, kv = w.lengths()
        lengths[w.name] = (q, kv)
        rows.append({"workload": w.name, **length_stats(q, kv, causal=w.causal)})
    return pd.DataFrame(rows), lengths


def default_out(cfg: LoadedConfig) -> Path:
    return Path(cfg.model.output_dir) / f"workloads-{cfg.name}"


def describe(cfg: LoadedConfig, out: Path | None = None) -> int:
    df, lengths = workload_table(cfg)
    out = out or default_out(cfg)
    try:
        return _write(df, lengths, out)
    except OSError as exc:  # disk full, read-only: one line naming the folder (exit 2)
        raise ResultsWriteError.of(out, exc) from None


def _write(df: pd.DataFrame, lengths: dict, out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with pd.option_context(
        "display.max_rows",
        None,
        "display.width",
        200,
        "display.max_columns",
        None,
        "display.float_format",
        "{:.3f}".format,
    ):
        print(df[[c for c in COLUMNS if c in df.columns]].to_string(index=False))
    df.to_csv(out / "workloads.csv", index=False)
    for name, (q, kv) in lengths.items():
        plot_length_histogram(q, kv, out / (name.replace("/", "_") + ".png"), title=name)
    print(f"\nstatistics: {out / 'workloads.csv'}; histograms: {out}/*.png ({len(lengths)})")
    return 0
