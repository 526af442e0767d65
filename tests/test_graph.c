/* Graph IR, the graph context and sessions. */
#include "graphutil.h"

#include "../src/runtime/runtime.h" /* nbrt_session_place_fetches */

#include <stdio.h>

#ifndef M_E
#define M_E 2.71828182845904523536
#endif

static void test_build_and_run(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(2, 3), "x");
  nb_tensor *y = nb_tanh(f->c, nb_add(f->c, nb_mul(f->c, x, nb_scalar(f->c, NB_F32, 2)), nb_scalar(f->c, NB_F32, 1)));
  const int axes[1] = {1};
  nb_tensor *s = nb_sum(f->c, y, axes, 1, false);
  assert_int_equal(nb_status(f->c), NB_OK);
  assert_true(nb_is_symbolic(s));
  tu_check_shape(s, NB_F32, 1, TU_SHAPE(2));
  assert_string_equal(nb_tensor_node_name(x), "x");
  assert_string_equal(nb_tensor_node_name(y), "Tanh");
  nb_tensor *xv = tu_make(f->e, NB_F32, 2, TU_SHAPE(2, 3), TU_VALS(0, 1, -1, 0.5, 2, -0.5));
  for (int rep = 0; rep < 3; rep++) { /* the cached plan runs the same */
    nb_tensor *r = gu_run1(f, x, xv, s);
    double want0 = tanh(1) + tanh(3) + tanh(-1), want1 = tanh(2) + tanh(5) + tanh(0);
    tu_check(r, NB_F32, 1, TU_SHAPE(2), TU_VALS(want0, want1), 1e-6);
    nb_tensor_free(r);
  }
}

/* The node accessors see nodes in the order they were added, with TF's op types, output
   counts and data consumers (control inputs are not data). */
static void test_node_accessors(void **state) {
  gu_fixture *f = *state;
  int first = nb_graph_num_nodes(f->g);
  nb_tensor *x = nb_placeholder(f->c, NB_I32, 1, TU_SHAPE(-1), "x");
  nb_tensor *y = nb_neg(f->c, x), *out[2], *in[2] = {y, y};
  assert_int_equal(nb_op(f->c, "BroadcastGradientArgs", in, 2, NULL, 0, out, 2), NB_OK);
  assert_int_equal(nb_add_control_input(out[0], y), NB_OK);
  assert_int_equal(nb_graph_num_nodes(f->g), first + 3);
  assert_string_equal(nb_graph_node_name(f->g, first), "x");
  assert_string_equal(nb_graph_node_op(f->g, first), "Placeholder");
  assert_string_equal(nb_graph_node_op(f->g, first + 1), "Neg");
  assert_string_equal(nb_graph_node_name(f->g, first + 2), "BroadcastGradientArgs");
  assert_int_equal(nb_graph_node_num_outputs(f->g, first + 2), 2);
  assert_int_equal(nb_graph_node_num_consumers(f->g, first), 1);
  assert_int_equal(nb_graph_node_num_consumers(f->g, first + 1), 2);
  assert_int_equal(nb_graph_node_num_consumers(f->g, first + 2), 0);
  assert_null(nb_graph_node_name(f->g, first + 3));
  assert_null(nb_graph_node_op(f->g, -1));
  assert_int_equal(nb_graph_node_num_outputs(f->g, first + 3), -1);
  assert_int_equal(nb_graph_node_num_consumers(NULL, 0), -1);
}

