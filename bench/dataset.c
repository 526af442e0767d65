/* bench/dataset: Fashion-MNIST from Debian's dataset-fashion-mnist (the default directory,
   or argv[1]). Median of RUNS runs:
     nb_dataset_load_ms   nb_fashion_mnist of the 60000-item training set (gunzip + checks)
     nb_dataset_batch_us  one shuffled batch of 64 and of 128 (NHWC float32), made and freed
   and the resident set before and after the loads (the pixels stay bytes: ~47 MB). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "benchutil.h"

#include <stdio.h>

#define RUNS 5
#define BATCHES 1000

/* Median microseconds per batch of n, over RUNS runs of BATCHES batches. */
static double time_batches(nb_ctx *c, nb_dataset *d, int64_t n) {
  double runs[RUNS];
  int64_t last = nb_dataset_size(d) - n;
  for (int r = 0; r < RUNS; r++) {
    double t0 = bench_now();
    for (int b = 0; b < BATCHES; b++) {
      nb_tensor *x, *y;
      if (nb_dataset_batch(c, d, (int64_t)b * n % last, n, NB_IMAGES_NHWC, &x, &y) != NB_OK) return -1;
      nb_tensor_free(x);
      nb_tensor_free(y);
    }
    runs[r] = (bench_now() - t0) / BATCHES * 1e6;
  }
  return bench_median(runs, RUNS);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : NULL;
  nb_ctx *c = nb_eager_new();
  if (!c) return 1;
  long rss0 = bench_rss_kib();
  double loads[RUNS];
  nb_dataset *d = NULL;
  for (int r = 0; r < RUNS; r++) {
    nb_dataset_free(d);
    double t0 = bench_now();
    d = nb_fashion_mnist(c, dir, true);
    loads[r] = (bench_now() - t0) * 1e3;
    if (!d) {
      fprintf(stderr, "bench/dataset: %s\n", nb_error(c));
      nb_ctx_free(c);
      return 1;
    }
  }
  long rss1 = bench_rss_kib();
  nb_dataset_shuffle(d, 1);
  printf("nb_dataset_load_ms items=%lld median=%.1f\n", (long long)nb_dataset_size(d), bench_median(loads, RUNS));
  printf("nb_dataset_rss_kib before=%ld after=%ld\n", rss0, rss1);
  for (int64_t n = 64; n <= 128; n *= 2)
    printf("nb_dataset_batch_us n=%lld median=%.2f\n", (long long)n, time_batches(c, d, n));
  nb_dataset_free(d);
  nb_ctx_free(c);
  return 0;
}
