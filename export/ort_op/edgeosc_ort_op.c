/* ai.edgeosc::OscillatorAttention (version 2) as an ONNX Runtime custom op: the linear core (form "linear", d_osc 2,
 * taylor2, with or without the key gate) of export/oscillator_attention.md, for float_op.onnx and int8_qcdq_op.onnx.
 *
 * Input x [B, T, H W], the attention layer's fused projections, per head (W = 3 d_h + 2 (+ 1)) q (times the score
 * scale), k, v, the raw anchor and, in a gated node, the raw gate; output out [B, T, H d_v], the heads merged
 * (d_v = d_h); float32. The kernel computes what the node's model-local ONNX function computes (the function
 * onnxruntime otherwise inlines: edgeosc/export/onnx/trace.py's oscillator_heads, the anchors' and gates' unit vectors
 * and the gate's map, then the linear core in its direct form), as the float32 operations of
 * oscillator_attention_linear in edgeosc/models/attention.py, with the points r_raw, g_raw, g, gn, q, k, v, r, z, out
 * quantized as the function's QuantizeLinear/DequantizeLinear pairs do (x / s rounded half to even, saturated to
 * int8, or uint8 for g, times s) where the node carries their <point>_scale attributes (int8_qcdq_op.onnx), and left
 * alone where it does not (float_op.onnx). Unit vectors as onnxruntime's LpNormalization: x / sqrt(the squares summed
 * in order), 0 where that is 0.
 * Per head one pass over the keys builds the two sums (the coupling's S [F, 2] and the readout's M [2p + 1, d_v + 1])
 * and one pass over the queries reads them; the function computes the coupling as T x T products instead, so the two
 * agree to float32 rounding.
 *
 * Not the int8 kernel of int8_custom.tflite (edgeosc_linear_core_int8): that one rounds the coupling coefficient,
 * the harmonics and the division to integers, so it moves 3-7% of the core's outputs by one step from this float
 * semantics (docs/maths.md#integer-linear-core); the ONNX files promise the function's.
 *
 * onnxruntime loads it with SessionOptions.register_custom_ops_library (edgeosc/runtime/ort_op.py): RegisterCustomOps
 * below. No onnxruntime header or library is needed to build it.
 */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ONNX Runtime C ABI: only what this file touches, written from the facts of onnxruntime_c_api.h
 * (microsoft/onnxruntime, include/onnxruntime/core/session/onnxruntime_c_api.h, ORT_API_VERSION 13 to 18: the
 * OrtApi table only grows at its end, so a slot keeps its index in every later release), and of
 * onnxruntime/core/session/custom_ops.cc (which OrtCustomOp fields a given op version is read with). ORT_API_CALL
 * is empty outside 32-bit Windows. ---- */
typedef struct OrtStatus OrtStatus;
typedef struct OrtValue OrtValue;
typedef struct OrtSessionOptions OrtSessionOptions;
typedef struct OrtCustomOpDomain OrtCustomOpDomain;
typedef struct OrtTensorTypeAndShapeInfo OrtTensorTypeAndShapeInfo;
typedef struct OrtKernelInfo OrtKernelInfo;
typedef struct OrtKernelContext OrtKernelContext;
typedef struct OrtCustomOp OrtCustomOp;
typedef void (*OrtSlot)(void); /* a slot this file never calls */

enum { ORT_FAIL = 1, ORT_INVALID_ARGUMENT = 2 };           /* OrtErrorCode */
enum { ONNX_FLOAT = 1 };                                   /* ONNXTensorElementDataType */
enum { IO_REQUIRED = 0 };                                  /* OrtCustomOpInputOutputCharacteristic */
enum { MEM_DEFAULT = 0 };                                  /* OrtMemType */

/* The API version asked for and written into OrtCustomOp.version: 16 is the first with CreateKernelV2 and
 * KernelComputeV2 (errors as OrtStatus), i.e. onnxruntime 1.16; later runtimes serve it unchanged. */
#define EDGEOSC_ORT_API 16u

