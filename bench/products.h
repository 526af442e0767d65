/* The GEMM floor of a benchmark's step: its products alone, through the library's GEMM
   (nbop_gemm) on buffers of their shapes, back to back. A step cannot run faster than its
   products do; benchmarks print this beside the step. */
#ifndef NB_BENCH_PRODUCTS_H
#define NB_BENCH_PRODUCTS_H

#include "../src/ops/blas.h"
#include "benchutil.h"

#include <stdbool.h>
#include <stdlib.h>

/* One pass of a step's products on buffers a, b and c (each large enough for every operand). */
typedef void (*bench_products_fn)(const void *user, const float *a, const float *b, float *c);

/* A step's products on operands of their own: fn(user, a, b, c) is one pass. */
typedef struct bench_products {
  bench_products_fn fn;
  const void *user;
  float *a, *b, *c;
} bench_products;

static inline void bench_products_free(bench_products *p) {
  free(p->a);
  free(p->b);
  free(p->c);
}

/* Buffers of `floats` floats each, the operands written; false when out of memory. The
   operands are written because calloc's untouched pages are all the one shared zero page,
   which stays in cache and would make every read free. Callers time a warm-up pass first. */
static inline bool bench_products_init(bench_products *p, bench_products_fn fn, const void *user, size_t floats) {
  *p = (bench_products){fn, user, calloc(floats, sizeof(float)), calloc(floats, sizeof(float)),
                        calloc(floats, sizeof(float))};
  if (!p->a || !p->b || !p->c) {
    bench_products_free(p);
    return false;
  }
  for (size_t i = 0; i < floats; i++) p->a[i] = p->b[i] = (float)(i % 7) * 0.125f;
  return true;
}

/* Seconds per pass of `reps` passes on `threads` GEMM threads. */
static inline double bench_products_time(const bench_products *p, int threads, int reps) {
  nbop_blas_set_threads(threads);
  double t0 = bench_now();
  for (int i = 0; i < reps; i++) p->fn(p->user, p->a, p->b, p->c);
  return (bench_now() - t0) / reps;
}

#endif
