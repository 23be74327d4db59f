"""One GDPA call's arguments in one frozen object, handed from the public op to the plan and the backends.

Everything here is known on the host for free — shapes, dtypes, the Python numbers the caller passed —
so building it, and every choice made from it, never reads device memory (no host sync).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def same_offsets(a: torch.Tensor, b: torch.Tensor) -> bool:
    """One offsets tensor passed twice (the same object, or views of the same storage, shape and strides):
    self-attention, told without reading the GPU."""
    return a is b or (
        a.device == b.device and a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
    )


@dataclass(frozen=True)
class GDPACall:
    """q `[ΣLq, H, D]`, k/v `[ΣLk, Hkv, D]`, int32 offsets `[B+1]` and the math of one call."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_offsets: torch.Tensor
    kv_offsets: torch.Tensor
    max_q: int
    max_kv: int
    activation: str = "fast_gelu"
    alpha: float = 1.0
    qk_scale: float = 1.0
    causal: bool = False

    @property
    def batch(self) -> int:
        return self.q_offsets.shape[0] - 1

    @property
    def heads(self) -> int:
        return self.q.shape[1]

    @property
    def heads_kv(self) -> int:
        return self.k.shape[1]

    @property
    def groups(self) -> int:
        return self.q.shape[1] // self.k.shape[1]

    @property
    def head_dim(self) -> int:
        return self.q.shape[2]

    @property
    def rows_q(self) -> int:
        return self.q.shape[0]

    @property
    def rows_kv(self) -> int:
        return self.k.shape[0]

    @property
    def self_attention(self) -> bool:
        """True where queries and keys share one offsets tensor, so Lq == Lk for every sequence. Decided
        by identity (the same storage), never by comparing values, which would read the GPU."""
        return same_offsets(self.q_offsets, self.kv_offsets)

    @property
    def math(self) -> tuple:
        """(activation, alpha, qk_scale, causal), in the order the kernels' launchers take them."""
        return self.activation, self.alpha, self.qk_scale, self.causal

    def with_tensors(self, **tensors) -> GDPACall:
        """This call with some tensors replaced (e.g. -q for a negative alpha), everything else kept."""
        fields = {**self.__dict__, **tensors}
        return GDPACall(**fields)
