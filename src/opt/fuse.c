/* Elementwise fusion. Nodes are grouped in a topological order (topo_order): a fusible
   node joins the groups of its fusible producers (all of them at once when it can, else
   one) when every input from outside the joined group comes before the group's first node
   in that order.
   That keeps each group convex: no path leaves a group and comes back, so one node can
   stand for it, and no two fused nodes wait on each other. A value read inside and outside
   its group is one of the group's outputs (groups are DAGs), so the group reads its
   inputs once however many members use them. A group must also have one rank and compatible static dims (members of
   one shape: the block loop's case; the kernel checks the run-time shapes).
   A Sum or Mean of a group's full-shaped value over the last dim, the leading dims or
   all dims joins that group as an epilogue (never its own group, and no member reads
   it: its value needs every block), so LayerNorm's statistics and the gradient sums of
   broadcast operands are computed while their operand is in cache, without writing it.
   Then groups merge on the quotient graph where that order kept them apart
   (merge_groups), each group recomputes the cheap full-shaped values it reads from other
   groups (duplicate_producers), and each group's program keeps the members something
   needs (keep_needed_members): see the sections below. */
#include "fuse.h"

#include "../ops/fused.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fuse_group {
  int32_t first;   /* the least position of a member */
  int32_t ext;     /* the greatest position of an input from outside, -1 none */
  int32_t ninstr;  /* program length so far */
  int32_t nmember; /* nodes */
  nbop_meta meta;  /* the static shape the members share */
} fuse_group;

typedef struct fuser {
  nb_graph *g;
  int64_t *keys;
  int nfeed, nfetch;
  bool reductions; /* Sum and Mean may end groups */
  int32_t n;       /* nodes considered: those that existed when the pass began */
  int32_t *pos;    /* node -> position in a topological order */
  int32_t *order;  /* position -> node */
  int32_t *group;  /* node -> group (union-find parent chain through parent), -1 none */
  int32_t *parent;
  fuse_group *groups;
  int32_t ngroups;
  uint32_t gen;       /* nodes the fetches need have stamp == gen */
  int64_t *orig;      /* edge of the n nodes -> its (src, out) when the pass began */
  int64_t *fused_key; /* member -> the fused node's output holding its value, -1 none (yet) */
  /* group -> the nodes its program computes, own members and duplicated producers, in
     topological order: members[mstart[gid] .. mstart[gid + 1]) */
  int32_t *members, *mstart;
  int32_t *hosts, *hstart; /* node -> the groups that duplicate it, the same way */
  int32_t *host_mark;      /* node -> the group last given it as a duplicate */
  int32_t *seen;           /* node -> the cone walk that last saw it */
  int32_t walk;
} fuser;

static bool is_fed(const fuser *f, int32_t node, int32_t out) {
  for (int i = 0; i < f->nfeed; i++)
    if (f->keys[i] == nbgraph_key(node, out)) return true;
  return false;
}

static int32_t find(const fuser *f, int32_t gid) {
  while (f->parent[gid] != gid) gid = f->parent[gid];
  return gid;
}

static int32_t group_of(const fuser *f, int32_t node) {
  return node < f->n && f->group[node] >= 0 ? find(f, f->group[node]) : -1;
}

/* Kahn's algorithm over data and control edges, from the consumers back: each node but
   the sources (placeholders, constants: first) comes as late as its consumers allow. A
   node then sits next to the group it feeds rather than next to its own inputs (a
   gradient's scaling by a forward statistic comes after that statistic's other uses), so
   the groups' inputs more often come before their members. */
static nb_code topo_order(fuser *f) {
  const nb_graph *g = f->g;
  int32_t head = 0, tail = 0;
  for (int32_t i = 0; i < f->n; i++) {
    f->pos[i] = 0;
    for (int32_t e = g->nodes[i].first_use; e >= 0; e = g->edges[e].next_use) f->pos[i] += g->edges[e].consumer < f->n;
    if (f->pos[i] == 0) f->order[tail++] = i;
  }
  while (head < tail) {
    const nbgraph_node *nd = &g->nodes[f->order[head++]];
    for (int32_t i = 0; i < nd->nin; i++) {
      int32_t src = g->edges[nd->in0 + i].src;
      if (--f->pos[src] == 0) f->order[tail++] = src;
    }
    for (int32_t e = nd->ctrl; e >= 0; e = g->edges[e].next_ctrl)
      if (--f->pos[g->edges[e].src] == 0) f->order[tail++] = g->edges[e].src;
  }
  if (tail != f->n) return NB_INVALID; /* a cycle: sessions report it; nothing is fused */
  int32_t at = 0;                      /* positions: the sources, then the others, each latest last */
  for (int pass = 0; pass < 2; pass++)
    for (int32_t p = f->n - 1; p >= 0; p--) {
      const nbgraph_node *nd = &g->nodes[f->order[p]];
      if ((nd->nin == 0 && nd->ctrl < 0) == (pass == 0)) f->pos[f->order[p]] = at++;
    }
  for (int32_t i = 0; i < f->n; i++) f->order[f->pos[i]] = i;
  return NB_OK;
}

/* The output (node, out) of key. */
static const nbgraph_out *out_of(const nb_graph *g, int64_t key) {
  return &g->outs[g->nodes[nbgraph_key_node(key)].out0 + nbgraph_key_out(key)];
}

static const nbgraph_out *edge_out(const nb_graph *g, const nbgraph_edge *e) {
  return out_of(g, nbgraph_key(e->src, e->out));
}

/* The value the tensor on edge e has when the graph is built, or NULL. */
static nb_tensor *edge_value(const nb_graph *g, const nbgraph_edge *e) { return edge_out(g, e)->value; }

/* Whether a run of the fetches computes node id (the nodes this pass makes: yes). */
static bool needed(const fuser *f, int32_t id) { return id >= f->n || f->g->nodes[id].stamp == f->gen; }

static void push_needed(fuser *f, int32_t *stack, int32_t *top, int32_t id) {
  if (f->g->nodes[id].stamp == f->gen) return;
  f->g->nodes[id].stamp = f->gen;
  stack[(*top)++] = id;
}

/* Stamps the nodes the fetches reach through data and control edges, stopping at fed
   tensors and at values known when the graph was built: a value only unneeded nodes read
   is not worth writing out. The order array is the stack. */
