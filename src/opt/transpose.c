/* Transposes: making them, and moving them (TF's "tf-move-transposes"). A Transpose whose
   input is a Transpose composes with it (and vanishes when the two are inverses), and one
   that keeps the order of its input's elements (it moves only dims of size 1) becomes a
   Reshape, a view. An elementwise op with an operand Transpose(x, p) runs on x with one
   Transpose by p after it, so that Transposes travel until they meet their inverse; its
   other operands y take the inverse permutation: Transpose(y, p^-1) (which cancels when y
   is Transpose(z, p)), or, when that only moves dims of size 1 (a bias vector against
   NHWC, a [1, C, 1, 1] tensor), a Reshape; operands of lower rank broadcast as if they had
   leading dims of size 1. The op moves only when that does not add Transposes that copy:
   the ones it removes (operands read by it alone, or readers of its output that invert p)
   must outnumber or equal the ones it adds. A reduction of a Transpose reduces the
   permuted axes of its input; Pad, Slice and ConcatV2 of Transposes take their paddings,
   begin, size and axis permuted. */
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

/* Who reads each node, from the start of the pass: uses[id] counts the readers of id's
   outputs (data inputs of live nodes, fetches), and first/next/reader list the reading
   nodes per edge. The pass visits a node before its readers and the nodes it makes read
   only nodes visited before, so a node's lists are still right when it is visited. A
   Transpose the pass puts after a moved op takes the op's readers (readers_move), so it
   moves on in the same pass; other nodes the pass made count as read more than once. */
typedef struct readers {
  int32_t *uses, *first, *next, *reader;
  int32_t len, uses_cap, first_cap;
} readers;

static nb_code readers_new(nbopt_graph *o, const int32_t *order, int32_t n, readers *r) {
  int32_t nedges = 0;
  for (int32_t k = 0; k < n; k++) nedges += o->nodes[order[k]].nin;
  *r = (readers){.len = o->n, .uses_cap = o->n + 1, .first_cap = o->n + 1};
  r->first = malloc((size_t)(o->n + 1) * sizeof *r->first);
  r->next = malloc((size_t)(nedges + 1) * sizeof *r->next);
  r->reader = malloc((size_t)(nedges + 1) * sizeof *r->reader);
  nb_code code = r->first && r->next && r->reader ? nbopt_count_uses(o, &r->uses) : NB_NOMEM;
  if (code) return code;
  for (int32_t id = 0; id < o->n; id++) r->first[id] = -1;
  for (int32_t k = 0, e = 0; k < n; k++)
    for (int32_t i = 0; i < o->nodes[order[k]].nin; i++, e++) {
      int32_t src = nbgraph_key_node(nbopt_in(o, order[k], i));
      r->reader[e] = order[k];
      r->next[e] = r->first[src];
      r->first[src] = e;
    }
  return NB_OK;
}

/* Node `to`, which the pass made, takes the readers of node `from`, which it replaces. */
static bool readers_move(readers *r, int32_t from, int32_t to) {
  if (!nbcore_grow_array((void **)&r->uses, &r->uses_cap, to + 1, sizeof *r->uses) ||
      !nbcore_grow_array((void **)&r->first, &r->first_cap, to + 1, sizeof *r->first))
    return false;
  for (; r->len <= to; r->len++) r->uses[r->len] = 0, r->first[r->len] = -1;
  r->uses[to] = r->uses[from]; /* from < to < len now */
  r->first[to] = r->first[from];
  return true;
}

static void readers_free(readers *r) { free(r->uses), free(r->first), free(r->next), free(r->reader); }

static bool read_once(const readers *r, int32_t id) { return id < r->len && r->uses[id] == 1; }

/* Whether node id's outputs have no readers but the `reads` inputs of one node. */
static bool read_only_by(const readers *r, int32_t id, int32_t reads) { return id < r->len && r->uses[id] == reads; }

static bool identity_perm(const int *p, int rank) {
  for (int d = 0; d < rank; d++)
    if (p[d] != d) return false;
  return true;
}

static void invert_perm(const int *p, int rank, int *inv) {
  for (int d = 0; d < rank; d++) inv[p[d]] = d;
}

