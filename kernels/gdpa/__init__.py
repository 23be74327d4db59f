"""Our GDPA Triton kernels (forward + backward) and their autograd op."""
from kernels.gdpa.interface import SUPPORTED_HEAD_DIMS, gdpa

__all__ = ["gdpa", "SUPPORTED_HEAD_DIMS"]
