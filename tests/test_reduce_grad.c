/* Gradients of the reductions: Sum, Mean, Max, Min, Prod (ArgMax has none), checked
   against hand values and float64 central differences, first and second order, with
   static and run-time shapes. */
#include "graphutil.h"

/* x reduced by `type` over the const axes (NULL: none). */
static nb_tensor *reduce(gu_fixture *f, const char *type, nb_tensor *x, const int *axes, int naxes, bool keep) {
  nb_tensor *in[2] = {x, nb_tensor_from(f->e, NB_I32, 1, (int64_t[]){axes ? naxes : 0}, axes)}, *y = NULL;
  nb_attr a = nb_attr_bool("keep_dims", keep);
  nb_op(f->c, type, in, 2, &a, 1, &y, 1);
  nb_tensor_free(in[1]);
  return y;
}

typedef struct reduce_arg {
  const char *type;
  const int *axes;
  int naxes;
  bool keep;
} reduce_arg;

static nb_tensor *build_reduce(gu_fixture *f, nb_tensor *const *x, const void *arg) {
  const reduce_arg *a = arg;
  return reduce(f, a->type, x[0], a->axes, a->naxes, a->keep);
}

/* Checks the first and second order gradients of `type` reduced over axes, for x of the
   given values, with x's static shape; then the first order with every dim unknown. */
static void check_reduction(const char *type, int rank, const int64_t *shape, const double *xv, const int *axes,
                            int naxes, bool keep) {
  const reduce_arg arg = {type, axes, naxes, keep};
  for (int dynamic = 0; dynamic < 2; dynamic++)
    gu_check_grad(&(gu_grad_case){.build = build_reduce,
                                  .arg = &arg,
                                  .n = 1,
                                  .in = {{.rank = rank, .shape = shape, .values = xv}},
                                  .dynamic = dynamic,
                                  .first_only = dynamic,
                                  .static_dx = true});
}

/* dx of reducing x (static shape) with upstream ones, run at xv. */
static nb_tensor *grad_at(gu_fixture *f, const char *type, int rank, const int64_t *shape, const double *xv,
                          const int *axes, int naxes, bool keep) {
  nb_tensor *x = nb_placeholder(f->c, NB_F64, rank, shape, NULL);
  nb_tensor *y = reduce(f, type, x, axes, naxes, keep), *dx = NULL;
  if (nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx)) fail_msg("nb_gradients: %s", nb_error(f->c));
  return gu_run1(f, x, tu_make(f->e, NB_F64, rank, shape, xv), dx);
}

static const double X24[24] = {0.3,  -1.2, 0.7,  1.9,  -0.4, 0.25, 1.1,  -0.8, 0.45, 1.6, -1.5, 0.9,
                               -0.6, 1.3,  0.05, -1.1, 0.8,  1.45, -0.3, 0.6,  -1.7, 1.2, 0.35, -0.9};

static void test_sum(void **state) {
  gu_fixture *f = *state;
  nb_tensor *dx = grad_at(f, "Sum", 2, TU_SHAPE(2, 3), X24, (int[]){1}, 1, false);
  tu_check(dx, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 1, 1, 1, 1, 1), 0);
  nb_tensor_free(dx);
  /* the incoming gradient lands on every reduced element */
  check_reduction("Sum", 3, TU_SHAPE(2, 3, 4), X24, (int[]){1}, 1, false);
  check_reduction("Sum", 3, TU_SHAPE(2, 3, 4), X24, (int[]){-1, 0}, 2, true);
  check_reduction("Sum", 3, TU_SHAPE(2, 3, 4), X24, (int[]){2, -1, 0}, 3, false); /* repeated */
  check_reduction("Sum", 3, TU_SHAPE(2, 3, 4), X24, NULL, 0, false);              /* no axes */
  check_reduction("Sum", 3, TU_SHAPE(2, 1, 3), X24, (int[]){0, 1, 2}, 3, false);  /* all, size-1 */
  check_reduction("Sum", 0, NULL, X24, NULL, 0, false);                           /* scalar */
}

static void test_mean(void **state) {
  gu_fixture *f = *state;
  nb_tensor *dx = grad_at(f, "Mean", 2, TU_SHAPE(2, 3), X24, (int[]){1}, 1, false);
  double t = 1.0 / 3;
  tu_check(dx, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(t, t, t, t, t, t), 1e-12);
  nb_tensor_free(dx);
  check_reduction("Mean", 3, TU_SHAPE(2, 3, 4), X24, (int[]){1}, 1, false);
  check_reduction("Mean", 3, TU_SHAPE(2, 3, 4), X24, (int[]){0, -1}, 2, true);
  check_reduction("Mean", 2, TU_SHAPE(4, 6), X24, (int[]){0, 1}, 2, false);
  check_reduction("Mean", 1, TU_SHAPE(5), X24, (int[]){0}, 1, true);
}

