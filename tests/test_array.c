/* Array (shape) family: values on every dtype, views, empty and rank-0/rank-8 tensors,
   large tensors against index formulas, every error path, and the generic nb_op entry. */
#include "graphutil.h"

#include <stdlib.h>

#define F32 NB_F32
#define F64 NB_F64
#define I32 NB_I32
#define I64 NB_I64
#define BOOL NB_BOOL

/* A tensor of n elements holding 0, 1, 2, ... (bool: i % 2), for sizes tu_make can't hold. */
static nb_tensor *iota(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  size_t esz = nb_dtype_size(t);
  unsigned char *buf = malloc((size_t)n * esz + 1);
  assert_non_null(buf);
  for (int64_t i = 0; i < n; i++) {
    switch (t) {
      case F32: ((float *)buf)[i] = (float)i; break;
      case F64: ((double *)buf)[i] = (double)i; break;
      case I32: ((int32_t *)buf)[i] = (int32_t)i; break;
      case I64: ((int64_t *)buf)[i] = i; break;
      case BOOL: buf[i] = (unsigned char)(i % 2); break;
    }
  }
  nb_tensor *x = nb_tensor_from(c, t, rank, shape, buf);
  free(buf);
  return x;
}

/* tu_check with want mapped to dtype t (bool keeps only nonzero-ness). */
static void check_t(const nb_tensor *y, nb_dtype t, int rank, const int64_t *shape, const double *want) {
  double buf[64];
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  assert_true(n <= 64);
  for (int64_t i = 0; i < n; i++) buf[i] = t == BOOL ? want[i] != 0 : want[i];
  tu_check(y, t, rank, shape, buf, 0);
}

static void check_ok(nb_ctx *c) {
  if (nb_status(c) != NB_OK) fail_msg("unexpected error: %s", nb_error(c));
}

/* ---- Reshape, ExpandDims, Squeeze ---------------------------------------------------- */

static void test_reshape(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 3, 4, 0, 6));
    check_t(nb_reshape(c, x, TU_SHAPE(3, 2), 2), t, 2, TU_SHAPE(3, 2), TU_VALS(1, 0, 3, 4, 0, 6));
    check_t(nb_reshape(c, x, TU_SHAPE(-1), 1), t, 1, TU_SHAPE(6), TU_VALS(1, 0, 3, 4, 0, 6));
    check_t(nb_reshape(c, x, TU_SHAPE(1, -1, 2), 3), t, 3, TU_SHAPE(1, 3, 2), TU_VALS(1, 0, 3, 4, 0, 6));
  }
  /* rank 0 both ways */
  nb_tensor *s = nb_scalar(c, I64, 7);
  nb_tensor *s1 = nb_reshape(c, s, TU_SHAPE(1, 1), 2);
  tu_check(s1, I64, 2, TU_SHAPE(1, 1), TU_VALS(7), 0);
  tu_check(nb_reshape(c, s1, NULL, 0), I64, 0, NULL, TU_VALS(7), 0);
  tu_check(nb_reshape(c, s, TU_SHAPE(-1), 1), I64, 1, TU_SHAPE(1), TU_VALS(7), 0);
  /* empty: -1 next to a zero is inferred from the nonzero dims, as in TF */
  nb_tensor *e = tu_make(c, F32, 2, TU_SHAPE(0, 3), NULL);
  tu_check_shape(nb_reshape(c, e, TU_SHAPE(-1, 3), 2), F32, 2, TU_SHAPE(0, 3));
  tu_check_shape(nb_reshape(c, e, TU_SHAPE(3, -1, 0), 3), F32, 3, TU_SHAPE(3, 1, 0));
  tu_check_shape(nb_reshape(c, e, TU_SHAPE(0, -1), 2), F32, 2, TU_SHAPE(0, 3));
  tu_check_shape(nb_reshape(c, e, TU_SHAPE(5, 0), 2), F32, 2, TU_SHAPE(5, 0));
  /* zeros on both sides: no divisibility asked, -1 = (nonzero input dims) / product rounded down */
  tu_check_shape(nb_reshape(c, e, TU_SHAPE(0, -1, 2), 3), F32, 3, TU_SHAPE(0, 1, 2));
  tu_check_shape(nb_reshape(c, e, TU_SHAPE(0, -1, 4), 3), F32, 3, TU_SHAPE(0, 0, 4));
  tu_check_shape(nb_reshape(c, e, TU_SHAPE(-1, 0), 2), F32, 2, TU_SHAPE(3, 0));
  tu_check_shape(nb_reshape(c, e, TU_SHAPE(2, -1, 0), 3), F32, 3, TU_SHAPE(2, 1, 0));
  tu_check_shape(nb_reshape(c, e, TU_SHAPE(-1, 2), 2), F32, 2, TU_SHAPE(0, 2));
  nb_tensor *e6 = tu_make(c, I32, 3, TU_SHAPE(2, 0, 6), NULL);
  tu_check_shape(nb_reshape(c, e6, TU_SHAPE(0, -1, 2), 3), I32, 3, TU_SHAPE(0, 6, 2));
  tu_check_shape(nb_reshape(c, e6, TU_SHAPE(5, 0, -1), 3), I32, 3, TU_SHAPE(5, 0, 2));
  nb_tensor *in[2] = {e, tu_make(c, I32, 1, TU_SHAPE(3), TU_VALS(0, -1, 2))}, *out[1];
  assert_int_equal(nb_op(c, "Reshape", in, 2, NULL, 0, out, 1), NB_OK);
  tu_check_shape(out[0], F32, 3, TU_SHAPE(0, 1, 2));
  /* rank 8 */
  nb_tensor *x8 = iota(c, I32, 1, TU_SHAPE(256));
  nb_tensor *y8 = nb_reshape(c, x8, TU_SHAPE(2, 2, 2, 2, 2, 2, 2, -1), 8);
  tu_check_shape(y8, I32, 8, TU_SHAPE(2, 2, 2, 2, 2, 2, 2, 2));
  assert_int_equal(nb_item(y8, 255), 255);
  check_ok(c);
}

static void test_views(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
  nb_tensor *r = nb_reshape(c, x, TU_SHAPE(6), 1);
  nb_tensor *e = nb_expand_dims(c, x, 1);
  nb_tensor *q = nb_squeeze(c, e, NULL, 0);
  assert_ptr_equal(nb_data(r), nb_data(x));
  assert_ptr_equal(nb_data(e), nb_data(x));
  assert_ptr_equal(nb_data(q), nb_data(x));
  /* the views outlive the handle they came from: buffers are reference counted */
  nb_tensor_free(x);
  tu_check(r, F64, 1, TU_SHAPE(6), TU_VALS(1, 2, 3, 4, 5, 6), 0);
  tu_check(e, F64, 3, TU_SHAPE(2, 1, 3), TU_VALS(1, 2, 3, 4, 5, 6), 0);
  nb_tensor_free(r);
  nb_tensor_free(e);
  tu_check(q, F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6), 0);
  check_ok(c);
}

