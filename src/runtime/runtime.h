/* Runtime internals (src/runtime): what the eager context, sessions and variables define
   for the layers above them, beyond the public API. */
#ifndef NBRT_H
#define NBRT_H

#include "../graph/graph.h"

#include "../core/variable.h"

/* Runs s's kernels on blocks of from's pool (NULL: s's own again); see nb_ctx.blocks_from. */
void nbrt_session_share_blocks(nb_session *s, nb_ctx *from);
/* Hands the feed values [0, n) of s's next nb_run over to it: it frees them (whatever its
   outcome) once it holds its own references, so a value that dies inside the run can be
   written over in place (input forwarding). */
void nbrt_session_take_feeds(nb_session *s, int n);

/* (variable_api.c) Runs op def (eager) or adds its node (graph) to update uses[0]
   with inputs in and attrs; a graph keeps every variable in uses alive while it lives, and
   makes the node wait for uses[0]'s one ReadVariableOp node, so reads in one run see the
   value from before the update. The node is named after uses[0] and suffix. Returns the
   op's output. */
nb_tensor *nbrt_variable_update(nb_ctx *c, const nbop_def *def, nb_variable *const *uses, int nuses,
                                nb_tensor *const *in, int nin, const void *attrs, const char *suffix);

#endif
