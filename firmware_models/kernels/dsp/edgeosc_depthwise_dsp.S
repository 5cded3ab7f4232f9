/* DEPTHWISE_CONV_2D 3 x 3, stride 1, on row-pair planes on the DSP path, in Thumb-2 assembly (GNU as, unified syntax):
 * the three steps dsp/edgeosc_depthwise_dsp.c calls under EDGEOSC_ASM (the planes, each channel's output rows, the
 * records' copy to the output), each given a job struct whose field order is this file's. Their C twins
 * (EDGEOSC_NO_ASM, unoptimised builds), the planes' layout and the rounding's proof are in that file. Assembled to
 * nothing where EDGEOSC_ASM_SOURCES is 0 (edgeosc_variant.h). */
#include "edgeosc_asm.h"

#if EDGEOSC_ASM_SOURCES
/* ---- step 2: one channel's output rows ------------------------------------------------------------------------- */

/* Rows 2j and 2j + 1 of a tap column, from A and B (r9, r10) with weights \w, \v, into r11, r12 */
  .macro dw3_pair_taps w, v
  smlad r11, r9, \w, r11
  smlatb r12, r9, \w, r12
  smlabt r11, r10, \v, r11
  smlad r12, r10, \v, r12
  .endm

/* Two output rows 2j, 2j + 1 (r0 at row pair j, on 16 bytes): A = row pair j and B = j + 1 of each tap column in r9,
 * r10, the sums in r11, r12, the constants read from the stack, the record pointer read and written back */
  .macro dw3_pair
  ldr r11, [sp]                                 /* the bias; A and B of column ox */
  ldr r9, [r0], #16
  ldr r10, [r0]
  smlatb r12, r9, r3, r11
  smlad r11, r9, r3, r11
  smlabt r11, r10, r6, r11
  smlad r12, r10, r6, r12
  ldr r9, [r0, #240]                            /* column ox + 1 */
  ldr r10, [r0, #256]
  dw3_pair_taps r4, r7
  ldr r9, [r0, #496]                            /* column ox + 2 */
  ldr r10, [r0, #512]
  dw3_pair_taps r5, r8
  ldr r1, [sp, #4]                              /* 2M, 2^(32-r)+1, zp, rec */
  ldr r2, [sp, #8]
  ldr lr, [sp, #12]
  ldr r9, [sp, #16]
  smmlar r11, r11, r1, r11
  smmlar r12, r12, r1, r12
  smmlar r11, r11, r2, lr
  smmlar r12, r12, r2, lr
  ssat r11, #8, r11
  ssat r12, #8, r12
  strb r12, [r9, #4]
  strb r11, [r9], #8
  str r9, [sp, #16]
  .endm

/* Rows 2j + 2 and 2j + 3 of a tap column as rows 2j and 2j + 1, from B and C (r10, r1) with weights \w, \v */
  .macro dw3_taps w, v
  smlad r11, r9, \w, r11
  smlatb r12, r9, \w, r12
  smlad r2, r10, \w, r2
  smlatb lr, r10, \w, lr
  smlabt r11, r10, \v, r11
  smlad r12, r10, \v, r12
  smlabt r2, r1, \v, r2
  smlad lr, r1, \v, lr
  .endm

/* Four output rows 2j .. 2j + 3 (r0 at row pair j, on 32 bytes): row pairs j, j + 1, j + 2 of each tap column (A, B,
 * C) in r9, r10, r1, eight instructions for twelve MACs, the sums in r11, r12, r2, lr; then the constants into the
 * data registers, the record pointer into the first */
  .macro dw3_quad
  ldr lr, [sp]                                  /* the bias; column ox */
  ldr r9, [r0], #32
  ldr r10, [r0, #-16]
  ldr r1, [r0]
  smlad r11, r9, r3, lr
  smlatb r12, r9, r3, lr
  smlad r2, r10, r3, lr
  smlatb lr, r10, r3, lr
  smlabt r11, r10, r6, r11
  smlad r12, r10, r6, r12
  smlabt r2, r1, r6, r2
  smlad lr, r1, r6, lr
  ldr r9, [r0, #224]
  ldr r10, [r0, #240]
  ldr r1, [r0, #256]
  dw3_taps r4, r7
  ldr r9, [r0, #480]
  ldr r10, [r0, #496]
  ldr r1, [r0, #512]
  dw3_taps r5, r8
  ldr r9, [sp, #4]
  ldr r10, [sp, #8]
  ldr r1, [sp, #12]
  smmlar r11, r11, r9, r11
  smmlar r12, r12, r9, r12
  smmlar r2, r2, r9, r2
  smmlar lr, lr, r9, lr
  smmlar r11, r11, r10, r1
  smmlar r12, r12, r10, r1
  smmlar r2, r2, r10, r1
  smmlar lr, lr, r10, r1
  ssat r11, #8, r11
  ssat r12, #8, r12
  ssat r2, #8, r2
  ssat lr, #8, lr
  ldr r9, [sp, #16]
  strb r11, [r9], #16
  strb r12, [r9, #-12]
  strb r2, [r9, #-8]
  strb lr, [r9, #-4]
  str r9, [sp, #16]
  .endm

/* void edgeosc_dw3_rows(const Dw3Job *job): one channel's columns: per column, row pair 0 alone where J is odd (the
 * slot pointer's bit 4), then four rows a pass until the block's end (the slot pointer's bits 4-7 all zero). 14
 * registers: slot, six weights, three data words, four sums; on the stack the bias, 2M, 2^(32 - r) + 1, zp_out, the
 * record pointer, skip, columns left. Dw3Job {w[6], slots, bias, m2, kc, zp, records, skip, cols}. */
  edgeosc_function edgeosc_dw3_rows
  push {r4-r11, lr}
  ldr lr, [r0, #52]
  ldm r0!, {r3-r8}
  ldm r0, {r0-r2, r9-r12}
  push {r1, r2, r9-r12, lr}
1:                                              /* column ox's row pair 0 */
  ldr r9, [sp, #20]
  add r0, r0, r9
  tst r0, #16
  beq 2f
  dw3_pair
  tst r0, #0xF0
  beq 3f
2:
  dw3_quad
  tst r0, #0xF0
  bne 2b
3:
  ldr r9, [sp, #24]
  subs r9, r9, #1
  str r9, [sp, #24]
  bne 1b
  add sp, sp, #28
  pop {r4-r11, pc}
  .size edgeosc_dw3_rows, . - edgeosc_dw3_rows

/* ---- step 1: the planes, step 3: the copy ---------------------------------------------------------------------- */

/* Two rows' words of four channels (\a above \b) as each channel's int16 pair of the two rows in r4-r7: the words'
 * halves paired (PKHBT, PKHTB), then each pair's two bytes widened (SXTB16) */
  .macro dw3_widen a, b
  pkhbt r6, \a, \b, lsl #16
  pkhtb r7, \b, \a, asr #16
  sxtb16 r4, r6
  sxtb16 r5, r6, ror #8
  sxtb16 r6, r7
  sxtb16 r7, r7, ror #8
  .endm

/* ... then stored, the slot pointer stepped */
  .macro dw3_store
  str r4, [r1], #16
  str r5, [r1, #-12]
  str r6, [r1, #-8]
  str r7, [r1, #-4]
  .endm

/* void edgeosc_dw3_planes(const Dw3Planes *job): per column, row pair 0 where lo, then two row pairs a loop (their four
 * rows' loads in one run: r0 the even rows, lr the odd), the odd one, row pair hi where edge. Dw3Planes {x, s, row,
 * n, zp4, step, cols, lo, edge}. */
  edgeosc_function edgeosc_dw3_planes
  push {r4-r11, lr}
  ldm r0, {r0-r8}
  push {r0, r1, r3, r5-r8}                      /* [sp]: x s n step cols lo edge; r8 zp4 */
  mov r8, r4
1:
  sub r9, r0, r2
  ldr r3, [sp, #20]
  cbz r3, 2f
  ldr r10, [r9]
  dw3_widen r8, r10
  stmdb r1, {r4-r7}
2:
  add lr, r0, r2
  ldr r3, [sp, #8]
  subs r3, r3, #2
  blt 4f
3:
  ldr r9, [r0]
  ldr r10, [lr]
  ldr r11, [r0, r2, lsl #1]
  ldr r12, [lr, r2, lsl #1]
  add r0, r0, r2, lsl #2
  add lr, lr, r2, lsl #2
  dw3_widen r9, r10
  dw3_store
  dw3_widen r11, r12
  dw3_store
  subs r3, r3, #2
  bge 3b
4:
  adds r3, r3, #2
  beq 5f
  ldr r9, [r0]
  ldr r10, [lr]
  add r0, r0, r2, lsl #1
  dw3_widen r9, r10
  dw3_store
5:
  ldr r3, [sp, #24]
  cbz r3, 6f
  ldr r9, [r0]
  dw3_widen r9, r8
  dw3_store
6:
  ldrd r0, r1, [sp]
  ldr r3, [sp, #12]
  add r0, r0, r3
  add r1, r1, #256
  strd r0, r1, [sp]
  ldr r3, [sp, #16]
  subs r3, r3, #1
  str r3, [sp, #16]
  bne 1b
  add sp, sp, #28
  pop {r4-r11, pc}
  .size edgeosc_dw3_planes, . - edgeosc_dw3_planes

/* void edgeosc_dw3_copy(const Dw3Copy *job): per column, two records a loop (r1 the output, lr two rows). Dw3Copy
 * {records, out, row, step, cols, n, odd}. */
  edgeosc_function edgeosc_dw3_copy
  push {r4-r11, lr}
  ldm r0, {r0-r2, r9-r12}
  mov r8, r1                                    /* r8 the column, r9 step, r10 cols, r11 n */
  lsl lr, r2, #1
1:
  mov r1, r8
  subs r3, r11, #2
  blt 3f
2:
  ldmia r0!, {r4-r7}
  str r4, [r1]
  str r5, [r1, r2]
  add r1, r1, lr
  subs r3, r3, #2
  str r6, [r1]
  str r7, [r1, r2]
  add r1, r1, lr
  bge 2b
3:
  adds r3, r3, #2
  beq 4f
  ldmia r0!, {r4, r5}
  str r4, [r1]
  str r5, [r1, r2]
  add r1, r1, lr
4:                                              /* the last row, without the one past it */
  cmp r12, #0
  beq 5f
  ldmia r0!, {r4, r5}
  str r4, [r1]
5:
  add r8, r8, r9
  subs r10, r10, #1
  bne 1b
  pop {r4-r11, pc}
  .size edgeosc_dw3_copy, . - edgeosc_dw3_copy
#endif
