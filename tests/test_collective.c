/* The collective ops across devices of one process (threads, each with a device and its
   own context, as NCCL's devices): CollectiveReduceV2 with every merge and final op and
   dtype, CollectiveGatherV2, the broadcasts, NcclAllReduce; their gradients on tapes (first
   and second order) and in graphs; mismatches, timeouts and groups of one. The values are
   small integers, so every sum is exact in float32: results are compared exactly. */
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>

#define MAX_DEVICES 4
#define MAX_VALUES 8

/* What one device's work produced: its values, its call's code and message. */
typedef struct result {
  double v[MAX_VALUES];
  int n;
  nb_code code;
  char err[512];
} result;

typedef void (*device_fn)(nb_ctx *c, int device, int ndevices, result *r);

typedef struct device_run {
  device_fn fn;
  int device, ndevices;
  result r;
} device_run;

static void keep(result *r, nb_ctx *c, const nb_tensor *x) {
  r->code = nb_status(c);
  snprintf(r->err, sizeof r->err, "%s", nb_error(c));
  if (r->code || !x) return;
  r->n = (int)nb_num_elements(x);
  for (int i = 0; i < r->n && i < MAX_VALUES; i++) r->v[i] = nb_item(x, i);
}

static void *device_main(void *arg) {
  device_run *d = arg;
  nb_collective_set_device(d->device);
  nb_ctx *c = nb_eager_new();
  d->fn(c, d->device, d->ndevices, &d->r);
  nb_ctx_free(c);
  nb_collective_set_device(-1);
  return NULL;
}

/* Runs fn on n devices at once, one thread each; results in runs[0..n). */
static void run_devices(int n, device_fn fn, device_run *runs) {
  pthread_t th[MAX_DEVICES];
  for (int d = 0; d < n; d++) {
    runs[d] = (device_run){.fn = fn, .device = d, .ndevices = n};
    assert_int_equal(pthread_create(&th[d], NULL, device_main, &runs[d]), 0);
  }
  for (int d = 0; d < n; d++) pthread_join(th[d], NULL);
}

static void expect_values(const device_run *runs, int n, const double *want, int nwant) {
  for (int d = 0; d < n; d++) {
    if (runs[d].r.code) fail_msg("device %d: %s", d, runs[d].r.err);
    assert_int_equal(runs[d].r.n, nwant);
    for (int i = 0; i < nwant; i++)
      if (runs[d].r.v[i] != want[i]) fail_msg("device %d value %d: got %g, want %g", d, i, runs[d].r.v[i], want[i]);
  }
}

/* Device d's input: [d + 1, 2 (d + 1), -(d + 1)]. */
static nb_tensor *input_of(nb_ctx *c, nb_dtype t, int d) {
  double k = d + 1;
  return tu_make(c, t, 1, TU_SHAPE(3), TU_VALS(k, 2 * k, -k));
}

/* ---- reductions ---------------------------------------------------------------------------- */

static nb_dtype reduce_dtype;
static const char *reduce_merge, *reduce_final;

static void reduce_work(nb_ctx *c, int d, int n, result *r) {
  nb_tensor *y = nb_collective_reduce_v2(c, input_of(c, reduce_dtype, d), n, 7, 1, reduce_merge, reduce_final, 0);
  keep(r, c, y);
}

/* The expected reduction of the three inputs of three devices, element by element. */
static double reduce_want(const char *merge, bool div, double a, double b, double e, bool ints) {
  double v = strcmp(merge, "Add") == 0   ? a + b + e
             : strcmp(merge, "Mul") == 0 ? a * b * e
             : strcmp(merge, "Min") == 0 ? fmin(a, fmin(b, e))
                                         : fmax(a, fmax(b, e));
  return !div ? v : ints ? trunc(v / 3) : v / 3;
}

