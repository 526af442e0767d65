/* GraphDef export (nb_graph_write_graphdef): the graphs TensorFlow ran
   (tests/golden/graphdef_export, checked by tests/golden/tf_runs_nabla.py) must export to
   the same bytes; the structure decodes with protobuf-c as TF reads it; every error path
   returns its code with a message naming what failed. */
#define _POSIX_C_SOURCE 200809L
#include "tempdir.h"

#include "graphdef_models.h"
#include "graph.pb-c.h"

#include <stdio.h>
#include <sys/stat.h>

/* The graphs themselves differ between compilers: C leaves the order in which a call's
   arguments are evaluated open, so nested op calls add their nodes in another order (and
   names) under clang than under gcc. TF ran the exports of both (tests/golden/
   graphdef_export and its clang/ folder); each build compares with its compiler's. */
#if defined(__clang__)
#define GOLDEN_DIR NB_GRAPHDEF_GOLDEN_DIR "/clang"
#else
#define GOLDEN_DIR NB_GRAPHDEF_GOLDEN_DIR
#endif

/* The bytes of a file (NULL when it cannot be read). */
static uint8_t *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)len + 1);
  *n = buf ? fread(buf, 1, (size_t)len, f) : 0;
  fclose(f);
  return buf;
}

static void build(int k, gdm_model *m) {
  bool ok = gdm_build(k, m);
  if (!ok) print_error("%s: %s\n", m->name, nb_error(m->c));
  assert_true(ok);
}

/* Each model exports to the bytes TF verified, to a buffer and to a file alike. */
static void test_same_bytes_as_verified(void **state) {
  tu_files *f = *state;
  for (int k = 0; k < GDM_COUNT; k++) {
    gdm_model m;
    build(k, &m);
    char golden[512];
    snprintf(golden, sizeof golden, "%s/%s.pb", GOLDEN_DIR, m.name);
    size_t want_n = 0, got_n = 0, file_n = 0;
    uint8_t *want = read_all(golden, &want_n), *file = NULL;
    void *got = NULL;
    assert_non_null(want);
    assert_int_equal(nb_graph_write_graphdef_buffer(m.g, &got, &got_n), NB_OK);
    assert_string_equal(nb_graph_error(m.g), "");
    snprintf(f->path, sizeof f->path, "%s/%s.pb", f->dir, m.name);
    assert_int_equal(nb_graph_write_graphdef(m.g, f->path), NB_OK);
    file = read_all(f->path, &file_n);
    assert_int_equal(got_n, want_n);
    assert_memory_equal(got, want, want_n);
    assert_int_equal(file_n, want_n);
    assert_memory_equal(file, want, want_n);
    free(want);
    free(got);
    free(file);
    gdm_free(&m);
  }
}

static const Nbpb__NodeDef *find_node(const Nbpb__GraphDef *gd, const char *name) {
  for (size_t i = 0; i < gd->n_node; i++)
    if (strcmp(gd->node[i]->name, name) == 0) return gd->node[i];
  return NULL;
}

static const Nbpb__AttrValue *find_attr(const Nbpb__NodeDef *n, const char *key) {
  for (size_t i = 0; i < n->n_attr; i++)
    if (strcmp(n->attr[i]->key, key) == 0) return n->attr[i]->value;
  return NULL;
}

/* Decoded as TF decodes it: the version, a node per graph node plus one VarHandleOp per
   variable, attrs sorted by key, inferred type attrs, resource inputs, control inputs. */
