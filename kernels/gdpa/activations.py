"""GDPA activations as Triton device functions: value and derivative (docs/DESIGN.md §3 table).

`ACT` is a constexpr string, so each kernel is specialised to one activation and the branches below
vanish at compile time. `HW_TANH` (a constexpr the launcher sets from the device) selects the tanh of
the `fast_*` variants: on a GPU the one-instruction hardware `tanh.approx.f32` (inline PTX), in the
CPU interpreter (which has no PTX) an overflow-safe exp formula — the exact variants always use that.
"""

import triton
import triton.language as tl

_SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
_GELU_C3 = tl.constexpr(0.035677408136300125)  # 0.044715 * sqrt(2/pi)
_INV_SQRT_2 = tl.constexpr(0.7071067811865476)
_INV_SQRT_2PI = tl.constexpr(0.3989422804014327)


@triton.jit
def _tanh_hw(x):
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _tanh_exact(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def _tanh(x, HW_TANH: tl.constexpr):
    if HW_TANH:
        return _tanh_hw(x)
    else:
        return _tanh_exact(x)


@triton.jit
def act_fwd(x, ACT: tl.constexpr, HW_TANH: tl.constexpr):
    """act(x) for a tile of fp32 scores."""
    if ACT == "raw":
        y = x
    elif ACT == "relu":
        y = tl.maximum(x, 0.0)
    elif ACT == "relu_square":
        r = tl.maximum(x, 0.0)
        y = r * r
    elif ACT == "leaky_relu":
        y = tl.where(x >= 0, x, 0.01 * x)
    elif ACT == "gelu":
        y = 0.5 * x * (1.0 + tl.math.erf(x * _INV_SQRT_2))
    elif ACT == "gelu_tanh":
        t = _tanh_exact(x * (_SQRT_2_OVER_PI + _GELU_C3 * x * x))
        y = 0.5 * x * (1.0 + t)
    elif ACT == "fast_gelu":
        t = _tanh(x * (_SQRT_2_OVER_PI + _GELU_C3 * x * x), HW_TANH)
        hx = 0.5 * x
        y = hx + hx * t
    elif ACT == "silu":
        y = x * tl.sigmoid(x)
    elif ACT == "fast_silu":
        hx = 0.5 * x
        y = hx + hx * _tanh(hx, HW_TANH)
    elif ACT == "hardswish":
        y = x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) * (1.0 / 6.0)
    else:
        tl.static_assert(False, "unknown activation")
    return y


@triton.jit
def act_fwd_bwd(x, ACT: tl.constexpr, HW_TANH: tl.constexpr):
    """(act(x), act'(x)) sharing the expensive part (one tanh / erf / sigmoid per element)."""
    if ACT == "raw":
        y = x
        dy = tl.full(x.shape, 1.0, tl.float32)
    elif ACT == "relu":
        y = tl.maximum(x, 0.0)
        dy = tl.where(x > 0, 1.0, 0.0)
    elif ACT == "relu_square":
        r = tl.maximum(x, 0.0)
        y = r * r
        dy = 2.0 * r
    elif ACT == "leaky_relu":
        y = tl.where(x >= 0, x, 0.01 * x)
        dy = tl.where(x >= 0, 1.0, 0.01)
    elif ACT == "gelu":
        cdf = 0.5 * (1.0 + tl.math.erf(x * _INV_SQRT_2))
        y = x * cdf
        dy = cdf + x * _INV_SQRT_2PI * tl.exp(-0.5 * x * x)
    elif ACT == "gelu_tanh" or ACT == "fast_gelu":
        x2 = x * x
        if ACT == "fast_gelu":
            t = _tanh(x * (_SQRT_2_OVER_PI + _GELU_C3 * x2), HW_TANH)
        else:
            t = _tanh_exact(x * (_SQRT_2_OVER_PI + _GELU_C3 * x2))
        hx = 0.5 * x
        y = hx + hx * t
        dy = 0.5 + 0.5 * t + hx * (1.0 - t * t) * (_SQRT_2_OVER_PI + 3.0 * _GELU_C3 * x2)
    elif ACT == "silu":
        sg = tl.sigmoid(x)
        y = x * sg
        dy = sg * (1.0 + x * (1.0 - sg))
    elif ACT == "fast_silu":
        sg = 0.5 * _tanh(0.5 * x, HW_TANH) + 0.5
        y = x * sg
        dy = sg * (1.0 + x * (1.0 - sg))
    elif ACT == "hardswish":
        y = x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) * (1.0 / 6.0)
        dy = tl.where(x <= -3.0, 0.0, tl.where(x >= 3.0, 1.0, x * (1.0 / 3.0) + 0.5))
    else:
        tl.static_assert(False, "unknown activation")
    return y, dy


@triton.jit
def act_fwd_scaled(s, alpha, ACT: tl.constexpr, HW_TANH: tl.constexpr):
    """act(alpha·s). For the fast_* variants alpha is folded into per-program scalar constants: two
    fewer FP32 instructions per score, and the FP32 pipe is what the activation competes for."""
    if ACT == "fast_gelu":
        # x = alpha·s:  x·(c1 + c3·x²) = s·(alpha·c1 + alpha³·c3·s²),  0.5·x = (0.5·alpha)·s
        a1 = alpha * _SQRT_2_OVER_PI
        a3 = alpha * alpha * alpha * _GELU_C3
        t = _tanh(s * (a1 + a3 * (s * s)), HW_TANH)
        hx = (0.5 * alpha) * s
        y = hx + hx * t
    elif ACT == "fast_silu":
        hx = (0.5 * alpha) * s
        y = hx + hx * _tanh(hx, HW_TANH)
    else:
        y = act_fwd(s * alpha, ACT, HW_TANH)
    return y


@triton.jit
def act_fwd_bwd_scaled(s, alpha, ACT: tl.constexpr, HW_TANH: tl.constexpr):
    """(act(alpha·s), act'(alpha·s)): act_fwd_bwd with alpha folded in as in act_fwd_scaled."""
    if ACT == "fast_gelu":
        s2 = s * s
        t = _tanh(s * (alpha * _SQRT_2_OVER_PI + (alpha * alpha * alpha * _GELU_C3) * s2), HW_TANH)
        hx = (0.5 * alpha) * s
        y = hx + hx * t
        # d/dx [x·(c1 + c3·x²)] = c1 + 3·c3·x² = c1 + (3·c3·alpha²)·s²
        dy = 0.5 + 0.5 * t + hx * (1.0 - t * t) * (_SQRT_2_OVER_PI + (3.0 * _GELU_C3 * alpha * alpha) * s2)
    elif ACT == "fast_silu":
        sg = 0.5 * _tanh((0.5 * alpha) * s, HW_TANH) + 0.5
        x = alpha * s
        y = x * sg
        dy = sg * (1.0 + x * (1.0 - sg))
    else:
        y, dy = act_fwd_bwd(s * alpha, ACT, HW_TANH)
    return y, dy
