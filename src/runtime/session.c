/* Sessions: run the part of a graph that the fetches need. A plan (pruned node order,
   where each input comes from, when each value is last used) is built once per
   (feeds, fetches) signature and cached; running it dispatches each node's op on an
   eager context and frees every intermediate right after its last use. Two independent
   heavy steps next to each other in the plan run at once on two threads (TF's inter-op
   pool), each with half the intra-op threads: the plan moves such a pair together. */
#include "runtime.h"

#include "../ops/collective.h"

#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nbrt_plan {
  uint64_t hash;
  uint32_t version; /* the graph's control-edge version it was planned for */
  int nfeed, nfetch;
  int64_t *keys;  /* feed keys then fetch keys: node << 32 | output */
  nb_graph *g;    /* the graph it runs: the session's, or the optimized copy it owns */
  int64_t *gkeys; /* keys as g's tensors (keys itself when g is the session's) */
  int32_t nsteps, nvals;
  int32_t max_in;  /* the most inputs one step reads */
  int32_t *steps;  /* node ids in run order */
  int32_t *in_off; /* step i reads vals in_vals[in_off[i] .. in_off[i+1]) */
  int32_t *in_vals;
  int32_t *out0;     /* step i writes vals out0[i] .. out0[i] + nout */
  int32_t *free_off; /* after step i, free free_vals[free_off[i] .. free_off[i+1]) */
  int32_t *free_vals;
  uint32_t *dying; /* step i: bit j when its input j (j < 32) is freed right after it */
  int32_t *feed_vals, *fetch_vals;
  bool *from_value; /* step i takes its node's build-time value instead of running */
  bool *paired;     /* step i runs at once with step i + 1 (independent of it) */
  bool pairs;       /* planned for several threads: pairs placed (they run at once, so the
                       steps they move keep their values longer than the memory order would) */
} nbrt_plan;

struct nb_session {
  nb_graph *g;
  nbrt_optimize_fn optimize; /* NULL: plans run g as built */
  nb_session_opts opts;
  nb_ctx *ctx;
  nb_ctx *worker;            /* runs the second step of a pair, on the session context's blocks */
  pthread_mutex_t pair_lock; /* guards those blocks while a pair runs */
  nbrt_plan **plans;
  int nplans;
  nb_tensor **vals;
  int32_t vals_cap;
  int take;                    /* the next nb_run frees feed values [0, take) (nbrt_session_take_feeds) */
  nbcore_buffer *const *place; /* the next nb_run's fetch blocks (nbrt_session_place_fetches) */
  int nplace;
  nb_session_stats stats;
  char error[NBCORE_ERR_CAP];
};

/* nb_session_new and nb_session_new_with_opts are src/opt's: they install its passes. */
nb_session *nbrt_session_new(nb_graph *g, nbrt_optimize_fn optimize, const nb_session_opts *opts) {
  if (!g) return NULL;
  nb_session *s = calloc(1, sizeof *s);
  if (!s || !(s->ctx = nb_eager_new())) {
    free(s);
    return NULL;
  }
  s->g = g;
  s->optimize = optimize;
  if (opts) s->opts = *opts;
  pthread_mutex_init(&s->pair_lock, NULL);
  return s;
}

static void plan_free(nbrt_plan *p) {
  if (!p) return;
  if (p->gkeys != p->keys) { /* an optimized copy */
    nb_graph_free(p->g);
    free(p->gkeys);
  }
  free(p->keys);
  free(p->steps);
  free(p->in_off);
  free(p->in_vals);
  free(p->out0);
  free(p->free_off);
  free(p->free_vals);
  free(p->dying);
  free(p->feed_vals);
  free(p->fetch_vals);
  free(p->from_value);
  free(p->paired);
  free(p);
}

void nb_session_free(nb_session *s) {
  if (!s) return;
  for (int i = 0; i < s->nplans; i++) plan_free(s->plans[i]);
  free(s->plans);
  free(s->vals);
  nb_ctx_free(s->worker);
  nb_ctx_free(s->ctx);
  pthread_mutex_destroy(&s->pair_lock);
  free(s);
}

const char *nb_session_error(const nb_session *s) { return s ? s->error : "NULL session"; }

void nbrt_session_share_blocks(nb_session *s, nb_ctx *from) {
  if (s) s->ctx->blocks_from = from;
}

void nbrt_session_take_feeds(nb_session *s, int n) {
  if (s) s->take = n;
}

void nbrt_session_place_fetches(nb_session *s, nbcore_buffer *const *blocks, int n) {
  if (!s) return;
  s->place = blocks;
  s->nplace = n;
}

/* Frees the feed values nbrt_session_take_feeds handed over that the run has not. */
static void drop_taken(nb_session *s, nb_tensor *const *feed_values, int nfeed) {
  for (int i = 0; feed_values && i < s->take && i < nfeed; i++)
    if (feed_values[i]) nb_tensor_free(feed_values[i]);
  s->take = 0;
}

void nb_session_get_stats(const nb_session *s, nb_session_stats *out) {
  if (s && out) *out = s->stats;
}

void nb_session_set_threads(nb_session *s, int n) {
  if (s) nb_ctx_set_threads(s->ctx, n);
}

static nb_code session_fail(nb_session *s, nb_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static nb_code session_fail(nb_session *s, nb_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->error, sizeof s->error, fmt, ap);
  va_end(ap);
  return code;
}

static uint64_t keys_hash(const int64_t *keys, int n) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; i++) h = (h ^ (uint64_t)keys[i]) * 1099511628211ull;
  return h;
}

/* ---- planning ------------------------------------------------------------------------ */

typedef struct planner {
  nb_session *s;
  nb_graph *g;
  nbrt_plan *p;
  uint32_t gen;
  int32_t *needed, nneeded; /* nodes to run, in discovery order */
} planner;

static bool push_stale(int32_t **stack, int32_t *top, int32_t *cap, int32_t id) {
  if (!nbcore_grow_array((void **)stack, cap, *top + 1, sizeof **stack)) {
    free(*stack);
    *stack = NULL;
    return false;
  }
  (*stack)[(*top)++] = id;
  return true;
}

/* Index of the feed that replaces (src, out), or -1. */
static int fed_index(const nbrt_plan *p, int32_t src, int32_t out) {
  int64_t key = nbgraph_key(src, out);
  for (int i = 0; i < p->nfeed; i++)
    if (p->gkeys[i] == key) return i;
  return -1;
}

static bool edge_live(const nbrt_plan *p, const nbgraph_edge *e) {
  return e->out < 0 || fed_index(p, e->src, e->out) < 0;
}

/* A node whose outputs were all computed at build time needs none of its inputs, unless
   a feed replaces something those values came from (marked stale: stamp2 == gen). */
static bool node_known(const planner *pl, const nbgraph_node *n) {
  return n->stamp2 != pl->gen && nbgraph_node_values_known(pl->g, n);
}

/* Marks the build-time values downstream of fed tensors as stale. Only nodes with known
   values can be stale (a node that runs has no build-time value), so the walk stays in
   the folded part of the graph. */
