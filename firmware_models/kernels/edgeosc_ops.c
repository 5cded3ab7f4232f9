/* Int8 builtin ops (see edgeosc_ops.h). The portable loops follow TFLite's reference kernels; only the
 * integer results matter, and int32 accumulation is exact here (no overflow at these sizes), so the loop
 * order is free. CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED have a DSP path and a NEON path, ADD / SUB and
 * TRANSPOSE a DSP path (edgeosc_simd.h), with the same integers. */
#include "edgeosc_ops.h"

#include "edgeosc_attention.h"
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
static const int8_t *conv_patch(const EdgeoscConvParams *p, const int8_t *in, int32_t o, int8_t *patch) {
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

#endif

#if EDGEOSC_DSP
/* The DSP path as one matrix product: rows of int8 inputs (minus zp_in) times rows of int8 weights in
 * their TFLite layout, two rows by two weight rows at a time. Each input row is widened once into int16
 * pairs in the lanes SXTB16 gives a weight word, (x0, x2) and (x1, x3), so a weight word takes one load,
 * two SXTB16 and feeds four SMLAD (two per input row). No repacking of the weights is needed. */

/* Rows a and b (depth int8 values, minus zp) widened and interleaved for two_row_dots: per 4 values the even
 * pairs of a and b, then their odd pairs, then the last depth % 4 values as int32s, a's and b's alternating. */
static void widen_rows(const int8_t *a, const int8_t *b, int32_t depth, int32_t zp, int32_t *out) {
  const int32_t zp2 = edgeosc_pair(-zp);
  int32_t i;
  for (i = 0; i + 4 <= depth; i += 4, out += 4) {
    edgeosc_widen4(edgeosc_read4(a + i), zp2, out, out + 2);
    edgeosc_widen4(edgeosc_read4(b + i), zp2, out + 1, out + 3);
  }
  for (; i < depth; ++i, out += 2) out[0] = a[i] - zp, out[1] = b[i] - zp;
}

/* One weight word of unit a against the row's pair words xe, xo: two SXTB16, two SMLAD (for DOT_1X4) */
#define DOT_1X4_UNIT(a, load)                                                                  \
  load "\n\tsxtb16 %[t], %[wd]\n\tsmlad %[" a "], %[xe], %[t], %[" a "]\n\t"                    \
       "sxtb16 %[wd], %[wd], ror #8\n\tsmlad %[" a "], %[xo], %[wd], %[" a "]\n\t"

/* Four depth values of row a against four weight rows (units 0, 1 at w and w + step, units 2, 3 at w2 and
 * w2 + step) */
#define DOT_1X4_STEP                                                                                     \
  "ldr %[xo], [%[x], #8]\n\tldr %[xe], [%[x]], #16\n\t" DOT_1X4_UNIT("a1", "ldr %[wd], [%[w], %[step]]")  \
      DOT_1X4_UNIT("a0", "ldr %[wd], [%[w]], #4") DOT_1X4_UNIT("a3", "ldr %[wd], [%[w2], %[step]]")          \
          DOT_1X4_UNIT("a2", "ldr %[wd], [%[w2]], #4")

/* acc[u] += (row a of x) . (weight row u at w + u w_step), u < 4: for a single row (a stream's frame, a last odd
 * row), four weight rows sharing each load of the row; it reads only row a's pairs of widen_rows' layout. The
 * loop in assembly where EDGEOSC_ASM (13 registers, post-indexed loads, no index arithmetic). */
static void dot_1x4(const int32_t *x, const int8_t *w, int32_t w_step, int32_t depth, int32_t acc[4]) {
  int32_t a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3], xe, xo, wd, t, i;
  const int8_t *w2 = w + 2 * w_step; /* two pointers and one offset: units 0, 1 at w, units 2, 3 at w2 */
  const int32_t *const x_end = x + 4 * (depth >> 2);
#if EDGEOSC_ASM
  if (x != x_end)
    __asm__("1:\n\t" DOT_1X4_STEP "cmp %[x], %[end]\n\tbne 1b"
            : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [x] "+r"(x), [w] "+r"(w), [w2] "+r"(w2),
              [xe] "=&r"(xe), [xo] "=&r"(xo), [wd] "=&r"(wd), [t] "=&r"(t)
            : [step] "r"(w_step), [end] "r"(x_end)
            : "cc", "memory");
#else
  for (; x != x_end; x += 4, w += 4, w2 += 4) {
    xe = x[0], xo = x[2];
    wd = edgeosc_read4(w);
    a0 = __smlad(xo, edgeosc_sxtb16_ror8(wd), __smlad(xe, __sxtb16(wd), a0));
    wd = edgeosc_read4(w + w_step);
    a1 = __smlad(xo, edgeosc_sxtb16_ror8(wd), __smlad(xe, __sxtb16(wd), a1));
    wd = edgeosc_read4(w2);
    a2 = __smlad(xo, edgeosc_sxtb16_ror8(wd), __smlad(xe, __sxtb16(wd), a2));
    wd = edgeosc_read4(w2 + w_step);
    a3 = __smlad(xo, edgeosc_sxtb16_ror8(wd), __smlad(xe, __sxtb16(wd), a3));
  }
  (void)t;
#endif
  for (i = 0; i < (depth & 3); ++i, x += 2)
    a0 += x[0] * w[i], a1 += x[0] * w[w_step + i], a2 += x[0] * w2[i], a3 += x[0] * w2[w_step + i];
  acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
}

