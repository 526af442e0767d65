/* The eager gradient tape (tf.GradientTape): basic, persistent and one-shot tapes,
   stop/resume, nested tapes (higher orders), Jacobians, ops of every family on the tape
   against nb_gradients of the same function in a graph, flat memory in a training loop,
   concurrent contexts, and every argument error. */
#include "graphutil.h"

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "../src/autodiff/tape.h" /* how many entries a tape holds: what it recorded */
#include "../src/core/core.h"

/* A 1-D float64 tensor. */
static nb_tensor *vec(nb_ctx *c, int64_t n, const double *v) { return tu_make(c, NB_F64, 1, &n, v); }

/* The gradient of one target with respect to one source. */
static nb_tensor *grad1(nb_ctx *c, nb_tape *t, nb_tensor *y, nb_tensor *x) {
  nb_tensor *dx = NULL;
  if (nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx)) fail_msg("nb_tape_gradient: %s", nb_error(c));
  return dx;
}

/* ---- the ready hook (src/dist's gradient buckets) -------------------------------------- */

/* What the hook saw: the order sources became final and their values then. */
typedef struct ready_log {
  int order[4], n;
  double first[4];
} ready_log;

static void log_ready(void *user, int source, const nb_tensor *grad) {
  ready_log *log = user;
  log->first[log->n] = nb_item(grad, 0);
  log->order[log->n++] = source;
}

/* h = 2 x1 (entry 0), y = sum(h x2) (entries 1, 2): the pass runs 2, 1, 0, so x2's gradient
   (h) is final after entry 1, before x1's (2 x2) is computed: the hook reports x2, then x1,
   each once and with its final value. */
static void test_ready_hook(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x1 = vec(c, 2, TU_VALS(1, 2)), *x2 = vec(c, 2, TU_VALS(3, 4)), *out[2] = {NULL, NULL};
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x1);
  nb_tape_watch(t, x2);
  nb_tensor *y = nb_sum(c, nb_mul(c, nb_mul(c, x1, nb_scalar(c, NB_F64, 2)), x2), NULL, 0, false);
  ready_log log = {.n = 0};
  nbad_tape_set_ready_hook(t, log_ready, &log);
  nb_tensor *sources[2] = {x1, x2};
  assert_int_equal(nb_tape_gradient(t, &y, 1, sources, 2, NULL, out), NB_OK);
  assert_int_equal(log.n, 2);
  assert_int_equal(log.order[0], 1);
  assert_int_equal(log.order[1], 0);
  assert_true(log.first[0] == nb_item(out[1], 0) && log.first[0] == 2);
  assert_true(log.first[1] == nb_item(out[0], 0) && log.first[1] == 6);
  nb_tape_end(t);
}

/* ---- basics ---------------------------------------------------------------------------- */

static void test_basic(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 3, TU_VALS(1, 2, 3));
  nb_tape *t = nb_tape_begin(c, 0);
  assert_non_null(t);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_mul(c, nb_mul(c, x, x), x);
  nb_tensor *dx = grad1(c, t, y, x);
  tu_check(dx, NB_F64, 1, TU_SHAPE(3), TU_VALS(3, 12, 27), 1e-15);
  nb_tape_end(t);

  /* float32 through a chain of unary ops: d/dx exp(sin x) = cos x exp(sin x) */
  nb_tensor *xf = tu_make(c, NB_F32, 2, TU_SHAPE(1, 2), TU_VALS(0.5, -1));
  t = nb_tape_begin(c, 0);
  nb_tape_watch(t, xf);
  dx = grad1(c, t, nb_exp(c, nb_sin(c, xf)), xf);
  tu_check(dx, NB_F32, 2, TU_SHAPE(1, 2), TU_VALS(cos(0.5) * exp(sin(0.5)), cos(-1.0) * exp(sin(-1.0))), 1e-6);
  nb_tape_end(t);
  assert_int_equal(nb_status(c), NB_OK);
}

/* An op with more inputs than the fused-sum bit mask has bits (AddN of 40 terms, one x
   among them twice): every input's gradient, and no shift past the mask's width (UBSan). */
static void test_many_inputs(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 3, TU_VALS(1, 2, 3)), *terms[40];
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  for (int i = 0; i < 40; i++) terms[i] = i == 35 ? x : nb_mul(c, x, nb_scalar(c, NB_F64, i));
  nb_tensor *dx = grad1(c, t, nb_add_n(c, terms, 40), x);
  double d = 1; /* sum of i over i != 35, plus the 1 of x itself */
  for (int i = 0; i < 40; i++) d += i == 35 ? 0 : i;
  tu_check(dx, NB_F64, 1, TU_SHAPE(3), TU_VALS(d, d, d), 1e-12);
  nb_tape_end(t);
}

/* Several targets are summed; several sources each get their gradient. */
static void test_several_targets_and_sources(void **state) {
  nb_ctx *c = *state;
  nb_tensor *a = vec(c, 3, TU_VALS(1, 2, 3)), *b = vec(c, 3, TU_VALS(-1, 0.5, 4));
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, a);
  nb_tape_watch(t, b);
  nb_tensor *ys[2] = {nb_sum(c, nb_square(c, a), NULL, 0, false), nb_mul(c, a, b)};
  nb_tensor *xs[2] = {a, b}, *dx[2];
  assert_int_equal(nb_tape_gradient(t, ys, 2, xs, 2, NULL, dx), NB_OK);
  tu_check(dx[0], NB_F64, 1, TU_SHAPE(3), TU_VALS(2 - 1, 4 + 0.5, 6 + 4), 1e-15); /* 2a + b */
  tu_check(dx[1], NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3), 1e-15);               /* a */
  nb_tape_end(t);

  /* the same source listed twice, and no targets at all */
  t = nb_tape_begin(c, 1);
  nb_tape_watch(t, a);
  nb_tensor *y = nb_sin(c, a), *twice[2] = {a, a};
  assert_int_equal(nb_tape_gradient(t, &y, 1, twice, 2, NULL, dx), NB_OK);
  tu_check(dx[0], NB_F64, 1, TU_SHAPE(3), TU_VALS(cos(1.0), cos(2.0), cos(3.0)), 1e-15);
  tu_check(dx[1], NB_F64, 1, TU_SHAPE(3), TU_VALS(cos(1.0), cos(2.0), cos(3.0)), 1e-15);
  assert_int_equal(nb_tape_gradient(t, NULL, 0, &a, 1, NULL, dx), NB_OK);
  assert_null(dx[0]);
  nb_tape_end(t);
}

/* output_grads weight the targets; NULL entries mean ones. */
static void test_output_grads(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 3, TU_VALS(1, 2, 3)), *g = vec(c, 3, TU_VALS(1, 10, 100));
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *ys[2] = {nb_square(c, x), nb_mul(c, x, nb_scalar(c, NB_F64, 3))};
  nb_tensor *og[2] = {g, NULL}, *dx;
  assert_int_equal(nb_tape_gradient(t, ys, 2, &x, 1, og, &dx), NB_OK);
  tu_check(dx, NB_F64, 1, TU_SHAPE(3), TU_VALS(2 * 1 + 3, 4 * 10 + 3, 6 * 100 + 3), 1e-15);
  nb_tensor *og2[2] = {NULL, g};
  assert_int_equal(nb_tape_gradient(t, ys, 2, &x, 1, og2, &dx), NB_OK);
  tu_check(dx, NB_F64, 1, TU_SHAPE(3), TU_VALS(2 + 3, 4 + 30, 6 + 300), 1e-15);
  /* a gradient passed straight through is a handle of its own: freeing it keeps g */
  nb_tensor *through[2] = {nb_identity(c, x), x};
  for (int i = 0; i < 2; i++) {
    assert_int_equal(nb_tape_gradient(t, &through[i], 1, &x, 1, &g, &dx), NB_OK);
    assert_ptr_not_equal(dx, g);
    nb_tensor_free(dx);
    tu_check_vals(g, TU_VALS(1, 10, 100), 0);
  }
  nb_tape_end(t);
}

/* A source that is also a target gets the seed of that target added. */
static void test_source_is_target(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 2, TU_VALS(2, -3)), *dx;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *ys[2] = {nb_square(c, x), x};
  assert_int_equal(nb_tape_gradient(t, ys, 2, &x, 1, NULL, &dx), NB_OK);
  tu_check(dx, NB_F64, 1, TU_SHAPE(2), TU_VALS(5, -5), 1e-15); /* 2x + 1 */
  assert_int_equal(nb_tape_gradient(t, &x, 1, &x, 1, NULL, &dx), NB_OK);
  tu_check(dx, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 1), 0);
  nb_tape_end(t);
}

/* Unconnected, unwatched and integer sources give NULL (zeros on request). */
static void test_unconnected_int_unwatched(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 2, TU_VALS(1, 2)), *z = tu_make(c, NB_F64, 2, TU_SHAPE(2, 2), NULL);
  nb_tensor *u = vec(c, 2, TU_VALS(5, 6)); /* used but never watched */
  nb_tensor *xi = tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(3, 4));
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tape_watch(t, z);
  nb_tape_watch(t, xi);
  /* y = x * u + cast(xi) * x + cast(cast(x, int32)) * 2: the int paths carry nothing */
  nb_tensor *y = nb_add(c, nb_mul(c, x, u), nb_mul(c, nb_cast(c, xi, NB_F64), x));
  y = nb_add(c, y, nb_mul(c, nb_cast(c, nb_cast(c, x, NB_I32), NB_F64), nb_scalar(c, NB_F64, 2)));
  assert_int_equal(nb_status(c), NB_OK);
  nb_tensor *xs[4] = {x, z, xi, u}, *dx[4];
  assert_int_equal(nb_tape_gradient(t, &y, 1, xs, 4, NULL, dx), NB_OK);
  tu_check(dx[0], NB_F64, 1, TU_SHAPE(2), TU_VALS(5 + 3, 6 + 4), 1e-15);
  assert_null(dx[1]);
  assert_null(dx[2]);
  assert_null(dx[3]);
  nb_tape_set_unconnected_zero(t, true);
  assert_int_equal(nb_tape_gradient(t, &y, 1, xs, 4, NULL, dx), NB_OK);
  tu_check(dx[0], NB_F64, 1, TU_SHAPE(2), TU_VALS(8, 10), 1e-15);
  tu_check(dx[1], NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(0, 0, 0, 0), 0);
  /* zeros for an unconnected source of any dtype, as nb_gradients' unconnected_zero */
  tu_check(dx[2], NB_I32, 1, TU_SHAPE(2), TU_VALS(0, 0), 0);
  tu_check(dx[3], NB_F64, 1, TU_SHAPE(2), TU_VALS(0, 0), 0);
  nb_tape_set_unconnected_zero(t, false);
  assert_int_equal(nb_tape_gradient(t, &y, 1, xs, 4, NULL, dx), NB_OK);
  assert_null(dx[1]);
  /* an integer target seeds nothing */
  nb_tensor *yi = nb_mul(c, xi, xi);
  assert_int_equal(nb_tape_gradient(t, &yi, 1, &xi, 1, NULL, dx), NB_OK);
  assert_null(dx[0]);
  nb_tape_end(t);

  /* an op run before the watch is not recorded */
  t = nb_tape_begin(c, 0);
  nb_tensor *early = nb_square(c, u);
  nb_tape_watch(t, u);
  y = nb_add(c, early, u);
  dx[0] = grad1(c, t, y, u);
  tu_check(dx[0], NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 1), 0);
  nb_tape_end(t);
}

