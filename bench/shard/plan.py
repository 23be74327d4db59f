"""How a sweep is split over workers, and the plan file that records it (docs/DESIGN.md §10).

- `parse_gpus`: the worker labels `--gpus SPEC` asks for.
- `shard_cases`: the cases are grouped by workload (so a worker builds each jagged batch once), except
  that a provider with a per-process setup (a torch.compile or CuTe JIT cache,
  `Provider.process_setup_s`) is one group of its own, never split; the groups are spread over the
  workers longest-processing-time-first by estimated wall time (bench.shard.cost). A group that alone
  is more than a fair share of the work (1/n of the total — always the case when there are fewer
  groups than workers) is split in two, so no GPU idles while one grinds through a huge workload.
- `RUN_DIR/multigpu.json` (the plan) lists every shard folder and the cases it was given, so a merge
  can be redone at any time from what is on disk and `--resume` knows what is still missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bench.config.cases import Case
from bench.errors import UsageError
from bench.shard.cost import case_cost
from bench.sweep.rundir import PLAN_FILE
from kernels.registry import get_provider
from results.files import atomic_write
from support.inputs import InputError, MiB, integer, load_json, read_regular, show

PLAN_SCHEMA = "gdpa-bench-multigpu/1"


def parse_gpus(spec: str, device_type: str, visible: int | None = None) -> list[int]:
    """The worker labels that `--gpus SPEC` asks for.

    CUDA configs: "all" is every visible device (`torch.cuda.device_count()`, or `visible`), "0,2" those
    device indices, each checked against the count. CPU configs name their workers: "0,1,2" is three
    workers with those labels (CPU sharding exists so the machinery is testable); "all" means GPUs and is
    refused there."""
    text = (spec or "").strip()
    n = None
    if device_type == "cpu" and text == "all":
        raise UsageError(
            "--gpus all: the config runs on device: cpu, where there are no GPUs to take; name CPU workers "
            "instead, e.g. --gpus 0,1"
        )
    if device_type != "cpu":
        if visible is None:
            visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        n = visible
        if n == 0:
            raise UsageError(f"--gpus {text}: the config asks for device: cuda but no CUDA GPU is visible")
    if text == "all":
        return list(range(n))
    parts = [p.strip() for p in text.split(",")]
    try:
        labels = [integer(p) for p in parts]  # ASCII digits: int() would read "٠,١" as 0,1
    except ValueError:
        raise UsageError(f"--gpus {text!r}: expected 'all' or comma-separated device indices like 0,1") from None
    for i in labels:
        if i < 0:
            raise UsageError(f"--gpus {text}: device indices are >= 0, got {i}")
    dup = next((i for i in labels if labels.count(i) > 1), None)
    if dup is not None:
        raise UsageError(f"--gpus {text}: device {dup} is listed twice (one worker per GPU)")
    if n is not None:
        bad = [i for i in labels if i >= n]
        if bad:
            raise UsageError(f"--gpus {text}: device {bad[0]} does not exist; {n} GPU(s) visible (indices 0..{n - 1})")
    return labels


def lpt(costs: list[float], n: int) -> list[list[int]]:
    """Longest processing time first: items (indices into `costs`) into `n` bins, each item to the
    least-loaded bin, largest items first; ties by index, so the result is deterministic."""
    if n < 1:
        raise ValueError("need at least one bin")
    bins: list[list[int]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        k = min(range(n), key=lambda j: (loads[j], j))
        bins[k].append(i)
        loads[k] += costs[i]
    return bins


def split_group(items: list[tuple[int, float]]) -> tuple[list, list]:
    """Two contiguous parts of a group with costs as equal as possible (each non-empty)."""
    total = sum(c for _, c in items)
    best, best_gap, run = 1, float("inf"), 0.0
    for k in range(1, len(items)):
        run += items[k - 1][1]
        gap = abs(total - 2 * run)
        if gap < best_gap:
            best, best_gap = k, gap
    return items[:best], items[best:]


def process_setup_s(provider: str) -> float:
    try:
        return float(getattr(get_provider(provider), "process_setup_s", 0.0))
    except Exception:  # an unknown provider is the runner's error to report, not the sharder's
        return 0.0


def shard_cases(cases: list[Case], n: int, model=None, cost=None, setup=None) -> list[list[Case]]:
    """Split `cases` into `n` shards balanced by estimated work (see the module docstring).

    Cases of one workload stay together unless that workload alone is more than 1/n of the total work;
    the cases of a provider with a per-process setup cost (`Provider.process_setup_s`, e.g. a
    torch.compile cache) stay together always, so one worker pays that setup rather than all of them.
    Within a shard the cases keep their input order (so each workload's cases are contiguous, which is
    what the runner groups by). Every case is in exactly one shard; the result is deterministic."""
    if n < 1:
        raise ValueError("need at least one shard")
    cost = cost or (lambda c: case_cost(c, model))
    setup = setup or process_setup_s
    name_of = {c.label: c.provider.name for c in cases}
    setup_of = {name: setup(name) for name in dict.fromkeys(name_of.values())}
    costs = [float(cost(c)) for c in cases]
    groups: dict[tuple, list[tuple[int, float]]] = {}
    for i, c in enumerate(cases):
        name = name_of[c.label]
        key = ("provider", name) if setup_of[name] > 0 else ("workload", c.workload.name)
        groups.setdefault(key, []).append((i, costs[i]))
    whole = {id(g) for k, g in groups.items() if k[0] == "provider"}  # never split
    extra = {id(g): setup_of[k[1]] for k, g in groups.items() if k[0] == "provider"}
    parts = list(groups.values())
    share = (sum(costs) + sum(extra.values())) / n
    while True:
        big = [g for g in parts if len(g) > 1 and id(g) not in whole and sum(c for _, c in g) > share * (1 + 1e-9)]
        if not big:
            break
        g = max(big, key=lambda g: (sum(c for _, c in g), -g[0][0]))
        k = parts.index(g)
        a, b = split_group(g)
        parts[k : k + 1] = [a, b]
    bins = lpt([sum(c for _, c in g) + extra.get(id(g), 0.0) for g in parts], n)
    return [[cases[i] for i in sorted(i for gi in b for i, _ in parts[gi])] for b in bins]


def plan_path(run_dir: Path) -> Path:
    return Path(run_dir) / PLAN_FILE


def read_plan(run_dir: Path, required: bool = False) -> dict | None:
    """The plan of a sharded run, checked (one-line UsageError for a malformed one); None when the folder
    has none (a UsageError when `required`)."""
    p = plan_path(run_dir)
    if not p.exists():
        if required:
            raise UsageError(f"{run_dir}: no {PLAN_FILE} here (not a run made with --gpus or submit)")
        return None
    try:
        plan = load_json(read_regular(p, kind="a multi-GPU plan (JSON)", max_bytes=64 * MiB, what=str(p)), str(p))
    except InputError as exc:
        raise UsageError(str(exc)) from None
    _check_plan(plan, p)
    return plan


def _check_plan(plan, p: Path) -> None:
    if not isinstance(plan, dict):
        raise UsageError(f"{p}: a {type(plan).__name__}; allowed: the plan object `run --gpus` writes")
    ids = plan.get("cases")
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
        raise UsageError(f"{p}: cases: {show(ids)}; allowed: a list of case ids")
    sources = plan.get("sources", [])
    if not isinstance(sources, list):
        raise UsageError(f"{p}: sources: {show(sources)}; allowed: a list of shard entries")
    for i, src in enumerate(sources):
        at = f"{p}: sources[{i}]"
        if not isinstance(src, dict) or not isinstance(src.get("dir"), str) or not src["dir"]:
            raise UsageError(f"{at}: {show(src)}; allowed: an object with a shard folder `dir`")
        if Path(src["dir"]).is_absolute() or ".." in Path(src["dir"]).parts:
            raise UsageError(f"{at}.dir: {show(src['dir'])}; allowed: a folder inside the run folder")
        ids = src.get("cases")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(x, str) for x in ids)):
            raise UsageError(f"{at}.cases: {show(ids)}; allowed: a list of case ids")
        for key in ("gpu_index", "gpu_offset", "node", "returncode"):
            v = src.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise UsageError(f"{at}.{key}: {show(v)}; allowed: an integer or null")


def write_plan(run_dir: Path, plan: dict) -> None:
    atomic_write(plan_path(run_dir), json.dumps(plan, indent=1))