static void test_names_and_scopes(void **state) {
  gu_fixture *f = *state;
  nb_tensor *a = nb_scalar(f->c, NB_F64, 1);
  nb_tensor *m1 = nb_mul(f->c, a, a);
  nb_tensor *m2 = nb_mul(f->c, a, a);
  assert_string_equal(nb_tensor_node_name(m1), "Mul");
  assert_string_equal(nb_tensor_node_name(m2), "Mul_1");
  assert_int_equal(nb_name_scope_push(f->g, "layer"), NB_OK);
  nb_tensor *m3 = nb_mul(f->c, a, a);
  assert_int_equal(nb_name_scope_push(f->g, "inner"), NB_OK);
  nb_tensor *m4 = nb_mul(f->c, a, a);
  nb_name_scope_pop(f->g);
  nb_name_scope_pop(f->g);
  nb_tensor *m5 = nb_mul(f->c, a, a);
  assert_string_equal(nb_tensor_node_name(m3), "layer/Mul");
  assert_string_equal(nb_tensor_node_name(m4), "layer/inner/Mul");
  assert_string_equal(nb_tensor_node_name(m5), "Mul_2");
  assert_int_equal(nb_name_scope_push(f->g, "a/b"), NB_INVALID);
  assert_int_equal(nb_name_scope_push(f->g, ""), NB_INVALID);
  /* scope names are unique like node names (TF's name_scope) */
  assert_int_equal(nb_name_scope_push(f->g, "layer"), NB_OK);
  nb_tensor *m6 = nb_mul(f->c, a, a);
  nb_name_scope_pop(f->g);
  assert_string_equal(nb_tensor_node_name(m6), "layer_1/Mul");
  /* explicit names are leaves */
  assert_null(nb_placeholder(f->c, NB_F32, 0, NULL, "a/b"));
  tu_check_error(f->c, NB_INVALID, "node name 'a/b' must be non-empty without '/'", NULL);
}

/* nb_name_next names the next node (TF's name= argument), made unique in its scope like
   the default names; names find tensors again. */
static void test_named_nodes(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(1, 2), "x");
  nb_tensor *w = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 2), "w");
  assert_int_equal(nb_name_next(f->c, "xw"), NB_OK);
  nb_tensor *xw = nb_matmul(f->c, x, w, false, false);
  nb_tensor *plain = nb_matmul(f->c, x, w, false, false); /* consumed: the default again */
  assert_int_equal(nb_name_next(f->c, "xw"), NB_OK);
  nb_tensor *xw1 = nb_matmul(f->c, x, w, false, false);
  assert_int_equal(nb_name_scope_push(f->g, "layer"), NB_OK);
  assert_int_equal(nb_name_next(f->c, "xw"), NB_OK);
  nb_tensor *scoped = nb_tanh(f->c, xw);
  nb_name_scope_pop(f->g);
  assert_string_equal(nb_tensor_node_name(xw), "xw");
  assert_string_equal(nb_tensor_node_name(plain), "MatMul");
  assert_string_equal(nb_tensor_node_name(xw1), "xw_1");
  assert_string_equal(nb_tensor_node_name(scoped), "layer/xw");
  /* fetched by name: "node" or "node:output" */
  nb_tensor *found = nb_graph_tensor_by_name(f->c, "xw_1"), *parts[2];
  assert_non_null(found);
  assert_string_equal(nb_tensor_node_name(found), "xw_1");
  assert_int_equal(nb_unpack(f->c, w, 0, 2, parts), NB_OK);
  found = nb_graph_tensor_by_name(f->c, "Unpack:1");
  assert_int_equal(nb_tensor_output_index(found), 1);
  tu_check_shape(found, NB_F64, 1, TU_SHAPE(2));
  nb_tensor *xv = tu_make(f->e, NB_F64, 2, TU_SHAPE(1, 2), TU_VALS(1, 2));
  nb_tensor *wv = tu_make(f->e, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(1, 10, 100, 1000));
  nb_tensor *feed[2] = {nb_graph_tensor_by_name(f->c, "x:0"), nb_graph_tensor_by_name(f->c, "w")}, *vals[2] = {xv, wv};
  nb_tensor *fetch = nb_graph_tensor_by_name(f->c, "layer/xw"), *out;
  assert_int_equal(nb_run(f->s, feed, vals, 2, &fetch, 1, &out), NB_OK);
  tu_check(out, NB_F64, 2, TU_SHAPE(1, 2), TU_VALS(tanh(201), tanh(2010)), 1e-12);
  nb_tensor_free(out);
  assert_null(nb_graph_tensor_by_name(f->c, "nothing"));
  tu_check_error(f->c, NB_NOT_FOUND, "nb_graph_tensor_by_name: no node 'nothing' in the graph", NULL);
  assert_null(nb_graph_tensor_by_name(f->c, "xw:1"));
  tu_check_error(f->c, NB_NOT_FOUND, "node 'xw' (op type: MatMul) has 1 output, no output 1", NULL);
  assert_null(nb_graph_tensor_by_name(f->c, "xw:one"));
  tu_check_error(f->c, NB_INVALID, "'xw:one'", NULL);
  assert_null(nb_graph_tensor_by_name(f->e, "xw"));
  tu_check_error(f->e, NB_INVALID, "graph context", NULL);
}

