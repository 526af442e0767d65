/* nb_gradients (tf.gradients): TF's behaviours, the registry, overrides, errors,
   gradcheck and the non-differentiable finder. */
#include "graphutil.h"

#ifndef M_E
#define M_E 2.71828182845904523536
#endif

/* Runs fetches with one optional feed and checks each against want (flattened). */
static void expect(gu_fixture *f, nb_tensor *feed, nb_tensor *value, nb_tensor *fetch, const double *want) {
  nb_tensor *out = gu_run1(f, feed, value, fetch);
  tu_check_vals(out, want, 1e-9);
  nb_tensor_free(out);
}

static nb_tensor *grad1(gu_fixture *f, nb_tensor *y, nb_tensor *x, const nb_grad_opts *o) {
  nb_tensor *dx = NULL;
  if (nb_gradients(f->c, &y, 1, &x, 1, o, &dx)) fail_msg("nb_gradients: %s", nb_error(f->c));
  return dx;
}

/* TF's docstring example: partial derivatives with stop_gradients. */
static void test_stop_gradients(void **state) {
  gu_fixture *f = *state;
  nb_tensor *a = nb_scalar(f->c, NB_F64, 0);
  nb_tensor *b = nb_mul(f->c, nb_scalar(f->c, NB_F64, 2), a);
  nb_tensor *y = nb_add(f->c, a, b);
  nb_tensor *xs[2] = {a, b}, *dxs[2];
  assert_int_equal(nb_gradients(f->c, &y, 1, xs, 2, NULL, dxs), NB_OK);
  expect(f, NULL, NULL, dxs[0], TU_VALS(3));
  expect(f, NULL, NULL, dxs[1], TU_VALS(1));
  nb_grad_opts o = {.stop = xs, .nstop = 2};
  assert_int_equal(nb_gradients(f->c, &y, 1, xs, 2, &o, dxs), NB_OK);
  expect(f, NULL, NULL, dxs[0], TU_VALS(1));
  expect(f, NULL, NULL, dxs[1], TU_VALS(1));
  /* the StopGradient op cuts the path the same way */
  nb_tensor *y2 = nb_add(f->c, a, nb_stop_gradient(f->c, b));
  expect(f, NULL, NULL, grad1(f, y2, a, NULL), TU_VALS(1));
}

static void test_grad_ys_and_several_ys(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "x");
  nb_tensor *y1 = nb_square(f->c, x);                          /* dy1/dx = 2x */
  nb_tensor *y2 = nb_mul(f->c, x, nb_scalar(f->c, NB_F64, 3)); /* dy2/dx = 3 */
  nb_tensor *xv = tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, -2));
  expect(f, x, xv, grad1(f, y1, x, NULL), TU_VALS(2, -4)); /* grad_ys default: ones */
  nb_tensor *w = nb_tensor_from(f->c, NB_F64, 1, TU_SHAPE(2), (const double[]){10, 100});
  nb_grad_opts o = {.grad_ys = &w};
  expect(f, x, xv, grad1(f, y1, x, &o), TU_VALS(20, -400));
  nb_tensor *ys[2] = {y1, y2}, *dx;
  assert_int_equal(nb_gradients(f->c, ys, 2, &x, 1, NULL, &dx), NB_OK); /* summed over ys */
  expect(f, x, xv, dx, TU_VALS(5, -1));
  nb_tensor *partial[2] = {w, NULL}; /* a NULL grad_ys entry means ones, as TF's None */
  nb_grad_opts po = {.grad_ys = partial};
  assert_int_equal(nb_gradients(f->c, ys, 2, &x, 1, &po, &dx), NB_OK);
  expect(f, x, xv, dx, TU_VALS(23, -397));
  /* grad_ys must match the ys' dtype */
  nb_tensor *bad = nb_scalar(f->c, NB_F32, 1);
  o.grad_ys = &bad;
  assert_int_equal(nb_gradients(f->c, &y1, 1, &x, 1, &o, &dx), NB_DTYPE);
  tu_check_error(f->c, NB_DTYPE, "grad_ys[0] has dtype float32", NULL);
  /* and be compatible with their shapes (unknown dims match anything) */
  nb_tensor *wrong = nb_tensor_from(f->c, NB_F64, 1, TU_SHAPE(3), NULL);
  o.grad_ys = &wrong;
  assert_int_equal(nb_gradients(f->c, &y1, 1, &x, 1, &o, &dx), NB_SHAPE);
  tu_check_error(f->c, NB_SHAPE, "grad_ys[0] has shape [3], incompatible with ys[0] of shape [2]", NULL);
  nb_tensor *any = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(-1), "w");
  o.grad_ys = &any;
  assert_int_equal(nb_gradients(f->c, &y1, 1, &x, 1, &o, &dx), NB_OK);
}

