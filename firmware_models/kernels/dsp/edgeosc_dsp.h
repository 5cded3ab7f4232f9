/* The DSP variants' requantization on code generation's constants (private header of dsp/). */
#ifndef EDGEOSC_DSP_H_
#define EDGEOSC_DSP_H_

#include "edgeosc_ops_fast.h"

#if EDGEOSC_DSP
/* edgeosc_dsp_requant(acc) + zp_out for the constants (2M, right) of one channel, with c = 2^(right-1) + zp_out 2^right
 * (requant_c): the zero point added before the shift, which is
 * exact (a multiple of 2^right passes through it), and x - [x < 0] before the saturating add (x > INT32_MIN:
 * |SRDHM(a, M)| < |a| for M < 2^31). Where QADD saturates the exact value is past int8 by the same sign, so both
 * clamp alike (right <= 23). Scalars, kept in registers. */
static inline int32_t requant_zp(int32_t acc, int32_t m2, int32_t right, int32_t c) {
  const int32_t x = edgeosc_smmulr(acc, m2) + acc;
  return __qadd(x + (x >> 31), c) >> right;
}

static inline int32_t requant_c(int32_t right, int32_t zp_out) {
  return (int32_t)(((1u << right) >> 1) + ((uint32_t)zp_out << right));
}
#endif

#endif /* EDGEOSC_DSP_H_ */
