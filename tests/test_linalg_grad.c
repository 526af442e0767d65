/* Gradients of MatMul and BatchMatMulV2: the four transpose/adjoint cases, batch
   broadcasting (rank mismatch, size-1 batch dims), static and run-time shapes, against
   hand values and float64 central differences, first and second order. */
#include "testutil.h"

#include <stdlib.h>

typedef struct fixture {
  nb_graph *g;
  nb_ctx *c, *e; /* graph context; eager context for values */
  nb_session *s;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  if (!f) return -1;
  f->g = nb_graph_new();
  f->c = nb_graph_ctx_new(f->g);
  f->e = nb_eager_new();
  f->s = nb_session_new(f->g);
  *state = f;
  return f->g && f->c && f->e && f->s ? 0 : -1;
}

static int teardown(void **state) {
  fixture *f = *state;
  nb_session_free(f->s);
  nb_ctx_free(f->c);
  nb_ctx_free(f->e);
  nb_graph_free(f->g);
  free(f);
  return 0;
}

/* A differentiation problem: feeds[0..nx) are the xs, feeds[nx..n) other placeholders;
   vals are their float64 (or int axis) values. */
enum { MAX_FEEDS = 6 };
typedef struct problem {
  nb_tensor *feeds[MAX_FEEDS], *vals[MAX_FEEDS];
  int n, nx;
} problem;

static nb_tensor *run(fixture *f, const problem *p, nb_tensor *fetch) {
  nb_tensor *out = NULL;
  if (nb_run(f->s, p->feeds, p->vals, p->n, &fetch, 1, &out)) fail_msg("nb_run: %s", nb_session_error(f->s));
  return out;
}

/* sum(w * t) over all elements. */
static double weighted_sum(const nb_tensor *t, const nb_tensor *w) {
  assert_int_equal(nb_num_elements(t), nb_num_elements(w));
  double s = 0;
  for (int64_t i = 0; i < nb_num_elements(t); i++) s += nb_item(t, i) * nb_item(w, i);
  return s;
}

/* The central difference of sum(w * y) along element i of feed j (h = 1e-6). */
static double central_difference(fixture *f, problem *p, int j, int64_t i, nb_tensor *y, const nb_tensor *w) {
  nb_tensor *orig = p->vals[j];
  int64_t n = nb_num_elements(orig);
  double *buf = malloc((size_t)(n ? n : 1) * sizeof *buf);
  assert_non_null(buf);
  double side[2], h = 1e-6;
  for (int k = 0; k < 2; k++) {
    assert_int_equal(nb_read(orig, buf, (size_t)n * sizeof *buf), NB_OK);
    buf[i] += k ? -h : h;
    p->vals[j] = nb_tensor_from(f->e, NB_F64, nb_rank(orig), nb_shape(orig), buf);
    nb_tensor *out = run(f, p, y);
    side[k] = weighted_sum(out, w);
    nb_tensor_free(out);
    nb_tensor_free(p->vals[j]);
  }
  p->vals[j] = orig;
  free(buf);
  return (side[0] - side[1]) / (2 * h);
}

/* Differentiates y with the upstream gradient w (a placeholder fed with wv, added to the
   problem's feeds) w.r.t. each x, checks every dx element against central differences of
   sum(wv * y), and returns the symbolic dxs (NULL where unconnected: checked to be 0) and
   the placeholder w. */
static nb_tensor *check_grads(fixture *f, problem *p, nb_tensor *y, nb_tensor *wv, nb_tensor **dxs) {
  nb_tensor *w = nb_placeholder(f->c, NB_F64, nb_rank(wv), nb_shape(wv), NULL);
  nb_grad_opts o = {.grad_ys = &w};
  if (nb_gradients(f->c, &y, 1, p->feeds, p->nx, &o, dxs)) fail_msg("nb_gradients: %s", nb_error(f->c));
  assert_true(p->n < MAX_FEEDS);
  p->feeds[p->n] = w;
  p->vals[p->n++] = wv;
  for (int j = 0; j < p->nx; j++) {
    nb_tensor *dx = dxs[j] ? run(f, p, dxs[j]) : NULL;
    if (dx) assert_int_equal(nb_num_elements(dx), nb_num_elements(p->vals[j]));
    for (int64_t i = 0; i < nb_num_elements(p->vals[j]); i++) {
      double num = central_difference(f, p, j, i, y, wv), got = dx ? nb_item(dx, i) : 0;
      if (fabs(got - num) > 1e-6 * (1 + fabs(num)))
        fail_msg("d/dx%d[%lld]: symbolic %.9g, numeric %.9g", j, (long long)i, got, num);
    }
    nb_tensor_free(dx);
  }
  p->n--;
  return w;
}

