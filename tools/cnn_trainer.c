/* The demo's CNN trainer (cnn_trainer.h): shared by examples/demo.c and `nabla train`. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, isatty */
#include "cnn_trainer.h"

#include <nabla.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NPARAMS 8
#define EVAL_BATCH 500

typedef struct trainer {
  cnn_options opt;
  const char *prog; /* prefixes error messages */
  nb_ctx *c;        /* eager: batches, eager steps, evaluation */
  nb_dataset *train, *test;
  nb_variable *params[NPARAMS];
  nb_optimizer *adam;
  /* graph mode */
  nb_graph *g;
  nb_ctx *gc;
  nb_session *s;
  nb_tensor *x, *labels, *loss, *logits, *train_op;
  int first_epoch; /* 1, or the epoch after a restored checkpoint's */
  int rank, ranks; /* data parallel: this process among the ranks (0 of 1 otherwise) */
  nb_dist_reducer *reducer;
} trainer;

/* The checkpoint keys of the parameters, Keras' layer/variable names. */
static const char *const param_keys[NPARAMS] = {"conv1/kernel",  "conv1/bias",  "conv2/kernel",  "conv2/bias",
                                                "dense1/kernel", "dense1/bias", "dense2/kernel", "dense2/bias"};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the model ----------------------------------------------------------------------- */

static nb_tensor *conv_block(nb_ctx *c, nb_tensor *x, nb_tensor *filter, nb_tensor *bias) {
  static const int64_t ones[4] = {1, 1, 1, 1}, window[4] = {1, 2, 2, 1};
  nb_conv2d_attrs conv = {.strides = ones, .padding = "SAME"};
  nb_pool_attrs pool = {.ksize = window, .strides = window, .padding = "VALID"};
  return nb_max_pool(c, nb_relu(c, nb_bias_add(c, nb_conv2d(c, x, filter, &conv), bias, NULL)), &pool);
}

/* logits [n, 10] of images [n, 28, 28, 1]; p: the parameters' reads */
static nb_tensor *model(nb_ctx *c, nb_tensor *const *p, nb_tensor *images) {
  nb_tensor *h = conv_block(c, conv_block(c, images, p[0], p[1]), p[2], p[3]);
  h = nb_reshape(c, h, (const int64_t[]){-1, 7 * 7 * 32}, 2);
  h = nb_relu(c, nb_bias_add(c, nb_matmul(c, h, p[4], false, false), p[5], NULL));
  return nb_bias_add(c, nb_matmul(c, h, p[6], false, false), p[7], NULL);
}

static bool make_params(trainer *t) {
  static const int64_t shapes[NPARAMS][4] = {{3, 3, 1, 16}, {16},  {3, 3, 16, 32}, {32},
                                             {1568, 128},   {128}, {128, 10},      {10}};
  static const int ranks[NPARAMS] = {4, 1, 4, 1, 2, 1, 2, 1};
  for (int i = 0; i < NPARAMS; i++) {
    const int64_t seed[2] = {2024, i};
    nb_tensor *init = ranks[i] == 1 ? nb_init_zeros(t->c, NB_F32, 1, shapes[i])
                                    : nb_init_glorot_uniform(t->c, NB_F32, ranks[i], shapes[i], seed);
    t->params[i] = nb_variable_new(t->c, init, true, i % 2 ? "bias" : "kernel");
  }
  return nb_status(t->c) == NB_OK;
}

static nb_tensor *mean_loss(nb_ctx *c, nb_tensor *logits, nb_tensor *labels) {
  nb_tensor *loss = NULL;
  nb_sparse_softmax_cross_entropy_with_logits(c, logits, labels, &loss, NULL);
  return nb_mean(c, loss, NULL, 0, false);
}

/* ---- graph mode: the step is built once ------------------------------------------------ */

static bool build_graph(trainer *t) {
  t->g = nb_graph_new();
  t->gc = t->g ? nb_graph_ctx_new(t->g) : NULL;
  t->s = t->g ? nb_session_new(t->g) : NULL;
  if (!t->gc || !t->s) return false;
  nb_session_set_threads(t->s, t->opt.threads);
  nb_ctx *gc = t->gc;
  t->x = nb_placeholder(gc, NB_F32, 4, (const int64_t[]){-1, 28, 28, 1}, "images");
  t->labels = nb_placeholder(gc, NB_I32, 1, (const int64_t[]){-1}, "labels");
  nb_tensor *p[NPARAMS], *grads[NPARAMS];
  for (int i = 0; i < NPARAMS; i++) p[i] = nb_variable_read(gc, t->params[i]);
  t->logits = model(gc, p, t->x);
  t->loss = mean_loss(gc, t->logits, t->labels);
  nb_gradients(gc, &t->loss, 1, p, NPARAMS, NULL, grads);
  if (t->reducer) nb_dist_average_gradients(t->reducer, gc, grads, NPARAMS, grads);
  nb_optimizer_apply(t->adam, gc, grads, t->params, NPARAMS, &t->train_op);
  if (nb_status(gc)) fprintf(stderr, "%s: building the graph: %s\n", t->prog, nb_error(gc));
  return nb_status(gc) == NB_OK;
}

