/* Gradients of the slicing ops: hand-computed values, central differences and second order. */
#include "graphutil.h"

/* ---- builders ---------------------------------------------------------------------------- */

static nb_tensor *i64_const(gu_fixture *v, int rank, const int64_t *shape, const int64_t *vals) {
  nb_tensor *t = nb_tensor_from(v->e, NB_I64, rank, shape, vals);
  assert_non_null(t);
  return t;
}

static nb_tensor *one_output(gu_fixture *v, const char *type, nb_tensor *const *in, int nin, const nb_attr *a, int na) {
  nb_tensor *y = NULL;
  if (nb_op(v->c, type, in, nin, a, na, &y, 1)) fail_msg("%s", nb_error(v->c));
  return y;
}

typedef struct slice_arg {
  int n;
  int64_t begin[4], end[4], strides[4];
  nb_slice_masks masks;
} slice_arg;

static nb_tensor *build_slice(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const slice_arg *a = arg;
  return nb_slice(v->c, xs[0], a->begin, a->end, a->n); /* end holds the sizes */
}

/* Slice through nb_op with int32 begin [0, 2] and size [-1, 1] */
static nb_tensor *build_slice_i32(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  nb_tensor *in[3] = {xs[0], nb_tensor_from(v->e, NB_I32, 1, TU_SHAPE(2), (const int32_t[]){0, 2}),
                      nb_tensor_from(v->e, NB_I32, 1, TU_SHAPE(2), (const int32_t[]){-1, 1})};
  return one_output(v, "Slice", in, 3, NULL, 0);
}

static nb_tensor *build_strided(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const slice_arg *a = arg;
  return nb_strided_slice(v->c, xs[0], a->begin, a->end, a->strides, a->n, &a->masks);
}

/* x[b0:3, b1:2] with begin fed at run time */
static nb_tensor *build_strided_fed_begin(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  (void)arg;
  nb_tensor *b = gu_feed(v, nb_placeholder(v->c, NB_I64, 1, TU_SHAPE(2), "begin"),
                         i64_const(v, 1, TU_SHAPE(2), (const int64_t[]){1, 0}));
  nb_tensor *in[4] = {xs[0], b, i64_const(v, 1, TU_SHAPE(2), (const int64_t[]){3, 2}),
                      i64_const(v, 1, TU_SHAPE(2), (const int64_t[]){1, 1})};
  nb_tensor *y = one_output(v, "StridedSlice", in, 4, NULL, 0);
  assert_int_equal(nb_rank(y), -1);
  return y;
}

typedef struct gather_arg {
  int axis, batch_dims;
  nb_dtype t;
  int rank;
  int64_t shape[3], vals[8];
} gather_arg;

static nb_tensor *gather_indices(gu_fixture *v, const gather_arg *a) {
  int64_t n = 1;
  for (int i = 0; i < a->rank; i++) n *= a->shape[i];
  double d[8];
  for (int64_t i = 0; i < n; i++) d[i] = (double)a->vals[i];
  return tu_make(v->e, a->t, a->rank, a->shape, d);
}

static nb_tensor *build_gather(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const gather_arg *a = arg;
  return nb_gather(v->c, xs[0], gather_indices(v, a), a->axis, a->batch_dims);
}

/* GatherV2 with the axis fed at run time (so y's shape is unknown at build time) */
static nb_tensor *build_gather_fed_axis(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const gather_arg *a = arg;
  nb_tensor *axis = gu_feed(v, nb_placeholder(v->c, NB_I32, 0, NULL, "axis"),
                            nb_tensor_from(v->e, NB_I32, 0, NULL, &(int32_t){a->axis}));
  nb_tensor *in[3] = {xs[0], gather_indices(v, a), axis};
  nb_tensor *y = one_output(v, "GatherV2", in, 3, NULL, 0);
  assert_int_equal(nb_rank(y), -1);
  return y;
}

/* GatherV2 with indices fed at run time through a placeholder of unknown shape */
static nb_tensor *build_gather_fed_indices(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const gather_arg *a = arg;
  nb_tensor *ix =
      gu_feed(v, nb_placeholder(v->c, a->t, a->rank, TU_SHAPE(-1, -1, -1), "indices"), gather_indices(v, a));
  return nb_gather(v->c, xs[0], ix, a->axis, a->batch_dims);
}

