"""GDPA activations as Triton device functions: value and derivative (docs/DESIGN.md §3 table).

`ACT` is a constexpr string, so each kernel is specialised to one activation and the branches below
vanish at compile time. `HW_TANH` (a constexpr the launcher sets from the device) selects the hardware
approximations (inline PTX) on a GPU: the one-instruction `tanh.approx.f32` of the `fast_*` variants, and for
silu's sigmoid `ex2.approx.ftz` + `rcp.approx.ftz`; in the CPU interpreter (which has no PTX) an overflow-safe
exp formula and tl.sigmoid — the exact tanh variants always use the former.
"""

import triton
import triton.language as tl

_SQRT_2_OVER_PI = tl.constexpr(0.7978845608028654)
_GELU_C3 = tl.constexpr(0.035677408136300125)  # 0.044715 * sqrt(2/pi)
_INV_SQRT_2 = tl.constexpr(0.7071067811865476)
_INV_SQRT_2PI = tl.constexpr(0.3989422804014327)
_LOG2_E = tl.constexpr(1.4426950408889634)


@triton.jit
def _tanh_hw(x):
    return tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _tanh_exact(x):
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x >= 0, t, -t)


@triton.jit
def _sigmoid_scaled(s, alpha, HW_TANH: tl.constexpr):
    """sigmoid(alpha·s). On a GPU 1/(1 + 2^(s·k)), k = -alpha·log2(e) per program, with ex2.approx.ftz and
    rcp.approx.ftz: one FP32 op, one add and two MUFU a score, where tl.sigmoid's exp and division also check the
    subnormal range and fix it up (~4 more FP32 ops; a subnormal 2^(s·k) only makes 1 + it 1). In the interpreter
    (no PTX) tl.sigmoid."""
    if HW_TANH:
        e = tl.inline_asm_elementwise(
            "ex2.approx.ftz.f32 $0, $1;", "=r,r", [s * (alpha * -_LOG2_E)], dtype=tl.float32, is_pure=True, pack=1
        )
        return tl.inline_asm_elementwise(
            "rcp.approx.ftz.f32 $0, $1;", "=r,r", [e + 1.0], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        return tl.sigmoid(alpha * s)


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
def act_fwd_scaled(s, alpha, ACT: tl.constexpr, HW_TANH: tl.constexpr, FOLD: tl.constexpr):
    """P' with act(alpha·s) = p_fold(alpha, ACT, FOLD)·P', which the output's store applies beside qk_scale: alpha
    folded into per-program constants and out of the score (fast_gelu's P' = s + s·t: 4 FP32 ops a score where
    act(alpha·s) took 5), as act_fwd_bwd_scaled; without FOLD (fp16 operands) P' = act(alpha·s)."""
    if ACT == "fast_gelu" or ACT == "gelu_tanh":
        # x = alpha·s:  x·(c1 + c3·x²) = s·(alpha·c1 + alpha³·c3·s²)
        y = s * (alpha * _SQRT_2_OVER_PI + (alpha * alpha * alpha * _GELU_C3) * (s * s))
        if ACT == "fast_gelu":
            t = _tanh(y, HW_TANH)
        else:
            t = _tanh_exact(y)
        p = s + s * t
    elif ACT == "fast_silu":
        p = s + s * _tanh((0.5 * alpha) * s, HW_TANH)
    elif ACT == "silu":
        p = s * _sigmoid_scaled(s, alpha, HW_TANH)
    elif ACT == "gelu":
        p = s * (0.5 * (1.0 + tl.math.erf((alpha * _INV_SQRT_2) * s)))
    elif ACT == "raw":
        p = s
    else:
        p = act_fwd(s * alpha, ACT, HW_TANH)
    if not FOLD:
        p = p * p_fold(alpha, ACT, True)
    return p


@triton.jit
def act_fwd_bwd_scaled(s, alpha, ACT: tl.constexpr, HW_TANH: tl.constexpr, FOLD: tl.constexpr):
    """(P', act'(alpha·s)) with act(alpha·s) = p_fold(alpha, ACT, FOLD)·P'. With FOLD, where the activation is
    alpha times a function of s for any alpha (raw, gelu, gelu_tanh, fast_gelu, silu, fast_silu), P' leaves that
    factor to dV, scaled once per output element (store_dkdv), and the derivative reuses P' — fast_gelu 9 FP32 ops
    a score where act and act' apart took 10, silu 2 after the sigmoid where it took 5. relu, leaky_relu
    (homogeneous for alpha > 0 only), relu_square and hardswish: P' = act(alpha·s). FOLD is off for fp16 operands:
    fp16's range (65504) holds act(alpha·s) but not always P' (alpha < 1, or alpha = 0), so P' is scaled back."""
    if ACT == "fast_gelu" or ACT == "gelu_tanh":
        s2 = s * s
        y = s * (alpha * _SQRT_2_OVER_PI + (alpha * alpha * alpha * _GELU_C3) * s2)
        if ACT == "fast_gelu":
            t = _tanh(y, HW_TANH)
        else:
            t = _tanh_exact(y)
        p = s + s * t
        # act' = 0.5(1+t) + 0.5x(1-t²)(c1 + 3·c3·x²), x = alpha·s, and 0.5x(1-t²) = 0.5·alpha·P'(1-t); (1-t)
        # multiplies first, so where t is 1 the term is exactly 0 (not (0.5 + a) + t(0.5 - a): rounding past a = 2^23)
        ha = 0.5 * alpha
        dy = p * ((ha * _SQRT_2_OVER_PI + (ha * alpha * alpha * 3.0 * _GELU_C3) * s2) * (1.0 - t)) + (0.5 + 0.5 * t)
    elif ACT == "fast_silu":
        # act = x·(0.5 + 0.5·tanh(x/2)) = (alpha/2)·s(1+t); act' = 0.5(1+t) + (alpha/4)·P'(1-t)
        t = _tanh((0.5 * alpha) * s, HW_TANH)
        p = s + s * t
        dy = ((0.25 * alpha) * p) * (1.0 - t) + (0.5 + 0.5 * t)  # (1-t) first: exactly 0 where t is 1
    elif ACT == "silu":
        sg = _sigmoid_scaled(s, alpha, HW_TANH)
        p = s * sg
        dy = alpha * (p - p * sg) + sg  # sg·(1 + x·(1 - sg))
    elif ACT == "gelu":
        x = alpha * s
        cdf = 0.5 * (1.0 + tl.math.erf(x * _INV_SQRT_2))
        p = s * cdf
        dy = cdf + x * _INV_SQRT_2PI * tl.exp(-0.5 * x * x)
    elif ACT == "raw":
        p = s
        dy = tl.full(s.shape, 1.0, tl.float32)
    else:
        p, dy = act_fwd_bwd(s * alpha, ACT, HW_TANH)
    if not FOLD:
        p = p * p_fold(alpha, ACT, True)
    return p, dy


@triton.jit
def p_fold(alpha, ACT: tl.constexpr, FOLD: tl.constexpr):
    """The factor act_fwd_scaled's and act_fwd_bwd_scaled's P' leaves out of act(alpha·s) (1 without FOLD): O and
    dV are scaled by it (and qk_scale) once per output element."""
    if FOLD and (ACT == "fast_gelu" or ACT == "gelu_tanh" or ACT == "fast_silu"):
        return 0.5 * alpha
    elif FOLD and (ACT == "raw" or ACT == "gelu" or ACT == "silu"):
        return alpha
    else:
        return 1.0
