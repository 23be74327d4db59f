"""The profiling views of a run's cases (docs/DESIGN.md §5, "Where the time goes"), in two phases, because a
torch.profiler session leaves host time on every later call of its process (~0.1 ms per call on the H200,
CUPTI torn down or not) and so no timed measurement may follow one:

- `timed`, with each case, after its samples and energy loop: its CUDA-graph device time
  (`timing.cuda_graph`, bench.case.graph_timing) and, for the cases `bands.only` selects, its length bands'
  timings (bench.profiling.bands; `measure`: each band's sub-batch timed exactly as the whole case, the same
  timer, flush and graph time);
- `profiled`, after the last timed case of the process (bench.profiling.later): its kernel breakdown
  (bench.profiling.breakdown; with `breakdown.trace` its Kineto trace under RUN_DIR/traces/), judged against
  the event-timed median of the breakdown's own pass (`idle_share`, `host_bound`, `accounting`), and its
  bands' breakdowns;

then Nsight Compute over the cases `counters.only` selects, in a child process (bench.profiling.counters).
None of them can fail a case: what goes wrong is recorded in its block (`kernels.error`,
`cuda_graph.error`, `bands.error` or a band's `error` or `note`, `counters.status` and `reason`), except a
fault of the GPU (a sticky CUDA error, bench.case.faults), which is the case's: it is recorded `failed` and
ends the process's sweep. A case whose profiled views are still missing (`pending`: a run stopped between
the phases, a worker lost to a fault) gets them from the next process that resumes the run folder."""

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
from bench.profiling.bands import band_kernels, case_bands, kernels_pending
from bench.profiling.breakdown import PASS_WINDOW, failed, kernel_breakdown, trace_name
from bench.profiling.counters import for_run
from kernels.registry import Provider
from results.figures import accounting, host_bound, idle_share, judged_kernel_ms
from results.files import ResultsWriter
from support.text import one_line


