/* The optimised variants of the attention cores' kernels and what they share with the reference loops (private
 * header).
 *
 * edgeosc_attention.c holds the reference kernels (the loops every variant is checked against: the integer reference,
 * tests/test_fast_kernels.py, tests/test_linear_core.py) and their dispatch: the build's variant first, where it
 * applies. The variants:
 *   dsp/edgeosc_attention_dsp.c    the L2 norms (a row's, the linear core's z), the softmax row on its exp table, a
 *                                  row of q k^T scores (d_head 8 apart), the mix a v (its pair loop in assembly:
 *                                  edgeosc_attention_dsp.S)
 *   dsp/edgeosc_linear_dsp.c       the linear core: the unrolled heads' update, query and stream step from tables
 *                                  of int16 pairs (the wide head's in assembly: edgeosc_linear_dsp.S), other heads
 *                                  in one pass over the state, the division
 *   neon/edgeosc_attention_neon.c  the scores and the mix, the linear core's update and query on AArch64
 * Each returns 1 where it computed the result and 0 where the reference loops must; the linear core's NEON steps,
 * which run inside the portable loops, return the index those loops go on from. edgeosc_attention.c compiles them
 * in its own unit (their entry points are static); those not for a build's core are empty (edgeosc_variant.h says
 * which it takes). The helpers below are defined in edgeosc_attention.c. */
#ifndef EDGEOSC_ATTENTION_FAST_H_
#define EDGEOSC_ATTENTION_FAST_H_

#include "edgeosc_attention.h"
#include "edgeosc_simd.h"

static int8_t clamp8(int32_t y);

/* The unrolled heads: the wide head, d_head = d_value = 8 at the shipped readout power (EDGEOSC_LINEAR_D8_P,
 * edgeosc_variant.h), and the narrow head (4 at that power): their key terms unrolled, on the DSP path their update,
 * query and step too (dsp/edgeosc_linear_dsp.c, one table layout per width; the wide head's loops in assembly,
 * dsp/edgeosc_linear_dsp.S, for p 4, 6 or 8); other heads take the general loops */

/* A key's terms with its sign folded in: K = k - zp_k, r, and the readout rows' coefficients u (the gate times
 * [1, cos m f, sin m f] in Q15, over 2^8; row 0: gate x 128). A missing key: every term 0. */
typedef struct {
  int16_t K[EDGEOSC_LINEAR_MAX_D_HEAD];
  int32_t r0, r1, u[EDGEOSC_LINEAR_ROWS(EDGEOSC_LINEAR_MAX_P)], fits; /* fits: u[1..2p] in int16 (the DSP pass pairs them) */
  const int8_t *v;
} KeyTerms;

/* A key's readout coefficients u[0..2p] (KeyTerms.u); returns whether u[1..2p] fit int16. */
static inline __attribute__((always_inline)) int readout_terms(const EdgeoscLinearKey *key, int32_t *u, const int pp);

/* The wide head (d_head = d_value = 8, p = EDGEOSC_LINEAR_D8_P: the models') and the narrow one (4, the same p: a
 * model of twice the heads, ModelConfig.d_head = 4) */
static int wide_head(const EdgeoscLinearParams *p);
static int narrow_head(const EdgeoscLinearParams *p);

/* The readout's coefficients 2^p a_m [1, cos m t, sin m t] (Q15) of z = h / |h|, for p = pp or the head's p */
static inline __attribute__((always_inline)) void readout_weights_of(int64_t h0, int64_t h1, int32_t *beta,
                                                                     const int pp);
#if EDGEOSC_DSP /* one copy at the head's p, for the DSP pass */
static void readout_weights(const EdgeoscLinearParams *p, int64_t h0, int64_t h1, int32_t *beta);
#endif

/* One division per query: den (> 0) to 22 bits, m 2^21 / den a multiplier of each numerator. */
typedef struct {
  int32_t e, inv, shift, zp_out, any; /* any: den > 0 (else every output is the zero point) */
  uint64_t half, round;               /* 2^(e-1) for e >= 1, 2^(shift-1) */
} Divider;

static inline void divider(const EdgeoscLinearParams *p, int64_t den, Divider *dv);
static inline __attribute__((always_inline)) int8_t divided(const Divider *dv, int64_t x);

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
/* the linear core: the unrolled heads from their keys' bytes (*_unrolled_dsp), other heads from their terms */
static inline __attribute__((always_inline)) int linear_update_unrolled_dsp(const EdgeoscLinearParams *p,
                                                                            int32_t *state, const EdgeoscLinearKey *a,
                                                                            const EdgeoscLinearKey *b);
static inline __attribute__((always_inline)) int linear_step_unrolled_dsp(const EdgeoscLinearParams *p, int32_t *state,
                                                                          const EdgeoscLinearKey *a,
                                                                          const EdgeoscLinearKey *b, const int8_t *q,
                                                                          int8_t *out);
static inline __attribute__((always_inline)) int linear_query_dsp(const EdgeoscLinearParams *p, const int32_t *state,
                                                                  const int8_t *q, int8_t *out);
static inline __attribute__((always_inline)) int linear_update_dsp(const EdgeoscLinearParams *p, int32_t *state,
                                                                   const KeyTerms *ta, const KeyTerms *tb);
static inline __attribute__((always_inline)) int linear_step_dsp(const EdgeoscLinearParams *p, int32_t *state,
                                                                 const KeyTerms *ta, const KeyTerms *tb,
                                                                 const int8_t *q, int8_t *out);
#endif

#if EDGEOSC_NEON
static inline __attribute__((always_inline)) int score_row_neon(const int8_t *qi, const int8_t *kh, int T, int dh,
                                                                int32_t zq, int32_t zk, EdgeoscRequant rq, int32_t zo,
                                                                int rounding, int8_t *row);
static inline __attribute__((always_inline)) int mix_row_neon(const int8_t *row, const int8_t *vh, int T, int dv,
                                                              int32_t za, int32_t zv, EdgeoscRequant rq, int32_t zo,
                                                              int rounding, int8_t *out);
static inline __attribute__((always_inline)) int coupling_row_neon(const KeyTerms *ta, const KeyTerms *tb, int j,
                                                                   int dh, int32_t xa0, int32_t xb0, int32_t xa1,
                                                                   int32_t xb1, uint32_t **sc);
static inline __attribute__((always_inline)) int readout_rows_neon(const int8_t *va8, const int8_t *vb8, int dv,
                                                                   int32_t zv, int32_t uca, int32_t usa, int32_t ucb,
                                                                   int32_t usb, uint32_t *sr, uint32_t *ss);
static inline __attribute__((always_inline)) const int32_t *coupling_query_neon(const int32_t *qb, const int32_t *end,
                                                                               int32_t qa4, const int32_t **sc,
                                                                               int64_t *h0, int64_t *h1);
static inline __attribute__((always_inline)) int numerators_neon(const Divider *div, const int32_t *sr,
                                                                 const int32_t *beta, int nr, int dv, int8_t *out);
#endif

#endif /* EDGEOSC_ATTENTION_FAST_H_ */
