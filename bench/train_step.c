/* bench/train_step: one training step (forward, softmax cross-entropy, gradients, SGD
   update) of the workloads in bench/peers/train_step.py, float32, synthetic data:
     mlp    MLP 784-512-512-10 (ReLU), batch 128
     lenet  LeNet-5: 28x28x1, valid 5x5x6 conv, 2x2 max pool, 5x5x16 conv, 2x2 max pool,
            fc 120, fc 84, fc 10 (ReLU), batch 64, NHWC
   in graph mode (nb_gradients + the optimizer's update nodes, one nb_run per step) and
   eager mode (a tape per step), on 1 and 2 threads; median of RUNS runs of STEPS steps after
   a warm-up, as step_ms. The eager step ends the forward's scope before the update
   (keeping the gradients), so variables are updated in place.
   Each line names the float32 GEMM's backend and kernel (and LeNet's convolution backend)
   and the step's GFLOP/s and fraction of this core's measured peak (bench/peak.h) from
   model_step_flops. For the MLP, nb_train_step_gemms times the step's products alone
   (forward, weight and input gradients through the library's GEMM, back to back on
   buffers of their shapes): the floor this GEMM puts under the step, beside it, and
   nb_train_step_over_gemms each mode's step over it. The modes (and the products) take
   turns, STEPS steps each per round, and the ratios are medians of per-round ratios.
   Usage: train_step [mlp|lenet|all] [graph|eager|all] [threads]: only those (the peak RSS
   of one configuration alone); no arguments: all of them. The last line is the process's peak
   RSS (ru_maxrss), as the peer scripts print theirs. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "../src/ops/blas.h"       /* the float32 GEMM's backend and kernel */
#include "../src/ops/build_info.h" /* the convolution backend */
#include "peak.h"
#include "products.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define STEPS 20
#define RUNS 5
#define MAX_VARS 10
#define LR 0.01

typedef struct model {
  const char *name;
  int64_t batch;
  int nvars;
  nb_variable *vars[MAX_VARS];
  double layer_macs[MAX_VARS / 2]; /* multiply-adds of each layer's forward product */
  nb_tensor *(*logits)(nb_ctx *c, nb_tensor *const *p, nb_tensor *x);
  int x_rank;
  int64_t x_shape[4];
} model;

static nb_tensor *dense(nb_ctx *c, nb_tensor *x, nb_tensor *w, nb_tensor *b, bool relu) {
  nb_tensor *y = nb_bias_add(c, nb_matmul(c, x, w, false, false), b, NULL);
  return relu ? nb_relu(c, y) : y;
}

static nb_tensor *mlp_logits(nb_ctx *c, nb_tensor *const *p, nb_tensor *x) {
  nb_tensor *h = dense(c, x, p[0], p[1], true);
  return dense(c, dense(c, h, p[2], p[3], true), p[4], p[5], false);
}

static nb_tensor *conv_relu_pool(nb_ctx *c, nb_tensor *x, nb_tensor *f, nb_tensor *b) {
  static const int64_t ones[4] = {1, 1, 1, 1}, window[4] = {1, 2, 2, 1};
  nb_conv2d_attrs conv = {.strides = ones, .padding = "VALID"};
  nb_pool_attrs pool = {.ksize = window, .strides = window, .padding = "VALID"};
  return nb_max_pool(c, nb_relu(c, nb_bias_add(c, nb_conv2d(c, x, f, &conv), b, NULL)), &pool);
}

static nb_tensor *lenet_logits(nb_ctx *c, nb_tensor *const *p, nb_tensor *x) {
  nb_tensor *h = conv_relu_pool(c, conv_relu_pool(c, x, p[0], p[1]), p[2], p[3]);
  h = nb_reshape(c, h, (const int64_t[]){-1, 4 * 4 * 16}, 2);
  return dense(c, dense(c, dense(c, h, p[4], p[5], true), p[6], p[7], true), p[8], p[9], false);
}

