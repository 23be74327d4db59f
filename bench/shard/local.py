"""Sharding a run over one host's GPUs (`python -m bench run CONFIG --gpus all|0,1,...`, docs/DESIGN.md §10).

One `python -m bench run CONFIG --device i --case-list shards/gpu<i>.txt` worker process per GPU, each the
normal single-GPU runner with its own NVML monitor, GEMM calibration and correctness gate, so two cases
never share a GPU while timed. Output goes to `shards/gpu<i>.log` and, prefixed with
`[gpu<i> done/assigned]`, to stdout. CUDA_VISIBLE_DEVICES is left alone. `--resume RUN_DIR --gpus ...`
runs only the cases still missing, in new shard folders (`shards/resume<k>`). A worker that a CUDA fault
ends is started again on its shard folder with `--resume` (bench.shard.worker).

`device: cpu` configs shard over CPU worker processes instead ("all" = 2 workers, "0,1,2" = three
workers labelled 0, 1, 2): that exists so sharding, merging and kill recovery are testable without a GPU.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.config.cases import Case
from bench.config.models import LoadedConfig, default_run_dir
from bench.errors import EXIT_FAILED, UsageError
from bench.profiling.later import pending_ids
from bench.shard.merge import merge_planned, rc_text
from bench.shard.plan import PLAN_SCHEMA, parse_gpus, read_plan, shard_cases, write_plan
from bench.shard.worker import STOP_GRACE_S, WorkerProcess, worker_env
from bench.sweep import environments
from bench.sweep.environments import Leg, for_cases
from bench.sweep.report import render as render_report
from bench.sweep.rundir import check_new_run_dir, check_resume, resume_command
from bench.sweep.runlock import run_folder_lock
from bench.sweep.signals import interrupts
from results.files import read_results


class Worker(WorkerProcess):
    """A shard's worker: its output to its log file and, prefixed `[gpu<i> done/assigned]`, to stdout."""

    def __init__(
        self,
        label: int,
        cases: list[Case],
        shard_dir: Path,
        list_file: Path,
        log_file: Path,
        cmd: list[str],
        env: dict,
        tag: str,
        out_lock: threading.Lock,
        **watch,
    ):
        self.label, self.shard_dir, self.tag, self.lock = label, shard_dir, tag, out_lock
        self.ids = [c.id for c in cases]
        self._idset = set(self.ids)
        self.done = 0
        self.thread: threading.Thread | None = None
        list_file.write_text("".join(i + "\n" for i in self.ids))
        self.log = open(log_file, "w", buffering=1)
        super().__init__(cmd, shard_dir, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **watch)

    def spawn(self, hung: dict | None = None) -> subprocess.Popen:
        if self.thread is not None:
            self.thread.join(timeout=10)  # the last lines of the worker before it
        proc = super().spawn(hung)  # its own session: Ctrl-C reaches the parent only, which stops it
        self.log.write("$ " + " ".join(self.cmd) + "\n")
        self.thread = threading.Thread(target=self._pump, args=(proc,), name=f"{self.tag}-out", daemon=True)
        self.thread.start()
        return proc

    def _pump(self, proc: subprocess.Popen) -> None:
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.log.write(line + "\n")
            head = line.strip().split(": ", 1)[0]
            if head in self._idset:
                self.done += 1
            with self.lock:
                print(f"[{self.tag} {self.done}/{len(self.ids)}] {line}", flush=True)
        proc.stdout.close()

    def finish(self) -> int:
        rc = self.proc.wait()
        self.thread.join(timeout=10)
        self.log.write(f"# exit: {rc_text(rc)}\n")
        self.log.close()
        return rc


