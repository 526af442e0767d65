/* What the `nabla` command's subcommands share: exit codes, messages, option values,
   loading graphs and feeds. Each subcommand is one function cmd_<name>(argc, argv) with
   argv[0] its own name; it prints its usage for --help. */
#ifndef TOOL_H
#define TOOL_H

#include <nabla.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { TOOL_OK = 0, TOOL_ERROR = 1, TOOL_USAGE = 2 }; /* the exit statuses */

/* A subcommand: its name, one line saying what it does, and its usage text (the flags
   after "nabla NAME", then lines explaining them). */
typedef struct tool_cmd {
  const char *name, *summary, *usage;
  int (*run)(int argc, char **argv);
} tool_cmd;

extern const tool_cmd tool_info, tool_run, tool_grad, tool_dot, tool_gradcheck, tool_train;

/* Whether argv[1..argc) asks for help (--help or -h). */
bool tool_wants_help(int argc, char **argv);
/* Prints cmd's usage to stdout; TOOL_OK. */
int tool_help(const tool_cmd *cmd);
/* "nabla NAME: <message>" and a pointer to --help on stderr; TOOL_USAGE. */
int tool_usage_error(const tool_cmd *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* "nabla NAME: <message>" on stderr; TOOL_ERROR. */
int tool_fail(const tool_cmd *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The value of the flag at argv[*i] ("--flag VALUE"): argv[*i + 1], advancing *i; NULL
   when it is the last argument. */
const char *tool_flag_value(int argc, char **argv, int *i);

/* The arguments of the subcommands that work on a graph file: GRAPH and the flags. Lists
   (--ys a,b) stay as written; tool_tensor_list cuts them. */
typedef struct tool_graph_args {
  const char *graph; /* the one positional argument */
  char *out, *tol;   /* -o, --tol */
  char *ys, *xs, *grad_ys;
  char **feeds, **fetches; /* each --feed NAME=FILE, --fetch NAME, in order */
  int nfeeds, nfetches;
} tool_graph_args;
/* Parses argv[1..argc) for cmd, which takes the flags of the space-separated list allowed
   ("--feed --fetch -o"); TOOL_OK, else TOOL_USAGE after saying why. Free with
   tool_graph_args_free. */
int tool_graph_args_parse(const tool_cmd *cmd, int argc, char **argv, const char *allowed, tool_graph_args *a);
void tool_graph_args_free(tool_graph_args *a);
/* A graph file read into a new graph g, with its graph context c and an eager context e
   for values. */
typedef struct tool_graph {
  nb_graph *g;
  nb_ctx *c, *e;
} tool_graph;
/* Reads the GraphDef at path into tg; false after printing the error (naming the file). */
bool tool_graph_open(const tool_cmd *cmd, const char *path, tool_graph *tg);
void tool_graph_close(tool_graph *tg);
/* The tensor named name ("node:k", or "node" for output 0) of tg's graph; NULL after
   printing the error, which says what the tensor was for (what: "--fetch"). */
nb_tensor *tool_graph_tensor(const tool_cmd *cmd, tool_graph *tg, const char *what, const char *name);
/* --feed NAME=FILE.npy: the placeholder (or any tensor) *fed and the file's value *value
   in tg->e; false after printing the error. The spec's syntax was checked by the parser. */
bool tool_graph_feed(const tool_cmd *cmd, tool_graph *tg, const char *spec, nb_tensor **fed, nb_tensor **value);

/* The most tensors one --ys, --xs or --grad-ys list names. */
#define TOOL_MAX_NAMES 64
/* Whether list (NULL: the flag was not given) is well formed: up to TOOL_MAX_NAMES
   comma-separated names, none empty; TOOL_OK, else TOOL_USAGE after saying why. */
int tool_check_list(const tool_cmd *cmd, const char *flag, const char *list, bool required);
/* The tensors of a list tool_check_list accepted (cut in place at its commas) into t; their
   count, or -1 after printing the error naming the tensor. */
int tool_tensor_list(const tool_cmd *cmd, tool_graph *tg, const char *flag, char *list, nb_tensor **t);

/* Prints "dtype [d0,d1,...]" (-1 dims as ?, an unknown rank as [...]) to out. */
void tool_print_type(FILE *out, nb_dtype t, int rank, const int64_t *shape);

#endif