static void test_unconnected_and_integer_paths(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *u = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "unrelated");
  nb_tensor *y = nb_sum(f->c, nb_exp(f->c, x), NULL, 0, false);
  assert_null(grad1(f, y, u, NULL));
  nb_grad_opts zero = {.unconnected_zero = 1};
  nb_tensor *uv = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(5, 6, 7));
  expect(f, u, uv, grad1(f, y, u, &zero), TU_VALS(0, 0, 0));
  nb_tensor *n = nb_placeholder(f->c, NB_I32, 1, TU_SHAPE(2), "ints"), *dn = NULL; /* zeros for any dtype */
  assert_int_equal(nb_gradients(f->c, &y, 1, &n, 1, &zero, &dn), NB_OK);
  tu_check_shape(dn, NB_I32, 1, TU_SHAPE(2));
  /* a path through an integer cast carries no gradient */
  nb_tensor *yi = nb_sum(f->c, nb_cast(f->c, nb_cast(f->c, x, NB_I32), NB_F64), NULL, 0, false);
  assert_null(grad1(f, yi, x, NULL));
}

/* Gradient nodes are named gradients/<op name>_grad/...; a second call uses gradients_1. */
static void test_gradient_scopes(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(4), "x");
  nb_tensor *y = nb_tanh(f->c, x);
  nb_tensor *dx = grad1(f, y, x, NULL);
  assert_string_equal(nb_tensor_node_name(dx), "gradients/Tanh_grad/TanhGrad");
  dx = grad1(f, y, x, NULL);
  assert_string_equal(nb_tensor_node_name(dx), "gradients_1/Tanh_grad/TanhGrad");
  nb_grad_opts o = {.name = "backward"};
  dx = grad1(f, y, x, &o);
  assert_string_equal(nb_tensor_node_name(dx), "backward/Tanh_grad/TanhGrad");
  o.name = "a/b";
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, &o, &dx), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "scope name 'a/b' must be non-empty without '/'", NULL);
}

/* A named op's gradient nodes live under its name; a name pending across nb_gradients goes
   to the next op, not to a gradient node. */
static void test_gradient_scopes_of_named_ops(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(1, 2), "x");
  nb_tensor *w = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(2, 2), "w");
  assert_int_equal(nb_name_next(f->c, "xw"), NB_OK);
  nb_tensor *y = nb_sum(f->c, nb_matmul(f->c, x, w, false, false), NULL, 0, false);
  assert_int_equal(nb_name_next(f->c, "after"), NB_OK);
  nb_tensor *dw = grad1(f, y, w, NULL);
  assert_string_equal(nb_tensor_node_name(dw), "gradients/xw_grad/MatMul");
  assert_string_equal(nb_tensor_node_name(nb_neg(f->c, dw)), "after");
}