typedef struct OrtApi {
  OrtStatus *(*CreateStatus)(int code, const char *msg);                                          /* 0 */
  OrtSlot slots_1_25[25];
  OrtStatus *(*CreateCustomOpDomain)(const char *domain, OrtCustomOpDomain **out);               /* 26 */
  OrtStatus *(*CustomOpDomain_Add)(OrtCustomOpDomain *domain, const OrtCustomOp *op);           /* 27 */
  OrtStatus *(*AddCustomOpDomain)(OrtSessionOptions *options, OrtCustomOpDomain *domain);       /* 28 */
  OrtSlot slots_29_50[22];
  OrtStatus *(*GetTensorMutableData)(OrtValue *value, void **out);                                /* 51 */
  OrtSlot slots_52_60[9];
  OrtStatus *(*GetDimensionsCount)(const OrtTensorTypeAndShapeInfo *info, size_t *out);           /* 61 */
  OrtStatus *(*GetDimensions)(const OrtTensorTypeAndShapeInfo *info, int64_t *dims, size_t n);    /* 62 */
  OrtSlot slots_63_64[2];
  OrtStatus *(*GetTensorTypeAndShape)(const OrtValue *value, OrtTensorTypeAndShapeInfo **out);   /* 65 */
  OrtSlot slots_66_84[19];
  OrtStatus *(*KernelInfoGetAttribute_float)(const OrtKernelInfo *info, const char *name, float *out);    /* 85 */
  OrtStatus *(*KernelInfoGetAttribute_int64)(const OrtKernelInfo *info, const char *name, int64_t *out);  /* 86 */
  OrtStatus *(*KernelInfoGetAttribute_string)(const OrtKernelInfo *info, const char *name, char *out,
                                              size_t *size);                                      /* 87 */
  OrtStatus *(*KernelContext_GetInputCount)(const OrtKernelContext *ctx, size_t *out);            /* 88 */
  OrtSlot slots_89_89[1];
  OrtStatus *(*KernelContext_GetInput)(const OrtKernelContext *ctx, size_t index, const OrtValue **out); /* 90 */
  OrtStatus *(*KernelContext_GetOutput)(OrtKernelContext *ctx, size_t index, const int64_t *dims, size_t n,
                                        OrtValue **out);                                          /* 91 */
  OrtSlot slots_92_92[1];
  void (*ReleaseStatus)(OrtStatus *status);                                                       /* 93 */
  OrtSlot slots_94_98[5];
  void (*ReleaseTensorTypeAndShapeInfo)(OrtTensorTypeAndShapeInfo *info);                         /* 99 */
} OrtApi;

typedef struct OrtApiBase {
  const OrtApi *(*GetApi)(uint32_t version); /* NULL where the runtime does not serve that version */
  const char *(*GetVersionString)(void);
} OrtApiBase;

/* The layout of version 16 (the fields after KernelComputeV2 are read only from op version 17 on). */
struct OrtCustomOp {
  uint32_t version;
  void *(*CreateKernel)(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info);
  const char *(*GetName)(const OrtCustomOp *op);
  const char *(*GetExecutionProviderType)(const OrtCustomOp *op);
  int (*GetInputType)(const OrtCustomOp *op, size_t index);
  size_t (*GetInputTypeCount)(const OrtCustomOp *op);
  int (*GetOutputType)(const OrtCustomOp *op, size_t index);
  size_t (*GetOutputTypeCount)(const OrtCustomOp *op);
  void (*KernelCompute)(void *kernel, OrtKernelContext *ctx);
  void (*KernelDestroy)(void *kernel);
  int (*GetInputCharacteristic)(const OrtCustomOp *op, size_t index);
  int (*GetOutputCharacteristic)(const OrtCustomOp *op, size_t index);
  int (*GetInputMemoryType)(const OrtCustomOp *op, size_t index);
  int (*GetVariadicInputMinArity)(const OrtCustomOp *op);
  int (*GetVariadicInputHomogeneity)(const OrtCustomOp *op);
  int (*GetVariadicOutputMinArity)(const OrtCustomOp *op);
  int (*GetVariadicOutputHomogeneity)(const OrtCustomOp *op);
  OrtStatus *(*CreateKernelV2)(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info, void **kernel);
  OrtStatus *(*KernelComputeV2)(void *kernel, OrtKernelContext *ctx);
};

/* the slots' indices, checked at compile time (a negative array size fails the build) */
#define SLOT_AT(field, index) typedef char slot_##field[offsetof(OrtApi, field) == (index) * sizeof(OrtSlot) ? 1 : -1]
SLOT_AT(CreateCustomOpDomain, 26);
SLOT_AT(GetTensorMutableData, 51);
SLOT_AT(GetDimensionsCount, 61);
SLOT_AT(GetTensorTypeAndShape, 65);
SLOT_AT(KernelInfoGetAttribute_float, 85);
SLOT_AT(KernelContext_GetInput, 90);
SLOT_AT(ReleaseStatus, 93);
SLOT_AT(ReleaseTensorTypeAndShapeInfo, 99);

