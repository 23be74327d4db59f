"""`python -m bench`: run, report, compare, workloads, profile, env (DESIGN §7).

Bad input (config, paths, options) prints one line naming the file, the field and what is allowed, and
exits 2. A failing kernel never stops a sweep: it is recorded in results.json.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

EXIT_BAD_INPUT = 2


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own errors: one line, exit 2
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def _device(cfg_device: str, index: int | None):
    import torch
    if cfg_device == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UsageError("the config asks for device: cuda but no CUDA GPU is visible "
                         "(use configs/smoke.yaml on a CPU machine)")
    idx = torch.cuda.current_device() if index is None else index
    if idx >= torch.cuda.device_count():
        raise UsageError(f"--device {idx}: only {torch.cuda.device_count()} GPU(s) visible")
    # libraries that launch on "the current device" (Triton, some cuDNN/cuBLAS paths) must see this one
    torch.cuda.set_device(idx)
    return torch.device("cuda", idx)


def _load(path):
    from bench.config import load_config
    return load_config(path)


def select_cases(cfg, only: str | None, providers_csv: str | None) -> list:
    """The config's cases filtered by --only/--providers, with one-line errors for bad values."""
    from bench.runner import select
    from kernels.registry import provider_names
    providers = [p.strip() for p in providers_csv.split(",")] if providers_csv else None
    unknown = [p for p in providers or [] if p not in provider_names()]
    if unknown:
        raise UsageError(f"--providers: unknown provider {unknown[0]!r}; allowed: {', '.join(provider_names())}")
    if only:
        import re
        try:
            re.compile(only)
        except re.error as exc:
            raise UsageError(f"--only: not a valid regular expression: {exc}")
    cases = select(cfg.cases, only, providers)
    if not cases:
        raise UsageError(f"{cfg.path}: no case matches --only/--providers")
    return cases


def cmd_run(a) -> int:
    from bench.runner import Runner, default_run_dir
    cfg = _load(a.config)
    cases = select_cases(cfg, a.only, a.providers)
    if a.case_list:
        try:
            wanted = set(Path(a.case_list).read_text().split())
        except OSError as exc:
            raise UsageError(f"--case-list {a.case_list}: {exc.strerror}")
        unknown = wanted - {c.id for c in cfg.cases}
        if unknown:
            raise UsageError(f"--case-list {a.case_list}: {len(unknown)} id(s) not in {cfg.path}, "
                             f"e.g. {sorted(unknown)[0]!r}")
        cases = [c for c in cases if c.id in wanted]
        if not cases:
            raise UsageError(f"--case-list {a.case_list}: none of its cases matches --only/--providers")
    if a.gpus is not None:
        from bench.multigpu import run_sharded
        return run_sharded(cfg, cases, a)
    device = _device(cfg.model.device, a.device)
    run_dir = Path(a.resume or a.out or default_run_dir(cfg))
    if a.resume and not (run_dir / "results.json").exists():
        raise UsageError(f"--resume {run_dir}: no results.json there")
    print(f"gdpa-bench: {len(cases)} cases from {cfg.path} on {device} -> {run_dir}", flush=True)
    runner = Runner(cfg, run_dir, device, resume=bool(a.resume), progress=not a.no_progress)
    counts = runner.run(cases)
    if not a.no_report:
        _render(run_dir)
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "nothing to do"
    print(f"done: {summary}. results: {run_dir / 'results.json'}", flush=True)
    return 130 if runner.interrupted else 0


def _render(run_dir: Path) -> None:
    try:
        from reports.render import render_report
    except ImportError as exc:
        print(f"report not rendered: {exc}", file=sys.stderr)
        return
    try:
        paths = render_report(run_dir)
        print(f"report: {paths.get('html') or paths}", flush=True)
    except Exception as exc:  # a report bug must not lose a finished sweep
        print(f"report rendering failed: {type(exc).__name__}: {exc}", file=sys.stderr)


