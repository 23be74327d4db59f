"""The command line's shared vocabulary (docs/DESIGN.md §7): what a command is, and the option groups
several commands take, each declared once so that `--only` or `--device` reads the same everywhere."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from support.inputs import integer, number  # ASCII digits: int("٣") is 3


@dataclass(frozen=True)
class Command:
    """One subcommand of `gdpa-bench`: its name, the line `--help` shows, its arguments (option groups
    below plus its own) and what it runs (the exit status)."""

    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    # False for a command that only reads results (report, compare, fields, ...): it starts without torch
    # (~3 s), which choosing the Triton interpreter would import (bench.cli.main)
    runs_kernels: bool = True


def config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="a config file (configs/*.yaml)")


def selection(parser: argparse.ArgumentParser, only_required: bool = False) -> None:
    """Which of the config's cases: `--only REGEX` over case ids, `--providers a,b` (labels)."""
    parser.add_argument("--only", metavar="REGEX", required=only_required, help="case ids matching this regex")
    parser.add_argument("--providers", metavar="A,B", help="comma-separated provider labels of the config")


def device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", type=integer, metavar="N", help="CUDA device index")


def band_edges(text: str) -> list[int]:
    """`--band-edges 128,512,1024`: increasing positive integers (workloads.bands.check_edges)."""
    from workloads.bands import check_edges  # noqa: PLC0415 (workloads imports torch: not for --help)

    try:
        values = [integer(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers; allowed: e.g. 128,512,1024") from None
    try:
        return check_edges(values)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def bands(parser: argparse.ArgumentParser) -> None:
    """The length bands of selected cases (bench.profiling.bands; the config's `bands` section does the same in a
    run)."""
    group = parser.add_argument_group("length bands (docs/DESIGN.md §5)")
    group.add_argument(
        "--bands", action="store_true", help="time each case's length bands alone (no Nsight Compute needed)"
    )
    group.add_argument(
        "--band-edges",
        type=band_edges,
        metavar="E1,E2,...",
        help="band edges of min(Lq, Lk) (default: the config's bands.edges, else 64, 128, 256, ... up to the max)",
    )


def run_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder (holding results.json)")


def compare_settings(parser: argparse.ArgumentParser) -> None:
    """The settings of results.verdicts.CompareSettings (its defaults)."""
    group = parser.add_argument_group("how a case is judged (results.verdicts)")
    group.add_argument(
        "--threshold",
        type=number,
        default=0.05,
        help="relative median change that counts as a regression (default 0.05 = 5%%)",
    )
    group.add_argument(
        "--alpha", type=number, default=0.01, help="significance level of the Mann-Whitney U test (default 0.01)"
    )
    group.add_argument(
        "--min-samples", type=integer, default=5, help="fewest samples per side to run the test (default 5)"
    )
    group.add_argument(
        "--drift-threshold",
        type=number,
        default=0.03,
        help="a case whose first and last tenth of samples differ by more is 'drifting' (default 0.03; "
        "inf turns the check off)",
    )
    group.add_argument(
        "--allow-missing",
        action="store_true",
        help="a case of the baseline absent from the current run does not fail the gate",
    )
