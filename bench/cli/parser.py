"""`gdpa-bench` / `python -m bench`: one command line, every command a subcommand (docs/DESIGN.md §7).

The commands that run or inspect a sweep are bench.cli.commands, the ones that present results the report
step's (bench.cli.reporting); the option groups several commands take are bench.cli.options. Bad input (config,
paths, options) prints one line naming the file, the field and what is allowed, and exits 2. A failing
kernel never stops a sweep: it is recorded in results.json.
"""

from __future__ import annotations

import argparse
import sys

from bench.cli import commands, history, reporting
from bench.errors import EXIT_BAD_INPUT, MAX_LINE, ConfigError, UsageError
from bench.sweep.signals import command_started, entry_signal
from results.files import ResultsWriteError
from support.text import one_line

COMMANDS = (*commands.COMMANDS, *reporting.COMMANDS, *history.COMMANDS)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kw):
        # no abbreviations: `--ou` would be `--out`, and the printed --resume command must find every --out
        super().__init__(*args, allow_abbrev=False, **kw)

    def error(self, message):  # argparse's own errors: one line (no usage block), exit 2
        raise UsageError(f"{message} (see {self.prog} --help)")


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("gdpa-bench")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gdpa-bench", description="GDPA kernel benchmark harness (also: python -m bench)")
    parser.add_argument("--version", action="version", version=f"gdpa-bench {version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        command.arguments(p)
        # not `run`: the profile command has a --run option
        p.set_defaults(handler=command.run, runs_kernels=command.runs_kernels)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)  # `--version` and `--help` end here, before torch
        args.argv = argv
        if args.runs_kernels:
            from bench.case.device import use_interpreter_without_gpu

            use_interpreter_without_gpu()  # before any kernel module is imported
        command_started()  # a signal from here on stops the command cleanly (bench.sweep.signals)
        return args.handler(args)
    except (ConfigError, UsageError, ResultsWriteError) as exc:
        print(f"error: {one_line(str(exc), MAX_LINE)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        sig = entry_signal()
        print(f"interrupted ({sig.name})", file=sys.stderr)
        return sig.exit_code
    except Exception:
        # a signal's KeyboardInterrupt can surface as another error, depending on the code it landed in: an
        # extension module initialising (numpy's, on a loaded CI machine) turns it into "ImportError:
        # initialization failed", a class body's `__set_name__` on Python 3.11 (pydantic's import) into
        # RuntimeError. Once a signal was recorded, the command ended because of it; with none, the error is
        # the error it is (a broken install stays a traceback).
        sig = entry_signal()
        if sig.signum is None:
            raise
        print(f"interrupted ({sig.name})", file=sys.stderr)
        return sig.exit_code
