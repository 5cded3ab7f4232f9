/* Int8 TFLite builtin ops as TFLite Micro's reference kernels compute them (portable C99, no float).
 *
 * One function per op kind the int8 exporter writes (edgeosc/export/tflite). Parameters are
 * computed at generation time (edgeosc/export/c) exactly as each kernel's Prepare does, so
 * the outputs are bit-exact with TFLite Micro. No allocation: callers pass every buffer.
 * Requantization is TFLite's double rounding (EDGEOSC_ROUND_AWAY), the rounding TFLite Micro builds use.
 */
#ifndef EDGEOSC_OPS_H_
#define EDGEOSC_OPS_H_

#include <stdint.h>

#include "edgeosc_fixedpoint.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-channel requantization: entry c of multiplier/shift, or entry 0 for all when per_channel == 0. dsp: the
 * DSP path's constants of every entry, two words each (2 multiplier as int32, -shift), written by code generation
 * where edgeosc_dsp_requant is exact for all of them (multiplier >= 2^30, shift in -23..-1); NULL: the DSP path
 * prepares them in scratch on each call, or requantizes portably. */
typedef struct {
  const int32_t *multiplier, *shift;
  int32_t per_channel;
  const int32_t *dsp;
} EdgeoscChannelRequant;

/* EDGEOSC_PACKED: this build's FULLY_CONNECTED / CONV_2D read their weights packed at code generation (the DSP path
 * of Armv7E-M / Armv8-M with the DSP extension), not in TFLite's layout. Generated firmware keeps only the layout
 * its build reads (EDGEOSC_PACKED_OR). */
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && !defined(EDGEOSC_PORTABLE)
#define EDGEOSC_PACKED 1
#define EDGEOSC_PACKED_OR(packed, plain) packed
#else
#define EDGEOSC_PACKED 0
#define EDGEOSC_PACKED_OR(packed, plain) plain
#endif

/* EDGEOSC_PACKED builds read FULLY_CONNECTED / CONV_2D weights [units, depth] packed (export/c/packing.py pack_weights):
 * units in pairs (an odd last unit paired with zeros), depth in an even number of groups of four (zero-filled); per
 * pair its two biases as int32, each bias[u] - zp_in sum_d w[u][d] (the input zero point folded in), then per group
 * two words: A = the bytes (w[u][d], w[u+1][d], w[u][d+2], w[u+1][d+2]) and B the same at d + 1, so that SXTB16 of
 * a word is unit u's int16 pair and SXTB16 ror 8 unit u + 1's, the lanes SXTB16 gives an input word: (x[d], x[d+2])
 * and (x[d+1], x[d+3]). Word-aligned. A FULLY_CONNECTED of one row (rows == 1: a stream's layers, where no weight
 * word serves two rows) and a CONV_2D of one output pixel (a stream's stem) have each such word unpacked: SXTB16(A), SXTB16(A ror 8), SXTB16(B), SXTB16(B ror 8), four
 * words a group, twice the bytes and no unpacking at inference. */

/* CONV_2D on one NHWC image with OHWI weights (batch 1). Taps outside the image are skipped, as
 * TFLite's reference kernel does (the same as padding with the input zero point). */
typedef struct {
  int32_t in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w;
  int32_t stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
  int32_t zp_in, zp_out, act_min, act_max;
  const int8_t *weights;
  const int32_t *bias; /* [out_c] or NULL */
  EdgeoscChannelRequant rq;
  const int8_t *packed; /* EDGEOSC_PACKED builds' weights and bias (then NULL in weights and bias), or NULL */
} EdgeoscConvParams;

/* scratch: EDGEOSC_CONV_SCRATCH_WORDS(...) int32 words for the fast paths (four receptive fields, widened, and
 * each channel's requantization constants), or NULL for the portable loops. The DSP path runs on packed weights
 * (p->packed), the portable loops where there are none. */
void edgeosc_conv2d_int8(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch);

#define EDGEOSC_CONV_SCRATCH_WORDS(k_h, k_w, in_c, out_c) \
  (EDGEOSC_FC_SCRATCH_WORDS((k_h) * (k_w) * (in_c), out_c) + (k_h) * (k_w) * (in_c))

