"""The commands that run or inspect a sweep: run, list, workloads, profile, env, submit, merge (docs/DESIGN.md
§7). The commands that present results are the report step's (bench.cli.reporting).

Each handler imports what it needs when it runs: the CLI chooses the Triton interpreter before any kernel
module is imported, and `--help` must not pay for torch.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from bench.cli import options
from bench.cli.options import Command
from bench.errors import EXIT_BAD_INPUT, EXIT_CONTEXT_LOST, EXIT_FAILED, EXIT_INTERRUPTED, UsageError
from support.inputs import integer, number


def _load(path):
    from bench.config.models import load_config

    return load_config(path)


# ------------------------------------------------------------------------------------------------ run


ISOLATION = ("process", "none")  # `run --isolation`: where the sweep runs (bench.shard.worker)


def run_arguments(parser: argparse.ArgumentParser) -> None:
    options.config(parser)
    parser.add_argument("--out", help="run folder (default: <output_dir>/<config>-<UTC time>)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a run folder, skipping recorded cases")
    parser.add_argument("--force", action="store_true", help="with --resume: continue a run made from another config")
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="with --resume: run the cases recorded failed again (a kernel fixed since, a hang, a lost GPU); their "
        "records move to results.json meta.retried",
    )
    options.selection(parser)
    options.device(parser)
    parser.add_argument("--gpus", help="shard over GPUs: 'all' or a list like 0,1")
    parser.add_argument(
        "--isolation",
        choices=ISOLATION,
        help="process: the sweep runs in a worker process, started afresh after a CUDA fault (the default on a "
        "GPU); none: in this process, where a CUDA fault ends the run (the default on CPU)",
    )
    parser.add_argument(
        "--case-timeout",
        type=number,
        metavar="S",
        help="a case still running S seconds after it started is hung: its worker process is killed, the case "
        "recorded failed, a fresh worker goes on (default: the config's timing.case_timeout_s, 600; needs "
        "--isolation process)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    parser.add_argument("--case-list", help=argparse.SUPPRESS)  # internal: a shard's case ids, one per line
    parser.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)  # internal: the merge renders
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # internal: bench.shard.worker
    # internal: the run folder's lock, held by the worker's parent and passed down (bench.sweep.runlock.inherited_lock)
    parser.add_argument("--lock-fd", type=integer, help=argparse.SUPPRESS)
    # internal: the pipe a worker reports its cases' phases on, and a hung case it records first (bench.case.watchdog)
    parser.add_argument("--status-fd", type=integer, help=argparse.SUPPRESS)
    parser.add_argument("--hung-case", action="append", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    from bench.case.device import check_device, check_device_option, resolve_device
    from bench.config.models import default_run_dir
    from bench.config.resources import check_run_fits
    from bench.config.selection import restrict_to_list, select_cases
    from bench.sweep.rundir import check_new_run_dir, check_resume, folder_option
    from bench.sweep.runlock import inherited_lock, run_folder_lock

    for option, value in (("--out", args.out), ("--resume", args.resume)):
        if value is not None:
            folder_option(value, option)  # `--out ''` is not the current folder
    cfg = _load(args.config)
    cases = select_cases(cfg, args.only, args.providers)
    if args.case_list:
        cases = restrict_to_list(cfg, cases, args.case_list)
    if args.resume and args.out:
        raise UsageError(f"--out {args.out}: not with --resume, which continues {args.resume} in place")
    if args.force and not args.resume:
        raise UsageError("--force: only with --resume (it allows resuming a run of another config)")
    if args.retry_failed and not args.resume:
        raise UsageError("--retry-failed: only with --resume RUN_DIR (it runs that run's failed cases again)")
    if args.retry_failed and args.gpus is not None:
        raise UsageError("--retry-failed: not with --gpus (a sharded run's failed cases: resume each shard's folder)")
    for flag, value in (("--lock-fd", args.lock_fd), ("--status-fd", args.status_fd), ("--hung-case", args.hung_case)):
        if value is not None and not args.worker:
            raise UsageError(f"{flag}: internal to a worker process (bench.shard.worker); allowed: no {flag}")
    timeout = _case_timeout(args, cfg)
    if args.worker:
        from bench.shard.worker import die_with_parent

        die_with_parent()
    if args.gpus is not None:
        if args.isolation is not None:
            raise UsageError("--isolation: not with --gpus, whose workers are always restarted after a CUDA fault")
        from bench.shard import run_sharded

        return run_sharded(cfg, cases, args, legs=_legs(cfg, cases), case_timeout_s=timeout)
    check_device_option(cfg.model.device, args.device)
    check_device(cfg.model.device, args.device)  # without a CUDA context: a worker may be the one to take the GPU
    if args.resume:
        run_dir, option = Path(args.resume), "--resume"
        check_resume(cfg, run_dir, args.force)
    else:
        run_dir = Path(args.out) if args.out is not None else default_run_dir(cfg)
        option = "--out" if args.out is not None else f"{cfg.path}: output_dir:"
        check_new_run_dir(run_dir, option)
    isolation = None if args.worker else _isolation(args, cfg, cases)
    if isolation == "process":
        legs = _legs(cfg, cases)  # each environment checked and probed, before the lock makes anything
        # This process holds the folder's lock until its last worker has ended, and passes it down to each
        # worker (bench.sweep.runlock): a second run of the folder is refused, the workers are not, and no other
        # writer can slip in between a faulted worker and the fresh one. The worker checks the memory.
        with run_folder_lock(run_dir, option) as lock_fd:
            if not args.resume:
                check_new_run_dir(run_dir, option)  # a run that ended there while we checked
            else:
                _retry_failed(args, run_dir, cases)
                from bench.profiling.later import pending_ids
                from bench.sweep.environments import pending
                from results.files import read_results

                records = read_results(run_dir).get("cases", [])
                # a case recorded without its profiled views still needs its environment's worker
                # (bench.profiling.later)
                done = {c["id"] for c in records} - pending_ids(cfg.model, cfg.model.device, records)
                legs = pending(legs, cases, done)
            return _sweep_in_worker(args, cfg, run_dir, lock_fd, legs, timeout)
    device = resolve_device(cfg.model.device, args.device)
    check_run_fits(cases, device, cfg.model.correctness.enabled)
    if args.lock_fd is not None:
        lock = inherited_lock(run_dir, args.lock_fd, option)
    else:
        lock = run_folder_lock(run_dir, option)  # one writer per run folder (bench.sweep.runlock)
    with lock:
        if not args.resume:
            check_new_run_dir(run_dir, option)  # a run that ended there while we checked
        elif not args.worker:  # a worker's parent did it
            _retry_failed(args, run_dir, cases)
        return _sweep(args, cfg, cases, device, run_dir)


def _retry_failed(args: argparse.Namespace, run_dir: Path, cases) -> None:
    """`--retry-failed`, once every check passed and holding the folder's lock the sweep then runs under: the
    failed cases among those selected (`cases`) run again."""
    if args.retry_failed:
        from bench.sweep.rundir import retry_failed

        ids = retry_failed(run_dir, {c.id for c in cases})
        print(f"--retry-failed: {len(ids)} failed case(s) of {run_dir} to run again", flush=True)


def _case_timeout(args: argparse.Namespace, cfg) -> float:
    """The watchdog's deadline per case: `--case-timeout` (refused in one process), else the config's."""
    from bench.config.models import MAX_CASE_TIMEOUT_S

    if args.case_timeout is None:
        return cfg.model.timing.case_timeout_s
    if not 0 < args.case_timeout <= MAX_CASE_TIMEOUT_S:
        raise UsageError(
            f"--case-timeout {args.case_timeout:g}: allowed: seconds > 0 and at most {MAX_CASE_TIMEOUT_S:g}"
        )
    if args.isolation == "none":
        raise UsageError(
            "--case-timeout: needs process isolation (a hung case is ended by killing the worker process it "
            "runs in); allowed: --isolation process, or no --case-timeout"
        )
    return args.case_timeout


def _isolation(args: argparse.Namespace, cfg, cases) -> str:
    """Where the sweep runs: `--isolation`, else a worker process on a GPU, or wherever the run asks for one
    (`--case-timeout`, a provider's own environment: bench.sweep.environments), else this process."""
    from bench.sweep.environments import refuse_in_process, split

    if args.isolation == "none":
        refuse_in_process(cases, "--isolation none")
        return "none"
    wants_worker = args.case_timeout is not None or any(env for env, _ in split(cases))
    return args.isolation or ("process" if cfg.model.device == "cuda" or wants_worker else "none")


def _legs(cfg, cases):
    from bench.sweep.environments import legs

    return legs(cfg, cases)


def _sweep(args: argparse.Namespace, cfg, cases, device, run_dir: Path) -> int:
    """The sweep in this process and its report; Ctrl-C/SIGTERM end it with the finished cases and the
    report written. As a worker (`--worker`) it leaves the report and the closing lines to its parent."""
    from bench.case.watchdog import PhaseReporter, parse_hung
    from bench.sweep.environments import shared
    from bench.sweep.report import render
    from bench.sweep.runner import Runner
    from bench.sweep.signals import interrupts

    try:
        hung = [parse_hung(h) for h in args.hung_case or ()]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    runner, counts, drawn, lost = None, None, True, None
    with interrupts() as sig:
        try:
            print(f"gdpa-bench: {len(cases)} cases from {cfg.path} on {device} -> {run_dir}", flush=True)
            runner = Runner(
                cfg,
                run_dir,
                device,
                resume=bool(args.resume),
                progress=not args.no_progress,
                phase=PhaseReporter(args.status_fd),
                environment=shared(cases),
            )
            counts = runner.run(cases, hung=hung)
            lost = runner.context_lost
            if not args.no_report:
                drawn = render(run_dir)
        except KeyboardInterrupt:  # before the sweep started, or while the report was drawn
            pass
        if args.worker and lost is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(EXIT_CONTEXT_LOST)  # no teardown in a process whose CUDA context is broken
        if args.worker:
            return 0 if sig.signum is None else sig.exit_code
        records = None if runner is None else runner.writer.data["cases"]
        summary = _summary(records, sum((counts or {}).values()) if args.resume else None)
        if lost is not None:
            return _closing_lines(args, run_dir, summary, f"stopped by a CUDA fault ({lost})", EXIT_CONTEXT_LOST)
        if sig.signum is not None:
            return _closing_lines(args, run_dir, summary, f"interrupted ({sig.name})", sig.exit_code)
        return _closing_lines(args, run_dir, summary, drawn=drawn)


def _sweep_in_worker(args: argparse.Namespace, cfg, run_dir: Path, lock_fd: int, legs, timeout: float) -> int:
    """The sweep in worker processes, one per environment (`legs`), each started afresh after a CUDA fault
    or a hang (bench.shard.worker), then the report and the closing lines over every case of the run
    folder. `lock_fd`: the folder's lock, held here and passed to each worker."""
    from bench.shard.merge import rc_text
    from bench.shard.worker import recorded, run_in_worker
    from bench.sweep.report import render
    from bench.sweep.signals import interrupts
    from results.files import ResultsError, read_results

    before, drawn = recorded(run_dir), True
    with interrupts() as sig:
        try:
            rc = run_in_worker(cfg, args, run_dir, lock_fd, legs, timeout)
        except KeyboardInterrupt:
            rc = None
        if rc == EXIT_BAD_INPUT:
            return rc  # the worker refused its input (e.g. no case fits in the GPU's memory); it said why
        try:
            cases = read_results(run_dir)["cases"]
        except (ResultsError, OSError):
            return sig.exit_code if rc is None else rc  # the worker stopped before it wrote anything; it said why
        try:
            if not args.no_report:
                drawn = render(run_dir)
        except KeyboardInterrupt:  # while the report was drawn
            pass
    summary = _summary(cases, len(cases) - before if args.resume else None)
    if sig.signum is not None:
        return _closing_lines(args, run_dir, summary, f"interrupted ({sig.name})", sig.exit_code)
    if rc == EXIT_CONTEXT_LOST:  # and not started again: it recorded nothing new
        return _closing_lines(args, run_dir, summary, "stopped by a CUDA fault (the worker's last lines)", rc)
    if rc in (EXIT_INTERRUPTED, 128 + signal.SIGTERM):  # a stop signal sent to the worker alone (Slurm, an operator)
        return _closing_lines(args, run_dir, summary, f"the worker process was interrupted ({rc_text(rc)})", rc)
    if rc:
        return _closing_lines(args, run_dir, summary, f"the worker process ended ({rc_text(rc)})", EXIT_FAILED)
    return _closing_lines(args, run_dir, summary, drawn=drawn)


def _summary(records: list[dict] | None, run_now: int | None) -> str:
    """`12 ok, 3 skipped`: every case results.json holds (a resumed run: with how many this invocation ran)."""
    if records is None:
        return "nothing to do"
    totals: dict[str, int] = {}
    for c in records:
        totals[str(c.get("status"))] = totals.get(str(c.get("status")), 0) + 1
    text = ", ".join(f"{v} {k}" for k, v in sorted(totals.items())) or "nothing to do"
    if run_now is not None:
        text += f" ({run_now} run now, the rest recorded before)"
    return text


def _closing_lines(
    args: argparse.Namespace,
    run_dir: Path,
    summary: str,
    stopped: str | None = None,
    code: int = 0,
    drawn: bool = True,
) -> int:
    """`done: ...` (exit 1 when the report was not drawn), or why the run stopped and the command that
    continues it; returns `code`."""
    from bench.sweep.rundir import resume_command

    results = run_dir / "results.json"
    if stopped is None:
        print(f"done: {summary}. results: {results}", flush=True)
        if not drawn:
            print(f"error: the report was not drawn (above); the results are kept in {run_dir}", file=sys.stderr)
            return EXIT_FAILED
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
    from bench.config.selection import select_cases
    from bench.shard import case_cost

    cfg = _load(args.config)
    cases = select_cases(cfg, args.only, args.providers)
    costs = [case_cost(c, cfg.model) for c in cases]
    width = max(len(c.id) for c in cases)
    for c, s in zip(cases, costs, strict=True):
        print(f"{c.id:{width}s}  ~{s:.1f} s")
    where = "one GPU" if cfg.model.device == "cuda" else "the CPU"
    total = sum(costs)
    print(
        f"{len(cases)} cases; estimated wall time ~{_duration(total)} on {where} (the sharding cost model: "
        "timing budgets, energy loop, FLOPs at a nominal rate; compile and autotune not included)"
    )
    longest = max(range(len(cases)), key=costs.__getitem__)
    if total > LONG_RUN_S or costs[longest] > LONG_CASE_S:
        print(
            f"warning: a long run: ~{_duration(total)} in all, the longest case {cases[longest].id} "
            f"~{_duration(costs[longest])} (over {_duration(LONG_RUN_S)} in all or {_duration(LONG_CASE_S)} "
            "per case); narrow it with --only/--providers, or lower the timing budgets",
            file=sys.stderr,
        )
    return 0


LONG_RUN_S = 24 * 3600.0  # `list` warns above these estimates
LONG_CASE_S = 3600.0


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
    from bench.cli.workload_report import default_out, describe
    from bench.sweep.rundir import check_writable_folder, folder_option

    out = None if args.out is None else folder_option(args.out, "--out")
    cfg = _load(args.config)
    out = out or default_out(cfg)
    check_writable_folder(out, f"--out {out}" if args.out is not None else f"{cfg.path}: output_dir: {out}")
    return describe(cfg, out)


# ---------------------------------------------------------------------------------------- profile, env


def profile_arguments(parser: argparse.ArgumentParser) -> None:
    options.config(parser)
    options.selection(parser, only_required=True)
    parser.add_argument("--run", metavar="RUN_DIR", help="store the results in this run's results.json")
    parser.add_argument("--keep", action="store_true", help="keep the .ncu-rep (under RUN_DIR/ncu/ with --run)")
    options.bands(parser)
    parser.add_argument(
        "--trace",
        action="store_true",
        help="keep each case's Kineto trace (RUN_DIR/traces/*.json, for Perfetto) from a kernel breakdown of it: "
        "with --run the recorded cases are profiled again (their breakdown replaced), else a new run of them",
    )
    options.device(parser)


def profile(args: argparse.Namespace) -> int:
    from bench.cli.profile import profile

    return profile(_load(args.config), args)


def env_arguments(parser: argparse.ArgumentParser) -> None:
    options.device(parser)
    parser.add_argument("--full", action="store_true", help="also print torch.utils.collect_env's report")


def env(args: argparse.Namespace) -> int:
    import torch

    from bench.config.providers import load_provider_modules
    from bench.sweep.env import print_env

    load_provider_modules()  # a module that does not import: one line, before any of the table
    dev = torch.device("cuda", args.device or 0) if torch.cuda.is_available() else torch.device("cpu")
    print_env(dev, full=args.full)
    return 0


# -------------------------------------------------------------------------------------- submit, merge


def submit_arguments(parser: argparse.ArgumentParser) -> None:
    options.config(parser)
    parser.add_argument("--nodes", type=integer, default=1)
    parser.add_argument("--gpus-per-node", type=integer, default=8)
    parser.add_argument("--partition")
    parser.add_argument("--timeout-min", type=integer, default=240)
    parser.add_argument("--out")
    options.selection(parser)
    parser.add_argument("--local", action="store_true", help="submitit's local executor (testing)")


def submit(args: argparse.Namespace) -> int:
    from bench.shard import submit

    return submit(_load(args.config), args)


def merge(args: argparse.Namespace) -> int:
    from bench.shard import merge_planned
    from bench.shard.plan import read_plan
    from bench.sweep.report import render
    from bench.sweep.rundir import folder_option
    from bench.sweep.runlock import run_folder_lock

    run_dir = folder_option(args.run_dir, "merge")
    if not run_dir.is_dir():
        raise UsageError(f"merge {run_dir}: no such folder")
    read_plan(run_dir, required=True)  # a one-line error for a missing or malformed plan, before the lock
    with run_folder_lock(run_dir, "merge"):
        data = merge_planned(run_dir, strict=True)
        drawn = render(run_dir)
    missing = data["meta"].get("missing_cases") or []
    print(
        f"merged {len(data['cases'])} cases from {len(data['meta']['shards'])} shard(s)"
        + (f"; {len(missing)} missing" if missing else "")
        + f": {run_dir / 'results.json'}"
    )
    return EXIT_FAILED if missing or not drawn else 0


COMMANDS = (
    Command("run", "run a sweep: correctness gate, timing, power, results, report", run_arguments, run),
    Command("list", "the cases a config runs and an estimated wall time (runs nothing)", list_arguments, list_cases),
    Command("workloads", "workload statistics and length histograms (no GPU needed)", workloads_arguments, workloads),
    Command(
        "profile",
        "Nsight Compute counters per kernel, or the length bands, of selected cases",
        profile_arguments,
        profile,
    ),
    Command("env", "GPU, NVML, versions, and which providers can run here", env_arguments, env),
    Command("submit", "run a config on a Slurm cluster through submitit", submit_arguments, submit),
    Command("merge", "merge a --gpus / submit run folder again from its shard folders", options.run_dir, merge),
)
