"""How evenly the persistent Hopper forward's static schedule spreads a jagged band over the SMs (a model, no GPU).

The persistent forward (kernels/gdpa/hopper/persistent.py) gives CTA c the tiles c, c + 132, c + 264, … of FA4's
varlen tile order (sequence after sequence in batch order, every query block and head of a sequence together).
A tile of a non-causal self-attention sequence of length L costs about ceil(L/128) key blocks, plus a fixed part
(prologue, epilogue) given in key blocks as `overhead`. This prints each CTA's load against the mean for the
production batches (configs/production.yaml's self-attention sets, seed 0) under three schedules: the static stride
in batch order, a dynamic counter in FA4's order (each CTA takes the next tile when it finishes one), and the static
stride over tiles sorted longest first (FA4's decoder can take such an order through `virtual_batch_idx`:
kernels/gdpa/hopper/longest_first.py since 2026-12-06). Bands: the whole batch (`gdpa_hopper`, and auto's plan on
hstu_sl), [512, inf) and [1024, inf) (the Hopper stage of the split plans).

    PYTHONPATH=. python docs/experiments/persistent_balance.py
"""

from __future__ import annotations

import heapq

import numpy as np

from workloads.pairing import build_lengths

HEADS, TILE, CTAS = 4, 128, 132


def tile_costs(lengths: np.ndarray, lo: int) -> list[int]:
    """Key blocks of every (sequence, query block, head) tile of the band [lo, inf), in FA4's order."""
    costs = []
    for length in lengths:
        if length >= lo:
            blocks = -(-int(length) // TILE)
            costs += [blocks] * (blocks * HEADS)
    return costs


def static_makespan(costs: list[int], overhead: float) -> float:
    load = np.zeros(CTAS)
    for i, cost in enumerate(costs):
        load[i % CTAS] += overhead + cost
    return float(load.max())


def dynamic_makespan(costs: list[int], overhead: float) -> float:
    heap = [0.0] * CTAS
    for cost in costs:
        heapq.heapreplace(heap, heap[0] + overhead + cost)
    return max(heap)


SETS = {  # name -> (family, params, max_len), as configs/production.yaml draws them
    "log-normal 2048": ("lognormal", {"preset": "ml-20m"}, 2048),
    "log-normal 4096": ("lognormal", {"preset": "ml-20m"}, 4096),
    "hstu_sl 4096": ("hstu_sl", {"fill": 0.5, "alpha": 1.7}, 4096),
    "spike 4096": ("spike", {"p": 0.02, "base": "lognormal", "preset": "ml-20m"}, 4096),
}


def main() -> None:
    print("batch                        band        tiles  static  dynamic  longest-first   (max CTA load / mean)")
    for name, (family, params, max_len) in SETS.items():
        for sort in (False, True):
            lengths, _ = build_lengths(family, params, "self", {}, batch_size=1152, max_len=max_len, seed=0, sort=sort)
            for lo in (0, 512, 1024):
                costs = tile_costs(lengths, lo)
                mean = (sum(costs) + len(costs)) / CTAS
                row = [static_makespan(costs, 1.0), dynamic_makespan(costs, 1.0)]
                row.append(static_makespan(sorted(costs, reverse=True), 1.0))
                label = f"{name} {'sorted' if sort else 'unsorted'}"
                band = f"[{lo}, inf)"
                print(f"{label:<28} {band:<11} {len(costs):>6}  " + "  ".join(f"{x / mean:6.3f}" for x in row))


if __name__ == "__main__":
    main()
