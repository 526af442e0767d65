/* Gradients of the slicing ops: hand-computed values, central differences and second order. */
#include "testutil.h"

#include <stdlib.h>

/* ---- the gradient check harness --------------------------------------------------------
   A case builds y from a float64 placeholder x (its shape may have unknown dims) and
   optional extra fed inputs. The check takes dx = d<y, W>/dx with grad_ys = W (W = 1, 2,
   3, ... so hand values are easy), compares it with the expected values and with central
   differences, then differentiates <dx, V> with respect to W (the ops of the gradient
   function, differentiated again) and compares that with central differences of the
   first gradient. All ops here are linear in x, so the second derivative in x is zero;
   the second-order check goes through W. */

#define H 1e-6
#define MAX_FEEDS 8

typedef struct env {
  nb_graph *g;
  nb_ctx *c, *e;
  nb_session *s;
  nb_tensor *feed[MAX_FEEDS], *val[MAX_FEEDS];
  int nfeed;
} env;

typedef nb_tensor *(*build_fn)(env *v, nb_tensor *x, const void *arg);

typedef struct gcase {
  int rank;
  const int64_t *placeholder; /* x's static shape, -1 for unknown dims */
  const int64_t *shape;       /* the fed shape */
  build_fn build;
  const void *arg;
  const double *want; /* dx for W = 1, 2, 3, ...; NULL: differences only */
} gcase;

static void env_open(env *v) {
  memset(v, 0, sizeof *v);
  v->g = nb_graph_new();
  v->c = nb_graph_ctx_new(v->g);
  v->e = nb_eager_new();
  assert_non_null(v->c);
  assert_non_null(v->e);
}

static void env_close(env *v) {
  nb_session_free(v->s);
  nb_ctx_free(v->c);
  nb_ctx_free(v->e);
  nb_graph_free(v->g);
}

/* An extra fed input of the case (an index placeholder and its value). */
static nb_tensor *extra_feed(env *v, nb_tensor *placeholder, nb_tensor *value) {
  assert_true(v->nfeed < MAX_FEEDS - 3);
  v->feed[v->nfeed] = placeholder;
  v->val[v->nfeed++] = value;
  return placeholder;
}

static nb_tensor *f64_tensor(env *v, int rank, const int64_t *shape, const double *vals) {
  nb_tensor *t = nb_tensor_from(v->e, NB_F64, rank, shape, vals);
  assert_non_null(t);
  return t;
}

/* Runs fetch with the extra feeds plus up to three (placeholder, value) pairs. */
static nb_tensor *run_with(env *v, nb_tensor *fetch, nb_tensor *const *ph, nb_tensor *const *vals, int n) {
  nb_tensor *feed[MAX_FEEDS], *val[MAX_FEEDS], *out = NULL;
  int m = 0;
  for (int i = 0; i < n; i++, m++) {
    feed[m] = ph[i];
    val[m] = vals[i];
  }
  for (int i = 0; i < v->nfeed; i++, m++) {
    feed[m] = v->feed[i];
    val[m] = v->val[i];
  }
  if (!v->s) v->s = nb_session_new(v->g);
  if (nb_run(v->s, feed, val, m, &fetch, 1, &out)) fail_msg("nb_run: %s", nb_session_error(v->s));
  return out;
}

static double dot(const nb_tensor *a, const double *b) {
  double s = 0;
  for (int64_t i = 0; i < nb_num_elements(a); i++) s += nb_item(a, i) * b[i];
  return s;
}

static double *filled(int64_t n, double (*f)(int64_t)) {
  double *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
  assert_non_null(p);
  for (int64_t i = 0; i < n; i++) p[i] = f(i);
  return p;
}
static double x_value(int64_t i) { return sin(0.7 * (double)i + 0.3); }
static double w_value(int64_t i) { return (double)(i + 1); }
static double v_value(int64_t i) { return cos(0.3 * (double)i) - 0.25; }

