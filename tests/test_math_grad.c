/* Gradients of the math family (src/grad/math_grad.c): hand-computed values for TF's special
   cases, and every rule against float64 central differences, first and second order, with
   broadcasting (scalars, size-1 dims, rank mismatch) and unknown dims. */
#include "graphutil.h"

#ifndef M_E
#define M_E 2.71828182845904523536
#endif

/* ---- helpers for the hand-computed tests ------------------------------------------------------ */

/* d y / d xs[0..n) with grad_ys = ones, as graph tensors. */
static void grads(gu_fixture *f, nb_tensor *y, nb_tensor *const *xs, int n, nb_tensor **dxs) {
  if (nb_gradients(f->c, &y, 1, xs, n, NULL, dxs)) fail_msg("nb_gradients: %s", nb_error(f->c));
}

/* Runs the symbolic gradient dx with one feed and checks it. */
static void check_grad(gu_fixture *f, nb_tensor *dx, nb_tensor *feed, nb_tensor *val, nb_dtype t, int rank,
                       const int64_t *shape, const double *want, double tol) {
  assert_non_null(dx);
  nb_tensor *r = gu_run1(f, feed, val, dx);
  tu_check(r, t, rank, shape, want, tol);
  nb_tensor_free(r);
}

/* ---- hand-computed values --------------------------------------------------------------------- */

typedef nb_tensor *(*unary_fn)(nb_ctx *c, nb_tensor *x);
typedef double (*deriv_fn)(double x);

static double d_neg(double x) { return (void)x, -1; }
static double d_exp(double x) { return exp(x); }
static double d_log(double x) { return 1 / x; }
static double d_log1p(double x) { return 1 / (1 + x); }
static double d_sqrt(double x) { return 0.5 / sqrt(x); }
static double d_rsqrt(double x) { return -0.5 * pow(x, -1.5); }
static double d_reciprocal(double x) { return -1 / (x * x); }
static double d_square(double x) { return 2 * x; }
static double d_abs(double x) { return x > 0 ? 1 : x < 0 ? -1 : 0; }
static double d_sign(double x) { return (void)x, 0; }
static double d_tanh(double x) { return 1 - tanh(x) * tanh(x); }
static double sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double d_sigmoid(double x) { return sigmoid(x) * (1 - sigmoid(x)); }
static double d_relu(double x) { return x > 0; }
static double d_elu(double x) { return x < 0 ? exp(x) : 1; }
static double d_softplus(double x) { return sigmoid(x); }
static double d_sin(double x) { return cos(x); }
static double d_cos(double x) { return -sin(x); }
static double d_identity(double x) { return (void)x, 1; }

static const struct {
  const char *name;
  unary_fn fn;
  deriv_fn d;
  bool positive_only;
} unary_table[] = {
    {"Neg", nb_neg, d_neg, false},
    {"Exp", nb_exp, d_exp, false},
    {"Log", nb_log, d_log, true},
    {"Log1p", nb_log1p, d_log1p, true},
    {"Sqrt", nb_sqrt, d_sqrt, true},
    {"Rsqrt", nb_rsqrt, d_rsqrt, true},
    {"Reciprocal", nb_reciprocal, d_reciprocal, false},
    {"Square", nb_square, d_square, false},
    {"Abs", nb_abs, d_abs, false},
    {"Sign", nb_sign, d_sign, false},
    {"Tanh", nb_tanh, d_tanh, false},
    {"Sigmoid", nb_sigmoid, d_sigmoid, false},
    {"Relu", nb_relu, d_relu, false},
    {"Elu", nb_elu, d_elu, false},
    {"Softplus", nb_softplus, d_softplus, false},
    {"Sin", nb_sin, d_sin, false},
    {"Cos", nb_cos, d_cos, false},
    {"Identity", nb_identity, d_identity, false},
};

/* Each unary rule in float32 and float64 against its closed-form derivative; signed inputs
   cover the negative branches of Abs, Relu and Elu. */
