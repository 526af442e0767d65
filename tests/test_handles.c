/* Handle misuse is caught, not undefined: a second nb_tensor_free is a no-op, a released
   handle given to an op is an error, IndexedSlices parts belong to their slices, and a
   callback (loop body, branch, gradient function) that leaves a scope open or closes one
   it did not open fails its call instead of unbalancing the caller's scopes. */
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

/* ---- callbacks keep the scopes balanced -------------------------------------------------------- */

static nb_code below_three(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)user;
  *pred = nb_less(c, v[0], nb_scalar(c, NB_F64, 3));
  return nb_status(c);
}

static nb_code below_three_leaves_scope(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  nb_scope_begin(c);
  nb_scope_begin(c);
  return below_three(c, v, pred, user);
}

/* v + 1 after an nb_scope_begin without its end */
static nb_code body_leaves_scope(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)user;
  nb_scope_begin(c);
  next[0] = nb_add(c, v[0], nb_scalar(c, NB_F64, 1));
  return nb_status(c);
}

/* v + 1 after an nb_scope_end without a begin of its own */
static nb_code body_closes_outer_scope(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)user;
  nb_scope_end(c, NULL, 0);
  next[0] = nb_add(c, v[0], nb_scalar(c, NB_F64, 1));
  return NB_OK;
}

static void test_eager_while_unbalanced(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = nb_scalar(c, NB_F64, 0), *out = NULL;
  nb_scope_begin(c);
  int depth = c->nscopes;
  assert_int_equal(nb_while(c, below_three, body_leaves_scope, NULL, &x, 1, -1, &out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_while: body: the callback left 1 scope open", NULL);
  assert_int_equal(c->nscopes, depth);
  assert_null(out);
  assert_int_equal(nb_while(c, below_three_leaves_scope, body_leaves_scope, NULL, &x, 1, -1, &out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_while: cond: the callback left 2 scopes open", NULL);
  assert_int_equal(c->nscopes, depth);
  nb_scope_end(c, NULL, 0);
  assert_int_equal(nb_status(c), NB_OK);
  check_live(x, 1, TU_VALS(0));
}

static void test_eager_while_ends_outer_scope(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = nb_scalar(c, NB_F64, 0), *out = NULL;
  nb_scope_begin(c);
  nb_tensor *y = nb_scalar(c, NB_F64, 7);
  assert_int_equal(nb_while(c, below_three, body_closes_outer_scope, NULL, &x, 1, -1, &out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_scope_end without a matching nb_scope_begin", NULL);
  assert_int_equal(c->nscopes, 1);
  check_live(y, 1, TU_VALS(7)); /* the caller's scope is still open: y lives */
  nb_scope_end(c, NULL, 0);
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_eager_cond_unbalanced(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = nb_scalar(c, NB_F64, 1), *out = NULL, *yes = nb_scalar(c, NB_BOOL, 1);
  assert_int_equal(nb_cond(c, yes, body_leaves_scope, body_leaves_scope, NULL, &x, 1, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_cond: then branch: the callback left 1 scope open", NULL);
  assert_int_equal(c->nscopes, 0);
}

static void test_graph_while_unbalanced(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *out = NULL;
  assert_int_equal(nb_while(f->c, below_three, body_leaves_scope, NULL, &x, 1, -1, &out), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "nb_while: body: the callback left 1 scope open", NULL);
  nb_tensor *yes = nb_placeholder(f->c, NB_BOOL, 0, NULL, "yes");
  assert_int_equal(nb_cond(f->c, yes, body_leaves_scope, body_leaves_scope, NULL, &x, 1, &out, 1), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "nb_cond: then branch: the callback left 1 scope open", NULL);
}

/* y = x^2 with an open scope left behind when *user says so */
static nb_code square_fwd(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout;
  if (*(const int *)user == 1) nb_scope_begin(c);
  out[0] = nb_mul(c, in[0], in[0]);
  return nb_status(c);
}

/* dx = 2 x dy; *user 2 leaves a scope open, 3 closes one it did not open */
static nb_code square_grad(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor *const *out, int nout,
                           nb_tensor *const *dys, nb_tensor **dxs, void *user) {
  (void)nin, (void)out, (void)nout;
  int mode = *(const int *)user;
  if (mode == 2) nb_scope_begin(c);
  if (mode == 3) nb_scope_end(c, NULL, 0);
  dxs[0] = nb_mul(c, nb_scalar(c, NB_F64, 2), nb_mul(c, in[0], dys[0]));
  return nb_status(c);
}

/* The tape gradient of the custom square at x = 3 with the given misbehaviour. */
static nb_code custom_square_gradient(nb_ctx *c, int mode, nb_tensor **dx) {
  nb_tensor *x = nb_scalar(c, NB_F64, 3), *y = NULL;
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_code code = nb_custom_gradient(c, square_fwd, square_grad, &mode, &x, 1, &y, 1);
  if (!code) code = nb_tape_gradient(t, &y, 1, &x, 1, NULL, dx);
  nb_tape_end(t);
  return code;
}

static void test_custom_gradient_unbalanced(void **state) {
  nb_ctx *c = *state;
  nb_tensor *dx = NULL;
  assert_int_equal(custom_square_gradient(c, 0, &dx), NB_OK);
  check_live(dx, 1, TU_VALS(6));
  assert_int_equal(custom_square_gradient(c, 1, &dx), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_custom_gradient: forward function: the callback left 1 scope open", NULL);
  assert_int_equal(c->nscopes, 0);
  assert_int_equal(custom_square_gradient(c, 2, &dx), NB_INVALID);
  tu_check_error(c, NB_INVALID, "the gradient function of '_CustomGradient'", "left 1 scope open");
  assert_int_equal(c->nscopes, 0);
}

static void test_custom_gradient_ends_outer_scope(void **state) {
  nb_ctx *c = *state;
  nb_tensor *dx = NULL;
  nb_scope_begin(c);
  nb_tensor *kept = nb_scalar(c, NB_F64, 5);
  assert_int_equal(custom_square_gradient(c, 3, &dx), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_scope_end without a matching nb_scope_begin", NULL);
  assert_int_equal(c->nscopes, 1);
  check_live(kept, 1, TU_VALS(5));
  nb_scope_end(c, NULL, 0);
}

/* Sin's gradient, cos(x) dy, after an nb_scope_begin without its end. */
static nb_code sin_grad_leaves_scope(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_scope_begin(c);
  dxs[0] = nb_mul(c, dys[0], nb_cos(c, nb_fwd_input(op, 0)));
  return nb_status(c);
}

static void test_registered_gradient_unbalanced(void **state) {
  gu_fixture *f = *state;
  assert_int_equal(nb_register_gradient("TestSinLeavesScope", sin_grad_leaves_scope), NB_OK);
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x");
  assert_int_equal(nb_gradient_override_push(f->g, "Sin", "TestSinLeavesScope"), NB_OK);
  nb_tensor *y = nb_sin(f->c, x), *dx = NULL;
  nb_gradient_override_pop(f->g);
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "the gradient function of 'Sin' (op type: Sin) left 1 scope open", NULL);
  assert_int_equal(f->c->nscopes, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_eager_double_free, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_use_after_release, tu_setup, tu_teardown),
      cmocka_unit_test(test_free_after_context),
      cmocka_unit_test_setup_teardown(test_session_result_double_free, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_slices_parts_free, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_session_slices_parts_free, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_eager_while_unbalanced, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_eager_while_ends_outer_scope, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_eager_cond_unbalanced, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_while_unbalanced, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_custom_gradient_unbalanced, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_custom_gradient_ends_outer_scope, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_registered_gradient_unbalanced, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
