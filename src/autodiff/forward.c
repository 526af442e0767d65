/* Forward mode on graphs, built from reverse mode as TF's forwardprop fallback does it:
   g(u) = J^T u is linear in a dummy cotangent u, so d<g(u), v>/du = J v for any value of
   u. Hessian-vector products run that over a gradient (forward-over-reverse); Hessians
   take one gradient per element of a flattened gradient (tf.hessians). */
#include "autodiff.h"

#include <stdio.h>
#include <stdlib.h>

/* Elements of one Hessian block's gradient beyond which nb_hessian refuses: it builds
   one gradient pass per element. */
enum { HESSIAN_MAX_ELEMENTS = 4096 };

/* A static shape for messages ("<unknown rank>" when so). */
static const char *shape_str(const nb_tensor *x) { return x->rank < 0 ? "<unknown rank>" : nbop_tstr(x); }

static nb_code check_graph_tensors(nb_ctx *c, const char *fn, const char *what, nb_tensor *const *ts, int n) {
  if (n < 0 || (n > 0 && !ts)) return nbcore_fail(c, NB_INVALID, "%s: %s is NULL or has negative length", fn, what);
  for (int i = 0; i < n; i++)
    if (!ts[i] || ts[i]->graph != c->graph)
      return nbcore_fail(c, NB_INVALID, "%s: %s[%d] is not a tensor of this context's graph", fn, what, i);
  return NB_OK;
}

/* Common checks: a live graph context (eager forward mode is not built), valid xs, and an
   out of nout entries. */
static nb_code check_call(nb_ctx *c, const char *fn, nb_tensor *const *xs, int nx, nb_tensor **out, int nout) {
  if (!c) return NB_INVALID;
  for (int i = 0; out && i < nout; i++) out[i] = NULL; /* what a failure does not reach stays NULL */
  if (!nbop_live(c)) return nb_status(c);
  if (!c->graph)
    return nbcore_fail(
        c, NB_UNIMPLEMENTED,
        "%s needs a graph context: eager forward mode is a forward accumulator or a tape (nb_hvp_fn, nb_tape_jacobian)",
        fn);
  if (nout > 0 && !out) return nbcore_fail(c, NB_INVALID, "%s: out is NULL", fn);
  return check_graph_tensors(c, fn, "xs", xs, nx);
}

static nb_code check_tangents(nb_ctx *c, const char *fn, nb_tensor *const *xs, int nx, nb_tensor *const *ts) {
  nb_code code = check_graph_tensors(c, fn, "tangents", ts, nx);
  for (int j = 0; j < nx && !code; j++) {
    if (nb_dtype_of(ts[j]) != nb_dtype_of(xs[j]) || !nbop_shapes_compatible(ts[j], xs[j]))
      code = nbcore_fail(c, nb_dtype_of(ts[j]) != nb_dtype_of(xs[j]) ? NB_DTYPE : NB_SHAPE,
                         "%s: tangents[%d] is %s %s, xs[%d] is %s %s", fn, j, nb_dtype_name(nb_dtype_of(ts[j])),
                         shape_str(ts[j]), j, nb_dtype_name(nb_dtype_of(xs[j])), shape_str(xs[j]));
  }
  return code;
}

/* ---- the forward pass ----------------------------------------------------------------
   Nodes are added after their inputs, so ids are a topological order: one sweep over the
   ids from the first x's, visiting only ancestors of the ys, carries a tangent per
   (node, output) key. The tangent ops are added behind the sweep, never visited. */

typedef struct fwd_pass {
  nb_ctx *c;
  nb_graph *g;
  int32_t nnodes, nouts; /* the graph's size when the pass began */
  bool *wanted;          /* per node: an ancestor of a y */
  int32_t *base;         /* per node: its first output's index in keys (a gradient may add
                            outputs to a node, as a While's does: those have no tangent) */
  int64_t *keys;         /* per output: its tangent's key, -1 none */
  bool *seeded;          /* per node: an output is an x, whose tangent is given */
} fwd_pass;

static nb_code mark_ancestors(fwd_pass *p, nb_tensor *const *ys, int ny) {
  int32_t *stack = malloc((size_t)p->nnodes * sizeof *stack + 1), n = 0;
  if (!stack) return NB_NOMEM;
  for (int i = 0; i < ny; i++)
    if (ys[i] && !p->wanted[ys[i]->node]) p->wanted[stack[n++] = ys[i]->node] = true;
  while (n > 0) {
    const nbgraph_node *node = &p->g->nodes[stack[--n]];
    for (int32_t i = 0; i < node->nin; i++) {
      int32_t src = p->g->edges[node->in0 + i].src;
      if (!p->wanted[src]) p->wanted[stack[n++] = src] = true;
    }
  }
  free(stack);
  return NB_OK;
}

