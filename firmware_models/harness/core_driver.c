/* The fused attention cores one call at a time, emulated on an ARM core (edgeosc/bench/estimate/cores.py:
 * core_scaling, linear_hop_cycles). Each takes its core's own parameter struct, written by the estimator from the
 * ctypes mirror of edgeosc/integer/ckernels.py laid out for the target (its pointers null), and sets the pointers
 * from its other arguments. */
#include "edgeosc_attention.h"

/* tables: table_w, table_c and table_inv, 256 bytes each */
int edgeosc_bench_osc(EdgeoscOscParams *p, const int8_t *tables, const int8_t *q, const int8_t *k, const int8_t *v,
                      const int8_t *r, int8_t *out, int8_t *scratch) {
  p->table_w = tables, p->table_c = tables + 256, p->table_inv = tables + 512;
  return edgeosc_oscillator_core_int8(p, q, k, v, r, out, scratch);
}

/* use_lut 0: the fixed-point exp per element instead of the exp table */
int edgeosc_bench_softmax(EdgeoscSoftmaxParams *p, const int32_t *lut, const int8_t *q, const int8_t *k,
                          const int8_t *v, int8_t *out, int8_t *scratch, int use_lut) {
  p->exp_lut = use_lut ? lut : 0;
  return edgeosc_softmax_core_int8(p, q, k, v, out, scratch);
}

int edgeosc_bench_linear(EdgeoscLinearParams *p, const int8_t *q, const int8_t *k, const int8_t *v, const int8_t *r,
                         const int8_t *g, int8_t *out, int32_t *state) {
  p->turn = 0;
  return edgeosc_linear_core_int8(p, q, k, v, r, g, out, state);
}

/* A stream through the windowed linear core, its anchors turning (the firmware's per-hop work). */
int edgeosc_bench_linear_stream(EdgeoscLinearParams *p, const int32_t *turn, const int8_t *q, const int8_t *k,
                                const int8_t *v, const int8_t *r, const int8_t *g, int8_t *out, int32_t *clock,
                                int32_t *sums, int8_t *kept) {
  p->turn = turn;
  return edgeosc_linear_stream_int8(p, q, k, v, r, g, out, clock, sums, kept);
}
