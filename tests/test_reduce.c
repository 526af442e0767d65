/* Reduction family: Sum Mean Max Min Prod and ArgMax — values across dtypes and axis
   patterns, TF's empty-reduction identities, NaN handling, large inputs, errors. */
#include "graphutil.h"

#include <float.h>
#include <stdlib.h>

#define F32 NB_F32
#define F64 NB_F64
#define I32 NB_I32
#define I64 NB_I64
#define BOOL NB_BOOL

typedef nb_tensor *(*reduce_op)(nb_ctx *, nb_tensor *, const int *, int, bool);
enum { SUM, MEAN, MAX, MIN, PROD, NOPS };
static const reduce_op ops[NOPS] = {nb_sum, nb_mean, nb_max, nb_min, nb_prod};
static const char *const op_names[NOPS] = {"Sum", "Mean", "Max", "Min", "Prod"};

#define AXES(...) ((const int[]){__VA_ARGS__})
#define NAX(...) ((int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int)))

/* x = [[1,2,3],[4,5,6]] in every numeric dtype */
static void test_sum_axes(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= I64; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
    tu_check(nb_sum(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(3), TU_VALS(5, 7, 9), 0);
    tu_check(nb_sum(c, x, AXES(1), 1, false), t, 1, TU_SHAPE(2), TU_VALS(6, 15), 0);
    tu_check(nb_sum(c, x, AXES(-1), 1, true), t, 2, TU_SHAPE(2, 1), TU_VALS(6, 15), 0);
    tu_check(nb_sum(c, x, AXES(-2), 1, true), t, 2, TU_SHAPE(1, 3), TU_VALS(5, 7, 9), 0);
    tu_check(nb_sum(c, x, NULL, 0, false), t, 0, NULL, TU_VALS(21), 0);
    tu_check(nb_sum(c, x, NULL, 0, true), t, 2, TU_SHAPE(1, 1), TU_VALS(21), 0);
    tu_check(nb_sum(c, x, AXES(1, 0), 2, false), t, 0, NULL, TU_VALS(21), 0);
    /* an empty axis list reduces nothing, with or without keep_dims */
    tu_check(nb_sum(c, x, AXES(0), 0, true), t, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6), 0);
    /* repeated axes count once */
    tu_check(nb_sum(c, x, AXES(1, 1, -1), 3, false), t, 1, TU_SHAPE(2), TU_VALS(6, 15), 0);
    tu_check(nb_sum(c, x, AXES(0, -1, 0), 3, true), t, 2, TU_SHAPE(1, 1), TU_VALS(21), 0);
  }
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_mean(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= F64; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 7));
    tu_check(nb_mean(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(3), TU_VALS(2.5, 3.5, 5), 1e-7);
    tu_check(nb_mean(c, x, AXES(1), 1, true), t, 2, TU_SHAPE(2, 1), TU_VALS(2, 16.0 / 3), 1e-7);
    tu_check(nb_mean(c, x, NULL, 0, false), t, 0, NULL, TU_VALS(22.0 / 6), 1e-7);
  }
  /* integer means truncate toward zero, like TF */
  for (nb_dtype t = I32; t <= I64; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, -7, 2));
    tu_check(nb_mean(c, x, AXES(1), 1, false), t, 1, TU_SHAPE(2), TU_VALS(1, -2), 0);
    tu_check(nb_mean(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(2), TU_VALS(-3, 2), 0);
    tu_check(nb_mean(c, x, NULL, 0, false), t, 0, NULL, TU_VALS(0), 0);
  }
  /* int32 means sum in 64 bits, as TF's do; int32 sums wrap */
  nb_tensor *big = tu_make(c, I32, 1, TU_SHAPE(2), TU_VALS(2147483647.0, 1));
  tu_check(nb_mean(c, big, NULL, 0, false), I32, 0, NULL, TU_VALS(1073741824.0), 0);
  tu_check(nb_sum(c, big, NULL, 0, false), I32, 0, NULL, TU_VALS(-2147483648.0), 0);
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_max_min_prod(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= I64; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 3), TU_VALS(3, -1, 2, -5, 4, 2));
    tu_check(nb_max(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(3), TU_VALS(3, 4, 2), 0);
    tu_check(nb_max(c, x, AXES(1), 1, false), t, 1, TU_SHAPE(2), TU_VALS(3, 4), 0);
    tu_check(nb_min(c, x, AXES(0), 1, true), t, 2, TU_SHAPE(1, 3), TU_VALS(-5, -1, 2), 0);
    tu_check(nb_min(c, x, AXES(-1), 1, false), t, 1, TU_SHAPE(2), TU_VALS(-1, -5), 0);
    tu_check(nb_max(c, x, NULL, 0, false), t, 0, NULL, TU_VALS(4), 0);
    tu_check(nb_min(c, x, NULL, 0, false), t, 0, NULL, TU_VALS(-5), 0);
    tu_check(nb_prod(c, x, AXES(1), 1, false), t, 1, TU_SHAPE(2), TU_VALS(-6, -40), 0);
    tu_check(nb_prod(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(3), TU_VALS(-15, -4, 4), 0);
    tu_check(nb_prod(c, x, NULL, 0, true), t, 2, TU_SHAPE(1, 1), TU_VALS(240), 0);
  }
  /* integer extremes survive; integer products wrap like TF's */
  nb_tensor *e = tu_make(c, I32, 1, TU_SHAPE(3), TU_VALS(-2147483648.0, 2147483647.0, 0));
  tu_check(nb_max(c, e, NULL, 0, false), I32, 0, NULL, TU_VALS(2147483647.0), 0);
  tu_check(nb_min(c, e, NULL, 0, false), I32, 0, NULL, TU_VALS(-2147483648.0), 0);
  nb_tensor *w = tu_make(c, I32, 1, TU_SHAPE(2), TU_VALS(65536, 65537));
  tu_check(nb_prod(c, w, NULL, 0, false), I32, 0, NULL, TU_VALS(65536), 0);
  tu_check(nb_sum(c, e, AXES(0), 1, false), I32, 0, NULL, TU_VALS(-1), 0);
  assert_int_equal(nb_status(c), NB_OK);
}