static void mark_needed(fuser *f) {
  nb_graph *g = f->g;
  int32_t *stack = f->order, top = 0;
  f->gen = nbgraph_next_gen(g);
  for (int i = 0; i < f->nfetch; i++) {
    int64_t key = f->keys[f->nfeed + i];
    if (!is_fed(f, nbgraph_key_node(key), nbgraph_key_out(key))) push_needed(f, stack, &top, nbgraph_key_node(key));
  }
  while (top > 0) {
    const nbgraph_node *nd = &g->nodes[stack[--top]];
    if (nbgraph_node_values_known(g, nd)) continue;
    for (int32_t i = 0; i < nd->nin; i++) {
      const nbgraph_edge *e = &g->edges[nd->in0 + i];
      if (!is_fed(f, e->src, e->out)) push_needed(f, stack, &top, e->src);
    }
    for (int32_t e = nd->ctrl; e >= 0; e = g->edges[e].next_ctrl) push_needed(f, stack, &top, g->edges[e].src);
  }
}

static bool has_control_edges(const nb_graph *g, const nbgraph_node *nd) {
  if (nd->ctrl >= 0) return true;
  for (int32_t e = nd->first_use; e >= 0; e = g->edges[e].next_use)
    if (g->edges[e].out < 0) return true;
  return false;
}

/* One float output computed at run time by an op the fused kernel runs, inputs of its
   dtype, no control edges, not fed. */
static bool candidate(const fuser *f, int32_t id) {
  const nb_graph *g = f->g;
  const nbgraph_node *nd = &g->nodes[id];
  if (!needed(f, id) || nd->nout != 1 || nd->nin < 1 || (nd->def->variadic && nd->nin < 2) ||
      nbgraph_node_values_known(g, nd) || has_control_edges(g, nd))
    return false;
  const nbop_meta *m = &g->outs[nd->out0].meta;
  if (m->rank < 0 || !nbop_fusible(nd->def, m->dtype) || is_fed(f, id, 0)) return false;
  if (nd->nin > NBOP_FUSED_MAX_INSTR) return false;
  if (nbop_fused_is_broadcast(nd->def)) /* one operand, and a shape known now */
    return edge_out(g, &g->edges[nd->in0])->meta.dtype == m->dtype && edge_value(g, &g->edges[nd->in0 + 1]);
  if (nbop_fused_is_reduction(nd->def)) { /* one operand, axes known now and of the epilogue's kinds */
    if (!f->reductions) return false;
    const nbop_meta *x = &edge_out(g, &g->edges[nd->in0])->meta;
    const nb_tensor *axes = edge_value(g, &g->edges[nd->in0 + 1]);
    return x->dtype == m->dtype && x->rank >= 0 && axes && nbop_fused_reduction_axes(axes, x->rank);
  }
  for (int32_t i = 0; i < nd->nin; i++) {
    const nbgraph_edge *e = &g->edges[nd->in0 + i];
    if (edge_out(g, e)->meta.dtype != m->dtype) return false;
  }
  return true;
}

static bool shapes_fit(const nbop_meta *a, const nbop_meta *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] >= 0 && b->shape[d] >= 0 && a->shape[d] != b->shape[d]) return false;
  return true;
}

/* The program length node id adds: AddN's n inputs take n - 1 adds. */
static int32_t instr_count(const nbgraph_node *nd) { return nd->nin > 1 && nd->def->variadic ? nd->nin - 1 : 1; }

/* Whether nd's second input is no operand but a value known when built (the shape, the axes). */
static bool has_known_input(const nbgraph_node *nd) {
  return nbop_fused_is_broadcast(nd->def) || nbop_fused_is_reduction(nd->def);
}

/* The inputs of nd the program reads: all but the known one. */
static int32_t operand_inputs(const nbgraph_node *nd) { return has_known_input(nd) ? 1 : nd->nin; }

/* Operands of one instruction of nd. */
static int32_t instr_args(const nbgraph_node *nd) { return operand_inputs(nd) == 1 ? 1 : 2; }

/* Whether node id may join the union of groups gs[0..ng): every input from outside them
   comes before their first member, it reads no reduction of theirs, and the program stays
   within its cap. */
static bool can_join(const fuser *f, int32_t id, const int32_t *gs, int ng) {
  const nbgraph_node *nd = &f->g->nodes[id];
  int32_t first = INT32_MAX, ext = -1, len = instr_count(nd);
  for (int i = 0; i < ng; i++) {
    const fuse_group *gr = &f->groups[gs[i]];
    first = gr->first < first ? gr->first : first;
    ext = gr->ext > ext ? gr->ext : ext;
    len += gr->ninstr;
  }
  for (int32_t i = 0; i < operand_inputs(nd); i++) {
    int32_t src = f->g->edges[nd->in0 + i].src, gsrc = group_of(f, src);
    bool inside = false;
    for (int j = 0; j < ng && !inside; j++) inside = gsrc == gs[j];
    if (inside && nbop_fused_is_reduction(f->g->nodes[src].def)) return false; /* it needs every block */
    if (!inside && f->pos[src] > ext) ext = f->pos[src];
  }
  return ext < first && len <= NBOP_FUSED_MAX_INSTR;
}

/* Node id joins the union of groups gs[0..ng) (ng 0: a group of its own). */
static void join(fuser *f, int32_t id, const int32_t *gs, int ng) {
  const nbgraph_node *nd = &f->g->nodes[id];
  int32_t gid = ng ? gs[0] : f->ngroups++;
  fuse_group *gr = &f->groups[gid];
  if (!ng) {
    f->parent[gid] = gid;
    *gr = (fuse_group){.first = f->pos[id], .ext = -1, .meta = f->g->outs[nd->out0].meta};
  }
  for (int i = 1; i < ng; i++) {
    const fuse_group *o = &f->groups[gs[i]];
    f->parent[gs[i]] = gid;
    gr->first = o->first < gr->first ? o->first : gr->first;
    gr->ext = o->ext > gr->ext ? o->ext : gr->ext;
    gr->ninstr += o->ninstr;
    gr->nmember += o->nmember;
  }
  for (int32_t i = 0; i < operand_inputs(nd); i++) {
    int32_t src = f->g->edges[nd->in0 + i].src;
    if (group_of(f, src) != gid) gr->ext = f->pos[src] > gr->ext ? f->pos[src] : gr->ext;
  }
  const nbop_meta *m = &f->g->outs[nd->out0].meta;
  for (int d = 0; d < m->rank && !nbop_fused_is_reduction(nd->def); d++)
    if (gr->meta.shape[d] < 0) gr->meta.shape[d] = m->shape[d];
  gr->ninstr += instr_count(nd);
  gr->nmember++;
  f->group[id] = gid;
}

