"""Ctrl-C and SIGTERM end a sweep cleanly: the first one stops it (KeyboardInterrupt), and every later
one is only acknowledged, so the finished cases, power.csv and the report are still written; the exit
status is 128 + the first signal (130 for SIGINT, 143 for SIGTERM), as a shell reports a signal.
"""

from __future__ import annotations

import signal
import sys
import threading
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
        print(REPEAT_NOTE.format(name=signal.Signals(signum).name), file=sys.stderr, flush=True)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    _active = state
    try:
        yield state
    finally:
        _active = None
        for s, h in old.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)
