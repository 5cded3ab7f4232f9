"""Numpy integer reference of the int8 attention cores, bit-exact with each TFLite interpreter's kernels.

Pure numpy (no torch): the C kernels (firmware_models/kernels) are checked against this, and this against
tflite-runtime, ai-edge-litert and TFLite Micro running the same ops as builtins. The arithmetic follows
tensorflow/lite/kernels/internal (common.h, quantization_util.cc, reference/*) and gemmlowp's fixedpoint.h:
int32 accumulation, double-rounding MultiplyByQuantizedMultiplier, gemmlowp exp and reciprocal. Integers
are carried in int64 and wrapped to int32 where C++ would wrap.

The interpreters' optimized kernels requantize differently at ties (measured on x86-64, see TARGETS); a
Target names the rounding of each op class and how MUL's multiplier is computed, and the cores take one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from . import schema as S

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1


class Requant(NamedTuple):
    """One requantization: TFLite's (multiplier, shift) (real ~ m 2^(shift-31)) and its float forms."""
    multiplier: int
    shift: int
    scale: float = 0.0  # the float32 real multiplier, used by mode "fp32" (XNNPACK)
    real: float = 0.0  # the double real multiplier, used by mode "double"


class Target(NamedTuple):
    """How one interpreter requantizes: rounding modes of BATCH_MATMUL, FULLY_CONNECTED, MUL; MUL's multiplier."""
    matmul: str
    fc: str
    mul: str
    mul_double: bool  # MUL's real multiplier in double (TFLite Micro) instead of float32


# Measured on x86-64 (tests/test_integer_kernels.py). Rounding modes: "away" = TFLite's reference
# (gemmlowp: SRDHM, then a shift with ties away from zero); "up" = SRDHM, then ties toward +inf (tflite-runtime
# 2.14's GEMM back end); "single" = one rounding, (x m + 2^(30-shift)) >> (31-shift) (ruy,
# TFLITE_SINGLE_ROUNDING builds); "fp32" = half-even of float32(acc) * float32 scale (XNNPACK, ai-edge-litert's
# default delegate); "double" = half-away of acc * the double real multiplier (LiteRT 2.3's reference
# FULLY_CONNECTED). L2_NORMALIZATION, SOFTMAX and GATHER are identical everywhere.
TARGETS = {
    "reference": Target("away", "away", "away", False),  # tflite-runtime with OpResolverType.BUILTIN_REF
    "tflite-runtime": Target("up", "up", "away", False),  # default kernels (XNNPACK takes no int8 op here)
    "tflite-micro": Target("away", "away", "away", True),
    "ai-edge-litert": Target("fp32", "fp32", "fp32", False),  # default: XNNPACK takes the matmuls and MUL
    "ai-edge-litert-nodelegate": Target("away", "away", "away", False),  # BUILTIN_WITHOUT_DEFAULT_DELEGATES
    "ai-edge-litert-ref": Target("away", "double", "away", False),  # BUILTIN_REF
}


def target(name_or_target) -> Target:
    """A Target from its TARGETS name (or itself)."""
    return TARGETS[name_or_target] if isinstance(name_or_target, str) else Target(*name_or_target)


# --- multipliers, computed from float32 scales exactly as each kernel's Prepare does -----------------------

def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: real = mult * 2^(shift - 31), mult in [2^30, 2^31)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    x = q * (1 << 31)  # exact: a power-of-two scaling
    q_fixed = int(math.copysign(math.floor(abs(x) + 0.5), x))  # std::round: half away from zero
    if q_fixed == 1 << 31:
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def _f32(x: float) -> np.float32:
    return np.float32(x)


def matmul_multiplier(s_lhs: float, s_rhs: float, s_out: float) -> float:
    """BATCH_MATMUL (GetQuantizedConvolutionMultipler without bias): float32 product, double quotient."""
    return float(_f32(s_lhs) * _f32(s_rhs)) / float(_f32(s_out))


def fc_multiplier(s_in: float, s_w: float, s_out: float) -> float:
    """FULLY_CONNECTED (GetQuantizedConvolutionMultipler with bias argument): all in double."""
    return float(_f32(s_in)) * float(_f32(s_w)) / float(_f32(s_out))


def mul_multiplier(s1: float, s2: float, s_out: float, double: bool = False) -> float:
    """MUL: TFLite computes s1*s2/s_out in float32, TFLite Micro in double."""
    return fc_multiplier(s1, s2, s_out) if double else float(_f32(s1) * _f32(s2) / _f32(s_out))


def add_multipliers(s_a: float, s_b: float, s_out: float, left_shift: int = 20) -> tuple[float, float, float]:
    """ADD / SUB (TFLite Micro's Prepare): the real multipliers of input a, input b and the output. Each input
    is scaled by 2^left_shift over twice the larger float32 input scale (in double)."""
    a, b = float(_f32(s_a)), float(_f32(s_b))
    twice_max = 2.0 * max(a, b)
    return a / twice_max, b / twice_max, twice_max / ((1 << left_shift) * float(_f32(s_out)))


def requant(real: float, s1: float, s2: float, s_out: float) -> Requant:
    """Requant of the double real multiplier, with XNNPACK's float32 scale s1*s2/s_out."""
    return Requant(*quantize_multiplier(real), float(_f32(s1) * _f32(s2) / _f32(s_out)), real)


