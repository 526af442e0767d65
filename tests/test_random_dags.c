/* Random DAGs with fan-out, broadcasting and reductions: the graph pass, the eager tape and
   central differences must agree. This exercises aggregation (several paths into one
   tensor), pending counts and ordering on shapes no hand-written case covers. */
#include "graphutil.h"

#include <stdlib.h>

enum { NODES = 40, INPUTS = 3, WINDOW = 8 };

/* One random op on values from the recent window: the same choices in any context. */
static nb_tensor *random_op(nb_ctx *c, tu_rng *r, nb_tensor **vals, int n) {
  int w = n < WINDOW ? n : WINDOW;
  nb_tensor *a = vals[n - 1 - (int)(tu_rng_next(r) % (uint32_t)w)],
            *b = vals[n - 1 - (int)(tu_rng_next(r) % (uint32_t)w)];
  const int axes[1] = {1};
  switch (tu_rng_next(r) % 7) {
    case 0: return nb_tanh(c, a);
    case 1: return nb_sin(c, a);
    case 2: return nb_mul(c, a, b);
    case 3: return nb_add(c, a, b);
    case 4: return nb_sub(c, nb_square(c, a), b);
    case 5: return nb_add(c, a, nb_mean(c, b, axes, 1, true)); /* [2,3] + [2,1] broadcast */
    default: return nb_mul(c, a, nb_sigmoid(c, b));
  }
}

/* y = sum of the last few values; every input is [2,3]. */
static nb_tensor *build(nb_ctx *c, uint64_t seed, nb_tensor *const *xs) {
  tu_rng r = {seed};
  nb_tensor *vals[INPUTS + NODES];
  for (int i = 0; i < INPUTS; i++) vals[i] = xs[i];
  for (int i = 0; i < NODES; i++) vals[INPUTS + i] = random_op(c, &r, vals, INPUTS + i);
  nb_tensor *tail[3] = {vals[INPUTS + NODES - 1], vals[INPUTS + NODES - 2], vals[INPUTS + NODES - 3]};
  return nb_sum(c, nb_add_n(c, tail, 3), NULL, 0, false);
}

static void check_seed(gu_fixture *f, uint64_t seed) {
  const int64_t shape[2] = {2, 3};
  double v[INPUTS][6];
  tu_rng r = {seed * 7919 + 1};
  for (int i = 0; i < INPUTS; i++)
    for (int j = 0; j < 6; j++) v[i][j] = (double)(tu_rng_next(&r) % 2000) / 1000.0 - 1.0;
  nb_tensor *xs[INPUTS], *vals[INPUTS], *ex[INPUTS], *dxs[INPUTS], *tape_dxs[INPUTS];
  for (int i = 0; i < INPUTS; i++) {
    xs[i] = nb_placeholder(f->c, NB_F64, 2, shape, NULL);
    vals[i] = ex[i] = nb_tensor_from(f->e, NB_F64, 2, shape, v[i]);
  }
  nb_tensor *y = build(f->c, seed, xs);
  assert_int_equal(nb_gradients(f->c, &y, 1, xs, INPUTS, NULL, dxs), NB_OK);
  double err;
  assert_int_equal(nb_gradcheck(f->c, y, xs, INPUTS, vals, &err), NB_OK);
  if (err > 1e-6) fail_msg("seed %llu: gradcheck error %g", (unsigned long long)seed, err);
  nb_tape *t = nb_tape_begin(f->e, 0);
  for (int i = 0; i < INPUTS; i++) nb_tape_watch(t, ex[i]);
  nb_tensor *ey = build(f->e, seed, ex);
  assert_int_equal(nb_tape_gradient(t, &ey, 1, ex, INPUTS, NULL, tape_dxs), NB_OK);
  nb_tape_end(t);
  for (int i = 0; i < INPUTS; i++) {
    if (!dxs[i]) { /* an input the random DAG never used: unconnected in both */
      assert_null(tape_dxs[i]);
      continue;
    }
    nb_tensor *g = gu_run(f, xs, vals, INPUTS, dxs[i]);
    for (int j = 0; j < 6; j++)
      if (fabs(nb_item(g, j) - nb_item(tape_dxs[i], j)) > 1e-12 * (1 + fabs(nb_item(g, j))))
        fail_msg("seed %llu input %d element %d: graph %.17g, tape %.17g", (unsigned long long)seed, i, j,
                 nb_item(g, j), nb_item(tape_dxs[i], j));
    nb_tensor_free(g);
  }
}

static void test_random_dags(void **state) {
  for (uint64_t seed = 1; seed <= 12; seed++) {
    gu_fixture *f = *state;
    check_seed(f, seed);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_random_dags, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests_name("random_dags", tests, NULL, NULL);
}
