@ Hand-written Thumb-2 loops whose executed instruction mix has a closed form (tests/test_cycles.py).
@ Each takes r0 = int32 array, r1 = n >= 1 (and r2 = k for mla_loop) and returns its sum in r0.
    .syntax unified
    .thumb
    .text

@ sum(a[i] * k): per iteration LDR, MLA, ADD, SUBS, BNE.
    .global mla_loop
    .type mla_loop, %function
    .thumb_func
mla_loop:
    movs    r3, #0
1:  ldr     r12, [r0]
    mla     r3, r12, r2, r3
    add     r0, r0, #4
    subs    r1, r1, #1
    bne     1b
    mov     r0, r3
    bx      lr
    .size mla_loop, .-mla_loop

@ sum(a[2i] * a[2i+1]): the second LDR follows an LDR and does not use its result for its address.
    .global pair_loop
    .type pair_loop, %function
    .thumb_func
pair_loop:
    movs    r3, #0
1:  ldr     r2, [r0]
    ldr     r12, [r0, #4]
    mla     r3, r2, r12, r3
    add     r0, r0, #8
    subs    r1, r1, #1
    bne     1b
    mov     r0, r3
    bx      lr
    .size pair_loop, .-pair_loop

@ sum(a[i]): the LDR's address comes from the ADD right before it, and the next ADD uses the loaded value.
    .global dep_loop
    .type dep_loop, %function
    .thumb_func
dep_loop:
    movs    r3, #0
    sub     r0, r0, #4
1:  add     r0, r0, #4
    ldr     r2, [r0]
    add     r3, r3, r2
    subs    r1, r1, #1
    bne     1b
    mov     r0, r3
    bx      lr
    .size dep_loop, .-dep_loop
