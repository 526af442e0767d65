/* Eager forward mode (nb_forward_accumulator_*), nested with tapes and other accumulators
   as TF's forwardprop_test.py nests them; forward over reverse HVPs (nb_hvp_fn) and
   jacfwd/jacrev Jacobians (nb_jacobian_fn) in both modes; forward mode through loops,
   conditionals and custom gradients. Every op's accumulator JVP is checked against nb_jvp
   in test_gradcheck_all.

   Closed forms are computed in float64 from a few roundings each: a result of at most 64
   roundings (ops and the closed form together) is within gamma_64(f64) |want|. */
#include "testutil.h"

static void check_close(const nb_tensor *got, const double *want) {
  assert_non_null(got);
  double rel = tu_gamma(NB_F64, 64);
  for (int64_t i = 0; i < nb_num_elements(got); i++)
    if (!(fabs(nb_item(got, i) - want[i]) <= rel * fabs(want[i])))
      fail_msg("element %lld: got %.17g, want %.17g (relative bound %.3g)", (long long)i, nb_item(got, i), want[i],
               rel);
}

static void check_scalar(const nb_tensor *got, double want) { check_close(got, (const double[]){want}); }

static const double x3[] = {0.4, -1.2, 0.9}, v3[] = {1.5, 0.5, -2};

/* ---- the accumulator alone ---------------------------------------------------------------- */

static void test_jvp_closed_form(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  nb_tensor *x = tu_make(e, NB_F64, 1, TU_SHAPE(3), x3), *v = tu_make(e, NB_F64, 1, TU_SHAPE(3), v3);
  nb_tensor *w = tu_make(e, NB_F64, 1, TU_SHAPE(1), TU_VALS(0.7));
  nb_forward_accumulator *acc = nb_forward_accumulator_begin(e);
  assert_int_equal(nb_forward_accumulator_watch(acc, x, v), NB_OK);
  nb_tensor *y = nb_mul(e, nb_sin(e, x), w);
  nb_tensor *unrelated = nb_exp(e, w), *ints = nb_cast(e, y, NB_I32);
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = cos(x3[i]) * v3[i] * 0.7;
  check_close(nb_forward_accumulator_jvp(acc, y), want);
  check_close(nb_forward_accumulator_jvp(acc, x), v3); /* a watched tensor's tangent is its own */
  assert_null(nb_forward_accumulator_jvp(acc, unrelated));
  assert_null(nb_forward_accumulator_jvp(acc, ints));
  nb_forward_accumulator_end(acc);
  nb_ctx_free(e);
}

/* TF's testReusingJVP: two watched tensors, each output gets its own tangent; y = m m^T
   has tangent t m^T + m t^T (MatMul's bilinear rule). */
static void test_two_watched(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  nb_tensor *m1 = tu_make(e, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4));
  nb_tensor *m2 = tu_make(e, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(-1, 0.5, 2, 1));
  nb_tensor *t1 = tu_make(e, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(0.5, -1, 1, 2));
  nb_tensor *t2 = tu_make(e, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(1, 1, -2, 0.25));
  nb_forward_accumulator *acc = nb_forward_accumulator_begin(e);
  nb_forward_accumulator_watch(acc, m1, t1);
  nb_forward_accumulator_watch(acc, m2, t2);
  nb_tensor *r1 = nb_matmul(e, m1, m1, false, true), *r2 = nb_matmul(e, m2, m2, false, true);
  nb_tensor *want1 = nb_add(e, nb_matmul(e, t1, m1, false, true), nb_matmul(e, m1, t1, false, true));
  nb_tensor *want2 = nb_add(e, nb_matmul(e, t2, m2, false, true), nb_matmul(e, m2, t2, false, true));
  double w1[4], w2[4];
  for (int i = 0; i < 4; i++) w1[i] = nb_item(want1, i), w2[i] = nb_item(want2, i);
  check_close(nb_forward_accumulator_jvp(acc, r1), w1);
  check_close(nb_forward_accumulator_jvp(acc, r2), w2);
  nb_forward_accumulator_end(acc);
  nb_ctx_free(e);
}