static void test_reshape_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F32, 2, TU_SHAPE(2, 3), NULL);
  assert_null(nb_reshape(c, x, TU_SHAPE(2, 4), 2));
  tu_check_error(c, NB_SHAPE, "Reshape: Input to reshape is a tensor with 6 values, but the requested shape has 8",
                 NULL);
  assert_null(nb_reshape(c, x, TU_SHAPE(-1, -1), 2));
  tu_check_error(c, NB_INVALID, "Reshape: Only one input size may be -1, not both 0 and 1", NULL);
  assert_null(nb_reshape(c, x, TU_SHAPE(-1, 4), 2));
  tu_check_error(c, NB_SHAPE, "6 values", "requires a multiple of 4");
  assert_null(nb_reshape(c, x, TU_SHAPE(-2, 3), 2));
  tu_check_error(c, NB_INVALID, "Size 0 must be non-negative, not -2", NULL);
  assert_null(nb_reshape(c, x, TU_SHAPE(0, -1), 2)); /* [0,6] holds 0 values, not 6 */
  tu_check_error(c, NB_SHAPE, "requested shape has 0", NULL);
  /* the input has no zero dim, so divisibility still counts with a zero in the request */
  assert_null(nb_reshape(c, x, TU_SHAPE(0, -1, 4), 3));
  tu_check_error(
      c, NB_SHAPE,
      "Reshape: Input to reshape is a tensor with 6 values, but the requested shape requires a multiple of 4", NULL);
  /* messages give an empty input's real element count, 0 */
  nb_tensor *e = tu_make(c, F32, 2, TU_SHAPE(0, 3), NULL);
  assert_null(nb_reshape(c, e, TU_SHAPE(2, 3), 2));
  tu_check_error(c, NB_SHAPE, "Input to reshape is a tensor with 0 values, but the requested shape has 6", NULL);
  assert_null(nb_reshape(c, e, TU_SHAPE(-1, 0, -1), 3));
  tu_check_error(c, NB_INVALID, "Only one input size may be -1, not both 0 and 2", NULL);
  assert_null(nb_reshape(c, x, TU_SHAPE(1, 1, 1, 1, 1, 1, 1, 2, 3), 9));
  tu_check_error(c, NB_SHAPE, "Reshape", "9 values");
  assert_null(nb_reshape(c, x, TU_SHAPE(INT64_MAX, 4), 2));
  tu_check_error(c, NB_SHAPE, "too large", NULL);
  assert_null(nb_reshape(c, x, NULL, 2));
  tu_check_error(c, NB_INVALID, "Reshape: shape is NULL", NULL);
  /* a float or 2-D shape tensor through the generic entry */
  nb_tensor *in[2] = {x, tu_make(c, F32, 1, TU_SHAPE(2), TU_VALS(3, 2))};
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "Reshape", in, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Reshape: input 1 has dtype float32", NULL);
  in[1] = tu_make(c, I32, 2, TU_SHAPE(1, 2), TU_VALS(3, 2));
  assert_int_equal(nb_op(c, "Reshape", in, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "sizes input must be 1-D, not [1,2]", NULL);
  /* TF accepts a scalar sizes input as a one-element shape */
  in[1] = tu_make(c, I64, 0, NULL, TU_VALS(6));
  assert_int_equal(nb_op(c, "Reshape", in, 2, NULL, 0, out, 1), NB_OK);
  tu_check_shape(out[0], F32, 1, TU_SHAPE(6));
  assert_int_equal(nb_op(c, "Reshape", in, 1, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Reshape: expected 2 inputs, got 1", NULL);
}

static void test_expand_dims(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 1, 1, 0, 1));
    tu_check(nb_expand_dims(c, x, 0), t, 3, TU_SHAPE(1, 2, 3), TU_VALS(1, 0, 1, 1, 0, 1), 0);
    tu_check_shape(nb_expand_dims(c, x, 2), t, 3, TU_SHAPE(2, 3, 1));
    tu_check_shape(nb_expand_dims(c, x, -1), t, 3, TU_SHAPE(2, 3, 1));
    tu_check_shape(nb_expand_dims(c, x, -3), t, 3, TU_SHAPE(1, 2, 3));
  }
  tu_check(nb_expand_dims(c, nb_scalar(c, F32, 2.5), 0), F32, 1, TU_SHAPE(1), TU_VALS(2.5), 0);
  tu_check_shape(nb_expand_dims(c, tu_make(c, I32, 1, TU_SHAPE(0), NULL), 1), I32, 2, TU_SHAPE(0, 1));
  nb_tensor *x = tu_make(c, F32, 2, TU_SHAPE(2, 3), NULL);
  assert_null(nb_expand_dims(c, x, 3));
  tu_check_error(c, NB_INVALID, "ExpandDims: Tried to expand dim index 3 for tensor with 2 dimensions.", NULL);
  assert_null(nb_expand_dims(c, x, -4));
  tu_check_error(c, NB_INVALID, "dim index -4", NULL);
  assert_null(nb_expand_dims(c, tu_make(c, F32, 8, TU_SHAPE(1, 1, 1, 1, 1, 1, 1, 1), NULL), 0));
  tu_check_error(c, NB_SHAPE, "ExpandDims", "output rank 9 exceeds the maximum rank 8");
  nb_tensor *in[2] = {x, tu_make(c, I64, 1, TU_SHAPE(1), TU_VALS(-1))};
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "ExpandDims", in, 2, NULL, 0, out, 1), NB_OK);
  tu_check_shape(out[0], F32, 3, TU_SHAPE(2, 3, 1));
  in[1] = tu_make(c, I32, 1, TU_SHAPE(2), TU_VALS(0, 1));
  assert_int_equal(nb_op(c, "ExpandDims", in, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "'dim' must be a tensor with a single value", NULL);
  in[1] = tu_make(c, F64, 0, NULL, TU_VALS(0));
  assert_int_equal(nb_op(c, "ExpandDims", in, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "ExpandDims: input 1 has dtype float64", NULL);
}

static void test_squeeze(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *x = tu_make(c, t, 4, TU_SHAPE(1, 3, 1, 1), TU_VALS(1, 0, 1));
    tu_check(nb_squeeze(c, x, NULL, 0), t, 1, TU_SHAPE(3), TU_VALS(1, 0, 1), 0);
    tu_check_shape(nb_squeeze(c, x, (const int[]){0, -1}, 2), t, 2, TU_SHAPE(3, 1));
    tu_check_shape(nb_squeeze(c, x, (const int[]){2, 2}, 2), t, 3, TU_SHAPE(1, 3, 1));
  }
  tu_check(nb_squeeze(c, tu_make(c, I64, 2, TU_SHAPE(1, 1), TU_VALS(4)), NULL, 0), I64, 0, NULL, TU_VALS(4), 0);
  tu_check(nb_squeeze(c, nb_scalar(c, F32, 3), NULL, 0), F32, 0, NULL, TU_VALS(3), 0);
  tu_check_shape(nb_squeeze(c, tu_make(c, F32, 3, TU_SHAPE(0, 1, 2), NULL), NULL, 0), F32, 2, TU_SHAPE(0, 2));
  nb_tensor *x = tu_make(c, F32, 3, TU_SHAPE(1, 3, 1), NULL);
  assert_null(nb_squeeze(c, x, (const int[]){1}, 1));
  tu_check_error(c, NB_SHAPE, "Squeeze: Can not squeeze dim[1], expected a dimension of 1, got 3", NULL);
  assert_null(nb_squeeze(c, x, (const int[]){-2}, 1));
  tu_check_error(c, NB_SHAPE, "dim[1]", NULL);
  assert_null(nb_squeeze(c, x, (const int[]){3}, 1));
  tu_check_error(c, NB_INVALID, "Squeeze: Tried to squeeze dim index 3 for tensor with 3 dimensions.", NULL);
  assert_null(nb_squeeze(c, x, NULL, 2));
  tu_check_error(c, NB_INVALID, "Squeeze: axes is NULL", NULL);
  /* generic entry with TF's attr name */
  const int64_t dims[1] = {-1};
  nb_attr a = nb_attr_ints("squeeze_dims", dims, 1);
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "Squeeze", &x, 1, &a, 1, out, 1), NB_OK);
  tu_check_shape(out[0], F32, 2, TU_SHAPE(1, 3));
  nb_attr bad = nb_attr_ints("axis", dims, 1);
  assert_int_equal(nb_op(c, "Squeeze", &x, 1, &bad, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Squeeze: unknown attr 'axis'", NULL);
  nb_attr kind = nb_attr_int("squeeze_dims", 0);
  assert_int_equal(nb_op(c, "Squeeze", &x, 1, &kind, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "wrong kind", NULL);
}

/* ---- Transpose ------------------------------------------------------------------------- */

/* Checks y = transpose(x, perm) where x holds 0, 1, 2, ... (by index formula). */
static void check_transpose_iota(const nb_tensor *x, const nb_tensor *y, const int *perm) {
  int r = nb_rank(x);
  const int64_t *xs = nb_shape(x), *ys = nb_shape(y);
  int64_t xst[8], idx[8] = {0};
  int64_t s = 1;
  for (int i = r - 1; i >= 0; i--) {
    xst[i] = s;
    s *= xs[i];
  }
  for (int i = 0; i < r; i++) assert_int_equal(ys[i], xs[perm[i]]);
  for (int64_t o = 0; o < nb_num_elements(y); o++) {
    int64_t src = 0;
    for (int i = 0; i < r; i++) src += idx[i] * xst[perm[i]];
    double want = nb_dtype_of(x) == BOOL ? (double)(src % 2) : (double)src;
    if (nb_item(y, o) != want) fail_msg("element %lld: got %g, want %g", (long long)o, nb_item(y, o), want);
    for (int i = r - 1; i >= 0 && ++idx[i] == ys[i]; i--) idx[i] = 0;
  }
}

static void test_transpose_values(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 3, 4, 0, 6));
    check_t(nb_transpose(c, x, (const int[]){1, 0}, 2), t, 2, TU_SHAPE(3, 2), TU_VALS(1, 4, 0, 0, 3, 6));
    check_t(nb_transpose(c, x, (const int[]){0, 1}, 2), t, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 3, 4, 0, 6));
  }
  nb_tensor *x3 = tu_make(c, I64, 3, TU_SHAPE(2, 2, 3), TU_VALS(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
  tu_check(nb_transpose(c, x3, (const int[]){2, 0, 1}, 3), I64, 3, TU_SHAPE(3, 2, 2),
           TU_VALS(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11), 0);
  tu_check(nb_transpose(c, x3, (const int[]){1, 0, 2}, 3), I64, 3, TU_SHAPE(2, 2, 3),
           TU_VALS(0, 1, 2, 6, 7, 8, 3, 4, 5, 9, 10, 11), 0);
  tu_check(nb_transpose(c, nb_scalar(c, F64, 5), NULL, 0), F64, 0, NULL, TU_VALS(5), 0);
  tu_check_shape(nb_transpose(c, tu_make(c, F32, 2, TU_SHAPE(0, 4), NULL), (const int[]){1, 0}, 2), F32, 2,
                 TU_SHAPE(4, 0));
  /* size-1 dims between moved dims */
  nb_tensor *x4 = iota(c, F32, 4, TU_SHAPE(3, 1, 5, 1));
  const int p4[4] = {3, 2, 1, 0};
  check_transpose_iota(x4, nb_transpose(c, x4, p4, 4), p4);
  check_ok(c);
}

static void test_transpose_rank8_and_large(void **state) {
  nb_ctx *c = *state;
  const int rev[8] = {7, 6, 5, 4, 3, 2, 1, 0};
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *x = iota(c, t, 8, TU_SHAPE(2, 3, 2, 1, 3, 2, 2, 3));
    check_transpose_iota(x, nb_transpose(c, x, rev, 8), rev);
  }
  const int mix[8] = {1, 0, 3, 2, 7, 4, 6, 5};
  nb_tensor *x8 = iota(c, I32, 8, TU_SHAPE(2, 3, 4, 2, 3, 2, 5, 3));
  check_transpose_iota(x8, nb_transpose(c, x8, mix, 8), mix);
  /* large 2-D (cache-blocked, split across threads) and batched */
  const int t2[2] = {1, 0};
  nb_tensor *big = iota(c, F32, 2, TU_SHAPE(1000, 777));
  nb_tensor *bt = nb_transpose(c, big, t2, 2);
  tu_check_shape(bt, F32, 2, TU_SHAPE(777, 1000));
  const float *bd = nb_data(bt);
  for (int64_t i = 0; i < 777; i++)
    for (int64_t j = 0; j < 1000; j++)
      if (bd[i * 1000 + j] != (float)(j * 777 + i))
        fail_msg("big[%lld][%lld] = %g", (long long)i, (long long)j, bd[i * 1000 + j]);
  const int t3[3] = {0, 2, 1};
  nb_tensor *batch = iota(c, I64, 3, TU_SHAPE(5, 65, 129));
  check_transpose_iota(batch, nb_transpose(c, batch, t3, 3), t3);
  const int t3b[3] = {2, 1, 0};
  nb_tensor *bb = iota(c, F64, 3, TU_SHAPE(70, 3, 200));
  check_transpose_iota(bb, nb_transpose(c, bb, t3b, 3), t3b);
  nb_tensor *bools = iota(c, BOOL, 2, TU_SHAPE(300, 301));
  check_transpose_iota(bools, nb_transpose(c, bools, t2, 2), t2);
  check_ok(c);
}

