/* Function graphs and the graph-mode builders of nb_while and nb_cond, as TF 2's
   while_v2/cond_v2: each callback is traced once, in a graph context of its own whose
   placeholders are the arguments, into a function graph; graph tensors of enclosing
   graphs that the callback uses are captured (a placeholder in the function graph, and
   an extra input of the While/If node), level by level for nested functions. The node
   carries its functions as attrs; its kernel (src/ops/control_flow.c) runs them through
   a session over the function graph. */
#include "function.h"

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
  free(f);
}

void nb_graph_free_functions(nb_graph *g) {
  for (int32_t i = 0; i < g->nfuncs; i++) function_free(g->funcs[i]);
  free(g->funcs);
  g->funcs = NULL;
  g->nfuncs = 0;
}

static nb_function *function_new(nb_graph *parent) {
  nb_function *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  atomic_init(&f->busy, false);
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
  if (!nb_grow_array((void **)&g->funcs, &g->funcs_cap, g->nfuncs + 1, sizeof *g->funcs)) return NB_NOMEM;
  g->funcs[g->nfuncs++] = f;
  return NB_OK;
}

nb_code nb_function_run(nb_kargs *k, nb_function *f, const char *what, nb_tensor *const *args, nb_tensor **res) {
  bool busy = atomic_exchange(&f->busy, true);
  nb_session *s = busy ? nb_session_new(f->g) : f->cached ? f->cached : (f->cached = nb_session_new(f->g));
  if (!s) {
    if (!busy) atomic_store(&f->busy, false);
    return nb_kfail(k, NB_NOMEM, "out of memory starting the %s", what);
  }
  nb_session_set_threads(s, k->threads);
  nb_code code = nb_run(s, f->args, args, f->nargs, f->res, f->nres, res);
  if (code) nb_kfail(k, code, "%s: %s", what, nb_session_error(s));
  if (busy)
    nb_session_free(s);
  else
    atomic_store(&f->busy, false);
  return code;
}

/* ---- captures ------------------------------------------------------------------------------ */

/* The placeholder of g capturing the parent's tensor `key`, made on first use. */
static int32_t capture_one(nb_graph *g, int64_t key) {
  for (int32_t i = 0; i < g->ncaps; i++)
    if (g->caps[i].key == key) return g->caps[i].arg;
  const nb_graph *p = g->parent;
  const nb_meta *m = &p->outs[p->nodes[nb_key_node(key)].out0 + nb_key_out(key)].meta;
  if (!nb_grow_array((void **)&g->caps, &g->caps_cap, g->ncaps + 1, sizeof *g->caps)) return -1;
  int32_t id = nb_graph_add_arg(g, m, "capture");
  if (id >= 0) g->caps[g->ncaps++] = (nb_capture){key, id};
  return id;
}

int32_t nb_graph_capture(nb_graph *g, const nb_tensor *x, bool *nomem) {
  int depth = 0; /* g is `depth` levels below x's graph */
  const nb_graph *h = g;
  while (h && h != x->graph) h = h->parent, depth++;
  if (!h) return -1;
  int64_t key = nb_key_of(x);
  for (int level = depth - 1; level >= 0; level--) { /* from just below x's graph down to g */
    nb_graph *at = g;
    for (int i = 0; i < level; i++) at = at->parent;
    int32_t id = capture_one(at, key);
    if (id < 0) {
      *nomem = true;
      return -1;
    }
    key = nb_key(id, 0);
  }
  return nb_key_node(key);
}

/* ---- tracing --------------------------------------------------------------------------------- */

/* Appends n argument placeholders of the given metas to f. */
static nb_code add_args(nb_function *f, const nb_meta *m, int n) {
  nb_tensor **args = realloc(f->args, (size_t)(f->nargs + n) * sizeof *args);
  if (!args) return NB_NOMEM;
  f->args = args;
  for (int i = 0; i < n; i++) {
    int32_t id = nb_graph_add_arg(f->g, &m[i], "arg");
    if (id < 0 || !(f->args[f->nargs] = nb_graph_handle(f->c, f->g, id, 0))) return NB_NOMEM;
    f->nargs++;
  }
  return NB_OK;
}

