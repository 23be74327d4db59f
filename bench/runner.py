"""The sweep: for each case build the batch, gate on correctness, time, measure power, record.

Cases are grouped by workload so each jagged batch is built once on the device. A case ends in one of
four states: `ok` (timed), `incorrect` (failed the correctness gate: not timed), `failed` (raised, e.g.
out of memory: memory is freed and the sweep goes on) or `skipped` (the provider cannot run here or
does not support the case, with the reason). results.json/.csv are rewritten after every case.
"""
from __future__ import annotations

import gc
import re
import signal
import time
import traceback
from contextlib import contextmanager
from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path

import numpy as np
import torch

from bench import env as envmod
from bench.config import Case, LoadedConfig, Workload, dtype_of
from bench.results import ResultsWriter, load_results
from bench.timing import Samples, sync_for, time_cpu, time_cuda
from kernels.reference import reference_outputs
from kernels.registry import CaseSpec, get_provider
from workloads import build_lengths, make_batch, stats, work_pairs

FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    return f"{type(exc).__name__}: {msg}"[:300]


def case_flops(w: Workload, q_lengths, kv_lengths, mode: str) -> float:
    """The peers' convention: fwd = 4·H·D·Σ pairs (causal: unmasked pairs); bwd 2.5×, fwd_bwd 3.5×."""
    pairs = float(work_pairs(q_lengths, kv_lengths, causal=w.causal).sum())
    return 4.0 * w.H * w.D * pairs * FLOP_FACTOR[mode]


def check_sequences(q_lengths: np.ndarray, kv_lengths: np.ndarray, k: int, seed: int) -> list[int]:
    """Which sequences the gate checks: the longest, the shortest, an empty one if any, then random."""
    B = len(q_lengths)
    if B <= k:
        return list(range(B))
    work = q_lengths * np.maximum(kv_lengths, 1)
    chosen = list(dict.fromkeys([int(np.argmax(work)), int(np.argmin(work))]))
    empty = np.flatnonzero((q_lengths == 0) | (kv_lengths == 0))
    if empty.size and int(empty[0]) not in chosen:
        chosen.append(int(empty[0]))
    rng = np.random.default_rng(seed + 7919)
    for b in rng.permutation(B):
        if len(chosen) >= k:
            break
        if int(b) not in chosen:
            chosen.append(int(b))
    return sorted(set(chosen))


def _rows(offsets: np.ndarray, lengths: np.ndarray, seqs: list[int]) -> torch.Tensor:
    idx = [np.arange(offsets[b], offsets[b] + lengths[b]) for b in seqs]
    return torch.from_numpy(np.concatenate(idx) if idx else np.zeros(0, dtype=np.int64))


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    if not torch.isfinite(out).all():
        return float("inf")
    denom = ref.norm().item()
    diff = (out - ref).norm().item()
    if denom == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / denom


def correctness(provider, batch, spec: CaseSpec, mode: str, tolerance: float, max_seqs: int,
                seed: int) -> dict:
    """Compare the provider with the exact reference on a subset of sequences (output, and grads in
    the backward modes). NaN/Inf anywhere in the compared rows fails."""
    seqs = check_sequences(batch.q_lengths, batch.kv_lengths, max_seqs, seed)
    q_idx = _rows(batch.q_offsets_host, batch.q_lengths, seqs).to(batch.device)
    kv_idx = _rows(batch.kv_offsets_host, batch.kv_lengths, seqs).to(batch.device)
    grads = mode != "fwd"
    ref_out, ref_grads = reference_outputs(batch, spec, provider.semantics, seqs, grads=grads)
    if grads:
        b = batch.with_grad()
        out = provider.forward(b, spec)
        got = torch.autograd.grad(out, (b.q, b.k, b.v), batch.dout)
        pairs = {"out": (out.detach()[q_idx], ref_out), "dq": (got[0][q_idx], ref_grads[0]),
                 "dk": (got[1][kv_idx], ref_grads[1]), "dv": (got[2][kv_idx], ref_grads[2])}
        del out, got, b
    else:
        with torch.no_grad():
            out = provider.forward(batch, spec)
        pairs = {"out": (out[q_idx], ref_out)}
        del out
    per = {k: rel_err(o, r) for k, (o, r) in pairs.items()}
    worst = max(per.values())
    return {"rel_err": worst, "tolerance": tolerance, "passed": bool(worst <= tolerance),
            "per_tensor": per, "checked_seqs": len(seqs)}


