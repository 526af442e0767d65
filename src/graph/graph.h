/* Internal graph IR: nodes in arrays addressed by id, edges with consumer links, outputs
   with static facts and build-time constant values. */
#ifndef NBGRAPH_H
#define NBGRAPH_H

#include "../ops/op.h"

/* An input edge of `consumer`, linked into the consumer list of its source node.
   out < 0 marks a control edge (run src first; no data). */
typedef struct nbgraph_edge {
  int32_t src, out;
  int32_t consumer;
  int32_t next_use;  /* next edge in src's consumer list, -1 at the end */
  int32_t next_ctrl; /* control edges: next in the consumer's control list */
} nbgraph_edge;

/* One output: its static dtype/shape (dims -1 or rank -1 when unknown) and, when it is
   known at build time (Const, or folded), its value as a detached concrete tensor. */
typedef struct nbgraph_out {
  nbop_meta meta;
  nb_tensor *value;
} nbgraph_out;

typedef struct nbgraph_node {
  const nbop_def *def;
  const char *name;
  int32_t in0, nin;      /* data inputs: edges[in0 .. in0+nin) */
  int32_t ctrl;          /* head of this node's control edges (a list through next_ctrl), -1 */
  int32_t out0, nout;    /* outs[out0 .. out0+nout) */
  int32_t first_use;     /* head of the list of edges consuming this node, -1 */
  nbop_attrval *attr;    /* def->nattrs values in the arena; NULL when the op has none */
  const char *grad_name; /* gradient override recorded at creation, or NULL */
  /* traversal scratch, valid while stamp == the graph's current generation */
  uint32_t stamp, stamp2, stamp3;
  int32_t pending, slot;
} nbgraph_node;

typedef struct nbgraph_strmap_slot {
  const char *key; /* NULL: empty */
  uint32_t hash;
  int32_t val;
} nbgraph_strmap_slot;

typedef struct nbgraph_strmap {
  nbgraph_strmap_slot *slots;
  uint32_t cap, n;
} nbgraph_strmap;

typedef struct nbgraph_override {
  const char *op_type, *grad_name;
} nbgraph_override;

#define NBGRAPH_FOLD_MAX_ELEMS (1 << 16) /* larger constant results are computed at run time */
#define NBGRAPH_SCOPE_CAP 1024
#define NBGRAPH_SCOPE_DEPTH 64

struct nb_graph {
  nbgraph_node *nodes;
  int32_t nnodes, nodes_cap;
  nbgraph_edge *edges;
  int32_t nedges, edges_cap;
  nbgraph_out *outs;
  int32_t nouts, outs_cap;
  nbcore_arena arena;
  nbgraph_strmap names; /* node names and scope names in use -> next free suffix */
  char scope[NBGRAPH_SCOPE_CAP];
  int scope_len, nscopes;
  int scope_marks[NBGRAPH_SCOPE_DEPTH];
  nbgraph_override *overrides;
  int32_t noverrides, overrides_cap;
  /* A fresh scope (opened by the gradient pass under its reserved scope name, so no other
     name can lie inside it) keeps its names in this small list instead of the name map:
     gradient ops then cost no map lookups. */
  bool fresh;
  const char **fresh_names;
  int32_t nfresh, fresh_cap;
  uint32_t gen;             /* traversal generation for node stamps */
  int32_t grad_passes;      /* nb_gradients passes under way (a gradient function may start one) */
  uint32_t version;         /* bumped when edges are added to existing nodes (control inputs) */
  nb_ctx *fold;             /* eager context that folds constants */
  struct nbgraph_var *vars; /* the variables its nodes use (each retained), with their read nodes */
  int32_t nvars, vars_cap;
  /* Control flow (src/func): the function graphs its While/If nodes run (owned: src/func
     sets free_funcs, which frees them, when it gives g the first), and, for a function
     graph, the graph it is traced in and the tensors of that graph it captured (each an
     argument placeholder here). */
  struct nb_function **funcs;
  int32_t nfuncs, funcs_cap;
  void (*free_funcs)(struct nb_graph *g);
  struct nb_graph *parent;
  struct nbgraph_capture_entry *caps;
  int32_t ncaps, caps_cap;
  /* Build-time values taken off their outputs (a Const made a variable: src/io), kept until
     the graph is freed because handles made before may still point at them. */
  nb_tensor **retired;
  int32_t nretired, retired_cap;
  char error[512]; /* the last graph-level error (GraphDef export): nb_graph_error */
};

/* A tensor of the parent graph (key) that a function graph uses through placeholder `arg`. */
typedef struct nbgraph_capture_entry {
  int64_t key;
  int32_t arg;
} nbgraph_capture_entry;
/* The placeholder of g capturing the parent's tensor `key`, made on first use; -1 when out
   of memory. */
int32_t nbgraph_capture_parent(nb_graph *g, int64_t key);
/* Adds a Placeholder node of meta m named base (made unique) without dispatch, so it may
   be called while another node is being built; its id, or -1 when out of memory. */
