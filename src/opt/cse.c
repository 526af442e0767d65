/* Common subexpression elimination (grappler's "common_subgraph_elimination"): in
   topological order, a node equal to one seen before (same op, attrs and inputs, after the
   inputs' own merges) is replaced by it. Only movable nodes merge (never stateful, random,
   host-callback or pinned ones), so what runs once per step still does. */
#include "opt.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 1099511628211ull; }

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = mix(h, ((const uint8_t *)p)[i]);
  return h;
}

/* Constants larger than this are compared by identity only. */
enum { CSE_VALUE_BYTES = 1 << 12 };

static size_t tensor_bytes(const nb_tensor *t) { return (size_t)t->size * nb_dtype_size(t->dtype); }

static bool same_tensor(const nb_tensor *a, const nb_tensor *b) {
  if (a == b) return true;
  if (!a || !b || !a->buf || !b->buf || a->dtype != b->dtype || a->rank != b->rank) return false;
  if (memcmp(a->shape, b->shape, (size_t)a->rank * sizeof *a->shape) || tensor_bytes(a) > CSE_VALUE_BYTES) return false;
  return memcmp(nb_data(a), nb_data(b), tensor_bytes(a)) == 0;
}

/* Doubles equal as values, NaN equal to NaN (an attr's NaN is the same attr). */
static bool same_doubles(const double *a, const double *b, int n) {
  for (int i = 0; i < n; i++)
    if (a[i] != b[i] && (a[i] == a[i] || b[i] == b[i])) return false;
  return true;
}

static bool same_attr(nb_attr_kind kind, const nbop_attrval *a, const nbop_attrval *b) {
  switch (kind) {
    case NB_ATTR_INT: return a->i == b->i;
    case NB_ATTR_FLOAT: return same_doubles(&a->f, &b->f, 1);
    case NB_ATTR_BOOL: return a->b == b->b;
    case NB_ATTR_STR: return a->s == b->s || (a->s && b->s && strcmp(a->s, b->s) == 0);
    case NB_ATTR_TYPE: return a->type == b->type;
    case NB_ATTR_TENSOR: return same_tensor(a->tensor, b->tensor);
    case NB_ATTR_INTS: return a->n == b->n && (a->n <= 0 || !memcmp(a->ints, b->ints, (size_t)a->n * sizeof *a->ints));
    case NB_ATTR_FLOATS:
      return a->n == b->n && (a->n <= 0 || same_doubles(a->floats, b->floats, a->n));
      return a->n == b->n && (a->n <= 0 || !memcmp(a->floats, b->floats, (size_t)a->n * sizeof *a->floats));
    case NB_ATTR_TYPES:
      return a->n == b->n && (a->n <= 0 || !memcmp(a->types, b->types, (size_t)a->n * sizeof *a->types));
  }
  return false;
}

static uint64_t hash_attr(uint64_t h, nb_attr_kind kind, const nbop_attrval *a) {
  switch (kind) {
    case NB_ATTR_INT: return mix(h, (uint64_t)a->i);
    case NB_ATTR_BOOL: return mix(h, a->b);
    case NB_ATTR_TYPE: return mix(h, a->type);
    case NB_ATTR_STR: return a->s ? hash_bytes(h, a->s, strlen(a->s)) : h;
    case NB_ATTR_INTS: return a->n > 0 ? hash_bytes(h, a->ints, (size_t)a->n * sizeof *a->ints) : h;
    case NB_ATTR_TENSOR:
      return a->tensor && a->tensor->buf && tensor_bytes(a->tensor) <= CSE_VALUE_BYTES
                 ? hash_bytes(h, nb_data(a->tensor), tensor_bytes(a->tensor))
                 : h;
    default: return h; /* floats and lists: compared, not hashed */
  }
}

static uint64_t node_hash(nbopt_graph *o, int32_t id) {
  const nbopt_node *n = &o->nodes[id];
  uint64_t h = mix(1469598103934665603ull, (uint64_t)(uintptr_t)n->def);
  for (int32_t i = 0; i < n->nin; i++) h = mix(h, (uint64_t)nbopt_in(o, id, i));
  for (int a = 0; a < n->def->nattrs; a++) h = hash_attr(h, n->def->attrs[a].kind, &n->attr[a]);
  return h | 1; /* 0 marks an empty slot */
}

static bool same_node(const nbopt_graph *o, int32_t a, int32_t b) {
  const nbopt_node *x = &o->nodes[a], *y = &o->nodes[b];
  if (x->def != y->def || x->nin != y->nin || x->nout != y->nout) return false;
  for (int32_t i = 0; i < x->nin; i++)
    if (x->in[i] != y->in[i]) return false; /* both resolved by node_hash */
  for (int a2 = 0; a2 < x->def->nattrs; a2++)
    if (!same_attr(x->def->attrs[a2].kind, &x->attr[a2], &y->attr[a2])) return false;
  for (int32_t k = 0; k < x->nout; k++)
    if (x->meta[k].dtype != y->meta[k].dtype) return false;
  return true;
}

typedef struct cse_table {
  uint64_t *hash;
  int32_t *node;
  uint32_t cap;
} cse_table;

/* The node equal to id seen before, or -1 after recording id. */
static int32_t seen_before(nbopt_graph *o, cse_table *t, int32_t id) {
  uint64_t h = node_hash(o, id);
  uint32_t i = (uint32_t)h & (t->cap - 1);
  for (; t->hash[i]; i = (i + 1) & (t->cap - 1))
    if (t->hash[i] == h && same_node(o, t->node[i], id)) return t->node[i];
  t->hash[i] = h;
  t->node[i] = id;
  return -1;
}

nb_code nbopt_cse(nbopt_graph *o, bool *changed) {
  int32_t *order, n;
  nb_code code = nbopt_order(o, &order, &n);
  if (code) return code;
  cse_table t = {NULL, NULL, 16};
  while (t.cap < 2u * (uint32_t)n + 2) t.cap *= 2;
  t.hash = calloc(t.cap, sizeof *t.hash);
  t.node = malloc(t.cap * sizeof *t.node);
  for (int32_t k = 0; t.hash && t.node && k < n; k++) {
    int32_t id = order[k];
    if (!nbopt_movable(o, id)) continue;
    int32_t twin = seen_before(o, &t, id);
    for (int32_t out = 0; twin >= 0 && out < o->nodes[id].nout; out++)
      nbopt_replace(o, nbgraph_key(id, out), nbgraph_key(twin, out));
    *changed |= twin >= 0;
  }
  code = t.hash && t.node ? NB_OK : NB_NOMEM;
  free(t.hash);
  free(t.node);
  free(order);
  return code;
}
