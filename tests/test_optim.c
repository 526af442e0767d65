/* Optimizers against the formulas, eager and graph: SGD, Momentum (and Nesterov), Adam,
   AdamW, RMSProp (plain and centered) over three steps in float64, each checked against a
   reference written here from Keras's and TF's documented update rules (in their textbook
   form: m = b1 m + (1 - b1) g, not the kernels' m += (g - m)(1 - b1)); slots; schedules;
   clipping by global norm; errors; and linear regression trained to a small loss. */
#include "graphutil.h"

#include <stdio.h>

#include "../src/core/core.h"

#define N 3
#define STEPS 3

static const double w0[N] = {1, -2, 0.5};
static const double grads[STEPS][N] = {{0.5, -1, 2}, {0.1, 0.3, -0.7}, {-0.4, 0.2, 1.5}};

/* ---- references -------------------------------------------------------------------------- */

typedef struct ref_state {
  double w[N], a[N], b[N], c[N]; /* the variable and up to three slots */
  int t;                         /* steps done */
} ref_state;

typedef struct opt_case {
  const char *name;
  nb_optimizer *(*make)(void);
  void (*step)(ref_state *s, const double *g);
} opt_case;

static const double LR = 0.1, MU = 0.9, B1 = 0.9, B2 = 0.999, EPS = 1e-7, RHO = 0.9, WD = 0.05;

static void sgd_ref(ref_state *s, const double *g) {
  for (int i = 0; i < N; i++) s->w[i] = s->w[i] - LR * g[i];
}
static void momentum_ref(ref_state *s, const double *g) {
  for (int i = 0; i < N; i++) {
    s->a[i] = MU * s->a[i] + g[i];
    s->w[i] = s->w[i] - LR * s->a[i];
  }
}
static void nesterov_ref(ref_state *s, const double *g) {
  for (int i = 0; i < N; i++) {
    s->a[i] = MU * s->a[i] + g[i];
    s->w[i] = s->w[i] - LR * g[i] - LR * MU * s->a[i];
  }
}
static void adam_ref_wd(ref_state *s, const double *g, double wd) {
  int t = ++s->t;
  double lr_t = LR * sqrt(1 - pow(B2, t)) / (1 - pow(B1, t));
  for (int i = 0; i < N; i++) {
    s->w[i] = s->w[i] - s->w[i] * wd * LR;
    s->a[i] = B1 * s->a[i] + (1 - B1) * g[i];
    s->b[i] = B2 * s->b[i] + (1 - B2) * g[i] * g[i];
    s->w[i] = s->w[i] - lr_t * s->a[i] / (sqrt(s->b[i]) + EPS);
  }
}
static void adam_ref(ref_state *s, const double *g) { adam_ref_wd(s, g, 0); }
static void adamw_ref(ref_state *s, const double *g) { adam_ref_wd(s, g, WD); }
static void rmsprop_ref(ref_state *s, const double *g) {
  for (int i = 0; i < N; i++) {
    s->a[i] = RHO * s->a[i] + (1 - RHO) * g[i] * g[i];
    s->b[i] = MU * s->b[i] + LR * g[i] / sqrt(s->a[i] + EPS);
    s->w[i] = s->w[i] - s->b[i];
  }
}
static void centered_ref(ref_state *s, const double *g) {
  for (int i = 0; i < N; i++) {
    s->c[i] = RHO * s->c[i] + (1 - RHO) * g[i];
    s->a[i] = RHO * s->a[i] + (1 - RHO) * g[i] * g[i];
    s->b[i] = MU * s->b[i] + LR * g[i] / sqrt(s->a[i] - s->c[i] * s->c[i] + EPS);
    s->w[i] = s->w[i] - s->b[i];
  }
}

static nb_optimizer *make_sgd(void) { return nb_sgd_new(LR); }
static nb_optimizer *make_momentum(void) { return nb_momentum_new(LR, MU, false); }
static nb_optimizer *make_nesterov(void) { return nb_momentum_new(LR, MU, true); }
static nb_optimizer *make_adam(void) { return nb_adam_new(LR, B1, B2, EPS); }
static nb_optimizer *make_adamw(void) { return nb_adamw_new(LR, B1, B2, EPS, WD); }
static nb_optimizer *make_rmsprop(void) { return nb_rmsprop_new(LR, RHO, MU, EPS, false); }
static nb_optimizer *make_centered(void) { return nb_rmsprop_new(LR, RHO, MU, EPS, true); }