/* The groups of id's fusible producers whose shape id's output (a reduction: its
   operand) fits, each once; a reduction's value ends its group. */
static int producer_groups(const fuser *f, int32_t id, int32_t *gs) {
  const nbgraph_node *nd = &f->g->nodes[id];
  bool reduction = nbop_fused_is_reduction(nd->def);
  const nbop_meta *m = reduction ? &edge_out(f->g, &f->g->edges[nd->in0])->meta : &f->g->outs[nd->out0].meta;
  int ng = 0;
  for (int32_t i = 0; i < operand_inputs(nd); i++) {
    int32_t src = f->g->edges[nd->in0 + i].src, gid = group_of(f, src);
    bool seen = gid < 0 || nbop_fused_is_reduction(f->g->nodes[src].def) || !shapes_fit(&f->groups[gid].meta, m);
    for (int j = 0; j < ng && !seen; j++) seen = gs[j] == gid;
    if (!seen) gs[ng++] = gid;
  }
  return ng;
}

static void assign_groups(fuser *f) {
  int32_t gs[NBOP_FUSED_MAX_INSTR];
  for (int32_t p = 0; p < f->n; p++) {
    int32_t id = f->order[p];
    if (!candidate(f, id)) continue;
    int ng = producer_groups(f, id, gs);
    if (ng > 1 && !can_join(f, id, gs, ng)) { /* not all of them: the first one that fits */
      int j = 0;
      while (j < ng && !can_join(f, id, &gs[j], 1)) j++;
      ng = j < ng;
      if (ng) gs[0] = gs[j];
    } else if (ng == 1 && !can_join(f, id, gs, 1)) {
      ng = 0;
    }
    if (ng || !nbop_fused_is_reduction(f->g->nodes[id].def)) join(f, id, gs, ng);
  }
}

/* ---- merging groups the order kept apart -------------------------------------------------- */

/* assign_groups joins a node to its producers' groups only when every outside input comes
   before the groups in one fixed order, which refuses joins that are legal in another (a
   row statistic placed after the gradient chain it does not depend on). Here groups merge
   on the quotient graph itself (a vertex per group and per node in none, an edge where a
   value crosses), kept acyclic with a topological order of its vertices: groups X before
   Y merge when no path leads from X to Y through another vertex (the merged node would
   wait on itself), found by a walk forward from X bounded by Y's place in the order and by
   MERGE_WALK_CAP edges (refused past it; all walks together by a budget per node). The merged vertex takes Y's place; what the
   walk reached moves after it, so the order stays topological. First a group merges with
   the groups it reads (their values are then neither written nor read), then with groups
   that read what it reads (their common inputs are read once, and the producers they
   recompute, see below, are computed once). */

/* Edges one merge's walk may follow, and all walks of a pass per node of the graph (the
   pass stays linear in the graph's size: merges stop when they are spent). */
#define MERGE_WALK_CAP 4096
#define MERGE_WALKS_PER_NODE 64
/* Producers, and consumers of each, one group's merges look at. */
#define MERGE_FANOUT 32

typedef struct quotient {
  int32_t nv;                     /* ngroups + n: group gid, or node id as ngroups + id */
  int32_t *seq, *ord;             /* position -> vertex (-1: merged away), vertex -> position */
  int32_t *mhead, *mnext, *mtail; /* group -> its first member, node -> the next, group -> its last */
  int32_t *mark, *stack, *tmp;    /* per vertex: the walk that reached it; walks' scratch */
  int32_t walk, nseq;
  int64_t budget; /* edges the walks may still follow */
} quotient;

static int32_t vertex_of(const fuser *f, int32_t node) {
  int32_t gid = group_of(f, node);
  return gid >= 0 ? gid : f->ngroups + node;
}

/* The first node of vertex v; next_node gives the others. */
static int32_t first_node(const fuser *f, const quotient *q, int32_t v) {
  return v < f->ngroups ? q->mhead[v] : v - f->ngroups;
}

static int32_t next_node(const fuser *f, const quotient *q, int32_t v, int32_t node) {
  return v < f->ngroups ? q->mnext[node] : -1;
}

/* Whether vertex v stands for something: a group's root, a node in no group. */
static bool live_vertex(const fuser *f, int32_t v) {
  return v < f->ngroups ? f->parent[v] == v : group_of(f, v - f->ngroups) < 0;
}

/* Member lists and a topological order of the vertices (Kahn's); false on a cycle. */
static bool order_vertices(fuser *f, quotient *q) {
  int32_t *indeg = q->tmp, nlive = 0, tail = 0;
  for (int32_t v = 0; v < q->nv; v++) indeg[v] = 0;
  for (int32_t gid = 0; gid < f->ngroups; gid++) q->mhead[gid] = q->mtail[gid] = -1;
  for (int32_t p = f->n - 1; p >= 0; p--) { /* lists in topological order */
    int32_t id = f->order[p], gid = group_of(f, id);
    if (gid < 0) continue;
    q->mnext[id] = q->mhead[gid];
    q->mhead[gid] = id;
    if (q->mtail[gid] < 0) q->mtail[gid] = id;
  }
  for (int32_t id = 0; id < f->n; id++)
    for (int32_t e = f->g->nodes[id].first_use; e >= 0; e = f->g->edges[e].next_use) {
      int32_t c = f->g->edges[e].consumer;
      if (c < f->n && vertex_of(f, c) != vertex_of(f, id)) indeg[vertex_of(f, c)]++;
    }
  for (int32_t v = 0; v < q->nv; v++) {
    q->ord[v] = -1;
    if (!live_vertex(f, v)) continue;
    nlive++;
    if (indeg[v] == 0) q->seq[tail++] = v;
  }
  for (int32_t head = 0; head < tail; head++) {
    int32_t v = q->seq[head];
    q->ord[v] = head;
    for (int32_t m = first_node(f, q, v); m >= 0; m = next_node(f, q, v, m))
      for (int32_t e = f->g->nodes[m].first_use; e >= 0; e = f->g->edges[e].next_use) {
        int32_t c = f->g->edges[e].consumer, w = c < f->n ? vertex_of(f, c) : v;
        if (w != v && --indeg[w] == 0) q->seq[tail++] = w;
      }
  }
  q->nseq = tail;
  return tail == nlive;
}

