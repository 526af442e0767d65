/* nb_recompute_grad (tf.recompute_grad): the forward pass keeps no intermediates, the
   gradient reruns the function. The rerun executes the same ops in the same order on the
   same inputs, and its backward pass the same gradient ops in the same order as the plain
   run's, so first-order gradients match bit for bit. Second order sums the same terms in
   another order (the recomputed forward and its backward are new ops on the outer tape or
   graph), so it matches to rounding: see assert_close. */
#include "graphutil.h"

#include "../src/autodiff/tape.h" /* the entries and saved buffers a tape holds */
#include "../src/graph/graph.h"   /* node names and edges: what the gradient graph reads */

#define LAYERS 10

/* An MLP block: h = tanh(h @ w), *(int *)user times, from h = in[0]; in[1] is w. */
static nb_code mlp_block(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout;
  nb_tensor *h = in[0];
  for (int i = 0; i < *(const int *)user; i++) h = nb_tanh(c, nb_matmul(c, h, in[1], false, false));
  out[0] = h;
  return nb_status(c);
}

static int layers = LAYERS;

/* y = the block, recomputed or plain. */
static nb_tensor *block(nb_ctx *c, bool recompute, nb_tensor *const *xw) {
  nb_tensor *y = NULL;
  if (recompute)
    assert_int_equal(nb_recompute_grad(c, mlp_block, &layers, xw, 2, &y, 1), NB_OK);
  else
    assert_int_equal(mlp_block(c, xw, 2, &y, 1, &layers), NB_OK);
  return y;
}

static nb_tensor *loss_of(nb_ctx *c, nb_tensor *y) { return nb_sum(c, nb_mul(c, y, y), NULL, 0, false); }

static const int64_t xshape[2] = {2, 3}, wshape[2] = {3, 3};
static const double xv[6] = {0.3, -0.7, 0.2, 0.9, 0.1, -0.4};
static const double wv[9] = {0.5, -0.3, 0.8, 0.2, 0.6, -0.1, -0.4, 0.7, 0.3};

static void make_inputs(nb_ctx *c, nb_tensor **xw) {
  xw[0] = tu_make(c, NB_F64, 2, xshape, xv);
  xw[1] = tu_make(c, NB_F64, 2, wshape, wv);
}

/* |a - b| <= tol * max |a| elementwise (tol 0: equal bits, up to the sign of zero). */
static void assert_close(const nb_tensor *a, const nb_tensor *b, double tol) {
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(nb_num_elements(a), nb_num_elements(b));
  double scale = 0;
  for (int64_t i = 0; i < nb_num_elements(a); i++) scale = fmax(scale, fabs(nb_item(a, i)));
  for (int64_t i = 0; i < nb_num_elements(a); i++)
    if (!(fabs(nb_item(a, i) - nb_item(b, i)) <= tol * scale))
      fail_msg("element %lld: %.17g vs %.17g", (long long)i, nb_item(a, i), nb_item(b, i));
}

/* Second order: each element sums on the order of 4 * LAYERS products (two gradient ops per
   layer, each feeding forward and backward paths); summing the same terms in another order
   moves the result by at most (terms - 1) * u * (sum of |terms|), which these well
   conditioned sums keep near the largest element. */
#define SECOND_ORDER_TOL (4 * LAYERS * 0x1p-53)

/* First-order gradients of the loss for x and w on a tape, and the second order
   d(sum of dx)/d(x, w) from an outer tape. */
static void eager_grads(nb_ctx *c, bool recompute, nb_tensor **d1, nb_tensor **d2) {
  nb_tensor *xw[2];
  make_inputs(c, xw);
  nb_tape *outer = nb_tape_begin(c, 0), *inner = nb_tape_begin(c, 0);
  for (int i = 0; i < 2; i++) nb_tape_watch(outer, xw[i]), nb_tape_watch(inner, xw[i]);
  nb_tensor *loss = loss_of(c, block(c, recompute, xw));
  assert_int_equal(nb_tape_gradient(inner, &loss, 1, xw, 2, NULL, d1), NB_OK);
  nb_tensor *s = nb_sum(c, d1[0], NULL, 0, false);
  assert_int_equal(nb_tape_gradient(outer, &s, 1, xw, 2, NULL, d2), NB_OK);
  nb_tape_end(inner);
  nb_tape_end(outer);
}

