/* TF's fused gradient ops (TanhGrad ... SoftplusGrad) and BroadcastGradientArgs. */
#include "testutil.h"

#include <stdlib.h>

typedef nb_tensor *(*grad_op)(nb_ctx *c, nb_tensor *a, nb_tensor *b);

/* Runs op on two [4] inputs of dtype t and checks the result against want. */
static void check4(nb_ctx *c, grad_op op, nb_dtype t, const double *a, const double *b, const double *want) {
  nb_tensor *x = tu_make(c, t, 1, TU_SHAPE(4), a), *y = tu_make(c, t, 1, TU_SHAPE(4), b);
  nb_tensor *r = op(c, x, y);
  if (!r) fail_msg("%s", nb_error(c));
  tu_check(r, t, 1, TU_SHAPE(4), want, t == NB_F32 ? 1e-6 : 1e-12);
  nb_tensor_free(x);
  nb_tensor_free(y);
  nb_tensor_free(r);
}

static const nb_dtype floats[2] = {NB_F32, NB_F64};

static void test_tanh_sigmoid_grad(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++) {
    /* dy (1 - y^2) */
    check4(c, nb_tanh_grad, floats[i], TU_VALS(0, 0.5, -0.5, 1), TU_VALS(1, 2, -1, 3), TU_VALS(1, 1.5, -0.75, 0));
    /* dy y (1 - y) */
    check4(c, nb_sigmoid_grad, floats[i], TU_VALS(0.5, 0.25, 1, 0), TU_VALS(4, 2, 5, 7), TU_VALS(1, 0.375, 0, 0));
  }
}

static void test_sqrt_rsqrt_reciprocal_grad(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++) {
    /* -dy y^3 / 2; dy = 0 gives 0 even for y = inf */
    check4(c, nb_rsqrt_grad, floats[i], TU_VALS(1, 0.5, 2, INFINITY), TU_VALS(2, 8, 1, 0), TU_VALS(-1, -0.5, -4, 0));
    /* dy / (2 y); dy = 0 gives 0 even for y = 0 */
    check4(c, nb_sqrt_grad, floats[i], TU_VALS(1, 2, 0.25, 0), TU_VALS(1, 4, 1, 0), TU_VALS(0.5, 1, 2, 0));
    /* -dy y^2 */
    check4(c, nb_reciprocal_grad, floats[i], TU_VALS(1, 2, -0.5, INFINITY), TU_VALS(3, 1, 4, 0),
           TU_VALS(-3, -4, -1, 0));
    /* a nonzero dy still sees y = 0 */
    check4(c, nb_sqrt_grad, floats[i], TU_VALS(0, 0, 1, 1), TU_VALS(1, -1, NAN, 0),
           TU_VALS(INFINITY, -INFINITY, NAN, 0));
  }
}

static void test_relu_elu_softplus_grad(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++) {
    /* gradients where features > 0 (0 itself passes nothing); NaN gradients stay NaN */
    check4(c, nb_relu_grad, floats[i], TU_VALS(1, 2, 3, NAN), TU_VALS(-1, 0, 0.5, -2), TU_VALS(0, 0, 3, NAN));
    /* outputs < 0: gradients * (outputs + 1) */
    check4(c, nb_elu_grad, floats[i], TU_VALS(1, 2, 3, 4), TU_VALS(-0.5, 0, 1, -1), TU_VALS(0.5, 2, 3, 0));
    /* gradients * sigmoid(features): sigmoid(ln 3) = 3/4, sigmoid(-ln 3) = 1/4 */
    check4(c, nb_softplus_grad, floats[i], TU_VALS(1, 2, 4, 3), TU_VALS(0, log(3), -log(3), 100),
           TU_VALS(0.5, 1.5, 1, 3));
    check4(c, nb_softplus_grad, floats[i], TU_VALS(1, 1, 1, 1), TU_VALS(-200, 200, -1000, 1000), TU_VALS(0, 1, 0, 1));
  }
  check4(c, nb_relu_grad, NB_I32, TU_VALS(5, -6, 7, 8), TU_VALS(1, 2, 0, -3), TU_VALS(5, -6, 0, 0));
  check4(c, nb_relu_grad, NB_I64, TU_VALS(5, -6, 7, 8), TU_VALS(-1, 2, 0, 3), TU_VALS(0, -6, 0, 8));
}

