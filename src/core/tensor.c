/* Tensors: pooled reference-counted buffers, pooled handles, scopes. In steady state
   (a loop that makes and frees the same sizes) no call here reaches malloc. */
#include "core.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBCORE_MIN_CLASS_SHIFT 6            /* 64 bytes */
#define NBCORE_POOL_MAX_CACHED (256u << 20) /* bytes kept for reuse per context */

static int size_class(size_t bytes) {
  int cls = 0;
  size_t cap = (size_t)1 << NBCORE_MIN_CLASS_SHIFT;
  while (cap < bytes) {
    cap <<= 1;
    if (++cls >= NBCORE_POOL_CLASSES) return -1;
  }
  return cls;
}

static size_t class_bytes(int cls) { return (size_t)1 << (cls + NBCORE_MIN_CLASS_SHIFT); }

static nbcore_buffer *buffer_alloc(size_t cap, int cls) {
  _Static_assert(sizeof(nbcore_buffer) <= NBCORE_SMALL_DATA_OFFSET, "the buffer header must fit before the data");
  size_t head = nbcore_data_offset(cap);
  size_t total = (head + cap + NBCORE_ALIGN - 1) / NBCORE_ALIGN * NBCORE_ALIGN;
  if (cap > SIZE_MAX - 2 * NBCORE_ALIGN - head) return NULL;
  nbcore_buffer *b = aligned_alloc(NBCORE_ALIGN, total);
  if (!b) return NULL;
  b->size_class = cls;
  b->cap = cap;
  b->next = NULL;
  b->data = (char *)b + head;
  return b;
}

/* Blocks released through no context (session results their callers free): any context
   takes them when its own pool has none of a size, so a loop that frees its results each
   step takes nothing from malloc either. */
static pthread_mutex_t shared_blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static nbcore_pool shared_blocks;

static nbcore_buffer *pool_take(nbcore_pool *p, int cls) {
  nbcore_buffer *b = p->free[cls];
  if (b) {
    p->free[cls] = b->next;
    p->cached_bytes -= b->cap;
  }
  return b;
}

static bool pool_put(nbcore_pool *p, nbcore_buffer *b) {
  if (b->size_class < 0 || p->cached_bytes + b->cap > NBCORE_POOL_MAX_CACHED) return false;
  b->next = p->free[b->size_class];
  p->free[b->size_class] = b;
  p->cached_bytes += b->cap;
  return true;
}

static nbcore_buffer *shared_take(int cls) {
  pthread_mutex_lock(&shared_blocks_lock);
  nbcore_buffer *b = pool_take(&shared_blocks, cls);
  pthread_mutex_unlock(&shared_blocks_lock);
  return b;
}

static bool shared_put(nbcore_buffer *b) {
  pthread_mutex_lock(&shared_blocks_lock);
  bool kept = pool_put(&shared_blocks, b);
  pthread_mutex_unlock(&shared_blocks_lock);
  return kept;
}

static void pool_lock(nbcore_pool *p) {
  if (p->lock) pthread_mutex_lock(p->lock);
}

static void pool_unlock(nbcore_pool *p) {
  if (p->lock) pthread_mutex_unlock(p->lock);
}

nbcore_buffer *nbcore_buffer_new(nb_ctx *c, size_t bytes) {
  int cls = size_class(bytes ? bytes : 1);
  nbcore_pool *p = nbcore_block_pool(c);
  pool_lock(p);
  nbcore_buffer *b = cls >= 0 ? pool_take(p, cls) : NULL;
  if (!b && cls >= 0) b = shared_take(cls);
  if (!b && (b = buffer_alloc(cls >= 0 ? class_bytes(cls) : bytes, cls))) p->mallocs++;
  if (b) {
    p->held += (int64_t)b->cap;
    if (p->held > p->peak) p->peak = p->held;
    atomic_init(&b->refs, 1);
  }
  pool_unlock(p);
  return b;
}

nbcore_buffer *nbcore_buffer_new_shared(size_t bytes) {
  int cls = size_class(bytes ? bytes : 1);
  nbcore_buffer *b = cls >= 0 ? shared_take(cls) : NULL;
  if (!b) b = buffer_alloc(cls >= 0 ? class_bytes(cls) : bytes, cls);
  if (b) atomic_init(&b->refs, 1);
  return b;
}