/* Max and Min propagate NaN from any position, on the row and the column paths. */
static void test_nan(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= F64; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(3, 2), TU_VALS(NAN, 1, 2, 3, 4, NAN));
    tu_check(nb_max(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(2), TU_VALS(NAN, NAN), 0);
    tu_check(nb_min(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(2), TU_VALS(NAN, NAN), 0);
    tu_check(nb_max(c, x, AXES(1), 1, false), t, 1, TU_SHAPE(3), TU_VALS(NAN, 3, NAN), 0);
    tu_check(nb_min(c, x, AXES(1), 1, false), t, 1, TU_SHAPE(3), TU_VALS(NAN, 2, NAN), 0);
    tu_check(nb_max(c, x, NULL, 0, false), t, 0, NULL, TU_VALS(NAN), 0);
    /* a NaN past the first vector lane and in the scalar tail */
    double v[19];
    for (int i = 0; i < 19; i++) v[i] = i;
    v[12] = NAN;
    tu_check(nb_max(c, tu_make(c, t, 1, TU_SHAPE(19), v), NULL, 0, false), t, 0, NULL, TU_VALS(NAN), 0);
    v[12] = 12;
    v[18] = NAN;
    tu_check(nb_min(c, tu_make(c, t, 1, TU_SHAPE(19), v), NULL, 0, false), t, 0, NULL, TU_VALS(NAN), 0);
    nb_tensor *inf = tu_make(c, t, 1, TU_SHAPE(2), TU_VALS(-INFINITY, INFINITY));
    tu_check(nb_max(c, inf, NULL, 0, false), t, 0, NULL, TU_VALS(INFINITY), 0);
    tu_check(nb_sum(c, inf, NULL, 0, false), t, 0, NULL, TU_VALS(NAN), 0);
  }
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_rank0_and_size1(void **state) {
  nb_ctx *c = *state;
  nb_tensor *s = nb_scalar(c, F64, 2.5);
  for (int op = 0; op < NOPS; op++) {
    tu_check(ops[op](c, s, NULL, 0, false), F64, 0, NULL, TU_VALS(2.5), 0);
    tu_check(ops[op](c, s, AXES(0), 0, true), F64, 0, NULL, TU_VALS(2.5), 0);
  }
  assert_null(nb_sum(c, s, AXES(0), 1, false));
  tu_check_error(c, NB_INVALID, "Sum: Invalid reduction dimension (0 for input with 0 dimension(s)", NULL);
  /* size-1 dims: reducing them only reshapes */
  nb_tensor *x = tu_make(c, I32, 3, TU_SHAPE(1, 3, 1), TU_VALS(4, -5, 6));
  tu_check(nb_sum(c, x, AXES(0), 1, false), I32, 2, TU_SHAPE(3, 1), TU_VALS(4, -5, 6), 0);
  tu_check(nb_mean(c, x, AXES(0, 2), 2, true), I32, 3, TU_SHAPE(1, 3, 1), TU_VALS(4, -5, 6), 0);
  tu_check(nb_max(c, x, AXES(1), 1, false), I32, 2, TU_SHAPE(1, 1), TU_VALS(6), 0);
  tu_check(nb_prod(c, x, AXES(1, 2), 2, false), I32, 1, TU_SHAPE(1), TU_VALS(-120), 0);
  tu_check(nb_min(c, x, NULL, 0, true), I32, 3, TU_SHAPE(1, 1, 1), TU_VALS(-5), 0);
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_empty(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= F64; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(0, 3), NULL);
    tu_check(nb_sum(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(3), TU_VALS(0, 0, 0), 0);
    tu_check(nb_prod(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(3), TU_VALS(1, 1, 1), 0);
    tu_check(nb_max(c, x, AXES(0), 1, true), t, 2, TU_SHAPE(1, 3), TU_VALS(-INFINITY, -INFINITY, -INFINITY), 0);
    tu_check(nb_min(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(3), TU_VALS(INFINITY, INFINITY, INFINITY), 0);
    tu_check(nb_mean(c, x, AXES(0), 1, false), t, 1, TU_SHAPE(3), TU_VALS(NAN, NAN, NAN), 0);
    tu_check(nb_sum(c, x, NULL, 0, false), t, 0, NULL, TU_VALS(0), 0);
    tu_check(nb_mean(c, x, NULL, 0, false), t, 0, NULL, TU_VALS(NAN), 0);
    tu_check_shape(nb_sum(c, x, AXES(1), 1, false), t, 1, TU_SHAPE(0));
    tu_check_shape(nb_max(c, x, AXES(1), 1, true), t, 2, TU_SHAPE(0, 1));
    tu_check_shape(nb_sum(c, x, AXES(0), 0, false), t, 2, TU_SHAPE(0, 3));
  }
  nb_tensor *xi = tu_make(c, I32, 2, TU_SHAPE(2, 0), NULL);
  tu_check(nb_max(c, xi, AXES(1), 1, false), I32, 1, TU_SHAPE(2), TU_VALS(-2147483648.0, -2147483648.0), 0);
  tu_check(nb_min(c, xi, AXES(1), 1, false), I32, 1, TU_SHAPE(2), TU_VALS(2147483647.0, 2147483647.0), 0);
  tu_check(nb_mean(c, xi, AXES(1), 1, false), I32, 1, TU_SHAPE(2), TU_VALS(0, 0), 0);
  tu_check(nb_prod(c, xi, NULL, 0, false), I32, 0, NULL, TU_VALS(1), 0);
  nb_tensor *xl = tu_make(c, I64, 1, TU_SHAPE(0), NULL);
  tu_check(nb_max(c, xl, NULL, 0, false), I64, 0, NULL, TU_VALS(-9223372036854775808.0), 0);
  assert_int_equal(nb_status(c), NB_OK);
}

/* ---- every axis subset against a direct loop ---------------------------------------- */

static double combine(int op, double a, double v) {
  switch (op) {
    case MAX: return v > a ? v : a;
    case MIN: return v < a ? v : a;
    case PROD: return a * v;
    default: return a + v;
  }
}

static double identity(int op) { return op == MAX ? -INFINITY : op == MIN ? INFINITY : op == PROD ? 1 : 0; }

/* Reduces x over the dims in mask with plain index arithmetic; integer means truncate. */
static void ref_reduce(int op, bool integer, const double *x, int rank, const int64_t *shape, unsigned mask,
                       double *out) {
  int64_t n = 1, nout = 1, count = 1;
  for (int d = 0; d < rank; d++) {
    n *= shape[d];
    if (mask >> d & 1u)
      count *= shape[d];
    else
      nout *= shape[d];
  }
  for (int64_t o = 0; o < nout; o++) out[o] = identity(op);
  for (int64_t i = 0; i < n; i++) {
    int64_t rest = i, o = 0, scale = 1;
    for (int d = rank - 1; d >= 0; d--) {
      int64_t idx = rest % shape[d];
      rest /= shape[d];
      if (!(mask >> d & 1u)) {
        o += idx * scale;
        scale *= shape[d];
      }
    }
    out[o] = combine(op, out[o], x[i]);
  }
  if (op == MEAN)
    for (int64_t o = 0; o < nout; o++) out[o] = integer ? trunc(out[o] / (double)count) : out[o] / (double)count;
}

/* All 2^rank axis subsets, every op and dtype, keep_dims on and off. Values are small
   integers (products of +-1 and 2) so sums and products are exact in every dtype. */
static void check_all_subsets(nb_ctx *c, int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  double *x = malloc((size_t)n * sizeof *x), *px = malloc((size_t)n * sizeof *px);
  double *want = malloc((size_t)n * sizeof *want);
  for (int64_t i = 0; i < n; i++) {
    x[i] = (double)((i * 7) % 5 - 2);
    px[i] = (i * 7) % 11 == 0 ? -1 : (i % 997 == 5 ? 2 : 1);
  }
  for (unsigned mask = 0; mask < 1u << rank; mask++) {
    int axes[NB_MAX_RANK], na = 0;
    int64_t kshape[NB_MAX_RANK], oshape[NB_MAX_RANK];
    int orank = 0;
    for (int d = 0; d < rank; d++) {
      if (mask >> d & 1u)
        axes[na++] = d - (d % 2 ? rank : 0); /* some axes negative */
      else
        oshape[orank++] = shape[d];
      kshape[d] = mask >> d & 1u ? 1 : shape[d];
    }
    for (int op = 0; op < NOPS; op++) {
      const double *data = op == PROD ? px : x;
      for (nb_dtype t = F32; t <= I64; t++) {
        ref_reduce(op, t >= I32, data, rank, shape, mask, want);
        double tol = op == MEAN && t == F32 ? 1e-6 : op == MEAN ? 1e-14 : 0;
        nb_scope_begin(c);
        nb_tensor *xt = tu_make(c, t, rank, shape, data);
        tu_check(ops[op](c, xt, axes, na, false), t, orank, oshape, want, tol);
        tu_check(ops[op](c, xt, axes, na, true), t, rank, kshape, want, tol);
        if (nb_status(c) != NB_OK) fail_msg("%s mask %u: %s", op_names[op], mask, nb_error(c));
        nb_scope_end(c, NULL, 0);
      }
    }
  }
  free(x);
  free(px);
  free(want);
}

static void test_axis_patterns(void **state) {
  nb_ctx *c = *state;
  check_all_subsets(c, 4, TU_SHAPE(3, 4, 5, 6));
  check_all_subsets(c, 5, TU_SHAPE(3, 1, 4, 1, 2));
  check_all_subsets(c, 8, TU_SHAPE(2, 1, 3, 2, 1, 2, 3, 2)); /* rank 8 */
  check_all_subsets(c, 2, TU_SHAPE(3, 1100));                /* columns wider than one tile */
}

/* ---- large inputs: accuracy, split paths, threads ---------------------------------- */

static nb_tensor *filled_f32(nb_ctx *c, int rank, const int64_t *shape, float (*f)(int64_t)) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  float *v = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = f(i);
  nb_tensor *x = nb_tensor_from(c, F32, rank, shape, v);
  free(v);
  return x;
}
static float one(int64_t i) {
  (void)i;
  return 1.0f;
}
static float tenth(int64_t i) {
  (void)i;
  return 0.1f;
}
static float ramp(int64_t i) { return (float)(i % 1000) * 0.001f - 0.3f; }
static float col_index(int64_t i) { return (float)(i % 3); }

static void test_large(void **state) {
  nb_ctx *c = *state;
  const int64_t n = 1 << 20;
  nb_tensor *ones = filled_f32(c, 1, &n, one);
  tu_check(nb_sum(c, ones, NULL, 0, false), F32, 0, NULL, TU_VALS(1048576), 0);
  tu_check(nb_mean(c, ones, NULL, 0, false), F32, 0, NULL, TU_VALS(1), 0);
  /* 2^20 terms of 0.1f: a serial float accumulator is off by ~1e-3 relative */
  nb_tensor *t = filled_f32(c, 1, &n, tenth);
  tu_check(nb_sum(c, t, NULL, 0, false), F32, 0, NULL, TU_VALS((double)0.1f * 1048576), 1e-7);
  /* column sums over many rows (the split path) and row sums over long rows */
  nb_tensor *cols = filled_f32(c, 2, TU_SHAPE(n / 4, 4), one);
  double w4[4] = {n / 4, n / 4, n / 4, n / 4};
  tu_check(nb_sum(c, cols, AXES(0), 1, false), F32, 1, TU_SHAPE(4), w4, 0);
  nb_tensor *rows = filled_f32(c, 2, TU_SHAPE(4, n / 4), one);
  tu_check(nb_sum(c, rows, AXES(1), 1, false), F32, 1, TU_SHAPE(4), w4, 0);
  nb_tensor *c3 = filled_f32(c, 2, TU_SHAPE(n / 3, 3), col_index);
  double w3[3] = {0, n / 3, 2 * (n / 3)};
  tu_check(nb_sum(c, c3, AXES(0), 1, false), F32, 1, TU_SHAPE(3), w3, 0);
  tu_check(nb_max(c, c3, AXES(0), 1, false), F32, 1, TU_SHAPE(3), TU_VALS(0, 1, 2), 0);
  tu_check_shape(nb_argmax(c, c3, 1, I64), I64, 1, TU_SHAPE(n / 3));
  assert_int_equal(nb_item(nb_argmax(c, c3, 1, I64), n / 3 - 1), 2);
  /* middle axis [64, 1024, 16] with many columns per tile */
  nb_tensor *mid = filled_f32(c, 3, TU_SHAPE(64, n / 1024, 16), one);
  tu_check_shape(nb_sum(c, mid, AXES(1), 1, false), F32, 2, TU_SHAPE(64, 16));
  assert_true(nb_item(nb_sum(c, mid, AXES(1), 1, false), 64 * 16 - 1) == 1024);
  /* the split is fixed by size, so one and two threads agree bit for bit */
  nb_tensor *r = filled_f32(c, 1, &n, ramp);
  nb_ctx_set_threads(c, 1);
  double s1 = nb_item(nb_sum(c, r, NULL, 0, false), 0);
  double m1 = nb_item(nb_sum(c, filled_f32(c, 2, TU_SHAPE(n / 8, 8), ramp), AXES(0), 1, false), 5);
  if (tu_set_threads(c, 2) == 2) {
    assert_true(s1 == nb_item(nb_sum(c, r, NULL, 0, false), 0));
    assert_true(m1 == nb_item(nb_sum(c, filled_f32(c, 2, TU_SHAPE(n / 8, 8), ramp), AXES(0), 1, false), 5));
  }
  assert_int_equal(nb_status(c), NB_OK);
}

/* ---- ArgMax ------------------------------------------------------------------------- */

static void test_argmax(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= I64; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 3), TU_VALS(1, 5, 5, 7, 2, 7));
    tu_check(nb_argmax(c, x, 1, I64), I64, 1, TU_SHAPE(2), TU_VALS(1, 0), 0); /* first of ties */
    tu_check(nb_argmax(c, x, -1, I32), I32, 1, TU_SHAPE(2), TU_VALS(1, 0), 0);
    tu_check(nb_argmax(c, x, 0, I64), I64, 1, TU_SHAPE(3), TU_VALS(1, 0, 1), 0);
    tu_check(nb_argmax(c, x, -2, I32), I32, 1, TU_SHAPE(3), TU_VALS(1, 0, 1), 0);
  }
  nb_tensor *b = tu_make(c, BOOL, 2, TU_SHAPE(2, 3), TU_VALS(0, 1, 1, 0, 0, 0));
  tu_check(nb_argmax(c, b, 1, I64), I64, 1, TU_SHAPE(2), TU_VALS(1, 0), 0);
  tu_check(nb_argmax(c, b, 0, I64), I64, 1, TU_SHAPE(3), TU_VALS(0, 0, 0), 0);
  /* middle axis of [2,3,2] */
  nb_tensor *m = tu_make(c, I32, 3, TU_SHAPE(2, 3, 2), TU_VALS(0, 9, 4, 1, 4, 8, 7, 7, 6, 7, 7, 8));
  tu_check(nb_argmax(c, m, 1, I64), I64, 2, TU_SHAPE(2, 2), TU_VALS(1, 0, 0, 2), 0);
  /* a 1-element axis and a rank-1 input */
  tu_check(nb_argmax(c, tu_make(c, F64, 2, TU_SHAPE(3, 1), NULL), 1, I64), I64, 1, TU_SHAPE(3), TU_VALS(0, 0, 0), 0);
  tu_check(nb_argmax(c, tu_make(c, F64, 1, TU_SHAPE(4), TU_VALS(-3, -1, -2, -1)), 0, I64), I64, 0, NULL, TU_VALS(1), 0);
  /* columns beyond one tile: odd columns peak in row 1 */
  double v[2 * 1100];
  for (int j = 0; j < 1100; j++) {
    v[j] = j % 2 ? 0 : 1;
    v[1100 + j] = j % 2 ? 1 : 0;
  }
  nb_tensor *wide = nb_argmax(c, tu_make(c, F32, 2, TU_SHAPE(2, 1100), v), 0, I32);
  tu_check_shape(wide, I32, 1, TU_SHAPE(1100));
  for (int j = 0; j < 1100; j++) assert_int_equal(nb_item(wide, j), j % 2);
  /* a long row: the maximum repeats in several vector lanes and in the tail */
  double r[37] = {0};
  r[13] = r[21] = r[29] = r[36] = 4;
  r[5] = NAN;
  tu_check(nb_argmax(c, tu_make(c, F64, 1, TU_SHAPE(37), r), 0, I64), I64, 0, NULL, TU_VALS(13), 0);
  r[3] = 4;
  r[5] = 0;
  tu_check(nb_argmax(c, tu_make(c, I32, 1, TU_SHAPE(37), r), 0, I64), I64, 0, NULL, TU_VALS(3), 0);
  r[36] = 5;
  tu_check(nb_argmax(c, tu_make(c, F32, 1, TU_SHAPE(37), r), 0, I64), I64, 0, NULL, TU_VALS(36), 0);
  assert_int_equal(nb_status(c), NB_OK);
}

