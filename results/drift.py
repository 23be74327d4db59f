"""Drift of one case's samples: did its time move while it was measured (docs/DESIGN.md §5)?

The runner records it per case (`drift`, `drift_p`) and `compare` judges a case by it: a Mann-Whitney
test of two runs assumes each sample set is one stationary distribution, and a case whose clock or power
state settled during its samples breaks that.
"""

from __future__ import annotations

import math

import numpy as np

# fewest samples for a drift figure: a tenth of them is then at least two samples
MIN_DRIFT_SAMPLES = 20


def drift(samples) -> tuple[float | None, float | None]:
    """(drift, p) of `samples` in measurement order: drift = (median of the last tenth − median of the
    first tenth) / median of the first tenth; p = two-sided Mann-Whitney U test of the two tenths.
    (None, None) below `MIN_DRIFT_SAMPLES` samples."""
    s = np.asarray(samples, dtype=float)
    if s.size < MIN_DRIFT_SAMPLES:
        return None, None
    from scipy.stats import mannwhitneyu  # noqa: PLC0415  (scipy is slow to import; only runs with >= 20 samples)

    k = s.size // 10
    first, last = s[:k], s[-k:]
    d = (float(np.median(last)) - float(np.median(first))) / float(np.median(first))
    p = float(mannwhitneyu(first, last, alternative="two-sided").pvalue)
    return d, (p if math.isfinite(p) else 1.0)
