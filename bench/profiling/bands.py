"""Length bands of one case: its batch split by sequence length (workloads.bands), each band's sub-batch
built alone, run through the same correctness gate and measured exactly as the whole case is, in the same
two phases: with the case's timed measurements (`case_bands`; the caller's `measure`: the runner's timer with
its L2 flush and the CUDA-graph time when configured), and, with the case's kernel breakdown after every
timed measurement of the process, each band's breakdown (`band_kernels`; the caller's `profile`: a band's
sub-batch built again, its kernels and the event-timed median of the breakdown's own pass).

What it answers: where the time of a jagged batch goes. Per band the share of the sequences, of the work
and of the time (each band's median over the sum of the bands' medians), its TFLOP/s, and the sum of the
bands against the whole batch's median (> 1: running the bands apart costs more than the batch — tails and
launches; < 1: the whole batch pays for its mix). The batch's *jaggedness ceiling* is the tile efficiency
of the whole batch at the kernel's tile × the kernel's long-sequence speed (the best TFLOP/s of its
bands): what this kernel would reach if jaggedness cost nothing but the partial tiles.

A band of short sequences can be host-bound: launched alone its GPU work is about as long as the host's
work per call (our op's ~0.1 ms of Python, the backend's launches, the flush and the events), so its events
time the host whenever the host falls behind; inside the whole batch that host work hides behind the long
sequences' kernels. Each band therefore shows its kernels' time and the share of
its call the GPU idled (`idle_share`, against the event-timed median of its breakdown's pass, the clock its
kernels ran at), and when the bands do not sum to within 10% of the whole batch `why`
says which of the two it is: host time (the kernels sum close to the whole batch's) or the kernels
themselves costing more apart.

The record (`bands`, docs/DESIGN.md §6): {key, edges, rows: [per band: lo, hi, label, n_seqs, seq_share,
work_pairs, work_share, tile_eff_64, tile_eff_128, flops, status, error, rel_err, median_ms, p20_ms, p80_ms,
n_samples, kernel_ms, pass_median_ms, idle_share, graph_ms, note, tflops, time_share], sum_ms, whole_ms,
sum_over_whole,
kernel_sum_ms, kernel_sum_over_whole, why, tile, tile_source, tile_eff, long_band, long_tflops,
ceiling_tflops, error}: every field is a row of the metric table (results.metrics).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import numpy as np
import torch

from bench.case.faults import is_sticky_cuda_error
from bench.case.gate import correctness
from bench.config.cases import Case, dtype_of
from kernels.registry import Provider
from results.band_ceiling import ceiling, kernel_tile
from results.figures import HOST_BOUND_IDLE, idle_share, judged_kernel_ms, tflops
from support.text import one_line
from workloads import make_batch
from workloads.bands import band_table, bands_of, edges_for

SUM_TOLERANCE = 0.10  # the bands' sum within this of the whole batch needs no explanation


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def _band_batch(case: Case, q: np.ndarray, k: np.ndarray, device: torch.device):
    w = case.workload
    return make_batch(q, k, H=w.H, Hkv=w.Hkv, D=w.D, dtype=dtype_of(w.dtype), device=device, seed=w.seed)


def time_band(
    case: Case,
    provider: Provider,
    q: np.ndarray,
    k: np.ndarray,
    device: torch.device,
    measure: Callable[[Callable], dict],
    gate: dict | None,
) -> dict:
    """One band's sub-batch: gate (when `gate` gives its tolerance and max_check_seqs), warm, measure."""
    w, spec = case.workload, case.spec
    flops = case.flops((q, k))
    out: dict = {"flops": flops, "status": None, "error": None, "rel_err": None}
    batch = fn = None
    try:
        batch = _band_batch(case, q, k, device)
        reason = provider.unsupported(batch, spec)
        if reason is not None:
            return {**out, "status": "skipped", "error": reason}
        if gate is not None:
            c = correctness(provider, batch, spec, case.mode, gate["tolerance"], gate["max_check_seqs"], w.seed)
            out["rel_err"] = c["rel_err"]
            if not c["passed"]:
                return {**out, "status": "incorrect", "error": f"rel_err {c['rel_err']:.3g} > {c['tolerance']:g}"}
            if device.type == "cuda":
                torch.cuda.empty_cache()  # as the runner does after the gate, before timing
        fn = provider.build(batch, spec, case.mode)
        fn()  # compile / autotune / the op's measured choice for this shape, outside the timed region
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        m = measure(fn)
        s = m["samples"]
        rate = tflops(flops, s.median_ms)
        out.update(
            status="ok",
            median_ms=s.median_ms,
            p20_ms=s.p20_ms,
            p80_ms=s.p80_ms,
            n_samples=len(s.times_ms),
            graph_ms=m["graph_ms"],
            note=m["note"],
            tflops=rate if rate == rate else None,
        )
        if not m.get("profiled_later"):  # no breakdown comes: the band's kernel fields stay empty
            out.update(kernel_ms=None, pass_median_ms=None, idle_share=None)
    except torch.cuda.OutOfMemoryError as exc:
        out.update(status="failed", error=f"out of memory: {one_line(exc)}")
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a band that raises is recorded; the case and the sweep go on
        if is_sticky_cuda_error(exc):
            raise  # unless it faulted the GPU: then it is the case's (bench.case.faults)
        out.update(status="failed", error=one_line(exc))
    finally:
        del fn, batch
        _free(device)
    return out


