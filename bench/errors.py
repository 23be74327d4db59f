"""The harness's error types and exit codes, below every command so that none imports them from the CLI.

Bad input — a config, a path, an option — is one line naming the file, the field and what is allowed,
and exit code 2 (docs/DESIGN.md §7). A failing kernel is not an error of the harness: it is recorded in
results.json and the sweep goes on.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # a regression (compare), or a sharded run with a failed worker or missing cases
EXIT_BAD_INPUT = 2
EXIT_CONTEXT_LOST = 3  # a CUDA fault left the process's CUDA context unusable: the rest needs a fresh one
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGTERM: 143, 128 + the signal): the finished cases are on disk
#: The longest error line printed: a hostile value (a YAML alias bomb, a 300 MB string) is cut, not echoed.
MAX_LINE = 600


# ValueError subclasses: the Python API's bad input is a ValueError like any library's.
class ConfigError(ValueError):
    """A bad config: the message is one line, ready to print."""


class UsageError(ValueError):
    """A bad command-line option or path: the message is one line, ready to print."""


class Spelling:
    """How a caller names its arguments in an error line: the command line's options (`--resume DIR`) or
    `bench.run`'s keywords (`resume='DIR'`) — an API caller told to use `--resume` has no command line."""

    def __init__(self, api: bool):
        self.api = api

    def arg(self, name: str, value=None) -> str:
        """`--name value` / `name=value` (`value` None: a switch, `--force` / `force=True`; an option that
        takes a value is named alone as `--only` / `only=`)."""
        if self.api:
            return f"{name}={value!r}" if value is not None else f"{name}=True"
        flag = "--" + name.replace("_", "-")
        return f"{flag} {value}" if value is not None else flag

    def name(self, name: str) -> str:
        """An option that takes a value, named alone: `--only` / `only=`."""
        return f"{name}=" if self.api else "--" + name.replace("_", "-")


CLI = Spelling(api=False)
API = Spelling(api=True)
