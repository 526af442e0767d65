/* nb_while and nb_cond: eager loops and branches (values, tape gradients through them,
   nested tapes for second order), graph mode (While and If nodes run by sessions, equal
   to eager; captures, nesting, relaxed shapes), and the errors for malformed callbacks. */
#include "graphutil.h"

/* ---- loop callbacks ------------------------------------------------------------------------ */

/* vars: [i (int32 scalar), x]; user: the outer tensor c. Runs while i < 3:
   x <- 0.5 x^2 + c, i <- i + 1 (a polynomial iteration). */
static nb_code poly_cond(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)user;
  *pred = nb_less(c, v[0], nb_scalar(c, NB_I32, 3));
  return nb_status(c);
}

static nb_code poly_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  nb_tensor *k = user;
  next[0] = nb_add(c, v[0], nb_scalar(c, NB_I32, 1));
  next[1] = nb_add(c, nb_mul(c, nb_square(c, v[1]), nb_scalar(c, NB_F64, 0.5)), k);
  return nb_status(c);
}

static nb_tensor *poly_unrolled(nb_ctx *c, nb_tensor *x, nb_tensor *k, int steps) {
  for (int i = 0; i < steps; i++) x = nb_add(c, nb_mul(c, nb_square(c, x), nb_scalar(c, NB_F64, 0.5)), k);
  return x;
}

static nb_code always(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)v, (void)user;
  *pred = nb_tensor_from(c, NB_BOOL, 0, NULL, (const uint8_t[]){1});
  return nb_status(c);
}

/* vars: [y]; user: x. y <- y * x. */
static nb_code times_x(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  next[0] = nb_mul(c, v[0], (nb_tensor *)user);
  return nb_status(c);
}

static const double x3[3] = {0.3, -0.8, 1.1}, k3[3] = {0.2, 0.1, -0.4};

static void test_eager_poly_values_and_tape(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), x3), *k = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), k3);
  nb_tape *t = nb_tape_begin(f->e, 1);
  nb_tape_watch(t, x);
  nb_tape_watch(t, k);
  nb_tensor *vars[2] = {nb_scalar(f->e, NB_I32, 0), x}, *out[2];
  assert_int_equal(nb_while(f->e, poly_cond, poly_body, k, vars, 2, -1, out), NB_OK);
  nb_tensor *ref = poly_unrolled(f->e, x, k, 3);
  assert_int_equal(nb_item(out[0], 0), 3);
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = nb_item(ref, i);
  tu_check(out[1], NB_F64, 1, TU_SHAPE(3), want, 1e-15);
  nb_tensor *ly = nb_sum(f->e, out[1], NULL, 0, false), *lr = nb_sum(f->e, ref, NULL, 0, false);
  nb_tensor *srcs[2] = {x, k}, *g[2], *gr[2];
  assert_int_equal(nb_tape_gradient(t, &ly, 1, srcs, 2, NULL, g), NB_OK);
  assert_int_equal(nb_tape_gradient(t, &lr, 1, srcs, 2, NULL, gr), NB_OK);
  for (int j = 0; j < 2; j++) {
    for (int i = 0; i < 3; i++) want[i] = nb_item(gr[j], i);
    tu_check(g[j], NB_F64, 1, TU_SHAPE(3), want, 1e-14);
  }
  nb_tape_end(t);
}

static void test_eager_max_iters(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_scalar(f->e, NB_F64, 1.5), *y = nb_scalar(f->e, NB_F64, 1), *out;
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, x);
  assert_int_equal(nb_while(f->e, always, times_x, x, &y, 1, 4, &out), NB_OK);
  tu_check(out, NB_F64, 0, NULL, TU_VALS(pow(1.5, 4)), 1e-15);
  nb_tensor *dx;
  assert_int_equal(nb_tape_gradient(t, &out, 1, &x, 1, NULL, &dx), NB_OK);
  tu_check(dx, NB_F64, 0, NULL, TU_VALS(4 * pow(1.5, 3)), 1e-14);
  nb_tape_end(t);
  /* max_iters 0 runs nothing; the result is a new handle of the initial value */
  assert_int_equal(nb_while(f->e, always, times_x, x, &y, 1, 0, &out), NB_OK);
  assert_ptr_not_equal(out, y);
  tu_check(out, NB_F64, 0, NULL, TU_VALS(1), 0);
  nb_tensor_free(out);
  tu_check(y, NB_F64, 0, NULL, TU_VALS(1), 0);
}

