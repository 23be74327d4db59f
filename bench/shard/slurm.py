"""Sharding a run over a Slurm cluster through submitit (`python -m bench submit CONFIG --nodes N`).

One job per node; each node shards its cases over its GPUs like `run --gpus all` (bench.shard.local)
into `nodes/node<k>`, and the submitting process merges every node's shards into one run
(docs/DESIGN.md §10). If it dies, `python -m bench merge RUN_DIR` merges what the nodes recorded.
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import torch

from bench.config.models import LoadedConfig, default_run_dir, load_config
from bench.config.selection import select_cases
from bench.errors import UsageError
from bench.shard.local import conclude, run_local
from bench.shard.merge import merge_planned
from bench.shard.plan import PLAN_SCHEMA, parse_gpus, shard_cases, write_plan
from bench.shard.worker import REPO_ROOT
from bench.sweep.rundir import check_new_run_dir
from bench.sweep.runlock import run_folder_lock
from bench.sweep.signals import interrupts
from results.files import read_results
from support.environment import SLURM_ARGS, slurm_args
from support.text import one_line

CPUS_PER_GPU = 4


def slurm_executor(folder: Path, name: str, gpus_per_node: int, timeout_min: int, partition: str | None = None):
    """submitit's Slurm executor for one node-job: nodes=1, one task, `gpus_per_node` GPUs,
    CPUS_PER_GPU cores per GPU (the worker processes), the partition and time limit. Site options the
    CLI has no flag for (account, qos, mem, constraint, cpus_per_task ...) come from the environment:
    GDPA_BENCH_SLURM_ARGS="account=ads,qos=high,mem=0" (each becomes `#SBATCH --key=value`)."""
    import submitit  # noqa: PLC0415  (optional: the cluster extra)

    extra: dict[str, str] = {}
    for item in slurm_args():
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{SLURM_ARGS}: expected key=value items separated by commas, got {item!r}")
        extra[key.strip().replace("-", "_")] = val.strip()
    try:
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    except RuntimeError as exc:  # submitit: 'Could not detect "srun", are you indeed on a slurm cluster?'
        raise UsageError(f"bench submit: {exc} (--local runs the nodes on this machine)") from None
    cpus = extra.pop("cpus_per_task", str(CPUS_PER_GPU * gpus_per_node))
    if not cpus.isdigit() or int(cpus) < 1:
        raise UsageError(f"{SLURM_ARGS}: cpus_per_task must be a positive integer, got {cpus!r}")
    params = dict(
        name=name,
        nodes=1,
        tasks_per_node=1,
        gpus_per_node=gpus_per_node,
        timeout_min=timeout_min,
        cpus_per_task=int(cpus),
    )
    if partition:
        params["slurm_partition"] = partition
    if extra:
        params["slurm_additional_parameters"] = extra
    executor.update_parameters(**params)
    return executor


def node_job(config_path: str, node_dir: str, case_ids: list[str], gpus: str, node: int) -> dict:
    """One Slurm job: shard its cases over this node's GPUs (a local sharded run in node_dir)."""
    cfg = load_config(config_path)
    wanted = set(case_ids)
    cases = [c for c in cfg.cases if c.id in wanted]
    labels = parse_gpus(gpus, cfg.model.device)
    rc = run_local(cfg, cases, Path(node_dir), labels, render=False, tag_prefix=f"node{node}/")
    data = read_results(node_dir)
    return {
        "node": node,
        "host": socket.gethostname(),
        "returncode": rc,
        "recorded": len(data["cases"]),
        "missing": data["meta"].get("missing_cases", []),
    }