static int64_t *key_slot(fwd_pass *p, int32_t node, int32_t out) { return &p->keys[p->base[node] + out]; }

static nb_tensor *tangent_handle(fwd_pass *p, int32_t node, int32_t out) {
  int64_t key = *key_slot(p, node, out);
  return key < 0 ? NULL : nbgraph_handle(p->c, p->g, nbgraph_key_node(key), nbgraph_key_out(key));
}

/* The given tangents of the xs (summed for an x listed twice). */
static nb_code seed_tangents(fwd_pass *p, nb_tensor *const *xs, int nx, nb_tensor *const *tangents) {
  for (int j = 0; j < nx; j++) {
    int64_t *slot = key_slot(p, xs[j]->node, xs[j]->out);
    nb_tensor *t = tangents[j];
    if (*slot >= 0) t = nb_add(p->c, tangent_handle(p, xs[j]->node, xs[j]->out), t);
    if (!t) return nb_status(p->c);
    *slot = nbgraph_key_of(t);
    p->seeded[xs[j]->node] = true;
  }
  return NB_OK;
}

/* The tangents of node id's outputs from its inputs', by its rule (buf: nbad_grad_width). */
static nb_code node_tangents(fwd_pass *p, int32_t id, nb_tensor **buf) {
  const nbgraph_node node = p->g->nodes[id], *n = &node; /* a copy: tangent ops may move the array */
  nb_tensor **ins = buf, **outs = ins + n->nin, **tin = outs + n->nout, **tout = tin + n->nin;
  bool any = false;
  for (int32_t i = 0; i < n->nin; i++) {
    const nbgraph_edge *e = &p->g->edges[n->in0 + i];
    ins[i] = nbgraph_handle(p->c, p->g, e->src, e->out);
    tin[i] = tangent_handle(p, e->src, e->out);
    any |= tin[i] != NULL;
  }
  if (!any) return nb_status(p->c);
  for (int32_t o = 0; o < n->nout; o++) outs[o] = nbgraph_handle(p->c, p->g, id, o);
  nb_fwd_op op = {n->def, n->name, n->nin, n->nout, ins, outs, n->attr, NULL};
  nb_code code = nb_status(p->c) ? nb_status(p->c) : nbad_jvp_op(p->c, &op, n->grad_name, tin, tout);
  for (int32_t o = 0; o < n->nout && !code; o++)
    if (tout[o]) *key_slot(p, id, o) = nbgraph_key_of(tout[o]);
  return code;
}

static nb_code sweep(fwd_pass *p, int32_t first) {
  int32_t width = 0;
  for (int32_t id = first; id < p->nnodes; id++) {
    const nbgraph_node *n = &p->g->nodes[id];
    if (nbad_grad_width(n->nin, n->nout) > width) width = nbad_grad_width(n->nin, n->nout);
  }
  nb_tensor **buf = malloc((size_t)width * sizeof *buf + 1);
  if (!buf) return nbcore_fail(p->c, NB_NOMEM, "nb_jvp: out of memory");
  nb_code code = NB_OK;
  for (int32_t id = first; id < p->nnodes && !code; id++) {
    if (!p->wanted[id] || p->seeded[id]) continue;
    nb_scope_begin(p->c);
    code = node_tangents(p, id, buf);
    nb_scope_end(p->c, NULL, 0);
  }
  free(buf);
  return code;
}

