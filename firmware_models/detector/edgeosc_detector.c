/* Always-on decisions (see edgeosc_detector.h). */
#include "edgeosc_detector.h"

int edgeosc_detector_init(EdgeoscDetector *d, int32_t n_classes, uint32_t keywords, int32_t smooth, double threshold,
                          int64_t refractory) {
  if (n_classes < 1 || n_classes > EDGEOSC_DETECTOR_MAX_CLASSES || smooth < 1 || smooth > EDGEOSC_DETECTOR_MAX_SMOOTH ||
      refractory < 0 || !(threshold > 0.0 && threshold <= 1.0))
    return -1;
  if (n_classes < 32) keywords &= (1u << n_classes) - 1u;
  if (!keywords) return -1;
  d->n_classes = n_classes;
  d->keywords = keywords;
  d->smooth = smooth;
  d->threshold = threshold;
  d->refractory = refractory;
  d->count = d->oldest = d->detected = 0;
  d->hops = d->last = 0;
  return 0;
}

/* The decision on the hops held: the average of each keyword (their sum oldest first, over the count), the first
 * largest, then the threshold and the refractory period. */
static int decide(EdgeoscDetector *d, EdgeoscDetection *out) {
  int32_t best = -1, c, j;
  double best_mean = 0.0;
  const int64_t time = 2 * d->hops - (d->count - 1);
  for (c = 0; c < d->n_classes; ++c) {
    double sum = 0.0;
    if (!(d->keywords >> c & 1u)) continue;
    for (j = 0; j < d->count; ++j) sum += d->held[(d->oldest + j) % d->smooth][c];
    sum /= (double)d->count;
    if (best < 0 || sum > best_mean) best = c, best_mean = sum;
  }
  if (!(best_mean >= d->threshold) || (d->detected && time - d->last < d->refractory)) return 0;
  d->detected = 1;
  d->last = time;
  out->keyword = best;
  out->score = best_mean;
  out->time = time;
  out->emitted = d->hops;
  return 1;
}

int edgeosc_detector_push(EdgeoscDetector *d, const double *posterior, EdgeoscDetection *out) {
  int32_t c, slot;
  if (d->count == d->smooth) { /* the ring is full: the oldest hop leaves */
    slot = d->oldest;
    d->oldest = (d->oldest + 1) % d->smooth;
  } else {
    slot = (d->oldest + d->count) % d->smooth;
    ++d->count;
  }
  for (c = 0; c < d->n_classes; ++c) d->held[slot][c] = posterior[c];
  ++d->hops;
  return decide(d, out);
}

int edgeosc_detector_flush(EdgeoscDetector *d, EdgeoscDetection *out) {
  if (d->count <= 1) return -1;
  d->oldest = (d->oldest + 1) % d->smooth;
  --d->count;
  return decide(d, out);
}

void edgeosc_detector_posteriors(const int8_t *logits, int32_t n_classes, const double *exp_table, double *posterior) {
  int32_t c, top = -128;
  double sum = 0.0;
  for (c = 0; c < n_classes; ++c) top = logits[c] > top ? logits[c] : top;
  for (c = 0; c < n_classes; ++c) sum += posterior[c] = exp_table[top - logits[c]];
  for (c = 0; c < n_classes; ++c) posterior[c] /= sum;
}