static void test_transpose_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F32, 2, TU_SHAPE(2, 3), NULL);
  assert_null(nb_transpose(c, x, (const int[]){0, 1, 2}, 3));
  tu_check_error(c, NB_INVALID, "Transpose: transpose expects a vector of size 2. But input(1) is a vector of size 3",
                 NULL);
  assert_null(nb_transpose(c, x, (const int[]){0, 0}, 2));
  tu_check_error(c, NB_INVALID, "1 is missing from perm [0,0]", NULL);
  assert_null(nb_transpose(c, x, (const int[]){0, 2}, 2));
  tu_check_error(c, NB_INVALID, "2 is out of range [0 .. 2)", NULL);
  assert_null(nb_transpose(c, x, (const int[]){-1, 0}, 2));
  tu_check_error(c, NB_INVALID, "-1 is out of range", NULL);
  assert_null(nb_transpose(c, x, NULL, 2));
  tu_check_error(c, NB_INVALID, "Transpose: perm is NULL", NULL);
  nb_tensor *in[2] = {x, tu_make(c, F32, 1, TU_SHAPE(2), TU_VALS(1, 0))};
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "Transpose", in, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Transpose: input 1", "float32");
  in[1] = tu_make(c, I32, 2, TU_SHAPE(1, 2), TU_VALS(1, 0));
  assert_int_equal(nb_op(c, "Transpose", in, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "perm must be rank 1", NULL);
  in[1] = tu_make(c, I64, 1, TU_SHAPE(2), TU_VALS(1, 0));
  nb_attr tperm = nb_attr_type("Tperm", I64);
  assert_int_equal(nb_op(c, "Transpose", in, 2, &tperm, 1, out, 1), NB_OK);
  tu_check_shape(out[0], F32, 2, TU_SHAPE(3, 2));
}

/* ---- BroadcastTo, Tile, Pad --------------------------------------------------------------- */

static void test_broadcast_to(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *row = tu_make(c, t, 1, TU_SHAPE(3), TU_VALS(1, 0, 2));
    check_t(nb_broadcast_to(c, row, TU_SHAPE(2, 3), 2), t, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 2, 1, 0, 2));
    nb_tensor *col = tu_make(c, t, 2, TU_SHAPE(2, 1), TU_VALS(1, 3));
    check_t(nb_broadcast_to(c, col, TU_SHAPE(2, 3), 2), t, 2, TU_SHAPE(2, 3), TU_VALS(1, 1, 1, 3, 3, 3));
    check_t(nb_broadcast_to(c, col, TU_SHAPE(2, 2, 2), 3), t, 3, TU_SHAPE(2, 2, 2), TU_VALS(1, 1, 3, 3, 1, 1, 3, 3));
  }
  tu_check(nb_broadcast_to(c, nb_scalar(c, I32, 4), TU_SHAPE(2, 2), 2), I32, 2, TU_SHAPE(2, 2), TU_VALS(4, 4, 4, 4), 0);
  tu_check(nb_broadcast_to(c, nb_scalar(c, I32, 4), NULL, 0), I32, 0, NULL, TU_VALS(4), 0);
  tu_check_shape(nb_broadcast_to(c, tu_make(c, F32, 2, TU_SHAPE(1, 3), NULL), TU_SHAPE(0, 3), 2), F32, 2,
                 TU_SHAPE(0, 3));
  /* large, against a formula: x[i][0][k] repeated along dim 1 */
  nb_tensor *x = iota(c, F64, 3, TU_SHAPE(40, 1, 30));
  nb_tensor *y = nb_broadcast_to(c, x, TU_SHAPE(40, 50, 30), 3);
  const double *yd = nb_data(y);
  for (int64_t i = 0; i < 40 * 50 * 30; i++) {
    int64_t a = i / 1500, k = i % 30;
    if (yd[i] != (double)(a * 30 + k)) fail_msg("element %lld: %g", (long long)i, yd[i]);
  }
  nb_tensor *z = nb_broadcast_to(c, iota(c, I32, 2, TU_SHAPE(300, 1)), TU_SHAPE(300, 200), 2);
  const int32_t *zd = nb_data(z);
  for (int64_t i = 0; i < 300 * 200; i++)
    if (zd[i] != i / 200) fail_msg("element %lld: %d", (long long)i, zd[i]);
  check_ok(c);
  nb_tensor *m = tu_make(c, F32, 2, TU_SHAPE(2, 3), NULL);
  assert_null(nb_broadcast_to(c, m, TU_SHAPE(4, 3), 2));
  tu_check_error(c, NB_SHAPE, "BroadcastTo: Unable to broadcast tensor of shape [2,3] to tensor of shape [4,3]", NULL);
  assert_null(nb_broadcast_to(c, m, TU_SHAPE(3), 1));
  tu_check_error(c, NB_SHAPE, "Rank of input (2) must be no greater than rank of output shape (1)", "[2,3] vs. [3]");
  assert_null(nb_broadcast_to(c, m, TU_SHAPE(-1, 3), 2));
  tu_check_error(c, NB_INVALID, "Dimension -1 must be >= 0", NULL);
  nb_tensor *in[2] = {m, tu_make(c, F32, 1, TU_SHAPE(2), TU_VALS(2, 3))};
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "BroadcastTo", in, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "BroadcastTo: input 1", NULL);
  in[1] = tu_make(c, I32, 0, NULL, TU_VALS(3));
  assert_int_equal(nb_op(c, "BroadcastTo", in, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "shape must be 1-D, got shape []", NULL);
}

static void test_tile(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 2), TU_VALS(1, 0, 0, 1));
    tu_check(nb_tile(c, x, TU_SHAPE(2, 3), 2), t, 2, TU_SHAPE(4, 6),
             TU_VALS(1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0, 1, 0, 0, 1, 0, 1, 0, 1), 0);
    tu_check(nb_tile(c, x, TU_SHAPE(1, 1), 2), t, 2, TU_SHAPE(2, 2), TU_VALS(1, 0, 0, 1), 0);
  }
  nb_tensor *v = tu_make(c, I64, 2, TU_SHAPE(1, 3), TU_VALS(1, 2, 3));
  tu_check(nb_tile(c, v, TU_SHAPE(2, 1), 2), I64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 1, 2, 3), 0);
  nb_tensor *col = tu_make(c, F32, 2, TU_SHAPE(2, 1), TU_VALS(7, 8));
  tu_check(nb_tile(c, col, TU_SHAPE(1, 3), 2), F32, 2, TU_SHAPE(2, 3), TU_VALS(7, 7, 7, 8, 8, 8), 0);
  tu_check(nb_tile(c, nb_scalar(c, F64, 2), NULL, 0), F64, 0, NULL, TU_VALS(2), 0);
  tu_check_shape(nb_tile(c, v, TU_SHAPE(0, 2), 2), I64, 2, TU_SHAPE(0, 6));
  tu_check_shape(nb_tile(c, tu_make(c, F32, 2, TU_SHAPE(0, 2), NULL), TU_SHAPE(3, 2), 2), F32, 2, TU_SHAPE(0, 4));
  /* large, against a formula */
  nb_tensor *x = iota(c, I32, 3, TU_SHAPE(3, 5, 7));
  nb_tensor *y = nb_tile(c, x, TU_SHAPE(20, 1, 60), 3);
  tu_check_shape(y, I32, 3, TU_SHAPE(60, 5, 420));
  const int32_t *yd = nb_data(y);
  for (int64_t i = 0; i < 60; i++)
    for (int64_t j = 0; j < 5; j++)
      for (int64_t k = 0; k < 420; k++)
        if (yd[(i * 5 + j) * 420 + k] != (i % 3) * 35 + j * 7 + k % 7)
          fail_msg("y[%lld][%lld][%lld]", (long long)i, (long long)j, (long long)k);
  check_ok(c);
  assert_null(nb_tile(c, v, TU_SHAPE(2), 1));
  tu_check_error(c, NB_INVALID, "Tile: Expected multiples argument to be a vector of length 2 but got length 1", NULL);
  assert_null(nb_tile(c, v, TU_SHAPE(1, -1), 2));
  tu_check_error(c, NB_INVALID, "Expected multiples[1] >= 0, but got -1", NULL);
  assert_null(nb_tile(c, v, TU_SHAPE(INT64_MAX, 1), 2));
  tu_check_error(c, NB_SHAPE, "too large", NULL);
  nb_tensor *in[2] = {v, tu_make(c, F32, 1, TU_SHAPE(2), TU_VALS(1, 1))};
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "Tile", in, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Tile: input 1", NULL);
  in[1] = tu_make(c, I32, 2, TU_SHAPE(1, 2), TU_VALS(1, 1));
  assert_int_equal(nb_op(c, "Tile", in, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "Expected multiples to be 1-D", NULL);
}