/* Whether a member of group y reads a reduction of group x (its value needs every block). */
static bool reads_reduction(const fuser *f, const quotient *q, int32_t y, int32_t x) {
  for (int32_t m = q->mhead[y]; m >= 0; m = q->mnext[m]) {
    const nbgraph_node *nd = &f->g->nodes[m];
    for (int32_t i = 0; i < operand_inputs(nd); i++) {
      int32_t src = f->g->edges[nd->in0 + i].src;
      if (group_of(f, src) == x && nbop_fused_is_reduction(f->g->nodes[src].def)) return true;
    }
  }
  return false;
}

/* Walks forward from x over vertices placed before y, marking those it reaches. False
   when a path reaches y through another vertex, or past MERGE_WALK_CAP edges. */
static bool reach_before(const fuser *f, quotient *q, int32_t x, int32_t y) {
  int32_t top = 0, steps = 0;
  q->mark[x] = ++q->walk;
  q->stack[top++] = x;
  while (top > 0) {
    int32_t v = q->stack[--top];
    for (int32_t m = first_node(f, q, v); m >= 0; m = next_node(f, q, v, m))
      for (int32_t e = f->g->nodes[m].first_use; e >= 0; e = f->g->edges[e].next_use) {
        int32_t c = f->g->edges[e].consumer, w = c < f->n ? vertex_of(f, c) : v;
        if (++steps > MERGE_WALK_CAP || --q->budget < 0 || (w == y && v != x)) return false;
        if (w == v || w == y || q->mark[w] == q->walk || q->ord[w] > q->ord[y]) continue;
        q->mark[w] = q->walk;
        q->stack[top++] = w;
      }
  }
  return true;
}

/* The order once x (at a) and y (at b) are one vertex x: positions a .. b hold freed
   slots (y's, and those of earlier merges), the vertices the walk did not reach, x, then
   those it reached, each in order. */
static void reorder_merged(quotient *q, int32_t x, int32_t a, int32_t b) {
  int32_t k = 0, nlive = 1;
  for (int32_t i = a + 1; i < b; i++) nlive += q->seq[i] >= 0;
  while (k < b - a + 1 - nlive) q->tmp[k++] = -1;
  for (int32_t i = a + 1; i < b; i++)
    if (q->seq[i] >= 0 && q->mark[q->seq[i]] != q->walk) q->tmp[k++] = q->seq[i];
  q->tmp[k++] = x;
  for (int32_t i = a + 1; i < b; i++)
    if (q->seq[i] >= 0 && q->mark[q->seq[i]] == q->walk) q->tmp[k++] = q->seq[i];
  for (int32_t i = 0; i < k; i++) {
    q->seq[a + i] = q->tmp[i];
    if (q->tmp[i] >= 0) q->ord[q->tmp[i]] = a + i;
  }
}

/* Groups x and y (roots) become one when they can: one shape, within the program's cap,
   neither reads the other's reductions, and no path between them through another vertex. */
static void try_merge(fuser *f, quotient *q, int32_t x, int32_t y) {
  if (x == y || x >= f->ngroups || y >= f->ngroups) return;
  if (q->ord[x] > q->ord[y]) {
    int32_t t = x;
    x = y;
    y = t;
  }
  fuse_group *gx = &f->groups[x];
  const fuse_group *gy = &f->groups[y];
  if (!shapes_fit(&gx->meta, &gy->meta) || gx->ninstr + gy->ninstr > NBOP_FUSED_MAX_INSTR ||
      reads_reduction(f, q, y, x) || reads_reduction(f, q, x, y) || !reach_before(f, q, x, y))
    return;
  f->parent[y] = x;
  for (int d = 0; d < gx->meta.rank; d++)
    if (gx->meta.shape[d] < 0) gx->meta.shape[d] = gy->meta.shape[d];
  gx->ninstr += gy->ninstr;
  gx->nmember += gy->nmember;
  q->mnext[q->mtail[x]] = q->mhead[y];
  q->mtail[x] = q->mtail[y];
  reorder_merged(q, x, q->ord[x], q->ord[y]);
}

/* A node of each vertex v's members read (up to MERGE_FANOUT), each vertex once. */
static int32_t producers_of(const fuser *f, quotient *q, int32_t v, int32_t *out) {
  int32_t n = 0;
  ++q->walk;
  for (int32_t m = first_node(f, q, v); m >= 0; m = next_node(f, q, v, m)) {
    const nbgraph_node *nd = &f->g->nodes[m];
    for (int32_t i = 0; i < operand_inputs(nd) && n < MERGE_FANOUT; i++) {
      int32_t src = f->g->edges[nd->in0 + i].src, w = vertex_of(f, src);
      if (w == v || q->mark[w] == q->walk) continue;
      q->mark[w] = q->walk;
      out[n++] = src;
    }
  }
  return n;
}

/* Group y merges with the groups it reads (siblings false), or with the other readers of
   what it reads (true). */
static void merge_around(fuser *f, quotient *q, int32_t y, bool siblings) {
  int32_t prod[MERGE_FANOUT], np = producers_of(f, q, y, prod);
  for (int32_t i = 0; i < np; i++) {
    int32_t p = vertex_of(f, prod[i]), seen = 0; /* its vertex now: merges go on */
    if (!siblings) {
      try_merge(f, q, p, find(f, y));
      continue;
    }
    for (int32_t m = first_node(f, q, p); m >= 0 && seen < MERGE_FANOUT; m = next_node(f, q, p, m))
      for (int32_t e = f->g->nodes[m].first_use; e >= 0 && seen < MERGE_FANOUT; e = f->g->edges[e].next_use, seen++)
        if (f->g->edges[e].consumer < f->n && needed(f, f->g->edges[e].consumer))
          try_merge(f, q, vertex_of(f, f->g->edges[e].consumer), find(f, y));
  }
}

static nb_code merge_groups(fuser *f) {
  quotient q = {.nv = f->ngroups + f->n, .budget = (int64_t)MERGE_WALKS_PER_NODE * (f->n + MERGE_WALK_CAP)};
  size_t nv = (size_t)q.nv + 1;
  int32_t *roots = malloc(nv * sizeof *roots);
  q.seq = malloc(nv * sizeof *q.seq);
  q.ord = malloc(nv * sizeof *q.ord);
  q.mark = calloc(nv, sizeof *q.mark);
  q.stack = malloc(nv * sizeof *q.stack);
  q.tmp = malloc(nv * sizeof *q.tmp);
  q.mhead = malloc(nv * sizeof *q.mhead);
  q.mtail = malloc(nv * sizeof *q.mtail);
  q.mnext = malloc(nv * sizeof *q.mnext);
  int32_t nroots = 0;
  nb_code code =
      roots && q.seq && q.ord && q.mark && q.stack && q.tmp && q.mhead && q.mtail && q.mnext ? NB_OK : NB_NOMEM;
  if (!code && order_vertices(f, &q)) {
    for (int32_t i = 0; i < q.nseq; i++)
      if (q.seq[i] < f->ngroups) roots[nroots++] = q.seq[i];
    for (int pass = 0; pass < 2; pass++)
      for (int32_t i = 0; i < nroots; i++) merge_around(f, &q, find(f, roots[i]), pass == 1);
  }
  free(roots);
  free(q.seq);
  free(q.ord);
  free(q.mark);
  free(q.stack);
  free(q.tmp);
  free(q.mhead);
  free(q.mtail);
  free(q.mnext);
  return code;
}