def softmax_params(s_in: float, beta: float = 1.0) -> tuple[int, int, int]:
    """Int8 SOFTMAX's (input_multiplier, input_left_shift, diff_min) (PreprocessSoftmaxScaling, 5 integer bits)."""
    real = min(float(_f32(beta)) * float(_f32(s_in)) * (1 << 26), (1 << 31) - 1.0)
    mult, shift = quantize_multiplier(real)
    if shift < 0:
        raise ValueError("softmax input scale too small: left shift < 0")
    radius = math.floor(31.0 * (1 << 26) / (1 << shift))  # CalculateInputRadius(5, shift)
    return mult, shift, -radius


# --- gemmlowp / TFLite fixed-point primitives (vectorised; int64 arrays holding int32 values) ---------------

def _i64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.int64)


def wrap32(x) -> np.ndarray:
    """Two's-complement wrap to int32, as C++ int32 arithmetic does on every target here."""
    return ((_i64(x) + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def srdhm(a, b) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul (VQRDMULH): round(a*b / 2^31), ties away from zero, truncating divide."""
    a, b = _i64(a), _i64(b)
    ab = a * b
    s = ab + np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    q = np.where(s >= 0, s >> 31, -((-s) >> 31))
    return np.where((a == b) & (a == I32_MIN), I32_MAX, q)


def rdbpot(x, exponent) -> np.ndarray:
    """RoundingDivideByPOT: arithmetic shift right, ties away from zero."""
    x, e = _i64(x), _i64(exponent)
    mask = (np.int64(1) << e) - 1
    threshold = (mask >> 1) + (x < 0)
    return (x >> e) + ((x & mask) > threshold)


def sat_shl(x, exponent: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT with a positive exponent: saturating shift left."""
    x = _i64(x)
    threshold = (1 << (31 - exponent)) - 1
    return np.where(x > threshold, I32_MAX, np.where(x < -threshold, I32_MIN, x << exponent))


def multiply_by_quantized_multiplier(x, mult, shift) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier (double rounding): RDBPOT(SRDHM(x << left, mult), right)."""
    shift = _i64(shift)
    left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
    return rdbpot(srdhm(wrap32(_i64(x) << left), mult), right)


def requantize_value(acc, rq: Requant, mode: str = "away") -> np.ndarray:
    """int32 accumulator times the requantization's real multiplier, rounded by mode (see TARGETS)."""
    rq = Requant(*rq)
    m, shift = rq.multiplier, _i64(rq.shift)
    if mode == "away":
        return multiply_by_quantized_multiplier(acc, m, shift)
    if mode == "up":
        left, right = np.maximum(shift, 0), np.maximum(-shift, 0)
        y = srdhm(wrap32(_i64(acc) << left), m)
        return (y + ((np.int64(1) << right) >> 1)) >> right
    if mode == "single":
        total = 31 - np.minimum(shift, 30)  # TFLite caps single-rounding shifts at 30
        return (_i64(acc) * m + (np.int64(1) << (total - 1))) >> total
    if mode == "fp32":
        if not rq.scale:
            raise ValueError("mode fp32 needs the Requant's float32 scale")
        y = np.asarray(acc).astype(np.float32) * np.float32(rq.scale)  # float32 product, then half-even
        return np.rint(y).astype(np.int64)
    if mode == "double":
        if not rq.real:
            raise ValueError("mode double needs the Requant's real multiplier")
        y = _i64(acc) * rq.real
        return (np.sign(y) * np.floor(np.abs(y) + 0.5)).astype(np.int64)
    raise ValueError(f"unknown rounding mode {mode!r}")


def requantize(acc, rq: Requant, zp_out: int, mode: str = "away") -> np.ndarray:
    """int32 accumulator -> int8: scale, add the output zero point, clamp."""
    return np.clip(requantize_value(acc, rq, mode) + zp_out, -128, 127).astype(np.int8)


def _clz32(x) -> np.ndarray:
    """Count leading zeros of non-negative int32 values (32 for 0)."""
    x = _i64(x)
    bits = np.zeros(x.shape, np.int64)
    for b in range(32):
        bits = np.where((x >> b) > 0, b + 1, bits)
    return 32 - bits


def inv_sqrt_multiplier(acc) -> tuple[np.ndarray, np.ndarray]:
    """GetInvSqrtQuantizedMultiplierExp(acc, kReverseShift=-1): (multiplier, left shift) of 1/sqrt(acc)."""
    x = _i64(acc)
    shift = np.full(x.shape, 11, np.int64)
    while np.any(x >= 1 << 29):
        big = x >= 1 << 29
        x = np.where(big, x // 4, x)
        shift += big
    safe = np.maximum(x, 2)  # x <= 1 is handled at the end; keep the bit arithmetic defined
    pairs = (_clz32(safe) - 1) // 2 - 1
    shift -= pairs
    x = safe << (2 * pairs)
    half_input = rdbpot(x >> 1, 1)  # F3 value of x, halved
    half_three = (1 << 28) + (1 << 27)  # 1.5 in Q3.28
    y = np.full(x.shape, 1 << 28, np.int64)  # 1.0 in Q3.28
    for _ in range(5):  # Newton-Raphson for 1/sqrt
        y3 = sat_shl(srdhm(srdhm(y, y), y), 6)
        y = sat_shl(wrap32(srdhm(half_three, y) - srdhm(half_input, y3)), 3)
    inv = srdhm(y, 1518500250)  # * sqrt(2)/2
    neg = shift < 0
    inv = np.where(neg, wrap32(inv << np.where(neg, -shift, 0)), inv)
    shift = np.where(neg, 0, shift)
    small = _i64(acc) <= 1
    return np.where(small, I32_MAX, inv), np.where(small, 0, -shift)


def _exp_quarter_interval(a) -> np.ndarray:
    """gemmlowp exp on [-1/4, 0) in Q0.31 (Taylor around -1/8)."""
    c, third = 1895147668, 715827883  # exp(-1/8), 1/3
    x = wrap32(_i64(a) + (1 << 28))
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    t = rdbpot(wrap32(srdhm(wrap32(rdbpot(x4, 2) + x3), third) + x2), 1)
    return wrap32(c + srdhm(c, wrap32(x + t)))


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535),
               (3, 720401), (4, 242))  # exp(-2^e) in Q0.31


def exp_on_negative_values(a, integer_bits: int = 5) -> np.ndarray:
    """gemmlowp exp_on_negative_values for a Q(integer_bits) input; result in Q0.31."""
    a = _i64(a)
    frac = 31 - integer_bits
    quarter = 1 << (frac - 2)
    a_mod = wrap32((a & (quarter - 1)) - quarter)
    result = _exp_quarter_interval(sat_shl(a_mod, integer_bits) if integer_bits else a_mod)
    remainder = wrap32(a_mod - a)
    for e, m in _EXP_BARREL:
        if integer_bits > e:
            result = np.where(remainder & (1 << (frac + e)), srdhm(result, m), result)
    if integer_bits > 5:
        result = np.where(a < -(1 << (36 - integer_bits)), 0, result)
    return np.where(a == 0, I32_MAX, result)


def one_over_one_plus_x(a) -> np.ndarray:
    """gemmlowp one_over_one_plus_x_for_x_in_0_1 (Newton-Raphson, Q2.29 inside), Q0.31 in and out."""
    a = _i64(a)
    s = a + I32_MAX
    half = np.where(s >= 0, (s + 1) >> 1, -((1 - s) >> 1))  # RoundingHalfSum(a, 1.0): (s +- 1) / 2, truncated
    x = wrap32(1515870810 + srdhm(half, -1010580540))  # 48/17 - 32/17 * d
    for _ in range(3):
        x = wrap32(x + sat_shl(srdhm(x, wrap32((1 << 29) - srdhm(half, x))), 2))
    return sat_shl(x, 1)


def reciprocal(x, integer_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """TFLite GetReciprocal: (1/x in Q0.31 scaled to [0.5, 1), num_bits_over_unit)."""
    x = _i64(x)
    headroom = _clz32(x)
    shifted = wrap32(((x << headroom) & 0xFFFFFFFF) - (1 << 31))
    return one_over_one_plus_x(shifted), integer_bits - headroom


# --- ops --------------------------------------------------------------------------------------------------

def batch_matmul_int8(a, b, zp_a: int, zp_b: int, zp_out: int, rq: Requant, adj_y: bool = False,
                      mode: str = "away") -> np.ndarray:
    """BATCH_MATMUL int8 x int8 -> int8 over the last two axes (batch axes broadcast)."""
    a32 = _i64(a) - zp_a
    b32 = _i64(b) - zp_b
    if adj_y:
        b32 = np.swapaxes(b32, -1, -2)
    return requantize(wrap32(a32 @ b32), rq, zp_out, mode)


def fully_connected_int8(x, w, zp_x: int, zp_out: int, rq: Requant, mode: str = "away") -> np.ndarray:
    """FULLY_CONNECTED int8 (weights [units, depth], zero point 0, no bias) over the last axis."""
    return requantize(wrap32((_i64(x) - zp_x) @ _i64(w).T), rq, zp_out, mode)


def l2norm_int8(x, zp_in: int = 0) -> np.ndarray:
    """L2_NORMALIZATION int8 over the last axis; output scale 1/128, zero point 0 (all-zero rows give 0)."""
    d = _i64(x) - zp_in
    mult, shift = inv_sqrt_multiplier((d * d).sum(-1))
    y = multiply_by_quantized_multiplier(d, mult[..., None], shift[..., None] + 7)
    return np.clip(y, -128, 127).astype(np.int8)


def mul_int8(a, b, zp_a: int, zp_b: int, zp_out: int, rq: Requant, mode: str = "away") -> np.ndarray:
    """MUL int8 with broadcasting."""
    return requantize(wrap32((_i64(a) - zp_a) * (_i64(b) - zp_b)), rq, zp_out, mode)


def gather_lut(table, x) -> np.ndarray:
    """GATHER(table[256], x + 128): an int8 -> int8 lookup table."""
    return np.asarray(table, np.int8)[_i64(x) + 128]


def softmax_int8(x, mult: int, left_shift: int, diff_min: int) -> np.ndarray:
    """TFLite (Micro) reference int8 SOFTMAX over the last axis; output scale 1/256, zero point -128."""
    x = _i64(x)
    diff = x - x.max(-1, keepdims=True)
    valid = diff >= diff_min
    scaled = srdhm(wrap32(diff << left_shift), mult)  # MultiplyByQuantizedMultiplierGreaterThanOne
    e = exp_on_negative_values(scaled, 5)
    total = wrap32(np.where(valid, rdbpot(e, 12), 0).sum(-1, keepdims=True))  # Q12.19 accumulator
    scale, bits_over_unit = reciprocal(total, 12)
    exponent = bits_over_unit + 31 - 8
    y = rdbpot(srdhm(scale, e), exponent) - 128
    return np.where(valid, np.clip(y, -128, 127), -128).astype(np.int8)


def softmax_exp_table(mult: int, left_shift: int, diff_min: int) -> np.ndarray:
    """int32[256]: entry d is SOFTMAX's Q0.31 exp of diff = -d (0 where diff < diff_min, left out)."""
    diff = -np.arange(256, dtype=np.int64)
    e = exp_on_negative_values(srdhm(wrap32(diff << left_shift), mult), 5)
    return np.where(diff >= diff_min, e, 0).astype(np.int32)


# --- the two attention cores ------------------------------------------------------------------------------

NONNEGATIVE = ("w", "c", "sum", "inv", "a")  # points >= 0 by construction: zero point -128 by default
ZP_DEFAULT = {n: -128 if n in NONNEGATIVE else 0 for n in S.OSC.zero_points}  # q k v r qk w h zr c sum inv a out
SOFTMAX_ZP_DEFAULT = dict.fromkeys(S.SOFTMAX.zero_points, 0)  # q k v qk out
SCALE_UNIT = 1.0 / 128  # L2_NORMALIZATION's fixed int8 output scale (zero point 0): wn and z


def core_tables(scales: dict, d_h: int, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int8 tables of softplus(qk / sqrt(d_h)), (1 + zr)^p and 1/sum on a core's scales (non-negative
    outputs at zero point -128): plausible tables for benchmarks and tests of the cores."""
    i = np.arange(256) - 128

    def q8(x, scale):
        return np.clip(np.round(x / scale) - 128, -128, 127).astype(np.int8)

    w = q8(np.log1p(np.exp(scales["qk"] * i / np.sqrt(d_h))), scales["w"])
    c = q8((1 + np.clip(scales["zr"] * i, -1, 1)) ** p, scales["c"])
    inv = q8(1 / np.maximum(scales["sum"] * (i + 128), 1e-3), scales["inv"])
    return w, c, inv


@dataclass
class OscQuant:
    """Integer parameters of the oscillator core (steps 1-10); build with osc_quant_from_scales."""
    table_w: np.ndarray
    table_c: np.ndarray
    table_inv: np.ndarray
    rq_qk: Requant
    rq_h: Requant
    rq_zr: Requant
    rq_sum: Requant
    rq_a: Requant
    rq_out: Requant
    zp: dict = field(default_factory=lambda: dict(ZP_DEFAULT))  # by point: q k v r qk w h zr c sum inv a out
    ones: int = 1  # value of step 7's int8 all-ones constant (zero point 0)
    rounding: tuple = ("away", "away", "away")  # modes of the matmuls (1 3 5 10), the sum (7), MUL (9)

    def fields(self, heads: int, tokens: int, d_head: int, d_osc: int, d_value: int) -> dict:
        """EdgeoscOscParams by field name (schema.OSC): tables as arrays, rounding as the C enum."""
        return S.OSC.ordered(dict(
            heads=heads, tokens=tokens, d_head=d_head, d_osc=d_osc, d_value=d_value,
            **{n: getattr(self, n) for n in S.OSC.role("table")}, **{f"zp_{n}": self.zp[n] for n in S.OSC.zero_points},
            ones=self.ones, **{n: getattr(self, n) for n in S.OSC.role("requant")},
            **{n: S.c_rounding(m) for n, m in zip(S.OSC.role("rounding"), self.rounding)}))


def osc_quant_from_scales(scales: dict, table_w, table_c, table_inv, zp: dict | None = None, ones: int = 1,
                          ones_scale: float = 1.0, sum_op: str = "batch_matmul",
                          target_name="reference") -> OscQuant:
    """Multipliers as the target interpreter's Prepare computes them from float32 scales.

    scales: q k v r qk w h zr c sum inv a out (w's scale drops out: h reads the unit rows wn at 1/128;
    "sum" is the point the model calls "csum"). sum_op is step 7's op, "batch_matmul" (an int8 ones
    column) or "fully_connected" (all-ones weights): the same integers, but the multiplier arithmetic and
    (per target) the rounding differ.
    """
    t = target(target_name)
    fc = sum_op == "fully_connected"
    return OscQuant(
        table_w=np.asarray(table_w, np.int8), table_c=np.asarray(table_c, np.int8),
        table_inv=np.asarray(table_inv, np.int8), **osc_requants(scales, ones_scale, sum_op, t),
        zp={**ZP_DEFAULT, **(zp or {})}, ones=ones, rounding=(t.matmul, t.fc if fc else t.matmul, t.mul))


def osc_requants(scales: dict, ones_scale: float = 1.0, sum_op: str = "batch_matmul",
                 target_name="reference") -> dict[str, Requant]:
    """The oscillator core's rq_* (schema.OSC's requant fields) from its points' float32 scales (q k v r qk h
    zr c sum inv a out), as the target's Prepare computes them (see osc_quant_from_scales)."""
    s, t = scales, target(target_name)
    if sum_op not in ("batch_matmul", "fully_connected"):
        raise ValueError(f"unknown sum_op {sum_op!r}")
    summ = fc_multiplier if sum_op == "fully_connected" else matmul_multiplier
    mm = lambda a, b, o: requant(matmul_multiplier(a, b, o), a, b, o)  # noqa: E731
    return dict(
        rq_qk=mm(s["q"], s["k"], s["qk"]), rq_h=mm(SCALE_UNIT, s["r"], s["h"]), rq_zr=mm(SCALE_UNIT, s["r"], s["zr"]),
        rq_sum=requant(summ(s["c"], ones_scale, s["sum"]), s["c"], ones_scale, s["sum"]),
        rq_a=requant(mul_multiplier(s["c"], s["inv"], s["a"], t.mul_double), s["c"], s["inv"], s["a"]),
        rq_out=mm(s["a"], s["v"], s["out"]))