static void test_structure_decodes(void **state) {
  (void)state;
  gdm_model m;
  build(3, &m); /* variables */
  void *data;
  size_t n;
  assert_int_equal(nb_graph_write_graphdef_buffer(m.g, &data, &n), NB_OK);
  Nbpb__GraphDef *gd = nbpb__graph_def__unpack(NULL, n, data);
  assert_non_null(gd);
  assert_int_equal(gd->versions->producer, 2474);
  assert_int_equal((int)gd->n_node, nb_graph_num_nodes(m.g) + 3); /* kernel, bias, iterations */
  for (size_t i = 0; i < gd->n_node; i++)
    for (size_t a = 1; a < gd->node[i]->n_attr; a++)
      assert_true(strcmp(gd->node[i]->attr[a - 1]->key, gd->node[i]->attr[a]->key) < 0);
  const Nbpb__NodeDef *h = find_node(gd, "dense/kernel"), *x = find_node(gd, "x");
  assert_string_equal(h->op, "VarHandleOp");
  assert_int_equal(find_attr(h, "dtype")->type, 1); /* DT_FLOAT */
  assert_int_equal((int)find_attr(h, "shape")->shape->n_dim, 2);
  assert_string_equal(x->op, "Placeholder");
  assert_int_equal((int)find_attr(x, "shape")->shape->dim[1]->size, 3);
  const Nbpb__NodeDef *mm = find_node(gd, "MatMul");
  assert_int_equal(find_attr(mm, "T")->type, 1);
  assert_string_equal(mm->input[0], "x");
  bool read_of_kernel = false, ctrl = false;
  for (size_t i = 0; i < gd->n_node; i++) {
    const Nbpb__NodeDef *nd = gd->node[i];
    if (strcmp(nd->op, "ReadVariableOp") == 0 && strcmp(nd->input[0], "dense/kernel") == 0) read_of_kernel = true;
    for (size_t j = 0; j < nd->n_input; j++) ctrl |= nd->input[j][0] == '^';
    assert_true(strncmp(nd->op, "_", 1) != 0);
  }
  assert_true(read_of_kernel);
  assert_true(ctrl); /* the step counter's update runs after the variables' */
  nbpb__graph_def__free_unpacked(gd, NULL);
  free(data);
  gdm_free(&m);
}

/* A Const's value travels as tensor_content: its bytes, dtype and shape. */
static void test_const_value(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  int64_t v[3] = {7, -1, 1LL << 40};
  nb_name_next(c, "k");
  nb_const(c, nb_tensor_from(e, NB_I64, 1, (int64_t[]){3}, v));
  void *data;
  size_t n;
  assert_int_equal(nb_graph_write_graphdef_buffer(g, &data, &n), NB_OK);
  Nbpb__GraphDef *gd = nbpb__graph_def__unpack(NULL, n, data);
  const Nbpb__AttrValue *value = find_attr(find_node(gd, "k"), "value");
  assert_int_equal(value->tensor->dtype, 9); /* DT_INT64 */
  assert_int_equal((int)value->tensor->tensor_shape->dim[0]->size, 3);
  assert_int_equal((int)value->tensor->tensor_content.len, (int)sizeof v);
  assert_memory_equal(value->tensor->tensor_content.data, v, sizeof v);
  nbpb__graph_def__free_unpacked(gd, NULL);
  free(data);
  nb_ctx_free(c);
  nb_ctx_free(e);
  nb_graph_free(g);
}

static nb_code square(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **out, int nout, void *user) {
  (void)nin, (void)nout, (void)user;
  out[0] = nb_mul(c, in[0], in[0]);
  return nb_status(c);
}

