/* Function graphs and the graph-mode builders of nb_while and nb_cond, as TF 2's
   while_v2/cond_v2: each callback is traced once, in a graph context of its own whose
   placeholders are the arguments, into a function graph; graph tensors of enclosing
   graphs that the callback uses are captured (a placeholder in the function graph, and
   an extra input of the While/If node), level by level for nested functions. The node
   carries its functions as attrs; its kernel (function_ops.c) runs them through
   a session over the function graph. */
#include "func.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- function graphs --------------------------------------------------------------------- */

static void function_free(nb_function *f) {
  if (!f) return;
  nb_session_free(f->cached);
  nb_ctx_free(f->c);
  nb_graph_free(f->g); /* frees the functions nested in it, one level each call */
  free(f->args);
  free(f->res);
  free(f->caps);
  nbfunc_while_grad_free(f->wgrad);
  nbfunc_if_grad_free(f->igrad);
  free(f);
}

/* g's free_funcs: frees the functions g owns. */
static void free_functions(nb_graph *g) {
  for (int32_t i = 0; i < g->nfuncs; i++) function_free(g->funcs[i]);
  free(g->funcs);
  g->funcs = NULL;
  g->nfuncs = 0;
}

/* The While, If and call kernels and the control-flow gradients go into the lower layers'
   registries here, before the first function: no node of those ops exists without one. */
static void install(void) {
  nbfunc_install_ops();
  nbfunc_install_grads();
}

static nb_function *function_new(nb_graph *parent) {
  static pthread_once_t installed = PTHREAD_ONCE_INIT;
  pthread_once(&installed, install);
  nb_function *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  atomic_init(&f->busy, false);
  atomic_init(&f->iters_hint, 0);
  f->g = nb_graph_new();
  f->c = f->g ? nb_graph_ctx_new(f->g) : NULL;
  if (!f->c) {
    function_free(f);
    return NULL;
  }
  f->g->parent = parent;
  return f;
}

/* Gives f to g (freed with it). */
static nb_code own_function(nb_graph *g, nb_function *f) {
  if (!nbcore_grow_array((void **)&g->funcs, &g->funcs_cap, g->nfuncs + 1, sizeof *g->funcs)) return NB_NOMEM;
  g->funcs[g->nfuncs++] = f;
  g->free_funcs = free_functions;
  return NB_OK;
}

nb_code nbfunc_run(nbop_kargs *k, nb_function *f, const char *what, nb_tensor *const *args, int take,
                   nbcore_buffer *const *place, nb_tensor **res) {
  bool busy = atomic_exchange(&f->busy, true);
  nb_session *s = busy ? nb_session_new(f->g) : f->cached ? f->cached : (f->cached = nb_session_new(f->g));
  if (!s) {
    if (!busy) atomic_store(&f->busy, false);
    for (int i = 0; i < take; i++) nb_tensor_free(args[i]);
    return nbop_kfail(k, NB_NOMEM, "out of memory starting the %s", what);
  }
  nb_session_set_threads(s, k->threads);
  int nres = f->nres + f->nacc;
  nbrt_session_share_blocks(s, k->ctx->blocks_from ? k->ctx->blocks_from : k->ctx);
  nbrt_session_take_feeds(s, take);
  nbrt_session_place_fetches(s, place, place ? nres : 0);
  nb_code code = nb_run(s, f->args, args, f->nargs, f->res, nres, res);
  nbrt_session_share_blocks(s, NULL);
  if (code) nbop_kfail(k, code, "%s: %s", what, nb_session_error(s));
  for (int i = 0; i < nres && !code; i++) /* released into the shared pool later, not to malloc */
    if (!(res[i] = nbcore_adopt_detached(k->ctx, res[i]))) {
      code = nb_status(k->ctx) ? nb_status(k->ctx)
                               : nbop_kfail(k, NB_NOMEM, "out of memory taking the %s's results", what);
      for (int j = 0; j < nres; j++) /* the caller gets none of them */
        if (j != i) nb_tensor_free(res[j]);
    }
  if (busy)
    nb_session_free(s);
  else
    atomic_store(&f->busy, false);
  return code;
}

void nbfunc_while_grad_free(nbfunc_while_grad *w) {
  if (!w) return;
  free(w->acc);
  free(w->fvars);
  free(w->fcaps);
  free(w->facc);
  free(w->keys[0]);
  free(w->keys[1]);
  free(w->steps);
  free(w);
}

