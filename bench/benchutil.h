/* Timing helpers shared by the benchmarks. */
#ifndef NB_BENCHUTIL_H
#define NB_BENCHUTIL_H

#include <nabla.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The first line of a benchmark's output: what ran it (CPU, kernel clone, BLAS core). */
static inline void bench_print_build_info(void) { printf("# build: %s\n", nb_build_info()); }

static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The calling thread's CPU time in seconds: unlike the wall clock, it stops while other
   processes run on its core, so one-thread rates measured by it hold on a loaded machine. */
static inline double bench_thread_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The process's CPU time in seconds, every thread's together. */
static inline double bench_process_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n) (the upper middle one for even n; NAN when out of memory). v stays as
   it is: benchmarks pair v[r] with other arrays' r-th entries, a round's timings. */
static inline double bench_median(const double *v, int n) {
  double *sorted = malloc((size_t)n * sizeof *sorted + 1), median;
  if (!sorted) return NAN;
  memcpy(sorted, v, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, bench_cmp_double);
  median = sorted[n / 2];
  free(sorted);
  return median;
}

/* The median over rounds r < n of num[r] / den[r]: two configurations timed in turns
   compared round by round (a ratio within a round leaves out how the machine's speed
   moved between rounds); NAN when out of memory. */
static inline double bench_ratio_median(const double *num, const double *den, int n) {
  double *q = malloc((size_t)n * sizeof *q + 1), median;
  if (!q) return NAN;
  for (int r = 0; r < n; r++) q[r] = num[r] / den[r];
  median = bench_median(q, n);
  free(q);
  return median;
}

/* Seconds for reps calls of call(c, arg), each inside its own scope of c. */
static inline double bench_pass(nb_ctx *c, void (*call)(nb_ctx *, const void *), const void *arg, long reps) {
  double t0 = bench_now();
  for (long i = 0; i < reps; i++) {
    nb_scope_begin(c);
    call(c, arg);
    nb_scope_end(c, NULL, 0);
  }
  return bench_now() - t0;
}

/* Median seconds per call of call(c, arg): the repetitions double until a pass takes
   min_seconds / 4, then runs (<= 16) passes of four times that many are timed. */
static inline double bench_per_call(nb_ctx *c, void (*call)(nb_ctx *, const void *), const void *arg, int runs,
                                    double min_seconds) {
  double per_call[16];
  long reps = 1;
  while (bench_pass(c, call, arg, reps) < min_seconds / 4) reps *= 2;
  reps *= 4;
  if (runs > 16) runs = 16;
  for (int r = 0; r < runs; r++) per_call[r] = bench_pass(c, call, arg, reps) / (double)reps;
  return bench_median(per_call, runs);
}

/* A float32 tensor of shape with values uniform in [-scale, scale] from rand(). */
static inline nb_tensor *bench_uniform(nb_ctx *c, int rank, const int64_t *shape, float scale) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  float *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = scale * (2.0f * (float)rand() / (float)RAND_MAX - 1.0f);
  nb_tensor *t = nb_tensor_from(c, NB_F32, rank, shape, v);
  free(v);
  return t;
}

/* Resident set size in KiB, from /proc (0 where unavailable). */
static inline long bench_rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  fclose(f);
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

#endif
