"""The config: what a sweep is, from a YAML file or a dict to the list of cases (docs/DESIGN.md §2, §4).

`models` (the validated models; `load_config`), `source` (reading a YAML file or dict with its guards),
`validation` (a validation error as one line), `reference` (docs/config-reference.md, generated),
`providers` (provider entries), `profiling` (the `breakdown`, `counters`, `bands` sections), `cases` (the
sweep: workloads, cases, a case's identity fields and FLOPs), `selection` (`--only`, `--providers`),
`resources` (memory before allocation: checked when the config loads, before a run and per case).

The bottom of bench/'s subpackages: it imports none of them. `bench.config.load_config` is the public
entry (loaded on first use: importing this package imports no torch).
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_config"]


def __getattr__(name: str) -> Any:
    if name == "load_config":
        from bench.config.models import load_config

        return load_config
    raise AttributeError(f"module 'bench.config' has no attribute {name!r}")
