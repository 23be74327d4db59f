"""GDPA activations for the Hopper kernels: value and derivative at x = alpha*s, written once against a
small set of primitive ops (`ops`), so the same formulas run as CuTe-DSL device code in the kernels
(`device_ops()`) and as torch code in the CPU tests (tests/test_gdpa_hopper.py passes torch ops).

One object per name in kernels.activations.ACTIVATION_NAMES (same math as kernels/activations.py and
the Triton table kernels/gdpa/activations.py; `fast_*` use the one-instruction `tanh.approx.f32`).

Every score costs FP32-pipe instructions, so the hot paths fold the scales into constants computed once per
tile instead of multiplying each score by alpha and qk_scale:

- forward:  `forward_setup(alpha) -> (k, out_scale)`; `forward(s, k)` returns P' with
  act(alpha*s) = out_scale * P'. The kernel scales O once by qk_scale * out_scale after the key loop
  (fast_gelu: P' = s + s*tanh(s*(a1 + a3*s^2)): 4 FP32 ops + 1 MUFU per score).
- backward: `backward_row(backward_setup(alpha), qk) -> r`; `backward(s, r)` returns (P', act'(alpha*s)):
  the dV GEMM's operand and the derivative without any scale (the kernel applies alpha*qk_scale to dQ and dK
  once, after their GEMMs). Where act(alpha*s) = alpha * p_fold * P'(s) (`p_fold` set: every activation that is
  alpha times a function of s and alpha-folded constants), P' leaves out alpha*qk_scale*p_fold and the kernel
  scales dV by it once per key tile (bwd.py `epilogue_dKV`; the GQA postprocess): fast_gelu's P' is s + s*t,
  one FFMA, and its derivative reuses it — 9 FP32 ops a score where P = qk*act took 10, silu 5 where it took 8.
  Otherwise (`p_fold` None: relu_square, hardswish) P' = qk*act(alpha*s).

Masked scores: the forward selects -inf to 0 (act(0) == 0 for every activation here). The backward, for
alpha > 0, raises -inf to `masked_floor` instead (one max per score, only in blocks that are masked): every
activation that has one returns P == G == 0 exactly there, without a select (tanh saturates to -1, erf to
-1, 2^x overflows to inf, relu/hardswish clamp). raw and leaky_relu have none (act(-big) != 0) and select.
"""

from __future__ import annotations

import math

LOG2_E = math.log2(math.e)
SQRT_2_OVER_PI = 0.7978845608028654
GELU_K1 = 0.044715 * SQRT_2_OVER_PI  # tanh argument: x*(SQRT_2_OVER_PI + GELU_K1*x^2)
INV_SQRT_2 = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327


# far below any real score, while its square (gelu_tanh's s^2) stays finite in fp32
MASKED_FLOOR = -1.0e15


class Activation:
    """Generic form: x = alpha*s, then `value_and_grad(x)`; subclasses fold constants where it pays."""

    name = ""
    masked_floor: float | None = MASKED_FLOOR
    p_fold: float | None = None  # P' = act(alpha*s) / (alpha*p_fold): the backward leaves the scale to dV

    def __init__(self, ops):
        self.ops = ops

    # forward
    def forward_setup(self, alpha):
        return (alpha,), self.ops.const(1.0)

    def forward(self, s, k):
        return self.value_and_grad(s * k[0])[0]

    # backward
    def backward_setup(self, alpha):
        return (alpha,)

    def backward_row(self, k, qk):
        return (k[0], qk)

    def backward(self, s, r):
        v, d = self.value_and_grad(s * r[0])
        return v * r[1], d

    def value_and_grad(self, x):
        raise NotImplementedError


class Raw(Activation):
    name = "raw"
    masked_floor = None
    p_fold = 1.0

    def forward_setup(self, alpha):
        return (), alpha

    def forward(self, s, k):
        return s

    def backward_row(self, k, qk):
        return ()

    def backward(self, s, r):
        return s, self.ops.const(1.0)


class Relu(Activation):
    name = "relu"
    p_fold = 1.0  # alpha > 0 in the backward (launch.py): relu(alpha*s) = alpha*relu(s)

    def value_and_grad(self, x):
        o = self.ops
        return o.fmax(x, 0.0), o.select(x > 0.0, 1.0, 0.0)

    def backward_row(self, k, qk):
        return ()

    def backward(self, s, r):
        return self.value_and_grad(s)