void nbfunc_if_grad_free(nbfunc_if_grad *w) {
  if (!w) return;
  free(w->slots[0]);
  free(w->slots[1]);
  free(w);
}

/* ---- tracing --------------------------------------------------------------------------------- */

/* Appends n argument placeholders of the given metas to f. */
static nb_code add_args(nb_function *f, const nbop_meta *m, int n) {
  nb_tensor **args = realloc(f->args, ((size_t)(f->nargs + n) + 1) * sizeof *args);
  if (!args) return NB_NOMEM;
  f->args = args;
  for (int i = 0; i < n; i++) {
    int32_t id = nbgraph_add_arg(f->g, &m[i], "arg");
    if (id < 0 || !(f->args[f->nargs] = nbgraph_handle(f->c, f->g, id, 0))) return NB_NOMEM;
    f->nargs++;
  }
  return NB_OK;
}

/* The error of a callback traced in f, reported on the outer context. */
static nb_code trace_fail(nb_ctx *outer, nb_function *f, const char *who, nb_code code) {
  if (outer->status) return outer->status;
  if (!f->c->status) return nbcore_callback_code(outer, who, code ? code : NB_INTERNAL);
  return nbcore_fail(outer, code ? code : NB_INTERNAL, "%s: %s", who, nb_error(f->c));
}

/* Stores the results of f; a result that is not a tensor of f's graph (a concrete value,
   an outer tensor) gets an Identity there. */
static nb_code set_results(nb_ctx *outer, nb_function *f, const char *who, nb_tensor **res, int n) {
  for (int i = 0; i < n; i++) {
    if (!res[i]) return nbcore_fail(outer, NB_INVALID, "%s left result %d NULL", who, i);
    if (res[i]->graph != f->g && !(res[i] = nb_identity(f->c, res[i]))) return trace_fail(outer, f, who, f->c->status);
  }
  if (!(f->res = malloc((size_t)n * sizeof *f->res))) return nbcore_fail(outer, NB_NOMEM, "%s: out of memory", who);
  memcpy(f->res, res, (size_t)n * sizeof *res);
  f->nres = n;
  return NB_OK;
}

/* Gives every function of one node the same captured arguments, the union of their
   captures in order (a function gets placeholders for captures only the others use);
   *keys: the union, as tensors of the outer graph. */
static nb_code unify_captures(nb_function *const *fs, int nf, int64_t **keys, int *nkeys) {
  int n = 0, cap = 0;
  for (int f = 0; f < nf; f++) cap += fs[f]->g->ncaps;
  *keys = malloc((size_t)(cap + 1) * sizeof **keys);
  if (!*keys) return NB_NOMEM;
  for (int f = 0; f < nf; f++)
    for (int32_t i = 0; i < fs[f]->g->ncaps; i++) {
      int64_t key = fs[f]->g->caps[i].key;
      bool seen = false;
      for (int j = 0; j < n && !seen; j++) seen = (*keys)[j] == key;
      if (!seen) (*keys)[n++] = key;
    }
  *nkeys = n;
  for (int f = 0; f < nf; f++) {
    nb_function *fn = fs[f];
    nb_tensor **args = realloc(fn->args, ((size_t)(fn->nargs + n) + 1) * sizeof *args);
    if (!args) return NB_NOMEM;
    fn->args = args;
    for (int j = 0; j < n; j++) {
      int32_t id = nbgraph_capture_parent(fn->g, (*keys)[j]);
      if (id < 0 || !(fn->args[fn->nargs] = nbgraph_handle(fn->c, fn->g, id, 0))) return NB_NOMEM;
      fn->nargs++;
    }
  }
  return NB_OK;
}

/* Gives the two functions of a new node to c's graph (freed with it); after an error
   (code), or out of memory, frees those not given instead. */
static nb_code own_pair(nb_ctx *c, const char *who, nb_function *a, nb_function *b, nb_code code) {
  nb_function *keep[2] = {a, b};
  for (int i = 0; i < 2 && !code; i++) {
    if (own_function(c->graph, keep[i]))
      code = nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
    else
      keep[i] = NULL;
  }
  function_free(keep[0]);
  function_free(keep[1]);
  return code;
}

