/* Graph IR and the graph context. Nodes, edges and outputs live in three growable
   arrays; names, attr strings and lists in an arena, so adding a node allocates nothing
   in steady state. The graph context builds nodes through the same dispatch as eager
   ops: inference runs at build time with known constants substituted, ops whose inputs
   are all known are folded, and shapes that depend on unknown dims are deferred. */
#include "graph.h"

#include "../core/variable.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nb_code nbgraph_infer(nb_ctx *c, nbop_kargs *k);
static nb_code nbgraph_execute(nb_ctx *c, nbop_kargs *k, nb_tensor **out);
static int32_t nbgraph_capture(nb_graph *g, const nb_tensor *x, bool *nomem);

/* ---- string map (open addressing; keys live in the arena) --------------------------- */

/* FNV-1a, then a murmur3 finalizer: FNV's low bits (the ones the mask keeps) mix
   poorly for names that differ only in trailing digits ("Mul_1", "Mul_2", ...). */
static uint32_t str_hash(const char *s) {
  uint32_t h = 2166136261u;
  while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  return h ^ (h >> 16);
}

/* The slot holding key, or the empty slot where it would go. Hashes are kept beside the
   keys, so a probe only compares strings when the hashes agree. */
static nbgraph_strmap_slot *strmap_slot(nbgraph_strmap *m, const char *key, uint32_t h) {
  for (uint32_t i = h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    nbgraph_strmap_slot *s = &m->slots[i];
    if (!s->key || (s->hash == h && strcmp(s->key, key) == 0)) return s;
  }
}

static int32_t *strmap_find(nbgraph_strmap *m, const char *key) {
  if (!m->cap) return NULL;
  nbgraph_strmap_slot *s = strmap_slot(m, key, str_hash(key));
  return s->key ? &s->val : NULL;
}

static bool strmap_grow(nbgraph_strmap *m) {
  uint32_t cap = m->cap ? m->cap * 2 : 1024;
  nbgraph_strmap_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) return false;
  for (uint32_t i = 0; i < m->cap; i++) {
    const nbgraph_strmap_slot *old = &m->slots[i];
    if (!old->key) continue;
    uint32_t j = old->hash & (cap - 1);
    while (slots[j].key) j = (j + 1) & (cap - 1);
    slots[j] = *old;
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  return true;
}

/* Inserts key (already in the arena, not yet present) with val; false when out of memory. */
static bool strmap_put(nbgraph_strmap *m, const char *key, int32_t val) {
  if ((m->n + 1) * 2 > m->cap && !strmap_grow(m)) return false;
  uint32_t h = str_hash(key);
  *strmap_slot(m, key, h) = (nbgraph_strmap_slot){key, h, val};
  m->n++;
  return true;
}

/* ---- graphs ------------------------------------------------------------------------------ */

nb_graph *nb_graph_new(void) {
  nbop_registry_init();
  nb_graph *g = calloc(1, sizeof *g);
  if (!g) return NULL;
  g->fold = nb_eager_new();
  if (!g->fold) {
    free(g);
    return NULL;
  }
  nb_ctx_set_threads(g->fold, 1);
  return g;
}

void nb_graph_free(nb_graph *g) {
  if (!g) return;
  for (int32_t i = 0; i < g->nouts; i++) nb_tensor_free(g->outs[i].value);
  for (int32_t i = 0; i < g->nnodes; i++) {
    const nbgraph_node *n = &g->nodes[i];
    for (int a = 0; a < n->def->nattrs; a++)
      if (n->def->attrs[a].kind == NB_ATTR_TENSOR) nb_tensor_free(n->attr[a].tensor);
    if (n->def->hold_attrs) n->def->hold_attrs(n->attr, -1);
  }
  for (int32_t i = 0; i < g->nvars; i++) nbcore_variable_release(g->vars[i].var);
  for (int32_t i = 0; i < g->nretired; i++) nb_tensor_free(g->retired[i]);
  free(g->retired);
  if (g->free_funcs) g->free_funcs(g);
  free(g->caps);
  free(g->vars);
  nbcore_arena_free(&g->arena);
  free(g->names.slots);
  free(g->fresh_names);
  free(g->nodes);
  free(g->edges);
  free(g->outs);
  free(g->overrides);
  nb_ctx_free(g->fold);
  free(g);
}

int nb_graph_num_nodes(const nb_graph *g) { return g ? g->nnodes : 0; }

static const nbgraph_node *node_at(const nb_graph *g, int i) {
  return g && i >= 0 && i < g->nnodes ? &g->nodes[i] : NULL;
}

const char *nb_graph_node_name(const nb_graph *g, int i) {
  const nbgraph_node *n = node_at(g, i);
  return n ? n->name : NULL;
}

const char *nb_graph_node_op(const nb_graph *g, int i) {
  const nbgraph_node *n = node_at(g, i);
  return n ? n->def->name : NULL;
}

int nb_graph_node_num_outputs(const nb_graph *g, int i) {
  const nbgraph_node *n = node_at(g, i);
  return n ? n->nout : -1;
}

int nb_graph_node_num_consumers(const nb_graph *g, int i) {
  const nbgraph_node *n = node_at(g, i);
  if (!n) return -1;
  int count = 0;
  for (int32_t e = n->first_use; e >= 0; e = g->edges[e].next_use) count += g->edges[e].out >= 0;
  return count;
}