static nb_code mark_stale(planner *pl) {
  nb_graph *g = pl->g;
  int32_t *stack = NULL, top = 0, cap = 0;
  for (int i = 0; i < pl->p->nfeed; i++) {
    int32_t id = nbgraph_key_node(pl->p->gkeys[i]);
    if (g->nodes[id].stamp2 == pl->gen) continue;
    g->nodes[id].stamp2 = pl->gen;
    if (!push_stale(&stack, &top, &cap, id)) return NB_NOMEM;
    while (top > 0) {
      const nbgraph_node *n = &g->nodes[stack[--top]];
      for (int32_t e = n->first_use; e >= 0; e = g->edges[e].next_use) {
        nbgraph_node *u = &g->nodes[g->edges[e].consumer];
        if (g->edges[e].out < 0 || u->stamp2 == pl->gen || !nbgraph_node_values_known(g, u)) continue;
        u->stamp2 = pl->gen;
        if (!push_stale(&stack, &top, &cap, g->edges[e].consumer)) {
          free(stack);
          return NB_NOMEM;
        }
      }
    }
  }
  free(stack);
  return NB_OK;
}

static void push_needed(planner *pl, int32_t *stack, int *top, int32_t id) {
  nbgraph_node *n = &pl->g->nodes[id];
  if (n->stamp == pl->gen) return;
  n->stamp = pl->gen;
  pl->needed[pl->nneeded++] = id;
  stack[(*top)++] = id;
}

/* Marks (stamp == gen) every node the fetches need, stopping at fed tensors. */
static nb_code collect_needed(planner *pl) {
  nb_graph *g = pl->g;
  int32_t *stack = malloc((size_t)(g->nnodes + 1) * sizeof *stack);
  pl->needed = malloc((size_t)(g->nnodes + 1) * sizeof *pl->needed);
  if (!stack || !pl->needed) {
    free(stack);
    return NB_NOMEM;
  }
  /* nodes are stamped when pushed, so each enters the stack at most once */
  int top = 0;
  for (int i = 0; i < pl->p->nfetch; i++) {
    int64_t key = pl->p->gkeys[pl->p->nfeed + i];
    if (fed_index(pl->p, nbgraph_key_node(key), nbgraph_key_out(key)) < 0)
      push_needed(pl, stack, &top, nbgraph_key_node(key));
  }
  while (top > 0) {
    const nbgraph_node *n = &g->nodes[stack[--top]];
    if (node_known(pl, n)) continue;
    for (int32_t i = 0; i < n->nin; i++) {
      const nbgraph_edge *e = &g->edges[n->in0 + i];
      if (edge_live(pl->p, e)) push_needed(pl, stack, &top, e->src);
    }
    for (int32_t e = n->ctrl; e >= 0; e = g->edges[e].next_ctrl) push_needed(pl, stack, &top, g->edges[e].src);
  }
  free(stack);
  return NB_OK;
}

static nb_code check_placeholders(planner *pl) {
  for (int32_t i = 0; i < pl->nneeded; i++) {
    const nbgraph_node *n = &pl->g->nodes[pl->needed[i]];
    if (strcmp(n->def->name, "Placeholder") != 0) continue;
    const nbop_meta *m = &pl->g->outs[n->out0].meta;
    return session_fail(pl->s, NB_INVALID,
                        "You must feed a value for placeholder tensor '%s' with dtype %s and shape %s", n->name,
                        nb_dtype_name(m->dtype), m->rank < 0 ? "<unknown>" : nbop_sstr(m->rank, m->shape));
  }
  return NB_OK;
}

/* ---- a memory-aware order -------------------------------------------------------------
   Kahn's first-in first-out order runs the steps level by level: a value can outlive its
   use by a whole level of the graph. In a gradient, a weight's gradient (often the largest
   tensor) then waits for the reduction or update that consumes it while the next layer's
   is made, and a checkpointed segment's recomputation interleaves with the previous
   segment's backward pass. So the steps are reordered as a list scheduler does (XLA's
   ListScheduler): among the ready steps, one whose run frees at least the bytes it makes
   (it reads the last use of a value: a reduction, an elementwise op writing over a dying
   input) runs first; the others in the order they became ready. A step that touches
   state keeps its place among such steps as Kahn's order has it. Sizes are static: an
   unknown one counts as nothing. */

static int64_t static_elems(const nbop_meta *m);

typedef struct mem_order {
  const planner *pl;
  int32_t *remaining; /* per graph output: live edges reading it from steps not yet placed */
  int64_t *bytes;     /* per graph output: its static size in bytes (0 when known at build time) */
  uint8_t *state;     /* per node: MO_WAITING, MO_QUEUED, MO_FREEING (queued first), MO_PARKED, MO_PLACED */
  int32_t *bound;     /* per order-keeping step: its rank among them in Kahn's order; else -1 */
  int32_t *bound_ids; /* rank -> node */
  int32_t next_bound;
  int32_t *first, nfirst, hfirst; /* steps that free what they make, in the order found */
  int32_t *rest, nrest, hrest;    /* the other ready steps, in the order they became ready */
} mem_order;

enum { MO_WAITING, MO_QUEUED, MO_FREEING, MO_PARKED, MO_PLACED };

/* Steps whose order among themselves is kept: those touching state (variables, host
   callbacks, function graphs and control flow with their own sessions). */
static bool keeps_order(const nbgraph_node *n) {
  return n->def->stateful || !n->def->kernel || n->def->any_rank || n->def->hold_attrs;
}

static int32_t out_index(const nb_graph *g, const nbgraph_edge *e) { return g->nodes[e->src].out0 + e->out; }

/* Whether running node id now frees at least as many bytes as it makes: the values it
   reads for the last time against its outputs. Its reads are taken off remaining[] for
   the count and put back: a value at 0 then is freed (counted once: marked -1). */
static bool frees_what_it_makes(mem_order *m, int32_t id) {
  const nb_graph *g = m->pl->g;
  const nbgraph_node *n = &g->nodes[id];
  if (node_known(m->pl, n)) return false;
  int64_t freed = 0, made = 0;
  const nbgraph_edge *in = &g->edges[n->in0];
  for (int32_t o = 0; o < n->nout; o++) made += m->bytes[n->out0 + o];
  for (int32_t j = 0; j < n->nin; j++)
    if (edge_live(m->pl->p, &in[j])) m->remaining[out_index(g, &in[j])]--;
  for (int32_t j = 0; j < n->nin; j++) {
    int32_t *left = &m->remaining[out_index(g, &in[j])];
    if (edge_live(m->pl->p, &in[j]) && *left == 0) {
      freed += m->bytes[out_index(g, &in[j])];
      *left = -1;
    }
  }
  for (int32_t j = 0; j < n->nin; j++) {
    int32_t *left = &m->remaining[out_index(g, &in[j])];
    if (!edge_live(m->pl->p, &in[j])) continue;
    if (*left < 0) *left = 0;
    ++*left;
  }
  return freed > 0 && freed >= made;
}

