/* bench/train_mlp: one training step of an MLP 784-512-512-10 (ReLU, mean squared error)
   at batch 128 in float32 on 1 thread, eager (tape + Adam) and graph (nb_gradients + Adam
   through a session), median of RUNS runs of STEPS steps after a warm-up:
     nb_train_mlp_eager   step_ms     forward, tape gradient and Adam update
     nb_train_mlp_graph   step_ms     one nb_run of the train op
     nb_adam_update       ms          the Adam update of the ~670k parameters alone (eager)
   The eager loop ends the forward's scope before updating (keeping the gradients), so the
   variables are updated in place. nb_train_mlp_rss shows the eager steady state is flat. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "benchutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define BATCH 128
#define STEPS 20
#define RUNS 5
#define NV 6

static const int64_t dims[4] = {784, 512, 512, 10};

static nb_tensor *uniform(nb_ctx *c, int rank, const int64_t *shape, float scale) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  float *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = scale * (2.0f * (float)rand() / (float)RAND_MAX - 1.0f);
  nb_tensor *t = nb_tensor_from(c, NB_F32, rank, shape, v);
  free(v);
  return t;
}

static void make_vars(nb_ctx *c, nb_variable **vars) {
  for (int l = 0; l < 3; l++) {
    int64_t w[2] = {dims[l], dims[l + 1]}, b[1] = {dims[l + 1]};
    vars[2 * l] = nb_variable_new(c, uniform(c, 2, w, sqrtf(6.0f / (float)(dims[l] + dims[l + 1]))), true, "w");
    vars[2 * l + 1] = nb_variable_new(c, nb_tensor_from(c, NB_F32, 1, b, NULL), true, "b");
  }
}

static nb_tensor *loss_of(nb_ctx *c, nb_tensor *x, nb_tensor *y, nb_tensor *const *p) {
  nb_tensor *h = x;
  for (int l = 0; l < 3; l++) {
    h = nb_add(c, nb_matmul(c, h, p[2 * l], false, false), p[2 * l + 1]);
    if (l < 2) h = nb_relu(c, h);
  }
  return nb_mean(c, nb_squared_difference(c, h, y), NULL, 0, false);
}

static double eager_step(nb_ctx *c, nb_optimizer *o, nb_variable **vars, nb_tensor *x, nb_tensor *y, double *update) {
  double t0 = bench_now();
  nb_scope_begin(c);
  nb_tensor *g[NV];
  nb_scope_begin(c);
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tensor *p[NV];
  for (int i = 0; i < NV; i++) p[i] = nb_variable_read(c, vars[i]);
  nb_tensor *loss = loss_of(c, x, y, p);
  nb_tape_gradient_vars(t, &loss, 1, vars, NV, g);
  nb_tape_end(t);
  nb_scope_end(c, g, NV);
  double t1 = bench_now();
  nb_optimizer_apply(o, c, g, vars, NV, NULL);
  double t2 = bench_now();
  nb_scope_end(c, NULL, 0);
  *update = t2 - t1;
  return bench_now() - t0;
}

int main(void) {
  srand(1);
  nb_ctx *c = nb_eager_new();
  nb_ctx_set_threads(c, 1);
  int64_t xs[2] = {BATCH, 784}, ys[2] = {BATCH, 10};
  nb_tensor *x = uniform(c, 2, xs, 1), *y = uniform(c, 2, ys, 1);
  nb_variable *vars[NV];
  make_vars(c, vars);
  nb_optimizer *o = nb_adam_new(1e-3, 0.9, 0.999, 1e-7);
  double steps[RUNS], updates[RUNS], upd, first_loss = 0;
  for (int i = 0; i < 3; i++) eager_step(c, o, vars, x, y, &upd);
  long rss0 = bench_rss_kib();
  for (int r = 0; r < RUNS; r++) {
    double s[STEPS], u[STEPS];
    for (int i = 0; i < STEPS; i++) s[i] = eager_step(c, o, vars, x, y, &u[i]);
    steps[r] = bench_median(s, STEPS);
    updates[r] = bench_median(u, STEPS);
  }
  long rss1 = bench_rss_kib();
  if (nb_status(c)) {
    fprintf(stderr, "%s\n", nb_error(c));
    return 1;
  }
  printf("name=nb_train_mlp_eager step_ms=%.3f\n", 1e3 * bench_median(steps, RUNS));
  printf("name=nb_adam_update params=%d ms=%.3f\n", 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10,
         1e3 * bench_median(updates, RUNS));
  printf("name=nb_train_mlp_rss before_kib=%ld after_kib=%ld\n", rss0, rss1);

  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  nb_session *s = nb_session_new(g);
  nb_session_set_threads(s, 1);
  nb_tensor *xp = nb_placeholder(gc, NB_F32, 2, xs, "x"), *yp = nb_placeholder(gc, NB_F32, 2, ys, "y");
  nb_tensor *p[NV], *d[NV], *train = NULL;
  for (int i = 0; i < NV; i++) p[i] = nb_variable_read(gc, vars[i]);
  nb_tensor *loss = loss_of(gc, xp, yp, p);
  nb_gradients(gc, &loss, 1, p, NV, NULL, d);
  nb_optimizer *og = nb_adam_new(1e-3, 0.9, 0.999, 1e-7);
  nb_optimizer_apply(og, gc, d, vars, NV, &train);
  if (nb_status(gc)) {
    fprintf(stderr, "%s\n", nb_error(gc));
    return 1;
  }
  nb_tensor *feed[2] = {xp, yp}, *vals[2] = {x, y}, *fetch[2] = {loss, train}, *out[2];
  for (int r = 0; r < RUNS; r++) {
    double st[STEPS];
    for (int i = 0; i < STEPS + (r == 0 ? 3 : 0); i++) {
      double t0 = bench_now();
      if (nb_run(s, feed, vals, 2, fetch, 2, out)) {
        fprintf(stderr, "%s\n", nb_session_error(s));
        return 1;
      }
      if (i == 0 && r == 0) first_loss = nb_item(out[0], 0);
      nb_tensor_free(out[0]);
      nb_tensor_free(out[1]);
      if (i >= (r == 0 ? 3 : 0)) st[i - (r == 0 ? 3 : 0)] = bench_now() - t0;
    }
    steps[r] = bench_median(st, STEPS);
  }
  printf("name=nb_train_mlp_graph step_ms=%.3f first_loss=%.3g\n", 1e3 * bench_median(steps, RUNS), first_loss);
  nb_session_free(s);
  nb_ctx_free(gc);
  nb_graph_free(g);
  nb_optimizer_free(og);
  nb_optimizer_free(o);
  for (int i = 0; i < NV; i++) nb_variable_free(vars[i]);
  nb_ctx_free(c);
  return 0;
}