static void test_watch_errors(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  assert_null(nb_forward_accumulator_begin(gc));
  assert_int_equal(nb_status(gc), NB_INVALID);
  nb_forward_accumulator *acc = nb_forward_accumulator_begin(e);
  nb_tensor *x = tu_make(e, NB_F64, 1, TU_SHAPE(3), x3);
  assert_int_equal(nb_forward_accumulator_watch(acc, x, tu_make(e, NB_F32, 1, TU_SHAPE(3), v3)), NB_DTYPE);
  nb_clear_error(e);
  assert_int_equal(nb_forward_accumulator_watch(acc, x, tu_make(e, NB_F64, 1, TU_SHAPE(2), v3)), NB_SHAPE);
  assert_non_null(strstr(nb_error(e), "nb_forward_accumulator_watch"));
  nb_clear_error(e);
  assert_int_equal(nb_forward_accumulator_watch(acc, nb_cast(e, x, NB_I32), nb_cast(e, x, NB_I32)), NB_DTYPE);
  nb_clear_error(e);
  nb_forward_accumulator_end(acc);
  /* one left active is freed with its context */
  acc = nb_forward_accumulator_begin(e);
  nb_forward_accumulator_watch(acc, x, x);
  nb_exp(e, x);
  nb_ctx_free(gc);
  nb_graph_free(g);
  nb_ctx_free(e);
}

/* ---- nesting: TF's forwardprop_test.py ---------------------------------------------------- */

/* testGradPureForward: two accumulators on one primal; the outer sees the inner's tangent
   ops (forward over forward), the inner does not see the outer's. */
static void test_nested_accumulators(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  nb_tensor *p = nb_scalar(e, NB_F64, 1.1), *one = nb_scalar(e, NB_F64, 1), *out;
  nb_forward_accumulator *outer, *inner;
  outer = nb_forward_accumulator_begin(e);
  nb_forward_accumulator_watch(outer, p, one);
  inner = nb_forward_accumulator_begin(e);
  nb_forward_accumulator_watch(inner, p, one);
  out = nb_pow(e, p, nb_scalar(e, NB_F64, 3.5));
  nb_tensor *jvp_inner = nb_forward_accumulator_jvp(inner, out);
  nb_tensor *jvp_outer = nb_forward_accumulator_jvp(outer, jvp_inner);
  check_scalar(out, pow(1.1, 3.5));
  check_scalar(jvp_inner, 3.5 * pow(1.1, 2.5));
  check_scalar(jvp_outer, 3.5 * 2.5 * pow(1.1, 1.5));
  assert_null(nb_forward_accumulator_jvp(inner, nb_forward_accumulator_jvp(outer, out)));
  nb_forward_accumulator_end(inner);
  nb_forward_accumulator_end(outer);
  nb_ctx_free(e);
}

/* testHigherOrderPureForward: d^k/dx^k x^3.5 at 1.1 from k nested accumulators, each
   watching the primal along 1 and reading the tangent of the next inner one's result. */
static void test_higher_order_pure_forward(void **state) {
  (void)state;
  const double want[] = {pow(1.1, 3.5), 3.5 * pow(1.1, 2.5), 3.5 * 2.5 * pow(1.1, 1.5),
                         3.5 * 2.5 * 1.5 * pow(1.1, 0.5)};
  for (int order = 0; order < 4; order++) {
    nb_ctx *e = nb_eager_new();
    nb_tensor *p = nb_scalar(e, NB_F64, 1.1);
    nb_forward_accumulator *accs[3];
    for (int k = 0; k < order; k++) {
      accs[k] = nb_forward_accumulator_begin(e);
      nb_forward_accumulator_watch(accs[k], p, nb_scalar(e, NB_F64, 1));
    }
    nb_tensor *r = nb_pow(e, p, nb_scalar(e, NB_F64, 3.5));
    for (int k = order - 1; k >= 0; k--) r = nb_forward_accumulator_jvp(accs[k], r); /* innermost first */
    for (int k = order - 1; k >= 0; k--) nb_forward_accumulator_end(accs[k]);
    check_scalar(r, want[order]);
    nb_ctx_free(e);
  }
}

/* f(x) = prod(tanh(x)^2), TF's testHVPCorrectness function. */
static nb_code tanh_prod(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  nb_tensor *t = nb_tanh(c, in[0]);
  out[0] = nb_prod(c, nb_mul(c, t, t), (const int[]){0}, 1, false);
  return nb_status(c);
}

/* H v by reverse over reverse: the Hessian's rows from a persistent outer tape over the
   inner tape's gradient, times v. */
