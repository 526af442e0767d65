/* GraphDef export: a graph as TensorFlow's binary GraphDef, which
   tf.compat.v1.import_graph_def loads and runs.

   Each node becomes a NodeDef of its name and TF op type with TF's attrs: nabla's attrs
   by name, and the inferred ones (T, Tidx, N, Tin, ...) from the inputs' and outputs'
   dtypes through the op's argument list in TF's op registry (graphdef_opdefs.inc, made
   from TF by scripts/gen_graphdef_opdefs.py). Attrs are written sorted by name, as TF
   does, so the same graph always gives the same bytes.

   What TF spells differently is lowered: a variable becomes a VarHandleOp (its name) that
   its reads and updates take as their resource input; an update (Assign*VariableOp,
   ResourceApply*, ...) has no output in TF, so a value read after it (ReadVariableOp with
   the update as control input, "<update>/value") stands for nabla's output; _MatMulAdd
   becomes MatMul plus AddV2 and _EnsureShape TF's EnsureShape. While, If and function
   calls (graphdef_func.c) become TF's While / If / StatefulPartitionedCall with their
   function graphs in the FunctionDefLibrary. Host callbacks cannot leave the process:
   exporting one is an error naming its node. */
#include "graphdef_write.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- TF's op registry, as far as the export needs it -------------------------------------- */

typedef struct tf_opdef {
  const char *name;
  const char *inputs;  /* "name=KIND ..." (see the generator): argument name and type */
  const char *outputs; /* the same for the outputs */
  const char *attrs;   /* "name:type ..." in TF's declaration order */
  int stateful;
} tf_opdef;

static const tf_opdef tf_opdefs[] = {
#include "graphdef_opdefs.inc"
};

static int by_opdef_name(const void *key, const void *d) { return strcmp(key, ((const tf_opdef *)d)->name); }

static const tf_opdef *tf_lookup(const char *type) {
  return bsearch(type, tf_opdefs, sizeof tf_opdefs / sizeof *tf_opdefs, sizeof *tf_opdefs, by_opdef_name);
}

/* The parsed parts of a tf_opdef. */
static int parse_args(const char *s, nbio_tf_arg *args, int cap) {
  int n = 0;
  while (*s && n < cap) {
    nbio_tf_arg *a = &args[n++];
    memset(a, 0, sizeof *a);
    const char *eq = strchr(s, '='), *end = strchr(s, ' ');
    if (!end) end = s + strlen(s);
    snprintf(a->name, sizeof a->name, "%.*s", (int)(eq - s), s);
    const char *k = eq + 1, *star = memchr(k, '*', (size_t)(end - k));
    if (star) {
      snprintf(a->number_attr, sizeof a->number_attr, "%.*s", (int)(star - k), k);
      k = star + 1;
    }
    if (*k == '[') {
      a->list = true;
      snprintf(a->type_attr, sizeof a->type_attr, "%.*s", (int)(end - k - 2), k + 1);
    } else if (*k == '#') {
      a->fixed = atoi(k + 1);
    } else {
      snprintf(a->type_attr, sizeof a->type_attr, "%.*s", (int)(end - k), k);
    }
    s = *end ? end + 1 : end;
  }
  return n;
}

static void parse_opdef(const tf_opdef *d, nbio_tf_sig *sig) {
  sig->def = d;
  sig->nin = parse_args(d->inputs, sig->in, NBIO_TF_MAX_ARGS);
  sig->nout = parse_args(d->outputs, sig->out, NBIO_TF_MAX_ARGS);
  sig->nattr = 0;
  for (const char *s = d->attrs; *s && sig->nattr < NBIO_TF_MAX_ARGS;) {
    const char *colon = strchr(s, ':'), *end = strchr(s, ' ');
    if (!end) end = s + strlen(s);
    snprintf(sig->attr[sig->nattr].name, sizeof sig->attr[0].name, "%.*s", (int)(colon - s), s);
    snprintf(sig->attr[sig->nattr].type, sizeof sig->attr[0].type, "%.*s", (int)(end - colon - 1), colon + 1);
    sig->nattr++;
    s = *end ? end + 1 : end;
  }
}

bool nbio_tf_signature(nbio_writer *w, const char *type, const nbio_tf_sig **sig) {
  const tf_opdef *d = tf_lookup(type);
  if (!d) return *sig = NULL, false;
  size_t i = (size_t)(d - tf_opdefs);
  if (!w->sigs[i]) {
    nbio_tf_sig *s = nbcore_arena_alloc(&w->arena, sizeof *s);
    if (!s) return *sig = NULL, nbio_fail(w, NB_NOMEM, "out of memory"), false;
    parse_opdef(d, s);
    w->sigs[i] = s;
  }
  *sig = w->sigs[i];
  return true;
}

/* Where each argument's tensors lie among n tensors (inputs: not counting resource
   arguments, which nabla carries in attrs): first[a] and count[a]. A list argument takes
   what the single ones leave. */
