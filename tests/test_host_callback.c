/* Host callbacks (tf.py_func, tf.numpy_function, tf.py_function): PyFunc and
   PyFuncStateless nodes calling C functions, eager, in graphs and sessions. */
#include "graphutil.h"

/* What a callback did, for the tests to count. */
typedef struct calls {
  int forward, gradient, destroyed;
} calls;

static void count_destroy(void *user) { ((calls *)user)->destroyed++; }

/* y = x * x, made through the context it is given. */
static nb_code square(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout;
  ((calls *)user)->forward++;
  out[0] = nb_mul(c, in[0], in[0]);
  return nb_status(c);
}

/* d(x*x) = 2 x dy, written from the values alone: what a host gradient sees. */
static nb_code square_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                           nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)nin, (void)out, (void)nout;
  ((calls *)user)->gradient++;
  int64_t n = nb_num_elements(in[0]);
  double *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = 2 * nb_item(in[0], i) * nb_item(dys[0], i);
  dxs[0] = nb_tensor_from(c, NB_F64, nb_rank(in[0]), nb_shape(in[0]), v);
  free(v);
  return nb_status(c);
}

/* No inputs: the vector user points to ({1, 2, 3}). */
static nb_code constant_vector(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)in, (void)nin, (void)nout;
  out[0] = nb_tensor_from(c, NB_F64, 1, TU_SHAPE(3), user);
  return nb_status(c);
}

/* Returns its inputs as they are (the node shares their blocks). */
static nb_code identity(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)c, (void)user;
  for (int i = 0; i < nout && i < nin; i++) out[i] = in[i];
  return NB_OK;
}

/* Frees f's graph (its session and context first): the user data the graph's nodes held
   is destroyed then, and not before. */
static void free_graph_destroys(gu_fixture *f, const calls *n) {
  assert_int_equal(n->destroyed, 0);
  nb_session_free(f->s);
  nb_ctx_free(f->c);
  nb_graph_free(f->g);
  f->s = NULL, f->c = NULL, f->g = NULL;
  assert_int_equal(n->destroyed, 1);
}

static const nb_host_output f64_any = {NB_F64, -1, {0}};
static const nb_host_output f64_vec3 = {NB_F64, 1, {3}};

static nb_tensor *call1(nb_ctx *c, nb_host_func *f, bool stateful, nb_tensor *x, const nb_host_output *spec) {
  nb_tensor *y = NULL;
  nb_py_func(c, f, stateful, x ? &x : NULL, x ? 1 : 0, spec, &y, 1);
  return y;
}

static void test_eager(void **state) {
  nb_ctx *c = *state;
  calls n = {0};
  static const double v[3] = {1, 2, 3};
  nb_host_func *f = nb_host_func_new(square, NULL, &n, count_destroy),
               *k = nb_host_func_new(constant_vector, NULL, (void *)v, NULL);
  nb_tensor *x = nb_tensor_from(c, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, -2, 0.5));
  tu_check(call1(c, f, true, x, &f64_vec3), NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 4, 0.25), 0);
  tu_check(call1(c, f, false, x, &f64_any), NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 4, 0.25), 0);
  tu_check(call1(c, k, true, NULL, &f64_any), NB_F64, 1, TU_SHAPE(3), v, 0);
  assert_int_equal(n.forward, 2);
  nb_host_func_release(f);
  nb_host_func_release(k);
  assert_int_equal(n.destroyed, 1); /* eager calls keep no reference */
}

/* Several outputs, of several dtypes, some of them the inputs themselves. */
static void test_shared_outputs(void **state) {
  nb_ctx *c = *state;
  nb_host_func *f = nb_host_func_new(identity, NULL, NULL, NULL);
  nb_tensor *in[2] = {nb_tensor_from(c, NB_F32, 1, TU_SHAPE(2), (const float[]){1, 2}),
                      nb_tensor_from(c, NB_I32, 0, NULL, (const int32_t[]){7})},
            *out[2];
  const nb_host_output spec[2] = {{NB_F32, 1, {-1}}, {NB_I32, 0, {0}}};
  assert_int_equal(nb_py_func(c, f, false, in, 2, spec, out, 2), NB_OK);
  nb_tensor_free(in[0]);
  nb_tensor_free(in[1]);
  tu_check(out[0], NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2), 0);
  tu_check(out[1], NB_I32, 0, NULL, TU_VALS(7), 0);
  nb_host_func_release(f);
}

