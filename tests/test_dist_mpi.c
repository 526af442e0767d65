/* The collectives and data-parallel training across processes: CTest runs this program
   under mpirun with 2 and 3 ranks, and alone (one process, no MPI: every call works over a
   job of one). Each rank runs the same cmocka tests; a failure on any rank fails mpirun.
   With --fault-timeout or --fault-die (under mpirun, 2+ ranks) it runs a fault instead:
   rank 1 stalls or dies before a collective; rank 0 must get an error within its timeout,
   never hang, and its last checkpoint must still restore (tests/dist_fault.sh checks). */
#define _POSIX_C_SOURCE 200809L
#include "tempdir.h"

#include "../src/ops/collective.h" /* nbop_collective_deferred_total: the session's reduces overlapped */

#include <stdio.h>
#include <unistd.h>

static int rank, size;

static void check_ok(nb_ctx *c) {
  if (nb_status(c)) fail_msg("rank %d: %s", rank, nb_error(c));
}

/* Rank r's input: [r + 1, 2 (r + 1), -(r + 1)]. */
static nb_tensor *input_of(nb_ctx *c, nb_dtype t, int r) {
  double k = r + 1;
  return tu_make(c, t, 1, TU_SHAPE(3), TU_VALS(k, 2 * k, -k));
}

/* sum over ranks of (r + 1): n (n + 1) / 2 */
static double triangle(int n) { return n * (n + 1) / 2.0; }

static void test_rank_and_size(void **state) {
  (void)state;
  const char *env = getenv("OMPI_COMM_WORLD_SIZE");
  assert_int_equal(size, env ? atoi(env) : 1);
  assert_true(rank >= 0 && rank < size);
}

static void test_collective_ops(void **state) {
  nb_ctx *c = *state;
  double s = triangle(size);
  tu_check_vals(nb_collective_reduce_v2(c, input_of(c, NB_F64, rank), size, 1, 1, "Add", "Id", 0),
                TU_VALS(s, 2 * s, -s), 0);
  tu_check_vals(nb_collective_reduce_v2(c, input_of(c, NB_I32, rank), size, 1, 2, "Max", "Id", 0),
                TU_VALS(size, 2 * size, -1), 0);
  tu_check_vals(nb_nccl_all_reduce(c, input_of(c, NB_I64, rank), "min", size, "m"), TU_VALS(1, 2, -size), 0);
  nb_tensor *g = nb_collective_gather_v2(c, tu_make(c, NB_F32, 1, TU_SHAPE(1), TU_VALS(rank * 10)), size, 1, 3, 0);
  check_ok(c);
  for (int q = 0; q < size; q++) assert_true(nb_item(g, q) == q * 10);
  int root = size - 1;
  nb_tensor *b = rank == root ? nb_collective_bcast_send_v2(c, input_of(c, NB_F32, rank), size, 1, 4, 0)
                              : nb_collective_bcast_recv_v2(c, NB_F32, TU_SHAPE(3), 1, size, 1, 4, 0);
  tu_check_vals(b, TU_VALS(size, 2 * size, -size), 0);
  check_ok(c);
}

/* loss_r = sum((r + 1) R(x_r)) with R the all-reduce sum: dx = sum_q (q + 1) on every rank,
   through the gradient's all-reduce on the tape. */
static void test_gradient_across_ranks(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = input_of(c, NB_F64, rank), *dx = NULL;
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_collective_reduce_v2(c, x, size, 1, 5, "Add", "Id", 0);
  nb_tensor *loss = nb_sum(c, nb_mul(c, y, nb_scalar(c, NB_F64, rank + 1)), NULL, 0, false);
  nb_tape_gradient(t, &loss, 1, &x, 1, NULL, &dx);
  nb_tape_end(t);
  check_ok(c);
  double s = triangle(size);
  tu_check_vals(dx, TU_VALS(s, s, s), 0);
}

/* A rank whose tensor has another shape: every rank fails naming both shapes, and the job
   goes on (the description step caught it before any data moved). */
