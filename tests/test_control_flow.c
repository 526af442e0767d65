/* nb_while and nb_cond: eager loops and branches (values, tape gradients through them,
   nested tapes for second order), graph mode (While and If nodes run by sessions, equal
   to eager; captures, nesting, relaxed shapes), and the errors for malformed callbacks. */
#include "graphutil.h"

#include "../src/func/func.h" /* node output counts and function graphs: what gradients added */

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

/* Second order through a loop: y = x^3 by three multiplications; nested tapes, or one
   persistent tape, give 6x. */
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
  /* one persistent tape, recording its own backward pass, gives the same */
  nb_tape *t = nb_tape_begin(f->e, 1);
  nb_tape_watch(t, x);
  assert_int_equal(nb_while(f->e, always, times_x, x, &one, 1, 3, &y), NB_OK);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_OK);
  assert_int_equal(nb_tape_gradient(t, &dx, 1, &x, 1, NULL, &d2x), NB_OK);
  tu_check(d2x, NB_F64, 0, NULL, TU_VALS(6 * 0.7), 1e-14);
  nb_tape_end(t);
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
    nb_tensor *pred = nb_tensor_from(f->e, NB_BOOL, 0, NULL, (const uint8_t[]){(uint8_t)taken}), *in[2] = {x, z},
              *out[2];
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

/* v <- tanh([v, v]): the gradient reads the argument (Concat's shapes) and the result (Tanh's). */
static nb_code grow_tanh_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)user;
  nb_tensor *parts[2] = {v[0], v[0]};
  next[0] = nb_tanh(c, nb_concat(c, parts, 2, 0));
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
  const nb_shape_spec deep = {9, (const int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}};
  assert_int_not_equal(nb_while_ex(c, always, grow_body, NULL, &x2, 1, 2, &(nb_while_opts){&deep}, out), NB_OK);
  tu_check_error(c, NB_SHAPE, "declared shape of loop variable 0", "rank 9");
  const nb_shape_spec bad = {1, (const int64_t[]){3}};
  assert_int_not_equal(nb_while_ex(c, always, grow_body, NULL, &x2, 1, 2, &(nb_while_opts){&bad}, out), NB_OK);
  tu_check_error(c, NB_SHAPE, "loop variable 0 has shape [2]", "does not admit");
}

static nb_code null_branch(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)c, (void)in, (void)out, (void)user;
  return NB_OK;
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
  nb_tensor *no = nb_tensor_from(f->e, NB_BOOL, 0, NULL, (const uint8_t[]){0});
  assert_int_not_equal(nb_cond(f->e, no, null_branch, null_branch, NULL, &x, 1, out, 1), NB_OK);
  tu_check_error(f->e, NB_INVALID, "nb_cond: the else branch left output 0 NULL", NULL);
  nb_attr dt = nb_attr_type("dtype", NB_F64);
  nb_tensor *any = NULL; /* a graph tensor of unknown rank as an eager predicate */
  assert_int_equal(nb_op(f->c, "Placeholder", NULL, 0, &dt, 1, &any, 1), NB_OK);
  assert_int_not_equal(nb_cond(f->e, any, sq_branch, sin_branch, NULL, &x, 1, out, 2), NB_OK);
  tu_check_error(f->e, NB_INVALID, "nb_cond: the predicate must be a bool scalar", "got float64 <unknown rank>");
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
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x"),
            *k = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "k");
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
  /* the tools handle the node */
  nb_tensor *loss = nb_sum(f->c, out[1], NULL, 0, false);
  char report[512];
  assert_int_equal(nb_find_non_differentiable(f->g, &x, 1, &loss, 1, report, sizeof report), NB_OK);
  assert_string_equal(report, "");
  assert_int_equal(nb_graph_to_dot(f->g, "/dev/null"), NB_OK);
}

static nb_code count_to_5(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)user;
  *pred = nb_less(c, v[0], nb_scalar(c, NB_I32, 5));
  return nb_status(c);
}

/* vars [i, a, b, c]: a and b each read by two ops, so only the later reader may write
   over them; c passes through unchanged. */
static nb_code shuffle_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)user;
  nb_tensor *two = nb_scalar(c, NB_F64, 2);
  next[0] = nb_add(c, v[0], nb_scalar(c, NB_I32, 1));
  next[1] = nb_add(c, nb_mul(c, v[1], two), v[2]);
  next[2] = nb_sub(c, v[1], nb_mul(c, v[2], nb_scalar(c, NB_F64, 0.5)));
  next[3] = v[3];
  return nb_status(c);
}

/* The loop hands each iteration's results to the next body run, whose ops may update
   them in place: the graph loop still equals the eager one. */
static void test_graph_in_place_loop_vars(void **state) {
  gu_fixture *f = *state;
  nb_tensor *a0 = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, -2, 0.5));
  nb_tensor *b0 = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.25, 3, -1));
  nb_tensor *ev[4] = {nb_scalar(f->e, NB_I32, 0), a0, b0, a0}, *eo[4];
  assert_int_equal(nb_while(f->e, count_to_5, shuffle_body, NULL, ev, 4, -1, eo), NB_OK);
  nb_tensor *a = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "a"),
            *b = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "b");
  nb_tensor *gv[4] = {nb_scalar(f->c, NB_I32, 0), a, b, a}, *go[4];
  assert_int_equal(nb_while(f->c, count_to_5, shuffle_body, NULL, gv, 4, -1, go), NB_OK);
  nb_tensor *feeds[2] = {a, b}, *vals[2] = {a0, b0};
  for (int i = 1; i < 4; i++) {
    nb_tensor *r = gu_run(f, feeds, vals, 2, go[i]);
    double want[3] = {nb_item(eo[i], 0), nb_item(eo[i], 1), nb_item(eo[i], 2)};
    tu_check(r, NB_F64, 1, TU_SHAPE(3), want, 0);
    nb_tensor_free(r);
  }
  tu_check(a0, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, -2, 0.5), 0); /* the fed values are untouched */
  tu_check(b0, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.25, 3, -1), 0);
}

/* Runs y = nb_while(always, body, x, 1, max_iters) in a graph at x = xv; checks y = want. */
static void check_scalar_loop(gu_fixture *f, nb_body_fn body, int64_t max_iters, double xv, double want, double tol) {
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *one = nb_scalar(f->c, NB_F64, 1), *y;
  assert_int_equal(nb_while(f->c, always, body, x, &one, 1, max_iters, &y), NB_OK);
  nb_tensor *r = gu_run1(f, x, nb_scalar(f->e, NB_F64, xv), y);
  tu_check(r, NB_F64, 0, NULL, TU_VALS(want), tol);
  nb_tensor_free(r);
}

static void test_graph_max_iters(void **state) { check_scalar_loop(*state, times_x, 5, 1.2, pow(1.2, 5), 1e-15); }

/* Nested loops in a graph: the inner body captures x, a tensor two levels out. */
static void test_graph_nested_loops(void **state) {
  check_scalar_loop(*state, nested_body, 3, 1.1, pow(1.1, 6), 1e-14);
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
  next[1] = nb_tanh(
      c, nb_add(c, nb_add(c, nb_matmul(c, v[1], r->w, false, false), nb_matmul(c, xt, r->u, false, false)), r->b));
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
            nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "b"),
            nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(4, 2, 2), "xs")};
  nb_tensor *hg = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "h0"), *gvars[2] = {nb_scalar(f->c, NB_I64, 0), hg},
            *gout[2];
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

