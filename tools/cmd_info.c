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

static int info_main(int argc, char **argv) {
  if (argc != 2) return tool_usage_error(&tool_info, "expects one FILE or --build, got %d arguments", argc - 1);
  if (strcmp(argv[1], "--build") == 0) {
    puts(nb_build_info());
    return TOOL_OK;
  }
  if (argv[1][0] == '-') return tool_usage_error(&tool_info, "unknown flag '%s'", argv[1]);
  char *prefix = checkpoint_prefix(argv[1]);
  if (prefix) {
    int rc = info_checkpoint(prefix);
    free(prefix);
    return rc;
  }
  return tool_fail(&tool_info, "%s: no such checkpoint (no %s.index)", argv[1], argv[1]);
}

const tool_cmd tool_info = {"info", "shows what a checkpoint holds, or this build",
                            "FILE | --build\n"
                            "  FILE      a checkpoint: its prefix (PREFIX.index beside PREFIX.data-*) or its\n"
                            "            .index file; prints each tensor's key, dtype and shape\n"
                            "  --build   the version and what this build runs on (nb_build_info())\n",
                            info_main};
