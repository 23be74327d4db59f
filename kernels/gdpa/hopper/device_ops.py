"""The primitive ops of kernels/gdpa/hopper/activations.py as CuTe-DSL device code (fp32 scalars)."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op


@dsl_user_op
def tanh_approx(x, *, loc=None, ip=None) -> Float32:
    """tanh.approx.f32: one MUFU op, max relative error ~2^-11 (far below the bf16 rounding of P)."""
    return Float32(
        llvm.inline_asm(
            T.f32(),
            [Float32(x).ir_value(loc=loc, ip=ip)],
            "tanh.approx.f32 $0, $1;",
            "=f,f",
            has_side_effects=False,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
        )
    )


class DeviceOps:
    @staticmethod
    def const(value):
        return Float32(value)

    @staticmethod
    def fmax(a, b):
        return cute.arch.fmax(a, b)

    @staticmethod
    def fmin(a, b):
        return cute.arch.fmin(a, b)

    @staticmethod
    def select(cond, a, b):
        return Float32(cutlass.select_(cond, Float32(a), Float32(b)))

    @staticmethod
    def tanh(x):
        return cute.math.tanh(x)

    tanh_approx = staticmethod(tanh_approx)

    @staticmethod
    def erf(x):
        return cute.math.erf(x)

    @staticmethod
    def exp2(x):
        return cute.math.exp2(x, fastmath=True)

    @staticmethod
    def rcp(x):
        return cute.arch.rcp_approx(x)


DEVICE_OPS = DeviceOps()