def oscillator_core_int8(p: OscQuant, q, k, v, r, return_all: bool = False):
    """Steps 1-10 on [H, T, *] int8 tensors: out [H, T, dv] (and every intermediate if return_all).

    Step 2 ends with wn = L2_NORMALIZATION(w) (1/128, 0): h = wn r, so each w row enters h as a unit vector.
    """
    z0, (mm, ms, mul) = p.zp, p.rounding
    t = {}
    t["qk"] = batch_matmul_int8(q, k, z0["q"], z0["k"], z0["qk"], p.rq_qk, adj_y=True, mode=mm)
    t["w"] = gather_lut(p.table_w, t["qk"])
    t["wn"] = l2norm_int8(t["w"], z0["w"])
    t["h"] = batch_matmul_int8(t["wn"], r, 0, z0["r"], z0["h"], p.rq_h, mode=mm)
    t["z"] = l2norm_int8(t["h"], z0["h"])
    t["zr"] = batch_matmul_int8(t["z"], r, 0, z0["r"], z0["zr"], p.rq_zr, adj_y=True, mode=mm)
    t["c"] = gather_lut(p.table_c, t["zr"])
    ones = np.full((np.shape(t["c"])[-1], 1), p.ones, np.int8)
    t["sum"] = batch_matmul_int8(t["c"], ones, z0["c"], 0, z0["sum"], p.rq_sum, mode=ms)
    t["inv"] = gather_lut(p.table_inv, t["sum"])
    t["a"] = mul_int8(t["c"], t["inv"], z0["c"], z0["inv"], z0["a"], p.rq_a, mode=mul)
    t["out"] = batch_matmul_int8(t["a"], v, z0["a"], z0["v"], z0["out"], p.rq_out, mode=mm)
    return (t["out"], t) if return_all else t["out"]


