/* Gradients of the array ops: hand-computed values, central differences and second order. */
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

typedef struct ints_arg {
  int n;
  int64_t v[8];
} ints_arg;

static nb_tensor *i64_const(env *v, int rank, const int64_t *shape, const int64_t *vals) {
  nb_tensor *t = nb_tensor_from(v->e, NB_I64, rank, shape, vals);
  assert_non_null(t);
  return t;
}

static nb_tensor *build_reshape(env *v, nb_tensor *x, const void *arg) {
  const ints_arg *a = arg;
  return nb_reshape(v->c, x, a->v, a->n);
}

/* reshape(reshape(x, s), [-1]) with s fed at run time: the inner result has unknown rank */
static nb_tensor *build_reshape_unknown_rank(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  nb_tensor *s = extra_feed(v, nb_placeholder(v->c, NB_I64, 1, TU_SHAPE(-1), "s"),
                            i64_const(v, 1, TU_SHAPE(2), (const int64_t[]){3, 2}));
  nb_tensor *in[2] = {x, s}, *z = NULL;
  assert_int_equal(nb_op(v->c, "Reshape", in, 2, NULL, 0, &z, 1), NB_OK);
  assert_int_equal(nb_rank(z), -1);
  return nb_reshape(v->c, z, TU_SHAPE(-1), 1);
}

static nb_tensor *build_expand_dims(env *v, nb_tensor *x, const void *arg) {
  return nb_expand_dims(v->c, x, (int)((const ints_arg *)arg)->v[0]);
}

static nb_tensor *build_squeeze(env *v, nb_tensor *x, const void *arg) {
  const ints_arg *a = arg;
  int axes[8];
  for (int i = 0; i < a->n; i++) axes[i] = (int)a->v[i];
  return nb_squeeze(v->c, x, axes, a->n);
}

static nb_tensor *build_transpose(env *v, nb_tensor *x, const void *arg) {
  const ints_arg *a = arg;
  int perm[8];
  for (int i = 0; i < a->n; i++) perm[i] = (int)a->v[i];
  return nb_transpose(v->c, x, perm, a->n);
}

/* Transpose through nb_op with an int64 perm */
static nb_tensor *build_transpose_i64(env *v, nb_tensor *x, const void *arg) {
  const ints_arg *a = arg;
  nb_tensor *in[2] = {x, i64_const(v, 1, (const int64_t[]){a->n}, a->v)}, *y = NULL;
  nb_attr t = nb_attr_type("Tperm", NB_I64);
  assert_int_equal(nb_op(v->c, "Transpose", in, 2, &t, 1, &y, 1), NB_OK);
  return y;
}

static nb_tensor *build_broadcast_to(env *v, nb_tensor *x, const void *arg) {
  const ints_arg *a = arg;
  return nb_broadcast_to(v->c, x, a->v, a->n);
}

typedef struct concat_arg {
  int axis;
  int64_t before[2], after[2]; /* shapes of the constant pieces around x (rank 2) */
} concat_arg;

static nb_tensor *const_piece(env *v, const int64_t *shape, double base) {
  double vals[64];
  for (int i = 0; i < shape[0] * shape[1]; i++) vals[i] = base + i;
  return f64_tensor(v, 2, shape, vals);
}

static nb_tensor *build_concat(env *v, nb_tensor *x, const void *arg) {
  const concat_arg *a = arg;
  nb_tensor *parts[3] = {const_piece(v, a->before, 100), x, const_piece(v, a->after, 200)};
  return nb_concat(v->c, parts, 3, a->axis);
}

static nb_tensor *build_pack(env *v, nb_tensor *x, const void *arg) {
  int axis = (int)((const ints_arg *)arg)->v[0];
  nb_tensor *parts[3] = {const_piece(v, nb_shape(x), 10), x, const_piece(v, nb_shape(x), 20)};
  return nb_pack(v->c, parts, 3, axis);
}