/* Names follow TF's node name rule, without '/' (scopes make paths); eager contexts ignore
   names (TF's eager mode does); NULL cancels a pending name. */
static void test_named_nodes_misuse(void **state) {
  gu_fixture *f = *state;
  const char *bad[] = {"", "_hidden", "-x", "a b", "a/b", "tab\t", "caf\xc3\xa9"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    assert_int_equal(nb_name_next(f->c, bad[i]), NB_INVALID);
    tu_check_error(f->c, NB_INVALID, "is not a valid node name", NULL);
  }
  char long_name[300];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  assert_int_equal(nb_name_next(f->c, long_name), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "longer than 255", NULL);
  const char *good[] = {"0", ".hidden", "A.b-c_d>e", "x"};
  nb_tensor *a = nb_scalar(f->c, NB_F64, 1);
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    char name[16];
    snprintf(name, sizeof name, "%s", good[i]); /* copied: the pending name outlives the caller's string */
    assert_int_equal(nb_name_next(f->c, name), NB_OK);
    memset(name, '?', sizeof name - 1);
    assert_string_equal(nb_tensor_node_name(nb_neg(f->c, a)), good[i]);
  }
  assert_int_equal(nb_name_next(f->c, "dropped"), NB_OK);
  assert_int_equal(nb_name_next(f->c, NULL), NB_OK);
  assert_string_equal(nb_tensor_node_name(nb_neg(f->c, a)), "Neg");
  /* a placeholder's own name wins over a pending one, which it drops */
  assert_int_equal(nb_name_next(f->c, "input"), NB_OK);
  assert_string_equal(nb_tensor_node_name(nb_placeholder(f->c, NB_F64, 0, NULL, NULL)), "input");
  assert_int_equal(nb_name_next(f->c, "dropped"), NB_OK);
  assert_string_equal(nb_tensor_node_name(nb_placeholder(f->c, NB_F64, 0, NULL, "own")), "own");
  assert_string_equal(nb_tensor_node_name(nb_neg(f->c, a)), "Neg_1");
  assert_int_equal(nb_name_next(f->e, "ignored"), NB_OK);
  assert_non_null(nb_neg(f->e, nb_scalar(f->e, NB_F64, 1)));
  assert_int_equal(nb_name_next(NULL, "x"), NB_INVALID);
  /* a failed context keeps its error and names nothing */
  assert_null(nb_placeholder(f->c, NB_F32, 0, NULL, "a/b"));
  assert_int_equal(nb_name_next(f->c, "later"), NB_INVALID);
  nb_clear_error(f->c);
  assert_string_equal(nb_tensor_node_name(nb_neg(f->c, a)), "Neg_2");
}

static void test_build_errors_name_the_node(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(2, 3), "x");
  nb_tensor *w = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(4, 5), "w");
  assert_int_equal(nb_name_scope_push(f->g, "dense"), NB_OK);
  assert_null(nb_matmul(f->c, x, w, false, false));
  nb_name_scope_pop(f->g);
  tu_check_error(f->c, NB_SHAPE, "MatMul (node 'dense/MatMul')",
                 "Matrix size-incompatible: In[0]: [2,3], In[1]: [4,5]");
  assert_null(nb_add(f->c, x, nb_scalar(f->c, NB_F64, 1)));
  tu_check_error(f->c, NB_DTYPE, "AddV2 (node 'AddV2')", "float32 and float64");
  /* graph tensors are no eager values */
  assert_null(nb_add(f->e, x, nb_tensor_from(f->e, NB_F32, 2, TU_SHAPE(2, 3), NULL)));
  tu_check_error(f->e, NB_INVALID, "AddV2: input 0 is a graph tensor ('x')", NULL);
  nb_tensor *unknown = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(-1), "u");
  assert_null(nb_zeros_like(f->e, unknown));
  tu_check_error(f->e, NB_INVALID, "ZerosLike: input 0 is a graph tensor ('u')", NULL);
  /* placeholders are graph-only */
  assert_null(nb_placeholder(f->e, NB_F32, 0, NULL, "p"));
  tu_check_error(f->e, NB_INVALID, "Placeholder", "only in graph contexts");
  /* a tensor of another graph */
  nb_graph *g2 = nb_graph_new();
  nb_ctx *c2 = nb_graph_ctx_new(g2);
  nb_tensor *other = nb_placeholder(c2, NB_F32, 2, TU_SHAPE(2, 3), "other");
  assert_null(nb_add(f->c, x, other));
  tu_check_error(f->c, NB_INVALID, "input 1 belongs to another graph", NULL);
  nb_ctx_free(c2);
  nb_graph_free(g2);
}