/* Several paths into x: AddN by default, a tree of AddV2 with NB_AGG_TREE. */
static void test_aggregation(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x");
  nb_tensor *y = nb_add_n(f->c, (nb_tensor *[]){nb_sin(f->c, x), nb_cos(f->c, x), nb_exp(f->c, x)}, 3);
  nb_tensor *xv = nb_scalar(f->e, NB_F64, 0.3);
  double want = cos(0.3) - sin(0.3) + exp(0.3);
  int before = nb_graph_num_nodes(f->g);
  nb_tensor *dx = grad1(f, y, x, NULL);
  assert_non_null(strstr(nb_tensor_node_name(dx), "AddN"));
  expect(f, x, xv, dx, (const double[]){want});
  /* x's gradient is summed once: OnesLike; Cos, Mul (Sin's); Sin, Neg, Mul (Cos's); Mul
     (Exp's); one AddN (AddN's own gradient passes dy through) */
  assert_int_equal(nb_graph_num_nodes(f->g) - before, 8);
  nb_grad_opts tree = {.aggregation = NB_AGG_TREE};
  dx = grad1(f, y, x, &tree);
  assert_non_null(strstr(nb_tensor_node_name(dx), "AddV2"));
  expect(f, x, xv, dx, (const double[]){want});
  tree.aggregation = 7;
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, &tree, &dx), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "unknown aggregation 7", NULL);
}

/* The gradient of sum(x * k) for k = 1..n with each aggregation, and its node's type. */
static nb_tensor *gradient_of_n_paths(gu_fixture *f, nb_tensor *x, int n, int aggregation) {
  nb_tensor *terms[5];
  for (int k = 0; k < n; k++) terms[k] = nb_mul(f->c, x, nb_scalar(f->c, NB_F64, 0.1 * (k + 1)));
  nb_tensor *y = nb_sum(f->c, nb_add_n(f->c, terms, n), NULL, 0, false);
  nb_grad_opts o = {.aggregation = aggregation};
  return grad1(f, y, x, &o);
}

/* TF's EXPERIMENTAL_ACCUMULATE_N: one AccumulateNV2 (attr shape: the terms' static shape)
   for more than two terms of a fully known shape, else AddN; the same values as ADD_N's. */
static void test_aggregation_accumulate_n(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x"),
            *u = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(-1), "u");
  nb_tensor *xv = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.3, -1.7, 2.9));
  nb_tensor *acc = gradient_of_n_paths(f, x, 5, NB_AGG_ACCUMULATE_N), *add = gradient_of_n_paths(f, x, 5, NB_AGG_ADD_N);
  assert_non_null(strstr(nb_tensor_node_name(acc), "AccumulateNV2"));
  tu_check_shape(acc, NB_F64, 1, TU_SHAPE(3));
  nb_tensor *a = gu_run1(f, x, xv, acc), *b = gu_run1(f, x, xv, add);
  assert_memory_equal(nb_data(a), nb_data(b), 3 * sizeof(double));
  tu_check_vals(a, TU_VALS(1.5, 1.5, 1.5), 1e-15);
  nb_tensor_free(a);
  nb_tensor_free(b);
  /* two terms, or a shape not fully known: AddN */
  assert_non_null(strstr(nb_tensor_node_name(gradient_of_n_paths(f, x, 2, NB_AGG_ACCUMULATE_N)), "AddN"));
  nb_tensor *du = gradient_of_n_paths(f, u, 3, NB_AGG_ACCUMULATE_N);
  assert_non_null(strstr(nb_tensor_node_name(du), "AddN"));
  expect(f, u, xv, du, TU_VALS(0.6, 0.6, 0.6));
}

/* An op with several outputs where only some get gradients: float siblings get zeros. */
static void test_partial_output_gradients(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(3, 2), "x");
  nb_tensor *parts[3];
  assert_int_equal(nb_unpack(f->c, x, 0, 3, parts), NB_OK);
  nb_tensor *y = nb_sum(f->c, nb_mul(f->c, parts[1], parts[1]), NULL, 0, false);
  nb_tensor *xv = tu_make(f->e, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(1, 2, 3, 4, 5, 6));
  expect(f, x, xv, grad1(f, y, x, NULL), TU_VALS(0, 0, 6, 8, 0, 0));
}

