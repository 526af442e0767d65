/* The optimizer's editable graph: reading a graph in, the edits passes make, and writing
   the result out as a new graph. */
#include "opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ------------------------------------------------------------------------------- */

static uint32_t name_hash(const char *s) {
  uint32_t h = 2166136261u;
  while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
  return h ^ (h >> 15);
}

static bool name_taken(const nbopt_graph *o, const char *name) {
  for (uint32_t i = name_hash(name) & (o->names_cap - 1); o->names[i]; i = (i + 1) & (o->names_cap - 1))
    if (strcmp(o->names[i], name) == 0) return true;
  return false;
}

static bool name_put(nbopt_graph *o, const char *name) {
  if ((o->nnames + 1) * 2 > o->names_cap) {
    uint32_t cap = o->names_cap ? o->names_cap * 2 : 256;
    const char **names = calloc(cap, sizeof *names);
    if (!names) return false;
    for (uint32_t i = 0; i < o->names_cap; i++) {
      if (!o->names[i]) continue;
      uint32_t j = name_hash(o->names[i]) & (cap - 1);
      while (names[j]) j = (j + 1) & (cap - 1);
      names[j] = o->names[i];
    }
    free(o->names);
    o->names = names;
    o->names_cap = cap;
  }
  uint32_t i = name_hash(name) & (o->names_cap - 1);
  while (o->names[i]) i = (i + 1) & (o->names_cap - 1);
  o->names[i] = name;
  o->nnames++;
  return true;
}

/* "<base>/_opt_N": a name no node has (names made by scopes may look like anything, so
   the set of names in use is checked). */
static const char *fresh_name(nbopt_graph *o, const char *base) {
  char buf[NBGRAPH_SCOPE_CAP + 64];
  do snprintf(buf, sizeof buf, "%.*s/_opt_%u", NBGRAPH_SCOPE_CAP, base, o->fresh++);
  while (name_taken(o, buf));
  char *name = nbcore_arena_strdup(&o->arena, buf);
  return name && name_put(o, name) ? name : NULL;
}

/* ---- reading a graph in -------------------------------------------------------------------- */

static bool grow_nodes(nbopt_graph *o, int32_t n) {
  return nbcore_grow_array((void **)&o->nodes, &o->cap, n, sizeof *o->nodes);
}

static nb_code read_node(nbopt_graph *o, const nb_graph *g, int32_t id) {
  const nbgraph_node *s = &g->nodes[id];
  nbopt_node *n = &o->nodes[id];
  *n = (nbopt_node){.def = s->def, .name = s->name, .nin = s->nin, .nout = s->nout, .attr = s->attr, .src = id};
  for (int32_t e = s->ctrl; e >= 0; e = g->edges[e].next_ctrl) n->nctrl++;
  n->in = nbcore_arena_alloc(&o->arena, (size_t)(n->nin + 1) * sizeof *n->in);
  n->ctrl = nbcore_arena_alloc(&o->arena, (size_t)(n->nctrl + 1) * sizeof *n->ctrl);
  /* g->outs holds each output's facts beside its value: copied to an array of facts */
  nbop_meta *meta = nbcore_arena_alloc(&o->arena, (size_t)(n->nout + 1) * sizeof *meta);
  if (!n->in || !n->ctrl || !meta || !name_put(o, s->name)) return NB_NOMEM;
  for (int32_t i = 0; i < n->nout; i++) meta[i] = g->outs[s->out0 + i].meta;
  n->meta = meta;
  for (int32_t i = 0; i < n->nin; i++) n->in[i] = nbgraph_key(g->edges[s->in0 + i].src, g->edges[s->in0 + i].out);
  int32_t k = 0;
  for (int32_t e = s->ctrl; e >= 0; e = g->edges[e].next_ctrl) n->ctrl[k++] = g->edges[e].src;
  return NB_OK;
}

