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
   broadcast operands are computed while their operand is in cache, without writing it. */
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
  uint32_t gen; /* nodes the fetches need have stamp == gen */
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

/* Tensor (src, out) as an operand: a member's value, else a program input (added once). */
static raw_arg operand_of(group_build *b, const fuser *f, int32_t src, int32_t out) {
  if (in_group(f, src, b->gid))
    for (int32_t m = 0; m < b->nmembers; m++)
      if (b->members[m] == src) return (raw_arg){false, b->value[m]};
  int64_t key = nbgraph_key(src, out);
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

/* The instructions of the members in order (AddN as a chain of adds: ((x0 + x1) + x2)
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
        const nbgraph_edge *e = &g->edges[nd->in0 + (s > 0 ? s + 1 : j)];
        raw[i * NBOP_FUSED_MAX_ARGS + j] = s > 0 && j == 0 ? (raw_arg){false, i - 1} : operand_of(b, f, e->src, e->out);
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

/* Whether member node's value leaves the group: a needed consumer outside it, or a fetch. */
static bool leaves_group(const fuser *f, int32_t gid, int32_t node) {
  const nb_graph *g = f->g;
  for (int32_t e = g->nodes[node].first_use; e >= 0; e = g->edges[e].next_use)
    if (!in_group(f, g->edges[e].consumer, gid) && needed(f, g->edges[e].consumer)) return true;
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

/* The program of group b (members set) in g's arena, then its node. */
static nb_code fuse_group_nodes(fuser *f, group_build *b) {
  nb_graph *g = f->g;
  int32_t len = f->groups[b->gid].ninstr, outs[NBOP_FUSED_MAX_INSTR], nout = 0;
  raw_arg raw[NBOP_FUSED_MAX_INSTR * NBOP_FUSED_MAX_ARGS];
  int64_t ins[NBOP_FUSED_MAX_INSTR * NBOP_FUSED_MAX_ARGS];
  int32_t value[NBOP_FUSED_MAX_INSTR];
  b->ins = ins;
  b->nin = 0;
  b->value = value;
  b->prog = nbcore_arena_alloc(&g->arena, sizeof *b->prog);
  if (!b->prog || !(b->prog->instr = nbcore_arena_alloc(&g->arena, (size_t)len * sizeof *b->prog->instr)))
    return NB_NOMEM;
  build_program(f, b, raw);
  for (int32_t m = 0; m < b->nmembers; m++)
    if (leaves_group(f, b->gid, b->members[m])) outs[nout++] = m;
  if (nout == 0) return NB_OK; /* nothing reads it: sessions never run it */
  if (!(b->prog->outs = nbcore_arena_alloc(&g->arena, (size_t)nout * sizeof *b->prog->outs))) return NB_NOMEM;
  b->prog->dtype = f->groups[b->gid].meta.dtype;
  b->prog->nout = nout;
  for (int32_t k = 0; k < nout; k++) {
    b->prog->outs[k] = value[outs[k]];
    outs[k] = b->members[outs[k]];
  }
  return add_fused_node(f, b, outs, nout);
}

/* Each group of two or more members, its members gathered in topological order. */
static nb_code fuse_groups(fuser *f) {
  int32_t *members = malloc((size_t)(f->n + 1) * sizeof *members);
  int32_t *start = calloc((size_t)f->ngroups + 2, sizeof *start);
  nb_code code = members && start ? NB_OK : NB_NOMEM;
  for (int32_t p = 0; !code && p < f->n; p++) {
    int32_t gid = group_of(f, f->order[p]);
    if (gid >= 0) start[gid + 2]++;
  }
  for (int32_t i = 2; !code && i <= f->ngroups + 1; i++) start[i] += start[i - 1];
  for (int32_t p = 0; !code && p < f->n; p++) { /* counting sort by group, stable: topological within */
    int32_t gid = group_of(f, f->order[p]);
    if (gid >= 0) members[start[gid + 1]++] = f->order[p];
  }
  for (int32_t gid = 0; !code && gid < f->ngroups; gid++) {
    group_build b = {.gid = gid, .members = members + start[gid], .nmembers = start[gid + 1] - start[gid]};
    if (f->parent[gid] == gid && b.nmembers > 1) code = fuse_group_nodes(f, &b);
  }
  free(members);
  free(start);
  return code;
}

nb_code nbopt_fuse_elementwise(nb_graph *g, int64_t *keys, int nfeed, int nfetch, bool reductions) {
  fuser f = {.g = g, .keys = keys, .nfeed = nfeed, .nfetch = nfetch, .n = g->nnodes, .reductions = reductions};
  size_t n = (size_t)f.n + 1;
  f.pos = malloc(n * sizeof *f.pos);
  f.order = malloc(n * sizeof *f.order);
  f.group = malloc(n * sizeof *f.group);
  f.parent = malloc(n * sizeof *f.parent);
  f.groups = malloc(n * sizeof *f.groups);
  nb_code code = f.pos && f.order && f.group && f.parent && f.groups ? NB_OK : NB_NOMEM;
  for (int32_t i = 0; !code && i < f.n; i++) f.group[i] = -1;
  if (!code) mark_needed(&f);
  if (!code && topo_order(&f) == NB_OK) {
    assign_groups(&f);
    code = fuse_groups(&f);
    g->version++; /* sessions plan again */
  }
  free(f.pos);
  free(f.order);
  free(f.group);
  free(f.parent);
  free(f.groups);
  return code;
}