def _sum(rows: list[dict], key: str) -> float | None:
    """Σ rows[key], or None unless every row has it."""
    values = [r.get(key) for r in rows]
    return sum(values) if values and all(v is not None for v in values) else None


def band_host_bound(row: dict) -> bool:
    """A timed band is host-bound by the case's own rule (bench.profiling.views): its CUDA-graph time (the
    device's time, no host) under 1 − HOST_BOUND_IDLE of its timed median; only without a graph time, the
    GPU's idle share in its breakdown's pass (the profiler's own host time per launch inflates that one)."""
    graph, median = row.get("graph_ms"), row.get("median_ms")
    if graph is not None and median:
        return bool(1.0 - graph / median > HOST_BOUND_IDLE)
    return (row.get("idle_share") or 0.0) > HOST_BOUND_IDLE


def _idle_text(row: dict) -> str:
    graph, median = row.get("graph_ms"), row.get("median_ms")
    if graph is not None and median:
        return f"graph {graph:.3f} ms of a {median:.3f} ms call"
    return f"GPU idle {row['idle_share']:.0%}"


def why_apart(sum_over_whole: float | None, timed: list[dict], kernel_over_whole: float | None) -> str | None:
    """Why the bands' sum is more than SUM_TOLERANCE from the whole batch's median (None when it is not)."""
    if sum_over_whole is None or abs(sum_over_whole - 1.0) <= SUM_TOLERANCE:
        return None
    why = [f"the bands sum to {sum_over_whole:.2f}× the whole batch"]
    idle = [r for r in timed if band_host_bound(r)]
    if idle:
        bands = ", ".join(f"{r['label']} ({_idle_text(r)})" for r in idle)
        why.append(
            f"host-bound bands: {bands}: launched alone, a band's kernels are shorter than the call's host work, "
            "which the whole batch hides behind its long sequences' kernels"
        )
    if kernel_over_whole is not None:
        close = abs(kernel_over_whole - 1.0) <= SUM_TOLERANCE
        why.append(
            f"their kernels sum to {kernel_over_whole:.2f}× the whole batch's"
            + ("; the difference is host time, not kernel time" if close else "; the kernels cost more apart")
        )
    elif not idle:
        why.append("no kernel breakdown of the bands to tell host time from kernel time (a GPU run with breakdown)")
    return "; ".join(why)