/* A stop_gradient on the path cuts it, as in TF. */
static void test_stop_gradient_on_tape(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 2, TU_VALS(1, 3));
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_add(c, nb_mul(c, nb_stop_gradient(c, nb_square(c, x)), x), x);
  tu_check(grad1(c, t, y, x), NB_F64, 1, TU_SHAPE(2), TU_VALS(1 + 1, 9 + 1), 1e-15);
  nb_tape_end(t);
}

/* ---- persistence ------------------------------------------------------------------------- */

static void test_persistent(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 3, TU_VALS(0.1, 0.2, 0.3));
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_sum(c, nb_tanh(c, nb_square(c, x)), NULL, 0, false);
  nb_tensor *z = nb_exp(c, x);
  nb_tensor *first = grad1(c, t, y, x);
  for (int i = 0; i < 3; i++) {
    nb_tensor *again = grad1(c, t, y, x);
    for (int64_t j = 0; j < 3; j++) assert_true(nb_item(again, j) == nb_item(first, j));
    nb_tensor_free(again);
  }
  double xv[3] = {0.1, 0.2, 0.3}, want[3], ez[3];
  for (int j = 0; j < 3; j++) {
    double th = tanh(xv[j] * xv[j]);
    want[j] = 2 * xv[j] * (1 - th * th);
    ez[j] = exp(xv[j]);
  }
  tu_check_vals(first, want, 1e-15);
  tu_check(grad1(c, t, z, x), NB_F64, 1, TU_SHAPE(3), ez, 1e-15); /* a second target of the same tape */
  /* the tape keeps recording after a gradient */
  nb_tensor *w = nb_mul(c, z, x);
  double wz[3];
  for (int j = 0; j < 3; j++) wz[j] = ez[j] * (1 + xv[j]);
  tu_check(grad1(c, t, w, x), NB_F64, 1, TU_SHAPE(3), wz, 1e-15);
  nb_tape_end(t);
}

static void test_one_shot(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 2, TU_VALS(1, 2)), *dx = x;
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_square(c, x);
  tu_check(grad1(c, t, y, x), NB_F64, 1, TU_SHAPE(2), TU_VALS(2, 4), 0);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_INVALID);
  assert_null(dx);
  tu_check_error(c, NB_INVALID, "non-persistent tape can be used for one gradient computation only", "persistent = 1");
  assert_int_equal(nb_tape_jacobian(t, y, x, &dx), NB_INVALID);
  assert_null(dx);
  tu_check_error(c, NB_INVALID, "nb_tape_jacobian", "used already");
  nb_tape_end(t);
  /* a reused tape starts fresh */
  t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  y = nb_mul(c, x, nb_scalar(c, NB_F64, 4));
  tu_check(grad1(c, t, y, x), NB_F64, 1, TU_SHAPE(2), TU_VALS(4, 4), 0);
  nb_tape_end(t);
}

/* A weight multiplied in several steps (an RNN's W_hh): the tape adds each step's term of
   its gradient into the sum it holds with one GEMM (_MatMulAdd over the sum's block), so
   the backward pass holds one weight-sized block, not the sum and a new term beside it.
   The values are small integers: every order of the sums gives the exact total. */
static void test_matmul_terms_summed_in_place(void **state) {
  nb_ctx *c = *state;
  enum { N = 128, STEPS = 4 };
  static double wv[N * N], xv[STEPS][N], want[N * N];
  for (int i = 0; i < N * N; i++) wv[i] = i % 7 - 3;
  for (int t = 0; t < STEPS; t++)
    for (int i = 0; i < N; i++) xv[t][i] = (i + t) % 5 - 2;
  for (int i = 0; i < N * N; i++) want[i] = xv[0][i / N] + xv[1][i / N] + xv[2][i / N] + xv[3][i / N];
  nb_tensor *w = tu_make_float(c, NB_F32, 2, TU_SHAPE(N, N), wv), *x[STEPS];
  for (int t = 0; t < STEPS; t++) x[t] = tu_make(c, NB_F32, 2, TU_SHAPE(1, N), xv[t]);
  nb_tape *tape = nb_tape_begin(c, 0);
  nb_tape_watch(tape, w);
  nb_tensor *y = nb_sum(c, nb_matmul(c, x[0], w, false, false), NULL, 0, false);
  for (int t = 1; t < STEPS; t++) y = nb_add(c, y, nb_sum(c, nb_matmul(c, x[t], w, false, false), NULL, 0, false));
  nbcore_pool *pool = nbcore_block_pool(c);
  int64_t held = pool->held, weight_bytes = N * N * (int64_t)sizeof(float);
  pool->peak = held;
  nb_tensor *dw = grad1(c, tape, y, w);
  nb_tape_end(tape);
  tu_check(dw, NB_F32, 2, TU_SHAPE(N, N), want, 0);
  assert_true(pool->peak - held < weight_bytes * 3 / 2);
}

/* A context freed with tapes still active (and spare ones) leaks nothing (ASan checks). */
static void test_free_with_active_tapes(void **state) {
  (void)state;
  nb_ctx *c = nb_eager_new();
  nb_tensor *x = vec(c, 4, TU_VALS(1, 2, 3, 4));
  nb_tape *spare = nb_tape_begin(c, 0);
  nb_tape_end(spare);
  nb_tape *p = nb_tape_begin(c, 1), *q = nb_tape_begin(c, 0);
  nb_tape_watch(p, x);
  nb_tape_watch(q, x);
  nb_tensor *y = nb_exp(c, nb_sum(c, nb_sin(c, x), NULL, 0, false));
  assert_non_null(grad1(c, p, y, x));
  assert_int_equal(nb_status(c), NB_OK);
  nb_ctx_free(c);
}

/* ---- stop / resume ---------------------------------------------------------------------- */

static void test_stop_resume(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 2, TU_VALS(1, 2));
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *a = nb_square(c, x);
  nb_tape_stop_recording(t);
  nb_tensor *b = nb_mul(c, x, nb_scalar(c, NB_F64, 3)); /* not recorded: its part is missing */
  nb_tensor *b2 = nb_exp(c, a);                         /* neither (it reads a tracked tensor) */
  nb_tape_resume_recording(t);
  nb_tensor *y = nb_add(c, nb_add(c, a, b), nb_add(c, b2, nb_sin(c, x)));
  tu_check_vals(grad1(c, t, y, x), TU_VALS(2 + cos(1.0), 4 + cos(2.0)), 1e-15);
  /* stopping twice and resuming once resumes */
  nb_tape_stop_recording(t);
  nb_tape_stop_recording(t);
  nb_tape_resume_recording(t);
  nb_tensor *y2 = nb_mul(c, x, x);
  tu_check_vals(grad1(c, t, y2, x), TU_VALS(2, 4), 1e-15);
  nb_tape_end(t);
}

/* ---- watched variables and reset ---------------------------------------------------------- */

static nb_variable *var_of(nb_ctx *c, double value, bool trainable, const char *name) {
  nb_variable *v = nb_variable_new(c, nb_scalar(c, NB_F64, value), trainable, name);
  assert_non_null(v);
  return v;
}

/* t's watched variables are exactly want[0..n), in that order. */
static void check_watched(nb_tape *t, nb_variable *const *want, int n) {
  nb_variable *got[4] = {NULL};
  assert_int_equal(nb_tape_watched_variables(t, got, 4), n);
  for (int i = 0; i < n; i++)
    if (got[i] != want[i])
      fail_msg("watched variable %d is '%s', want '%s'", i, nb_variable_name(got[i]), nb_variable_name(want[i]));
}

/* TF's watched_variables(): trainable variables read while recording and explicitly
   watched ones, each once, in order of creation; kept after a one-shot gradient. */
