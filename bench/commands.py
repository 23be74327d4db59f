"""The commands that run or inspect a sweep: run, list, workloads, profile, env, submit, merge (docs/DESIGN.md
§7). The commands that present results are the report step's (bench.reporting).

Each handler imports what it needs when it runs: the CLI chooses the Triton interpreter before any kernel
module is imported, and `--help` must not pay for torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench import options
from bench.errors import EXIT_CONTEXT_LOST, EXIT_FAILED, UsageError
from bench.options import Command
from results.files import ResultsWriteError


def _load(path):
    from bench.config import load_config

    return load_config(path)


# ------------------------------------------------------------------------------------------------ run


ISOLATION = ("process", "none")  # `run --isolation`: where the sweep runs (bench.shard.worker)


def run_arguments(parser: argparse.ArgumentParser) -> None:
    options.config(parser)
    parser.add_argument("--out", help="run folder (default: <output_dir>/<config>-<UTC time>)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a run folder, skipping recorded cases")
    parser.add_argument("--force", action="store_true", help="with --resume: continue a run made from another config")
    options.selection(parser)
    options.device(parser)
    parser.add_argument("--gpus", help="shard over GPUs: 'all' or a list like 0,1")
    parser.add_argument(
        "--isolation",
        choices=ISOLATION,
        help="process: the sweep runs in a worker process, started afresh after a CUDA fault (the default on a "
        "GPU); none: in this process, where a CUDA fault ends the run (the default on CPU)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    parser.add_argument("--case-list", help=argparse.SUPPRESS)  # internal: a shard's case ids, one per line
    parser.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)  # internal: the merge renders
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # internal: bench.shard.worker


def run(args: argparse.Namespace) -> int:
    from bench.config import default_run_dir
    from bench.device import check_device, resolve_device
    from bench.rundir import check_new_run_dir, check_resume
    from bench.selection import restrict_to_list, select_cases

    cfg = _load(args.config)
    cases = select_cases(cfg, args.only, args.providers)
    if args.case_list:
        cases = restrict_to_list(cfg, cases, args.case_list)
    if args.resume and args.out:
        raise UsageError(f"--out {args.out}: not with --resume, which continues {args.resume} in place")
    if args.force and not args.resume:
        raise UsageError("--force: only with --resume (it allows resuming a run of another config)")
    if args.gpus is not None:
        if args.isolation is not None:
            raise UsageError("--isolation: not with --gpus, whose workers are always restarted after a CUDA fault")
        from bench.shard import run_sharded

        return run_sharded(cfg, cases, args)
    check_device(cfg.model.device, args.device)
    if args.resume:
        run_dir = Path(args.resume)
        check_resume(cfg, run_dir, args.force)
    else:
        run_dir = Path(args.out) if args.out else default_run_dir(cfg)
        check_new_run_dir(run_dir, "--out" if args.out else f"{cfg.path}: output_dir:")
    isolation = args.isolation or ("process" if cfg.model.device == "cuda" else "none")
    if isolation == "process" and not args.worker:
        return _sweep_in_worker(args, cfg, run_dir)  # the worker resolves the device: no CUDA context here
    return _sweep(args, cfg, cases, resolve_device(cfg.model.device, args.device), run_dir)


def _sweep(args: argparse.Namespace, cfg, cases, device, run_dir: Path) -> int:
    """The sweep in this process and its report; Ctrl-C/SIGTERM end it with the finished cases and the
    report written. As a worker (`--worker`) it leaves the report and the closing lines to its parent."""
    from bench.reporting import render
    from bench.runner import Runner
    from bench.signals import interrupts

    lost = None
    with interrupts() as sig:
        try:
            print(f"gdpa-bench: {len(cases)} cases from {cfg.path} on {device} -> {run_dir}", flush=True)
            runner = Runner(cfg, run_dir, device, resume=bool(args.resume), progress=not args.no_progress)
            counts = runner.run(cases)
            lost = runner.context_lost
            if not args.no_report:
                try:
                    render(run_dir)
                except OSError as exc:
                    raise ResultsWriteError.of(run_dir / "report.md", exc) from None
        except KeyboardInterrupt:  # before the sweep started, or while the report was drawn
            counts = None
        if args.worker and lost is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_CONTEXT_LOST)  # no teardown in a process whose CUDA context is broken
        if args.worker:
            return 0 if sig.signum is None else sig.exit_code
        summary = ", ".join(f"{v} {k}" for k, v in sorted((counts or {}).items())) or "nothing to do"
        if lost is not None:
            return _closing_lines(args, run_dir, summary, f"stopped by a CUDA fault ({lost})", EXIT_CONTEXT_LOST)
        if sig.signum is not None:
            return _closing_lines(args, run_dir, summary, f"interrupted ({sig.name})", sig.exit_code)
        return _closing_lines(args, run_dir, summary)


def _sweep_in_worker(args: argparse.Namespace, cfg, run_dir: Path) -> int:
    """The sweep in a worker process, started afresh after each CUDA fault (bench.shard.worker), then the
    report and the closing lines over every case of the run folder."""
    from bench.reporting import render
    from bench.shard.merge import rc_text
    from bench.shard.worker import run_in_worker
    from bench.signals import interrupts
    from results.files import ResultsError, read_results

    with interrupts() as sig:
        try:
            rc = run_in_worker(cfg, args, run_dir)
        except KeyboardInterrupt:
            rc = None
        try:
            cases = read_results(run_dir)["cases"]
        except (ResultsError, OSError):
            return sig.exit_code if rc is None else rc  # the worker stopped before it wrote anything; it said why
        if not args.no_report:
            render(run_dir)
    counts: dict[str, int] = {}
    for c in cases:
        counts[c["status"]] = counts.get(c["status"], 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "nothing to do"
    if sig.signum is not None:
        return _closing_lines(args, run_dir, summary, f"interrupted ({sig.name})", sig.exit_code)
    if rc == EXIT_CONTEXT_LOST:  # and not started again: it recorded nothing new
        return _closing_lines(args, run_dir, summary, "stopped by a CUDA fault (the worker's last lines)", rc)
    if rc:
        return _closing_lines(args, run_dir, summary, f"the worker process ended ({rc_text(rc)})", EXIT_FAILED)
    return _closing_lines(args, run_dir, summary)


def _closing_lines(
    args: argparse.Namespace, run_dir: Path, summary: str, stopped: str | None = None, code: int = 0
) -> int:
    """`done: ...`, or why the run stopped and the command that continues it; returns `code`."""
    from bench.rundir import resume_command

    results = run_dir / "results.json"
    if stopped is None:
        print(f"done: {summary}. results: {results}", flush=True)
        return code
    print(f"{stopped}: {summary}. results: {results}", flush=True)
    if results.exists():
        print(f"to continue: {resume_command(args.argv, run_dir)}", flush=True)
    return code


# ----------------------------------------------------------------------------------- list, workloads


def list_arguments(parser: argparse.ArgumentParser) -> None:
    options.config(parser)
    options.selection(parser)


def list_cases(args: argparse.Namespace) -> int:
    from bench.selection import select_cases
    from bench.shard import case_cost

    cfg = _load(args.config)
    cases = select_cases(cfg, args.only, args.providers)
    costs = [case_cost(c, cfg.model) for c in cases]
    width = max(len(c.id) for c in cases)
    for c, s in zip(cases, costs, strict=True):
        print(f"{c.id:{width}s}  ~{s:.1f} s")
    where = "one GPU" if cfg.model.device == "cuda" else "the CPU"
    print(
        f"{len(cases)} cases; estimated wall time ~{_duration(sum(costs))} on {where} (the sharding cost model: "
        "timing budgets, energy loop, FLOPs at a nominal rate; compile and autotune not included)"
    )
    return 0


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def workloads_arguments(parser: argparse.ArgumentParser) -> None:
    options.config(parser)
    parser.add_argument("--out", help="folder for the histograms (default runs/workloads-<config>)")


def workloads(args: argparse.Namespace) -> int:
    from bench.workload_report import describe

    return describe(_load(args.config), Path(args.out) if args.out else None)


# ---------------------------------------------------------------------------------------- profile, env


def profile_arguments(parser: argparse.ArgumentParser) -> None:
    options.config(parser)
    options.selection(parser, only_required=True)
    parser.add_argument("--run", metavar="RUN_DIR", help="write tc_util_ncu into this run's results.json")
    parser.add_argument("--keep", action="store_true", help="keep each case's .ncu-rep (under RUN_DIR/ncu/ with --run)")
    options.device(parser)
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: the child ncu profiles


def profile(args: argparse.Namespace) -> int:
    from bench.profile import profile

    return profile(_load(args.config), args)


def env_arguments(parser: argparse.ArgumentParser) -> None:
    options.device(parser)
    parser.add_argument("--full", action="store_true", help="also print torch.utils.collect_env's report")


def env(args: argparse.Namespace) -> int:
    import torch

    from bench.env import print_env
    from bench.provider_specs import load_provider_modules

    load_provider_modules()  # a module that does not import: one line, before any of the table
    dev = torch.device("cuda", args.device or 0) if torch.cuda.is_available() else torch.device("cpu")
    print_env(dev, full=args.full)
    return 0


# -------------------------------------------------------------------------------------- submit, merge


def submit_arguments(parser: argparse.ArgumentParser) -> None:
    options.config(parser)
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--partition")
    parser.add_argument("--timeout-min", type=int, default=240)
    parser.add_argument("--out")
    options.selection(parser)
    parser.add_argument("--local", action="store_true", help="submitit's local executor (testing)")


def submit(args: argparse.Namespace) -> int:
    from bench.shard import submit

    return submit(_load(args.config), args)


def merge(args: argparse.Namespace) -> int:
    from bench.reporting import render
    from bench.shard import merge_planned

    run_dir = Path(args.run_dir)
    data = merge_planned(run_dir)
    render(run_dir)
    missing = data["meta"].get("missing_cases") or []
    print(
        f"merged {len(data['cases'])} cases from {len(data['meta']['shards'])} shard(s)"
        + (f"; {len(missing)} missing" if missing else "")
        + f": {run_dir / 'results.json'}"
    )
    return EXIT_FAILED if missing else 0


COMMANDS = (
    Command("run", "run a sweep: correctness gate, timing, power, results, report", run_arguments, run),
    Command("list", "the cases a config runs and an estimated wall time (runs nothing)", list_arguments, list_cases),
    Command("workloads", "workload statistics and length histograms (no GPU needed)", workloads_arguments, workloads),
    Command("profile", "run selected cases under Nsight Compute; store tensor-pipe use", profile_arguments, profile),
    Command("env", "GPU, NVML, versions, and which providers can run here", env_arguments, env),
    Command("submit", "run a config on a Slurm cluster through submitit", submit_arguments, submit),
    Command("merge", "merge a --gpus / submit run folder again from its shard folders", options.run_dir, merge),
)
