"""Test-only providers whose Triton kernels really fault or hang the GPU (tests/test_faults_gpu.py; name this
module in GDPA_BENCH_PROVIDERS, with tests/ on PYTHONPATH).

`test_oob_store` is naive_eager, except on the case whose longest sequence is its option `fault_at`: there
it first launches a one-program Triton kernel that stores 1 PiB past a one-element buffer, outside any
mapping. The GPU raises an illegal memory access, a sticky error: the process's CUDA context is lost.

`test_spin_hang` is naive_eager, except on the case whose longest sequence is its option `hang_at`: there
it launches a one-program Triton kernel that spins on a flag nobody sets (an atomic read, so the loop
cannot be optimized away), as a warp-specialized pipeline waits on a barrier that never arrives, and
synchronizes: the call never returns. Only killing the process ends it (bench.case.watchdog).
"""

import torch
import triton
import triton.language as tl

from kernels.naive import NaiveEager
from kernels.registry import register

FAR = 1 << 48  # fp32 elements past the buffer: 1 PiB, beyond any mapping (the GPU's and the host's address space)


@triton.jit
def store_far(ptr, offset):
    tl.store(ptr + offset, 1.0)


@register
class OutOfBoundsStore(NaiveEager):
    name = "test_oob_store"
    description = "naive_eager that faults the GPU (out-of-bounds Triton store) at max length `fault_at` (tests)"

    def parse_options(self, options: dict):
        if set(options) != {"fault_at"} or not isinstance(options["fault_at"], int):
            raise ValueError(f"{self.name}: takes one option, fault_at (an integer max length)")
        return dict(options)

    def availability(self, device: torch.device) -> str | None:
        return None if device.type == "cuda" else "needs a CUDA GPU: its fault is a real one"

    def forward(self, batch, spec):
        if batch.max_q == self.options["fault_at"]:
            buf = torch.zeros(1, device=batch.device, dtype=torch.float32)
            store_far[(1,)](buf, FAR)
            torch.cuda.synchronize(batch.device)  # the fault surfaces here: CUDA reports it at the next call
        return super().forward(batch, spec)


@triton.jit
def spin_on(flag_ptr):
    while tl.atomic_add(flag_ptr, 0) == 0:  # the flag is never set: the program never ends
        pass


@register
class SpinHang(NaiveEager):
    name = "test_spin_hang"
    description = "naive_eager whose Triton kernel spins forever at max length `hang_at` (tests)"

    def parse_options(self, options: dict):
        if set(options) != {"hang_at"} or not isinstance(options["hang_at"], int):
            raise ValueError(f"{self.name}: takes one option, hang_at (an integer max length)")
        return dict(options)

    def availability(self, device: torch.device) -> str | None:
        return None if device.type == "cuda" else "needs a CUDA GPU: its hang is a real one"

    def forward(self, batch, spec):
        if batch.max_q == self.options["hang_at"]:
            flag = torch.zeros(1, device=batch.device, dtype=torch.int32)
            spin_on[(1,)](flag)
            torch.cuda.synchronize(batch.device)  # never returns
        return super().forward(batch, spec)
