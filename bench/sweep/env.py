"""What this machine is (docs/DESIGN.md §12): the environment block of results.json `meta`, `bench env`, and
which providers can run here.

Recorded as asv and pytest-benchmark do — CPU model, RAM, OS, Python, the commit (sha, time, branch,
and a dirty flag computed by git) — plus what a GPU measurement needs: GPU name and UUID, driver,
CUDA, cuDNN, torch, triton, flash-attn(-4), application and max clocks, ECC, persistence and MIG mode,
and the GDPA_*, TRITON_* and CUDA_VISIBLE_DEVICES variables. Anything that cannot be read is None;
nothing here raises.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch.utils import collect_env

from bench.case import hardware
from bench.monitor import PowerMonitor, device_facts, gpu_index_from_device
from kernels.registry import get_provider, plugin_failures, provider_names, provider_source

REPO = Path(__file__).resolve().parents[2]
ENV_PREFIXES = ("GDPA_", "TRITON_")
ENV_NAMES = ("CUDA_VISIBLE_DEVICES",)
# A tree copied without .git (e.g. to a remote GPU machine) can name its commit here; dirty is then unknown.
GIT_SHA_VARIABLE = "GDPA_GIT_SHA"


def _git(*args: str) -> str | None:
    # Only the repository that holds this package: git must not walk up from a copy of the project
    # unpacked inside another checkout (it recorded that other repository's `...-dirty` sha), nor follow
    # a GIT_DIR set for some other repository.
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    env["GIT_CEILING_DIRECTORIES"] = str(REPO.parent)
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=5, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def own_repository() -> bool:
    """The package's folder is the top of a git work tree (not a folder inside some other repository)."""
    top = _git("rev-parse", "--show-toplevel")
    try:
        return top is not None and Path(top).resolve() == REPO.resolve()
    except OSError:
        return False


def git_state() -> dict:
    """{git_sha (sha + "-dirty" when dirty, as always recorded), git_commit, git_dirty, git_branch,
    git_commit_time, git_source, package_version}, git facts only from the repository that holds the
    package, unless $GDPA_GIT_SHA names the files' commit (it wins: a copied tree, a stale .git); `package_version`
    is always the installed gdpa-bench's.
    Dirty means tracked files differ from HEAD (`git status --porcelain`)."""
    sha = _git("rev-parse", "HEAD") if own_repository() else None
    version = package_version("gdpa-bench")
    env_sha = os.environ.get(GIT_SHA_VARIABLE) or None
    if not sha or env_sha:
        # set, it wins: the caller names the commit of the files, where the tree was copied without `.git` or
        # with a stale one (a lent GPU machine's copy holds the checkout's .git as its session began)
        stale = f" (the repository's HEAD: {sha})" if sha and env_sha and not sha.startswith(env_sha) else ""
        return {
            "git_sha": env_sha,
            "git_commit": env_sha,
            "git_dirty": None,
            "git_branch": None,
            "git_commit_time": None,
            "git_source": f"${GIT_SHA_VARIABLE}{stale}" if env_sha else None,
            "package_version": version,
        }
    status = _git("status", "--porcelain", "--untracked-files=no")
    dirty = None if status is None else bool(status)
    branch = _git("rev-parse", "--abbrev-ref", "HEAD")
    return {
        "git_sha": sha + ("-dirty" if dirty else ""),
        "git_commit": sha,
        "git_dirty": dirty,
        "git_branch": None if branch in (None, "HEAD") else branch,
        "git_commit_time": _git("show", "-s", "--format=%cI", "HEAD"),
        "git_source": "git",
        "package_version": version,
    }


def git_sha() -> str | None:
    return git_state()["git_sha"]


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def ram_gb() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def os_name() -> str:
    """The OS as torch's collect_env names it (distribution and version), else platform's string."""
    try:
        return collect_env.get_os(collect_env.run) or platform.platform()
    except Exception:
        return platform.platform()


def package_version(*names: str) -> str | None:
    """The installed version of the first distribution found among `names` (pip names)."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def cudnn_version() -> str | None:
    try:
        v = torch.backends.cudnn.version()
    except Exception:
        return None
    return None if v is None else str(v)


def variables() -> dict:
    """The environment variables that change what runs: GDPA_*, TRITON_*, CUDA_VISIBLE_DEVICES."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


def gpu_facts(device: torch.device) -> dict:
    """NVML facts of the GPU a run uses (bench.monitor.nvml); all None on a CPU run."""
    if device.type != "cuda":
        return {}
    try:
        return device_facts(gpu_index_from_device(device))
    except Exception as exc:  # a broken NVML install must not stop a run
        return {"nvml_error": f"{type(exc).__name__}: {exc}"[:300]}


