"""The timed window means what `rep_ms` says (issue 19): samples are taken until they add up to rep_ms,
within [min_reps, max_reps], whatever the first estimate said."""

from __future__ import annotations

import math
import time

import pytest

from bench.case import timing
from bench.case.timing import chunk_size, time_cpu


def take(true_ms, rep_ms: float, min_reps: int, max_reps: int) -> list[list[float]]:
    """The chunks `chunk_size` asks for when call i really takes `true_ms(i)` (or a constant)."""
    times: list[float] = []
    chunks = []
    while n := chunk_size(times, rep_ms, min_reps, max_reps):
        chunks.append([true_ms(len(times) + i) if callable(true_ms) else true_ms for i in range(n)])
        times += chunks[-1]
    return chunks


@pytest.mark.parametrize("call_ms", [0.01, 0.3, 1.0, 7.0, 90.0])
def test_the_samples_add_up_to_the_budget(call_ms):
    chunks = take(call_ms, rep_ms=1000.0, min_reps=5, max_reps=10**6)
    total = math.fsum(map(math.fsum, chunks))
    assert 1000.0 <= total < 1000.0 + 2 * call_ms  # the window is rep_ms (the last sample may cross it)
    assert len(chunks) <= 20  # a sync per chunk: chunks double, never one per call


@pytest.mark.parametrize("at", [100, 300, 500, 700])
def test_calls_that_slow_down_during_the_window_barely_overshoot_it(at):
    # 1 ms calls that become 10% slower (an SM clock that drops under the power cap: 1980 -> 1800 MHz)
    chunks = take(lambda i: 1.0 if i < at else 1.1, rep_ms=1000.0, min_reps=5, max_reps=10**6)
    total = math.fsum(map(math.fsum, chunks))
    assert 1000.0 <= total <= 1050.0


def test_min_and_max_reps_bound_the_count():
    assert sum(map(len, take(100.0, 200.0, 7, 50))) == 7  # min_reps beats a budget of 2 calls
    assert sum(map(len, take(0.01, 1000.0, 5, 300))) == 300  # max_reps ends a window of tiny calls
    assert sum(map(len, take(1.0, 10.0, 20, 20))) == 20  # min == max: exactly that many
    assert [len(c) for c in take(1.0, 40.0, 5, 1000)] == [5, 5, 10, 20]  # doubling, the last one sized


def test_cpu_timing_uses_the_budget_and_the_configured_reps():
    def fn():
        time.sleep(0.005)

    s = time_cpu(fn, warmup_ms=1, rep_ms=60, min_reps=2, max_reps=1000)
    assert sum(s.times_ms) >= 60 and len(s.times_ms) <= 13  # ~5 ms calls: about 12 samples
    s = time_cpu(fn, warmup_ms=1, rep_ms=1, min_reps=30, max_reps=30)
    assert len(s.times_ms) == 30  # not clamped to 20 on a CPU (it was, before issue 19)


def test_cpu_warmup_calls_until_its_budget_has_passed():
    """`warmup_ms` on the CPU as on the GPU: untimed calls until it has passed (one call, however long)."""
    calls = []

    def fn():
        calls.append(time.perf_counter())
        time.sleep(0.002)

    s = time_cpu(fn, warmup_ms=40, rep_ms=1, min_reps=3, max_reps=3)
    warm = len(calls) - len(s.times_ms)
    assert len(s.times_ms) == 3 and warm >= 2
    # the samples start once 40 ms have passed, and no warm-up call started after that
    assert calls[warm] - calls[0] >= 0.039 and calls[warm - 1] - calls[0] < 0.040
    calls.clear()
    time_cpu(fn, warmup_ms=0.001, rep_ms=1, min_reps=2, max_reps=2)
    assert len(calls) == 3  # one warm-up call, then the samples


def test_each_chunk_after_a_sync_starts_with_an_untimed_call(monkeypatch):
    """The order time_cuda enqueues in, with torch.cuda's events and sync stood in for: every timed sample's
    call is preceded, since the last sync, by at least one untimed call (a warm-up or the chunk's primer), so
    no sample starts on a GPU left idle by a sync (the H200, 2026-12-03: those samples read 1.2-3x the median)."""
    log: list[str] = []

    class Event:
        def __init__(self, enable_timing=False):
            self.name = "event"

        def record(self, stream=None):
            log.append("record")

        def elapsed_time(self, other):
            return 10.0  # ms per sample: chunks of 5, 5, 10 for a 200 ms window

    class Flush:
        def zero_(self):
            log.append("flush")

    monkeypatch.setattr(timing.torch.cuda, "Event", Event)
    monkeypatch.setattr(timing.torch.cuda, "synchronize", lambda device=None: log.append("sync"))
    monkeypatch.setattr(timing, "l2_flush_buffer", lambda device: Flush())
    samples = timing.time_cuda(
        lambda: log.append("call"), warmup_ms=1.0, rep_ms=200.0, device=timing.torch.device("cuda", 0),
        between=lambda: log.append("between"),
    )  # fmt: skip
    assert len(samples.times_ms) == 20
    # the estimate's three calls (each synced) come first; from the first warm-up call on, every timed call
    # has an untimed one since the last sync
    first_warmup = next(i for i, op in enumerate(log) if op == "call" and log[i - 1] != "record")
    untimed_since_sync, timed = 0, 0
    for prev, op in zip(log[first_warmup - 1 :], log[first_warmup:], strict=False):
        if op == "sync":
            untimed_since_sync = 0
        elif op == "call" and prev == "record":
            timed += 1
            assert untimed_since_sync >= 1, log
        elif op == "call":
            untimed_since_sync += 1
    assert timed == 20 and log.count("between") == 3
    assert samples.chunk_ends == [5, 10, 20]  # the sample count at each sync, for the clock read there
