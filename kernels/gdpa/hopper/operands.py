"""Tensors as the Hopper kernels take them: CuTe dtypes, operand layout, cached device-side constants."""

from __future__ import annotations

import threading
from collections import OrderedDict

import cutlass
import torch

TORCH_TO_CUTE = {torch.float16: cutlass.Float16, torch.bfloat16: cutlass.BFloat16}

_CONSTANTS: OrderedDict = OrderedDict()  # key -> [tensor, ids of the streams it was recorded on, read by a graph]
_CONSTANTS_MAX = 8
_CONSTANTS_LOCK = threading.Lock()


def filled(device: torch.device, shape: tuple, value: float) -> torch.Tensor:
    """A read-only fp32 tensor of `value`, cached (one fill launch per new (device, shape, value)).

    A cached tensor is read on whatever stream a later call runs on: it is recorded on each new stream once,
    so that when evicted its memory is not handed out again before that stream's kernels have read it (the
    allocator otherwise reuses a block at once on the stream it was made on). Under CUDA-graph capture a cached
    tensor is kept for good (the graph reads its address at every replay), and one not cached yet is made for
    the graph alone and not cached (it is filled only when the graph replays: eager calls would read it
    unfilled). The op-entry review, 2026-12-05."""
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    key = (device, shape, value)
    with _CONSTANTS_LOCK:  # two threads' get / move_to_end / popitem interleaved raise KeyError
        entry = _CONSTANTS.get(key)
        if entry is None:
            if capturing:
                return torch.full(shape, value, dtype=torch.float32, device=device)
            entry = _CONSTANTS[key] = [torch.full(shape, value, dtype=torch.float32, device=device), set(), False]
            unpinned = [k for k, e in _CONSTANTS.items() if not e[2]]
            if len(unpinned) > _CONSTANTS_MAX:
                del _CONSTANTS[unpinned[0]]
        else:
            _CONSTANTS.move_to_end(key)
        t, streams = entry[0], entry[1]
        entry[2] = entry[2] or capturing
        if t.is_cuda and not capturing:
            stream = torch.cuda.current_stream(t.device)
            if stream.cuda_stream not in streams:
                streams.add(stream.cuda_stream)
                t.record_stream(stream)
    return t


def as_kernel_operand(t: torch.Tensor) -> torch.Tensor:
    # the kernels need a unit stride on the head dim and 16-byte aligned rows (TMA)
    return t if t.stride(-1) == 1 and (t.stride(-2) * t.element_size()) % 16 == 0 else t.contiguous()


def cute_dtype(t: torch.Tensor):
    return TORCH_TO_CUTE[t.dtype]