/* Glorot-uniform weights and zero biases, one (weight, bias) pair per layer, whose product
   has out_pixels output positions per example (1 for a dense layer). */
static bool add_layer(nb_ctx *c, model *m, int rank, const int64_t *wshape, int64_t out_pixels) {
  const int64_t seed[2] = {1, m->nvars}; /* a stream of its own per layer */
  int64_t units = wshape[rank - 1];
  double weights = 1;
  for (int d = 0; d < rank; d++) weights *= (double)wshape[d];
  m->layer_macs[m->nvars / 2] = (double)m->batch * (double)out_pixels * weights;
  nb_tensor *w = nb_init_glorot_uniform(c, NB_F32, rank, wshape, seed);
  nb_tensor *b = nb_init_zeros(c, NB_F32, 1, &units);
  m->vars[m->nvars++] = nb_variable_new(c, w, true, "w");
  m->vars[m->nvars++] = nb_variable_new(c, b, true, "b");
  return nb_status(c) == NB_OK;
}

static bool make_mlp(nb_ctx *c, model *m) {
  *m = (model){.name = "mlp", .batch = 128, .logits = mlp_logits, .x_rank = 2, .x_shape = {128, 784}};
  return add_layer(c, m, 2, (const int64_t[]){784, 512}, 1) && add_layer(c, m, 2, (const int64_t[]){512, 512}, 1) &&
         add_layer(c, m, 2, (const int64_t[]){512, 10}, 1);
}

static bool make_lenet(nb_ctx *c, model *m) {
  *m = (model){.name = "lenet", .batch = 64, .logits = lenet_logits, .x_rank = 4, .x_shape = {64, 28, 28, 1}};
  return add_layer(c, m, 4, (const int64_t[]){5, 5, 1, 6}, 24 * 24) &&
         add_layer(c, m, 4, (const int64_t[]){5, 5, 6, 16}, 8 * 8) &&
         add_layer(c, m, 2, (const int64_t[]){256, 120}, 1) && add_layer(c, m, 2, (const int64_t[]){120, 84}, 1) &&
         add_layer(c, m, 2, (const int64_t[]){84, 10}, 1);
}

/* A step's flops: per layer the forward product, the weight gradient (as many
   multiply-adds) and, but for the first layer (its input is data), the input gradient;
   2 flops per multiply-add. Bias, ReLU, pooling, softmax and the update are left out.
   MLP: 2 * (2 * 128*784*512 + 3 * (128*512*512 + 128*512*10)) = 410.8 MFLOP;
   LeNet: 2 * (2 * 64*576*150 + 3 * (64*64*2400 + 64*256*120 + 64*120*84 + 64*84*10))
   = 97.1 MFLOP. */
static double model_step_flops(const model *m) {
  double macs = 0;
  for (int l = 0; l < m->nvars / 2; l++) macs += (l == 0 ? 2 : 3) * m->layer_macs[l];
  return 2 * macs;
}

/* One result line of model m. */
static void print_step(const model *m, const char *mode, int threads, double ms) {
  double gflops = model_step_flops(m) / (ms * 1e-3) * 1e-9;
  printf("name=nb_train_step model=%s mode=%s batch=%lld threads=%d backend=%s kernel=%s", m->name, mode,
         (long long)m->batch, threads, nbop_gemm_backend_name(NB_F32), nbop_gemm_kernel_name(NB_F32));
  if (m->x_rank == 4) printf(" conv=%s", nbop_conv_backend_name());
  printf(" step_ms=%.3f gflops=%.1f frac_peak=%.3f\n", ms, gflops, bench_frac_peak(gflops, threads));
}

/* The dense model's (user) step products: each layer's forward product, weight gradient
   and (but for the first layer) input gradient. */