void nbio_tf_arg_spans(const nbio_tf_arg *args, int nargs, int n, bool skip_resources, int *first, int *count) {
  int singles = 0;
  for (int a = 0; a < nargs; a++)
    if (!args[a].list && !args[a].number_attr[0] && !(skip_resources && args[a].fixed == NBIO_TF_RESOURCE)) singles++;
  int pos = 0;
  for (int a = 0; a < nargs; a++) {
    bool resource = skip_resources && args[a].fixed == NBIO_TF_RESOURCE && !args[a].number_attr[0];
    count[a] = resource ? 0 : args[a].list || args[a].number_attr[0] ? n - singles : 1;
    if (count[a] < 0) count[a] = 0;
    first[a] = pos;
    pos += count[a];
  }
}

/* ---- the writer ------------------------------------------------------------------------- */

nb_code nbio_fail(nbio_writer *w, nb_code code, const char *fmt, ...) {
  if (w->code) return w->code;
  w->code = code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->error, sizeof w->error, fmt, ap);
  va_end(ap);
  return code;
}

char *nbio_strf(nbio_writer *w, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof buf) return nbio_fail(w, NB_INVALID, "a name longer than 1023 bytes"), NULL;
  char *s = nbcore_arena_strdup(&w->arena, buf);
  if (!s) nbio_fail(w, NB_NOMEM, "out of memory");
  return s;
}

/* Appends p to a growing array of pointers (*arr, *n) in the writer's arena. */
static bool push_ptr(nbio_writer *w, void ***arr, size_t *n, void *p) {
  if (!p) return false;
  if ((*n & (*n - 1)) == 0) { /* n is 0 or a power of two: double */
    size_t cap = *n ? 2 * *n : 4;
    void **grown = nbcore_arena_alloc(&w->arena, cap * sizeof *grown);
    if (!grown) return nbio_fail(w, NB_NOMEM, "out of memory"), false;
    if (*n) memcpy(grown, *arr, *n * sizeof *grown);
    *arr = grown;
  }
  (*arr)[(*n)++] = p;
  return true;
}

Nbpb__NodeDef *nbio_node_new(nbio_writer *w, nbio_body *b, const char *name, const char *op) {
  Nbpb__NodeDef *nd = nbcore_arena_alloc(&w->arena, sizeof *nd);
  if (!nd) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  nbpb__node_def__init(nd);
  nd->name = (char *)(uintptr_t)name;
  nd->op = (char *)(uintptr_t)op;
  return push_ptr(w, (void ***)&b->nodes, &b->nnodes, nd) ? nd : NULL;
}

bool nbio_node_input(nbio_writer *w, Nbpb__NodeDef *nd, const char *ref) {
  return ref && push_ptr(w, (void ***)&nd->input, &nd->n_input, (void *)(uintptr_t)ref);
}

bool nbio_put_attr(nbio_writer *w, Nbpb__NodeDef *nd, const char *key, Nbpb__AttrValue *v) {
  if (!v) return nbio_fail(w, NB_NOMEM, "out of memory"), false;
  Nbpb__NodeDef__AttrEntry *e = nbcore_arena_alloc(&w->arena, sizeof *e);
  if (!e) return nbio_fail(w, NB_NOMEM, "out of memory"), false;
  nbpb__node_def__attr_entry__init(e);
  e->key = (char *)(uintptr_t)key;
  e->value = v;
  return push_ptr(w, (void ***)&nd->attr, &nd->n_attr, e);
}

static int by_attr_key(const void *a, const void *b) {
  return strcmp((*(Nbpb__NodeDef__AttrEntry *const *)a)->key, (*(Nbpb__NodeDef__AttrEntry *const *)b)->key);
}

void nbio_sort_attrs(Nbpb__NodeDef *nd) {
  if (nd->n_attr > 1) qsort(nd->attr, nd->n_attr, sizeof *nd->attr, by_attr_key);
}

/* ---- references to tensors --------------------------------------------------------------- */

const char *nbio_ref(nbio_writer *w, const nbio_body *b, int32_t node, int32_t out) {
  const nbio_ref_info *r = &b->refs[node];
  if (r->out_refs) return r->out_refs[out];
  if (!r->name) return nbio_fail(w, NB_INTERNAL, "node '%s' has no exported form", b->g->nodes[node].name), NULL;
  if (b->fn && r->arg) return r->name; /* a function argument: its name */
  if (!b->fn) return out == 0 ? r->name : nbio_strf(w, "%s:%d", r->name, out);
  /* function bodies: "node:out_arg:k", k counted within the output argument */
  int first[NBIO_TF_MAX_ARGS], count[NBIO_TF_MAX_ARGS];
  const nbio_tf_sig *s = r->sig;
  nbio_tf_arg_spans(s->out, s->nout, r->nout, false, first, count);
  for (int a = 0; a < s->nout; a++)
    if (out >= first[a] && out < first[a] + count[a])
      return nbio_strf(w, "%s:%s:%d", r->name, s->out[a].name, out - first[a]);
  return nbio_fail(w, NB_INTERNAL, "output %d of '%s' is not among %s's outputs", out, r->name, s->def->name), NULL;
}

