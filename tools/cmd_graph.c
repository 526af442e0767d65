/* The subcommands on a GraphDef file: run, dot, gradcheck (grad: cmd_grad.c). */
#include "tool.h"

#include <stdlib.h>
#include <string.h>

/* ---- run ------------------------------------------------------------------------------------------ */

/* The .npy file of fetch name in dir: the name with '/' and ':' as '_'. */
static void result_path(const char *dir, const char *name, char *path, size_t cap) {
  int n = snprintf(path, cap, "%s/", dir);
  for (const char *p = name; *p && n > 0 && (size_t)n + 5 < cap; p++) path[n++] = *p == '/' || *p == ':' ? '_' : *p;
  snprintf(path + n, cap - (size_t)n, ".npy");
}

/* Resolves every --feed into fed[i] and values[i]; false after printing the error. */
static bool resolve_feeds(const tool_cmd *cmd, tool_graph *tg, const tool_graph_args *a, nb_tensor **fed,
                          nb_tensor **values) {
  for (int i = 0; i < a->nfeeds; i++)
    if (!tool_graph_feed(cmd, tg, a->feeds[i], &fed[i], &values[i])) return false;
  return true;
}

static int write_results(tool_graph *tg, const tool_graph_args *a, nb_tensor **results) {
  for (int i = 0; i < a->nfetches; i++) {
    char path[4096];
    result_path(a->out ? a->out : ".", a->fetches[i], path, sizeof path);
    if (nb_npy_write(tg->e, results[i], path)) return tool_fail(&tool_run, "%s", nb_error(tg->e));
    printf("%s: ", path);
    tool_print_type(stdout, nb_dtype_of(results[i]), nb_rank(results[i]), nb_shape(results[i]));
    putchar('\n');
  }
  return TOOL_OK;
}

static int run_graph(tool_graph *tg, const tool_graph_args *a, nb_tensor **fed, nb_tensor **values, nb_tensor **fetch,
                     nb_tensor **results) {
  if (!resolve_feeds(&tool_run, tg, a, fed, values)) return TOOL_ERROR;
  for (int i = 0; i < a->nfetches; i++)
    if (!(fetch[i] = tool_graph_tensor(&tool_run, tg, "--fetch", a->fetches[i]))) return TOOL_ERROR;
  nb_session *s = nb_session_new(tg->g);
  if (!s) return tool_fail(&tool_run, "out of memory");
  int rc = nb_run(s, fed, values, a->nfeeds, fetch, a->nfetches, results)
               ? tool_fail(&tool_run, "running %s: %s", a->graph, nb_session_error(s))
               : write_results(tg, a, results);
  nb_session_free(s);
  return rc;
}

static int run_main(int argc, char **argv) {
  tool_graph_args a;
  int rc = tool_graph_args_parse(&tool_run, argc, argv, "--feed --fetch -o", &a);
  if (!rc && a.nfetches == 0) rc = tool_usage_error(&tool_run, "needs at least one --fetch NAME");
  tool_graph tg = {0};
  nb_tensor **t = rc ? NULL : calloc(2 * (size_t)a.nfeeds + 2 * (size_t)a.nfetches, sizeof *t);
  if (!rc && !t) rc = tool_fail(&tool_run, "out of memory");
  if (!rc)
    rc = tool_graph_open(&tool_run, a.graph, &tg)
             ? run_graph(&tg, &a, t, t + a.nfeeds, t + 2 * a.nfeeds, t + 2 * a.nfeeds + a.nfetches)
             : TOOL_ERROR;
  for (int i = 0; t && i < a.nfetches; i++) nb_tensor_free(t[2 * a.nfeeds + a.nfetches + i]);
  free(t);
  tool_graph_close(&tg);
  tool_graph_args_free(&a);
  return rc;
}

const tool_cmd tool_run = {"run", "runs a GraphDef on .npy feeds, writing the fetched tensors as .npy files",
                           "GRAPH --feed NAME=FILE.npy [--feed ...] --fetch NAME [--fetch ...] [-o DIR]\n"
                           "  GRAPH                 a binary GraphDef (.pb)\n"
                           "  --feed NAME=FILE.npy  feeds the tensor NAME (\"x\", \"x:0\") the file's value\n"
                           "  --fetch NAME          computes tensor NAME into DIR/NAME.npy ('/' and ':' as '_')\n"
                           "  -o DIR                where the results go (default: the current directory)\n",
                           run_main};

/* ---- dot ------------------------------------------------------------------------------------------- */