class CaseProfiling:
    """`model`: the validated config (BenchConfig); `timer(fn) -> Samples` times a callable the way the
    runner does; `run_dir`: where traces go (None: no traces); `clock()`: the SM clock now (MHz or None; the
    runner's NVML reader), read beside the CUDA-graph replays."""

    def __init__(
        self,
        model,
        device: torch.device,
        timer: Callable[[Callable], Samples],
        run_dir: Path | None = None,
        clock: Callable[[], float | None] | None = None,
    ):
        self.model, self.device, self.timer, self.run_dir, self.clock = model, device, timer, run_dir, clock
        self.gpu = device.type == "cuda"
        self.breakdown_on = model.breakdown.on(device.type)
        self.bands_rx = re.compile(model.bands.only) if model.bands.only else None

    # -- the timed phase: with each case ---------------------------------------------------------------
    def timed(self, case: Case, rec: dict, fn, provider: Provider, batch) -> None:
        """The timed views of one case, after its samples and energy loop, into its record."""
        if self.gpu and self.model.timing.cuda_graph:
            g = graph_time(fn, self.device, self._flush(), rec.get("median_ms"), clock=self.clock)
            g["ms_at_samples_clock"] = at_clock(g["ms"], g.get("sm_clock_mhz"), rec.get("sm_clock_mhz"))
            rec["cuda_graph"] = g
        if self.bands_rx is not None and self.bands_rx.search(case.id):
            rec["bands"] = self.bands(case, rec, provider, batch.q_lengths, batch.kv_lengths)

    def measure(self, fn) -> dict:
        """`fn` (warmed) timed exactly as a whole case is: the runner's timer (the same path and L2 flush),
        then its CUDA-graph time when configured. {samples, graph_ms, note (why graph_ms is missing),
        profiled_later (a breakdown comes in the second phase)}."""
        samples = self.timer(fn)
        out: dict = {"samples": samples, "graph_ms": None, "note": None, "profiled_later": self.breakdown_on}
        if self.gpu and self.model.timing.cuda_graph:
            g = graph_time(fn, self.device, self._flush(), samples.median_ms)
            out.update(graph_ms=g["ms"], note=g["error"])
        return out

    def after_sweep(self, cases: list[Case], writer: ResultsWriter, run_dir: Path, say: Callable[[str], None]):
        """Nsight Compute over the selected cases recorded ok (one child process for all of them)."""
        found = for_run(self.model, cases, writer.data["cases"], self.device, run_dir, say)
        if found:
            writer.update_cases(found)

    def _flush(self) -> torch.Tensor | None:
        return l2_flush_buffer(self.device) if self.gpu and self.model.timing.flush_l2 else None

    # -- the profiled phase: after the process's last timed case ---------------------------------------
    def pending(self, rec: dict) -> bool:
        """Whether a case recorded ok still lacks a view of the profiled phase (its breakdown, a band's)."""
        if rec.get("status") != "ok":
            return False
        return (self.breakdown_on and "kernels" not in rec) or kernels_pending(rec.get("bands"))

    def profiled(self, case: Case, rec: dict, fn, provider: Provider, batch, redo: bool = False) -> dict:
        """The fields the profiled phase adds to a timed case's record: `kernels` and `host_bound` (unless it
        has them, or `redo`), the bands' breakdowns (where they are pending). `fn`: the case's callable, built
        again and warmed."""
        out: dict = {}
        if self.breakdown_on and (redo or "kernels" not in rec):
            out["kernels"] = self.breakdown(fn, case.id)
            out.update(self.judge(out["kernels"], rec))
        if kernels_pending(rec.get("bands")):
            whole = {**rec, **out}
            profile = lambda band_fn: self.breakdown(band_fn, None)
            q, kv = batch.q_lengths, batch.kv_lengths
            out["bands"] = band_kernels(case, provider, rec["bands"], q, kv, self.device, profile, whole)
        return out

    def unprofiled(self, rec: dict, why: str, redo: bool = False) -> dict:
        """The fields that settle a case's pending views (with `redo`, its breakdown too) when its callable
        cannot be built again."""
        out: dict = {}
        if self.breakdown_on and (redo or "kernels" not in rec):
            out["kernels"] = failed(why, self.model.breakdown.calls, self.device)
        if kernels_pending(rec.get("bands")):
            rows = [
                {**r, "kernel_ms": None, "pass_median_ms": None, "idle_share": None, "note": why}
                if r.get("status") == "ok" and "kernel_ms" not in r
                else r
                for r in rec["bands"]["rows"]
            ]
            out["bands"] = {**rec["bands"], "rows": rows}
        return out

    @staticmethod
    def judge(kernels: dict, rec: dict) -> dict:
        """A GPU breakdown judged (the CPU profiler's ops say nothing about a GPU's idle time): into `kernels`
        the kernel sum of the pass's event-timed calls over their median (`sum_over_pass`, the same calls:
        what `idle_share`, `accounting` and the case's `host_bound` are read from) and over the case's timed
        median (`sum_over_median`, reported: the samples ran at another moment, under a power cap at another
        clock); the case's fields ({host_bound}) returned."""
        if kernels.get("source") != "cuda" or kernels.get("sum_ms") is None:
            return {}
        k, call, median = judged_kernel_ms(kernels), kernels.get("pass_median_ms"), rec.get("median_ms")
        idle = idle_share(k, call)
        kernels.update(
            sum_over_pass=k / call if call else None,
            sum_over_median=k / median if median else None,
            idle_share=None if np.isnan(idle) else idle,
            accounting=accounting(k, call),
        )
        # The call as users run it: its CUDA-graph time (the device's, no host) against its timed median,
        # where the graph exists. The pass's idle share is the call under the profiler, whose own host time
        # per launch flagged GPU-bound calls (the H200, 2026-12-02: log-normal 2048 `gdpa` forward idle 27% in
        # the pass, 1.8% by its graph time).
        g = rec.get("cuda_graph") or {}
        if g.get("ms") is None:
            # Without a graph, host-bound only if the timed samples say so too (the kernels under 90% of their
            # median): the pass's own host time per launch flags short GPU-bound calls (the H200 peers run of
            # 2026-12-06: HSTU's causal forward, kernels 0.233 ms, its pass 0.462, its samples 0.231 ms)
            flag = host_bound(k, call)
            if flag and median:
                flag = host_bound(k, median)
            return {"host_bound": flag}
        # Host-bound only if the graph's time at the samples' clock says so too: the replays ran after the
        # samples, and a clock the power cap moved in between is not host time (the H100, 2026-12-06: a 70.8 ms
        # median of 5 samples at 1500 MHz against a 62.3 ms graph; no host work is 8 ms of a GPU-bound call)
        flag = host_bound(g["ms"], median)
        if flag and g.get("ms_at_samples_clock") is not None:
            flag = host_bound(g["ms_at_samples_clock"], median)
        return {"host_bound": flag}

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

    def window(self) -> tuple[float, int, int]:
        """The breakdown pass's event-timed calls: PASS_WINDOW, never more than the config's timing window
        (a CPU run's few interpreted calls)."""
        t, (ms, lo, hi) = self.model.timing, PASS_WINDOW
        return min(ms, t.rep_ms), min(lo, t.min_reps), min(hi, t.max_reps)

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
            flush, window = self._flush(), self.window()
            rec = kernel_breakdown(fn, self.device, calls, flush, warm_ms, trace_path=dest, window=window)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # the case was timed; a profiler that fails only loses its breakdown
            if is_sticky_cuda_error(exc):
                raise  # the GPU faulted: the case's error, and the process's end (bench.case.faults)
            return failed(f"kernel breakdown failed: {one_line(exc)}", calls, self.device)
        if dest is not None:
            rec["trace"] = dest.relative_to(self.run_dir).as_posix()
        return rec


def at_clock(ms: float | None, its_mhz: float | None, other_mhz: float | None) -> float | None:
    """`ms` of SM-clock-bound work timed at `its_mhz`, at `other_mhz` instead (the same SM cycles); None where a
    figure is missing."""
    if ms is None or not its_mhz or not other_mhz:
        return None
    return ms * its_mhz / other_mhz