/* Adds node id's data inputs from first to first + n, then its control inputs. */
bool nbio_data_inputs(nbio_writer *w, const nbio_body *b, Nbpb__NodeDef *nd, int32_t id, int first, int n) {
  const nbgraph_node *node = &b->g->nodes[id];
  for (int i = first; i < first + n; i++) {
    const nbgraph_edge *e = &b->g->edges[node->in0 + i];
    if (!nbio_node_input(w, nd, nbio_ref(w, b, e->src, e->out))) return false;
  }
  return true;
}

bool nbio_control_inputs(nbio_writer *w, const nbio_body *b, Nbpb__NodeDef *nd, int32_t id) {
  for (int32_t e = b->g->nodes[id].ctrl; e >= 0; e = b->g->edges[e].next_ctrl) {
    const nbio_ref_info *r = &b->refs[b->g->edges[e].src];
    if ((!r->name && !r->ctrl) || r->arg) continue; /* an argument runs first anyway */
    if (!nbio_node_input(w, nd, nbio_strf(w, "^%s", r->ctrl ? r->ctrl : r->name))) return false;
  }
  return true;
}

/* ---- attrs ------------------------------------------------------------------------------ */

static int nabla_attr_slot(const nbop_def *d, const char *name) {
  for (int a = 0; a < d->nattrs; a++)
    if (strcmp(d->attrs[a].name, name) == 0) return a;
  return -1;
}

/* nabla's value of an attr as the AttrValue of TF's type `type`. */
static Nbpb__AttrValue *nabla_attr_value(nbio_writer *w, const nbop_attr_spec *spec, const nbop_attrval *v,
                                         const char *type) {
  nbcore_arena *a = &w->arena;
  switch (spec->kind) {
    case NB_ATTR_INT: return nbio_attr_int(a, v->i);
    case NB_ATTR_FLOAT: return nbio_attr_float(a, v->f);
    case NB_ATTR_BOOL: return nbio_attr_bool(a, v->b);
    case NB_ATTR_STR: return nbio_attr_str(a, v->s ? v->s : "");
    case NB_ATTR_TYPE: return nbio_attr_type(a, nbio_dtype_to_tf(v->type));
    case NB_ATTR_TENSOR: return nbio_attr_tensor(a, v->tensor);
    case NB_ATTR_FLOATS: return nbio_attr_floats(a, v->floats, v->n);
    case NB_ATTR_INTS:
      return strcmp(type, "shape") == 0 ? nbio_attr_shape(a, v->n, v->ints)
                                        : nbio_attr_ints(a, v->ints, v->n > 0 ? v->n : 0);
    case NB_ATTR_TYPES: {
      int t[64], n = v->n < 64 ? v->n : 64;
      for (int i = 0; i < n; i++) t[i] = nbio_dtype_to_tf(v->types[i]);
      return nbio_attr_types(a, t, n);
    }
  }
  return NULL;
}

/* The dtype TF's type attr `name` takes at node id: that of the first tensor of an
   argument typed by it (inputs, then outputs); -1 when no argument has a tensor. */
static int inferred_type(const nbio_body *b, int32_t id, const nbio_tf_sig *s, const char *name) {
  const nb_graph *g = b->g;
  const nbgraph_node *n = &g->nodes[id];
  int first[NBIO_TF_MAX_ARGS], count[NBIO_TF_MAX_ARGS];
  nbio_tf_arg_spans(s->in, s->nin, n->nin, true, first, count);
  for (int a = 0; a < s->nin; a++)
    if (count[a] > 0 && strcmp(s->in[a].type_attr, name) == 0) {
      const nbgraph_edge *e = &g->edges[n->in0 + first[a]];
      return nbio_dtype_to_tf(g->outs[g->nodes[e->src].out0 + e->out].meta.dtype);
    }
  nbio_tf_arg_spans(s->out, s->nout, n->nout, false, first, count);
  for (int a = 0; a < s->nout; a++)
    if (count[a] > 0 && strcmp(s->out[a].type_attr, name) == 0)
      return nbio_dtype_to_tf(g->outs[n->out0 + first[a]].meta.dtype);
  return -1;
}

/* The length of the list argument whose number attr is `name`, -1 when none. */
static int inferred_number(const nbio_body *b, int32_t id, const nbio_tf_sig *s, const char *name) {
  const nbgraph_node *n = &b->g->nodes[id];
  int first[NBIO_TF_MAX_ARGS], count[NBIO_TF_MAX_ARGS];
  nbio_tf_arg_spans(s->in, s->nin, n->nin, true, first, count);
  for (int a = 0; a < s->nin; a++)
    if (strcmp(s->in[a].number_attr, name) == 0) return count[a];
  nbio_tf_arg_spans(s->out, s->nout, n->nout, false, first, count);
  for (int a = 0; a < s->nout; a++)
    if (strcmp(s->out[a].number_attr, name) == 0) return count[a];
  return -1;
}