/* A stateful node runs its function on every run; its user data lives until the graph goes. */
static void test_session(void **state) {
  gu_fixture *f = *state;
  calls n = {0};
  nb_host_func *sq = nb_host_func_new(square, NULL, &n, count_destroy);
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(-1), "x");
  nb_tensor *y = call1(f->c, sq, true, x, &f64_any);
  nb_host_func_release(sq); /* the node holds its own reference */
  assert_non_null(y);
  assert_int_equal(nb_rank(y), -1);
  for (int run = 1; run <= 2; run++) {
    nb_tensor *r = gu_run1(f, x, nb_tensor_from(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(run, -3)), y);
    tu_check(r, NB_F64, 1, TU_SHAPE(2), TU_VALS(run * run, 9), 0);
    nb_tensor_free(r);
    assert_int_equal(n.forward, run);
  }
  free_graph_destroys(f, &n);
}

/* Folding at graph build time: a stateless call on constants runs once, when it is built,
   and the runs reuse its value; a stateful one runs on every run and never at build. */
static void test_folding(void **state) {
  gu_fixture *f = *state;
  calls pure = {0}, impure = {0};
  nb_host_func *fp = nb_host_func_new(square, NULL, &pure, NULL), *fi = nb_host_func_new(square, NULL, &impure, NULL);
  nb_tensor *x = nb_tensor_from(f->c, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, 4));
  nb_tensor *ys = call1(f->c, fp, false, x, &f64_any), *yi = call1(f->c, fi, true, x, &f64_any);
  assert_int_equal(pure.forward, 1);
  assert_int_equal(impure.forward, 0);
  tu_check_shape(ys, NB_F64, 1, TU_SHAPE(2)); /* the folded value's shape, not the declared unknown */
  assert_int_equal(nb_rank(yi), -1);
  for (int run = 1; run <= 2; run++) {
    nb_tensor *a = gu_run1(f, NULL, NULL, ys), *b = gu_run1(f, NULL, NULL, yi);
    tu_check(a, NB_F64, 1, TU_SHAPE(2), TU_VALS(9, 16), 0);
    tu_check(b, NB_F64, 1, TU_SHAPE(2), TU_VALS(9, 16), 0);
    nb_tensor_free(a);
    nb_tensor_free(b);
  }
  assert_int_equal(pure.forward, 1);
  assert_int_equal(impure.forward, 2);
  nb_host_func_release(fp);
  nb_host_func_release(fi);
}

/* A vector of 2^16 + 1 copies of its scalar input: one element past the fold cap. */
static nb_code fill_past_fold_cap(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout;
  ((calls *)user)->forward++;
  out[0] = nb_fill(c, TU_SHAPE((1 << 16) + 1), 1, in[0]);
  return nb_status(c);
}

/* A stateless call declared of unknown shape whose result is too large to fold: the build
   drops the result and the node runs at run time. */
static void test_large_result_not_folded(void **state) {
  gu_fixture *f = *state;
  calls n = {0};
  nb_host_func *fill = nb_host_func_new(fill_past_fold_cap, NULL, &n, NULL);
  nb_tensor *x = nb_tensor_from(f->c, NB_F64, 0, NULL, TU_VALS(2));
  nb_tensor *y = call1(f->c, fill, false, x, &f64_any);
  nb_host_func_release(fill);
  assert_int_equal(nb_rank(y), -1); /* the declared shape: no folded value */
  int forward_at_build = n.forward;
  nb_tensor *r = gu_run1(f, NULL, NULL, y);
  tu_check_shape(r, NB_F64, 1, TU_SHAPE((1 << 16) + 1));
  assert_true(nb_item(r, 1 << 16) == 2);
  nb_tensor_free(r);
  assert_int_equal(n.forward, forward_at_build + 1);
}

static nb_code always(nb_ctx *c, nb_tensor *const *vars, nb_tensor **pred, void *user) {
  (void)vars, (void)user;
  *pred = nb_scalar(c, NB_BOOL, 1);
  return nb_status(c);
}