/* A host callback runs C code of this process: an error naming its node, no output. */
static void test_host_callback_is_an_error(void **state) {
  tu_files *f = *state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *x = nb_placeholder(c, NB_F64, 1, (int64_t[]){3}, "x"), *y;
  nb_host_func *fn = nb_host_func_new(square, NULL, NULL, NULL);
  static const nb_host_output spec = {NB_F64, 1, {3}};
  nb_name_next(c, "my_callback");
  assert_int_equal(nb_py_func(c, fn, true, &x, 1, &spec, &y, 1), NB_OK);
  void *data = NULL;
  size_t n = 0;
  assert_int_equal(nb_graph_write_graphdef_buffer(g, &data, &n), NB_UNIMPLEMENTED);
  assert_null(data);
  assert_non_null(strstr(nb_graph_error(g), "'my_callback'"));
  assert_non_null(strstr(nb_graph_error(g), "host callback"));
  snprintf(f->path, sizeof f->path, "%s/callback.pb", f->dir);
  assert_int_equal(nb_graph_write_graphdef(g, f->path), NB_UNIMPLEMENTED);
  struct stat st;
  assert_int_not_equal(stat(f->path, &st), 0); /* nothing written */
  nb_host_func_release(fn);
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* nabla's own op that TF's registry lacks (Gelu): an error naming the node and the op. */
static void test_op_tf_lacks_is_an_error(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *x = nb_placeholder(c, NB_F32, 1, (int64_t[]){3}, "x");
  nb_name_next(c, "activation");
  assert_non_null(nb_gelu(c, x, false));
  void *data = NULL;
  size_t n = 0;
  assert_int_equal(nb_graph_write_graphdef_buffer(g, &data, &n), NB_UNIMPLEMENTED);
  assert_null(data);
  assert_non_null(strstr(nb_graph_error(g), "'activation'"));
  assert_non_null(strstr(nb_graph_error(g), "Gelu"));
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* NB_IO naming the file; NULL arguments NB_INVALID; a later success clears the message. */
static void test_io_and_argument_errors(void **state) {
  tu_files *f = *state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_placeholder(c, NB_F32, 2, (int64_t[]){-1, 4}, "x");
  snprintf(f->path, sizeof f->path, "%s/no/such/dir/g.pb", f->dir);
  assert_int_equal(nb_graph_write_graphdef(g, f->path), NB_IO);
  assert_non_null(strstr(nb_graph_error(g), f->path));
  assert_int_equal(nb_graph_write_graphdef(g, f->dir), NB_IO); /* a directory */
  assert_int_equal(nb_graph_write_graphdef(g, NULL), NB_INVALID);
  assert_non_null(strstr(nb_graph_error(g), "path"));
  size_t n;
  void *data;
  assert_int_equal(nb_graph_write_graphdef_buffer(g, NULL, &n), NB_INVALID);
  assert_int_equal(nb_graph_write_graphdef_buffer(g, &data, NULL), NB_INVALID);
  assert_int_equal(nb_graph_write_graphdef_buffer(NULL, &data, &n), NB_INVALID);
  assert_int_equal(nb_graph_write_graphdef(NULL, f->path), NB_INVALID);
  assert_string_equal(nb_graph_error(NULL), "");
  assert_int_equal(nb_graph_write_graphdef_buffer(g, &data, &n), NB_OK);
  assert_string_equal(nb_graph_error(g), "");
  Nbpb__GraphDef *gd = nbpb__graph_def__unpack(NULL, n, data);
  assert_int_equal((int)gd->n_node, 1);
  assert_int_equal((int)find_attr(gd->node[0], "shape")->shape->dim[0]->size, -1); /* unknown */
  nbpb__graph_def__free_unpacked(gd, NULL);
  free(data);
  nb_ctx_free(c);
  nb_graph_free(g);
}

static nb_code always(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)v, (void)user;
  *pred = nb_tensor_from(c, NB_BOOL, 0, NULL, (const uint8_t[]){1});
  return nb_status(c);
}

/* v <- tanh([v, v]): a loop variable that grows, so its gradient stacks it ragged. */
static nb_code grow_tanh(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)user;
  nb_tensor *parts[2] = {v[0], v[0]};
  next[0] = nb_tanh(c, nb_concat(c, parts, 2, 0));
  return nb_status(c);
}

/* A ragged loop accumulator has no TensorList form: an error naming the While; the loop
   alone (no gradient yet, no accumulator) exports. */
