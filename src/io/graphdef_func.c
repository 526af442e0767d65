/* While, If and function calls as TF's functional ops, their function graphs as
   FunctionDefs of the GraphDef's library (arguments "arg_i", results "out_i", body inputs
   "node:out_arg:k").

   A While whose gradient needs intermediates has, in nabla, extra outputs: per
   intermediate a stack [iterations, ...] of its value at every iteration. TF's while_v2
   writes the same thing as loop variables holding TensorLists: the export adds one per
   stack (an EmptyTensorList before the loop, a TensorListPushBack of the intermediate in
   the body, ignored by the cond) and a TensorListStack after the loop gives the stack the
   gradient loop reads (_StackGet, exported as GatherV2). Stacks of values whose shape
   changes between iterations (nabla's ragged stacks) are not exported. */
#include "graphdef_write.h"

#include <stdlib.h>
#include <string.h>

/* A function written to the library: f with `lists` extra TensorList arguments, pushing
   its last `lists` results onto them when push is set (a While body) or ignoring them. */
typedef struct nbio_func_key {
  const nb_function *f;
  int lists;
  bool push;
  const char *name;
} nbio_func_key;

static Nbpb__OpDef__ArgDef *arg_def(nbio_writer *w, const char *name, int type) {
  Nbpb__OpDef__ArgDef *a = nbcore_arena_alloc(&w->arena, sizeof *a);
  if (!a || !name) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  nbpb__op_def__arg_def__init(a);
  a->name = (char *)(uintptr_t)name;
  a->type = type;
  return a;
}

static Nbpb__OpDef__ArgDef **arg_defs(nbio_writer *w, const char *prefix, nb_tensor *const *x, int n, int lists) {
  Nbpb__OpDef__ArgDef **a = nbcore_arena_alloc(&w->arena, ((size_t)(n + lists) + 1) * sizeof *a);
  if (!a) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  for (int i = 0; i < n + lists; i++)
    if (!(a[i] = arg_def(w, nbio_strf(w, "%s_%d", prefix, i), i < n ? nbio_tf_dtype(x[i]->dtype) : NBIO_TF_VARIANT)))
      return NULL;
  return a;
}

static int by_ret_key(const void *a, const void *b) {
  return strcmp((*(Nbpb__FunctionDef__RetEntry *const *)a)->key, (*(Nbpb__FunctionDef__RetEntry *const *)b)->key);
}

/* ret: "out_i" -> the reference of result i (sorted by key, as TF writes maps). */
static bool write_rets(nbio_writer *w, Nbpb__FunctionDef *fd, const char **refs, int n) {
  fd->ret = nbcore_arena_alloc(&w->arena, ((size_t)n + 1) * sizeof *fd->ret);
  if (!fd->ret) return nbio_fail(w, NB_NOMEM, "out of memory"), false;
  for (int i = 0; i < n; i++) {
    Nbpb__FunctionDef__RetEntry *e = nbcore_arena_alloc(&w->arena, sizeof *e);
    if (!e || !refs[i]) return nbio_fail(w, NB_NOMEM, "out of memory"), false;
    nbpb__function_def__ret_entry__init(e);
    e->key = nbio_strf(w, "out_%d", i);
    e->value = (char *)(uintptr_t)refs[i];
    fd->ret[i] = e;
  }
  fd->n_ret = (size_t)n;
  qsort(fd->ret, fd->n_ret, sizeof *fd->ret, by_ret_key);
  return !w->code;
}

/* The references of f's first nres results (a While body's last are its captures,
   which it returns as they came), then (push) TensorListPushBack of each of
   the last `lists` results onto the list arguments. */
static const char **result_refs(nbio_writer *w, nbio_body *b, const nb_function *f, int nres, int lists, bool push) {
  int nout = nres + (push ? lists : 0);
  const char **refs = nbcore_arena_alloc(&w->arena, ((size_t)nout + 1) * sizeof *refs);
  if (!refs) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  for (int i = 0; i < nres; i++) /* a While body passes its captures through */
    refs[i] = push && i >= f->nres ? nbio_strf(w, "arg_%d", i) : nbio_ref(w, b, f->res[i]->node, f->res[i]->out);
  for (int j = 0; push && j < lists && !w->code; j++) {
    const nb_tensor *x = f->res[f->nres + j];
    const char *name = nbio_strf(w, "accumulator_%d/push", j);
    Nbpb__NodeDef *nd = nbio_node_new(w, b, name, "TensorListPushBack");
    if (!nd || !nbio_node_input(w, nd, nbio_strf(w, "arg_%d", f->nargs + j)) ||
        !nbio_node_input(w, nd, nbio_ref(w, b, x->node, x->out)) ||
        !nbio_node_attr(w, nd, "element_dtype", nbio_attr_type(&w->arena, nbio_tf_dtype(x->dtype))))
      return NULL;
    refs[nres + j] = nbio_strf(w, "%s:output_handle:0", name);
  }
  return w->code ? NULL : refs;
}

