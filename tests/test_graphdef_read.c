/* GraphDef import against TensorFlow: the TF-made graphs of tests/golden/tf_graphdef.py
   (frozen, and as function graphs with their variables) imported, run, differentiated to
   first and second order and fine-tuned, compared with TF's values; and the error paths. */
#include "testutil.h"

#include <stdio.h>

#define GOLDEN(file) NB_GRAPHDEF_GOLDEN_DIR "/" file

/* A model of the golden script: its variables, and the longest chain of sums any compared
   value passes through (forward, loss and backward, summed over the layers' reduction
   lengths), which bounds the float32 rounding of both TF's and nabla's results. */
typedef struct model {
  const char *name;
  int nw;
  bool twice; /* twice differentiable: ddx compared */
  int64_t terms;
} model;

/* mlp 5x4 -> 8 -> 3: forward 4 + 8, loss 15, backward 3 + 8 + 5 (dw sums the batch);
   cnn 2x6x6x1, 3x3 conv, 18 -> 3: 9 + 18 + 6 + 3 + 18 + 72 (dk sums 2x6x6); cond 3x4 -> 2:
   4 + 6 + 2 + 3; rnn 4 steps of 3 + 5 each way, twice for the second order. */
static const model models[] = {
    {"mlp", 3, true, 64}, {"cnn", 3, false, 160}, {"cond", 1, true, 32}, {"rnn", 2, true, 160}};

static nb_tensor *golden(nb_ctx *e, const char *name, const char *key) {
  char path[512];
  snprintf(path, sizeof path, GOLDEN("%s_%s.npy"), name, key);
  nb_tensor *x = nb_npy_read(e, path);
  if (!x) fail_msg("%s: %s", path, nb_error(e));
  return x;
}

/* The frozen graph's Const of each variable (the golden script's NAME_consts.txt). */
static void const_names(const char *name, char names[][128], int n) {
  char path[512];
  snprintf(path, sizeof path, GOLDEN("%s_consts.txt"), name);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  for (int k = 0; k < n; k++) {
    assert_non_null(fgets(names[k], 128, f));
    names[k][strcspn(names[k], "\n")] = 0;
  }
  fclose(f);
}

/* |got - want| <= 2 gamma_terms(float32) max|want|: a norm-wise bound of two float32
   computations of the same chain of sums. */
static void check_close(const nb_tensor *got, const nb_tensor *want, int64_t terms, const char *what) {
  assert_non_null(got);
  assert_int_equal(nb_num_elements(got), nb_num_elements(want));
  double scale = 0;
  for (int64_t i = 0; i < nb_num_elements(want); i++) scale = fmax(scale, fabs(nb_item(want, i)));
  double bound = 2 * tu_gamma(NB_F32, terms) * scale;
  for (int64_t i = 0; i < nb_num_elements(want); i++)
    if (!(fabs(nb_item(got, i) - nb_item(want, i)) <= bound))
      fail_msg("%s element %lld: got %.9g, want %.9g, bound %.3g", what, (long long)i, nb_item(got, i),
               nb_item(want, i), bound);
}

/* The model's weights as graph tensors: the imported variables (given TF's values), or the
   frozen graph's Consts made variables. */
static void weights(nb_ctx *c, nb_ctx *e, const model *m, bool frozen, nb_variable **vars, nb_tensor **w) {
  if (frozen) {
    char names[8][128];
    const_names(m->name, names, m->nw);
    assert_int_equal(nb_graph_variables(c, NULL, 0), 0);
    for (int k = 0; k < m->nw; k++) assert_int_equal(nb_graph_const_to_variable(c, names[k], &vars[k]), NB_OK);
  } else {
    for (int k = 0; k < m->nw; k++) {
      char key[16];
      snprintf(key, sizeof key, "w%d", k);
      nb_tensor *value = golden(e, m->name, key);
      assert_non_null(nb_variable_assign(e, vars[k], value));
    }
  }
  assert_int_equal(nb_graph_variables(c, vars, 8), m->nw);
  for (int k = 0; k < m->nw; k++) assert_non_null(w[k] = nb_variable_read(c, vars[k]));
}