static void test_watched_variables(void **state) {
  nb_ctx *c = *state;
  nb_variable *k = var_of(c, 5, false, "k"), *b = var_of(c, 2, true, "b"), *a = var_of(c, 3, true, "a");
  nb_variable *u = var_of(c, 7, true, "u");
  nb_tape *t = nb_tape_begin(c, 0);
  check_watched(t, NULL, 0);
  nb_tensor *ra = nb_variable_read(c, a);
  nb_tape_stop_recording(t);
  nb_tensor *ru = nb_variable_read(c, u); /* read while stopped: not watched */
  nb_tape_resume_recording(t);
  nb_tensor *y = nb_mul(c, nb_mul(c, ra, nb_variable_read(c, b)), nb_mul(c, nb_variable_read(c, a), ru));
  nb_tensor *rk = nb_variable_read(c, k); /* not trainable: not watched */
  check_watched(t, (nb_variable *[]){b, a}, 2);
  nb_tape_watch_variable(t, k);
  nb_tape_watch_variable(t, b);
  y = nb_mul(c, y, rk);
  check_watched(t, (nb_variable *[]){k, b, a}, 3);
  nb_variable *first = NULL;
  assert_int_equal(nb_tape_watched_variables(t, &first, 1), 3); /* the count, past cap */
  assert_ptr_equal(first, k);
  nb_variable *vs[3] = {a, k, u};
  nb_tensor *d[3];
  assert_int_equal(nb_tape_gradient_vars(t, &y, 1, vs, 3, d), NB_OK);
  tu_check(d[0], NB_F64, 0, NULL, TU_VALS(2 * 2 * 3 * 7 * 5), 1e-12); /* y = a^2 b u k */
  tu_check(d[1], NB_F64, 0, NULL, TU_VALS(9 * 2 * 7), 1e-12);
  assert_null(d[2]);
  check_watched(t, (nb_variable *[]){k, b, a}, 3);
  nb_tape_end(t);
  /* without watch_accessed_variables only explicit watches count; a freed variable is not listed */
  t = nb_tape_begin(c, 1);
  nb_tape_set_watch_accessed_variables(t, false);
  nb_tape_watch_variable(t, u);
  y = nb_mul(c, nb_variable_read(c, a), nb_variable_read(c, u));
  check_watched(t, (nb_variable *[]){u}, 1);
  nb_tensor *du;
  assert_int_equal(nb_tape_gradient_vars(t, &y, 1, &u, 1, &du), NB_OK);
  tu_check(du, NB_F64, 0, NULL, TU_VALS(3), 0);
  nb_variable_free(u);
  check_watched(t, NULL, 0);
  /* errors */
  nb_tape_watch_variable(t, NULL);
  tu_check_error(c, NB_INVALID, "nb_tape_watch_variable", "NULL variable");
  nb_tape_watch_variable(t, u);
  tu_check_error(c, NB_INVALID, "nb_tape_watch_variable", "freed variable");
  assert_int_equal(nb_tape_watched_variables(t, NULL, 1), -1);
  tu_check_error(c, NB_INVALID, "nb_tape_watched_variables", "cap 1");
  assert_int_equal(nb_tape_watched_variables(t, NULL, -1), -1);
  tu_check_error(c, NB_INVALID, "nb_tape_watched_variables", "cap -1");
  assert_int_equal(nb_tape_watched_variables(NULL, NULL, 0), -1);
  nb_tape_watch_variable(NULL, a);
  nb_tape_end(t);
  nb_variable_free(a);
  nb_variable_free(b);
  nb_variable_free(k);
}

/* TF's reset(): the records and watches before it are gone, recording goes on. */
static void test_reset(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = nb_scalar(c, NB_F64, 3), *dx;
  nb_variable *w = var_of(c, 2, true, "w");
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_mul(c, x, x), *loss = nb_mul(c, nb_variable_read(c, w), nb_variable_read(c, w));
  assert_int_equal(nb_tape_reset(t), NB_OK);
  check_watched(t, NULL, 0);
  assert_null(grad1(c, t, y, x));               /* recorded before: dropped */
  assert_null(grad1(c, t, nb_mul(c, x, x), x)); /* x is not watched any more */
  loss = nb_add(c, loss, nb_mul(c, nb_variable_read(c, w), nb_variable_read(c, w)));
  check_watched(t, (nb_variable *[]){w}, 1);
  assert_int_equal(nb_tape_gradient_vars(t, &loss, 1, &w, 1, &dx), NB_OK);
  tu_check(dx, NB_F64, 0, NULL, TU_VALS(4), 0); /* the second w^2 only */
  nb_tape_watch(t, x);
  tu_check(grad1(c, t, nb_mul(c, nb_mul(c, x, x), x), x), NB_F64, 0, NULL, TU_VALS(27), 0);
  /* a stopped tape cannot be reset (TF's rule) and keeps its records */
  y = nb_square(c, x);
  nb_tape_stop_recording(t);
  assert_int_equal(nb_tape_reset(t), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_tape_reset", "not recording");
  nb_tape_resume_recording(t);
  tu_check(grad1(c, t, y, x), NB_F64, 0, NULL, TU_VALS(6), 0);
  nb_tape_end(t);
  /* a one-shot tape after its gradient stops recording; resumed and reset, it is usable again */
  t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  tu_check(grad1(c, t, nb_square(c, x), x), NB_F64, 0, NULL, TU_VALS(6), 0);
  assert_int_equal(nb_tape_reset(t), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_tape_reset", "not recording");
  nb_tape_resume_recording(t);
  assert_int_equal(nb_tape_reset(t), NB_OK);
  nb_tape_watch(t, x);
  tu_check(grad1(c, t, nb_exp(c, x), x), NB_F64, 0, NULL, TU_VALS(exp(3.0)), 1e-12);
  nb_tape_end(t);
  assert_int_equal(nb_tape_reset(NULL), NB_INVALID);
  nb_variable_free(w);
}

/* A gradient function cannot reset, end or differentiate the tape whose pass runs it. */
typedef enum { MISUSE_RESET, MISUSE_END, MISUSE_GRADIENT, MISUSE_NONE } tape_misuse;
typedef struct misuse_case {
  nb_tape *t;
  tape_misuse what;
} misuse_case;

static nb_code pass_through(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)c, (void)nin, (void)nout, (void)user;
  out[0] = in[0];
  return NB_OK;
}

static nb_code misusing_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                             nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)in, (void)nin, (void)out, (void)nout;
  misuse_case *m = user;
  nb_tensor *dy = dys[0], *d = NULL;
  if (m->what == MISUSE_RESET) nb_tape_reset(m->t);
  if (m->what == MISUSE_END) nb_tape_end(m->t);
  if (m->what == MISUSE_GRADIENT) nb_tape_gradient(m->t, &dy, 1, &dy, 1, NULL, &d);
  m->what = MISUSE_NONE; /* once */
  dxs[0] = dy;
  return nb_status(c);
}

static void test_misuse_in_backward_pass(void **state) {
  nb_ctx *c = *state;
  static const char *const frags[3] = {"nb_tape_reset", "nb_tape_end", "nb_tape_gradient"};
  nb_tensor *x = nb_scalar(c, NB_F64, 3), *y, *dx;
  for (int what = MISUSE_RESET; what < MISUSE_NONE; what++) {
    misuse_case m = {nb_tape_begin(c, 1), (tape_misuse)what};
    nb_tape_watch(m.t, x);
    assert_int_equal(nb_custom_gradient(c, pass_through, misusing_grad, &m, &x, 1, &y, 1), NB_OK);
    nb_tensor *z = nb_square(c, y);
    assert_int_equal(nb_tape_gradient(m.t, &z, 1, &x, 1, NULL, &dx), NB_INVALID);
    tu_check_error(c, NB_INVALID, frags[what], "backward pass");
    tu_check(grad1(c, m.t, z, x), NB_F64, 0, NULL, TU_VALS(6), 0); /* the tape still works */
    nb_tape_end(m.t);
  }
}

/* ---- higher orders: nested tapes, or one persistent tape ------------------------------- */

/* Tapes for a second order in x: `first` gives a gradient that `second` records. Nested
   tapes, or (one_tape) one persistent tape recording its own backward pass (TF's). */
typedef struct tape_pair {
  nb_tape *first, *second;
} tape_pair;

static tape_pair second_order_tapes(nb_ctx *c, nb_tensor *x, bool one_tape) {
  tape_pair p;
  p.second = nb_tape_begin(c, 1);
  p.first = one_tape ? p.second : nb_tape_begin(c, 0);
  nb_tape_watch(p.second, x);
  nb_tape_watch(p.first, x);
  return p;
}

static void end_first(tape_pair p) {
  if (p.first != p.second) nb_tape_end(p.first);
}

/* d2/dx2 tanh(x^2) = 2(1 - t^2) - 8 x^2 t (1 - t^2), t = tanh(x^2). */
static void test_second_order(void **state) {
  nb_ctx *c = *state;
  double xv[3] = {0.3, -0.7, 1.1}, d1[3], d2[3];
  for (int i = 0; i < 3; i++) {
    double th = tanh(xv[i] * xv[i]), s = 1 - th * th;
    d1[i] = 2 * xv[i] * s;
    d2[i] = 2 * s - 8 * xv[i] * xv[i] * th * s;
  }
  nb_tensor *x = vec(c, 3, xv);
  for (int one_tape = 0; one_tape < 2; one_tape++) {
    tape_pair p = second_order_tapes(c, x, one_tape);
    nb_tensor *y = nb_tanh(c, nb_square(c, x));
    nb_tensor *g = grad1(c, p.first, y, x);
    end_first(p);
    tu_check_vals(g, d1, 1e-14);
    tu_check_vals(grad1(c, p.second, g, x), d2, 1e-13);
    nb_tape_end(p.second);
  }
}

/* Hessian-vector product of sum(x^3): H = diag(6x), Hv = 6 x v. */
static void test_hessian_vector_product(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 3, TU_VALS(1, -2, 0.5)), *v = vec(c, 3, TU_VALS(2, 3, -4));
  for (int one_tape = 0; one_tape < 2; one_tape++) {
    tape_pair p = second_order_tapes(c, x, one_tape);
    nb_tensor *y = nb_sum(c, nb_pow(c, x, nb_scalar(c, NB_F64, 3)), NULL, 0, false);
    nb_tensor *g = grad1(c, p.first, y, x);
    end_first(p);
    tu_check_vals(g, TU_VALS(3, 12, 0.75), 1e-14);
    nb_tensor *hv;
    assert_int_equal(nb_tape_gradient(p.second, &g, 1, &x, 1, &v, &hv), NB_OK); /* weighted by v */
    tu_check(hv, NB_F64, 1, TU_SHAPE(3), TU_VALS(12, -36, -12), 1e-13);
    nb_tensor *gv = nb_sum(c, nb_mul(c, g, v), NULL, 0, false); /* the same through <g, v> */
    tu_check_vals(grad1(c, p.second, gv, x), TU_VALS(12, -36, -12), 1e-13);
    nb_tape_end(p.second);
  }
}