static void test_session_errors(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(2, -1), "x");
  nb_tensor *u = nb_placeholder(f->c, NB_I32, 0, NULL, "unused");
  nb_tensor *y = nb_exp(f->c, x);
  nb_tensor *out[1];
  /* unfed placeholder */
  assert_int_equal(nb_run(f->s, NULL, NULL, 0, &y, 1, out), NB_INVALID);
  assert_non_null(strstr(nb_session_error(f->s),
                         "You must feed a value for placeholder tensor 'x' with dtype float32 and shape [2,-1]"));
  /* wrong feed shape and dtype */
  nb_tensor *bad = tu_make(f->e, NB_F32, 2, TU_SHAPE(3, 3), NULL);
  assert_int_equal(nb_run(f->s, &x, &bad, 1, &y, 1, out), NB_SHAPE);
  assert_non_null(
      strstr(nb_session_error(f->s), "Cannot feed value of shape [3,3] for Tensor 'x:0', which has shape [2,-1]"));
  nb_tensor *badt = tu_make(f->e, NB_F64, 2, TU_SHAPE(2, 3), NULL);
  assert_int_equal(nb_run(f->s, &x, &badt, 1, &y, 1, out), NB_DTYPE);
  assert_non_null(strstr(nb_session_error(f->s), "Cannot feed value of dtype float64 for Tensor 'x:0'"));
  /* the unused placeholder need not be fed; unknown dims take the fed size */
  nb_tensor *good = tu_make(f->e, NB_F32, 2, TU_SHAPE(2, 4), TU_VALS(0, 0, 0, 0, 1, 1, 1, 1));
  nb_tensor *r = gu_run1(f, x, good, y);
  tu_check(r, NB_F32, 2, TU_SHAPE(2, 4), TU_VALS(1, 1, 1, 1, M_E, M_E, M_E, M_E), 1e-6);
  nb_tensor_free(r);
  (void)u;
  /* a fetch from nowhere, NULL arrays */
  nb_tensor *eager = nb_scalar(f->e, NB_F32, 1);
  assert_int_equal(nb_run(f->s, NULL, NULL, 0, &eager, 1, out), NB_INVALID);
  assert_int_equal(nb_run(f->s, NULL, NULL, 0, &y, 1, NULL), NB_INVALID);
  assert_int_equal(nb_run(NULL, NULL, NULL, 0, &y, 1, out), NB_INVALID);
}

/* A run-time kernel error names the node and leaves the session usable. */
static void test_runtime_error(void **state) {
  gu_fixture *f = *state;
  nb_tensor *p = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(3), "params");
  nb_tensor *i = nb_placeholder(f->c, NB_I32, 1, TU_SHAPE(2), "idx");
  assert_int_equal(nb_name_scope_push(f->g, "lookup"), NB_OK);
  nb_tensor *gth = nb_gather(f->c, p, i, 0, 0);
  nb_name_scope_pop(f->g);
  nb_tensor *feeds[2] = {p, i};
  nb_tensor *vals[2] = {tu_make(f->e, NB_F32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3)),
                        tu_make(f->e, NB_I32, 1, TU_SHAPE(2), TU_VALS(0, 7))};
  nb_tensor *out[1];
  assert_int_equal(nb_run(f->s, feeds, vals, 2, &gth, 1, out), NB_INVALID);
  assert_null(out[0]);
  assert_non_null(strstr(nb_session_error(f->s), "GatherV2 (node 'lookup/GatherV2')"));
  assert_non_null(strstr(nb_session_error(f->s), "indices[1] = 7 is not in [0, 3)"));
  vals[1] = tu_make(f->e, NB_I32, 1, TU_SHAPE(2), TU_VALS(2, 0));
  assert_int_equal(nb_run(f->s, feeds, vals, 2, &gth, 1, out), NB_OK);
  tu_check(out[0], NB_F32, 1, TU_SHAPE(2), TU_VALS(3, 1), 0);
  nb_tensor_free(out[0]);
}