/* The name of f's FunctionDef in the library (written on first use). nres: the results
   it returns before the list pushes. */
static const char *export_function(nbio_writer *w, const nb_function *f, const char *role, int nres, int lists,
                                   bool push) {
  for (size_t i = 0; i < w->nfuncs; i++) {
    const nbio_func_key *k = &w->func_keys[i];
    if (k->f == f && k->lists == lists && k->push == push) return k->name;
  }
  if (nres > (push ? f->nargs : f->nres + f->nacc))
    return nbio_fail(w, NB_INTERNAL, "a %s function has %d results, its node %d", role, f->nres + f->nacc, nres), NULL;
  nbio_body b = {.g = f->g, .fn = true};
  if (!nbio_body_refs(w, &b)) return NULL;
  for (int i = 0; i < f->nargs; i++)
    b.refs[f->args[i]->node] = (nbio_ref_info){.name = nbio_strf(w, "arg_%d", i), .arg = true};
  const char *name = nbio_strf(w, "%s_%zu", role, w->nfuncs);
  if (!name || nbio_write_body(w, &b)) return NULL;
  const char **refs = result_refs(w, &b, f, nres, lists, push);
  Nbpb__FunctionDef *fd = nbcore_arena_alloc(&w->arena, sizeof *fd);
  Nbpb__OpDef *sig = nbcore_arena_alloc(&w->arena, sizeof *sig);
  if (!refs || !fd || !sig) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  nbpb__function_def__init(fd);
  nbpb__op_def__init(sig);
  sig->name = (char *)(uintptr_t)name;
  sig->input_arg = arg_defs(w, "arg", f->args, f->nargs, lists);
  sig->n_input_arg = (size_t)(f->nargs + lists);
  int nout = nres + (push ? lists : 0);
  nb_tensor **outs = nbcore_arena_alloc(&w->arena, ((size_t)nres + 1) * sizeof *outs);
  if (!outs) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  for (int i = 0; i < nres; i++) outs[i] = push && i >= f->nres ? f->args[i] : f->res[i];
  sig->output_arg = arg_defs(w, "out", outs, nres, push ? lists : 0);
  sig->n_output_arg = (size_t)nout;
  fd->signature = sig;
  fd->node_def = b.nodes;
  fd->n_node_def = b.nnodes;
  if (w->code || !write_rets(w, fd, refs, nout)) return NULL;
  /* nested functions were added while the body was written: this one goes after them */
  if ((w->nfuncs & (w->nfuncs - 1)) == 0) {
    size_t cap = w->nfuncs ? 2 * w->nfuncs : 4;
    Nbpb__FunctionDef **fs = nbcore_arena_alloc(&w->arena, cap * sizeof *fs);
    nbio_func_key *ks = nbcore_arena_alloc(&w->arena, cap * sizeof *ks);
    if (!fs || !ks) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
    if (w->nfuncs) {
      memcpy(fs, w->funcs, w->nfuncs * sizeof *fs);
      memcpy(ks, w->func_keys, w->nfuncs * sizeof *ks);
    }
    w->funcs = fs;
    w->func_keys = ks;
  }
  w->funcs[w->nfuncs] = fd;
  w->func_keys[w->nfuncs++] = (nbio_func_key){f, lists, push, name};
  return name;
}

static const nb_function *fn_attr(const nbgraph_node *n, const char *attr) {
  for (int a = 0; a < n->def->nattrs; a++)
    if (strcmp(n->def->attrs[a].name, attr) == 0) return nbfunc_from_bits(n->attr[a].i);
  return NULL;
}

/* list(type) of the dtypes of node id's data inputs first .. nin, then `lists` variants. */
static Nbpb__AttrValue *input_types(nbio_writer *w, const nbio_body *b, int32_t id, int first, int lists) {
  const nbgraph_node *n = &b->g->nodes[id];
  int cnt = n->nin - first + lists;
  int *t = malloc(((size_t)cnt + 1) * sizeof *t);
  if (!t) return NULL;
  for (int i = first; i < n->nin; i++) {
    const nbgraph_edge *e = &b->g->edges[n->in0 + i];
    t[i - first] = nbio_tf_dtype(b->g->outs[b->g->nodes[e->src].out0 + e->out].meta.dtype);
  }
  for (int j = 0; j < lists; j++) t[n->nin - first + j] = NBIO_TF_VARIANT;
  Nbpb__AttrValue *v = nbio_attr_types(&w->arena, t, cnt);
  free(t);
  return v;
}