/* The error of a callback traced in f, reported on the outer context. */
static nb_code trace_fail(nb_ctx *outer, nb_function *f, const char *who, nb_code code) {
  if (outer->status) return outer->status;
  return nb_fail(outer, code ? code : NB_INTERNAL, "%s: %s", who, nb_status(f->c) ? nb_error(f->c) : "the callback failed");
}

/* Stores the results of f; a result that is not a tensor of f's graph (a concrete value,
   an outer tensor) gets an Identity there. */
static nb_code set_results(nb_ctx *outer, nb_function *f, const char *who, nb_tensor **res, int n) {
  for (int i = 0; i < n; i++) {
    if (!res[i]) return nb_fail(outer, NB_INVALID, "%s left result %d NULL", who, i);
    if (res[i]->graph != f->g && !(res[i] = nb_identity(f->c, res[i]))) return trace_fail(outer, f, who, f->c->status);
  }
  if (!(f->res = malloc((size_t)n * sizeof *f->res))) return nb_fail(outer, NB_NOMEM, "%s: out of memory", who);
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
    nb_tensor **args = realloc(fn->args, (size_t)(fn->nargs + n) * sizeof *args);
    if (!args) return NB_NOMEM;
    fn->args = args;
    for (int j = 0; j < n; j++) {
      int32_t id = capture_one(fn->g, (*keys)[j]);
      if (id < 0 || !(fn->args[fn->nargs] = nb_graph_handle(fn->c, fn->g, id, 0))) return NB_NOMEM;
      fn->nargs++;
    }
  }
  return NB_OK;
}

static int64_t bits_of(const void *p) {
  int64_t bits = 0;
  memcpy(&bits, &p, sizeof p);
  return bits;
}

/* Adds the node: inputs `first` then the captured tensors; functions as attrs. */
static nb_code add_cf_node(nb_ctx *c, const char *type, nb_tensor *const *first, int nfirst, const int64_t *keys,
                           int nkeys, nb_function *fa, nb_function *fb, nb_tensor **outs, int nout) {
  const nb_op_def *def = nb_op_lookup(type);
  nb_tensor **ins = malloc((size_t)(nfirst + nkeys) * sizeof *ins);
  if (!ins) return nb_fail(c, NB_NOMEM, "%s: out of memory", type);
  memcpy(ins, first, (size_t)nfirst * sizeof *ins);
  int made = 0;
  for (int j = 0; j < nkeys; j++, made++)
    if (!(ins[nfirst + j] = nb_graph_handle(c, c->graph, nb_key_node(keys[j]), nb_key_out(keys[j])))) break;
  nb_code code = made < nkeys ? c->status : NB_OK;
  if (!code) {
    nb_attrval a[NB_MAX_ATTRS];
    nb_attr_defaults(def, a);
    a[1].i = bits_of(fa); /* every control-flow op: attrs N, then its two functions */
    a[2].i = bits_of(fb);
    code = nb_dispatch(c, def, ins, nfirst + nkeys, a, outs, nout);
  }
  for (int j = 0; j < made; j++) nb_tensor_free(ins[nfirst + j]);
  free(ins);
  return code;
}

/* ---- nb_while ---------------------------------------------------------------------------- */

typedef struct while_trace {
  nb_ctx *c;
  nb_function *cond, *body;
  int n;                   /* user loop variables; the loop's are [counter, vars..., captures...] */
  int64_t *keys;
  int nkeys;
} while_trace;

static void meta_of(nb_meta *m, const nb_tensor *x, const nb_shape_inv *inv) {
  if (inv)
    nb_meta_set(m, x->dtype, inv->rank, inv->shape);
  else
    nb_meta_set(m, x->dtype, x->rank, x->shape);
}

