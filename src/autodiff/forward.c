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
    return nbcore_fail(c, NB_UNIMPLEMENTED,
                       "%s needs a graph context: eager forward mode (a forward accumulator) is not built yet", fn);
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

/* J_y(xs) v for one float y, NULL when no gradient connects y to any x: g = J^T u for a
   dummy u = ones_like(y), then the gradient of <g, v> with respect to u. u is ones, as
   TF's aid, not zeros: gradient functions skip a dy they see is zero (TF's IsZero), and
   that would cut g off from u. */
static nb_code jvp_one(nb_ctx *c, nb_tensor *y, nb_tensor *const *xs, int nx, nb_tensor *const *tangents, nb_tensor **g,
                       nb_tensor **gs, nb_tensor **vs, nb_tensor **out) {
  *out = NULL;
  nb_tensor *u = nb_ones_like(c, y);
  if (!u) return nb_status(c);
  nb_code code = nb_gradients(c, &y, 1, xs, nx, &(nb_grad_opts){.grad_ys = &u, .name = "jvp_transposed"}, g);
  int n = 0;
  for (int j = 0; j < nx && !code; j++) {
    if (!g[j]) continue;
    gs[n] = g[j];
    vs[n++] = tangents[j];
  }
  if (code || n == 0) return code;
  return nb_gradients(c, gs, n, &u, 1, &(nb_grad_opts){.grad_ys = vs, .name = "jvp"}, out);
}

/* ys entries may be NULL (nb_hvp passes gradients that are), giving NULL. */
static nb_code jvp(nb_ctx *c, nb_tensor *const *ys, int ny, nb_tensor *const *xs, int nx, nb_tensor *const *tangents,
                   nb_tensor **out) {
  nb_tensor **tmp = malloc((size_t)(3 * nx + 1) * sizeof *tmp);
  if (!tmp) return nbcore_fail(c, NB_NOMEM, "nb_jvp: out of memory");
  nb_code code = NB_OK;
  for (int i = 0; i < ny && !code; i++) {
    out[i] = NULL;
    if (ys[i] && nbcore_is_float(nb_dtype_of(ys[i])))
      code = jvp_one(c, ys[i], xs, nx, tangents, tmp, tmp + nx, tmp + 2 * nx, &out[i]);
  }
  free(tmp);
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

/* d^2 y / dx^2 from g = dy/dx: one gradient of each element of g, stacked, reshaped to
   x.shape + x.shape. */
static nb_code hessian_block(nb_ctx *c, nb_tensor *g, nb_tensor *x, int64_t size, nb_tensor **out) {
  nb_tensor **rows = malloc((size_t)(size + 1) * sizeof *rows);
  if (!rows) return nbcore_fail(c, NB_NOMEM, "nb_hessian: out of memory");
  nb_tensor *flat = nb_reshape(c, g, (const int64_t[]){-1}, 1);
  nb_code code = flat ? NB_OK : nb_status(c);
  for (int64_t k = 0; k < size && !code; k++) {
    nb_tensor *gk = element(c, flat, k);
    code = gk ? nb_gradients(c, &gk, 1, &x, 1, &(nb_grad_opts){.name = "hessian", .unconnected_zero = 1}, &rows[k])
              : nb_status(c);
    if (!code) code = (rows[k] = nb_reshape(c, rows[k], (const int64_t[]){-1}, 1)) ? NB_OK : nb_status(c);
  }
  int64_t shape[NB_MAX_RANK];
  for (int d = 0; d < 2 * nb_rank(x); d++) shape[d] = nb_shape(x)[d % nb_rank(x)];
  if (!code) *out = nb_reshape(c, nb_pack(c, rows, (int)size, 0), shape, 2 * nb_rank(x));
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
    if (g[i]) code = hessian_block(c, g[i], xs[i], sizes[i], &out[i]);
  }
  free(sizes);
  free(g);
  return code;
}