static void test_cycle(void **state) {
  gu_fixture *f = *state;
  nb_tensor *a = nb_placeholder(f->c, NB_F32, 0, NULL, "a"); /* not foldable */
  nb_tensor *b = nb_neg(f->c, a);
  nb_tensor *c = nb_exp(f->c, b);
  assert_int_equal(nb_add_control_input(b, c), NB_OK); /* b waits for c, which needs b */
  nb_tensor *out[1], *av = nb_scalar(f->e, NB_F32, 1);
  assert_int_equal(nb_run(f->s, &a, &av, 1, &c, 1, out), NB_INVALID);
  assert_non_null(strstr(nb_session_error(f->s), "Graph has a cycle through node"));
  assert_int_equal(nb_add_control_input(b, NULL), NB_INVALID);
}

/* Control inputs order side effects: fetching c also runs d's node first. */
static void test_control_input_runs(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 0, NULL, "x");
  nb_tensor *d = nb_sqrt(f->c, x);
  nb_tensor *c = nb_neg(f->c, x);
  assert_int_equal(nb_add_control_input(c, d), NB_OK);
  nb_tensor *r = gu_run1(f, x, nb_scalar(f->e, NB_F32, 4), c);
  tu_check(r, NB_F32, 0, NULL, TU_VALS(-4), 0);
  nb_tensor_free(r);
}

/* A placeholder whose only consumer was folded at build time need not be fed. */
static void test_folded_needs_no_feed(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(3, 5), "x");
  nb_tensor *shape = nb_shape_op(f->c, x, NB_I32);
  assert_non_null(nb_constant_value(shape));
  nb_tensor *r = gu_run1(f, NULL, NULL, shape);
  tu_check(r, NB_I32, 1, TU_SHAPE(2), TU_VALS(3, 5), 0);
  nb_tensor_free(r);
}

/* Constants fold: shapes computed from static shapes are static, and results from a
   session outlive it. */
static void test_folding_and_ownership(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(4, 6), "x");
  nb_tensor *shape = nb_shape_op(f->c, x, NB_I64);
  nb_tensor *half = nb_real_div(f->c, shape, nb_scalar(f->c, NB_I64, 2)); /* folded: [2,3] */
  nb_tensor *y;
  nb_tensor *ins[2] = {x, half};
  assert_int_equal(nb_op(f->c, "Tile", ins, 2, NULL, 0, &y, 1), NB_OK);
  tu_check_shape(y, NB_F64, 2, TU_SHAPE(8, 18)); /* static thanks to folding */
  double v[24];
  for (int i = 0; i < 24; i++) v[i] = i;
  nb_tensor *xv = nb_tensor_from(f->e, NB_F64, 2, TU_SHAPE(4, 6), v);
  nb_tensor *r = gu_run1(f, x, xv, half);
  nb_session_free(f->s);
  f->s = nb_session_new(f->g);
  tu_check(r, NB_I64, 1, TU_SHAPE(2), TU_VALS(2, 3), 0);
  nb_tensor_free(r);
  nb_tensor *t = gu_run1(f, x, xv, y);
  assert_true(nb_item(t, 18 * 5 + 7) == v[6 + 1]); /* row 5 -> 1, col 7 -> 1 */
  nb_tensor_free(t);
}

