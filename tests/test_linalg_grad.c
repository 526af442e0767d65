/* Gradients of MatMul, _MatMulAdd and BatchMatMulV2: the four transpose/adjoint cases, batch
   broadcasting (rank mismatch, size-1 batch dims), static and run-time shapes, against
   hand values and float64 central differences, first and second order. */
#include "graphutil.h"

/* Deterministic values with no special structure. */
static void fill_values(double *v, int64_t n, double seed) {
  for (int64_t i = 0; i < n; i++) v[i] = sin(seed + 1.7 * (double)i) + 0.1 * (double)(i % 3);
}

typedef struct product_arg {
  bool batch, t1, t2, acc;
} product_arg;

/* MatMul or BatchMatMulV2 of x[0], x[1] with the two flags; with acc, x[2] + MatMul (_MatMulAdd). */
static nb_tensor *build_product(gu_fixture *f, nb_tensor *const *x, const void *arg) {
  const product_arg *p = arg;
  if (p->acc) return nb_matmul_add(f->c, x[0], x[1], p->t1, p->t2, x[2]);
  return p->batch ? nb_batch_matmul(f->c, x[0], x[1], p->t1, p->t2) : nb_matmul(f->c, x[0], x[1], p->t1, p->t2);
}

/* Checks d/da, d/db of op(a, b) (MatMul or BatchMatMulV2 with the two flags), then the
   second order w.r.t. a, b and the upstream gradient, with static shapes or all dims
   unknown. */
static void check_product(bool batch, int ra, const int64_t *sa, int rb, const int64_t *sb, bool t1, bool t2,
                          bool dynamic) {
  double av[64], bv[64];
  fill_values(av, gu_count(ra, sa), 0.3);
  fill_values(bv, gu_count(rb, sb), 1.1);
  const product_arg arg = {batch, t1, t2, false};
  gu_check_grad(
      &(gu_grad_case){.build = build_product,
                      .arg = &arg,
                      .n = 2,
                      .in = {{.rank = ra, .shape = sa, .values = av}, {.rank = rb, .shape = sb, .values = bv}},
                      .dynamic = dynamic,
                      .static_dx = true});
}

/* dy = ones: dA = ones B^T, dB = A^T ones, by hand. */
static void test_matmul_values(void **state) {
  gu_fixture *f = *state;
  nb_tensor *a = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "a");
  nb_tensor *b = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(3, 2), "b");
  nb_tensor *y = nb_matmul(f->c, a, b, false, false), *xs[2] = {a, b}, *dxs[2];
  assert_int_equal(nb_gradients(f->c, &y, 1, xs, 2, NULL, dxs), NB_OK);
  nb_tensor *vals[2] = {tu_make(f->e, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(1, 2, 3, 4, 5, 6)),
                        tu_make(f->e, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(1, -1, 2, 0, 0.5, 3))};
  nb_tensor *da = gu_run(f, xs, vals, 2, dxs[0]), *db = gu_run(f, xs, vals, 2, dxs[1]);
  tu_check(da, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(0, 2, 3.5, 0, 2, 3.5), 0);
  tu_check(db, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(5, 5, 7, 7, 9, 9), 0);
  nb_tensor_free(da);
  nb_tensor_free(db);
}

static void test_matmul(void **state) {
  (void)state;
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    const int64_t sa[2] = {ta ? 3 : 2, ta ? 2 : 3}, sb[2] = {tb ? 4 : 3, tb ? 3 : 4};
    for (int dynamic = 0; dynamic < 2; dynamic++) check_product(false, 2, sa, 2, sb, ta, tb, dynamic);
  }
  check_product(false, 2, TU_SHAPE(1, 1), 2, TU_SHAPE(1, 1), false, false, false); /* 1x1 */
}

/* acc + op(a) op(b): d acc = dy, a and b as MatMul's, to second order, for the four
   transpose cases with static and unknown shapes. */