/* Queues node id, which has become ready (or whose turn among order-keeping steps came). */
static void mo_ready(mem_order *m, int32_t id) {
  if (m->bound[id] >= 0 && m->bound[id] != m->next_bound) {
    m->state[id] = MO_PARKED;
  } else if (frees_what_it_makes(m, id)) {
    m->state[id] = MO_FREEING;
    m->first[m->nfirst++] = id;
  } else {
    m->state[id] = MO_QUEUED;
    m->rest[m->nrest++] = id;
  }
}

/* The next step: the first freeing one, else the longest ready; -1 when none is left. */
static int32_t mo_pick(mem_order *m) {
  while (m->hfirst < m->nfirst)
    if (m->state[m->first[m->hfirst++]] == MO_FREEING) return m->first[m->hfirst - 1];
  while (m->hrest < m->nrest)
    if (m->state[m->rest[m->hrest++]] == MO_QUEUED) return m->rest[m->hrest - 1];
  return -1;
}

/* After a read of value v (of node src, output out) was placed: when one or two reads are
   left, a ready reader may now read it for the last time, and free it. */
static void mo_promote_readers(mem_order *m, int32_t src, int32_t out) {
  const nb_graph *g = m->pl->g;
  int32_t left = m->remaining[g->nodes[src].out0 + out];
  if (left < 1 || left > 2) return; /* so each value's readers are scanned at most twice */
  for (int32_t e = g->nodes[src].first_use; e >= 0; e = g->edges[e].next_use) {
    int32_t u = g->edges[e].consumer;
    if (g->edges[e].out == out && m->state[u] == MO_QUEUED && frees_what_it_makes(m, u)) {
      m->state[u] = MO_FREEING;
      m->first[m->nfirst++] = u;
    }
  }
}

/* Places node id: its reads are done, its order-keeping successor may run, its
   consumers' pending counts drop. */
static void mo_place(mem_order *m, int32_t id) {
  const planner *pl = m->pl;
  const nb_graph *g = pl->g;
  const nbgraph_node *n = &g->nodes[id];
  m->state[id] = MO_PLACED;
  for (int32_t j = 0; j < n->nin && !node_known(pl, n); j++)
    if (edge_live(pl->p, &g->edges[n->in0 + j])) m->remaining[out_index(g, &g->edges[n->in0 + j])]--;
  for (int32_t j = 0; j < n->nin && !node_known(pl, n); j++)
    if (edge_live(pl->p, &g->edges[n->in0 + j]))
      mo_promote_readers(m, g->edges[n->in0 + j].src, g->edges[n->in0 + j].out);
  if (m->bound[id] >= 0 && ++m->next_bound < pl->p->nsteps && m->bound_ids[m->next_bound] >= 0 &&
      m->state[m->bound_ids[m->next_bound]] == MO_PARKED)
    mo_ready(m, m->bound_ids[m->next_bound]);
  for (int32_t e = n->first_use; e >= 0; e = g->edges[e].next_use) {
    int32_t u = g->edges[e].consumer;
    nbgraph_node *c = &g->nodes[u];
    if (c->stamp == pl->gen && !node_known(pl, c) && edge_live(pl->p, &g->edges[e]) && --c->pending == 0)
      mo_ready(m, u);
  }
}

/* Use counts and sizes of every value the steps read; pending counts as Kahn's start. */
static void mo_count(mem_order *m) {
  const planner *pl = m->pl;
  nb_graph *g = pl->g;
  int32_t nbound = 0;
  for (int32_t i = 0; i < pl->p->nsteps; i++) {
    int32_t id = pl->p->steps[i];
    nbgraph_node *n = &g->nodes[id];
    bool known = node_known(pl, n);
    m->bound[id] = keeps_order(n) && !known ? nbound : -1;
    if (m->bound[id] >= 0) m->bound_ids[nbound++] = id;
    for (int32_t o = 0; o < n->nout; o++) {
      const nbop_meta *meta = &g->outs[n->out0 + o].meta;
      m->bytes[n->out0 + o] = known ? 0 : static_elems(meta) * (int64_t)nb_dtype_size(meta->dtype);
    }
    n->pending = 0;
    for (int32_t j = 0; j < n->nin && !known; j++) {
      const nbgraph_edge *e = &g->edges[n->in0 + j];
      if (!edge_live(pl->p, e)) continue;
      n->pending++;
      m->remaining[out_index(g, e)]++;
    }
    for (int32_t e = n->ctrl; e >= 0 && !known; e = g->edges[e].next_ctrl) n->pending++;
  }
  for (int32_t r = nbound; r < pl->p->nsteps; r++) m->bound_ids[r] = -1;
  for (int i = 0; i < pl->p->nfetch; i++) { /* a fetched value is never freed: a reader that never comes */
    int64_t key = pl->p->gkeys[pl->p->nfeed + i];
    if (fed_index(pl->p, nbgraph_key_node(key), nbgraph_key_out(key)) < 0)
      m->remaining[g->nodes[nbgraph_key_node(key)].out0 + nbgraph_key_out(key)]++;
  }
}

/* Reorders p->steps (Kahn's order) as described above. */
static nb_code order_for_memory(planner *pl) {
  nbrt_plan *p = pl->p;
  const nb_graph *g = pl->g;
  mem_order m = {.pl = pl};
  m.remaining = calloc((size_t)g->nouts + 1, sizeof *m.remaining);
  m.bytes = malloc(((size_t)g->nouts + 1) * sizeof *m.bytes);
  m.state = calloc((size_t)g->nnodes + 1, sizeof *m.state);
  m.bound = malloc(((size_t)g->nnodes + 1) * sizeof *m.bound);
  m.bound_ids = malloc(((size_t)p->nsteps + 1) * sizeof *m.bound_ids);
  m.first = malloc(((size_t)p->nsteps + 1) * sizeof *m.first);
  m.rest = malloc(((size_t)p->nsteps + 1) * sizeof *m.rest);
  int32_t *order = malloc(((size_t)p->nsteps + 1) * sizeof *order), placed = 0;
  nb_code code = NB_NOMEM;
  if (m.remaining && m.bytes && m.state && m.bound && m.bound_ids && m.first && m.rest && order) {
    mo_count(&m);
    for (int32_t i = 0; i < p->nsteps; i++)
      if (pl->g->nodes[p->steps[i]].pending == 0) mo_ready(&m, p->steps[i]);
    for (int32_t id; (id = mo_pick(&m)) >= 0;) {
      order[placed++] = id;
      mo_place(&m, id);
    }
    code = placed == p->nsteps ? NB_OK : NB_INTERNAL;
    if (!code) memcpy(p->steps, order, (size_t)p->nsteps * sizeof *order);
  }
  free(m.remaining);
  free(m.bytes);
  free(m.state);
  free(m.bound);
  free(m.bound_ids);
  free(m.first);
  free(m.rest);
  free(order);
  return code;
}

/* Kahn's algorithm over the needed nodes (node->pending counts live data and control
   input edges), then reordered for memory. */
