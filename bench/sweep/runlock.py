"""One writer per run folder: `run`, `run --resume`, `merge` and `profile --run` hold an exclusive lock on
`RUN_DIR/.gdpa-bench.lock` for as long as they write there (docs/DESIGN.md §7).

Without it two runs started with the same `--out` were both accepted and results.json ended up holding
one of them (the other's cases silently lost), and two `--resume` of one folder timed its cases twice.
The lock is `fcntl.flock` on a file inside the folder: the kernel drops it when the holder exits, however
it exits (kill -9 included), so a stale lock cannot exist. A second writer is refused at once with one
line naming the holder (pid, host, command, since when), which the holder writes into the lock file.
The lock file stays in the folder (removing it would let a third writer lock a new file while the second
still holds the old one).

A run in a worker process (`run --isolation process`, bench.shard.worker) is one writer in two processes:
the parent takes the lock and keeps it until its last worker has ended, and each worker inherits the
locked file descriptor (`--lock-fd`, `inherited_lock`). A flock belongs to the open file, not to the
process, so the worker holds the same lock rather than being refused by its parent's, and no other writer
can take the folder between a worker that a CUDA fault ended and the fresh one.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from bench.errors import UsageError
from results.files import make_dir

LOCK_FILE = ".gdpa-bench.lock"


def holder(run_dir: Path, wait_s: float = 1.0) -> str:
    """Who holds the lock of `run_dir`, as the holder recorded it ("pid 123 on host, since ..., `cmd`"). The
    holder writes that just after it takes the lock: a writer refused in between waits up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            info = json.loads((Path(run_dir) / LOCK_FILE).read_text() or "{}")
        except (OSError, ValueError):
            info = {}
        if (isinstance(info, dict) and info.get("pid")) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    if not isinstance(info, dict) or not info.get("pid"):
        return "another process"
    cmd = " ".join(str(x) for x in info.get("argv") or [])
    return f"pid {info['pid']} on {info.get('host')}, since {info.get('since')}" + (f": {cmd[:200]}" if cmd else "")


def _named(option: str, run_dir: Path) -> str:
    """`--out DIR`, or bench.run's `out=DIR`."""
    return f"{option}{run_dir}" if option.endswith("=") else f"{option} {run_dir}"


def take(fd: int, run_dir: Path, where: str) -> None:
    """Lock the open lock file `fd` of `run_dir` without waiting; a one-line UsageError naming the holder
    when another process holds it (`where` starts the line)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UsageError(
            f"{where}: another gdpa-bench is writing this run folder ({holder(run_dir)}); "
            "wait for it to finish, or choose another folder"
        ) from None


@contextmanager
def run_folder_lock(run_dir: Path, option: str) -> Iterator[int]:
    """Hold the run folder's lock (creating the folder) for the block; a one-line UsageError naming the
    holder when another process writes there. `option` names the folder in the error (`--out`,
    `--resume`, `merge`). Yields the locked file descriptor (a worker process inherits it)."""
    run_dir = Path(run_dir)
    make_dir(run_dir)
    path = run_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        raise UsageError(f"{_named(option, run_dir)}: cannot create its lock file ({exc.strerror or exc})") from None
    try:
        take(fd, run_dir, _named(option, run_dir))
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
        }
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        except OSError:
            pass  # who holds it is a courtesy to the next writer; the lock itself is held
        yield fd
    finally:
        os.close(fd)  # releases the lock


@contextmanager
def inherited_lock(run_dir: Path, fd: int, option: str) -> Iterator[None]:
    """In a worker process: the run folder's lock its parent holds, passed down as the open descriptor `fd`.
    A one-line UsageError unless `fd` is that folder's lock file and holds the lock (taking it again through
    the same open file is a no-op; another holder's lock refuses it, as `run_folder_lock` would)."""
    run_dir = Path(run_dir)
    where = f"{option} {run_dir}: --lock-fd {fd}"
    try:
        mine, theirs = os.fstat(fd), os.stat(run_dir / LOCK_FILE)
    except OSError as exc:
        raise UsageError(f"{where}: not this folder's open lock file ({exc.strerror or exc})") from None
    if (mine.st_dev, mine.st_ino) != (theirs.st_dev, theirs.st_ino):
        raise UsageError(f"{where}: not this folder's lock file ({run_dir / LOCK_FILE})")
    take(fd, run_dir, where)
    try:
        yield
    finally:
        os.close(fd)  # the parent's descriptor keeps the lock: it ends with the parent's block
