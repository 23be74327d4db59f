"""`JaggedBatch`: the tensors one benchmark case runs on, built directly on the target device.

Layout (docs/DESIGN.md §3): q `[ΣLq, H, D]`, k/v `[ΣLk, Hkv, D]`, int32 offsets `[B+1]`. Inputs are drawn from
N(0, 1)/D^¼ so that scores q·k are O(1) whatever D is: large raw scores would saturate or blow up the
activation and make a wrong kernel look right (or a right one look wrong) in bf16.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class JaggedBatch:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    q_offsets: torch.Tensor  # int32 [B+1], on the device of q
    kv_offsets: torch.Tensor  # int32 [B+1]
    q_lengths: np.ndarray  # int64 [B], host copy (no device sync needed to read it)
    kv_lengths: np.ndarray
    max_q: int
    max_kv: int
    dout: torch.Tensor | None = None  # upstream gradient for bwd modes, like q
    extras: dict = field(default_factory=dict)

    def call_args(self) -> tuple:
        """(q, k, v, q_offsets, kv_offsets, max_q, max_kv): the batch as a jagged GDPA entry point takes it."""
        return self.q, self.k, self.v, self.q_offsets, self.kv_offsets, self.max_q, self.max_kv

    @property
    def B(self) -> int:
        return int(self.q_lengths.shape[0])

    @property
    def H(self) -> int:
        return int(self.q.shape[1])

    @property
    def Hkv(self) -> int:
        return int(self.k.shape[1])

    @property
    def D(self) -> int:
        return int(self.q.shape[2])

    @property
    def total_q(self) -> int:
        return int(self.q_lengths.sum())

    @property
    def total_kv(self) -> int:
        return int(self.kv_lengths.sum())

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def dtype(self) -> torch.dtype:
        return self.q.dtype

    def q_rows(self, b: int) -> slice:
        start = int(self.q_offsets_host[b])
        return slice(start, start + int(self.q_lengths[b]))

    def kv_rows(self, b: int) -> slice:
        start = int(self.kv_offsets_host[b])
        return slice(start, start + int(self.kv_lengths[b]))

    @property
    def q_offsets_host(self) -> np.ndarray:
        return _offsets(self.q_lengths)

    @property
    def kv_offsets_host(self) -> np.ndarray:
        return _offsets(self.kv_lengths)

    def with_grad(self) -> JaggedBatch:
        """A copy whose q, k, v are fresh leaves that require grad (same values)."""
        q, k, v = (t.detach().clone().requires_grad_(True) for t in (self.q, self.k, self.v))
        return JaggedBatch(
            q,
            k,
            v,
            self.q_offsets,
            self.kv_offsets,
            self.q_lengths,
            self.kv_lengths,
            self.max_q,
            self.max_kv,
            self.dout,
            dict(self.extras),
        )


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def make_batch(
    q_lengths,
    kv_lengths,
    *,
    H: int,
    Hkv: int | None = None,
    D: int,
    dtype: torch.dtype = torch.bfloat16,
    device: str | torch.device = "cpu",
    seed: int = 0,
    with_dout: bool = True,
    self_attention: bool = False,
) -> JaggedBatch:
    """Random q/k/v (and dout) for the given per-sequence lengths, generated on `device`. `self_attention`:
    the keys are the queries' tokens (equal lengths, required), and the batch holds one offsets tensor for
    both, as a self-attention caller passes it (kernels.gdpa.call.GDPACall.self_attention: the op's packed
    short sequences and band-sized grids need it)."""
    q_lengths = np.asarray(q_lengths, dtype=np.int64)
    kv_lengths = np.asarray(kv_lengths, dtype=np.int64)
    if q_lengths.shape != kv_lengths.shape or q_lengths.ndim != 1:
        raise ValueError("q_lengths and kv_lengths must be 1-D and of the same length (one per sequence)")
    if (q_lengths < 0).any() or (kv_lengths < 0).any():
        raise ValueError("sequence lengths must be >= 0")
    Hkv = H if Hkv is None else Hkv
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed))
    scale = D**-0.25

    def randn(rows: int, heads: int) -> torch.Tensor:
        # generate in fp32 then cast: the same values for every dtype at a given seed
        t = torch.randn(rows, heads, D, generator=gen, device=device, dtype=torch.float32)
        return t.mul_(scale).to(dtype)  # in place: one fp32 copy at a time (bench.config.resources.batch_need)

    total_q, total_kv = int(q_lengths.sum()), int(kv_lengths.sum())
    q = randn(total_q, H)
    k = randn(total_kv, Hkv)
    v = randn(total_kv, Hkv)
    dout = None
    if with_dout:
        dout = torch.randn(total_q, H, D, generator=gen, device=device, dtype=torch.float32).to(dtype)
    q_off = torch.from_numpy(_offsets(q_lengths).astype(np.int32)).to(device)
    if self_attention:
        if not np.array_equal(np.asarray(q_lengths), np.asarray(kv_lengths)):
            raise ValueError("self_attention: the query and key lengths must be equal, sequence by sequence")
        kv_off = q_off
    else:
        kv_off = torch.from_numpy(_offsets(kv_lengths).astype(np.int32)).to(device)
    return JaggedBatch(
        q,
        k,
        v,
        q_off,
        kv_off,
        q_lengths,
        kv_lengths,
        int(q_lengths.max(initial=0)),
        int(kv_lengths.max(initial=0)),
        dout,
    )
