/* bench/dist: the collectives across MPI ranks (run it under mpirun; alone it is a job of
   one). Three measurements, each the median of RUNS runs, lines printed by rank 0:
     allreduce  CollectiveReduceV2 (Add, eager) of BYTES of float32 against a bare
                MPI_Allreduce of the same bytes: seconds per call and the ratio (target
                >= 0.9: nabla's op adds the exchange of the ranks' descriptions and a copy)
     dp         data-parallel training of an MLP 784-512-512-10 at a global batch of 128
                split across the ranks (nb_dist_gradient_vars + SGD): images/s, and rank
                0's CPU ms per step (below the step's wall ms: it waited for a core). Run
                it with -np 1 and -np 2 (--threads 1 each) for the scaling at one batch
     overlap    the same step with bucketed all-reduces started during the backward pass
                against all started after it (nb_dist_reducer_set_overlap false): step_ms
     dp_local   the same step with each rank keeping its own gradients (no all-reduce,
                the ranks run side by side): images/s as in dp, the most the ranks reach
                on this machine before any communication (shared caches, memory bandwidth,
                cores the host shares), and dp's fraction of it
   Usage: mpirun -np N dist [threads [allreduce|dp]] (default 1 thread, both). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <mpi.h>

#include "benchutil.h"

#include <stdint.h>
#include <string.h>

#define RUNS 5
#define REPS 20
#define BYTES ((int64_t)16 << 20)
#define GLOBAL_BATCH 128
#define STEPS 10
#define BUCKET_BYTES ((size_t)1 << 20)

static int rank, size;

static double allreduce_op(nb_ctx *c, nb_tensor *x) {
  double t0 = bench_now();
  for (int i = 0; i < REPS; i++) {
    nb_scope_begin(c);
    if (!nb_collective_reduce_v2(c, x, size, 1, i, "Add", "Id", 0)) fprintf(stderr, "dist: %s\n", nb_error(c));
    nb_scope_end(c, NULL, 0);
  }
  return (bench_now() - t0) / REPS;
}

static double allreduce_bare(const float *in, float *out, int n) {
  double t0 = bench_now();
  for (int i = 0; i < REPS; i++) MPI_Allreduce(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return (bench_now() - t0) / REPS;
}

static void bench_allreduce(nb_ctx *c) {
  int n = (int)(BYTES / 4);
  float *in = malloc((size_t)n * sizeof *in), *out = calloc((size_t)n, sizeof *out);
  /* written, so that both calls read memory: calloc's untouched pages are all the one
     shared zero page, which stays in cache and made the bare call's reads free */
  for (int i = 0; i < n; i++) in[i] = (float)(i % 7);
  nb_tensor *x = nb_tensor_from(c, NB_F32, 1, (int64_t[]){n}, in);
  double op[RUNS], bare[RUNS];
  for (int r = 0; r < RUNS; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    bare[r] = allreduce_bare(in, out, n);
    MPI_Barrier(MPI_COMM_WORLD);
    op[r] = allreduce_op(c, x);
  }
  double o = bench_median(op, RUNS), b = bench_median(bare, RUNS);
  if (rank == 0)
    printf("name=allreduce ranks=%d bytes=%lld op_s=%.6f mpi_s=%.6f op_GBps=%.3f mpi_GBps=%.3f ratio=%.3f\n", size,
           (long long)BYTES, o, b, BYTES / o * 1e-9, BYTES / b * 1e-9, b / o);
  nb_tensor_free(x);
  free(in);
  free(out);
}

/* ---- data parallel ------------------------------------------------------------------------- */

enum { NVARS = 6 };
static const int64_t dims[4] = {784, 512, 512, 10};

static nb_tensor *logits(nb_ctx *c, nb_variable *const *v, nb_tensor *x) {
  nb_tensor *h = x;
  for (int l = 0; l < 3; l++) {
    h = nb_bias_add(c, nb_matmul(c, h, nb_variable_read(c, v[2 * l]), false, false), nb_variable_read(c, v[2 * l + 1]),
                    NULL);
    if (l < 2) h = nb_relu(c, h);
  }
  return h;
}

static double cpu_per_step; /* of the last train() */

/* Seconds per step of STEPS steps on this rank's share of the global batch; r NULL: the
   rank's own gradients, not averaged. */