/* Rank 0, rank 8, empty tensors: the result has the inputs' shape. */
static void test_shapes(void **state) {
  nb_ctx *c = *state;
  nb_tensor *y = nb_scalar(c, NB_F64, 0.5), *dy = nb_scalar(c, NB_F64, 2);
  tu_check(nb_tanh_grad(c, y, dy), NB_F64, 0, NULL, TU_VALS(1.5), 1e-12);
  const int64_t *s8 = TU_SHAPE(1, 1, 1, 1, 1, 1, 2, 1);
  nb_tensor *y8 = tu_make(c, NB_F32, 8, s8, TU_VALS(0.5, 2)), *g8 = tu_make(c, NB_F32, 8, s8, TU_VALS(-1, 3));
  tu_check(nb_sigmoid_grad(c, y8, g8), NB_F32, 8, s8, TU_VALS(-0.25, -6), 1e-6);
  tu_check(nb_relu_grad(c, g8, y8), NB_F32, 8, s8, TU_VALS(-1, 3), 0);
  nb_tensor *e = tu_make(c, NB_F32, 2, TU_SHAPE(0, 3), NULL);
  tu_check_shape(nb_elu_grad(c, e, e), NB_F32, 2, TU_SHAPE(0, 3));
  tu_check_shape(nb_softplus_grad(c, e, e), NB_F32, 2, TU_SHAPE(0, 3));
  assert_int_equal(nb_status(c), NB_OK);
}

/* Tensors past the parallel threshold: every element, on every thread's range. */
static void test_large(void **state) {
  nb_ctx *c = *state;
  const int64_t n = (1 << 17) + 3;
  float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
  for (int64_t i = 0; i < n; i++) {
    a[i] = (float)(i % 41) * 0.05f - 1.0f;
    b[i] = (float)(i % 13) - 6.0f;
  }
  nb_tensor *x = nb_tensor_from(c, NB_F32, 1, &n, a), *y = nb_tensor_from(c, NB_F32, 1, &n, b);
  nb_tensor *t = nb_tanh_grad(c, x, y), *s = nb_softplus_grad(c, y, x), *r = nb_relu_grad(c, y, x);
  assert_int_equal(nb_status(c), NB_OK);
  const float *tv = nb_data(t), *sv = nb_data(s), *rv = nb_data(r);
  for (int64_t i = 0; i < n; i++) {
    double tw = (double)b[i] * (1 - (double)a[i] * a[i]), sw = b[i] / (1 + exp(-(double)a[i]));
    double rw = a[i] > 0 ? b[i] : 0;
    if (fabs(tv[i] - tw) > 1e-5 || fabs(sv[i] - sw) > 1e-5 || rv[i] != rw)
      fail_msg("element %lld: got %g %g %g, want %g %g %g", (long long)i, tv[i], sv[i], rv[i], tw, sw, rw);
  }
  free(a);
  free(b);
}

static void test_grad_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *f23 = tu_make(c, NB_F32, 2, TU_SHAPE(2, 3), NULL), *f3 = tu_make(c, NB_F32, 1, TU_SHAPE(3), NULL);
  nb_tensor *d23 = tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), NULL), *i3 = tu_make(c, NB_I32, 1, TU_SHAPE(3), NULL);
  nb_tensor *b3 = tu_make(c, NB_BOOL, 1, TU_SHAPE(3), NULL);
  /* no broadcasting, not even of a size-1 dim */
  assert_null(nb_tanh_grad(c, f23, f3));
  tu_check_error(c, NB_SHAPE, "TanhGrad: y and dy must have the same shape", "[2,3] and [3]");
  assert_null(nb_relu_grad(c, f3, f23));
  tu_check_error(c, NB_SHAPE, "ReluGrad: gradients and features", "[3] and [2,3]");
  assert_null(nb_elu_grad(c, f23, tu_make(c, NB_F32, 2, TU_SHAPE(1, 3), NULL)));
  tu_check_error(c, NB_SHAPE, "EluGrad: gradients and outputs", "[2,3] and [1,3]");
  assert_null(nb_softplus_grad(c, nb_scalar(c, NB_F32, 1), f3));
  tu_check_error(c, NB_SHAPE, "SoftplusGrad", "[] and [3]");
  /* dtypes */
  assert_null(nb_sigmoid_grad(c, f23, d23));
  tu_check_error(c, NB_DTYPE, "SigmoidGrad", "float32 and float64");
  assert_null(nb_sqrt_grad(c, i3, i3));
  tu_check_error(c, NB_DTYPE, "SqrtGrad: input 0 has dtype int32", NULL);
  assert_null(nb_rsqrt_grad(c, i3, i3));
  tu_check_error(c, NB_DTYPE, "RsqrtGrad", "int32");
  assert_null(nb_reciprocal_grad(c, i3, i3));
  tu_check_error(c, NB_DTYPE, "ReciprocalGrad", "int32");
  assert_null(nb_elu_grad(c, i3, i3));
  tu_check_error(c, NB_DTYPE, "EluGrad", "int32");
  assert_null(nb_softplus_grad(c, i3, i3));
  tu_check_error(c, NB_DTYPE, "SoftplusGrad", "int32");
  assert_null(nb_relu_grad(c, b3, b3));
  tu_check_error(c, NB_DTYPE, "ReluGrad: input 0 has dtype bool", NULL);
  assert_null(nb_relu_grad(c, i3, f3));
  tu_check_error(c, NB_DTYPE, "ReluGrad", "int32 and float32");
  assert_null(nb_tanh_grad(c, NULL, f3));
  tu_check_error(c, NB_INVALID, "TanhGrad: input 0 is NULL", NULL);
}

