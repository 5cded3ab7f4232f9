/* Host test runner: reads int8 inputs (raw, input_bytes each) from stdin until EOF and prints each
 * inference's int8 outputs as one line of integers; with -t, the mean microseconds per inference on stderr.
 * Build with -DEDGEOSC_MODEL=<name>_model (firmware_models/Makefile). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgeosc_harness.h"

extern const EdgeoscModel EDGEOSC_MODEL;

int main(int argc, char **argv) {
  const EdgeoscModel *m = &EDGEOSC_MODEL;
  const int timing = argc > 1 && !strcmp(argv[1], "-t");
  int8_t *in = (int8_t *)malloc((size_t)m->input_bytes);
  unsigned long n = 0;
  double us = 0;
  if (!in || th_init(m)) return 2;
  while (fread(in, 1, (size_t)m->input_bytes, stdin) == (size_t)m->input_bytes) {
    size_t bytes, i;
    const int8_t *out;
    uint32_t t0;
    if (th_load_tensor(in, (size_t)m->input_bytes)) return 3;
    t0 = th_timestamp();
    if (th_infer()) return 4;
    us += (double)(uint32_t)(th_timestamp() - t0);
    out = th_results(&bytes);
    for (i = 0; i < bytes; ++i) printf(i ? " %d" : "%d", out[i]);
    printf("\n");
    ++n;
  }
  if (timing && n) fprintf(stderr, "%s: %lu inferences, %.1f us each\n", m->name, n, us / (double)n);
  free(in);
  return 0;
}
