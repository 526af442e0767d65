/* MatMul, _MatMulAdd and BatchMatMulV2: hand-checked products, every transpose combination, batch
   broadcasting, empty and K = 0 products, thread-count independence, the float32 GEMM
   (oneDNN) against float64 (OpenBLAS) and against OpenBLAS's float32, error paths. */
#include "graphutil.h"

#include "../src/ops/blas.h"

#include <omp.h>
#include <stdlib.h>

static const nb_dtype float_types[2] = {NB_F32, NB_F64};

/* a = [[1,2,3],[4,5,6]], b = [[7,8],[9,10],[11,12]]; a @ b = [[58,64],[139,154]]. */
#define A_VALS TU_VALS(1, 2, 3, 4, 5, 6)
#define AT_VALS TU_VALS(1, 4, 2, 5, 3, 6)
#define B_VALS TU_VALS(7, 8, 9, 10, 11, 12)
#define BT_VALS TU_VALS(7, 9, 11, 8, 10, 12)
#define AB_VALS TU_VALS(58, 64, 139, 154)

/* Deterministic values in [-1, 1) (a 64-bit LCG). */
static void fill_random(double *v, int64_t n, uint64_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 6364136223846793005u + 1442695040888963407u;
    v[i] = (double)(seed >> 11) / 4503599627370496.0 - 1.0;
  }
}

/* Element of the last two dims of a [rows, cols] matrix at logical (i, j) after an
   optional transpose. */
static double mat_at(const double *m, int64_t cols, bool t, int64_t i, int64_t j) {
  return t ? m[j * cols + i] : m[i * cols + j];
}

/* Reference BatchMatMulV2 in double: NumPy broadcasting of the batch dims by explicit
   index arithmetic. Writes the output shape to oshape (rank max(xr, yr)), and when out is
   not NULL the products to out and the sums of their terms' magnitudes to abs_out (the S of
   tu_check_sums). */
static void ref_batch_matmul(int xr, const int64_t *xs, const double *xv, int yr, const int64_t *ys, const double *yv,
                             bool ax, bool ay, int64_t *oshape, double *out, double *abs_out) {
  int br = (xr > yr ? xr : yr) - 2;
  int64_t xrows = xs[xr - 2], xcols = xs[xr - 1], yrows = ys[yr - 2], ycols = ys[yr - 1];
  int64_t m = ax ? xcols : xrows, k = ax ? xrows : xcols, n = ay ? yrows : ycols;
  int64_t batch = 1;
  for (int d = 0; d < br; d++) {
    int xd = d - (br - (xr - 2)), yd = d - (br - (yr - 2));
    int64_t a = xd >= 0 ? xs[xd] : 1, b = yd >= 0 ? ys[yd] : 1;
    oshape[d] = a == 1 ? b : a;
    batch *= oshape[d];
  }
  oshape[br] = m;
  oshape[br + 1] = n;
  if (!out) return;
  for (int64_t bi = 0; bi < batch; bi++) {
    int64_t rest = bi, xoff = 0, yoff = 0, xmul = 1, ymul = 1;
    for (int d = br - 1; d >= 0; d--) {
      int64_t idx = rest % oshape[d];
      rest /= oshape[d];
      int xd = d - (br - (xr - 2)), yd = d - (br - (yr - 2));
      if (xd >= 0) {
        xoff += (xs[xd] == 1 ? 0 : idx) * xmul;
        xmul *= xs[xd];
      }
      if (yd >= 0) {
        yoff += (ys[yd] == 1 ? 0 : idx) * ymul;
        ymul *= ys[yd];
      }
    }
    const double *xm = xv + xoff * xrows * xcols, *ym = yv + yoff * yrows * ycols;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0, abs_s = 0;
        for (int64_t p = 0; p < k; p++) {
          double term = mat_at(xm, xcols, ax, i, p) * mat_at(ym, ycols, ay, p, j);
          s += term;
          abs_s += fabs(term);
        }
        out[(bi * m + i) * n + j] = s;
        abs_out[(bi * m + i) * n + j] = abs_s;
      }
  }
}

static int64_t count(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

/* The values of x as doubles (the caller frees them). */
static double *values_of(const nb_tensor *x) {
  double *v = malloc((size_t)(nb_num_elements(x) + 1) * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < nb_num_elements(x); i++) v[i] = nb_item(x, i);
  return v;
}

/* The S of tu_check_sums for each element of acc + op(x) op(y) (acc NULL: op(x) op(y)),
   from the reference (the caller frees it). */
static double *abs_sums_of(const nb_tensor *x, const nb_tensor *y, bool tx, bool ty, const nb_tensor *acc) {
  double *xv = values_of(x), *yv = values_of(y);
  int64_t os[NB_MAX_RANK];
  ref_batch_matmul(nb_rank(x), nb_shape(x), xv, nb_rank(y), nb_shape(y), yv, tx, ty, os, NULL, NULL);
  int64_t n = count(nb_rank(x) > nb_rank(y) ? nb_rank(x) : nb_rank(y), os);
  double *out = malloc((size_t)(n + 1) * sizeof *out), *abs_sums = malloc((size_t)(n + 1) * sizeof *abs_sums);
  assert_non_null(out);
  assert_non_null(abs_sums);
  ref_batch_matmul(nb_rank(x), nb_shape(x), xv, nb_rank(y), nb_shape(y), yv, tx, ty, os, out, abs_sums);
  for (int64_t i = 0; acc && i < n; i++) abs_sums[i] += fabs(nb_item(acc, i));
  free(xv);
  free(yv);
  free(out);
  return abs_sums;
}

/* Random x and y of the given shapes, BatchMatMulV2 (or MatMul when use_matmul) against
   the reference: each element is a dot product of depth k in t's GEMM and in the float64
   loop, so the two agree within tu_check_sums' bound. */
static void check_random(nb_ctx *c, nb_dtype t, bool use_matmul, int xr, const int64_t *xs, int yr, const int64_t *ys,
                         bool ax, bool ay) {
  int64_t nx = count(xr, xs), ny = count(yr, ys);
  double *xv = malloc((size_t)(nx + 1) * sizeof *xv), *yv = malloc((size_t)(ny + 1) * sizeof *yv);
  assert_non_null(xv);
  assert_non_null(yv);
  fill_random(xv, nx, 1);
  fill_random(yv, ny, 2);
  /* inputs rounded to the dtype so the reference multiplies the same numbers */
  nb_tensor *x = tu_make_float(c, t, xr, xs, xv), *y = tu_make_float(c, t, yr, ys, yv);
  for (int64_t i = 0; i < nx; i++) xv[i] = nb_item(x, i);
  for (int64_t i = 0; i < ny; i++) yv[i] = nb_item(y, i);
  int64_t os[NB_MAX_RANK];
  int orank = xr > yr ? xr : yr;
  ref_batch_matmul(xr, xs, xv, yr, ys, yv, ax, ay, os, NULL, NULL);
  double *want = malloc((size_t)(count(orank, os) + 1) * sizeof *want);
  double *abs_sums = malloc((size_t)(count(orank, os) + 1) * sizeof *abs_sums);
  assert_non_null(want);
  assert_non_null(abs_sums);
  ref_batch_matmul(xr, xs, xv, yr, ys, yv, ax, ay, os, want, abs_sums);
  nb_tensor *z = use_matmul ? nb_matmul(c, x, y, ax, ay) : nb_batch_matmul(c, x, y, ax, ay);
  if (!z) fail_msg("%s", nb_error(c));
  tu_check_shape(z, t, orank, os);
  tu_check_sums(z, want, NB_F64, ax ? xs[xr - 2] : xs[xr - 1], abs_sums);
  free(xv);
  free(yv);
  free(want);
  free(abs_sums);
}

/* ---- MatMul ------------------------------------------------------------------------ */

static void test_matmul_transposes(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++) {
    nb_dtype t = float_types[i];
    nb_tensor *a = tu_make(c, t, 2, TU_SHAPE(2, 3), A_VALS);
    nb_tensor *at = tu_make(c, t, 2, TU_SHAPE(3, 2), AT_VALS);
    nb_tensor *b = tu_make(c, t, 2, TU_SHAPE(3, 2), B_VALS);
    nb_tensor *bt = tu_make(c, t, 2, TU_SHAPE(2, 3), BT_VALS);
    tu_check(nb_matmul(c, a, b, false, false), t, 2, TU_SHAPE(2, 2), AB_VALS, 0);
    tu_check(nb_matmul(c, at, b, true, false), t, 2, TU_SHAPE(2, 2), AB_VALS, 0);
    tu_check(nb_matmul(c, a, bt, false, true), t, 2, TU_SHAPE(2, 2), AB_VALS, 0);
    tu_check(nb_matmul(c, at, bt, true, true), t, 2, TU_SHAPE(2, 2), AB_VALS, 0);
    /* b @ a is 3x3: [[39,54,69],[49,68,87],[59,82,105]] */
    tu_check(nb_matmul(c, b, a, false, false), t, 2, TU_SHAPE(3, 3), TU_VALS(39, 54, 69, 49, 68, 87, 59, 82, 105), 0);
    tu_check(nb_matmul(c, bt, at, true, true), t, 2, TU_SHAPE(3, 3), TU_VALS(39, 54, 69, 49, 68, 87, 59, 82, 105), 0);
  }
}