static void test_unary_values(void **state) {
  gu_fixture *f = *state;
  static const double positive[4] = {0.25, 0.5, 2, 3}, is_signed[4] = {-1.5, -0.25, 0.5, 2};
  const nb_dtype types[2] = {NB_F32, NB_F64};
  for (int t = 0; t < 2; t++)
    for (size_t k = 0; k < sizeof unary_table / sizeof unary_table[0]; k++) {
      const double *xv = unary_table[k].positive_only ? positive : is_signed;
      nb_tensor *x = nb_placeholder(f->c, types[t], 1, TU_SHAPE(4), "x");
      nb_tensor *dx = NULL;
      grads(f, unary_table[k].fn(f->c, x), &x, 1, &dx);
      double want[4];
      for (int i = 0; i < 4; i++) want[i] = unary_table[k].d(xv[i]);
      nb_tensor *val = tu_make(f->e, types[t], 1, TU_SHAPE(4), xv);
      print_message("%s %s\n", unary_table[k].name, nb_dtype_name(types[t]));
      check_grad(f, dx, x, val, types[t], 1, TU_SHAPE(4), want, types[t] == NB_F32 ? 1e-5 : 1e-12);
    }
}

/* Sign's gradient is zeros (TF's choice), not a missing gradient: x * sign(x) = |x| gets sign(x). */
static void test_sign_is_zero_not_missing(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x"), *dx = NULL;
  grads(f, nb_mul(f->c, x, nb_sign(f->c, x)), &x, 1, &dx);
  nb_tensor *val = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(-2, 0, 3));
  check_grad(f, dx, x, val, NB_F64, 1, TU_SHAPE(3), TU_VALS(-1, 0, 1), 0);
}

/* Pow: dx = y x^(y-1) everywhere; dy = z ln x only where x > 0 and 0 elsewhere (no NaN at x <= 0). */
static void test_pow_nonpositive_base(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(4), "x");
  nb_tensor *y = nb_tensor_from(f->c, NB_F64, 1, TU_SHAPE(4), (const double[]){2, 3, 0.5, 2});
  nb_tensor *xs[2] = {x, y}, *d[2];
  grads(f, nb_pow(f->c, x, y), xs, 2, d);
  nb_tensor *val = tu_make(f->e, NB_F64, 1, TU_SHAPE(4), TU_VALS(-1, 0, 2, 0.5));
  check_grad(f, d[0], x, val, NB_F64, 1, TU_SHAPE(4), TU_VALS(-2, 0, 0.5 / sqrt(2), 1), 1e-12);
  check_grad(f, d[1], x, val, NB_F64, 1, TU_SHAPE(4), TU_VALS(0, 0, sqrt(2) * log(2), 0.25 * log(0.5)), 1e-12);
}

