"""The Triton GDPA kernels (fwd.py, bwd.py) as a row of the backend table (backends.py).

They run every call the op accepts (every activation, head dims 16–128, fp16/bf16/fp32, GQA, causal), on
any CUDA GPU Triton supports and on the CPU through Triton's interpreter; the table falls back to them.
"""

from __future__ import annotations

import torch

from kernels.gdpa import bwd, fwd
from kernels.gdpa.bands import Band
from kernels.gdpa.call import GDPACall


def unavailable(device) -> str | None:
    import triton

    if torch.device(device).type == "cpu" and not triton.knobs.runtime.interpret:
        return "on CPU the Triton kernels need the interpreter: set TRITON_INTERPRET=1"
    return None


def unsupported(call: GDPACall) -> str | None:
    return None  # the op's argument checks (interface.check_arguments) are this backend's limits


def forward(call: GDPACall, band: Band, options, out=None, record=None):
    return fwd.forward(call, band, tiles=options.fwd_tiles, out=out, record=record)


def backward(call: GDPACall, do, band: Band, options, out=None, record=None):
    return bwd.backward(call, do, band, options.dkdv_tiles, options.dq_tiles, out=out, record=record)
