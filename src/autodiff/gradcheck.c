/* nb_gradcheck: the symbolic Jacobian (one gradient run per element of y, seeded with a
   one-hot grad_ys) against float64 central differences (two runs of y per element of
   each x, each run giving a whole column of the numeric Jacobian). */
#include "autodiff.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NBAD_GRADCHECK_STEP 1e-6

typedef struct checker {
  nb_ctx *c, *e; /* the graph context, an eager context for values */
  nb_session *s;
  nb_tensor *y, *gy; /* y and its grad_ys placeholder */
  nb_tensor *const *xs;
  int nx;
  nb_tensor **vals; /* values fed to xs (copies, perturbed in place) */
  nb_tensor *seed;  /* the value fed to gy, one-hot at the row being checked */
  int64_t ny;       /* number of elements of y */
  double *num;      /* numeric Jacobian, column-major: num[g * ny + j] = dy_j/dx_g */
} checker;

static nb_code check_fail(checker *k, nb_code code, const char *msg) {
  return nbcore_fail(k->c, code, "nb_gradcheck: %s", msg);
}

static nb_code run(checker *k, nb_tensor *const *feeds, nb_tensor *const *vals, int n, nb_tensor *const *fetch,
                   int nfetch, nb_tensor **out) {
  nb_code code = nb_run(k->s, feeds, vals, n, fetch, nfetch, out);
  return code ? nbcore_fail(k->c, code, "nb_gradcheck: %s", nb_session_error(k->s)) : NB_OK;
}

static nb_code check_args(nb_ctx *c, nb_tensor *y, nb_tensor *const *xs, int nx, nb_tensor *const *x_values,
                          double *max_error) {
  if (!c->graph) return nbcore_fail(c, NB_INVALID, "nb_gradcheck needs a graph context");
  if (!y || !max_error || nx < 1 || !xs || !x_values) return nbcore_fail(c, NB_INVALID, "nb_gradcheck: NULL argument");
  if (y->dtype != NB_F64)
    return nbcore_fail(c, NB_DTYPE, "nb_gradcheck: y must be float64, got %s", nb_dtype_name(y->dtype));
  for (int i = 0; i < nx; i++) {
    if (!xs[i] || !x_values[i] || !x_values[i]->buf)
      return nbcore_fail(c, NB_INVALID, "nb_gradcheck: xs[%d] or its value is missing or not concrete", i);
    if (xs[i]->dtype != NB_F64 || x_values[i]->dtype != NB_F64)
      return nbcore_fail(c, NB_DTYPE, "nb_gradcheck: xs[%d] and its value must be float64", i);
  }
  return NB_OK;
}

/* col += sign * y, with element e of xs[i] shifted by shift. y is read before x is
   restored: it may be a view of the fed x. */
static nb_code add_y_at(checker *k, int i, int64_t e, double shift, double sign, double *col) {
  double *x = (double *)nb_data(k->vals[i]), keep = x[e];
  nb_tensor *r;
  x[e] = keep + shift;
  nb_code code = run(k, k->xs, k->vals, k->nx, &k->y, 1, &r);
  for (int64_t j = 0; j < k->ny && !code; j++) col[j] += sign * nb_item(r, j);
  x[e] = keep;
  if (!code) nb_tensor_free(r);
  return code;
}

/* k->num by central differences: column g (element g of all xs in order) is
   (y(x_g + h) - y(x_g - h)) / 2h. */
static nb_code numeric_jacobian(checker *k) {
  nb_code code = NB_OK;
  double *col = k->num;
  for (int i = 0; i < k->nx && !code; i++)
    for (int64_t e = 0; e < k->vals[i]->size && !code; e++, col += k->ny) {
      code = add_y_at(k, i, e, NBAD_GRADCHECK_STEP, 1, col);
      if (!code) code = add_y_at(k, i, e, -NBAD_GRADCHECK_STEP, -1, col);
      for (int64_t j = 0; j < k->ny; j++) col[j] /= 2 * NBAD_GRADCHECK_STEP;
    }
  return code;
}

/* err = max(err, |J_symbolic - J_numeric| over row j); got holds the fetched gradients of
   the xs that have one (the others' rows are 0). A NaN makes the error infinite. */