static void test_mismatch_named_on_every_rank(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = rank == 1 ? tu_make(c, NB_F32, 1, TU_SHAPE(4), NULL) : input_of(c, NB_F32, rank);
  nb_collective_reduce_v2(c, x, size, 1, 6, "Add", "Id", 0);
  if (size == 1) {
    check_ok(c);
    return;
  }
  assert_int_equal(nb_status(c), NB_INVALID);
  assert_non_null(strstr(nb_error(c), "the ranks disagree"));
  assert_non_null(strstr(nb_error(c), "[4]"));
  assert_non_null(strstr(nb_error(c), "[3]"));
  nb_clear_error(c);
  tu_check_vals(nb_collective_reduce_v2(c, input_of(c, NB_F32, 0), size, 1, 7, "Add", "Div", 0), TU_VALS(1, 2, -1), 0);
}

static void test_broadcast_variables(void **state) {
  nb_ctx *c = *state;
  nb_variable *v = nb_variable_new(c, input_of(c, NB_F32, rank), true, "v");
  assert_int_equal(nb_dist_broadcast_variables(c, &v, 1), NB_OK);
  tu_check_vals(nb_variable_read(c, v), TU_VALS(1, 2, -1), 0);
  nb_variable_free(v);
  /* a variable of another shape on one rank: named on every rank */
  nb_variable *w = nb_variable_new(c, tu_make(c, NB_F32, 1, TU_SHAPE(rank == 1 ? 2 : 3), NULL), true, "w");
  nb_code code = nb_dist_broadcast_variables(c, &w, 1);
  if (size > 1) {
    assert_int_equal(code, NB_INVALID);
    assert_non_null(strstr(nb_error(c), "variable 'w'"));
    nb_clear_error(c);
  }
  nb_variable_free(w);
}

/* Every element of g is (scale / n) sum_r (r + 1) = scale (n + 1) / 2: each rank's share
   scale (r + 1) / n rounded once, then n - 1 additions, so within gamma_(n+1) of it. */
static void check_mean_of_ranks(const nb_tensor *g, double scale) {
  double want = scale * (size + 1) / 2.0;
  for (int64_t i = 0; i < nb_num_elements(g); i++)
    if (fabs(nb_item(g, i) - want) > tu_gamma(NB_F32, size + 1) * want)
      fail_msg("rank %d: element %lld is %.9g, want %.9g", rank, (long long)i, nb_item(g, i), want);
}

/* Dense gradients in small buckets (several per pass, started as the tape finalizes them)
   and an IndexedSlices gradient (rank r gathers r + 1 rows of an embedding): each rank's
   loss_r = (r + 1) (sum of every variable's elements + sum of its gathered rows), so the
   averaged gradient of a dense variable is the mean of r + 1, (n + 1) / 2, and the
   embedding's slices hold every rank's rows, valued (r + 1) / n. */
static void test_reducer(void **state) {
  nb_ctx *c = *state;
  enum { NVARS = 5 };
  nb_variable *vars[NVARS + 1];
  for (int k = 0; k < NVARS; k++) vars[k] = nb_variable_new(c, nb_init_ones(c, NB_F32, 1, TU_SHAPE(8 + k)), true, NULL);
  vars[NVARS] = nb_variable_new(c, nb_init_ones(c, NB_F64, 2, TU_SHAPE(4, 2)), true, "embedding");
  nb_dist_reducer *r = nb_dist_reducer_new(40); /* ten float32 per bucket */
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tensor *loss = nb_scalar(c, NB_F64, 0);
  for (int k = 0; k < NVARS; k++)
    loss = nb_add(c, loss, nb_cast(c, nb_sum(c, nb_variable_read(c, vars[k]), NULL, 0, false), NB_F64));
  nb_tensor *rows = nb_range(c, nb_scalar(c, NB_I32, 0), nb_scalar(c, NB_I32, rank + 1), nb_scalar(c, NB_I32, 1));
  loss = nb_add(c, loss, nb_sum(c, nb_gather(c, nb_variable_read(c, vars[NVARS]), rows, 0, 0), NULL, 0, false));
  loss = nb_mul(c, loss, nb_scalar(c, NB_F64, rank + 1));
  nb_tensor *grads[NVARS + 1];
  assert_int_equal(nb_dist_gradient_vars(r, t, &loss, 1, vars, NVARS + 1, grads), NB_OK);
  nb_tape_end(t);
  for (int k = 0; k < NVARS; k++) check_mean_of_ranks(grads[k], 1);
  assert_true(nb_is_indexed_slices(grads[NVARS]));
  /* row q gets sum over ranks r >= q of (r + 1) / n */
  nb_tensor *dense = nb_densify(c, grads[NVARS]);
  for (int q = 0; q < 4; q++) {
    double want = 0;
    for (int p = q; p < size; p++) want += (p + 1.0) / size;
    for (int j = 0; j < 2; j++)
      if (fabs(nb_item(dense, q * 2 + j) - want) > 4 * tu_gamma(NB_F64, size) * want)
        fail_msg("rank %d: embedding row %d: got %g, want %g", rank, q, nb_item(dense, q * 2 + j), want);
  }
  check_ok(c);
  nb_dist_reducer_free(r);
  for (int k = 0; k <= NVARS; k++) nb_variable_free(vars[k]);
}

