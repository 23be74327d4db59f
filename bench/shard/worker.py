"""A sweep in worker processes, so that a kernel that faults the GPU cannot take it down (docs/DESIGN.md §5,
§10).

A sticky CUDA error (an illegal memory access, a device-side assert: bench.case.faults) leaves the process's
CUDA context unusable. The worker — `python -m bench run ... --worker`, the normal single-device runner —
records the faulting case `failed` with the error, writes its results and exits `EXIT_CONTEXT_LOST`; a
fresh worker then continues the same folder with `--resume` (recorded cases kept, the rest run). Nothing
of this is inside a timed region: a worker times exactly what an in-process run times.

Two users, one mechanism: a one-device `run` on a GPU (`run_in_worker`: one worker writing the run folder,
printing to this terminal) and every worker of a sharded run (bench.shard.local: one per GPU, each
restarted into its own shard folder). A worker is started again only when it recorded a case since it
started, so a run cannot loop.

One writer per folder (bench.sweep.runlock): a one-device run's parent holds the run folder's lock for the
whole run and each of its workers inherits the locked descriptor (`--lock-fd`); a shard's worker locks
its own shard folder, while the sharded run's parent holds the run folder's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from bench.errors import EXIT_CONTEXT_LOST
from results.files import ResultsError, read_results

REPO_ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE_S = 60.0  # after SIGTERM, how long a worker may take to write its results before SIGKILL


def worker_env(n_workers: int, device_type: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    env["PYTHONUNBUFFERED"] = "1"
    if device_type == "cpu" and "OMP_NUM_THREADS" not in env:
        # CPU workers share the cores: without this every worker starts one thread per core
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // n_workers))
    return env


def recorded(run_dir: Path) -> int:
    """How many cases `run_dir`'s results.json holds (0 without a readable one)."""
    try:
        return len(read_results(run_dir).get("cases", []))
    except (ResultsError, OSError):
        return 0


def resume_in_place(cmd: list[str]) -> list[str]:
    """The worker command that continues the folder `cmd` writes: its `--out DIR` becomes `--resume DIR`."""
    return ["--resume" if x == "--out" else x for x in cmd]


class WorkerProcess:
    """One worker process writing `out_dir`, in a session of its own (a signal reaches it only when its
    parent passes it on), started again after a CUDA fault."""

    def __init__(self, cmd: list[str], out_dir: Path, env: dict, **popen):
        self.cmd, self.out_dir, self.env, self.popen = list(cmd), Path(out_dir), env, popen
        self.restarts = 0
        self.proc = self.spawn()

    def spawn(self) -> subprocess.Popen:
        self.recorded_at_start = recorded(self.out_dir)
        return subprocess.Popen(self.cmd, env=self.env, start_new_session=True, **self.popen)

    def restart_after_fault(self) -> bool:
        """If the process ended because a CUDA fault left its context unusable, having recorded a case
        since it started: start a fresh one that resumes the folder. Whether one was started."""
        if self.proc.poll() != EXIT_CONTEXT_LOST or recorded(self.out_dir) <= self.recorded_at_start:
            return False
        self.cmd = resume_in_place(self.cmd)
        self.restarts += 1
        self.proc = self.spawn()
        return True

    def stop(self, signum: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> int:
        """Pass a stop signal on (the runner writes its finished cases and exits), SIGKILL after
        `grace_s`; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


def worker_command(cfg, args, run_dir: Path, lock_fd: int) -> list[str]:
    """`python -m bench run` of the same cases as `args` into `run_dir`, as a worker (no report, no
    closing lines: the process that started it draws and prints those) holding the lock `lock_fd` its
    parent holds on the folder (bench.sweep.runlock.inherited_lock)."""
    cmd = [sys.executable, "-m", "bench", "run", str(cfg.path), "--resume" if args.resume else "--out", str(run_dir)]
    for flag, value in (
        ("--only", args.only),
        ("--providers", args.providers),
        ("--case-list", args.case_list),
        ("--device", args.device),
        ("--lock-fd", lock_fd),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    cmd += ["--worker", "--no-report"] + (["--no-progress"] if args.no_progress else [])
    return cmd + (["--force"] if args.force else [])


def run_in_worker(cfg, args, run_dir: Path, lock_fd: int) -> int:
    """A one-device run in a worker process on this terminal, started afresh after each CUDA fault until
    every case is recorded; the last worker's exit status. `lock_fd`: the run folder's lock, which this
    process holds and each worker inherits. Ctrl-C / SIGTERM are passed on to the worker (its finished
    cases are kept) and re-raised here as KeyboardInterrupt once it has stopped."""
    cmd = worker_command(cfg, args, run_dir, lock_fd)
    worker = WorkerProcess(cmd, run_dir, worker_env(1, cfg.model.device), pass_fds=(lock_fd,))
    try:
        while True:
            worker.proc.wait()
            if not worker.restart_after_fault():
                return worker.proc.returncode
            print(
                f"a fresh worker process (pid {worker.proc.pid}) continues with the cases not yet recorded",
                flush=True,
            )
    except KeyboardInterrupt:
        worker.stop()
        raise