/* acc + op(a) op(b) in every transpose case; acc keeps its values (the caller holds it). */
static void test_matmul_add(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++) {
    nb_dtype t = float_types[i];
    nb_tensor *a = tu_make(c, t, 2, TU_SHAPE(2, 3), A_VALS), *at = tu_make(c, t, 2, TU_SHAPE(3, 2), AT_VALS);
    nb_tensor *b = tu_make(c, t, 2, TU_SHAPE(3, 2), B_VALS), *bt = tu_make(c, t, 2, TU_SHAPE(2, 3), BT_VALS);
    nb_tensor *acc = tu_make(c, t, 2, TU_SHAPE(2, 2), TU_VALS(1, -2, 0.5, 4));
    nb_tensor *as[2] = {a, at}, *bs[2] = {b, bt};
    for (int k = 0; k < 4; k++)
      tu_check(nb_matmul_add(c, as[k & 1], bs[k >> 1], k & 1, k >> 1, acc), t, 2, TU_SHAPE(2, 2),
               TU_VALS(59, 62, 139.5, 158), 0);
    tu_check(acc, t, 2, TU_SHAPE(2, 2), TU_VALS(1, -2, 0.5, 4), 0);
    tu_check(nb_matmul_add(c, a, b, false, false, NULL), t, 2, TU_SHAPE(2, 2), AB_VALS, 0); /* no acc: MatMul */
  }
}

/* In a graph the product adds into acc's own block when acc dies there, and never when
   a later op still reads acc. */
static void test_matmul_add_in_place(void **state) {
  nb_ctx *c = *state;
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  nb_tensor *a = nb_placeholder(gc, NB_F64, 2, TU_SHAPE(2, 3), "a"),
            *b = nb_placeholder(gc, NB_F64, 2, TU_SHAPE(3, 2), "b");
  nb_tensor *p = nb_placeholder(gc, NB_F64, 2, TU_SHAPE(2, 2), "p");
  nb_tensor *dying = nb_add(gc, p, p), *kept = nb_add(gc, p, p);
  nb_tensor *fetch[3] = {nb_matmul_add(gc, a, b, false, false, dying), nb_matmul_add(gc, a, b, false, false, kept),
                         nb_mul(gc, kept, nb_scalar(gc, NB_F64, 3))};
  nb_tensor *feeds[3] = {a, b, p}, *res[3];
  nb_tensor *vals[3] = {tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), A_VALS), tu_make(c, NB_F64, 2, TU_SHAPE(3, 2), B_VALS),
                        tu_make(c, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(1, -2, 0.5, 4))};
  nb_session *s = nb_session_new(g);
  assert_int_equal(nb_run(s, feeds, vals, 3, fetch, 3, res), NB_OK);
  tu_check(res[0], NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(60, 60, 140, 162), 0);
  tu_check(res[1], NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(60, 60, 140, 162), 0);
  tu_check(res[2], NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(6, -12, 3, 24), 0);
  tu_check(vals[2], NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(1, -2, 0.5, 4), 0);
  for (int i = 0; i < 3; i++) nb_tensor_free(res[i]);
  nb_session_free(s);
  nb_ctx_free(gc);
  nb_graph_free(g);
}

/* s + s w with s dying there: s is also a factor, which GEMM must not write over while
   reading it, so the product gets a block of its own. */
static void test_matmul_add_acc_is_factor(void **state) {
  nb_ctx *c = *state;
  enum { N = 64 };
  double pv[N * N], wv[N * N];
  fill_random(pv, N * N, 7);
  fill_random(wv, N * N, 8);
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  nb_tensor *p = nb_placeholder(gc, NB_F64, 2, TU_SHAPE(N, N), "p"),
            *w = nb_placeholder(gc, NB_F64, 2, TU_SHAPE(N, N), "w");
  nb_tensor *sum = nb_mul(gc, p, nb_scalar(gc, NB_F64, 1)), *y = nb_matmul_add(gc, sum, w, false, false, sum);
  nb_tensor *feeds[2] = {p, w},
            *vals[2] = {tu_make_float(c, NB_F64, 2, TU_SHAPE(N, N), pv),
                        tu_make_float(c, NB_F64, 2, TU_SHAPE(N, N), wv)},
            *res = NULL;
  nb_session *s = nb_session_new(g);
  assert_int_equal(nb_run(s, feeds, vals, 2, &y, 1, &res), NB_OK);
  /* one GEMM adding into s against a product then an Add: sums of N + 1 terms in other orders */
  double *want = values_of(nb_add(c, vals[0], nb_matmul(c, vals[0], vals[1], false, false)));
  double *abs_sums = abs_sums_of(vals[0], vals[1], false, false, vals[0]);
  tu_check_shape(res, NB_F64, 2, TU_SHAPE(N, N));
  tu_check_sums(res, want, NB_F64, N + 1, abs_sums);
  free(want);
  free(abs_sums);
  nb_tensor_free(res);
  nb_session_free(s);
  nb_ctx_free(gc);
  nb_graph_free(g);
}

