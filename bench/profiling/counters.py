"""Hardware counters per case: Nsight Compute over selected cases, per kernel (docs/DESIGN.md §5).

All the selected cases run in one child process under one `ncu` (one Python start-up, each kernel compiled
once): the child builds each case, warms it, then runs one call between cudaProfilerStart/Stop
(`--profile-from-start off`), preceded by a marker kernel (`torch.cuda._sleep`: `spin_kernel`) so the
parent can split ncu's kernel rows, which come in launch order, into the cases. Clocks are never touched
(`--clock-control none`). Per kernel: tensor-pipe activity, SM and DRAM throughput, achieved occupancy,
registers per thread, local-memory load/store instructions (register spills, or local arrays), DRAM
bytes, duration and SM clock. Per case: their duration-weighted tensor-pipe activity and the measured
arithmetic intensity (useful FLOPs / DRAM bytes) and throughput (useful FLOPs / kernel time), which the
roofline plot uses where present.

The record (`counters`; each key, and each column of `counters.kernels`, a row of results.metrics): {status:
ok | skipped | failed, tensor_pct, duration_ms, intensity, tflops, reason, kernels: [...], dram_bytes,
sm_clock_mhz, report}; the summary also goes to the older fields
`tc_util_ncu`, `ncu_sm_clock_mhz`, `ncu_duration_ms`, `ncu_report`. No ncu, no permission to read the
counters (ERR_NVGPUCTRPERM), or a CPU run: `skipped` with why.

    python -m bench.profiling.counters --cases CASES.pkl --sidecar OUT.json [--device N]   # the child, under ncu
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import gc
import io
import json
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from bench.config.cases import Case
from kernels.registry import get_provider
from support.text import one_line

#: record key -> ncu metric (`--print-units base`: ns, Hz, bytes, %, counts)
METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "sm_clock_hz": "sm__cycles_elapsed.avg.per_second",
    "tensor_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers": "launch__registers_per_thread",
    "local_ld": "smsp__sass_inst_executed_op_local_ld.sum",
    "local_st": "smsp__sass_inst_executed_op_local_st.sum",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
}
MARKER = "spin_kernel"  # torch.cuda._sleep's kernel: no provider launches it
MARKER_CYCLES = 1000
NO_PERMISSION = "ERR_NVGPUCTRPERM"


def find_ncu() -> str | None:
    for cand in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and Path(cand).exists():
            return cand
    found = sorted(Path("/opt/nvidia").glob("nsight-compute/*/ncu")) if Path("/opt/nvidia").exists() else []
    return str(found[-1]) if found else None


def _num(text) -> float | None:
    try:
        return float(str(text).replace(",", ""))
    except (ValueError, TypeError):
        return None


def parse_rows(text: str) -> list[dict]:
    """Kernel rows of `ncu --csv --page raw --print-units base` output, in launch order (banner lines, the
    units row and the application's own output ignored): {name, <METRICS keys>} with None where missing."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    rows = []
    for r in csv.DictReader(io.StringIO("\n".join(lines))) if lines else []:
        if _num(r.get(METRICS["duration_ns"])) is None:  # the units row
            continue
        rows.append({"name": r.get("Kernel Name", "?"), **{k: _num(r.get(m)) for k, m in METRICS.items()}})
    return rows


def split_at_markers(rows: list[dict]) -> list[list[dict]]:
    """The kernels after each marker row, one list per marker (rows before the first marker dropped)."""
    groups: list[list[dict]] = []
    for r in rows:
        if MARKER in r["name"]:
            groups.append([])
        elif groups:
            groups[-1].append(r)
    return groups


def _weighted(kernels: list[dict], key: str, total: float) -> float | None:
    have = [k for k in kernels if k[key] is not None]
    return sum(k["duration_ns"] * k[key] for k in have) / total if have and total > 0 else None


def summarize(kernels: list[dict], flops: float | None) -> dict:
    """The `counters` record of one call's kernels (`parse_rows` rows)."""
    total = sum(k["duration_ns"] for k in kernels)
    dram = sum((k["dram_read_bytes"] or 0.0) + (k["dram_write_bytes"] or 0.0) for k in kernels)
    have_dram = any(k["dram_read_bytes"] is not None for k in kernels)
    rows = [
        {
            "name": k["name"],
            "duration_ms": k["duration_ns"] / 1e6,
            "tensor_pct": k["tensor_pct"],
            "sm_pct": k["sm_pct"],
            "dram_pct": k["dram_pct"],
            "occupancy_pct": k["occupancy_pct"],
            "registers": k["registers"],
            "local_ld": k["local_ld"],
            "local_st": k["local_st"],
            "dram_bytes": (k["dram_read_bytes"] or 0.0) + (k["dram_write_bytes"] or 0.0) if have_dram else None,
            "sm_clock_mhz": k["sm_clock_hz"] / 1e6 if k["sm_clock_hz"] is not None else None,
        }
        for k in kernels
    ]
    clock = _weighted(kernels, "sm_clock_hz", total)
    return {  # in the metric table's order (results.metrics)
        "status": "ok",
        "tensor_pct": _weighted(kernels, "tensor_pct", total),
        "duration_ms": total / 1e6,
        "intensity": flops / dram if flops and have_dram and dram > 0 else None,
        "tflops": flops / (total * 1e-9) / 1e12 if flops and total > 0 else None,
        "reason": None,
        "kernels": rows,
        "dram_bytes": dram if have_dram else None,
        "sm_clock_mhz": clock / 1e6 if clock is not None else None,
        "report": None,
    }


def legacy_fields(counters: dict) -> dict:
    """The summary under the fields `bench profile` wrote before the per-kernel record existed."""
    if counters.get("status") != "ok":
        return {}
    tc = counters["tensor_pct"]
    out = {
        "tc_util_ncu": tc / 100 if tc is not None else None,
        "ncu_sm_clock_mhz": counters["sm_clock_mhz"],
        "ncu_duration_ms": counters["duration_ms"],
    }
    if counters.get("report"):
        out["ncu_report"] = counters["report"]
    return out


def not_run(status: str, reason: str) -> dict:
    return {"status": status, "reason": reason, "kernels": [], "report": None}


def ncu_command(ncu: str, cases_file: Path, sidecar: Path, device: int | None, export: Path | None) -> list[str]:
    cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", ",".join(METRICS.values())]
    if export is not None:
        cmd += ["--export", str(export), "--force-overwrite"]
    else:
        cmd += ["--csv", "--page", "raw", "--print-units", "base"]
    cmd += [sys.executable, "-m", "bench.profiling.counters", "--cases", str(cases_file), "--sidecar", str(sidecar)]
    return cmd + (["--device", str(device)] if device is not None else [])


def collect(
    cases: list[Case], device: int | None, keep: Path | None = None, timeout_s: float = 1800.0, ncu: str | None = None
) -> dict[str, dict]:
    """{case id: {"counters": record, **legacy summary}} for `cases`, profiled in one ncu child. `keep`: a
    folder for the `.ncu-rep` (recorded as `counters.report`)."""
    ncu = ncu or find_ncu()
    if ncu is None:
        why = "ncu (Nsight Compute) not found on PATH, in /usr/local/cuda/bin or /opt/nvidia/nsight-compute"
        return {c.id: {"counters": not_run("skipped", why)} for c in cases}
    with tempfile.TemporaryDirectory(prefix="gdpa-ncu-") as tmp:
        cases_file, sidecar = Path(tmp) / "cases.pkl", Path(tmp) / "sidecar.json"
        cases_file.write_bytes(pickle.dumps(list(cases)))
        export = keep / "counters.ncu-rep" if keep is not None else None
        text, failure = _run_ncu(ncu, ncu_command(ncu, cases_file, sidecar, device, export), export, timeout_s)
        entries = json.loads(sidecar.read_text()) if sidecar.exists() else []
    if failure is not None:
        status = "skipped" if NO_PERMISSION in failure else "failed"
        return {c.id: {"counters": not_run(status, failure)} for c in cases}
    groups = split_at_markers(parse_rows(text))
    marked = [e for e in entries if e.get("marked")]
    if len(groups) != len(marked):
        why = f"ncu gave {len(groups)} marked kernel groups for {len(marked)} profiled cases: cannot tell them apart"
        return {c.id: {"counters": not_run("failed", why)} for c in cases}
    by_id = {e["id"]: g for e, g in zip(marked, groups, strict=True) if e.get("status") == "profiled"}
    errors = {e["id"]: e.get("error") for e in entries}
    out = {}
    for c in cases:
        if c.id not in by_id:
            out[c.id] = {"counters": not_run("failed", errors.get(c.id) or "the ncu child did not reach this case")}
            continue
        rec = summarize(by_id[c.id], c.flops(c.workload.lengths()))
        rec["report"] = str(export) if export is not None and export.exists() else None
        out[c.id] = {"counters": rec, **legacy_fields(rec)}
    return out


def replaying(cases: list[Case], records: list[dict]) -> tuple[list[Case], dict[str, dict]]:
    """The cases as the ncu child must build them to profile what the sweep timed: each provider's
    `replay_options` for its case's recorded `kernel_config` laid over its options (the op's `auto` otherwise
    chooses its plan again in the child, by timings ncu's interception distorts). Also {case id: the options
    laid over}, for the record (`counters.replayed`)."""
    by_id = {r.get("id"): r for r in records}
    out, replayed = [], {}
    for case in cases:
        record = by_id.get(case.id) or {}
        try:
            extra = get_provider(case.provider.name, case.provider.options or None).replay_options(
                record.get("kernel_config")
            )
        except Exception:  # a provider this process cannot build (another environment's): profiled as configured
            extra = None
        if extra:
            provider = dataclasses.replace(case.provider, options={**(case.provider.options or {}), **extra})
            case = dataclasses.replace(case, provider=provider)
            replayed[case.id] = extra
        out.append(case)
    return out, replayed


def for_run(model, cases: list[Case], records: list[dict], device: torch.device, run_dir: Path, say) -> dict:
    """After a sweep: the counters of the run's ok cases that `counters.only` selects and that have none
    yet (a resumed run keeps what it has), as {case id: fields} for `ResultsWriter.update_cases`."""
    if not model.counters.only:
        return {}
    rx = re.compile(model.counters.only)
    ok = {r["id"] for r in records if r.get("status") == "ok" and (r.get("counters") or {}).get("status") != "ok"}
    chosen = [c for c in cases if rx.search(c.id) and c.id in ok]
    if not chosen:
        return {}
    if device.type != "cuda":
        return {c.id: {"counters": not_run("skipped", "Nsight Compute needs a CUDA GPU (a CPU run)")} for c in chosen}
    say(f"Nsight Compute over {len(chosen)} case(s), one process (clocks untouched) ...")
    keep = run_dir / "ncu" if model.counters.keep else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    held = release_cached_memory(device)
    chosen, replayed = replaying(chosen, records)
    out = collect(chosen, device.index, keep, model.counters.timeout_s)
    for cid, extra in replayed.items():
        out[cid]["counters"]["replayed"] = extra
    for fields in out.values():
        rec = fields["counters"]
        if rec.get("status") == "failed" and "out of memory" in (rec.get("reason") or ""):
            # all 8 ncu cases of the H200 production runs of 2026-12-02: the child's GPU memory was the sweep's
            rec["reason"] = f"{rec['reason']} (this process held {held:.1f} GiB of the GPU when ncu's child started)"
    return out


def release_cached_memory(device: torch.device) -> float:
    """Give the caching allocator's free blocks back to the driver before a child process needs the GPU; the
    GiB this process still reserves after it."""
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    return torch.cuda.memory_reserved(device) / float(1 << 30)


def _run_ncu(ncu: str, cmd: list[str], export: Path | None, timeout_s: float) -> tuple[str, str | None]:
    """(ncu's CSV text, None) or ("", why it failed)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        if export is not None and proc.returncode == 0:
            proc = subprocess.run(
                [ncu, "--import", str(export), "--csv", "--page", "raw", "--print-units", "base"],
                capture_output=True,
                text=True,
                timeout=600,
            )
    except subprocess.TimeoutExpired:
        return "", f"ncu timed out after {timeout_s:.0f} s"
    except OSError as exc:
        return "", f"ncu could not start: {exc.strerror or exc}"
    output = (proc.stdout or "") + (proc.stderr or "")
    if NO_PERMISSION in output:
        return "", (
            f"{NO_PERMISSION}: this user may not read the GPU's performance counters "
            "(https://developer.nvidia.com/ERR_NVGPUCTRPERM)"
        )
    if proc.returncode != 0:
        return "", f"ncu exit {proc.returncode}: {failure_lines(output)}"[:600]
    return proc.stdout, None


_ERROR_LINE = re.compile(r"==ERROR==|\b\w*(Error|Exception)\b: |error: ", re.I)


def failure_lines(output: str) -> str:
    """What a failed ncu run said: its error lines (ncu's `==ERROR==`, a Python exception's `...Error: ...`)
    and its last line, ` | `-joined. The last three lines alone were torch's generic advice after a CUDA error
    (`CUDA_LAUNCH_BLOCKING=1`, `TORCH_USE_CUDA_DSA`) on all 8 counters cases of the H200 run of 2026-12-02."""
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if _ERROR_LINE.search(ln)]
    picked = list(dict.fromkeys([*errors[-3:], *lines[-1:]]))
    return " | ".join(picked)


# ------------------------------------------------------------------------------------------- the child


def child(cases: list[Case], sidecar: Path, device_index: int | None) -> int:
    """Inside ncu: per case build (one batch per workload), warm twice, then marker + one call in the
    profiled range. The sidecar says per case whether its marker was launched and whether it finished."""
    device = torch.device("cuda", device_index or 0)
    torch.cuda.set_device(device)
    entries: list[dict] = []
    batch, batch_of = None, None
    for case in cases:
        entry = {"id": case.id, "status": None, "error": None, "marked": False}
        entries.append(entry)
        fn = None
        try:
            if batch_of != case.workload.name:
                batch = None
                gc.collect()
                torch.cuda.empty_cache()
                batch, batch_of = case.workload.batch(device), case.workload.name
            provider = get_provider(case.provider.name, case.provider.options or None)
            fn = provider.build(batch, case.spec, case.mode)
            fn()
            fn()
            torch.cuda.synchronize(device)
            torch.cuda.cudart().cudaProfilerStart()
            entry["marked"] = True
            torch.cuda._sleep(MARKER_CYCLES)
            fn()
            torch.cuda.synchronize(device)
            torch.cuda.cudart().cudaProfilerStop()
            entry["status"] = "profiled"
        except Exception as exc:  # one case failing loses only its counters
            torch.cuda.cudart().cudaProfilerStop()
            entry.update(status="failed", error=one_line(exc))
        del fn
        sidecar.write_text(json.dumps(entries))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.profiling.counters", description="the ncu child of bench.profiling.counters"
    )
    p.add_argument("--cases", required=True)
    p.add_argument("--sidecar", required=True)
    p.add_argument("--device", type=int)
    a = p.parse_args(argv)
    return child(pickle.loads(Path(a.cases).read_bytes()), Path(a.sidecar), a.device)


if __name__ == "__main__":
    sys.exit(main())