def collect(device: torch.device) -> dict:
    """The environment block of results meta."""
    gpu = cc = sms = None
    if device.type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(device)
        gpu, cc, sms = props.name, f"{props.major}.{props.minor}", props.multi_processor_count
    facts = gpu_facts(device) if gpu else {}
    return {
        "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "device": device.type,
        "gpu": gpu,
        "gpu_uuid": facts.get("uuid"),
        "compute_capability": cc,
        "sm_count": sms,
        "gpu_visible": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "driver": facts.get("driver"),
        "cuda": torch.version.cuda,
        "cudnn": cudnn_version(),
        "torch": torch.__version__,
        "triton": package_version("triton"),
        "flash_attn": package_version("flash-attn-4", "flash-attn", "flash_attn"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "os": os_name(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "ram_gb": ram_gb(),
        **git_state(),
        "gpu_clocks_applications_mhz": facts.get("clocks_applications_mhz"),
        "gpu_clocks_max_mhz": facts.get("clocks_max_mhz"),
        "gpu_ecc_mode": facts.get("ecc_mode"),
        "gpu_persistence_mode": facts.get("persistence_mode"),
        "gpu_mig_mode": facts.get("mig_mode"),
        "env": variables(),
        "provider_plugins": provider_plugins(),
    }


def peaks(
    gpu_name: str | None,
    override: dict | None = None,
    hbm_override: float | None = None,
    gpu_override: str | None = None,
) -> tuple[dict, float | None, str | None]:
    row = hardware.lookup(gpu_override or gpu_name)
    peak = dict(row["peak_tflops"]) if row else {}
    if override:
        peak.update(override)
    hbm = hbm_override if hbm_override is not None else (row["hbm_tb_s"] if row else None)
    return peak, hbm, (row["name"] if row else None)


def provider_table(device: torch.device) -> list[dict]:
    rows = []
    for name in provider_names():
        p = get_provider(name)
        try:
            reason = p.availability(device)
        except Exception as exc:  # an availability probe that crashes is itself the reason
            reason = f"availability check failed: {exc}"
        rows.append(
            {
                "provider": name,
                "semantics": p.semantics,
                "available": reason is None,
                "reason": reason,
                "description": p.description,
                "source": provider_source(name).describe(),
            }
        )
    return rows


def provider_plugins() -> list[dict]:
    """The installed plugins (entry points of `gdpa_bench.providers`) this process loaded, with the providers
    each added, and those that failed with their error: recorded in results.json `meta.provider_plugins`,
    so a result names the plugin version that produced it."""
    by_entry: dict[str, dict] = {}
    try:
        names = provider_names()
    except ImportError:  # a GDPA_BENCH_PROVIDERS module that does not import: its command says so (one line)
        return []
    for name in names:
        src = provider_source(name)
        if src.kind == "plugin":
            by_entry.setdefault(src.entry_point, {**src.record(), "providers": [], "error": None})
            by_entry[src.entry_point]["providers"].append(name)
    failed = [{**f.source.record(), "providers": [], "error": f.error} for f in plugin_failures()]
    return [*by_entry.values(), *failed]


ENV_KEYS = (
    "host",
    "os",
    "cpu",
    "cpu_count",
    "ram_gb",
    "device",
    "gpu",
    "gpu_uuid",
    "compute_capability",
    "sm_count",
    "gpu_visible",
    "driver",
    "cuda",
    "cudnn",
    "torch",
    "triton",
    "flash_attn",
    "python",
    "git_sha",
    "git_branch",
    "git_commit_time",
    "git_dirty",
    "gpu_clocks_applications_mhz",
    "gpu_clocks_max_mhz",
    "gpu_ecc_mode",
    "gpu_persistence_mode",
    "gpu_mig_mode",
)


def print_env(device: torch.device, full: bool = False) -> None:
    info = collect(device)
    print("gdpa-bench environment")
    for key in ENV_KEYS:
        print(f"  {key:28s} {info.get(key)}")
    for key, value in info["env"].items():
        print(f"  {'$' + key:28s} {value}")
    try:
        mon = PowerMonitor(device_index=device.index or 0)
        i = mon.info()
        state = "available" if i.get("available") else "unavailable: " + str(i.get("unavailable_reason"))
        print(f"  {'nvml':28s} {state}")
        if i.get("available"):
            print(f"  {'power source':28s} {i.get('power_source')} {i.get('power_source_note') or ''}")
            print(
                f"  {'power limit':28s} enforced {i.get('enforced_power_limit_w')} W, "
                f"default {i.get('default_power_limit_w')} W"
            )
        mon.close()
    except Exception as exc:
        print(f"  {'nvml':28s} unavailable: {exc}")
    peak, hbm, row = peaks(info["gpu"])
    print(f"  {'datasheet':28s} {row or 'unknown GPU'} {peak or ''} {f'{hbm} TB/s' if hbm else ''}")
    print("providers: name, semantics, where it came from, whether it runs here")
    for r in provider_table(device):
        status = "ok" if r["available"] else f"unavailable: {r['reason']}"
        print(f"  {r['provider']:18s} {r['semantics']:8s} {r['source']:24s} {status}")
    failures = plugin_failures()
    if failures:
        print("provider plugins that did not load (their providers are left out):")
        for f in failures:
            print(f"  {f.source.describe()}: {f.error}")
    if full:
        print("\ntorch.utils.collect_env:")
        print(re.sub(r"^", "  ", collect_env.get_pretty_env_info(), flags=re.M))
    sys.stdout.flush()
