/* The attention cores on AArch64's Advanced SIMD: a row of q k^T scores and the mix a v (int16 lanes, SMLAL into
 * int32), the linear core's update and query (four features or values a vector). The same integers as the reference
 * loops of edgeosc_attention.c, bit for bit. Compiled inside edgeosc_attention.c (it includes this file), not alone. */
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

/* x[0..3] - zp as int32 lanes (four loads: a vector load could read past the end of x) */
static inline int32x4_t minus_zp4(const int8_t *x, int32_t zp) {
  const int32_t t[4] = {x[0] - zp, x[1] - zp, x[2] - zp, x[3] - zp};
  return vld1q_s32(t);
}

/* The linear core's vector steps inside the portable update and query (edgeosc_attention.c): each takes what
 * fits four lanes from index j (or d, qb) on and returns where the portable loop goes on. */

/* A coupling row's word pairs j.. (features K_i K_j of both keys): de-interleaved, added, stored back */
static inline int coupling_row_neon(const KeyTerms *ta, const KeyTerms *tb, int j, int dh, int32_t xa0, int32_t xb0,
                                    int32_t xa1, int32_t xb1, uint32_t **sc) {
  for (; j + 4 <= dh; j += 4, *sc += 8) {
    const int32x4_t ka = vmovl_s16(vld1_s16(ta->K + j)), kb = vmovl_s16(vld1_s16(tb->K + j));
    uint32x4x2_t pair = vld2q_u32(*sc);
    pair.val[0] = vaddq_u32(pair.val[0], vreinterpretq_u32_s32(vmlaq_n_s32(vmulq_n_s32(ka, xa0), kb, xb0)));
    pair.val[1] = vaddq_u32(pair.val[1], vreinterpretq_u32_s32(vmlaq_n_s32(vmulq_n_s32(ka, xa1), kb, xb1)));
    vst2q_u32(*sc, pair);
  }
  return j;
}

/* A harmonic's cos and sin readout rows, values 0.. of both keys */
static inline int readout_rows_neon(const int8_t *va8, const int8_t *vb8, int dv, int32_t zv, int32_t uca,
                                    int32_t usa, int32_t ucb, int32_t usb, uint32_t *sr, uint32_t *ss) {
  int d = 0;
  for (; d + 4 <= dv; d += 4) {
    const int32x4_t va = minus_zp4(va8 + d, zv), vb = minus_zp4(vb8 + d, zv);
    const int32x4_t c = vmlaq_n_s32(vmulq_n_s32(va, uca), vb, ucb), s = vmlaq_n_s32(vmulq_n_s32(va, usa), vb, usb);
    vst1q_u32(sr + d, vaddq_u32(vld1q_u32(sr + d), vreinterpretq_u32_s32(c)));
    vst1q_u32(ss + d, vaddq_u32(vld1q_u32(ss + d), vreinterpretq_u32_s32(s)));
  }
  return d;
}

/* A query's coupling features qb.. past a row's diagonal (weights 4 Q_a Q_b): pairs de-interleaved, int64 lanes */
static inline const int32_t *coupling_query_neon(const int32_t *qb, const int32_t *end, int32_t qa4,
                                                 const int32_t **sc, int64_t *h0, int64_t *h1) {
  if (qb + 4 <= end) {
    int64x2_t v0 = vdupq_n_s64(0), v1 = vdupq_n_s64(0);
    for (; qb + 4 <= end; qb += 4, *sc += 8) {
      const int32x4_t qq = vmulq_n_s32(vld1q_s32(qb), qa4);
      const int32x4x2_t st = vld2q_s32(*sc);
      v0 = vmlal_high_s32(vmlal_s32(v0, vget_low_s32(qq), vget_low_s32(st.val[0])), qq, st.val[0]);
      v1 = vmlal_high_s32(vmlal_s32(v1, vget_low_s32(qq), vget_low_s32(st.val[1])), qq, st.val[1]);
    }
    *h0 += vaddvq_s64(v0);
    *h1 += vaddvq_s64(v1);
  }
  return qb;
}

/* A query's outputs 0.., four numerators a pass in int64 lanes (SMLAL by scalar), each divided */
static inline int numerators_neon(const Divider *div, const int32_t *sr, const int32_t *beta, int nr, int dv,
                                  int8_t *out) {
  int d = 0, m, n;
  for (; d + 4 <= dv; d += 4) {
    int64x2_t n01 = vdupq_n_s64(0), n23 = vdupq_n_s64(0);
    int64_t num[4];
    for (m = 0; m < nr; ++m) {
      const int32x4_t x = vld1q_s32(sr + m * (dv + 1) + d);
      n01 = vmlal_n_s32(n01, vget_low_s32(x), beta[m]);
      n23 = vmlal_high_n_s32(n23, x, beta[m]);
    }
    vst1q_s64(num, n01);
    vst1q_s64(num + 2, n23);
    for (n = 0; n < 4; ++n) out[d + n] = divided(div, num[n]);
  }
  return d;
}
#endif
