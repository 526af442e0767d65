/* The oneDNN layer (onednn.h): the engine, made once; a bounded cache of primitives keyed
   by the caller's key and the thread count (oneDNN sizes its work split by the threads at
   creation); execution over the tensors' own buffers with a scratchpad from the context.

   Primitives run with a user-managed scratchpad, so one cached primitive may run on
   several threads at once (a library-managed one may not). The cache is a small array
   under a mutex: a lookup pins its entry (refs) while the primitive runs, and a full
   cache evicts the least recently used unpinned entry, or, all pinned, runs the new
   primitive uncached. Everything is freed at exit, so leak checkers see nothing. */
#include "onednn.h"

#include "blas.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Distinct primitives a process keeps: a network's layers, each forward and backward. */
#define CACHE_CAPACITY 128
#define MAX_ARGS 8

/* A plain-layout argument's reorder to or from the primitive's layout. */
typedef struct reorder {
  int arg;
  bool out;
  dnnl_primitive_t prim;
  dnnl_memory_desc_t plain_md, prim_md;
} reorder;

/* A primitive ready to run: the op's, and the reorders of its plain arguments. */
typedef struct compiled {
  dnnl_primitive_t prim; /* NULL: none */
  int nreorders;
  reorder reorders[NBOP_ONEDNN_MAX_PLAIN];
} compiled;

typedef struct entry {
  nbop_onednn_key key;
  int threads;
  compiled p; /* p.prim NULL: a free slot */
  uint64_t last_used;
  int refs;
} entry;

static struct {
  pthread_mutex_t lock;
  entry slots[CACHE_CAPACITY];
  uint64_t clock;
  dnnl_engine_t engine; /* NULL when oneDNN could not make one: every run falls back */
} cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static atomic_bool disabled;
static atomic_uint_fast64_t executions, primitives_made;

static void destroy(compiled *p) {
  for (int i = 0; i < p->nreorders; i++) dnnl_primitive_destroy(p->reorders[i].prim);
  if (p->prim) dnnl_primitive_destroy(p->prim);
  *p = (compiled){0};
}

static void free_all(void) {
  for (int i = 0; i < CACHE_CAPACITY; i++) destroy(&cache.slots[i].p);
  if (cache.engine) dnnl_engine_destroy(cache.engine);
  cache.engine = NULL;
}

static void make_engine(void) {
  if (dnnl_engine_create(&cache.engine, dnnl_cpu, 0) != dnnl_success) cache.engine = NULL;
  atexit(free_all);
}

static dnnl_engine_t engine(void) {
  pthread_once(&engine_once, make_engine);
  return cache.engine;
}

bool nbop_onednn_enabled(void) { return !atomic_load(&disabled) && engine() != NULL; }
void nbop_onednn_set_enabled(bool on) { atomic_store(&disabled, !on); }
uint64_t nbop_onednn_executions(void) { return atomic_load(&executions); }
uint64_t nbop_onednn_primitives_made(void) { return atomic_load(&primitives_made); }

/* A primitive from its descriptor; a scratchpad it would need beyond the user-managed
   one counts as unimplemented (reorders run without one). */
static dnnl_status_t primitive_of(const_dnnl_primitive_desc_t pd, bool scratch_allowed, dnnl_primitive_t *prim) {
  const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (!scratch_allowed && md && dnnl_memory_desc_get_size(md) > 0) return dnnl_unimplemented;
  return dnnl_primitive_create(prim, pd);
}

/* The reorder of plan's plain argument i where the primitive wants another layout. */
static dnnl_status_t add_reorder(const nbop_onednn_plan *plan, int i, const_dnnl_primitive_attr_t attr, compiled *p) {
  const dnnl_memory_desc_t *want = dnnl_primitive_desc_query_md(plan->pd, dnnl_query_exec_arg_md, plan->plain_arg[i]);
  if (!want) return dnnl_invalid_arguments;
  if (dnnl_memory_desc_equal(want, &plan->plain_md[i])) return dnnl_success;
  reorder *r = &p->reorders[p->nreorders];
  *r = (reorder){.arg = plan->plain_arg[i], .out = plan->plain_out[i], .plain_md = plan->plain_md[i], .prim_md = *want};
  dnnl_primitive_desc_t pd;
  const dnnl_memory_desc_t *from = r->out ? want : &r->plain_md, *to = r->out ? &r->plain_md : want;
  dnnl_status_t s = dnnl_reorder_primitive_desc_create(&pd, from, cache.engine, to, cache.engine, attr);
  if (s != dnnl_success) return s;
  s = primitive_of(pd, false, &r->prim);
  dnnl_primitive_desc_destroy(pd);
  if (s == dnnl_success) p->nreorders++;
  return s;
}