/* Adds the node: inputs `first` then the captured tensors; functions as attrs. */
static nb_code add_cf_node(nb_ctx *c, const char *type, nb_tensor *const *first, int nfirst, const int64_t *keys,
                           int nkeys, nb_function *fa, nb_function *fb, nb_tensor **outs, int nout) {
  const nbop_def *def = nbop_lookup(type);
  nb_tensor **ins = malloc((size_t)(nfirst + nkeys) * sizeof *ins);
  if (!ins) return nbcore_fail(c, NB_NOMEM, "%s: out of memory", type);
  memcpy(ins, first, (size_t)nfirst * sizeof *ins);
  int made = 0;
  for (int j = 0; j < nkeys; j++, made++)
    if (!(ins[nfirst + j] = nbgraph_handle(c, c->graph, nbgraph_key_node(keys[j]), nbgraph_key_out(keys[j])))) break;
  nb_code code = made < nkeys ? c->status : NB_OK;
  if (!code) {
    nbop_attrval a[NBOP_MAX_ATTRS];
    nbop_attr_defaults(def, a);
    a[1].i = nbcore_bits_of(&fa, sizeof fa); /* every control-flow op: attrs N, then its two functions */
    a[2].i = nbcore_bits_of(&fb, sizeof fb);
    code = nbop_dispatch(c, def, ins, nfirst + nkeys, a, outs, nout);
  }
  for (int j = 0; j < made; j++) nb_tensor_free(ins[nfirst + j]);
  free(ins);
  return code;
}

nb_code nbfunc_cf_node(nb_ctx *c, const char *type, nb_tensor *const *in, int nin, nb_function *fa, nb_function *fb,
                       nb_tensor **out, int nout) {
  return add_cf_node(c, type, in, nin, NULL, 0, fa, fb, out, nout);
}

/* ---- nb_while ---------------------------------------------------------------------------- */

typedef struct while_trace {
  nb_ctx *c;
  nb_function *cond, *body;
  int n; /* user loop variables; the loop's are [counter, vars..., captures...] */
  int64_t *keys;
  int nkeys;
} while_trace;

static void meta_of(nbop_meta *m, const nb_tensor *x, const nbfunc_shape_inv *inv) {
  if (inv)
    nbop_meta_set(m, x->dtype, inv->rank, inv->shape);
  else
    nbop_meta_set(m, x->dtype, x->rank, x->shape);
}

/* cond's function: the user's predicate, and counter < max_iters when bounded. */
static nb_code trace_cond(while_trace *w, nb_cond_fn cond, void *user, int64_t max_iters) {
  nb_function *f = w->cond;
  nb_tensor *pred = NULL;
  nb_code code = nbfunc_cf_call_cond(f->c, "the callback", cond, f->args + 1, &pred, user);
  if (code) return trace_fail(w->c, f, "nb_while: cond", code);
  if (!pred) return nbcore_fail(w->c, NB_INVALID, "nb_while: the cond function left its predicate NULL");
  if (pred->dtype != NB_BOOL || pred->rank > 0)
    return nbcore_fail(w->c, NB_INVALID, "nb_while: the predicate must be a bool scalar, got %s %s",
                       nb_dtype_name(pred->dtype), pred->rank < 0 ? "<unknown rank>" : nbop_tstr(pred));
  if (max_iters >= 0)
    pred = nb_logical_and(f->c, nb_less(f->c, f->args[0], nb_tensor_from(f->c, NB_I64, 0, NULL, &max_iters)), pred);
  if (!pred) return trace_fail(w->c, f, "nb_while: cond", f->c->status);
  return set_results(w->c, f, "nb_while: cond", &pred, 1);
}

/* body's function: [counter + 1, the user's next values...], checked against the vars. */
static nb_code trace_body(while_trace *w, nb_body_fn body, void *user, const nbfunc_shape_inv *inv) {
  nb_function *f = w->body;
  nb_tensor **next = calloc((size_t)w->n + 1, sizeof *next);
  if (!next) return nbcore_fail(w->c, NB_NOMEM, "nb_while: out of memory");
  nb_code code = nbfunc_cf_call_body(f->c, "the callback", body, f->args + 1, next + 1, w->n, user);
  if (code) code = trace_fail(w->c, f, "nb_while: body", code);
  if (!code) code = nbfunc_cf_check_next(w->c, "nb_while", f->args + 1, next + 1, w->n, inv);
  if (!code && !(next[0] = nb_add(f->c, f->args[0], nb_scalar(f->c, NB_I64, 1))))
    code = trace_fail(w->c, f, "nb_while: body", f->c->status);
  if (!code) code = set_results(w->c, f, "nb_while: body", next, w->n + 1);
  free(next);
  return code;
}