typedef struct segment_arg {
  nb_dtype t;
  int rank;
  int64_t shape[2], ids[8], num;
  bool fed; /* ids fed at run time through a placeholder of unknown length */
} segment_arg;

static nb_tensor *build_segment_sum(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const segment_arg *a = arg;
  int64_t n = 1;
  for (int i = 0; i < a->rank; i++) n *= a->shape[i];
  double d[8];
  for (int64_t i = 0; i < n; i++) d[i] = (double)a->ids[i];
  nb_tensor *ids = tu_make(v->e, a->t, a->rank, a->shape, d);
  if (a->fed) ids = gu_feed(v, nb_placeholder(v->c, a->t, 1, TU_SHAPE(-1), "ids"), ids);
  return nb_unsorted_segment_sum(v->c, xs[0], ids, a->num);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_slice(void **state) {
  (void)state;
  /* x[1:3, 1:] of [3, 4]: dy = W (1..6) padded back into place */
  const slice_arg s = {2, {1, 1}, {2, -1}, {0}, {0}};
  const double want[12] = {0, 0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6};
  gu_check_grad1(2, TU_SHAPE(3, 4), TU_SHAPE(3, 4), build_slice, &s, want);
  gu_check_grad1(2, TU_SHAPE(-1, 4), TU_SHAPE(3, 4), build_slice, &s, want);
  /* int32 begin/size: column 2 of [2, 3] */
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_slice_i32, NULL, TU_VALS(0, 0, 1, 0, 0, 2));
  const slice_arg scalar = {0, {0}, {0}, {0}, {0}}, empty = {1, {1}, {0}, {0}, {0}};
  gu_check_grad1(0, NULL, NULL, build_slice, &scalar, TU_VALS(1));
  gu_check_grad1(1, TU_SHAPE(3), TU_SHAPE(3), build_slice, &empty, TU_VALS(0, 0, 0));
}

static void test_strided_slice(void **state) {
  (void)state;
  /* x[1::2, -1:0:-2] of [4, 5]: y[a][b] = x[1 + 2a][4 - 2b] */
  const slice_arg steps = {2, {1, -1}, {4, 0}, {2, -2}, {0}};
  const double want[20] = {0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 4, 0, 3};
  gu_check_grad1(2, TU_SHAPE(4, 5), TU_SHAPE(4, 5), build_strided, &steps, want);
  /* x[1] (shrink_axis) of [3, 4] */
  const slice_arg row = {1, {1}, {2}, {1}, {.shrink_axis_mask = 1}};
  const double want_row[12] = {0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0};
  gu_check_grad1(2, TU_SHAPE(3, 4), TU_SHAPE(3, 4), build_strided, &row, want_row);
  /* x[..., newaxis, 1:3] of [2, 3, 4] -> [2, 3, 1, 2] */
  const slice_arg ell = {3, {0, 0, 1}, {0, 0, 3}, {1, 1, 1}, {.ellipsis_mask = 1, .new_axis_mask = 2}};
  double want_ell[24] = {0};
  for (int ij = 0; ij < 6; ij++)
    for (int k = 1; k < 3; k++) want_ell[ij * 4 + k] = ij * 2 + k;
  gu_check_grad1(3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_strided, &ell, want_ell);
  /* x[::-1] (begin and end masks) */
  const slice_arg rev = {1, {0}, {0}, {-1}, {.begin_mask = 1, .end_mask = 1}};
  gu_check_grad1(1, TU_SHAPE(3), TU_SHAPE(3), build_strided, &rev, TU_VALS(3, 2, 1));
  /* an empty selection, and a scalar x */
  const slice_arg none = {1, {2}, {1}, {1}, {0}}, all = {0, {0}, {0}, {0}, {0}};
  gu_check_grad1(1, TU_SHAPE(3), TU_SHAPE(3), build_strided, &none, TU_VALS(0, 0, 0));
  gu_check_grad1(0, NULL, NULL, build_strided, &all, TU_VALS(1));
  /* begin fed at run time: x[1:3, 0:2] of [3, 3] */
  gu_check_grad1(2, TU_SHAPE(3, 3), TU_SHAPE(3, 3), build_strided_fed_begin, NULL, TU_VALS(0, 0, 0, 1, 2, 0, 3, 4, 0));
}