/* Gradient of a gradient: d2/dx2 tanh(x) = -2 tanh(x) (1 - tanh(x)^2). */
static void test_second_order(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "x");
  nb_tensor *dx = grad1(f, nb_tanh(f->c, x), x, NULL);
  nb_tensor *ddx = grad1(f, dx, x, NULL);
  double t0 = tanh(0.5), t1 = tanh(-1.5);
  expect(f, x, tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(0.5, -1.5)), ddx,
         TU_VALS(-2 * t0 * (1 - t0 * t0), -2 * t1 * (1 - t1 * t1)));
  /* Hessian-vector product of f(x) = sum(x^3): H v = 6 x v */
  nb_tensor *v = nb_tensor_from(f->c, NB_F64, 1, TU_SHAPE(2), (const double[]){1, -2});
  nb_tensor *g = grad1(f, nb_sum(f->c, nb_pow(f->c, x, nb_scalar(f->c, NB_F64, 3)), NULL, 0, false), x, NULL);
  nb_tensor *hv = grad1(f, nb_sum(f->c, nb_mul(f->c, g, v), NULL, 0, false), x, NULL);
  expect(f, x, tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(2, 3)), hv, TU_VALS(12, -36));
}

/* Cost follows the subgraph between xs and ys, not the graph: a large unrelated part
   adds no gradient nodes. */
static void test_visits_only_between(void **state) {
  gu_fixture *f = *state;
  nb_tensor *z = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(4), "bulk");
  for (int i = 0; i < 2000; i++) z = nb_tanh(f->c, z);
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 1, TU_SHAPE(4), "x");
  nb_tensor *y = nb_exp(f->c, nb_tanh(f->c, x));
  nb_tensor *mixed = nb_add(f->c, y, z); /* consumes x's path too, but is not a y */
  (void)mixed;
  int before = nb_graph_num_nodes(f->g);
  grad1(f, y, x, NULL);
  int added = nb_graph_num_nodes(f->g) - before;
  assert_true(added > 0 && added <= 6);
}

static nb_code too_many_grads(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  for (int i = 0; i <= nb_fwd_num_inputs(op); i++) dxs[i] = dys[0]; /* one too many */
  (void)c;
  return NB_OK;
}

static int override_calls;
static nb_code doubled_exp_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  override_calls++;
  assert_string_equal(nb_fwd_type(op), "Exp");
  dxs[0] = nb_mul(c, nb_scalar(c, NB_F64, 2), nb_mul(c, dys[0], nb_fwd_output(op, 0)));
  return nb_status(c);
}