static double train(nb_ctx *c, nb_variable *const *v, nb_dist_reducer *r, nb_optimizer *sgd, nb_tensor *x,
                    nb_tensor *labels) {
  double t0 = bench_now(), cpu0 = bench_process_cpu_now(); /* against wall time: what a step waited for */
  for (int s = 0; s < STEPS; s++) {
    nb_tensor *grads[NVARS], *loss = NULL;
    nb_scope_begin(c);
    nb_tape *t = nb_tape_begin(c, 0);
    nb_sparse_softmax_cross_entropy_with_logits(c, logits(c, v, x), labels, &loss, NULL);
    loss = nb_mean(c, loss, NULL, 0, false);
    if (r)
      nb_dist_gradient_vars(r, t, &loss, 1, v, NVARS, grads);
    else
      nb_tape_gradient_vars(t, &loss, 1, v, NVARS, grads);
    nb_tape_end(t);
    nb_scope_end(c, grads, NVARS);
    nb_optimizer_apply(sgd, c, grads, v, NVARS, NULL);
    for (int i = 0; i < NVARS; i++) nb_tensor_free(grads[i]);
    if (nb_status(c)) {
      fprintf(stderr, "dist: %s\n", nb_error(c));
      return -1;
    }
  }
  cpu_per_step = (bench_process_cpu_now() - cpu0) / STEPS;
  return (bench_now() - t0) / STEPS;
}

static void bench_data_parallel(nb_ctx *c, int threads) {
  nb_variable *v[NVARS];
  for (int l = 0; l < 3; l++) {
    const int64_t seed[2] = {7, l}, shape[2] = {dims[l], dims[l + 1]};
    v[2 * l] = nb_variable_new(c, nb_init_glorot_uniform(c, NB_F32, 2, shape, seed), true, "kernel");
    v[2 * l + 1] = nb_variable_new(c, nb_init_zeros(c, NB_F32, 1, &dims[l + 1]), true, "bias");
  }
  int64_t batch = GLOBAL_BATCH / size;
  nb_tensor *x = nb_stateless_random_uniform(c, (int64_t[]){batch, 784}, 2, (int64_t[]){1, rank}, NB_F32);
  int32_t *y = malloc((size_t)batch * sizeof *y);
  for (int64_t i = 0; i < batch; i++) y[i] = (int32_t)((i + rank) % 10);
  nb_tensor *labels = nb_tensor_from(c, NB_I32, 1, &batch, y);
  nb_dist_reducer *r = nb_dist_reducer_new(BUCKET_BYTES);
  nb_optimizer *sgd = nb_sgd_new(0.01);
  nb_dist_broadcast_variables(c, v, NVARS);
  double with[RUNS], without[RUNS], local[RUNS], cpu[RUNS];
  train(c, v, r, sgd, x, labels); /* warm-up */
  for (int k = 0; k < RUNS; k++) {
    nb_dist_reducer_set_overlap(r, true);
    with[k] = train(c, v, r, sgd, x, labels);
    cpu[k] = cpu_per_step;
    nb_dist_reducer_set_overlap(r, false);
    without[k] = train(c, v, r, sgd, x, labels);
    MPI_Barrier(MPI_COMM_WORLD); /* the ranks' local steps run side by side */
    local[k] = train(c, v, NULL, sgd, x, labels);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  double a = bench_median(with, RUNS), b = bench_median(without, RUNS), l = bench_median(local, RUNS);
  if (rank == 0) {
    printf(
        "name=dp model=mlp784-512-512-10 ranks=%d threads=%d global_batch=%d images_per_s=%.1f step_ms=%.3f "
        "cpu_ms_per_step=%.3f\n",
        size, threads, GLOBAL_BATCH, GLOBAL_BATCH / a, 1e3 * a, 1e3 * bench_median(cpu, RUNS));
    printf("name=overlap ranks=%d threads=%d bucket_bytes=%zu step_ms_overlap=%.3f step_ms_after=%.3f gain=%.3f\n",
           size, threads, BUCKET_BYTES, 1e3 * a, 1e3 * b, b / a);
    printf("name=dp_local ranks=%d threads=%d global_batch=%d images_per_s=%.1f step_ms=%.3f dp_fraction=%.3f\n", size,
           threads, GLOBAL_BATCH, GLOBAL_BATCH / l, 1e3 * l, l / a);
  }
  nb_optimizer_free(sgd);
  nb_dist_reducer_free(r);
  free(y);
  for (int i = 0; i < NVARS; i++) nb_variable_free(v[i]);
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 1;
  if (nb_dist_init()) return 1;
  rank = nb_dist_rank();
  size = nb_dist_size();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) { /* alone: bare MPI_Allreduce needs MPI too (a singleton job) */
    MPI_Init(NULL, NULL);
  }
  if (rank == 0) bench_print_build_info();
  nb_ctx *c = nb_eager_new();
  nb_ctx_set_threads(c, threads > 0 ? threads : 1);
  const char *only = argc > 2 ? argv[2] : "";
  if (strcmp(only, "dp") != 0) bench_allreduce(c);
  if (strcmp(only, "allreduce") != 0) bench_data_parallel(c, threads);
  nb_ctx_free(c);
  nb_dist_finalize();
  if (!initialized) MPI_Finalize();
  return 0;
}