/* A new primitive for key with its reorders, running with a user-managed scratchpad. */
static dnnl_status_t create(const nbop_onednn_key *key, nbop_onednn_make_fn make, compiled *p) {
  *p = (compiled){0};
  dnnl_primitive_attr_t attr;
  dnnl_status_t s = dnnl_primitive_attr_create(&attr);
  if (s != dnnl_success) return s;
  nbop_onednn_plan plan = {0};
  s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (s == dnnl_success) s = make(key, cache.engine, attr, &plan);
  if (s == dnnl_success) s = primitive_of(plan.pd, true, &p->prim);
  for (int i = 0; i < plan.nplain && s == dnnl_success; i++) s = add_reorder(&plan, i, attr, p);
  if (plan.pd) dnnl_primitive_desc_destroy(plan.pd);
  dnnl_primitive_attr_destroy(attr);
  if (s != dnnl_success) destroy(p);
  if (s == dnnl_success) atomic_fetch_add(&primitives_made, 1);
  return s;
}

/* The cached entry for (key, threads), or NULL when absent. Under the lock. */
static entry *find(const nbop_onednn_key *key, int threads) {
  for (int i = 0; i < CACHE_CAPACITY; i++) {
    entry *e = &cache.slots[i];
    if (e->p.prim && e->threads == threads && !memcmp(&e->key, key, sizeof *key)) return e;
  }
  return NULL;
}

/* A slot for a new entry: a free one, else the least recently used unpinned one (its
   primitives destroyed); NULL when every slot is pinned. Under the lock. */
static entry *free_slot(void) {
  entry *victim = NULL;
  for (int i = 0; i < CACHE_CAPACITY; i++) {
    entry *e = &cache.slots[i];
    if (!e->p.prim) return e;
    if (e->refs == 0 && (!victim || e->last_used < victim->last_used)) victim = e;
  }
  if (victim) destroy(&victim->p);
  return victim;
}

/* The primitive for (key, threads) in *p, pinned in *pinned, or made uncached (*pinned
   NULL: the caller destroys it). Creation happens outside the lock: two threads may make
   the same primitive at once, and the second to finish keeps its own uncached. */
static dnnl_status_t acquire(const nbop_onednn_key *key, nbop_onednn_make_fn make, int threads, compiled *p,
                             entry **pinned) {
  pthread_mutex_lock(&cache.lock);
  entry *e = find(key, threads);
  if (e) {
    e->refs++;
    e->last_used = ++cache.clock;
    *p = e->p;
  }
  pthread_mutex_unlock(&cache.lock);
  *pinned = e;
  if (e) return dnnl_success;
  dnnl_status_t s = create(key, make, p);
  if (s != dnnl_success) return s;
  pthread_mutex_lock(&cache.lock);
  if (!find(key, threads) && (e = free_slot()) != NULL) {
    *e = (entry){.key = *key, .threads = threads, .p = *p, .last_used = ++cache.clock, .refs = 1};
    *pinned = e;
  }
  pthread_mutex_unlock(&cache.lock);
  return dnnl_success;
}

static void release(compiled *p, entry *pinned) {
  if (!pinned) {
    destroy(p);
    return;
  }
  pthread_mutex_lock(&cache.lock);
  pinned->refs--;
  pthread_mutex_unlock(&cache.lock);
}

/* One argument bound to a buffer, described by md. */
typedef struct bound {
  int arg;
  const dnnl_memory_desc_t *md;
  void *data;
} bound;

/* Executes prim on stream over n bound arguments. */
static dnnl_status_t execute_bound(dnnl_primitive_t prim, dnnl_stream_t stream, const bound *b, int n) {
  dnnl_exec_arg_t exec[MAX_ARGS + 1] = {{0}};
  dnnl_status_t s = dnnl_success;
  int made = 0;
  while (made < n && s == dnnl_success) {
    exec[made].arg = b[made].arg;
    s = dnnl_memory_create(&exec[made].memory, b[made].md, cache.engine, b[made].data);
    if (s == dnnl_success) made++;
  }
  if (s == dnnl_success) s = dnnl_primitive_execute(prim, stream, made, exec);
  for (int i = 0; i < made; i++) dnnl_memory_destroy(exec[i].memory);
  return s;
}