static nb_code square_by_callback(nb_ctx *c, nb_tensor *const *vars, nb_tensor **next, void *user) {
  /* declared [2]: a loop variable keeps its shape */
  *next = call1(c, user, true, vars[0], &(nb_host_output){NB_F64, 1, {2}});
  return nb_status(c);
}

/* Inside a loop body (a function graph): the node runs on every iteration. */
static void test_in_while_body(void **state) {
  gu_fixture *f = *state;
  calls n = {0};
  nb_host_func *sq = nb_host_func_new(square, NULL, &n, count_destroy);
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "x"), *y = NULL;
  assert_int_equal(nb_while(f->c, always, square_by_callback, sq, &x, 1, 3, &y), NB_OK);
  nb_host_func_release(sq);
  nb_tensor *r = gu_run1(f, x, nb_tensor_from(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(2, 0.5)), y);
  tu_check(r, NB_F64, 1, TU_SHAPE(2), TU_VALS(256, 1.0 / 256), 0);
  nb_tensor_free(r);
  assert_int_equal(n.forward, 3);
  free_graph_destroys(f, &n);
}

/* Without a gradient callback: gradient none, no error, and nothing reported missing. */
static void test_not_differentiable(void **state) {
  gu_fixture *f = *state;
  calls n = {0};
  nb_host_func *sq = nb_host_func_new(square, NULL, &n, NULL);
  nb_tensor *x = nb_tensor_from(f->e, NB_F64, 0, NULL, TU_VALS(3)), *y, *dx = x;
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, x);
  y = call1(f->e, sq, false, x, &f64_any);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_OK);
  assert_null(dx);
  nb_tape_end(t);
  nb_tensor *p = nb_placeholder(f->c, NB_F64, 0, NULL, "p"), *q = call1(f->c, sq, true, p, &f64_any), *dp = p;
  assert_int_equal(nb_gradients(f->c, &q, 1, &p, 1, NULL, &dp), NB_OK);
  assert_null(dp);
  char report[256] = "unset";
  assert_int_equal(nb_find_non_differentiable(f->g, &p, 1, &q, 1, report, sizeof report), NB_OK);
  assert_string_equal(report, "");
  nb_host_func_release(sq);
}

/* With one (tf.py_function): the gradient is the callback's, on the tape and in graphs; its
   own gradient is none, and the forward function lives as long as the gradient node. */
static void test_gradient_callback(void **state) {
  gu_fixture *f = *state;
  calls n = {0};
  nb_host_func *sq = nb_host_func_new(square, square_grad, &n, count_destroy);
  nb_tensor *x = nb_tensor_from(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, -1)), *y, *dx;
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, x);
  y = call1(f->e, sq, false, x, &f64_any);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_OK);
  nb_tape_end(t);
  tu_check(dx, NB_F64, 1, TU_SHAPE(2), TU_VALS(6, -2), 0);
  assert_int_equal(n.gradient, 1);

  nb_tensor *p = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "p"), *dp, *ddp = p;
  nb_tensor *q = call1(f->c, sq, true, p, &(nb_host_output){NB_F64, 1, {2}});
  nb_tensor *loss = nb_sum(f->c, q, NULL, 0, false);
  assert_int_equal(nb_gradients(f->c, &loss, 1, &p, 1, NULL, &dp), NB_OK);
  nb_tensor *dsum = nb_sum(f->c, dp, NULL, 0, false);
  assert_int_equal(nb_gradients(f->c, &dsum, 1, &p, 1, NULL, &ddp), NB_OK);
  assert_null(ddp); /* the gradient node is itself not differentiable */
  nb_host_func_release(sq);
  nb_tensor *r = gu_run1(f, p, nb_tensor_from(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(0.5, 2)), dp);
  tu_check(r, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 4), 0);
  nb_tensor_free(r);
  assert_int_equal(n.gradient, 2);
  free_graph_destroys(f, &n);
}

/* Gradients of int inputs are none; an int output's upstream gradient reaches grad as NULL. */
static nb_code scale_by_count(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_mul(c, in[0], nb_cast(c, in[1], NB_F64));
  out[1] = nb_identity(c, in[1]);
  return nb_status(c);
}

