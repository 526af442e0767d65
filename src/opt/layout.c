/* Layout assignment (TF's "tf-layout-optimization"): the kernels here compute in NHWC
   (src/ops/conv.c transposes NCHW operands into NHWC scratch and back on every call), so
   each NCHW conv, pool, BiasAdd and batch-norm op, and their gradient ops, becomes its
   NHWC form on Transposes of its 4-D operands, with a Transpose back on each 4-D result.
   Window attrs (strides, ksize, dilations, explicit_paddings) and shape operands
   (input_sizes, orig_input_shape) are permuted; filters are HWIO in both layouts, so
   filter_sizes stays. The Transposes this leaves between two rewritten ops are inverse
   pairs, which the transpose pass cancels. */
#include "opt.h"

#include <stdlib.h>
#include <string.h>

/* NCHW -> NHWC is Transpose by (0, 2, 3, 1); NHWC -> NCHW by (0, 3, 1, 2). */
static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};

enum { MAX_IO = 6 };

/* An op the pass rewrites: which inputs are 4-D data, which input holds a 4-D shape, which
   outputs are 4-D data. */
typedef struct layout_rule {
  const char *type;
  uint8_t data_in;  /* bit i: input i */
  int8_t shape_in;  /* -1 none */
  uint8_t data_out; /* bit i: output i */
} layout_rule;

static const layout_rule rules[] = {
    {"Conv2D", 1u << 0, -1, 1u << 0},
    {"Conv2DBackpropInput", 1u << 2, 0, 1u << 0},
    {"Conv2DBackpropFilter", 1u << 0 | 1u << 2, -1, 0},
    {"MaxPool", 1u << 0, -1, 1u << 0},
    {"MaxPoolGrad", 7u, -1, 1u << 0},
    {"MaxPoolGradGrad", 7u, -1, 1u << 0},
    {"AvgPool", 1u << 0, -1, 1u << 0},
    {"AvgPoolGrad", 1u << 1, 0, 1u << 0},
    {"BiasAdd", 1u << 0, -1, 1u << 0},
    {"BiasAddGrad", 1u << 0, -1, 0},
    {"FusedBatchNormV3", 1u << 0, -1, 1u << 0},
    {"FusedBatchNormGradV3", 3u, -1, 1u << 0},
};

static const layout_rule *rule_for(const nbopt_node *n) {
  for (size_t i = 0; i < sizeof rules / sizeof *rules; i++)
    if (strcmp(rules[i].type, n->def->name) == 0) return &rules[i];
  return NULL;
}

/* Whether node id is an NCHW op of the table whose data operands are all 4-D and whose
   shape operand is known, so that its NHWC form computes the same. */
static bool rewritable(nbopt_graph *o, int32_t id, const layout_rule *r) {
  const nbopt_node *n = &o->nodes[id];
  int f = nbopt_attr_slot(n->def, "data_format");
  if (f < 0 || !n->attr[f].s || strcmp(n->attr[f].s, "NCHW") != 0 || !nbopt_replaceable(o, id)) return false;
  if (n->pinned && n->nout > 1 && r->data_out) return false; /* one name cannot cover two nodes' outputs */
  for (int32_t i = 0; i < n->nin; i++)
    if ((r->data_in >> i & 1) && nbopt_meta(o, nbopt_in(o, id, i))->rank != 4) return false;
  if (r->shape_in >= 0) {
    const nb_tensor *s = nbopt_value(o, nbopt_in(o, id, r->shape_in));
    if (!s || s->rank != 1 || s->size != 4) return false;
  }
  return true;
}

/* values (4 per dim of an NCHW list attr: 1 value per dim, or a (before, after) pair per
   dim for explicit_paddings) in NHWC order, in the arena. */
static const int64_t *permuted_list(nbopt_graph *o, const int64_t *v, int n) {
  int per = n / 4;
  int64_t *p = nbcore_arena_alloc(&o->arena, (size_t)n * sizeof *p);
  if (!p) return NULL;
  for (int d = 0; d < 4; d++) memcpy(p + d * per, v + to_nhwc[d] * per, (size_t)per * sizeof *p);
  return p;
}