/* concat([u2, u0]) of unstack(x, 0) = [u0, u1, u2]: u1 gets no gradient */
static nb_tensor *build_unpack_some(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  nb_tensor *u[3];
  assert_int_equal(nb_unpack(v->c, x, 0, 3, u), NB_OK);
  nb_tensor *parts[2] = {u[2], u[0]};
  return nb_concat(v->c, parts, 2, 0);
}

/* unstack(x, -1)[1] alone */
static nb_tensor *build_unpack_one(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  nb_tensor *u[3];
  assert_int_equal(nb_unpack(v->c, x, -1, 3, u), NB_OK);
  return u[1];
}

static nb_tensor *build_tile(env *v, nb_tensor *x, const void *arg) {
  const ints_arg *a = arg;
  return nb_tile(v->c, x, a->v, a->n);
}

static nb_tensor *build_pad(env *v, nb_tensor *x, const void *arg) {
  const ints_arg *a = arg;
  return nb_pad(v->c, x, a->n ? a->v : NULL, a->n / 2);
}

/* Pad through nb_op with int32 paddings [[0, 1], [2, 0]] */
static nb_tensor *build_pad_i32(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  nb_tensor *p = nb_tensor_from(v->e, NB_I32, 2, TU_SHAPE(2, 2), (const int32_t[]){0, 1, 2, 0}), *y = NULL;
  nb_tensor *in[2] = {x, p};
  assert_int_equal(nb_op(v->c, "Pad", in, 2, NULL, 0, &y, 1), NB_OK);
  return y;
}

static nb_tensor *build_fill(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  return nb_fill(v->c, TU_SHAPE(2, 3), 2, x);
}

/* fill(dims, x) with dims fed at run time: y has unknown rank */
static nb_tensor *build_fill_fed_dims(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  nb_tensor *dims = extra_feed(v, nb_placeholder(v->c, NB_I64, 1, TU_SHAPE(-1), "dims"),
                               i64_const(v, 1, TU_SHAPE(3), (const int64_t[]){2, 1, 2}));
  nb_tensor *in[2] = {dims, x}, *y = NULL;
  assert_int_equal(nb_op(v->c, "Fill", in, 2, NULL, 0, &y, 1), NB_OK);
  assert_int_equal(nb_rank(y), -1);
  return y;
}

/* ---- tests ------------------------------------------------------------------------------- */

#define IOTA6 TU_VALS(1, 2, 3, 4, 5, 6)

static void test_reshape(void **state) {
  (void)state;
  /* dx = dy laid back out in x's shape: W in order */
  const ints_arg to32 = {2, {3, 2}}, flat = {1, {-1}};
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_reshape, &to32, IOTA6});
  /* unknown dims: Shape(x) at run time */
  check_grad(&(gcase){2, TU_SHAPE(-1, 3), TU_SHAPE(2, 3), build_reshape, &flat, IOTA6});
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_reshape_unknown_rank, NULL, IOTA6});
  /* rank 0 to [1, 1] */
  const ints_arg ones = {2, {1, 1}};
  check_grad(&(gcase){0, NULL, NULL, build_reshape, &ones, TU_VALS(1)});
}

static void test_expand_dims_squeeze(void **state) {
  (void)state;
  const ints_arg last = {1, {-1}}, first = {1, {0}}, all = {0, {0}}, one = {1, {1}};
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_expand_dims, &last, IOTA6});
  check_grad(&(gcase){0, NULL, NULL, build_expand_dims, &first, TU_VALS(1)});
  check_grad(&(gcase){3, TU_SHAPE(2, 1, 3), TU_SHAPE(2, 1, 3), build_squeeze, &all, IOTA6});
  check_grad(&(gcase){3, TU_SHAPE(-1, 1, 3), TU_SHAPE(2, 1, 3), build_squeeze, &one, IOTA6});
}

