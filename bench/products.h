/* The GEMM floor of a benchmark's step: its products alone, through the library's GEMM
   (nbop_gemm) on buffers of their shapes, back to back. A step cannot run faster than its
   products do; benchmarks print this beside the step. */
#ifndef NB_BENCH_PRODUCTS_H
#define NB_BENCH_PRODUCTS_H

#include "../src/ops/blas.h"
#include "benchutil.h"

#include <math.h>

/* One pass of a step's products on buffers a, b and c (each large enough for every operand). */
typedef void (*bench_products_fn)(const void *user, const float *a, const float *b, float *c);

/* Median ms per pass of products(user, ...) on `threads` GEMM threads: `runs` timings of
   `reps` passes each, after one, on buffers of `floats` floats; NAN when out of memory.
   The operands are written first: calloc's untouched pages are all the one shared zero
   page, which stays in cache and would make every read free. */
static inline double bench_products_ms(bench_products_fn products, const void *user, size_t floats, int threads,
                                       int runs, int reps) {
  float *a = calloc(floats, sizeof *a), *b = calloc(floats, sizeof *b), *c = calloc(floats, sizeof *c);
  double per_pass[16], ms = NAN;
  if (runs > 16) runs = 16;
  if (a && b && c) {
    for (size_t i = 0; i < floats; i++) a[i] = b[i] = (float)(i % 7) * 0.125f;
    nbop_blas_set_threads(threads);
    products(user, a, b, c);
    for (int r = 0; r < runs; r++) {
      double t0 = bench_now();
      for (int i = 0; i < reps; i++) products(user, a, b, c);
      per_pass[r] = (bench_now() - t0) / reps;
    }
    ms = 1e3 * bench_median(per_pass, runs);
  }
  free(a);
  free(b);
  free(c);
  return ms;
}

#endif
