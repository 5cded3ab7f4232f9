/* Int8 builtin ops (see edgeosc_ops.h): one reference kernel per op, TFLite's loops (only the integer results matter,
 * and int32 accumulation is exact here, so the loop order is free), and its dispatch: an op first tries this build's
 * optimised variant (edgeosc_ops_fast.h lists them: dsp/, neon/), which gives the same integers, bit for bit. */
#include "edgeosc_attention.h"
#include "edgeosc_ops_fast.h"

/* The optimised variants, a file each, compiled in this unit (as CMSIS-DSP's grouping files do) so that the
 * dispatch's calls to them inline: a stream's hop makes dozens of small calls */
#include "dsp/edgeosc_matrix_dsp.c"
#include "dsp/edgeosc_depthwise_dsp.c"
#include "dsp/edgeosc_elementwise_dsp.c"
#include "neon/edgeosc_ops_neon.c"

void edgeosc_conv2d_int8(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  int32_t oy, ox, oc, ky, kx, ic;
#if EDGEOSC_DSP
  if (edgeosc_conv2d_dsp(p, in, out, scratch)) return;
#elif EDGEOSC_NEON
  if (edgeosc_conv2d_neon(p, in, out, scratch)) return;
#endif
  (void)scratch;
  for (oy = 0; oy < p->out_h; ++oy) {
    for (ox = 0; ox < p->out_w; ++ox) {
      for (oc = 0; oc < p->out_c; ++oc) {
        int32_t acc = p->bias ? p->bias[oc] : 0;
        for (ky = 0; ky < p->k_h; ++ky) {
          const int32_t iy = oy * p->stride_h - p->pad_top + ky * p->dil_h;
          if (iy < 0 || iy >= p->in_h) continue;
          for (kx = 0; kx < p->k_w; ++kx) {
            const int32_t ix = ox * p->stride_w - p->pad_left + kx * p->dil_w;
            const int8_t *x, *w;
            if (ix < 0 || ix >= p->in_w) continue;
            x = in + (iy * p->in_w + ix) * p->in_c;
            w = p->weights + ((oc * p->k_h + ky) * p->k_w + kx) * p->in_c;
            for (ic = 0; ic < p->in_c; ++ic) acc += (x[ic] - p->zp_in) * w[ic];
          }
        }
        *out++ = channel_out(&p->rq, oc, acc, p->zp_out, p->act_min, p->act_max);
      }
    }
  }
}

void edgeosc_depthwise_conv_int8(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  const int32_t multiplier = p->out_c / p->in_c;
  int32_t oy, ox, oc, ky, kx;
#if EDGEOSC_DSP
  if (edgeosc_depthwise_dsp(p, in, out, scratch)) return;
#elif EDGEOSC_NEON
  if (edgeosc_depthwise_neon(p, in, out)) return;
#endif
  (void)scratch;
  for (oy = 0; oy < p->out_h; ++oy) {
    for (ox = 0; ox < p->out_w; ++ox) {
      for (oc = 0; oc < p->out_c; ++oc) {
        const int32_t ic = oc / multiplier;
        int32_t acc = p->bias ? p->bias[oc] : 0;
        for (ky = 0; ky < p->k_h; ++ky) {
          const int32_t iy = oy * p->stride_h - p->pad_top + ky * p->dil_h;
          if (iy < 0 || iy >= p->in_h) continue;
          for (kx = 0; kx < p->k_w; ++kx) {
            const int32_t ix = ox * p->stride_w - p->pad_left + kx * p->dil_w;
            if (ix < 0 || ix >= p->in_w) continue;
            acc += (in[(iy * p->in_w + ix) * p->in_c + ic] - p->zp_in) * p->weights[(ky * p->k_w + kx) * p->out_c + oc];
          }
        }
        *out++ = channel_out(&p->rq, oc, acc, p->zp_out, p->act_min, p->act_max);
      }
    }
  }
}