static void back_over_back_hvp(nb_ctx *e, nb_tensor *x, const double *v, double *hv) {
  nb_tape *outer = nb_tape_begin(e, 1), *inner = nb_tape_begin(e, 0);
  nb_tape_watch(outer, x);
  nb_tape_watch(inner, x);
  nb_tensor *y = NULL, *g = NULL;
  tanh_prod(e, &x, 1, &y, 1, NULL);
  assert_int_equal(nb_tape_gradient(inner, &y, 1, &x, 1, NULL, &g), NB_OK);
  nb_tape_end(inner);
  for (int i = 0; i < 3; i++) {
    nb_tensor *gi = nb_strided_slice(e, g, (const int64_t[]){i}, (const int64_t[]){i + 1}, (const int64_t[]){1}, 1,
                                     &(nb_slice_masks){.shrink_axis_mask = 1}),
              *row = NULL;
    assert_int_equal(nb_tape_gradient(outer, &gi, 1, &x, 1, NULL, &row), NB_OK);
    hv[i] = 0;
    for (int j = 0; j < 3; j++) hv[i] += nb_item(row, j) * v[j];
  }
  nb_tape_end(outer);
}

/* testHVPCorrectness: forward over reverse (an accumulator around a tape) equals reverse
   over reverse, eagerly and traced in a graph. */
static void test_hvp_forward_over_reverse(void **state) {
  (void)state;
  static const double xs[] = {1, 2, 3}, vs[] = {3, 4, 5};
  nb_ctx *e = nb_eager_new();
  nb_tensor *x = tu_make(e, NB_F64, 1, TU_SHAPE(3), xs), *v = tu_make(e, NB_F64, 1, TU_SHAPE(3), vs), *hv = NULL;
  double want[3];
  back_over_back_hvp(e, x, vs, want);
  assert_int_equal(nb_hvp_fn(e, tanh_prod, NULL, &x, 1, &v, &hv), NB_OK);
  check_close(hv, want);

  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  nb_session *s = nb_session_new(g);
  nb_tensor *px = nb_placeholder(gc, NB_F64, 1, TU_SHAPE(3), "x"), *ghv = NULL, *val = NULL;
  assert_int_equal(
      nb_hvp_fn(gc, tanh_prod, NULL, &px, 1, &(nb_tensor *){tu_make(gc, NB_F64, 1, TU_SHAPE(3), vs)}, &ghv), NB_OK);
  assert_int_equal(nb_run(s, &px, &x, 1, &ghv, 1, &val), NB_OK);
  check_close(val, want);
  nb_tensor_free(val);
  nb_session_free(s);
  nb_ctx_free(gc);
  nb_graph_free(g);
  nb_ctx_free(e);
}

/* TF's _gradfwd, reverse over forward: a tape around an accumulator differentiates the
   JVP, with respect to the primal (d/dx (3.5 x^2.5 t)) and to the tangent (3.5 x^2.5). */
static void test_reverse_over_forward(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  nb_tensor *x = nb_scalar(e, NB_F64, 1.1), *t = nb_scalar(e, NB_F64, 0.6), *d[2] = {NULL, NULL};
  nb_tape *tape = nb_tape_begin(e, 0);
  nb_tape_watch(tape, x);
  nb_tape_watch(tape, t);
  nb_forward_accumulator *acc = nb_forward_accumulator_begin(e);
  nb_forward_accumulator_watch(acc, x, t);
  nb_tensor *jvp = nb_forward_accumulator_jvp(acc, nb_pow(e, x, nb_scalar(e, NB_F64, 3.5)));
  nb_forward_accumulator_end(acc);
  assert_int_equal(nb_tape_gradient(tape, &jvp, 1, (nb_tensor *[]){x, t}, 2, NULL, d), NB_OK);
  nb_tape_end(tape);
  check_scalar(jvp, 3.5 * pow(1.1, 2.5) * 0.6);
  check_scalar(d[0], 3.5 * 2.5 * pow(1.1, 1.5) * 0.6);
  check_scalar(d[1], 3.5 * pow(1.1, 2.5));
  nb_ctx_free(e);
}

/* ---- control flow and custom gradients ------------------------------------------------------ */

/* while i < 3: x = x * x: y = x^8, so J t = 8 x^7 t */
static nb_code below_three(nb_ctx *c, nb_tensor *const *vars, nb_tensor **pred, void *user) {
  (void)user;
  *pred = nb_less(c, vars[0], nb_scalar(c, NB_I32, 3));
  return nb_status(c);
}