/* d/dx x^4 by three tapes: 4x^3, 12x^2, 24x. */
static void test_third_order(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 2, TU_VALS(1.5, -2));
  nb_tape *t3 = nb_tape_begin(c, 0), *t2 = nb_tape_begin(c, 0), *t1 = nb_tape_begin(c, 0);
  nb_tape_watch(t3, x);
  nb_tape_watch(t2, x);
  nb_tape_watch(t1, x);
  nb_tensor *x2 = nb_mul(c, x, x), *y = nb_mul(c, x2, x2);
  nb_tensor *g1 = grad1(c, t1, y, x);
  nb_tape_end(t1);
  nb_tensor *g2 = grad1(c, t2, g1, x);
  nb_tape_end(t2);
  nb_tensor *g3 = grad1(c, t3, g2, x);
  nb_tape_end(t3);
  tu_check_vals(g1, TU_VALS(4 * 3.375, 4 * -8.0), 1e-14);
  tu_check_vals(g2, TU_VALS(12 * 2.25, 12 * 4.0), 1e-14);
  tu_check(g3, NB_F64, 1, TU_SHAPE(2), TU_VALS(24 * 1.5, 24 * -2.0), 1e-14);
  assert_int_equal(c->ntapes, 0);
}

/* ---- a persistent tape records its own backward pass (TF's) ------------------------------ */

/* y = x^3 at x = 3 on one tape: 27, 18, 6, then 0. */
static void test_persistent_higher_orders(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = nb_scalar(c, NB_F64, 3);
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_set_unconnected_zero(t, true);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_mul(c, nb_mul(c, x, x), x);
  nb_tensor *d1 = grad1(c, t, y, x), *d2 = grad1(c, t, d1, x), *d3 = grad1(c, t, d2, x);
  tu_check(d1, NB_F64, 0, NULL, TU_VALS(27), 0);
  tu_check(d2, NB_F64, 0, NULL, TU_VALS(18), 0);
  tu_check(d3, NB_F64, 0, NULL, TU_VALS(6), 0);
  tu_check(grad1(c, t, d3, x), NB_F64, 0, NULL, TU_VALS(0), 0);
  tu_check(grad1(c, t, y, x), NB_F64, 0, NULL, TU_VALS(27), 0); /* the first order again */
  nb_tape_end(t);
}

/* What a tape does not record: a gradient taken while it is stopped, a Jacobian, and
   anything once a one-shot tape gave its gradient (it stops recording then, as TF's). */
static void test_backward_unrecorded(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = nb_scalar(c, NB_F64, 3), *d1, *jac;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_mul(c, nb_mul(c, x, x), x);
  int32_t n = t->nentries;
  nb_tape_stop_recording(t);
  d1 = grad1(c, t, y, x);
  nb_tape_resume_recording(t);
  assert_int_equal(t->nentries, n);
  assert_null(grad1(c, t, d1, x)); /* d1 is a constant to the tape */
  assert_int_equal(nb_tape_jacobian(t, y, x, &jac), NB_OK);
  tu_check(jac, NB_F64, 0, NULL, TU_VALS(27), 0);
  assert_int_equal(t->nentries, n);
  nb_tape_end(t);
  nb_variable *w = nb_variable_new(c, x, true, "w");
  t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  d1 = grad1(c, t, nb_mul(c, x, x), x);
  nb_tensor *z = nb_mul(c, nb_variable_read(c, w), d1); /* a trainable read: not watched now */
  assert_int_equal(t->nentries, 0);
  assert_int_equal(nb_tape_gradient(t, &z, 1, &x, 1, NULL, &d1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "non-persistent tape can be used for one gradient computation only", NULL);
  nb_tape_end(t);
  nb_variable_free(w);
}

/* The outer tape watches only x; the inner one watches x and z. y = x^2 z. */
static void test_nested_partial_watch(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 2, TU_VALS(3, -1)), *z = vec(c, 2, TU_VALS(2, 5));
  nb_tape *outer = nb_tape_begin(c, 1), *inner = nb_tape_begin(c, 1);
  nb_tape_watch(outer, x);
  nb_tape_watch(inner, x);
  nb_tape_watch(inner, z);
  nb_tensor *y = nb_mul(c, nb_square(c, x), z);
  nb_tensor *xs[2] = {x, z}, *g[2], *h[2];
  assert_int_equal(nb_tape_gradient(inner, &y, 1, xs, 2, NULL, g), NB_OK);
  tu_check_vals(g[0], TU_VALS(12, -10), 1e-15); /* 2xz */
  tu_check_vals(g[1], TU_VALS(9, 1), 1e-15);    /* x^2 */
  nb_tape_end(inner);
  assert_int_equal(nb_tape_gradient(outer, &g[0], 1, xs, 2, NULL, h), NB_OK);
  tu_check_vals(h[0], TU_VALS(4, 10), 1e-15); /* 2z */
  assert_null(h[1]);                          /* the outer tape does not watch z */
  assert_int_equal(nb_tape_gradient(outer, &g[1], 1, xs, 2, NULL, h), NB_OK);
  tu_check_vals(h[0], TU_VALS(6, -2), 1e-15); /* 2x */
  assert_null(h[1]);
  /* the outer tape's first-order gradient of y itself: z only as a constant */
  assert_int_equal(nb_tape_gradient(outer, &y, 1, xs, 2, NULL, h), NB_OK);
  tu_check_vals(h[0], TU_VALS(12, -10), 1e-15);
  assert_null(h[1]);
  nb_tape_end(outer);
}

/* ---- Jacobians ------------------------------------------------------------------------ */

/* jac against rows of gradients seeded one-hot. */
static void check_jacobian_rows(nb_ctx *c, nb_tape *t, nb_tensor *y, nb_tensor *x, const nb_tensor *jac) {
  int64_t m = nb_num_elements(y), n = nb_num_elements(x);
  assert_int_equal(nb_num_elements(jac), m * n);
  for (int64_t j = 0; j < m; j++) {
    double *onehot = calloc((size_t)m, sizeof *onehot);
    assert_non_null(onehot);
    onehot[j] = 1;
    nb_tensor *seed = tu_make(c, NB_F64, nb_rank(y), nb_shape(y), onehot), *row;
    free(onehot);
    assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, &seed, &row), NB_OK);
    for (int64_t i = 0; i < n; i++) {
      double want = row ? nb_item(row, i) : 0;
      if (fabs(nb_item(jac, j * n + i) - want) > 1e-14) fail_msg("J[%lld, %lld]", (long long)j, (long long)i);
    }
  }
}

static void test_jacobian_matmul(void **state) {
  nb_ctx *c = *state;
  double xv[6] = {1, 2, 3, 4, 5, 6}, wv[12];
  for (int i = 0; i < 12; i++) wv[i] = 0.5 * i - 2;
  nb_tensor *x = tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), xv), *w = tu_make(c, NB_F64, 2, TU_SHAPE(3, 4), wv);
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_set_jacobian_mode(t, NB_JACOBIAN_MODE_REVERSE); /* its vectorized pass (AUTO: forward) */
  nb_tape_watch(t, x);
  nb_tensor *y = nb_matmul(c, x, w, false, false), *jac;
  assert_int_equal(nb_tape_jacobian(t, y, x, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED); /* BatchMatMulV2's gradient, tiled */
  tu_check_shape(jac, NB_F64, 4, TU_SHAPE(2, 4, 2, 3));
  /* J[i,j,k,l] = [i == k] W[l,j] */
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 2; k++)
        for (int l = 0; l < 3; l++)
          assert_true(nb_item(jac, ((i * 4 + j) * 2 + k) * 3 + l) == (i == k ? wv[l * 4 + j] : 0));
  check_jacobian_rows(c, t, y, x, jac);
  /* with respect to W: J[i,j,l,m] = [j == m] x[i,l] */
  nb_tape_watch(t, w);
  nb_tensor *y2 = nb_matmul(c, x, w, false, false);
  assert_int_equal(nb_tape_jacobian(t, y2, w, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED);
  tu_check_shape(jac, NB_F64, 4, TU_SHAPE(2, 4, 3, 4));
  check_jacobian_rows(c, t, y2, w, jac);
  assert_true(nb_item(jac, ((1 * 4 + 2) * 3 + 1) * 4 + 2) == xv[1 * 3 + 1]);
  nb_tape_end(t);
  /* both operands transposed, the unwatched one broadcast (not tiled) in the batched pass */
  t = nb_tape_begin(c, 1);
  nb_tape_set_jacobian_mode(t, NB_JACOBIAN_MODE_REVERSE); /* its vectorized pass (AUTO: forward) */
  nb_tape_watch(t, x);
  nb_tensor *y3 = nb_matmul(c, w, x, true, true); /* [4, 3] x [3, 2] */
  assert_int_equal(nb_tape_jacobian(t, y3, x, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED);
  tu_check_shape(jac, NB_F64, 4, TU_SHAPE(4, 2, 2, 3));
  check_jacobian_rows(c, t, y3, x, jac);
  nb_tape_end(t);
}

static void test_jacobian_elementwise(void **state) {
  nb_ctx *c = *state;
  double xv[4] = {0.1, -0.4, 0.9, 2};
  nb_tensor *x = vec(c, 4, xv), *jac;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_sin(c, x);
  assert_int_equal(nb_tape_jacobian(t, y, x, &jac), NB_OK);
  double want[16] = {0};
  for (int i = 0; i < 4; i++) want[i * 5] = cos(xv[i]);
  tu_check(jac, NB_F64, 2, TU_SHAPE(4, 4), want, 1e-15);
  check_jacobian_rows(c, t, y, x, jac);
  /* a scalar target: the Jacobian is the gradient; a scalar source: a column */
  nb_tensor *s = nb_sum(c, nb_square(c, x), NULL, 0, false);
  assert_int_equal(nb_tape_jacobian(t, s, x, &jac), NB_OK);
  tu_check(jac, NB_F64, 1, TU_SHAPE(4), TU_VALS(0.2, -0.8, 1.8, 4), 1e-15);
  nb_tensor *a = nb_scalar(c, NB_F64, 2);
  nb_tape_watch(t, a);
  nb_tensor *ya = nb_mul(c, x, a);
  assert_int_equal(nb_tape_jacobian(t, ya, a, &jac), NB_OK);
  tu_check(jac, NB_F64, 1, TU_SHAPE(4), xv, 0);
  /* an unconnected source: zeros of the full shape */
  nb_tensor *u = tu_make(c, NB_F64, 2, TU_SHAPE(2, 1), NULL);
  assert_int_equal(nb_tape_jacobian(t, y, u, &jac), NB_OK);
  tu_check_shape(jac, NB_F64, 3, TU_SHAPE(4, 2, 1));
  for (int i = 0; i < 8; i++) assert_true(nb_item(jac, i) == 0);
  nb_tape_end(t);

  /* float32, on a one-shot tape (one Jacobian, then spent) */
  nb_tensor *xf = tu_make(c, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2));
  t = nb_tape_begin(c, 0);
  nb_tape_watch(t, xf);
  nb_tensor *yf = nb_mul(c, xf, xf);
  assert_int_equal(nb_tape_jacobian(t, yf, xf, &jac), NB_OK);
  tu_check(jac, NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(2, 0, 0, 4), 0);
  assert_int_equal(nb_tape_jacobian(t, yf, xf, &jac), NB_INVALID);
  tu_check_error(c, NB_INVALID, "used already", NULL);
  nb_tape_end(t);

  /* empty targets and sources give empty Jacobians of the full shape */
  t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *none = nb_slice(c, x, TU_SHAPE(1), TU_SHAPE(0), 1);
  assert_int_equal(nb_tape_jacobian(t, none, x, &jac), NB_OK);
  tu_check_shape(jac, NB_F64, 2, TU_SHAPE(0, 4));
  nb_tensor *e = tu_make(c, NB_F64, 2, TU_SHAPE(3, 0), NULL);
  nb_tape_watch(t, e);
  nb_tensor *ye = nb_add(c, nb_sum(c, e, NULL, 0, false), nb_sin(c, x));
  assert_int_equal(nb_tape_jacobian(t, ye, e, &jac), NB_OK);
  tu_check_shape(jac, NB_F64, 3, TU_SHAPE(4, 3, 0));
  nb_tape_end(t);
}

