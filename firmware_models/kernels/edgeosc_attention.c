/* Int8 attention cores (see edgeosc_attention.h). Row by row: one query's T scores live in scratch. */
#include "edgeosc_attention.h"

static int8_t clamp8(int32_t y) { return (int8_t)(y < -128 ? -128 : y > 127 ? 127 : y); }

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
