"""`meta_gdpa_tlx`: Meta's TLX GDPA megakernel (facebookresearch/ads_model_kernel_library,
`gdpa_megakernel/src/tlx_gdpa_megakernel.py`, Apache-2.0), from the same checkout as `meta_gdpa`
(kernels/peer_checkout.py: option `path`, an importable `tlx_gdpa_megakernel`, or
`.peers/ads_model_kernel_library`). Forward and backward go through its autograd op
(`torch.ops.ads_mkl.tlx_gdpa_megakernel`, registered by the module).

It needs what Meta's README names for its TLX packages: a Blackwell GPU (its kernels are
`gdpa_kernel_tma_ws_blackwell*`, sm100 TMA with warp specialization; Meta's tests skip below compute
capability 10, gdpa_megakernel/tests/oss_test_utils.py:29-33) and Meta's Triton fork `fbtriton==3.6.1`
(`triton.language.extra.tlx`), which installs as `triton`: give the entry its own environment
(`environment: {prepend_path: [DIR]}` or `{python: ...}`, bench.sweep.environments). Off Blackwell it is skipped
("needs sm100"), on stock Triton likewise ("needs Meta's Triton fork"), each with the reason.

Semantics, from its source (at 2c128ab): `tlx_gdpa_megakernel(query, key, value, query_offset,
key_offset, max_seq_len_q, max_seq_len_kv, ..., qk_scale, ..., activation, ...)` (:8155). The forward
kernel takes `qk_scale` (:713) and never applies it, nor does the backward (`# ppT *= qk_scale`, :5351),
and Meta's test compares against act(Q·Kᵀ)·V (tests/test_tlx_gdpa_megakernel.py `_gdpa_reference`): O =
act(QKᵀ)·V, so cases run with alpha 1 and qk_scale 1; no causal mask (`stage = 1`, :4452). Activations
by Meta's names (tlx_math.py `Activation`, the same names as its Triton GDPA's: kernels.meta_gdpa).

Its modules import each other as top-level names (`from tlx_math import ...`, :15-35), so its folder
goes first on sys.path (a `flat` peer). Meta's module-level globals need
`TRITON_ALLOW_NON_CONSTEXPR_GLOBALS` (its README runs its tests so): the provider sets Triton's knob for
the process before the module loads. Autotuning: Meta's full space is 432 forward configs (:193-204), each
a TLX compile; by default the provider runs Meta's one known config, as Meta's OSS tests do
(`ADS_MKL_DISABLE_AUTOTUNE=1`, read at the kernel's first call, :180); option `autotune: true` runs the
whole sweep (hours: raise `timing.case_timeout_s`). The choice is the process's: a second label asking
the other is skipped with the reason. Option `load_balancing: true` passes a host copy of the query
offsets (made once per batch, outside the timed call), with which Meta's host code builds its
load-balanced tile list (per call, as a caller of its op pays: :4540-4557).
"""

from __future__ import annotations

import os

import torch

from kernels import peer_checkout as pc
from kernels.meta_gdpa import ACTIVATIONS, PEER, jagged_arguments, shape_reason
from kernels.meta_gdpa_cute import sm100_reason
from kernels.registry import CaseSpec, register
from support.text import one_line
from workloads.batch import JaggedBatch

TLX_PEER = pc.Peer(
    key=PEER.key,
    title="Meta's TLX GDPA megakernel (facebookresearch/ads_model_kernel_library gdpa_megakernel)",
    url=PEER.url,
    package="tlx_gdpa_megakernel",
    importable="tlx_gdpa_megakernel",
    package_dir="gdpa_megakernel/src",
    marker="gdpa_megakernel/src/tlx_gdpa_megakernel.py",
    flat=True,
)
MODULE = "tlx_gdpa_megakernel"
SRC = "gdpa_megakernel/src/tlx_gdpa_megakernel.py"
OPTIONS = {"path": (str, None), "autotune": (bool, False), "load_balancing": (bool, False)}
_process_autotune: list[bool] = []  # the autotune setting this process's first call fixed (Meta caches it)