nb_code nbopt_read(nbopt_graph *o, const nb_graph *g, const int64_t *keys, int nfeed, int nfetch) {
  memset(o, 0, sizeof *o);
  o->src = g;
  o->nfeed = nfeed;
  o->nfetch = nfetch;
  o->keys = malloc((size_t)(nfeed + nfetch + 1) * sizeof *o->keys);
  o->values = nb_eager_new();
  if (!o->keys || !o->values || !grow_nodes(o, g->nnodes + 1)) return NB_NOMEM;
  memcpy(o->keys, keys, (size_t)(nfeed + nfetch) * sizeof *keys);
  for (int32_t id = 0; id < g->nnodes; id++) {
    nb_code code = read_node(o, g, id);
    if (code) return code;
    o->n++;
  }
  for (int i = 0; i < nfeed + nfetch; i++) o->nodes[nbgraph_key_node(keys[i])].pinned = true;
  for (int i = 0; i < nfeed; i++) o->nodes[nbgraph_key_node(keys[i])].fed = true;
  for (int32_t id = 0; id < o->n; id++)
    for (int32_t i = 0; i < o->nodes[id].nctrl; i++) o->nodes[o->nodes[id].ctrl[i]].ctrl_src = true;
  return NB_OK;
}

void nbopt_free(nbopt_graph *o) {
  free(o->nodes);
  free(o->keys);
  free(o->names);
  nb_ctx_free(o->values);
  nbcore_arena_free(&o->arena);
}

/* ---- edits --------------------------------------------------------------------------------- */

static int64_t resolve(const nbopt_graph *o, int64_t key) {
  for (;;) {
    const nbopt_node *n = &o->nodes[nbgraph_key_node(key)];
    if (!n->fwd || n->fwd[nbgraph_key_out(key)] == key) return key;
    key = n->fwd[nbgraph_key_out(key)];
  }
}

int64_t nbopt_in(nbopt_graph *o, int32_t id, int i) {
  nbopt_node *n = &o->nodes[id];
  return n->in[i] = resolve(o, n->in[i]);
}

void nbopt_replace(nbopt_graph *o, int64_t from, int64_t to) {
  nbopt_node *n = &o->nodes[nbgraph_key_node(from)];
  if (!n->fwd) { /* out of memory: from keeps its readers, which stays correct */
    n->fwd = nbcore_arena_alloc(&o->arena, (size_t)n->nout * sizeof *n->fwd);
    if (!n->fwd) return;
    for (int32_t k = 0; k < n->nout; k++) n->fwd[k] = nbgraph_key(nbgraph_key_node(from), k);
  }
  n->fwd[nbgraph_key_out(from)] = resolve(o, to);
}

void nbopt_set_input(nbopt_graph *o, int32_t id, int i, int64_t key) {
  o->nodes[id].in[i] = resolve(o, key);
  o->nodes[id].redo = true;
}

bool nbopt_same_meta(const nbop_meta *a, const nbop_meta *b) {
  if (a->dtype != b->dtype || a->rank < 0 || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] < 0 || a->shape[d] != b->shape[d]) return false;
  return true;
}

int nbopt_attr_slot(const nbop_def *def, const char *name) {
  for (int a = 0; a < def->nattrs; a++)
    if (strcmp(def->attrs[a].name, name) == 0) return a;
  return -1;
}