static void test_eager_same_gradients(void **state) {
  gu_fixture *f = *state;
  nb_tensor *plain1[2], *plain2[2], *re1[2], *re2[2];
  eager_grads(f->e, false, plain1, plain2);
  eager_grads(f->e, true, re1, re2);
  for (int i = 0; i < 2; i++) assert_close(plain1[i], re1[i], 0), assert_close(plain2[i], re2[i], SECOND_ORDER_TOL);
}

/* The same in a graph: nb_gradients twice, run in the session. */
static void graph_grads(gu_fixture *f, bool recompute, nb_tensor **got) {
  nb_tensor *ph[2] = {nb_placeholder(f->c, NB_F64, 2, xshape, "x"), nb_placeholder(f->c, NB_F64, 2, wshape, "w")};
  nb_tensor *vals[2];
  make_inputs(f->e, vals);
  nb_tensor *loss = loss_of(f->c, block(f->c, recompute, ph)), *d1[2], *d2[2];
  assert_int_equal(nb_gradients(f->c, &loss, 1, ph, 2, NULL, d1), NB_OK);
  nb_tensor *s = nb_sum(f->c, d1[0], NULL, 0, false);
  assert_int_equal(nb_gradients(f->c, &s, 1, ph, 2, NULL, d2), NB_OK);
  nb_tensor *fetch[4] = {d1[0], d1[1], d2[0], d2[1]};
  for (int i = 0; i < 4; i++) got[i] = gu_run(f, ph, vals, 2, fetch[i]);
}

static void test_graph_same_gradients(void **state) {
  gu_fixture *f = *state;
  nb_tensor *plain[4], *re[4];
  graph_grads(f, false, plain);
  graph_grads(f, true, re);
  for (int i = 0; i < 4; i++) {
    assert_close(plain[i], re[i], i < 2 ? 0 : SECOND_ORDER_TOL);
    nb_tensor_free(plain[i]);
    nb_tensor_free(re[i]);
  }
}

static void test_gradcheck(void **state) {
  gu_fixture *f = *state;
  nb_tensor *ph[2] = {nb_placeholder(f->c, NB_F64, 2, xshape, "x"), nb_placeholder(f->c, NB_F64, 2, wshape, "w")};
  nb_tensor *vals[2];
  make_inputs(f->e, vals);
  nb_tensor *loss = loss_of(f->c, block(f->c, true, ph));
  double err = 1;
  assert_int_equal(nb_gradcheck(f->c, loss, ph, 2, vals, &err), NB_OK);
  assert_true(err < 1e-7); /* central differences of a smooth f64 function: about 1e-10 */
}

/* What a tape holds after the loss of the block (or, with block_layers 0, of x alone):
   its entries, and its saved buffers (the values the backward pass will read). */
static void tape_size(nb_ctx *c, int block_layers, bool recompute, int32_t *entries, int32_t *saved) {
  nb_tensor *xw[2], *y = NULL;
  make_inputs(c, xw);
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, xw[0]);
  if (recompute)
    assert_int_equal(nb_recompute_grad(c, mlp_block, &block_layers, xw, 2, &y, 1), NB_OK);
  else
    assert_int_equal(mlp_block(c, xw, 2, &y, 1, &block_layers), NB_OK);
  loss_of(c, y);
  *entries = t->nentries;
  *saved = 0;
  for (int32_t i = 0; i < t->nslots; i++) *saved += t->slots[i].buf != NULL;
  nb_tape_end(t);
}

