"""Every figure a case is judged by, each computed here once: FLOPs, TFLOP/s, utilization, energy per call,
TFLOP/s per watt, compulsory bytes and arithmetic intensity (docs/DESIGN.md §3, §5). The runner records
them through these functions and the results frame fills them through the same ones for runs that lack
them; nothing recounts.

- FLOPs (the peers' convention): fwd = 4·H·D·Σ unmasked (q, k) pairs; bwd 2.5×, fwd_bwd 3.5×.
- TFLOP/s = flops / (median_ms · 1e-3) / 1e12.
- Utilization is a fraction (0..1): achieved TFLOP/s over a ceiling — the datasheet dense peak of the
  case's dtype (`meta.peak_tflops[dtype]`) or the GEMM ceiling measured in the same run
  (`meta.measured_gemm_tflops`, a number or a {dtype: number} mapping).
- Energy per call = average W · median_ms / 1000 (the runner's energy loop records it from the counter).
- GPU idle share of a call = 1 − kernel time / the call's event time (≥ 0; the breakdown judges it against
  the event-timed median of its own pass); above 10% the call is `host_bound`: the host, not the GPU, sets
  its time; kernel time / event time in [0.95, 1.05] is `accounted`, in [0.90, 0.95) `launch gaps`
  (`accounting`, docs/DESIGN.md §5).
- `min_bytes`: the compulsory HBM traffic of a case (each input read once, each output written once).
  With Q = total_q·H·D and K = total_kv·Hkv·D elements, elem = 2 bytes (bf16/fp16) or 4 (fp32):
    fwd:      read q, k, v; write o                           -> elem · (2Q + 2K)
    bwd:      read q, k, v, dout; write dq, dk, dv            -> elem · (3Q + 4K)
    fwd_bwd:  the sum of both                                 -> elem · (5Q + 6K)
  The backward count leaves out o (and the softmax LSE): GDPA's backward does not need o (there is no
  rowsum(dO∘O) term without a softmax), and one convention for every provider keeps the roofline
  comparable. The softmax backward reads o and a [ΣLq, H] fp32 LSE on top, a few % more bytes.
  Arithmetic intensity = flops / min_bytes (FLOP per byte); the bandwidth roof is then
  TB/s · intensity = TFLOP/s.

A figure whose inputs are unknown (None, not a number, a ceiling ≤ 0) is NaN: the report shows "—" and
results.json `null`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from kernels.modes import MODES

FLOP_FACTOR = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}
ELEM_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "bfloat16": 2, "float16": 2, "float32": 4}


def number(x: Any) -> float:
    """A float, or NaN for None / non-numbers / bools."""
    if x is None or isinstance(x, bool):
        return math.nan
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def case_flops(H: int, D: int, work_pairs: float, mode: str) -> float:
    """The peers' convention: fwd = 4·H·D·Σ pairs (causal: the unmasked pairs); bwd 2.5×, fwd_bwd 3.5×."""
    return 4.0 * H * D * float(work_pairs) * FLOP_FACTOR[mode]


def tflops(flops: Any, ms: Any) -> Any:
    """Achieved TFLOP/s of `flops` done in `ms` milliseconds (NaN when unknown or ms ≤ 0).

    Scalars give a float; arrays/Series give a 1-D float array."""
    f, m = _float_array(flops), _float_array(ms)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(m > 0, f / (m * 1e-3) / 1e12, np.nan)
    if np.ndim(flops) == 0 and np.ndim(ms) == 0:
        return float(out[0])
    return out


def _float_array(x: Any) -> np.ndarray:
    """1-D float array; None and non-numbers become NaN."""
    arr = np.atleast_1d(np.asarray(x, dtype=object)).ravel()
    return pd.to_numeric(pd.Series(arr), errors="coerce").to_numpy(dtype=float)


def utilization(achieved_tflops: Any, ceiling_tflops: Any) -> float:
    """achieved / ceiling as a fraction; NaN when either is unknown or the ceiling is not positive."""
    a, c = number(achieved_tflops), number(ceiling_tflops)
    if math.isnan(a) or math.isnan(c) or c <= 0:
        return math.nan
    return a / c


def energy_per_call(avg_w: Any, ms: Any) -> float:
    """Joules per call from average power (W) and time per call (ms)."""
    w, m = number(avg_w), number(ms)
    if math.isnan(w) or math.isnan(m):
        return math.nan
    return w * m / 1000.0


def tflops_per_watt(achieved_tflops: Any, avg_w: Any) -> float:
    a, w = number(achieved_tflops), number(avg_w)
    if math.isnan(a) or math.isnan(w) or w <= 0:
        return math.nan
    return a / w


HOST_BOUND_IDLE = 0.10  # GPU idle above this share of the timed call: host-bound


def judged_kernel_ms(kernels: dict) -> float | None:
    """The kernel time per call a breakdown is judged by: that of the very calls its pass timed with events
    (`pass_sum_ms`, GPU), else the counted calls' (`sum_ms`: a CPU run, or a record from before the pass kept
    its own calls' kernels)."""
    k = kernels.get("pass_sum_ms")
    return k if k is not None else kernels.get("sum_ms")