static void test_reduce_every_merge_and_dtype(void **state) {
  (void)state;
  const nb_dtype dtypes[] = {NB_F32, NB_F64, NB_I32, NB_I64};
  const char *merges[] = {"Add", "Mul", "Min", "Max"};
  device_run runs[3];
  for (int t = 0; t < 4; t++)
    for (int m = 0; m < 4; m++)
      for (int f = 0; f < 2; f++) {
        reduce_dtype = dtypes[t];
        reduce_merge = merges[m];
        reduce_final = f ? "Div" : "Id";
        run_devices(3, reduce_work, runs);
        double want[3];
        bool ints = dtypes[t] == NB_I32 || dtypes[t] == NB_I64;
        for (int i = 0; i < 3; i++) {
          double s = i == 0 ? 1 : i == 1 ? 2 : -1;
          want[i] = reduce_want(merges[m], f, s, 2 * s, 3 * s, ints);
        }
        /* Div of floats: x / 3 rounds once in either dtype; compare after the same rounding */
        if (f && dtypes[t] == NB_F32)
          for (int i = 0; i < 3; i++) want[i] = (float)((float)(want[i] * 3) / 3.0f);
        expect_values(runs, 3, want, 3);
      }
}

/* ---- gather and broadcast -------------------------------------------------------------------- */

static void gather_work(nb_ctx *c, int d, int n, result *r) {
  nb_tensor *x = tu_make(c, NB_F32, 2, TU_SHAPE(1, 2), TU_VALS(10 * d, 10 * d + 1));
  nb_tensor *y = nb_collective_gather_v2(c, x, n, 3, 1, 0);
  if (y && (nb_rank(y) != 2 || nb_shape(y)[0] != n || nb_shape(y)[1] != 2))
    nb_set_error(c, NB_SHAPE, "gather gave rank %d", nb_rank(y));
  keep(r, c, y);
}

static void test_gather_in_device_order(void **state) {
  (void)state;
  device_run runs[3];
  run_devices(3, gather_work, runs);
  expect_values(runs, 3, TU_VALS(0, 1, 10, 11, 20, 21), 6);
}

static void bcast_work(nb_ctx *c, int d, int n, result *r) {
  nb_tensor *y = d == 1 ? nb_collective_bcast_send_v2(c, tu_make(c, NB_I64, 1, TU_SHAPE(2), TU_VALS(5, -6)), n, 4, 9, 0)
                        : nb_collective_bcast_recv_v2(c, NB_I64, TU_SHAPE(2), 1, n, 4, 9, 0);
  keep(r, c, y);
}

static void test_broadcast_from_one_device(void **state) {
  (void)state;
  device_run runs[3];
  run_devices(3, bcast_work, runs);
  expect_values(runs, 3, TU_VALS(5, -6), 2);
}

static void nccl_work(nb_ctx *c, int d, int n, result *r) {
  nb_tensor *x = input_of(c, NB_F64, d);
  nb_tensor *s = nb_nccl_all_reduce(c, x, "sum", n, "s"), *m = nb_nccl_all_reduce(c, x, "max", n, "m");
  keep(r, c, nb_concat(c, (nb_tensor *[]){s, m}, 2, 0));
}

static void test_nccl_all_reduce(void **state) {
  (void)state;
  device_run runs[2];
  run_devices(2, nccl_work, runs);
  expect_values(runs, 2, TU_VALS(3, 6, -3, 2, 4, -1), 6);
}

/* ---- gradients ---------------------------------------------------------------------------------- */

/* Device d: loss_d = sum(a_d * R(x_d)), a_d = d + 1, R the all-reduce sum (or mean with
   Div). The total loss sum_d loss_d has d/dx_i = sum_j a_j (/ n with Div) on every device:
   what each device's tape gives through the gradient's own all-reduce. */
static const char *grad_final;

static void grad_work(nb_ctx *c, int d, int n, result *r) {
  nb_tensor *x = input_of(c, NB_F32, d), *dx = NULL;
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_collective_reduce_v2(c, x, n, 1, 2, "Add", grad_final, 0);
  nb_tensor *loss = nb_sum(c, nb_mul(c, y, nb_scalar(c, NB_F32, d + 1)), NULL, 0, false);
  if (loss) nb_tape_gradient(t, &loss, 1, &x, 1, NULL, &dx);
  nb_tape_end(t);
  keep(r, c, dx);
}

