/* nb_custom_gradient (tf.custom_gradient): one op to the tape and to the graph pass. */
#include "graphutil.h"

static int grad_calls;

/* f(x) = log(1 + e^x), whose naive gradient e^x / (1 + e^x) is NaN at large x; the custom
   gradient dy * sigmoid(x) is exact everywhere. */
static nb_code softplus_fwd(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_log1p(c, nb_exp(c, in[0]));
  return nb_status(c);
}

static nb_code softplus_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                             nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)nin, (void)out, (void)nout;
  grad_calls += *(const int *)user;
  dxs[0] = nb_mul(c, dys[0], nb_sigmoid(c, in[0]));
  return nb_status(c);
}

/* Two inputs, two outputs: (x + y, x * y), with the true gradient. */
static nb_code pair_fwd(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_add(c, in[0], in[1]);
  out[1] = nb_mul(c, in[0], in[1]);
  return nb_status(c);
}

static nb_code pair_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                         nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)nin, (void)out, (void)nout, (void)user;
  dxs[0] = nb_add(c, dys[0], nb_mul(c, dys[1], in[1]));
  dxs[1] = nb_add(c, dys[0], nb_mul(c, dys[1], in[0]));
  return nb_status(c);
}

static nb_code failing_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                            nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)dys, (void)dxs, (void)user;
  return nb_set_error(c, NB_UNIMPLEMENTED, "this custom gradient refuses");
}

/* Functions that fail with a code alone, leaving the context's status unset. */
static nb_code silent_fwd(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)c, (void)in, (void)nin, (void)out, (void)nout, (void)user;
  return NB_UNIMPLEMENTED;
}

static nb_code silent_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                           nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)c, (void)in, (void)nin, (void)out, (void)nout, (void)dys, (void)dxs, (void)user;
  return NB_INVALID;
}

static const double xs3[3] = {0.5, -1, 800};

static void check_softplus_grad(const nb_tensor *dx) {
  tu_check(dx, NB_F64, 1, TU_SHAPE(3), TU_VALS(1 / (1 + exp(-0.5)), 1 / (1 + exp(1.0)), 1), 1e-12);
}

static void test_eager_tape(void **state) {
  gu_fixture *f = *state;
  int one = 1;
  grad_calls = 0;
  nb_tensor *x = nb_tensor_from(f->e, NB_F64, 1, TU_SHAPE(3), xs3), *y, *dx;
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, x);
  assert_int_equal(nb_custom_gradient(f->e, softplus_fwd, softplus_grad, &one, &x, 1, &y, 1), NB_OK);
  nb_tensor *loss = nb_sum(f->e, y, NULL, 0, false);
  assert_int_equal(nb_tape_gradient(t, &loss, 1, &x, 1, NULL, &dx), NB_OK);
  nb_tape_end(t);
  check_softplus_grad(dx);
  assert_int_equal(grad_calls, 1);
  tu_check(y, NB_F64, 1, TU_SHAPE(3), TU_VALS(log1p(exp(0.5)), log1p(exp(-1.0)), INFINITY), 1e-12);
}

static void test_graph(void **state) {
  gu_fixture *f = *state;
  int one = 1;
  grad_calls = 0;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x"), *y, *dx;
  assert_int_equal(nb_custom_gradient(f->c, softplus_fwd, softplus_grad, &one, &x, 1, &y, 1), NB_OK);
  nb_tensor *loss = nb_sum(f->c, y, NULL, 0, false);
  assert_int_equal(nb_gradients(f->c, &loss, 1, &x, 1, NULL, &dx), NB_OK);
  nb_tensor *r = gu_run1(f, x, nb_tensor_from(f->e, NB_F64, 1, TU_SHAPE(3), xs3), dx);
  check_softplus_grad(r);
  nb_tensor_free(r);
  assert_int_equal(grad_calls, 1); /* built once into the graph */
}

/* Several inputs and outputs, only one output used: its sibling's gradient is zeros. */
static void test_two_by_two(void **state) {
  gu_fixture *f = *state;
  nb_tensor *in[2] = {nb_scalar(f->e, NB_F64, 3), nb_scalar(f->e, NB_F64, 5)}, *out[2], *d[2];
  nb_tape *t = nb_tape_begin(f->e, 1);
  nb_tape_watch(t, in[0]);
  nb_tape_watch(t, in[1]);
  assert_int_equal(nb_custom_gradient(f->e, pair_fwd, pair_grad, NULL, in, 2, out, 2), NB_OK);
  assert_int_equal(nb_tape_gradient(t, &out[1], 1, in, 2, NULL, d), NB_OK); /* d(xy) = (y, x) */
  tu_check(d[0], NB_F64, 0, NULL, TU_VALS(5), 0);
  tu_check(d[1], NB_F64, 0, NULL, TU_VALS(3), 0);
  assert_int_equal(nb_tape_gradient(t, out, 2, in, 2, NULL, d), NB_OK); /* d(x+y+xy) */
  tu_check(d[0], NB_F64, 0, NULL, TU_VALS(6), 0);
  tu_check(d[1], NB_F64, 0, NULL, TU_VALS(4), 0);
  nb_tape_end(t);
}

