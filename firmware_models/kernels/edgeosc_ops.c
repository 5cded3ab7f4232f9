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
/* The DSP path as one matrix product on weights packed at code generation (edgeosc_ops.h, EDGEOSC_PACKED): rows
 * of int8 inputs widened once into int16 pairs in SXTB16's lanes, (x[d], x[d+2]) and (x[d+1], x[d+3]), times pairs
 * of units whose packed words unpack into the same lanes with two SXTB16. Four rows share each unpacked weight
 * word (four SMLAD per SXTB16); the input zero point is in the packed biases. */

/* The four bytes at p as SXTB16's two pairs; with n < 4 of them, zeros after (a row's last groups) */
static inline void widen_word(const int8_t *p, int32_t n, int32_t *even, int32_t *odd) {
  int32_t w = 0, i;
  if (n >= 4) {
    w = edgeosc_read4(p);
  } else {
    for (i = 0; i < n; ++i) w |= (int32_t)((uint32_t)(uint8_t)p[i] << (8 * i));
  }
  *even = __sxtb16(w), *odd = edgeosc_sxtb16_ror8(w);
}

/* `count` rows (1 or 4) of depth values widened into `groups` groups of four values (zeros past depth): per group
 * the even pairs of the rows, then their odd pairs */
static void widen(const int8_t *const *rows, int32_t count, int32_t depth, int32_t groups, int32_t *out) {
  int32_t d = 0, r;
  if (count == 4) { /* the whole words of four rows, unrolled */
    const int8_t *const a = rows[0], *const b = rows[1], *const c = rows[2], *const e = rows[3];
    for (; d + 4 <= depth; d += 4, out += 8) {
      const int32_t wa = edgeosc_read4(a + d), wb = edgeosc_read4(b + d), wc = edgeosc_read4(c + d),
                    we = edgeosc_read4(e + d);
      out[0] = __sxtb16(wa), out[1] = __sxtb16(wb), out[2] = __sxtb16(wc), out[3] = __sxtb16(we);
      out[4] = edgeosc_sxtb16_ror8(wa), out[5] = edgeosc_sxtb16_ror8(wb), out[6] = edgeosc_sxtb16_ror8(wc);
      out[7] = edgeosc_sxtb16_ror8(we);
    }
  }
  if (count == 1)
    for (; d + 4 <= depth; d += 4, out += 2) {
      const int32_t wa = edgeosc_read4(rows[0] + d);
      out[0] = __sxtb16(wa), out[1] = edgeosc_sxtb16_ror8(wa);
    }
  for (; d < 4 * groups; d += 4, out += 2 * count)
    for (r = 0; r < count; ++r) widen_word(rows[r] + d, depth - d, out + r, out + count + r);
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

/* Output channels are taken UNIT_CHUNK at a time: their accumulators (four rows, 256 bytes) sit on the stack between
 * the matrix product and the requantization (the firmware's whole stack is 2 KiB: firmware_models/tools/mps2.ld). */
#define UNIT_CHUNK 16

/* edgeosc_dsp_requant(acc) + zp_out for the constants (2M, right) of one channel, with c = 2^(right-1) + zp_out 2^right
 * (requant_c): the zero point added before the shift, which is
 * exact (a multiple of 2^right passes through it), and x - [x < 0] before the saturating add (x > INT32_MIN:
 * |SRDHM(a, M)| < |a| for M < 2^31). Where QADD saturates the exact value is past int8 by the same sign, so both
 * clamp alike (right <= 23). Scalars, kept in registers. */
static inline int32_t requant_zp(int32_t acc, int32_t m2, int32_t right, int32_t c) {
  const int32_t x = edgeosc_smmulr(acc, m2) + acc;
  return __qadd(x + (x >> 31), c) >> right;
}

static inline int32_t requant_c(int32_t right, int32_t zp_out) {
  return (int32_t)(((1u << right) >> 1) + ((uint32_t)zp_out << right));
}

static inline int32_t clamp_dsp(int32_t y, int32_t lo, int32_t hi, int full) {
  return full ? __ssat(y, 8) : clamp(y, lo, hi);
}

/* rows[r][u] = clamp(requant_u(acc[r UNIT_CHUNK + u]) + zp_out) for rows r < count (1 or 4) and the n channels from
 * `first`: a loop of its own, so that the matrix product's registers are free and a channel's constants serve
 * its four rows. Inlined per case (per-channel or not, a clamp that is SSAT alone or not). */
__attribute__((always_inline)) static inline void requant_units(const int32_t *k, int32_t k_step, int32_t zp,
                                                                int32_t lo, int32_t hi, int full,
                                                                const int32_t *acc, int32_t n, int32_t count,
                                                                int8_t *const *rows) {
  int8_t *const r0 = rows[0], *const r1 = rows[count < 4 ? 0 : 1], *const r2 = rows[count < 4 ? 0 : 2],
         *const r3 = rows[count < 4 ? 0 : 3];
  /* a channel's rounding constant for one row as (2 zp + 1) << (right - 1), two steps less than requant_c; four
   * rows keep requant_c (with the extra register held there, DS-CNN's pointwise layers ran 0.3% slower) */
  const uint32_t odd_zp = 2u * (uint32_t)zp + 1u;
  int32_t m2 = k[0], right = k[1], c = requant_c(right, zp), u;
  for (u = 0; u < n; ++u, k += k_step) {
    if (k_step) m2 = k[0], right = k[1], c = count == 4 ? requant_c(right, zp) : (int32_t)(odd_zp << (right - 1));
    r0[u] = (int8_t)clamp_dsp(requant_zp(acc[u], m2, right, c), lo, hi, full);
    if (count == 4) {
      r1[u] = (int8_t)clamp_dsp(requant_zp(acc[UNIT_CHUNK + u], m2, right, c), lo, hi, full);
      r2[u] = (int8_t)clamp_dsp(requant_zp(acc[2 * UNIT_CHUNK + u], m2, right, c), lo, hi, full);
      r3[u] = (int8_t)clamp_dsp(requant_zp(acc[3 * UNIT_CHUNK + u], m2, right, c), lo, hi, full);
    }
  }
}

__attribute__((always_inline)) static inline void requant_rows(const Output *o, int32_t first, const int32_t *acc,
                                                              int32_t n, int32_t count, int8_t *const *rows) {
  const int32_t zp = o->zp_out, lo = o->lo, hi = o->hi, full = lo == -128 && hi == 127;
  int8_t *at[4];
  int32_t r, u;
  for (r = 0; r < count; ++r) at[r] = rows[r] + first;
  if (!o->k) { /* constants the DSP arithmetic cannot take */
    for (r = 0; r < count; ++r)
      for (u = 0; u < n; ++u) at[r][u] = channel_out(o->rq, first + u, acc[r * UNIT_CHUNK + u], zp, lo, hi);
  } else if (o->rq->per_channel) {
    const int32_t *const k = o->k + 2 * first;
    if (count == 4)
      full ? requant_units(k, 2, zp, lo, hi, 1, acc, n, 4, at) : requant_units(k, 2, zp, lo, hi, 0, acc, n, 4, at);
    else
      full ? requant_units(k, 2, zp, lo, hi, 1, acc, n, 1, at) : requant_units(k, 2, zp, lo, hi, 0, acc, n, 1, at);
  } else if (count == 4) {
    full ? requant_units(o->k, 0, zp, lo, hi, 1, acc, n, 4, at) : requant_units(o->k, 0, zp, lo, hi, 0, acc, n, 4, at);
  } else {
    full ? requant_units(o->k, 0, zp, lo, hi, 1, acc, n, 1, at) : requant_units(o->k, 0, zp, lo, hi, 0, acc, n, 1, at);
  }
}

/* A pair's packed bytes: its two biases, then two words a group */
#define PAIR_BYTES(groups) (8 + 8 * (groups))
/* ... and when its words are unpacked at code generation (one-row layers, edgeosc_ops.h): four words a group */
#define PAIR_BYTES16(groups) (8 + 16 * (groups))

#if EDGEOSC_ASM
/* block_dots in Thumb-2 assembly: the accumulators of the four rows by two units in r0-r7 (row r unit j in r(2r+j)),
 * the weight word and its two unpacked pairs in r9 and r8, two input words in r10 r11, the input at r12 and the
 * packed weights at lr; two groups a trip, the loads in runs of LDR (each after the first in one cycle). On the
 * stack: x, x_end, acc, acc_end. */
#define BLOCK_HALF /* one packed word (the even or the odd pairs of a group) times the four rows' input words */    \
  "ldr r9, [lr], #4\n\tldr r10, [r12], #4\n\tldr r11, [r12], #4\n\tsxtb16 r8, r9\n\tsxtb16 r9, r9, ror #8\n\t"   \
  "smlad r0, r10, r8, r0\n\tsmlad r1, r10, r9, r1\n\tsmlad r2, r11, r8, r2\n\tsmlad r3, r11, r9, r3\n\t"         \
  "ldr r10, [r12], #4\n\tldr r11, [r12], #4\n\t"                                                                  \
  "smlad r4, r10, r8, r4\n\tsmlad r5, r10, r9, r5\n\tsmlad r6, r11, r8, r6\n\tsmlad r7, r11, r9, r7\n\t"

typedef char unit_chunk_is_16[UNIT_CHUNK == 16 ? 1 : -1]; /* the stores' offsets below: 64 bytes a row */

/* (naked: x, x_end, w, acc arrive in r0-r3, acc_end on the stack; unnamed in C) */
__attribute__((naked, noinline)) static void block_dots_asm(const int32_t *x __attribute__((unused)),
                                                            const int32_t *x_end __attribute__((unused)),
                                                            const int8_t *w __attribute__((unused)),
                                                            int32_t *acc __attribute__((unused)),
                                                            const int32_t *acc_end __attribute__((unused))) {
  __asm__("ldr r12, [sp]\n\tpush {r4-r11, lr}\n\tmov lr, r2\n\tpush {r0, r1, r3, r12}\n"
          "2:\n\t" /* a pair of units: the accumulators at its biases */
          "ldrd r0, r1, [lr], #8\n\tldr r12, [sp]\n\t"
          "mov r2, r0\n\tmov r3, r1\n\tmov r4, r0\n\tmov r5, r1\n\tmov r6, r0\n\tmov r7, r1\n"
          "1:\n\t" BLOCK_HALF BLOCK_HALF BLOCK_HALF BLOCK_HALF
          "ldr r8, [sp, #4]\n\tcmp r12, r8\n\tbne 1b\n\t"
          /* the eight sums out, on to the next pair */
          "ldr r9, [sp, #8]\n\t"
          "str r2, [r9, #64]\n\tstr r3, [r9, #68]\n\tstr r4, [r9, #128]\n\tstr r5, [r9, #132]\n\t"
          "str r6, [r9, #192]\n\tstr r7, [r9, #196]\n\tstrd r0, r1, [r9], #8\n\tstr r9, [sp, #8]\n\t"
          "ldr r8, [sp, #12]\n\tcmp r9, r8\n\tbne 2b\n\t"
          "add sp, sp, #16\n\tpop {r4-r11, pc}");
}
#endif

/* acc[r UNIT_CHUNK + 2 i + j] = bias + row r . unit 2 i + j for rows r < 4 (widen's four-row layout) and `pairs`
 * packed unit pairs of `groups` groups (even) */
static void block_dots(const int32_t *x, const int8_t *w, int32_t groups, int32_t pairs, int32_t *acc) {
#if EDGEOSC_ASM
  block_dots_asm(x, x + 8 * groups, w, acc, acc + 2 * pairs);
#else
  int32_t i, g;
  for (i = 0; i < pairs; ++i, acc += 2) {
    const int32_t *const b = (const int32_t *)(const void *)w, *xp = x;
    int32_t a00 = b[0], a01 = b[1], a10 = a00, a11 = a01, a20 = a00, a21 = a01, a30 = a00, a31 = a01;
    for (g = 0, w += 8; g < 2 * groups; ++g, xp += 4, w += 4) { /* the even pairs of a group, then its odd */
      int32_t wd = edgeosc_read4(w), t = __sxtb16(wd);
      wd = edgeosc_sxtb16_ror8(wd);
      a00 = __smlad(xp[0], t, a00), a01 = __smlad(xp[0], wd, a01), a10 = __smlad(xp[1], t, a10);
      a11 = __smlad(xp[1], wd, a11), a20 = __smlad(xp[2], t, a20), a21 = __smlad(xp[2], wd, a21);
      a30 = __smlad(xp[3], t, a30), a31 = __smlad(xp[3], wd, a31);
    }
    acc[0] = a00, acc[1] = a01, acc[UNIT_CHUNK] = a10, acc[UNIT_CHUNK + 1] = a11;
    acc[2 * UNIT_CHUNK] = a20, acc[2 * UNIT_CHUNK + 1] = a21, acc[3 * UNIT_CHUNK] = a30, acc[3 * UNIT_CHUNK + 1] = a31;
  }
#endif
}

#if EDGEOSC_ASM
/* row_dots' pairs of pairs in Thumb-2 assembly: four units' sums in r0-r3, the row's two words of a group in r4 r5,
 * each pair's two words in r6 r7 and r8 r9, an unpacked pair in r10, the row at r11, the pairs at r12 and lr; two
 * groups a trip, the loads in one run of LDR. On the stack: x, x_end, acc, the pair stride, quads left. */
#define ROW_GROUP                                                                                              \
  "ldr r4, [r11], #4\n\tldr r5, [r11], #4\n\tldr r6, [r12], #4\n\tldr r7, [r12], #4\n\t"                         \
  "ldr r8, [lr], #4\n\tldr r9, [lr], #4\n\t"                                                                     \
  "sxtb16 r10, r6\n\tsmlad r0, r4, r10, r0\n\tsxtb16 r6, r6, ror #8\n\tsmlad r1, r4, r6, r1\n\t"                \
  "sxtb16 r10, r8\n\tsmlad r2, r4, r10, r2\n\tsxtb16 r8, r8, ror #8\n\tsmlad r3, r4, r8, r3\n\t"                \
  "sxtb16 r10, r7\n\tsmlad r0, r5, r10, r0\n\tsxtb16 r7, r7, ror #8\n\tsmlad r1, r5, r7, r1\n\t"                \
  "sxtb16 r10, r9\n\tsmlad r2, r5, r10, r2\n\tsxtb16 r9, r9, ror #8\n\tsmlad r3, r5, r9, r3\n\t"

/* The loop around a group macro: per two pairs of units the sums start at their biases, then two groups a trip;
 * `stride` turns x_end - x (bytes) into a pair's stride less its 8 bytes of biases (naked: x, x_end, w, acc arrive
 * in r0-r3, quads on the stack) */
#define ROW_QUADS(stride, group)                                                                                 \
  "ldr r12, [sp]\n\tpush {r4-r11, lr}\n\tsub r4, r1, r0\n\t" stride "add r4, r4, #8\n\t"                            \
  "push {r0, r1, r3, r4, r12}\n\tmov r12, r2\n"                                                                      \
  "2:\n\t"                                                                                                           \
  "ldr r4, [sp, #12]\n\tadd lr, r12, r4\n\tldrd r0, r1, [r12], #8\n\tldrd r2, r3, [lr], #8\n\tldr r11, [sp]\n"         \
  "1:\n\t" group group "ldr r10, [sp, #4]\n\tcmp r11, r10\n\tbne 1b\n\t"                                           \
  "ldr r10, [sp, #8]\n\tstm r10!, {r0-r3}\n\tstr r10, [sp, #8]\n\tmov r12, lr\n\t"                                   \
  "ldr r10, [sp, #16]\n\tsubs r10, r10, #1\n\tstr r10, [sp, #16]\n\tbne 2b\n\t"                                      \
  "add sp, sp, #20\n\tpop {r4-r11, pc}"

/* (unnamed in C) */
__attribute__((naked, noinline)) static void row_quads_asm(const int32_t *x __attribute__((unused)),
                                                           const int32_t *x_end __attribute__((unused)),
                                                           const int8_t *w __attribute__((unused)),
                                                           int32_t *acc __attribute__((unused)),
                                                           int32_t quads __attribute__((unused))) {
  __asm__(ROW_QUADS("", ROW_GROUP));
}

/* row_quads_asm on weights unpacked at code generation: each packed word as its two SXTB16 halves, so a group is
 * two runs of loads and eight SMLAD (20 cycles for 16 MACs against 23); a pair's words take twice the bytes */
#define ROW_GROUP16                                                                                            \
  "ldr r4, [r11], #4\n\tldr r5, [r11], #4\n\tldr r6, [r12], #4\n\tldr r7, [r12], #4\n\t"                         \
  "ldr r8, [r12], #4\n\tldr r9, [r12], #4\n\t"                                                                     \
  "smlad r0, r4, r6, r0\n\tsmlad r1, r4, r7, r1\n\tsmlad r0, r5, r8, r0\n\tsmlad r1, r5, r9, r1\n\t"             \
  "ldr r6, [lr], #4\n\tldr r7, [lr], #4\n\tldr r8, [lr], #4\n\tldr r9, [lr], #4\n\t"                             \
  "smlad r2, r4, r6, r2\n\tsmlad r3, r4, r7, r3\n\tsmlad r2, r5, r8, r2\n\tsmlad r3, r5, r9, r3\n\t"

__attribute__((naked, noinline)) static void row_quads16_asm(const int32_t *x __attribute__((unused)),
                                                             const int32_t *x_end __attribute__((unused)),
                                                             const int8_t *w __attribute__((unused)),
                                                             int32_t *acc __attribute__((unused)),
                                                             int32_t quads __attribute__((unused))) {
  __asm__(ROW_QUADS("lsl r4, r4, #1\n\t", ROW_GROUP16));
}
#endif

/* row_dots on weights unpacked at code generation (pack_weights(..., w16=True)): a group's four words per pair are
 * (unit 0, unit 1) x (even, odd) int16 pairs, straight to SMLAD */
static void row_dots16(const int32_t *x, const int8_t *w, int32_t groups, int32_t pairs, int32_t *acc) {
  const int32_t *xp, *const x_end = x + 2 * groups;
  int32_t i = 0;
#if EDGEOSC_ASM
  if (pairs >= 2) {
    row_quads16_asm(x, x_end, w, acc, pairs >> 1);
    i = pairs & ~1, acc += 2 * i, w += i * PAIR_BYTES16(groups);
  }
#endif
  for (; i < pairs; ++i, acc += 2, w += PAIR_BYTES16(groups)) {
    const int32_t *b = (const int32_t *)(const void *)w, *wp = b + 2;
    int32_t a0 = b[0], a1 = b[1];
    for (xp = x; xp != x_end; xp += 2, wp += 4) {
      a0 = __smlad(xp[1], wp[2], __smlad(xp[0], wp[0], a0));
      a1 = __smlad(xp[1], wp[3], __smlad(xp[0], wp[1], a1));
    }
    acc[0] = a0, acc[1] = a1;
  }
}

/* acc[2 i + j] = bias + the row . unit 2 i + j for one widened row (widen's one-row layout) and `pairs` packed unit
 * pairs of `groups` groups (even): two pairs at a time, each input pair feeding four SMLAD. */
static void row_dots(const int32_t *x, const int8_t *w, int32_t groups, int32_t pairs, int32_t *acc) {
  const int32_t *xp, *const x_end = x + 2 * groups;
  int32_t i = 0;
#if EDGEOSC_ASM
  if (pairs >= 2) {
    row_quads_asm(x, x_end, w, acc, pairs >> 1);
    i = pairs & ~1, acc += 2 * i, w += i * PAIR_BYTES(groups);
  }
#endif
  for (; i + 2 <= pairs; i += 2, acc += 4, w += 2 * PAIR_BYTES(groups)) {
    const int8_t *w0 = w + 8, *w1 = w + PAIR_BYTES(groups) + 8;
    const int32_t *const b0 = (const int32_t *)(const void *)w, *const b1 = (const int32_t *)(const void *)(w1 - 8);
    int32_t a0 = b0[0], a1 = b0[1], a2 = b1[0], a3 = b1[1];
    for (xp = x; xp != x_end; xp += 2, w0 += 8, w1 += 8) {
      const int32_t p0 = edgeosc_read4(w0), p1 = edgeosc_read4(w1), q0 = edgeosc_read4(w0 + 4),
                    q1 = edgeosc_read4(w1 + 4);
      a0 = __smlad(xp[0], __sxtb16(p0), a0), a1 = __smlad(xp[0], edgeosc_sxtb16_ror8(p0), a1);
      a2 = __smlad(xp[0], __sxtb16(p1), a2), a3 = __smlad(xp[0], edgeosc_sxtb16_ror8(p1), a3);
      a0 = __smlad(xp[1], __sxtb16(q0), a0), a1 = __smlad(xp[1], edgeosc_sxtb16_ror8(q0), a1);
      a2 = __smlad(xp[1], __sxtb16(q1), a2), a3 = __smlad(xp[1], edgeosc_sxtb16_ror8(q1), a3);
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
  }
  if (i < pairs) { /* an odd last pair */
    const int32_t *const b = (const int32_t *)(const void *)w;
    int32_t a0 = b[0], a1 = b[1];
    for (xp = x, w += 8; xp != x_end; xp += 2, w += 8) {
      const int32_t p = edgeosc_read4(w), q = edgeosc_read4(w + 4);
      a0 = __smlad(xp[1], __sxtb16(q), __smlad(xp[0], __sxtb16(p), a0));
      a1 = __smlad(xp[1], edgeosc_sxtb16_ror8(q), __smlad(xp[0], edgeosc_sxtb16_ror8(p), a1));
    }
    acc[0] = a0, acc[1] = a1;
  }
}

/* out[r][u] = requant(bias + row r . unit u) for `count` (1 or 4) input rows, widened in x, and all units */
static void widened_times_weights(const int32_t *x, int32_t count, const int8_t *packed, int32_t depth,
                                  int32_t units, const Output *o, int8_t *const *out_rows) {
  const int32_t groups = 2 * ((depth + 7) >> 3);
  int32_t acc[4 * UNIT_CHUNK];
  int32_t u;
  const int32_t chunk = count == 4 ? UNIT_CHUNK : 4 * UNIT_CHUNK; /* a single row's sums fill the whole of acc */
  for (u = 0; u < units; u += chunk) {
    const int32_t n = units - u < chunk ? units - u : chunk;
    const int8_t *const w = packed + (u >> 1) * PAIR_BYTES(groups);
    if (count == 4)
      block_dots(x, w, groups, (n + 1) >> 1, acc);
    else
      row_dots(x, w, groups, (n + 1) >> 1, acc);
    requant_rows(o, u, acc, n, count, out_rows);
  }
}

/* out[u] = requant(bias + row . unit u) for one row widened in x and weights unpacked at code generation (a
 * one-row layer's: edgeosc_ops.h) */
static void widened_row_times_weights16(const int32_t *x, const int8_t *packed, int32_t depth, int32_t units,
                                        const Output *o, int8_t *out) {
  const int32_t groups = 2 * ((depth + 7) >> 3);
  int32_t acc[4 * UNIT_CHUNK];
  int32_t u;
  for (u = 0; u < units; u += 4 * UNIT_CHUNK) {
    const int32_t n = units - u < 4 * UNIT_CHUNK ? units - u : 4 * UNIT_CHUNK;
    row_dots16(x, packed + (u >> 1) * PAIR_BYTES16(groups), groups, (n + 1) >> 1, acc);
    requant_rows(o, u, acc, n, 1, &out);
  }
}

/* the same for `count` input rows widened into x first */
static void rows_times_weights(const int8_t *const *rows, int32_t count, const int8_t *packed, int32_t depth,
                               int32_t units, const Output *o, int8_t *const *out_rows, int32_t *x) {
  widen(rows, count, depth, 2 * ((depth + 7) >> 3), x);
  widened_times_weights(x, count, packed, depth, units, o, out_rows);
}

/* The rows of `in` (FULLY_CONNECTED: rows of depth values; CONV_2D: its output pixels' receptive fields, built in
 * bufs where not read in place, depth bytes a row) four at a time, then one by one. */
typedef const int8_t *(*RowOf)(const void *p, const int8_t *in, int32_t r, int8_t *buf);

static void matrix_times_weights(RowOf row_of, const void *p, const int8_t *in, int32_t rows, int32_t depth,
                                 int32_t units, const int8_t *packed, const Output *o, int8_t *out, int32_t *x,
                                 int8_t *bufs) {
  const int8_t *r_in[4];
  int8_t *r_out[4];
  int32_t r, i;
  for (r = 0; r < rows;) {
    const int32_t count = rows - r >= 4 ? 4 : 1;
    for (i = 0; i < count; ++i, ++r) r_in[i] = row_of(p, in, r, bufs + i * depth), r_out[i] = out + r * units;
    rows_times_weights(r_in, count, packed, depth, units, o, r_out, x);
  }
}

static const int8_t *fc_row(const void *p, const int8_t *in, int32_t r, int8_t *buf) {
  (void)buf;
  return in + r * ((const EdgeoscFcParams *)p)->depth;
}

static const int8_t *conv_row(const void *p, const int8_t *in, int32_t r, int8_t *buf) {
  return conv_patch((const EdgeoscConvParams *)p, in, r, buf);
}

/* A FULLY_CONNECTED's output side: its requantization constants from code generation, or prepared in scratch after
 * the widened rows (EDGEOSC_WIDE_WORDS) */
static Output fc_output(const EdgeoscFcParams *p, int32_t *wide) {
  const Output o = {&p->rq,
                    p->rq.dsp ? p->rq.dsp : prepare_requant(&p->rq, p->units, wide + EDGEOSC_WIDE_WORDS(p->depth)),
                    p->zp_out, p->act_min, p->act_max};
  return o;
}

/* scratch: the widened rows (EDGEOSC_WIDE_WORDS), then prepare_requant's constants */
static void fc_fast(const EdgeoscFcParams *p, const int8_t *in, int8_t *out, int32_t *wide) {
  const int32_t D = p->depth, U = p->units;
  const Output o = fc_output(p, wide);
  int32_t r;
  if (U == 1) { /* one output (a layer norm's mean): the weight row widened once, each row's words unpacked */
    const int8_t *const w = p->weights;
    const int32_t groups = (D + 3) >> 2;
    int32_t sum_w = 0, d, g;
    for (d = 0; d < D; ++d) sum_w += w[d];
    widen(&w, 1, D, groups, wide);
    sum_w = (p->bias ? p->bias[0] : 0) - p->zp_in * sum_w; /* (x - zp) . w = x . w - zp sum(w) */
    for (r = 0; r < p->rows; ++r, in += D) {
      int32_t acc = sum_w, e, od;
      for (g = 0; g < D >> 2; ++g) {
        const int32_t v = edgeosc_read4(in + 4 * g);
        acc = __smlad(wide[2 * g + 1], edgeosc_sxtb16_ror8(v), __smlad(wide[2 * g], __sxtb16(v), acc));
      }
      if (D & 3) {
        widen_word(in + 4 * g, D & 3, &e, &od);
        acc = __smlad(wide[2 * g + 1], od, __smlad(wide[2 * g], e, acc));
      }
      out[r] = o.k ? (int8_t)clamp(requant_zp(acc, o.k[0], o.k[1], requant_c(o.k[1], o.zp_out)), o.lo, o.hi)
                   : channel_out(&p->rq, 0, acc, o.zp_out, o.lo, o.hi);
    }
    return;
  }
  if (p->rows == 1) { /* one row: weights unpacked at code generation (edgeosc_ops.h), no SXTB16 */
    widen(&in, 1, D, 2 * ((D + 7) >> 3), wide);
    widened_row_times_weights16(wide, p->packed, D, U, &o, out);
    return;
  }
  matrix_times_weights(fc_row, p, in, p->rows, D, U, p->packed, &o, out, wide, 0);
}

/* scratch: the widened rows, the four receptive fields (K bytes each), prepare_requant's constants */
static void conv_fast(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *wide) {
  const int32_t K = p->k_h * p->k_w * p->in_c, C = p->out_c;
  int8_t *const fields = (int8_t *)(wide + EDGEOSC_WIDE_WORDS(K));
  const int32_t *const k = p->rq.dsp ? p->rq.dsp : prepare_requant(&p->rq, C, wide + EDGEOSC_WIDE_WORDS(K) + K);
  const Output q = {&p->rq, k, p->zp_out, p->act_min, p->act_max};
  if (p->out_h * p->out_w == 1) { /* one output pixel (a stream's stem): weights unpacked as a one-row layer's */
    const int8_t *const field = conv_row(p, in, 0, fields);
    widen(&field, 1, K, 2 * ((K + 7) >> 3), wide);
    widened_row_times_weights16(wide, p->packed, K, C, &q, out);
    return;
  }
  matrix_times_weights(conv_row, p, in, p->out_h * p->out_w, K, C, p->packed, &q, out, wide, fields);
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
  if (scratch && (EDGEOSC_NEON || p->packed)) { /* the DSP or the NEON path, whichever this build has */
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
/* Depthwise 3 x 3, stride 1, one output per input channel, on the DSP requantization constants (rq.dsp), when the
 * output range is int8's whole (a ReLU's output zero point -128 gives it). Four channels at a time:
 *  1. planes: the input as int16, padded with zp_in (the zero point folds into the bias, and the padding adds
 *     nothing: TFLite's skipped taps), in slots per pair of output rows j, padded column px and channel k, each two
 *     words: A = rows (2j, 2j + 1), B = rows (2j + 2, 2j + 3) (a row pair is stored twice, as a slot's A and the
 *     slot above's B, so that a slot is one LDRD);
 *  2. per channel, output rows 2j and 2j + 1 of column ox from the slots of columns ox .. ox + 2, with the weights
 *     as pairs W = (w[0][kx], w[1][kx]) and V = (w[1][kx], w[2][kx]): row 2j takes SMLAD(A, W) + SMLABT(B, V), row
 *     2j + 1 SMLATB(A, W) + SMLAD(B, V), four instructions for six MACs per tap column; both requantized into an
 *     8-byte record per (j, ox): row 2j's four channels, then row 2j + 1's (an odd out_h computes a row more, in
 *     the padding, and drops it);
 *  3. each record's two words copied to the NHWC output. */
#define DW3_PAIRS(out_h) (((out_h) + 1) >> 1)
/* the last row pair the planes read per group: J, or J - 1 where row pair J (the last slots' B) is all padding */
#define DW3_LAST(p, J) ((p)->pad_top + (p)->in_h > 2 * (J) ? (J) : (J) - 1)

typedef struct { /* dw3_rows's job; its field order is the assembly's */
  const int32_t *slots; /* channel k's slot of row pair 0, padded column 0 */
  int8_t *records;      /* channel k's byte of record 0 */
  int32_t m2, w[6];     /* edgeosc_dsp_requant's 2M; W0, W1, W2, V0, V1, V2 */
  const int32_t *end;   /* past the first row's last slot */
  int32_t bias, rc, right, rows, row_bytes; /* bias - zp_in sum w; requant_c; right; row pairs; 32 (out_w + 2) */
} Dw3Job;

#if EDGEOSC_ASM
/* one channel's rows (Dw3Job); 14 registers: slot, record, 2M, six weights, A, B, two sums, the row's end */
__attribute__((naked, noinline)) static void dw3_rows(const Dw3Job *job __attribute__((unused))) {
  __asm__("push {r4-r11, lr}\n\t"
          "add r12, r0, #36\n\tldm r12, {r1-r6}\n\tmov lr, r1\n\tpush {r2-r6}\n\t" /* [sp]: bias rc right rows rowb */
          "ldm r0, {r0-r8}\n\t"
          "1:\n\t"
          "ldr r11, [sp]\n\tldrd r9, r10, [r0], #32\n\t" /* tap column 0 */
          "smlatb r12, r9, r3, r11\n\tsmlad r11, r9, r3, r11\n\tsmlabt r11, r10, r6, r11\n\tsmlad r12, r10, r6, r12\n\t"
          "ldrd r9, r10, [r0]\n\t" /* 1 */
          "smlad r11, r9, r4, r11\n\tsmlatb r12, r9, r4, r12\n\tsmlabt r11, r10, r7, r11\n\tsmlad r12, r10, r7, r12\n\t"
          "ldrd r9, r10, [r0, #32]\n\t" /* 2 */
          "smlad r11, r9, r5, r11\n\tsmlatb r12, r9, r5, r12\n\tsmlabt r11, r10, r8, r11\n\tsmlad r12, r10, r8, r12\n\t"
          "smmlar r11, r11, r2, r11\n\tsmmlar r12, r12, r2, r12\n\tldrd r9, r10, [sp, #4]\n\t" /* requant_zp */
          "add r11, r11, r11, asr #31\n\tadd r12, r12, r12, asr #31\n\tqadd r11, r11, r9\n\tqadd r12, r12, r9\n\t"
          "asr r11, r11, r10\n\tasr r12, r12, r10\n\tssat r11, #8, r11\n\tssat r12, #8, r12\n\t"
          "strb r12, [r1, #4]\n\tstrb r11, [r1], #8\n\t"
          "cmp r0, lr\n\tbne 1b\n\t"
          "add r0, r0, #64\n\tldr r9, [sp, #16]\n\tadd lr, lr, r9\n\t" /* the next row pair */
          "ldr r9, [sp, #12]\n\tsubs r9, r9, #1\n\tstr r9, [sp, #12]\n\tbne 1b\n\t"
          "add sp, sp, #20\n\tpop {r4-r11, pc}");
}
#else
static void dw3_rows(const Dw3Job *job) {
  const int32_t *slot = job->slots, *end = job->end, *const w = job->w;
  int8_t *rec = job->records;
  int32_t r, k;
  for (r = 0; r < job->rows; ++r, slot += 16, end += job->row_bytes >> 2) {
    for (; slot != end; slot += 8, rec += 8) {
      int32_t y0 = job->bias, y1 = __smlatb(slot[0], w[0], job->bias);
      for (k = 0; k < 3; ++k) {
        const int32_t *const s = slot + 8 * k;
        y0 = __smlabt(s[1], w[3 + k], __smlad(s[0], w[k], y0));
        y1 = __smlad(s[1], w[3 + k], k ? __smlatb(s[0], w[k], y1) : y1);
      }
      rec[0] = (int8_t)__ssat(requant_zp(y0, job->m2, job->right, job->rc), 8);
      rec[4] = (int8_t)__ssat(requant_zp(y1, job->m2, job->right, job->rc), 8);
    }
  }
}
#endif

/* Row pair j of the four channels at x (padded row 0 of a column) into slot s: its A (j < J) and the slot above's B
 * (j > 0), a row outside the image at zp_in */
static void dw3_row_pair(const EdgeoscConvParams *p, const int8_t *x, int32_t j, int32_t *s, int32_t W,
                                int32_t J) {
  const int32_t row = p->in_w * p->in_c, iy = 2 * j - p->pad_top;
  const int32_t zp4 = (int32_t)(((uint32_t)p->zp_in & 0xFFu) * 0x01010101u);
  const int32_t x0 = iy >= 0 && iy < p->in_h ? edgeosc_read4(x + 2 * j * row) : zp4;
  const int32_t x1 = iy + 1 >= 0 && iy + 1 < p->in_h ? edgeosc_read4(x + (2 * j + 1) * row) : zp4;
  const int32_t e0 = __sxtb16(x0), e1 = __sxtb16(x1), o0 = edgeosc_sxtb16_ror8(x0), o1 = edgeosc_sxtb16_ror8(x1);
  const int32_t v0 = edgeosc_pack_bottoms(e0, e1), v1 = edgeosc_pack_bottoms(o0, o1);
  const int32_t v2 = edgeosc_pack_tops(e0, e1), v3 = edgeosc_pack_tops(o0, o1);
  int32_t *const t = s - 8 * W;
  if (j < J) s[0] = v0, s[2] = v1, s[4] = v2, s[6] = v3;
  if (j > 0) t[1] = v0, t[3] = v1, t[5] = v2, t[7] = v3;
}

/* step 1 for the four channels from c in the image's columns (the padding's, all zp_in, are written once a call):
 * the row pairs wholly inside the image in a loop without tests, the others (first and last) apart */
static void depthwise3x3_planes(const EdgeoscConvParams *p, const int8_t *in, int32_t c, int32_t *slots) {
  const int32_t W = p->out_w + 2, J = DW3_PAIRS(p->out_h), row = p->in_w * p->in_c;
  const int32_t lo = (p->pad_top + 1) >> 1 > 1 ? (p->pad_top + 1) >> 1 : 1;
  const int32_t hi = (p->pad_top + p->in_h) / 2 < J ? (p->pad_top + p->in_h) / 2 : J; /* j < hi: inside */
  int32_t ix, j;
  for (ix = 0; ix < p->in_w; ++ix) {
    const int8_t *const x = in + ix * p->in_c + c - p->pad_top * row; /* padded row 0 */
    int32_t *const s = slots + 8 * (ix + p->pad_left);
    for (j = 0; j < lo; ++j) dw3_row_pair(p, x, j, s + 8 * W * j, W, J);
    { /* inside: two words in, eight out, the pointers stepped */
      const int8_t *r = x + 2 * j * row;
      int32_t *a = s + 8 * W * j, *b = a - 8 * W + 1;
      for (; j < hi; ++j, r += 2 * row, a += 8 * W, b += 8 * W) {
        const int32_t x0 = edgeosc_read4(r), x1 = edgeosc_read4(r + row);
        const int32_t e0 = __sxtb16(x0), e1 = __sxtb16(x1), o0 = edgeosc_sxtb16_ror8(x0), o1 = edgeosc_sxtb16_ror8(x1);
        a[0] = b[0] = edgeosc_pack_bottoms(e0, e1), a[2] = b[2] = edgeosc_pack_bottoms(o0, o1);
        a[4] = b[4] = edgeosc_pack_tops(e0, e1), a[6] = b[6] = edgeosc_pack_tops(o0, o1);
      }
    }
    for (; j <= DW3_LAST(p, J); ++j) dw3_row_pair(p, x, j, s + 8 * W * j, W, J);
  }
}

static void depthwise3x3_dsp(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  const int32_t C = p->out_c, W = p->out_w + 2, J = DW3_PAIRS(p->out_h), row = p->out_w * C;
  const int32_t zp2 = edgeosc_pair(p->zp_in);
  int8_t *const records = (int8_t *)(void *)(scratch + 8 * J * W);
  int32_t c, k, j, x;
  for (j = 0; j < J; ++j) /* the padding's columns: both words of every slot zp_in */
    for (x = 0; x < W; ++x)
      if (x < p->pad_left || x >= p->pad_left + p->in_w)
        for (k = 0; k < 8; ++k) scratch[8 * (j * W + x) + k] = zp2;
  if (DW3_LAST(p, J) < J) /* the last slots' B past the image: zp_in too */
    for (x = 8 * (J - 1) * W + 1; x < 8 * J * W; x += 2) scratch[x] = zp2;
  for (c = 0; c < C; c += 4) {
    depthwise3x3_planes(p, in, c, scratch);
    for (k = 0; k < 4; ++k) {
      const int32_t *const pk = (const int32_t *)(const void *)p->packed + 7 * (c + k);
      const int32_t *const q = p->rq.dsp + (p->rq.per_channel ? 2 * (c + k) : 0);
      Dw3Job job;
      job.w[0] = pk[0], job.w[1] = pk[1], job.w[2] = pk[2], job.w[3] = pk[3], job.w[4] = pk[4], job.w[5] = pk[5];
      job.slots = scratch + 2 * k, job.records = records + k, job.m2 = q[0], job.end = job.slots + 8 * p->out_w;
      job.bias = pk[6], job.rc = requant_c(q[1], p->zp_out), job.right = q[1], job.rows = J, job.row_bytes = 32 * W;
      dw3_rows(&job);
    }
    { /* step 3: row 2j's word of each record, then row 2j + 1's (but past the last row) */
      const int32_t *r = (const int32_t *)(const void *)records, *const end = r + 2 * (p->out_h >> 1) * p->out_w;
      int8_t *o = out + c;
      for (j = 0; r != end; ++j, o += row)
        for (x = 0; x < p->out_w; ++x, r += 2, o += C)
          *(edgeosc_unaligned_i32 *)(void *)o = r[0], *(edgeosc_unaligned_i32 *)(void *)(o + row) = r[1];
      for (x = 0; x < (p->out_h & 1) * p->out_w; ++x, r += 2, o += C) *(edgeosc_unaligned_i32 *)(void *)o = r[0];
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

void edgeosc_depthwise_conv_int8(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  const int32_t multiplier = p->out_c / p->in_c;
  int32_t oy, ox, oc, ky, kx;
#if EDGEOSC_DSP
  if (scratch && p->packed) { /* code generation packed it for the planes (export/c/ops.py depthwise3x3_packs) */
    depthwise3x3_dsp(p, in, out, scratch);
    return;
  }
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
#if EDGEOSC_DSP || EDGEOSC_NEON
  if (scratch && (EDGEOSC_NEON || p->packed || p->units == 1)) { /* the DSP or NEON path, this build's */
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

void edgeosc_fc_group_int8(int32_t n, const EdgeoscFcParams *const *p, const int8_t *in, int8_t *const *out,
                           int32_t *scratch) {
  int32_t i;
#if EDGEOSC_DSP
  int one_row = scratch != 0;
  for (i = 0; i < n; ++i) one_row &= p[i]->rows == 1 && p[i]->packed != 0 && p[i]->depth == p[0]->depth;
  if (one_row) { /* the row widened once; each layer's fixed cost is then its product's and requantization's */
    widen(&in, 1, p[0]->depth, 2 * ((p[0]->depth + 7) >> 3), scratch);
    for (i = 0; i < n; ++i) {
      const Output o = fc_output(p[i], scratch);
      widened_row_times_weights16(scratch, p[i]->packed, p[i]->depth, p[i]->units, &o, out[i]);
    }
    return;
  }
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
  EdgeoscDspRequant q;
  if (edgeosc_dsp_requant_init(&q, p->rq.multiplier, p->rq.shift)) {
    for (c = 0; c < p->cols; ++c)
      out[c] = (int8_t)clamp(edgeosc_dsp_requant(&q, (sums[c] - base) * p->weight) + p->zp_out, p->act_min,
                             p->act_max);
    return;
  }
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
