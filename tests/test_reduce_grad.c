/* Gradients of the reductions: Sum, Mean, Max, Min, Prod (ArgMax has none), checked
   against hand values and float64 central differences, first and second order, with
   static and run-time shapes. */
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

/* One x (placeholder of shape pshape, fed xv) reduced by `type` over the const axes. */
static nb_tensor *reduce(fixture *f, const char *type, nb_tensor *x, const int *axes, int naxes, bool keep) {
  nb_tensor *in[2] = {x, axes ? nb_tensor_from(f->e, NB_I32, 1, (int64_t[]){naxes}, axes) : NULL}, *y = NULL;
  nb_attr a = nb_attr_bool("keep_dims", keep);
  if (!axes) in[1] = nb_tensor_from(f->e, NB_I32, 1, (int64_t[]){0}, NULL);
  nb_op(f->c, type, in, 2, &a, 1, &y, 1);
  nb_tensor_free(in[1]);
  return y;
}

/* Checks the first and second order gradients of `type` reduced over axes, for x of the
   given values, once with x's static shape and once with every dim unknown. Returns
   nothing; w and v are deterministic weights of y's and x's shapes. */
static void check_reduction(fixture *f, const char *type, int rank, const int64_t *shape, const double *xv,
                            const int *axes, int naxes, bool keep, bool second_wrt_x) {
  int64_t unknown[NB_MAX_RANK];
  for (int i = 0; i < rank; i++) unknown[i] = -1;
  for (int dynamic = 0; dynamic < 2; dynamic++) {
    nb_tensor *x = nb_placeholder(f->c, NB_F64, rank, dynamic ? unknown : shape, NULL);
    nb_tensor *y = reduce(f, type, x, axes, naxes, keep);
    assert_int_equal(nb_status(f->c), NB_OK);
    problem p = {.feeds = {x}, .vals = {vals64(f, rank, shape, xv)}, .n = 1, .nx = 1};
    nb_tensor *yv = run(f, &p, y);
    double wbuf[64], vbuf[64];
    for (int i = 0; i < 64; i++) wbuf[i] = 0.5 + 0.25 * i, vbuf[i] = 1.5 - 0.125 * i;
    nb_tensor *wv = vals64(f, nb_rank(yv), nb_shape(yv), wbuf), *vv = vals64(f, rank, shape, vbuf), *dx;
    nb_tensor *w = check_grads(f, &p, y, wv, &dx);
    assert_non_null(dx);
    if (!dynamic) tu_check_shape(dx, NB_F64, rank, shape); /* static shapes stay static */
    if (second_wrt_x || dynamic == 0) check_second_order(f, &p, dx, w, wv, vv);
    nb_tensor_free(yv);
  }
}

/* dx of reducing x (static shape) with upstream ones, run at xv. */
static nb_tensor *grad_at(fixture *f, const char *type, int rank, const int64_t *shape, const double *xv,
                          const int *axes, int naxes, bool keep) {
  nb_tensor *x = nb_placeholder(f->c, NB_F64, rank, shape, NULL);
  nb_tensor *y = reduce(f, type, x, axes, naxes, keep), *dx = NULL;
  if (nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx)) fail_msg("nb_gradients: %s", nb_error(f->c));
  problem p = {.feeds = {x}, .vals = {vals64(f, rank, shape, xv)}, .n = 1, .nx = 1};
  return run(f, &p, dx);
}

static const double X24[24] = {0.3, -1.2, 0.7, 1.9, -0.4, 0.25, 1.1, -0.8, 0.45, 1.6, -1.5, 0.9,
                               -0.6, 1.3, 0.05, -1.1, 0.8, 1.45, -0.3, 0.6, -1.7, 1.2, 0.35, -0.9};

static void test_sum(void **state) {
  fixture *f = *state;
  nb_tensor *dx = grad_at(f, "Sum", 2, TU_SHAPE(2, 3), X24, (int[]){1}, 1, false);
  tu_check(dx, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 1, 1, 1, 1, 1), 0);
  nb_tensor_free(dx);
  /* the incoming gradient lands on every reduced element */
  check_reduction(f, "Sum", 3, TU_SHAPE(2, 3, 4), X24, (int[]){1}, 1, false, false);
  check_reduction(f, "Sum", 3, TU_SHAPE(2, 3, 4), X24, (int[]){-1, 0}, 2, true, false);
  check_reduction(f, "Sum", 3, TU_SHAPE(2, 3, 4), X24, (int[]){2, -1, 0}, 3, false, false); /* repeated */
  check_reduction(f, "Sum", 3, TU_SHAPE(2, 3, 4), X24, NULL, 0, false, false);             /* no axes */
  check_reduction(f, "Sum", 3, TU_SHAPE(2, 1, 3), X24, (int[]){0, 1, 2}, 3, false, false); /* all, size-1 */
  check_reduction(f, "Sum", 0, NULL, X24, NULL, 0, false, false);                          /* scalar */
}

