/* Runtime internals (src/runtime): what the eager context, sessions and variables define
   for the layers above them, beyond the public API. */
#ifndef NBRT_H
#define NBRT_H

#include "../graph/graph.h"

#include "../core/variable.h"

/* A session's graph passes (src/opt installs them, a later layer): writes into *out a new
   graph computing the tensors keys[nfeed .. nfeed + nfetch) (node << 32 | output) of g from
   the fed keys[0 .. nfeed), and into mapped those keys as tensors of *out. *out NULL with
   NB_OK: run g as built. */
typedef nb_code (*nbrt_optimize_fn)(const nb_graph *g, const int64_t *keys, int nfeed, int nfetch,
                                    const nb_session_opts *opts, nb_graph **out, int64_t *mapped);
/* A session on g whose plans run optimize's graph (NULL: g as built) with opts. */
nb_session *nbrt_session_new(nb_graph *g, nbrt_optimize_fn optimize, const nb_session_opts *opts);

/* Runs s's kernels on blocks of from's pool (NULL: s's own again); see nb_ctx.blocks_from. */
void nbrt_session_share_blocks(nb_session *s, nb_ctx *from);
/* Hands the feed values [0, n) of s's next nb_run over to it: it frees them (whatever its
   outcome) once it holds its own references, so a value that dies inside the run can be
   written over in place (input forwarding). */
void nbrt_session_take_feeds(nb_session *s, int n);
/* Places fetches [0, n) of s's next nb_run: the step that makes fetch i writes it straight
   into blocks[i] (which must stay valid through the run) when blocks[i] is not NULL, the
   step makes the value in a block of its own (not a view of an input) of exactly
   blocks[i]->cap bytes, and it is among the step's first 8 outputs; result i then holds
   blocks[i]. Otherwise the fetch is made as usual: the caller compares data pointers. */
void nbrt_session_place_fetches(nb_session *s, nbcore_buffer *const *blocks, int n);

/* (variable_api.c) Runs op def (eager) or adds its node (graph) to update uses[0]
   with inputs in and attrs; a graph keeps every variable in uses alive while it lives, and
   makes the node wait for uses[0]'s one ReadVariableOp node, so reads in one run see the
   value from before the update. The node is named after uses[0] and suffix. Returns the
   op's output. */
nb_tensor *nbrt_variable_update(nb_ctx *c, const nbop_def *def, nb_variable *const *uses, int nuses,
                                nb_tensor *const *in, int nin, const void *attrs, const char *suffix);

#endif
