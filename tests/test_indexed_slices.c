/* IndexedSlices: construction and its errors, dense reads, ops densifying them, and the
   sparse gradient of GatherV2 on axis 0 through nb_gradients, sessions and tapes, with
   sparse and mixed aggregation and second order. */
#include "graphutil.h"

static const int64_t TABLE_SHAPE[2] = {5, 3};

/* params[r][c] = 1 + r + c / 10 */
static nb_tensor *table(nb_ctx *c) {
  double v[15];
  for (int i = 0; i < 15; i++) v[i] = 1 + i / 3 + (i % 3) / 10.0;
  return nb_tensor_from(c, NB_F64, 2, TABLE_SHAPE, v);
}

static nb_tensor *ids(nb_ctx *c, int n, const int32_t *v) { return nb_tensor_from(c, NB_I32, 1, (int64_t[]){n}, v); }

/* The dense [5, 3] value of x, by nb_read and by nb_item. */
static void check_dense(const nb_tensor *x, const double *want) {
  double got[15];
  assert_int_equal(nb_read(x, got, sizeof got), NB_OK);
  for (int i = 0; i < 15; i++) {
    if (fabs(got[i] - want[i]) > 1e-12) fail_msg("element %d: read %g, want %g", i, got[i], want[i]);
    if (fabs(nb_item(x, i) - want[i]) > 1e-12) fail_msg("element %d: item %g, want %g", i, nb_item(x, i), want[i]);
  }
}

/* Row counts: want[r * 3 + c] = count of r among the gathered ids, times scale. */
static void counts(const int32_t *rows, int n, double scale, double *want) {
  memset(want, 0, 15 * sizeof *want);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < 3; j++) want[rows[i] * 3 + j] += scale;
}

static void test_construct_and_read(void **state) {
  (void)state;
  nb_ctx *c = nb_eager_new();
  double vals[6] = {1, 2, 3, 10, 20, 30};
  nb_tensor *v = nb_tensor_from(c, NB_F64, 2, (int64_t[]){2, 3}, vals);
  nb_tensor *s = nb_indexed_slices(c, v, ids(c, 2, (const int32_t[]){4, 4}), TABLE_SHAPE, 2);
  assert_non_null(s);
  assert_true(nb_is_indexed_slices(s));
  assert_false(nb_is_indexed_slices(v));
  assert_null(nb_data(s));
  tu_check_shape(s, NB_F64, 2, TABLE_SHAPE);
  assert_int_equal(nb_num_elements(s), 15);
  double want[15] = {0};
  want[12] = 11, want[13] = 22, want[14] = 33; /* row 4 twice: summed */
  check_dense(s, want);
  tu_check_shape(nb_indexed_slices_values(s), NB_F64, 2, TU_SHAPE(2, 3));
  /* any op densifies its IndexedSlices inputs */
  nb_tensor *doubled = nb_add(c, s, s), *dense = nb_densify(c, s);
  assert_false(nb_is_indexed_slices(doubled));
  for (int i = 0; i < 15; i++) want[i] *= 2;
  check_dense(doubled, want);
  assert_non_null(nb_data(dense));
  assert_ptr_equal(nb_densify(c, v), v);
  nb_tensor *both = nb_indexed_slices_concat(c, s, s);
  tu_check_shape(nb_indexed_slices_indices(both), NB_I32, 1, TU_SHAPE(4));
  check_dense(both, want);
  nb_tensor_free(s); /* frees its parts too (ASan checks) */
  assert_int_equal(nb_status(c), NB_OK);
  nb_ctx_free(c);
}

static void expect_error(nb_ctx *c, nb_tensor *x, nb_code code, const char *text) {
  assert_null(x);
  assert_int_equal(nb_status(c), code);
  if (!strstr(nb_error(c), text)) fail_msg("message '%s' lacks '%s'", nb_error(c), text);
  nb_clear_error(c);
}

