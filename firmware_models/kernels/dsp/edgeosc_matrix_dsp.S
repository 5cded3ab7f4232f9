/* FULLY_CONNECTED's and CONV_2D's matrix products on the DSP path, in Thumb-2 assembly (GNU as, unified syntax): the
 * functions dsp/edgeosc_matrix_dsp.c calls under EDGEOSC_ASM, on the weights packed at code generation
 * (edgeosc_ops.h, EDGEOSC_PACKED) and the rows widened there. Their C twins (EDGEOSC_NO_ASM, unoptimised builds) are
 * in that file; the arguments arrive as AAPCS puts them (r0-r3, then the stack). Assembled to nothing where
 * EDGEOSC_ASM_SOURCES is 0 (edgeosc_variant.h). */
#include "edgeosc_asm.h"

#if EDGEOSC_ASM_SOURCES
#define UNIT_CHUNK 16 /* edgeosc_matrix_dsp.c's: the stores' offsets below, 64 bytes a row of accumulators */

/* ---- four rows by two units ------------------------------------------------------------------------------------ */

/* One packed word (the even or the odd pairs of a group) times the four rows' input words: the word and its two
 * unpacked pairs in r9 and r8, two input words in r10 r11, the accumulators of the four rows by two units in r0-r7
 * (row r unit j in r(2r+j)) */
  .macro block_half
  ldr r9, [lr], #4
  ldr r10, [r12], #4
  ldr r11, [r12], #4
  sxtb16 r8, r9
  sxtb16 r9, r9, ror #8
  smlad r0, r10, r8, r0
  smlad r1, r10, r9, r1
  smlad r2, r11, r8, r2
  smlad r3, r11, r9, r3
  ldr r10, [r12], #4
  ldr r11, [r12], #4
  smlad r4, r10, r8, r4
  smlad r5, r10, r9, r5
  smlad r6, r11, r8, r6
  smlad r7, r11, r9, r7
  .endm

/* void edgeosc_block_dots_asm(const int32_t *x, const int32_t *x_end, const int8_t *w, int32_t *acc,
 *                             const int32_t *acc_end): block_dots: acc[r UNIT_CHUNK + 2 i + j] = bias + row r . unit
 * 2 i + j for the four rows widened in x (to x_end) and the packed unit pairs from w, until acc reaches acc_end. The
 * input at r12, the packed weights at lr; two groups a trip, the loads in runs of LDR (each after the first in one
 * cycle). On the stack: x, x_end, acc, acc_end. */
  edgeosc_function edgeosc_block_dots_asm
  ldr r12, [sp]
  push {r4-r11, lr}
  mov lr, r2
  push {r0, r1, r3, r12}
2:                                              /* a pair of units: the accumulators at its biases */
  ldrd r0, r1, [lr], #8
  ldr r12, [sp]
  mov r2, r0
  mov r3, r1
  mov r4, r0
  mov r5, r1
  mov r6, r0
  mov r7, r1
