"""The report's environment table: what ran where (GPU, versions, clocks, git state, variables)."""
from __future__ import annotations

from reports.document import DASH, Table, fmt, fmt_date, isnum


def environment_table(meta: dict, baseline: str | None) -> Table:
    mon = meta.get("monitor") if isinstance(meta.get("monitor"), dict) else {}
    gpu = meta.get("gpu")
    count = meta.get("gpu_count")
    gpu_s = f"{gpu} × {count}" if gpu and isnum(count) and int(count) > 1 else (gpu or f"{DASH} (device {meta.get('device') or '?'})")
    peaks = meta.get("peak_tflops") or {}
    peak_s = ", ".join(f"{k} {fmt(v, 'tflops')}" for k, v in peaks.items()) if isinstance(peaks, dict) and peaks else DASH
    cap, enf = meta.get("power_cap_w"), meta.get("enforced_power_limit_w")
    cap_s = f"{fmt(cap, 'w')} W" if isnum(cap) else DASH
    enf_s = f"{fmt(enf, 'w')} W" if isnum(enf) else DASH
    if isnum(cap) and isnum(enf) and float(cap) != float(enf):
        enf_s += "  ⚠ differs from the cap"
    gemm = meta.get("measured_gemm_tflops")
    gemm_s = (", ".join(f"{k} {fmt(v, 'tflops')}" for k, v in gemm.items()) if isinstance(gemm, dict)
              else (f"{fmt(gemm, 'tflops')} TFLOP/s" if isnum(gemm) else f"{DASH} (not measured)"))
    copy = meta.get("measured_copy_tb_s")
    avail = mon.get("available")
    mon_s = ("available" if avail else f"unavailable: {mon.get('unavailable_reason') or 'no reason given'}") \
        if avail is not None else DASH
    src = mon.get("power_source")
    rows = [
        ["GPU", gpu_s], ["device", fmt(meta.get("device"))], ["host", fmt(meta.get("host"))],
        ["driver", fmt(meta.get("driver"))], ["CUDA", fmt(meta.get("cuda"))], ["torch", fmt(meta.get("torch"))],
        ["triton", fmt(meta.get("triton"))], ["python", fmt(meta.get("python"))],
        ["git sha", fmt(meta.get("git_sha"))],
        ["config", f"{fmt(meta.get('config'))} (sha256 {str(meta.get('config_sha256') or DASH)[:12]})"],
        ["started / finished", f"{fmt_date(meta.get('started_at'))} / {fmt_date(meta.get('finished_at'))}"],
        ["power cap (configured)", cap_s], ["enforced power limit", enf_s],
        ["datasheet dense peak (TFLOP/s)", peak_s],
        ["datasheet HBM", f"{fmt(meta.get('hbm_tb_s'))} TB/s" if isnum(meta.get("hbm_tb_s")) else DASH],
        ["measured GEMM ceiling", gemm_s],
        ["measured copy bandwidth", f"{fmt(copy)} TB/s" if isnum(copy) else f"{DASH} (not measured)"],
        ["power monitor", mon_s + (f" (source: {src})" if src else "")],
        ["baseline provider (speedups)", fmt(baseline)],
    ]
    return Table(["", ""], rows, css="env")
