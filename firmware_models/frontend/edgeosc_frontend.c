/* Float32 log-mel / MFCC front end (see edgeosc_frontend.h). */
#include "edgeosc_frontend.h"

#define LOG_OFFSET 1e-6f /* arm_mfcc_f32 adds it before the log */

#if defined(__GNUC__)
#define SQRTF(x) __builtin_sqrtf(x) /* the FPU instruction with -fno-math-errno */
#else
#include <math.h>
#define SQRTF(x) sqrtf(x)
#endif

float edgeosc_logf(float x) {
  union {
    float f;
    uint32_t u;
  } v;
  float m, s, s2;
  int32_t e;
  v.f = x;
  e = (int32_t)((v.u >> 23) & 0xFF) - 127;
  v.u = (v.u & 0x7FFFFFu) | 0x3F800000u; /* mantissa in [1, 2) */
  m = v.f;
  if (m > 1.41421356f) { /* keep m in [sqrt(1/2), sqrt(2)): |s| <= 0.172 */
    m *= 0.5f;
    ++e;
  }
  s = (m - 1.0f) / (m + 1.0f); /* log m = 2 atanh s */
  s2 = s * s;
  return (float)e * 0.693147181f +
         2.0f * s * (1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9)))));
}

static float absf(float x) { return x < 0 ? -x : x; }

/* In-place radix-2 DIT FFT of n complex values (interleaved re, im); twiddle k of size n is entry
 * k * stride of the frame_length tables. */
static void fft(float *z, int32_t n, const float *cs, const float *sn, int32_t stride) {
  int32_t i, j, len, bit;
  for (i = 1, j = 0; i < n; ++i) { /* bit-reversal permutation */
    for (bit = n >> 1; j & bit; bit >>= 1) j ^= bit;
    j |= bit;
    if (i < j) {
      const float re = z[2 * i], im = z[2 * i + 1];
      z[2 * i] = z[2 * j];
      z[2 * i + 1] = z[2 * j + 1];
      z[2 * j] = re;
      z[2 * j + 1] = im;
    }
  }
  for (len = 2; len <= n; len <<= 1) {
    const int32_t half = len >> 1, step = stride * (n / len);
    for (i = 0; i < n; i += len) {
      for (j = 0; j < half; ++j) {
        float *u = z + 2 * (i + j), *t = u + 2 * half;
        const float wr = cs[j * step], wi = -sn[j * step]; /* exp(-2 pi i j / len) */
        const float tr = t[0] * wr - t[1] * wi, ti = t[0] * wi + t[1] * wr;
        t[0] = u[0] - tr;
        t[1] = u[1] - ti;
        u[0] += tr;
        u[1] += ti;
      }
    }
  }
}

void edgeosc_frontend_frame(const EdgeoscFrontend *f, const int16_t *pcm, float *coeffs, float *scratch) {
  const int32_t N = f->frame_length, M = N / 2;
  float *z = scratch, *mag = scratch + N;
  float *logmel = f->dct ? mag : coeffs; /* with a DCT, the log-mels reuse the magnitude buffer */
  const float *coef = f->filter_coefs;
  int32_t k, m, i;
  for (i = 0; i < N; ++i) z[i] = (float)pcm[i] * (1.0f / 32768) * f->window[i];
  /* N real samples as M complex ones: X[k] = E[k] + W^k O[k] from the half-size FFT Z = E + i O */
  fft(z, M, f->cos_table, f->sin_table, 2);
  mag[0] = absf(z[0] + z[1]); /* DC and Nyquist are real */
  mag[M] = absf(z[0] - z[1]);
  for (k = 1; k < M; ++k) {
    const float ar = z[2 * k], ai = z[2 * k + 1], br = z[2 * (M - k)], bi = -z[2 * (M - k) + 1];
    const float er = 0.5f * (ar + br), ei = 0.5f * (ai + bi); /* even samples' spectrum */
    const float or_ = 0.5f * (ai - bi), oi = -0.5f * (ar - br); /* odd samples': (A - B) / 2i */
    const float wr = f->cos_table[k], wi = -f->sin_table[k];
    const float xr = er + or_ * wr - oi * wi, xi = ei + or_ * wi + oi * wr;
    mag[k] = SQRTF(xr * xr + xi * xi);
  }
  for (m = 0; m < f->n_mels; ++m) {
    const float *bins = mag + f->filter_pos[m];
    float e = 0;
    for (k = 0; k < f->filter_len[m]; ++k) e += coef[k] * bins[k];
    coef += f->filter_len[m];
    logmel[m] = e; /* logs after the loop: with a DCT, logmel aliases mag */
  }
  for (m = 0; m < f->n_mels; ++m) logmel[m] = edgeosc_logf(logmel[m] + LOG_OFFSET);
  for (i = 0; f->dct && i < f->n_mfcc; ++i) {
    float c = 0;
    for (m = 0; m < f->n_mels; ++m) c += f->dct[i * f->n_mels + m] * logmel[m];
    coeffs[i] = c;
  }
}

