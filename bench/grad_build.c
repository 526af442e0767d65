/* bench/grad_build: cost of building gradient graphs with nb_gradients (tf.gradients),
   the same workloads as bench/peers/grad_build.py (tf.gradients, jax.grad):
   - chain: y = tanh(y * c) repeated on a [1,8] float32 placeholder, then Sum;
   - dag: a random DAG with fan-out (each new op reads one or two of the last 16 values:
     tanh, sin, mul or add), then Sum;
   - small_in_big: a 100-op chain differentiated inside a graph that also holds N
     unrelated ops (its cost must not depend on N).
   Prints ns per forward op (median of RUNS), 1 thread (graph building is serial).
   Usage: grad_build [N ...]   (default 10000 100000 1000000) */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "benchutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define RUNS 3
#define WINDOW 16

static nb_tensor *placeholder(nb_ctx *c, const char *name) {
  const int64_t shape[2] = {1, 8};
  return nb_placeholder(c, NB_F32, 2, shape, name);
}

/* n forward ops: n/2 steps of y = tanh(y * c). */
static nb_tensor *chain(nb_ctx *c, nb_tensor *x, long n) {
  nb_tensor *k = nb_scalar(c, NB_F32, 0.5), *y = x;
  for (long i = 0; i < n; i += 2) {
    nb_tensor *next = nb_tanh(c, nb_mul(c, y, k));
    if (y != x) nb_tensor_free(y);
    y = next;
  }
  nb_tensor_free(k);
  return nb_sum(c, y, NULL, 0, false);
}

/* n forward ops, each reading one or two of the last WINDOW values (xorshift RNG). */
static nb_tensor *dag(nb_ctx *c, nb_tensor *x, long n) {
  nb_tensor *ring[WINDOW] = {x};
  long count = 1;
  uint64_t s = 88172645463325252ull;
  for (long i = 0; i < n; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    long w = count < WINDOW ? count : WINDOW;
    nb_tensor *a = ring[(count - 1 - (long)(s % (uint64_t)w)) % WINDOW];
    nb_tensor *b = ring[(count - 1 - (long)((s >> 20) % (uint64_t)w)) % WINDOW];
    int kind = (int)((s >> 40) % 4);
    nb_tensor *y = kind == 0 ? nb_tanh(c, a) : kind == 1 ? nb_sin(c, a) : kind == 2 ? nb_mul(c, a, b) : nb_add(c, a, b);
    nb_tensor *old = ring[count % WINDOW];
    if (count >= WINDOW && old != x) nb_tensor_free(old);
    ring[count++ % WINDOW] = y;
  }
  return nb_sum(c, ring[(count - 1) % WINDOW], NULL, 0, false);
}

typedef nb_tensor *(*builder)(nb_ctx *c, nb_tensor *x, long n);

/* Median ns per forward op of nb_gradients on a fresh graph of n ops. */
static double time_gradients(builder build, long n, double *build_s) {
  double per_op[RUNS];
  for (int r = 0; r < RUNS; r++) {
    nb_graph *g = nb_graph_new();
    nb_ctx *c = nb_graph_ctx_new(g);
    double t0 = bench_now();
    nb_tensor *x = placeholder(c, "x"), *loss = build(c, x, n), *dx;
    double t1 = bench_now();
    nb_code code = nb_gradients(c, &loss, 1, &x, 1, NULL, &dx);
    double t2 = bench_now();
    if (code || !dx) {
      fprintf(stderr, "grad_build: %s\n", nb_error(c));
      exit(1);
    }
    *build_s = t1 - t0;
    per_op[r] = (t2 - t1) * 1e9 / (double)n;
    nb_ctx_free(c);
    nb_graph_free(g);
  }
  return bench_median(per_op, RUNS);
}

static double small_in_big(long n, long piece) {
  double per_op[RUNS];
  for (int r = 0; r < RUNS; r++) {
    nb_graph *g = nb_graph_new();
    nb_ctx *c = nb_graph_ctx_new(g);
    nb_tensor *bulk = chain(c, placeholder(c, "z"), n);
    nb_tensor *x = placeholder(c, "x"), *loss = chain(c, x, piece), *dx;
    double t0 = bench_now();
    nb_code code = nb_gradients(c, &loss, 1, &x, 1, NULL, &dx);
    per_op[r] = (bench_now() - t0) * 1e9 / (double)piece;
    if (code || !dx || !bulk) {
      fprintf(stderr, "grad_build: %s\n", nb_error(c));
      exit(1);
    }
    nb_ctx_free(c);
    nb_graph_free(g);
  }
  return bench_median(per_op, RUNS);
}

int main(int argc, char **argv) {
  long sizes[8] = {10000, 100000, 1000000};
  int nsizes = 3;
  if (argc > 1) {
    nsizes = 0;
    for (int i = 1; i < argc && nsizes < 8; i++) sizes[nsizes++] = atol(argv[i]);
  }
  for (int i = 0; i < nsizes; i++) {
    long n = sizes[i];
    double bs;
    double t = time_gradients(chain, n, &bs);
    printf("name=nb_grad_build graph=chain n=%ld threads=1 ns_per_fwd_op=%.1f forward_build_s=%.3f\n", n, t, bs);
    t = time_gradients(dag, n, &bs);
    printf("name=nb_grad_build graph=dag n=%ld threads=1 ns_per_fwd_op=%.1f forward_build_s=%.3f\n", n, t, bs);
    printf("name=nb_grad_small_in_big n=%ld piece=100 threads=1 ns_per_piece_op=%.1f\n", n, small_in_big(n, 100));
    fflush(stdout);
  }
  return 0;
}
