/* SavedModels TensorFlow wrote (tests/golden/saved_model, made by
   tests/golden/tf_saved_model.py: a Keras MLP through model.export and through
   tf.saved_model.save): signatures listed, the serving function run, differentiated with
   respect to its input and its variables, and fine-tuned one SGD step, against TF's
   results; and the errors. */
#define _POSIX_C_SOURCE 200809L
#include "graphutil.h"
#include "tempdir.h"

#include <stdio.h>
#include <string.h>

#define MODEL_VARS 4
#define LR 0.1
/* Rounding: each result is at most a chain of the dot products (4 inputs, 8 hidden units),
   the batch sum (2 rows) and 3 elementwise roundings (bias, tanh, 1 - h^2). */
#define TERMS (4 + 8 + 2 + 3)

typedef struct model_case {
  const char *name, *input_key;
  int nsignatures;
  const char *keys[MODEL_VARS]; /* the checkpoint keys, in key order */
} model_case;

static const model_case export_case = {
    "mlp_export",
    "x",
    2,
    {"variables/0/.ATTRIBUTES/VARIABLE_VALUE", "variables/1/.ATTRIBUTES/VARIABLE_VALUE",
     "variables/2/.ATTRIBUTES/VARIABLE_VALUE", "variables/3/.ATTRIBUTES/VARIABLE_VALUE"}};
static const model_case save_case = {
    "mlp_save",
    "inputs",
    1,
    {"_operations/1/_kernel/.ATTRIBUTES/VARIABLE_VALUE", "_operations/1/bias/.ATTRIBUTES/VARIABLE_VALUE",
     "_operations/2/_kernel/.ATTRIBUTES/VARIABLE_VALUE", "_operations/2/bias/.ATTRIBUTES/VARIABLE_VALUE"}};

static void model_dir(const model_case *mc, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", NB_SAVED_MODEL_GOLDEN_DIR, mc->name);
}

/* TF's array <stem>.npy of the model as float64 values (malloc'd), its length in *n. */
static double *golden(nb_ctx *e, const model_case *mc, const char *stem, int64_t *n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s_golden/%s.npy", NB_SAVED_MODEL_GOLDEN_DIR, mc->name, stem);
  nb_tensor *t = nb_npy_read(e, path);
  if (!t) fail_msg("%s", nb_error(e));
  *n = nb_num_elements(t);
  double *v = malloc((size_t)*n * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < *n; i++) v[i] = nb_item(t, i);
  nb_tensor_free(t);
  return v;
}

/* got against TF's <stem>.npy within the rounding bound of <stem>_abs.npy (scaled). */
static void check_golden(nb_ctx *e, const nb_tensor *got, const model_case *mc, const char *stem, double abs_scale,
                         const char *abs_stem) {
  int64_t n, nabs;
  char abs_name[256];
  snprintf(abs_name, sizeof abs_name, "%s_abs", abs_stem);
  double *want = golden(e, mc, stem, &n), *abs = golden(e, mc, abs_name, &nabs);
  assert_int_equal(n, nb_num_elements(got));
  assert_int_equal(nabs, n);
  for (int64_t i = 0; i < n; i++) abs[i] = abs[i] * abs_scale + fabs(want[i]);
  tu_check_sums(got, want, NB_F32, TERMS, abs);
  free(want);
  free(abs);
}

/* "_operations/1/_kernel/.ATTRIBUTES/VARIABLE_VALUE" -> "_operations_1__kernel" */
static void key_stem(const char *key, char *stem, size_t cap) {
  size_t len = strcspn(key, ".") - 1; /* the path ends before "/.ATTRIBUTES" */
  snprintf(stem, cap, "%.*s", (int)len, key);
  for (char *p = stem; *p; p++)
    if (*p == '/') *p = '_';
}