/* Maximum/Minimum: ties go to the first input (x >= y, x <= y), also against a broadcast scalar. */
static void test_maximum_minimum_ties(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(4), "x");
  nb_tensor *y = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(4), "y");
  nb_tensor *s = nb_placeholder(f->c, NB_F32, 0, NULL, "s");
  nb_tensor *xy[2] = {x, y}, *xsc[2] = {x, s}, *dmax[2], *dmin[2], *dsmax[2], *dsmin[2];
  grads(f, nb_maximum(f->c, x, y), xy, 2, dmax);
  grads(f, nb_minimum(f->c, x, y), xy, 2, dmin);
  grads(f, nb_maximum(f->c, x, s), xsc, 2, dsmax);
  grads(f, nb_minimum(f->c, x, s), xsc, 2, dsmin);
  nb_tensor *feeds[3] = {x, y, s};
  nb_tensor *vals[3] = {tu_make(f->e, NB_F32, 1, TU_SHAPE(4), TU_VALS(1, 2, 3, 4)),
                        tu_make(f->e, NB_F32, 1, TU_SHAPE(4), TU_VALS(1, 5, 0, 4)),
                        tu_make(f->e, NB_F32, 0, NULL, TU_VALS(2))};
  nb_tensor *fetch[8] = {dmax[0], dmax[1], dmin[0], dmin[1], dsmax[0], dsmax[1], dsmin[0], dsmin[1]}, *r[8];
  if (nb_run(f->s, feeds, vals, 3, fetch, 8, r)) fail_msg("%s", nb_session_error(f->s));
  tu_check(r[0], NB_F32, 1, TU_SHAPE(4), TU_VALS(1, 0, 1, 1), 0);
  tu_check(r[1], NB_F32, 1, TU_SHAPE(4), TU_VALS(0, 1, 0, 0), 0);
  tu_check(r[2], NB_F32, 1, TU_SHAPE(4), TU_VALS(1, 1, 0, 1), 0);
  tu_check(r[3], NB_F32, 1, TU_SHAPE(4), TU_VALS(0, 0, 1, 0), 0);
  tu_check(r[4], NB_F32, 1, TU_SHAPE(4), TU_VALS(0, 1, 1, 1), 0); /* x = 2 ties the scalar: x wins */
  tu_check(r[5], NB_F32, 0, NULL, TU_VALS(1), 0);
  tu_check(r[6], NB_F32, 1, TU_SHAPE(4), TU_VALS(1, 1, 0, 0), 0);
  tu_check(r[7], NB_F32, 0, NULL, TU_VALS(2), 0);
  for (int i = 0; i < 8; i++) nb_tensor_free(r[i]);
}

/* Broadcasting binary rules summed to each input's shape: Sub negates for y, RealDiv's dy is
   -dz x / y^2, Mul's dy the other factor, SquaredDifference 2 (x - y) and its negation. */
static void test_binary_broadcast_values(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(2, 2), "x");
  nb_tensor *y = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(2), "y");
  nb_tensor *xy[2] = {x, y}, *dsub[2], *ddiv[2], *dmul[2], *dsq[2];
  grads(f, nb_sub(f->c, x, y), xy, 2, dsub);
  grads(f, nb_real_div(f->c, x, y), xy, 2, ddiv);
  grads(f, nb_mul(f->c, x, y), xy, 2, dmul);
  grads(f, nb_squared_difference(f->c, x, y), xy, 2, dsq);
  nb_tensor *feeds[2] = {x, y};
  nb_tensor *vals[2] = {tu_make(f->e, NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4)),
                        tu_make(f->e, NB_F32, 1, TU_SHAPE(2), TU_VALS(2, -4))};
  nb_tensor *fetch[8] = {dsub[0], dsub[1], ddiv[0], ddiv[1], dmul[0], dmul[1], dsq[0], dsq[1]}, *r[8];
  if (nb_run(f->s, feeds, vals, 2, fetch, 8, r)) fail_msg("%s", nb_session_error(f->s));
  tu_check(r[0], NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(1, 1, 1, 1), 0);
  tu_check(r[1], NB_F32, 1, TU_SHAPE(2), TU_VALS(-2, -2), 0);
  tu_check(r[2], NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(0.5, -0.25, 0.5, -0.25), 1e-7);
  tu_check(r[3], NB_F32, 1, TU_SHAPE(2), TU_VALS(-(1 + 3) / 4.0, -(2 + 4) / 16.0), 1e-7);
  tu_check(r[4], NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(2, -4, 2, -4), 0);
  tu_check(r[5], NB_F32, 1, TU_SHAPE(2), TU_VALS(4, 6), 0);
  tu_check(r[6], NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(-2, 12, 2, 16), 0);
  tu_check(r[7], NB_F32, 1, TU_SHAPE(2), TU_VALS(0, -28), 0);
  for (int i = 0; i < 8; i++) nb_tensor_free(r[i]);
}

