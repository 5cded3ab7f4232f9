/* Integer helpers reproducing TFLite's quantized arithmetic bit-exactly (portable C99, no float).
 *
 * Semantics follow tensorflow/lite/kernels/internal/common.h and gemmlowp's fixedpoint.h (the
 * double-rounding MultiplyByQuantizedMultiplier TFLite builds by default). Assumes two's-complement
 * int32 with arithmetic right shifts of negative values, as TFLite itself does.
 */
#ifndef EDGEOSC_FIXEDPOINT_H_
#define EDGEOSC_FIXEDPOINT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* How a requantization rounds. TFLite's reference kernels (and TFLite Micro) use AWAY; some optimized
 * kernels differ by 1 LSB at ties, measured on x86-64: tflite-runtime 2.14's BATCH_MATMUL and
 * FULLY_CONNECTED (its GEMM back end) round the final shift's ties upward (UP); ruy and
 * TFLITE_SINGLE_ROUNDING builds round once (SINGLE). Float requantizations (XNNPACK; LiteRT 2.3's
 * reference FULLY_CONNECTED) have no mode here: edgeosc/integer/reference.py models them. */
typedef enum {
  EDGEOSC_ROUND_AWAY = 0,   /* SRDHM, then shift right with ties away from zero (gemmlowp) */
  EDGEOSC_ROUND_UP = 1,     /* SRDHM, then shift right with ties toward +inf (NEON VRSHL) */
  EDGEOSC_ROUND_SINGLE = 2  /* (x * m + 2^(30 - shift)) >> (31 - shift), one rounding */
} EdgeoscRounding;

/* A real multiplier m * 2^(shift - 31); shift > 0 shifts left (TFLite's convention). */
typedef struct {
  int32_t multiplier;
  int32_t shift;
} EdgeoscRequant;

/* The three below are inline: every kernel requantizes each output through them.
 *
 * round(a * b / 2^31), ties away from zero, saturating INT32_MIN * INT32_MIN (ARM VQRDMULH). gemmlowp
 * computes (ab + nudge) / 2^31 truncated, nudge = 2^30 for ab >= 0 and 1 - 2^30 otherwise; for ab < 0 the
 * sum is negative, where truncation is floor((sum + 2^31 - 1) / 2^31), so both cases are
 * floor((ab + 2^30) / 2^31): one multiply-accumulate and a shift. */
static inline int32_t edgeosc_srdhm(int32_t a, int32_t b) {
  if (a == b && a == (int32_t)0x80000000) return 0x7FFFFFFF;
  return (int32_t)(((int64_t)a * b + ((int64_t)1 << 30)) >> 31);
}

/* Arithmetic shift right by exponent (0..31), ties away from zero. */
static inline int32_t edgeosc_rdbpot(int32_t x, int exponent) {
  const int32_t mask = (int32_t)((1u << exponent) - 1u);
  const int32_t threshold = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> exponent) + ((x & mask) > threshold ? 1 : 0);
}

/* TFLite's MultiplyByQuantizedMultiplier (double rounding, ties away). */
static inline int32_t edgeosc_mbqm(int32_t x, int32_t multiplier, int shift) {
  const int left = shift > 0 ? shift : 0;
  const int right = shift > 0 ? 0 : -shift;
  return edgeosc_rdbpot(edgeosc_srdhm((int32_t)((uint32_t)x << left), multiplier), right);
}

/** MultiplyByQuantizedMultiplier with the given EdgeoscRounding. */
int32_t edgeosc_mbqm_mode(int32_t x, int32_t multiplier, int shift, int rounding);

/* acc requantized by rq (with an EdgeoscRounding), plus zero_point, clamped to int8; inline for the
 * firmware's rounding (EDGEOSC_ROUND_AWAY, TFLite Micro's). */
static inline int8_t edgeosc_requant_int8(int32_t acc, EdgeoscRequant rq, int32_t zero_point, int rounding) {
  const int32_t y = (rounding == EDGEOSC_ROUND_AWAY ? edgeosc_mbqm(acc, rq.multiplier, rq.shift)
                                                    : edgeosc_mbqm_mode(acc, rq.multiplier, rq.shift, rounding)) +
                    zero_point;
  return (int8_t)(y < -128 ? -128 : y > 127 ? 127 : y);
}

/** GetInvSqrtQuantizedMultiplierExp(x, reverse_shift = -1): 1/sqrt(x) as multiplier and left shift. */
void edgeosc_inv_sqrt_multiplier(int32_t x, int32_t *multiplier, int *shift);

/** gemmlowp exp_on_negative_values: Q5.26 input (<= 0) to Q0.31. */
int32_t edgeosc_exp_on_negative_values_q5(int32_t a);

/** gemmlowp one_over_one_plus_x_for_x_in_0_1 in Q0.31. */
int32_t edgeosc_one_over_one_plus_x(int32_t a);

/** TFLite GetReciprocal: 1/x (x in Q(integer_bits)) as Q0.31 in [0.5, 1), and the bits above one. */
int32_t edgeosc_reciprocal(int32_t x, int integer_bits, int *num_bits_over_unit);

#ifdef __cplusplus
}
#endif

#endif /* EDGEOSC_FIXEDPOINT_H_ */
