/* Variables in both modes: ownership past scopes, reads sharing the value, in-place and
   copy-on-write assigns, shape/dtype errors, gradients through reads (tape and graph),
   the tape's auto-watch of trainable variables, graph reads before updates within a run,
   persistence across runs, and a variable freed while a graph uses it. */
#include "graphutil.h"

/* A float64 variable of shape [n] with the given values. */
static nb_variable *var1(nb_ctx *c, int64_t n, const double *vals, bool trainable, const char *name) {
  nb_variable *v = nb_variable_new(c, tu_make(c, NB_F64, 1, &n, vals), trainable, name);
  assert_non_null(v);
  return v;
}

static void check_data(const nb_variable *v, int64_t n, const double *want) {
  const double *d = nb_variable_data(v);
  for (int64_t i = 0; i < n; i++)
    if (fabs(d[i] - want[i]) > 1e-15) fail_msg("element %lld: got %.17g, want %.17g", (long long)i, d[i], want[i]);
}

/* ---- eager ---------------------------------------------------------------------------------- */

static void test_new_read_accessors(void **state) {
  nb_ctx *c = *state, *other = nb_eager_new();
  nb_tensor *init = tu_make(other, NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4));
  nb_variable *v = nb_variable_new(c, init, true, "w");
  nb_ctx_free(other); /* the variable owns its value: it outlives the initial's context */
  assert_string_equal(nb_variable_name(v), "w");
  assert_true(nb_variable_trainable(v));
  assert_int_equal(nb_variable_dtype(v), NB_F32);
  assert_int_equal(nb_variable_rank(v), 2);
  assert_int_equal(nb_variable_shape(v)[1], 2);
  nb_scope_begin(c);
  nb_tensor *r = nb_variable_read(c, v);
  tu_check(r, NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4), 0);
  assert_ptr_equal(nb_data(r), nb_variable_data(v)); /* a read shares the value */
  nb_scope_end(c, NULL, 0);
  tu_check(nb_variable_read(c, v), NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4), 0); /* survives the scope */
  nb_variable *u = nb_variable_new(c, nb_scalar(c, NB_I32, 7), false, NULL);
  assert_string_equal(nb_variable_name(u), "Variable");
  assert_false(nb_variable_trainable(u));
  nb_variable_free(u);
  nb_variable_free(v);
  nb_variable_free(NULL);
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_assign_in_place_and_copy_on_write(void **state) {
  nb_ctx *c = *state;
  nb_variable *v = var1(c, 3, TU_VALS(1, 2, 3), true, "w");
  nb_scope_begin(c);
  nb_variable_assign(c, v, tu_make(c, NB_F64, 1, TU_SHAPE(3), TU_VALS(10, 20, 30)));
  nb_scope_end(c, NULL, 0);
  check_data(v, 3, TU_VALS(10, 20, 30));
  /* nothing else holds the value now: updates write in place */
  const void *before = nb_variable_data(v);
  nb_scope_begin(c);
  nb_variable_assign_add(c, v, tu_make(c, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 1, 1)));
  nb_scope_end(c, NULL, 0);
  nb_scope_begin(c);
  nb_variable_assign_sub(c, v, tu_make(c, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.5, 0.5, 0.5)));
  nb_scope_end(c, NULL, 0);
  assert_ptr_equal(nb_variable_data(v), before);
  check_data(v, 3, TU_VALS(10.5, 20.5, 30.5));
  /* a held read keeps the old value; the variable moves to a new buffer */
  nb_tensor *held = nb_variable_read(c, v);
  nb_tensor *now = nb_variable_assign_add(c, v, nb_variable_read(c, v)); /* v += v */
  tu_check_vals(held, TU_VALS(10.5, 20.5, 30.5), 0);
  tu_check_vals(now, TU_VALS(21, 41, 61), 0);
  check_data(v, 3, TU_VALS(21, 41, 61));
  assert_ptr_not_equal(nb_data(held), nb_variable_data(v));
  nb_variable_free(v);
  tu_check_vals(held, TU_VALS(10.5, 20.5, 30.5), 0); /* the read outlives the variable too */
  /* integer variables take assign_add */
  nb_variable *k = nb_variable_new(c, nb_scalar(c, NB_I64, 5), false, "k");
  tu_check_vals(nb_variable_assign_add(c, k, nb_scalar(c, NB_I64, 2)), TU_VALS(7), 0);
  nb_variable_free(k);
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_assign_errors(void **state) {
  nb_ctx *c = *state;
  nb_variable *v = var1(c, 3, TU_VALS(1, 2, 3), true, "weights");
  assert_null(nb_variable_assign(c, v, tu_make(c, NB_F64, 2, TU_SHAPE(3, 1), NULL)));
  tu_check_error(c, NB_SHAPE, "variable 'weights' has shape [3]", "the value has shape [3,1]");
  assert_null(nb_variable_assign_add(c, v, tu_make(c, NB_F32, 1, TU_SHAPE(3), NULL)));
  tu_check_error(c, NB_DTYPE, "'weights'", "dtype float32");
  nb_variable *b = nb_variable_new(c, tu_make(c, NB_BOOL, 1, TU_SHAPE(1), TU_VALS(1)), false, "flag");
  assert_null(nb_variable_assign_add(c, b, tu_make(c, NB_BOOL, 1, TU_SHAPE(1), TU_VALS(1))));
  tu_check_error(c, NB_DTYPE, "AssignAddVariableOp", "bool");
  assert_null(nb_variable_assign(c, v, NULL));
  tu_check_error(c, NB_INVALID, "AssignVariableOp", "NULL value");
  assert_null(nb_variable_new(c, NULL, true, "x"));
  tu_check_error(c, NB_INVALID, "nb_variable_new", "'x'");
  check_data(v, 3, TU_VALS(1, 2, 3)); /* failed assigns change nothing */
  /* a graph tensor is not an eager value */
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  assert_null(nb_variable_assign(c, v, nb_placeholder(gc, NB_F64, 1, TU_SHAPE(3), "p")));
  tu_check_error(c, NB_INVALID, "AssignVariableOp", "graph tensor");
  nb_variable *s = nb_variable_new(c, nb_placeholder(gc, NB_F64, 0, NULL, "q"), true, "sym");
  assert_null(s);
  tu_check_error(c, NB_INVALID, "'sym'", "concrete");
  nb_ctx_free(gc);
  nb_graph_free(g);
  nb_variable_free(b);
  nb_variable_free(v);
}

