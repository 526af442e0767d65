/* Gradients of the array ops: hand-computed values, central differences and second order. */
#include "graphutil.h"

/* ---- builders ---------------------------------------------------------------------------- */

typedef struct ints_arg {
  int n;
  int64_t v[8];
} ints_arg;

static nb_tensor *i64_const(gu_fixture *v, int rank, const int64_t *shape, const int64_t *vals) {
  nb_tensor *t = nb_tensor_from(v->e, NB_I64, rank, shape, vals);
  assert_non_null(t);
  return t;
}

static nb_tensor *build_reshape(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const ints_arg *a = arg;
  return nb_reshape(v->c, xs[0], a->v, a->n);
}

/* reshape(reshape(x, s), [-1]) with s fed at run time: the inner result has unknown rank */
static nb_tensor *build_reshape_unknown_rank(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  nb_tensor *s = gu_feed(v, nb_placeholder(v->c, NB_I64, 1, TU_SHAPE(-1), "s"),
                         i64_const(v, 1, TU_SHAPE(2), (const int64_t[]){3, 2}));
  nb_tensor *in[2] = {xs[0], s}, *z = NULL;
  assert_int_equal(nb_op(v->c, "Reshape", in, 2, NULL, 0, &z, 1), NB_OK);
  assert_int_equal(nb_rank(z), -1);
  return nb_reshape(v->c, z, TU_SHAPE(-1), 1);
}

static nb_tensor *build_expand_dims(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  return nb_expand_dims(v->c, xs[0], (int)((const ints_arg *)arg)->v[0]);
}

static nb_tensor *build_squeeze(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const ints_arg *a = arg;
  int axes[8];
  for (int i = 0; i < a->n; i++) axes[i] = (int)a->v[i];
  return nb_squeeze(v->c, xs[0], axes, a->n);
}

static nb_tensor *build_transpose(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const ints_arg *a = arg;
  int perm[8];
  for (int i = 0; i < a->n; i++) perm[i] = (int)a->v[i];
  return nb_transpose(v->c, xs[0], perm, a->n);
}

/* Transpose through nb_op with an int64 perm */
static nb_tensor *build_transpose_i64(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const ints_arg *a = arg;
  nb_tensor *in[2] = {xs[0], i64_const(v, 1, (const int64_t[]){a->n}, a->v)}, *y = NULL;
  nb_attr t = nb_attr_type("Tperm", NB_I64);
  assert_int_equal(nb_op(v->c, "Transpose", in, 2, &t, 1, &y, 1), NB_OK);
  return y;
}

static nb_tensor *build_broadcast_to(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const ints_arg *a = arg;
  return nb_broadcast_to(v->c, xs[0], a->v, a->n);
}

typedef struct concat_arg {
  int axis;
  int64_t before[2], after[2]; /* shapes of the constant pieces around x (rank 2) */
} concat_arg;

static nb_tensor *const_piece(gu_fixture *v, const int64_t *shape, double base) {
  double vals[64];
  for (int i = 0; i < shape[0] * shape[1]; i++) vals[i] = base + i;
  return tu_make(v->e, NB_F64, 2, shape, vals);
}

static nb_tensor *build_concat(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const concat_arg *a = arg;
  nb_tensor *parts[3] = {const_piece(v, a->before, 100), xs[0], const_piece(v, a->after, 200)};
  return nb_concat(v->c, parts, 3, a->axis);
}

static nb_tensor *build_pack(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  int axis = (int)((const ints_arg *)arg)->v[0];
  nb_tensor *parts[3] = {const_piece(v, nb_shape(xs[0]), 10), xs[0], const_piece(v, nb_shape(xs[0]), 20)};
  return nb_pack(v->c, parts, 3, axis);
}

/* concat([u2, u0]) of unstack(x, 0) = [u0, u1, u2]: u1 gets no gradient */
static nb_tensor *build_unpack_some(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  nb_tensor *u[3];
  assert_int_equal(nb_unpack(v->c, xs[0], 0, 3, u), NB_OK);
  nb_tensor *parts[2] = {u[2], u[0]};
  return nb_concat(v->c, parts, 2, 0);
}

/* unstack(x, -1)[1] alone */
static nb_tensor *build_unpack_one(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  nb_tensor *u[3];
  assert_int_equal(nb_unpack(v->c, xs[0], -1, 3, u), NB_OK);
  return u[1];
}

static nb_tensor *build_tile(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const ints_arg *a = arg;
  return nb_tile(v->c, xs[0], a->v, a->n);
}

static nb_tensor *build_pad(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const ints_arg *a = arg;
  return nb_pad(v->c, xs[0], a->n ? a->v : NULL, a->n / 2);
}