static void test_construct_errors(void **state) {
  (void)state;
  nb_ctx *c = nb_eager_new();
  nb_tensor *v = nb_tensor_from(c, NB_F64, 2, (int64_t[]){2, 3}, NULL), *ix = ids(c, 2, (const int32_t[]){0, 1});
  expect_error(c, nb_indexed_slices(c, v, ids(c, 2, (const int32_t[]){0, 5}), TABLE_SHAPE, 2), NB_INVALID,
               "indices[1] = 5 is not in [0, 5)");
  expect_error(c, nb_indexed_slices(c, v, ids(c, 2, (const int32_t[]){-1, 0}), TABLE_SHAPE, 2), NB_INVALID,
               "indices[0] = -1");
  expect_error(c, nb_indexed_slices(c, v, ids(c, 3, (const int32_t[]){0, 1, 2}), TABLE_SHAPE, 2), NB_SHAPE,
               "values [2,3] and indices [3] do not fit dense shape [5,3]");
  expect_error(c, nb_indexed_slices(c, v, ix, (const int64_t[]){5, 4}, 2), NB_SHAPE, "do not fit dense shape [5,4]");
  expect_error(c, nb_indexed_slices(c, v, ix, (const int64_t[]){-1, 3}, 2), NB_SHAPE, "must be fully known");
  expect_error(c, nb_indexed_slices(c, v, ix, TABLE_SHAPE, 0), NB_SHAPE, "dense rank 0");
  expect_error(c, nb_indexed_slices(c, ix, ix, (const int64_t[]){5}, 1), NB_DTYPE, "values must be float");
  expect_error(c, nb_indexed_slices(c, v, v, TABLE_SHAPE, 2), NB_DTYPE, "indices int32 or int64");
  expect_error(c, nb_indexed_slices(c, NULL, ix, TABLE_SHAPE, 2), NB_INVALID, "must be dense tensors");
  nb_tensor *s = nb_indexed_slices(c, v, ix, TABLE_SHAPE, 2);
  expect_error(c, nb_indexed_slices(c, s, ix, TABLE_SHAPE, 2), NB_INVALID, "must be dense tensors");
  expect_error(c, nb_indexed_slices_concat(c, s, v), NB_INVALID, "needs two IndexedSlices");
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  expect_error(gc, nb_indexed_slices(gc, v, ix, TABLE_SHAPE, 2), NB_INVALID, "graph tensors of its graph");
  nb_ctx_free(gc);
  nb_graph_free(g);
  nb_ctx_free(c);
}

/* y = sum(gather(p, a) * 2) + sum(gather(p, b)): two sparse contributions to dp. */
static nb_tensor *two_lookups(nb_ctx *c, nb_tensor *p, nb_tensor *a, nb_tensor *b) {
  nb_tensor *ga = nb_mul(c, nb_gather(c, p, a, 0, 0), nb_scalar(c, NB_F64, 2));
  return nb_add(c, nb_sum(c, ga, NULL, 0, false), nb_sum(c, nb_gather(c, p, b, 0, 0), NULL, 0, false));
}

static const int32_t ROWS_A[3] = {1, 3, 1}, ROWS_B[2] = {0, 3};

static void want_two_lookups(double *want) {
  double b[15];
  counts(ROWS_A, 3, 2, want);
  counts(ROWS_B, 2, 1, b);
  for (int i = 0; i < 15; i++) want[i] += b[i];
}

static void test_graph_sparse_gradient(void **state) {
  (void)state;
  for (int agg = NB_AGG_ADD_N; agg <= NB_AGG_TREE; agg++) {
    gu_fixture f;
    assert_true(gu_open(&f));
    nb_tensor *p = nb_placeholder(f.c, NB_F64, 2, TABLE_SHAPE, "params"), *dp;
    nb_tensor *y = two_lookups(f.c, p, ids(f.c, 3, ROWS_A), ids(f.c, 2, ROWS_B));
    nb_grad_opts o = {.aggregation = agg};
    assert_int_equal(nb_gradients(f.c, &y, 1, &p, 1, &o, &dp), NB_OK);
    assert_true(nb_is_indexed_slices(dp)); /* both parts sparse: concatenated */
    assert_true(nb_is_symbolic(dp));
    tu_check_shape(nb_indexed_slices_indices(dp), NB_I32, 1, TU_SHAPE(5));
    nb_tensor *fetch[2] = {dp, y}, *got[2], *pv = table(f.e);
    assert_int_equal(nb_run(f.s, &p, &pv, 1, fetch, 2, got), NB_OK);
    assert_true(nb_is_indexed_slices(got[0]));
    assert_false(nb_is_indexed_slices(got[1]));
    double want[15];
    want_two_lookups(want);
    check_dense(got[0], want);
    nb_tensor_free(got[0]);
    nb_tensor_free(got[1]);
    gu_close(&f);
  }
}