/* The averaged gradients view the reducer's buckets: gradients a caller keeps while the
   next pass runs, and after the reducer is freed, still hold their own pass's values. */
static void test_kept_gradients_outlive_the_bucket(void **state) {
  nb_ctx *c = *state;
  nb_variable *v = nb_variable_new(c, nb_init_ones(c, NB_F32, 1, TU_SHAPE(6)), true, NULL);
  nb_dist_reducer *r = nb_dist_reducer_new(0);
  nb_tensor *kept[2];
  for (int pass = 0; pass < 2; pass++) {
    nb_tape *t = nb_tape_begin(c, 0);
    nb_tensor *scale = nb_scalar(c, NB_F32, (float)((pass + 1) * (rank + 1)));
    nb_tensor *loss = nb_mul(c, nb_sum(c, nb_variable_read(c, v), NULL, 0, false), scale);
    assert_int_equal(nb_dist_gradient_vars(r, t, &loss, 1, &v, 1, &kept[pass]), NB_OK);
    nb_tape_end(t);
  }
  nb_dist_reducer_free(r);
  for (int pass = 0; pass < 2; pass++) check_mean_of_ranks(kept[pass], pass + 1);
  check_ok(c);
  nb_variable_free(v);
}

/* The graph path: one CollectiveReduceV2 per bucket in the graph, run by a session; the
   averages replace the gradients in their array, as a training step does, and a dim known
   only at run time (b's first) is split back at run time. */
static void test_average_in_session(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g), *e = nb_eager_new();
  nb_tensor *a = nb_placeholder(gc, NB_F32, 1, TU_SHAPE(3), "a"),
            *b = nb_placeholder(gc, NB_F32, 2, TU_SHAPE(-1, 2), "b");
  nb_tensor *in[2] = {b, a}, *avg[2] = {b, a}; /* b's size unknown: first, so a's offset depends on it */
  nb_dist_reducer *r = nb_dist_reducer_new(0);
  assert_int_equal(nb_dist_average_gradients(r, gc, avg, 2, avg), NB_OK); /* in place */
  nb_session *s = nb_session_new(g);
  nb_tensor *values[2] = {tu_make(e, NB_F32, 2, TU_SHAPE(2, 2), TU_VALS(rank, rank, rank, rank)),
                          input_of(e, NB_F32, rank)};
  nb_tensor *out[2] = {NULL, NULL};
  if (nb_run(s, in, values, 2, avg, 2, out)) fail_msg("rank %d: %s", rank, nb_session_error(s));
  double m = triangle(size) / size, mr = (size - 1) / 2.0;
  tu_check_vals(out[0], TU_VALS(mr, mr, mr, mr), 2 * tu_gamma(NB_F32, size));
  tu_check_vals(out[1], TU_VALS(m, 2 * m, -m), 2 * tu_gamma(NB_F32, size));
  for (int i = 0; i < 2; i++) nb_tensor_free(out[i]);
  nb_dist_reducer_free(r);
  nb_session_free(s);
  nb_ctx_free(gc);
  nb_ctx_free(e);
  nb_graph_free(g);
}

