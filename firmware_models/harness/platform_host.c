/* Host platform: th_timestamp from the POSIX monotonic clock. */
#define _POSIX_C_SOURCE 199309L
#include <time.h>

#include "edgeosc_harness.h"

uint32_t th_timestamp(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint32_t)((uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u);
}