/* Pad through nb_op with int32 paddings [[0, 1], [2, 0]] */
static nb_tensor *build_pad_i32(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  nb_tensor *p = nb_tensor_from(v->e, NB_I32, 2, TU_SHAPE(2, 2), (const int32_t[]){0, 1, 2, 0}), *y = NULL;
  nb_tensor *in[2] = {xs[0], p};
  assert_int_equal(nb_op(v->c, "Pad", in, 2, NULL, 0, &y, 1), NB_OK);
  return y;
}

static nb_tensor *build_fill(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  return nb_fill(v->c, TU_SHAPE(2, 3), 2, xs[0]);
}

/* fill(dims, x) with dims fed at run time: y has unknown rank */
static nb_tensor *build_fill_fed_dims(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  nb_tensor *dims = gu_feed(v, nb_placeholder(v->c, NB_I64, 1, TU_SHAPE(-1), "dims"),
                            i64_const(v, 1, TU_SHAPE(3), (const int64_t[]){2, 1, 2}));
  nb_tensor *in[2] = {dims, xs[0]}, *y = NULL;
  assert_int_equal(nb_op(v->c, "Fill", in, 2, NULL, 0, &y, 1), NB_OK);
  assert_int_equal(nb_rank(y), -1);
  return y;
}

/* ---- tests ------------------------------------------------------------------------------- */

#define IOTA6 TU_VALS(1, 2, 3, 4, 5, 6)

static void test_reshape(void **state) {
  (void)state;
  /* dx = dy laid back out in x's shape: W in order */
  const ints_arg to32 = {2, {3, 2}}, flat = {1, {-1}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_reshape, &to32, IOTA6);
  /* unknown dims: Shape(x) at run time */
  gu_check_grad1(2, TU_SHAPE(-1, 3), TU_SHAPE(2, 3), build_reshape, &flat, IOTA6);
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_reshape_unknown_rank, NULL, IOTA6);
  /* rank 0 to [1, 1] */
  const ints_arg ones = {2, {1, 1}};
  gu_check_grad1(0, NULL, NULL, build_reshape, &ones, TU_VALS(1));
}

static void test_expand_dims_squeeze(void **state) {
  (void)state;
  const ints_arg last = {1, {-1}}, first = {1, {0}}, all = {0, {0}}, one = {1, {1}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_expand_dims, &last, IOTA6);
  gu_check_grad1(0, NULL, NULL, build_expand_dims, &first, TU_VALS(1));
  gu_check_grad1(3, TU_SHAPE(2, 1, 3), TU_SHAPE(2, 1, 3), build_squeeze, &all, IOTA6);
  gu_check_grad1(3, TU_SHAPE(-1, 1, 3), TU_SHAPE(2, 1, 3), build_squeeze, &one, IOTA6);
}

static void test_transpose(void **state) {
  (void)state;
  /* y = x^T: dx[i][j] = W[j][i] */
  const ints_arg swap = {2, {1, 0}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_transpose, &swap, TU_VALS(1, 3, 5, 2, 4, 6));
  gu_check_grad1(2, TU_SHAPE(-1, 3), TU_SHAPE(2, 3), build_transpose_i64, &swap, TU_VALS(1, 3, 5, 2, 4, 6));
  /* perm [2, 0, 1]: y[a][b][c] = x[b][c][a], so dx[b][c][a] = W[a][b][c] = 6a + 3b + c + 1 */
  double want[24];
  for (int b = 0; b < 2; b++)
    for (int c = 0; c < 3; c++)
      for (int a = 0; a < 4; a++) want[b * 12 + c * 4 + a] = 6 * a + 3 * b + c + 1;
  const ints_arg cyc = {3, {2, 0, 1}};
  gu_check_grad1(3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_transpose, &cyc, want);
  gu_check_grad1(3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_transpose_i64, &cyc, want);
  const ints_arg none = {0, {0}};
  gu_check_grad1(0, NULL, NULL, build_transpose, &none, TU_VALS(1));
}

static void test_broadcast_to(void **state) {
  (void)state;
  /* [3, 1] -> [2, 3, 4]: dx[i] = sum over a, c of W[a][i][c] = 12a + 4i + c + 1 */
  double want[3];
  for (int i = 0; i < 3; i++) {
    want[i] = 0;
    for (int a = 0; a < 2; a++)
      for (int c = 0; c < 4; c++) want[i] += 12 * a + 4 * i + c + 1;
  }
  const ints_arg to = {3, {2, 3, 4}}, sq = {2, {2, 2}};
  gu_check_grad1(2, TU_SHAPE(3, 1), TU_SHAPE(3, 1), build_broadcast_to, &to, want);
  gu_check_grad1(2, TU_SHAPE(-1, 1), TU_SHAPE(3, 1), build_broadcast_to, &to, want);
  gu_check_grad1(0, NULL, NULL, build_broadcast_to, &sq, TU_VALS(10));
}