/* Callbacks that fail with a code alone, leaving the context's status unset. */
static nb_code silent_cond(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)c, (void)v, (void)pred, (void)user;
  return NB_INVALID;
}

static nb_code silent_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)c, (void)v, (void)next, (void)user;
  return NB_UNIMPLEMENTED;
}

/* Each callback of nb_while and nb_cond that fails without a message leaves its code as
   the context's status, with a message naming the callback, in eager and graph contexts
   alike (p: a bool scalar of c that is true when c is eager). */
static void check_silent_callbacks(nb_ctx *c, nb_tensor *x, nb_tensor *p) {
  nb_tensor *out[1] = {x};
  assert_int_equal(nb_while(c, silent_cond, times_x, x, &x, 1, 2, out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_while: cond: the callback returned NB_INVALID without", NULL);
  assert_null(out[0]);
  assert_int_equal(nb_while(c, always, silent_body, x, &x, 1, 2, out), NB_UNIMPLEMENTED);
  tu_check_error(c, NB_UNIMPLEMENTED, "nb_while: body: the callback returned NB_UNIMPLEMENTED without", NULL);
  assert_int_equal(nb_cond(c, p, silent_body, half, x, &x, 1, out, 1), NB_UNIMPLEMENTED);
  tu_check_error(c, NB_UNIMPLEMENTED, "nb_cond: then branch: the callback returned NB_UNIMPLEMENTED without", NULL);
  assert_null(out[0]);
}

static void test_silent_callback_failures(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_scalar(f->e, NB_F64, 2), *out[1];
  check_silent_callbacks(f->e, x, nb_tensor_from(f->e, NB_BOOL, 0, NULL, (const uint8_t[]){1}));
  nb_tensor *no = nb_tensor_from(f->e, NB_BOOL, 0, NULL, (const uint8_t[]){0});
  assert_int_equal(nb_cond(f->e, no, half, silent_body, x, &x, 1, out, 1), NB_UNIMPLEMENTED);
  tu_check_error(f->e, NB_UNIMPLEMENTED, "nb_cond: else branch: the callback returned NB_UNIMPLEMENTED without", NULL);
  nb_tensor *xg = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *p = nb_placeholder(f->c, NB_BOOL, 0, NULL, "p");
  check_silent_callbacks(f->c, xg, p);
  assert_int_equal(nb_cond(f->c, p, half, silent_body, xg, &xg, 1, out, 1), NB_UNIMPLEMENTED);
  tu_check_error(f->c, NB_UNIMPLEMENTED, "nb_cond: else branch: the callback returned NB_UNIMPLEMENTED without", NULL);
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
  assert_int_not_equal(nb_cond(f->c, p, half, null_branch, x, in, 1, out, 1), NB_OK);
  tu_check_error(f->c, NB_INVALID, "nb_cond: else branch left result 0 NULL", NULL);
  /* run-time errors: a predicate that turns out not to be a scalar, and a body op failing */
  nb_attr dt = nb_attr_type("dtype", NB_F64);
  nb_tensor *any = NULL, *y = NULL, *r = NULL;
  assert_int_equal(nb_op(f->c, "Placeholder", NULL, 0, &dt, 1, &any, 1), NB_OK);
  assert_int_equal(nb_while(f->c, vector_cond, times_x, x, &any, 1, 2, &y), NB_OK);
  assert_int_not_equal(nb_cond(f->c, any, half, half, x, in, 1, out, 1), NB_OK);
  tu_check_error(f->c, NB_INVALID, "nb_cond: the predicate must be a bool scalar", "got float64 <unknown rank>");
  nb_tensor *v2 = tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 2)), *xv = nb_scalar(f->e, NB_F64, 2);
  nb_tensor *feeds[2] = {any, x}, *vals[2] = {v2, xv};
  assert_int_equal(nb_run(f->s, feeds, vals, 2, &y, 1, &r), NB_INVALID);
  assert_non_null(
      strstr(nb_session_error(f->s), "While (node 'While'): the predicate must be a bool scalar, got bool [2]"));
  rnn short_rnn = {
      nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(3, 3), "w"), nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "u"),
      nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "b"), nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(3, 2, 2), "xs")};
  nb_tensor *vars[2] = {nb_scalar(f->c, NB_I64, 0), nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "h0")}, *o2[2];
  assert_int_equal(nb_while(f->c, rnn_cond, rnn_body, &short_rnn, vars, 2, -1, o2), NB_OK); /* 4 steps over 3 inputs */
  nb_tensor *rf[5] = {short_rnn.w, short_rnn.u, short_rnn.b, short_rnn.xs, vars[1]};
  nb_tensor *rv[5] = {det(f->e, 2, TU_SHAPE(3, 3), 1), det(f->e, 2, TU_SHAPE(2, 3), 1), det(f->e, 1, TU_SHAPE(3), 1),
                      det(f->e, 3, TU_SHAPE(3, 2, 2), 1), det(f->e, 2, TU_SHAPE(2, 3), 1)};
  assert_int_equal(nb_run(f->s, rf, rv, 5, &o2[1], 1, &r), NB_INVALID);
  assert_non_null(strstr(nb_session_error(f->s), "body: "));
  assert_non_null(strstr(nb_session_error(f->s), "GatherV2"));
  assert_null(r);
}

/* ---- gradients in graph mode ------------------------------------------------------------------ */

/* Runs a fetch with feeds, returning element i of the result as a double. */
static nb_tensor *run_n(gu_fixture *f, nb_tensor *const *feeds, nb_tensor *const *vals, int n, nb_tensor *fetch) {
  nb_tensor *r = NULL, *fd[8], *vl[8];
  for (int i = 0; i < n; i++) fd[i] = feeds[i], vl[i] = vals[i];
  if (nb_run(f->s, fd, vl, n, &fetch, 1, &r)) fail_msg("nb_run: %s", nb_session_error(f->s));
  return r;
}

static void check_same(gu_fixture *f, nb_tensor *const *feeds, nb_tensor *const *vals, int n, nb_tensor *a,
                       nb_tensor *b, double tol) {
  nb_tensor *ra = run_n(f, feeds, vals, n, a), *rb = run_n(f, feeds, vals, n, b);
  assert_int_equal(nb_num_elements(ra), nb_num_elements(rb));
  double want[64];
  assert_true(nb_num_elements(rb) <= 64);
  for (int64_t i = 0; i < nb_num_elements(rb); i++) want[i] = nb_item(rb, i);
  tu_check_vals(ra, want, tol);
  nb_tensor_free(ra);
  nb_tensor_free(rb);
}

static int accumulators(const nb_tensor *while_out) {
  const nbgraph_node *n = &while_out->graph->nodes[while_out->node];
  return n->nout - n->nin;
}

