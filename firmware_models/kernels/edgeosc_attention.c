/* Int8 attention cores (see edgeosc_attention.h). Row by row: one query's T scores live in scratch.
 *
 * The reference kernels (the loops every variant is checked against) and their dispatch: a row kernel first tries this
 * build's optimised variant (edgeosc_attention_fast.h lists them: dsp/, neon/), which gives the same integers, bit
 * for bit. The linear core's variants are still inline below. */
#include "edgeosc_attention.h"
#include "edgeosc_attention_fast.h"

/* The optimised variants, a file each, compiled in this unit (as edgeosc_ops.c's are) so that the dispatch's calls
 * to them inline: the cores call their row kernels once per query */
#include "dsp/edgeosc_attention_dsp.c"
#include "neon/edgeosc_attention_neon.c"

static int8_t clamp8(int32_t y) { return (int8_t)(y < -128 ? -128 : y > 127 ? 127 : y); }

/* TFLite's int8 L2_NORMALIZATION of n values already offset by the zero point (squares summing below 2^31). */
static void l2norm_int32(const int32_t *d, int n, int8_t *out) {
  int32_t acc = 0, mult;
  int i, shift;
#if EDGEOSC_DSP
  if (l2norm_int32_dsp(d, n, out)) return;
#endif
  for (i = 0; i < n; ++i) acc += d[i] * d[i];
  edgeosc_inv_sqrt_multiplier(acc, &mult, &shift);
  for (i = 0; i < n; ++i) out[i] = clamp8(edgeosc_mbqm(d[i], mult, shift + 7));
}

void edgeosc_l2norm_row_int8(const int8_t *x, int n, int32_t zero_point, int8_t *out) {
  int32_t acc = 0, mult;
  int i, shift;
#if EDGEOSC_DSP
  if (edgeosc_l2norm_row_dsp(x, n, zero_point, out)) return;
#endif
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
#if EDGEOSC_DSP
  if (edgeosc_softmax_row_lut_dsp(x, n, exp_lut, out)) return;
#endif
  for (i = 0; i < n; ++i)
    if (x[i] > max) max = x[i];
  for (i = 0; i < n; ++i) sum += edgeosc_rdbpot(exp_lut[max - x[i]], 12);
  scale = edgeosc_reciprocal(sum, 12, &bits_over_unit);
  exponent = bits_over_unit + 31 - 8;
  for (i = 0; i < n; ++i) /* a left-out entry has exp 0, so it lands on -128 as in the reference */
    out[i] = clamp8(edgeosc_rdbpot(edgeosc_srdhm(scale, exp_lut[max - x[i]]), exponent) - 128);
}

/* One row of q k^T for query i of a head: T requantized scores. */
static void score_row(const int8_t *qi, const int8_t *kh, int T, int dh, int32_t zq, int32_t zk,
                      EdgeoscRequant rq, int32_t zo, int rounding, int8_t *row) {
  int j, d;
#if EDGEOSC_DSP
  if (score_row_dsp(qi, kh, T, dh, zq, zk, rq, zo, rounding, row)) return;
#elif EDGEOSC_NEON
  if (score_row_neon(qi, kh, T, dh, zq, zk, rq, zo, rounding, row)) return;
#endif
  for (j = 0; j < T; ++j) {
    const int8_t *kj = kh + (size_t)j * dh;
    int32_t acc = 0;
    for (d = 0; d < dh; ++d) acc += (qi[d] - zq) * (kj[d] - zk);
    row[j] = edgeosc_requant_int8(acc, rq, zo, rounding);
  }
}

/* out_i = row (length T) times vh [T, dv]. */
static void mix_row(const int8_t *row, const int8_t *vh, int T, int dv, int32_t za, int32_t zv,
                    EdgeoscRequant rq, int32_t zo, int rounding, int8_t *out) {
  int j, d;
#if EDGEOSC_DSP
  if (mix_row_dsp(row, vh, T, dv, za, zv, rq, zo, rounding, out)) return;
#elif EDGEOSC_NEON
  if (mix_row_neon(row, vh, T, dv, za, zv, rq, zo, rounding, out)) return;
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
  const int T = p->tokens, dh = p->d_head, dv = p->d_value, Tq = p->queries ? p->queries : T;
  int hd, i;
  if (T <= 0 || Tq <= 0 || dh <= 0 || dv <= 0 || p->heads <= 0 || p->beta_left_shift < 0) return -1;
  for (hd = 0; hd < p->heads; ++hd) {
    const int8_t *qh = q + (size_t)hd * Tq * dh, *kh = k + (size_t)hd * T * dh;
    const int8_t *vh = v + (size_t)hd * T * dv;
    for (i = 0; i < Tq; ++i) {
      score_row(qh + (size_t)i * dh, kh, T, dh, p->zp_q, p->zp_k, p->rq_qk, p->zp_qk,
                p->round_matmul, scratch);
      if (p->exp_lut)
        edgeosc_softmax_row_lut_int8(scratch, T, p->exp_lut, scratch);
      else
        edgeosc_softmax_row_int8(scratch, T, p->beta_multiplier, p->beta_left_shift, p->diff_min,
                                 scratch);
      mix_row(scratch, vh, T, dv, -128, p->zp_v, p->rq_out, p->zp_out, p->round_matmul,
              out + ((size_t)hd * Tq + i) * dv);
    }
  }
  return 0;
}

/* ---- the linear oscillator core (d_osc 2; edgeosc/integer/reference.py, the linear core) ---------------- */

/* [cos m t, sin m t] in Q15 for m = 1..p from x = 128 (cos t, sin t): powers of x_0 + i x_1. */
/* (inline: unrolled where p is a constant) */
static inline __attribute__((always_inline)) void harmonics_q15(const int8_t *x, int p, int32_t *out) {
  int32_t c = (int32_t)x[0] * 256, s = (int32_t)x[1] * 256, m;
#pragma GCC unroll 4
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
  int32_t r0, r1, u[9], fits; /* fits: u[1..2p] in int16 (the DSP pass pairs them) */
  const int8_t *v;
} KeyTerms;

/* A key's readout coefficients u[0..2p] (KeyTerms.u); returns whether u[1..2p] fit int16. */
static inline __attribute__((always_inline)) int readout_terms(const EdgeoscLinearKey *key, int32_t *u,
                                                               const int pp) {
  int32_t harm[8], m;
  uint32_t spill = 0;
  harmonics_q15(key->r, pp, harm);
  u[0] = key->sign * key->gate * 128;
#pragma GCC unroll 8
  for (m = 0; m < 2 * pp; ++m) {
    u[m + 1] = key->sign * ((key->gate * harm[m] + 128) >> 8);
    spill |= (uint32_t)(u[m + 1] + 32768); /* bit 16 or above set: outside int16 */
  }
  return spill < 65536;
}

static inline __attribute__((always_inline)) void key_terms_of(const EdgeoscLinearParams *p,
                                                               const EdgeoscLinearKey *key, const int8_t *any_v,
                                                               KeyTerms *t, const int dh, const int pp) {
  int32_t m, a;
  if (!key) {
    for (a = 0; a < dh; ++a) t->K[a] = 0;
    for (m = 0; m < 9; ++m) t->u[m] = 0;
    t->r0 = t->r1 = 0, t->v = any_v, t->fits = 1;
    return;
  }
#pragma GCC unroll 8
  for (a = 0; a < dh; ++a) t->K[a] = (int16_t)(key->k[a] - p->zp_k);
  t->r0 = key->sign * key->r[0], t->r1 = key->sign * key->r[1], t->v = key->v;
  t->fits = readout_terms(key, t->u, pp);
}

/* The head the models run (d_head = d_value = 8, p = 4): its key terms unrolled, on the DSP path its update and
 * query too (update_d8, linear_query_d8) */
static int default_head(const EdgeoscLinearParams *p) { return p->d_head == 8 && p->d_value == 8 && p->p == 4; }

/* A key's terms (key_terms_of), unrolled for the default head */
static void key_terms(const EdgeoscLinearParams *p, const EdgeoscLinearKey *key, const int8_t *any_v, KeyTerms *t) {
  if (default_head(p))
    key_terms_of(p, key, any_v, t, 8, 4);
  else
    key_terms_of(p, key, any_v, t, p->d_head, p->p);
}