static void test_reduce_gradient_on_tapes(void **state) {
  (void)state;
  device_run runs[3];
  grad_final = "Id";
  run_devices(3, grad_work, runs);
  expect_values(runs, 3, TU_VALS(6, 6, 6), 3);
  grad_final = "Div";
  run_devices(3, grad_work, runs);
  expect_values(runs, 3, TU_VALS(2, 2, 2), 3);
}

/* Second order through the gradient's all-reduce: y = R(x), L_d = sum(c_d y^2), so the inner
   gradient g_d = R(2 c_d y) = 2 C y with C = sum_j c_j; differentiating sum_d sum(g_d) gives
   2 n C on every element (n devices: R's gradient R of ones is n). c_d = d + 1, n = 2:
   C = 3, 2 n C = 12. */
static void second_order_work(nb_ctx *c, int d, int n, result *r) {
  nb_tensor *x = input_of(c, NB_F64, d), *g = NULL, *gg = NULL;
  nb_tape *outer = nb_tape_begin(c, 0), *inner = NULL;
  nb_tape_watch(outer, x);
  inner = nb_tape_begin(c, 0);
  nb_tape_watch(inner, x);
  nb_tensor *y = nb_nccl_all_reduce(c, x, "sum", n, "second");
  nb_tensor *loss = nb_sum(c, nb_mul(c, nb_square(c, y), nb_scalar(c, NB_F64, d + 1)), NULL, 0, false);
  if (loss) nb_tape_gradient(inner, &loss, 1, &x, 1, NULL, &g);
  nb_tape_end(inner);
  nb_tensor *sg = g ? nb_sum(c, g, NULL, 0, false) : NULL;
  if (sg) nb_tape_gradient(outer, &sg, 1, &x, 1, NULL, &gg);
  nb_tape_end(outer);
  keep(r, c, gg);
}

static void test_second_order(void **state) {
  (void)state;
  device_run runs[2];
  run_devices(2, second_order_work, runs);
  expect_values(runs, 2, TU_VALS(12, 12, 12), 3);
}

/* The same loss as grad_work in a graph per device, differentiated by nb_gradients and run
   by a session. */
static void graph_work(nb_ctx *unused, int d, int n, result *r) {
  (void)unused;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *x = nb_placeholder(c, NB_F64, 1, TU_SHAPE(3), "x"), *dx = NULL;
  nb_tensor *y = nb_collective_reduce_v2(c, x, n, 1, 2, "Add", "Id", 0);
  nb_tensor *loss = nb_sum(c, nb_mul(c, y, nb_scalar(c, NB_F64, d + 1)), NULL, 0, false);
  if (loss) nb_gradients(c, &loss, 1, &x, 1, NULL, &dx);
  r->code = nb_status(c);
  snprintf(r->err, sizeof r->err, "%s", nb_error(c));
  if (!r->code) {
    nb_ctx *e = nb_eager_new();
    nb_session *s = nb_session_new(g);
    nb_tensor *value = input_of(e, NB_F64, d), *out = NULL;
    r->code = nb_run(s, &x, &value, 1, &dx, 1, &out);
    snprintf(r->err, sizeof r->err, "%s", nb_session_error(s));
    for (int i = 0; !r->code && i < 3; i++) r->v[i] = nb_item(out, i);
    r->n = 3;
    nb_tensor_free(out);
    nb_session_free(s);
    nb_ctx_free(e);
  }
  nb_ctx_free(c);
  nb_graph_free(g);
}

static void test_reduce_gradient_in_graphs(void **state) {
  (void)state;
  device_run runs[3];
  run_devices(3, graph_work, runs);
  expect_values(runs, 3, TU_VALS(6, 6, 6), 3);
}

static void mul_gradient_work(nb_ctx *c, int d, int n, result *r) {
  nb_tensor *x = input_of(c, NB_F32, d), *dx = NULL;
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_tensor *y = nb_sum(c, nb_collective_reduce_v2(c, x, n, 1, 3, "Mul", "Id", 0), NULL, 0, false);
  if (y) nb_tape_gradient(t, &y, 1, &x, 1, NULL, &dx);
  nb_tape_end(t);
  keep(r, c, dx);
}

