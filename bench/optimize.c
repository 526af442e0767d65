/* bench/optimize: the graph optimizer (docs/optimizer.md), each figure with the passes on
   and off in the same run.
     - LeNet-5 training step (forward, sparse softmax cross-entropy, gradients, SGD; batch
       64, float32, synthetic data) built NHWC and built NCHW, each run by a session with
       every pass (passes=all) and with none (passes=none): step_ms, median of RUNS runs of
       STEPS steps after a warm-up, and how many Transposes the session's graph has. The
       NCHW graph with the passes runs NHWC kernels. The four sessions take turns, and
       nchw_over_nhwc is the median of the ratios taken within a turn.
     - Node counts of the MLP 784-512-512-10 and LeNet-5 gradient graphs (tf.gradients of
       the mean loss with respect to every weight): the nodes the fetched gradients need
       before (pruned only) and after the passes, and how many of them are Transposes;
       bench/peers/grappler_nodes.py prints TensorFlow's counts after grappler for the
       same graphs.
   Usage: optimize [nodes|lenet|all] [threads]; no arguments: all, 1 and 2 threads. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "benchutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 10
#define RUNS 7
#define NPARAMS 10

static const nb_session_opts all_passes = {NB_PASS_ALL}, no_passes = {0};

/* ---- the models ------------------------------------------------------------------------------ */

typedef struct model {
  const char *name, *layout; /* layout: NULL for the MLP */
  int64_t batch;
  int nparams;
  int x_rank;
  int64_t x_shape[4];
  int64_t shapes[NPARAMS][4]; /* weights then bias of each layer */
  int ranks[NPARAMS];
} model;

static void add_layer(model *m, int rank, const int64_t *wshape) {
  m->ranks[m->nparams] = rank;
  memcpy(m->shapes[m->nparams++], wshape, (size_t)rank * sizeof *wshape);
  m->ranks[m->nparams] = 1;
  m->shapes[m->nparams++][0] = wshape[rank - 1];
}

static model mlp(void) {
  model m = {.name = "mlp", .batch = 128, .x_rank = 2, .x_shape = {128, 784}};
  add_layer(&m, 2, (const int64_t[]){784, 512});
  add_layer(&m, 2, (const int64_t[]){512, 512});
  add_layer(&m, 2, (const int64_t[]){512, 10});
  return m;
}

static model lenet(const char *layout) {
  bool nchw = strcmp(layout, "NCHW") == 0;
  model m = {.name = "lenet", .layout = layout, .batch = 64, .x_rank = 4};
  memcpy(m.x_shape, nchw ? (const int64_t[]){64, 1, 28, 28} : (const int64_t[]){64, 28, 28, 1}, sizeof m.x_shape);
  add_layer(&m, 4, (const int64_t[]){5, 5, 1, 6});
  add_layer(&m, 4, (const int64_t[]){5, 5, 6, 16});
  add_layer(&m, 2, (const int64_t[]){256, 120});
  add_layer(&m, 2, (const int64_t[]){120, 84});
  add_layer(&m, 2, (const int64_t[]){84, 10});
  return m;
}

static nb_tensor *dense(nb_ctx *c, nb_tensor *x, nb_tensor *w, nb_tensor *b, bool relu) {
  nb_tensor *y = nb_bias_add(c, nb_matmul(c, x, w, false, false), b, NULL);
  return relu ? nb_relu(c, y) : y;
}

static nb_tensor *conv_relu_pool(nb_ctx *c, const model *m, nb_tensor *x, nb_tensor *f, nb_tensor *b) {
  bool nchw = strcmp(m->layout, "NCHW") == 0;
  static const int64_t ones[4] = {1, 1, 1, 1}, nhwc_window[4] = {1, 2, 2, 1}, nchw_window[4] = {1, 1, 2, 2};
  const int64_t *window = nchw ? nchw_window : nhwc_window;
  nb_conv2d_attrs conv = {.strides = ones, .padding = "VALID", .data_format = m->layout};
  nb_pool_attrs pool = {.ksize = window, .strides = window, .padding = "VALID", .data_format = m->layout};
  return nb_max_pool(c, nb_relu(c, nb_bias_add(c, nb_conv2d(c, x, f, &conv), b, m->layout)), &pool);
}

static nb_tensor *logits(nb_ctx *c, const model *m, nb_tensor *const *p, nb_tensor *x) {
  nb_tensor *h = x;
  int l = 0;
  if (m->layout) {
    h = conv_relu_pool(c, m, conv_relu_pool(c, m, h, p[0], p[1]), p[2], p[3]);
    h = nb_reshape(c, h, (const int64_t[]){-1, 4 * 4 * 16}, 2);
    l = 4;
  }
  for (; l < m->nparams; l += 2) h = dense(c, h, p[l], p[l + 1], l + 2 < m->nparams);
  return h;
}

