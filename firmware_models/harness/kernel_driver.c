/* The builtin kernels one at a time, with their parameters from f[] (edgeosc/bench/estimate.py kernel_cycles,
 * _kernel_case writes f), emulated on an ARM core against the portable loops. */
#include "edgeosc_ops.h"

/* dsp: the requantization constants code generation writes (EdgeoscChannelRequant.dsp), or NULL; packed: the
 * packed weights it writes for EDGEOSC_PACKED builds, or NULL */
int edgeosc_bench_fc(const int32_t *f, const int8_t *w, const int32_t *bias, const int32_t *mult,
                     const int32_t *shift, const int8_t *in, int8_t *out, int32_t *scratch, const int32_t *dsp,
                     const int8_t *packed) {
  EdgeoscFcParams p;
  p.rows = f[0], p.depth = f[1], p.units = f[2], p.zp_in = f[3], p.zp_out = f[4], p.act_min = f[5];
  p.act_max = f[6], p.weights = w, p.bias = bias, p.rq.multiplier = mult, p.rq.shift = shift;
  p.rq.per_channel = f[7], p.rq.dsp = dsp, p.packed = packed;
  edgeosc_fc_int8(&p, in, out, scratch);
  return 0;
}

int edgeosc_bench_conv(const int32_t *f, const int8_t *w, const int32_t *bias, const int32_t *mult,
                       const int32_t *shift, const int8_t *in, int8_t *out, int32_t *scratch, const int32_t *dsp,
                       const int8_t *packed) {
  EdgeoscConvParams p;
  p.in_h = f[0], p.in_w = f[1], p.in_c = f[2], p.out_h = f[3], p.out_w = f[4], p.out_c = f[5], p.k_h = f[6];
  p.k_w = f[7], p.stride_h = f[8], p.stride_w = f[9], p.dil_h = f[10], p.dil_w = f[11], p.pad_top = f[12];
  p.pad_left = f[13], p.zp_in = f[14], p.zp_out = f[15], p.act_min = f[16], p.act_max = f[17];
  p.weights = w, p.bias = bias, p.rq.multiplier = mult, p.rq.shift = shift, p.rq.per_channel = 1, p.rq.dsp = dsp;
  p.packed = packed;
  if (f[18]) /* depthwise: weights [1, k_h, k_w, out_c] */
    edgeosc_depthwise_conv_int8(&p, in, out, scratch);
  else
    edgeosc_conv2d_int8(&p, in, out, scratch);
  return 0;
}

/* L2_NORMALIZATION: f = rows, depth, zero point */
int edgeosc_bench_l2norm(const int32_t *f, const int8_t *in, int8_t *out) {
  edgeosc_l2norm_int8(f[0], f[1], f[2], in, out);
  return 0;
}

/* ADD / SUB: f = dims[4], stride_a[4], stride_b[4], zp_a, zp_b, zp_out, act_min, act_max, subtract; mult and
 * shift: a's, b's, the output's. */
int edgeosc_bench_add(const int32_t *f, const int8_t *b, const int32_t *bias, const int32_t *mult,
                      const int32_t *shift, const int8_t *in, int8_t *out, int32_t *scratch) {
  EdgeoscAddParams p;
  int32_t i;
  for (i = 0; i < 4; ++i) p.shape.dims[i] = f[i], p.shape.stride_a[i] = f[4 + i], p.shape.stride_b[i] = f[8 + i];
  p.zp_a = f[12], p.zp_b = f[13], p.zp_out = f[14], p.act_min = f[15], p.act_max = f[16], p.subtract = f[17];
  p.left_shift = 20;
  p.rq_a.multiplier = mult[0], p.rq_a.shift = shift[0], p.rq_b.multiplier = mult[1], p.rq_b.shift = shift[1];
  p.rq_out.multiplier = mult[2], p.rq_out.shift = shift[2];
  (void)bias, (void)scratch;
  edgeosc_add_int8(&p, in, b, out);
  return 0;
}