static void test_no_gradient_for_mul(void **state) {
  (void)state;
  device_run runs[2];
  run_devices(2, mul_gradient_work, runs);
  for (int d = 0; d < 2; d++) {
    assert_int_equal(runs[d].r.code, NB_NO_GRADIENT);
    assert_non_null(strstr(runs[d].r.err, "merge_op 'Mul'"));
  }
}

/* ---- faults ---------------------------------------------------------------------------------- */

/* Device 1 brings a [4] tensor where the others bring [3]: every device fails, naming both. */
static void mismatch_work(nb_ctx *c, int d, int n, result *r) {
  nb_tensor *x = d == 1 ? tu_make(c, NB_F32, 1, TU_SHAPE(4), NULL) : input_of(c, NB_F32, d);
  keep(r, c, nb_collective_reduce_v2(c, x, n, 5, 1, "Add", "Id", 10));
}

static void test_shape_mismatch_fails_everywhere(void **state) {
  (void)state;
  device_run runs[3];
  run_devices(3, mismatch_work, runs);
  for (int d = 0; d < 3; d++) {
    assert_int_equal(runs[d].r.code, NB_INVALID);
    assert_non_null(strstr(runs[d].r.err, "CollectiveReduceV2"));
    assert_non_null(strstr(runs[d].r.err, "[4]"));
    assert_non_null(strstr(runs[d].r.err, "[3]"));
  }
}

/* Only device 0 of a group of 2 calls: it fails after its timeout instead of waiting. */
static void lonely_work(nb_ctx *c, int d, int n, result *r) {
  (void)n;
  if (d == 0) keep(r, c, nb_collective_reduce_v2(c, input_of(c, NB_F32, d), 2, 6, 1, "Add", "Id", 0.2));
}

static void test_timeout_instead_of_hang(void **state) {
  (void)state;
  device_run runs[1];
  run_devices(1, lonely_work, runs);
  assert_int_equal(runs[0].r.code, NB_INTERNAL);
  assert_non_null(strstr(runs[0].r.err, "timed out after 0.2 s: 1 of 2 devices arrived"));
}

/* A thread without a device and a process without MPI: a group of one is the identity
   (Div by 1), a larger one an error saying how to get one. */
static void test_group_of_one(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = input_of(c, NB_F64, 0);
  tu_check_vals(nb_collective_reduce_v2(c, x, 1, 1, 1, "Add", "Div", 0), TU_VALS(1, 2, -1), 0);
  tu_check_vals(nb_collective_gather_v2(c, x, 1, 1, 2, 0), TU_VALS(1, 2, -1), 0);
  assert_null(nb_collective_reduce_v2(c, x, 2, 1, 3, "Add", "Id", 0));
  assert_int_equal(nb_status(c), NB_INVALID);
  assert_non_null(strstr(nb_error(c), "nb_dist_init"));
  nb_clear_error(c);
  nb_tensor *bad = NULL;
  nb_tensor *in[4] = {x, nb_scalar(c, NB_I32, 1), nb_scalar(c, NB_I32, 1), nb_scalar(c, NB_I32, 1)};
  assert_int_equal(nb_op(c, "CollectiveReduceV2", in, 4,
                         (nb_attr[]){nb_attr_str("merge_op", "Sub"), nb_attr_str("final_op", "Id")}, 2, &bad, 1),
                   NB_INVALID);
  nb_clear_error(c);
  assert_int_equal(nb_dist_size(), 1);
  assert_int_equal(nb_dist_rank(), 0);
}

static int setup(void **state) {
  *state = nb_eager_new();
  return *state ? 0 : -1;
}

static int teardown(void **state) {
  nb_ctx_free(*state);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_reduce_every_merge_and_dtype),
      cmocka_unit_test(test_gather_in_device_order),
      cmocka_unit_test(test_broadcast_from_one_device),
      cmocka_unit_test(test_nccl_all_reduce),
      cmocka_unit_test(test_reduce_gradient_on_tapes),
      cmocka_unit_test(test_second_order),
      cmocka_unit_test(test_reduce_gradient_in_graphs),
      cmocka_unit_test(test_no_gradient_for_mul),
      cmocka_unit_test(test_shape_mismatch_fails_everywhere),
      cmocka_unit_test(test_timeout_instead_of_hang),
      cmocka_unit_test_setup_teardown(test_group_of_one, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