/* The mean sparse softmax cross-entropy of m on x and labels, and its gradients in d. */
static nb_tensor *loss_and_grads(nb_ctx *c, const model *m, nb_tensor *const *p, nb_tensor *x, nb_tensor *labels,
                                 nb_tensor **d) {
  nb_tensor *loss = NULL;
  nb_sparse_softmax_cross_entropy_with_logits(c, logits(c, m, p, x), labels, &loss, NULL);
  loss = nb_mean(c, loss, NULL, 0, false);
  nb_gradients(c, &loss, 1, p, m->nparams, NULL, d);
  return loss;
}

/* ---- node counts ---------------------------------------------------------------------------- */

/* How many nodes of g are Transposes. */
static int count_transposes(const nb_graph *g) {
  int n = 0;
  for (int i = 0; i < nb_graph_num_nodes(g); i++) n += strcmp(nb_graph_node_op(g, i), "Transpose") == 0;
  return n;
}

/* Nodes of the gradient graph the gradients need, with the passes of opts (and in
   *transposes how many are Transposes). */
static int count_nodes(const model *m, const nb_session_opts *opts, int *transposes) {
  nb_graph *g = nb_graph_new(), *og = NULL;
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *p[NPARAMS], *d[NPARAMS], *feed[NPARAMS + 2];
  for (int i = 0; i < m->nparams; i++) feed[i] = p[i] = nb_placeholder(c, NB_F32, m->ranks[i], m->shapes[i], "w");
  nb_tensor *x = nb_placeholder(c, NB_F32, m->x_rank, m->x_shape, "x");
  nb_tensor *labels = nb_placeholder(c, NB_I32, 1, &m->batch, "labels");
  feed[m->nparams] = x;
  feed[m->nparams + 1] = labels;
  loss_and_grads(c, m, p, x, labels, d);
  int n = *transposes = -1;
  if (nb_status(c) == NB_OK && nb_graph_optimize(g, feed, m->nparams + 2, d, m->nparams, opts, &og) == NB_OK) {
    n = nb_graph_num_nodes(og);
    *transposes = count_transposes(og);
  } else {
    fprintf(stderr, "optimize: %s: %s\n", m->name, nb_error(c));
  }
  nb_graph_free(og);
  nb_ctx_free(c);
  nb_graph_free(g);
  return n;
}

static void print_nodes(const model *m) {
  int tb, ta, before = count_nodes(m, &no_passes, &tb), after = count_nodes(m, &all_passes, &ta);
  printf("name=nb_optimize_nodes model=%s%s%s before=%d after=%d transposes_before=%d transposes_after=%d\n", m->name,
         m->layout ? "_" : "", m->layout ? m->layout : "", before, after, tb, ta);
}

/* ---- LeNet training steps ------------------------------------------------------------------- */

typedef struct trainer {
  nb_graph *g;
  nb_ctx *c;
  nb_variable *vars[NPARAMS];
  nb_optimizer *sgd;
  nb_tensor *feed[2], *vals[2], *train;
} trainer;

/* m's training step graph: Glorot weights and zero biases as variables, SGD updates. */
static bool trainer_open(trainer *t, const model *m, nb_ctx *e) {
  memset(t, 0, sizeof *t);
  t->g = nb_graph_new();
  t->c = nb_graph_ctx_new(t->g);
  t->sgd = nb_sgd_new(0.01);
  nb_tensor *p[NPARAMS], *d[NPARAMS];
  for (int i = 0; i < m->nparams; i++) {
    const int64_t seed[2] = {1, i};
    nb_tensor *v = m->ranks[i] > 1 ? nb_init_glorot_uniform(e, NB_F32, m->ranks[i], m->shapes[i], seed)
                                   : nb_init_zeros(e, NB_F32, 1, m->shapes[i]);
    t->vars[i] = nb_variable_new(e, v, true, "w");
    p[i] = nb_variable_read(t->c, t->vars[i]);
  }
  t->feed[0] = nb_placeholder(t->c, NB_F32, m->x_rank, m->x_shape, "x");
  t->feed[1] = nb_placeholder(t->c, NB_I32, 1, &m->batch, "labels");
  loss_and_grads(t->c, m, p, t->feed[0], t->feed[1], d);
  nb_optimizer_apply(t->sgd, t->c, d, t->vars, m->nparams, &t->train);
  static const int64_t seed[2] = {7, 8};
  t->vals[0] = nb_stateless_random_uniform(e, m->x_shape, m->x_rank, seed, NB_F32);
  int32_t labels[64];
  for (int i = 0; i < 64; i++) labels[i] = i * 7 % 10;
  t->vals[1] = nb_tensor_from(e, NB_I32, 1, &m->batch, labels);
  if (nb_status(t->c) || nb_status(e)) fprintf(stderr, "optimize: build: %s%s\n", nb_error(t->c), nb_error(e));
  return nb_status(t->c) == NB_OK && nb_status(e) == NB_OK;
}