/* (row a of x) . (the weight row at w), for the units a multiple of 4 leaves */
static inline int32_t dot_1x1(const int32_t *x, const int8_t *w, int32_t depth) {
  int32_t acc = 0, n;
  for (n = depth >> 2; n > 0; --n, w += 4, x += 4) {
    const int32_t u = edgeosc_read4(w);
    acc = __smlad(x[2], edgeosc_sxtb16_ror8(u), __smlad(x[0], __sxtb16(u), acc));
  }
  for (n = 0; n < (depth & 3); ++n, x += 2) acc += x[0] * w[n];
  return acc;
}

/* Each channel's edgeosc_dsp_requant constants (EdgeoscChannelRequant.dsp's layout: 2M, right) written to k, once
 * per layer when code generation did not: k, or NULL if some channel's constants need the portable
 * requantization. Those it accepts have no left shift. */
static const int32_t *prepare_requant(const EdgeoscChannelRequant *rq, int32_t units, int32_t *k) {
  EdgeoscDspRequant q;
  int32_t c;
  for (c = 0; c < (rq->per_channel ? units : 1); ++c) {
    if (!edgeosc_dsp_requant_init(&q, rq->multiplier[c], rq->shift[c])) return 0;
    k[2 * c] = q.m2, k[2 * c + 1] = q.right;
  }
  return k;
}

/* The output side of a layer: its requantization (prepare_requant's constants k, or NULL for the portable
 * edgeosc_mbqm), zero point and clamp. */
typedef struct {
  const EdgeoscChannelRequant *rq;
  const int32_t *k;
  int32_t zp_out, lo, hi;
} Output;

/* edgeosc_dsp_requant(acc) + zp_out for the constants (2M, right) of one channel, with half = 2^(right-1): as
 * scalars, so that loops keep them in registers */
static inline int32_t requant_dsp(int32_t acc, int32_t m2, int32_t right, int32_t half, int32_t zp_out) {
  const EdgeoscDspRequant q = {m2, 0, right, half};
  return edgeosc_dsp_requant(&q, acc) + zp_out;
}

/* clamp(y, lo, 127) without a branch: SSAT to int8, then max with lo as USAT of the difference (at most 255) */
static inline int32_t clamp_to_127(int32_t y, int32_t lo) { return (int32_t)__usat(__ssat(y, 8) - lo, 8) + lo; }

/* out[u] = clamp(requant_u(acc[u]) + zp_out) for the n channels from `first`: a loop of its own, so that the
 * matrix product's registers are free and every constant here stays in one. */
static void requant_row(const Output *o, int32_t first, const int32_t *acc, int32_t n, int8_t *out) {
  const int32_t zp_out = o->zp_out, lo = o->lo, hi = o->hi;
  int32_t u;
  if (!o->k) { /* constants the DSP arithmetic cannot take */
    for (u = 0; u < n; ++u) out[u] = channel_out(o->rq, first + u, acc[u], zp_out, lo, hi);
  } else if (hi != 127) { /* an activation capped below 127 (ReLU6) */
    for (u = 0; u < n; ++u) {
      const int32_t *k = o->k + (o->rq->per_channel ? 2 * (first + u) : 0);
      out[u] = (int8_t)clamp(requant_dsp(acc[u], k[0], k[1], (1 << k[1]) >> 1, zp_out), lo, hi);
    }
  } else if (o->rq->per_channel) {
    const int32_t *k = o->k + 2 * first;
    for (u = 0; u < n; ++u, k += 2)
      out[u] = (int8_t)clamp_to_127(requant_dsp(acc[u], k[0], k[1], (1 << k[1]) >> 1, zp_out), lo);
  } else {
    const int32_t m2 = o->k[0], right = o->k[1], half = (1 << right) >> 1;
    if (lo == -128) /* no activation: the clamp is the SSAT alone */
      for (u = 0; u + 2 <= n; u += 2) { /* two a trip: half the loop's branches */
        out[u] = (int8_t)__ssat(requant_dsp(acc[u], m2, right, half, zp_out), 8);
        out[u + 1] = (int8_t)__ssat(requant_dsp(acc[u + 1], m2, right, half, zp_out), 8);
      }
    else
      for (u = 0; u + 2 <= n; u += 2) {
        out[u] = (int8_t)clamp_to_127(requant_dsp(acc[u], m2, right, half, zp_out), lo);
        out[u + 1] = (int8_t)clamp_to_127(requant_dsp(acc[u + 1], m2, right, half, zp_out), lo);
      }
    if (u < n) out[u] = (int8_t)clamp_to_127(requant_dsp(acc[u], m2, right, half, zp_out), lo);
  }
}

