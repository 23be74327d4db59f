"""Sweeps across GPUs (bench/shard/), tested on CPU: `device: cpu` configs shard over CPU worker
processes, so sharding, merging, kill recovery, resume and submitit's local executor all run here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from bench.cli.parser import main
from bench.config.models import load_config
from bench.errors import UsageError
from bench.shard import case_cost, lpt, merge_planned, merge_run_dirs, parse_gpus, shard_cases, slurm
from results.files import ResultsWriter
from results.files import read_results as load_results

ROOT = Path(__file__).resolve().parents[1]

TINY = """
name: tiny
device: {device}
providers: [{providers}]
modes: [{modes}]
timing: {{warmup_ms: 1, rep_ms: 5, min_reps: 2, max_reps: 2}}
power: {{enabled: false}}
hardware: {{calibrate: false}}
sets:
  - name: t
    B: {B}
    H: 2
    D: 16
    dtype: fp32
    activation: silu
    max_len: [8, 16]
    lengths: {{family: uniform_fill, fill: [0.5, 1.0]}}
"""

SLOW_PROVIDER = '''
"""naive_eager plus a sleep in every forward call: a case that is still running when the test kills it."""
import os
import time

from kernels.naive import NaiveEager
from kernels.registry import register


@register
class SlowNaive(NaiveEager):
    name = "slow_naive"
    description = "naive_eager that sleeps before each call (tests only)"

    def forward(self, batch, spec):
        time.sleep(float(os.environ.get("SLOW_SLEEP_S", "0.5")))
        return super().forward(batch, spec)
'''


def tiny_config(
    tmp_path: Path, name="tiny.yaml", device="cpu", providers="naive_eager, reference", modes="fwd, bwd", B=3
) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(TINY.format(device=device, providers=providers, modes=modes, B=B)))
    return p


def bench_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "bench", *map(str, args)]


def sub_env(extra_path: Path | None = None, **extra) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    paths = [str(ROOT)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def assigned(run_dir: Path, label: int, attempt: str = "") -> list[str]:
    return (run_dir / "shards" / attempt / f"gpu{label}.txt").read_text().split()


# --------------------------------------------------------------------------------------- sharding

SHARD_CFG = """
name: shard
device: {device}
providers: [naive_eager, reference]
modes: [fwd, bwd]
sets:
  - name: a
    B: 4
    H: 2
    D: 16
    dtype: fp32
    max_len: [32, 64, 128, 256]
    lengths: {{family: uniform_fill, fill: [0.5, 1.0]}}
  - name: b
    B: 2
    H: 2
    D: 16
    dtype: fp32
    max_len: [16]