/* A Jacobian through elementwise ops runs as one batched pass and equals the rows of
   one-hot gradients; broadcasting in every direction, shape-only inputs (Add, Sub),
   SelectV2's condition and Pow at two sources. */
static void test_jacobian_vectorized(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 2, TU_SHAPE(3, 1), TU_VALS(0.3, -0.7, 1.1));
  nb_tensor *w = tu_make(c, NB_F64, 1, TU_SHAPE(4), TU_VALS(0.5, 1.5, -2, 0.25));
  nb_tensor *b = nb_scalar(c, NB_F64, 0.2), *jac;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_set_jacobian_mode(t, NB_JACOBIAN_MODE_REVERSE); /* its vectorized pass (AUTO: forward) */
  nb_tensor *src[3] = {x, w, b};
  for (int i = 0; i < 3; i++) nb_tape_watch(t, src[i]);
  nb_tensor *h = nb_tanh(c, nb_add(c, nb_mul(c, x, w), b)); /* [3, 4] */
  nb_tensor *p = nb_pow(c, nb_exp(c, x), nb_sub(c, w, b));  /* [3, 4] */
  nb_tensor *y = nb_select(c, nb_greater(c, h, nb_scalar(c, NB_F64, 0)), nb_sigmoid(c, p), nb_maximum(c, h, p));
  for (int i = 0; i < 3; i++) {
    assert_int_equal(nb_tape_jacobian(t, y, src[i], &jac), NB_OK);
    assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED);
    assert_int_equal(nb_rank(jac), 2 + nb_rank(src[i]));
    check_jacobian_rows(c, t, y, src[i], jac);
  }
  /* a reduction batches too (its axes moved past the seed dim), a negative axis as well */
  nb_tensor *s = nb_sum(c, y, (const int[]){1}, 1, false);
  assert_int_equal(nb_tape_jacobian(t, s, w, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED);
  check_jacobian_rows(c, t, s, w, jac);
  nb_tensor *m = nb_max(c, y, (const int[]){-2}, 1, true);
  assert_int_equal(nb_tape_jacobian(t, m, x, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED);
  check_jacobian_rows(c, t, m, x, jac);
  /* Transpose batches with its permutation extended; Tile runs its gradient once per seed */
  nb_tensor *tr = nb_transpose(c, y, (const int[]){1, 0}, 2);
  assert_int_equal(nb_tape_jacobian(t, tr, w, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED);
  check_jacobian_rows(c, t, tr, w, jac);
  nb_tensor *tl = nb_tile(c, y, TU_SHAPE(1, 2), 2);
  assert_int_equal(nb_tape_jacobian(t, tl, w, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_MIXED);
  check_jacobian_rows(c, t, tl, w, jac);
  nb_tape_end(t);

  /* float32 on a one-shot tape */
  nb_tensor *xf = tu_make(c, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2));
  t = nb_tape_begin(c, 0);
  nb_tape_watch(t, xf);
  assert_int_equal(nb_tape_jacobian(t, nb_mul(c, xf, xf), xf, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED);
  tu_check(jac, NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(2, 0, 0, 4), 0);
  nb_tape_end(t);
}

/* Second order through a batched pass: an outer tape records the tiling, so
   d/dx sum(J) for y = x^3 elementwise is 6x. */
static void test_jacobian_vectorized_nested(void **state) {
  nb_ctx *c = *state;
  double xv[3] = {0.5, -1, 2};
  nb_tensor *x = vec(c, 3, xv), *jac, *g;
  nb_tape *outer = nb_tape_begin(c, 0), *inner = nb_tape_begin(c, 0);
  nb_tape_watch(outer, x);
  nb_tape_watch(inner, x);
  nb_tensor *y = nb_mul(c, nb_square(c, x), x);
  assert_int_equal(nb_tape_jacobian(inner, y, x, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(inner), NB_JACOBIAN_VECTORIZED);
  nb_tape_end(inner);
  assert_int_equal(nb_tape_gradient(outer, &jac, 1, &x, 1, NULL, &g), NB_OK);
  tu_check(g, NB_F64, 1, TU_SHAPE(3), TU_VALS(3, -6, 12), 1e-14);
  nb_tape_end(outer);
}

/* Second order through MatMul's batched rule: y = tanh(x W), J_ik = (1 - y_i^2) W_ki, so
   d/dx_m sum(J) = sum_i -2 y_i (1 - y_i^2) W_mi s_i with s_i = sum_k W_ki. */
static void test_jacobian_vectorized_matmul_second_order(void **state) {
  nb_ctx *c = *state;
  double xv[3] = {0.2, -0.5, 0.7}, wv[9] = {0.3, -1, 0.5, 0.8, 0.1, -0.4, -0.6, 0.9, 0.2};
  nb_tensor *x = tu_make(c, NB_F64, 2, TU_SHAPE(1, 3), xv), *w = tu_make(c, NB_F64, 2, TU_SHAPE(3, 3), wv), *jac, *g;
  nb_tape *outer = nb_tape_begin(c, 0), *inner = nb_tape_begin(c, 0);
  nb_tape_watch(outer, x);
  nb_tape_watch(inner, x);
  nb_tensor *y = nb_tanh(c, nb_matmul(c, x, w, false, false));
  assert_int_equal(nb_tape_jacobian(inner, y, x, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(inner), NB_JACOBIAN_VECTORIZED);
  nb_tape_end(inner);
  assert_int_equal(nb_tape_gradient(outer, &jac, 1, &x, 1, NULL, &g), NB_OK);
  double want[3] = {0};
  for (int i = 0; i < 3; i++) {
    double yi = tanh(xv[0] * wv[i] + xv[1] * wv[3 + i] + xv[2] * wv[6 + i]), si = wv[i] + wv[3 + i] + wv[6 + i];
    for (int m = 0; m < 3; m++) want[m] += -2 * yi * (1 - yi * yi) * wv[m * 3 + i] * si;
  }
  tu_check(g, NB_F64, 2, TU_SHAPE(1, 3), want, 1e-14);
  nb_tape_end(outer);
}

/* Too much memory for a batched pass (8 seeds times a taped 2^22-element tensor), or a
   taped rank-8 tensor (no room for the seed dim): the loop. */
static void test_jacobian_vectorized_fallbacks(void **state) {
  nb_ctx *c = *state;
  nb_tensor *big = nb_tensor_from(c, NB_F32, 1, TU_SHAPE(1 << 22), NULL);
  nb_tensor *x = tu_make(c, NB_F32, 1, TU_SHAPE(8), NULL), *jac;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, big);
  nb_tape_watch(t, x);
  assert_non_null(nb_sin(c, big));
  assert_int_equal(nb_tape_jacobian(t, nb_sin(c, x), x, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_LOOP);
  tu_check_shape(jac, NB_F32, 2, TU_SHAPE(8, 8));
  for (int i = 0; i < 64; i++) assert_true(nb_item(jac, i) == (i % 9 == 0));
  nb_tape_end(t);

  nb_tensor *x8 = tu_make(c, NB_F64, 8, TU_SHAPE(1, 1, 1, 1, 1, 1, 1, 2), TU_VALS(0.5, 2));
  t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x8);
  nb_tensor *y1 = nb_sum(c, nb_square(c, x8), NULL, 0, false);
  assert_int_equal(nb_tape_jacobian(t, y1, x8, &jac), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_LOOP);
  tu_check(jac, NB_F64, 8, TU_SHAPE(1, 1, 1, 1, 1, 1, 1, 2), TU_VALS(1, 4), 0);
  nb_tape_end(t);
  assert_int_equal(nb_tape_jacobian_path(NULL), NB_JACOBIAN_LOOP);
  nb_tape_end(t);
}

/* batch_jacobian[b, i, j] is the full Jacobian's block J[b, i, b, j] when row b of the
   target depends on row b of the source only. */
static void check_batch_blocks(nb_tape *t, nb_tensor *y, nb_tensor *x, const nb_tensor *bj) {
  nb_tensor *full;
  assert_int_equal(nb_tape_jacobian(t, y, x, &full), NB_OK);
  int64_t b = nb_shape(y)[0], per_y = nb_num_elements(y) / b, per_x = nb_num_elements(x) / b;
  assert_int_equal(nb_num_elements(bj), b * per_y * per_x);
  for (int64_t r = 0; r < b; r++)
    for (int64_t i = 0; i < per_y; i++)
      for (int64_t j = 0; j < per_x; j++) {
        double want = nb_item(full, ((r * per_y + i) * b + r) * per_x + j);
        if (fabs(nb_item(bj, (r * per_y + i) * per_x + j) - want) > 1e-14)
          fail_msg("B[%lld, %lld, %lld]", (long long)r, (long long)i, (long long)j);
      }
}

/* Per-example Jacobians: x [3, 2] through tanh(x W) with W [2, 4] and through a row sum
   (one batched pass, all ops batched), and through a Tile (its gradient once per seed). */
static void test_batch_jacobian(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(0.1, -0.3, 0.5, 0.7, -0.9, 0.2));
  nb_tensor *w = tu_make(c, NB_F64, 2, TU_SHAPE(2, 4), TU_VALS(0.3, -1, 0.5, 0.8, 0.1, -0.4, -0.6, 0.9)), *bj;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_set_jacobian_mode(t, NB_JACOBIAN_MODE_REVERSE); /* its vectorized pass (AUTO: forward) */
  nb_tape_watch(t, x);
  nb_tensor *y = nb_tanh(c, nb_matmul(c, x, w, false, false));
  assert_int_equal(nb_tape_batch_jacobian(t, y, x, &bj), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED);
  tu_check_shape(bj, NB_F64, 3, TU_SHAPE(3, 4, 2));
  check_batch_blocks(t, y, x, bj);
  nb_tensor *s = nb_sum(c, nb_square(c, x), (const int[]){1}, 1, true); /* [3, 1] */
  assert_int_equal(nb_tape_batch_jacobian(t, s, x, &bj), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED);
  tu_check(bj, NB_F64, 3, TU_SHAPE(3, 1, 2), TU_VALS(0.2, -0.6, 1, 1.4, -1.8, 0.4), 1e-15);
  nb_tensor *r = nb_transpose(c, nb_reshape(c, nb_square(c, x), TU_SHAPE(3, 2, 1), 3), (const int[]){0, 2, 1}, 3);
  assert_int_equal(nb_tape_batch_jacobian(t, r, x, &bj), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_VECTORIZED);
  check_batch_blocks(t, r, x, bj);
  nb_tensor *tl = nb_tile(c, nb_square(c, x), TU_SHAPE(1, 2), 2);
  assert_int_equal(nb_tape_batch_jacobian(t, tl, x, &bj), NB_OK);
  assert_int_equal(nb_tape_jacobian_path(t), NB_JACOBIAN_MIXED);
  check_batch_blocks(t, tl, x, bj);
  /* a batch of one, and an empty batch */
  nb_tensor *x1 = tu_make(c, NB_F64, 2, TU_SHAPE(1, 2), TU_VALS(2, 3));
  nb_tape_watch(t, x1);
  assert_int_equal(nb_tape_batch_jacobian(t, nb_mul(c, x1, x1), x1, &bj), NB_OK);
  tu_check(bj, NB_F64, 3, TU_SHAPE(1, 2, 2), TU_VALS(4, 0, 0, 6), 0);
  nb_tensor *x0 = nb_tensor_from(c, NB_F64, 2, TU_SHAPE(0, 2), NULL);
  nb_tape_watch(t, x0);
  assert_int_equal(nb_tape_batch_jacobian(t, nb_sin(c, x0), x0, &bj), NB_OK);
  tu_check_shape(bj, NB_F64, 3, TU_SHAPE(0, 2, 2));
  /* batch dims that differ, and a scalar */
  assert_int_equal(nb_tape_batch_jacobian(t, y, x1, &bj), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "nb_tape_batch_jacobian", "same first (batch) dim");
  assert_int_equal(nb_tape_batch_jacobian(t, nb_scalar(c, NB_F64, 1), x, &bj), NB_SHAPE);
  nb_clear_error(c);
  nb_tape_end(t);
}

static void test_jacobian_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 4, TU_SHAPE(1, 2, 1, 1), TU_VALS(1, 2)), *jac = x;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_reshape(c, x, TU_SHAPE(1, 1, 2, 1, 1), 5);
  assert_int_equal(nb_tape_jacobian(t, y, x, &jac), NB_SHAPE);
  assert_null(jac);
  tu_check_error(c, NB_SHAPE, "Jacobian's rank 9 exceeds 8", NULL);
  nb_tensor *y4 = nb_reshape(c, x, TU_SHAPE(2, 1, 1, 1), 4); /* rank 8 is fine */
  assert_int_equal(nb_tape_jacobian(t, y4, x, &jac), NB_OK);
  tu_check(jac, NB_F64, 8, TU_SHAPE(2, 1, 1, 1, 1, 2, 1, 1), TU_VALS(1, 0, 0, 1), 0);
  nb_tensor *yi = nb_cast(c, x, NB_I32);
  assert_int_equal(nb_tape_jacobian(t, yi, x, &jac), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "nb_tape_jacobian", "must be float, got int32 and float64");
  assert_int_equal(nb_tape_jacobian(t, x, yi, &jac), NB_DTYPE); /* an int source: no Jacobian (TF: None) */
  tu_check_error(c, NB_DTYPE, "must be float, got float64 and int32", NULL);
  assert_int_equal(nb_tape_jacobian(t, NULL, x, &jac), NB_INVALID);
  tu_check_error(c, NB_INVALID, "must be concrete", NULL);
  assert_int_equal(nb_tape_jacobian(t, y4, NULL, &jac), NB_INVALID);
  tu_check_error(c, NB_INVALID, "must be concrete", NULL);
  assert_int_equal(nb_tape_jacobian(t, y4, x, NULL), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_tape_jacobian: out is NULL", NULL);
  assert_int_equal(nb_tape_jacobian(NULL, y4, x, &jac), NB_INVALID);
  nb_set_error(c, NB_IO, "earlier failure");
  assert_int_equal(nb_tape_jacobian(t, y4, x, &jac), NB_IO);
  assert_null(jac);
  tu_check_error(c, NB_IO, "earlier failure", NULL);
  nb_tape_end(t);
}

/* ---- ops on the tape against nb_gradients of the same function in a graph ------------------- */

typedef nb_tensor *(*tt_fn)(nb_ctx *c, nb_tensor *x);

typedef struct tt_case {
  const char *name;
  tt_fn f;
  int rank;
  int64_t shape[4];
} tt_case;

static nb_tensor *f_bcast_add_rows(nb_ctx *c, nb_tensor *x) { /* x [2,3] + b [3] */
  nb_tensor *b = vec(c, 3, TU_VALS(0.5, -1, 2));
  nb_tensor *s = nb_add(c, x, b);
  return nb_sum(c, nb_mul(c, nb_tanh(c, s), s), NULL, 0, false);
}

static nb_tensor *f_bcast_add_vector(nb_ctx *c, nb_tensor *x) { /* A [2,3] + x [3] */
  nb_tensor *a = tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, -1, -2, -3));
  nb_tensor *s = nb_add(c, a, x);
  return nb_mul(c, nb_sin(c, s), a);
}