static const opt_case cases[] = {
    {"sgd", make_sgd, sgd_ref},
    {"momentum", make_momentum, momentum_ref},
    {"nesterov", make_nesterov, nesterov_ref},
    {"adam", make_adam, adam_ref},
    {"adamw", make_adamw, adamw_ref},
    {"rmsprop", make_rmsprop, rmsprop_ref},
    {"centered_rmsprop", make_centered, centered_ref},
};

static void check_close(const char *what, const double *got, const double *want, int n, double tol) {
  for (int i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i]))))
      fail_msg("%s element %d: got %.17g, want %.17g", what, i, got[i], want[i]);
}

/* ---- every optimizer: eager and graph against the reference -------------------------------- */

static void test_against_formulas(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const opt_case *oc = &cases[k];
    nb_ctx *c = nb_eager_new();
    gu_fixture f;
    assert_true(gu_open(&f));
    nb_optimizer *oe = oc->make(), *og = oc->make();
    nb_variable *we = nb_variable_new(c, tu_make(c, NB_F64, 1, TU_SHAPE(N), w0), true, "w");
    nb_variable *wg = nb_variable_new(c, tu_make(c, NB_F64, 1, TU_SHAPE(N), w0), true, "w");
    nb_tensor *gph = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(N), "g"), *train = NULL;
    assert_int_equal(nb_optimizer_apply(og, f.c, &gph, &wg, 1, &train), NB_OK);
    assert_non_null(train);
    ref_state ref = {.t = 0};
    memcpy(ref.w, w0, sizeof w0);
    for (int t = 0; t < STEPS; t++) {
      nb_scope_begin(c);
      nb_tensor *g = tu_make(c, NB_F64, 1, TU_SHAPE(N), grads[t]), *op = g;
      assert_int_equal(nb_optimizer_apply(oe, c, &g, &we, 1, &op), NB_OK);
      assert_null(op);
      nb_tensor_free(gu_run1(&f, gph, g, train));
      nb_scope_end(c, NULL, 0);
      oc->step(&ref, grads[t]);
      char what[64];
      snprintf(what, sizeof what, "%s eager step %d", oc->name, t + 1);
      check_close(what, nb_variable_data(we), ref.w, N, 1e-13);
      snprintf(what, sizeof what, "%s graph step %d", oc->name, t + 1);
      check_close(what, nb_variable_data(wg), nb_variable_data(we), N, 1e-15);
    }
    assert_int_equal(nb_optimizer_iterations(oe), STEPS);
    assert_int_equal(nb_optimizer_iterations(og), STEPS);
    nb_optimizer_free(oe);
    nb_optimizer_free(og);
    nb_variable_free(we);
    nb_variable_free(wg);
    gu_close(&f);
    nb_ctx_free(c);
  }
}

/* The first Adam step moves each weight by about lr against its gradient's sign:
   m = 0.1 g, v = 0.001 g^2, lr_t = lr sqrt(0.001) / 0.1, so lr_t m / sqrt(v) = lr sign(g). */
static void test_adam_first_step_by_hand(void **state) {
  nb_ctx *c = *state;
  nb_optimizer *o = nb_adam_new(0.01, 0.9, 0.999, 1e-12);
  nb_variable *w = nb_variable_new(c, tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 1)), true, "w");
  nb_tensor *g = tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, -0.5));
  assert_int_equal(nb_optimizer_apply(o, c, &g, &w, 1, NULL), NB_OK);
  check_close("adam", nb_variable_data(w), TU_VALS(0.99, 1.01), 2, 1e-9);
  nb_variable *m = nb_optimizer_slot(o, w, "m"), *v = nb_optimizer_slot(o, w, "v");
  assert_non_null(m);
  assert_non_null(v);
  assert_string_equal(nb_variable_name(m), "w/m");
  assert_false(nb_variable_trainable(m));
  check_close("m", nb_variable_data(m), TU_VALS(0.3, -0.05), 2, 1e-15);
  check_close("v", nb_variable_data(v), TU_VALS(0.009, 0.00025), 2, 1e-15);
  assert_null(nb_optimizer_slot(o, w, "momentum"));
  nb_optimizer_free(o);
  nb_variable_free(w);
}

