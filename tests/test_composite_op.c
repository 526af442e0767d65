/* Composite ops (nb_register_composite_op): TF's pattern, the gradient through the
   registered op equals the gradient of the same composition written out inline, on the
   tape and symbolically, first and second order; a registered gradient wins over the
   body, in a graph and on a tape, where it sees the same call; a composite's name and an
   op type's exclude each other, in either order; and the errors. The composite runs the same ops in the same order as the inline
   code (the tape records the body's ops; the graph's SymbolicGradient differentiates the
   same body ops), and each value here is one elementwise chain (no reduction whose
   order could differ: the sums seeded below have one gradient term per element), so the
   results are compared bit for bit. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define N 5

/* The composition: (tanh(x * w) * x, x - w). */
static nb_code body(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_mul(c, nb_tanh(c, nb_mul(c, in[0], in[1])), in[0]);
  out[1] = nb_sub(c, in[0], in[1]);
  return nb_status(c);
}

static nb_code failing_body(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)in, (void)nin, (void)out, (void)nout, (void)user;
  return nb_set_error(c, NB_UNIMPLEMENTED, "this body refuses");
}

static nb_code half_body(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_identity(c, in[0]);
  return nb_status(c);
}

static int counted_calls;

/* What a registered gradient saw of the call it differentiates. */
typedef struct seen_call {
  char type[64];
  int nin, nout;
  int64_t n_attr;
} seen_call;

static seen_call last_seen;

static void see(const nb_fwd_op *op) {
  snprintf(last_seen.type, sizeof last_seen.type, "%s", nb_fwd_type(op));
  last_seen.nin = nb_fwd_num_inputs(op);
  last_seen.nout = nb_fwd_num_outputs(op);
  last_seen.n_attr = nb_fwd_attr_int(op, "N");
}

/* Deliberately not the body's gradient (3 dy for each input), so the test sees which ran. */
static nb_code counted_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  see(op);
  counted_calls++;
  nb_tensor *three = nb_scalar(c, NB_F64, 3);
  dxs[0] = nb_mul(c, dys[0], three);
  dxs[1] = nb_mul(c, dys[0], three);
  return nb_status(c);
}

/* x * x, with the registered gradient of x³ (3 x² dy, from the call's input) instead of
   its own 2 x dy: first order 3 x², second order d(sum 3 x²)/dx = 6 x. */
static nb_code square_body(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_mul(c, in[0], in[0]);
  return nb_status(c);
}

static nb_code cube_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  see(op);
  counted_calls++;
  nb_tensor *x = nb_fwd_input(op, 0);
  dxs[0] = nb_mul(c, nb_mul(c, nb_mul(c, nb_scalar(c, NB_F64, 3), x), x), dys[0]);
  return nb_status(c);
}

static int setup(void **state) {
  (void)state;
  static bool done;
  if (!done) {
    if (nb_register_composite_op("TanhProd", body, NULL, 2, 2) ||
        nb_register_composite_op("CountedComposite", body, NULL, 2, 2) ||
        nb_register_gradient("CountedComposite", counted_grad) ||
        nb_register_composite_op("FailingComposite", failing_body, NULL, 2, 2) ||
        nb_register_composite_op("HalfComposite", half_body, NULL, 2, 2) ||
        nb_register_composite_op("CubeGradSquare", square_body, NULL, 1, 1) ||
        nb_register_gradient("CubeGradSquare", cube_grad))
      return -1;
    done = true;
  }
  return 0;
}

static const double xv[N] = {0.3, -1.2, 0.7, 2.0, -0.4}, wv[N] = {1.5, 0.25, -0.8, 0.6, -2.2};

static nb_tensor *vec(nb_ctx *c, const double *v) { return nb_tensor_from(c, NB_F64, 1, (int64_t[]){N}, v); }

/* y = sum(out0) + sum(out1) of the composite or of the inline body. */
static nb_tensor *objective(nb_ctx *c, bool composite, nb_tensor *x, nb_tensor *w) {
  nb_tensor *in[2] = {x, w}, *out[2] = {NULL, NULL};
  if (composite)
    nb_composite_op(c, "TanhProd", in, 2, out, 2);
  else
    body(c, in, 2, out, 2, NULL);
  return nb_add(c, nb_sum(c, out[0], NULL, 0, false), nb_sum(c, out[1], NULL, 0, false));
}

