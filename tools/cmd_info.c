/* nabla info: what a checkpoint, GraphDef or SavedModel holds, or what this build runs on. */
#include "tool.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* path + suffix in a new string (free), or NULL when out of memory. */
static char *joined(const char *path, const char *suffix) {
  size_t a = strlen(path), b = strlen(suffix);
  char *s = malloc(a + b + 1);
  if (s) {
    memcpy(s, path, a);
    memcpy(s + a, suffix, b + 1);
  }
  return s;
}

/* TF's inspect_checkpoint: each tensor's key, dtype and shape, in key order. */
static int info_checkpoint(const char *prefix) {
  nb_ctx *c = nb_eager_new();
  nb_checkpoint_entry *entries = NULL;
  int n = 0;
  if (!c || nb_checkpoint_list(c, prefix, &entries, &n) != NB_OK) {
    int rc = tool_fail(&tool_info, "%s", c ? nb_error(c) : "out of memory");
    nb_ctx_free(c);
    return rc;
  }
  int width = 0;
  for (int i = 0; i < n; i++)
    if ((int)strlen(entries[i].key) > width) width = (int)strlen(entries[i].key);
  printf("checkpoint %s: %d tensor%s\n", prefix, n, n == 1 ? "" : "s");
  for (int i = 0; i < n; i++) {
    printf("  %-*s  ", width, entries[i].key);
    tool_print_type(stdout, entries[i].dtype, entries[i].rank, entries[i].shape);
    putchar('\n');
  }
  nb_checkpoint_list_free(entries, n);
  nb_ctx_free(c);
  return TOOL_OK;
}

/* A checkpoint named by its prefix or by its .index file: the prefix, else NULL. */
static char *checkpoint_prefix(const char *file) {
  size_t n = strlen(file);
  if (n > 6 && strcmp(file + n - 6, ".index") == 0 && is_file(file)) {
    char *prefix = joined(file, "");
    if (prefix) prefix[n - 6] = '\0';
    return prefix;
  }
  char *index = joined(file, ".index");
  bool found = index && is_file(index);
  free(index);
  return found ? joined(file, "") : NULL;
}

/* ---- a GraphDef ------------------------------------------------------------------------------- */

typedef struct op_count {
  const char *op;
  int n;
} op_count;

static int by_count(const void *a, const void *b) {
  const op_count *x = a, *y = b;
  return x->n != y->n ? (y->n > x->n) - (y->n < x->n) : strcmp(x->op, y->op);
}

/* Op types with their node counts, the most frequent first. */
static int print_ops(const nb_graph *g) {
  int nodes = nb_graph_num_nodes(g), types = 0;
  op_count *counts = calloc((size_t)nodes + 1, sizeof *counts);
  if (!counts) return tool_fail(&tool_info, "out of memory");
  for (int i = 0; i < nodes; i++) {
    const char *op = nb_graph_node_op(g, i);
    int t = 0;
    while (t < types && strcmp(counts[t].op, op)) t++;
    if (t == types) counts[types++].op = op;
    counts[t].n++;
  }
  qsort(counts, (size_t)types, sizeof *counts, by_count);
  printf("ops (%d types):\n", types);
  for (int t = 0; t < types; t++) printf("  %-28s %d\n", counts[t].op, counts[t].n);
  free(counts);
  return TOOL_OK;
}

static void print_tensor(tool_graph *tg, const char *node, int k) {
  char name[600];
  snprintf(name, sizeof name, "%s:%d", node, k);
  nb_tensor *t = nb_graph_tensor_by_name(tg->c, name);
  printf("  %-40s ", name);
  tool_print_type(stdout, nb_dtype_of(t), nb_rank(t), nb_shape(t));
  putchar('\n');
  nb_tensor_free(t);
}

/* Placeholders, then the outputs of nodes no node reads (what a user fetches). */
static void print_ends(tool_graph *tg) {
  int nodes = nb_graph_num_nodes(tg->g);
  printf("placeholders:\n");
  for (int i = 0; i < nodes; i++)
    if (!strcmp(nb_graph_node_op(tg->g, i), "Placeholder")) print_tensor(tg, nb_graph_node_name(tg->g, i), 0);
  printf("outputs (read by no node):\n");
  for (int i = 0; i < nodes; i++)
    if (nb_graph_node_num_consumers(tg->g, i) == 0 && strcmp(nb_graph_node_op(tg->g, i), "Placeholder"))
      for (int k = 0; k < nb_graph_node_num_outputs(tg->g, i); k++) print_tensor(tg, nb_graph_node_name(tg->g, i), k);
}

static int print_variables(nb_ctx *c) {
  int n = nb_graph_variables(c, NULL, 0);
  nb_variable **vars = malloc((size_t)(n > 0 ? n : 1) * sizeof *vars);
  if (!vars) return tool_fail(&tool_info, "out of memory");
  nb_graph_variables(c, vars, n);
  printf("variables (%d):\n", n);
  for (int i = 0; i < n; i++) {
    printf("  %-40s ", nb_variable_name(vars[i]));
    tool_print_type(stdout, nb_variable_dtype(vars[i]), nb_variable_rank(vars[i]), nb_variable_shape(vars[i]));
    putchar('\n');
  }
  free(vars);
  return TOOL_OK;
}