static void test_ragged_accumulator_is_an_error(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *v = nb_placeholder(c, NB_F64, 1, (int64_t[]){1}, "v"), *y, *dv;
  const nb_shape_spec vector = {1, (const int64_t[]){-1}};
  assert_int_equal(nb_while_ex(c, always, grow_tanh, NULL, &v, 1, 2, &(nb_while_opts){&vector}, &y), NB_OK);
  nb_tensor *loss = nb_sum(c, y, NULL, 0, false);
  void *data = NULL;
  size_t n = 0;
  assert_int_equal(nb_graph_write_graphdef_buffer(g, &data, &n), NB_OK);
  free(data);
  assert_int_equal(nb_gradients(c, &loss, 1, &v, 1, NULL, &dv), NB_OK);
  data = NULL;
  assert_int_equal(nb_graph_write_graphdef_buffer(g, &data, &n), NB_UNIMPLEMENTED);
  assert_null(data);
  assert_non_null(strstr(nb_graph_error(g), "node 'While'"));
  assert_non_null(strstr(nb_graph_error(g), "ragged"));
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* An op TF lacks (a user's op) is written with its type and its public attrs. */
static nb_code scale_kernel(nb_op_ctx *k) {
  const float *x = nb_opctx_input_value(k, 0);
  float *y = nb_opctx_output_data(k, 0), factor = (float)nb_opctx_attr_float(k, "factor");
  for (int64_t i = 0; i < nb_num_elements(nb_opctx_input(k, 0)); i++) y[i] = factor * x[i];
  return NB_OK;
}

/* The exported user op read back while it is registered: it imports and runs, 3 * x. */
static void read_back_user_op(const void *data, size_t n) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  assert_int_equal(nb_graph_read_graphdef_buffer(c, data, n), NB_OK);
  nb_tensor *x = nb_graph_tensor_by_name(c, "x:0"), *y = nb_graph_tensor_by_name(c, "twice:0"), *out = NULL;
  nb_tensor *xv = nb_tensor_from(e, NB_F32, 1, (int64_t[]){2}, (const float[]){1.5f, -2.0f});
  nb_session *s = nb_session_new(g);
  assert_int_equal(nb_run(s, &x, &xv, 1, &y, 1, &out), NB_OK);
  const float *v = nb_data(out);
  assert_true(v[0] == 4.5f && v[1] == -6.0f);
  nb_tensor_free(out);
  nb_session_free(s);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

static void test_user_op_keeps_its_type(void **state) {
  (void)state;
  static const nb_op_arg io = {"x", NB_F32, NULL, NULL};
  static const nb_op_attr_def factor = {"factor", NB_ATTR_FLOAT, false, {.kind = NB_ATTR_FLOAT, .v.f = 2.0}, 0};
  static const nb_op_spec spec = {"GraphdefScale", &io, 1, &io, 1, &factor, 1, NULL, scale_kernel, false};
  assert_int_equal(nb_register_op(&spec), NB_OK);
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *x = nb_placeholder(c, NB_F32, 1, (int64_t[]){2}, "x"), *y;
  nb_attr a = nb_attr_float("factor", 3.0);
  nb_name_next(c, "twice");
  assert_int_equal(nb_op(c, "GraphdefScale", &x, 1, &a, 1, &y, 1), NB_OK);
  void *data;
  size_t n;
  assert_int_equal(nb_graph_write_graphdef_buffer(g, &data, &n), NB_OK);
  Nbpb__GraphDef *gd = nbpb__graph_def__unpack(NULL, n, data);
  const Nbpb__NodeDef *nd = find_node(gd, "twice");
  assert_string_equal(nd->op, "GraphdefScale");
  assert_string_equal(nd->input[0], "x");
  assert_true(find_attr(nd, "factor")->f == 3.0f);
  read_back_user_op(data, n);
  /* The same file naming an op this process has not registered: refused, naming it. */
  char *registered = nd->op;
  ((Nbpb__NodeDef *)nd)->op = "UnregisteredScale";
  size_t n2 = nbpb__graph_def__get_packed_size(gd);
  uint8_t *renamed = malloc(n2);
  nbpb__graph_def__pack(gd, renamed);
  ((Nbpb__NodeDef *)nd)->op = registered; /* the message frees its own string */
  nb_graph *g2 = nb_graph_new();
  nb_ctx *c2 = nb_graph_ctx_new(g2);
  assert_int_equal(nb_graph_read_graphdef_buffer(c2, renamed, n2), NB_UNIMPLEMENTED);
  tu_check_error(c2, NB_UNIMPLEMENTED, "UnregisteredScale", "twice");
  assert_int_equal(nb_graph_num_nodes(g2), 0);
  nb_ctx_free(c2);
  nb_graph_free(g2);
  free(renamed);
  nbpb__graph_def__free_unpacked(gd, NULL);
  free(data);
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* model's tensor x by name in c's graph (after an import). */
static nb_tensor *same_tensor(nb_ctx *c, const nb_tensor *x) {
  char name[512];
  snprintf(name, sizeof name, "%s:%d", nb_tensor_node_name(x), nb_tensor_output_index(x));
  return nb_graph_tensor_by_name(c, name);
}

/* Export, then nb_graph_read_graphdef: the imported graph runs to the same bits (the same
   ops on the same values). Models with variables (imported as zeros) and loop gradients
   (their TensorLists, which the reader does not take) are left out. */
static void test_round_trip_through_the_reader(void **state) {
  (void)state;
  for (int k = 0; k < GDM_COUNT; k++) {
    gdm_model m;
    build(k, &m);
    if (m.nvar || strncmp(m.name, "while", 5) == 0) {
      gdm_free(&m);
      continue;
    }
    nb_tensor *want[GDM_MAX] = {0}, *got[GDM_MAX] = {0}, *feed[GDM_MAX], *fetch[GDM_MAX];
    nb_session *s = nb_session_new(m.g);
    assert_int_equal(nb_run(s, m.feed, m.feed_value, m.nfeed, m.fetch, m.nfetch, want), NB_OK);
    void *data;
    size_t n;
    assert_int_equal(nb_graph_write_graphdef_buffer(m.g, &data, &n), NB_OK);
    nb_graph *g2 = nb_graph_new();
    nb_ctx *c2 = nb_graph_ctx_new(g2);
    assert_int_equal(nb_graph_read_graphdef_buffer(c2, data, n), NB_OK);
    for (int i = 0; i < m.nfeed; i++) assert_non_null(feed[i] = same_tensor(c2, m.feed[i]));
    for (int i = 0; i < m.nfetch; i++) assert_non_null(fetch[i] = same_tensor(c2, m.fetch[i]));
    nb_session *s2 = nb_session_new(g2);
    assert_int_equal(nb_run(s2, feed, m.feed_value, m.nfeed, fetch, m.nfetch, got), NB_OK);
    for (int i = 0; i < m.nfetch; i++) {
      assert_int_equal(nb_num_elements(got[i]), nb_num_elements(want[i]));
      for (int64_t j = 0; j < nb_num_elements(want[i]); j++) assert_true(nb_item(got[i], j) == nb_item(want[i], j));
      nb_tensor_free(want[i]);
      nb_tensor_free(got[i]);
    }
    free(data);
    nb_session_free(s);
    nb_session_free(s2);
    nb_ctx_free(c2);
    nb_graph_free(g2);
    gdm_free(&m);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_same_bytes_as_verified, tu_files_setup, tu_files_teardown),
      cmocka_unit_test(test_structure_decodes),
      cmocka_unit_test(test_const_value),
      cmocka_unit_test_setup_teardown(test_host_callback_is_an_error, tu_files_setup, tu_files_teardown),
      cmocka_unit_test(test_op_tf_lacks_is_an_error),
      cmocka_unit_test_setup_teardown(test_io_and_argument_errors, tu_files_setup, tu_files_teardown),
      cmocka_unit_test(test_ragged_accumulator_is_an_error),
      cmocka_unit_test(test_user_op_keeps_its_type),
      cmocka_unit_test(test_round_trip_through_the_reader),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