/* Internal attrs carry pointers: nb_op cannot set them, so it cannot build variable ops. */
static void test_nb_op_cannot_forge_variables(void **state) {
  nb_ctx *c = *state;
  nb_tensor *out = NULL;
  nb_attr a[2] = {nb_attr_type("dtype", NB_F32), nb_attr_int("_variable", 12345)};
  assert_int_equal(nb_op(c, "ReadVariableOp", NULL, 0, a, 2, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "'_variable'", "internal");
  assert_int_equal(nb_op(c, "ReadVariableOp", NULL, 0, a, 1, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "missing required attr '_variable'", NULL);
}

/* Every read has the variable's id: the gradient sums over reads, and the read itself or
   the variable can be the source. */
static void test_tape_gradient_through_reads(void **state) {
  nb_ctx *c = *state;
  nb_variable *w = var1(c, 3, TU_VALS(1, 2, 3), true, "w");
  nb_tensor *x = tu_make(c, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.5, -1, 2));
  nb_tape *t = nb_tape_begin(c, 1);
  nb_tensor *r1 = nb_variable_read(c, w), *r2 = nb_variable_read(c, w);
  nb_tensor *y = nb_add(c, nb_sum(c, nb_mul(c, r1, x), NULL, 0, false), nb_sum(c, nb_square(c, r2), NULL, 0, false));
  nb_tensor *dw = NULL, *dr = NULL;
  assert_int_equal(nb_tape_gradient_vars(t, &y, 1, &w, 1, &dw), NB_OK);
  tu_check(dw, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.5 + 2, -1 + 4, 2 + 6), 1e-15); /* x + 2 w */
  assert_int_equal(nb_tape_gradient(t, &y, 1, &r1, 1, NULL, &dr), NB_OK);
  tu_check_vals(dr, TU_VALS(2.5, 3, 8), 1e-15);
  nb_tape_end(t);
  /* a tape that read the value keeps it: an assign after the forward pass does not change
     the gradient */
  t = nb_tape_begin(c, 0);
  y = nb_sum(c, nb_square(c, nb_variable_read(c, w)), NULL, 0, false);
  nb_variable_assign(c, w, tu_make(c, NB_F64, 1, TU_SHAPE(3), TU_VALS(100, 100, 100)));
  assert_int_equal(nb_tape_gradient_vars(t, &y, 1, &w, 1, &dw), NB_OK);
  tu_check_vals(dw, TU_VALS(2, 4, 6), 1e-15);
  nb_tape_end(t);
  assert_int_equal(nb_tape_gradient_vars(NULL, &y, 1, &w, 1, &dw), NB_INVALID);
  nb_variable_free(w);
}

