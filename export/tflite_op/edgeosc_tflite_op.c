/* EdgeOscAttention: the oscillator attention core as one TFLite custom op (tflite-runtime 2.14).
 *
 * Inputs q [.., H, T, dh], k [.., H, T, dh], v [.., H, T, dv], r [.., H, T, d_osc] (int8, per-tensor),
 * optionally followed by the three int8 [256] tables (w, c, inv) as constant inputs, and with the key gate
 * (options pow_* and gated_*) by the unit gates g [.., H, 1, T]; output out [.., H, T, dv].
 * Custom options: a flexbuffer map (edgeosc/export/tflite/custom_op.py, custom_options;
 * export/edgeosc_attention_tflite.md). The option point "sum" is the model's "csum".
 * Prepare computes every requantization multiplier from the float32 scales exactly as the builtin ops'
 * Prepare would, so invoke (edgeosc_oscillator_core_int8) is bit-exact with the builtin chain.
 * Option form "linear" runs the linear core instead (edgeosc_linear_core_int8; d_osc 2, taylor2): inputs q, k,
 * v, r (1/128, 0) and optionally the unit gates g [.., H, 1, T]; options p (1..8, required), causal, window
 * and turn (the anchors' turn a frame per head, uint16 little-endian steps of 2^-16 turns: a blob); no points,
 * no tables: Prepare derives its two constants from the tensors' scales, as edgeosc/integer/reference.py
 * linear_quant_from_scales does. With option stream 1 (a window) the op is one step of a stream
 * (edgeosc_linear_stream_int8): after q, k, v, r (+ g) it takes the stream's state, clock int32 [3], sums int32
 * [.., H, words] and kept int8 [.., H, W, d_head + d_value + 3], and gives out and the next state, in that order.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgeosc_attention.h"

#include "tflite_abi.h"

/* ---- a minimal flexbuffer reader (little-endian; maps of scalars, strings, blobs, int vectors) ---- */
enum { FBT_INT = 1, FBT_UINT = 2, FBT_FLOAT = 3, FBT_STRING = 5, FBT_INDIRECT_INT = 6,
       FBT_INDIRECT_UINT = 7, FBT_INDIRECT_FLOAT = 8, FBT_MAP = 9, FBT_VECTOR = 10,
       FBT_VECTOR_INT = 11, FBT_VECTOR_UINT = 12, FBT_BLOB = 25, FBT_BOOL = 26 };

typedef struct {
  const uint8_t *begin, *end;
} Flex;

typedef struct {
  const uint8_t *p; /* the value's slot in its parent */
  int width;        /* the parent's byte width */
  int type, child_width;
} FlexRef;

static int fx_ok(const Flex *f, const uint8_t *p, size_t n) {
  return p >= f->begin && p <= f->end && (size_t)(f->end - p) >= n;
}

