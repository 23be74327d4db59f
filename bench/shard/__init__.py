"""Sweeps across GPUs: one host's GPUs (`run --gpus`), a cluster through Slurm (`submit`), and the merge
(`python -m bench merge RUN_DIR`). docs/multi-gpu.md has the user's view, docs/DESIGN.md §10 the design.

Modules: `cost` (estimated wall time per case), `plan` (`--gpus` parsing, balanced shards, the plan
file), `merge` (shard folders → one run), `local` (worker processes on one host), `slurm` (submitit).
"""

from bench.shard.cost import case_cost, case_flops_estimate
from bench.shard.local import run_local, run_sharded
from bench.shard.merge import Shard, merge_planned, merge_run_dirs, merge_shards
from bench.shard.plan import lpt, parse_gpus, read_plan, shard_cases
from bench.shard.slurm import node_job, slurm_executor, submit

__all__ = [
    "Shard",
    "case_cost",
    "case_flops_estimate",
    "lpt",
    "merge_planned",
    "merge_run_dirs",
    "merge_shards",
    "node_job",
    "parse_gpus",
    "read_plan",
    "run_local",
    "run_sharded",
    "shard_cases",
    "slurm_executor",
    "submit",
]