/* Runs the fetches on one batch; results[i] belong to the caller. */
static bool run_graph(trainer *t, nb_tensor *x, nb_tensor *labels, nb_tensor *const *fetch, int n,
                      nb_tensor **results) {
  nb_tensor *feed[2] = {t->x, t->labels}, *vals[2] = {x, labels};
  if (nb_run(t->s, feed, vals, 2, fetch, n, results) == NB_OK) return true;
  fprintf(stderr, "\n%s: %s\n", t->prog, nb_session_error(t->s));
  return false;
}

/* ---- one training step and evaluation ---------------------------------------------------- */

/* Correct predictions of logits [n, 10] for labels [n]. */
static int64_t count_correct(const nb_tensor *logits, const nb_tensor *labels) {
  const float *l = nb_data(logits);
  const int32_t *y = nb_data(labels);
  int64_t n = nb_shape(logits)[0], right = 0;
  for (int64_t i = 0; i < n; i++) {
    int best = 0;
    for (int k = 1; k < 10; k++)
      if (l[i * 10 + k] > l[i * 10 + best]) best = k;
    right += best == y[i];
  }
  return right;
}

/* One step on (x, labels); adds its loss and correct predictions to the running sums. */
static bool train_step(trainer *t, nb_tensor *x, nb_tensor *labels, double *loss_sum, int64_t *correct) {
  nb_ctx *c = t->c;
  if (!t->opt.eager) {
    nb_tensor *fetch[3] = {t->loss, t->logits, t->train_op}, *out[3];
    if (!run_graph(t, x, labels, fetch, 3, out)) return false;
    *loss_sum += nb_item(out[0], 0);
    *correct += count_correct(out[1], labels);
    for (int i = 0; i < 3; i++) nb_tensor_free(out[i]);
    return true;
  }
  nb_tensor *p[NPARAMS], *grads[NPARAMS];
  nb_scope_begin(c);
  nb_tape *tape = nb_tape_begin(c, 0);
  for (int i = 0; i < NPARAMS; i++) p[i] = nb_variable_read(c, t->params[i]);
  nb_tensor *logits = model(c, p, x), *loss = mean_loss(c, logits, labels);
  if (t->reducer)
    nb_dist_gradient_vars(t->reducer, tape, &loss, 1, t->params, NPARAMS, grads);
  else
    nb_tape_gradient_vars(tape, &loss, 1, t->params, NPARAMS, grads);
  nb_tape_end(tape);
  if (nb_status(c) == NB_OK) {
    *loss_sum += nb_item(loss, 0);
    *correct += count_correct(logits, labels);
  }
  nb_scope_end(c, grads, NPARAMS); /* the reads go, so the update runs in place */
  nb_optimizer_apply(t->adam, c, grads, t->params, NPARAMS, NULL);
  for (int i = 0; i < NPARAMS; i++) nb_tensor_free(grads[i]);
  if (nb_status(c)) fprintf(stderr, "\n%s: %s\n", t->prog, nb_error(c));
  return nb_status(c) == NB_OK;
}

/* Test accuracy in [0, 1], or -1 on failure. */
static double evaluate(trainer *t) {
  nb_ctx *c = t->c;
  int64_t n = nb_dataset_size(t->test), correct = 0;
  bool ok = true;
  for (int64_t first = 0; first < n && ok; first += EVAL_BATCH) {
    nb_tensor *x, *labels, *logits = NULL;
    nb_scope_begin(c);
    ok = nb_dataset_batch(c, t->test, first, n - first < EVAL_BATCH ? n - first : EVAL_BATCH, NB_IMAGES_NHWC, &x,
                          &labels) == NB_OK;
    if (ok && t->opt.eager) {
      nb_tensor *p[NPARAMS];
      for (int i = 0; i < NPARAMS; i++) p[i] = nb_variable_read(c, t->params[i]);
      logits = model(c, p, x);
      ok = nb_status(c) == NB_OK;
    } else if (ok) {
      ok = run_graph(t, x, labels, &t->logits, 1, &logits);
    }
    if (ok) correct += count_correct(logits, labels);
    if (!t->opt.eager) nb_tensor_free(logits);
    nb_scope_end(c, NULL, 0);
  }
  if (!ok && nb_status(c)) fprintf(stderr, "%s: %s\n", t->prog, nb_error(c));
  return ok ? (double)correct / (double)n : -1;
}

