/* Internal core: tensors, buffers, contexts, status, shapes. Not part of the public API. */
#ifndef NBCORE_H
#define NBCORE_H

#include "nabla.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>

#define NBCORE_ERR_CAP 512
#define NBCORE_ALIGN 64 /* blocks start on a cache line */
/* Where a block's data starts. Up to NBCORE_SMALL_DATA bytes follow the header within the
   block's first line (32 bytes in): a small tensor's header and data are one cache miss,
   not two (the backward pass reads saved tensors long after they were made), and 32-byte
   aligned, what AVX2 loads want. Larger data starts on the next line: a 64-byte AVX-512
   load (oneDNN's kernels read operands in place) at 32 mod 64 would span two lines. */
#define NBCORE_SMALL_DATA 256
#define NBCORE_SMALL_DATA_OFFSET 32
static inline size_t nbcore_data_offset(size_t cap) {
  return cap <= NBCORE_SMALL_DATA ? NBCORE_SMALL_DATA_OFFSET : NBCORE_ALIGN;
}

#define NBCORE_VIEW_CLASS (-2) /* nbcore_buffer.size_class of a view of part of another block */

/* A reference-counted data block. Header and data share one allocation, except for a
   view (nbcore_buffer_view), whose data lies in the block it holds in next. */
typedef struct nbcore_buffer {
  atomic_int refs;
  int size_class;             /* pool class, -1 when too large to pool, or NBCORE_VIEW_CLASS */
  size_t cap;                 /* usable bytes */
  struct nbcore_buffer *next; /* free-list link while pooled; a view's block */
  void *data;
} nbcore_buffer;

/* POOLED: released (src/core/handles.c keeps its memory). BORROWED: a view filled in place
   by its owner (a tape's saved tensor during a backward pass); it holds no buffer reference
   and nb_tensor_free ignores it. PART: a detached handle an IndexedSlices handle owns;
   nb_tensor_free ignores it too, the slices' release frees it. */
typedef enum {
  NBCORE_HANDLE_LIVE,
  NBCORE_HANDLE_POOLED,
  NBCORE_HANDLE_DETACHED,
  NBCORE_HANDLE_BORROWED,
  NBCORE_HANDLE_PART
} nbcore_handle_state;

struct nb_tensor {
  nb_ctx *ctx;   /* owner; NULL when detached (owned by a graph or the caller) */
  uint32_t slot; /* index in ctx->handles */
  uint8_t kept;  /* scratch flag for nb_scope_end */
  uint8_t state; /* nbcore_handle_state */
  nb_dtype dtype;
  int rank;                   /* -1: unknown (symbolic only) */
  int64_t shape[NB_MAX_RANK]; /* -1 dims: unknown (symbolic only) */
  int64_t size;               /* number of elements; -1 when unknown */
  nbcore_buffer *buf;         /* data; NULL for a symbolic tensor */
  /* symbolic tensors: output `out` of node `node` in `graph`, and its value when it is
     known at build time (a constant or a folded op) */
  struct nb_graph *graph;
  int32_t node, out;
  const nb_tensor *known;
  uint64_t id;          /* unique in the process: how tapes recognise a tensor */
  nb_tensor *next_free; /* next in its release queue (src/core/handles.c) */
  /* IndexedSlices (TF's sparse gradient): the tensor of this handle's shape that is zero
     except rows indices[i] += values[i]. Such a handle has neither data nor node; the two
     parts are detached handles it owns (see src/ops/indexed_slices.c). NULL when dense. */
  nb_tensor *slice_values, *slice_indices;
};

#define NBCORE_POOL_CLASSES 27 /* 64 B .. 4 GiB in powers of two; larger is not pooled */

/* Released handles, oldest first (src/core/handles.c). */
typedef struct nbcore_handle_queue {
  nb_tensor *head, *tail;
  uint32_t n;
} nbcore_handle_queue;

typedef struct nbcore_pool {
  nbcore_buffer *free[NBCORE_POOL_CLASSES];
  size_t cached_bytes;
  nbcore_handle_queue handles;
  /* Accounting for session stats: data blocks taken from malloc, and the bytes of blocks
     handed out and not yet released through a context of this pool (a block released
     elsewhere, a session result freed by its caller, stays counted), and their most. */
  int64_t mallocs, held, peak;
  /* Set while two threads take and return blocks here at once (a session's pair of steps,
     one on a context whose blocks_from names this pool's): every block operation holds it. */
  pthread_mutex_t *lock;
} nbcore_pool;

