/* The optimised variants of the builtin ops and what they share with the reference loops (private header).
 *
 * edgeosc_ops.c holds one reference kernel per op (TFLite's loops, the integers every variant is checked against,
 * tests/test_fast_kernels.py) and its dispatch: the build's variant first, where it applies. The variants:
 *   dsp/edgeosc_matrix_dsp.c       FULLY_CONNECTED, CONV_2D (and groups of one-row layers) on packed weights (the
 *                                  blocks' loops in edgeosc_matrix_dsp.S)
 *   dsp/edgeosc_depthwise_dsp.c    DEPTHWISE_CONV_2D: 3 x 3 on row-pair planes (its steps in
 *                                  edgeosc_depthwise_dsp.S), the others tap by tap
 *   dsp/edgeosc_elementwise_dsp.c  ADD / SUB, a sum pool's requantization, TRANSPOSE's contiguous runs
 *   neon/edgeosc_ops_neon.c        FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D on AArch64
 * Each returns 1 where it computed the op and 0 where the reference loops must. edgeosc_ops.c compiles them in its own
 * unit (their entry points are static); those not for a build's core are empty (edgeosc_variant.h says which it
 * takes). */
#ifndef EDGEOSC_OPS_FAST_H_
#define EDGEOSC_OPS_FAST_H_

#include "edgeosc_ops.h"
#include "edgeosc_simd.h"

static int32_t clamp(int32_t y, int32_t lo, int32_t hi) { return y < lo ? lo : y > hi ? hi : y; }

static int32_t channel_mbqm(const EdgeoscChannelRequant *rq, int32_t c, int32_t acc) {
  const int32_t i = rq->per_channel ? c : 0;
  return edgeosc_mbqm(acc, rq->multiplier[i], rq->shift[i]);
}

static int8_t channel_out(const EdgeoscChannelRequant *rq, int32_t c, int32_t acc, int32_t zp_out, int32_t lo,
                                 int32_t hi) {
  return (int8_t)clamp(channel_mbqm(rq, c, acc) + zp_out, lo, hi);
}

#if EDGEOSC_DSP || EDGEOSC_NEON
/* The receptive field of output pixel o (flat index) as one row of k_h k_w in_c values in the weights'
 * OHWI order, taps outside the image at zp_in (they then add nothing, as TFLite's skipped taps): where it is one
 * run of the input already (one kernel row, no dilation, all taps inside: the stem's), a pointer into `in`,
 * else built in `patch`. */
/* noinline: inlined into the DSP path's row loop, DS-CNN's stem ran 2.5% slower (gcc 12, -O2) */
__attribute__((noinline)) static const int8_t *conv_patch(const EdgeoscConvParams *p, const int8_t *in, int32_t o,
                                                          int8_t *patch) {
  const int32_t oy = o / p->out_w, ox = o % p->out_w;
  const int32_t iy0 = oy * p->stride_h - p->pad_top, ix0 = ox * p->stride_w - p->pad_left;
  int32_t ky, kx, ic, n = 0;
  if (p->k_h == 1 && (p->dil_w == 1 || p->k_w == 1) && iy0 >= 0 && iy0 < p->in_h && ix0 >= 0 &&
      ix0 + p->k_w <= p->in_w)
    return in + (iy0 * p->in_w + ix0) * p->in_c;
  for (ky = 0; ky < p->k_h; ++ky) {
    const int32_t iy = iy0 + ky * p->dil_h;
    for (kx = 0; kx < p->k_w; ++kx) {
      const int32_t ix = ix0 + kx * p->dil_w;
      if (iy >= 0 && iy < p->in_h && ix >= 0 && ix < p->in_w)
        for (ic = 0; ic < p->in_c; ++ic) patch[n++] = in[(iy * p->in_w + ix) * p->in_c + ic];
      else
        for (ic = 0; ic < p->in_c; ++ic) patch[n++] = (int8_t)p->zp_in;
    }
  }
  return patch;
}

#define DEPTHWISE_MAX_TAPS 64

/* The taps of output pixel (oy, ox) inside the image, listed once for every channel group: their input and
 * weight offsets (channels last in both); returns how many. */
static int32_t depthwise_taps(const EdgeoscConvParams *p, int32_t oy, int32_t ox, int32_t *x_off,
                                     int32_t *w_off) {
  int32_t ky, kx, taps = 0;
  for (ky = 0; ky < p->k_h; ++ky) {
    const int32_t iy = oy * p->stride_h - p->pad_top + ky * p->dil_h;
    for (kx = 0; kx < p->k_w && iy >= 0 && iy < p->in_h; ++kx) {
      const int32_t ix = ox * p->stride_w - p->pad_left + kx * p->dil_w;
      if (ix < 0 || ix >= p->in_w) continue;
      x_off[taps] = (iy * p->in_w + ix) * p->out_c, w_off[taps++] = (ky * p->k_w + kx) * p->out_c;
    }
  }
  return taps;
}
#endif

#if EDGEOSC_DSP
static int edgeosc_fc_dsp(const EdgeoscFcParams *p, const int8_t *in, int8_t *out, int32_t *scratch);
static int edgeosc_fc_group_dsp(int32_t n, const EdgeoscFcParams *const *p, const int8_t *in, int8_t *const *out,
                         int32_t *scratch);
static int edgeosc_conv2d_dsp(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch);
static int edgeosc_depthwise_dsp(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch);
static int edgeosc_add_dsp(const EdgeoscAddParams *p, const int8_t *a, const int8_t *b, int8_t *out);
static int edgeosc_sum_pool_sums_dsp(const EdgeoscPoolParams *p, const int32_t *sums, int8_t *out);
static int edgeosc_transpose_dsp(const EdgeoscTransposeParams *p, const int8_t *in, int8_t *out);
#endif

#if EDGEOSC_NEON
static int edgeosc_fc_neon(const EdgeoscFcParams *p, const int8_t *in, int8_t *out, int32_t *scratch);
static int edgeosc_conv2d_neon(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch);
static int edgeosc_depthwise_neon(const EdgeoscConvParams *p, const int8_t *in, int8_t *out);
#endif

#endif /* EDGEOSC_OPS_FAST_H_ */