static nb_code square_step(nb_ctx *c, nb_tensor *const *vars, nb_tensor **next, void *user) {
  (void)user;
  next[0] = nb_add(c, vars[0], nb_scalar(c, NB_I32, 1));
  next[1] = nb_mul(c, vars[1], vars[1]);
  return nb_status(c);
}

static void eighth_power_tangent(double *want) {
  for (int i = 0; i < 3; i++) want[i] = 8 * pow(x3[i], 7) * v3[i];
}

/* Eagerly the loop's body runs op by op, each carrying its tangent. */
static void test_eager_loop_carries_tangents(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  nb_tensor *x = tu_make(e, NB_F64, 1, TU_SHAPE(3), x3), *v = tu_make(e, NB_F64, 1, TU_SHAPE(3), v3), *out[2];
  nb_forward_accumulator *acc = nb_forward_accumulator_begin(e);
  nb_forward_accumulator_watch(acc, x, v);
  assert_int_equal(nb_while(e, below_three, square_step, NULL, (nb_tensor *[]){nb_scalar(e, NB_I32, 0), x}, 2, -1, out),
                   NB_OK);
  double want[3];
  eighth_power_tangent(want);
  check_close(nb_forward_accumulator_jvp(acc, out[1]), want);
  assert_null(nb_forward_accumulator_jvp(acc, out[0])); /* the int counter has none */
  nb_forward_accumulator_end(acc);
  nb_ctx_free(e);
}

/* In a graph: nb_jvp through a While node (its gradient transposed), and nb_jvp inside a
   loop body, traced into the body's function graph (a loop carrying tangents). */
static nb_code square_step_with_jvp(nb_ctx *c, nb_tensor *const *vars, nb_tensor **next, void *user) {
  (void)user;
  nb_tensor *sq = nb_mul(c, vars[1], vars[1]), *t = NULL;
  next[0] = nb_add(c, vars[0], nb_scalar(c, NB_I32, 1));
  next[1] = sq;
  nb_code code = nb_jvp(c, &sq, 1, &vars[1], 1, &vars[2], &t); /* d(x^2) = 2 x t */
  next[2] = t;
  return code;
}

static void test_graph_loops(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_session *s = nb_session_new(g);
  nb_tensor *x = nb_placeholder(c, NB_F64, 1, TU_SHAPE(3), "x"), *v = tu_make(c, NB_F64, 1, TU_SHAPE(3), v3);
  nb_tensor *out[3], *carried[3], *jvp = NULL, *vals[2];
  assert_int_equal(nb_while(c, below_three, square_step, NULL, (nb_tensor *[]){nb_scalar(c, NB_I32, 0), x}, 2, -1, out),
                   NB_OK);
  assert_int_equal(nb_jvp(c, &out[1], 1, &x, 1, &v, &jvp), NB_OK);
  assert_int_equal(nb_while(c, below_three, square_step_with_jvp, NULL, (nb_tensor *[]){nb_scalar(c, NB_I32, 0), x, v},
                            3, -1, carried),
                   NB_OK);
  nb_tensor *xv = tu_make(e, NB_F64, 1, TU_SHAPE(3), x3);
  assert_int_equal(nb_run(s, &x, &xv, 1, (nb_tensor *[]){jvp, carried[2]}, 2, vals), NB_OK);
  double want[3];
  eighth_power_tangent(want);
  check_close(vals[0], want);
  check_close(vals[1], want);
  nb_tensor_free(vals[0]);
  nb_tensor_free(vals[1]);
  nb_session_free(s);
  nb_ctx_free(c);
  nb_graph_free(g);
  nb_ctx_free(e);
}

/* A custom gradient has no forward rule: the accumulator transposes its gradient, so the
   JVP follows the user's gradient (here 3 x^2 dy for y = x^3), as TF's. */
static nb_code cube(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_mul(c, in[0], nb_square(c, in[0]));
  return nb_status(c);
}

static nb_code cube_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                         nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)nin, (void)out, (void)nout, (void)user;
  dxs[0] = nb_mul(c, dys[0], nb_mul(c, nb_scalar(c, NB_F64, 3), nb_square(c, in[0])));
  return nb_status(c);
}

