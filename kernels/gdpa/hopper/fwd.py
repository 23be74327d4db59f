"""GDPA forward on Hopper: FlashAttention-4's warp-specialized sm90 forward with the softmax replaced.

FA4's `FlashAttentionForwardSm90` (producer warpgroup issuing TMA, two MMA warpgroups ping-ponged on named
barriers, the next QK^T overlapped with this block's pointwise work, P fed to the PV GEMM from registers)
keeps all of its pipeline. Only the score pointwise changes, and it enters through the object FA4's `mma()`
builds with `Softmax.create(...)`:

- `online_softmax(acc_S)` -> `GDPAScores.online_softmax`: acc_S = act(alpha*s) / out_scale in place; no row
  max, no row sum, nothing to rescale. Masked scores arrive as -inf (FA4's mask) and are selected to 0
  first (act(0) == 0; gelu(-inf) would be NaN) — only on key blocks that FA4 masked (`masked`, set per block
  at trace time by the `GDPAForwardSm90` overrides below), so interior blocks pay nothing for it.
- `finalize(sink_val)` + `rescale_O` -> O *= qk_scale * out_scale once per tile. qk_scale arrives at run time
  through FA4's learnable-sink argument (an fp32 [H] tensor that FA4's mma() reads per head and hands to
  `finalize`): a new qk_scale needs no recompile.

`Softmax.create` is looked up as a module global of flash_fwd_sm90 while mma() is traced, and mma() (250
lines of pipeline code) cannot be subclassed around it, so `scores_object` swaps that one global for the
duration of our own compile and restores it after (launch.py holds a lock around it): FA4's own compiles
never see it. The persistent forward (persistent.py) is chosen the same way: FA4's `__call__` picks its
varlen scheduler by the module global `SingleTileVarlenScheduler`, which `scores_object(scheduler=...)`
points at ours for the compile.
"""

from __future__ import annotations

import contextlib
import copy
import threading

import cutlass
import cutlass.cute as cute
import flash_attn.cute.flash_fwd_sm90 as fa4_fwd_sm90
from cutlass import Float32, const_expr
from flash_attn.cute.flash_fwd_sm90 import FlashAttentionForwardSm90
from quack import layout_utils

from kernels.gdpa.hopper.activations import LOG2_E, Activation
from kernels.gdpa.hopper.persistent import PersistentForwardMixin


class _OutputScale:
    """What GDPAScores.finalize hands to rescale_O: one scale per tile (or per row with packed GQA)."""

    def __init__(self, value):
        self.value = value


class GDPAScores:
    """Stands in for FA4's Softmax object inside FlashAttentionForwardSm90.mma()."""

    def __init__(self, activation: Activation, scale_log2, num_rows: int):
        self.activation = activation
        self.consts, self.out_scale = activation.forward_setup(scale_log2 * (1.0 / LOG2_E))
        self.masked = True  # trace-time: FA4 applied its mask to the block being processed
        # FA4 reads these (make_rmem_tensor_like(row_max) for per-row sink values; row_sum goes to the
        # epilogue, which writes it only when an LSE tensor is given: never here)
        self.row_max = cute.make_rmem_tensor(num_rows, Float32)
        self.row_sum = cute.make_rmem_tensor(num_rows, Float32)

    def reset(self) -> None:  # block-sparse path only
        pass

    # FA4's mma() carries this object through its dynamic tile loop: expose the runtime values
    def _dynamic_fields(self):
        return [self.consts, self.out_scale, self.row_max, self.row_sum]

    def __extract_mlir_values__(self):
        values, self._values_pos = [], []
        for field in self._dynamic_fields():
            field_values = cutlass.extract_mlir_values(field)
            values += field_values
            self._values_pos.append(len(field_values))
        return values

    def __new_from_mlir_values__(self, values):
        fields = []
        for field, n in zip(self._dynamic_fields(), self._values_pos, strict=True):
            fields.append(cutlass.new_from_mlir_values(field, values[:n]))
            values = values[n:]
        new = copy.copy(self)
        new.consts, new.out_scale, new.row_max, new.row_sum = fields
        return new

    @cute.jit
    def online_softmax(
        self, acc_S: cute.Tensor, is_first: cutlass.Constexpr[bool] = False, check_inf: cutlass.Constexpr[bool] = True
    ):
        for i in cutlass.range_constexpr(cute.size(acc_S)):
            s = acc_S[i]
            if const_expr(self.masked):
                s = Float32(0.0) if s == -Float32.inf else s
            acc_S[i] = self.activation.forward(s, self.consts)
        return None  # nothing for rescale_O to do per key block

    def finalize(self, final_scale=1.0, sink_val=None):
        assert sink_val is not None, "GDPA forward: qk_scale comes in the learnable-sink argument"
        if isinstance(sink_val, cute.Tensor):  # packed GQA: one value per row
            scale = cute.make_rmem_tensor_like(sink_val, Float32)
            for r in range(cute.size(sink_val)):
                scale[r] = sink_val[r] * self.out_scale * final_scale
            return _OutputScale(scale)
        return _OutputScale(sink_val * self.out_scale * final_scale)

    def rescale_O(self, acc_O: cute.Tensor, row_scale) -> None:
        if row_scale is None:  # after a key block: GDPA has no running statistics
            return
        assert isinstance(row_scale, _OutputScale)
        scale = row_scale.value
        if isinstance(scale, cute.Tensor):
            acc_O_mn = layout_utils.reshape_acc_to_mn(acc_O)
            for r in range(cute.size(scale)):
                acc_O_mn[r, None].store(acc_O_mn[r, None].load() * scale[r])
        else:
            acc_O.store(acc_O.load() * scale)


