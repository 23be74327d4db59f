"""The modes a case times and the two semantics a provider computes: plain names, no torch.

They live apart from kernels.registry (which imports torch) because the results contract, the report and
the commands that only read results (`compare`, `fields`, `--version`) need them and must start without
torch (~3 s).
"""

from __future__ import annotations

MODES = ("fwd", "bwd", "fwd_bwd")
SEMANTICS = ("gdpa", "softmax")
