/* Int8 attention cores (see edgeosc_attention.h). Row by row: one query's T scores live in scratch. */
#include "edgeosc_attention.h"

#include "edgeosc_simd.h"

static int8_t clamp8(int32_t y) { return (int8_t)(y < -128 ? -128 : y > 127 ? 127 : y); }

/* TFLite's int8 L2_NORMALIZATION of n values already offset by the zero point (squares summing below 2^31). */
static void l2norm_int32(const int32_t *d, int n, int8_t *out) {
  int32_t acc = 0, mult;
  int i, shift;
  for (i = 0; i < n; ++i) acc += d[i] * d[i];
  edgeosc_inv_sqrt_multiplier(acc, &mult, &shift);
  for (i = 0; i < n; ++i) out[i] = clamp8(edgeosc_mbqm(d[i], mult, shift + 7));
}

void edgeosc_l2norm_row_int8(const int8_t *x, int n, int32_t zero_point, int8_t *out) {
  int32_t acc = 0, mult;
  int i, shift;
  for (i = 0; i < n; ++i) {
    const int32_t d = x[i] - zero_point;
    acc += d * d;
  }
  edgeosc_inv_sqrt_multiplier(acc, &mult, &shift);
  for (i = 0; i < n; ++i) out[i] = clamp8(edgeosc_mbqm(x[i] - zero_point, mult, shift + 7));
}

void edgeosc_softmax_row_int8(const int8_t *x, int n, int32_t beta_multiplier,
                              int32_t beta_left_shift, int32_t diff_min, int8_t *out) {
  int32_t max = -128, sum = 0, scale;
  int i, bits_over_unit, exponent;
  for (i = 0; i < n; ++i)
    if (x[i] > max) max = x[i];
  /* Sum of exps in Q12.19; the exps are recomputed in the second pass, as TFLite does. */
  for (i = 0; i < n; ++i) {
    const int32_t diff = x[i] - max;
    if (diff >= diff_min) {
      const int32_t scaled = edgeosc_srdhm(diff * (1 << beta_left_shift), beta_multiplier);
      sum += edgeosc_rdbpot(edgeosc_exp_on_negative_values_q5(scaled), 12);
    }
  }
  scale = edgeosc_reciprocal(sum, 12, &bits_over_unit);
  exponent = bits_over_unit + 31 - 8;
  for (i = 0; i < n; ++i) {
    const int32_t diff = x[i] - max;
    if (diff >= diff_min) {
      const int32_t scaled = edgeosc_srdhm(diff * (1 << beta_left_shift), beta_multiplier);
      const int32_t e = edgeosc_exp_on_negative_values_q5(scaled);
      out[i] = clamp8(edgeosc_rdbpot(edgeosc_srdhm(scale, e), exponent) - 128);
    } else {
      out[i] = -128;
    }
  }
}

void edgeosc_softmax_row_lut_int8(const int8_t *x, int n, const int32_t *exp_lut, int8_t *out) {
  int32_t max = -128, sum = 0, scale;
  int i, bits_over_unit, exponent;
  for (i = 0; i < n; ++i)
    if (x[i] > max) max = x[i];
#if EDGEOSC_DSP /* exps are >= 0: the shift's ties away from zero are an unsigned add that cannot wrap */
  for (i = 0; i < n; ++i) sum += (int32_t)(((uint32_t)exp_lut[max - x[i]] + 2048u) >> 12);
#else
  for (i = 0; i < n; ++i) sum += edgeosc_rdbpot(exp_lut[max - x[i]], 12);
#endif
  scale = edgeosc_reciprocal(sum, 12, &bits_over_unit);
  exponent = bits_over_unit + 31 - 8;
#if EDGEOSC_DSP
  /* scale in [2^30, 2^31) and exps >= 0: SRDHM(e, scale) = SMMULR(e, 2 scale - 2^32) + e (edgeosc_simd.h) lies in
   * [0, e], so the shift's ties away from zero are an unsigned add of 2^(exponent-1), which cannot wrap */
  if (scale >= (1 << 30) && exponent >= 1 && exponent <= 31) {
    const int32_t m2 = (int32_t)((uint32_t)scale << 1);
    const uint32_t half = 1u << (exponent - 1);
    for (i = 0; i < n; ++i) {
      const int32_t e = exp_lut[max - x[i]], y = edgeosc_smmulr(e, m2) + e;
      out[i] = (int8_t)__ssat((int32_t)(((uint32_t)y + half) >> exponent) - 128, 8);
    }
    return;
  }
#endif
  for (i = 0; i < n; ++i) /* a left-out entry has exp 0, so it lands on -128 as in the reference */
    out[i] = clamp8(edgeosc_rdbpot(edgeosc_srdhm(scale, exp_lut[max - x[i]]), exponent) - 128);
}

