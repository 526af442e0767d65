/* Transposes: making them, and moving them (TF's "tf-move-transposes"). A Transpose whose
   input is a Transpose composes with it (and vanishes when the two are inverses); an
   elementwise op whose inputs are all Transposes by one permutation (or constants with
   every dim 1, which no permutation changes) runs on the untransposed tensors with one
   Transpose after it, so that Transposes travel until they meet their inverse; a reduction
   of a Transpose reduces the permuted axes of its input; Pad, Slice and ConcatV2 of
   Transposes take their paddings, begin, size and axis permuted. */
#include "opt.h"

#include <stdlib.h>
#include <string.h>

int64_t nbopt_const(nbopt_graph *o, nb_tensor *value, const char *base) {
  if (!value) return -1;
  const nbop_def *def = nbop_lookup("Const");
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(def, a);
  a[0].tensor = value;
  a[1].type = value->dtype;
  nbop_meta m = {.dtype = value->dtype, .rank = value->rank};
  memcpy(m.shape, value->shape, (size_t)value->rank * sizeof *m.shape);
  int32_t id = nbopt_add(o, "Const", NULL, 0, a, &m, 1, base);
  return id < 0 ? -1 : nbgraph_key(id, 0);
}

int64_t nbopt_transpose(nbopt_graph *o, int64_t key, const int *perm, int rank, const char *base) {
  int32_t p32[NB_MAX_RANK];
  for (int d = 0; d < rank; d++) p32[d] = perm[d];
  int64_t p = nbopt_const(o, nb_tensor_from(o->values, NB_I32, 1, (int64_t[]){rank}, p32), base);
  if (p < 0) return -1;
  const nbop_meta *x = nbopt_meta(o, key);
  nbop_meta m = {.dtype = x->dtype, .rank = rank};
  for (int d = 0; d < rank; d++) m.shape[d] = x->rank == rank ? x->shape[perm[d]] : -1;
  int64_t in[2] = {key, p};
  int32_t id = nbopt_add(o, "Transpose", in, 2, NULL, &m, 1, base);
  return id < 0 ? -1 : nbgraph_key(id, 0);
}

bool nbopt_transpose_of(nbopt_graph *o, int64_t key, int64_t *x, int *perm, int *rank) {
  int32_t id = nbgraph_key_node(key);
  if (strcmp(o->nodes[id].def->name, "Transpose") != 0) return false;
  const nb_tensor *p = nbopt_value(o, nbopt_in(o, id, 1));
  if (!p || p->rank != 1 || p->size > NB_MAX_RANK) return false;
  *rank = (int)p->size;
  for (int d = 0; d < *rank; d++) perm[d] = (int)nb_item(p, d);
  *x = nbopt_in(o, id, 0);
  return true;
}

/* Readers per node, counted before the pass added nodes (those count as read more than once). */
typedef struct reader_counts {
  int32_t *n;
  int32_t len;
} reader_counts;

static bool read_once(const reader_counts *uses, int32_t id) { return id < uses->len && uses->n[id] == 1; }

static bool identity_perm(const int *p, int rank) {
  for (int d = 0; d < rank; d++)
    if (p[d] != d) return false;
  return true;
}

/* Transpose(Transpose(y, q), p) = Transpose(y, r) with r[i] = q[p[i]] (output dim i is
   the inner output's dim p[i], which is y's dim q[p[i]]); y itself when r is the identity. */
static nb_code compose(nbopt_graph *o, int32_t id, bool *changed) {
  int64_t x, y;
  int p[NB_MAX_RANK], q[NB_MAX_RANK], r[NB_MAX_RANK], rank, inner;
  if (!nbopt_transpose_of(o, nbgraph_key(id, 0), &x, p, &rank) || !nbopt_transpose_of(o, x, &y, q, &inner) ||
      inner != rank)
    return NB_OK;
  for (int d = 0; d < rank; d++) r[d] = q[p[d]];
  int64_t to = y;
  if (!identity_perm(r, rank) && (to = nbopt_transpose(o, y, r, rank, o->nodes[id].name)) < 0) return NB_NOMEM;
  nbopt_replace(o, nbgraph_key(id, 0), to);
  *changed = true;
  return NB_OK;
}

