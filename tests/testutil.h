/* Shared helpers for the cmocka tests. */
#ifndef NB_TESTUTIL_H
#define NB_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "nabla.h"

/* Converts a test value to an integer dtype's range (NaN -> 0), avoiding undefined casts. */
static inline double tu_clamp(double v, double lo, double hi) { return v != v ? 0 : v < lo ? lo : v > hi ? hi : v; }

/* Builds a tensor from a shape list and a value list given as doubles. */
static inline nb_tensor *tu_make(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const double *vals) {
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
    } else if (!(fabs(got - want[i]) <= tol * (1 + fabs(want[i])))) { /* a NaN got fails too */
      fail_msg("element %lld: got %.9g, want %.9g", (long long)i, got, want[i]);
    }
  }
}

/* Asserts dtype, shape and values at once. */
static inline void tu_check(const nb_tensor *x, nb_dtype t, int rank, const int64_t *shape, const double *want,
                            double tol) {
  tu_check_shape(x, t, rank, shape);
  tu_check_vals(x, want, tol);
}

/* ---- tolerances of sums ----------------------------------------------------------------
   A sum of n terms, or a dot product of depth n, evaluated in any order, with or without FMA,
   in a dtype of unit roundoff u, is within gamma_n S of the exact value, where S is the sum
   of the terms' magnitudes and gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability of
   Numerical Algorithms, 2nd ed., sec. 3.1). OpenBLAS picks its GEMM kernels by CPU
   (OPENBLAS_CORETYPE), and thread counts, split products and plain loops all sum in
   other orders, so results of different code paths agree only within such bounds; the same
   bits are promised only by the same path (same kernel, same thread count). nabla's own
   loops round alike on every x86-64 CPU (GCC builds their AVX2 and AVX-512 clones as ISO
   C11: no FMA contraction, no reassociation), so only what passes through GEMM or sums
   split by thread count needs these bounds. */

/* Unit roundoff of a float dtype: 2^-24 for float32, 2^-53 for float64. */
static inline double tu_unit_roundoff(nb_dtype t) { return t == NB_F32 ? 0x1p-24 : 0x1p-53; }

/* gamma_n in dtype t. */
static inline double tu_gamma(nb_dtype t, int64_t n) {
  double nu = (double)n * tu_unit_roundoff(t);
  assert_true(nu < 0.5);
  return nu / (1 - nu);
}

/* Asserts that each element of got, a sum of n terms in got's dtype, is within the bound
   of two such sums of want_dtype's: |got_i - want_i| <= (gamma_n(got) + gamma_n(want)) S_i,
   where abs_sums[i] is S_i computed in float64 (its own relative error, below
   gamma_n(float64), is allowed for by one more such factor). */
static inline void tu_check_sums(const nb_tensor *got, const double *want, nb_dtype want_dtype, int64_t n,
                                 const double *abs_sums) {
  assert_non_null(got);
  double rel = (tu_gamma(nb_dtype_of(got), n) + tu_gamma(want_dtype, n)) * (1 + 2 * tu_gamma(NB_F64, n));
  for (int64_t i = 0; i < nb_num_elements(got); i++) {
    double g = nb_item(got, i), bound = rel * abs_sums[i];
    if (!(fabs(g - want[i]) <= bound))
      fail_msg("element %lld: got %.17g, want %.17g, off by %.3g, bound %.3g (sum of %lld terms)", (long long)i, g,
               want[i], fabs(g - want[i]), bound, (long long)n);
  }
}

/* xorshift64: a reproducible stream for random test cases (any seed but 0). */
typedef struct tu_rng {
  uint64_t s;
} tu_rng;
static inline uint32_t tu_rng_next(tu_rng *r) {
  r->s ^= r->s << 13, r->s ^= r->s >> 7, r->s ^= r->s << 17;
  return (uint32_t)(r->s >> 11);
}

/* ---- threads ------------------------------------------------------------------------------ */

/* Sets c to n threads, or to all the cores when there are fewer (nb_ctx_set_threads refuses
   more threads than cores), saying so; returns the count set. */
static inline int tu_set_threads(nb_ctx *c, int n) {
  int cores = omp_get_num_procs();
  if (n > cores) {
    print_message("only %d core(s) here: %d thread(s) instead of %d\n", cores, cores, n);
    n = cores;
  }
  nb_ctx_set_threads(c, n);
  assert_int_equal(nb_ctx_threads(c), n);
  return n;
}

/* For a test that compares one thread with two: sets c to 2 threads, or, on one core, says
   the comparison cannot run here and skips the test. */
static inline void tu_two_threads_or_skip(nb_ctx *c) {
  if (tu_set_threads(c, 2) < 2) {
    print_message("skipped: comparing 1 thread with 2 needs 2 cores\n");
    skip();
  }
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

/* A graph input of dtype t, rank rank and every dim unknown (-1). */
static inline nb_tensor *tu_unknown_dims(nb_ctx *c, nb_dtype t, int rank) {
  const int64_t unknown[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  return nb_placeholder(c, t, rank, unknown, NULL);
}

/* A graph input of dtype t and unknown rank (a Placeholder without a shape attr). */
static inline nb_tensor *tu_unknown_rank(nb_ctx *c, nb_dtype t) {
  nb_attr dtype = nb_attr_type("dtype", t);
  nb_tensor *x = NULL;
  nb_op(c, "Placeholder", NULL, 0, &dtype, 1, &x, 1);
  return x;
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