int32_t nbopt_add(nbopt_graph *o, const char *type, const int64_t *in, int nin, const nbop_attrval *attr,
                  const nbop_meta *meta, int nout, const char *base) {
  const nbop_def *def = nbop_lookup(type);
  if (!def || !grow_nodes(o, o->n + 1)) return -1;
  nbop_attrval defaults[NBOP_MAX_ATTRS];
  if (!attr) nbop_attr_defaults(def, defaults);
  nbopt_node n = {.def = def, .nin = nin, .nout = nout, .src = -1, .redo = true};
  n.name = fresh_name(o, base);
  n.in = nbcore_arena_alloc(&o->arena, (size_t)(nin + 1) * sizeof *n.in);
  n.ctrl = nbcore_arena_alloc(&o->arena, sizeof *n.ctrl);
  nbop_meta *m = nbcore_arena_alloc(&o->arena, (size_t)(nout + 1) * sizeof *m);
  n.attr = def->nattrs ? nbop_attrs_copy(&o->arena, def, attr ? attr : defaults) : NULL;
  if (!n.name || !n.in || !n.ctrl || !m || (def->nattrs && !n.attr)) return -1;
  if (nin) memcpy(n.in, in, (size_t)nin * sizeof *in);
  memcpy(m, meta, (size_t)nout * sizeof *meta);
  n.meta = m;
  o->nodes[o->n] = n;
  return o->n++;
}

nbop_attrval *nbopt_own_attrs(nbopt_graph *o, int32_t id) {
  nbopt_node *n = &o->nodes[id];
  nbop_attrval *a = nbop_attrs_copy(&o->arena, n->def, n->attr);
  if (!a) return NULL;
  n->attr = a;
  n->redo = true;
  return a;
}

nbop_meta *nbopt_own_meta(nbopt_graph *o, int32_t id) {
  nbopt_node *n = &o->nodes[id];
  nbop_meta *m = nbcore_arena_alloc(&o->arena, (size_t)n->nout * sizeof *m);
  if (!m) return NULL;
  memcpy(m, n->meta, (size_t)n->nout * sizeof *m);
  n->meta = m;
  return m;
}

static bool random_op(const nbop_def *def) { return strstr(def->name, "Random") || strstr(def->name, "Normal"); }

bool nbopt_movable(const nbopt_graph *o, int32_t id) { return !o->nodes[id].pinned && nbopt_replaceable(o, id); }

bool nbopt_replaceable(const nbopt_graph *o, int32_t id) {
  const nbopt_node *n = &o->nodes[id];
  if (n->fed || n->nctrl || n->ctrl_src || n->def->stateful || n->def->hold_attrs || random_op(n->def)) return false;
  /* attrs holding a function or user pointer (_CustomGradient, _RecomputeGrad, user ops) */
  for (int a = 0; a < n->def->nattrs; a++)
    if (n->def->attrs[a].name[0] == '_') return false;
  return n->def->kernel || n->def->alias >= 0;
}

const nb_tensor *nbopt_value(const nbopt_graph *o, int64_t key) {
  const nbopt_node *n = &o->nodes[nbgraph_key_node(key)];
  if (n->src < 0 || n->redo) /* a Const a pass made holds its value; other new nodes are not known */
    return strcmp(n->def->name, "Const") == 0 ? n->attr[0].tensor : NULL;
  return o->src->outs[o->src->nodes[n->src].out0 + nbgraph_key_out(key)].value;
}

/* ---- walks --------------------------------------------------------------------------------- */

/* Marks (1) the nodes the fetches need (inputs and control inputs, transitively) and the
   fed ones, which the result keeps so that every feed has its tensor there. */
static nb_code mark_live(nbopt_graph *o, uint8_t *live) {
  int32_t *stack = malloc((size_t)(o->n + 1) * sizeof *stack), top = 0;
  if (!stack) return NB_NOMEM;
  for (int i = 0; i < o->nfeed + o->nfetch; i++) {
    int64_t *key = &o->keys[i];
    *key = resolve(o, *key);
    int32_t id = nbgraph_key_node(*key);
    if (!live[id]) live[id] = 1, stack[top++] = id;
  }
  while (top > 0) {
    int32_t id = stack[--top];
    for (int32_t i = 0; i < o->nodes[id].nin; i++) {
      int32_t src = nbgraph_key_node(nbopt_in(o, id, i));
      if (!live[src]) live[src] = 1, stack[top++] = src;
    }
    for (int32_t i = 0; i < o->nodes[id].nctrl; i++) {
      int32_t src = o->nodes[id].ctrl[i];
      if (!live[src]) live[src] = 1, stack[top++] = src;
    }
  }
  free(stack);
  return NB_OK;
}

