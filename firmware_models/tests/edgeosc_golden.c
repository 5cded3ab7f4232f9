/* The attention cores against the integer reference's golden vectors (tests/golden/attention_golden_v1.h,
 * written by `python -m edgeosc.integer.golden`), bit for bit: the oscillator core, the softmax core with
 * fixed-point exps and with its exp table. Prints one line per check; exits 1 on any mismatch. */
#include <stdio.h>

#include "edgeosc_attention.h"
#include "attention_golden_v1.h"

#if EDGEOSC_GOLDEN_FORMAT != 1
#error "edgeosc_golden.c reads golden format 1"
#endif

#define OUT_SIZE (GOLDEN_HEADS * GOLDEN_TOKENS * GOLDEN_D_VALUE)

static int compare(const char *name, int rc, const int8_t *got, const int8_t *want) {
  int i, bad = 0;
  if (rc) {
    printf("%s: FAIL (the kernel returned %d)\n", name, rc);
    return 1;
  }
  for (i = 0; i < OUT_SIZE; ++i) {
    if (got[i] != want[i] && !bad++) printf("%s: FAIL at %d: got %d, want %d\n", name, i, got[i], want[i]);
  }
  if (bad) printf("%s: %d of %d values differ\n", name, bad, OUT_SIZE);
  else printf("%s: ok (%d values)\n", name, OUT_SIZE);
  return bad != 0;
}

int main(void) {
  int8_t out[OUT_SIZE];
  int8_t scratch[EDGEOSC_OSC_SCRATCH_BYTES(GOLDEN_TOKENS, GOLDEN_D_OSC)];
  EdgeoscSoftmaxParams sm = golden_sm_params;
  int rc, failed = 0;
  rc = edgeosc_oscillator_core_int8(&golden_osc_params, golden_osc_q, golden_osc_k, golden_osc_v, golden_osc_r,
                                    out, scratch);
  failed += compare("oscillator_core", rc, out, golden_osc_out);
  rc = edgeosc_softmax_core_int8(&sm, golden_sm_q, golden_sm_k, golden_sm_v, out, scratch);
  failed += compare("softmax_core", rc, out, golden_sm_out);
  sm.exp_lut = golden_sm_exp_lut;
  rc = edgeosc_softmax_core_int8(&sm, golden_sm_q, golden_sm_k, golden_sm_v, out, scratch);
  failed += compare("softmax_core_lut", rc, out, golden_sm_out);
  return failed ? 1 : 0;
}