/* Second order through a loop: y = x^3 by three multiplications; nested tapes give 6x. */
static void test_eager_second_order(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_scalar(f->e, NB_F64, 0.7), *one = nb_scalar(f->e, NB_F64, 1), *y, *dx, *d2x;
  nb_tape *outer = nb_tape_begin(f->e, 0), *inner = nb_tape_begin(f->e, 0);
  nb_tape_watch(outer, x);
  nb_tape_watch(inner, x);
  assert_int_equal(nb_while(f->e, always, times_x, x, &one, 1, 3, &y), NB_OK);
  assert_int_equal(nb_tape_gradient(inner, &y, 1, &x, 1, NULL, &dx), NB_OK);
  tu_check(dx, NB_F64, 0, NULL, TU_VALS(3 * 0.49), 1e-14);
  assert_int_equal(nb_tape_gradient(outer, &dx, 1, &x, 1, NULL, &d2x), NB_OK);
  tu_check(d2x, NB_F64, 0, NULL, TU_VALS(6 * 0.7), 1e-14);
  nb_tape_end(inner);
  nb_tape_end(outer);
}

/* Nested loops: the outer body runs an inner loop (y <- y * x, twice) per iteration, so
   three outer iterations give x^6; the inner body uses the outer user pointer. */
static nb_code nested_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  return nb_while(c, always, times_x, user, v, 1, 2, next);
}

static void test_eager_nested_loops(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_scalar(f->e, NB_F64, 1.1), *one = nb_scalar(f->e, NB_F64, 1), *y, *dx;
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, x);
  assert_int_equal(nb_while(f->e, always, nested_body, x, &one, 1, 3, &y), NB_OK);
  tu_check(y, NB_F64, 0, NULL, TU_VALS(pow(1.1, 6)), 1e-14);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_OK);
  tu_check(dx, NB_F64, 0, NULL, TU_VALS(6 * pow(1.1, 5)), 1e-13);
  nb_tape_end(t);
}

/* ---- cond callbacks ------------------------------------------------------------------------ */

static nb_code sq_branch(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)user;
  out[0] = nb_square(c, in[0]);
  out[1] = in[1]; /* passed through */
  return nb_status(c);
}

static nb_code sin_branch(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  out[0] = nb_mul(c, nb_sin(c, in[0]), (nb_tensor *)user);
  out[1] = nb_neg(c, in[1]);
  return nb_status(c);
}

static void test_eager_cond_both_branches(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_scalar(f->e, NB_F64, 0.9), *w = nb_scalar(f->e, NB_F64, 2), *z = nb_scalar(f->e, NB_F64, 5);
  for (int taken = 0; taken < 2; taken++) {
    nb_tensor *pred = nb_tensor_from(f->e, NB_BOOL, 0, NULL, (const uint8_t[]){(uint8_t)taken}), *in[2] = {x, z}, *out[2];
    nb_tape *t = nb_tape_begin(f->e, 0);
    nb_tape_watch(t, x);
    assert_int_equal(nb_cond(f->e, pred, sq_branch, sin_branch, w, in, 2, out, 2), NB_OK);
    assert_ptr_not_equal(out[1], z);
    tu_check(out[0], NB_F64, 0, NULL, TU_VALS(taken ? 0.81 : 2 * sin(0.9)), 1e-15);
    tu_check(out[1], NB_F64, 0, NULL, TU_VALS(taken ? 5 : -5), 0);
    nb_tensor *dx;
    assert_int_equal(nb_tape_gradient(t, &out[0], 1, &x, 1, NULL, &dx), NB_OK);
    tu_check(dx, NB_F64, 0, NULL, TU_VALS(taken ? 1.8 : 2 * cos(0.9)), 1e-15);
    nb_tape_end(t);
  }
}