/* float32 variables, and a variable big enough for the threaded path. */
static void test_float32_and_threads(void **state) {
  nb_ctx *c = *state;
  enum { BIG = 1 << 16 };
  float *init = malloc(BIG * sizeof *init), *gv = malloc(BIG * sizeof *gv);
  for (int i = 0; i < BIG; i++) init[i] = (float)sin(i), gv[i] = (float)cos(0.3 * i);
  nb_tensor *w0t = nb_tensor_from(c, NB_F32, 1, TU_SHAPE(BIG), init),
            *g = nb_tensor_from(c, NB_F32, 1, TU_SHAPE(BIG), gv);
  nb_variable *w = nb_variable_new(c, w0t, true, "big");
  nb_optimizer *o = nb_rmsprop_new(LR, RHO, MU, EPS, true);
  for (int t = 0; t < 2; t++) assert_int_equal(nb_optimizer_apply(o, c, &g, &w, 1, NULL), NB_OK);
  const float *d = nb_variable_data(w);
  for (int i = 0; i < BIG; i += 997) {
    ref_state s = {.t = 0};
    double gi[N] = {gv[i], gv[i], gv[i]};
    s.w[0] = s.w[1] = s.w[2] = init[i];
    centered_ref(&s, gi);
    centered_ref(&s, gi);
    if (fabs(d[i] - s.w[0]) > 1e-5 * (1 + fabs(s.w[0]))) fail_msg("element %d: got %g, want %g", i, d[i], s.w[0]);
  }
  assert_memory_equal(nb_data(w0t), init, BIG * sizeof *init); /* the initial tensor kept its value */
  nb_optimizer_free(o);
  nb_variable_free(w);
  free(init);
  free(gv);
}

/* ---- schedules --------------------------------------------------------------------------- */

static void test_schedule_values(void **state) {
  (void)state;
  nb_lr_schedule s = nb_step_decay(0.1, 10, 0.5);
  assert_true(fabs(nb_lr_schedule_value(&s, 0) - 0.1) < 1e-17);
  assert_true(fabs(nb_lr_schedule_value(&s, 9) - 0.1) < 1e-17);
  assert_true(fabs(nb_lr_schedule_value(&s, 10) - 0.05) < 1e-17);
  assert_true(fabs(nb_lr_schedule_value(&s, 25) - 0.025) < 1e-17);
  nb_lr_schedule cd = nb_cosine_decay(1.0, 100, 0.1);
  assert_true(fabs(nb_lr_schedule_value(&cd, 0) - 1.0) < 1e-15);
  assert_true(fabs(nb_lr_schedule_value(&cd, 25) - (0.1 + 0.9 * 0.5 * (1 + sqrt(0.5)))) < 1e-15);
  assert_true(fabs(nb_lr_schedule_value(&cd, 50) - 0.55) < 1e-15);
  assert_true(fabs(nb_lr_schedule_value(&cd, 100) - 0.1) < 1e-15);
  assert_true(fabs(nb_lr_schedule_value(&cd, 150) - 0.1) < 1e-15); /* held after decay_steps */
  nb_lr_schedule no_steps = nb_step_decay(0.1, 0, 0.5), negative = nb_cosine_decay(1.0, -3, 0.1);
  assert_true(isnan(nb_lr_schedule_value(&no_steps, 5))); /* not a division by zero */
  assert_true(isnan(nb_lr_schedule_value(&negative, 5)));
  assert_true(isnan(nb_lr_schedule_value(NULL, 5)));
  nb_optimizer *o = nb_sgd_new(0.1);
  assert_int_equal(nb_optimizer_set_schedule(o, nb_step_decay(0.1, 0, 0.5)), NB_INVALID);
  assert_int_equal(nb_optimizer_set_schedule(NULL, s), NB_INVALID);
  nb_optimizer_free(o);
}