static void test_matmul_size_one_dims(void **state) {
  nb_ctx *c = *state;
  nb_tensor *row = tu_make(c, NB_F64, 2, TU_SHAPE(1, 3), TU_VALS(1, 2, 3));
  nb_tensor *col = tu_make(c, NB_F64, 2, TU_SHAPE(3, 1), TU_VALS(4, 5, 6));
  tu_check(nb_matmul(c, row, col, false, false), NB_F64, 2, TU_SHAPE(1, 1), TU_VALS(32), 0);
  tu_check(nb_matmul(c, col, row, false, false), NB_F64, 2, TU_SHAPE(3, 3), TU_VALS(4, 8, 12, 5, 10, 15, 6, 12, 18), 0);
  tu_check(nb_matmul(c, row, row, false, true), NB_F64, 2, TU_SHAPE(1, 1), TU_VALS(14), 0);
  tu_check(nb_matmul(c, row, row, true, false), NB_F64, 2, TU_SHAPE(3, 3), TU_VALS(1, 2, 3, 2, 4, 6, 3, 6, 9), 0);
}

static void test_matmul_large_random(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++)
    for (int tr = 0; tr < 4; tr++) {
      bool ta = tr & 1, tb = tr & 2;
      const int64_t *xs = ta ? TU_SHAPE(129, 67) : TU_SHAPE(67, 129);
      const int64_t *ys = tb ? TU_SHAPE(45, 129) : TU_SHAPE(129, 45);
      check_random(c, float_types[i], true, 2, xs, 2, ys, ta, tb);
    }
}

/* Products OpenBLAS threads poorly run as one GEMM per thread over blocks of output
   columns (few rows) or rows (x transposed, short inner dim), uneven blocks included:
   every transpose case against the reference, and _MatMulAdd against acc + MatMul. (On
   one core the products are not split, and the same checks hold.) */
static void test_matmul_split_across_threads(void **state) {
  nb_ctx *c = *state;
  tu_set_threads(c, 2);
  for (int i = 0; i < 2; i++)
    for (int tr = 0; tr < 4; tr++) {
      bool ta = tr & 1, tb = tr & 2;
      /* m 32 < 128 (columns split); k 48 <= 64 with x transposed (rows split) */
      int64_t m = ta ? 200 : 32, k = ta ? 48 : 200, n = 300;
      const int64_t xs[2] = {ta ? k : m, ta ? m : k}, ys[2] = {tb ? n : k, tb ? k : n};
      check_random(c, float_types[i], true, 2, xs, 2, ys, ta, tb);
      double *v = malloc((size_t)(m * n) * sizeof *v);
      fill_random(v, m * n, 11);
      nb_tensor *x = nb_stateless_random_uniform(c, xs, 2, (const int64_t[2]){1, tr}, float_types[i]);
      nb_tensor *y = nb_stateless_random_uniform(c, ys, 2, (const int64_t[2]){2, tr}, float_types[i]);
      nb_tensor *acc = tu_make_float(c, float_types[i], 2, (const int64_t[]){m, n}, v);
      nb_tensor *got = nb_matmul_add(c, x, y, ta, tb, acc);
      /* GEMMs adding into acc against a product then an Add: sums of k + 1 terms in other orders */
      double *want = values_of(nb_add(c, acc, nb_matmul(c, x, y, ta, tb))), *abs_sums = abs_sums_of(x, y, ta, tb, acc);
      tu_check_shape(got, float_types[i], 2, (const int64_t[]){m, n});
      tu_check_sums(got, want, float_types[i], k + 1, abs_sums);
      free(v);
      free(want);
      free(abs_sums);
    }
  nb_ctx_set_threads(c, 1);
}

/* Zero-size dims: K == 0 is all zeros (not leftover pool memory), M or N == 0 empty. */
static void test_matmul_empty(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++) {
    nb_dtype t = float_types[i];
    /* leave a freed 2x3 block of nonzero values in the pool first */
    nb_tensor *junk = tu_make(c, t, 2, TU_SHAPE(2, 3), A_VALS);
    nb_tensor *nine = tu_make(c, t, 2, TU_SHAPE(3, 3), TU_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
    nb_tensor_free(nb_matmul(c, junk, nine, false, false));
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 0), NULL), *y = tu_make(c, t, 2, TU_SHAPE(0, 3), NULL);
    tu_check(nb_matmul(c, x, y, false, false), t, 2, TU_SHAPE(2, 3), TU_VALS(0, 0, 0, 0, 0, 0), 0);
    nb_tensor *xt = tu_make(c, t, 2, TU_SHAPE(0, 2), NULL), *yt = tu_make(c, t, 2, TU_SHAPE(3, 0), NULL);
    tu_check(nb_matmul(c, xt, yt, true, true), t, 2, TU_SHAPE(2, 3), TU_VALS(0, 0, 0, 0, 0, 0), 0);
    nb_tensor *m0 = tu_make(c, t, 2, TU_SHAPE(0, 4), NULL), *k4 = tu_make(c, t, 2, TU_SHAPE(4, 5), NULL);
    tu_check_shape(nb_matmul(c, m0, k4, false, false), t, 2, TU_SHAPE(0, 5));
    nb_tensor *n0 = tu_make(c, t, 2, TU_SHAPE(4, 0), NULL), *a = tu_make(c, t, 2, TU_SHAPE(3, 4), NULL);
    tu_check_shape(nb_matmul(c, a, n0, false, false), t, 2, TU_SHAPE(3, 0));
    tu_check(nb_matmul(c, m0, m0, true, false), t, 2, TU_SHAPE(4, 4),
             TU_VALS(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0);
  }
  assert_int_equal(nb_status(c), NB_OK);
}

/* ---- BatchMatMulV2 ------------------------------------------------------------------ */

static void test_batch_matmul_equal_batches(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++) {
    nb_dtype t = float_types[i];
    /* batch 0: a @ b; batch 1: [[1,0,0],[0,1,0]] @ [[1,2],[3,4],[5,6]] = [[1,2],[3,4]] */
    nb_tensor *x = tu_make(c, t, 3, TU_SHAPE(2, 2, 3), TU_VALS(1, 2, 3, 4, 5, 6, 1, 0, 0, 0, 1, 0));
    nb_tensor *y = tu_make(c, t, 3, TU_SHAPE(2, 3, 2), TU_VALS(7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 5, 6));
    const double *want = TU_VALS(58, 64, 139, 154, 1, 2, 3, 4);
    tu_check(nb_batch_matmul(c, x, y, false, false), t, 3, TU_SHAPE(2, 2, 2), want, 0);
    /* the same products from transposed storage */
    nb_tensor *xa = tu_make(c, t, 3, TU_SHAPE(2, 3, 2), TU_VALS(1, 4, 2, 5, 3, 6, 1, 0, 0, 1, 0, 0));
    nb_tensor *ya = tu_make(c, t, 3, TU_SHAPE(2, 2, 3), TU_VALS(7, 9, 11, 8, 10, 12, 1, 3, 5, 2, 4, 6));
    tu_check(nb_batch_matmul(c, xa, y, true, false), t, 3, TU_SHAPE(2, 2, 2), want, 0);
    tu_check(nb_batch_matmul(c, x, ya, false, true), t, 3, TU_SHAPE(2, 2, 2), want, 0);
    tu_check(nb_batch_matmul(c, xa, ya, true, true), t, 3, TU_SHAPE(2, 2, 2), want, 0);
  }
}