uint32_t nbgraph_next_gen(nb_graph *g) {
  if (++g->gen == 0) { /* wrapped: clear every stamp once */
    for (int32_t i = 0; i < g->nnodes; i++) g->nodes[i].stamp = g->nodes[i].stamp2 = g->nodes[i].stamp3 = 0;
    g->gen = 1;
  }
  return g->gen;
}

static bool fresh_taken(const nb_graph *g, const char *leaf) {
  for (int32_t i = 0; i < g->nfresh; i++)
    if (strcmp(g->fresh_names[i], leaf) == 0) return true;
  return false;
}

/* In a fresh scope: base, base_1, ... checked against the scope's own names only. */
static const char *fresh_unique_name(nb_graph *g, const char *base) {
  if (g->nfresh == g->fresh_cap &&
      !nbcore_grow_array((void **)&g->fresh_names, &g->fresh_cap, g->nfresh + 1, sizeof *g->fresh_names))
    return NULL;
  char leaf[288];
  int n = snprintf(leaf, sizeof leaf, "%s", base);
  if (n < 0 || (size_t)n >= sizeof leaf - 24) return NULL;
  for (int k = 1; fresh_taken(g, leaf); k++) snprintf(leaf + n, sizeof leaf - (size_t)n, "_%d", k);
  size_t scope = (size_t)g->scope_len, len = strlen(leaf) + 1;
  char *name = nbcore_arena_alloc(&g->arena, scope + len);
  if (!name) return NULL;
  memcpy(name, g->scope, scope);
  memcpy(name + scope, leaf, len);
  g->fresh_names[g->nfresh++] = name + scope;
  return name;
}

const char *nbgraph_unique_name(nb_graph *g, const char *base) {
  if (g->fresh) return fresh_unique_name(g, base);
  char buf[NBGRAPH_SCOPE_CAP + 256];
  int n = snprintf(buf, sizeof buf, "%s%s", g->scope, base);
  if (n < 0 || (size_t)n >= sizeof buf - 24) return NULL;
  int32_t *next = strmap_find(&g->names, buf);
  if (next) { /* taken: try base_N from the base's counter on */
    int32_t k = *next;
    do snprintf(buf + n, sizeof buf - (size_t)n, "_%d", k++);
    while (strmap_find(&g->names, buf));
    *next = k;
  }
  char *name = nbcore_arena_strdup(&g->arena, buf);
  if (!name || !strmap_put(&g->names, name, 1)) return NULL;
  return name;
}

void nbgraph_set_scope(nb_graph *g, const char *scope, bool fresh) {
  int len = snprintf(g->scope, NBGRAPH_SCOPE_CAP, "%s", scope);
  g->scope_len = len < 0 ? 0 : len >= NBGRAPH_SCOPE_CAP ? NBGRAPH_SCOPE_CAP - 1 : len;
  g->fresh = fresh;
  g->nfresh = 0;
}

/* Like TF's name_scope: the scope's name is made unique ("layer", then "layer_1"), so two
   scopes never share names and nothing can be named inside a scope from outside it. */
nb_code nb_name_scope_push(nb_graph *g, const char *name) {
  if (!g || !name || !*name || strchr(name, '/')) return NB_INVALID;
  if (g->nscopes == NBGRAPH_SCOPE_DEPTH) return NB_INVALID;
  size_t n = strlen(name);
  if ((size_t)g->scope_len + n + 32 > NBGRAPH_SCOPE_CAP) return NB_INVALID;
  const char *unique = nbgraph_unique_name(g, name);
  if (!unique) return NB_NOMEM;
  name = unique + g->scope_len;
  n = strlen(name);
  g->scope_marks[g->nscopes++] = g->scope_len;
  memcpy(g->scope + g->scope_len, name, n);
  g->scope_len += (int)n;
  g->scope[g->scope_len++] = '/';
  g->scope[g->scope_len] = '\0';
  return NB_OK;
}

void nb_name_scope_pop(nb_graph *g) {
  if (!g || g->nscopes == 0) return;
  g->scope_len = g->scope_marks[--g->nscopes];
  g->scope[g->scope_len] = '\0';
}

/* TF's node name rule ([A-Za-z0-9.][A-Za-z0-9_.\-/>]*) without '/': a name is a leaf of
   the current scope. */