#if EDGEOSC_DSP
/* A core's int8 output: edgeosc_dsp_requant with the constants q where they qualified (TFLite Micro's rounding),
 * else edgeosc_requant_int8 (q NULL). */
static inline int8_t core_requant(const EdgeoscDspRequant *q, int32_t acc, EdgeoscRequant rq, int32_t zo,
                                  int rounding) {
  return q ? (int8_t)__ssat(edgeosc_dsp_requant(q, acc) + zo, 8) : edgeosc_requant_int8(acc, rq, zo, rounding);
}
#endif

/* One row of q k^T for query i of a head: T requantized scores. */
static void score_row(const int8_t *qi, const int8_t *kh, int T, int dh, int32_t zq, int32_t zk,
                      EdgeoscRequant rq, int32_t zo, int rounding, int8_t *row) {
  int j, d;
#if EDGEOSC_DSP
  if (dh % 4 == 0 && dh <= 32) { /* (q - zq).(k - zk) = (q - zq).k - zk sum(q - zq): k words straight to SMLAD */
    int32_t qw[16], base = 0;
    const int32_t zq2 = edgeosc_pair(-zq);
    for (d = 0; d < dh; d += 4) {
      edgeosc_widen4(edgeosc_read4(qi + d), zq2, qw + d / 2, qw + d / 2 + 1);
      base -= zk * (qi[d] + qi[d + 1] + qi[d + 2] + qi[d + 3] - 4 * zq);
    }
    EdgeoscDspRequant q;
    const int dsp = rounding == EDGEOSC_ROUND_AWAY && edgeosc_dsp_requant_init(&q, rq.multiplier, rq.shift);
    if (dsp && dh == 8) { /* the default heads' width: the query's four pairs stay in registers */
      const int32_t q0 = qw[0], q1 = qw[1], q2 = qw[2], q3 = qw[3];
      for (j = 0; j < T; ++j, kh += 8) {
        const int32_t w0 = edgeosc_read4(kh), w1 = edgeosc_read4(kh + 4);
        int32_t acc = __smlad(q1, edgeosc_sxtb16_ror8(w0), __smlad(q0, __sxtb16(w0), base));
        acc = __smlad(q3, edgeosc_sxtb16_ror8(w1), __smlad(q2, __sxtb16(w1), acc));
        row[j] = core_requant(&q, acc, rq, zo, rounding);
      }
      return;
    }
    for (j = 0; j < T; ++j) {
      const int8_t *kj = kh + (size_t)j * dh;
      int32_t acc = base;
      for (d = 0; d < dh; d += 4) {
        const int32_t w = edgeosc_read4(kj + d);
        acc = __smlad(qw[d / 2 + 1], edgeosc_sxtb16_ror8(w), __smlad(qw[d / 2], __sxtb16(w), acc));
      }
      row[j] = core_requant(dsp ? &q : 0, acc, rq, zo, rounding);
    }
    return;
  }
#elif EDGEOSC_NEON
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
    return;
  }
#endif
  for (j = 0; j < T; ++j) {
    const int8_t *kj = kh + (size_t)j * dh;
    int32_t acc = 0;
    for (d = 0; d < dh; ++d) acc += (qi[d] - zq) * (kj[d] - zk);
    row[j] = edgeosc_requant_int8(acc, rq, zo, rounding);
  }
}

#define MIX_PAIRS 64 /* mix_row's packed probability pairs on the stack (256 bytes): windows to 128 keys pack once */