/* ---- the kernel ---- */
#define DOMAIN "ai.edgeosc"
#define OP_NAME "OscillatorAttention"
#define MAX_D_HEAD 32 /* the sums live on the stack: F <= 561 coupling features */
#define MAX_P 8
#define FEATURES(dh) (1 + (dh) + (dh) * ((dh) + 1) / 2)
#define SQRT_HALF 0.70710677f /* float32(sqrt(1/2)): the squares' weight in coupling_features */

/* Four float32 lanes (GCC's and Clang's vector extension: SSE on x86-64, NEON on aarch64). Each lane rounds as a
 * scalar float does, so the vectors change only which products a float32 sum adds in what order. */
typedef float v4 __attribute__((vector_size(16)));
#define V4(n) (((n) + 3) / 4) /* vectors that hold n floats (zero padded) */

enum { PQ, PK, PV, PR, PZ, POUT, CORE_POINTS, PRRAW = CORE_POINTS, PGRAW, PG, PGN, POINTS };
static const char *const kScales[POINTS] = {"q_scale", "k_scale", "v_scale", "r_scale", "z_scale", "out_scale",
                                            "r_raw_scale", "g_raw_scale", "g_scale", "gn_scale"};

typedef struct {
  const OrtApi *api;
  int p, quantized;          /* quantized: the core's six points */
  int has[POINTS];           /* which points the node quantizes (r_raw and the gate's: optional) */
  int gate_map;              /* attribute gate_map is "taylor2": a gated node (W = 3 d_h + 3) */
  int heads;
  float scale[POINTS];       /* int8 model: the points' scales (zero point 0) */
  float weight[MAX_P + 1];   /* a_m: (1 + cos d)^p = sum_m a_m cos m d (attention.harmonic_coefficients) */
} Kernel;

typedef union { /* a row of features or values, read as floats or as vectors */
  v4 v[V4(FEATURES(MAX_D_HEAD))];
  float f[4 * V4(FEATURES(MAX_D_HEAD))];
} Row;

/* QuantizeLinear then DequantizeLinear at zero point 0, as onnxruntime computes them, of four values at point
 * `which` (unchanged where the node does not quantize it): x / s saturated to [-128, 127] (int8; [0, 255] for g,
 * the gate's map, >= 1/2, uint8) and rounded half to even (adding and subtracting 1.5 * 2^23 rounds a float below
 * 2^22 to an integer in the default rounding mode, as rint does), times s. */
typedef int32_t v4i __attribute__((vector_size(16)));
static inline __attribute__((always_inline)) v4 point4(const Kernel *kn, int which, v4 x) {
  const float s = kn->scale[which], l = which == PG ? 0.0f : -128.0f, u = which == PG ? 255.0f : 127.0f;
  const v4 lo = {l, l, l, l}, hi = {u, u, u, u};
  const v4 big = {12582912.0f, 12582912.0f, 12582912.0f, 12582912.0f}; /* no -ffast-math: rounded, not folded */
  v4 y;
  v4i below, above;
  if (!kn->has[which]) return x;
  y = x / s;
  below = y < lo, above = y > hi; /* lanes of all ones where true */
  y = (v4)(((v4i)y & ~below) | ((v4i)lo & below));
  y = (v4)(((v4i)y & ~above) | ((v4i)hi & above));
  return (y + big - big) * s;
}
/* n values into out, zero padded to whole vectors */
static inline __attribute__((always_inline)) void load(const float *x, const int n, Row *out) {
  int i;
  for (i = 0; i < n; ++i) out->f[i] = x[i];
  while (i % 4) out->f[i++] = 0.0f;
}
/* n values at point `which` into out, zero padded to whole vectors */
static inline __attribute__((always_inline)) void points(const Kernel *kn, int which, const float *x, const int n,
                                                         Row *out) {
  int i;
  load(x, n, out);
  for (i = 0; i < V4(n); ++i) out->v[i] = point4(kn, which, out->v[i]);
}
/* n values of an array at point `which`, in place (a tensor at once: the divisions pipeline) */
static void point_array(const Kernel *kn, int which, float *x, size_t n) {
  size_t i;
  v4 y;
  if (!kn->has[which]) return;
  for (i = 0; i + 4 <= n; i += 4) {
    memcpy(&y, x + i, sizeof y);
    y = point4(kn, which, y);
    memcpy(x + i, &y, sizeof y);
  }
  for (; i < n; ++i) x[i] = point4(kn, which, (v4){x[i], 0.0f, 0.0f, 0.0f})[0];
}