/* The recomputed block is one tape entry saving its inputs and output (x, w, y); the
   plain block records a MatMul and a Tanh per layer and saves their operands. */
static void test_forward_keeps_no_intermediates(void **state) {
  gu_fixture *f = *state;
  int32_t loss_entries, loss_saved, plain_entries, plain_saved, re_entries, re_saved;
  tape_size(f->e, 0, false, &loss_entries, &loss_saved);
  tape_size(f->e, LAYERS, false, &plain_entries, &plain_saved);
  tape_size(f->e, LAYERS, true, &re_entries, &re_saved);
  assert_int_equal(plain_entries, loss_entries + 2 * LAYERS);
  assert_true(plain_saved >= loss_saved + 2 * LAYERS);
  assert_int_equal(re_entries, loss_entries + 1);
  assert_int_equal(re_saved, loss_saved + 3);
}

static bool under_gradients(const nbgraph_node *n) { return strncmp(n->name, "gradients/", 10) == 0; }

/* Counts the Tanh nodes under the gradient scope, and the edges from forward MatMul and
   Tanh nodes (the block's intermediates) into the gradient graph. */
static void gradient_graph_reads_opts(gu_fixture *f, bool recompute, const nb_grad_opts *o, int *grad_tanhs,
                                      int *intermediate_reads) {
  nb_tensor *ph[2] = {nb_placeholder(f->c, NB_F64, 2, xshape, "x"), nb_placeholder(f->c, NB_F64, 2, wshape, "w")};
  nb_tensor *loss = loss_of(f->c, block(f->c, recompute, ph)), *d[2];
  assert_int_equal(nb_gradients(f->c, &loss, 1, ph, 2, o, d), NB_OK);
  const nb_graph *g = f->g;
  *grad_tanhs = *intermediate_reads = 0;
  for (int32_t i = 0; i < g->nnodes; i++) {
    const nbgraph_node *n = &g->nodes[i];
    bool tanh = strcmp(n->def->name, "Tanh") == 0, matmul = strcmp(n->def->name, "MatMul") == 0;
    if (under_gradients(n)) {
      *grad_tanhs += tanh;
    } else if (tanh || matmul) {
      for (int32_t e = n->first_use; e >= 0; e = g->edges[e].next_use)
        *intermediate_reads += g->edges[e].out >= 0 && under_gradients(&g->nodes[g->edges[e].consumer]);
    }
  }
}

static void gradient_graph_reads(gu_fixture *f, bool recompute, int *grad_tanhs, int *intermediate_reads) {
  gradient_graph_reads_opts(f, recompute, NULL, grad_tanhs, intermediate_reads);
}

/* In a graph the recomputed layers are new nodes under the gradient scope, and nothing
   there reads the forward pass's intermediates, which a session can then free after the
   forward pass; the plain block's gradient reads them. */
static void test_graph_gradient_reads_no_intermediates(void **state) {
  gu_fixture *f = *state;
  int tanhs, reads;
  gradient_graph_reads(f, true, &tanhs, &reads);
  assert_int_equal(tanhs, LAYERS);
  assert_int_equal(reads, 0);
}

static void test_graph_plain_gradient_reads_intermediates(void **state) {
  gu_fixture *f = *state;
  int tanhs, reads;
  gradient_graph_reads(f, false, &tanhs, &reads);
  assert_int_equal(tanhs, 0);
  assert_true(reads >= LAYERS);
}

/* ---- automatic checkpointing (nb_grad_opts.checkpoint_segments) ------------------------------ */