/* out_i = row (length T) times vh [T, dv]. */
static void mix_row(const int8_t *row, const int8_t *vh, int T, int dv, int32_t za, int32_t zv,
                    EdgeoscRequant rq, int32_t zo, int rounding, int8_t *out) {
  int j, d;
#if EDGEOSC_DSP
  if (dv % 4 == 0) {
    /* (a - za).(v - zv) = (a - za).v - zv sum(a - za); two keys per SMLAD: the pairs (a_j, a_j+1), packed once,
     * against (v_j,d, v_j+1,d), gathered from two rows' SXTB16 lanes with PKHBT / PKHTB */
    EdgeoscDspRequant q;
    const int dsp = rounding == EDGEOSC_ROUND_AWAY && edgeosc_dsp_requant_init(&q, rq.multiplier, rq.shift);
    int32_t asum = 0, apair[MIX_PAIRS];
    const int pairs = T / 2;
    for (j = 0; j < T; ++j) asum += row[j] - za;
    for (d = 0; d < dv; d += 4) {
      int32_t acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0, c, n;
      const int8_t *v0 = vh + d;
      for (c = 0; c < pairs; c += MIX_PAIRS) { /* MIX_PAIRS pairs at a time (the stack), packed once if all fit */
        n = pairs - c < MIX_PAIRS ? pairs - c : MIX_PAIRS;
        if (d == 0 || pairs > MIX_PAIRS)
          for (j = 0; j < n; ++j) apair[j] = edgeosc_pack16(row[2 * (c + j)] - za, row[2 * (c + j) + 1] - za);
        for (j = 0; j < n; ++j, v0 += 2 * dv) {
          const int32_t a = apair[j], w0 = edgeosc_read4(v0), w1 = edgeosc_read4(v0 + dv);
          const int32_t e0 = __sxtb16(w0), e1 = __sxtb16(w1);
          const int32_t o0 = edgeosc_sxtb16_ror8(w0), o1 = edgeosc_sxtb16_ror8(w1);
          acc0 = __smlad(a, edgeosc_pack_bottoms(e0, e1), acc0); /* lanes d */
          acc1 = __smlad(a, edgeosc_pack_bottoms(o0, o1), acc1); /* d + 1 */
          acc2 = __smlad(a, edgeosc_pack_tops(e0, e1), acc2);    /* d + 2 */
          acc3 = __smlad(a, edgeosc_pack_tops(o0, o1), acc3);    /* d + 3 */
        }
      }
      j = 2 * pairs;
      if (j < T) {
        const int8_t *vj = vh + (size_t)j * dv + d;
        const int32_t aj = row[j] - za;
        acc0 += aj * vj[0], acc1 += aj * vj[1], acc2 += aj * vj[2], acc3 += aj * vj[3];
      }
      out[d] = core_requant(dsp ? &q : 0, acc0 - zv * asum, rq, zo, rounding);
      out[d + 1] = core_requant(dsp ? &q : 0, acc1 - zv * asum, rq, zo, rounding);
      out[d + 2] = core_requant(dsp ? &q : 0, acc2 - zv * asum, rq, zo, rounding);
      out[d + 3] = core_requant(dsp ? &q : 0, acc3 - zv * asum, rq, zo, rounding);
    }
    return;
  }
#elif EDGEOSC_NEON
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
    return;
  }
#endif
  for (d = 0; d < dv; ++d) {
    int32_t acc = 0;
    for (j = 0; j < T; ++j) acc += (row[j] - za) * (vh[(size_t)j * dv + d] - zv);
    out[d] = edgeosc_requant_int8(acc, rq, zo, rounding);
  }
}