/* SelectV2 routes dz to the branch taken (zeros elsewhere), sums broadcasts, and the
   condition gets no gradient; a comparison on the path is cut without an error. */
static void test_select_routes(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "x");
  nb_tensor *e = nb_placeholder(f->c, NB_F64, 0, NULL, "e");
  nb_tensor *cond = nb_greater(f->c, x, nb_scalar(f->c, NB_F64, 0));
  nb_tensor *xe[2] = {x, e}, *d[2], *dc;
  grads(f, nb_select(f->c, cond, nb_mul(f->c, x, x), e), xe, 2, d);
  grads(f, nb_select(f->c, cond, x, e), &cond, 1, &dc);
  assert_null(dc);
  nb_tensor *feeds[2] = {x, e};
  nb_tensor *vals[2] = {tu_make(f->e, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(1, -2, 3, -4, 5, 0)),
                        tu_make(f->e, NB_F64, 0, NULL, TU_VALS(7))};
  nb_tensor *fetch[2] = {d[0], d[1]}, *r[2];
  if (nb_run(f->s, feeds, vals, 2, fetch, 2, r)) fail_msg("%s", nb_session_error(f->s));
  tu_check(r[0], NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(2, 0, 6, 0, 10, 0), 0);
  tu_check(r[1], NB_F64, 0, NULL, TU_VALS(3), 0);
  for (int i = 0; i < 2; i++) nb_tensor_free(r[i]);
}

/* Cast casts the gradient back between float types; through an integer there is none. */
static void test_cast(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(2), "x");
  nb_tensor *w = nb_tensor_from(f->c, NB_F64, 1, TU_SHAPE(2), (const double[]){0.25, -3});
  nb_tensor *dx, *dnone, *dpart;
  grads(f, nb_mul(f->c, nb_cast(f->c, x, NB_F64), w), &x, 1, &dx);
  grads(f, nb_cast(f->c, nb_cast(f->c, x, NB_I32), NB_F32), &x, 1, &dnone);
  assert_null(dnone);
  nb_tensor *both = nb_add(f->c, x, nb_cast(f->c, nb_cast(f->c, x, NB_I64), NB_F32));
  grads(f, both, &x, 1, &dpart);
  nb_tensor *val = tu_make(f->e, NB_F32, 1, TU_SHAPE(2), TU_VALS(1.5, 2));
  check_grad(f, dx, x, val, NB_F32, 1, TU_SHAPE(2), TU_VALS(0.25, -3), 0);
  check_grad(f, dpart, x, val, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 1), 0);
  nb_tensor *x64 = nb_placeholder(f->c, NB_F64, 0, NULL, "x64"), *d64;
  grads(f, nb_square(f->c, nb_cast(f->c, x64, NB_F32)), &x64, 1, &d64);
  tu_check_shape(d64, NB_F64, 0, NULL);
  check_grad(f, d64, x64, tu_make(f->e, NB_F64, 0, NULL, TU_VALS(1.5)), NB_F64, 0, NULL, TU_VALS(3), 0);
}

/* AddN passes dy to every input (a repeated input sums), Identity passes it through,
   StopGradient cuts its path, and Add (the legacy op) matches AddV2. */