static nb_code trace_while(while_trace *w, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars,
                           int64_t max_iters, const nbfunc_shape_inv *inv) {
  nbop_meta *m = malloc(((size_t)w->n + 1) * sizeof *m);
  if (!m) return nbcore_fail(w->c, NB_NOMEM, "nb_while: out of memory");
  nbop_meta_set(&m[0], NB_I64, 0, NULL);
  for (int i = 0; i < w->n; i++) meta_of(&m[1 + i], vars[i], inv ? &inv[i] : NULL);
  nb_code code = add_args(w->cond, m, w->n + 1);
  if (!code) code = add_args(w->body, m, w->n + 1);
  free(m);
  if (code) return nbcore_fail(w->c, code, "nb_while: out of memory");
  code = trace_cond(w, cond, user, max_iters);
  if (!code) code = trace_body(w, body, user, inv);
  nb_function *fs[2] = {w->cond, w->body};
  if (!code && unify_captures(fs, 2, &w->keys, &w->nkeys))
    code = nbcore_fail(w->c, NB_NOMEM, "nb_while: out of memory");
  return code;
}

nb_code nbfunc_graph_while(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars, int n,
                           int64_t max_iters, const nbfunc_shape_inv *inv, nb_tensor **out) {
  while_trace w = {c, function_new(c->graph), function_new(c->graph), n, NULL, 0};
  nb_code code = !w.cond || !w.body ? nbcore_fail(c, NB_NOMEM, "nb_while: out of memory") : NB_OK;
  if (!code) code = trace_while(&w, cond, body, user, vars, max_iters, inv);
  code = own_pair(c, "nb_while", w.cond, w.body, code);
  int total = 1 + n + w.nkeys;
  nb_tensor **first = code ? NULL : malloc((size_t)(2 * total) * sizeof *first);
  if (!code && !first) code = nbcore_fail(c, NB_NOMEM, "nb_while: out of memory");
  if (!code) {
    nb_tensor **outs = first + total;
    first[0] = nb_scalar(c, NB_I64, 0);
    memcpy(first + 1, vars, (size_t)n * sizeof *vars);
    code = first[0] ? add_cf_node(c, "While", first, 1 + n, w.keys, w.nkeys, w.cond, w.body, outs, total) : c->status;
    nb_tensor_free(first[0]);
    for (int i = 0; i < total && !code; i++) {
      if (i >= 1 && i <= n)
        out[i - 1] = outs[i];
      else
        nb_tensor_free(outs[i]);
    }
  }
  free(first);
  free(w.keys);
  return code;
}

/* ---- nb_cond ----------------------------------------------------------------------------- */

static nb_code trace_branch(nb_ctx *c, nb_function *f, const char *who, nb_body_fn fn, void *user, nb_tensor *const *in,
                            int nin, int nout) {
  nbop_meta *m = malloc(((size_t)nin + 1) * sizeof *m);
  nb_tensor **res = calloc((size_t)nout, sizeof *res);
  nb_code code = !m || !res ? nbcore_fail(c, NB_NOMEM, "%s: out of memory", who) : NB_OK;
  for (int i = 0; i < nin && !code; i++) meta_of(&m[i], in[i], NULL);
  if (!code && add_args(f, m, nin)) code = nbcore_fail(c, NB_NOMEM, "%s: out of memory", who);
  if (!code) {
    nb_code r = nbfunc_cf_call_body(f->c, "the callback", fn, f->args, res, nout, user);
    if (r) code = trace_fail(c, f, who, r);
  }
  if (!code) code = set_results(c, f, who, res, nout);
  free(m);
  free(res);
  return code;
}

static nb_code check_branches(nb_ctx *c, const nb_function *t, const nb_function *e) {
  for (int i = 0; i < t->nres; i++)
    if (t->res[i]->dtype != e->res[i]->dtype)
      return nbcore_fail(c, NB_DTYPE, "nb_cond: output %d is %s in the then branch but %s in the else branch", i,
                         nb_dtype_name(t->res[i]->dtype), nb_dtype_name(e->res[i]->dtype));
  return NB_OK;
}