/* Output channels are taken UNIT_CHUNK at a time: their accumulators (two rows) sit on the stack between the
 * matrix product and the requantization. */
#define UNIT_CHUNK 32

#if EDGEOSC_ASM
/* row_dots for `quads` groups of four weight rows, bias given, depth a multiple of 4: the loop over the groups in
 * assembly too, its four words of state (x, bias, acc, groups left) on the stack (as pair_dots_asm). */
static void quad_dots_asm(const int32_t *x, const int8_t *w, const int32_t *bias, int32_t depth, int32_t quads,
                          int32_t *acc) {
  const int32_t *const x_end = x + depth, *xp = x;
  const int8_t *wp = w, *w2 = w + 2 * depth;
  int32_t a0, a1, a2, a3, step = depth;
  int32_t xe = (int32_t)x, xo = (int32_t)bias, wd = (int32_t)acc, t = quads;
  __asm__ volatile(
      "sub sp, sp, #16\n\t"
      "str %[xe], [sp]\n\tstr %[xo], [sp, #4]\n\tstr %[wd], [sp, #8]\n\tstr %[t], [sp, #12]\n\t"
      "2:\n\t"
      "ldr %[t], [sp, #4]\n\tldrd %[a0], %[a1], [%[t]], #8\n\tldrd %[a2], %[a3], [%[t]], #8\n\tstr %[t], [sp, #4]\n\t"
      "ldr %[x], [sp]\n\t"
      "1:\n\t" DOT_1X4_STEP "cmp %[x], %[end]\n\tbne 1b\n\t"
      "add %[w], %[w2], %[step]\n\tadd %[w2], %[w], %[step], lsl #1\n\t" /* the next group: 4 rows on */
      "ldr %[t], [sp, #8]\n\tstrd %[a0], %[a1], [%[t]], #8\n\tstrd %[a2], %[a3], [%[t]], #8\n\tstr %[t], [sp, #8]\n\t"
      "ldr %[t], [sp, #12]\n\tsubs %[t], %[t], #1\n\tstr %[t], [sp, #12]\n\tbne 2b\n\t"
      "add sp, sp, #16"
      : [a0] "=&r"(a0), [a1] "=&r"(a1), [a2] "=&r"(a2), [a3] "=&r"(a3), [x] "+r"(xp), [w] "+r"(wp), [w2] "+r"(w2),
        [xe] "+r"(xe), [xo] "+r"(xo), [wd] "+r"(wd), [t] "+r"(t)
      : [step] "r"(step), [end] "r"(x_end)
      : "cc", "memory");
}
#endif

/* acc[u] = bias[u] + (x - zp) . w_u for one widened row (a stream's frame, a last odd row) and n weight rows:
 * four at a time, then the n % 4 left one by one. */
static void row_dots(const int32_t *x, const int8_t *w, const int32_t *bias, int32_t depth, int32_t n,
                     int32_t *acc) {
  int32_t u = 0, i;
#if EDGEOSC_ASM
  if (bias && n >= 4 && (depth & 3) == 0) { /* the common case, all in assembly */
    quad_dots_asm(x, w, bias, depth, n >> 2, acc);
    u = n & ~3, w += u * depth;
  }
#endif
  for (; u + 4 <= n; u += 4, w += 4 * depth) {
    int32_t a[4] = {0, 0, 0, 0};
    dot_1x4(x, w, depth, depth, a);
    for (i = 0; i < 4; ++i) acc[u + i] = a[i] + (bias ? bias[u + i] : 0);
  }
  for (; u < n; ++u, w += depth) acc[u] = dot_1x1(x, w, depth) + (bias ? bias[u] : 0);
}

/* Four depth values of two rows by two weight rows (widen_rows' layout): a weight word takes one load and two
 * SXTB16 and feeds four SMLAD, two per input row; each input word feeds two. In assembly because the loop needs
 * 13 registers and the compiler spills its pointers at 14: loads LDRD and post-indexed, no index arithmetic. */
#define DOT_2X2_STEP                                                                                     \
  "ldrd %[xa], %[xb], [%[x]], #8\n\tldr %[w1], [%[w], %[step]]\n\tldr %[w0], [%[w]], #4\n\t"            \
  "sxtb16 %[t], %[w0]\n\tsmlad %[a00], %[xa], %[t], %[a00]\n\tsmlad %[a10], %[xb], %[t], %[a10]\n\t"    \
  "sxtb16 %[t], %[w1]\n\tsmlad %[a01], %[xa], %[t], %[a01]\n\tsmlad %[a11], %[xb], %[t], %[a11]\n\t"    \
  "ldrd %[xa], %[xb], [%[x]], #8\n\tsxtb16 %[w0], %[w0], ror #8\n\tsxtb16 %[w1], %[w1], ror #8\n\t"     \
  "smlad %[a00], %[xa], %[w0], %[a00]\n\tsmlad %[a10], %[xb], %[w0], %[a10]\n\t"                        \
  "smlad %[a01], %[xa], %[w1], %[a01]\n\tsmlad %[a11], %[xb], %[w1], %[a11]\n\t"