static int info_graph(const char *path) {
  tool_graph tg = {0};
  int rc = TOOL_ERROR;
  if (tool_graph_open(&tool_info, path, &tg)) {
    printf("graphdef %s: %d nodes\n", path, nb_graph_num_nodes(tg.g));
    rc = print_ops(tg.g);
    if (!rc) print_ends(&tg);
    if (!rc) rc = print_variables(tg.c);
  }
  tool_graph_close(&tg);
  return rc;
}

/* ---- a SavedModel ----------------------------------------------------------------------------------- */

static void print_signature_tensor(const char *role, const nb_saved_model_tensor *t) {
  printf("  %-6s %-16s %-40s ", role, t->key, t->name);
  tool_print_type(stdout, t->dtype, t->rank, t->shape);
  putchar('\n');
}

static void print_saved_model(const char *dir, const char *tags, const nb_saved_model *m) {
  int nsig = nb_saved_model_num_signatures(m), nvar = nb_saved_model_num_variables(m);
  printf("saved model %s (tags %s): %d signature%s, %d variable%s\n", dir, tags, nsig, nsig == 1 ? "" : "s", nvar,
         nvar == 1 ? "" : "s");
  for (int i = 0; i < nsig; i++) {
    const nb_saved_model_signature *s = nb_saved_model_signature_at(m, i);
    printf("signature %s (%s):\n", s->name, s->method);
    for (int k = 0; k < s->ninputs; k++) print_signature_tensor("input", &s->inputs[k]);
    for (int k = 0; k < s->noutputs; k++) print_signature_tensor("output", &s->outputs[k]);
  }
  printf("variables (checkpoint key, node):\n");
  for (int i = 0; i < nvar; i++) {
    const nb_variable *v = nb_saved_model_variable(m, i);
    printf("  %-48s %-24s ", nb_saved_model_variable_key(m, i), nb_variable_name(v));
    tool_print_type(stdout, nb_variable_dtype(v), nb_variable_rank(v), nb_variable_shape(v));
    putchar('\n');
  }
}

static int info_saved_model(const char *dir, const char *tags) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_saved_model *m = NULL;
  int rc = TOOL_OK;
  if (!c)
    rc = tool_fail(&tool_info, "out of memory");
  else if (nb_saved_model_load(c, dir, tags, &m))
    rc = tool_fail(&tool_info, "%s", nb_error(c));
  else
    print_saved_model(dir, tags ? tags : "serve", m);
  nb_saved_model_free(m);
  nb_ctx_free(c);
  nb_graph_free(g);
  return rc;
}

static bool is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* FILE by what it is: a SavedModel directory, a checkpoint prefix or .index file, a GraphDef. */
static int info_file(const char *file, const char *tags) {
  if (is_dir(file)) return info_saved_model(file, tags);
  if (tags) return tool_usage_error(&tool_info, "--tags is for SavedModels, and %s is no directory", file);
  char *prefix = checkpoint_prefix(file);
  if (prefix) {
    int rc = info_checkpoint(prefix);
    free(prefix);
    return rc;
  }
  if (is_file(file)) return info_graph(file);
  return tool_fail(&tool_info, "%s: no such file, directory or checkpoint (no %s.index)", file, file);
}

static int info_main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--build") == 0) {
    puts(nb_build_info());
    return TOOL_OK;
  }
  const char *file = NULL, *tags = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--tags")) {
      if (!(tags = tool_flag_value(argc, argv, &i))) return tool_usage_error(&tool_info, "--tags needs a value");
    } else if (argv[i][0] == '-') {
      return tool_usage_error(&tool_info, "unknown flag '%s'", argv[i]);
    } else if (file) {
      return tool_usage_error(&tool_info, "takes one FILE, got '%s' and '%s'", file, argv[i]);
    } else {
      file = argv[i];
    }
  }
  return file ? info_file(file, tags) : tool_usage_error(&tool_info, "needs a FILE, or --build");
}

const tool_cmd tool_info = {
    "info", "shows what a GraphDef, SavedModel or checkpoint holds, or what this build runs on",
    "FILE [--tags TAGS] | --build\n"
    "  FILE         a GraphDef (.pb): op types with counts, placeholders, outputs no node reads\n"
    "               (dtypes and shapes), variables;\n"
    "               a SavedModel directory: its signatures' inputs and outputs, its variables;\n"
    "               a checkpoint, by prefix (PREFIX.index beside PREFIX.data-*) or .index file:\n"
    "               each tensor's key, dtype and shape\n"
    "  --tags TAGS  the SavedModel's MetaGraphDef to read (comma-separated; default serve)\n"
    "  --build      the version and what this build runs on (nb_build_info())\n",
    info_main};