void nbcore_buffer_retain(nbcore_buffer *b) { atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed); }

/* The last release returns the block to the releasing context's pool (any pool may
   cache any block: they are plain aligned allocations). */
nbcore_buffer *nbcore_buffer_view(nbcore_buffer *parent, size_t offset, size_t bytes) {
  if (parent->size_class == NBCORE_VIEW_CLASS) { /* a view of a view holds the block itself: one level deep */
    offset += (size_t)((char *)parent->data - (char *)parent->next->data);
    parent = parent->next;
  }
  nbcore_buffer *v = malloc(sizeof *v);
  if (!v) return NULL;
  atomic_init(&v->refs, 1);
  v->size_class = NBCORE_VIEW_CLASS;
  v->cap = bytes;
  v->next = parent;
  v->data = (char *)parent->data + offset;
  nbcore_buffer_retain(parent);
  return v;
}

void nbcore_buffer_release(nb_ctx *c, nbcore_buffer *b) {
  if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1) return;
  if (b->size_class == NBCORE_VIEW_CLASS) {
    nbcore_buffer *parent = b->next;
    free(b);
    nbcore_buffer_release(c, parent);
    return;
  }
  nbcore_pool *p = c ? nbcore_block_pool(c) : NULL;
  if (!p) {
    if (!shared_put(b)) free(b);
    return;
  }
  pool_lock(p);
  p->held -= (int64_t)b->cap;
  bool kept = pool_put(p, b);
  pool_unlock(p);
  if (!kept) free(b);
}

/* Frees the pooled blocks of p and hands its released handles to the process's queue. */
static void nbcore_pool_clear(nbcore_pool *p) {
  for (int i = 0; i < NBCORE_POOL_CLASSES; i++) {
    while (p->free[i]) {
      nbcore_buffer *b = p->free[i];
      p->free[i] = b->next;
      free(b);
    }
  }
  p->cached_bytes = 0;
  nbcore_handle_give_back(&p->handles);
}

static bool grow_handles(nb_ctx *c) {
  uint32_t cap = c->handles_cap ? c->handles_cap * 2 : 256;
  nb_tensor **h = realloc(c->handles, cap * sizeof *h);
  if (!h) return false;
  c->handles = h;
  c->handles_cap = cap;
  return true;
}

/* Every field but the id. */
static void handle_fill(nb_tensor *x, nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf) {
  x->ctx = NULL;
  x->kept = 0;
  x->state = NBCORE_HANDLE_LIVE;
  x->dtype = t;
  x->rank = rank;
  if (rank > 0) memcpy(x->shape, shape, (size_t)rank * sizeof *shape);
  x->size = nbcore_dims_known(rank, shape) ? nbcore_shape_size(rank, shape) : -1;
  x->buf = buf;
  x->graph = NULL;
  x->node = x->out = -1;
  x->known = NULL;
  x->next_free = NULL;
  x->slice_values = x->slice_indices = NULL;
}

static void handle_init(nb_tensor *x, nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf) {
  handle_fill(x, t, rank, shape, buf);
  x->id = nbcore_next_tensor_id();
}

void nbcore_borrowed_set(nb_tensor *x, nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf, uint64_t id) {
  x->dtype = t;
  x->rank = rank;
  if (rank > 0) memcpy(x->shape, shape, (size_t)rank * sizeof *shape);
  x->size = nbcore_shape_size(rank, shape);
  x->buf = buf;
  x->id = id;
}

void nbcore_borrowed_init(nb_tensor *x, nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf, uint64_t id) {
  handle_fill(x, t, rank, shape, buf); /* its own id: no new one drawn (tapes fill these per entry) */
  x->state = NBCORE_HANDLE_BORROWED;
  x->id = id;
}

uint64_t nbcore_next_tensor_id(void) {
  static _Atomic uint64_t next = 1;
  return atomic_fetch_add_explicit(&next, 1, memory_order_relaxed);
}