static nb_tensor *f_mul_scalar(nb_ctx *c, nb_tensor *x) { /* x [] scales a matrix */
  nb_tensor *a = tu_make(c, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(1, -2, 3, 0.5));
  return nb_exp(c, nb_mul(c, nb_mul(c, a, x), x));
}

static nb_tensor *f_reductions(nb_ctx *c, nb_tensor *x) {
  int ax1[1] = {1}, ax0[1] = {-2};
  nb_tensor *m = nb_mean(c, x, ax1, 1, true);
  nb_tensor *mx = nb_max(c, nb_square(c, x), ax0, 1, false);
  nb_tensor *p = nb_prod(c, x, ax1, 1, false);
  nb_tensor *centered = nb_sub(c, x, m);
  return nb_add(c, nb_sum(c, nb_square(c, centered), NULL, 0, false),
                nb_add(c, nb_sum(c, mx, NULL, 0, false), nb_sum(c, p, NULL, 0, false)));
}

static nb_tensor *f_matmul(nb_ctx *c, nb_tensor *x) { /* x [2,3] */
  nb_tensor *w = tu_make(c, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(0.1, -0.2, 0.3, 0.4, -0.5, 0.6));
  nb_tensor *h = nb_tanh(c, nb_matmul(c, x, w, false, false));
  return nb_matmul(c, h, x, true, false); /* x appears on both sides */
}

static nb_tensor *f_shapes(nb_ctx *c, nb_tensor *x) { /* x [2,3] */
  int perm[2] = {1, 0};
  nb_tensor *r = nb_reshape(c, x, TU_SHAPE(3, 2), 2);
  nb_tensor *tr = nb_transpose(c, x, perm, 2);
  nb_tensor *parts[2] = {nb_square(c, r), tr};
  nb_tensor *cat = nb_concat(c, parts, 2, -1); /* [3,4] */
  nb_tensor *idx = tu_make(c, NB_I32, 1, TU_SHAPE(4), TU_VALS(2, 0, 2, 1));
  nb_tensor *gat = nb_gather(c, cat, idx, 0, 0); /* [4,4], row 2 twice */
  nb_slice_masks m = {0};
  nb_tensor *sl = nb_strided_slice(c, gat, TU_SHAPE(0, 3), TU_SHAPE(4, 0), TU_SHAPE(2, -1), 2, &m); /* [2,3] */
  return nb_mul(c, nb_sin(c, sl), x);
}

static nb_tensor *f_unpack_some(nb_ctx *c, nb_tensor *x) { /* x [3,2]: only outputs 0 and 2 */
  nb_tensor *parts[3];
  if (nb_unpack(c, x, 0, 3, parts)) return NULL;
  return nb_mul(c, nb_exp(c, parts[0]), parts[2]);
}

static nb_tensor *f_mixed(nb_ctx *c, nb_tensor *x) { /* x [2,3]; ints, select and a reused x */
  nb_tensor *pos = nb_greater(c, x, nb_scalar(c, NB_F64, 0));
  nb_tensor *sel = nb_select(c, pos, nb_square(c, x), nb_neg(c, x));
  nb_tensor *xs[3] = {sel, x, nb_sigmoid(c, x)};
  nb_tensor *sum = nb_add_n(c, xs, 3);
  int ax[1] = {0};
  return nb_sum(c, nb_mul(c, sum, nb_cast(c, nb_expand_dims(c, nb_argmax(c, x, 1, NB_I64), 1), NB_F64)), ax, 1, false);
}