/* DEPTHWISE_CONV_2D on one NHWC image, the same parameters as CONV_2D with weights [1, k_h, k_w, out_c] and
 * out_c a multiple of in_c (output channel c reads input channel c / (out_c / in_c)), as TFLite's
 * reference kernel. */
void edgeosc_depthwise_conv_int8(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch);

/* scratch: EDGEOSC_DEPTHWISE_SCRATCH_WORDS(out_h, out_w) int32 words for the DSP path of 3 x 3, stride 1 (four
 * channels' padded int16 planes, a 256-byte block per column, aligned to 256 bytes inside, and their int8 outputs),
 * or NULL for the other loops. */
#define EDGEOSC_DEPTHWISE_SCRATCH_WORDS(out_h, out_w) \
  (63 + 64 * ((out_w) + 2) + 4 + 2 * (((out_h) + 1) >> 1) * (out_w))

/* AVERAGE_POOL_2D on one NHWC image: the mean of the window's taps inside the image, rounded half away
 * from zero, clamped; input and output share scale and zero point (TFLite requires it). */
typedef struct {
  int32_t in_h, in_w, channels, out_h, out_w, k_h, k_w, stride_h, stride_w, pad_top, pad_left;
  int32_t act_min, act_max;
} EdgeoscAvgPoolParams;

void edgeosc_avg_pool_int8(const EdgeoscAvgPoolParams *p, const int8_t *in, int8_t *out);

/* FULLY_CONNECTED: in [rows, depth] x weights [units, depth] (zero point 0) -> out [rows, units]. */
typedef struct {
  int32_t rows, depth, units;
  int32_t zp_in, zp_out, act_min, act_max;
  const int8_t *weights;
  const int32_t *bias; /* [units] or NULL */
  EdgeoscChannelRequant rq;
  const int8_t *packed; /* EDGEOSC_PACKED builds' weights and bias (then NULL in weights and bias), or NULL */
} EdgeoscFcParams;

/* scratch: EDGEOSC_FC_SCRATCH_WORDS(depth, units) int32 words for the fast paths (four input rows widened to
 * int16, then two words of requantization constants per channel), or NULL for the portable loops. The DSP path
 * runs on packed weights (p->packed; a single unit on p->weights), the portable loops where there are none. */
void edgeosc_fc_int8(const EdgeoscFcParams *p, const int8_t *in, int8_t *out, int32_t *scratch);

/* n FULLY_CONNECTED layers that read the same input (code generation groups sibling projections of one row,
 * e.g. q, k and v): out[i] = layer i of in. On the DSP path, for one row and packed weights, the input is widened
 * once for all of them; otherwise each runs as edgeosc_fc_int8. scratch: the largest of theirs. */
void edgeosc_fc_group_int8(int32_t n, const EdgeoscFcParams *const *p, const int8_t *in, int8_t *const *out,
                           int32_t *scratch);

#define EDGEOSC_WIDE_WORDS(depth) (16 * (((depth) + 7) / 8))
#define EDGEOSC_FC_SCRATCH_WORDS(depth, units) (EDGEOSC_WIDE_WORDS(depth) + 2 * (units))

/* Sum pooling over the rows of in [rows, cols] -> out [cols]: what TRANSPOSE to [cols, rows] followed by
 * a FULLY_CONNECTED with one weight value on every row computes (the exporter's mean over time), without
 * the transpose or the weight matrix: acc = weight * sum(in - zp_in). */
typedef struct {
  int32_t rows, cols;
  int32_t zp_in, weight, zp_out, act_min, act_max;
  EdgeoscRequant rq;
} EdgeoscPoolParams;

void edgeosc_sum_pool_int8(const EdgeoscPoolParams *p, const int8_t *in, int8_t *out);

/** edgeosc_sum_pool_int8 of a summed ring (edgeosc_ring_sum_write_int8) from its running sums: sums[c] holds the sum
 * of column c's p->rows entries, so the pool costs O(cols) whatever the ring's length. */
void edgeosc_sum_pool_sums_int8(const EdgeoscPoolParams *p, const int32_t *sums, int8_t *out);

/* Broadcasting over up to 4 dims: the output shape and each input's element stride per output dim
 * (0 where that input broadcasts). */
typedef struct {
  int32_t dims[4];
  int32_t stride_a[4], stride_b[4];
} EdgeoscBroadcast;

