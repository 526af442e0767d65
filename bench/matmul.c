/* bench/matmul: square MatMul, n = 256, 512, 1024, 2048, float32 (oneDNN's GEMM) and
   float64 (OpenBLAS's), on 1 and 2 threads, through the public API in an eager context
   (one kernel call per op: less overhead than a session's run, which also feeds and
   fetches). Prints per configuration the best time of RUNS passes, GFLOP/s (2 n^3 flops)
   and the fraction of this core's measured float32 FMA peak on as many threads
   (bench/peak.h, also a best of passes, so that on a shared machine both figures are of
   undisturbed runs; float64's ideal is half of it). One-thread lines also give the rate
   and fraction by the thread's CPU time (cpu_gflops, frac_peak_cpu: the peak's measured
   the same way), which other processes on the machine barely move. Usage: matmul [max threads] (default 2). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "../src/ops/blas.h" /* the backend and kernel that run each dtype's GEMM */
#include "peak.h"

#include <stdio.h>
#include <stdlib.h>

#define RUNS 15
#define MIN_SECONDS 0.02
#define CPU_SECONDS 0.5

typedef struct product {
  nb_tensor *a, *b;
} product;

static void call_matmul(nb_ctx *c, const void *arg) {
  const product *p = arg;
  nb_matmul(c, p->a, p->b, false, false);
}

/* The best seconds per call over RUNS passes of at least MIN_SECONDS each. */
static double best_per_call(nb_ctx *c, const product *p) {
  long reps = 1;
  while (bench_pass(c, call_matmul, p, reps) < MIN_SECONDS) reps *= 2;
  double best = 1e300;
  for (int r = 0; r < RUNS; r++) {
    double s = bench_pass(c, call_matmul, p, reps) / (double)reps;
    if (s < best) best = s;
  }
  return best;
}

/* The best CPU seconds of this thread for one call, over RUNS calls and at least
   CPU_SECONDS of them: single calls, so that on a shared core some run whole between
   other processes' turns (which evict the caches a GEMM works in). */
static double best_cpu_per_call(nb_ctx *c, const product *p) {
  double best = 1e300, total = 0;
  for (int r = 0; r < RUNS || total < CPU_SECONDS; r++) {
    double t0 = bench_thread_cpu_now();
    bench_pass(c, call_matmul, p, 1);
    double s = bench_thread_cpu_now() - t0;
    total += s;
    if (s < best) best = s;
  }
  return best;
}

/* One line for an n x n product of dtype t on threads threads; false on failure. */
static bool bench_size(nb_ctx *c, nb_dtype t, int64_t n, int threads) {
  const int64_t shape[2] = {n, n};
  product p = {nb_stateless_random_uniform(c, shape, 2, (const int64_t[2]){1, n}, t),
               nb_stateless_random_uniform(c, shape, 2, (const int64_t[2]){2, n}, t)};
  call_matmul(c, &p); /* oneDNN JIT-compiles its kernel on a shape's first call */
  if (nb_status(c) != NB_OK) {
    fprintf(stderr, "matmul: %s\n", nb_error(c));
    return false;
  }
  double seconds = best_per_call(c, &p);
  double flops = 2.0 * (double)n * (double)n * (double)n, gflops = flops / seconds * 1e-9;
  printf("name=matmul n=%lld dtype=%s threads=%d backend=%s kernel=%s path=%s ms=%.3f gflops=%.1f frac_peak=%.3f",
         (long long)n, nb_dtype_name(t), threads, nbop_gemm_backend_name(t), nbop_gemm_kernel_name(t),
         nbop_gemm_path_name(t, false, false, n, n, n, n), 1e3 * seconds, gflops, bench_frac_peak(gflops, threads));
  if (threads == 1) { /* the GEMM runs on this thread alone: its CPU time is the GEMM's */
    double cpu_gflops = flops / best_cpu_per_call(c, &p) * 1e-9;
    printf(" cpu_gflops=%.1f frac_peak_cpu=%.3f", cpu_gflops,
           bench_peak_cpu_gflops() > 0 ? cpu_gflops / bench_peak_cpu_gflops() : NAN);
  }
  printf("\n");
  fflush(stdout);
  nb_tensor_free(p.a);
  nb_tensor_free(p.b);
  return true;
}

int main(int argc, char **argv) {
  int max_threads = argc > 1 ? atoi(argv[1]) : 2;
  static const nb_dtype dtypes[2] = {NB_F32, NB_F64};
  bench_print_build_info();
  nb_ctx *c = nb_eager_new();
  bool ok = c != NULL;
  for (int threads = 1; threads <= max_threads && ok; threads++) {
    nb_ctx_set_threads(c, threads);
    bench_print_peak(threads);
    for (int d = 0; d < 2 && ok; d++)
      for (int64_t n = 256; n <= 2048 && ok; n *= 2) ok = bench_size(c, dtypes[d], n, threads);
  }
  nb_ctx_free(c);
  return ok ? 0 : 1;
}
