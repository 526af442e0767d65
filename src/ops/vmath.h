/* Branch-free float32 exp and tanh, shared by the elementwise families so their loops
   vectorize (their compute-bound loops take NBOP_SIMD_CLONES from op.h). */
#ifndef NBOP_VMATH_H
#define NBOP_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* glibc's tanhf alone costs ~18 ns per element; these vectorize. float64 uses libm. */
static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* e^x = 2^n e^r with n = round(x / ln 2), |r| <= ln2/2; e^r by Cephes' degree-6
   polynomial (about 1 ulp); 2^n applied in two halves so results down to the
   denormals and up to overflow come out right. NaN stays NaN. */
static inline float vexpf(float x) {
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  x = x > 88.8f ? 88.8f : x;
  x = x < -104.0f ? -104.0f : x;
  float t = x * 1.44269504088896341f + magic;
  int32_t n = (int32_t)(f32_bits(t) - f32_bits(magic));
  float nf = t - magic;
  float r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t n1 = n / 2, n2 = n - n1;
  y *= f32_from_bits((uint32_t)(n1 + 127) << 23);
  return y * f32_from_bits((uint32_t)(n2 + 127) << 23);
}

/* tanh: odd polynomial (Cephes) below |x| = 0.625, where 1 - 2/(e^2x + 1) would
   cancel; that form above it. Both are computed and one selected, without branches. */
static inline float vtanhf(float x) {
  float ax = fabsf(x), z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = p * z * x + x;
  float big = 1.0f - 2.0f / (vexpf(2.0f * ax) + 1.0f);
  big = x < 0 ? -big : big;
  return ax < 0.625f ? small : big;
}

#endif