/* Both oscillator cores; gp and g are NULL without the key gate. */
static int oscillator_core(const EdgeoscOscParams *p, const EdgeoscGateParams *gp, const int8_t *q,
                           const int8_t *k, const int8_t *v, const int8_t *r, const int8_t *g,
                           int8_t *out, int8_t *scratch) {
  const int T = p->tokens, dh = p->d_head, dr = p->d_osc, dv = p->d_value;
  int8_t *row = scratch, *h = scratch + T, *z = scratch + T + dr;
  int hd, i, j, e;
  if (T <= 0 || dh <= 0 || dr <= 0 || dv <= 0 || p->heads <= 0 || !p->table_w || !p->table_c ||
      !p->table_inv)
    return -1;
  for (hd = 0; hd < p->heads; ++hd) {
    const int8_t *qh = q + (size_t)hd * T * dh, *kh = k + (size_t)hd * T * dh;
    const int8_t *vh = v + (size_t)hd * T * dv, *rh = r + (size_t)hd * T * dr;
    for (i = 0; i < T; ++i) {
      int32_t csum = 0, inv_off;
      int8_t sum;
      /* 1-2: scores, the positive map through its table, each row normalised (in place) */
      score_row(qh + (size_t)i * dh, kh, T, dh, p->zp_q, p->zp_k, p->rq_qk, p->zp_qk,
                p->round_matmul, row);
      for (j = 0; j < T; ++j) row[j] = p->table_w[row[j] + 128];
      edgeosc_l2norm_row_int8(row, T, p->zp_w, row); /* wn: a unit row at 1/128 (in place) */
      /* 3: h = wn r */
      for (e = 0; e < dr; ++e) {
        int32_t acc = 0;
        for (j = 0; j < T; ++j) acc += row[j] * (rh[(size_t)j * dr + e] - p->zp_r);
        h[e] = edgeosc_requant_int8(acc, p->rq_h, p->zp_h, p->round_matmul);
      }
      /* 4: z = h / |h| (TFLite's integer L2 norm; h = 0 gives z = 0) */
      edgeosc_l2norm_row_int8(h, dr, p->zp_h, z);
      /* 5-6: zr = z r^T (z has zero point 0), then (1 + zr)^p through its table */
      score_row(z, rh, T, dr, 0, p->zp_r, p->rq_zr, p->zp_zr, p->round_matmul, row);
      for (j = 0; j < T; ++j) row[j] = p->table_c[row[j] + 128];
      if (g) { /* the key gate: MUL by the head's unit gates (zero point 0), then unit rows (in place) */
        const int8_t *gh = g + (size_t)hd * T;
        for (j = 0; j < T; ++j)
          row[j] = edgeosc_requant_int8((row[j] - gp->zp_pow) * gh[j], gp->rq_gate, gp->zp_gated,
                                        p->round_mul);
        edgeosc_l2norm_row_int8(row, T, gp->zp_gated, row);
      }
      for (j = 0; j < T; ++j) csum += row[j] - p->zp_c;
      /* 7-8: the row sum requantized (the ones column is a constant, so one product), 1/sum */
      sum = edgeosc_requant_int8(csum * p->ones, p->rq_sum, p->zp_sum, p->round_sum);
      inv_off = p->table_inv[sum + 128] - p->zp_inv;
      /* 9: a = c * inv, broadcast over the row (in place) */
      for (j = 0; j < T; ++j)
        row[j] = edgeosc_requant_int8((row[j] - p->zp_c) * inv_off, p->rq_a, p->zp_a, p->round_mul);
      /* 10: out = a v */
      mix_row(row, vh, T, dv, p->zp_a, p->zp_v, p->rq_out, p->zp_out, p->round_matmul,
              out + ((size_t)hd * T + i) * dv);
    }
  }
  return 0;
}

int edgeosc_oscillator_core_int8(const EdgeoscOscParams *p, const int8_t *q, const int8_t *k,
                                 const int8_t *v, const int8_t *r, int8_t *out, int8_t *scratch) {
  return oscillator_core(p, NULL, q, k, v, r, NULL, out, scratch);
}

int edgeosc_oscillator_gated_core_int8(const EdgeoscOscParams *p, const EdgeoscGateParams *gp,
                                       const int8_t *q, const int8_t *k, const int8_t *v,
                                       const int8_t *r, const int8_t *g, int8_t *out,
                                       int8_t *scratch) {
  if (!gp || !g) return -1;
  return oscillator_core(p, gp, q, k, v, r, g, out, scratch);
}

