/* nb_load_op_library: the example op library (examples/ops/swish_op.c: a fused Swish and
   its gradient op) loads and runs eagerly and in graphs, with gradients checked
   numerically to second order; and every way a load can fail is an error naming why,
   registering nothing the library meant to register. */
#include "graphutil.h"

#include <math.h>

static const double xs[5] = {-2.5, -0.7, 0, 0.4, 3};

static double sigmoid(double v) { return 1 / (1 + exp(-v)); }
static double swish(double x, double b) { return x * sigmoid(b * x); }
static double swish_d1(double x, double b) {
  double s = sigmoid(b * x);
  return s + b * x * s * (1 - s);
}
static double swish_d2(double x, double b) {
  double s = sigmoid(b * x);
  return b * s * (1 - s) * (2 + b * x * (1 - 2 * s));
}

/* A handful of roundings (exp, the sigmoid, products) in t on each side, relative to |want|,
   plus a unit roundoff absolute for values near 0. */
static void check_close(const nb_tensor *got, nb_dtype t, const double *want) {
  assert_non_null(got);
  assert_int_equal(nb_num_elements(got), 5);
  for (int i = 0; i < 5; i++) {
    double bound = 2 * tu_gamma(t, 12) * (fabs(want[i]) + 1);
    if (!(fabs(nb_item(got, i) - want[i]) <= bound))
      fail_msg("element %d: got %.17g, want %.17g (bound %.3g)", i, nb_item(got, i), want[i], bound);
  }
}

static void load_swish(void) { assert_int_equal(nb_load_op_library(NB_SWISH_LIBRARY), NB_OK); }

static nb_tensor *swish_op(nb_ctx *c, nb_tensor *x, double beta) {
  nb_attr a = nb_attr_float("beta", beta);
  nb_tensor *y = NULL;
  nb_op(c, "Swish", &x, 1, &a, 1, &y, 1);
  return y;
}

static void test_load_and_run(void **state) {
  nb_ctx *c = *state;
  load_swish();
  load_swish(); /* a second load is nothing new */
  assert_string_equal(nb_registry_error(), "");
  double want[5], want2[5];
  for (int i = 0; i < 5; i++) want[i] = swish(xs[i], 1), want2[i] = swish(xs[i], 2);
  nb_tensor *x = tu_make(c, NB_F64, 1, TU_SHAPE(5), xs), *x32 = tu_make(c, NB_F32, 1, TU_SHAPE(5), xs), *y = NULL;
  assert_int_equal(nb_op(c, "Swish", &x, 1, NULL, 0, &y, 1), NB_OK); /* beta's default: 1 */
  check_close(y, NB_F64, want);
  check_close(swish_op(c, x, 2), NB_F64, want2);
  check_close(swish_op(c, x32, 2), NB_F32, want2);
  nb_tensor *i32 = nb_scalar(c, NB_I32, 1);
  assert_null(swish_op(c, i32, 1));
  tu_check_error(c, NB_DTYPE, "Swish", "attr T=int32 is not supported; expected float32, float64");
}

/* Central differences at step 1e-6 in float64: roundoff about 1e-10 |y| and truncation
   about 1e-12 |y'''|, both far below this bound for these |y| < 10. */
#define GRADCHECK_TOL 1e-6

static void test_graph_gradients(void **state) {
  gu_fixture *f = *state;
  load_swish();
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(5), "x"), *v = tu_make(f->e, NB_F64, 1, TU_SHAPE(5), xs);
  nb_tensor *y = nb_sum(f->c, swish_op(f->c, x, 1.5), NULL, 0, false), *dx, *d2x;
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_OK);
  nb_tensor *s = nb_sum(f->c, dx, NULL, 0, false);
  assert_int_equal(nb_gradients(f->c, &s, 1, &x, 1, NULL, &d2x), NB_OK);
  double d1[5], d2[5];
  for (int i = 0; i < 5; i++) d1[i] = swish_d1(xs[i], 1.5), d2[i] = swish_d2(xs[i], 1.5);
  nb_tensor *r1 = gu_run1(f, x, v, dx), *r2 = gu_run1(f, x, v, d2x);
  check_close(r1, NB_F64, d1);
  check_close(r2, NB_F64, d2);
  nb_tensor_free(r1);
  nb_tensor_free(r2);
  double err = 1;
  assert_int_equal(nb_gradcheck(f->c, y, &x, 1, &v, &err), NB_OK);
  assert_true(err < GRADCHECK_TOL);
  assert_int_equal(nb_gradcheck(f->c, s, &x, 1, &v, &err), NB_OK);
  assert_true(err < GRADCHECK_TOL);
}