/* phi(x) of coupling_features, [1, x', x'_a x'_b (a <= b, squares times sqrt(1/2))] with x' = x d_h^-1/4 (x at its
 * point already), zero padded to whole vectors */
static inline __attribute__((always_inline)) void coupling_features(const float *x, const int dh, float root,
                                                                    Row *phi) {
  Row row;
  float *const xs = row.f;
  int a, b, f = 1 + dh;
  load(x, dh, &row);
  phi->f[0] = 1.0f;
  for (a = 0; a < dh; ++a) phi->f[1 + a] = xs[a] = xs[a] * root;
#pragma GCC unroll 8 /* straight-line code for the models' heads (dh a constant 4 or 8) */
  for (a = 0; a < dh; ++a) {
    phi->f[f++] = xs[a] * xs[a] * SQRT_HALF;
#pragma GCC unroll 8
    for (b = a + 1; b < dh; ++b) phi->f[f++] = xs[a] * xs[b];
  }
  while (f % 4) phi->f[f++] = 0.0f;
}

/* [cos m t, sin m t for m = 1..p] of x = (cos t, sin t) as the powers (x_0 + i x_1)^m (attention._harmonics) */
static inline __attribute__((always_inline)) void harmonics(float c, float s, const int p, float *out) {
  float cm = c, sm = s, t;
  int m;
  for (m = 0; m < p; ++m) {
    out[2 * m] = cm, out[2 * m + 1] = sm;
    t = cm * c - sm * s;
    sm = sm * c + cm * s;
    cm = t;
  }
}

/* The keys' anchors, n raw ones [n, 2] at point r_raw, as unit vectors at point r, in place: LpNormalization's
 * x / |x| (the squares summed in order), 0 where |x| = 0 */
static void anchors(const Kernel *kn, float *r, size_t n) {
  size_t i;
  point_array(kn, PRRAW, r, 2 * n);
  for (i = 0; i < n; ++i) {
    const float norm = sqrtf(r[2 * i] * r[2 * i] + r[2 * i + 1] * r[2 * i + 1]);
    r[2 * i] = norm != 0.0f ? r[2 * i] / norm : 0.0f;
    r[2 * i + 1] = norm != 0.0f ? r[2 * i + 1] / norm : 0.0f;
  }
  point_array(kn, PR, r, 2 * n);
}
/* The key gates of `heads` heads of T raw values each at point g_raw: g = taylor2 as ((x + 1)^2 + 1) / 2 (the body's
 * float32 operations) at point g, then each head's unit vector over its keys at point gn, in place */
static void gates(const Kernel *kn, float *g, size_t heads, size_t T) {
  size_t h, i, n = heads * T;
  point_array(kn, PGRAW, g, n);
  for (i = 0; i < n; ++i) {
    const float y = g[i] + 1.0f;
    g[i] = (y * y + 1.0f) * 0.5f;
  }
  point_array(kn, PG, g, n);
  for (h = 0; h < heads; ++h) {
    float *gh = g + h * T, norm = 0.0f;
    for (i = 0; i < T; ++i) norm += gh[i] * gh[i];
    norm = sqrtf(norm);
    for (i = 0; i < T; ++i) gh[i] = norm != 0.0f ? gh[i] / norm : 0.0f;
  }
  point_array(kn, PGN, g, n);
}
/* One head: q, k [T, dh], v [T, dv], unit anchors r [T, 2] and unit gates g [T] (or NULL), all at their points -> out
 * [T, dv], rows `stride` apart (oscillator_attention_linear): the
 * coupling's sums S = sum_j phi(k_j) r_j (columns S0, S1) and the readout's M = sum_j g_j psi(r_j) [v_j, 1]
 * (rows of d_v numerators, and Mden) over the keys, then each query against them. z = unit(phi(q)^T S) needs no
 * division by phi(q)^T sum_j phi(k_j), a positive factor (taylor2 >= 1/2), which the body leaves out as well.
 * Inlined with constant dh, dv and p for the models' heads (head() below), which unrolls them. */
