/* The kernels' fast paths: which one this build takes, and the few helpers they share (private header).
 *
 * EDGEOSC_DSP: Armv7E-M / Armv8-M with the DSP extension (Cortex-M4, M7, M33, M55), ACLE intrinsics from
 * arm_acle.h; EDGEOSC_NEON: AArch64's Advanced SIMD. Define EDGEOSC_PORTABLE to build the portable reference
 * loops instead (what the host and cores without either run); all give the same integers, bit for bit
 * (tests/test_fast_kernels.py).
 */
#ifndef EDGEOSC_SIMD_H_
#define EDGEOSC_SIMD_H_

#include <stdint.h>

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && !defined(EDGEOSC_PORTABLE)
#define EDGEOSC_DSP 1
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
#else
#define EDGEOSC_DSP 0
#endif

/* EDGEOSC_NEON: AArch64 Advanced SIMD (Cortex-A53/A72 and up), arm_neon.h. */
#if defined(__ARM_NEON) && defined(__aarch64__) && !defined(EDGEOSC_PORTABLE)
#define EDGEOSC_NEON 1
#include <arm_neon.h>
#else
#define EDGEOSC_NEON 0
#endif

#endif /* EDGEOSC_SIMD_H_ */