static void test_pad(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 2), TU_VALS(1, 1, 1, 1));
    tu_check(nb_pad(c, x, TU_SHAPE(1, 0, 0, 2), 2), t, 2, TU_SHAPE(3, 4), TU_VALS(0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0),
             0);
  }
  nb_tensor *x = tu_make(c, I64, 2, TU_SHAPE(2, 1), TU_VALS(5, 6));
  tu_check(nb_pad(c, x, TU_SHAPE(0, 1, 2, 1), 2), I64, 2, TU_SHAPE(3, 4), TU_VALS(0, 0, 5, 0, 0, 0, 6, 0, 0, 0, 0, 0),
           0);
  tu_check(nb_pad(c, x, TU_SHAPE(0, 0, 0, 0), 2), I64, 2, TU_SHAPE(2, 1), TU_VALS(5, 6), 0);
  tu_check(nb_pad(c, nb_scalar(c, F32, 3), NULL, 0), F32, 0, NULL, TU_VALS(3), 0);
  tu_check(nb_pad(c, tu_make(c, F64, 1, TU_SHAPE(0), NULL), TU_SHAPE(1, 2), 1), F64, 1, TU_SHAPE(3), TU_VALS(0, 0, 0),
           0);
  /* large, against a formula */
  nb_tensor *big = iota(c, F32, 2, TU_SHAPE(200, 300));
  nb_tensor *y = nb_pad(c, big, TU_SHAPE(3, 4, 5, 6), 2);
  tu_check_shape(y, F32, 2, TU_SHAPE(207, 311));
  const float *yd = nb_data(y);
  for (int64_t i = 0; i < 207; i++)
    for (int64_t j = 0; j < 311; j++) {
      bool in = i >= 3 && i < 203 && j >= 5 && j < 305;
      float want = in ? (float)((i - 3) * 300 + j - 5) : 0;
      if (yd[i * 311 + j] != want) fail_msg("y[%lld][%lld] = %g", (long long)i, (long long)j, yd[i * 311 + j]);
    }
  check_ok(c);
  assert_null(nb_pad(c, x, TU_SHAPE(0, -1, 0, 0), 2));
  tu_check_error(c, NB_INVALID, "Pad: Paddings must be non-negative: 0 -1", NULL);
  assert_null(nb_pad(c, x, TU_SHAPE(0, 1), 1));
  tu_check_error(c, NB_SHAPE, "The first dimension of paddings must be the rank of inputs[1,2] [2,1]", NULL);
  assert_null(nb_pad(c, x, NULL, 2));
  tu_check_error(c, NB_INVALID, "Pad: paddings is NULL", NULL);
  nb_tensor *in[2] = {x, tu_make(c, I32, 2, TU_SHAPE(2, 3), NULL)};
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "Pad", in, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "paddings must be a matrix with 2 columns: [2,3]", NULL);
  in[1] = tu_make(c, F32, 2, TU_SHAPE(2, 2), NULL);
  assert_int_equal(nb_op(c, "Pad", in, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Pad: input 1", NULL);
  in[1] = tu_make(c, I32, 2, TU_SHAPE(2, 2), TU_VALS(1, 0, 0, 0));
  nb_attr tp = nb_attr_type("Tpaddings", I32);
  assert_int_equal(nb_op(c, "Pad", in, 2, &tp, 1, out, 1), NB_OK);
  tu_check(out[0], I64, 2, TU_SHAPE(3, 1), TU_VALS(0, 5, 6), 0);
}

/* ---- ConcatV2, Pack, Unpack --------------------------------------------------------------------- */

static void test_concat(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *a = tu_make(c, t, 2, TU_SHAPE(2, 2), TU_VALS(1, 0, 1, 1));
    nb_tensor *b = tu_make(c, t, 2, TU_SHAPE(2, 1), TU_VALS(0, 1));
    nb_tensor *ab[2] = {a, b};
    tu_check(nb_concat(c, ab, 2, 1), t, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 0, 1, 1, 1), 0);
    tu_check(nb_concat(c, ab, 2, -1), t, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 0, 1, 1, 1), 0);
    nb_tensor *aa[3] = {a, a, a};
    tu_check(nb_concat(c, aa, 3, 0), t, 2, TU_SHAPE(6, 2), TU_VALS(1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1), 0);
  }
  nb_tensor *a = tu_make(c, I64, 1, TU_SHAPE(2), TU_VALS(1, 2));
  nb_tensor *e = tu_make(c, I64, 1, TU_SHAPE(0), NULL);
  nb_tensor *aea[3] = {a, e, a};
  tu_check(nb_concat(c, aea, 3, 0), I64, 1, TU_SHAPE(4), TU_VALS(1, 2, 1, 2), 0);
  tu_check(nb_concat(c, &a, 1, 0), I64, 1, TU_SHAPE(2), TU_VALS(1, 2), 0);
  nb_tensor *ee[2] = {e, e};
  tu_check_shape(nb_concat(c, ee, 2, 0), I64, 1, TU_SHAPE(0));
  nb_tensor *z = tu_make(c, F32, 2, TU_SHAPE(0, 3), NULL);
  nb_tensor *zz[2] = {z, tu_make(c, F32, 2, TU_SHAPE(0, 2), NULL)};
  tu_check_shape(nb_concat(c, zz, 2, 1), F32, 2, TU_SHAPE(0, 5));
  /* large (split across threads mid-row) against a formula */
  nb_tensor *big[3] = {iota(c, F32, 2, TU_SHAPE(300, 100)), iota(c, F32, 2, TU_SHAPE(300, 7)),
                       iota(c, F32, 2, TU_SHAPE(300, 150))};
  nb_tensor *y = nb_concat(c, big, 3, 1);
  tu_check_shape(y, F32, 2, TU_SHAPE(300, 257));
  const float *yd = nb_data(y);
  for (int64_t i = 0; i < 300; i++)
    for (int64_t j = 0; j < 257; j++) {
      float want = j < 100 ? (float)(i * 100 + j) : j < 107 ? (float)(i * 7 + j - 100) : (float)(i * 150 + j - 107);
      if (yd[i * 257 + j] != want) fail_msg("y[%lld][%lld] = %g", (long long)i, (long long)j, yd[i * 257 + j]);
    }
  nb_tensor *y0 = nb_concat(c, big, 1, 0);
  tu_check_shape(y0, F32, 2, TU_SHAPE(300, 100));
  check_ok(c);
}

