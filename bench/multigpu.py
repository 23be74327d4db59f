"""Sweeps across GPUs: one host's GPUs (`run --gpus`), a cluster through Slurm (`submit`).

    python -m bench run CONFIG --gpus all|0,1,...      # one worker process per GPU, one merged run
    python -m bench submit CONFIG --nodes N [--gpus-per-node G] [--partition P] [--local]
    python -m bench.multigpu merge RUN_DIR             # re-merge a run folder from its shards

How a sharded run works (docs/multi-gpu.md has the user's view):

- Sharding (`shard_cases`): the cases are grouped by workload (so a worker builds each jagged batch
  once), except that a provider with a per-process setup (a torch.compile or CuTe JIT cache,
  `Provider.process_setup_s`) is one group of its own, never split; the groups are spread over the
  workers longest-processing-time-first by an estimate of their wall time (`case_cost`: the runner's per-case budgets plus the FLOPs at a nominal rate). A group
  that alone is more than a fair share of the work (1/n of the total — always the case when there are
  fewer groups than workers) is split in two, so no GPU idles while one grinds through a huge workload;
  each part then builds the batch again, which costs far less than an idle GPU.
- Workers: one `python -m bench run CONFIG --device i --case-list shards/gpu<i>.txt` process per GPU,
  each the normal single-GPU runner with its own NVML monitor, GEMM calibration and correctness gate,
  so two cases never share a GPU while timed. Output goes to `shards/gpu<i>.log` and, prefixed with
  `[gpu<i> done/assigned]`, to stdout. CUDA_VISIBLE_DEVICES is left alone.
- Merge: the runner rewrites its results.json after every case, so a worker that dies loses only its
  in-flight case. The merged results.json is the union of the shard results (every case carries
  `gpu_index`, `gpu_name` and `host`), `meta` from the first shard plus `shards`, `gpu_count`
  (workers) and `missing_cases` (assigned but not recorded), power.csv concatenated.
- `RUN_DIR/multigpu.json` (the plan) lists every shard folder and the cases it was given, so the merge
  can be redone at any time from what is on disk (`python -m bench.multigpu merge RUN_DIR`) and
  `--resume RUN_DIR --gpus ...` runs only the cases still missing, in new shard folders.

`device: cpu` configs shard over CPU worker processes instead ("all" = 2 workers, "0,1,2" = three
workers labelled 0, 1, 2): that exists so sharding, merging and kill recovery are testable without a GPU.
"""
from __future__ import annotations

import copy
import csv
import io
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from bench.config import Case, LoadedConfig
from bench.results import SCHEMA, ResultsWriter, _atomic_write, load_results
from bench.runner import sigterm_as_interrupt

REPO_ROOT = Path(__file__).resolve().parents[1]
PLAN_FILE = "multigpu.json"
PLAN_SCHEMA = "gdpa-bench-multigpu/1"
CPU_ALL_WORKERS = 2  # what `--gpus all` means for a `device: cpu` config
# Nominal rates that turn FLOPs into seconds for the shard balance (only ratios matter): an attention
# kernel on a datacenter GPU, eager PyTorch on a CPU.
NOMINAL_FLOPS_PER_S = {"cuda": 100e12, "cpu": 1e9}
SETUP_S = 0.25  # per case: provider lookup, support check, allocation, bookkeeping
STOP_GRACE_S = 60.0  # after SIGTERM, how long a worker may take to write its results before SIGKILL


def _usage(msg: str) -> Exception:
    from bench.cli import UsageError
    return UsageError(msg)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------- --gpus


def parse_gpus(spec: str, device_type: str, visible: int | None = None) -> list[int]:
    """The worker labels that `--gpus SPEC` asks for.

    CUDA configs: "all" is every visible device (`torch.cuda.device_count()`, or `visible`), "0,2" those
    device indices, each checked against the count. CPU configs: "all" is `CPU_ALL_WORKERS` workers and
    "0,1,2" that many workers with those labels (CPU sharding exists so the machinery is testable)."""
    text = (spec or "").strip()
    n = None
    if device_type != "cpu":
        if visible is None:
            import torch
            visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        n = visible
        if n == 0:
            raise _usage(f"--gpus {text}: the config asks for device: cuda but no CUDA GPU is visible")
    if text == "all":
        return list(range(CPU_ALL_WORKERS if n is None else n))
    parts = [p.strip() for p in text.split(",")]
    try:
        labels = [int(p) for p in parts]
    except ValueError:
        raise _usage(f"--gpus {text!r}: expected 'all' or comma-separated device indices like 0,1")
    for i in labels:
        if i < 0:
            raise _usage(f"--gpus {text}: device indices are >= 0, got {i}")
    dup = next((i for i in labels if labels.count(i) > 1), None)
    if dup is not None:
        raise _usage(f"--gpus {text}: device {dup} is listed twice (one worker per GPU)")
    if n is not None:
        bad = [i for i in labels if i >= n]
        if bad:
            raise _usage(f"--gpus {text}: device {bad[0]} does not exist; {n} GPU(s) visible "
                         f"(indices 0..{n - 1})")
    return labels


