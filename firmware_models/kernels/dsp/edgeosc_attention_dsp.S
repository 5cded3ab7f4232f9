/* The softmax core's mix (a v) pair loop on the DSP path, in Thumb-2 assembly (GNU as, unified syntax): the function
 * dsp/edgeosc_attention_dsp.c calls under EDGEOSC_ASM, its 14 values in registers (gcc spills two). Its C twin
 * (EDGEOSC_NO_ASM, unoptimised builds) is in that file; the arguments arrive as AAPCS puts them (r0-r3, then the
 * stack). Assembled to nothing where EDGEOSC_ASM_SOURCES is 0 (edgeosc_variant.h). */
#include "edgeosc_asm.h"

#if EDGEOSC_ASM_SOURCES
/* One key pair: (a_j, a_j+1) (r8) against (v_j,d+i, v_j+1,d+i) for lanes i, gathered from two rows' SXTB16 lanes
 * (r9 row j, r10 row j + 1) by PKHBT / PKHTB, into the sums r4-r7 */
  .macro mix_pair
  ldr r8, [r0], #4
  ldr r10, [r2, r3]
  ldr r9, [r2]
  add r2, r2, r3, lsl #1
  sxtb16 r11, r9
  sxtb16 r12, r10
  pkhbt lr, r11, r12, lsl #16
  smlad r4, r8, lr, r4                          /* lanes d */
  pkhtb lr, r12, r11, asr #16
  smlad r6, r8, lr, r6                          /* d + 2 */
  sxtb16 r11, r9, ror #8
  sxtb16 r12, r10, ror #8
  pkhbt lr, r11, r12, lsl #16
  smlad r5, r8, lr, r5                          /* d + 1 */
  pkhtb lr, r12, r11, asr #16
  smlad r7, r8, lr, r7                          /* d + 3 */
  .endm

/* void edgeosc_mix_pairs(const int32_t *ap, int n, const int8_t *v0, int dv, int32_t *acc): acc[0..3] += the n key
 * pairs of ap against the value rows from v0 (dv bytes a row), two pairs a pass */
  edgeosc_function edgeosc_mix_pairs
  push {r4-r11, lr}
  ldr r12, [sp, #36]                            /* acc */
  ldm r12, {r4-r7}
  add r1, r0, r1, lsl #2                        /* r1: the end of the pairs */
  sub r12, r1, r0
  tst r12, #4
  beq 1f                                        /* an odd count: one pair first */
  mix_pair
1:
  cmp r0, r1
  beq 2f
3:
  mix_pair
  mix_pair
  cmp r0, r1
  bne 3b
2:
  ldr r12, [sp, #36]
  stm r12, {r4-r7}
  pop {r4-r11, pc}
  .size edgeosc_mix_pairs, . - edgeosc_mix_pairs
#endif
