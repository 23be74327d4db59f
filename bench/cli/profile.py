"""`gdpa-bench profile CONFIG --only REGEX [--run RUN_DIR]`: the profiling views of selected cases, on demand.

Without `--bands`: Nsight Compute over the selected cases (bench.profiling.counters: one ncu process for all of
them, clocks untouched), per kernel tensor-pipe activity, SM and DRAM throughput, occupancy, registers,
spills; stored per case (`counters`, and the summary `tc_util_ncu`) in the run's results.json with
`--run`, else in `profile.json` under `<output_dir>/profile-<config>-<UTC time>/`. `--keep` keeps the
`.ncu-rep` (under `RUN_DIR/ncu/` with --run).

With `--bands [--band-edges 64,128,...]`: each selected case's batch split into length bands, every band
timed alone (bench.profiling.bands). With `--run`, the bands of the cases recorded ok there are added to that run
(against its whole-batch medians); without it, the selected cases run as a new run folder with their bands.
No ncu is needed for the bands. The report is redrawn either way.

With `--trace` (alone or with `--bands`): each selected case's kernel breakdown with its Kineto trace kept
as RUN_DIR/traces/<case id>-<hash>.json (bench.profiling.breakdown; Perfetto's JSON loader opens it). With `--run`
the cases recorded ok there are built and profiled again, their `kernels` (and `host_bound`) replaced;
without it they run as a new run folder with `breakdown.trace` on.

In either case nothing is timed after a profiler session of this process (docs/DESIGN.md §5): every band is
timed first, then the breakdowns run (bench.profiling.later).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path

import torch

from bench.case.device import check_device_option, harness_stream, resolve_device
from bench.case.faults import is_sticky_cuda_error
from bench.case.timing import time_call
from bench.config.models import default_run_dir
from bench.config.profiling import Bands, Counters
from bench.config.resources import check_run_fits
from bench.config.selection import select_cases
from bench.errors import UsageError
from bench.profiling.bands import case_bands
from bench.profiling.counters import collect, find_ncu, replaying
from bench.profiling.later import profile_recorded
from bench.profiling.views import CaseProfiling
from bench.sweep.environments import refuse_in_process
from bench.sweep.report import render
from bench.sweep.rundir import check_new_run_dir
from bench.sweep.runlock import run_folder_lock
from bench.sweep.runner import Runner
from kernels.registry import get_provider
from results.files import ResultsError, ResultsWriter, read_results
from support.text import one_line

_SAME_BATCH = ("B", "H", "Hkv", "D", "causal", "seed")  # a recorded case's batch against the config's


def _run_dir(a, cases) -> Path | None:
    """The run `--run` names, refused where its record of a selected case holds another batch than the
    config's case of that id (a run made from another config: its views would be measured on other lengths)."""
    run_dir = Path(a.run) if a.run else None
    if run_dir and not (run_dir / "results.json").is_file():
        raise UsageError(f"--run {run_dir}: no results.json there")
    if run_dir:
        try:
            recorded = {str(c.get("id")): c for c in read_results(run_dir)["cases"]}
        except ResultsError as exc:
            raise UsageError(f"--run {run_dir}: {exc}") from None
        for case in cases:
            w = (recorded.get(case.id) or {}).get("workload")
            if not isinstance(w, dict):
                continue
            for f in _SAME_BATCH:
                if w.get(f) is not None and w[f] != getattr(case.workload, f):
                    raise UsageError(
                        f"--run {run_dir}: case {case.id}: its workload.{f} is {w[f]!r} there and "
                        f"{getattr(case.workload, f)!r} in this config; allowed: the run's own config"
                    )
    return run_dir


def profile(cfg, a) -> int:
    cases = select_cases(cfg, a.only, a.providers)
    refuse_in_process(cases, "profile (its cases run in the harness's own environment)")
    if a.band_edges is not None and not a.bands:
        raise UsageError("--band-edges: only with --bands")
    if a.bands or a.trace:
        return profile_views(cfg, cases, a)
    ncu = find_ncu()
    if ncu is None:
        raise UsageError(
            "ncu (Nsight Compute) not found on PATH or in /usr/local/cuda/bin; "
            "profile needs it (it ships with the CUDA toolkit; the length bands do not: --bands)"
        )
    if not torch.cuda.is_available():
        raise UsageError("profile needs a CUDA GPU (the length bands do not: --bands)")
    run_dir = _run_dir(a, cases)
    out = run_dir or Path(cfg.model.output_dir) / f"profile-{cfg.name}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    keep = (out / "ncu" if run_dir else out) if a.keep else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    print(f"profiling {len(cases)} case(s) under Nsight Compute in one process ...", flush=True)
    replayed = {}
    if run_dir:  # what the run's cases ran (their recorded plans), not a choice made again under ncu
        cases, replayed = replaying(cases, read_results(run_dir)["cases"])
    results = collect(cases, a.device, keep, cfg.model.counters.timeout_s, ncu=ncu)
    for cid, extra in replayed.items():
        results[cid]["counters"]["replayed"] = extra
    for cid, r in results.items():
        c = r["counters"]
        if c["status"] == "ok":
            tc = c["tensor_pct"]
            print(
                f"  {cid}: tensor pipe {tc if tc is not None else float('nan'):.1f}% over {len(c['kernels'])} "
                f"kernel(s), {c['duration_ms']:.3f} ms" + (f"; report {c['report']}" if c.get("report") else ""),
                flush=True,
            )
        else:
            print(f"  {cid}: {c['status']}: {c['reason']}", flush=True)
    if run_dir:
        with run_folder_lock(run_dir, "--run"):  # read, update and write back with no other writer between
            ResultsWriter.of(run_dir, read_results(run_dir)).update_cases(results)
            render(run_dir)
        print(f"stored in {run_dir / 'results.json'}")
    else:
        out.mkdir(parents=True, exist_ok=True)
        (out / "profile.json").write_text(json.dumps(results, indent=1))
        print(f"stored in {out / 'profile.json'}")
    return 0 if all(r["counters"]["status"] == "ok" for r in results.values()) else 1


