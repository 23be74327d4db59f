"""A kernel that faults the GPU: which errors leave the process's CUDA context unusable (docs/DESIGN.md §5).

Most kernel errors are the case's own (a bad option, out of memory): the case is `failed` and the next one
runs in the same process. A few CUDA errors are *sticky*: after an illegal memory access, a device-side
assert or an unspecified launch failure every later CUDA call of the process fails with the same error, so
every later case would be recorded `failed` for a fault that is not its own. The runner records the
faulting case `failed` with the error, then ends the sweep with `ContextLost`; the command exits
`EXIT_CONTEXT_LOST`, and the process that started it as a worker (bench.shard.worker) starts a fresh one
that resumes the run folder.
"""

from __future__ import annotations

# CUDA's texts (cudaGetErrorString / cuGetErrorString; torch and Triton quote them) of the errors that
# corrupt the context: CUDA's documentation says of each "the process must be terminated and relaunched".
STICKY_CUDA_ERRORS = (
    "an illegal memory access was encountered",  # cudaErrorIllegalAddress (700)
    "the launch timed out and was terminated",  # cudaErrorLaunchTimeout (702)
    "device-side assert triggered",  # cudaErrorAssert (710)
    "hardware stack error",  # cudaErrorHardwareStackError (714)
    "an illegal instruction was encountered",  # cudaErrorIllegalInstruction (715)
    "misaligned address",  # cudaErrorMisalignedAddress (716)
    "operation not supported on global/shared address space",  # cudaErrorInvalidAddressSpace (717)
    "invalid program counter",  # cudaErrorInvalidPc (718)
    "unspecified launch failure",  # cudaErrorLaunchFailure (719)
    "uncorrectable ECC error encountered",  # cudaErrorECCUncorrectable (214)
)


def is_sticky_cuda_error(exc: BaseException) -> bool:
    """Whether `exc`, or an exception it was raised from, carries one of CUDA's sticky errors."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = str(e).lower()
        if any(s.lower() in text for s in STICKY_CUDA_ERRORS):
            return True
        e = e.__cause__ or e.__context__
    return False


class ContextLost(Exception):
    """The sweep stops: a case faulted the GPU and this process's CUDA context is unusable. The case is
    already recorded `failed`; the cases after it need a fresh process."""

    def __init__(self, case_id: str, error: str):
        super().__init__(f"CUDA context lost at {case_id}: {error}")
        self.case_id, self.error = case_id, error