bool nbio_write_attrs(nbio_writer *w, const nbio_body *b, Nbpb__NodeDef *nd, int32_t id, const nbio_tf_sig *s) {
  const nbgraph_node *n = &b->g->nodes[id];
  for (int t = 0; t < s->nattr; t++) {
    const char *name = s->attr[t].name, *type = s->attr[t].type;
    int slot = nabla_attr_slot(n->def, name);
    Nbpb__AttrValue *v = NULL;
    if (slot >= 0 && !(n->def->attrs[slot].kind == NB_ATTR_TYPE && n->attr[slot].type == NBOP_TYPE_UNSET))
      v = nabla_attr_value(w, &n->def->attrs[slot], &n->attr[slot], type);
    else if (strcmp(type, "type") == 0) {
      int dt = inferred_type(b, id, s, name);
      if (dt < 0) continue; /* an empty list: TF's default */
      v = nbio_attr_type(&w->arena, dt);
    } else if (strcmp(type, "int") == 0) {
      int k = inferred_number(b, id, s, name);
      if (k < 0) continue;
      v = nbio_attr_int(&w->arena, k);
    } else {
      continue; /* TF's default, which the importer fills in */
    }
    if (!nbio_put_attr(w, nd, name, v)) return false;
  }
  return true;
}

/* ---- nodes ------------------------------------------------------------------------------- */

/* The variables an update or read node names: one in _variable, several in _variables. */
int nbio_node_variables(const nbgraph_node *n, nb_variable **vars, int cap) {
  int slot = nabla_attr_slot(n->def, "_variable");
  if (slot >= 0) return vars[0] = nbcore_variable_from_bits(n->attr[slot].i), 1;
  slot = nabla_attr_slot(n->def, "_variables");
  if (slot < 0) return 0;
  int k = n->attr[slot].n < cap ? n->attr[slot].n : cap;
  for (int i = 0; i < k; i++) vars[i] = nbcore_variable_from_bits(n->attr[slot].ints[i]);
  return k;
}

const char *nbio_handle_ref(nbio_writer *w, const nbio_body *b, const nb_variable *v) {
  for (int32_t i = 0; i < b->nhandles; i++)
    if (b->handles[i].var == v) return b->handles[i].name;
  return nbio_fail(w, NB_INTERNAL, "variable '%s' has no resource in this graph", v->name), NULL;
}

/* A node as itself: TF's op of its type, inputs (resource arguments from its variables),
   attrs. */
static bool write_plain(nbio_writer *w, nbio_body *b, int32_t id, const char *name, const char *op,
                        const nbio_tf_sig *s) {
  const nbgraph_node *n = &b->g->nodes[id];
  Nbpb__NodeDef *nd = nbio_node_new(w, b, name, op);
  if (!nd) return false;
  nb_variable *vars[NBIO_TF_MAX_ARGS];
  int nvars = nbio_node_variables(n, vars, NBIO_TF_MAX_ARGS), used = 0;
  int first[NBIO_TF_MAX_ARGS], count[NBIO_TF_MAX_ARGS];
  nbio_tf_arg_spans(s->in, s->nin, n->nin, true, first, count);
  for (int a = 0; a < s->nin; a++) {
    if (s->in[a].fixed == NBIO_TF_RESOURCE && !s->in[a].number_attr[0]) {
      if (used >= nvars) return nbio_fail(w, NB_INTERNAL, "node '%s' (%s) has too few variables", n->name, op), false;
      if (!nbio_node_input(w, nd, nbio_handle_ref(w, b, vars[used++]))) return false;
    } else if (!nbio_data_inputs(w, b, nd, id, first[a], count[a]))
      return false;
  }
  if (!nbio_control_inputs(w, b, nd, id) || !nbio_write_attrs(w, b, nd, id, s)) return false;
  nbio_sort_attrs(nd);
  return true;
}

/* An update TF gives no output: the update itself, then (when something reads nabla's
   output) "<name>/value", a read of its first variable after it. */
static bool write_update(nbio_writer *w, nbio_body *b, int32_t id, const nbio_tf_sig *s) {
  const nbgraph_node *n = &b->g->nodes[id];
  if (!write_plain(w, b, id, b->refs[id].ctrl, n->def->name, s)) return false;
  if (!b->refs[id].name) return true;
  nb_variable *v;
  nbio_node_variables(n, &v, 1);
  Nbpb__NodeDef *nd = nbio_node_new(w, b, b->refs[id].name, "ReadVariableOp");
  return nd && nbio_node_input(w, nd, nbio_handle_ref(w, b, v)) &&
         nbio_node_input(w, nd, nbio_strf(w, "^%s", b->refs[id].ctrl)) &&
         nbio_put_attr(w, nd, "dtype", nbio_attr_type(&w->arena, nbio_dtype_to_tf(v->dtype)));
}

