/* Stateless random numbers, dropout and initializers: TF's exact values
   (tests/golden/random_golden.h, made by tests/golden/make_random_golden.py), the same
   bits for any thread count and in graphs, the distributions' statistics, and every input
   error. */
#include "graphutil.h"

#include "golden/random_golden.h"
#include "../src/core/core.h" /* the context's live handle count */

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

#define G(op, r, s0, s1, a, b, st, t, name) \
  { op, r, {s0, s1}, {a, b}, st, t, name, N(name) }

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
  check_bits(nb_stateless_truncated_normal(c, TU_SHAPE(5), 1, (const int64_t[]){6, 7}, NB_F64), NB_F64, truncated_f64,
             N(truncated_f64));
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
  tu_two_threads_or_skip(c);
  enum { SIZE = 200003 }; /* odd: a partial last group */
  static float a[SIZE], b[SIZE];
  nb_tensor *(*const draw[3])(nb_ctx *, const int64_t *, int, const int64_t *, nb_dtype) = {
      nb_stateless_random_uniform, nb_stateless_random_normal, nb_stateless_truncated_normal};
  for (int o = 0; o < 3; o++) {
    nb_ctx_set_threads(c, 1);
    assert_int_equal(nb_read(draw[o](c, TU_SHAPE(SIZE), 1, (const int64_t[]){9, 10}, NB_F32), a, sizeof a), NB_OK);
    nb_ctx_set_threads(c, 2);
    assert_int_equal(nb_read(draw[o](c, TU_SHAPE(SIZE), 1, (const int64_t[]){9, 10}, NB_F32), b, sizeof b), NB_OK);
    assert_memory_equal(a, b, sizeof a);
  }
}

/* ---- statistics --------------------------------------------------------------------------- */

typedef struct moments {
  double mean, var, min, max;
} moments;

static moments moments_of(const nb_tensor *y) {
  int64_t n = nb_num_elements(y);
  moments m = {0, 0, INFINITY, -INFINITY};
  for (int64_t i = 0; i < n; i++) {
    double v = nb_item(y, i);
    m.mean += v;
    m.min = v < m.min ? v : m.min;
    m.max = v > m.max ? v : m.max;
  }
  m.mean /= (double)n;
  for (int64_t i = 0; i < n; i++) m.var += (nb_item(y, i) - m.mean) * (nb_item(y, i) - m.mean);
  m.var /= (double)(n - 1);
  return m;
}

/* 10^5 draws: the bounds are several standard errors wide (mean: ~0.003, variance: ~0.005). */
static void test_distribution_statistics(void **state) {
  nb_ctx *c = *state;
  const int64_t seed[2] = {123, 456}, n = 100000;
  for (nb_dtype t = NB_F32; t <= NB_F64; t++) {
    moments u = moments_of(nb_stateless_random_uniform(c, &n, 1, seed, t));
    assert_true(fabs(u.mean - 0.5) < 0.005 && fabs(u.var - 1.0 / 12) < 0.002);
    assert_true(u.min >= 0 && u.max < 1);
    moments g = moments_of(nb_stateless_random_normal(c, &n, 1, seed, t));
    assert_true(fabs(g.mean) < 0.015 && fabs(g.var - 1) < 0.02);
    assert_true(g.min < -3.5 && g.max > 3.5);
    /* a standard normal truncated to (-2, 2): variance 1 - 4 phi(2) / (2 Phi(2) - 1) */
    moments tn = moments_of(nb_stateless_truncated_normal(c, &n, 1, seed, t));
    assert_true(fabs(tn.mean) < 0.012 && fabs(tn.var - 0.77374) < 0.015);
    assert_true(tn.min > -2 && tn.max < 2 && tn.min < -1.99 && tn.max > 1.99);
  }
}