/* ---- duplicating cheap producers ------------------------------------------------------- */

/* A group that reads a full-shaped value another group computes recomputes it (and the
   values it comes from, back to values it cannot) instead, when that reads at most one
   full-shaped tensor it did not read already: never more reads than reading the value, and
   once every group that reads it recomputes it, nobody writes it (LayerNorm's centered
   input, its gradient's scaled upstream gradient, a broadcast row statistic). Each
   element is computed by the same function as before, so results keep their bits. The
   quotient graph stays acyclic: a group's new inputs are ancestors of the value it no
   longer reads, so every dependency between fused nodes follows a path there was. */

/* The most members one value's recomputation takes. */
#define CONE_CAP 8

typedef struct dup_pair {
  int32_t group, node;
} dup_pair;

typedef struct dup_list {
  dup_pair *at;
  int32_t n, cap;
} dup_list;

/* The tensors a group reads from outside, each once. */
typedef struct group_inputs {
  int64_t key[NBOP_FUSED_MAX_INSTR * NBOP_FUSED_MAX_ARGS];
  int32_t n;
} group_inputs;

/* A value's recomputation: the nodes (the value's first), their instructions, and the
   tensors they read from outside the group, each once. */
typedef struct cone {
  int32_t node[CONE_CAP];
  int32_t n, ninstr;
  group_inputs leaves;
} cone;

/* Whether group gid computes node so far: its member or its duplicate. */
static bool computed_in(const fuser *f, int32_t gid, int32_t node) {
  return group_of(f, node) == gid || f->host_mark[node] == gid;
}

/* Whether op def costs about as little per element as reading an element does: add,
   subtract, multiply, divide, negate, square, min/max, broadcast. Recomputing a tanh, an
   exp or a power costs more than reading its result back (a 1M-element tanh takes longer
   than reading 4 MB). */
static bool cheap_op(const nbop_def *def) {
  static const char *const cheap[] = {"AddV2",  "Add",     "Sub",     "Mul",         "RealDiv", "Neg",
                                      "Square", "Maximum", "Minimum", "BroadcastTo", "AddN",    "AccumulateNV2"};
  for (size_t i = 0; i < sizeof cheap / sizeof *cheap; i++)
    if (strcmp(def->name, cheap[i]) == 0) return true;
  return false;
}

/* Whether group gid may recompute node: a cheap op (cheap_op, so no reduction), a member
   of another group, of gid's shape. */
static bool duplicable(const fuser *f, int32_t gid, int32_t node) {
  const nbgraph_node *nd = &f->g->nodes[node];
  int32_t h = group_of(f, node);
  return h >= 0 && h != gid && cheap_op(nd->def) && shapes_fit(&f->g->outs[nd->out0].meta, &f->groups[gid].meta);
}

/* Whether a tensor read by group gid has the group's shape (else it is broadcast). */
static bool full_shaped(const fuser *f, int32_t gid, int64_t key) {
  return shapes_fit(&out_of(f->g, key)->meta, &f->groups[gid].meta);
}

static bool holds(const group_inputs *in, int64_t key) {
  for (int32_t i = 0; i < in->n; i++)
    if (in->key[i] == key) return true;
  return false;
}

/* Adds the operands of node that group gid does not compute; false when full. */
static bool add_operands(const fuser *f, int32_t gid, int32_t node, group_inputs *in) {
  const nbgraph_node *nd = &f->g->nodes[node];
  for (int32_t i = 0; i < operand_inputs(nd); i++) {
    int64_t key = f->orig[nd->in0 + i];
    if (computed_in(f, gid, nbgraph_key_node(key)) || holds(in, key)) continue;
    if (in->n == (int32_t)(sizeof in->key / sizeof *in->key)) return false;
    in->key[in->n++] = key;
  }
  return true;
}

/* The inputs of group gid: those of its members own[0 .. nown) and of its duplicates
   d[first ..). */
static void collect_inputs(const fuser *f, int32_t gid, const int32_t *own, int32_t nown, const dup_list *d,
                           int32_t first, group_inputs *in) {
  in->n = 0;
  for (int32_t i = 0; i < nown; i++) add_operands(f, gid, own[i], in);
  for (int32_t i = first; i < d->n; i++) add_operands(f, gid, d->at[i].node, in);
}

/* The nodes group gid would recompute for node's value, back to values it computes or
   cannot recompute; false past CONE_CAP members. */
static bool gather_cone(fuser *f, int32_t gid, int32_t node, cone *c) {
  int32_t stack[CONE_CAP], top = 0;
  c->n = c->ninstr = c->leaves.n = 0;
  f->seen[node] = ++f->walk;
  stack[top++] = node;
  while (top > 0) {
    int32_t id = stack[--top];
    const nbgraph_node *nd = &f->g->nodes[id];
    c->node[c->n++] = id;
    c->ninstr += instr_count(nd);
    for (int32_t i = 0; i < operand_inputs(nd); i++) {
      int32_t src = nbgraph_key_node(f->orig[nd->in0 + i]);
      if (f->seen[src] == f->walk || computed_in(f, gid, src) || !duplicable(f, gid, src)) continue;
      if (c->n + top == CONE_CAP) return false;
      f->seen[src] = f->walk;
      stack[top++] = src;
    }
  }
  for (int32_t i = 0; i < c->n; i++) f->host_mark[c->node[i]] = gid; /* for add_operands; undone below */
  bool fits = true;
  for (int32_t i = 0; i < c->n && fits; i++) fits = add_operands(f, gid, c->node[i], &c->leaves);
  for (int32_t i = 0; i < c->n; i++) f->host_mark[c->node[i]] = -1;
  return fits;
}

