/* Elementwise fusion (fuse.c): a graph pass of the optimizer. */
#ifndef NBOPT_FUSE_H
#define NBOPT_FUSE_H

#include "../graph/graph.h"

/* Replaces each maximal group of two or more float elementwise nodes of g (unary ops,
   broadcasting binary ops, fused gradient pairs, AddN, and with `reductions` a Sum or Mean
   of a member as an epilogue: its sum then runs in another order than unfused, see
   fused.h) that can run as one loop by one _FusedElementwise node (groups that share
   inputs merge, and a group recomputes a cheap full-shaped producer rather than read it,
   when no fused node then waits on itself): every consumer outside the group, and every fetch among
   keys[nfeed .. nfeed + nfetch), then reads the fused node's outputs (keys are rewritten in
   place, node << 32 | output). Only nodes a run of those fetches computes are fused, and a
   member's value is an output when such a node reads it (rather than recompute it). Fed tensors (keys[0 .. nfeed))
   stay where they are: their producers are never fused. The members stay in g, unconsumed, under their names, which
   errors of the fused node name. g must be a graph the caller may rewrite (an optimizer's
   copy): nodes made after it gain no fused inputs. NB_NOMEM when out of memory (g may
   then hold some fused nodes, each complete). */
nb_code nbopt_fuse_elementwise(nb_graph *g, int64_t *keys, int nfeed, int nfetch, bool reductions);

#endif
