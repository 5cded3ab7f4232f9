/* The attention cores on AArch64's Advanced SIMD: a row of q k^T scores and the mix a v (int16 lanes, SMLAL into
 * int32). The same integers as the reference loops of edgeosc_attention.c, bit for bit. Compiled inside
 * edgeosc_attention.c (it includes this file), not alone. */
#include "edgeosc_attention_fast.h"

#if EDGEOSC_NEON
/* A row of q k^T scores for d_head a multiple of 8 up to 64 */
static inline int score_row_neon(const int8_t *qi, const int8_t *kh, int T, int dh, int32_t zq, int32_t zk,
                                 EdgeoscRequant rq, int32_t zo, int rounding, int8_t *row) {
  int j, d;
  if (dh % 8 == 0 && dh <= 64) { /* q - zq widened once; k - zk per key (both fit int16), SMLAL into int32 lanes */
    int16x8_t qv[8];
    const int16x8_t zk8 = vdupq_n_s16((int16_t)zk);
    for (d = 0; d < dh; d += 8) qv[d / 8] = vsubq_s16(vmovl_s8(vld1_s8(qi + d)), vdupq_n_s16((int16_t)zq));
    for (j = 0; j < T; ++j) {
      const int8_t *kj = kh + (size_t)j * dh;
      int32x4_t acc = vdupq_n_s32(0);
      for (d = 0; d < dh; d += 8) {
        const int16x8_t kd = vsubq_s16(vmovl_s8(vld1_s8(kj + d)), zk8);
        acc = vmlal_high_s16(vmlal_s16(acc, vget_low_s16(qv[d / 8]), vget_low_s16(kd)), qv[d / 8], kd);
      }
      row[j] = edgeosc_requant_int8(vaddvq_s32(acc), rq, zo, rounding);
    }
    return 1;
  }
  return 0;
}

/* out_i = row (length T) times vh [T, dv] for dv a multiple of 8 */
static inline int mix_row_neon(const int8_t *row, const int8_t *vh, int T, int dv, int32_t za, int32_t zv,
                               EdgeoscRequant rq, int32_t zo, int rounding, int8_t *out) {
  int j, d;
  if (dv % 8 == 0) { /* eight output lanes at a time: each key's weight a_j times its row v_j - zv (SMLAL by scalar) */
    const int16x8_t zv8 = vdupq_n_s16((int16_t)zv);
    for (d = 0; d < dv; d += 8) {
      int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);
      int32_t acc[8], i;
      for (j = 0; j < T; ++j) {
        const int16x8_t vj = vsubq_s16(vmovl_s8(vld1_s8(vh + (size_t)j * dv + d)), zv8);
        const int16_t a = (int16_t)(row[j] - za);
        lo = vmlal_n_s16(lo, vget_low_s16(vj), a);
        hi = vmlal_high_n_s16(hi, vj, a);
      }
      vst1q_s32(acc, lo);
      vst1q_s32(acc + 4, hi);
      for (i = 0; i < 8; ++i) out[d + i] = edgeosc_requant_int8(acc[i], rq, zo, rounding);
    }
    return 1;
  }
  return 0;
}
#endif