/* _MatMulAdd(a, b, acc) = acc + a b: "<name>/MatMul" and the AddV2 "<name>". */
static bool write_matmul_add(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbio_tf_sig *mm, *add;
  if (!nbio_tf_signature(w, "MatMul", &mm) || !nbio_tf_signature(w, "AddV2", &add))
    return nbio_fail(w, NB_INTERNAL, "MatMul or AddV2 missing from the op table"), false;
  const nbgraph_node *n = &b->g->nodes[id];
  const char *prod = nbio_strf(w, "%s/MatMul", b->refs[id].name);
  Nbpb__NodeDef *m = nbio_node_new(w, b, prod, "MatMul");
  if (!m || !nbio_data_inputs(w, b, m, id, 0, 2) || !nbio_control_inputs(w, b, m, id)) return false;
  static const char *const flags[] = {"grad_a", "grad_b", "transpose_a", "transpose_b"};
  for (int f = 0; f < 4; f++)
    if (!nbio_put_attr(w, m, flags[f], nbio_attr_bool(&w->arena, n->attr[nabla_attr_slot(n->def, flags[f])].b)))
      return false;
  int dt = nbio_dtype_to_tf(b->g->outs[n->out0].meta.dtype);
  if (!nbio_put_attr(w, m, "T", nbio_attr_type(&w->arena, dt))) return false;
  nbio_sort_attrs(m);
  Nbpb__NodeDef *sum = nbio_node_new(w, b, b->refs[id].name, "AddV2");
  const nbio_ref_info saved = b->refs[id];
  b->refs[id] = (nbio_ref_info){.name = prod, .sig = mm, .nout = 1};
  const char *prod_ref = nbio_ref(w, b, id, 0);
  b->refs[id] = saved;
  return sum && nbio_data_inputs(w, b, sum, id, 2, 1) && nbio_node_input(w, sum, prod_ref) &&
         nbio_put_attr(w, sum, "T", nbio_attr_type(&w->arena, dt));
}

/* _EnsureShape(x) with attr shape: TF's EnsureShape. */
static bool write_ensure_shape(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  int slot = nabla_attr_slot(n->def, "shape");
  Nbpb__NodeDef *nd = nbio_node_new(w, b, b->refs[id].name, "EnsureShape");
  if (!nd || !nbio_data_inputs(w, b, nd, id, 0, 1) || !nbio_control_inputs(w, b, nd, id)) return false;
  return nbio_put_attr(w, nd, "T", nbio_attr_type(&w->arena, nbio_dtype_to_tf(b->g->outs[n->out0].meta.dtype))) &&
         nbio_put_attr(w, nd, "shape", nbio_attr_shape(&w->arena, n->attr[slot].n, n->attr[slot].ints));
}

/* _StackGet(stack, t) = stack[t]: GatherV2 on axis 0 ("<name>/axis", an int32 Const). */
static bool write_stack_get(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  const char *axis = nbio_write_int32_const(w, b, nbio_strf(w, "%s/axis", b->refs[id].node), (int32_t[]){0}, -1);
  Nbpb__NodeDef *nd = nbio_node_new(w, b, b->refs[id].node, "GatherV2");
  if (!axis || !nd || !nbio_data_inputs(w, b, nd, id, 0, 2) || !nbio_node_input(w, nd, axis) ||
      !nbio_control_inputs(w, b, nd, id))
    return false;
  return nbio_put_attr(w, nd, "Taxis", nbio_attr_type(&w->arena, NBIO_TF_INT32)) &&
         nbio_put_attr(w, nd, "Tindices", nbio_attr_type(&w->arena, NBIO_TF_INT64)) &&
         nbio_put_attr(w, nd, "Tparams", nbio_attr_type(&w->arena, nbio_dtype_to_tf(b->g->outs[n->out0].meta.dtype))) &&
         nbio_put_attr(w, nd, "batch_dims", nbio_attr_int(&w->arena, 0));
}

/* The reference to output arg `arg` (its first tensor) of node `name` written in b. */
static const char *local_ref(nbio_writer *w, const nbio_body *b, const char *name, const char *arg) {
  return b->fn ? nbio_strf(w, "%s:%s:0", name, arg) : name;
}

/* A node of one type attr T (and one more type attr when extra is set) on inputs in[0..n). */
static Nbpb__NodeDef *typed_node(nbio_writer *w, nbio_body *b, const char *name, const char *op, int dtype,
                                 const char *const *in, int n, const char *extra, int extra_type) {
  Nbpb__NodeDef *nd = name ? nbio_node_new(w, b, name, op) : NULL;
  for (int i = 0; i < n && nd; i++)
    if (!nbio_node_input(w, nd, in[i])) return NULL;
  if (!nd || !nbio_put_attr(w, nd, "T", nbio_attr_type(&w->arena, dtype)) ||
      (extra && !nbio_put_attr(w, nd, extra, nbio_attr_type(&w->arena, extra_type))))
    return NULL;
  nbio_sort_attrs(nd);
  return nd;
}

/* _StackGetGrad(stack, t, dy): zeros of the stack's shape with dy at [t], as
   TensorScatterUpdate(ZerosLike(stack), Reshape(t, [1, 1]), ExpandDims(dy, 0)). */