static void test_matmul_add(void **state) {
  (void)state;
  double av[6], bv[12], cv[8];
  fill_values(av, 6, 0.3);
  fill_values(bv, 12, 1.1);
  fill_values(cv, 8, 2.9);
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    const int64_t sa[2] = {ta ? 3 : 2, ta ? 2 : 3}, sb[2] = {tb ? 4 : 3, tb ? 3 : 4}, sc[2] = {2, 4};
    const product_arg arg = {false, ta, tb, true};
    for (int dynamic = 0; dynamic < 2; dynamic++)
      gu_check_grad(&(gu_grad_case){.name = "_MatMulAdd",
                                    .build = build_product,
                                    .arg = &arg,
                                    .n = 3,
                                    .in = {{.rank = 2, .shape = sa, .values = av},
                                           {.rank = 2, .shape = sb, .values = bv},
                                           {.rank = 2, .shape = sc, .values = cv}},
                                    .dynamic = dynamic,
                                    .static_dx = true});
  }
}

static void test_batch_matmul(void **state) {
  (void)state;
  for (int t = 0; t < 4; t++) {
    bool ax = t & 1, ay = t & 2;
    const int64_t sx[3] = {2, ax ? 3 : 2, ax ? 2 : 3}, sy[3] = {2, ay ? 2 : 3, ay ? 3 : 2};
    for (int dynamic = 0; dynamic < 2; dynamic++) check_product(true, 3, sx, 3, sy, ax, ay, dynamic);
  }
}

/* Batch dims broadcast: the gradient is summed over them back to each input's shape. */
static void test_batch_matmul_broadcast(void **state) {
  (void)state;
  for (int dynamic = 0; dynamic < 2; dynamic++) {
    check_product(true, 3, TU_SHAPE(2, 2, 3), 2, TU_SHAPE(3, 2), false, false, dynamic);         /* rank mismatch */
    check_product(true, 4, TU_SHAPE(2, 1, 2, 3), 4, TU_SHAPE(1, 3, 2, 3), false, true, dynamic); /* size-1 dims */
    check_product(true, 2, TU_SHAPE(3, 2), 3, TU_SHAPE(2, 3, 2), true, false, dynamic);
  }
}

/* Summing over the broadcast batch dim by hand: x [2,1,2] ones, y [2,1] = [1,2]. */
static void test_batch_matmul_broadcast_values(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(2, 1, 2), "x");
  nb_tensor *y = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 1), "y");
  nb_tensor *z = nb_batch_matmul(f->c, x, y, false, false), *xs[2] = {x, y}, *dxs[2];
  assert_int_equal(nb_gradients(f->c, &z, 1, xs, 2, NULL, dxs), NB_OK);
  nb_tensor *vals[2] = {tu_make(f->e, NB_F64, 3, TU_SHAPE(2, 1, 2), TU_VALS(1, 2, 3, 4)),
                        tu_make(f->e, NB_F64, 2, TU_SHAPE(2, 1), TU_VALS(1, 2))};
  nb_tensor *dx = gu_run(f, xs, vals, 2, dxs[0]), *dy = gu_run(f, xs, vals, 2, dxs[1]);
  tu_check(dx, NB_F64, 3, TU_SHAPE(2, 1, 2), TU_VALS(1, 2, 1, 2), 0);
  tu_check(dy, NB_F64, 2, TU_SHAPE(2, 1), TU_VALS(4, 6), 0); /* x summed over the batch */
  nb_tensor_free(dx);
  nb_tensor_free(dy);
}

static void test_registry(void **state) {
  (void)state;
  assert_true(nb_has_gradient("MatMul"));
  assert_true(nb_has_gradient("BatchMatMulV2"));
  assert_true(nb_has_gradient("_MatMulAdd"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_matmul_values, gu_setup, gu_teardown),
      cmocka_unit_test(test_matmul),
      cmocka_unit_test(test_matmul_add),
      cmocka_unit_test(test_batch_matmul),
      cmocka_unit_test(test_batch_matmul_broadcast),
      cmocka_unit_test_setup_teardown(test_batch_matmul_broadcast_values, gu_setup, gu_teardown),
      cmocka_unit_test(test_registry),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
