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

/* linear_update_portable's sums, four coupling features' pairs and four values of each readout row a vector */
static inline int linear_update_neon(const EdgeoscLinearParams *p, int32_t *state, const KeyTerms *ta,
                                     const KeyTerms *tb) {
  const int dh = p->d_head, dv = p->d_value, nr = 2 * p->p + 1;
  const int32_t zv = p->zp_v;
  uint32_t *sc = (uint32_t *)state, *sr = sc + 2 * EDGEOSC_LINEAR_COUPLING(dh);
  int32_t i, m, d;
  sc[0] += (uint32_t)(ta->r0 + tb->r0);
  sc[1] += (uint32_t)(ta->r1 + tb->r1);
  sc += 2;
  for (i = 0; i < dh; ++i, sc += 2) {
    sc[0] += (uint32_t)(ta->K[i] * ta->r0 + tb->K[i] * tb->r0);
    sc[1] += (uint32_t)(ta->K[i] * ta->r1 + tb->K[i] * tb->r1);
  }
  for (i = 0; i < dh; ++i) {
    const int32_t xa0 = ta->K[i] * ta->r0, xb0 = tb->K[i] * tb->r0, xa1 = ta->K[i] * ta->r1, xb1 = tb->K[i] * tb->r1;
    int32_t j = i;
    for (; j + 4 <= dh; j += 4, sc += 8) { /* four features' pairs: de-interleaved, added, stored back */
      const int32x4_t ka = vmovl_s16(vld1_s16(ta->K + j)), kb = vmovl_s16(vld1_s16(tb->K + j));
      uint32x4x2_t pair = vld2q_u32(sc);
      pair.val[0] = vaddq_u32(pair.val[0], vreinterpretq_u32_s32(vmlaq_n_s32(vmulq_n_s32(ka, xa0), kb, xb0)));
      pair.val[1] = vaddq_u32(pair.val[1], vreinterpretq_u32_s32(vmlaq_n_s32(vmulq_n_s32(ka, xa1), kb, xb1)));
      vst2q_u32(sc, pair);
    }
    for (; j < dh; ++j, sc += 2) {
      sc[0] += (uint32_t)(ta->K[j] * xa0 + tb->K[j] * xb0);
      sc[1] += (uint32_t)(ta->K[j] * xa1 + tb->K[j] * xb1);
    }
  }
  /* readout: row 0, then each harmonic's cos and sin rows together, sharing each value */
  for (d = 0; d < dv; ++d) sr[d] += (uint32_t)(ta->u[0] * (ta->v[d] - zv) + tb->u[0] * (tb->v[d] - zv));
  sr[dv] += (uint32_t)(ta->u[0] + tb->u[0]);
  for (m = 1, sr += dv + 1; m < nr; m += 2, sr += 2 * (dv + 1)) {
    const int32_t uca = ta->u[m], usa = ta->u[m + 1], ucb = tb->u[m], usb = tb->u[m + 1];
    uint32_t *const ss = sr + dv + 1;
    d = 0;
    for (; d + 4 <= dv; d += 4) {
      const int32x4_t va = minus_zp4(ta->v + d, zv), vb = minus_zp4(tb->v + d, zv);
      const int32x4_t c = vmlaq_n_s32(vmulq_n_s32(va, uca), vb, ucb), s = vmlaq_n_s32(vmulq_n_s32(va, usa), vb, usb);
      vst1q_u32(sr + d, vaddq_u32(vld1q_u32(sr + d), vreinterpretq_u32_s32(c)));
      vst1q_u32(ss + d, vaddq_u32(vld1q_u32(ss + d), vreinterpretq_u32_s32(s)));
    }
    for (; d < dv; ++d) {
      const int32_t va = ta->v[d] - zv, vb = tb->v[d] - zv;
      sr[d] += (uint32_t)(uca * va + ucb * vb);
      ss[d] += (uint32_t)(usa * va + usb * vb);
    }
    sr[dv] += (uint32_t)(uca + ucb);
    ss[dv] += (uint32_t)(usa + usb);
  }
  return 1;
}