static nb_code scale_by_count_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                                   nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)nin, (void)out, (void)nout;
  ((calls *)user)->gradient += dys[1] == NULL;
  dxs[0] = nb_mul(c, dys[0], nb_cast(c, in[1], NB_F64));
  return nb_status(c); /* dxs[1] left NULL */
}

static void test_mixed_dtypes_gradient(void **state) {
  nb_ctx *c = *state;
  calls n = {0};
  nb_host_func *f = nb_host_func_new(scale_by_count, scale_by_count_grad, &n, NULL);
  nb_tensor *in[2] = {nb_scalar(c, NB_F64, 2), nb_scalar(c, NB_I32, 5)}, *out[2], *d[2] = {NULL, in[1]};
  const nb_host_output spec[2] = {{NB_F64, 0, {0}}, {NB_I32, 0, {0}}};
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, in[0]);
  nb_tape_watch(t, in[1]);
  assert_int_equal(nb_py_func(c, f, false, in, 2, spec, out, 2), NB_OK);
  assert_int_equal(nb_tape_gradient(t, out, 1, in, 2, NULL, d), NB_OK);
  nb_tape_end(t);
  tu_check(d[0], NB_F64, 0, NULL, TU_VALS(5), 0);
  assert_null(d[1]);
  assert_int_equal(n.gradient, 1);
  nb_host_func_release(f);
}

/* A tape holds the functions it recorded, the gradients' too: on a persistent tape, which
   records its own gradient pass, second order through a callback is none, with the
   caller's reference gone; the last reference goes when the tape ends. */
static void test_persistent_tape_second_order(void **state) {
  nb_ctx *c = *state;
  calls n = {0};
  nb_host_func *sq = nb_host_func_new(square, square_grad, &n, count_destroy);
  nb_tensor *x = nb_tensor_from(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, -1)), *dx = NULL, *ddx = x;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, x);
  nb_tensor *y = call1(c, sq, false, x, &f64_any);
  nb_host_func_release(sq);
  assert_int_equal(n.destroyed, 0); /* the tape's reference */
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_OK);
  tu_check(dx, NB_F64, 1, TU_SHAPE(2), TU_VALS(6, -2), 0);
  assert_int_equal(nb_tape_gradient(t, &dx, 1, &x, 1, NULL, &ddx), NB_OK);
  assert_null(ddx); /* the gradient's function has no gradient */
  assert_int_equal(n.gradient, 1);
  assert_int_equal(n.destroyed, 0);
  nb_tape_end(t);
  assert_int_equal(n.destroyed, 1);
}

/* The gradient's function, called directly with counts that do not match its forward's:
   inputs, then outputs and their gradients (nin + 2 nout, nout >= 1). */
static void test_gradient_function_counts(void **state) {
  nb_ctx *c = *state;
  calls n = {0};
  nb_host_func *sq = nb_host_func_new(square, square_grad, &n, NULL), *g = NULL;
  assert_int_equal(nb_host_func_gradient(sq, &g), NB_OK);
  nb_tensor *x = nb_scalar(c, NB_F64, 2), *in[4] = {x, x, x, x}, *dx = x;
  const nb_host_output scalar = {NB_F64, 0, {0}};
  assert_int_equal(nb_py_func(c, g, true, in, 2, &scalar, &dx, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "host callback gradient: got 2 inputs, expected 1 + 2 nout", NULL);
  assert_int_equal(nb_py_func(c, g, true, in, 4, &scalar, &dx, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "host callback gradient: got 4 inputs, expected 1 + 2 nout", NULL);
  assert_int_equal(n.gradient, 0);
  assert_int_equal(nb_py_func(c, g, true, in, 3, &scalar, &dx, 1), NB_OK);
  tu_check(dx, NB_F64, 0, NULL, TU_VALS(8), 0); /* 2 x dy, with x = dy = 2 */
  assert_int_equal(n.gradient, 1);
  nb_host_func_release(g);
  nb_host_func_release(sq);
}

/* ---- errors ---------------------------------------------------------------------------- */

static nb_code refuses(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)user;
  return nb_set_error(c, NB_NOT_FOUND, "no such file: data.txt");
}

static nb_code refuses_gradient(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                                nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)dys, (void)dxs, (void)user;
  return nb_set_error(c, NB_NOT_FOUND, "no gradient file");
}

