"""`hstu`: HSTU's Triton attention, `triton_hstu_mha` of meta-recsys/generative-recommenders
(generative_recommenders/ops/triton/triton_hstu_attention.py, Apache-2.0), imported from the user's
checkout (kernels/peer_checkout.py: option `path`, the installed package `generative_recommenders`, or
`.peers/generative-recommenders`). Forward and backward go through its autograd function.

HSTU's math, mapped exactly onto GDPA (sources at db1bf8f):

    qk = alpha · q·kᵀ                                  (triton_hstu_attention.py:412-415)
    keep key n for query m iff n ≤ m (diagonal kept)    (:416, :445 — our causal: top-left, j ≤ i)
    p = silu(qk) · (1 / N)                              (:452-453, N = its argument MAX_SEQ_LEN)
    O = p · v

So an HSTU case is a GDPA case with activation `silu`, the same `alpha`, `causal: true` and
`qk_scale = 1/N`. N is not the batch's longest sequence but the caller's `max_seq_len`, an upper bound
on every length (HSTU's own test passes max_uih_len + max_targets + contextual_seq_len,
ops/tests/hstu_attention_test.py:76): the provider reads N back from the case, N = 1/qk_scale, and the
case is unsupported unless that N is an integer at least the longest sequence. A config writes it per
max length, e.g. `max_len: 1024, qk_scale: 0.0009765625` (configs/peers-h200.yaml). HSTU is causal
self-attention only (ops/hstu_attention.py:128 asserts causal; q, k, v share seq_offsets): other cases
are unsupported with the reason. HSTU models use alpha = 1/sqrt(attention dim) (modules/stu.py:199).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from kernels import peer_checkout as pc
from kernels.registry import TRITON_AUTOTUNE_BYTES, CaseSpec, register
from workloads.batch import JaggedBatch

PEER = pc.Peer(
    key="generative-recommenders",
    title="HSTU (meta-recsys/generative-recommenders)",
    url="https://github.com/meta-recsys/generative-recommenders",
    package="generative_recommenders",
    importable="generative_recommenders",
    package_dir="generative_recommenders",
    marker="generative_recommenders/ops/triton/triton_hstu_attention.py",
)
MODULE = "generative_recommenders.ops.triton.triton_hstu_attention"
SRC = "generative_recommenders/ops/triton/triton_hstu_attention.py"
DTYPES = (torch.float16, torch.bfloat16)
OPTIONS = {"path": (str, None), "enable_tma": (bool, False), "sort_by_length": (bool, False)}


def hstu_n(qk_scale: float) -> int | None:
    """The N with 1/N == qk_scale (to float rounding), or None when qk_scale is not 1/N for an integer N."""
    if not (qk_scale > 0 and math.isfinite(qk_scale)):
        return None
    n = round(1.0 / qk_scale)
    return n if n >= 1 and math.isclose(1.0 / n, qk_scale, rel_tol=1e-9) else None


@register
class HSTUProvider(pc.PeerProvider):
    name = "hstu"
    peer, module, option_fields = PEER, MODULE, OPTIONS
    process_setup_s = 30.0  # Triton autotuning of its fwd and bwd kernels, cached in-process
    _n: int | None = None  # the N of this instance's last forward, which kernel_configs records
    autotune_bytes = TRITON_AUTOTUNE_BYTES
    description = (
        "HSTU's Triton attention (generative-recommenders triton_hstu_mha) from your checkout; "
        "silu(alpha·QKᵀ)/N, causal self-attention: GDPA with qk_scale = 1/N; fwd + bwd via its autograd"
    )

    def _mha(self):
        return self.peer_module().triton_hstu_mha

    def device_reason(self, device: torch.device) -> str | None:
        return None if device.type == "cuda" else f"runs on CUDA GPUs only (HSTU's Triton kernels, {SRC})"

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        if not spec.causal:
            return "triton_hstu_mha is causal only (generative_recommenders/ops/hstu_attention.py:128)"
        if spec.activation != "silu":
            return (
                f"HSTU's attention is silu(alpha·QKᵀ)/N ({SRC}:453); activation must be silu, got {spec.activation!r}"
            )
        n = hstu_n(spec.qk_scale)
        longest = int(batch.max_q)
        if n is None or n < longest:
            return (
                f"HSTU divides by N, its max_seq_len (≥ every length, {SRC}:452): qk_scale must be 1/N with "
                f"N an integer ≥ {longest} (e.g. 1/max_len), got {spec.qk_scale:g}"
            )
        if not np.array_equal(batch.q_lengths, batch.kv_lengths):
            return "HSTU attention is self-attention: K/V lengths must equal Q's (kv rule self)"
        if batch.Hkv != batch.H or batch.k.shape != batch.q.shape or batch.v.shape[:2] != batch.q.shape[:2]:
            return f"HSTU needs k shaped like q (no GQA): H={batch.H}, Hkv={batch.Hkv}"
        if batch.dtype not in DTYPES:
            return f"HSTU runs fp16/bf16 here, not {str(batch.dtype).replace('torch.', '')}"
        if batch.D < 16 or batch.D > 256 or batch.D & (batch.D - 1):
            return f"head dim {batch.D}: HSTU's kernel tiles the whole head (BLOCK_D = D): a power of 2 in 16..256"
        return None

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        mha = self._mha()
        self._n = hstu_n(spec.qk_scale)
        return mha(
            N=self._n,
            alpha=float(spec.alpha),
            q=batch.q,
            k=batch.k,
            v=batch.v,
            seq_offsets=batch.q_offsets,
            sort_by_length=self.options["sort_by_length"],
            enable_tma=self.options["enable_tma"],
        )

    def kernel_configs(self) -> dict | None:
        fields = self.source_fields()
        return None if fields is None else {**fields, "N": self._n}