/* The portable update: both keys' terms into the state, wrapping as uint32 (a key added then removed leaves it as
 * it was): coupling [1, K_i, K_i K_j (i <= j)] x r, as K_j (K_i r); readout u_m [v - zp_v, 1] for each row m. */
static void linear_update_portable(const EdgeoscLinearParams *p, int32_t *state, const KeyTerms *ta,
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
#if EDGEOSC_NEON
    for (; j + 4 <= dh; j += 4, sc += 8) { /* four features' pairs: de-interleaved, added, stored back */
      const int32x4_t ka = vmovl_s16(vld1_s16(ta->K + j)), kb = vmovl_s16(vld1_s16(tb->K + j));
      uint32x4x2_t pair = vld2q_u32(sc);
      pair.val[0] = vaddq_u32(pair.val[0], vreinterpretq_u32_s32(vmlaq_n_s32(vmulq_n_s32(ka, xa0), kb, xb0)));
      pair.val[1] = vaddq_u32(pair.val[1], vreinterpretq_u32_s32(vmlaq_n_s32(vmulq_n_s32(ka, xa1), kb, xb1)));
      vst2q_u32(sc, pair);
    }
#endif
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
#if EDGEOSC_NEON
    for (; d + 4 <= dv; d += 4) {
      const int32x4_t va = minus_zp4(ta->v + d, zv), vb = minus_zp4(tb->v + d, zv);
      const int32x4_t c = vmlaq_n_s32(vmulq_n_s32(va, uca), vb, ucb), s = vmlaq_n_s32(vmulq_n_s32(va, usa), vb, usb);
      vst1q_u32(sr + d, vaddq_u32(vld1q_u32(sr + d), vreinterpretq_u32_s32(c)));
      vst1q_u32(ss + d, vaddq_u32(vld1q_u32(ss + d), vreinterpretq_u32_s32(s)));
    }
#endif
    for (; d < dv; ++d) {
      const int32_t va = ta->v[d] - zv, vb = tb->v[d] - zv;
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

/* The readout's coefficients 2^p a_m [1, cos m t, sin m t] (Q15) of z = h / |h|: h's direction in 14 bits, then
 * TFLite's L2 norm (h = 0: z = 0). */
static inline __attribute__((always_inline)) void readout_weights_of(int64_t h0, int64_t h1, int32_t *beta,
                                                                     const int pp) {
  static const int32_t kWeights[5][5] = {{0}, {2, 2}, {6, 8, 2}, {20, 30, 12, 2}, {70, 112, 56, 16, 2}};
  const int32_t *w = kWeights[pp];
  const uint64_t a0 = (uint64_t)(h0 < 0 ? -h0 : h0), a1 = (uint64_t)(h1 < 0 ? -h1 : h1);
  const int e = bitlen64(a0 > a1 ? a0 : a1) - 14;
  int32_t hh[2], harm[8], m;
  int8_t z[2];
  hh[0] = (int32_t)shift_round64(h0, e);
  hh[1] = (int32_t)shift_round64(h1, e);
  l2norm_int32(hh, 2, z);
  harmonics_q15(z, pp, harm);
  beta[0] = w[0] * 32768;
#pragma GCC unroll 8
  for (m = 1; m < 2 * pp + 1; ++m) beta[m] = w[(m + 1) / 2] * harm[m - 1];
}

/* readout_weights_of for the head's p (the default head's query calls it with 4: unrolled) */
static void readout_weights(const EdgeoscLinearParams *p, int64_t h0, int64_t h1, int32_t *beta) {
  readout_weights_of(h0, h1, beta, p->p);
}

/* One division per query: den (> 0) to 22 bits, m 2^21 / den a multiplier of each numerator. */
typedef struct {
  int32_t e, inv, shift, zp_out, any; /* any: den > 0 (else every output is the zero point) */
  uint64_t half, round;               /* 2^(e-1) for e >= 1, 2^(shift-1) */
} Divider;

static inline void divider(const EdgeoscLinearParams *p, int64_t den, Divider *dv) {
  dv->zp_out = p->zp_out, dv->any = den > 0, dv->e = dv->inv = 0;
  dv->shift = 52 - p->rq_out.shift; /* 32..62 */
  dv->round = (uint64_t)1 << (dv->shift - 1);
  if (dv->any) {
    dv->e = bitlen64((uint64_t)den) - 22;
    dv->inv = (int32_t)div_q21((uint32_t)p->rq_out.multiplier, (uint32_t)shift_round64(den, dv->e));
  }
  dv->half = dv->e >= 1 ? (uint64_t)1 << (dv->e - 1) : 0;
}

static inline __attribute__((always_inline)) int8_t divided(const Divider *dv, int64_t x) {
  if (!dv->any) return clamp8(dv->zp_out);
  if (dv->e <= 0) /* a left shift of a numerator beyond 2^40 saturates anyway */
    x = x < -((int64_t)1 << 40) ? -((int64_t)1 << 40) : x > ((int64_t)1 << 40) ? ((int64_t)1 << 40) : x;
  return clamp8(shift_round64_high((int64_t)sat32(shift_round64(x, dv->e)) * dv->inv, dv->shift) + dv->zp_out);
}

#if EDGEOSC_DSP
/* divided() over a row for a divider with 1 <= e <= 31 (den in [2^23, 2^53]), its constants in registers, in
 * 32-bit halves: round(x / 2^e), saturated to int32 where its top word is not the sign of its bottom one (a select,
 * no branch), times inv and rounded: the rounding 2^(shift - 1) is 2^31 at shift 32 (SMMULR), else its top word
 * alone, which SMMLA adds exactly; SSAT. */
static inline __attribute__((always_inline)) void divided_dsp_row(const Divider *dv, const int64_t *num, int n,
                                                                  int8_t *out, const int top_round) {
  const int32_t e = dv->e, inv = dv->inv, zp = dv->zp_out, sh = dv->shift - 32, rh = (int32_t)(dv->round >> 32);
  const uint32_t half = (uint32_t)dv->half; /* e <= 31 */
  int8_t *const end = out + n;
  for (; out != end; ++out, ++num) {
    const uint64_t t = (uint64_t)*num + half;
    const int32_t hi = (int32_t)(t >> 32), lo = (int32_t)(((uint32_t)t >> e) | ((uint32_t)hi << (32 - e)));
    const int32_t sat = (hi >> 31) ^ INT32_MAX, y = (hi >> e) != (lo >> 31) ? sat : lo;
    int32_t r;
    if (top_round)
      __asm__("smmla %0, %1, %2, %3" : "=r"(r) : "r"(y), "r"(inv), "r"(rh));
    else
      r = edgeosc_smmulr(y, inv);
    *out = (int8_t)__ssat((r >> sh) + zp, 8);
  }
}

/* A query's n outputs num[d] / den: divided_dsp_row where the divider takes it, else divided */
static inline __attribute__((always_inline)) void divided_row(const Divider *dv, const int64_t *num, int n,
                                                              int8_t *out) {
  int d;
  if (dv->any && dv->e >= 1 && dv->e <= 31 && dv->shift > 32)
    divided_dsp_row(dv, num, n, out, 1);
  else if (dv->any && dv->e >= 1 && dv->e <= 31)
    divided_dsp_row(dv, num, n, out, 0);
  else
    for (d = 0; d < n; ++d) out[d] = divided(dv, num[d]);
}
#endif

/* The portable query: h = 2 sum_j (2/s^2) taylor2(s Q.K_j) r_j = c1^2 R + 2 c1 Q.KR + sum_ab (2|4) Q_a Q_b KKR_ab,
 * then out_d = sum_m beta_m M_md / sum_m beta_m m_m. */
static void linear_query_portable(const EdgeoscLinearParams *p, const int32_t *state, const int8_t *q,
                                  int8_t *out) {
  const int dh = p->d_head, dv = p->d_value, nr = 2 * p->p + 1;
  const int32_t *sc = state, *sr = state + 2 * EDGEOSC_LINEAR_COUPLING(dh);
  int64_t h0, h1, den;
  int32_t Q[EDGEOSC_LINEAR_MAX_D_HEAD], beta[9], a, m, d;
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
  readout_weights(p, h0, h1, beta);
  den = 0;
  for (m = 0; m < nr; ++m) den += (int64_t)beta[m] * sr[m * (dv + 1) + dv];
  divider(p, den, &div);
  for (d = 0; d < dv; d += 2) { /* two numerators at a time share each beta (NEON: four) */
    const int two = d + 1 < dv; /* else the last value twice */
    int64_t num[4];
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
    for (n = 0; n < count; ++n) out[d + n] = divided(&div, num[n]);
    d += count - 2;
  }
}

#if EDGEOSC_DSP
/* The DSP path: one pass over a head's state that adds keys ta and tb and, for a stream's step (`query`), reads
 * query q from each updated word as it goes by, so the step loads and stores each word once (a query alone takes
 * the portable loops: it gains nothing here). `query` is a constant at each call: always_inline specialises both.
 *
 * Coupling. With K' = [1, K] and Q' = [c1, Q], the features [1, K_j, K_i K_j (i <= j)] are K'_i K'_j (i <= j) in
 * the state's order, row by row. Word pair (i, j) takes both keys in one SMLAD each, (K'_a, K'_b)_j against
 * (K'_a r_a, K'_b r_b)_i (all int16), and feeds h by SMLAL with weight m_i Q'_j: m_0 = 2 (2 c1 Q_j), m_i = 4 past
 * the diagonal; the diagonal's weight is 2 Q_i^2, and c1^2 (past 32 bits) at (0, 0). A table holds per j the
 * words {(K'_a, K'_b)_j, Q'_j, x_j for r_0 and r_1, m_j} (ROW_WORDS), then a sentinel pair.
 *
 * Readout. After z: each column's rows take (u_a, u_b) against (V_a, V_b) in one SMLAD, the ones column (V = 1,
 * the denominator) first. Row 0's u = gate x 128 reaches 2^15, so it pairs u / 2 (u is even) and doubles the sum.
 * Rows past 0 need u in int16 (KeyTerms.fits). A table holds per row {(u_a, u_b), beta}, then a sentinel beta.
 * The tables sit on the stack, sized for heads up to DSP_MAX_D_HEAD (d_head and d_value) so that the firmware's
 * stack holds them; wider heads take the portable loops.
 *
 * EDGEOSC_ASM takes the value columns two at a time and the coupling's rows in Thumb-2 assembly, as naked
 * functions: they keep 14 registers whatever the compiler and its options. */
#define ROW_WORDS 5
#define DSP_MAX_D_HEAD 16
#define COUPLING_SENTINEL 0x80008000 /* (K'_a, K'_b) = (-2^15, -2^15): no key's (|K| <= 255) */
#define READOUT_SENTINEL 0x80000000  /* no beta's (|beta| < 2^25) */

/* Readout columns c0 and c1 (col1 == col for a single column: both loads precede both stores), rows 0.. */
static inline __attribute__((always_inline)) void readout_columns(int32_t *col, int32_t *col1, int32_t vv0,
                                                                 int32_t vv1, int stride, const int32_t *ub,
                                                                 int64_t *n0, int64_t *n1, const int query) {
  int32_t x0 = (int32_t)((uint32_t)*col + ((uint32_t)__smuad(vv0, ub[0]) << 1)); /* row 0: u / 2, doubled */
  int32_t x1 = (int32_t)((uint32_t)*col1 + ((uint32_t)__smuad(vv1, ub[0]) << 1));
  int64_t s0 = 0, s1 = 0;
  *col = x0, *col1 = x1;
  if (query) s0 += (int64_t)ub[1] * x0, s1 += (int64_t)ub[1] * x1;
  for (ub += 2; ub[1] != (int32_t)READOUT_SENTINEL; ub += 2) {
    col += stride, col1 += stride;
    x0 = __smlad(vv0, ub[0], *col), x1 = __smlad(vv1, ub[0], *col1);
    *col = x0, *col1 = x1;
    if (query) s0 += (int64_t)ub[1] * x0, s1 += (int64_t)ub[1] * x1;
  }
  *n0 = s0, *n1 = s1;
}

/* A coupling feature's two words (against r_0 and r_1): k x (x0, x1) added in one SMLAD each, then weight w times
 * the sums into h. */
static inline __attribute__((always_inline)) void coupling_words(int32_t *sc, int32_t k, int32_t x0, int32_t x1,
                                                                int32_t w, int64_t *h0, int64_t *h1,
                                                                const int query) {
  const int32_t s0 = __smlad(k, x0, sc[0]), s1 = __smlad(k, x1, sc[1]);
  sc[0] = s0, sc[1] = s1;
  if (query) *h0 += (int64_t)w * s0, *h1 += (int64_t)w * s1;
}

#if EDGEOSC_ASM
/* The coupling's rows after (0, 0): row 0 from (0, 1), every other row from its diagonal; words from sc, table t,
 * h (int64[2]) in and out. r0 sc, r1 the row, r3 the feature, r4 r5 x, r6-r9 h, r10 r11 the words, r12 r2 the
 * feature's (K'_a, K'_b) and Q' (then the weight), lr m_i. */
#define COUPLING_WORDS /* s += (K'_a, K'_b) . x for r_0 and r_1, then on to the next pair */                 \
  "ldrd r10, r11, [r0]\n\tsmlad r10, r12, r4, r10\n\tsmlad r11, r12, r5, r11\n\tstrd r10, r11, [r0], #8\n\t"

/* (naked: its arguments arrive in r0-r2, unnamed in C) */
__attribute__((naked, noinline)) static void coupling_step_asm(int32_t *sc __attribute__((unused)),
                                                               const int32_t *t __attribute__((unused)),
                                                               int64_t *h __attribute__((unused))) {
  __asm__("push {r2, r4-r11, lr}\n\tldrd r6, r7, [r2]\n\tldrd r8, r9, [r2, #8]\n\t"
          "ldrd r4, r5, [r1, #8]\n\tldr lr, [r1, #16]\n\tadd r3, r1, #20\n\tb 3f\n"
          "2:\n\t" /* a row past 0: its diagonal, weight 2 Q_i^2 */
          "ldrd r4, r5, [r1, #8]\n\tldr lr, [r1, #16]\n\tldrd r12, r2, [r1]\n\t" COUPLING_WORDS
          "mul r2, r2, r2\n\tlsl r2, r2, #1\n\tsmlal r6, r7, r2, r10\n\tsmlal r8, r9, r2, r11\n\t"
          "add r3, r1, #20\n"
          "3:\n\t" /* the row's features past the diagonal to the sentinel, weight m_i Q'_j */
          "ldrd r12, r2, [r3], #20\n\tcmp r12, #0x80008000\n\tbeq 4f\n"
          "1:\n\t" COUPLING_WORDS
          "mul r2, lr, r2\n\tsmlal r6, r7, r2, r10\n\tsmlal r8, r9, r2, r11\n\t"
          "ldrd r12, r2, [r3], #20\n\tcmp r12, #0x80008000\n\tbne 1b\n"
          "4:\n\t" /* the next row, unless it is the sentinel */
          "add r1, r1, #20\n\tldr r12, [r1]\n\tcmp r12, #0x80008000\n\tbne 2b\n\t"
          "pop {r2}\n\tstrd r6, r7, [r2]\n\tstrd r8, r9, [r2, #8]\n\tpop {r4-r11, pc}");
}

/* The value columns two at a time: for each pair, its words from col (col and col + 1, then + stride_bytes a
 * row), (V_a, V_b) of both from vv, the numerators to num (int64, two a pair). r0 col, r1 the stride, r2 ub,
 * r3 r4 the words, r5 u then beta, r6-r9 the numerators, r10 r11 the values, r12 the arguments (on the stack). */
typedef struct {
  int32_t *col;
  const int32_t *ub, *vv;
  int64_t *num;
  int32_t stride_bytes, pairs;
} ReadoutPairs;

#define READOUT_ROW /* x += (V_a, V_b) . u, stored, the next row; beta (at ub - 4) */                     \
  "smlad r3, r10, r5, r3\n\tsmlad r4, r11, r5, r4\n\tstrd r3, r4, [r0]\n\tadd r0, r0, r1\n\tldr r5, [r2, #-4]\n\t"

__attribute__((naked, noinline)) static void readout_pairs_step_asm(ReadoutPairs *a __attribute__((unused))) {
  __asm__("push {r0, r4-r11, lr}\n"
          "5:\n\t" /* a pair: its arguments, the next pair's written back */
          "ldr r12, [sp]\n\tldrd r0, r2, [r12]\n\tldr r1, [r12, #16]\n\tldr r3, [r12, #8]\n\t"
          "ldrd r10, r11, [r3], #8\n\tstr r3, [r12, #8]\n\tadd r3, r0, #8\n\tstr r3, [r12]\n\t"
          /* row 0: u / 2, the product doubled (SMUAD); the numerators start at its beta's products */
          "ldrd r3, r4, [r0]\n\tldr r5, [r2], #8\n\tsmuad r6, r10, r5\n\tadd r3, r3, r6, lsl #1\n\t"
          "smuad r6, r11, r5\n\tadd r4, r4, r6, lsl #1\n\tstrd r3, r4, [r0]\n\tadd r0, r0, r1\n\t"
          "ldr r5, [r2, #-4]\n\tsmull r6, r7, r5, r3\n\tsmull r8, r9, r5, r4\n\t"
          "ldrd r5, r3, [r2], #8\n\tcmp r3, #0x80000000\n\tbeq 4f\n"
          "1:\n\t" /* rows past 0 come in pairs (cos and sin): two a trip */
          "ldrd r3, r4, [r0]\n\t" READOUT_ROW "smlal r6, r7, r5, r3\n\tsmlal r8, r9, r5, r4\n\t"
          "ldrd r3, r4, [r0]\n\tldr r5, [r2], #8\n\t" READOUT_ROW "smlal r6, r7, r5, r3\n\tsmlal r8, r9, r5, r4\n\t"
          "ldrd r5, r3, [r2], #8\n\tcmp r3, #0x80000000\n\tbne 1b\n"
          "4:\n\t" /* the numerators out, the next pair */
          "ldr r12, [sp]\n\tldr r3, [r12, #12]\n\tstrd r6, r7, [r3], #8\n\tstrd r8, r9, [r3], #8\n\t"
          "str r3, [r12, #12]\n\tldr r3, [r12, #20]\n\tsubs r3, r3, #1\n\tstr r3, [r12, #20]\n\tbne 5b\n\t"
          "pop {r0, r4-r11, pc}");
}
#endif

static inline __attribute__((always_inline)) void linear_pass(const EdgeoscLinearParams *p, int32_t *state,
                                                             const KeyTerms *ta, const KeyTerms *tb, const int8_t *q,
                                                             int8_t *out, const int query) {
  const int n = p->d_head + 1, dv = p->d_value, nr = 2 * p->p + 1, stride = dv + 1;
  int32_t t[ROW_WORDS * (DSP_MAX_D_HEAD + 1) + 1]; /* the coupling's table */
  int32_t vv[DSP_MAX_D_HEAD + 1];                   /* the columns' (V_a, V_b), V = v - zp_v; (1, 1) */
  int32_t ub[20], beta[9];                          /* the readout's table */
  int64_t h[2], num[DSP_MAX_D_HEAD], n0, n1;
  int32_t *const sr = state + 2 * EDGEOSC_LINEAR_COUPLING(p->d_head);
  int32_t i, m, d;
  Divider div;
  /* the coupling's table, (0, 0), then the rows */
  t[0] = 0x00010001, t[1] = query ? p->c1 : 0, t[4] = 2 * t[1];
  t[2] = edgeosc_pack_bottoms(ta->r0, tb->r0), t[3] = edgeosc_pack_bottoms(ta->r1, tb->r1);
  for (i = 1; i < n; ++i) {
    int32_t *const row = t + ROW_WORDS * i;
    const int32_t ka = ta->K[i - 1], kb = tb->K[i - 1];
    row[0] = edgeosc_pack_bottoms(ka, kb), row[1] = query ? q[i - 1] - p->zp_q : 0, row[4] = 4 * row[1];
    row[2] = edgeosc_pack_bottoms(ka * ta->r0, kb * tb->r0), row[3] = edgeosc_pack_bottoms(ka * ta->r1, kb * tb->r1);
  }
  t[ROW_WORDS * n] = (int32_t)COUPLING_SENTINEL;
  coupling_words(state, t[0], t[2], t[3], 0, &h[0], &h[1], 0);
  h[0] = (int64_t)p->c1 * p->c1 * state[0], h[1] = (int64_t)p->c1 * p->c1 * state[1];
#if EDGEOSC_ASM
  if (query)
    coupling_step_asm(state + 2, t, h);
  else
#endif
  {
    int32_t *sc = state + 2;
    for (i = 0; i < n; ++i) {
      const int32_t *row = t + ROW_WORDS * i, *kj = row + ROW_WORDS, *const end = t + ROW_WORDS * n;
      if (i) coupling_words(sc, row[0], row[2], row[3], 2 * row[1] * row[1], &h[0], &h[1], query), sc += 2;
      for (; kj < end; kj += ROW_WORDS, sc += 2)
        coupling_words(sc, kj[0], row[2], row[3], row[4] * kj[1], &h[0], &h[1], query);
    }
  }
  /* the readout's table, the ones column (the denominator), then the values two at a time */
  if (query) readout_weights(p, h[0], h[1], beta);
  ub[0] = edgeosc_pack_bottoms(ta->u[0] >> 1, tb->u[0] >> 1), ub[1] = query ? beta[0] : 0;
  for (m = 1; m < nr; ++m) ub[2 * m] = edgeosc_pack_bottoms(ta->u[m], tb->u[m]), ub[2 * m + 1] = query ? beta[m] : 0;
  ub[2 * nr] = 0, ub[2 * nr + 1] = (int32_t)READOUT_SENTINEL;
  for (d = 0; d < dv; ++d) vv[d] = edgeosc_pack_bottoms(ta->v[d] - p->zp_v, tb->v[d] - p->zp_v);
  vv[dv] = 0x00010001;
  readout_columns(sr + dv, sr + dv, vv[dv], vv[dv], stride, ub, &n0, &n1, query);
  if (query) divider(p, n0, &div);
#if EDGEOSC_ASM
  if (query && dv > 1) {
    ReadoutPairs a;
    a.col = sr, a.ub = ub, a.vv = vv, a.num = num, a.stride_bytes = 4 * stride, a.pairs = dv / 2;
    readout_pairs_step_asm(&a);
  } else
#endif
    for (d = 0; d + 1 < dv; d += 2)
      readout_columns(sr + d, sr + d + 1, vv[d], vv[d + 1], stride, ub, &num[d], &num[d + 1], query);
  if (dv & 1)
    readout_columns(sr + dv - 1, sr + dv - 1, vv[dv - 1], vv[dv - 1], stride, ub, &num[dv - 1], &n1, query);
  if (query) divided_row(&div, num, dv, out);
}

/* A query alone on the DSP path for the default head (d_head = d_value = 8, p = 4: DH, NR), the portable query's
 * sums: the coupling's 44 features after (0, 0) each one weight (a table: 2 c1 Q_a, then per row 2 Q_a^2 and
 * 4 Q_a Q_b) times its two words, the readout three columns a pass over its rows (six int64 sums), the division by
 * divided_dsp_row. EDGEOSC_ASM runs both loops in Thumb-2 assembly, straight through: runs of loads (LDM, or LDR after
 * LDR, one cycle a word after the first) then SMLAL, which gcc's own scheduling spreads apart. */
#define DH 8
#define NR 9
#define FEATURES (EDGEOSC_LINEAR_COUPLING(DH) - 1)

#if EDGEOSC_ASM
/* h (int64[2]) += sum_f w[f] (sc[2f], sc[2f + 1]) over the 44 features: two features a step */
__attribute__((naked, noinline)) static void coupling_d8_asm(const int32_t *sc __attribute__((unused)),
                                                             const int32_t *w __attribute__((unused)),
                                                             int64_t *h __attribute__((unused))) {
  __asm__("push {r4-r11, lr}\n\tldrd r3, r4, [r2]\n\tldrd r5, r6, [r2, #8]\n\t"
          ".rept 22\n\t"
          "ldm r1!, {r7, r8}\n\tldm r0!, {r9, r10, r11, r12}\n\t"
          "smlal r3, r4, r7, r9\n\tsmlal r5, r6, r7, r10\n\tsmlal r3, r4, r8, r11\n\tsmlal r5, r6, r8, r12\n\t"
          ".endr\n\t"
          "strd r3, r4, [r2]\n\tstrd r5, r6, [r2, #8]\n\tpop {r4-r11, pc}");
}

/* num[d] = sum_m beta[m] col_d[m] for the nine columns of the readout's rows (stride 9 words), three a pass */
__attribute__((naked, noinline)) static void readout_d8_asm(const int32_t *sr __attribute__((unused)),
                                                            const int32_t *beta __attribute__((unused)),
                                                            int64_t *num __attribute__((unused))) {
  __asm__("push {r4-r11, lr}\n\t"
          ".rept 3\n\t"
          "movs r3, #0\n\tmovs r4, #0\n\tmovs r5, #0\n\tmovs r6, #0\n\tmovs r7, #0\n\tmov r8, #0\n\t"
          ".rept 9\n\t"
          "ldr r10, [r0, #4]\n\tldr r11, [r0, #8]\n\tldr r9, [r0], #36\n\tldr r12, [r1], #4\n\t"
          "smlal r3, r4, r12, r9\n\tsmlal r5, r6, r12, r10\n\tsmlal r7, r8, r12, r11\n\t"
          ".endr\n\t"
          "strd r3, r4, [r2], #8\n\tstrd r5, r6, [r2], #8\n\tstrd r7, r8, [r2], #8\n\t"
          "sub r0, r0, #312\n\tsub r1, r1, #36\n\t" /* the next three columns, the rows from the first */
          ".endr\n\t"
          "pop {r4-r11, pc}");
}
#endif

/* The query's coupling weights w[FEATURES] (2 c1 Q_a, then per row 2 Q_a^2 and 4 Q_a Q_b) */
static void query_weights_d8(const EdgeoscLinearParams *p, const int8_t *q, int32_t *w) {
  const int32_t c2 = 2 * p->c1, zq = p->zp_q; /* locals: the stores to w could alias p */
  int32_t Q2[DH], a, b;
#pragma GCC unroll 8
  for (a = 0; a < DH; ++a) Q2[a] = 2 * (q[a] - zq);
#pragma GCC unroll 8
  for (a = 0; a < DH; ++a) *w++ = c2 * Q2[a] >> 1;
#pragma GCC unroll 8
  for (a = 0; a < DH; ++a) {
    *w++ = Q2[a] * Q2[a] >> 1; /* a == b: weight 2, a < b: 4 (both orders) */
#pragma GCC unroll 8
    for (b = a + 1; b < DH; ++b) *w++ = Q2[a] * Q2[b];
  }
}

/* The query from h, its coupling sums past (0, 0): c1^2 times word pair (0, 0), then z, the readout, the division */
static void query_from_h_d8(const EdgeoscLinearParams *p, const int32_t *state, int64_t *h, int8_t *out) {
  const int32_t *const sr = state + 2 * EDGEOSC_LINEAR_COUPLING(DH);
  int32_t beta[NR];
  int64_t num[DH + 1];
  Divider div;
  h[0] += (int64_t)p->c1 * p->c1 * state[0], h[1] += (int64_t)p->c1 * p->c1 * state[1];
  readout_weights_of(h[0], h[1], beta, 4);
#if EDGEOSC_ASM
  readout_d8_asm(sr, beta, num);
#else
  {
    int32_t a, b;
    for (b = 0; b <= DH; ++b) { /* column b */
      const int32_t *col = sr + b;
      int64_t sum = 0;
      for (a = 0; a < NR; ++a, col += DH + 1) sum += (int64_t)beta[a] * col[0];
      num[b] = sum;
    }
  }
#endif
  divider(p, num[DH], &div);
  divided_row(&div, num, DH, out);
}

static void linear_query_d8(const EdgeoscLinearParams *p, const int32_t *state, const int8_t *q, int8_t *out) {
  int32_t w[FEATURES];
  int64_t h[2] = {0, 0};
  query_weights_d8(p, q, w);
#if EDGEOSC_ASM
  coupling_d8_asm(state + 2, w, h);
#else
  {
    const int32_t *sc = state + 2;
    int32_t f;
    for (f = 0; f < FEATURES; ++f, sc += 2) h[0] += (int64_t)w[f] * sc[0], h[1] += (int64_t)w[f] * sc[1];
  }
#endif
  query_from_h_d8(p, state, h, out);
}

/* Two keys into the state on the DSP path for the default head, linear_pass's sums (query 0) unrolled: each
 * coupling word one SMLAD of K'_j against K'_i r, each readout word one SMLAD of (V_a, V_b) against (u_a, u_b).
 * C packs the pairs into a table (UPDATE_WORDS: kp, x0, x1 per coupling row, vv per readout column, u per readout
 * row); the sums read it. */
enum { UPDATE_KP = 0, UPDATE_X0 = DH + 1, UPDATE_X1 = 2 * (DH + 1), UPDATE_VV = 3 * (DH + 1),
       UPDATE_U = 4 * (DH + 1), UPDATE_WORDS = 4 * (DH + 1) + NR };

#if EDGEOSC_ASM
/* The update's sums in Thumb-2 assembly, every state word loaded, summed and stored once, with the pairs each word
 * takes held in registers (gcc spills them). Coupling: row i's (x0_i, x1_i) in r10, r11, K'_1..K'_8 in r2-r9
 * (K'_0 = (1, 1) by SXTAH and ASR #16), each word pair loaded, two SMLAD, stored. */
__attribute__((naked, noinline)) static void update_coupling_d8_asm(int32_t *state __attribute__((unused)),
                                                                    const int32_t *t __attribute__((unused))) {
  __asm__(".macro edgeosc_pairs kp, rest:vararg\n\t" /* a coupling row's word pairs, K'_j in \kp */
          "ldr r12, [r0]\n\tldr lr, [r0, #4]\n\t"
          "smlad r12, \\kp, r10, r12\n\tsmlad lr, \\kp, r11, lr\n\t"
          "str lr, [r0, #4]\n\tstr r12, [r0], #8\n\t"
          ".ifnb \\rest\n\tedgeosc_pairs \\rest\n\t.endif\n\t"
          ".endm\n\t"
          ".macro edgeosc_row i, kps:vararg\n\t"
          "ldr r10, [r1, #36 + 4 * \\i]\n\tldr r11, [r1, #72 + 4 * \\i]\n\t"
          "edgeosc_pairs \\kps\n\t"
          ".endm\n\t"
          "push {r4-r11, lr}\n\t"
          "add r12, r1, #4\n\tldm r12, {r2-r9}\n\t"
          "ldr r10, [r1, #36]\n\tldr r11, [r1, #72]\n\t" /* row 0: (0, 0) adds r itself */
          "ldr r12, [r0]\n\tldr lr, [r0, #4]\n\t"
          "sxtah r12, r12, r10\n\tadd r12, r12, r10, asr #16\n\tsxtah lr, lr, r11\n\tadd lr, lr, r11, asr #16\n\t"
          "str lr, [r0, #4]\n\tstr r12, [r0], #8\n\t"
          "edgeosc_pairs r2, r3, r4, r5, r6, r7, r8, r9\n\t"
          "edgeosc_row 1, r2, r3, r4, r5, r6, r7, r8, r9\n\t"
          "edgeosc_row 2, r3, r4, r5, r6, r7, r8, r9\n\t"
          "edgeosc_row 3, r4, r5, r6, r7, r8, r9\n\t"
          "edgeosc_row 4, r5, r6, r7, r8, r9\n\t"
          "edgeosc_row 5, r6, r7, r8, r9\n\t"
          "edgeosc_row 6, r7, r8, r9\n\t"
          "edgeosc_row 7, r8, r9\n\t"
          "edgeosc_row 8, r9\n\t"
          "pop {r4-r11, pc}\n\t"
          ".purgem edgeosc_row\n\t.purgem edgeosc_pairs");
}

/* The readout's sums (sr: the readout rows): u_0..u_8 in r2-r10, column by column, row 0's halved u doubled */
__attribute__((naked, noinline)) static void update_readout_d8_asm(int32_t *sr __attribute__((unused)),
                                                                   const int32_t *t __attribute__((unused))) {
  __asm__(".macro edgeosc_rows m, ua, ub\n\t" /* a readout column's words in rows m, m + 1 */
          "ldr r12, [r0, #36 * \\m]\n\tldr lr, [r0, #36 * \\m + 36]\n\t"
          "smlad r12, r11, \\ua, r12\n\tsmlad lr, r11, \\ub, lr\n\t"
          "str r12, [r0, #36 * \\m]\n\tstr lr, [r0, #36 * \\m + 36]\n\t"
          ".endm\n\t"
          "push {r4-r11, lr}\n\t"
          "add r12, r1, #144\n\tldm r12, {r2-r10}\n\tadd r1, r1, #108\n\t" /* u, then vv from r1 */
          ".rept 9\n\t"
          "ldr r11, [r1], #4\n\tldr r12, [r0]\n\tsmuad lr, r11, r2\n\tadd r12, r12, lr, lsl #1\n\tstr r12, [r0]\n\t"
          "edgeosc_rows 1, r3, r4\n\tedgeosc_rows 3, r5, r6\n\tedgeosc_rows 5, r7, r8\n\tedgeosc_rows 7, r9, r10\n\t"
          "add r0, r0, #4\n\t"
          ".endr\n\t"
          "pop {r4-r11, pc}\n\t"
          ".purgem edgeosc_rows");
}

/* A stream step's coupling: each word pair (i, j) takes both keys (SMLAD of K'_j, loaded, against x0_i, x1_i)
 * and, updated, feeds h (int64[2], from its features past (0, 0)) by SMLAL with the query's weight, so each word
 * is loaded and stored once for the update and the query together. The weights from qv = [c1, 2 Q_0..2 Q_7]
 * (passed at qv + 1) as each pair goes by: row i's multiplier qv[i] in r3 (c1, then 2 Q_a) times 2 Q_b
 * (2 c1 Q_b in row 0, 4 Q_a Q_b past the diagonal), on the diagonal (2 Q_a)^2 / 2. */
__attribute__((naked, noinline)) static void step_coupling_d8_asm(int32_t *state __attribute__((unused)),
                                                                  const int32_t *t __attribute__((unused)),
                                                                  const int32_t *qv __attribute__((unused)),
                                                                  int64_t *h __attribute__((unused))) {
  __asm__(".macro edgeosc_step_sums\n\t" /* the pair's update, then h by its weight r11 */
          "smlad r12, r10, r4, r12\n\tsmlad lr, r10, r5, lr\n\t"
          "str lr, [r0, #4]\n\tstr r12, [r0], #8\n\t"
          "smlal r6, r7, r11, r12\n\tsmlal r8, r9, r11, lr\n\t"
          ".endm\n\t"
          ".macro edgeosc_step_pair\n\t"
          "ldr r10, [r1], #4\n\tldr r11, [r2], #4\n\tldr r12, [r0]\n\tldr lr, [r0, #4]\n\t"
          "mul r11, r11, r3\n\tedgeosc_step_sums\n\t"
          ".endm\n\t"
          "push {r3-r11, lr}\n\t"
          "ldrd r6, r7, [r3]\n\tldrd r8, r9, [r3, #8]\n\t"
          "ldr r4, [r1, #36]\n\tldr r5, [r1, #72]\n\t" /* row 0: (0, 0) adds r itself (h takes it in C) */
          "ldr r12, [r0]\n\tldr lr, [r0, #4]\n\t"
          "sxtah r12, r12, r4\n\tadd r12, r12, r4, asr #16\n\tsxtah lr, lr, r5\n\tadd lr, lr, r5, asr #16\n\t"
          "str lr, [r0, #4]\n\tstr r12, [r0], #8\n\t"
          "add r1, r1, #4\n\tldr r3, [r2, #-4]\n\t"
          ".rept 8\n\tedgeosc_step_pair\n\t.endr\n\t"
          /* row i: K' from t + i, (x0_i, x1_i) 9 and 18 words on, 2 Q_b from qv + i + 1 */
          ".irp i, 1, 2, 3, 4, 5, 6, 7, 8\n\t"
          "sub r1, r1, #4 * (9 - \\i)\n\tsub r2, r2, #4 * (8 - \\i)\n\t"
          "ldr r4, [r1, #36]\n\tldr r5, [r1, #72]\n\tldr r3, [r2, #-4]\n\t"
          "ldr r10, [r1], #4\n\tldr r12, [r0]\n\tldr lr, [r0, #4]\n\t" /* the diagonal */
          "mul r11, r3, r3\n\tasr r11, r11, #1\n\tedgeosc_step_sums\n\t"
          ".rept 8 - \\i\n\tedgeosc_step_pair\n\t.endr\n\t"
          ".endr\n\t"
          "ldr r3, [sp]\n\tstrd r6, r7, [r3]\n\tstrd r8, r9, [r3, #8]\n\t"
          "pop {r3-r11, pc}\n\t"
          ".purgem edgeosc_step_pair\n\t.purgem edgeosc_step_sums");
}
#endif

/* Eight int8 values of keys a and b less the zero point (zp2 in both halves) as int16 pairs (x_a, x_b) */
static inline __attribute__((always_inline)) void pairs_of8(const int8_t *a, const int8_t *b, int32_t zp2,
                                                            int32_t *out) {
  int w;
#pragma GCC unroll 2
  for (w = 0; w < 8; w += 4) {
    const int32_t wa = edgeosc_read4(a + w), wb = edgeosc_read4(b + w);
    const int32_t ea = __sxtb16(wa), eb = __sxtb16(wb), oa = edgeosc_sxtb16_ror8(wa), ob = edgeosc_sxtb16_ror8(wb);
    out[w] = __ssub16(edgeosc_pack_bottoms(ea, eb), zp2);
    out[w + 1] = __ssub16(edgeosc_pack_bottoms(oa, ob), zp2);
    out[w + 2] = __ssub16(edgeosc_pack_tops(ea, eb), zp2);
    out[w + 3] = __ssub16(edgeosc_pack_tops(oa, ob), zp2);
  }
}

/* The update's table for keys a and b (b may be NULL: a key whose terms are all 0) straight from their bytes,
 * the terms of key_terms_of already in pairs. Returns 0 where a readout coefficient leaves int16 (the portable
 * loops take those keys). */
static int update_table_d8(const EdgeoscLinearParams *p, const EdgeoscLinearKey *a, const EdgeoscLinearKey *b,
                           int32_t *t) {
  int8_t none_k[DH], none_v[DH];
  const int8_t none_r[2] = {0, 0};
  EdgeoscLinearKey none;
  int32_t ua[NR], ub[NR], rr0, rr1, i, m;
  if (!b) { /* k and v at their zero points, no anchor, no gate */
    for (i = 0; i < DH; ++i) none_k[i] = (int8_t)p->zp_k, none_v[i] = (int8_t)p->zp_v;
    none.k = none_k, none.v = none_v, none.r = none_r, none.gate = 0, none.sign = 1;
    b = &none;
  }
  if (!readout_terms(a, ua, 4) || !readout_terms(b, ub, 4)) return 0;
  /* row 0: u = gate x 128 reaches 2^15, so it pairs u / 2 (u is even) and doubles the product */
  t[UPDATE_U] = edgeosc_pack_bottoms(ua[0] >> 1, ub[0] >> 1);
#pragma GCC unroll 8
  for (m = 1; m < NR; ++m) t[UPDATE_U + m] = edgeosc_pack_bottoms(ua[m], ub[m]);
  t[UPDATE_KP] = 0x00010001;
  pairs_of8(a->k, b->k, edgeosc_pair(p->zp_k), t + UPDATE_KP + 1);
  rr0 = edgeosc_pack16(a->sign * a->r[0], b->sign * b->r[0]);
  rr1 = edgeosc_pack16(a->sign * a->r[1], b->sign * b->r[1]);
  t[UPDATE_X0] = rr0, t[UPDATE_X1] = rr1;
#pragma GCC unroll 8
  for (i = 1; i <= DH; ++i) { /* K r in int16: |K| <= 255, |r| <= 128 */
    const int32_t kp = t[UPDATE_KP + i];
    t[UPDATE_X0 + i] = edgeosc_pack_bottoms((int16_t)kp * (int16_t)rr0, (kp >> 16) * (rr0 >> 16));
    t[UPDATE_X1 + i] = edgeosc_pack_bottoms((int16_t)kp * (int16_t)rr1, (kp >> 16) * (rr1 >> 16));
  }
  pairs_of8(a->v, b->v, edgeosc_pair(p->zp_v), t + UPDATE_VV);
  t[UPDATE_VV + DH] = 0x00010001;
  return 1;
}

/* The table's sums into the state */
static void update_sums_d8(int32_t *state, const int32_t *t) {
#if EDGEOSC_ASM
  update_coupling_d8_asm(state, t);
  update_readout_d8_asm(state + 2 * EDGEOSC_LINEAR_COUPLING(DH), t);
#else
  {
    int32_t *sc = state, *sr = state + 2 * EDGEOSC_LINEAR_COUPLING(DH), i, j, m, d;
#pragma GCC unroll 9
    for (i = 0; i <= DH; ++i)
#pragma GCC unroll 9
      for (j = i; j <= DH; ++j, sc += 2) {
        const int32_t s0 = sc[0], s1 = sc[1];
        sc[0] = __smlad(t[UPDATE_KP + j], t[UPDATE_X0 + i], s0);
        sc[1] = __smlad(t[UPDATE_KP + j], t[UPDATE_X1 + i], s1);
      }
#pragma GCC unroll 9
    for (d = 0; d <= DH; ++d)
      sr[d] = (int32_t)((uint32_t)sr[d] + ((uint32_t)__smuad(t[UPDATE_VV + d], t[UPDATE_U]) << 1));
#pragma GCC unroll 8
    for (m = 1; m < NR; ++m) {
      int32_t *row = sr + m * (DH + 1);
#pragma GCC unroll 9
      for (d = 0; d <= DH; ++d) row[d] = __smlad(t[UPDATE_VV + d], t[UPDATE_U + m], row[d]);
    }
  }
#endif
}

/* A stream's step on the default head from its update table: the update then query q (out [DH]); in assembly the
 * coupling's update and the query's sums in one pass */
static void step_d8(const EdgeoscLinearParams *p, int32_t *state, const int32_t *t, const int8_t *q, int8_t *out) {
#if EDGEOSC_ASM
  int32_t qv[DH + 1], a;
  int64_t h[2] = {0, 0};
  qv[0] = p->c1;
#pragma GCC unroll 8
  for (a = 0; a < DH; ++a) qv[a + 1] = 2 * (q[a] - p->zp_q);
  step_coupling_d8_asm(state, t, qv + 1, h);
  update_readout_d8_asm(state + 2 * EDGEOSC_LINEAR_COUPLING(DH), t);
  query_from_h_d8(p, state, h, out);
#else
  update_sums_d8(state, t);
  linear_query_d8(p, state, q, out);
#endif
}

/* Keys a and b (b may be NULL) into the default head's state on the DSP path; 0: they take the portable loops */
static int update_d8(const EdgeoscLinearParams *p, int32_t *state, const EdgeoscLinearKey *a,
                     const EdgeoscLinearKey *b) {
  int32_t t[UPDATE_WORDS];
  if (!update_table_d8(p, a, b, t)) return 0;
  update_sums_d8(state, t);
  return 1;
}
#undef DH
#undef NR
#undef FEATURES

/* Whether the DSP pass takes these keys (else the portable loops): readouts in int16, the head in its tables. */
static int dsp_pass(const EdgeoscLinearParams *p, const KeyTerms *ta, const KeyTerms *tb) {
  return ta->fits && tb->fits && p->d_head <= DSP_MAX_D_HEAD && p->d_value <= DSP_MAX_D_HEAD;
}
#endif

void edgeosc_linear_update(const EdgeoscLinearParams *p, int32_t *state, const EdgeoscLinearKey *a,
                           const EdgeoscLinearKey *b) {
  KeyTerms ta, tb;
#if EDGEOSC_DSP
  if (default_head(p) && update_d8(p, state, a, b)) return;
#endif
  key_terms(p, a, a->v, &ta);
  key_terms(p, b, a->v, &tb);
#if EDGEOSC_DSP
  if (dsp_pass(p, &ta, &tb)) { /* another head (the default head's keys that fail here fail update_d8 too) */
    linear_pass(p, state, &ta, &tb, 0, 0, 0);
    return;
  }
#endif
  linear_update_portable(p, state, &ta, &tb);
}

void edgeosc_linear_query(const EdgeoscLinearParams *p, const int32_t *state, const int8_t *q, int8_t *out) {
#if EDGEOSC_DSP
  if (default_head(p)) {
    linear_query_d8(p, state, q, out);
    return;
  }
#endif
  linear_query_portable(p, state, q, out);
}

void edgeosc_linear_step(const EdgeoscLinearParams *p, int32_t *state, const EdgeoscLinearKey *a,
                         const EdgeoscLinearKey *b, const int8_t *q, int8_t *out) {
  KeyTerms ta, tb;
#if EDGEOSC_DSP
  if (default_head(p)) {
    int32_t t[UPDATE_WORDS];
    if (update_table_d8(p, a, b, t)) {
      step_d8(p, state, t, q, out);
      return;
    }
  }
#endif
  key_terms(p, a, a->v, &ta);
  key_terms(p, b, a->v, &tb);
#if EDGEOSC_DSP
  if (dsp_pass(p, &ta, &tb)) {
    linear_pass(p, state, &ta, &tb, q, out, 1);
    return;
  }
#endif
  linear_update_portable(p, state, &ta, &tb);
  linear_query_portable(p, state, q, out);
}

/* cos(pi/2 i / 256) in Q15, i = 0..256: a quarter wave (reference.COS_QUARTER_Q15) */
static const int32_t kCosQuarterQ15[257] = {
    32768, 32767, 32766, 32762, 32758, 32753, 32746, 32738, 32729, 32718, 32706, 32693, 32679, 32664, 32647, 32629,
    32610, 32590, 32568, 32546, 32522, 32496, 32470, 32442, 32413, 32383, 32352, 32319, 32286, 32251, 32214, 32177,
    32138, 32099, 32058, 32015, 31972, 31927, 31881, 31834, 31786, 31737, 31686, 31634, 31581, 31527, 31471, 31415,
    31357, 31298, 31238, 31177, 31114, 31050, 30986, 30920, 30853, 30784, 30715, 30644, 30572, 30499, 30425, 30350,
    30274, 30196, 30118, 30038, 29957, 29875, 29792, 29707, 29622, 29535, 29448, 29359, 29269, 29178, 29086, 28993,
    28899, 28803, 28707, 28610, 28511, 28411, 28311, 28209, 28106, 28002, 27897, 27791, 27684, 27576, 27467, 27357,
    27246, 27133, 27020, 26906, 26791, 26674, 26557, 26439, 26320, 26199, 26078, 25956, 25833, 25708, 25583, 25457,
    25330, 25202, 25073, 24943, 24812, 24680, 24548, 24414, 24279, 24144, 24008, 23870, 23732, 23593, 23453, 23312,
    23170, 23028, 22884, 22740, 22595, 22449, 22302, 22154, 22006, 21856, 21706, 21555, 21403, 21251, 21097, 20943,
    20788, 20632, 20475, 20318, 20160, 20001, 19841, 19681, 19520, 19358, 19195, 19032, 18868, 18703, 18538, 18372,
    18205, 18037, 17869, 17700, 17531, 17361, 17190, 17018, 16846, 16673, 16500, 16326, 16151, 15976, 15800, 15624,
    15447, 15269, 15091, 14912, 14733, 14553, 14373, 14192, 14010, 13828, 13646, 13463, 13279, 13095, 12910, 12725,
    12540, 12354, 12167, 11980, 11793, 11605, 11417, 11228, 11039, 10850, 10660, 10469, 10279, 10088, 9896, 9704,
    9512, 9319, 9127, 8933, 8740, 8546, 8351, 8157, 7962, 7767, 7571, 7376, 7180, 6983, 6787, 6590,
    6393, 6195, 5998, 5800, 5602, 5404, 5205, 5007, 4808, 4609, 4410, 4211, 4011, 3812, 3612, 3412,
    3212, 3012, 2811, 2611, 2411, 2210, 2009, 1809, 1608, 1407, 1206, 1005, 804, 603, 402, 201,
    0};

/* cos(pi/2 y / 2^14) in Q15, y in [0, 2^14], linear between the table's points */
static int32_t quarter_cos(uint32_t y) {
  const uint32_t i = y >> 6, f = y & 63;
  const int32_t lo = kCosQuarterQ15[i], hi = kCosQuarterQ15[i < 256 ? i + 1 : 256];
  return lo + (((hi - lo) * (int32_t)f + 32) >> 6);
}

void edgeosc_turn_anchor(const int8_t *r, uint32_t phase, int8_t *out) {
  const uint32_t u = phase & 0xFFFF, x = u & 0x3FFF;
  const int32_t c0 = quarter_cos(x), s0 = quarter_cos(0x4000 - x);
  int32_t c, s;
  switch (u >> 14) {
    case 0: c = c0, s = s0; break;
    case 1: c = -s0, s = c0; break;
    case 2: c = -c0, s = -s0; break;
    default: c = s0, s = -c0; break;
  }
  {
    const int32_t x0 = r[0], x1 = r[1];
    out[0] = clamp8((c * x0 - s * x1 + (1 << 14)) >> 15);
    out[1] = clamp8((s * x0 + c * x1 + (1 << 14)) >> 15);
  }
}

/* Key j of a head's [T, *] tensors (gh: its gates, or NULL), to be added; its anchor turned for frame t into rt. */
static EdgeoscLinearKey head_key(const EdgeoscLinearParams *p, int hd, const int8_t *kh, const int8_t *vh,
                                 const int8_t *rh, const int8_t *gh, int j, uint32_t t, int8_t *rt) {
  EdgeoscLinearKey key;
  key.k = kh + (size_t)j * p->d_head, key.v = vh + (size_t)j * p->d_value, key.r = rh + (size_t)j * 2;
  if (p->turn) edgeosc_turn_anchor(key.r, (uint32_t)p->turn[hd] * t, rt), key.r = rt;
  key.gate = gh ? gh[j] - p->zp_g : 256, key.sign = 1;
  return key;
}

static int linear_params_ok(const EdgeoscLinearParams *p) {
  return p->tokens > 0 && p->d_head > 0 && p->d_head <= EDGEOSC_LINEAR_MAX_D_HEAD && p->d_value > 0 &&
         p->heads > 0 && p->p >= 1 && p->p <= 4 && p->rq_out.shift >= -10 && p->rq_out.shift <= 20 &&
         p->c1 >= 16 && p->c1 < (1 << 20) /* the int64 bounds' ranges */ && p->window >= 0 &&
         (!p->window || p->causal);
}

int edgeosc_linear_core_int8(const EdgeoscLinearParams *p, const int8_t *q, const int8_t *k, const int8_t *v,
                             const int8_t *r, const int8_t *g, int8_t *out, int32_t *state) {
  const int T = p->tokens, dh = p->d_head, dv = p->d_value;
  const size_t words = EDGEOSC_LINEAR_STATE_WORDS(dh, dv, p->p);
  const uint32_t t0 = (uint32_t)p->t0;
  int hd, i;
  size_t n;
  int8_t ra[2], rb[2];
  if (!linear_params_ok(p)) return -1;
  for (hd = 0; hd < p->heads; ++hd) {
    const int8_t *qh = q + (size_t)hd * T * dh, *kh = k + (size_t)hd * T * dh, *gh = g ? g + (size_t)hd * T : 0;
    const int8_t *vh = v + (size_t)hd * T * dv, *rh = r + (size_t)hd * T * 2;
    int8_t *oh = out + (size_t)hd * T * dv;
    for (n = 0; n < words; ++n) state[n] = 0;
    if (p->causal) { /* prefix sums: key i (less key i - window), then query i: a stream's steps */
      for (i = 0; i < T; ++i) {
        const EdgeoscLinearKey key = head_key(p, hd, kh, vh, rh, gh, i, t0 + (uint32_t)i, ra);
        EdgeoscLinearKey expired;
        const int expires = p->window > 0 && i >= p->window, j = i - p->window;
        if (expires) expired = head_key(p, hd, kh, vh, rh, gh, j, t0 + (uint32_t)j, rb), expired.sign = -1;
        edgeosc_linear_step(p, state, &key, expires ? &expired : NULL, qh + (size_t)i * dh, oh + (size_t)i * dv);
      }
      continue;
    }
    for (i = 0; i < T; i += 2) { /* every key, two a pass, then every query */
      const int j = i + (i + 1 < T);
      const EdgeoscLinearKey ka = head_key(p, hd, kh, vh, rh, gh, i, t0 + (uint32_t)i, ra),
                             kb = head_key(p, hd, kh, vh, rh, gh, j, t0 + (uint32_t)j, rb);
      edgeosc_linear_update(p, state, &ka, i + 1 < T ? &kb : NULL);
    }
    for (i = 0; i < T; ++i) edgeosc_linear_query(p, state, qh + (size_t)i * dh, oh + (size_t)i * dv);
  }
  return 0;
}

int edgeosc_linear_stream_int8(const EdgeoscLinearParams *p, const int8_t *q, const int8_t *k, const int8_t *v,
                               const int8_t *r, const int8_t *g, int8_t *out, int32_t *clock, int32_t *sums,
                               int8_t *kept) {
  const int T = p->tokens, dh = p->d_head, dv = p->d_value, W = p->window, row = dh + dv + 3;
  const size_t words = EDGEOSC_LINEAR_STATE_WORDS(dh, dv, p->p);
  int hd, i;
  if (!linear_params_ok(p) || !p->causal || W <= 0 || clock[1] < 0 || clock[1] > W || clock[2] < 0 ||
      clock[2] >= W)
    return -1;
  for (hd = 0; hd < p->heads; ++hd) {
    const int8_t *qh = q + (size_t)hd * T * dh, *kh = k + (size_t)hd * T * dh, *gh = g ? g + (size_t)hd * T : 0;
    const int8_t *vh = v + (size_t)hd * T * dv, *rh = r + (size_t)hd * T * 2;
    int8_t *oh = out + (size_t)hd * T * dv, *ring = kept + (size_t)hd * W * row;
    int32_t *state = sums + (size_t)hd * words;
    uint32_t t = (uint32_t)clock[0];
    int held = clock[1], slot = clock[2];
    for (i = 0; i < T; ++i, ++t, slot = slot + 1 < W ? slot + 1 : 0) {
      int8_t rt[2], *keep = ring + (size_t)slot * row;
      const EdgeoscLinearKey key = head_key(p, hd, kh, vh, rh, gh, i, t, rt);
      EdgeoscLinearKey expired;
      if (held == W) { /* the oldest held key leaves: the terms it added, from its kept copy */
        expired.k = keep, expired.v = keep + dh, expired.r = keep + dh + dv;
        expired.gate = g ? keep[dh + dv + 2] - p->zp_g : 256, expired.sign = -1;
      }
      edgeosc_linear_step(p, state, &key, held == W ? &expired : NULL, qh + (size_t)i * dh, oh + (size_t)i * dv);
      if (dh == 8 && dv == 8) { /* the default head: constant lengths, the copies unrolled */
        edgeosc_copy_bytes(keep, key.k, 8);
        edgeosc_copy_bytes(keep + 8, key.v, 8);
      } else {
        edgeosc_copy_bytes(keep, key.k, dh);
        edgeosc_copy_bytes(keep + dh, key.v, dv);
      }
      keep[dh + dv] = key.r[0], keep[dh + dv + 1] = key.r[1], keep[dh + dv + 2] = gh ? gh[i] : 0;
      if (held < W) ++held;
    }
    if (hd == p->heads - 1) clock[0] = (int32_t)t, clock[1] = held, clock[2] = slot;
  }
  return 0;
}