static void test_transpose(void **state) {
  (void)state;
  /* y = x^T: dx[i][j] = W[j][i] */
  const ints_arg swap = {2, {1, 0}};
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_transpose, &swap, TU_VALS(1, 3, 5, 2, 4, 6)});
  check_grad(&(gcase){2, TU_SHAPE(-1, 3), TU_SHAPE(2, 3), build_transpose_i64, &swap, TU_VALS(1, 3, 5, 2, 4, 6)});
  /* perm [2, 0, 1]: y[a][b][c] = x[b][c][a], so dx[b][c][a] = W[a][b][c] = 6a + 3b + c + 1 */
  double want[24];
  for (int b = 0; b < 2; b++)
    for (int c = 0; c < 3; c++)
      for (int a = 0; a < 4; a++) want[b * 12 + c * 4 + a] = 6 * a + 3 * b + c + 1;
  const ints_arg cyc = {3, {2, 0, 1}};
  check_grad(&(gcase){3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_transpose, &cyc, want});
  check_grad(&(gcase){3, TU_SHAPE(2, 3, 4), TU_SHAPE(2, 3, 4), build_transpose_i64, &cyc, want});
  const ints_arg none = {0, {0}};
  check_grad(&(gcase){0, NULL, NULL, build_transpose, &none, TU_VALS(1)});
}

static void test_broadcast_to(void **state) {
  (void)state;
  /* [3, 1] -> [2, 3, 4]: dx[i] = sum over a, c of W[a][i][c] = 12a + 4i + c + 1 */
  double want[3];
  for (int i = 0; i < 3; i++) {
    want[i] = 0;
    for (int a = 0; a < 2; a++)
      for (int c = 0; c < 4; c++) want[i] += 12 * a + 4 * i + c + 1;
  }
  const ints_arg to = {3, {2, 3, 4}}, sq = {2, {2, 2}};
  check_grad(&(gcase){2, TU_SHAPE(3, 1), TU_SHAPE(3, 1), build_broadcast_to, &to, want});
  check_grad(&(gcase){2, TU_SHAPE(-1, 1), TU_SHAPE(3, 1), build_broadcast_to, &to, want});
  check_grad(&(gcase){0, NULL, NULL, build_broadcast_to, &sq, TU_VALS(10)});
}

static void test_concat(void **state) {
  (void)state;
  /* [A(2x1), x(2x3), B(2x2)] along 1: dx[i][j] = W[i][1 + j] = 6i + j + 2 */
  const concat_arg mid = {1, {2, 1}, {2, 2}}, mid_neg = {-1, {2, 1}, {2, 2}};
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_concat, &mid, TU_VALS(2, 3, 4, 8, 9, 10)});
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_concat, &mid_neg, TU_VALS(2, 3, 4, 8, 9, 10)});
  /* [A(1x3), x(2x3), empty(0x3)] along 0: x is rows 1..2 of y */
  const concat_arg rows = {0, {1, 3}, {0, 3}}, rows_neg = {-2, {1, 3}, {0, 3}};
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_concat, &rows, TU_VALS(4, 5, 6, 7, 8, 9)});
  check_grad(&(gcase){2, TU_SHAPE(-1, 3), TU_SHAPE(2, 3), build_concat, &rows_neg, TU_VALS(4, 5, 6, 7, 8, 9)});
  check_grad(&(gcase){2, TU_SHAPE(-1, -1), TU_SHAPE(2, 3), build_concat, &mid, TU_VALS(2, 3, 4, 8, 9, 10)});
}

static void test_pack_unpack(void **state) {
  (void)state;
  /* stack([A, x, B], 1) of [2, 3]: y[i][k][j], dx[i][j] = W[i][1][j] = 9i + j + 4 */
  const ints_arg one = {1, {1}}, last = {1, {-1}};
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_pack, &one, TU_VALS(4, 5, 6, 13, 14, 15)});
  /* stack([A, x, B], -1): dx[i][j] = W[i][j][1] = 3(3i + j) + 2 */
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_pack, &last, TU_VALS(2, 5, 8, 11, 14, 17)});
  /* concat([u2, u0]) with W = 1..4: dx = [[3, 4], [0, 0], [1, 2]] (u1: zeros) */
  check_grad(&(gcase){2, TU_SHAPE(3, 2), TU_SHAPE(3, 2), build_unpack_some, NULL, TU_VALS(3, 4, 0, 0, 1, 2)});
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_unpack_one, NULL, TU_VALS(0, 1, 0, 0, 2, 0)});
}