/* SGD with g = 1 moves w by the sum of the learning rates used: the schedule at steps
   0, 1, 2, ... in both modes (graph: across nb_run calls). */
static void test_schedules_drive_updates(void **state) {
  (void)state;
  const nb_lr_schedule scheds[2] = {nb_step_decay(0.1, 2, 0.5), nb_cosine_decay(0.2, 4, 0.25)};
  for (int k = 0; k < 2; k++) {
    nb_ctx *c = nb_eager_new();
    gu_fixture f;
    assert_true(gu_open(&f));
    nb_optimizer *oe = nb_sgd_new(1), *og = nb_sgd_new(1);
    assert_int_equal(nb_optimizer_set_schedule(oe, scheds[k]), NB_OK);
    assert_int_equal(nb_optimizer_set_schedule(og, scheds[k]), NB_OK);
    nb_variable *we = nb_variable_new(c, nb_scalar(c, NB_F64, 0), true, "w");
    nb_variable *wg = nb_variable_new(c, nb_scalar(c, NB_F64, 0), true, "w");
    nb_tensor *one = nb_scalar(c, NB_F64, 1), *gone = nb_scalar(f.c, NB_F64, 1), *train = NULL;
    assert_int_equal(nb_optimizer_apply(og, f.c, &gone, &wg, 1, &train), NB_OK);
    double moved = 0;
    for (int t = 0; t < 6; t++) {
      assert_int_equal(nb_optimizer_apply(oe, c, &one, &we, 1, NULL), NB_OK);
      nb_tensor *count = gu_run1(&f, NULL, NULL, train);
      tu_check_vals(count, TU_VALS(t + 1), 0); /* the train op's value: the step counter */
      nb_tensor_free(count);
      moved += nb_lr_schedule_value(&scheds[k], t);
      assert_true(fabs(*(const double *)nb_variable_data(we) + moved) < 1e-15);
      assert_true(fabs(*(const double *)nb_variable_data(wg) + moved) < 1e-15);
    }
    /* cosine: 0.2 (0.25 + 0.375 (1 + cos(pi t / 4))) to t = 4, then 0.05; the cosines
       at t = 1 and 3 cancel: 0.2 + 0.25 + 0.125 + 0.05 + 0.05 */
    assert_true(fabs(moved - (k == 0 ? 0.1 + 0.1 + 0.05 + 0.05 + 0.025 + 0.025 : 0.675)) < 1e-15);
    nb_optimizer_free(oe);
    nb_optimizer_free(og);
    nb_variable_free(we);
    nb_variable_free(wg);
    gu_close(&f);
    nb_ctx_free(c);
  }
}

/* ---- clipping ------------------------------------------------------------------------------- */

static void test_clip_by_global_norm(void **state) {
  nb_ctx *c = *state;
  /* norms 5 and 12: global norm 13 */
  nb_tensor *g[3] = {tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, 4)), NULL,
                     tu_make(c, NB_F64, 1, TU_SHAPE(1), TU_VALS(12))};
  nb_tensor *out[3], *norm;
  assert_int_equal(nb_clip_by_global_norm(c, g, 3, 6.5, out, &norm), NB_OK);
  tu_check_vals(norm, TU_VALS(13), 1e-15);
  tu_check_vals(out[0], TU_VALS(1.5, 2), 1e-15);
  assert_null(out[1]);
  tu_check_vals(out[2], TU_VALS(6), 1e-15);
  assert_int_equal(nb_clip_by_global_norm(c, g, 3, 20, out, NULL), NB_OK); /* under the clip: unchanged */
  tu_check_vals(out[0], TU_VALS(3, 4), 1e-15);
  /* an infinite norm makes everything NaN */
  nb_tensor *inf[2] = {tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(INFINITY, 1)), g[0]};
  assert_int_equal(nb_clip_by_global_norm(c, inf, 2, 1, out, NULL), NB_OK);
  tu_check_vals(out[1], TU_VALS(NAN, NAN), 0);
  /* graph mode */
  gu_fixture f;
  assert_true(gu_open(&f));
  nb_tensor *p = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(-1), "g"), *gp[2] = {p, NULL}, *gout[2];
  assert_int_equal(nb_clip_by_global_norm(f.c, gp, 2, 2.5, gout, NULL), NB_OK);
  nb_tensor *r = gu_run1(&f, p, g[0], gout[0]);
  tu_check_vals(r, TU_VALS(1.5, 2), 1e-15);
  nb_tensor_free(r);
  gu_close(&f);
  /* errors */
  assert_int_equal(nb_clip_by_global_norm(c, g, 3, 0, out, NULL), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_clip_by_global_norm", "clip_norm 0 must be > 0");
  nb_tensor *mixed[2] = {g[0], tu_make(c, NB_F32, 1, TU_SHAPE(1), TU_VALS(1))};
  assert_int_equal(nb_clip_by_global_norm(c, mixed, 2, 1, out, NULL), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "gradient 1 has dtype float32", "expected float64");
  assert_null(out[0]);
}

