/* Constant folding's last step (grappler's "constant_folding" materializes folded values):
   a node whose value the graph computed when it was built becomes a Const of that value,
   so the nodes that only fed it are no longer needed. A feed replaces a value, so values
   downstream of a fed node that had one (a fed Const) are not folded; a fed node without a
   value (a Placeholder) leaves them as they are, since they were computed without its
   value and a fed value must have its static dtype and shape. */
#include "opt.h"

#include <stdlib.h>

/* Whether node id may become a Const: a single known output, no edges that must stay. */
static bool foldable(const nbopt_graph *o, int32_t id, const uint8_t *stale) {
  const nbopt_node *n = &o->nodes[id];
  return !stale[id] && !n->pinned && !n->nctrl && !n->ctrl_src && n->nin > 0 && n->nout == 1 && !n->redo &&
         n->src >= 0 && nbopt_value(o, nbgraph_key(id, 0));
}

static nb_code to_const(nbopt_graph *o, int32_t id) {
  nbopt_node *n = &o->nodes[id];
  const nbop_def *def = nbop_lookup("Const");
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(def, a);
  a[0].tensor = (nb_tensor *)nbopt_value(o, nbgraph_key(id, 0));
  a[1].type = a[0].tensor->dtype;
  nbop_attrval *copy = nbop_attrs_copy(&o->arena, def, a);
  if (!copy) return NB_NOMEM;
  n->def = def;
  n->attr = copy;
  n->nin = 0;
  n->redo = true;
  return NB_OK;
}

nb_code nbopt_fold_constants(nbopt_graph *o, bool *changed) {
  int32_t *order, n;
  nb_code code = nbopt_order(o, &order, &n);
  if (code) return code;
  uint8_t *stale = calloc((size_t)o->n + 1, 1);
  for (int i = 0; stale && i < o->nfeed; i++) {
    int64_t k = o->keys[i];
    stale[nbgraph_key_node(k)] = nbopt_value(o, k) != NULL;
  }
  for (int32_t k = 0; stale && k < n && !code; k++) {
    int32_t id = order[k];
    for (int32_t i = 0; i < o->nodes[id].nin; i++) stale[id] |= stale[nbgraph_key_node(nbopt_in(o, id, i))];
    if (foldable(o, id, stale)) {
      code = to_const(o, id);
      *changed = true;
    }
  }
  if (!stale) code = NB_NOMEM;
  free(stale);
  free(order);
  return code;
}
