/* bench/eager_chain: eager autograd overhead on the chain x = tanh(x * w + b), N steps
   (3 ops per step) on 1xW float32 tensors with w and b watched by a tape, as in
   bench/peers/eager_chain.py. Per width, 1 thread, median of RUNS runs after one
   warm-up run:
     nb_eager_chain_fwd_notape  the forward with no tape active
     nb_eager_chain_fwd_record  the forward plus loss = sum(x) while a tape records
     nb_eager_chain_bwd         nb_tape_gradient of the loss w.r.t. w and b
   all as us_per_op (per step / 3). Each run keeps every step's temporaries until the
   gradient, then releases everything (nb_tape_end + nb_scope_end); nb_eager_chain_rss
   reports the resident set before and after the runs to show the steady state is flat.
   The gradients are checked against a hand-written reverse pass (max_rel_err).
   nb_eager_jacobian times a vectorized nb_tape_jacobian against the per-element loop. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "benchutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS 10000
#define RUNS 7

typedef struct chain {
  nb_ctx *c;
  int64_t width;
  nb_tensor *x0, *w, *b;
  float *hx0, *hw, *hb; /* host copies for the reference gradient */
} chain;

typedef struct timings {
  double notape[RUNS], record[RUNS], backward[RUNS];
} timings;

static float uniform(void) { return (float)rand() / (float)RAND_MAX; }

/* x0 ~ U(-1, 1), w ~ U(0.5, 1), b ~ U(-0.1, 0.1): keeps tanh out of saturation. */
static bool chain_init(chain *ch, nb_ctx *c, int64_t width) {
  *ch = (chain){.c = c, .width = width};
  ch->hx0 = malloc((size_t)width * sizeof *ch->hx0);
  ch->hw = malloc((size_t)width * sizeof *ch->hw);
  ch->hb = malloc((size_t)width * sizeof *ch->hb);
  if (!ch->hx0 || !ch->hw || !ch->hb) return false;
  srand(1);
  for (int64_t i = 0; i < width; i++) {
    ch->hx0[i] = 2.0f * uniform() - 1.0f;
    ch->hw[i] = 0.5f + 0.5f * uniform();
    ch->hb[i] = 0.2f * uniform() - 0.1f;
  }
  const int64_t shape[2] = {1, width};
  ch->x0 = nb_tensor_from(c, NB_F32, 2, shape, ch->hx0);
  ch->w = nb_tensor_from(c, NB_F32, 2, shape, ch->hw);
  ch->b = nb_tensor_from(c, NB_F32, 2, shape, ch->hb);
  return nb_status(c) == NB_OK;
}

static void chain_free(chain *ch) {
  nb_tensor_free(ch->x0);
  nb_tensor_free(ch->w);
  nb_tensor_free(ch->b);
  free(ch->hx0);
  free(ch->hw);
  free(ch->hb);
}

static nb_tensor *forward(const chain *ch) {
  nb_tensor *x = ch->x0;
  for (int i = 0; i < STEPS; i++) x = nb_tanh(ch->c, nb_add(ch->c, nb_mul(ch->c, x, ch->w), ch->b));
  return x;
}

/* One run of the forward with no tape; seconds. */
static double run_notape(const chain *ch) {
  nb_scope_begin(ch->c);
  double t0 = bench_now();
  forward(ch);
  double s = bench_now() - t0;
  nb_scope_end(ch->c, NULL, 0);
  return s;
}

/* One recorded forward and backward; seconds of each in *fwd, *bwd, the gradients
   copied to dw, db. */
static void run_taped(const chain *ch, double *fwd, double *bwd, float *dw, float *db) {
  static const int axes[2] = {0, 1};
  nb_ctx *c = ch->c;
  nb_scope_begin(c);
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, ch->w);
  nb_tape_watch(t, ch->b);
  double t0 = bench_now();
  nb_tensor *loss = nb_sum(c, forward(ch), axes, 2, false);
  double t1 = bench_now();
  nb_tensor *sources[2] = {ch->w, ch->b}, *grads[2] = {NULL, NULL};
  nb_tape_gradient(t, &loss, 1, sources, 2, NULL, grads);
  double t2 = bench_now();
  size_t bytes = (size_t)ch->width * sizeof(float);
  nb_read(grads[0], dw, bytes);
  nb_read(grads[1], db, bytes);
  nb_tape_end(t);
  nb_scope_end(c, NULL, 0);
  *fwd = t1 - t0;
  *bwd = t2 - t1;
}

/* The largest error of (dw, db) relative to the largest reference entry, against a
   reverse pass in double: y_i = tanh(x_i w + b), dx_i = dy_{i+1} (1 - y^2) w. */