static void check_signatures(const nb_saved_model *m, const model_case *mc) {
  assert_int_equal(nb_saved_model_num_signatures(m), mc->nsignatures);
  const nb_saved_model_signature *s = nb_saved_model_find_signature(m, "serving_default");
  assert_non_null(s);
  assert_ptr_equal(nb_saved_model_signature_at(m, mc->nsignatures - 1), s); /* name order */
  assert_null(nb_saved_model_signature_at(m, mc->nsignatures));
  assert_null(nb_saved_model_find_signature(m, "__saved_model_init_op"));
  assert_string_equal(s->method, "tensorflow/serving/predict");
  assert_int_equal(s->ninputs, 1);
  assert_int_equal(s->noutputs, 1);
  assert_string_equal(s->inputs[0].key, mc->input_key);
  assert_int_equal(s->inputs[0].dtype, NB_F32);
  assert_int_equal(s->inputs[0].rank, 2);
  assert_int_equal(s->inputs[0].shape[0], -1);
  assert_int_equal(s->inputs[0].shape[1], 4);
  assert_string_equal(s->outputs[0].key, "output_0");
  assert_int_equal(s->outputs[0].shape[1], 3);
}

/* Runs the serving signature on TF's x: y, d sum(y) / dx and / d each variable against TF's,
   then one SGD step on sum(y) against TF's updated variables. */
static void check_model(const model_case *mc) {
  char dir[512];
  model_dir(mc, dir, sizeof dir);
  gu_fixture f;
  assert_true(gu_open(&f));
  nb_saved_model *m = NULL;
  if (nb_saved_model_load(f.c, dir, NULL, &m)) fail_msg("%s", nb_error(f.c));
  check_signatures(m, mc);
  assert_int_equal(nb_saved_model_num_variables(m), MODEL_VARS);
  nb_variable *vars[MODEL_VARS];
  nb_tensor *x, *y, *reads[MODEL_VARS], *grads[1 + MODEL_VARS], *fetch[2 + MODEL_VARS], *out[2 + MODEL_VARS];
  for (int i = 0; i < MODEL_VARS; i++) {
    assert_string_equal(nb_saved_model_variable_key(m, i), mc->keys[i]);
    vars[i] = nb_saved_model_variable(m, i);
    reads[i] = nb_variable_read(f.c, vars[i]);
  }
  assert_null(nb_saved_model_variable(m, MODEL_VARS));
  assert_int_equal(nb_saved_model_signature_tensors(f.c, nb_saved_model_find_signature(m, "serving_default"), &x, &y),
                   NB_OK);
  nb_tensor *loss = nb_sum(f.c, y, NULL, 0, false), *xs[1 + MODEL_VARS] = {x};
  memcpy(xs + 1, reads, sizeof reads);
  if (nb_gradients(f.c, &loss, 1, xs, 1 + MODEL_VARS, NULL, grads)) fail_msg("%s", nb_error(f.c));
  fetch[0] = y;
  memcpy(fetch + 1, grads, sizeof grads);
  char xpath[600];
  snprintf(xpath, sizeof xpath, "%s/%s_golden/x.npy", NB_SAVED_MODEL_GOLDEN_DIR, mc->name);
  nb_tensor *xv = nb_npy_read(f.e, xpath);
  if (nb_run(f.s, &x, &xv, 1, fetch, 2 + MODEL_VARS, out)) fail_msg("%s", nb_session_error(f.s));
  check_golden(f.e, out[0], mc, "y", 1, "y");
  check_golden(f.e, out[1], mc, "dx", 1, "dx");
  for (int i = 0; i < MODEL_VARS; i++) {
    char stem[256], d[300], sgd[300];
    key_stem(mc->keys[i], stem, sizeof stem);
    snprintf(d, sizeof d, "d_%s", stem);
    snprintf(sgd, sizeof sgd, "sgd_%s", stem);
    check_golden(f.e, out[2 + i], mc, d, 1, d);
  }
  for (int i = 0; i < 2 + MODEL_VARS; i++) nb_tensor_free(out[i]);

  /* fine-tuning: one SGD step; an update's error is the gradient's, times the rate */
  nb_optimizer *sgd = nb_sgd_new(LR);
  nb_tensor *train;
  if (nb_optimizer_apply(sgd, f.c, grads + 1, vars, MODEL_VARS, &train)) fail_msg("%s", nb_error(f.c));
  if (nb_run(f.s, &x, &xv, 1, &train, 1, out)) fail_msg("%s", nb_session_error(f.s));
  nb_tensor_free(out[0]);
  for (int i = 0; i < MODEL_VARS; i++) {
    char stem[256], d[300], sgd_stem[300];
    key_stem(mc->keys[i], stem, sizeof stem);
    snprintf(d, sizeof d, "d_%s", stem);
    snprintf(sgd_stem, sizeof sgd_stem, "sgd_%s", stem);
    nb_tensor *now =
        nb_tensor_from(f.e, NB_F32, nb_variable_rank(vars[i]), nb_variable_shape(vars[i]), nb_variable_data(vars[i]));
    check_golden(f.e, now, mc, sgd_stem, LR, d);
  }
  nb_optimizer_free(sgd);
  nb_saved_model_free(m);
  gu_close(&f);
}