/* ys entries may be NULL (nb_hvp passes gradients that are), giving NULL. */
static nb_code dense_jvp(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx,
                         nb_tensor *const *tangents, nb_tensor **out) {
  for (int i = 0; i < ny; i++) out[i] = NULL;
  nb_graph *g = c->graph;
  fwd_pass p = {.c = c, .g = g, .nnodes = g->nnodes};
  p.wanted = calloc((size_t)p.nnodes + 1, sizeof *p.wanted);
  p.seeded = calloc((size_t)p.nnodes + 1, sizeof *p.seeded);
  p.base = malloc((size_t)p.nnodes * sizeof *p.base + 1);
  for (int32_t i = 0; p.base && i < p.nnodes; i++) p.base[i] = i ? p.base[i - 1] + g->nodes[i - 1].nout : 0;
  p.nouts = p.nnodes && p.base ? p.base[p.nnodes - 1] + g->nodes[p.nnodes - 1].nout : 0;
  p.keys = malloc((size_t)p.nouts * sizeof *p.keys + 1);
  nb_code code = p.wanted && p.seeded && p.base && p.keys ? mark_ancestors(&p, ys, ny) : NB_NOMEM;
  if (code) code = nbcore_fail(c, NB_NOMEM, "nb_jvp: out of memory");
  for (int32_t i = 0; i < p.nouts && !code; i++) p.keys[i] = -1;
  int32_t first = p.nnodes;
  for (int j = 0; j < nx; j++)
    if (xs[j]->node < first) first = xs[j]->node;
  if (!code) code = nb_name_scope_push(g, "jvp");
  if (!code) {
    code = seed_tangents(&p, xs, nx, tangents);
    if (!code) code = sweep(&p, first);
    nb_name_scope_pop(g);
  }
  for (int i = 0; i < ny && !code; i++)
    if (ys[i] && nbcore_is_float(ys[i]->dtype)) out[i] = tangent_handle(&p, ys[i]->node, ys[i]->out);
  code = code ? code : nb_status(c);
  for (int i = 0; i < ny && code; i++) nb_tensor_free(out[i]), out[i] = NULL;
  free(p.wanted);
  free(p.seeded);
  free(p.base);
  free(p.keys);
  return code;
}

/* IndexedSlices ys (gradients, for nb_hvp) are densified first. */
static nb_code jvp(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx, nb_tensor *const *tangents,
                   nb_tensor **out) {
  nb_tensor *const *dense;
  nb_tensor **owned;
  nb_code code = nbop_densify_list(c, ys, ny, &dense, &owned);
  if (!code) code = dense_jvp(c, dense, ny, xs, nx, tangents, out);
  free(owned);
  return code;
}

nb_code nb_jvp(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx, nb_tensor *const *tangents,
               nb_tensor **out) {
  nb_code code = check_call(c, "nb_jvp", xs, nx, out, ny);
  if (!code) code = check_graph_tensors(c, "nb_jvp", "ys", ys, ny);
  if (!code) code = check_tangents(c, "nb_jvp", xs, nx, tangents);
  return code ? code : jvp(c, ys, ny, xs, nx, tangents, out);
}

nb_code nb_hvp(nb_ctx *c, nb_tensor *y, nb_tensor *const *xs, int nx, nb_tensor *const *vs, nb_tensor **out) {
  nb_code code = check_call(c, "nb_hvp", xs, nx, out, nx);
  if (!code) code = check_graph_tensors(c, "nb_hvp", "y", &y, 1);
  if (!code) code = check_tangents(c, "nb_hvp", xs, nx, vs);
  if (code) return code;
  nb_tensor **g = calloc((size_t)nx + 1, sizeof *g);
  if (!g) return nbcore_fail(c, NB_NOMEM, "nb_hvp: out of memory");
  code = nb_gradients(c, &y, 1, xs, nx, &(nb_grad_opts){.name = "hvp_gradients"}, g);
  if (!code) code = jvp(c, g, nx, xs, nx, vs, out);
  free(g);
  return code;
}

/* Element k of flat, as a 1-element slice. */
static nb_tensor *element(nb_ctx *c, nb_tensor *flat, int64_t k) {
  return nb_strided_slice(c, flat, (const int64_t[]){k}, (const int64_t[]){k + 1}, (const int64_t[]){1}, 1,
                          &(nb_slice_masks){0});
}

/* dy/dx as shape_of.shape + x.shape (shape_of: y or a tensor of its known shape) from
   one gradient of each of y's size elements. */
static nb_code jacobian_rows(nb_ctx *c, nb_tensor *y, const nb_tensor *shape_of, nb_tensor *x, int64_t size,
                             nb_tensor **out) {
  nb_tensor **rows = malloc((size_t)(size + 1) * sizeof *rows);
  if (!rows) return nbcore_fail(c, NB_NOMEM, "jacobian: out of memory");
  nb_tensor *flat = nb_reshape(c, y, (const int64_t[]){-1}, 1);
  nb_code code = flat ? NB_OK : nb_status(c);
  for (int64_t k = 0; k < size && !code; k++) {
    nb_tensor *yk = element(c, flat, k);
    code = yk ? nb_gradients(c, &yk, 1, &x, 1, &(nb_grad_opts){.name = "jacobian", .unconnected_zero = 1}, &rows[k])
              : nb_status(c);
    if (!code) code = (rows[k] = nb_reshape(c, rows[k], (const int64_t[]){-1}, 1)) ? NB_OK : nb_status(c);
  }
  int64_t shape[NB_MAX_RANK];
  int ry = nb_rank(shape_of);
  for (int d = 0; d < ry; d++) shape[d] = nb_shape(shape_of)[d];
  for (int d = 0; d < nb_rank(x); d++) shape[ry + d] = nb_shape(x)[d];
  if (!code) *out = nb_reshape(c, nb_pack(c, rows, (int)size, 0), shape, ry + nb_rank(x));
  free(rows);
  return code ? code : nb_status(c);
}

