/* The `nabla` command: TensorFlow files from the shell (docs/tool.md).

     nabla info FILE | --build          a GraphDef, SavedModel or checkpoint; the build
     nabla run GRAPH --feed NAME=FILE.npy --fetch NAME [-o DIR]
     nabla grad GRAPH --ys NAME --xs NAME[,NAME] [--grad-ys NAME] -o OUT.pb
     nabla dot GRAPH [-o OUT.dot]
     nabla gradcheck GRAPH --ys NAME --xs NAME --feed NAME=FILE.npy
     nabla train [--epochs N] [--batch N] [--save PREFIX] [--restore PREFIX] ...

   Every subcommand takes --help. Exit status: 0 done, 1 an error (a message on stderr
   names the file, tensor or node), 2 a usage error. */
#include "tool.h"

#include <string.h>

static const tool_cmd *const commands[] = {&tool_info, &tool_run, &tool_grad, &tool_dot, &tool_gradcheck, &tool_train};
#define NCOMMANDS (int)(sizeof commands / sizeof *commands)

static void print_commands(FILE *out) {
  fprintf(out, "usage: nabla COMMAND [ARGS...]   (nabla COMMAND --help for its usage)\n\ncommands:\n");
  for (int i = 0; i < NCOMMANDS; i++) fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_commands(stderr);
    return TOOL_USAGE;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    printf("nabla %s: TensorFlow graphs, SavedModels and checkpoints from the shell\n", nb_version());
    print_commands(stdout);
    return TOOL_OK;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("nabla %s\n", nb_version());
    return TOOL_OK;
  }
  for (int i = 0; i < NCOMMANDS; i++)
    if (strcmp(argv[1], commands[i]->name) == 0)
      return tool_wants_help(argc - 1, argv + 1) ? tool_help(commands[i]) : commands[i]->run(argc - 1, argv + 1);
  fprintf(stderr, "nabla: unknown command '%s'\n", argv[1]);
  print_commands(stderr);
  return TOOL_USAGE;
}