static void test_gather_axis0(void **state) {
  (void)state;
  /* rows 0, 3, 3, 1 of [4, 2] take W's rows 1..4 (row 3 twice: summed) */
  const gather_arg a = {0, 0, NB_I32, 2, {2, 2}, {0, 3, 3, 1}};
  const double want[8] = {1, 2, 7, 8, 0, 0, 8, 10};
  gu_check_grad1(2, TU_SHAPE(4, 2), TU_SHAPE(4, 2), build_gather, &a, want);
  gu_check_grad1(2, TU_SHAPE(-1, 2), TU_SHAPE(4, 2), build_gather, &a, want);
  gu_check_grad1(2, TU_SHAPE(4, 2), TU_SHAPE(4, 2), build_gather_fed_axis, &a, want);
  /* a scalar index: y = x[1] */
  const gather_arg one = {0, 0, NB_I64, 0, {0}, {1}};
  gu_check_grad1(2, TU_SHAPE(3, 2), TU_SHAPE(3, 2), build_gather, &one, TU_VALS(0, 0, 1, 2, 0, 0));
  /* empty indices: dx = 0 */
  const gather_arg none = {0, 0, NB_I32, 1, {0}, {0}};
  gu_check_grad1(2, TU_SHAPE(3, 2), TU_SHAPE(3, 2), build_gather, &none, TU_VALS(0, 0, 0, 0, 0, 0));
}

/* dx for params [2, 3, 4] gathered along axis 1 at idx (n of them): sums of W[i][j][l]. */
static void gather_axis1_want(const int64_t *idx, int n, double *want) {
  memset(want, 0, 24 * sizeof *want);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < n; j++)
      for (int l = 0; l < 4; l++) want[i * 12 + idx[j] * 4 + l] += (i * n + j) * 4 + l + 1;
}

static void test_gather_other_axes(void **state) {
  (void)state;
  double want[24];
  /* axis 1 of [2, 3, 4], the only axis the shapes allow */
  const gather_arg a1 = {1, 0, NB_I32, 1, {3}, {2, 0, 2}};
  gather_axis1_want(a1.vals, 3, want);
  gu_check_grad1(3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_gather, &a1, want);
  gu_check_grad1(3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_gather_fed_axis, &a1, want);
  const gather_arg a1neg = {-2, 0, NB_I64, 1, {2}, {1, 1}};
  gather_axis1_want(a1neg.vals, 2, want);
  gu_check_grad1(3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_gather, &a1neg, want);
  gu_check_grad1(3, TU_SHAPE(2, -1, 4), TU_SHAPE(2, 3, 4), build_gather, &a1neg, want);
  /* axis -1 of [2, 3]: dx[i][k] sums W[i][j] over idx[j] == k */
  const gather_arg last = {-1, 0, NB_I64, 2, {2, 1}, {2, 2}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_gather, &last, TU_VALS(0, 0, 3, 0, 0, 7));
}

/* Square params: axis 0 and 1 give the same shapes, so the axis is computed with ops. */
static void test_gather_ambiguous_axis(void **state) {
  (void)state;
  const gather_arg cols = {1, 0, NB_I32, 1, {3}, {2, 0, 2}}, rows = {0, 0, NB_I32, 1, {3}, {2, 0, 2}};
  /* y[i][j] = x[i][idx[j]]: dx[i][0] = W[i][1], dx[i][2] = W[i][0] + W[i][2] */
  gu_check_grad1(2, TU_SHAPE(3, 3), TU_SHAPE(3, 3), build_gather, &cols, TU_VALS(2, 0, 4, 5, 0, 10, 8, 0, 16));
  /* y[j] = x[idx[j]]: dx[0] = W[1], dx[2] = W[0] + W[2] */
  gu_check_grad1(2, TU_SHAPE(3, 3), TU_SHAPE(3, 3), build_gather, &rows, TU_VALS(4, 5, 6, 0, 0, 0, 8, 10, 12));
}

/* The strided cases again with every dim unknown (x's shape taken at run time), and with
   static shapes checking that dx keeps x's static shape. */