static void test_keras_export(void **state) {
  (void)state;
  check_model(&export_case);
}

static void test_tf_saved_model_save(void **state) {
  (void)state;
  check_model(&save_case);
}

/* ---- errors ------------------------------------------------------------------------------------ */

/* Loads dir into a fresh graph: the code, the error in msg, the graph's node count after. */
static nb_code load_error(const char *dir, const char *tags, char *msg, size_t cap, int *nodes) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_saved_model *m = (nb_saved_model *)&m; /* must come back NULL */
  nb_code code = nb_saved_model_load(c, dir, tags, &m);
  assert_null(m);
  snprintf(msg, cap, "%s", nb_error(c));
  *nodes = nb_graph_num_nodes(g);
  nb_ctx_free(c);
  nb_graph_free(g);
  return code;
}

static void write_bytes(const char *path, const void *data, size_t n) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, n, fp), n);
  assert_int_equal(fclose(fp), 0);
}

static void test_errors(void **state) {
  tu_files *t = *state;
  char msg[1024], dir[512], pb[600];
  int nodes;
  model_dir(&export_case, dir, sizeof dir);
  snprintf(pb, sizeof pb, "%s/saved_model.pb", dir);
  /* missing directory */
  snprintf(t->path, sizeof t->path, "%s/none", t->dir);
  assert_int_equal(load_error(t->path, NULL, msg, sizeof msg, &nodes), NB_IO);
  assert_non_null(strstr(msg, "none/saved_model.pb"));
  /* an unknown tag set: the error lists the ones there are */
  assert_int_equal(load_error(dir, "serve,gpu", msg, sizeof msg, &nodes), NB_NOT_FOUND);
  assert_non_null(strstr(msg, "no MetaGraphDef tagged 'serve,gpu' (the file has [serve])"));
  /* saved_model.pb that is not protobuf, then one cut short */
  snprintf(t->path, sizeof t->path, "%s/saved_model.pb", t->dir);
  write_bytes(t->path, "\xff\xff\xff\xff not a protobuf", 19);
  assert_int_equal(load_error(t->dir, NULL, msg, sizeof msg, &nodes), NB_CORRUPT);
  assert_non_null(strstr(msg, "not a SavedModel"));
  uint8_t *bytes;
  size_t n;
  FILE *fp = fopen(pb, "rb");
  assert_non_null(fp);
  assert_int_equal(fseek(fp, 0, SEEK_END), 0);
  n = (size_t)ftell(fp);
  rewind(fp);
  bytes = malloc(n);
  assert_int_equal(fread(bytes, 1, n, fp), n);
  fclose(fp);
  write_bytes(t->path, bytes, n / 2);
  assert_int_equal(load_error(t->dir, NULL, msg, sizeof msg, &nodes), NB_CORRUPT);
  /* the whole saved_model.pb without its variables: nothing imported */
  write_bytes(t->path, bytes, n);
  assert_int_equal(load_error(t->dir, NULL, msg, sizeof msg, &nodes), NB_IO);
  assert_non_null(strstr(msg, "variables/variables.index"));
  assert_int_equal(nodes, 0);
  free(bytes);
  /* an eager context */
  nb_saved_model *m = NULL;
  assert_int_equal(nb_saved_model_load(t->c, dir, NULL, &m), NB_INVALID);
  assert_null(m);
  assert_int_equal(nb_saved_model_num_signatures(NULL), -1);
  assert_int_equal(nb_saved_model_num_variables(NULL), -1);
  assert_null(nb_saved_model_find_signature(NULL, "serving_default"));
  nb_saved_model_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_keras_export),
      cmocka_unit_test(test_tf_saved_model_save),
      cmocka_unit_test_setup_teardown(test_errors, tu_files_setup, tu_files_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