static void assert_same(const nb_tensor *a, const nb_tensor *b) {
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(nb_num_elements(a), nb_num_elements(b));
  for (int64_t i = 0; i < nb_num_elements(a); i++) {
    if (nb_item(a, i) != nb_item(b, i))
      fail_msg("element %lld: %.17g != %.17g", (long long)i, nb_item(a, i), nb_item(b, i));
  }
}

/* Eager: first-order dy/dx, dy/dw and the second-order d(sum dy/dx)/dx, nested tapes. */
static void tape_grads(nb_ctx *c, bool composite, nb_tensor **g) {
  nb_tensor *x = vec(c, xv), *w = vec(c, wv);
  nb_tape *outer = nb_tape_begin(c, 0);
  nb_tape_watch(outer, x);
  nb_tape *inner = nb_tape_begin(c, 0);
  nb_tape_watch(inner, x);
  nb_tape_watch(inner, w);
  nb_tensor *y = objective(c, composite, x, w);
  assert_int_equal(nb_tape_gradient(inner, &y, 1, (nb_tensor *[]){x, w}, 2, NULL, g), NB_OK);
  nb_tape_end(inner);
  nb_tensor *s = nb_sum(c, g[0], NULL, 0, false);
  assert_int_equal(nb_tape_gradient(outer, &s, 1, &x, 1, NULL, &g[2]), NB_OK);
  nb_tape_end(outer);
}

static void test_tape_equals_inline(void **state) {
  (void)state;
  nb_ctx *c = nb_eager_new();
  nb_tensor *a[3], *b[3];
  tape_grads(c, true, a);
  tape_grads(c, false, b);
  assert_int_equal(nb_status(c), NB_OK);
  for (int i = 0; i < 3; i++) assert_same(a[i], b[i]);
  nb_ctx_free(c);
}

/* Graph: the same three gradients with nb_gradients, run in a session. */
static void graph_grads(bool composite, nb_tensor **res) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  nb_tensor *x = nb_placeholder(c, NB_F64, 1, (int64_t[]){N}, "x");
  nb_tensor *w = nb_placeholder(c, NB_F64, 1, (int64_t[]){N}, "w");
  nb_tensor *y = objective(c, composite, x, w), *d[3];
  assert_int_equal(nb_gradients(c, &y, 1, (nb_tensor *[]){x, w}, 2, NULL, d), NB_OK);
  nb_tensor *s = nb_sum(c, d[0], NULL, 0, false);
  assert_int_equal(nb_gradients(c, &s, 1, &x, 1, NULL, &d[2]), NB_OK);
  nb_session *sess = nb_session_new(g);
  nb_code code = nb_run(sess, (nb_tensor *[]){x, w}, (nb_tensor *[]){vec(e, xv), vec(e, wv)}, 2, d, 3, res);
  assert_int_equal(code, NB_OK);
  nb_session_free(sess);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

static void test_symbolic_equals_inline(void **state) {
  (void)state;
  nb_tensor *a[3], *b[3];
  graph_grads(true, a);
  graph_grads(false, b);
  for (int i = 0; i < 3; i++) {
    assert_same(a[i], b[i]);
    nb_tensor_free(a[i]);
    nb_tensor_free(b[i]);
  }
}