int edgeosc_softmax_core_int8(const EdgeoscSoftmaxParams *p, const int8_t *q, const int8_t *k,
                              const int8_t *v, int8_t *out, int8_t *scratch) {
  const int T = p->tokens, dh = p->d_head, dv = p->d_value;
  int hd, i;
  if (T <= 0 || dh <= 0 || dv <= 0 || p->heads <= 0 || p->beta_left_shift < 0) return -1;
  for (hd = 0; hd < p->heads; ++hd) {
    const int8_t *qh = q + (size_t)hd * T * dh, *kh = k + (size_t)hd * T * dh;
    const int8_t *vh = v + (size_t)hd * T * dv;
    for (i = 0; i < T; ++i) {
      score_row(qh + (size_t)i * dh, kh, T, dh, p->zp_q, p->zp_k, p->rq_qk, p->zp_qk,
                p->round_matmul, scratch);
      if (p->exp_lut)
        edgeosc_softmax_row_lut_int8(scratch, T, p->exp_lut, scratch);
      else
        edgeosc_softmax_row_int8(scratch, T, p->beta_multiplier, p->beta_left_shift, p->diff_min,
                                 scratch);
      mix_row(scratch, vh, T, dv, -128, p->zp_v, p->rq_out, p->zp_out, p->round_matmul,
              out + ((size_t)hd * T + i) * dv);
    }
  }
  return 0;
}

/* ---- the linear oscillator core (d_osc 2; edgeosc/integer/reference.py, the linear core) ---------------- */

/* [cos m t, sin m t] in Q15 for m = 1..p from x = 128 (cos t, sin t): powers of x_0 + i x_1. */
static void harmonics_q15(const int8_t *x, int p, int32_t *out) {
  int32_t c = (int32_t)x[0] * 256, s = (int32_t)x[1] * 256, m;
  for (m = 0; m < p; ++m) {
    const int32_t c2 = (c * x[0] - s * x[1] + 64) >> 7, s2 = (s * x[0] + c * x[1] + 64) >> 7;
    out[2 * m] = c;
    out[2 * m + 1] = s;
    c = c2;
    s = s2;
  }
}

static int bitlen64(uint64_t x) {
#if defined(__GNUC__)
  return x ? 64 - __builtin_clzll(x) : 0; /* CLZ on Arm */
#else
  int n = 0, s;
  for (s = 32; s > 0; s >>= 1)
    if (x >> s) {
      x >>= s;
      n += s;
    }
  return n + (x > 0);
#endif
}

/* x / 2^e rounded half up (e > 0), x * 2^-e (e <= 0). */
static int64_t shift_round64(int64_t x, int e) {
  return e > 0 ? (x + ((int64_t)1 << (e - 1))) >> e : (int64_t)((uint64_t)x << -e);
}

/* floor(m 2^21 / d) for d in [2^21, 2^22]: long division in 32-bit steps (Cortex-M has no 64-bit divide). */
static uint32_t div_q21(uint32_t m, uint32_t d) {
  uint32_t q = m / d, r = m % d;
  int bits, s;
  for (bits = 21; bits > 0; bits -= s) { /* r < d <= 2^22, so r << 10 fits */
    s = bits > 10 ? 10 : bits;
    r <<= s;
    q = (q << s) | (r / d);
    r %= d;
  }
  return q;
}

#if EDGEOSC_NEON
/* x[0..3] - zp as int32 lanes (four loads: a vector load could read past the end of x) */
static inline int32x4_t minus_zp4(const int8_t *x, int32_t zp) {
  const int32_t t[4] = {x[0] - zp, x[1] - zp, x[2] - zp, x[3] - zp};
  return vld1q_s32(t);
}
#endif

static int32_t sat32(int64_t x) { return (int32_t)(x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : x); }

/* A key's terms with its sign folded in: K = k - zp_k, r, and the readout rows' coefficients u (the gate times
 * [1, cos m f, sin m f] in Q15, over 2^8; row 0: gate x 128). A missing key: every term 0. */
typedef struct {
  int16_t K[EDGEOSC_LINEAR_MAX_D_HEAD];
  int32_t r0, r1, u[9];
  const int8_t *v;
} KeyTerms;

static void key_terms(const EdgeoscLinearParams *p, const EdgeoscLinearKey *key, const int8_t *any_v, KeyTerms *t) {
  int32_t harm[8], m, a;
  if (!key) {
    for (a = 0; a < p->d_head; ++a) t->K[a] = 0;
    for (m = 0; m < 9; ++m) t->u[m] = 0;
    t->r0 = t->r1 = 0, t->v = any_v;
    return;
  }
  for (a = 0; a < p->d_head; ++a) t->K[a] = (int16_t)(key->k[a] - p->zp_k);
  t->r0 = key->sign * key->r[0], t->r1 = key->sign * key->r[1], t->v = key->v;
  harmonics_q15(key->r, p->p, harm);
  t->u[0] = key->sign * key->gate * 128;
  for (m = 0; m < 2 * p->p; ++m) t->u[m + 1] = key->sign * ((key->gate * harm[m] + 128) >> 8);
}