static double max_rel_err(const chain *ch, const float *dw, const float *db) {
  double err = 0, scale = 0;
  double *ys = malloc((size_t)(STEPS + 1) * sizeof *ys);
  if (!ys) return INFINITY;
  for (int64_t j = 0; j < ch->width; j++) {
    double w = ch->hw[j], b = ch->hb[j], gw = 0, gb = 0, dy = 1;
    ys[0] = ch->hx0[j];
    for (int i = 0; i < STEPS; i++) ys[i + 1] = tanh(ys[i] * w + b);
    for (int i = STEPS; i > 0; i--) {
      double dz = dy * (1 - ys[i] * ys[i]);
      gw += dz * ys[i - 1];
      gb += dz;
      dy = dz * w;
    }
    err = fmax(err, fmax(fabs(gw - dw[j]), fabs(gb - db[j])));
    scale = fmax(scale, fmax(fabs(gw), fabs(gb)));
  }
  free(ys);
  return err / fmax(scale, 1e-30);
}

static void print_line(const char *name, int64_t width, double *per_run) {
  printf("name=%s width=%lld steps=%d threads=1 runs=%d us_per_op=%.3f\n", name, (long long)width, STEPS, RUNS,
         bench_median(per_run, RUNS) / STEPS / 3.0 * 1e6);
}

static bool bench_width(nb_ctx *c, int64_t width) {
  chain ch = {0};
  timings tm;
  float *dw = malloc((size_t)width * sizeof *dw), *db = malloc((size_t)width * sizeof *db);
  bool ok = dw && db && chain_init(&ch, c, width);
  if (ok) {
    double fwd, bwd;
    long rss_start = bench_rss_kib();
    run_notape(&ch); /* warm-up: grows the context's pools and the tape to their steady size */
    run_taped(&ch, &fwd, &bwd, dw, db);
    long rss_warm = bench_rss_kib();
    for (int r = 0; r < RUNS; r++) {
      tm.notape[r] = run_notape(&ch);
      run_taped(&ch, &tm.record[r], &tm.backward[r], dw, db);
    }
    long rss_end = bench_rss_kib();
    ok = nb_status(c) == NB_OK;
    double sum[RUNS];
    for (int r = 0; r < RUNS; r++) sum[r] = tm.record[r] + tm.backward[r];
    print_line("nb_eager_chain_fwd_notape", width, tm.notape);
    print_line("nb_eager_chain_fwd_record", width, tm.record);
    print_line("nb_eager_chain_bwd", width, tm.backward);
    print_line("nb_eager_chain_record_plus_bwd", width, sum);
    printf(
        "name=nb_eager_chain_rss width=%lld threads=1 rss_kib_start=%ld rss_kib_after_warmup=%ld "
        "rss_kib_after_%d_runs=%ld max_rel_err=%.2e\n",
        (long long)width, rss_start, rss_warm, RUNS, rss_end, ok ? max_rel_err(&ch, dw, db) : NAN);
  }
  chain_free(&ch);
  free(dw);
  free(db);
  return ok;
}

/* A training-style loop: each step begins a tape, runs y = sum(tanh(x w + b)) on 1x8,
   takes the gradient and updates w, all inside a scope that keeps only the new w.
   Memory must stay flat: RSS at 1% of the steps and at the end. */
static bool train_loop(nb_ctx *c, long steps) {
  const int64_t shape[2] = {1, 8};
  float xv[8], wv[8];
  for (int i = 0; i < 8; i++) xv[i] = uniform() - 0.5f, wv[i] = uniform() - 0.5f;
  nb_tensor *x = nb_tensor_from(c, NB_F32, 2, shape, xv), *w = nb_tensor_from(c, NB_F32, 2, shape, wv);
  nb_tensor *b = nb_tensor_from(c, NB_F32, 2, shape, NULL), *lr = nb_scalar(c, NB_F32, 1e-3);
  long rss_start = bench_rss_kib(), rss_early = 0;
  double t0 = bench_now();
  for (long i = 0; i < steps && nb_status(c) == NB_OK; i++) {
    nb_scope_begin(c);
    nb_tape *t = nb_tape_begin(c, 0);
    nb_tape_watch(t, w);
    nb_tensor *y = nb_sum(c, nb_tanh(c, nb_add(c, nb_mul(c, x, w), b)), NULL, 0, false), *dw;
    nb_tape_gradient(t, &y, 1, &w, 1, NULL, &dw);
    nb_tape_end(t);
    nb_tensor *next = nb_sub(c, w, nb_mul(c, lr, dw));
    nb_scope_end(c, &next, 1);
    nb_tensor_free(w);
    w = next;
    if (i == steps / 100) rss_early = bench_rss_kib();
  }
  double us = (bench_now() - t0) * 1e6 / (double)steps;
  printf(
      "name=nb_eager_train_loop shape=1x8 steps=%ld threads=1 us_per_step=%.2f rss_kib_start=%ld "
      "rss_kib_at_1pct=%ld rss_kib_end=%ld\n",
      steps, us, rss_start, rss_early, bench_rss_kib());
  return nb_status(c) == NB_OK;
}