/* _MatMulAdd nodes in the bodies of g's While nodes: the reverse loops' fused weight sums. */
static int fused_sums(const nb_graph *g) {
  int n = 0;
  for (int32_t i = 0; i < g->nnodes; i++) {
    if (strcmp(g->nodes[i].def->name, "While") != 0) continue;
    const nb_graph *body = nbfunc_from_bits(g->nodes[i].attr[2].i)->g;
    for (int32_t j = 0; j < body->nnodes; j++) n += strcmp(body->nodes[j].def->name, "_MatMulAdd") == 0;
  }
  return n;
}

/* The while gradient equals the unrolled loop's, for x and the captured k, and gradcheck agrees. */
static void test_grad_poly_equals_unrolled(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x"),
            *k = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "k");
  nb_tensor *vars[2] = {nb_scalar(f->c, NB_I32, 0), x}, *out[2];
  assert_int_equal(nb_while(f->c, poly_cond, poly_body, k, vars, 2, -1, out), NB_OK);
  nb_tensor *loss = nb_sum(f->c, nb_square(f->c, out[1]), NULL, 0, false);
  nb_tensor *ref = nb_sum(f->c, nb_square(f->c, poly_unrolled(f->c, x, k, 3)), NULL, 0, false);
  nb_tensor *xs[2] = {x, k}, *d[2], *dr[2];
  assert_int_equal(nb_gradients(f->c, &loss, 1, xs, 2, NULL, d), NB_OK);
  assert_int_equal(nb_gradients(f->c, &ref, 1, xs, 2, NULL, dr), NB_OK);
  nb_tensor *vals[2] = {tu_make(f->e, NB_F64, 1, TU_SHAPE(3), x3), tu_make(f->e, NB_F64, 1, TU_SHAPE(3), k3)};
  for (int i = 0; i < 2; i++) check_same(f, xs, vals, 2, d[i], dr[i], 1e-13);
  double err = 1;
  assert_int_equal(nb_gradcheck(f->c, loss, xs, 2, vals, &err), NB_OK);
  assert_true(err < 1e-6);
  /* second order: the gradient of sum(d loss/dx) equals the unrolled one's */
  nb_tensor *s1 = nb_sum(f->c, d[0], NULL, 0, false), *s2 = nb_sum(f->c, dr[0], NULL, 0, false), *h[2], *hr[2];
  if (nb_gradients(f->c, &s1, 1, xs, 2, NULL, h)) fail_msg("%s", nb_error(f->c));
  assert_int_equal(nb_gradients(f->c, &s2, 1, xs, 2, NULL, hr), NB_OK);
  for (int i = 0; i < 2; i++) check_same(f, xs, vals, 2, h[i], hr[i], 1e-12);
  assert_int_equal(nb_gradcheck(f->c, s1, xs, 2, vals, &err), NB_OK);
  assert_true(err < 1e-6);
}

/* y <- y + c accumulates nothing: its gradient reads no intermediate. */
static nb_code add_k(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  next[0] = nb_add(c, v[0], (nb_tensor *)user);
  return nb_status(c);
}

static void test_grad_accumulates_nothing_for_add(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "x"),
            *k = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "k"), *y;
  assert_int_equal(nb_while(f->c, always, add_k, k, &x, 1, 7, &y), NB_OK);
  nb_tensor *loss = nb_sum(f->c, y, NULL, 0, false), *xs[2] = {x, k}, *d[2];
  assert_int_equal(nb_gradients(f->c, &loss, 1, xs, 2, NULL, d), NB_OK);
  assert_int_equal(accumulators(y), 0);
  nb_tensor *vals[2] = {tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 2)),
                        tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, 4))};
  nb_tensor *r0 = run_n(f, xs, vals, 2, d[0]), *r1 = run_n(f, xs, vals, 2, d[1]);
  tu_check(r0, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 1), 0);
  tu_check(r1, NB_F64, 1, TU_SHAPE(2), TU_VALS(7, 7), 0); /* summed over the 7 iterations */
  nb_tensor_free(r0);
  nb_tensor_free(r1);
}

/* max_iters hit: y = x^5; first and second order; and nested loops: y = x^6. */
static void test_grad_max_iters_and_nested(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *one = nb_scalar(f->c, NB_F64, 1), *y5, *y6, *d[2], *dd[2];
  assert_int_equal(nb_while(f->c, always, times_x, x, &one, 1, 5, &y5), NB_OK);
  assert_int_equal(nb_while(f->c, always, nested_body, x, &one, 1, 3, &y6), NB_OK);
  assert_int_equal(nb_gradients(f->c, &y5, 1, &x, 1, NULL, &d[0]), NB_OK);
  assert_int_equal(nb_gradients(f->c, &y6, 1, &x, 1, NULL, &d[1]), NB_OK);
  assert_int_equal(nb_gradients(f->c, &d[0], 1, &x, 1, NULL, &dd[0]), NB_OK);
  assert_int_equal(nb_gradients(f->c, &d[1], 1, &x, 1, NULL, &dd[1]), NB_OK);
  /* the max_iters loop against the same multiplications unrolled, both orders */
  nb_tensor *u = one, *du, *ddu;
  for (int i = 0; i < 5; i++) u = nb_mul(f->c, u, x);
  assert_int_equal(nb_gradients(f->c, &u, 1, &x, 1, NULL, &du), NB_OK);
  assert_int_equal(nb_gradients(f->c, &du, 1, &x, 1, NULL, &ddu), NB_OK);
  nb_tensor *v = nb_scalar(f->e, NB_F64, 1.1);
  check_same(f, &x, &v, 1, d[0], du, 1e-14);
  check_same(f, &x, &v, 1, dd[0], ddu, 1e-14);
  const double want[4] = {5 * pow(1.1, 4), 6 * pow(1.1, 5), 20 * pow(1.1, 3), 30 * pow(1.1, 4)};
  nb_tensor *fetch[4] = {d[0], d[1], dd[0], dd[1]};
  for (int i = 0; i < 4; i++) {
    nb_tensor *r = gu_run1(f, x, v, fetch[i]);
    tu_check(r, NB_F64, 0, NULL, &want[i], 1e-12);
    nb_tensor_free(r);
  }
}

/* A loop that runs no iteration: empty accumulators, the gradient passes dy through. */
static void test_grad_zero_iterations(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *y, *d;
  nb_tensor *vars[2] = {nb_scalar(f->c, NB_I32, 3), x}, *out[2];
  assert_int_equal(nb_while(f->c, poly_cond, poly_body, x, vars, 2, -1, out), NB_OK); /* 3 < 3 fails at once */
  y = nb_mul(f->c, out[1], out[1]);
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &d), NB_OK);
  assert_true(accumulators(out[1]) > 0);
  nb_tensor *r = gu_run1(f, x, nb_scalar(f->e, NB_F64, 0.5), d);
  tu_check(r, NB_F64, 0, NULL, TU_VALS(1), 0);
  nb_tensor_free(r);
}

/* The RNN: graph gradients (nb_while) equal the eager tape's through the eager loop, and
   the loop accumulates only what its gradient reads. */