/* x's element count; NB_SHAPE naming x when a dim is unknown, the Hessian's rank is past
   NB_MAX_RANK, or the count is past the cap. */
static nb_code hessian_size(nb_ctx *c, const nb_tensor *x, int i, int64_t *size) {
  const char *s = shape_str(x);
  bool known = nb_rank(x) >= 0;
  for (int d = 0; d < nb_rank(x); d++) known &= nb_shape(x)[d] >= 0;
  if (!known)
    return nbcore_fail(c, NB_SHAPE, "nb_hessian: xs[%d] ('%s') has shape %s; Hessians need a fully known shape", i,
                       nb_tensor_node_name(x), s);
  *size = 1;
  for (int d = 0; d < nb_rank(x) && *size <= HESSIAN_MAX_ELEMENTS; d++) /* past the cap: no overflow */
    *size = nb_shape(x)[d] > HESSIAN_MAX_ELEMENTS ? HESSIAN_MAX_ELEMENTS + 1 : *size * nb_shape(x)[d];
  if (2 * nb_rank(x) > NB_MAX_RANK || *size > HESSIAN_MAX_ELEMENTS || *size == 0)
    return nbcore_fail(c, NB_SHAPE, "nb_hessian: xs[%d] ('%s') of shape %s: need 1 to %d elements and rank at most %d",
                       i, nb_tensor_node_name(x), s, HESSIAN_MAX_ELEMENTS, NB_MAX_RANK / 2);
  return NB_OK;
}

nb_code nb_hessian(nb_ctx *c, nb_tensor *y, nb_tensor *const *xs, int nx, nb_tensor **out) {
  nb_code code = check_call(c, "nb_hessian", xs, nx, out, nx);
  if (!code) code = check_graph_tensors(c, "nb_hessian", "y", &y, 1);
  int64_t *sizes = code ? NULL : malloc((size_t)(nx + 1) * sizeof *sizes);
  nb_tensor **g = code ? NULL : calloc((size_t)nx + 1, sizeof *g);
  if (!code && (!sizes || !g)) code = nbcore_fail(c, NB_NOMEM, "nb_hessian: out of memory");
  for (int i = 0; i < nx && !code; i++) code = hessian_size(c, xs[i], i, &sizes[i]);
  if (!code) code = nb_gradients(c, &y, 1, xs, nx, &(nb_grad_opts){.name = "hessian_gradients"}, g);
  for (int i = 0; i < nx && !code; i++) {
    out[i] = NULL;
    if (g[i]) code = jacobian_rows(c, g[i], xs[i], xs[i], sizes[i], &out[i]);
  }
  free(sizes);
  free(g);
  return code;
}

/* ---- derivatives of a function, in both modes -------------------------------------------- */

/* f's one output at in (nin of them) into *y, with f's errors named. */
static nb_code call_f(nb_ctx *c, const char *who, nb_custom_fn f, void *user, nb_tensor *const *in, int nin,
                      nb_tensor **y) {
  *y = NULL;
  nb_code code = nbcore_callback_code(c, who, f(c, in, nin, y, 1, user));
  if (!code && !*y) code = nbcore_fail(c, NB_INVALID, "%s: the function left its output NULL", who);
  return code;
}

/* Eagerly: an accumulator watching xs along vs around a tape watching xs; the tangents of
   the tape's gradients are H v. */