/* Three sparse contributions, one with int64 indices: concatenated at once, as int64. */
static void test_graph_three_sparse_terms(void **state) {
  (void)state;
  gu_fixture f;
  assert_true(gu_open(&f));
  nb_tensor *p = nb_placeholder(f.c, NB_F64, 2, TABLE_SHAPE, "params"), *dp;
  nb_tensor *wide = nb_tensor_from(f.c, NB_I64, 1, TU_SHAPE(2), (const int64_t[]){2, 1});
  nb_tensor *third = nb_mul(f.c, nb_sum(f.c, nb_gather(f.c, p, wide, 0, 0), NULL, 0, false), nb_scalar(f.c, NB_F64, 3));
  nb_tensor *y = nb_add(f.c, two_lookups(f.c, p, ids(f.c, 3, ROWS_A), ids(f.c, 2, ROWS_B)), third);
  assert_int_equal(nb_gradients(f.c, &y, 1, &p, 1, NULL, &dp), NB_OK);
  assert_true(nb_is_indexed_slices(dp));
  tu_check_shape(nb_indexed_slices_indices(dp), NB_I64, 1, TU_SHAPE(7));
  nb_tensor *got = gu_run1(&f, p, table(f.e), dp);
  double want[15], c3[15];
  want_two_lookups(want);
  counts((const int32_t[]){2, 1}, 2, 3, c3);
  for (int i = 0; i < 15; i++) want[i] += c3[i];
  check_dense(got, want);
  nb_tensor_free(got);
  gu_close(&f);
}

/* A dense contribution joins: dp is dense. */
static void test_graph_mixed_gradient(void **state) {
  (void)state;
  gu_fixture f;
  assert_true(gu_open(&f));
  nb_tensor *p = nb_placeholder(f.c, NB_F64, 2, TABLE_SHAPE, "params"), *dp;
  nb_tensor *y = nb_add(f.c, nb_sum(f.c, nb_gather(f.c, p, ids(f.c, 2, ROWS_B), 0, 0), NULL, 0, false),
                        nb_sum(f.c, p, NULL, 0, false));
  assert_int_equal(nb_gradients(f.c, &y, 1, &p, 1, NULL, &dp), NB_OK);
  assert_false(nb_is_indexed_slices(dp));
  nb_tensor *got = gu_run1(&f, p, table(f.e), dp);
  double want[15];
  counts(ROWS_B, 2, 1, want);
  for (int i = 0; i < 15; i++) want[i] += 1;
  check_dense(got, want);
  nb_tensor_free(got);
  gu_close(&f);
}

/* d/dp sum(dp_sparse * w) for y = sum(gather(p, a)^2): the gradient of a sparse gradient. */
static void test_graph_second_order(void **state) {
  (void)state;
  gu_fixture f;
  assert_true(gu_open(&f));
  nb_tensor *p = nb_placeholder(f.c, NB_F64, 2, TABLE_SHAPE, "params"), *dp, *ddp;
  nb_tensor *y = nb_sum(f.c, nb_square(f.c, nb_gather(f.c, p, ids(f.c, 3, ROWS_A), 0, 0)), NULL, 0, false);
  assert_int_equal(nb_gradients(f.c, &y, 1, &p, 1, NULL, &dp), NB_OK);
  assert_true(nb_is_indexed_slices(dp));
  assert_int_equal(nb_gradients(f.c, &dp, 1, &p, 1, NULL, &ddp), NB_OK); /* sum of dp = 2 sum_i p[a_i] */
  nb_tensor *got = gu_run1(&f, p, table(f.e), ddp);
  double want[15];
  counts(ROWS_A, 3, 2, want);
  check_dense(got, want);
  nb_tensor_free(got);
  gu_close(&f);
}