static bool write_stack_get_grad(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  int dt = nbio_dtype_to_tf(b->g->outs[n->out0].meta.dtype);
  const char *in[3];
  for (int i = 0; i < 3; i++) {
    const nbgraph_edge *e = &b->g->edges[n->in0 + i];
    in[i] = nbio_ref(w, b, e->src, e->out);
  }
  const char *zeros = nbio_strf(w, "%s/zeros", b->refs[id].node),
             *indices = nbio_strf(w, "%s/indices", b->refs[id].node);
  const char *updates = nbio_strf(w, "%s/updates", b->refs[id].node);
  const char *shape =
      nbio_write_int32_const(w, b, nbio_strf(w, "%s/indices_shape", b->refs[id].node), (int32_t[]){1, 1}, 2);
  const char *axis = nbio_write_int32_const(w, b, nbio_strf(w, "%s/axis", b->refs[id].node), (int32_t[]){0}, -1);
  if (!shape || !axis || !typed_node(w, b, zeros, "ZerosLike", dt, &in[0], 1, NULL, 0) ||
      !typed_node(w, b, indices, "Reshape", NBIO_TF_INT64, (const char *[]){in[1], shape}, 2, "Tshape",
                  NBIO_TF_INT32) ||
      !typed_node(w, b, updates, "ExpandDims", dt, (const char *[]){in[2], axis}, 2, "Tdim", NBIO_TF_INT32))
    return false;
  const char *parts[3] = {local_ref(w, b, zeros, "y"), local_ref(w, b, indices, "output"),
                          local_ref(w, b, updates, "output")};
  Nbpb__NodeDef *nd =
      typed_node(w, b, b->refs[id].node, "TensorScatterUpdate", dt, parts, 3, "Tindices", NBIO_TF_INT64);
  return nd && nbio_control_inputs(w, b, nd, id);
}

/* _CustomGradient and _RecomputeGrad (inputs: the forward function's outputs, then its
   inputs) pass their first num_outputs inputs through: IdentityN of those, as TF's
   custom_gradient writes in graphs. */
static bool write_custom_gradient(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  Nbpb__NodeDef *nd = nbio_node_new(w, b, b->refs[id].node, "IdentityN");
  int *types = nbcore_arena_alloc(&w->arena, ((size_t)n->nout + 1) * sizeof *types);
  if (!nd || !types || !nbio_data_inputs(w, b, nd, id, 0, n->nout) || !nbio_control_inputs(w, b, nd, id))
    return nbio_fail(w, NB_NOMEM, "out of memory"), false;
  for (int i = 0; i < n->nout; i++) types[i] = nbio_dtype_to_tf(b->g->outs[n->out0 + i].meta.dtype);
  return nbio_put_attr(w, nd, "T", nbio_attr_types(&w->arena, types, n->nout));
}

/* nabla's internal ops, the TF op whose outputs stand for theirs, and their writers. */
static const struct {
  const char *type, *tf_type;
  bool (*write)(nbio_writer *w, nbio_body *b, int32_t id);
} lowered[] = {
    {"_CustomGradient", "IdentityN", write_custom_gradient},
    {"_EnsureShape", "EnsureShape", write_ensure_shape},
    {"_MatMulAdd", "AddV2", write_matmul_add},
    {"_RecomputeGrad", "IdentityN", write_custom_gradient},
    {"_StackGet", "GatherV2", write_stack_get},
    {"_StackGetGrad", "TensorScatterUpdate", write_stack_get_grad},
};

static int lowered_index(const char *type) {
  for (int i = 0; i < (int)(sizeof lowered / sizeof *lowered); i++)
    if (strcmp(lowered[i].type, type) == 0) return i;
  return -1;
}

static bool is_host_callback(const nbgraph_node *n) {
  return strcmp(n->def->name, "PyFunc") == 0 || strcmp(n->def->name, "PyFuncStateless") == 0;
}

/* Whether TF's op has no outputs where nabla's returns the updated value. */
static bool is_update(const nbio_tf_sig *s, const nbgraph_node *n) { return s && s->nout == 0 && n->nout > 0; }

/* Whether some node reads a data output of node id. */
static bool has_data_consumer(const nb_graph *g, int32_t id) {
  for (int32_t e = g->nodes[id].first_use; e >= 0; e = g->edges[e].next_use)
    if (g->edges[e].out >= 0) return true;
  return false;
}

/* A user's op (nb_register_op) TF's registry lacks: written with its type and nabla's
   attrs, which TF reports as an unknown op when it loads the graph unless the user loads
   their TF kernel library too. nabla's own ops TF lacks are an error instead. */
static bool write_unknown_op(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  Nbpb__NodeDef *nd = nbio_node_new(w, b, b->refs[id].node, n->def->name);
  if (!nd || !nbio_data_inputs(w, b, nd, id, 0, n->nin) || !nbio_control_inputs(w, b, nd, id)) return false;
  for (int a = 0; a < n->def->nattrs; a++) {
    const nbop_attr_spec *spec = &n->def->attrs[a];
    if (spec->name[0] == '_') continue;
    if (!nbio_put_attr(w, nd, spec->name, nabla_attr_value(w, spec, &n->attr[a], ""))) return false;
  }
  nbio_sort_attrs(nd);
  return true;
}