/* d<y, W>/dx by central differences against dx. */
static void check_first_order(env *v, nb_tensor *x, nb_tensor *y, nb_tensor *wv, const nb_tensor *dx, const gcase *k,
                              double *xs, int64_t n) {
  const double *wd = nb_data(wv);
  for (int64_t j = 0; j < n; j++) {
    double saved = xs[j], f[2];
    for (int side = 0; side < 2; side++) {
      xs[j] = saved + (side ? -H : H);
      nb_tensor *xt = f64_tensor(v, k->rank, k->shape, xs);
      nb_tensor *yt = run_with(v, y, &x, &xt, 1);
      f[side] = dot(yt, wd);
      nb_tensor_free(yt);
      nb_tensor_free(xt);
    }
    xs[j] = saved;
    double fd = (f[0] - f[1]) / (2 * H);
    if (fabs(fd - nb_item(dx, j)) > 1e-6 * (1 + fabs(fd)))
      fail_msg("dx[%lld] = %.9g, central difference %.9g", (long long)j, nb_item(dx, j), fd);
  }
}

/* d<dx, V>/dW, symbolic (the gradient of the gradient) against central differences. */
static void check_second_order(env *v, nb_tensor *x, nb_tensor *xt, nb_tensor *w, const nb_tensor *wv,
                               nb_tensor *dx, const gcase *k) {
  int64_t n = nb_num_elements(xt), nw = nb_num_elements(wv);
  nb_tensor *vp = nb_placeholder(v->c, NB_F64, k->rank, k->shape, "v"), *d2 = NULL;
  nb_grad_opts o = {.grad_ys = &vp, .unconnected_zero = 1}; /* dx may not depend on W (empty x) */
  if (nb_gradients(v->c, &dx, 1, &w, 1, &o, &d2)) fail_msg("second order: %s", nb_error(v->c));
  assert_non_null(d2);
  double *vs = filled(n, v_value), *ws = malloc((size_t)(nw > 0 ? nw : 1) * sizeof *ws);
  assert_non_null(ws);
  nb_read(wv, ws, (size_t)nw * sizeof *ws);
  nb_tensor *vt = f64_tensor(v, k->rank, k->shape, vs);
  nb_tensor *ph[3] = {x, w, vp}, *vals[3] = {xt, (nb_tensor *)wv, vt};
  nb_tensor *got = run_with(v, d2, ph, vals, 3);
  tu_check_shape(got, NB_F64, nb_rank(wv), nb_shape(wv));
  for (int64_t j = 0; j < nw; j++) {
    double saved = ws[j], f[2];
    for (int side = 0; side < 2; side++) {
      ws[j] = saved + (side ? -H : H);
      nb_tensor *wt = f64_tensor(v, nb_rank(wv), nb_shape(wv), ws);
      vals[1] = wt;
      nb_tensor *dxt = run_with(v, dx, ph, vals, 2);
      f[side] = dot(dxt, vs);
      nb_tensor_free(dxt);
      nb_tensor_free(wt);
    }
    ws[j] = saved;
    double fd = (f[0] - f[1]) / (2 * H);
    if (fabs(fd - nb_item(got, j)) > 1e-6 * (1 + fabs(fd)))
      fail_msg("d2[%lld] = %.9g, central difference %.9g", (long long)j, nb_item(got, j), fd);
  }
  nb_tensor_free(got);
  free(vs);
  free(ws);
}

static void check_grad(const gcase *k) {
  env v;
  env_open(&v);
  nb_tensor *x = nb_placeholder(v.c, NB_F64, k->rank, k->placeholder, "x");
  nb_tensor *y = k->build(&v, x, k->arg);
  if (nb_status(v.c)) fail_msg("building y: %s", nb_error(v.c));
  int64_t n = 1;
  for (int i = 0; i < k->rank; i++) n *= k->shape[i];
  double *xs = filled(n, x_value);
  nb_tensor *xt = f64_tensor(&v, k->rank, k->shape, xs);
  nb_tensor *y0 = run_with(&v, y, &x, &xt, 1);
  double *wd = filled(nb_num_elements(y0), w_value);
  nb_tensor *wv = f64_tensor(&v, nb_rank(y0), nb_shape(y0), wd);
  free(wd);
  nb_tensor *w = nb_placeholder(v.c, NB_F64, nb_rank(y0), nb_shape(y0), "w"), *dx = NULL;
  nb_tensor_free(y0);
  nb_grad_opts o = {.grad_ys = &w};
  if (nb_gradients(v.c, &y, 1, &x, 1, &o, &dx)) fail_msg("nb_gradients: %s", nb_error(v.c));
  assert_non_null(dx);
  nb_tensor *ph[2] = {x, w}, *vals[2] = {xt, wv};
  nb_tensor *got = run_with(&v, dx, ph, vals, 2);
  tu_check_shape(got, NB_F64, k->rank, k->shape);
  if (k->want) tu_check_vals(got, k->want, 1e-12);
  check_first_order(&v, x, y, wv, got, k, xs, n);
  nb_tensor_free(got);
  check_second_order(&v, x, xt, w, wv, dx, k);
  free(xs);
  env_close(&v);
}