# ------------------------------------------------------------------------------------ sharding

_PAIRS_CACHE: dict[tuple, float] = {}


def _workload_pairs(w) -> float:
    """Σ Lq·Lk (unmasked pairs) of a workload, from its deterministic lengths; B·maxL² if they cannot be
    built here (e.g. an empirical file that only exists on the cluster)."""
    key = (w.name, w.B, w.seed, w.max_len)
    if key not in _PAIRS_CACHE:
        try:
            from workloads import build_lengths, work_pairs
            q, kv = build_lengths(w.family, w.family_params, w.rule, w.rule_params, batch_size=w.B,
                                  max_len=w.max_len, seed=w.seed, sort=w.sort_by_length)
            _PAIRS_CACHE[key] = float(work_pairs(q, kv, causal=w.causal).sum())
        except Exception:
            _PAIRS_CACHE[key] = float(w.B) * w.max_len * w.max_len
    return _PAIRS_CACHE[key]


def case_flops_estimate(case: Case) -> float:
    """The runner's FLOP count of a case (bench.runner.case_flops, the peers' convention)."""
    from bench.runner import FLOP_FACTOR
    w = case.workload
    return 4.0 * w.H * w.D * _workload_pairs(w) * FLOP_FACTOR[case.mode]


def case_cost(case: Case, model=None) -> float:
    """Estimated wall seconds of one case in the runner.

    Timing budgets are per case, so a small case costs its budgets (warmup_ms + rep_ms, the ≥ 1 s
    energy loop on a GPU with power on) whatever its FLOPs, while a big one costs its calls: FLOPs at a
    nominal rate × (correctness + first call + warmup + min_reps). Only the ratios between cases matter.
    """
    device = getattr(model, "device", "cuda") if model is not None else "cuda"
    call_s = case_flops_estimate(case) / NOMINAL_FLOPS_PER_S.get(device, NOMINAL_FLOPS_PER_S["cuda"])
    if model is None:
        return SETUP_S + 0.125 + 8 * call_s
    t = model.timing
    cost = SETUP_S + call_s  # the untimed first call (compile / autotune / allocate)
    if model.correctness.enabled:
        cost += call_s
    cost += max(t.warmup_ms / 1e3, call_s)
    cost += max(min(t.rep_ms / 1e3, t.max_reps * call_s), t.min_reps * call_s)
    if device == "cuda" and model.power.enabled and model.power.energy_loop_s > 0:
        cost += max(model.power.energy_loop_s, call_s)
    return cost


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


def _split(items: list[tuple[int, float]]) -> tuple[list, list]:
    """Two contiguous parts of a group with costs as equal as possible (each non-empty)."""
    total = sum(c for _, c in items)
    best, best_gap, run = 1, float("inf"), 0.0
    for k in range(1, len(items)):
        run += items[k - 1][1]
        gap = abs(total - 2 * run)
        if gap < best_gap:
            best, best_gap = k, gap
    return items[:best], items[best:]


def _process_setup_s(provider: str) -> float:
    try:
        from kernels.registry import get_provider
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
    setup = setup or _process_setup_s
    setup_of = {p: setup(p) for p in dict.fromkeys(c.provider for c in cases)}
    costs = [float(cost(c)) for c in cases]
    groups: dict[tuple, list[tuple[int, float]]] = {}
    for i, c in enumerate(cases):
        key = ("provider", c.provider) if setup_of[c.provider] > 0 else ("workload", c.workload.name)
        groups.setdefault(key, []).append((i, costs[i]))
    whole = {id(g) for k, g in groups.items() if k[0] == "provider"}  # never split
    extra = {id(g): setup_of[k[1]] for k, g in groups.items() if k[0] == "provider"}
    parts = list(groups.values())
    total = sum(costs) + sum(extra.values())
    share = total / n if n else total
    while True:
        big = [g for g in parts if len(g) > 1 and id(g) not in whole and sum(c for _, c in g) > share * (1 + 1e-9)]
        if not big:
            break
        g = max(big, key=lambda g: (sum(c for _, c in g), -g[0][0]))
        k = parts.index(g)
        a, b = _split(g)
        parts[k:k + 1] = [a, b]
    bins = lpt([sum(c for _, c in g) + extra.get(id(g), 0.0) for g in parts], n)
    return [[cases[i] for i in sorted(i for gi in b for i, _ in parts[gi])] for b in bins]


# -------------------------------------------------------------------------------------- merge