/* ---- errors ------------------------------------------------------------------------------- */

static void test_apply_errors(void **state) {
  nb_ctx *c = *state;
  nb_optimizer *o = nb_adam_new(0.1, 0.9, 0.999, 1e-7);
  nb_variable *w = nb_variable_new(c, tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 2)), true, "w");
  nb_variable *k = nb_variable_new(c, nb_scalar(c, NB_I32, 1), true, "k");
  nb_tensor *g = tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 1));
  nb_tensor *g32 = tu_make(c, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 1)), *g3 = tu_make(c, NB_F64, 1, TU_SHAPE(3), NULL);
  nb_variable *both[2] = {w, w};
  nb_tensor *gs[2] = {g, g32};
  assert_int_equal(nb_optimizer_apply(o, c, gs, both, 2, NULL), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "gradient 1 has shape [2] and dtype float32",
                 "variable 'w' has shape [2] and dtype float64");
  check_close("w", nb_variable_data(w), TU_VALS(1, 2), 2, 0); /* nothing was updated */
  assert_int_equal(nb_optimizer_apply(o, c, &g3, &w, 1, NULL), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "gradient 0 has shape [3]", "'w' has shape [2]");
  nb_tensor *ki = nb_scalar(c, NB_I32, 1);
  assert_int_equal(nb_optimizer_apply(o, c, &ki, &k, 1, NULL), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "variable 'k' has dtype int32", NULL);
  assert_int_equal(nb_optimizer_apply(o, c, &g, &w, -1, NULL), NB_INVALID);
  tu_check_error(c, NB_INVALID, "n is negative", NULL);
  nb_variable *none = NULL;
  assert_int_equal(nb_optimizer_apply(o, c, &g, &none, 1, NULL), NB_INVALID);
  tu_check_error(c, NB_INVALID, "vars[0] is NULL", NULL);
  assert_int_equal(nb_optimizer_apply(NULL, c, &g, &w, 1, NULL), NB_INVALID);
  tu_check_error(c, NB_INVALID, "NULL optimizer", NULL);
  gu_fixture f;
  assert_true(gu_open(&f));
  nb_tensor *sym = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(2), "g");
  assert_int_equal(nb_optimizer_apply(o, c, &sym, &w, 1, NULL), NB_INVALID);
  tu_check_error(c, NB_INVALID, "gradient 0 (for variable 'w') is a graph tensor", NULL);
  /* a NULL gradient skips its variable (TF): the other one is updated, the step counted */
  nb_tensor *skip[2] = {NULL, g};
  nb_variable *two[2] = {k, w};
  assert_int_equal(nb_optimizer_apply(o, c, skip, two, 2, NULL), NB_OK);
  assert_int_equal(nb_optimizer_iterations(o), 1);
  assert_true(((const double *)nb_variable_data(w))[0] < 1);
  assert_null(nb_optimizer_slot(o, k, "m"));
  /* graph: a gradient of unknown shape is checked when the update runs */
  nb_optimizer *og = nb_sgd_new(0.1);
  nb_tensor *any = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(-1), "any"), *train = NULL, *out = NULL;
  assert_int_equal(nb_optimizer_apply(og, f.c, &any, &w, 1, &train), NB_OK);
  assert_int_equal(nb_run(f.s, &any, &g3, 1, &train, 1, &out), NB_SHAPE);
  assert_non_null(strstr(nb_session_error(f.s), "variable 'w' needs a gradient of shape [2]"));
  /* the graph keeps the optimizer's slots allocated: after it is freed, running fails */
  nb_optimizer *om = nb_momentum_new(0.1, 0.9, false);
  assert_int_equal(nb_optimizer_apply(om, f.c, &sym, &w, 1, &train), NB_OK);
  nb_optimizer_free(om);
  assert_int_equal(nb_run(f.s, &sym, &g, 1, &train, 1, &out), NB_INVALID);
  assert_non_null(strstr(nb_session_error(f.s), "was freed"));
  gu_close(&f);
  nb_optimizer_free(og);
  nb_optimizer_free(o);
  nb_variable_free(w);
  nb_variable_free(k);
}

