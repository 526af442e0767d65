/* bench/peak: this core's float32 FMA peak in GFLOP/s on 1 and 2 threads (bench/peak.h),
   the figure every compute-bound benchmark's frac_peak divides by. Two threads at twice one
   thread's peak run on cores of their own; near one thread's, on SMT siblings sharing one
   core's FMA units. Usage: peak [max threads] (default 2). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "peak.h"

int main(int argc, char **argv) {
  int max_threads = argc > 1 ? atoi(argv[1]) : 2;
  bench_print_build_info();
  for (int threads = 1; threads <= max_threads; threads++)
    printf("name=peak isa=%s threads=%d gflops=%.1f\n", bench_peak_isa().name, threads, bench_peak_gflops(threads));
  return 0;
}
