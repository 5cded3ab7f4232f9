/* FULLY_CONNECTED, CONV_2D and DEPTHWISE_CONV_2D on AArch64's Advanced SIMD: the same integers as the reference
 * loops of edgeosc_ops.c, bit for bit. Compiled inside edgeosc_ops.c (it includes this file), not alone. */
#include "edgeosc_ops_fast.h"

#if EDGEOSC_NEON
/* The AArch64 path: an input row widened once to int16 (minus zp_in), each weight row widened eight values at a
 * time, SMLAL into four int32 lanes (Cortex-A53/A72 have no SDOT). */
static void widen_row16(const int8_t *x, int32_t depth, int32_t zp, int16_t *out) {
  const int16x8_t z = vdupq_n_s16((int16_t)zp);
  int32_t i;
  for (i = 0; i + 8 <= depth; i += 8) vst1q_s16(out + i, vsubq_s16(vmovl_s8(vld1_s8(x + i)), z));
  for (; i < depth; ++i) out[i] = (int16_t)(x[i] - zp);
}

static void row_times_weights_neon(const int16_t *x, const int8_t *weights, const int32_t *bias, int32_t depth,
                                   int32_t units, const EdgeoscChannelRequant *rq, int32_t zp_out, int32_t lo,
                                   int32_t hi, int8_t *out) {
  int32_t u, k;
  for (u = 0; u < units; ++u) {
    const int8_t *w = weights + u * depth;
    int32x4_t acc4 = vdupq_n_s32(0);
    int32_t acc;
    for (k = 0; k + 8 <= depth; k += 8) {
      const int16x8_t xv = vld1q_s16(x + k), wv = vmovl_s8(vld1_s8(w + k));
      acc4 = vmlal_high_s16(vmlal_s16(acc4, vget_low_s16(xv), vget_low_s16(wv)), xv, wv);
    }
    acc = vaddvq_s32(acc4) + (bias ? bias[u] : 0);
    for (; k < depth; ++k) acc += x[k] * w[k];
    out[u] = channel_out(rq, u, acc, zp_out, lo, hi);
  }
}

static int edgeosc_fc_neon(const EdgeoscFcParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  int16_t *const x = (int16_t *)(void *)scratch;
  int32_t r;
  if (!scratch) return 0;
  for (r = 0; r < p->rows; ++r) {
    widen_row16(in + r * p->depth, p->depth, p->zp_in, x);
    row_times_weights_neon(x, p->weights, p->bias, p->depth, p->units, &p->rq, p->zp_out, p->act_min, p->act_max,
                           out + r * p->units);
  }
  return 1;
}

static int edgeosc_conv2d_neon(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  const int32_t K = p->k_h * p->k_w * p->in_c, pixels = p->out_h * p->out_w;
  int16_t *const x = (int16_t *)(void *)scratch;
  int8_t *const patch = (int8_t *)(scratch + EDGEOSC_WIDE_WORDS(K));
  int32_t o;
  if (!scratch) return 0;
  for (o = 0; o < pixels; ++o) {
    widen_row16(conv_patch(p, in, o, patch), K, p->zp_in, x);
    row_times_weights_neon(x, p->weights, p->bias, K, p->out_c, &p->rq, p->zp_out, p->act_min, p->act_max,
                           out + o * p->out_c);
  }
  return 1;
}

/* Depthwise on AArch64: eight channels a vector, each tap's inputs (minus zp) and weights widened to int16,
 * SMLAL into two int32x4 accumulators. */
static int edgeosc_depthwise_neon(const EdgeoscConvParams *p, const int8_t *in, int8_t *out) {
  const int32_t C = p->out_c;
  const int16x8_t z = vdupq_n_s16((int16_t)p->zp_in);
  int32_t x_off[DEPTHWISE_MAX_TAPS], w_off[DEPTHWISE_MAX_TAPS];
  int32_t oy, ox, c, t, taps, acc[8];
  if (p->out_c != p->in_c || p->in_c % 8 || p->k_h * p->k_w > DEPTHWISE_MAX_TAPS) return 0;
  for (oy = 0; oy < p->out_h; ++oy) {
    for (ox = 0; ox < p->out_w; ++ox, out += C) {
      taps = depthwise_taps(p, oy, ox, x_off, w_off);
      for (c = 0; c < C; c += 8) {
        int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);
        for (t = 0; t < taps; ++t) {
          const int16x8_t xv = vsubq_s16(vmovl_s8(vld1_s8(in + x_off[t] + c)), z);
          const int16x8_t wv = vmovl_s8(vld1_s8(p->weights + w_off[t] + c));
          lo = vmlal_s16(lo, vget_low_s16(xv), vget_low_s16(wv));
          hi = vmlal_high_s16(hi, xv, wv);
        }
        vst1q_s32(acc, lo);
        vst1q_s32(acc + 4, hi);
        for (t = 0; t < 8; ++t)
          out[c + t] = channel_out(&p->rq, c + t, acc[t] + (p->bias ? p->bias[c + t] : 0), p->zp_out, p->act_min,
                                   p->act_max);
      }
    }
  }
  return 1;
}
#endif
