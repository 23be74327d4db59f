"""Ctrl-C and SIGTERM end a sweep cleanly: the first one stops it (KeyboardInterrupt), and every later
one is only acknowledged, so the finished cases, power.csv and the report are still written; the exit
status is 128 + the first signal (130 for SIGINT, 143 for SIGTERM), as a shell reports a signal.

From the first instruction of `python -m bench` / `gdpa-bench` (bench.__main__) the same holds while the
process starts: until a command begins (`command_started`), a signal prints one line and exits at once
(nothing is written before then, and a KeyboardInterrupt raised inside `import torch` would print its
traceback); afterwards it raises KeyboardInterrupt, which the CLI turns into one line and 128 + the signal;
once the command has returned (`guard_exit`) it prints one line and exits at once again.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

REPEAT_NOTE = "{name} again: still writing the results and the report; wait, or kill -9 to stop at once"


@dataclass
class Interrupts:
    """What the handlers saw: the first signal (None: none yet) and how many came after it."""

    signum: int | None = None
    repeats: int = 0

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or signal.SIGINT)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGINT).name


_active: Interrupts | None = None


@contextmanager
def interrupts() -> Iterator[Interrupts]:
    """Inside the block the first SIGINT or SIGTERM raises KeyboardInterrupt; later ones print one note
    and return. Nested blocks share the outermost one's state. Outside the main thread (where Python
    cannot install handlers) it changes nothing and yields a state that stays empty."""
    global _active
    if _active is not None:
        yield _active
        return
    state = Interrupts()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return

    def handler(signum, frame):
        if state.signum is None:
            state.signum = signum
            raise KeyboardInterrupt
        state.repeats += 1
        from tqdm import tqdm  # noqa: PLC0415  (only when a second signal comes; tqdm clears its bar first)

        tqdm.write(REPEAT_NOTE.format(name=signal.Signals(signum).name), file=sys.stderr)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    _active = state
    try:
        yield state
    finally:
        _active = None
        for s, h in old.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)


# ------------------------------------------------------------------------------------- while starting

_entry = Interrupts()  # the signal that ended a command outside a sweep; `installed` below
_entry_installed = False
STARTING_NOTE = "interrupted ({name}) while starting: nothing was written"


def guard_startup() -> None:
    """Installed first thing by `python -m bench` / `gdpa-bench`: a SIGINT or SIGTERM before the command
    begins prints one line and exits with 128 + the signal (os._exit: no traceback, no cleanup needed)."""
    global _entry_installed

    def starting(signum, frame):
        os.write(2, (STARTING_NOTE.format(name=signal.Signals(signum).name) + "\n").encode())
        os._exit(128 + signum)

    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) is not signal.SIG_IGN:  # an ignored signal (a `&` job's SIGINT) stays ignored
            signal.signal(s, starting)
    atexit.register(_end_now)  # first registered, so it runs last
    _entry_installed = True


def command_started() -> None:
    """The command begins: a signal now raises KeyboardInterrupt (recorded for `entry_signal`), so the
    command can stop cleanly; a sweep's `interrupts()` block takes over while it runs. Without
    `guard_startup` (the CLI called in-process, a notebook) the handlers are left alone."""
    if not _entry_installed or threading.current_thread() is not threading.main_thread():
        return

    def stop(signum, frame):
        if _entry.signum is None:
            _entry.signum = signum
        raise KeyboardInterrupt

    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, stop)


EXITING_NOTE = "interrupted ({name}) while exiting"
_exit_status: int | None = None  # what the command returned; `guard_exit`


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, RuntimeError, AttributeError):  # closed pipe or file, a flush it interrupted
            pass


def _end_now() -> None:
    """The last exit handler (registered first): the command's status, without the interpreter's module
    teardown. That teardown (~0.5 s with torch loaded) runs after CPython has put SIGINT back to its
    default, so a Ctrl-C then killed the process with no line and no 128 + signal status; and under
    `python -m` CPython ends with SIGINT anyway when a KeyboardInterrupt once left an `exec` of a string
    (dataclasses and pydantic compile their methods so at import: a Ctrl-C during an import lands there),
    whatever status the command returned. Every other exit handler (threads joined, multiprocessing's,
    tqdm's, torch's) has run when this one does; the run's files are closed by then."""
    if _exit_status is not None:
        _flush_std()
        os._exit(_exit_status)


def guard_exit(status: int) -> None:
    """The command has returned `status`: a SIGINT or SIGTERM from now until the process ends prints one
    line and exits with 128 + the signal (the command's output flushed first); otherwise the process
    exits with `status` (see `_end_now`)."""
    global _exit_status
    if not _entry_installed or threading.current_thread() is not threading.main_thread():
        return
    _exit_status = status

    def exiting(signum, frame):
        _flush_std()
        os.write(2, (EXITING_NOTE.format(name=signal.Signals(signum).name) + "\n").encode())
        os._exit(128 + signum)

    for s in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, exiting)


def entry_signal() -> Interrupts:
    """The signal that ended the command (SIGINT when none was recorded: a plain KeyboardInterrupt)."""
    return _entry


STRAY_GRACE_S = 10.0  # how long the ended command waits for threads it did not start to end by themselves


def end_despite_stray_threads(status: int, grace_s: float = STRAY_GRACE_S) -> None:
    """The command has returned: threads still running that are not daemons (a provider's own, left behind)
    would hold CPython's shutdown forever — it joins them before any exit handler — so a finished run never
    exited. Each gets `grace_s` in all to end; any left then is named in one line and the exit handlers run now
    (the last one, `_end_now`, ends the process with `status`)."""
    if not _entry_installed or threading.current_thread() is not threading.main_thread():
        return
    deadline = time.monotonic() + grace_s
    stray = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    for t in stray:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    left = [t.name for t in stray if t.is_alive()]
    if left:
        _flush_std()
        note = f"note: threads still running after the command ended ({', '.join(left)}): not waited for\n"
        os.write(2, note.encode())
        atexit._run_exitfuncs()
        os._exit(status)  # no handler ended it (none registered the status): end with it anyway