def submit(cfg: LoadedConfig, args) -> int:
    """`python -m bench submit CONFIG --nodes N ...`: one job per node through submitit, then one merge."""
    try:
        import submitit  # noqa: PLC0415  (optional: the cluster extra)
    except ImportError:
        raise UsageError("bench submit needs submitit: pip install -e '.[cluster]'") from None
    for name, val in (
        ("--nodes", args.nodes),
        ("--gpus-per-node", args.gpus_per_node),
        ("--timeout-min", args.timeout_min),
    ):
        if val is None or val < 1:
            raise UsageError(f"{name}: must be a positive integer, got {val}")
    cases = select_cases(cfg, args.only, args.providers)
    cuda = cfg.model.device == "cuda"
    G, N = args.gpus_per_node, args.nodes
    if args.local and cuda:
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if N * G > have:
            raise UsageError(f"--local --nodes {N} --gpus-per-node {G}: needs {N * G} GPUs here, {have} visible")
    if not args.local and shutil.which("sbatch") is None:
        raise UsageError(
            "bench submit: Slurm's sbatch is not on PATH here; --local runs the nodes on this machine (testing)"
        )
    run_dir = Path(args.out) if args.out is not None else default_run_dir(cfg)
    option = "--out" if args.out is not None else f"{cfg.path}: output_dir:"
    check_new_run_dir(run_dir, option, resume=False)  # submit continues nothing: `merge` a run it left
    run_dir = run_dir.resolve()
    with run_folder_lock(run_dir, option):  # one writer per run folder, while the jobs run (bench.sweep.runlock)
        folder = run_dir / "submitit"
        if args.local:
            executor = submitit.LocalExecutor(folder=folder)
        else:
            executor = slurm_executor(folder, f"gdpa-bench-{cfg.name}", G, args.timeout_min, args.partition)
        run_dir.mkdir(parents=True, exist_ok=True)
        config_path = str(cfg.path.resolve())
        node_cases = shard_cases(cases, N, cfg.model)
        plan = {
            "schema": PLAN_SCHEMA,
            "kind": "local-submit" if args.local else "slurm",
            "config": str(cfg.path),
            "gpus_per_node": G,
            "cases": [c.id for c in cases],
            "sources": [],
        }
        for k, nc in enumerate(node_cases):
            plan["sources"].append(
                {
                    "kind": "node",
                    "dir": f"nodes/node{k}",
                    "node": k,
                    "gpu_offset": k * G,
                    "cases": [c.id for c in nc],
                    "job_id": None,
                }
            )
        write_plan(run_dir, plan)
        # the job processes unpickle bench.shard.slurm.node_job: they must import this checkout
        pp = os.environ.get("PYTHONPATH", "")
        if str(REPO_ROOT) not in pp.split(os.pathsep):
            os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([pp] if pp else []))
        gpus = "all" if cuda else ",".join(str(i) for i in range(G))
        jobs = {}
        for k, nc in enumerate(node_cases):
            if not nc:
                print(f"node{k}: no case (only {len(cases)} cases for {N} nodes); not submitted", flush=True)
                continue
            if args.local:
                executor.update_parameters(
                    timeout_min=args.timeout_min,
                    nodes=1,
                    tasks_per_node=1,
                    gpus_per_node=G if cuda else 0,
                    visible_gpus=tuple(range(k * G, (k + 1) * G)) if cuda else (),
                )
            try:
                job = executor.submit(
                    node_job, config_path, str(run_dir / f"nodes/node{k}"), [c.id for c in nc], gpus, k
                )
            except Exception as exc:  # sbatch refused (bad partition, account, limits): nothing half-submitted
                for j in jobs.values():
                    try:
                        j.cancel(check=False)
                    except Exception:
                        pass
                raise UsageError(
                    f"bench submit: submitting node{k} failed: {one_line(exc)}"
                    + (f" (cancelled the {len(jobs)} job(s) already submitted)" if jobs else "")
                ) from None
            jobs[k] = job
            plan["sources"][k]["job_id"] = str(job.job_id)
            print(f"node{k}: job {job.job_id}, {len(nc)} cases, log {job.paths.stdout}", flush=True)
        write_plan(run_dir, plan)
        print(
            f"waiting for {len(jobs)} job(s); if this process dies, merge later with `python -m bench merge {run_dir}`",
            flush=True,
        )
        rcs: dict[int, int] = {}
        stopped = None
        try:
            with interrupts() as sig:
                for k, job in jobs.items():
                    try:
                        res = job.result()
                        rcs[k] = int(res.get("returncode", 1))
                        print(
                            f"node{k}: {res.get('recorded')} cases recorded on {res.get('host')}, "
                            f"{len(res.get('missing') or [])} missing, exit {rcs[k]}",
                            flush=True,
                        )
                    except Exception as exc:  # the job failed, timed out or was cancelled: keep what it wrote
                        rcs[k] = 1
                        print(f"node{k}: job {job.job_id} failed: {one_line(exc)}", flush=True)
        except KeyboardInterrupt:
            stopped = sig.exit_code
            print("interrupted: cancelling the jobs; their finished cases are kept", flush=True)
            for job in jobs.values():
                try:
                    job.cancel(check=False)
                except Exception:
                    pass
        data = merge_planned(run_dir, interrupted=stopped is not None)
        return conclude(run_dir, data, rcs, stopped, render=True, unit="node")