def tlx_reason() -> str | None:
    """None where this process's Triton is Meta's fork with TLX, else why not."""
    need = "needs Meta's Triton fork fbtriton==3.6.1 (triton.language.extra.tlx)"
    where = "give the entry environment: {prepend_path: [DIR]} with fbtriton in DIR (README, Peer kernels)"
    try:
        import triton
    except Exception as exc:
        return f"{need}; triton does not import here ({one_line(exc)}): {where}"
    try:
        import triton.language.extra.tlx
    except Exception:
        return f"{need}; triton {getattr(triton, '__version__', '?')} here has none: {where}"
    return None


def allow_module_globals() -> None:
    """Meta's kernels read module-level globals (its README runs them with TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1)."""
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None and hasattr(knobs.compilation, "allow_non_constexpr_globals"):
        knobs.compilation.allow_non_constexpr_globals = True
    else:
        os.environ.setdefault("TRITON_ALLOW_NON_CONSTEXPR_GLOBALS", "1")


@register
class MetaGDPATLXProvider(pc.PeerProvider):
    name = "meta_gdpa_tlx"
    peer, module, option_fields = TLX_PEER, MODULE, OPTIONS
    process_setup_s = 60.0  # TLX compiles of its fwd and bwd kernels, cached in-process
    description = (
        "Meta's TLX GDPA megakernel (ads_model_kernel_library gdpa_megakernel, sm100, Meta's Triton fork "
        "fbtriton) from your checkout; O = act(QKᵀ)·V, alpha 1, qk_scale 1, no causal; fwd + bwd via its op"
    )

    def __init__(self, options=None):
        super().__init__(options)
        self._activation: str | None = None
        self._cpu_offsets: tuple | None = None  # (the batch's offsets, their host copy)

    def device_reason(self, device: torch.device) -> str | None:
        return sm100_reason(device) or tlx_reason()

    def peer_module(self):
        if self._loaded is None:
            allow_module_globals()
        return super().peer_module()

    def unsupported(self, batch: JaggedBatch, spec: CaseSpec) -> str | None:
        if spec.causal:
            return f"Meta's TLX megakernel has no causal mask (stage 1, {SRC}:4452)"
        if spec.alpha != 1.0 or spec.qk_scale != 1.0:
            return (
                f"Meta's TLX megakernel applies no scale (O = act(QKᵀ)·V: qk_scale is never used, {SRC}:713, "
                f":5351); alpha and qk_scale must be 1, got {spec.alpha:g} and {spec.qk_scale:g}"
            )
        if spec.activation not in ACTIVATIONS:
            return f"activation {spec.activation!r} has no Meta equivalent; allowed: {', '.join(ACTIVATIONS)}"
        if _process_autotune and _process_autotune[0] != self.options["autotune"]:
            return (
                f"autotune: {self.options['autotune']} in a process whose first call ran autotune: "
                f"{_process_autotune[0]} (Meta caches its config list per process, {SRC}:135); allowed: one "
                "setting per environment"
            )
        return shape_reason(batch, "Meta's TLX megakernel")

    def _host_offsets(self, batch: JaggedBatch):
        if not self.options["load_balancing"]:
            return None
        if self._cpu_offsets is None or self._cpu_offsets[0] is not batch.q_offsets:
            self._cpu_offsets = (batch.q_offsets, batch.q_offsets.cpu())
        return self._cpu_offsets[1]

    def build(self, batch: JaggedBatch, spec: CaseSpec, mode: str):
        self._host_offsets(batch)  # the host copy outside the timed call
        return super().build(batch, spec, mode)

    def forward(self, batch: JaggedBatch, spec: CaseSpec) -> torch.Tensor:
        fn = self.peer_module().tlx_gdpa_megakernel
        if not _process_autotune:
            _process_autotune.append(self.options["autotune"])
            os.environ["ADS_MKL_DISABLE_AUTOTUNE"] = "0" if self.options["autotune"] else "1"
        self._activation = ACTIVATIONS[spec.activation]
        return fn(
            **jagged_arguments(batch),
            activation=self._activation,
            enable_tma=True,  # as Meta's tests call it (tests/test_tlx_gdpa_megakernel.py)
            enable_ws=True,
            cpu_query_offset=self._host_offsets(batch),
        )

    def kernel_configs(self) -> dict | None:
        fields = self.source_fields()
        if fields is None:
            return None
        return {
            **fields,
            "activation": self._activation,
            "autotune": self.options["autotune"],
            "load_balancing": self.options["load_balancing"],
        }