/* ---- progress ------------------------------------------------------------------------------ */

static void progress(const trainer *t, int epoch, int64_t batch, int64_t nbatches, double loss, double acc,
                     double images_per_s, double eta_s, bool final) {
  static const int width = 24;
  int filled = (int)(width * batch / nbatches);
  char bar[32];
  for (int i = 0; i < width; i++) bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
  bar[width] = '\0';
  bool tty = isatty(STDERR_FILENO);
  if ((!tty && !final) || t->rank) return; /* a log file gets one line per epoch; rank 0 reports */
  fprintf(stderr, "%sepoch %d/%d [%s] %lld/%lld loss %.4f acc %5.2f%% %6.0f img/s ETA %d:%02d%s", tty ? "\r" : "",
          epoch, t->first_epoch + t->opt.epochs - 1, bar, (long long)batch, (long long)nbatches, loss, 100 * acc,
          images_per_s, (int)eta_s / 60, (int)eta_s % 60, final ? "\n" : "");
  fflush(stderr);
}

/* Steps per epoch: each takes a batch from every rank. */
static int64_t steps_per_epoch(const trainer *t) { return nb_dataset_size(t->train) / t->opt.batch / t->ranks; }

static bool train(trainer *t) {
  int64_t nbatches = steps_per_epoch(t), total = nbatches * t->opt.epochs, done = 0;
  double start = now(), last_draw = 0;
  for (int epoch = t->first_epoch; epoch < t->first_epoch + t->opt.epochs; epoch++) {
    nb_dataset_shuffle(t->train, 1000 + (uint64_t)epoch); /* the same order on every rank */
    double loss_sum = 0;
    int64_t correct = 0;
    for (int64_t b = 0; b < nbatches; b++, done++) {
      nb_tensor *x, *labels;
      nb_scope_begin(t->c);
      bool ok = nb_dataset_batch(t->c, t->train, (b * t->ranks + t->rank) * t->opt.batch, t->opt.batch, NB_IMAGES_NHWC,
                                 &x, &labels) == NB_OK &&
                train_step(t, x, labels, &loss_sum, &correct);
      nb_scope_end(t->c, NULL, 0);
      if (!ok) return false;
      double elapsed = now() - start, rate = (double)(done + 1) * t->opt.batch * t->ranks / elapsed;
      bool last = b + 1 == nbatches;
      if (last || now() - last_draw > 0.1) {
        progress(t, epoch, b + 1, nbatches, loss_sum / (double)(b + 1),
                 (double)correct / (double)((b + 1) * t->opt.batch), rate,
                 (double)(total - done - 1) * t->opt.batch * t->ranks / rate, last);
        last_draw = now();
      }
    }
  }
  return true;
}

/* ---- setup ------------------------------------------------------------------------------- */

/* A whole decimal int > 0 (strtol's range checked), else 0. */
static int positive_int(const char *v) {
  char *end;
  long n = strtol(v, &end, 10);
  return *v && !*end && n > 0 && n <= INT32_MAX ? (int)n : 0;
}

bool cnn_parse_options(int n, char **args, const char *save_prefix, cnn_options *o) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  *o = (cnn_options){.epochs = 6, .batch = 64, .threads = cores > 0 ? (int)cores : 1, .lr = 1e-3, .save = save_prefix};
  for (int i = 0; i < n; i += 2) { /* flag, value */
    const char *a = args[i], *v = i + 1 < n ? args[i + 1] : NULL;
    if (strcmp(a, "--data-parallel") == 0) {
      o->data_parallel = true;
      i--; /* a flag without a value */
      continue;
    }
    if (!v) return false;
    if (strcmp(a, "--epochs") == 0)
      o->epochs = positive_int(v);
    else if (strcmp(a, "--batch") == 0)
      o->batch = positive_int(v);
    else if (strcmp(a, "--threads") == 0)
      o->threads = positive_int(v);
    else if (strcmp(a, "--lr") == 0)
      o->lr = strtod(v, NULL);
    else if (strcmp(a, "--data") == 0)
      o->data = v;
    else if (strcmp(a, "--save") == 0)
      o->save = v;
    else if (strcmp(a, "--restore") == 0)
      o->restore = v;
    else if (strcmp(a, "--mode") == 0 && (strcmp(v, "graph") == 0 || strcmp(v, "eager") == 0))
      o->eager = v[0] == 'e';
    else
      return false;
  }
  return o->epochs > 0 && o->batch > 0 && o->threads > 0 && o->lr > 0;
}