/* Both keys' terms into the state, wrapping as uint32 (a key added then removed leaves it as it was):
 *   coupling [1, K_i, K_i K_j (i <= j)] x r, as K_j (K_i r): |K| <= 255 and |r| <= 128, so both factors are int16
 *   and the DSP path adds a and b's in one SMLAD;
 *   readout u_m [v - zp_v, 1] for each row m (u can pass int16: the gate's 256 x 128 without the key gate). */
void edgeosc_linear_update(const EdgeoscLinearParams *p, int32_t *state, const EdgeoscLinearKey *a,
                           const EdgeoscLinearKey *b) {
  const int dh = p->d_head, dv = p->d_value, nr = 2 * p->p + 1;
  const int32_t zv = p->zp_v;
  uint32_t *sc = (uint32_t *)state, *sr = sc + 2 * EDGEOSC_LINEAR_COUPLING(dh);
  KeyTerms ta, tb;
  int32_t i, m, d;
#if EDGEOSC_DSP
  int32_t kk[EDGEOSC_LINEAR_MAX_D_HEAD]; /* (K_a, K_b) int16 pairs */
#endif
  key_terms(p, a, a->v, &ta);
  key_terms(p, b, a->v, &tb);
  sc[0] += (uint32_t)(ta.r0 + tb.r0);
  sc[1] += (uint32_t)(ta.r1 + tb.r1);
  sc += 2;
#if EDGEOSC_DSP
  for (i = 0; i < dh; ++i) kk[i] = edgeosc_pack16(ta.K[i], tb.K[i]);
  {
    const int32_t r0 = edgeosc_pack16(ta.r0, tb.r0), r1 = edgeosc_pack16(ta.r1, tb.r1);
    for (i = 0; i < dh; ++i, sc += 2) {
      sc[0] = (uint32_t)__smlad(kk[i], r0, (int32_t)sc[0]);
      sc[1] = (uint32_t)__smlad(kk[i], r1, (int32_t)sc[1]);
    }
  }
  for (i = 0; i < dh; ++i) {
    const int32_t x0 = edgeosc_pack16(ta.K[i] * ta.r0, tb.K[i] * tb.r0);
    const int32_t x1 = edgeosc_pack16(ta.K[i] * ta.r1, tb.K[i] * tb.r1);
    const int32_t *kj = kk + i, *const end = kk + dh;
    for (; kj < end; ++kj, sc += 2) {
      sc[0] = (uint32_t)__smlad(*kj, x0, (int32_t)sc[0]);
      sc[1] = (uint32_t)__smlad(*kj, x1, (int32_t)sc[1]);
    }
  }
#else
  for (i = 0; i < dh; ++i, sc += 2) {
    sc[0] += (uint32_t)(ta.K[i] * ta.r0 + tb.K[i] * tb.r0);
    sc[1] += (uint32_t)(ta.K[i] * ta.r1 + tb.K[i] * tb.r1);
  }
  for (i = 0; i < dh; ++i) {
    const int32_t xa0 = ta.K[i] * ta.r0, xb0 = tb.K[i] * tb.r0, xa1 = ta.K[i] * ta.r1, xb1 = tb.K[i] * tb.r1;
    int32_t j = i;
#if EDGEOSC_NEON
    for (; j + 4 <= dh; j += 4, sc += 8) { /* four features' pairs: de-interleaved, added, stored back */
      const int32x4_t ka = vmovl_s16(vld1_s16(ta.K + j)), kb = vmovl_s16(vld1_s16(tb.K + j));
      uint32x4x2_t pair = vld2q_u32(sc);
      pair.val[0] = vaddq_u32(pair.val[0], vreinterpretq_u32_s32(vmlaq_n_s32(vmulq_n_s32(ka, xa0), kb, xb0)));
      pair.val[1] = vaddq_u32(pair.val[1], vreinterpretq_u32_s32(vmlaq_n_s32(vmulq_n_s32(ka, xa1), kb, xb1)));
      vst2q_u32(sc, pair);
    }
#endif
    for (; j < dh; ++j, sc += 2) {
      sc[0] += (uint32_t)(ta.K[j] * xa0 + tb.K[j] * xb0);
      sc[1] += (uint32_t)(ta.K[j] * xa1 + tb.K[j] * xb1);
    }
  }
#endif
  /* readout: row 0, then each harmonic's cos and sin rows together, sharing each value */
  for (d = 0; d < dv; ++d) sr[d] += (uint32_t)(ta.u[0] * (ta.v[d] - zv) + tb.u[0] * (tb.v[d] - zv));
  sr[dv] += (uint32_t)(ta.u[0] + tb.u[0]);
  for (m = 1, sr += dv + 1; m < nr; m += 2, sr += 2 * (dv + 1)) {
    const int32_t uca = ta.u[m], usa = ta.u[m + 1], ucb = tb.u[m], usb = tb.u[m + 1];
    uint32_t *const ss = sr + dv + 1;
    d = 0;
#if EDGEOSC_NEON
    for (; d + 4 <= dv; d += 4) {
      const int32x4_t va = minus_zp4(ta.v + d, zv), vb = minus_zp4(tb.v + d, zv);
      const int32x4_t c = vmlaq_n_s32(vmulq_n_s32(va, uca), vb, ucb), s = vmlaq_n_s32(vmulq_n_s32(va, usa), vb, usb);
      vst1q_u32(sr + d, vaddq_u32(vld1q_u32(sr + d), vreinterpretq_u32_s32(c)));
      vst1q_u32(ss + d, vaddq_u32(vld1q_u32(ss + d), vreinterpretq_u32_s32(s)));
    }
#endif
    for (; d < dv; ++d) {
      const int32_t va = ta.v[d] - zv, vb = tb.v[d] - zv;
      sr[d] += (uint32_t)(uca * va + ucb * vb);
      ss[d] += (uint32_t)(usa * va + usb * vb);
    }
    sr[dv] += (uint32_t)(uca + ucb);
    ss[dv] += (uint32_t)(usa + usb);
  }
}