static bool ascii_alnum(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

static bool valid_node_name(const char *name) {
  if (!ascii_alnum(name[0]) && name[0] != '.') return false;
  for (const char *p = name; *p; p++)
    if (!ascii_alnum(*p) && !strchr("_.->", *p)) return false;
  return true;
}

enum { NAME_MAX_LEN = 255 };

/* The name is copied into the graph's arena: it may wait for its node past the caller's
   string. */
nb_code nb_name_next(nb_ctx *c, const char *name) {
  if (!c) return NB_INVALID;
  if (c->status || !c->graph) return c->status; /* eager: names are ignored, as in TF */
  if (!name) {
    c->next_name = NULL;
    return NB_OK;
  }
  if (strlen(name) > NAME_MAX_LEN)
    return nbcore_fail(c, NB_INVALID, "nb_name_next: the name is longer than %d characters", NAME_MAX_LEN);
  if (!valid_node_name(name))
    return nbcore_fail(
        c, NB_INVALID,
        "nb_name_next: '%s' is not a valid node name ([A-Za-z0-9.][A-Za-z0-9_.\\->]*; scopes make paths)", name);
  const char *copy = nbcore_arena_strdup(&c->graph->arena, name);
  if (!copy) return nbcore_fail(c, NB_NOMEM, "nb_name_next: out of memory");
  c->next_name = copy;
  return NB_OK;
}

nb_code nbgraph_scope_save(const nb_graph *g, nbgraph_scope_state *st) {
  memcpy(st->scope, g->scope, sizeof st->scope);
  st->scope_len = g->scope_len;
  st->nscopes = g->nscopes;
  memcpy(st->scope_marks, g->scope_marks, sizeof st->scope_marks);
  st->fresh = g->fresh;
  st->nfresh = g->nfresh;
  st->fresh_names = NULL;
  if (g->nfresh && !(st->fresh_names = malloc((size_t)g->nfresh * sizeof *st->fresh_names))) return NB_NOMEM;
  if (g->nfresh) memcpy(st->fresh_names, g->fresh_names, (size_t)g->nfresh * sizeof *st->fresh_names);
  return NB_OK;
}

void nbgraph_scope_restore(nb_graph *g, nbgraph_scope_state *st) {
  memcpy(g->scope, st->scope, sizeof g->scope);
  g->scope_len = st->scope_len;
  g->nscopes = st->nscopes;
  memcpy(g->scope_marks, st->scope_marks, sizeof g->scope_marks);
  g->fresh = st->fresh;
  g->nfresh = 0;
  if (st->nfresh && nbcore_grow_array((void **)&g->fresh_names, &g->fresh_cap, st->nfresh, sizeof *g->fresh_names)) {
    memcpy(g->fresh_names, st->fresh_names, (size_t)st->nfresh * sizeof *g->fresh_names);
    g->nfresh = st->nfresh;
  }
  free(st->fresh_names);
  st->fresh_names = NULL;
}

/* ---- handles --------------------------------------------------------------------------- */

nb_tensor *nbgraph_handle(nb_ctx *c, nb_graph *g, int32_t id, int32_t out) {
  const nbgraph_out *o = &g->outs[g->nodes[id].out0 + out];
  nb_tensor *x = nbcore_handle_new(c, o->meta.dtype, o->meta.rank, o->meta.shape, NULL);
  if (!x) return NULL;
  x->graph = g;
  x->node = id;
  x->out = out;
  x->known = o->value;
  return x;
}

nb_tensor *nbgraph_detached_share(const nb_tensor *x) {
  nbcore_buffer_retain(x->buf);
  return nbcore_detached_new(x->dtype, x->rank, x->shape, x->buf);
}

const char *nb_tensor_node_name(const nb_tensor *x) { return x && x->graph ? x->graph->nodes[x->node].name : NULL; }
/* "name:k" splits into the node name's length and k; a bare name is output 0. */
static bool parse_tensor_name(const char *name, size_t *len, long *out) {
  const char *colon = strrchr(name, ':');
  *len = colon ? (size_t)(colon - name) : strlen(name);
  *out = 0;
  if (!colon) return true;
  char *end;
  *out = strtol(colon + 1, &end, 10);
  return end != colon + 1 && !*end && *out >= 0;
}

/* A linear search: lookups are for users' fetches and feeds, not for inner loops. */
nb_tensor *nb_graph_tensor_by_name(nb_ctx *c, const char *name) {
  if (!nbop_live(c)) return NULL;
  size_t len;
  long out;
  if (!c->graph || !name || !parse_tensor_name(name, &len, &out)) {
    nbcore_fail(c, NB_INVALID, "nb_graph_tensor_by_name: needs a graph context and a name 'node' or 'node:k', got '%s'",
                name ? name : "(null)");
    return NULL;
  }
  const nb_graph *g = c->graph;
  for (int32_t id = 0; id < g->nnodes; id++) {
    const nbgraph_node *n = &g->nodes[id];
    if (strncmp(n->name, name, len) || n->name[len]) continue;
    if (out < n->nout) return nbgraph_handle(c, c->graph, id, (int32_t)out);
    nbcore_fail(c, NB_NOT_FOUND, "nb_graph_tensor_by_name: node '%.*s' (op type: %s) has %d output%s, no output %ld",
                (int)len, name, n->def->name, n->nout, n->nout == 1 ? "" : "s", out);
    return NULL;
  }
  nbcore_fail(c, NB_NOT_FOUND, "nb_graph_tensor_by_name: no node '%.*s' in the graph", (int)len, name);
  return NULL;
}

int nb_tensor_output_index(const nb_tensor *x) { return x && x->graph ? x->out : -1; }
bool nb_is_symbolic(const nb_tensor *x) { return x && (x->graph || (x->slice_values && x->slice_values->graph)); }
const nb_tensor *nb_constant_value(const nb_tensor *x) { return !x ? NULL : x->buf ? x : x->known; }

/* ---- the graph context ---------------------------------------------------------------- */

nb_ctx *nb_graph_ctx_new(nb_graph *g) {
  if (!g) return NULL;
  nb_ctx *c = nb_eager_new();
  if (!c) return NULL;
  c->graph = g;
  c->infer = nbgraph_infer;
  c->execute = nbgraph_execute;
  c->constant = nb_const;
  return c;
}

static bool ensure_subst(nb_ctx *c, int n) {
  return nbcore_grow_array((void **)&c->subst, &c->subst_cap, n, sizeof *c->subst);
}

/* The output dtype an op has whatever the shapes: the rule its def states. */
static nb_dtype deferred_dtype(const nbop_kargs *k) {
  const nbop_def *def = k->def;
  if (def->bool_out) return NB_BOOL;
  if (def->dtype_attr) return k->attr[def->dtype_attr - 1].type;
  return k->in[def->t_input]->dtype;
}

/* Unknown dims are inferred through by probing: the op's infer runs with every unknown
   dim set to 1, then to two primes. Output dims that come out the same every time are
   known; those that differ (they follow an unknown dim: P, 3P, min(P, 5), ...) stay
   unknown, and a rank that differs (Squeeze of a size-1 probe) stays unknown too. A
   probe that fails, or needs an unknown value, leaves the outputs' rank unknown: the
   op's validate has already passed, so such a failure is about made-up dims only. */
static const int64_t probes[3] = {1, 61, 67};
#define NBGRAPH_PROBE_SMALL 16 /* inputs/outputs handled without allocating */

static bool probe_infer(nb_ctx *c, nbop_kargs *k, nb_tensor *const *real, nb_tensor *copies, int64_t probe) {
  for (int i = 0; i < k->nin; i++) {
    copies[i] = *real[i];
    for (int d = 0; d < copies[i].rank; d++)
      if (copies[i].shape[d] < 0) copies[i].shape[d] = probe;
    if (!nbcore_shape_checked_size(copies[i].rank, copies[i].shape, &copies[i].size)) return false;
    c->subst[i] = &copies[i];
  }
  nb_code code = k->def->infer(k);
  if (!code) code = c->status; /* a check that failed though infer went on */
  if (code) nb_clear_error(c); /* a failed probe proves nothing */
  return code == NB_OK;
}

/* Folds this probe's outputs into agreed (first probe: copies them). */
static void agree(nbop_kargs *k, nbop_meta *agreed, bool first) {
  for (int i = 0; i < k->nout; i++) {
    const nbop_meta *m = &k->out[i];
    if (first) {
      agreed[i] = *m;
    } else if (agreed[i].rank != m->rank) {
      agreed[i].rank = -1;
    } else {
      for (int d = 0; d < m->rank; d++)
        if (agreed[i].shape[d] != m->shape[d]) agreed[i].shape[d] = -1;
    }
  }
}

static nb_code infer_deferred(nb_ctx *c, nbop_kargs *k) {
  nb_tensor *saved_small[NBGRAPH_PROBE_SMALL], copies_small[NBGRAPH_PROBE_SMALL];
  nbop_meta agreed_small[NBGRAPH_PROBE_SMALL];
  bool big_in = k->nin > NBGRAPH_PROBE_SMALL, big_out = k->nout > NBGRAPH_PROBE_SMALL;
  nb_tensor **saved = big_in ? malloc((size_t)k->nin * sizeof *saved) : saved_small;
  nb_tensor *copies = big_in ? malloc((size_t)k->nin * sizeof *copies) : copies_small;
  nbop_meta *agreed = big_out ? malloc((size_t)k->nout * sizeof *agreed) : agreed_small;
  if (!saved || !copies || !agreed) {
    if (big_in) free(saved), free(copies);
    if (big_out) free(agreed);
    return nbop_kfail(k, NB_NOMEM, "out of memory inferring the output shapes");
  }
  bool ok = true, direct = false;
  for (int i = 0; i < k->nin; i++) { /* every input saved: all are restored below */
    saved[i] = k->in[i];
    ok &= saved[i]->rank >= 0;
  }
  if (!ok && k->def->any_rank) { /* no probing: the op's infer takes the inputs as they are */
    nb_code code = k->def->infer(k);
    if (code) nb_clear_error(c);
    ok = direct = code == NB_OK;
    for (int i = 0; ok && i < k->nout; i++) agreed[i] = k->out[i];
  }
  for (int p = 0; ok && !direct && p < 3; p++) {
    ok = probe_infer(c, k, saved, copies, probes[p]);
    if (ok) agree(k, agreed, p == 0);
  }
  nb_dtype t = deferred_dtype(k);
  for (int i = 0; i < k->nout; i++) {
    if (ok) {
      k->out[i] = agreed[i]; /* with the dtype the op's infer gave (ops with outputs of several dtypes) */
    } else {
      k->out[i].rank = -1;
      k->out[i].dtype = t;
    }
  }
  for (int i = 0; i < k->nin; i++) c->subst[i] = saved[i];
  k->deferred = true;
  if (big_in) {
    free(saved);
    free(copies);
  }
  if (big_out) free(agreed);
  return NB_OK;
}

/* Input i from an enclosing graph (a function graph's body using an outer tensor): the
   handle of the placeholder that captures it. */
static nb_tensor *captured(nb_ctx *c, nbop_kargs *k, int i) {
  bool nomem = false;
  int32_t id = nbgraph_capture(c->graph, k->in[i], &nomem);
  if (id < 0) {
    nbop_kfail(k, nomem ? NB_NOMEM : NB_INVALID,
               nomem ? "out of memory capturing input %d" : "input %d belongs to another graph", i);
    return NULL;
  }
  return nbgraph_handle(c, c->graph, id, 0);
}

/* Build-time inference: inputs with known values are replaced by those values, so the
   op's validate, infer (and folding) see concrete tensors. Validation runs whatever the
   dims, so a bad dtype or attr fails the build; an input of unknown shape, or a needed
   value that is not known, defers only the outputs' shapes to run time. */
static nb_code infer_inputs(nb_ctx *c, nbop_kargs *k) {
  bool unknown = false;
  for (int i = 0; i < k->nin; i++) {
    nb_tensor *x = k->in[i];
    if (x->graph && x->graph != c->graph && !(x = captured(c, k, i))) return c->status;
    c->subst[i] = x->known ? (nb_tensor *)x->known : x;
    unknown |= !nbcore_dims_known(x->rank, x->shape);
  }
  k->in = c->subst;
  nb_code invalid = nbop_kvalidate(k);
  if (invalid) return invalid;
  if (!unknown) {
    nb_code code = k->def->infer(k);
    if (code != NBOP_DEFER) return code;
  }
  return infer_deferred(c, k);
}

/* The graph context's hooks, installed by nb_graph_ctx_new. */
static nb_code nbgraph_infer(nb_ctx *c, nbop_kargs *k) {
  const char *hint = c->next_name;
  c->next_name = NULL;
  if (hint && (!*hint || strchr(hint, '/')))
    return nbop_kfail(k, NB_INVALID, "node name '%s' must be non-empty without '/' (scopes make paths)", hint);
  k->node_name = nbgraph_unique_name(c->graph, hint ? hint : k->def->name);
  if (!k->node_name) return nbop_kfail(k, NB_INVALID, "cannot name the node (name too long or out of memory)");
  if (!ensure_subst(c, k->nin)) return nbop_kfail(k, NB_NOMEM, "out of memory");
  c->run_node = k->node_name; /* build errors name the node */
  nb_code code = infer_inputs(c, k);
  c->run_node = NULL;
  return code;
}

/* The node's own copy of the attrs; a tensor value (Const's) becomes a detached share. */
static nb_code copy_attrs(nb_graph *g, const nbop_kargs *k, nbgraph_node *n) {
  n->attr = nbop_attrs_copy(&g->arena, k->def, k->attr);
  if (k->def->nattrs && !n->attr) return NB_NOMEM;
  for (int a = 0; a < k->def->nattrs; a++)
    if (k->def->attrs[a].kind == NB_ATTR_TENSOR && n->attr[a].tensor &&
        !(n->attr[a].tensor = nbgraph_detached_share(n->attr[a].tensor)))
      return NB_NOMEM;
  return NB_OK;
}

/* Whether folded results exceed the fold cap: foldable() checks the inferred sizes, which
   an op declaring unknown output shapes (a host callback) leaves unbounded. */
static bool results_too_large(nb_tensor *const *res, int n) {
  int64_t elems = 0;
  for (int i = 0; i < n; i++) elems += res[i]->size;
  return elems > NBGRAPH_FOLD_MAX_ELEMS;
}

/* Evaluates an op whose inputs are all known, at build time, into detached values. */
static nb_code fold(nb_graph *g, const nbop_kargs *k, nbgraph_out *outs) {
  nb_tensor *tmp[16];
  if (k->nout > 16) return NB_OK;
  nb_code code = nbop_dispatch(g->fold, k->def, k->in, k->nin, k->attr, tmp, k->nout);
  if (code) { /* report as a build error of this node, without the op-name prefix */
    const char *msg = nb_error(g->fold);
    size_t n = strlen(k->def->name);
    if (strncmp(msg, k->def->name, n) == 0 && strncmp(msg + n, ": ", 2) == 0) msg += n + 2;
    nbop_kfail((nbop_kargs *)k, code, "%s", msg);
    nb_clear_error(g->fold);
    return code;
  }
  if (results_too_large(tmp, k->nout)) { /* the node computes them at run time instead */
    for (int i = 0; i < k->nout; i++) nb_tensor_free(tmp[i]);
    return NB_OK;
  }
  for (int i = 0; i < k->nout; i++) {
    outs[i].value = nbgraph_detached_share(tmp[i]);
    /* the value's shape: more specific than the inferred one where that left dims to
       run time (a host callback's declared outputs) */
    if (outs[i].value) nbop_meta_like(&outs[i].meta, outs[i].value);
    nb_tensor_free(tmp[i]);
  }
  return NB_OK;
}

/* Ops with a kernel, or views (a view of a known value is known too), whose inputs are
   all known and whose results are small. */
static bool foldable(const nbop_kargs *k) {
  if (k->deferred || k->nin == 0 || k->def->stateful || (!k->def->kernel && k->def->alias < 0))
    return false; /* Const: see add_node */
  int64_t elems = 0;
  for (int i = 0; i < k->nin; i++)
    if (!k->in[i]->buf && !k->def->shape_only) return false;
  for (int i = 0; i < k->nout; i++) elems += nbcore_shape_size(k->out[i].rank, k->out[i].shape);
  return elems <= NBGRAPH_FOLD_MAX_ELEMS;
}

/* A concrete input (an eager tensor passed to a graph op) becomes a Const node. */
static nb_code symbolic_input(nb_ctx *c, nb_tensor *x, int32_t *src, int32_t *out) {
  if (x->graph && x->graph != c->graph) { /* captured at inference */
    bool nomem = false;
    *src = nbgraph_capture(c->graph, x, &nomem);
    *out = 0;
    return *src < 0 ? nbcore_fail(c, nomem ? NB_NOMEM : NB_INTERNAL, "capturing an outer tensor failed") : NB_OK;
  }
  if (x->graph) {
    *src = x->node;
    *out = x->out;
    return NB_OK;
  }
  nb_tensor *k = nb_const(c, x);
  if (!k) return c->status;
  *src = k->node;
  *out = k->out;
  nb_tensor_free(k);
  return NB_OK;
}

static const char *override_for(const nb_graph *g, const char *op_type) {
  for (int i = g->noverrides - 1; i >= 0; i--)
    if (strcmp(g->overrides[i].op_type, op_type) == 0) return g->overrides[i].grad_name;
  return NULL;
}

/* Node id's input edges. A failure (out of memory making a Const or a capture) keeps
   the edges made so far and drops the rest from the node, so no edge is left unset for
   passes over the whole graph (the node itself is never handed out). */
static nb_code add_edges(nb_ctx *c, nb_graph *g, nb_tensor *const *orig, int nin, int32_t id) {
  for (int i = 0; i < nin; i++) {
    int32_t src = -1, out = -1;
    nb_code code = symbolic_input(c, orig[i], &src, &out);
    if (code) { /* Consts and captures have no edges: the node's are still the last ones */
      g->nedges = g->nodes[id].in0 + i;
      g->nodes[id].nin = i;
      return code;
    }
    nbgraph_edge *e = &g->edges[g->nodes[id].in0 + i];
    e->src = src;
    e->out = out;
    e->consumer = id;
    e->next_use = g->nodes[src].first_use;
    e->next_ctrl = -1;
    g->nodes[src].first_use = (int32_t)(e - g->edges);
  }
  return NB_OK;
}

static nb_code reserve_node(nb_graph *g, int nin, int nout) {
  if (!nbcore_grow_array((void **)&g->nodes, &g->nodes_cap, g->nnodes + 1, sizeof *g->nodes) ||
      !nbcore_grow_array((void **)&g->edges, &g->edges_cap, g->nedges + nin, sizeof *g->edges) ||
      !nbcore_grow_array((void **)&g->outs, &g->outs_cap, g->nouts + nout, sizeof *g->outs))
    return NB_NOMEM;
  return NB_OK;
}

static nb_code add_node(nb_ctx *c, nb_graph *g, nbop_kargs *k, nb_tensor **out);

static nb_code nbgraph_execute(nb_ctx *c, nbop_kargs *k, nb_tensor **out) {
  nb_graph *g = c->graph;
  if (reserve_node(g, k->nin, k->nout)) return nbop_kfail(k, NB_NOMEM, "out of memory adding a node");
  c->run_node = k->node_name;
  nb_code code = add_node(c, g, k, out);
  c->run_node = NULL;
  return code;
}

static nb_code add_node(nb_ctx *c, nb_graph *g, nbop_kargs *k, nb_tensor **out) {
  int32_t id = g->nnodes;
  nbgraph_node *n = &g->nodes[id];
  memset(n, 0, sizeof *n);
  n->def = k->def;
  n->name = k->node_name;
  n->in0 = g->nedges;
  n->nin = k->nin;
  n->out0 = g->nouts;
  n->nout = k->nout;
  n->first_use = n->ctrl = -1;
  n->grad_name = override_for(g, k->def->name);
  nbgraph_out *outs = &g->outs[g->nouts];
  for (int i = 0; i < k->nout; i++) outs[i] = (nbgraph_out){k->out[i], NULL};
  nb_code code = copy_attrs(g, k, n);
  /* a constant (no inputs, its value the first attr) is known as it is */
  if (!code && k->nin == 0 && k->def->nattrs && k->def->attrs[0].kind == NB_ATTR_TENSOR)
    outs[0].value = nbgraph_detached_share(n->attr[0].tensor);
  else if (!code && foldable(k))
    code = fold(g, k, outs);
  if (code) {
    for (int i = 0; i < k->nout; i++) nb_tensor_free(outs[i].value);
    return code == NB_NOMEM ? nbop_kfail(k, code, "out of memory adding a node") : code;
  }
  /* committed before add_edges: a concrete input becomes a Const node, which takes the
     next id */
  g->nnodes++;
  if (k->def->hold_attrs) k->def->hold_attrs(n->attr, +1); /* dropped by nb_graph_free */
  g->nedges += k->nin;
  g->nouts += k->nout;
  code = add_edges(c, g, k->orig_in, k->nin, id);
  for (int i = 0; i < k->nout && !code; i++)
    if (!(out[i] = nbgraph_handle(c, g, id, i))) code = c->status;
  return code;
}

/* ---- captures ------------------------------------------------------------------------------ */

int32_t nbgraph_capture_parent(nb_graph *g, int64_t key) {
  for (int32_t i = 0; i < g->ncaps; i++)
    if (g->caps[i].key == key) return g->caps[i].arg;
  const nb_graph *p = g->parent;
  const nbop_meta *m = &p->outs[p->nodes[nbgraph_key_node(key)].out0 + nbgraph_key_out(key)].meta;
  if (!nbcore_grow_array((void **)&g->caps, &g->caps_cap, g->ncaps + 1, sizeof *g->caps)) return -1;
  int32_t id = nbgraph_add_arg(g, m, "capture");
  if (id >= 0) g->caps[g->ncaps++] = (nbgraph_capture_entry){key, id};
  return id;
}

/* The node in g standing for x, a tensor of an enclosing graph of g (captured level by
   level down from x's graph); -1 when x's graph does not enclose g (or out of memory: *nomem). */
static int32_t nbgraph_capture(nb_graph *g, const nb_tensor *x, bool *nomem) {
  int depth = 0; /* g is `depth` levels below x's graph */
  const nb_graph *h = g;
  while (h && h != x->graph) h = h->parent, depth++;
  if (!h) return -1;
  int64_t key = nbgraph_key_of(x);
  for (int level = depth - 1; level >= 0; level--) { /* from just below x's graph down to g */
    nb_graph *at = g;
    for (int i = 0; i < level; i++) at = at->parent;
    int32_t id = nbgraph_capture_parent(at, key);
    if (id < 0) {
      *nomem = true;
      return -1;
    }
    key = nbgraph_key(id, 0);
  }
  return nbgraph_key_node(key);
}

int32_t nbgraph_add_arg(nb_graph *g, const nbop_meta *m, const char *base) {
  const nbop_def *def = nbop_lookup("Placeholder");
  if (reserve_node(g, 0, 1)) return -1;
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(def, a);
  a[0].type = m->dtype; /* Placeholder's attrs: dtype, shape (n -1: unknown rank) */
  a[1].ints = m->shape;
  a[1].n = m->rank;
  const char *name = nbgraph_unique_name(g, base);
  nbop_attrval *attr = name ? nbop_attrs_copy(&g->arena, def, a) : NULL;
  if (!attr) return -1;
  int32_t id = g->nnodes++;
  nbgraph_node *n = &g->nodes[id];
  memset(n, 0, sizeof *n);
  *n = (nbgraph_node){.def = def,
                      .name = name,
                      .in0 = g->nedges,
                      .ctrl = -1,
                      .out0 = g->nouts,
                      .nout = 1,
                      .first_use = -1,
                      .attr = attr};
  g->outs[g->nouts++] = (nbgraph_out){*m, NULL};
  return id;
}

nb_code nbgraph_add_outputs(nb_graph *g, int32_t id, const nbop_meta *m, int n) {
  int32_t nout = g->nodes[id].nout, old = g->nodes[id].out0;
  if (!nbcore_grow_array((void **)&g->outs, &g->outs_cap, g->nouts + nout + n, sizeof *g->outs)) return NB_NOMEM;
  memcpy(&g->outs[g->nouts], &g->outs[old], (size_t)nout * sizeof *g->outs);
  for (int32_t o = 0; o < nout; o++) g->outs[old + o].value = NULL; /* moved: freed once */
  for (int i = 0; i < n; i++) g->outs[g->nouts + nout + i] = (nbgraph_out){m[i], NULL};
  g->nodes[id].out0 = g->nouts;
  g->nodes[id].nout += n;
  g->nouts += nout + n;
  g->version++; /* plans size each node's outputs: they must be made again */
  return NB_OK;
}

nb_code nbgraph_add_control(nb_graph *g, int32_t node, int32_t dep) {
  if (!nbcore_grow_array((void **)&g->edges, &g->edges_cap, g->nedges + 1, sizeof *g->edges)) return NB_NOMEM;
  int32_t id = g->nedges++;
  nbgraph_edge *e = &g->edges[id];
  *e = (nbgraph_edge){dep, -1, node, g->nodes[dep].first_use, g->nodes[node].ctrl};
  g->nodes[dep].first_use = id;
  g->nodes[node].ctrl = id;
  g->version++;
  return NB_OK;
}

/* ---- marks and rollback ---------------------------------------------------------------- */

nb_code nbgraph_mark_take(const nb_graph *g, nbgraph_mark *m) {
  *m = (nbgraph_mark){g->nnodes, g->nedges, g->nouts, g->nvars, g->nfuncs, g->names};
  m->names.slots = NULL;
  if (!g->names.cap) return NB_OK;
  m->names.slots = malloc(g->names.cap * sizeof *m->names.slots);
  if (!m->names.slots) return NB_NOMEM;
  memcpy(m->names.slots, g->names.slots, g->names.cap * sizeof *m->names.slots);
  return NB_OK;
}

void nbgraph_mark_drop(nbgraph_mark *m) {
  free(m->names.slots);
  m->names.slots = NULL;
}

/* The functions g got since m: freed through g's own hook (src/func's), given a shell
   graph that holds just them. */
static void rollback_functions(nb_graph *g, const nbgraph_mark *m) {
  int32_t n = g->nfuncs - m->nfuncs;
  if (n <= 0) return;
  nb_graph shell = {0};
  shell.funcs = malloc((size_t)n * sizeof *shell.funcs);
  if (shell.funcs) {
    memcpy(shell.funcs, g->funcs + m->nfuncs, (size_t)n * sizeof *shell.funcs);
    shell.nfuncs = n;
    g->free_funcs(&shell);
  }
  g->nfuncs = m->nfuncs;
}

/* Edges are prepended to their lists, so the ones added since m lead every list: each
   list head moves past them. */
static int32_t skip_new_edges(const nb_graph *g, int32_t e, int32_t nedges, bool ctrl) {
  while (e >= nedges) e = ctrl ? g->edges[e].next_ctrl : g->edges[e].next_use;
  return e;
}

void nbgraph_rollback(nb_graph *g, nbgraph_mark *m) {
  for (int32_t i = m->nnodes; i < g->nnodes; i++) {
    const nbgraph_node *n = &g->nodes[i];
    for (int a = 0; a < n->def->nattrs; a++)
      if (n->def->attrs[a].kind == NB_ATTR_TENSOR) nb_tensor_free(n->attr[a].tensor);
    if (n->def->hold_attrs) n->def->hold_attrs(n->attr, -1);
  }
  for (int32_t i = m->nouts; i < g->nouts; i++) nb_tensor_free(g->outs[i].value);
  g->nnodes = m->nnodes;
  g->nouts = m->nouts;
  for (int32_t i = 0; i < g->nnodes; i++) {
    g->nodes[i].first_use = skip_new_edges(g, g->nodes[i].first_use, m->nedges, false);
    g->nodes[i].ctrl = skip_new_edges(g, g->nodes[i].ctrl, m->nedges, true);
  }
  g->nedges = m->nedges;
  for (int32_t i = m->nvars; i < g->nvars; i++) nbcore_variable_release(g->vars[i].var);
  g->nvars = m->nvars;
  for (int32_t i = 0; i < g->nvars; i++)
    if (g->vars[i].read_node >= g->nnodes) g->vars[i].read_node = -1;
  rollback_functions(g, m);
  free(g->names.slots);
  g->names = m->names;
  m->names.slots = NULL;
  g->version++;
}

bool nbgraph_name_taken(nb_graph *g, const char *name) { return strmap_find(&g->names, name) != NULL; }

nb_code nbgraph_retire_value(nb_graph *g, nb_tensor *value) {
  if (!value) return NB_OK;
  if (!nbcore_grow_array((void **)&g->retired, &g->retired_cap, g->nretired + 1, sizeof *g->retired)) return NB_NOMEM;
  g->retired[g->nretired++] = value;
  return NB_OK;
}

const char *nbgraph_reserve_name(nb_graph *g, const char *name) {
  char *copy = nbcore_arena_strdup(&g->arena, name);
  return copy && strmap_put(&g->names, copy, 1) ? copy : NULL;
}

nb_code nb_add_control_input(nb_tensor *x, nb_tensor *dep) {
  if (!x || !dep || !x->graph || x->graph != dep->graph) return NB_INVALID;
  return nbgraph_add_control(x->graph, x->node, dep->node);
}

/* ---- copies for graph passes (src/opt) --------------------------------------------------- */

const char *nbgraph_claim_name(nb_graph *g, const char *name) {
  return nbgraph_name_taken(g, name) ? NULL : nbgraph_reserve_name(g, name);
}

int32_t nbgraph_copy_node(nb_graph *g, const nb_graph *src, int32_t id, const char *name, const int64_t *in) {
  const nbgraph_node *s = &src->nodes[id];
  if (reserve_node(g, s->nin, s->nout)) return -1;
  int32_t nid = g->nnodes;
  nbgraph_node *n = &g->nodes[nid];
  *n = (nbgraph_node){.def = s->def,
                      .name = name,
                      .in0 = g->nedges,
                      .nin = s->nin,
                      .ctrl = -1,
                      .out0 = g->nouts,
                      .nout = s->nout,
                      .first_use = -1,
                      .grad_name = s->grad_name};
  nbop_kargs k = {.def = s->def};
  if (s->def->nattrs) memcpy(k.attr, s->attr, (size_t)s->def->nattrs * sizeof *k.attr);
  if (copy_attrs(g, &k, n)) return -1;
  for (int32_t o = 0; o < s->nout; o++) {
    const nbgraph_out *so = &src->outs[s->out0 + o];
    g->outs[g->nouts + o] = (nbgraph_out){so->meta, so->value ? nbgraph_detached_share(so->value) : NULL};
  }
  for (int32_t i = 0; i < s->nin; i++) {
    nbgraph_edge *e = &g->edges[g->nedges + i];
    int32_t from = nbgraph_key_node(in[i]);
    *e = (nbgraph_edge){from, nbgraph_key_out(in[i]), nid, g->nodes[from].first_use, -1};
    g->nodes[from].first_use = g->nedges + i;
  }
  g->nnodes++;
  g->nedges += s->nin;
  g->nouts += s->nout;
  if (s->def->hold_attrs) s->def->hold_attrs(n->attr, +1);
  return nid;
}

nb_code nbgraph_share_vars(nb_graph *g, const nb_graph *src) {
  if (!src->nvars) return NB_OK;
  if (!nbcore_grow_array((void **)&g->vars, &g->vars_cap, src->nvars, sizeof *g->vars)) return NB_NOMEM;
  for (int32_t i = 0; i < src->nvars; i++) {
    nbcore_variable_retain(src->vars[i].var);
    g->vars[g->nvars++] = (nbgraph_var){src->vars[i].var, -1, false};
  }
  return NB_OK;
}