/* ---- what a Transpose costs ---------------------------------------------------------------- */

/* The dims of Transpose(x, p) (x's facts m, rank `rank`) as a Reshape of x, when the
   Transpose keeps the order of x's elements: the dims it moves that are not known to be 1
   keep their order (p is increasing over them), and at most one dim is unknown (-1 in a
   Reshape's shape, which cannot be inferred beside a dim of 0). */
static bool as_reshape_dims(const nbop_meta *m, const int *p, int rank, int64_t *dims) {
  int last = -1, unknown = 0;
  bool empty = false;
  if (m->rank != rank) return false;
  for (int d = 0; d < rank; d++) {
    dims[d] = m->shape[p[d]];
    unknown += dims[d] < 0;
    empty |= dims[d] == 0;
    if (dims[d] == 1) continue;
    if (p[d] < last) return false;
    last = p[d];
  }
  return unknown == 0 || (unknown == 1 && !empty);
}

/* Whether key's value is known and small enough that what is computed from it alone is
   folded when the graph is written. */
static bool folds(const nbopt_graph *o, int64_t key) {
  const nb_tensor *v = nbopt_value(o, key);
  return v && v->size <= NBGRAPH_FOLD_MAX_ELEMS;
}

/* Whether Transpose(key, p) copies when run: not when it folds nor when it is a Reshape. */
static bool copies(const nbopt_graph *o, int64_t key, const int *p, int rank) {
  int64_t dims[NB_MAX_RANK];
  return !folds(o, key) && !as_reshape_dims(nbopt_meta(o, key), p, rank, dims);
}

/* A Reshape of key to dims[0..rank) (a new int64 Const), named after base; its key or -1. */
static int64_t reshape(nbopt_graph *o, int64_t key, const int64_t *dims, int rank, const char *base) {
  int64_t s = nbopt_const(o, nb_tensor_from(o->values, NB_I64, 1, (int64_t[]){rank}, dims), base);
  if (s < 0) return -1;
  nbop_meta m = {.dtype = nbopt_meta(o, key)->dtype, .rank = rank};
  memcpy(m.shape, dims, (size_t)rank * sizeof *dims);
  int64_t in[2] = {key, s};
  int32_t id = nbopt_add(o, "Reshape", in, 2, NULL, &m, 1, base);
  return id < 0 ? -1 : nbgraph_key(id, 0);
}

/* Transpose(key, p), composed with key's own Transpose when key is one: Transpose(Transpose(y,
   q), p) = Transpose(y, r) with r[i] = q[p[i]] (output dim i is the inner output's dim
   p[i], which is y's dim q[p[i]]); y itself when r is the identity. Its key, or -1. */
static int64_t transpose_composed(nbopt_graph *o, int64_t key, const int *p, int rank, const char *base) {
  int64_t y;
  int q[NB_MAX_RANK], r[NB_MAX_RANK], inner;
  if (!nbopt_transpose_of(o, key, &y, q, &inner) || inner != rank) return nbopt_transpose(o, key, p, rank, base);
  for (int d = 0; d < rank; d++) r[d] = q[p[d]];
  return identity_perm(r, rank) ? y : nbopt_transpose(o, y, r, rank, base);
}

/* Gives node id's name to the node of key, which computes id's value and takes its place
   (id, no longer read, frees the name), with id's fetch when it is fetched. */
static void take_name(nbopt_graph *o, int32_t id, int64_t key) {
  o->nodes[nbgraph_key_node(key)].name = o->nodes[id].name;
  o->nodes[nbgraph_key_node(key)].pinned = o->nodes[id].pinned; /* a fetch now resolves to it */
}

/* A Transpose of a Transpose composes; one that keeps its elements' order is a Reshape.
   A fetched one keeps its name on what replaces it (an Identity when that is its input's
   input). */