/* Makes x a live handle of c's current scope; the caller made room in c->handles. */
static void register_handle(nb_ctx *c, nb_tensor *x) {
  x->ctx = c;
  x->state = NBCORE_HANDLE_LIVE;
  x->slot = c->nhandles;
  c->handles[c->nhandles++] = x;
}

nb_tensor *nbcore_handle_new(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf) {
  nb_tensor *x = c->nhandles < c->handles_cap || grow_handles(c) ? nbcore_handle_take(&c->pool.handles) : NULL;
  if (!x) {
    nbcore_buffer_release(c, buf);
    nbcore_fail(c, NB_NOMEM, "out of memory allocating a tensor handle");
    return NULL;
  }
  handle_init(x, t, rank, shape, buf);
  register_handle(c, x);
  return x;
}

nb_tensor *nbcore_detached_new(nb_dtype t, int rank, const int64_t *shape, nbcore_buffer *buf) {
  nb_tensor *x = nbcore_handle_take_shared();
  if (!x) {
    nbcore_buffer_release(NULL, buf);
    return NULL;
  }
  handle_init(x, t, rank, shape, buf);
  x->state = NBCORE_HANDLE_DETACHED;
  return x;
}

nb_tensor *nbcore_detached_copy(const nb_tensor *x) {
  nb_tensor *d = nbcore_handle_take_shared();
  if (!d) return NULL;
  *d = *x;
  d->ctx = NULL;
  d->kept = 0;
  d->state = NBCORE_HANDLE_PART;
  d->next_free = NULL;
  if (d->buf) nbcore_buffer_retain(d->buf);
  return d;
}

nb_tensor *nbcore_detached_slices(const nb_tensor *like, nb_tensor *values, nb_tensor *indices) {
  nb_tensor *x = nbcore_detached_new(like->dtype, like->rank, like->shape, NULL);
  if (!x) {
    nb_tensor_free(values);
    nb_tensor_free(indices);
    return NULL;
  }
  x->slice_values = values;
  x->slice_indices = indices;
  values->state = indices->state = NBCORE_HANDLE_PART;
  return x;
}

/* What every release does to x: no data, no node; an op given it fails. */
static void mark_released(nb_tensor *x) {
  x->buf = NULL;
  x->ctx = NULL;
  x->graph = NULL;
  x->node = x->out = -1;
  x->known = NULL;
  x->state = NBCORE_HANDLE_POOLED;
}

static void release_slices(nb_tensor *x);

/* Releases a handle no context holds (detached, or an IndexedSlices part). */
static void detached_release(nb_tensor *x) {
  if (x->slice_values) release_slices(x);
  nbcore_buffer_release(NULL, x->buf);
  mark_released(x);
  nbcore_handle_put_shared(x);
}

/* An IndexedSlices handle's parts go with it. */
static void release_slices(nb_tensor *x) {
  if (x->slice_values) detached_release(x->slice_values);
  if (x->slice_indices) detached_release(x->slice_indices);
  x->slice_values = x->slice_indices = NULL;
}

nb_tensor *nbcore_adopt_detached(nb_ctx *c, nb_tensor *x) {
  if (!x || x->state != NBCORE_HANDLE_DETACHED || x->slice_values) return x;
  if (c->nhandles == c->handles_cap && !grow_handles(c)) {
    detached_release(x);
    nbcore_fail(c, NB_NOMEM, "out of memory allocating a tensor handle");
    return NULL;
  }
  register_handle(c, x);
  return x;
}

void *nbcore_scratch_alloc(nb_ctx *c, size_t bytes) {
  nbcore_buffer *b = nbcore_buffer_new(c, bytes);
  return b ? b->data : NULL;
}

/* p's block: its data starts 32 bytes into it (small data) or on its second line, which
   p's offset within its cache line tells apart. */
void nbcore_scratch_free(nb_ctx *c, void *p) {
  if (!p) return;
  size_t offset = (uintptr_t)p % NBCORE_ALIGN ? NBCORE_SMALL_DATA_OFFSET : NBCORE_ALIGN;
  nbcore_buffer_release(c, (nbcore_buffer *)((char *)p - offset));
}