/* Unknown dims defer shapes to run time; errors then come from the run. */
static void test_unknown_dims(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(-1, 3), "x");
  nb_tensor *w = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(3, 2), "w");
  nb_tensor *y = nb_relu(f->c, nb_matmul(f->c, x, w, false, false));
  assert_int_equal(nb_status(f->c), NB_OK);
  tu_check_shape(y, NB_F32, 2, TU_SHAPE(-1, 2)); /* the batch dim stays unknown, the rest is known */
  const int64_t flat[1] = {-1};
  assert_int_equal(nb_rank(nb_reshape(f->c, x, flat, 1)), 1);
  assert_int_equal(nb_shape(nb_reshape(f->c, x, flat, 1))[0], -1); /* 3 * unknown */
  const int axis0[1] = {0};
  tu_check_shape(nb_sum(f->c, x, axis0, 1, false), NB_F32, 1, TU_SHAPE(3));
  /* dims that could clamp or vanish with the unknown size stay unknown */
  nb_tensor *p = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(-1), "p");
  nb_tensor *head =
      nb_strided_slice(f->c, p, (const int64_t[]){0}, (const int64_t[]){5}, (const int64_t[]){1}, 1, NULL);
  tu_check_shape(head, NB_F32, 1, TU_SHAPE(-1));
  nb_tensor *q = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(-1, 1), "q");
  assert_int_equal(nb_rank(nb_squeeze(f->c, q, NULL, 0)), -1);
  /* a mismatch that only the unknown dim could hide is left to run time */
  assert_int_equal(nb_rank(nb_add(f->c, x, p)), -1);
  assert_int_equal(nb_status(f->c), NB_OK);
  /* known dims that cannot broadcast fail the build, whatever the unknown dim */
  nb_tensor *v = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(4), "v");
  assert_null(nb_add(f->c, x, v));
  tu_check_error(f->c, NB_SHAPE, "AddV2 (node 'AddV2_1'): Incompatible shapes: [-1,3] vs. [4]", NULL);
  assert_int_equal(nb_dtype_of(nb_less(f->c, y, y)), NB_BOOL);
  assert_int_equal(nb_dtype_of(nb_cast(f->c, y, NB_I64)), NB_I64);
  nb_tensor *feeds[2] = {x, w};
  nb_tensor *vals[2] = {tu_make(f->e, NB_F32, 2, TU_SHAPE(1, 3), TU_VALS(1, 2, 3)),
                        tu_make(f->e, NB_F32, 2, TU_SHAPE(3, 2), TU_VALS(1, -1, 1, -1, 1, -1))};
  nb_tensor *out[1];
  assert_int_equal(nb_run(f->s, feeds, vals, 2, &y, 1, out), NB_OK);
  tu_check(out[0], NB_F32, 2, TU_SHAPE(1, 2), TU_VALS(6, 0), 0);
  nb_tensor_free(out[0]);
}

/* Feeding a tensor overrides the build-time values computed from it. */
static void test_feed_overrides_folding(void **state) {
  gu_fixture *f = *state;
  nb_tensor *k = nb_scalar(f->c, NB_F64, 2);
  nb_tensor *k3 = nb_mul(f->c, k, nb_scalar(f->c, NB_F64, 3)); /* folded: 6 */
  assert_non_null(nb_constant_value(k3));
  nb_tensor *r = gu_run1(f, k, nb_scalar(f->e, NB_F64, 5), k3);
  tu_check(r, NB_F64, 0, NULL, TU_VALS(15), 0);
  nb_tensor_free(r);
  r = gu_run1(f, NULL, NULL, k3); /* unfed: the folded value */
  tu_check(r, NB_F64, 0, NULL, TU_VALS(6), 0);
  nb_tensor_free(r);
}

/* A control edge added after a run is honoured by the next run of the same signature. */
static void test_control_edge_after_run(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 0, NULL, "x");
  nb_tensor *a = nb_neg(f->c, x), *b = nb_exp(f->c, a), *out[1], *xv = nb_scalar(f->e, NB_F32, 1);
  assert_int_equal(nb_run(f->s, &x, &xv, 1, &b, 1, out), NB_OK);
  nb_tensor_free(out[0]);
  assert_int_equal(nb_add_control_input(a, b), NB_OK);
  assert_int_equal(nb_run(f->s, &x, &xv, 1, &b, 1, out), NB_INVALID);
  assert_non_null(strstr(nb_session_error(f->s), "Graph has a cycle"));
}

/* Input forwarding: elementwise ops write over inputs the plan frees right after them,
   never over a feed, a fetched value or one another step still reads. */
