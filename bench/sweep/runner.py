"""The sweep: for each case build the batch, gate on correctness, time, measure power, record.

Cases are grouped by workload so each jagged batch is built once on the device. A case ends in one of
four states: `ok` (timed), `incorrect` (failed the correctness gate: not timed), `failed` (raised, e.g.
out of memory: memory is freed and the sweep goes on) or `skipped` (the provider cannot run here or
does not support the case, with the reason). results.json/.csv are rewritten after every case
(docs/DESIGN.md §5, §6). The profiler-based views (kernel breakdown, trace, the bands' breakdowns) run after
the last timed case of the process, adding their fields to the recorded cases (bench.profiling.later): a
profiler session perturbs every later timing of its process. A case that faults the GPU (a sticky CUDA
error: bench.case.faults) is recorded `failed` and ends the sweep with `context_lost` set: the process's
CUDA context is unusable, so the cases after it are left to a fresh process (`--resume`; the command's
worker process does that by itself).
"""

from __future__ import annotations

import gc
import time
import traceback
from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path

import torch

from bench.case.calibrate import calibrate_copy, calibrate_gemm
from bench.case.device import harness_stream
from bench.case.faults import ContextLost, is_sticky_cuda_error
from bench.case.gate import correctness
from bench.case.power import CasePower
from bench.case.timing import Samples, sync_for, time_call
from bench.case.watchdog import RECORDED, STARTED
from bench.config.cases import Case, Workload
from bench.config.models import LoadedConfig
from bench.config.profiling import sections_record
from bench.config.resources import Shape, batch_need, case_need, free_bytes, skip_reason
from bench.monitor import PowerMonitor
from bench.profiling.later import profile_recorded
from bench.profiling.views import CaseProfiling
from bench.sweep import env as envmod
from bench.sweep import environments
from bench.sweep.progress import Progress, format_rate
from bench.sweep.signals import interrupts
from kernels.registry import Provider, get_provider
from results.files import ResultsWriteError, ResultsWriter, read_results
from results.power_csv import PowerTimeline
from results.record import new_case_record, timing_fields
from support.text import one_line
from workloads import length_stats

# meta fields a provider's own environment has its own values of (bench.sweep.environments)
SOFTWARE = ("python", "torch", "triton", "flash_attn", "cuda", "cudnn")


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


