/* Bare-metal Cortex-M platform (no libc): vector table, reset, ARM semihosting, th_timestamp.
 *
 * Reset copies .data, zeroes .bss, enables the FPU (hard-float builds may use it) and calls main; main's
 * return value ends the program through semihosting (QEMU -semihosting exits with it). memcpy/memset are
 * here because compilers emit calls to them even in freestanding code. */
#include <stddef.h>
#include <stdint.h>

#include "edgeosc_harness.h"
#include "platform_cortexm.h"

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;
int main(void);

#define REG(addr) (*(volatile uint32_t *)(addr))
#define CPACR 0xE000ED88u      /* coprocessor access: CP10/CP11 = the FPU */
#define DEMCR 0xE000EDFCu      /* debug exception and monitor control: TRCENA enables the DWT */
#define DWT_CTRL 0xE0001000u
#define DWT_CYCCNT 0xE0001004u

enum { SYS_OPEN = 0x01, SYS_WRITE0 = 0x04, SYS_READ = 0x06, SYS_GET_CMDLINE = 0x15, SYS_EXIT = 0x18 };
enum { ADP_APPLICATION_EXIT = 0x20026, ADP_RUNTIME_ERROR = 0x20023 };

static int semihost(int op, const void *arg) {
  register int r0 __asm__("r0") = op;
  register const void *r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

void sh_write(const char *text) { semihost(SYS_WRITE0, text); }

int sh_open_read(const char *path) {
  uint32_t n = 0, args[3];
  while (path[n]) ++n;
  args[0] = (uint32_t)(uintptr_t)path;
  args[1] = 1; /* "rb" */
  args[2] = n;
  return semihost(SYS_OPEN, args);
}

int sh_read(int handle, void *buf, uint32_t bytes) {
  const uint32_t args[3] = {(uint32_t)handle, (uint32_t)(uintptr_t)buf, bytes};
  return (int)bytes - semihost(SYS_READ, args); /* SYS_READ returns the bytes it did not read */
}

int sh_cmdline(char *buf, uint32_t size) {
  uint32_t args[2];
  args[0] = (uint32_t)(uintptr_t)buf;
  args[1] = size;
  return semihost(SYS_GET_CMDLINE, args) ? -1 : (int)args[1];
}

void sh_exit(int status) {
  semihost(SYS_EXIT, (const void *)(uintptr_t)(status ? ADP_RUNTIME_ERROR : ADP_APPLICATION_EXIT));
  for (;;) {
  }
}

/* The DWT cycle counter at EDGEOSC_CPU_HZ; QEMU does not model it (reads stay 0). */
#ifndef EDGEOSC_CPU_HZ
#define EDGEOSC_CPU_HZ 25000000u
#endif
uint32_t th_timestamp(void) {
  static int started;
  if (!started) {
    REG(DEMCR) |= 1u << 24;
    REG(DWT_CYCCNT) = 0;
    REG(DWT_CTRL) |= 1u;
    started = 1;
  }
  return REG(DWT_CYCCNT) / (EDGEOSC_CPU_HZ / 1000000u);
}

void *memcpy(void *dst, const void *src, size_t n) {
  uint8_t *d = (uint8_t *)dst;
  const uint8_t *s = (const uint8_t *)src;
  while (n--) *d++ = *s++;
  return dst;
}

void *memset(void *dst, int c, size_t n) {
  uint8_t *d = (uint8_t *)dst;
  while (n--) *d++ = (uint8_t)c;
  return dst;
}

void edgeosc_reset(void) {
  uint32_t *src = &_sidata, *dst = &_sdata;
  while (dst < &_edata) *dst++ = *src++;
  for (dst = &_sbss; dst < &_ebss;) *dst++ = 0;
  REG(CPACR) |= 0xFu << 20;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
  sh_exit(main());
}

static void fault(void) {
  sh_write("edgeosc: fault\n");
  sh_exit(1);
}

/* Initial stack pointer, reset, NMI, hard fault, then the other faults; interrupts are not used. */
__attribute__((section(".vectors"), used)) void (*const edgeosc_vectors[16])(void) = {
    (void (*)(void))&_estack, edgeosc_reset, fault, fault, fault, fault, fault, 0, 0, 0, 0, fault, fault,
    0, fault, fault};