/* The plain block's gradients, first and second order, with the given segments. */
static void checkpointed_grads(gu_fixture *f, int segments, nb_tensor **got) {
  nb_tensor *ph[2] = {nb_placeholder(f->c, NB_F64, 2, xshape, "x"), nb_placeholder(f->c, NB_F64, 2, wshape, "w")};
  nb_tensor *vals[2];
  make_inputs(f->e, vals);
  nb_grad_opts o = {.checkpoint_segments = segments};
  nb_tensor *loss = loss_of(f->c, block(f->c, false, ph)), *d1[2], *d2[2];
  assert_int_equal(nb_gradients(f->c, &loss, 1, ph, 2, &o, d1), NB_OK);
  nb_tensor *s = nb_sum(f->c, d1[0], NULL, 0, false);
  assert_int_equal(nb_gradients(f->c, &s, 1, ph, 2, &o, d2), NB_OK);
  nb_tensor *fetch[4] = {d1[0], d1[1], d2[0], d2[1]};
  for (int i = 0; i < 4; i++) got[i] = gu_run(f, ph, vals, 2, fetch[i]);
}

/* The recomputation runs the same ops on the same values as the forward pass, and the
   backward pass the same gradient ops in the same order, so first order matches bit for
   bit; second order differentiates the recomputed ops too, summing the same terms in
   another order (SECOND_ORDER_TOL, as for nb_recompute_grad). */
static void test_checkpointed_same_gradients(void **state) {
  gu_fixture *f = *state;
  const int segments[] = {1, 3, LAYERS, 4 * LAYERS, NB_CHECKPOINT_SQRT};
  nb_tensor *plain[4];
  graph_grads(f, false, plain);
  for (size_t k = 0; k < sizeof segments / sizeof *segments; k++) {
    nb_tensor *ck[4];
    checkpointed_grads(f, segments[k], ck);
    for (int i = 0; i < 4; i++) {
      assert_close(plain[i], ck[i], i < 2 ? 0 : SECOND_ORDER_TOL);
      nb_tensor_free(ck[i]);
    }
  }
  for (int i = 0; i < 4; i++) nb_tensor_free(plain[i]);
}

/* With k segments only each segment's last op is kept: a kept Tanh is read by its own
   gradient, by the next MatMul's and by the next segment's recomputation (3 edges), a
   kept MatMul by at most as many, so at most 3k edges lead from forward intermediates into
   the gradient graph, and the other layers are recomputed under the gradient scope. */
static void test_checkpointed_gradient_reads_few_intermediates(void **state) {
  gu_fixture *f = *state;
  int tanhs, reads, plain_tanhs, plain_reads;
  gradient_graph_reads_opts(f, false, &(nb_grad_opts){.checkpoint_segments = 4}, &tanhs, &reads);
  assert_true(reads <= 3 * 4);
  assert_true(tanhs >= LAYERS - 4);
  gu_close(f);
  assert_true(gu_open(f));
  gradient_graph_reads(f, false, &plain_tanhs, &plain_reads);
  assert_true(plain_reads >= 2 * LAYERS);
  assert_int_equal(plain_tanhs, 0);
}

static void test_checkpoint_option_errors(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 0, NULL, "x"), *d = NULL;
  assert_int_equal(nb_gradients(f->c, &x, 1, &x, 1, &(nb_grad_opts){.checkpoint_segments = -2}, &d), NB_INVALID);
  assert_non_null(strstr(nb_error(f->c), "checkpoint_segments"));
}

/* ---- the memory checkpointing saves ------------------------------------------------------------ */

#define DEEP_LAYERS 32
#define DEEP_WIDTH 64
#define DEEP_BATCH 16 /* an activation: 4 KiB of float32, a weight 16 KiB (pool blocks: powers of two) */

/* sin(0.37 i + seed): finite values, distinct per tensor. */
static nb_tensor *deep_value(nb_ctx *e, int64_t rows, int64_t cols, double seed) {
  float v[DEEP_WIDTH * DEEP_WIDTH];
  for (int64_t i = 0; i < rows * cols; i++) v[i] = (float)(sin(0.37 * (double)i + seed) / (double)cols);
  return nb_tensor_from(e, NB_F32, 2, (const int64_t[]){rows, cols}, v);
}