static void test_auto_watch(void **state) {
  nb_ctx *c = *state;
  nb_variable *w = var1(c, 2, TU_VALS(1, 2), true, "w"), *k = var1(c, 2, TU_VALS(3, 4), false, "k");
  nb_variable *both[2] = {w, k};
  nb_tensor *d[2];
  /* default: trainable variables are watched, non-trainable ones are not */
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tensor *y = nb_sum(c, nb_mul(c, nb_variable_read(c, w), nb_variable_read(c, k)), NULL, 0, false);
  assert_int_equal(nb_tape_gradient_vars(t, &y, 1, both, 2, d), NB_OK);
  tu_check_vals(d[0], TU_VALS(3, 4), 0);
  assert_null(d[1]);
  nb_tape_end(t);
  /* turned off: nothing is watched unless asked; an explicit watch still works */
  t = nb_tape_begin(c, 0);
  nb_tape_set_watch_accessed_variables(t, false);
  nb_tensor *rk = nb_variable_read(c, k);
  nb_tape_watch(t, rk);
  y = nb_sum(c, nb_mul(c, nb_variable_read(c, w), rk), NULL, 0, false);
  assert_int_equal(nb_tape_gradient_vars(t, &y, 1, both, 2, d), NB_OK);
  assert_null(d[0]);
  tu_check_vals(d[1], TU_VALS(1, 2), 0);
  nb_tape_end(t);
  /* a paused tape does not watch either */
  t = nb_tape_begin(c, 0);
  nb_tape_stop_recording(t);
  nb_tensor *r = nb_variable_read(c, w);
  nb_tape_resume_recording(t);
  y = nb_sum(c, r, NULL, 0, false);
  assert_int_equal(nb_tape_gradient_vars(t, &y, 1, &w, 1, d), NB_OK);
  assert_null(d[0]);
  nb_tape_end(t);
  /* errors */
  t = nb_tape_begin(c, 0);
  nb_variable *none = NULL;
  assert_int_equal(nb_tape_gradient_vars(t, &y, 1, &none, 1, d), NB_INVALID);
  tu_check_error(c, NB_INVALID, "nb_tape_gradient_vars", "vars[0] is NULL");
  nb_tape_end(t);
  nb_variable_free(w);
  nb_variable_free(k);
}

/* ---- graphs ---------------------------------------------------------------------------------- */

