"""The report's environment table: what ran where (GPU, versions, clocks, git state, variables).

Rows whose fields a run did not record (older runs, CPU runs) show "—"; the environment capture itself
is bench.sweep.env (docs/DESIGN.md §12).
"""

from __future__ import annotations

from typing import Any

from reports.document import DASH, Table, fmt, fmt_date, isnum


def gpus_used(meta: dict) -> Any:
    """GPUs the run used. Runs recorded before `gpu_visible` existed stored the *visible* count in
    `gpu_count` (a one-GPU run on a two-GPU host said 2); only their merged runs (`shards`) counted workers."""
    count = meta.get("gpu_count")
    if "gpu_visible" in meta or "shards" in meta:
        return count
    return 1 if meta.get("gpu") else count


def _gpu(meta: dict) -> str:
    gpu, count = meta.get("gpu"), gpus_used(meta)
    if not gpu:
        return f"{DASH} (device {meta.get('device') or '?'})"
    return f"{gpu} × {int(count)}" if isnum(count) and int(count) > 1 else gpu


def _pair(d: Any, unit: str = "") -> str:
    if not isinstance(d, dict) or all(v is None for v in d.values()):
        return DASH
    return ", ".join(f"{k} {fmt(v)}{unit}" for k, v in d.items())


def _git(meta: dict) -> str:
    sha = meta.get("git_sha")
    if not sha:
        return DASH
    parts = [str(sha)]
    if meta.get("git_branch"):
        parts.append(f"on {meta['git_branch']}")
    if meta.get("git_commit_time"):
        parts.append(f"committed {fmt_date(meta['git_commit_time'])}")
    dirty = meta.get("git_dirty")
    parts.append({True: "(uncommitted changes)", False: "(clean)"}.get(dirty, ""))
    return " ".join(p for p in parts if p)


def _modes(meta: dict) -> str:
    names = (("ECC", "gpu_ecc_mode"), ("persistence", "gpu_persistence_mode"), ("MIG", "gpu_mig_mode"))
    shown = [f"{label} {fmt(meta.get(key))}" for label, key in names if key in meta]
    return ", ".join(shown) if shown else DASH


def _sessions(meta: dict) -> str:
    """A run resumed on another machine or commit (results.files.sessions): each session, and a warning when its
    cases were measured on more than one GPU or commit (the case records' `session` says which)."""
    runs = meta.get("sessions")
    if not isinstance(runs, list) or len(runs) < 2:
        return DASH
    shown = [
        f"{i}: {fmt_date(r.get('started_at'))} · {fmt(r.get('git_sha'))} · {fmt(r.get('gpu_uuid'))}"
        + f" on {fmt(r.get('host'))}"
        for i, r in enumerate(runs)
        if isinstance(r, dict)
    ]
    differ = [
        name
        for name, key in (("GPUs", "gpu_uuid"), ("commits", "git_sha"), ("drivers", "driver"))
        if len({str(r.get(key)) for r in runs if isinstance(r, dict)}) > 1
    ]
    warn = f"  ⚠ cases measured on {len(runs)} sessions ({', '.join(differ)} differ): see each case's `session`"
    return "; ".join(shown) + (warn if differ else "")


def environment_table(meta: dict, baseline: str | None) -> Table:
    mon = meta.get("monitor") if isinstance(meta.get("monitor"), dict) else {}
    peaks = meta.get("peak_tflops") or {}
    peak_s = (
        ", ".join(f"{k} {fmt(v, 'tflops')}" for k, v in peaks.items()) if isinstance(peaks, dict) and peaks else DASH
    )
    cap, enf = meta.get("power_cap_w"), meta.get("enforced_power_limit_w")
    cap_s = f"{fmt(cap, 'whole')} W" if isnum(cap) else DASH
    enf_s = f"{fmt(enf, 'whole')} W" if isnum(enf) else DASH
    if isnum(cap) and isnum(enf) and float(cap) != float(enf):
        enf_s += "  ⚠ differs from the cap"
    gemm = meta.get("measured_gemm_tflops")
    gemm_s = (
        ", ".join(f"{k} {fmt(v, 'tflops')}" for k, v in gemm.items())
        if isinstance(gemm, dict)
        else (f"{fmt(gemm, 'tflops')} TFLOP/s" if isnum(gemm) else f"{DASH} (not measured)")
    )
    copy = meta.get("measured_copy_tb_s")
    avail = mon.get("available")
    mon_s = (
        ("available" if avail else f"unavailable: {mon.get('unavailable_reason') or 'no reason given'}")
        if avail is not None
        else DASH
    )
    src = mon.get("power_source")
    cpu = meta.get("cpu")
    cpu_s = f"{cpu} ({meta['cpu_count']} cores)" if cpu and meta.get("cpu_count") else fmt(cpu)
    ram = meta.get("ram_gb")
    env = meta.get("env") if isinstance(meta.get("env"), dict) else {}
    rows = [
        ["GPU", _gpu(meta)],
        ["GPU UUID", fmt(meta.get("gpu_uuid"))],
        ["device", fmt(meta.get("device"))],
        ["host", fmt(meta.get("host"))],
        ["OS", fmt(meta.get("os") or meta.get("platform"))],
        ["CPU", cpu_s],
        ["RAM", f"{fmt(ram)} GB" if isnum(ram) else DASH],
        ["driver", fmt(meta.get("driver"))],
        ["CUDA", fmt(meta.get("cuda"))],
        ["cuDNN", fmt(meta.get("cudnn"))],
        ["torch", fmt(meta.get("torch"))],
        ["triton", fmt(meta.get("triton"))],
        ["flash-attn", fmt(meta.get("flash_attn"))],
        ["python", fmt(meta.get("python"))],
        ["git", _git(meta)],
        ["config", f"{fmt(meta.get('config'))} (sha256 {str(meta.get('config_sha256') or DASH)[:12]})"],
        ["started / finished", f"{fmt_date(meta.get('started_at'))} / {fmt_date(meta.get('finished_at'))}"],
        ["sessions (resumed on another machine or commit)", _sessions(meta)],
        [
            "GPU clocks: application / max (MHz)",
            f"{_pair(meta.get('gpu_clocks_applications_mhz'))} / {_pair(meta.get('gpu_clocks_max_mhz'))}",
        ],
        ["GPU modes", _modes(meta)],
        ["power cap (configured)", cap_s],
        ["enforced power limit", enf_s],
        ["datasheet dense peak (TFLOP/s)", peak_s],
        ["datasheet HBM", f"{fmt(meta.get('hbm_tb_s'))} TB/s" if isnum(meta.get("hbm_tb_s")) else DASH],
        ["measured GEMM ceiling", gemm_s],
        ["measured copy bandwidth", f"{fmt(copy)} TB/s" if isnum(copy) else f"{DASH} (not measured)"],
        ["power monitor", mon_s + (f" (source: {src})" if src else "")],
        ["variables", " ".join(f"{k}={v}" for k, v in env.items()) or DASH],
        ["baseline provider (speedups)", fmt(baseline)],
    ]
    return Table(["", ""], rows, css="env")