static nb_code eager_hvp(nb_ctx *c, nb_custom_fn f, void *user, nb_tensor *const *xs, int nx, nb_tensor *const *vs,
                         nb_tensor **out) {
  nb_tensor **g = calloc((size_t)nx + 1, sizeof *g), *y = NULL;
  nb_forward_accumulator *acc = g ? nb_forward_accumulator_begin(c) : NULL;
  nb_code code = acc ? NB_OK : g ? nb_status(c) : nbcore_fail(c, NB_NOMEM, "nb_hvp_fn: out of memory");
  for (int j = 0; j < nx && !code; j++) code = nb_forward_accumulator_watch(acc, xs[j], vs[j]);
  nb_tape *t = code ? NULL : nb_tape_begin(c, 0);
  if (!code && !t) code = nb_status(c);
  for (int j = 0; j < nx && !code; j++) nb_tape_watch(t, xs[j]);
  if (!code) code = call_f(c, "nb_hvp_fn", f, user, xs, nx, &y);
  if (!code) code = nb_tape_gradient(t, &y, 1, xs, nx, NULL, g);
  nb_tape_end(t);
  for (int j = 0; j < nx && !code; j++) out[j] = g[j] ? nb_forward_accumulator_jvp(acc, g[j]) : NULL;
  nb_forward_accumulator_end(acc);
  free(g);
  return code ? code : nb_status(c);
}

nb_code nb_hvp_fn(nb_ctx *c, nb_custom_fn f, void *user, nb_tensor *const *xs, int nx, nb_tensor *const *vs,
                  nb_tensor **out) {
  if (!c) return NB_INVALID;
  for (int j = 0; out && j < nx; j++) out[j] = NULL;
  if (!nbop_live(c)) return nb_status(c);
  if (!f || nx < 0 || (nx > 0 && (!xs || !vs || !out)))
    return nbcore_fail(c, NB_INVALID, "nb_hvp_fn: f, xs, vs or out is NULL");
  nb_scope_begin(c);
  nb_code code;
  if (c->graph) {
    nb_tensor *y = NULL;
    code = call_f(c, "nb_hvp_fn", f, user, xs, nx, &y);
    if (!code) code = nb_hvp(c, y, xs, nx, vs, out);
  } else {
    code = eager_hvp(c, f, user, xs, nx, vs, out);
  }
  nb_scope_end(c, out, nx);
  return code;
}

/* ---- Jacobians in a graph, in both modes ------------------------------------------------- */

/* Column j of the forward Jacobian: y's JVP along the one-hot e_j, flattened (zeros when
   unconnected). */
static nb_tensor *jacobian_column(nb_ctx *c, nb_tensor *x, nb_tensor *y, int64_t j) {
  double *basis = calloc((size_t)nb_num_elements(x) + 1, sizeof *basis);
  if (!basis) {
    nbcore_fail(c, NB_NOMEM, "nb_jacobian: out of memory");
    return NULL;
  }
  basis[j] = 1;
  nb_tensor *e = nb_tensor_from(c, NB_F64, nb_rank(x), nb_shape(x), basis), *col = NULL;
  free(basis);
  if (e && nb_dtype_of(x) != NB_F64) e = nb_cast(c, e, nb_dtype_of(x));
  if (!e || nb_jvp(c, &y, 1, &x, 1, &e, &col)) return NULL;
  return nb_reshape(c, col ? col : nb_zeros_like(c, y), (const int64_t[]){-1}, 1);
}

/* jacfwd: the columns stacked on the last axis, [m, n], in x's dtype (the reverse
   Jacobian's). */
static nb_code jacobian_forward(nb_ctx *c, nb_tensor *x, nb_tensor *y, nb_tensor **out) {
  int64_t n = nb_num_elements(x);
  nb_tensor **cols = malloc((size_t)(n + 1) * sizeof *cols);
  if (!cols) return nbcore_fail(c, NB_NOMEM, "nb_jacobian: out of memory");
  nb_code code = NB_OK;
  for (int64_t j = 0; j < n && !code; j++) code = (cols[j] = jacobian_column(c, x, y, j)) ? NB_OK : nb_status(c);
  if (!code) *out = nb_pack(c, cols, (int)n, 1);
  if (!code && nb_dtype_of(y) != nb_dtype_of(x)) *out = nb_cast(c, *out, nb_dtype_of(x));
  free(cols);
  return code ? code : nb_status(c);
}

static bool fully_known(const nb_tensor *t) {
  bool known = nb_rank(t) >= 0;
  for (int d = 0; d < nb_rank(t); d++) known &= nb_shape(t)[d] >= 0;
  return known;
}

