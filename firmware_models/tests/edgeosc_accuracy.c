/* Accuracy of the integer rsqrt, exp and reciprocal (edgeosc_fixedpoint.c) against double math.
 *
 *   rsqrt: GetInvSqrtQuantizedMultiplierExp(x) = m 2^(shift - 31) vs 1/sqrt(x), every x in [2, 2^24]
 *          (all sums of squares of up to 258 int8 differences in [-255, 255]), then every 257th x up to
 *          2^31 - 1; x = 0 and 1 (the zero guard) return 1.
 *   exp:   exp_on_negative_values (Q5.26 in, Q0.31 out) vs exp(a / 2^26), every a in [-2^20, 0] and
 *          every 61st a over [-2^31, 0], as an absolute error in Q0.31 units.
 *   recip: one_over_one_plus_x (Q0.31 in and out) vs 1 / (1 + x), every 61st x over [0, 2^31).
 * Prints one line per function: "<name> max_error <value> at <input>". */
#include <math.h>
#include <stdio.h>

#include "edgeosc_fixedpoint.h"

static double rsqrt_error(int32_t x) {
  int32_t m;
  int shift;
  edgeosc_inv_sqrt_multiplier(x, &m, &shift);
  return fabs(ldexp((double)m, shift - 31) * sqrt((double)(x > 1 ? x : 1)) - 1.0);
}

static double exp_error(int32_t a) {
  return fabs((double)edgeosc_exp_on_negative_values_q5(a) - ldexp(exp(ldexp((double)a, -26)), 31));
}

static double recip_error(int32_t x) {
  return fabs((double)edgeosc_one_over_one_plus_x(x) - ldexp(1.0 / (1.0 + ldexp((double)x, -31)), 31));
}

int main(void) {
  double worst = 0, e;
  int64_t x, at = 0;
  for (x = 0; x <= 2147483647; x += x < (1 << 24) ? 1 : 257)
    if ((e = rsqrt_error((int32_t)x)) > worst) worst = e, at = x;
  printf("rsqrt max_error %.3e at %lld\n", worst, (long long)at);
  worst = 0;
  for (x = 0; x >= -2147483647 - 1LL; x -= x > -(1 << 20) ? 1 : 61)
    if ((e = exp_error((int32_t)x)) > worst) worst = e, at = x;
  printf("exp max_error %.3e at %lld\n", worst, (long long)at);
  worst = 0;
  for (x = 0; x <= 2147483647; x += 61)
    if ((e = recip_error((int32_t)x)) > worst) worst = e, at = x;
  printf("recip max_error %.3e at %lld\n", worst, (long long)at);
  return 0;
}
