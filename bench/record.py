"""One case's record in results.json: its fields before it runs, and the figures derived from its samples.

FLOPs follow the peers' convention (docs/DESIGN.md §3): fwd = 4·H·D·Σ unmasked (q, k) pairs, bwd 2.5×,
fwd_bwd 3.5×. TFLOP/s = flops / median time; utilization = TFLOP/s / ceiling (docs/DESIGN.md §5).
"""

from __future__ import annotations

import numpy as np

from bench.cases import Case, Workload
from bench.timing import Samples
from reports.drift import drift
from workloads import work_pairs

FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}


def case_flops(w: Workload, q_lengths: np.ndarray, kv_lengths: np.ndarray, mode: str) -> float:
    """The peers' convention: fwd = 4·H·D·Σ pairs (causal: unmasked pairs); bwd 2.5×, fwd_bwd 3.5×."""
    pairs = float(work_pairs(q_lengths, kv_lengths, causal=w.causal).sum())
    return 4.0 * w.H * w.D * pairs * FLOP_FACTOR[mode]


def workload_fields(w: Workload, wstats: dict) -> dict:
    """The case's `workload` block: the parameters and the statistics of its lengths."""
    return {
        "name": w.name,
        "family": w.family,
        "params": w.family_params,
        "pairing": w.rule,
        "pairing_params": w.rule_params,
        "sorted": w.sort_by_length,
        "B": w.B,
        "H": w.H,
        "Hkv": w.Hkv,
        "D": w.D,
        "causal": w.causal,
        "alpha": w.alpha,
        "qk_scale": w.qk_scale,
        "max_q": wstats["max_q"],
        "max_kv": wstats["max_kv"],
        "total_q": wstats["total_q"],
        "total_kv": wstats["total_kv"],
        "padding_waste": wstats["padding_waste"],
        "flop_waste": wstats["flop_waste"],
        "imbalance": wstats["imbalance"],
        "seed": w.seed,
        "lengths_sha256": wstats["lengths_sha256"],
    }


def base_record(
    case: Case,
    semantics: str,
    options: dict | None,
    wstats: dict,
    flops: float,
    gpu_index: int | None,
    gpu_name: str | None,
) -> dict:
    """A case before it runs: every field of docs/DESIGN.md §6, the outcome still empty."""
    w = case.workload
    return {
        "id": case.id,
        "set": w.set,
        "max_len": w.max_len,
        "sweep": dict(w.sweep),
        "provider": case.provider,
        "provider_name": case.provider_name or case.provider,
        "provider_options": options,
        "semantics": semantics,
        "mode": case.mode,
        "dtype": w.dtype,
        "activation": w.activation if semantics == "gdpa" else "softmax",
        "workload": workload_fields(w, wstats),
        "status": None,
        "error": None,
        "correctness": None,
        "flops": flops,
        "times_ms": [],
        "median_ms": None,
        "p20_ms": None,
        "p80_ms": None,
        "timed_s": None,
        "drift": None,
        "drift_p": None,
        "sm_clock_mhz": None,
        "tflops": None,
        "util_peak": None,
        "util_measured": None,
        "power": None,
        "gpu_index": gpu_index,
        "gpu_name": gpu_name,
        "kernel_config": None,
        "wall_s": None,
    }


def timing_fields(samples: Samples, flops: float, peak_tflops: float | None, gemm_tflops: float | None) -> dict:
    """The samples and what follows from them: TFLOP/s from the median, utilization over each ceiling,
    the timed window (the samples' sum, s) and the drift of the samples (first vs last tenth, the figure
    compare judges a case by: reports.drift)."""
    tflops = flops / (samples.median_ms * 1e-3) / 1e12 if samples.median_ms > 0 else None
    d, p = drift(samples.times_ms)
    return {
        "times_ms": samples.times_ms,
        "median_ms": samples.median_ms,
        "p20_ms": samples.p20_ms,
        "p80_ms": samples.p80_ms,
        "timed_s": sum(samples.times_ms) / 1e3,
        "drift": d,
        "drift_p": p,
        "tflops": tflops,
        "util_peak": tflops / peak_tflops if tflops is not None and peak_tflops else None,
        "util_measured": tflops / gemm_tflops if tflops is not None and gemm_tflops else None,
    }


def format_rate(tflops: float | None) -> str:
    """TFLOP/s for a log line; below 1 TFLOP/s (CPU runs) in GFLOP/s, never a bare "0.0"."""
    if tflops is None:
        return "—"
    if tflops >= 1 or tflops == 0:
        return f"{tflops:.4g} TFLOP/s"
    return f"{tflops * 1e3:.4g} GFLOP/s"
