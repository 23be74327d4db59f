"""The CI gate's input check: every field `compare` reads, checked before anything is compared (a gate
that read a malformed file as "nothing slower" would pass anything). One-line `ResultsError`s naming the
file, the case and the field, and what is allowed."""

from __future__ import annotations

import math
from typing import Any

from kernels.modes import MODES
from results.files import STATUSES, ResultsError


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(float(x))


def short(x: Any, limit: int = 40) -> str:
    r = repr(x)
    return r if len(r) <= limit else r[: limit - 3] + "..."


def check_results(data: Any, where: str) -> dict[str, dict]:
    """The cases of one results document by id, after checking every field the gate reads.

    `data`: a results dict (schema, meta, cases) or a bare list of case dicts. Raises `ResultsError` with
    one line naming `where` (the file), the case and the field, and what is allowed."""
    if isinstance(data, dict):
        meta = data.get("meta")
        # reports' reader turns a missing/null meta into {}; the runner always writes a filled one
        if not isinstance(meta, dict) or not meta:
            raise ResultsError(
                f"{where}: meta: missing, null or empty (got {short(meta)}); allowed: the object "
                f"the runner writes (gpu, git_sha, started_at, ...)"
            )
        cases = data.get("cases")
    elif isinstance(data, list):
        cases = data
    else:
        raise ResultsError(f"{where}: expected a results object, got {type(data).__name__}")
    if not isinstance(cases, list):
        raise ResultsError(f"{where}: cases: expected a list of case objects, got {type(cases).__name__}")
    out: dict[str, dict] = {}
    for i, c in enumerate(cases):
        at = f"{where}: cases[{i}]"
        if not isinstance(c, dict):
            raise ResultsError(f"{at}: expected a case object, got {short(c)}")
        cid = c.get("id")
        if not isinstance(cid, str) or not cid:
            raise ResultsError(f"{at}: id: missing or not a string (got {short(cid)}); allowed: the case id")
        at = f"{at} ({cid})"
        if cid in out:
            first = next(j for j, x in enumerate(cases) if isinstance(x, dict) and x.get("id") == cid)
            raise ResultsError(f"{at}: id: the same id as cases[{first}]; allowed: each case once")
        _check_case(c, at)
        out[cid] = c
    return out


def _check_case(c: dict, at: str) -> None:
    _check_id_fields(c, at)
    st = c.get("status")
    if st not in STATUSES:
        what = "missing" if "status" not in c else short(st)
        raise ResultsError(f"{at}: status: {what}; allowed: {', '.join(STATUSES)}")
    t = c.get("times_ms")
    if t is not None:
        if not isinstance(t, list):
            raise ResultsError(f"{at}: times_ms: {short(t)} is not a list; allowed: a list of times in ms (> 0)")
        for j, x in enumerate(t):
            if not is_number(x) or x <= 0:
                raise ResultsError(
                    f"{at}: times_ms[{j}]: {short(x)} is not a time; allowed: finite numbers > 0 (milliseconds)"
                )
    m = c.get("median_ms")
    if m is not None and (not is_number(m) or m <= 0):
        raise ResultsError(f"{at}: median_ms: {short(m)}; allowed: a number > 0 (milliseconds) or null")
    if st == "ok" and not t and m is None:
        raise ResultsError(
            f"{at}: status 'ok' but no timing: times_ms empty or missing and median_ms missing; "
            f"allowed: an ok case carries its samples"
        )
    clk = c.get("sm_clock_mhz")
    if clk is not None and (not is_number(clk) or clk <= 0):
        raise ResultsError(f"{at}: sm_clock_mhz: {short(clk)}; allowed: a number > 0 (MHz) or null")
    p = c.get("power")
    if p is not None:
        if not isinstance(p, dict):
            raise ResultsError(f"{at}: power: {short(p)}; allowed: an object or null")
        clk = p.get("sm_clock_mhz_median")
        if clk is not None and (not is_number(clk) or clk <= 0):
            raise ResultsError(f"{at}: power.sm_clock_mhz_median: {short(clk)}; allowed: a number > 0 (MHz) or null")