static void test_concat(void **state) {
  (void)state;
  /* [A(2x1), x(2x3), B(2x2)] along 1: dx[i][j] = W[i][1 + j] = 6i + j + 2 */
  const concat_arg mid = {1, {2, 1}, {2, 2}}, mid_neg = {-1, {2, 1}, {2, 2}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_concat, &mid, TU_VALS(2, 3, 4, 8, 9, 10));
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_concat, &mid_neg, TU_VALS(2, 3, 4, 8, 9, 10));
  /* [A(1x3), x(2x3), empty(0x3)] along 0: x is rows 1..2 of y */
  const concat_arg rows = {0, {1, 3}, {0, 3}}, rows_neg = {-2, {1, 3}, {0, 3}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_concat, &rows, TU_VALS(4, 5, 6, 7, 8, 9));
  gu_check_grad1(2, TU_SHAPE(-1, 3), TU_SHAPE(2, 3), build_concat, &rows_neg, TU_VALS(4, 5, 6, 7, 8, 9));
  gu_check_grad1(2, TU_SHAPE(-1, -1), TU_SHAPE(2, 3), build_concat, &mid, TU_VALS(2, 3, 4, 8, 9, 10));
}

static void test_pack_unpack(void **state) {
  (void)state;
  /* stack([A, x, B], 1) of [2, 3]: y[i][k][j], dx[i][j] = W[i][1][j] = 9i + j + 4 */
  const ints_arg one = {1, {1}}, last = {1, {-1}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_pack, &one, TU_VALS(4, 5, 6, 13, 14, 15));
  /* stack([A, x, B], -1): dx[i][j] = W[i][j][1] = 3(3i + j) + 2 */
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_pack, &last, TU_VALS(2, 5, 8, 11, 14, 17));
  /* concat([u2, u0]) with W = 1..4: dx = [[3, 4], [0, 0], [1, 2]] (u1: zeros) */
  gu_check_grad1(2, TU_SHAPE(3, 2), TU_SHAPE(3, 2), build_unpack_some, NULL, TU_VALS(3, 4, 0, 0, 1, 2));
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_unpack_one, NULL, TU_VALS(0, 1, 0, 0, 2, 0));
}

static void test_tile(void **state) {
  (void)state;
  /* [2, 3] tiled [2, 1]: dx[i][j] = W[i][j] + W[i + 2][j] */
  const ints_arg rows = {2, {2, 1}};
  const double want_rows[6] = {8, 10, 12, 14, 16, 18};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_tile, &rows, want_rows);
  gu_check_grad1(2, TU_SHAPE(-1, 3), TU_SHAPE(2, 3), build_tile, &rows, want_rows);
  /* [2, 1, 3] tiled [2, 3, 2] -> [4, 3, 6]: dx[i][0][k] sums W[i + 2a][b][k + 3c] */
  double want[6];
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 3; k++) {
      want[i * 3 + k] = 0;
      for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
          for (int c = 0; c < 2; c++) want[i * 3 + k] += (i + 2 * a) * 18 + b * 6 + k + 3 * c + 1;
    }
  const ints_arg three = {3, {2, 3, 2}};
  gu_check_grad1(3, TU_SHAPE(2, 1, 3), TU_SHAPE(2, 1, 3), build_tile, &three, want);
  gu_check_grad1(3, TU_SHAPE(-1, 1, -1), TU_SHAPE(2, 1, 3), build_tile, &three, want);
  /* an empty x, and multiples of 0 (dx = 0) */
  gu_check_grad1(2, TU_SHAPE(0, 3), TU_SHAPE(0, 3), build_tile, &rows, NULL);
  const ints_arg zero = {2, {0, 1}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_tile, &zero, TU_VALS(0, 0, 0, 0, 0, 0));
}

static void test_pad(void **state) {
  (void)state;
  /* [2, 3] padded [[1, 0], [2, 1]] -> [3, 6]: dx[i][j] = W[i + 1][j + 2] = 6(i + 1) + j + 3 */
  const ints_arg p = {4, {1, 0, 2, 1}}, none = {0, {0}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_pad, &p, TU_VALS(9, 10, 11, 15, 16, 17));
  gu_check_grad1(2, TU_SHAPE(-1, -1), TU_SHAPE(2, 3), build_pad, &p, TU_VALS(9, 10, 11, 15, 16, 17));
  gu_check_grad1(0, NULL, NULL, build_pad, &none, TU_VALS(1));
  /* int32 paddings [[0, 1], [2, 0]] -> [3, 5]: dx[i][j] = W[i][j + 2] = 5i + j + 3 */
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_pad_i32, NULL, TU_VALS(3, 4, 5, 8, 9, 10));
}