static void test_mean(void **state) {
  fixture *f = *state;
  nb_tensor *dx = grad_at(f, "Mean", 2, TU_SHAPE(2, 3), X24, (int[]){1}, 1, false);
  double t = 1.0 / 3;
  tu_check(dx, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(t, t, t, t, t, t), 1e-12);
  nb_tensor_free(dx);
  check_reduction(f, "Mean", 3, TU_SHAPE(2, 3, 4), X24, (int[]){1}, 1, false, false);
  check_reduction(f, "Mean", 3, TU_SHAPE(2, 3, 4), X24, (int[]){0, -1}, 2, true, false);
  check_reduction(f, "Mean", 2, TU_SHAPE(4, 6), X24, (int[]){0, 1}, 2, false, false);
  check_reduction(f, "Mean", 1, TU_SHAPE(5), X24, (int[]){0}, 1, true, false);
}

/* Ties split the gradient equally (TF's choice). */
static void test_max_min_ties(void **state) {
  fixture *f = *state;
  nb_tensor *dx = grad_at(f, "Max", 1, TU_SHAPE(3), TU_VALS(1, 3, 3), (int[]){0}, 1, false);
  tu_check(dx, NB_F64, 1, TU_SHAPE(3), TU_VALS(0, 0.5, 0.5), 0);
  nb_tensor_free(dx);
  dx = grad_at(f, "Min", 2, TU_SHAPE(2, 3), TU_VALS(2, 2, 2, 5, -1, 4), (int[]){-1}, 1, true);
  double t = 1.0 / 3;
  tu_check(dx, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(t, t, t, 0, 1, 0), 1e-12);
  nb_tensor_free(dx);
  dx = grad_at(f, "Max", 2, TU_SHAPE(2, 2), TU_VALS(1, 7, 7, 2), (int[]){0, 1}, 2, false); /* every axis */
  tu_check(dx, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(0, 0.5, 0.5, 0), 0);
  nb_tensor_free(dx);
}

static void test_max_min(void **state) {
  fixture *f = *state;
  check_reduction(f, "Max", 3, TU_SHAPE(2, 3, 4), X24, (int[]){1}, 1, false, false);
  check_reduction(f, "Max", 3, TU_SHAPE(2, 3, 4), X24, (int[]){0, 2}, 2, true, false);
  check_reduction(f, "Min", 3, TU_SHAPE(2, 3, 4), X24, (int[]){-2}, 1, false, false);
  check_reduction(f, "Min", 2, TU_SHAPE(4, 6), X24, NULL, 0, true, false);
  check_reduction(f, "Max", 2, TU_SHAPE(1, 6), X24, (int[]){0}, 1, false, false); /* size-1 axis */
}

/* The product of the others, exact with zeros. */
static void test_prod_zeros(void **state) {
  fixture *f = *state;
  static const struct {
    double x[3], want[3];
  } cases[] = {{{0, 2, 3}, {6, 0, 0}}, {{0, 0, 3}, {0, 0, 0}}, {{2, 3, 4}, {12, 8, 6}}, {{2, 0, -5}, {0, -10, 0}}};
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    nb_tensor *dx = grad_at(f, "Prod", 1, TU_SHAPE(3), cases[k].x, (int[]){0}, 1, false);
    tu_check(dx, NB_F64, 1, TU_SHAPE(3), cases[k].want, 0);
    nb_tensor_free(dx);
  }
  /* two columns reduced along axis 0, with zeros in one */
  nb_tensor *dx = grad_at(f, "Prod", 2, TU_SHAPE(3, 2), TU_VALS(0, 1, 2, 2, 3, 3), (int[]){0}, 1, true);
  tu_check(dx, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(6, 6, 0, 3, 0, 2), 0);
  nb_tensor_free(dx);
}

