/* Helpers the `nabla` subcommands share (tool.h). */
#include "tool.h"

#include <stdarg.h>
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

int tool_usage_error(const tool_cmd *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "nabla %s: ", cmd->name);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n(nabla %s --help shows its usage)\n", cmd->name);
  va_end(ap);
  return TOOL_USAGE;
}

int tool_fail(const tool_cmd *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "nabla %s: ", cmd->name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
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