/* ---- malformed callbacks ------------------------------------------------------------------- */

static nb_code to_f32_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)user;
  next[0] = nb_identity(c, v[0]);
  next[1] = nb_cast(c, v[1], NB_F32);
  return nb_status(c);
}

static nb_code grow_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)user;
  nb_tensor *parts[2] = {v[0], v[0]};
  next[0] = nb_concat(c, parts, 2, 0);
  return nb_status(c);
}

static nb_code null_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)c, (void)v, (void)next, (void)user;
  return NB_OK;
}

static nb_code vector_cond(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)user;
  *pred = nb_less(c, v[0], nb_scalar(c, NB_F64, 3));
  return nb_status(c);
}

static nb_code failing_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)v, (void)next, (void)user;
  return nb_set_error(c, NB_UNIMPLEMENTED, "this body refuses");
}

/* The malformed-body checks every mode shares (c eager or graph). */
static void check_body_errors(nb_ctx *c, nb_tensor *x2, nb_tensor *v3) {
  nb_tensor *vars[2] = {nb_scalar(c, NB_F64, 0), x2}, *out[2];
  assert_int_not_equal(nb_while(c, always, to_f32_body, NULL, vars, 2, 2, out), NB_OK);
  tu_check_error(c, NB_DTYPE, "loop variable 1", "from float64 to float32");
  assert_null(out[0]);
  assert_int_not_equal(nb_while(c, always, grow_body, NULL, &x2, 1, 2, out), NB_OK);
  tu_check_error(c, NB_SHAPE, "loop variable 0", "from shape [2] to [4]");
  assert_int_not_equal(nb_while(c, always, null_body, NULL, &x2, 1, 2, out), NB_OK);
  tu_check_error(c, NB_INVALID, "nb_while", "loop variable 0 NULL");
  assert_int_not_equal(nb_while(c, vector_cond, times_x, x2, &v3, 1, 2, out), NB_OK);
  tu_check_error(c, NB_INVALID, "predicate must be a bool scalar", "[3]");
  assert_int_not_equal(nb_while(c, always, failing_body, NULL, &x2, 1, 2, out), NB_OK);
  tu_check_error(c, NB_UNIMPLEMENTED, "this body refuses", NULL);
  assert_int_not_equal(nb_while(c, always, times_x, x2, &x2, 0, 2, out), NB_OK);
  tu_check_error(c, NB_INVALID, "nb_while", "0 loop variables");
  const nb_shape_spec bad = {1, (const int64_t[]){3}};
  assert_int_not_equal(nb_while_ex(c, always, grow_body, NULL, &x2, 1, 2, &(nb_while_opts){&bad}, out), NB_OK);
  tu_check_error(c, NB_SHAPE, "loop variable 0 has shape [2]", "does not admit");
}

static nb_code cast_branch(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)user;
  out[0] = nb_cast(c, in[0], NB_F32);
  out[1] = in[1];
  return nb_status(c);
}

static void test_errors_eager(void **state) {
  gu_fixture *f = *state;
  check_body_errors(f->e, tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 2)),
                    tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3)));
  nb_tensor *x = nb_scalar(f->e, NB_F64, 1), *out[2];
  assert_int_not_equal(nb_cond(f->e, x, sq_branch, sin_branch, NULL, &x, 1, out, 2), NB_OK);
  tu_check_error(f->e, NB_INVALID, "nb_cond", "bool scalar");
  assert_int_not_equal(nb_cond(f->e, NULL, sq_branch, sin_branch, NULL, &x, 1, out, 2), NB_OK);
  tu_check_error(f->e, NB_INVALID, "nb_cond", "NULL predicate");
}

