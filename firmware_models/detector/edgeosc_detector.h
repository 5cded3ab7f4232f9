/* Always-on decisions: edgeosc/stream.py's rule (Listener, fires) in portable C99, no libm.
 *
 * Each hop the model's posteriors (a softmax of its logits) enter a moving average over the last `smooth` hops. The
 * likeliest keyword is detected when its average reaches `threshold`, at least `refractory` half hops after the last
 * detection. A decision's time is the hop's end less the average's delay, (n - 1) / 2 hops for n hops held, so times
 * are whole half hops and the rule is exact: given the same posteriors (doubles) this makes the Python listener's
 * decisions, the same scores bit for bit (the average sums the held hops oldest first, as numpy's mean does).
 * At the end of a stream, edgeosc_detector_flush shrinks the average onto the last hops, as the listener's flush does.
 */
#ifndef EDGEOSC_DETECTOR_H
#define EDGEOSC_DETECTOR_H

#include <stdint.h>

#ifndef EDGEOSC_DETECTOR_MAX_CLASSES
#define EDGEOSC_DETECTOR_MAX_CLASSES 16
#endif
#ifndef EDGEOSC_DETECTOR_MAX_SMOOTH
#define EDGEOSC_DETECTOR_MAX_SMOOTH 48
#endif

typedef struct {
  int32_t n_classes, smooth; /* classes; hops averaged */
  uint32_t keywords;         /* bit c set: class c is a keyword (not _silence_ or _unknown_) */
  double threshold;          /* the smoothed posterior to detect */
  int64_t refractory;        /* half hops after a detection with none */
  double held[EDGEOSC_DETECTOR_MAX_SMOOTH][EDGEOSC_DETECTOR_MAX_CLASSES]; /* a ring of the last hops' posteriors */
  int32_t count, oldest;     /* hops held; the oldest one's slot */
  int64_t hops;              /* hops pushed */
  int64_t last;              /* the last detection's time in half hops */
  int32_t detected;          /* any detection yet */
} EdgeoscDetector;

typedef struct {
  int32_t keyword;  /* its class */
  double score;     /* its smoothed posterior */
  int64_t time;     /* half hops from the stream's first pushed hop's start: 2 x hops pushed - (n - 1) */
  int64_t emitted;  /* hops pushed when it was decided */
} EdgeoscDetection;

/** A new stream's detector; 0, or -1 for settings out of range (classes 1..MAX_CLASSES, smooth 1..MAX_SMOOTH, a
 *  keyword among the classes, refractory >= 0). */
int edgeosc_detector_init(EdgeoscDetector *d, int32_t n_classes, uint32_t keywords, int32_t smooth, double threshold,
                          int64_t refractory);

/** One hop's posteriors [n_classes]: 1 and *out set when a keyword is detected, else 0. */
int edgeosc_detector_push(EdgeoscDetector *d, const double *posterior, EdgeoscDetection *out);

/** End of stream, one step of the shrinking average: 1 (*out set) or 0 while hops are held, -1 once none is left to
 *  drop (call until it returns -1). */
int edgeosc_detector_flush(EdgeoscDetector *d, EdgeoscDetection *out);

/** Posteriors of int8 logits: exp_table[m] = e^(-m s) for m = 0..255 and the logits' scale s (the model's
 *  output quantization, computed once off the inference path); posterior[c] = exp_table[max - q_c] / their sum. */
void edgeosc_detector_posteriors(const int8_t *logits, int32_t n_classes, const double *exp_table, double *posterior);

#endif