static nb_code rewrite_transpose(nbopt_graph *o, int32_t id, bool *changed) {
  int64_t x, y, dims[NB_MAX_RANK];
  int p[NB_MAX_RANK], q[NB_MAX_RANK], rank, inner;
  const char *name = o->nodes[id].name;
  if (!nbopt_transpose_of(o, nbgraph_key(id, 0), &x, p, &rank)) return NB_OK;
  int64_t to = -2;
  if (nbopt_transpose_of(o, x, &y, q, &inner) && inner == rank)
    to = transpose_composed(o, x, p, rank, name);
  else if (!folds(o, x) && as_reshape_dims(nbopt_meta(o, x), p, rank, dims))
    to = reshape(o, x, dims, rank, name);
  if (to == -2) return NB_OK;
  if (to >= 0 && o->nodes[id].pinned) {
    int32_t named = to == y ? nbopt_add(o, "Identity", &y, 1, NULL, nbopt_meta(o, y), 1, name) : nbgraph_key_node(to);
    to = named < 0 ? -1 : nbgraph_key(named, 0);
    if (to >= 0) take_name(o, id, to);
  }
  if (to < 0) return NB_NOMEM;
  nbopt_replace(o, nbgraph_key(id, 0), to);
  *changed = true;
  return NB_OK;
}

/* Replaces node n (id) by a node of its op on in[0..nin) followed, when `transposed`, by a
   Transpose by p; the new op's output facts are n's with dim i moved to p[i] (its output
   dim p[i] is n's dim i). n's name (free: id is no longer read) goes to what gives n's
   value: the new op, or the Transpose when n is fetched. */
static nb_code sink(nbopt_graph *o, readers *rd, int32_t id, const nbopt_node *n, const int64_t *in, const int *p,
                    int rank, bool transposed, bool *changed) {
  nbop_meta m = n->meta[0];
  for (int d = 0; transposed && d < rank; d++) m.shape[p[d]] = n->meta[0].shape[d];
  int32_t op = nbopt_add(o, n->def->name, in, n->nin, n->attr, &m, 1, n->name);
  if (op < 0) return NB_NOMEM;
  int64_t to = transposed ? nbopt_transpose(o, nbgraph_key(op, 0), p, rank, n->name) : nbgraph_key(op, 0);
  if (to < 0 || !readers_move(rd, id, nbgraph_key_node(to))) return NB_NOMEM;
  take_name(o, id, n->pinned ? to : nbgraph_key(op, 0));
  nbopt_replace(o, nbgraph_key(id, 0), to);
  *changed = true;
  return NB_OK;
}

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

/* ---- elementwise ops ----------------------------------------------------------------------- */

/* How an operand of op(Transpose(x, p), ...) reaches the op once it runs on x. */
typedef enum operand_move {
  AS_IS,       /* no dim it has that is not 1 moves: the same broadcast */
  UNTRANSPOSE, /* it is Transpose(x, p): x */
  RESHAPE,     /* Transpose(y, p^-1) keeps y's elements' order: a Reshape of y */
  TRANSPOSE,   /* Transpose(y, p^-1), y first reshaped to the op's rank when lower */
  BROADCAST,   /* y is BroadcastTo(v, shape) read by the op alone, and v moves without a
                  Transpose (`inner`): BroadcastTo(moved v, shape permuted) */
} operand_move;

typedef struct operand_plan {
  operand_move move, inner;
  int64_t dims[NB_MAX_RANK]; /* RESHAPE (or inner RESHAPE): the shape; TRANSPOSE: y's at the op's rank */
  const nb_tensor *shape;    /* BROADCAST: BroadcastTo's shape */
} operand_plan;

/* The plan for operand key of an op of rank `rank` moving past Transpose by p (inverse
   inv), but BROADCAST: y broadcasts as y' (its dims after rank - y's rank dims of 1), whose
   dim i moves to p[i]. False when it cannot move (its rank or too many dims unknown). */