@dataclass
class SoftmaxQuant:
    """Integer parameters of the softmax baseline core (qk matmul, int8 softmax, p v matmul)."""
    rq_qk: Requant
    rq_out: Requant
    beta_multiplier: int
    beta_left_shift: int
    diff_min: int
    zp: dict = field(default_factory=lambda: dict(SOFTMAX_ZP_DEFAULT))
    rounding: str = "away"  # of the two matmuls

    def fields(self, heads: int, tokens: int, d_head: int, d_value: int, exp_lut=None, queries: int = 0) -> dict:
        """EdgeoscSoftmaxParams by field name (schema.SOFTMAX); exp_lut None: the fixed-point exp per element."""
        return S.SOFTMAX.ordered(dict(
            heads=heads, tokens=tokens, d_head=d_head, d_value=d_value, queries=queries,
            **{f"zp_{n}": self.zp[n] for n in S.SOFTMAX.zero_points}, rq_qk=self.rq_qk, rq_out=self.rq_out,
            beta_multiplier=self.beta_multiplier, beta_left_shift=self.beta_left_shift, diff_min=self.diff_min,
            round_matmul=S.c_rounding(self.rounding), exp_lut=exp_lut))


def softmax_quant_from_scales(scales: dict, beta: float = 1.0, zp: dict | None = None,
                              target_name="reference") -> SoftmaxQuant:
    """From float32 scales (q k v qk out); the softmax output is fixed at (1/256, -128)."""
    s = scales
    mult, shift, diff_min = softmax_params(s["qk"], beta)
    return SoftmaxQuant(rq_qk=requant(matmul_multiplier(s["q"], s["k"], s["qk"]), s["q"], s["k"], s["qk"]),
                        rq_out=requant(matmul_multiplier(1 / 256, s["v"], s["out"]), 1 / 256, s["v"], s["out"]),
                        beta_multiplier=mult, beta_left_shift=shift, diff_min=diff_min,
                        zp={**SOFTMAX_ZP_DEFAULT, **(zp or {})},
                        rounding=target(target_name).matmul)