def profile_views(cfg, cases, a) -> int:
    """`--bands` and/or `--trace`: the views that run with their case, not under ncu."""
    edges = a.band_edges if a.band_edges is not None else cfg.model.bands.edges
    run_dir = _run_dir(a, cases)
    check_device_option(cfg.model.device, a.device)
    device = resolve_device(cfg.model.device, a.device)
    traced = cfg.model.breakdown.model_copy(update={"enabled": True, "trace": True}) if a.trace else None
    if run_dir is None:  # a new run of the selected cases, with their views (and no ncu: neither needs it)
        update = {"counters": Counters(), "bands": Bands(only=a.only, edges=edges) if a.bands else Bands()}
        model = cfg.model.model_copy(update=update | ({"breakdown": traced} if traced else {}))
        out, option = default_run_dir(cfg), f"{cfg.path}: output_dir:"
        check_new_run_dir(out, option)
        check_run_fits(cases, device, cfg.model.correctness.enabled)
        with run_folder_lock(out, option):  # one writer per run folder, as `run` (bench.sweep.runlock)
            check_new_run_dir(out, option)
            Runner(replace(cfg, model=model), out, device).run(cases)
            drawn = render(out)
        print(f"stored in {out / 'results.json'}")
        return 0 if drawn else 1
    with run_folder_lock(run_dir, "--run"), harness_stream(device):  # as the run's cases were timed
        code = _add_bands(cfg, cases, run_dir, edges, device) if a.bands else 0
        if traced is not None and code == 0:
            model = cfg.model.model_copy(update={"breakdown": traced})
            code = _add_traces(replace(cfg, model=model), cases, run_dir, device)
        return code


def _providers():
    """`provider_of(case)`: one provider instance per label, as a run builds them."""
    made: dict = {}

    def provider_of(case):
        if case.label not in made:
            made[case.label] = get_provider(case.provider.name, case.provider.options or None)
        return made[case.label]

    return provider_of


def _recorded_ok(run_dir: Path, cases) -> tuple[dict, list]:
    data = read_results(run_dir)
    recorded = {c["id"]: c for c in data["cases"] if c.get("status") == "ok"}
    todo = [c for c in cases if c.id in recorded]
    if not todo:
        raise UsageError(f"--run {run_dir}: none of the selected cases is recorded ok there")
    return data, todo


def _profiled(views, todo, writer, run_dir: Path, redo: bool) -> int:
    """The profiled phase over `todo` (bench.profiling.later), after every timed measurement of this process."""
    lost = profile_recorded(views, todo, writer, _providers(), lambda ln: print(ln, flush=True), redo=redo)
    if lost is not None:
        render(run_dir)
        print(f"error: {lost[0]}: the GPU faulted while it was profiled: {lost[1]}; the cases after it were not "
              "profiled", file=sys.stderr)  # fmt: skip
        return 1
    drawn = render(run_dir)
    print(f"stored in {run_dir / 'results.json'}")
    return 0 if drawn else 1


def _add_bands(cfg, cases, run_dir: Path, edges, device) -> int:
    """The bands of the selected cases recorded ok in `run_dir`, against its whole-batch medians: every band
    timed first, then their breakdowns (no timing after a profiler session in this process)."""
    data, todo = _recorded_ok(run_dir, cases)
    m = cfg.model
    # each band measured as a case of a run is (bench.profiling.views): the run's timer, graph time, breakdown
    views = CaseProfiling(m, device, lambda fn: time_call(fn, m.timing, device), run_dir)
    writer = ResultsWriter.of(run_dir, data)
    provider_of = _providers()
    for w, group in groupby(todo, key=lambda c: c.workload):
        q, kv = w.lengths()
        for case in group:
            rec = {r["id"]: r for r in writer.data["cases"]}[case.id]
            print(f"length bands of {case.id} ...", flush=True)
            try:
                bands = case_bands(case, provider_of(case), q, kv, edges, device, views.measure, views.gate(), rec)
            except Exception as exc:
                if not is_sticky_cuda_error(exc):
                    raise
                # the process's CUDA context is gone: record why on this case, keep the timed ones, stop
                why = f"the GPU faulted while its bands were timed: {one_line(exc)}"
                writer.update_cases({case.id: {"bands": {"edges": edges, "rows": [], "error": why}}})
                render(run_dir)
                print(f"error: {case.id}: {why}; the cases after it were not split", file=sys.stderr)
                return 1
            writer.update_cases({case.id: {"bands": bands}})
    return _profiled(views, todo, writer, run_dir, redo=False)


def _add_traces(cfg, cases, run_dir: Path, device) -> int:
    """The selected cases recorded ok in `run_dir`, built and profiled again with their traces kept (their
    `kernels` and `host_bound` replaced)."""
    data, todo = _recorded_ok(run_dir, cases)
    views = CaseProfiling(cfg.model, device, lambda fn: time_call(fn, cfg.model.timing, device), run_dir)
    return _profiled(views, todo, ResultsWriter.of(run_dir, data), run_dir, redo=True)