static void test_errors_graph(void **state) {
  gu_fixture *f = *state;
  check_body_errors(f->c, nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "x"),
                    nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "v"));
  /* branches must agree on dtypes */
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "s"), *p = nb_placeholder(f->c, NB_BOOL, 0, NULL, "p");
  nb_tensor *in[2] = {x, x}, *out[2];
  assert_int_not_equal(nb_cond(f->c, p, cast_branch, sq_branch, x, in, 2, out, 2), NB_OK);
  tu_check_error(f->c, NB_DTYPE, "output 0 is float32 in the then branch", "float64 in the else branch");
}

/* Relaxed shapes: a vector that doubles each iteration, declared [-1]. */
static void test_relaxed_shape(void **state) {
  gu_fixture *f = *state;
  const nb_shape_spec any = {1, (const int64_t[]){-1}};
  nb_while_opts o = {&any};
  nb_tensor *x = tu_make(f->e, NB_F64, 1, TU_SHAPE(1), TU_VALS(2)), *y;
  assert_int_equal(nb_while_ex(f->e, always, grow_body, NULL, &x, 1, 3, &o, &y), NB_OK);
  tu_check(y, NB_F64, 1, TU_SHAPE(8), TU_VALS(2, 2, 2, 2, 2, 2, 2, 2), 0);
  nb_tensor *xg = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(1), "x"), *yg;
  assert_int_equal(nb_while_ex(f->c, always, grow_body, NULL, &xg, 1, 3, &o, &yg), NB_OK);
  assert_int_equal(nb_rank(yg), 1);
  assert_int_equal(nb_shape(yg)[0], -1);
  nb_tensor *r = gu_run1(f, xg, x, yg);
  tu_check(r, NB_F64, 1, TU_SHAPE(8), TU_VALS(2, 2, 2, 2, 2, 2, 2, 2), 0);
  nb_tensor_free(r);
}

/* ---- graph mode ------------------------------------------------------------------------------ */

static void test_graph_poly_equals_eager(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x"), *k = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "k");
  nb_tensor *vars[2] = {nb_scalar(f->c, NB_I32, 0), x}, *out[2];
  assert_int_equal(nb_while(f->c, poly_cond, poly_body, k, vars, 2, -1, out), NB_OK);
  tu_check_shape(out[1], NB_F64, 1, TU_SHAPE(3));
  assert_string_equal(nb_tensor_node_name(out[1]), "While");
  nb_tensor *xv = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), x3), *kv = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), k3);
  nb_tensor *ref = poly_unrolled(f->e, xv, kv, 3), *feeds[2] = {x, k}, *vals[2] = {xv, kv};
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = nb_item(ref, i);
  for (int rep = 0; rep < 2; rep++) { /* a second run reuses the cached plans */
    nb_tensor *r = gu_run(f, feeds, vals, 2, out[1]), *n = gu_run(f, feeds, vals, 2, out[0]);
    tu_check(r, NB_F64, 1, TU_SHAPE(3), want, 0);
    tu_check(n, NB_I32, 0, NULL, TU_VALS(3), 0);
    nb_tensor_free(r);
    nb_tensor_free(n);
  }
  /* no gradient yet: the pass says so, and the tools list the node */
  nb_tensor *loss = nb_sum(f->c, out[1], NULL, 0, false), *dx;
  assert_int_not_equal(nb_gradients(f->c, &loss, 1, &x, 1, NULL, &dx), NB_OK);
  tu_check_error(f->c, NB_NO_GRADIENT, "No gradient defined", "While");
  char report[512];
  nb_find_non_differentiable(f->g, &x, 1, &loss, 1, report, sizeof report);
  assert_non_null(strstr(report, "While"));
  assert_int_equal(nb_graph_to_dot(f->g, "/dev/null"), NB_OK);
}

