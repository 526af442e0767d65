/* Helpers the `nabla` subcommands share (tool.h). */
#include "tool.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

bool tool_wants_help(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return true;
  return false;
}

int tool_help(const tool_cmd *cmd) {
  printf("nabla %s: %s\nusage: nabla %s %s", cmd->name, cmd->summary, cmd->name, cmd->usage);
  return TOOL_OK;
}

/* "nabla NAME: <message>" and a newline on stderr. */
static void say(const tool_cmd *cmd, const char *fmt, va_list ap) {
  fprintf(stderr, "nabla %s: ", cmd->name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
}

int tool_usage_error(const tool_cmd *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(cmd, fmt, ap);
  va_end(ap);
  fprintf(stderr, "(nabla %s --help shows its usage)\n", cmd->name);
  return TOOL_USAGE;
}

int tool_fail(const tool_cmd *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  say(cmd, fmt, ap);
  va_end(ap);
  return TOOL_ERROR;
}

const char *tool_flag_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) return NULL;
  return argv[++*i];
}

void tool_print_type(FILE *out, nb_dtype t, int rank, const int64_t *shape) {
  fprintf(out, "%s ", nb_dtype_name(t));
  if (rank < 0) {
    fputs("[...]", out);
    return;
  }
  fputc('[', out);
  for (int d = 0; d < rank; d++) {
    if (shape[d] < 0)
      fprintf(out, "%s?", d ? "," : "");
    else
      fprintf(out, "%s%lld", d ? "," : "", (long long)shape[d]);
  }
  fputc(']', out);
}

/* ---- graph subcommands' arguments ------------------------------------------------------------- */

static bool allows(const char *allowed, const char *flag) {
  size_t len = strlen(flag);
  for (const char *p = strstr(allowed, flag); p; p = strstr(p + 1, flag))
    if ((p == allowed || p[-1] == ' ') && (p[len] == ' ' || p[len] == '\0')) return true;
  return false;
}

/* Where the value of a flag given once goes. */
static char **single_slot(tool_graph_args *a, const char *flag) {
  return !strcmp(flag, "-o")          ? &a->out
         : !strcmp(flag, "--tol")     ? &a->tol
         : !strcmp(flag, "--ys")      ? &a->ys
         : !strcmp(flag, "--xs")      ? &a->xs
         : !strcmp(flag, "--grad-ys") ? &a->grad_ys
                                      : NULL;
}

/* flag: one of the allowed, so one tool_graph_args has a place for. */
static int set_flag(const tool_cmd *cmd, tool_graph_args *a, const char *flag, char *value) {
  if (!strcmp(flag, "--feed")) {
    const char *eq = strchr(value, '=');
    if (!eq || eq == value || eq[1] == '\0')
      return tool_usage_error(cmd, "--feed takes NAME=FILE.npy, got '%s'", value);
    a->feeds[a->nfeeds++] = value;
  } else if (!strcmp(flag, "--fetch")) {
    a->fetches[a->nfetches++] = value;
  } else {
    char **slot = single_slot(a, flag);
    if (*slot) return tool_usage_error(cmd, "%s is given twice", flag);
    *slot = value;
  }
  return TOOL_OK;
}

int tool_graph_args_parse(const tool_cmd *cmd, int argc, char **argv, const char *allowed, tool_graph_args *a) {
  *a =
      (tool_graph_args){.feeds = calloc((size_t)argc, sizeof(char *)), .fetches = calloc((size_t)argc, sizeof(char *))};
  if (!a->feeds || !a->fetches) return tool_fail(cmd, "out of memory");
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (arg[0] != '-') {
      if (a->graph) return tool_usage_error(cmd, "takes one GRAPH file, got '%s' and '%s'", a->graph, arg);
      a->graph = arg;
      continue;
    }
    if (!allows(allowed, arg)) return tool_usage_error(cmd, "unknown flag '%s'", arg);
    char *value = (char *)tool_flag_value(argc, argv, &i);
    if (!value) return tool_usage_error(cmd, "%s needs a value", arg);
    int rc = set_flag(cmd, a, arg, value);
    if (rc) return rc;
  }
  return a->graph ? TOOL_OK : tool_usage_error(cmd, "needs a GRAPH file");
}

void tool_graph_args_free(tool_graph_args *a) {
  free(a->feeds);
  free(a->fetches);
}

/* ---- graphs ------------------------------------------------------------------------------------- */

bool tool_graph_open(const tool_cmd *cmd, const char *path, tool_graph *tg) {
  tg->g = nb_graph_new();
  tg->c = nb_graph_ctx_new(tg->g);
  tg->e = nb_eager_new();
  if (!tg->g || !tg->c || !tg->e) {
    tool_fail(cmd, "out of memory");
    return false;
  }
  if (nb_graph_read_graphdef(tg->c, path) == NB_OK) return true;
  tool_fail(cmd, "%s", nb_error(tg->c));
  return false;
}

void tool_graph_close(tool_graph *tg) {
  nb_ctx_free(tg->c);
  nb_ctx_free(tg->e);
  nb_graph_free(tg->g);
}

nb_tensor *tool_graph_tensor(const tool_cmd *cmd, tool_graph *tg, const char *what, const char *name) {
  nb_tensor *t = nb_graph_tensor_by_name(tg->c, name);
  if (!t) {
    tool_fail(cmd, "%s %s: %s", what, name, nb_error(tg->c));
    nb_clear_error(tg->c);
  }
  return t;
}

bool tool_graph_feed(const tool_cmd *cmd, tool_graph *tg, const char *spec, nb_tensor **fed, nb_tensor **value) {
  const char *eq = strchr(spec, '=');
  char name[512];
  snprintf(name, sizeof name, "%.*s", (int)(eq - spec), spec);
  *fed = tool_graph_tensor(cmd, tg, "--feed", name);
  if (!*fed) return false;
  *value = nb_npy_read(tg->e, eq + 1);
  if (*value) return true;
  tool_fail(cmd, "--feed %s: %s", name, nb_error(tg->e));
  nb_clear_error(tg->e);
  return false;
}

/* ---- tensor lists: --ys, --xs, --grad-ys -------------------------------------------------------- */

int tool_check_list(const tool_cmd *cmd, const char *flag, const char *list, bool required) {
  if (!list) return required ? tool_usage_error(cmd, "needs %s NAME[,NAME...]", flag) : TOOL_OK;
  int n = 1;
  for (const char *p = list; *p; p++) n += *p == ',';
  bool empty = !*list || list[0] == ',' || list[strlen(list) - 1] == ',' || strstr(list, ",,");
  if (empty || n > TOOL_MAX_NAMES)
    return tool_usage_error(cmd, "%s takes up to %d comma-separated tensor names, got '%s'", flag, TOOL_MAX_NAMES,
                            list);
  return TOOL_OK;
}

int tool_tensor_list(const tool_cmd *cmd, tool_graph *tg, const char *flag, char *list, nb_tensor **t) {
  int n = 0;
  for (char *name = list; name; n++) {
    char *comma = strchr(name, ',');
    if (comma) *comma = '\0';
    if (!(t[n] = tool_graph_tensor(cmd, tg, flag, name))) return -1;
    name = comma ? comma + 1 : NULL;
  }
  return n;
}