/* round(x / 2^e) (ties up) for e in [32, 62] from the top word: a 64-bit add, then one 32-bit shift */
static int32_t shift_round64_high(int64_t x, int e) {
  return (int32_t)((x + ((int64_t)1 << (e - 1))) >> 32) >> (e - 32);
}

void edgeosc_linear_query(const EdgeoscLinearParams *p, const int32_t *state, const int8_t *q, int8_t *out) {
  static const int32_t kWeights[5][5] = {{0}, {2, 2}, {6, 8, 2}, {20, 30, 12, 2}, {70, 112, 56, 16, 2}};
  const int dh = p->d_head, dv = p->d_value, nr = 2 * p->p + 1;
  const int32_t *sc = state, *sr = state + 2 * EDGEOSC_LINEAR_COUPLING(dh), *w = kWeights[p->p];
  int64_t h0, h1, den;
  int32_t Q[EDGEOSC_LINEAR_MAX_D_HEAD], beta[9], harm[8], hh[2], a, m, d, e, dn, inv, shift;
  int8_t z[2];
  /* 1: h = 2 sum_j (2/s^2) taylor2(s Q.K_j) r_j = c1^2 R + 2 c1 Q.KR + sum_ab (2|4) Q_a Q_b KKR_ab */
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
#if EDGEOSC_NEON
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
#endif
    for (; qb < end; ++qb, sc += 2) {
      const int32_t qq = qa4 * *qb;
      h0 += (int64_t)qq * sc[0];
      h1 += (int64_t)qq * sc[1];
    }
  }
  /* 2: z = h / |h|: its direction in 14 bits, then TFLite's L2 norm (h = 0: z = 0) */
  e = bitlen64((uint64_t)(h0 < 0 ? -h0 : h0) > (uint64_t)(h1 < 0 ? -h1 : h1) ? (uint64_t)(h0 < 0 ? -h0 : h0)
                                                                            : (uint64_t)(h1 < 0 ? -h1 : h1)) - 14;
  hh[0] = (int32_t)shift_round64(h0, e);
  hh[1] = (int32_t)shift_round64(h1, e);
  l2norm_int32(hh, 2, z);
  /* 3: the readout's coefficients 2^p a_m [1, cos m t, sin m t] (Q15), then numerators and denominator */
  harmonics_q15(z, p->p, harm);
  beta[0] = w[0] * 32768;
  for (m = 1; m < nr; ++m) beta[m] = w[(m + 1) / 2] * harm[m - 1];
  den = 0;
  for (m = 0; m < nr; ++m) den += (int64_t)beta[m] * sr[m * (dv + 1) + dv];
  if (den <= 0) { /* no weight on any key */
    for (d = 0; d < dv; ++d) out[d] = clamp8(p->zp_out);
    return;
  }
  /* 4: one division per query: den to 22 bits, m 2^21 / den a multiplier of each numerator */
  e = bitlen64((uint64_t)den) - 22;
  dn = (int32_t)shift_round64(den, e);
  inv = (int32_t)div_q21((uint32_t)p->rq_out.multiplier, (uint32_t)dn);
  shift = 52 - p->rq_out.shift; /* 32..62 */
  for (d = 0; d < dv; d += 2) { /* two numerators at a time share each beta (NEON: four) */
    const int two = d + 1 < dv; /* else the last value twice */
    int64_t num[4] = {0, 0, 0, 0};
    int n, count = 1 + two;
#if EDGEOSC_NEON
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
    } else
