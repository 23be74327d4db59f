"""The profiling views of a run's cases (docs/DESIGN.md §5, "Where the time goes"): after a case's timed
samples and energy loop, its CUDA-graph device time (`timing.cuda_graph`, bench.case.graph_timing), its kernel
breakdown (bench.profiling.breakdown; with `breakdown.trace` its Kineto trace under RUN_DIR/traces/) and whether the
GPU idled through the call (`host_bound`), and, for the cases `bands.only` selects, its length bands
(bench.profiling.bands), each band measured exactly as the whole case (`measure`: the same timer, flush, graph time and
breakdown); after the sweep, Nsight Compute over the cases `counters.only` selects (bench.profiling.counters). None of
them can fail a case: what goes wrong is recorded in its block (`kernels.error`, `cuda_graph.error`,
`bands.error` or a band's `error` or `note`, `counters.status` and `reason`), except a fault of the GPU (a
sticky CUDA error, bench.case.faults), which is the case's: it is recorded `failed` and ends the process's sweep.
The views run wherever the sweep runs, a worker process included (bench.shard.worker); a restarted worker
resumes the run folder, so the cases already recorded keep their views, and Nsight Compute after the
sweep profiles only the selected cases that have no counters yet (bench.profiling.counters.for_run)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from bench.case.faults import is_sticky_cuda_error
from bench.case.graph_timing import graph_time
from bench.case.timing import Samples, l2_flush_buffer
from bench.config.cases import Case
from bench.profiling.bands import case_bands
from bench.profiling.breakdown import failed, kernel_breakdown, trace_name
from bench.profiling.counters import for_run
from kernels.registry import Provider
from results.figures import host_bound, idle_share
from results.files import ResultsWriter
from support.text import one_line


class CaseProfiling:
    """`model`: the validated config (BenchConfig); `timer(fn) -> Samples` times a callable the way the
    runner does; `run_dir`: where traces go (None: no traces)."""

    def __init__(self, model, device: torch.device, timer: Callable[[Callable], Samples], run_dir: Path | None = None):
        self.model, self.device, self.timer, self.run_dir = model, device, timer, run_dir
        self.gpu = device.type == "cuda"
        self.breakdown_on = model.breakdown.on(device.type)
        self.bands_rx = re.compile(model.bands.only) if model.bands.only else None

    def after_samples(self, case: Case, rec: dict, fn, provider: Provider, batch) -> None:
        """The views of one timed case, into its record."""
        if self.gpu and self.model.timing.cuda_graph:
            rec["cuda_graph"] = graph_time(fn, self.device, self._flush(), rec.get("median_ms"))
        if self.breakdown_on:
            rec["kernels"] = self.breakdown(fn, case.id)
            self.idle(rec["kernels"], rec)
        if self.bands_rx is not None and self.bands_rx.search(case.id):
            rec["bands"] = self.bands(case, rec, provider, batch.q_lengths, batch.kv_lengths)

    def after_sweep(self, cases: list[Case], writer: ResultsWriter, run_dir: Path, say: Callable[[str], None]):
        """Nsight Compute over the selected cases recorded ok (one child process for all of them)."""
        found = for_run(self.model, cases, writer.data["cases"], self.device, run_dir, say)
        if found:
            writer.update_cases(found)

    def _flush(self) -> torch.Tensor | None:
        return l2_flush_buffer(self.device) if self.gpu and self.model.timing.flush_l2 else None

    def idle(self, kernels: dict, rec: dict) -> None:
        """The share of the timed call the GPU had no kernel of it, and the `host_bound` flag (GPU only:
        the CPU profiler's ops say nothing about a GPU's idle time)."""
        if kernels.get("source") != "cuda" or kernels.get("sum_ms") is None:
            return
        idle = idle_share(kernels["sum_ms"], rec.get("median_ms"))
        kernels["idle_share"] = None if np.isnan(idle) else idle
        rec["host_bound"] = host_bound(kernels["sum_ms"], rec.get("median_ms"))

    def measure(self, fn) -> dict:
        """`fn` (warmed) measured exactly as a whole case is: the runner's timer (the same path and L2
        flush), then its CUDA-graph time when configured, then its kernels (GPU runs with the breakdown on).
        {samples, graph_ms, kernel_ms, note (why graph_ms or kernel_ms is missing)}."""
        samples = self.timer(fn)
        out: dict = {"samples": samples, "graph_ms": None, "kernel_ms": None, "note": None}
        notes = []
        if self.gpu and self.model.timing.cuda_graph:
            g = graph_time(fn, self.device, self._flush(), samples.median_ms)
            out["graph_ms"] = g["ms"]
            notes += [g["error"]] if g["error"] else []
        if self.gpu and self.breakdown_on:
            k = self.breakdown(fn, None)
            out["kernel_ms"] = k.get("sum_ms")
            notes += [f"kernel breakdown: {k['error']}"] if k.get("error") else []
        out["note"] = "; ".join(notes) or None
        return out

    def gate(self) -> dict | None:
        """The correctness gate each band passes before it is timed, as the case did (None: the gate is off)."""
        c = self.model.correctness
        return {"tolerance": c.tolerance, "max_check_seqs": c.max_check_seqs} if c.enabled else None

    def bands(self, case: Case, rec: dict, provider: Provider, q_lengths, kv_lengths) -> dict:
        try:
            return case_bands(
                case,
                provider,
                q_lengths,
                kv_lengths,
                self.model.bands.edges,
                self.device,
                self.measure,
                self.gate(),
                rec,
            )
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # each band records its own failure; this is the split itself failing
            if is_sticky_cuda_error(exc):
                raise  # the GPU faulted: the case's error, and the process's end (bench.case.faults)
            return {"edges": self.model.bands.edges, "rows": [], "error": f"length bands failed: {one_line(exc)}"}

    def trace_path(self, case_id: str | None) -> Path | None:
        if case_id is None or self.run_dir is None or not self.model.breakdown.traced(case_id):
            return None
        return self.run_dir / "traces" / trace_name(case_id)

    def breakdown(self, fn, case_id: str | None) -> dict:
        """The `kernels` record of `fn`; with `breakdown.trace` and a case id, its trace kept in the run
        folder (`trace`: the path from the run folder)."""
        calls, warm_ms = self.model.breakdown.calls, self.model.breakdown.warm_ms
        dest = self.trace_path(case_id)
        try:
            rec = kernel_breakdown(fn, self.device, calls, self._flush(), warm_ms, trace_path=dest)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # the case was timed; a profiler that fails only loses its breakdown
            if is_sticky_cuda_error(exc):
                raise  # the GPU faulted: the case's error, and the process's end (bench.case.faults)
            return failed(f"kernel breakdown failed: {one_line(exc)}", calls, self.device)
        if dest is not None:
            rec["trace"] = dest.relative_to(self.run_dir).as_posix()
        return rec
