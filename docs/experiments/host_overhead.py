"""Host time of the public op's own Python (argument checks, the call record, the plan lookup, autograd),
with the backends' launches replaced by a stub: what `gdpa(...)` costs the CPU before any kernel is
enqueued. It matters where a batch's GPU work is shorter than that (a band of short sequences, a small
batch): there the call is host-bound and its time is this plus the launches.

    PYTHONPATH=. python docs/experiments/host_overhead.py [--calls 5000] [--forward-only]

Runs on any machine (no GPU needed: nothing is launched); prints µs per call, forward under no_grad and
forward + backward under autograd, for the issue-22 short band (846 sequences, max 127, H 4, D 128).
"""

import argparse
import time
import types

import torch

from bench.case.device import use_interpreter_without_gpu

use_interpreter_without_gpu()  # the plan checks that Triton can run; nothing is launched (stub_backends)

from kernels.gdpa import backends, choice  # noqa: E402  (after the interpreter is chosen)
from kernels.gdpa.interface import gdpa  # noqa: E402


def stub_backends() -> None:
    def forward(call, band, options, out=None, record=None):
        return out if out is not None else torch.empty_like(call.q)

    def backward(call, do, band, options, out=None, record=None):
        return (
            out if out is not None else (torch.empty_like(call.q), torch.empty_like(call.k), torch.empty_like(call.v))
        )

    fake = types.SimpleNamespace(forward=forward, backward=backward)
    backends.module = lambda name: fake


def per_call_us(fn, calls: int) -> float:
    for _ in range(min(200, calls)):
        fn()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--forward-only", action="store_true")
    args = ap.parse_args()
    stub_backends()
    choice.forget()
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 128, (846,), generator=g)
    offsets = torch.zeros(847, dtype=torch.int32)
    offsets[1:] = torch.cumsum(lengths, 0)
    q = torch.randn(int(offsets[-1]), 4, 128, dtype=torch.float16, generator=g)
    leaves = [q.clone().requires_grad_(True) for _ in range(3)]
    do = torch.randn_like(q)

    def fwd():
        with torch.no_grad():
            return gdpa(q, q, q, offsets, offsets, 127, 127)

    def fwd_bwd():
        out = gdpa(*leaves, offsets, offsets, 127, 127)
        return torch.autograd.grad(out, leaves, do)

    print(f"fwd (no_grad): {per_call_us(fwd, args.calls):.1f} µs per call")
    if not args.forward_only:
        print(f"fwd + bwd (autograd): {per_call_us(fwd_bwd, args.calls // 5):.1f} µs per call")


if __name__ == "__main__":
    main()
