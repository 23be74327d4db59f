"""What PyTorch's FlashAttention-2 kernels take: SDPA's flash backend and `varlen_attn` run the same aten
kernels, so the providers built on them (kernels.sdpa, kernels.torch_varlen) refuse the same shapes, with
the same reason."""

from __future__ import annotations

import torch

from workloads.batch import JaggedBatch

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256


def shape_reason(batch: JaggedBatch, kernel: str) -> str | None:
    """None when `kernel` (how the reason names it) takes the batch's dtype, head dim and head counts."""
    if batch.dtype not in SUPPORTED_DTYPES:
        return f"{kernel} runs fp16/bf16 only, not {str(batch.dtype).replace('torch.', '')}"
    if batch.D % 8 != 0 or batch.D > MAX_HEAD_DIM:
        return f"head dim {batch.D} not supported (needs a multiple of 8, at most {MAX_HEAD_DIM})"
    if batch.H % batch.Hkv != 0:
        return f"H={batch.H} is not a multiple of Hkv={batch.Hkv}"
    return None