/* A min-heap of node ids by key: the ready nodes of topo_sort. */
typedef struct ready_heap {
  int32_t *ids, n;
  const int64_t *key;
} ready_heap;

static void heap_push(ready_heap *h, int32_t id) {
  int32_t i = h->n++;
  for (; i > 0 && h->key[h->ids[(i - 1) / 2]] > h->key[id]; i = (i - 1) / 2) h->ids[i] = h->ids[(i - 1) / 2];
  h->ids[i] = id;
}

static int32_t heap_pop(ready_heap *h) {
  int32_t top = h->ids[0], last = h->ids[--h->n], i = 0;
  for (int32_t c; (c = 2 * i + 1) < h->n; i = c) {
    if (c + 1 < h->n && h->key[h->ids[c + 1]] < h->key[h->ids[c]]) c++;
    if (h->key[h->ids[c]] >= h->key[last]) break;
    h->ids[i] = h->ids[c];
  }
  h->ids[i] = last;
  return top;
}

/* Kahn's algorithm over the live nodes, the ready node of least key first (key NULL: of
   least id): pending[id] counts inputs not yet placed. */
static nb_code topo_sort(nbopt_graph *o, const uint8_t *live, const int64_t *key, int32_t *order, int32_t *n) {
  int32_t *pending = calloc((size_t)o->n + 1, sizeof *pending), *first = malloc((size_t)(o->n + 1) * sizeof *first);
  int32_t nedges = 0;
  for (int32_t id = 0; id < o->n; id++) nedges += live[id] ? o->nodes[id].nin + o->nodes[id].nctrl : 0;
  int32_t *next = malloc((size_t)(nedges + 1) * sizeof *next), *reader = malloc((size_t)(nedges + 1) * sizeof *reader);
  int64_t *ids = key ? NULL : malloc((size_t)(o->n + 1) * sizeof *ids);
  ready_heap h = {malloc((size_t)(o->n + 1) * sizeof *h.ids), 0, key ? key : ids};
  if (!pending || !first || !next || !reader || !h.ids || (!key && !ids)) {
    free(pending), free(first), free(next), free(reader), free(h.ids), free(ids);
    return NB_NOMEM;
  }
  for (int32_t id = 0; id < o->n; id++) first[id] = -1;
  for (int32_t id = 0; ids && id < o->n; id++) ids[id] = id;
  int32_t e = 0;
  for (int32_t id = 0; id < o->n; id++) {
    const nbopt_node *u = &o->nodes[id];
    for (int32_t i = 0; live[id] && i < u->nin + u->nctrl; i++, e++) {
      int32_t src = i < u->nin ? nbgraph_key_node(u->in[i]) : u->ctrl[i - u->nin];
      reader[e] = id;
      next[e] = first[src];
      first[src] = e;
      pending[id]++;
    }
  }
  *n = 0;
  int32_t nlive = 0;
  for (int32_t id = 0; id < o->n; id++) {
    nlive += live[id];
    if (live[id] && pending[id] == 0) heap_push(&h, id);
  }
  while (h.n > 0) {
    int32_t id = order[(*n)++] = heap_pop(&h);
    for (int32_t k = first[id]; k >= 0; k = next[k])
      if (--pending[reader[k]] == 0) heap_push(&h, reader[k]);
  }
  free(pending), free(first), free(next), free(reader), free(h.ids), free(ids);
  return *n == nlive ? NB_OK : NB_INVALID; /* a cycle: left to the session, which names it */
}

nb_code nbopt_order(nbopt_graph *o, int32_t **order, int32_t *n) {
  uint8_t *live = calloc((size_t)o->n + 1, 1);
  *order = malloc((size_t)(o->n + 1) * sizeof **order);
  nb_code code = live && *order ? mark_live(o, live) : NB_NOMEM;
  if (!code) code = topo_sort(o, live, NULL, *order, n);
  free(live);
  if (code) {
    free(*order);
    *order = NULL;
  }
  return code;
}

