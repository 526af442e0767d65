/* Gradients of composite functions against TensorFlow's (tests/golden/grad_golden.h,
   made by tests/golden/make_grad_golden.py). */
#include "graphutil.h"

#include "golden/grad_golden.h"

#define N(a) ((int64_t)(sizeof(a) / sizeof *(a)))

typedef struct input {
  int rank;
  int64_t shape[3];
  const double *value, *grad;
  int64_t n;
} input;

/* Builds y = fn(xs) from placeholders, then checks y and every gradient against TF. */
static void check(gu_fixture *f, nb_tensor *(*fn)(nb_ctx *, nb_tensor *const *), const input *in, int n,
                  double want_y) {
  nb_tensor *xs[4], *vals[4], *dxs[4], *fetch[5], *out[5];
  for (int i = 0; i < n; i++) {
    xs[i] = nb_placeholder(f->c, NB_F64, in[i].rank, in[i].shape, NULL);
    vals[i] = nb_tensor_from(f->e, NB_F64, in[i].rank, in[i].shape, in[i].value);
  }
  nb_tensor *y = fn(f->c, xs);
  if (nb_gradients(f->c, &y, 1, xs, n, NULL, dxs)) fail_msg("nb_gradients: %s", nb_error(f->c));
  fetch[0] = y;
  for (int i = 0; i < n; i++) fetch[i + 1] = dxs[i];
  if (nb_run(f->s, xs, vals, n, fetch, n + 1, out)) fail_msg("nb_run: %s", nb_session_error(f->s));
  tu_check_vals(out[0], &want_y, 1e-12);
  for (int i = 0; i < n; i++) {
    assert_int_equal(nb_num_elements(out[i + 1]), in[i].n);
    tu_check_vals(out[i + 1], in[i].grad, 1e-10);
  }
  for (int i = 0; i <= n; i++) nb_tensor_free(out[i]);
}

static nb_tensor *f1(nb_ctx *c, nb_tensor *const *x) {
  return nb_sum(c, nb_square(c, nb_tanh(c, nb_add(c, nb_matmul(c, x[0], x[1], false, false), x[2]))), NULL, 0, false);
}

static nb_tensor *f2(nb_ctx *c, nb_tensor *const *x) {
  nb_tensor *one = nb_scalar(c, NB_F64, 1);
  nb_tensor *num = nb_mul(c, nb_sigmoid(c, nb_mul(c, x[0], x[1])), nb_log1p(c, nb_exp(c, x[0])));
  return nb_sum(c, nb_real_div(c, num, nb_add(c, one, nb_square(c, x[0]))), NULL, 0, false);
}

static nb_tensor *f3(nb_ctx *c, nb_tensor *const *x) {
  const int a0[1] = {0}, a1[1] = {1};
  nb_tensor *p = nb_sum(c, nb_prod(c, x[0], a1, 1, false), NULL, 0, false);
  nb_tensor *m = nb_sum(c, nb_square(c, nb_max(c, x[0], a0, 1, false)), NULL, 0, false);
  return nb_add(c, nb_add(c, p, m), nb_mean(c, x[0], NULL, 0, false));
}

static nb_tensor *f4(nb_ctx *c, nb_tensor *const *x) {
  return nb_sum(c, nb_sin(c, nb_batch_matmul(c, x[0], x[1], false, false)), NULL, 0, false);
}

static nb_tensor *f5(nb_ctx *c, nb_tensor *const *x) {
  const int64_t idx[4] = {0, 2, 2, 4};
  nb_tensor *g = nb_gather(c, x[0], nb_tensor_from(c, NB_I64, 1, (const int64_t[]){4}, idx), 0, 0);
  nb_tensor *rows = nb_slice(c, x[0], (const int64_t[]){1, 0}, (const int64_t[]){2, -1}, 2);
  nb_tensor *cat = nb_concat(c, (nb_tensor *[]){g, rows}, 2, 0);
  nb_slice_masks m = {.end_mask = 3};
  nb_tensor *s =
      nb_strided_slice(c, cat, (const int64_t[]){0, 1}, (const int64_t[]){0, 0}, (const int64_t[]){2, 1}, 2, &m);
  return nb_sum(c, nb_pow(c, s, nb_scalar(c, NB_F64, 3)), NULL, 0, false);
}

static void test_dense_tanh(void **state) {
  input in[3] = {
      {2, {3, 4}, f1_x0, f1_dx0, N(f1_dx0)}, {2, {4, 2}, f1_x1, f1_dx1, N(f1_dx1)}, {1, {2}, f1_x2, f1_dx2, N(f1_dx2)}};
  check(*state, f1, in, 3, f1_y);
}

static void test_broadcast_mix(void **state) {
  input in[2] = {{2, {2, 3}, f2_x0, f2_dx0, N(f2_dx0)}, {1, {3}, f2_x1, f2_dx1, N(f2_dx1)}};
  check(*state, f2, in, 2, f2_y);
}

static void test_reductions_with_zero(void **state) {
  input in[1] = {{2, {2, 3}, f3_x0, f3_dx0, N(f3_dx0)}};
  check(*state, f3, in, 1, f3_y);
}

static void test_batch_matmul_broadcast(void **state) {
  input in[2] = {{3, {2, 2, 3}, f4_x0, f4_dx0, N(f4_dx0)}, {2, {3, 2}, f4_x1, f4_dx1, N(f4_dx1)}};
  check(*state, f4, in, 2, f4_y);
}

static void test_gather_concat_slice(void **state) {
  input in[1] = {{2, {5, 3}, f5_x0, f5_dx0, N(f5_dx0)}};
  check(*state, f5, in, 1, f5_y);
}

/* Hessian-vector product of f1 with respect to w, against TF's nested tapes. */
static void test_hvp(void **state) {
  gu_fixture *f = *state;
  const int64_t sx[2] = {3, 4}, sw[2] = {4, 2}, sb[1] = {2};
  nb_tensor *xs[3] = {nb_placeholder(f->c, NB_F64, 2, sx, "x"), nb_placeholder(f->c, NB_F64, 2, sw, "w"),
                      nb_placeholder(f->c, NB_F64, 1, sb, "b")};
  nb_tensor *vals[3] = {nb_tensor_from(f->e, NB_F64, 2, sx, f1_x0), nb_tensor_from(f->e, NB_F64, 2, sw, f1_x1),
                        nb_tensor_from(f->e, NB_F64, 1, sb, f1_x2)};
  nb_tensor *y = f1(f->c, xs), *g, *hv;
  assert_int_equal(nb_gradients(f->c, &y, 1, &xs[1], 1, NULL, &g), NB_OK);
  nb_tensor *v = nb_tensor_from(f->c, NB_F64, 2, sw, f1_hvp_v);
  nb_tensor *gv = nb_sum(f->c, nb_mul(f->c, g, v), NULL, 0, false);
  assert_int_equal(nb_gradients(f->c, &gv, 1, &xs[1], 1, NULL, &hv), NB_OK);
  nb_tensor *out = gu_run(f, xs, vals, 3, hv);
  tu_check_vals(out, f1_hvp_w, 1e-10);
  nb_tensor_free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_dense_tanh, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_broadcast_mix, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_reductions_with_zero, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_batch_matmul_broadcast, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_gather_concat_slice, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_hvp, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests_name("golden_grad", tests, NULL, NULL);
}