void edgeosc_avg_pool_int8(const EdgeoscAvgPoolParams *p, const int8_t *in, int8_t *out) {
  int32_t oy, ox, c, y, x;
  for (oy = 0; oy < p->out_h; ++oy) {
    const int32_t y0 = oy * p->stride_h - p->pad_top;
    const int32_t ys = y0 < 0 ? -y0 : 0, ye = p->in_h - y0 < p->k_h ? p->in_h - y0 : p->k_h;
    for (ox = 0; ox < p->out_w; ++ox) {
      const int32_t x0 = ox * p->stride_w - p->pad_left;
      const int32_t xs = x0 < 0 ? -x0 : 0, xe = p->in_w - x0 < p->k_w ? p->in_w - x0 : p->k_w;
      const int32_t count = (ye - ys) * (xe - xs); /* > 0: code generation checks the windows */
      for (c = 0; c < p->channels; ++c) {
        int32_t acc = 0;
        for (y = ys; y < ye; ++y)
          for (x = xs; x < xe; ++x) acc += in[((y0 + y) * p->in_w + x0 + x) * p->channels + c];
        acc = acc > 0 ? (acc + count / 2) / count : (acc - count / 2) / count;
        *out++ = (int8_t)clamp(acc, p->act_min, p->act_max);
      }
    }
  }
}

void edgeosc_fc_int8(const EdgeoscFcParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  int32_t r, u, d;
#if EDGEOSC_DSP
  if (edgeosc_fc_dsp(p, in, out, scratch)) return;
#elif EDGEOSC_NEON
  if (edgeosc_fc_neon(p, in, out, scratch)) return;
#endif
  (void)scratch;
  for (r = 0; r < p->rows; ++r, in += p->depth) {
    const int8_t *w = p->weights;
    for (u = 0; u < p->units; ++u, w += p->depth) {
      int32_t acc = p->bias ? p->bias[u] : 0;
      for (d = 0; d < p->depth; ++d) acc += (in[d] - p->zp_in) * w[d];
      *out++ = channel_out(&p->rq, u, acc, p->zp_out, p->act_min, p->act_max);
    }
  }
}

void edgeosc_fc_group_int8(int32_t n, const EdgeoscFcParams *const *p, const int8_t *in, int8_t *const *out,
                           int32_t *scratch) {
  int32_t i;
#if EDGEOSC_DSP
  if (edgeosc_fc_group_dsp(n, p, in, out, scratch)) return;
#endif
  for (i = 0; i < n; ++i) edgeosc_fc_int8(p[i], in, out[i], scratch);
}

/* A sum pool's output from its column's sum of (in - zp_in) */
static int8_t pool_out(const EdgeoscPoolParams *p, int32_t acc) {
  return (int8_t)clamp(edgeosc_mbqm(acc * p->weight, p->rq.multiplier, p->rq.shift) + p->zp_out, p->act_min,
                       p->act_max);
}

void edgeosc_sum_pool_int8(const EdgeoscPoolParams *p, const int8_t *in, int8_t *out) {
  int32_t r, c;
  for (c = 0; c < p->cols; ++c) {
    int32_t acc = 0;
    for (r = 0; r < p->rows; ++r) acc += in[r * p->cols + c] - p->zp_in;
    out[c] = pool_out(p, acc);
  }
}

void edgeosc_sum_pool_sums_int8(const EdgeoscPoolParams *p, const int32_t *sums, int8_t *out) {
  const int32_t base = p->rows * p->zp_in;
  int32_t c;
#if EDGEOSC_DSP
  if (edgeosc_sum_pool_sums_dsp(p, sums, out)) return;
#endif
  for (c = 0; c < p->cols; ++c) out[c] = pool_out(p, sums[c] - base);
}

/* Runs BODY for every output element i, with ia and ib the broadcast offsets into a and b; the innermost
 * dim steps the offsets by its strides (no index arithmetic per element). */