static void test_strided_slice_unknown_shapes(void **state) {
  (void)state;
  const slice_arg steps = {2, {1, -1}, {4, 0}, {2, -2}, {0}};
  const slice_arg row = {1, {1}, {2}, {1}, {.shrink_axis_mask = 1}};
  const slice_arg ell = {3, {0, 0, 1}, {0, 0, 3}, {1, 1, 1}, {.ellipsis_mask = 1, .new_axis_mask = 2}};
  const slice_arg rev = {2, {0, 2}, {0, 0}, {-1, -1}, {.begin_mask = 1, .end_mask = 3}};
  const struct {
    const slice_arg *a;
    int rank;
    const int64_t *shape;
  } cases[] = {
      {&steps, 2, TU_SHAPE(4, 5)}, {&row, 2, TU_SHAPE(3, 4)}, {&ell, 3, TU_SHAPE(2, 3, 4)}, {&rev, 2, TU_SHAPE(2, 3)}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    for (int dynamic = 0; dynamic < 2; dynamic++) {
      gu_grad_case k = gu_case1(cases[i].rank, NULL, cases[i].shape, build_strided, cases[i].a, NULL);
      k.dynamic = dynamic;
      k.static_dx = !dynamic;
      gu_check_grad(&k);
    }
  /* x[::-1, 2::-1] of [2, 3] (every element, both dims reversed) by hand */
  gu_check_grad1(2, TU_SHAPE(-1, -1), TU_SHAPE(2, 3), build_strided, &rev, TU_VALS(6, 5, 4, 3, 2, 1));
}

/* StridedSliceGrad's own gradient: dx = StridedSliceGrad(shape, b, e, s, dy) with dy the
   differentiated input; d<dx, W>/d(dy) = StridedSlice(W). */
static nb_tensor *build_strided_grad(gu_fixture *v, nb_tensor *const *xs, const void *arg) {
  const slice_arg *a = arg;
  return nb_strided_slice_grad(v->c, i64_const(v, 1, TU_SHAPE(2), (const int64_t[]){3, 4}), a->begin, a->end,
                               a->strides, a->n, xs[0], &a->masks);
}

static void test_strided_slice_grad_grad(void **state) {
  (void)state;
  /* dy [2, 2] scattered to x[::2, 3:0:-2] of [3, 4]; W = 1..12 read back at those places */
  const slice_arg a = {2, {0, 3}, {0, 0}, {2, -2}, {.end_mask = 1}};
  gu_check_grad1(2, TU_SHAPE(2, 2), TU_SHAPE(2, 2), build_strided_grad, &a, TU_VALS(4, 2, 12, 10));
  gu_check_grad1(2, TU_SHAPE(-1, -1), TU_SHAPE(2, 2), build_strided_grad, &a, TU_VALS(4, 2, 12, 10));
}

/* GatherV2 with batch_dims: each batch element gathers (and scatters back) in its own slice. */
static void test_gather_batch_dims(void **state) {
  (void)state;
  /* axis 1 of [2, 3], indices [[0, 2], [1, 1]]: dx[0] = (1, 0, 2), dx[1] = (0, 3 + 4, 0) */
  const gather_arg b1 = {1, 1, NB_I32, 2, {2, 2}, {0, 2, 1, 1}};
  const double want_b1[6] = {1, 0, 2, 0, 7, 0};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_gather, &b1, want_b1);
  gu_check_grad1(2, TU_SHAPE(-1, -1), TU_SHAPE(2, 3), build_gather, &b1, want_b1);
  const gather_arg neg = {-1, -1, NB_I64, 2, {2, 2}, {0, 2, 1, 1}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_gather, &neg, want_b1);
  /* axis 2 of [2, 2, 3] (a dim between batch and axis): dx[b][m] gets y[b][m] */
  const gather_arg mid = {2, 1, NB_I32, 2, {2, 2}, {0, 2, 1, 1}};
  const double want_mid[12] = {1, 0, 2, 3, 0, 4, 0, 11, 0, 0, 15, 0};
  gu_check_grad1(3, TU_SHAPE(2, 2, 3), TU_SHAPE(2, 2, 3), build_gather, &mid, want_mid);
  gu_check_grad1(3, TU_SHAPE(-1, 2, -1), TU_SHAPE(2, 2, 3), build_gather, &mid, want_mid);
  /* axis 1 of [2, 3, 2] with an inner dim, indices [[2], [0]] */
  const gather_arg inner = {1, 1, NB_I64, 2, {2, 1}, {2, 0}};
  gu_check_grad1(3, TU_SHAPE(2, 3, 2), TU_SHAPE(2, 3, 2), build_gather, &inner,
                 TU_VALS(0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0));
  /* batch_dims 2, axis 2 of [2, 2, 3], indices [2, 2, 1] */
  const gather_arg b2 = {2, 2, NB_I32, 3, {2, 2, 1}, {2, 0, 1, 1}};
  gu_check_grad1(3, TU_SHAPE(2, 2, 3), TU_SHAPE(2, 2, 3), build_gather, &b2,
                 TU_VALS(0, 0, 1, 2, 0, 0, 0, 3, 0, 0, 4, 0));
  /* empty indices: dx = 0 */
  const gather_arg none = {1, 1, NB_I32, 2, {2, 0}, {0}};
  gu_check_grad1(2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_gather, &none, TU_VALS(0, 0, 0, 0, 0, 0));
}