def _check_id_fields(c: dict, at: str) -> None:
    """A case's `mode` and `provider`, when recorded, are what its id says (`set/mode/.../label`): a case
    whose fields contradict its id would be compared against the wrong one."""
    parts = c["id"].split("/")
    mode = c.get("mode")
    if mode is not None and (mode not in MODES or len(parts) < 3 or parts[1] != mode):
        raise ResultsError(
            f"{at}: mode: {short(mode)} contradicts the id (its second part is {short(parts[1:2])}); allowed: "
            f"the id's mode, one of {', '.join(MODES)}"
        )
    label = c.get("provider")
    if label is not None and (not isinstance(label, str) or parts[-1] != label):
        raise ResultsError(
            f"{at}: provider: {short(label)} contradicts the id (its last part is {short(parts[-1])}); allowed: "
            "the id's provider label"
        )


# meta figures the report draws with: {dtype: TFLOP/s} mappings (or one number) and plain numbers
_CEILINGS = ("peak_tflops", "measured_gemm_tflops")
_NUMBERS = ("hbm_tb_s", "measured_copy_tb_s", "power_cap_w", "enforced_power_limit_w")
_TEXTS = ("gpu", "device", "config", "config_name", "git_sha")  # names the report's title and tables print


def check_report_fields(data: dict, where: str) -> None:
    """The fields the report reads beyond the cases (`check_results`), checked the same way before anything
    is drawn: a `meta.peak_tflops` of text was drawn as a plot warning and exit 0. Raises `ResultsError`
    (one line naming the file and the field)."""
    meta = data.get("meta") or {}
    for key in _CEILINGS:
        v = meta.get(key)
        items = v.items() if isinstance(v, dict) else [(None, v)]
        for dtype, x in items:
            if x is not None and (not is_number(x) or x < 0):
                at = f"meta.{key}" + (f".{dtype}" if dtype is not None else "")
                raise ResultsError(
                    f"{where}: {at}: {short(x)}; allowed: a number ≥ 0 (TFLOP/s) or null"
                    + ("" if dtype is not None else ", or a {dtype: number} mapping")
                )
    for key in _NUMBERS:
        x = meta.get(key)
        if x is not None and (not is_number(x) or x < 0):
            raise ResultsError(f"{where}: meta.{key}: {short(x)}; allowed: a number ≥ 0 or null")
    for key in _TEXTS:
        x = meta.get(key)
        if x is not None and not isinstance(x, str):
            raise ResultsError(f"{where}: meta.{key}: {short(x)}; allowed: a text or null")
    workloads = data.get("workloads") or {}
    for name, w in workloads.items():
        at = f"{where}: workloads[{name!r}]"
        if not isinstance(w, dict):
            raise ResultsError(f"{at}: {short(w)}; allowed: an object (q_lengths, kv_lengths, stats, ...)")
        for key in ("q_lengths", "kv_lengths"):
            lengths = w.get(key)
            if lengths is None:
                continue
            if not isinstance(lengths, list):
                raise ResultsError(
                    f"{at}.{key}: {short(lengths)} is not a list; allowed: a list of lengths (integers ≥ 0)"
                )
            for j, x in enumerate(lengths):
                if x is not None and (not isinstance(x, int) or isinstance(x, bool) or x < 0):
                    raise ResultsError(f"{at}.{key}[{j}]: {short(x)}; allowed: a length (an integer ≥ 0)")
        if w.get("stats") is not None and not isinstance(w["stats"], dict):
            raise ResultsError(f"{at}.stats: {short(w['stats'])}; allowed: an object of statistics or null")


# what makes two cases of one id the same measurement: their batch and math (a config edited under one id
# would otherwise be gated against the old one's figures)
_SAME_WORK = ("B", "H", "Hkv", "D", "causal", "alpha", "qk_scale", "lengths_sha256")
_SAME_CASE = ("activation", "dtype", "semantics")


def work_differs(base: dict[str, dict], current: dict[str, dict]) -> str | None:
    """The first case id both runs hold whose batch or math differ, said as `id: field a vs b`; None when every
    shared case is the same work (fields a run does not record are not compared: older runs)."""
    for cid in base.keys() & current.keys():
        b, c = base[cid], current[cid]
        pairs = [(f, b.get(f), c.get(f)) for f in _SAME_CASE]
        bw, cw = b.get("workload"), c.get("workload")
        if isinstance(bw, dict) and isinstance(cw, dict):
            pairs += [(f"workload.{f}", bw.get(f), cw.get(f)) for f in _SAME_WORK]
        for field, x, y in pairs:
            if x is not None and y is not None and x != y:
                return f"{cid}: {field} {short(x)} in the baseline, {short(y)} here"
    return None