def softmax_core_int8(p: SoftmaxQuant, q, k, v, return_all: bool = False):
    """qk = q k^T (int8), a = SOFTMAX(qk) (1/256, -128), out = a v: [H, T, dv]."""
    z0, mm = p.zp, p.rounding
    t = {"qk": batch_matmul_int8(q, k, z0["q"], z0["k"], z0["qk"], p.rq_qk, adj_y=True, mode=mm)}
    t["a"] = softmax_int8(t["qk"], p.beta_multiplier, p.beta_left_shift, p.diff_min)
    t["out"] = batch_matmul_int8(t["a"], v, -128, z0["v"], z0["out"], p.rq_out, mode=mm)
    return (t["out"], t) if return_all else t["out"]


# --- the linear oscillator core (d_osc 2) ------------------------------------------------------------------
# docs/maths.md#integer-linear-core. A state of int32 sums over keys, each an outer product of a key's features
# with a value: the coupling's [1, K_a, K_a K_b (a <= b)] x r_j, the readout's g_j [1, cos m f_j, sin m f_j] x
# [v_j, 1]. A query contracts them with its own coefficients in int64. Keys enter the state in any order and
# leave it by subtraction (two's-complement sums wrap and unwrap exactly): what a stream carries between frames.

LINEAR_P = (1, 8)  # the readout's powers the kernel's int64 sums hold: its weights 2^p a_m sum to 4^p, so a query's
# numerators stay below 196 keys x 2^8 x 2^15 x 4^p x 2^15 = 2^(45.6 + 2p), 2^61.6 at p = 8
LINEAR_C1 = (16, 1 << 20)  # coupling coefficients round(2 / s) the bounds hold for (and taylor2 within 3%)
Q15 = 1 << 15
UNGATED = 256  # a key's gate without the key gate: the readout's features stay Q15