nb_tensor *nbcore_tensor_alloc(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape) {
  size_t bytes = (size_t)nbcore_shape_size(rank, shape) * nb_dtype_size(t);
  nbcore_buffer *b = nbcore_buffer_new(c, bytes);
  if (!b) {
    char s[160];
    nbcore_fail(c, NB_NOMEM, "out of memory allocating %zu bytes for a %s tensor of shape %s", bytes, nb_dtype_name(t),
                nbcore_shape_str(s, sizeof s, rank, shape));
    return NULL;
  }
  return nbcore_handle_new(c, t, rank, shape, b);
}

/* Returns the handle to the pool; the caller has already unlinked it from handles. */
static void handle_release(nb_ctx *c, nb_tensor *x) {
  if (x->slice_values) release_slices(x);
  nbcore_buffer_release(c, x->buf);
  mark_released(x);
  nbcore_handle_put(&c->pool.handles, x);
}

/* Squeezes out the NULL slots of every scope, moving the scope marks along. */
static void compact_handles(nb_ctx *c) {
  uint32_t w = 0;
  int s = 0;
  for (uint32_t i = 0; i < c->nhandles; i++) {
    while (s < c->nscopes && c->scopes[s] == i) c->scopes[s++] = w;
    nb_tensor *x = c->handles[i];
    if (x) {
      x->slot = w;
      c->handles[w++] = x;
    }
  }
  while (s < c->nscopes) c->scopes[s++] = w;
  c->nhandles = w;
  c->holes = 0;
}

void nb_tensor_free(nb_tensor *x) {
  /* released handles stay readable (src/core/handles.c): a second free does nothing;
     borrowed views and IndexedSlices parts are their owners' to release */
  if (!x || (x->state != NBCORE_HANDLE_LIVE && x->state != NBCORE_HANDLE_DETACHED)) return;
  if (x->state == NBCORE_HANDLE_DETACHED) {
    detached_release(x);
    return;
  }
  nb_ctx *c = x->ctx;
  c->handles[x->slot] = NULL;
  /* Trim trailing holes so create-then-free loops without scopes stay flat; holes
     further down are squeezed out once they are half the list (amortized O(1)). */
  uint32_t floor = c->nscopes ? c->scopes[c->nscopes - 1] : 0;
  if (x->slot + 1 == c->nhandles) {
    while (c->nhandles > floor && !c->handles[c->nhandles - 1]) c->nhandles--;
  } else if (++c->holes > 64 && c->holes > c->nhandles / 2) {
    compact_handles(c);
  }
  handle_release(c, x);
}

void nb_scope_begin(nb_ctx *c) {
  if (!c) return;
  if (c->nscopes == c->scopes_cap) {
    int cap = c->scopes_cap ? c->scopes_cap * 2 : 16;
    uint32_t *s = realloc(c->scopes, (size_t)cap * sizeof *s);
    if (!s) {
      nbcore_fail(c, NB_NOMEM, "nb_scope_begin: out of memory");
      return;
    }
    c->scopes = s;
    c->scopes_cap = cap;
  }
  c->scopes[c->nscopes++] = c->nhandles;
}

void nb_scope_end(nb_ctx *c, nb_tensor *const *keep, int nkeep) {
  if (!c) return;
  if (c->nscopes <= c->scope_floor) {
    nbcore_fail(c, NB_INVALID, "nb_scope_end without a matching nb_scope_begin");
    return;
  }
  uint32_t mark = c->scopes[--c->nscopes];
  for (int i = 0; i < nkeep; i++)
    if (keep && keep[i] && keep[i]->ctx == c && keep[i]->slot >= mark) keep[i]->kept = 1;
  uint32_t w = mark;
  for (uint32_t i = mark; i < c->nhandles; i++) {
    nb_tensor *x = c->handles[i];
    if (!x) continue;
    if (x->kept) {
      x->kept = 0;
      x->slot = w;
      c->handles[w++] = x;
    } else {
      handle_release(c, x);
    }
  }
  c->nhandles = w;
}

nbcore_scope_frame nbcore_scope_enter_callback(nb_ctx *c) {
  nbcore_scope_frame f = {c->nscopes, c->scope_floor};
  c->scope_floor = c->nscopes;
  return f;
}