static bool plan_tensor(nbopt_graph *o, int64_t key, const int *p, const int *inv, int rank, operand_plan *plan) {
  int64_t x;
  int q[NB_MAX_RANK], r;
  if (nbopt_transpose_of(o, key, &x, q, &r) && r == rank && !memcmp(q, p, (size_t)rank * sizeof *p)) {
    plan->move = UNTRANSPOSE;
    return true;
  }
  const nbop_meta *m = nbopt_meta(o, key);
  if (m->rank < 0 || m->rank > rank) return false;
  nbop_meta ext = {.dtype = m->dtype, .rank = rank};
  int lead = rank - m->rank, unknown = 0;
  bool fixed = true;
  for (int d = 0; d < rank; d++) {
    ext.shape[d] = d < lead ? 1 : m->shape[d - lead];
    unknown += ext.shape[d] < 0;
    fixed &= ext.shape[d] == 1 || p[d] == d;
  }
  if (fixed) {
    plan->move = AS_IS;
  } else if (as_reshape_dims(&ext, inv, rank, plan->dims)) {
    plan->move = RESHAPE;
  } else {
    if (lead && unknown > 1) return false;
    plan->move = TRANSPOSE;
    memcpy(plan->dims, ext.shape, sizeof ext.shape);
  }
  return true;
}

/* plan_tensor, or BROADCAST when the Transpose by p^-1 of key would copy and key is a
   BroadcastTo (of a known shape, read by the op alone) whose input moves without one: a
   broadcast costs the same whichever way its result is laid out. */
static bool plan_operand(nbopt_graph *o, int64_t key, const int *p, const int *inv, int rank, const readers *rd,
                         operand_plan *plan) {
  if (!plan_tensor(o, key, p, inv, rank, plan)) return false;
  int32_t b = nbgraph_key_node(key);
  if (plan->move != TRANSPOSE || folds(o, key) || strcmp(o->nodes[b].def->name, "BroadcastTo") != 0 ||
      !read_once(rd, b) || !nbopt_movable(o, b))
    return true;
  const nb_tensor *shape = nbopt_value(o, nbopt_in(o, b, 1));
  operand_plan v;
  if (!shape || shape->rank != 1 || shape->size != rank || !plan_tensor(o, nbopt_in(o, b, 0), p, inv, rank, &v) ||
      v.move == TRANSPOSE)
    return true;
  *plan = (operand_plan){.move = BROADCAST, .inner = v.move, .shape = shape};
  memcpy(plan->dims, v.dims, sizeof v.dims);
  return true;
}

/* Operand key moved by move (not BROADCAST) with plan's dims. */
static int64_t moved_tensor(nbopt_graph *o, int64_t key, operand_move move, const operand_plan *plan, const int *inv,
                            int rank, const char *base) {
  int64_t x;
  int q[NB_MAX_RANK], r;
  switch (move) {
    case AS_IS: return key;
    case UNTRANSPOSE: return nbopt_transpose_of(o, key, &x, q, &r) ? x : -1;
    case RESHAPE: return reshape(o, key, plan->dims, rank, base);
    default:
      if (nbopt_meta(o, key)->rank < rank && (key = reshape(o, key, plan->dims, rank, base)) < 0) return -1;
      return transpose_composed(o, key, inv, rank, base);
  }
}

/* The op's new operand for key by its plan. */
static int64_t moved_operand(nbopt_graph *o, int64_t key, const operand_plan *plan, const int *p, const int *inv,
                             int rank, const char *base) {
  if (plan->move != BROADCAST) return moved_tensor(o, key, plan->move, plan, inv, rank, base);
  int32_t b = nbgraph_key_node(key);
  int64_t in[2] = {moved_tensor(o, nbopt_in(o, b, 0), plan->inner, plan, inv, rank, base),
                   moved_index(o, plan->shape, p, rank, base)};
  if (in[0] < 0 || in[1] < 0) return -1;
  nbop_meta m = o->nodes[b].meta[0];
  for (int d = 0; d < rank; d++) m.shape[p[d]] = o->nodes[b].meta[0].shape[d];
  int32_t id = nbopt_add(o, "BroadcastTo", in, 2, o->nodes[b].attr, &m, 1, o->nodes[b].name);
  return id < 0 ? -1 : nbgraph_key(id, 0);
}

/* Copying Transposes the move removes: operands that are Transposes read by the op alone
   (an UNTRANSPOSE goes; a TRANSPOSE composes with the new one), counted once each. */