/* In a graph the composite is one call node, not the body's ops. */
static void test_graph_one_node(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *x = nb_placeholder(c, NB_F64, 1, (int64_t[]){N}, "x");
  nb_tensor *w = nb_placeholder(c, NB_F64, 1, (int64_t[]){N}, "w"), *out[2];
  int before = nb_graph_num_nodes(g);
  assert_int_equal(nb_composite_op(c, "TanhProd", (nb_tensor *[]){x, w}, 2, out, 2), NB_OK);
  assert_int_equal(nb_graph_num_nodes(g), before + 1);
  assert_non_null(strstr(nb_tensor_node_name(out[0]), "StatefulPartitionedCall"));
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* A gradient registered under the composite's name is used instead of the body's. */
static void test_registered_gradient_wins(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  nb_tensor *x = nb_placeholder(c, NB_F64, 1, (int64_t[]){N}, "x");
  nb_tensor *w = nb_placeholder(c, NB_F64, 1, (int64_t[]){N}, "w"), *out[2], *d[2], *res[2];
  assert_int_equal(nb_composite_op(c, "CountedComposite", (nb_tensor *[]){x, w}, 2, out, 2), NB_OK);
  nb_tensor *y = nb_sum(c, out[0], NULL, 0, false);
  int before = counted_calls;
  assert_int_equal(nb_gradients(c, &y, 1, (nb_tensor *[]){x, w}, 2, NULL, d), NB_OK);
  assert_int_equal(counted_calls, before + 1);
  nb_session *sess = nb_session_new(g);
  assert_int_equal(nb_run(sess, (nb_tensor *[]){x, w}, (nb_tensor *[]){vec(e, xv), vec(e, wv)}, 2, d, 2, res), NB_OK);
  for (int i = 0; i < 2; i++) {
    for (int64_t j = 0; j < N; j++) assert_true(nb_item(res[i], j) == 3.0);
    nb_tensor_free(res[i]);
  }
  nb_session_free(sess);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* Eagerly the registered gradient is the tape's one entry for the call: it runs once per
   gradient (not the body's rules), gives its values, and sees the call the graph's call
   node shows it (type, input and output counts, attr N). */
static void test_eager_registered_gradient(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g), *c = nb_eager_new();
  nb_tensor *px = nb_placeholder(gc, NB_F64, 1, (int64_t[]){N}, "x"), *pout[2], *pd[2];
  nb_tensor *pw = nb_placeholder(gc, NB_F64, 1, (int64_t[]){N}, "w");
  assert_int_equal(nb_composite_op(gc, "CountedComposite", (nb_tensor *[]){px, pw}, 2, pout, 2), NB_OK);
  nb_tensor *py = nb_sum(gc, pout[0], NULL, 0, false);
  assert_int_equal(nb_gradients(gc, &py, 1, (nb_tensor *[]){px, pw}, 2, NULL, pd), NB_OK);
  seen_call graph_saw = last_seen;

  nb_tensor *x = vec(c, xv), *w = vec(c, wv), *out[2], *want[2], *d[2];
  body(c, (nb_tensor *[]){x, w}, 2, want, 2, NULL);
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_tape_watch(t, w);
  assert_int_equal(nb_composite_op(c, "CountedComposite", (nb_tensor *[]){x, w}, 2, out, 2), NB_OK);
  nb_tensor *y = nb_sum(c, out[0], NULL, 0, false);
  int before = counted_calls;
  assert_int_equal(nb_tape_gradient(t, &y, 1, (nb_tensor *[]){x, w}, 2, NULL, d), NB_OK);
  assert_int_equal(counted_calls, before + 1);
  nb_tape_end(t);
  for (int i = 0; i < 2; i++) {
    assert_same(out[i], want[i]);
    for (int64_t j = 0; j < N; j++) assert_true(nb_item(d[i], j) == 3.0);
  }
  assert_string_equal(last_seen.type, graph_saw.type);
  assert_int_equal(last_seen.nin, graph_saw.nin);
  assert_int_equal(last_seen.nout, graph_saw.nout);
  assert_int_equal(last_seen.n_attr, graph_saw.n_attr);
  assert_int_equal(last_seen.nin, 2);
  nb_ctx_free(c);
  nb_ctx_free(gc);
  nb_graph_free(g);
}

/* First and second order of CubeGradSquare through its registered rule, on nested tapes
   and with nb_gradients: 3 x² and 6 x, each within three roundings (products of three
   factors; the second order adds two products). */
static void check_cube_grads(nb_tensor *const *d) {
  double first[N], second[N], abs_first[N], abs_second[N];
  for (int i = 0; i < N; i++) {
    first[i] = 3 * xv[i] * xv[i];
    second[i] = 6 * xv[i];
    abs_first[i] = fabs(first[i]);
    abs_second[i] = fabs(second[i]);
  }
  tu_check_sums(d[0], first, NB_F64, 3, abs_first);
  tu_check_sums(d[1], second, NB_F64, 3, abs_second);
}

static void test_registered_gradient_second_order(void **state) {
  (void)state;
  nb_ctx *c = nb_eager_new();
  nb_tensor *x = vec(c, xv), *sq, *d[2];
  int before = counted_calls;
  nb_tape *outer = nb_tape_begin(c, 0);
  nb_tape_watch(outer, x);
  nb_tape *inner = nb_tape_begin(c, 0);
  nb_tape_watch(inner, x);
  assert_int_equal(nb_composite_op(c, "CubeGradSquare", &x, 1, &sq, 1), NB_OK);
  nb_tensor *y = nb_sum(c, sq, NULL, 0, false);
  assert_int_equal(nb_tape_gradient(inner, &y, 1, &x, 1, NULL, &d[0]), NB_OK);
  nb_tape_end(inner);
  nb_tensor *s = nb_sum(c, d[0], NULL, 0, false);
  assert_int_equal(nb_tape_gradient(outer, &s, 1, &x, 1, NULL, &d[1]), NB_OK);
  nb_tape_end(outer);
  assert_int_equal(counted_calls, before + 1);
  check_cube_grads(d);
  nb_ctx_free(c);

  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g), *e = nb_eager_new();
  nb_tensor *px = nb_placeholder(gc, NB_F64, 1, (int64_t[]){N}, "x"), *pd[2], *res[2];
  assert_int_equal(nb_composite_op(gc, "CubeGradSquare", &px, 1, &sq, 1), NB_OK);
  y = nb_sum(gc, sq, NULL, 0, false);
  assert_int_equal(nb_gradients(gc, &y, 1, &px, 1, NULL, &pd[0]), NB_OK);
  s = nb_sum(gc, pd[0], NULL, 0, false);
  assert_int_equal(nb_gradients(gc, &s, 1, &px, 1, NULL, &pd[1]), NB_OK);
  nb_session *sess = nb_session_new(g);
  assert_int_equal(nb_run(sess, &px, (nb_tensor *[]){vec(e, xv)}, 1, pd, 2, res), NB_OK);
  check_cube_grads(res);
  for (int i = 0; i < 2; i++) nb_tensor_free(res[i]);
  nb_session_free(sess);
  nb_ctx_free(e);
  nb_ctx_free(gc);
  nb_graph_free(g);
}

/* A body that leaves an output NULL fails an eager call of a composite with a registered
   gradient too, naming the composite. */
static nb_code null_output_body(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)in, (void)nin, (void)nout, (void)user;
  out[0] = NULL;
  return nb_status(c);
}