static void test_tape_sparse_gradient(void **state) {
  (void)state;
  nb_ctx *c = nb_eager_new();
  nb_tensor *p = table(c), *dp;
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tape_watch(t, p);
  nb_tensor *y = two_lookups(c, p, ids(c, 3, ROWS_A), ids(c, 2, ROWS_B));
  assert_int_equal(nb_tape_gradient(t, &y, 1, &p, 1, NULL, &dp), NB_OK);
  assert_true(nb_is_indexed_slices(dp));
  tu_check_shape(nb_indexed_slices_indices(dp), NB_I32, 1, TU_SHAPE(5));
  double want[15];
  want_two_lookups(want);
  check_dense(dp, want);
  /* a dense use of p joins: the sum is dense */
  nb_tensor *y2 = nb_add(c, y, nb_sum(c, p, NULL, 0, false)), *dp2;
  assert_int_equal(nb_tape_gradient(t, &y2, 1, &p, 1, NULL, &dp2), NB_OK);
  assert_false(nb_is_indexed_slices(dp2));
  for (int i = 0; i < 15; i++) want[i] += 1;
  check_dense(dp2, want);
  nb_tape_end(t);
  assert_int_equal(nb_status(c), NB_OK);
  nb_ctx_free(c);
}

/* Nested tapes: the outer tape differentiates the inner tape's sparse gradient. */
static void test_tape_second_order(void **state) {
  (void)state;
  nb_ctx *c = nb_eager_new();
  nb_tensor *p = table(c), *dp, *ddp;
  nb_tape *outer = nb_tape_begin(c, 0), *inner = nb_tape_begin(c, 0);
  nb_tape_watch(outer, p);
  nb_tape_watch(inner, p);
  nb_tensor *y = nb_sum(c, nb_square(c, nb_gather(c, p, ids(c, 3, ROWS_A), 0, 0)), NULL, 0, false);
  assert_int_equal(nb_tape_gradient(inner, &y, 1, &p, 1, NULL, &dp), NB_OK);
  assert_true(nb_is_indexed_slices(dp));
  assert_int_equal(nb_tape_gradient(outer, &dp, 1, &p, 1, NULL, &ddp), NB_OK);
  double want[15];
  counts(ROWS_A, 3, 2, want);
  check_dense(ddp, want);
  nb_tape_end(inner);
  nb_tape_end(outer);
  nb_ctx_free(c);
}

/* Graph and tape agree with the dense UnsortedSegmentSum gradient taken on a dynamic axis. */
static void test_jacobian_of_lookup(void **state) {
  (void)state;
  nb_ctx *c = nb_eager_new();
  nb_tensor *p = table(c), *jac;
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, p);
  nb_tensor *y = nb_gather(c, p, ids(c, 2, ROWS_B), 0, 0);
  assert_int_equal(nb_tape_jacobian(t, y, p, &jac), NB_OK);
  tu_check_shape(jac, NB_F64, 4, TU_SHAPE(2, 3, 5, 3));
  for (int64_t i = 0; i < 90; i++) { /* d y[r][k] / d p[q][m] = [q == ROWS_B[r]] [m == k] */
    int64_t r = i / 45, k = i / 15 % 3, q = i / 3 % 5, m = i % 3;
    assert_true(nb_item(jac, i) == (double)(q == ROWS_B[r] && m == k));
  }
  nb_tape_end(t);
  nb_ctx_free(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_construct_and_read),    cmocka_unit_test(test_construct_errors),
      cmocka_unit_test(test_graph_sparse_gradient), cmocka_unit_test(test_graph_three_sparse_terms),
      cmocka_unit_test(test_graph_mixed_gradient),  cmocka_unit_test(test_graph_second_order),
      cmocka_unit_test(test_tape_sparse_gradient),  cmocka_unit_test(test_tape_second_order),
      cmocka_unit_test(test_jacobian_of_lookup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