static inline __attribute__((always_inline)) void head_of(const Kernel *kn, int T, const float *q, const float *k,
                                                          const float *v, const float *r, const float *g, float *out,
                                                          size_t stride, const int dh, const int dv, const int p) {
  const int NF = V4(FEATURES(dh)), NV = V4(dv), R = 2 * p + 1;
  const float root = powf((float)dh, -0.25f);
  v4 S0[V4(FEATURES(MAX_D_HEAD))], S1[V4(FEATURES(MAX_D_HEAD))];
  v4 M[2 * MAX_P + 1][V4(MAX_D_HEAD)];
  float Mden[2 * MAX_P + 1], psi[2 * MAX_P + 1], r0, r1;
  Row phi, x, pt;
  int i, n, m, d;
  for (n = 0; n < NF; ++n) S0[n] = S1[n] = (v4){0.0f, 0.0f, 0.0f, 0.0f};
  for (m = 0; m < R; ++m) {
    for (n = 0; n < NV; ++n) M[m][n] = (v4){0.0f, 0.0f, 0.0f, 0.0f};
    Mden[m] = 0.0f;
  }
  for (i = 0; i < T; ++i) { /* the keys */
    coupling_features(k + (size_t)i * dh, dh, root, &phi);
    r0 = r[2 * (size_t)i], r1 = r[2 * (size_t)i + 1];
    for (n = 0; n < NF; ++n) {
      S0[n] += phi.v[n] * r0;
      S1[n] += phi.v[n] * r1;
    }
    psi[0] = 1.0f;
    harmonics(r0, r1, p, psi + 1);
    if (g)
      for (m = 0; m < R; ++m) psi[m] *= g[i];
    load(v + (size_t)i * dv, dv, &x);
    for (m = 0; m < R; ++m) {
      for (n = 0; n < NV; ++n) M[m][n] += psi[m] * x.v[n];
      Mden[m] += psi[m];
    }
  }
  for (m = 1; m < R; ++m) { /* the readout's weights a_m, once per head rather than per query */
    for (n = 0; n < NV; ++n) M[m][n] *= kn->weight[(m + 1) / 2];
    Mden[m] *= kn->weight[(m + 1) / 2];
  }
  for (i = 0; i < T; ++i) { /* the queries: z = unit(phi(q)^T S), out = psi(z)^T M / psi(z)^T m */
    v4 a0 = {0.0f, 0.0f, 0.0f, 0.0f}, a1 = a0;
    float h0, h1, den, z[2] = {0.0f, 0.0f}, sq;
    coupling_features(q + (size_t)i * dh, dh, root, &phi);
    for (n = 0; n < NF; ++n) {
      a0 += phi.v[n] * S0[n];
      a1 += phi.v[n] * S1[n];
    }
    h0 = (a0[0] + a0[1]) + (a0[2] + a0[3]);
    h1 = (a1[0] + a1[1]) + (a1[2] + a1[3]);
    sq = h0 * h0 + h1 * h1; /* unit(h) as LpNormalization: 0 where |h| = 0 */
    if (sq > 0.0f) {
      const float inv = 1.0f / sqrtf(sq);
      z[0] = h0 * inv, z[1] = h1 * inv;
    }
    points(kn, PZ, z, 2, &pt);
    psi[0] = kn->weight[0];
    harmonics(pt.f[0], pt.f[1], p, psi + 1);
    for (n = 0; n < NV; ++n) x.v[n] = (v4){0.0f, 0.0f, 0.0f, 0.0f}; /* the numerators */
    den = 0.0f;
    for (m = 0; m < R; ++m) {
      for (n = 0; n < NV; ++n) x.v[n] += psi[m] * M[m][n];
      den += psi[m] * Mden[m];
    }
    for (d = 0; d < dv; ++d) x.f[d] = den > FLT_MIN ? x.f[d] / den : 0.0f;
    points(kn, POUT, x.f, dv, &pt);
    for (d = 0; d < dv; ++d) out[(size_t)i * stride + d] = pt.f[d];
  }
}

static void head(const Kernel *kn, int T, int dh, int dv, const float *q, const float *k, const float *v,
                 const float *r, const float *g, float *out, size_t stride) {
  if (dh == 8 && dv == 8 && kn->p == 4) /* the wide head: d_model 32, 4 heads, p 4 (the pipeline's model) */
    head_of(kn, T, q, k, v, r, g, out, stride, 8, 8, 4);
  else if (dh == 4 && dv == 4 && kn->p == 4) /* the narrow head: 8 heads at d_model 32 (d_head 4) */
    head_of(kn, T, q, k, v, r, g, out, stride, 4, 4, 4);
  else
    head_of(kn, T, q, k, v, r, g, out, stride, dh, dv, kn->p);
}