class Runner:
    def __init__(
        self,
        cfg: LoadedConfig,
        run_dir: Path,
        device: torch.device,
        resume: bool = False,
        progress: bool = True,
        log=print,
        phase=None,
        environment: dict | None = None,
    ):
        self.cfg, self.run_dir, self.device, self.log = cfg, Path(run_dir), device, log
        # tells the parent which case runs and in which phase (bench.case.watchdog); nothing in one process
        self.phase = phase or (lambda case_id, phase: None)
        self.settings = cfg.model  # the validated config's fields (timing, power, correctness, hardware)
        self.show_progress = progress
        self.resume = resume
        self.providers: dict[str, Provider] = {}  # one instance per label for the whole run
        self._availability: dict[str, str | None] = {}
        self.monitor = None
        self.timeline: PowerTimeline | None = None  # power.csv, from the first recorded case on
        existing = read_results(self.run_dir) if resume and (self.run_dir / "results.json").exists() else None
        meta = self.meta()
        if environment is not None and existing is not None:
            # a provider's own environment (bench.sweep.environments): its versions are its cases' (`environment`),
            # not the run's, which the harness's own worker recorded
            meta = {k: v for k, v in meta.items() if k not in SOFTWARE}
        self.writer = ResultsWriter(self.run_dir, meta, existing)
        self.power = CasePower(None, self.settings.power, self.time, sync_for(device))
        # the timed views with each case, the profiled ones after the last timed case (§5); traces under the run folder
        self.profiling = CaseProfiling(self.settings, device, self.time, self.run_dir, clock=self.power.clock_now)
        self.progress = Progress(0, False, log)
        self.interrupted = False
        self.context_lost: str | None = None  # the sticky CUDA error that ended the sweep (bench.case.faults)
        self.signals = None  # the sweep's stop signals (bench.sweep.signals.interrupts), while it runs

    # -- setup -------------------------------------------------------------------------------------
    def meta(self) -> dict:
        info = envmod.collect(self.device)
        hw = self.settings.hardware
        peak, hbm, table_row = envmod.peaks(info["gpu"], hw.peak_tflops, hw.hbm_tb_s, hw.gpu)
        return {
            "config": str(self.cfg.path),
            "config_name": self.cfg.name,
            "config_sha256": self.cfg.sha256,
            **({"config_data": self.cfg.data} if self.cfg.data is not None else {}),
            **info,
            "gpu_count": 1 if self.device.type == "cuda" else 0,
            "finished_at": None,
            "interrupted": False,
            "harness_error": None,
            # bench.case.device.harness_stream: every call of a CUDA run
            "timing_stream": "the harness's own CUDA stream" if self.device.type == "cuda" else None,
            "hardware_target": hw.target,
            "hardware_row": table_row,
            "power_cap_w": hw.power_cap_w,
            "enforced_power_limit_w": None,
            "peak_tflops": peak,
            "hbm_tb_s": hbm,
            "measured_gemm_tflops": None,
            "measured_copy_tb_s": None,
            "calibration": None,
            "baseline_provider": self.settings.baseline,
            "monitor": None,
            "providers": {label: provider_meta(s) for label, s in self.cfg.providers.items()},
            "timing": self.settings.timing.model_dump(),
            "correctness": self.settings.correctness.model_dump(),
            "power_config": self.settings.power.model_dump(),
            "profiling_config": sections_record(self.settings),
        }

    def say(self, line: str) -> None:
        self.progress.write(line)

    def _start_monitor(self) -> None:
        if self.device.type != "cuda" or not self.settings.power.enabled:
            reason = "no GPU (CPU run)" if self.device.type != "cuda" else "disabled in config (power.enabled: false)"
            self.writer.update_meta(monitor={"available": False, "unavailable_reason": reason})
            return
        self.monitor = PowerMonitor(
            device_index=self.device.index or 0,
            period_ms=self.settings.power.period_ms,
            power_cap_w=self.settings.hardware.power_cap_w,
        )
        self.power.monitor = self.monitor
        info = self.monitor.info()
        limit = info.get("enforced_power_limit_w")
        self.writer.update_meta(monitor=info, enforced_power_limit_w=limit)
        cap = self.settings.hardware.power_cap_w
        if cap and limit and abs(cap - limit) > 1:
            self.say(
                f"warning: configured power cap {cap:.0f} W differs from the enforced limit {limit:.0f} W; "
                "power is reported against the configured cap"
            )
        self.monitor.start()

    def _calibrate(self) -> None:
        if self.device.type != "cuda" or not self.settings.hardware.calibrate:
            return
        session, earlier = self.writer.session or 0, self.writer.meta.get("calibration") or {}
        if earlier.get("gemm") and earlier.get("session", 0) == session:
            # a fresh worker after a fault or a resume on this machine: the recorded cases' ceiling stays theirs
            self.say(f"calibration: the run's own (session {session}), not measured again")
            return
        kept = {"calibration_history": [*self.writer.meta.get("calibration_history", []), earlier]} if earlier else {}
        try:
            self.say("calibrating: 8192^3 bf16 GEMM and a device copy ...")
            if self.monitor is not None:  # not its truth: a monitor with no sample yet has len() 0
                self.monitor.begin_case("calibration/gemm")
            gemm = calibrate_gemm(self.device, self.monitor, seconds=self.settings.hardware.calibrate_seconds)
            if self.monitor is not None:
                self.monitor.end_case()
            copy = calibrate_copy(self.device)
            self.writer.update_meta(
                calibration={"gemm": gemm, "copy": copy, "session": session},
                **kept,
                measured_gemm_tflops=gemm.get("tflops_sustained") or gemm.get("tflops_fresh"),
                measured_copy_tb_s=copy.get("tb_per_s"),
            )
            p = gemm.get("power") or {}
            self.say(
                f"  GEMM {gemm.get('tflops_fresh', 0):.0f} TFLOP/s fresh, "
                f"{gemm.get('tflops_sustained', 0):.0f} sustained"
                + (f" at {p.get('avg_w', 0):.0f} W avg, reasons {p.get('reasons')}" if p else "")
                + f"; copy {copy.get('tb_per_s', 0):.2f} TB/s"
            )
        except Exception as exc:
            self.say(f"calibration failed: {one_line(exc)}")
            self.writer.update_meta(calibration={"error": one_line(exc), "session": session}, **kept)

    # -- per case ----------------------------------------------------------------------------------
    def provider(self, case: Case) -> Provider:
        """The provider instance of a case's label, built once per run with the label's options."""
        if case.label not in self.providers:
            self.providers[case.label] = get_provider(case.provider.name, case.provider.options or None)
        return self.providers[case.label]

    def availability(self, case: Case) -> str | None:
        if case.label not in self._availability:
            try:
                self._availability[case.label] = self.provider(case).availability(self.device)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # SystemExit included: a provider never ends the sweep
                self._availability[case.label] = f"availability check failed: {one_line(exc)}"
                self._log_traceback(f"{case.id} (availability of {case.label})")
        return self._availability[case.label]

    def blank_record(self, case: Case, wstats: dict, flops: float) -> dict:
        """The case record before the case runs (results.record.new_case_record)."""
        semantics, options = "gdpa", None
        try:
            p = self.provider(case)
            semantics, options = p.semantics, p.options_record()
        except KeyboardInterrupt:
            raise
        except BaseException:  # recorded by run_case as the case's error
            pass
        gpu = (self.device.index or 0) if self.device.type == "cuda" else None
        return new_case_record(
            **case.identity_fields(semantics, options, wstats, flops, gpu, self.writer.meta.get("gpu")),
            environment=environments.record(case.provider.environment),
        )

    def time(self, fn, between=None) -> Samples:
        return time_call(fn, self.settings.timing, self.device, between)

    def too_big(self, case: Case, batch) -> str | None:
        """The `skipped` reason of a case whose working set does not fit in the free memory (bench.config.resources)."""
        shape = Shape.of(case.workload, batch.q_lengths, batch.kv_lengths)
        p = self.provider(case)
        tunes = p.autotune_bytes if self.device.type == "cuda" else 0
        need = case_need(shape, case.mode, p.scores_memory, self.settings.correctness.enabled, tunes)
        return skip_reason(need, free_bytes(self.device), self.device, "the case beyond its batch")

    def run_case(self, case: Case, batch, wstats: dict, flops: float) -> dict:
        rec = self.blank_record(case, wstats, flops)
        t0 = time.perf_counter()
        spec = case.spec
        fn = None
        try:
            self.phase(case.id, "setup")
            reason = self.availability(case)
            if reason is None:
                try:
                    reason = self.provider(case).unsupported(batch, spec)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:
                    reason = f"support check failed: {one_line(exc)}"
            reason = reason or self.too_big(case, batch)
            if reason is not None:
                rec.update(status="skipped", error=reason)
                return rec
            provider = self.provider(case)
            if self.settings.correctness.enabled:
                c = self.settings.correctness
                self.phase(case.id, "gate")
                rec["correctness"] = correctness(
                    provider, batch, spec, case.mode, c.tolerance, c.max_check_seqs, case.workload.seed
                )
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()  # the gate's grads can be large; give them back before timing
                if not rec["correctness"]["passed"]:
                    rec.update(
                        status="incorrect",
                        error=f"rel_err {rec['correctness']['rel_err']:.3g} > tolerance "
                        f"{c.tolerance:g} ({rec['correctness']['per_tensor']})",
                    )
                    return rec
            self.phase(case.id, "compile")
            fn = provider.build(batch, spec, case.mode)
            fn()  # compile / autotune / allocate outside the timed region
            sync_for(self.device)()
            rec["kernel_config"] = provider.kernel_configs()
            self.phase(case.id, "power")
            self.power.before_samples(case, rec, fn, flops)
            meta = self.writer.meta
            peak = (meta.get("peak_tflops") or {}).get(case.workload.dtype)
            self.phase(case.id, "samples")
            samples, clock = self.power.time_samples(fn)
            rec.update(
                timing_fields(samples, flops, peak, meta.get("measured_gemm_tflops")),
                sm_clock_mhz=clock,
                status="ok",
            )
            self.phase(case.id, "power")
            self.power.after_samples(case, rec, fn, flops)
            self.phase(case.id, "views")
            self.profiling.timed(case, rec, fn, provider, batch)  # graph time, bands: still the timed phase
        except torch.cuda.OutOfMemoryError as exc:
            rec.update(status="failed", error=f"out of memory: {one_line(exc)}", times_ms=[])
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit included: whatever a provider raises, the sweep goes on
            rec.update(status="failed", error=one_line(exc), times_ms=[])
            self._log_traceback(case.id)
            if is_sticky_cuda_error(exc):
                self.context_lost = rec["error"]
        finally:
            del fn
            self._release(rec)
            rec["wall_s"] = round(time.perf_counter() - t0, 3)
        return rec

    def _release(self, rec: dict) -> None:
        """Free the case's memory. CUDA reports a fault at a later call: one that surfaces only here is the
        case's own, recorded as its error."""
        if self.context_lost is not None:
            return  # every CUDA call of this process would raise the fault again
        try:
            _free(self.device)
        except Exception as exc:
            if not is_sticky_cuda_error(exc):
                raise
            earlier = f"{rec['error']}; then " if rec["status"] == "failed" and rec["error"] else ""
            rec.update(status="failed", error=one_line(earlier + one_line(exc)))
            self.context_lost = one_line(exc)

    def _log_traceback(self, case_id: str) -> None:
        try:
            with (self.run_dir / "errors.log").open("a") as log:
                log.write(f"== {case_id}\n{traceback.format_exc()}\n")
        except OSError:
            pass  # the case's error is in results.json; a full disk stops the run at its next write

    # -- the sweep ---------------------------------------------------------------------------------
    def build_workload(self, w: Workload):
        q_len, kv_len = w.lengths()
        wstats = length_stats(q_len, kv_len, causal=w.causal)
        self.writer.add_workload(
            w.name,
            {
                "q_lengths": [int(x) for x in q_len],
                "kv_lengths": [int(x) for x in kv_len],
                "stats": wstats,
                "family": w.family,
                "params": w.family_params,
                "pairing": w.rule,
                "pairing_params": w.rule_params,
            },
        )
        return q_len, kv_len, wstats

    def run(self, cases: list[Case], hung: list[dict] | None = None) -> dict:
        """Run the cases not yet recorded; {status: count}. `hung`: cases a worker before this one was killed
        for (bench.case.watchdog: `id`, `error`, `wall_s`), recorded `failed` first. Ctrl-C/SIGTERM end it with
        `interrupted`; an error of the harness itself is re-raised after results.json records it
        (`harness_error`, `interrupted: true`), so such a run never looks complete."""
        for h in hung or ():
            self.record_hung(cases, h)
        done = self.writer.done_ids()
        todo = [c for c in cases if c.id not in done]
        self.progress = Progress(len(todo), self.show_progress, self.log)
        if len(todo) < len(cases):
            self.say(f"resuming: {len(cases) - len(todo)} of {len(cases)} cases already recorded")
        counts: dict[str, int] = {}
        crash: BaseException | None = None
        with interrupts() as self.signals, harness_stream(self.device):
            try:
                self._start_monitor()
                self._calibrate()
                self.phase("", STARTED)  # the watchdog bounds what came before (bench.case.watchdog.STARTUP_S)
                for w, group in groupby(todo, key=lambda c: c.workload):
                    self._run_workload(w, list(group), counts)
                self._profiled_phase(cases)  # nothing is timed in this process after it (§5)
                self.profiling.after_sweep(cases, self.writer, self.run_dir, self.say)
            except KeyboardInterrupt:
                self.interrupted = True
                self.progress.close()  # the bar first: the line below must not land inside it
                self.say("interrupted: results.json holds every finished case")
            except ContextLost as lost:
                self.say(f"{lost}; this process stops, the cases after it need a fresh one")
            except BaseException as exc:
                crash = exc
            self.progress.close()
            try:
                self._finish(crash)
            except ResultsWriteError:
                if crash is None:
                    raise
        if crash is not None:
            raise crash
        return counts

    def _profiled_phase(self, cases: list[Case]) -> None:
        """The profiler-based views of every case of the run folder recorded ok without them (this process's
        and those a stopped or faulted process left), after this process's last timed case
        (bench.profiling.later). A GPU fault there is the case's: recorded `failed`, the sweep ends."""
        lost = profile_recorded(self.profiling, cases, self.writer, self.provider, self.say, phase=self.phase)
        if lost is not None:
            self.context_lost = lost[1]
            raise ContextLost(*lost)

    def record_hung(self, cases: list[Case], hung: dict) -> None:
        """The case the watchdog ended the previous worker for, `failed` with why (once: a case that was
        recorded meanwhile keeps its record, unless it hung in its profiled views: timed, it is `failed`
        then as after a fault there, so that no fresh worker profiles it again)."""
        case = next((c for c in cases if c.id == hung["id"]), None)
        if case is None:
            return
        recorded = next((r for r in self.writer.data["cases"] if r["id"] == case.id), None)
        if recorded is not None:
            if self.profiling.pending(recorded):
                why = f"{hung['error']} (in its profiled views, after its samples)"
                self.writer.update_cases({case.id: {"status": "failed", "error": why, "times_ms": []}})
                self.say(f"  {case.id}: FAILED {why}")
            return
        q_len, kv_len, wstats = self.build_workload(case.workload)
        rec = self.blank_record(case, wstats, case.flops((q_len, kv_len)))
        rec.update(status="failed", error=hung["error"], times_ms=[], wall_s=hung["wall_s"])
        self.writer.add_case(rec)
        self.say(case_line(rec))

    def _finish(self, crash: BaseException | None) -> None:
        try:
            if self.monitor is not None:
                try:
                    self.monitor.stop()
                    self._write_power()  # none from a monitor that never sampled (no NVML)
                    if self.monitor.error:
                        self.writer.update_meta(monitor={**self.monitor.info(), "error": self.monitor.error})
                finally:
                    self.monitor.close()  # ends the sampler process (bench.monitor.child)
        finally:
            stopped = self.interrupted or crash is not None or self.context_lost is not None
            self.writer.update_meta(
                finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                interrupted=stopped,
                harness_error=None if crash is None else one_line(crash),
            )
        self._write_parquet()

    def _run_workload(self, w: Workload, group: list[Case], counts: dict[str, int]) -> None:
        self.phase(group[0].id, "batch")  # the first case's life begins with its batch (bench.case.watchdog)
        q_len, kv_len, wstats = self.build_workload(w)
        batch, build_error = None, None
        too_big = skip_reason(batch_need(Shape.of(w, q_len, kv_len)), free_bytes(self.device), self.device, "its batch")
        try:
            if too_big is None:
                batch = w.batch(self.device, (q_len, kv_len))
        except Exception as exc:  # a batch the estimate let through that still does not fit
            build_error = f"building the batch failed: {one_line(exc)}"
        for case in group:
            self.progress.started(case.id)
            flops = case.flops((q_len, kv_len))
            if self.monitor is not None:
                self.monitor.begin_case(case.id)
            if batch is None:
                rec = self.blank_record(case, wstats, flops)
                rec.update(status="skipped" if too_big else "failed", error=too_big or build_error)
            else:
                rec = self.run_case(case, batch, wstats, flops)
            if self.monitor is not None:
                self.monitor.end_case()
            self.writer.add_case(rec)
            self._write_power()  # the timeline of every recorded case survives this process (a hang's kill)
            self.phase(case.id, RECORDED)
            counts[rec["status"]] = counts.get(rec["status"], 0) + 1
            self.progress.finished(case_line(rec), counts)
            if self.context_lost is not None:
                raise ContextLost(case.id, self.context_lost)
            if self.signals is not None and self.signals.signum is not None:
                raise KeyboardInterrupt  # the signal's own one was swallowed (a kernel's `except BaseException`)
        del batch
        _free(self.device)

    def _write_power(self) -> None:
        """power.csv up to now: the samples since the last write appended (results.power_csv.PowerTimeline)."""
        if self.monitor is None:
            return
        if self.timeline is None:
            self.timeline = PowerTimeline(self.run_dir / "power.csv", self.resume)
        self.timeline.append(self.monitor.samples(self.timeline.appended))

    def _write_parquet(self) -> None:
        try:
            self.writer.write_parquet()
        except Exception as exc:  # results.json and .csv are written; a missing parquet loses nothing
            self.say(f"results.parquet not written: {one_line(exc)}")


def provider_meta(spec) -> dict:
    """A labelled provider in results.json `meta.providers`: its name, options and environment (if its own)."""
    own = {"environment": spec.environment} if spec.environment else {}
    return {"name": spec.name, "options": spec.options, **own}


def case_line(rec: dict) -> str:
    """The line a finished case prints: `  <id>: <rate> (<median> ms) [<W>]`, or its status and error."""
    if rec["status"] == "ok":
        p = rec.get("power") or {}
        extra = f" {p['avg_w']:.0f} W" if p.get("avg_w") else ""
        return f"  {rec['id']}: {format_rate(rec['tflops'])} ({rec['median_ms']:.4g} ms){extra}"
    return f"  {rec['id']}: {rec['status'].upper()} {rec['error'] or ''}"