/* Rank r's value of a gradient: element i is (r + 1) (i + 1) / 4, of shape and dtype given. */
static nb_tensor *grad_of(nb_ctx *c, nb_dtype t, int rank_of, const int64_t *shape) {
  double v[24];
  int64_t n = 1;
  for (int i = 0; i < rank_of; i++) n *= shape[i];
  for (int64_t i = 0; i < n; i++) v[i] = (rank + 1) * (i + 1) / 4.0;
  return tu_make(c, t, rank_of, shape, v);
}

/* Same dtype, shape and bits. */
static void check_same(const nb_tensor *got, const nb_tensor *want) {
  tu_check_shape(got, nb_dtype_of(want), nb_rank(want), nb_shape(want));
  for (int64_t i = 0; i < nb_num_elements(want); i++)
    if (nb_item(got, i) != nb_item(want, i))
      fail_msg("rank %d: element %lld: %.17g, blocking path %.17g", rank, (long long)i, nb_item(got, i),
               nb_item(want, i));
}

/* A session starts each bucket's reduce and runs on (the matmul, and the other buckets'
   steps) until a step reads the average: the averages, and a step reading one, equal the
   blocking path's (eager ops) bit for bit, since both sum the same values by the same MPI
   reduce and divide them alike. Two float32 gradients share a bucket, a float64 one has
   its own: two reduces started without waiting when there are ranks to wait for. */
static void test_session_overlaps_reduces(void **state) {
  nb_ctx *e = *state;
  static const int64_t shapes[3][2] = {{4, 6}, {3, 1}, {2, 2}};
  static const nb_dtype types[3] = {NB_F32, NB_F32, NB_F64};
  nb_graph *g = nb_graph_new();
  nb_ctx *gc = nb_graph_ctx_new(g);
  nb_tensor *feeds[3], *values[3], *avg[5], *want[5];
  for (int i = 0; i < 3; i++) {
    feeds[i] = nb_placeholder(gc, types[i], 2, shapes[i], NULL);
    values[i] = grad_of(e, types[i], 2, shapes[i]);
  }
  nb_dist_reducer *r = nb_dist_reducer_new(100), *blocking = nb_dist_reducer_new(100);
  nb_dist_average_gradients(r, gc, feeds, 3, avg);
  avg[3] = nb_mul(gc, avg[0], nb_scalar(gc, NB_F32, 3)); /* a step reading an average */
  avg[4] = nb_matmul(gc, feeds[0], feeds[0], false, true);
  nb_dist_average_gradients(blocking, e, values, 3, want);
  want[3] = nb_mul(e, want[0], nb_scalar(e, NB_F32, 3));
  check_ok(gc);
  check_ok(e);
  nb_session *s = nb_session_new(g);
  nb_tensor *out[5] = {NULL};
  int64_t before = nbop_collective_deferred_total();
  if (nb_run(s, feeds, values, 3, avg, 5, out)) fail_msg("rank %d: %s", rank, nb_session_error(s));
  assert_int_equal(nbop_collective_deferred_total() - before, size > 1 ? 2 : 0);
  for (int i = 0; i < 4; i++) check_same(out[i], want[i]);
  for (int i = 0; i < 5; i++) nb_tensor_free(out[i]);
  nb_dist_reducer_free(r);
  nb_dist_reducer_free(blocking);
  nb_session_free(s);
  nb_ctx_free(gc);
  nb_graph_free(g);
}

/* ---- data parallel == one large batch -------------------------------------------------------
   Least squares, loss = |X w - t|^2 / (2 m) over m rows, k SGD steps from w = 0: each rank
   takes its B rows with the averaged gradient, against every rank computing the whole
   batch of n B rows alone. In exact arithmetic both give the same weights: the mean of the
   ranks' means over equal shards is the mean over all rows. They differ only in summation
   order. With H = X^T X / m and lr = 1 / trace(H) <= 1 / lambda_max(H), each step maps an
   error e to (I - lr H) e, which does not grow it (2-norm), so after k steps
   |e|_inf <= |e|_2 <= sum over steps of sqrt(D) |delta_s|_inf, where delta_s is the
   rounding of step s: each gradient element sums m products of x and residuals (each
   residual D products and t), then two divisions, an average over n and the update,
   so |delta_s,j| <= 2 gamma_{m + D + n + 4} lr A_j + 2 u |w_j|, A_j = sum_i |x_ij|
   (sum_l |x_il w_l| + |t_i|) / m at the step's weights (float32; A in float64). */