static void test_eager_registered_gradient_body_errors(void **state) {
  (void)state;
  assert_int_equal(nb_register_composite_op("NullOutputCounted", null_output_body, NULL, 1, 1), NB_OK);
  assert_int_equal(nb_register_gradient("NullOutputCounted", cube_grad), NB_OK);
  nb_ctx *c = nb_eager_new();
  nb_tensor *x = vec(c, xv), *out = NULL;
  assert_int_equal(nb_composite_op(c, "NullOutputCounted", &x, 1, &out, 1), NB_INVALID);
  assert_non_null(strstr(nb_error(c), "NullOutputCounted"));
  assert_null(out);
  nb_ctx_free(c);
}

/* An op type named like a composite, and a composite named like an op type, are refused;
   the one registered first still works. */
static nb_code negate_kernel(nb_op_ctx *k) {
  const double *a = nb_opctx_input_value(k, 0);
  double *y = nb_opctx_output_data(k, 0);
  for (int64_t i = 0; i < nb_num_elements(nb_opctx_input(k, 0)); i++) y[i] = -a[i];
  return NB_OK;
}

static nb_code register_negate(const char *name) {
  static const nb_op_arg x = {"x", NB_F64, NULL, NULL}, y = {"y", NB_F64, NULL, NULL};
  nb_op_spec spec = {name, &x, 1, &y, 1, NULL, 0, NULL, negate_kernel, false};
  return nb_register_op(&spec);
}