static void dense_step_products(const void *user, const float *a, const float *b, float *c) {
  const model *m = user;
  for (int l = 0; l < m->nvars / 2; l++) {
    const int64_t *w = nb_variable_shape(m->vars[2 * l]);
    int64_t in = w[0], out = w[1], n = m->batch;
    nbop_gemm(NB_F32, false, false, n, out, in, a, in, b, out, 0, c, out);           /* x w */
    nbop_gemm(NB_F32, true, false, in, out, n, a, in, b, out, 0, c, out);            /* x^T dz */
    if (l > 0) nbop_gemm(NB_F32, false, true, n, in, out, a, out, b, out, 0, c, in); /* dz w^T */
  }
}

/* The most floats one operand of dense_step_products takes: a weight, or a layer's input
   or output over the batch. */
static size_t largest_operand(const model *m) {
  int64_t most = 0;
  for (int l = 0; l < m->nvars / 2; l++) {
    const int64_t *w = nb_variable_shape(m->vars[2 * l]);
    int64_t sizes[3] = {w[0] * w[1], m->batch * w[0], m->batch * w[1]};
    for (int i = 0; i < 3; i++) most = sizes[i] > most ? sizes[i] : most;
  }
  return (size_t)most;
}

static nb_tensor *mean_loss(nb_ctx *c, const model *m, nb_tensor *const *p, nb_tensor *x, nb_tensor *labels) {
  nb_tensor *loss = NULL;
  nb_sparse_softmax_cross_entropy_with_logits(c, m->logits(c, p, x), labels, &loss, NULL);
  return nb_mean(c, loss, NULL, 0, false);
}

/* Random images in [0, 1) and labels in [0, 10): the timing does not depend on them. */
static void make_batch(nb_ctx *c, const model *m, nb_tensor **x, nb_tensor **labels) {
  static const int64_t seed[2] = {7, 8};
  *x = nb_stateless_random_uniform(c, m->x_shape, m->x_rank, seed, NB_F32);
  int32_t *l = malloc((size_t)m->batch * sizeof *l);
  for (int64_t i = 0; l && i < m->batch; i++) l[i] = (int32_t)(i * 7 % 10);
  *labels = l ? nb_tensor_from(c, NB_I32, 1, &m->batch, l) : NULL;
  free(l);
}

static bool eager_step(nb_ctx *c, const model *m, nb_optimizer *o, nb_tensor *x, nb_tensor *labels) {
  nb_tensor *p[MAX_VARS], *g[MAX_VARS];
  nb_scope_begin(c);
  nb_scope_begin(c);
  nb_tape *t = nb_tape_begin(c, 0);
  for (int i = 0; i < m->nvars; i++) p[i] = nb_variable_read(c, m->vars[i]);
  nb_tensor *loss = mean_loss(c, m, p, x, labels);
  nb_tape_gradient_vars(t, &loss, 1, m->vars, m->nvars, g);
  nb_tape_end(t);
  nb_scope_end(c, g, m->nvars);
  nb_optimizer_apply(o, c, g, m->vars, m->nvars, NULL);
  nb_scope_end(c, NULL, 0);
  return nb_status(c) == NB_OK;
}

/* ms per step of STEPS eager steps; NAN on failure (the error printed). */
static double eager_steps_ms(nb_ctx *c, const model *m, nb_optimizer *o, nb_tensor *x, nb_tensor *labels) {
  double t0 = bench_now();
  bool ok = true;
  for (int i = 0; i < STEPS && ok; i++) ok = eager_step(c, m, o, x, labels);
  if (!ok) fprintf(stderr, "train_step: %s eager: %s\n", m->name, nb_error(c));
  return ok ? 1e3 * (bench_now() - t0) / STEPS : NAN;
}

/* The graph-mode step: nb_gradients and the optimizer's update nodes, run by a session. */
typedef struct graph_step {
  nb_graph *g;
  nb_ctx *gc;
  nb_session *s;
  nb_optimizer *o;
  nb_tensor *feed[2], *vals[2], *train;
} graph_step;