enum { DP_D = 4, DP_B = 4, DP_STEPS = 5, DP_MAX_ROWS = 3 * DP_B };

static double x_at(int64_t i, int j) { return sin((double)(i * DP_D + j + 1)); }
static double t_at(int64_t i) { return cos((double)i); }

/* Rows first .. first + n - 1 of X ([n, D]), or of t ([n, 1]). */
static nb_tensor *rows_of(nb_ctx *c, int64_t first, int64_t n, bool targets) {
  double v[DP_MAX_ROWS * DP_D] = {0};
  int cols = targets ? 1 : DP_D;
  for (int64_t i = 0; i < n; i++)
    for (int j = 0; j < cols; j++) v[i * cols + j] = targets ? t_at(first + i) : x_at(first + i, j);
  return tu_make(c, NB_F32, 2, TU_SHAPE(n, cols), v);
}

static nb_tensor *ls_loss(nb_ctx *c, nb_variable *w, nb_tensor *x, nb_tensor *t, int64_t m) {
  nb_tensor *res = nb_sub(c, nb_matmul(c, x, nb_variable_read(c, w), false, false), t);
  return nb_real_div(c, nb_sum(c, nb_square(c, res), NULL, 0, false), nb_scalar(c, NB_F32, 2.0 * (double)m));
}

/* The bound's step term for weights w (float64 from the reference run). */
static void step_bound(const float *w, int64_t m, double lr, double *bound) {
  double g = 2 * tu_gamma(NB_F32, m + DP_D + size + 4);
  for (int j = 0; j < DP_D; j++) {
    double a = 0;
    for (int64_t i = 0; i < m; i++) {
      double r = fabs(t_at(i));
      for (int l = 0; l < DP_D; l++) r += fabs(x_at(i, l) * w[l]);
      a += fabs(x_at(i, j)) * r;
    }
    bound[j] += sqrt(DP_D) * (g * lr * a / (double)m + 2 * tu_unit_roundoff(NB_F32) * fabs(w[j]));
  }
}

static void test_data_parallel_equals_one_batch(void **state) {
  nb_ctx *c = *state;
  int64_t m = (int64_t)size * DP_B;
  double trace = 0;
  for (int64_t i = 0; i < m; i++)
    for (int j = 0; j < DP_D; j++) trace += x_at(i, j) * x_at(i, j) / (double)m;
  double lr = 1 / trace, bound[DP_D] = {0};
  nb_variable *w = nb_variable_new(c, nb_init_zeros(c, NB_F32, 2, TU_SHAPE(DP_D, 1)), true, "w");
  nb_variable *ref = nb_variable_new(c, nb_init_zeros(c, NB_F32, 2, TU_SHAPE(DP_D, 1)), true, "ref");
  nb_optimizer *sgd = nb_sgd_new(lr), *sgd_ref = nb_sgd_new(lr);
  nb_dist_reducer *r = nb_dist_reducer_new(0);
  nb_tensor *x = rows_of(c, rank * DP_B, DP_B, false), *t = rows_of(c, rank * DP_B, DP_B, true);
  nb_tensor *x_all = rows_of(c, 0, m, false), *t_all = rows_of(c, 0, m, true);
  for (int step = 0; step < DP_STEPS; step++) {
    step_bound(nb_variable_data(ref), m, lr, bound);
    nb_tensor *g = NULL, *g_ref = NULL;
    nb_tape *tape = nb_tape_begin(c, 0);
    nb_tensor *loss = ls_loss(c, w, x, t, DP_B);
    nb_dist_gradient_vars(r, tape, &loss, 1, &w, 1, &g);
    nb_tape_end(tape);
    nb_optimizer_apply(sgd, c, &g, &w, 1, NULL);
    tape = nb_tape_begin(c, 0);
    loss = ls_loss(c, ref, x_all, t_all, m);
    nb_tape_gradient_vars(tape, &loss, 1, &ref, 1, &g_ref);
    nb_tape_end(tape);
    nb_optimizer_apply(sgd_ref, c, &g_ref, &ref, 1, NULL);
    check_ok(c);
  }
  const float *a = nb_variable_data(w), *b = nb_variable_data(ref);
  for (int j = 0; j < DP_D; j++)
    if (!(fabs(a[j] - b[j]) <= bound[j]))
      fail_msg("rank %d: w[%d] %.9g, one batch %.9g, off by %.3g, bound %.3g", rank, j, a[j], b[j], fabs(a[j] - b[j]),
               bound[j]);
  assert_true(fabs(b[0]) > 0); /* the steps moved the weights */
  nb_dist_reducer_free(r);
  nb_optimizer_free(sgd);
  nb_optimizer_free(sgd_ref);
  nb_variable_free(w);
  nb_variable_free(ref);
}