static void test_batch_matmul_broadcast_hand(void **state) {
  nb_ctx *c = *state;
  /* x [2,1,1,2]: rows [1,2], [3,4]; y [3,2,1]: columns [1,0], [0,1], [1,1] */
  nb_tensor *x = tu_make(c, NB_F32, 4, TU_SHAPE(2, 1, 1, 2), TU_VALS(1, 2, 3, 4));
  nb_tensor *y = tu_make(c, NB_F32, 3, TU_SHAPE(3, 2, 1), TU_VALS(1, 0, 0, 1, 1, 1));
  tu_check(nb_batch_matmul(c, x, y, false, false), NB_F32, 4, TU_SHAPE(2, 3, 1, 1), TU_VALS(1, 2, 3, 3, 4, 7), 0);
  /* one y for a batch of x (a single stacked GEMM), then the same with adj_x */
  nb_tensor *xs = tu_make(c, NB_F64, 3, TU_SHAPE(2, 2, 2), TU_VALS(1, 2, 3, 4, 5, 6, 7, 8));
  nb_tensor *w = tu_make(c, NB_F64, 3, TU_SHAPE(1, 2, 1), TU_VALS(1, 10));
  tu_check(nb_batch_matmul(c, xs, w, false, false), NB_F64, 3, TU_SHAPE(2, 2, 1), TU_VALS(21, 43, 65, 87), 0);
  tu_check(nb_batch_matmul(c, xs, w, true, false), NB_F64, 3, TU_SHAPE(2, 2, 1), TU_VALS(31, 42, 75, 86), 0);
  /* one x for a batch of y */
  nb_tensor *row = tu_make(c, NB_F64, 2, TU_SHAPE(1, 2), TU_VALS(1, 10));
  tu_check(nb_batch_matmul(c, row, xs, false, false), NB_F64, 3, TU_SHAPE(2, 1, 2), TU_VALS(31, 42, 75, 86), 0);
}

static void test_batch_matmul_broadcast_random(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++) {
    nb_dtype t = float_types[i];
    for (int tr = 0; tr < 4; tr++) {
      bool ax = tr & 1, ay = tr & 2;
      /* [2,1,3,4] x [5,4,2] -> [2,5,3,2] */
      check_random(c, t, false, 4, ax ? TU_SHAPE(2, 1, 4, 3) : TU_SHAPE(2, 1, 3, 4), 3,
                   ay ? TU_SHAPE(5, 2, 4) : TU_SHAPE(5, 4, 2), ax, ay);
      /* y shared by the whole batch, with and without the stacked GEMM */
      check_random(c, t, false, 3, ax ? TU_SHAPE(4, 6, 5) : TU_SHAPE(4, 5, 6), 4,
                   ay ? TU_SHAPE(1, 1, 7, 6) : TU_SHAPE(1, 1, 6, 7), ax, ay);
      /* x shared by the whole batch */
      check_random(c, t, false, 2, ax ? TU_SHAPE(6, 5) : TU_SHAPE(5, 6), 3, ay ? TU_SHAPE(3, 7, 6) : TU_SHAPE(3, 6, 7),
                   ax, ay);
    }
    /* rank 8: batch dims broadcast on both sides */
    check_random(c, t, false, 8, TU_SHAPE(2, 1, 3, 1, 2, 1, 2, 3), 8, TU_SHAPE(1, 2, 3, 2, 1, 1, 3, 2), false, false);
    /* many small products: split across threads by batch */
    check_random(c, t, false, 3, TU_SHAPE(200, 8, 9), 3, TU_SHAPE(200, 9, 7), false, false);
  }
}

static void test_batch_matmul_rank2_is_matmul(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++) {
    nb_dtype t = float_types[i];
    nb_tensor *at = tu_make(c, t, 2, TU_SHAPE(3, 2), AT_VALS);
    nb_tensor *bt = tu_make(c, t, 2, TU_SHAPE(2, 3), BT_VALS);
    tu_check(nb_batch_matmul(c, at, bt, true, true), t, 2, TU_SHAPE(2, 2), AB_VALS, 0);
    check_random(c, t, false, 2, TU_SHAPE(67, 129), 2, TU_SHAPE(129, 45), false, false);
  }
}