nb_code nbcore_scope_leave_callback(nb_ctx *c, nbcore_scope_frame f, nb_tensor *const *keep, int nkeep,
                                    const char *who_fmt, ...) {
  c->scope_floor = f.floor;
  int open = c->nscopes - f.depth;
  if (open <= 0) return NB_OK; /* fewer cannot be: the floor kept them */
  while (c->nscopes > f.depth) nb_scope_end(c, keep, nkeep);
  char who[NBCORE_ERR_CAP / 2];
  va_list ap;
  va_start(ap, who_fmt);
  vsnprintf(who, sizeof who, who_fmt, ap);
  va_end(ap);
  return nbcore_fail(c, NB_INVALID, "%s left %d scope%s open (an nb_scope_begin without its nb_scope_end)", who, open,
                     open == 1 ? "" : "s");
}

/* Frees every handle and pooled block: the end of a context. */
void nbcore_ctx_release_all(nb_ctx *c) {
  for (uint32_t i = 0; i < c->nhandles; i++)
    if (c->handles[i]) handle_release(c, c->handles[i]);
  c->nhandles = 0;
  nbcore_pool_clear(&c->pool);
  free(c->handles);
  free(c->scopes);
  c->handles = NULL;
  c->scopes = NULL;
}

/* ---- public tensor API -------------------------------------------------------- */

static bool valid_dtype(nb_dtype t) { return (unsigned)t <= NB_BOOL; }

/* In a graph context a new value becomes a Const node; the concrete temporary goes. */
static nb_tensor *as_constant(nb_ctx *c, nb_tensor *x) {
  if (!x || !c->constant) return x;
  nb_tensor *node = c->constant(c, x);
  nb_tensor_free(x);
  return node;
}

nb_tensor *nb_tensor_from(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const void *data) {
  if (!c || c->status != NB_OK) return NULL;
  int64_t n;
  if (!valid_dtype(t)) {
    nbcore_fail(c, NB_DTYPE, "nb_tensor_from: invalid dtype %d", (int)t);
    return NULL;
  }
  if (rank < 0 || rank > NB_MAX_RANK || (rank > 0 && !shape)) {
    nbcore_fail(c, NB_SHAPE, "nb_tensor_from: rank %d must be in [0, %d] with a shape", rank, NB_MAX_RANK);
    return NULL;
  }
  if (!nbcore_shape_checked_size(rank, shape, &n)) {
    char s[160];
    nbcore_fail(c, NB_SHAPE, "nb_tensor_from: invalid shape %s (negative or too large)",
                nbcore_shape_str(s, sizeof s, rank, shape));
    return NULL;
  }
  nb_tensor *x = nbcore_tensor_alloc(c, t, rank, shape);
  if (!x) return NULL;
  size_t bytes = (size_t)n * nb_dtype_size(t);
  if (data)
    memcpy(nbcore_tdata(x), data, bytes);
  else
    memset(nbcore_tdata(x), 0, bytes);
  return as_constant(c, x);
}

/* Stores v as dtype t at dst[i]. */
static void store_double(nb_dtype t, void *dst, int64_t i, double v) {
  switch (t) {
    case NB_F32: ((float *)dst)[i] = (float)v; break;
    case NB_F64: ((double *)dst)[i] = v; break;
    case NB_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
    case NB_I64: ((int64_t *)dst)[i] = (int64_t)v; break;
    case NB_BOOL: ((uint8_t *)dst)[i] = v != 0; break;
  }
}

/* Whether v converts to dtype t exactly enough: ints must be whole and in range. */
static bool representable(nb_dtype t, double v) {
  switch (t) {
    case NB_I32: return v == floor(v) && v >= -2147483648.0 && v <= 2147483647.0;
    case NB_I64: return v == floor(v) && v >= -0x1p63 && v < 0x1p63;
    default: return true; /* floats take anything (NaN, inf); bool is v != 0 */
  }
}

