/* Cortex-M test runner under semihosting: reads int8 inputs (raw, input_bytes each) from the host file
 * named on the command line (QEMU -append FILE; default inputs.bin) straight into the model's input
 * block and prints each inference's outputs as one line of integers, like main_host.c.
 * Build with -DEDGEOSC_MODEL=<name>_model (firmware_models/Makefile). */
#include "edgeosc_harness.h"
#include "platform_cortexm.h"

extern const EdgeoscModel EDGEOSC_MODEL;

/* Appends the decimal form of v to p; returns the new end. */
static char *put_int(char *p, int v) {
  char digits[4];
  int n = 0;
  unsigned u = v < 0 ? (unsigned)-v : (unsigned)v;
  if (v < 0) *p++ = '-';
  do {
    digits[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  while (n) *p++ = digits[--n];
  return p;
}

int main(void) {
  const EdgeoscModel *m = &EDGEOSC_MODEL;
  static char line[5 * 256 + 2];
  const char *path = "inputs.bin";
  int n = sh_cmdline(line, sizeof line), i, file;
  for (i = 0; i < n; ++i) /* QEMU passes "<elf> <-append args>": the input file follows the first space */
    if (line[i] == ' ') {
      path = line + i + 1;
      break;
    }
  file = sh_open_read(path);
  if (file < 0 || th_init(m)) return 2;
  while (sh_read(file, m->input, (uint32_t)m->input_bytes) == m->input_bytes) {
    size_t bytes, i;
    const int8_t *out;
    char *p = line;
    if (th_load_tensor(m->input, (size_t)m->input_bytes) || th_infer()) return 3;
    out = th_results(&bytes);
    for (i = 0; i < bytes && i < 256; ++i) {
      if (i) *p++ = ' ';
      p = put_int(p, out[i]);
    }
    *p++ = '\n';
    *p = 0;
    sh_write(line);
  }
  return 0;
}
