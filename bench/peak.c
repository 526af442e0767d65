/* bench/peak: this core's float32 FMA peak in GFLOP/s on 1 and 2 threads (bench/peak.h),
   the figure every compute-bound benchmark's frac_peak divides by. Two threads at twice one
   thread's peak run on cores of their own; near one thread's, on SMT siblings sharing one
   core's FMA units. The one-thread line also gives the peak by the thread's CPU time
   (cpu_gflops), which other processes on the machine barely move. Usage: peak [max threads] (default 2). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "peak.h"

int main(int argc, char **argv) {
  int max_threads = argc > 1 ? atoi(argv[1]) : 2;
  bench_print_build_info();
  for (int threads = 1; threads <= max_threads; threads++) bench_print_peak(threads);
  return 0;
}
