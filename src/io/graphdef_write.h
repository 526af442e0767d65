/* The GraphDef writer's internals, shared by graphdef_write.c (graphs, nodes, attrs) and
   graphdef_func.c (While, If, calls and their FunctionDefs). */
#ifndef NBIO_GRAPHDEF_WRITE_H
#define NBIO_GRAPHDEF_WRITE_H

#include "../func/func.h"
#include "graphdef_common.h"

#include "../core/variable.h"

#define NBIO_TF_MAX_ARGS 16

/* One argument of a TF op: its name and how its type is given. */
typedef struct nbio_tf_arg {
  char name[40];
  char type_attr[24];   /* the type attr typing it (a list's list(type) attr when list) */
  char number_attr[16]; /* a list of that many tensors, else "" */
  bool list;            /* typed by a list(type) attr */
  int fixed;            /* a fixed DataType (20: resource), 0 when typed by an attr */
} nbio_tf_arg;

/* A TF op's signature (from graphdef_opdefs.inc). */
typedef struct nbio_tf_sig {
  const struct tf_opdef *def;
  int nin, nout, nattr;
  nbio_tf_arg in[NBIO_TF_MAX_ARGS], out[NBIO_TF_MAX_ARGS];
  struct {
    char name[40], type[16];
  } attr[NBIO_TF_MAX_ARGS];
} nbio_tf_sig;

/* How the export refers to one node of a graph: the TF node whose outputs stand for its
   outputs (name, signature, output count), the node control inputs name (ctrl: when it
   differs from name), and for function bodies whether it is an argument. */
typedef struct nbio_ref_info {
  const char *node; /* the TF name of the node itself */
  const char *name, *ctrl;
  const nbio_tf_sig *sig;
  int nout;
  bool arg;
  const char **out_refs; /* when set: each output's reference, whatever the above say */
} nbio_ref_info;

/* One graph being written: the top graph (a GraphDef's nodes) or a function graph (a
   FunctionDef's node_def, inputs "node:out_arg:k"). */
typedef struct nbio_body {
  const nb_graph *g;
  bool fn;
  nbio_ref_info *refs; /* per node of g */
  Nbpb__NodeDef **nodes;
  size_t nnodes;
} nbio_body;

typedef struct nbio_handle {
  const nb_variable *var;
  const char *name;
} nbio_handle;

typedef struct nbio_writer {
  nbcore_arena arena; /* every message and string of the export */
  nb_code code;
  char error[440];              /* fits nb_graph's error after the caller's name */
  const nbio_tf_sig *sigs[512]; /* parsed signatures, per op table entry */
  nbio_handle *handles;         /* the top graph's variables and their VarHandleOp names */
  int32_t nhandles;
  Nbpb__FunctionDef **funcs; /* the library, in the order written */
  size_t nfuncs;
  struct nbio_func_key *func_keys; /* what funcs[i] is the export of */
} nbio_writer;

nb_code nbio_fail(nbio_writer *w, nb_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A formatted string in the writer's arena; NULL (and the writer failed) when too long. */
char *nbio_strf(nbio_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* TF's signature of op type; false when TF has no such op (or out of memory: w failed). */
bool nbio_tf_signature(nbio_writer *w, const char *type, const nbio_tf_sig **sig);
/* Where the arguments' tensors lie among n (see graphdef_write.c). */
void nbio_tf_arg_spans(const nbio_tf_arg *args, int nargs, int n, bool skip_resources, int *first, int *count);

Nbpb__NodeDef *nbio_node_new(nbio_writer *w, nbio_body *b, const char *name, const char *op);
bool nbio_node_input(nbio_writer *w, Nbpb__NodeDef *nd, const char *ref);
bool nbio_node_attr(nbio_writer *w, Nbpb__NodeDef *nd, const char *key, Nbpb__AttrValue *v);
void nbio_sort_attrs(Nbpb__NodeDef *nd);
/* The reference to output `out` of node `node` of b, in b's syntax. */
const char *nbio_ref(nbio_writer *w, const nbio_body *b, int32_t node, int32_t out);
bool nbio_data_inputs(nbio_writer *w, const nbio_body *b, Nbpb__NodeDef *nd, int32_t id, int first, int n);
bool nbio_control_inputs(nbio_writer *w, const nbio_body *b, Nbpb__NodeDef *nd, int32_t id);
/* TF's attrs of node id under signature s: nabla's by name, the inferred ones from the
   argument dtypes. */
bool nbio_write_attrs(nbio_writer *w, const nbio_body *b, Nbpb__NodeDef *nd, int32_t id, const nbio_tf_sig *s);

/* Fills b->refs[id] (before any node is written: inputs may refer to later nodes). */
nb_code nbio_plan_node(nbio_writer *w, nbio_body *b, int32_t id);
/* Writes node id of b (after every node was planned). */
nb_code nbio_write_node(nbio_writer *w, nbio_body *b, int32_t id);
/* Allocates b->refs, zeroed; false when out of memory (w failed). */
bool nbio_body_refs(nbio_writer *w, nbio_body *b);
/* Plans and writes every node of b->g but function arguments (refs[id].arg). */
nb_code nbio_write_body(nbio_writer *w, nbio_body *b);
/* Adds an int32 Const node: the vector v[0..n), or (n -1) the scalar v[0]; the reference to its value. */
const char *nbio_write_int32_const(nbio_writer *w, nbio_body *b, const char *name, const int32_t *v, int n);

/* graphdef_func.c: writes node id when it is a While, If or function call (true), with its
   functions added to the library; false for other nodes. */
bool nbio_write_function_node(nbio_writer *w, nbio_body *b, int32_t id);

#endif
