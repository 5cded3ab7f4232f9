/* Semihosting I/O of the bare-metal Cortex-M platform (platform_cortexm.c). */
#ifndef EDGEOSC_PLATFORM_CORTEXM_H_
#define EDGEOSC_PLATFORM_CORTEXM_H_

#include <stdint.h>

/** Writes a NUL-terminated string to the host console. */
void sh_write(const char *text);

/** Opens a host file for binary reading; a handle, or -1. */
int sh_open_read(const char *path);

/** Reads up to bytes into buf; returns the number read. */
int sh_read(int handle, void *buf, uint32_t bytes);

/** The command line the host passed (QEMU: -kernel file -append args) into buf; its length, or -1. */
int sh_cmdline(char *buf, uint32_t size);

/** Ends the program: status 0 is success. */
void sh_exit(int status);

#endif /* EDGEOSC_PLATFORM_CORTEXM_H_ */