static void test_registry_and_overrides(void **state) {
  gu_fixture *f = *state;
  assert_true(nb_has_gradient("Tanh"));
  assert_false(nb_has_gradient("Less"));
  assert_false(nb_has_gradient("NoSuchOp"));
  assert_int_equal(nb_register_gradient("Tanh", doubled_exp_grad), NB_INVALID); /* duplicate */
  assert_int_equal(nb_register_no_gradient("Less"), NB_INVALID);
  assert_int_equal(nb_register_gradient("TestDoubledExp", doubled_exp_grad), NB_OK);
  assert_int_equal(nb_register_gradient("TestDoubledExp", doubled_exp_grad), NB_INVALID);
  assert_int_equal(nb_register_gradient("TestTooMany", too_many_grads), NB_OK);
  assert_int_equal(nb_register_gradient(NULL, too_many_grads), NB_INVALID);
  assert_int_equal(nb_register_gradient("X", NULL), NB_INVALID);
  assert_int_equal(nb_gradient_override_push(f->g, "Exp", "NoSuchGradient"), NB_NOT_FOUND);
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x");
  nb_tensor *plain = nb_exp(f->c, x);
  assert_int_equal(nb_gradient_override_push(f->g, "Exp", "TestDoubledExp"), NB_OK);
  nb_tensor *overridden = nb_exp(f->c, x);
  nb_gradient_override_pop(f->g);
  nb_tensor *xv = nb_scalar(f->e, NB_F64, 1);
  expect(f, x, xv, grad1(f, plain, x, NULL), (const double[]){M_E});
  expect(f, x, xv, grad1(f, overridden, x, NULL), (const double[]){2 * M_E});
  assert_int_equal(override_calls, 1);
  /* a gradient function returning one gradient too many */
  assert_int_equal(nb_gradient_override_push(f->g, "Sin", "TestTooMany"), NB_OK);
  nb_tensor *s = nb_sin(f->c, x);
  nb_gradient_override_pop(f->g);
  nb_tensor *dx;
  assert_int_equal(nb_gradients(f->c, &s, 1, &x, 1, NULL, &dx), NB_INTERNAL);
  tu_check_error(f->c, NB_INTERNAL, "Num gradients 2 generated for op Sin do not match num inputs 1", NULL);
  assert_null(dx);
}

/* PreventGradient passes its input through, and differentiating through it fails with its
   message, in graphs and on tapes; a path cut before it never reaches it. */
static void test_prevent_gradient(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "x"), *dx = x;
  nb_tensor *p = nb_prevent_gradient(f->c, nb_mul(f->c, x, x), "second derivative unsupported");
  nb_tensor *y = nb_sum(f->c, p, NULL, 0, false);
  expect(f, x, tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, -2)), p, TU_VALS(9, 4));
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_NO_GRADIENT);
  tu_check_error(f->c, NB_NO_GRADIENT, "Gradient explicitly disabled. Reason: second derivative unsupported",
                 "(operation 'PreventGradient', op type: PreventGradient)");
  assert_null(dx);
  /* stopped at the op itself, or above it by StopGradient: no error, no gradient through it */
  nb_grad_opts o = {.stop = &p, .nstop = 1};
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, &o, &dx), NB_OK);
  assert_null(dx);
  nb_tensor *y2 =
      nb_add(f->c, nb_sum(f->c, nb_stop_gradient(f->c, p), NULL, 0, false), nb_sum(f->c, x, NULL, 0, false));
  expect(f, x, tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, -2)), grad1(f, y2, x, NULL), TU_VALS(1, 1));
  /* on a tape, with the default message through nb_op */
  nb_tensor *xe = tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(3, -2)), *pe;
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, xe);
  assert_int_equal(nb_op(f->e, "PreventGradient", &xe, 1, NULL, 0, &pe, 1), NB_OK);
  tu_check_vals(pe, TU_VALS(3, -2), 0);
  assert_int_equal(nb_tape_gradient(t, &pe, 1, &xe, 1, NULL, &dx), NB_NO_GRADIENT);
  tu_check_error(f->e, NB_NO_GRADIENT, "Gradient explicitly disabled. Reason:  (operation 'PreventGradient'", NULL);
  nb_tape_end(t);
}

/* A [7] of ones, whatever the input's shape. */
static nb_code seven_ones_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  (void)op, (void)dys;
  dxs[0] = nb_ones_like(c, nb_tensor_from(c, NB_F64, 1, TU_SHAPE(7), NULL));
  return nb_status(c);
}

/* IndexedSlices of dense shape [7] (row 0 of ones), whatever the input's shape. */
static nb_code seven_slices_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  (void)op, (void)dys;
  nb_tensor *values = nb_ones_like(c, nb_tensor_from(c, NB_F64, 1, TU_SHAPE(1), NULL));
  dxs[0] = nb_indexed_slices(c, values, nb_tensor_from(c, NB_I32, 1, TU_SHAPE(1), NULL), TU_SHAPE(7), 1);
  return nb_status(c);
}

