/* DEPTHWISE_CONV_2D on the DSP path: the same integers as the reference loops of edgeosc_ops.c, bit for bit. The 3 x 3
 * planes' three steps are Thumb-2 assembly under EDGEOSC_ASM (edgeosc_depthwise_dsp.S, declared here), in C otherwise.
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
 * rounding below exact for every channel (export/c/packing.py depthwise3x3_packs). Four channels at a time:
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
 * clamp alike (|x / 2^r| >= 256). |x| <= |acc| <= |bias - zp_in sum w| + 128 sum |w|, which code generation bounds.
 * A channel at r 0 or 1 (a multiplier of 0.25 or more, which training can give any layer) takes the rows in C
 * (dw3_rows_near): the same sums, requantized exactly another way. */
#define DW3_PAIRS(out_h) (((out_h) + 1) >> 1)
#define DW3_AT(J, px, j) (64 * (px) + 4 * (16 - (J) + (j)))

typedef struct { /* edgeosc_dw3_rows's job; its field order is the assembly's (edgeosc_depthwise_dsp.S) */
  int32_t w[6];         /* W0, W1, W2, V0, V1, V2 */
  const int32_t *slots; /* channel k's word of column block 0 */
  int32_t bias, m2, kc, zp; /* bias - zp_in sum w; edgeosc_dsp_requant's 2M; 2^(32 - right) + 1; zp_out */
  int8_t *records;      /* channel k's byte of record 0 */
  int32_t skip, cols;   /* 16 (16 - J) bytes; out_w */
} Dw3Job;

/* One channel's output rows, column by column (Dw3Job), in C: with near < 0 on the SMMLAR rounding above (the C
 * build's twin of the assembly), else for a channel at shift right r = near of 0 or 1, where the factor 2^(32 - r) + 1
 * passes int32: requant_zp on 2x with right r + 1, since RDBPOT(x, r) = (2x + 2^r - [x < 0]) >> (r + 1) for every
 * r >= 0 (for r >= 1 the two numerators, 2x + 2^r - 1 and 2x + 2^r - 2, differ at an odd one, which no power of two
 * >= 2 divides; for r = 0 it is x + floor((1 - [x < 0]) / 2)). 2x fits: code generation bounds |acc| < 2^30 there. */
__attribute__((always_inline)) static inline int8_t dw3_out(int32_t acc, const Dw3Job *job, int32_t near, int32_t c) {
  const int32_t x = edgeosc_smmulr(acc, job->m2) + acc;
  return (int8_t)__ssat(near < 0 ? edgeosc_smmulr(x, job->kc) + job->zp : __qadd(2 * x + (x >> 31), c) >> (near + 1),
                        8);
}

__attribute__((always_inline)) static inline void dw3_rows_c(const Dw3Job *job, int32_t near) {
  const int32_t *slot = job->slots, *const w = job->w;
  const int32_t c = near < 0 ? 0 : requant_c(near + 1, job->zp);
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
      rec[0] = dw3_out(y0, job, near, c), rec[4] = dw3_out(y1, job, near, c);
      slot += 4, rec += 8;
    } while (((uintptr_t)slot & 0xF0u) != 0);
  }
}

static void dw3_rows_near(const Dw3Job *job, int32_t right) {
  if (right)
    dw3_rows_c(job, 1);
  else
    dw3_rows_c(job, 0);
}

#if EDGEOSC_ASM
/* One channel's output rows on the SMMLAR rounding, in Thumb-2 assembly (edgeosc_depthwise_dsp.S): two rows a pass
 * where J is odd, then four rows a pass (eight instructions for twelve MACs), 14 registers */
void edgeosc_dw3_rows(const Dw3Job *job);
#else
static void edgeosc_dw3_rows(const Dw3Job *job) { dw3_rows_c(job, -1); }
#endif

typedef struct { /* edgeosc_dw3_planes's job: step 1 for four channels; its field order is the assembly's */
  const int8_t *x; /* image column 0's row 2 lo - pad_top, channel c */
  int32_t *s;      /* the plane word of padded column pad_left, row pair lo, channel 0 */
  int32_t row, n, zp4, step, cols; /* in_w in_c; hi - lo row pairs wholly inside; zp_in in each byte; in_c; in_w */
  int32_t lo, edge; /* row pair 0 is (padding, row 0) (pad_top 1); row pair hi is (row in_h - 1, padding) */
} Dw3Planes;

typedef struct { /* edgeosc_dw3_copy's job: step 3; its field order is the assembly's */
  const int32_t *records;
  int8_t *out;                     /* channel c of pixel 0 */
  int32_t row, step, cols, n, odd; /* out_w out_c; out_c; out_w; out_h >> 1; out_h & 1 */
} Dw3Copy;

#if EDGEOSC_ASM
/* Steps 1 and 3 in Thumb-2 assembly (edgeosc_depthwise_dsp.S): the planes per column, two row pairs a loop (their four
 * rows' loads in one run); the records' copy per column, two records a loop */
void edgeosc_dw3_planes(const Dw3Planes *job);
void edgeosc_dw3_copy(const Dw3Copy *job);
#else
/* Two rows' words of four channels (x0 above x1) as each channel's int16 pair of the two rows, channels 0 to 3: the
 * words' halves paired (PKHBT, PKHTB), then each pair's two bytes widened (SXTB16) */
static inline void dw3_pairs(int32_t x0, int32_t x1, int32_t *v) {
  const int32_t lo = edgeosc_pack_bottoms(x0, x1), hi = edgeosc_pack_tops(x0, x1);
  v[0] = __sxtb16(lo), v[1] = edgeosc_sxtb16_ror8(lo), v[2] = __sxtb16(hi), v[3] = edgeosc_sxtb16_ror8(hi);
}

static void edgeosc_dw3_planes(const Dw3Planes *job) {
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

static void edgeosc_dw3_copy(const Dw3Copy *job) {
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
    edgeosc_dw3_planes(&pl);
    for (k = 0; k < 4; ++k) {
      const int32_t *const pk = (const int32_t *)(const void *)p->packed + 7 * (c + k);
      const int32_t *const q = p->rq.dsp + (p->rq.per_channel ? 2 * (c + k) : 0);
      Dw3Job job;
      job.slots = planes + k, job.records = records + k, job.m2 = q[0];
      job.w[0] = pk[0], job.w[1] = pk[1], job.w[2] = pk[2], job.w[3] = pk[3], job.w[4] = pk[4], job.w[5] = pk[5];
      job.bias = pk[6], job.kc = q[1] >= 2 ? (int32_t)((1u << (32 - q[1])) + 1u) : 0, job.cols = p->out_w;
      job.skip = 16 * (16 - J);
      job.zp = p->zp_out;
      if (q[1] >= 2)
        edgeosc_dw3_rows(&job);
      else
        dw3_rows_near(&job, q[1]);
    }
    cp.out = out + c;
    edgeosc_dw3_copy(&cp);
  }
}

static int edgeosc_depthwise_dsp(const EdgeoscConvParams *p, const int8_t *in, int8_t *out, int32_t *scratch) {
  if (scratch && p->packed) { /* code generation packed it for the planes (export/c/packing.py depthwise3x3_packs) */
    depthwise3x3_dsp(p, in, out, scratch);
    return 1;
  }
  if (p->out_c != p->in_c || p->in_c % 4 || p->k_h * p->k_w > DEPTHWISE_MAX_TAPS) return 0;
  depthwise_dsp(p, in, out);
  return 1;
}
#endif