static void test_add_n_identity_stop_add(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "x"), *dx, *dadd[2];
  nb_tensor *terms[3] = {x, nb_square(f->c, x), nb_identity(f->c, x)};
  nb_tensor *y = nb_add(f->c, nb_add_n(f->c, terms, 3), nb_mul(f->c, x, nb_stop_gradient(f->c, nb_exp(f->c, x))));
  grads(f, y, &x, 1, &dx);
  nb_tensor *val = tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(0, 1));
  check_grad(f, dx, x, val, NB_F64, 1, TU_SHAPE(2), TU_VALS(1 + 0 + 1 + 1, 1 + 2 + 1 + M_E), 1e-12);
  nb_tensor *s = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(1, 1), "s"), *xs[2] = {x, s}, *sum;
  assert_int_equal(nb_op(f->c, "Add", xs, 2, NULL, 0, &sum, 1), NB_OK);
  grads(f, sum, xs, 2, dadd);
  nb_tensor *feeds[2] = {x, s}, *vals[2] = {val, tu_make(f->e, NB_F64, 2, TU_SHAPE(1, 1), TU_VALS(4))};
  nb_tensor *fetch[2] = {dadd[0], dadd[1]}, *r[2];
  if (nb_run(f->s, feeds, vals, 2, fetch, 2, r)) fail_msg("%s", nb_session_error(f->s));
  tu_check(r[0], NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 1), 0);
  tu_check(r[1], NB_F64, 2, TU_SHAPE(1, 1), TU_VALS(2), 0);
  for (int i = 0; i < 2; i++) nb_tensor_free(r[i]);
}

/* The fused gradient ops' own gradients at one point, by hand. */
static void test_fused_grad_values(void **state) {
  gu_fixture *f = *state;
  nb_tensor *a = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "a");
  nb_tensor *b = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "b");
  nb_tensor *ab[2] = {a, b}, *dt[2], *dr[2], *de[2];
  grads(f, nb_tanh_grad(f->c, a, b), ab, 2, dt); /* (-2 y dy, 1 - y^2) */
  grads(f, nb_relu_grad(f->c, a, b), ab, 2, dr); /* ([f > 0], 0) */
  grads(f, nb_elu_grad(f->c, a, b), ab, 2, de);  /* (o < 0 ? o + 1 : 1, o < 0 ? g : 0) */
  nb_tensor *feeds[2] = {a, b};
  nb_tensor *vals[2] = {tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(0.5, 3)),
                        tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(-0.25, 2))};
  nb_tensor *fetch[6] = {dt[0], dt[1], dr[0], dr[1], de[0], de[1]}, *r[6];
  if (nb_run(f->s, feeds, vals, 2, fetch, 6, r)) fail_msg("%s", nb_session_error(f->s));
  tu_check(r[0], NB_F64, 1, TU_SHAPE(2), TU_VALS(0.25, -12), 1e-12);
  tu_check(r[1], NB_F64, 1, TU_SHAPE(2), TU_VALS(0.75, -8), 1e-12);
  tu_check(r[2], NB_F64, 1, TU_SHAPE(2), TU_VALS(0, 1), 0);
  tu_check(r[3], NB_F64, 1, TU_SHAPE(2), TU_VALS(0, 0), 0);
  tu_check(r[4], NB_F64, 1, TU_SHAPE(2), TU_VALS(0.75, 1), 0);
  tu_check(r[5], NB_F64, 1, TU_SHAPE(2), TU_VALS(0.5, 0), 0);
  for (int i = 0; i < 6; i++) nb_tensor_free(r[i]);
}

/* TF's NotDifferentiable math ops are registered as "no gradient"; the rest have one. */
static void test_registrations(void **state) {
  (void)state;
  static const char *none[] = {"Less",     "LessEqual",  "Greater",   "GreaterEqual", "Equal",
                               "NotEqual", "LogicalAnd", "LogicalOr", "LogicalNot",   "StopGradient"};
  static const char *some[] = {
      "AddV2",    "Add",        "Sub",         "Mul",         "RealDiv",   "Pow",      "SquaredDifference",
      "Maximum",  "Minimum",    "Neg",         "Exp",         "Log",       "Log1p",    "Sqrt",
      "Rsqrt",    "Reciprocal", "Square",      "Abs",         "Sign",      "Tanh",     "Sigmoid",
      "Relu",     "Elu",        "Softplus",    "Sin",         "Cos",       "SelectV2", "Cast",
      "AddN",     "Identity",   "TanhGrad",    "SigmoidGrad", "RsqrtGrad", "SqrtGrad", "ReciprocalGrad",
      "ReluGrad", "EluGrad",    "SoftplusGrad"};
  for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
    if (nb_has_gradient(none[i])) fail_msg("%s has a gradient", none[i]);
  for (size_t i = 0; i < sizeof some / sizeof some[0]; i++)
    if (!nb_has_gradient(some[i])) fail_msg("%s has no gradient", some[i]);
  assert_int_equal(nb_register_gradient("Tanh", NULL), NB_INVALID); /* already registered */
}