#define DOT_2X2_OPERANDS                                                                                  \
  [a00] "+r"(a00), [a01] "+r"(a01), [a10] "+r"(a10), [a11] "+r"(a11), [x] "+r"(xp), [w] "+r"(wp),        \
      [xa] "=&r"(xa), [xb] "=&r"(xb), [w0] "=&r"(w0), [w1] "=&r"(w1), [t] "=&r"(t)

/* acc[0..3] = (a00, a01, a10, a11) plus the dot products of the two widened rows in x with the weight rows at
 * w and w + step, depth values each, eight a loop trip. */
__attribute__((always_inline)) static inline void dot_2x2(const int32_t *x, const int8_t *w, int32_t step,
                                                          int32_t depth, int32_t acc[4]) {
  const int32_t *const x_end8 = x + 8 * (depth >> 3);
  int32_t a00 = acc[0], a01 = acc[1], a10 = acc[2], a11 = acc[3], xa, xb, w0, w1, t, i;
  const int32_t *xp = x;
  const int8_t *wp = w;
#if EDGEOSC_ASM
  if (xp != x_end8)
    __asm__("1:\n\t" DOT_2X2_STEP DOT_2X2_STEP "cmp %[x], %[end]\n\tbne 1b"
            : DOT_2X2_OPERANDS
            : [step] "r"(step), [end] "r"(x_end8)
            : "cc", "memory");
  if (depth & 4) __asm__(DOT_2X2_STEP : DOT_2X2_OPERANDS : [step] "r"(step) : "memory");
#else
  for (; xp != x_end8 + 4 * ((depth >> 2) & 1); xp += 4, wp += 4) {
    xa = edgeosc_read4(wp), xb = edgeosc_read4(wp + step), w0 = __sxtb16(xa), w1 = __sxtb16(xb);
    a00 = __smlad(xp[0], w0, a00), a10 = __smlad(xp[1], w0, a10);
    a01 = __smlad(xp[0], w1, a01), a11 = __smlad(xp[1], w1, a11);
    w0 = edgeosc_sxtb16_ror8(xa), w1 = edgeosc_sxtb16_ror8(xb);
    a00 = __smlad(xp[2], w0, a00), a10 = __smlad(xp[3], w0, a10);
    a01 = __smlad(xp[2], w1, a01), a11 = __smlad(xp[3], w1, a11);
  }
  (void)t;
#endif
  for (i = 0; i < (depth & 3); ++i, xp += 2) {
    a00 += xp[0] * wp[i], a01 += xp[0] * wp[step + i];
    a10 += xp[1] * wp[i], a11 += xp[1] * wp[step + i];
  }
  acc[0] = a00, acc[1] = a01, acc[2] = a10, acc[3] = a11;
}

#if EDGEOSC_ASM
/* two_row_dots for `pairs` pairs of weight rows, bias given, depth a multiple of 8: the loop over the pairs in
 * assembly too, its four words of state (x, bias, acc, pairs left) on the stack, as the dot loop holds 13
 * registers. Per pair: the accumulators start at the two biases (LDRD), the dot loop runs, the weights step
 * over the second row, the four sums go to acc (STRD and two STR). */
static void pair_dots_asm(const int32_t *x, const int8_t *w, const int32_t *bias, int32_t depth, int32_t pairs,
                          int32_t *acc) {
  const int32_t *const x_end8 = x + depth, *xp = x;
  const int8_t *wp = w;
  int32_t a00, a01, a10, a11, t, step = depth;
  int32_t xa = (int32_t)x, xb = (int32_t)bias, w0 = (int32_t)acc, w1 = pairs;
  __asm__ volatile(
      "sub sp, sp, #16\n\t"
      "str %[xa], [sp]\n\tstr %[xb], [sp, #4]\n\tstr %[w0], [sp, #8]\n\tstr %[w1], [sp, #12]\n\t"
      "2:\n\t"
      "ldr %[xb], [sp, #4]\n\tldrd %[a00], %[a01], [%[xb]], #8\n\tstr %[xb], [sp, #4]\n\t"
      "mov %[a10], %[a00]\n\tmov %[a11], %[a01]\n\tldr %[x], [sp]\n\t"
      "1:\n\t" DOT_2X2_STEP DOT_2X2_STEP "cmp %[x], %[end]\n\tbne 1b\n\t"
      "add %[w], %[w], %[step]\n\t"
      "ldr %[xb], [sp, #8]\n\tstr %[a10], [%[xb], %[row1]]\n\tstr %[a11], [%[xb], %[row1_next]]\n\t"
      "strd %[a00], %[a01], [%[xb]], #8\n\tstr %[xb], [sp, #8]\n\t"
      "ldr %[xa], [sp, #12]\n\tsubs %[xa], %[xa], #1\n\tstr %[xa], [sp, #12]\n\tbne 2b\n\t"
      "add sp, sp, #16"
      : [a00] "=&r"(a00), [a01] "=&r"(a01), [a10] "=&r"(a10), [a11] "=&r"(a11), [x] "+r"(xp), [w] "+r"(wp),
        [xa] "+r"(xa), [xb] "+r"(xb), [w0] "+r"(w0), [w1] "+r"(w1), [t] "=&r"(t)
      : [step] "r"(step), [end] "r"(x_end8), [row1] "i"(4 * UNIT_CHUNK), [row1_next] "i"(4 * UNIT_CHUNK + 4)
      : "cc", "memory");
}
#endif