static nb_code order_steps(planner *pl) {
  nb_graph *g = pl->g;
  nbrt_plan *p = pl->p;
  p->steps = malloc((size_t)(pl->nneeded + 1) * sizeof *p->steps);
  if (!p->steps) return NB_NOMEM;
  int32_t head = 0;
  for (int32_t i = 0; i < pl->nneeded; i++) {
    nbgraph_node *n = &g->nodes[pl->needed[i]];
    n->pending = 0;
    if (!node_known(pl, n)) {
      for (int32_t j = 0; j < n->nin; j++) n->pending += edge_live(p, &g->edges[n->in0 + j]);
      for (int32_t e = n->ctrl; e >= 0; e = g->edges[e].next_ctrl) n->pending++;
    }
    if (n->pending == 0) p->steps[p->nsteps++] = pl->needed[i];
  }
  while (head < p->nsteps) {
    const nbgraph_node *n = &g->nodes[p->steps[head++]];
    for (int32_t e = n->first_use; e >= 0; e = g->edges[e].next_use) {
      nbgraph_node *u = &g->nodes[g->edges[e].consumer];
      if (u->stamp == pl->gen && !node_known(pl, u) && edge_live(p, &g->edges[e]) && --u->pending == 0)
        p->steps[p->nsteps++] = g->edges[e].consumer;
    }
  }
  if (p->nsteps == pl->nneeded) return order_for_memory(pl);
  for (int32_t i = 0; i < pl->nneeded; i++) {
    const nbgraph_node *n = &g->nodes[pl->needed[i]];
    if (n->pending > 0)
      return session_fail(pl->s, NB_INVALID, "Graph has a cycle through node '%s' (op %s)", n->name, n->def->name);
  }
  return NB_INTERNAL;
}

/* ---- pairs of steps run at once ----------------------------------------------------- */

/* Work is counted in multiply-adds: a product's m·n·k, and NBRT_ELEM_WORK per element any
   other step reads or writes (a GEMM's inner loop does up to 16 multiply-adds a cycle, two
   8-wide FMAs; a loop over memory reads or writes about 4 elements a cycle). */
#define NBRT_ELEM_WORK 4.0
#define NBRT_PAIR_MIN_WORK (NBRT_ELEM_WORK * (1 << 14)) /* work worth a thread of its own */
#define NBRT_PAIR_LOOKAHEAD 16                          /* steps searched for a partner */
/* A pair takes as long as its larger step on half the threads, 2·max/T with perfect
   scaling inside each half; run one after the other on all T threads they take
   (a + b)/(T·e), e the efficiency of one step on all of them. The pair wins when
   min/max > 2e - 1: an RNN step's 32x256x256 product has e = 38 / (2 · 25) = 0.76 on two
   threads (src/ops/linalg.c), so a partner needs more than half the larger step's work. */
#define NBRT_PAIR_BALANCE 0.5

static int64_t static_elems(const nbop_meta *m) {
  return nbcore_dims_known(m->rank, m->shape) ? nbcore_shape_size(m->rank, m->shape) : 0;
}

static const nbop_meta *input_meta(const nb_graph *g, const nbgraph_node *n, int32_t i) {
  const nbgraph_edge *e = &g->edges[n->in0 + i];
  return &g->outs[g->nodes[e->src].out0 + e->out].meta;
}

/* A matrix product's multiply-adds: its output's elements times the inner dim, which is
   input 0's last two dims (m·k, either way round) over the output's rows m. */
static double product_work(const nb_graph *g, const nbgraph_node *n) {
  const nbop_meta *x = input_meta(g, n, 0), *out = &g->outs[n->out0].meta;
  int64_t elems = static_elems(out); /* 0 also when a dim is 0: then no division by it */
  if (!elems || x->rank < 2 || out->rank < 2 || !static_elems(x)) return 0;
  return (double)elems * (double)(x->shape[x->rank - 2] * x->shape[x->rank - 1] / out->shape[out->rank - 2]);
}

static bool is_product(const nbop_def *def) {
  return !strcmp(def->name, "MatMul") || !strcmp(def->name, "BatchMatMulV2") || !strcmp(def->name, "_MatMulAdd");
}

/* The work of step n (0 when a shape is unknown until run time). Another op reads at most
   as many elements of an input as it writes in all: a gather or a slice reads part of its
   input; a reduction, which reads more, is undercounted, which only keeps it from a pair. */
static double step_work(const nb_graph *g, const nbgraph_node *n) {
  if (is_product(n->def)) return product_work(g, n);
  int64_t written = 0, read = 0;
  for (int32_t o = 0; o < n->nout; o++) written += static_elems(&g->outs[n->out0 + o].meta);
  for (int32_t i = 0; i < n->nin; i++) {
    int64_t elems = static_elems(input_meta(g, n, i));
    read += elems < written ? elems : written;
  }
  return NBRT_ELEM_WORK * (double)(written + read);
}

/* The work of a step that may run beside another, else 0: it computes at run time, touches
   no state (variables, host callbacks, function graphs: their order and their own sessions
   stay as planned), and has enough work to be worth a thread. */
static double pairable_work(const planner *pl, int32_t id) {
  const nbgraph_node *n = &pl->g->nodes[id];
  const nbop_def *def = n->def;
  if (node_known(pl, n) || def->stateful || !def->kernel || def->any_rank || def->hold_attrs || def->alias >= 0)
    return 0;
  double work = step_work(pl->g, n);
  return work >= NBRT_PAIR_MIN_WORK ? work : 0;
}

/* Whether step j reads nothing made at or after position i (pos: node -> position). */
static bool ready_at(const planner *pl, const int32_t *pos, int32_t j, int32_t i) {
  const nb_graph *g = pl->g;
  const nbgraph_node *n = &g->nodes[pl->p->steps[j]];
  for (int32_t k = 0; k < n->nin; k++) {
    const nbgraph_edge *e = &g->edges[n->in0 + k];
    if (edge_live(pl->p, e) && g->nodes[e->src].stamp == pl->gen && pos[e->src] >= i) return false;
  }
  for (int32_t e = n->ctrl; e >= 0; e = g->edges[e].next_ctrl)
    if (pos[g->edges[e].src] >= i) return false;
  return true;
}

/* Moves step j to position i + 1 (the steps between depend not on it: they came first). */
static void move_step(nbrt_plan *p, int32_t *pos, int32_t j, int32_t i) {
  int32_t id = p->steps[j];
  for (int32_t k = j; k > i + 1; k--) {
    p->steps[k] = p->steps[k - 1];
    pos[p->steps[k]] = k;
  }
  p->steps[i + 1] = id;
  pos[id] = i + 1;
}

/* min/max of two works: 1 when equal. */
static double balance(double a, double b) { return a < b ? a / b : b / a; }

/* The step after i within the lookahead that may run beside step i (work wi) and is the
   best balanced with it, needing nothing from it or the steps between; -1 when none is
   balanced enough for the pair to beat running them one after the other. */