/* ---- central differences, first and second order ----------------------------------------------------- */

enum { D_ANY, D_POS, D_AWAY, D_BOOL }; /* value domains of the inputs */
enum { MAXIN = 3 };

typedef struct gcase {
  const char *name;
  gu_build_fn build;
  int n;
  struct {
    int rank;
    int64_t shape[3];
    int domain;
  } in[MAXIN];
  bool dynamic; /* placeholders with unknown dims: the run-time reduction path */
} gcase;

/* Test values: -1.6 + 0.5 k (mod 7 steps) shifted by 0.2 per seed, so two seeds never tie
   and no value is within 0.1 of 0; mapped into the op's domain. */
static double test_value(int64_t k, int seed, int domain) {
  double g = -1.6 + 0.5 * (double)((k * 5 + seed * 3) % 7) + 0.2 * seed;
  switch (domain) {
    case D_POS: return 0.4 + 0.5 * (g + 1.6);
    case D_AWAY: return g + (g < 0 ? -0.4 : 0.4);
    case D_BOOL: return (k + seed) % 3 != 1;
    default: return g;
  }
}

/* The case's inputs (boolean ones fed, not differentiated) against central differences,
   first and second order. */
static void check_case(const gcase *k) {
  gu_grad_case g = {.name = k->name, .build = k->build, .n = k->n, .dynamic = k->dynamic};
  double x[MAXIN][32];
  for (int i = 0; i < k->n; i++) {
    int64_t n = gu_count(k->in[i].rank, k->in[i].shape);
    assert_true(n <= 32);
    for (int64_t j = 0; j < n; j++) x[i][j] = test_value(j, i, k->in[i].domain);
    bool fed = k->in[i].domain == D_BOOL;
    g.in[i] = (gu_input){k->in[i].rank, k->in[i].shape, NULL, x[i], fed, fed ? NB_BOOL : NB_F64};
  }
  gu_check_grad(&g);
}

#define UN(NAME, FN) \
  static nb_tensor *b_##NAME(gu_fixture *f, nb_tensor *const *x, const void *arg) { return (void)arg, FN(f->c, x[0]); }
#define BIN(NAME, FN)                                                               \
  static nb_tensor *b_##NAME(gu_fixture *f, nb_tensor *const *x, const void *arg) { \
    return (void)arg, FN(f->c, x[0], x[1]);                                         \
  }
UN(neg, nb_neg)
UN(exp, nb_exp)
UN(log, nb_log)
UN(log1p, nb_log1p)
UN(sqrt, nb_sqrt)
UN(rsqrt, nb_rsqrt)
UN(reciprocal, nb_reciprocal)
UN(square, nb_square)
UN(abs, nb_abs)
UN(sign, nb_sign)
UN(tanh, nb_tanh)
UN(sigmoid, nb_sigmoid)
UN(relu, nb_relu)
UN(elu, nb_elu)
UN(softplus, nb_softplus)
UN(sin, nb_sin)
UN(cos, nb_cos)
UN(identity, nb_identity)
BIN(add, nb_add)
BIN(sub, nb_sub)
BIN(mul, nb_mul)
BIN(div, nb_real_div)
BIN(pow, nb_pow)
BIN(sqdiff, nb_squared_difference)
BIN(maximum, nb_maximum)
BIN(minimum, nb_minimum)
BIN(tanh_grad, nb_tanh_grad)
BIN(sigmoid_grad, nb_sigmoid_grad)
BIN(rsqrt_grad, nb_rsqrt_grad)
BIN(sqrt_grad, nb_sqrt_grad)
BIN(reciprocal_grad, nb_reciprocal_grad)
BIN(relu_grad, nb_relu_grad)
BIN(elu_grad, nb_elu_grad)
BIN(softplus_grad, nb_softplus_grad)