static void test_grad_rnn_graph_equals_eager(void **state) {
  gu_fixture *f = *state;
  rnn re = {det(f->e, 2, TU_SHAPE(3, 3), 0.6), det(f->e, 2, TU_SHAPE(2, 3), 0.8), det(f->e, 1, TU_SHAPE(3), 0.1),
            det(f->e, 3, TU_SHAPE(4, 2, 2), 1)};
  nb_tensor *h0 = det(f->e, 2, TU_SHAPE(2, 3), 0.5), *vars[2] = {nb_scalar(f->e, NB_I64, 0), h0}, *out[2];
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tensor *srcs[5] = {re.w, re.u, re.b, re.xs, h0}, *ge[5];
  for (int i = 0; i < 5; i++) nb_tape_watch(t, srcs[i]);
  assert_int_equal(nb_while(f->e, rnn_cond, rnn_body, &re, vars, 2, -1, out), NB_OK);
  nb_tensor *le = nb_mean(f->e, nb_square(f->e, out[1]), NULL, 0, false);
  assert_int_equal(nb_tape_gradient(t, &le, 1, srcs, 5, NULL, ge), NB_OK);
  nb_tape_end(t);
  rnn rg = {nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(3, 3), "w"), nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "u"),
            nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "b"),
            nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(4, 2, 2), "xs")};
  nb_tensor *hg = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "h0"), *gvars[2] = {nb_scalar(f->c, NB_I64, 0), hg},
            *gout[2];
  assert_int_equal(nb_while(f->c, rnn_cond, rnn_body, &rg, gvars, 2, -1, gout), NB_OK);
  nb_tensor *lg = nb_mean(f->c, nb_square(f->c, gout[1]), NULL, 0, false), *xs[5] = {rg.w, rg.u, rg.b, rg.xs, hg},
            *gg[5];
  assert_int_equal(nb_gradients(f->c, &lg, 1, xs, 5, NULL, gg), NB_OK);
  /* the reverse loop adds x_t^T dz_t into the sums for W and U with one GEMM each, and
     its dz W^T and dz U^T read W and U transposed once before the loop */
  assert_int_equal(fused_sums(f->c->graph), 2);
  int transposes = 0;
  for (int32_t i = 0; i < f->g->nnodes; i++) transposes += strcmp(f->g->nodes[i].def->name, "Transpose") == 0;
  assert_int_equal(transposes, 2);
  for (int i = 0; i < 5; i++) {
    nb_tensor *r = run_n(f, xs, srcs, 5, gg[i]);
    double want[64];
    for (int64_t j = 0; j < nb_num_elements(ge[i]); j++) want[j] = nb_item(ge[i], j);
    tu_check_vals(r, want, 1e-13);
    nb_tensor_free(r);
  }
  /* and equal the same cell unrolled in the graph */
  nb_tensor *uv[2] = {nb_scalar(f->c, NB_I64, 0), hg}, *un[2], *gu[5];
  for (int step = 0; step < 4; step++) {
    assert_int_equal(rnn_body(f->c, uv, un, &rg), NB_OK);
    uv[0] = un[0], uv[1] = un[1];
  }
  nb_tensor *lu = nb_mean(f->c, nb_square(f->c, uv[1]), NULL, 0, false);
  assert_int_equal(nb_gradients(f->c, &lu, 1, xs, 5, NULL, gu), NB_OK);
  for (int i = 0; i < 5; i++) check_same(f, xs, srcs, 5, gg[i], gu[i], 1e-13);
  /* second order: d(sum of dL/dW)/d(W, h0) equals the unrolled cell's */
  nb_tensor *s1 = nb_sum(f->c, gg[0], NULL, 0, false), *s2 = nb_sum(f->c, gu[0], NULL, 0, false), *h1[5], *h2[5];
  nb_tensor *wrt[2] = {rg.w, hg};
  assert_int_equal(nb_gradients(f->c, &s1, 1, wrt, 2, NULL, h1), NB_OK);
  assert_int_equal(nb_gradients(f->c, &s2, 1, wrt, 2, NULL, h2), NB_OK);
  for (int i = 0; i < 2; i++) check_same(f, xs, srcs, 5, h1[i], h2[i], 1e-12);
  /* what the gradient reads per step: h (MatMul's for W), the Tanh output, x_t (MatMul's
     for U) and the Gather index (its gradient for xs) */
  assert_int_equal(accumulators(gout[1]), 4);
  double err = 1;
  assert_int_equal(nb_gradcheck(f->c, lg, xs, 5, srcs, &err), NB_OK);
  assert_true(err < 1e-6);
}

/* The RNN loop in f's graph with a gradient for its w (so the loop stacks accumulators):
   fetch[0] its final h, fetch[1..4] its accumulators; feeds and values for a run. */
static void rnn_loop_with_grad(gu_fixture *f, nb_tensor **fetch, nb_tensor **feeds, nb_tensor **vals) {
  rnn rg = {nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(3, 3), "w"), nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "u"),
            nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "b"),
            nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(4, 2, 2), "xs")};
  nb_tensor *hg = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "h0"), *gvars[2] = {nb_scalar(f->c, NB_I64, 0), hg},
            *gout[2];
  assert_int_equal(nb_while(f->c, rnn_cond, rnn_body, &rg, gvars, 2, -1, gout), NB_OK);
  nb_tensor *lg = nb_sum(f->c, gout[1], NULL, 0, false), *dw = NULL;
  assert_int_equal(nb_gradients(f->c, &lg, 1, &rg.w, 1, NULL, &dw), NB_OK);
  const nbgraph_node *loop = &f->g->nodes[gout[1]->node];
  assert_int_equal(loop->nout - loop->nin, 4);
  fetch[0] = gout[1];
  for (int a = 0; a < 4; a++) fetch[1 + a] = nbgraph_handle(f->c, f->g, gout[1]->node, loop->nin + a);
  nb_tensor *in[5] = {rg.w, rg.u, rg.b, rg.xs, hg};
  nb_tensor *v[5] = {det(f->e, 2, TU_SHAPE(3, 3), 0.6), det(f->e, 2, TU_SHAPE(2, 3), 0.8),
                     det(f->e, 1, TU_SHAPE(3), 0.1), det(f->e, 3, TU_SHAPE(4, 2, 2), 1),
                     det(f->e, 2, TU_SHAPE(2, 3), 0.5)};
  memcpy(feeds, in, sizeof in);
  memcpy(vals, v, sizeof v);
}

/* The RNN loop's stacks of h_{t-1} (MatMul's for W) and of h_t (Tanh's output) are one
   block [h0, h_1, ..., h_T] seen as two views one row apart. */
static void test_grad_rnn_shares_h_stack(void **state) {
  gu_fixture *f = *state;
  nb_tensor *fetch[5], *feeds[5], *vals[5], *val[4];
  rnn_loop_with_grad(f, fetch, feeds, vals);
  assert_int_equal(nb_run(f->s, feeds, vals, 5, fetch + 1, 4, val), NB_OK);
  int h = -1, y = -1; /* the stack starting with h0, the one starting with h_1 */
  for (int a = 0; a < 4; a++)
    if (nb_rank(val[a]) == 3 && nb_shape(val[a])[2] == 3) *(nb_item(val[a], 0) == nb_item(vals[4], 0) ? &h : &y) = a;
  assert_true(h >= 0 && y >= 0);
  tu_check_shape(val[h], NB_F64, 3, TU_SHAPE(4, 2, 3));
  tu_check_shape(val[y], NB_F64, 3, TU_SHAPE(4, 2, 3));
  for (int i = 0; i < 6; i++) assert_true(nb_item(val[h], i) == nb_item(vals[4], i));
  for (int i = 0; i < 18; i++) assert_true(nb_item(val[h], 6 + i) == nb_item(val[y], i));
  assert_ptr_equal(val[h]->buf->next, val[y]->buf->next);
  assert_ptr_equal((const double *)val[h]->buf->data + 6, (const double *)val[y]->buf->data);
  for (int a = 0; a < 4; a++) nb_tensor_free(val[a]);
}

