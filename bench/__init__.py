"""gdpa-bench's harness: `python -m bench` / `gdpa-bench` (bench.cli.parser) and `bench.run(...)` (bench.sweep.api).

Nothing heavy is imported here: the CLI must choose the Triton interpreter before any kernel module is
imported, so `bench.run` loads its module on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["run"]


def __getattr__(name: str) -> Any:
    if name == "run":
        from bench.sweep.api import run

        return run
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