/* The attrs of the NHWC form: data_format and the 4-dim lists permuted. */
static bool nhwc_attrs(nbopt_graph *o, const nbopt_node *n, nbop_attrval *a) {
  memcpy(a, n->attr, (size_t)n->def->nattrs * sizeof *a);
  for (int s = 0; s < n->def->nattrs; s++) {
    const char *name = n->def->attrs[s].name;
    if (strcmp(name, "data_format") == 0) {
      a[s].s = "NHWC";
    } else if (n->def->attrs[s].kind == NB_ATTR_INTS && (a[s].n == 4 || a[s].n == 8) &&
               (!strcmp(name, "strides") || !strcmp(name, "ksize") || !strcmp(name, "dilations") ||
                !strcmp(name, "explicit_paddings"))) {
      if (!(a[s].ints = permuted_list(o, a[s].ints, a[s].n))) return false;
    }
  }
  return true;
}

/* A Const of shape value v (4 ints, NCHW order) in NHWC order. */
static int64_t permuted_shape(nbopt_graph *o, const nb_tensor *v, const char *base) {
  int64_t s[4];
  for (int d = 0; d < 4; d++) s[d] = (int64_t)nb_item(v, to_nhwc[d]);
  nb_tensor *t = nb_tensor_from(o->values, NB_I64, 1, (int64_t[]){4}, s);
  nb_tensor *cast = t && v->dtype != NB_I64 ? nb_cast(o->values, t, v->dtype) : t;
  return nbopt_const(o, cast, base);
}

/* The NHWC op's inputs: Transposes of the data, the shape permuted, the rest as they are. */
static bool nhwc_inputs(nbopt_graph *o, int32_t id, const layout_rule *r, int64_t *in) {
  const char *name = o->nodes[id].name;
  for (int32_t i = 0; i < o->nodes[id].nin; i++) {
    int64_t x = nbopt_in(o, id, i);
    if (r->data_in >> i & 1)
      in[i] = nbopt_transpose(o, x, to_nhwc, 4, name);
    else if (i == r->shape_in)
      in[i] = permuted_shape(o, nbopt_value(o, x), name);
    else
      in[i] = x;
    if (in[i] < 0) return false;
  }
  return true;
}

static nb_code rewrite(nbopt_graph *o, int32_t id, const layout_rule *r) {
  const nbopt_node n = o->nodes[id]; /* a copy: adding nodes moves o->nodes */
  nbop_attrval a[NBOP_MAX_ATTRS];
  int64_t in[MAX_IO];
  nbop_meta m[MAX_IO];
  if (!nhwc_attrs(o, &n, a) || !nhwc_inputs(o, id, r, in)) return NB_NOMEM;
  for (int32_t k = 0; k < n.nout; k++) {
    m[k] = n.meta[k];
    for (int d = 0; (r->data_out >> k & 1) && d < 4; d++) m[k].shape[d] = n.meta[k].shape[to_nhwc[d]];
  }
  int32_t op = nbopt_add(o, n.def->name, in, n.nin, a, m, n.nout, n.name);
  if (op < 0) return NB_NOMEM;
  /* id is no longer read: its name is free for the op, or for the Transpose giving its
     fetched value */
  int32_t named = op;
  for (int32_t k = 0; k < n.nout; k++) {
    int64_t to = nbgraph_key(op, k);
    if ((r->data_out >> k & 1) && (to = nbopt_transpose(o, to, to_nchw, 4, n.name)) < 0) return NB_NOMEM;
    if (n.pinned) named = nbgraph_key_node(to);
    nbopt_replace(o, nbgraph_key(id, k), to);
  }
  o->nodes[named].name = n.name;
  o->nodes[named].pinned = n.pinned; /* a fetch now resolves to it */
  return NB_OK;
}

nb_code nbopt_layout(nbopt_graph *o, bool *changed) {
  int32_t *order = NULL, n = 0;
  nb_code code = nbopt_order(o, &order, &n);
  for (int32_t k = 0; k < n && !code; k++) {
    const layout_rule *r = rule_for(&o->nodes[order[k]]);
    if (!r || o->nodes[order[k]].nin > MAX_IO || o->nodes[order[k]].nout > MAX_IO || !rewritable(o, order[k], r))
      continue;
    code = rewrite(o, order[k], r);
    *changed = true;
  }
  free(order);
  return code;
}
