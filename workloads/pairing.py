"""Q/KV pairing rules (one registry, like the length families), sorting by work, and `build_lengths`
(family -> pairing -> optional sort).

A length family gives one length L per sequence; a pairing rule turns it into (Lq, Lk) (docs/DESIGN.md §4):
- `self`:           Lq = Lk = L                      (self-attention over the user history)
- `fixed_kv`:       Lq = L, Lk = kv_len (default N)  (the Meta peer's set 1: kv_len = N; set 2: 256)
- `target_history`: Lk = L, Lq ~ U{1 .. max_targets} (candidate targets attending to the history)
- `seeds`:          Lk = L, Lq = num_seeds            (PMA / learned seed queries pooling a history)
Pairing lengths are not capped at max_len: a fixed KV or a seed count longer than the Q maximum is a
legitimate shape, and max_len only bounds what the length family draws.

A rule is a function `(lengths, max_len, seed, **params) -> (q_lengths, kv_lengths)` registered with
`@register_pairing(name, param=Param(default, check), ...)`; a parameter whose value (or default) is
`MAX_LEN` takes the workload's max_len (`resolve_pairing_params`). To add a rule: one decorated function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from workloads.lengths import resolve_family_params, sample_lengths
from workloads.params import MAX_LENGTH, REQUIRED, Param, check_params, entry_of, integer, is_int, optional, registrar

MAX_LEN = "max_len"  # a parameter value (or default) meaning the workload's max length


@dataclass(frozen=True)
class Pairing:
    name: str
    pair: Callable[..., tuple[np.ndarray, np.ndarray]]
    params: dict[str, Param]


PAIRINGS: dict[str, Pairing] = {}

# sub-stream id for the pairing rule's own draw; the family's streams use 0.. small ids
_STREAM_PAIRING = 100


def register_pairing(name: str, **params: Param):
    """Decorator: register `fn(lengths, max_len, seed, **params) -> (q, kv)` as pairing rule `name`."""
    return registrar(PAIRINGS, "pairing rule", name, lambda fn: Pairing(name, fn, dict(params)))


def _rule(rule: str) -> Pairing:
    return entry_of(PAIRINGS, "pairing rule", rule)


def pairing_params(rule: str) -> dict[str, object]:
    """Parameter names of pairing `rule` -> default (`REQUIRED` where it has to be given)."""
    return {k: p.default for k, p in _rule(rule).params.items()}


def resolve_pairing_params(rule: str, params: dict, max_len: int) -> dict:
    """The parameters `rule` runs with at this max length: defaults filled in, and `MAX_LEN` — or no value
    for a parameter whose default it is — replaced by it (a workload records these)."""
    spec = _rule(rule).params
    full = {k: p.default for k, p in spec.items() if p.default is not REQUIRED}
    full.update(params or {})

    def means_max_len(k: str, v: object) -> bool:
        return (isinstance(v, str) and v == MAX_LEN) or (v is None and k in spec and spec[k].default == MAX_LEN)

    return {k: max_len if means_max_len(k, v) else v for k, v in full.items()}


def check_pairing_params(rule: str, params: dict) -> None:
    """Raise ValueError naming the first unknown, missing or out-of-range parameter of `rule`."""
    means_max_len = lambda v: isinstance(v, str) and v == MAX_LEN
    check_params(f"pairing rule {rule!r}", _rule(rule).params, dict(params or {}), None, unchecked=means_max_len)


def _as_lengths(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one length per sequence), got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if not (np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a))):
            raise ValueError(f"{name} must hold integers, got {a.dtype}")
    a = a.astype(np.int64)
    if a.size and a.min() < 0:
        raise ValueError(f"{name} must be >= 0, got {int(a.min())}")
    return a


def pair_lengths(rule: str, lengths, *, max_len: int, seed: int = 0, **params) -> tuple[np.ndarray, np.ndarray]:
    """(q_lengths, kv_lengths), int64, from per-sequence family `lengths` by pairing `rule`."""
    check_pairing_params(rule, params)
    if not is_int(seed) or seed < 0:
        raise ValueError(f"bad value seed={seed!r}; allowed: an integer >= 0")
    if not is_int(max_len) or not 0 < max_len <= MAX_LENGTH:
        raise ValueError(f"bad value max_len={max_len!r}; allowed: an integer in [1, {MAX_LENGTH}]")
    L = _as_lengths(lengths, "lengths")
    return _rule(rule).pair(L, int(max_len), int(seed), **resolve_pairing_params(rule, params, int(max_len)))


# --------------------------------------------------------------------------------------------------
# the rules
# --------------------------------------------------------------------------------------------------


@register_pairing("self")
def self_pairing(lengths: np.ndarray, max_len: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    return lengths.copy(), lengths.copy()


@register_pairing("fixed_kv", kv_len=Param(MAX_LEN, optional(integer(1))))
def fixed_kv(lengths: np.ndarray, max_len: int, seed: int, *, kv_len: int | None) -> tuple[np.ndarray, np.ndarray]:
    kv = max_len if kv_len is None else int(kv_len)
    return lengths.copy(), np.full(lengths.shape[0], kv, dtype=np.int64)


@register_pairing("target_history", max_targets=Param(REQUIRED, integer(1)))
def target_history(lengths: np.ndarray, max_len: int, seed: int, *, max_targets: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, _STREAM_PAIRING])
    q = rng.integers(1, int(max_targets), size=lengths.shape[0], endpoint=True, dtype=np.int64)
    return q, lengths.copy()


@register_pairing("seeds", num_seeds=Param(REQUIRED, integer(1)))
def seeds(lengths: np.ndarray, max_len: int, seed: int, *, num_seeds: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full(lengths.shape[0], int(num_seeds), dtype=np.int64), lengths.copy()


def sort_by_length(q_lengths, kv_lengths) -> tuple[np.ndarray, np.ndarray]:
    """Reorder sequences by descending work Lq*Lk; ties keep their original order (stable).

    Longest-first is what schedulers of jagged kernels do to shorten the tail; sorting here lets a
    benchmark measure that effect separately from the kernel."""
    q = _as_lengths(q_lengths, "q_lengths")
    k = _as_lengths(kv_lengths, "kv_lengths")
    if q.shape != k.shape:
        raise ValueError(f"q_lengths and kv_lengths differ in size: {q.shape[0]} vs {k.shape[0]}")
    order = np.argsort(-(q * k), kind="stable")
    return q[order], k[order]


def build_lengths(
    family: str,
    family_params: dict,
    rule: str,
    rule_params: dict,
    *,
    batch_size: int,
    max_len: int,
    seed: int = 0,
    sort: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Lengths of one workload: draw from `family`, pair them by `rule`, optionally sort by work."""
    check_pairing_params(rule, rule_params)  # fail on a bad rule before drawing anything
    lengths = sample_lengths(family, batch_size, max_len, seed, **(family_params or {}))
    q, k = pair_lengths(rule, lengths, max_len=max_len, seed=seed, **(rule_params or {}))
    return sort_by_length(q, k) if sort else (q, k)