static void compare_row(const checker *k, int64_t j, nb_tensor *const *dxs, nb_tensor *const *got, double *err) {
  const double *num = k->num;
  for (int i = 0, f = 0; i < k->nx; i++) {
    const double *sym = dxs[i] ? nb_data(got[f++]) : NULL;
    for (int64_t e = 0; e < k->vals[i]->size; e++, num += k->ny) {
      double d = fabs(num[j] - (sym ? sym[e] : 0));
      if (d > *err || isnan(d)) *err = isnan(d) ? INFINITY : d;
    }
  }
}

/* The symbolic Jacobian row by row, each row compared as it comes. A gradient may be a view
   of the seed, so each row is compared before the seed is reset. */
static nb_code symbolic_rows(checker *k, nb_tensor *const *dxs, double *err) {
  int n = k->nx + 1, nf = 0;
  nb_tensor **feeds = malloc((size_t)n * 2 * sizeof *feeds), **vals = feeds + n;
  nb_tensor **fetch = malloc((size_t)k->nx * 2 * sizeof *fetch), **got = fetch + k->nx;
  nb_code code = feeds && fetch ? NB_OK : check_fail(k, NB_NOMEM, "out of memory");
  for (int i = 0; i < k->nx && !code; i++)
    if (dxs[i]) fetch[nf++] = dxs[i];
  if (!code) {
    memcpy(feeds, k->xs, (size_t)k->nx * sizeof *feeds);
    memcpy(vals, k->vals, (size_t)k->nx * sizeof *vals);
    feeds[k->nx] = k->gy;
    vals[k->nx] = k->seed;
  }
  double *one_hot = code ? NULL : (double *)nb_data(k->seed);
  for (int64_t j = 0; j < k->ny && !code; j++) {
    one_hot[j] = 1;
    code = nf ? run(k, feeds, vals, n, fetch, nf, got) : NB_OK;
    if (!code) compare_row(k, j, dxs, got, err);
    for (int f = 0; f < nf && !code; f++) nb_tensor_free(got[f]);
    one_hot[j] = 0;
  }
  free(feeds);
  free(fetch);
  return code;
}

/* Sets up gy, its seed and the numeric Jacobian's storage from y's value at x (a failed
   placeholder leaves the ctx status set, which nb_gradients then returns). */
static nb_code prepare(checker *k) {
  nb_tensor *y0;
  nb_code code = run(k, k->xs, k->vals, k->nx, &k->y, 1, &y0);
  if (code) return code;
  k->ny = y0->size;
  k->gy = nb_placeholder(k->c, NB_F64, y0->rank, y0->shape, "gradcheck_dy");
  k->seed = nb_zeros_like(k->e, y0);
  nb_tensor_free(y0);
  size_t nxs = 0;
  for (int i = 0; i < k->nx; i++) nxs += (size_t)k->vals[i]->size;
  k->num = calloc(nxs * (size_t)k->ny + 1, sizeof *k->num); /* + 1: never calloc(0) */
  return k->seed && k->num ? NB_OK : check_fail(k, NB_NOMEM, "out of memory");
}

static nb_code gradcheck(checker *k, double *max_error) {
  nb_code code = prepare(k);
  nb_tensor **dxs = code ? NULL : calloc((size_t)k->nx, sizeof *dxs);
  nb_grad_opts o = {.grad_ys = &k->gy};
  if (!code && !dxs) code = check_fail(k, NB_NOMEM, "out of memory");
  if (!code) code = nb_gradients(k->c, &k->y, 1, k->xs, k->nx, &o, dxs);
  if (!code) code = nbop_densify_inputs(k->c, dxs, k->nx, dxs); /* IndexedSlices are checked as their dense value */
  if (!code) code = numeric_jacobian(k);
  *max_error = 0;
  if (!code) code = symbolic_rows(k, dxs, max_error);
  free(dxs);
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
  if (!k.e || !k.s || !k.vals) code = nbcore_fail(c, NB_NOMEM, "nb_gradcheck: out of memory");
  for (int i = 0; i < nx && !code; i++)
    if (!(k.vals[i] = nb_tensor_from(k.e, NB_F64, x_values[i]->rank, x_values[i]->shape, nb_data(x_values[i]))))
      code = nbcore_fail(c, NB_NOMEM, "nb_gradcheck: out of memory");
  nb_scope_begin(c);
  if (!code) code = gradcheck(&k, max_error);
  nb_scope_end(c, NULL, 0);
  free(k.num);
  free(k.vals);
  nb_session_free(k.s);
  nb_ctx_free(k.e);
  return code;
}