static void test_graph_reads_share_one_node(void **state) {
  gu_fixture *f = *state;
  nb_variable *w = var1(f->e, 2, TU_VALS(1, 2), true, "w");
  nb_tensor *r1 = nb_variable_read(f->c, w), *r2 = nb_variable_read(f->c, w);
  assert_true(nb_is_symbolic(r1));
  assert_string_equal(nb_tensor_node_name(r1), "w_read");
  assert_string_equal(nb_tensor_node_name(r2), "w_read");
  assert_null(nb_constant_value(r1)); /* never folded: the value is read at run time */
  nb_tensor *y = nb_mul(f->c, r1, r2);
  nb_tensor *out = gu_run1(f, NULL, NULL, y);
  tu_check_vals(out, TU_VALS(1, 4), 0);
  nb_tensor_free(out);
  /* the value is read when the node runs, not when the graph was built */
  nb_variable_assign(f->e, w, tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, 4)));
  out = gu_run1(f, NULL, NULL, y);
  tu_check_vals(out, TU_VALS(9, 16), 0);
  nb_tensor_free(out);
  nb_variable_free(w);
  assert_int_equal(nb_status(f->c), NB_OK);
}

/* Updates persist across runs; in one run every read sees the value from its start. */
static void test_graph_updates_after_reads(void **state) {
  gu_fixture *f = *state;
  nb_variable *w = var1(f->e, 2, TU_VALS(1, 2), true, "w");
  nb_tensor *r = nb_variable_read(f->c, w);
  nb_tensor *doubled = nb_mul(f->c, r, nb_scalar(f->c, NB_F64, 2));
  nb_tensor *inc = nb_variable_assign_add(f->c, w, nb_fill(f->c, TU_SHAPE(2), 1, nb_scalar(f->c, NB_F64, 1)));
  assert_string_equal(nb_tensor_node_name(inc), "w_assign_add");
  check_data(w, 2, TU_VALS(1, 2)); /* building an update changes nothing (never folded) */
  nb_tensor *fetch[3] = {r, doubled, inc}, *out[3];
  for (int run = 0; run < 3; run++) {
    assert_int_equal(nb_run(f->s, NULL, NULL, 0, fetch, 3, out), NB_OK);
    tu_check_vals(out[0], TU_VALS(1 + run, 2 + run), 0); /* the value at the run's start */
    tu_check_vals(out[1], TU_VALS(2 * (1 + run), 2 * (2 + run)), 0);
    tu_check_vals(out[2], TU_VALS(2 + run, 3 + run), 0); /* the update's output: the new value */
    for (int i = 0; i < 3; i++) nb_tensor_free(out[i]);
  }
  check_data(w, 2, TU_VALS(4, 5));
  /* an update computed from the read: w = w - 0.5 w, and assign */
  nb_tensor *half = nb_variable_assign_sub(f->c, w, nb_mul(f->c, r, nb_scalar(f->c, NB_F64, 0.5)));
  out[0] = gu_run1(f, NULL, NULL, half);
  tu_check_vals(out[0], TU_VALS(2, 2.5), 0);
  nb_tensor_free(out[0]);
  nb_tensor *set = nb_variable_assign(f->c, w, nb_tensor_from(f->c, NB_F64, 1, TU_SHAPE(2), TU_VALS(7, 8)));
  nb_tensor_free(gu_run1(f, NULL, NULL, set));
  check_data(w, 2, TU_VALS(7, 8));
  nb_variable_free(w);
}

static void test_graph_gradient_through_read(void **state) {
  gu_fixture *f = *state;
  nb_variable *w = var1(f->e, 3, TU_VALS(1, 2, 3), true, "w");
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *r = nb_variable_read(f->c, w);
  nb_tensor *y = nb_add(f->c, nb_sum(f->c, nb_mul(f->c, r, x), NULL, 0, false),
                        nb_sum(f->c, nb_square(f->c, nb_variable_read(f->c, w)), NULL, 0, false));
  nb_tensor *dw = NULL;
  assert_int_equal(nb_gradients(f->c, &y, 1, &r, 1, NULL, &dw), NB_OK);
  nb_tensor *out = gu_run1(f, x, tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.5, -1, 2)), dw);
  tu_check_vals(out, TU_VALS(2.5, 3, 8), 1e-15);
  nb_tensor_free(out);
  nb_variable_free(w);
}