/* Loads the parameters and Adam's state; training goes on from the epoch after theirs. */
static bool restore(trainer *t) {
  if (nb_checkpoint_restore(t->c, t->opt.restore, t->params, param_keys, NPARAMS, t->adam)) {
    fprintf(stderr, "%s: %s\n", t->prog, nb_error(t->c));
    return false;
  }
  int64_t nbatches = steps_per_epoch(t);
  t->first_epoch = 1 + (int)(nb_optimizer_iterations(t->adam) / nbatches);
  if (t->rank == 0)
    printf("restored %s: %lld steps, continuing at epoch %d\n", t->opt.restore,
           (long long)nb_optimizer_iterations(t->adam), t->first_epoch);
  return true;
}

static bool save(trainer *t) {
  if (!t->opt.save) return true;
  if (nb_checkpoint_save(t->c, t->opt.save, t->params, param_keys, NPARAMS, t->adam)) {
    fprintf(stderr, "%s: %s\n", t->prog, nb_error(t->c));
    return false;
  }
  printf("checkpoint saved to %s.index and %s.data-00000-of-00001 (resume: --restore %s)\n", t->opt.save, t->opt.save,
         t->opt.save);
  return true;
}

/* Data parallel: every rank starts from rank 0's values. */
static bool broadcast(trainer *t) {
  if (!t->reducer || nb_dist_broadcast_variables(t->c, t->params, NPARAMS) == NB_OK) return true;
  fprintf(stderr, "%s: %s\n", t->prog, nb_error(t->c));
  return false;
}

static bool setup(trainer *t) {
  t->c = nb_eager_new();
  if (!t->c) return false;
  nb_ctx_set_threads(t->c, t->opt.threads);
  t->train = nb_fashion_mnist(t->c, t->opt.data, true);
  t->test = nb_fashion_mnist(t->c, t->opt.data, false);
  if (!t->train || !t->test) {
    fprintf(stderr, "%s: %s\n(scripts/deps.sh installs Debian's dataset-fashion-mnist)\n", t->prog, nb_error(t->c));
    return false;
  }
  t->adam = nb_adam_new(t->opt.lr, 0.9, 0.999, 1e-7);
  t->first_epoch = 1;
  if (t->opt.data_parallel && !(t->reducer = nb_dist_reducer_new(0))) return false;
  return t->adam && make_params(t) && (t->opt.eager || build_graph(t)) && (!t->opt.restore || restore(t)) &&
         broadcast(t);
}

static void teardown(trainer *t) {
  nb_session_free(t->s);
  nb_ctx_free(t->gc);
  nb_graph_free(t->g);
  nb_optimizer_free(t->adam);
  nb_dist_reducer_free(t->reducer);
  for (int i = 0; i < NPARAMS; i++) nb_variable_free(t->params[i]);
  nb_dataset_free(t->train);
  nb_dataset_free(t->test);
  nb_ctx_free(t->c);
}

bool cnn_train(const char *prog, const cnn_options *o) {
  trainer t = {.opt = *o, .prog = prog, .ranks = 1};
  if (t.opt.data_parallel) {
    if (nb_dist_init()) {
      fprintf(stderr, "%s: MPI failed to start\n", prog);
      return false;
    }
    t.rank = nb_dist_rank();
    t.ranks = nb_dist_size();
  }
  if (t.rank == 0) {
    printf("nabla %s: a CNN on Fashion-MNIST, %s mode, %d epochs, batch %d, %d thread%s", nb_version(),
           t.opt.eager ? "eager" : "graph", t.opt.epochs, t.opt.batch, t.opt.threads, t.opt.threads > 1 ? "s" : "");
    if (t.opt.data_parallel) printf(" per rank, %d rank%s", t.ranks, t.ranks > 1 ? "s" : "");
    printf("\n");
    fflush(stdout);
  }
  double start = now();
  bool ok = setup(&t) && train(&t);
  /* rank 0 evaluates and saves; the others have the same weights */
  double acc = !ok ? -1 : t.rank == 0 ? evaluate(&t) : 0;
  if (acc >= 0 && t.rank == 0)
    printf("test accuracy %.2f%% (%lld images), %.1f s\n", 100 * acc, (long long)nb_dataset_size(t.test),
           now() - start);
  ok = acc >= 0 && (t.rank != 0 || save(&t));
  teardown(&t);
  /* after a failed collective MPI is left to mpirun (nb_dist_finalize says so) */
  if (t.opt.data_parallel && nb_dist_finalize()) ok = false;
  return ok;
}
