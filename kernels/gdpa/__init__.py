"""GDPA over jagged batches: the public op `gdpa`, its options, the Triton kernels (fwd.py, bwd.py) and
the backend dispatch (dispatch.py; the Hopper kernel lives in kernels/gdpa/hopper)."""

from kernels.gdpa.interface import SUPPORTED_HEAD_DIMS, gdpa
from kernels.gdpa.options import GDPAOptions

__all__ = ["SUPPORTED_HEAD_DIMS", "GDPAOptions", "gdpa"]
