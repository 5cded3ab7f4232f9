/* What a generated firmware model exports (edgeosc/export/c writes one per model). */
#ifndef EDGEOSC_MODEL_H_
#define EDGEOSC_MODEL_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The input and output blocks live in the model's static arena: the harness writes the input there,
 * run() reads it and writes the output there. A streaming model's state lives there too, between runs. Multiple graph inputs (outputs) are concatenated. The
 * scales describe the first input and output (int8 = round(x / scale) + zero_point). */
typedef struct {
  const char *name;
  int8_t *input;
  int32_t input_bytes;
  const int8_t *output;
  int32_t output_bytes;
  int32_t arena_bytes;
  float input_scale;
  int32_t input_zero_point;
  float output_scale;
  int32_t output_zero_point;
  int (*run)(void);
  void (*reset)(void); /* a streaming model: its state (kept in the arena between runs) back to a new stream's;
                          NULL for a model without state */
} EdgeoscModel;

#ifdef __cplusplus
}
#endif

#endif /* EDGEOSC_MODEL_H_ */