/* The same seed repeats the values; another seed (either word) changes them. */
static void test_seeds(void **state) {
  nb_ctx *c = *state;
  const int64_t n = 64;
  float a[64], b[64];
  assert_int_equal(nb_read(nb_stateless_random_normal(c, &n, 1, (const int64_t[]){5, 6}, NB_F32), a, sizeof a), NB_OK);
  assert_int_equal(nb_read(nb_stateless_random_normal(c, &n, 1, (const int64_t[]){5, 6}, NB_F32), b, sizeof b), NB_OK);
  assert_memory_equal(a, b, sizeof a);
  for (int w = 0; w < 2; w++) {
    int64_t seed[2] = {5, 6};
    seed[w]++;
    assert_int_equal(nb_read(nb_stateless_random_normal(c, &n, 1, seed, NB_F32), b, sizeof b), NB_OK);
    int same = 0;
    for (int i = 0; i < 64; i++) same += a[i] == b[i];
    assert_true(same < 2);
  }
  /* an empty shape draws nothing; a scalar shape one value */
  tu_check_shape(nb_stateless_random_uniform(c, TU_SHAPE(3, 0), 2, (const int64_t[]){1, 2}, NB_F64), NB_F64, 2,
                 TU_SHAPE(3, 0));
  tu_check_shape(nb_stateless_random_uniform(c, NULL, 0, (const int64_t[]){1, 2}, NB_F64), NB_F64, 0, NULL);
}

/* The random ops have no gradient, as in TF: a path through one is cut. */
static void test_no_gradient(void **state) {
  (void)state;
  assert_false(nb_has_gradient("StatelessRandomUniform"));
  assert_false(nb_has_gradient("StatelessRandomNormal"));
  assert_false(nb_has_gradient("StatelessTruncatedNormal"));
  assert_int_equal(nb_register_gradient("StatelessRandomNormal", NULL), NB_INVALID);
}

/* ---- errors ------------------------------------------------------------------------------- */

static void expect_op_error(nb_ctx *c, nb_tensor *shape, nb_tensor *seed, const nb_attr *attrs, int nattrs,
                            nb_code code, const char *frag1, const char *frag2) {
  nb_tensor *in[2] = {shape, seed}, *y = NULL;
  assert_int_equal(nb_op(c, "StatelessRandomNormal", in, 2, attrs, nattrs, &y, 1), code);
  assert_null(y);
  tu_check_error(c, code, frag1, frag2);
}

static void test_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *shape = tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(2, 3));
  nb_tensor *seed = tu_make(c, NB_I64, 1, TU_SHAPE(2), TU_VALS(1, 2));
  expect_op_error(c, shape, tu_make(c, NB_I64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3)), NULL, 0, NB_SHAPE,
                  "StatelessRandomNormal: seed must have shape [2], not [3]", NULL);
  expect_op_error(c, shape, tu_make(c, NB_I64, 2, TU_SHAPE(1, 2), TU_VALS(1, 2)), NULL, 0, NB_SHAPE,
                  "seed must have shape [2], not [1,2]", NULL);
  expect_op_error(c, shape, tu_make(c, NB_F32, 1, TU_SHAPE(2), TU_VALS(1, 2)), NULL, 0, NB_DTYPE,
                  "input 1 has dtype float32", "int32, int64");
  expect_op_error(c, tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(2, -1)), seed, NULL, 0, NB_INVALID,
                  "Dimension -1 must be >= 0", "[2,-1]");
  expect_op_error(c, tu_make(c, NB_I32, 2, TU_SHAPE(1, 2), TU_VALS(2, 3)), seed, NULL, 0, NB_SHAPE,
                  "shape must be a vector, got shape [1,2]", NULL);
  nb_attr int_dtype = nb_attr_type("dtype", NB_I32);
  expect_op_error(c, shape, seed, &int_dtype, 1, NB_DTYPE, "attr dtype=int32 is not supported", "float32, float64");
  nb_attr tseed = nb_attr_type("Tseed", NB_I32);
  expect_op_error(c, shape, seed, &tseed, 1, NB_DTYPE, "attr Tseed=int32 does not match input 1 of dtype int64", NULL);
  assert_null(nb_stateless_random_uniform(c, TU_SHAPE(2), 1, NULL, NB_F32));
  tu_check_error(c, NB_INVALID, "StatelessRandomUniform: seed is NULL", NULL);
  assert_null(nb_stateless_truncated_normal(c, TU_SHAPE(-2), 1, (const int64_t[]){1, 2}, NB_F32));
  tu_check_error(c, NB_INVALID, "StatelessTruncatedNormal", "Dimension -2 must be >= 0");
}

/* A graph refuses a bad dtype attr, seed or shape when it is built, though the shape's
   values (so the result's dims and rank) are unknown: dtype 7 once gave a tensor of it. */