/* acc[u] and acc[UNIT_CHUNK + u] = bias[u] + (x_r - zp) . w_u for the two widened rows in x and n weight rows,
 * two weight rows at a time (a last odd one paired with itself). */
__attribute__((noinline)) static void two_row_dots(const int32_t *x, const int8_t *w, const int32_t *bias,
                                                   int32_t depth, int32_t n, int32_t *acc) {
  int32_t u = 0, a[4];
#if EDGEOSC_ASM
  if (bias && n >= 2 && (depth & 7) == 0) { /* the common case, all in assembly */
    pair_dots_asm(x, w, bias, depth, n >> 1, acc);
    u = n & ~1, w += u * depth, acc += u;
  }
#endif
  for (; u + 2 <= n; u += 2, w += 2 * depth, acc += 2) {
    a[0] = a[2] = bias ? bias[u] : 0;
    a[1] = a[3] = bias ? bias[u + 1] : 0;
    dot_2x2(x, w, depth, depth, a);
    acc[0] = a[0], acc[1] = a[1], acc[UNIT_CHUNK] = a[2], acc[UNIT_CHUNK + 1] = a[3];
  }
  if (n & 1) {
    a[0] = a[1] = a[2] = a[3] = bias ? bias[u] : 0;
    dot_2x2(x, w, 0, depth, a);
    acc[0] = a[0], acc[UNIT_CHUNK] = a[2];
  }
}

/* out[r, u] = requant(bias[u] + (x_r - zp) . w_u) for the two widened rows in x (one row, r1 == r0, for a
 * last odd row or a stream's frame): FULLY_CONNECTED / CONV_2D output rows r0 and r1. */
static void rows_times_weights(const int32_t *x, const int8_t *weights, const int32_t *bias, int32_t depth,
                               int32_t units, const Output *o, int8_t *r0, int8_t *r1) {
  int32_t acc[2 * UNIT_CHUNK];
  int32_t u;
  for (u = 0; u < units; u += UNIT_CHUNK) {
    const int32_t n = units - u < UNIT_CHUNK ? units - u : UNIT_CHUNK;
    const int32_t *const b = bias ? bias + u : 0;
    if (r1 == r0) {
      row_dots(x, weights + u * depth, b, depth, n, acc);
    } else {
      two_row_dots(x, weights + u * depth, b, depth, n, acc);
      requant_row(o, u, acc + UNIT_CHUNK, n, r1 + u);
    }
    requant_row(o, u, acc, n, r0 + u);
  }
}

/* scratch: the two widened rows (EDGEOSC_WIDE_WORDS), then prepare_requant's constants */
static void fc_fast(const EdgeoscFcParams *p, const int8_t *in, int8_t *out, int32_t *wide) {
  const int32_t D = p->depth, U = p->units;
  const Output o = {&p->rq, p->rq.dsp ? p->rq.dsp : prepare_requant(&p->rq, U, wide + EDGEOSC_WIDE_WORDS(D)),
                    p->zp_out, p->act_min, p->act_max};
  int32_t r;
  if (U == 1) { /* one output (a layer norm's mean): the weight row widened once, the rows read as int8 words */
    int32_t sum_w = 0, d;
    for (d = 0; d < D; ++d) sum_w += p->weights[d];
    widen_rows(p->weights, p->weights, D, 0, wide);
    sum_w = (p->bias ? p->bias[0] : 0) - p->zp_in * sum_w; /* (x - zp) . w = x . w - zp sum(w) */
    for (r = 0; r < p->rows; ++r, in += D) {
      const int32_t acc = dot_1x1(wide, in, D) + sum_w;
      out[r] = o.k ? (int8_t)clamp(requant_dsp(acc, o.k[0], o.k[1], (1 << o.k[1]) >> 1, o.zp_out), o.lo, o.hi)
                   : channel_out(&p->rq, 0, acc, o.zp_out, o.lo, o.hi);
    }
    return;
  }
  for (r = 0; r < p->rows; r += 2) {
    const int32_t two = r + 1 < p->rows;
    widen_rows(in + r * D, in + (r + two) * D, D, p->zp_in, wide);
    rows_times_weights(wide, p->weights, p->bias, D, U, &o, out + r * U, out + (r + two) * U);
  }
}

