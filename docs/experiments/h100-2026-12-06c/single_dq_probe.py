"""Issue 30 probe: the Hopper backward (backend="hopper", as the op runs it through autograd) on uniform B 288, L 2048,
H 4, D 128, bf16, fast_gelu; triton.testing.do_bench (200 ms warmup, 1.5 s). From the repository root on a GPU with
FA4 installed: `python3 docs/experiments/h100-2026-12-06c/single_dq_probe.py LABEL` (single_dq_probe.log: its runs)."""

import sys

import torch
import triton

from kernels.gdpa import GDPAOptions, gdpa

torch.manual_seed(0)
B, L, H, D = 288, 2048, 4, 128
off = torch.arange(0, (B + 1) * L, L, dtype=torch.int32, device="cuda")
q, k, v = (torch.randn(B * L, H, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
out = gdpa(q, k, v, off, off, L, L, options=GDPAOptions(backend="hopper"))
do = torch.randn_like(out)


def backward():
    return torch.autograd.grad(out, (q, k, v), do, retain_graph=True)


backward()
torch.cuda.synchronize()
ms = triton.testing.do_bench(backward, warmup=200, rep=1500)
print(sys.argv[1], "uniform2048 B288 bwd ms", round(ms, 3), torch.cuda.get_device_name())