/* NaN: as TF's Eigen reducer, a strictly greater value moves the index and NaN never
   compares greater; a slice of only NaN or -inf gives 0. */
static void test_argmax_nan(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= F64; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(4, 3),
                           TU_VALS(NAN, NAN, -INFINITY, 1, NAN, -INFINITY, 3, NAN, -INFINITY, NAN, NAN, -INFINITY));
    tu_check(nb_argmax(c, x, 0, I64), I64, 1, TU_SHAPE(3), TU_VALS(2, 0, 0), 0);
    tu_check(nb_argmax(c, x, 1, I64), I64, 1, TU_SHAPE(4), TU_VALS(0, 0, 0, 0), 0);
    nb_tensor *y = tu_make(c, t, 1, TU_SHAPE(4), TU_VALS(NAN, 1, 3, NAN));
    tu_check(nb_argmax(c, y, 0, I32), I32, 0, NULL, TU_VALS(2), 0);
  }
  assert_int_equal(nb_status(c), NB_OK);
}

/* ---- errors ------------------------------------------------------------------------- */

static void test_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F32, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
  for (int op = 0; op < NOPS; op++) {
    assert_null(ops[op](c, x, AXES(3), 1, false));
    tu_check_error(c, NB_INVALID, op_names[op], "Invalid reduction dimension (3 for input with 2 dimension(s)");
  }
  assert_null(nb_sum(c, x, AXES(0, -3), 2, false));
  tu_check_error(c, NB_INVALID, "Sum: Invalid reduction dimension (-3 for input", NULL);
  assert_null(nb_sum(c, x, AXES(0), -1, false));
  tu_check_error(c, NB_INVALID, "Sum: negative axis count -1", NULL);
  assert_null(nb_sum(c, NULL, NULL, 0, false));
  tu_check_error(c, NB_INVALID, "Sum: input 0 is NULL", NULL);
  assert_null(nb_mean(c, NULL, AXES(0), 1, false));
  tu_check_error(c, NB_INVALID, "Mean: input 0 is NULL", NULL);
  assert_null(nb_max(c, tu_make(c, BOOL, 1, TU_SHAPE(2), NULL), NULL, 0, false));
  tu_check_error(c, NB_DTYPE, "Max: input 0 has dtype bool", NULL);
  /* the axis tensor: int dtype, rank <= 1 */
  nb_tensor *out[1];
  nb_tensor *fax = tu_make(c, F32, 1, TU_SHAPE(1), TU_VALS(0));
  assert_int_equal(nb_op(c, "Sum", (nb_tensor *[]){x, fax}, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Sum: input 1 has dtype float32", NULL);
  nb_tensor *ax2 = tu_make(c, I32, 2, TU_SHAPE(1, 2), TU_VALS(0, 1));
  assert_int_equal(nb_op(c, "Prod", (nb_tensor *[]){x, ax2}, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "Prod: input 1 must have rank <= 1", "[1,2]");
  assert_int_equal(nb_op(c, "Sum", &x, 1, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Sum: expected 2 inputs, got 1", NULL);
  /* attrs */
  nb_tensor *ax = tu_make(c, I32, 1, TU_SHAPE(1), TU_VALS(1));
  nb_attr bad = nb_attr_bool("keepdims", true);
  assert_int_equal(nb_op(c, "Sum", (nb_tensor *[]){x, ax}, 2, &bad, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Sum: unknown attr 'keepdims'", NULL);
  nb_attr kind = nb_attr_int("keep_dims", 1);
  assert_int_equal(nb_op(c, "Mean", (nb_tensor *[]){x, ax}, 2, &kind, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Mean: attr 'keep_dims' has the wrong kind", NULL);
  /* the context is sticky: after an error, calls return NULL and keep the first message */
  assert_null(nb_sum(c, x, AXES(5), 1, false));
  assert_null(nb_sum(c, x, AXES(0), 1, false));
  tu_check_error(c, NB_INVALID, "(5 for input", NULL);
}

static void test_argmax_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F32, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
  assert_null(nb_argmax(c, x, 2, I64));
  tu_check_error(c, NB_INVALID, "ArgMax: Expected dimension in the range [-2, 2), but got 2", NULL);
  assert_null(nb_argmax(c, x, -3, I64));
  tu_check_error(c, NB_INVALID, "but got -3", NULL);
  assert_null(nb_argmax(c, nb_scalar(c, F32, 1), 0, I64));
  tu_check_error(c, NB_INVALID, "range [0, 0), but got 0", NULL);
  assert_null(nb_argmax(c, tu_make(c, F32, 2, TU_SHAPE(0, 3), NULL), 0, I64));
  tu_check_error(c, NB_INVALID, "ArgMax: Reduction axis 0 is empty in shape [0,3]", NULL);
  assert_null(nb_argmax(c, tu_make(c, F32, 2, TU_SHAPE(2, 0), NULL), -1, I64));
  tu_check_error(c, NB_INVALID, "Reduction axis -1 is empty in shape [2,0]", NULL);
  /* reducing a non-empty axis of an empty tensor is fine */
  tu_check_shape(nb_argmax(c, tu_make(c, F32, 2, TU_SHAPE(0, 3), NULL), 1, I64), I64, 1, TU_SHAPE(0));
  assert_null(nb_argmax(c, x, 0, F32));
  tu_check_error(c, NB_DTYPE, "ArgMax: attr output_type=float32 is not supported; expected int32, int64", NULL);
  assert_null(nb_argmax(c, x, 0, BOOL));
  tu_check_error(c, NB_DTYPE, "output_type", "bool");
  assert_null(nb_argmax(c, NULL, 0, I64));
  tu_check_error(c, NB_INVALID, "ArgMax: input 0 is NULL", NULL);
  nb_tensor *out[1];
  nb_tensor *dim1 = tu_make(c, I32, 1, TU_SHAPE(1), TU_VALS(0));
  assert_int_equal(nb_op(c, "ArgMax", (nb_tensor *[]){x, dim1}, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "ArgMax: dim must be a scalar", "[1]");
  nb_tensor *fdim = nb_scalar(c, F64, 0);
  assert_int_equal(nb_op(c, "ArgMax", (nb_tensor *[]){x, fdim}, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "ArgMax: input 1 has dtype float64", NULL);
}

/* ---- the generic entry with TF's attr names ----------------------------------------- */

static void test_generic_entry(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
  const int64_t axis_vals[2] = {1, -1};
  nb_tensor *ax = nb_tensor_from(c, I64, 1, TU_SHAPE(2), axis_vals);
  nb_tensor *in[2] = {x, ax}, *out[1];
  nb_attr attrs[3] = {nb_attr_bool("keep_dims", true), nb_attr_type("Tidx", I64), nb_attr_type("T", F64)};
  const double want[NOPS][2] = {{6, 15}, {2, 5}, {3, 6}, {1, 4}, {6, 120}};
  for (int op = 0; op < NOPS; op++) {
    assert_int_equal(nb_op(c, op_names[op], in, 2, attrs, 3, out, 1), NB_OK);
    tu_check(out[0], F64, 2, TU_SHAPE(2, 1), want[op], 1e-12);
  }
  /* keep_dims defaults to false; a scalar axis works */
  nb_tensor *ax0 = nb_scalar(c, I32, 0);
  assert_int_equal(nb_op(c, "Sum", (nb_tensor *[]){x, ax0}, 2, NULL, 0, out, 1), NB_OK);
  tu_check(out[0], F64, 1, TU_SHAPE(3), TU_VALS(5, 7, 9), 0);
  nb_attr aattrs[2] = {nb_attr_type("output_type", I32), nb_attr_type("Tidx", I32)};
  assert_int_equal(nb_op(c, "ArgMax", (nb_tensor *[]){x, ax0}, 2, aattrs, 2, out, 1), NB_OK);
  tu_check(out[0], I32, 1, TU_SHAPE(3), TU_VALS(1, 1, 1), 0);
  assert_int_equal(nb_op(c, "ArgMax", (nb_tensor *[]){x, ax0}, 2, NULL, 0, out, 1), NB_OK);
  tu_check(out[0], I64, 1, TU_SHAPE(3), TU_VALS(1, 1, 1), 0);
  nb_attr wrong_t = nb_attr_type("T", F32);
  assert_int_equal(nb_op(c, "ArgMax", (nb_tensor *[]){x, ax0}, 2, &wrong_t, 1, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "ArgMax: attr T=float32 does not match", NULL);
}

/* ---- Cumsum, Cumprod -------------------------------------------------------------------------- */

typedef nb_tensor *(*scan_wrapper)(nb_ctx *c, nb_tensor *x, int axis, bool exclusive, bool reverse);

/* [[1, 2, 3], [4, 5, 6]] along each axis, every (exclusive, reverse), every dtype. */
static void test_scans(void **state) {
  nb_ctx *c = *state;
  const scan_wrapper fns[2] = {nb_cumsum, nb_cumprod};
  /* [op][exclusive][reverse]: along axis 1, then along axis 0 */
  const double rows[2][2][2][6] = {
      {{{1, 3, 6, 4, 9, 15}, {6, 5, 3, 15, 11, 6}}, {{0, 1, 3, 0, 4, 9}, {5, 3, 0, 11, 6, 0}}},
      {{{1, 2, 6, 4, 20, 120}, {6, 6, 3, 120, 30, 6}}, {{1, 1, 2, 1, 4, 20}, {6, 3, 1, 30, 6, 1}}}};
  const double cols[2][2][2][6] = {
      {{{1, 2, 3, 5, 7, 9}, {5, 7, 9, 4, 5, 6}}, {{0, 0, 0, 1, 2, 3}, {4, 5, 6, 0, 0, 0}}},
      {{{1, 2, 3, 4, 10, 18}, {4, 10, 18, 4, 5, 6}}, {{1, 1, 1, 1, 2, 3}, {4, 5, 6, 1, 1, 1}}}};
  const nb_dtype types[4] = {F32, F64, I32, I64};
  for (int t = 0; t < 4; t++) {
    nb_tensor *x = tu_make(c, types[t], 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
    for (int op = 0; op < 2; op++)
      for (int e = 0; e < 2; e++)
        for (int r = 0; r < 2; r++) {
          tu_check(fns[op](c, x, 1, e, r), types[t], 2, TU_SHAPE(2, 3), rows[op][e][r], 0);
          tu_check(fns[op](c, x, -1, e, r), types[t], 2, TU_SHAPE(2, 3), rows[op][e][r], 0);
          tu_check(fns[op](c, x, 0, e, r), types[t], 2, TU_SHAPE(2, 3), cols[op][e][r], 0);
          tu_check(fns[op](c, x, -2, e, r), types[t], 2, TU_SHAPE(2, 3), cols[op][e][r], 0);
        }
  }
  /* the middle axis of a rank-3 tensor (outer and inner both > 1) */
  nb_tensor *m = tu_make(c, F64, 3, TU_SHAPE(2, 2, 2), TU_VALS(1, 2, 3, 4, 5, 6, 7, 8));
  tu_check(nb_cumsum(c, m, 1, false, false), F64, 3, TU_SHAPE(2, 2, 2), TU_VALS(1, 2, 4, 6, 5, 6, 12, 14), 0);
  tu_check(nb_cumprod(c, m, 1, true, true), F64, 3, TU_SHAPE(2, 2, 2), TU_VALS(3, 4, 1, 1, 7, 8, 1, 1), 0);
  /* a size-1 axis: the input itself, or the identity when exclusive */
  nb_tensor *col = tu_make(c, F32, 2, TU_SHAPE(3, 1), TU_VALS(2, -1, 5));
  tu_check(nb_cumprod(c, col, 1, false, false), F32, 2, TU_SHAPE(3, 1), TU_VALS(2, -1, 5), 0);
  tu_check(nb_cumsum(c, col, 1, true, false), F32, 2, TU_SHAPE(3, 1), TU_VALS(0, 0, 0), 0);
  tu_check(nb_cumprod(c, col, 1, true, true), F32, 2, TU_SHAPE(3, 1), TU_VALS(1, 1, 1), 0);
  /* zeros and NaN propagate along the scan */
  nb_tensor *z = tu_make(c, F64, 1, TU_SHAPE(4), TU_VALS(2, 0, NAN, 3));
  tu_check(nb_cumprod(c, z, 0, false, false), F64, 1, TU_SHAPE(4), TU_VALS(2, 0, NAN, NAN), 0);
  tu_check(nb_cumsum(c, z, 0, true, true), F64, 1, TU_SHAPE(4), TU_VALS(NAN, NAN, 3, 0), 0);
  /* empty tensors keep their shape */
  tu_check_shape(nb_cumsum(c, tu_make(c, F32, 2, TU_SHAPE(0, 3), NULL), 0, false, false), F32, 2, TU_SHAPE(0, 3));
  tu_check_shape(nb_cumprod(c, tu_make(c, I32, 2, TU_SHAPE(2, 0), NULL), 0, true, true), I32, 2, TU_SHAPE(2, 0));
  /* rank 8 */
  nb_tensor *r8 = tu_make(c, I64, 8, TU_SHAPE(1, 2, 1, 1, 1, 1, 1, 2), TU_VALS(1, 2, 3, 4));
  tu_check(nb_cumsum(c, r8, 1, false, false), I64, 8, TU_SHAPE(1, 2, 1, 1, 1, 1, 1, 2), TU_VALS(1, 2, 4, 6), 0);
  tu_check(nb_cumprod(c, r8, -1, false, true), I64, 8, TU_SHAPE(1, 2, 1, 1, 1, 1, 1, 2), TU_VALS(2, 2, 12, 4), 0);
  /* integer products wrap like TF's: 65536^2 = 2^32 is 0 in int32 */
  tu_check(nb_cumprod(c, tu_make(c, I32, 1, TU_SHAPE(3), TU_VALS(65536, 65536, 3)), 0, false, false), I32, 1,
           TU_SHAPE(3), TU_VALS(65536, 0, 0), 0);
  assert_int_equal(nb_status(c), NB_OK);
}

/* Large scans: a long axis of stride 1, and inner dims wider than a kernel tile. */
static void test_scans_large(void **state) {
  nb_ctx *c = *state;
  nb_tensor *ones = nb_fill(c, TU_SHAPE(100000), 1, nb_scalar(c, F64, 1));
  nb_tensor *s = nb_cumsum(c, ones, 0, false, true);
  tu_check_shape(s, F64, 1, TU_SHAPE(100000));
  assert_true(nb_item(s, 0) == 100000 && nb_item(s, 99999) == 1 && nb_item(s, 40000) == 60000);
  nb_tensor *wide = nb_fill(c, TU_SHAPE(3, 3000, 5), 3, nb_scalar(c, I64, 2));
  nb_tensor *p = nb_cumprod(c, wide, 0, true, false);
  for (int64_t i = 0; i < 3 * 3000 * 5; i += 997) assert_true(nb_item(p, i) == (double)(1 << (i / 15000)));
  nb_tensor *t = nb_cumsum(c, nb_fill(c, TU_SHAPE(4, 2500), 2, nb_scalar(c, F32, 1)), 0, false, false);
  for (int64_t i = 0; i < 10000; i += 331) assert_true(nb_item(t, i) == (double)(i / 2500 + 1));
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_scan_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F32, 2, TU_SHAPE(2, 3), NULL), *out[1];
  assert_null(nb_cumsum(c, x, 2, false, false));
  tu_check_error(c, NB_INVALID, "Cumsum: Expected scan axis in the range [-2, 2), but got 2", NULL);
  assert_null(nb_cumprod(c, x, -3, false, false));
  tu_check_error(c, NB_INVALID, "Cumprod: Expected scan axis in the range [-2, 2), but got -3", NULL);
  assert_null(nb_cumsum(c, nb_scalar(c, F64, 1), 0, false, false)); /* rank 0 has no axis */
  tu_check_error(c, NB_INVALID, "range [0, 0), but got 0", NULL);
  assert_null(nb_cumprod(c, tu_make(c, BOOL, 1, TU_SHAPE(2), NULL), 0, false, false));
  tu_check_error(c, NB_DTYPE, "Cumprod:", "bool");
  nb_tensor *axes = tu_make(c, I32, 1, TU_SHAPE(1), TU_VALS(0));
  assert_int_equal(nb_op(c, "Cumsum", (nb_tensor *[]){x, axes}, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "Cumsum: axis must be a scalar, but received tensor of shape: [1]", NULL);
  assert_int_equal(nb_op(c, "Cumprod", (nb_tensor *[]){x, nb_scalar(c, F32, 0)}, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Cumprod:", "float32");
  assert_int_equal(nb_op(c, "Cumsum", &x, 1, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Cumsum: expected 2 inputs, got 1", NULL);
  nb_attr bad = nb_attr_int("exclusive", 1);
  assert_int_equal(nb_op(c, "Cumsum", (nb_tensor *[]){x, nb_scalar(c, I32, 0)}, 2, &bad, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Cumsum:", "exclusive");
  nb_attr unknown = nb_attr_bool("exclusve", true);
  assert_int_equal(nb_op(c, "Cumprod", (nb_tensor *[]){x, nb_scalar(c, I32, 0)}, 2, &unknown, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Cumprod:", "exclusve");
  assert_null(nb_cumsum(c, NULL, 0, false, false));
  tu_check_error(c, NB_INVALID, "Cumsum: input 0 is NULL", NULL);
}

static void test_scan_generic_entry(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F64, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4)), *out[1];
  nb_tensor *in[2] = {x, nb_scalar(c, I64, 0)};
  nb_attr attrs[4] = {nb_attr_bool("exclusive", true), nb_attr_bool("reverse", true), nb_attr_type("Tidx", I64),
                      nb_attr_type("T", F64)};
  assert_int_equal(nb_op(c, "Cumprod", in, 2, attrs, 4, out, 1), NB_OK);
  tu_check(out[0], F64, 2, TU_SHAPE(2, 2), TU_VALS(3, 4, 1, 1), 0);
  assert_int_equal(nb_op(c, "Cumsum", in, 2, NULL, 0, out, 1), NB_OK);
  tu_check(out[0], F64, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 4, 6), 0);
}

/* A graph refuses bad dtypes and axes when it is built: an axis out of range of a known
   rank fails though every dim is unknown. */
static void test_graph_validation(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->c;
  nb_tensor *x = tu_unknown_dims(c, NB_F32, 2), *fr = tu_unknown_rank(c, NB_F32);
  nb_tensor *(*const reductions[5])(nb_ctx *, nb_tensor *, const int *, int, bool) = {nb_sum, nb_mean, nb_max, nb_min,
                                                                                      nb_prod};
  static const char *const names[5] = {"Sum (node 'Sum')", "Mean (node 'Mean')", "Max (node 'Max')", "Min (node 'Min')",
                                       "Prod (node 'Prod')"};
  for (int op = 0; op < 5; op++) {
    assert_null(reductions[op](c, x, (const int[]){0, 2}, 2, false));
    tu_check_error(c, NB_INVALID, names[op], "Invalid reduction dimension (2 for input with 2 dimension(s)");
  }
  assert_null(nb_sum(c, x, (const int[]){-3}, 1, true));
  tu_check_error(c, NB_INVALID, "Sum (node", "Invalid reduction dimension (-3 for input with 2 dimension(s)");
  assert_null(nb_sum(c, tu_unknown_rank(c, NB_BOOL), (const int[]){0}, 1, false));
  tu_check_error(c, NB_DTYPE, "Sum (node", "input 0 has dtype bool");
  nb_tensor *float_axes[2] = {x, tu_unknown_dims(c, NB_F32, 1)}, *out[1];
  assert_int_equal(nb_op(c, "Mean", float_axes, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Mean (node", "input 1 has dtype float32");
  assert_null(nb_argmax(c, x, 2, NB_I64));
  tu_check_error(c, NB_INVALID, "ArgMax (node 'ArgMax'): Expected dimension in the range [-2, 2), but got 2", NULL);
  assert_null(nb_argmax(c, fr, 0, NB_F32));
  tu_check_error(c, NB_DTYPE, "ArgMax (node", "attr output_type=float32 is not supported; expected int32, int64");
  nb_tensor *vector_dim[2] = {x, tu_unknown_dims(c, NB_I32, 1)};
  assert_int_equal(nb_op(c, "ArgMax", vector_dim, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "ArgMax (node", "dim must be a scalar, but received tensor of shape: [-1]");
  assert_null(nb_cumsum(c, x, -3, false, false));
  tu_check_error(c, NB_INVALID, "Cumsum (node 'Cumsum'): Expected scan axis in the range [-2, 2), but got -3", NULL);
  assert_null(nb_cumprod(c, tu_unknown_rank(c, NB_BOOL), 0, false, false));
  tu_check_error(c, NB_DTYPE, "Cumprod (node", "input 0 has dtype bool");
  /* valid reductions build, what the unknown dims leave open left to run time */
  tu_check_shape(nb_sum(c, x, (const int[]){1}, 1, true), NB_F32, 2, TU_SHAPE(-1, 1));
  assert_int_equal(nb_rank(nb_max(c, fr, (const int[]){5}, 1, false)), -1);
  assert_int_equal(nb_status(c), NB_OK);
}

/* nb_sum_t and nb_cumsum_t take the axes as tensors: a scalar, a list with a negative and
   a repeated axis, int32 or int64. */
static void test_tensor_axes(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
  tu_check(nb_sum_t(c, x, nb_scalar(c, I32, 1), false), F64, 1, TU_SHAPE(2), TU_VALS(6, 15), 0);
  tu_check(nb_sum_t(c, x, tu_make(c, I64, 1, TU_SHAPE(3), TU_VALS(-1, 0, 1)), true), F64, 2, TU_SHAPE(1, 1),
           TU_VALS(21), 0);
  tu_check(nb_cumsum_t(c, x, nb_scalar(c, I64, 0), false, false), F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 5, 7, 9), 0);
  tu_check(nb_cumsum_t(c, x, nb_scalar(c, I32, -1), true, true), F64, 2, TU_SHAPE(2, 3), TU_VALS(5, 3, 0, 11, 6, 0), 0);
  assert_int_equal(nb_status(c), NB_OK);
  assert_null(nb_sum_t(c, x, nb_scalar(c, I32, 2), false));
  tu_check_error(c, NB_INVALID, "Sum", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_graph_validation, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sum_axes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_mean, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_max_min_prod, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_nan, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_rank0_and_size1, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_empty, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_axis_patterns, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_large, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_argmax, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_argmax_nan, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_argmax_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_generic_entry, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_scans, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_scans_large, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_scan_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_tensor_axes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_scan_generic_entry, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