static void test_segment_sum(void **state) {
  (void)state;
  /* data [4, 2], ids [0, -1, 2, 0]: ddata[i] = W[ids[i]], 0 for the dropped row */
  const segment_arg a = {NB_I32, 1, {4}, {0, -1, 2, 0}, 3, false};
  const double want[8] = {1, 2, 0, 0, 5, 6, 1, 2};
  gu_check_grad1(2, TU_SHAPE(4, 2), TU_SHAPE(4, 2), build_segment_sum, &a, want);
  const segment_arg fed = {NB_I64, 1, {4}, {0, -1, 2, 0}, 3, true};
  gu_check_grad1(2, TU_SHAPE(-1, 2), TU_SHAPE(4, 2), build_segment_sum, &fed, want);
  /* ids [[1, 0], [-1, 1]] over data [2, 2, 3] */
  const segment_arg two = {NB_I64, 2, {2, 2}, {1, 0, -1, 1}, 2, false};
  gu_check_grad1(3, TU_SHAPE(2, 2, 3), TU_SHAPE(2, 2, 3), build_segment_sum, &two,
                 TU_VALS(4, 5, 6, 1, 2, 3, 0, 0, 0, 4, 5, 6));
  /* ids with data's own shape */
  const segment_arg flat = {NB_I32, 1, {4}, {1, 1, 0, -1}, 2, false};
  gu_check_grad1(1, TU_SHAPE(4), TU_SHAPE(4), build_segment_sum, &flat, TU_VALS(2, 2, 1, 0));
}

static void test_registered(void **state) {
  (void)state;
  const char *ops[] = {"Slice", "StridedSlice", "StridedSliceGrad", "GatherV2", "UnsortedSegmentSum"};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) assert_true(nb_has_gradient(ops[i]));
}

/* GatherV2 with batch_dims when the batch size is known only at run time (params' batch dim
   and the indices' shape unknown): the batch numbers come from a Range at run time. */
static void test_gather_batch_dims_unknown(void **state) {
  (void)state;
  /* y[b] = x[b, idx[b]] with idx [[0], [1]]: dy = (1, 2) lands at x[0][0] and x[1][1] */
  const gather_arg b = {1, 1, NB_I32, 2, {2, 1}, {0, 1}};
  gu_check_grad1(2, TU_SHAPE(-1, 3), TU_SHAPE(2, 3), build_gather_fed_indices, &b, TU_VALS(1, 0, 0, 0, 2, 0));
  /* batch_dims 2 on [2, 2, 3] with every dim unknown at build time */
  const gather_arg b2 = {2, 2, NB_I64, 3, {2, 2, 1}, {2, 0, 1, 1}};
  gu_check_grad1(3, TU_SHAPE(-1, -1, -1), TU_SHAPE(2, 2, 3), build_gather_fed_indices, &b2,
                 TU_VALS(0, 0, 1, 2, 0, 0, 0, 3, 0, 0, 4, 0));
  /* a middle dim between batch and axis, batch size fed */
  const gather_arg mid = {2, 1, NB_I32, 2, {2, 2}, {0, 2, 1, 1}};
  gu_check_grad1(3, TU_SHAPE(-1, 2, 3), TU_SHAPE(2, 2, 3), build_gather_fed_indices, &mid,
                 TU_VALS(1, 0, 2, 3, 0, 4, 0, 11, 0, 0, 15, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_strided_slice),
      cmocka_unit_test(test_gather_axis0),
      cmocka_unit_test(test_gather_other_axes),
      cmocka_unit_test(test_gather_ambiguous_axis),
      cmocka_unit_test(test_strided_slice_unknown_shapes),
      cmocka_unit_test(test_strided_slice_grad_grad),
      cmocka_unit_test(test_gather_batch_dims),
      cmocka_unit_test(test_segment_sum),
      cmocka_unit_test(test_registered),
      cmocka_unit_test(test_gather_batch_dims_unknown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
