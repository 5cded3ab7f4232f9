/* The builtin kernels one at a time, emulated on an ARM core against the portable loops (edgeosc/bench/estimate
 * kernel_cycles). Each takes its kernel's integers in a struct of its own (Bench*: int32 fields only, mirrored by
 * edgeosc/bench/estimate/structs.py, the same words the kernel's parameters take), its arrays as arguments. */
#include "edgeosc_ops.h"

typedef struct {
  int32_t rows, depth, units, zp_in, zp_out, act_min, act_max, per_channel;
} BenchFc;

typedef struct {
  int32_t in_h, in_w, in_c, out_h, out_w, out_c, k_h, k_w, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left;
  int32_t zp_in, zp_out, act_min, act_max, depthwise; /* depthwise: weights [1, k_h, k_w, out_c] */
} BenchConv;

typedef struct {
  int32_t rows, depth, zp;
} BenchL2Norm;

typedef struct {
  int32_t dims[4], stride_a[4], stride_b[4];
  int32_t zp_a, zp_b, zp_out, act_min, act_max, subtract;
} BenchAdd;

/* dsp: the requantization constants code generation writes (EdgeoscChannelRequant.dsp), or NULL; packed: the
 * packed weights it writes for EDGEOSC_PACKED builds, or NULL */
int edgeosc_bench_fc(const BenchFc *f, const int8_t *w, const int32_t *bias, const int32_t *mult,
                     const int32_t *shift, const int8_t *in, int8_t *out, int32_t *scratch, const int32_t *dsp,
                     const int8_t *packed) {
  EdgeoscFcParams p;
  p.rows = f->rows, p.depth = f->depth, p.units = f->units, p.zp_in = f->zp_in, p.zp_out = f->zp_out;
  p.act_min = f->act_min, p.act_max = f->act_max, p.weights = w, p.bias = bias, p.rq.multiplier = mult;
  p.rq.shift = shift, p.rq.per_channel = f->per_channel, p.rq.dsp = dsp, p.packed = packed;
  edgeosc_fc_int8(&p, in, out, scratch);
  return 0;
}

int edgeosc_bench_conv(const BenchConv *f, const int8_t *w, const int32_t *bias, const int32_t *mult,
                       const int32_t *shift, const int8_t *in, int8_t *out, int32_t *scratch, const int32_t *dsp,
                       const int8_t *packed) {
  EdgeoscConvParams p;
  p.in_h = f->in_h, p.in_w = f->in_w, p.in_c = f->in_c, p.out_h = f->out_h, p.out_w = f->out_w, p.out_c = f->out_c;
  p.k_h = f->k_h, p.k_w = f->k_w, p.stride_h = f->stride_h, p.stride_w = f->stride_w, p.dil_h = f->dil_h;
  p.dil_w = f->dil_w, p.pad_top = f->pad_top, p.pad_left = f->pad_left, p.zp_in = f->zp_in, p.zp_out = f->zp_out;
  p.act_min = f->act_min, p.act_max = f->act_max;
  p.weights = w, p.bias = bias, p.rq.multiplier = mult, p.rq.shift = shift, p.rq.per_channel = 1, p.rq.dsp = dsp;
  p.packed = packed;
  if (f->depthwise)
    edgeosc_depthwise_conv_int8(&p, in, out, scratch);
  else
    edgeosc_conv2d_int8(&p, in, out, scratch);
  return 0;
}

int edgeosc_bench_l2norm(const BenchL2Norm *f, const int8_t *in, int8_t *out) {
  edgeosc_l2norm_int8(f->rows, f->depth, f->zp, in, out);
  return 0;
}

/* ADD / SUB; mult and shift: a's, b's, the output's */
int edgeosc_bench_add(const BenchAdd *f, const int8_t *b, const int32_t *bias, const int32_t *mult,
                      const int32_t *shift, const int8_t *in, int8_t *out, int32_t *scratch) {
  EdgeoscAddParams p;
  int32_t i;
  for (i = 0; i < 4; ++i)
    p.shape.dims[i] = f->dims[i], p.shape.stride_a[i] = f->stride_a[i], p.shape.stride_b[i] = f->stride_b[i];
  p.zp_a = f->zp_a, p.zp_b = f->zp_b, p.zp_out = f->zp_out, p.act_min = f->act_min, p.act_max = f->act_max;
  p.subtract = f->subtract;
  p.left_shift = 20;
  p.rq_a.multiplier = mult[0], p.rq_a.shift = shift[0], p.rq_b.multiplier = mult[1], p.rq_b.shift = shift[1];
  p.rq_out.multiplier = mult[2], p.rq_out.shift = shift[2];
  (void)bias, (void)scratch;
  edgeosc_add_int8(&p, in, b, out);
  return 0;
}