/* ---- faults ------------------------------------------------------------------------------------ */

/* Rank 0 saves a checkpoint, then calls a collective rank 1 never joins (it stalls past
   rank 0's timeout, or dies): rank 0 gets NB_INTERNAL within the timeout, then restores
   its checkpoint intact. Run with two ranks. */
static int run_fault(bool die) {
  if (rank != 0) {
    if (die) _exit(3);
    sleep(4);
    return 0;
  }
  void *state = NULL;
  if (tu_files_setup(&state)) return 1;
  tu_files *f = state;
  nb_ctx *c = f->c;
  snprintf(f->path, sizeof f->path, "%s/ckpt", f->dir);
  nb_variable *v = nb_variable_new(c, input_of(c, NB_F32, 0), true, "v");
  int bad = nb_checkpoint_save(c, f->path, &v, NULL, 1, NULL) != NB_OK;
  nb_collective_reduce_v2(c, input_of(c, NB_F32, rank), size, 1, 1, "Add", "Id", 1.0);
  printf("rank 0: collective failed: %s: %s\n", nb_code_name(nb_status(c)), nb_error(c));
  bad |= nb_status(c) != NB_INTERNAL;
  nb_clear_error(c);
  nb_variable *back = nb_variable_new(c, nb_init_zeros(c, NB_F32, 1, TU_SHAPE(3)), true, "v");
  bad |= nb_checkpoint_restore(c, f->path, &back, NULL, 1, NULL) != NB_OK;
  const float *d = nb_variable_data(back);
  bad |= d[0] != 1 || d[1] != 2 || d[2] != -1;
  printf("rank 0: checkpoint %s\n", bad ? "damaged" : "intact");
  fflush(stdout);
  nb_variable_free(v);
  nb_variable_free(back);
  tu_files_teardown(&state);
  /* the job is broken now: nb_dist_finalize says so and leaves MPI to mpirun */
  return bad | (nb_dist_finalize() != NB_INTERNAL);
}

static int setup(void **state) {
  *state = nb_eager_new();
  return *state ? 0 : -1;
}

static int teardown(void **state) {
  nb_ctx_free(*state);
  return 0;
}

int main(int argc, char **argv) {
  if (nb_dist_init()) return 1;
  rank = nb_dist_rank();
  size = nb_dist_size();
  if (argc > 1 && size > 1) return run_fault(strcmp(argv[1], "--fault-die") == 0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rank_and_size),
      cmocka_unit_test_setup_teardown(test_collective_ops, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gradient_across_ranks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mismatch_named_on_every_rank, setup, teardown),
      cmocka_unit_test_setup_teardown(test_broadcast_variables, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reducer, setup, teardown),
      cmocka_unit_test(test_average_in_session),
      cmocka_unit_test_setup_teardown(test_session_overlaps_reduces, setup, teardown),
      cmocka_unit_test_setup_teardown(test_data_parallel_equals_one_batch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_kept_gradients_outlive_the_bucket, setup, teardown),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  return failed | (nb_dist_finalize() != NB_OK);
}
