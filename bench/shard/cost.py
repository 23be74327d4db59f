"""The cost model of a sweep: estimated wall seconds per case, used to balance shards (bench.shard.plan)
and to estimate a run's time (`bench list`). Only the ratios between cases matter for the balance; the
absolute figures are a rough guide (docs/DESIGN.md §10).
"""

from __future__ import annotations

from bench.config.cases import Case, Workload
from bench.config.profiling import profiling_cost
from results.figures import case_flops
from workloads import work_pairs
from workloads.bands import band_table, edges_for

# Nominal rates that turn FLOPs into seconds: an attention kernel on a datacenter GPU, the Triton
# interpreter / eager PyTorch on a CPU.
NOMINAL_FLOPS_PER_S = {"cuda": 100e12, "cpu": 1e9}
SETUP_S = 0.25  # per case: provider lookup, support check, allocation, bookkeeping
# Providers whose kernels run through the Triton interpreter on a CPU, where the FLOP rate says nothing:
# a call costs ~0.15 s of launch overhead plus FLOPs at ~3 MFLOP/s: fitted to configs/smoke.yaml's 43 s on an
# idle 2-core VM (issue 25; `list` said 11 s before); the same run took 165 s on that VM under load.
INTERPRETED_ON_CPU = ("gdpa", "gdpa_triton")
INTERPRETER_CALL_S, INTERPRETER_FLOPS_PER_S = 0.15, 3e6

_pairs_cache: dict[tuple, float] = {}


def workload_pairs(w: Workload) -> float:
    """Σ Lq·Lk (unmasked pairs) of a workload, from its deterministic lengths; B·maxL² if they cannot be
    built here (e.g. an empirical file that only exists on the cluster)."""
    key = (w.name, w.B, w.seed, w.max_len)
    if key not in _pairs_cache:
        try:
            q, kv = w.lengths()
            _pairs_cache[key] = float(work_pairs(q, kv, causal=w.causal).sum())
        except Exception:
            _pairs_cache[key] = float(w.B) * w.max_len * w.max_len
    return _pairs_cache[key]


def case_flops_estimate(case: Case) -> float:
    """The runner's FLOP count of a case (the peers' convention: results.figures.case_flops)."""
    w = case.workload
    return case_flops(w.H, w.D, workload_pairs(w), case.mode)


def case_cost(case: Case, model=None) -> float:
    """Estimated wall seconds of one case in the runner.

    Timing budgets are per case, so a small case costs its budgets (warmup_ms + rep_ms, the ≥ 1 s
    energy loop and its settle pre-roll on a GPU with power on) whatever its FLOPs, while a big one costs
    its calls: FLOPs at a nominal rate × (correctness + first call + warmup + min_reps).
    """
    device = getattr(model, "device", "cuda") if model is not None else "cuda"
    flops = case_flops_estimate(case)
    call_s = flops / NOMINAL_FLOPS_PER_S.get(device, NOMINAL_FLOPS_PER_S["cuda"])
    if device == "cpu" and case.provider.name in INTERPRETED_ON_CPU:
        call_s = INTERPRETER_CALL_S + flops / INTERPRETER_FLOPS_PER_S
    if model is None:
        return SETUP_S + 0.125 + 8 * call_s
    t = model.timing
    cost = SETUP_S + call_s  # the untimed first call (compile / autotune / allocate)
    if model.correctness.enabled:
        cost += call_s
    cost += max(t.warmup_ms / 1e3, call_s)
    cost += max(min(t.rep_ms / 1e3, t.max_reps * call_s), t.min_reps * call_s)
    p = model.power
    if device == "cuda" and p.enabled and p.energy_loop_s > 0:
        cost += max(p.energy_loop_s, call_s) + (max(p.settle_s, call_s) if p.settle_s > 0 else 0.0)
    return cost + profiling_cost(case.id, lambda: bands_of_case(case, model), model, call_s, device)


def bands_of_case(case: Case, model) -> int:
    """The non-empty length bands of a case's batch (at the config's edges, else the default ones)."""
    q, kv = case.workload.lengths()
    return sum(1 for r in band_table(q, kv, edges_for(q, kv, model.bands.edges)) if r["n_seqs"])