/* The RNN body's Tanh writes h_t straight into its row of that stack (the loop copies
   nothing per step): the loop's final h_T is the stack's last row, not a copy of it. */
static void test_grad_rnn_stacks_in_place(void **state) {
  gu_fixture *f = *state;
  nb_tensor *fetch[5], *feeds[5], *vals[5], *val[5];
  rnn_loop_with_grad(f, fetch, feeds, vals);
  for (int rep = 0; rep < 2; rep++) { /* the first run sizes the stacks, the second reuses the size */
    assert_int_equal(nb_run(f->s, feeds, vals, 5, fetch, 5, val), NB_OK);
    int y = -1; /* the stack [h_1, ..., h_4] */
    for (int a = 1; a < 5; a++)
      if (nb_rank(val[a]) == 3 && nb_shape(val[a])[2] == 3 && nb_item(val[a], 0) != nb_item(vals[4], 0)) y = a;
    assert_true(y > 0);
    assert_ptr_equal(nb_data(val[0]), (const double *)nb_data(val[y]) + 3 * 6);
    for (int i = 0; i < 6; i++) assert_true(nb_item(val[0], i) == nb_item(val[y], 18 + i));
    for (int a = 0; a < 5; a++) nb_tensor_free(val[a]);
  }
}

/* Gradients through an If (both branches, the captured w) and a cond inside a loop. */
static void test_grad_cond(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *w = nb_placeholder(f->c, NB_F64, 0, NULL, "w");
  nb_tensor *p = nb_placeholder(f->c, NB_BOOL, 0, NULL, "p"), *z = nb_scalar(f->c, NB_F64, 5), *in[2] = {x, z}, *out[2];
  assert_int_equal(nb_cond(f->c, p, sq_branch, sin_branch, w, in, 2, out, 2), NB_OK);
  nb_tensor *xs[2] = {x, w}, *d[2], *dd;
  assert_int_equal(nb_gradients(f->c, &out[0], 1, xs, 2, NULL, d), NB_OK);
  /* as cond_v2: the If now also outputs sin(x), which the else branch's gradient reads
     (Mul's); the then branch's reads only x, an input. The gradient If's else branch
     takes it instead of computing Sin again. */
  const nbgraph_node *n = &f->g->nodes[out[0]->node];
  assert_int_equal(n->nout, 2 + 1);
  const nb_function *ge = nbfunc_from_bits(f->g->nodes[d[0]->node].attr[2].i);
  for (int32_t i = 0; i < ge->g->nnodes; i++) assert_string_not_equal(ge->g->nodes[i].def->name, "Sin");
  assert_int_equal(nb_gradients(f->c, &d[0], 1, &x, 1, NULL, &dd), NB_OK);
  for (int taken = 0; taken < 2; taken++) {
    nb_tensor *feeds[3] = {x, w, p};
    nb_tensor *vals[3] = {nb_scalar(f->e, NB_F64, 0.9), nb_scalar(f->e, NB_F64, 2),
                          nb_tensor_from(f->e, NB_BOOL, 0, NULL, (const uint8_t[]){(uint8_t)taken})};
    const double want[3] = {taken ? 1.8 : 2 * cos(0.9), taken ? 0 : sin(0.9), taken ? 2 : -2 * sin(0.9)};
    nb_tensor *fetch[3] = {d[0], d[1], dd};
    for (int i = 0; i < 3; i++) {
      nb_tensor *r = run_n(f, feeds, vals, 3, fetch[i]);
      tu_check(r, NB_F64, 0, NULL, &want[i], 1e-14);
      nb_tensor_free(r);
    }
  }
  /* gradcheck on each side of a predicate computed from x itself */
  nb_tensor *px = nb_greater(f->c, x, nb_scalar(f->c, NB_F64, 0.5)), *in2[2] = {x, z}, *o2[2];
  assert_int_equal(nb_cond(f->c, px, sq_branch, sin_branch, w, in2, 2, o2, 2), NB_OK);
  nb_tensor *l = nb_add(f->c, o2[0], o2[1]);
  for (int side = 0; side < 2; side++) {
    nb_tensor *vals[2] = {nb_scalar(f->e, NB_F64, side ? 0.9 : 0.2), nb_scalar(f->e, NB_F64, 1.7)};
    double err = 1;
    assert_int_equal(nb_gradcheck(f->c, l, xs, 2, vals, &err), NB_OK);
    assert_true(err < 1e-6);
  }
  /* a cond in a loop: the graph gradient equals the eager tape's */
  nb_tensor *three = nb_scalar(f->e, NB_F64, 3), *xv = nb_scalar(f->e, NB_F64, 0.7), *ye, *dxe;
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, xv);
  assert_int_equal(nb_while(f->e, always, cond_body, three, &xv, 1, 5, &ye), NB_OK);
  assert_int_equal(nb_tape_gradient(t, &ye, 1, &xv, 1, NULL, &dxe), NB_OK);
  nb_tape_end(t);
  nb_tensor *tg = nb_placeholder(f->c, NB_F64, 0, NULL, "three"), *yg, *dxg;
  assert_int_equal(nb_while(f->c, always, cond_body, tg, &x, 1, 5, &yg), NB_OK);
  assert_int_equal(nb_gradients(f->c, &yg, 1, &x, 1, NULL, &dxg), NB_OK);
  nb_tensor *feeds[2] = {x, tg}, *vals[2] = {xv, three}, *r = run_n(f, feeds, vals, 2, dxg);
  tu_check(r, NB_F64, 0, NULL, TU_VALS(nb_item(dxe, 0)), 1e-14);
  nb_tensor_free(r);
}

/* A loop inside a cond: then y = x^3 by a loop, else 2x. */
static nb_code cube_branch(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)user;
  nb_tensor *one = nb_scalar(c, NB_F64, 1);
  return nb_while(c, always, times_x, in[0], &one, 1, 3, out);
}

static nb_code double_branch(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)user;
  out[0] = nb_mul(c, in[0], nb_scalar(c, NB_F64, 2));
  return nb_status(c);
}

static void test_grad_loop_in_cond(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *p = nb_placeholder(f->c, NB_BOOL, 0, NULL, "p"), *y, *d,
            *dd;
  assert_int_equal(nb_cond(f->c, p, cube_branch, double_branch, NULL, &x, 1, &y, 1), NB_OK);
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &d), NB_OK);
  assert_int_equal(nb_gradients(f->c, &d, 1, &x, 1, NULL, &dd), NB_OK);
  for (int taken = 0; taken < 2; taken++) {
    nb_tensor *feeds[2] = {x, p},
              *vals[2] = {nb_scalar(f->e, NB_F64, 0.8),
                          nb_tensor_from(f->e, NB_BOOL, 0, NULL, (const uint8_t[]){(uint8_t)taken})};
    const double want[3] = {taken ? 0.512 : 1.6, taken ? 3 * 0.64 : 2, taken ? 6 * 0.8 : 0};
    nb_tensor *fetch[3] = {y, d, dd};
    for (int i = 0; i < 3; i++) {
      nb_tensor *r = run_n(f, feeds, vals, 2, fetch[i]);
      tu_check(r, NB_F64, 0, NULL, &want[i], 1e-14);
      nb_tensor_free(r);
    }
  }
}