static int32_t best_partner(const planner *pl, const int32_t *pos, int32_t i, double wi) {
  const nbrt_plan *p = pl->p;
  int32_t best = -1;
  double best_balance = NBRT_PAIR_BALANCE;
  for (int32_t j = i + 1; j < p->nsteps && j <= i + NBRT_PAIR_LOOKAHEAD; j++) {
    double wj = pairable_work(pl, p->steps[j]);
    if (wj > 0 && balance(wi, wj) > best_balance && ready_at(pl, pos, j, i)) {
      best = j;
      best_balance = balance(wi, wj);
    }
  }
  return best;
}

/* Whether s's runs may place steps in pairs: only with several threads, so a one-thread
   run keeps order_steps' memory order. */
static bool runs_pairs(const nb_session *s) { return s->ctx->threads > 1; }

/* Each pairable step takes its best partner, moved next to it. Only stateless steps move,
   so stateful ones keep their order. */
static nb_code pair_steps(planner *pl) {
  nbrt_plan *p = pl->p;
  int32_t *pos = malloc((size_t)pl->g->nnodes * sizeof *pos);
  p->paired = calloc((size_t)p->nsteps + 1, sizeof *p->paired);
  if (!pos || !p->paired) {
    free(pos);
    return NB_NOMEM;
  }
  for (int32_t i = 0; i < p->nsteps; i++) pos[p->steps[i]] = i;
  for (int32_t i = 0; p->pairs && i + 1 < p->nsteps; i++) {
    double work = pairable_work(pl, p->steps[i]);
    int32_t j = work > 0 ? best_partner(pl, pos, i, work) : -1;
    if (j < 0) continue;
    move_step(p, pos, j, i);
    p->paired[i++] = true;
  }
  free(pos);
  return NB_OK;
}

/* Value indices: feeds first, then each step's outputs; inputs resolved per step. */
static nb_code assign_values(planner *pl) {
  nb_graph *g = pl->g;
  nbrt_plan *p = pl->p;
  int32_t nin = 0, v = p->nfeed;
  p->out0 = malloc((size_t)(p->nsteps + 1) * sizeof *p->out0);
  p->in_off = malloc((size_t)(p->nsteps + 1) * sizeof *p->in_off);
  p->feed_vals = malloc((size_t)(p->nfeed + 1) * sizeof *p->feed_vals);
  p->fetch_vals = malloc((size_t)(p->nfetch + 1) * sizeof *p->fetch_vals);
  p->from_value = malloc((size_t)(p->nsteps + 1) * sizeof *p->from_value);
  if (!p->out0 || !p->in_off || !p->feed_vals || !p->fetch_vals || !p->from_value) return NB_NOMEM;
  for (int i = 0; i < p->nfeed; i++) p->feed_vals[i] = i;
  for (int32_t i = 0; i < p->nsteps; i++) {
    nbgraph_node *n = &g->nodes[p->steps[i]];
    n->slot = v;
    p->out0[i] = v;
    v += n->nout;
    p->from_value[i] = node_known(pl, n);
    nin += p->from_value[i] ? 0 : n->nin;
  }
  p->nvals = v;
  p->in_vals = malloc((size_t)(nin + 1) * sizeof *p->in_vals);
  if (!p->in_vals) return NB_NOMEM;
  nin = 0;
  for (int32_t i = 0; i < p->nsteps; i++) {
    const nbgraph_node *n = &g->nodes[p->steps[i]];
    p->in_off[i] = nin;
    for (int32_t j = 0; j < n->nin && !p->from_value[i]; j++) {
      const nbgraph_edge *e = &g->edges[n->in0 + j];
      int f = fed_index(p, e->src, e->out);
      p->in_vals[nin++] = f >= 0 ? f : g->nodes[e->src].slot + e->out;
    }
  }
  p->in_off[p->nsteps] = nin;
  for (int i = 0; i < p->nfetch; i++) {
    int64_t key = p->gkeys[p->nfeed + i];
    int f = fed_index(p, nbgraph_key_node(key), nbgraph_key_out(key));
    p->fetch_vals[i] = f >= 0 ? f : g->nodes[nbgraph_key_node(key)].slot + nbgraph_key_out(key);
  }
  return NB_OK;
}

/* Each value is freed after the last step that reads it; fetched values never are. */
static nb_code plan_frees(nbrt_plan *p) {
  int32_t *last = malloc((size_t)(p->nvals + 1) * sizeof *last);
  p->free_off = calloc((size_t)p->nsteps + 2, sizeof *p->free_off);
  p->free_vals = malloc((size_t)(p->nvals + 1) * sizeof *p->free_vals);
  if (!last || !p->free_off || !p->free_vals) {
    free(last);
    return NB_NOMEM;
  }
  for (int32_t v = 0; v < p->nvals; v++) last[v] = -1;
  for (int32_t i = 0; i < p->nsteps; i++) {
    if (p->in_off[i + 1] - p->in_off[i] > p->max_in) p->max_in = p->in_off[i + 1] - p->in_off[i];
    for (int32_t j = p->in_off[i]; j < p->in_off[i + 1]; j++) last[p->in_vals[j]] = i;
    for (int32_t v = p->out0[i]; v < (i + 1 < p->nsteps ? p->out0[i + 1] : p->nvals); v++)
      if (last[v] < i) last[v] = i; /* unused outputs go right away */
  }
  for (int i = 0; i < p->nfetch; i++) last[p->fetch_vals[i]] = -2;
  for (int32_t v = 0; v < p->nvals; v++)
    if (last[v] >= 0) p->free_off[last[v] + 1]++;
  for (int32_t i = 0; i < p->nsteps; i++) p->free_off[i + 1] += p->free_off[i];
  int32_t *fill = calloc((size_t)p->nsteps + 1, sizeof *fill);
  if (!fill) {
    free(last);
    return NB_NOMEM;
  }
  for (int32_t v = 0; v < p->nvals; v++)
    if (last[v] >= 0) p->free_vals[p->free_off[last[v]] + fill[last[v]]++] = v;
  free(fill);
  p->dying = calloc((size_t)p->nsteps + 1, sizeof *p->dying);
  for (int32_t i = 0; p->dying && i < p->nsteps; i++) /* inputs read for the last time: forwardable */
    for (int32_t j = p->in_off[i]; j < p->in_off[i + 1] && j - p->in_off[i] < 32; j++)
      if (last[p->in_vals[j]] == i) p->dying[i] |= 1u << (j - p->in_off[i]);
  free(last);
  return p->dying ? NB_OK : NB_NOMEM;
}

static nb_code build_plan(nb_session *s, nbrt_plan *p) {
  planner pl = {s, p->g, p, nbgraph_next_gen(p->g), NULL, 0};
  p->pairs = runs_pairs(s);
  nb_code code = mark_stale(&pl);
  if (!code) code = collect_needed(&pl);
  if (!code) code = check_placeholders(&pl);
  if (!code) code = order_steps(&pl);
  if (!code) code = pair_steps(&pl);
  if (!code) code = assign_values(&pl);
  if (!code) code = plan_frees(p);
  free(pl.needed);
  if (code == NB_NOMEM) session_fail(s, code, "out of memory planning the run");
  return code;
}

