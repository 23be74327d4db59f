"""A sweep in worker processes, so that a kernel that faults the GPU cannot take it down (docs/DESIGN.md §5,
§10).

A sticky CUDA error (an illegal memory access, a device-side assert: bench.case.faults) leaves the process's
CUDA context unusable. The worker — `python -m bench run ... --worker`, the normal single-device runner —
records the faulting case `failed` with the error, writes its results and exits `EXIT_CONTEXT_LOST`; a
fresh worker then continues the same folder with `--resume` (recorded cases kept, the rest run). Nothing
of this is inside a timed region: a worker times exactly what an in-process run times.

Two users, one mechanism: a one-device `run` on a GPU (`run_in_worker`: one worker writing the run folder,
printing to this terminal) and every worker of a sharded run (bench.shard.local: one per GPU, each
restarted into its own shard folder). A worker is started again only when it recorded a case, or a case's
failure, since it started, so a run cannot loop. The same path continues a run after a hang (bench.case.watchdog:
the parent kills a worker whose case ran past its deadline; the fresh one records that case `failed` first)
and after each environment's worker (bench.sweep.environments: a provider's own interpreter or site folders).
Each worker times its cases first and profiles them after its last timed case (bench.profiling.later); a
fresh worker gives the cases its predecessor left without their profiled views theirs.

One writer per folder (bench.sweep.runlock): a one-device run's parent holds the run folder's lock for the
whole run and each of its workers inherits the locked descriptor (`--lock-fd`); a shard's worker locks
its own shard folder, while the sharded run's parent holds the run folder's.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.case.watchdog import KILL_GRACE_S, Watch, died_error
from bench.errors import EXIT_CONTEXT_LOST, EXIT_FAILED, EXIT_INTERRUPTED
from bench.sweep.environments import Leg
from results.files import ResultsError, read_results

REPO_ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE_S = 60.0  # after SIGTERM, how long a worker may take to write its results before SIGKILL
POLL_S = 0.5  # how often a waiting parent looks at its worker's deadline


PARENT_PID = "GDPA_BENCH_PARENT_PID"  # a worker's environment: the process that watches it


def die_with_parent() -> None:
    """In a worker: be killed when the process that started it dies (Linux's PR_SET_PDEATHSIG). The parent
    holds the watchdog and passes the stop signals on: a parent gone by kill -9 or a dropped terminal's SIGHUP
    left its worker running unwatched (a hung kernel forever), and its inherited descriptor kept the run
    folder locked against `--resume`. Results are written case by case (atomically), so only the case in
    flight is lost, and redone on resume. A parent already gone when this runs: the worker exits at once."""
    expected = os.environ.get(PARENT_PID)
    if expected is None or not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != expected:  # it died between our fork and the prctl
        os._exit(128 + signal.SIGKILL)


def worker_env(n_workers: int, device_type: str) -> dict:
    env = dict(os.environ)
    env[PARENT_PID] = str(os.getpid())
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


def progress(run_dir: Path) -> int:
    """What a worker has settled in `run_dir`: its recorded cases, plus those that failed, so that a case
    that faults the GPU in the profiled phase (recorded `ok` in the timed phase, `failed` in the profiled
    one: bench.profiling.later) counts as progress too (0 without a readable results.json)."""
    try:
        cases = read_results(run_dir).get("cases", [])
    except (ResultsError, OSError):
        return 0
    return len(cases) + sum(c.get("status") != "ok" for c in cases)


def resume_in_place(cmd: list[str]) -> list[str]:
    """The worker command that continues the folder `cmd` writes: its `--out DIR` becomes `--resume DIR`."""
    return ["--resume" if x == "--out" else x for x in cmd]


class WorkerProcess:
    """One worker process writing `out_dir`, in a session of its own (a signal reaches it only when its
    parent passes it on), followed by the next one when the run goes on: after a CUDA fault, after a hang
    (`case_timeout_s`: the parent watches each case, bench.case.watchdog), and for each environment of the run
    (`legs`, bench.sweep.environments: one worker per environment, each continuing the folder)."""

    def __init__(
        self,
        cmd: list[str],
        out_dir: Path,
        env: dict,
        *,
        legs: list[Leg] | None = None,
        case_timeout_s: float | None = None,
        **popen,
    ):
        self.base_cmd, self.out_dir, self.base_env, self.popen = list(cmd), Path(out_dir), env, popen
        self.legs = legs or [Leg(None, None, cmd[0])]
        self.leg, self.resume = 0, False
        self.case_timeout_s = case_timeout_s
        self.restarts = 0  # after CUDA faults
        self.hangs = 0
        self.crashes = 0  # processes that ended under a case (a segfault, an abort)
        self.hung: dict | None = None  # the case the watchdog ended this process for
        self.stalled: str | None = None  # why the run stopped: a worker that never reached a case
        self.kill_at: float | None = None
        self.watch: Watch | None = None
        self.cmd = list(cmd)
        self.proc = self.spawn()

    def spawn(self, hung: dict | None = None) -> subprocess.Popen:
        leg = self.legs[self.leg]
        cmd = leg.command(resume_in_place(self.base_cmd) if self.resume else self.base_cmd)
        popen = dict(self.popen)
        read = write = None
        if self.case_timeout_s is not None:
            read, write = os.pipe()
            cmd += ["--status-fd", str(write)]
            popen["pass_fds"] = (*popen.get("pass_fds", ()), write)
        if hung is not None:
            cmd += ["--hung-case", json.dumps(hung)]
        self.cmd, self.kill_at = cmd, None
        self.progress_at_start = progress(self.out_dir)
        try:
            proc = subprocess.Popen(cmd, env=leg.env(self.base_env), start_new_session=True, **popen)
        finally:
            if write is not None:
                os.close(write)  # the worker holds the only write end: its exit is the reader's end of file
        if read is not None:
            self.watch = Watch(read, self.case_timeout_s)
        return proc

    def check_hung(self) -> dict | None:
        """Called while the process runs: the hung case (once, when its deadline passes; the process is then
        stopped: SIGTERM, and SIGKILL of its process group `KILL_GRACE_S` later), else None."""
        if self.proc.poll() is not None:
            return None
        if self.kill_at is not None:
            if time.monotonic() > self.kill_at:
                self._kill_group()
            return None
        over = self.watch.overdue() if self.watch is not None else None
        if over is not None:
            self.hung, self.kill_at = over, time.monotonic() + KILL_GRACE_S
            self.proc.send_signal(signal.SIGTERM)  # a Python-level hang writes its finished cases and exits
        return over

    def _kill_group(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its session: the worker and anything it started
        except (ProcessLookupError, PermissionError):
            pass

    def advance(self) -> str | None:
        """Once the process has ended: start the next one when the run goes on — `hang` (the watchdog
        stopped it: the fresh one records the hung case, then resumes), `crash` (it ended under a case: a
        segfault, an abort; the fresh one records that case failed, then resumes), `fault`
        (a CUDA fault left its context unusable, having recorded a case since it started: a run cannot loop), `leg` (its
        environment's cases are done: the next environment's worker). Which, or None."""
        if self.proc.poll() is None:
            return None
        if self.hung is not None and self.hung["id"] is None:  # it never reached a case: the run stops
            self._kill_group()
            self.stalled, self.hung = self.hung["error"], None
            return None
        if self.hung is not None:
            self._kill_group()  # whatever the stopped worker had started
            hung, self.hung = self.hung, None
            self.hangs += 1
            self.resume = True
            self.proc = self.spawn(hung)
            return "hang"
        rc = self.proc.returncode
        died = self._died_under_a_case(rc)
        if died is not None:  # recorded failed by the fresh worker, as a hung case is: the run goes on
            self.crashes += 1
            self.resume = True
            self.proc = self.spawn(died)
            return "crash"
        if rc == EXIT_CONTEXT_LOST and progress(self.out_dir) > self.progress_at_start:
            self.restarts += 1
        elif rc == 0 and self.leg + 1 < len(self.legs):
            self.leg += 1
        else:
            return None
        why = "fault" if rc else "leg"
        self.resume = True
        self.proc = self.spawn()
        return why

    def _died_under_a_case(self, rc: int) -> dict | None:
        """The case the process ended under, as a hung case's record, when it ended by its own doing (a
        segfault, an abort, an exit status the harness never uses mid-case) while a case was in flight; else
        None. Not a kill from outside (SIGKILL — an operator's kill -9 or the OOM killer, which the harness
        cannot tell apart —, SIGTERM, SIGINT, SIGHUP): that case stays unrecorded, for --resume."""
        if rc in (0, EXIT_CONTEXT_LOST, EXIT_INTERRUPTED, 128 + signal.SIGTERM) or self.watch is None:
            return None
        if rc in (-signal.SIGKILL, -signal.SIGTERM, -signal.SIGINT, -signal.SIGHUP):
            return None  # sent from outside (an operator, the OOM killer): the case stays for --resume
        case = self.watch.in_flight()
        if case is None:
            return None
        error = died_error(rc, case["phase"], case["in_phase"])
        return {"id": case["id"], "error": error, "wall_s": round(case["elapsed"], 3)}

    restart_after_fault = advance  # the name its first users know

    def wait(self, on_hang=None) -> int:
        """Wait for the process to end, watching its case's deadline; `on_hang(case)` when one is hung."""
        while self.proc.poll() is None:
            over = self.check_hung()
            if over is not None and on_hang is not None:
                on_hang(over)
            try:
                self.proc.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                pass
        return self.proc.returncode

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