static Nbpb__AttrValue *output_types(nbio_writer *w, const nbio_body *b, int32_t id, int nout) {
  const nbgraph_node *n = &b->g->nodes[id];
  int *t = malloc(((size_t)nout + 1) * sizeof *t);
  if (!t) return NULL;
  for (int i = 0; i < nout; i++) t[i] = nbio_tf_dtype(b->g->outs[n->out0 + i].meta.dtype);
  Nbpb__AttrValue *v = nbio_attr_types(&w->arena, t, nout);
  free(t);
  return v;
}

static bool write_call(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  const char *f = export_function(w, fn_attr(n, "_f"), "function", n->nout, 0, false);
  Nbpb__NodeDef *nd = f ? nbio_node_new(w, b, b->refs[id].node, "StatefulPartitionedCall") : NULL;
  if (!nd || !nbio_data_inputs(w, b, nd, id, 0, n->nin) || !nbio_control_inputs(w, b, nd, id)) return false;
  return nbio_node_attr(w, nd, "Tin", input_types(w, b, id, 0, 0)) &&
         nbio_node_attr(w, nd, "Tout", output_types(w, b, id, n->nout)) &&
         nbio_node_attr(w, nd, "config", nbio_attr_str(&w->arena, "")) &&
         nbio_node_attr(w, nd, "config_proto", nbio_attr_str(&w->arena, "")) &&
         nbio_node_attr(w, nd, "executor_type", nbio_attr_str(&w->arena, "")) &&
         nbio_node_attr(w, nd, "f", nbio_attr_func(&w->arena, f));
}

static bool write_if(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  const char *then_f = export_function(w, fn_attr(n, "_then_branch"), "then", n->nout, 0, false);
  const char *else_f = then_f ? export_function(w, fn_attr(n, "_else_branch"), "else", n->nout, 0, false) : NULL;
  Nbpb__NodeDef *nd = else_f ? nbio_node_new(w, b, b->refs[id].node, "If") : NULL;
  if (!nd || !nbio_data_inputs(w, b, nd, id, 0, n->nin) || !nbio_control_inputs(w, b, nd, id)) return false;
  return nbio_node_attr(w, nd, "Tcond", nbio_attr_type(&w->arena, NBIO_TF_BOOL)) &&
         nbio_node_attr(w, nd, "Tin", input_types(w, b, id, 1, 0)) &&
         nbio_node_attr(w, nd, "Tout", output_types(w, b, id, n->nout)) &&
         nbio_node_attr(w, nd, "else_branch", nbio_attr_func(&w->arena, else_f)) &&
         nbio_node_attr(w, nd, "then_branch", nbio_attr_func(&w->arena, then_f));
}

/* The TensorList each stack of a While starts from: "<while>/accumulator_j" (an
   EmptyTensorList of the value's shape), j counted over the stacks. */
static const char *empty_list(nbio_writer *w, nbio_body *b, int32_t id, int j, const nbop_meta *elem) {
  const char *prefix = nbio_strf(w, "%s/accumulator_%d", b->refs[id].node, j);
  int32_t dims[NB_MAX_RANK + 1], max_elems = -1;
  for (int d = 1; d < elem->rank; d++) dims[d - 1] = (int32_t)elem->shape[d];
  const char *shape = nbio_write_int32_const(w, b, nbio_strf(w, "%s/element_shape", prefix), dims, elem->rank - 1);
  const char *max = nbio_write_int32_const(w, b, nbio_strf(w, "%s/max_num_elements", prefix), &max_elems, -1);
  Nbpb__NodeDef *nd = shape && max ? nbio_node_new(w, b, prefix, "EmptyTensorList") : NULL;
  if (!nd || !nbio_node_input(w, nd, shape) || !nbio_node_input(w, nd, max) ||
      !nbio_node_attr(w, nd, "element_dtype", nbio_attr_type(&w->arena, nbio_tf_dtype(elem->dtype))) ||
      !nbio_node_attr(w, nd, "shape_type", nbio_attr_type(&w->arena, NBIO_TF_INT32)))
    return NULL;
  return b->fn ? nbio_strf(w, "%s:handle:0", prefix) : prefix;
}

