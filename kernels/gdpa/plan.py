"""Which launches run one pass of a GDPA call: a plan of stages, each one backend over one length band.

backend="auto" builds the plan from the backend table (backends.py) and what the host knows for free (the
max lengths, the device, dtype, head dim, activation): the length axis min(Lq, Lk) is cut at every band edge
of the table, each piece goes to the first row that prefers it and can run the call (else to the fallback
row), pieces of one row's band are merged, and bands no sequence can reach (lo > min(max_q, max_kv)) are
dropped. A plan of one stage runs the whole batch in one launch, unfiltered. A pinned plan (GDPAOptions
`fwd_plan` / `bwd_plan`) or a pinned backend is run as given, or refused with one line: never a fallback.
Nothing here reads device memory.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass

from kernels.gdpa import backends
from kernels.gdpa.bands import WHOLE, Band
from kernels.gdpa.call import GDPACall

# A plan of several launches is kept only if it beats every one-backend plan by more than this (choice.py): the
# first call's medians are this noisy at a power cap. The uniform 4096 forward on the H200 (2026-12-02, twice)
# chose a split 0.2% ahead of Hopper alone, which then ran 3-7% behind it in the samples.
SPLIT_MARGIN = 0.02


@dataclass(frozen=True)
class Stage:
    backend: str
    band: Band = WHOLE
    reason: str = ""

    def describe(self) -> dict:
        return {"backend": self.backend, "band": self.band.describe(), "reason": self.reason}


@functools.cache
def _edges(mode: str) -> list[int]:
    edges = {0}
    for row in backends.TABLE:
        for band in row.prefer.get(mode, ()):
            edges.add(band.lo)
            if band.hi is not None:
                edges.add(band.hi)
    return sorted(edges)


def reach(mode: str, shortest_max: int) -> int:
    """How many of the table's band edges min(max_q, max_kv) reaches: calls that differ here get different
    plans (a band no sequence can reach is dropped), so the choice is cached apart."""
    return sum(edge <= shortest_max for edge in _edges(mode))


def _covering(row: backends.BackendRow, mode: str, piece: Band) -> Band | None:
    for band in row.prefer.get(mode, ()):
        if band.lo <= piece.lo and (band.hi is None or (piece.hi is not None and piece.hi <= band.hi)):
            return band
    return None


def _auto(mode: str, call: GDPACall) -> list[Stage]:
    why_not = {row.name: backends.cannot_run(row.name, call) for row in backends.TABLE[:-1]}
    edges = _edges(mode)
    chosen: list[list] = []  # [backend, its preferred band, piece, reasons]
    for lo, hi in zip(edges, [*edges[1:], None], strict=True):
        piece = Band(lo, hi)
        if not piece.reachable(call.max_q, call.max_kv) and lo > 0:
            continue
        skipped = []
        for row in backends.TABLE[:-1]:
            band = _covering(row, mode, piece)
            if band is None:
                continue
            if why_not[row.name] is None:
                chosen.append(
                    [row.name, band, piece, [f"preferred for min(Lq, Lk) in {band.describe()} ({row.source})"]]
                )
                break
            skipped.append(why_not[row.name])
        else:
            last = backends.TABLE[-1]
            _runnable(last.name, call, "backend='auto' (its last resort, after " + (", ".join(skipped) or "none") + ")")
            band = _covering(last, mode, piece) or piece
            chosen.append([last.name, band, piece, skipped or [f"preferred for {band.describe()}"]])
    merged: list[list] = []
    for name, band, piece, reasons in chosen:
        if merged and merged[-1][0] == name and merged[-1][1] == band:
            merged[-1][2] = Band(merged[-1][2].lo, piece.hi)
            merged[-1][3] += [r for r in reasons if r not in merged[-1][3]]
        else:
            merged.append([name, band, piece, list(reasons)])
    merged[-1][2] = Band(merged[-1][2].lo, None)  # the last reachable piece runs everything above it
    stages = [Stage(name, piece, f"{name}: " + "; ".join(reasons)) for name, _, piece, reasons in merged]
    if len(stages) == 1:
        stages = [Stage(stages[0].backend, WHOLE, stages[0].reason)]
    return stages


def parse_plan(name: str, value) -> tuple | None:
    """A pinned plan from an option value: a list of [backend, lo, hi] (or mappings with those keys) whose
    bands partition [0, inf) in order; ValueError with one line naming option `name`."""
    if value is None:
        return None
    spelled = f"{name}: expected a list of [backend, lo, hi] (hi null = no bound) partitioning [0, inf), got {value!r}"
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise ValueError(spelled)
    stages = []
    for item in value:
        if isinstance(item, dict):
            unknown = set(item) - {"backend", "lo", "hi"}
            if unknown:
                raise ValueError(f"{name}: unknown key {sorted(unknown)[0]!r}; allowed: backend, lo, hi")
            item = (item.get("backend"), item.get("lo", 0), item.get("hi"))
        if isinstance(item, str) or not hasattr(item, "__iter__") or len(item := tuple(item)) != 3:
            raise ValueError(spelled)
        backend, lo, hi = item
        if backend not in backends.NAMES:
            raise ValueError(f"{name}: backend {backend!r}; allowed: {', '.join(backends.NAMES)}")
        if any(isinstance(x, bool) for x in (lo, hi)):
            raise ValueError(spelled)
        try:
            band = Band(lo, hi)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        stages.append((backend, band.lo, band.hi))
    if not stages or stages[0][1] != 0 or stages[-1][2] is not None:
        raise ValueError(spelled)
    for (_, _, hi), (_, lo, _) in itertools.pairwise(stages):
        if hi != lo:
            raise ValueError(f"{name}: bands must meet end to start (hi {hi} then lo {lo}); got {value!r}")
    return tuple(stages)


def _runnable(name: str, call: GDPACall, what: str) -> None:
    why = backends.cannot_run(name, call)
    if why is not None:
        raise ValueError(f"gdpa: {what} cannot run this call: {why}")


def plan(mode: str, call: GDPACall, options) -> list[Stage]:
    """The stages of pass `mode` ("fwd" or "bwd") for this call under `options` (GDPAOptions)."""
    if mode not in backends.PASSES:
        raise ValueError(f"plan: mode {mode!r}; allowed: {', '.join(backends.PASSES)}")
    pinned = getattr(options, f"{mode}_plan")
    if pinned is not None:
        for name, _, _ in pinned:
            _runnable(name, call, f"{mode}_plan's backend {name!r}")
        stages = [Stage(n, Band(lo, hi), f"{n}: {mode}_plan pinned") for n, lo, hi in pinned]
        return stages if len(stages) > 1 else [Stage(stages[0].backend, WHOLE, stages[0].reason)]
    if options.backend != "auto":
        _runnable(options.backend, call, f"backend={options.backend!r}")
        return [Stage(options.backend, WHOLE, f"{options.backend}: backend={options.backend!r} requested")]
    return _auto(mode, call)


def candidates(mode: str, call: GDPACall, options) -> list[list[Stage]]:
    """The plans backend="auto" chooses among by measurement (choice.py): the table's plan first, then
    each backend that can run the call alone over the whole batch, then the two-backend splits of
    backends.SPLITS (where both backends run the call and the edge is reachable).
    Anything pinned is the only candidate."""
    first = plan(mode, call, options)
    if options.backend != "auto" or getattr(options, f"{mode}_plan") is not None:
        return [first]
    found = [first]

    def add(stages):
        if all(label(c) != label(stages) for c in found):
            found.append(stages)

    runnable = [row.name for row in backends.TABLE if backends.cannot_run(row.name, call) is None]
    for name in runnable:
        if mode in backends.ROWS[name].prefer:  # a row candidate of this pass (backends.py)
            add([Stage(name, WHOLE, f"{name}: the whole batch on one backend")])
    low, high, edges = backends.SPLITS.get(mode, (None, None, ()))
    if low in runnable and high in runnable:
        for edge in edges:
            if Band(edge).reachable(call.max_q, call.max_kv):
                why = f"split at {edge}: {low} below, {high} from it up"
                add([Stage(low, Band(0, edge), f"{low}: {why}"), Stage(high, Band(edge), f"{high}: {why}")])
    return found


def pinned_from_record(entry: dict) -> list[list] | None:
    """A pass's recorded plan (`record["dispatch"][mode]`, see `record`) as the option that pins it: [[backend, lo,
    hi], ...]; None where the entry does not spell one (a record of another version)."""
    pinned = []
    for stage in entry.get("stages") or ():
        m = re.fullmatch(r"\[(\d+), (\d+|inf)\)", str(stage.get("band", "")))
        if m is None or stage.get("backend") not in backends.NAMES:
            return None
        pinned.append([stage["backend"], int(m[1]), None if m[2] == "inf" else int(m[2])])
    return pinned or None


def label(stages: list[Stage]) -> str:
    """A plan spelt short: `triton`, `hopper`, `triton[0, 512)+hopper[512, inf)`."""
    if len(stages) == 1:
        return stages[0].backend
    return "+".join(f"{s.backend}{s.band.describe()}" for s in stages)


def record(stages: list[Stage], measured: dict | None = None) -> dict:
    """What `record["dispatch"][mode]` holds: the backend(s), the reason, every stage, and where the plan
    was chosen by measurement, each candidate's time."""
    names = "+".join(dict.fromkeys(s.backend for s in stages))
    entry = {
        "backend": names,
        "reason": stages[0].reason if len(stages) == 1 else "; ".join(s.reason for s in stages),
        "stages": [s.describe() for s in stages],
    }
    if measured:
        entry["measured_ms"] = dict(measured)
        fastest = min(measured, key=measured.get)
        how = (
            "fastest"
            if fastest == label(stages)
            else f"one backend within {SPLIT_MARGIN:.0%} of the fastest ({fastest})"
        )
        entry["reason"] = (
            f"{how} of {len(measured)} plans timed on the first call of this shape class; {entry['reason']}"
        )
    return entry