@dataclass
class Shard:
    """One worker's run folder, as the merge sees it."""

    dir: Path
    gpu_index: int | None = None  # label stamped on its cases and power rows (None: keep recorded + offset)
    gpu_offset: int = 0  # added to the recorded gpu_index when gpu_index is None
    node: int | None = None
    local_index: int | None = None  # the GPU index on its node (cluster runs)
    expected: list[str] | None = None  # the case ids it was given (None: unknown)
    returncode: int | None = None


def _read_ids(path: Path) -> list[str] | None:
    try:
        return path.read_text().split()
    except OSError:
        return None


def _rc_text(rc: int | None) -> str:
    if rc is None:
        return "unknown exit status"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    if rc == 130:
        return "interrupted (exit 130)"
    return f"exit {rc}"


def _merge(shards: list[Shard], out_dir: Path, expected_all: list[str] | None = None,
           interrupted: bool = False, extra_meta: dict | None = None) -> dict:
    """Union of the shard runs into `out_dir` (results.json, results.csv, power.csv). Later shards
    override earlier ones for the same case id (a resumed attempt over an earlier one)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    by_id: dict[str, dict] = {}
    workloads: dict[str, dict] = {}
    metas: list[dict] = []
    entries: list[dict] = []
    power_rows: list[dict] = []
    power_header: list[str] | None = None
    last_time: dict[int, float] = {}
    for sh in shards:
        d = Path(sh.dir)
        entry = {"gpu_index": sh.gpu_index, "node": sh.node, "local_gpu_index": sh.local_index, "dir": os.path.relpath(d, out_dir),
                 "gpu": None, "host": None, "cases": 0, "assigned": len(sh.expected) if sh.expected is not None else None,
                 "missing": [], "returncode": sh.returncode, "measured_gemm_tflops": None, "started_at": None,
                 "finished_at": None, "interrupted": None, "error": None}
        data = None
        if (d / "results.json").is_file():
            try:
                data = load_results(d)
            except (ValueError, OSError) as exc:  # JSONDecodeError is a ValueError
                entry["error"] = f"results.json unreadable: {type(exc).__name__}: {exc}"[:300]
        else:
            entry["error"] = "no results.json (the worker never started a case)"
        recorded: set[str] = set()
        if data is not None:
            meta = data.get("meta") or {}
            metas.append(meta)
            entry.update(gpu=meta.get("gpu") or meta.get("device"), host=meta.get("host"),
                         measured_gemm_tflops=meta.get("measured_gemm_tflops"),
                         started_at=meta.get("started_at"), finished_at=meta.get("finished_at"),
                         interrupted=meta.get("interrupted"))
            workloads.update(data.get("workloads") or {})
            for case in data.get("cases") or []:
                case = dict(case)
                if sh.gpu_index is not None:
                    case["gpu_index"] = sh.gpu_index
                else:
                    case["gpu_index"] = int(case.get("gpu_index") or 0) + sh.gpu_offset
                case["gpu_name"] = case.get("gpu_name") or meta.get("gpu") or meta.get("device")
                case.setdefault("host", meta.get("host"))
                if sh.node is not None:
                    case["node"] = sh.node
                    case["local_gpu_index"] = sh.local_index
                by_id.pop(case["id"], None)  # a later attempt replaces (and re-orders) an earlier one
                by_id[case["id"]] = case
                recorded.add(case["id"])
            if entry["gpu_index"] is None:
                idx = sorted({by_id[i]["gpu_index"] for i in recorded})
                entry["gpu_index"] = idx[0] if len(idx) == 1 else (idx or None)
        entry["cases"] = len(recorded)
        if sh.expected is not None:
            entry["missing"] = [i for i in sh.expected if i not in recorded]
        entries.append(entry)
        # power.csv: rows re-labelled with the merged gpu_index; a later attempt on the same GPU is put
        # after the earlier one on the time axis (each monitor starts its clock at 0)
        pfile = d / "power.csv"
        if pfile.is_file():
            with open(pfile, newline="") as f:
                reader = csv.DictReader(f)
                header = list(reader.fieldnames or [])
                rows = list(reader)
            if header:
                power_header = power_header or header
                shifted: dict[int, float] = {}
                for r in rows:
                    try:
                        g = int(float(r.get("gpu_index") or 0))
                    except ValueError:
                        g = 0
                    g = sh.gpu_index if sh.gpu_index is not None else g + sh.gpu_offset
                    r["gpu_index"] = str(g)
                    if g not in shifted:
                        shifted[g] = last_time[g] + 1.0 if g in last_time else 0.0
                    try:
                        t = float(r.get("time_s") or "nan") + shifted[g]
                        r["time_s"] = f"{t:.6f}"
                        last_time[g] = max(last_time.get(g, t), t)
                    except ValueError:
                        pass
                    power_rows.append(r)

    meta = copy.deepcopy(metas[0]) if metas else {"started_at": None}
    names = [m.get("gpu") for m in metas if m.get("gpu")]
    distinct = list(dict.fromkeys(names))
    if len(distinct) > 1:
        meta["gpu"] = " / ".join(distinct)
    gemms = [e["measured_gemm_tflops"] for e in entries if isinstance(e["measured_gemm_tflops"], (int, float))]
    starts = [e["started_at"] for e in entries if e["started_at"]]
    labels = []
    for e in entries:
        for g in (e["gpu_index"] if isinstance(e["gpu_index"], list) else [e["gpu_index"]]):
            if g is not None and g not in labels:
                labels.append(g)
    expected = list(expected_all) if expected_all is not None else []
    for e, sh in zip(entries, shards):
        for i in sh.expected or []:
            if i not in expected:
                expected.append(i)
    missing = [i for i in dict.fromkeys(expected) if i not in by_id]
    meta.update(
        gpu_count=len(labels) or len(shards),
        shards=entries,
        missing_cases=missing,
        started_at=min(starts) if starts else meta.get("started_at"),
        finished_at=_now(),
        merged_at=_now(),
        # a shard interrupted in an earlier attempt does not make a completed (resumed) run partial
        interrupted=bool(interrupted or (missing and any(e["interrupted"] for e in entries))),
        # the report's run-level GEMM ceiling: the median GPU (each case's util_measured used its own)
        measured_gemm_tflops=statistics.median(gemms) if gemms else meta.get("measured_gemm_tflops"),
    )
    if extra_meta:
        meta.update(extra_meta)
    order = {cid: k for k, cid in enumerate(expected)}
    cases = sorted(by_id.values(), key=lambda c: order.get(c["id"], len(order)))
    data = {"schema": SCHEMA, "meta": meta, "workloads": workloads, "cases": cases}
    ResultsWriter(out_dir, meta, existing=data)
    if power_header is not None:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=power_header, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(power_rows)
        _atomic_write(out_dir / "power.csv", buf.getvalue())
    return data


def merge_run_dirs(shard_dirs: list[Path], out_dir: Path, expected_ids: dict[str, list[str]] | None = None) -> dict:
    """Merge finished (or partly finished) single-GPU run folders into one run folder; return its data.

    A folder named `gpu<i>` stamps `gpu_index = i` on its cases and power rows (CPU workers all record
    0); any other keeps what its cases recorded. `expected_ids` maps a shard (its folder name, or its
    path as a string) to the case ids it was given; without an entry, a `<folder>.txt` list next to the
    folder (what `run --gpus` writes) is used. Ids expected but recorded nowhere are `meta.missing_cases`."""
    shards = []
    for pos, d in enumerate(map(Path, shard_dirs)):
        m = re.fullmatch(r"gpu(\d+)", d.name)
        exp = None
        if expected_ids is not None:
            exp = expected_ids.get(d.name, expected_ids.get(str(d)))
        if exp is None:
            exp = _read_ids(d.with_name(d.name + ".txt"))
        shards.append(Shard(dir=d, gpu_index=int(m.group(1)) if m else None, expected=exp))
    return _merge(shards, Path(out_dir))


# ---------------------------------------------------------------------------------- the plan


def _plan_path(run_dir: Path) -> Path:
    return Path(run_dir) / PLAN_FILE


def _read_plan(run_dir: Path) -> dict | None:
    p = _plan_path(run_dir)
    if not p.is_file():
        return None
    return json.loads(p.read_text())


def _write_plan(run_dir: Path, plan: dict) -> None:
    _atomic_write(_plan_path(run_dir), json.dumps(plan, indent=1))


def _shards_from_plan(run_dir: Path, plan: dict) -> tuple[list[Shard], list[str]]:
    """Every shard the plan knows of, in attempt order, and every case id it ever assigned."""
    shards: list[Shard] = []
    expected: list[str] = list(plan.get("cases") or [])
    for src in plan.get("sources", []):
        d = run_dir / src["dir"]
        expected.extend(src.get("cases") or [])
        if src.get("kind") == "node":  # a Slurm node: its own plan (or, if it died early, its folders)
            offset, node = src.get("gpu_offset", 0), src.get("node")
            sub = _read_plan(d)
            if sub is not None:
                for s2 in sub.get("sources", []):
                    local = s2.get("gpu_index")
                    shards.append(Shard(dir=d / s2["dir"], gpu_index=None if local is None else offset + local,
                                        gpu_offset=offset, node=node, local_index=local,
                                        expected=s2.get("cases"), returncode=s2.get("returncode")))
                continue
            found = sorted((p for p in (d / "shards").glob("gpu*") if p.is_dir() and re.fullmatch(r"gpu\d+", p.name)),
                           key=lambda p: int(p.name[3:]))
            for p in found:
                local = int(p.name[3:])
                shards.append(Shard(dir=p, gpu_index=offset + local, gpu_offset=offset, node=node,
                                    local_index=local, expected=_read_ids(p.with_name(p.name + ".txt"))))
        else:
            shards.append(Shard(dir=d, gpu_index=src.get("gpu_index"), node=src.get("node"),
                                expected=src.get("cases"), returncode=src.get("returncode")))
    return shards, list(dict.fromkeys(expected))


def merge_planned(run_dir: Path, interrupted: bool = False) -> dict:
    """Re-merge a sharded run folder from its plan (multigpu.json) and whatever its shards recorded."""
    run_dir = Path(run_dir)
    plan = _read_plan(run_dir)
    if plan is None:
        raise _usage(f"{run_dir}: no {PLAN_FILE} here (not a run made with --gpus or submit)")
    shards, expected = _shards_from_plan(run_dir, plan)
    return _merge(shards, run_dir, expected_all=expected, interrupted=interrupted,
                  extra_meta={"config": plan.get("config"), "multigpu": plan.get("kind")})


# ------------------------------------------------------------------------------------ workers


def _worker_env(n_workers: int, device_type: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONUNBUFFERED"] = "1"
    if device_type == "cpu" and "OMP_NUM_THREADS" not in env:
        # CPU workers share the cores: without this every worker starts one thread per core
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // n_workers))
    return env


class _Worker:
    def __init__(self, label: int, cases: list[Case], shard_dir: Path, list_file: Path, log_file: Path,
                 cmd: list[str], env: dict, tag: str, out_lock: threading.Lock):
        self.label, self.shard_dir, self.tag, self.lock = label, shard_dir, tag, out_lock
        self.ids = [c.id for c in cases]
        self._idset = set(self.ids)
        self.done = 0
        list_file.write_text("".join(i + "\n" for i in self.ids))
        self.log = open(log_file, "w", buffering=1)
        self.log.write("$ " + " ".join(cmd) + "\n")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)  # Ctrl-C reaches the parent only: it stops us
        self.thread = threading.Thread(target=self._pump, name=f"{tag}-out", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.log.write(line + "\n")
            head = line.strip().split(": ", 1)[0]
            if head in self._idset:
                self.done += 1
            with self.lock:
                print(f"[{self.tag} {self.done}/{len(self.ids)}] {line}", flush=True)
        self.proc.stdout.close()

    def finish(self) -> int:
        rc = self.proc.wait()
        self.thread.join(timeout=10)
        self.log.write(f"# exit: {_rc_text(rc)}\n")
        self.log.close()
        return rc


def _launch(cfg: LoadedConfig, assignment: list[tuple[int, list[Case]]], shard_root: Path,
            tag_prefix: str = "") -> tuple[dict[int, int], bool]:
    """One `python -m bench run` per (label, cases); returns {label: returncode} and whether the
    parent was interrupted (Ctrl-C / SIGTERM: the workers are stopped with SIGTERM, their finished
    cases kept)."""
    shard_root.mkdir(parents=True, exist_ok=True)
    device_type = cfg.model.device
    env = _worker_env(len(assignment), device_type)
    lock = threading.Lock()
    workers: list[_Worker] = []
    interrupted = False
    try:
        with sigterm_as_interrupt():
            for label, cases in assignment:
                sd = shard_root / f"gpu{label}"
                cmd = [sys.executable, "-m", "bench", "run", str(cfg.path), "--out", str(sd),
                       "--device", str(label), "--case-list", str(shard_root / f"gpu{label}.txt"), "--no-progress",
                       "--no-report"]
                w = _Worker(label, cases, sd, shard_root / f"gpu{label}.txt", shard_root / f"gpu{label}.log",
                            cmd, env, f"{tag_prefix}gpu{label}", lock)
                workers.append(w)
                with lock:
                    print(f"[{w.tag}] pid {w.proc.pid}: {len(cases)} cases -> {sd} (log {sd}.log)", flush=True)
            while any(w.proc.poll() is None for w in workers):
                time.sleep(0.2)
    except KeyboardInterrupt:
        interrupted = True
        alive = [w for w in workers if w.proc.poll() is None]
        print(f"interrupted: stopping {len(alive)} worker(s); their finished cases are kept", flush=True)
        for w in alive:
            w.proc.send_signal(signal.SIGTERM)  # the runner treats SIGTERM like Ctrl-C
        deadline = time.monotonic() + STOP_GRACE_S
        for w in alive:
            try:
                w.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.kill()
    return {w.label: w.finish() for w in workers}, interrupted


def _run_local(cfg: LoadedConfig, cases: list[Case], run_dir: Path, labels: list[int], *, resume: bool = False,
               render: bool = True, tag_prefix: str = "") -> int:
    """Shard `cases` over `labels` workers into run_dir, merge, optionally render; the exit code."""
    run_dir = Path(run_dir).resolve()
    plan = _read_plan(run_dir) if resume else None
    if resume and plan is None:
        plan = _adopt_single_run(run_dir, cfg)
    if plan is None:
        plan = {"schema": PLAN_SCHEMA, "kind": "local", "config": str(cfg.path), "cases": [], "sources": []}
        shard_root = run_dir / "shards"
    else:
        k = sum(1 for p in (run_dir / "shards").glob("resume*") if p.is_dir()) + 1
        shard_root = run_dir / "shards" / f"resume{k}"
    known = set(plan.setdefault("cases", []))
    plan["cases"] += [c.id for c in cases if c.id not in known]  # config order: the merged order
    shards = shard_cases(cases, len(labels), cfg.model)
    assignment = [(lab, sc) for lab, sc in zip(labels, shards) if sc]
    idle = [lab for lab, sc in zip(labels, shards) if not sc]
    if idle:
        print(f"note: {len(idle)} worker(s) get no case (only {len(cases)} cases): "
              + ", ".join(f"gpu{i}" for i in idle), flush=True)
    for lab, sc in assignment:
        plan["sources"].append({"dir": os.path.relpath(shard_root / f"gpu{lab}", run_dir), "gpu_index": lab,
                                "cases": [c.id for c in sc], "returncode": None})
    run_dir.mkdir(parents=True, exist_ok=True)
    _write_plan(run_dir, plan)
    what = "GPU" if cfg.model.device == "cuda" else "CPU worker"
    print(f"gdpa-bench: {len(cases)} cases from {cfg.path} on {len(assignment)} {what}(s) "
          f"[{', '.join(str(lab) for lab, _ in assignment)}] -> {run_dir}", flush=True)
    rcs, interrupted = _launch(cfg, assignment, shard_root, tag_prefix)
    new = plan["sources"][len(plan["sources"]) - len(assignment):]
    for src, (lab, _) in zip(new, assignment):
        src["returncode"] = rcs.get(lab)
    _write_plan(run_dir, plan)
    data = merge_planned(run_dir, interrupted=interrupted)
    return _conclude(run_dir, data, rcs, interrupted, render, tag_prefix)


def _conclude(run_dir: Path, data: dict, rcs: dict, interrupted: bool, render: bool, tag_prefix: str = "",
              unit: str = "gpu") -> int:
    meta = data["meta"]
    counts: dict[str, int] = {}
    for c in data["cases"]:
        counts[c.get("status") or "?"] = counts.get(c.get("status") or "?", 0) + 1
    bad = {lab: rc for lab, rc in rcs.items() if rc != 0}
    missing = meta.get("missing_cases") or []
    for lab, rc in sorted(bad.items()):
        print(f"{tag_prefix}{unit}{lab}: worker {_rc_text(rc)} (log: {_log_hint(run_dir, lab, unit)})", flush=True)
    if missing:
        print(f"MISSING: {len(missing)} case(s) were assigned but never recorded "
              f"(in flight or not started when a worker stopped; `--resume {run_dir} --gpus ...` runs them):",
              flush=True)
        for i in missing:
            print(f"  missing: {i}", flush=True)
    if render:
        from bench.cli import _render
        _render(run_dir)
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "no case recorded"
    print(f"done: {summary} on {meta.get('gpu_count')} worker(s)"
          + (f", {len(missing)} missing" if missing else "") + f". results: {run_dir / 'results.json'}", flush=True)
    if interrupted:
        return 130
    return 1 if bad or missing else 0


def _log_hint(run_dir: Path, lab, unit: str) -> str:
    if unit == "node":
        return str(run_dir / "submitit")
    cands = sorted(run_dir.glob(f"shards/**/gpu{lab}.log"), key=lambda p: p.stat().st_mtime)
    return str(cands[-1]) if cands else str(run_dir / "shards")


def _adopt_single_run(run_dir: Path, cfg: LoadedConfig) -> dict:
    """--resume --gpus on a run made without --gpus: its files become the plan's first shard."""
    base = run_dir / "shards" / "base"
    base.mkdir(parents=True, exist_ok=True)
    for name in ("results.json", "results.csv", "power.csv", "errors.log"):
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, base / name)
    data = load_results(base)
    plan = {"schema": PLAN_SCHEMA, "kind": "local", "config": str(cfg.path),
            "cases": [c["id"] for c in data.get("cases", [])],
            "sources": [{"dir": "shards/base", "gpu_index": None, "cases": [c["id"] for c in data.get("cases", [])],
                         "returncode": 0}]}
    _write_plan(run_dir, plan)
    return plan


