/* The attention cores' row kernels on the DSP path (Armv7E-M / Armv8-M with the DSP extension): the L2 norms (a row's,
 * and the linear core's z), the softmax row on its exp table, a row of q k^T scores and the mix a v. The same integers
 * as the reference loops of edgeosc_attention.c, bit for bit.
 * Compiled inside edgeosc_attention.c (it includes this file), not alone. */
#include "edgeosc_attention_fast.h"

#if EDGEOSC_DSP
/* l2norm_int32: edgeosc_mbqm with SRDHM(a, M) = SMMULR(a, 2M) for M in [0, 2^30), which 1/sqrt's multipliers are */
static inline int l2norm_int32_dsp(const int32_t *d, int n, int8_t *out) {
  int32_t acc = 0, mult;
  int i, shift;
  for (i = 0; i < n; ++i) acc += d[i] * d[i];
  edgeosc_inv_sqrt_multiplier(acc, &mult, &shift);
  if (mult >= 0 && mult < 1 << 30) {
    const int left = shift + 7 > 0 ? shift + 7 : 0, right = shift + 7 > 0 ? 0 : -(shift + 7);
    for (i = 0; i < n; ++i)
      out[i] = clamp8(edgeosc_rdbpot(edgeosc_smmulr((int32_t)((uint32_t)d[i] << left), 2 * mult), right));
    return 1;
  }
  for (i = 0; i < n; ++i) out[i] = clamp8(edgeosc_mbqm(d[i], mult, shift + 7)); /* other multipliers */
  return 1;
}

/* A row's L2 norm: four values a word, their pairs minus the zero point squared and summed by SMLAD; then
 * edgeosc_mbqm on the DSP arithmetic where its constants allow: a left shift alone (|x| 2^left < 2^31; 1/sqrt's
 * multipliers are not normalised), or edgeosc_dsp_requant_init's right shifts */
static inline int edgeosc_l2norm_row_dsp(const int8_t *x, int n, int32_t zero_point, int8_t *out) {
  int32_t acc = 0, mult;
  int i = 0, shift;
  const int32_t zp2 = edgeosc_pair(-zero_point);
  EdgeoscDspRequant q;
  for (; i + 4 <= n; i += 4) {
    int32_t even, odd;
    edgeosc_widen4(edgeosc_read4(x + i), zp2, &even, &odd);
    acc = __smlad(even, even, __smlad(odd, odd, acc));
  }
  for (; i < n; ++i) {
    const int32_t d = x[i] - zero_point;
    acc += d * d;
  }
  edgeosc_inv_sqrt_multiplier(acc, &mult, &shift);
  if (mult >= 0 && shift + 7 >= 0 && shift + 7 <= 22) {
    /* SRDHM(a, M) = floor((a M + 2^30) / 2^31): SMMULR(a, 2M) for M < 2^30, SMMULR(a, 2M - 2^32) + a from 2^30 on */
    const int32_t m2 = (int32_t)((uint32_t)mult << 1), left = shift + 7, keep = mult >= 1 << 30 ? -1 : 0;
    for (i = 0; i < n; ++i) {
      const int32_t a = (int32_t)((uint32_t)(x[i] - zero_point) << left);
      out[i] = (int8_t)__ssat(edgeosc_smmulr(a, m2) + (a & keep), 8);
    }
    return 1;
  }
  if (edgeosc_dsp_requant_init(&q, mult, shift + 7)) {
    for (i = 0; i < n; ++i) out[i] = (int8_t)__ssat(edgeosc_dsp_requant(&q, x[i] - zero_point), 8);
    return 1;
  }
  for (i = 0; i < n; ++i) out[i] = clamp8(edgeosc_mbqm(x[i] - zero_point, mult, shift + 7)); /* other constants */
  return 1;
}

/* The softmax row on its exp table: the maximum four bytes a step (SSUB8, SEL), then the word's four lanes folded;
 * exps are >= 0, so the sum's shift with ties away from zero is an unsigned add that cannot wrap */