static int removed_operands(nbopt_graph *o, int32_t id, const readers *rd, const operand_plan *plans) {
  int removed = 0;
  for (int32_t i = 0; i < o->nodes[id].nin; i++) {
    if (plans[i].move != UNTRANSPOSE && plans[i].move != TRANSPOSE) continue;
    int64_t key = nbopt_in(o, id, i), x;
    int32_t t = nbgraph_key_node(key), reads = 0;
    int q[NB_MAX_RANK], r;
    bool first = true;
    for (int32_t j = 0; j < o->nodes[id].nin; j++) {
      bool same = nbgraph_key_node(nbopt_in(o, id, j)) == t;
      reads += same;
      first &= !(same && j < i);
    }
    if (first && read_only_by(rd, t, reads) && nbopt_transpose_of(o, key, &x, q, &r)) removed += copies(o, x, q, r);
  }
  return removed;
}

/* Whether every reader of node id is a Transpose by p^-1 that the pass may compose (and id
   is not fetched): the Transpose after the moved op then cancels with each of them. How
   many of them copy, in *copying. */
static bool inverted_by_readers(nbopt_graph *o, int32_t id, const int *inv, int rank, const readers *rd, int *copying) {
  int n = 0;
  *copying = 0;
  for (int32_t e = rd->first[id]; e >= 0; e = rd->next[e], n++) {
    int32_t t = rd->reader[e];
    int64_t x;
    int q[NB_MAX_RANK], r;
    if (!nbopt_movable(o, t) || !nbopt_transpose_of(o, nbgraph_key(t, 0), &x, q, &r) || x != nbgraph_key(id, 0) ||
        r != rank || memcmp(q, inv, (size_t)rank * sizeof *q))
      return false;
    *copying += copies(o, x, q, r);
  }
  return n > 0 && n == rd->uses[id];
}

/* Where the Transpose after op id would end up: id, or the last of a chain of unary
   elementwise ops each read by the next alone (they move too, each removing the Transpose
   before it and adding one after it). */
static int32_t chain_end(nbopt_graph *o, int32_t id, int rank, const readers *rd) {
  while (read_once(rd, id) && rd->first[id] >= 0) {
    int32_t next = rd->reader[rd->first[id]];
    const nbopt_node *n = &o->nodes[next];
    if (n->nin != 1 || n->nout != 1 || !n->def->elementwise || n->def->alias >= 0 || !nbopt_movable(o, next) ||
        n->meta[0].rank != rank)
      break;
    id = next;
  }
  return id;
}

/* Copying Transposes removed minus those added when op id moves past Transpose by p, with
   each operand's plan; INT32_MIN when it cannot move. */
static int32_t sink_gain(nbopt_graph *o, int32_t id, const int *p, int rank, const readers *rd, operand_plan *plans) {
  int inv[NB_MAX_RANK], added = 0, readers_copying;
  invert_perm(p, rank, inv);
  for (int32_t i = 0; i < o->nodes[id].nin; i++) {
    int64_t key = nbopt_in(o, id, i);
    if (!plan_operand(o, key, p, inv, rank, rd, &plans[i])) return INT32_MIN;
    if (plans[i].move == TRANSPOSE && !folds(o, key)) added++;
  }
  bool on_operands = added > 0;
  int removed = removed_operands(o, id, rd, plans);
  int32_t end = chain_end(o, id, rank, rd);
  if (end < rd->len && inverted_by_readers(o, end, inv, rank, rd, &readers_copying)) {
    removed += readers_copying;
  } else {
    nbop_meta m = o->nodes[id].meta[0];
    int64_t dims[NB_MAX_RANK];
    for (int d = 0; d < rank; d++) m.shape[p[d]] = o->nodes[id].meta[0].shape[d];
    added += !as_reshape_dims(&m, p, rank, dims);
  }
  if (removed == 0) return INT32_MIN; /* removing none moves nothing closer */
  /* a move that puts Transposes on other operands must pay: the move back would be as
     neutral, and the two would undo each other */
  return on_operands && removed == added ? -1 : removed - added;
}