static void test_concat_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *a = tu_make(c, F32, 2, TU_SHAPE(2, 2), NULL);
  nb_tensor *b = tu_make(c, F32, 2, TU_SHAPE(3, 3), NULL);
  nb_tensor *ab[2] = {a, b};
  assert_null(nb_concat(c, ab, 2, 0));
  tu_check_error(c, NB_SHAPE, "ConcatV2: Dimensions of inputs should match: shape[0] = [2,2] vs. shape[1] = [3,3]",
                 NULL);
  nb_tensor *ai[2] = {a, tu_make(c, I32, 2, TU_SHAPE(2, 2), NULL)};
  assert_null(nb_concat(c, ai, 2, 0));
  tu_check_error(c, NB_DTYPE, "ConcatV2", "float32 and int32");
  nb_tensor *ar[2] = {a, tu_make(c, F32, 1, TU_SHAPE(2), NULL)};
  assert_null(nb_concat(c, ar, 2, 0));
  tu_check_error(c, NB_SHAPE, "Ranks of all input tensors should match: shape[0] = [2,2] vs. shape[1] = [2]", NULL);
  nb_tensor *ss[2] = {nb_scalar(c, F32, 1), nb_scalar(c, F32, 2)};
  assert_null(nb_concat(c, ss, 2, 0));
  tu_check_error(c, NB_SHAPE, "Can't concatenate scalars (use tf.stack instead)", NULL);
  nb_tensor *aa[2] = {a, a};
  assert_null(nb_concat(c, aa, 2, 2));
  tu_check_error(c, NB_INVALID, "Expected concatenating dimensions in the range [-2, 2), but got 2", NULL);
  assert_null(nb_concat(c, aa, 0, 0));
  tu_check_error(c, NB_INVALID, "ConcatV2: needs at least one input, got 0", NULL);
  /* generic entry: N given and checked; the axis is the last input */
  nb_tensor *in[3] = {a, a, tu_make(c, I64, 0, NULL, TU_VALS(-2))};
  nb_tensor *out[1];
  nb_attr n2 = nb_attr_int("N", 2), n3 = nb_attr_int("N", 3);
  assert_int_equal(nb_op(c, "ConcatV2", in, 3, &n2, 1, out, 1), NB_OK);
  tu_check_shape(out[0], F32, 2, TU_SHAPE(4, 2));
  assert_int_equal(nb_op(c, "ConcatV2", in, 3, &n3, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "attr N=3 does not match 2 list inputs", NULL);
  nb_attr axis = nb_attr_int("axis", 0);
  assert_int_equal(nb_op(c, "ConcatV2", in, 3, &axis, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "ConcatV2: unknown attr 'axis'", NULL);
  in[2] = tu_make(c, I32, 1, TU_SHAPE(1), TU_VALS(0));
  assert_int_equal(nb_op(c, "ConcatV2", in, 3, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "Concat dim tensor should be a scalar integer, but got shape [1]", NULL);
  in[2] = tu_make(c, F32, 0, NULL, TU_VALS(0));
  assert_int_equal(nb_op(c, "ConcatV2", in, 3, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "ConcatV2: input 2", NULL);
}

static void test_pack(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *a = tu_make(c, t, 1, TU_SHAPE(3), TU_VALS(1, 0, 1));
    nb_tensor *b = tu_make(c, t, 1, TU_SHAPE(3), TU_VALS(0, 1, 1));
    nb_tensor *ab[2] = {a, b};
    tu_check(nb_pack(c, ab, 2, 0), t, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 1, 0, 1, 1), 0);
    tu_check(nb_pack(c, ab, 2, 1), t, 2, TU_SHAPE(3, 2), TU_VALS(1, 0, 0, 1, 1, 1), 0);
    tu_check(nb_pack(c, ab, 2, -1), t, 2, TU_SHAPE(3, 2), TU_VALS(1, 0, 0, 1, 1, 1), 0);
    tu_check(nb_pack(c, ab, 2, -2), t, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 1, 0, 1, 1), 0);
  }
  nb_tensor *ss[3] = {nb_scalar(c, I32, 1), nb_scalar(c, I32, 2), nb_scalar(c, I32, 3)};
  tu_check(nb_pack(c, ss, 3, 0), I32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3), 0);
  tu_check(nb_pack(c, ss, 1, -1), I32, 1, TU_SHAPE(1), TU_VALS(1), 0);
  nb_tensor *m = tu_make(c, I64, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4));
  nb_tensor *mm[2] = {m, m};
  tu_check(nb_pack(c, mm, 2, 1), I64, 3, TU_SHAPE(2, 2, 2), TU_VALS(1, 2, 1, 2, 3, 4, 3, 4), 0);
  nb_tensor *e = tu_make(c, F32, 2, TU_SHAPE(0, 2), NULL);
  nb_tensor *ee[2] = {e, e};
  tu_check_shape(nb_pack(c, ee, 2, 1), F32, 3, TU_SHAPE(0, 2, 2));
  check_ok(c);
  nb_tensor *bad[2] = {m, tu_make(c, I64, 2, TU_SHAPE(2, 1), NULL)};
  assert_null(nb_pack(c, bad, 2, 0));
  tu_check_error(c, NB_SHAPE,
                 "Pack: Shapes of all inputs must match: values[0].shape = [2,2] != values[1].shape = [2,1]", NULL);
  nb_tensor *dt[2] = {m, tu_make(c, F64, 2, TU_SHAPE(2, 2), NULL)};
  assert_null(nb_pack(c, dt, 2, 0));
  tu_check_error(c, NB_DTYPE, "Pack", "int64 and float64");
  assert_null(nb_pack(c, mm, 2, 3));
  tu_check_error(c, NB_INVALID, "Pack: axis = 3 not in [-3, 3)", NULL);
  assert_null(nb_pack(c, NULL, 2, 0));
  tu_check_error(c, NB_INVALID, "Pack: needs at least one input", NULL);
  nb_attr attrs[2] = {nb_attr_int("N", 2), nb_attr_int("axis", -1)};
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "Pack", mm, 2, attrs, 2, out, 1), NB_OK);
  tu_check(out[0], I64, 3, TU_SHAPE(2, 2, 2), TU_VALS(1, 1, 2, 2, 3, 3, 4, 4), 0);
  attrs[0] = nb_attr_int("N", 1);
  assert_int_equal(nb_op(c, "Pack", mm, 2, attrs, 2, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "attr N=1 does not match 2 list inputs", NULL);
}

