"""Merging shard run folders into one run (docs/DESIGN.md §10).

Each worker is the normal single-GPU runner, which rewrites its results.json after every case, so a
worker that dies loses only its in-flight case. The merged results.json is the union of the shard
results (every case carries `gpu_index`, `gpu_name` and `host`), `meta` from the first shard plus
`shards`, `gpu_count` (the GPUs used) and `missing_cases` (assigned but not recorded); power.csv holds
every shard's timeline. Later shards override earlier ones for the same case id (a resumed attempt).
"""

from __future__ import annotations

import copy
import os
import re
import signal
import statistics
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from bench.errors import UsageError
from bench.shard.plan import PLAN_FILE, read_plan
from results.files import SCHEMA, ResultsWriter, atomic_write, read_results
from results.power_csv import append_timeline, read_power_text
from support.text import one_line


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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


def read_ids(path: Path) -> list[str] | None:
    try:
        return [line for line in path.read_text().splitlines() if line.strip()]  # one case id a line
    except OSError:
        return None


def rc_text(rc: int | None) -> str:
    if rc is None:
        return "unknown exit status"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    if rc in (130, 143):
        return f"interrupted (exit {rc})"
    return f"exit {rc}"


def merge_shards(
    shards: list[Shard],
    out_dir: Path,
    expected_all: list[str] | None = None,
    interrupted: bool = False,
    extra_meta: dict | None = None,
    strict: bool = False,
) -> dict:
    """Union of the shard runs into `out_dir` (results.json, results.csv, power.csv). Later shards
    override earlier ones for the same case id (a resumed attempt over an earlier one). `strict` (the
    `merge` command): a shard's results.json that is there but unreadable is a UsageError before anything is
    written, not a shard of no cases (which would rewrite the merged results.json without them)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    by_id: dict[str, dict] = {}
    workloads: dict[str, dict] = {}
    metas: list[dict] = []
    entries: list[dict] = []
    power: pd.DataFrame | None = None
    for sh in shards:
        d = Path(sh.dir)
        entry = {
            "gpu_index": sh.gpu_index,
            "node": sh.node,
            "local_gpu_index": sh.local_index,
            "dir": os.path.relpath(d, out_dir),
            "gpu": None,
            "host": None,
            "cases": 0,
            "assigned": len(sh.expected) if sh.expected is not None else None,
            "missing": [],
            "returncode": sh.returncode,
            "measured_gemm_tflops": None,
            "started_at": None,
            "finished_at": None,
            "interrupted": None,
            "error": None,
        }
        data = None
        if (d / "results.json").is_file():
            try:
                data = read_results(d)
            except (ValueError, OSError) as exc:
                if strict:
                    raise UsageError(
                        f"{d / 'results.json'}: unreadable ({one_line(exc)}); merging would drop its cases: "
                        "repair or remove it, then merge again"
                    ) from None
                entry["error"] = f"results.json unreadable: {type(exc).__name__}: {exc}"[:300]
        else:
            entry["error"] = "no results.json (the worker never started a case)"
        recorded: set[str] = set()
        if data is not None:
            meta = data.get("meta") or {}
            metas.append(meta)
            entry.update(
                gpu=meta.get("gpu") or meta.get("device"),
                host=meta.get("host"),
                measured_gemm_tflops=meta.get("measured_gemm_tflops"),
                started_at=meta.get("started_at"),
                finished_at=meta.get("finished_at"),
                interrupted=meta.get("interrupted"),
            )
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
        # power.csv: rows re-labelled with the merged gpu_index, each shard's segment stitched after what
        # that GPU already has (results.power_csv.append_timeline)
        new = read_power_text(d / "power.csv")
        if new is not None and len(new) and "time_s" in new.columns:
            if sh.gpu_index is None and "gpu_index" in new.columns:
                recorded_gpu = pd.to_numeric(new["gpu_index"], errors="coerce").fillna(0).astype(int)
                new = new.assign(gpu_index=(recorded_gpu + sh.gpu_offset).astype(str))
            power = append_timeline(power, new, sh.gpu_index)

    meta = copy.deepcopy(metas[0]) if metas else {"started_at": None}
    names = [m.get("gpu") for m in metas if m.get("gpu")]
    distinct = list(dict.fromkeys(names))
    if len(distinct) > 1:
        meta["gpu"] = " / ".join(distinct)
    gemms = [e["measured_gemm_tflops"] for e in entries if isinstance(e["measured_gemm_tflops"], (int, float))]
    starts = [e["started_at"] for e in entries if e["started_at"]]
    labels = []
    for e in entries:
        for g in e["gpu_index"] if isinstance(e["gpu_index"], list) else [e["gpu_index"]]:
            if g is not None and g not in labels:
                labels.append(g)
    expected = list(expected_all) if expected_all is not None else []
    for sh in shards:
        for i in sh.expected or []:
            if i not in expected:
                expected.append(i)
    missing = [i for i in dict.fromkeys(expected) if i not in by_id]
    meta.update(
        gpu_count=len(labels) or len(shards),
        shards=entries,
        missing_cases=missing,
        started_at=min(starts) if starts else meta.get("started_at"),
        finished_at=now_utc(),
        merged_at=now_utc(),
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
    writer = ResultsWriter.of(out_dir, data)
    try:
        writer.write_parquet()
    except Exception as exc:  # results.json and .csv hold everything; parquet is a convenience
        print(f"results.parquet not written: {one_line(exc)}", flush=True)
    if power is not None:
        atomic_write(out_dir / "power.csv", power.to_csv(index=False))
    return data


def merge_run_dirs(shard_dirs: list[Path], out_dir: Path, expected_ids: dict[str, list[str]] | None = None) -> dict:
    """Merge finished (or partly finished) single-GPU run folders into one run folder; return its data.

    A folder named `gpu<i>` stamps `gpu_index = i` on its cases and power rows (CPU workers all record
    0); any other keeps what its cases recorded. `expected_ids` maps a shard (its folder name, or its
    path as a string) to the case ids it was given; without an entry, a `<folder>.txt` list next to the
    folder (what `run --gpus` writes) is used. Ids expected but recorded nowhere are `meta.missing_cases`."""
    shards = []
    for d in map(Path, shard_dirs):
        m = re.fullmatch(r"gpu(\d+)", d.name)
        exp = None
        if expected_ids is not None:
            exp = expected_ids.get(d.name, expected_ids.get(str(d)))
        if exp is None:
            exp = read_ids(d.with_name(d.name + ".txt"))
        shards.append(Shard(dir=d, gpu_index=int(m.group(1)) if m else None, expected=exp))
    return merge_shards(shards, Path(out_dir))


def shards_from_plan(run_dir: Path, plan: dict) -> tuple[list[Shard], list[str]]:
    """Every shard the plan knows of, in attempt order, and every case id it ever assigned."""
    shards: list[Shard] = []
    expected: list[str] = list(plan.get("cases") or [])
    for src in plan.get("sources", []):
        d = run_dir / src["dir"]
        expected.extend(src.get("cases") or [])
        if src.get("kind") == "node":  # a Slurm node: its own plan (or, if it died early, its folders)
            offset, node = src.get("gpu_offset", 0), src.get("node")
            sub = read_plan(d)
            if sub is not None:
                for s2 in sub.get("sources", []):
                    local = s2.get("gpu_index")
                    shards.append(
                        Shard(
                            dir=d / s2["dir"],
                            gpu_index=None if local is None else offset + local,
                            gpu_offset=offset,
                            node=node,
                            local_index=local,
                            expected=s2.get("cases"),
                            returncode=s2.get("returncode"),
                        )
                    )
                continue
            found = sorted(
                (p for p in (d / "shards").glob("gpu*") if p.is_dir() and re.fullmatch(r"gpu\d+", p.name)),
                key=lambda p: int(p.name[3:]),
            )
            for p in found:
                local = int(p.name[3:])
                shards.append(
                    Shard(
                        dir=p,
                        gpu_index=offset + local,
                        gpu_offset=offset,
                        node=node,
                        local_index=local,
                        expected=read_ids(p.with_name(p.name + ".txt")),
                    )
                )
        else:
            shards.append(
                Shard(
                    dir=d,
                    gpu_index=src.get("gpu_index"),
                    node=src.get("node"),
                    expected=src.get("cases"),
                    returncode=src.get("returncode"),
                )
            )
    return shards, list(dict.fromkeys(expected))


def merge_planned(run_dir: Path, interrupted: bool = False, strict: bool = False) -> dict:
    """Re-merge a sharded run folder from its plan (multigpu.json) and whatever its shards recorded."""
    run_dir = Path(run_dir)
    plan = read_plan(run_dir)
    if plan is None:
        raise UsageError(f"{run_dir}: no {PLAN_FILE} here (not a run made with --gpus or submit)")
    shards, expected = shards_from_plan(run_dir, plan)
    return merge_shards(
        shards,
        run_dir,
        expected_all=expected,
        interrupted=interrupted,
        extra_meta={"config": plan.get("config"), "multigpu": plan.get("kind")},
        strict=strict,
    )
