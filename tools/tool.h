/* What the `nabla` command's subcommands share: exit codes, messages, option values,
   loading graphs and feeds. Each subcommand is one function cmd_<name>(argc, argv) with
   argv[0] its own name; it prints its usage for --help. */
#ifndef TOOL_H
#define TOOL_H

#include <nabla.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum { TOOL_OK = 0, TOOL_ERROR = 1, TOOL_USAGE = 2 }; /* the exit statuses */

/* A subcommand: its name, one line saying what it does, and its usage text (the flags
   after "nabla NAME", then lines explaining them). */
typedef struct tool_cmd {
  const char *name, *summary, *usage;
  int (*run)(int argc, char **argv);
} tool_cmd;

extern const tool_cmd tool_info, tool_train;

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

/* Prints "dtype [d0,d1,...]" (-1 dims as ?, an unknown rank as [...]) to out. */
void tool_print_type(FILE *out, nb_dtype t, int rank, const int64_t *shape);

#endif