/* nb_gradients fails for the case with code, the message naming op_type. */
static void check_grad_fails(const gcase *k, nb_code code, const char *op_type) {
  env v;
  env_open(&v);
  nb_tensor *x = nb_placeholder(v.c, NB_F64, k->rank, k->placeholder, "x");
  nb_tensor *y = k->build(&v, x, k->arg), *dx = x;
  assert_int_equal(nb_status(v.c), NB_OK);
  assert_int_equal(nb_gradients(v.c, &y, 1, &x, 1, NULL, &dx), code);
  assert_null(dx);
  tu_check_error(v.c, code, op_type, NULL);
  env_close(&v);
}

/* ---- builders ---------------------------------------------------------------------------- */

static nb_tensor *i64_const(env *v, int rank, const int64_t *shape, const int64_t *vals) {
  nb_tensor *t = nb_tensor_from(v->e, NB_I64, rank, shape, vals);
  assert_non_null(t);
  return t;
}

static nb_tensor *one_output(env *v, const char *type, nb_tensor *const *in, int nin, const nb_attr *a, int na) {
  nb_tensor *y = NULL;
  if (nb_op(v->c, type, in, nin, a, na, &y, 1)) fail_msg("%s", nb_error(v->c));
  return y;
}

typedef struct slice_arg {
  int n;
  int64_t begin[4], end[4], strides[4];
  nb_slice_masks masks;
} slice_arg;

static nb_tensor *build_slice(env *v, nb_tensor *x, const void *arg) {
  const slice_arg *a = arg;
  return nb_slice(v->c, x, a->begin, a->end, a->n); /* end holds the sizes */
}

/* Slice through nb_op with int32 begin [0, 2] and size [-1, 1] */
static nb_tensor *build_slice_i32(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  nb_tensor *in[3] = {x, nb_tensor_from(v->e, NB_I32, 1, TU_SHAPE(2), (const int32_t[]){0, 2}),
                      nb_tensor_from(v->e, NB_I32, 1, TU_SHAPE(2), (const int32_t[]){-1, 1})};
  return one_output(v, "Slice", in, 3, NULL, 0);
}

static nb_tensor *build_strided(env *v, nb_tensor *x, const void *arg) {
  const slice_arg *a = arg;
  return nb_strided_slice(v->c, x, a->begin, a->end, a->strides, a->n, &a->masks);
}

/* x[b0:3, b1:2] with begin fed at run time */
static nb_tensor *build_strided_fed_begin(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  nb_tensor *b = extra_feed(v, nb_placeholder(v->c, NB_I64, 1, TU_SHAPE(2), "begin"),
                            i64_const(v, 1, TU_SHAPE(2), (const int64_t[]){1, 0}));
  nb_tensor *in[4] = {x, b, i64_const(v, 1, TU_SHAPE(2), (const int64_t[]){3, 2}),
                      i64_const(v, 1, TU_SHAPE(2), (const int64_t[]){1, 1})};
  nb_tensor *y = one_output(v, "StridedSlice", in, 4, NULL, 0);
  assert_int_equal(nb_rank(y), -1);
  return y;
}

typedef struct gather_arg {
  int axis, batch_dims;
  nb_dtype t;
  int rank;
  int64_t shape[3], vals[8];
} gather_arg;

static nb_tensor *gather_indices(env *v, const gather_arg *a) {
  int64_t n = 1;
  for (int i = 0; i < a->rank; i++) n *= a->shape[i];
  double d[8];
  for (int64_t i = 0; i < n; i++) d[i] = (double)a->vals[i];
  return tu_make(v->e, a->t, a->rank, a->shape, d);
}

