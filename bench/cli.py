"""`gdpa-bench` / `python -m bench`: run, list, report, compare, workloads, profile, env, submit, merge
(docs/DESIGN.md §7).

Bad input (config, paths, options) prints one line naming the file, the field and what is allowed, and
exits 2. A failing kernel never stops a sweep: it is recorded in results.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, ConfigError, UsageError
from results.files import ResultsWriteError


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kw):
        # no abbreviations: `--ou` would be `--out`, and the printed --resume command must find every --out
        super().__init__(*args, allow_abbrev=False, **kw)

    def error(self, message):  # argparse's own errors: one line (no usage block), exit 2
        raise UsageError(f"{message} (see {self.prog} --help)")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("gdpa-bench")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _load(path):
    from bench.config import load_config

    return load_config(path)


def cmd_run(a) -> int:
    from bench.config import default_run_dir
    from bench.device import resolve_device
    from bench.rundir import check_new_run_dir, check_resume
    from bench.selection import restrict_to_list, select_cases

    cfg = _load(a.config)
    cases = select_cases(cfg, a.only, a.providers)
    if a.case_list:
        cases = restrict_to_list(cfg, cases, a.case_list)
    if a.resume and a.out:
        raise UsageError(f"--out {a.out}: not with --resume, which continues {a.resume} in place")
    if a.force and not a.resume:
        raise UsageError("--force: only with --resume (it allows resuming a run of another config)")
    if a.gpus is not None:
        from bench.shard import run_sharded

        return run_sharded(cfg, cases, a)
    device = resolve_device(cfg.model.device, a.device)
    if a.resume:
        run_dir = Path(a.resume)
        check_resume(cfg, run_dir, a.force)
    else:
        run_dir = Path(a.out) if a.out else default_run_dir(cfg)
        check_new_run_dir(run_dir, "--out" if a.out else f"{cfg.path}: output_dir:")
    return _sweep(a, cfg, cases, device, run_dir)


def _sweep(a, cfg, cases, device, run_dir: Path) -> int:
    """The sweep and its report; Ctrl-C/SIGTERM end it with the finished cases and the report written."""
    from bench.reporting import render
    from bench.rundir import resume_command
    from bench.runner import Runner
    from bench.signals import interrupts

    with interrupts() as sig:
        try:
            print(f"gdpa-bench: {len(cases)} cases from {cfg.path} on {device} -> {run_dir}", flush=True)
            runner = Runner(cfg, run_dir, device, resume=bool(a.resume), progress=not a.no_progress)
            counts = runner.run(cases)
            if not a.no_report:
                try:
                    render(run_dir)
                except OSError as exc:
                    raise ResultsWriteError.of(run_dir / "report.md", exc) from None
        except KeyboardInterrupt:  # before the sweep started, or while the report was drawn
            counts = None
        summary = ", ".join(f"{v} {k}" for k, v in sorted((counts or {}).items())) or "nothing to do"
        if sig.signum is None:
            print(f"done: {summary}. results: {run_dir / 'results.json'}", flush=True)
            return 0
        print(f"interrupted ({sig.name}): {summary}. results: {run_dir / 'results.json'}", flush=True)
        if (run_dir / "results.json").exists():
            print(f"to continue: {resume_command(a.argv, run_dir)}", flush=True)
        return sig.exit_code


def cmd_list(a) -> int:
    from bench.selection import select_cases
    from bench.shard import case_cost

    cfg = _load(a.config)
    cases = select_cases(cfg, a.only, a.providers)
    costs = [case_cost(c, cfg.model) for c in cases]
    width = max(len(c.id) for c in cases)
    for c, s in zip(cases, costs, strict=True):
        print(f"{c.id:{width}s}  ~{s:.1f} s")
    total = sum(costs)
    where = "one GPU" if cfg.model.device == "cuda" else "the CPU"
    print(
        f"{len(cases)} cases; estimated wall time ~{_duration(total)} on {where} (the sharding cost model: "
        "timing budgets, energy loop, FLOPs at a nominal rate; compile and autotune not included)"
    )
    return 0


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def cmd_report(a) -> int:
    run_dir = Path(a.run_dir)
    if not (run_dir / "results.json").is_file():
        raise UsageError(f"{run_dir}: no results.json in this folder")
    from reports.render import render_report
    from results.files import ResultsError, read_results

    try:
        if a.baseline is not None:
            cases = read_results(run_dir)["cases"]
            labels = list(dict.fromkeys(str(c["provider"]) for c in cases if c.get("provider") is not None))
            if a.baseline not in labels:
                raise UsageError(
                    f"--baseline {a.baseline}: not a provider of {run_dir / 'results.json'}; allowed: "
                    + (", ".join(labels) or "none (no case records a provider)")
                )
        paths = render_report(run_dir, baseline=a.baseline)
    except ResultsError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise ResultsWriteError.of(run_dir / "report.md", exc) from None
    for kind, p in paths.items():
        print(f"{kind}: {p}")
    return 0


def _results(run: str) -> dict:
    from results.files import ResultsError, read_results

    try:
        return read_results(run)
    except ResultsError as exc:
        raise UsageError(str(exc)) from None


def cmd_table(a) -> int:
    from reports.table import tflops_table

    data = _results(a.run_dir)
    print(tflops_table(data, a.providers.split(",") if a.providers else None, a.modes.split(",")))
    return 0


def cmd_power_checks(a) -> int:
    from reports.power_claims import claims
    from results.power import power_counts

    print("\n".join(claims(power_counts(_results(a.run_dir)["cases"]))))
    return 0


def cmd_fields(a) -> int:
    from results.metrics import field_reference

    print(field_reference())
    return 0


def cmd_workloads(a) -> int:
    from bench.workload_report import describe

    cfg = _load(a.config)
    return describe(cfg, Path(a.out) if a.out else None)


def cmd_profile(a) -> int:
    from bench.profile import profile

    return profile(_load(a.config), a)


def cmd_env(a) -> int:
    import torch

    from bench.env import print_env
    from bench.provider_specs import load_provider_modules

    load_provider_modules()  # a module that does not import: one line, before any of the table
    dev = torch.device("cuda", a.device or 0) if torch.cuda.is_available() else torch.device("cpu")
    print_env(dev, full=a.full)
    return 0


def cmd_submit(a) -> int:
    from bench.shard import submit

    return submit(_load(a.config), a)


def cmd_merge(a) -> int:
    from bench.reporting import render
    from bench.shard import merge_planned

    run_dir = Path(a.run_dir)
    data = merge_planned(run_dir)
    render(run_dir)
    missing = data["meta"].get("missing_cases") or []
    print(
        f"merged {len(data['cases'])} cases from {len(data['meta']['shards'])} shard(s)"
        + (f"; {len(missing)} missing" if missing else "")
        + f": {run_dir / 'results.json'}"
    )
    return EXIT_FAILED if missing else 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gdpa-bench", description="GDPA kernel benchmark harness (also: python -m bench)")
    p.add_argument("--version", action="version", version=f"gdpa-bench {version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a sweep: correctness gate, timing, power, results, report")
    r.add_argument("config")
    r.add_argument("--out", help="run folder (default: <output_dir>/<config>-<UTC time>)")
    r.add_argument("--resume", metavar="RUN_DIR", help="continue a run folder, skipping recorded cases")
    r.add_argument("--force", action="store_true", help="with --resume: continue a run made from another config")
    r.add_argument("--only", metavar="REGEX", help="only case ids matching this regular expression")
    r.add_argument("--providers", help="comma-separated provider labels (subset of the config's)")
    r.add_argument("--device", type=int, help="CUDA device index")
    r.add_argument("--gpus", help="shard over GPUs: 'all' or a list like 0,1")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    r.add_argument("--case-list", help=argparse.SUPPRESS)  # internal: a shard's case ids, one per line
    r.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)  # internal: shards; the merge renders
    r.set_defaults(fn=cmd_run)

    ls = sub.add_parser("list", help="the cases a config runs and an estimated wall time (runs nothing)")
    ls.add_argument("config")
    ls.add_argument("--only", metavar="REGEX")
    ls.add_argument("--providers")
    ls.set_defaults(fn=cmd_list)

    rp = sub.add_parser("report", help="re-render report.md/.html and plots from results.json")
    rp.add_argument("run_dir")
    rp.add_argument("--baseline", help="provider to compute speedups against")
    rp.set_defaults(fn=cmd_report)

    c = sub.add_parser("compare", help="CI perf-regression gate: exit 1 on regression", add_help=False)
    c.set_defaults(fn=None)

    t = sub.add_parser("table", help="a Markdown TFLOP/s table (shapes x provider/mode) of a run, for READMEs")
    t.add_argument("run_dir")
    t.add_argument("--providers", help="comma-separated provider labels, in column order")
    t.add_argument("--modes", default="fwd,bwd", help="comma-separated modes (default fwd,bwd)")
    t.set_defaults(fn=cmd_table)

    f = sub.add_parser("fields", help="what every field of results.json and of the results frame means (Markdown)")
    f.set_defaults(fn=cmd_fields)

    pc = sub.add_parser("power-checks", help="a run's power counts: at the cap, above it, estimators apart")
    pc.add_argument("run_dir")
    pc.set_defaults(fn=cmd_power_checks)

    w = sub.add_parser("workloads", help="workload statistics and length histograms (no GPU needed)")
    w.add_argument("config")
    w.add_argument("--out", help="folder for the histograms (default runs/workloads-<config>)")
    w.set_defaults(fn=cmd_workloads)

    pr = sub.add_parser("profile", help="run selected cases under Nsight Compute; store tensor-pipe use")
    pr.add_argument("config")
    pr.add_argument("--only", metavar="REGEX", required=True)
    pr.add_argument("--run", metavar="RUN_DIR", help="write tc_util_ncu into this run's results.json")
    pr.add_argument("--keep", action="store_true", help="keep each case's .ncu-rep (under RUN_DIR/ncu/ with --run)")
    pr.add_argument("--providers")
    pr.add_argument("--device", type=int)
    pr.add_argument("--case", help=argparse.SUPPRESS)  # internal: the child ncu profiles
    pr.set_defaults(fn=cmd_profile)

    e = sub.add_parser("env", help="GPU, NVML, versions, and which providers can run here")
    e.add_argument("--device", type=int)
    e.add_argument("--full", action="store_true", help="also print torch.utils.collect_env's report")
    e.set_defaults(fn=cmd_env)

    s = sub.add_parser("submit", help="run a config on a Slurm cluster through submitit")
    s.add_argument("config")
    s.add_argument("--nodes", type=int, default=1)
    s.add_argument("--gpus-per-node", type=int, default=8)
    s.add_argument("--partition")
    s.add_argument("--timeout-min", type=int, default=240)
    s.add_argument("--out")
    s.add_argument("--only")
    s.add_argument("--providers")
    s.add_argument("--local", action="store_true", help="submitit's local executor (testing)")
    s.set_defaults(fn=cmd_submit)

    m = sub.add_parser("merge", help="merge a --gpus / submit run folder again from its shard folders")
    m.add_argument("run_dir")
    m.set_defaults(fn=cmd_merge)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from bench.device import use_interpreter_without_gpu

    use_interpreter_without_gpu()
    if argv and argv[0] == "compare":
        from reports.compare import compare_main

        return compare_main(argv[1:])
    try:
        a = build_parser().parse_args(argv)
        a.argv = argv
        return a.fn(a)
    except (ConfigError, UsageError, ResultsWriteError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
