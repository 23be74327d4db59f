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
- backward: `backward_row(backward_setup(alpha), qk) -> r`; `backward(s, r)` returns
  (qk*act(alpha*s), act'(alpha*s)): P for the dV GEMM with qk_scale folded in, the derivative without it
  (the kernel applies alpha*qk_scale to dQ and dK once, after their GEMMs).

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

    def forward_setup(self, alpha):
        return (), alpha

    def forward(self, s, k):
        return s

    def backward_row(self, k, qk):
        return (k[0] * qk,)

    def backward(self, s, r):
        return s * r[0], self.ops.const(1.0)


class Relu(Activation):
    name = "relu"

    def value_and_grad(self, x):
        o = self.ops
        return o.fmax(x, 0.0), o.select(x > 0.0, 1.0, 0.0)


class ReluSquare(Activation):
    name = "relu_square"

    def value_and_grad(self, x):
        r = self.ops.fmax(x, 0.0)
        return r * r, r + r


class LeakyRelu(Activation):
    name = "leaky_relu"
    masked_floor = None
    slope = 0.01

    def value_and_grad(self, x):
        o = self.ops
        # slope < 1: max(x, slope*x) is x for x >= 0, slope*x below
        return o.fmax(x, x * self.slope), o.select(x >= 0.0, 1.0, self.slope)


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

    def value_and_grad(self, x):
        o = self.ops
        cdf = o.erf(x * INV_SQRT_2) * 0.5 + 0.5
        return x * cdf, cdf + x * INV_SQRT_2PI * o.exp2(x * x * (-0.5 * LOG2_E))


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

    def backward_setup(self, alpha):
        # act'(x) = 0.5(1+t) + 0.5x(1-t^2)(K0 + 3 K1 x^2) = 0.5(1+t) + (1-t^2) s (hK0 + hca s^2), with
        # h = alpha/2 and ca = 3 K1 alpha^2 folded per row: 5 FP32 ops per score, not 6 (issue 30)
        a1, a3 = self.forward_setup(alpha)[0]
        h = alpha * 0.5
        return (a1, a3, h * (alpha * alpha * (3.0 * GELU_K1)), h * SQRT_2_OVER_PI, h)

    def backward_row(self, k, qk):
        # hq = qk*alpha/2 (P = hq*s*(1+t))
        return (k[0], k[1], k[2], k[3], k[4] * qk)

    def backward(self, s, r):
        a1, a3, hca, hk0, hq = r
        s2 = s * s
        t = self._tanh(s * (s2 * a3 + a1))
        hsq = hq * s
        # (1-t^2)*s first: at the masked floor (s = -1e15) it is 0 while s*(hk0 + hca*s^2) overflows to inf
        return hsq * t + hsq, ((1.0 - t * t) * s) * (s2 * hca + hk0) + (t * 0.5 + 0.5)


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

    def backward_setup(self, alpha):
        return (alpha, alpha * -LOG2_E)

    def backward_row(self, k, qk):
        return (k[0], k[1], k[0] * qk)

    def backward(self, s, r):
        alpha, k2, hq = r
        sg = self.ops.rcp(self.ops.exp2(s * k2) + 1.0)
        x = s * alpha
        # act' = sg * (1 + x*(1 - sg))
        return (hq * s) * sg, sg * (x - x * sg + 1.0)


class FastSilu(Activation):
    """x*(0.5 + 0.5*tanh(x/2)) with tanh.approx: act = (alpha/2)(s + s*tanh(alpha*s/2))."""

    name = "fast_silu"

    def forward_setup(self, alpha):
        return (alpha * 0.5,), alpha * 0.5

    def forward(self, s, k):
        t = self.ops.tanh_approx(s * k[0])
        return s * t + s

    def backward_setup(self, alpha):
        return (alpha * 0.5,)

    def backward_row(self, k, qk):
        # hq = qk*alpha/2 (P = hq*s*(1+t)); act' = 0.5(1+t) + 0.25x(1-t^2), 0.25x = (alpha/4)*s
        return (k[0], k[0] * qk, k[0] * 0.5)

    def backward(self, s, r):
        a, hq, h2 = r
        t = self.ops.tanh_approx(s * a)
        hsq = hq * s
        return hsq * t + hsq, (h2 * s) * (1.0 - t * t) + (t * 0.5 + 0.5)


CLASSES = (Raw, Relu, ReluSquare, LeakyRelu, Gelu, GeluTanh, FastGelu, Silu, FastSilu, Hardswish)
NAMES = tuple(c.name for c in CLASSES)


def build(name: str, ops) -> Activation:
    for cls in CLASSES:
        if cls.name == name:
            return cls(ops)
    raise ValueError(f"unknown activation {name!r}; allowed: {', '.join(NAMES)}")