1:
  block_half
  block_half
  block_half
  block_half
  ldr r8, [sp, #4]
  cmp r12, r8
  bne 1b
  ldr r9, [sp, #8]                              /* the eight sums out, on to the next pair */
  str r2, [r9, #4 * UNIT_CHUNK]
  str r3, [r9, #4 * UNIT_CHUNK + 4]
  str r4, [r9, #8 * UNIT_CHUNK]
  str r5, [r9, #8 * UNIT_CHUNK + 4]
  str r6, [r9, #12 * UNIT_CHUNK]
  str r7, [r9, #12 * UNIT_CHUNK + 4]
  strd r0, r1, [r9], #8
  str r9, [sp, #8]
  ldr r8, [sp, #12]
  cmp r9, r8
  bne 2b
  add sp, sp, #16
  pop {r4-r11, pc}
  .size edgeosc_block_dots_asm, . - edgeosc_block_dots_asm

/* ---- one row by four units ------------------------------------------------------------------------------------- */

/* A group on packed weights: four units' sums in r0-r3, the row's two words of a group in r4 r5, each pair's two words
 * in r6 r7 and r8 r9, an unpacked pair in r10, the row at r11, the pairs at r12 and lr; the loads in one run of LDR */
  .macro row_group
  ldr r4, [r11], #4
  ldr r5, [r11], #4
  ldr r6, [r12], #4
  ldr r7, [r12], #4
  ldr r8, [lr], #4
  ldr r9, [lr], #4
  sxtb16 r10, r6
  smlad r0, r4, r10, r0
  sxtb16 r6, r6, ror #8
  smlad r1, r4, r6, r1
  sxtb16 r10, r8
  smlad r2, r4, r10, r2
  sxtb16 r8, r8, ror #8
  smlad r3, r4, r8, r3
  sxtb16 r10, r7
  smlad r0, r5, r10, r0
  sxtb16 r7, r7, ror #8
  smlad r1, r5, r7, r1
  sxtb16 r10, r9
  smlad r2, r5, r10, r2
  sxtb16 r9, r9, ror #8
  smlad r3, r5, r9, r3
  .endm

/* A group on weights unpacked at code generation: each packed word as its two SXTB16 halves, so a group is two runs
 * of loads and eight SMLAD (20 cycles for 16 MACs against 23); a pair's words take twice the bytes */
  .macro row_group16
  ldr r4, [r11], #4
  ldr r5, [r11], #4
  ldr r6, [r12], #4
  ldr r7, [r12], #4
  ldr r8, [r12], #4
  ldr r9, [r12], #4
  smlad r0, r4, r6, r0
  smlad r1, r4, r7, r1
  smlad r0, r5, r8, r0
  smlad r1, r5, r9, r1
  ldr r6, [lr], #4
  ldr r7, [lr], #4
  ldr r8, [lr], #4
  ldr r9, [lr], #4
  smlad r2, r4, r6, r2
  smlad r3, r4, r7, r3
  smlad r2, r5, r8, r2
  smlad r3, r5, r9, r3
  .endm

/* The loop around a group macro: per two pairs of units the sums start at their biases, then two groups a trip; a
 * pair's stride less its 8 bytes of biases is x_end - x (bytes), doubled for unpacked weights (`wide`). On the stack:
 * x, x_end, acc, the pair stride, quads left. */
  .macro row_quads group, wide
  ldr r12, [sp]
  push {r4-r11, lr}
  sub r4, r1, r0
  .if \wide
  lsl r4, r4, #1
  .endif
  add r4, r4, #8
  push {r0, r1, r3, r4, r12}
  mov r12, r2
2:
  ldr r4, [sp, #12]
  add lr, r12, r4
  ldrd r0, r1, [r12], #8
  ldrd r2, r3, [lr], #8
  ldr r11, [sp]
1:
  \group
  \group
  ldr r10, [sp, #4]
  cmp r11, r10
  bne 1b
  ldr r10, [sp, #8]
  stm r10!, {r0-r3}
  str r10, [sp, #8]
  mov r12, lr
  ldr r10, [sp, #16]
  subs r10, r10, #1
  str r10, [sp, #16]
  bne 2b
  add sp, sp, #20
  pop {r4-r11, pc}
  .endm

/* void edgeosc_row_quads_asm(const int32_t *x, const int32_t *x_end, const int8_t *w, int32_t *acc, int32_t quads):
 * row_dots' pairs of unit pairs, `quads` of them: acc[2 i + j] = bias + the row . unit 2 i + j for the row widened in
 * x (to x_end) and the packed unit pairs from w */
  edgeosc_function edgeosc_row_quads_asm
  row_quads row_group, 0
  .size edgeosc_row_quads_asm, . - edgeosc_row_quads_asm

/* void edgeosc_row_quads16_asm(...): edgeosc_row_quads_asm on weights unpacked at code generation (row_dots16) */
  edgeosc_function edgeosc_row_quads16_asm
  row_quads row_group16, 1
  .size edgeosc_row_quads16_asm, . - edgeosc_row_quads16_asm
#endif
