/* Stateless random numbers, dropout and initializers: TF's exact values
   (tests/golden/random_golden.h, made by tests/golden/make_random_golden.py), the same
   bits for any thread count and in graphs, the distributions' statistics, and every input
   error. */
#include "graphutil.h"

#include "golden/random_golden.h"

#define N(a) ((int64_t)(sizeof(a) / sizeof *(a)))

/* ---- TensorFlow's values -------------------------------------------------------------- */

typedef struct golden_case {
  const char *op;
  int rank;
  int64_t shape[2];
  int64_t seed[2];
  nb_dtype seed_dtype, dtype;
  const double *want;
  int64_t n;
} golden_case;

#define G(op, r, s0, s1, a, b, st, t, name) {op, r, {s0, s1}, {a, b}, st, t, name, N(name)}

static const golden_case golden_cases[] = {
    G("StatelessRandomUniform", 2, 3, 5, 1, 2, NB_I64, NB_F32, uniform_f32),
    G("StatelessRandomUniform", 1, 7, 0, 1, 2, NB_I64, NB_F64, uniform_f64),
    G("StatelessRandomUniform", 1, 6, 0, -3, 7, NB_I32, NB_F32, uniform_i32_seed),
    G("StatelessRandomUniform", 1, 5, 0, 0x123456789ABCDEF, -0x0FEDCBA987654321, NB_I64, NB_F32, uniform_big_seed),
    G("StatelessRandomNormal", 2, 2, 5, 4, 5, NB_I64, NB_F32, normal_f32),
    G("StatelessRandomNormal", 1, 5, 0, 4, 5, NB_I64, NB_F64, normal_f64),
    G("StatelessTruncatedNormal", 1, 9, 0, 6, 7, NB_I64, NB_F32, truncated_f32),
    G("StatelessTruncatedNormal", 1, 5, 0, 6, 7, NB_I64, NB_F64, truncated_f64),
    G("StatelessTruncatedNormal", 2, 2, 150, 8, 9, NB_I32, NB_F32, truncated_many),
};

/* Every element equals TF's bits (float32 goldens are printed with 9 digits: exact). */
static void check_bits(const nb_tensor *y, nb_dtype t, const double *want, int64_t n) {
  assert_int_equal(nb_num_elements(y), n);
  for (int64_t i = 0; i < n; i++) {
    double got = nb_item(y, i), w = t == NB_F32 ? (double)(float)want[i] : want[i];
    if (got != w) fail_msg("element %lld: got %.17g, TF has %.17g", (long long)i, got, w);
  }
}

static void test_golden_bits(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < (int)N(golden_cases); i++) {
    const golden_case *g = &golden_cases[i];
    nb_tensor *in[2] = {tu_make(c, NB_I32, 1, TU_SHAPE(g->rank), (const double[]){g->shape[0], g->shape[1]}),
                        nb_tensor_from(c, NB_I64, 1, TU_SHAPE(2), g->seed)};
    if (g->seed_dtype == NB_I32) in[1] = nb_cast(c, in[1], NB_I32);
    nb_attr dtype = nb_attr_type("dtype", g->dtype);
    nb_tensor *y = NULL;
    assert_int_equal(nb_op(c, g->op, in, 2, &dtype, 1, &y, 1), NB_OK);
    tu_check_shape(y, g->dtype, g->rank, g->shape);
    check_bits(y, g->dtype, g->want, g->n);
  }
}

/* The same values through the wrappers, and in a graph run by a session. */
static void test_wrappers_and_graphs_agree(void **state) {
  nb_ctx *c = *state;
  check_bits(nb_stateless_random_normal(c, TU_SHAPE(2, 5), 2, (const int64_t[]){4, 5}, NB_F32), NB_F32, normal_f32,
             N(normal_f32));
  check_bits(nb_stateless_truncated_normal(c, TU_SHAPE(5), 1, (const int64_t[]){6, 7}, NB_F64), NB_F64,
             truncated_f64, N(truncated_f64));
  gu_fixture f;
  assert_true(gu_open(&f));
  nb_tensor *y = nb_stateless_random_uniform(f.c, TU_SHAPE(3, 5), 2, (const int64_t[]){1, 2}, NB_F32), *out;
  assert_true(nb_is_symbolic(y));
  tu_check_shape(y, NB_F32, 2, TU_SHAPE(3, 5));
  assert_int_equal(nb_run(f.s, NULL, NULL, 0, &y, 1, &out), NB_OK);
  check_bits(out, NB_F32, uniform_f32, N(uniform_f32));
  nb_tensor_free(out);
  gu_close(&f);
}

/* Groups are independent: one thread and two give the same bits. */
static void test_thread_count_does_not_change_bits(void **state) {
  nb_ctx *c = *state;
  enum { SIZE = 200003 }; /* odd: a partial last group */
  static float a[SIZE], b[SIZE];
  nb_tensor *(*const draw[3])(nb_ctx *, const int64_t *, int, const int64_t *, nb_dtype) = {
      nb_stateless_random_uniform, nb_stateless_random_normal, nb_stateless_truncated_normal};
  for (int o = 0; o < 3; o++) {
    nb_ctx_set_threads(c, 1);
    assert_int_equal(nb_read(draw[o](c, TU_SHAPE(SIZE), 1, (const int64_t[]){9, 10}, NB_F32), a, sizeof a), NB_OK);
    nb_ctx_set_threads(c, 2); /* the most this machine allows */
    assert_int_equal(nb_read(draw[o](c, TU_SHAPE(SIZE), 1, (const int64_t[]){9, 10}, NB_F32), b, sizeof b), NB_OK);
    assert_memory_equal(a, b, sizeof a);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_golden_bits, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_wrappers_and_graphs_agree, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_thread_count_does_not_change_bits, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