static const tt_case tt_cases[] = {
    {"broadcast Add [2,3]+[3] (the matrix)", f_bcast_add_rows, 2, {2, 3}},
    {"broadcast Add [2,3]+[3] (the vector)", f_bcast_add_vector, 1, {3}},
    {"Mul by a scalar", f_mul_scalar, 0, {0}},
    {"Mean/Max/Prod/Sum", f_reductions, 2, {2, 3}},
    {"MatMul", f_matmul, 2, {2, 3}},
    {"Reshape/Transpose/Concat/Gather/StridedSlice", f_shapes, 2, {2, 3}},
    {"Unpack, some outputs", f_unpack_some, 2, {3, 2}},
    {"Select/AddN/ArgMax", f_mixed, 2, {2, 3}},
};

/* The tape's gradient (weighted by ones) of case k at x against the graph's. */
static void check_case_against_graph(nb_ctx *c, const tt_case *k) {
  double xv[8];
  int64_t n = gu_count(k->rank, k->shape);
  for (int64_t i = 0; i < n; i++) xv[i] = gu_x_value(i);
  nb_tensor *x = tu_make(c, NB_F64, k->rank, k->shape, xv);

  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_tensor *y = k->f(c, x), *dx = NULL;
  if (!y || nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx)) fail_msg("%s: %s", k->name, nb_error(c));
  nb_tape_end(t);
  assert_non_null(dx);

  gu_fixture g;
  assert_true(gu_open(&g));
  nb_tensor *ph = nb_placeholder(g.c, NB_F64, k->rank, k->shape, NULL);
  nb_tensor *gy = k->f(g.c, ph), *gdx = NULL;
  if (!gy || nb_gradients(g.c, &gy, 1, &ph, 1, NULL, &gdx)) fail_msg("%s (graph): %s", k->name, nb_error(g.c));
  nb_tensor *want_y = gu_run1(&g, ph, x, gy), *want = gu_run1(&g, ph, x, gdx);
  tu_check_shape(want_y, NB_F64, nb_rank(y), nb_shape(y));
  tu_check_shape(dx, NB_F64, k->rank, k->shape);
  for (int64_t i = 0; i < nb_num_elements(y); i++)
    if (fabs(nb_item(y, i) - nb_item(want_y, i)) > 1e-12) fail_msg("%s: y[%lld]", k->name, (long long)i);
  for (int64_t i = 0; i < n; i++)
    if (fabs(nb_item(dx, i) - nb_item(want, i)) > 1e-12 * (1 + fabs(nb_item(want, i))))
      fail_msg("%s: dx[%lld]: tape %.15g, graph %.15g", k->name, (long long)i, nb_item(dx, i), nb_item(want, i));
  nb_tensor_free(want_y);
  nb_tensor_free(want);
  gu_close(&g);
}

static void test_ops_against_graph(void **state) {
  nb_ctx *c = *state;
  for (size_t i = 0; i < sizeof tt_cases / sizeof *tt_cases; i++) {
    nb_scope_begin(c);
    check_case_against_graph(c, &tt_cases[i]);
    nb_scope_end(c, NULL, 0);
  }
  assert_int_equal(nb_status(c), NB_OK);
}

/* Hand-checked broadcasting: both sides of Add [2,3] + [3] and Mul by a scalar. */
static void test_broadcast_by_hand(void **state) {
  nb_ctx *c = *state;
  nb_tensor *a = tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
  nb_tensor *b = vec(c, 3, TU_VALS(10, 20, 30)), *s = nb_scalar(c, NB_F64, 3);
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, a);
  nb_tape_watch(t, b);
  nb_tape_watch(t, s);
  nb_tensor *y = nb_mul(c, nb_add(c, a, b), s), *xs[3] = {a, b, s}, *dx[3];
  assert_int_equal(nb_tape_gradient(t, &y, 1, xs, 3, NULL, dx), NB_OK);
  tu_check(dx[0], NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(3, 3, 3, 3, 3, 3), 0);
  tu_check(dx[1], NB_F64, 1, TU_SHAPE(3), TU_VALS(6, 6, 6), 0);
  tu_check(dx[2], NB_F64, 0, NULL, TU_VALS(21 + 2 * 60), 0); /* sum(a + b) */
  nb_tape_end(t);
}

/* ---- results and scopes ------------------------------------------------------------------ */

/* Gradients made inside a scope go with it; handles return to where they were. */
static void test_results_in_scope(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 3, TU_VALS(1, 2, 3));
  uint32_t before = c->nhandles;
  nb_scope_begin(c);
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_sum(c, nb_exp(c, x), NULL, 0, false);
  nb_tensor *dx = grad1(c, t, y, x);
  nb_tape_end(t);
  nb_tensor *kept = nb_mul(c, dx, nb_scalar(c, NB_F64, 2));
  nb_scope_end(c, &kept, 1);
  assert_int_equal(c->nhandles, before + 1);
  tu_check_vals(kept, TU_VALS(2 * exp(1.0), 2 * exp(2.0), 2 * exp(3.0)), 1e-15);
  nb_tensor_free(kept);
}

/* ---- memory: a training loop ---------------------------------------------------------------- */

/* ASan's quarantine keeps freed blocks resident, so RSS is only checked without it. */
#if defined(__SANITIZE_ADDRESS__)
#define TT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TT_ASAN 1
#endif
#endif
#ifndef TT_ASAN
#define TT_ASAN 0
#endif

static long rss_pages(void) {
  long size = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = 0;
  fclose(f);
  return resident;
}

/* One step of least squares on a fresh one-shot tape: w -= lr d/dw mean((X w - y)^2). */
static nb_tensor *train_step(nb_ctx *c, nb_tensor *w, nb_tensor *xd, nb_tensor *yd, nb_tensor *lr, double *loss) {
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, w);
  nb_tensor *err = nb_sub(c, nb_matmul(c, xd, w, false, false), yd);
  nb_tensor *l = nb_mean(c, nb_square(c, err), NULL, 0, false), *dw = NULL;
  if (nb_tape_gradient(t, &l, 1, &w, 1, NULL, &dw) || !dw) fail_msg("train step: %s", nb_error(c));
  nb_tape_end(t);
  *loss = nb_item(l, 0);
  return nb_sub(c, w, nb_mul(c, dw, lr));
}

/* X [8,4] and y = X w* with w* = (1, -2, 0.5, 3). */
static void make_data(nb_ctx *c, nb_tensor **xd, nb_tensor **yd, nb_tensor **w) {
  double xv[32], yv[8], ws[4] = {1, -2, 0.5, 3};
  for (int i = 0; i < 8; i++) {
    yv[i] = 0;
    for (int j = 0; j < 4; j++) {
      xv[i * 4 + j] = sin(1.3 * i * (j + 1) + 0.1 * j); /* full column rank */
      yv[i] += xv[i * 4 + j] * ws[j];
    }
  }
  *xd = tu_make(c, NB_F64, 2, TU_SHAPE(8, 4), xv);
  *yd = tu_make(c, NB_F64, 2, TU_SHAPE(8, 1), yv);
  *w = tu_make(c, NB_F64, 2, TU_SHAPE(4, 1), NULL);
}

static void test_training_loop_flat_memory(void **state) {
  nb_ctx *c = *state;
  nb_ctx_set_threads(c, 1);
  nb_tensor *xd, *yd, *w, *lr = nb_scalar(c, NB_F64, 0.1);
  make_data(c, &xd, &yd, &w);
  uint32_t handles0 = c->nhandles;
  size_t cached = 0;
  long rss = 0, page = sysconf(_SC_PAGESIZE);
  double loss = 0, first_loss = 0;
  for (int step = 0; step < 20000; step++) {
    nb_scope_begin(c);
    nb_tensor *next = train_step(c, w, xd, yd, lr, &loss);
    nb_scope_end(c, &next, 1);
    nb_tensor_free(w);
    w = next;
    if (step == 0) first_loss = loss;
    if (step == 2000) {
      cached = c->pool.cached_bytes;
      rss = rss_pages();
    }
    if (step > 2000 && step % 1000 == 0) {
      assert_true(c->nhandles <= handles0 + 130); /* holes are squeezed out in batches */
      assert_true(c->pool.cached_bytes <= cached + 4096);
      assert_true(c->ntapes == 0 && c->record == NULL);
    }
  }
  assert_int_equal(nb_status(c), NB_OK);
  assert_true(c->handles_cap <= 512);
  long grown = (rss_pages() - rss) * page;
  if (!TT_ASAN && grown > (1 << 20)) fail_msg("RSS grew by %ld bytes between steps 2000 and 20000", grown);
  assert_true(loss < 1e-20 && first_loss > 1);
  tu_check_vals(w, TU_VALS(1, -2, 0.5, 3), 1e-9);
}

/* ---- threads ------------------------------------------------------------------------------ */

#define TT_THREAD_STEPS 1000

typedef struct tt_job {
  double seed;
  double w[4];
  double loss;
  nb_code status;
} tt_job;

/* TT_THREAD_STEPS training steps on a context of its own, with a nested-tape term. */
static void *run_job(void *arg) {
  tt_job *j = arg;
  nb_ctx *c = nb_eager_new();
  if (!c) return NULL;
  nb_ctx_set_threads(c, 1);
  nb_tensor *xd, *yd, *w, *lr = nb_scalar(c, NB_F64, 0.05);
  make_data(c, &xd, &yd, &w);
  nb_tensor_free(w);
  w = tu_make(c, NB_F64, 2, TU_SHAPE(4, 1), TU_VALS(j->seed, -j->seed, 2 * j->seed, 0));
  for (int step = 0; step < TT_THREAD_STEPS && !nb_status(c); step++) {
    nb_scope_begin(c);
    nb_tensor *next = train_step(c, w, xd, yd, lr, &j->loss);
    /* plus a second-order term: w += 1e-3 d2/dw2 sum(sin(w)) = -1e-3 sin(w) */
    nb_tape *outer = nb_tape_begin(c, 0), *inner = nb_tape_begin(c, 0);
    nb_tape_watch(outer, next);
    nb_tape_watch(inner, next);
    nb_tensor *s = nb_sum(c, nb_sin(c, next), NULL, 0, false), *g = NULL, *h = NULL;
    nb_tape_gradient(inner, &s, 1, &next, 1, NULL, &g);
    nb_tape_end(inner);
    nb_tape_gradient(outer, &g, 1, &next, 1, NULL, &h);
    nb_tape_end(outer);
    next = nb_add(c, next, nb_mul(c, h, nb_scalar(c, NB_F64, 1e-3)));
    nb_scope_end(c, &next, 1);
    nb_tensor_free(w);
    w = next;
  }
  j->status = nb_status(c);
  if (!j->status) nb_read(w, j->w, sizeof j->w);
  nb_ctx_free(c);
  return NULL;
}