def cmd_report(a) -> int:
    run_dir = Path(a.run_dir)
    if not (run_dir / "results.json").is_file():
        raise UsageError(f"{run_dir}: no results.json in this folder")
    from reports.metrics import ResultsError
    from reports.render import render_report
    try:
        paths = render_report(run_dir, baseline=a.baseline)
    except ResultsError as exc:
        raise UsageError(str(exc))
    for kind, p in paths.items():
        print(f"{kind}: {p}")
    return 0


def cmd_compare(a, rest: list[str]) -> int:
    from reports.compare import compare_main
    return compare_main(rest)


def cmd_workloads(a) -> int:
    from bench.workload_report import describe
    cfg = _load(a.config)
    return describe(cfg, Path(a.out) if a.out else None)


def cmd_profile(a) -> int:
    from bench.profile import profile
    cfg = _load(a.config)
    return profile(cfg, a)


def cmd_env(a) -> int:
    import torch
    from bench.env import print_env
    dev = torch.device("cuda", a.device or 0) if torch.cuda.is_available() else torch.device("cpu")
    print_env(dev)
    return 0


def cmd_submit(a) -> int:
    from bench.multigpu import submit
    cfg = _load(a.config)
    return submit(cfg, a)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m bench", description="GDPA kernel benchmark harness")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run a sweep: correctness gate, timing, power, results, report")
    r.add_argument("config")
    r.add_argument("--out", help="run folder (default: <output_dir>/<config>-<UTC time>)")
    r.add_argument("--resume", metavar="RUN_DIR", help="continue a run folder, skipping recorded cases")
    r.add_argument("--only", metavar="REGEX", help="only case ids matching this regular expression")
    r.add_argument("--providers", help="comma-separated provider names (subset of the config's)")
    r.add_argument("--device", type=int, help="CUDA device index")
    r.add_argument("--gpus", help="shard over GPUs: 'all' or a list like 0,1")
    r.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    r.add_argument("--case-list", help=argparse.SUPPRESS)  # internal: a shard's case ids, one per line
    r.add_argument("--no-report", action="store_true", help=argparse.SUPPRESS)  # internal: shards; the merge renders
    r.set_defaults(fn=cmd_run)

    rp = sub.add_parser("report", help="re-render report.md/.html and plots from results.json")
    rp.add_argument("run_dir")
    rp.add_argument("--baseline", help="provider to compute speedups against")
    rp.set_defaults(fn=cmd_report)

    c = sub.add_parser("compare", help="CI perf-regression gate: exit 1 on regression", add_help=False)
    c.set_defaults(fn=None)

    w = sub.add_parser("workloads", help="workload statistics and length histograms (no GPU needed)")
    w.add_argument("config")
    w.add_argument("--out", help="folder for the histograms (default runs/workloads-<config>)")
    w.set_defaults(fn=cmd_workloads)

    pr = sub.add_parser("profile", help="run selected cases under Nsight Compute; store tensor-pipe use")
    pr.add_argument("config")
    pr.add_argument("--only", metavar="REGEX", required=True)
    pr.add_argument("--run", metavar="RUN_DIR", help="write tc_util_ncu into this run's results.json")
    pr.add_argument("--providers")
    pr.add_argument("--device", type=int)
    pr.add_argument("--case", help=argparse.SUPPRESS)  # internal: the child ncu profiles
    pr.set_defaults(fn=cmd_profile)

    e = sub.add_parser("env", help="GPU, NVML, versions, and which providers can run here")
    e.add_argument("--device", type=int)
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
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    import torch
    if not torch.cuda.is_available():
        # Triton kernels can only run through the interpreter here; it must be chosen before any
        # kernel module is imported (triton.jit reads it at decoration time)
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if argv and argv[0] == "compare":
        from reports.compare import compare_main
        return compare_main(argv[1:])
    parser = build_parser()
    a = parser.parse_args(argv)
    from bench.config import ConfigError
    try:
        return a.fn(a)
    except (ConfigError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
