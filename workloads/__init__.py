"""Jagged workloads: length distributions, Q/KV pairing rules, batches and their statistics.

q, k = build_lengths("uniform_fill", {"fill": 0.5}, "fixed_kv", {"kv_len": 256},
                     batch_size=1152, max_len=1024, seed=0)
length_stats(q, k)  ->  dict of STATS_KEYS;  make_batch(q, k, H=4, D=128, device="cuda")
check_workload(family, params, rule, rule_params, batch_size=..., max_len=..., seed=..., base_dir=...)
    -> the same lengths, or a one-line ValueError (a config loader calls it for every workload)

"""

from workloads.batch import JaggedBatch, make_batch
from workloads.empirical import LengthsFileError, load_lengths
from workloads.lengths import (
    FAMILIES,
    LOGNORMAL_PRESETS,
    check_family_params,
    family_params,
    register_family,
    resolve_family_params,
    sample_lengths,
)
from workloads.pairing import (
    MAX_LEN,
    PAIRINGS,
    build_lengths,
    check_pairing_params,
    check_workload,
    pair_lengths,
    pairing_params,
    register_pairing,
    resolve_pairing_params,
    sort_by_length,
)
from workloads.params import REQUIRED, Param
from workloads.plot import plot_length_histogram
from workloads.stats import STATS_KEYS, length_stats, lengths_sha256, work_pairs

__all__ = [
    "FAMILIES",
    "LOGNORMAL_PRESETS",
    "MAX_LEN",
    "PAIRINGS",
    "REQUIRED",
    "STATS_KEYS",
    "JaggedBatch",
    "LengthsFileError",
    "Param",
    "build_lengths",
    "check_family_params",
    "check_pairing_params",
    "check_workload",
    "family_params",
    "length_stats",
    "lengths_sha256",
    "load_lengths",
    "make_batch",
    "pair_lengths",
    "pairing_params",
    "plot_length_histogram",
    "register_family",
    "register_pairing",
    "resolve_family_params",
    "resolve_pairing_params",
    "sample_lengths",
    "sort_by_length",
    "work_pairs",
]