nb_code nbopt_count_uses(nbopt_graph *o, int32_t **counts) {
  int32_t *order, n;
  nb_code code = nbopt_order(o, &order, &n);
  if (code) return code;
  *counts = calloc((size_t)o->n + 1, sizeof **counts);
  if (!*counts) {
    free(order);
    return NB_NOMEM;
  }
  for (int32_t k = 0; k < n; k++)
    for (int32_t i = 0; i < o->nodes[order[k]].nin; i++) (*counts)[nbgraph_key_node(o->nodes[order[k]].in[i])]++;
  for (int i = 0; i < o->nfetch; i++) (*counts)[nbgraph_key_node(o->keys[o->nfeed + i])]++;
  free(order);
  return NB_OK;
}

/* ---- writing a graph out -------------------------------------------------------------------- */

typedef struct writer {
  nbopt_graph *o;
  nb_graph *g;
  nb_ctx *c;
  int32_t *ids; /* new id of each node of o, -1 unwritten */
  char *err;
  size_t errcap;
} writer;

/* Whether node id, copied as it is, would leave a fold undone: its inputs are now all known
   (after rewrites), its own values are not, and folding it is safe. */
static bool now_foldable(const writer *w, int32_t id) {
  const nbopt_node *n = &w->o->nodes[id];
  if (n->nin == 0 || n->def->stateful || n->def->hold_attrs || (!n->def->kernel && n->def->alias < 0)) return false;
  if (nbgraph_node_values_known(w->o->src, &w->o->src->nodes[n->src])) return false;
  for (int32_t i = 0; i < n->nin; i++) {
    int64_t k = n->in[i];
    const nbgraph_node *m = &w->g->nodes[w->ids[nbgraph_key_node(k)]];
    if (!w->g->outs[m->out0 + nbgraph_key_out(k)].value) return false;
  }
  return true;
}

/* Adds node id through the graph context: inference and folding run as when it was built. */
static int32_t write_inferred(writer *w, int32_t id, const char *name) {
  const nbopt_node *n = &w->o->nodes[id];
  nb_tensor *in_small[16], **in = n->nin > 16 ? malloc((size_t)n->nin * sizeof *in) : in_small;
  nb_tensor *out_small[16], **out = n->nout > 16 ? malloc((size_t)n->nout * sizeof *out) : out_small;
  int32_t nid = -1;
  nb_code code = in && out ? NB_OK : NB_NOMEM;
  nb_scope_begin(w->c);
  for (int32_t i = 0; i < n->nin && !code; i++) {
    int64_t k = n->in[i];
    in[i] = nbgraph_handle(w->c, w->g, w->ids[nbgraph_key_node(k)], nbgraph_key_out(k));
    if (!in[i]) code = NB_NOMEM;
  }
  if (!code) code = nbop_dispatch(w->c, n->def, in, n->nin, n->attr, out, n->nout);
  if (!code) {
    nid = w->g->nnodes - 1;
    w->g->nodes[nid].name = name;
    if (n->src >= 0) w->g->nodes[nid].grad_name = w->o->src->nodes[n->src].grad_name;
  } else if (nb_status(w->c)) {
    snprintf(w->err, w->errcap, "%s", nb_error(w->c));
  }
  nb_scope_end(w->c, NULL, 0);
  nb_clear_error(w->c);
  if (in != in_small) free(in);
  if (out != out_small) free(out);
  return nid;
}