/* The gradient of sum(h^2), h = tanh(h W_l) over DEEP_LAYERS layers, with respect to every
   W_l and the input, each reduced as it is made (a chain of adds in the order the backward
   pass makes them), run once on the graph as built (no fused kernels, whose block buffers
   are a fixed scratch); returns the run's peak (nb_session_get_stats) and the fetched sum. */
static int64_t deep_gradient_peak(gu_fixture *f, int segments, double *sum) {
  nb_tensor *feed[DEEP_LAYERS + 1], *vals[DEEP_LAYERS + 1], *d[DEEP_LAYERS + 1];
  for (int l = 0; l <= DEEP_LAYERS; l++) {
    bool input = l == DEEP_LAYERS;
    int64_t rows = input ? DEEP_BATCH : DEEP_WIDTH;
    feed[l] = nb_placeholder(f->c, NB_F32, 2, (const int64_t[]){rows, DEEP_WIDTH}, NULL);
    vals[l] = deep_value(f->e, rows, DEEP_WIDTH, l);
  }
  nb_tensor *h = feed[DEEP_LAYERS];
  for (int l = 0; l < DEEP_LAYERS; l++) h = nb_tanh(f->c, nb_matmul(f->c, h, feed[l], false, false));
  nb_tensor *y = nb_sum(f->c, nb_mul(f->c, h, h), NULL, 0, false);
  assert_int_equal(
      nb_gradients(f->c, &y, 1, feed, DEEP_LAYERS + 1, &(nb_grad_opts){.checkpoint_segments = segments}, d), NB_OK);
  nb_tensor *total = nb_sum(f->c, d[DEEP_LAYERS - 1], NULL, 0, false), *out = NULL;
  for (int l = DEEP_LAYERS - 2; l >= -1; l--)
    total = nb_add(f->c, total, nb_sum(f->c, d[l < 0 ? DEEP_LAYERS : l], NULL, 0, false));
  nb_session *s = nb_session_new_with_opts(f->g, &(nb_session_opts){0});
  assert_int_equal(nb_run(s, feed, vals, DEEP_LAYERS + 1, &total, 1, &out), NB_OK);
  *sum = nb_item(out, 0);
  nb_tensor_free(out);
  nb_session_stats stats;
  nb_session_get_stats(s, &stats);
  nb_session_free(s);
  return stats.peak_bytes_last_run;
}

/* The plain gradient holds the activations of every layer but the last when the first
   weight gradient is made: at least (L - 1) a + w bytes (a one activation, w one weight's
   gradient). Checkpointed, the backward pass holds the kept activations and one segment's
   recomputation, fewer than Chen et al.'s 2 sqrt(N) for N = L + 1 activations the plain
   gradient keeps (the input's and each layer's), plus what any backward step holds: the
   gradient flowing in and the one it makes, a recomputed pre-activation, one weight's
   gradient, and a reduced scalar or two (64-byte blocks, below one activation). The
   gradients are the plain ones bit for bit. */
static void test_checkpointed_peak_below_plain(void **state) {
  gu_fixture *f = *state;
  const double a = 4.0 * DEEP_BATCH * DEEP_WIDTH, w = 4.0 * DEEP_WIDTH * DEEP_WIDTH;
  double plain_sum, ckpt_sum;
  int64_t plain = deep_gradient_peak(f, 0, &plain_sum);
  gu_close(f);
  assert_true(gu_open(f));
  int64_t ckpt = deep_gradient_peak(f, NB_CHECKPOINT_SQRT, &ckpt_sum);
  assert_true(plain_sum == ckpt_sum);
  if (!((double)plain >= (DEEP_LAYERS - 1) * a + w)) fail_msg("plain peak %lld", (long long)plain);
  double bound = (2 * sqrt(DEEP_LAYERS + 1.0) + 4) * a + w;
  if (!((double)ckpt <= bound))
    fail_msg("checkpointed peak %lld above %.0f (plain %lld)", (long long)ckpt, bound, (long long)plain);
}