static int dot_main(int argc, char **argv) {
  tool_graph_args a;
  int rc = tool_graph_args_parse(&tool_dot, argc, argv, "-o", &a);
  tool_graph tg = {0};
  if (!rc && tool_graph_open(&tool_dot, a.graph, &tg)) {
    const char *out = a.out ? a.out : "/dev/stdout";
    if (nb_graph_to_dot(tg.g, out)) rc = tool_fail(&tool_dot, "cannot write %s", out);
  } else if (!rc) {
    rc = TOOL_ERROR;
  }
  tool_graph_close(&tg);
  tool_graph_args_free(&a);
  return rc;
}

const tool_cmd tool_dot = {"dot", "writes a GraphDef as Graphviz DOT, nodes grouped by name scope",
                           "GRAPH [-o OUT.dot]\n"
                           "  -o OUT.dot  where it goes (default: standard output); render: dot -Tsvg OUT.dot\n",
                           dot_main};

/* ---- gradcheck ------------------------------------------------------------------------------------- */

static bool same_tensor(const nb_tensor *a, const nb_tensor *b) {
  return !strcmp(nb_tensor_node_name(a), nb_tensor_node_name(b)) &&
         nb_tensor_output_index(a) == nb_tensor_output_index(b);
}

/* The value fed to each x, from the --feeds (which must feed the xs and nothing else). */
static int gradcheck_values(tool_graph *tg, const tool_graph_args *a, nb_tensor *const *xs, int nx,
                            nb_tensor **values) {
  for (int i = 0; i < nx; i++) values[i] = NULL;
  for (int f = 0; f < a->nfeeds; f++) {
    nb_tensor *fed, *value;
    if (!tool_graph_feed(&tool_gradcheck, tg, a->feeds[f], &fed, &value)) return TOOL_ERROR;
    int i = 0;
    while (i < nx && !same_tensor(fed, xs[i])) i++;
    if (i == nx)
      return tool_fail(&tool_gradcheck, "--feed %s: not one of the --xs (gradcheck feeds the xs and nothing else)",
                       a->feeds[f]);
    values[i] = value;
  }
  for (int i = 0; i < nx; i++)
    if (!values[i])
      return tool_fail(&tool_gradcheck, "--xs %s:%d has no --feed (the point to check at)", nb_tensor_node_name(xs[i]),
                       nb_tensor_output_index(xs[i]));
  return TOOL_OK;
}

static int gradcheck_graph(tool_graph *tg, tool_graph_args *a) {
  nb_tensor *y, *xs[TOOL_MAX_NAMES], *values[TOOL_MAX_NAMES];
  int nx = (y = tool_graph_tensor(&tool_gradcheck, tg, "--ys", a->ys))
               ? tool_tensor_list(&tool_gradcheck, tg, "--xs", a->xs, xs)
               : -1;
  if (nx < 0 || gradcheck_values(tg, a, xs, nx, values)) return TOOL_ERROR;
  double err;
  if (nb_gradcheck(tg->c, y, xs, nx, values, &err)) return tool_fail(&tool_gradcheck, "%s", nb_error(tg->c));
  printf("max |numeric - symbolic| = %.3g (float64 central differences)\n", err);
  double tol = a->tol ? strtod(a->tol, NULL) : 0;
  if (a->tol && !(err <= tol)) return tool_fail(&tool_gradcheck, "error %.3g is above --tol %s", err, a->tol);
  return TOOL_OK;
}

static int gradcheck_main(int argc, char **argv) {
  tool_graph_args a;
  int rc = tool_graph_args_parse(&tool_gradcheck, argc, argv, "--ys --xs --feed --tol", &a);
  if (!rc && (!a.ys || strchr(a.ys, ','))) rc = tool_usage_error(&tool_gradcheck, "needs --ys NAME, one tensor");
  if (!rc) rc = tool_check_list(&tool_gradcheck, "--xs", a.xs, true);
  char *end = NULL;
  if (!rc && a.tol && (strtod(a.tol, &end) < 0 || end == a.tol || *end))
    rc = tool_usage_error(&tool_gradcheck, "--tol takes a number >= 0, got '%s'", a.tol);
  tool_graph tg = {0};
  if (!rc) rc = tool_graph_open(&tool_gradcheck, a.graph, &tg) ? gradcheck_graph(&tg, &a) : TOOL_ERROR;
  tool_graph_close(&tg);
  tool_graph_args_free(&a);
  return rc;
}

const tool_cmd tool_gradcheck = {
    "gradcheck", "checks a GraphDef's symbolic gradients against central differences (nb_gradcheck)",
    "GRAPH --ys NAME --xs NAME[,NAME...] --feed NAME=FILE.npy [--feed ...] [--tol X]\n"
    "  --ys NAME   the tensor differentiated (float64, as the graph's inputs)\n"
    "  --xs        the tensors differentiated with respect to, each fed by a --feed\n"
    "  --feed      the point: a value for each x (placeholders other than the xs cannot be fed)\n"
    "  --tol X     fails (status 1) when the largest difference is above X\n",
    gradcheck_main};