@dataclass
class LinearQuant:
    """Integer parameters of the linear oscillator core; build with linear_quant_from_scales."""
    p: int
    c1: int  # round(2 / s): 4 taylor2(s X) / s^2 = 2 X^2 + 2 c1 X + c1^2 with X = Q.K, exactly when c1 = 2 / s
    rq_out: Requant  # v's scale over out's: the readout is a weighted mean of the v_j
    zp: dict = field(default_factory=lambda: dict.fromkeys(S.LINEAR.zero_points, 0))  # q k v g out
    causal: bool = False
    window: int = 0  # > 0 (causal): query i reads keys j in (i - window, i]
    turn: tuple[int, ...] | None = None  # per head, the anchors' turn a frame in steps of 2^-16 turns (turn_steps)

    def fields(self, heads: int, tokens: int, d_head: int, d_value: int, t0: int = 0) -> dict:
        """EdgeoscLinearParams by field name (schema.LINEAR); turn is the tuple (the caller points to it)."""
        if self.turn is not None and len(self.turn) != heads:
            raise ValueError(f"linear core: {len(self.turn)} turn rates for {heads} heads")
        return S.LINEAR.ordered(dict(heads=heads, tokens=tokens, d_head=d_head, d_value=d_value, p=self.p,
                                     causal=int(self.causal), window=self.window,
                                     **{f"zp_{n}": self.zp[n] for n in S.LINEAR.zero_points},
                                     c1=self.c1, rq_out=self.rq_out, turn=self.turn, t0=_uint32(t0)))