/* The graph p runs: s's optimized for p's feeds and fetches when s has passes, else s's own
   (also when the passes leave it as it is, or cannot rewrite it: then it runs as built). */
static nb_code optimize(nb_session *s, nbrt_plan *p) {
  p->g = s->g;
  p->gkeys = p->keys;
  if (!s->optimize) return NB_OK;
  int64_t *gkeys = malloc((size_t)(p->nfeed + p->nfetch + 1) * sizeof *gkeys);
  if (!gkeys) return session_fail(s, NB_NOMEM, "out of memory optimizing the graph");
  nb_graph *og = NULL;
  nb_code code = s->optimize(s->g, p->keys, p->nfeed, p->nfetch, &s->opts, &og, gkeys);
  if (code == NB_NOMEM) {
    free(gkeys);
    return session_fail(s, code, "out of memory optimizing the graph");
  }
  if (!og) {
    free(gkeys);
    return NB_OK;
  }
  p->g = og;
  p->gkeys = gkeys;
  return NB_OK;
}

static nbrt_plan *find_plan(nb_session *s, const int64_t *keys, int nfeed, int nfetch, uint64_t h) {
  for (int i = 0; i < s->nplans; i++) {
    nbrt_plan *p = s->plans[i];
    if (p->hash == h && p->nfeed == nfeed && p->nfetch == nfetch && p->pairs == runs_pairs(s) &&
        memcmp(p->keys, keys, (size_t)(nfeed + nfetch) * sizeof *keys) == 0)
      return p;
  }
  return NULL;
}

/* Plans made before a control edge was added may miss it: drop them all. */
static void drop_stale_plans(nb_session *s) {
  if (s->nplans == 0 || s->plans[0]->version == s->g->version) return;
  for (int i = 0; i < s->nplans; i++) plan_free(s->plans[i]);
  s->nplans = 0;
}

static nb_code get_plan(nb_session *s, int64_t *keys, int nfeed, int nfetch, nbrt_plan **out) {
  uint64_t h = keys_hash(keys, nfeed + nfetch);
  drop_stale_plans(s);
  if ((*out = find_plan(s, keys, nfeed, nfetch, h))) {
    free(keys);
    return NB_OK;
  }
  nbrt_plan *p = calloc(1, sizeof *p);
  nbrt_plan **plans = realloc(s->plans, (size_t)(s->nplans + 1) * sizeof *plans);
  if (plans) s->plans = plans;
  if (!p || !plans) {
    free(p);
    free(keys);
    return session_fail(s, NB_NOMEM, "out of memory planning the run");
  }
  *p = (nbrt_plan){.hash = h, .version = s->g->version, .nfeed = nfeed, .nfetch = nfetch, .keys = keys};
  nb_code code = optimize(s, p);
  if (!code) code = build_plan(s, p);
  if (code) {
    plan_free(p);
    return code;
  }
  s->plans[s->nplans++] = *out = p;
  return NB_OK;
}

/* ---- running ------------------------------------------------------------------------- */

/* Feeds and fetches are tensors of s's graph. */
static nb_code check_tensors(nb_session *s, nb_tensor *const *feed, int nfeed, nb_tensor *const *fetch, int nfetch) {
  if (nfeed < 0 || nfetch < 0 || (nfeed && !feed) || (nfetch && !fetch))
    return session_fail(s, NB_INVALID, "nb_run: NULL arrays or negative counts");
  for (int i = 0; i < nfetch; i++)
    if (!fetch[i] || fetch[i]->graph != s->g)
      return session_fail(s, NB_INVALID, "nb_run: fetch %d is not a tensor of this session's graph", i);
  for (int i = 0; i < nfeed; i++)
    if (!feed[i] || feed[i]->graph != s->g)
      return session_fail(s, NB_INVALID, "nb_run: feed %d is not a tensor of this session's graph", i);
  return NB_OK;
}

static nb_code check_args(nb_session *s, nb_tensor *const *feed, nb_tensor *const *feed_values, int nfeed,
                          nb_tensor *const *fetch, int nfetch, nb_tensor **results) {
  if ((nfeed > 0 && !feed_values) || (nfetch > 0 && !results))
    return session_fail(s, NB_INVALID, "nb_run: NULL arrays or negative counts");
  nb_code code = check_tensors(s, feed, nfeed, fetch, nfetch);
  for (int i = 0; i < nfeed && !code; i++)
    if (!feed_values[i] || !feed_values[i]->buf)
      return session_fail(s, NB_INVALID, "nb_run: the value for feed %d ('%s') must be a concrete tensor", i,
                          nb_tensor_node_name(feed[i]));
  return code;
}

/* A fed value must match the tensor's static dtype and (where known) shape. */
static nb_code check_feed(nb_session *s, const nb_tensor *t, const nb_tensor *v) {
  const nbop_meta *m = &s->g->outs[s->g->nodes[t->node].out0 + t->out].meta;
  const char *name = s->g->nodes[t->node].name;
  if (v->dtype != m->dtype)
    return session_fail(s, NB_DTYPE, "Cannot feed value of dtype %s for Tensor '%s:%d', which has dtype %s",
                        nb_dtype_name(v->dtype), name, t->out, nb_dtype_name(m->dtype));
  bool ok = m->rank < 0 || m->rank == v->rank;
  for (int i = 0; ok && m->rank >= 0 && i < m->rank; i++) ok = m->shape[i] < 0 || m->shape[i] == v->shape[i];
  if (!ok)
    return session_fail(s, NB_SHAPE, "Cannot feed value of shape %s for Tensor '%s:%d', which has shape %s",
                        nbop_tstr(v), name, t->out, m->rank < 0 ? "<unknown>" : nbop_sstr(m->rank, m->shape));
  return NB_OK;
}

/* A handle of c sharing concrete value v's block: nb_identity's result without an op's
   dispatch (a function's run takes each argument this way, every loop iteration). */
static nb_tensor *share_value(nb_ctx *c, nb_tensor *v) {
  if (!v->buf) return nb_identity(c, v); /* IndexedSlices: the op builds its parts */
  nbcore_buffer_retain(v->buf);
  return nbcore_handle_new(c, v->dtype, v->rank, v->shape, v->buf);
}

/* Into placed[0..nout): the blocks nbrt_session_place_fetches gave for the fetches
   step i makes (outputs past NBRT_PLACED_OUTS are not placed); the count to pass on,
   0 when none. */
#define NBRT_PLACED_OUTS 8
static int step_placement(const nb_session *s, const nbrt_plan *p, int32_t i, int32_t nout, nbcore_buffer **placed) {
  int n = 0;
  for (int f = 0; f < s->nplace && f < p->nfetch; f++) {
    int32_t o = p->fetch_vals[f] - p->out0[i];
    if (!s->place[f] || o < 0 || o >= nout || o >= NBRT_PLACED_OUTS) continue;
    for (; n <= o; n++) placed[n] = NULL;
    if (!placed[o]) placed[o] = s->place[f];
  }
  return n;
}