def run_in_worker(cfg, args, run_dir: Path, lock_fd: int, legs: list[Leg], case_timeout_s: float) -> int:
    """A one-device run in worker processes on this terminal — one per environment (`legs`), each started
    afresh after a CUDA fault or a hang (`case_timeout_s`) until every case is recorded; the last worker's
    exit status. `lock_fd`: the run folder's lock, which this process holds and each worker inherits.
    Ctrl-C / SIGTERM are passed on to the worker (its finished cases are kept) and re-raised here as
    KeyboardInterrupt once it has stopped."""
    cmd = worker_command(cfg, args, run_dir, lock_fd)
    if legs[0].environment is not None:
        print(f"the cases of {legs[0].summary()}", flush=True)
    worker = WorkerProcess(
        cmd, run_dir, worker_env(1, cfg.model.device), legs=legs, case_timeout_s=case_timeout_s, pass_fds=(lock_fd,)
    )
    try:
        while True:
            worker.wait(on_hang=lambda over: print(f"  {over['id'] or 'the worker'}: {over['error']}", flush=True))
            why = worker.advance()
            if why is None:
                return EXIT_FAILED if worker.stalled else worker.proc.returncode
            if why == "leg":
                print(f"the cases of {worker.legs[worker.leg].summary()} (pid {worker.proc.pid})", flush=True)
            else:
                print(
                    f"a fresh worker process (pid {worker.proc.pid}) continues with the cases not yet recorded"
                    + {"hang": " (after the hung case)", "crash": " (after the case its process ended under)"}.get(
                        why, ""
                    ),
                    flush=True,
                )
    except KeyboardInterrupt:
        worker.stop()
        raise