/* cond's function: the user's predicate, and counter < max_iters when bounded. */
static nb_code trace_cond(while_trace *w, nb_cond_fn cond, void *user, int64_t max_iters) {
  nb_function *f = w->cond;
  nb_tensor *pred = NULL;
  nb_code code = cond(f->c, f->args + 1, &pred, user);
  if (code || f->c->status) return trace_fail(w->c, f, "nb_while: cond", code ? code : f->c->status);
  if (!pred) return nb_fail(w->c, NB_INVALID, "nb_while: the cond function left its predicate NULL");
  if (pred->dtype != NB_BOOL || pred->rank > 0)
    return nb_fail(w->c, NB_INVALID, "nb_while: the predicate must be a bool scalar, got %s %s",
                   nb_dtype_name(pred->dtype), pred->rank < 0 ? "<unknown rank>" : nb_tstr(pred));
  if (max_iters >= 0)
    pred = nb_logical_and(f->c, nb_less(f->c, f->args[0], nb_tensor_from(f->c, NB_I64, 0, NULL, &max_iters)), pred);
  if (!pred) return trace_fail(w->c, f, "nb_while: cond", f->c->status);
  return set_results(w->c, f, "nb_while: cond", &pred, 1);
}

/* body's function: [counter + 1, the user's next values...], checked against the vars. */
static nb_code trace_body(while_trace *w, nb_body_fn body, void *user, const nb_shape_inv *inv) {
  nb_function *f = w->body;
  nb_tensor **next = calloc((size_t)w->n + 1, sizeof *next);
  if (!next) return nb_fail(w->c, NB_NOMEM, "nb_while: out of memory");
  nb_code code = body(f->c, f->args + 1, next + 1, user);
  if (code || f->c->status) code = trace_fail(w->c, f, "nb_while: body", code ? code : f->c->status);
  if (!code) code = nb_cf_check_next(w->c, "nb_while", f->args + 1, next + 1, w->n, inv);
  if (!code && !(next[0] = nb_add(f->c, f->args[0], nb_scalar(f->c, NB_I64, 1))))
    code = trace_fail(w->c, f, "nb_while: body", f->c->status);
  if (!code) code = set_results(w->c, f, "nb_while: body", next, w->n + 1);
  free(next);
  return code;
}

static nb_code trace_while(while_trace *w, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars,
                           int64_t max_iters, const nb_shape_inv *inv) {
  nb_meta *m = malloc(((size_t)w->n + 1) * sizeof *m);
  if (!m) return nb_fail(w->c, NB_NOMEM, "nb_while: out of memory");
  nb_meta_set(&m[0], NB_I64, 0, NULL);
  for (int i = 0; i < w->n; i++) meta_of(&m[1 + i], vars[i], inv ? &inv[i] : NULL);
  nb_code code = add_args(w->cond, m, w->n + 1);
  if (!code) code = add_args(w->body, m, w->n + 1);
  free(m);
  if (code) return nb_fail(w->c, code, "nb_while: out of memory");
  code = trace_cond(w, cond, user, max_iters);
  if (!code) code = trace_body(w, body, user, inv);
  nb_function *fs[2] = {w->cond, w->body};
  if (!code && unify_captures(fs, 2, &w->keys, &w->nkeys)) code = nb_fail(w->c, NB_NOMEM, "nb_while: out of memory");
  return code;
}

nb_code nb_graph_while(nb_ctx *c, nb_cond_fn cond, nb_body_fn body, void *user, nb_tensor *const *vars, int n,
                       int64_t max_iters, const nb_shape_inv *inv, nb_tensor **out) {
  while_trace w = {c, function_new(c->graph), function_new(c->graph), n, NULL, 0};
  nb_code code = !w.cond || !w.body ? nb_fail(c, NB_NOMEM, "nb_while: out of memory") : NB_OK;
  if (!code) code = trace_while(&w, cond, body, user, vars, max_iters, inv);
  nb_function *keep[2] = {w.cond, w.body};
  for (int i = 0; i < 2 && !code; i++) {
    if (own_function(c->graph, keep[i])) code = nb_fail(c, NB_NOMEM, "nb_while: out of memory");
    else keep[i] = NULL;
  }
  function_free(keep[0]);
  function_free(keep[1]);
  int total = 1 + n + w.nkeys;
  nb_tensor **first = code ? NULL : malloc((size_t)(2 * total) * sizeof *first);
  if (!code && !first) code = nb_fail(c, NB_NOMEM, "nb_while: out of memory");
  if (!code) {
    nb_tensor **outs = first + total;
    first[0] = nb_scalar(c, NB_I64, 0);
    memcpy(first + 1, vars, (size_t)n * sizeof *vars);
    code = first[0] ? add_cf_node(c, "While", first, 1 + n, w.keys, w.nkeys, w.cond, w.body, outs, total) : c->status;
    nb_tensor_free(first[0]);
    for (int i = 0; i < total && !code; i++) {
      if (i >= 1 && i <= n) out[i - 1] = outs[i];
      else nb_tensor_free(outs[i]);
    }
  }
  free(first);
  free(w.keys);
  return code;
}