/* linear_query_portable's sums: four coupling features a vector, four numerators in int64 lanes (SMLAL) */
static inline int linear_query_neon(const EdgeoscLinearParams *p, const int32_t *state, const int8_t *q, int8_t *out) {
  const int dh = p->d_head, dv = p->d_value, nr = 2 * p->p + 1;
  const int32_t *sc = state, *sr = state + 2 * EDGEOSC_LINEAR_COUPLING(dh);
  int64_t h0, h1, den;
  int32_t Q[EDGEOSC_LINEAR_MAX_D_HEAD], beta[EDGEOSC_LINEAR_ROWS(EDGEOSC_LINEAR_MAX_P)], a, m, d;
  Divider div;
  for (a = 0; a < dh; ++a) Q[a] = q[a] - p->zp_q;
  h0 = (int64_t)p->c1 * p->c1 * sc[0];
  h1 = (int64_t)p->c1 * p->c1 * sc[1];
  sc += 2;
  for (a = 0; a < dh; ++a, sc += 2) {
    const int32_t qa = 2 * p->c1 * Q[a];
    h0 += (int64_t)qa * sc[0];
    h1 += (int64_t)qa * sc[1];
  }
  for (a = 0; a < dh; ++a) {
    const int32_t qa4 = 4 * Q[a], *qb = Q + a + 1, *const end = Q + dh;
    h0 += (int64_t)(2 * Q[a] * Q[a]) * sc[0]; /* a == b: weight 2, a < b: 4 (both orders) */
    h1 += (int64_t)(2 * Q[a] * Q[a]) * sc[1];
    sc += 2;
    if (qb + 4 <= end) { /* four features at a time: pairs de-interleaved, int64 lanes (SMLAL) */
      int64x2_t v0 = vdupq_n_s64(0), v1 = vdupq_n_s64(0);
      for (; qb + 4 <= end; qb += 4, sc += 8) {
        const int32x4_t qq = vmulq_n_s32(vld1q_s32(qb), qa4);
        const int32x4x2_t st = vld2q_s32(sc);
        v0 = vmlal_high_s32(vmlal_s32(v0, vget_low_s32(qq), vget_low_s32(st.val[0])), qq, st.val[0]);
        v1 = vmlal_high_s32(vmlal_s32(v1, vget_low_s32(qq), vget_low_s32(st.val[1])), qq, st.val[1]);
      }
      h0 += vaddvq_s64(v0);
      h1 += vaddvq_s64(v1);
    }
    for (; qb < end; ++qb, sc += 2) {
      const int32_t qq = qa4 * *qb;
      h0 += (int64_t)qq * sc[0];
      h1 += (int64_t)qq * sc[1];
    }
  }
  readout_weights(p, h0, h1, beta);
  den = 0;
  for (m = 0; m < nr; ++m) den += (int64_t)beta[m] * sr[m * (dv + 1) + dv];
  divider(p, den, &div);
  for (d = 0; d < dv; d += 2) { /* two numerators at a time share each beta, four where they fit */
    const int two = d + 1 < dv; /* else the last value twice */
    int64_t num[4];
    int n, count = 1 + two;
    if (d + 4 <= dv) { /* four numerators: int64 lanes (SMLAL by scalar) */
      int64x2_t n01 = vdupq_n_s64(0), n23 = vdupq_n_s64(0);
      for (m = 0; m < nr; ++m) {
        const int32x4_t x = vld1q_s32(sr + m * (dv + 1) + d);
        n01 = vmlal_n_s32(n01, vget_low_s32(x), beta[m]);
        n23 = vmlal_high_n_s32(n23, x, beta[m]);
      }
      vst1q_s64(num, n01);
      vst1q_s64(num + 2, n23);
      count = 4;
    } else {
      int64_t n0 = 0, n1 = 0;
      const int32_t *col = sr + d;
      for (m = 0; m < nr; ++m, col += dv + 1) {
        n0 += (int64_t)beta[m] * col[0];
        n1 += (int64_t)beta[m] * col[two];
      }
      num[0] = n0, num[1] = n1;
    }
    for (n = 0; n < count; ++n) out[d + n] = divided(&div, num[n]);
    d += count - 2;
  }
  return 1;
}
#endif