/* The linear ops get nonlinear neighbours so their second order is not trivially zero. */
static nb_tensor *b_cast(gu_fixture *f, nb_tensor *const *x, const void *arg) {
  return (void)arg, nb_square(f->c, nb_cast(f->c, x[0], NB_F64));
}
static nb_tensor *b_select(gu_fixture *f, nb_tensor *const *x, const void *arg) {
  return (void)arg, nb_select(f->c, x[0], nb_sin(f->c, x[1]), nb_square(f->c, x[2]));
}
static nb_tensor *b_add_n(gu_fixture *f, nb_tensor *const *x, const void *arg) {
  (void)arg;
  nb_tensor *terms[3] = {nb_sin(f->c, x[0]), nb_mul(f->c, x[0], x[1]), x[2]};
  return nb_add_n(f->c, terms, 3);
}
static nb_tensor *b_add_legacy(gu_fixture *f, nb_tensor *const *x, const void *arg) {
  (void)arg;
  nb_tensor *out = NULL;
  nb_op(f->c, "Add", x, 2, NULL, 0, &out, 1);
  return out;
}

#define S23 \
  { 2, {2, 3}, D_ANY }
#define UNARY_CASE(NAME, DOMAIN) \
  { #NAME, b_##NAME, 1, {{2, {2, 3 }, DOMAIN } }, false }
#define PAIR_CASE(NAME, D0, D1) \
  { #NAME, b_##NAME, 2, {{2, {2, 3 }, D0 }, {2, {2, 3 }, D1 } }, false }

static const gcase unary_cases[] = {
    UNARY_CASE(neg, D_ANY),
    UNARY_CASE(exp, D_ANY),
    UNARY_CASE(log, D_POS),
    UNARY_CASE(log1p, D_POS),
    UNARY_CASE(sqrt, D_POS),
    UNARY_CASE(rsqrt, D_POS),
    UNARY_CASE(reciprocal, D_AWAY),
    UNARY_CASE(square, D_ANY),
    UNARY_CASE(abs, D_ANY),
    UNARY_CASE(sign, D_ANY),
    UNARY_CASE(tanh, D_ANY),
    UNARY_CASE(sigmoid, D_ANY),
    UNARY_CASE(relu, D_ANY),
    UNARY_CASE(elu, D_ANY),
    UNARY_CASE(softplus, D_ANY),
    UNARY_CASE(sin, D_ANY),
    UNARY_CASE(cos, D_ANY),
    UNARY_CASE(identity, D_ANY),
    UNARY_CASE(cast, D_ANY),
    {"tanh scalar", b_tanh, 1, {{0, {0}, D_ANY}}, false},
    {"exp dynamic", b_exp, 1, {{3, {2, 1, 2}, D_ANY}}, true},
};

static const gcase fused_cases[] = {
    PAIR_CASE(tanh_grad, D_ANY, D_ANY), PAIR_CASE(sigmoid_grad, D_ANY, D_ANY),     PAIR_CASE(rsqrt_grad, D_POS, D_ANY),
    PAIR_CASE(sqrt_grad, D_POS, D_ANY), PAIR_CASE(reciprocal_grad, D_AWAY, D_ANY), PAIR_CASE(relu_grad, D_ANY, D_ANY),
    PAIR_CASE(elu_grad, D_ANY, D_ANY),  PAIR_CASE(softplus_grad, D_ANY, D_ANY),
};

/* Each broadcasting binary op over five shape pairs: equal, rank mismatch, size-1 dims on
   both sides, a scalar, and unknown dims (run-time BroadcastGradientArgs). */
static const struct {
  const char *name;
  gu_build_fn build;
  int d0, d1;
} binary_ops[] = {
    {"AddV2", b_add, D_ANY, D_ANY},
    {"Add", b_add_legacy, D_ANY, D_ANY},
    {"Sub", b_sub, D_ANY, D_ANY},
    {"Mul", b_mul, D_ANY, D_ANY},
    {"RealDiv", b_div, D_ANY, D_AWAY},
    {"Pow", b_pow, D_POS, D_ANY},
    {"SquaredDifference", b_sqdiff, D_ANY, D_ANY},
    {"Maximum", b_maximum, D_ANY, D_ANY},
    {"Minimum", b_minimum, D_ANY, D_ANY},
};

static const struct {
  int r0;
  int64_t s0[3];
  int r1;
  int64_t s1[3];
  bool dynamic;
} binary_shapes[] = {
    {2, {2, 3}, 2, {2, 3}, false}, {2, {2, 3}, 1, {3}, false}, {2, {2, 1}, 3, {2, 1, 3}, false},
    {0, {0}, 2, {2, 3}, false},    {1, {3}, 2, {2, 3}, true},  {2, {2, 1}, 2, {1, 3}, true},
};

static void test_unary_numeric(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof unary_cases / sizeof unary_cases[0]; i++) check_case(&unary_cases[i]);
}

static void test_binary_numeric(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof binary_ops / sizeof binary_ops[0]; i++)
    for (size_t s = 0; s < sizeof binary_shapes / sizeof binary_shapes[0]; s++) {
      gcase k = {binary_ops[i].name, binary_ops[i].build, 2, {{0}}, binary_shapes[s].dynamic};
      k.in[0].rank = binary_shapes[s].r0;
      k.in[1].rank = binary_shapes[s].r1;
      memcpy(k.in[0].shape, binary_shapes[s].s0, sizeof k.in[0].shape);
      memcpy(k.in[1].shape, binary_shapes[s].s1, sizeof k.in[1].shape);
      k.in[0].domain = binary_ops[i].d0;
      k.in[1].domain = binary_ops[i].d1;
      print_message("%s shapes #%zu\n", k.name, s);
      check_case(&k);
    }
}