/* ---- relaxed shapes in gradients (TF's testWhileGrad_Shape) ---------------------------------- */

/* vars [i, v]; user: x. v <- x * v while i < 5: v = v0 x^5 (v0 may broadcast to x's shape). */
static nb_code times_x_5(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  next[0] = nb_add(c, v[0], nb_scalar(c, NB_I32, 1));
  next[1] = nb_mul(c, (nb_tensor *)user, v[1]);
  return nb_status(c);
}

/* v0 x^5 by the loop, v declared `decl`, in c (x a placeholder or a value). */
static nb_tensor *tf_loop(nb_ctx *c, nb_tensor *x, nb_tensor *v0, const nb_shape_spec *decl) {
  nb_tensor *vars[2] = {nb_scalar(c, NB_I32, 0), v0}, *out[2];
  const nb_shape_spec shapes[2] = {{0, NULL}, *decl};
  if (nb_while_ex(c, count_to_5, times_x_5, x, vars, 2, -1, &(nb_while_opts){shapes}, out))
    fail_msg("nb_while_ex: %s", nb_error(c));
  return out[1];
}

/* TF's testWhileGrad_Shape with v0 of n twos: d sum(2 x^5)/dx = 10 x^4, [810, 2560] at
   x = [3, 4], and x's unknown dim stays unknown; d sum(10 x^4)/dx = 40 x^3. Gradcheck
   agrees at both orders, and an eager tape gives the same. */
static void check_tf_while_grad_shape(gu_fixture *f, int n, const nb_shape_spec *decl) {
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(-1), "x"), *dx, *d2x;
  nb_tensor *v0 = nb_tensor_from(f->c, NB_F64, 1, TU_SHAPE(n), TU_VALS(2, 2)), *y = tf_loop(f->c, x, v0, decl);
  if (nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx)) fail_msg("%s", nb_error(f->c));
  assert_int_equal(nb_rank(dx), 1);
  assert_int_equal(nb_shape(dx)[0], -1);
  nb_tensor *sum_dx = nb_sum(f->c, dx, NULL, 0, false);
  if (nb_gradients(f->c, &sum_dx, 1, &x, 1, NULL, &d2x)) fail_msg("%s", nb_error(f->c));
  nb_tensor *xv = tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, 4)), *r = gu_run1(f, x, xv, dx);
  tu_check(r, NB_F64, 1, TU_SHAPE(2), TU_VALS(810, 2560), 1e-12);
  nb_tensor_free(r);
  r = gu_run1(f, x, xv, d2x);
  tu_check(r, NB_F64, 1, TU_SHAPE(2), TU_VALS(1080, 2560), 1e-12);
  nb_tensor_free(r);
  double err = 1;
  nb_tensor *xs = tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(0.9, -1.3));
  assert_int_equal(nb_gradcheck(f->c, y, &x, 1, &xs, &err), NB_OK);
  assert_true(err < 1e-6);
  assert_int_equal(nb_gradcheck(f->c, sum_dx, &x, 1, &xs, &err), NB_OK);
  assert_true(err < 1e-6);
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, xv);
  nb_tensor *ye = tf_loop(f->e, xv, nb_tensor_from(f->e, NB_F64, 1, TU_SHAPE(n), TU_VALS(2, 2)), decl), *dxe;
  assert_int_equal(nb_tape_gradient(t, &ye, 1, &xv, 1, NULL, &dxe), NB_OK);
  nb_tape_end(t);
  tu_check(dxe, NB_F64, 1, TU_SHAPE(2), TU_VALS(810, 2560), 1e-12);
}

/* The gradient loop keeps v's relaxed shape, [-1] or unknown rank, for dv (whose Mul
   gradient, a Reshape to v's run-time shape, has unknown rank) and for dx. */
static void test_grad_relaxed_shapes(void **state) {
  const nb_shape_spec vector = {1, TU_SHAPE(-1)}, any = {-1, NULL};
  check_tf_while_grad_shape(*state, 2, &vector);
  check_tf_while_grad_shape(*state, 2, &any);
  check_tf_while_grad_shape(*state, 1, &vector);
  check_tf_while_grad_shape(*state, 1, &any);
}

/* v <- v * sum(k): a scalar variable, a captured k of unknown length. */
static nb_code times_sum_k(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  next[0] = nb_mul(c, v[0], nb_sum(c, (nb_tensor *)user, NULL, 0, false));
  return nb_status(c);
}

/* Captures of unknown dims or rank get their gradients summed in loop variables of those
   shapes: v <- v * sum(k) (k [-1], v a static scalar): dk_i = 4 sum(k)^3 after four
   iterations; v <- v * k from a scalar 1 declared of any shape (k of unknown rank, v
   becomes k's shape after the first iteration): dk = 4 k^3, d sum(dk)/dk = 12 k^2.
   And TF's testWhileGrad_BaseShape: a loop that runs no iteration passes v0 through, so
   d(v + x^2)/dx = 2x for x [-1] captured. */
