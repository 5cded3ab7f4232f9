/* A harness API in the spirit of MLPerf Tiny's (th_load_tensor, th_infer, th_results, th_timestamp).
 *
 * One model per firmware image: th_init picks it. No allocation; the input is copied into the model's
 * arena and the results are read from it in place. th_timestamp is the platform's (platform_*.c).
 */
#ifndef EDGEOSC_HARNESS_H_
#define EDGEOSC_HARNESS_H_

#include <stddef.h>
#include <stdint.h>

#include "edgeosc_model.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Selects the model to run (a streaming model's state reset: a new stream); 0, or -1 for NULL. */
int th_init(const EdgeoscModel *model);

/** A streaming model (one frame a th_infer, its state kept in the arena): starts a new stream. */
void th_reset(void);

/** Copies one int8 input (exactly the model's input_bytes) into the model; 0, or -1 on a size mismatch. */
int th_load_tensor(const int8_t *data, size_t bytes);

/** Runs one inference on the loaded input; 0, or -1 on failure. */
int th_infer(void);

/** The int8 output of the last inference; *bytes receives its size. */
const int8_t *th_results(size_t *bytes);

/** Index of the largest output (the predicted class). */
int th_top1(void);

/** Microseconds from a free-running platform clock (wraps). */
uint32_t th_timestamp(void);

#ifdef __cplusplus
}
#endif

#endif /* EDGEOSC_HARNESS_H_ */
