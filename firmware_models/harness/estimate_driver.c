/* The estimator's entry points (edgeosc/bench/estimate.py): one inference, or a stream of frames, of the generated
 * model EDGEOSC_MODEL (-DEDGEOSC_MODEL=<name>_model) through the harness, emulated on an ARM core. memcpy / memset
 * are defined here because compilers may emit calls to them in a bare image (volatile stores: gcc would otherwise
 * turn these very loops back into memcpy calls). */
#include <stddef.h>
#include <stdint.h>

#include "edgeosc_harness.h"

#ifndef EDGEOSC_MODEL
#error "build with -DEDGEOSC_MODEL=<name>_model (the generated model to run)"
#endif
extern const EdgeoscModel EDGEOSC_MODEL;

void *memcpy(void *dst, const void *src, size_t n) {
  volatile uint8_t *d = (volatile uint8_t *)dst;
  const uint8_t *s = (const uint8_t *)src;
  while (n--) *d++ = *s++;
  return dst;
}

void *memset(void *dst, int c, size_t n) {
  volatile uint8_t *d = (volatile uint8_t *)dst;
  while (n--) *d++ = (uint8_t)c;
  return dst;
}

int edgeosc_estimate_infer(const int8_t *input, int8_t *output) {
  size_t bytes, i;
  const int8_t *out;
  if (th_init(&EDGEOSC_MODEL) || th_load_tensor(input, (size_t)EDGEOSC_MODEL.input_bytes) || th_infer())
    return -1;
  out = th_results(&bytes);
  for (i = 0; i < bytes; ++i) output[i] = out[i];
  return (int)bytes;
}

/* A stream: n frames (input_bytes each) one a th_infer from a new stream's state; the last frame's output. */
int edgeosc_estimate_stream(const int8_t *frames, int32_t n, int8_t *output) {
  const size_t in = (size_t)EDGEOSC_MODEL.input_bytes;
  size_t bytes, i;
  int32_t f;
  const int8_t *out;
  if (th_init(&EDGEOSC_MODEL)) return -1;
  for (f = 0; f < n; ++f)
    if (th_load_tensor(frames + (size_t)f * in, in) || th_infer()) return -1;
  out = th_results(&bytes);
  for (i = 0; i < bytes; ++i) output[i] = out[i];
  return (int)bytes;
}