static void graph_step_close(graph_step *gs) {
  nb_session_free(gs->s);
  nb_ctx_free(gs->gc);
  nb_graph_free(gs->g);
  nb_optimizer_free(gs->o);
}

static bool graph_step_open(graph_step *gs, const model *m, int threads, nb_tensor *x, nb_tensor *labels) {
  gs->g = nb_graph_new();
  gs->gc = nb_graph_ctx_new(gs->g);
  gs->s = nb_session_new(gs->g);
  gs->o = nb_sgd_new(LR);
  nb_session_set_threads(gs->s, threads);
  gs->feed[0] = nb_placeholder(gs->gc, NB_F32, m->x_rank, m->x_shape, "x");
  gs->feed[1] = nb_placeholder(gs->gc, NB_I32, 1, &m->batch, "labels");
  gs->vals[0] = x;
  gs->vals[1] = labels;
  nb_tensor *p[MAX_VARS], *d[MAX_VARS];
  for (int i = 0; i < m->nvars; i++) p[i] = nb_variable_read(gs->gc, m->vars[i]);
  nb_tensor *loss = mean_loss(gs->gc, m, p, gs->feed[0], gs->feed[1]);
  nb_gradients(gs->gc, &loss, 1, p, m->nvars, NULL, d);
  gs->train = NULL;
  nb_optimizer_apply(gs->o, gs->gc, d, m->vars, m->nvars, &gs->train);
  if (nb_status(gs->gc)) fprintf(stderr, "train_step: %s graph build: %s\n", m->name, nb_error(gs->gc));
  return nb_status(gs->gc) == NB_OK;
}

/* ms per step of STEPS graph steps; NAN on failure (the error printed). */
static double graph_steps_ms(graph_step *gs) {
  double t0 = bench_now();
  for (int i = 0; i < STEPS; i++) {
    nb_tensor *out = NULL;
    nb_code code = nb_run(gs->s, gs->feed, gs->vals, 2, &gs->train, 1, &out);
    nb_tensor_free(out);
    if (code) {
      fprintf(stderr, "train_step: graph: %s\n", nb_session_error(gs->s));
      return NAN;
    }
  }
  return 1e3 * (bench_now() - t0) / STEPS;
}

enum { GRAPH, EAGER, PRODUCTS, NKINDS };

/* What a round runs on one thread count: the modes asked for and, for the MLP with no
   mode asked, its products alone. */
typedef struct step_runs {
  bool want[NKINDS];
  model *m;
  nb_ctx *c;
  nb_tensor *x, *labels;
  graph_step gs;
  nb_optimizer *eager_sgd;
  bench_products prod;
} step_runs;

static bool step_runs_open(step_runs *w, int threads) {
  w->eager_sgd = nb_sgd_new(LR);
  nb_ctx_set_threads(w->c, threads);
  if (w->want[PRODUCTS] && !bench_products_init(&w->prod, dense_step_products, w->m, largest_operand(w->m))) {
    fprintf(stderr, "train_step: out of memory for the products' operands\n");
    w->want[PRODUCTS] = false;
  }
  return w->eager_sgd && (!w->want[GRAPH] || graph_step_open(&w->gs, w->m, threads, w->x, w->labels));
}

static void step_runs_close(step_runs *w) {
  if (w->want[GRAPH]) graph_step_close(&w->gs);
  if (w->want[PRODUCTS]) bench_products_free(&w->prod);
  nb_optimizer_free(w->eager_sgd);
}

/* The wanted kinds take turns: RUNS rounds of STEPS steps of each after a warm-up round,
   so every figure and every ratio sees the machine alike; t[kind][round] in ms. */