def case_bands(
    case: Case,
    provider: Provider,
    q_lengths: np.ndarray,
    kv_lengths: np.ndarray,
    edges: list[int] | None,
    device: torch.device,
    measure: Callable[[Callable], dict],
    gate: dict | None,
    whole: dict,
) -> dict:
    """The `bands` record of one case (see the module doc). `whole`: the case's record (its median_ms,
    kernel_config and kernels)."""
    q = np.asarray(q_lengths, dtype=np.int64)
    k = np.asarray(kv_lengths, dtype=np.int64)
    causal = case.workload.causal
    edges = edges_for(q, k, edges)
    rows = band_table(q, k, edges, causal)
    for row, band in zip(rows, bands_of(edges), strict=True):
        if row["n_seqs"] == 0:
            row.update(status="empty", error=None)
            continue
        idx = band.members(q, k)
        row.update(time_band(case, provider, q[idx], k[idx], device, measure, gate))
    timed = [r for r in rows if r["status"] == "ok"]
    complete = all(r["status"] in ("ok", "empty") for r in rows)
    sum_ms = sum(r["median_ms"] for r in timed) if timed else None
    for r in timed:
        r["time_share"] = r["median_ms"] / sum_ms if sum_ms else None
    whole_ms = whole.get("median_ms")
    over = sum_ms / whole_ms if complete and sum_ms and whole_ms else None
    tile, source = kernel_tile(whole.get("kernel_config"), case.mode)
    best = max(timed, key=lambda r: r["tflops"] or 0.0, default=None)
    eff, ceil = ceiling(q, k, tile, causal, best["tflops"] if best else None)
    out = {
        "key": "min(Lq, Lk)",
        "edges": edges,
        "rows": rows,
        # the sum stands against the whole batch only when every non-empty band was timed
        "sum_ms": sum_ms if complete else None,
        "whole_ms": whole_ms,
        "sum_over_whole": over,
        "tile": list(tile),
        "tile_source": source,
        "tile_eff": eff,
        "long_band": best["label"] if best else None,
        "long_tflops": best["tflops"] if best else None,
        "ceiling_tflops": ceil,
        "error": None,
    }
    return out | kernel_summary(rows, over, whole)


def kernel_summary(rows: list[dict], over: float | None, whole: dict) -> dict:
    """The bands' kernel sum against the whole batch's and `why` (recomputed once the breakdowns are in)."""
    timed = [r for r in rows if r["status"] == "ok"]
    complete = all(r["status"] in ("ok", "empty") for r in rows)
    whole_kernels = (whole.get("kernels") or {}).get("sum_ms")
    kernel_sum = _sum(timed, "kernel_ms") if complete else None
    kernel_over = kernel_sum / whole_kernels if kernel_sum is not None and whole_kernels else None
    why = why_apart(over, timed, kernel_over)
    return {"kernel_sum_ms": kernel_sum, "kernel_sum_over_whole": kernel_over, "why": why}


def kernels_pending(bands: dict | None) -> bool:
    """Whether a `bands` record has timed bands still waiting for their breakdown (no `kernel_ms` key yet)."""
    return any(r.get("status") == "ok" and "kernel_ms" not in r for r in (bands or {}).get("rows", []))


def band_kernels(
    case: Case,
    provider: Provider,
    bands: dict,
    q_lengths: np.ndarray,
    kv_lengths: np.ndarray,
    device: torch.device,
    profile: Callable[[Callable], dict],
    whole: dict,
) -> dict:
    """The `bands` record with each timed band's breakdown (the second phase: after every timed measurement
    of the process): its sub-batch built again, warmed, and `profile(fn)` (its `kernels` record); kernel_ms,
    pass_median_ms, idle_share (GPU) and a note of what went wrong per band, then the kernel sums and `why`.
    `whole`: the case's record with its own breakdown."""
    q = np.asarray(q_lengths, dtype=np.int64)
    k = np.asarray(kv_lengths, dtype=np.int64)
    rows = [dict(r) for r in bands.get("rows", [])]
    for row, band in zip(rows, bands_of(bands["edges"]), strict=True):
        if row.get("status") != "ok" or "kernel_ms" in row:
            continue
        idx = band.members(q, k)
        row.update(kernel_ms=None, pass_median_ms=None, idle_share=None)
        batch = fn = None
        try:
            batch = _band_batch(case, q[idx], k[idx], device)
            fn = provider.build(batch, case.spec, case.mode)
            fn()  # the band's first call (compile cached since its timing): outside the profiled pass
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            kern = profile(fn)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            if is_sticky_cuda_error(exc):
                raise
            kern = {"error": f"the band could not be built again: {one_line(exc)}"}
        finally:
            del fn, batch
            _free(device)
        row["kernel_ms"], row["pass_median_ms"] = judged_kernel_ms(kern), kern.get("pass_median_ms")
        if kern.get("source") == "cuda":  # the CPU profiler's ops say nothing of a GPU's idle time
            idle = idle_share(row["kernel_ms"], kern.get("pass_median_ms"))
            row["idle_share"] = None if idle != idle else idle
        if kern.get("error"):
            row["note"] = "; ".join(filter(None, [row.get("note"), f"kernel breakdown: {kern['error']}"]))
    return {**bands, "rows": rows, **kernel_summary(rows, bands.get("sum_over_whole"), whole)}
