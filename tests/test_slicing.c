/* Slice, StridedSlice, StridedSliceGrad, GatherV2, UnsortedSegmentSum against hand-checked values and
   every error path. */
#include "graphutil.h"

#include <stdlib.h>

#define MASKS(...) ((nb_slice_masks){__VA_ARGS__})
static const nb_dtype all_dtypes[] = {NB_F32, NB_F64, NB_I32, NB_I64, NB_BOOL};
static const nb_dtype num_dtypes[] = {NB_F32, NB_F64, NB_I32, NB_I64};

/* 0, 1, 2, ... in shape (at most 4096 elements). */
static nb_tensor *iota(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape) {
  static double v[4096];
  for (int i = 0; i < 4096; i++) v[i] = i;
  return tu_make(c, t, rank, shape, v);
}

static nb_tensor *ints(nb_ctx *c, nb_dtype t, int n, const double *v) { return tu_make(c, t, 1, TU_SHAPE(n), v); }

/* want[] as dtype t stores it: bool keeps only zero / non-zero. */
static const double *as_dtype(nb_dtype t, const double *v, int n) {
  static double out[64];
  for (int i = 0; i < n; i++) out[i] = t == NB_BOOL ? v[i] != 0 : v[i];
  return out;
}

static nb_tensor *ss(nb_ctx *c, nb_tensor *x, int n, const int64_t *b, const int64_t *e, const int64_t *s,
                     nb_slice_masks m) {
  return nb_strided_slice(c, x, b, e, s, n, &m);
}

/* ---- Slice ------------------------------------------------------------------------------ */

static void test_slice_values_all_dtypes(void **state) {
  nb_ctx *c = *state;
  for (size_t t = 0; t < sizeof all_dtypes / sizeof *all_dtypes; t++) {
    nb_dtype dt = all_dtypes[t];
    nb_tensor *x = tu_make(c, dt, 2, TU_SHAPE(3, 4), TU_VALS(0, 1, 2, 3, 0, 5, 0, 7, 8, 0, 10, 0));
    nb_tensor *y = nb_slice(c, x, TU_SHAPE(1, 1), TU_SHAPE(2, -1), 2);
    tu_check(y, dt, 2, TU_SHAPE(2, 3), as_dtype(dt, TU_VALS(5, 0, 7, 0, 10, 0), 6), 0);
  }
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_slice_rank3_and_rank0(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_I64, 3, TU_SHAPE(2, 3, 4));
  nb_tensor *y = nb_slice(c, x, TU_SHAPE(0, 1, 1), TU_SHAPE(2, 2, 2), 3);
  tu_check(y, NB_I64, 3, TU_SHAPE(2, 2, 2), TU_VALS(5, 6, 9, 10, 17, 18, 21, 22), 0);
  /* size-1 dims in the middle */
  y = nb_slice(c, x, TU_SHAPE(1, 2, 0), TU_SHAPE(1, 1, -1), 3);
  tu_check(y, NB_I64, 3, TU_SHAPE(1, 1, 4), TU_VALS(20, 21, 22, 23), 0);
  nb_tensor *s = nb_scalar(c, NB_F64, 2.5);
  y = nb_slice(c, s, NULL, NULL, 0);
  tu_check(y, NB_F64, 0, NULL, TU_VALS(2.5), 0);
}

static void test_slice_empty(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_F32, 2, TU_SHAPE(3, 4));
  tu_check_shape(nb_slice(c, x, TU_SHAPE(3, 1), TU_SHAPE(-1, 2), 2), NB_F32, 2, TU_SHAPE(0, 2));
  tu_check_shape(nb_slice(c, x, TU_SHAPE(1, 4), TU_SHAPE(2, 0), 2), NB_F32, 2, TU_SHAPE(2, 0));
  nb_tensor *e = tu_make(c, NB_I32, 2, TU_SHAPE(0, 3), NULL);
  tu_check_shape(nb_slice(c, e, TU_SHAPE(0, 1), TU_SHAPE(-1, 2), 2), NB_I32, 2, TU_SHAPE(0, 2));
  assert_null(nb_slice(c, e, TU_SHAPE(1, 0), TU_SHAPE(0, 1), 2));
  tu_check_error(c, NB_INVALID, "Slice: Expected begin[0] == 0 (got 1)", "input.dim_size(0) == 0");
}

static void test_slice_large_threads(void **state) {
  nb_ctx *c = *state;
  enum { R = 300, C = 200 };
  float *v = malloc(sizeof(float) * R * C);
  for (int i = 0; i < R * C; i++) v[i] = (float)i;
  nb_tensor *x = nb_tensor_from(c, NB_F32, 2, TU_SHAPE(R, C), v);
  nb_tensor *y = nb_slice(c, x, TU_SHAPE(1, 3), TU_SHAPE(R - 2, C - 6), 2);
  tu_check_shape(y, NB_F32, 2, TU_SHAPE(R - 2, C - 6));
  const float *o = nb_data(y);
  for (int i = 0; i < R - 2; i++)
    for (int j = 0; j < C - 6; j++) assert_true(o[i * (C - 6) + j] == (float)((i + 1) * C + j + 3));
  free(v);
}