static void test_batch_matmul_empty(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < 2; i++) {
    nb_dtype t = float_types[i];
    nb_tensor *x0 = tu_make(c, t, 3, TU_SHAPE(0, 2, 3), NULL), *y = tu_make(c, t, 2, TU_SHAPE(3, 4), NULL);
    tu_check_shape(nb_batch_matmul(c, x0, y, false, false), t, 3, TU_SHAPE(0, 2, 4));
    /* an empty batch dim broadcasts against 1 */
    nb_tensor *y1 = tu_make(c, t, 4, TU_SHAPE(1, 1, 3, 4), NULL);
    tu_check_shape(nb_batch_matmul(c, x0, y1, false, false), t, 4, TU_SHAPE(1, 0, 2, 4));
    nb_tensor *xm = tu_make(c, t, 3, TU_SHAPE(2, 0, 3), NULL);
    nb_tensor *y2 = tu_make(c, t, 3, TU_SHAPE(2, 3, 4), NULL);
    tu_check_shape(nb_batch_matmul(c, xm, y2, false, false), t, 3, TU_SHAPE(2, 0, 4));
    /* K == 0 after a nonzero product of the same size was freed */
    nb_tensor *junk = tu_make(c, t, 3, TU_SHAPE(2, 2, 3), TU_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
    nb_tensor *nine = tu_make(c, t, 2, TU_SHAPE(3, 3), TU_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
    nb_tensor_free(nb_batch_matmul(c, junk, nine, false, false));
    nb_tensor *xk = tu_make(c, t, 3, TU_SHAPE(2, 2, 0), NULL);
    nb_tensor *yk = tu_make(c, t, 3, TU_SHAPE(2, 0, 3), NULL);
    tu_check(nb_batch_matmul(c, xk, yk, false, false), t, 3, TU_SHAPE(2, 2, 3),
             TU_VALS(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0);
    nb_tensor *xka = tu_make(c, t, 3, TU_SHAPE(2, 0, 2), NULL);
    tu_check(nb_batch_matmul(c, xka, yk, true, false), t, 3, TU_SHAPE(2, 2, 3),
             TU_VALS(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 0);
  }
  assert_int_equal(nb_status(c), NB_OK);
}

/* ---- threads --------------------------------------------------------------------- */

/* Runs op(x, y) under 1 thread, 2 threads, and 2 threads again. A batch of small
   products is split by batch with one single-threaded GEMM each (below OpenBLAS's own
   threading threshold), the same path under any thread count, so its results are
   bit-identical. One large GEMM is threaded by OpenBLAS, whose threaded and
   single-threaded paths may round differently (its kernels treat edge blocks differently
   as the partition moves): there a rerun with the same count, the same path, must match
   bit for bit, and the two counts agree within the bound of two dot products of depth k. */
static void check_threads(nb_ctx *c, bool batched, bool exact, int xr, const int64_t *xs, int yr, const int64_t *ys) {
  int64_t nx = count(xr, xs), ny = count(yr, ys);
  double *xv = malloc((size_t)nx * sizeof *xv), *yv = malloc((size_t)ny * sizeof *yv);
  assert_non_null(xv);
  assert_non_null(yv);
  fill_random(xv, nx, 3);
  fill_random(yv, ny, 4);
  static const int counts[3] = {1, 2, 2};
  for (int i = 0; i < 2; i++) {
    nb_dtype t = float_types[i];
    nb_tensor *x = tu_make_float(c, t, xr, xs, xv), *y = tu_make_float(c, t, yr, ys, yv), *z[3];
    for (int r = 0; r < 3; r++) {
      nb_ctx_set_threads(c, counts[r]);
      assert_int_equal(nb_ctx_threads(c), counts[r]);
      z[r] = batched ? nb_batch_matmul(c, x, y, false, true) : nb_matmul(c, x, y, false, true);
      assert_non_null(z[r]);
    }
    size_t bytes = (size_t)nb_num_elements(z[0]) * nb_dtype_size(t);
    assert_memory_equal(nb_data(z[1]), nb_data(z[2]), bytes);
    if (exact) {
      assert_memory_equal(nb_data(z[0]), nb_data(z[1]), bytes);
    } else {
      double *one_thread = values_of(z[0]), *abs_sums = abs_sums_of(x, y, false, true, NULL);
      tu_check_sums(z[1], one_thread, t, xs[xr - 1], abs_sums);
      free(one_thread);
      free(abs_sums);
    }
  }
  free(xv);
  free(yv);
}

static void test_threads(void **state) {
  nb_ctx *c = *state;
  tu_two_threads_or_skip(c);
  check_threads(c, false, false, 2, TU_SHAPE(300, 200), 2, TU_SHAPE(250, 200));
  check_threads(c, true, true, 3, TU_SHAPE(64, 8, 8), 3, TU_SHAPE(64, 8, 8));
  check_threads(c, true, true, 4, TU_SHAPE(3, 1, 40, 50), 3, TU_SHAPE(4, 30, 50));
  assert_int_equal(nb_status(c), NB_OK);
}

/* A kernel call leaves the calling thread's OpenMP thread count as it found it, though
   OpenBLAS's OpenMP build sets it to the context's thread count for its GEMMs. */
static void test_threads_leave_omp_setting(void **state) {
  nb_ctx *c = *state;
  int orig = omp_get_max_threads();
  omp_set_num_threads(3);
  double xv[64 * 8 * 8];
  fill_random(xv, 64 * 8 * 8, 7);
  nb_tensor *a = tu_make(c, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4));
  nb_tensor *x = tu_make(c, NB_F32, 3, TU_SHAPE(64, 8, 8), xv);
  nb_tensor *y = tu_make(c, NB_F32, 2, TU_SHAPE(8, 8), xv);
  for (int threads = 1, most = tu_set_threads(c, 2); threads <= most; threads++) {
    nb_ctx_set_threads(c, threads);
    tu_check(nb_matmul(c, a, a, false, false), NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(7, 10, 15, 22), 0);
    assert_int_equal(omp_get_max_threads(), 3);
    /* shared y (one tall GEMM) and a batch split across threads */
    assert_non_null(nb_batch_matmul(c, x, y, false, false));
    assert_int_equal(omp_get_max_threads(), 3);
    assert_non_null(nb_batch_matmul(c, x, x, true, false));
    assert_int_equal(omp_get_max_threads(), 3);
  }
  omp_set_num_threads(orig);
  assert_int_equal(nb_status(c), NB_OK);
}

/* ---- the float32 GEMM backend ------------------------------------------------------ */

/* Row-major rows x cols values in [-1, 1) rounded to float32 (so the float32 and float64
   GEMMs multiply the same numbers), in storage with leading dim ld; the padding holds 7. */
static void fill_padded(double *d, float *f, int64_t rows, int64_t cols, int64_t ld, uint64_t seed) {
  fill_random(d, rows * ld, seed);
  for (int64_t i = 0; i < rows * ld; i++) d[i] = i % ld < cols ? (float)d[i] : 7;
  for (int64_t i = 0; i < rows * ld; i++) f[i] = (float)d[i];
}

/* The rows x cols matrix stored with leading dim ld, densely (the caller frees it). */
static double *dense_of(const double *v, int64_t rows, int64_t cols, int64_t ld) {
  double *out = malloc((size_t)(rows * cols + 1) * sizeof *out);
  assert_non_null(out);
  for (int64_t i = 0; i < rows; i++) memcpy(out + i * cols, v + i * ld, (size_t)cols * sizeof *out);
  return out;
}

/* nbop_gemm's float32 path against its float64 path on the same values: C = op(A) op(B) +
   beta C with leading dims ld = cols + pad (the padding stays untouched). With beta 0, C
   starts as NaN: it must not be read. */
static void check_gemm_f32_vs_f64(nb_ctx *c, bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t pad,
                                  double beta, uint64_t seed) {
  int64_t arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
  int64_t lda = acols + pad, ldb = bcols + pad, ldc = n + pad;
  int64_t asz = arows * lda, bsz = brows * ldb, csz = m * ldc, total = asz + bsz + csz + 1;
  double *d = malloc((size_t)total * sizeof *d), *abs_d = malloc((size_t)total * sizeof *abs_d);
  float *f = malloc((size_t)total * sizeof *f);
  assert_true(d && abs_d && f);
  double *a = d, *b = a + asz, *c64 = b + bsz;
  float *a32 = f, *b32 = a32 + asz, *c32 = b32 + bsz;
  fill_padded(a, a32, arows, acols, lda, seed);
  fill_padded(b, b32, brows, bcols, ldb, seed + 1);
  fill_padded(c64, c32, m, n, ldc, seed + 2);
  for (int64_t i = 0; beta == 0 && i < csz; i++)
    if (i % ldc < n) c64[i] = c32[i] = NAN;
  /* S of tu_check_sums: the same GEMM over magnitudes (|C| only where beta reads it) */
  for (int64_t i = 0; i < asz + bsz + csz; i++) abs_d[i] = beta == 0 && i >= asz + bsz ? 0 : fabs(d[i]);
  nbop_gemm(NB_F64, ta, tb, m, n, k, abs_d, lda, abs_d + asz, ldb, beta, abs_d + asz + bsz, ldc);
  nbop_gemm(NB_F64, ta, tb, m, n, k, a, lda, b, ldb, beta, c64, ldc);
  nbop_gemm(NB_F32, ta, tb, m, n, k, a32, lda, b32, ldb, beta, c32, ldc);
  double *got_v = malloc((size_t)csz * sizeof *got_v + 1);
  assert_non_null(got_v);
  for (int64_t i = 0; i < csz; i++) {
    got_v[i] = c32[i];
    if (i % ldc >= n) assert_true(c32[i] == 7.0f); /* the padding */
  }
  double *got_dense = dense_of(got_v, m, n, ldc), *want = dense_of(c64, m, n, ldc),
         *abs_sums = dense_of(abs_d + asz + bsz, m, n, ldc);
  nb_tensor *got = tu_make_float(c, NB_F32, 2, (const int64_t[]){m, n}, got_dense);
  tu_check_sums(got, want, NB_F64, k + (beta != 0), abs_sums);
  free(got_dense);
  free(want);
  free(abs_sums);
  free(got_v);
  free(d);
  free(abs_d);
  free(f);
}

/* Random shapes (k = 0 among them) through every transpose, beta 0 and 1, dense and
   padded leading dims, on one thread and on two. */
static void test_gemm_f32_against_f64(void **state) {
  nb_ctx *c = *state;
  uint64_t r = 42;
  int orig = omp_get_max_threads();
  for (int threads = 1, most = tu_set_threads(c, 2); threads <= most; threads++) {
    nbop_blas_set_threads(threads);
    for (int i = 0; i < 32; i++) {
      r = r * 6364136223846793005u + 1442695040888963407u;
      int64_t m = 1 + (int64_t)(r >> 33) % 90, n = 1 + (int64_t)(r >> 45) % 90,
              k = i % 8 == 7 ? 0 : (int64_t)(r >> 20) % 300;
      check_gemm_f32_vs_f64(c, i & 1, i & 2, m, n, k, i & 4 ? 3 : 0, i & 8 ? 1 : 0, r);
    }
  }
  nbop_blas_set_threads(orig);
  nb_ctx_set_threads(c, 1);
}

/* An operand stored with k along its rows (A transposed, B not) whose row stride is a
   power of two of 512 floats or more is copied before oneDNN's AVX2 sgemm where that reads
   it in place (copies_for in src/ops/linalg.c): that path against float64 for each
   transpose, strides 512 (dense, and 509 columns padded by 3) and 1024, beta 0 and 1, on
   one thread and on two. */
static void test_gemm_f32_copied_operands(void **state) {
  nb_ctx *c = *state;
  static const struct { int64_t extent, pad; } strides[] = {{512, 0}, {509, 3}, {1024, 0}};
  uint64_t seed = 7;
  int orig = omp_get_max_threads();
  for (int threads = 1, most = tu_set_threads(c, 2); threads <= most; threads++) {
    nbop_blas_set_threads(threads);
    for (int s = 0; s < 3; s++)
      for (int tr = 0; tr < 4; tr++) {
        bool ta = tr & 1, tb = tr & 2;
        int64_t m = ta ? strides[s].extent : 40, n = tb ? 30 : strides[s].extent;
        check_gemm_f32_vs_f64(c, ta, tb, m, n, 37 + s, strides[s].pad, (tr + s) & 1, seed++);
      }
  }
  nbop_blas_set_threads(orig);
  nb_ctx_set_threads(c, 1);
}

/* Which float32 products take the copy (on AVX2, where it was measured to pay): operands
   with k along their rows and a power-of-two stride of 512 floats or more, in products
   oneDNN runs in place (1/m + 1/n >= 0.0038). */
static void test_gemm_path_names(void **state) {
  (void)state;
  const char *isa = nbop_onednn_isa_name();
  bool avx2 = !strcmp(isa, "avx2") || !strcmp(isa, "avx2_vnni");
  assert_string_equal(nbop_gemm_path_name(NB_F32, false, false, 128, 512, 64, 512), avx2 ? "sgemm+copy_b" : "sgemm");
  assert_string_equal(nbop_gemm_path_name(NB_F32, true, false, 512, 512, 512, 512), avx2 ? "sgemm+copy_ab" : "sgemm");
  assert_string_equal(nbop_gemm_path_name(NB_F32, true, true, 1024, 64, 1024, 512), avx2 ? "sgemm+copy_a" : "sgemm");
  assert_string_equal(nbop_gemm_path_name(NB_F32, false, true, 512, 512, 512, 512), "sgemm");
  assert_string_equal(nbop_gemm_path_name(NB_F32, false, false, 128, 768, 768, 768), "sgemm");
  assert_string_equal(nbop_gemm_path_name(NB_F32, false, false, 512, 1536, 512, 1536), "sgemm");
  assert_string_equal(nbop_gemm_path_name(NB_F32, false, false, 1024, 1024, 1024, 1024), "sgemm");
  assert_string_equal(nbop_gemm_path_name(NB_F64, true, false, 512, 512, 512, 512), "gemm");
}

/* The same float32 MatMul and _MatMulAdd on oneDNN and on OpenBLAS (the internal switch),
   each transpose, shapes the kernel runs whole and split across threads: two float32 sums
   of k (k + 1) terms in different orders. */
static void test_matmul_f32_backends_agree(void **state) {
  nb_ctx *c = *state;
  for (int threads = 1, most = tu_set_threads(c, 2); threads <= most; threads++) {
    nb_ctx_set_threads(c, threads);
    for (int tr = 0; tr < 4; tr++) {
      bool ta = tr & 1, tb = tr & 2;
      int64_t m = tr & 1 ? 200 : 40, k = tr & 1 ? 48 : 300, n = 170;
      const int64_t xs[2] = {ta ? k : m, ta ? m : k}, ys[2] = {tb ? n : k, tb ? k : n};
      nb_tensor *x = nb_stateless_random_uniform(c, xs, 2, (const int64_t[2]){3, tr}, NB_F32);
      nb_tensor *y = nb_stateless_random_uniform(c, ys, 2, (const int64_t[2]){4, tr}, NB_F32);
      nb_tensor *acc = nb_stateless_random_uniform(c, (const int64_t[]){m, n}, 2, (const int64_t[2]){5, tr}, NB_F32);
      nbop_gemm_set_f32_backend(NBOP_GEMM_OPENBLAS);
      double *want = values_of(nb_matmul(c, x, y, ta, tb)), *want_add = values_of(nb_matmul_add(c, x, y, ta, tb, acc));
      nbop_gemm_set_f32_backend(NBOP_GEMM_ONEDNN);
      double *abs_sums = abs_sums_of(x, y, ta, tb, NULL), *abs_sums_add = abs_sums_of(x, y, ta, tb, acc);
      tu_check_sums(nb_matmul(c, x, y, ta, tb), want, NB_F32, k, abs_sums);
      tu_check_sums(nb_matmul_add(c, x, y, ta, tb, acc), want_add, NB_F32, k + 1, abs_sums_add);
      free(want);
      free(want_add);
      free(abs_sums);
      free(abs_sums_add);
    }
  }
  nb_ctx_set_threads(c, 1);
  assert_int_equal(nb_status(c), NB_OK);
}

/* ---- the generic entry and errors ------------------------------------------------- */

static void test_nb_op_attrs(void **state) {
  nb_ctx *c = *state;
  nb_tensor *at = tu_make(c, NB_F32, 2, TU_SHAPE(3, 2), AT_VALS);
  nb_tensor *bt = tu_make(c, NB_F32, 2, TU_SHAPE(2, 3), BT_VALS);
  nb_tensor *in[2] = {at, bt}, *out = NULL;
  nb_attr attrs[5] = {nb_attr_bool("transpose_a", true), nb_attr_bool("transpose_b", true), nb_attr_type("T", NB_F32),
                      nb_attr_bool("grad_a", true), nb_attr_bool("grad_b", false)};
  assert_int_equal(nb_op(c, "MatMul", in, 2, attrs, 5, &out, 1), NB_OK);
  tu_check(out, NB_F32, 2, TU_SHAPE(2, 2), AB_VALS, 0);
  /* defaults: no transposes, so [3,2] @ [2,3] is 3x3 */
  assert_int_equal(nb_op(c, "MatMul", in, 2, NULL, 0, &out, 1), NB_OK);
  tu_check(out, NB_F32, 2, TU_SHAPE(3, 3), TU_VALS(39, 49, 59, 54, 68, 82, 69, 87, 105), 0);
  nb_attr adj[4] = {nb_attr_bool("adj_x", true), nb_attr_bool("adj_y", true), nb_attr_bool("grad_x", true),
                    nb_attr_bool("grad_y", true)};
  assert_int_equal(nb_op(c, "BatchMatMulV2", in, 2, adj, 4, &out, 1), NB_OK);
  tu_check(out, NB_F32, 2, TU_SHAPE(2, 2), AB_VALS, 0);

  nb_attr unknown[2] = {nb_attr_bool("transpose_a", true), nb_attr_bool("adjoint_a", true)};
  assert_int_equal(nb_op(c, "MatMul", in, 2, unknown, 2, &out, 1), NB_INVALID);
  assert_null(out);
  tu_check_error(c, NB_INVALID, "MatMul", "unknown attr 'adjoint_a'");
  nb_attr wrong_kind = nb_attr_int("transpose_a", 1);
  assert_int_equal(nb_op(c, "MatMul", in, 2, &wrong_kind, 1, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "MatMul", "transpose_a");
  nb_attr wrong_t = nb_attr_type("T", NB_F64);
  assert_int_equal(nb_op(c, "BatchMatMulV2", in, 2, &wrong_t, 1, &out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "BatchMatMulV2", "float64");
  assert_int_equal(nb_op(c, "MatMul", in, 1, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "MatMul", "expected 2 inputs, got 1");
  nb_tensor *three[3] = {at, bt, bt};
  assert_int_equal(nb_op(c, "BatchMatMulV2", three, 3, NULL, 0, &out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "BatchMatMulV2", "expected 2 inputs, got 3");
  nb_tensor *outs[2];
  assert_int_equal(nb_op(c, "MatMul", in, 2, NULL, 0, outs, 2), NB_INVALID);
  tu_check_error(c, NB_INVALID, "MatMul", "1 outputs");
}

static void test_shape_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *v = tu_make(c, NB_F32, 1, TU_SHAPE(3), TU_VALS(1, 2, 3));
  nb_tensor *m = tu_make(c, NB_F32, 2, TU_SHAPE(3, 2), NULL);
  nb_tensor *m3 = tu_make(c, NB_F32, 3, TU_SHAPE(1, 3, 2), NULL);
  assert_null(nb_matmul(c, v, m, false, false));
  tu_check_error(c, NB_SHAPE, "MatMul: In[0] is not a matrix", "[3]");
  assert_null(nb_matmul(c, m, m3, false, false));
  tu_check_error(c, NB_SHAPE, "In[1] is not a matrix", "[1,3,2]");
  assert_null(nb_batch_matmul(c, m, v, false, false));
  tu_check_error(c, NB_SHAPE, "BatchMatMulV2: In[1] ndims must be >= 2: 1", NULL);
  nb_tensor *m23 = tu_make(c, NB_F32, 2, TU_SHAPE(2, 3), NULL);
  assert_null(nb_matmul_add(c, m23, m, false, false, m23));
  tu_check_error(c, NB_SHAPE, "_MatMulAdd: the accumulator [2,3] does not match the product [2,2]", NULL);
  assert_null(nb_matmul_add(c, m23, m, false, false, v));
  tu_check_error(c, NB_SHAPE, "the accumulator must be 2-dimensional, got shape [3]", NULL);
  nb_tensor *s = tu_make(c, NB_F32, 0, NULL, TU_VALS(2));
  assert_null(nb_batch_matmul(c, s, m, false, false));
  tu_check_error(c, NB_SHAPE, "In[0] ndims must be >= 2: 0", NULL);

  nb_tensor *a = tu_make(c, NB_F32, 2, TU_SHAPE(2, 3), NULL);
  nb_tensor *b = tu_make(c, NB_F32, 2, TU_SHAPE(4, 5), NULL);
  assert_null(nb_matmul(c, a, b, false, false));
  tu_check_error(c, NB_SHAPE, "MatMul: Matrix size-incompatible: In[0]: [2,3], In[1]: [4,5]", NULL);
  assert_null(nb_matmul(c, a, a, false, false));
  tu_check_error(c, NB_SHAPE, "Matrix size-incompatible: In[0]: [2,3], In[1]: [2,3]", NULL);
  assert_null(nb_matmul(c, a, a, true, true));
  tu_check_error(c, NB_SHAPE, "Matrix size-incompatible", NULL);
  nb_tensor *x = tu_make(c, NB_F32, 3, TU_SHAPE(2, 2, 3), NULL);
  nb_tensor *y = tu_make(c, NB_F32, 3, TU_SHAPE(2, 4, 2), NULL);
  assert_null(nb_batch_matmul(c, x, y, false, false));
  tu_check_error(c, NB_SHAPE, "BatchMatMulV2: Matrix size-incompatible: In[0]: [2,2,3], In[1]: [2,4,2]", NULL);
  assert_null(nb_batch_matmul(c, x, y, true, false));
  tu_check_error(c, NB_SHAPE, "Matrix size-incompatible", NULL);

  nb_tensor *xb = tu_make(c, NB_F32, 4, TU_SHAPE(2, 3, 2, 3), NULL);
  nb_tensor *yb = tu_make(c, NB_F32, 3, TU_SHAPE(2, 3, 2), NULL);
  assert_null(nb_batch_matmul(c, xb, yb, false, false));
  tu_check_error(c, NB_SHAPE, "In[0] and In[1] must have compatible batch dimensions", "[2,3,2,3] vs. [2,3,2]");

  /* empty matrices, but the broadcast batch count 2^40 * 2^40 does not fit in int64 */
  nb_tensor *wide0 = tu_make(c, NB_F32, 4, TU_SHAPE(INT64_C(1) << 40, 1, 0, 0), NULL);
  nb_tensor *wide1 = tu_make(c, NB_F32, 4, TU_SHAPE(1, INT64_C(1) << 40, 0, 0), NULL);
  assert_null(nb_batch_matmul(c, wide0, wide1, false, false));
  tu_check_error(c, NB_SHAPE, "BatchMatMulV2: output shape [1099511627776,1099511627776,0,0] is too large",
                 "In[1]: [1,1099511627776,0,0]");
  /* one such batch dim alone is fine: an empty [2^40,1,0,0] result */
  tu_check_shape(nb_batch_matmul(c, wide0, wide0, false, false), NB_F32, 4, TU_SHAPE(INT64_C(1) << 40, 1, 0, 0));
}

static void test_dtype_errors(void **state) {
  nb_ctx *c = *state;
  const nb_dtype bad[3] = {NB_I32, NB_I64, NB_BOOL};
  nb_tensor *f32 = tu_make(c, NB_F32, 2, TU_SHAPE(2, 2), NULL), *f64 = tu_make(c, NB_F64, 2, TU_SHAPE(2, 2), NULL);
  assert_null(nb_matmul_add(c, f32, f32, false, false, f64));
  tu_check_error(c, NB_DTYPE, "_MatMulAdd", "float64");
  for (int i = 0; i < 3; i++) {
    nb_tensor *a = tu_make(c, bad[i], 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4));
    assert_null(nb_matmul(c, a, a, false, false));
    tu_check_error(c, NB_DTYPE, "MatMul supports float32 and float64", nb_dtype_name(bad[i]));
    assert_null(nb_batch_matmul(c, a, a, false, false));
    tu_check_error(c, NB_DTYPE, "BatchMatMulV2", nb_dtype_name(bad[i]));
  }
  nb_tensor *f = tu_make(c, NB_F32, 2, TU_SHAPE(2, 2), NULL);
  nb_tensor *d = tu_make(c, NB_F64, 2, TU_SHAPE(2, 2), NULL);
  assert_null(nb_matmul(c, f, d, false, false));
  tu_check_error(c, NB_DTYPE, "MatMul", "float32 and float64");
  assert_null(nb_batch_matmul(c, d, f, false, false));
  tu_check_error(c, NB_DTYPE, "same dtype", "float64 and float32");
  nb_tensor *i32 = tu_make(c, NB_I32, 2, TU_SHAPE(2, 2), NULL);
  assert_null(nb_matmul(c, f, i32, false, false));
  tu_check_error(c, NB_DTYPE, "input 1 has dtype int32", NULL);
}

static void test_null_and_sticky(void **state) {
  nb_ctx *c = *state;
  nb_tensor *a = tu_make(c, NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(1, 2, 3, 4));
  assert_null(nb_matmul(c, NULL, a, false, false));
  tu_check_error(c, NB_INVALID, "MatMul", "input 0 is NULL");
  assert_null(nb_batch_matmul(c, a, NULL, false, false));
  tu_check_error(c, NB_INVALID, "BatchMatMulV2", "input 1 is NULL");
  /* after an error, later calls do nothing and keep the first message */
  nb_tensor *v = tu_make(c, NB_F32, 1, TU_SHAPE(2), NULL);
  assert_null(nb_matmul(c, v, a, false, false));
  assert_null(nb_matmul(c, a, a, false, false));
  tu_check_error(c, NB_SHAPE, "In[0] is not a matrix", NULL);
  tu_check(nb_matmul(c, a, a, false, false), NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(7, 10, 15, 22), 0);
}

/* A graph refuses mismatched dtypes, ranks and known dims of a product when it is built,
   though other dims (or the ranks) are unknown. */
static void test_graph_validation(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->c;
  nb_tensor *a = tu_unknown_dims(c, NB_F32, 2), *ar = tu_unknown_rank(c, NB_F32), *out[1];
  assert_null(nb_matmul(c, a, tu_unknown_dims(c, NB_F64, 2), false, false));
  tu_check_error(c, NB_DTYPE,
                 "MatMul (node 'MatMul'): inputs 0 and 1 must have the same dtype, got float32 and float64", NULL);
  assert_null(nb_matmul(c, ar, tu_unknown_rank(c, NB_I32), false, false));
  tu_check_error(c, NB_DTYPE, "MatMul (node", "input 1 has dtype int32");
  assert_null(nb_matmul(c, tu_unknown_dims(c, NB_F32, 3), ar, false, false));
  tu_check_error(c, NB_SHAPE, "MatMul (node", "In[0] is not a matrix. Instead it has shape [-1,-1,-1]");
  nb_tensor *k3 = nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 3), "k3"),
            *k4 = nb_placeholder(c, NB_F32, 2, TU_SHAPE(4, -1), "k4");
  assert_null(nb_matmul(c, k3, k4, false, false));
  tu_check_error(c, NB_SHAPE, "MatMul (node", "Matrix size-incompatible: In[0]: [-1,3], In[1]: [4,-1]");
  tu_check_shape(nb_matmul(c, k3, k4, false, true), NB_F32, 2, TU_SHAPE(-1, 4)); /* k3 [?, 3] times k4^T [?, 4] */
  assert_null(nb_batch_matmul(c, ar, tu_unknown_dims(c, NB_F32, 1), false, false));
  tu_check_error(c, NB_SHAPE, "BatchMatMulV2 (node", "In[1] ndims must be >= 2: 1");
  nb_tensor *b2 = nb_placeholder(c, NB_F32, 3, TU_SHAPE(2, -1, -1), "b2"),
            *b3 = nb_placeholder(c, NB_F32, 3, TU_SHAPE(3, -1, -1), "b3");
  assert_null(nb_batch_matmul(c, b2, b3, false, false));
  tu_check_error(c, NB_SHAPE, "BatchMatMulV2 (node", "must have compatible batch dimensions: [2,-1,-1] vs. [3,-1,-1]");
  assert_null(nb_matmul_add(c, a, a, false, false, tu_unknown_dims(c, NB_F64, 2)));
  tu_check_error(c, NB_DTYPE, "_MatMulAdd (node", "inputs 0 and 2 must have the same dtype, got float32 and float64");
  assert_null(nb_matmul_add(c, k3, k4, false, true, nb_placeholder(c, NB_F32, 2, TU_SHAPE(-1, 5), "acc5")));
  tu_check_error(c, NB_SHAPE, "_MatMulAdd (node", "the accumulator [-1,5] does not match the product [-1,4]");
  nb_tensor *in[2] = {a, a};
  nb_attr t = nb_attr_type("T", NB_F64);
  assert_int_equal(nb_op(c, "MatMul", in, 2, &t, 1, out, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "MatMul: attr T=float64 does not match input 0 of dtype float32", NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_graph_validation, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_matmul_transposes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_matmul_add, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_matmul_add_in_place, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_matmul_add_acc_is_factor, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_matmul_size_one_dims, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_matmul_large_random, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_matmul_split_across_threads, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_matmul_empty, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_batch_matmul_equal_batches, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_batch_matmul_broadcast_hand, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_batch_matmul_broadcast_random, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_batch_matmul_rank2_is_matmul, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_batch_matmul_empty, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_threads, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_threads_leave_omp_setting, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gemm_f32_against_f64, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gemm_f32_copied_operands, tu_setup, tu_teardown),
      cmocka_unit_test(test_gemm_path_names),
      cmocka_unit_test_setup_teardown(test_matmul_f32_backends_agree, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_nb_op_attrs, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_shape_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_dtype_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_null_and_sticky, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