# ------------------------------------------------------------------------------- run --gpus


def run_sharded(cfg: LoadedConfig, cases: list[Case], a) -> int:
    """`python -m bench run CONFIG --gpus ...`: one worker per GPU, one merged run folder."""
    from bench.runner import default_run_dir
    if getattr(a, "device", None) is not None:
        raise _usage("--device and --gpus cannot be combined: --gpus picks the devices")
    labels = parse_gpus(a.gpus, cfg.model.device)
    if a.resume:
        run_dir = Path(a.resume)
        if not run_dir.is_dir():
            raise _usage(f"--resume {run_dir}: no such folder")
        if not (run_dir / "results.json").is_file():
            if _read_plan(run_dir) is None:
                raise _usage(f"--resume {run_dir}: no results.json there")
            merge_planned(run_dir)  # the parent died before merging: merge what the shards recorded
        done = {c["id"] for c in load_results(run_dir).get("cases", [])}
        todo = [c for c in cases if c.id not in done]
        print(f"resuming: {len(cases) - len(todo)} of {len(cases)} cases already recorded", flush=True)
        if not todo:
            if _read_plan(run_dir) is not None:
                data = merge_planned(run_dir)
                return _conclude(run_dir.resolve(), data, {}, False, True)
            print(f"done: nothing to do. results: {run_dir / 'results.json'}", flush=True)
            return 0
        return _run_local(cfg, todo, run_dir, labels, resume=True)
    run_dir = Path(a.out or default_run_dir(cfg))
    if (run_dir / "results.json").exists() or _plan_path(run_dir).exists():
        raise _usage(f"--out {run_dir}: already holds a run; pass --resume {run_dir} to continue it "
                     "or choose another folder")
    return _run_local(cfg, cases, run_dir, labels)


