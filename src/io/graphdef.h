/* GraphDef import (graphdef.c: TF's graphs and their function libraries into nabla graphs)
   and the passes that rewrite a parsed GraphDef before it becomes an nb_graph
   (functionalize.c). */
#ifndef NBIO_GRAPHDEF_H
#define NBIO_GRAPHDEF_H

#include <stddef.h>

#include "../func/func.h"
#include "graph.pb-c.h"
#include "nabla.h"

/* Adds gd's nodes (and the functions they call) to c's graph, a graph context's: all or
   nothing, the graph unchanged on an error (set on c, the message starting with who, the
   file's name). TF 1 control flow in it is raised into While/If first, in a copy
   (nbio_functionalize_control_flow). A SavedModel reader calls it on the GraphDef of its
   MetaGraphDef. */
nb_code nbio_graphdef_import(nb_ctx *c, const Nbpb__GraphDef *gd, const char *who);

/* Raises TF 1 control flow (Switch, Merge, Enter, Exit, NextIteration, LoopCond and their
   Ref forms) into functional While and If nodes, as TensorFlow's FunctionalizeControlFlow
   does: each loop frame (nested ones first) becomes a While node whose cond and body are
   FunctionDefs added to gd->library, loop invariants (Enter with is_constant) passed
   through; each Switch/Merge cond (inside loops too, nested ones first) becomes an If
   node with then/else FunctionDefs. Loop outputs keep their names: each Exit becomes an
   Identity of the While's output, each cond Merge an Identity of the If's output.

   gd must come from nbpb__graph_def__unpack with the default allocator: nodes and
   functions are added and freed with malloc/free, so nbpb__graph_def__free_unpacked
   frees what this adds. A graph without those ops is left untouched. On error gd stays
   freeable but its contents are unspecified, and err (cap bytes) names the node:
   NB_CORRUPT for malformed frames (Exit without Enter, NextIteration without Merge,
   mismatched frames, a Merge whose inputs are not a loop's or a cond's, a missing
   LoopCond, an input naming no node), NB_UNIMPLEMENTED for control flow the pass cannot
   raise (a node reading both branches of a cond, a branch reading an outer value that
   no Switch guards), NB_NOMEM when out of memory. */
nb_code nbio_functionalize_control_flow(Nbpb__GraphDef *gd, char *err, size_t cap);

/* Writes into buf (cap bytes) how a FunctionDef names output `port` of node: its op's
   output arg and the index within it, "arg:k" (TF's op registry: Split's outputs are
   "output:0", "output:1", ...; Switch's "output_false:0" and "output_true:0"). Ops that
   nabla does not know are named "output:port". False when buf is too small or the node's
   list attrs do not cover port. */
bool nbio_tf_output_ref(const Nbpb__NodeDef *node, int port, char *buf, size_t cap);

/* The value of node's attr key, NULL when absent. */
const Nbpb__AttrValue *nbio_node_attr(const Nbpb__NodeDef *node, const char *key);

#endif