/* Full-shaped tensors cone c reads that group gid (inputs in) does not read already. */
static int32_t new_full_reads(const fuser *f, int32_t gid, const cone *c, const group_inputs *in) {
  int32_t n = 0;
  for (int32_t i = 0; i < c->leaves.n; i++) n += !holds(in, c->leaves.key[i]) && full_shaped(f, gid, c->leaves.key[i]);
  return n;
}

static bool add_duplicates(fuser *f, int32_t gid, const cone *c, dup_list *d) {
  if (!nbcore_grow_array((void **)&d->at, &d->cap, d->n + c->n, sizeof *d->at)) return false;
  for (int32_t i = 0; i < c->n; i++) {
    d->at[d->n++] = (dup_pair){gid, c->node[i]};
    f->host_mark[c->node[i]] = gid;
  }
  f->groups[gid].ninstr += c->ninstr;
  return true;
}

/* One value group gid reads that it takes to recompute; false when none. */
static bool duplicate_one(fuser *f, int32_t gid, const group_inputs *in, dup_list *d, nb_code *code) {
  cone c;
  for (int32_t i = 0; i < in->n; i++) {
    int32_t src = nbgraph_key_node(in->key[i]);
    if (!duplicable(f, gid, src) || !gather_cone(f, gid, src, &c)) continue;
    if (f->groups[gid].ninstr + c.ninstr > NBOP_FUSED_MAX_INSTR || new_full_reads(f, gid, &c, in) > 1) continue;
    if (!add_duplicates(f, gid, &c, d)) *code = NB_NOMEM;
    return !*code;
  }
  return false;
}

/* The duplicates of every group of two or more members (own lists in members/mstart). */
static nb_code duplicate_producers(fuser *f, dup_list *d) {
  nb_code code = NB_OK;
  group_inputs in;
  for (int32_t gid = 0; gid < f->ngroups && !code; gid++) {
    const int32_t *own = f->members + f->mstart[gid];
    int32_t nown = f->mstart[gid + 1] - f->mstart[gid], first = d->n;
    if (f->parent[gid] != gid || nown < 2) continue;
    do collect_inputs(f, gid, own, nown, d, first, &in);
    while (duplicate_one(f, gid, &in, d, &code));
  }
  return code;
}

/* members/mstart: each group's own members and duplicates, hosts/hstart: each node's
   duplicating groups, both from d (counting sorts by position: topological within). */
static nb_code gather_members(fuser *f, const dup_list *d) {
  free(f->members);
  free(f->hosts);
  f->members = malloc((size_t)(f->n + d->n + 1) * sizeof *f->members);
  f->hosts = malloc((size_t)(d->n + 1) * sizeof *f->hosts);
  if (!f->members || !f->hosts) return NB_NOMEM;
  memset(f->mstart, 0, (size_t)(f->ngroups + 2) * sizeof *f->mstart);
  memset(f->hstart, 0, (size_t)(f->n + 2) * sizeof *f->hstart);
  for (int32_t id = 0; id < f->n; id++)
    if (group_of(f, id) >= 0) f->mstart[group_of(f, id) + 2]++;
  for (int32_t i = 0; i < d->n; i++) {
    f->mstart[d->at[i].group + 2]++;
    f->hstart[d->at[i].node + 2]++;
  }
  for (int32_t i = 2; i <= f->ngroups + 1; i++) f->mstart[i] += f->mstart[i - 1];
  for (int32_t i = 2; i <= f->n + 1; i++) f->hstart[i] += f->hstart[i - 1];
  for (int32_t i = 0; i < d->n; i++) f->hosts[f->hstart[d->at[i].node + 1]++] = d->at[i].group;
  for (int32_t p = 0; p < f->n; p++) {
    int32_t id = f->order[p], gid = group_of(f, id);
    if (gid >= 0) f->members[f->mstart[gid + 1]++] = id;
    for (int32_t i = f->hstart[id]; i < f->hstart[id + 1]; i++) f->members[f->mstart[f->hosts[i] + 1]++] = id;
  }
  return NB_OK;
}

/* ---- building the fused node --------------------------------------------------------- */

typedef struct group_build {
  int32_t gid;
  int32_t *members, nmembers; /* in topological order */
  int64_t *ins;               /* the program's inputs: (node, output) keys */
  int32_t nin;
  int32_t *value; /* member index -> its value's instruction */
  nbop_fused_program *prog;
} group_build;

static bool in_group(const fuser *f, int32_t node, int32_t gid) { return group_of(f, node) == gid; }

/* An operand while the program's inputs are still being found: input `index`, or the
   value of instruction `index`. */
typedef struct raw_arg {
  bool input;
  int32_t index;
} raw_arg;

/* The tensor edge e read when the pass began as an operand: a value the program computes
   (a member's, a duplicate's), else a program input (added once): the fused node's output
   that now holds it when its group was fused before. */
static raw_arg operand_of(group_build *b, const fuser *f, int32_t e) {
  int64_t key = f->orig[e];
  int32_t src = nbgraph_key_node(key);
  for (int32_t m = 0; m < b->nmembers; m++)
    if (b->members[m] == src) return (raw_arg){false, b->value[m]};
  if (f->fused_key[src] >= 0) key = f->fused_key[src];
  for (int32_t i = 0; i < b->nin; i++)
    if (b->ins[i] == key) return (raw_arg){true, i};
  b->ins[b->nin] = key;
  return (raw_arg){true, b->nin++};
}

/* Swaps an input of the group's full shape into place 0, where the fused node's output may
   take over its block when it dies there (input forwarding). */
static void put_full_input_first(const fuser *f, group_build *b, raw_arg *raw, int32_t ninstr) {
  const nbop_meta *full = &f->groups[b->gid].meta;
  int32_t j = 0;
  while (j < b->nin) {
    const nbop_meta *m = &out_of(f->g, b->ins[j])->meta;
    if (m->rank == full->rank && !memcmp(m->shape, full->shape, (size_t)m->rank * sizeof *m->shape)) break;
    j++;
  }
  if (j == 0 || j == b->nin) return;
  int64_t key = b->ins[0];
  b->ins[0] = b->ins[j];
  b->ins[j] = key;
  for (int32_t i = 0; i < ninstr; i++)
    for (int32_t a = 0; a < b->prog->instr[i].nargs; a++) {
      raw_arg *r = &raw[i * NBOP_FUSED_MAX_ARGS + a];
      if (r->input && (r->index == 0 || r->index == j)) r->index = r->index == 0 ? j : 0;
    }
}