static void test_graph_errors_and_freed_variable(void **state) {
  gu_fixture *f = *state;
  nb_variable *w = var1(f->e, 2, TU_VALS(1, 2), true, "w");
  assert_null(nb_variable_assign(f->c, w, nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "p")));
  tu_check_error(f->c, NB_SHAPE, "variable 'w' has shape [2]", "the value has shape [3]");
  /* unknown dims are checked when the node runs */
  nb_tensor *p = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(-1), "q");
  nb_tensor *set = nb_variable_assign(f->c, w, p), *out = NULL;
  assert_non_null(set);
  nb_tensor *bad = tu_make(f->e, NB_F64, 1, TU_SHAPE(4), NULL);
  assert_int_equal(nb_run(f->s, &p, &bad, 1, &set, 1, &out), NB_SHAPE);
  assert_non_null(strstr(nb_session_error(f->s), "variable 'w' has shape [2]"));
  check_data(w, 2, TU_VALS(1, 2));
  /* the graph keeps the freed variable's record: running it is an error, not a crash */
  nb_tensor *y = nb_add(f->c, nb_variable_read(f->c, w), nb_scalar(f->c, NB_F64, 1));
  nb_variable_free(w);
  assert_int_equal(nb_run(f->s, NULL, NULL, 0, &y, 1, &out), NB_INVALID);
  assert_non_null(strstr(nb_session_error(f->s), "variable 'w' was freed"));
  assert_int_equal(nb_run(f->s, &p, &bad, 1, &set, 1, &out), NB_INVALID);
  assert_null(out);
}

/* A graph refuses a value, indices or updates that cannot fit the variable when it is
   built, though their dims (or rank) are unknown; one that fits gives the variable's shape. */
static void test_graph_validation(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->c;
  nb_variable *v = nb_variable_new(f->e, tu_make(f->e, NB_F32, 2, TU_SHAPE(2, 3), NULL), true, "v");
  nb_variable *flags = nb_variable_new(f->e, tu_make(f->e, NB_BOOL, 1, TU_SHAPE(2), NULL), false, "flags");
  assert_null(nb_variable_assign(c, v, tu_unknown_dims(c, NB_F64, 2)));
  tu_check_error(c, NB_DTYPE, "AssignVariableOp (node 'v_assign')", "variable 'v' has shape [2,3] and dtype float32");
  assert_null(nb_variable_assign_add(c, v, nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 4), "wide")));
  tu_check_error(c, NB_SHAPE, "AssignAddVariableOp (node", "the value has shape [-1,4]");
  assert_null(nb_variable_assign_sub(c, flags, tu_unknown_rank(c, NB_BOOL)));
  tu_check_error(c, NB_DTYPE, "AssignSubVariableOp (node", "input 0 has dtype bool");
  assert_null(nb_variable_scatter_add(c, v, tu_unknown_dims(c, NB_F32, 1), tu_unknown_dims(c, NB_F32, 2)));
  tu_check_error(c, NB_DTYPE, "ResourceScatterAdd (node", "input 0 has dtype float32");
  assert_null(nb_variable_scatter_sub(c, v, tu_unknown_dims(c, NB_I32, 1),
                                      nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 4), "rows")));
  tu_check_error(c, NB_SHAPE, "ResourceScatterSub (node",
                 "must have shape indices.shape [-1] + variable 'v' row shape [3]");
  tu_check_shape(nb_variable_assign(c, v, tu_unknown_dims(c, NB_F32, 2)), NB_F32, 2, TU_SHAPE(2, 3));
  tu_check_shape(nb_variable_scatter_add(c, v, tu_unknown_rank(c, NB_I64), tu_unknown_rank(c, NB_F32)), NB_F32, 2,
                 TU_SHAPE(2, 3));
  assert_int_equal(nb_status(c), NB_OK);
  nb_variable_free(v); /* the graph keeps them until it is freed */
  nb_variable_free(flags);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_graph_validation, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_new_read_accessors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_assign_in_place_and_copy_on_write, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_assign_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_nb_op_cannot_forge_variables, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_tape_gradient_through_reads, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_auto_watch, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_reads_share_one_node, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_updates_after_reads, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_gradient_through_read, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_errors_and_freed_variable, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