static void test_threads(void **state) {
  (void)state;
  tt_job ref[2] = {{.seed = 0.25}, {.seed = -1.5}}, par[2] = {{.seed = 0.25}, {.seed = -1.5}};
  for (int i = 0; i < 2; i++) {
    run_job(&ref[i]);
    assert_int_equal(ref[i].status, NB_OK);
  }
  assert_true(ref[0].w[0] != ref[1].w[0]);
  pthread_t th[2];
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&th[i], NULL, run_job, &par[i]), 0);
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(par[i].status, NB_OK);
    for (int k = 0; k < 4; k++)
      if (fabs(par[i].w[k] - ref[i].w[k]) > 1e-12)
        fail_msg("thread %d w[%d]: %.17g vs %.17g", i, k, par[i].w[k], ref[i].w[k]);
    assert_true(fabs(par[i].loss - ref[i].loss) <= 1e-12);
  }
}

/* ---- errors ------------------------------------------------------------------------------- */

static void test_graph_context_errors(void **state) {
  gu_fixture *f = *state;
  assert_null(nb_tape_begin(f->c, 0));
  tu_check_error(f->c, NB_INVALID, "nb_tape_begin", "graph contexts use nb_gradients");
  nb_tensor *ph = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), NULL);
  nb_tape *t = nb_tape_begin(f->e, 1);
  nb_tape_watch(t, ph);
  tu_check_error(f->e, NB_INVALID, "nb_tape_watch", "only concrete");
  nb_tensor *x = vec(f->e, 2, TU_VALS(1, 2)), *dx = x;
  nb_tape_watch(t, x);
  nb_tensor *y = nb_square(f->e, x);
  assert_int_equal(nb_tape_gradient(t, &ph, 1, &x, 1, NULL, &dx), NB_INVALID); /* symbolic target */
  assert_null(dx);
  tu_check_error(f->e, NB_INVALID, "targets[0] is not a concrete tensor", NULL);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &ph, 1, NULL, &dx), NB_INVALID); /* symbolic source */
  tu_check_error(f->e, NB_INVALID, "sources[0] is not a concrete tensor", NULL);
  nb_tensor *og = ph;
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, &og, &dx), NB_INVALID);
  tu_check_error(f->e, NB_INVALID, "output_grads[0] is not a concrete tensor", NULL);
  nb_tape_end(t);
  assert_null(nb_tape_begin(NULL, 0));
}

static void test_gradient_argument_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 2, TU_VALS(1, 2)), *dx[2] = {x, x};
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_square(c, x), *none = NULL;
  assert_int_equal(nb_tape_gradient(t, NULL, 1, &x, 1, NULL, dx), NB_INVALID);
  assert_null(dx[0]);
  tu_check_error(c, NB_INVALID, "targets is NULL or has negative length", NULL);
  assert_int_equal(nb_tape_gradient(t, &y, -1, &x, 1, NULL, dx), NB_INVALID);
  tu_check_error(c, NB_INVALID, "targets is NULL or has negative length", NULL);
  assert_int_equal(nb_tape_gradient(t, &y, 1, NULL, 1, NULL, dx), NB_INVALID);
  tu_check_error(c, NB_INVALID, "sources is NULL or has negative length", NULL);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, -2, NULL, dx), NB_INVALID);
  tu_check_error(c, NB_INVALID, "sources is NULL or has negative length", NULL);
  assert_int_equal(nb_tape_gradient(t, &none, 1, &x, 1, NULL, dx), NB_INVALID);
  tu_check_error(c, NB_INVALID, "targets[0] is not a concrete tensor", NULL);
  nb_tensor *srcs[2] = {x, NULL};
  dx[1] = x;
  assert_int_equal(nb_tape_gradient(t, &y, 1, srcs, 2, NULL, dx), NB_INVALID);
  assert_null(dx[0]);
  assert_null(dx[1]);
  tu_check_error(c, NB_INVALID, "sources[1] is not a concrete tensor", NULL);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, NULL), NB_INVALID);
  tu_check_error(c, NB_INVALID, "out is NULL", NULL);
  assert_int_equal(nb_tape_gradient(NULL, &y, 1, &x, 1, NULL, dx), NB_INVALID);
  assert_int_equal(nb_status(c), NB_OK);
  /* a mismatched output_grads shape fails in the gradient ops, naming them */
  nb_tensor *bad = vec(c, 3, TU_VALS(1, 2, 3));
  assert_int_not_equal(nb_tape_gradient(t, &y, 1, &x, 1, &bad, dx), NB_OK);
  assert_null(dx[0]);
  assert_int_not_equal(nb_status(c), NB_OK);
  nb_clear_error(c);
  /* the tape still works afterwards */
  tu_check_vals(grad1(c, t, y, x), TU_VALS(2, 4), 0);
  /* sticky: after an error in the context, nothing runs and the first message stays */
  nb_set_error(c, NB_SHAPE, "first failure");
  dx[0] = x;
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, dx), NB_SHAPE);
  assert_null(dx[0]);
  tu_check_error(c, NB_SHAPE, "first failure", NULL);
  nb_tape_end(t);
}

static void test_tape_argument_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = vec(c, 2, TU_VALS(1, 2));
  /* NULL tapes and tensors are ignored */
  nb_tape_watch(NULL, x);
  nb_tape_stop_recording(NULL);
  nb_tape_resume_recording(NULL);
  nb_tape_set_unconnected_zero(NULL, true);
  nb_tape_end(NULL);
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, NULL);
  assert_int_equal(nb_status(c), NB_OK);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_square(c, x);
  nb_tape_end(t);
  nb_tape_end(t); /* a second end does nothing */
  assert_int_equal(c->ntapes, 0);
  assert_int_equal(nb_status(c), NB_OK);
  /* a new tape does not see the ended one's records */
  nb_tape *u = nb_tape_begin(c, 0);
  nb_tensor *dx = x;
  nb_tensor *y2 = nb_add(c, y, x);
  assert_int_equal(nb_tape_gradient(u, &y2, 1, &x, 1, NULL, &dx), NB_OK);
  assert_null(dx);
  nb_tape_end(u);
  /* ending an outer tape before an inner one keeps the inner one working */
  nb_tape *outer = nb_tape_begin(c, 0), *inner = nb_tape_begin(c, 0);
  nb_tape_watch(outer, x);
  nb_tape_watch(inner, x);
  nb_tape_end(outer);
  y = nb_mul(c, x, x);
  tu_check_vals(grad1(c, inner, y, x), TU_VALS(2, 4), 0);
  nb_tape_end(inner);
  /* under a sticky error, watch and begin do nothing */
  t = nb_tape_begin(c, 0);
  nb_set_error(c, NB_IO, "stuck");
  nb_tape_watch(t, x);
  assert_null(nb_tape_begin(c, 0));
  tu_check_error(c, NB_IO, "stuck", NULL);
  y = nb_square(c, x);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_OK);
  assert_null(dx);
  nb_tape_end(t);
}

/* An ended tape ignores watch (its memory is reused by the next tape), and a failed call
   with bad arguments leaves a one-shot tape usable. */
static void test_ended_and_bad_arguments(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = nb_scalar(c, NB_F64, 3), *dx = NULL, *missing = NULL;
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_end(t);
  nb_tape_watch(t, x);
  nb_tape *t2 = nb_tape_begin(c, 0);
  nb_tensor *y = nb_square(c, x);
  assert_int_equal(nb_tape_gradient(t2, &y, 1, &x, 1, NULL, &dx), NB_OK);
  assert_null(dx); /* x was never watched by a live tape */
  nb_tape_end(t2);
  t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  y = nb_square(c, x);
  assert_int_equal(nb_tape_gradient(t, &missing, 1, &x, 1, NULL, &dx), NB_INVALID);
  nb_clear_error(c);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_OK);
  tu_check(dx, NB_F64, 0, NULL, TU_VALS(6), 0);
  nb_tape_end(t);
}

/* A source listed twice gets two handles; output_grads must match its target. */
static void test_duplicate_sources_and_seed_shape(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = nb_scalar(c, NB_F64, 3), *dx[2], *src[2] = {x, x};
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_square(c, x);
  assert_int_equal(nb_tape_gradient(t, &y, 1, src, 2, NULL, dx), NB_OK);
  assert_ptr_not_equal(dx[0], dx[1]);
  nb_tensor_free(dx[0]);
  nb_tensor *other = nb_scalar(c, NB_F64, 42); /* may reuse dx[0]'s handle */
  nb_tensor_free(dx[1]);
  tu_check(other, NB_F64, 0, NULL, TU_VALS(42), 0);
  nb_tensor *bad = tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 1));
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, &bad, dx), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "output_grads[0] is float64 [2], target 0 is float64 []", NULL);
  nb_tape_end(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_basic, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_matmul_terms_summed_in_place, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_ready_hook, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_ended_and_bad_arguments, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_duplicate_sources_and_seed_shape, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_several_targets_and_sources, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_output_grads, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_source_is_target, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_unconnected_int_unwatched, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_stop_gradient_on_tape, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_persistent, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_one_shot, tu_setup, tu_teardown),
      cmocka_unit_test(test_free_with_active_tapes),
      cmocka_unit_test_setup_teardown(test_stop_resume, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_watched_variables, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_reset, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_misuse_in_backward_pass, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_second_order, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_hessian_vector_product, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_third_order, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_persistent_higher_orders, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_backward_unrecorded, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_nested_partial_watch, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_jacobian_matmul, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_jacobian_vectorized, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_jacobian_vectorized_nested, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_batch_jacobian, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_jacobian_vectorized_matmul_second_order, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_jacobian_vectorized_fallbacks, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_jacobian_elementwise, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_jacobian_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_ops_against_graph, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_broadcast_by_hand, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_results_in_scope, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_training_loop_flat_memory, tu_setup, tu_teardown),
      cmocka_unit_test(test_threads),
      cmocka_unit_test_setup_teardown(test_graph_context_errors, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_gradient_argument_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_tape_argument_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_many_inputs, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests_name("tape", tests, NULL, NULL);
}