/* The instructions of the members (duplicates included) in order (AddN as a chain of adds: ((x0 + x1) + x2)
   ..., AddN's own order), operands numbered once every input is known. */
static void build_program(fuser *f, group_build *b, raw_arg *raw) {
  const nb_graph *g = f->g;
  int32_t ninstr = 0;
  for (int32_t m = 0; m < b->nmembers; m++) {
    const nbgraph_node *nd = &g->nodes[b->members[m]];
    int32_t steps = instr_count(nd), nargs = instr_args(nd);
    for (int32_t s = 0; s < steps; s++) {
      int32_t i = ninstr++;
      for (int32_t j = 0; j < nargs; j++) {
        int32_t e = nd->in0 + (s > 0 ? s + 1 : j);
        raw[i * NBOP_FUSED_MAX_ARGS + j] = s > 0 && j == 0 ? (raw_arg){false, i - 1} : operand_of(b, f, e);
      }
      b->prog->instr[i] =
          (nbop_fused_instr){.def = nd->def,
                             .attr = nd->attr,
                             .node = nd->name,
                             .nargs = nargs,
                             .known = has_known_input(nd) ? edge_value(g, &g->edges[nd->in0 + 1]) : NULL};
    }
    b->value[m] = ninstr - 1;
  }
  b->prog->ninstr = ninstr;
  b->prog->nin = b->nin;
  put_full_input_first(f, b, raw, ninstr);
  for (int32_t i = 0; i < ninstr; i++)
    for (int32_t j = 0; j < b->prog->instr[i].nargs; j++) {
      const raw_arg *r = &raw[i * NBOP_FUSED_MAX_ARGS + j];
      b->prog->instr[i].args[j] = r->input ? r->index : b->nin + r->index;
    }
}

/* Whether group gid (-1: none) computes node: its member or its duplicate. */
static bool group_computes(const fuser *f, int32_t gid, int32_t node) {
  if (gid < 0) return false;
  if (group_of(f, node) == gid) return true;
  for (int32_t i = f->mstart[gid]; i < f->mstart[gid + 1]; i++)
    if (f->members[i] == node) return true;
  return false;
}

/* Whether consumer c reads node's value from outside where it runs: alone, in its group,
   or in a group that duplicates it (a fused node made before: it reads it). */
static bool reads_from_outside(const fuser *f, int32_t c, int32_t node) {
  if (c >= f->n || !group_computes(f, group_of(f, c), node)) return true;
  for (int32_t i = f->hstart[c]; i < f->hstart[c + 1]; i++)
    if (!group_computes(f, f->hosts[i], node)) return true;
  return false;
}

/* Whether member node's value leaves its group: a needed consumer reads it from outside,
   or it is fetched. */
static bool leaves_group(const fuser *f, int32_t node) {
  const nb_graph *g = f->g;
  for (int32_t e = g->nodes[node].first_use; e >= 0; e = g->edges[e].next_use)
    if (needed(f, g->edges[e].consumer) && reads_from_outside(f, g->edges[e].consumer, node)) return true;
  for (int i = 0; i < f->nfetch; i++)
    if (nbgraph_key_node(f->keys[f->nfeed + i]) == node) return true;
  return false;
}

static void link_use(nb_graph *g, int32_t e) {
  g->edges[e].next_use = g->nodes[g->edges[e].src].first_use;
  g->nodes[g->edges[e].src].first_use = e;
}

/* Moves every use of member node's output outside the group, and its fetches, to output
   k of the fused node. */
static void redirect_uses(fuser *f, int32_t gid, int32_t node, int32_t fused, int32_t k) {
  nb_graph *g = f->g;
  int32_t *link = &g->nodes[node].first_use;
  while (*link >= 0) {
    int32_t e = *link;
    if (in_group(f, g->edges[e].consumer, gid)) {
      link = &g->edges[e].next_use;
      continue;
    }
    *link = g->edges[e].next_use; /* unlinked from node's list, linked into the fused node's */
    g->edges[e].src = fused;
    g->edges[e].out = k;
    link_use(g, e);
  }
  for (int i = 0; i < f->nfetch; i++)
    if (nbgraph_key_node(f->keys[f->nfeed + i]) == node) f->keys[f->nfeed + i] = nbgraph_key(fused, k);
  f->fused_key[node] = nbgraph_key(fused, k);
}

/* A name no user's node can have ('_' starts no node name) and no scope holds. */
static const char *fused_name(nb_graph *g, const char *last_member) {
  char buf[NBGRAPH_SCOPE_CAP + 320];
  snprintf(buf, sizeof buf, "_fused/%s", last_member);
  return nbcore_arena_strdup(&g->arena, buf);
}

/* The fused node: inputs b->ins, outputs the members' values that leave the group. */
static nb_code add_fused_node(fuser *f, group_build *b, const int32_t *out_members, int32_t nout) {
  nb_graph *g = f->g;
  const nbop_def *def = nbop_fused_def();
  if (!nbcore_grow_array((void **)&g->nodes, &g->nodes_cap, g->nnodes + 1, sizeof *g->nodes) ||
      !nbcore_grow_array((void **)&g->edges, &g->edges_cap, g->nedges + b->nin, sizeof *g->edges) ||
      !nbcore_grow_array((void **)&g->outs, &g->outs_cap, g->nouts + nout, sizeof *g->outs))
    return NB_NOMEM;
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(def, a);
  a[NBOP_FUSED_N].i = b->nin;
  a[NBOP_FUSED_NUM_OUTPUTS].i = nout;
  a[NBOP_FUSED_PROGRAM].i = nbcore_bits_of(&b->prog, sizeof b->prog);
  nbop_attrval *attr = nbop_attrs_copy(&g->arena, def, a);
  const char *name = fused_name(g, g->nodes[b->members[b->nmembers - 1]].name);
  if (!attr || !name) return NB_NOMEM;
  int32_t id = g->nnodes++;
  g->nodes[id] = (nbgraph_node){.def = def,
                                .name = name,
                                .in0 = g->nedges,
                                .nin = b->nin,
                                .ctrl = -1,
                                .out0 = g->nouts,
                                .nout = nout,
                                .first_use = -1,
                                .attr = attr};
  for (int32_t i = 0; i < b->nin; i++) {
    int32_t e = g->nedges++;
    g->edges[e] = (nbgraph_edge){
        .src = nbgraph_key_node(b->ins[i]), .out = nbgraph_key_out(b->ins[i]), .consumer = id, .next_ctrl = -1};
    link_use(g, e);
  }
  for (int32_t k = 0; k < nout; k++) {
    g->outs[g->nouts++] = (nbgraph_out){g->outs[g->nodes[out_members[k]].out0].meta, NULL};
    redirect_uses(f, b->gid, out_members[k], id, k);
  }
  return NB_OK;
}