static OrtStatus *fail(const OrtApi *api, const char *what) {
  char msg[320];
  snprintf(msg, sizeof msg, "edgeosc_ort_op: " DOMAIN "::" OP_NAME ": %s", what);
  return api->CreateStatus(ORT_INVALID_ARGUMENT, msg);
}

/* an attribute's value, or 0 where the node has none (the status is dropped) */
static int attr_float(const OrtApi *api, const OrtKernelInfo *info, const char *name, float *out) {
  OrtStatus *st = api->KernelInfoGetAttribute_float(info, name, out);
  if (st) api->ReleaseStatus(st);
  return st == NULL;
}

static int attr_int(const OrtApi *api, const OrtKernelInfo *info, const char *name, int64_t *out) {
  OrtStatus *st = api->KernelInfoGetAttribute_int64(info, name, out);
  if (st) api->ReleaseStatus(st);
  return st == NULL;
}

static int attr_is(const OrtApi *api, const OrtKernelInfo *info, const char *name, const char *want) {
  char buf[32] = {0};
  size_t size = sizeof buf - 1; /* the value and its terminating NUL, which onnxruntime writes */
  OrtStatus *st = api->KernelInfoGetAttribute_string(info, name, buf, &size);
  if (st) { /* absent, or longer than any value this kernel takes */
    api->ReleaseStatus(st);
    return 0;
  }
  return strcmp(buf, want) == 0;
}

/* whether the node has a string attribute of that name, whatever its value */
static int attr_is_string(const OrtApi *api, const OrtKernelInfo *info, const char *name) {
  size_t size = 0; /* a NULL buffer asks for the size: no error unless the attribute is absent */
  OrtStatus *st = api->KernelInfoGetAttribute_string(info, name, NULL, &size);
  if (st) api->ReleaseStatus(st);
  return st == NULL && size > 0;
}

static OrtStatus *create_kernel(const OrtCustomOp *op, const OrtApi *api, const OrtKernelInfo *info, void **out) {
  Kernel kn;
  int64_t p = 0, d_osc = 0, heads = 0;
  float eps = 0.0f;
  int n, m;
  (void)op;
  *out = NULL;
  if (!attr_is(api, info, "form", "linear"))
    return fail(api, "the kernel runs the linear core only (attribute form \"linear\")");
  if (!attr_is(api, info, "positive", "taylor2")) return fail(api, "the linear core needs positive \"taylor2\"");
  if (!attr_int(api, info, "d_osc", &d_osc) || d_osc != 2) return fail(api, "the kernel runs d_osc 2 only");
  if (!attr_int(api, info, "p", &p) || p < 1 || p > MAX_P) return fail(api, "p must be 1..8");
  /* eps is the torch core's cut-off; the body's unit vectors are LpNormalization's, 0 only for a zero vector */
  if (!attr_float(api, info, "eps", &eps) || !(eps >= 0.0f)) return fail(api, "needs attribute eps >= 0");
  if (!attr_is(api, info, "anchors", "projected"))
    return fail(api, "the kernel runs projected anchors (attribute anchors \"projected\")");
  memset(&kn, 0, sizeof kn);
  if (!attr_int(api, info, "heads", &heads) || heads < 1 || heads > 4096) return fail(api, "heads must be 1..4096");
  kn.heads = (int)heads;
  kn.gate_map = attr_is(api, info, "gate_map", "taylor2");
  if (!kn.gate_map && attr_is_string(api, info, "gate_map"))
    return fail(api, "the key gate's map must be \"taylor2\" (attribute gate_map)");
  kn.api = api, kn.p = (int)p;
  for (n = 0; n < POINTS; ++n) kn.has[n] = attr_float(api, info, kScales[n], &kn.scale[n]);
  for (n = 0; n < CORE_POINTS; ++n) kn.quantized += kn.has[n];
  if (kn.quantized && kn.quantized != CORE_POINTS)
    return fail(api, "an int8 node needs all of q_scale k_scale v_scale r_scale z_scale out_scale");
  if (kn.quantized && !kn.has[PRRAW]) return fail(api, "an int8 node needs r_raw_scale");
  if (kn.quantized && kn.gate_map && !kn.has[PG])
    return fail(api, "an int8 gated node needs g_raw_scale g_scale gn_scale");
  if ((kn.has[PGRAW] + kn.has[PG] + kn.has[PGN]) % 3 != 0 || (!kn.quantized && (kn.has[PRRAW] || kn.has[PGRAW])))
    return fail(api, "an int8 node's gate needs all of g_raw_scale g_scale gn_scale (and a float node none)");
  for (n = 0; n < POINTS; ++n)
    if (kn.has[n] && (!(kn.scale[n] > 0.0f) || isinf(kn.scale[n])))
      return fail(api, "a point's scale is not positive and finite");
  kn.quantized = kn.quantized == CORE_POINTS;
  for (m = 0; m <= kn.p; ++m) { /* C(2p, p - m) (x2 for m > 0) / 2^p */
    double c = 1.0;
    int j;
    for (j = 1; j <= kn.p - m; ++j) c = c * (2 * kn.p - (kn.p - m) + j) / j;
    kn.weight[m] = (float)(c * (m ? 2.0 : 1.0) / (double)(1 << kn.p));
  }
  {
    Kernel *heap = (Kernel *)malloc(sizeof kn);
    if (!heap) return api->CreateStatus(ORT_FAIL, "edgeosc_ort_op: out of memory");
    *heap = kn;
    *out = heap;
  }
  return NULL;
}

