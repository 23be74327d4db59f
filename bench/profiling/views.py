"""The profiling views of a run's cases (docs/DESIGN.md §5, "Where the time goes"): after a case's timed
samples and energy loop, its kernel breakdown (bench.profiling.breakdown) and, for the cases `bands.only` selects,
its length bands (bench.profiling.bands); after the sweep, Nsight Compute over the cases `counters.only` selects
(bench.profiling.counters). None of them can fail a case: what goes wrong is recorded in its block (`kernels.error`,
`bands.error` or a band's `error`, `counters.status` and `reason`), except a fault of the GPU (a sticky
CUDA error, bench.case.faults), which is the case's: it is recorded `failed` and ends the process's sweep.
The views run wherever the sweep runs, a worker process included (bench.shard.worker); a restarted worker
resumes the run folder, so the cases already recorded keep their views, and Nsight Compute after the
sweep profiles only the selected cases that have no counters yet (bench.profiling.counters.for_run)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import torch

from bench.case.faults import is_sticky_cuda_error
from bench.case.timing import Samples, l2_flush_buffer
from bench.config.cases import Case
from bench.profiling.bands import case_bands
from bench.profiling.breakdown import failed, kernel_breakdown
from bench.profiling.counters import for_run
from kernels.registry import Provider
from results.files import ResultsWriter
from support.text import one_line


class CaseProfiling:
    """`model`: the validated config (BenchConfig); `timer(fn) -> Samples` times a callable the way the
    runner does."""

    def __init__(self, model, device: torch.device, timer: Callable[[Callable], Samples]):
        self.model, self.device, self.timer = model, device, timer
        self.breakdown_on = model.breakdown.on(device.type)
        self.bands_rx = re.compile(model.bands.only) if model.bands.only else None

    def after_samples(self, case: Case, rec: dict, fn, provider: Provider, batch) -> None:
        """The views of one timed case, into its record."""
        if self.breakdown_on:
            rec["kernels"] = self.breakdown(fn)
        if self.bands_rx is not None and self.bands_rx.search(case.id):
            rec["bands"] = self.bands(case, rec, provider, batch)

    def after_sweep(self, cases: list[Case], writer: ResultsWriter, run_dir: Path, say: Callable[[str], None]):
        """Nsight Compute over the selected cases recorded ok (one child process for all of them)."""
        found = for_run(self.model, cases, writer.data["cases"], self.device, run_dir, say)
        if found:
            writer.update_cases(found)

    def bands(self, case: Case, rec: dict, provider: Provider, batch) -> dict:
        c = self.model.correctness
        gate = {"tolerance": c.tolerance, "max_check_seqs": c.max_check_seqs} if c.enabled else None
        try:
            return case_bands(
                case,
                provider,
                batch.q_lengths,
                batch.kv_lengths,
                self.model.bands.edges,
                self.device,
                self.timer,
                gate,
                rec.get("median_ms"),
                rec.get("kernel_config"),
            )
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # each band records its own failure; this is the split itself failing
            if is_sticky_cuda_error(exc):
                raise  # the GPU faulted: the case's error, and the process's end (bench.case.faults)
            return {"edges": self.model.bands.edges, "rows": [], "error": f"length bands failed: {one_line(exc)}"}

    def breakdown(self, fn) -> dict:
        calls, warm_ms = self.model.breakdown.calls, self.model.breakdown.warm_ms
        try:
            gpu = self.device.type == "cuda"
            flush = l2_flush_buffer(self.device) if gpu and self.model.timing.flush_l2 else None
            return kernel_breakdown(fn, self.device, calls, flush, warm_ms)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # the case was timed; a profiler that fails only loses its breakdown
            if is_sticky_cuda_error(exc):
                raise  # the GPU faulted: the case's error, and the process's end (bench.case.faults)
            return failed(f"kernel breakdown failed: {one_line(exc)}", calls, self.device)