/* A constant no permutation changes: every dim 1. */
static bool perm_invariant(const nb_tensor *v) {
  if (!v) return false;
  for (int d = 0; d < v->rank; d++)
    if (v->shape[d] != 1) return false;
  return true;
}

/* Inputs [0, ndata) of node id are Transposes by one perm p (at least one read by id alone,
   so moving them removes one) or, when `invariant` allows, perm-invariant constants: in[]
   gets them with the Transposes taken off, *rank p's length (id's output rank). */
static bool strip_transposes(nbopt_graph *o, int32_t id, int32_t ndata, bool invariant, const reader_counts *uses,
                             int64_t *in, int *p, int *rank) {
  bool single = false;
  *rank = -1;
  for (int32_t i = 0; i < ndata; i++) {
    int64_t key = nbopt_in(o, id, i), x;
    int q[NB_MAX_RANK], r;
    if (nbopt_transpose_of(o, key, &x, q, &r)) {
      if (*rank >= 0 && (r != *rank || memcmp(q, p, (size_t)r * sizeof *q))) return false;
      memcpy(p, q, (size_t)r * sizeof *q);
      *rank = r;
      in[i] = x;
      single |= read_once(uses, nbgraph_key_node(key));
    } else if (invariant && perm_invariant(nbopt_value(o, key))) {
      in[i] = key;
    } else {
      return false;
    }
  }
  return single && *rank == o->nodes[id].meta[0].rank;
}

/* Replaces node n (id) by a node of its op on in[0..nin) followed, when `transposed`, by a
   Transpose by p; the new op's output facts are n's with dim i moved to p[i] (its output
   dim p[i] is n's dim i), and it takes id's name, which id, no longer read, frees. */
static nb_code sink(nbopt_graph *o, int32_t id, const nbopt_node *n, const int64_t *in, const int *p, int rank,
                    bool transposed, bool *changed) {
  nbop_meta m = n->meta[0];
  for (int d = 0; transposed && d < rank; d++) m.shape[p[d]] = n->meta[0].shape[d];
  int32_t op = nbopt_add(o, n->def->name, in, n->nin, n->attr, &m, 1, n->name);
  if (op < 0) return NB_NOMEM;
  int64_t to = transposed ? nbopt_transpose(o, nbgraph_key(op, 0), p, rank, n->name) : nbgraph_key(op, 0);
  if (to < 0) return NB_NOMEM;
  o->nodes[op].name = n->name;
  nbopt_replace(o, nbgraph_key(id, 0), to);
  *changed = true;
  return NB_OK;
}

/* op(Transpose(x, p), ...) -> Transpose(op(x, ...), p). */
static nb_code sink_elementwise(nbopt_graph *o, int32_t id, const reader_counts *uses, bool *changed) {
  const nbopt_node n = o->nodes[id]; /* a copy: adding nodes moves o->nodes */
  int64_t in[8];
  int p[NB_MAX_RANK], rank;
  if (n.nin > 8 || !strip_transposes(o, id, n.nin, true, uses, in, p, &rank)) return NB_OK;
  return sink(o, id, &n, in, p, rank, true, changed);
}

static bool is_reduction(const char *t) {
  return !strcmp(t, "Sum") || !strcmp(t, "Mean") || !strcmp(t, "Max") || !strcmp(t, "Min") || !strcmp(t, "Prod");
}

/* Reduce(Transpose(x, p), axes) -> Reduce(x, p[axes]): with keep_dims, then Transposed by
   p (reduced dims are 1 wherever they are); without, only when every axis is reduced. */
static nb_code sink_reduction(nbopt_graph *o, int32_t id, const reader_counts *uses, bool *changed) {
  const nbopt_node n = o->nodes[id]; /* a copy: adding nodes moves o->nodes */
  int64_t x, key = nbopt_in(o, id, 0);
  int p[NB_MAX_RANK], rank, keep_slot = nbopt_attr_slot(n.def, "keep_dims");
  const nb_tensor *axes = nbopt_value(o, nbopt_in(o, id, 1));
  if (keep_slot < 0 || !axes || axes->rank > 1 || axes->size > NB_MAX_RANK ||
      !nbopt_transpose_of(o, key, &x, p, &rank) || !read_once(uses, nbgraph_key_node(key)))
    return NB_OK;
  bool keep = n.attr[keep_slot].b;
  if (!keep && n.meta[0].rank != 0) return NB_OK;
  int32_t moved[NB_MAX_RANK];
  for (int64_t i = 0; i < axes->size; i++) {
    int a = (int)nb_item(axes, i);
    if (a < -rank || a >= rank) return NB_OK; /* the op's own error, at run time */
    moved[i] = p[a < 0 ? a + rank : a];
  }
  int64_t ax = nbopt_const(o, nb_tensor_from(o->values, NB_I32, 1, (int64_t[]){axes->size}, moved), n.name);
  if (ax < 0) return NB_NOMEM;
  int64_t in[2] = {x, ax};
  return sink(o, id, &n, in, p, rank, keep, changed);
}