/* Ties split the gradient equally (TF's choice). */
static void test_max_min_ties(void **state) {
  gu_fixture *f = *state;
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
  (void)state;
  check_reduction("Max", 3, TU_SHAPE(2, 3, 4), X24, (int[]){1}, 1, false);
  check_reduction("Max", 3, TU_SHAPE(2, 3, 4), X24, (int[]){0, 2}, 2, true);
  check_reduction("Min", 3, TU_SHAPE(2, 3, 4), X24, (int[]){-2}, 1, false);
  check_reduction("Min", 2, TU_SHAPE(4, 6), X24, NULL, 0, true);
  check_reduction("Max", 2, TU_SHAPE(1, 6), X24, (int[]){0}, 1, false); /* size-1 axis */
}

/* The product of the others, exact with zeros. */
static void test_prod_zeros(void **state) {
  gu_fixture *f = *state;
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
  (void)state;
  const struct {
    int rank;
    int64_t shape[3];
    int axes[3], naxes;
    bool keep;
  } cases[] = {{3, {2, 3, 4}, {1}, 1, false}, {3, {2, 3, 4}, {0, 2}, 2, true}, {3, {2, 3, 4}, {-1}, 1, false},
               {2, {5, 2}, {0}, 1, false},    {2, {7, 1}, {0, 1}, 2, false},   {1, {1}, {0}, 1, false},
               {2, {3, 4}, {0, 0}, 2, true},  {2, {3, 4}, {0}, 0, false},      {3, {2, 3, 4}, {2, 0}, 2, false}};
  double xz[24];
  memcpy(xz, X24, sizeof xz);
  xz[3] = 0; /* a zero inside a reduced group */
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const reduce_arg arg = {"Prod", cases[k].axes, cases[k].naxes, cases[k].keep};
    gu_grad_case g = {.build = build_reduce,
                      .arg = &arg,
                      .n = 1,
                      .in = {{.rank = cases[k].rank, .shape = cases[k].shape, .values = xz}},
                      .static_dx = true};
    gu_check_grad(&g); /* static layout: exact at zeros to the second order */
    g.dynamic = true;  /* layout at run time: exact at zeros to the first order */
    g.first_only = true;
    gu_check_grad(&g);
    g.in[0].values = X24; /* and without zeros, the second order too */
    g.first_only = false;
    gu_check_grad(&g);
  }
}

/* x's shape known only at run time: the layout is computed by ops, still exact at zeros. */
static void test_prod_unknown_shape(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(-1, 3), "x");
  nb_tensor *y = reduce(f, "Prod", x, (int[]){0}, 1, false), *dx = NULL;
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_OK);
  nb_tensor *xv = tu_make(f->e, NB_F64, 2, TU_SHAPE(3, 3), TU_VALS(0, 2, 3, 4, 0, 6, 1, 5, 2));
  nb_tensor *got = gu_run1(f, x, xv, dx);
  tu_check(got, NB_F64, 2, TU_SHAPE(3, 3), TU_VALS(4, 0, 12, 0, 10, 6, 0, 0, 18), 0);
  nb_tensor_free(got);
  /* unknown rank, reducing axes -1 and 0 of a [2, 1, 2] value: one group of all four
     values, one of them zero */
  nb_tensor *u = NULL;
  nb_attr f64 = nb_attr_type("dtype", NB_F64); /* no shape attr: unknown rank */
  assert_int_equal(nb_op(f->c, "Placeholder", NULL, 0, &f64, 1, &u, 1), NB_OK);
  assert_int_equal(nb_rank(u), -1);
  nb_tensor *yu = reduce(f, "Prod", u, (int[]){-1, 0}, 2, true), *du = NULL;
  assert_int_equal(nb_gradients(f->c, &yu, 1, &u, 1, NULL, &du), NB_OK);
  got = gu_run1(f, u, tu_make(f->e, NB_F64, 3, TU_SHAPE(2, 1, 2), TU_VALS(2, 0, 3, 5)), du);
  tu_check(got, NB_F64, 3, TU_SHAPE(2, 1, 2), TU_VALS(0, 30, 0, 0), 0);
  nb_tensor_free(got);
  /* an empty x: the gradient is empty */
  nb_tensor *e = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(0, 3), "e");
  nb_tensor *ye = reduce(f, "Prod", e, (int[]){0}, 1, false);
  assert_int_equal(nb_gradients(f->c, &ye, 1, &e, 1, NULL, &dx), NB_OK);
  tu_check_shape(dx, NB_F64, 2, TU_SHAPE(0, 3));
  nb_tensor *ed = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(-1, 3), "ed");
  nb_tensor *yed = reduce(f, "Prod", ed, (int[]){0}, 1, false);
  assert_int_equal(nb_gradients(f->c, &yed, 1, &ed, 1, NULL, &dx), NB_OK);
  got = gu_run1(f, ed, tu_make(f->e, NB_F64, 2, TU_SHAPE(0, 3), NULL), dx);
  tu_check_shape(got, NB_F64, 2, TU_SHAPE(0, 3));
  nb_tensor_free(got);
}

/* ---- Cumsum, Cumprod ------------------------------------------------------------------------- */

typedef struct scan_arg {
  bool prod;
  int axis;
  bool exclusive, reverse;
} scan_arg;

