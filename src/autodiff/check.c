/* nb_gradcheck: the symbolic Jacobian (one gradient run per element of y, seeded with a
   one-hot grad_ys) against float64 central differences (two runs of y per element of
   each x). */
#include "autodiff.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NB_GRADCHECK_STEP 1e-6

typedef struct checker {
  nb_ctx *c, *e;           /* the graph context, an eager context for values */
  nb_session *s;
  nb_tensor *y, *gy;       /* y and its grad_ys placeholder */
  nb_tensor *const *xs;
  int nx;
  nb_tensor **vals;        /* values fed to xs (copies, perturbed in place) */
} checker;

static nb_code check_fail(checker *k, nb_code code, const char *msg) {
  return nb_fail(k->c, code, "nb_gradcheck: %s", msg);
}

static nb_code run(checker *k, nb_tensor *const *feeds, nb_tensor *const *vals, int n, nb_tensor *const *fetch,
                   int nfetch, nb_tensor **out) {
  nb_code code = nb_run(k->s, feeds, vals, n, fetch, nfetch, out);
  return code ? nb_fail(k->c, code, "nb_gradcheck: %s", nb_session_error(k->s)) : NB_OK;
}

static nb_code check_args(nb_ctx *c, nb_tensor *y, nb_tensor *const *xs, int nx, nb_tensor *const *x_values,
                          double *max_error) {
  if (!c->graph) return nb_fail(c, NB_INVALID, "nb_gradcheck needs a graph context");
  if (!y || !max_error || nx < 1 || !xs || !x_values) return nb_fail(c, NB_INVALID, "nb_gradcheck: NULL argument");
  if (y->dtype != NB_F64) return nb_fail(c, NB_DTYPE, "nb_gradcheck: y must be float64, got %s", nb_dtype_name(y->dtype));
  for (int i = 0; i < nx; i++) {
    if (!xs[i] || !x_values[i] || !x_values[i]->buf)
      return nb_fail(c, NB_INVALID, "nb_gradcheck: xs[%d] or its value is missing or not concrete", i);
    if (xs[i]->dtype != NB_F64 || x_values[i]->dtype != NB_F64)
      return nb_fail(c, NB_DTYPE, "nb_gradcheck: xs[%d] and its value must be float64", i);
  }
  return NB_OK;
}

/* max |J_symbolic - J_numeric| over row j (element j of y). */
static nb_code row_error(checker *k, int64_t j, const nb_tensor *y0, nb_tensor **dxs, double *err) {
  nb_tensor *seed = nb_zeros_like(k->e, (nb_tensor *)y0);
  if (!seed) return check_fail(k, NB_NOMEM, "out of memory");
  ((double *)nb_data(seed))[j] = 1;
  int n = k->nx + 1;
  nb_tensor **feeds = malloc((size_t)n * 2 * sizeof *feeds), **vals = feeds + n;
  nb_tensor **fetch = malloc((size_t)k->nx * 2 * sizeof *fetch), **got = fetch + k->nx;
  if (!feeds || !fetch) {
    free(feeds);
    free(fetch);
    return check_fail(k, NB_NOMEM, "out of memory");
  }
  int nf = 0;
  for (int i = 0; i < k->nx; i++)
    if (dxs[i]) fetch[nf++] = dxs[i];
  memcpy(feeds, k->xs, (size_t)k->nx * sizeof *feeds);
  memcpy(vals, k->vals, (size_t)k->nx * sizeof *vals);
  feeds[k->nx] = k->gy;
  vals[k->nx] = seed;
  nb_code code = nf ? run(k, feeds, vals, n, fetch, nf, got) : NB_OK;
  for (int i = 0, f = 0; i < k->nx && !code; i++) {
    const double *sym = dxs[i] ? nb_data(got[f]) : NULL;
    double *x = (double *)nb_data(k->vals[i]);
    for (int64_t e = 0; e < k->vals[i]->size && !code; e++) {
      double keep = x[e], plus, minus = 0;
      nb_tensor *r;
      x[e] = keep + NB_GRADCHECK_STEP;
      code = run(k, k->xs, k->vals, k->nx, &k->y, 1, &r);
      if (code) {
        x[e] = keep;
        break;
      }
      plus = nb_item(r, j);
      nb_tensor_free(r);
      x[e] = keep - NB_GRADCHECK_STEP;
      code = run(k, k->xs, k->vals, k->nx, &k->y, 1, &r);
      if (!code) minus = nb_item(r, j); /* before restoring x: y may be a view of it */
      x[e] = keep;
      if (code) break;
      nb_tensor_free(r);
      double num = (plus - minus) / (2 * NB_GRADCHECK_STEP), s = sym ? sym[e] : 0;
      double d = fabs(num - s);
      if (d > *err || isnan(d)) *err = isnan(d) ? INFINITY : d;
    }
    if (dxs[i]) nb_tensor_free(got[f++]);
  }
  free(feeds);
  free(fetch);
  return code;
}

static nb_code gradcheck(checker *k, double *max_error) {
  nb_tensor *y0;
  nb_code code = run(k, k->xs, k->vals, k->nx, &k->y, 1, &y0);
  if (code) return code;
  k->gy = nb_placeholder(k->c, NB_F64, y0->rank, y0->shape, "gradcheck_dy");
  nb_tensor **dxs = calloc((size_t)k->nx, sizeof *dxs);
  nb_grad_opts o = {.grad_ys = &k->gy};
  if (!dxs) code = check_fail(k, NB_NOMEM, "out of memory");
  if (!code) code = nb_gradients(k->c, &k->y, 1, k->xs, k->nx, &o, dxs);
  *max_error = 0;
  for (int64_t j = 0; !code && j < y0->size; j++) code = row_error(k, j, y0, dxs, max_error);
  free(dxs);
  nb_tensor_free(y0);
  return code;
}

nb_code nb_gradcheck(nb_ctx *c, nb_tensor *y, nb_tensor *const *xs, int nx, nb_tensor *const *x_values,
                     double *max_error) {
  if (!c) return NB_INVALID;
  if (c->status) return c->status;
  nb_code code = check_args(c, y, xs, nx, x_values, max_error);
  if (code) return code;
  checker k = {.c = c, .e = nb_eager_new(), .s = nb_session_new(c->graph), .y = y, .xs = xs, .nx = nx};
  k.vals = calloc((size_t)nx, sizeof *k.vals);
  if (!k.e || !k.s || !k.vals) code = nb_fail(c, NB_NOMEM, "nb_gradcheck: out of memory");
  for (int i = 0; i < nx && !code; i++)
    if (!(k.vals[i] = nb_tensor_from(k.e, NB_F64, x_values[i]->rank, x_values[i]->shape, nb_data(x_values[i]))))
      code = nb_fail(c, NB_NOMEM, "nb_gradcheck: out of memory");
  nb_scope_begin(c);
  if (!code) code = gradcheck(&k, max_error);
  nb_scope_end(c, NULL, 0);
  free(k.vals);
  nb_session_free(k.s);
  nb_ctx_free(k.e);
  return code;
}
