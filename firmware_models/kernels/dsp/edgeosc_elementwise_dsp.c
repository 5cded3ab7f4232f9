/* ADD / SUB, a sum pool's requantization and TRANSPOSE's contiguous runs on the DSP path: the same integers as the
 * reference loops of edgeosc_ops.c, bit for bit.
 * Compiled inside edgeosc_ops.c (it includes this file), not alone. */
#include "edgeosc_dsp.h"

#if EDGEOSC_DSP
/* ADD / SUB on the DSP path. TFLite scales each input by its scale over twice the larger one, so the larger
 * input's multiplier is exactly 1/2, (2^30, shift 0): on the 2^20 grid it is (v - zp) 2^19, exactly (SRDHM of an
 * even number by 2^30 halves it). Only the other input (multiplier below 1/2, so a right shift >= 1) needs the
 * requantization arithmetic, edgeosc_dsp_requant's without a clamp; exact, as (v - zp) 2^20 M stays below 2^28.
 * That leaves nine constants, so a row's loop keeps them all in registers. */
typedef struct {
  int32_t zp, m2, half, right;
} AddScaled; /* the input with the smaller scale */

static inline int32_t add_scaled(int32_t v, int32_t zp, int32_t m2, int32_t half, int32_t right) {
  const int32_t x = (v - zp) * (1 << 20), s = edgeosc_smmulr(x, m2) + x;
  return (s + half + (s >> 31)) >> right;
}

/* One row of n outputs: out[k] = SSAT8(requant(gs G(g[k]) + hs (h[k] - zh) 2^19) + zp_out) with G the scaled input's
 * term, the zero point in the rounding constant c (requant_zp); add_row applies an activation's floor after. An input
 * with step 0 (it broadcasts along the row) is taken once, the other steps 1. gs, hs: +-1, literal at each call, so
 * each sign pattern compiles to its own loop. */
__attribute__((always_inline)) static inline void add_row_signed(const AddScaled *q, const int8_t *g, int32_t g_step,
                                                                 const int8_t *h, int32_t h_step, int32_t zh,
                                                                 int32_t n, const EdgeoscDspRequant *qo,
                                                                 int32_t c, int8_t *out, const int32_t gs,
                                                                 const int32_t hs) {
  const int32_t zg = q->zp, m2 = q->m2, half = q->half, right = q->right, om2 = qo->m2, oright = qo->right;
  int8_t *const end = out + n;
  if (h_step == 0) {
    const int32_t hv = hs * ((*h - zh) * (1 << 19));
    for (; out < end; ++g)
      *out++ = (int8_t)__ssat(requant_zp(gs * add_scaled(*g, zg, m2, half, right) + hv, om2, oright, c), 8);
  } else if (g_step == 0) {
    const int32_t gv = gs * add_scaled(*g, zg, m2, half, right);
    for (; out < end; ++h)
      *out++ = (int8_t)__ssat(requant_zp(gv + hs * ((*h - zh) * (1 << 19)), om2, oright, c), 8);
  } else {
    for (; out < end; ++g, ++h)
      *out++ = (int8_t)__ssat(
          requant_zp(gs * add_scaled(*g, zg, m2, half, right) + hs * ((*h - zh) * (1 << 19)), om2, oright, c), 8);
  }
}

/* add_row_signed for the sign pattern (gs, hs), a function of its own so that its loop has the registers; then an
 * activation's floor lo (clamp(y, lo, 127) = max(SSAT8(y), lo)) in a pass of its own, which residuals skip */
__attribute__((noinline)) static void add_row(const AddScaled *q, const int8_t *g, int32_t g_step, const int8_t *h,
                                              int32_t h_step, int32_t zh, int32_t n, const EdgeoscDspRequant *qo,
                                              int32_t zp_out, int32_t lo, int8_t *out, int32_t gs, int32_t hs) {
  const int32_t c = requant_c(qo->right, zp_out);
  int32_t k;
  if (gs < 0)
    add_row_signed(q, g, g_step, h, h_step, zh, n, qo, c, out, -1, 1);
  else if (hs < 0)
    add_row_signed(q, g, g_step, h, h_step, zh, n, qo, c, out, 1, -1);
  else
    add_row_signed(q, g, g_step, h, h_step, zh, n, qo, c, out, 1, 1);
  if (lo > -128)
    for (k = 0; k < n; ++k) out[k] = out[k] < lo ? (int8_t)lo : out[k];
}