static void test_slice_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_F32, 2, TU_SHAPE(3, 2));
  assert_null(nb_slice(c, x, TU_SHAPE(4, 0), TU_SHAPE(1, 1), 2));
  tu_check_error(c, NB_INVALID, "Slice: Expected begin[0] in [0, 3], but got 4", NULL);
  assert_null(nb_slice(c, x, TU_SHAPE(-1, 0), TU_SHAPE(1, 1), 2));
  tu_check_error(c, NB_INVALID, "Expected begin[0] in [0, 3], but got -1", NULL);
  assert_null(nb_slice(c, x, TU_SHAPE(1, 0), TU_SHAPE(5, 1), 2));
  tu_check_error(c, NB_INVALID, "Expected size[0] in [0, 2], but got 5", NULL);
  assert_null(nb_slice(c, x, TU_SHAPE(0, 1), TU_SHAPE(1, -2), 2));
  tu_check_error(c, NB_INVALID, "Expected size[1] in [0, 1], but got -2", NULL);
  assert_null(nb_slice(c, x, TU_SHAPE(0), TU_SHAPE(1), 1));
  tu_check_error(c, NB_INVALID, "1-D tensors of size 2", "got shapes [1] and [1]");
  assert_null(nb_slice(c, x, NULL, TU_SHAPE(1, 1), 2));
  tu_check_error(c, NB_INVALID, "Slice: begin and size must be non-NULL", NULL);
  assert_null(nb_slice(c, x, NULL, NULL, -1));
  tu_check_error(c, NB_INVALID, "n = -1", NULL);

  nb_tensor *out = NULL;
  nb_tensor *fb[3] = {x, tu_make(c, NB_F32, 1, TU_SHAPE(2), NULL), ints(c, NB_I32, 2, TU_VALS(1, 1))};
  assert_int_equal(nb_op(c, "Slice", fb, 3, NULL, 0, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Slice: input 1 has dtype float32", NULL);
  nb_tensor *mixed[3] = {x, ints(c, NB_I64, 2, TU_VALS(0, 0)), ints(c, NB_I32, 2, TU_VALS(1, 1))};
  assert_int_equal(nb_op(c, "Slice", mixed, 3, NULL, 0, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "inputs 1 and 2 must have the same dtype", NULL);
  nb_tensor *two_d[3] = {x, tu_make(c, NB_I32, 2, TU_SHAPE(1, 2), NULL), ints(c, NB_I32, 2, TU_VALS(1, 1))};
  assert_int_equal(nb_op(c, "Slice", two_d, 3, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "got shapes [1,2] and [2]", NULL);
  assert_int_equal(nb_op(c, "Slice", fb, 2, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Slice: expected 3 inputs, got 2", NULL);
}

static void test_slice_nb_op(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_I32, 2, TU_SHAPE(3, 2));
  nb_tensor *in[3] = {x, ints(c, NB_I32, 2, TU_VALS(1, 1)), ints(c, NB_I32, 2, TU_VALS(-1, 1))};
  nb_attr attrs[2] = {nb_attr_type("T", NB_I32), nb_attr_type("Index", NB_I32)};
  nb_tensor *out = NULL;
  assert_int_equal(nb_op(c, "Slice", in, 3, attrs, 2, &out, 1), NB_OK);
  tu_check(out, NB_I32, 2, TU_SHAPE(2, 1), TU_VALS(3, 5), 0);
  attrs[1] = nb_attr_type("Index", NB_I64);
  assert_int_equal(nb_op(c, "Slice", in, 3, attrs, 2, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "attr Index=int64 does not match input 1 of dtype int32", NULL);
  attrs[1] = nb_attr_int("Tidx", 1);
  assert_int_equal(nb_op(c, "Slice", in, 3, attrs, 2, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Slice: attr 'Tidx' must be a type", NULL);
}

/* ---- StridedSlice ---------------------------------------------------------------------- */

static void test_strided_basic_1d(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_F32, 1, TU_SHAPE(6));
  /* x[1:3] */
  tu_check(ss(c, x, 1, TU_SHAPE(1), TU_SHAPE(3), TU_SHAPE(1), MASKS(0)), NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2), 0);
  /* x[::-1] */
  tu_check(ss(c, x, 1, TU_SHAPE(0), TU_SHAPE(0), TU_SHAPE(-1), MASKS(.begin_mask = 1, .end_mask = 1)), NB_F32, 1,
           TU_SHAPE(6), TU_VALS(5, 4, 3, 2, 1, 0), 0);
  /* x[5:100] and x[-100:2]: clamped */
  tu_check(ss(c, x, 1, TU_SHAPE(5), TU_SHAPE(100), TU_SHAPE(1), MASKS(0)), NB_F32, 1, TU_SHAPE(1), TU_VALS(5), 0);
  tu_check(ss(c, x, 1, TU_SHAPE(-100), TU_SHAPE(2), TU_SHAPE(1), MASKS(0)), NB_F32, 1, TU_SHAPE(2), TU_VALS(0, 1), 0);
  /* x[3:1] and x[100:] are empty */
  tu_check_shape(ss(c, x, 1, TU_SHAPE(3), TU_SHAPE(1), TU_SHAPE(1), MASKS(0)), NB_F32, 1, TU_SHAPE(0));
  tu_check_shape(ss(c, x, 1, TU_SHAPE(100), TU_SHAPE(0), TU_SHAPE(1), MASKS(.end_mask = 1)), NB_F32, 1, TU_SHAPE(0));
  /* x[4:1:-2], x[10:-10:-3] (both ends clamped), x[-2:-5:-1] */
  tu_check(ss(c, x, 1, TU_SHAPE(4), TU_SHAPE(1), TU_SHAPE(-2), MASKS(0)), NB_F32, 1, TU_SHAPE(2), TU_VALS(4, 2), 0);
  tu_check(ss(c, x, 1, TU_SHAPE(10), TU_SHAPE(-10), TU_SHAPE(-3), MASKS(0)), NB_F32, 1, TU_SHAPE(2), TU_VALS(5, 2), 0);
  tu_check(ss(c, x, 1, TU_SHAPE(-2), TU_SHAPE(-5), TU_SHAPE(-1), MASKS(0)), NB_F32, 1, TU_SHAPE(3), TU_VALS(4, 3, 2),
           0);
  /* x[1:6:4] and x[-1] */
  tu_check(ss(c, x, 1, TU_SHAPE(1), TU_SHAPE(6), TU_SHAPE(4), MASKS(0)), NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 5), 0);
  tu_check(ss(c, x, 1, TU_SHAPE(-1), TU_SHAPE(0), TU_SHAPE(1), MASKS(.shrink_axis_mask = 1)), NB_F32, 0, NULL,
           TU_VALS(5), 0);
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_strided_2d(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_I32, 2, TU_SHAPE(4, 3));
  /* x[::2, 1] */
  tu_check(ss(c, x, 2, TU_SHAPE(0, 1), TU_SHAPE(0, 2), TU_SHAPE(2, 1),
              MASKS(.begin_mask = 1, .end_mask = 1, .shrink_axis_mask = 2)),
           NB_I32, 1, TU_SHAPE(2), TU_VALS(1, 7), 0);
  /* x[..., 0] */
  tu_check(
      ss(c, x, 2, TU_SHAPE(0, 0), TU_SHAPE(0, 1), TU_SHAPE(1, 1), MASKS(.ellipsis_mask = 1, .shrink_axis_mask = 2)),
      NB_I32, 1, TU_SHAPE(4), TU_VALS(0, 3, 6, 9), 0);
  /* x[:, tf.newaxis] */
  tu_check(ss(c, x, 2, TU_SHAPE(0, 0), TU_SHAPE(0, 0), TU_SHAPE(1, 1),
              MASKS(.begin_mask = 1, .end_mask = 1, .new_axis_mask = 2)),
           NB_I32, 3, TU_SHAPE(4, 1, 3), TU_VALS(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 0);
  /* x[-1]: the remaining dim is implied */
  tu_check(ss(c, x, 1, TU_SHAPE(-1), TU_SHAPE(0), TU_SHAPE(1), MASKS(.shrink_axis_mask = 1)), NB_I32, 1, TU_SHAPE(3),
           TU_VALS(9, 10, 11), 0);
  /* x[1:3, ::-1] and x[:, 1:2] */
  tu_check(ss(c, x, 2, TU_SHAPE(1, 0), TU_SHAPE(3, 0), TU_SHAPE(1, -1), MASKS(.begin_mask = 2, .end_mask = 2)), NB_I32,
           2, TU_SHAPE(2, 3), TU_VALS(5, 4, 3, 8, 7, 6), 0);
  tu_check(ss(c, x, 2, TU_SHAPE(0, 1), TU_SHAPE(0, 2), TU_SHAPE(1, 1), MASKS(.begin_mask = 1, .end_mask = 1)), NB_I32,
           2, TU_SHAPE(4, 1), TU_VALS(1, 4, 7, 10), 0);
  /* x[1, 2]: a scalar */
  tu_check(ss(c, x, 2, TU_SHAPE(1, 2), TU_SHAPE(2, 3), TU_SHAPE(1, 1), MASKS(.shrink_axis_mask = 3)), NB_I32, 0, NULL,
           TU_VALS(5), 0);
  /* masked begin/end ignore their values */
  tu_check(ss(c, x, 1, TU_SHAPE(77), TU_SHAPE(-77), TU_SHAPE(3), MASKS(.begin_mask = 1, .end_mask = 1)), NB_I32, 2,
           TU_SHAPE(2, 3), TU_VALS(0, 1, 2, 9, 10, 11), 0);
}

static void test_strided_rank3_combined_masks(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_F64, 3, TU_SHAPE(2, 3, 4));
  /* x[1, tf.newaxis, ..., ::-2] */
  tu_check(ss(c, x, 4, TU_SHAPE(1, 0, 0, 0), TU_SHAPE(2, 0, 0, 0), TU_SHAPE(1, 1, 1, -2),
              MASKS(.begin_mask = 8, .end_mask = 8, .ellipsis_mask = 4, .new_axis_mask = 2, .shrink_axis_mask = 1)),
           NB_F64, 3, TU_SHAPE(1, 3, 2), TU_VALS(15, 13, 19, 17, 23, 21), 0);
  /* x[..., tf.newaxis, 0]: a new axis after the ellipsis */
  tu_check(ss(c, x, 3, TU_SHAPE(0, 0, 0), TU_SHAPE(0, 0, 1), TU_SHAPE(1, 1, 1),
              MASKS(.ellipsis_mask = 1, .new_axis_mask = 2, .shrink_axis_mask = 4)),
           NB_F64, 3, TU_SHAPE(2, 3, 1), TU_VALS(0, 4, 8, 12, 16, 20), 0);
  /* x[tf.newaxis, -1, 1:, tf.newaxis, 3] */
  tu_check(ss(c, x, 5, TU_SHAPE(0, -1, 1, 0, 3), TU_SHAPE(0, 0, 0, 0, 4), TU_SHAPE(1, 1, 1, 1, 1),
              MASKS(.end_mask = 4, .new_axis_mask = 9, .shrink_axis_mask = 18)),
           NB_F64, 3, TU_SHAPE(1, 2, 1), TU_VALS(19, 23), 0);
  /* x[...]: everything (a shrink bit on the ellipsis is ignored) */
  nb_tensor *all = ss(c, x, 1, TU_SHAPE(0), TU_SHAPE(0), TU_SHAPE(1), MASKS(.ellipsis_mask = 1, .shrink_axis_mask = 1));
  tu_check_shape(all, NB_F64, 3, TU_SHAPE(2, 3, 4));
  assert_true(nb_item(all, 23) == 23);
  /* x[::-1, ::-1, ::-1] reverses all */
  nb_tensor *r =
      ss(c, x, 3, TU_SHAPE(0, 0, 0), TU_SHAPE(0, 0, 0), TU_SHAPE(-1, -1, -1), MASKS(.begin_mask = 7, .end_mask = 7));
  tu_check_shape(r, NB_F64, 3, TU_SHAPE(2, 3, 4));
  for (int i = 0; i < 24; i++) assert_true(nb_item(r, i) == 23 - i);
}

static void test_strided_all_dtypes(void **state) {
  nb_ctx *c = *state;
  for (size_t t = 0; t < sizeof all_dtypes / sizeof *all_dtypes; t++) {
    nb_dtype dt = all_dtypes[t];
    nb_tensor *x = tu_make(c, dt, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 3, 0, 5, 6));
    /* x[::-1, ::2] */
    nb_tensor *y = ss(c, x, 2, TU_SHAPE(0, 0), TU_SHAPE(0, 0), TU_SHAPE(-1, 2), MASKS(.begin_mask = 3, .end_mask = 3));
    tu_check(y, dt, 2, TU_SHAPE(2, 2), as_dtype(dt, TU_VALS(0, 6, 1, 3), 4), 0);
  }
}

static void test_strided_rank0_and_rank8(void **state) {
  nb_ctx *c = *state;
  nb_tensor *s = nb_scalar(c, NB_I64, 7);
  tu_check(ss(c, s, 0, NULL, NULL, NULL, MASKS(0)), NB_I64, 0, NULL, TU_VALS(7), 0);
  tu_check(nb_strided_slice(c, s, TU_SHAPE(0), TU_SHAPE(0), TU_SHAPE(1), 1, &MASKS(.new_axis_mask = 1)), NB_I64, 1,
           TU_SHAPE(1), TU_VALS(7), 0);

  const int64_t shape[8] = {2, 1, 2, 1, 2, 1, 2, 2};
  nb_tensor *x = iota(c, NB_I32, 8, shape);
  /* x[::-1, ..., 1] */
  nb_tensor *y = ss(c, x, 3, TU_SHAPE(0, 0, 1), TU_SHAPE(0, 0, 2), TU_SHAPE(-1, 1, 1),
                    MASKS(.begin_mask = 1, .end_mask = 1, .ellipsis_mask = 2, .shrink_axis_mask = 4));
  tu_check_shape(y, NB_I32, 7, TU_SHAPE(2, 1, 2, 1, 2, 1, 2));
  double want[16];
  int m = 0;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      for (int d = 0; d < 2; d++)
        for (int e = 0; e < 2; e++) want[m++] = (1 - a) * 16 + b * 8 + d * 4 + e * 2 + 1;
  tu_check_vals(y, want, 0);
  /* a new axis would make rank 9 */
  assert_null(nb_strided_slice(c, x, TU_SHAPE(0), TU_SHAPE(0), TU_SHAPE(1), 1, &MASKS(.new_axis_mask = 1)));
  tu_check_error(c, NB_SHAPE, "StridedSlice: output rank 9 exceeds the maximum rank 8", NULL);
}

static void test_strided_large_threads(void **state) {
  nb_ctx *c = *state;
  enum { R = 400, C = 300, N = 100000 };
  double *v = malloc(sizeof(double) * R * C);
  for (int i = 0; i < R * C; i++) v[i] = i;
  nb_tensor *x = nb_tensor_from(c, NB_F64, 2, TU_SHAPE(R, C), v);
  /* x[::3, ::-2]: rows split across threads */
  nb_tensor *y = ss(c, x, 2, TU_SHAPE(0, 0), TU_SHAPE(0, 0), TU_SHAPE(3, -2), MASKS(.begin_mask = 3, .end_mask = 3));
  tu_check_shape(y, NB_F64, 2, TU_SHAPE(134, 150));
  const double *o = nb_data(y);
  for (int i = 0; i < 134; i++)
    for (int j = 0; j < 150; j++) assert_true(o[i * 150 + j] == (double)(3 * i * C + (C - 1 - 2 * j)));
  free(v);
  int32_t *w = malloc(sizeof(int32_t) * N);
  for (int i = 0; i < N; i++) w[i] = i;
  nb_tensor *z = nb_tensor_from(c, NB_I32, 1, TU_SHAPE(N), w);
  /* z[1::2]: one long strided run split across threads */
  nb_tensor *h = ss(c, z, 1, TU_SHAPE(1), TU_SHAPE(0), TU_SHAPE(2), MASKS(.end_mask = 1));
  tu_check_shape(h, NB_I32, 1, TU_SHAPE(N / 2));
  const int32_t *ho = nb_data(h);
  for (int i = 0; i < N / 2; i++) assert_int_equal(ho[i], 2 * i + 1);
  free(w);
}

static void test_strided_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_F32, 2, TU_SHAPE(6, 2));
  assert_null(ss(c, x, 1, TU_SHAPE(6), TU_SHAPE(7), TU_SHAPE(1), MASKS(.shrink_axis_mask = 1)));
  tu_check_error(c, NB_INVALID, "StridedSlice: slice index 6 of dimension 0 out of bounds.", NULL);
  assert_null(ss(c, x, 2, TU_SHAPE(0, 5), TU_SHAPE(1, 6), TU_SHAPE(1, 1), MASKS(.shrink_axis_mask = 2)));
  tu_check_error(c, NB_INVALID, "slice index 5 of dimension 1 out of bounds.", NULL);
  assert_null(ss(c, x, 1, TU_SHAPE(-7), TU_SHAPE(0), TU_SHAPE(1), MASKS(.shrink_axis_mask = 1)));
  tu_check_error(c, NB_INVALID, "slice index -7 of dimension 0 out of bounds.", NULL);
  assert_null(ss(c, x, 1, TU_SHAPE(0), TU_SHAPE(3), TU_SHAPE(0), MASKS(0)));
  tu_check_error(c, NB_INVALID, "strides[0] must be non-zero", NULL);
  assert_null(ss(c, x, 2, TU_SHAPE(0, 0), TU_SHAPE(3, 1), TU_SHAPE(1, 0), MASKS(.end_mask = 2)));
  tu_check_error(c, NB_INVALID, "strides[1] must be non-zero", NULL);
  assert_null(ss(c, x, 2, TU_SHAPE(0, 0), TU_SHAPE(0, 0), TU_SHAPE(1, 1), MASKS(.ellipsis_mask = 3)));
  tu_check_error(c, NB_INVALID, "Multiple ellipses in slice spec not allowed", NULL);
  assert_null(ss(c, x, 3, TU_SHAPE(0, 0, 0), TU_SHAPE(1, 1, 1), TU_SHAPE(1, 1, 1), MASKS(0)));
  tu_check_error(c, NB_INVALID, "Index out of range using input dim 2; input has only 2 dims", NULL);
  assert_null(ss(c, x, 1, TU_SHAPE(1), TU_SHAPE(0), TU_SHAPE(-1), MASKS(.shrink_axis_mask = 1)));
  tu_check_error(c, NB_INVALID, "only stride 1 allowed on non-range indexing", NULL);
  assert_null(ss(c, x, 1, TU_SHAPE(0), TU_SHAPE(1), TU_SHAPE(1), MASKS(.begin_mask = (int64_t)1 << 40)));
  tu_check_error(c, NB_INVALID, "attr begin_mask = 1099511627776 is out of range for an int32", NULL);
  assert_null(nb_strided_slice(c, x, TU_SHAPE(0), NULL, TU_SHAPE(1), 1, NULL));
  tu_check_error(c, NB_INVALID, "StridedSlice: begin, end and strides must be non-NULL", NULL);

  nb_tensor *out = NULL;
  nb_tensor *i1 = ints(c, NB_I64, 1, TU_VALS(0)), *i2 = ints(c, NB_I64, 2, TU_VALS(1, 1));
  nb_tensor *mism[4] = {x, i1, i2, i1};
  assert_int_equal(nb_op(c, "StridedSlice", mism, 4, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Expected begin, end, and strides to be 1D equal size tensors",
                 "got shapes [1], [2], and [1] instead");
  nb_tensor *fl = tu_make(c, NB_F32, 1, TU_SHAPE(1), TU_VALS(0));
  nb_tensor *flt[4] = {x, fl, i1, i1};
  assert_int_equal(nb_op(c, "StridedSlice", flt, 4, NULL, 0, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "StridedSlice: input 1 has dtype float32", NULL);
  nb_tensor *mixed[4] = {x, i1, i1, ints(c, NB_I32, 1, TU_VALS(1))};
  assert_int_equal(nb_op(c, "StridedSlice", mixed, 4, NULL, 0, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "inputs 1 and 3 must have the same dtype", NULL);
  nb_tensor *scalar_b[4] = {x, nb_scalar(c, NB_I64, 0), i1, i1};
  assert_int_equal(nb_op(c, "StridedSlice", scalar_b, 4, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "got shapes [], [1], and [1]", NULL);
  int64_t many[32] = {0};
  nb_tensor *big = nb_tensor_from(c, NB_I64, 1, TU_SHAPE(32), many);
  nb_tensor *toolong[4] = {x, big, big, big};
  assert_int_equal(nb_op(c, "StridedSlice", toolong, 4, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "at most 31 values", NULL);
}

static void test_strided_nb_op(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_I64, 2, TU_SHAPE(3, 2));
  nb_tensor *in[4] = {x, ints(c, NB_I32, 2, TU_VALS(0, 1)), ints(c, NB_I32, 2, TU_VALS(0, 2)),
                      ints(c, NB_I32, 2, TU_VALS(-1, 1))};
  /* x[::-1, 1] through TF's attr names */
  nb_attr attrs[6] = {nb_attr_int("begin_mask", 1), nb_attr_int("end_mask", 1),    nb_attr_int("shrink_axis_mask", 2),
                      nb_attr_type("T", NB_I64),    nb_attr_type("Index", NB_I32), nb_attr_int("new_axis_mask", 0)};
  nb_tensor *out = NULL;
  assert_int_equal(nb_op(c, "StridedSlice", in, 4, attrs, 6, &out, 1), NB_OK);
  tu_check(out, NB_I64, 1, TU_SHAPE(3), TU_VALS(5, 3, 1), 0);
  /* ellipsis_mask through nb_op: x[..., 1] */
  nb_attr ell[2] = {nb_attr_int("ellipsis_mask", 1), nb_attr_int("shrink_axis_mask", 2)};
  assert_int_equal(nb_op(c, "StridedSlice", in, 4, ell, 2, &out, 1), NB_OK);
  tu_check(out, NB_I64, 1, TU_SHAPE(3), TU_VALS(1, 3, 5), 0);
  nb_attr bad[1] = {nb_attr_int("begin_masks", 1)};
  assert_int_equal(nb_op(c, "StridedSlice", in, 4, bad, 1, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "StridedSlice: unknown attr 'begin_masks'", NULL);
  nb_attr kind[1] = {nb_attr_float("end_mask", 1)};
  assert_int_equal(nb_op(c, "StridedSlice", in, 4, kind, 1, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "attr 'end_mask' has the wrong kind", NULL);
  nb_attr idx[1] = {nb_attr_type("Index", NB_I64)};
  assert_int_equal(nb_op(c, "StridedSlice", in, 4, idx, 1, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "attr Index=int64 does not match input 1 of dtype int32", NULL);
  assert_int_equal(nb_op(c, "StridedSlice", in, 3, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "StridedSlice: expected 4 inputs, got 3", NULL);
}

/* ---- StridedSliceGrad ------------------------------------------------------------------------ */

static nb_tensor *ssg(nb_ctx *c, int rank, const int64_t *shape, int n, const int64_t *b, const int64_t *e,
                      const int64_t *s, nb_tensor *dy, nb_slice_masks m) {
  nb_tensor *st = nb_tensor_from(c, NB_I64, 1, TU_SHAPE(rank), rank ? shape : TU_SHAPE(0));
  return nb_strided_slice_grad(c, st, b, e, s, n, dy, &m);
}

static void test_strided_grad_1d_all_dtypes(void **state) {
  nb_ctx *c = *state;
  for (size_t t = 0; t < sizeof all_dtypes / sizeof *all_dtypes; t++) {
    nb_dtype dt = all_dtypes[t];
    /* x[1:4:2] of [5] */
    nb_tensor *dy = tu_make(c, dt, 1, TU_SHAPE(2), TU_VALS(7, 9));
    tu_check(ssg(c, 1, TU_SHAPE(5), 1, TU_SHAPE(1), TU_SHAPE(4), TU_SHAPE(2), dy, MASKS(0)), dt, 1, TU_SHAPE(5),
             as_dtype(dt, TU_VALS(0, 7, 0, 9, 0), 5), 0);
    /* x[::-1] (begin and end masks) */
    dy = tu_make(c, dt, 1, TU_SHAPE(3), TU_VALS(1, 0, 3));
    tu_check(
        ssg(c, 1, TU_SHAPE(3), 1, TU_SHAPE(0), TU_SHAPE(0), TU_SHAPE(-1), dy, MASKS(.begin_mask = 1, .end_mask = 1)),
        dt, 1, TU_SHAPE(3), as_dtype(dt, TU_VALS(3, 0, 1), 3), 0);
  }
}

static void test_strided_grad_2d_negative_strides(void **state) {
  nb_ctx *c = *state;
  /* x[1::2, -1:0:-2] of [4, 5]: dy[a][b] goes to dx[1 + 2a][4 - 2b] */
  nb_tensor *dy = tu_make(c, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4));
  tu_check(ssg(c, 2, TU_SHAPE(4, 5), 2, TU_SHAPE(1, -1), TU_SHAPE(4, 0), TU_SHAPE(2, -2), dy, MASKS(0)), NB_F64, 2,
           TU_SHAPE(4, 5), TU_VALS(0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 4, 0, 3), 0);
  /* x[3::-2, 1:] (end_mask on dim 0): rows 3 and 1, columns 1..2 of [4, 3] */
  dy = tu_make(c, NB_I32, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4));
  tu_check(ssg(c, 2, TU_SHAPE(4, 3), 2, TU_SHAPE(3, 1), TU_SHAPE(0, 3), TU_SHAPE(-2, 1), dy, MASKS(.end_mask = 1)),
           NB_I32, 2, TU_SHAPE(4, 3), TU_VALS(0, 0, 0, 0, 3, 4, 0, 0, 0, 0, 1, 2), 0);
}

static void test_strided_grad_shrink_new_axis(void **state) {
  nb_ctx *c = *state;
  /* x[1] (shrink) of [3, 2]: dy is a row */
  nb_tensor *dy = tu_make(c, NB_F32, 1, TU_SHAPE(2), TU_VALS(5, 6));
  tu_check(ssg(c, 2, TU_SHAPE(3, 2), 1, TU_SHAPE(-2), TU_SHAPE(0), TU_SHAPE(1), dy, MASKS(.shrink_axis_mask = 1)),
           NB_F32, 2, TU_SHAPE(3, 2), TU_VALS(0, 0, 5, 6, 0, 0), 0);
  /* x[..., newaxis, 1:3] of [2, 1, 3]: dy [2, 1, 1, 2] */
  dy = tu_make(c, NB_I64, 4, TU_SHAPE(2, 1, 1, 2), TU_VALS(1, 2, 3, 4));
  tu_check(ssg(c, 3, TU_SHAPE(2, 1, 3), 3, TU_SHAPE(0, 0, 1), TU_SHAPE(0, 0, 3), TU_SHAPE(1, 1, 1), dy,
               MASKS(.ellipsis_mask = 1, .new_axis_mask = 2)),
           NB_I64, 3, TU_SHAPE(2, 1, 3), TU_VALS(0, 1, 2, 0, 3, 4), 0);
  /* x[newaxis, 1, ::2] of [2, 3]: dy [1, 2] */
  dy = tu_make(c, NB_F64, 2, TU_SHAPE(1, 2), TU_VALS(8, 9));
  tu_check(ssg(c, 2, TU_SHAPE(2, 3), 3, TU_SHAPE(0, 1, 0), TU_SHAPE(0, 2, 0), TU_SHAPE(1, 1, 2), dy,
               MASKS(.new_axis_mask = 1, .shrink_axis_mask = 2, .end_mask = 4)),
           NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(0, 0, 0, 8, 0, 9), 0);
}

static void test_strided_grad_rank0_empty_rank8(void **state) {
  nb_ctx *c = *state;
  /* a scalar x: dx = dy */
  tu_check(ssg(c, 0, NULL, 0, NULL, NULL, NULL, nb_scalar(c, NB_F32, 4), MASKS(0)), NB_F32, 0, NULL, TU_VALS(4), 0);
  /* an empty selection: zeros */
  nb_tensor *none = tu_make(c, NB_F32, 1, TU_SHAPE(0), TU_VALS(0));
  tu_check(ssg(c, 1, TU_SHAPE(3), 1, TU_SHAPE(2), TU_SHAPE(1), TU_SHAPE(1), none, MASKS(0)), NB_F32, 1, TU_SHAPE(3),
           TU_VALS(0, 0, 0), 0);
  /* an empty x */
  tu_check(ssg(c, 2, TU_SHAPE(0, 2), 1, TU_SHAPE(0), TU_SHAPE(1), TU_SHAPE(1),
               tu_make(c, NB_I32, 2, TU_SHAPE(0, 2), NULL), MASKS(0)),
           NB_I32, 2, TU_SHAPE(0, 2), NULL, 0);
  /* rank 8, x[..., 1] of [2, 1, 1, 1, 1, 1, 1, 2] */
  nb_tensor *dy = tu_make(c, NB_BOOL, 7, TU_SHAPE(2, 1, 1, 1, 1, 1, 1), TU_VALS(1, 1));
  tu_check(ssg(c, 8, TU_SHAPE(2, 1, 1, 1, 1, 1, 1, 2), 2, TU_SHAPE(0, 1), TU_SHAPE(0, 2), TU_SHAPE(1, 1), dy,
               MASKS(.ellipsis_mask = 1, .shrink_axis_mask = 2)),
           NB_BOOL, 8, TU_SHAPE(2, 1, 1, 1, 1, 1, 1, 2), TU_VALS(0, 1, 0, 1), 0);
}

static void test_strided_grad_large_threads(void **state) {
  nb_ctx *c = *state;
  /* x[1::2, ::-1] of [1000, 300]: every other row, reversed */
  enum { R = 1000, C = 300 };
  float *v = malloc(sizeof(float) * (R / 2) * C);
  assert_non_null(v);
  for (int i = 0; i < R / 2 * C; i++) v[i] = (float)i;
  nb_tensor *dy = nb_tensor_from(c, NB_F32, 2, TU_SHAPE(R / 2, C), v);
  free(v);
  nb_tensor *dx = ssg(c, 2, TU_SHAPE(R, C), 2, TU_SHAPE(1, 0), TU_SHAPE(0, 0), TU_SHAPE(2, -1), dy,
                      MASKS(.end_mask = 3, .begin_mask = 2));
  assert_non_null(dx);
  const float *d = nb_data(dx);
  for (int r = 0; r < R; r++)
    for (int j = 0; j < C; j++) {
      float want = r % 2 ? (float)((r / 2) * C + (C - 1 - j)) : 0.0f;
      if (d[r * C + j] != want) fail_msg("dx[%d][%d] = %g, want %g", r, j, d[r * C + j], want);
    }
}

static void test_strided_grad_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *dy3 = tu_make(c, NB_F32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3));
  assert_null(ssg(c, 1, TU_SHAPE(5), 1, TU_SHAPE(1), TU_SHAPE(4), TU_SHAPE(2), dy3, MASKS(0)));
  tu_check_error(c, NB_INVALID, "StridedSliceGrad: shape of dy was [3] instead of [2]", NULL);
  assert_null(ssg(c, 2, TU_SHAPE(3, 4), 1, TU_SHAPE(1), TU_SHAPE(2), TU_SHAPE(1), dy3, MASKS(.shrink_axis_mask = 1)));
  tu_check_error(c, NB_INVALID, "shape of dy was [3] instead of [4]", NULL);
  assert_null(ssg(c, 1, TU_SHAPE(5), 1, TU_SHAPE(0), TU_SHAPE(3), TU_SHAPE(0), dy3, MASKS(0)));
  tu_check_error(c, NB_INVALID, "StridedSliceGrad: strides[0] must be non-zero", NULL);
  assert_null(ssg(c, 1, TU_SHAPE(2), 1, TU_SHAPE(5), TU_SHAPE(6), TU_SHAPE(1), nb_scalar(c, NB_F32, 1),
                  MASKS(.shrink_axis_mask = 1)));
  tu_check_error(c, NB_INVALID, "slice index 5 of dimension 0 out of bounds.", NULL);
  assert_null(ssg(c, 1, TU_SHAPE(-3), 1, TU_SHAPE(0), TU_SHAPE(3), TU_SHAPE(1), dy3, MASKS(0)));
  tu_check_error(c, NB_INVALID, "StridedSliceGrad: shape [-3] has a negative dim", NULL);
  nb_tensor *st = ints(c, NB_I64, 1, TU_VALS(3));
  assert_null(nb_strided_slice_grad(c, st, TU_SHAPE(0), TU_SHAPE(1), NULL, 1, dy3, NULL));
  tu_check_error(c, NB_INVALID, "StridedSliceGrad: begin, end and strides must be non-NULL", NULL);

  nb_tensor *out = NULL, *i1 = ints(c, NB_I64, 1, TU_VALS(0)), *s1 = ints(c, NB_I64, 1, TU_VALS(1));
  nb_tensor *scalar_shape[5] = {nb_scalar(c, NB_I64, 3), i1, i1, s1, dy3};
  assert_int_equal(nb_op(c, "StridedSliceGrad", scalar_shape, 5, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "StridedSliceGrad: shape must be 1-D, got shape.shape = []", NULL);
  nb_tensor *float_shape[5] = {tu_make(c, NB_F32, 1, TU_SHAPE(1), TU_VALS(3)), i1, i1, s1, dy3};
  assert_int_equal(nb_op(c, "StridedSliceGrad", float_shape, 5, NULL, 0, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "StridedSliceGrad: input 0 has dtype float32", NULL);
  nb_tensor *mixed[5] = {ints(c, NB_I32, 1, TU_VALS(3)), i1, ints(c, NB_I64, 1, TU_VALS(3)), s1, dy3};
  assert_int_equal(nb_op(c, "StridedSliceGrad", mixed, 5, NULL, 0, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "inputs 0 and 1 must have the same dtype", NULL);
  assert_int_equal(nb_op(c, "StridedSliceGrad", mixed, 4, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "StridedSliceGrad: expected 5 inputs, got 4", NULL);
  nb_tensor *nine = tu_make(c, NB_I64, 1, TU_SHAPE(9), TU_VALS(1, 1, 1, 1, 1, 1, 1, 1, 1));
  nb_tensor *too_deep[5] = {nine, i1, i1, s1, dy3};
  assert_int_equal(nb_op(c, "StridedSliceGrad", too_deep, 5, NULL, 0, &out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "shape has 9 dims, more than the maximum rank 8", NULL);
}

static void test_strided_grad_nb_op(void **state) {
  nb_ctx *c = *state;
  /* x[::-1, 1] of [3, 2] through TF's attr names, int32 indices */
  nb_tensor *in[5] = {ints(c, NB_I32, 2, TU_VALS(3, 2)), ints(c, NB_I32, 2, TU_VALS(0, 1)),
                      ints(c, NB_I32, 2, TU_VALS(0, 2)), ints(c, NB_I32, 2, TU_VALS(-1, 1)),
                      tu_make(c, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3))};
  nb_attr attrs[6] = {nb_attr_int("begin_mask", 1), nb_attr_int("end_mask", 1),    nb_attr_int("shrink_axis_mask", 2),
                      nb_attr_type("T", NB_F64),    nb_attr_type("Index", NB_I32), nb_attr_int("ellipsis_mask", 0)};
  nb_tensor *out = NULL;
  assert_int_equal(nb_op(c, "StridedSliceGrad", in, 5, attrs, 6, &out, 1), NB_OK);
  tu_check(out, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(0, 3, 0, 2, 0, 1), 0);
  nb_attr idx[1] = {nb_attr_type("Index", NB_I64)};
  assert_int_equal(nb_op(c, "StridedSliceGrad", in, 5, idx, 1, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "attr Index=int64 does not match input 1 of dtype int32", NULL);
  nb_attr t[1] = {nb_attr_type("T", NB_F32)};
  assert_int_equal(nb_op(c, "StridedSliceGrad", in, 5, t, 1, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "StridedSliceGrad", NULL);
  /* the wrapper takes begin/end/strides in shape's dtype */
  tu_check(nb_strided_slice_grad(c, in[0], TU_SHAPE(1, 0), TU_SHAPE(2, 2), TU_SHAPE(1, 1), 2,
                                 tu_make(c, NB_F32, 2, TU_SHAPE(1, 2), TU_VALS(4, 5)), NULL),
           NB_F32, 2, TU_SHAPE(3, 2), TU_VALS(0, 0, 4, 5, 0, 0), 0);
}

/* ---- GatherV2 ------------------------------------------------------------------------------ */

static void test_gather_axes(void **state) {
  nb_ctx *c = *state;
  nb_tensor *p = iota(c, NB_F32, 2, TU_SHAPE(3, 2));
  tu_check(nb_gather(c, p, ints(c, NB_I32, 2, TU_VALS(2, 0)), 0, 0), NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(4, 5, 0, 1), 0);
  nb_tensor *q = iota(c, NB_I64, 2, TU_SHAPE(2, 3));
  nb_tensor *ix = ints(c, NB_I64, 3, TU_VALS(2, 2, 0));
  tu_check(nb_gather(c, q, ix, 1, 0), NB_I64, 2, TU_SHAPE(2, 3), TU_VALS(2, 2, 0, 5, 5, 3), 0);
  tu_check(nb_gather(c, q, ix, -1, 0), NB_I64, 2, TU_SHAPE(2, 3), TU_VALS(2, 2, 0, 5, 5, 3), 0);
  tu_check(nb_gather(c, q, ints(c, NB_I32, 1, TU_VALS(1)), -2, 0), NB_I64, 2, TU_SHAPE(1, 3), TU_VALS(3, 4, 5), 0);
}

static void test_gather_index_shapes(void **state) {
  nb_ctx *c = *state;
  nb_tensor *p = iota(c, NB_I32, 2, TU_SHAPE(3, 2));
  /* scalar index drops the axis */
  tu_check(nb_gather(c, p, nb_scalar(c, NB_I32, 1), 0, 0), NB_I32, 1, TU_SHAPE(2), TU_VALS(2, 3), 0);
  tu_check(nb_gather(c, p, nb_scalar(c, NB_I64, 1), 1, 0), NB_I32, 1, TU_SHAPE(3), TU_VALS(1, 3, 5), 0);
  /* 2-D indices */
  nb_tensor *v = tu_make(c, NB_F64, 1, TU_SHAPE(4), TU_VALS(10, 20, 30, 40));
  nb_tensor *i2 = tu_make(c, NB_I64, 2, TU_SHAPE(2, 2), TU_VALS(3, 0, 1, 1));
  tu_check(nb_gather(c, v, i2, 0, 0), NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(40, 10, 20, 20), 0);
  nb_tensor *q = iota(c, NB_F64, 2, TU_SHAPE(2, 3));
  nb_tensor *col = tu_make(c, NB_I32, 2, TU_SHAPE(2, 1), TU_VALS(0, 2));
  tu_check(nb_gather(c, q, col, 1, 0), NB_F64, 3, TU_SHAPE(2, 2, 1), TU_VALS(0, 2, 3, 5), 0);
  /* bool params */
  nb_tensor *b = tu_make(c, NB_BOOL, 1, TU_SHAPE(3), TU_VALS(1, 0, 1));
  tu_check(nb_gather(c, b, ints(c, NB_I32, 4, TU_VALS(1, 2, 0, 1)), 0, 0), NB_BOOL, 1, TU_SHAPE(4), TU_VALS(0, 1, 1, 0),
           0);
  /* empty indices, and an empty slice with out-of-range indices (TF checks nothing then) */
  tu_check_shape(nb_gather(c, p, tu_make(c, NB_I32, 1, TU_SHAPE(0), NULL), 0, 0), NB_I32, 2, TU_SHAPE(0, 2));
  nb_tensor *e = tu_make(c, NB_F32, 2, TU_SHAPE(3, 0), NULL);
  tu_check_shape(nb_gather(c, e, ints(c, NB_I32, 1, TU_VALS(7)), 0, 0), NB_F32, 2, TU_SHAPE(1, 0));
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_gather_batch_dims(void **state) {
  nb_ctx *c = *state;
  nb_tensor *p = iota(c, NB_F32, 2, TU_SHAPE(2, 3));
  nb_tensor *ix = tu_make(c, NB_I64, 2, TU_SHAPE(2, 2), TU_VALS(2, 0, 1, 1));
  tu_check(nb_gather(c, p, ix, 1, 1), NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(2, 0, 4, 4), 0);
  tu_check(nb_gather(c, p, ix, 1, -1), NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(2, 0, 4, 4), 0);
  /* batch, outer and gathered dims together */
  nb_tensor *p3 = iota(c, NB_I32, 3, TU_SHAPE(2, 2, 3));
  nb_tensor *i3 = tu_make(c, NB_I32, 2, TU_SHAPE(2, 1), TU_VALS(2, 0));
  tu_check(nb_gather(c, p3, i3, 2, 1), NB_I32, 3, TU_SHAPE(2, 2, 1), TU_VALS(2, 5, 6, 9), 0);
  /* batch_dims == axis with inner dims */
  nb_tensor *i4 = tu_make(c, NB_I32, 2, TU_SHAPE(2, 3), TU_VALS(1, 1, 0, 0, 1, 0));
  tu_check(nb_gather(c, p3, i4, 1, 1), NB_I32, 3, TU_SHAPE(2, 3, 3),
           TU_VALS(3, 4, 5, 3, 4, 5, 0, 1, 2, 6, 7, 8, 9, 10, 11, 6, 7, 8), 0);
}

static void test_gather_large_threads(void **state) {
  nb_ctx *c = *state;
  enum { R = 1000, C = 64 };
  float *v = malloc(sizeof(float) * R * C);
  int64_t *ix = malloc(sizeof(int64_t) * R);
  for (int i = 0; i < R * C; i++) v[i] = (float)i;
  for (int i = 0; i < R; i++) ix[i] = (int64_t)i * 7 % R;
  nb_tensor *p = nb_tensor_from(c, NB_F32, 2, TU_SHAPE(R, C), v);
  nb_tensor *y = nb_gather(c, p, nb_tensor_from(c, NB_I64, 1, TU_SHAPE(R), ix), 0, 0);
  tu_check_shape(y, NB_F32, 2, TU_SHAPE(R, C));
  const float *o = nb_data(y);
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) assert_true(o[i * C + j] == (float)(ix[i] * C + j));
  /* one element per row, along axis 1 */
  nb_tensor *t = nb_gather(c, p, nb_scalar(c, NB_I32, 5), 1, 0);
  tu_check_shape(t, NB_F32, 1, TU_SHAPE(R));
  o = nb_data(t);
  for (int i = 0; i < R; i++) assert_true(o[i] == (float)(i * C + 5));
  free(v);
  free(ix);
}

static void test_gather_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *p = iota(c, NB_F32, 2, TU_SHAPE(5, 2));
  assert_null(nb_gather(c, p, ints(c, NB_I32, 3, TU_VALS(0, 7, 1)), 0, 0));
  tu_check_error(c, NB_INVALID, "GatherV2: indices[1] = 7 is not in [0, 5)", NULL);
  assert_null(nb_gather(c, p, ints(c, NB_I64, 2, TU_VALS(0, -1)), 0, 0));
  tu_check_error(c, NB_INVALID, "indices[1] = -1 is not in [0, 5)", NULL);
  assert_null(nb_gather(c, p, tu_make(c, NB_I32, 2, TU_SHAPE(2, 2), TU_VALS(0, 1, 2, 2)), 1, 0));
  tu_check_error(c, NB_INVALID, "indices[1,0] = 2 is not in [0, 2)", NULL);
  assert_null(nb_gather(c, p, nb_scalar(c, NB_I32, 9), 0, 0));
  tu_check_error(c, NB_INVALID, "indices = 9 is not in [0, 5)", NULL);
  assert_null(nb_gather(c, p, ints(c, NB_I32, 1, TU_VALS(0)), 2, 0));
  tu_check_error(c, NB_INVALID, "Expected axis in the range [-2, 2), but got 2", NULL);
  assert_null(nb_gather(c, p, ints(c, NB_I32, 1, TU_VALS(0)), -3, 0));
  tu_check_error(c, NB_INVALID, "but got -3", NULL);
  assert_null(nb_gather(c, nb_scalar(c, NB_F32, 1), ints(c, NB_I32, 1, TU_VALS(0)), 0, 0));
  tu_check_error(c, NB_INVALID, "params must be at least 1 dimensional", NULL);
  nb_tensor *ix2 = tu_make(c, NB_I32, 2, TU_SHAPE(5, 1), TU_VALS(0, 0, 0, 0, 0));
  assert_null(nb_gather(c, p, ix2, 1, 3));
  tu_check_error(c, NB_INVALID, "Expected batch_dims in the range [-2, 2], but got 3", NULL);
  assert_null(nb_gather(c, p, ix2, 0, 1));
  tu_check_error(c, NB_INVALID, "batch_dims (1) must be less than or equal to axis (0).", NULL);
  assert_null(nb_gather(c, p, ix2, 1, 2));
  tu_check_error(c, NB_INVALID, "batch_dims (2) must be less than rank(params) (2).", NULL);
  assert_null(nb_gather(c, p, tu_make(c, NB_I32, 2, TU_SHAPE(4, 1), NULL), 1, 1));
  tu_check_error(c, NB_INVALID, "params.shape[0]: 5 should be equal to indices.shape[0]: 4", NULL);
  assert_null(nb_gather(c, p, tu_make(c, NB_F32, 1, TU_SHAPE(1), NULL), 0, 0));
  tu_check_error(c, NB_DTYPE, "GatherV2: input 1 has dtype float32", NULL);
  const int64_t s8[8] = {1, 1, 1, 1, 1, 1, 1, 2};
  assert_null(nb_gather(c, iota(c, NB_F32, 8, s8), tu_make(c, NB_I32, 2, TU_SHAPE(1, 1), NULL), 0, 0));
  tu_check_error(c, NB_SHAPE, "output rank 9 exceeds the maximum rank 8", NULL);

  nb_tensor *out = NULL;
  nb_tensor *vec_axis[3] = {p, ints(c, NB_I32, 1, TU_VALS(0)), ints(c, NB_I32, 1, TU_VALS(0))};
  assert_int_equal(nb_op(c, "GatherV2", vec_axis, 3, NULL, 0, &out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "axis must be a scalar, got shape [1]", NULL);
  nb_tensor *f_axis[3] = {p, ints(c, NB_I32, 1, TU_VALS(0)), nb_scalar(c, NB_F32, 0)};
  assert_int_equal(nb_op(c, "GatherV2", f_axis, 3, NULL, 0, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "input 2 has dtype float32", NULL);
}

static void test_gather_nb_op(void **state) {
  nb_ctx *c = *state;
  nb_tensor *p = iota(c, NB_I64, 2, TU_SHAPE(2, 3));
  nb_tensor *in[3] = {p, tu_make(c, NB_I32, 2, TU_SHAPE(2, 1), TU_VALS(2, 1)), nb_scalar(c, NB_I64, 1)};
  nb_attr attrs[4] = {nb_attr_int("batch_dims", 1), nb_attr_type("Tparams", NB_I64), nb_attr_type("Tindices", NB_I32),
                      nb_attr_type("Taxis", NB_I64)};
  nb_tensor *out = NULL;
  assert_int_equal(nb_op(c, "GatherV2", in, 3, attrs, 4, &out, 1), NB_OK);
  tu_check(out, NB_I64, 2, TU_SHAPE(2, 1), TU_VALS(2, 4), 0);
  assert_int_equal(nb_op(c, "GatherV2", in, 3, NULL, 0, &out, 1), NB_OK);
  tu_check(out, NB_I64, 3, TU_SHAPE(2, 2, 1), TU_VALS(2, 1, 5, 4), 0);
  nb_attr bad[1] = {nb_attr_int("batch_dim", 1)};
  assert_int_equal(nb_op(c, "GatherV2", in, 3, bad, 1, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "GatherV2: unknown attr 'batch_dim'", NULL);
  assert_int_equal(nb_op(c, "GatherV2", in, 2, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "GatherV2: expected 3 inputs, got 2", NULL);
}

/* ---- UnsortedSegmentSum ------------------------------------------------------------------- */

static void test_segment_sum_values(void **state) {
  nb_ctx *c = *state;
  for (size_t t = 0; t < sizeof num_dtypes / sizeof *num_dtypes; t++) {
    nb_dtype dt = num_dtypes[t];
    nb_tensor *d = tu_make(c, dt, 1, TU_SHAPE(4), TU_VALS(1, 2, 3, 4));
    tu_check(nb_unsorted_segment_sum(c, d, ints(c, NB_I32, 4, TU_VALS(0, 1, 0, -1)), 3), dt, 1, TU_SHAPE(3),
             TU_VALS(4, 2, 0), 0);
  }
  /* rows: negative ids dropped */
  nb_tensor *d2 = tu_make(c, NB_I64, 2, TU_SHAPE(4, 2), TU_VALS(1, 2, 10, 20, 100, 200, 1000, 2000));
  tu_check(nb_unsorted_segment_sum(c, d2, ints(c, NB_I64, 4, TU_VALS(1, -1, 1, 0)), 2), NB_I64, 2, TU_SHAPE(2, 2),
           TU_VALS(1000, 2000, 101, 202), 0);
  /* 2-D ids */
  nb_tensor *d3 = iota(c, NB_F64, 3, TU_SHAPE(2, 2, 3));
  nb_tensor *ids = tu_make(c, NB_I32, 2, TU_SHAPE(2, 2), TU_VALS(0, 1, 1, -5));
  tu_check(nb_unsorted_segment_sum(c, d3, ids, 2), NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(0, 1, 2, 9, 11, 13), 0);
  /* ids the full shape of data */
  nb_tensor *d4 = tu_make(c, NB_I32, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4));
  tu_check(nb_unsorted_segment_sum(c, d4, tu_make(c, NB_I64, 2, TU_SHAPE(2, 2), TU_VALS(1, 1, 0, 2)), 3), NB_I32, 1,
           TU_SHAPE(3), TU_VALS(3, 3, 4), 0);
  /* a scalar id */
  nb_tensor *d5 = tu_make(c, NB_F32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3));
  tu_check(nb_unsorted_segment_sum(c, d5, nb_scalar(c, NB_I32, 1), 2), NB_F32, 2, TU_SHAPE(2, 3),
           TU_VALS(0, 0, 0, 1, 2, 3), 0);
  /* integer sums wrap */
  nb_tensor *d6 = tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(2147483647, 1));
  tu_check(nb_unsorted_segment_sum(c, d6, ints(c, NB_I32, 2, TU_VALS(0, 0)), 1), NB_I32, 1, TU_SHAPE(1),
           TU_VALS(-2147483648.0), 0);
}

static void test_segment_sum_empty(void **state) {
  nb_ctx *c = *state;
  nb_tensor *d = tu_make(c, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2));
  tu_check_shape(nb_unsorted_segment_sum(c, d, ints(c, NB_I32, 2, TU_VALS(-1, -2)), 0), NB_F32, 1, TU_SHAPE(0));
  assert_null(nb_unsorted_segment_sum(c, d, ints(c, NB_I32, 2, TU_VALS(-1, 0)), 0));
  tu_check_error(c, NB_INVALID, "segment_ids[1] = 0 is out of range [0, 0)", NULL);
  /* empty data: zeros, and ids are not checked (as in TF) */
  nb_tensor *e = tu_make(c, NB_F64, 2, TU_SHAPE(2, 0), NULL);
  tu_check_shape(nb_unsorted_segment_sum(c, e, ints(c, NB_I32, 2, TU_VALS(0, 9)), 3), NB_F64, 2, TU_SHAPE(3, 0));
  nb_tensor *z = tu_make(c, NB_I64, 1, TU_SHAPE(0), NULL);
  tu_check(nb_unsorted_segment_sum(c, z, tu_make(c, NB_I32, 1, TU_SHAPE(0), NULL), 2), NB_I64, 1, TU_SHAPE(2),
           TU_VALS(0, 0), 0);
}

static void test_segment_sum_large_threads(void **state) {
  nb_ctx *c = *state;
  enum { R = 64, C = 2048, S = 5 };
  float *v = malloc(sizeof(float) * R * C);
  int32_t ids[R];
  for (int i = 0; i < R * C; i++) v[i] = (float)(i % 97);
  for (int i = 0; i < R; i++) ids[i] = i % S;
  nb_tensor *d = nb_tensor_from(c, NB_F32, 2, TU_SHAPE(R, C), v);
  nb_tensor *y = nb_unsorted_segment_sum(c, d, nb_tensor_from(c, NB_I32, 1, TU_SHAPE(R), ids), S);
  tu_check_shape(y, NB_F32, 2, TU_SHAPE(S, C));
  const float *o = nb_data(y);
  for (int s = 0; s < S; s++)
    for (int j = 0; j < C; j++) {
      float want = 0;
      for (int i = s; i < R; i += S) want += v[i * C + j];
      assert_true(o[s * C + j] == want);
    }
  free(v);
}

static void test_segment_sum_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *d = iota(c, NB_F32, 2, TU_SHAPE(3, 2));
  assert_null(nb_unsorted_segment_sum(c, d, ints(c, NB_I32, 3, TU_VALS(0, 1, 3)), 3));
  tu_check_error(c, NB_INVALID, "UnsortedSegmentSum: segment_ids[2] = 3 is out of range [0, 3)", NULL);
  assert_null(nb_unsorted_segment_sum(c, d, tu_make(c, NB_I64, 2, TU_SHAPE(3, 2), TU_VALS(0, 0, 5, 0, 0, 0)), 2));
  tu_check_error(c, NB_INVALID, "segment_ids[1,0] = 5 is out of range [0, 2)", NULL);
  assert_null(nb_unsorted_segment_sum(c, d, ints(c, NB_I32, 2, TU_VALS(0, 1)), 3));
  tu_check_error(c, NB_INVALID, "data.shape = [3,2] does not start with segment_ids.shape = [2]", NULL);
  assert_null(nb_unsorted_segment_sum(c, d, tu_make(c, NB_I32, 3, TU_SHAPE(3, 2, 1), NULL), 3));
  tu_check_error(c, NB_INVALID, "does not start with segment_ids.shape = [3,2,1]", NULL);
  assert_null(nb_unsorted_segment_sum(c, d, ints(c, NB_I32, 3, TU_VALS(0, 1, 2)), -1));
  tu_check_error(c, NB_INVALID, "Input num_segments == -1 must not be negative.", NULL);
  assert_null(nb_unsorted_segment_sum(c, d, tu_make(c, NB_F32, 1, TU_SHAPE(3), NULL), 3));
  tu_check_error(c, NB_DTYPE, "UnsortedSegmentSum: input 1 has dtype float32", NULL);
  nb_tensor *b = tu_make(c, NB_BOOL, 1, TU_SHAPE(3), NULL);
  assert_null(nb_unsorted_segment_sum(c, b, ints(c, NB_I32, 3, TU_VALS(0, 1, 2)), 3));
  tu_check_error(c, NB_DTYPE, "input 0 has dtype bool", NULL);
  assert_null(nb_unsorted_segment_sum(c, d, ints(c, NB_I32, 3, TU_VALS(0, 1, 2)), (int64_t)1 << 62));
  tu_check_error(c, NB_SHAPE, "is too large", NULL);

  nb_tensor *out = NULL;
  nb_tensor *vec_num[3] = {d, ints(c, NB_I32, 3, TU_VALS(0, 1, 2)), ints(c, NB_I32, 1, TU_VALS(3))};
  assert_int_equal(nb_op(c, "UnsortedSegmentSum", vec_num, 3, NULL, 0, &out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "num_segments must be a scalar, got shape [1]", NULL);
}

static void test_segment_sum_nb_op(void **state) {
  nb_ctx *c = *state;
  nb_tensor *d = tu_make(c, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 4));
  nb_tensor *in[3] = {d, ints(c, NB_I64, 3, TU_VALS(1, 1, 0)), nb_scalar(c, NB_I32, 2)};
  nb_attr attrs[3] = {nb_attr_type("T", NB_F64), nb_attr_type("Tindices", NB_I64),
                      nb_attr_type("Tnumsegments", NB_I32)};
  nb_tensor *out = NULL;
  assert_int_equal(nb_op(c, "UnsortedSegmentSum", in, 3, attrs, 3, &out, 1), NB_OK);
  tu_check(out, NB_F64, 1, TU_SHAPE(2), TU_VALS(4, 3), 0);
  nb_attr bad[1] = {nb_attr_int("num_segments", 2)};
  assert_int_equal(nb_op(c, "UnsortedSegmentSum", in, 3, bad, 1, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "UnsortedSegmentSum: unknown attr 'num_segments'", NULL);
  attrs[0] = nb_attr_type("T", NB_F32);
  assert_int_equal(nb_op(c, "UnsortedSegmentSum", in, 3, attrs, 1, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "attr T=float32 does not match input 0", NULL);
  nb_tensor *two[2];
  assert_int_equal(nb_op(c, "UnsortedSegmentSum", in, 3, NULL, 0, two, 2), NB_INVALID);
  tu_check_error(c, NB_INVALID, "has 1 outputs, caller asked for 2", NULL);
}

/* A failed call leaves the context's status set: later calls do nothing. */
static void test_sticky_status(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_F32, 1, TU_SHAPE(3));
  assert_null(nb_slice(c, x, TU_SHAPE(9), TU_SHAPE(1), 1));
  assert_null(nb_gather(c, x, ints(c, NB_I32, 1, TU_VALS(0)), 0, 0));
  assert_null(nb_strided_slice(c, x, TU_SHAPE(0), TU_SHAPE(1), TU_SHAPE(1), 1, NULL));
  assert_null(nb_unsorted_segment_sum(c, x, ints(c, NB_I32, 3, TU_VALS(0, 0, 0)), 1));
  tu_check_error(c, NB_INVALID, "Expected begin[0] in [0, 3], but got 9", NULL);
  assert_null(nb_slice(NULL, x, TU_SHAPE(0), TU_SHAPE(1), 1));
  assert_null(nb_gather(NULL, x, x, 0, 0));
}

/* A graph refuses bad index dtypes, lengths, strides, masks and axes when it is built,
   though the sliced tensor's dims (or its rank) are unknown. */
static void test_graph_validation(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->c;
  nb_tensor *x = tu_unknown_dims(c, NB_F32, 2), *xr = tu_unknown_rank(c, NB_F32), *out[1];
  assert_null(nb_slice(c, x, TU_SHAPE(0, 0, 0), TU_SHAPE(1, 1, 1), 3));
  tu_check_error(c, NB_INVALID, "Slice (node 'Slice')", "1-D tensors of size 2, but got shapes [3] and [3]");
  nb_tensor *float_begin[3] = {x, tu_unknown_dims(c, NB_F32, 1), tu_unknown_dims(c, NB_F32, 1)};
  assert_int_equal(nb_op(c, "Slice", float_begin, 3, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Slice (node", "input 1 has dtype float32");
  static const int64_t zero[2] = {0, 0}, one[2] = {1, 1}, ones8[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  assert_null(nb_strided_slice(c, x, zero, one, (const int64_t[]){1, 0}, 2, NULL));
  tu_check_error(c, NB_INVALID, "StridedSlice (node 'StridedSlice'): strides[1] must be non-zero", NULL);
  assert_null(nb_strided_slice(c, x, zero, one, (const int64_t[]){-1, 1}, 2, &(nb_slice_masks){.shrink_axis_mask = 1}));
  tu_check_error(c, NB_INVALID, "StridedSlice (node", "only stride 1 allowed on non-range indexing.");
  assert_null(
      nb_strided_slice(c, tu_unknown_dims(c, NB_F32, 8), zero, one, one, 1, &(nb_slice_masks){.new_axis_mask = 1}));
  tu_check_error(c, NB_SHAPE, "StridedSlice (node", "output rank 9 exceeds the maximum rank 8");
  assert_null(nb_strided_slice(c, xr, zero, one, one, 2, &(nb_slice_masks){.ellipsis_mask = 3}));
  tu_check_error(c, NB_INVALID, "StridedSlice (node", "Multiple ellipses in slice spec not allowed");
  assert_null(nb_strided_slice(c, xr, ones8, ones8, ones8, 2, &(nb_slice_masks){.begin_mask = 1LL << 40}));
  tu_check_error(c, NB_INVALID, "StridedSlice (node", "attr begin_mask = 1099511627776 is out of range for an int32");
  assert_null(nb_strided_slice(c, tu_unknown_dims(c, NB_F32, 1), zero, one, one, 2, NULL));
  tu_check_error(c, NB_INVALID, "StridedSlice (node", "Index out of range using input dim 1; input has only 1 dims");
  nb_tensor *in[4] = {x, nb_const(c, nb_tensor_from(f->e, NB_I64, 1, TU_SHAPE(2), zero)),
                      nb_const(c, nb_tensor_from(f->e, NB_I64, 1, TU_SHAPE(2), one)), tu_unknown_dims(c, NB_I32, 1)};
  assert_int_equal(nb_op(c, "StridedSlice", in, 4, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "StridedSlice (node", "inputs 1 and 3 must have the same dtype, got int64 and int32");
  nb_attr index = nb_attr_type("Index", NB_I32);
  in[3] = in[2];
  assert_int_equal(nb_op(c, "StridedSlice", in, 4, &index, 1, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "StridedSlice (node", "attr Index=int32 does not match input 1 of dtype int64");
  nb_tensor *shape = nb_const(c, nb_tensor_from(f->e, NB_I64, 1, TU_SHAPE(2), (const int64_t[]){4, 5}));
  assert_null(nb_strided_slice_grad(c, shape, zero, one, (const int64_t[]){0, 1}, 2, x, NULL));
  tu_check_error(c, NB_INVALID, "StridedSliceGrad (node", "strides[0] must be non-zero");
  assert_null(nb_strided_slice_grad(c, x, zero, one, one, 2, x, NULL));
  tu_check_error(c, NB_DTYPE, "StridedSliceGrad (node", "input 0 has dtype float32");
  nb_tensor *axis2 = nb_scalar(c, NB_I32, 2);
  nb_tensor *gather_in[3] = {x, tu_unknown_dims(c, NB_I32, 1), axis2};
  assert_int_equal(nb_op(c, "GatherV2", gather_in, 3, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "GatherV2 (node 'GatherV2'): Expected axis in the range [-2, 2), but got 2", NULL);
  assert_null(nb_gather(c, tu_unknown_dims(c, NB_F32, 0), tu_unknown_rank(c, NB_I32), 0, 0));
  tu_check_error(c, NB_INVALID, "GatherV2 (node", "params must be at least 1 dimensional, got shape []");
  assert_null(nb_gather(c, x, tu_unknown_dims(c, NB_I32, 1), 1, 2));
  tu_check_error(c, NB_INVALID, "GatherV2 (node", "Expected batch_dims in the range [-1, 1], but got 2");
  assert_null(nb_gather(c, x, tu_unknown_dims(c, NB_I32, 2), 0, 1));
  tu_check_error(c, NB_INVALID, "GatherV2 (node", "batch_dims (1) must be less than or equal to axis (0).");
  nb_tensor *p2 = nb_placeholder(c, NB_F32, 2, TU_SHAPE(2, -1), "p2"),
            *i3 = nb_placeholder(c, NB_I32, 2, TU_SHAPE(3, -1), "i3");
  assert_null(nb_gather(c, p2, i3, 1, 1));
  tu_check_error(c, NB_INVALID, "GatherV2 (node", "params.shape[0]: 2 should be equal to indices.shape[0]: 3");
  assert_null(nb_gather(c, tu_unknown_dims(c, NB_F32, 8), tu_unknown_dims(c, NB_I64, 2), 0, 0));
  tu_check_error(c, NB_SHAPE, "GatherV2 (node", "output rank 9 exceeds the maximum rank 8");
  assert_null(nb_gather(c, x, tu_unknown_rank(c, NB_F32), 0, 0));
  tu_check_error(c, NB_DTYPE, "GatherV2 (node", "input 1 has dtype float32");
  nb_tensor *d3 = nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 3), "d3"),
            *ids4 = nb_placeholder(c, NB_I32, 2, TU_SHAPE(-1, 4), "ids4");
  assert_null(nb_unsorted_segment_sum(c, d3, ids4, 5));
  tu_check_error(c, NB_INVALID, "UnsortedSegmentSum (node",
                 "data.shape = [-1,3] does not start with segment_ids.shape = [-1,4]");
  assert_null(nb_unsorted_segment_sum(c, xr, tu_unknown_dims(c, NB_I32, 1), -1));
  tu_check_error(c, NB_INVALID, "UnsortedSegmentSum (node", "Input num_segments == -1 must not be negative.");
  assert_null(nb_unsorted_segment_sum(c, tu_unknown_rank(c, NB_BOOL), xr, 2));
  tu_check_error(c, NB_DTYPE, "UnsortedSegmentSum (node", "input 0 has dtype bool");
  /* valid ones build */
  tu_check_shape(nb_unsorted_segment_sum(c, d3, tu_unknown_dims(c, NB_I32, 1), 5), NB_F32, 2, TU_SHAPE(5, 3));
  assert_non_null(nb_strided_slice(c, xr, zero, one, one, 2, NULL));
  assert_int_equal(nb_status(c), NB_OK);
}

/* The _t forms take begin, end, strides, axis and num_segments as int32 or int64 tensors;
   the array forms run through nb_strided_slice_grad_t, nb_gather_t and
   nb_unsorted_segment_sum_t, so their tests cover those. */
static void test_tensor_arguments(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = iota(c, NB_F32, 2, TU_SHAPE(3, 4));
  nb_tensor *begin = tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(1, 1));
  tu_check(nb_slice_t(c, x, begin, tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(2, -1))), NB_F32, 2, TU_SHAPE(2, 3),
           TU_VALS(5, 6, 7, 9, 10, 11), 0);
  nb_tensor *b = tu_make(c, NB_I64, 1, TU_SHAPE(2), TU_VALS(0, 3));
  nb_tensor *e = tu_make(c, NB_I64, 1, TU_SHAPE(2), TU_VALS(3, 0));
  nb_tensor *s = tu_make(c, NB_I64, 1, TU_SHAPE(2), TU_VALS(2, -2));
  tu_check(nb_strided_slice_t(c, x, b, e, s, NULL), NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(3, 1, 11, 9), 0);
  tu_check(nb_strided_slice_t(c, x, b, e, s, &MASKS(.shrink_axis_mask = 1)), NB_F32, 1, TU_SHAPE(2), TU_VALS(3, 1), 0);
  nb_tensor *shape = tu_make(c, NB_I64, 1, TU_SHAPE(2), TU_VALS(3, 4));
  nb_tensor *dy = tu_make(c, NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4));
  tu_check(nb_strided_slice_grad_t(c, shape, b, e, s, dy, NULL), NB_F32, 2, TU_SHAPE(3, 4),
           TU_VALS(0, 2, 0, 1, 0, 0, 0, 0, 0, 4, 0, 3), 0);
  nb_tensor *ids = tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(2, 0));
  tu_check(nb_gather_t(c, x, ids, nb_scalar(c, NB_I64, 1), 0), NB_F32, 2, TU_SHAPE(3, 2), TU_VALS(2, 0, 6, 4, 10, 8),
           0);
  nb_tensor *seg = tu_make(c, NB_I64, 1, TU_SHAPE(3), TU_VALS(1, -1, 1));
  tu_check(nb_unsorted_segment_sum_t(c, x, seg, nb_scalar(c, NB_I32, 2)), NB_F32, 2, TU_SHAPE(2, 4),
           TU_VALS(0, 0, 0, 0, 8, 10, 12, 14), 0);
  assert_int_equal(nb_status(c), NB_OK);
  assert_null(nb_slice_t(c, x, begin, NULL));
  tu_check_error(c, NB_INVALID, "Slice: input 2 is NULL", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_graph_validation, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_slice_values_all_dtypes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_slice_rank3_and_rank0, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_slice_empty, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_slice_large_threads, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_slice_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_slice_nb_op, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_basic_1d, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_2d, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_rank3_combined_masks, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_all_dtypes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_rank0_and_rank8, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_large_threads, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_nb_op, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_grad_1d_all_dtypes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_grad_2d_negative_strides, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_grad_shrink_new_axis, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_grad_rank0_empty_rank8, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_grad_large_threads, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_grad_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_strided_grad_nb_op, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gather_axes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gather_index_shapes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gather_batch_dims, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gather_large_threads, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gather_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gather_nb_op, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_segment_sum_values, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_segment_sum_empty, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_segment_sum_large_threads, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_segment_sum_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_segment_sum_nb_op, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_tensor_arguments, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_sticky_status, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