static void check_model(const model *m, bool frozen) {
  char path[512];
  snprintf(path, sizeof path, GOLDEN("%s_%s.pb"), m->name, frozen ? "frozen" : "func");
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  if (nb_graph_read_graphdef(c, path) != NB_OK) fail_msg("%s", nb_error(c));
  nb_variable *vars[8] = {0};
  nb_tensor *w[8] = {0};
  if (!frozen) assert_int_equal(nb_graph_variables(c, vars, 8), m->nw);
  weights(c, e, m, frozen, vars, w);
  nb_tensor *x = nb_graph_tensor_by_name(c, "x:0"), *y = nb_graph_tensor_by_name(c, "y:0");
  nb_tensor *loss = nb_graph_tensor_by_name(c, "loss");
  assert_non_null(x && y && loss);
  nb_tensor *xs[9] = {x}, *grads[9] = {0}, *ddx = NULL;
  for (int k = 0; k < m->nw; k++) xs[1 + k] = w[k];
  if (nb_gradients(c, &loss, 1, xs, 1 + m->nw, NULL, grads) != NB_OK) fail_msg("%s", nb_error(c));
  if (m->twice) {
    nb_tensor *s = nb_sum(c, grads[0], NULL, 0, false);
    if (nb_gradients(c, &s, 1, &x, 1, NULL, &ddx) != NB_OK) fail_msg("%s", nb_error(c));
  }
  nb_tensor *fetch[12] = {y, loss}, *res[12] = {0};
  int nf = 2;
  for (int k = 0; k <= m->nw; k++) fetch[nf++] = grads[k];
  if (ddx) fetch[nf++] = ddx;
  nb_session *s = nb_session_new(g);
  nb_tensor *xv = golden(e, m->name, "x");
  if (nb_run(s, &x, &xv, 1, fetch, nf, res) != NB_OK) fail_msg("%s: %s", path, nb_session_error(s));
  check_close(res[0], golden(e, m->name, "y"), m->terms, "y");
  check_close(res[1], golden(e, m->name, "loss"), m->terms, "loss");
  check_close(res[2], golden(e, m->name, "dx"), m->terms, "dx");
  for (int k = 0; k < m->nw; k++) {
    char key[16];
    snprintf(key, sizeof key, "dw%d", k);
    check_close(res[3 + k], golden(e, m->name, key), m->terms, key);
  }
  if (ddx) check_close(res[nf - 1], golden(e, m->name, "ddx"), 2 * m->terms, "ddx");
  for (int i = 0; i < nf; i++) nb_tensor_free(res[i]);
  nb_session_free(s);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

static void test_frozen(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) check_model(&models[i], true);
}

static void test_function_graphs(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof models / sizeof *models; i++) check_model(&models[i], false);
}

/* Fine-tuning: the frozen MLP's first kernel made a variable; one SGD step on TF's
   gradient (checked against TF's) lowers the loss. */
static void test_fine_tune(void **state) {
  (void)state;
  const model *m = &models[0];
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  assert_int_equal(nb_graph_read_graphdef(c, GOLDEN("mlp_frozen.pb")), NB_OK);
  char names[8][128];
  const_names(m->name, names, m->nw);
  nb_variable *v = NULL;
  assert_int_equal(nb_graph_const_to_variable(c, names[0], &v), NB_OK);
  assert_string_equal(nb_variable_name(v), names[0]);
  nb_tensor *x = nb_graph_tensor_by_name(c, "x"), *loss = nb_graph_tensor_by_name(c, "loss:0");
  nb_tensor *wv = nb_variable_read(c, v), *dw = NULL, *step = NULL;
  assert_int_equal(nb_gradients(c, &loss, 1, &wv, 1, NULL, &dw), NB_OK);
  nb_optimizer *sgd = nb_sgd_new(0.05);
  assert_int_equal(nb_optimizer_apply(sgd, c, &dw, &v, 1, &step), NB_OK);
  nb_session *s = nb_session_new(g);
  nb_tensor *xv = golden(e, m->name, "x"), *before[2] = {0}, *after = NULL;
  nb_tensor *fetch[2] = {loss, dw};
  assert_int_equal(nb_run(s, &x, &xv, 1, fetch, 2, before), NB_OK);
  check_close(before[0], golden(e, m->name, "loss"), m->terms, "loss");
  check_close(before[1], golden(e, m->name, "dw0"), m->terms, "dw0");
  assert_int_equal(nb_run(s, &x, &xv, 1, &step, 1, &after), NB_OK);
  nb_tensor_free(after);
  assert_int_equal(nb_run(s, &x, &xv, 1, &loss, 1, &after), NB_OK);
  assert_true(nb_item(after, 0) < nb_item(before[0], 0));
  nb_tensor_free(after);
  nb_tensor_free(before[0]);
  nb_tensor_free(before[1]);
  /* not a Const, and no such node */
  nb_variable *none = NULL;
  assert_int_equal(nb_graph_const_to_variable(c, "Tanh", &none), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Tanh", "not a Const");
  assert_int_equal(nb_graph_const_to_variable(c, "nowhere", &none), NB_NOT_FOUND);
  tu_check_error(c, NB_NOT_FOUND, "nowhere", NULL);
  assert_null(none);
  nb_session_free(s);
  nb_optimizer_free(sgd);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* Attrs the file leaves out take TF's defaults: Sum's keep_dims false, MatMul's
   transpose_a false, Conv2D's data_format NHWC and dilations 1. */
static void test_default_attrs(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  if (nb_graph_read_graphdef(c, GOLDEN("defaults.pb")) != NB_OK) fail_msg("%s", nb_error(c));
  nb_tensor *x = nb_graph_tensor_by_name(c, "x"),
            *fetch[3] = {nb_graph_tensor_by_name(c, "s"), nb_graph_tensor_by_name(c, "conv:0"),
                         nb_graph_tensor_by_name(c, "m")};
  const double xs[6] = {1, -2, 3, 0.5, 4, -1};
  nb_tensor *xv = tu_make(e, NB_F32, 4, TU_SHAPE(1, 2, 3, 1), xs), *res[3] = {0};
  nb_session *s = nb_session_new(g);
  assert_int_equal(nb_run(s, &x, &xv, 1, fetch, 3, res), NB_OK);
  /* exact: sums of three small integers and halves, products by 2 */
  tu_check(res[0], NB_F32, 3, TU_SHAPE(1, 2, 1), TU_VALS(2, 3.5), 0);
  double twice[6], gram[4] = {0};
  for (int i = 0; i < 6; i++) twice[i] = 2 * xs[i];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 2; j++)
      for (int k = 0; k < 3; k++) gram[i * 2 + j] += xs[i * 3 + k] * xs[j * 3 + k];
  tu_check(res[1], NB_F32, 4, TU_SHAPE(1, 2, 3, 1), twice, 0);
  tu_check(res[2], NB_F32, 2, TU_SHAPE(2, 2), gram, 0);
  for (int i = 0; i < 3; i++) nb_tensor_free(res[i]);
  nb_session_free(s);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* Reads path into a malloc'd buffer. */
static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  unsigned char *buf = malloc(1 << 16);
  assert_non_null(buf);
  *n = fread(buf, 1, 1 << 16, f);
  fclose(f);
  return buf;
}

/* A failed import leaves the graph as it was: same node count, and it still runs. */
static void check_rejected(const char *file, nb_code code, const char *frag1, const char *frag2) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *a = nb_placeholder(c, NB_F32, 0, NULL, "pre"), *b = nb_tanh(c, a);
  int before = nb_graph_num_nodes(g);
  assert_int_equal(nb_graph_read_graphdef(c, file), code);
  tu_check_error(c, code, frag1, frag2);
  assert_int_equal(nb_graph_num_nodes(g), before);
  assert_null(nb_graph_tensor_by_name(c, "one"));
  nb_clear_error(c);
  nb_tensor *again = nb_sin(c, b);
  assert_non_null(again);
  assert_string_equal(nb_tensor_node_name(again), "Sin");
  nb_ctx_free(c);
  nb_graph_free(g);
}