static nb_code fails_silently(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)c, (void)in, (void)nin, (void)out, (void)nout, (void)user;
  return NB_UNIMPLEMENTED;
}

static nb_code returns_nothing(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)c, (void)in, (void)nin, (void)out, (void)nout, (void)user;
  return NB_OK;
}

/* Fills only the first output. */
static nb_code returns_one(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_identity(c, in[0]);
  return nb_status(c);
}

static nb_code returns_int(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_cast(c, in[0], NB_I32);
  return nb_status(c);
}

static nb_code leaves_scope_open(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  nb_scope_begin(c);
  out[0] = nb_identity(c, in[0]);
  return nb_status(c);
}

static nb_code returns_freed(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_identity(c, in[0]);
  nb_tensor_free(out[0]);
  return nb_status(c);
}

/* A graph tensor where a value belongs: user points to it. */
static nb_code returns_symbolic(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)c, (void)in, (void)nin, (void)nout;
  out[0] = user;
  return NB_OK;
}

/* Calls fn eagerly on a float64 [3] and expects code with message fragments. */
static void expect_eager_error(nb_ctx *c, nb_custom_fn fn, void *user, const nb_host_output *spec, nb_code code,
                               const char *frag1, const char *frag2) {
  nb_host_func *f = nb_host_func_new(fn, NULL, user, NULL);
  nb_tensor *x = nb_tensor_from(c, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3)), *y = x;
  assert_int_equal(nb_py_func(c, f, true, &x, 1, spec, &y, 1), code);
  assert_null(y);
  tu_check_error(c, code, frag1, frag2);
  nb_host_func_release(f);
}

static void test_callback_errors(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->e;
  expect_eager_error(c, refuses, NULL, &f64_any, NB_NOT_FOUND, "PyFunc: ", "no such file: data.txt");
  expect_eager_error(c, fails_silently, NULL, &f64_any, NB_UNIMPLEMENTED, "PyFunc: ", "without setting an error");
  expect_eager_error(c, returns_nothing, NULL, &f64_any, NB_INVALID, "left output 0 NULL", NULL);
  expect_eager_error(c, returns_int, NULL, &f64_any, NB_DTYPE, "output 0 is int32 but Tout declares float64", NULL);
  expect_eager_error(c, returns_one, NULL, &(nb_host_output){NB_F64, 1, {4}}, NB_SHAPE,
                     "output 0 has shape [3], which does not fit the declared [4]", NULL);
  expect_eager_error(c, returns_one, NULL, &(nb_host_output){NB_F64, 2, {-1, -1}}, NB_SHAPE, "declared [-1,-1]", NULL);
  expect_eager_error(c, leaves_scope_open, NULL, &f64_any, NB_INVALID, "left 1 scope open", NULL);
  expect_eager_error(c, returns_freed, NULL, &f64_any, NB_INVALID, "output 0 is not a concrete tensor", NULL);
  nb_tensor *p = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "p");
  expect_eager_error(c, returns_symbolic, p, &f64_any, NB_INVALID, "output 0 is not a concrete tensor", NULL);
  /* too few outputs: the second is NULL */
  nb_host_func *one = nb_host_func_new(returns_one, NULL, NULL, NULL);
  nb_tensor *x = nb_scalar(c, NB_F64, 1), *y[2];
  const nb_host_output two[2] = {f64_any, f64_any};
  assert_int_equal(nb_py_func(c, one, false, &x, 1, two, y, 2), NB_INVALID);
  tu_check_error(c, NB_INVALID, "left output 1 NULL", NULL);
  nb_host_func_release(one);
  /* a failure inside a gradient callback is the gradient's error */
  calls n = {0};
  nb_host_func *g = nb_host_func_new(square, refuses_gradient, &n, NULL);
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_tensor *sq = call1(c, g, false, x, &f64_any), *dx = x;
  assert_int_equal(nb_tape_gradient(t, &sq, 1, &x, 1, NULL, &dx), NB_NOT_FOUND);
  tu_check_error(c, NB_NOT_FOUND, "PyFuncStateless: ", "no gradient file");
  nb_tape_end(t);
  nb_host_func_release(g);
}

