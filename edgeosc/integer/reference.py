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
