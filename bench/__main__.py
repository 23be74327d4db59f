"""`python -m bench` and the `gdpa-bench` console script (`bench.__main__:entry`).

The signal guard comes before anything heavy is imported (bench.sweep.signals.guard_startup): Ctrl-C or SIGTERM
during the first second — the torch import — is one line and exit 130 / 143, never a traceback; so is one
that comes while the process ends (bench.sweep.signals.guard_exit).
"""

import os
import signal
import sys

from bench.sweep.signals import end_despite_stray_threads, guard_exit, guard_startup


def entry() -> int:
    guard_startup()
    from bench.cli.parser import main  # noqa: PLC0415  (after the guard: this import is most of the start-up)

    try:
        status = main()
    except BrokenPipeError:  # `gdpa-bench fields | head`: the reader left; not a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout at exit
        status = 128 + signal.SIGPIPE
    guard_exit(status)  # a signal while the process ends is one line too; else it ends with this status
    end_despite_stray_threads(status)  # a provider's thread left running must not keep a finished run alive
    return status


if __name__ == "__main__":
    sys.exit(entry())
