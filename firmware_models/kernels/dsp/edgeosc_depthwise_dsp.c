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
 *  2. per channel, column by column, output rows from the row pairs of columns ox .. ox + 2 (one slot pointer: the next
 *     row pair 16 bytes on, the next column 256), with the weights as pairs W = (w[0][kx], w[1][kx]) and
 *     V = (w[1][kx], w[2][kx]): from A = row pair j and B = j + 1, row 2j takes SMLAD(A, W) + SMLABT(B, V) and row
 *     2j + 1 SMLATB(A, W) + SMLAD(B, V); four rows a pass (rows 2j + 2 and 2j + 3 the same from B and C = j + 2: eight
 *     instructions for twelve MACs per tap column), row pair 0 alone first where J is odd; a column ends where the
 *     slot pointer reaches its block's end; the rows requantized into an 8-byte record per (ox, j): row 2j's four
 *     channels, then row 2j + 1's (an odd out_h computes a row more, in the padding, and drops it);
 *  3. each record's two words copied to the NHWC output.
 * The requantization is requant_zp's with its last three steps as one SMMLAR: after x = SRDHM(acc, M) (SMMLAR by 2M),
 * zp_out + round(x / 2^r), ties away from zero, is SMMLAR(x, 2^(32-r) + 1, zp_out) = zp_out + floor((x 2^(32-r) + x +
 * 2^31) / 2^32) for 2 <= r (the factor fits) and |x| < 2^(32-r): the product's low word is a multiple of 2^(32-r), 0
 * exactly at a tie, so adding x moves the floor only at a negative tie, down; for |x| >= 2^(32-r) and r <= 12 both
 * clamp alike (|x / 2^r| >= 256). |x| <= |acc| <= |bias - zp_in sum w| + 128 sum |w|, which code generation bounds. */
#define DW3_PAIRS(out_h) (((out_h) + 1) >> 1)
#define DW3_AT(J, px, j) (64 * (px) + 4 * (16 - (J) + (j)))

typedef struct { /* dw3_rows's job; its field order is the assembly's */
  int32_t w[6];         /* W0, W1, W2, V0, V1, V2 */
  const int32_t *slots; /* channel k's word of column block 0 */
  int32_t bias, m2, kc, zp; /* bias - zp_in sum w; edgeosc_dsp_requant's 2M; 2^(32 - right) + 1; zp_out */
  int8_t *records;      /* channel k's byte of record 0 */
  int32_t skip, cols;   /* 16 (16 - J) bytes; out_w */
} Dw3Job;

#if EDGEOSC_ASM
/* Two output rows 2j, 2j + 1 (r0 at row pair j, on 16 bytes): A = row pair j and B = j + 1 of each tap column in
 * r9, r10, the sums in r11, r12, the constants read from the stack, the record pointer read and written back */
#define DW3_PAIR                                                                                                       \
  "ldr r11, [sp]\n\tldr r9, [r0], #16\n\tldr r10, [r0]\n\t" /* the bias; A and B of column ox */                       \
  "smlatb r12, r9, r3, r11\n\tsmlad r11, r9, r3, r11\n\tsmlabt r11, r10, r6, r11\n\tsmlad r12, r10, r6, r12\n\t"       \
  "ldr r9, [r0, #240]\n\tldr r10, [r0, #256]\n\t" /* column ox + 1 */                                                  \
  "smlad r11, r9, r4, r11\n\tsmlatb r12, r9, r4, r12\n\tsmlabt r11, r10, r7, r11\n\tsmlad r12, r10, r7, r12\n\t"       \
  "ldr r9, [r0, #496]\n\tldr r10, [r0, #512]\n\t" /* column ox + 2 */                                                  \
  "smlad r11, r9, r5, r11\n\tsmlatb r12, r9, r5, r12\n\tsmlabt r11, r10, r8, r11\n\tsmlad r12, r10, r8, r12\n\t"       \
  "ldr r1, [sp, #4]\n\tldr r2, [sp, #8]\n\tldr lr, [sp, #12]\n\tldr r9, [sp, #16]\n\t" /* 2M, 2^(32-r)+1, zp, rec */   \
  "smmlar r11, r11, r1, r11\n\tsmmlar r12, r12, r1, r12\n\tsmmlar r11, r11, r2, lr\n\tsmmlar r12, r12, r2, lr\n\t"     \
  "ssat r11, #8, r11\n\tssat r12, #8, r12\n\tstrb r12, [r9, #4]\n\tstrb r11, [r9], #8\n\tstr r9, [sp, #16]\n\t"

