/* Int8 attention cores, bit-exact with TFLite's builtin-op decompositions (portable C99).
 *
 * No malloc, no libm, no float: the caller passes every multiplier (as TFLite's Prepare computes them;
 * see edgeosc/export/tflite_op.py or the custom op's init) and a scratch buffer.
 * Tensors are row-major [H, T, d] int8; the H heads play BATCH_MATMUL's batch dimension.
 */
#ifndef EDGEOSC_ATTENTION_H_
#define EDGEOSC_ATTENTION_H_

#include <stddef.h>
#include <stdint.h>

#include "edgeosc_fixedpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Oscillator core, steps 1-10 (export/oscillator_attention.md):
 *   qk = q k^T; w = table_w[qk]; wn = L2_NORMALIZATION(w) (1/128, 0); h = wn r;
 *   z = L2_NORMALIZATION(h) (1/128, 0); zr = z r^T; c = table_c[zr]; sum = c ones (BATCH_MATMUL with
 *   an int8 ones column, or an all-ones FULLY_CONNECTED: same integers; the model calls it "csum");
 *   inv = table_inv[sum]; a = MUL(c, inv); out = a v.
 * Tables have 256 entries indexed by the int8 value + 128 (GATHER(table, x + 128)).
 * rq_h is wn's 1/128 times r's scale over h's: w's scale does not enter (L2_NORMALIZATION drops it).
 * The readout stays in its direct form: the factorized one sums over D_p = C(d_osc + p, p) monomials
 * (4681 at d_osc = 8, p = 4), far more than the T = 49 keys it replaces. */
typedef struct {
  int32_t heads, tokens, d_head, d_osc, d_value;
  const int8_t *table_w, *table_c, *table_inv;
  int32_t zp_q, zp_k, zp_v, zp_r;        /* input zero points */
  int32_t zp_qk, zp_w, zp_h, zp_zr;      /* step outputs; wn and z are fixed at (1/128, 0) */
  int32_t zp_c, zp_sum, zp_inv, zp_a, zp_out;
  int32_t ones;                          /* value of step 7's int8 ones (zero point 0) */
  EdgeoscRequant rq_qk, rq_h, rq_zr, rq_sum, rq_a, rq_out;
  int32_t round_matmul;                  /* EdgeoscRounding of steps 1, 3, 5, 10 */
  int32_t round_sum;                     /* ... of step 7 (its op may be FULLY_CONNECTED) */
  int32_t round_mul;                     /* ... of step 9 */
} EdgeoscOscParams;

/* Scratch: one int8 row of T scores (w, then wn in place) plus h and z. */
#define EDGEOSC_OSC_SCRATCH_BYTES(tokens, d_osc) ((size_t)(tokens) + 2u * (size_t)(d_osc))

/** Runs steps 1-10 for all heads; returns 0, or -1 on invalid parameters. */
int edgeosc_oscillator_core_int8(const EdgeoscOscParams *p, const int8_t *q, const int8_t *k,
                                 const int8_t *v, const int8_t *r, int8_t *out, int8_t *scratch);

/* The key gate (docs/ablations.md section 44): with table_c giving pow = (1 + zr)^p, step 6 becomes
 *   c = MUL(pow, g) (g [H, 1, T]: each head's unit gates over the keys, (1/128, 0)); c = L2_NORMALIZATION(c),
 * and steps 7-9 read these unit rows: the EdgeoscOscParams fields of c (zp_c, rq_sum, rq_a) are theirs. */
typedef struct {
  int32_t zp_pow, zp_gated;              /* table_c's output; the MUL's output */
  EdgeoscRequant rq_gate;                /* the MUL, rounded as step 9 (round_mul) */
} EdgeoscGateParams;

/** Runs steps 1-10 with the key gate; returns 0, or -1 on invalid parameters. */
int edgeosc_oscillator_gated_core_int8(const EdgeoscOscParams *p, const EdgeoscGateParams *gp,
                                       const int8_t *q, const int8_t *k, const int8_t *v,
                                       const int8_t *r, const int8_t *g, int8_t *out,
                                       int8_t *scratch);

/* Softmax baseline: qk = q k^T; a = SOFTMAX(qk) with output (1/256, -128); out = a v.
 * beta_* and diff_min as TFLite's Prepare computes them (PreprocessSoftmaxScaling, 5 integer bits).
 * The softmax is TFLite (Micro)'s reference int8 kernel (gemmlowp fixed-point exp). tflite-runtime's
 * optimized kernel on x86-64 uses the same fixed-point algorithm (measured identical); builds that
 * define TFLITE_SOFTMAX_USE_UINT16_LUT (aarch64 with clang: Android, some Linux ARM wheels) use
 * SoftmaxInt8LUT instead, whose float-populated exp table can differ from this by 1 LSB. */
typedef struct {
  int32_t heads, tokens, d_head, d_value;
  int32_t zp_q, zp_k, zp_v, zp_qk, zp_out;
  EdgeoscRequant rq_qk, rq_out;
  int32_t beta_multiplier, beta_left_shift, diff_min;
  int32_t round_matmul;
  const int32_t *exp_lut; /* NULL: fixed-point exps; else edgeosc_softmax_row_lut_int8's table */
} EdgeoscSoftmaxParams;

#define EDGEOSC_SOFTMAX_SCRATCH_BYTES(tokens) ((size_t)(tokens))

/** Runs the softmax core for all heads; returns 0, or -1 on invalid parameters. */
int edgeosc_softmax_core_int8(const EdgeoscSoftmaxParams *p, const int8_t *q, const int8_t *k,
                              const int8_t *v, int8_t *out, int8_t *scratch);

/** TFLite reference int8 L2_NORMALIZATION of one row (output scale 1/128, zero point 0); out may be x. */
void edgeosc_l2norm_row_int8(const int8_t *x, int n, int32_t zero_point, int8_t *out);

/** TFLite (Micro) reference int8 SOFTMAX of one row (output scale 1/256, zero point -128). */
void edgeosc_softmax_row_int8(const int8_t *x, int n, int32_t beta_multiplier,
                              int32_t beta_left_shift, int32_t diff_min, int8_t *out);

/** The same row from a table of its exps: an int8 input has only 256 differences to the row maximum,
 * so exp_lut[d] holds the Q0.31 exp of diff = -d (0 where diff < diff_min, which the reference leaves
 * out), computed once by edgeosc/integer_ref.py softmax_exp_table. Bit-exact with the row above. */
void edgeosc_softmax_row_lut_int8(const int8_t *x, int n, const int32_t *exp_lut, int8_t *out);

#ifdef __cplusplus
}
#endif

#endif /* EDGEOSC_ATTENTION_H_ */