static void test_custom_gradient_transposed(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  nb_tensor *x = tu_make(e, NB_F64, 1, TU_SHAPE(3), x3), *v = tu_make(e, NB_F64, 1, TU_SHAPE(3), v3), *y = NULL;
  nb_forward_accumulator *acc = nb_forward_accumulator_begin(e);
  nb_forward_accumulator_watch(acc, x, v);
  assert_int_equal(nb_custom_gradient(e, cube, cube_grad, NULL, &x, 1, &y, 1), NB_OK);
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = 3 * x3[i] * x3[i] * v3[i];
  check_close(nb_forward_accumulator_jvp(acc, y), want);
  nb_forward_accumulator_end(acc);
  nb_ctx_free(e);
}

/* ---- Jacobians in both modes ------------------------------------------------------------- */

/* f: R^2 -> R^3, (a, b) -> (a b, sin a, b^2): J = [[b, a], [cos a, 0], [0, 2 b]]; and its
   two-output restriction R^2 -> R^1 (sum): reverse mode. */
static nb_code wide(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout;
  nb_slice_masks m = {.shrink_axis_mask = 1};
  nb_tensor *a = nb_strided_slice(c, in[0], (const int64_t[]){0}, (const int64_t[]){1}, (const int64_t[]){1}, 1, &m);
  nb_tensor *b = nb_strided_slice(c, in[0], (const int64_t[]){1}, (const int64_t[]){2}, (const int64_t[]){1}, 1, &m);
  nb_tensor *parts[] = {nb_mul(c, a, b), nb_sin(c, a), nb_square(c, b)};
  out[0] = nb_pack(c, parts, user ? 1 : 3, 0);
  return nb_status(c);
}

static void check_jacobians(nb_ctx *c, nb_session *s, nb_tensor *x, nb_tensor *xv) {
  const double a = 0.3, b = -0.8;
  const double want_fwd[] = {b, a, cos(a), 0, 0, 2 * b}, want_rev[] = {b, a};
  nb_tensor *jf = NULL, *jr = NULL;
  assert_int_equal(nb_jacobian_fn(c, wide, NULL, x, &jf), NB_OK);
  assert_int_equal(nb_jacobian_fn(c, wide, (void *)1, x, &jr), NB_OK);
  nb_tensor *vals[2] = {jf, jr};
  if (s) assert_int_equal(nb_run(s, &x, &xv, 1, (nb_tensor *[]){jf, jr}, 2, vals), NB_OK);
  tu_check_shape(vals[0], NB_F64, 2, TU_SHAPE(3, 2));
  tu_check_shape(vals[1], NB_F64, 2, TU_SHAPE(1, 2));
  check_close(vals[0], want_fwd);
  check_close(vals[1], want_rev);
  for (int i = 0; i < 2 && s; i++) nb_tensor_free(vals[i]);
}

static void test_jacobian_fn(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  nb_tensor *xv = tu_make(e, NB_F64, 1, TU_SHAPE(2), TU_VALS(0.3, -0.8));
  check_jacobians(e, NULL, xv, xv);
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_session *s = nb_session_new(g);
  check_jacobians(c, s, nb_placeholder(c, NB_F64, 1, TU_SHAPE(2), "x"), xv);
  nb_session_free(s);
  nb_ctx_free(c);
  nb_graph_free(g);
  nb_ctx_free(e);
}

/* ---- forward- and reverse-mode Jacobians (nb_tape_jacobian, nb_jacobian) ---------------- */

/* y = tanh((W x) s + b) / q, q = 2 + sum(x^2): x [n], W [m, n], s [1, 2], b [1], y [m, 2].
   Reshape and Sum (linear rules reading int inputs), MatMul and Mul (bilinear), the
   broadcasting Mul and AddV2, Tanh and Square (symmetric), and RealDiv, whose rule reads
   its output, which a tape does not keep (the replay transposes its gradient instead). */
typedef struct dense_net {
  nb_tensor *w, *s, *b;
} dense_net;

static nb_tensor *dense_tanh(nb_ctx *c, const dense_net *p, nb_tensor *x) {
  int64_t n = nb_shape(x)[0];
  nb_tensor *h = nb_matmul(c, p->w, nb_reshape(c, x, (const int64_t[]){n, 1}, 2), false, false);
  nb_tensor *q = nb_add(c, nb_scalar(c, NB_F64, 2), nb_sum(c, nb_square(c, x), NULL, 0, false));
  return nb_real_div(c, nb_tanh(c, nb_add(c, nb_mul(c, h, p->s), p->b)), q);
}