/* Four output rows 2j .. 2j + 3 (r0 at row pair j, on 32 bytes): row pairs j, j + 1, j + 2 of each tap column (A, B, C)
 * in r9, r10, r1, eight instructions for twelve MACs (rows 2j + 2 and 2j + 3 as rows 2j and 2j + 1 from B and C), the
 * sums in r11, r12, r2, lr; then the constants into the data registers, the record pointer into the first */
#define DW3_TAPS(w, v)                                                                                                 \
  "smlad r11, r9, " w ", r11\n\tsmlatb r12, r9, " w ", r12\n\t"                                                        \
  "smlad r2, r10, " w ", r2\n\tsmlatb lr, r10, " w ", lr\n\t"                                                          \
  "smlabt r11, r10, " v ", r11\n\tsmlad r12, r10, " v ", r12\n\tsmlabt r2, r1, " v ", r2\n\tsmlad lr, r1, " v ", lr\n\t"
#define DW3_QUAD                                                                                                       \
  "ldr lr, [sp]\n\tldr r9, [r0], #32\n\tldr r10, [r0, #-16]\n\tldr r1, [r0]\n\t" /* the bias; column ox */             \
  "smlad r11, r9, r3, lr\n\tsmlatb r12, r9, r3, lr\n\tsmlad r2, r10, r3, lr\n\tsmlatb lr, r10, r3, lr\n\t"             \
  "smlabt r11, r10, r6, r11\n\tsmlad r12, r10, r6, r12\n\tsmlabt r2, r1, r6, r2\n\tsmlad lr, r1, r6, lr\n\t"           \
  "ldr r9, [r0, #224]\n\tldr r10, [r0, #240]\n\tldr r1, [r0, #256]\n\t" DW3_TAPS("r4", "r7")                           \
  "ldr r9, [r0, #480]\n\tldr r10, [r0, #496]\n\tldr r1, [r0, #512]\n\t" DW3_TAPS("r5", "r8")                           \
  "ldr r9, [sp, #4]\n\tldr r10, [sp, #8]\n\tldr r1, [sp, #12]\n\t"                                                     \
  "smmlar r11, r11, r9, r11\n\tsmmlar r12, r12, r9, r12\n\tsmmlar r2, r2, r9, r2\n\tsmmlar lr, lr, r9, lr\n\t"         \
  "smmlar r11, r11, r10, r1\n\tsmmlar r12, r12, r10, r1\n\tsmmlar r2, r2, r10, r1\n\tsmmlar lr, lr, r10, r1\n\t"       \
  "ssat r11, #8, r11\n\tssat r12, #8, r12\n\tssat r2, #8, r2\n\tssat lr, #8, lr\n\tldr r9, [sp, #16]\n\t"              \
  "strb r11, [r9], #16\n\tstrb r12, [r9, #-12]\n\tstrb r2, [r9, #-8]\n\tstrb lr, [r9, #-4]\n\tstr r9, [sp, #16]\n\t"

/* one channel's columns (Dw3Job): per column, row pair 0 alone where J is odd (the slot pointer's bit 4), then four
 * rows a pass until the block's end (the slot pointer's bits 4-7 all zero); 14 registers: slot, six weights, three
 * data words, four sums; on the stack the bias, 2M, 2^(32 - r) + 1, zp_out, the record pointer, skip, columns left */