static nb_tensor *build_gather(env *v, nb_tensor *x, const void *arg) {
  const gather_arg *a = arg;
  return nb_gather(v->c, x, gather_indices(v, a), a->axis, a->batch_dims);
}

/* GatherV2 with the axis fed at run time (so y's shape is unknown at build time) */
static nb_tensor *build_gather_fed_axis(env *v, nb_tensor *x, const void *arg) {
  const gather_arg *a = arg;
  nb_tensor *axis = extra_feed(v, nb_placeholder(v->c, NB_I32, 0, NULL, "axis"),
                               nb_tensor_from(v->e, NB_I32, 0, NULL, &(int32_t){a->axis}));
  nb_tensor *in[3] = {x, gather_indices(v, a), axis};
  nb_tensor *y = one_output(v, "GatherV2", in, 3, NULL, 0);
  assert_int_equal(nb_rank(y), -1);
  return y;
}

typedef struct segment_arg {
  nb_dtype t;
  int rank;
  int64_t shape[2], ids[8], num;
  bool fed; /* ids fed at run time through a placeholder of unknown length */
} segment_arg;

static nb_tensor *build_segment_sum(env *v, nb_tensor *x, const void *arg) {
  const segment_arg *a = arg;
  int64_t n = 1;
  for (int i = 0; i < a->rank; i++) n *= a->shape[i];
  double d[8];
  for (int64_t i = 0; i < n; i++) d[i] = (double)a->ids[i];
  nb_tensor *ids = tu_make(v->e, a->t, a->rank, a->shape, d);
  if (a->fed) ids = extra_feed(v, nb_placeholder(v->c, a->t, 1, TU_SHAPE(-1), "ids"), ids);
  return nb_unsorted_segment_sum(v->c, x, ids, a->num);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_slice(void **state) {
  (void)state;
  /* x[1:3, 1:] of [3, 4]: dy = W (1..6) padded back into place */
  const slice_arg s = {2, {1, 1}, {2, -1}, {0}, {0}};
  const double want[12] = {0, 0, 0, 0, 0, 1, 2, 3, 0, 4, 5, 6};
  check_grad(&(gcase){2, TU_SHAPE(3, 4), TU_SHAPE(3, 4), build_slice, &s, want});
  check_grad(&(gcase){2, TU_SHAPE(-1, 4), TU_SHAPE(3, 4), build_slice, &s, want});
  /* int32 begin/size: column 2 of [2, 3] */
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_slice_i32, NULL, TU_VALS(0, 0, 1, 0, 0, 2)});
  const slice_arg scalar = {0, {0}, {0}, {0}, {0}}, empty = {1, {1}, {0}, {0}, {0}};
  check_grad(&(gcase){0, NULL, NULL, build_slice, &scalar, TU_VALS(1)});
  check_grad(&(gcase){1, TU_SHAPE(3), TU_SHAPE(3), build_slice, &empty, TU_VALS(0, 0, 0)});
}