static void test_prod(void **state) {
  fixture *f = *state;
  /* Prod's gradient needs the reduced layout at build time: only the static pass of
     check_reduction differentiates, the dynamic one is checked to fail below */
  const struct {
    int rank;
    int64_t shape[3];
    int axes[3], naxes;
    bool keep;
  } cases[] = {{3, {2, 3, 4}, {1}, 1, false},     {3, {2, 3, 4}, {0, 2}, 2, true}, {3, {2, 3, 4}, {-1}, 1, false},
               {2, {5, 2}, {0}, 1, false},        {2, {7, 1}, {0, 1}, 2, false},   {1, {1}, {0}, 1, false},
               {2, {3, 4}, {0, 0}, 2, true},      {2, {3, 4}, {0}, 0, false}};
  double xz[24];
  memcpy(xz, X24, sizeof xz);
  xz[3] = 0; /* a zero inside a reduced group */
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    nb_tensor *x = nb_placeholder(f->c, NB_F64, cases[k].rank, cases[k].shape, NULL);
    nb_tensor *y = reduce(f, "Prod", x, cases[k].axes, cases[k].naxes, cases[k].keep);
    problem p = {.feeds = {x}, .vals = {vals64(f, cases[k].rank, cases[k].shape, xz)}, .n = 1, .nx = 1};
    nb_tensor *yv = run(f, &p, y);
    double wbuf[24], vbuf[24];
    for (int i = 0; i < 24; i++) wbuf[i] = 0.5 + 0.25 * i, vbuf[i] = 1.5 - 0.125 * i;
    nb_tensor *wv = vals64(f, nb_rank(yv), nb_shape(yv), wbuf), *dx;
    nb_tensor *vv = vals64(f, cases[k].rank, cases[k].shape, vbuf);
    nb_tensor *w = check_grads(f, &p, y, wv, &dx);
    tu_check_shape(dx, NB_F64, cases[k].rank, cases[k].shape);
    check_second_order(f, &p, dx, w, wv, vv);
    nb_tensor_free(yv);
  }
}

static void test_prod_unknown_shape(void **state) {
  fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(-1, 3), "x");
  nb_tensor *y = reduce(f, "Prod", x, (int[]){0}, 1, false), *dx = NULL;
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_UNIMPLEMENTED);
  tu_check_error(f->c, NB_UNIMPLEMENTED, "Prod", NULL);
  assert_null(dx);
  /* an empty x: the gradient is empty */
  nb_tensor *e = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(0, 3), "e");
  nb_tensor *ye = reduce(f, "Prod", e, (int[]){0}, 1, false);
  assert_int_equal(nb_gradients(f->c, &ye, 1, &e, 1, NULL, &dx), NB_OK);
  tu_check_shape(dx, NB_F64, 2, TU_SHAPE(0, 3));
}

/* The axis itself fed at run time (a placeholder, negative value): the kept-dims shape is
   computed by ops at run time. */
static void test_axis_fed(void **state) {
  fixture *f = *state;
  const char *types[] = {"Sum", "Mean", "Max", "Min"};
  for (int t = 0; t < 4; t++) {
    nb_tensor *x = nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(2, 3, 4), NULL);
    nb_tensor *axis = nb_placeholder(f->c, NB_I64, 1, TU_SHAPE(1), NULL);
    nb_tensor *in[2] = {x, axis}, *y = NULL;
    nb_attr a = nb_attr_bool("keep_dims", false);
    assert_int_equal(nb_op(f->c, types[t], in, 2, &a, 1, &y, 1), NB_OK);
    assert_int_equal(nb_rank(y), -1);
    problem p = {.feeds = {x, axis},
                 .vals = {vals64(f, 3, TU_SHAPE(2, 3, 4), X24), tu_make(f->e, NB_I64, 1, TU_SHAPE(1), TU_VALS(-2))},
                 .n = 2,
                 .nx = 1};
    double wbuf[8] = {0.5, -1, 2, 0.25, 1.5, -0.75, 3, 1};
    nb_tensor *dx;
    check_grads(f, &p, y, vals64(f, 2, TU_SHAPE(2, 4), wbuf), &dx);
    assert_non_null(dx);
  }
}

static void test_registry(void **state) {
  (void)state;
  const char *with[] = {"Sum", "Mean", "Max", "Min", "Prod"};
  for (int i = 0; i < 5; i++) assert_true(nb_has_gradient(with[i]));
  assert_false(nb_has_gradient("ArgMax"));
  /* registered as "no gradient": the path through ArgMax is cut silently */
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *x = nb_placeholder(c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *y = nb_cast(c, nb_argmax(c, x, 0, NB_I64), NB_F64), *dx = NULL;
  assert_int_equal(nb_gradients(c, &y, 1, &x, 1, NULL, &dx), NB_OK);
  assert_null(dx);
  nb_ctx_free(c);
  nb_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_sum, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mean, setup, teardown),
      cmocka_unit_test_setup_teardown(test_max_min_ties, setup, teardown),
      cmocka_unit_test_setup_teardown(test_max_min, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prod_zeros, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prod, setup, teardown),
      cmocka_unit_test_setup_teardown(test_prod_unknown_shape, setup, teardown),
      cmocka_unit_test_setup_teardown(test_axis_fed, setup, teardown),
      cmocka_unit_test(test_registry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