# ------------------------------------------------------------------------------------ submit


SLURM_ARGS_ENV = "GDPA_BENCH_SLURM_ARGS"
CPUS_PER_GPU = 4


def slurm_executor(folder: Path, name: str, gpus_per_node: int, timeout_min: int, partition: str | None = None):
    """submitit's Slurm executor for one node-job: nodes=1, one task, `gpus_per_node` GPUs,
    CPUS_PER_GPU cores per GPU (the worker processes), the partition and time limit. Site options the
    CLI has no flag for (account, qos, mem, constraint, cpus_per_task ...) come from the environment:
    GDPA_BENCH_SLURM_ARGS="account=ads,qos=high,mem=0" (each becomes `#SBATCH --key=value`)."""
    import submitit
    extra: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in os.environ.get(SLURM_ARGS_ENV, "").split(","))):
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise _usage(f"{SLURM_ARGS_ENV}: expected key=value items separated by commas, got {item!r}")
        extra[key.strip().replace("-", "_")] = val.strip()
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    except RuntimeError as exc:  # submitit: 'Could not detect "srun", are you indeed on a slurm cluster?'
        raise _usage(f"bench submit: {exc} (--local runs the nodes on this machine)")
    cpus = extra.pop("cpus_per_task", str(CPUS_PER_GPU * gpus_per_node))
    if not cpus.isdigit() or int(cpus) < 1:
        raise _usage(f"{SLURM_ARGS_ENV}: cpus_per_task must be a positive integer, got {cpus!r}")
    params = dict(name=name, nodes=1, tasks_per_node=1, gpus_per_node=gpus_per_node, timeout_min=timeout_min,
                  cpus_per_task=int(cpus))
    if partition:
        params["slurm_partition"] = partition
    if extra:
        params["slurm_additional_parameters"] = extra
    executor.update_parameters(**params)
    return executor