/* scratch: the widened rows, the two receptive fields (K bytes each), prepare_requant's constants */
static void conv_fast(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *wide) {
  const int32_t K = p->k_h * p->k_w * p->in_c, C = p->out_c, pixels = p->out_h * p->out_w;
  int8_t *const patch = (int8_t *)(wide + EDGEOSC_WIDE_WORDS(K));
  const int32_t *const k =
      p->rq.dsp ? p->rq.dsp : prepare_requant(&p->rq, C, wide + EDGEOSC_WIDE_WORDS(K) + (K + 1) / 2);
  const Output q = {&p->rq, k, p->zp_out, p->act_min, p->act_max};
  int32_t o;
  for (o = 0; o < pixels; o += 2) {
    const int32_t two = o + 1 < pixels;
    widen_rows(conv_patch(p, in, o, patch), conv_patch(p, in, o + two, patch + K), K, p->zp_in, wide);
    rows_times_weights(wide, p->weights, p->bias, K, C, &q, out + o * C, out + (o + two) * C);
  }
}
#endif

#if EDGEOSC_NEON
/* The AArch64 path: an input row widened once to int16 (minus zp_in), each weight row widened eight values at a
 * time, SMLAL into four int32 lanes (Cortex-A53/A72 have no SDOT). */
static void widen_row16(const int8_t *x, int32_t depth, int32_t zp, int16_t *out) {
  const int16x8_t z = vdupq_n_s16((int16_t)zp);
  int32_t i;
  for (i = 0; i + 8 <= depth; i += 8) vst1q_s16(out + i, vsubq_s16(vmovl_s8(vld1_s8(x + i)), z));
  for (; i < depth; ++i) out[i] = (int16_t)(x[i] - zp);
}

static void row_times_weights_neon(const int16_t *x, const int8_t *weights, const int32_t *bias, int32_t depth,
                                   int32_t units, const EdgeoscChannelRequant *rq, int32_t zp_out, int32_t lo,
                                   int32_t hi, int8_t *out) {
  int32_t u, k;
  for (u = 0; u < units; ++u) {
    const int8_t *w = weights + u * depth;
    int32x4_t acc4 = vdupq_n_s32(0);
    int32_t acc;
    for (k = 0; k + 8 <= depth; k += 8) {
      const int16x8_t xv = vld1q_s16(x + k), wv = vmovl_s8(vld1_s8(w + k));
      acc4 = vmlal_high_s16(vmlal_s16(acc4, vget_low_s16(xv), vget_low_s16(wv)), xv, wv);
    }
    acc = vaddvq_s32(acc4) + (bias ? bias[u] : 0);
    for (; k < depth; ++k) acc += x[k] * w[k];
    out[u] = channel_out(rq, u, acc, zp_out, lo, hi);
  }
}

static void fc_fast(const EdgeoscFcParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  int16_t *const x = (int16_t *)(void *)scratch;
  int32_t r;
  for (r = 0; r < p->rows; ++r) {
    widen_row16(in + r * p->depth, p->depth, p->zp_in, x);
    row_times_weights_neon(x, p->weights, p->bias, p->depth, p->units, &p->rq, p->zp_out, p->act_min, p->act_max,
                           out + r * p->units);
  }
}

static void conv_fast(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  const int32_t K = p->k_h * p->k_w * p->in_c, pixels = p->out_h * p->out_w;
  int16_t *const x = (int16_t *)(void *)scratch;
  int8_t *const patch = (int8_t *)(scratch + EDGEOSC_WIDE_WORDS(K));
  int32_t o;
  for (o = 0; o < pixels; ++o) {
    widen_row16(conv_patch(p, in, o, patch), K, p->zp_in, x);
    row_times_weights_neon(x, p->weights, p->bias, K, p->out_c, &p->rq, p->zp_out, p->act_min, p->act_max,
                           out + o * p->out_c);
  }
}
#endif

