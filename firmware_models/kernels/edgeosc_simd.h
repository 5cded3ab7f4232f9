/* The kernels' fast paths: the few helpers they share (private header); which path a build takes is
 * edgeosc_variant.h's (EDGEOSC_DSP, EDGEOSC_ASM, EDGEOSC_NEON).
 */
#ifndef EDGEOSC_SIMD_H_
#define EDGEOSC_SIMD_H_

#include <stdint.h>

#include "edgeosc_variant.h"

#if EDGEOSC_DSP
#include <arm_acle.h>

/* A 32-bit load from any address: Armv7-M LDR allows unaligned access (not LDRD/LDM). */
typedef int32_t __attribute__((aligned(1), may_alias)) edgeosc_unaligned_i32;

/* SXTB16 of the word rotated by 8 (bytes 1 and 3), one instruction; ACLE has no rotating form. */
static inline int32_t edgeosc_sxtb16_ror8(int32_t w) {
  int32_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(w));
  return r;
}

static inline int32_t edgeosc_read4(const int8_t *p) { return *(const edgeosc_unaligned_i32 *)p; }

/* Four int8 values minus a zero point as two int16 pairs in SXTB16's lanes: (x0, x2) and (x1, x3).
 * zp2 holds -zero_point in both halves; x - zp fits int16. */
static inline void edgeosc_widen4(int32_t word, int32_t zp2, int32_t *even, int32_t *odd) {
  *even = __sadd16(__sxtb16(word), zp2);
  *odd = __sadd16(edgeosc_sxtb16_ror8(word), zp2);
}

static inline int32_t edgeosc_pair(int32_t v) { return (int32_t)(((uint32_t)v & 0xFFFFu) * 0x10001u); }

/* (lo, hi) as an int16 pair, lo in the bottom half (both fit int16) */
static inline int32_t edgeosc_pack16(int32_t lo, int32_t hi) {
  return (int32_t)(((uint32_t)lo & 0xFFFFu) | ((uint32_t)hi << 16));
}

/* PKHBT / PKHTB (no ACLE intrinsic in GCC): (lo's bottom half, hi's bottom half) and (lo's top half, hi's top
 * half) as int16 pairs, the first named half in the bottom lane. */
static inline int32_t edgeosc_pack_bottoms(int32_t lo, int32_t hi) {
  int32_t r;
  __asm__("pkhbt %0, %1, %2, lsl #16" : "=r"(r) : "r"(lo), "r"(hi));
  return r;
}

static inline int32_t edgeosc_pack_tops(int32_t lo, int32_t hi) {
  int32_t r;
  __asm__("pkhtb %0, %1, %2, asr #16" : "=r"(r) : "r"(hi), "r"(lo));
  return r;
}

/* edgeosc_srdhm in one SMULL and the rounding's add-with-carry: the compiler's inlining of the C form can lose
 * that both factors are 32-bit and multiply in 64 bits (three multiplies). */
static inline int32_t edgeosc_srdhm_dsp(int32_t a, int32_t b) {
  int32_t lo, hi;
  if (a == b && a == (int32_t)0x80000000) return 0x7FFFFFFF;
  __asm__("smull %0, %1, %2, %3\n\tadds %0, %0, #0x40000000\n\tadc %1, %1, #0\n\t"
          "lsr %0, %0, #31\n\torr %0, %0, %1, lsl #1"
          : "=&r"(lo), "=&r"(hi) : "r"(a), "r"(b) : "cc");
  return lo;
}

/* The bytewise signed maximum of two words: SSUB8 sets a GE flag for each byte where a >= b, SEL takes those bytes
 * of a and the others of b (one asm statement: nothing may touch the GE flags between the two). */
static inline int32_t edgeosc_max_s8x4(int32_t a, int32_t b) {
  int32_t r;
  __asm__("ssub8 %0, %1, %2\n\tsel %0, %1, %2" : "=&r"(r) : "r"(a), "r"(b) : "cc");
  return r;
}

/* round(a * b / 2^32), ties up: SMMULR (no ACLE intrinsic). */
static inline int32_t edgeosc_smmulr(int32_t a, int32_t b) {
  int32_t r;
  __asm__("smmulr %0, %1, %2" : "=r"(r) : "r"(a), "r"(b));
  return r;
}

/* TFLite's double-rounding requantization (edgeosc_mbqm) with its constants prepared once, in six
 * instructions (LSL, SMMULR, ADD, QADD, ADD, ASR): SRDHM(a, M) = floor((a M + 2^30) / 2^31) is
 * SMMULR(a, 2M - 2^32) + a for M in [2^30, 2^31) (2M - 2^32 is 2M's int32 bits), and the shift right by r with
 * ties away from zero is
 * (x + 2^(r-1) - [x < 0]) >> r for r >= 1, its add saturating (QADD): where it saturates, the exact result
 * is >= 2^(31-r) and this one 1 less, and both clamp to the same int8 for r <= 23. So it is exact for
 * M in [2^30, 2^31) and 1 <= r <= 23 (edgeosc_dsp_requant_init says whether); other constants take
 * edgeosc_mbqm. */
typedef struct {
  int32_t m2, left, right, half;
} EdgeoscDspRequant;

static inline int edgeosc_dsp_requant_init(EdgeoscDspRequant *q, int32_t multiplier, int32_t shift) {
  q->m2 = (int32_t)((uint32_t)multiplier << 1), q->left = shift > 0 ? shift : 0, q->right = shift > 0 ? 0 : -shift;
  q->half = q->right > 0 ? 1 << (q->right - 1) : 0;
  return multiplier >= (1 << 30) && q->right >= 1 && q->right <= 23;
}

/* edgeosc_mbqm(acc, multiplier, shift) for constants edgeosc_dsp_requant_init accepted (before zp and clamp). */
static inline int32_t edgeosc_dsp_requant(const EdgeoscDspRequant *q, int32_t acc) {
  const int32_t a = (int32_t)((uint32_t)acc << q->left), x = edgeosc_smmulr(a, q->m2) + a;
  return (__qadd(x, q->half) + (x >> 31)) >> q->right;
}
#endif

/* n bytes, a word at a time where the core loads and stores words at any address (Armv7E-M's LDR / STR) */
static inline void edgeosc_copy_bytes(int8_t *to, const int8_t *from, int32_t n) {
  int32_t i = 0;
#if EDGEOSC_DSP
  for (; i + 4 <= n; i += 4) *(edgeosc_unaligned_i32 *)(void *)(to + i) = edgeosc_read4(from + i);
#endif
  for (; i < n; ++i) to[i] = from[i];
}

#if EDGEOSC_NEON
#include <arm_neon.h>
#endif

#endif /* EDGEOSC_SIMD_H_ */