/* The parameters in c (weights of a fixed pseudo-random stream) and x's value. */
static dense_net dense_params(nb_ctx *c, int64_t m, int64_t n, double *xv) {
  double w[150], sv[2] = {0.8, -1.3};
  tu_rng r = {0x9E3779B97F4A7C15ull};
  assert_true(m * n <= 150);
  for (int64_t i = 0; i < m * n; i++) w[i] = (double)(tu_rng_next(&r) % 2001) / 1000 - 1;
  for (int64_t j = 0; j < n; j++) xv[j] = (double)(tu_rng_next(&r) % 2001) / 2000 - 0.5;
  return (dense_net){tu_make(c, NB_F64, 2, TU_SHAPE(m, n), w), tu_make(c, NB_F64, 2, TU_SHAPE(1, 2), sv),
                     tu_make(c, NB_F64, 1, TU_SHAPE(1), TU_VALS(0.1))};
}

/* Element (i, k, j) of the Jacobian is a + b with a = (1 - y_ik^2 q^2) s_k W_ij / q and
   b = -y_ik 2 x_j / q: each mode computes it from the same recorded values in at most 16
   roundings (forward: a column's MatMul has one nonzero term; reverse: a row's seed
   likewise), so the modes agree within tu_check_sums' bound for 16 terms over |a| + |b|. */
static void check_modes_agree(const nb_tensor *fwd, const nb_tensor *rev, const dense_net *p, const double *xv,
                              int64_t m, int64_t n) {
  double *want = malloc((size_t)(2 * m * n) * sizeof *want), *sums = malloc((size_t)(2 * m * n) * sizeof *sums);
  assert_true(want && sums);
  double q = 2;
  for (int64_t j = 0; j < n; j++) q += xv[j] * xv[j];
  for (int64_t i = 0; i < m; i++) {
    double h = 0;
    for (int64_t j = 0; j < n; j++) h += nb_item(p->w, i * n + j) * xv[j];
    for (int64_t k = 0; k < 2; k++) {
      double t = tanh(h * nb_item(p->s, k) + 0.1);
      for (int64_t j = 0; j < n; j++) {
        double a = (1 - t * t) * nb_item(p->s, k) * nb_item(p->w, i * n + j) / q, b = -t / q * 2 * xv[j] / q;
        sums[(i * 2 + k) * n + j] = fabs(a) + fabs(b);
        want[(i * 2 + k) * n + j] = nb_item(rev, (i * 2 + k) * n + j);
      }
    }
  }
  tu_check_shape(fwd, NB_F64, 3, TU_SHAPE(m, 2, n));
  tu_check_shape(rev, NB_F64, 3, TU_SHAPE(m, 2, n));
  tu_check_sums(fwd, want, NB_F64, 16, sums);
  free(want);
  free(sums);
}

/* One tape's Jacobian in mode (persistent, so the three modes see the same records). */
static nb_tensor *tape_jacobian(nb_tape *t, nb_tensor *y, nb_tensor *x, nb_jacobian_mode mode, nb_jacobian_path *path) {
  nb_tensor *jac = NULL;
  assert_int_equal(nb_tape_set_jacobian_mode(t, mode), NB_OK);
  assert_int_equal(nb_tape_jacobian(t, y, x, &jac), NB_OK);
  *path = nb_tape_jacobian_path(t);
  return jac;
}

