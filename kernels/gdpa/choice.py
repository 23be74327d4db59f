"""backend="auto" by measurement: the first call of a shape class times the candidate plans (plan.py) and
keeps the fastest for every later call of that class in the process.

The backends' speed depends on the length distribution, which the host cannot see without reading the
offsets back: the same max length and batch size can be log-normal (Triton wins) or uniform (Hopper wins),
and a fixed rule loses up to 25% somewhere. So auto does what Triton's autotuner does for tiles: it times
each candidate once per key — the host facts that shape the work (device, dtype, head dim, heads, activation,
causal, self-attention, and batch size, total rows and max lengths each rounded up to a power of two) — and
caches the winner. That first call waits for the GPU (a host sync, like the autotuner's); every later call
of the key reads nothing back. On a CPU, while a CUDA graph is being captured, or with one candidate, the
table's plan runs untimed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernels.gdpa.call import GDPACall
from kernels.gdpa.plan import Stage, label

_CHOSEN: dict = {}  # key -> (the chosen candidate's label, {label: ms})
MEASURED_ON = ("cuda",)  # device types whose calls are timed (a test seam: the CPU interpreter times nothing)


def _bucket(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def key(mode: str, call: GDPACall, options) -> tuple:
    q = call.q
    return (
        mode,
        str(q.device),
        q.dtype,
        call.head_dim,
        call.heads,
        call.heads_kv,
        call.activation,
        call.causal,
        call.self_attention,
        _bucket(call.batch),
        _bucket(call.rows_q),
        _bucket(call.rows_kv),
        _bucket(call.max_q),
        _bucket(call.max_kv),
        options,
    )


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _time_ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=2, rep=10, return_mode="median"))


def choose(
    mode: str, call: GDPACall, options, candidates: list[list[Stage]], run: Callable[[list[Stage]], object]
) -> tuple[list[Stage], dict | None]:
    """(the plan to run, {label: ms} when this call measured or a cached measurement chose it). `run(plan)`
    executes a plan on this call's tensors. A candidate that raises raises here: a failing kernel is never
    skipped in silence."""
    if len(candidates) == 1 or call.q.device.type not in MEASURED_ON or _capturing(call.q.device):
        return candidates[0], None
    k = key(mode, call, options)
    chosen = _CHOSEN.get(k)
    if chosen is None:
        times = {}
        for stages in candidates:
            run(stages)  # compiles and autotunes outside the timing
            times[label(stages)] = round(_time_ms(lambda stages=stages: run(stages)), 4)
        best = min(times, key=times.get)
        chosen = _CHOSEN[k] = (best, times)
    best, times = chosen
    for stages in candidates:
        if label(stages) == best:
            return stages, times
    return candidates[0], times  # the cached winner is not a candidate here (options differ): the table's plan


def forget() -> None:
    """Drop every cached choice (tests; a process that wants to re-measure)."""
    _CHOSEN.clear()