def linear_state_words(d_head: int, d_value: int, p: int) -> int:
    """int32 words of one head's state (EDGEOSC_LINEAR_STATE_WORDS): 2 per coupling feature, d_v + 1 per readout one."""
    return 2 * (1 + d_head + d_head * (d_head + 1) // 2) + (2 * p + 1) * (d_value + 1)


def linear_quant_from_scales(scales: dict, d_head: int, p: int, zp: dict | None = None,
                             causal: bool = False, window: int = 0, turn=None) -> LinearQuant:
    """From the float32 scales of q, k, v, out (r and z are unit vectors at 1/128); refuses what the kernel's
    integer bounds do not hold. turn: per head, the anchors' turn a frame (turn_steps), or None."""
    if not LINEAR_P[0] <= p <= LINEAR_P[1]:
        raise ValueError(f"linear core: p = {p} is out of range {LINEAR_P[0]}..{LINEAR_P[1]}")
    if window < 0 or (window and not causal):
        raise ValueError(f"linear core: window {window}: a sliding window is causal and >= 0")
    if turn is not None:
        turn = tuple(int(x) for x in turn)
        if not all(0 <= x < TURN_STEPS for x in turn):
            raise ValueError(f"linear core: turn rates {turn}: steps of 2^-16 turns, in [0, 2^16)")
    s = float(_f32(scales["q"])) * float(_f32(scales["k"])) / math.sqrt(d_head)
    c1 = math.floor(2.0 / s + 0.5)  # as the custom op's Prepare computes it
    if not LINEAR_C1[0] <= c1 < LINEAR_C1[1]:
        raise ValueError(f"linear core: the score scale {s:.3g} (q's x k's / sqrt(d_head)) gives coupling "
                         f"coefficient 2 / s = {c1}, outside [{LINEAR_C1[0]}, {LINEAR_C1[1]})")
    rq = requant(fc_multiplier(1.0, scales["v"], scales["out"]), 1.0, scales["v"], scales["out"])
    if not -10 <= rq.shift <= 20:
        raise ValueError(f"linear core: v's scale over out's ({rq.real:.3g}) is out of range")
    return LinearQuant(p, c1, rq, {**dict.fromkeys(S.LINEAR.zero_points, 0), **(zp or {})}, causal, window, turn)


def _bitlen(x) -> np.ndarray:
    """Bit length of non-negative int64 values (0 for 0)."""
    x, n = _i64(x), np.zeros(np.shape(x), np.int64)
    for s in (32, 16, 8, 4, 2, 1):
        big = (x >> s) > 0
        x, n = np.where(big, x >> s, x), n + big * s
    return n + (x > 0)


def _shift_round(x, e) -> np.ndarray:
    """x / 2^e rounded half up (e > 0), x * 2^-e (e <= 0); int64."""
    x, e = _i64(x), _i64(e)
    right = np.maximum(e, 0)
    up = (x + np.where(right > 0, np.int64(1) << np.maximum(right - 1, 0), 0)) >> right
    return np.where(e > 0, up, x << np.maximum(-e, 0))


def harmonics_q15(x, p: int) -> np.ndarray:
    """[cos m t, sin m t for m = 1..p] in Q15 of x = 128 (cos t, sin t) (int8 at 1/128), as the powers
    (x_0 + i x_1)^m, each product rounded back to Q15: [..., 2p]."""
    x = _i64(x)
    c, s = x[..., 0] << 8, x[..., 1] << 8
    out = []
    for _ in range(p):
        out += [c, s]
        c, s = (c * x[..., 0] - s * x[..., 1] + 64) >> 7, (s * x[..., 0] + c * x[..., 1] + 64) >> 7
    return np.stack(out, -1)


def readout_weights(p: int) -> list[int]:
    """2^p a_m, m = 0..p: the integer weights of (1 + cos d)^p = sum_m a_m cos(m d) (70, 112, 56, 16, 2 at p = 4)."""
    return [math.comb(2 * p, p - m) * (1 if m == 0 else 2) for m in range(p + 1)]


def linear_key_features(k, v, r, g, pq: LinearQuant) -> tuple[np.ndarray, np.ndarray]:
    """One key's contributions to the two states: [.., 1 + d_h + d_h(d_h+1)/2, 2] and [.., 2p + 1, d_v + 1]."""
    K, rr, V = _i64(k) - pq.zp["k"], _i64(r), _i64(v) - pq.zp["v"]
    a, b = np.triu_indices(K.shape[-1])  # a <= b, row-major: the order of the C loops
    phi = np.concatenate([np.ones(K.shape[:-1] + (1,), np.int64), K, K[..., a] * K[..., b]], -1)
    G = np.full(K.shape[:-1], UNGATED, np.int64) if g is None else _i64(g) - pq.zp["g"]
    u = np.concatenate([(G << 7)[..., None], (G[..., None] * harmonics_q15(rr, pq.p) + 128) >> 8], -1)
    V1 = np.concatenate([V, np.ones(V.shape[:-1] + (1,), np.int64)], -1)
    return phi[..., :, None] * rr[..., None, :], u[..., :, None] * V1[..., None, :]


def linear_state(q, k, v, r, g, pq: LinearQuant) -> tuple[np.ndarray, np.ndarray]:
    """The int32 states each query reads, [H, T, Fc, 2] and [H, T, Fr, d_v + 1]: sums over all keys, or over
    j <= i when causal, i - window < j <= i with a window (as int32 sums wrap)."""
    sc, sr = linear_key_features(k, v, r, g, pq)
    if pq.causal:
        def running(f):  # prefix sums, less those `window` keys back
            s = np.cumsum(f, 1)
            if pq.window:
                s[:, pq.window:] -= s[:, :-pq.window].copy()
            return wrap32(s)
        return running(sc), running(sr)
    T = np.shape(q)[1]
    return (np.repeat(wrap32(sc.sum(1, keepdims=True)), T, 1), np.repeat(wrap32(sr.sum(1, keepdims=True)), T, 1))


def linear_query(q, state_c, state_r, pq: LinearQuant, return_all: bool = False):
    """Each query against its state: z from the coupling, then the readout divided once per query."""
    Q = _i64(q) - pq.zp["q"]
    a, b = np.triu_indices(Q.shape[-1])
    alpha = np.concatenate([np.full(Q.shape[:-1] + (1,), pq.c1 * pq.c1, np.int64), 2 * pq.c1 * Q,
                            np.where(a == b, 2, 4) * Q[..., a] * Q[..., b]], -1)
    h = np.einsum("...f,...fe->...e", alpha, _i64(state_c))  # 2 x 2/s^2 sum_j taylor2(q.k_j) r_j, < 2^57
    n = _bitlen(np.abs(h).max(-1, keepdims=True))
    z = l2norm_int8(_shift_round(h, n - 14))  # the direction of h in 14 bits, then TFLite's L2 norm (h = 0: z = 0)
    w = _i64(readout_weights(pq.p))
    beta = np.concatenate([np.broadcast_to(w[0] * Q15, z.shape[:-1] + (1,)),
                           harmonics_q15(z, pq.p) * np.repeat(w[1:], 2)], -1)
    nd = np.einsum("...f,...fd->...d", beta, _i64(state_r))  # numerators and the denominator (LINEAR_P)
    out = linear_divide(nd[..., :-1], nd[..., -1:], pq)
    return (out, dict(h=h, z=z, nd=nd)) if return_all else out


def linear_divide(num, den, pq: LinearQuant) -> np.ndarray:
    """out = num / den x v's scale over out's, with one integer division per query: den to 22 bits, then
    (m 2^21 / den) a multiplier of the numerators (shifted alike, saturated to int32). den <= 0 (no weight on any key): out = 0."""
    num, den = _i64(num), _i64(den)
    e = _bitlen(np.maximum(den, 0)) - 22
    d = np.maximum(_shift_round(den, e), 1)  # [2^21, 2^22]
    big = np.int64(1) << 40  # a left shift (den < 2^21) of a numerator beyond 2^40 saturates anyway
    nd = np.clip(_shift_round(np.where(e > 0, num, np.clip(num, -big, big)), e), I32_MIN, I32_MAX)
    inv = (np.int64(pq.rq_out.multiplier) << 21) // d
    y = _shift_round(nd * inv, 52 - pq.rq_out.shift) + pq.zp["out"]
    return np.where(den > 0, np.clip(y, -128, 127), pq.zp["out"]).astype(np.int8)


def linear_core_int8(pq: LinearQuant, q, k, v, r, g=None, return_all: bool = False, t0: int = 0):
    """The linear core on [H, T, *] int8 tensors (r [H, T, 2] at 1/128; g [H, T] the unit key gates or None):
    out [H, T, d_v]. With pq.turn, token i's anchor first turns by turn (t0 + i) (turn_anchors)."""
    sc, sr = linear_state(q, k, v, turn_anchors(r, pq.turn, t0), g, pq)
    return linear_query(q, sc, sr, pq, return_all)


# --- a stream's relative positions: the anchors turn a fixed angle a frame (docs/maths.md#streaming) -------------
# Frame t's anchor turns by turn_h t steps of a 2^16-step circle (t a uint32 frame count: 2^32 is a multiple of
# 2^16, so the phase stays exact as t wraps), its cosine and sine in Q15 linear between 257 points of a quarter
# wave (error < 0.2 of Q15's unit). Every runtime turns by these integers, so a stream's age changes nothing.
TURN_STEPS = 1 << 16
COS_QUARTER_Q15 = np.round(Q15 * np.cos(np.pi / 2 * np.arange(257) / 256)).astype(np.int64)


def turn_steps(omega) -> tuple[int, ...]:
    """Per head, a turn of omega radians a frame in steps of 2^-16 turns (the rotating anchors' omega)."""
    return tuple(int(round(float(w) * TURN_STEPS / (2 * math.pi))) % TURN_STEPS for w in np.ravel(omega))


def _uint32(x: int) -> int:
    """A uint32 frame number as the int32 a C struct holds."""
    x = int(x) & 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def _quarter_cos(y) -> np.ndarray:
    """cos(pi/2 y / 2^14) in Q15 for y in [0, 2^14], linear between the table's points (rounded down)."""
    i, f = y >> 6, y & 63
    lo, hi = COS_QUARTER_Q15[i], COS_QUARTER_Q15[np.minimum(i + 1, 256)]
    return lo + (((hi - lo) * f + 32) >> 6)


def cos_sin_q15(phase) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) in Q15 of phase steps of 2^-16 turns (any integers: taken mod 2^16)."""
    u = _i64(phase) & (TURN_STEPS - 1)
    quadrant, x = u >> 14, u & 0x3FFF
    c, s = _quarter_cos(x), _quarter_cos(0x4000 - x)
    return (np.choose(quadrant, [c, -s, -c, s]), np.choose(quadrant, [s, c, -s, -c]))


def turn_anchors(r, turn, t0: int = 0) -> np.ndarray:
    """r [H, T, 2] (int8 unit vectors at 1/128) with token i's turned by turn_h (t0 + i) steps, rounded half up to
    int8; r itself when turn is None."""
    if turn is None:
        return np.asarray(r)
    H, T = np.shape(r)[:2]
    t = (int(t0) + np.arange(T, dtype=np.int64)) & 0xFFFFFFFF
    c, s = cos_sin_q15((_i64(turn)[:, None] * t) & (TURN_STEPS - 1))  # [H, T]
    x, y = _i64(r)[..., 0], _i64(r)[..., 1]
    out = np.stack([(c * x - s * y + (1 << 14)) >> 15, (s * x + c * y + (1 << 14)) >> 15], -1)
    return np.clip(out, -128, 127).astype(np.int8)


@dataclass
class LinearStream:
    """A stream's state of the windowed linear core, what it carries from one frame to the next (all heads):
    clock [3] int32: the next frame's number t (uint32, wraps; the anchors' turn), keys held n <= window, the
    ring's next slot; sums [H, words] int32: the two sums over the held keys; kept [H, window, d_h + d_v + 3] int8:
    each held key's k, v, turned anchor and gate, to subtract its terms when it expires. zeros (t) starts one."""
    clock: np.ndarray
    sums: np.ndarray
    kept: np.ndarray

    @classmethod
    def zeros(cls, heads: int, d_head: int, d_value: int, p: int, window: int, t: int = 0) -> LinearStream:
        return cls(np.array([_uint32(t), 0, 0], np.int32), np.zeros((heads, linear_state_words(d_head, d_value, p)),
                   np.int32), np.zeros((heads, window, d_head + d_value + 3), np.int8))


