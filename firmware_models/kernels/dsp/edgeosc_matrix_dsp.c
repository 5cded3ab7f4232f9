/* FULLY_CONNECTED and CONV_2D on the DSP path (Armv7E-M / Armv8-M with the DSP extension): the same integers as the
 * reference loops of edgeosc_ops.c, bit for bit. The matrix products' loops are Thumb-2 assembly under EDGEOSC_ASM
 * (edgeosc_matrix_dsp.S, declared here), in C otherwise.
 * Compiled inside edgeosc_ops.c (it includes this file), not alone. */
#include "edgeosc_dsp.h"

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
/* block_dots in Thumb-2 assembly (edgeosc_matrix_dsp.S): its accumulators in eight registers, two groups a trip, the
 * loads in runs of LDR; the pairs from w until acc reaches acc_end */
void edgeosc_block_dots_asm(const int32_t *x, const int32_t *x_end, const int8_t *w, int32_t *acc,
                            const int32_t *acc_end);

typedef char unit_chunk_is_16[UNIT_CHUNK == 16 ? 1 : -1]; /* the assembly's stores: 64 bytes a row */
#endif

/* acc[r UNIT_CHUNK + 2 i + j] = bias + row r . unit 2 i + j for rows r < 4 (widen's four-row layout) and `pairs`
 * packed unit pairs of `groups` groups (even) */
static void block_dots(const int32_t *x, const int8_t *w, int32_t groups, int32_t pairs, int32_t *acc) {
#if EDGEOSC_ASM
  edgeosc_block_dots_asm(x, x + 8 * groups, w, acc, acc + 2 * pairs);
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
/* row_dots' pairs of pairs in Thumb-2 assembly (edgeosc_matrix_dsp.S): four units' sums in registers, two groups a
 * trip, the loads in one run of LDR, `quads` pairs of unit pairs; row_quads16 on weights unpacked at code generation
 * (each packed word as its two SXTB16 halves: a group is two runs of loads and eight SMLAD, 20 cycles for 16 MACs
 * against 23) */
void edgeosc_row_quads_asm(const int32_t *x, const int32_t *x_end, const int8_t *w, int32_t *acc, int32_t quads);
void edgeosc_row_quads16_asm(const int32_t *x, const int32_t *x_end, const int8_t *w, int32_t *acc, int32_t quads);
#endif

/* row_dots on weights unpacked at code generation (pack_weights(..., w16=True)): a group's four words per pair are
 * (unit 0, unit 1) x (even, odd) int16 pairs, straight to SMLAD */
static void row_dots16(const int32_t *x, const int8_t *w, int32_t groups, int32_t pairs, int32_t *acc) {
  const int32_t *xp, *const x_end = x + 2 * groups;
  int32_t i = 0;
#if EDGEOSC_ASM
  if (pairs >= 2) {
    edgeosc_row_quads16_asm(x, x_end, w, acc, pairs >> 1);
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
    edgeosc_row_quads_asm(x, x_end, w, acc, pairs >> 1);
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
static int edgeosc_fc_dsp(const EdgeoscFcParams *p, const int8_t *in, int8_t *out, int32_t *wide) {
  const int32_t D = p->depth, U = p->units;
  Output o;
  int32_t r;
  if (!wide || !(p->packed || U == 1)) return 0; /* the reference loops: no packed weights */
  o = fc_output(p, wide);
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
    return 1;
  }
  if (p->rows == 1) { /* one row: weights unpacked at code generation (edgeosc_ops.h), no SXTB16 */
    widen(&in, 1, D, 2 * ((D + 7) >> 3), wide);
    widened_row_times_weights16(wide, p->packed, D, U, &o, out);
    return 1;
  }
  matrix_times_weights(fc_row, p, in, p->rows, D, U, p->packed, &o, out, wide, 0);
  return 1;
}

/* scratch: the widened rows, the four receptive fields (K bytes each), prepare_requant's constants */
static int edgeosc_conv2d_dsp(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *wide) {
  const int32_t K = p->k_h * p->k_w * p->in_c, C = p->out_c;
  int8_t *const fields = (int8_t *)(wide + EDGEOSC_WIDE_WORDS(K));
  const int32_t *k;
  Output q;
  if (!wide || !p->packed) return 0; /* the reference loops: no packed weights */
  k = p->rq.dsp ? p->rq.dsp : prepare_requant(&p->rq, C, wide + EDGEOSC_WIDE_WORDS(K) + K);
  q.rq = &p->rq, q.k = k, q.zp_out = p->zp_out, q.lo = p->act_min, q.hi = p->act_max;
  if (p->out_h * p->out_w == 1) { /* one output pixel (a stream's stem): weights unpacked as a one-row layer's */
    const int8_t *const field = conv_row(p, in, 0, fields);
    widen(&field, 1, K, 2 * ((K + 7) >> 3), wide);
    widened_row_times_weights16(wide, p->packed, K, C, &q, out);
    return 1;
  }
  matrix_times_weights(conv_row, p, in, p->out_h * p->out_w, K, C, p->packed, &q, out, wide, fields);
  return 1;
}

/* sibling one-row layers that read the same row (edgeosc_fc_group_int8): the row widened once, each layer's cost then
 * its product's and requantization's */
static int edgeosc_fc_group_dsp(int32_t n, const EdgeoscFcParams *const *p, const int8_t *in, int8_t *const *out,
                         int32_t *scratch) {
  int32_t i, one_row = scratch != 0;
  for (i = 0; i < n; ++i) one_row &= p[i]->rows == 1 && p[i]->packed != 0 && p[i]->depth == p[0]->depth;
  if (!one_row) return 0;
  widen(&in, 1, p[0]->depth, 2 * ((p[0]->depth + 7) >> 3), scratch);
  for (i = 0; i < n; ++i) {
    const Output o = fc_output(p[i], scratch);
    widened_row_times_weights16(scratch, p[i]->packed, p[i]->depth, p[i]->units, &o, out[i]);
  }
  return 1;
}
#endif
