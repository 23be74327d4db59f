"""The environment variables that change what the harness does, each read in this one place.

Variants of a kernel are never chosen here (docs/DESIGN.md §13: a named option or the hardware chooses):
these variables only say where things are.
"""

from __future__ import annotations

import os

PROVIDER_MODULES = "GDPA_BENCH_PROVIDERS"  # extra provider modules, comma-separated (docs/DESIGN.md §11)
SLURM_ARGS = "GDPA_BENCH_SLURM_ARGS"  # site #SBATCH options as key=value, comma-separated (docs/multi-gpu.md)
HOPPER_KERNEL_DIR = (
    "GDPA_HOPPER_KERNEL_DIR"  # compiled Hopper kernels to load before compiling (kernels/gdpa/hopper/cache.py)
)


def listed(variable: str) -> tuple[str, ...]:
    """The comma-separated items of `variable` (blanks dropped), as the environment holds them now."""
    return tuple(item.strip() for item in os.environ.get(variable, "").split(",") if item.strip())


def provider_modules() -> tuple[str, ...]:
    """The modules a user names in GDPA_BENCH_PROVIDERS to add providers without editing this project."""
    return listed(PROVIDER_MODULES)


def slurm_args() -> tuple[str, ...]:
    """The `key=value` items of GDPA_BENCH_SLURM_ARGS (Slurm options the CLI has no flag for)."""
    return listed(SLURM_ARGS)


def hopper_kernel_dir() -> str | None:
    """GDPA_HOPPER_KERNEL_DIR: a directory of Hopper GDPA kernels compiled ahead of time (on any machine, no GPU)
    that every process of a run — the sweep's worker, the Nsight Compute child — loads instead of compiling.
    A cache location, like TRITON_CACHE_DIR: what a kernel computes never depends on it."""
    return os.environ.get(HOPPER_KERNEL_DIR) or None