static void test_strided_slice(void **state) {
  (void)state;
  /* x[1::2, -1:0:-2] of [4, 5]: y[a][b] = x[1 + 2a][4 - 2b] */
  const slice_arg steps = {2, {1, -1}, {4, 0}, {2, -2}, {0}};
  const double want[20] = {0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 4, 0, 3};
  check_grad(&(gcase){2, TU_SHAPE(4, 5), TU_SHAPE(4, 5), build_strided, &steps, want});
  /* x[1] (shrink_axis) of [3, 4] */
  const slice_arg row = {1, {1}, {2}, {1}, {.shrink_axis_mask = 1}};
  const double want_row[12] = {0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0};
  check_grad(&(gcase){2, TU_SHAPE(3, 4), TU_SHAPE(3, 4), build_strided, &row, want_row});
  /* x[..., newaxis, 1:3] of [2, 3, 4] -> [2, 3, 1, 2] */
  const slice_arg ell = {3, {0, 0, 1}, {0, 0, 3}, {1, 1, 1}, {.ellipsis_mask = 1, .new_axis_mask = 2}};
  double want_ell[24] = {0};
  for (int ij = 0; ij < 6; ij++)
    for (int k = 1; k < 3; k++) want_ell[ij * 4 + k] = ij * 2 + k;
  check_grad(&(gcase){3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_strided, &ell, want_ell});
  /* x[::-1] (begin and end masks) */
  const slice_arg rev = {1, {0}, {0}, {-1}, {.begin_mask = 1, .end_mask = 1}};
  check_grad(&(gcase){1, TU_SHAPE(3), TU_SHAPE(3), build_strided, &rev, TU_VALS(3, 2, 1)});
  /* an empty selection, and a scalar x */
  const slice_arg none = {1, {2}, {1}, {1}, {0}}, all = {0, {0}, {0}, {0}, {0}};
  check_grad(&(gcase){1, TU_SHAPE(3), TU_SHAPE(3), build_strided, &none, TU_VALS(0, 0, 0)});
  check_grad(&(gcase){0, NULL, NULL, build_strided, &all, TU_VALS(1)});
  /* begin fed at run time: x[1:3, 0:2] of [3, 3] */
  check_grad(&(gcase){2, TU_SHAPE(3, 3), TU_SHAPE(3, 3), build_strided_fed_begin, NULL,
                      TU_VALS(0, 0, 0, 1, 2, 0, 3, 4, 0)});
}

static void test_gather_axis0(void **state) {
  (void)state;
  /* rows 0, 3, 3, 1 of [4, 2] take W's rows 1..4 (row 3 twice: summed) */
  const gather_arg a = {0, 0, NB_I32, 2, {2, 2}, {0, 3, 3, 1}};
  const double want[8] = {1, 2, 7, 8, 0, 0, 8, 10};
  check_grad(&(gcase){2, TU_SHAPE(4, 2), TU_SHAPE(4, 2), build_gather, &a, want});
  check_grad(&(gcase){2, TU_SHAPE(-1, 2), TU_SHAPE(4, 2), build_gather, &a, want});
  check_grad(&(gcase){2, TU_SHAPE(4, 2), TU_SHAPE(4, 2), build_gather_fed_axis, &a, want});
  /* a scalar index: y = x[1] */
  const gather_arg one = {0, 0, NB_I64, 0, {0}, {1}};
  check_grad(&(gcase){2, TU_SHAPE(3, 2), TU_SHAPE(3, 2), build_gather, &one, TU_VALS(0, 0, 1, 2, 0, 0)});
  /* empty indices: dx = 0 */
  const gather_arg none = {0, 0, NB_I32, 1, {0}, {0}};
  check_grad(&(gcase){2, TU_SHAPE(3, 2), TU_SHAPE(3, 2), build_gather, &none, TU_VALS(0, 0, 0, 0, 0, 0)});
}

/* dx for params [2, 3, 4] gathered along axis 1 at idx (n of them): sums of W[i][j][l]. */
static void gather_axis1_want(const int64_t *idx, int n, double *want) {
  memset(want, 0, 24 * sizeof *want);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < n; j++)
      for (int l = 0; l < 4; l++) want[i * 12 + idx[j] * 4 + l] += (i * n + j) * 4 + l + 1;
}

static void test_gather_other_axes(void **state) {
  (void)state;
  double want[24];
  /* axis 1 of [2, 3, 4], the only axis the shapes allow */
  const gather_arg a1 = {1, 0, NB_I32, 1, {3}, {2, 0, 2}};
  gather_axis1_want(a1.vals, 3, want);
  check_grad(&(gcase){3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_gather, &a1, want});
  check_grad(&(gcase){3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_gather_fed_axis, &a1, want});
  const gather_arg a1neg = {-2, 0, NB_I64, 1, {2}, {1, 1}};
  gather_axis1_want(a1neg.vals, 2, want);
  check_grad(&(gcase){3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_gather, &a1neg, want});
  check_grad(&(gcase){3, TU_SHAPE(2, -1, 4), TU_SHAPE(2, 3, 4), build_gather, &a1neg, want});
  /* axis -1 of [2, 3]: dx[i][k] sums W[i][j] over idx[j] == k */
  const gather_arg last = {-1, 0, NB_I64, 2, {2, 1}, {2, 2}};
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_gather, &last, TU_VALS(0, 0, 3, 0, 0, 7)});
}