static void test_names_exclusive_both_orders(void **state) {
  (void)state;
  assert_int_equal(nb_register_composite_op("NameTakenByComposite", square_body, NULL, 1, 1), NB_OK);
  assert_int_equal(register_negate("NameTakenByComposite"), NB_INVALID);
  assert_non_null(strstr(nb_registry_error(), "already registered"));
  assert_int_equal(register_negate("NameTakenByOp"), NB_OK);
  assert_int_equal(nb_register_composite_op("NameTakenByOp", square_body, NULL, 1, 1), NB_INVALID);
  assert_non_null(strstr(nb_registry_error(), "already registered"));

  nb_ctx *c = nb_eager_new();
  nb_tensor *x = vec(c, xv), *sq = NULL, *neg = NULL;
  assert_int_equal(nb_composite_op(c, "NameTakenByComposite", &x, 1, &sq, 1), NB_OK);
  assert_int_equal(nb_op(c, "NameTakenByOp", &x, 1, NULL, 0, &neg, 1), NB_OK);
  for (int64_t i = 0; i < N; i++) {
    assert_true(nb_item(sq, i) == xv[i] * xv[i]);
    assert_true(nb_item(neg, i) == -xv[i]);
  }
  assert_int_equal(nb_composite_op(c, "NameTakenByOp", &x, 1, &sq, 1), NB_NOT_FOUND);
  nb_ctx_free(c);
}

static void test_registration_errors(void **state) {
  (void)state;
  assert_int_equal(nb_register_composite_op("lowercase", body, NULL, 2, 2), NB_INVALID);
  assert_non_null(strstr(nb_registry_error(), "not a valid op type name"));
  assert_int_equal(nb_register_composite_op(NULL, body, NULL, 2, 2), NB_INVALID);
  assert_int_equal(nb_register_composite_op("Bad Name", body, NULL, 2, 2), NB_INVALID);
  assert_int_equal(nb_register_composite_op("TanhProd", body, NULL, 2, 2), NB_INVALID);
  assert_non_null(strstr(nb_registry_error(), "already registered"));
  assert_int_equal(nb_register_composite_op("Tanh", body, NULL, 1, 1), NB_INVALID);
  assert_int_equal(nb_register_composite_op("NoBody", NULL, NULL, 1, 1), NB_INVALID);
  assert_int_equal(nb_register_composite_op("NoOutputs", body, NULL, 1, 0), NB_INVALID);
  assert_int_equal(nb_register_composite_op("NegativeInputs", body, NULL, -1, 1), NB_INVALID);
}

/* Each call error, in an eager and a graph context. */
static void call_errors(nb_ctx *c, nb_tensor *x, nb_tensor *w) {
  nb_tensor *out[3], *in[2] = {x, w};
  assert_int_equal(nb_composite_op(c, "NoSuchComposite", in, 2, out, 2), NB_NOT_FOUND);
  nb_clear_error(c);
  assert_int_equal(nb_composite_op(c, "TanhProd", in, 2, out, 3), NB_INVALID);
  assert_non_null(strstr(nb_error(c), "gives 2 outputs"));
  nb_clear_error(c);
  assert_int_equal(nb_composite_op(c, "TanhProd", in, 1, out, 2), NB_INVALID);
  nb_clear_error(c);
  assert_int_equal(nb_composite_op(c, "FailingComposite", in, 2, out, 2), NB_UNIMPLEMENTED);
  assert_non_null(strstr(nb_error(c), "this body refuses"));
  assert_null(out[0]);
  nb_clear_error(c);
  assert_int_equal(nb_composite_op(c, "HalfComposite", in, 2, out, 2), NB_INVALID);
  assert_non_null(strstr(nb_error(c), "output 1"));
  nb_clear_error(c);
}

static void test_call_errors(void **state) {
  (void)state;
  nb_ctx *e = nb_eager_new();
  call_errors(e, vec(e, xv), vec(e, wv));
  nb_ctx_free(e);
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  call_errors(c, nb_placeholder(c, NB_F64, 1, (int64_t[]){N}, "x"), nb_placeholder(c, NB_F64, 1, (int64_t[]){N}, "w"));
  nb_ctx_free(c);
  nb_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tape_equals_inline),
      cmocka_unit_test(test_symbolic_equals_inline),
      cmocka_unit_test(test_graph_one_node),
      cmocka_unit_test(test_registered_gradient_wins),
      cmocka_unit_test(test_eager_registered_gradient),
      cmocka_unit_test(test_registered_gradient_second_order),
      cmocka_unit_test(test_eager_registered_gradient_body_errors),
      cmocka_unit_test(test_names_exclusive_both_orders),
      cmocka_unit_test(test_registration_errors),
      cmocka_unit_test(test_call_errors),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