/* dy as float32, whatever the input's dtype. */
static nb_code float32_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  (void)op;
  dxs[0] = nb_cast(c, dys[0], NB_F32);
  return nb_status(c);
}

/* x's Exp node with its gradient overridden by the registered grad_name. */
static nb_tensor *exp_with_grad(gu_fixture *f, nb_tensor *x, const char *grad_name) {
  assert_int_equal(nb_gradient_override_push(f->g, "Exp", grad_name), NB_OK);
  nb_tensor *y = nb_exp(f->c, x);
  nb_gradient_override_pop(f->g);
  return y;
}

/* TF checks each calculated input gradient against its input: a [7] for a [3] input, or a
   float32 one for a float64 input, is an error naming the op, the index and both shapes;
   static shapes that are merely unknown pass. */
static void test_gradient_checked_against_input(void **state) {
  gu_fixture *f = *state;
  assert_int_equal(nb_register_gradient("TestSevenOnes", seven_ones_grad), NB_OK);
  assert_int_equal(nb_register_gradient("TestFloat32", float32_grad), NB_OK);
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x"), *dx = x;
  nb_name_scope_push(f->g, "layer");
  nb_tensor *y = exp_with_grad(f, x, "TestSevenOnes");
  nb_name_scope_pop(f->g);
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_SHAPE);
  tu_check_error(f->c, NB_SHAPE,
                 "Incompatible shapes between op input and calculated input gradient. Forward operation: layer/Exp "
                 "(op type: Exp). Input index: 0. Original input shape: [3]. Calculated input gradient shape: [7]",
                 NULL);
  assert_null(dx);
  y = exp_with_grad(f, x, "TestFloat32");
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_DTYPE);
  tu_check_error(f->c, NB_DTYPE,
                 "Incompatible dtypes between op input and calculated input gradient. Forward operation: Exp "
                 "(op type: Exp). Input index: 0. Original input dtype: float64. Calculated input gradient dtype: "
                 "float32",
                 NULL);
  /* IndexedSlices are checked by their dense shape */
  assert_int_equal(nb_register_gradient("TestSevenSlices", seven_slices_grad), NB_OK);
  y = exp_with_grad(f, x, "TestSevenSlices");
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_SHAPE);
  tu_check_error(f->c, NB_SHAPE, "Original input shape: [3]. Calculated input gradient shape: [7]", NULL);
  /* unknown dims (or rank) are compatible with any size: only the run can tell */
  nb_tensor *u = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(-1), "u");
  y = exp_with_grad(f, u, "TestSevenOnes");
  assert_int_equal(nb_gradients(f->c, &y, 1, &u, 1, NULL, &dx), NB_OK);
  tu_check_shape(dx, NB_F64, 1, TU_SHAPE(7));
}

static void test_argument_errors(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *dx;
  nb_tensor *y = nb_exp(f->c, x);
  assert_int_equal(nb_gradients(f->e, &y, 1, &x, 1, NULL, &dx), NB_INVALID);
  tu_check_error(f->e, NB_INVALID, "needs a graph context", NULL);
  nb_tensor *eager = nb_scalar(f->e, NB_F64, 1);
  assert_int_equal(nb_gradients(f->c, &eager, 1, &x, 1, NULL, &dx), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "ys[0] is not a tensor of this context's graph", NULL);
  assert_int_equal(nb_gradients(f->c, &y, 1, NULL, 1, NULL, &dx), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "xs is NULL", NULL);
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, NULL), NB_INVALID);
  tu_check_error(f->c, NB_INVALID, "dxs is NULL", NULL);
  assert_int_equal(nb_gradients(NULL, &y, 1, &x, 1, NULL, &dx), NB_INVALID);
}