static void test_graph_max_iters(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *one = nb_scalar(f->c, NB_F64, 1), *y;
  assert_int_equal(nb_while(f->c, always, times_x, x, &one, 1, 5, &y), NB_OK);
  nb_tensor *r = gu_run1(f, x, nb_scalar(f->e, NB_F64, 1.2), y);
  tu_check(r, NB_F64, 0, NULL, TU_VALS(pow(1.2, 5)), 1e-15);
  nb_tensor_free(r);
}

/* Nested loops in a graph: the inner body captures x, a tensor two levels out. */
static void test_graph_nested_loops(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *one = nb_scalar(f->c, NB_F64, 1), *y;
  assert_int_equal(nb_while(f->c, always, nested_body, x, &one, 1, 3, &y), NB_OK);
  nb_tensor *r = gu_run1(f, x, nb_scalar(f->e, NB_F64, 1.1), y);
  tu_check(r, NB_F64, 0, NULL, TU_VALS(pow(1.1, 6)), 1e-14);
  nb_tensor_free(r);
}

static void test_graph_cond_both_branches(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *w = nb_placeholder(f->c, NB_F64, 0, NULL, "w");
  nb_tensor *p = nb_placeholder(f->c, NB_BOOL, 0, NULL, "p"), *z = nb_scalar(f->c, NB_F64, 5), *in[2] = {x, z}, *out[2];
  assert_int_equal(nb_cond(f->c, p, sq_branch, sin_branch, w, in, 2, out, 2), NB_OK);
  for (int taken = 0; taken < 2; taken++) {
    nb_tensor *feeds[3] = {x, w, p};
    nb_tensor *vals[3] = {nb_scalar(f->e, NB_F64, 0.9), nb_scalar(f->e, NB_F64, 2),
                          nb_tensor_from(f->e, NB_BOOL, 0, NULL, (const uint8_t[]){(uint8_t)taken})};
    nb_tensor *r0 = gu_run(f, feeds, vals, 3, out[0]), *r1 = gu_run(f, feeds, vals, 3, out[1]);
    tu_check(r0, NB_F64, 0, NULL, TU_VALS(taken ? 0.81 : 2 * sin(0.9)), 1e-15);
    tu_check(r1, NB_F64, 0, NULL, TU_VALS(taken ? 5 : -5), 0);
    nb_tensor_free(r0);
    nb_tensor_free(r1);
  }
}

/* A cond inside a loop: y <- y > 1 ? y / 2 : 3 y, five times, from the user's x. */
static nb_code half(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)user;
  out[0] = nb_mul(c, in[0], nb_scalar(c, NB_F64, 0.5));
  return nb_status(c);
}

static nb_code triple(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  out[0] = nb_mul(c, in[0], (nb_tensor *)user);
  return nb_status(c);
}

static nb_code cond_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  return nb_cond(c, nb_greater(c, v[0], nb_scalar(c, NB_F64, 1)), half, triple, user, v, 1, next, 1);
}

static double cond_loop_ref(double y, double three, int steps) {
  for (int i = 0; i < steps; i++) y = y > 1 ? y / 2 : y * three;
  return y;
}

static void test_cond_in_loop(void **state) {
  gu_fixture *f = *state;
  nb_tensor *three = nb_scalar(f->e, NB_F64, 3), *x = nb_scalar(f->e, NB_F64, 0.7), *y;
  assert_int_equal(nb_while(f->e, always, cond_body, three, &x, 1, 5, &y), NB_OK);
  tu_check(y, NB_F64, 0, NULL, TU_VALS(cond_loop_ref(0.7, 3, 5)), 1e-15);
  nb_tensor *xg = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *tg = nb_placeholder(f->c, NB_F64, 0, NULL, "three"), *yg;
  assert_int_equal(nb_while(f->c, always, cond_body, tg, &xg, 1, 5, &yg), NB_OK);
  nb_tensor *feeds[2] = {xg, tg}, *vals[2] = {x, three}, *r = gu_run(f, feeds, vals, 2, yg);
  tu_check(r, NB_F64, 0, NULL, TU_VALS(cond_loop_ref(0.7, 3, 5)), 0);
  nb_tensor_free(r);
}