static void test_tape_gradients(void **state) {
  nb_ctx *c = *state;
  load_swish();
  nb_tensor *x = tu_make(c, NB_F64, 1, TU_SHAPE(5), xs), *d1 = NULL, *d2 = NULL;
  nb_tape *outer = nb_tape_begin(c, 0), *inner = nb_tape_begin(c, 0);
  nb_tape_watch(outer, x);
  nb_tape_watch(inner, x);
  nb_tensor *y = nb_sum(c, swish_op(c, x, 0.5), NULL, 0, false);
  assert_int_equal(nb_tape_gradient(inner, &y, 1, &x, 1, NULL, &d1), NB_OK);
  nb_tensor *s = nb_sum(c, d1, NULL, 0, false);
  assert_int_equal(nb_tape_gradient(outer, &s, 1, &x, 1, NULL, &d2), NB_OK);
  nb_tape_end(inner);
  nb_tape_end(outer);
  double w1[5], w2[5];
  for (int i = 0; i < 5; i++) w1[i] = swish_d1(xs[i], 0.5), w2[i] = swish_d2(xs[i], 0.5);
  check_close(d1, NB_F64, w1);
  check_close(d2, NB_F64, w2);
}

/* path fails to load with code, a message holding frag, and op_type (which the library
   would have registered) still unknown. */
static void expect_refused(nb_ctx *c, const char *path, nb_code code, const char *frag, const char *op_type) {
  assert_int_equal(nb_load_op_library(path), code);
  if (!strstr(nb_registry_error(), frag)) fail_msg("message '%s' lacks '%s'", nb_registry_error(), frag);
  if (!op_type) return;
  nb_tensor *x = nb_scalar(c, NB_F64, 1), *y;
  assert_int_equal(nb_op(c, op_type, &x, 1, NULL, 0, &y, 1), NB_NOT_FOUND);
  nb_clear_error(c);
}

static void test_refused_libraries(void **state) {
  nb_ctx *c = *state;
  expect_refused(c, NULL, NB_INVALID, "path is NULL", NULL);
  expect_refused(c, "no-such-dir/no_such_library.so", NB_IO, "cannot load 'no-such-dir/no_such_library.so': ", NULL);
  assert_non_null(strstr(nb_registry_error(), "cannot open shared object file")); /* the loader's words */
  expect_refused(c, __FILE__, NB_IO, "cannot load", NULL);                        /* not a shared object */
  expect_refused(c, NB_LIBRARY_NO_ABI, NB_NOT_FOUND,
                 "is not a nabla op library: it does not define nabla_op_library_abi", "NoAbiOp");
  expect_refused(c, NB_LIBRARY_NO_INIT, NB_NOT_FOUND, "it does not define nabla_op_library_init", "MisnamedInitOp");
  expect_refused(c, NB_LIBRARY_OLD_ABI, NB_UNIMPLEMENTED, "was built against nabla op ABI 2; this nabla's is 1",
                 "OldAbiOp");
  expect_refused(c, NB_LIBRARY_INIT_FAILS, NB_INVALID, "failed with NB_INVALID: op 'MatMul' is already registered",
                 NULL);
  expect_refused(c, NB_LIBRARY_INIT_FAILS, NB_INVALID, "failed with NB_INVALID", NULL); /* loaded: its init's code */
  nb_tensor *x = nb_scalar(c, NB_F64, 1), *y; /* what the failing init registered before failing stays */
  assert_int_equal(nb_op(c, "HalfLoadedOp", &x, 1, NULL, 0, &y, 1), NB_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_refused_libraries, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_load_and_run, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_gradients, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_tape_gradients, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
