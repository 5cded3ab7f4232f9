/* The linear oscillator core's innermost loops on the DSP path, in Thumb-2 assembly (GNU as, unified syntax): the
 * functions dsp/edgeosc_linear_dsp.c calls under EDGEOSC_ASM, which keep 13 or 14 registers whatever the compiler and
 * its options. Their C twins (EDGEOSC_NO_ASM, unoptimised builds) and the tables they read are in that file; the
 * arguments arrive as AAPCS puts them (r0-r3, then the stack). Assembled to nothing where EDGEOSC_ASM_SOURCES is 0
 * (edgeosc_variant.h: the host, AArch64, cores without the DSP extension). */
#include "edgeosc_asm.h"

#if EDGEOSC_ASM_SOURCES
#define NR (2 * EDGEOSC_LINEAR_D8_P + 1)        /* the wide head's readout rows (EDGEOSC_LINEAR_ROWS) */
#define COUPLING_SENTINEL 0x80008000            /* (K'_a, K'_b) = (-2^15, -2^15): no key's (|K| <= 255) */
#define READOUT_SENTINEL 0x80000000             /* no beta's (|beta| < 2^30 for p <= 8) */

/* ---- linear_pass (other heads): a stream step's coupling and readout ------------------------------------------ */

/* s += (K'_a, K'_b) . x for r_0 and r_1 (r12 the pair, r4 r5 x), the words at r0, then on to the next pair */
  .macro coupling_words
  ldrd r10, r11, [r0]
  smlad r10, r12, r4, r10
  smlad r11, r12, r5, r11
  strd r10, r11, [r0], #8
  .endm

