"""Sequence-length families: one registry, one function per family (docs/DESIGN.md §4).

Every family is a function `(batch_size, max_len, seed, **params) -> int64 [batch_size]` registered with
`@register_family(name, param=Param(default, check), ...)`. The registry knows each family's parameters,
so configs can be validated (`check_family_params`) without drawing anything.

Determinism: a family draws from `numpy.random.default_rng(seed)` (PCG64: the same lengths on every
machine and numpy version that keeps PCG64's stream). A second random purpose inside a family (HSTU's
truncation coin, the spike mask) gets its own sub-stream `default_rng([seed, k])`, so the first draw
stays equal to the family it builds on: `hstu_sl(fill)` before truncation *is* `uniform_fill(fill)` at
the same seed, and `spike(p=0, base=X)` *is* X.

To add a family: write one function below and decorate it; nothing else needs to change.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from workloads.params import (
    MAX_LENGTH,
    REQUIRED,
    Param,
    check_params,
    entry_of,
    integer,
    is_int,
    one_of,
    optional,
    path_like,
    real,
    registrar,
    text,
)

# sub-stream ids (second word of the seed); distinct per purpose so draws never alias
_STREAM_HSTU_SL = 1
_STREAM_SPIKE = 2


@dataclass(frozen=True)
class Family:
    name: str
    sample: Callable[..., np.ndarray]
    params: dict[str, Param]
    # cross-parameter rules (e.g. "preset or s, loc, scale"); gets the full params with defaults
    check: Callable[[dict, int | None], None] | None = None
    # True if extra params are forwarded elsewhere (spike -> its base family) and checked by `check`
    open_params: bool = False


FAMILIES: dict[str, Family] = {}


def register_family(name: str, *, check=None, open_params: bool = False, **params: Param):
    """Decorator: register `fn(batch_size, max_len, seed, **params)` as length family `name`."""
    return registrar(FAMILIES, "length family", name, lambda fn: Family(name, fn, dict(params), check, open_params))


def _family(name: str) -> Family:
    return entry_of(FAMILIES, "length family", name)


def family_params(family: str) -> dict[str, object]:
    """Parameter names of `family` -> default (`REQUIRED` where the parameter has to be given).

    `spike` also forwards any other parameter to its base family (see `spike`)."""
    return {k: p.default for k, p in _family(family).params.items()}


def check_family_params(family: str, params: dict, max_len: int | None = None) -> None:
    """Raise ValueError naming the first unknown, missing or out-of-range parameter of `family`.

    Checks that depend on the maximum length (min_len <= N) run only when `max_len` is given."""
    fam = _family(family)
    params = dict(params or {})
    check_params(f"length family {family!r}", fam.params, params, max_len, open_params=fam.open_params)
    if fam.check is not None:
        fam.check(_with_defaults(fam, params), max_len)


def resolve_family_params(family: str, params: dict, base_dir=None) -> dict:
    """A copy of `params` whose file paths are absolute, a relative one taken from `base_dir`.

    File paths are the parameters checked by `path_like` (empirical's `path`), also when `spike`
    forwards them to its base. A config loader passes the config file's folder, so a config and its
    lengths file can move together; `base_dir=None` takes the current directory. Values that are not
    paths are left for `check_family_params` to reject."""
    from workloads.empirical import resolve_path

    fam = _family(family)
    out = dict(params or {})
    names = [k for k, p in fam.params.items() if p.check is path_like]
    base = out.get("base")
    if fam.open_params and isinstance(base, str) and base in FAMILIES:
        names += [k for k, p in FAMILIES[base].params.items() if p.check is path_like]
    for k in names:
        v = out.get(k)
        if isinstance(v, (str, os.PathLike)) and os.fspath(v):
            out[k] = resolve_path(v, base_dir)
    return out


def _with_defaults(fam: Family, params: dict) -> dict:
    full = {k: p.default for k, p in fam.params.items()}
    full.update(params)
    return full


def _check_sizes(batch_size: Any, max_len: Any, seed: Any) -> None:
    if not is_int(batch_size) or not 0 < batch_size <= MAX_LENGTH:
        raise ValueError(f"bad value batch_size={batch_size!r}; allowed: an integer in [1, {MAX_LENGTH}]")
    if not is_int(max_len) or not 0 < max_len <= MAX_LENGTH:
        raise ValueError(f"bad value max_len={max_len!r}; allowed: an integer in [1, {MAX_LENGTH}]")
    if not is_int(seed) or seed < 0:
        raise ValueError(f"bad value seed={seed!r}; allowed: an integer >= 0")


def sample_lengths(family: str, batch_size: int, max_len: int, seed: int = 0, **params) -> np.ndarray:
    """Draw `batch_size` sequence lengths in [0, max_len] from `family` (int64, shape [batch_size])."""
    _check_sizes(batch_size, max_len, seed)
    check_family_params(family, params, max_len=int(max_len))
    return _sample(family, int(batch_size), int(max_len), int(seed), params)


def _sample(family: str, batch_size: int, max_len: int, seed: int, params: dict) -> np.ndarray:
    fam = _family(family)
    out = fam.sample(batch_size, max_len, seed, **_with_defaults(fam, params))
    out = np.asarray(out)
    # guard the contract for every family, including ones added later
    if out.shape != (batch_size,) or not np.issubdtype(out.dtype, np.integer):
        raise RuntimeError(
            f"length family {family!r} returned {out.dtype} {out.shape}, expected integer [{batch_size}]"
        )
    if out.size and (out.min() < 0 or out.max() > max_len):
        raise RuntimeError(f"length family {family!r} returned lengths outside [0, {max_len}]")
    return out.astype(np.int64, copy=False)


# --------------------------------------------------------------------------------------------------
# the families
# --------------------------------------------------------------------------------------------------


@register_family("uniform_fill", fill=Param(REQUIRED, real(0, 1, lo_open=True)))
def uniform_fill(batch_size: int, max_len: int, seed: int, *, fill: float) -> np.ndarray:
    """The Meta peer's jagged-length rule, bit-for-bit semantics.

    Source: facebookresearch/ads_model_kernel_library, gdpa benchmark `generate_jagged_data` (its
    `sparsity` argument is a fill fraction s; named `fill` here). With N = max_len:
      s >= 0.5: L ~ U{max(1, floor((2s-1)N)) .. N}
      s <  0.5: L ~ U{1 .. max(1, floor(2sN))}
    both ends inclusive, so E[L] ~= sN and s = 1 gives every length N. The peer computes the bounds
    with Python `int()` of the same float products; so do we, so that rounding matches.
    """
    n = max_len
    if fill >= 0.5:
        lo, hi = max(1, int((fill * 2 - 1) * n)), n
    else:
        lo, hi = 1, max(1, int(fill * 2 * n))
    rng = np.random.default_rng(seed)
    return rng.integers(lo, hi, size=batch_size, endpoint=True, dtype=np.int64)


@register_family(
    "hstu_sl",
    fill=Param(REQUIRED, real(0, 1, lo_open=True)),
    alpha=Param(REQUIRED, real(0, 2, lo_open=True, note="; published range [1.6, 2.0]")),
)
def hstu_sl(batch_size: int, max_len: int, seed: int, *, fill: float, alpha: float) -> np.ndarray:
    """`uniform_fill(fill)` followed by HSTU's Stochastic Length (SL) truncation.

    Source: Zhai et al., "Actions Speak Louder than Words: Trillion-Parameter Sequential Transducers
    for Generative Recommendations", ICML 2024 (arXiv:2402.17152) §3.2, and meta-recsys/
    generative-recommenders. With N = max_len, T = floor(N^(alpha/2)): a length L > T is cut to T with
    probability 1 - N^alpha / L^2 (clipped to [0, 1]), else kept. Published alpha range [1.6, 2.0]
    (alpha = 2 leaves every length alone, since then T = N). The result has a spike at T.
    """
    lengths = uniform_fill(batch_size, max_len, seed, fill=fill)
    # + 1e-9: N^(alpha/2) that is mathematically an integer (1024^0.8 = 256) must not floor one lower
    t = math.floor(max_len ** (alpha / 2) + 1e-9)
    n_alpha = float(max_len) ** alpha
    p_cut = np.clip(1.0 - n_alpha / lengths.astype(np.float64) ** 2, 0.0, 1.0)
    coin = np.random.default_rng([seed, _STREAM_HSTU_SL]).random(batch_size)
    cut = (lengths > t) & (coin < p_cut)
    return np.where(cut, t, lengths)


# scipy.stats.lognorm fits (shape s, loc, scale) of per-user interaction counts in MovieLens
# (GroupLens; ML-100K / ML-20M / ML-25M), as cited in docs/DESIGN.md §4. Median of the fit = loc + scale.
LOGNORMAL_PRESETS: dict[str, dict[str, float]] = {
    "ml-100k": {"s": 1.474, "loc": 18.678, "scale": 38.901},
    "ml-20m": {"s": 1.609, "loc": 19.078, "scale": 43.087},
    "ml-25m": {"s": 1.589, "loc": 18.636, "scale": 39.862},
}


def _check_lognormal(p: dict, max_len: int | None) -> None:
    if p["preset"] is None and any(p[k] is None for k in ("s", "loc", "scale")):
        missing = [k for k in ("s", "loc", "scale") if p[k] is None]
        raise ValueError(
            f"length family 'lognormal': give preset or all of s, loc, scale (missing "
            f"{', '.join(missing)}); allowed presets: {', '.join(LOGNORMAL_PRESETS)}"
        )


@register_family(
    "lognormal",
    check=_check_lognormal,
    s=Param(None, optional(real(0, lo_open=True))),
    loc=Param(None, optional(real())),
    scale=Param(None, optional(real(0, lo_open=True))),
    min_len=Param(20, integer(1, hi_is_max_len=True)),
    preset=Param(None, optional(one_of(tuple(LOGNORMAL_PRESETS)))),
)
def lognormal(
    batch_size: int, max_len: int, seed: int, *, s=None, loc=None, scale=None, min_len=20, preset=None
) -> np.ndarray:
    """Shifted log-normal user-history lengths: L = clip(round(loc + scale * exp(s * Z)), min_len, N).

    Z ~ N(0, 1); this is scipy.stats.lognorm(s, loc, scale). Presets (`LOGNORMAL_PRESETS`) are the
    published MovieLens user-activity fits: ml-100k 1.474/18.678/38.901, ml-20m 1.609/19.078/43.087,
    ml-25m 1.589/18.636/39.862 (s/loc/scale); s, loc or scale given next to a preset override it.
    min_len defaults to 20 (MovieLens keeps users with >= 20 ratings); the default is lowered to N
    when N < 20, while an explicit min_len > N is an error (caught by `check_family_params`).
    """
    p = dict(LOGNORMAL_PRESETS[preset]) if preset is not None else {}
    p.update({k: v for k, v in (("s", s), ("loc", loc), ("scale", scale)) if v is not None})
    lo = min(int(min_len), max_len)
    z = np.random.default_rng(seed).standard_normal(batch_size)
    with np.errstate(over="ignore"):  # an overflow to inf is clipped to N below
        raw = np.rint(p["loc"] + p["scale"] * np.exp(p["s"] * z))
    # clip in float first: exp() of a large draw can exceed int64
    return np.clip(raw, lo, max_len).astype(np.int64)


# zipf is sampled exactly over its whole support: three float64 arrays of max_len - min_len + 1 values
MAX_ZIPF_SUPPORT = 2**26


def _check_zipf(p: dict, max_len: int | None) -> None:
    if max_len is not None and is_int(p["min_len"]) and max_len - int(p["min_len"]) + 1 > MAX_ZIPF_SUPPORT:
        raise ValueError(
            f"length family 'zipf': max_len={max_len} is a support of {max_len - int(p['min_len']) + 1:,} lengths, "
            f"sampled exactly in memory; allowed: at most {MAX_ZIPF_SUPPORT:,} (max_len - min_len + 1)"
        )


@register_family(
    "zipf",
    check=_check_zipf,
    gamma=Param(REQUIRED, real(0, lo_open=True, note="; typical 1.7, 2.0, 2.5")),
    min_len=Param(1, integer(1, hi_is_max_len=True)),
)
def zipf(batch_size: int, max_len: int, seed: int, *, gamma: float, min_len: int = 1) -> np.ndarray:
    """Truncated power law: P(L = k) proportional to k^-gamma for k in [min_len, N].

    Skew stress (docs/DESIGN.md §4: gamma in {1.7, 2.0, 2.5}). Sampled exactly on the finite support by
    inverting the CDF: numpy's `zipf` has infinite support and would need rejection at N, which
    changes the distribution's shape and the number of draws consumed.
    """
    k = np.arange(int(min_len), max_len + 1, dtype=np.float64)
    cdf = np.cumsum(k ** -float(gamma))
    cdf /= cdf[-1]
    u = np.random.default_rng(seed).random(batch_size)
    idx = np.minimum(np.searchsorted(cdf, u, side="right"), len(k) - 1)
    return (int(min_len) + idx).astype(np.int64)


def _check_spike(p: dict, max_len: int | None) -> None:
    base = p["base"]
    if base == "spike":
        raise ValueError(
            "length family 'spike': bad value base='spike'; allowed: " + ", ".join(f for f in FAMILIES if f != "spike")
        )
    base_params = {k: v for k, v in p.items() if k not in ("p", "base")}
    allowed = ["p", "base", *family_params(base)]
    for k in base_params:
        if k not in allowed:
            raise ValueError(
                f"length family 'spike' (base {base!r}): unknown param {k!r}; allowed: {', '.join(allowed)}"
            )
    check_family_params(base, base_params, max_len=max_len)


@register_family(
    "spike",
    check=_check_spike,
    open_params=True,
    p=Param(REQUIRED, real(0, 1)),
    base=Param(REQUIRED, one_of(lambda: tuple(f for f in FAMILIES if f != "spike"))),
)
def spike(batch_size: int, max_len: int, seed: int, *, p: float, base: str, **base_params) -> np.ndarray:
    """Capped heavy users: with probability p a length is N, otherwise it comes from `base`.

    Every other parameter goes to the base family, e.g. spike(p=0.02, base="lognormal",
    preset="ml-20m"). Production histories are truncated at N, so the heaviest users pile up at
    exactly N (docs/DESIGN.md §4). The base is drawn with the same seed as on its own, so p = 0 gives `base`.
    """
    lengths = _sample(base, batch_size, max_len, seed, base_params)
    hit = np.random.default_rng([seed, _STREAM_SPIKE]).random(batch_size) < p
    return np.where(hit, max_len, lengths).astype(np.int64)


def _check_empirical(p: dict, max_len: int | None) -> None:
    if p["column"] is not None and p["user_column"] is not None:
        raise ValueError(
            "length family 'empirical': give column (a column of lengths) or user_column "
            "(an interaction log counted per user), not both"
        )


@register_family(
    "empirical",
    check=_check_empirical,
    path=Param(REQUIRED, path_like),
    column=Param(None, optional(text)),
    user_column=Param(None, optional(text)),
)
def empirical(batch_size: int, max_len: int, seed: int, *, path, column=None, user_column=None) -> np.ndarray:
    """Resample (with replacement, seeded) per-user lengths from a user's file.

    Formats (see `workloads.empirical.load_lengths`): a text file of integers; a CSV/Parquet column of
    lengths (`column`); or an interaction log whose rows are counted per user id (`user_column`).
    Zero counts are dropped, counts above N are clipped to N (a truncated history). `path` is taken as
    given (relative: from the current directory); a config loader resolves it first with
    `resolve_family_params(..., base_dir=<the config's folder>)`.
    """
    from workloads.empirical import load_lengths  # lazy: pandas is only needed for this family

    counts = np.minimum(load_lengths(path, column=column, user_column=user_column), max_len)
    idx = np.random.default_rng(seed).integers(0, len(counts), size=batch_size)
    return counts[idx].astype(np.int64)