static bool time_rounds(step_runs *w, int threads, double t[NKINDS][RUNS]) {
  for (int r = -1; r < RUNS; r++)
    for (int k = 0; k < NKINDS; k++) {
      if (!w->want[k]) continue;
      double ms = k == GRAPH   ? graph_steps_ms(&w->gs)
                  : k == EAGER ? eager_steps_ms(w->c, w->m, w->eager_sgd, w->x, w->labels)
                               : 1e3 * bench_products_time(&w->prod, threads, STEPS);
      if (isnan(ms)) return false;
      if (r >= 0) t[k][r] = ms;
    }
  return true;
}

static void print_products(const model *m, int threads, double t[NKINDS][RUNS]) {
  double ms = bench_median(t[PRODUCTS], RUNS), gflops = model_step_flops(m) / (ms * 1e-3) * 1e-9;
  printf("name=nb_train_step_gemms model=%s batch=%lld threads=%d backend=%s ms=%.3f gflops=%.1f frac_peak=%.3f\n",
         m->name, (long long)m->batch, threads, nbop_gemm_backend_name(NB_F32), ms, gflops,
         bench_frac_peak(gflops, threads));
  printf("name=nb_train_step_over_gemms model=%s threads=%d graph=%.3f eager=%.3f\n", m->name, threads,
         bench_ratio_median(t[GRAPH], t[PRODUCTS], RUNS), bench_ratio_median(t[EAGER], t[PRODUCTS], RUNS));
}

static bool bench_threads(nb_ctx *c, model *m, nb_tensor *x, nb_tensor *labels, int threads, const char *only_mode) {
  step_runs w = {.want = {!only_mode || strcmp(only_mode, "graph") == 0, !only_mode || strcmp(only_mode, "eager") == 0,
                          m->x_rank == 2 && !only_mode},
                 .m = m,
                 .c = c,
                 .x = x,
                 .labels = labels};
  double t[NKINDS][RUNS];
  bool ok = step_runs_open(&w, threads) && time_rounds(&w, threads, t);
  step_runs_close(&w);
  for (int k = GRAPH; k <= EAGER && ok; k++)
    if (w.want[k]) print_step(m, k == GRAPH ? "graph" : "eager", threads, bench_median(t[k], RUNS));
  if (ok && w.want[PRODUCTS]) print_products(m, threads, t);
  fflush(stdout);
  return ok;
}

static bool bench_model(bool (*make)(nb_ctx *, model *), const char *only_mode, int only_threads) {
  nb_ctx *c = nb_eager_new();
  model m;
  bool ok = c && make(c, &m);
  nb_tensor *x = NULL, *labels = NULL;
  if (ok) make_batch(c, &m, &x, &labels);
  ok = ok && nb_status(c) == NB_OK;
  for (int threads = 1; threads <= 2 && ok; threads++)
    if (!only_threads || threads == only_threads) ok = bench_threads(c, &m, x, labels, threads, only_mode);
  for (int i = 0; c && i < m.nvars; i++) nb_variable_free(m.vars[i]);
  nb_ctx_free(c);
  return ok;
}

int main(int argc, char **argv) {
  const char *only_model = argc > 1 && strcmp(argv[1], "all") ? argv[1] : NULL;
  const char *only_mode = argc > 2 && strcmp(argv[2], "all") ? argv[2] : NULL;
  int only_threads = argc > 3 ? atoi(argv[3]) : 0;
  bench_print_build_info();
  bool ok = true;
  if (!only_model || strcmp(only_model, "mlp") == 0) ok = bench_model(make_mlp, only_mode, only_threads);
  if (ok && (!only_model || strcmp(only_model, "lenet") == 0)) ok = bench_model(make_lenet, only_mode, only_threads);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  printf("name=nb_train_step_maxrss model=%s mode=%s threads=%s maxrss_mb=%.1f\n", only_model ? only_model : "all",
         only_mode ? only_mode : "all", only_threads ? argv[3] : "all", ru.ru_maxrss / 1024.0);
  return ok ? 0 : 1;
}