static void test_fused_numeric(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof fused_cases / sizeof fused_cases[0]; i++) check_case(&fused_cases[i]);
}

/* SelectV2 with the condition, then-branch and else-branch broadcast against each other;
   AddN with three inputs. */
static void test_select_add_n_numeric(void **state) {
  (void)state;
  static const gcase cases[] = {
      {"SelectV2", b_select, 3, {{2, {2, 3}, D_BOOL}, S23, S23}, false},
      {"SelectV2 broadcast", b_select, 3, {{1, {3}, D_BOOL}, {2, {2, 1}, D_ANY}, {0, {0}, D_ANY}}, false},
      {"SelectV2 cond broadcast", b_select, 3, {{2, {2, 3}, D_BOOL}, {1, {3}, D_ANY}, {2, {2, 1}, D_ANY}}, false},
      {"SelectV2 dynamic", b_select, 3, {{2, {2, 1}, D_BOOL}, {1, {3}, D_ANY}, {2, {2, 3}, D_ANY}}, true},
      {"AddN", b_add_n, 3, {S23, S23, S23}, false},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_unary_values, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sign_is_zero_not_missing, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_pow_nonpositive_base, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_maximum_minimum_ties, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_binary_broadcast_values, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_select_routes, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_cast, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_add_n_identity_stop_add, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_fused_grad_values, gu_setup, gu_teardown),
      cmocka_unit_test(test_registrations),
      cmocka_unit_test(test_unary_numeric),
      cmocka_unit_test(test_binary_numeric),
      cmocka_unit_test(test_fused_numeric),
      cmocka_unit_test(test_select_add_n_numeric),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
