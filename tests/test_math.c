/* Elementwise math family: values, broadcasting corner cases, dtypes, errors. */
#include "graphutil.h"

#include "../src/autodiff/autodiff.h"
#include "../src/ops/op.h"

#include <float.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define F32 NB_F32
#define F64 NB_F64
#define I32 NB_I32
#define I64 NB_I64
#define BOOL NB_BOOL

typedef nb_tensor *(*unary_op)(nb_ctx *, nb_tensor *);
typedef nb_tensor *(*binary_op)(nb_ctx *, nb_tensor *, nb_tensor *);

/* Checks a unary op on a few points against expected values, in f32 and f64. */
static void check_unary(nb_ctx *c, unary_op op, const double *x, const double *want, int n) {
  const int64_t shape[1] = {n};
  nb_tensor *y64 = op(c, tu_make(c, F64, 1, shape, x));
  tu_check(y64, F64, 1, shape, want, 1e-12);
  nb_tensor *y32 = op(c, tu_make(c, F32, 1, shape, x));
  tu_check(y32, F32, 1, shape, want, 2e-6);
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_unary_values(void **state) {
  nb_ctx *c = *state;
  const double e = exp(1.0);
  check_unary(c, nb_neg, TU_VALS(1, -2, 0), TU_VALS(-1, 2, 0), 3);
  check_unary(c, nb_exp, TU_VALS(0, 1, -1), TU_VALS(1, e, 1 / e), 3);
  check_unary(c, nb_log, TU_VALS(1, e, 0), TU_VALS(0, 1, -INFINITY), 3);
  check_unary(c, nb_log1p, TU_VALS(0, e - 1, 1e-10), TU_VALS(0, 1, 1e-10), 3);
  check_unary(c, nb_sqrt, TU_VALS(4, 0, 2.25), TU_VALS(2, 0, 1.5), 3);
  check_unary(c, nb_rsqrt, TU_VALS(4, 0.25, 1), TU_VALS(0.5, 2, 1), 3);
  check_unary(c, nb_reciprocal, TU_VALS(4, -0.5, 0), TU_VALS(0.25, -2, INFINITY), 3);
  check_unary(c, nb_square, TU_VALS(3, -2, 0.5), TU_VALS(9, 4, 0.25), 3);
  check_unary(c, nb_abs, TU_VALS(-3, 2, 0), TU_VALS(3, 2, 0), 3);
  check_unary(c, nb_sign, TU_VALS(-3, 2, 0, NAN), TU_VALS(-1, 1, 0, NAN), 4);
  check_unary(c, nb_tanh, TU_VALS(0, 1, -20), TU_VALS(0, 0.7615941559557649, -1), 3);
  check_unary(c, nb_sigmoid, TU_VALS(0, 2, -800, 800), TU_VALS(0.5, 0.8807970779778823, 0, 1), 4);
  check_unary(c, nb_relu, TU_VALS(-1, 0, 2.5), TU_VALS(0, 0, 2.5), 3);
  check_unary(c, nb_elu, TU_VALS(-1, 0, 2), TU_VALS(1 / e - 1, 0, 2), 3);
  check_unary(c, nb_softplus, TU_VALS(0, 1, -1, 100, -100),
              TU_VALS(log(2.0), log(1 + e), log(1 + 1 / e), 100, 3.720075976020836e-44), 5);
  check_unary(c, nb_sin, TU_VALS(0, M_PI / 2, -M_PI / 6), TU_VALS(0, 1, -0.5), 3);
  check_unary(c, nb_cos, TU_VALS(0, M_PI, M_PI / 3), TU_VALS(1, -1, 0.5), 3);
}

/* float32 Exp/Tanh/Sigmoid use their own vectorized code: compare against float64 libm
   on a dense grid (including the denormal and overflow ends) to a few ulp. */
static void test_f32_transcendental_accuracy(void **state) {
  nb_ctx *c = *state;
  enum { N = 40001 };
  static float x[N];
  for (int i = 0; i < N; i++) x[i] = -105.0f + 210.0f * (float)i / (N - 1);
  nb_tensor *X = nb_tensor_from(c, F32, 1, TU_SHAPE(N), x);
  const float *e = nb_data(nb_exp(c, X)), *t = nb_data(nb_tanh(c, X)), *s = nb_data(nb_sigmoid(c, X));
  assert_non_null(e);
  for (int i = 0; i < N; i++) {
    double v = x[i], we = (float)exp(v), wt = tanh(v), ws = 1 / (1 + exp(-v));
    /* 4 ulp relative, or absolute below the smallest normal float */
    if (isinf(we) ? e[i] != we : fabs(e[i] - we) > 4.8e-7 * we && fabs(e[i] - we) > 1.2e-38)
      fail_msg("exp(%g) = %g, want %g", v, e[i], we);
    if (fabs(t[i] - wt) > 4.8e-7 * fabs(wt) + 1e-45) fail_msg("tanh(%g) = %g, want %g", v, t[i], wt);
    if (fabs(s[i] - ws) > 4.8e-7 * ws && fabs(s[i] - ws) > 1.2e-38) fail_msg("sigmoid(%g) = %g, want %g", v, s[i], ws);
  }
  nb_tensor *special = tu_make(c, F32, 1, TU_SHAPE(4), TU_VALS(NAN, INFINITY, -INFINITY, 0));
  tu_check(nb_exp(c, special), F32, 1, TU_SHAPE(4), TU_VALS(NAN, INFINITY, 0, 1), 0);
  tu_check(nb_tanh(c, special), F32, 1, TU_SHAPE(4), TU_VALS(NAN, 1, -1, 0), 0);
  tu_check(nb_sigmoid(c, special), F32, 1, TU_SHAPE(4), TU_VALS(NAN, 1, 0, 0.5), 0);
}

static void test_unary_int(void **state) {
  nb_ctx *c = *state;
  const int64_t s[1] = {4};
  nb_tensor *x = tu_make(c, I32, 1, s, TU_VALS(-3, 0, 5, -2147483648.0));
  tu_check(nb_neg(c, x), I32, 1, s, TU_VALS(3, 0, -5, -2147483648.0), 0);
  tu_check(nb_abs(c, x), I32, 1, s, TU_VALS(3, 0, 5, -2147483648.0), 0); /* wraps like TF */
  tu_check(nb_sign(c, x), I32, 1, s, TU_VALS(-1, 0, 1, -1), 0);
  tu_check(nb_relu(c, x), I32, 1, s, TU_VALS(0, 0, 5, 0), 0);
  nb_tensor *y = tu_make(c, I64, 1, s, TU_VALS(-3, 0, 5, 7));
  tu_check(nb_square(c, y), I64, 1, s, TU_VALS(9, 0, 25, 49), 0);
  /* float-only ops reject ints with the op name and the dtypes */
  assert_null(nb_tanh(c, x));
  tu_check_error(c, NB_DTYPE, "Tanh: input 0 has dtype int32", "float32, float64");
  assert_null(nb_exp(c, tu_make(c, BOOL, 1, s, NULL)));
  tu_check_error(c, NB_DTYPE, "Exp", "bool");
  nb_tensor *b = tu_make(c, BOOL, 1, s, TU_VALS(1, 0, 1, 0));
  tu_check(nb_logical_not(c, b), BOOL, 1, s, TU_VALS(0, 1, 0, 1), 0);
  assert_null(nb_logical_not(c, x));
  tu_check_error(c, NB_DTYPE, "LogicalNot", "bool");
}

static void test_binary_values(void **state) {
  nb_ctx *c = *state;
  const int64_t s[1] = {4};
  for (nb_dtype t = F32; t <= F64; t++) {
    nb_tensor *a = tu_make(c, t, 1, s, TU_VALS(1, -2, 3, 0.5));
    nb_tensor *b = tu_make(c, t, 1, s, TU_VALS(2, 4, -1, 0.5));
    tu_check(nb_add(c, a, b), t, 1, s, TU_VALS(3, 2, 2, 1), 1e-7);
    tu_check(nb_sub(c, a, b), t, 1, s, TU_VALS(-1, -6, 4, 0), 1e-7);
    tu_check(nb_mul(c, a, b), t, 1, s, TU_VALS(2, -8, -3, 0.25), 1e-7);
    tu_check(nb_real_div(c, a, b), t, 1, s, TU_VALS(0.5, -0.5, -3, 1), 1e-7);
    tu_check(nb_pow(c, a, b), t, 1, s, TU_VALS(1, 16, 1.0 / 3, sqrt(0.5)), 1e-6);
    tu_check(nb_squared_difference(c, a, b), t, 1, s, TU_VALS(1, 36, 16, 0), 1e-7);
    tu_check(nb_maximum(c, a, b), t, 1, s, TU_VALS(2, 4, 3, 0.5), 0);
    tu_check(nb_minimum(c, a, b), t, 1, s, TU_VALS(1, -2, -1, 0.5), 0);
    tu_check(nb_less(c, a, b), BOOL, 1, s, TU_VALS(1, 1, 0, 0), 0);
    tu_check(nb_less_equal(c, a, b), BOOL, 1, s, TU_VALS(1, 1, 0, 1), 0);
    tu_check(nb_greater(c, a, b), BOOL, 1, s, TU_VALS(0, 0, 1, 0), 0);
    tu_check(nb_greater_equal(c, a, b), BOOL, 1, s, TU_VALS(0, 0, 1, 1), 0);
    tu_check(nb_equal(c, a, b), BOOL, 1, s, TU_VALS(0, 0, 0, 1), 0);
    tu_check(nb_not_equal(c, a, b), BOOL, 1, s, TU_VALS(1, 1, 1, 0), 0);
  }
  /* Maximum/Minimum propagate NaN from either side */
  const int64_t s2[1] = {2};
  nb_tensor *n = tu_make(c, F32, 1, s2, TU_VALS(NAN, 1));
  nb_tensor *m = tu_make(c, F32, 1, s2, TU_VALS(1, NAN));
  tu_check(nb_maximum(c, n, m), F32, 1, s2, TU_VALS(NAN, NAN), 0);
  tu_check(nb_minimum(c, n, m), F32, 1, s2, TU_VALS(NAN, NAN), 0);
  /* Pow with a zero base: 0^0 = 1, 0^-1 = inf */
  nb_tensor *z = tu_make(c, F64, 1, s2, TU_VALS(0, 0));
  tu_check(nb_pow(c, z, tu_make(c, F64, 1, s2, TU_VALS(0, -1))), F64, 1, s2, TU_VALS(1, INFINITY), 0);
}

static void test_binary_int(void **state) {
  nb_ctx *c = *state;
  const int64_t s[1] = {4};
  nb_tensor *a = tu_make(c, I32, 1, s, TU_VALS(7, -7, 2147483647.0, -2147483648.0));
  nb_tensor *b = tu_make(c, I32, 1, s, TU_VALS(2, 2, 1, -1));
  tu_check(nb_add(c, a, b), I32, 1, s, TU_VALS(9, -5, -2147483648.0, 2147483647.0), 0); /* wraps */
  tu_check(nb_real_div(c, a, b), I32, 1, s, TU_VALS(3, -3, 2147483647.0, -2147483648.0), 0);
  tu_check(nb_mul(c, a, b), I32, 1, s, TU_VALS(14, -14, 2147483647.0, -2147483648.0), 0);
  nb_tensor *p = tu_make(c, I64, 1, s, TU_VALS(3, -2, 0, 10));
  nb_tensor *q = tu_make(c, I64, 1, s, TU_VALS(4, 3, 0, 2));
  tu_check(nb_pow(c, p, q), I64, 1, s, TU_VALS(81, -8, 1, 100), 0);
  tu_check(nb_maximum(c, p, q), I64, 1, s, TU_VALS(4, 3, 0, 10), 0);
  tu_check(nb_squared_difference(c, p, q), I64, 1, s, TU_VALS(1, 25, 0, 64), 0);
  /* integer division by zero and negative powers are errors, not crashes */
  assert_null(nb_real_div(c, a, tu_make(c, I32, 1, s, TU_VALS(1, 0, 1, 1))));
  tu_check_error(c, NB_INVALID, "RealDiv", "Integer division by zero");
  assert_null(nb_pow(c, p, tu_make(c, I64, 1, s, TU_VALS(1, -1, 1, 1))));
  tu_check_error(c, NB_INVALID, "Pow", "negative integer powers");
  nb_tensor *t = tu_make(c, BOOL, 1, s, TU_VALS(1, 1, 0, 0));
  nb_tensor *f = tu_make(c, BOOL, 1, s, TU_VALS(1, 0, 1, 0));
  tu_check(nb_logical_and(c, t, f), BOOL, 1, s, TU_VALS(1, 0, 0, 0), 0);
  tu_check(nb_logical_or(c, t, f), BOOL, 1, s, TU_VALS(1, 1, 1, 0), 0);
  tu_check(nb_equal(c, t, f), BOOL, 1, s, TU_VALS(1, 0, 0, 1), 0);
  tu_check(nb_not_equal(c, t, f), BOOL, 1, s, TU_VALS(0, 1, 1, 0), 0);
  assert_null(nb_less(c, t, f));
  tu_check_error(c, NB_DTYPE, "Less", "bool");
  assert_null(nb_add(c, t, f));
  tu_check_error(c, NB_DTYPE, "AddV2", "bool");
}

static void test_broadcasting(void **state) {
  nb_ctx *c = *state;
  /* scalar with tensor, both orders */
  nb_tensor *x = tu_make(c, F32, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
  nb_tensor *s = nb_scalar(c, F32, 10);
  tu_check(nb_sub(c, x, s), F32, 2, TU_SHAPE(2, 3), TU_VALS(-9, -8, -7, -6, -5, -4), 0);
  tu_check(nb_sub(c, s, x), F32, 2, TU_SHAPE(2, 3), TU_VALS(9, 8, 7, 6, 5, 4), 0);
  /* scalar with scalar stays rank 0 */
  tu_check(nb_mul(c, s, s), F32, 0, NULL, TU_VALS(100), 0);
  /* size-1 dims on both sides: [3,1] + [1,4] -> [3,4] */
  nb_tensor *col = tu_make(c, F64, 2, TU_SHAPE(3, 1), TU_VALS(0, 10, 20));
  nb_tensor *row = tu_make(c, F64, 2, TU_SHAPE(1, 4), TU_VALS(1, 2, 3, 4));
  tu_check(nb_add(c, col, row), F64, 2, TU_SHAPE(3, 4), TU_VALS(1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24), 0);
  /* rank mismatch: [2,2,3] - [3] and [2,1,3] - [2,1] */
  nb_tensor *t = tu_make(c, I32, 3, TU_SHAPE(2, 2, 3), TU_VALS(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
  nb_tensor *v = tu_make(c, I32, 1, TU_SHAPE(3), TU_VALS(100, 200, 300));
  tu_check(nb_sub(c, t, v), I32, 3, TU_SHAPE(2, 2, 3),
           TU_VALS(-100, -199, -298, -97, -196, -295, -94, -193, -292, -91, -190, -289), 0);
  nb_tensor *u = tu_make(c, I32, 3, TU_SHAPE(2, 1, 3), TU_VALS(1, 2, 3, 4, 5, 6));
  nb_tensor *w = tu_make(c, I32, 2, TU_SHAPE(2, 1), TU_VALS(10, 20));
  tu_check(nb_mul(c, u, w), I32, 3, TU_SHAPE(2, 2, 3), TU_VALS(10, 20, 30, 20, 40, 60, 40, 50, 60, 80, 100, 120), 0);
  /* middle broadcast dim: [2,1,2] * [2,3,1] -> [2,3,2] */
  nb_tensor *m1 = tu_make(c, F32, 3, TU_SHAPE(2, 1, 2), TU_VALS(1, 2, 3, 4));
  nb_tensor *m2 = tu_make(c, F32, 3, TU_SHAPE(2, 3, 1), TU_VALS(1, 10, 100, 2, 20, 200));
  tu_check(nb_mul(c, m1, m2), F32, 3, TU_SHAPE(2, 3, 2), TU_VALS(1, 2, 10, 20, 100, 200, 6, 8, 60, 80, 600, 800), 0);
  /* empty tensors: [0,3] + [1,3] -> [0,3]; [0] + [1] -> [0]; [2,0] + scalar */
  nb_tensor *e = tu_make(c, F32, 2, TU_SHAPE(0, 3), NULL);
  tu_check_shape(nb_add(c, e, tu_make(c, F32, 2, TU_SHAPE(1, 3), TU_VALS(1, 2, 3))), F32, 2, TU_SHAPE(0, 3));
  tu_check_shape(nb_add(c, tu_make(c, F32, 1, TU_SHAPE(0), NULL), tu_make(c, F32, 1, TU_SHAPE(1), TU_VALS(1))), F32, 1,
                 TU_SHAPE(0));
  tu_check_shape(nb_greater(c, tu_make(c, F64, 2, TU_SHAPE(2, 0), NULL), nb_scalar(c, F64, 0)), BOOL, 2,
                 TU_SHAPE(2, 0));
  /* incompatible shapes name both */
  assert_null(nb_add(c, x, tu_make(c, F32, 1, TU_SHAPE(2), TU_VALS(1, 2))));
  tu_check_error(c, NB_SHAPE, "AddV2: Incompatible shapes", "[2,3] vs. [2]");
  assert_null(nb_add(c, e, tu_make(c, F32, 1, TU_SHAPE(2), TU_VALS(1, 2))));
  tu_check_error(c, NB_SHAPE, "[0,3] vs. [2]", NULL);
  /* mixed dtypes */
  assert_null(nb_add(c, x, nb_scalar(c, F64, 1)));
  tu_check_error(c, NB_DTYPE, "AddV2", "float32 and float64");
}

/* Large enough for the threaded path: [512,300] + [300] and [512,1] * [512,300]. A sum or
   product is one correctly rounded operation, the same bits on any path; Tanh is nabla's
   vectorized code, within its 4 ulp of tanh (see above) rather than equal to libm's
   tanhf, and the same bits under any thread count (each element the same computation). */
static void test_broadcast_large(void **state) {
  nb_ctx *c = *state;
  enum { R = 512, C = 300 };
  static float a[R * C], b[C], col[R], first_tanh[R * C];
  for (int i = 0; i < R * C; i++) a[i] = (float)(i % 97) - 40;
  for (int j = 0; j < C; j++) b[j] = (float)j * 0.5f;
  for (int i = 0; i < R; i++) col[i] = (float)(i % 7);
  for (int threads = 1, most = tu_set_threads(c, 2); threads <= most; threads++) {
    nb_ctx_set_threads(c, threads);
    nb_tensor *A = nb_tensor_from(c, F32, 2, TU_SHAPE(R, C), a);
    nb_tensor *B = nb_tensor_from(c, F32, 1, TU_SHAPE(C), b);
    nb_tensor *K = nb_tensor_from(c, F32, 2, TU_SHAPE(R, 1), col);
    const float *s = nb_data(nb_add(c, A, B));
    const float *p = nb_data(nb_mul(c, K, A));
    const float *t = nb_data(nb_tanh(c, A));
    assert_non_null(s);
    for (int i = 0; i < R; i++)
      for (int j = 0; j < C; j++) {
        assert_true(s[i * C + j] == a[i * C + j] + b[j]);
        assert_true(p[i * C + j] == col[i] * a[i * C + j]);
        double wt = tanh(a[i * C + j]);
        if (fabs(t[i * C + j] - wt) > 4.8e-7 * fabs(wt))
          fail_msg("tanh(%g) = %g, want %g", a[i * C + j], t[i * C + j], wt);
      }
    if (threads == 1)
      memcpy(first_tanh, t, sizeof first_tanh);
    else
      assert_memory_equal(t, first_tanh, sizeof first_tanh);
  }
}

static void test_select(void **state) {
  nb_ctx *c = *state;
  nb_tensor *cond = tu_make(c, BOOL, 2, TU_SHAPE(2, 1), TU_VALS(1, 0));
  nb_tensor *t = tu_make(c, I64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3));
  nb_tensor *e = nb_scalar(c, I64, -1);
  tu_check(nb_select(c, cond, t, e), I64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, -1, -1, -1), 0);
  nb_tensor *c2 = tu_make(c, BOOL, 1, TU_SHAPE(3), TU_VALS(0, 1, 0));
  nb_tensor *tf = tu_make(c, F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
  nb_tensor *ef = tu_make(c, F64, 2, TU_SHAPE(2, 1), TU_VALS(-1, -2));
  tu_check(nb_select(c, c2, tf, ef), F64, 2, TU_SHAPE(2, 3), TU_VALS(-1, 2, -1, -2, 5, -2), 0);
  nb_tensor *cb = tu_make(c, BOOL, 0, NULL, TU_VALS(1));
  nb_tensor *tb = tu_make(c, BOOL, 1, TU_SHAPE(2), TU_VALS(1, 0));
  tu_check(nb_select(c, cb, tb, tu_make(c, BOOL, 1, TU_SHAPE(2), TU_VALS(0, 0))), BOOL, 1, TU_SHAPE(2), TU_VALS(1, 0),
           0);
  assert_null(nb_select(c, t, t, t));
  tu_check_error(c, NB_DTYPE, "SelectV2: input 0 has dtype int64", "bool");
  assert_null(nb_select(c, cond, t, nb_scalar(c, F32, 1)));
  tu_check_error(c, NB_DTYPE, "SelectV2", "int64 and float32");
  assert_null(nb_select(c, tu_make(c, BOOL, 1, TU_SHAPE(4), NULL), t, e));
  tu_check_error(c, NB_SHAPE, "SelectV2: Incompatible shapes", "[4] vs. [3]");
}

static void test_cast(void **state) {
  nb_ctx *c = *state;
  nb_tensor *f = tu_make(c, F32, 1, TU_SHAPE(6), TU_VALS(1.9, -1.9, 0, NAN, 1e20, -1e20));
  tu_check(nb_cast(c, f, I32), I32, 1, TU_SHAPE(6), TU_VALS(1, -1, 0, 0, 2147483647.0, -2147483648.0), 0);
  tu_check(nb_cast(c, f, BOOL), BOOL, 1, TU_SHAPE(6), TU_VALS(1, 1, 0, 1, 1, 1), 0);
  tu_check(nb_cast(c, f, F64), F64, 1, TU_SHAPE(6), TU_VALS(1.9f, -1.9f, 0, NAN, 1e20f, -1e20f), 0);
  nb_tensor *i = tu_make(c, I64, 2, TU_SHAPE(1, 3), TU_VALS(-5, 0, 4294967297.0));
  tu_check(nb_cast(c, i, I32), I32, 2, TU_SHAPE(1, 3), TU_VALS(-5, 0, 1), 0); /* truncates bits */
  tu_check(nb_cast(c, i, F32), F32, 2, TU_SHAPE(1, 3), TU_VALS(-5, 0, 4294967297.0), 1e-7);
  tu_check(nb_cast(c, tu_make(c, BOOL, 1, TU_SHAPE(2), TU_VALS(1, 0)), F64), F64, 1, TU_SHAPE(2), TU_VALS(1, 0), 0);
  tu_check(nb_cast(c, i, I64), I64, 2, TU_SHAPE(1, 3), TU_VALS(-5, 0, 4294967297.0), 0);
  assert_null(nb_cast(c, i, (nb_dtype)42));
  tu_check_error(c, NB_DTYPE, "Cast", "attr DstT=42 is not a dtype");
}

/* An explicit SrcT must name the input's dtype; leaving it out never constrains. */
static void test_cast_srct(void **state) {
  nb_ctx *c = *state;
  nb_tensor *f = tu_make(c, F32, 1, TU_SHAPE(2), TU_VALS(1.5, -2.5));
  nb_tensor *i = tu_make(c, I32, 1, TU_SHAPE(2), TU_VALS(3, -4));
  nb_tensor *out[1];
  nb_attr ok[2] = {nb_attr_type("SrcT", NB_F32), nb_attr_type("DstT", NB_I64)};
  assert_int_equal(nb_op(c, "Cast", &f, 1, ok, 2, out, 1), NB_OK);
  tu_check(out[0], I64, 1, TU_SHAPE(2), TU_VALS(1, -2), 0);
  nb_attr dst_only = nb_attr_type("DstT", NB_F64);
  assert_int_equal(nb_op(c, "Cast", &i, 1, &dst_only, 1, out, 1), NB_OK);
  tu_check(out[0], F64, 1, TU_SHAPE(2), TU_VALS(3, -4), 0);
  assert_int_equal(nb_op(c, "Cast", &i, 1, ok, 2, out, 1), NB_DTYPE);
  assert_null(out[0]);
  tu_check_error(c, NB_DTYPE, "Cast: attr SrcT=float32 does not match input 0 of dtype int32", NULL);
  nb_attr bool_src[2] = {nb_attr_type("DstT", NB_BOOL), nb_attr_type("SrcT", NB_BOOL)};
  assert_int_equal(nb_op(c, "Cast", &f, 1, bool_src, 2, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "SrcT=bool", "dtype float32");
  /* the wrapper works from every source dtype */
  tu_check(nb_cast(c, i, BOOL), BOOL, 1, TU_SHAPE(2), TU_VALS(1, 1), 0);
  tu_check(nb_cast(c, tu_make(c, F64, 0, NULL, TU_VALS(2.75)), I32), I32, 0, NULL, TU_VALS(2), 0);
}

/* incompatible_shape_error = false: shapes that do not broadcast give a scalar, false
   for Equal and true for NotEqual; shapes that broadcast compare as usual. */
static void test_equality_incompatible_shapes(void **state) {
  nb_ctx *c = *state;
  nb_tensor *a = tu_make(c, F32, 1, TU_SHAPE(2), TU_VALS(1, 2));
  nb_tensor *b = tu_make(c, F32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3));
  nb_tensor *ab[2] = {a, b}, *out[1];
  nb_attr lax = nb_attr_bool("incompatible_shape_error", false);
  assert_int_equal(nb_op(c, "Equal", ab, 2, &lax, 1, out, 1), NB_OK);
  tu_check(out[0], BOOL, 0, NULL, TU_VALS(0), 0);
  assert_int_equal(nb_op(c, "NotEqual", ab, 2, &lax, 1, out, 1), NB_OK);
  tu_check(out[0], BOOL, 0, NULL, TU_VALS(1), 0);
  /* empty against non-empty, int64 and bool inputs, different ranks */
  nb_tensor *e[2] = {tu_make(c, I64, 2, TU_SHAPE(0, 2), NULL), tu_make(c, I64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3))};
  assert_int_equal(nb_op(c, "Equal", e, 2, &lax, 1, out, 1), NB_OK);
  tu_check(out[0], BOOL, 0, NULL, TU_VALS(0), 0);
  nb_tensor *bb[2] = {tu_make(c, BOOL, 2, TU_SHAPE(2, 2), TU_VALS(1, 0, 1, 0)),
                      tu_make(c, BOOL, 1, TU_SHAPE(3), TU_VALS(1, 0, 1))};
  assert_int_equal(nb_op(c, "NotEqual", bb, 2, &lax, 1, out, 1), NB_OK);
  tu_check(out[0], BOOL, 0, NULL, TU_VALS(1), 0);
  /* broadcastable shapes are unaffected by the attr */
  nb_tensor *col = tu_make(c, F32, 2, TU_SHAPE(3, 1), TU_VALS(1, 2, 5));
  nb_tensor *cb[2] = {col, b};
  nb_attr attrs[2] = {nb_attr_type("T", NB_F32), lax};
  assert_int_equal(nb_op(c, "Equal", cb, 2, attrs, 2, out, 1), NB_OK);
  tu_check(out[0], BOOL, 2, TU_SHAPE(3, 3), TU_VALS(1, 0, 0, 0, 1, 0, 0, 0, 0), 0);
  assert_int_equal(nb_op(c, "NotEqual", cb, 2, &lax, 1, out, 1), NB_OK);
  tu_check(out[0], BOOL, 2, TU_SHAPE(3, 3), TU_VALS(0, 1, 1, 1, 0, 1, 1, 1, 1), 0);
  nb_tensor *one[2] = {tu_make(c, F32, 1, TU_SHAPE(0), NULL), tu_make(c, F32, 1, TU_SHAPE(1), TU_VALS(1))};
  assert_int_equal(nb_op(c, "Equal", one, 2, &lax, 1, out, 1), NB_OK);
  tu_check_shape(out[0], BOOL, 1, TU_SHAPE(0));

  /* the default, and true given explicitly, still reject the shapes */
  assert_int_equal(nb_op(c, "Equal", ab, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "Equal: Incompatible shapes", "[2] vs. [3]");
  nb_attr strict = nb_attr_bool("incompatible_shape_error", true);
  assert_int_equal(nb_op(c, "NotEqual", ab, 2, &strict, 1, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "NotEqual: Incompatible shapes", "[2] vs. [3]");
  assert_null(nb_equal(c, a, b));
  tu_check_error(c, NB_SHAPE, "Equal: Incompatible shapes", NULL);
  assert_null(nb_not_equal(c, a, b));
  tu_check_error(c, NB_SHAPE, "NotEqual: Incompatible shapes", NULL);
  /* dtypes are checked whatever the attr says */
  nb_tensor *mixed[2] = {a, tu_make(c, F64, 1, TU_SHAPE(3), NULL)};
  assert_int_equal(nb_op(c, "Equal", mixed, 2, &lax, 1, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Equal", "float32 and float64");
  nb_attr wrong_kind = nb_attr_int("incompatible_shape_error", 0);
  assert_int_equal(nb_op(c, "Equal", ab, 2, &wrong_kind, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Equal", "incompatible_shape_error");
  assert_int_equal(nb_op(c, "NotEqual", ab, 1, &lax, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "NotEqual", "expected 2 inputs, got 1");
}

/* Which inputs and outputs each gradient reads, as in TF's gradient functions. */
static void test_grad_reads(void **state) {
  (void)state;
  nbad_grad_builtins_init();
  uint32_t in, out;
  nbad_grad_reads(nbop_lookup("Pow"), &in, &out);
  assert_int_equal(in, 3u);
  assert_int_equal(out, 1u);
  nbad_grad_reads(nbop_lookup("Mul"), &in, &out);
  assert_int_equal(out, 0u);
  nbad_grad_reads(nbop_lookup("Exp"), &in, &out);
  assert_int_equal(out, 1u);
}

static void test_add_n_identity(void **state) {
  nb_ctx *c = *state;
  nb_tensor *xs[3] = {tu_make(c, F32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3)),
                      tu_make(c, F32, 1, TU_SHAPE(3), TU_VALS(10, 20, 30)),
                      tu_make(c, F32, 1, TU_SHAPE(3), TU_VALS(100, 200, 300))};
  tu_check(nb_add_n(c, xs, 3), F32, 1, TU_SHAPE(3), TU_VALS(111, 222, 333), 0);
  tu_check(nb_add_n(c, xs, 1), F32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3), 0);
  nb_tensor *bad[2] = {xs[0], tu_make(c, F32, 1, TU_SHAPE(2), NULL)};
  assert_null(nb_add_n(c, bad, 2));
  tu_check_error(c, NB_SHAPE, "AddN: inputs must have the same shape", "input 1 is [2]");
  assert_null(nb_add_n(c, xs, 0));
  tu_check_error(c, NB_INVALID, "AddN", "at least one input");
  /* Identity, StopGradient and PreventGradient are views sharing the input's buffer */
  nb_tensor *id = nb_identity(c, xs[1]);
  nb_tensor *sg = nb_stop_gradient(c, xs[1]);
  nb_tensor *pg = nb_prevent_gradient(c, xs[1], "why"), *pg2;
  nb_attr why = nb_attr_str("message", "why");
  assert_int_equal(nb_op(c, "PreventGradient", &xs[1], 1, &why, 1, &pg2, 1), NB_OK);
  assert_ptr_equal(nb_data(id), nb_data(xs[1]));
  assert_ptr_equal(nb_data(sg), nb_data(xs[1]));
  assert_ptr_equal(nb_data(pg), nb_data(xs[1]));
  assert_ptr_equal(nb_data(pg2), nb_data(xs[1]));
  nb_tensor_free(xs[1]);
  tu_check(id, F32, 1, TU_SHAPE(3), TU_VALS(10, 20, 30), 0);
}

/* AccumulateNV2: AddN's sum (the same kernel, the same bits), its shape stated by attr. */
static void test_accumulate_n(void **state) {
  nb_ctx *c = *state;
  nb_tensor *xs[3] = {tu_make(c, F32, 2, TU_SHAPE(1, 3), TU_VALS(1, 2, 3)),
                      tu_make(c, F32, 2, TU_SHAPE(1, 3), TU_VALS(10, 20, 30.5)),
                      tu_make(c, F32, 2, TU_SHAPE(1, 3), TU_VALS(1e8, 200, 300))};
  nb_tensor *acc = nb_accumulate_n(c, xs, 3), *sum = nb_add_n(c, xs, 3), *out;
  tu_check(acc, F32, 2, TU_SHAPE(1, 3), TU_VALS(11.0f + 1e8f, 222, 333.5), 0); /* float32 sums */
  assert_memory_equal(nb_data(acc), nb_data(sum), 3 * sizeof(float));
  nb_attr shape = nb_attr_ints("shape", TU_SHAPE(-1, 3), 2);
  assert_int_equal(nb_op(c, "AccumulateNV2", xs, 2, &shape, 1, &out, 1), NB_OK);
  tu_check(out, F32, 2, TU_SHAPE(1, 3), TU_VALS(11, 22, 33.5), 0);
  shape = nb_attr_ints("shape", TU_SHAPE(3), 1);
  assert_int_equal(nb_op(c, "AccumulateNV2", xs, 2, &shape, 1, &out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "AccumulateNV2: inputs of shape [1,3] do not fit the shape attr [3]", NULL);
  assert_int_equal(nb_op(c, "AccumulateNV2", xs, 2, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "missing required attr 'shape'", NULL);
  nb_tensor *bad[2] = {xs[0], tu_make(c, F32, 1, TU_SHAPE(3), NULL)};
  assert_null(nb_accumulate_n(c, bad, 2));
  tu_check_error(c, NB_SHAPE, "AccumulateNV2: input 1 of shape [3] does not fit the shape [1,3]", NULL);
  assert_null(nb_accumulate_n(c, xs, 0));
  tu_check_error(c, NB_INVALID, "AccumulateNV2: needs at least one input", NULL);
  /* in a graph: inputs of unknown rank leave the wrapper no shape to state */
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  nb_tensor *in[2] = {nb_placeholder(gc, F32, 1, TU_SHAPE(4), "x"), nb_placeholder(gc, NB_I32, 1, TU_SHAPE(-1), "s")},
            *any;
  assert_int_equal(nb_op(gc, "Reshape", in, 2, NULL, 0, &any, 1), NB_OK);
  assert_int_equal(nb_rank(any), -1);
  assert_null(nb_accumulate_n(gc, (nb_tensor *[]){any, any}, 2));
  tu_check_error(gc, NB_SHAPE, "every input has an unknown rank", NULL);
  nb_ctx_free(gc);
  nb_graph_free(g);
}

/* The generic entry: TF names, attrs, inferred type attrs. */
static void test_generic_entry(void **state) {
  nb_ctx *c = *state;
  nb_tensor *in[2] = {tu_make(c, F32, 1, TU_SHAPE(2), TU_VALS(1, 2)), nb_scalar(c, F32, 3)};
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "Add", in, 2, NULL, 0, out, 1), NB_OK);
  tu_check(out[0], F32, 1, TU_SHAPE(2), TU_VALS(4, 5), 0);
  nb_attr t = nb_attr_type("T", NB_F32);
  assert_int_equal(nb_op(c, "Mul", in, 2, &t, 1, out, 1), NB_OK);
  tu_check(out[0], F32, 1, TU_SHAPE(2), TU_VALS(3, 6), 0);
  nb_attr dst[2] = {nb_attr_type("DstT", NB_I64), nb_attr_bool("Truncate", false)};
  assert_int_equal(nb_op(c, "Cast", in, 1, dst, 2, out, 1), NB_OK);
  tu_check(out[0], I64, 1, TU_SHAPE(2), TU_VALS(1, 2), 0);
  nb_attr n3 = nb_attr_int("N", 2);
  assert_int_equal(nb_op(c, "AddN", in, 1, &n3, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "AddN: attr N=2 does not match 1 list inputs", NULL);
  /* T that contradicts the input */
  nb_attr t64 = nb_attr_type("T", NB_F64);
  assert_int_equal(nb_op(c, "Mul", in, 2, &t64, 1, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Mul: attr T=float64 does not match input 0 of dtype float32", NULL);
  assert_int_equal(nb_op(c, "Cast", in, 1, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Cast: missing required attr 'DstT'", NULL);
}

/* A graph refuses bad dtypes, attrs and shapes when it is built, whatever the dims:
   inputs with unknown dims or an unknown rank hide nothing that is known. */
static void test_graph_validation(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->c;
  nb_tensor *fu = tu_unknown_dims(c, F32, 1), *iu = tu_unknown_dims(c, I32, 1);
  nb_tensor *fr = tu_unknown_rank(c, F32), *ir = tu_unknown_rank(c, I32), *out[1];
  assert_null(nb_add(c, fu, iu));
  tu_check_error(c, NB_DTYPE, "AddV2 (node 'AddV2'): inputs 0 and 1 must have the same dtype", "float32 and int32");
  assert_null(nb_mul(c, fr, ir));
  tu_check_error(c, NB_DTYPE, "Mul (node 'Mul')", "float32 and int32");
  assert_null(nb_sqrt(c, ir));
  tu_check_error(c, NB_DTYPE, "Sqrt (node 'Sqrt'): input 0 has dtype int32", NULL);
  assert_null(nb_logical_and(c, fu, fr));
  tu_check_error(c, NB_DTYPE, "LogicalAnd (node 'LogicalAnd')", "float32; expected bool");
  assert_null(nb_select(c, fu, fu, fu));
  tu_check_error(c, NB_DTYPE, "SelectV2 (node 'SelectV2'): input 0 has dtype float32", NULL);
  assert_null(nb_tanh_grad(c, fr, iu));
  tu_check_error(c, NB_DTYPE, "TanhGrad", "float32 and int32");
  nb_tensor *u3 = nb_placeholder(c, F32, 2, TU_SHAPE(-1, 3), "u3"),
            *u4 = nb_placeholder(c, F32, 2, TU_SHAPE(-1, 4), "u4");
  assert_null(nb_sub(c, u3, u4));
  tu_check_error(c, NB_SHAPE, "Sub (node 'Sub'): Incompatible shapes: [-1,3] vs. [-1,4]", NULL);
  nb_tensor *bs[3] = {tu_unknown_dims(c, BOOL, 2), u3, u4};
  assert_null(nb_select(c, bs[0], bs[1], bs[2]));
  tu_check_error(c, NB_SHAPE, "SelectV2", "Incompatible shapes: [-1,3] vs. [-1,4]");
  assert_null(nb_relu_grad(c, u3, fu));
  tu_check_error(c, NB_SHAPE, "ReluGrad", "gradients and features must have the same shape, got [-1,3] and [-1]");
  nb_tensor *three[3] = {u3, fr, u4};
  assert_null(nb_add_n(c, three, 3));
  tu_check_error(c, NB_SHAPE, "AddN (node 'AddN')", "input 0 is [-1,3], input 2 is [-1,4]");
  nb_attr shape4 = nb_attr_ints("shape", TU_SHAPE(-1, 4), 2);
  nb_tensor *fits[2] = {fr, u3};
  assert_int_equal(nb_op(c, "AccumulateNV2", fits, 2, &shape4, 1, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "AccumulateNV2 (node", "inputs of shape [-1,3] do not fit the shape attr [-1,4]");
  nb_tensor *mixed[2] = {fr, ir};
  assert_int_equal(nb_op(c, "AccumulateNV2", mixed, 2, &shape4, 1, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "AccumulateNV2 (node", "float32 and int32");
  assert_null(nb_cast(c, fu, (nb_dtype)7));
  tu_check_error(c, NB_DTYPE, "Cast (node 'Cast'): attr DstT=7 is not a dtype", NULL);
  nb_attr src[2] = {nb_attr_type("DstT", F64), nb_attr_type("SrcT", I32)};
  assert_int_equal(nb_op(c, "Cast", &fr, 1, src, 2, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Cast (node 'Cast_1'): attr SrcT=int32 does not match input 0 of dtype float32", NULL);
  /* what is valid still builds, its dims and rank left unknown */
  tu_check_shape(nb_add(c, u3, u3), F32, 2, TU_SHAPE(-1, 3));
  assert_int_equal(nb_rank(nb_add(c, fr, fu)), -1);
  assert_int_equal(nb_status(c), NB_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_unary_values, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_f32_transcendental_accuracy, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_unary_int, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_binary_values, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_binary_int, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_broadcasting, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_broadcast_large, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_select, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_cast, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_cast_srct, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_equality_incompatible_shapes, tu_setup, tu_teardown),
      cmocka_unit_test(test_grad_reads),
      cmocka_unit_test_setup_teardown(test_add_n_identity, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_accumulate_n, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_generic_entry, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_validation, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests_name("math", tests, NULL, NULL);
}