/* ---- nb_cond ----------------------------------------------------------------------------- */

static nb_code trace_branch(nb_ctx *c, nb_function *f, const char *who, nb_body_fn fn, void *user, nb_tensor *const *in,
                            int nin, int nout) {
  nb_meta *m = malloc(((size_t)nin + 1) * sizeof *m);
  nb_tensor **res = calloc((size_t)nout, sizeof *res);
  nb_code code = !m || !res ? nb_fail(c, NB_NOMEM, "%s: out of memory", who) : NB_OK;
  for (int i = 0; i < nin && !code; i++) meta_of(&m[i], in[i], NULL);
  if (!code && add_args(f, m, nin)) code = nb_fail(c, NB_NOMEM, "%s: out of memory", who);
  if (!code) {
    nb_code r = fn(f->c, f->args, res, user);
    if (r || f->c->status) code = trace_fail(c, f, who, r ? r : f->c->status);
  }
  if (!code) code = set_results(c, f, who, res, nout);
  free(m);
  free(res);
  return code;
}

static nb_code check_branches(nb_ctx *c, const nb_function *t, const nb_function *e) {
  for (int i = 0; i < t->nres; i++)
    if (t->res[i]->dtype != e->res[i]->dtype)
      return nb_fail(c, NB_DTYPE, "nb_cond: output %d is %s in the then branch but %s in the else branch", i,
                     nb_dtype_name(t->res[i]->dtype), nb_dtype_name(e->res[i]->dtype));
  return NB_OK;
}

nb_code nb_graph_cond(nb_ctx *c, nb_tensor *pred, nb_body_fn then_fn, nb_body_fn else_fn, void *user,
                      nb_tensor *const *in, int nin, nb_tensor **out, int nout) {
  if (pred->dtype != NB_BOOL || pred->rank > 0)
    return nb_fail(c, NB_INVALID, "nb_cond: the predicate must be a bool scalar, got %s %s", nb_dtype_name(pred->dtype),
                   nb_tstr(pred));
  nb_function *fs[2] = {function_new(c->graph), function_new(c->graph)};
  nb_code code = !fs[0] || !fs[1] ? nb_fail(c, NB_NOMEM, "nb_cond: out of memory") : NB_OK;
  if (!code) code = trace_branch(c, fs[0], "nb_cond: then branch", then_fn, user, in, nin, nout);
  if (!code) code = trace_branch(c, fs[1], "nb_cond: else branch", else_fn, user, in, nin, nout);
  if (!code) code = check_branches(c, fs[0], fs[1]);
  int64_t *keys = NULL;
  int nkeys = 0;
  if (!code && unify_captures(fs, 2, &keys, &nkeys)) code = nb_fail(c, NB_NOMEM, "nb_cond: out of memory");
  nb_function *keep[2] = {fs[0], fs[1]};
  for (int i = 0; i < 2 && !code; i++) {
    if (own_function(c->graph, keep[i])) code = nb_fail(c, NB_NOMEM, "nb_cond: out of memory");
    else keep[i] = NULL;
  }
  function_free(keep[0]);
  function_free(keep[1]);
  nb_tensor **first = code ? NULL : malloc(((size_t)nin + 1) * sizeof *first);
  if (!code && !first) code = nb_fail(c, NB_NOMEM, "nb_cond: out of memory");
  if (!code) {
    first[0] = pred;
    memcpy(first + 1, in, (size_t)nin * sizeof *in);
    code = add_cf_node(c, "If", first, 1 + nin, keys, nkeys, fs[0], fs[1], out, nout);
  }
  free(first);
  free(keys);
  return code;
}