struct nbop_kargs;
struct nbop_meta;

/* What a context does with an op once its inputs are checked and outputs inferred:
   eager contexts run the kernel, graph contexts add a node. */
typedef nb_code (*nbcore_execute_fn)(nb_ctx *c, struct nbop_kargs *k, nb_tensor **out);

struct nb_tape;
struct nb_forward_accumulator;

struct nb_ctx {
  nbcore_execute_fn execute;
  /* Eager contexts with active tapes: called after each op ran, to record it. */
  void (*record)(nb_ctx *c, struct nbop_kargs *k, nb_tensor *const *out);
  /* Eager contexts with tapes: called when a trainable variable is read, so tapes that
     watch accessed variables watch it. */
  void (*watch_read)(nb_ctx *c, nb_variable *v);
  int tapes_paused;       /* > 0: no tape records (a custom gradient's forward function runs) */
  uint32_t forwardable;   /* set by a session around one op: bit i when input i dies after it
                              (input forwarding, see eager.c) */
  struct nb_tape **tapes; /* active tapes, innermost last */
  int ntapes, tapes_cap;
  struct nb_tape *spare_tapes; /* ended tapes kept for reuse (no allocation per step) */
  /* Active forward accumulators (eager forward mode), innermost last; record runs them
     after the tapes. */
  struct nb_forward_accumulator **accs;
  int naccs, accs_cap;
  void (*release_tapes)(nb_ctx *c); /* frees the tapes when the context goes */
  /* Graph contexts infer through this hook (constants substituted, unknown shapes
     deferred); NULL: the op's own infer. */
  nb_code (*infer)(nb_ctx *c, struct nbop_kargs *k);
  struct nb_graph *graph; /* the graph a graph context builds; NULL when eager */
  /* Graph contexts turn concrete values made by nb_tensor_from/nb_scalar into Const nodes. */
  nb_tensor *(*constant)(nb_ctx *c, nb_tensor *value);
  const char *next_name; /* name for the next node (graph contexts) */
  const char *run_node;  /* node being run by a session, named in errors */
  nb_tensor **subst;     /* graph contexts: inputs with known values substituted */
  int32_t subst_cap;
  nb_code status;
  char error[NBCORE_ERR_CAP];
  int threads;
  nb_tensor **handles; /* live handles of every open scope, oldest first */
  uint32_t nhandles, handles_cap;
  uint32_t holes;   /* upper bound on NULL slots left by nb_tensor_free */
  uint32_t *scopes; /* scope marks: handle count at nb_scope_begin */
  int nscopes, scopes_cap;
  int scope_floor; /* scopes nb_scope_end may not close: those open when the running
                              callback was called (nbcore_scope_enter_callback) */
  nbcore_pool pool;
  /* When set, data blocks come from and return to this context's pool instead: a session
     running a function graph for a kernel of that context (While, If), so the blocks
     cycle between the two instead of ending in malloc's hands each iteration. */
  struct nb_ctx *blocks_from;
  struct nbop_meta *metas; /* inference output scratch, grown to the widest op */
  int metas_cap;
  /* Set by a session around one op, as forwardable: output i goes into block placed[i]
     when that is not NULL (a fetch its caller placed, see nbrt_session_place_fetches). */
  struct nbcore_buffer *const *placed;
  int nplaced;
  /* Set by a tape around a gradient's fused sum (nbg_sum_fn): an op taking this block as
     the input it can update in place may write over it (the tape's gradient so far). */
  struct nbcore_buffer *forward_block;
};

/* Bump arenas: many small allocations freed together (names, attrs, lists). */
typedef struct nbcore_arena_block nbcore_arena_block;
typedef struct nbcore_arena {
  nbcore_arena_block *first, *cursor;
} nbcore_arena;
void *nbcore_arena_alloc(nbcore_arena *a, size_t bytes);
char *nbcore_arena_strdup(nbcore_arena *a, const char *s);
void nbcore_arena_reset(nbcore_arena *a); /* empties it, keeping its blocks */
void nbcore_arena_free(nbcore_arena *a);
/* Grows *arr (of elem-sized items, capacity *cap) to hold need items; false when out of memory. */
bool nbcore_grow_array(void **arr, int32_t *cap, int32_t need, size_t elem);

