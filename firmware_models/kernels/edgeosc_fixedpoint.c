/* Integer helpers reproducing TFLite's quantized arithmetic (see edgeosc_fixedpoint.h). */
#include "edgeosc_fixedpoint.h"

#include "edgeosc_simd.h"

#if EDGEOSC_DSP
#define SRDHM edgeosc_srdhm_dsp /* the Newton loops below: 32-bit products, one SMULL each */
#else
#define SRDHM edgeosc_srdhm
#endif

#define I32_MAX ((int32_t)0x7FFFFFFF)
#define I32_MIN ((int32_t)(-I32_MAX - 1))

/* Wrapping int32 add/sub/shift: C++ TFLite wraps in practice; in C signed overflow is UB. */
static int32_t wadd(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
static int32_t wsub(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
static int32_t wshl(int32_t a, int s) { return (int32_t)((uint32_t)a << s); }

int32_t edgeosc_mbqm_mode(int32_t x, int32_t multiplier, int shift, int rounding) {
  if (rounding == EDGEOSC_ROUND_SINGLE) {
    const int total = shift < 31 ? 31 - shift : 1; /* TFLite caps single-rounding shifts at 30 */
    const int64_t r = ((int64_t)x * multiplier + ((int64_t)1 << (total - 1))) >> total;
    return (int32_t)r;
  }
  if (rounding == EDGEOSC_ROUND_UP) {
    const int left = shift > 0 ? shift : 0;
    const int right = shift > 0 ? 0 : -shift;
    const int64_t y = edgeosc_srdhm(wshl(x, left), multiplier);
    return right ? (int32_t)((y + ((int64_t)1 << (right - 1))) >> right) : (int32_t)y;
  }
  return edgeosc_mbqm(x, multiplier, shift);
}

static int clz32(uint32_t x) {
#if defined(__GNUC__)
  return x ? __builtin_clz(x) : 32; /* CLZ on Arm */
#else
  int n = 0;
  if (x == 0) return 32;
  while (!(x & 0x80000000u)) {
    x <<= 1;
    ++n;
  }
  return n;
#endif
}

/* gemmlowp SaturatingRoundingMultiplyByPOT with a positive exponent. */
static int32_t sat_shl(int32_t x, int exponent) {
  const int32_t threshold = (int32_t)(((int64_t)1 << (31 - exponent)) - 1);
  if (x > threshold) return I32_MAX;
  if (x < -threshold) return I32_MIN;
  return wshl(x, exponent);
}

void edgeosc_inv_sqrt_multiplier(int32_t x, int32_t *multiplier, int *shift) {
  int s = 11, pairs, i;
  int32_t half_input, y, inv;
  const int32_t half_three = (1 << 28) + (1 << 27); /* 1.5 in Q3.28 */
  if (x <= 1) { /* TFLite treats 0 like 1: an all-zero row stays zero */
    *multiplier = I32_MAX;
    *shift = 0;
    return;
  }
  while (x >= (1 << 29)) {
    x /= 4;
    ++s;
  }
  pairs = (clz32((uint32_t)x) - 1) / 2 - 1;
  s -= pairs;
  x <<= 2 * pairs;
  half_input = edgeosc_rdbpot(x >> 1, 1);
  y = 1 << 28; /* Newton-Raphson from 1.0 in Q3.28 */
#if EDGEOSC_DSP
  /* SRDHM(a, b) = floor((a b + 2^30) / 2^31) = SMMULR(a, 2 b) where 2 b fits int32: 1.5 and half_input are below
   * 2^28, and y stays in [2^28, 2^29) (1/sqrt of the normalised x, from 1.0 in Q3.28). Nor does any step saturate:
   * both checked over every normalised x in [2^27, 2^29) against TFLite's arithmetic (docs/notebook.md), so the
   * steps here are five straight runs of SMMULR with plain shifts. */
#pragma GCC unroll 5
  for (i = 0; i < 5; ++i) {
    const int32_t y2x = y * 2, y3 = edgeosc_smmulr(edgeosc_smmulr(y, y2x), y2x) << 6;
    y = (edgeosc_smmulr(y, 2 * half_three) - edgeosc_smmulr(y3, 2 * half_input)) << 3;
  }
#else
  for (i = 0; i < 5; ++i) {
    const int32_t y3 = sat_shl(SRDHM(SRDHM(y, y), y), 6);
    y = sat_shl(wsub(SRDHM(half_three, y), SRDHM(half_input, y3)), 3);
  }
#endif
  inv = SRDHM(y, 1518500250); /* * sqrt(2)/2 */
  if (s < 0) {
    inv = wshl(inv, -s);
    s = 0;
  }
  *multiplier = inv;
  *shift = -s;
}

/* exp on [-1/4, 0) in Q0.31: Taylor expansion around -1/8 (gemmlowp). */
static int32_t exp_quarter(int32_t a) {
  const int32_t c = 1895147668, third = 715827883; /* exp(-1/8), 1/3 */
  const int32_t x = wadd(a, 1 << 28);
  const int32_t x2 = edgeosc_srdhm(x, x);
  const int32_t x3 = edgeosc_srdhm(x2, x);
  const int32_t x4 = edgeosc_srdhm(x2, x2);
  const int32_t t = edgeosc_rdbpot(
      wadd(edgeosc_srdhm(wadd(edgeosc_rdbpot(x4, 2), x3), third), x2), 1);
  return wadd(c, edgeosc_srdhm(c, wadd(x, t)));
}

int32_t edgeosc_exp_on_negative_values_q5(int32_t a) {
  static const int32_t barrel[7] = {1672461947, 1302514674, 790015084, 290630308,
                                    39332535,   720401,     242}; /* exp(-2^k), k = -2..4 */
  const int32_t quarter = 1 << 24;                               /* 1/4 in Q5.26 */
  const int32_t a_mod = wsub(a & (quarter - 1), quarter);
  const int32_t remainder = wsub(a_mod, a);
  int32_t result = exp_quarter(sat_shl(a_mod, 5));
  int k;
  for (k = 0; k < 7; ++k) {
    if (remainder & (1 << (24 + k))) result = edgeosc_srdhm(result, barrel[k]);
  }
  return a == 0 ? I32_MAX : result;
}

int32_t edgeosc_one_over_one_plus_x(int32_t a) {
  const int64_t s = (int64_t)a + I32_MAX;
  const int32_t half = (int32_t)((s + (s >= 0 ? 1 : -1)) / 2); /* RoundingHalfSum(a, 1.0) */
  int32_t x = wadd(1515870810, edgeosc_srdhm(half, -1010580540)); /* 48/17 - 32/17 d, Q2.29 */
  int i;
  for (i = 0; i < 3; ++i) {
    const int32_t one_minus = wsub(1 << 29, SRDHM(half, x));
    x = wadd(x, sat_shl(SRDHM(x, one_minus), 2));
  }
  return sat_shl(x, 1);
}

int32_t edgeosc_reciprocal(int32_t x, int integer_bits, int *num_bits_over_unit) {
  const int headroom = clz32((uint32_t)x);
  const int32_t shifted = (int32_t)(((uint32_t)x << headroom) - 0x80000000u);
  *num_bits_over_unit = integer_bits - headroom;
  return edgeosc_one_over_one_plus_x(shifted);
}