/* The heads apart: x [B, T, H, W] -> q, k, v [B H, T, dh], r [B H, T, 2], g [B H, T] (gated) */
static inline __attribute__((always_inline)) void split(const float *x, size_t B, size_t T, size_t H, const size_t dh,
                                                        int gated, float *q, float *k, float *v, float *r, float *g) {
  const size_t W = 3 * dh + 2 + (size_t)gated;
  size_t b, t, h;
  for (b = 0; b < B; ++b)
    for (t = 0; t < T; ++t)
      for (h = 0; h < H; ++h) {
        const float *src = x + ((b * T + t) * H + h) * W;
        const size_t row = (b * H + h) * T + t;
        memcpy(q + row * dh, src, dh * sizeof *q);
        memcpy(k + row * dh, src + dh, dh * sizeof *k);
        memcpy(v + row * dh, src + 2 * dh, dh * sizeof *v);
        r[2 * row] = src[3 * dh], r[2 * row + 1] = src[3 * dh + 1];
        if (gated) g[row] = src[3 * dh + 2];
      }
}

/* an input's dims (rank 3) into dims; NULL or an error status */
static OrtStatus *dims_of(const OrtApi *api, const OrtValue *value, int64_t *dims) {
  OrtTensorTypeAndShapeInfo *info = NULL;
  size_t rank = 0;
  OrtStatus *st = api->GetTensorTypeAndShape(value, &info);
  if (!st) st = api->GetDimensionsCount(info, &rank);
  if (!st && rank != 3) {
    api->ReleaseTensorTypeAndShapeInfo(info);
    return fail(api, "input x must be [B, T, H W]");
  }
  if (!st) st = api->GetDimensions(info, dims, 3);
  if (info) api->ReleaseTensorTypeAndShapeInfo(info);
  return st;
}

