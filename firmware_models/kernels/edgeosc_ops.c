/* Int8 builtin ops (see edgeosc_ops.h). Loops follow TFLite's reference kernels; only the integer
 * results matter, and int32 accumulation is exact here (no overflow at these sizes), so the loop order
 * is free. */
#include "edgeosc_ops.h"

#include "edgeosc_attention.h"

static int32_t clamp(int32_t y, int32_t lo, int32_t hi) { return y < lo ? lo : y > hi ? hi : y; }

static int32_t channel_mbqm(const EdgeoscChannelRequant *rq, int32_t c, int32_t acc) {
  const int32_t i = rq->per_channel ? c : 0;
  return edgeosc_mbqm(acc, rq->multiplier[i], rq->shift[i]);
}

void edgeosc_conv2d_int8(const EdgeoscConvParams *p, const int8_t *in, int8_t *out) {
  int32_t oy, ox, oc, ky, kx, ic;
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
        *out++ = (int8_t)clamp(channel_mbqm(&p->rq, oc, acc) + p->zp_out, p->act_min, p->act_max);
      }
    }
  }
}

void edgeosc_fc_int8(const EdgeoscFcParams *p, const int8_t *in, int8_t *out) {
  int32_t r, u, d;
  for (r = 0; r < p->rows; ++r, in += p->depth) {
    const int8_t *w = p->weights;
    for (u = 0; u < p->units; ++u, w += p->depth) {
      int32_t acc = p->bias ? p->bias[u] : 0;
      for (d = 0; d < p->depth; ++d) acc += (in[d] - p->zp_in) * w[d];
      *out++ = (int8_t)clamp(channel_mbqm(&p->rq, u, acc) + p->zp_out, p->act_min, p->act_max);
    }
  }
}

void edgeosc_sum_pool_int8(const EdgeoscPoolParams *p, const int8_t *in, int8_t *out) {
  int32_t r, c;
  for (c = 0; c < p->cols; ++c) {
    int32_t acc = 0;
    for (r = 0; r < p->rows; ++r) acc += in[r * p->cols + c] - p->zp_in;
    out[c] = (int8_t)clamp(edgeosc_mbqm(acc * p->weight, p->rq.multiplier, p->rq.shift) + p->zp_out,
                           p->act_min, p->act_max);
  }
}

/* Runs BODY for every output element i, with ia and ib the broadcast offsets into a and b. */
#define EDGEOSC_BROADCAST(s, BODY)                                                  \
  do {                                                                              \
    int32_t d0, d1, d2, d3, i = 0;                                                  \
    for (d0 = 0; d0 < (s)->dims[0]; ++d0)                                           \
      for (d1 = 0; d1 < (s)->dims[1]; ++d1)                                         \
        for (d2 = 0; d2 < (s)->dims[2]; ++d2)                                       \
          for (d3 = 0; d3 < (s)->dims[3]; ++d3, ++i) {                              \
            const int32_t ia = d0 * (s)->stride_a[0] + d1 * (s)->stride_a[1] +      \
                               d2 * (s)->stride_a[2] + d3 * (s)->stride_a[3];       \
            const int32_t ib = d0 * (s)->stride_b[0] + d1 * (s)->stride_b[1] +      \
                               d2 * (s)->stride_b[2] + d3 * (s)->stride_b[3];       \
            BODY;                                                                   \
          }                                                                         \
  } while (0)

void edgeosc_add_int8(const EdgeoscAddParams *p, const int8_t *a, const int8_t *b, int8_t *out) {
  EDGEOSC_BROADCAST(&p->shape, {
    const int32_t xa = edgeosc_mbqm((a[ia] - p->zp_a) * (1 << p->left_shift), p->rq_a.multiplier,
                                    p->rq_a.shift);
    const int32_t xb = edgeosc_mbqm((b[ib] - p->zp_b) * (1 << p->left_shift), p->rq_b.multiplier,
                                    p->rq_b.shift);
    const int32_t raw = p->subtract ? xa - xb : xa + xb;
    out[i] = (int8_t)clamp(edgeosc_mbqm(raw, p->rq_out.multiplier, p->rq_out.shift) + p->zp_out,
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
  int32_t d0, d1, d2, d3;
  const int32_t *s = p->in_strides;
  for (d0 = 0; d0 < p->out_dims[0]; ++d0)
    for (d1 = 0; d1 < p->out_dims[1]; ++d1)
      for (d2 = 0; d2 < p->out_dims[2]; ++d2)
        for (d3 = 0; d3 < p->out_dims[3]; ++d3)
          *out++ = in[d0 * s[0] + d1 * s[1] + d2 * s[2] + d3 * s[3]];
}

void edgeosc_copy_int8(int32_t n, const int8_t *in, int8_t *out) {
  int32_t i;
  for (i = 0; i < n; ++i) out[i] = in[i];
}
