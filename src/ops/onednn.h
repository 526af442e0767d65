/* oneDNN primitives for the convolution kernels (any op may use them): one CPU engine
   for the process and a cache of primitives by what defines them, so a training loop
   creates primitives in its first step only. Internal to the library. */
#ifndef NBOP_ONEDNN_H
#define NBOP_ONEDNN_H

#include "op.h"

#include <oneapi/dnnl/dnnl.h>

/* The memory descriptors here are 2.x's plain structs (copied by value); 3.x made them
   opaque handles with another API. */
#if DNNL_VERSION_MAJOR != 2
#error "nabla's oneDNN kernels need oneDNN 2.x"
#endif

/* Whether kernels may take their oneDNN path: true unless switched off (tests run each op
   on both paths and compare) or no oneDNN engine could be made. */
bool nbop_onednn_enabled(void);
/* Switches the oneDNN paths on or off for the whole process (tests and benchmarks only). */
void nbop_onednn_set_enabled(bool on);
/* oneDNN primitive executions so far in this process, so a caller can tell which path an
   op took (benchmarks label their lines with it). */
uint64_t nbop_onednn_executions(void);
/* Primitives made so far in this process (the cache's misses: tests check that repeating
   an op makes none). */
uint64_t nbop_onednn_primitives_made(void);

/* The primitives' kinds, each key's first value. */
enum { NBOP_ONEDNN_CONV_FORWARD = 1, NBOP_ONEDNN_CONV_BACKPROP_INPUT, NBOP_ONEDNN_CONV_BACKPROP_FILTER };

/* What defines a primitive: the kind first, then its dims and attributes; unused
   values stay zero. Two keys with equal values name the same primitive. */
#define NBOP_ONEDNN_KEY_LEN 24
typedef struct nbop_onednn_key {
  int64_t v[NBOP_ONEDNN_KEY_LEN];
} nbop_onednn_key;

/* How a primitive is made: its descriptor, and the arguments whose buffers keep a plain
   layout though the primitive may prefer another (a blocked filter): those get a cached
   reorder into (inputs) or out of (outputs) a temporary in the primitive's layout. */
#define NBOP_ONEDNN_MAX_PLAIN 2
typedef struct nbop_onednn_plan {
  dnnl_primitive_desc_t pd;
  int nplain;
  int plain_arg[NBOP_ONEDNN_MAX_PLAIN];
  bool plain_out[NBOP_ONEDNN_MAX_PLAIN];
  dnnl_memory_desc_t plain_md[NBOP_ONEDNN_MAX_PLAIN];
} nbop_onednn_plan;

/* Fills plan for the primitive key names, its descriptor made with attr (user-managed
   scratchpad); plan->nplain starts at 0. */
typedef dnnl_status_t (*nbop_onednn_make_fn)(const nbop_onednn_key *key, dnnl_engine_t engine,
                                             const_dnnl_primitive_attr_t attr, nbop_onednn_plan *plan);

/* One execution argument: a DNNL_ARG_* and its buffer, laid out as the primitive's memory
   descriptor for it says, or as the plan's plain one. */
typedef struct nbop_onednn_arg {
  int arg;
  void *data;
} nbop_onednn_arg;

/* Runs the primitive key names (made by make on first use with threads threads, then
   cached) on threads OpenMP threads over args. Returns dnnl_success, or the status that
   stopped it (no implementation for these dims, out of memory): the caller then runs its
   own kernel, which writes every output anew. */
dnnl_status_t nbop_onednn_run(nb_ctx *c, const nbop_onednn_key *key, nbop_onednn_make_fn make, int threads,
                              const nbop_onednn_arg *args, int nargs);

#endif