nb_tensor *nb_scalar(nb_ctx *c, nb_dtype t, double v) {
  if (!c || c->status != NB_OK) return NULL;
  if (!valid_dtype(t)) {
    nbcore_fail(c, NB_DTYPE, "nb_scalar: invalid dtype %d", (int)t);
    return NULL;
  }
  if (!representable(t, v)) {
    nbcore_fail(c, NB_INVALID, "nb_scalar: %g is not representable as %s", v, nb_dtype_name(t));
    return NULL;
  }
  nb_tensor *x = nbcore_tensor_alloc(c, t, 0, NULL);
  if (x) store_double(t, nbcore_tdata(x), 0, v);
  return as_constant(c, x);
}

nb_dtype nb_dtype_of(const nb_tensor *x) { return x ? x->dtype : NB_F32; }
int nb_rank(const nb_tensor *x) { return x ? x->rank : -1; }
const int64_t *nb_shape(const nb_tensor *x) { return x ? x->shape : NULL; }
int64_t nb_num_elements(const nb_tensor *x) { return x ? x->size : -1; }
const void *nb_data(const nb_tensor *x) { return x ? nbcore_tdata(x) : NULL; }

/* Index i of an int32/int64 tensor. */
static int64_t index_at(const nb_tensor *ix, int64_t i) {
  const void *d = nbcore_tdata(ix);
  return ix->dtype == NB_I32 ? ((const int32_t *)d)[i] : ((const int64_t *)d)[i];
}

/* The dense value of concrete IndexedSlices x in dst: zeros, then each row of values added
   at its index (repeats sum). */
static nb_code read_slices(const nb_tensor *x, void *dst) {
  const nb_tensor *v = x->slice_values, *ix = x->slice_indices;
  if (!v->buf || !ix->buf) return NB_INVALID;
  int64_t nrows = x->rank ? x->shape[0] : 1, row = nrows ? x->size / nrows : 0;
  memset(dst, 0, (size_t)x->size * nb_dtype_size(x->dtype));
  for (int64_t r = 0; r < ix->size; r++) {
    int64_t at = index_at(ix, r);
    if (at < 0 || at >= nrows) return NB_INVALID; /* checked when the slices were made */
    for (int64_t j = 0; j < row; j++)
      if (x->dtype == NB_F32)
        ((float *)dst)[at * row + j] += ((const float *)nbcore_tdata(v))[r * row + j];
      else
        ((double *)dst)[at * row + j] += ((const double *)nbcore_tdata(v))[r * row + j];
  }
  return NB_OK;
}

nb_code nb_read(const nb_tensor *x, void *dst, size_t bytes) {
  if (!x || (!dst && bytes)) return NB_INVALID;
  if (!x->buf && !x->slice_values) return NB_INVALID; /* symbolic: run it in a session first */
  if (bytes != (size_t)x->size * nb_dtype_size(x->dtype)) return NB_SHAPE;
  if (x->slice_values) return read_slices(x, dst);
  if (bytes) memcpy(dst, nbcore_tdata(x), bytes);
  return NB_OK;
}

/* Element i of concrete IndexedSlices x: the sum of the values rows at its row's index. */
static double slices_item(const nb_tensor *x, int64_t i) {
  const nb_tensor *v = x->slice_values, *ix = x->slice_indices;
  if (!v->buf || !ix->buf) return NAN;
  int64_t nrows = x->rank ? x->shape[0] : 1, row = x->size / nrows, sum_at = i / row;
  double sum = 0;
  for (int64_t r = 0; r < ix->size; r++)
    if (index_at(ix, r) == sum_at) sum += nb_item(v, r * row + i % row);
  return sum;
}

double nb_item(const nb_tensor *x, int64_t i) {
  if (!x || i < 0 || i >= x->size) return NAN;
  if (x->slice_values) return slices_item(x, i);
  if (!x->buf) return NAN;
  const void *d = nbcore_tdata(x);
  switch (x->dtype) {
    case NB_F32: return ((const float *)d)[i];
    case NB_F64: return ((const double *)d)[i];
    case NB_I32: return ((const int32_t *)d)[i];
    case NB_I64: return (double)((const int64_t *)d)[i];
    case NB_BOOL: return ((const uint8_t *)d)[i];
  }
  return NAN;
}