static void test_graph_validation(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->c;
  nb_tensor *shape = tu_unknown_dims(c, NB_I32, 1), *seed = tu_unknown_dims(c, NB_I64, 1), *y = NULL;
  nb_tensor *in[2] = {shape, seed};
  static const char *const ops[3] = {"StatelessRandomUniform", "StatelessRandomNormal", "StatelessTruncatedNormal"};
  nb_attr bad = nb_attr_type("dtype", (nb_dtype)7);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(nb_op(c, ops[i], in, 2, &bad, 1, &y, 1), NB_DTYPE);
    assert_null(y);
    tu_check_error(c, NB_DTYPE, ops[i], "attr dtype=7 is not a dtype");
  }
  nb_attr int_dtype = nb_attr_type("dtype", NB_I64);
  assert_int_equal(nb_op(c, "StatelessRandomNormal", in, 2, &int_dtype, 1, &y, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "StatelessRandomNormal (node",
                 "attr dtype=int64 is not supported; expected float32, float64");
  nb_attr tseed = nb_attr_type("Tseed", NB_I32);
  assert_int_equal(nb_op(c, "StatelessRandomUniform", in, 2, &tseed, 1, &y, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "StatelessRandomUniform (node", "attr Tseed=int32 does not match input 1 of dtype int64");
  nb_tensor *long_seed[2] = {shape, nb_placeholder(c, NB_I64, 1, TU_SHAPE(3), "seed3")};
  assert_int_equal(nb_op(c, "StatelessRandomUniform", long_seed, 2, NULL, 0, &y, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "StatelessRandomUniform (node", "seed must have shape [2], not [3]");
  nb_tensor *matrix_shape[2] = {tu_unknown_dims(c, NB_I32, 2), seed};
  assert_int_equal(nb_op(c, "StatelessTruncatedNormal", matrix_shape, 2, NULL, 0, &y, 1), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "StatelessTruncatedNormal (node", "shape must be a vector, got shape [-1,-1]");
  nb_tensor *float_seed[2] = {shape, tu_unknown_rank(c, NB_F32)};
  assert_int_equal(nb_op(c, "StatelessRandomNormal", float_seed, 2, NULL, 0, &y, 1), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "StatelessRandomNormal (node", "input 1 has dtype float32");
  /* a valid one builds, of the dtype asked for */
  nb_attr f64 = nb_attr_type("dtype", NB_F64);
  assert_int_equal(nb_op(c, "StatelessRandomNormal", in, 2, &f64, 1, &y, 1), NB_OK);
  assert_int_equal(nb_dtype_of(y), NB_F64);
}

/* ---- dropout ------------------------------------------------------------------------------ */

static void test_dropout_matches_tf(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F32, 2, TU_SHAPE(4, 5), dropout_x);
  check_bits(nb_dropout(c, x, 0.4, NULL, 0, (const int64_t[]){3, 4}), NB_F32, dropout_y, N(dropout_y));
  /* noise_shape [4, 1]: whole rows are kept or dropped */
  check_bits(nb_dropout(c, x, 0.5, TU_SHAPE(4, 1), 2, (const int64_t[]){3, 4}), NB_F32, dropout_rows_y,
             N(dropout_rows_y));
  assert_ptr_equal(nb_dropout(c, x, 0, NULL, 0, (const int64_t[]){3, 4}), x);
}

/* The gradient is the mask scaled by 1 / (1 - rate): dy/dx = y/x where x != 0. */
static void test_dropout_gradient(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 2, TU_SHAPE(4, 5), dropout_x), *dx;
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_dropout(c, x, 0.4, NULL, 0, (const int64_t[]){3, 4});
  assert_int_equal(nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx), NB_OK);
  nb_tape_end(t);
  int kept = 0;
  for (int i = 0; i < 20; i++) {
    double want = nb_item(y, i) / dropout_x[i];
    assert_true(fabs(nb_item(dx, i) - want) < 1e-15);
    assert_true(want == 0 || fabs(want - 1 / 0.6) < 1e-15);
    kept += want != 0;
  }
  assert_true(kept > 4 && kept < 20);
}