def linear_stream_int8(pq: LinearQuant, state: LinearStream, q, k, v, r, g=None) -> tuple[np.ndarray, LinearStream]:
    """T more frames [H, T, *] of a stream through the windowed core (pq.window > 0): out [H, T, d_v] and the new
    state. Each frame adds its key, subtracts the one `window` frames back (once n = window), then queries: a
    stream started from LinearStream.zeros(..., t0) equals linear_core_int8(..., t0=t0) over the same frames."""
    W = pq.window
    if not (pq.causal and W > 0):
        raise ValueError("a stream runs the windowed core (causal, window > 0)")
    q, k, v, r = (np.asarray(a) for a in (q, k, v, r))
    H, T, dh = q.shape
    dv = v.shape[-1]
    if state.kept.shape != (H, W, dh + dv + 3) or state.sums.shape != (H, linear_state_words(dh, dv, pq.p)):
        raise ValueError(f"stream state of shapes {state.kept.shape} / {state.sums.shape} is not this core's "
                         f"({(H, W, dh + dv + 3)} / {(H, linear_state_words(dh, dv, pq.p))})")
    t, n, slot = (int(x) for x in state.clock)
    sums, kept = _i64(state.sums), state.kept.copy()
    gate = np.zeros((H, T), np.int8) if g is None else np.asarray(g)
    fc = 2 * (1 + dh + dh * (dh + 1) // 2)
    outs = []

    def terms(kk, vv, rr, gg):  # [H, words]: one key's terms of both sums
        sc, sr = linear_key_features(kk, vv, rr, None if g is None else gg, pq)
        return np.concatenate([sc.reshape(H, -1), sr.reshape(H, -1)], -1)

    for i in range(T):
        rt = turn_anchors(r[:, i:i + 1], pq.turn, t)[:, 0]
        sums = sums + terms(k[:, i], v[:, i], rt, gate[:, i])
        if n == W:  # the oldest held key expires
            old = kept[:, slot]
            sums = sums - terms(old[:, :dh], old[:, dh:dh + dv], old[:, dh + dv:dh + dv + 2], old[:, -1])
        kept[:, slot] = np.concatenate([k[:, i], v[:, i], rt, gate[:, i:i + 1]], -1)
        sums = wrap32(sums)
        outs.append(linear_query(q[:, i:i + 1], sums[:, None, :fc].reshape(H, 1, -1, 2),
                                 sums[:, None, fc:].reshape(H, 1, -1, dv + 1), pq))
        t, n, slot = (t + 1) & 0xFFFFFFFF, min(n + 1, W), (slot + 1) % W
    return np.concatenate(outs, 1), LinearStream(np.array([_uint32(t), n, slot], np.int32),
                                                 sums.astype(np.int32), kept)