/* Eagerly: forced forward and reverse agree; AUTO takes forward exactly when x is smaller. */
static void check_tape_modes(int64_t m, int64_t n) {
  nb_ctx *e = nb_eager_new();
  double xv[50];
  dense_net p = dense_params(e, m, n, xv);
  nb_tensor *x = tu_make(e, NB_F64, 1, TU_SHAPE(n), xv);
  nb_tape *t = nb_tape_begin(e, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = dense_tanh(e, &p, x);
  nb_jacobian_path fwd_path, rev_path, auto_path;
  nb_tensor *fwd = tape_jacobian(t, y, x, NB_JACOBIAN_MODE_FORWARD, &fwd_path);
  nb_tensor *rev = tape_jacobian(t, y, x, NB_JACOBIAN_MODE_REVERSE, &rev_path);
  nb_tensor *aut = tape_jacobian(t, y, x, NB_JACOBIAN_MODE_AUTO, &auto_path);
  assert_int_equal(fwd_path, NB_JACOBIAN_FORWARD);
  assert_int_not_equal(rev_path, NB_JACOBIAN_FORWARD);
  assert_int_equal(auto_path, n < 2 * m ? NB_JACOBIAN_FORWARD : rev_path);
  check_modes_agree(fwd, rev, &p, xv, m, n);
  check_modes_agree(aut, rev, &p, xv, m, n);
  nb_tape_end(t);
  nb_ctx_free(e);
}

static void test_tape_jacobian_modes(void **state) {
  (void)state;
  check_tape_modes(50, 3); /* wide: 100 outputs of 3 inputs */
  check_tape_modes(3, 50); /* tall: 6 outputs of 50 inputs */
}

static nb_tensor *graph_jacobian(nb_ctx *c, nb_tensor *y, nb_tensor *x, nb_jacobian_mode mode, const char *scope) {
  nb_tensor *jac = NULL;
  assert_int_equal(nb_jacobian(c, y, x, mode, &jac), NB_OK);
  assert_non_null(jac);
  if (strncmp(nb_tensor_node_name(jac), scope, strlen(scope)) != 0)
    fail_msg("the Jacobian is '%s', not under '%s'", nb_tensor_node_name(jac), scope);
  return jac;
}

/* In a graph: the modes' Jacobians agree at run time; AUTO builds the smaller one (its
   name scope says which: jacfwd or jacrev, made unique by a suffix). */
static void check_graph_modes(int64_t m, int64_t n) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  double xv[50];
  dense_net p = dense_params(c, m, n, xv), pe = dense_params(e, m, n, xv);
  nb_tensor *x = nb_placeholder(c, NB_F64, 1, TU_SHAPE(n), "x"), *y = dense_tanh(c, &p, x);
  nb_tensor *fetch[3] = {graph_jacobian(c, y, x, NB_JACOBIAN_MODE_FORWARD, "jacfwd"),
                         graph_jacobian(c, y, x, NB_JACOBIAN_MODE_REVERSE, "jacrev"),
                         graph_jacobian(c, y, x, NB_JACOBIAN_MODE_AUTO, n < 2 * m ? "jacfwd" : "jacrev")};
  nb_session *s = nb_session_new(g);
  nb_tensor *xval = tu_make(e, NB_F64, 1, TU_SHAPE(n), xv), *got[3];
  assert_int_equal(nb_run(s, &x, &xval, 1, fetch, 3, got), NB_OK);
  check_modes_agree(got[0], got[1], &pe, xv, m, n);
  check_modes_agree(got[2], got[1], &pe, xv, m, n);
  for (int i = 0; i < 3; i++) nb_tensor_free(got[i]);
  nb_session_free(s);
  nb_ctx_free(c);
  nb_ctx_free(e);
  nb_graph_free(g);
}

static void test_graph_jacobian_modes(void **state) {
  (void)state;
  check_graph_modes(50, 3);
  check_graph_modes(3, 50);
}

/* The forward and reverse tape Jacobians fail alike: int sources, a one-shot tape's second
   use; a recorded target unconnected to the source gives zeros in both. */
static void check_tape_errors(nb_jacobian_mode mode) {
  nb_ctx *e = nb_eager_new();
  nb_tensor *x = tu_make(e, NB_F64, 1, TU_SHAPE(3), x3),
            *w = tu_make(e, NB_F64, 1, TU_SHAPE(5), TU_VALS(1, 2, 3, 4, 5)), *jac = x;
  nb_tensor *k = nb_cast(e, x, NB_I32);
  nb_tape *t = nb_tape_begin(e, 0);
  assert_int_equal(nb_tape_set_jacobian_mode(t, mode), NB_OK);
  nb_tape_watch(t, x);
  nb_tape_watch(t, w);
  nb_tensor *y = nb_tile(e, nb_sin(e, x), (const int64_t[]){4}, 1), *unconnected = nb_exp(e, w);
  assert_int_equal(nb_tape_jacobian(t, y, k, &jac), NB_DTYPE);
  assert_null(jac);
  tu_check_error(e, NB_DTYPE, "nb_tape_jacobian", "int32");
  assert_int_equal(nb_tape_jacobian(t, unconnected, x, &jac), NB_OK);
  tu_check(jac, NB_F64, 2, TU_SHAPE(5, 3), (const double[15]){0}, 0);
  assert_int_equal(nb_tape_jacobian(t, y, x, &jac), NB_INVALID);
  tu_check_error(e, NB_INVALID, "nb_tape_jacobian", "used already");
  assert_int_equal(nb_tape_set_jacobian_mode(t, (nb_jacobian_mode)7), NB_INVALID);
  tu_check_error(e, NB_INVALID, "nb_tape_set_jacobian_mode", NULL);
  nb_tape_end(t);
  nb_ctx_free(e);
}