/* In a graph with x's dims unknown, the noise takes x's run-time shape. */
static void test_dropout_in_graph(void **state) {
  (void)state;
  gu_fixture f;
  assert_true(gu_open(&f));
  nb_tensor *x = nb_placeholder(f.c, NB_F32, 2, TU_SHAPE(-1, -1), "x"), *out;
  nb_tensor *y = nb_dropout(f.c, x, 0.4, NULL, 0, (const int64_t[]){3, 4});
  nb_tensor *xv = tu_make(f.e, NB_F32, 2, TU_SHAPE(4, 5), dropout_x);
  assert_int_equal(nb_run(f.s, &x, &xv, 1, &y, 1, &out), NB_OK);
  check_bits(out, NB_F32, dropout_y, N(dropout_y));
  nb_tensor_free(out);
  gu_close(&f);
}

static void test_dropout_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F32, 1, TU_SHAPE(3), NULL);
  const int64_t seed[2] = {1, 2};
  assert_null(nb_dropout(c, x, 1, NULL, 0, seed));
  tu_check_error(c, NB_INVALID, "dropout: rate must be", "[0, 1), got 1");
  assert_null(nb_dropout(c, x, -0.25, NULL, 0, seed));
  tu_check_error(c, NB_INVALID, "dropout", "got -0.25");
  assert_null(nb_dropout(c, x, NAN, NULL, 0, seed));
  tu_check_error(c, NB_INVALID, "dropout", "got nan");
  assert_null(nb_dropout(c, tu_make(c, NB_I32, 1, TU_SHAPE(3), NULL), 0.5, NULL, 0, seed));
  tu_check_error(c, NB_DTYPE, "dropout: x has dtype int32", NULL);
  assert_null(nb_dropout(c, x, 0.5, TU_SHAPE(2), 1, seed));
  tu_check_error(c, NB_SHAPE, "SelectV2", "[2]");
  assert_null(nb_dropout(c, NULL, 0.5, NULL, 0, seed));
  tu_check_error(c, NB_INVALID, "dropout: x is NULL", NULL);
}

/* ---- initializers ---------------------------------------------------------------------------- */

static void test_constant_initializers(void **state) {
  nb_ctx *c = *state;
  tu_check(nb_init_zeros(c, NB_F64, 2, TU_SHAPE(2, 2)), NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(0, 0, 0, 0), 0);
  tu_check(nb_init_ones(c, NB_F32, 1, TU_SHAPE(3)), NB_F32, 1, TU_SHAPE(3), TU_VALS(1, 1, 1), 0);
}

/* Conv kernel [3, 3, 16, 32]: receptive field 9, fan_in 144, fan_out 288, so the Glorot
   limit is sqrt(6 / 432); uniform on (-limit, limit) has variance limit^2 / 3. */
static void test_glorot_uniform(void **state) {
  nb_ctx *c = *state;
  const int64_t shape[4] = {3, 3, 16, 32}, seed[2] = {7, 8};
  nb_tensor *w = nb_init_glorot_uniform(c, NB_F32, 4, shape, seed);
  tu_check_shape(w, NB_F32, 4, shape);
  double limit = sqrt(6.0 / 432);
  moments m = moments_of(w);
  assert_true(m.min >= -limit && m.max < limit && m.min < -0.99 * limit && m.max > 0.99 * limit);
  assert_true(fabs(m.mean) < 0.02 * limit && fabs(m.var / (limit * limit / 3) - 1) < 0.05);
  /* reproducible */
  float a[4608], b[4608];
  assert_int_equal(nb_read(w, a, sizeof a), NB_OK);
  assert_int_equal(nb_read(nb_init_glorot_uniform(c, NB_F32, 4, shape, seed), b, sizeof b), NB_OK);
  assert_memory_equal(a, b, sizeof a);
  /* a matrix [in, out]: limit sqrt(6 / (in + out)) */
  m = moments_of(nb_init_glorot_uniform(c, NB_F64, 2, TU_SHAPE(100, 50), seed));
  assert_true(m.max < sqrt(6.0 / 150) && m.max > 0.99 * sqrt(6.0 / 150));
}

/* He normal on [3, 3, 64, 32]: fan_in 576; the truncated draws have the untruncated target
   stddev sqrt(2 / 576) and stay within 2 / .8796... of it. */
static void test_he_normal(void **state) {
  nb_ctx *c = *state;
  const int64_t shape[4] = {3, 3, 64, 32}, seed[2] = {9, 10};
  moments m = moments_of(nb_init_he_normal(c, NB_F32, 4, shape, seed));
  double target = sqrt(2.0 / 576), bound = 2 * target / .87962566103423978;
  assert_true(fabs(sqrt(m.var) / target - 1) < 0.02 && fabs(m.mean) < 0.02 * target);
  assert_true(m.min > -bound && m.max < bound && m.max > 0.99 * bound);
}