#define EDGEOSC_BROADCAST(s, BODY)                                                         \
  do {                                                                                     \
    int32_t d0, d1, d2, d3, i = 0;                                                         \
    const int32_t n3 = (s)->dims[3], sa3 = (s)->stride_a[3], sb3 = (s)->stride_b[3];       \
    for (d0 = 0; d0 < (s)->dims[0]; ++d0)                                                  \
      for (d1 = 0; d1 < (s)->dims[1]; ++d1)                                                \
        for (d2 = 0; d2 < (s)->dims[2]; ++d2) {                                            \
          int32_t ia = d0 * (s)->stride_a[0] + d1 * (s)->stride_a[1] + d2 * (s)->stride_a[2]; \
          int32_t ib = d0 * (s)->stride_b[0] + d1 * (s)->stride_b[1] + d2 * (s)->stride_b[2]; \
          for (d3 = 0; d3 < n3; ++d3, ++i, ia += sa3, ib += sb3) BODY;                     \
        }                                                                                  \
  } while (0)

void edgeosc_add_int8(const EdgeoscAddParams *p, const int8_t *a, const int8_t *b, int8_t *out) {
  /* the requantization constants split once (edgeosc_mbqm per element, inlined); left_shift is 20 */
  const int32_t ma = p->rq_a.multiplier, ra = -p->rq_a.shift, mb = p->rq_b.multiplier, rb = -p->rq_b.shift;
  const int32_t one = 1 << p->left_shift, sign = p->subtract ? -1 : 1;
#if EDGEOSC_DSP
  if (edgeosc_add_dsp(p, a, b, out)) return;
#endif
  if (p->rq_a.shift > 0 || p->rq_b.shift > 0) { /* input multipliers above 1: TFLite never makes them */
    EDGEOSC_BROADCAST(&p->shape, {
      const int32_t xa = edgeosc_mbqm((a[ia] - p->zp_a) * one, ma, p->rq_a.shift);
      const int32_t xb = edgeosc_mbqm((b[ib] - p->zp_b) * one, mb, p->rq_b.shift);
      out[i] = (int8_t)clamp(edgeosc_mbqm(xa + sign * xb, p->rq_out.multiplier, p->rq_out.shift) + p->zp_out,
                             p->act_min, p->act_max);
    });
    return;
  }
  EDGEOSC_BROADCAST(&p->shape, {
    const int32_t xa = edgeosc_rdbpot(edgeosc_srdhm((a[ia] - p->zp_a) * one, ma), ra);
    const int32_t xb = edgeosc_rdbpot(edgeosc_srdhm((b[ib] - p->zp_b) * one, mb), rb);
    out[i] = (int8_t)clamp(edgeosc_mbqm(xa + sign * xb, p->rq_out.multiplier, p->rq_out.shift) + p->zp_out,
                           p->act_min, p->act_max);
  });
}

void edgeosc_mul_int8(const EdgeoscMulParams *p, const int8_t *a, const int8_t *b, int8_t *out) {
  EDGEOSC_BROADCAST(&p->shape, {
    const int32_t prod = (a[ia] - p->zp_a) * (b[ib] - p->zp_b);
    out[i] = (int8_t)clamp(edgeosc_mbqm(prod, p->rq.multiplier, p->rq.shift) + p->zp_out,
                           p->act_min, p->act_max);
  });
}

void edgeosc_batch_matmul_int8(const EdgeoscBatchMatmulParams *p, const int8_t *a, const int8_t *b,
                               int8_t *out) {
  const int32_t K = p->depth, N = p->cols;
  int32_t n, i, j, k;
  for (n = 0; n < p->batch; ++n) {
    const int8_t *an = a + (p->batch_a > 1 ? n : 0) * p->rows * K;
    const int8_t *bn = b + (p->batch_b > 1 ? n : 0) * K * N;
    for (i = 0; i < p->rows; ++i) {
      for (j = 0; j < N; ++j) {
        /* b[k, j] sits at k * N + j, or at j * K + k when b is given transposed (adj_y) */
        const int32_t step = p->adj_y ? 1 : N, start = p->adj_y ? j * K : j;
        int32_t acc = 0;
        for (k = 0; k < K; ++k) acc += (an[i * K + k] - p->zp_a) * (bn[start + k * step] - p->zp_b);
        *out++ = edgeosc_requant_int8(acc, p->rq, p->zp_out, EDGEOSC_ROUND_AWAY);
      }
    }
  }
}