"""


def _loads(shards, cost):
    return [sum(cost(c) for c in s) for s in shards]


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shards_keep_workloads_whole_balanced_every_case_once_deterministic(tmp_path, n):
    p = tmp_path / "shard.yaml"
    p.write_text(textwrap.dedent(SHARD_CFG.format(device="cuda")))
    cfg = load_config(p)
    cases = cfg.cases
    cost = lambda c: case_cost(c, cfg.model)
    shards = shard_cases(cases, n, cfg.model)
    assert len(shards) == n
    ids = [c.id for s in shards for c in s]
    assert sorted(ids) == sorted(c.id for c in cases) and len(ids) == len(set(ids))  # every case exactly once
    # deterministic
    assert [[c.id for c in s] for s in shard_cases(cases, n, cfg.model)] == [[c.id for c in s] for s in shards]
    # a workload's cases stay on one shard unless the workload alone is more than a fair share
    total = sum(cost(c) for c in cases)
    group_cost = Counter()
    for c in cases:
        group_cost[c.workload.name] += cost(c)
    for name, gc in group_cost.items():
        holders = [k for k, s in enumerate(shards) if any(c.workload.name == name for c in s)]
        if gc <= total / n:
            assert len(holders) == 1, (name, holders)
    # within a shard: input order kept, each workload contiguous (the runner builds each batch once)
    pos = {c.id: i for i, c in enumerate(cases)}
    for s in shards:
        assert [pos[c.id] for c in s] == sorted(pos[c.id] for c in s)
        names = [c.workload.name for c in s]
        runs = [nm for k, nm in enumerate(names) if k == 0 or names[k - 1] != nm]
        assert len(runs) == len(set(runs))
    # LPT guarantee: the most loaded shard exceeds the least loaded by at most one group
    loads = _loads(shards, cost)
    assert max(loads) - min(loads) <= max(group_cost.values()) + 1e-9
    if n == 2:  # bigger workloads cost more, so the shards differ from a round-robin split
        assert max(loads) / min(loads) < 1.5


def test_lpt_by_hand_and_dominant_workload_is_split(tmp_path):
    assert lpt([7, 5, 4, 3, 1], 2) == [[0, 3], [1, 2, 4]]  # loads 10 / 10
    assert lpt([1, 1, 1], 5) == [[0], [1], [2], [], []]
    p = tmp_path / "shard.yaml"
    p.write_text(textwrap.dedent(SHARD_CFG.format(device="cpu")))
    cfg = load_config(p)
    big = "a/L=256/fill=1.0"
    cost = lambda c: 100.0 if c.workload.name == big else 1.0
    shards = shard_cases(cfg.cases, 2, cost=cost)
    holders = [k for k, s in enumerate(shards) if any(c.workload.name == big for c in s)]
    assert holders == [0, 1]  # 400 of 416: kept whole it would leave the other shard nearly idle
    loads = _loads(shards, cost)
    assert abs(loads[0] - loads[1]) <= 100.0
    assert sorted(c.id for s in shards for c in s) == sorted(c.id for c in cfg.cases)


def test_case_cost_follows_budgets_and_flops(tmp_path):
    p = tmp_path / "shard.yaml"
    p.write_text(textwrap.dedent(SHARD_CFG.format(device="cuda")))
    cfg = load_config(p)
    by_id = {c.id: c for c in cfg.cases}
    t = cfg.model.timing
    small = case_cost(by_id["b/fwd/L=16/naive_eager"], cfg.model)
    # a tiny case on a GPU costs its budgets: warmup + rep + the energy loop and its pre-roll, whatever its FLOPs
    budget = (t.warmup_ms + t.rep_ms) / 1e3 + cfg.model.power.energy_loop_s + cfg.model.power.settle_s
    assert budget < small < budget + 1.0
    assert (
        case_cost(by_id["a/bwd/L=256/fill=1.0/naive_eager"], cfg.model)
        > case_cost(by_id["a/fwd/L=256/fill=1.0/naive_eager"], cfg.model)
        > case_cost(by_id["a/fwd/L=32/fill=0.5/naive_eager"], cfg.model)
    )


# ---------------------------------------------------------------------------------------- --gpus


def test_parse_gpus():
    assert parse_gpus("all", "cuda", visible=4) == [0, 1, 2, 3]
    assert parse_gpus(" 2, 0 ", "cuda", visible=4) == [2, 0]
    with pytest.raises(UsageError, match=r"--gpus all: the config runs on device: cpu.*e\.g\. --gpus 0,1"):
        parse_gpus("all", "cpu")  # "all" means GPUs: a CPU config names its workers
    assert parse_gpus("0,1,2", "cpu") == [0, 1, 2]
    with pytest.raises(UsageError, match=r"device 4 does not exist; 4 GPU\(s\) visible \(indices 0\.\.3\)"):
        parse_gpus("0,4", "cuda", visible=4)
    with pytest.raises(UsageError, match="no CUDA GPU is visible"):
        parse_gpus("all", "cuda", visible=0)
    with pytest.raises(UsageError, match="listed twice"):
        parse_gpus("1,1", "cpu")
    with pytest.raises(UsageError, match="expected 'all' or comma-separated device indices"):
        parse_gpus("gpu0", "cpu")
    with pytest.raises(UsageError, match=">= 0"):
        parse_gpus("-1", "cuda", visible=2)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gpus", "0,x"], "--gpus '0,x': expected 'all' or comma-separated device indices like 0,1"),
        (["--gpus", "0,0"], "--gpus 0,0: device 0 is listed twice (one worker per GPU)"),
        (["--gpus", "0,1", "--device", "1"], "--device and --gpus cannot be combined: --gpus picks the devices"),
    ],
)
def test_bad_gpus_exit_2_with_one_line(tmp_path, capsys, argv, message):
    cfg = tiny_config(tmp_path)
    assert main(["run", str(cfg), "--out", str(tmp_path / "run"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {message}"
    assert not (tmp_path / "run").exists()  # nothing was started


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without CUDA GPUs")
def test_gpus_on_a_cuda_config_without_gpu_and_subprocess_exit_code(tmp_path, capsys):
    cfg = tiny_config(tmp_path, name="cuda.yaml", device="cuda")
    assert main(["run", str(cfg), "--gpus", "0,1"]) == 2
    assert "no CUDA GPU is visible" in capsys.readouterr().err
    # through the real entry point: exit 2, one line, no traceback
    proc = subprocess.run(
        bench_cmd("run", tiny_config(tmp_path), "--gpus", "0,-3"),
        cwd=ROOT,
        env=sub_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: --gpus 0,-3: device indices are >= 0, got -3"
    assert "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------------------- merge


def _fake_shard(d: Path, ids: list[str], gpu="NVIDIA H200", gemm=None, power_times=()):
    meta = {
        "device": "cuda",
        "gpu": gpu,
        "host": f"host-{d.name}",
        "gpu_count": 8,
        "started_at": f"2026-01-01T00:00:0{len(ids)}+00:00",
        "finished_at": None,
        "interrupted": False,
        "measured_gemm_tflops": gemm,
    }
    w = ResultsWriter(d, meta)
    w.add_workload(f"wl-{d.name}", {"q_lengths": [1, 2]})
    for i in ids:  # CPU-like shards all record gpu_index 0; the runner leaves gpu_name None on CPU
        w.add_case(
            {
                "id": i,
                "provider": "p",
                "mode": "fwd",
                "status": "ok",
                "median_ms": 1.0,
                "gpu_index": 0,
                "gpu_name": None,
                "times_ms": [1.0, 1.0],
            }
        )
    if power_times:
        rows = "".join(f"{t},0,500.0,1980,2619,50,sw_power_cap,{ids[0] if ids else ''}\n" for t in power_times)
        (d / "power.csv").write_text(
            "time_s,gpu_index,power_w,sm_clock_mhz,mem_clock_mhz,temperature_c,reasons,case_id\n" + rows
        )


def test_merge_run_dirs_keeps_finished_cases_and_reports_missing(tmp_path):
    sh = tmp_path / "shards"
    _fake_shard(sh / "gpu0", ["a", "b"], gemm=600.0, power_times=(0.0, 0.01))
    _fake_shard(sh / "gpu1", ["c"], gemm=700.0, power_times=(0.0, 0.01, 0.02))  # died after its first case
    (sh / "gpu2").mkdir(parents=True)  # died before its first case: no results.json at all
    (sh / "gpu2.txt").write_text("f\ng\n")  # its case list, as run --gpus writes it
    out = tmp_path / "merged"
    data = merge_run_dirs(
        [sh / "gpu0", sh / "gpu1", sh / "gpu2"], out, expected_ids={"gpu0": ["a", "b"], "gpu1": ["c", "d", "e"]}
    )
    on_disk = load_results(out)
    assert on_disk == json.loads(json.dumps(data))
    assert [c["id"] for c in on_disk["cases"]] == ["a", "b", "c"]
    assert {c["id"]: c["gpu_index"] for c in on_disk["cases"]} == {"a": 0, "b": 0, "c": 1}
    assert all(c["gpu_name"] == "NVIDIA H200" for c in on_disk["cases"])
    assert on_disk["cases"][2]["host"] == "host-gpu1"
    meta = on_disk["meta"]
    assert meta["missing_cases"] == ["d", "e", "f", "g"]
    assert meta["gpu_count"] == 3
    assert meta["measured_gemm_tflops"] == 650.0  # the median GPU
    assert [s["gpu_index"] for s in meta["shards"]] == [0, 1, 2]
    assert [s["cases"] for s in meta["shards"]] == [2, 1, 0]
    assert [s["missing"] for s in meta["shards"]] == [[], ["d", "e"], ["f", "g"]]
    assert "no results.json" in meta["shards"][2]["error"]
    assert set(on_disk["workloads"]) == {"wl-gpu0", "wl-gpu1"}
    power = (out / "power.csv").read_text().splitlines()
    assert power[0].startswith("time_s,gpu_index,power_w")
    assert [r.split(",")[1] for r in power[1:]] == ["0", "0", "1", "1", "1"]  # re-labelled by shard
    assert (out / "results.csv").read_text().count("\n") == 4  # header + 3 cases
    # the report reads it
    from results.frame import load_run
    from results.power_csv import read_power

    _, frame, _ = load_run(out)
    assert list(frame["id"]) == ["a", "b", "c"] and list(frame["gpu_index"]) == [0, 0, 1]
    assert sorted(read_power(out)["gpu_index"].unique()) == [0, 1]


# ------------------------------------------------------------------------------- real sharded runs


def test_run_gpus_0_1_on_cpu_merges_one_run(tmp_path):
    cfg_path = tiny_config(tmp_path)
    run = tmp_path / "run"
    t0 = time.monotonic()
    proc = subprocess.run(
        bench_cmd("run", cfg_path, "--gpus", "0,1", "--out", run),
        cwd=ROOT,
        env=sub_env(),
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wall = time.monotonic() - t0
    data = load_results(run)
    expected = [c.id for c in load_config(cfg_path).cases]
    assert len(expected) == 16
    assert [c["id"] for c in data["cases"]] == expected  # config order, every case once
    assert all(c["status"] == "ok" for c in data["cases"])
    for label in (0, 1):
        ids = assigned(run, label)
        assert ids, f"gpu{label} got no case"
        shard = load_results(run / "shards" / f"gpu{label}")
        assert sorted(c["id"] for c in shard["cases"]) == sorted(ids)
        for c in data["cases"]:
            if c["id"] in ids:
                assert c["gpu_index"] == label
    assert sorted(assigned(run, 0) + assigned(run, 1)) == sorted(expected)
    # workloads stay whole: 4 workloads, 2 per worker
    per_worker = [{i.split("/")[2] + i.split("/")[3] for i in assigned(run, k)} for k in (0, 1)]
    assert len(per_worker[0]) == len(per_worker[1]) == 2 and not per_worker[0] & per_worker[1]
    meta = data["meta"]
    assert meta["gpu_count"] == 2 and meta["missing_cases"] == []
    assert [(s["gpu_index"], s["cases"], s["returncode"]) for s in meta["shards"]] == [
        (0, len(assigned(run, 0)), 0),
        (1, len(assigned(run, 1)), 0),
    ]
    assert all(s["started_at"] and s["finished_at"] for s in meta["shards"])
    assert all(c["gpu_name"] == "cpu" and c["host"] for c in data["cases"])
    assert set(data["workloads"]) == {c["workload"]["name"] for c in data["cases"]}
    assert (run / "report.html").stat().st_size > 1000 and (run / "report.md").exists()
    assert (run / "results.csv").exists()
    out = proc.stdout
    assert "[gpu0 " in out and "[gpu1 " in out and "done: 16 ok on 2 worker(s)" in out
    assert (run / "shards" / "gpu0.log").read_text().count("FLOP/s (") == len(assigned(run, 0))  # one line per case
    # the merge can be redone from the plan and gives the same cases
    again = merge_planned(run)
    assert [c["id"] for c in again["cases"]] == expected
    # a second run into the same folder is refused (it would mix two runs)
    assert main(["run", str(cfg_path), "--gpus", "0,1", "--out", str(run)]) == 2
    # `merge` refuses a shard whose results.json is there but unreadable, and leaves the merged run as it was
    before = (run / "results.json").read_bytes()
    shard = run / "shards" / "gpu0" / "results.json"
    shard.write_text(shard.read_text()[:100])
    assert main(["merge", str(run)]) == 2
    assert (run / "results.json").read_bytes() == before
    print(f"sharded CPU run: {wall:.1f} s")


SLOW_IDS = [f"t/fwd/L={L}/fill={f}/{p}" for L in (8, 16) for f in ("0.5", "1.0") for p in ("naive_eager", "slow_naive")]


def _worker_pid(parent: int, label: int, timeout: float = 60.0) -> int:
    """The pid of the `bench run --out .../gpu<label>` child of `parent` (found through /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
                argv = (p / "cmdline").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue
            # a CPU worker is named by its shard folder (`--device` picks GPUs only)
            if ppid == parent and b"--out" in argv and argv[argv.index(b"--out") + 1].endswith(f"gpu{label}".encode()):
                return int(p.name)
        time.sleep(0.05)
    raise AssertionError(f"no worker --out .../gpu{label} under pid {parent}")


def _recorded(shard_dir: Path) -> list[str]:
    try:
        return [c["id"] for c in json.loads((shard_dir / "results.json").read_text())["cases"]]
    except (OSError, ValueError, KeyError):
        return []


def test_killed_worker_keeps_finished_cases_then_resume_completes(tmp_path):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "slowprov.py").write_text(SLOW_PROVIDER)
    env = sub_env(mods, GDPA_BENCH_PROVIDERS="slowprov", SLOW_SLEEP_S="0.5")
    cfg_path = tiny_config(tmp_path, providers="naive_eager, slow_naive", modes="fwd", B=2)
    run = tmp_path / "run"
    log = open(tmp_path / "parent.log", "w")
    parent = subprocess.Popen(
        bench_cmd("run", cfg_path, "--gpus", "0,1", "--out", run),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        victim = _worker_pid(parent.pid, 1)
        deadline = time.monotonic() + 90
        while not _recorded(run / "shards" / "gpu1") and time.monotonic() < deadline:
            assert parent.poll() is None, (tmp_path / "parent.log").read_text()
            time.sleep(0.05)
        before = _recorded(run / "shards" / "gpu1")
        assert before, "worker 1 recorded nothing in time"
        os.kill(victim, signal.SIGKILL)  # its next case (a slow one, ~2.5 s) is in flight
        rc = parent.wait(timeout=150)
    finally:
        if parent.poll() is None:
            parent.kill()
        log.close()
    out = (tmp_path / "parent.log").read_text()
    assert rc == 1, out[-3000:]
    data = load_results(run)
    meta = data["meta"]
    mine = assigned(run, 1)
    kept = _recorded(run / "shards" / "gpu1")
    assert kept == before and 1 <= len(kept) < len(mine)
    missing = [i for i in mine if i not in kept]
    assert meta["missing_cases"] == missing  # the in-flight case and the unstarted ones
    ids = [c["id"] for c in data["cases"]]
    assert set(kept) <= set(ids) and not set(missing) & set(ids)
    assert set(assigned(run, 0)) <= set(ids)  # the other worker finished everything
    assert sorted(ids + missing) == sorted(SLOW_IDS)
    shards = {s["gpu_index"]: s for s in meta["shards"]}
    assert shards[1]["returncode"] == -signal.SIGKILL and shards[1]["missing"] == missing
    assert shards[0]["returncode"] == 0 and shards[0]["missing"] == []
    assert "gpu1: worker killed by SIGKILL" in out
    assert f"MISSING: {len(missing)} case(s)" in out and all(f"missing: {i}" in out for i in missing)
    assert (run / "report.html").exists()

    # --resume with --gpus runs exactly the missing cases and completes the run
    proc = subprocess.run(
        bench_cmd("run", cfg_path, "--gpus", "0,1", "--resume", run),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"resuming: {8 - len(missing)} of 8 cases already recorded" in proc.stdout
    rerun = sorted(
        i for k in (0, 1) if (run / "shards" / "resume1" / f"gpu{k}.txt").exists() for i in assigned(run, k, "resume1")
    )
    assert rerun == sorted(missing)
    data = load_results(run)
    assert [c["id"] for c in data["cases"]] == SLOW_IDS  # config order again after the merge
    assert data["meta"]["missing_cases"] == [] and all(c["status"] == "ok" for c in data["cases"])
    assert len(data["meta"]["shards"]) == 2 + len([k for k in (0, 1) if (run / "shards/resume1" / f"gpu{k}").is_dir()])


# ----------------------------------------------------------------------------------------- submit


def test_submit_local_two_nodes_one_merged_run(tmp_path):
    cfg_path = tiny_config(tmp_path)
    run = tmp_path / "cluster"
    proc = subprocess.run(
        bench_cmd("submit", cfg_path, "--nodes", 2, "--gpus-per-node", 1, "--local", "--timeout-min", 5, "--out", run),
        cwd=tmp_path,
        env=sub_env(),
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = load_results(run)
    expected = [c.id for c in load_config(cfg_path).cases]
    assert [c["id"] for c in data["cases"]] == expected and all(c["status"] == "ok" for c in data["cases"])
    plan = json.loads((run / "multigpu.json").read_text())
    node_ids = {s["node"]: s["cases"] for s in plan["sources"]}
    assert sorted(node_ids[0] + node_ids[1]) == sorted(expected) and node_ids[0] and node_ids[1]
    for c in data["cases"]:  # node k's only GPU is global GPU k
        k = 0 if c["id"] in node_ids[0] else 1
        assert (c["node"], c["gpu_index"], c["local_gpu_index"]) == (k, k, 0)
    for k in (0, 1):
        node = load_results(run / "nodes" / f"node{k}")
        assert sorted(c["id"] for c in node["cases"]) == sorted(node_ids[k])
        assert (run / "nodes" / f"node{k}" / "shards" / "gpu0.log").exists()
    meta = data["meta"]
    assert meta["gpu_count"] == 2 and meta["missing_cases"] == [] and meta["multigpu"] == "local-submit"
    assert [(s["node"], s["returncode"]) for s in meta["shards"]] == [(0, 0), (1, 0)]
    assert list((run / "submitit").glob("*_log.out")), "submitit logs"
    assert (run / "report.html").exists()
    assert "node0: job" in proc.stdout and "node1: 8 cases recorded" in proc.stdout


def test_submit_without_submitit_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # `import submitit` raises ImportError
    assert main(["submit", str(tiny_config(tmp_path)), "--local"]) == 2
    assert capsys.readouterr().err.strip() == "error: bench submit needs submitit: pip install -e '.[cluster]'"


def test_submit_without_slurm_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(slurm.shutil, "which", lambda name: None)
    assert main(["submit", str(tiny_config(tmp_path)), "--nodes", "2", "--out", str(tmp_path / "r")]) == 2
    assert "sbatch is not on PATH" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_slurm_executor_writes_the_expected_sbatch_file(tmp_path, monkeypatch):
    """No Slurm here: fake sbatch/srun on PATH; check what submitit would hand to a real cluster."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for tool in ("sbatch", "srun"):
        (fake / tool).write_text('#!/bin/sh\necho "Submitted batch job 4242"\n')
        (fake / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GDPA_BENCH_SLURM_ARGS", "account=ads, qos=high")
    ex = slurm.slurm_executor(tmp_path / "submitit", "gdpa-bench-t", 4, 30, "h200")
    job = ex.submit(print, "hi")
    assert job.job_id == "4242"
    text = Path(job.paths.submission_file).read_text()
    for line in (
        "--gpus-per-node=4",
        "--nodes=1",
        "--ntasks-per-node=1",
        "--cpus-per-task=16",
        "--partition=h200",
        "--time=30",
        "--job-name=gdpa-bench-t",
        "--account=ads",
        "--qos=high",
    ):
        assert f"#SBATCH {line}\n" in text, (line, text)
    monkeypatch.setenv("GDPA_BENCH_SLURM_ARGS", "account")
    with pytest.raises(UsageError, match="key=value"):
        slurm.slurm_executor(tmp_path / "submitit", "x", 1, 5)


def test_provider_with_process_setup_stays_on_one_shard(tmp_path):
    """A torch.compile-style provider's cases go to one worker (one compile), the rest still balance."""
    p = tmp_path / "shard.yaml"
    p.write_text(
        textwrap.dedent(SHARD_CFG.format(device="cuda")).replace(
            "providers: [naive_eager, reference]", "providers: [naive_eager, reference, naive_compiled]"
        )
    )
    cfg = load_config(p)
    assert any(c.label == "naive_compiled" for c in cfg.cases)
    cost = lambda c: 1.0
    setup = lambda name: 30.0 if name == "naive_compiled" else 0.0
    shards = shard_cases(cfg.cases, 2, cost=cost, setup=setup)
    holders = {k for k, s in enumerate(shards) for c in s if c.label == "naive_compiled"}
    assert len(holders) == 1
    assert sorted(c.id for s in shards for c in s) == sorted(c.id for c in cfg.cases)
    # the compile shard carries the setup, so it gets fewer of the other cases
    n_compiled = sum(c.label == "naive_compiled" for c in cfg.cases)
    loads = [len(s) + (30.0 if k in holders else 0.0) for k, s in enumerate(shards)]
    assert abs(loads[0] - loads[1]) <= n_compiled + 30.0
    other = 1 - holders.pop()
    assert len(shards[other]) > len(cfg.cases) / 2