__attribute__((naked, noinline)) static void dw3_rows(const Dw3Job *job __attribute__((unused))) {
  __asm__("push {r4-r11, lr}\n\t"
          "ldr lr, [r0, #52]\n\tldm r0!, {r3-r8}\n\tldm r0, {r0-r2, r9-r12}\n\tpush {r1, r2, r9-r12, lr}\n"
          "1:\n\tldr r9, [sp, #20]\n\tadd r0, r0, r9\n\t" /* column ox's row pair 0 */
          "tst r0, #16\n\tbeq 2f\n\t" DW3_PAIR "tst r0, #0xF0\n\tbeq 3f\n"
          "2:\n\t" DW3_QUAD "tst r0, #0xF0\n\tbne 2b\n"
          "3:\n\tldr r9, [sp, #24]\n\tsubs r9, r9, #1\n\tstr r9, [sp, #24]\n\tbne 1b\n\t"
          "add sp, sp, #28\n\tpop {r4-r11, pc}");
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

typedef struct { /* dw3_planes's job: step 1 for four channels; its field order is the assembly's */
  const int8_t *x; /* image column 0's row 2 lo - pad_top, channel c */
  int32_t *s;      /* the plane word of padded column pad_left, row pair lo, channel 0 */
  int32_t row, n, zp4, step, cols; /* in_w in_c; hi - lo row pairs wholly inside; zp_in in each byte; in_c; in_w */
  int32_t lo, edge; /* row pair 0 is (padding, row 0) (pad_top 1); row pair hi is (row in_h - 1, padding) */
} Dw3Planes;

typedef struct { /* dw3_copy's job: step 3; its field order is the assembly's */
  const int32_t *records;
  int8_t *out;                     /* channel c of pixel 0 */
  int32_t row, step, cols, n, odd; /* out_w out_c; out_c; out_w; out_h >> 1; out_h & 1 */
} Dw3Copy;

#if EDGEOSC_ASM
/* Two rows' words of four channels (a above b) as each channel's int16 pair of the two rows in r4-r7: the words'
 * halves paired (PKHBT, PKHTB), then each pair's two bytes widened (SXTB16); then stored, the slot pointer stepped */
#define DW3_WIDEN(a, b)                                                                                                \
  "pkhbt r6, " a ", " b ", lsl #16\n\tpkhtb r7, " b ", " a ", asr #16\n\t"                                             \
  "sxtb16 r4, r6\n\tsxtb16 r5, r6, ror #8\n\tsxtb16 r6, r7\n\tsxtb16 r7, r7, ror #8\n\t"
#define DW3_STORE "str r4, [r1], #16\n\tstr r5, [r1, #-12]\n\tstr r6, [r1, #-8]\n\tstr r7, [r1, #-4]\n\t"

/* Dw3Planes: per column, row pair 0 where lo, then two row pairs a loop (their four rows' loads in one run: r0 the
 * even rows, lr the odd), the odd one, row pair hi where edge */
__attribute__((naked, noinline)) static void dw3_planes(const Dw3Planes *job __attribute__((unused))) {
  __asm__("push {r4-r11, lr}\n\t"
          "ldm r0, {r0-r8}\n\tpush {r0, r1, r3, r5-r8}\n\tmov r8, r4\n" /* [sp]: x s n step cols lo edge; r8 zp4 */
          "1:\n\tsub r9, r0, r2\n\tldr r3, [sp, #20]\n\tcbz r3, 2f\n\t"
          "ldr r10, [r9]\n\t" DW3_WIDEN("r8", "r10") "stmdb r1, {r4-r7}\n"
          "2:\n\tadd lr, r0, r2\n\tldr r3, [sp, #8]\n\tsubs r3, r3, #2\n\tblt 4f\n"
          "3:\n\tldr r9, [r0]\n\tldr r10, [lr]\n\tldr r11, [r0, r2, lsl #1]\n\tldr r12, [lr, r2, lsl #1]\n\t"
          "add r0, r0, r2, lsl #2\n\tadd lr, lr, r2, lsl #2\n\t"
          DW3_WIDEN("r9", "r10") DW3_STORE DW3_WIDEN("r11", "r12") DW3_STORE
          "subs r3, r3, #2\n\tbge 3b\n"
          "4:\n\tadds r3, r3, #2\n\tbeq 5f\n\t"
          "ldr r9, [r0]\n\tldr r10, [lr]\n\tadd r0, r0, r2, lsl #1\n\t" DW3_WIDEN("r9", "r10") DW3_STORE
          "5:\n\tldr r3, [sp, #24]\n\tcbz r3, 6f\n\t"
          "ldr r9, [r0]\n\t" DW3_WIDEN("r9", "r8") DW3_STORE
          "6:\n\tldrd r0, r1, [sp]\n\tldr r3, [sp, #12]\n\tadd r0, r0, r3\n\tadd r1, r1, #256\n\tstrd r0, r1, [sp]\n\t"
          "ldr r3, [sp, #16]\n\tsubs r3, r3, #1\n\tstr r3, [sp, #16]\n\tbne 1b\n\t"
          "add sp, sp, #28\n\tpop {r4-r11, pc}");
}

/* Dw3Copy: per column, two records a loop (r1 the output, lr two rows) */
__attribute__((naked, noinline)) static void dw3_copy(const Dw3Copy *job __attribute__((unused))) {
  __asm__("push {r4-r11, lr}\n\t"
          "ldm r0, {r0-r2, r9-r12}\n\tmov r8, r1\n\tlsl lr, r2, #1\n" /* r8 the column, r9 step, r10 cols, r11 n */
          "1:\n\tmov r1, r8\n\tsubs r3, r11, #2\n\tblt 3f\n"
          "2:\n\tldmia r0!, {r4-r7}\n\tstr r4, [r1]\n\tstr r5, [r1, r2]\n\tadd r1, r1, lr\n\tsubs r3, r3, #2\n\t"
          "str r6, [r1]\n\tstr r7, [r1, r2]\n\tadd r1, r1, lr\n\tbge 2b\n"
          "3:\n\tadds r3, r3, #2\n\tbeq 4f\n\t"
          "ldmia r0!, {r4, r5}\n\tstr r4, [r1]\n\tstr r5, [r1, r2]\n\tadd r1, r1, lr\n"
          "4:\n\tcmp r12, #0\n\tbeq 5f\n\t" /* the last row, without the one past it */
          "ldmia r0!, {r4, r5}\n\tstr r4, [r1]\n"
          "5:\n\tadd r8, r8, r9\n\tsubs r10, r10, #1\n\tbne 1b\n\t"
          "pop {r4-r11, pc}");
}
#else
/* Two rows' words of four channels (x0 above x1) as each channel's int16 pair of the two rows, channels 0 to 3: the
 * words' halves paired (PKHBT, PKHTB), then each pair's two bytes widened (SXTB16) */
static inline void dw3_pairs(int32_t x0, int32_t x1, int32_t *v) {
  const int32_t lo = edgeosc_pack_bottoms(x0, x1), hi = edgeosc_pack_tops(x0, x1);
  v[0] = __sxtb16(lo), v[1] = edgeosc_sxtb16_ror8(lo), v[2] = __sxtb16(hi), v[3] = edgeosc_sxtb16_ror8(hi);
}

static void dw3_planes(const Dw3Planes *job) {
  const int8_t *x = job->x;
  int32_t *s = job->s, ix, j;
  for (ix = 0; ix < job->cols; ++ix, x += job->step, s += 64) {
    const int8_t *r = x;
    int32_t *t = s;
    if (job->lo) dw3_pairs(job->zp4, edgeosc_read4(r - job->row), t - 4);
    for (j = job->n; j > 0; --j, r += 2 * job->row, t += 4) dw3_pairs(edgeosc_read4(r), edgeosc_read4(r + job->row), t);
    if (job->edge) dw3_pairs(edgeosc_read4(r), job->zp4, t);
  }
}

static void dw3_copy(const Dw3Copy *job) {
  const int32_t *r = job->records;
  int8_t *col = job->out;
  int32_t x, j;
  for (x = 0; x < job->cols; ++x, col += job->step) {
    int8_t *o = col;
    for (j = job->n; j > 0; --j, r += 2, o += 2 * job->row)
      *(edgeosc_unaligned_i32 *)(void *)o = r[0], *(edgeosc_unaligned_i32 *)(void *)(o + job->row) = r[1];
    if (job->odd) *(edgeosc_unaligned_i32 *)(void *)o = r[0], r += 2;
  }
}
#endif

/* 3 x 3 planes: the padding (the border columns' row pairs, the image columns' past the last row) once a call, then
 * per four channels steps 1 to 3 (the row pairs' bounds for pad_top 0 or 1: lo the first wholly inside the image, hi
 * past the last, then one more, (row in_h - 1, padding), where edge; those past it all padding) */
static void depthwise3x3_dsp(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  const int32_t C = p->out_c, W = p->out_w + 2, J = DW3_PAIRS(p->out_h), row = p->in_w * p->in_c;
  const int32_t zp2 = edgeosc_pair(p->zp_in), lo = p->pad_top, hi = (p->pad_top + p->in_h) >> 1;
  const int32_t edge = ((p->pad_top + p->in_h) & 1) && hi <= J;
  int32_t *const planes = (int32_t *)(((uintptr_t)scratch + 255u) & ~(uintptr_t)255u); /* blocks on 256 bytes */
  int8_t *const records = (int8_t *)(void *)(planes + 64 * W + 4);
  Dw3Planes pl;
  Dw3Copy cp;
  int32_t c, k, x;
  for (x = 0; x < W; ++x) {
    const int32_t inside = x >= p->pad_left && x < p->pad_left + p->in_w;
    int32_t *s = planes + DW3_AT(J, x, inside ? hi + edge : 0), *const end = planes + DW3_AT(J, x, J) + 4;
    for (; s != end; s += 4) s[0] = zp2, s[1] = zp2, s[2] = zp2, s[3] = zp2;
  }
  pl.s = planes + DW3_AT(J, p->pad_left, lo), pl.row = row, pl.n = hi - lo, pl.step = p->in_c, pl.cols = p->in_w;
  pl.zp4 = (int32_t)(((uint32_t)p->zp_in & 0xFFu) * 0x01010101u), pl.lo = lo, pl.edge = edge;
  cp.records = (const int32_t *)(const void *)records, cp.row = p->out_w * C, cp.step = C, cp.cols = p->out_w;
  cp.n = p->out_h >> 1, cp.odd = p->out_h & 1;
  for (c = 0; c < C; c += 4) {
    pl.x = in + c + (lo ? row : 0);
    dw3_planes(&pl);
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
    cp.out = out + c;
    dw3_copy(&cp);
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
