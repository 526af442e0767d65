/* Writes what tests/golden/tf_runs_nabla.py gives TensorFlow: each model of
   tests/graphdef_models.h as NAME.pb (nb_graph_write_graphdef), its feeds, its variables'
   initial values, nabla's results and (models with an update) the variables after one
   update, as .npy files, and manifest.txt saying which tensor each file belongs to. Run by
   hand (target write_graphdef_export) with the output directory as argument. */
#include "../../src/graph/graph.h"
#include "graphdef_models.h"

#include "../../src/core/variable.h"

#include <stdio.h>

static nb_code write_npy(nb_ctx *e, const nb_tensor *x, const char *dir, const char *model, const char *what, int i,
                         char *file, size_t cap) {
  snprintf(file, cap, "%s_%s%d.npy", model, what, i);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  return nb_npy_write(e, x, path);
}

/* Writes every variable of g (the optimizer's counter too) under `what`. */
static nb_code write_vars(FILE *man, nb_ctx *e, const nb_graph *g, const char *dir, const char *model,
                          const char *what) {
  for (int32_t i = 0; i < g->nvars; i++) {
    const nb_variable *v = g->vars[i].var;
    nb_tensor *x = nb_tensor_from(e, v->dtype, v->rank, v->shape, nb_variable_data(v));
    char file[256];
    if (!x || write_npy(e, x, dir, model, what, i, file, sizeof file)) return nb_status(e);
    fprintf(man, "%s %s %s\n", what, v->name, file);
  }
  return NB_OK;
}

static nb_code write_model(FILE *man, int k, const char *dir) {
  gdm_model m;
  char path[1024], file[256];
  if (!gdm_build(k, &m)) {
    fprintf(stderr, "%s: %s%s\n", m.name, m.c ? nb_error(m.c) : "", m.e ? nb_error(m.e) : "");
    gdm_free(&m);
    return NB_INTERNAL;
  }
  snprintf(path, sizeof path, "%s/%s.pb", dir, m.name);
  nb_code code = nb_graph_write_graphdef(m.g, path);
  if (code) fprintf(stderr, "%s: %s\n", m.name, nb_graph_error(m.g));
  fprintf(man, "model %s %s.pb\n", m.name, m.name);
  for (int i = 0; i < m.nfeed && !code; i++) {
    code = write_npy(m.e, m.feed_value[i], dir, m.name, "feed", i, file, sizeof file);
    fprintf(man, "feed %s:%d %s\n", nb_tensor_node_name(m.feed[i]), nb_tensor_output_index(m.feed[i]), file);
  }
  if (!code) code = write_vars(man, m.e, m.g, dir, m.name, "init");
  nb_session *s = nb_session_new(m.g);
  nb_tensor *res[GDM_MAX] = {0};
  if (!code && (code = nb_run(s, m.feed, m.feed_value, m.nfeed, m.fetch, m.nfetch, res)))
    fprintf(stderr, "%s: %s\n", m.name, nb_session_error(s));
  for (int i = 0; i < m.nfetch && !code; i++) {
    code = write_npy(m.e, res[i], dir, m.name, "fetch", i, file, sizeof file);
    fprintf(man, "fetch %s:%d %s\n", nb_tensor_node_name(m.fetch[i]), nb_tensor_output_index(m.fetch[i]), file);
  }
  for (int i = 0; i < m.nfetch; i++) nb_tensor_free(res[i]);
  if (!code && m.update) {
    nb_tensor *r = NULL;
    if ((code = nb_run(s, m.feed, m.feed_value, m.nfeed, &m.update, 1, &r)))
      fprintf(stderr, "%s: %s\n", m.name, nb_session_error(s));
    nb_tensor_free(r);
    fprintf(man, "update %s\n", nb_tensor_node_name(m.update));
    if (!code) code = write_vars(man, m.e, m.g, dir, m.name, "after");
  }
  nb_session_free(s);
  gdm_free(&m);
  return code;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  char path[1024];
  snprintf(path, sizeof path, "%s/manifest.txt", argv[1]);
  FILE *man = fopen(path, "w");
  if (!man) return perror(path), 1;
  nb_code code = NB_OK;
  for (int k = 0; k < GDM_COUNT && !code; k++) code = write_model(man, k, argv[1]);
  fclose(man);
  return code ? 1 : 0;
}