/* ---- end to end: linear regression ----------------------------------------------------------- */

#define ROWS 64

/* X [64, 3] and y = X [1, -2, 0.5] + 0.3. */
static void regression_data(nb_ctx *c, nb_tensor **x, nb_tensor **y) {
  double xv[ROWS * 3], yv[ROWS];
  for (int i = 0; i < ROWS; i++) {
    for (int j = 0; j < 3; j++) xv[i * 3 + j] = sin(1.3 * i + 0.7 * j + 0.1);
    yv[i] = xv[i * 3] - 2 * xv[i * 3 + 1] + 0.5 * xv[i * 3 + 2] + 0.3;
  }
  *x = tu_make(c, NB_F64, 2, TU_SHAPE(ROWS, 3), xv);
  *y = tu_make(c, NB_F64, 2, TU_SHAPE(ROWS, 1), yv);
}

static nb_tensor *mse(nb_ctx *c, nb_tensor *x, nb_tensor *y, nb_tensor *w, nb_tensor *b) {
  return nb_mean(c, nb_squared_difference(c, nb_add(c, nb_matmul(c, x, w, false, false), b), y), NULL, 0, false);
}

static void train_linear(nb_optimizer *(*make)(void), int steps, bool graph) {
  nb_ctx *c = nb_eager_new();
  nb_tensor *x, *y;
  regression_data(c, &x, &y);
  nb_variable *vars[2] = {nb_variable_new(c, tu_make(c, NB_F64, 2, TU_SHAPE(3, 1), NULL), true, "w"),
                          nb_variable_new(c, tu_make(c, NB_F64, 1, TU_SHAPE(1), NULL), true, "b")};
  nb_optimizer *o = make();
  double first = 0, last = 0;
  if (!graph) {
    for (int s = 0; s < steps; s++) {
      nb_scope_begin(c);
      nb_tape *t = nb_tape_begin(c, 0);
      nb_tensor *loss = mse(c, x, y, nb_variable_read(c, vars[0]), nb_variable_read(c, vars[1])), *d[2];
      assert_int_equal(nb_tape_gradient_vars(t, &loss, 1, vars, 2, d), NB_OK);
      nb_tape_end(t);
      assert_int_equal(nb_optimizer_apply(o, c, d, vars, 2, NULL), NB_OK);
      if (s == 0) first = nb_item(loss, 0);
      last = nb_item(loss, 0);
      nb_scope_end(c, NULL, 0);
    }
  } else {
    gu_fixture f;
    assert_true(gu_open(&f));
    nb_tensor *xp = nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(-1, 3), "x"),
              *yp = nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(-1, 1), "y");
    nb_tensor *r[2] = {nb_variable_read(f.c, vars[0]), nb_variable_read(f.c, vars[1])}, *d[2], *train = NULL;
    nb_tensor *loss = mse(f.c, xp, yp, r[0], r[1]);
    assert_int_equal(nb_gradients(f.c, &loss, 1, r, 2, NULL, d), NB_OK);
    assert_int_equal(nb_optimizer_apply(o, f.c, d, vars, 2, &train), NB_OK);
    nb_tensor *feed[2] = {xp, yp}, *vals[2] = {x, y}, *fetch[2] = {loss, train}, *out[2];
    const void *w_data = NULL;
    for (int s = 0; s < steps; s++) {
      assert_int_equal(nb_run(f.s, feed, vals, 2, fetch, 2, out), NB_OK);
      if (s == 1) w_data = nb_variable_data(vars[0]);
      if (s > 1) assert_ptr_equal(nb_variable_data(vars[0]), w_data); /* updated in place: no read is held */
      if (s == 0) first = nb_item(out[0], 0);
      last = nb_item(out[0], 0);
      nb_tensor_free(out[0]);
      nb_tensor_free(out[1]);
    }
    gu_close(&f);
  }
  if (!(last < first * 1e-3)) fail_msg("%s: loss %g -> %g", graph ? "graph" : "eager", first, last);
  nb_optimizer_free(o);
  nb_variable_free(vars[0]);
  nb_variable_free(vars[1]);
  nb_ctx_free(c);
}