static void test_gradcheck(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "x");
  nb_tensor *w = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(3, 2), "w");
  nb_tensor *y = nb_tanh(f->c, nb_matmul(f->c, x, w, false, false));
  nb_tensor *xs[2] = {x, w};
  nb_tensor *vals[2] = {tu_make(f->e, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(0.1, -0.2, 0.3, 0.5, 0.4, -0.6)),
                        tu_make(f->e, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(1, -1, 0.5, 0.25, -0.3, 0.7))};
  double err = -1;
  assert_int_equal(nb_gradcheck(f->c, y, xs, 2, vals, &err), NB_OK);
  assert_true(err >= 0 && err < 1e-8);
  /* a wrong gradient is caught: Exp's overridden to twice the truth */
  assert_int_equal(nb_gradient_override_push(f->g, "Exp", "TestDoubledExp"), NB_OK);
  nb_tensor *bad = nb_exp(f->c, x);
  nb_gradient_override_pop(f->g);
  assert_int_equal(nb_gradcheck(f->c, bad, xs, 1, vals, &err), NB_OK);
  assert_true(err > 0.5);
  nb_tensor *y32 = nb_cast(f->c, y, NB_F32);
  assert_int_equal(nb_gradcheck(f->c, y32, xs, 2, vals, &err), NB_DTYPE);
  tu_check_error(f->c, NB_DTYPE, "y must be float64", NULL);
  assert_int_equal(nb_gradcheck(f->e, y, xs, 2, vals, &err), NB_INVALID);
  tu_check_error(f->e, NB_INVALID, "needs a graph context", NULL);
}

static void test_find_non_differentiable(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *idx = nb_argmax(f->c, x, 0, NB_I64);
  nb_name_scope_push(f->g, "head");
  nb_tensor *y = nb_add(f->c, nb_cast(f->c, idx, NB_F64), nb_sum(f->c, x, NULL, 0, false));
  nb_name_scope_pop(f->g);
  char report[1024];
  assert_int_equal(nb_find_non_differentiable(f->g, &x, 1, &y, 1, report, sizeof report), NB_OK);
  assert_non_null(strstr(report, "'ArgMax' (op type: ArgMax): x -> ArgMax -> head/Cast -> head/AddV2"));
  assert_null(strstr(report, "Sum")); /* differentiable ops are not listed */
  nb_tensor *ok = nb_sum(f->c, x, NULL, 0, false);
  assert_int_equal(nb_find_non_differentiable(f->g, &x, 1, &ok, 1, report, sizeof report), NB_OK);
  assert_string_equal(report, "");
  assert_int_equal(nb_find_non_differentiable(NULL, &x, 1, &y, 1, report, sizeof report), NB_INVALID);
  assert_int_equal(nb_find_non_differentiable(f->g, &x, 1, &y, 1, NULL, 0), NB_INVALID);
}

/* An op wider than the pass's stack buffer (AddN of 70 inputs) takes the heap path. */
static void test_wide_op(void **state) {
  gu_fixture *f = *state;
  enum { N = 70 };
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(2), "x"), *terms[N];
  for (int i = 0; i < N; i++) terms[i] = nb_mul(f->c, x, nb_scalar(f->c, NB_F64, i));
  nb_tensor *y = nb_sum(f->c, nb_add_n(f->c, terms, N), NULL, 0, false);
  expect(f, x, tu_make(f->e, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 2)), grad1(f, y, x, NULL),
         TU_VALS(N * (N - 1) / 2, N * (N - 1) / 2));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_wide_op, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_stop_gradients, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_ys_and_several_ys, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_unconnected_and_integer_paths, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_gradient_scopes, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_gradient_scopes_of_named_ops, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_aggregation, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_aggregation_accumulate_n, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_partial_output_gradients, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_second_order, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_visits_only_between, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_registry_and_overrides, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_gradient_checked_against_input, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_prevent_gradient, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_argument_errors, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_gradcheck, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_find_non_differentiable, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests_name("gradients", tests, NULL, NULL);
}
