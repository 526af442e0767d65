/* bench/eager_ops: elementwise throughput on 1M-element f32 tensors (GB/s of memory
   traffic: inputs read + output written, 1 and 2 threads) and the per-op overhead of
   eager AddV2 and Tanh on 1x8 tensors (ns/op, 1 thread). Prints name=... lines;
   each figure is the median of RUNS runs of at least MIN_SECONDS each. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "benchutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define RUNS 7
#define MIN_SECONDS 0.2

typedef nb_tensor *(*op_fn)(nb_ctx *c, nb_tensor *a, nb_tensor *b);

static nb_tensor *op_add(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return nb_add(c, a, b); }
static nb_tensor *op_mul(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return nb_mul(c, a, b); }
static nb_tensor *op_tanh(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
  (void)b;
  return nb_tanh(c, a);
}
static nb_tensor *op_exp(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
  (void)b;
  return nb_exp(c, a);
}
static nb_tensor *op_relu(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
  (void)b;
  return nb_relu(c, a);
}
static nb_tensor *op_sigmoid(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
  (void)b;
  return nb_sigmoid(c, a);
}

typedef struct op_call {
  op_fn op;
  nb_tensor *a, *b;
} op_call;

static void call_op(nb_ctx *c, const void *arg) {
  const op_call *k = arg;
  k->op(c, k->a, k->b);
}

/* Median seconds per call of op(a, b). */
static double time_op(nb_ctx *c, op_fn op, nb_tensor *a, nb_tensor *b) {
  op_call k = {op, a, b};
  return bench_per_call(c, call_op, &k, RUNS, MIN_SECONDS);
}

static nb_tensor *random_tensor(nb_ctx *c, int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  float *v = malloc((size_t)n * sizeof *v);
  if (!v) return NULL;
  srand(1);
  for (int64_t i = 0; i < n; i++) v[i] = (float)rand() / (float)RAND_MAX * 4.0f - 2.0f;
  nb_tensor *x = nb_tensor_from(c, NB_F32, rank, shape, v);
  free(v);
  return x;
}

static void throughput(nb_ctx *c, int threads) {
  static const struct {
    const char *name;
    op_fn fn;
    int nin;
  } ops[] = {{"add", op_add, 2}, {"mul", op_mul, 2},   {"relu", op_relu, 1},
             {"exp", op_exp, 1}, {"tanh", op_tanh, 1}, {"sigmoid", op_sigmoid, 1}};
  const int64_t n = 1 << 20, shape[1] = {n}, mat[2] = {1024, 1024}, row[1] = {1024};
  nb_tensor *a = random_tensor(c, 1, shape), *b = random_tensor(c, 1, shape);
  nb_ctx_set_threads(c, threads);
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
    double s = time_op(c, ops[i].fn, a, b);
    double bytes = (double)n * 4.0 * (ops[i].nin + 1);
    printf("name=eager_%s dtype=f32 n=%lld threads=%d gbps=%.2f us_per_op=%.1f\n", ops[i].name, (long long)n, threads,
           bytes / s / 1e9, s * 1e6);
  }
  /* broadcasting a row over a matrix: [1024,1024] + [1024] */
  nb_tensor *m = random_tensor(c, 2, mat), *r = random_tensor(c, 1, row);
  double s = time_op(c, op_add, m, r);
  printf("name=eager_add_bcast_row dtype=f32 n=%lld threads=%d gbps=%.2f us_per_op=%.1f\n", (long long)n, threads,
         (double)n * 8.0 / s / 1e9, s * 1e6);
}

static void overhead(nb_ctx *c) {
  const int64_t shape[2] = {1, 8};
  nb_tensor *a = random_tensor(c, 2, shape), *b = random_tensor(c, 2, shape);
  nb_ctx_set_threads(c, 1);
  printf("name=eager_overhead op=AddV2 shape=1x8 threads=1 ns_per_op=%.1f\n", time_op(c, op_add, a, b) * 1e9);
  printf("name=eager_overhead op=Tanh shape=1x8 threads=1 ns_per_op=%.1f\n", time_op(c, op_tanh, a, b) * 1e9);
  /* a chain x = tanh(x * w + b), one scope per step keeping only the new x */
  nb_tensor *x = nb_identity(c, a);
  const long steps = 1000000;
  long rss_start = bench_rss_kib(), rss_mid = 0;
  double t0 = bench_now();
  for (long i = 0; i < steps; i++) {
    nb_scope_begin(c);
    nb_tensor *y = nb_tanh(c, nb_add(c, nb_mul(c, x, a), b));
    nb_scope_end(c, &y, 1);
    nb_tensor_free(x);
    x = y;
    if (i == steps / 100) rss_mid = bench_rss_kib();
  }
  double per_op = (bench_now() - t0) / (double)steps / 3.0;
  printf(
      "name=eager_chain shape=1x8 steps=%ld threads=1 ns_per_op=%.1f rss_kib_start=%ld "
      "rss_kib_at_1pct=%ld rss_kib_end=%ld\n",
      steps, per_op * 1e9, rss_start, rss_mid, bench_rss_kib());
}

int main(void) {
  nb_ctx *c = nb_eager_new();
  if (!c) return 1;
  throughput(c, 1);
  throughput(c, 2);
  overhead(c);
  int rc = nb_status(c) == NB_OK ? 0 : 1;
  if (rc) fprintf(stderr, "eager_ops: %s\n", nb_error(c));
  nb_ctx_free(c);
  return rc;
}