static void test_input_forwarding(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *a = nb_mul(f->c, x, nb_scalar(f->c, NB_F64, 3)); /* read twice below */
  nb_tensor *b = nb_add(f->c, a, nb_scalar(f->c, NB_F64, 1));
  nb_tensor *c = nb_tanh(f->c, nb_mul(f->c, a, b)); /* a and a*b die here */
  nb_tensor *d = nb_sub(f->c, nb_exp(f->c, c), c);  /* exp(c) dies in the Sub; c is fetched */
  nb_tensor *xv = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.1, -0.2, 0.3));
  nb_tensor *fetch[3] = {b, c, d}, *out[3];
  static const double fed[3] = {0.1, -0.2, 0.3};
  for (int rep = 0; rep < 2; rep++) {
    assert_int_equal(nb_run(f->s, &x, &xv, 1, fetch, 3, out), NB_OK);
    for (int i = 0; i < 3; i++) {
      double xi = fed[i], ai = 3 * xi, bi = ai + 1, ci = tanh(ai * bi);
      assert_true(nb_item(xv, i) == fed[i]); /* the feed is intact */
      assert_true(fabs(nb_item(out[0], i) - bi) < 1e-15);
      assert_true(fabs(nb_item(out[1], i) - ci) < 1e-15);
      assert_true(fabs(nb_item(out[2], i) - (exp(ci) - ci)) < 1e-15);
    }
    for (int i = 0; i < 3; i++) nb_tensor_free(out[i]);
  }
}

/* nbrt_session_place_fetches: for one run, a placed fetch is made in the block given for
   it when its step makes it in a new block of that size; a fetch that is a view of a feed
   (Identity), or placed in a block of another size, is made as usual. */
static void test_placed_fetches(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *y = nb_mul(f->c, x, nb_scalar(f->c, NB_F64, 2)), *z = nb_identity(f->c, x);
  nb_tensor *w = nb_add(f->c, x, nb_scalar(f->c, NB_F64, 1));
  nb_tensor *xv = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.5, -1, 2)), *fetch[3] = {y, z, w}, *out[3];
  nbcore_buffer *block = nbcore_buffer_new(f->e, 9 * sizeof(double));
  assert_non_null(block);
  nbcore_buffer *place[3] = {nbcore_buffer_view(block, 0, 3 * sizeof(double)),
                             nbcore_buffer_view(block, 3 * sizeof(double), 3 * sizeof(double)),
                             nbcore_buffer_view(block, 6 * sizeof(double), 2 * sizeof(double))};
  for (int rep = 0; rep < 2; rep++) { /* placed, then not: a placement holds for one run */
    if (rep == 0) nbrt_session_place_fetches(f->s, place, 3);
    assert_int_equal(nb_run(f->s, &x, &xv, 1, fetch, 3, out), NB_OK);
    tu_check(out[0], NB_F64, 1, TU_SHAPE(3), TU_VALS(1, -2, 4), 0);
    tu_check(out[1], NB_F64, 1, TU_SHAPE(3), TU_VALS(0.5, -1, 2), 0);
    tu_check(out[2], NB_F64, 1, TU_SHAPE(3), TU_VALS(1.5, 0, 3), 0);
    assert_true((out[0]->buf == place[0]) == (rep == 0));
    assert_ptr_equal(nb_data(out[1]), nb_data(xv));
    assert_ptr_not_equal(nb_data(out[2]), place[2]->data);
    for (int i = 0; i < 3; i++) nb_tensor_free(out[i]);
  }
  for (int i = 0; i < 3; i++) nbcore_buffer_release(f->e, place[i]);
  nbcore_buffer_release(f->e, block);
}

/* ---- graphs refuse what eager calls refuse ------------------------------------------------ */

static const int64_t ones4[4] = {1, 1, 1, 1}, ones8[8] = {1, 1, 1, 1, 1, 1, 1, 1};