def _node_job(config_path: str, node_dir: str, case_ids: list[str], gpus: str, node: int) -> dict:
    """One Slurm job: shard its cases over this node's GPUs (a local sharded run in node_dir)."""
    from bench.config import load_config
    cfg = load_config(config_path)
    wanted = set(case_ids)
    cases = [c for c in cfg.cases if c.id in wanted]
    labels = parse_gpus(gpus, cfg.model.device)
    rc = _run_local(cfg, cases, Path(node_dir), labels, render=False, tag_prefix=f"node{node}/")
    data = load_results(node_dir)
    return {"node": node, "host": socket.gethostname(), "returncode": rc, "recorded": len(data["cases"]),
            "missing": data["meta"].get("missing_cases", [])}


def submit(cfg: LoadedConfig, a) -> int:
    """`python -m bench submit CONFIG --nodes N ...`: one job per node through submitit, then one merge."""
    try:
        import submitit
    except ImportError:
        raise _usage("bench submit needs submitit: pip install -e '.[cluster]'")
    from bench.runner import default_run_dir, one_line
    for name, val in (("--nodes", a.nodes), ("--gpus-per-node", a.gpus_per_node), ("--timeout-min", a.timeout_min)):
        if val is None or val < 1:
            raise _usage(f"{name}: must be a positive integer, got {val}")
    from bench.cli import select_cases
    cases = select_cases(cfg, a.only, a.providers)
    cuda = cfg.model.device == "cuda"
    G, N = a.gpus_per_node, a.nodes
    if a.local and cuda:
        import torch
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if N * G > have:
            raise _usage(f"--local --nodes {N} --gpus-per-node {G}: needs {N * G} GPUs here, {have} visible")
    if not a.local and shutil.which("sbatch") is None:
        raise _usage("bench submit: Slurm's sbatch is not on PATH here; "
                     "--local runs the nodes on this machine (testing)")
    run_dir = Path(a.out or default_run_dir(cfg)).resolve()
    if (run_dir / "results.json").exists() or _plan_path(run_dir).exists():
        raise _usage(f"--out {run_dir}: already holds a run; choose another folder")
    folder = run_dir / "submitit"
    if a.local:
        executor = submitit.LocalExecutor(folder=folder)
    else:
        executor = slurm_executor(folder, f"gdpa-bench-{cfg.name}", G, a.timeout_min, a.partition)
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = str(cfg.path.resolve())
    node_cases = shard_cases(cases, N, cfg.model)
    plan = {"schema": PLAN_SCHEMA, "kind": "local-submit" if a.local else "slurm", "config": str(cfg.path),
            "gpus_per_node": G, "cases": [c.id for c in cases], "sources": []}
    for k, nc in enumerate(node_cases):
        plan["sources"].append({"kind": "node", "dir": f"nodes/node{k}", "node": k, "gpu_offset": k * G,
                                "cases": [c.id for c in nc], "job_id": None})
    _write_plan(run_dir, plan)
    # the job processes unpickle bench.multigpu._node_job: they must import this checkout
    pp = os.environ.get("PYTHONPATH", "")
    if str(REPO_ROOT) not in pp.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([pp] if pp else []))
    gpus = "all" if cuda else ",".join(str(i) for i in range(G))
    jobs = {}
    for k, nc in enumerate(node_cases):
        if not nc:
            print(f"node{k}: no case (only {len(cases)} cases for {N} nodes); not submitted", flush=True)
            continue
        if a.local:
            executor.update_parameters(timeout_min=a.timeout_min, nodes=1, tasks_per_node=1,
                                       gpus_per_node=G if cuda else 0,
                                       visible_gpus=tuple(range(k * G, (k + 1) * G)) if cuda else ())
        try:
            job = executor.submit(_node_job, config_path, str(run_dir / f"nodes/node{k}"), [c.id for c in nc], gpus, k)
        except Exception as exc:  # sbatch refused (bad partition, account, limits): nothing half-submitted
            for j in jobs.values():
                try:
                    j.cancel(check=False)
                except Exception:
                    pass
            raise _usage(f"bench submit: submitting node{k} failed: {one_line(exc)}"
                         + (f" (cancelled the {len(jobs)} job(s) already submitted)" if jobs else ""))
        jobs[k] = job
        plan["sources"][k]["job_id"] = str(job.job_id)
        print(f"node{k}: job {job.job_id}, {len(nc)} cases, log {job.paths.stdout}", flush=True)
    _write_plan(run_dir, plan)
    print(f"waiting for {len(jobs)} job(s); if this process dies, merge later with "
          f"`python -m bench.multigpu merge {run_dir}`", flush=True)
    rcs: dict[int, int] = {}
    interrupted = False
    try:
        with sigterm_as_interrupt():
            for k, job in jobs.items():
                try:
                    res = job.result()
                    rcs[k] = int(res.get("returncode", 1))
                    print(f"node{k}: {res.get('recorded')} cases recorded on {res.get('host')}, "
                          f"{len(res.get('missing') or [])} missing, exit {rcs[k]}", flush=True)
                except Exception as exc:  # the job failed, timed out or was cancelled: keep what it wrote
                    rcs[k] = 1
                    print(f"node{k}: job {job.job_id} failed: {one_line(exc)}", flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: cancelling the jobs; their finished cases are kept", flush=True)
        for job in jobs.values():
            try:
                job.cancel(check=False)
            except Exception:
                pass
    data = merge_planned(run_dir, interrupted=interrupted)
    return _conclude(run_dir, data, rcs, interrupted, render=True, unit="node")


# -------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.multigpu merge RUN_DIR`: redo the merge of a sharded run from its shards."""
    import argparse
    from bench.cli import UsageError, _render
    p = argparse.ArgumentParser(prog="python -m bench.multigpu")
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge", help="merge a --gpus / submit run folder again from its shard folders")
    m.add_argument("run_dir")
    a = p.parse_args(argv)
    try:
        data = merge_planned(Path(a.run_dir))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _render(Path(a.run_dir))
    missing = data["meta"].get("missing_cases") or []
    print(f"merged {len(data['cases'])} cases from {len(data['meta']['shards'])} shard(s)"
          + (f"; {len(missing)} missing" if missing else "") + f": {Path(a.run_dir) / 'results.json'}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
