"""backend="auto" by measurement: the first call of a shape class times the candidate plans (plan.py) and
keeps the fastest for every later call of that class in the process.

The backends' speed depends on the length distribution, which the host cannot see without reading the
offsets back: the same max length and batch size can be log-normal (Triton wins) or uniform (Hopper wins),
and a fixed rule loses up to 25% somewhere. So auto does what Triton's autotuner does for tiles: it times
each candidate (interleaved, `ROUNDS` rounds of at least 5 calls, judged by the median; a plan of several
launches must beat the fastest one-backend plan by `SPLIT_MARGIN`) once per key — the host facts that shape
the work (device, dtype, head dim, heads, activation, causal, self-attention, and batch size, total rows and
max lengths each rounded up to 3 significant bits) — and caches the winner. That first call waits for the
GPU (a host sync, like the autotuner's); every later call of the key reads nothing back. On a CPU, while a
CUDA graph is being captured, or with one candidate, the table's plan runs untimed.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from kernels.gdpa.call import GDPACall
from kernels.gdpa.plan import SPLIT_MARGIN, Stage, candidates, label, reach

_CHOSEN: dict = {}  # key -> (the chosen plan, {label: ms})
MEASURED_ON = ("cuda",)  # device types whose calls are timed (a test seam: the CPU interpreter times nothing)
ROUNDS = 3  # timings per candidate, interleaved (plan_for)


def bucket(n: int) -> int:
    """n rounded up to 3 significant bits (classes at most 25% wide). Powers of two were too coarse: on the
    H200 the log-normal and the spike batches of configs/production.yaml (ΣL 178k and 256k, max 4096, B 1152)
    shared a class, and the spike ran log-normal's choice, 6% behind its best backend."""
    n = int(n)
    step = 1 << max(n.bit_length() - 3, 0)
    return -(-n // step) * step


def key(mode: str, call: GDPACall, options) -> tuple:
    """The shape class of a call: what its plan and its measurement depend on (cheap: host facts only)."""
    q = call.q
    return (
        mode,
        q.device,
        q.dtype,
        q.shape[1:],
        call.k.shape[1],
        call.activation,
        call.causal,
        call.self_attention,
        bucket(call.batch),
        bucket(q.shape[0]),
        bucket(call.k.shape[0]),
        bucket(call.max_q),
        bucket(call.max_kv),
        reach(mode, min(call.max_q, call.max_kv)),
        options,
    )


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


ROUND_MS = 10.0  # GPU time one candidate's round aims at
ROUND_SAMPLES = (5, 100)  # calls per round, at least and at most
FLUSH_BYTES = 256 << 20  # over the H200's 50 MB L2, as do_bench's buffer


def _time_ms(fn: Callable[[], object], flush: torch.Tensor) -> float:
    """One round's median: about ROUND_MS of calls and never fewer than ROUND_SAMPLES[0], L2 flushed before
    each, events around the call alone. do_bench(rep=10) gave a 9 ms call one sample a round (H200, 1a75745:
    hstu_sl unsorted forward ran a plan 5% behind gdpa_hopper on 3 samples each)."""
    events = []
    flush.zero_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    lo, hi = ROUND_SAMPLES
    n = max(lo, min(hi, int(ROUND_MS / max(start.elapsed_time(end), 1e-3))))
    for _ in range(n):
        flush.zero_()
        pair = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        pair[0].record()
        fn()
        pair[1].record()
        events.append(pair)
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


def plan_for(
    mode: str, call: GDPACall, options, run: Callable[[list[Stage]], object]
) -> tuple[list[Stage], dict | None]:
    """(the plan this call runs, {label: ms} where a measurement chose it). Decided once per shape class
    (key) and cached: later calls of the class cost a dictionary lookup. `run(plan)` executes a plan on
    this call's tensors (used only to measure). A candidate that raises raises here: a failing kernel is
    never skipped in silence."""
    k = key(mode, call, options)
    chosen = _CHOSEN.get(k)
    if chosen is None:
        found = candidates(mode, call, options)
        if len(found) == 1 or call.q.device.type not in MEASURED_ON:
            chosen = _CHOSEN[k] = (found[0], None)
            return chosen
        if _capturing(call.q.device):
            return found[0], None  # not cached: measured on the first call outside a graph capture
        for stages in found:
            run(stages)  # compiles and autotunes outside the timing
        # candidates timed in turn, ROUNDS times over, and each judged by its median: a power-capped GPU's
        # clock drifts over the tens of ms this takes, and one pass in order gave the last candidates the
        # slower clock (uniform max 2048 on the H200 ran a plan 7% behind the fastest one)
        rounds = {label(stages): [] for stages in found}
        flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=call.q.device)
        for _ in range(ROUNDS):
            for stages in found:
                rounds[label(stages)].append(_time_ms(lambda stages=stages: run(stages), flush))
        del flush
        times = {name: round(statistics.median(ms), 4) for name, ms in rounds.items()}
        best = min(times, key=times.get)
        single = min((label(s) for s in found if len(s) == 1), key=times.get, default=None)
        if single is not None and times[best] > times[single] * (1 - SPLIT_MARGIN):
            best = single
        chosen = _CHOSEN[k] = (next(s for s in found if label(s) == best), times)
    return chosen


def forget() -> None:
    """Drop every cached choice (tests; a process that wants to re-measure)."""
    _CHOSEN.clear()
