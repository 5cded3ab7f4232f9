/* What the assembly of dsp/ (the .S files) shares (private header, for assembly only): whether this build assembles
 * it (EDGEOSC_ASM_SOURCES, edgeosc_variant.h), the syntax, and how a function is laid out. */
#ifndef EDGEOSC_ASM_H_
#define EDGEOSC_ASM_H_

#include "edgeosc_variant.h"

#if defined(__ELF__) && defined(__linux__)
/* no executable stack: a Linux toolchain's linker gives one to a library with an object lacking this note (the host's
 * and the Pi's builds assemble these files to nothing but the note); bare-metal C objects carry none */
  .section .note.GNU-stack, "", %progbits
#endif

#if EDGEOSC_ASM_SOURCES
  .syntax unified
  .thumb

/* A global function: its own section (as -ffunction-sections gives C, so that --gc-sections drops what a firmware does
 * not call), on 2 bytes as gcc -Os places C functions (the firmware's sizes stay those of C); end it with .size */
  .macro edgeosc_function name
  .section .text.\name, "ax", %progbits
  .global \name
  .p2align 1
  .thumb_func
  .type \name, %function
\name:
  .endm
#endif

#endif /* EDGEOSC_ASM_H_ */