/* ADD / SUB on the DSP path, row by row of the broadcast shape; 0 (nothing written) where its premises
 * fail: left shift 20, one input at multiplier 1/2 and the other below, inner strides 1, or 0 and 1, no cap below
 * 127, output constants edgeosc_dsp_requant takes. */
static int edgeosc_add_dsp(const EdgeoscAddParams *p, const int8_t *a, const int8_t *b, int8_t *out) {
  const EdgeoscBroadcast *s = &p->shape;
  const int32_t n = s->dims[3], sa = s->stride_a[3], sb = s->stride_b[3];
  const int32_t half_a = p->rq_a.multiplier == 1 << 30 && p->rq_a.shift == 0;
  const EdgeoscRequant rg = half_a ? p->rq_b : p->rq_a; /* the scaled input: b if a is the one at 1/2 */
  EdgeoscDspRequant qg, qo;
  AddScaled q;
  int32_t d0, d1, d2;
  if (p->left_shift != 20 || p->act_max != 127 || (sa | sb) & ~1 || (sa | sb) == 0 ||
      !(half_a || (p->rq_b.multiplier == 1 << 30 && p->rq_b.shift == 0)) ||
      !edgeosc_dsp_requant_init(&qg, rg.multiplier, rg.shift) ||
      !edgeosc_dsp_requant_init(&qo, p->rq_out.multiplier, p->rq_out.shift))
    return 0;
  q.zp = half_a ? p->zp_b : p->zp_a, q.m2 = qg.m2, q.half = qg.half, q.right = qg.right;
  for (d0 = 0; d0 < s->dims[0]; ++d0)
    for (d1 = 0; d1 < s->dims[1]; ++d1)
      for (d2 = 0; d2 < s->dims[2]; ++d2, out += n) {
        const int8_t *ra = a + d0 * s->stride_a[0] + d1 * s->stride_a[1] + d2 * s->stride_a[2];
        const int8_t *rb = b + d0 * s->stride_b[0] + d1 * s->stride_b[1] + d2 * s->stride_b[2];
        const int32_t sign = p->subtract ? -1 : 1; /* on b's term */
        if (half_a) /* b scaled, a at 1/2 */
          add_row(&q, rb, sb, ra, sa, p->zp_a, n, &qo, p->zp_out, p->act_min, out, sign, 1);
        else
          add_row(&q, ra, sa, rb, sb, p->zp_b, n, &qo, p->zp_out, p->act_min, out, 1, sign);
      }
  return 1;
}

/* a sum pool from its running sums (edgeosc_sum_pool_sums_int8) on edgeosc_dsp_requant's constants */
static int edgeosc_sum_pool_sums_dsp(const EdgeoscPoolParams *p, const int32_t *sums, int8_t *out) {
  const int32_t base = p->rows * p->zp_in;
  EdgeoscDspRequant q;
  int32_t c;
  if (!edgeosc_dsp_requant_init(&q, p->rq.multiplier, p->rq.shift)) return 0;
  for (c = 0; c < p->cols; ++c)
    out[c] = (int8_t)clamp(edgeosc_dsp_requant(&q, (sums[c] - base) * p->weight) + p->zp_out, p->act_min, p->act_max);
  return 1;
}

/* TRANSPOSE whose innermost output dim is contiguous in the input (the heads' split and merge move rows of d_head
 * values): a word at a time */
static int edgeosc_transpose_dsp(const EdgeoscTransposeParams *p, const int8_t *in, int8_t *out) {
  const int32_t *s = p->in_strides, n3 = p->out_dims[3];
  int32_t d0, d1, d2, d3;
  if (s[3] != 1) return 0;
  for (d0 = 0; d0 < p->out_dims[0]; ++d0)
    for (d1 = 0; d1 < p->out_dims[1]; ++d1)
      for (d2 = 0; d2 < p->out_dims[2]; ++d2) {
        const int8_t *src = in + d0 * s[0] + d1 * s[1] + d2 * s[2];
        for (d3 = 0; d3 + 4 <= n3; d3 += 4, src += 4, out += 4)
          *(edgeosc_unaligned_i32 *)(void *)out = edgeosc_read4(src);
        for (; d3 < n3; ++d3) *out++ = *src++;
      }
  return 1;
}
#endif