nb_code nbfunc_graph_cond(nb_ctx *c, nb_tensor *pred, nb_body_fn then_fn, nb_body_fn else_fn, void *user,
                          nb_tensor *const *in, int nin, nb_tensor **out, int nout) {
  if (pred->dtype != NB_BOOL || pred->rank > 0)
    return nbcore_fail(c, NB_INVALID, "nb_cond: the predicate must be a bool scalar, got %s %s",
                       nb_dtype_name(pred->dtype), pred->rank < 0 ? "<unknown rank>" : nbop_tstr(pred));
  nb_function *fs[2] = {function_new(c->graph), function_new(c->graph)};
  nb_code code = !fs[0] || !fs[1] ? nbcore_fail(c, NB_NOMEM, "nb_cond: out of memory") : NB_OK;
  if (!code) code = trace_branch(c, fs[0], "nb_cond: then branch", then_fn, user, in, nin, nout);
  if (!code) code = trace_branch(c, fs[1], "nb_cond: else branch", else_fn, user, in, nin, nout);
  if (!code) code = check_branches(c, fs[0], fs[1]);
  int64_t *keys = NULL;
  int nkeys = 0;
  if (!code && unify_captures(fs, 2, &keys, &nkeys)) code = nbcore_fail(c, NB_NOMEM, "nb_cond: out of memory");
  code = own_pair(c, "nb_cond", fs[0], fs[1], code);
  nb_tensor **first = code ? NULL : malloc(((size_t)nin + 1) * sizeof *first);
  if (!code && !first) code = nbcore_fail(c, NB_NOMEM, "nb_cond: out of memory");
  if (!code) {
    first[0] = pred;
    memcpy(first + 1, in, (size_t)nin * sizeof *in);
    code = add_cf_node(c, "If", first, 1 + nin, keys, nkeys, fs[0], fs[1], out, nout);
  }
  free(first);
  free(keys);
  return code;
}

/* ---- extraction --------------------------------------------------------------------------- */

/* Copies the nodes of src that results need into context `to`, the tensors arg_keys of
   src standing for subst[i]: a new function's graph (extraction) or a caller's (inlining). */
typedef struct extractor {
  nb_ctx *err;
  nb_graph *src;
  nb_ctx *to;
  nb_tensor *const *subst;
  const int64_t *arg_keys;
  int nargs;
  nbfunc_inline_rewrite rewrite; /* inlining: may replace a node's copy */
  void *user;
  uint32_t gen;
  int32_t *order, norder;
  nb_tensor **h; /* copies of the outputs of ordered nodes, at node->slot */
} extractor;

static int arg_index(const extractor *x, int64_t key) {
  for (int i = 0; i < x->nargs; i++)
    if (x->arg_keys[i] == key) return i;
  return -1;
}

typedef struct dfs_frame {
  int32_t id, next;
} dfs_frame;

/* Post-order of the nodes the results need, stopping at arguments and known values. */
static nb_code order_needed(extractor *x, const int64_t *res_keys, int nres) {
  nb_graph *g = x->src;
  dfs_frame *stack = malloc(((size_t)g->nnodes + 1) * sizeof *stack);
  x->order = malloc(((size_t)g->nnodes + 1) * sizeof *x->order);
  if (!stack || !x->order) {
    free(stack);
    return NB_NOMEM;
  }
  int32_t top = 0;
  for (int r = 0; r < nres; r++) {
    int32_t id = nbgraph_key_node(res_keys[r]);
    if (arg_index(x, res_keys[r]) >= 0 || g->nodes[id].stamp == x->gen) continue;
    g->nodes[id].stamp = x->gen;
    stack[top++] = (dfs_frame){id, 0};
    while (top > 0) {
      dfs_frame *fr = &stack[top - 1];
      const nbgraph_node *n = &g->nodes[fr->id];
      if (fr->next < n->nin && !nbgraph_node_values_known(g, n)) {
        const nbgraph_edge *e = &g->edges[n->in0 + fr->next++];
        nbgraph_node *s = &g->nodes[e->src];
        if (arg_index(x, nbgraph_key(e->src, e->out)) < 0 && s->stamp != x->gen) {
          s->stamp = x->gen;
          stack[top++] = (dfs_frame){e->src, 0};
        }
      } else {
        x->order[x->norder++] = fr->id;
        top--;
      }
    }
  }
  free(stack);
  return NB_OK;
}