static nb_tensor *bad_add(nb_ctx *c, nb_tensor *const *in) { return nb_add(c, in[0], in[1]); }
static nb_tensor *bad_conv(nb_ctx *c, nb_tensor *const *in) {
  return nb_conv2d(c, in[0], in[1], &(nb_conv2d_attrs){.strides = ones4, .padding = "bogus"});
}
static nb_tensor *bad_pool(nb_ctx *c, nb_tensor *const *in) {
  return nb_avg_pool(c, in[0],
                     &(nb_pool_attrs){.ksize = ones4, .strides = ones4, .padding = "SAME", .data_format = "CHWN"});
}
static nb_tensor *bad_random(nb_ctx *c, nb_tensor *const *in) {
  nb_attr dtype = nb_attr_type("dtype", (nb_dtype)7);
  nb_tensor *y = NULL;
  nb_op(c, "StatelessRandomNormal", in, 2, &dtype, 1, &y, 1);
  return y;
}
static nb_tensor *bad_expand(nb_ctx *c, nb_tensor *const *in) { return nb_expand_dims(c, in[0], 0); }
static nb_tensor *bad_sum(nb_ctx *c, nb_tensor *const *in) { return nb_sum(c, in[0], (const int[]){2}, 1, false); }
static nb_tensor *bad_matmul(nb_ctx *c, nb_tensor *const *in) { return nb_matmul(c, in[0], in[1], false, false); }
static nb_tensor *bad_concat(nb_ctx *c, nb_tensor *const *in) { return nb_concat(c, in, 2, 0); }
static nb_tensor *bad_cast(nb_ctx *c, nb_tensor *const *in) { return nb_cast(c, in[0], (nb_dtype)9); }
static nb_tensor *bad_bn_grad(nb_ctx *c, nb_tensor *const *in) {
  nb_tensor *out[5];
  nb_fused_batch_norm_grad(c, in[0], in[0], in[1], in[1], in[1], in[1], 0.001, "", true, out);
  return out[0];
}

typedef struct bad_call {
  nb_tensor *(*call)(nb_ctx *c, nb_tensor *const *in);
  int nin;
  nb_dtype dtypes[2];
  int ranks[2];
} bad_call;

static const bad_call bad_calls[] = {
    {bad_add, 2, {NB_F32, NB_I32}, {1, 1}},
    {bad_conv, 2, {NB_F32, NB_F32}, {4, 4}},
    {bad_pool, 1, {NB_F32}, {4}},
    {bad_random, 2, {NB_I32, NB_I64}, {1, 1}},
    {bad_expand, 1, {NB_F32}, {8}},
    {bad_sum, 1, {NB_F64}, {2}},
    {bad_matmul, 2, {NB_F32, NB_F64}, {2, 2}},
    {bad_concat, 2, {NB_F32, NB_F64}, {1, 1}},
    {bad_cast, 1, {NB_I32}, {3}},
    {bad_bn_grad, 2, {NB_F32, NB_F32}, {4, 1}},
};

/* What follows the op's (and node's) name in a message. */
static const char *after_prefix(const char *msg) {
  const char *p = strstr(msg, ": ");
  return p ? p + 2 : msg;
}

/* Each bad call fails eagerly on values of size 1, and fails in a graph on inputs whose
   dims are all unknown, with the same code and message (the graph's naming the node). */
static void test_graph_and_eager_refuse_alike(void **state) {
  gu_fixture *f = *state;
  for (size_t i = 0; i < sizeof bad_calls / sizeof *bad_calls; i++) {
    const bad_call *b = &bad_calls[i];
    nb_tensor *eager_in[2], *graph_in[2];
    for (int j = 0; j < b->nin; j++) {
      eager_in[j] = tu_make(f->e, b->dtypes[j], b->ranks[j], ones8, NULL);
      graph_in[j] = tu_unknown_dims(f->c, b->dtypes[j], b->ranks[j]);
    }
    assert_null(b->call(f->e, eager_in));
    assert_null(b->call(f->c, graph_in));
    assert_int_not_equal(nb_status(f->e), NB_OK);
    assert_int_equal(nb_status(f->c), nb_status(f->e));
    assert_non_null(strstr(nb_error(f->c), " (node '"));
    assert_string_equal(after_prefix(nb_error(f->c)), after_prefix(nb_error(f->e)));
    nb_clear_error(f->e);
    nb_clear_error(f->c);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_build_and_run, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_node_accessors, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_names_and_scopes, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_named_nodes, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_named_nodes_misuse, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_build_errors_name_the_node, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_and_eager_refuse_alike, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_session_errors, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_runtime_error, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_cycle, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_control_input_runs, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_folding_and_ownership, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_feed_overrides_folding, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_control_edge_after_run, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_folded_needs_no_feed, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_unknown_dims, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_input_forwarding, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_placed_fetches, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests_name("graph", tests, NULL, NULL);
}
