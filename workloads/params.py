"""The parameters of a registered rule — a length family (workloads.lengths), a pairing rule
(workloads.pairing): `Param(default, check)`, the checks, and the two things both registries do with them
(register a rule under a unique name; check a mapping of parameters, one-line errors).

A check takes (where, name, value, max_len | None) and raises a one-line ValueError.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from support.suggest import did_you_mean


class _Required:
    """Sentinel default of a parameter that has to be given."""

    def __repr__(self) -> str:
        return "<required>"


REQUIRED: Any = _Required()

# --------------------------------------------------------------------------------------------------
# parameter checks: each takes (where, name, value, max_len | None) and raises ValueError
# --------------------------------------------------------------------------------------------------

Check = Callable[[str, str, Any, "int | None"], None]


def _bad(where: str, name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{where}: bad value {name}={value!r}; allowed: {allowed}")


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))


def is_int(v: Any) -> bool:
    # integral floats are accepted (YAML/JSON may carry 256.0); bools are not numbers here
    return _is_real(v) and float(v).is_integer()


def real(
    lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False, note: str = ""
) -> Check:
    """A finite real number in the interval given (None = unbounded on that side)."""
    lb = "(" if lo_open or lo is None else "["  # finite: an unbounded side is open (inf itself is refused)
    rb = ")" if hi_open or hi is None else "]"
    allowed = f"a finite number in {lb}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{rb}{note}"

    def check(where, name, v, max_len):
        ok = _is_real(v)
        if ok and lo is not None:
            ok = v > lo if lo_open else v >= lo
        if ok and hi is not None:
            ok = v < hi if hi_open else v <= hi
        if not ok:
            raise _bad(where, name, v, allowed)

    check.allowed = allowed
    return check


# a length is addressed through the int32 offsets of the packed tensors (workloads.batch)
MAX_LENGTH = 2**31 - 1


def integer(lo: int = 1, hi_is_max_len: bool = False) -> Check:
    """An integer >= lo (and <= max_len when asked and max_len is known; <= MAX_LENGTH always)."""

    def check(where, name, v, max_len):
        hi = max_len if hi_is_max_len else None
        ok = is_int(v) and v >= lo and v <= MAX_LENGTH and (hi is None or v <= hi)
        if not ok:
            if not hi_is_max_len:
                raise _bad(where, name, v, f"an integer >= {lo} and <= {MAX_LENGTH}")
            raise _bad(where, name, v, f"an integer in [{lo}, max_len" + (f"={hi}]" if hi else "]"))

    check.allowed = f"an integer in [{lo}, max_len]" if hi_is_max_len else f"an integer >= {lo}"
    return check


def optional(inner: Check) -> Check:
    def check(where, name, v, max_len):
        if v is not None:
            inner(where, name, v, max_len)

    check.allowed = lambda: f"{allowed_text(inner)}, or null"
    return check


def one_of(options: tuple[str, ...] | Callable[[], tuple[str, ...]]) -> Check:
    def check(where, name, v, max_len):
        opts = options() if callable(options) else options
        if v not in opts:
            raise _bad(where, name, v, ", ".join(opts) + did_you_mean(v, opts))

    check.allowed = lambda: "one of " + ", ".join(options() if callable(options) else options)
    return check


def text(where, name, v, max_len):
    if not isinstance(v, str) or not v:
        raise _bad(where, name, v, "a non-empty string")


def path_like(where, name, v, max_len):
    if not isinstance(v, (str, os.PathLike)) or not os.fspath(v):
        raise _bad(where, name, v, "a file path")


text.allowed = "a non-empty string"
path_like.allowed = "a file path (relative: from the config's folder)"


def allowed_text(check: Check | None) -> str:
    """What a parameter check allows, in words (the config reference prints it: bench.config.reference)."""
    a = getattr(check, "allowed", "") if check is not None else "anything"
    return a() if callable(a) else a


@dataclass(frozen=True)
class Param:
    default: Any = REQUIRED
    check: Check | None = None


def registrar(table: dict[str, Any], kind: str, name: str, entry: Callable[[Callable], Any]) -> Callable:
    """A decorator that records `entry(fn)` as `table[name]` (a `kind` registered twice is an error)."""

    def register(fn: Callable) -> Callable:
        if name in table:
            raise ValueError(f"{kind} {name!r} registered twice")
        table[name] = entry(fn)
        return fn

    return register


def entry_of(table: dict[str, Any], kind: str, name: Any) -> Any:
    """`table[name]`, or a one-line ValueError naming what is allowed."""
    found = table.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"unknown {kind} {name!r}; allowed: {', '.join(table)}{did_you_mean(name, table)}")
    return found


def check_params(
    where: str,
    spec: dict[str, Param],
    params: dict,
    max_len: int | None,
    *,
    open_params: bool = False,
    unchecked: Callable[[Any], bool] = lambda value: False,
) -> None:
    """Raise ValueError naming the first unknown (unless `open_params`), missing or out-of-range parameter of
    `params` against `spec`; a value `unchecked` accepts is not range-checked."""
    if not open_params:
        for k in params:
            if k not in spec:
                raise ValueError(
                    f"{where}: unknown param {k!r}; allowed: {', '.join(spec) or '(none)'}{did_you_mean(k, spec)}"
                )
    for k, p in spec.items():
        if k not in params:
            if p.default is REQUIRED:
                raise ValueError(f"{where}: missing required param {k!r}; allowed: {', '.join(spec)}")
        elif p.check is not None and not unchecked(params[k]):
            p.check(where, k, params[k], max_len)
