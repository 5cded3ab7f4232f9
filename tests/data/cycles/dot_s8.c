/* An int8 dot product and an int8 matrix-vector product with requantisation-free int32 outputs:
 * small C kernels whose emulated results tests/test_cycles.py checks against numpy. */
#include <stdint.h>

int32_t dot_s8(const int8_t *a, const int8_t *b, int32_t n) {
  int32_t acc = 0;
  for (int32_t i = 0; i < n; i++) acc += (int32_t)a[i] * b[i];
  return acc;
}

/* out[r] = sum_c w[r, c] * x[c] + bias[r]; eight arguments, so some arrive on the stack. */
void matvec_s8(const int8_t *w, const int8_t *x, const int32_t *bias, int32_t *out, int32_t rows,
               int32_t cols, int32_t x_offset, int32_t scale) {
  for (int32_t r = 0; r < rows; r++) {
    int32_t acc = bias[r];
    for (int32_t c = 0; c < cols; c++) acc += (int32_t)w[r * cols + c] * ((int32_t)x[c] + x_offset);
    out[r] = acc * scale;
  }
}

/* A float kernel: exercises the FPU classes. */
float dot_f32(const float *a, const float *b, int32_t n) {
  float acc = 0.0f;
  for (int32_t i = 0; i < n; i++) acc += a[i] * b[i];
  return acc;
}
