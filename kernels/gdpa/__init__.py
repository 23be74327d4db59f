"""GDPA over jagged batches: the public op `gdpa` (interface.py), its options, the backend table
(backends.py: the Triton kernels fwd.py/bwd.py and the Hopper kernel in hopper/), and how a pass picks its
launches (bands.py, plan.py, choice.py)."""

from kernels.gdpa.interface import SUPPORTED_HEAD_DIMS, gdpa
from kernels.gdpa.options import GDPAOptions

__all__ = ["SUPPORTED_HEAD_DIMS", "GDPAOptions", "gdpa"]