void edgeosc_frontend_clip(const EdgeoscFrontend *f, const int16_t *pcm, float *features, float *scratch) {
  const int32_t C = f->n_mfcc ? f->n_mfcc : f->n_mels, n = f->n_frames * C;
  /* MFCCs with the active mean: each frame's loudest log-mel, which the DCT leaves behind in the frame's scratch */
  float *const levels = f->dct && f->normalize == 2 ? scratch + EDGEOSC_FRONTEND_SCRATCH(f->frame_length) : 0;
  int32_t t, c, i;
  float peak;
  for (t = 0; t < f->n_frames; ++t) {
    edgeosc_frontend_frame(f, pcm + t * f->hop_length, features + t * C, scratch);
    if (levels) {
      const float *log_mel = scratch + f->frame_length;
      levels[t] = log_mel[0];
      for (i = 1; i < f->n_mels; ++i) levels[t] = log_mel[i] > levels[t] ? log_mel[i] : levels[t];
    }
  }
  peak = levels ? levels[0] : features[0];
  /* the clip's largest log-mel, for the floor (log-mel only: the generator refuses a DCT) and the active frames; the
     floor leaves it where it is */
  for (i = 1; levels && i < f->n_frames; ++i) peak = levels[i] > peak ? levels[i] : peak;
  for (i = 1; !levels && (f->floor > 0 || f->normalize == 2) && i < n; ++i)
    peak = features[i] > peak ? features[i] : peak;
  if (f->floor > 0) {
    const float lo = peak - f->floor;
    for (i = 0; i < n; ++i) features[i] = features[i] < lo ? lo : features[i];
  }
  if (f->normalize == 3) { /* each frame less each coefficient's mean over the frames up to it */
    float *sum = scratch;
    for (c = 0; c < C; ++c) sum[c] = 0;
    for (t = 0; t < f->n_frames; ++t)
      for (c = 0; c < C; ++c) {
        sum[c] += features[t * C + c];
        features[t * C + c] -= sum[c] / (float)(t + 1);
      }
  } else if (f->normalize) { /* each coefficient's mean over every frame (1) or over the active frames (2) */
    float *mean = scratch, gate = peak - f->active, count = 0; /* the frames are done with the scratch */
    for (c = 0; c < C; ++c) mean[c] = 0;
    for (t = 0; t < f->n_frames; ++t) {
      const float *x = features + t * C;
      float level = levels ? levels[t] : x[0];
      for (c = 1; !levels && f->normalize == 2 && c < C; ++c) level = x[c] > level ? x[c] : level;
      if (f->normalize == 2 && level < gate) continue;
      for (c = 0; c < C; ++c) mean[c] += x[c];
      ++count;
    }
    for (c = 0; c < C; ++c) mean[c] /= count;
    for (t = 0; t < f->n_frames; ++t)
      for (c = 0; c < C; ++c) features[t * C + c] -= mean[c];
  }
}

void edgeosc_frontend_quantize(int32_t n, const float *x, float scale, int32_t zero_point, int8_t *out) {
  int32_t i;
  for (i = 0; i < n; ++i) {
    const float y = x[i] / scale;
    float frac;
    int32_t q;
    if (y > 255.0f || y < -255.0f) { /* saturates whatever the rounding */
      out[i] = (int8_t)(y > 0 ? 127 : -128);
      continue;
    }
    q = (int32_t)y; /* toward zero; the fraction y - q is exact in float */
    frac = absf(y - (float)q);
    if (frac > 0.5f || (frac == 0.5f && (q & 1))) q += y < 0 ? -1 : 1;
    q += zero_point;
    out[i] = (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
  }
}