def spec_for(w: Workload, mode: str) -> CaseSpec:
    return CaseSpec(mode=mode, activation=w.activation, alpha=w.alpha, qk_scale=w.qk_scale,
                    causal=w.causal)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


class Runner:
    def __init__(self, cfg: LoadedConfig, run_dir: Path, device: torch.device, resume: bool = False,
                 progress: bool = True, log=print):
        self.cfg, self.run_dir, self.device, self.log = cfg, Path(run_dir), device, log
        self.m = cfg.model
        self.progress = progress
        self.resume = resume
        self._availability: dict[str, str | None] = {}
        self.monitor = None
        meta = self._meta()
        existing = load_results(self.run_dir) if resume and (self.run_dir / "results.json").exists() else None
        self.writer = ResultsWriter(self.run_dir, meta, existing)
        self.interrupted = False

    # -- setup -------------------------------------------------------------------------------------
    def _meta(self) -> dict:
        info = envmod.collect(self.device)
        hw = self.m.hardware
        peak, hbm, table_row = envmod.peaks(info["gpu"], hw.peak_tflops, hw.hbm_tb_s, hw.gpu)
        return {
            "config": str(self.cfg.path), "config_name": self.cfg.name, "config_sha256": self.cfg.sha256,
            **info, "finished_at": None, "interrupted": False, "hardware_target": hw.target,
            "hardware_row": table_row, "power_cap_w": hw.power_cap_w, "enforced_power_limit_w": None,
            "peak_tflops": peak, "hbm_tb_s": hbm, "measured_gemm_tflops": None, "measured_copy_tb_s": None,
            "calibration": None, "baseline_provider": self.m.baseline, "monitor": None,
            "timing": self.m.timing.model_dump(), "correctness": self.m.correctness.model_dump(),
            "power_config": self.m.power.model_dump(),
        }

    def _start_monitor(self) -> None:
        if self.device.type != "cuda" or not self.m.power.enabled:
            reason = "no GPU (CPU run)" if self.device.type != "cuda" else "disabled in config (power.enabled: false)"
            self.writer.update_meta(monitor={"available": False, "unavailable_reason": reason})
            return
        from bench.monitor import PowerMonitor
        self.monitor = PowerMonitor(device_index=self.device.index or 0, period_ms=self.m.power.period_ms,
                                    power_cap_w=self.m.hardware.power_cap_w)
        info = self.monitor.info()
        limit = info.get("enforced_power_limit_w")
        self.writer.update_meta(monitor=info, enforced_power_limit_w=limit)
        cap = self.m.hardware.power_cap_w
        if cap and limit and abs(cap - limit) > 1:
            self.log(f"warning: configured power cap {cap:.0f} W differs from the enforced limit {limit:.0f} W; "
                     "power is reported against the configured cap")
        self.monitor.start()

    def _calibrate(self) -> None:
        if self.device.type != "cuda" or not self.m.hardware.calibrate:
            return
        from bench.calibrate import calibrate_copy, calibrate_gemm
        try:
            self.log("calibrating: 8192^3 bf16 GEMM and a device copy ...")
            if self.monitor:
                self.monitor.begin_case("calibration/gemm")
            gemm = calibrate_gemm(self.device, self.monitor, seconds=self.m.hardware.calibrate_seconds)
            if self.monitor:
                self.monitor.end_case()
            copy = calibrate_copy(self.device)
            self.writer.update_meta(calibration={"gemm": gemm, "copy": copy},
                                    measured_gemm_tflops=gemm.get("tflops_sustained") or gemm.get("tflops_fresh"),
                                    measured_copy_tb_s=copy.get("tb_per_s"))
            p = gemm.get("power") or {}
            self.log(f"  GEMM {gemm.get('tflops_fresh', 0):.0f} TFLOP/s fresh, "
                     f"{gemm.get('tflops_sustained', 0):.0f} sustained"
                     + (f" at {p.get('avg_w', 0):.0f} W avg, reasons {p.get('reasons')}" if p else "")
                     + f"; copy {copy.get('tb_per_s', 0):.2f} TB/s")
        except Exception as exc:
            self.log(f"calibration failed: {one_line(exc)}")
            self.writer.update_meta(calibration={"error": one_line(exc)})

    # -- per case ----------------------------------------------------------------------------------
    def availability(self, name: str) -> str | None:
        if name not in self._availability:
            try:
                self._availability[name] = get_provider(name).availability(self.device)
            except Exception as exc:
                self._availability[name] = f"availability check failed: {one_line(exc)}"
        return self._availability[name]

    def _base_record(self, case: Case, wstats: dict, flops: float) -> dict:
        w = case.workload
        p = get_provider(case.provider)
        return {
            "id": case.id, "set": w.set, "max_len": w.max_len, "sweep": dict(w.sweep),
            "provider": case.provider, "semantics": p.semantics, "mode": case.mode, "dtype": w.dtype,
            "activation": w.activation if p.semantics == "gdpa" else "softmax",
            "workload": {"name": w.name, "family": w.family, "params": w.family_params, "pairing": w.rule,
                         "pairing_params": w.rule_params, "sorted": w.sort_by_length, "B": w.B, "H": w.H,
                         "Hkv": w.Hkv, "D": w.D, "causal": w.causal, "alpha": w.alpha,
                         "qk_scale": w.qk_scale, "max_q": wstats["max_q"], "max_kv": wstats["max_kv"],
                         "total_q": wstats["total_q"], "total_kv": wstats["total_kv"],
                         "padding_waste": wstats["padding_waste"], "flop_waste": wstats["flop_waste"],
                         "imbalance": wstats["imbalance"], "seed": w.seed,
                         "lengths_sha256": wstats["lengths_sha256"]},
            "status": None, "error": None, "correctness": None, "flops": flops, "times_ms": [],
            "median_ms": None, "p20_ms": None, "p80_ms": None, "tflops": None, "util_peak": None,
            "util_measured": None, "power": None, "gpu_index": (self.device.index or 0) if self.device.type == "cuda" else None,
            "gpu_name": self.writer.data["meta"].get("gpu"), "tc_util_ncu": None, "ncu_sm_clock_mhz": None,
            "kernel_config": None, "wall_s": None,
        }

    def _time(self, fn) -> Samples:
        t = self.m.timing
        if self.device.type == "cuda":
            with torch.cuda.device(self.device):
                return time_cuda(fn, warmup_ms=t.warmup_ms, rep_ms=t.rep_ms, min_reps=t.min_reps,
                                 max_reps=t.max_reps, flush_l2=t.flush_l2, cuda_graph=t.cuda_graph,
                                 device=self.device)
        return time_cpu(fn, warmup_ms=t.warmup_ms, rep_ms=t.rep_ms, min_reps=min(t.min_reps, 3),
                        max_reps=min(t.max_reps, 20))

    def run_case(self, case: Case, batch, wstats: dict, flops: float) -> dict:
        rec = self._base_record(case, wstats, flops)
        t0 = time.perf_counter()
        provider = get_provider(case.provider)
        spec = spec_for(case.workload, case.mode)
        reason = self.availability(case.provider)
        if reason is None:
            try:
                reason = provider.unsupported(batch, spec)
            except Exception as exc:
                reason = f"support check failed: {one_line(exc)}"
        if reason is not None:
            rec.update(status="skipped", error=reason)
            return rec
        fn = None
        try:
            if self.m.correctness.enabled:
                rec["correctness"] = correctness(provider, batch, spec, case.mode,
                                                 self.m.correctness.tolerance,
                                                 self.m.correctness.max_check_seqs, case.workload.seed)
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()  # the gate's grads can be large; give them back before timing
                if not rec["correctness"]["passed"]:
                    rec.update(status="incorrect",
                               error=f"rel_err {rec['correctness']['rel_err']:.3g} > tolerance "
                                     f"{self.m.correctness.tolerance:g} ({rec['correctness']['per_tensor']})")
                    return rec
            fn = provider.build(batch, spec, case.mode)
            fn()  # compile / autotune / allocate outside the timed region
            sync_for(self.device)()
            rec["kernel_config"] = provider.kernel_configs()
            if self.m.power.energy_loop_first:
                self._energy(case, rec, fn, flops)
            samples = self._time(fn)
            rec.update(times_ms=samples.times_ms, median_ms=samples.median_ms, p20_ms=samples.p20_ms,
                       p80_ms=samples.p80_ms, status="ok")
            rec["tflops"] = flops / (samples.median_ms * 1e-3) / 1e12 if samples.median_ms > 0 else None
            meta = self.writer.data["meta"]
            peak = (meta.get("peak_tflops") or {}).get(case.workload.dtype)
            if rec["tflops"] is not None and peak:
                rec["util_peak"] = rec["tflops"] / peak
            if rec["tflops"] is not None and meta.get("measured_gemm_tflops"):
                rec["util_measured"] = rec["tflops"] / meta["measured_gemm_tflops"]
            self._power(case, rec, fn, flops)
        except torch.cuda.OutOfMemoryError as exc:
            rec.update(status="failed", error=f"out of memory: {one_line(exc)}", times_ms=[])
        except Exception as exc:
            rec.update(status="failed", error=one_line(exc), times_ms=[])
            with (self.run_dir / "errors.log").open("a") as log:
                log.write(f"== {case.id}\n{traceback.format_exc()}\n")
        finally:
            del fn
            _free(self.device)
            rec["wall_s"] = round(time.perf_counter() - t0, 3)
        return rec

    def _power(self, case: Case, rec: dict, fn, flops: float) -> None:
        if self.monitor is None or not self.monitor.available:
            return
        pw = self.m.power
        if pw.overhead_check and re.search(pw.overhead_check, case.id):
            # same case timed again with the sampling thread stopped: what does monitoring cost?
            self.monitor.stop()
            try:
                without = self._time(fn)
            finally:
                self.monitor.start()
            rec["monitor_overhead"] = {"median_ms_with": rec["median_ms"], "median_ms_without": without.median_ms,
                                       "overhead": rec["median_ms"] / without.median_ms - 1.0}
        if not pw.energy_loop_first:
            self._energy(case, rec, fn, flops)

    def _energy(self, case: Case, rec: dict, fn, flops: float) -> None:
        pw = self.m.power
        if self.monitor is None or not self.monitor.available or pw.energy_loop_s <= 0:
            return
        rec["power"] = self.monitor.measure(fn, sync=sync_for(self.device), min_seconds=pw.energy_loop_s,
                                            flops_per_call=flops, case_id=case.id)

    # -- the sweep ---------------------------------------------------------------------------------
    def build_workload(self, w: Workload):
        q_len, kv_len = build_lengths(w.family, w.family_params, w.rule, w.rule_params, batch_size=w.B,
                                      max_len=w.max_len, seed=w.seed, sort=w.sort_by_length)
        wstats = stats(q_len, kv_len, causal=w.causal)
        self.writer.add_workload(w.name, {"q_lengths": [int(x) for x in q_len],
                                          "kv_lengths": [int(x) for x in kv_len], "stats": wstats,
                                          "family": w.family, "params": w.family_params, "pairing": w.rule,
                                          "pairing_params": w.rule_params})
        return q_len, kv_len, wstats

    def run(self, cases: list[Case]) -> dict:
        done = self.writer.done_ids()
        todo = [c for c in cases if c.id not in done]
        if done:
            self.log(f"resuming: {len(cases) - len(todo)} of {len(cases)} cases already recorded")
        self._start_monitor()
        self._calibrate()
        bar = _progress(len(todo), self.progress)
        counts: dict[str, int] = {}
        try:
            with sigterm_as_interrupt():
                for w, group in groupby(todo, key=lambda c: c.workload):
                    group = list(group)
                    q_len, kv_len, wstats = self.build_workload(w)
                    batch, build_error = None, None
                    try:
                        batch = make_batch(q_len, kv_len, H=w.H, Hkv=w.Hkv, D=w.D, dtype=dtype_of(w.dtype),
                                           device=self.device, seed=w.seed)
                    except Exception as exc:  # e.g. the batch itself does not fit in memory
                        build_error = f"building the batch failed: {one_line(exc)}"
                    for case in group:
                        bar.set_description(case.id)
                        flops = case_flops(w, q_len, kv_len, case.mode)
                        if self.monitor:
                            self.monitor.begin_case(case.id)
                        if batch is None:
                            rec = self._base_record(case, wstats, flops)
                            rec.update(status="failed", error=build_error)
                        else:
                            rec = self.run_case(case, batch, wstats, flops)
                        if self.monitor:
                            self.monitor.end_case()
                        self.writer.add_case(rec)
                        counts[rec["status"]] = counts.get(rec["status"], 0) + 1
                        bar.update(1)
                        bar.set_postfix(counts)
                        self._log_case(rec)
                    del batch
                    _free(self.device)
        except KeyboardInterrupt:
            self.interrupted = True
            self.log("interrupted: results.json holds every finished case")
        finally:
            bar.close()
            if self.monitor:
                self.monitor.stop()
                self._write_power()
                if self.monitor.error:
                    self.writer.update_meta(monitor={**self.monitor.info(), "error": self.monitor.error})
            self.writer.update_meta(finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                    interrupted=self.interrupted)
        return counts

    def _write_power(self) -> None:
        """power.csv; a resumed run appends its timeline after the earlier one's (time shifted on)."""
        path = self.run_dir / "power.csv"
        old = None
        if self.resume and path.exists():
            import pandas as pd
            try:
                old = pd.read_csv(path)
            except Exception:
                old = None
        self.monitor.write_csv(path)
        if old is not None and len(old):
            import pandas as pd
            new = pd.read_csv(path)
            new["time_s"] = new["time_s"] + float(old["time_s"].max()) + 1.0
            pd.concat([old, new], ignore_index=True).to_csv(path, index=False)

    def _log_case(self, rec: dict) -> None:
        if rec["status"] == "ok":
            p = rec.get("power") or {}
            extra = f" {p['avg_w']:.0f} W" if p.get("avg_w") else ""
            self.log(f"  {rec['id']}: {rec['tflops']:.4g} TFLOP/s ({rec['median_ms']:.4g} ms){extra}")
        else:
            self.log(f"  {rec['id']}: {rec['status'].upper()} {rec['error'] or ''}")


class _NullBar:
    def update(self, n): pass
    def set_description(self, s): pass
    def set_postfix(self, d): pass
    def close(self): pass


def _progress(total: int, enabled: bool):
    if not enabled:
        return _NullBar()
    from tqdm import tqdm
    return tqdm(total=total, unit="case", dynamic_ncols=True, leave=True)


@contextmanager
def sigterm_as_interrupt():
    """`kill` (SIGTERM) ends the sweep like Ctrl-C: the finished cases are already on disk."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def select(cases: list[Case], only: str | None = None, providers: list[str] | None = None) -> list[Case]:
    if only:
        rx = re.compile(only)
        cases = [c for c in cases if rx.search(c.id)]
    if providers:
        cases = [c for c in cases if c.provider in providers]
    return cases


def default_run_dir(cfg: LoadedConfig) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path(cfg.model.output_dir) / f"{cfg.name}-{stamp}"
