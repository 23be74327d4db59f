"""`python -m bench profile CONFIG --only REGEX [--run RUN_DIR]`: tensor-pipe use read by Nsight Compute.

For each selected case a child process builds the case, runs it once to compile/autotune, then runs one
timed-region call between cudaProfilerStart/Stop; `ncu --profile-from-start off` profiles exactly the
kernels of that call (clocks left alone: `--clock-control none`). Per case we store the duration-weighted
tensor-pipe activity (`tc_util_ncu`, a fraction) and the achieved SM clock, in the run's results.json
when --run is given. `--keep` also keeps each case's Nsight Compute report (`.ncu-rep`): under
`RUN_DIR/ncu/` with --run, else beside profile.json; its path is recorded as `ncu_report`.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from bench.errors import UsageError
from bench.reporting import render
from bench.runlock import run_folder_lock
from bench.selection import select_cases
from kernels.registry import get_provider
from results.files import ResultsWriter, read_results

METRIC_TC = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
METRIC_CLK = "sm__cycles_elapsed.avg.per_second"
METRIC_DUR = "gpu__time_duration.sum"
METRICS = ",".join([METRIC_TC, METRIC_CLK, METRIC_DUR])


def find_ncu() -> str | None:
    for cand in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and Path(cand).exists():
            return cand
    found = sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu")) if Path("/opt/nvidia").exists() else []
    return str(found[-1]) if found else None


def _num(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def parse_ncu_csv(text: str) -> list[dict]:
    """Kernel rows of `ncu --csv --page raw --print-units base` output (banner lines ignored)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return []
    rows = list(csv.DictReader(io.StringIO("\n".join(lines))))
    kernels = []
    for r in rows:
        dur = _num(r.get(METRIC_DUR, ""))
        if dur is None:  # the units row
            continue
        kernels.append(
            {
                "name": r.get("Kernel Name", "?"),
                "duration_ns": dur,
                "tc_util_pct": _num(r.get(METRIC_TC, "")),
                "sm_clock_hz": _num(r.get(METRIC_CLK, "")),
            }
        )
    return kernels


def summarize(kernels: list[dict]) -> dict:
    """Duration-weighted tensor-pipe activity and SM clock over the kernels of one call."""
    total = sum(k["duration_ns"] for k in kernels)
    if not kernels or total <= 0:
        return {"tc_util_ncu": None, "ncu_sm_clock_mhz": None, "ncu_kernels": kernels}
    tc = sum(k["duration_ns"] * (k["tc_util_pct"] or 0.0) for k in kernels) / total / 100.0
    clk = sum(k["duration_ns"] * (k["sm_clock_hz"] or 0.0) for k in kernels) / total / 1e6
    return {"tc_util_ncu": tc, "ncu_sm_clock_mhz": clk, "ncu_kernels": kernels, "ncu_duration_ms": total / 1e6}


def _child(cfg, case_id: str, device_index: int | None) -> int:
    """Inside ncu: build the case, warm it, run one call inside the profiler range."""
    case = next(c for c in cfg.cases if c.id == case_id)
    w = case.workload
    device = torch.device("cuda", device_index or 0)
    batch = w.batch(device)
    provider = get_provider(case.provider.name, case.provider.options or None)
    fn = provider.build(batch, case.spec, case.mode)
    fn()
    fn()
    torch.cuda.synchronize(device)
    torch.cuda.cudart().cudaProfilerStart()
    fn()
    torch.cuda.synchronize(device)
    torch.cuda.cudart().cudaProfilerStop()
    return 0


def report_file(folder: Path, case_id: str) -> Path:
    """Where `--keep` puts a case's Nsight Compute report: one file per case id."""
    return folder / (re.sub(r"[^A-Za-z0-9._=-]+", "_", case_id) + ".ncu-rep")


def ncu_command(ncu: str, cfg, case_id: str, device: int | None, export: Path | None) -> list[str]:
    """The ncu command line profiling one case: the metrics as CSV on stdout, or (export) into a
    report file, read back with `ncu --import` afterwards."""
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", METRICS]
    if export is not None:
        cmd += ["--export", str(export), "--force-overwrite"]
    else:
        cmd += ["--csv", "--page", "raw", "--print-units", "base"]
    cmd += [
        sys.executable,
        "-m",
        "bench",
        "profile",
        str(cfg.path),
        "--only",
        f"^{re.escape(case_id)}$",
        "--case",
        case_id,
    ]
    if device is not None:
        cmd += ["--device", str(device)]
    return cmd


def profile_case(ncu: str, cfg, case_id: str, device: int | None, keep: Path | None) -> dict:
    """Profile one case in a child process; its summary (or {"error": ...}), plus `ncu_report` if kept."""
    export = report_file(keep, case_id) if keep is not None else None
    try:
        proc = subprocess.run(
            ncu_command(ncu, cfg, case_id, device, export), capture_output=True, text=True, timeout=900
        )
        if export is not None and proc.returncode == 0:
            proc = subprocess.run(
                [ncu, "--import", str(export), "--csv", "--page", "raw", "--print-units", "base"],
                capture_output=True,
                text=True,
                timeout=300,
            )
    except subprocess.TimeoutExpired:
        return {"error": "ncu timed out"}
    kernels = parse_ncu_csv(proc.stdout)
    if proc.returncode != 0 or not kernels:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": f"ncu exit {proc.returncode}: {' | '.join(tail)}"[:400]}
    out = summarize(kernels)
    if export is not None and export.exists():
        out["ncu_report"] = str(export)
    return out


def profile(cfg, args) -> int:
    if args.case:
        return _child(cfg, args.case, args.device)
    cases = select_cases(cfg, args.only, args.providers)
    ncu = find_ncu()
    if ncu is None:
        raise UsageError(
            "ncu (Nsight Compute) not found on PATH or in /usr/local/cuda/bin; "
            "profile needs it (it ships with the CUDA toolkit)"
        )
    if not torch.cuda.is_available():
        raise UsageError("profile needs a CUDA GPU")
    run_dir = Path(args.run) if args.run else None
    if run_dir and not (run_dir / "results.json").is_file():
        raise UsageError(f"--run {run_dir}: no results.json there")
    out = run_dir or Path(cfg.model.output_dir) / f"profile-{cfg.name}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}"
    keep = (out / "ncu" if run_dir else out) if getattr(args, "keep", False) else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    results = {}
    for case in cases:
        print(f"profiling {case.id} ...", flush=True)
        r = results[case.id] = profile_case(ncu, cfg, case.id, args.device, keep)
        if r.get("tc_util_ncu") is not None:
            print(
                f"  tensor pipe {100 * r['tc_util_ncu']:.1f}% at {r['ncu_sm_clock_mhz']:.0f} MHz "
                f"over {len(r['ncu_kernels'])} kernel(s), {r['ncu_duration_ms']:.3f} ms"
                + (f"; report {r['ncu_report']}" if r.get("ncu_report") else ""),
                flush=True,
            )
        else:
            print(f"  {r.get('error')}", flush=True)
    if run_dir:
        with run_folder_lock(run_dir, "--run"):  # read, update and write back with no other writer between
            ResultsWriter.of(run_dir, read_results(run_dir)).update_cases(results)
            render(run_dir)
        print(f"stored in {run_dir / 'results.json'}")
    else:
        out.mkdir(parents=True, exist_ok=True)
        (out / "profile.json").write_text(json.dumps(results, indent=1))
        print(f"stored in {out / 'profile.json'}")
    return 0 if all("error" not in r for r in results.values()) else 1