class ReluSquare(Activation):
    name = "relu_square"

    def value_and_grad(self, x):
        r = self.ops.fmax(x, 0.0)
        return r * r, r + r


class LeakyRelu(Activation):
    name = "leaky_relu"
    masked_floor = None
    slope = 0.01
    p_fold = 1.0  # positively homogeneous, as relu

    def value_and_grad(self, x):
        o = self.ops
        # slope < 1: max(x, slope*x) is x for x >= 0, slope*x below
        return o.fmax(x, x * self.slope), o.select(x >= 0.0, 1.0, self.slope)

    def backward_row(self, k, qk):
        return ()

    def backward(self, s, r):
        return self.value_and_grad(s)


class Hardswish(Activation):
    name = "hardswish"

    def forward_setup(self, alpha):
        return (alpha,), self.ops.const(1.0 / 6.0)

    def forward(self, s, k):
        x = s * k[0]
        return x * self.ops.fmin(self.ops.fmax(x + 3.0, 0.0), 6.0)

    def value_and_grad(self, x):
        o = self.ops
        v = x * o.fmin(o.fmax(x + 3.0, 0.0), 6.0) * (1.0 / 6.0)
        d = o.select(x <= -3.0, 0.0, o.select(x >= 3.0, 1.0, x * (1.0 / 3.0) + 0.5))
        return v, d


class Gelu(Activation):
    """erf form."""

    name = "gelu"

    def forward_setup(self, alpha):
        return (alpha,), self.ops.const(0.5)

    def forward(self, s, k):
        x = s * k[0]
        return x + x * self.ops.erf(x * INV_SQRT_2)

    p_fold = 1.0  # x*cdf(x) = alpha * (s*cdf)

    def value_and_grad(self, x):
        o = self.ops
        cdf = o.erf(x * INV_SQRT_2) * 0.5 + 0.5
        return x * cdf, cdf + x * INV_SQRT_2PI * o.exp2(x * x * (-0.5 * LOG2_E))

    def backward_setup(self, alpha):
        return (alpha * INV_SQRT_2, alpha * INV_SQRT_2PI, alpha * alpha * (-0.5 * LOG2_E))

    def backward_row(self, k, qk):
        return k

    def backward(self, s, r):
        c_erf, c_pdf, c_exp = r
        o = self.ops
        cdf = o.erf(s * c_erf) * 0.5 + 0.5
        # act' = cdf + x * pdf(x), x = alpha*s
        return s * cdf, (s * c_pdf) * o.exp2((s * s) * c_exp) + cdf


class GeluTanh(Activation):
    """0.5x(1 + tanh(y)), y = x(K0 + K1 x^2): exact tanh here, tanh.approx in FastGelu."""

    name = "gelu_tanh"

    def _tanh(self, y):
        return self.ops.tanh(y)

    def forward_setup(self, alpha):
        # y = alpha*s*(K0 + K1*alpha^2*s^2) = s*(a1 + a3*s^2);  act = (alpha/2) * (s + s*tanh(y))
        return (alpha * SQRT_2_OVER_PI, alpha * alpha * alpha * GELU_K1), alpha * 0.5

    def forward(self, s, k):
        t = self._tanh(s * (s * s * k[1] + k[0]))
        return s * t + s

    p_fold = 0.5  # act = (alpha/2) * (s + s*t)

    def backward_setup(self, alpha):
        # act'(x) = 0.5(1+t) + 0.5x(1-t^2)(K0 + 3 K1 x^2) = 0.5(1+t) + P'(1-t)(hK0 + hca s^2), with P' = s(1+t),
        # h = alpha/2 and ca = 3 K1 alpha^2 folded per row: 9 FP32 ops a score with P', where qk*act took 10
        a1, a3 = self.forward_setup(alpha)[0]
        h = alpha * 0.5
        return (a1, a3, h * (alpha * alpha * (3.0 * GELU_K1)), h * SQRT_2_OVER_PI)

    def backward_row(self, k, qk):
        return k

    def backward(self, s, r):
        a1, a3, hca, hk0 = r
        s2 = s * s
        t = self._tanh(s * (s2 * a3 + a1))
        p = s * t + s
        # (1-t) multiplies before P' adds: where t is 1 (alpha*s past ~5) the product is exactly 0 and act' exactly 1,
        # which (0.5 + a) + t(0.5 - a) loses to rounding once a = P'(hK0 + hca s^2) passes 2^23 (alpha*s ~ 430:
        # a review found it). At the masked floor (s = -1e15, t = -1) P' is exactly 0 (s^2*hca stays finite for
        # alpha <= 30), so act' = 0.
        return p, p * ((s2 * hca + hk0) * (1.0 - t)) + (t * 0.5 + 0.5)