/* The stacked values of the list in output `out` of the While: "<while>/stack_j". */
static const char *stack_list(nbio_writer *w, nbio_body *b, int32_t id, int out, int j, const nbop_meta *elem) {
  const char *name = nbio_strf(w, "%s/stack_%d", b->refs[id].node, j);
  int32_t dims[NB_MAX_RANK + 1];
  for (int d = 1; d < elem->rank; d++) dims[d - 1] = (int32_t)elem->shape[d];
  const char *shape = nbio_write_int32_const(w, b, nbio_strf(w, "%s/element_shape", name), dims, elem->rank - 1);
  Nbpb__NodeDef *nd = shape ? nbio_node_new(w, b, name, "TensorListStack") : NULL;
  const char *list =
      b->fn ? nbio_strf(w, "%s:output:%d", b->refs[id].node, out) : nbio_strf(w, "%s:%d", b->refs[id].node, out);
  if (!nd || !nbio_node_input(w, nd, list) || !nbio_node_input(w, nd, shape) ||
      !nbio_node_attr(w, nd, "element_dtype", nbio_attr_type(&w->arena, nbio_tf_dtype(elem->dtype))) ||
      !nbio_node_attr(w, nd, "num_elements", nbio_attr_int(&w->arena, -1)))
    return NULL;
  return b->fn ? nbio_strf(w, "%s:tensor:0", name) : name;
}

static bool write_while(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  int lists = n->nout - n->nin;
  const nb_function *body = fn_attr(n, "_body");
  for (int j = 0; j < lists; j++)
    if (j >= body->nacc || nbfunc_cf_ragged(body->res[body->nres + j]))
      return nbio_fail(w, NB_UNIMPLEMENTED,
                       "node '%s': a loop intermediate whose shape changes between iterations (a ragged "
                       "accumulator) has no TensorList export",
                       n->name),
             false;
  const char **refs = nbcore_arena_alloc(&w->arena, ((size_t)n->nout + 1) * sizeof *refs);
  const char **heads = nbcore_arena_alloc(&w->arena, ((size_t)lists + 1) * sizeof *heads);
  if (!refs || !heads) return nbio_fail(w, NB_NOMEM, "out of memory"), false;
  for (int j = 0; j < lists; j++)
    if (!(heads[j] = empty_list(w, b, id, j, &b->g->outs[n->out0 + n->nin + j].meta))) return false;
  const char *cond = export_function(w, fn_attr(n, "_cond"), "cond", 1, lists, false);
  const char *bodyf = cond ? export_function(w, body, "body", n->nin, lists, true) : NULL;
  Nbpb__NodeDef *nd = bodyf ? nbio_node_new(w, b, b->refs[id].node, "While") : NULL;
  if (!nd || !nbio_data_inputs(w, b, nd, id, 0, n->nin)) return false;
  for (int j = 0; j < lists; j++)
    if (!nbio_node_input(w, nd, heads[j])) return false;
  if (!nbio_control_inputs(w, b, nd, id)) return false;
  int slot = -1;
  for (int a = 0; a < n->def->nattrs; a++)
    if (strcmp(n->def->attrs[a].name, "parallel_iterations") == 0) slot = a;
  if (!nbio_node_attr(w, nd, "T", input_types(w, b, id, 0, lists)) ||
      !nbio_node_attr(w, nd, "body", nbio_attr_func(&w->arena, bodyf)) ||
      !nbio_node_attr(w, nd, "cond", nbio_attr_func(&w->arena, cond)) ||
      !nbio_node_attr(w, nd, "parallel_iterations", nbio_attr_int(&w->arena, n->attr[slot].i)))
    return false;
  for (int k = 0; k < n->nin; k++) refs[k] = nbio_ref(w, b, id, k);
  for (int j = 0; j < lists; j++)
    if (!(refs[n->nin + j] = stack_list(w, b, id, n->nin + j, j, &b->g->outs[n->out0 + n->nin + j].meta))) return false;
  b->refs[id].out_refs = refs;
  return true;
}

bool nbio_write_function_node(nbio_writer *w, nbio_body *b, int32_t id) {
  const char *type = b->g->nodes[id].def->name;
  if (strcmp(type, "StatefulPartitionedCall") == 0) return write_call(w, b, id), true;
  if (strcmp(type, "If") == 0) return write_if(w, b, id), true;
  if (strcmp(type, "While") == 0) return write_while(w, b, id), true;
  return false;
}