def launch(
    cfg: LoadedConfig,
    assignment: list[tuple[int, list[Case]]],
    shard_root: Path,
    tag_prefix: str = "",
    legs: list[Leg] | None = None,
    case_timeout_s: float | None = None,
) -> tuple[dict[int, int], int | None]:
    """One `python -m bench run` per (label, cases) — one after another per environment of its cases
    (`legs`), watched against `case_timeout_s` (bench.case.watchdog); returns {label: returncode} and, when the
    parent was interrupted, its exit status (128 + the signal; Ctrl-C / SIGTERM: the workers are stopped
    with SIGTERM, their finished cases kept), else None."""
    shard_root.mkdir(parents=True, exist_ok=True)
    device_type = cfg.model.device
    env = worker_env(len(assignment), device_type)
    lock = threading.Lock()
    workers: list[Worker] = []
    interrupted = False
    sig = None
    try:
        with interrupts() as sig:
            for label, cases in assignment:
                sd = shard_root / f"gpu{label}"
                cmd = [
                    sys.executable,
                    "-m",
                    "bench",
                    "run",
                    str(cfg.path),
                    "--out",
                    str(sd),
                    *(["--device", str(label)] if device_type == "cuda" else []),  # CPU workers are labels only
                    "--case-list",
                    str(shard_root / f"gpu{label}.txt"),
                    "--no-progress",
                    "--worker",
                    "--no-report",
                ]
                w = Worker(
                    label,
                    cases,
                    sd,
                    shard_root / f"gpu{label}.txt",
                    shard_root / f"gpu{label}.log",
                    cmd,
                    env,
                    f"{tag_prefix}gpu{label}",
                    lock,
                    legs=None if legs is None else for_cases(legs, cases),
                    case_timeout_s=case_timeout_s,
                )
                workers.append(w)
                with lock:
                    print(f"[{w.tag}] pid {w.proc.pid}: {len(cases)} cases -> {sd} (log {sd}.log)", flush=True)
            while True:
                for w in workers:
                    over = w.check_hung()
                    if over is not None:
                        with lock:
                            print(f"[{w.tag}] {over['id'] or 'the worker'}: {over['error']}", flush=True)
                    why = w.advance() if w.proc.poll() is not None else None
                    if why is not None:
                        what = {"fault": "after a CUDA fault", "hang": "after a hung case", "crash": "after a crash"}
                        what = what.get(why)
                        line = f"a fresh worker {what}" if what else f"the cases of {w.legs[w.leg].summary()}"
                        with lock:
                            print(f"[{w.tag}] pid {w.proc.pid}: {line}", flush=True)
                if all(w.proc.poll() is not None for w in workers):
                    break
                time.sleep(0.2)
    except KeyboardInterrupt:
        interrupted = True
        alive = [w for w in workers if w.proc.poll() is None]
        print(f"interrupted: stopping {len(alive)} worker(s); their finished cases are kept", flush=True)
        for w in alive:
            w.proc.send_signal(signal.SIGTERM)  # the runner treats SIGTERM like Ctrl-C
        deadline = time.monotonic() + STOP_GRACE_S
        for w in alive:
            try:
                w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
    return {w.label: w.finish() for w in workers}, (sig.exit_code if interrupted and sig else None)


