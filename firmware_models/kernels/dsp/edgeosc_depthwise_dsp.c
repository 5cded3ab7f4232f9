/* DEPTHWISE_CONV_2D on the DSP path: the same integers as the reference loops of edgeosc_ops.c, bit for bit.
 * Compiled inside edgeosc_ops.c (it includes this file), not alone. */
#include "edgeosc_dsp.h"

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
 * output range is int8's whole (a ReLU's output zero point -128 gives it), out_h <= 30 and code generation found the
 * rounding below exact for every channel (export/c/ops.py depthwise3x3_packs). Four channels at a time:
 *  1. planes: the input as int16 row pairs, padded with zp_in (the zero point is folded into the packed bias, and the
 *     padding adds nothing: TFLite's skipped taps), each row pair stored once: the word of padded column px, row pair
 *     j (rows 2j, 2j + 1) and channel k at DW3_AT(J, px, j) + k, a 256-byte block per column whose last slot holds row
 *     pair J - 1 (row pair J: the next block's first);
 *  2. per channel, column by column, output rows 2j and 2j + 1 of column ox from A = row pair j and B = row pair j + 1
 *     of columns ox .. ox + 2 (one slot pointer: the next row pair 16 bytes on, the next column 256), with the
 *     weights as pairs W = (w[0][kx], w[1][kx]) and V = (w[1][kx], w[2][kx]): row 2j takes SMLAD(A, W) +
 *     SMLABT(B, V), row 2j + 1 SMLATB(A, W) + SMLAD(B, V), four instructions for six MACs per tap column; a column
 *     ends where the slot pointer reaches its block's end; both rows requantized into an 8-byte record per (ox, j):
 *     row 2j's four channels, then row 2j + 1's (an odd out_h computes a row more, in the padding, and drops it);
 *  3. each record's two words copied to the NHWC output.
 * The requantization is requant_zp's with its last three steps as one SMMLAR: after x = SRDHM(acc, M) (SMMLAR by 2M),
 * zp_out + round(x / 2^r), ties away from zero, is SMMLAR(x, 2^(32-r) + 1, zp_out) = zp_out + floor((x 2^(32-r) + x +
 * 2^31) / 2^32) for 2 <= r (the factor fits) and |x| < 2^(32-r): the product's low word is a multiple of 2^(32-r), 0
 * exactly at a tie, so adding x moves the floor only at a negative tie, down; for |x| >= 2^(32-r) and r <= 12 both
 * clamp alike (|x / 2^r| >= 256). |x| <= |acc| <= |bias - zp_in sum w| + 128 sum |w|, which code generation bounds. */
#define DW3_PAIRS(out_h) (((out_h) + 1) >> 1)
#define DW3_AT(J, px, j) (64 * (px) + 4 * (16 - (J) + (j)))

typedef struct { /* dw3_rows's job; its field order is the assembly's */
  const int32_t *slots; /* channel k's word of column block 0 */
  int8_t *records;      /* channel k's byte of record 0 */
  int32_t m2, w[6];     /* edgeosc_dsp_requant's 2M; W0, W1, W2, V0, V1, V2 */
  int32_t bias, kc, cols, skip, zp; /* bias - zp_in sum w; 2^(32 - right) + 1; out_w; 16 (16 - J) bytes; zp_out */
} Dw3Job;

#if EDGEOSC_ASM
/* one pass: rows 2j and 2j + 1 of column ox (r0 at its row pair j, r1 at its record) */
#define DW3_PASS                                                                                                  \
  "ldr r11, [sp]\n\tldr r9, [r0], #16\n\tldr r10, [r0]\n\t" /* the bias; A and B of column ox */                  \
  "smlatb r12, r9, r3, r11\n\tsmlad r11, r9, r3, r11\n\tsmlabt r11, r10, r6, r11\n\tsmlad r12, r10, r6, r12\n\t"  \
  "ldr r9, [r0, #240]\n\tldr r10, [r0, #256]\n\t" /* column ox + 1 */                                              \
  "smlad r11, r9, r4, r11\n\tsmlatb r12, r9, r4, r12\n\tsmlabt r11, r10, r7, r11\n\tsmlad r12, r10, r7, r12\n\t"  \
  "ldr r9, [r0, #496]\n\tldr r10, [r0, #512]\n\t" /* column ox + 2 */                                              \
  "smlad r11, r9, r5, r11\n\tsmlatb r12, r9, r5, r12\n\tsmlabt r11, r10, r8, r11\n\tsmlad r12, r10, r8, r12\n\t"  \
  "smmlar r11, r11, r2, r11\n\tsmmlar r12, r12, r2, r12\n\tldr r9, [sp, #4]\n\t" /* 2^(32 - right) + 1 */          \
  "smmlar r11, r11, r9, lr\n\tsmmlar r12, r12, r9, lr\n\t"                                                        \
  "ssat r11, #8, r11\n\tssat r12, #8, r12\n\tstrb r12, [r1, #4]\n\tstrb r11, [r1], #8\n\t"

/* one channel's columns (Dw3Job); 14 registers: slot, record, 2M, six weights, A, B, two sums, zp_out; two passes a
 * loop, a column's end tested after each (the slot pointer's bits 4-7 all zero) */
__attribute__((naked, noinline)) static void dw3_rows(const Dw3Job *job __attribute__((unused))) {
  __asm__("push {r4-r11, lr}\n\t"
          "add r12, r0, #36\n\tldm r12, {r1-r4, lr}\n\tpush {r1-r4}\n\t" /* [sp]: bias kc cols skip; lr zp_out */
          "ldm r0, {r0-r8}\n\t"
          "2:\n\tldr r9, [sp, #12]\n\tadd r0, r0, r9\n" /* column ox's row pair 0 */
          "1:\n\t" DW3_PASS "tst r0, #0xF0\n\tbeq 3f\n\t" DW3_PASS "tst r0, #0xF0\n\tbne 1b\n"
          "3:\n\tldr r9, [sp, #8]\n\tsubs r9, r9, #1\n\tstr r9, [sp, #8]\n\tbne 2b\n\t"
          "add sp, sp, #16\n\tpop {r4-r11, pc}");
}
#else
static inline int8_t dw3_out(int32_t acc, const Dw3Job *job) {
  return (int8_t)__ssat(edgeosc_smmulr(edgeosc_smmulr(acc, job->m2) + acc, job->kc) + job->zp, 8);
}

static void dw3_rows(const Dw3Job *job) {
  const int32_t *slot = job->slots, *const w = job->w;
  int8_t *rec = job->records;
  int32_t ox, k;
  for (ox = 0; ox < job->cols; ++ox) {
    slot += job->skip >> 2;
    do {
      int32_t y0 = job->bias, y1 = job->bias;
      for (k = 0; k < 3; ++k) {
        const int32_t a = slot[64 * k], b = slot[64 * k + 4];
        y0 = __smlabt(b, w[3 + k], __smlad(a, w[k], y0));
        y1 = __smlad(b, w[3 + k], __smlatb(a, w[k], y1));
      }
      rec[0] = dw3_out(y0, job), rec[4] = dw3_out(y1, job);
      slot += 4, rec += 8;
    } while (((uintptr_t)slot & 0xF0u) != 0);
  }
}
#endif

/* Two rows' words of four channels (x0 above x1) as each channel's int16 pair of the two rows, channels 0 to 3: the
 * words' halves paired (PKHBT, PKHTB), then each pair's two bytes widened (SXTB16) */
static inline void dw3_pairs(int32_t x0, int32_t x1, int32_t *v) {
  const int32_t lo = edgeosc_pack_bottoms(x0, x1), hi = edgeosc_pack_tops(x0, x1);
  v[0] = __sxtb16(lo), v[1] = edgeosc_sxtb16_ror8(lo), v[2] = __sxtb16(hi), v[3] = edgeosc_sxtb16_ror8(hi);
}

/* The row pairs' bounds (pad_top 0 or 1): lo the first wholly inside the image (row pair 0 is (padding, row 0) when
 * pad_top is 1), hi past the last, then one more (row in_h - 1, padding) where edge, those past it all padding */
static inline void dw3_bounds(const EdgeoscConvParams *p, int32_t *lo, int32_t *hi, int32_t *edge) {
  const int32_t J = DW3_PAIRS(p->out_h);
  *lo = p->pad_top, *hi = (p->pad_top + p->in_h) >> 1, *edge = ((p->pad_top + p->in_h) & 1) && *hi <= J;
}

/* step 1 for the four channels from c in the image's columns (the row pairs wholly in the padding are written once a
 * call): the row pairs wholly inside the image in a loop without tests, the edges apart */
__attribute__((noinline)) static void depthwise3x3_planes(const EdgeoscConvParams *p, const int8_t *in, int32_t c,
                                                         int32_t *planes) {
  const int32_t J = DW3_PAIRS(p->out_h), row = p->in_w * p->in_c, zp4 = (int32_t)(((uint32_t)p->zp_in & 0xFFu) * 0x01010101u);
  int32_t ix, j, lo, hi, edge;
  dw3_bounds(p, &lo, &hi, &edge);
  for (ix = 0; ix < p->in_w; ++ix) {
    const int8_t *r = in + ix * p->in_c + c + (lo ? row : 0); /* row 2 lo - pad_top */
    int32_t *s = planes + DW3_AT(J, ix + p->pad_left, lo);
    if (lo) dw3_pairs(zp4, edgeosc_read4(r - row), s - 4);
    for (j = hi - lo; j > 0; --j, r += 2 * row, s += 4) {
      const int32_t x0 = edgeosc_read4(r), x1 = edgeosc_read4(r + row);
      dw3_pairs(x0, x1, s);
    }
    if (edge) dw3_pairs(edgeosc_read4(r), zp4, s);
  }
}

static void depthwise3x3_dsp(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  const int32_t C = p->out_c, W = p->out_w + 2, J = DW3_PAIRS(p->out_h), row = p->out_w * C;
  const int32_t zp2 = edgeosc_pair(p->zp_in), n = p->out_h >> 1;
  int32_t *const planes = (int32_t *)(((uintptr_t)scratch + 255u) & ~(uintptr_t)255u); /* blocks on 256 bytes */
  int8_t *const records = (int8_t *)(void *)(planes + 64 * W + 4);
  int32_t c, k, x, j, lo, hi, edge;
  dw3_bounds(p, &lo, &hi, &edge);
  for (x = 0; x < W; ++x) { /* the padding: the border columns' row pairs, the image columns' past the last row */
    const int32_t inside = x >= p->pad_left && x < p->pad_left + p->in_w;
    int32_t *s = planes + DW3_AT(J, x, inside ? hi + edge : 0), *const end = planes + DW3_AT(J, x, J) + 4;
    for (; s != end; s += 4) s[0] = zp2, s[1] = zp2, s[2] = zp2, s[3] = zp2;
  }
  for (c = 0; c < C; c += 4) {
    depthwise3x3_planes(p, in, c, planes);
    for (k = 0; k < 4; ++k) {
      const int32_t *const pk = (const int32_t *)(const void *)p->packed + 7 * (c + k);
      const int32_t *const q = p->rq.dsp + (p->rq.per_channel ? 2 * (c + k) : 0);
      Dw3Job job;
      job.slots = planes + k, job.records = records + k, job.m2 = q[0];
      job.w[0] = pk[0], job.w[1] = pk[1], job.w[2] = pk[2], job.w[3] = pk[3], job.w[4] = pk[4], job.w[5] = pk[5];
      job.bias = pk[6], job.kc = (int32_t)((1u << (32 - q[1])) + 1u), job.cols = p->out_w, job.skip = 16 * (16 - J);
      job.zp = p->zp_out;
      dw3_rows(&job);
    }
    { /* step 3: row 2j's word of each record, then row 2j + 1's (but past the last row) */
      const int32_t *r = (const int32_t *)(const void *)records;
      for (x = 0; x < p->out_w; ++x) {
        int8_t *o = out + x * C + c;
        for (j = n; j > 0; --j, r += 2, o += 2 * row) {
          const int32_t y0 = r[0], y1 = r[1];
          *(edgeosc_unaligned_i32 *)(void *)o = y0, *(edgeosc_unaligned_i32 *)(void *)(o + row) = y1;
        }
        if (p->out_h & 1) *(edgeosc_unaligned_i32 *)(void *)o = r[0], r += 2;
      }
    }
  }
}

static int edgeosc_depthwise_dsp(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  if (scratch && p->packed) { /* code generation packed it for the planes (export/c/ops.py depthwise3x3_packs) */
    depthwise3x3_dsp(p, in, out, scratch);
    return 1;
  }
  if (p->out_c != p->in_c || p->in_c % 4 || p->k_h * p->k_w > DEPTHWISE_MAX_TAPS) return 0;
  depthwise_dsp(p, in, out);
  return 1;
}
#endif