/* Square params: axis 0 and 1 give the same shapes, so the axis is computed with ops. */
static void test_gather_ambiguous_axis(void **state) {
  (void)state;
  const gather_arg cols = {1, 0, NB_I32, 1, {3}, {2, 0, 2}}, rows = {0, 0, NB_I32, 1, {3}, {2, 0, 2}};
  /* y[i][j] = x[i][idx[j]]: dx[i][0] = W[i][1], dx[i][2] = W[i][0] + W[i][2] */
  check_grad(&(gcase){2, TU_SHAPE(3, 3), TU_SHAPE(3, 3), build_gather, &cols, TU_VALS(2, 0, 4, 5, 0, 10, 8, 0, 16)});
  /* y[j] = x[idx[j]]: dx[0] = W[1], dx[2] = W[0] + W[2] */
  check_grad(&(gcase){2, TU_SHAPE(3, 3), TU_SHAPE(3, 3), build_gather, &rows, TU_VALS(4, 5, 6, 0, 0, 0, 8, 10, 12)});
}

static void test_segment_sum(void **state) {
  (void)state;
  /* data [4, 2], ids [0, -1, 2, 0]: ddata[i] = W[ids[i]], 0 for the dropped row */
  const segment_arg a = {NB_I32, 1, {4}, {0, -1, 2, 0}, 3, false};
  const double want[8] = {1, 2, 0, 0, 5, 6, 1, 2};
  check_grad(&(gcase){2, TU_SHAPE(4, 2), TU_SHAPE(4, 2), build_segment_sum, &a, want});
  const segment_arg fed = {NB_I64, 1, {4}, {0, -1, 2, 0}, 3, true};
  check_grad(&(gcase){2, TU_SHAPE(-1, 2), TU_SHAPE(4, 2), build_segment_sum, &fed, want});
  /* ids [[1, 0], [-1, 1]] over data [2, 2, 3] */
  const segment_arg two = {NB_I64, 2, {2, 2}, {1, 0, -1, 1}, 2, false};
  check_grad(&(gcase){3, TU_SHAPE(2, 2, 3), TU_SHAPE(2, 2, 3), build_segment_sum, &two,
                      TU_VALS(4, 5, 6, 1, 2, 3, 0, 0, 0, 4, 5, 6)});
  /* ids with data's own shape */
  const segment_arg flat = {NB_I32, 1, {4}, {1, 1, 0, -1}, 2, false};
  check_grad(&(gcase){1, TU_SHAPE(4), TU_SHAPE(4), build_segment_sum, &flat, TU_VALS(2, 2, 1, 0)});
}

static void test_registered(void **state) {
  (void)state;
  const char *ops[] = {"Slice", "StridedSlice", "GatherV2", "UnsortedSegmentSum"};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) assert_true(nb_has_gradient(ops[i]));
}

/* ---- what is not supported --------------------------------------------------------------- */

static void test_unimplemented(void **state) {
  (void)state;
  /* StridedSlice needs x's static shape to number its elements */
  const slice_arg s = {1, {1}, {2}, {1}, {0}};
  check_grad_fails(&(gcase){2, TU_SHAPE(-1, 3), TU_SHAPE(2, 3), build_strided, &s, NULL}, NB_UNIMPLEMENTED,
                   "StridedSlice gradient: the input's shape must be known");
  /* GatherV2 with batch_dims != 0 */
  const gather_arg b = {1, 1, NB_I32, 2, {2, 1}, {0, 1}};
  check_grad_fails(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_gather, &b, NULL}, NB_UNIMPLEMENTED,
                   "GatherV2 gradient: batch_dims != 0 is not supported");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_slice),
      cmocka_unit_test(test_strided_slice),
      cmocka_unit_test(test_gather_axis0),
      cmocka_unit_test(test_gather_other_axes),
      cmocka_unit_test(test_gather_ambiguous_axis),
      cmocka_unit_test(test_segment_sum),
      cmocka_unit_test(test_registered),
      cmocka_unit_test(test_unimplemented),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
