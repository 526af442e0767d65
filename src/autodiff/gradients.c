/* The symbolic gradient pass (tf.gradients). It visits only the nodes between xs and ys,
   marked with generation stamps so nothing is cleared or allocated per graph node; keeps
   pending counts and a ready queue in reverse topological order; and stores incoming
   gradients as (node, output) keys, so handles exist only while one node's gradient
   function runs and memory follows the frontier, not the graph. */
#include "autodiff.h"

#include "../grad/grad.h" /* NBG_ALL: what a rule reads */

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct grad_entry {
  int64_t key;         /* node << 32 | output of the gradient tensor (IndexedSlices: of its values) */
  int64_t indices_key; /* IndexedSlices: the key of its indices; -1 when dense */
  int32_t next;
} grad_entry;

typedef struct pass {
  nb_ctx *c;
  nb_graph *g;
  const nb_grad_opts *o;
  uint32_t gen;
  int32_t *between, nbetween; /* node ids; node->slot indexes heads via out_base */
  int32_t *out_base;
  int32_t *heads; /* per (between node, output): first grad_entry, -1 */
  grad_entry *entries;
  int32_t nentries, entries_cap;
  int32_t *queue;
  int32_t qhead, qtail;
  bool *needs; /* per input of the node being differentiated */
  /* checkpointing: per between slot, whether its outputs are recomputed for the gradient,
     and the node recomputing them (-1 until built) */
  bool *recompute;
  int32_t *clone;
  char scope[NBGRAPH_SCOPE_CAP]; /* "gradients/" (made unique) */
} pass;

static nb_tensor *handle_of(pass *p, int64_t key) {
  return nbgraph_handle(p->c, p->g, nbgraph_key_node(key), nbgraph_key_out(key));
}

static grad_entry entry_of(const nb_tensor *dx, int32_t next) {
  if (!nb_is_indexed_slices(dx)) return (grad_entry){nbgraph_key_of(dx), -1, next};
  return (grad_entry){nbgraph_key_of(nb_indexed_slices_values(dx)), nbgraph_key_of(nb_indexed_slices_indices(dx)),
                      next};
}

/* The gradient e lists for a tensor of static facts m (the dense shape of slices). */
static nb_tensor *entry_handle(pass *p, const grad_entry *e, const nbop_meta *m) {
  if (e->indices_key < 0) return handle_of(p, e->key);
  return nb_indexed_slices(p->c, handle_of(p, e->key), handle_of(p, e->indices_key), m->shape, m->rank);
}

static nb_code fail(pass *p, nb_code code, const char *fmt, const char *a, const char *b) {
  return nbcore_fail(p->c, code, fmt, a, b);
}

/* ---- marking ------------------------------------------------------------------------- */

/* A growable stack of node ids. */
typedef struct id_stack {
  int32_t *v, n, cap;
} id_stack;