/* Runs reorder r between the caller's plain buffer and tmp (the primitive's layout). */
static dnnl_status_t run_reorder(const reorder *r, dnnl_stream_t stream, void *plain, void *tmp) {
  bound from = {DNNL_ARG_FROM, &r->plain_md, plain}, to = {DNNL_ARG_TO, &r->prim_md, tmp};
  if (r->out) from = (bound){DNNL_ARG_FROM, &r->prim_md, tmp}, to = (bound){DNNL_ARG_TO, &r->plain_md, plain};
  return execute_bound(r->prim, stream, (bound[]){from, to}, 2);
}

/* Executes p over args and a scratchpad from c: each argument over its buffer, or over a
   temporary in the primitive's layout that its reorder fills before or empties after. */
static dnnl_status_t execute(nb_ctx *c, const compiled *p, const nbop_onednn_arg *args, int nargs) {
  const_dnnl_primitive_desc_t pd;
  dnnl_status_t s = dnnl_primitive_get_primitive_desc(p->prim, &pd);
  if (s != dnnl_success) return s;
  bound b[MAX_ARGS + 1];
  void *plain[NBOP_ONEDNN_MAX_PLAIN] = {NULL}, *tmp[NBOP_ONEDNN_MAX_PLAIN + 1] = {NULL}; /* last: the scratchpad */
  for (int i = 0; i < nargs; i++) {
    b[i] = (bound){args[i].arg, dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, args[i].arg), args[i].data};
    for (int r = 0; r < p->nreorders; r++)
      if (p->reorders[r].arg == args[i].arg) {
        plain[r] = args[i].data;
        b[i].data = tmp[r] = nbcore_scratch_alloc(c, dnnl_memory_desc_get_size(&p->reorders[r].prim_md));
        if (!tmp[r]) s = dnnl_out_of_memory;
      }
  }
  int n = nargs;
  const dnnl_memory_desc_t *scratch_md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t scratch_bytes = scratch_md ? dnnl_memory_desc_get_size(scratch_md) : 0;
  if (scratch_bytes && s == dnnl_success) {
    b[n++] =
        (bound){DNNL_ARG_SCRATCHPAD, scratch_md, tmp[NBOP_ONEDNN_MAX_PLAIN] = nbcore_scratch_alloc(c, scratch_bytes)};
    if (!b[n - 1].data) s = dnnl_out_of_memory;
  }
  dnnl_stream_t stream = NULL;
  if (s == dnnl_success) s = dnnl_stream_create(&stream, cache.engine, dnnl_stream_default_flags);
  for (int r = 0; r < p->nreorders && s == dnnl_success; r++)
    if (!p->reorders[r].out) s = run_reorder(&p->reorders[r], stream, plain[r], tmp[r]);
  if (s == dnnl_success) s = execute_bound(p->prim, stream, b, n);
  for (int r = 0; r < p->nreorders && s == dnnl_success; r++)
    if (p->reorders[r].out) s = run_reorder(&p->reorders[r], stream, plain[r], tmp[r]);
  if (s == dnnl_success) s = dnnl_stream_wait(stream);
  if (stream) dnnl_stream_destroy(stream);
  for (int i = 0; i <= NBOP_ONEDNN_MAX_PLAIN; i++) nbcore_scratch_free(c, tmp[i]);
  if (s == dnnl_success) atomic_fetch_add(&executions, 1);
  return s;
}

dnnl_status_t nbop_onednn_run(nb_ctx *c, const nbop_onednn_key *key, nbop_onednn_make_fn make, int threads,
                              const nbop_onednn_arg *args, int nargs) {
  if (!nbop_onednn_enabled() || nargs > MAX_ARGS) return dnnl_unimplemented;
  /* oneDNN's OpenMP runtime uses the calling thread's nthreads-var, at creation (its work
     split) and at execution */
  int prev_threads = omp_get_max_threads();
  nbop_blas_set_threads(threads);
  compiled p;
  entry *pinned;
  dnnl_status_t s = acquire(key, make, threads, &p, &pinned);
  if (s == dnnl_success) {
    s = execute(c, &p, args, nargs);
    release(&p, pinned);
  }
  nbop_blas_set_threads(prev_threads);
  return s;
}