static void test_errors(void **state) {
  (void)state;
  check_rejected(GOLDEN("bad_unknown_ops.pb"), NB_UNIMPLEMENTED, "Erfinv 'a', FooBar 'b', Erfinv 'c'", "3 nodes");
  check_rejected(GOLDEN("bad_attr_type.pb"), NB_CORRUPT, "node 'm'", "attr 'transpose_a' is a string");
  check_rejected(GOLDEN("bad_missing_input.pb"), NB_CORRUPT, "node 't'", "'nowhere:0' is not a node");
  check_rejected(GOLDEN("bad_cycle.pb"), NB_CORRUPT, "cycle through node", NULL);
  check_rejected(GOLDEN("bad_dtype.pb"), NB_DTYPE, "node 's'", "string");
  check_rejected(GOLDEN("bad_tf1_cond.pb"), NB_UNIMPLEMENTED, "TF 1 control flow", "Switch 'sw'");
  check_rejected(GOLDEN("nonexistent.pb"), NB_IO, "nonexistent.pb", NULL);
  /* the MLP again over itself: its names are taken */
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  assert_int_equal(nb_graph_read_graphdef(c, GOLDEN("mlp_frozen.pb")), NB_OK);
  int n = nb_graph_num_nodes(g);
  assert_int_equal(nb_graph_read_graphdef(c, GOLDEN("mlp_frozen.pb")), NB_INVALID);
  tu_check_error(c, NB_INVALID, "mlp_frozen.pb", "already has a node");
  assert_int_equal(nb_graph_num_nodes(g), n);
  /* every truncation of a file is an error or a smaller valid graph, never a crash */
  size_t len;
  unsigned char *buf = slurp(GOLDEN("rnn_frozen.pb"), &len);
  int corrupt = 0;
  for (size_t cut = 1; cut < len; cut += 7) {
    nb_graph *h = nb_graph_new();
    nb_ctx *d = nb_graph_ctx_new(h);
    nb_code code = nb_graph_read_graphdef_buffer(d, buf, cut);
    if (code != NB_OK) {
      assert_true(code == NB_CORRUPT || code == NB_UNIMPLEMENTED || code == NB_INVALID || code == NB_DTYPE);
      corrupt += code == NB_CORRUPT;
      assert_int_equal(nb_graph_num_nodes(h), 0);
    }
    nb_ctx_free(d);
    nb_graph_free(h);
  }
  assert_true(corrupt > 0);
  assert_int_equal(nb_graph_read_graphdef_buffer(c, buf, len - 1), NB_CORRUPT);
  tu_check_error(c, NB_CORRUPT, "not a valid GraphDef", NULL);
  free(buf);
  nb_ctx_free(c);
  nb_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_frozen),        cmocka_unit_test(test_function_graphs), cmocka_unit_test(test_fine_tune),
      cmocka_unit_test(test_default_attrs), cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