static nb_tensor *build_scan(gu_fixture *f, nb_tensor *const *x, const void *arg) {
  const scan_arg *a = arg;
  return (a->prod ? nb_cumprod : nb_cumsum)(f->c, x[0], a->axis, a->exclusive, a->reverse);
}

static void check_scan(const scan_arg *a, int rank, const int64_t *shape, const double *xv, const double *want) {
  for (int dynamic = 0; dynamic < 2; dynamic++)
    gu_check_grad(&(gu_grad_case){.build = build_scan,
                                  .arg = a,
                                  .n = 1,
                                  .in = {{.rank = rank, .shape = shape, .values = xv}},
                                  .dynamic = dynamic,
                                  .want = {want},
                                  .static_dx = true});
}

/* With W = 1, 2, 3: dx is W's scan from the other end (sums), and for products
   dx_i = sum over the y_j covering x_i of W_j * y_j / x_i. */
static void test_scans(void **state) {
  (void)state;
  const double *x = TU_VALS(1, 2, 3);
  check_scan(&(scan_arg){false, 0, false, false}, 1, TU_SHAPE(3), x, TU_VALS(6, 5, 3));
  check_scan(&(scan_arg){false, 0, true, false}, 1, TU_SHAPE(3), x, TU_VALS(5, 3, 0));
  check_scan(&(scan_arg){false, -1, false, true}, 1, TU_SHAPE(3), x, TU_VALS(1, 3, 6));
  check_scan(&(scan_arg){false, 0, true, true}, 1, TU_SHAPE(3), x, TU_VALS(0, 1, 3));
  /* y = (1, 2, 6): W * y = (1, 4, 18), summed from the end (23, 22, 18), over x */
  check_scan(&(scan_arg){true, 0, false, false}, 1, TU_SHAPE(3), x, TU_VALS(23, 11, 6));
  /* exclusive y = (1, 1, 2): W * y = (1, 2, 6); exclusive sums from the end (8, 6, 0), over x */
  check_scan(&(scan_arg){true, 0, true, false}, 1, TU_SHAPE(3), x, TU_VALS(8, 3, 0));
  /* reverse y = (6, 6, 3): W * y = (6, 12, 9), summed from the start (6, 18, 27), over x */
  check_scan(&(scan_arg){true, 0, false, true}, 1, TU_SHAPE(3), x, TU_VALS(6, 9, 9));
  /* along axis 1 of [2, 2], size-1 and rank-3 layouts, differences only */
  check_scan(&(scan_arg){true, 1, true, true}, 2, TU_SHAPE(2, 2), TU_VALS(0.5, -1.5, 2, 0.75), NULL);
  check_scan(&(scan_arg){false, -2, false, true}, 3, TU_SHAPE(2, 3, 2), X24, NULL);
  check_scan(&(scan_arg){true, 1, false, false}, 3, TU_SHAPE(2, 3, 2), X24, NULL);
  check_scan(&(scan_arg){true, 0, false, false}, 2, TU_SHAPE(1, 3), X24, NULL);
}

/* The axis itself fed at run time (a placeholder, negative value): the kept-dims shape is
   computed by ops at run time. */
static nb_tensor *build_reduce_fed_axis(gu_fixture *f, nb_tensor *const *x, const void *arg) {
  nb_tensor *y = NULL;
  nb_attr a = nb_attr_bool("keep_dims", false);
  assert_int_equal(nb_op(f->c, arg, x, 2, &a, 1, &y, 1), NB_OK);
  assert_int_equal(nb_rank(y), -1);
  return y;
}

static void test_axis_fed(void **state) {
  (void)state;
  const char *types[] = {"Sum", "Mean", "Max", "Min", "Prod"};
  const double wbuf[8] = {0.5, -1, 2, 0.25, 1.5, -0.75, 3, 1};
  for (int t = 0; t < 5; t++)
    gu_check_grad(&(gu_grad_case){
        .build = build_reduce_fed_axis,
        .arg = types[t],
        .n = 2,
        .in = {{.rank = 3, .shape = TU_SHAPE(2, 3, 4), .values = X24},
               {.rank = 1, .shape = TU_SHAPE(1), .values = TU_VALS(-2), .fed_only = true, .dtype = NB_I64}},
        .w = wbuf,
        .first_only = true});
}

static void test_registry(void **state) {
  (void)state;
  const char *with[] = {"Sum", "Mean", "Max", "Min", "Prod", "Cumsum", "Cumprod"};
  for (int i = 0; i < 7; i++) assert_true(nb_has_gradient(with[i]));
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
      cmocka_unit_test_setup_teardown(test_sum, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_mean, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_max_min_ties, gu_setup, gu_teardown),
      cmocka_unit_test(test_max_min),
      cmocka_unit_test_setup_teardown(test_prod_zeros, gu_setup, gu_teardown),
      cmocka_unit_test(test_prod),
      cmocka_unit_test_setup_teardown(test_prod_unknown_shape, gu_setup, gu_teardown),
      cmocka_unit_test(test_scans),
      cmocka_unit_test(test_axis_fed),
      cmocka_unit_test(test_registry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