static void trainer_close(trainer *t, int nparams) {
  nb_optimizer_free(t->sgd);
  for (int i = 0; i < nparams; i++) nb_variable_free(t->vars[i]);
  nb_ctx_free(t->c);
  nb_graph_free(t->g);
}

/* A session of t's graph with opts on `threads` threads; *transposes: how many Transposes
   the graph it runs has (-1 on error). */
static nb_session *open_session(trainer *t, const nb_session_opts *opts, int threads, int *transposes) {
  nb_session *s = nb_session_new_with_opts(t->g, opts);
  nb_session_set_threads(s, threads);
  const nb_graph *planned = NULL;
  *transposes = nb_session_planned_graph(s, t->feed, 2, &t->train, 1, &planned) ? -1 : count_transposes(planned);
  return s;
}

/* ms per step of STEPS steps of t on s; NAN on error. */
static double steps_ms(trainer *t, nb_session *s) {
  double t0 = bench_now();
  for (int i = 0; i < STEPS; i++) {
    nb_tensor *out = NULL;
    nb_code code = nb_run(s, t->feed, t->vals, 2, &t->train, 1, &out);
    nb_tensor_free(out);
    if (code) {
      fprintf(stderr, "optimize: run: %s\n", nb_session_error(s));
      return NAN;
    }
  }
  return 1e3 * (bench_now() - t0) / STEPS;
}

/* Both layouts' trainers and their sessions with passes none and all; false when a trainer
   could not be built (its sessions then NULL). */
static bool open_lenets(nb_ctx *e, model *m, trainer *t, nb_session *s[2][2], int transposes[2][2], int threads) {
  bool ok = true;
  for (int l = 0; l < 2; l++) {
    bool opened = trainer_open(&t[l], &m[l], e);
    for (int on = 0; on < 2; on++) {
      transposes[l][on] = -1;
      s[l][on] = opened ? open_session(&t[l], on ? &all_passes : &no_passes, threads, &transposes[l][on]) : NULL;
    }
    ok = ok && opened;
  }
  return ok;
}

/* The four sessions take turns, RUNS rounds of STEPS steps each after a warm-up round, so
   all four see the machine alike; false on a failed run. */
static bool time_rounds(trainer *t, nb_session *s[2][2], double ms[2][2][RUNS]) {
  for (int r = -1; r < RUNS; r++)
    for (int l = 0; l < 2; l++)
      for (int on = 0; on < 2; on++) {
        double one = steps_ms(&t[l], s[l][on]);
        if (isnan(one)) return false;
        if (r >= 0) ms[l][on][r] = one;
      }
  return true;
}

static void bench_lenet(int threads) {
  nb_ctx *e = nb_eager_new();
  const char *layouts[2] = {"NHWC", "NCHW"};
  model m[2] = {lenet(layouts[0]), lenet(layouts[1])};
  trainer t[2];
  nb_session *s[2][2];
  int transposes[2][2];
  double ms[2][2][RUNS];
  bool ok = open_lenets(e, m, t, s, transposes, threads) && time_rounds(t, s, ms);
  for (int l = 0; l < 2; l++)
    for (int on = 0; on < 2; on++)
      printf(
          "name=nb_optimize_train_step model=lenet layout=%s passes=%s batch=64 threads=%d step_ms=%.3f "
          "transposes=%d\n",
          layouts[l], on ? "all" : "none", threads, ok ? bench_median(ms[l][on], RUNS) : NAN, transposes[l][on]);
  if (ok)
    printf(
        "name=nb_optimize_layout model=lenet threads=%d nchw_over_nhwc_passes_all=%.3f "
        "nchw_over_nhwc_passes_none=%.3f\n",
        threads, bench_ratio_median(ms[1][1], ms[0][1], RUNS), bench_ratio_median(ms[1][0], ms[0][0], RUNS));
  for (int l = 0; l < 2; l++) {
    for (int on = 0; on < 2; on++) nb_session_free(s[l][on]);
    trainer_close(&t[l], m[l].nparams);
  }
  nb_ctx_free(e);
}

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "all";
  int threads = argc > 2 ? atoi(argv[2]) : 0;
  bench_print_build_info();
  if (!strcmp(what, "nodes") || !strcmp(what, "all")) {
    model models[3] = {mlp(), lenet("NHWC"), lenet("NCHW")};
    for (int i = 0; i < 3; i++) print_nodes(&models[i]);
  }
  if (!strcmp(what, "lenet") || !strcmp(what, "all"))
    for (int th = 1; th <= 2; th++)
      if (!threads || th == threads) bench_lenet(th);
  return 0;
}