/* The Jacobian d y / d x of y = 10 steps on 1x64, of the chain tanh(x * w + b) (every op
   elementwise) and of an MLP, tanh(x W + b) with W 64x64 (MatMul batched through
   BatchMatMulV2's gradient): both take the vectorized path. nb_tape_jacobian (one backward pass with
   64 seeds) against the loop it replaces, 64 gradients seeded one-hot and stacked; median
   of RUNS, both on a persistent tape. */
#define JAC_WIDTH 64
#define JAC_STEPS 10

static nb_tensor *jacobian_by_loop(nb_ctx *c, nb_tape *t, nb_tensor *y, nb_tensor *x) {
  nb_tensor *rows[JAC_WIDTH];
  for (int j = 0; j < JAC_WIDTH; j++) {
    float onehot[JAC_WIDTH] = {0};
    onehot[j] = 1;
    nb_tensor *seed = nb_tensor_from(c, NB_F32, 2, (const int64_t[]){1, JAC_WIDTH}, onehot);
    if (nb_tape_gradient(t, &y, 1, &x, 1, &seed, &rows[j]) != NB_OK) return NULL;
  }
  return nb_pack(c, rows, JAC_WIDTH, 0);
}

static const char *const path_names[] = {"loop", "vectorized", "mixed"};

static nb_tensor *random_f32(nb_ctx *c, int64_t rows, int64_t cols, float scale) {
  float v[JAC_WIDTH * JAC_WIDTH];
  for (int64_t i = 0; i < rows * cols; i++) v[i] = scale * (uniform() - 0.5f);
  return nb_tensor_from(c, NB_F32, 2, (const int64_t[]){rows, cols}, v);
}

static bool bench_jacobian(nb_ctx *c, bool mlp) {
  nb_scope_begin(c);
  nb_tensor *x = random_f32(c, 1, JAC_WIDTH, 1), *b = random_f32(c, 1, JAC_WIDTH, 1);
  nb_tensor *w = mlp ? random_f32(c, JAC_WIDTH, JAC_WIDTH, 0.5f) : random_f32(c, 1, JAC_WIDTH, 1);
  nb_tensor *y = x, *jac = NULL, *loop = NULL;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  for (int i = 0; i < JAC_STEPS; i++)
    y = nb_tanh(c, nb_add(c, mlp ? nb_matmul(c, y, w, false, false) : nb_mul(c, y, w), b));
  nb_tape_stop_recording(t); /* a recording persistent tape would record the gradients below too */
  double vec_us[RUNS], loop_us[RUNS], diff = 0;
  bool ok = true;
  for (int r = 0; r < RUNS && ok; r++) {
    nb_scope_begin(c); /* each run frees its results: the steady state, not a growing heap */
    double t0 = bench_now();
    nb_tape_jacobian(t, y, x, &jac);
    double t1 = bench_now();
    loop = jacobian_by_loop(c, t, y, x);
    vec_us[r] = (t1 - t0) * 1e6, loop_us[r] = (bench_now() - t1) * 1e6;
    ok = nb_status(c) == NB_OK && jac && loop;
    for (int64_t i = 0; ok && i < nb_num_elements(jac); i++)
      diff = fmax(diff, fabs(nb_item(jac, i) - nb_item(loop, i)));
    nb_scope_end(c, NULL, 0);
  }
  double vec = bench_median(vec_us, RUNS), by_loop = bench_median(loop_us, RUNS);
  if (ok)
    printf(
        "name=nb_eager_jacobian model=%s shape=1x%d steps=%d threads=1 runs=%d path=%s us=%.1f loop_us=%.1f "
        "speedup=%.1f max_abs_diff=%.2e\n",
        mlp ? "mlp" : "chain", JAC_WIDTH, JAC_STEPS, RUNS, path_names[nb_tape_jacobian_path(t)], vec, by_loop,
        by_loop / vec, diff);
  nb_tape_end(t);
  nb_scope_end(c, NULL, 0);
  return ok;
}

int main(int argc, char **argv) {
  static const int64_t widths[] = {8, 1024};
  nb_ctx *c = nb_eager_new();
  if (!c) return 1;
  nb_ctx_set_threads(c, 1);
  bool ok = true;
  for (size_t i = 0; i < sizeof widths / sizeof *widths && ok; i++)
    if (argc < 2 || atoll(argv[1]) == widths[i]) ok = bench_width(c, widths[i]);
  if (ok && argc < 2) ok = bench_jacobian(c, false);
  if (ok && argc < 2) ok = bench_jacobian(c, true);
  if (ok && argc < 2) ok = train_loop(c, 1000000);
  if (!ok) fprintf(stderr, "eager_chain: %s\n", nb_error(c));
  nb_ctx_free(c);
  return ok ? 0 : 1;
}