/* op(Transpose(x, p), y...) -> Transpose(op(x, moved y...), p), with the p of the operands'
   Transposes that gains most, when the gain is not negative. */
static nb_code sink_elementwise(nbopt_graph *o, int32_t id, readers *rd, bool *changed) {
  const nbopt_node n = o->nodes[id]; /* a copy: adding nodes moves o->nodes */
  enum { MAX_IN = 8 };
  operand_plan plans[MAX_IN], best_plans[MAX_IN];
  int best[NB_MAX_RANK], rank = n.meta[0].rank;
  int32_t best_gain = -1;
  if (n.nin > MAX_IN || rank < 0 || nbopt_attr_slot(n.def, "shape") >= 0) /* AccumulateNV2: shape is a layout */
    return NB_OK;
  for (int32_t i = 0; i < n.nin; i++) {
    int64_t x;
    int p[NB_MAX_RANK], r;
    if (!nbopt_transpose_of(o, nbopt_in(o, id, i), &x, p, &r) || r != rank) continue;
    int32_t gain = sink_gain(o, id, p, rank, rd, plans);
    if (gain > best_gain) {
      best_gain = gain;
      memcpy(best, p, sizeof p);
      memcpy(best_plans, plans, sizeof plans);
    }
  }
  if (best_gain < 0) return NB_OK;
  int64_t in[MAX_IN];
  int inv[NB_MAX_RANK];
  invert_perm(best, rank, inv);
  for (int32_t i = 0; i < n.nin; i++)
    if ((in[i] = moved_operand(o, nbopt_in(o, id, i), &best_plans[i], best, inv, rank, n.name)) < 0) return NB_NOMEM;
  return sink(o, rd, id, &n, in, best, rank, true, changed);
}

/* ---- reductions ---------------------------------------------------------------------------- */

static bool is_reduction(const char *t) {
  return !strcmp(t, "Sum") || !strcmp(t, "Mean") || !strcmp(t, "Max") || !strcmp(t, "Min") || !strcmp(t, "Prod");
}

/* The permutation q that a reduction without keep_dims leaves: Reduce(Transpose(x, p), axes)
   keeps the dims i of Transpose(x, p) not reduced, in order: x's dims p[i]; Reduce(x,
   p[axes]) keeps x's dims not reduced in their own order, so result dim k is its dim q[k],
   the rank of p[i_k] among them. Its rank, or -1 when the axes repeat. */
static int kept_perm(const int *p, int rank, uint32_t reduced, int *q) {
  int k = 0;
  for (int i = 0; i < rank; i++) {
    if (reduced >> i & 1) continue;
    q[k] = 0;
    for (int j = 0; j < rank; j++) q[k] += !(reduced >> j & 1) && p[j] < p[i];
    k++;
  }
  return k;
}

/* Reduce(Transpose(x, p), axes) -> Reduce(x, p[axes]): with keep_dims, then Transposed by
   p (reduced dims are 1 wherever they are); without, Transposed by the permutation of the
   dims kept (none when they keep their order). */
static nb_code sink_reduction(nbopt_graph *o, int32_t id, readers *rd, bool *changed) {
  const nbopt_node n = o->nodes[id]; /* a copy: adding nodes moves o->nodes */
  int64_t x, key = nbopt_in(o, id, 0);
  int p[NB_MAX_RANK], q[NB_MAX_RANK], rank, keep_slot = nbopt_attr_slot(n.def, "keep_dims");
  const nb_tensor *axes = nbopt_value(o, nbopt_in(o, id, 1));
  if (keep_slot < 0 || !axes || axes->rank > 1 || axes->size > NB_MAX_RANK ||
      !nbopt_transpose_of(o, key, &x, p, &rank) || !read_once(rd, nbgraph_key_node(key)))
    return NB_OK;
  int32_t moved[NB_MAX_RANK];
  uint32_t reduced = 0; /* bits: dims of Transpose(x, p) */
  for (int64_t i = 0; i < axes->size; i++) {
    int a = (int)nb_item(axes, i);
    if (a < -rank || a >= rank) return NB_OK; /* the op's own error, at run time */
    a = a < 0 ? a + rank : a;
    moved[i] = p[a];
    reduced |= 1u << a;
  }
  int64_t ax = nbopt_const(o, nb_tensor_from(o->values, NB_I32, 1, (int64_t[]){axes->size}, moved), n.name);
  if (ax < 0) return NB_NOMEM;
  int64_t in[2] = {x, ax};
  if (n.attr[keep_slot].b) return sink(o, rd, id, &n, in, p, rank, true, changed);
  int kept = kept_perm(p, rank, reduced, q);
  if (kept != n.meta[0].rank) return NB_OK;
  return sink(o, rd, id, &n, in, q, kept, !identity_perm(q, kept), changed);
}