def run_local(
    cfg: LoadedConfig,
    cases: list[Case],
    run_dir: Path,
    labels: list[int],
    *,
    resume: bool = False,
    render: bool = True,
    tag_prefix: str = "",
    argv: list[str] | None = None,
    legs: list[Leg] | None = None,
    case_timeout_s: float | None = None,
) -> int:
    """Shard `cases` over `labels` workers into run_dir, merge, optionally render; the exit code.
    `argv`: the command's arguments, for the `--resume` command an interrupted run prints; `legs`: the
    environments of the cases (bench.sweep.environments; None: checked here); `case_timeout_s`: the watchdog's
    deadline per case (None: the config's)."""
    legs = environments.legs(cfg, cases) if legs is None else legs
    case_timeout_s = cfg.model.timing.case_timeout_s if case_timeout_s is None else case_timeout_s
    run_dir = Path(run_dir).resolve()
    plan = read_plan(run_dir) if resume else None
    if resume and plan is None:
        plan = adopt_single_run(run_dir, cfg)
    if plan is None:
        plan = {"schema": PLAN_SCHEMA, "kind": "local", "config": str(cfg.path), "cases": [], "sources": []}
        shard_root = run_dir / "shards"
    else:
        k = sum(1 for p in (run_dir / "shards").glob("resume*") if p.is_dir()) + 1
        shard_root = run_dir / "shards" / f"resume{k}"
    known = set(plan.setdefault("cases", []))
    plan["cases"] += [c.id for c in cases if c.id not in known]  # config order: the merged order
    shards = shard_cases(cases, len(labels), cfg.model)
    assignment = [(lab, sc) for lab, sc in zip(labels, shards, strict=True) if sc]
    idle = [lab for lab, sc in zip(labels, shards, strict=True) if not sc]
    if idle:
        print(
            f"note: {len(idle)} worker(s) get no case (only {len(cases)} cases): " + ", ".join(f"gpu{i}" for i in idle),
            flush=True,
        )
    for lab, sc in assignment:
        plan["sources"].append(
            {
                "dir": os.path.relpath(shard_root / f"gpu{lab}", run_dir),
                "gpu_index": lab,
                "cases": [c.id for c in sc],
                "returncode": None,
            }
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    write_plan(run_dir, plan)
    what = "GPU" if cfg.model.device == "cuda" else "CPU worker"
    print(
        f"gdpa-bench: {len(cases)} cases from {cfg.path} on {len(assignment)} {what}(s) "
        f"[{', '.join(str(lab) for lab, _ in assignment)}] -> {run_dir}",
        flush=True,
    )
    rcs, stopped = launch(cfg, assignment, shard_root, tag_prefix, legs, case_timeout_s)
    new = plan["sources"][len(plan["sources"]) - len(assignment) :]
    for src, (lab, _) in zip(new, assignment, strict=True):
        src["returncode"] = rcs.get(lab)
    write_plan(run_dir, plan)
    data = merge_planned(run_dir, interrupted=stopped is not None)
    return conclude(run_dir, data, rcs, stopped, render, tag_prefix, argv=argv)


def conclude(
    run_dir: Path,
    data: dict,
    rcs: dict,
    stopped: int | None,
    render: bool,
    tag_prefix: str = "",
    unit: str = "gpu",
    argv: list[str] | None = None,
) -> int:
    """Print the outcome, render the report; the exit status (`stopped`: the interrupted parent's, then
    the command that continues the run is the last line, when `argv` is known)."""
    meta = data["meta"]
    counts: dict[str, int] = {}
    for c in data["cases"]:
        counts[c.get("status") or "?"] = counts.get(c.get("status") or "?", 0) + 1
    bad = {lab: rc for lab, rc in rcs.items() if rc != 0}
    missing = meta.get("missing_cases") or []
    for lab, rc in sorted(bad.items()):
        print(f"{tag_prefix}{unit}{lab}: worker {rc_text(rc)} (log: {log_hint(run_dir, lab, unit)})", flush=True)
    if missing:
        print(
            f"MISSING: {len(missing)} case(s) were assigned but never recorded "
            f"(in flight or not started when a worker stopped; `--resume {run_dir} --gpus ...` runs them):",
            flush=True,
        )
        for i in missing:
            print(f"  missing: {i}", flush=True)
    drawn = render_report(run_dir) if render else True
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "no case recorded"
    print(
        f"done: {summary} on {meta.get('gpu_count')} worker(s)"
        + (f", {len(missing)} missing" if missing else "")
        + f". results: {run_dir / 'results.json'}",
        flush=True,
    )
    if stopped is not None:
        if argv is not None:
            print(f"to continue: {resume_command(argv, run_dir)}", flush=True)
        return stopped
    return EXIT_FAILED if bad or missing or not drawn else 0


def log_hint(run_dir: Path, lab, unit: str) -> str:
    if unit == "node":
        return str(run_dir / "submitit")
    cands = sorted(run_dir.glob(f"shards/**/gpu{lab}.log"), key=lambda p: p.stat().st_mtime)
    return str(cands[-1]) if cands else str(run_dir / "shards")


def adopt_single_run(run_dir: Path, cfg: LoadedConfig) -> dict:
    """--resume --gpus on a run made without --gpus: its files become the plan's first shard."""
    base = run_dir / "shards" / "base"
    base.mkdir(parents=True, exist_ok=True)
    for name in ("results.json", "results.csv", "power.csv", "errors.log"):
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, base / name)
    data = read_results(base)
    plan = {
        "schema": PLAN_SCHEMA,
        "kind": "local",
        "config": str(cfg.path),
        "cases": [c["id"] for c in data.get("cases", [])],
        "sources": [
            {
                "dir": "shards/base",
                "gpu_index": None,
                "cases": [c["id"] for c in data.get("cases", [])],
                "returncode": 0,
            }
        ],
    }
    write_plan(run_dir, plan)
    return plan