static inline int edgeosc_softmax_row_lut_dsp(const int8_t *x, int n, const int32_t *exp_lut, int8_t *out) {
  int32_t max = -128, sum = 0, scale;
  int i = 0, bits_over_unit, exponent;
  if (n >= 4) {
    int32_t m4 = edgeosc_read4(x);
    for (i = 4; i + 4 <= n; i += 4) m4 = edgeosc_max_s8x4(edgeosc_read4(x + i), m4);
    m4 = edgeosc_max_s8x4(m4, (int32_t)((uint32_t)m4 >> 16 | (uint32_t)m4 << 16));
    max = (int8_t)edgeosc_max_s8x4(m4, (int32_t)((uint32_t)m4 >> 8 | (uint32_t)m4 << 24));
  }
  for (; i < n; ++i)
    if (x[i] > max) max = x[i];
#pragma GCC unroll 4
  for (i = 0; i < n; ++i) sum += (int32_t)(((uint32_t)exp_lut[max - x[i]] + 2048u) >> 12);
  scale = edgeosc_reciprocal(sum, 12, &bits_over_unit);
  exponent = bits_over_unit + 31 - 8;
  /* scale in [2^30, 2^31) and exps >= 0: SRDHM(e, scale) = SMMULR(e, 2 scale - 2^32) + e (edgeosc_simd.h) lies in
   * [0, e], so the shift's ties away from zero are an unsigned add of 2^(exponent-1), which cannot wrap */
  if (scale >= (1 << 30) && exponent >= 1 && exponent <= 31) {
    const int32_t m2 = (int32_t)((uint32_t)scale << 1);
    const uint32_t half = 1u << (exponent - 1);
#pragma GCC unroll 4
    for (i = 0; i < n; ++i) {
      const int32_t e = exp_lut[max - x[i]], y = edgeosc_smmulr(e, m2) + e;
      out[i] = (int8_t)__ssat((int32_t)(((uint32_t)y + half) >> exponent) - 128, 8);
    }
    return 1;
  }
  for (i = 0; i < n; ++i) /* other scales: the reference's arithmetic (a left-out entry has exp 0: -128) */
    out[i] = clamp8(edgeosc_rdbpot(edgeosc_srdhm(scale, exp_lut[max - x[i]]), exponent) - 128);
  return 1;
}

/* A core's int8 output: edgeosc_dsp_requant with the constants q where they qualified (TFLite Micro's rounding),
 * else edgeosc_requant_int8 (q NULL). */
static inline int8_t core_requant(const EdgeoscDspRequant *q, int32_t acc, EdgeoscRequant rq, int32_t zo,
                                  int rounding) {
  return q ? (int8_t)__ssat(edgeosc_dsp_requant(q, acc) + zo, 8) : edgeosc_requant_int8(acc, rq, zo, rounding);
}

/* score_row_dsp for the default heads' width (d_head 8), a function of its own so that gcc keeps the query's four
 * pairs and the requantization's constants in registers. With int8 zero points |acc| <= 2^19, so
 * x + half + zo 2^right stays inside int32: QADD never saturates, and adding zo before the shift is exact
 * (floor((y + zo 2^r) / 2^r) = floor(y / 2^r) + zo), one constant less. */
static __attribute__((noinline)) void score_row_d8(const int32_t *qw, const int8_t *kh, int T, int32_t base,
                                                   const EdgeoscDspRequant *q, int32_t zo, int8_t *row) {
  const int32_t q0 = qw[0], q1 = qw[1], q2 = qw[2], q3 = qw[3], m2 = q->m2, right = q->right;
  const int32_t c = q->half + (int32_t)((uint32_t)zo << right);
  int8_t *const end = row + T;
#pragma GCC unroll 2
  for (; row != end; ++row, kh += 8) {
    const int32_t w0 = edgeosc_read4(kh), w1 = edgeosc_read4(kh + 4);
    int32_t acc = __smlad(q1, edgeosc_sxtb16_ror8(w0), __smlad(q0, __sxtb16(w0), base)), x;
    acc = __smlad(q3, edgeosc_sxtb16_ror8(w1), __smlad(q2, __sxtb16(w1), acc));
    x = edgeosc_smmulr(acc, m2) + acc;
    *row = (int8_t)__ssat((x + c + (x >> 31)) >> right, 8);
  }
}