/* Keeps the members of b whose values are needed, in order: the outputs (is_out), and,
   back to front, what a kept member reads (a member whose readers outside all recompute
   it may be needed by none). Returns the instructions they take. */
static int32_t keep_needed_members(const fuser *f, group_build *b, int32_t *kept, bool *is_out) {
  bool need[NBOP_FUSED_MAX_INSTR] = {false};
  for (int32_t m = b->nmembers - 1; m >= 0; m--) {
    const nbgraph_node *nd = &f->g->nodes[b->members[m]];
    is_out[m] = group_of(f, b->members[m]) == b->gid && leaves_group(f, b->members[m]);
    if (!(need[m] |= is_out[m])) continue;
    for (int32_t i = 0; i < operand_inputs(nd); i++)
      for (int32_t j = 0; j < m; j++) need[j] |= b->members[j] == nbgraph_key_node(f->orig[nd->in0 + i]);
  }
  int32_t n = 0, len = 0;
  for (int32_t m = 0; m < b->nmembers; m++) {
    if (!need[m]) continue;
    is_out[n] = is_out[m];
    kept[n++] = b->members[m];
    len += instr_count(&f->g->nodes[b->members[m]]);
  }
  b->members = kept;
  b->nmembers = n;
  return len;
}

/* The program of group b (members set) in g's arena, then its node. */
static nb_code fuse_group_nodes(fuser *f, group_build *b) {
  nb_graph *g = f->g;
  int32_t kept[NBOP_FUSED_MAX_INSTR], outs[NBOP_FUSED_MAX_INSTR], nout = 0;
  bool is_out[NBOP_FUSED_MAX_INSTR];
  int32_t len = keep_needed_members(f, b, kept, is_out);
  for (int32_t m = 0; m < b->nmembers; m++)
    if (is_out[m]) outs[nout++] = m;
  if (nout == 0 || b->nmembers < 2)
    return NB_OK; /* nothing reads it (sessions never run it), or one op runs as built */
  raw_arg raw[NBOP_FUSED_MAX_INSTR * NBOP_FUSED_MAX_ARGS];
  int64_t ins[NBOP_FUSED_MAX_INSTR * NBOP_FUSED_MAX_ARGS];
  int32_t value[NBOP_FUSED_MAX_INSTR];
  b->ins = ins;
  b->nin = 0;
  b->value = value;
  b->prog = nbcore_arena_alloc(&g->arena, sizeof *b->prog);
  if (!b->prog || !(b->prog->instr = nbcore_arena_alloc(&g->arena, (size_t)len * sizeof *b->prog->instr)) ||
      !(b->prog->outs = nbcore_arena_alloc(&g->arena, (size_t)nout * sizeof *b->prog->outs)))
    return NB_NOMEM;
  build_program(f, b, raw);
  b->prog->dtype = f->groups[b->gid].meta.dtype;
  b->prog->nout = nout;
  for (int32_t k = 0; k < nout; k++) {
    b->prog->outs[k] = value[outs[k]];
    outs[k] = b->members[outs[k]];
  }
  return add_fused_node(f, b, outs, nout);
}

/* Each group of two or more members, with the producers it duplicates. */
static nb_code fuse_groups(fuser *f) {
  dup_list d = {0};
  f->mstart = malloc((size_t)(f->ngroups + 2) * sizeof *f->mstart);
  f->hstart = malloc((size_t)(f->n + 2) * sizeof *f->hstart);
  nb_code code = f->mstart && f->hstart ? gather_members(f, &d) : NB_NOMEM;
  if (!code) code = duplicate_producers(f, &d);
  if (!code) code = gather_members(f, &d);
  for (int32_t gid = 0; !code && gid < f->ngroups; gid++) {
    group_build b = {
        .gid = gid, .members = f->members + f->mstart[gid], .nmembers = f->mstart[gid + 1] - f->mstart[gid]};
    if (f->parent[gid] == gid && b.nmembers > 1) code = fuse_group_nodes(f, &b);
  }
  free(d.at);
  return code;
}

/* The edges' sources when the pass began: fusing a group redirects its outputs' uses. */
static void record_sources(fuser *f) {
  for (int32_t e = 0; e < f->g->nedges; e++) f->orig[e] = nbgraph_key(f->g->edges[e].src, f->g->edges[e].out);
  for (int32_t i = 0; i < f->n; i++) {
    f->group[i] = f->host_mark[i] = -1;
    f->fused_key[i] = -1;
    f->seen[i] = 0;
  }
}

static void free_fuser(fuser *f) {
  free(f->pos);
  free(f->order);
  free(f->group);
  free(f->parent);
  free(f->groups);
  free(f->orig);
  free(f->fused_key);
  free(f->members);
  free(f->mstart);
  free(f->hosts);
  free(f->hstart);
  free(f->host_mark);
  free(f->seen);
}

nb_code nbopt_fuse_elementwise(nb_graph *g, int64_t *keys, int nfeed, int nfetch, bool reductions) {
  fuser f = {.g = g, .keys = keys, .nfeed = nfeed, .nfetch = nfetch, .n = g->nnodes, .reductions = reductions};
  size_t n = (size_t)f.n + 1;
  f.pos = malloc(n * sizeof *f.pos);
  f.order = malloc(n * sizeof *f.order);
  f.group = malloc(n * sizeof *f.group);
  f.parent = malloc(n * sizeof *f.parent);
  f.groups = malloc(n * sizeof *f.groups);
  f.orig = malloc(((size_t)g->nedges + 1) * sizeof *f.orig);
  f.fused_key = malloc(n * sizeof *f.fused_key);
  f.host_mark = malloc(n * sizeof *f.host_mark);
  f.seen = malloc(n * sizeof *f.seen);
  nb_code code = f.pos && f.order && f.group && f.parent && f.groups && f.orig && f.fused_key && f.host_mark && f.seen
                     ? NB_OK
                     : NB_NOMEM;
  if (!code) {
    record_sources(&f);
    mark_needed(&f);
  }
  if (!code && topo_order(&f) == NB_OK) {
    assign_groups(&f);
    code = merge_groups(&f);
    if (!code) code = fuse_groups(&f);
    g->version++; /* sessions plan again */
  }
  free_fuser(&f);
  return code;
}