/* A tanh RNN cell over T steps, eager and graph: h <- tanh(h W + x_t U + b), x_t sliced
   by the iteration counter. */
typedef struct rnn {
  nb_tensor *w, *u, *b, *xs; /* xs: [T, batch, in] */
} rnn;

static nb_code rnn_cond(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)user;
  *pred = nb_less(c, v[0], nb_scalar(c, NB_I64, 4));
  return nb_status(c);
}

static nb_code rnn_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  rnn *r = user;
  nb_tensor *xt = nb_squeeze(c, nb_gather(c, r->xs, nb_reshape(c, v[0], TU_SHAPE(1), 1), 0, 0), (const int[]){0}, 1);
  next[0] = nb_add(c, v[0], nb_scalar(c, NB_I64, 1));
  next[1] = nb_tanh(c, nb_add(c, nb_add(c, nb_matmul(c, v[1], r->w, false, false), nb_matmul(c, xt, r->u, false, false)), r->b));
  return nb_status(c);
}

static nb_tensor *det(nb_ctx *c, int rank, const int64_t *shape, double scale) {
  double v[64];
  int64_t n = gu_count(rank, shape);
  for (int64_t i = 0; i < n; i++) v[i] = scale * sin(1.3 * (double)i + 0.4);
  return tu_make(c, NB_F64, rank, shape, v);
}

static void test_rnn_graph_equals_eager(void **state) {
  gu_fixture *f = *state;
  rnn re = {det(f->e, 2, TU_SHAPE(3, 3), 0.6), det(f->e, 2, TU_SHAPE(2, 3), 0.8), det(f->e, 1, TU_SHAPE(3), 0.1),
            det(f->e, 3, TU_SHAPE(4, 2, 2), 1)};
  nb_tensor *h0 = det(f->e, 2, TU_SHAPE(2, 3), 0.5), *vars[2] = {nb_scalar(f->e, NB_I64, 0), h0}, *out[2];
  assert_int_equal(nb_while(f->e, rnn_cond, rnn_body, &re, vars, 2, -1, out), NB_OK);
  rnn rg = {nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(3, 3), "w"), nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "u"),
            nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "b"), nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(4, 2, 2), "xs")};
  nb_tensor *hg = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "h0"), *gvars[2] = {nb_scalar(f->c, NB_I64, 0), hg}, *gout[2];
  assert_int_equal(nb_while(f->c, rnn_cond, rnn_body, &rg, gvars, 2, -1, gout), NB_OK);
  tu_check_shape(gout[1], NB_F64, 2, TU_SHAPE(2, 3));
  nb_tensor *feeds[5] = {rg.w, rg.u, rg.b, rg.xs, hg}, *vals[5] = {re.w, re.u, re.b, re.xs, h0};
  nb_tensor *feed5[5], *val5[5];
  memcpy(feed5, feeds, sizeof feeds);
  memcpy(val5, vals, sizeof vals);
  nb_tensor *r = NULL;
  assert_int_equal(nb_run(f->s, feed5, val5, 5, &gout[1], 1, &r), NB_OK);
  double want[6];
  for (int i = 0; i < 6; i++) want[i] = nb_item(out[1], i);
  tu_check(r, NB_F64, 2, TU_SHAPE(2, 3), want, 1e-15);
  nb_tensor_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_eager_poly_values_and_tape, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_eager_max_iters, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_eager_second_order, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_eager_nested_loops, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_eager_cond_both_branches, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_errors_eager, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_errors_graph, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_relaxed_shape, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_poly_equals_eager, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_max_iters, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_nested_loops, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_cond_both_branches, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_cond_in_loop, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_rnn_graph_equals_eager, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
