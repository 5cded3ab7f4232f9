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
 * output range is int8's whole (a ReLU's output zero point -128 gives it). Four channels at a time:
 *  1. planes: the input as int16, padded with zp_in (the zero point is folded into the packed bias, and the
 *     padding adds nothing: TFLite's skipped taps), in slots per pair of output rows j, padded column px and
 *     channel k, each two words: A = rows (2j, 2j + 1), B = rows (2j + 2, 2j + 3) (a row pair is stored twice, as
 *     a slot's A and the slot above's B, so that a slot is one LDRD);
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

/* Two rows' words of four channels (x0 above x1) as each channel's int16 pair of the two rows, channels 0 to 3 */
static inline void dw3_pairs(int32_t x0, int32_t x1, int32_t *v) {
  const int32_t e0 = __sxtb16(x0), e1 = __sxtb16(x1), o0 = edgeosc_sxtb16_ror8(x0), o1 = edgeosc_sxtb16_ror8(x1);
  v[0] = edgeosc_pack_bottoms(e0, e1), v[1] = edgeosc_pack_bottoms(o0, o1);
  v[2] = edgeosc_pack_tops(e0, e1), v[3] = edgeosc_pack_tops(o0, o1);
}

/* Row pair j of the four channels at x (padded row 0 of a column) into slot s: its A (j < J) and the slot above's B
 * (j > 0), a row outside the image at zp_in */
static void dw3_row_pair(const EdgeoscConvParams *p, const int8_t *x, int32_t j, int32_t *s, int32_t W, int32_t J) {
  const int32_t row = p->in_w * p->in_c, iy = 2 * j - p->pad_top;
  const int32_t zp4 = (int32_t)(((uint32_t)p->zp_in & 0xFFu) * 0x01010101u);
  int32_t *const t = s - 8 * W, v[4];
  dw3_pairs(iy >= 0 && iy < p->in_h ? edgeosc_read4(x + 2 * j * row) : zp4,
            iy + 1 >= 0 && iy + 1 < p->in_h ? edgeosc_read4(x + (2 * j + 1) * row) : zp4, v);
  if (j < J) s[0] = v[0], s[2] = v[1], s[4] = v[2], s[6] = v[3];
  if (j > 0) t[1] = v[0], t[3] = v[1], t[5] = v[2], t[7] = v[3];
}

/* step 1 for the four channels from c in the image's columns (the padding's, all zp_in, are written once a call):
 * the row pairs wholly inside the image in a loop without tests, the others (first and last) apart */
/* noinline: inlined into its caller it ran 2% slower (gcc 12, -O2) */
__attribute__((noinline)) static void depthwise3x3_planes(const EdgeoscConvParams *p, const int8_t *in, int32_t c,
                                                         int32_t *slots) {
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
        int32_t v[4];
        dw3_pairs(edgeosc_read4(r), edgeosc_read4(r + row), v);
        a[0] = b[0] = v[0], a[2] = b[2] = v[1], a[4] = b[4] = v[2], a[6] = b[6] = v[3];
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
      for (; r != end; o += row)
        for (x = 0; x < p->out_w; ++x, r += 2, o += C)
          *(edgeosc_unaligned_i32 *)(void *)o = r[0], *(edgeosc_unaligned_i32 *)(void *)(o + row) = r[1];
      for (x = 0; x < (p->out_h & 1) * p->out_w; ++x, r += 2, o += C) *(edgeosc_unaligned_i32 *)(void *)o = r[0];
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