def run_sharded(cfg: LoadedConfig, cases: list[Case], args, legs=None, case_timeout_s=None) -> int:
    """`python -m bench run CONFIG --gpus ...`: one worker per GPU, one merged run folder."""
    if getattr(args, "device", None) is not None:
        raise UsageError("--device and --gpus cannot be combined: --gpus picks the devices")
    labels = parse_gpus(args.gpus, cfg.model.device)
    argv = getattr(args, "argv", None) or sys.argv[1:]
    if args.resume:
        run_dir = Path(args.resume)
        if not run_dir.is_dir():
            what = "is a file; allowed: a run folder" if run_dir.exists() else "no such folder"
            raise UsageError(f"--resume {run_dir}: {what}")
        if read_plan(run_dir) is None:
            check_resume(cfg, run_dir, getattr(args, "force", False))  # one line before the lock makes anything
        with run_folder_lock(run_dir, "--resume"):  # one writer per run folder (bench.sweep.runlock)
            return _resume_sharded(cfg, cases, args, run_dir, labels, argv, legs, case_timeout_s)
    run_dir = Path(args.out) if args.out is not None else default_run_dir(cfg)
    option = "--out" if args.out is not None else f"{cfg.path}: output_dir:"
    check_new_run_dir(run_dir, option)
    with run_folder_lock(run_dir, option):
        check_new_run_dir(run_dir, option)  # a run that ended there while we checked
        return run_local(cfg, cases, run_dir, labels, argv=argv, legs=legs, case_timeout_s=case_timeout_s)


def _resume_sharded(
    cfg: LoadedConfig, cases: list[Case], args, run_dir: Path, labels: list[int], argv, legs, case_timeout_s
) -> int:
    if not (run_dir / "results.json").is_file() and read_plan(run_dir) is not None:
        merge_planned(run_dir)  # the parent died before merging: merge what the shards recorded
    check_resume(cfg, run_dir, getattr(args, "force", False))
    records = read_results(run_dir).get("cases", [])
    # a case a shard timed but left without its profiled views (stopped between its phases) is timed again
    # in a new shard, whose complete record overrides the earlier one in the merge
    unprofiled = pending_ids(cfg.model, cfg.model.device, records)
    done = {c["id"] for c in records} - unprofiled
    todo = [c for c in cases if c.id not in done]
    print(f"resuming: {len(cases) - len(todo)} of {len(cases)} cases already recorded", flush=True)
    if unprofiled & {c.id for c in todo}:
        print(f"  {len(unprofiled)} recorded without their profiled views: timed again with them", flush=True)
    if not todo:
        if read_plan(run_dir) is not None:
            data = merge_planned(run_dir)
            return conclude(run_dir.resolve(), data, {}, None, True)
        print(f"done: nothing to do. results: {run_dir / 'results.json'}", flush=True)
        return 0
    return run_local(cfg, todo, run_dir, labels, resume=True, argv=argv, legs=legs, case_timeout_s=case_timeout_s)