static void test_fill(void **state) {
  (void)state;
  /* every element of y is x: dx = sum(W) = 21 */
  gu_check_grad1(0, NULL, NULL, build_fill, NULL, TU_VALS(21));
  gu_check_grad1(0, NULL, NULL, build_fill_fed_dims, NULL, TU_VALS(10));
}

/* Shape, ZerosLike and OnesLike cut the path silently: dx is NULL with NB_OK. */
static void test_no_gradient_ops(void **state) {
  (void)state;
  const char *none[] = {"Shape", "ZerosLike", "OnesLike", "BroadcastGradientArgs", "Const", "Placeholder"};
  for (size_t i = 0; i < sizeof none / sizeof *none; i++) assert_false(nb_has_gradient(none[i]));
  const char *some[] = {"Reshape", "ExpandDims", "Squeeze", "Transpose", "BroadcastTo", "ConcatV2",
                        "Pack",    "Unpack",     "Tile",    "Pad",       "Fill"};
  for (size_t i = 0; i < sizeof some / sizeof *some; i++) assert_true(nb_has_gradient(some[i]));
  gu_fixture v;
  assert_true(gu_open(&v));
  nb_tensor *x = nb_placeholder(v.c, NB_F64, 2, TU_SHAPE(2, 3), "x");
  nb_tensor *z = nb_placeholder(v.c, NB_F64, 1, TU_SHAPE(6), "z");
  nb_tensor *ys[3] = {nb_zeros_like(v.c, x), nb_ones_like(v.c, x), NULL};
  nb_tensor *in[2] = {z, nb_shape_op(v.c, x, NB_I32)};
  assert_int_equal(nb_op(v.c, "Reshape", in, 2, NULL, 0, &ys[2], 1), NB_OK);
  nb_tensor *dx = x;
  assert_int_equal(nb_gradients(v.c, ys, 3, &x, 1, NULL, &dx), NB_OK);
  assert_null(dx);
  gu_close(&v);
}

/* ---- what is not supported --------------------------------------------------------------- */

/* x reshaped to a fed shape (unknown rank), then the op with a fed int vector of unknown
   length: no static rank is left to build the index constants from. */
static nb_tensor *unknown_rank(gu_fixture *v, nb_tensor *x) {
  nb_tensor *s = nb_placeholder(v->c, NB_I64, 1, TU_SHAPE(-1), "s"), *in[2] = {x, s}, *z = NULL;
  assert_int_equal(nb_op(v->c, "Reshape", in, 2, NULL, 0, &z, 1), NB_OK);
  return z;
}

static nb_tensor *build_transpose_unknown(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  nb_tensor *in[2] = {unknown_rank(v, xs[0]), nb_placeholder(v->c, NB_I32, 1, TU_SHAPE(-1), "perm")}, *y = NULL;
  assert_int_equal(nb_op(v->c, "Transpose", in, 2, NULL, 0, &y, 1), NB_OK);
  return y;
}

static nb_tensor *build_tile_unknown(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  nb_tensor *in[2] = {unknown_rank(v, xs[0]), nb_placeholder(v->c, NB_I32, 1, TU_SHAPE(-1), "m")}, *y = NULL;
  assert_int_equal(nb_op(v->c, "Tile", in, 2, NULL, 0, &y, 1), NB_OK);
  return y;
}

static nb_tensor *build_concat_unknown(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  nb_tensor *z = unknown_rank(v, xs[0]), *parts[2] = {z, z};
  return nb_concat(v->c, parts, 2, 0);
}

static void test_unknown_rank_unimplemented(void **state) {
  (void)state;
  gu_check_grad_fails(gu_case1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_transpose_unknown, NULL, NULL),
                      NB_UNIMPLEMENTED, "Transpose gradient: the permutation's length must be known");
  gu_check_grad_fails(gu_case1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_tile_unknown, NULL, NULL), NB_UNIMPLEMENTED,
                      "Tile gradient: with unknown shapes the rank must be known");
  gu_check_grad_fails(gu_case1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_concat_unknown, NULL, NULL), NB_UNIMPLEMENTED,
                      "ConcatV2 gradient: the inputs' rank must be known");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reshape),
      cmocka_unit_test(test_expand_dims_squeeze),
      cmocka_unit_test(test_transpose),
      cmocka_unit_test(test_broadcast_to),
      cmocka_unit_test(test_concat),
      cmocka_unit_test(test_pack_unpack),
      cmocka_unit_test(test_tile),
      cmocka_unit_test(test_pad),
      cmocka_unit_test(test_fill),
      cmocka_unit_test(test_no_gradient_ops),
      cmocka_unit_test(test_unknown_rank_unimplemented),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