static void test_grad_relaxed_captures(void **state) {
  gu_fixture *f = *state;
  nb_tensor *k = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(-1), "k"), *one = nb_scalar(f->c, NB_F64, 1), *y, *dk;
  assert_int_equal(nb_while(f->c, always, times_sum_k, k, &one, 1, 4, &y), NB_OK);
  if (nb_gradients(f->c, &y, 1, &k, 1, NULL, &dk)) fail_msg("%s", nb_error(f->c));
  nb_tensor *kv = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.5, -0.2, 0.4)), *r = gu_run1(f, k, kv, dk);
  double s3 = 4 * pow(0.7, 3);
  tu_check(r, NB_F64, 1, TU_SHAPE(3), TU_VALS(s3, s3, s3), 1e-14);
  nb_tensor_free(r);
  double err = 1;
  assert_int_equal(nb_gradcheck(f->c, y, &k, 1, &kv, &err), NB_OK);
  assert_true(err < 1e-6);
  nb_attr dt = nb_attr_type("dtype", NB_F64);
  nb_tensor *any = NULL, *d2k;
  assert_int_equal(nb_op(f->c, "Placeholder", NULL, 0, &dt, 1, &any, 1), NB_OK);
  const nb_shape_spec free_shape = {-1, NULL};
  assert_int_equal(nb_while_ex(f->c, always, times_x, any, &one, 1, 4, &(nb_while_opts){&free_shape}, &y), NB_OK);
  if (nb_gradients(f->c, &y, 1, &any, 1, NULL, &dk)) fail_msg("%s", nb_error(f->c));
  assert_int_equal(nb_rank(dk), -1);
  if (nb_gradients(f->c, &dk, 1, &any, 1, NULL, &d2k)) fail_msg("%s", nb_error(f->c)); /* of sum(dk) */
  nb_tensor *m = tu_make(f->e, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(0.5, -1, 1.5, 2));
  double want[4], want2[4];
  for (int i = 0; i < 4; i++) {
    double e = nb_item(m, i);
    want[i] = 4 * e * e * e;
    want2[i] = 12 * e * e;
  }
  r = gu_run1(f, any, m, dk);
  tu_check(r, NB_F64, 2, TU_SHAPE(2, 2), want, 1e-14);
  nb_tensor_free(r);
  r = gu_run1(f, any, m, d2k);
  tu_check(r, NB_F64, 2, TU_SHAPE(2, 2), want2, 1e-14);
  nb_tensor_free(r);
  assert_int_equal(nb_gradcheck(f->c, y, &any, 1, &m, &err), NB_OK);
  assert_true(err < 1e-6);
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(-1), "x"), *dx;
  nb_tensor *v0 = nb_tensor_from(f->c, NB_F64, 1, TU_SHAPE(2), TU_VALS(2, 2)), *never;
  const nb_shape_spec vector = {1, TU_SHAPE(-1)}; /* v * x of [2] and [-1] has unknown rank here */
  assert_int_equal(nb_while_ex(f->c, always, times_x, x, &v0, 1, 0, &(nb_while_opts){&vector}, &never), NB_OK);
  nb_tensor *ys[2] = {never, nb_square(f->c, x)};
  assert_int_equal(nb_gradients(f->c, ys, 2, &x, 1, NULL, &dx), NB_OK);
  r = gu_run1(f, x, tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 2)), dx);
  tu_check(r, NB_F64, 1, TU_SHAPE(2), TU_VALS(2, 4), 0);
  nb_tensor_free(r);
}

/* TF's testWhileGrad with a growing loop variable (declared [-1]): v <- tanh([v, v])
   three times, [2] to [16]; its gradient stacks values of three shapes and equals the
   unrolled loop's, at both orders, and the eager tape's. */
static void test_grad_growing_loop_var(void **state) {
  gu_fixture *f = *state;
  const nb_shape_spec vector = {1, TU_SHAPE(-1)};
  nb_while_opts o = {&vector};
  nb_tensor *v = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "v"), *grown, *u = v, *dv, *du, *h, *hu;
  assert_int_equal(nb_while_ex(f->c, always, grow_tanh_body, NULL, &v, 1, 3, &o, &grown), NB_OK);
  for (int i = 0; i < 3; i++) {
    nb_tensor *next;
    assert_int_equal(grow_tanh_body(f->c, &u, &next, NULL), NB_OK);
    u = next;
  }
  nb_tensor *loss = nb_sum(f->c, nb_square(f->c, grown), NULL, 0, false);
  nb_tensor *lu = nb_sum(f->c, nb_square(f->c, u), NULL, 0, false);
  if (nb_gradients(f->c, &loss, 1, &v, 1, NULL, &dv)) fail_msg("%s", nb_error(f->c));
  assert_int_equal(nb_gradients(f->c, &lu, 1, &v, 1, NULL, &du), NB_OK);
  nb_tensor *vv = tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(0.3, -0.7));
  check_same(f, &v, &vv, 1, dv, du, 1e-14);
  nb_tensor *s1 = nb_sum(f->c, dv, NULL, 0, false), *s2 = nb_sum(f->c, du, NULL, 0, false);
  if (nb_gradients(f->c, &s1, 1, &v, 1, NULL, &h)) fail_msg("%s", nb_error(f->c));
  assert_int_equal(nb_gradients(f->c, &s2, 1, &v, 1, NULL, &hu), NB_OK);
  check_same(f, &v, &vv, 1, h, hu, 1e-13);
  double err = 1;
  assert_int_equal(nb_gradcheck(f->c, loss, &v, 1, &vv, &err), NB_OK);
  assert_true(err < 1e-6);
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, vv);
  nb_tensor *ge, *dve;
  assert_int_equal(nb_while_ex(f->e, always, grow_tanh_body, NULL, &vv, 1, 3, &o, &ge), NB_OK);
  nb_tensor *le = nb_sum(f->e, nb_square(f->e, ge), NULL, 0, false);
  assert_int_equal(nb_tape_gradient(t, &le, 1, &vv, 1, NULL, &dve), NB_OK);
  nb_tape_end(t);
  nb_tensor *r = gu_run1(f, v, vv, dv);
  tu_check(r, NB_F64, 1, TU_SHAPE(2), TU_VALS(nb_item(dve, 0), nb_item(dve, 1)), 1e-14);
  nb_tensor_free(r);
  /* one iteration: the variable's argument [2] and result [4], both read, share one
     ragged stack */
  nb_tensor *once, *d1;
  assert_int_equal(nb_while_ex(f->c, always, grow_tanh_body, NULL, &v, 1, 1, &o, &once), NB_OK);
  nb_tensor *loss1 = nb_sum(f->c, nb_square(f->c, once), NULL, 0, false);
  assert_int_equal(nb_gradients(f->c, &loss1, 1, &v, 1, NULL, &d1), NB_OK);
  assert_int_equal(nb_run(f->s, &v, &vv, 1, &d1, 1, &r), NB_OK);
  double want[2];
  for (int i = 0; i < 2; i++) { /* two copies of 2 y dy/dv, y = tanh(v_i) */
    double th = tanh(nb_item(vv, i));
    want[i] = 4 * th * (1 - th * th);
  }
  tu_check(r, NB_F64, 1, TU_SHAPE(2), want, 1e-15);
  nb_tensor_free(r);
}

/* v <- tanh(w) where an inner loop doubles v once into w (both declared [-1]). */
static nb_code nested_grow_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)user;
  const nb_shape_spec vector = {1, (const int64_t[]){-1}};
  nb_tensor *w = NULL;
  nb_code code = nb_while_ex(c, always, grow_body, NULL, v, 1, 1, &(nb_while_opts){&vector}, &w);
  next[0] = code ? NULL : nb_tanh(c, w);
  return nb_status(c);
}

/* v <- v * v (three times: v^8). */
static nb_code square_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)user;
  next[0] = nb_mul(c, v[0], v[0]);
  return nb_status(c);
}

/* A growing variable whose body runs a growing loop of its own differentiates like the
   unrolled loop, at both orders. */