/* The generic entry, with TF's op names and attr T. */
static void test_grad_generic_entry(void **state) {
  nb_ctx *c = *state;
  nb_tensor *in[2] = {tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, -1)),
                      tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, 4))};
  nb_tensor *out[1];
  nb_attr t64 = nb_attr_type("T", NB_F64), t32 = nb_attr_type("T", NB_F32);
  static const struct {
    const char *type;
    double want[2];
  } cases[] = {
      {"TanhGrad", {0, 0}},         {"SigmoidGrad", {0, -8}},
      {"RsqrtGrad", {-1.5, 2}},     {"SqrtGrad", {1.5, -2}},
      {"ReciprocalGrad", {-3, -4}}, {"ReluGrad", {1, -1}},
      {"EluGrad", {1, -1}},         {"SoftplusGrad", {0.952574126822433, -0.982013790037908}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    assert_int_equal(nb_op(c, cases[i].type, in, 2, &t64, 1, out, 1), NB_OK);
    tu_check(out[0], NB_F64, 1, TU_SHAPE(2), cases[i].want, 1e-12);
    nb_tensor_free(out[0]);
  }
  assert_int_equal(nb_op(c, "TanhGrad", in, 2, &t32, 1, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "TanhGrad", "T");
  assert_int_equal(nb_op(c, "SoftplusGrad", in, 1, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "SoftplusGrad", "expected 2 inputs, got 1");
}

/* ---- BroadcastGradientArgs ---------------------------------------------------------------- */

/* Checks BroadcastGradientArgs(s0, s1) == (w0, w1), all of dtype t. */
static void check_bga(nb_ctx *c, nb_dtype t, int n0, const double *s0, int n1, const double *s1, int m0,
                      const double *w0, int m1, const double *w1) {
  int64_t l0 = n0, l1 = n1, k0 = m0, k1 = m1;
  nb_tensor *a = tu_make(c, t, 1, &l0, s0), *b = tu_make(c, t, 1, &l1, s1), *r0, *r1;
  if (nb_broadcast_gradient_args(c, a, b, &r0, &r1)) fail_msg("%s", nb_error(c));
  tu_check(r0, t, 1, &k0, w0, 0);
  tu_check(r1, t, 1, &k1, w1, 0);
  nb_tensor_free(a);
  nb_tensor_free(b);
  nb_tensor_free(r0);
  nb_tensor_free(r1);
}

static void test_bga_values(void **state) {
  nb_ctx *c = *state;
  check_bga(c, NB_I32, 2, TU_VALS(2, 3), 1, TU_VALS(3), 0, NULL, 1, TU_VALS(0));
  check_bga(c, NB_I32, 3, TU_VALS(2, 1, 3), 2, TU_VALS(4, 1), 1, TU_VALS(1), 2, TU_VALS(0, 2));
  check_bga(c, NB_I32, 2, TU_VALS(5, 1), 2, TU_VALS(1, 7), 1, TU_VALS(1), 1, TU_VALS(0));
  /* a scalar's gradient sums over every axis */
  check_bga(c, NB_I32, 0, NULL, 2, TU_VALS(2, 2), 2, TU_VALS(0, 1), 0, NULL);
  check_bga(c, NB_I32, 0, NULL, 0, NULL, 0, NULL, 0, NULL);
  /* equal shapes reduce nothing, even size-1 dims ... */
  check_bga(c, NB_I32, 1, TU_VALS(1), 1, TU_VALS(1), 0, NULL, 0, NULL);
  check_bga(c, NB_I32, 2, TU_VALS(2, 1), 2, TU_VALS(2, 1), 0, NULL, 0, NULL);
  /* ... but once they differ, an axis where both are 1 is reduced for both */
  check_bga(c, NB_I32, 2, TU_VALS(1, 1), 1, TU_VALS(1), 2, TU_VALS(0, 1), 2, TU_VALS(0, 1));
  check_bga(c, NB_I32, 3, TU_VALS(1, 4, 1), 2, TU_VALS(1, 3), 2, TU_VALS(0, 2), 2, TU_VALS(0, 1));
  /* empty dims broadcast against 1 like any other */
  check_bga(c, NB_I32, 2, TU_VALS(0, 3), 2, TU_VALS(1, 3), 0, NULL, 1, TU_VALS(0));
  check_bga(c, NB_I64, 3, TU_VALS(3, 1, 2), 2, TU_VALS(4, 2), 1, TU_VALS(1), 1, TU_VALS(0));
  check_bga(c, NB_I64, 8, TU_VALS(1, 2, 1, 2, 1, 2, 1, 2), 8, TU_VALS(2, 1, 2, 1, 2, 1, 2, 1), 4, TU_VALS(0, 2, 4, 6),
            4, TU_VALS(1, 3, 5, 7));
}

static void test_bga_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *r0 = NULL, *r1 = NULL;
  nb_tensor *s23 = tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(2, 3)),
            *s4 = tu_make(c, NB_I32, 1, TU_SHAPE(1), TU_VALS(4));
  assert_int_equal(nb_broadcast_gradient_args(c, s23, s4, &r0, &r1), NB_SHAPE);
  assert_null(r0);
  assert_null(r1);
  tu_check_error(c, NB_SHAPE, "BroadcastGradientArgs: Incompatible shapes: [2,3] vs. [4]", NULL);
  nb_tensor *l64 = tu_make(c, NB_I64, 1, TU_SHAPE(1), TU_VALS(3));
  assert_int_equal(nb_broadcast_gradient_args(c, s23, l64, &r0, &r1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "BroadcastGradientArgs", "int32 and int64");
  nb_tensor *f = tu_make(c, NB_F32, 1, TU_SHAPE(1), TU_VALS(3));
  assert_int_equal(nb_broadcast_gradient_args(c, f, f, &r0, &r1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "BroadcastGradientArgs: input 0 has dtype float32", NULL);
  nb_tensor *m = tu_make(c, NB_I32, 2, TU_SHAPE(1, 2), TU_VALS(2, 3));
  assert_int_equal(nb_broadcast_gradient_args(c, m, s23, &r0, &r1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "s0 must be a vector", "[1,2]");
  assert_int_equal(nb_broadcast_gradient_args(c, s23, nb_scalar(c, NB_I32, 3), &r0, &r1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "s1 must be a vector", "[]");
  nb_tensor *long9 = tu_make(c, NB_I32, 1, TU_SHAPE(9), TU_VALS(1, 1, 1, 1, 1, 1, 1, 1, 1));
  assert_int_equal(nb_broadcast_gradient_args(c, long9, s23, &r0, &r1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "BroadcastGradientArgs", "9 values, at most 8");
  assert_int_equal(nb_broadcast_gradient_args(c, s23, s4, NULL, &r1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "BroadcastGradientArgs: r0 and r1 must not be NULL", NULL);
  assert_int_equal(nb_broadcast_gradient_args(c, NULL, s4, &r0, &r1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "input 0 is NULL", NULL);
  assert_int_equal(nb_broadcast_gradient_args(NULL, s23, s4, &r0, &r1), NB_INVALID);
}

static void test_bga_generic_entry(void **state) {
  nb_ctx *c = *state;
  nb_tensor *in[2] = {tu_make(c, NB_I64, 1, TU_SHAPE(2), TU_VALS(5, 1)),
                      tu_make(c, NB_I64, 1, TU_SHAPE(3), TU_VALS(2, 1, 7))};
  nb_tensor *out[2];
  nb_attr t = nb_attr_type("T", NB_I64);
  assert_int_equal(nb_op(c, "BroadcastGradientArgs", in, 2, &t, 1, out, 2), NB_OK);
  tu_check(out[0], NB_I64, 1, TU_SHAPE(2), TU_VALS(0, 2), 0);
  tu_check(out[1], NB_I64, 1, TU_SHAPE(1), TU_VALS(1), 0);
  nb_tensor_free(out[0]);
  nb_tensor_free(out[1]);
  assert_int_equal(nb_op(c, "BroadcastGradientArgs", in, 2, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "BroadcastGradientArgs", "has 2 outputs, caller asked for 1");
}

/* In a graph, BroadcastGradientArgs of Shape ops of statically shaped placeholders is
   folded at build time; with an unknown dim it is computed when run. */
static void test_bga_graph(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  nb_session *s = nb_session_new(g);
  nb_tensor *a = nb_placeholder(c, NB_F32, 3, TU_SHAPE(2, 1, 3), "a");
  nb_tensor *b = nb_placeholder(c, NB_F32, 2, TU_SHAPE(4, 1), "b");
  nb_tensor *u = nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 3), "u");
  nb_tensor *feeds[3] = {a, b, u};
  nb_tensor *vals[3] = {tu_make(e, NB_F32, 3, TU_SHAPE(2, 1, 3), NULL), tu_make(e, NB_F32, 2, TU_SHAPE(4, 1), NULL),
                        tu_make(e, NB_F32, 2, TU_SHAPE(1, 3), NULL)};
  nb_tensor *r[2], *out[2];
  assert_int_equal(nb_broadcast_gradient_args(c, nb_shape_op(c, a, NB_I32), nb_shape_op(c, b, NB_I32), &r[0], &r[1]),
                   NB_OK);
  assert_true(nb_is_symbolic(r[0]));
  tu_check_shape(r[0], NB_I32, 1, TU_SHAPE(1));
  tu_check_shape(r[1], NB_I32, 1, TU_SHAPE(2));
  tu_check(nb_constant_value(r[0]), NB_I32, 1, TU_SHAPE(1), TU_VALS(1), 0); /* folded */
  tu_check(nb_constant_value(r[1]), NB_I32, 1, TU_SHAPE(2), TU_VALS(0, 2), 0);
  assert_int_equal(nb_run(s, feeds, vals, 3, r, 2, out), NB_OK);
  tu_check(out[0], NB_I32, 1, TU_SHAPE(1), TU_VALS(1), 0);
  tu_check(out[1], NB_I32, 1, TU_SHAPE(2), TU_VALS(0, 2), 0);
  nb_tensor_free(out[0]);
  nb_tensor_free(out[1]);

  /* an unknown dim: the outputs' lengths are known only at run time */
  nb_tensor *d[2];
  assert_int_equal(nb_broadcast_gradient_args(c, nb_shape_op(c, u, NB_I64), nb_shape_op(c, a, NB_I64), &d[0], &d[1]),
                   NB_OK);
  assert_int_equal(nb_dtype_of(d[0]), NB_I64);
  assert_null(nb_constant_value(d[0]));
  assert_int_equal(nb_run(s, feeds, vals, 3, d, 2, out), NB_OK);
  tu_check(out[0], NB_I64, 1, TU_SHAPE(2), TU_VALS(0, 1), 0); /* [1,3] against [2,1,3] */
  tu_check(out[1], NB_I64, 1, TU_SHAPE(1), TU_VALS(1), 0);
  nb_tensor_free(out[0]);
  nb_tensor_free(out[1]);

  /* shapes that do not broadcast fail at run time */
  nb_tensor *bad[2];
  assert_int_equal(
      nb_broadcast_gradient_args(c, nb_shape_op(c, u, NB_I32), nb_shape_op(c, b, NB_I32), &bad[0], &bad[1]), NB_OK);
  vals[2] = tu_make(e, NB_F32, 2, TU_SHAPE(2, 3), NULL);
  if (nb_run(s, feeds, vals, 3, bad, 2, out) != NB_SHAPE) fail_msg("%s", nb_session_error(s));
  if (!strstr(nb_session_error(s), "Incompatible shapes: [2,3] vs. [4,1]")) fail_msg("%s", nb_session_error(s));

  nb_session_free(s);
  nb_ctx_free(c);
  nb_ctx_free(e);
  nb_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_tanh_sigmoid_grad, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_sqrt_rsqrt_reciprocal_grad, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_relu_elu_softplus_grad, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_shapes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_large, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_generic_entry, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_bga_values, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_bga_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_bga_generic_entry, tu_setup, tu_teardown),
      cmocka_unit_test(test_bga_graph),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