static void test_errors(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_scalar(f->e, NB_F64, 1), *y, *dx;
  assert_int_equal(nb_custom_gradient(f->e, NULL, softplus_grad, NULL, &x, 1, &y, 1), NB_INVALID);
  tu_check_error(f->e, NB_INVALID, "nb_custom_gradient: NULL function", NULL);
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, x);
  assert_int_equal(nb_custom_gradient(f->e, softplus_fwd, failing_grad, NULL, &x, 1, &y, 1), NB_OK);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_UNIMPLEMENTED);
  tu_check_error(f->e, NB_UNIMPLEMENTED, "this custom gradient refuses", NULL);
  nb_tape_end(t);
  /* functions failing without a message still leave one naming them, eager and in graphs */
  nb_tensor *xg = nb_placeholder(f->c, NB_F64, 0, NULL, "x");
  assert_int_equal(nb_custom_gradient(f->e, silent_fwd, softplus_grad, NULL, &x, 1, &y, 1), NB_UNIMPLEMENTED);
  tu_check_error(f->e, NB_UNIMPLEMENTED, "nb_custom_gradient: forward function", "returned NB_UNIMPLEMENTED without");
  assert_int_equal(nb_custom_gradient(f->c, silent_fwd, softplus_grad, NULL, &xg, 1, &y, 1), NB_UNIMPLEMENTED);
  tu_check_error(f->c, NB_UNIMPLEMENTED, "nb_custom_gradient: forward function", "returned NB_UNIMPLEMENTED without");
  t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, x);
  assert_int_equal(nb_custom_gradient(f->e, softplus_fwd, silent_grad, NULL, &x, 1, &y, 1), NB_OK);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_INVALID);
  tu_check_error(f->e, NB_INVALID, "the gradient function of '_CustomGradient'", "failed");
  nb_tape_end(t);
  assert_int_equal(nb_custom_gradient(f->c, softplus_fwd, silent_grad, NULL, &xg, 1, &y, 1), NB_OK);
  assert_int_equal(nb_gradients(f->c, &y, 1, &xg, 1, NULL, &dx), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "the gradient function of '_CustomGradient'", "failed");
  /* the internal op is not reachable by name */
  nb_tensor *outs[1];
  assert_int_equal(nb_op(f->e, "_CustomGradient", &x, 1, NULL, 0, outs, 1), NB_NOT_FOUND);
  tu_check_error(f->e, NB_NOT_FOUND, "Op type not registered '_CustomGradient'", NULL);
}

/* dxs[0] of shape [7] whatever the input's: a wrong gradient. */
static nb_code seven_ones_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                               nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)dys, (void)user;
  dxs[0] = nb_ones_like(c, nb_tensor_from(c, NB_F64, 1, TU_SHAPE(7), NULL));
  return nb_status(c);
}

/* A custom gradient of the wrong shape fails on the tape and in the graph alike, naming the
   custom op's input: its inputs are the forward's outputs, then the forward's inputs. */
static void test_wrong_gradient_shape(void **state) {
  gu_fixture *f = *state;
  const char *want =
      "Incompatible shapes between op input and calculated input gradient. Forward operation: "
      "_CustomGradient (op type: _CustomGradient). Input index: 1. Original input shape: [3]. "
      "Calculated input gradient shape: [7]";
  nb_tensor *x = nb_tensor_from(f->e, NB_F64, 1, TU_SHAPE(3), xs3), *y, *dx = x;
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, x);
  assert_int_equal(nb_custom_gradient(f->e, softplus_fwd, seven_ones_grad, NULL, &x, 1, &y, 1), NB_OK);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_SHAPE);
  tu_check_error(f->e, NB_SHAPE, want, NULL);
  assert_null(dx);
  nb_tape_end(t);
  nb_tensor *p = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "p");
  assert_int_equal(nb_custom_gradient(f->c, softplus_fwd, seven_ones_grad, NULL, &p, 1, &y, 1), NB_OK);
  assert_int_equal(nb_gradients(f->c, &y, 1, &p, 1, NULL, &dx), NB_SHAPE);
  tu_check_error(f->c, NB_SHAPE, "Original input shape: [3]. Calculated input gradient shape: [7]", NULL);
}