/* TF's node names start with a letter, digit or '.': nabla's names of internal ops
   ("_CustomGradient") get the prefix "nb". */
static const char *tf_node_name(nbio_writer *w, const char *name) {
  return name[0] == '_' ? nbio_strf(w, "nb%s", name) : name;
}

nb_code nbio_plan_node(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  nbio_ref_info *r = &b->refs[id];
  r->nout = n->nout;
  r->node = r->name = tf_node_name(w, n->name);
  if (is_host_callback(n))
    return nbio_fail(w, NB_UNIMPLEMENTED,
                     "node '%s' is a host callback (%s), which runs C code of this process: TensorFlow cannot run it",
                     n->name, n->def->name);
  int low = lowered_index(n->def->name);
  const char *type = low >= 0 ? lowered[low].tf_type : n->def->name;
  if (nbio_tf_signature(w, type, &r->sig) && is_update(r->sig, n)) {
    r->ctrl = r->node;
    r->name = has_data_consumer(b->g, id) ? nbio_strf(w, "%s/value", r->node) : NULL;
    nbio_tf_signature(w, "ReadVariableOp", &r->sig);
    r->nout = 1;
  }
  return w->code;
}

nb_code nbio_write_node(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  const char *type = n->def->name;
  int low = lowered_index(type);
  if (low >= 0) return lowered[low].write(w, b, id), w->code;
  if (nbio_write_function_node(w, b, id)) return w->code;
  const nbio_tf_sig *s;
  if (!nbio_tf_signature(w, type, &s)) {
    if (w->code) return w->code;
    if (type[0] == '_')
      return nbio_fail(w, NB_UNIMPLEMENTED, "node '%s': internal op %s has no TensorFlow form", n->name, type);
    if (nbop_is_builtin(n->def))
      return nbio_fail(w, NB_UNIMPLEMENTED, "node '%s': op %s is nabla's, which TensorFlow lacks: TF cannot run it",
                       n->name, type);
    return write_unknown_op(w, b, id), w->code;
  }
  if (is_update(s, n)) return write_update(w, b, id, s), w->code;
  return write_plain(w, b, id, b->refs[id].node, type, s), w->code;
}

const char *nbio_write_int32_const(nbio_writer *w, nbio_body *b, const char *name, const int32_t *v, int n) {
  if (!name) return NULL;
  int count = n >= 0 ? n : 1;
  int64_t dim = n;
  Nbpb__NodeDef *nd = nbio_node_new(w, b, name, "Const");
  Nbpb__TensorProto *p = nbcore_arena_alloc(&w->arena, sizeof *p);
  Nbpb__AttrValue *value = nbcore_arena_alloc(&w->arena, sizeof *value);
  uint8_t *data = nbcore_arena_alloc(&w->arena, (size_t)count * sizeof *v + 1);
  if (!nd || !p || !value || !data) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  nbpb__tensor_proto__init(p);
  p->dtype = NBIO_TF_INT32;
  p->tensor_shape = nbio_shape_proto(&w->arena, n >= 0 ? 1 : 0, &dim);
  if (count) memcpy(data, v, (size_t)count * sizeof *v);
  p->tensor_content.data = data;
  p->tensor_content.len = (size_t)count * sizeof *v;
  nbpb__attr_value__init(value);
  value->value_case = NBPB__ATTR_VALUE__VALUE_TENSOR;
  value->tensor = p;
  if (!p->tensor_shape || !nbio_put_attr(w, nd, "dtype", nbio_attr_type(&w->arena, NBIO_TF_INT32)) ||
      !nbio_put_attr(w, nd, "value", value))
    return NULL;
  return b->fn ? nbio_strf(w, "%s:output:0", name) : name;
}

/* ---- the graph ------------------------------------------------------------------------------ */

static int by_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static bool handle_taken(const nbio_body *b, const char *name) {
  for (int32_t i = 0; i < b->nhandles; i++)
    if (strcmp(b->handles[i].name, name) == 0) return true;
  return false;
}

/* A VarHandleOp per variable g and its function graphs use, named by the variable (with
   "_1", ... where a node or an earlier handle has that name). */
static nb_code write_handles(nbio_writer *w, nbio_body *b) {
  const nb_graph *g = b->g;
  const nb_variable **vars;
  int nvars = nbio_graph_vars(w, &g, 1, &vars);
  const char **names = malloc(((size_t)g->nnodes + 1) * sizeof *names);
  b->handles = nbcore_arena_alloc(&w->arena, ((size_t)nvars + 1) * sizeof *b->handles);
  if (nvars < 0 || !names || !b->handles) {
    free(names);
    return nbio_fail(w, NB_NOMEM, "out of memory");
  }
  for (int32_t i = 0; i < g->nnodes; i++) names[i] = g->nodes[i].name;
  qsort(names, (size_t)g->nnodes, sizeof *names, by_str);
  for (int v = 0; v < nvars && !w->code; v++) {
    const nb_variable *var = vars[v];
    const char *name = var->name;
    for (int k = 1; bsearch(&name, names, (size_t)g->nnodes, sizeof *names, by_str) || handle_taken(b, name); k++)
      name = nbio_strf(w, "%s_%d", var->name, k);
    b->handles[b->nhandles++] = (nbio_handle){var, name};
    Nbpb__NodeDef *nd = nbio_node_new(w, b, name, "VarHandleOp");
    if (!nd || !nbio_put_attr(w, nd, "dtype", nbio_attr_type(&w->arena, nbio_dtype_to_tf(var->dtype))) ||
        !nbio_put_attr(w, nd, "shape", nbio_attr_shape(&w->arena, var->rank, var->shape)) ||
        !nbio_put_attr(w, nd, "shared_name", nbio_attr_str(&w->arena, name)))
      break;
    nbio_sort_attrs(nd);
  }
  free(names);
  return w->code;
}

