/* Simplification (grappler's arithmetic optimizer, in part): ops that give back one of
   their inputs unchanged are bypassed, and chains of Reshapes collapse. Each rule needs
   the result to have the kept input's dtype and shape: an identity that broadcasts (x * ones
   of a larger shape) is not one. */
#include "opt.h"

#include <stdlib.h>
#include <string.h>

/* Whether every element of the known value v equals x. */
static bool all_equal(const nb_tensor *v, double x) {
  if (!v || !v->buf) return false;
  for (int64_t i = 0; i < v->size; i++)
    if (nb_item(v, i) != x) return false;
  return true;
}

/* Whether broadcasting key's tensor with the constant c leaves its shape (c has no more
   dims than it and each of c's dims is 1), so the op's output is shaped like key's. */
static bool shape_kept(const nbopt_graph *o, int64_t key, const nb_tensor *c) {
  const nbop_meta *m = nbopt_meta(o, key);
  if (m->rank < c->rank) return false;
  for (int d = 0; d < c->rank; d++)
    if (c->shape[d] != 1) return false;
  return true;
}

/* The input a binary op `op(x, c)` (or `op(c, x)` when commutes) returns when c is
   all `neutral`; -1 when none does. */
static int64_t neutral_operand(nbopt_graph *o, int32_t id, double neutral, bool commutes) {
  for (int i = 0; i < 2; i++) {
    if (i == 0 && !commutes) continue;
    int64_t c = nbopt_in(o, id, i), x = nbopt_in(o, id, 1 - i);
    const nb_tensor *v = nbopt_value(o, c);
    if (all_equal(v, neutral) && shape_kept(o, x, v) && nbopt_meta(o, x)->dtype == o->nodes[id].meta[0].dtype) return x;
  }
  return -1;
}

/* The node a key comes from, when it is output 0 of an op of this type. */
static bool from_op(const nbopt_graph *o, int64_t key, const char *type) {
  return nbgraph_key_out(key) == 0 && strcmp(o->nodes[nbgraph_key_node(key)].def->name, type) == 0;
}

/* AddN(x, zeros...) -> x: the one input that is not known to be all zeros (AddN's inputs
   all have the output's shape). */
static int64_t sum_without_zeros(nbopt_graph *o, int32_t id) {
  int64_t kept = -1;
  for (int32_t i = 0; i < o->nodes[id].nin; i++) {
    int64_t x = nbopt_in(o, id, i);
    if (all_equal(nbopt_value(o, x), 0)) continue;
    if (kept >= 0) return -1;
    kept = x;
  }
  return kept;
}

/* What node id's output 0 equals, when it is one of its inputs (or theirs); else -1. */
static int64_t bypass(nbopt_graph *o, int32_t id) {
  const char *t = o->nodes[id].def->name;
  if (strcmp(t, "Identity") == 0) return nbopt_in(o, id, 0);
  if (strcmp(t, "Mul") == 0) return neutral_operand(o, id, 1, true);
  if (strcmp(t, "RealDiv") == 0) return neutral_operand(o, id, 1, false);
  if (strcmp(t, "AddV2") == 0 || strcmp(t, "Add") == 0) return neutral_operand(o, id, 0, true);
  if (strcmp(t, "Sub") == 0) return neutral_operand(o, id, 0, false);
  if (strcmp(t, "AddN") == 0) return sum_without_zeros(o, id);
  if (strcmp(t, "Neg") == 0) {
    int64_t x = nbopt_in(o, id, 0);
    return from_op(o, x, "Neg") && nbopt_movable(o, nbgraph_key_node(x)) ? nbopt_in(o, nbgraph_key_node(x), 0) : -1;
  }
  if (strcmp(t, "Reshape") == 0) { /* to the shape it already has */
    int64_t x = nbopt_in(o, id, 0);
    return nbopt_same_meta(nbopt_meta(o, x), &o->nodes[id].meta[0]) ? x : -1;
  }
  return -1;
}

/* Reshape(Reshape(x, s1), s2) = Reshape(x, s2): the inner one's shape does not matter. */
static bool collapse_reshapes(nbopt_graph *o, int32_t id) {
  if (strcmp(o->nodes[id].def->name, "Reshape") != 0) return false;
  int64_t inner = nbopt_in(o, id, 0);
  if (!from_op(o, inner, "Reshape") || !nbopt_movable(o, nbgraph_key_node(inner))) return false;
  nbopt_set_input(o, id, 0, nbopt_in(o, nbgraph_key_node(inner), 0));
  return true;
}

nb_code nbopt_simplify(nbopt_graph *o, bool *changed) {
  int32_t *order, n;
  nb_code code = nbopt_order(o, &order, &n);
  if (code) return code;
  for (int32_t k = 0; k < n; k++) {
    int32_t id = order[k];
    if (!nbopt_movable(o, id) || o->nodes[id].nout != 1) continue;
    int64_t x = bypass(o, id);
    if (x >= 0 && nbgraph_key_node(x) != id) {
      nbopt_replace(o, nbgraph_key(id, 0), x);
      *changed = true;
    } else if (collapse_reshapes(o, id)) {
      *changed = true;
    }
  }
  free(order);
  return NB_OK;
}
