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
    resume: str | Path | None = None,
    force: bool = False,
    retry_failed: bool = False,
    progress: bool = False,
) -> pd.DataFrame:
    """Run a sweep and return its cases as a DataFrame (one row per case, `results.load_run`'s columns).

    - `config`: a YAML path, or a dict with the same fields (validated exactly like the YAML; errors
      name `<config dict>` as the file).
    - `only`: a regex over case ids; `providers`: labels ("a,b" or a list) — as `--only`/`--providers`.
    - `out`: the run folder (default `<output_dir>/<config name>-<UTC time>`); it holds the files
      afterwards and is `df.attrs["run_dir"]`. A folder that already holds a run is refused.
    - `resume`: a run folder to continue instead (its finished cases are kept; as `--resume`, with
      `force=True` for a run made from another config; `retry_failed=True` runs its `failed` cases again, their
      records kept in `meta.retried`, as `--retry-failed`). Not with `out`.
    - `device`: a CUDA index for a `device: cuda` config (default: the current device), or "cpu"/"cuda"
      to override the config's device.
    - `progress`: show the tqdm bar (off by default: a notebook cell shows the per-case lines).

    Bad input raises `ConfigError` / `UsageError` (both ValueErrors) before anything is written; a run
    folder another process is writing is refused the same way (bench.sweep.runlock). An interrupted run
    (KeyboardInterrupt) returns the cases finished so far, `df.attrs["interrupted"]`.
    The sweep runs in this process: a case that faults the GPU (a sticky CUDA error, bench.case.faults) is a
    `failed` row and ends the sweep, `df.attrs["context_lost"]` its error; the rest needs a new process
    (`resume=` from a fresh Python, or `gdpa-bench run CONFIG --resume RUN_DIR`, which runs in worker
    processes and continues past a fault).
    """
    from bench.case.device import use_interpreter_without_gpu

    use_interpreter_without_gpu()  # before any kernel module is imported
    from bench.case.device import check_device_option, resolve_device
    from bench.config.models import default_run_dir, load_config
    from bench.config.resources import check_run_fits
    from bench.config.selection import select_cases
    from bench.errors import API, UsageError
    from bench.sweep.environments import refuse_in_process
    from bench.sweep.rundir import check_new_run_dir, check_resume, folder_option
    from bench.sweep.rundir import retry_failed as retry_failed_cases
    from bench.sweep.runlock import run_folder_lock
    from bench.sweep.runner import Runner
    from results.frame import load_run

    _check_arguments(only, providers, device, force, progress)
    if retry_failed not in (True, False):
        raise UsageError(f"retry_failed={retry_failed!r:.60}: allowed: True or False")
    if retry_failed and resume is None:
        raise UsageError("retry_failed=True: only with resume= (it runs that run's failed cases again)")
    if out is not None and resume is not None:
        raise UsageError(f"out={out!r}: not with resume=, which continues {resume!r} in place")
    for name, value in (("out", out), ("resume", resume)):
        if value is not None:
            folder_option(value, API.name(name))
    cfg = load_config(config)
    cases = select_cases(cfg, only, providers, API)  # errors name `only=`, not `--only`: no command line here
    refuse_in_process(cases, "bench.run (it runs every case in this process)")
    kind, index = cfg.model.device, None
    if isinstance(device, str):
        kind = device
    elif device is not None:
        check_device_option(cfg.model.device, device, "device=")
        index = device
    dev = resolve_device(kind, index)
    if resume is not None:
        run_dir, option = Path(resume), "resume="
        check_resume(cfg, run_dir, force, API)
    else:
        run_dir = Path(out) if out is not None else default_run_dir(cfg)
        option = "out=" if out is not None else f"{cfg.path}: output_dir:"
        check_new_run_dir(run_dir, option, API)
    check_run_fits(cases, dev, cfg.model.correctness.enabled)
    with run_folder_lock(run_dir, option):
        if resume is None:
            check_new_run_dir(run_dir, option, API)
        elif retry_failed:
            retry_failed_cases(run_dir, {c.id for c in cases})
        runner = Runner(cfg, run_dir, dev, resume=resume is not None, progress=progress)
        runner.run(cases)
    _, df, _ = load_run(run_dir)
    df.attrs.update(run_dir=str(run_dir), interrupted=runner.interrupted, context_lost=runner.context_lost)
    return df


def _check_arguments(only, providers, device, force, progress) -> None:
    """The keyword arguments' types, each a one-line UsageError (`only=5` was a traceback)."""
    from bench.errors import UsageError

    if only is not None and not isinstance(only, str):
        raise UsageError(f"only={only!r:.60}: allowed: a regular expression (text) over case ids, or None")
    ok_list = isinstance(providers, (list, tuple)) and all(isinstance(p, str) for p in providers)
    if providers is not None and not isinstance(providers, str) and not ok_list:
        raise UsageError(f"providers={providers!r:.60}: allowed: 'a,b' or a list of provider labels, or None")
    if device is not None and not (
        device in ("cpu", "cuda") or (isinstance(device, int) and not isinstance(device, bool))
    ):
        raise UsageError(f"device={device!r:.60}: allowed: a CUDA index (int), 'cpu' or 'cuda', or None")
    for name, v in (("force", force), ("progress", progress)):
        if not isinstance(v, bool):
            raise UsageError(f"{name}={v!r:.60}: allowed: True or False")
