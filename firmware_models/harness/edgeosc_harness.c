/* Harness API over one EdgeoscModel (see edgeosc_harness.h). */
#include "edgeosc_harness.h"

static const EdgeoscModel *model_;

int th_init(const EdgeoscModel *model) {
  model_ = model;
  th_reset();
  return model ? 0 : -1;
}

void th_reset(void) {
  if (model_ && model_->reset) model_->reset();
}

int th_load_tensor(const int8_t *data, size_t bytes) {
  size_t i;
  if (!model_ || bytes != (size_t)model_->input_bytes) return -1;
  if (data != model_->input) /* the caller may have written the input in place */
    for (i = 0; i < bytes; ++i) model_->input[i] = data[i];
  return 0;
}

int th_infer(void) { return model_ ? model_->run() : -1; }

const int8_t *th_results(size_t *bytes) {
  *bytes = model_ ? (size_t)model_->output_bytes : 0;
  return model_ ? model_->output : 0;
}

int th_top1(void) {
  int32_t i, best = 0;
  if (!model_) return -1;
  for (i = 1; i < model_->output_bytes; ++i)
    if (model_->output[i] > model_->output[best]) best = i;
  return (int)best;
}