#endif
    {
      int64_t n0 = 0, n1 = 0;
      const int32_t *col = sr + d;
      for (m = 0; m < nr; ++m, col += dv + 1) {
        n0 += (int64_t)beta[m] * col[0];
        n1 += (int64_t)beta[m] * col[two];
      }
      num[0] = n0, num[1] = n1;
    }
    for (n = 0; n < count; ++n) {
      int64_t x = num[n];
      if (e <= 0) /* a left shift of a numerator beyond 2^40 saturates anyway */
        x = x < -((int64_t)1 << 40) ? -((int64_t)1 << 40) : x > ((int64_t)1 << 40) ? ((int64_t)1 << 40) : x;
      out[d + n] = clamp8(shift_round64_high((int64_t)sat32(shift_round64(x, e)) * inv, shift) + p->zp_out);
    }
    d += count - 2;
  }
}

int edgeosc_linear_core_int8(const EdgeoscLinearParams *p, const int8_t *q, const int8_t *k, const int8_t *v,
                             const int8_t *r, const int8_t *g, int8_t *out, int32_t *state) {
  const int T = p->tokens, dh = p->d_head, dv = p->d_value;
  const size_t words = EDGEOSC_LINEAR_STATE_WORDS(dh, dv, p->p);
  int hd, i, j;
  size_t n;
  if (T <= 0 || dh <= 0 || dh > EDGEOSC_LINEAR_MAX_D_HEAD || dv <= 0 || p->heads <= 0 || p->p < 1 ||
      p->p > 4 || p->rq_out.shift < -10 || p->rq_out.shift > 20 || p->c1 < 16 ||
      p->c1 >= (1 << 20)) /* the int64 bounds' ranges */
    return -1;
  for (hd = 0; hd < p->heads; ++hd) {
    const int8_t *qh = q + (size_t)hd * T * dh, *kh = k + (size_t)hd * T * dh;
    const int8_t *vh = v + (size_t)hd * T * dv, *rh = r + (size_t)hd * T * 2;
    int8_t *oh = out + (size_t)hd * T * dv;
    for (n = 0; n < words; ++n) state[n] = 0;
    for (i = j = 0; i < T; ++i) {
      while (j < T && (j <= i || !p->causal)) { /* the keys query i reads: all, two a pass, or up to i if causal */
        const int two = j + 1 < T && (j + 1 <= i || !p->causal);
        EdgeoscLinearKey ka, kb;
        ka.k = kh + (size_t)j * dh, ka.v = vh + (size_t)j * dv, ka.r = rh + (size_t)j * 2, ka.sign = 1;
        ka.gate = g ? g[(size_t)hd * T + j] - p->zp_g : 256;
        kb = ka;
        if (two)
          kb.k += dh, kb.v += dv, kb.r += 2, kb.gate = g ? g[(size_t)hd * T + j + 1] - p->zp_g : 256;
        edgeosc_linear_update(p, state, &ka, two ? &kb : NULL);
        j += 1 + two;
      }
      edgeosc_linear_query(p, state, qh + (size_t)i * dh, oh + (size_t)i * dv);
    }
  }
  return 0;
}