static OrtStatus *compute(void *kernel, OrtKernelContext *ctx) {
  const Kernel *kn = (const Kernel *)kernel;
  const OrtApi *api = kn->api;
  const OrtValue *in = NULL;
  const float *x = NULL;
  int64_t dims[3], width;
  size_t count = 0;
  OrtValue *out = NULL;
  float *y = NULL;
  OrtStatus *st = api->KernelContext_GetInputCount(ctx, &count);
  if (st) return st;
  if (count != 1) return fail(api, "takes one input, x");
  if ((st = api->KernelContext_GetInput(ctx, 0, &in)) != NULL) return st;
  if ((st = dims_of(api, in, dims)) != NULL) return st;
  if ((st = api->GetTensorMutableData((OrtValue *)in, (void **)&x)) != NULL) return st;
  width = dims[2] / kn->heads - 2 - kn->gate_map; /* 3 d_h */
  if (dims[2] % kn->heads || width % 3 || width < 3 || width > 3 * MAX_D_HEAD)
    return fail(api, "x's last dimension must be heads (3 d_h + 2 (+ 1 with the gate)), d_h 1..32");
  dims[2] = kn->heads * (width / 3); /* out: [B, T, H d_v] */
  if ((st = api->KernelContext_GetOutput(ctx, 0, dims, 3, &out)) != NULL) return st;
  if ((st = api->GetTensorMutableData(out, (void **)&y)) != NULL) return st;
  {
    const int T = (int)dims[1], dh = (int)(width / 3), H = kn->heads;
    const size_t heads = (size_t)dims[0] * (size_t)H, rows = heads * (size_t)T;
    size_t b, h;
    float *q, *k, *v, *r, *g; /* every head's inputs, [B H, T, .], at their points: q, k, v, unit anchors and gates */
    if (!(q = (float *)malloc(rows * (size_t)(3 * dh + 3) * sizeof *q)))
      return api->CreateStatus(ORT_FAIL, "edgeosc_ort_op: out of memory");
    k = q + rows * dh, v = k + rows * dh, r = v + rows * dh, g = r + rows * 2;
    if (dh == 8) /* the models' heads: copies of a constant size, inlined */
      split(x, (size_t)dims[0], (size_t)T, (size_t)H, 8, kn->gate_map, q, k, v, r, g);
    else if (dh == 4)
      split(x, (size_t)dims[0], (size_t)T, (size_t)H, 4, kn->gate_map, q, k, v, r, g);
    else
      split(x, (size_t)dims[0], (size_t)T, (size_t)H, (size_t)dh, kn->gate_map, q, k, v, r, g);
    point_array(kn, PQ, q, rows * dh), point_array(kn, PK, k, rows * dh), point_array(kn, PV, v, rows * dh);
    anchors(kn, r, rows);
    if (kn->gate_map) gates(kn, g, heads, (size_t)T);
    for (b = 0; b < (size_t)dims[0]; ++b)
      for (h = 0; h < (size_t)H; ++h) {
        const size_t at = (b * H + h) * T;
        head(kn, T, dh, dh, q + at * dh, k + at * dh, v + at * dh, r + at * 2, kn->gate_map ? g + at : NULL,
             y + b * T * H * dh + h * dh, (size_t)H * dh);
      }
    free(q);
  }
  return NULL;
}

static void destroy(void *kernel) { free(kernel); }
static const char *op_name(const OrtCustomOp *op) { (void)op; return OP_NAME; }
static const char *op_provider(const OrtCustomOp *op) { (void)op; return NULL; /* CPU */ }
static int op_type(const OrtCustomOp *op, size_t i) { (void)op, (void)i; return ONNX_FLOAT; }
static size_t op_inputs(const OrtCustomOp *op) { (void)op; return 1; }
static size_t op_outputs(const OrtCustomOp *op) { (void)op; return 1; }
static int op_input_kind(const OrtCustomOp *op, size_t i) { (void)op, (void)i; return IO_REQUIRED; }
static int op_output_kind(const OrtCustomOp *op, size_t i) { (void)op, (void)i; return IO_REQUIRED; }
static int op_memory(const OrtCustomOp *op, size_t i) { (void)op, (void)i; return MEM_DEFAULT; }

static const OrtCustomOp kOp = {
    EDGEOSC_ORT_API, NULL, op_name, op_provider, op_type, op_inputs, op_type, op_outputs, NULL, destroy,
    op_input_kind, op_output_kind, op_memory, NULL, NULL, NULL, NULL, create_kernel, compute};

/* The entry point onnxruntime looks up: adds the ai.edgeosc domain with OscillatorAttention to the session's
 * options. The domain lives as long as the process (sessions keep pointing at it). */
OrtStatus *RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *base);
OrtStatus *RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *base) {
  static OrtCustomOpDomain *domain = NULL;
  const OrtApi *api = base->GetApi(EDGEOSC_ORT_API);
  OrtStatus *st;
  if (!api) { /* an older runtime: its first API version still creates the error */
    char msg[200];
    const OrtApi *old = base->GetApi(1);
    snprintf(msg, sizeof msg, "edgeosc_ort_op: onnxruntime %s serves no C API version %u (needs onnxruntime >= 1.16)",
             base->GetVersionString(), EDGEOSC_ORT_API);
    return old ? old->CreateStatus(ORT_FAIL, msg) : NULL;
  }
  if (!domain) {
    OrtCustomOpDomain *made = NULL;
    if ((st = api->CreateCustomOpDomain(DOMAIN, &made)) != NULL) return st;
    if ((st = api->CustomOpDomain_Add(made, &kOp)) != NULL) return st;
    domain = made;
  }
  return api->AddCustomOpDomain(options, domain);
}