/* In a session the error names the node; the next run works again. */
static void test_run_error_names_node(void **state) {
  gu_fixture *f = *state;
  nb_host_func *bad = nb_host_func_new(refuses, NULL, NULL, NULL);
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x");
  assert_int_equal(nb_name_next(f->c, "reader"), NB_OK);
  nb_tensor *y = call1(f->c, bad, true, x, &f64_any), *out = NULL;
  nb_host_func_release(bad);
  nb_tensor *v = nb_tensor_from(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3));
  assert_int_equal(nb_run(f->s, &x, &v, 1, &y, 1, &out), NB_NOT_FOUND);
  assert_null(out);
  assert_non_null(strstr(nb_session_error(f->s), "PyFunc (node 'reader'): no such file: data.txt"));
  /* a wrong result, in a session */
  nb_host_func *wrong = nb_host_func_new(returns_int, NULL, NULL, NULL);
  assert_int_equal(nb_name_next(f->c, "caster"), NB_OK);
  nb_tensor *z = call1(f->c, wrong, false, x, &f64_any);
  nb_host_func_release(wrong);
  assert_int_equal(nb_run(f->s, &x, &v, 1, &z, 1, &out), NB_DTYPE);
  assert_non_null(strstr(nb_session_error(f->s), "PyFuncStateless (node 'caster'): the host callback's output 0"));
}

/* A stateless call folded at build time fails the build, naming the node. */
static void test_fold_error(void **state) {
  gu_fixture *f = *state;
  nb_host_func *bad = nb_host_func_new(refuses, NULL, NULL, NULL);
  nb_tensor *x = nb_tensor_from(f->c, NB_F64, 0, NULL, TU_VALS(1));
  assert_int_equal(nb_name_next(f->c, "early"), NB_OK);
  assert_null(call1(f->c, bad, false, x, &f64_any));
  tu_check_error(f->c, NB_NOT_FOUND, "PyFuncStateless (node 'early')", "no such file");
  nb_host_func_release(bad);
}

static void test_argument_errors(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->e;
  calls n = {0};
  nb_host_func *sq = nb_host_func_new(square, NULL, &n, NULL);
  nb_tensor *x = nb_scalar(c, NB_F64, 2), *y = x;
  assert_null(nb_host_func_new(NULL, NULL, NULL, NULL));
  assert_int_equal(nb_py_func(c, NULL, true, &x, 1, &f64_any, &y, 1), NB_INVALID);
  assert_null(y);
  tu_check_error(c, NB_INVALID, "nb_py_func: NULL function", NULL);
  assert_int_equal(nb_py_func(c, sq, true, &x, 1, &f64_any, &y, 0), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nout 0", NULL);
  assert_int_equal(nb_py_func(c, sq, true, &x, 1, &(nb_host_output){NB_F64, NB_MAX_RANK + 1, {0}}, &y, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "declared rank must be in [-1, 8]", NULL);
  assert_int_equal(nb_py_func(c, sq, true, &x, 1, &(nb_host_output){NB_F64, 1, {-2}}, &y, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "declared dim 0 is below -1", NULL);
  assert_int_equal(nb_py_func(c, sq, true, &x, 1, &(nb_host_output){(nb_dtype)42, -1, {0}}, &y, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Tout[0] = 42 is not a dtype", NULL);
  assert_int_equal(n.forward, 0);
  /* the generic entry cannot make one: the function attr is internal */
  nb_attr fn = nb_attr_int("_func", 1);
  assert_int_not_equal(nb_op(c, "PyFunc", &x, 1, &fn, 1, &y, 1), NB_OK);
  tu_check_error(c, NB_INVALID, "internal", NULL);
  nb_host_func_release(sq);
  nb_host_func_release(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_eager, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_shared_outputs, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_session, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_folding, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_large_result_not_folded, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_in_while_body, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_not_differentiable, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_gradient_callback, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_mixed_dtypes_gradient, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_persistent_tape_second_order, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gradient_function_counts, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_callback_errors, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_run_error_names_node, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_fold_error, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_argument_errors, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