static nb_tensor *copied(const extractor *x, int64_t key) {
  int a = arg_index(x, key);
  return a >= 0 ? x->subst[a] : x->h[x->src->nodes[nbgraph_key_node(key)].slot + nbgraph_key_out(key)];
}

static nb_code copy_node(extractor *x, int32_t id, nb_tensor **ins) {
  const nbgraph_node *n = &x->src->nodes[id];
  nb_ctx *c = x->to;
  nb_tensor **outs = x->h + n->slot;
  if (nbgraph_node_values_known(x->src, n)) {
    for (int32_t o = 0; o < n->nout; o++)
      if (!(outs[o] = nb_const(c, x->src->outs[n->out0 + o].value))) return c->status;
    return NB_OK;
  }
  if (strcmp(n->def->name, "Placeholder") == 0)
    return nbcore_fail(x->err, NB_INVALID, "the function needs placeholder '%s', which is not one of its arguments",
                       n->name);
  for (int32_t i = 0; i < n->nin; i++) {
    const nbgraph_edge *e = &x->src->edges[n->in0 + i];
    ins[i] = copied(x, nbgraph_key(e->src, e->out));
  }
  bool rewritten = x->rewrite && x->rewrite(c, n, ins, outs, x->user);
  nb_code code = rewritten ? nb_status(c) : nbop_dispatch(c, n->def, ins, n->nin, n->attr, outs, n->nout);
  if (code) return code;
  nbgraph_node *copy = n->nout > 0 && c->graph && outs[0]->graph == c->graph ? &c->graph->nodes[outs[0]->node] : NULL;
  if (copy && copy->def == n->def) copy->grad_name = n->grad_name; /* a rewrite into the same op keeps its override */
  return NB_OK;
}

static nb_code copy_all(extractor *x) {
  int32_t nh = 0, width = 1;
  for (int32_t i = 0; i < x->norder; i++) {
    nbgraph_node *n = &x->src->nodes[x->order[i]];
    n->slot = nh;
    nh += n->nout;
    if (n->nin > width) width = n->nin;
  }
  x->h = calloc((size_t)nh + 1, sizeof *x->h);
  nb_tensor **ins = malloc((size_t)width * sizeof *ins);
  nb_code code = !x->h || !ins ? NB_NOMEM : NB_OK;
  for (int32_t i = 0; i < x->norder && !code; i++) code = copy_node(x, x->order[i], ins);
  free(ins);
  return code;
}

/* Copies what res_keys need into x->to as res[0..nres). */
static nb_code copy_results(extractor *x, const int64_t *res_keys, int nres, nb_tensor **res) {
  x->gen = nbgraph_next_gen(x->src);
  nb_code code = order_needed(x, res_keys, nres);
  if (!code) code = copy_all(x);
  for (int r = 0; r < nres && !code; r++) res[r] = copied(x, res_keys[r]);
  free(x->order);
  free(x->h);
  return code;
}

nb_function *nbfunc_extract(nb_ctx *err, nb_graph *owner, nb_graph *src, const int64_t *arg_keys, int nargs,
                            const int64_t *res_keys, int nres) {
  nb_function *f = function_new(NULL);
  nbop_meta *m = malloc(((size_t)nargs + 1) * sizeof *m);
  nb_code code = !f || !m ? NB_NOMEM : NB_OK;
  for (int i = 0; i < nargs && !code; i++)
    m[i] = src->outs[src->nodes[nbgraph_key_node(arg_keys[i])].out0 + nbgraph_key_out(arg_keys[i])].meta;
  if (!code) code = add_args(f, m, nargs);
  if (!code && !(f->res = malloc(((size_t)nres + 1) * sizeof *f->res))) code = NB_NOMEM;
  if (!code) { /* after add_args, which moves f->args */
    extractor x = {.err = err, .src = src, .to = f->c, .subst = f->args, .arg_keys = arg_keys, .nargs = nargs};
    code = copy_results(&x, res_keys, nres, f->res);
  }
  if (!code) f->nres = nres;
  if (!code && own_function(owner, f)) code = NB_NOMEM;
  if (code && !err->status)
    nbcore_fail(err, code, "extracting a function: %s", f && f->c->status ? nb_error(f->c) : "out of memory");
  free(m);
  if (code) {
    function_free(f);
    return NULL;
  }
  return f;
}