/* void edgeosc_coupling_step_asm(int32_t *sc, const int32_t *t, int64_t *h): the coupling's rows after (0, 0), row 0
 * from (0, 1), every other row from its diagonal; words from sc, table t (ROW_WORDS = 5 words a feature), h (int64[2])
 * in and out. r0 sc, r1 the row, r3 the feature, r4 r5 x, r6-r9 h, r10 r11 the words, r12 r2 the feature's
 * (K'_a, K'_b) and Q' (then the weight), lr m_i. */
  edgeosc_function edgeosc_coupling_step_asm
  push {r2, r4-r11, lr}
  ldrd r6, r7, [r2]
  ldrd r8, r9, [r2, #8]
  ldrd r4, r5, [r1, #8]
  ldr lr, [r1, #16]
  add r3, r1, #20
  b 3f
2:                                              /* a row past 0: its diagonal, weight 2 Q_i^2 */
  ldrd r4, r5, [r1, #8]
  ldr lr, [r1, #16]
  ldrd r12, r2, [r1]
  coupling_words
  mul r2, r2, r2
  lsl r2, r2, #1
  smlal r6, r7, r2, r10
  smlal r8, r9, r2, r11
  add r3, r1, #20
3:                                              /* the row's features past the diagonal to the sentinel, m_i Q'_j */
  ldrd r12, r2, [r3], #20
  cmp r12, #COUPLING_SENTINEL
  beq 4f
1:
  coupling_words
  mul r2, lr, r2
  smlal r6, r7, r2, r10
  smlal r8, r9, r2, r11
  ldrd r12, r2, [r3], #20
  cmp r12, #COUPLING_SENTINEL
  bne 1b
4:                                              /* the next row, unless it is the sentinel */
  add r1, r1, #20
  ldr r12, [r1]
  cmp r12, #COUPLING_SENTINEL
  bne 2b
  pop {r2}
  strd r6, r7, [r2]
  strd r8, r9, [r2, #8]
  pop {r4-r11, pc}
  .size edgeosc_coupling_step_asm, . - edgeosc_coupling_step_asm

/* x += (V_a, V_b) . u, stored, the next row; beta (at ub - 4) */
  .macro readout_row
  smlad r3, r10, r5, r3
  smlad r4, r11, r5, r4
  strd r3, r4, [r0]
  add r0, r0, r1
  ldr r5, [r2, #-4]
  .endm

/* void edgeosc_readout_pairs_step_asm(ReadoutPairs *a): the value columns two at a time: for each pair, its words
 * from col (col and col + 1, then + stride_bytes a row), (V_a, V_b) of both from vv, the numerators to num (int64,
 * two a pair). ReadoutPairs {col, ub, vv, num, stride_bytes, pairs} at offsets 0, 4, 8, 12, 16, 20. r0 col, r1 the
 * stride, r2 ub, r3 r4 the words, r5 u then beta, r6-r9 the numerators, r10 r11 the values, r12 the arguments (on
 * the stack). */
  edgeosc_function edgeosc_readout_pairs_step_asm
  push {r0, r4-r11, lr}
5:                                              /* a pair: its arguments, the next pair's written back */
  ldr r12, [sp]
  ldrd r0, r2, [r12]
  ldr r1, [r12, #16]
  ldr r3, [r12, #8]
  ldrd r10, r11, [r3], #8
  str r3, [r12, #8]
  add r3, r0, #8
  str r3, [r12]
  /* row 0: u / 2, the product doubled (SMUAD); the numerators start at its beta's products */
  ldrd r3, r4, [r0]
  ldr r5, [r2], #8
  smuad r6, r10, r5
  add r3, r3, r6, lsl #1
  smuad r6, r11, r5
  add r4, r4, r6, lsl #1
  strd r3, r4, [r0]
  add r0, r0, r1
  ldr r5, [r2, #-4]
  smull r6, r7, r5, r3
  smull r8, r9, r5, r4
  ldrd r5, r3, [r2], #8
  cmp r3, #READOUT_SENTINEL
  beq 4f
1:                                              /* rows past 0 come in pairs (cos and sin): two a trip */
  ldrd r3, r4, [r0]
  readout_row
  smlal r6, r7, r5, r3
  smlal r8, r9, r5, r4
  ldrd r3, r4, [r0]
  ldr r5, [r2], #8
  readout_row
  smlal r6, r7, r5, r3
  smlal r8, r9, r5, r4
  ldrd r5, r3, [r2], #8
  cmp r3, #READOUT_SENTINEL
  bne 1b
4:                                              /* the numerators out, the next pair */
  ldr r12, [sp]
  ldr r3, [r12, #12]
  strd r6, r7, [r3], #8
  strd r8, r9, [r3], #8
  str r3, [r12, #12]
  ldr r3, [r12, #20]
  subs r3, r3, #1
  str r3, [r12, #20]
  bne 5b
  pop {r0, r4-r11, pc}
  .size edgeosc_readout_pairs_step_asm, . - edgeosc_readout_pairs_step_asm

/* ---- the wide head's query: straight through, runs of loads (LDM, or LDR after LDR, one cycle a word after the
 * first) then SMLAL, which gcc's own scheduling spreads apart ------------------------------------------------------ */

/* void edgeosc_coupling_d8_asm(const int32_t *sc, const int32_t *w, int64_t *h): h (int64[2]) += sum_f w[f] (sc[2f],
 * sc[2f + 1]) over the 44 features past (0, 0): two features a step */
  edgeosc_function edgeosc_coupling_d8_asm
  push {r4-r11, lr}
  ldrd r3, r4, [r2]
  ldrd r5, r6, [r2, #8]
  .rept 22
  ldm r1!, {r7, r8}
  ldm r0!, {r9, r10, r11, r12}
  smlal r3, r4, r7, r9
  smlal r5, r6, r7, r10
  smlal r3, r4, r8, r11
  smlal r5, r6, r8, r12
  .endr
  strd r3, r4, [r2]
  strd r5, r6, [r2, #8]
  pop {r4-r11, pc}
  .size edgeosc_coupling_d8_asm, . - edgeosc_coupling_d8_asm

/* void edgeosc_readout_d8_asm(const int32_t *sr, const int32_t *beta, int64_t *num): num[d] = sum_m beta[m] col_d[m]
 * for the nine columns of the readout's NR rows (stride 9 words), three a pass */
  edgeosc_function edgeosc_readout_d8_asm
  push {r4-r11, lr}
  .rept 3
  movs r3, #0
  movs r4, #0
  movs r5, #0
  movs r6, #0
  movs r7, #0
  mov r8, #0
  .rept NR
  ldr r10, [r0, #4]
  ldr r11, [r0, #8]
  ldr r9, [r0], #36
  ldr r12, [r1], #4
  smlal r3, r4, r12, r9
  smlal r5, r6, r12, r10
  smlal r7, r8, r12, r11
  .endr
  strd r3, r4, [r2], #8
  strd r5, r6, [r2], #8
  strd r7, r8, [r2], #8
  sub r0, r0, #(36 * NR - 12)                   /* the next three columns, the rows from the first */
  sub r1, r1, #(4 * NR)
  .endr
  pop {r4-r11, pc}
  .size edgeosc_readout_d8_asm, . - edgeosc_readout_d8_asm

/* ---- the wide head's update and stream step, every state word loaded, summed and stored once, with the pairs each
 * word takes held in registers (gcc spills them). The update table t (dsp/edgeosc_linear_dsp.c UPDATE_*): K'_0..K'_8
 * at word 0, x0 at 9, x1 at 18, the readout columns' (V_a, V_b) at 27, the rows' (u_a, u_b) at 36. --------------- */

/* a coupling row's word pairs, K'_j in \kp, the row's (x0_i, x1_i) in r10, r11 */
  .macro update_pairs kp, rest:vararg
  ldr r12, [r0]
  ldr lr, [r0, #4]
  smlad r12, \kp, r10, r12
  smlad lr, \kp, r11, lr
  str lr, [r0, #4]
  str r12, [r0], #8
  .ifnb \rest
  update_pairs \rest
  .endif
  .endm

  .macro update_row i, kps:vararg
  ldr r10, [r1, #36 + 4 * \i]
  ldr r11, [r1, #72 + 4 * \i]
  update_pairs \kps
  .endm

/* Row 0 of the coupling state at r0 (the feature 1, K'_0 = (1, 1)): each of its two words plus the sum of the int16
 * halves of \x0, \x1 (SXTAH, ASR #16), stored; r0 moves to row 1 */
  .macro row0_adds_r x0, x1
  ldr r12, [r0]
  ldr lr, [r0, #4]
  sxtah r12, r12, \x0
  add r12, r12, \x0, asr #16
  sxtah lr, lr, \x1
  add lr, lr, \x1, asr #16
  str lr, [r0, #4]
  str r12, [r0], #8
  .endm

/* void edgeosc_update_coupling_d8_asm(int32_t *state, const int32_t *t): the coupling: row i's (x0_i, x1_i) in r10,
 * r11, K'_1..K'_8 in r2-r9 (K'_0 = (1, 1) by SXTAH and ASR #16), each word pair loaded, two SMLAD, stored */
  edgeosc_function edgeosc_update_coupling_d8_asm
  push {r4-r11, lr}
  add r12, r1, #4
  ldm r12, {r2-r9}
  ldr r10, [r1, #36]                            /* row 0: (0, 0) adds r itself */
  ldr r11, [r1, #72]
  row0_adds_r r10, r11
  update_pairs r2, r3, r4, r5, r6, r7, r8, r9
  update_row 1, r2, r3, r4, r5, r6, r7, r8, r9
  update_row 2, r3, r4, r5, r6, r7, r8, r9
  update_row 3, r4, r5, r6, r7, r8, r9
  update_row 4, r5, r6, r7, r8, r9
  update_row 5, r6, r7, r8, r9
  update_row 6, r7, r8, r9
  update_row 7, r8, r9
  update_row 8, r9
  pop {r4-r11, pc}
  .size edgeosc_update_coupling_d8_asm, . - edgeosc_update_coupling_d8_asm

/* a readout column's words in rows m, m + 1 (stride 36 bytes), its (V_a, V_b) in r11 */
  .macro update_rows m, ua, ub
  ldr r12, [r0, #36 * \m]
  ldr lr, [r0, #36 * \m + 36]
  smlad r12, r11, \ua, r12
  smlad lr, r11, \ub, lr
  str r12, [r0, #36 * \m]
  str lr, [r0, #36 * \m + 36]
  .endm

/* void edgeosc_update_readout_d8_asm(int32_t *sr, const int32_t *t): the readout's sums (sr: the readout rows): u_0..u_8
 * in r2-r10, column by column, row 0's halved u doubled; then the rows past 8, if any (p 6 or 8): a second pass over
 * the columns, u_9.. in r2-r5 or r2-r9 */
#if NR != 9 && NR != 13 && NR != 17
#error "the wide head's assembly takes p 4, 6 or 8 (EDGEOSC_LINEAR_D8_P)"
#endif
  edgeosc_function edgeosc_update_readout_d8_asm
  push {r4-r11, lr}
  add r12, r1, #144                             /* u, then vv from r1 */
  ldm r12, {r2-r10}
  add r1, r1, #108
  .rept 9
  ldr r11, [r1], #4
  ldr r12, [r0]
  smuad lr, r11, r2
  add r12, r12, lr, lsl #1
  str r12, [r0]
  update_rows 1, r3, r4
  update_rows 3, r5, r6
  update_rows 5, r7, r8
  update_rows 7, r9, r10
  add r0, r0, #4
  .endr
#if NR > 9
  add r12, r1, #36
#if NR == 13
  ldm r12, {r2-r5}
#else
  ldm r12, {r2-r9}
#endif
  sub r1, r1, #36                               /* back to the first column and its (V_a, V_b) */
  sub r0, r0, #36
  .rept 9
  ldr r11, [r1], #4
  update_rows 9, r2, r3
  update_rows 11, r4, r5
#if NR == 17
  update_rows 13, r6, r7
  update_rows 15, r8, r9
#endif
  add r0, r0, #4
  .endr
#endif
  pop {r4-r11, pc}
  .size edgeosc_update_readout_d8_asm, . - edgeosc_update_readout_d8_asm

/* the pair's update (K'_j in r10 against x0_i, x1_i in r4, r5; the words in r12, lr), then h by its weight r11 */
  .macro step_sums
  smlad r12, r10, r4, r12
  smlad lr, r10, r5, lr
  str lr, [r0, #4]
  str r12, [r0], #8
  smlal r6, r7, r11, r12
  smlal r8, r9, r11, lr
  .endm

  .macro step_pair
  ldr r10, [r1], #4
  ldr r11, [r2], #4
  ldr r12, [r0]
  ldr lr, [r0, #4]
  mul r11, r11, r3
  step_sums
  .endm

/* void edgeosc_step_coupling_d8_asm(int32_t *state, const int32_t *t, const int32_t *qv, int64_t *h): a stream step's
 * coupling: each word pair (i, j) takes both keys (SMLAD of K'_j, loaded, against x0_i, x1_i) and, updated, feeds h
 * (int64[2], from its features past (0, 0)) by SMLAL with the query's weight, so each word is loaded and stored once
 * for the update and the query together. The weights from qv = [c1, 2 Q_0..2 Q_7] (passed at qv + 1) as each pair
 * goes by: row i's multiplier qv[i] in r3 (c1, then 2 Q_a) times 2 Q_b (2 c1 Q_b in row 0, 4 Q_a Q_b past the
 * diagonal), on the diagonal (2 Q_a)^2 / 2. */
  edgeosc_function edgeosc_step_coupling_d8_asm
  push {r3-r11, lr}
  ldrd r6, r7, [r3]
  ldrd r8, r9, [r3, #8]
  ldr r4, [r1, #36]                             /* row 0: (0, 0) adds r itself (h takes it in C) */
  ldr r5, [r1, #72]
  row0_adds_r r4, r5
  add r1, r1, #4
  ldr r3, [r2, #-4]
  .rept 8
  step_pair
  .endr
  /* row i: K' from t + i, (x0_i, x1_i) 9 and 18 words on, 2 Q_b from qv + i + 1 */
  .irp i, 1, 2, 3, 4, 5, 6, 7, 8
  sub r1, r1, #4 * (9 - \i)
  sub r2, r2, #4 * (8 - \i)
  ldr r4, [r1, #36]
  ldr r5, [r1, #72]
  ldr r3, [r2, #-4]
  ldr r10, [r1], #4                             /* the diagonal */
  ldr r12, [r0]
  ldr lr, [r0, #4]
  mul r11, r3, r3
  asr r11, r11, #1
  step_sums
  .rept 8 - \i
  step_pair
  .endr
  .endr
  ldr r3, [sp]
  strd r6, r7, [r3]
  strd r8, r9, [r3, #8]
  pop {r3-r11, pc}
  .size edgeosc_step_coupling_d8_asm, . - edgeosc_step_coupling_d8_asm
#endif