/* status */
nb_code nbcore_fail(nb_ctx *c, nb_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
nb_code nbcore_vfail(nb_ctx *c, nb_code code, const char *prefix, const char *fmt, va_list ap);
/* Settles the code a user callback returned (who names it: "nb_while: body"): a failure
   that left c's status unset records one with a message naming the callback, so every
   failed call carries a message. Returns code, or c's status when code is NB_OK. */
nb_code nbcore_callback_code(nb_ctx *c, const char *who, nb_code code);

/* The bits of a pointer (n bytes at obj: a data or function pointer), for the int attrs
   that carry functions, variables and callbacks: copied, not converted. */
static inline int64_t nbcore_bits_of(const void *obj, size_t n) {
  int64_t bits = 0;
  memcpy(&bits, obj, n < sizeof bits ? n : sizeof bits);
  return bits;
}

/* buffers and handles */
/* The pool c's data blocks come from (see nb_ctx.blocks_from). */
static inline nbcore_pool *nbcore_block_pool(nb_ctx *c) { return c->blocks_from ? &c->blocks_from->pool : &c->pool; }
nbcore_buffer *nbcore_buffer_new(nb_ctx *c, size_t bytes);
/* A block from the pool of blocks released through no context (else from malloc), for
   work memory outside any context (a GEMM's padded operand); nbcore_buffer_release(NULL,
   b) gives it back there, so a loop of such calls stops reaching malloc. NULL when out of
   memory. */
nbcore_buffer *nbcore_buffer_new_shared(size_t bytes);
void nbcore_buffer_retain(nbcore_buffer *b);
/* bytes of parent's data from offset, without copying; holds parent. NULL when out of memory. */
nbcore_buffer *nbcore_buffer_view(nbcore_buffer *parent, size_t offset, size_t bytes);
/* Whether writing b in place changes no one else's value: its only reference, not a view. */
static inline bool nbcore_buffer_exclusive(nbcore_buffer *b) {
  return b->size_class != NBCORE_VIEW_CLASS && atomic_load_explicit(&b->refs, memory_order_acquire) == 1;
}
void nbcore_buffer_release(nb_ctx *c, nbcore_buffer *b);
/* Handle memory (src/core/handles.c), never returned to malloc. take: a released handle of
   q past its quarantine, else of the process's queue, else a new one (NULL when out of
   memory); put: appends x (marked released) to q; give_back: empties q into the process's
   queue. The _shared forms use the process's queue (detached handles), under a lock. */
#define NBCORE_HANDLE_QUARANTINE 64 /* releases a queue holds before it reuses a handle */
nb_tensor *nbcore_handle_take_shared(void);
void nbcore_handle_put_shared(nb_tensor *x);
void nbcore_handle_give_back(nbcore_handle_queue *q);
static inline nb_tensor *nbcore_handle_take(nbcore_handle_queue *q) { /* inline: every op's output */
  if (q->n <= NBCORE_HANDLE_QUARANTINE) return nbcore_handle_take_shared();
  nb_tensor *x = q->head;
  q->head = x->next_free;
  q->n--; /* the quarantine keeps the queue nonempty: tail stays valid */
  return x;
}
static inline void nbcore_handle_put(nbcore_handle_queue *q, nb_tensor *x) {
  x->next_free = NULL;
  if (q->tail)
    q->tail->next_free = x;
  else
    q->head = x;
  q->tail = x;
  q->n++;
}
/* Whether x was released: an op given it fails instead of reading it. */
static inline bool nbcore_released(const nb_tensor *x) { return x->state == NBCORE_HANDLE_POOLED; }
/* A user callback's view of c's scopes: enter before calling it, leave after. Leaving
   closes the scopes the callback left open, keeping keep[0..nkeep) (its results), and then
   fails with NB_INVALID ("<who> left 1 scope open"); meanwhile nb_scope_end cannot close
   scopes opened before the callback. */
typedef struct nbcore_scope_frame {
  int depth, floor;
} nbcore_scope_frame;
nbcore_scope_frame nbcore_scope_enter_callback(nb_ctx *c);
nb_code nbcore_scope_leave_callback(nb_ctx *c, nbcore_scope_frame f, nb_tensor *const *keep, int nkeep,
                                    const char *who_fmt, ...) __attribute__((format(printf, 5, 6)));
/* Frees every handle and pooled block of c (the end of a context). */
void nbcore_ctx_release_all(nb_ctx *c);
/* A new handle registered in c's current scope; buf is taken over (may be NULL). */
nb_tensor *nbcore_handle_new(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf);
/* Fills x as a borrowed view of buf (no reference taken) with the given id. */
void nbcore_borrowed_init(nb_tensor *x, nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf, uint64_t id);
/* Points a view made by nbcore_borrowed_init elsewhere: only the fields views differ in (a
   tape refills its views for every entry of a backward pass). */
void nbcore_borrowed_set(nb_tensor *x, nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf, uint64_t id);
/* A fresh process-unique tensor id (never 0). */
uint64_t nbcore_next_tensor_id(void);
/* A handle owned by no context, sharing buf (taken over). Freed with nb_tensor_free. */
nb_tensor *nbcore_detached_new(nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf);
/* A part for IndexedSlices: a copy of dense x under x's id (a reference to its data, or
   the same node) in state PART. NULL when out of memory. */
nb_tensor *nbcore_detached_copy(const nb_tensor *x);
/* Detached IndexedSlices of like's dtype and shape owning the detached parts given (they
   become PART; freed on failure: NULL when out of memory). */
nb_tensor *nbcore_detached_slices(const nb_tensor *like, nb_tensor *values, nb_tensor *indices);
/* x (a dense detached handle, as sessions return) made a handle of c's current scope, so
   that its last release returns the block to c's pool instead of to malloc; other handles
   are left alone. Returns x, or NULL when out of memory (x released). */
nb_tensor *nbcore_adopt_detached(nb_ctx *c, nb_tensor *x);
/* Kernel scratch from c's block pool: after warm-up no malloc and no fresh pages (large
   malloc blocks go back to the kernel on free and fault in again on every call). NULL when
   out of memory; nbcore_scratch_free(c, NULL) does nothing. */
void *nbcore_scratch_alloc(nb_ctx *c, size_t bytes);
void nbcore_scratch_free(nb_ctx *c, void *p);
/* Allocates a concrete tensor with uninitialized data. */
nb_tensor *nbcore_tensor_alloc(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape);
static inline void *nbcore_tdata(const nb_tensor *x) { return x->buf ? x->buf->data : NULL; }

static inline bool nbcore_is_float(nb_dtype t) { return t == NB_F32 || t == NB_F64; }

/* shapes */
int64_t nbcore_shape_size(int rank, const int64_t *shape);
/* Whether the rank and every dim are known (not -1). */
static inline bool nbcore_dims_known(int rank, const int64_t *shape) { /* inline: every dispatch asks */
  if (rank < 0) return false;
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0) return false;
  return true;
}
/* Writes "[2,3]" (or "[]" for a scalar) into buf; returns buf. */
char *nbcore_shape_str(char *buf, size_t cap, int rank, const int64_t *shape);
/* NumPy broadcasting of two shapes; false when incompatible. */
bool nbcore_broadcast_shape(int ra, const int64_t *sa, int rb, const int64_t *sb, int *rout, int64_t *sout);
/* Normalizes axis in [-rank, rank) to [0, rank); false when out of range. */
bool nbcore_norm_axis(int64_t axis, int rank, int *out);
bool nbcore_shape_checked_size(int rank, const int64_t *shape, int64_t *size);
/* TF's shape-invariant rule: a shape fits a declared one when it is at least as specific
   (declared rank -1: any shape; else the same rank, each declared dim -1 or equal). */
bool nbcore_shape_fits(int rank, const int64_t *shape, int decl_rank, const int64_t *decl_shape);

/* An N-input broadcast iteration plan: dims collapsed where possible, each input with
   its element stride per dim (0 where broadcast). The last dim is the inner loop. */
#define NBCORE_BCAST_MAX_IN 3
typedef struct nbcore_bcast {
  int nin, rank;
  int64_t dims[NB_MAX_RANK];
  int64_t strides[NBCORE_BCAST_MAX_IN][NB_MAX_RANK];
  int64_t outer; /* product of dims[0..rank-1) */
} nbcore_bcast;
void nbcore_bcast_plan(nbcore_bcast *p, int nin, const nb_tensor *const *in, int rout, const int64_t *sout);
/* The plan for inputs that all have the output's shape: one flat contiguous run. */
void nbcore_bcast_flat(nbcore_bcast *p, int nin, int64_t n);
/* Element offsets of each input at the start of outer row r. */
void nbcore_bcast_row(const nbcore_bcast *p, int64_t r, int64_t *off);

#endif