nb_code nbfunc_inline(nb_ctx *c, nb_function *f, nb_tensor *const *in, nbfunc_inline_rewrite rewrite, void *user,
                      nb_tensor **out) {
  int64_t *keys = malloc(((size_t)f->nargs + f->nres + 1) * sizeof *keys);
  if (!keys) return nbcore_fail(c, NB_NOMEM, "inlining a function: out of memory");
  for (int i = 0; i < f->nargs; i++) keys[i] = nbgraph_key_of(f->args[i]);
  for (int r = 0; r < f->nres; r++) keys[f->nargs + r] = nbgraph_key_of(f->res[r]);
  extractor x = {.err = c,
                 .src = f->g,
                 .to = c,
                 .subst = in,
                 .arg_keys = keys,
                 .nargs = f->nargs,
                 .rewrite = rewrite,
                 .user = user};
  nb_code code = copy_results(&x, keys + f->nargs, f->nres, out);
  free(keys);
  if (code && !c->status) nbcore_fail(c, code, "inlining a function: out of memory");
  return code;
}

/* ---- symbolic gradients and calls ------------------------------------------------------------ */

nb_code nbfunc_grads(nb_function *f, nb_tensor *const *ys, nb_tensor *const *seeds, int ny, nb_tensor *const *xs,
                     int nx, nb_tensor **dx) {
  nb_grad_opts o = {.grad_ys = seeds, .unconnected_zero = 1};
  nb_code code = nb_gradients(f->c, ys, ny, xs, nx, &o, dx);
  for (int i = 0; i < nx && !code; i++)
    if (!(dx[i] = nb_densify(f->c, dx[i]))) code = f->c->status;
  return code;
}

void nbfunc_grad_done(nb_ctx *err, nb_function *f, const char *who, nb_code code) {
  if (code && !err->status) nbcore_fail(err, code, "%s: %s", who, f->c->status ? nb_error(f->c) : "out of memory");
  nb_clear_error(f->c);
}

static nb_code build_gradient(nb_ctx *err, nb_function *f, nb_graph *owner) {
  int ny = 0;
  nb_tensor **ys = malloc((size_t)(2 * f->nres + f->nargs + 1) * sizeof *ys), **dys = ys + f->nres,
            **dxs = dys + f->nres;
  if (!ys) return nbcore_fail(err, NB_NOMEM, "function gradient: out of memory");
  nb_code code = NB_OK;
  for (int i = 0; i < f->nres && !code; i++) {
    if (!nbcore_is_float(f->res[i]->dtype)) continue;
    nbop_meta m;
    nbop_meta_set(&m, f->res[i]->dtype, f->res[i]->rank, f->res[i]->shape);
    int32_t id = nbgraph_add_arg(f->g, &m, "dy");
    ys[ny] = f->res[i];
    if (id < 0 || !(dys[ny++] = nbgraph_handle(f->c, f->g, id, 0))) code = NB_NOMEM;
  }
  if (!code) code = nbfunc_grads(f, ys, dys, ny, f->args, f->nargs, dxs);
  int64_t *keys = code ? NULL : malloc(((size_t)f->nargs * 2 + (size_t)ny + 1) * sizeof *keys);
  if (!code && !keys) code = NB_NOMEM;
  if (!code) {
    for (int i = 0; i < f->nargs; i++) keys[i] = nbgraph_key_of(f->args[i]);
    for (int i = 0; i < ny; i++) keys[f->nargs + i] = nbgraph_key_of(dys[i]);
    for (int i = 0; i < f->nargs; i++) keys[f->nargs + ny + i] = nbgraph_key_of(dxs[i]);
    f->grad = nbfunc_extract(err, owner, f->g, keys, f->nargs + ny, keys + f->nargs + ny, f->nargs);
    if (!f->grad) code = err->status;
  }
  nbfunc_grad_done(err, f, "function gradient", code);
  free(keys);
  free(ys);
  return code;
}

nb_function *nbfunc_gradient(nb_ctx *err, nb_function *f) {
  if (!f->grad) build_gradient(err, f, f->g);
  return f->grad;
}