/* Step i on context c; forwardable: the dying inputs it may write over. */
static nb_code run_step(nb_session *s, nb_ctx *c, const nbrt_plan *p, int32_t i, nb_tensor **ins,
                        uint32_t forwardable) {
  const nbgraph_node *n = &p->g->nodes[p->steps[i]];
  nb_tensor **outs = s->vals + p->out0[i];
  const nbgraph_out *o = &p->g->outs[n->out0];
  if (p->from_value[i]) { /* known at build time */
    for (int32_t j = 0; j < n->nout; j++) outs[j] = share_value(c, (nb_tensor *)o[j].value);
    return nb_status(c);
  }
  for (int32_t j = p->in_off[i]; j < p->in_off[i + 1]; j++) ins[j - p->in_off[i]] = s->vals[p->in_vals[j]];
  nbcore_buffer *placed[NBRT_PLACED_OUTS];
  c->run_node = n->name;
  c->forwardable = forwardable;
  c->nplaced = s->nplace ? step_placement(s, p, i, n->nout, placed) : 0;
  c->placed = c->nplaced ? placed : NULL;
  nb_code code = nbop_dispatch(c, n->def, ins, n->nin, n->attr, outs, n->nout);
  c->forwardable = 0;
  c->placed = NULL;
  c->nplaced = 0;
  c->run_node = NULL;
  return code;
}

/* The dying inputs of step i that step `other`, running at the same time, does not read:
   those step i may write over (a value both read dies at the later of the two). */
static uint32_t forwardable_beside(const nbrt_plan *p, int32_t i, int32_t other) {
  uint32_t bits = p->dying[i];
  for (int32_t j = p->in_off[i]; j < p->in_off[i + 1] && j - p->in_off[i] < 32; j++)
    for (int32_t k = p->in_off[other]; k < p->in_off[other + 1]; k++)
      if (p->in_vals[j] == p->in_vals[k]) bits &= ~(1u << (j - p->in_off[i]));
  return bits;
}

/* Steps i and i + 1 at once, on s's context and its worker, half the threads each, both
   taking blocks from the context's pool under a lock (blocks one makes and the other frees
   stay in one pool: no step after the first allocates). Each may write over a dying input
   the other does not read (a running sum's accumulator); nothing is freed until both are
   done. A failure of the worker's step becomes s's context's error. */
static nb_code run_pair(nb_session *s, const nbrt_plan *p, int32_t i, nb_tensor **ins, nb_tensor **ins2) {
  nb_ctx *c[2] = {s->ctx, s->worker};
  nbcore_pool *pool = nbcore_block_pool(s->ctx);
  pthread_mutex_t *outer = pool->lock; /* a pair of a run enclosing this one: its lock serves */
  int threads = s->ctx->threads;
  uint32_t forwardable[2] = {forwardable_beside(p, i, i + 1), forwardable_beside(p, i + 1, i)};
  nb_code code[2];
  c[1]->threads = threads / 2;
  c[0]->threads = threads - threads / 2;
  if (!outer) pool->lock = &s->pair_lock;
#pragma omp parallel for num_threads(2) schedule(static, 1)
  for (int k = 0; k < 2; k++) code[k] = run_step(s, c[k], p, i + k, k ? ins2 : ins, forwardable[k]);
  pool->lock = outer;
  c[0]->threads = threads;
  if (code[1] && !code[0]) code[0] = nbcore_fail(c[0], code[1], "%s", nb_error(c[1]));
  nb_clear_error(c[1]);
  return code[0];
}

static void free_after(nb_session *s, const nbrt_plan *p, int32_t i) {
  for (int32_t j = p->free_off[i]; j < p->free_off[i + 1]; j++) {
    nb_tensor_free(s->vals[p->free_vals[j]]);
    s->vals[p->free_vals[j]] = NULL;
  }
}

/* ---- reduces across processes overlapped with the steps after them ----------------------
   A CollectiveReduceV2 or NcclAllReduce step on MPI only starts its reduce (non-blocking):
   the steps after it compute while the data moves (data-parallel gradients: the backward
   pass goes on while a bucket is summed), each step boundary lets MPI progress, and the
   first step that reads the result, or the end of the run, waits for it. */

/* Before step i and the n - 1 after it (a pair): the started reduces they read finished,
   the others moved along. */
static nb_code await_reads(nb_session *s, const nbrt_plan *p, int32_t i, int32_t n) {
  if (!nbop_collective_started()) return NB_OK;
  char err[NBCORE_ERR_CAP];
  for (int32_t j = p->in_off[i]; j < p->in_off[i + n]; j++) {
    nb_code code = nbop_collective_await(nbcore_tdata(s->vals[p->in_vals[j]]), err, sizeof err);
    if (code) return nbcore_fail(s->ctx, code, "%s", err);
  }
  nbop_collective_progress();
  return NB_OK;
}

/* Step i alone; a reduce across processes starts deferred, unless nothing reads its
   result (freed right after the step: it must be complete by then). */
static nb_code run_single(nb_session *s, const nbrt_plan *p, int32_t i, nb_tensor **ins) {
  nbop_collective_defer(nbop_collective_deferrable(p->g->nodes[p->steps[i]].def));
  nb_code code = run_step(s, s->ctx, p, i, ins, p->dying[i]);
  nbop_collective_defer(false);
  for (int32_t j = p->free_off[i]; j < p->free_off[i + 1] && !code && nbop_collective_started(); j++) {
    char err[NBCORE_ERR_CAP];
    nb_code awaited = nbop_collective_await(nbcore_tdata(s->vals[p->free_vals[j]]), err, sizeof err);
    if (awaited) code = nbcore_fail(s->ctx, awaited, "%s", err);
  }
  return code;
}

/* The end of a run (failed or not): no reduce may still write into its values. */
static nb_code await_all_reduces(nb_session *s, nb_code code) {
  char err[NBCORE_ERR_CAP];
  nb_code awaited = nbop_collective_started() ? nbop_collective_await_all(err, sizeof err) : NB_OK;
  if (awaited && !code) code = nbcore_fail(s->ctx, awaited, "%s", err);
  return code;
}

static nb_code execute(nb_session *s, const nbrt_plan *p, nb_tensor *const *feed_values, nb_tensor **results) {
  nb_tensor *ins_small[2][64], **ins = ins_small[0], **ins2 = ins_small[1];
  if (p->max_in > 64 && !(ins = malloc((size_t)p->max_in * 2 * sizeof *ins))) return NB_NOMEM;
  if (p->max_in > 64) ins2 = ins + p->max_in;
  for (int i = 0; i < p->nfeed; i++) s->vals[i] = share_value(s->ctx, feed_values[i]);
  drop_taken(s, feed_values, p->nfeed); /* now the run's references may be the only ones */
  nb_code code = nb_status(s->ctx);
  bool pairs = s->ctx->threads > 1 && s->worker;
  for (int32_t i = 0; i < p->nsteps && !code; i++) {
    bool pair = pairs && p->paired[i];
    if ((code = await_reads(s, p, i, pair ? 2 : 1))) break;
    if (pair) {
      code = run_pair(s, p, i, ins, ins2);
      s->stats.concurrent_steps_last_run += 2;
      free_after(s, p, i++);
    } else {
      code = run_single(s, p, i, ins);
    }
    free_after(s, p, i);
  }
  code = await_all_reduces(s, code);
  for (int i = 0; i < p->nfetch && !code; i++)
    if (!(results[i] = nbgraph_detached_share(s->vals[p->fetch_vals[i]]))) code = NB_NOMEM;
  if (ins != ins_small[0]) free(ins);
  return code;
}