static bool push_id(id_stack *s, int32_t id) {
  if (!nbcore_grow_array((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v)) return false;
  s->v[s->n++] = id;
  return true;
}

/* Pushes node id when its stamp field (at offset `field`) is not yet gen, stamping it. */
static bool visit(pass *p, id_stack *s, int32_t id, size_t field) {
  uint32_t *stamp = (uint32_t *)((char *)&p->g->nodes[id] + field);
  if (*stamp == p->gen) return true;
  *stamp = p->gen;
  return push_id(s, id);
}

/* One step backwards: the inputs of the next ancestor of ys (stamp). */
static bool step_back(pass *p, id_stack *s) {
  const nbgraph_node *n = &p->g->nodes[s->v[--s->n]];
  for (int32_t i = 0; i < n->nin; i++)
    if (!visit(p, s, p->g->edges[n->in0 + i].src, offsetof(nbgraph_node, stamp))) return false;
  return true;
}

/* One step forwards: the consumers of the next descendant of xs (stamp2). */
static bool step_fwd(pass *p, id_stack *s) {
  const nbgraph_node *n = &p->g->nodes[s->v[--s->n]];
  for (int32_t e = n->first_use; e >= 0; e = p->g->edges[e].next_use)
    if (p->g->edges[e].out >= 0 && !visit(p, s, p->g->edges[e].consumer, offsetof(nbgraph_node, stamp2))) return false;
  return true;
}

/* The between set (stamp3): nodes that descend from an x and lead to a y. The ancestors
   of ys (stamp) and the descendants of xs (stamp2) grow one node at a time, in turn,
   until one side is complete; the between set is then walked inside that side. So the
   cost is about twice the smaller side, never the rest of the graph. */
static nb_code mark_between(pass *p, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx) {
  id_stack back = {0}, fwd = {0}, out = {0};
  bool ok = true;
  for (int i = 0; ok && i < ny; i++) ok = visit(p, &back, ys[i]->node, offsetof(nbgraph_node, stamp));
  for (int i = 0; ok && i < nx; i++) ok = visit(p, &fwd, xs[i]->node, offsetof(nbgraph_node, stamp2));
  while (ok && back.n && fwd.n) ok = step_back(p, &back) && step_fwd(p, &fwd);
  bool in_descendants = fwd.n == 0; /* that side is complete */
  back.n = 0;
  nb_tensor *const *seeds = in_descendants ? ys : xs;
  for (int i = 0; ok && i < (in_descendants ? ny : nx); i++) {
    const nbgraph_node *n = &p->g->nodes[seeds[i]->node];
    if (in_descendants ? n->stamp2 == p->gen : n->stamp == p->gen)
      ok = visit(p, &back, seeds[i]->node, offsetof(nbgraph_node, stamp3));
  }
  while (ok && back.n) {
    int32_t id = back.v[--back.n];
    const nbgraph_node *n = &p->g->nodes[id];
    ok = push_id(&out, id);
    if (in_descendants) { /* backwards from ys through descendants of xs */
      for (int32_t i = 0; ok && i < n->nin; i++) {
        int32_t src = p->g->edges[n->in0 + i].src;
        if (p->g->nodes[src].stamp2 == p->gen) ok = visit(p, &back, src, offsetof(nbgraph_node, stamp3));
      }
    } else { /* forwards from xs through ancestors of ys */
      for (int32_t e = n->first_use; ok && e >= 0; e = p->g->edges[e].next_use) {
        int32_t u = p->g->edges[e].consumer;
        if (p->g->edges[e].out >= 0 && p->g->nodes[u].stamp == p->gen)
          ok = visit(p, &back, u, offsetof(nbgraph_node, stamp3));
      }
    }
  }
  free(back.v);
  free(fwd.v);
  if (!ok) {
    free(out.v);
    return NB_NOMEM;
  }
  p->between = out.v;
  p->nbetween = out.n;
  return NB_OK;
}

static bool in_between(const pass *p, int32_t id) { return p->g->nodes[id].stamp3 == p->gen; }

/* Slots, per-output gradient lists and pending counts (between consumers per node). */
static nb_code prepare(pass *p) {
  nb_graph *g = p->g;
  int32_t nouts = 0;
  p->out_base = malloc((size_t)(p->nbetween + 1) * sizeof *p->out_base);
  p->queue = malloc((size_t)(p->nbetween + 1) * sizeof *p->queue);
  if (!p->out_base || !p->queue) return NB_NOMEM;
  for (int32_t i = 0; i < p->nbetween; i++) {
    nbgraph_node *n = &g->nodes[p->between[i]];
    n->slot = i;
    n->pending = 0;
    p->out_base[i] = nouts;
    nouts += n->nout;
  }
  p->heads = malloc((size_t)(nouts + 1) * sizeof *p->heads);
  if (!p->heads) return NB_NOMEM;
  for (int32_t i = 0; i < nouts; i++) p->heads[i] = -1;
  for (int32_t i = 0; i < p->nbetween; i++) {
    const nbgraph_node *n = &g->nodes[p->between[i]];
    for (int32_t j = 0; j < n->nin; j++) {
      int32_t src = g->edges[n->in0 + j].src;
      if (in_between(p, src)) g->nodes[src].pending++;
    }
  }
  return NB_OK;
}

/* Records gradient `dx` (a tensor of the graph) for output `out` of between node `id`;
   integer and bool outputs never take gradients. */
static nb_code add_grad(pass *p, int32_t id, int32_t out, const nb_tensor *dx) {
  const nbgraph_node *n = &p->g->nodes[id];
  if (!nbcore_is_float(p->g->outs[n->out0 + out].meta.dtype)) return NB_OK;
  if (!nbcore_grow_array((void **)&p->entries, &p->entries_cap, p->nentries + 1, sizeof *p->entries)) return NB_NOMEM;
  int32_t *head = &p->heads[p->out_base[n->slot] + out];
  p->entries[p->nentries] = entry_of(dx, *head);
  *head = p->nentries++;
  return NB_OK;
}

/* ---- aggregation and one node's gradient ----------------------------------------------- */

/* TF's rule for EXPERIMENTAL_ACCUMULATE_N: more than two terms whose merged static shape
   is fully known (the accumulator's); otherwise AddN, whose sum (in input order) is the
   same as TF's fallback chain of pairwise AddNs. */
static bool accumulates(nb_tensor *const *terms, int n) {
  nbop_meta m;
  int conflict;
  return n > 2 && nbop_merge_shapes(terms, n, &m, &conflict) && nbcore_dims_known(m.rank, m.shape);
}

/* The dense sum of n terms (slices among them densified): AddN, AccumulateNV2, or a
   pairwise tree. */
static nb_tensor *sum_dense(pass *p, nb_tensor **terms, int n) {
  for (int i = 0; i < n; i++) terms[i] = nb_densify(p->c, terms[i]);
  if (p->o->aggregation == NB_AGG_ACCUMULATE_N && accumulates(terms, n)) return nb_accumulate_n(p->c, terms, n);
  if (p->o->aggregation != NB_AGG_TREE) return nb_add_n(p->c, terms, n);
  while (n > 1) { /* pairwise rounds: depth log2(n) */
    int m = 0;
    for (int j = 0; j + 1 < n; j += 2) terms[m++] = nb_add(p->c, terms[j], terms[j + 1]);
    if (n % 2) terms[m++] = terms[n - 1];
    n = m;
  }
  return terms[0];
}

/* Sums the gradients listed for output `out` of node `id` (sum_dense; IndexedSlices
   concatenated while every term is one, densified when a dense term joins); the list then
   holds just the sum, so asking again (for an x) builds nothing. NULL when none. */
static nb_tensor *aggregate(pass *p, int32_t id, int32_t out) {
  const nbgraph_node *node = &p->g->nodes[id]; /* read before sums add nodes (which may move it) */
  int32_t head = p->heads[p->out_base[node->slot] + out];
  nbop_meta meta = p->g->outs[node->out0 + out].meta, *m = &meta;
  if (head < 0) return NULL;
  int n = 0;
  for (int32_t e = head; e >= 0; e = p->entries[e].next) n++;
  if (n == 1) return entry_handle(p, &p->entries[head], m);
  nb_tensor **terms = malloc((size_t)n * sizeof *terms);
  if (!terms) {
    nbcore_fail(p->c, NB_NOMEM, "gradients: out of memory");
    return NULL;
  }
  int i = n, nsparse = 0;
  for (int32_t e = head; e >= 0; e = p->entries[e].next) {
    terms[--i] = entry_handle(p, &p->entries[e], m);
    nsparse += p->entries[e].indices_key >= 0;
  }
  nb_tensor *sum = nsparse < n ? sum_dense(p, terms, n)
                   : n == 1    ? terms[0]
                               : nbop_indexed_slices_concat_n(p->c, terms, n);
  free(terms);
  if (sum) p->entries[head] = entry_of(sum, -1); /* the sum replaces the list */
  return sum;
}

static bool is_stopped(const pass *p, int32_t id) {
  for (int i = 0; i < p->o->nstop; i++)
    if (p->o->stop[i] && p->o->stop[i]->graph == p->g && p->o->stop[i]->node == id) return true;
  return false;
}

static bool feeds_between(const pass *p, const nbgraph_node *n) {
  for (int32_t i = 0; i < n->nin; i++)
    if (in_between(p, p->g->edges[n->in0 + i].src)) return true;
  return false;
}

/* Output gradients of node id (which has some): aggregated and dense (gradient functions
   take dense tensors), with zeros for float outputs that got none while a sibling did. */
static void output_grads(pass *p, int32_t id, const nbgraph_node *n, nb_tensor **outs, nb_tensor **dys) {
  for (int32_t o = 0; o < n->nout; o++) dys[o] = nb_densify(p->c, aggregate(p, id, o));
  for (int32_t o = 0; o < n->nout; o++)
    if (!dys[o] && nbcore_is_float(outs[o]->dtype)) dys[o] = nb_zeros_like(p->c, outs[o]);
}

/* Sets the graph's name scope to "<gradients scope><node name>_grad/" (just the
   gradients scope if that would be too long). */
static void enter_node_scope(pass *p, const nbgraph_node *n) {
  char scope[NBGRAPH_SCOPE_CAP];
  int len = snprintf(scope, sizeof scope, "%s%s_grad/", p->scope, n->name);
  if (len < 0 || len >= NBGRAPH_SCOPE_CAP - 32) /* too long: shared scope, names through the map */
    nbgraph_set_scope(p->g, p->scope, false);
  else
    nbgraph_set_scope(p->g, scope, true);
}

static nb_code call_grad_fn(pass *p, const nbgraph_node *n, nb_grad_fn fn, nb_tensor **ins, nb_tensor **outs,
                            nb_tensor **dys, nb_tensor **dxs) {
  for (int32_t i = 0; i < n->nin; i++) p->needs[i] = in_between(p, p->g->edges[n->in0 + i].src);
  nb_fwd_op op = {n->def, n->name, n->nin, n->nout, ins, outs, n->attr, p->needs};
  return nbad_grad_invoke(p->c, fn, &op, dys, dxs);
}

static const nb_graph *graph_of(const nb_tensor *x) {
  return nb_is_indexed_slices(x) ? nb_indexed_slices_values(x)->graph : x->graph;
}

/* Distributes the input gradients and releases the inputs' pending counts. */
static nb_code propagate(pass *p, const nbgraph_node *n, nb_tensor *const *dxs) {
  for (int32_t i = 0; i < n->nin; i++) {
    const nbgraph_edge *e = &p->g->edges[n->in0 + i];
    if (!in_between(p, e->src)) continue;
    if (dxs && dxs[i]) {
      if (graph_of(dxs[i]) != p->g)
        return fail(p, NB_INVALID, "the gradient function of '%s' (op type: %s) returned a tensor outside the graph",
                    n->name, n->def->name);
      if (add_grad(p, e->src, e->out, dxs[i])) return nbcore_fail(p->c, NB_NOMEM, "gradients: out of memory");
    }
    if (--p->g->nodes[e->src].pending == 0) p->queue[p->qtail++] = e->src;
  }
  return NB_OK;
}

static bool has_grads(const pass *p, const nbgraph_node *n) {
  for (int32_t o = 0; o < n->nout; o++)
    if (p->heads[p->out_base[n->slot] + o] >= 0) return true;
  return false;
}

/* ---- automatic checkpointing ---------------------------------------------------------------
   Chen et al. 2016: the forward ops between xs and ys, in topological order, fall into
   segments (k equal ones, or laid out by memory: lay_out); only each segment's last op
   keeps its outputs for the gradient. A gradient function reading any other forward
   tensor reads a recomputation of it instead, built from the kept tensors (and recomputed
   ones before it) the first time it is needed; a control input on the incoming gradient
   that asked for it keeps a session from running the recomputation before the backward
   pass gets there. So the forward activations die in the forward pass, and the backward
   pass holds one segment's recomputation at a time. */

static int compare_ids(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* A recomputable op: one that reads a between tensor (not an x or a source) and no state. */
static bool recomputable(const pass *p, const nbgraph_node *n) { return !n->def->stateful && feeds_between(p, n); }

/* What one output costs held: its static bytes, 1 when its shape is unknown. */
static int64_t held_bytes(const nb_graph *g, const nbgraph_node *n, int32_t o) {
  const nbop_meta *m = &g->outs[n->out0 + o].meta;
  return nbcore_dims_known(m->rank, m->shape) ? nbcore_shape_size(m->rank, m->shape) * (int64_t)nb_dtype_size(m->dtype)
                                              : 1;
}

/* Whether the rule of node n (its own, or an override whose reads are unknown) reads its
   input j (out false) or output j (out true). */
static bool rule_reads(const nbgraph_node *n, int32_t j, bool out) {
  uint32_t in_bits, out_bits;
  nbad_grad_reads(n->def, &in_bits, &out_bits);
  uint32_t bits = n->grad_name ? NBG_ALL : out ? out_bits : in_bits;
  return bits == NBG_ALL || (j < 32 && (bits >> j & 1u));
}

/* The bytes of node id's outputs that the plain gradient keeps: those its own rule or a
   between consumer's rule reads. */
static int64_t saved_bytes(const pass *p, int32_t id) {
  const nb_graph *g = p->g;
  const nbgraph_node *n = &g->nodes[id];
  int64_t bytes = 0;
  for (int32_t o = 0; o < n->nout; o++) {
    bool read = rule_reads(n, o, true);
    for (int32_t e = n->first_use; e >= 0 && !read; e = g->edges[e].next_use) {
      const nbgraph_node *u = &g->nodes[g->edges[e].consumer];
      read = g->edges[e].out == o && in_between(p, g->edges[e].consumer) && rule_reads(u, e - u->in0, false);
    }
    bytes += read ? held_bytes(g, n, o) : 0;
  }
  return bytes;
}

/* The layout for a memory budget, over ops in topological order, op i keeping saved[i]
   bytes for the plain gradient and holding kept[i] as a checkpoint. The backward pass
   through segment j holds the checkpoints of segments 1..j and segment j's recomputed
   activations, so each segment grows while (checkpoints so far) + (its saved bytes) +
   (the next op's outputs, kept) stays within the budget: the first segments are the
   longest, as fewer checkpoints are held there (a segment j of about budget - j ops: peak
   sqrt(2N) activations for a chain of N, against 2 sqrt(N) for equal segments). Marks
   recompute[i]; returns the peak of the layout. */
static int64_t lay_out(const int64_t *saved, const int64_t *kept, int32_t n, int64_t budget, bool *recompute) {
  int64_t held = 0, segment = 0, peak = 0;
  for (int32_t i = 0; i < n; i++) {
    recompute[i] = i + 1 < n && held + segment + saved[i] + kept[i + 1] <= budget;
    if (recompute[i]) {
      segment += saved[i];
      continue;
    }
    if (held + segment + kept[i] > peak) peak = held + segment + kept[i];
    held += kept[i];
    segment = 0;
  }
  return peak;
}

/* NB_CHECKPOINT_SQRT: the smallest budget whose layout keeps within it (binary search;
   the budget of every op's bytes always does). */
static void lay_out_for_memory(const int64_t *saved, const int64_t *kept, int32_t n, bool *recompute) {
  int64_t lo = 0, hi = 0;
  for (int32_t i = 0; i < n; i++) hi += saved[i] + kept[i];
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (lay_out(saved, kept, n, mid, recompute) <= mid)
      hi = mid;
    else
      lo = mid + 1;
  }
  lay_out(saved, kept, n, hi, recompute);
}

/* k segments of equal op counts, each keeping its last op. */
static void lay_out_segments(int32_t n, int32_t k, bool *recompute) {
  int32_t per = (n + k - 1) / k;
  for (int32_t j = 0; j < n; j++) recompute[j] = (j + 1) % per != 0 && j + 1 != n;
}

static nb_code choose_checkpoints(pass *p) {
  int32_t *ids = malloc((size_t)p->nbetween * sizeof *ids + 1), n = 0;
  int64_t *costs = malloc((size_t)p->nbetween * 2 * sizeof *costs + 1);
  bool *layout = malloc((size_t)p->nbetween * sizeof *layout + 1);
  p->recompute = calloc((size_t)p->nbetween + 1, sizeof *p->recompute);
  p->clone = malloc((size_t)p->nbetween * sizeof *p->clone + 1);
  if (!ids || !costs || !layout || !p->recompute || !p->clone) {
    free(ids);
    free(costs);
    free(layout);
    return NB_NOMEM;
  }
  for (int32_t i = 0; i < p->nbetween; i++) {
    p->clone[i] = -1;
    if (recomputable(p, &p->g->nodes[p->between[i]])) ids[n++] = p->between[i];
  }
  qsort(ids, (size_t)n, sizeof *ids, compare_ids); /* node ids are a topological order */
  int64_t *saved = costs, *kept = costs + n;
  for (int32_t j = 0; j < n; j++) {
    const nbgraph_node *node = &p->g->nodes[ids[j]];
    saved[j] = saved_bytes(p, ids[j]);
    kept[j] = 0;
    for (int32_t o = 0; o < node->nout; o++) kept[j] += held_bytes(p->g, node, o);
  }
  if (p->o->checkpoint_segments > 0)
    lay_out_segments(n, p->o->checkpoint_segments, layout);
  else
    lay_out_for_memory(saved, kept, n, layout);
  for (int32_t j = 0; j < n; j++) p->recompute[p->g->nodes[ids[j]].slot] = layout[j];
  free(ids);
  free(costs);
  free(layout);
  return NB_OK;
}

static bool is_recomputed(const pass *p, int32_t id) { return in_between(p, id) && p->recompute[p->g->nodes[id].slot]; }

/* The handle of output `out` of node id as the gradient reads it: the recomputation's
   when id is recomputed (built by then), else its own. */
static nb_tensor *read_view(pass *p, int32_t id, int32_t out) {
  return nbgraph_handle(p->c, p->g, is_recomputed(p, id) ? p->clone[p->g->nodes[id].slot] : id, out);
}

/* Recomputes node id (whose recomputed inputs are built) from its inputs' views. */
static nb_code clone_one(pass *p, int32_t id, nb_tensor *after) {
  const nbgraph_node node = p->g->nodes[id], *n = &node;
  nb_tensor **args = malloc((size_t)(n->nin + n->nout) * sizeof *args + 1), **outs = args + n->nin;
  if (!args) return nbcore_fail(p->c, NB_NOMEM, "gradients: out of memory");
  for (int32_t i = 0; i < n->nin; i++) {
    const nbgraph_edge *e = &p->g->edges[n->in0 + i];
    args[i] = read_view(p, e->src, e->out);
  }
  nb_code code = nb_status(p->c) ? nb_status(p->c) : nbop_dispatch(p->c, n->def, args, n->nin, n->attr, outs, n->nout);
  if (!code && n->nout > 0) {
    p->clone[n->slot] = outs[0]->node;
    if (after) code = nb_add_control_input(outs[0], after);
  }
  free(args);
  return code;
}

/* Builds the recomputation of node id and of the recomputed nodes it reads (depth first,
   with an explicit stack), each after `after`. */
static nb_code build_clone(pass *p, int32_t id, nb_tensor *after) {
  id_stack s = {0};
  nb_code code = push_id(&s, id) ? NB_OK : NB_NOMEM;
  while (!code && s.n > 0) {
    int32_t top = s.v[s.n - 1];
    const nbgraph_node *n = &p->g->nodes[top];
    if (p->clone[n->slot] >= 0) {
      s.n--;
      continue;
    }
    bool ready = true;
    for (int32_t i = 0; i < n->nin && !code; i++) {
      int32_t src = p->g->edges[n->in0 + i].src;
      if (is_recomputed(p, src) && p->clone[p->g->nodes[src].slot] < 0) {
        ready = false;
        if (!push_id(&s, src)) code = NB_NOMEM;
      }
    }
    if (!code && ready) {
      code = clone_one(p, top, after);
      s.n--;
    }
  }
  free(s.v);
  return code == NB_NOMEM ? nbcore_fail(p->c, NB_NOMEM, "gradients: out of memory") : code;
}

/* ins and outs of node id (n, a copy) as its gradient function reads them: recomputed
   where chosen, after the first of its incoming gradients dys. */
static nb_code recomputed_views(pass *p, int32_t id, const nbgraph_node *n, nb_tensor *const *dys, nb_tensor **ins,
                                nb_tensor **outs) {
  nb_tensor *after = NULL;
  for (int32_t o = 0; o < n->nout && !after; o++) after = dys[o];
  nb_code code = NB_OK;
  for (int32_t i = 0; i < n->nin && !code; i++) {
    int32_t src = p->g->edges[n->in0 + i].src, out = p->g->edges[n->in0 + i].out;
    if (!is_recomputed(p, src)) continue;
    code = build_clone(p, src, after);
    if (!code) ins[i] = read_view(p, src, out);
  }
  if (!code && is_recomputed(p, id)) {
    code = build_clone(p, id, after);
    for (int32_t o = 0; o < n->nout && !code; o++) outs[o] = read_view(p, id, o);
  }
  return code ? code : nb_status(p->c);
}

static nb_code node_gradient(pass *p, int32_t id, nb_tensor **buf) {
  nb_graph *g = p->g;
  /* a copy: building gradient ops grows (and may move) the node array */
  const nbgraph_node node = g->nodes[id], *n = &node;
  if (!has_grads(p, n) || is_stopped(p, id) || !feeds_between(p, n)) return propagate(p, n, NULL);
  nb_grad_fn fn;
  nbad_grad_kind kind = nbad_grad_lookup(n->def, n->grad_name, &fn);
  if (kind == NBAD_GRAD_STOP) return propagate(p, n, NULL);
  if (kind == NBAD_GRAD_NONE)
    return fail(p, NB_NO_GRADIENT, "No gradient defined for operation '%s' (op type: %s)", n->name, n->def->name);
  nb_tensor **ins = buf, **outs = ins + n->nin, **dys = outs + n->nout, **dxs = dys + n->nout;
  for (int32_t i = 0; i < n->nin; i++) {
    const nbgraph_edge *e = &g->edges[n->in0 + i];
    ins[i] = nbgraph_handle(p->c, g, e->src, e->out);
  }
  for (int32_t o = 0; o < n->nout; o++) outs[o] = nbgraph_handle(p->c, g, id, o);
  enter_node_scope(p, n);
  output_grads(p, id, n, outs, dys);
  nb_code code = nb_status(p->c);
  if (!code && p->recompute) code = recomputed_views(p, id, n, dys, ins, outs);
  if (!code) code = call_grad_fn(p, n, fn, ins, outs, dys, dxs);
  return code ? code : propagate(p, n, dxs);
}

/* Runs the queue; each node's handles live in a scope of their own. */
static nb_code run_queue(pass *p) {
  nb_tensor *small[64], **buf = small;
  int32_t width = 0;
  for (int32_t i = 0; i < p->nbetween; i++) {
    const nbgraph_node *n = &p->g->nodes[p->between[i]];
    if (nbad_grad_width(n->nin, n->nout) > width) width = nbad_grad_width(n->nin, n->nout);
    if (n->pending == 0) p->queue[p->qtail++] = p->between[i];
  }
  if ((width > 64 && !(buf = malloc((size_t)width * sizeof *buf))) ||
      !(p->needs = malloc((size_t)width * sizeof *p->needs))) {
    if (buf != small) free(buf);
    return nbcore_fail(p->c, NB_NOMEM, "gradients: out of memory");
  }
  nb_code code = NB_OK;
  while (!code && p->qhead < p->qtail) {
    nb_scope_begin(p->c);
    code = node_gradient(p, p->queue[p->qhead++], buf);
    nb_scope_end(p->c, NULL, 0);
  }
  if (buf != small) free(buf);
  return code;
}

/* ---- the entry ------------------------------------------------------------------------ */

static nb_code check_tensors(nb_ctx *c, const char *what, nb_tensor *const *ts, int n) {
  if (n < 0 || (n > 0 && !ts))
    return nbcore_fail(c, NB_INVALID, "nb_gradients: %s is NULL or has negative length", what);
  for (int i = 0; i < n; i++)
    if (!ts[i] || ts[i]->graph != c->graph)
      return nbcore_fail(c, NB_INVALID, "nb_gradients: %s[%d] is not a tensor of this context's graph", what, i);
  return NB_OK;
}

static nb_code check_args(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx, const nb_grad_opts *o,
                          nb_tensor **dxs) {
  if (!c->graph) return nbcore_fail(c, NB_INVALID, "nb_gradients needs a graph context; eager code uses a tape");
  if (nx > 0 && !dxs) return nbcore_fail(c, NB_INVALID, "nb_gradients: dxs is NULL");
  nb_code code = check_tensors(c, "ys", ys, ny);
  if (!code) code = check_tensors(c, "xs", xs, nx);
  for (int i = 0; !code && o->grad_ys && i < ny; i++) /* NULL entries mean ones */
    if (o->grad_ys[i] && o->grad_ys[i]->graph != c->graph)
      code = nbcore_fail(c, NB_INVALID, "nb_gradients: grad_ys[%d] is not a tensor of this context's graph", i);
  for (int i = 0; !code && o->grad_ys && i < ny; i++)
    if (o->grad_ys[i] && o->grad_ys[i]->dtype != ys[i]->dtype)
      code = nbcore_fail(c, NB_DTYPE, "nb_gradients: grad_ys[%d] has dtype %s, ys[%d] has %s", i,
                         nb_dtype_name(o->grad_ys[i]->dtype), i, nb_dtype_name(ys[i]->dtype));
  for (int i = 0; !code && o->grad_ys && i < ny; i++)
    if (o->grad_ys[i] && !nbop_shapes_compatible(o->grad_ys[i], ys[i]))
      code = nbcore_fail(c, NB_SHAPE, "nb_gradients: grad_ys[%d] has shape %s, incompatible with ys[%d] of shape %s", i,
                         nbop_tstr(o->grad_ys[i]), i, nbop_tstr(ys[i]));
  if (!code && (o->nstop < 0 || (o->nstop > 0 && !o->stop)))
    code = nbcore_fail(c, NB_INVALID, "nb_gradients: stop is NULL or has negative length");
  if (!code && o->name && (!*o->name || strchr(o->name, '/')))
    code = nbcore_fail(c, NB_INVALID, "nb_gradients: scope name '%s' must be non-empty without '/'", o->name);
  if (!code && o->checkpoint_segments < NB_CHECKPOINT_SQRT)
    code = nbcore_fail(c, NB_INVALID, "nb_gradients: checkpoint_segments %d is neither a count nor NB_CHECKPOINT_SQRT",
                       o->checkpoint_segments);
  if (!code && o->aggregation != NB_AGG_ADD_N && o->aggregation != NB_AGG_TREE && o->aggregation != NB_AGG_ACCUMULATE_N)
    code = nbcore_fail(c, NB_INVALID, "nb_gradients: unknown aggregation %d", o->aggregation);
  return code;
}

/* The unique scope "gradients/" (or "gradients_1/", ... or opts.name) under the current one. */
static nb_code open_scope(pass *p) {
  const char *name = nbgraph_unique_name(p->g, p->o->name ? p->o->name : "gradients");
  if (!name || strlen(name) + 2 > NBGRAPH_SCOPE_CAP)
    return nbcore_fail(p->c, NB_INVALID, "nb_gradients: bad scope name");
  snprintf(p->scope, sizeof p->scope, "%s/", name);
  return NB_OK;
}

/* ones_like(y), or grad_ys[i], as the incoming gradient of each y. */
static nb_code seed(pass *p, nb_tensor *const *ys, int ny) {
  nbgraph_set_scope(p->g, p->scope, false);
  for (int i = 0; i < ny; i++) {
    if (!in_between(p, ys[i]->node) || !nbcore_is_float(ys[i]->dtype)) continue;
    nb_tensor *given = p->o->grad_ys ? p->o->grad_ys[i] : NULL;
    nb_tensor *g = given ? given : nb_ones_like(p->c, ys[i]);
    if (!g) return nb_status(p->c);
    if (add_grad(p, ys[i]->node, ys[i]->out, g)) return nbcore_fail(p->c, NB_NOMEM, "gradients: out of memory");
    if (!given) nb_tensor_free(g);
  }
  return NB_OK;
}

/* The gradient of each x: its aggregated list, or NULL/zeros when unconnected. */
static nb_code results(pass *p, nb_tensor *const *xs, int nx, nb_tensor **dxs) {
  nbgraph_set_scope(p->g, p->scope, false);
  for (int i = 0; i < nx; i++) {
    dxs[i] = in_between(p, xs[i]->node) ? aggregate(p, xs[i]->node, xs[i]->out) : NULL;
    if (!dxs[i] && p->o->unconnected_zero) dxs[i] = nb_zeros_like(p->c, xs[i]); /* any dtype, as TF */
  }
  return nb_status(p->c);
}

static void pass_free(pass *p) {
  free(p->between);
  free(p->out_base);
  free(p->heads);
  free(p->entries);
  free(p->queue);
  free(p->needs);
  free(p->recompute);
  free(p->clone);
}

/* A node's traversal scratch, which a pass keeps in the nodes themselves. */
typedef struct node_scratch {
  uint32_t stamp, stamp2, stamp3;
  int32_t pending, slot;
} node_scratch;

/* A pass started inside another (a gradient function calling nb_gradients, as
   nb_recompute_grad's does) would overwrite the outer pass's scratch in the nodes both
   walk: the outer pass's nodes keep theirs in a copy, put back when the inner one ends.
   NULL with *n 0 when no pass is under way. */
static node_scratch *save_outer_scratch(const nb_graph *g, int32_t *n, bool *nomem) {
  *n = 0;
  *nomem = false;
  if (g->grad_passes == 0) return NULL;
  node_scratch *s = malloc((size_t)g->nnodes * sizeof *s + 1);
  if (!s) {
    *nomem = true;
    return NULL;
  }
  for (int32_t i = 0; i < g->nnodes; i++) {
    const nbgraph_node *d = &g->nodes[i];
    s[i] = (node_scratch){d->stamp, d->stamp2, d->stamp3, d->pending, d->slot};
  }
  *n = g->nnodes;
  return s;
}

static void restore_outer_scratch(nb_graph *g, node_scratch *s, int32_t n) {
  for (int32_t i = 0; i < n; i++) {
    nbgraph_node *d = &g->nodes[i];
    d->stamp = s[i].stamp, d->stamp2 = s[i].stamp2, d->stamp3 = s[i].stamp3;
    d->pending = s[i].pending, d->slot = s[i].slot;
  }
  free(s);
}

static nb_code run_pass(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx, const nb_grad_opts *o,
                        nb_tensor **dxs);

static nb_code gradients(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx, const nb_grad_opts *o,
                         nb_tensor **dxs) {
  nb_graph *g = c->graph;
  if (!g) return run_pass(c, ys, ny, xs, nx, o, dxs); /* which refuses an eager context */
  int32_t nsaved;
  bool nomem;
  node_scratch *saved = save_outer_scratch(g, &nsaved, &nomem);
  if (nomem) return nbcore_fail(c, NB_NOMEM, "gradients: out of memory");
  g->grad_passes++;
  nb_code code = run_pass(c, ys, ny, xs, nx, o, dxs);
  g->grad_passes--;
  if (saved) restore_outer_scratch(g, saved, nsaved);
  return code;
}

static nb_code run_pass(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx, const nb_grad_opts *o,
                        nb_tensor **dxs) {
  nb_grad_opts defaults = {0};
  if (!o) o = &defaults;
  nb_code code = check_args(c, ys, ny, xs, nx, o, dxs);
  if (code) return code;
  nbad_grad_builtins_init();
  nb_graph *g = c->graph;
  pass p = {.c = c, .g = g, .o = o, .gen = nbgraph_next_gen(g)};
  nbgraph_scope_state saved;
  if (nbgraph_scope_save(g, &saved)) return nbcore_fail(c, NB_NOMEM, "gradients: out of memory");
  const char *pending = c->next_name; /* nb_name_next's name waits for the next op */
  c->next_name = NULL;
  code = open_scope(&p);
  if (!code && (mark_between(&p, ys, ny, xs, nx) || prepare(&p)))
    code = nbcore_fail(c, NB_NOMEM, "gradients: out of memory");
  if (!code && o->checkpoint_segments && choose_checkpoints(&p))
    code = nbcore_fail(c, NB_NOMEM, "gradients: out of memory");
  if (!code) code = seed(&p, ys, ny);
  if (!code) code = run_queue(&p);
  if (!code) code = results(&p, xs, nx, dxs);
  nbgraph_scope_restore(g, &saved);
  c->next_name = pending;
  pass_free(&p);
  if (code)
    for (int i = 0; i < nx; i++) {
      nb_tensor_free(dxs[i]);
      dxs[i] = NULL;
    }
  return code;
}

/* ys that are IndexedSlices (a gradient differentiated again) are densified first, as
   tf.gradients converts them to tensors. */
nb_code nb_gradients(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx, const nb_grad_opts *o,
                     nb_tensor **dxs) {
  if (!c) return NB_INVALID;
  for (int i = 0; dxs && i < nx; i++) dxs[i] = NULL;
  if (c->status) return c->status;
  nb_tensor *const *dense;
  nb_tensor **owned;
  nb_code code = nbop_densify_list(c, ys, ny, &dense, &owned);
  if (!code) code = gradients(c, dense, ny, xs, nx, o, dxs);
  free(owned);
  return code;
}

/* ---- nb_find_non_differentiable -------------------------------------------------------- */

/* Writes "a -> b -> ..." for the path from an x to node id (backwards through between
   inputs) and on to a y (forwards through between consumers). */
static size_t path_str(const pass *p, int32_t id, char *out, size_t cap) {
  const nb_graph *g = p->g;
  int32_t chain[64];
  int len = 0;
  for (int32_t cur = id; cur >= 0 && len < 64;) {
    chain[len++] = cur;
    int32_t next = -1;
    const nbgraph_node *n = &g->nodes[cur];
    for (int32_t i = 0; i < n->nin && next < 0; i++)
      if (in_between(p, g->edges[n->in0 + i].src)) next = g->edges[n->in0 + i].src;
    cur = next;
  }
  size_t w = 0;
  for (int i = len - 1; i >= 0 && w < cap; i--)
    w += (size_t)snprintf(out + w, cap - w, "%s%s", g->nodes[chain[i]].name, i ? " -> " : "");
  int32_t cur = id;
  for (int steps = 0; steps < 64 && w < cap; steps++) {
    int32_t next = -1;
    for (int32_t e = g->nodes[cur].first_use; e >= 0 && next < 0; e = g->edges[e].next_use)
      if (g->edges[e].out >= 0 && in_between(p, g->edges[e].consumer)) next = g->edges[e].consumer;
    if (next < 0) break;
    w += (size_t)snprintf(out + w, cap - w, " -> %s", g->nodes[next].name);
    cur = next;
  }
  return w;
}

nb_code nb_find_non_differentiable(nb_graph *g, nb_tensor *const *xs, int nx, nb_tensor *const *ys, int ny,
                                   char *report, size_t cap) {
  if (!g || !report || cap == 0 || nx < 0 || ny < 0 || (nx && !xs) || (ny && !ys)) return NB_INVALID;
  for (int i = 0; i < nx; i++)
    if (!xs[i] || xs[i]->graph != g) return NB_INVALID;
  for (int i = 0; i < ny; i++)
    if (!ys[i] || ys[i]->graph != g) return NB_INVALID;
  nbad_grad_builtins_init();
  pass p = {.g = g, .gen = nbgraph_next_gen(g)};
  report[0] = '\0';
  if (mark_between(&p, ys, ny, xs, nx)) return NB_NOMEM;
  size_t w = 0;
  char path[1024];
  for (int32_t i = 0; i < p.nbetween && w < cap; i++) {
    const nbgraph_node *n = &g->nodes[p.between[i]];
    nb_grad_fn fn;
    nbad_grad_kind kind = nbad_grad_lookup(n->def, n->grad_name, &fn);
    if (kind == NBAD_GRAD_FN || !feeds_between(&p, n)) continue;
    path_str(&p, p.between[i], path, sizeof path);
    w += (size_t)snprintf(report + w, cap - w, "%s '%s' (op type: %s): %s\n",
                          kind == NBAD_GRAD_STOP ? "Not differentiable:" : "No gradient defined for operation", n->name,
                          n->def->name, path);
  }
  free(p.between);
  return NB_OK;
}
