/* libFuzzer target for the SavedModel reader (make fuzz). An input is a saved_model.pb,
   written into a temporary directory whose variables/ holds the variables of
   tests/golden/saved_model/mlp_export (copied once), then loaded into a fresh graph; a
   model that loads has its signatures' tensors looked up. Seeds are in
   fuzz/corpus/saved_model (fuzz/make_corpus.py copies the SavedModels of
   tests/golden/saved_model). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <nabla.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECKPOINT_FILES 2
static const char *const checkpoint_files[CHECKPOINT_FILES] = {"variables.index", "variables.data-00000-of-00001"};

static char tmp_dir[256];

static void path_in(char *path, size_t cap, const char *a, const char *b) { snprintf(path, cap, "%s/%s", a, b); }

static void remove_files(void) {
  char vars[300], path[400];
  path_in(vars, sizeof vars, tmp_dir, "variables");
  for (int i = 0; i < CHECKPOINT_FILES; i++) {
    path_in(path, sizeof path, vars, checkpoint_files[i]);
    unlink(path);
  }
  rmdir(vars);
  path_in(path, sizeof path, tmp_dir, "saved_model.pb");
  unlink(path);
  rmdir(tmp_dir);
}

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  if (!in || !out) abort();
  char buf[1 << 14];
  for (size_t n; (n = fread(buf, 1, sizeof buf, in)) > 0;)
    if (fwrite(buf, 1, n, out) != n) abort();
  fclose(in);
  if (fclose(out) != 0) abort();
}

/* The directory the inputs are written into, with the golden variables, removed at exit. */
static const char *model_dir(void) {
  if (!tmp_dir[0]) { /* under $TMPDIR, /tmp without it */
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/nabla-fuzz-sm-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_dir)) abort();
    atexit(remove_files);
    char vars[300], from[600], to[400];
    path_in(vars, sizeof vars, tmp_dir, "variables");
    if (mkdir(vars, 0700) != 0) abort();
    for (int i = 0; i < CHECKPOINT_FILES; i++) {
      snprintf(from, sizeof from, "%s/mlp_export/variables/%s", NB_SAVED_MODEL_GOLDEN_DIR, checkpoint_files[i]);
      path_in(to, sizeof to, vars, checkpoint_files[i]);
      copy_file(from, to);
    }
  }
  return tmp_dir;
}

static void use_signatures(nb_ctx *c, const nb_saved_model *m) {
  for (int i = 0; i < nb_saved_model_num_signatures(m); i++) {
    const nb_saved_model_signature *s = nb_saved_model_signature_at(m, i);
    nb_tensor **t = calloc((size_t)(s->ninputs + s->noutputs) + 1, sizeof *t);
    if (!t) return;
    nb_saved_model_signature_tensors(c, s, t, t + s->ninputs);
    nb_clear_error(c);
    free(t);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *dir = model_dir();
  char path[300];
  path_in(path, sizeof path, dir, "saved_model.pb");
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_saved_model *m = NULL;
  if (c && nb_saved_model_load(c, dir, NULL, &m) == NB_OK) use_signatures(c, m);
  nb_saved_model_free(m);
  nb_ctx_free(c);
  nb_graph_free(g);
  return 0;
}