static void test_tile(void **state) {
  (void)state;
  /* [2, 3] tiled [2, 1]: dx[i][j] = W[i][j] + W[i + 2][j] */
  const ints_arg rows = {2, {2, 1}};
  const double want_rows[6] = {8, 10, 12, 14, 16, 18};
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_tile, &rows, want_rows});
  check_grad(&(gcase){2, TU_SHAPE(-1, 3), TU_SHAPE(2, 3), build_tile, &rows, want_rows});
  /* [2, 1, 3] tiled [2, 3, 2] -> [4, 3, 6]: dx[i][0][k] sums W[i + 2a][b][k + 3c] */
  double want[6];
  for (int i = 0; i < 2; i++)
    for (int k = 0; k < 3; k++) {
      want[i * 3 + k] = 0;
      for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++)
          for (int c = 0; c < 2; c++) want[i * 3 + k] += (i + 2 * a) * 18 + b * 6 + k + 3 * c + 1;
    }
  const ints_arg three = {3, {2, 3, 2}};
  check_grad(&(gcase){3, TU_SHAPE(2, 1, 3), TU_SHAPE(2, 1, 3), build_tile, &three, want});
  check_grad(&(gcase){3, TU_SHAPE(-1, 1, -1), TU_SHAPE(2, 1, 3), build_tile, &three, want});
  /* an empty x, and multiples of 0 (dx = 0) */
  check_grad(&(gcase){2, TU_SHAPE(0, 3), TU_SHAPE(0, 3), build_tile, &rows, NULL});
  const ints_arg zero = {2, {0, 1}};
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_tile, &zero, TU_VALS(0, 0, 0, 0, 0, 0)});
}

static void test_pad(void **state) {
  (void)state;
  /* [2, 3] padded [[1, 0], [2, 1]] -> [3, 6]: dx[i][j] = W[i + 1][j + 2] = 6(i + 1) + j + 3 */
  const ints_arg p = {4, {1, 0, 2, 1}}, none = {0, {0}};
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_pad, &p, TU_VALS(9, 10, 11, 15, 16, 17)});
  check_grad(&(gcase){2, TU_SHAPE(-1, -1), TU_SHAPE(2, 3), build_pad, &p, TU_VALS(9, 10, 11, 15, 16, 17)});
  check_grad(&(gcase){0, NULL, NULL, build_pad, &none, TU_VALS(1)});
  /* int32 paddings [[0, 1], [2, 0]] -> [3, 5]: dx[i][j] = W[i][j + 2] = 5i + j + 3 */
  check_grad(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_pad_i32, NULL, TU_VALS(3, 4, 5, 8, 9, 10)});
}

static void test_fill(void **state) {
  (void)state;
  /* every element of y is x: dx = sum(W) = 21 */
  check_grad(&(gcase){0, NULL, NULL, build_fill, NULL, TU_VALS(21)});
  check_grad(&(gcase){0, NULL, NULL, build_fill_fed_dims, NULL, TU_VALS(10)});
}