/* x * v, v a variable read inside the function (user). */
static nb_code scale_by_variable(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout;
  out[0] = nb_mul(c, in[0], nb_variable_read(c, user));
  return nb_status(c);
}

/* As documented: a variable read inside the function gets no gradient through it (pass
   it as an input instead); the inputs' gradients are right. */
static void test_variable_inside_gets_no_gradient(void **state) {
  gu_fixture *f = *state;
  nb_variable *v = nb_variable_new(f->e, nb_scalar(f->e, NB_F64, 3), true, "v");
  nb_tensor *x = nb_scalar(f->e, NB_F64, 2), *y, *dx, *dv;
  nb_tape *t = nb_tape_begin(f->e, 1);
  nb_tape_watch(t, x);
  assert_int_equal(nb_recompute_grad(f->e, scale_by_variable, v, &x, 1, &y, 1), NB_OK);
  assert_int_equal(nb_tape_gradient_vars(t, &y, 1, &v, 1, &dv), NB_OK);
  assert_null(dv);
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_OK);
  assert_true(nb_item(dx, 0) == 3);
  nb_tape_end(t);
  nb_variable_free(v);
}

/* Fails on its second call (the rerun), without a message. */
static nb_code fails_on_rerun(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout;
  if ((*(int *)user)++ > 0) return NB_UNIMPLEMENTED;
  out[0] = nb_tanh(c, in[0]);
  return nb_status(c);
}

static nb_code silent_failure(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)c, (void)in, (void)nin, (void)out, (void)nout, (void)user;
  return NB_UNIMPLEMENTED;
}

static void assert_error(nb_ctx *c, nb_code code, const char *frag) {
  assert_int_equal(nb_status(c), code);
  if (!strstr(nb_error(c), frag)) fail_msg("error \"%s\" lacks \"%s\"", nb_error(c), frag);
  nb_clear_error(c);
}

static void test_errors(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_scalar(f->e, NB_F64, 0.5), *y[2];
  assert_int_equal(nb_recompute_grad(f->e, silent_failure, NULL, &x, 1, y, 1), NB_UNIMPLEMENTED);
  assert_error(f->e, NB_UNIMPLEMENTED, "nb_recompute_grad: forward function");
  assert_int_equal(nb_recompute_grad(f->e, NULL, NULL, &x, 1, y, 1), NB_INVALID);
  assert_error(f->e, NB_INVALID, "nb_recompute_grad: NULL function");
  assert_int_equal(nb_recompute_grad(f->e, mlp_block, &layers, &x, 1, y, 0), NB_INVALID);
  assert_error(f->e, NB_INVALID, "nb_recompute_grad");
  int calls = 0; /* two outputs asked of a function that sets one */
  assert_int_equal(nb_recompute_grad(f->e, fails_on_rerun, &calls, &x, 1, y, 2), NB_INVALID);
  assert_error(f->e, NB_INVALID, "nb_recompute_grad: the forward function left output 1 NULL");
  calls = 0;
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, x);
  assert_int_equal(nb_recompute_grad(f->e, fails_on_rerun, &calls, &x, 1, y, 1), NB_OK);
  nb_tensor *dx;
  assert_int_equal(nb_tape_gradient(t, y, 1, &x, 1, NULL, &dx), NB_UNIMPLEMENTED);
  assert_error(f->e, NB_UNIMPLEMENTED, "nb_recompute_grad: the function, rerun for the gradient");
  nb_tape_end(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_eager_same_gradients, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_same_gradients, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_gradcheck, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_forward_keeps_no_intermediates, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_gradient_reads_no_intermediates, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_plain_gradient_reads_intermediates, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_checkpointed_same_gradients, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_checkpointed_gradient_reads_few_intermediates, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_checkpoint_option_errors, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_checkpointed_peak_below_plain, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_variable_inside_gets_no_gradient, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_errors, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests_name("recompute", tests, NULL, NULL);
}