/* In steady state an eager training step updates every variable and slot in place (the
   forward's reads are gone by then) and grows neither the handle list nor the pool. */
static void test_eager_loop_in_place_and_flat(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x, *y;
  regression_data(c, &x, &y);
  nb_variable *vars[2] = {nb_variable_new(c, tu_make(c, NB_F64, 2, TU_SHAPE(3, 1), NULL), true, "w"),
                          nb_variable_new(c, tu_make(c, NB_F64, 1, TU_SHAPE(1), NULL), true, "b")};
  nb_optimizer *o = nb_adam_new(0.05, 0.9, 0.999, 1e-7);
  const void *data[6] = {NULL};
  uint32_t handles = 0;
  size_t cached = 0;
  for (int s = 0; s < 500; s++) {
    nb_scope_begin(c);
    nb_tensor *d[2];
    nb_scope_begin(c);
    nb_tape *t = nb_tape_begin(c, 0);
    nb_tensor *loss = mse(c, x, y, nb_variable_read(c, vars[0]), nb_variable_read(c, vars[1]));
    assert_int_equal(nb_tape_gradient_vars(t, &loss, 1, vars, 2, d), NB_OK);
    nb_tape_end(t);
    nb_scope_end(c, d, 2);
    assert_int_equal(nb_optimizer_apply(o, c, d, vars, 2, NULL), NB_OK);
    nb_scope_end(c, NULL, 0);
    const void *now[6] = {nb_variable_data(vars[0]),
                          nb_variable_data(vars[1]),
                          nb_variable_data(nb_optimizer_slot(o, vars[0], "m")),
                          nb_variable_data(nb_optimizer_slot(o, vars[0], "v")),
                          nb_variable_data(nb_optimizer_slot(o, vars[1], "m")),
                          nb_variable_data(nb_optimizer_slot(o, vars[1], "v"))};
    if (s == 2) {
      memcpy(data, now, sizeof now);
      handles = c->nhandles;
      cached = c->pool.cached_bytes;
    } else if (s > 2) {
      assert_memory_equal(now, data, sizeof now);
      assert_int_equal(c->nhandles, handles);
      assert_true(c->pool.cached_bytes == cached);
    }
  }
  nb_optimizer_free(o);
  nb_variable_free(vars[0]);
  nb_variable_free(vars[1]);
}

static nb_optimizer *regression_sgd(void) { return nb_sgd_new(0.3); }
static nb_optimizer *regression_adam(void) { return nb_adam_new(0.05, 0.9, 0.999, 1e-7); }

static void test_linear_regression(void **state) {
  (void)state;
  train_linear(regression_sgd, 150, false);
  train_linear(regression_sgd, 150, true);
  train_linear(regression_adam, 300, false);
  train_linear(regression_adam, 300, true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_formulas),
      cmocka_unit_test_setup_teardown(test_adam_first_step_by_hand, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_float32_and_threads, tu_setup, tu_teardown),
      cmocka_unit_test(test_schedule_values),
      cmocka_unit_test(test_schedules_drive_updates),
      cmocka_unit_test_setup_teardown(test_clip_by_global_norm, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_apply_errors, tu_setup, tu_teardown),
      cmocka_unit_test(test_linear_regression),
      cmocka_unit_test_setup_teardown(test_eager_loop_in_place_and_flat, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