bool nbio_body_refs(nbio_writer *w, nbio_body *b) {
  b->refs = nbcore_arena_alloc(&w->arena, ((size_t)b->g->nnodes + 1) * sizeof *b->refs);
  if (!b->refs) return nbio_fail(w, NB_NOMEM, "out of memory"), false;
  memset(b->refs, 0, ((size_t)b->g->nnodes + 1) * sizeof *b->refs);
  return true;
}

nb_code nbio_write_body(nbio_writer *w, nbio_body *b) {
  const nb_graph *g = b->g;
  if (!b->refs && !nbio_body_refs(w, b)) return w->code;
  for (int32_t id = 0; id < g->nnodes && !w->code; id++)
    if (!b->refs[id].arg) nbio_plan_node(w, b, id);
  for (int32_t id = 0; id < g->nnodes && !w->code; id++)
    if (!b->refs[id].arg) nbio_write_node(w, b, id);
  return w->code;
}

/* TF 2.21's GraphDef version (TF_GRAPH_DEF_VERSION), which its as_graph_def writes. */
enum { TF_PRODUCER = 2474 };

/* g as a packed GraphDef in *data (malloc'd), *size bytes. */
static nb_code write_graph(nbio_writer *w, const nb_graph *g, void **data, size_t *size) {
  nbio_body b = {.g = g};
  if (write_handles(w, &b) || nbio_write_body(w, &b)) return w->code;
  Nbpb__VersionDef versions;
  nbpb__version_def__init(&versions);
  versions.producer = TF_PRODUCER;
  Nbpb__FunctionDefLibrary lib;
  nbpb__function_def_library__init(&lib);
  lib.function = w->funcs;
  lib.n_function = w->nfuncs;
  Nbpb__GraphDef gd;
  nbpb__graph_def__init(&gd);
  gd.node = b.nodes;
  gd.n_node = b.nnodes;
  gd.versions = &versions;
  if (w->nfuncs) gd.library = &lib;
  *size = nbpb__graph_def__get_packed_size(&gd);
  *data = malloc(*size ? *size : 1);
  if (!*data) return nbio_fail(w, NB_NOMEM, "out of memory for a GraphDef of %zu bytes", *size);
  nbpb__graph_def__pack(&gd, *data);
  return NB_OK;
}

/* Records the outcome on g (nb_graph_error) and returns it. */
static nb_code finish(nb_graph *g, nbio_writer *w, const char *who) {
  if (w->code)
    snprintf(g->error, sizeof g->error, "%s: %s", who, w->error);
  else
    g->error[0] = '\0';
  nbcore_arena_free(&w->arena);
  nb_code code = w->code;
  free(w);
  return code;
}

nb_code nb_graph_write_graphdef_buffer(const nb_graph *g, void **data, size_t *size) {
  if (!g) return NB_INVALID;
  nb_graph *mg = (nb_graph *)(uintptr_t)g; /* the error message is the one thing written on g */
  nbio_writer *w = calloc(1, sizeof *w);
  if (!w) return snprintf(mg->error, sizeof mg->error, "nb_graph_write_graphdef: out of memory"), NB_NOMEM;
  if (!data || !size)
    nbio_fail(w, NB_INVALID, "data or size is NULL");
  else
    write_graph(w, g, data, size);
  return finish(mg, w, "nb_graph_write_graphdef");
}

nb_code nb_graph_write_graphdef(const nb_graph *g, const char *path) {
  if (!g) return NB_INVALID;
  nb_graph *mg = (nb_graph *)(uintptr_t)g;
  void *data = NULL;
  size_t size = 0;
  nb_code code = path ? nb_graph_write_graphdef_buffer(g, &data, &size) : NB_INVALID;
  if (!path) snprintf(mg->error, sizeof mg->error, "nb_graph_write_graphdef: path is NULL");
  if (code) return code;
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(data, 1, size, f) == size;
  if (f && fclose(f)) ok = false;
  free(data);
  if (ok) return NB_OK;
  snprintf(mg->error, sizeof mg->error, "nb_graph_write_graphdef: cannot write %s: %s", path, strerror(errno));
  return NB_IO;
}

const char *nb_graph_error(const nb_graph *g) { return g ? g->error : ""; }