void edgeosc_l2norm_int8(int32_t rows, int32_t depth, int32_t zero_point, const int8_t *in,
                         int8_t *out) {
  int32_t r;
  for (r = 0; r < rows; ++r, in += depth, out += depth) edgeosc_l2norm_row_int8(in, depth, zero_point, out);
}

void edgeosc_softmax_int8(int32_t rows, int32_t depth, const int32_t *exp_lut, const int8_t *in,
                          int8_t *out) {
  int32_t r;
  for (r = 0; r < rows; ++r, in += depth, out += depth) edgeosc_softmax_row_lut_int8(in, depth, exp_lut, out);
}

void edgeosc_lut_int8(int32_t n, const int8_t *table, const int8_t *in, int8_t *out) {
  int32_t i;
  for (i = 0; i < n; ++i) out[i] = table[in[i] + 128];
}

void edgeosc_transpose_int8(const EdgeoscTransposeParams *p, const int8_t *in, int8_t *out) {
  const int32_t *s = p->in_strides, n3 = p->out_dims[3], s3 = s[3];
  int32_t d0, d1, d2, d3;
#if EDGEOSC_DSP
  if (edgeosc_transpose_dsp(p, in, out)) return;
#endif
  for (d0 = 0; d0 < p->out_dims[0]; ++d0)
    for (d1 = 0; d1 < p->out_dims[1]; ++d1)
      for (d2 = 0; d2 < p->out_dims[2]; ++d2) {
        const int8_t *src = in + d0 * s[0] + d1 * s[1] + d2 * s[2];
        for (d3 = 0; d3 < n3; ++d3, src += s3) *out++ = *src;
      }
}

void edgeosc_copy_int8(int32_t n, const int8_t *in, int8_t *out) { edgeosc_copy_bytes(out, in, n); }

void edgeosc_ring_write_int8(int32_t rows, int32_t slots, int32_t n, const int8_t *in, int8_t *ring, int32_t *slot) {
  int32_t r;
  for (r = 0; r < rows; ++r) edgeosc_copy_int8(n, in + r * n, ring + (r * slots + *slot) * n);
  *slot = *slot + 1 < slots ? *slot + 1 : 0;
}

void edgeosc_ring_sum_write_int8(int32_t rows, int32_t slots, int32_t n, const int8_t *in, int8_t *ring,
                                 int32_t *slot, int32_t *sums) {
  int32_t r, i;
  int8_t *entry = ring + *slot * n;
  for (r = 0; r < rows; ++r, entry += slots * n)
    for (i = 0; i < n; ++i, ++in, ++sums) *sums += *in - entry[i], entry[i] = *in;
  *slot = *slot + 1 < slots ? *slot + 1 : 0;
}

void edgeosc_gather_int8(int32_t outer, int32_t axis_size, int32_t inner, int32_t n_index, const int32_t *index,
                         const int8_t *in, int8_t *out) {
  int32_t o, i;
  for (o = 0; o < outer; ++o, in += axis_size * inner)
    for (i = 0; i < n_index; ++i, out += inner) edgeosc_copy_int8(inner, in + index[i] * inner, out);
}

void edgeosc_copy_rows_int8(int32_t rows, int32_t n, int32_t in_stride, int32_t out_stride, const int8_t *in,
                            int8_t *out) {
  int32_t r;
  for (r = 0; r < rows; ++r, in += in_stride, out += out_stride) edgeosc_copy_int8(n, in, out);
}