def idle_share(kernel_ms: Any, median_ms: Any) -> float:
    """The share of a timed call the GPU ran none of its kernels: 1 − kernel_ms / median_ms, at least 0
    (kernels on several streams can overlap past the median); NaN when unknown."""
    k, m = number(kernel_ms), number(median_ms)
    if not (math.isfinite(k) and math.isfinite(m) and m > 0):
        return math.nan
    return max(0.0, 1.0 - k / m)


def host_bound(kernel_ms: Any, median_ms: Any) -> bool | None:
    """The GPU idle more than HOST_BOUND_IDLE of the call; None when unknown."""
    idle = idle_share(kernel_ms, median_ms)
    return None if math.isnan(idle) else bool(idle > HOST_BOUND_IDLE)


ACCOUNTED = (0.95, 1.05)  # kernel sum / the call's event time within this: the call's time is its kernels'
ACCOUNTING = ("accounted", "launch gaps", "host-bound", "kernels over the call")


def accounting(kernel_ms: Any, call_ms: Any) -> str | None:
    """What kernel sum / the call's event time (both from one profiler pass: docs/DESIGN.md §5) says: in
    ACCOUNTED, `accounted`; below it down to 1 − HOST_BOUND_IDLE, `launch gaps` (the GPU idles 5–10% of the
    call between its kernels: launch latency and host work between kernels, neither host-bound nor fully
    accounted); below that `host-bound`; above ACCOUNTED, `kernels over the call` (kernels overlapping on
    several streams, or kernels the pass placed in the wrong call). None when unknown."""
    k, m = number(kernel_ms), number(call_ms)
    if not (math.isfinite(k) and math.isfinite(m) and m > 0):
        return None
    r = k / m
    if r > ACCOUNTED[1]:
        return ACCOUNTING[3]
    if r >= ACCOUNTED[0]:
        return ACCOUNTING[0]
    return ACCOUNTING[1] if r >= 1.0 - HOST_BOUND_IDLE else ACCOUNTING[2]


def ceiling_for(value: Any, dtype: str | None) -> float:
    """A ceiling for `dtype` from a number or a {dtype: number} mapping (NaN when unknown)."""
    if isinstance(value, dict):
        return number(value.get(dtype)) if dtype is not None else math.nan
    return number(value)


def field(case: Any, dotted: str) -> Any:
    """A field from a nested case dict or a flattened row (Series / dict with dotted keys)."""
    if isinstance(case, pd.Series):
        case = case.to_dict()
    if not isinstance(case, dict):
        return None
    if dotted in case:
        return case[dotted]
    cur: Any = case
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def min_bytes(case: Any) -> float:
    """The fewest HBM bytes `case` must move (see the module docstring); NaN when sizes are unknown.

    `case` is a case dict as in results.json or a flattened row of the results frame."""
    dtype = field(case, "dtype")
    elem = ELEM_BYTES.get(str(dtype)) if dtype is not None else None
    H, Hkv, D = (number(field(case, f"workload.{k}")) for k in ("H", "Hkv", "D"))
    tq, tkv = number(field(case, "workload.total_q")), number(field(case, "workload.total_kv"))
    if math.isnan(Hkv):
        Hkv = H
    mode = field(case, "mode")
    if elem is None or any(math.isnan(v) for v in (H, Hkv, D, tq, tkv)) or mode not in MODES:
        return math.nan
    q = tq * H * D
    kv = tkv * Hkv * D
    fwd = 2 * q + 2 * kv
    bwd = 3 * q + 4 * kv
    total = {"fwd": fwd, "bwd": bwd, "fwd_bwd": fwd + bwd}[mode]
    return float(elem * total)


def intensity(flops: Any, nbytes: Any) -> float:
    """Arithmetic intensity in FLOP/byte."""
    f, b = number(flops), number(nbytes)
    if math.isnan(f) or math.isnan(b) or b <= 0:
        return math.nan
    return f / b


def speedup_vs_baseline(cases: pd.DataFrame, baseline: str | None) -> pd.Series:
    """Per case of a results frame, median_ms(the baseline on the same shape) / median_ms: the time ratio
    (> 1: faster than the baseline; same FLOPs, so also the TFLOP/s ratio). NaN when the baseline is
    unknown, missing for that shape, or either side is not ok; the baseline's own ok rows get 1.0."""
    out = pd.Series(np.nan, index=cases.index, dtype=float)
    if not baseline or cases.empty:
        return out
    ok = (cases["status"] == "ok") & (cases["median_ms"] > 0)
    base = cases[ok & (cases["provider"] == baseline)].groupby("shape")["median_ms"].min()
    for i, r in cases[ok].iterrows():
        b = base.get(r["shape"])
        if b is not None and b == b:
            out.at[i] = float(b) / float(r["median_ms"])
    return out