/* ---- Pad, Slice, ConcatV2 ------------------------------------------------------------------ */

/* Inputs [0, ndata) of node id are Transposes by one perm p, at least one read by id alone
   (so moving them removes one): in[] gets them with the Transposes taken off, *rank p's
   length (id's output rank). */
static bool strip_transposes(nbopt_graph *o, int32_t id, int32_t ndata, const readers *rd, int64_t *in, int *p,
                             int *rank) {
  bool single = false;
  *rank = -1;
  for (int32_t i = 0; i < ndata; i++) {
    int64_t key = nbopt_in(o, id, i), x;
    int q[NB_MAX_RANK], r;
    if (!nbopt_transpose_of(o, key, &x, q, &r) || (*rank >= 0 && (r != *rank || memcmp(q, p, (size_t)r * sizeof *q))))
      return false;
    memcpy(p, q, (size_t)r * sizeof *q);
    *rank = r;
    in[i] = x;
    single |= read_once(rd, nbgraph_key_node(key));
  }
  return single && *rank == o->nodes[id].meta[0].rank;
}

/* Pad(T(x, p), paddings), Slice(T(x, p), begin, size), ConcatV2(T(x1, p), ..., axis): dim i
   of T(x, p) is dim p[i] of x, so row i of paddings, begin and size moves to row p[i],
   and axis a becomes p[a]. */
static bool is_indexed(const char *t) { return !strcmp(t, "Pad") || !strcmp(t, "Slice") || !strcmp(t, "ConcatV2"); }

static nb_code sink_indexed(nbopt_graph *o, int32_t id, readers *rd, bool *changed) {
  const nbopt_node n = o->nodes[id]; /* a copy: adding nodes moves o->nodes */
  int32_t ndata = strcmp(n.def->name, "ConcatV2") == 0 ? n.nin - 1 : 1;
  int64_t in[8];
  int p[NB_MAX_RANK], rank;
  if (n.nin > 8 || !strip_transposes(o, id, ndata, rd, in, p, &rank)) return NB_OK;
  for (int32_t i = ndata; i < n.nin; i++) {
    const nb_tensor *v = nbopt_value(o, nbopt_in(o, id, i));
    int64_t k = v ? moved_index(o, v, p, rank, n.name) : -2;
    if (k == -2) return NB_OK;
    if ((in[i] = k) < 0) return NB_NOMEM;
  }
  return sink(o, rd, id, &n, in, p, rank, true, changed);
}

nb_code nbopt_sink_transposes(nbopt_graph *o, bool *changed) {
  int32_t *order, n;
  nb_code code = nbopt_order(o, &order, &n);
  if (code) return code;
  readers rd;
  code = readers_new(o, order, n, &rd);
  for (int32_t k = 0; k < n && !code; k++) {
    int32_t id = order[k];
    const nbopt_node *node = &o->nodes[id];
    if (!nbopt_replaceable(o, id) || node->nout != 1) continue;
    if (strcmp(node->def->name, "Transpose") == 0)
      code = rewrite_transpose(o, id, changed);
    else if (node->def->elementwise && node->def->alias < 0)
      code = sink_elementwise(o, id, &rd, changed);
    else if (is_reduction(node->def->name))
      code = sink_reduction(o, id, &rd, changed);
    else if (is_indexed(node->def->name))
      code = sink_indexed(o, id, &rd, changed);
  }
  readers_free(&rd);
  free(order);
  return code;
}