class _ScoresFactory:
    """Has FA4's `Softmax.create` signature; builds GDPAScores for one activation."""

    def __init__(self, activation: Activation):
        self.activation = activation

    def create(self, scale_log2, num_rows: int, arch: int = 80, softmax_scale=None):
        assert softmax_scale is None, "GDPA kernels take no score_mod"
        return GDPAScores(self.activation, scale_log2, num_rows)


_SWAP_LOCK = threading.Lock()


@contextlib.contextmanager
def scores_object(activation: Activation, scheduler: type | None = None):
    """FA4's forward mma() builds its softmax object from the module global `Softmax` (and `__call__` its
    varlen scheduler from `SingleTileVarlenScheduler`): point them at ours while our kernel is traced, and
    restore them afterwards."""
    with _SWAP_LOCK:
        originals = fa4_fwd_sm90.Softmax, fa4_fwd_sm90.SingleTileVarlenScheduler
        fa4_fwd_sm90.Softmax = _ScoresFactory(activation)
        if scheduler is not None:
            fa4_fwd_sm90.SingleTileVarlenScheduler = scheduler
        try:
            yield
        finally:
            fa4_fwd_sm90.Softmax, fa4_fwd_sm90.SingleTileVarlenScheduler = originals


class GDPAForwardSm90(FlashAttentionForwardSm90):
    """FA4's sm90 forward; the overrides only tell GDPAScores whether FA4 masked the block at hand."""

    def __init__(
        self,
        dtype,
        head_dim: int,
        qhead_per_kvhead: int,
        *,
        activation: Activation,
        is_causal: bool,
        cfg,  # plans.ForwardConfig: the tiles and pack_gqa
    ):
        super().__init__(
            dtype,
            head_dim,
            head_dim,
            qhead_per_kvhead,
            is_causal=is_causal,
            is_local=False,
            pack_gqa=cfg.pack_gqa,
            tile_m=cfg.tile_m,
            tile_n=cfg.tile_n,
            num_stages=2,
            num_threads=384,
            Q_in_regs=False,
            intra_wg_overlap=True,
            mma_pv_is_rs=True,
        )
        self.activation = activation

    def first_half_block_overlap(self, *args, softmax, **kwargs):
        softmax.masked = True  # FA4 always applies its sequence-length mask to the first block
        return super().first_half_block_overlap(*args, softmax=softmax, **kwargs)

    def mma_one_n_block_intrawg_overlap(self, *args, softmax, mask_fn=None, **kwargs):
        softmax.masked = mask_fn is not None
        return super().mma_one_n_block_intrawg_overlap(*args, softmax=softmax, mask_fn=mask_fn, **kwargs)

    def mma_one_n_block(self, *args, softmax, mask_fn=None, **kwargs):
        softmax.masked = mask_fn is not None
        return super().mma_one_n_block(*args, softmax=softmax, mask_fn=mask_fn, **kwargs)


class GDPAForwardSm90Persistent(PersistentForwardMixin, GDPAForwardSm90):
    """GDPAForwardSm90 for a persistent grid (persistent.py): several tiles per CTA."""