/* Second order: differentiates sum(vv * dx0) w.r.t. the xs and the first upstream
   gradient w (fed with wv), against central differences of the first gradient. */
static void check_second_order(fixture *f, const problem *p, nb_tensor *dx0, nb_tensor *w, nb_tensor *wv,
                               nb_tensor *vv) {
  problem q = *p;
  /* the first gradient's upstream placeholder becomes one more x */
  for (int i = q.n; i > q.nx; i--) {
    q.feeds[i] = q.feeds[i - 1];
    q.vals[i] = q.vals[i - 1];
  }
  q.feeds[q.nx] = w;
  q.vals[q.nx] = wv;
  q.nx++;
  q.n++;
  nb_tensor *ddxs[MAX_FEEDS];
  check_grads(f, &q, dx0, vv, ddxs);
}

/* float64 tensor helpers */
static nb_tensor *vals64(fixture *f, int rank, const int64_t *shape, const double *v) {
  return tu_make(f->e, NB_F64, rank, shape, v);
}

/* Deterministic values with no special structure. */
static void fill_values(double *v, int64_t n, double seed) {
  for (int64_t i = 0; i < n; i++) v[i] = sin(seed + 1.7 * (double)i) + 0.1 * (double)(i % 3);
}

static int64_t count(int rank, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  return n;
}

/* Checks d/da, d/db of op(a, b) (MatMul or BatchMatMulV2 with the two flags), then the
   second order w.r.t. a, b and the upstream gradient, with static shapes or all dims
   unknown. */
static void check_product(fixture *f, bool batch, int ra, const int64_t *sa, int rb, const int64_t *sb, bool t1,
                          bool t2, bool dynamic) {
  int64_t unknown[NB_MAX_RANK] = {-1, -1, -1, -1, -1, -1, -1, -1};
  double av[64], bv[64], wbuf[64], vbuf[64];
  fill_values(av, count(ra, sa), 0.3);
  fill_values(bv, count(rb, sb), 1.1);
  fill_values(wbuf, 64, 2.5);
  fill_values(vbuf, 64, -0.7);
  nb_tensor *a = nb_placeholder(f->c, NB_F64, ra, dynamic ? unknown : sa, "a");
  nb_tensor *b = nb_placeholder(f->c, NB_F64, rb, dynamic ? unknown : sb, "b");
  nb_tensor *y = batch ? nb_batch_matmul(f->c, a, b, t1, t2) : nb_matmul(f->c, a, b, t1, t2);
  if (!y) fail_msg("%s", nb_error(f->c));
  problem p = {.feeds = {a, b}, .vals = {vals64(f, ra, sa, av), vals64(f, rb, sb, bv)}, .n = 2, .nx = 2};
  nb_tensor *yv = run(f, &p, y);
  nb_tensor *wv = vals64(f, nb_rank(yv), nb_shape(yv), wbuf), *dxs[2];
  nb_tensor *w = check_grads(f, &p, y, wv, dxs);
  assert_non_null(dxs[0]);
  assert_non_null(dxs[1]);
  if (!dynamic) { /* static shapes stay static */
    tu_check_shape(dxs[0], NB_F64, ra, sa);
    tu_check_shape(dxs[1], NB_F64, rb, sb);
  }
  for (int i = 0; i < 2; i++)
    check_second_order(f, &p, dxs[i], w, wv, vals64(f, i ? rb : ra, i ? sb : sa, vbuf));
  nb_tensor_free(yv);
}