static uint64_t fx_u(const uint8_t *p, int w) {
  uint64_t v = 0;
  int i;
  for (i = w - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

static int64_t fx_i(const uint8_t *p, int w) {
  const uint64_t u = fx_u(p, w);
  const int bits = 8 * w;
  return bits == 64 || !(u >> (bits - 1)) ? (int64_t)u : (int64_t)(u - ((uint64_t)1 << bits));
}

static double fx_f(const uint8_t *p, int w) {
  if (w == 4) {
    const uint32_t u = (uint32_t)fx_u(p, 4);
    float f;
    memcpy(&f, &u, 4);
    return f;
  } else {
    const uint64_t u = fx_u(p, 8);
    double d;
    memcpy(&d, &u, 8);
    return d;
  }
}

/* Follows an offset slot; NULL if it leaves the buffer. */
static const uint8_t *fx_deref(const Flex *f, const FlexRef *r) {
  const uint64_t off = fx_u(r->p, r->width);
  if (off > (uint64_t)(r->p - f->begin)) return NULL;
  return r->p - off;
}

static int fx_root(const Flex *f, FlexRef *r) {
  const size_t len = (size_t)(f->end - f->begin);
  int w;
  if (len < 3) return 0;
  w = f->end[-1];
  if (w != 1 && w != 2 && w != 4 && w != 8) return 0;
  if (len < (size_t)w + 2) return 0;
  r->p = f->end - 2 - w;
  r->width = w;
  r->type = f->end[-2] >> 2;
  r->child_width = 1 << (f->end[-2] & 3);
  return 1;
}

/* Looks key up in the map m; returns 1 and fills out if present. */
static int fx_lookup(const Flex *f, const FlexRef *m, const char *key, FlexRef *out) {
  const uint8_t *data, *keys;
  uint64_t n, i, keys_width;
  const int w = m->child_width;
  if (m->type != FBT_MAP || !(data = fx_deref(f, m)) || !fx_ok(f, data - 3 * w, 3 * w)) return 0;
  n = fx_u(data - w, w);
  keys_width = fx_u(data - 2 * w, w);
  {
    const FlexRef kr = {data - 3 * w, w, 0, 0};
    keys = fx_deref(f, &kr);
  }
  if (!keys || (keys_width != 1 && keys_width != 2 && keys_width != 4 && keys_width != 8) ||
      !fx_ok(f, data, n * w + n) || !fx_ok(f, keys, n * keys_width))
    return 0;
  for (i = 0; i < n; ++i) {
    const FlexRef kr = {keys + i * keys_width, (int)keys_width, 0, 0};
    const uint8_t *s = fx_deref(f, &kr);
    const size_t len = strlen(key);
    if (s && fx_ok(f, s, len + 1) && !memcmp(s, key, len + 1)) {
      const uint8_t packed = data[n * w + i];
      out->p = data + i * w;
      out->width = w;
      out->type = packed >> 2;
      out->child_width = 1 << (packed & 3);
      return 1;
    }
  }
  return 0;
}

static int fx_number(const Flex *f, const FlexRef *r, double *v) {
  const uint8_t *t;
  switch (r->type) {
    case FBT_INT: case FBT_BOOL: *v = (double)fx_i(r->p, r->width); return 1;
    case FBT_UINT: *v = (double)fx_u(r->p, r->width); return 1;
    case FBT_FLOAT: if (r->width < 4) return 0; *v = fx_f(r->p, r->width); return 1;
    case FBT_INDIRECT_INT: case FBT_INDIRECT_UINT: case FBT_INDIRECT_FLOAT:
      if (!(t = fx_deref(f, r)) || !fx_ok(f, t, r->child_width)) return 0;
      if (r->type == FBT_INDIRECT_FLOAT) {
        if (r->child_width < 4) return 0;
        *v = fx_f(t, r->child_width);
      } else {
        *v = r->type == FBT_INDIRECT_INT ? (double)fx_i(t, r->child_width) : (double)fx_u(t, r->child_width);
      }
      return 1;
    default: return 0;
  }
}

/* A string or blob: pointer and size. */
static int fx_bytes(const Flex *f, const FlexRef *r, const uint8_t **s, size_t *n) {
  const uint8_t *t;
  if ((r->type != FBT_STRING && r->type != FBT_BLOB) || !(t = fx_deref(f, r)) ||
      !fx_ok(f, t - r->child_width, r->child_width))
    return 0;
  *n = (size_t)fx_u(t - r->child_width, r->child_width);
  *s = t;
  return fx_ok(f, t, *n);
}

/* 256 int8 entries from a blob, a typed int vector or an untyped vector of ints. */
static int fx_table(const Flex *f, const FlexRef *r, int8_t *table) {
  const uint8_t *t;
  size_t n, i;
  const int w = r->child_width;
  if (r->type == FBT_BLOB) {
    if (!fx_bytes(f, r, &t, &n) || n != 256) return 0;
    memcpy(table, t, 256);
    return 1;
  }
  if (r->type != FBT_VECTOR_INT && r->type != FBT_VECTOR_UINT && r->type != FBT_VECTOR) return 0;
  if (!(t = fx_deref(f, r)) || !fx_ok(f, t - w, w) || (n = (size_t)fx_u(t - w, w)) != 256 ||
      !fx_ok(f, t, n * w + (r->type == FBT_VECTOR ? n : 0)))
    return 0;
  for (i = 0; i < n; ++i) {
    const int64_t x = r->type == FBT_VECTOR_UINT ? (int64_t)fx_u(t + i * w, w) : fx_i(t + i * w, w);
    if (r->type == FBT_VECTOR && (t[n * w + i] >> 2) != FBT_INT) return 0;
    if (x < -128 || x > 127) return 0;
    table[i] = (int8_t)x;
  }
  return 1;
}

/* ---- the op ---- */
/* BEGIN GENERATED by `python -m edgeosc.integer.schema --write-header`: edit edgeosc/integer/schema.py */
enum { POINTS = 8 };
static const char *const kPoints[POINTS] = {"qk", "w", "h", "zr", "c", "sum", "inv", "a"}; /* sum: "csum" */
enum { P_QK, P_W, P_H, P_ZR, P_C, P_SUM, P_INV, P_A };
/* END GENERATED */

typedef struct {
  float scale[POINTS];
  int32_t zero_point[POINTS];
  int8_t tables[3][256];
  int has_tables;
  int32_t heads, d_osc; /* 0 = unchecked */
  int32_t ones;
  float ones_scale;
  int sum_fc;       /* step 7's multiplier as FULLY_CONNECTED computes it (else BATCH_MATMUL) */
  int mul_double;   /* MUL's multiplier in double (TFLite Micro) rather than float32 (TFLite) */
  int gated;        /* the key gate: options pow_* and gated_*, the unit gates g as the last input */
  float pow_scale, gated_scale;
  EdgeoscOscParams params;
  EdgeoscGateParams gate;
  int8_t *scratch;
  int linear;       /* option form "linear": the linear core, its parameters and one head's state */
  EdgeoscLinearParams lin;
  int32_t *state;
  int stream;       /* option stream: one step of a stream, its state in and out */
  int n_turn;       /* option turn: the rates given (one a head), and per flattened head in prepare */
  int32_t turn_option[64], *turn;
  const char *error;
} OpData;

static void quantize_multiplier(double real, EdgeoscRequant *rq) {
  int shift = 0;
  int64_t q;
  if (real == 0.0) {
    rq->multiplier = 0;
    rq->shift = 0;
    return;
  }
  q = (int64_t)round(frexp(real, &shift) * (double)(1LL << 31));
  if (q == (1LL << 31)) {
    q /= 2;
    ++shift;
  }
  if (shift < -31) {
    shift = 0;
    q = 0;
  }
  rq->multiplier = (int32_t)q;
  rq->shift = shift;
}

/* Real multipliers as each Prepare computes them; assigning to a float drops any excess precision. */
static double matmul_real(float a, float b, float out) { /* BATCH_MATMUL: float32 product */
  const float p = a * b;
  return (double)p / (double)out;
}
static double double_real(float a, float b, float out) { /* FULLY_CONNECTED; TFLite Micro's MUL */
  return (double)a * (double)b / (double)out;
}
static double float_real(float a, float b, float out) { /* TFLite's MUL: all in float32 */
  const float p = a * b, r = p / out;
  return r;
}

static int rounding_modes(const char *s, size_t n, OpData *d) {
  /* integer.reference.TARGETS that need no float (not ai-edge-litert's XNNPACK or reference FC) */
  static const struct { const char *name; int mm, fc, mul, mul_double; } presets[] = {
      {"tflite-runtime", EDGEOSC_ROUND_UP, EDGEOSC_ROUND_UP, EDGEOSC_ROUND_AWAY, 0},
      {"reference", EDGEOSC_ROUND_AWAY, EDGEOSC_ROUND_AWAY, EDGEOSC_ROUND_AWAY, 0},
      {"tflite-micro", EDGEOSC_ROUND_AWAY, EDGEOSC_ROUND_AWAY, EDGEOSC_ROUND_AWAY, 1},
      {"ai-edge-litert-nodelegate", EDGEOSC_ROUND_AWAY, EDGEOSC_ROUND_AWAY, EDGEOSC_ROUND_AWAY, 0}};
  size_t i;
  for (i = 0; i < sizeof presets / sizeof presets[0]; ++i) {
    if (strlen(presets[i].name) == n && !memcmp(presets[i].name, s, n)) {
      d->params.round_matmul = presets[i].mm;
      d->params.round_sum = d->sum_fc ? presets[i].fc : presets[i].mm;
      d->params.round_mul = presets[i].mul;
      d->mul_double = presets[i].mul_double;
      return 1;
    }
  }
  return 0;
}

/* An optional number in [lo, hi]: 1 if absent (value unchanged) or valid, 0 if malformed. */
static int opt_number(const Flex *f, const FlexRef *root, const char *key, double lo, double hi, double *x) {
  FlexRef v;
  double y;
  if (!fx_lookup(f, root, key, &v)) return 1;
  if (!fx_number(f, &v, &y) || !(y >= lo && y <= hi)) return 0;
  *x = y;
  return 1;
}

static int parse_linear(OpData *d, const Flex *f, const FlexRef *root) {
  double p = 0, causal = 0, window = 0, heads = 0, d_osc = 2, stream = 0;
  FlexRef v;
  const uint8_t *t;
  size_t n, i;
  if (!opt_number(f, root, "p", 1, 8, &p) || !p || !opt_number(f, root, "causal", 0, 1, &causal) ||
      !opt_number(f, root, "window", 0, 1 << 20, &window) || (window && !causal) ||
      !opt_number(f, root, "heads", 1, 1 << 20, &heads) || !opt_number(f, root, "d_osc", 2, 2, &d_osc) ||
      !opt_number(f, root, "stream", 0, 1, &stream) || (stream && !window))
    return 0;
  if (fx_lookup(f, root, "turn", &v)) { /* uint16 little-endian, one a head */
    if (v.type != FBT_BLOB || !fx_bytes(f, &v, &t, &n) || !n || n % 2 || n / 2 > 64) return 0;
    for (i = 0; i < n / 2; ++i) d->turn_option[i] = t[2 * i] | (int32_t)t[2 * i + 1] << 8;
    d->n_turn = (int)(n / 2);
  }
  d->stream = stream != 0;
  d->linear = 1;
  d->lin.p = (int32_t)p;
  d->lin.causal = (int32_t)causal;
  d->lin.window = (int32_t)window;
  d->heads = (int32_t)heads;
  return 1;
}

static int parse_options(OpData *d, const uint8_t *buf, size_t len) {
  const Flex f = {buf, buf + len};
  FlexRef root, v;
  char key[32];
  double x, ones = 1, ones_scale = 1, heads = 0, d_osc = 0;
  const uint8_t *s;
  size_t n;
  int i;
  static const char *const table_keys[3] = {"table_w", "table_c", "table_inv"};
  if (!buf || !fx_root(&f, &root) || root.type != FBT_MAP) return 0;
  if (fx_lookup(&f, &root, "form", &v)) {
    if (!fx_bytes(&f, &v, &s, &n)) return 0;
    if (n == 6 && !memcmp(s, "linear", 6)) return parse_linear(d, &f, &root);
    if (!(n == 6 && !memcmp(s, "direct", 6))) return 0;
  }
  for (i = 0; i < POINTS; ++i) {
    x = -1;
    snprintf(key, sizeof key, "%s_scale", kPoints[i]);
    if (!opt_number(&f, &root, key, 1e-30, 1e30, &x) || x < 0) return 0; /* required */
    d->scale[i] = (float)x;
    x = 0;
    snprintf(key, sizeof key, "%s_zero_point", kPoints[i]);
    if (!opt_number(&f, &root, key, -128, 127, &x)) return 0;
    d->zero_point[i] = (int32_t)x;
  }
  d->has_tables = 1;
  for (i = 0; i < 3; ++i) {
    if (!fx_lookup(&f, &root, table_keys[i], &v)) d->has_tables = 0;
    else if (!fx_table(&f, &v, d->tables[i])) return 0;
  }
  if (!opt_number(&f, &root, "ones", -128, 127, &ones) ||
      !opt_number(&f, &root, "ones_scale", 1e-30, 1e30, &ones_scale) ||
      !opt_number(&f, &root, "heads", 1, 1 << 20, &heads) ||
      !opt_number(&f, &root, "d_osc", 1, 1 << 20, &d_osc))
    return 0;
  d->ones = (int32_t)ones;
  d->ones_scale = (float)ones_scale;
  d->heads = (int32_t)heads;
  d->d_osc = (int32_t)d_osc;
  if (fx_lookup(&f, &root, "sum_op", &v)) {
    if (!fx_bytes(&f, &v, &s, &n)) return 0;
    if (n == 15 && !memcmp(s, "fully_connected", 15)) d->sum_fc = 1;
    else if (!(n == 12 && !memcmp(s, "batch_matmul", 12))) return 0;
  }
  x = -1;
  if (!opt_number(&f, &root, "gated_scale", 1e-30, 1e30, &x)) return 0;
  if ((d->gated = x > 0)) {
    d->gated_scale = (float)x;
    x = -1;
    if (!opt_number(&f, &root, "pow_scale", 1e-30, 1e30, &x) || x < 0) return 0; /* required with gated_scale */
    d->pow_scale = (float)x;
    x = 0;
    if (!opt_number(&f, &root, "pow_zero_point", -128, 127, &x)) return 0;
    d->gate.zp_pow = (int32_t)x;
    x = 0;
    if (!opt_number(&f, &root, "gated_zero_point", -128, 127, &x)) return 0;
    d->gate.zp_gated = (int32_t)x;
  }
  if (!rounding_modes("tflite-runtime", 14, d)) return 0;
  if (fx_lookup(&f, &root, "rounding", &v) && (!fx_bytes(&f, &v, &s, &n) || !rounding_modes((const char *)s, n, d)))
    return 0;
  return 1;
}

static void *op_init(TfLiteContext *context, const char *buffer, size_t length) {
  OpData *d = (OpData *)calloc(1, sizeof(OpData));
  (void)context;
  if (d && !parse_options(d, (const uint8_t *)buffer, length))
    d->error = "EdgeOscAttention: bad custom options (need <point>_scale for qk w h zr c sum inv a; form linear: "
               "p in 1..8, causal 0/1, window >= 0 (causal), d_osc 2, turn a blob of uint16 (<= 64 heads), "
               "stream 0/1 (with a window))";
  return d;
}

static void op_free(TfLiteContext *context, void *buffer) {
  OpData *d = (OpData *)buffer;
  (void)context;
  if (d) {
    free(d->scratch);
    free(d->state);
    free(d->turn);
  }
  free(d);
}

static TfLiteTensor *tensor(TfLiteContext *c, const TfLiteIntArray *a, int i) {
  return i < a->size && a->data[i] >= 0 ? &c->tensors[a->data[i]] : NULL;
}

/* Checks an int8 tensor of rank >= 3 whose leading dims flatten to heads; returns its last dim. */
static int dims3(const TfLiteTensor *t, int32_t *heads, int32_t *tokens) {
  int i, h = 1;
  const TfLiteIntArray *d = t ? t->dims : NULL;
  if (!d || t->type != kTfLiteInt8 || d->size < 3) return -1;
  for (i = 0; i < d->size - 2; ++i) h *= d->data[i];
  if (t->bytes != (size_t)h * d->data[d->size - 2] * d->data[d->size - 1]) return -1; /* ABI check */
  *heads = h;
  *tokens = d->data[d->size - 2];
  return d->data[d->size - 1];
}

#define FAIL(msg)                                 \
  do {                                            \
    context->ReportError(context, "%s", (msg)); \
    return kTfLiteError;                          \
  } while (0)

/* What both forms check: every input present, q k v r and out int8 [.., H, T, d] agreeing on H and T, k like q,
 * out like v, the heads option dividing H. Fills in[], *out, and H, T, dim of q k v r out (indices 0-4). */
static TfLiteStatus check_io(TfLiteContext *context, TfLiteNode *node, const OpData *d, TfLiteTensor **in,
                             TfLiteTensor **out, int32_t *H, int32_t *T, int32_t *dim) {
  int i;
  for (i = 0; i < node->inputs->size; ++i)
    if (!(in[i] = tensor(context, node->inputs, i))) FAIL("EdgeOscAttention: missing input");
  if (!(*out = tensor(context, node->outputs, 0))) FAIL("EdgeOscAttention: missing output");
  for (i = 0; i < 4; ++i)
    if ((dim[i] = dims3(in[i], &H[i], &T[i])) <= 0) FAIL("EdgeOscAttention: inputs must be int8 [.., H, T, d]");
  if ((dim[4] = dims3(*out, &H[4], &T[4])) <= 0) FAIL("EdgeOscAttention: output must be int8 [.., H, T, dv]");
  for (i = 1; i < 5; ++i)
    if (H[i] != H[0] || T[i] != T[0]) FAIL("EdgeOscAttention: q, k, v, r, out disagree on heads or tokens");
  if (dim[1] != dim[0] || dim[4] != dim[2]) FAIL("EdgeOscAttention: k must match q, out must match v");
  if (d->heads && H[0] % d->heads) FAIL("EdgeOscAttention: heads option disagrees with the tensors");
  return kTfLiteOk;
}

/* The linear core: q, k, v, r (+ g), constants from the tensors' scales (integer.linear.linear_quant_from_scales). */
static TfLiteStatus prepare_linear(TfLiteContext *context, TfLiteNode *node, OpData *d) {
  TfLiteTensor *in[8], *out;
  int32_t H[6], T[6], dim[6];
  EdgeoscLinearParams *p = &d->lin;
  double s, c1;
  const int state_in = d->stream ? 3 : 0, gated = node->inputs->size == 5 + state_in;
  int i;
  if ((node->inputs->size != 4 + state_in && !gated) || node->outputs->size != 1 + state_in)
    FAIL(d->stream ? "EdgeOscAttention (linear stream): needs inputs q, k, v, r (+ gates g), clock, sums, kept and "
                     "outputs out, clock, sums, kept"
                   : "EdgeOscAttention (linear): needs inputs q, k, v, r (+ gates g) and one output");
  if (check_io(context, node, d, in, &out, H, T, dim) != kTfLiteOk) return kTfLiteError;
  if (dim[3] != 2) FAIL("EdgeOscAttention (linear): r must be [.., 2] (d_osc 2)");
  if (in[3]->params.scale != 1.0f / 128 || in[3]->params.zero_point != 0)
    FAIL("EdgeOscAttention (linear): r must be unit vectors at scale 1/128, zero point 0");
  if (gated && (dims3(in[4], &H[5], &T[5]) != T[0] || H[5] != H[0] || T[5] != 1))
    FAIL("EdgeOscAttention (linear): the gates g must be int8 [.., H, 1, T]");
  free(d->turn);
  d->turn = NULL;
  if (d->n_turn) { /* one rate a head, repeated over any leading (batch) dims */
    if (H[0] % d->n_turn) FAIL("EdgeOscAttention (linear): turn gives a rate for each of fewer heads than H");
    if (!(d->turn = (int32_t *)malloc((size_t)H[0] * sizeof(int32_t)))) FAIL("EdgeOscAttention: out of memory");
    for (i = 0; i < H[0]; ++i) d->turn[i] = d->turn_option[i % d->n_turn];
  }
  p->turn = d->turn;
  p->t0 = 0;
  p->heads = H[0];
  p->tokens = T[0];
  p->d_head = dim[0];
  p->d_value = dim[2];
  p->zp_q = in[0]->params.zero_point;
  p->zp_k = in[1]->params.zero_point;
  p->zp_v = in[2]->params.zero_point;
  p->zp_g = gated ? in[4]->params.zero_point : 0;
  p->zp_out = out->params.zero_point;
  s = (double)in[0]->params.scale * (double)in[1]->params.scale / sqrt((double)p->d_head);
  c1 = floor(2.0 / s + 0.5);
  if (!(c1 >= 16 && c1 < (1 << 20)))
    FAIL("EdgeOscAttention (linear): q's and k's scales give a coupling coefficient 2/s outside [16, 2^20)");
  p->c1 = (int32_t)c1;
  quantize_multiplier(double_real(1.0f, in[2]->params.scale, out->params.scale), &p->rq_out);
  if (p->rq_out.shift < -10 || p->rq_out.shift > 20) FAIL("EdgeOscAttention (linear): v's scale over out's is out of range");
  free(d->state);
  if (!(d->state = (int32_t *)malloc(EDGEOSC_LINEAR_STATE_WORDS(p->d_head, p->d_value, p->p) * sizeof(int32_t))))
    FAIL("EdgeOscAttention: out of memory");
  if (d->stream) { /* the state: each output exactly as its input (the next call reads what this one wrote) */
    const size_t bytes[3] = {3 * sizeof(int32_t),
                             (size_t)H[0] * EDGEOSC_LINEAR_STATE_WORDS(p->d_head, p->d_value, p->p) * sizeof(int32_t),
                             (size_t)H[0] * p->window * (p->d_head + p->d_value + 3)};
    for (i = 0; i < 3; ++i) {
      const TfLiteTensor *a = in[node->inputs->size - 3 + i], *b = tensor(context, node->outputs, 1 + i);
      const int type = i == 2 ? kTfLiteInt8 : kTfLiteInt32;
      if (!b || a->type != type || b->type != type || a->bytes != bytes[i] || b->bytes != bytes[i])
        FAIL("EdgeOscAttention (linear stream): the state must be clock int32 [3], sums int32 [.., H, words], "
             "kept int8 [.., H, window, d_head + d_value + 3], in and out alike (a state of another model?)");
    }
  }
  return kTfLiteOk;
}

static TfLiteStatus op_prepare(TfLiteContext *context, TfLiteNode *node) {
  OpData *d = (OpData *)node->user_data;
  TfLiteTensor *in[8], *out;
  int32_t H[6], T[6], dim[6];
  int i, n_tables;
  EdgeoscOscParams *p;
  if (!d) FAIL("EdgeOscAttention: out of memory");
  if (d->error) FAIL(d->error);
  if (d->linear) return prepare_linear(context, node, d);
  n_tables = node->inputs->size - 4 - d->gated;
  if ((n_tables != 0 && n_tables != 3) || node->outputs->size != 1)
    FAIL("EdgeOscAttention: needs inputs q, k, v, r (+ tables w, c, inv) (+ gates g with the key gate options) "
         "and one output");
  if (!n_tables && !d->has_tables)
    FAIL("EdgeOscAttention: no tables (give table_w/table_c/table_inv as inputs or options)");
  if (check_io(context, node, d, in, &out, H, T, dim) != kTfLiteOk) return kTfLiteError;
  if (d->d_osc && d->d_osc != dim[3]) FAIL("EdgeOscAttention: d_osc option disagrees with the tensors");
  for (i = 4; i < 4 + n_tables; ++i) {
    if (in[i]->type != kTfLiteInt8 || in[i]->bytes != 256 || !in[i]->data.raw)
      FAIL("EdgeOscAttention: tables must be constant int8 [256]");
  }
  if (d->gated) { /* g [.., H, 1, T]: one unit vector over the keys per head, zero point 0 */
    const TfLiteTensor *g = in[4 + n_tables];
    if (dims3(g, &H[5], &T[5]) != T[0] || H[5] != H[0] || T[5] != 1 || g->params.zero_point != 0)
      FAIL("EdgeOscAttention: the gates g must be int8 [.., H, 1, T] with zero point 0");
    quantize_multiplier(d->mul_double ? double_real(d->pow_scale, g->params.scale, d->gated_scale)
                                      : float_real(d->pow_scale, g->params.scale, d->gated_scale),
                        &d->gate.rq_gate);
  }
  p = &d->params;
  p->heads = H[0];
  p->tokens = T[0];
  p->d_head = dim[0];
  p->d_value = dim[2];
  p->d_osc = dim[3];
  p->zp_q = in[0]->params.zero_point;
  p->zp_k = in[1]->params.zero_point;
  p->zp_v = in[2]->params.zero_point;
  p->zp_r = in[3]->params.zero_point;
  p->zp_out = out->params.zero_point;
  p->zp_qk = d->zero_point[P_QK];
  p->zp_w = d->zero_point[P_W];
  p->zp_h = d->zero_point[P_H];
  p->zp_zr = d->zero_point[P_ZR];
  p->zp_c = d->zero_point[P_C];
  p->zp_sum = d->zero_point[P_SUM];
  p->zp_inv = d->zero_point[P_INV];
  p->zp_a = d->zero_point[P_A];
  p->ones = d->ones;
  quantize_multiplier(matmul_real(in[0]->params.scale, in[1]->params.scale, d->scale[P_QK]), &p->rq_qk);
  /* h = wn r: wn's scale is L2_NORMALIZATION's fixed 1/128, so w's scale does not enter */
  quantize_multiplier(matmul_real(1.0f / 128, in[3]->params.scale, d->scale[P_H]), &p->rq_h);
  quantize_multiplier(matmul_real(1.0f / 128, in[3]->params.scale, d->scale[P_ZR]), &p->rq_zr);
  quantize_multiplier(d->sum_fc ? double_real(d->scale[P_C], d->ones_scale, d->scale[P_SUM])
                                : matmul_real(d->scale[P_C], d->ones_scale, d->scale[P_SUM]),
                      &p->rq_sum);
  quantize_multiplier(d->mul_double ? double_real(d->scale[P_C], d->scale[P_INV], d->scale[P_A])
                                    : float_real(d->scale[P_C], d->scale[P_INV], d->scale[P_A]),
                      &p->rq_a);
  quantize_multiplier(matmul_real(d->scale[P_A], in[2]->params.scale, out->params.scale), &p->rq_out);
  free(d->scratch);
  if (!(d->scratch = (int8_t *)malloc(EDGEOSC_OSC_SCRATCH_BYTES(p->tokens, p->d_osc))))
    FAIL("EdgeOscAttention: out of memory");
  return kTfLiteOk;
}

static TfLiteStatus op_invoke(TfLiteContext *context, TfLiteNode *node) {
  OpData *d = (OpData *)node->user_data;
  const TfLiteTensor *q = tensor(context, node->inputs, 0), *k = tensor(context, node->inputs, 1);
  const TfLiteTensor *v = tensor(context, node->inputs, 2), *r = tensor(context, node->inputs, 3);
  TfLiteTensor *out = tensor(context, node->outputs, 0);
  EdgeoscOscParams *p = &d->params;
  int i;
  const int8_t **tab[3] = {&p->table_w, &p->table_c, &p->table_inv};
  const int tables_in = node->inputs->size - d->gated == 7;
  if (d->linear) {
    const int state_in = d->stream ? 3 : 0;
    const TfLiteTensor *g = node->inputs->size == 5 + state_in ? tensor(context, node->inputs, 4) : NULL;
    if (d->stream) {
      TfLiteTensor *st[3];
      for (i = 0; i < 3; ++i) {
        st[i] = tensor(context, node->outputs, 1 + i);
        memcpy(st[i]->data.raw, tensor(context, node->inputs, node->inputs->size - 3 + i)->data.raw, st[i]->bytes);
      }
      if (edgeosc_linear_stream_int8(&d->lin, q->data.int8, k->data.int8, v->data.int8, r->data.int8,
                                     g ? g->data.int8 : NULL, out->data.int8, st[0]->data.i32, st[1]->data.i32,
                                     st[2]->data.int8))
        FAIL("EdgeOscAttention (linear stream): the clock is not a stream's (keys held outside 0..window, or the "
             "ring's slot outside it)");
      return kTfLiteOk;
    }
    if (edgeosc_linear_core_int8(&d->lin, q->data.int8, k->data.int8, v->data.int8, r->data.int8,
                                 g ? g->data.int8 : NULL, out->data.int8, d->state))
      FAIL("EdgeOscAttention (linear): invalid parameters");
    return kTfLiteOk;
  }
  for (i = 0; i < 3; ++i) *tab[i] = tables_in ? tensor(context, node->inputs, 4 + i)->data.int8 : d->tables[i];
  if (d->gated ? edgeosc_oscillator_gated_core_int8(p, &d->gate, q->data.int8, k->data.int8, v->data.int8,
                                                    r->data.int8,
                                                    tensor(context, node->inputs, node->inputs->size - 1)->data.int8,
                                                    out->data.int8, d->scratch)
               : edgeosc_oscillator_core_int8(p, q->data.int8, k->data.int8, v->data.int8, r->data.int8,
                                              out->data.int8, d->scratch))
    FAIL("EdgeOscAttention: invalid parameters");
  return kTfLiteOk;
}

/** The registration handed to tflite::MutableOpResolver::AddCustom. */
const TfLiteRegistration *edgeosc_tflite_registration(void) {
  static TfLiteRegistration r;
  if (!r.invoke) {
    r.init = op_init;
    r.free = op_free;
    r.prepare = op_prepare;
    r.invoke = op_invoke;
    r.builtin_code = 32; /* BuiltinOperator_CUSTOM */
    r.custom_name = "EdgeOscAttention";
    r.version = 1;
  }
  return &r;
}