static void test_grad_nested_growing(void **state) {
  gu_fixture *f = *state;
  const nb_shape_spec vector = {1, TU_SHAPE(-1)};
  nb_tensor *v = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "v"), *y, *u = v, *dv, *du;
  assert_int_equal(nb_while_ex(f->c, always, nested_grow_body, NULL, &v, 1, 2, &(nb_while_opts){&vector}, &y), NB_OK);
  for (int i = 0; i < 2; i++) {
    nb_tensor *next;
    assert_int_equal(grow_tanh_body(f->c, &u, &next, NULL), NB_OK);
    u = next;
  }
  nb_tensor *loss = nb_sum(f->c, nb_square(f->c, y), NULL, 0, false),
            *lu = nb_sum(f->c, nb_square(f->c, u), NULL, 0, false);
  if (nb_gradients(f->c, &loss, 1, &v, 1, NULL, &dv)) fail_msg("%s", nb_error(f->c));
  assert_int_equal(nb_gradients(f->c, &lu, 1, &v, 1, NULL, &du), NB_OK);
  nb_tensor *vv = tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(0.3, -0.7));
  check_same(f, &v, &vv, 1, dv, du, 1e-14);
  nb_tensor *s1 = nb_sum(f->c, dv, NULL, 0, false), *s2 = nb_sum(f->c, du, NULL, 0, false), *h, *hu;
  if (nb_gradients(f->c, &s1, 1, &v, 1, NULL, &h)) fail_msg("%s", nb_error(f->c));
  assert_int_equal(nb_gradients(f->c, &s2, 1, &v, 1, NULL, &hu), NB_OK);
  check_same(f, &v, &vv, 1, h, hu, 1e-13);
}

/* An intermediate of the largest rank is stacked ragged: d x^8/dx = 8 x^7. */
static void test_grad_rank8_intermediate(void **state) {
  gu_fixture *f = *state;
  const int64_t *deep = TU_SHAPE(1, 1, 1, 1, 1, 1, 1, 2);
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 8, deep, "x"), *x8, *dx;
  assert_int_equal(nb_while(f->c, always, square_body, NULL, &x, 1, 3, &x8), NB_OK);
  if (nb_gradients(f->c, &x8, 1, &x, 1, NULL, &dx)) fail_msg("%s", nb_error(f->c));
  nb_tensor *r = gu_run1(f, x, tu_make(f->e, NB_F64, 8, deep, TU_VALS(0.9, -1.1)), dx);
  tu_check(r, NB_F64, 8, deep, TU_VALS(8 * pow(0.9, 7), 8 * pow(-1.1, 7)), 1e-14);
  nb_tensor_free(r);
}

/* ---- function calls ------------------------------------------------------------------------- */

/* f(x) = x^2 w, with w captured. */
static nb_code sq_times(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  out[0] = nb_mul(c, nb_square(c, in[0]), (nb_tensor *)user);
  return nb_status(c);
}

static nb_code always_true_fn(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)in, (void)user;
  out[0] = nb_tensor_from(c, NB_BOOL, 0, NULL, (const uint8_t[]){1});
  return nb_status(c);
}

static int user_grad_calls;

/* A deliberately different gradient (3 dy for x), to see it used. */
static nb_code three_dy(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  (void)op;
  user_grad_calls++;
  dxs[0] = nb_mul(c, dys[0], nb_scalar(c, NB_F64, 3));
  return nb_status(c);
}

static void test_function_calls(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *w = nb_placeholder(f->c, NB_F64, 0, NULL, "w");
  nb_function *fn = nb_function_new(f->c, sq_times, w, &x, 1, 1);
  assert_non_null(fn);
  nb_tensor *y1, *y2, *xw[2] = {x, w}, *d[2], *dd;
  assert_int_equal(nb_call_function(f->c, fn, &x, 1, &y1, 1), NB_OK);
  assert_string_equal(nb_tensor_node_name(y1), "StatefulPartitionedCall");
  assert_int_equal(nb_call_function(f->c, fn, &y1, 1, &y2, 1), NB_OK); /* f(f(x)) = x^4 w^3 */
  assert_int_equal(nb_gradients(f->c, &y2, 1, xw, 2, NULL, d), NB_OK);
  assert_int_equal(nb_gradients(f->c, &d[0], 1, &x, 1, NULL, &dd), NB_OK);
  nb_tensor *vals[2] = {nb_scalar(f->e, NB_F64, 1.3), nb_scalar(f->e, NB_F64, 0.6)};
  const double want[4] = {pow(1.3, 4) * pow(0.6, 3), 4 * pow(1.3, 3) * pow(0.6, 3), 3 * pow(1.3, 4) * pow(0.6, 2),
                          12 * pow(1.3, 2) * pow(0.6, 3)};
  double err = 1;
  assert_int_equal(nb_gradcheck(f->c, y2, xw, 2, vals, &err), NB_OK);
  assert_true(err < 1e-6);
  nb_tensor *fetch[4] = {y2, d[0], d[1], dd};
  for (int i = 0; i < 4; i++) {
    nb_tensor *r = run_n(f, xw, vals, 2, fetch[i]);
    tu_check(r, NB_F64, 0, NULL, &want[i], 1e-13);
    nb_tensor_free(r);
  }
  /* a registered gradient replaces SymbolicGradient */
  nb_function *g = nb_function_new(f->c, sq_times, w, &x, 1, 1);
  nb_function_set_gradient(g, three_dy);
  nb_tensor *y3, *d3;
  user_grad_calls = 0;
  assert_int_equal(nb_call_function(f->c, g, &x, 1, &y3, 1), NB_OK);
  assert_int_equal(nb_gradients(f->c, &y3, 1, &x, 1, NULL, &d3), NB_OK);
  assert_int_equal(user_grad_calls, 1);
  nb_tensor *r = run_n(f, xw, vals, 2, d3);
  tu_check(r, NB_F64, 0, NULL, TU_VALS(3), 0);
  nb_tensor_free(r);
  /* errors */
  nb_tensor *two[2] = {x, x}, *o;
  assert_int_not_equal(nb_call_function(f->c, fn, two, 2, &o, 1), NB_OK);
  tu_check_error(f->c, NB_INVALID, "nb_call_function", "takes 1 inputs and gives 1 outputs, not 2 and 1");
  assert_null(nb_function_new(f->e, sq_times, w, &x, 1, 1));
  tu_check_error(f->e, NB_INVALID, "nb_function_new needs a graph context", NULL);
  assert_null(nb_function_new(f->c, failing_body, NULL, &x, 1, 1));
  tu_check_error(f->c, NB_UNIMPLEMENTED, "nb_function_new", "this body refuses");
  assert_null(nb_function_new(f->c, always_true_fn, NULL, NULL, 0, 1));
  tu_check_error(f->c, NB_INVALID, "nb_function_new", "needs at least one argument or captured tensor");
  nb_graph *other = nb_graph_new();
  nb_ctx *oc = nb_graph_ctx_new(other);
  nb_tensor *ox = nb_placeholder(oc, NB_F64, 0, NULL, "x");
  assert_int_not_equal(nb_call_function(oc, fn, &ox, 1, &o, 1), NB_OK);
  tu_check_error(oc, NB_INVALID, "nb_call_function", "belongs to another graph");
  nb_ctx_free(oc);
  nb_graph_free(other);
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
      cmocka_unit_test_setup_teardown(test_silent_callback_failures, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_relaxed_shape, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_poly_equals_eager, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_in_place_loop_vars, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_max_iters, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_nested_loops, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_cond_both_branches, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_cond_in_loop, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_rnn_graph_equals_eager, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_poly_equals_unrolled, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_accumulates_nothing_for_add, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_rnn_stacks_in_place, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_max_iters_and_nested, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_zero_iterations, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_rnn_graph_equals_eager, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_rnn_shares_h_stack, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_cond, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_loop_in_cond, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_relaxed_shapes, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_relaxed_captures, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_growing_loop_var, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_nested_growing, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_rank8_intermediate, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_function_calls, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
