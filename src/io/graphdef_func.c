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

/* How a function graph is exported beside its own arguments and results: its first nres
   results (a While body returns its captures after its results, as they came), `lists`
   TensorList arguments after f's (a While's stacks: a body pushes its last `lists`
   results onto them), then a resource argument per variable it (or a function it runs)
   uses, which a While body returns as it came. */
typedef struct fn_form {
  int nres, lists;
  bool push;
  const nb_variable **vars;
  int nvars;
} fn_form;

/* A function written to the library: f in form `form`. */
typedef struct nbio_func_key {
  const nb_function *f;
  fn_form form;
  const char *name;
} nbio_func_key;

static bool same_form(const fn_form *a, const fn_form *b) {
  return a->nres == b->nres && a->lists == b->lists && a->push == b->push && a->nvars == b->nvars &&
         (!a->nvars || memcmp(a->vars, b->vars, (size_t)a->nvars * sizeof *a->vars) == 0);
}

static Nbpb__OpDef__ArgDef **arg_defs(nbio_writer *w, const char *prefix, const int *types, int n) {
  Nbpb__OpDef__ArgDef **a = nbcore_arena_alloc(&w->arena, ((size_t)n + 1) * sizeof *a);
  if (!a) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  for (int i = 0; i < n; i++) {
    a[i] = nbcore_arena_alloc(&w->arena, sizeof **a);
    if (!a[i]) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
    nbpb__op_def__arg_def__init(a[i]);
    a[i]->name = nbio_strf(w, "%s_%d", prefix, i);
    a[i]->type = types[i];
  }
  return w->code ? NULL : a;
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

static int num_inputs(const nb_function *f, const fn_form *m) { return f->nargs + m->lists + m->nvars; }
static int num_outputs(const fn_form *m) { return m->nres + (m->push ? m->lists + m->nvars : 0); }

/* The dtypes of the exported arguments (inputs) or results. */
static int *form_types(nbio_writer *w, const nb_function *f, const fn_form *m, bool inputs) {
  int n = inputs ? num_inputs(f, m) : num_outputs(m), k = 0;
  int *t = nbcore_arena_alloc(&w->arena, ((size_t)n + 1) * sizeof *t);
  if (!t) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  int own = inputs ? f->nargs : m->nres;
  for (int i = 0; i < own; i++) {
    const nb_tensor *x = inputs || (m->push && i >= f->nres) ? f->args[i] : f->res[i];
    t[k++] = nbio_dtype_to_tf(x->dtype);
  }
  bool extra = inputs || m->push;
  for (int j = 0; extra && j < m->lists; j++) t[k++] = NBIO_TF_VARIANT;
  for (int v = 0; extra && v < m->nvars; v++) t[k++] = NBIO_TF_RESOURCE;
  return t;
}

/* The references of the exported results: f's first nres results, then (push) a
   TensorListPushBack of each of the last `lists` results onto the list arguments and the
   resource arguments as they came. */
static const char **result_refs(nbio_writer *w, nbio_body *b, const nb_function *f, const fn_form *m) {
  const char **refs = nbcore_arena_alloc(&w->arena, ((size_t)num_outputs(m) + 1) * sizeof *refs);
  if (!refs) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  for (int i = 0; i < m->nres; i++) /* a While body passes its captures through */
    refs[i] = m->push && i >= f->nres ? nbio_strf(w, "arg_%d", i) : nbio_ref(w, b, f->res[i]->node, f->res[i]->out);
  for (int j = 0; m->push && j < m->lists && !w->code; j++) {
    const nb_tensor *x = f->res[f->nres + j];
    const char *name = nbio_strf(w, "accumulator_%d/push", j);
    Nbpb__NodeDef *nd = nbio_node_new(w, b, name, "TensorListPushBack");
    if (!nd || !nbio_node_input(w, nd, nbio_strf(w, "arg_%d", f->nargs + j)) ||
        !nbio_node_input(w, nd, nbio_ref(w, b, x->node, x->out)) ||
        !nbio_put_attr(w, nd, "element_dtype", nbio_attr_type(&w->arena, nbio_dtype_to_tf(x->dtype))))
      return NULL;
    refs[m->nres + j] = nbio_strf(w, "%s:output_handle:0", name);
  }
  for (int v = 0; m->push && v < m->nvars; v++) refs[m->nres + m->lists + v] = b->handles[v].name;
  return w->code ? NULL : refs;
}

/* Appends fd (the export of f in form m) to the library. */
static bool add_function(nbio_writer *w, Nbpb__FunctionDef *fd, const nb_function *f, const fn_form *m,
                         const char *name) {
  if ((w->nfuncs & (w->nfuncs - 1)) == 0) { /* 0 or a power of two: double */
    size_t cap = w->nfuncs ? 2 * w->nfuncs : 4;
    Nbpb__FunctionDef **fs = nbcore_arena_alloc(&w->arena, cap * sizeof *fs);
    nbio_func_key *ks = nbcore_arena_alloc(&w->arena, cap * sizeof *ks);
    if (!fs || !ks) return nbio_fail(w, NB_NOMEM, "out of memory"), false;
    if (w->nfuncs) {
      memcpy(fs, w->funcs, w->nfuncs * sizeof *fs);
      memcpy(ks, w->func_keys, w->nfuncs * sizeof *ks);
    }
    w->funcs = fs;
    w->func_keys = ks;
  }
  w->funcs[w->nfuncs] = fd;
  w->func_keys[w->nfuncs++] = (nbio_func_key){f, *m, name};
  return true;
}

/* The name of f's FunctionDef in form m in the library (written on first use, after the
   functions its body runs). */
static const char *export_function(nbio_writer *w, const nb_function *f, const char *role, const fn_form *m) {
  for (size_t i = 0; i < w->nfuncs; i++)
    if (w->func_keys[i].f == f && same_form(&w->func_keys[i].form, m)) return w->func_keys[i].name;
  if (m->nres > (m->push ? f->nargs : f->nres + f->nacc))
    return nbio_fail(w, NB_INTERNAL, "a %s function has %d results, its node %d", role, f->nres + f->nacc, m->nres),
           NULL;
  nbio_body b = {.g = f->g, .fn = true};
  b.handles = nbcore_arena_alloc(&w->arena, ((size_t)m->nvars + 1) * sizeof *b.handles);
  if (!b.handles || !nbio_body_refs(w, &b)) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  for (int i = 0; i < f->nargs; i++)
    b.refs[f->args[i]->node] = (nbio_ref_info){.name = nbio_strf(w, "arg_%d", i), .arg = true};
  for (int v = 0; v < m->nvars; v++)
    b.handles[b.nhandles++] = (nbio_handle){m->vars[v], nbio_strf(w, "arg_%d", f->nargs + m->lists + v)};
  const char *name = nbio_strf(w, "%s_%zu", role, w->nfuncs);
  if (!name || nbio_write_body(w, &b)) return NULL;
  const char **refs = result_refs(w, &b, f, m);
  Nbpb__FunctionDef *fd = nbcore_arena_alloc(&w->arena, sizeof *fd);
  Nbpb__OpDef *sig = nbcore_arena_alloc(&w->arena, sizeof *sig);
  const int *in_types = form_types(w, f, m, true), *out_types = form_types(w, f, m, false);
  if (!refs || !fd || !sig || !in_types || !out_types) return nbio_fail(w, NB_NOMEM, "out of memory"), NULL;
  nbpb__function_def__init(fd);
  nbpb__op_def__init(sig);
  sig->name = (char *)(uintptr_t)name;
  sig->input_arg = arg_defs(w, "arg", in_types, num_inputs(f, m));
  sig->n_input_arg = (size_t)num_inputs(f, m);
  sig->output_arg = arg_defs(w, "out", out_types, num_outputs(m));
  sig->n_output_arg = (size_t)num_outputs(m);
  fd->signature = sig;
  fd->node_def = b.nodes;
  fd->n_node_def = b.nnodes;
  if (w->code || !write_rets(w, fd, refs, num_outputs(m)) || !add_function(w, fd, f, m, name)) return NULL;
  return name;
}

static const nb_function *fn_attr(const nbgraph_node *n, const char *attr) {
  for (int a = 0; a < n->def->nattrs; a++)
    if (strcmp(n->def->attrs[a].name, attr) == 0) return nbfunc_from_bits(n->attr[a].i);
  return NULL;
}

/* The functions node n runs (While: cond, body; If: then, else; a call: f); their count. */
static int node_functions(const nbgraph_node *n, const nb_function **fs) {
  static const char *const attrs[][2] = {{"_cond", "_body"}, {"_then_branch", "_else_branch"}, {"_f", NULL}};
  static const char *const types[] = {"While", "If", "StatefulPartitionedCall"};
  for (int t = 0; t < 3; t++)
    if (strcmp(n->def->name, types[t]) == 0) {
      int k = 0;
      for (int a = 0; a < 2 && attrs[t][a]; a++) fs[k++] = fn_attr(n, attrs[t][a]);
      return k;
    }
  return 0;
}

static bool has_ptr(const void *const *v, int32_t n, const void *p) {
  for (int32_t i = 0; i < n; i++)
    if (v[i] == p) return true;
  return false;
}

static bool push_unique(const void ***v, int32_t *n, int32_t *cap, const void *p) {
  if (has_ptr(*v, *n, p)) return true;
  if (*n == *cap && !nbcore_grow_array((void **)v, cap, *n + 1, sizeof **v)) return false;
  (*v)[(*n)++] = p;
  return true;
}

int nbio_graph_vars(nbio_writer *w, const nb_graph *const *gs, int n, const nb_variable ***out) {
  const void **todo = NULL, **vars = NULL;
  int32_t ntodo = 0, tcap = 0, nvars = 0, vcap = 0;
  bool ok = true;
  for (int i = 0; i < n && ok; i++) ok = push_unique(&todo, &ntodo, &tcap, gs[i]);
  for (int32_t done = 0; done < ntodo && ok; done++) { /* a worklist of graphs, no recursion */
    const nb_graph *g = todo[done];
    for (int32_t id = 0; id < g->nnodes && ok; id++) {
      nb_variable *vs[NBIO_TF_MAX_ARGS];
      int nv = nbio_node_variables(&g->nodes[id], vs, NBIO_TF_MAX_ARGS);
      for (int v = 0; v < nv && ok; v++) ok = push_unique(&vars, &nvars, &vcap, vs[v]);
      const nb_function *fs[2];
      int k = node_functions(&g->nodes[id], fs);
      for (int j = 0; j < k && ok; j++) ok = push_unique(&todo, &ntodo, &tcap, fs[j]->g);
    }
  }
  *out = ok ? nbcore_arena_alloc(&w->arena, ((size_t)nvars + 1) * sizeof **out) : NULL;
  if (*out && nvars) memcpy((void *)*out, vars, (size_t)nvars * sizeof **out);
  free(todo);
  free(vars);
  if (!*out) return nbio_fail(w, NB_NOMEM, "out of memory"), -1;
  return nvars;
}

/* list(type) of the dtypes of node id's data inputs first .. nin, then `lists` variants
   and `resources` resources. */
static Nbpb__AttrValue *input_types(nbio_writer *w, const nbio_body *b, int32_t id, int first, int lists,
                                    int resources) {
  const nbgraph_node *n = &b->g->nodes[id];
  int cnt = n->nin - first + lists + resources;
  int *t = malloc(((size_t)cnt + 1) * sizeof *t);
  if (!t) return NULL;
  for (int i = first; i < n->nin; i++) {
    const nbgraph_edge *e = &b->g->edges[n->in0 + i];
    t[i - first] = nbio_dtype_to_tf(b->g->outs[b->g->nodes[e->src].out0 + e->out].meta.dtype);
  }
  for (int j = 0; j < lists + resources; j++) t[n->nin - first + j] = j < lists ? NBIO_TF_VARIANT : NBIO_TF_RESOURCE;
  Nbpb__AttrValue *v = nbio_attr_types(&w->arena, t, cnt);
  free(t);
  return v;
}

static Nbpb__AttrValue *output_types(nbio_writer *w, const nbio_body *b, int32_t id, int nout) {
  const nbgraph_node *n = &b->g->nodes[id];
  int *t = malloc(((size_t)nout + 1) * sizeof *t);
  if (!t) return NULL;
  for (int i = 0; i < nout; i++) t[i] = nbio_dtype_to_tf(b->g->outs[n->out0 + i].meta.dtype);
  Nbpb__AttrValue *v = nbio_attr_types(&w->arena, t, nout);
  free(t);
  return v;
}

/* The form of the functions of node id (their variables found) with nres results,
   `lists` lists, pushing them when push. */
static bool node_form(nbio_writer *w, const nbio_body *b, int32_t id, int nres, int lists, bool push, fn_form *m) {
  const nb_function *fs[2];
  const nb_graph *gs[2];
  int k = node_functions(&b->g->nodes[id], fs);
  for (int i = 0; i < k; i++) gs[i] = fs[i]->g;
  *m = (fn_form){nres, lists, push, NULL, 0};
  m->nvars = nbio_graph_vars(w, gs, k, &m->vars);
  return m->nvars >= 0;
}

/* The resources of the variables of form m as inputs of nd. */
static bool resource_inputs(nbio_writer *w, const nbio_body *b, Nbpb__NodeDef *nd, const fn_form *m) {
  for (int v = 0; v < m->nvars; v++)
    if (!nbio_node_input(w, nd, nbio_handle_ref(w, b, m->vars[v]))) return false;
  return true;
}

static bool write_call(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  fn_form m;
  const char *f =
      node_form(w, b, id, n->nout, 0, false, &m) ? export_function(w, fn_attr(n, "_f"), "function", &m) : NULL;
  Nbpb__NodeDef *nd = f ? nbio_node_new(w, b, b->refs[id].node, "StatefulPartitionedCall") : NULL;
  if (!nd || !nbio_data_inputs(w, b, nd, id, 0, n->nin) || !resource_inputs(w, b, nd, &m) ||
      !nbio_control_inputs(w, b, nd, id))
    return false;
  return nbio_put_attr(w, nd, "Tin", input_types(w, b, id, 0, 0, m.nvars)) &&
         nbio_put_attr(w, nd, "Tout", output_types(w, b, id, n->nout)) &&
         nbio_put_attr(w, nd, "config", nbio_attr_str(&w->arena, "")) &&
         nbio_put_attr(w, nd, "config_proto", nbio_attr_str(&w->arena, "")) &&
         nbio_put_attr(w, nd, "executor_type", nbio_attr_str(&w->arena, "")) &&
         nbio_put_attr(w, nd, "f", nbio_attr_func(&w->arena, f));
}

static bool write_if(nbio_writer *w, nbio_body *b, int32_t id) {
  const nbgraph_node *n = &b->g->nodes[id];
  fn_form m;
  const char *then_f =
      node_form(w, b, id, n->nout, 0, false, &m) ? export_function(w, fn_attr(n, "_then_branch"), "then", &m) : NULL;
  const char *else_f = then_f ? export_function(w, fn_attr(n, "_else_branch"), "else", &m) : NULL;
  Nbpb__NodeDef *nd = else_f ? nbio_node_new(w, b, b->refs[id].node, "If") : NULL;
  if (!nd || !nbio_data_inputs(w, b, nd, id, 0, n->nin) || !resource_inputs(w, b, nd, &m) ||
      !nbio_control_inputs(w, b, nd, id))
    return false;
  return nbio_put_attr(w, nd, "Tcond", nbio_attr_type(&w->arena, NBIO_TF_BOOL)) &&
         nbio_put_attr(w, nd, "Tin", input_types(w, b, id, 1, 0, m.nvars)) &&
         nbio_put_attr(w, nd, "Tout", output_types(w, b, id, n->nout)) &&
         nbio_put_attr(w, nd, "else_branch", nbio_attr_func(&w->arena, else_f)) &&
         nbio_put_attr(w, nd, "then_branch", nbio_attr_func(&w->arena, then_f));
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
      !nbio_put_attr(w, nd, "element_dtype", nbio_attr_type(&w->arena, nbio_dtype_to_tf(elem->dtype))) ||
      !nbio_put_attr(w, nd, "shape_type", nbio_attr_type(&w->arena, NBIO_TF_INT32)))
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
      !nbio_put_attr(w, nd, "element_dtype", nbio_attr_type(&w->arena, nbio_dtype_to_tf(elem->dtype))) ||
      !nbio_put_attr(w, nd, "num_elements", nbio_attr_int(&w->arena, -1)))
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
  fn_form cm, bm;
  if (!node_form(w, b, id, 1, lists, false, &cm) || !node_form(w, b, id, n->nin, lists, true, &bm)) return false;
  const char *cond = export_function(w, fn_attr(n, "_cond"), "cond", &cm);
  const char *bodyf = cond ? export_function(w, body, "body", &bm) : NULL;
  Nbpb__NodeDef *nd = bodyf ? nbio_node_new(w, b, b->refs[id].node, "While") : NULL;
  if (!nd || !nbio_data_inputs(w, b, nd, id, 0, n->nin)) return false;
  for (int j = 0; j < lists; j++)
    if (!nbio_node_input(w, nd, heads[j])) return false;
  if (!resource_inputs(w, b, nd, &bm) || !nbio_control_inputs(w, b, nd, id)) return false;
  int slot = -1;
  for (int a = 0; a < n->def->nattrs; a++)
    if (strcmp(n->def->attrs[a].name, "parallel_iterations") == 0) slot = a;
  if (!nbio_put_attr(w, nd, "T", input_types(w, b, id, 0, lists, bm.nvars)) ||
      !nbio_put_attr(w, nd, "body", nbio_attr_func(&w->arena, bodyf)) ||
      !nbio_put_attr(w, nd, "cond", nbio_attr_func(&w->arena, cond)) ||
      !nbio_put_attr(w, nd, "parallel_iterations", nbio_attr_int(&w->arena, n->attr[slot].i)))
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