static void test_jacobian_mode_errors(void **state) {
  (void)state;
  check_tape_errors(NB_JACOBIAN_MODE_FORWARD);
  check_tape_errors(NB_JACOBIAN_MODE_REVERSE);
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  nb_tensor *x = nb_placeholder(c, NB_F64, 1, TU_SHAPE(3), "x"), *jac = x;
  for (int mode = NB_JACOBIAN_MODE_AUTO; mode <= NB_JACOBIAN_MODE_REVERSE; mode++) {
    assert_int_equal(nb_jacobian(c, nb_cast(c, x, NB_I32), x, (nb_jacobian_mode)mode, &jac), NB_DTYPE);
    tu_check_error(c, NB_DTYPE, "nb_jacobian", "int32");
    nb_tensor *u = tu_unknown_dims(c, NB_F64, 1);
    assert_int_equal(nb_jacobian(c, nb_sin(c, u), x, (nb_jacobian_mode)mode, &jac), NB_SHAPE);
    tu_check_error(c, NB_SHAPE, "nb_jacobian", "fully known");
  }
  assert_int_equal(nb_jacobian(c, x, x, (nb_jacobian_mode)7, &jac), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_jacobian_mode", NULL);
  assert_int_equal(nb_jacobian(e, x, x, NB_JACOBIAN_MODE_AUTO, &jac), NB_UNIMPLEMENTED);
  tu_check_error(e, NB_UNIMPLEMENTED, "nb_jacobian", "graph context");
  nb_ctx_free(c);
  nb_ctx_free(e);
  nb_graph_free(g);
}

/* The batch Jacobian in both modes: row b of y = tanh(x_b W) (x [4, 2], W [2, 5]) depends
   on row b of x only; forward seeds element j of every row at once. */
static void test_batch_jacobian_modes(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  nb_tensor *x = tu_make(e, NB_F64, 2, TU_SHAPE(4, 2), TU_VALS(0.1, -0.4, 0.7, 0.2, -0.3, 0.5, 0.9, -0.8));
  nb_tensor *w = tu_make(e, NB_F64, 2, TU_SHAPE(2, 5), TU_VALS(0.5, -1, 0.25, 0.75, -0.5, 1, 0.3, -0.6, 0.2, 0.4));
  nb_tape *t = nb_tape_begin(e, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_tanh(e, nb_matmul(e, x, w, false, false)), *jac[2];
  for (int i = 0; i < 2; i++) {
    nb_tape_set_jacobian_mode(t, i ? NB_JACOBIAN_MODE_REVERSE : NB_JACOBIAN_MODE_AUTO);
    assert_int_equal(nb_tape_batch_jacobian(t, y, x, &jac[i]), NB_OK);
    tu_check_shape(jac[i], NB_F64, 3, TU_SHAPE(4, 5, 2));
    assert_int_equal(nb_tape_jacobian_path(t) == NB_JACOBIAN_FORWARD, i == 0);
  }
  /* (b, k, j) = (1 - y_bk^2) W_jk, a few roundings after the same y in each mode */
  double want[40];
  for (int b = 0; b < 4; b++)
    for (int k = 0; k < 5; k++)
      for (int j = 0; j < 2; j++) {
        double ybk = nb_item(y, b * 5 + k);
        want[(b * 5 + k) * 2 + j] = (1 - ybk * ybk) * nb_item(w, j * 5 + k);
      }
  for (int i = 0; i < 2; i++) check_close(jac[i], want);
  nb_tape_end(t);
  nb_ctx_free(e);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_jvp_closed_form),
      cmocka_unit_test(test_two_watched),
      cmocka_unit_test(test_watch_errors),
      cmocka_unit_test(test_nested_accumulators),
      cmocka_unit_test(test_higher_order_pure_forward),
      cmocka_unit_test(test_hvp_forward_over_reverse),
      cmocka_unit_test(test_reverse_over_forward),
      cmocka_unit_test(test_eager_loop_carries_tangents),
      cmocka_unit_test(test_graph_loops),
      cmocka_unit_test(test_custom_gradient_transposed),
      cmocka_unit_test(test_jacobian_fn),
      cmocka_unit_test(test_tape_jacobian_modes),
      cmocka_unit_test(test_graph_jacobian_modes),
      cmocka_unit_test(test_jacobian_mode_errors),
      cmocka_unit_test(test_batch_jacobian_modes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