/* dy = ones: dA = ones B^T, dB = A^T ones, by hand. */
static void test_matmul_values(void **state) {
  fixture *f = *state;
  nb_tensor *a = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "a");
  nb_tensor *b = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(3, 2), "b");
  nb_tensor *y = nb_matmul(f->c, a, b, false, false), *xs[2] = {a, b}, *dxs[2];
  assert_int_equal(nb_gradients(f->c, &y, 1, xs, 2, NULL, dxs), NB_OK);
  problem p = {.feeds = {a, b},
               .vals = {vals64(f, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6)),
                        vals64(f, 2, TU_SHAPE(3, 2), TU_VALS(1, -1, 2, 0, 0.5, 3))},
               .n = 2,
               .nx = 2};
  nb_tensor *da = run(f, &p, dxs[0]), *db = run(f, &p, dxs[1]);
  tu_check(da, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(0, 2, 3.5, 0, 2, 3.5), 0);
  tu_check(db, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(5, 5, 7, 7, 9, 9), 0);
  nb_tensor_free(da);
  nb_tensor_free(db);
}

static void test_matmul(void **state) {
  fixture *f = *state;
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    const int64_t sa[2] = {ta ? 3 : 2, ta ? 2 : 3}, sb[2] = {tb ? 4 : 3, tb ? 3 : 4};
    for (int dynamic = 0; dynamic < 2; dynamic++) check_product(f, false, 2, sa, 2, sb, ta, tb, dynamic);
  }
  check_product(f, false, 2, TU_SHAPE(1, 1), 2, TU_SHAPE(1, 1), false, false, false); /* 1x1 */
}

static void test_batch_matmul(void **state) {
  fixture *f = *state;
  for (int t = 0; t < 4; t++) {
    bool ax = t & 1, ay = t & 2;
    const int64_t sx[3] = {2, ax ? 3 : 2, ax ? 2 : 3}, sy[3] = {2, ay ? 2 : 3, ay ? 3 : 2};
    for (int dynamic = 0; dynamic < 2; dynamic++) check_product(f, true, 3, sx, 3, sy, ax, ay, dynamic);
  }
}

/* Batch dims broadcast: the gradient is summed over them back to each input's shape. */
static void test_batch_matmul_broadcast(void **state) {
  fixture *f = *state;
  for (int dynamic = 0; dynamic < 2; dynamic++) {
    check_product(f, true, 3, TU_SHAPE(2, 2, 3), 2, TU_SHAPE(3, 2), false, false, dynamic);       /* rank mismatch */
    check_product(f, true, 4, TU_SHAPE(2, 1, 2, 3), 4, TU_SHAPE(1, 3, 2, 3), false, true, dynamic); /* size-1 dims */
    check_product(f, true, 2, TU_SHAPE(3, 2), 3, TU_SHAPE(2, 3, 2), true, false, dynamic);
  }
}

/* Summing over the broadcast batch dim by hand: x [2,1,2] ones, y [2,1] = [1,2]. */
static void test_batch_matmul_broadcast_values(void **state) {
  fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(2, 1, 2), "x");
  nb_tensor *y = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 1), "y");
  nb_tensor *z = nb_batch_matmul(f->c, x, y, false, false), *xs[2] = {x, y}, *dxs[2];
  assert_int_equal(nb_gradients(f->c, &z, 1, xs, 2, NULL, dxs), NB_OK);
  problem p = {.feeds = {x, y},
               .vals = {vals64(f, 3, TU_SHAPE(2, 1, 2), TU_VALS(1, 2, 3, 4)), vals64(f, 2, TU_SHAPE(2, 1), TU_VALS(1, 2))},
               .n = 2,
               .nx = 2};
  nb_tensor *dx = run(f, &p, dxs[0]), *dy = run(f, &p, dxs[1]);
  tu_check(dx, NB_F64, 3, TU_SHAPE(2, 1, 2), TU_VALS(1, 2, 1, 2), 0);
  tu_check(dy, NB_F64, 2, TU_SHAPE(2, 1), TU_VALS(4, 6), 0); /* x summed over the batch */
  nb_tensor_free(dx);
  nb_tensor_free(dy);
}

static void test_registry(void **state) {
  (void)state;
  assert_true(nb_has_gradient("MatMul"));
  assert_true(nb_has_gradient("BatchMatMulV2"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_matmul_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_matmul, setup, teardown),
      cmocka_unit_test_setup_teardown(test_batch_matmul, setup, teardown),
      cmocka_unit_test_setup_teardown(test_batch_matmul_broadcast, setup, teardown),
      cmocka_unit_test_setup_teardown(test_batch_matmul_broadcast_values, setup, teardown),
      cmocka_unit_test(test_registry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