/* Outputs of two dtypes: (x, x > 0) with x's gradient. */
static nb_code mixed_fwd(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_identity(c, in[0]);
  out[1] = nb_greater(c, in[0], nb_scalar(c, nb_dtype_of(in[0]), 0));
  return nb_status(c);
}

static nb_code mixed_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                          nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)c, (void)in, (void)nin, (void)out, (void)nout, (void)user;
  dxs[0] = dys[0];
  return NB_OK;
}

/* Each output keeps its own dtype when the ranks are unknown (once every one took the
   first's), and the node's checks run at build time. */
static void test_unknown_rank_outputs(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = tu_unknown_rank(f->c, NB_F64), *y[2];
  assert_int_equal(nb_custom_gradient(f->c, mixed_fwd, mixed_grad, NULL, &x, 1, y, 2), NB_OK);
  assert_int_equal(nb_dtype_of(y[0]), NB_F64);
  assert_int_equal(nb_dtype_of(y[1]), NB_BOOL);
  assert_int_equal(nb_rank(y[1]), -1);
}

static nb_code identity_fwd(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)c, (void)nin, (void)nout, (void)user;
  out[0] = in[0]; /* returning an input must not free the caller's tensor */
  return NB_OK;
}

static nb_code doubling_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                             nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)user;
  dxs[0] = nb_mul(c, dys[0], nb_scalar(c, NB_F64, 2));
  return nb_status(c);
}

static void test_forward_returns_input(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_scalar(f->e, NB_F64, 3), *y, *dx;
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, x);
  assert_int_equal(nb_custom_gradient(f->e, identity_fwd, doubling_grad, NULL, &x, 1, &y, 1), NB_OK);
  tu_check(nb_mul(f->e, x, x), NB_F64, 0, NULL, TU_VALS(9), 0); /* x is alive */
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_OK);
  tu_check(dx, NB_F64, 0, NULL, TU_VALS(2), 0);
  nb_tape_end(t);
}

/* A forward function that begins a tape of its own (watching its input), kept in *user. */
static nb_code taping_fwd(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, in[0]);
  *(nb_tape **)user = t;
  out[0] = nb_square(c, in[0]); /* not recorded: tapes are paused in a forward function */
  return nb_status(c);
}

/* The tape begun inside the forward function records once the function returns. */
static void test_tape_begun_in_forward(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_scalar(f->e, NB_F64, 3), *y, *dx;
  nb_tape *t = NULL;
  assert_int_equal(nb_custom_gradient(f->e, taping_fwd, doubling_grad, &t, &x, 1, &y, 1), NB_OK);
  assert_non_null(t);
  nb_tensor *z = nb_mul(f->e, x, x);
  assert_int_equal(nb_tape_gradient(t, &z, 1, &x, 1, NULL, &dx), NB_OK);
  tu_check(dx, NB_F64, 0, NULL, TU_VALS(6), 0);
  nb_tape_end(t);
}

/* y = tanh(x) + x: reads its input again after a first op on it. */
static nb_code reread_fwd(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_add(c, nb_tanh(c, in[0]), in[0]);
  return nb_status(c);
}

/* In a session the custom op's input dies at it (input forwarding may write over such an
   input), but the ops its forward function runs must not: x * 2 is read twice there. */
static void test_graph_forward_rereads_dying_input(void **state) {
  gu_fixture *f = *state;
  nb_tensor *p = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "p"), *x = nb_mul(f->c, p, nb_scalar(f->c, NB_F64, 2)),
            *y;
  assert_int_equal(nb_custom_gradient(f->c, reread_fwd, softplus_grad, NULL, &x, 1, &y, 1), NB_OK);
  nb_tensor *pv = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.1, -0.3, 0.7));
  nb_tensor *got = gu_run1(f, p, pv, y);
  tu_check(got, NB_F64, 1, TU_SHAPE(3), TU_VALS(tanh(0.2) + 0.2, tanh(-0.6) - 0.6, tanh(1.4) + 1.4), 1e-15);
  nb_tensor_free(got);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_eager_tape, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_two_by_two, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_errors, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_wrong_gradient_shape, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_unknown_rank_outputs, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_forward_returns_input, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_tape_begun_in_forward, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_forward_rereads_dying_input, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests_name("custom_gradient", tests, NULL, NULL);
}
