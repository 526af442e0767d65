/* Shared helpers for the cmocka tests. */
#ifndef NB_TESTUTIL_H
#define NB_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nabla.h"

/* Converts a test value to an integer dtype's range (NaN -> 0), avoiding undefined casts. */
static inline double tu_clamp(double v, double lo, double hi) { return v != v ? 0 : v < lo ? lo : v > hi ? hi : v; }

/* Builds a tensor from a shape list and a value list given as doubles. */
static inline nb_tensor *tu_make(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape,
                                 const double *vals) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  unsigned char buf[8 * 4096];
  size_t esz = nb_dtype_size(t);
  assert_true((size_t)n * esz <= sizeof buf);
  for (int64_t i = 0; i < n; i++) {
    double v = vals ? vals[i] : 0;
    switch (t) {
      case NB_F32: ((float *)buf)[i] = (float)v; break;
      case NB_F64: ((double *)buf)[i] = v; break;
      case NB_I32: ((int32_t *)buf)[i] = (int32_t)tu_clamp(v, INT32_MIN, INT32_MAX); break;
      case NB_I64: ((int64_t *)buf)[i] = (int64_t)tu_clamp(v, -0x1p63, 0x1p63 - 1024); break;
      case NB_BOOL: buf[i] = v != 0; break;
    }
  }
  return nb_tensor_from(c, t, rank, shape, buf);
}

/* A float32 or float64 tensor of any size from doubles (tu_make caps the size). */
static inline nb_tensor *tu_make_float(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const double *v) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  void *buf = malloc((size_t)(n ? n : 1) * nb_dtype_size(t));
  assert_non_null(buf);
  for (int64_t i = 0; i < n; i++) {
    if (t == NB_F32)
      ((float *)buf)[i] = (float)v[i];
    else
      ((double *)buf)[i] = v[i];
  }
  nb_tensor *x = nb_tensor_from(c, t, rank, shape, buf);
  free(buf);
  return x;
}

#define TU_SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define TU_VALS(...) ((const double[]){__VA_ARGS__})
#define TU_RANK(...) ((int)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

/* Asserts x has the given dtype and shape. */
static inline void tu_check_shape(const nb_tensor *x, nb_dtype t, int rank, const int64_t *shape) {
  assert_non_null(x);
  assert_int_equal(nb_dtype_of(x), t);
  assert_int_equal(nb_rank(x), rank);
  for (int i = 0; i < rank; i++) assert_int_equal(nb_shape(x)[i], shape[i]);
}

/* Asserts every element of x is within tol of want (NaN matches NaN, inf matches inf). */
static inline void tu_check_vals(const nb_tensor *x, const double *want, double tol) {
  assert_non_null(x);
  for (int64_t i = 0; i < nb_num_elements(x); i++) {
    double got = nb_item(x, i);
    if (isnan(want[i])) {
      if (!isnan(got)) fail_msg("element %lld: got %g, want NaN", (long long)i, got);
    } else if (isinf(want[i])) {
      if (got != want[i]) fail_msg("element %lld: got %g, want %g", (long long)i, got, want[i]);
    } else if (fabs(got - want[i]) > tol * (1 + fabs(want[i]))) {
      fail_msg("element %lld: got %.9g, want %.9g", (long long)i, got, want[i]);
    }
  }
}

/* Asserts dtype, shape and values at once. */
static inline void tu_check(const nb_tensor *x, nb_dtype t, int rank, const int64_t *shape,
                            const double *want, double tol) {
  tu_check_shape(x, t, rank, shape);
  tu_check_vals(x, want, tol);
}

/* Asserts the context failed with code and a message containing every given fragment,
   then clears the error so the test can go on. */
static inline void tu_check_error(nb_ctx *c, nb_code code, const char *frag1, const char *frag2) {
  if (nb_status(c) != code)
    fail_msg("status %s, want %s (message: %s)", nb_code_name(nb_status(c)), nb_code_name(code), nb_error(c));
  if (frag1 && !strstr(nb_error(c), frag1)) fail_msg("message '%s' lacks '%s'", nb_error(c), frag1);
  if (frag2 && !strstr(nb_error(c), frag2)) fail_msg("message '%s' lacks '%s'", nb_error(c), frag2);
  nb_clear_error(c);
}

/* cmocka setup/teardown giving each test a fresh eager context in *state. */
static inline int tu_setup(void **state) {
  *state = nb_eager_new();
  return *state ? 0 : -1;
}
static inline int tu_teardown(void **state) {
  nb_ctx_free((nb_ctx *)*state);
  return 0;
}

#endif