def check_workload(
    family: str,
    family_params: dict | None,
    rule: str = "self",
    rule_params: dict | None = None,
    *,
    batch_size: int,
    max_len: int,
    seed: int = 0,
    sort: bool = False,
    base_dir=None,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate one workload completely, by building its lengths; return (q_lengths, kv_lengths).

    Checks what `check_family_params` cannot without drawing: sizes, the seed, and every file the
    family reads (an empirical file is read and checked here, then cached for the run). Every problem
    is a ValueError with a one-line message (`LengthsFileError` for a file) for a config loader to
    prefix with the file and set. A relative file path is taken from `base_dir`; a loader passes the
    config's folder here and to `resolve_family_params`, whose result is what the run samples with.
    Cheap: sampling a batch costs milliseconds, and a file is read once per process.
    """
    for name, p in (("lengths", family_params), ("kv", rule_params)):
        if p is not None and not isinstance(p, dict):
            raise ValueError(f"bad value {name}={p!r}; allowed: a mapping of parameter names to values")
    if not isinstance(sort, (bool, np.bool_)):
        raise ValueError(f"bad value sort_by_length={sort!r}; allowed: true or false")
    fparams = resolve_family_params(family, family_params or {}, base_dir)
    try:
        return build_lengths(
            family, fparams, rule, rule_params or {}, batch_size=batch_size, max_len=max_len, seed=seed, sort=bool(sort)
        )
    except MemoryError:
        raise ValueError(
            f"batch_size={batch_size}, max_len={max_len}: too large to sample the lengths in "
            f"memory; allowed: sizes a batch can have"
        ) from None