static void test_unpack(void **state) {
  nb_ctx *c = *state;
  nb_tensor *out[4];
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 3), TU_VALS(1, 0, 1, 0, 0, 1));
    assert_int_equal(nb_unpack(c, x, 0, 2, out), NB_OK);
    tu_check(out[0], t, 1, TU_SHAPE(3), TU_VALS(1, 0, 1), 0);
    tu_check(out[1], t, 1, TU_SHAPE(3), TU_VALS(0, 0, 1), 0);
    assert_int_equal(nb_unpack(c, x, -1, 3, out), NB_OK);
    tu_check(out[0], t, 1, TU_SHAPE(2), TU_VALS(1, 0), 0);
    tu_check(out[1], t, 1, TU_SHAPE(2), TU_VALS(0, 0), 0);
    tu_check(out[2], t, 1, TU_SHAPE(2), TU_VALS(1, 1), 0);
  }
  nb_tensor *v = tu_make(c, I64, 1, TU_SHAPE(2), TU_VALS(8, 9));
  assert_int_equal(nb_unpack(c, v, 0, 2, out), NB_OK);
  tu_check(out[0], I64, 0, NULL, TU_VALS(8), 0);
  tu_check(out[1], I64, 0, NULL, TU_VALS(9), 0);
  nb_tensor *e = tu_make(c, F32, 2, TU_SHAPE(0, 2), NULL);
  assert_int_equal(nb_unpack(c, e, 1, 2, out), NB_OK);
  tu_check_shape(out[1], F32, 1, TU_SHAPE(0));
  assert_int_equal(nb_unpack(c, e, 0, 0, NULL), NB_OK);
  /* large, against a formula */
  nb_tensor *big = iota(c, I32, 3, TU_SHAPE(100, 4, 150));
  assert_int_equal(nb_unpack(c, big, 1, 4, out), NB_OK);
  for (int o = 0; o < 4; o++) {
    tu_check_shape(out[o], I32, 2, TU_SHAPE(100, 150));
    const int32_t *d = nb_data(out[o]);
    for (int64_t i = 0; i < 100 * 150; i++)
      if (d[i] != (i / 150) * 600 + o * 150 + i % 150) fail_msg("out[%d][%lld] = %d", o, (long long)i, d[i]);
  }
  check_ok(c);
  nb_tensor *x = tu_make(c, F32, 2, TU_SHAPE(2, 3), NULL);
  assert_int_equal(nb_unpack(c, x, 0, 3, out), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "Unpack: Input shape axis 0 must equal 3, got shape [2,3]", NULL);
  assert_int_equal(nb_unpack(c, x, 2, 2, out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Unpack: axis = 2 not in [-2, 2)", NULL);
  assert_int_equal(nb_unpack(c, nb_scalar(c, F32, 1), 0, 1, out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "axis = 0 not in [0, 0)", NULL);
  assert_int_equal(nb_unpack(c, x, 0, -1, out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Unpack", "negative output count -1");
  /* generic entry: num and axis by TF's names; num must match the outputs asked for */
  nb_attr attrs[2] = {nb_attr_int("num", 3), nb_attr_int("axis", 1)};
  assert_int_equal(nb_op(c, "Unpack", &x, 1, attrs, 2, out, 3), NB_OK);
  tu_check_shape(out[2], F32, 1, TU_SHAPE(2));
  assert_int_equal(nb_op(c, "Unpack", &x, 1, attrs, 2, out, 2), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Unpack: attr num = 3 does not match the 2 outputs asked for", NULL);
  assert_int_equal(nb_op(c, "Unpack", &x, 1, &attrs[1], 1, out, 3), NB_INVALID);
  tu_check_error(c, NB_INVALID, "missing required attr 'num'", NULL);
  nb_attr unknown = nb_attr_int("dim", 0);
  assert_int_equal(nb_op(c, "Unpack", &x, 1, &unknown, 1, out, 3), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Unpack: unknown attr 'dim'", NULL);
}

/* ---- Fill, ZerosLike, OnesLike, Shape ---------------------------------------------------------- */

static void test_fill(void **state) {
  nb_ctx *c = *state;
  tu_check(nb_fill(c, TU_SHAPE(2, 3), 2, nb_scalar(c, F32, 1.5)), F32, 2, TU_SHAPE(2, 3),
           TU_VALS(1.5, 1.5, 1.5, 1.5, 1.5, 1.5), 0);
  tu_check(nb_fill(c, TU_SHAPE(3), 1, nb_scalar(c, F64, -2)), F64, 1, TU_SHAPE(3), TU_VALS(-2, -2, -2), 0);
  tu_check(nb_fill(c, TU_SHAPE(2), 1, nb_scalar(c, I32, 7)), I32, 1, TU_SHAPE(2), TU_VALS(7, 7), 0);
  tu_check(nb_fill(c, TU_SHAPE(2), 1, nb_scalar(c, I64, -9)), I64, 1, TU_SHAPE(2), TU_VALS(-9, -9), 0);
  tu_check(nb_fill(c, TU_SHAPE(1, 2), 2, nb_scalar(c, BOOL, 1)), BOOL, 2, TU_SHAPE(1, 2), TU_VALS(1, 1), 0);
  tu_check(nb_fill(c, NULL, 0, nb_scalar(c, I32, 4)), I32, 0, NULL, TU_VALS(4), 0);
  tu_check_shape(nb_fill(c, TU_SHAPE(3, 0), 2, nb_scalar(c, F32, 1)), F32, 2, TU_SHAPE(3, 0));
  nb_tensor *big = nb_fill(c, TU_SHAPE(300, 400), 2, nb_scalar(c, F64, 0.25));
  const double *bd = nb_data(big);
  for (int64_t i = 0; i < 300 * 400; i++)
    if (bd[i] != 0.25) fail_msg("element %lld: %g", (long long)i, bd[i]);
  check_ok(c);
  assert_null(nb_fill(c, TU_SHAPE(2, -1), 2, nb_scalar(c, F32, 1)));
  tu_check_error(c, NB_INVALID, "Fill: Dimension -1 must be >= 0", NULL);
  assert_null(nb_fill(c, TU_SHAPE(2), 1, tu_make(c, F32, 1, TU_SHAPE(1), TU_VALS(1))));
  tu_check_error(c, NB_SHAPE, "Fill: value must be a scalar, got shape [1]", NULL);
  assert_null(nb_fill(c, NULL, 1, nb_scalar(c, F32, 1)));
  tu_check_error(c, NB_INVALID, "Fill: dims is NULL", NULL);
  nb_tensor *in[2] = {tu_make(c, F32, 1, TU_SHAPE(1), TU_VALS(2)), nb_scalar(c, F32, 1)};
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "Fill", in, 2, NULL, 0, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Fill: input 0", NULL);
  in[0] = tu_make(c, I32, 0, NULL, TU_VALS(2));
  assert_int_equal(nb_op(c, "Fill", in, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "dims must be 1-D, got shape []", NULL);
  /* attr T names the value (input 1) */
  in[0] = tu_make(c, I32, 1, TU_SHAPE(1), TU_VALS(2));
  nb_attr tattr = nb_attr_type("T", F32), idx = nb_attr_type("index_type", I32);
  nb_attr attrs[2] = {tattr, idx};
  assert_int_equal(nb_op(c, "Fill", in, 2, attrs, 2, out, 1), NB_OK);
  tu_check(out[0], F32, 1, TU_SHAPE(2), TU_VALS(1, 1), 0);
  attrs[0] = nb_attr_type("T", I32);
  assert_int_equal(nb_op(c, "Fill", in, 2, attrs, 2, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "attr T=int32 does not match input 1", NULL);
}

static void test_zeros_ones_like(void **state) {
  nb_ctx *c = *state;
  for (nb_dtype t = F32; t <= BOOL; t++) {
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 2), TU_VALS(3, 0, -1, 2));
    tu_check(nb_zeros_like(c, x), t, 2, TU_SHAPE(2, 2), TU_VALS(0, 0, 0, 0), 0);
    tu_check(nb_ones_like(c, x), t, 2, TU_SHAPE(2, 2), TU_VALS(1, 1, 1, 1), 0);
    tu_check(nb_ones_like(c, nb_scalar(c, t, 0)), t, 0, NULL, TU_VALS(1), 0);
    tu_check_shape(nb_zeros_like(c, tu_make(c, t, 1, TU_SHAPE(0), NULL)), t, 1, TU_SHAPE(0));
  }
  nb_tensor *big = nb_ones_like(c, iota(c, I64, 2, TU_SHAPE(200, 300)));
  const int64_t *bd = nb_data(big);
  for (int64_t i = 0; i < 200 * 300; i++)
    if (bd[i] != 1) fail_msg("element %lld: %lld", (long long)i, (long long)bd[i]);
  nb_tensor *x = tu_make(c, F32, 1, TU_SHAPE(2), NULL);
  nb_tensor *out[2];
  assert_int_equal(nb_op(c, "OnesLike", &x, 1, NULL, 0, out, 1), NB_OK);
  tu_check(out[0], F32, 1, TU_SHAPE(2), TU_VALS(1, 1), 0);
  assert_int_equal(nb_op(c, "ZerosLike", &x, 1, NULL, 0, out, 2), NB_INVALID);
  tu_check_error(c, NB_INVALID, "ZerosLike: has 1 outputs, caller asked for 2", NULL);
}

static void test_shape(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, BOOL, 3, TU_SHAPE(2, 0, 5), NULL);
  tu_check(nb_shape_op(c, x, I32), I32, 1, TU_SHAPE(3), TU_VALS(2, 0, 5), 0);
  tu_check(nb_shape_op(c, x, I64), I64, 1, TU_SHAPE(3), TU_VALS(2, 0, 5), 0);
  tu_check_shape(nb_shape_op(c, nb_scalar(c, F32, 1), I32), I32, 1, TU_SHAPE(0));
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "Shape", &x, 1, NULL, 0, out, 1), NB_OK);
  tu_check(out[0], I32, 1, TU_SHAPE(3), TU_VALS(2, 0, 5), 0);
  nb_attr ot = nb_attr_type("out_type", I64);
  assert_int_equal(nb_op(c, "Shape", &x, 1, &ot, 1, out, 1), NB_OK);
  tu_check(out[0], I64, 1, TU_SHAPE(3), TU_VALS(2, 0, 5), 0);
  /* a dim past int32 (the tensor is empty, so it fits in memory) */
  nb_tensor *wide = tu_make(c, F32, 2, TU_SHAPE(0, 3000000000LL), NULL);
  tu_check(nb_shape_op(c, wide, I64), I64, 1, TU_SHAPE(2), TU_VALS(0, 3000000000.0), 0);
  assert_null(nb_shape_op(c, wide, I32));
  tu_check_error(c, NB_INVALID, "Shape: Shape output type is 32-bit but dim 1 is 3000000000", NULL);
  assert_null(nb_shape_op(c, x, F32));
  tu_check_error(c, NB_DTYPE, "Shape: attr out_type=float32 is not supported; expected int32, int64", NULL);
  ot = nb_attr_type("out_type", BOOL);
  assert_int_equal(nb_op(c, "Shape", &x, 1, &ot, 1, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "out_type=bool", NULL);
}

/* A failed call leaves the context's first error; later calls do nothing. */
static void test_sticky(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F32, 1, TU_SHAPE(2), NULL);
  assert_null(nb_reshape(c, x, TU_SHAPE(3), 1));
  assert_null(nb_transpose(c, x, (const int[]){0}, 1));
  assert_null(nb_concat(c, &x, 1, 0));
  nb_tensor *out[2] = {x, x};
  assert_int_equal(nb_unpack(c, x, 0, 2, out), NB_SHAPE);
  assert_null(out[0]);
  tu_check_error(c, NB_SHAPE, "Reshape", NULL);
  assert_null(nb_reshape(NULL, x, TU_SHAPE(2), 1));
  assert_int_equal(nb_unpack(NULL, x, 0, 2, out), NB_INVALID);
}

/* Const: nb_const copies its value; the generic entry takes TF's value and dtype attrs. */
static void test_const(void **state) {
  nb_ctx *c = *state;
  nb_tensor *v = tu_make(c, NB_I64, 2, TU_SHAPE(2, 2), TU_VALS(1, -2, 3, 4));
  nb_tensor *k = nb_const(c, v);
  assert_ptr_not_equal(nb_data(k), nb_data(v));
  nb_tensor_free(v);
  tu_check(k, NB_I64, 2, TU_SHAPE(2, 2), TU_VALS(1, -2, 3, 4), 0);
  nb_tensor *out;
  nb_attr attrs[2] = {nb_attr_tensor("value", k), nb_attr_type("dtype", NB_I64)};
  assert_int_equal(nb_op(c, "Const", NULL, 0, attrs, 2, &out, 1), NB_OK);
  tu_check(out, NB_I64, 2, TU_SHAPE(2, 2), TU_VALS(1, -2, 3, 4), 0);
  attrs[1] = nb_attr_type("dtype", NB_F32);
  assert_int_equal(nb_op(c, "Const", NULL, 0, attrs, 2, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "Const: attr dtype=float32 does not match value of dtype int64", NULL);
  assert_int_equal(nb_op(c, "Const", NULL, 0, attrs, 1, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Const: missing required attr 'dtype'", NULL);
  attrs[0] = nb_attr_tensor("value", NULL);
  assert_int_equal(nb_op(c, "Const", NULL, 0, attrs, 1, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Const: attr 'value' has a NULL value", NULL);
  assert_null(nb_const(c, NULL));
  tu_check_error(c, NB_INVALID, "Const: attr 'value' is required", NULL);
}

/* ---- Range ---------------------------------------------------------------------------------- */

static nb_tensor *range_of(nb_ctx *c, nb_dtype t, double start, double limit, double delta) {
  return nb_range(c, nb_scalar(c, t, start), nb_scalar(c, t, limit), nb_scalar(c, t, delta));
}

static void test_range(void **state) {
  nb_ctx *c = *state;
  const nb_dtype ints[2] = {I32, I64};
  for (int i = 0; i < 2; i++) {
    tu_check(range_of(c, ints[i], 0, 5, 1), ints[i], 1, TU_SHAPE(5), TU_VALS(0, 1, 2, 3, 4), 0);
    tu_check(range_of(c, ints[i], 1, 10, 3), ints[i], 1, TU_SHAPE(3), TU_VALS(1, 4, 7), 0);
    tu_check(range_of(c, ints[i], 0, 10, 4), ints[i], 1, TU_SHAPE(3), TU_VALS(0, 4, 8), 0);
    tu_check(range_of(c, ints[i], 10, 1, -3), ints[i], 1, TU_SHAPE(3), TU_VALS(10, 7, 4), 0);
    tu_check(range_of(c, ints[i], -2, -9, -2), ints[i], 1, TU_SHAPE(4), TU_VALS(-2, -4, -6, -8), 0);
    tu_check(range_of(c, ints[i], 3, 4, 100), ints[i], 1, TU_SHAPE(1), TU_VALS(3), 0);
    tu_check_shape(range_of(c, ints[i], 3, 3, 1), ints[i], 1, TU_SHAPE(0)); /* empty */
    tu_check_shape(range_of(c, ints[i], 3, 3, -1), ints[i], 1, TU_SHAPE(0));
  }
  tu_check(range_of(c, F32, 0, 1, 0.25), F32, 1, TU_SHAPE(4), TU_VALS(0, 0.25, 0.5, 0.75), 0);
  tu_check(range_of(c, F32, 0, 1.1, 0.25), F32, 1, TU_SHAPE(5), TU_VALS(0, 0.25, 0.5, 0.75, 1), 0);
  tu_check(range_of(c, F64, 1, -1, -0.5), F64, 1, TU_SHAPE(4), TU_VALS(1, 0.5, 0, -0.5), 0);
  tu_check(range_of(c, F64, 0.5, 2, 1), F64, 1, TU_SHAPE(2), TU_VALS(0.5, 1.5), 0);
  tu_check_shape(range_of(c, F64, 2, 2, 0.5), F64, 1, TU_SHAPE(0));
  /* a long range: start + i * delta, no drift from summing */
  nb_tensor *big = range_of(c, F32, 0, 100000, 0.5);
  tu_check_shape(big, F32, 1, TU_SHAPE(200000));
  assert_true(nb_item(big, 199999) == 99999.5);
  nb_tensor *bigi = range_of(c, I32, 5, -100000, -7);
  tu_check_shape(bigi, I32, 1, TU_SHAPE(14287)); /* ceil(100005 / 7) */
  assert_true(nb_item(bigi, 14286) == 5 - 7.0 * 14286);
  /* the full int64 span: no overflow in the length, values wrap like TF's */
  const int64_t lo = INT64_MIN, hi = INT64_MAX;
  nb_tensor *s = nb_tensor_from(c, I64, 0, NULL, &lo), *l = nb_tensor_from(c, I64, 0, NULL, &hi);
  nb_tensor *wide = nb_range(c, s, l, l);
  tu_check_shape(wide, I64, 1, TU_SHAPE(3));
  const int64_t *w = nb_data(wide);
  assert_true(w[0] == INT64_MIN && w[1] == -1 && w[2] == INT64_MAX - 1);
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_range_errors(void **state) {
  nb_ctx *c = *state;
  assert_null(range_of(c, I32, 0, 5, 0));
  tu_check_error(c, NB_INVALID, "Range: Requires delta != 0", NULL);
  assert_null(range_of(c, F32, 0, 5, 0));
  tu_check_error(c, NB_INVALID, "Requires delta != 0", NULL);
  assert_null(range_of(c, I64, 5, 1, 1));
  tu_check_error(c, NB_INVALID, "Range: Requires start <= limit when delta > 0: 5/1", NULL);
  assert_null(range_of(c, F64, 1, 5, -1));
  tu_check_error(c, NB_INVALID, "Requires start >= limit when delta < 0: 1/5", NULL);
  /* int64 bounds that a double would round together: still a backwards range */
  int64_t big[3] = {(INT64_C(1) << 62) + 4, INT64_C(1) << 62, 4};
  nb_tensor *bs[3];
  for (int i = 0; i < 3; i++) bs[i] = nb_tensor_from(c, I64, 0, NULL, &big[i]);
  assert_null(nb_range(c, bs[0], bs[1], bs[2]));
  tu_check_error(c, NB_INVALID, "Requires start <= limit when delta > 0: 4611686018427387908/4611686018427387904",
                 NULL);
  assert_null(range_of(c, F64, 0, NAN, 1));
  tu_check_error(c, NB_INVALID, "finite", NULL);
  assert_null(range_of(c, F64, 0, 1e300, 1e-300));
  tu_check_error(c, NB_INVALID, "Requires ((limit - start) / delta) <=", NULL);
  nb_tensor *one = nb_scalar(c, I32, 1), *vec = tu_make(c, I32, 1, TU_SHAPE(1), TU_VALS(4));
  assert_null(nb_range(c, vec, one, one));
  tu_check_error(c, NB_SHAPE, "Range: start must be a scalar, not shape [1]", NULL);
  assert_null(nb_range(c, one, vec, one));
  tu_check_error(c, NB_SHAPE, "limit must be a scalar", NULL);
  assert_null(nb_range(c, one, one, vec));
  tu_check_error(c, NB_SHAPE, "delta must be a scalar", NULL);
  assert_null(nb_range(c, one, nb_scalar(c, I64, 4), one));
  tu_check_error(c, NB_DTYPE, "Range:", "int64");
  assert_null(nb_range(c, nb_scalar(c, BOOL, 0), nb_scalar(c, BOOL, 1), nb_scalar(c, BOOL, 1)));
  tu_check_error(c, NB_DTYPE, "Range:", "bool");
  assert_null(nb_range(c, NULL, one, one));
  tu_check_error(c, NB_INVALID, "Range: input 0 is NULL", NULL);
  nb_tensor *out[1];
  assert_int_equal(nb_op(c, "Range", (nb_tensor *[]){one, one}, 2, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Range: expected 3 inputs, got 2", NULL);
  nb_attr wrong = nb_attr_int("Tidx", 3);
  assert_int_equal(nb_op(c, "Range", (nb_tensor *[]){one, one, one}, 3, &wrong, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Range: attr 'Tidx' must be a type", NULL);
}

/* Through nb_op with TF's attr name, and in graphs: constants fold to a static length, a
   placeholder input leaves the length to run time. */
static void test_range_generic_and_graph(void **state) {
  nb_ctx *c = *state;
  nb_tensor *out[1];
  nb_attr tidx = nb_attr_type("Tidx", I64);
  nb_tensor *in[3] = {nb_scalar(c, I64, 2), nb_scalar(c, I64, 8), nb_scalar(c, I64, 2)};
  assert_int_equal(nb_op(c, "Range", in, 3, &tidx, 1, out, 1), NB_OK);
  tu_check(out[0], I64, 1, TU_SHAPE(3), TU_VALS(2, 4, 6), 0);

  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  nb_tensor *folded = range_of(gc, F64, 0, 3, 1);
  tu_check_shape(folded, F64, 1, TU_SHAPE(3));
  nb_tensor *limit = nb_placeholder(gc, I32, 0, NULL, "limit");
  nb_tensor *y = nb_range(gc, nb_scalar(gc, I32, 1), limit, nb_scalar(gc, I32, 2));
  assert_non_null(y);
  assert_true(nb_rank(y) < 0 || nb_shape(y)[0] < 0); /* not known until run time */
  nb_session *s = nb_session_new(g);
  nb_tensor *feed = nb_scalar(c, I32, 8), *res[1];
  assert_int_equal(nb_run(s, &limit, &feed, 1, &y, 1, res), NB_OK);
  tu_check(res[0], I32, 1, TU_SHAPE(4), TU_VALS(1, 3, 5, 7), 0);
  nb_tensor_free(res[0]);
  nb_tensor *bad = nb_scalar(c, I32, -3);
  assert_int_equal(nb_run(s, &limit, &bad, 1, &y, 1, res), NB_INVALID);
  assert_non_null(strstr(nb_session_error(s), "Requires start <= limit when delta > 0: 1/-3"));
  nb_session_free(s);
  nb_ctx_free(gc);
  nb_graph_free(g);
}

/* A graph refuses bad dtypes, attrs, ranks and axes when it is built, whatever the dims:
   inputs with unknown dims or an unknown rank hide nothing that is known. */
static void test_graph_validation(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->c;
  nb_tensor *x8 = tu_unknown_dims(c, NB_F32, 8), *x2 = tu_unknown_dims(c, NB_F32, 2), *fr = tu_unknown_rank(c, NB_F32);
  nb_tensor *out[2];
  assert_null(nb_expand_dims(c, x8, 0));
  tu_check_error(c, NB_SHAPE, "ExpandDims (node 'ExpandDims'): output rank 9 exceeds the maximum rank 8", NULL);
  nb_tensor *dim = tu_unknown_dims(c, NB_I32, 0), *x8_dim[2] = {x8, dim};
  assert_int_equal(nb_op(c, "ExpandDims", x8_dim, 2, NULL, 0, out, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "ExpandDims (node", "output rank 9 exceeds the maximum rank 8");
  assert_null(nb_expand_dims(c, x2, 3));
  tu_check_error(c, NB_INVALID, "ExpandDims (node", "Tried to expand dim index 3 for tensor with 2 dimensions.");
  nb_tensor *mixed[2] = {x2, tu_unknown_rank(c, NB_F64)};
  assert_null(nb_concat(c, mixed, 2, 0));
  tu_check_error(c, NB_DTYPE, "ConcatV2 (node 'ConcatV2')",
                 "inputs 0 and 1 must have the same dtype, got float32 and float64");
  nb_tensor *ranks[3] = {fr, x2, tu_unknown_dims(c, NB_F32, 1)};
  assert_null(nb_concat(c, ranks, 3, 0));
  tu_check_error(c, NB_SHAPE, "ConcatV2 (node",
                 "Ranks of all input tensors should match: shape[1] = [-1,-1] vs. shape[2] = [-1]");
  nb_tensor *pair[2] = {x2, fr};
  assert_null(nb_concat(c, pair, 2, 2));
  tu_check_error(c, NB_INVALID, "ConcatV2 (node", "Expected concatenating dimensions in the range [-2, 2), but got 2");
  nb_tensor *cols[2] = {nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 2), "c2"),
                        nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 3), "c3")};
  assert_null(nb_concat(c, cols, 2, 0));
  tu_check_error(c, NB_SHAPE, "ConcatV2 (node",
                 "Dimensions of inputs should match: shape[0] = [-1,2] vs. shape[1] = [-1,3]");
  tu_check_shape(nb_concat(c, cols, 2, 1), NB_F32, 2, TU_SHAPE(-1, 5));
  nb_tensor *scalars[2] = {tu_unknown_dims(c, NB_F32, 0), fr};
  assert_null(nb_concat(c, scalars, 2, 0));
  tu_check_error(c, NB_SHAPE, "ConcatV2 (node", "Can't concatenate scalars");
  nb_tensor *eights[2] = {x8, fr};
  assert_null(nb_pack(c, eights, 2, 0));
  tu_check_error(c, NB_SHAPE, "Pack (node 'Pack'): output rank 9 exceeds the maximum rank 8", NULL);
  assert_null(nb_pack(c, pair, 2, 3));
  tu_check_error(c, NB_INVALID, "Pack (node", "axis = 3 not in [-3, 3)");
  assert_int_equal(nb_unpack(c, x2, 2, 2, out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Unpack (node 'Unpack'): axis = 2 not in [-2, 2)", NULL);
  assert_int_equal(nb_unpack(c, nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 3), "u3"), 1, 2, out), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "Unpack (node", "Input shape axis 1 must equal 2, got shape [-1,3]");
  assert_int_equal(nb_unpack(c, nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 2), "u2"), 1, 2, out), NB_OK);
  tu_check_shape(out[1], NB_F32, 1, TU_SHAPE(-1));
  assert_null(nb_squeeze(c, x2, (const int[]){-3}, 1));
  tu_check_error(c, NB_INVALID, "Squeeze (node", "Tried to squeeze dim index -3 for tensor with 2 dimensions.");
  nb_tensor *x3 = tu_unknown_dims(c, NB_F32, 3);
  assert_null(nb_transpose(c, x3, (const int[]){1, 0}, 2));
  tu_check_error(c, NB_INVALID, "Transpose (node",
                 "transpose expects a vector of size 3. But input(1) is a vector of size 2");
  assert_null(nb_transpose(c, fr, (const int[]){0, 0, 1}, 3));
  tu_check_error(c, NB_INVALID, "Transpose (node", "2 is missing from perm [0,0,1]");
  assert_null(nb_reshape(c, x2, TU_SHAPE(-1, 2, -1), 3));
  tu_check_error(c, NB_INVALID, "Reshape (node", "Only one input size may be -1, not both 0 and 2");
  assert_null(nb_reshape(c, fr, TU_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1), 9));
  tu_check_error(c, NB_SHAPE, "Reshape (node", "input 1 has 9 values, at most 8 allowed");
  assert_null(nb_tile(c, x2, TU_SHAPE(2), 1));
  tu_check_error(c, NB_INVALID, "Tile (node", "a vector of length 2 but got length 1");
  assert_null(nb_tile(c, fr, TU_SHAPE(2, -1), 2));
  tu_check_error(c, NB_INVALID, "Tile (node", "Expected multiples[1] >= 0, but got -1");
  assert_null(nb_pad(c, x3, TU_SHAPE(1, 1, 1, 1), 2));
  tu_check_error(c, NB_SHAPE, "Pad (node",
                 "The first dimension of paddings must be the rank of inputs[2,2] [-1,-1,-1]");
  assert_null(nb_broadcast_to(c, x3, TU_SHAPE(2, 2), 2));
  tu_check_error(c, NB_SHAPE, "BroadcastTo (node",
                 "Rank of input (3) must be no greater than rank of output shape (2)");
  assert_null(nb_fill(c, TU_SHAPE(2, -3), 2, tu_unknown_dims(c, NB_F32, 0)));
  tu_check_error(c, NB_INVALID, "Fill (node", "Dimension -3 must be >= 0");
  assert_null(nb_fill(c, TU_SHAPE(2), 1, x2));
  tu_check_error(c, NB_SHAPE, "Fill (node", "value must be a scalar, got shape [-1,-1]");
  assert_null(nb_shape_op(c, fr, NB_F32));
  tu_check_error(c, NB_DTYPE, "Shape (node", "attr out_type=float32 is not supported; expected int32, int64");
  assert_null(nb_range(c, tu_unknown_rank(c, NB_I32), nb_scalar(c, NB_I32, 3), tu_unknown_dims(c, NB_I64, 0)));
  tu_check_error(c, NB_DTYPE, "Range (node", "inputs 0 and 2 must have the same dtype, got int32 and int64");
  assert_null(nb_range(c, tu_unknown_rank(c, NB_I32), nb_scalar(c, NB_I32, 3), nb_scalar(c, NB_I32, 0)));
  tu_check_error(c, NB_INVALID, "Range (node", "Requires delta != 0: 0");
  assert_null(nb_placeholder(c, (nb_dtype)9, 0, NULL, "bad"));
  tu_check_error(c, NB_DTYPE, "Placeholder (node 'bad'): attr dtype=9 is not a dtype", NULL);
}

/* The _t forms take their shape arguments as int32 or int64 tensors; nb_fill is nb_fill_t
   over a constant, so test_fill covers its errors. */
static void test_tensor_arguments(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, F32, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6));
  tu_check(nb_reshape_t(c, x, tu_make(c, I32, 1, TU_SHAPE(2), TU_VALS(3, -1))), F32, 2, TU_SHAPE(3, 2),
           TU_VALS(1, 2, 3, 4, 5, 6), 0);
  tu_check(nb_transpose_t(c, x, tu_make(c, I64, 1, TU_SHAPE(2), TU_VALS(1, 0))), F32, 2, TU_SHAPE(3, 2),
           TU_VALS(1, 4, 2, 5, 3, 6), 0);
  tu_check(nb_broadcast_to_t(c, nb_scalar(c, F64, 7), tu_make(c, I64, 1, TU_SHAPE(2), TU_VALS(1, 2))), F64, 2,
           TU_SHAPE(1, 2), TU_VALS(7, 7), 0);
  nb_tensor *row = tu_make(c, I32, 1, TU_SHAPE(2), TU_VALS(1, 2));
  tu_check(nb_pad_t(c, row, tu_make(c, I64, 2, TU_SHAPE(1, 2), TU_VALS(1, 2))), I32, 1, TU_SHAPE(5),
           TU_VALS(0, 1, 2, 0, 0), 0);
  tu_check(nb_fill_t(c, tu_make(c, I32, 1, TU_SHAPE(2), TU_VALS(1, 3)), nb_scalar(c, I64, 4)), I64, 2, TU_SHAPE(1, 3),
           TU_VALS(4, 4, 4), 0);
  check_ok(c);
  assert_null(nb_reshape_t(c, x, tu_make(c, I32, 1, TU_SHAPE(2), TU_VALS(4, -1))));
  tu_check_error(c, NB_SHAPE, "Reshape: Input to reshape is a tensor with 6 values", NULL);
  assert_null(nb_transpose_t(c, x, NULL));
  tu_check_error(c, NB_INVALID, "Transpose: input 1 is NULL", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_graph_validation, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_const, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_reshape, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_views, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_reshape_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_expand_dims, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_squeeze, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_transpose_values, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_transpose_rank8_and_large, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_transpose_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_broadcast_to, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_tile, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_pad, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_concat, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_concat_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_pack, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_unpack, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_fill, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_tensor_arguments, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_zeros_ones_like, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_shape, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_sticky, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_range, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_range_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_range_generic_and_graph, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