/* The plan for these feeds and fetches (tensors of s's graph, checked), made if needed. */
static nb_code plan_for(nb_session *s, nb_tensor *const *feed, int nfeed, nb_tensor *const *fetch, int nfetch,
                        nbrt_plan **p) {
  int64_t *keys = malloc((size_t)(nfeed + nfetch + 1) * sizeof *keys);
  if (!keys) return session_fail(s, NB_NOMEM, "out of memory");
  for (int i = 0; i < nfeed; i++) keys[i] = nbgraph_key_of(feed[i]);
  for (int i = 0; i < nfetch; i++) keys[nfeed + i] = nbgraph_key_of(fetch[i]);
  return get_plan(s, keys, nfeed, nfetch, p);
}

nb_code nb_session_planned_graph(nb_session *s, nb_tensor *const *feed, int nfeed, nb_tensor *const *fetch, int nfetch,
                                 const nb_graph **out) {
  if (!s || !out) return NB_INVALID;
  *out = NULL;
  s->error[0] = '\0';
  nbrt_plan *p;
  nb_code code = check_tensors(s, feed, nfeed, fetch, nfetch);
  if (!code) code = plan_for(s, feed, nfeed, fetch, nfetch, &p);
  if (!code) *out = p->g;
  return code;
}

static nb_code run_dense(nb_session *s, nb_tensor *const *feed, nb_tensor *const *feed_values, int nfeed,
                         nb_tensor *const *fetch, int nfetch, nb_tensor **results) {
  nb_code code = check_args(s, feed, feed_values, nfeed, fetch, nfetch, results);
  for (int i = 0; i < nfeed && !code; i++) code = check_feed(s, feed[i], feed_values[i]);
  if (code) return code;
  nbrt_plan *p;
  if ((code = plan_for(s, feed, nfeed, fetch, nfetch, &p))) return code;
  if (p->nvals > s->vals_cap) {
    nb_tensor **v = realloc(s->vals, (size_t)p->nvals * sizeof *v);
    if (!v) return session_fail(s, NB_NOMEM, "out of memory");
    s->vals = v;
    s->vals_cap = p->nvals;
  }
  if (!s->worker && s->ctx->threads > 1 && !(s->worker = nb_eager_new()))
    return session_fail(s, NB_NOMEM, "out of memory");
  nb_scope_begin(s->ctx);
  if (s->worker) { /* the worker's blocks are the context's, for this run */
    s->worker->blocks_from = s->ctx->blocks_from ? s->ctx->blocks_from : s->ctx;
    nb_scope_begin(s->worker);
  }
  nbcore_pool *pool = nbcore_block_pool(s->ctx);
  int64_t mallocs = pool->mallocs, held = pool->held, peak = pool->peak;
  pool->peak = held; /* this run's peak; a function body's run inside it does the same */
  s->stats.concurrent_steps_last_run = 0;
  code = execute(s, p, feed_values, results);
  s->stats.runs++;
  s->stats.steps_last_run = p->nsteps;
  s->stats.allocs_last_run = pool->mallocs - mallocs;
  s->stats.allocs_total += s->stats.allocs_last_run;
  s->stats.peak_bytes_last_run = pool->peak - held;
  if (peak > pool->peak) pool->peak = peak; /* the enclosing run's peak so far */
  if (code) {
    session_fail(s, code, "%s", nb_status(s->ctx) ? nb_error(s->ctx) : "out of memory");
    for (int i = 0; i < nfetch; i++) {
      nb_tensor_free(results[i]);
      results[i] = NULL;
    }
  }
  nb_clear_error(s->ctx);
  if (s->worker) {
    nb_scope_end(s->worker, NULL, 0);
    s->worker->blocks_from = NULL;
  }
  nb_scope_end(s->ctx, NULL, 0);
  return code;
}

/* Fetches of IndexedSlices run as fetches of their two parts; each result is then slices
   of the fetched parts (TF's IndexedSlicesValue). */
static nb_code run_with_slices(nb_session *s, nb_tensor *const *feed, nb_tensor *const *feed_values, int nfeed,
                               nb_tensor *const *fetch, int nfetch, nb_tensor **results) {
  int nparts = 0;
  for (int i = 0; i < nfetch; i++) nparts += 1 + nb_is_indexed_slices(fetch[i]);
  nb_tensor **parts = malloc((size_t)nparts * 2 * sizeof *parts), **vals = parts + nparts;
  if (!parts) return session_fail(s, NB_NOMEM, "out of memory");
  for (int i = 0, k = 0; i < nfetch; i++) {
    bool sparse = nb_is_indexed_slices(fetch[i]);
    parts[k++] = sparse ? nb_indexed_slices_values(fetch[i]) : fetch[i];
    if (sparse) parts[k++] = nb_indexed_slices_indices(fetch[i]);
  }
  for (int i = 0; i < nparts; i++) vals[i] = NULL;
  nbrt_session_place_fetches(s, NULL, 0); /* its blocks follow the fetches, which parts renumbers */
  nb_code code = run_dense(s, feed, feed_values, nfeed, parts, nparts, vals);
  int k = 0; /* vals[k..) not yet taken by a result */
  for (int i = 0; i < nfetch && !code; i++) {
    bool sparse = nb_is_indexed_slices(fetch[i]);
    results[i] = sparse ? nbcore_detached_slices(fetch[i], vals[k], vals[k + 1]) : vals[k];
    k += 1 + sparse;
    if (!results[i]) code = session_fail(s, NB_NOMEM, "out of memory");
  }
  for (int i = 0; code && i < nfetch; i++) nb_tensor_free(results[i]), results[i] = NULL;
  for (int i = k; code && i < nparts; i++) nb_tensor_free(vals[i]);
  free(parts);
  return code;
}

nb_code nb_run(nb_session *s, nb_tensor *const *feed, nb_tensor *const *feed_values, int nfeed, nb_tensor *const *fetch,
               int nfetch, nb_tensor **results) {
  if (!s) return NB_INVALID;
  s->error[0] = '\0';
  for (int i = 0; results && i < nfetch; i++) results[i] = NULL;
  nb_code code = NB_OK;
  bool sliced = false;
  for (int i = 0; fetch && results && i < nfetch && !sliced; i++) sliced = nb_is_indexed_slices(fetch[i]);
  code = sliced ? run_with_slices(s, feed, feed_values, nfeed, fetch, nfetch, results)
                : run_dense(s, feed, feed_values, nfeed, fetch, nfetch, results);
  drop_taken(s, feed_values, nfeed); /* those a failed check left */
  nbrt_session_place_fetches(s, NULL, 0);
  return code;
}
