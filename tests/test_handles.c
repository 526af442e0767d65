/* Handle misuse is caught, not undefined: a second nb_tensor_free is a no-op, a released
   handle given to an op is an error, and IndexedSlices parts belong to their slices. */
#include "graphutil.h"

#include "../src/core/core.h"

static const double TWO_THREE[6] = {1, 2, 3, 4, 5, 6};

/* x is live with these n values (nb_read fails on a released handle; nb_item's NaN would
   slip through a tolerance check). */
static void check_live(const nb_tensor *x, int n, const double *want) {
  double got[16];
  assert_true(n <= 16);
  assert_int_equal(nb_dtype_of(x), NB_F64);
  assert_int_equal(nb_num_elements(x), n);
  assert_int_equal(nb_read(x, got, (size_t)n * sizeof *got), NB_OK);
  for (int i = 0; i < n; i++)
    if (got[i] != want[i]) fail_msg("element %d: got %g, want %g", i, got[i], want[i]);
}

/* ---- release is idempotent ----------------------------------------------------------------- */

static void test_eager_double_free(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), TWO_THREE), *y = nb_neg(c, x);
  nb_tensor_free(y);
  nb_tensor_free(y);
  /* a handle made after the release is not the released one: a stale free leaves it alone */
  nb_tensor *z = nb_add(c, x, x);
  nb_tensor_free(y);
  check_live(z, 6, TU_VALS(2, 4, 6, 8, 10, 12));
  /* in a scope: freed early, then the scope's end, then freed again */
  nb_scope_begin(c);
  nb_tensor *t = nb_neg(c, x);
  nb_tensor_free(t);
  nb_scope_end(c, NULL, 0);
  nb_tensor_free(t);
  assert_int_equal(nb_status(c), NB_OK);
  check_live(x, 6, TWO_THREE);
}

static void test_use_after_release(void **state) {
  nb_ctx *c = *state;
  nb_tensor *a = tu_make(c, NB_F32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3)), *b = nb_neg(c, a);
  nb_tensor_free(a);
  nb_tensor *fresh = nb_exp(c, b); /* made between the release and the misuse */
  assert_non_null(fresh);
  assert_null(nb_add(c, a, b));
  tu_check_error(c, NB_INVALID, "AddV2: input 0 was released", NULL);
  assert_null(nb_mul(c, b, a));
  tu_check_error(c, NB_INVALID, "Mul: input 1 was released", NULL);
  nb_scope_begin(c);
  nb_tensor *t = nb_neg(c, b);
  nb_scope_end(c, NULL, 0);
  assert_null(nb_tanh(c, t));
  tu_check_error(c, NB_INVALID, "Tanh: input 0 was released", NULL);
  assert_null(nb_indexed_slices(c, t, nb_tensor_from(c, NB_I32, 1, TU_SHAPE(3), NULL), TU_SHAPE(3), 1));
  tu_check_error(c, NB_INVALID, "nb_indexed_slices: values and indices", NULL);
  double v[3];
  assert_int_equal(nb_read(a, v, sizeof v), NB_INVALID);
  assert_true(isnan(nb_item(a, 0)));
  assert_null(nb_data(a));
}

/* A handle freed after its context: the context already released it. */
static void test_free_after_context(void **state) {
  (void)state;
  nb_ctx *d = nb_eager_new();
  nb_tensor *x = tu_make(d, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 2)), *y = nb_exp(d, x);
  nb_tensor_free(x);
  nb_ctx_free(d);
  nb_tensor_free(y);
  nb_tensor_free(x);
}

/* ---- session results and IndexedSlices parts -------------------------------------------------- */

static void test_session_result_double_free(void **state) {
  gu_fixture *f = *state;
  nb_tensor *p = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "p"), *y = nb_mul(f->c, p, p);
  nb_tensor *v = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3)), *r = NULL;
  assert_int_equal(nb_run(f->s, &p, &v, 1, &y, 1, &r), NB_OK);
  check_live(r, 3, TU_VALS(1, 4, 9));
  nb_tensor_free(r);
  nb_tensor_free(r);
  assert_null(nb_add(f->e, r, v));
  tu_check_error(f->e, NB_INVALID, "AddV2: input 0 was released", NULL);
  /* the next run's result is whole whatever the stale pointer does */
  nb_tensor *r2 = NULL;
  assert_int_equal(nb_run(f->s, &p, &v, 1, &y, 1, &r2), NB_OK);
  nb_tensor_free(r);
  check_live(r2, 3, TU_VALS(1, 4, 9));
  nb_tensor_free(r2);
}

/* Slices of values [2, 3] at rows 4 and 1 of a [5, 3] table. */
static nb_tensor *make_slices(nb_ctx *c) {
  nb_tensor *values = tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), TWO_THREE);
  nb_tensor *indices = nb_tensor_from(c, NB_I32, 1, TU_SHAPE(2), (const int32_t[]){4, 1});
  return nb_indexed_slices(c, values, indices, TU_SHAPE(5, 3), 2);
}

static void check_slices_dense(const nb_tensor *s) {
  check_live(s, 15, TU_VALS(0, 0, 0, 4, 5, 6, 0, 0, 0, 0, 0, 0, 1, 2, 3));
}

/* Freeing a part does nothing (the slices own it); freeing the slices frees both parts;
   any order, any number of times. */
static void free_parts_and_slices(nb_tensor *s) {
  nb_tensor *values = nb_indexed_slices_values(s), *indices = nb_indexed_slices_indices(s);
  nb_tensor_free(values);
  nb_tensor_free(indices);
  check_slices_dense(s);
  nb_tensor_free(s);
  nb_tensor_free(values);
  nb_tensor_free(s);
  nb_tensor_free(indices);
}

static void test_slices_parts_free(void **state) {
  nb_ctx *c = *state;
  free_parts_and_slices(make_slices(c));
  nb_tensor *s = make_slices(c), *values = nb_indexed_slices_values(s);
  nb_tensor_free(s); /* the slices first, then the part */
  nb_tensor_free(values);
  assert_null(nb_neg(c, values));
  tu_check_error(c, NB_INVALID, "Neg: input 0 was released", NULL);
}

static void test_session_slices_parts_free(void **state) {
  gu_fixture *f = *state;
  nb_tensor *s = make_slices(f->c), *r = NULL;
  assert_non_null(s);
  assert_int_equal(nb_run(f->s, NULL, NULL, 0, &s, 1, &r), NB_OK);
  assert_true(nb_is_indexed_slices(r));
  free_parts_and_slices(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_eager_double_free, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_use_after_release, tu_setup, tu_teardown),
      cmocka_unit_test(test_free_after_context),
      cmocka_unit_test_setup_teardown(test_session_result_double_free, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_slices_parts_free, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_session_slices_parts_free, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
