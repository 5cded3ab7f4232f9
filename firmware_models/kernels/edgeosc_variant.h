/* Which variant of the kernels a build takes (private header), in the preprocessor alone: the C kernels read it
 * through edgeosc_simd.h, the assembly of dsp/ (the .S files) directly, so both decide alike.
 *
 * EDGEOSC_DSP: Armv7E-M / Armv8-M with the DSP extension (Cortex-M4, M7, M33, M55), ACLE intrinsics from
 * arm_acle.h; EDGEOSC_NEON: AArch64's Advanced SIMD (Cortex-A53/A72 and up), arm_neon.h. Define EDGEOSC_PORTABLE to
 * build the portable reference loops instead (what the host and cores without either run); all give the same
 * integers, bit for bit (tests/test_fast_kernels.py).
 *
 * The DSP path's innermost loops are Thumb-2 assembly, a .S file per kernel family in dsp/ beside its C file.
 * EDGEOSC_ASM_SOURCES: those files assemble their functions (EDGEOSC_DSP builds without EDGEOSC_NO_ASM); for any
 * other target (the host, AArch64, cores without the DSP extension) they assemble to nothing, so every build can list
 * them. EDGEOSC_ASM: the C kernels call them, in optimised builds; unoptimised builds (gcc -O0 keeps r7 as its frame
 * pointer, and the assembly was inline once, needing 13 or 14 registers) and any with EDGEOSC_NO_ASM take the same
 * loops in C (their twins, same integers, about a third slower). __OPTIMIZE__ is the compiler's for C (clang does not
 * define it for assembly: the .S files test EDGEOSC_ASM_SOURCES alone). */
#ifndef EDGEOSC_VARIANT_H_
#define EDGEOSC_VARIANT_H_

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP && !defined(EDGEOSC_PORTABLE)
#define EDGEOSC_DSP 1
#else
#define EDGEOSC_DSP 0
#endif

#if EDGEOSC_DSP && !defined(EDGEOSC_NO_ASM)
#define EDGEOSC_ASM_SOURCES 1
#else
#define EDGEOSC_ASM_SOURCES 0
#endif

#if EDGEOSC_ASM_SOURCES && defined(__OPTIMIZE__)
#define EDGEOSC_ASM 1
#else
#define EDGEOSC_ASM 0
#endif

#if defined(__ARM_NEON) && defined(__aarch64__) && !defined(EDGEOSC_PORTABLE)
#define EDGEOSC_NEON 1
#else
#define EDGEOSC_NEON 0
#endif

/* The unrolled heads' readout power p (the wide head, d_head = d_value = 8, and the narrow one, 4; ModelConfig's p),
 * which their unrolled paths are built for (edgeosc_attention_fast.h; dsp/edgeosc_linear_dsp.c and .S: the assembly
 * takes p 4, 6 or 8) */
#ifndef EDGEOSC_LINEAR_D8_P
#define EDGEOSC_LINEAR_D8_P 4
#endif

#endif /* EDGEOSC_VARIANT_H_ */
