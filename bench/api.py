"""The Python API for notebooks: `bench.run(config, ...) -> pandas.DataFrame` (docs/DESIGN.md §7).

    import bench
    df = bench.run("configs/smoke.yaml", only="tiny/fwd/", out="runs/nb")
    df[df.status == "ok"][["id", "tflops", "median_ms"]]

It does what `python -m bench run` does, without the report: validate the config, run the selected
cases into a run folder (results.json, results.csv, results.parquet, power.csv), and return the cases
as `results.load_run` reads them back. Bad input raises `ConfigError` / `UsageError` with the CLI's
one line; a failing kernel is a row with `status == "failed"`, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd


def run(
    config: str | Path | Mapping[str, Any],
    *,
    only: str | None = None,
    providers: str | list[str] | None = None,
    out: str | Path | None = None,
    device: int | str | None = None,
    progress: bool = False,
) -> pd.DataFrame:
    """Run a sweep and return its cases as a DataFrame (one row per case, `results.load_run`'s columns).

    - `config`: a YAML path, or a dict with the same fields (validated exactly like the YAML; errors
      name `<config dict>` as the file).
    - `only`: a regex over case ids; `providers`: labels ("a,b" or a list) — as `--only`/`--providers`.
    - `out`: the run folder (default `<output_dir>/<config name>-<UTC time>`); it holds the files
      afterwards and is `df.attrs["run_dir"]`. A folder that already holds a run is refused.
    - `device`: a CUDA index for a `device: cuda` config (default: the current device), or "cpu"/"cuda"
      to override the config's device.
    - `progress`: show the tqdm bar (off by default: a notebook cell shows the per-case lines).

    An interrupted run (KeyboardInterrupt) returns the cases finished so far, `df.attrs["interrupted"]`.
    The sweep runs in this process: a case that faults the GPU (a sticky CUDA error, bench.faults) is a
    `failed` row and ends the sweep, `df.attrs["context_lost"]` its error; the rest needs a new process
    (`gdpa-bench run CONFIG --resume RUN_DIR`, which runs in worker processes and continues past a fault).
    """
    from bench.device import use_interpreter_without_gpu

    use_interpreter_without_gpu()  # before any kernel module is imported
    from bench.config import default_run_dir, load_config
    from bench.device import resolve_device
    from bench.errors import UsageError
    from bench.rundir import check_new_run_dir
    from bench.runner import Runner
    from bench.selection import select_cases
    from results.frame import load_run

    cfg = load_config(config)
    cases = select_cases(cfg, only, providers)
    kind, index = cfg.model.device, None
    if isinstance(device, str):
        if device not in ("cpu", "cuda"):
            raise UsageError(f"device: {device!r}; allowed: a CUDA index, 'cpu' or 'cuda'")
        kind = device
    elif device is not None:
        index = int(device)
    run_dir = Path(out) if out is not None else default_run_dir(cfg)
    dev = resolve_device(kind, index)
    check_new_run_dir(run_dir, "out" if out is not None else f"{cfg.path}: output_dir:")
    runner = Runner(cfg, run_dir, dev, progress=progress)
    runner.run(cases)
    _, df, _ = load_run(run_dir)
    df.attrs.update(run_dir=str(run_dir), interrupted=runner.interrupted, context_lost=runner.context_lost)
    return df
