"""The watchdog of a sweep in worker processes (docs/DESIGN.md §5): a kernel that deadlocks (a warp-specialized
pipeline waiting on a barrier that never arrives) hangs its process, not the run.

The worker reports each phase of a case to its parent as it enters it (`PhaseReporter`: one JSON line per
change on a pipe the parent passes down, `--status-fd`): `batch` (the workload's batch, before its first
case), `setup` (availability and support checks: a peer's code is imported here), `gate`, `compile` (the
build and the untimed first call), `power` (the energy loop and its pre-roll), `samples`, `views` (the
timed views: the CUDA-graph time, the length bands' timings), then `recorded`; in the profiled phase, after
every case of the worker was timed (bench.profiling.later), each case again `batch` (its first), `views` (its
breakdowns), `recorded`. The parent (`Watch`, a thread reading that pipe)
knows which case runs since when and in which phase; a case that runs past `timing.case_timeout_s` (or
`--case-timeout`) since it started — its whole life, batch to views — is hung: the parent stops the worker
(SIGTERM, then SIGKILL of its process group after `KILL_GRACE_S`: a thread blocked in a CUDA
synchronize never sees the signal) and starts a fresh one, as after a CUDA fault, that records the case
`failed` with `hung: no progress for N s ...` and the phase, then runs the rest (`--hung-case`).

The worker's start — imports, the CUDA context, the monitor, the GEMM calibration — ends with a report of its
own (`started`, no case); a worker silent since it started for `STARTUP_S` (at least the case deadline) is
killed and the run stops with why: no case is in flight, and a fresh worker would wait the same way.

Nothing of this is inside a timed region: a report is a few bytes written between phases, never between
the timed calls. In one process (`--isolation none`, `bench.run`) nothing watches: `--case-timeout` is
refused there.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

RECORDED = "recorded"  # the case is in results.json: nothing of it runs any more
STARTED = "started"  # the worker's start is over (its first case, or the profiled phase, may still be far off)
PHASES = ("batch", "setup", "gate", "compile", "power", "samples", "views", RECORDED)
KILL_GRACE_S = 10.0  # after SIGTERM, how long a hung worker may take to write its finished cases
# A worker's start before its first report — imports, the CUDA context, the monitor, the GEMM calibration (at most
# MAX_LOOP_S) — is bounded too: a GPU whose driver hangs its first call would otherwise hold the run forever.
STARTUP_S = 900.0


class PhaseReporter:
    """The worker's side: `reporter(case_id, phase)` tells the parent (a no-op without a pipe)."""

    def __init__(self, fd: int | None = None):
        self.fd = fd
        if fd is not None:
            os.set_inheritable(fd, False)  # the worker's own children (a compiler, ncu) never hold the pipe

    def __call__(self, case_id: str, phase: str) -> None:
        if self.fd is None:
            return
        line = json.dumps({"case": case_id, "phase": phase}) + "\n"
        try:
            os.write(self.fd, line.encode())
        except OSError:  # the parent has gone: there is no one to report to, and the sweep goes on
            self.fd = None


class Watch:
    """The parent's side, one per worker process: what the worker last reported, read by a daemon thread
    from `read_fd` until the worker closes it."""

    def __init__(self, read_fd: int, timeout_s: float, clock=time.monotonic, startup_s: float | None = None):
        self.timeout_s, self.clock = float(timeout_s), clock
        self.startup_s = max(self.timeout_s, STARTUP_S) if startup_s is None else float(startup_s)
        self.started, self.reported = clock(), False
        self.case: str | None = None
        self.phase: str | None = None
        self.case_t0 = self.phase_t0 = 0.0
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, args=(read_fd,), name="gdpa-watch", daemon=True)
        self.thread.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for raw in pipe:
                try:
                    msg = json.loads(raw)
                    self.report(str(msg["case"]), str(msg["phase"]))
                except (ValueError, KeyError, TypeError):
                    continue  # a torn or foreign line: the next report says where the worker is

    def report(self, case_id: str, phase: str) -> None:
        now = self.clock()
        with self.lock:
            self.reported = True
            if phase == STARTED:
                return
            if phase == RECORDED:
                self.case = self.phase = None
                return
            if case_id != self.case:
                self.case, self.case_t0 = case_id, now
            self.phase, self.phase_t0 = phase, now

    def in_flight(self, drain_s: float = 2.0) -> dict | None:
        """The case the worker was in when its process ended (`id`, `phase`, `elapsed`, `in_phase`), None between
        cases. Waits up to `drain_s` for the reader to take the pipe's last lines (it ends at the worker's exit)."""
        self.thread.join(timeout=drain_s)
        now = self.clock()
        with self.lock:
            if self.case is None:
                return None
            elapsed, in_phase = now - self.case_t0, now - self.phase_t0
            return {"id": self.case, "phase": self.phase or "?", "elapsed": elapsed, "in_phase": in_phase}

    def overdue(self) -> dict | None:
        """The hung case (`id`, `error`, `wall_s`) once the case in flight has run past the deadline, else None;
        a worker silent since it started past `startup_s`: the same with `id` None (no case to record)."""
        now = self.clock()
        with self.lock:
            if self.case is None and not self.reported and now - self.started > self.startup_s:
                waited = now - self.started
                return {"id": None, "error": startup_error(waited, self.startup_s), "wall_s": round(waited, 3)}
            if self.case is None or now - self.case_t0 <= self.timeout_s:
                return None
            elapsed, in_phase = now - self.case_t0, now - self.phase_t0
            return {
                "id": self.case,
                "error": hung_error(elapsed, self.timeout_s, self.phase or "?", in_phase),
                "wall_s": round(elapsed, 3),
            }


def hung_error(elapsed: float, timeout_s: float, phase: str, in_phase: float) -> str:
    """The `error` of a hung case: how long, the deadline, the phase it was in and for how long."""
    return (
        f"hung: no progress for {elapsed:.0f} s (the case deadline, timing.case_timeout_s: {timeout_s:g} s), in "
        f"phase {phase} for the last {in_phase:.0f} s; its worker process was killed"
    )


def startup_error(waited: float, startup_s: float) -> str:
    """Why a run stopped whose worker never reached its first case."""
    return (
        f"the worker process reached no case in {waited:.0f} s after it started (its bound: {startup_s:g} s for "
        "the imports, the CUDA context, the power monitor and the GEMM calibration); it was killed and the run "
        "stops: a fresh one would wait the same way (--resume continues once the GPU answers)"
    )


def died_error(returncode: int, phase: str, in_phase: float) -> str:
    """The `error` of a case whose worker process ended under it: by a signal of its own doing (a segfault, an
    abort) or an exit the harness never makes mid-case (a kernel's os._exit)."""
    if returncode < 0:
        try:
            how = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            how = f"killed by signal {-returncode}"
    else:
        how = f"exit status {returncode}"
    return (
        f"the worker process ended under this case ({how}) in phase {phase} after {in_phase:.0f} s in it: the "
        "case is recorded failed and a fresh worker goes on"
    )


def parse_hung(text: str, option: str = "--hung-case") -> dict:
    """The hung case a fresh worker records first (`--hung-case`, internal: the parent writes it)."""
    try:
        value = json.loads(text)
        out = {"id": str(value["id"]), "error": str(value["error"]), "wall_s": float(value["wall_s"])}
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{option}: not a hung-case record of the parent; allowed: internal to a worker") from None
    return out