int32_t nbgraph_add_arg(nb_graph *g, const nbop_meta *m, const char *base);
/* Adds outputs of metas m[0..n) to node id (plans made before are dropped). */
nb_code nbgraph_add_outputs(nb_graph *g, int32_t id, const nbop_meta *m, int n);

/* A variable a graph's nodes use, and its one ReadVariableOp node (-1 until needed). */
typedef struct nbgraph_var {
  struct nb_variable *var;
  int32_t read_node;
  bool imported; /* made by a GraphDef import (src/io), which the graph owns: nb_graph_variables */
} nbgraph_var;

/* What g held at one point, to roll back to when building a batch of nodes fails (a
   GraphDef import: all or nothing). */
typedef struct nbgraph_mark {
  int32_t nnodes, nedges, nouts, nvars, nfuncs;
  nbgraph_strmap names; /* a copy of the name map */
} nbgraph_mark;
/* Takes a mark of g; NB_NOMEM when the name map cannot be copied. */
nb_code nbgraph_mark_take(const nb_graph *g, nbgraph_mark *m);
/* Removes everything added to g since m (nodes, edges, names, variables, functions) and
   frees m. Handles of the removed nodes must be released already. */
void nbgraph_rollback(nb_graph *g, nbgraph_mark *m);
/* Frees m, keeping what was added. */
void nbgraph_mark_drop(nbgraph_mark *m);
/* Keeps value (a build-time value taken off its output; NULL: nothing) until g is freed. */
nb_code nbgraph_retire_value(nb_graph *g, nb_tensor *value);
/* Whether name is a node or scope name of g (the name map). */
bool nbgraph_name_taken(nb_graph *g, const char *name);
/* Reserves name (not taken: check first) in g's name map for nbgraph_rename: its copy in
   g's arena, NULL when out of memory. Nodes made meanwhile cannot take it. */
const char *nbgraph_reserve_name(nb_graph *g, const char *name);
/* Gives node id the reserved name (the one it had stays taken). */
static inline void nbgraph_rename(nb_graph *g, int32_t id, const char *reserved) { g->nodes[id].name = reserved; }

/* A (node, output) pair as one int64: node << 32 | output. */
static inline int64_t nbgraph_key(int32_t node, int32_t out) { return (int64_t)node << 32 | (uint32_t)out; }
static inline int64_t nbgraph_key_of(const nb_tensor *x) { return nbgraph_key(x->node, x->out); }
static inline int32_t nbgraph_key_node(int64_t key) { return (int32_t)(key >> 32); }
static inline int32_t nbgraph_key_out(int64_t key) { return (int32_t)(uint32_t)key; }

/* Starts a traversal: nodes with stamp != the returned generation are unvisited. */
uint32_t nbgraph_next_gen(nb_graph *g);
/* A unique name "<scope><base>", or with "_N" appended; reserved in the name map. */
const char *nbgraph_unique_name(nb_graph *g, const char *base);
/* Sets the current scope string; fresh: see nb_graph.fresh. */
void nbgraph_set_scope(nb_graph *g, const char *scope, bool fresh);
/* The whole name-scope state, saved around work that changes it (the gradient pass). */
typedef struct nbgraph_scope_state {
  char scope[NBGRAPH_SCOPE_CAP];
  int scope_len, nscopes;
  int scope_marks[NBGRAPH_SCOPE_DEPTH];
  bool fresh;
  const char **fresh_names;
  int32_t nfresh;
} nbgraph_scope_state;
nb_code nbgraph_scope_save(const nb_graph *g, nbgraph_scope_state *st);
void nbgraph_scope_restore(nb_graph *g, nbgraph_scope_state *st);
/* Whether every output of n has a value known at build time (folded constants). */
static inline bool nbgraph_node_values_known(const nb_graph *g, const nbgraph_node *n) {
  for (int32_t o = 0; o < n->nout; o++)
    if (!g->outs[n->out0 + o].value) return false;
  return n->nout > 0;
}
/* A symbolic handle in c for output `out` of node `id`. */
nb_tensor *nbgraph_handle(nb_ctx *c, nb_graph *g, int32_t id, int32_t out);
/* Detached tensors: concrete, owned by no context (graph constants, session results). */
nb_tensor *nbgraph_detached_share(const nb_tensor *x);

/* For graph passes that write a new graph (src/opt). */
/* Reserves name in g's name map (an arena copy); NULL when taken or out of memory. */
const char *nbgraph_claim_name(nb_graph *g, const char *name);
/* Adds a copy of src's node id (op, attrs, output facts and build-time values, gradient
   override) named name (claimed), reading in[i] (keys of g) for its data inputs; no
   inference runs. Its id, or -1 when out of memory. */
int32_t nbgraph_copy_node(nb_graph *g, const nb_graph *src, int32_t id, const char *name, const int64_t *in);
/* A control edge: node runs after dep. */
nb_code nbgraph_add_control(nb_graph *g, int32_t node, int32_t dep);
/* g holds a reference to each variable src's nodes use, as src does. */
nb_code nbgraph_share_vars(nb_graph *g, const nb_graph *src);

#endif
