"""What this machine is: GPU, driver, versions, git state, and which providers can run here."""
from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch

from bench import hardware


def git_sha(repo: Path | None = None) -> str | None:
    if os.environ.get("GDPA_GIT_SHA"):  # a copy of the tree without .git (e.g. a remote GPU box)
        return os.environ["GDPA_GIT_SHA"]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo or Path(__file__).resolve().parents[1],
                             capture_output=True, text=True, timeout=5)
        sha = out.stdout.strip()
        if out.returncode != 0 or not sha:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=repo or Path(__file__).resolve().parents[1], capture_output=True,
                               text=True, timeout=5).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _driver() -> str | None:
    try:
        import pynvml
        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        return None


def _version(mod: str) -> str | None:
    try:
        m = __import__(mod)
        return getattr(m, "__version__", None)
    except Exception:
        return None


def collect(device: torch.device) -> dict:
    """The environment block of results meta."""
    gpu = None
    cc = None
    sms = None
    if device.type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(device)
        gpu, cc, sms = props.name, f"{props.major}.{props.minor}", props.multi_processor_count
    return {
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "device": device.type,
        "gpu": gpu,
        "compute_capability": cc,
        "sm_count": sms,
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "driver": _driver() if gpu else None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": _version("triton"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_sha": git_sha(),
    }


def peaks(gpu_name: str | None, override: dict | None = None, hbm_override: float | None = None,
          gpu_override: str | None = None) -> tuple[dict, float | None, str | None]:
    row = hardware.lookup(gpu_override or gpu_name)
    peak = dict(row["peak_tflops"]) if row else {}
    if override:
        peak.update(override)
    hbm = hbm_override if hbm_override is not None else (row["hbm_tb_s"] if row else None)
    return peak, hbm, (row["name"] if row else None)


def provider_table(device: torch.device) -> list[dict]:
    from kernels.registry import get_provider, provider_names
    rows = []
    for name in provider_names():
        p = get_provider(name)
        try:
            reason = p.availability(device)
        except Exception as exc:  # an availability probe that crashes is itself the reason
            reason = f"availability check failed: {exc}"
        rows.append({"provider": name, "semantics": p.semantics, "available": reason is None,
                     "reason": reason, "description": p.description})
    return rows


def print_env(device: torch.device) -> None:
    info = collect(device)
    print("gdpa-bench environment")
    for key in ("host", "device", "gpu", "compute_capability", "sm_count", "gpu_count", "driver", "cuda",
                "torch", "triton", "python", "git_sha"):
        print(f"  {key:18s} {info[key]}")
    try:
        from bench.monitor import PowerMonitor
        mon = PowerMonitor(device_index=device.index or 0)
        i = mon.info()
        print(f"  {'nvml':18s} {'available' if i.get('available') else 'unavailable: ' + str(i.get('unavailable_reason'))}")
        if i.get("available"):
            print(f"  {'power source':18s} {i.get('power_source')} {i.get('power_source_note') or ''}")
            print(f"  {'power limit':18s} enforced {i.get('enforced_power_limit_w')} W, default {i.get('default_power_limit_w')} W")
    except Exception as exc:
        print(f"  {'nvml':18s} unavailable: {exc}")
    peak, hbm, row = peaks(info["gpu"])
    print(f"  {'datasheet':18s} {row or 'unknown GPU'} {peak or ''} {f'{hbm} TB/s' if hbm else ''}")
    print("providers:")
    for r in provider_table(device):
        status = "ok" if r["available"] else f"unavailable: {r['reason']}"
        print(f"  {r['provider']:18s} {r['semantics']:8s} {status}")
    sys.stdout.flush()
