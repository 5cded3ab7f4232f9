/* Int8 attention cores (see edgeosc_attention.h). Row by row: one query's T scores live in scratch.
 *
 * The reference kernels (the loops every variant is checked against) and their dispatch: a row kernel or the linear
 * core first tries this build's optimised variant (edgeosc_attention_fast.h lists them: dsp/, neon/), which gives the
 * same integers, bit for bit. */
#include "edgeosc_attention.h"
#include "edgeosc_attention_fast.h"

/* The optimised variants, a file each, compiled in this unit (as edgeosc_ops.c's are) so that the dispatch's calls
 * to them inline: the cores call their row kernels once per query, a stream's hop its linear steps once per head */
#include "dsp/edgeosc_attention_dsp.c"
#include "dsp/edgeosc_linear_dsp.c"
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

/* ---- the linear oscillator core (d_osc 2; edgeosc/integer/linear.py) ---------------- */

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

/* floor(m 2^21 / d) for d in [2^21, 2^22]: long division in 32-bit steps (Cortex-M has no 64-bit divide; a 64-bit
 * host divides once). */
static uint32_t div_q21(uint32_t m, uint32_t d) {
#if UINTPTR_MAX > 0xFFFFFFFFu
  return (uint32_t)(((uint64_t)m << 21) / d);
#else
  uint32_t q = m / d, r = m % d;
  int bits, s;
  for (bits = 21; bits > 0; bits -= s) { /* r < d <= 2^22, so r << 10 fits */
    s = bits > 10 ? 10 : bits;
    r <<= s;
    q = (q << s) | (r / d);
    r %= d;
  }
  return q;
#endif
}

static int32_t sat32(int64_t x) { return (int32_t)(x < INT32_MIN ? INT32_MIN : x > INT32_MAX ? INT32_MAX : x); }

/* A key's readout coefficients u[0..2p] (KeyTerms.u); returns whether u[1..2p] fit int16. */
static inline __attribute__((always_inline)) int readout_terms(const EdgeoscLinearKey *key, int32_t *u,
                                                               const int pp) {
  int32_t harm[2 * EDGEOSC_LINEAR_MAX_P], m;
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
    for (m = 0; m < EDGEOSC_LINEAR_ROWS(pp); ++m) t->u[m] = 0;
    t->r0 = t->r1 = 0, t->v = any_v, t->fits = 1;
    return;
  }
#pragma GCC unroll 8
  for (a = 0; a < dh; ++a) t->K[a] = (int16_t)(key->k[a] - p->zp_k);
  t->r0 = key->sign * key->r[0], t->r1 = key->sign * key->r[1], t->v = key->v;
  t->fits = readout_terms(key, t->u, pp);
}

/* The wide head: d_head = d_value = 8 at EDGEOSC_LINEAR_D8_P (edgeosc_attention_fast.h), the models' */
static int wide_head(const EdgeoscLinearParams *p) {
  return p->d_head == 8 && p->d_value == 8 && p->p == EDGEOSC_LINEAR_D8_P;
}

/* The narrow head: d_head = d_value = 4 at the wide head's power (twice the heads at the same width,
 * ModelConfig.d_head = 4), unrolled as the wide head is (in C where the wide head has assembly) */
static int narrow_head(const EdgeoscLinearParams *p) {
  return p->d_head == 4 && p->d_value == 4 && p->p == EDGEOSC_LINEAR_D8_P;
}