/* Pad(T(x, p), paddings), Slice(T(x, p), begin, size), ConcatV2(T(x1, p), ..., axis): dim i
   of T(x, p) is dim p[i] of x, so row i of paddings, begin and size moves to row p[i],
   and axis a becomes p[a]. */
static bool is_indexed(const char *t) { return !strcmp(t, "Pad") || !strcmp(t, "Slice") || !strcmp(t, "ConcatV2"); }

/* The index operand v (known; a row per dim of a rank-`rank` tensor, or ConcatV2's axis) as
   a Const for the untransposed tensor. */
static int64_t moved_index(nbopt_graph *o, const nb_tensor *v, const int *p, int rank, const char *base) {
  int64_t rows[2 * NB_MAX_RANK];
  if (v->rank == 0) { /* an axis */
    int a = (int)nb_item(v, 0);
    if (a < -rank || a >= rank) return -2; /* the op's own error, at run time */
    rows[0] = p[a < 0 ? a + rank : a];
  } else {
    int64_t per = v->rank == 2 ? v->shape[1] : 1;
    if (v->shape[0] != rank || per > 2) return -2;
    for (int d = 0; d < rank; d++)
      for (int64_t k = 0; k < per; k++) rows[p[d] * per + k] = (int64_t)nb_item(v, d * per + k);
  }
  nb_tensor *i64 = nb_tensor_from(o->values, NB_I64, v->rank, v->shape, rows);
  return nbopt_const(o, i64 && v->dtype != NB_I64 ? nb_cast(o->values, i64, v->dtype) : i64, base);
}

static nb_code sink_indexed(nbopt_graph *o, int32_t id, const reader_counts *uses, bool *changed) {
  const nbopt_node n = o->nodes[id]; /* a copy: adding nodes moves o->nodes */
  int32_t ndata = strcmp(n.def->name, "ConcatV2") == 0 ? n.nin - 1 : 1;
  int64_t in[8];
  int p[NB_MAX_RANK], rank;
  if (n.nin > 8 || !strip_transposes(o, id, ndata, false, uses, in, p, &rank)) return NB_OK;
  for (int32_t i = ndata; i < n.nin; i++) {
    const nb_tensor *v = nbopt_value(o, nbopt_in(o, id, i));
    int64_t k = v ? moved_index(o, v, p, rank, n.name) : -2;
    if (k == -2) return NB_OK;
    if ((in[i] = k) < 0) return NB_NOMEM;
  }
  return sink(o, id, &n, in, p, rank, true, changed);
}

nb_code nbopt_sink_transposes(nbopt_graph *o, bool *changed) {
  int32_t *order, n;
  nb_code code = nbopt_order(o, &order, &n);
  if (code) return code;
  reader_counts uses = {NULL, o->n};
  if ((code = nbopt_count_uses(o, &uses.n))) {
    free(order);
    return code;
  }
  for (int32_t k = 0; k < n && !code; k++) {
    int32_t id = order[k];
    const nbopt_node *node = &o->nodes[id];
    if (!nbopt_movable(o, id) || node->nout != 1) continue;
    if (strcmp(node->def->name, "Transpose") == 0)
      code = compose(o, id, changed);
    else if (node->def->elementwise && node->def->alias < 0)
      code = sink_elementwise(o, id, &uses, changed);
    else if (is_reduction(node->def->name))
      code = sink_reduction(o, id, &uses, changed);
    else if (is_indexed(node->def->name))
      code = sink_indexed(o, id, &uses, changed);
  }
  free(uses.n);
  free(order);
  return code;
}
