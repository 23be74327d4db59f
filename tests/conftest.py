"""Shared test setup. Without a GPU the Triton kernels run through the interpreter, which must be chosen
before any kernel module is imported (triton.jit reads TRITON_INTERPRET at decoration time)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