/* Shape, ZerosLike and OnesLike cut the path silently: dx is NULL with NB_OK. */
static void test_no_gradient_ops(void **state) {
  (void)state;
  const char *none[] = {"Shape", "ZerosLike", "OnesLike", "BroadcastGradientArgs", "Const", "Placeholder"};
  for (size_t i = 0; i < sizeof none / sizeof *none; i++) assert_false(nb_has_gradient(none[i]));
  const char *some[] = {"Reshape", "ExpandDims", "Squeeze", "Transpose", "BroadcastTo", "ConcatV2",
                        "Pack",    "Unpack",     "Tile",    "Pad",       "Fill"};
  for (size_t i = 0; i < sizeof some / sizeof *some; i++) assert_true(nb_has_gradient(some[i]));
  env v;
  env_open(&v);
  nb_tensor *x = nb_placeholder(v.c, NB_F64, 2, TU_SHAPE(2, 3), "x");
  nb_tensor *z = nb_placeholder(v.c, NB_F64, 1, TU_SHAPE(6), "z");
  nb_tensor *ys[3] = {nb_zeros_like(v.c, x), nb_ones_like(v.c, x), NULL};
  nb_tensor *in[2] = {z, nb_shape_op(v.c, x, NB_I32)};
  assert_int_equal(nb_op(v.c, "Reshape", in, 2, NULL, 0, &ys[2], 1), NB_OK);
  nb_tensor *dx = x;
  assert_int_equal(nb_gradients(v.c, ys, 3, &x, 1, NULL, &dx), NB_OK);
  assert_null(dx);
  env_close(&v);
}

/* ---- what is not supported --------------------------------------------------------------- */

/* x reshaped to a fed shape (unknown rank), then the op with a fed int vector of unknown
   length: no static rank is left to build the index constants from. */
static nb_tensor *unknown_rank(env *v, nb_tensor *x) {
  nb_tensor *s = nb_placeholder(v->c, NB_I64, 1, TU_SHAPE(-1), "s"), *in[2] = {x, s}, *z = NULL;
  assert_int_equal(nb_op(v->c, "Reshape", in, 2, NULL, 0, &z, 1), NB_OK);
  return z;
}

static nb_tensor *build_transpose_unknown(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  nb_tensor *in[2] = {unknown_rank(v, x), nb_placeholder(v->c, NB_I32, 1, TU_SHAPE(-1), "perm")}, *y = NULL;
  assert_int_equal(nb_op(v->c, "Transpose", in, 2, NULL, 0, &y, 1), NB_OK);
  return y;
}

static nb_tensor *build_tile_unknown(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  nb_tensor *in[2] = {unknown_rank(v, x), nb_placeholder(v->c, NB_I32, 1, TU_SHAPE(-1), "m")}, *y = NULL;
  assert_int_equal(nb_op(v->c, "Tile", in, 2, NULL, 0, &y, 1), NB_OK);
  return y;
}

static nb_tensor *build_concat_unknown(env *v, nb_tensor *x, const void *arg) {
  (void)arg;
  nb_tensor *z = unknown_rank(v, x), *parts[2] = {z, z};
  return nb_concat(v->c, parts, 2, 0);
}

static void test_unknown_rank_unimplemented(void **state) {
  (void)state;
  check_grad_fails(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_transpose_unknown, NULL, NULL},
                   NB_UNIMPLEMENTED, "Transpose gradient: the permutation's length must be known");
  check_grad_fails(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_tile_unknown, NULL, NULL}, NB_UNIMPLEMENTED,
                   "Tile gradient: with unknown shapes the rank must be known");
  check_grad_fails(&(gcase){2, TU_SHAPE(2, 3), TU_SHAPE(2, 3), build_concat_unknown, NULL, NULL},
                   NB_UNIMPLEMENTED, "ConcatV2 gradient: the inputs' rank must be known");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reshape),
      cmocka_unit_test(test_expand_dims_squeeze),
      cmocka_unit_test(test_transpose),
      cmocka_unit_test(test_broadcast_to),
      cmocka_unit_test(test_concat),
      cmocka_unit_test(test_pack_unpack),
      cmocka_unit_test(test_tile),
      cmocka_unit_test(test_pad),
      cmocka_unit_test(test_fill),
      cmocka_unit_test(test_no_gradient_ops),
      cmocka_unit_test(test_unknown_rank_unimplemented),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