/* A row of q k^T scores for d_head a multiple of 4 up to 32 */
static inline int score_row_dsp(const int8_t *qi, const int8_t *kh, int T, int dh, int32_t zq, int32_t zk,
                                EdgeoscRequant rq, int32_t zo, int rounding, int8_t *row) {
  int j, d;
  if (dh % 4 == 0 && dh <= 32) { /* (q - zq).(k - zk) = (q - zq).k - zk sum(q - zq): k words straight to SMLAD */
    int32_t qw[16], base = 0;
    const int32_t zq2 = edgeosc_pair(-zq);
    for (d = 0; d < dh; d += 4) {
      edgeosc_widen4(edgeosc_read4(qi + d), zq2, qw + d / 2, qw + d / 2 + 1);
      base -= zk * (qi[d] + qi[d + 1] + qi[d + 2] + qi[d + 3] - 4 * zq);
    }
    EdgeoscDspRequant q;
    const int dsp = rounding == EDGEOSC_ROUND_AWAY && edgeosc_dsp_requant_init(&q, rq.multiplier, rq.shift);
    if (dsp && dh == 8 && zq >= -128 && zq <= 128 && zk >= -128 && zk <= 128 && zo >= -128 && zo <= 128) {
      score_row_d8(qw, kh, T, base, &q, zo, row);
      return 1;
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
    return 1;
  }
  return 0;
}

#define MIX_PAIRS 64 /* mix_row's packed probability pairs on the stack (256 bytes): windows to 128 keys pack once */

/* acc[0..3] += n key pairs of mix_row: pair (a_j, a_j+1) against (v_j,d+i, v_j+1,d+i) for lanes i, gathered
 * from two rows' SXTB16 lanes by PKHBT / PKHTB. EDGEOSC_ASM runs it in Thumb-2 assembly (edgeosc_attention_dsp.S),
 * two pairs a pass, its 14 values in registers (gcc spills two). */
#if EDGEOSC_ASM
void edgeosc_mix_pairs(const int32_t *ap, int n, const int8_t *v0, int dv, int32_t *acc); /* edgeosc_attention_dsp.S */
#else
static void edgeosc_mix_pairs(const int32_t *ap, int n, const int8_t *v0, int dv, int32_t *acc) {
  int32_t acc0 = acc[0], acc1 = acc[1], acc2 = acc[2], acc3 = acc[3];
  const int32_t *const a_end = ap + n;
  for (; ap != a_end; ++ap, v0 += 2 * dv) {
    const int32_t a = *ap, w0 = edgeosc_read4(v0), w1 = edgeosc_read4(v0 + dv);
    const int32_t e0 = __sxtb16(w0), e1 = __sxtb16(w1);
    const int32_t o0 = edgeosc_sxtb16_ror8(w0), o1 = edgeosc_sxtb16_ror8(w1);
    acc0 = __smlad(a, edgeosc_pack_bottoms(e0, e1), acc0); /* lanes d */
    acc1 = __smlad(a, edgeosc_pack_bottoms(o0, o1), acc1); /* d + 1 */
    acc2 = __smlad(a, edgeosc_pack_tops(e0, e1), acc2);    /* d + 2 */
    acc3 = __smlad(a, edgeosc_pack_tops(o0, o1), acc3);    /* d + 3 */
  }
  acc[0] = acc0, acc[1] = acc1, acc[2] = acc2, acc[3] = acc3;
}
#endif

/* mix_row's n probability pairs (a_2j - za, a_2j+1 - za) packed into apair, four bytes a word; with `sum`, sum
 * plus their total (one loop each way, the sum not tested per word) */
static inline __attribute__((always_inline)) int32_t pack_pairs(const int8_t *a, int n, int32_t za, int32_t *apair,
                                                                int32_t sum, const int with_sum) {
  const int32_t za2 = edgeosc_pair(za), ones = 0x00010001;
  int j;
#pragma GCC unroll 2
  for (j = 0; j + 2 <= n; j += 2) {
    const int32_t w = edgeosc_read4(a + 2 * j), e = __sxtb16(w), o = edgeosc_sxtb16_ror8(w);
    apair[j] = __ssub16(edgeosc_pack_bottoms(e, o), za2), apair[j + 1] = __ssub16(edgeosc_pack_tops(e, o), za2);
    if (with_sum) sum = __smlad(apair[j], ones, __smlad(apair[j + 1], ones, sum));
  }
  if (j < n) {
    apair[j] = edgeosc_pack16(a[2 * j] - za, a[2 * j + 1] - za);
    if (with_sum) sum += a[2 * j] + a[2 * j + 1] - 2 * za;
  }
  return sum;
}

/* out_i = row (length T) times vh [T, dv] for dv a multiple of 4 */
static inline int mix_row_dsp(const int8_t *row, const int8_t *vh, int T, int dv, int32_t za, int32_t zv,
                              EdgeoscRequant rq, int32_t zo, int rounding, int8_t *out) {
  int j, d;
  if (dv % 4 == 0) {
    /* (a - za).(v - zv) = (a - za).v - zv sum(a - za); two keys per SMLAD: the pairs (a_j, a_j+1), packed once,
     * against (v_j,d, v_j+1,d), gathered from two rows' SXTB16 lanes with PKHBT / PKHTB */
    EdgeoscDspRequant q;
    const int dsp = rounding == EDGEOSC_ROUND_AWAY && edgeosc_dsp_requant_init(&q, rq.multiplier, rq.shift);
    int32_t asum = T & 1 ? row[T - 1] - za : 0, apair[MIX_PAIRS];
    const int pairs = T / 2;
    for (d = 0; d < dv; d += 4) {
      int32_t acc[4] = {0, 0, 0, 0}, c, n;
      const int8_t *v0 = vh + d;
      for (c = 0; c < pairs; c += MIX_PAIRS) { /* MIX_PAIRS pairs at a time (the stack), packed once if all fit */
        n = pairs - c < MIX_PAIRS ? pairs - c : MIX_PAIRS;
        if (d == 0) /* four weights a word: (a0, a1), (a2, a3) less za; their sum once */
          asum = pack_pairs(row + 2 * c, n, za, apair, asum, 1);
        else if (pairs > MIX_PAIRS)
          pack_pairs(row + 2 * c, n, za, apair, 0, 0);
        edgeosc_mix_pairs(apair, n, v0, dv, acc);
        v0 += (size_t)2 * n * dv;
      }
      j = 2 * pairs;
      if (j < T) {
        const int8_t *vj = vh + (size_t)j * dv + d;
        const int32_t aj = row[j] - za;
        acc[0] += aj * vj[0], acc[1] += aj * vj[1], acc[2] += aj * vj[2], acc[3] += aj * vj[3];
      }
      out[d] = core_requant(dsp ? &q : 0, acc[0] - zv * asum, rq, zo, rounding);
      out[d + 1] = core_requant(dsp ? &q : 0, acc[1] - zv * asum, rq, zo, rounding);
      out[d + 2] = core_requant(dsp ? &q : 0, acc[2] - zv * asum, rq, zo, rounding);
      out[d + 3] = core_requant(dsp ? &q : 0, acc[3] - zv * asum, rq, zo, rounding);
    }
    return 1;
  }
  return 0;
}
#endif
