/* Graph optimizer internals (src/opt, prefix nbopt_): a graph is read into an editable
   copy (nbopt_graph), passes rewrite it, and a new nb_graph is written from what the
   fetches still need.

   Adding a pass: write `nb_code nbopt_<name>(nbopt_graph *o, bool *changed)` in its own
   file here, give it a bit in include/nabla.h's NB_PASS_* list (and a name for
   NABLA_OPTIMIZE), and add a row to the `passes` table in optimize.c at the place in the
   pipeline where it belongs. A pass edits only through the functions below: it adds nodes
   (nbopt_add), points the readers of an output elsewhere (nbopt_replace), never edits a
   pinned node (fed or fetched) or a stateful one, and sets *changed when it rewrote
   anything (the pipeline repeats until no pass changes anything). */
#ifndef NBOPT_H
#define NBOPT_H

#include "../runtime/runtime.h"

typedef struct nbopt_node {
  const nbop_def *def;
  const char *name;
  int32_t nin, nctrl, nout;
  int64_t *in;           /* data inputs: keys of this graph (nbgraph_key); read them with nbopt_in */
  int32_t *ctrl;         /* control inputs: node ids */
  nbop_attrval *attr;    /* the source node's, or a pass's copy */
  const nbop_meta *meta; /* nout output facts (dims -1 unknown) */
  int64_t *fwd;          /* fwd[o]: where output o's readers now read (nbopt_replace); NULL: nowhere else */
  int32_t src;           /* the source graph's node this copies, -1 for a node a pass made */
  bool redo;             /* made or rewritten by a pass: written through inference (and folding) */
  bool pinned;           /* fed or fetched: kept as it is, with its name */
  bool fed;              /* fed: its outputs are the feeds' values, whatever it computes */
  bool ctrl_src;         /* a control input of some node: it runs as it is */
} nbopt_node;

typedef struct nbopt_graph {
  const nb_graph *src;
  nbopt_node *nodes;
  int32_t n, cap;
  int64_t *keys; /* feeds then fetches, as keys of this graph */
  int nfeed, nfetch;
  nbcore_arena arena;
  const char **names; /* every node name in use (open addressing), for fresh names */
  uint32_t names_cap, nnames;
  uint32_t fresh; /* the counter fresh names take */
  nb_ctx *values; /* eager context holding the values of the constants passes make */
} nbopt_graph;

/* Reads g's nodes into o (ids kept), with the fed and fetched nodes of keys pinned. */
nb_code nbopt_read(nbopt_graph *o, const nb_graph *g, const int64_t *keys, int nfeed, int nfetch);
void nbopt_free(nbopt_graph *o);
/* Input i of node id, following replacements. */
int64_t nbopt_in(nbopt_graph *o, int32_t id, int i);
/* The output facts of key. */
static inline const nbop_meta *nbopt_meta(const nbopt_graph *o, int64_t key) {
  return &o->nodes[nbgraph_key_node(key)].meta[nbgraph_key_out(key)];
}
/* Readers of `from` read `to` instead (from's node is not pinned). */
void nbopt_replace(nbopt_graph *o, int64_t from, int64_t to);
/* Node id reads key as its input i from now on (it is then written through inference). */
void nbopt_set_input(nbopt_graph *o, int32_t id, int i, int64_t key);
/* Adds a node of op type with inputs in[0..nin), attrs (NULL: defaults; copied) and output
   facts meta[0..nout) (copied), named after base; its id, or -1 when out of memory. */
int32_t nbopt_add(nbopt_graph *o, const char *type, const int64_t *in, int nin, const nbop_attrval *attr,
                  const nbop_meta *meta, int nout, const char *base);
/* Node id's attrs as its own copy, to edit (it is then written through inference). */
nbop_attrval *nbopt_own_attrs(nbopt_graph *o, int32_t id);
/* Node id's output facts as its own copy, to edit. */
nbop_meta *nbopt_own_meta(nbopt_graph *o, int32_t id);
/* Slot of def's attr name, -1 when it has none. */
int nbopt_attr_slot(const nbop_def *def, const char *name);
/* Whether meta's shape is fully known and the same as m's, with the same dtype. */
bool nbopt_same_meta(const nbop_meta *a, const nbop_meta *b);
/* Whether a pass may merge, move or drop node id: not pinned, not stateful, no host
   callback or user state in its attrs, not random, no control edges. */
bool nbopt_movable(const nbopt_graph *o, int32_t id);
/* nbopt_movable, or fetched and otherwise movable: a pass may replace it by a node of its
   name computing the same value (nbopt_replace then moves the fetch too). */
bool nbopt_replaceable(const nbopt_graph *o, int32_t id);
/* The build-time value of key (a Const or folded output), NULL when not known. */
const nb_tensor *nbopt_value(const nbopt_graph *o, int64_t key);
/* The live nodes the fetches need, inputs before readers, in *order (the caller frees it). */
nb_code nbopt_order(nbopt_graph *o, int32_t **order, int32_t *n);
/* How many readers (data inputs of live nodes, fetches) each node's outputs have, per key
   node: counts[id] sums its outputs' readers. The caller frees it. */
nb_code nbopt_count_uses(nbopt_graph *o, int32_t **counts);
/* Writes the live nodes into a new graph *out, with mapped the keys there. */
nb_code nbopt_write(nbopt_graph *o, nb_graph **out, int64_t *mapped, char *err, size_t errcap);

/* Transposes (transpose.c): a Transpose of key by perm (a new int32 Const), named after
   base; its output key, or -1 when out of memory. */
int64_t nbopt_transpose(nbopt_graph *o, int64_t key, const int *perm, int rank, const char *base);
/* A Const node of value (kept alive by o->values), named after base; its key or -1. */
int64_t nbopt_const(nbopt_graph *o, nb_tensor *value, const char *base);
/* The permutation of key when it is a Transpose by a known one: *rank and perm (the
   Transpose's input in *x); false otherwise. */
bool nbopt_transpose_of(nbopt_graph *o, int64_t key, int64_t *x, int *perm, int *rank);

/* The passes (each its own file). */
nb_code nbopt_layout(nbopt_graph *o, bool *changed);
nb_code nbopt_sink_transposes(nbopt_graph *o, bool *changed);
nb_code nbopt_simplify(nbopt_graph *o, bool *changed);
nb_code nbopt_cse(nbopt_graph *o, bool *changed);
nb_code nbopt_fold_constants(nbopt_graph *o, bool *changed);

#endif
