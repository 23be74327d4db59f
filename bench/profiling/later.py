"""The profiled phase of a sweep (docs/DESIGN.md §5): the profiler-based views of the cases recorded in a run
folder, run after the last timed measurement of the process.

Why a phase of its own: on the H200 a host-bound call (846 sequences of 1–127 tokens) timed 0.16 ms in a
fresh interpreter and 0.31 ms after one kernel breakdown in the same process (0.125 → 0.24 ms with
TEARDOWN_CUPTI=1): a torch.profiler session leaves host time on every later launch of its process. With a
breakdown after each case every case timed after the first one of a process was perturbed. So every timed
measurement of a process (each case's samples, energy loop, CUDA-graph time, its bands' timings) comes
first, case by case, each case written as it finishes; then, here, each case recorded `ok` whose profiled
views are missing (bench.profiling.views.CaseProfiling.pending) is built again from its workload, warmed by
one call, and profiled (its kernel breakdown, its trace, its bands' breakdowns); the fields are added to its
record, results.json rewritten atomically after each case.

The same function serves the sweep (bench.sweep.runner, after its last timed case, in the worker process
or in the calling process), a resumed run (the cases a stopped or faulted process left without their views)
and `gdpa-bench profile --run` (`redo`: the recorded cases' breakdowns and traces made again). A fault of the
GPU here is the case's (bench.case.faults): it is recorded `failed` and the phase stops; a fresh process
resumes the rest."""

from __future__ import annotations

import gc
from collections.abc import Callable
from itertools import groupby

import torch

from bench.case.faults import is_sticky_cuda_error
from bench.case.watchdog import RECORDED
from bench.config.cases import Case
from bench.profiling.views import CaseProfiling
from results.figures import judged_kernel_ms
from results.files import ResultsWriter
from support.text import one_line


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def todo(views: CaseProfiling, cases: list[Case], records: list[dict], redo: bool = False) -> list[Case]:
    """The cases (config order) whose profiled views are missing; with `redo`, every case recorded ok."""
    by_id = {r["id"]: r for r in records}
    return [
        c
        for c in cases
        if c.id in by_id and (views.pending(by_id[c.id]) or (redo and by_id[c.id].get("status") == "ok"))
    ]


def pending_ids(model, device_type: str, records: list[dict]) -> set[str]:
    """The ids of the recorded cases still without their profiled views under config `model` (without
    touching the device: a sharded run's parent opens no CUDA context)."""
    views = CaseProfiling(model, torch.device(device_type), timer=None)
    return {r["id"] for r in records if views.pending(r)}


def line(case_id: str, fields: dict) -> str:
    """The line a profiled case prints: `  views of <id>: ...` (never `<id>: `, the line a worker's parent
    counts as a timed case)."""
    k = fields.get("kernels") or {}
    if k.get("error"):
        what = f"no breakdown ({k['error']})"
    elif k:
        call = k.get("pass_median_ms")
        what = f"kernels {judged_kernel_ms(k):.4g} ms" + (f" / call {call:.4g} ms" if call else "")
        what += f" ({k['accounting']})" if k.get("accounting") else ""
    else:
        what = "bands' kernels"
    return f"  views of {case_id}: {what}" + (f"; trace {k['trace']}" if k.get("trace") else "")


def profile_recorded(
    views: CaseProfiling,
    cases: list[Case],
    writer: ResultsWriter,
    provider_of: Callable,
    say: Callable[[str], None],
    redo: bool = False,
    phase: Callable[[str, str], None] | None = None,
) -> tuple[str, str] | None:
    """Profile the cases of `writer`'s run that need it (see `todo`), adding their fields to the records.
    `provider_of(case)`: the case's provider instance. `phase(case id, phase)`: the watchdog's reporter
    (bench.case.watchdog: `batch`, `views`, then `recorded` per case; a case hung here is recorded `failed`
    by the fresh worker). None, or (case id, error) when the GPU faulted: that case is recorded `failed`
    and nothing more runs in this process."""
    phase = phase or (lambda case_id, what: None)
    device = views.device
    chosen = todo(views, cases, writer.data["cases"], redo)
    if not chosen:
        return None
    say(f"profiling views of {len(chosen)} case(s), after every timed measurement of this process ...")
    for w, group in groupby(chosen, key=lambda c: c.workload):
        records = {r["id"]: r for r in writer.data["cases"]}
        batch, why = None, None
        group = list(group)
        phase(group[0].id, "batch")
        try:
            batch = w.batch(device)
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            if is_sticky_cuda_error(exc):
                return _fault(writer, group[0].id, exc)
            why = f"the batch could not be built again: {one_line(exc)}"
        for case in group:
            rec, fn = records[case.id], None
            phase(case.id, "views")
            try:
                if why is not None:
                    raise RuntimeError(why)
                provider = provider_of(case)
                fn = provider.build(batch, case.spec, case.mode)
                fn()  # compile / autotune / the op's measured choice: cached since the timed phase
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                fields = views.profiled(case, rec, fn, provider, batch, redo=redo)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # SystemExit included: a provider never ends the sweep
                if is_sticky_cuda_error(exc):
                    return _fault(writer, case.id, exc)
                fields = views.unprofiled(rec, f"the case could not be built again: {one_line(exc)}", redo)
            finally:
                del fn
            writer.update_cases({case.id: fields})
            phase(case.id, RECORDED)
            say(line(case.id, fields))
        del batch
        _free(device)
    return None


def _fault(writer: ResultsWriter, case_id: str, exc: BaseException) -> tuple[str, str]:
    error = one_line(exc)
    why = f"the GPU faulted in its profiled views, after its samples: {error}"
    writer.update_cases({case_id: {"status": "failed", "error": why, "times_ms": []}})
    return case_id, error