static void test_truncated_normal_initializer(void **state) {
  nb_ctx *c = *state;
  moments m = moments_of(nb_init_truncated_normal(c, NB_F64, 2, TU_SHAPE(200, 100), 3, 0.5, (const int64_t[]){1, 1}));
  assert_true(m.min > 2 && m.max < 4 && fabs(m.mean - 3) < 0.01 && fabs(sqrt(m.var) - 0.5 * 0.87962566) < 0.01);
}

/* In a graph context an initializer is a graph tensor with the eager values. */
static void test_initializer_in_graph(void **state) {
  nb_ctx *c = *state;
  gu_fixture f;
  assert_true(gu_open(&f));
  const int64_t seed[2] = {7, 8};
  nb_tensor *g = nb_init_he_normal(f.c, NB_F64, 2, TU_SHAPE(4, 3), seed), *out;
  assert_true(nb_is_symbolic(g));
  assert_int_equal(nb_run(f.s, NULL, NULL, 0, &g, 1, &out), NB_OK);
  nb_tensor *e = nb_init_he_normal(c, NB_F64, 2, TU_SHAPE(4, 3), seed);
  for (int i = 0; i < 12; i++) assert_true(nb_item(out, i) == nb_item(e, i));
  nb_tensor_free(out);
  gu_close(&f);
}

static void test_initializer_errors(void **state) {
  nb_ctx *c = *state;
  const int64_t seed[2] = {1, 2};
  assert_null(nb_init_glorot_uniform(c, NB_I32, 1, TU_SHAPE(3), seed));
  tu_check_error(c, NB_DTYPE, "glorot_uniform: dtype int32 is not supported", NULL);
  assert_null(nb_init_he_normal(c, NB_F32, 2, TU_SHAPE(3, -1), seed));
  tu_check_error(c, NB_INVALID, "he_normal: shape [3,-1] has a negative dimension", NULL);
  assert_null(nb_init_zeros(c, NB_BOOL, 1, TU_SHAPE(3)));
  tu_check_error(c, NB_DTYPE, "zeros: dtype bool", NULL);
  assert_null(nb_init_truncated_normal(c, NB_F32, 9, TU_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1), 0, 1, seed));
  tu_check_error(c, NB_INVALID, "truncated_normal: rank 9 is not in [0, 8]", NULL);
  assert_null(nb_init_ones(c, NB_F32, 2, NULL));
  tu_check_error(c, NB_INVALID, "ones: rank 2", "shape is NULL");
}

/* Dropout and the initializers leave their result alone in the caller's scope: an eager
   loop that calls them does not pile up their intermediates. */
static void test_no_leftover_handles(void **state) {
  nb_ctx *c = *state;
  const int64_t shape[2] = {4, 3}, seed[2] = {1, 2};
  nb_tensor *x = nb_init_ones(c, NB_F32, 2, shape);
  uint32_t before = c->nhandles;
  nb_tensor *made[5] = {nb_dropout(c, x, 0.5, NULL, 0, seed), nb_init_zeros(c, NB_F32, 2, shape),
                        nb_init_glorot_uniform(c, NB_F32, 2, shape, seed), nb_init_he_normal(c, NB_F32, 2, shape, seed),
                        nb_init_truncated_normal(c, NB_F64, 2, shape, 0, 1, seed)};
  for (int i = 0; i < 5; i++) assert_non_null(made[i]);
  assert_int_equal(c->nhandles, before + 5);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_golden_bits, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_validation, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_wrappers_and_graphs_agree, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_thread_count_does_not_change_bits, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_distribution_statistics, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_seeds, tu_setup, tu_teardown),
      cmocka_unit_test(test_no_gradient),
      cmocka_unit_test_setup_teardown(test_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_dropout_matches_tf, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_dropout_gradient, tu_setup, tu_teardown),
      cmocka_unit_test(test_dropout_in_graph),
      cmocka_unit_test_setup_teardown(test_dropout_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_constant_initializers, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_glorot_uniform, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_he_normal, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_truncated_normal_initializer, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_initializer_in_graph, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_initializer_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_no_leftover_handles, tu_setup, tu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