/* ADD / SUB: both inputs scaled to a common 2^left_shift grid, summed (or subtracted), requantized. */
typedef struct {
  EdgeoscBroadcast shape;
  int32_t zp_a, zp_b, zp_out, act_min, act_max;
  int32_t left_shift, subtract;
  EdgeoscRequant rq_a, rq_b, rq_out;
} EdgeoscAddParams;

void edgeosc_add_int8(const EdgeoscAddParams *p, const int8_t *a, const int8_t *b, int8_t *out);

/* MUL: (a - zp_a) (b - zp_b) requantized. */
typedef struct {
  EdgeoscBroadcast shape;
  int32_t zp_a, zp_b, zp_out, act_min, act_max;
  EdgeoscRequant rq;
} EdgeoscMulParams;

void edgeosc_mul_int8(const EdgeoscMulParams *p, const int8_t *a, const int8_t *b, int8_t *out);

/* BATCH_MATMUL: a [batch_a, rows, depth] x b [batch_b, depth, cols] (or [batch_b, cols, depth] when
 * adj_y) -> out [batch, rows, cols]; a batch of 1 broadcasts. */
typedef struct {
  int32_t batch, batch_a, batch_b, rows, depth, cols, adj_y;
  int32_t zp_a, zp_b, zp_out;
  EdgeoscRequant rq;
} EdgeoscBatchMatmulParams;

void edgeosc_batch_matmul_int8(const EdgeoscBatchMatmulParams *p, const int8_t *a, const int8_t *b,
                               int8_t *out);

/** L2_NORMALIZATION of rows x depth values (output 1/128, zero point 0). */
void edgeosc_l2norm_int8(int32_t rows, int32_t depth, int32_t zero_point, const int8_t *in,
                         int8_t *out);

/** SOFTMAX of rows x depth values (output 1/256, -128), exps from a table (edgeosc_attention.h). */
void edgeosc_softmax_int8(int32_t rows, int32_t depth, const int32_t *exp_lut, const int8_t *in,
                          int8_t *out);

/** out[i] = table[in[i] + 128]: a CAST, ADD 128, GATHER chain. */
void edgeosc_lut_int8(int32_t n, const int8_t *table, const int8_t *in, int8_t *out);

/* TRANSPOSE of up to 4 dims: out dim i is in dim perm[i]; in_strides are the input's element strides. */
typedef struct {
  int32_t out_dims[4];
  int32_t in_strides[4]; /* already permuted: the input stride of output dim i */
} EdgeoscTransposeParams;

void edgeosc_transpose_int8(const EdgeoscTransposeParams *p, const int8_t *in, int8_t *out);

/** Copies n bytes (no libc in the firmware path). */
void edgeosc_copy_int8(int32_t n, const int8_t *in, int8_t *out);

/** A streaming model's shift-register state kept as a ring (export/c/patterns.py ring): `rows` rows of `slots` entries
 * of n bytes; the new entry (rows x n bytes) written over the oldest, slot *slot, which then advances. */
void edgeosc_ring_write_int8(int32_t rows, int32_t slots, int32_t n, const int8_t *in, int8_t *ring, int32_t *slot);

/** edgeosc_ring_write_int8 for a ring whose only reader sums it along its slots (a stream's pooling): sums[r n + i]
 * (int32, kept between runs like the ring) takes the new entry less the one it overwrites, exactly. */
void edgeosc_ring_sum_write_int8(int32_t rows, int32_t slots, int32_t n, const int8_t *in, int8_t *ring,
                                 int32_t *slot, int32_t *sums);

/** GATHER along one axis with constant indices: out[o, i, :] = in[o, index[i], :] for o < outer, i < n_index,
 * rows of `inner` bytes out of axis_size in the input. */
void edgeosc_gather_int8(int32_t outer, int32_t axis_size, int32_t inner, int32_t n_index, const int32_t *index,
                         const int8_t *in, int8_t *out);

/** Copies `rows` runs of n bytes, in_stride apart in the input and out_stride apart in the output: one input's
 * part of a CONCATENATION (the inner dims from the axis on), or a SLICE along one axis. */
void edgeosc_copy_rows_int8(int32_t rows, int32_t n, int32_t in_stride, int32_t out_stride, const int8_t *in,
                            int8_t *out);

#ifdef __cplusplus
}
#endif

#endif /* EDGEOSC_OPS_H_ */