/* A key's terms (key_terms_of), unrolled for the default and the narrow head */
static void key_terms(const EdgeoscLinearParams *p, const EdgeoscLinearKey *key, const int8_t *any_v, KeyTerms *t) {
  if (wide_head(p))
    key_terms_of(p, key, any_v, t, 8, EDGEOSC_LINEAR_D8_P);
  else if (narrow_head(p))
    key_terms_of(p, key, any_v, t, 4, EDGEOSC_LINEAR_D8_P);
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
  int32_t i, j, m, d;
  sc[0] += (uint32_t)(ta->r0 + tb->r0);
  sc[1] += (uint32_t)(ta->r1 + tb->r1);
  sc += 2;
  for (i = 0; i < dh; ++i, sc += 2) {
    sc[0] += (uint32_t)(ta->K[i] * ta->r0 + tb->K[i] * tb->r0);
    sc[1] += (uint32_t)(ta->K[i] * ta->r1 + tb->K[i] * tb->r1);
  }
  for (i = 0; i < dh; ++i) {
    const int32_t xa0 = ta->K[i] * ta->r0, xb0 = tb->K[i] * tb->r0, xa1 = ta->K[i] * ta->r1, xb1 = tb->K[i] * tb->r1;
    j = i;
#if EDGEOSC_NEON /* four features' pairs a vector first */
    j = coupling_row_neon(ta, tb, j, dh, xa0, xb0, xa1, xb1, &sc);
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
#if EDGEOSC_NEON /* four values a vector first */
    d = readout_rows_neon(ta->v, tb->v, dv, zv, uca, usa, ucb, usb, sr, ss);
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
  static const int32_t kWeights[EDGEOSC_LINEAR_MAX_P + 1][EDGEOSC_LINEAR_MAX_P + 1] = { /* C(2p, p - m) (x2, m > 0) */
      {0}, {2, 2}, {6, 8, 2}, {20, 30, 12, 2}, {70, 112, 56, 16, 2}, {252, 420, 240, 90, 20, 2},
      {924, 1584, 990, 440, 132, 24, 2}, {3432, 6006, 4004, 2002, 728, 182, 28, 2},
      {12870, 22880, 16016, 8736, 3640, 1120, 240, 32, 2}};
  const int32_t *w = kWeights[pp];
  const uint64_t a0 = (uint64_t)(h0 < 0 ? -h0 : h0), a1 = (uint64_t)(h1 < 0 ? -h1 : h1);
  const int e = bitlen64(a0 > a1 ? a0 : a1) - 14;
  int32_t hh[2], harm[2 * EDGEOSC_LINEAR_MAX_P], m;
  int8_t z[2];
  hh[0] = (int32_t)shift_round64(h0, e);
  hh[1] = (int32_t)shift_round64(h1, e);
  l2norm_int32(hh, 2, z);
  harmonics_q15(z, pp, harm);
  beta[0] = w[0] * 32768;
#pragma GCC unroll 8
  for (m = 1; m < 2 * pp + 1; ++m) beta[m] = w[(m + 1) / 2] * harm[m - 1];
}

#if EDGEOSC_DSP
/* readout_weights_of for the head's p, one copy for the DSP pass's other heads (the queries here inline their own) */
static void readout_weights(const EdgeoscLinearParams *p, int64_t h0, int64_t h1, int32_t *beta) {
  readout_weights_of(h0, h1, beta, p->p);
}
#endif

/* A query's Divider (edgeosc_attention_fast.h) for denominator den */
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

/* The portable query: h = 2 sum_j (2/s^2) taylor2(s Q.K_j) r_j = c1^2 R + 2 c1 Q.KR + sum_ab (2|4) Q_a Q_b KKR_ab,
 * then out_d = sum_m beta_m M_md / sum_m beta_m m_m. */
static inline __attribute__((always_inline)) void linear_query_of(const EdgeoscLinearParams *p, const int32_t *state,
                                                                  const int8_t *q, int8_t *out, const int dh,
                                                                  const int dv, const int pp) {
  const int nr = 2 * pp + 1;
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
#if EDGEOSC_NEON /* four features a vector first */
    qb = coupling_query_neon(qb, end, qa4, &sc, &h0, &h1);
#endif
    for (; qb < end; ++qb, sc += 2) {
      const int32_t qq = qa4 * *qb;
      h0 += (int64_t)qq * sc[0];
      h1 += (int64_t)qq * sc[1];
    }
  }
  readout_weights_of(h0, h1, beta, pp);
  den = 0;
  for (m = 0; m < nr; ++m) den += (int64_t)beta[m] * sr[m * (dv + 1) + dv];
  divider(p, den, &div);
  d = 0;
#if EDGEOSC_NEON /* four numerators a vector first */
  d = numerators_neon(&div, sr, beta, nr, dv, out);
#endif
  for (; d < dv; d += 2) { /* two numerators at a time share each beta */
    const int two = d + 1 < dv; /* else the last value twice */
    int64_t n0 = 0, n1 = 0;
    const int32_t *col = sr + d;
    for (m = 0; m < nr; ++m, col += dv + 1) {
      n0 += (int64_t)beta[m] * col[0];
      n1 += (int64_t)beta[m] * col[two];
    }
    out[d] = divided(&div, n0);
    if (two) out[d + 1] = divided(&div, n1);
  }
}

/* The portable query, unrolled for the wide and the narrow head (hosts without the DSP path run it) */
static void linear_query_portable(const EdgeoscLinearParams *p, const int32_t *state, const int8_t *q,
                                  int8_t *out) {
  if (wide_head(p))
    linear_query_of(p, state, q, out, 8, 8, EDGEOSC_LINEAR_D8_P);
  else if (narrow_head(p))
    linear_query_of(p, state, q, out, 4, 4, EDGEOSC_LINEAR_D8_P);
  else
    linear_query_of(p, state, q, out, p->d_head, p->d_value, p->p);
}

/* The DSP path takes the unrolled heads' keys straight from their bytes, other heads' from their terms, which the
 * portable loops then share (NEON's variants sit in those loops: they take terms too) */
void edgeosc_linear_update(const EdgeoscLinearParams *p, int32_t *state, const EdgeoscLinearKey *a,
                           const EdgeoscLinearKey *b) {
  KeyTerms ta, tb;
#if EDGEOSC_DSP
  if (linear_update_unrolled_dsp(p, state, a, b)) return;
#endif
  key_terms(p, a, a->v, &ta);
  key_terms(p, b, a->v, &tb);
#if EDGEOSC_DSP
  if (linear_update_dsp(p, state, &ta, &tb)) return;
#endif
  linear_update_portable(p, state, &ta, &tb);
}

void edgeosc_linear_query(const EdgeoscLinearParams *p, const int32_t *state, const int8_t *q, int8_t *out) {
#if EDGEOSC_DSP
  if (linear_query_dsp(p, state, q, out)) return;
#endif
  linear_query_portable(p, state, q, out);
}

void edgeosc_linear_step(const EdgeoscLinearParams *p, int32_t *state, const EdgeoscLinearKey *a,
                         const EdgeoscLinearKey *b, const int8_t *q, int8_t *out) {
  KeyTerms ta, tb;
#if EDGEOSC_DSP
  if (linear_step_unrolled_dsp(p, state, a, b, q, out)) return;
#endif
  key_terms(p, a, a->v, &ta);
  key_terms(p, b, a->v, &tb);
#if EDGEOSC_DSP
  if (linear_step_dsp(p, state, &ta, &tb, q, out)) return;
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
         p->heads > 0 && p->p >= 1 && p->p <= EDGEOSC_LINEAR_MAX_P && p->rq_out.shift >= -10 && p->rq_out.shift <= 20 &&
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
      if (dh == 8 && dv == 8) { /* the wide head: constant lengths, the copies unrolled */
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