nb_code nbfunc_call_node(nb_ctx *c, nb_function *f, nb_tensor *const *in, nb_tensor **out) {
  const nbop_def *def = nbop_lookup("StatefulPartitionedCall");
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(def, a);
  a[1].i = nbcore_bits_of(&f, sizeof f);
  return nbop_dispatch(c, def, in, f->nargs, a, out, f->nres);
}

bool nbfunc_is_zeros_filler(const nb_tensor *x) {
  return x && x->graph && strcmp(x->graph->nodes[x->node].def->name, "ZerosLike") == 0;
}

/* ---- user functions ------------------------------------------------------------------------ */

static nb_code trace_user(nb_ctx *c, nb_function *f, nb_body_fn fn, void *user, nb_tensor *const *like, int nin,
                          int nout) {
  nb_code code = trace_branch(c, f, "nb_function_new", fn, user, like, nin, nout);
  nb_function *fs[1] = {f};
  if (!code && unify_captures(fs, 1, &f->caps, &f->ncaps))
    code = nbcore_fail(c, NB_NOMEM, "nb_function_new: out of memory");
  if (!code && f->nargs < 1)
    code = nbcore_fail(c, NB_INVALID, "nb_function_new: a function needs at least one argument or captured tensor");
  if (!code && own_function(c->graph, f)) code = nbcore_fail(c, NB_NOMEM, "nb_function_new: out of memory");
  return code;
}

nb_function *nb_function_new(nb_ctx *c, nb_body_fn fn, void *user, nb_tensor *const *like, int nin, int nout) {
  if (!nbop_live(c)) return NULL;
  if (!c->graph) {
    nbcore_fail(c, NB_INVALID, "nb_function_new needs a graph context (eager code calls C functions directly)");
    return NULL;
  }
  if (!fn || nout < 1 || nin < 0 || (nin > 0 && !like)) {
    nbcore_fail(c, NB_INVALID, "nb_function_new: NULL function or arguments, or counts out of range (nin %d, nout %d)",
                nin, nout);
    return NULL;
  }
  for (int i = 0; i < nin; i++)
    if (!like[i]) {
      nbcore_fail(c, NB_INVALID, "nb_function_new: like[%d] is NULL", i);
      return NULL;
    }
  nb_function *f = function_new(c->graph);
  if (!f) {
    nbcore_fail(c, NB_NOMEM, "nb_function_new: out of memory");
    return NULL;
  }
  if (trace_user(c, f, fn, user, like, nin, nout)) {
    function_free(f);
    return NULL;
  }
  return f;
}

nb_code nb_call_function(nb_ctx *c, nb_function *f, nb_tensor *const *in, int nin, nb_tensor **out, int nout) {
  if (!c) return NB_INVALID;
  for (int i = 0; out && i < nout; i++) out[i] = NULL;
  if (c->status) return c->status;
  if (!f || !out || (nin > 0 && !in)) return nbcore_fail(c, NB_INVALID, "nb_call_function: NULL function, in or out");
  if (c->graph != f->g->parent)
    return nbcore_fail(c, NB_INVALID, "nb_call_function: the function belongs to another graph");
  if (nin != f->nargs - f->ncaps || nout != f->nres)
    return nbcore_fail(c, NB_INVALID,
                       "nb_call_function: the function takes %d inputs and gives %d outputs, not %d and %d",
                       f->nargs - f->ncaps, f->nres, nin, nout);
  nb_tensor **ins = malloc(((size_t)f->nargs + 1) * sizeof *ins);
  if (!ins) return nbcore_fail(c, NB_NOMEM, "nb_call_function: out of memory");
  memcpy(ins, in, (size_t)nin * sizeof *in);
  int made = 0;
  for (int j = 0; j < f->ncaps; j++, made++)
    if (!(ins[nin + j] = nbgraph_handle(c, c->graph, nbgraph_key_node(f->caps[j]), nbgraph_key_out(f->caps[j])))) break;
  nb_code code = made < f->ncaps ? c->status : nbfunc_call_node(c, f, ins, out);
  for (int j = 0; j < made; j++) nb_tensor_free(ins[nin + j]);
  free(ins);
  return code;
}

void nb_function_set_gradient(nb_function *f, nb_grad_fn grad) {
  if (f) f->user_grad = grad;
}
