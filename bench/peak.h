/* This core's float32 FMA peak, measured by the benchmark itself: independent chains of
   vector FMAs (enough of them to cover the FMA latency on every FMA port) with the widest
   ISA the CPU has, AVX-512, else AVX2+FMA, else SSE multiply + add. The compute-bound
   benchmarks print their fraction of it (frac_peak). */
#ifndef NB_BENCH_PEAK_H
#define NB_BENCH_PEAK_H

#include "benchutil.h"

#include <immintrin.h>
#include <math.h>
#include <omp.h>

/* Independent accumulator chains per thread: 2 FMA ports x 4-5 cycles latency, rounded up. */
#define PEAK_CHAINS 12
#define PEAK_MAX_THREADS 64

/* Each runs iters rounds of PEAK_CHAINS vector FMAs (x * y + acc) and returns a value
   depending on every one, so none can be dropped; y is slightly below 1 so nothing grows. */
#define PEAK_LOOP(VEC, SET1, FMA, ADD, STORE, LANES)                  \
  VEC acc[PEAK_CHAINS], x = SET1(1.0f), y = SET1(seed);               \
  for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = SET1((float)i);      \
  for (long it = 0; it < iters; it++)                                 \
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = FMA(acc[i], y, x); \
  for (int i = 1; i < PEAK_CHAINS; i++) acc[0] = ADD(acc[0], acc[i]); \
  float out[LANES];                                                   \
  STORE(out, acc[0]);                                                 \
  return out[0];

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static inline float peak_avx512(long iters, float seed) {
  PEAK_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps, _mm512_storeu_ps, 16)
}

__attribute__((target("avx2,fma"))) static inline float peak_avx2(long iters, float seed) {
  PEAK_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps, _mm256_storeu_ps, 8)
}

/* No FMA: a multiply and an add, two flops, as the FMA's are. */
static inline __m128 peak_sse_muladd(__m128 acc, __m128 y, __m128 x) { return _mm_add_ps(_mm_mul_ps(acc, y), x); }

static inline float peak_sse(long iters, float seed) {
  PEAK_LOOP(__m128, _mm_set1_ps, peak_sse_muladd, _mm_add_ps, _mm_storeu_ps, 4)
}

typedef struct peak_isa {
  const char *name;
  int lanes;
  float (*run)(long iters, float seed);
} peak_isa;

/* The widest of the kernels above this CPU runs. */
static inline peak_isa bench_peak_isa(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return (peak_isa){"avx512", 16, peak_avx512};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return (peak_isa){"avx2", 8, peak_avx2};
  return (peak_isa){"sse", 4, peak_sse};
}

/* Seconds for threads threads each running iters rounds at once. */
static inline double peak_pass(peak_isa isa, int threads, long iters) {
  volatile float sink = 0;
  float seed = 0.999f + 1e-7f * (float)sink; /* not a constant the compiler could fold */
  double t0 = bench_now();
#pragma omp parallel num_threads(threads)
  {
    float r = isa.run(iters, seed);
#pragma omp critical
    sink = r;
  }
  return bench_now() - t0;
}

/* The best of runs passes of peak_pass, in seconds. */
static inline double peak_best(peak_isa isa, int threads, long iters, int runs) {
  double best = 1e300;
  for (int r = 0; r < runs; r++) {
    double s = peak_pass(isa, threads, iters);
    if (s < best) best = s;
  }
  return best;
}

/* This core's peak on threads threads in GFLOP/s: the rounds per thread double until one
   thread's best of three passes takes 10 ms, then the best of 30 passes on threads
   threads (short passes and bests, so that on a shared machine some run undisturbed). */
static inline double bench_peak_measure(int threads) {
  peak_isa isa = bench_peak_isa();
  long iters = 1 << 12;
  while (peak_best(isa, 1, iters, 3) < 0.01) iters *= 2;
  double best = peak_best(isa, threads, iters, 30);
  return 2.0 * PEAK_CHAINS * isa.lanes * (double)iters * threads / best * 1e-9;
}

/* How many times one thread's FMA rate `threads` threads reach now: threads x the best of
   three ~2 ms passes on one thread over the best of three on `threads`. On a VM whose
   second vCPU shares a physical core (or is busy on the host) some minutes, this is what
   a speedup from threads measured in the same minute can reach. */
static inline double bench_peak_scaling_now(int threads) {
  static long iters;
  peak_isa isa = bench_peak_isa();
  if (!iters)
    for (iters = 1 << 10; peak_best(isa, 1, iters, 3) < 0.002;) iters *= 2;
  return threads * peak_best(isa, 1, iters, 3) / peak_best(isa, threads, iters, 3);
}
#else
typedef struct peak_isa {
  const char *name;
} peak_isa;
static inline peak_isa bench_peak_isa(void) { return (peak_isa){"unknown"}; }
static inline double bench_peak_measure(int threads) {
  (void)threads;
  return 0;
}
static inline double bench_peak_scaling_now(int threads) {
  (void)threads;
  return NAN;
}
#endif

#if defined(__x86_64__)
/* One thread's peak in GFLOP/s by its CPU time: the best of 30 passes of the same
   rounds as bench_peak_measure, on the calling thread. */
static inline double bench_peak_cpu_measure(void) {
  peak_isa isa = bench_peak_isa();
  long iters = 1 << 12;
  while (peak_best(isa, 1, iters, 3) < 0.01) iters *= 2;
  double best = 1e300;
  volatile float sink = 0;
  for (int r = 0; r < 30; r++) {
    double t0 = bench_thread_cpu_now();
    sink = isa.run(iters, 0.999f + 1e-7f * sink);
    double s = bench_thread_cpu_now() - t0;
    if (s < best) best = s;
  }
  return 2.0 * PEAK_CHAINS * isa.lanes * (double)iters / best * 1e-9;
}
#else
static inline double bench_peak_cpu_measure(void) { return 0; }
#endif

/* bench_peak_cpu_measure(), measured once per process. */
static inline double bench_peak_cpu_gflops(void) {
  static double cached;
  if (cached == 0) cached = bench_peak_cpu_measure();
  return cached;
}

/* bench_peak_measure(threads), measured once per process and thread count (0 where it
   cannot be measured: then frac_peak prints as nan). */
static inline double bench_peak_gflops(int threads) {
  static double cached[PEAK_MAX_THREADS + 1];
  if (threads < 1 || threads > PEAK_MAX_THREADS) return 0;
  if (cached[threads] == 0) cached[threads] = bench_peak_measure(threads);
  return cached[threads];
}

/* gflops as a fraction of the peak on threads threads. */
static inline double bench_frac_peak(double gflops, int threads) {
  double peak = bench_peak_gflops(threads);
  return peak > 0 ? gflops / peak : NAN;
}

/* The peak line for threads threads (by the thread's CPU time too on one thread). */
static inline void bench_print_peak(int threads) {
  printf("name=peak isa=%s threads=%d gflops=%.1f", bench_peak_isa().name, threads, bench_peak_gflops(threads));
  if (threads == 1) printf(" cpu_gflops=%.1f", bench_peak_cpu_gflops());
  printf("\n");
}

#endif