void edgeosc_conv2d_int8(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  int32_t oy, ox, oc, ky, kx, ic;
#if EDGEOSC_DSP || EDGEOSC_NEON
  if (scratch) { /* the DSP or the NEON path, whichever this build has */
    conv_fast(p, in, out, scratch);
    return;
  }
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

#if EDGEOSC_DSP || EDGEOSC_NEON
#define DEPTHWISE_MAX_TAPS 64

/* The taps of output pixel (oy, ox) inside the image, listed once for every channel group: their input and
 * weight offsets (channels last in both); returns how many. */
static int32_t depthwise_taps(const EdgeoscConvParams *p, int32_t oy, int32_t ox, int32_t *x_off, int32_t *w_off) {
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
/* Depthwise with one output per input channel, four channels at a time: a tap's four inputs and four weights
 * are one word each, widened by SXTB16 into lanes (c, c + 2) and (c + 1, c + 3), multiplied lane by lane
 * (SMLABB / SMLATT: channels must not mix, so no SMLAD). */
static void depthwise_dsp(const EdgeoscConvParams *p, const int8_t *in, int8_t *out) {
  const int32_t C = p->out_c, zp2 = edgeosc_pair(-p->zp_in);
  int32_t x_off[DEPTHWISE_MAX_TAPS], w_off[DEPTHWISE_MAX_TAPS];
  int32_t oy, ox, c, t, taps;
  for (oy = 0; oy < p->out_h; ++oy) {
    for (ox = 0; ox < p->out_w; ++ox, out += C) {
      taps = depthwise_taps(p, oy, ox, x_off, w_off);
      for (c = 0; c < C; c += 4) {
        const int8_t *const xc = in + c, *const wc = p->weights + c;
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        if (p->bias) a0 = p->bias[c], a1 = p->bias[c + 1], a2 = p->bias[c + 2], a3 = p->bias[c + 3];
        for (t = 0; t < taps; ++t) {
          const int32_t ww = edgeosc_read4(wc + w_off[t]), we = __sxtb16(ww), wo = edgeosc_sxtb16_ror8(ww);
          int32_t xe, xo;
          edgeosc_widen4(edgeosc_read4(xc + x_off[t]), zp2, &xe, &xo);
          a0 = __smlabb(xe, we, a0), a2 = __smlatt(xe, we, a2);
          a1 = __smlabb(xo, wo, a1), a3 = __smlatt(xo, wo, a3);
        }
        out[c] = channel_out(&p->rq, c, a0, p->zp_out, p->act_min, p->act_max);
        out[c + 1] = channel_out(&p->rq, c + 1, a1, p->zp_out, p->act_min, p->act_max);
        out[c + 2] = channel_out(&p->rq, c + 2, a2, p->zp_out, p->act_min, p->act_max);
        out[c + 3] = channel_out(&p->rq, c + 3, a3, p->zp_out, p->act_min, p->act_max);
      }
    }
  }
}
#endif

#if EDGEOSC_NEON
/* Depthwise on AArch64: eight channels a vector, each tap's inputs (minus zp) and weights widened to int16,
 * SMLAL into two int32x4 accumulators. */
static void depthwise_neon(const EdgeoscConvParams *p, const int8_t *in, int8_t *out) {
  const int32_t C = p->out_c;
  const int16x8_t z = vdupq_n_s16((int16_t)p->zp_in);
  int32_t x_off[DEPTHWISE_MAX_TAPS], w_off[DEPTHWISE_MAX_TAPS];
  int32_t oy, ox, c, t, taps, acc[8];
  for (oy = 0; oy < p->out_h; ++oy) {
    for (ox = 0; ox < p->out_w; ++ox, out += C) {
      taps = depthwise_taps(p, oy, ox, x_off, w_off);
      for (c = 0; c < C; c += 8) {
        int32x4_t lo = vdupq_n_s32(0), hi = vdupq_n_s32(0);
        for (t = 0; t < taps; ++t) {
          const int16x8_t xv = vsubq_s16(vmovl_s8(vld1_s8(in + x_off[t] + c)), z);
          const int16x8_t wv = vmovl_s8(vld1_s8(p->weights + w_off[t] + c));
          lo = vmlal_s16(lo, vget_low_s16(xv), vget_low_s16(wv));
          hi = vmlal_high_s16(hi, xv, wv);
        }
        vst1q_s32(acc, lo);
        vst1q_s32(acc + 4, hi);
        for (t = 0; t < 8; ++t)
          out[c + t] = channel_out(&p->rq, c + t, acc[t] + (p->bias ? p->bias[c + t] : 0), p->zp_out, p->act_min,
                                   p->act_max);
      }
    }
  }
}
#endif

void edgeosc_depthwise_conv_int8(const EdgeoscConvParams *p, const int8_t *in, int8_t *out) {
  const int32_t multiplier = p->out_c / p->in_c;
  int32_t oy, ox, oc, ky, kx;
#if EDGEOSC_DSP
  if (multiplier == 1 && p->in_c % 4 == 0 && p->k_h * p->k_w <= DEPTHWISE_MAX_TAPS) {
    depthwise_dsp(p, in, out);
    return;
  }
#elif EDGEOSC_NEON
  if (multiplier == 1 && p->in_c % 8 == 0 && p->k_h * p->k_w <= DEPTHWISE_MAX_TAPS) {
    depthwise_neon(p, in, out);
    return;
  }
#endif
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
#if EDGEOSC_DSP || EDGEOSC_NEON
  if (scratch) { /* the DSP or the NEON path, whichever this build has */
    fc_fast(p, in, out, scratch);
    return;
  }
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

void edgeosc_sum_pool_int8(const EdgeoscPoolParams *p, const int8_t *in, int8_t *out) {
  int32_t r, c;
  for (c = 0; c < p->cols; ++c) {
    int32_t acc = 0;
    for (r = 0; r < p->rows; ++r) acc += in[r * p->cols + c] - p->zp_in;
    out[c] = (int8_t)clamp(edgeosc_mbqm(acc * p->weight, p->rq.multiplier, p->rq.shift) + p->zp_out,
                           p->act_min, p->act_max);
  }
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

/* One row of n outputs: out[k] = clamp(requant(gs G(g[k]) + hs (h[k] - zh) 2^19) + zp_out, lo, 127) with G the
 * scaled input's term; an input with step 0 (it broadcasts along the row) is taken once, the other steps 1.
 * gs, hs: +-1, literal at each call, so each sign pattern compiles to its own loop. */
__attribute__((always_inline)) static inline void add_row_signed(const AddScaled *q, const int8_t *g, int32_t g_step,
                                                                 const int8_t *h, int32_t h_step, int32_t zh,
                                                                 int32_t n, const EdgeoscDspRequant *qo,
                                                                 int32_t zp_out, int32_t lo, int8_t *out,
                                                                 const int32_t gs, const int32_t hs) {
  const int32_t zg = q->zp, m2 = q->m2, half = q->half, right = q->right;
  const int32_t om2 = qo->m2, ohalf = qo->half, oright = qo->right;
  int32_t k;
  if (h_step == 0) {
    const int32_t hv = hs * ((*h - zh) * (1 << 19));
    for (k = 0; k < n; ++k)
      out[k] = (int8_t)clamp_to_127(
          requant_dsp(gs * add_scaled(g[k], zg, m2, half, right) + hv, om2, oright, ohalf, zp_out), lo);
  } else if (g_step == 0) {
    const int32_t gv = gs * add_scaled(*g, zg, m2, half, right);
    for (k = 0; k < n; ++k)
      out[k] = (int8_t)clamp_to_127(
          requant_dsp(gv + hs * ((h[k] - zh) * (1 << 19)), om2, oright, ohalf, zp_out), lo);
  } else {
    for (k = 0; k < n; ++k)
      out[k] = (int8_t)clamp_to_127(
          requant_dsp(gs * add_scaled(g[k], zg, m2, half, right) + hs * ((h[k] - zh) * (1 << 19)), om2, oright, ohalf,
                      zp_out), lo);
  }
}

/* add_row_signed for the sign pattern (gs, hs), a function of its own so that its loop has the registers */
__attribute__((noinline)) static void add_row(const AddScaled *q, const int8_t *g, int32_t g_step, const int8_t *h,
                                              int32_t h_step, int32_t zh, int32_t n, const EdgeoscDspRequant *qo,
                                              int32_t zp_out, int32_t lo, int8_t *out, int32_t gs, int32_t hs) {
  if (gs < 0)
    add_row_signed(q, g, g_step, h, h_step, zh, n, qo, zp_out, lo, out, -1, 1);
  else if (hs < 0)
    add_row_signed(q, g, g_step, h, h_step, zh, n, qo, zp_out, lo, out, 1, -1);
  else
    add_row_signed(q, g, g_step, h, h_step, zh, n, qo, zp_out, lo, out, 1, 1);
}

/* edgeosc_add_int8 on the DSP path, row by row of the broadcast shape; 0 (nothing written) where its premises
 * fail: left shift 20, one input at multiplier 1/2 and the other below, inner strides 1, or 0 and 1, no cap below
 * 127, output constants edgeosc_dsp_requant takes. */
static int add_dsp(const EdgeoscAddParams *p, const int8_t *a, const int8_t *b, int8_t *out) {
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
#endif

void edgeosc_add_int8(const EdgeoscAddParams *p, const int8_t *a, const int8_t *b, int8_t *out) {
  /* the requantization constants split once (edgeosc_mbqm per element, inlined); left_shift is 20 */
  const int32_t ma = p->rq_a.multiplier, ra = -p->rq_a.shift, mb = p->rq_b.multiplier, rb = -p->rq_b.shift;
  const int32_t one = 1 << p->left_shift, sign = p->subtract ? -1 : 1;
#if EDGEOSC_DSP
  if (add_dsp(p, a, b, out)) return;
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
  for (d0 = 0; d0 < p->out_dims[0]; ++d0)
    for (d1 = 0; d1 < p->out_dims[1]; ++d1)
      for (d2 = 0; d2 < p->out_dims[2]; ++d2) {
        const int8_t *src = in + d0 * s[0] + d1 * s[1] + d2 * s[2];
        d3 = 0;
#if EDGEOSC_DSP /* a contiguous run (the heads' split and merge move rows of d_head values): a word at a time */
        if (s3 == 1)
          for (; d3 + 4 <= n3; d3 += 4, src += 4, out += 4)
            *(edgeosc_unaligned_i32 *)(void *)out = edgeosc_read4(src);
#endif
        for (; d3 < n3; ++d3, src += s3) *out++ = *src;
      }
}

void edgeosc_copy_int8(int32_t n, const int8_t *in, int8_t *out) {
  int32_t i;
  for (i = 0; i < n; ++i) out[i] = in[i];
}

void edgeosc_ring_write_int8(int32_t rows, int32_t slots, int32_t n, const int8_t *in, int8_t *ring, int32_t *slot) {
  int32_t r;
  for (r = 0; r < rows; ++r) edgeosc_copy_int8(n, in + r * n, ring + (r * slots + *slot) * n);
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
