/* The optimised variants of the attention cores' kernels and what they share with the reference loops (private
 * header).
 *
 * edgeosc_attention.c holds the reference kernels (the loops every variant is checked against: the integer reference,
 * tests/test_fast_kernels.py, tests/test_linear_core.py) and their dispatch: the build's variant first, where it
 * applies. The variants:
 *   dsp/edgeosc_attention_dsp.c    the L2 norms (a row's, the linear core's z), the softmax row on its exp table, a
 *                                  row of q k^T scores (d_head 8 apart), the mix a v (its pair loop in assembly)
 *   neon/edgeosc_attention_neon.c  the scores and the mix on AArch64
 * Each returns 1 where it computed the result and 0 where the reference loops must. edgeosc_attention.c compiles them
 * in its own unit (their entry points are static); those not for a build's core are empty (edgeosc_simd.h says which
 * it takes). The helpers below are defined in edgeosc_attention.c. */
#ifndef EDGEOSC_ATTENTION_FAST_H_
#define EDGEOSC_ATTENTION_FAST_H_

#include "edgeosc_attention.h"
#include "edgeosc_simd.h"

static int8_t clamp8(int32_t y);

/* The entry points, each called from one dispatch and inlined there (always_inline: apart, gcc kept the larger ones
 * as calls, which moved the cores' cycles by up to 1%). */
#if EDGEOSC_DSP
static inline __attribute__((always_inline)) int l2norm_int32_dsp(const int32_t *d, int n, int8_t *out);
static inline __attribute__((always_inline)) int edgeosc_l2norm_row_dsp(const int8_t *x, int n, int32_t zero_point,
                                                                        int8_t *out);
static inline __attribute__((always_inline)) int edgeosc_softmax_row_lut_dsp(const int8_t *x, int n,
                                                                             const int32_t *exp_lut, int8_t *out);
static inline __attribute__((always_inline)) int score_row_dsp(const int8_t *qi, const int8_t *kh, int T, int dh,
                                                               int32_t zq, int32_t zk, EdgeoscRequant rq, int32_t zo,
                                                               int rounding, int8_t *row);
static inline __attribute__((always_inline)) int mix_row_dsp(const int8_t *row, const int8_t *vh, int T, int dv,
                                                             int32_t za, int32_t zv, EdgeoscRequant rq, int32_t zo,
                                                             int rounding, int8_t *out);
#endif

#if EDGEOSC_NEON
static inline __attribute__((always_inline)) int score_row_neon(const int8_t *qi, const int8_t *kh, int T, int dh,
                                                                int32_t zq, int32_t zk, EdgeoscRequant rq, int32_t zo,
                                                                int rounding, int8_t *row);
static inline __attribute__((always_inline)) int mix_row_neon(const int8_t *row, const int8_t *vh, int T, int dv,
                                                              int32_t za, int32_t zv, EdgeoscRequant rq, int32_t zo,
                                                              int rounding, int8_t *out);
#endif

#endif /* EDGEOSC_ATTENTION_FAST_H_ */