static nb_code write_node(writer *w, int32_t id, const char *name) {
  const nbopt_node *n = &w->o->nodes[id];
  int32_t nid;
  if (n->redo || n->src < 0 || now_foldable(w, id)) {
    nid = write_inferred(w, id, name);
  } else {
    int64_t small[16], *in = n->nin > 16 ? malloc((size_t)n->nin * sizeof *in) : small;
    if (!in) return NB_NOMEM;
    for (int32_t i = 0; i < n->nin; i++)
      in[i] = nbgraph_key(w->ids[nbgraph_key_node(n->in[i])], nbgraph_key_out(n->in[i]));
    nid = nbgraph_copy_node(w->g, w->o->src, n->src, name, in);
    if (in != small) free(in);
  }
  if (nid < 0) return w->err[0] ? NB_INTERNAL : NB_NOMEM;
  w->ids[id] = nid;
  for (int32_t i = 0; i < n->nctrl; i++)
    if (nbgraph_add_control(w->g, nid, w->ids[n->ctrl[i]])) return NB_NOMEM;
  return NB_OK;
}

/* Every name is claimed before the first node is written, so a name inference picks for a
   rewritten node (then replaced by its own) never takes one a later node keeps. */
static nb_code write_nodes(writer *w, const int32_t *order, int32_t n) {
  const char **names = malloc((size_t)(n + 1) * sizeof *names);
  if (!names) return NB_NOMEM;
  nb_code code = NB_OK;
  for (int32_t k = 0; k < n && !code; k++)
    if (!(names[k] = nbgraph_claim_name(w->g, w->o->nodes[order[k]].name))) code = NB_NOMEM;
  for (int32_t k = 0; k < n && !code; k++) code = write_node(w, order[k], names[k]);
  free(names);
  return code;
}

/* The order to write the live nodes in: the source graph's wherever the dependencies allow
   (a session's plan then runs, frees and forwards in the order it did), each node a pass
   made just before its first reader. */
static nb_code write_order(nbopt_graph *o, int32_t **order, int32_t *n) {
  nb_code code = nbopt_order(o, order, n);
  if (code) return code;
  int64_t *key = malloc((size_t)(o->n + 1) * sizeof *key);
  uint8_t *live = calloc((size_t)o->n + 1, 1);
  if (!key || !live) {
    free(key), free(live), free(*order);
    return NB_NOMEM;
  }
  for (int32_t id = 0; id < o->n; id++) key[id] = o->nodes[id].src >= 0 ? 2 * (int64_t)id : INT64_MAX;
  for (int32_t k = *n - 1; k >= 0; k--) { /* readers before their inputs */
    const nbopt_node *u = &o->nodes[(*order)[k]];
    live[(*order)[k]] = 1;
    for (int32_t i = 0; i < u->nin; i++) {
      int32_t src = nbgraph_key_node(u->in[i]);
      if (o->nodes[src].src < 0 && key[(*order)[k]] - 1 < key[src]) key[src] = key[(*order)[k]] - 1;
    }
  }
  code = topo_sort(o, live, key, *order, n);
  free(key), free(live);
  if (code) free(*order);
  return code;
}

nb_code nbopt_write(nbopt_graph *o, nb_graph **out, int64_t *mapped, char *err, size_t errcap) {
  int32_t *order, n;
  err[0] = '\0';
  *out = NULL;
  nb_code code = write_order(o, &order, &n);
  if (code) return code;
  writer w = {o, nb_graph_new(), NULL, malloc((size_t)(o->n + 1) * sizeof *w.ids), err, errcap};
  if (w.g) w.c = nb_graph_ctx_new(w.g);
  for (int32_t id = 0; w.ids && id < o->n; id++) w.ids[id] = -1;
  code = w.c && w.ids ? nbgraph_share_vars(w.g, o->src) : NB_NOMEM;
  if (!code) code = write_nodes(&w, order, n);
  for (int i = 0; i < o->nfeed + o->nfetch && !code; i++) {
    int64_t k = o->keys[i]; /* resolved by mark_live; every one written */
    mapped[i] = nbgraph_key(w.ids[nbgraph_key_node(k)], nbgraph_key_out(k));
  }
  nb_ctx_free(w.c);
  free(w.ids);
  free(order);
  if (code) {
    nb_graph_free(w.g);
    return code;
  }
  *out = w.g;
  return NB_OK;
}