class FastGelu(GeluTanh):
    name = "fast_gelu"

    def _tanh(self, y):
        return self.ops.tanh_approx(y)


class Silu(Activation):
    """x*sigmoid(x), sigmoid = 1/(1 + 2^(-x log2 e)) (ex2.approx + rcp.approx: ~fp32 accurate)."""

    name = "silu"

    def forward_setup(self, alpha):
        return (alpha * -LOG2_E,), alpha

    def forward(self, s, k):
        return s * self.ops.rcp(self.ops.exp2(s * k[0]) + 1.0)

    p_fold = 1.0  # act = alpha * (s*sg)

    def backward_setup(self, alpha):
        return (alpha, alpha * -LOG2_E)

    def backward_row(self, k, qk):
        return k

    def backward(self, s, r):
        alpha, k2 = r
        sg = self.ops.rcp(self.ops.exp2(s * k2) + 1.0)
        p = s * sg
        # act' = sg * (1 + x*(1 - sg)) = sg + alpha*(P' - P'*sg): 5 FP32 ops a score, where qk*act took 8
        return p, alpha * (p - p * sg) + sg


class FastSilu(Activation):
    """x*(0.5 + 0.5*tanh(x/2)) with tanh.approx: act = (alpha/2)(s + s*tanh(alpha*s/2))."""

    name = "fast_silu"

    def forward_setup(self, alpha):
        return (alpha * 0.5,), alpha * 0.5

    def forward(self, s, k):
        t = self.ops.tanh_approx(s * k[0])
        return s * t + s

    p_fold = 0.5  # act = (alpha/2) * (s + s*t)

    def backward_setup(self, alpha):
        return (alpha * 0.5,)

    def backward_row(self, k, qk):
        # act' = 0.5(1+t) + 0.25x(1-t^2) = 0.5(1+t) + (alpha/4) P'(1-t), P' = s(1+t)
        return (k[0], k[0] * 0.5)

    def backward(self, s, r):
        a, h2 = r
        t = self.ops.tanh_approx(s * a)
        p = s * t + s
        # (1-t) multiplies first, as GeluTanh's: exactly 0 where t is 1 ((0.5 + c) + t(0.5 - c) lost ~1e-4 there)
        return p, (h2 * p) * (1.0 - t) + (t * 0.5 + 0.5)


CLASSES = (Raw, Relu, ReluSquare, LeakyRelu, Gelu, GeluTanh, FastGelu, Silu, FastSilu, Hardswish)
NAMES = tuple(c.name for c in CLASSES)


def dv_scale(name: str, grad_scale: float, fold: bool = True) -> float:
    """What dV is scaled by after the GEMMs, given alpha*qk_scale: the part P' left out (Activation.p_fold), or
    1 where P' = qk*act. For launch.py's GQA postprocess; without GQA bwd.py's epilogue applies the same."""
    p_fold = build(name, None, fold).p_fold
    return 1.0 if p_fold is None else grad_scale * p_fold


class _ScaledP:
    """An activation whose backward hands the dV GEMM P = qk*act(alpha*s) (P' times alpha*qk*p_fold a score), as
    before P' existed: for fp16 kernels, whose range (65504) holds P but not always P' (alpha < 1 scales P' up by
    1/alpha; alpha = 0 leaves the masked floor, -1e15, in P')."""

    p_fold = None
    folded = 1.0  # the activation's own p_fold (build)

    def backward_setup(self, alpha):
        return super().backward_setup(alpha), alpha * self.folded

    def backward_row(self, k, qk):
        return super().backward_row(k[0], qk), k[1] * qk

    def backward(self, s, r):
        p, g = super().backward(s, r[0])
        return p * r[1], g


def build(name: str, ops, fold: bool = True) -> Activation:
    """Activation `name` over `ops`. fold=False (fp16 kernels): P = qk*act(alpha*s), never P' (_ScaledP)."""
    for cls in CLASSES:
        if cls.name == name:
            if fold or cls.p_fold is None:
                return cls(ops)
            return type(f"ScaledP{cls.__name__}", (_ScaledP, cls), {"folded": cls.p_fold})(ops)
    raise ValueError(f"unknown activation {name!r}; allowed: {', '.join(NAMES)}")