static nb_code check_jacobian_shapes(nb_ctx *c, const char *fn, const nb_tensor *x, const nb_tensor *y) {
  if (!nbcore_is_float(nb_dtype_of(x)) || !nbcore_is_float(nb_dtype_of(y)))
    return nbcore_fail(c, NB_DTYPE, "%s: x and y must be float, got %s and %s", fn, nb_dtype_name(nb_dtype_of(x)),
                       nb_dtype_name(nb_dtype_of(y)));
  if (!fully_known(x) || !fully_known(y) || nb_rank(x) + nb_rank(y) > NB_MAX_RANK)
    return nbcore_fail(c, NB_SHAPE, "%s: x %s and y %s need fully known shapes, of ranks summing to at most %d", fn,
                       shape_str(x), shape_str(y), NB_MAX_RANK);
  return NB_OK;
}

/* The mode's Jacobian (m = size(y) rows, n = size(x) columns; zeros when either is 0)
   under its name scope, shaped y.shape + x.shape. */
static nb_code jacobian(nb_ctx *c, nb_tensor *y, nb_tensor *x, nb_jacobian_mode mode, nb_tensor **out) {
  int64_t m = nb_num_elements(y), n = nb_num_elements(x), shape[NB_MAX_RANK];
  for (int d = 0; d < nb_rank(y); d++) shape[d] = nb_shape(y)[d];
  for (int d = 0; d < nb_rank(x); d++) shape[nb_rank(y) + d] = nb_shape(x)[d];
  int rank = nb_rank(y) + nb_rank(x);
  if (m == 0 || n == 0) {
    *out = nb_tensor_from(c, nb_dtype_of(x), rank, shape, NULL);
    return nb_status(c);
  }
  bool forward = mode == NB_JACOBIAN_MODE_FORWARD || (mode == NB_JACOBIAN_MODE_AUTO && n < m);
  nb_code code = nb_name_scope_push(c->graph, forward ? "jacfwd" : "jacrev");
  if (code) return code;
  code = forward ? jacobian_forward(c, x, y, out) : jacobian_rows(c, y, y, x, m, out);
  if (!code && forward) *out = nb_reshape(c, *out, shape, rank);
  nb_name_scope_pop(c->graph);
  return code ? code : nb_status(c);
}

nb_code nb_jacobian(nb_ctx *c, nb_tensor *y, nb_tensor *x, nb_jacobian_mode mode, nb_tensor **out) {
  nb_code code = check_call(c, "nb_jacobian", &x, 1, out, 1);
  if (!code) code = check_graph_tensors(c, "nb_jacobian", "y", &y, 1);
  if (!code && mode != NB_JACOBIAN_MODE_AUTO && mode != NB_JACOBIAN_MODE_FORWARD && mode != NB_JACOBIAN_MODE_REVERSE)
    code = nbcore_fail(c, NB_INVALID, "nb_jacobian: %d is no nb_jacobian_mode", (int)mode);
  if (!code) code = check_jacobian_shapes(c, "nb_jacobian", x, y);
  if (code) return code;
  nb_scope_begin(c);
  code = jacobian(c, y, x, mode, out);
  nb_scope_end(c, out, 1);
  return code;
}

/* f runs once, eagerly under a tape; then the tape's Jacobian or the graph's, each
   choosing the mode with fewer passes: n = size(x) JVPs or m = size(y) gradients. */
static nb_code jacobian_fn(nb_ctx *c, nb_custom_fn f, void *user, nb_tensor *x, nb_tensor **out) {
  nb_tape *t = c->graph ? NULL : nb_tape_begin(c, 0);
  if (!c->graph && !t) return nb_status(c);
  nb_tape_watch(t, x);
  nb_tensor *y = NULL;
  nb_code code = call_f(c, "nb_jacobian_fn", f, user, &x, 1, &y);
  if (!code) code = check_jacobian_shapes(c, "nb_jacobian_fn", x, y);
  if (!code) code = t ? nb_tape_jacobian(t, y, x, out) : jacobian(c, y, x, NB_JACOBIAN_MODE_AUTO, out);
  nb_tape_end(t);
  return code;
}

nb_code nb_jacobian_fn(nb_ctx *c, nb_custom_fn f, void *user, nb_tensor *x, nb_tensor **out) {
  if (!c) return NB_INVALID;
  if (out) *out = NULL;
  if (!nbop_live(c)) return nb_status(c);
  if (!f || !x || !out) return nbcore_fail(c, NB_INVALID, "nb_jacobian_fn: f, x or out is NULL");
  nb_scope_begin(c);
  nb_code code = jacobian_fn(c, f, user, x, out);
  nb_scope_end(c, out, 1);
  return code;
}
