/* Batch normalization: FusedBatchNormV3 and FusedBatchNormGradV3 against hand-checked
   values and TensorFlow's CPU kernels (tests/golden/norm_golden.h, made by
   tests/golden/make_norm_golden.py), their first- and second-order gradients on the tape
   against TF's, NaN and empty inputs, thread-count independence, and every input error. */
#include "graphutil.h"

#include <stdlib.h>

#include "golden/norm_golden.h"

#define N(a) ((int64_t)(sizeof(a) / sizeof *(a)))
#define GOLDEN_TOL 2e-5 /* float32 kernels summing in another order */

static nb_tensor *vec(nb_ctx *c, nb_dtype t, const double *v, int64_t n) { return tu_make(c, t, 1, &n, v); }

/* ---- hand-checked values ------------------------------------------------------------ */

/* One channel holding 1 and 3: mean 2, biased variance 1, Bessel-corrected 2; with scale
   2, offset 1 and epsilon 0, y = 2 (x - 2) + 1. */
static void test_training_by_hand(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 4, TU_SHAPE(1, 1, 2, 1), TU_VALS(1, 3)), *out[6];
  nb_tensor *scale = vec(c, NB_F64, TU_VALS(2), 1), *offset = vec(c, NB_F64, TU_VALS(1), 1);
  assert_int_equal(nb_fused_batch_norm(c, x, scale, offset, NULL, NULL, 0, 1, "NHWC", true, out), NB_OK);
  tu_check(out[0], NB_F64, 4, TU_SHAPE(1, 1, 2, 1), TU_VALS(-1, 3), 1e-15);
  tu_check(out[1], NB_F64, 1, TU_SHAPE(1), TU_VALS(2), 0);
  tu_check(out[2], NB_F64, 1, TU_SHAPE(1), TU_VALS(2), 0);
  tu_check(out[3], NB_F64, 1, TU_SHAPE(1), TU_VALS(2), 0);
  tu_check(out[4], NB_F64, 1, TU_SHAPE(1), TU_VALS(1), 0);
  tu_check(out[5], NB_F64, 0, NULL, TU_VALS(0), 0);
}

/* exponential_avg_factor 0.25 blends the running statistics: 0.75 old + 0.25 batch. */
static void test_running_average_by_hand(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F32, 4, TU_SHAPE(1, 1, 2, 1), TU_VALS(1, 3)), *out[6];
  nb_tensor *one = vec(c, NB_F32, TU_VALS(1), 1), *zero = vec(c, NB_F32, TU_VALS(0), 1);
  nb_tensor *old_mean = vec(c, NB_F32, TU_VALS(10), 1), *old_var = vec(c, NB_F32, TU_VALS(6), 1);
  assert_int_equal(nb_fused_batch_norm(c, x, one, zero, old_mean, old_var, 0, 0.25, NULL, true, out), NB_OK);
  tu_check_vals(out[1], TU_VALS(0.75 * 10 + 0.25 * 2), 1e-7);
  tu_check_vals(out[2], TU_VALS(0.75 * 6 + 0.25 * 2), 1e-7);
  tu_check_vals(out[0], TU_VALS(-1, 1), 1e-7);
}

/* Inference normalizes with the given statistics and passes them through. NCHW with two
   channels: channel k's elements are x[:, k, :, :]. */
static void test_inference_by_hand(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 4, TU_SHAPE(1, 2, 1, 2), TU_VALS(1, 2, 3, 4)), *out[6];
  nb_tensor *scale = vec(c, NB_F64, TU_VALS(1, 2), 2), *offset = vec(c, NB_F64, TU_VALS(0, 1), 2);
  nb_tensor *mean = vec(c, NB_F64, TU_VALS(1, 2), 2), *var = vec(c, NB_F64, TU_VALS(4, 16), 2);
  assert_int_equal(nb_fused_batch_norm(c, x, scale, offset, mean, var, 0, 1, "NCHW", false, out), NB_OK);
  /* channel 0: (x - 1) / 2; channel 1: 2 (x - 2) / 4 + 1 */
  tu_check(out[0], NB_F64, 4, TU_SHAPE(1, 2, 1, 2), TU_VALS(0, 0.5, 1.5, 2), 1e-15);
  tu_check_vals(out[1], TU_VALS(1, 2), 0);
  tu_check_vals(out[2], TU_VALS(4, 16), 0);
  tu_check_vals(out[3], TU_VALS(1, 2), 0);
  tu_check_vals(out[4], TU_VALS(4, 16), 0);
}

/* The gradient op by hand, inference: x_backprop = dy scale / sqrt(var + eps),
   scale_backprop = sum dy (x - mean) / sqrt(var + eps), offset_backprop = sum dy. */
static void test_grad_op_by_hand(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 4, TU_SHAPE(1, 1, 2, 1), TU_VALS(1, 3));
  nb_tensor *dy = tu_make(c, NB_F64, 4, TU_SHAPE(1, 1, 2, 1), TU_VALS(1, -2)), *out[5];
  nb_tensor *scale = vec(c, NB_F64, TU_VALS(3), 1), *mean = vec(c, NB_F64, TU_VALS(2), 1);
  nb_tensor *var = vec(c, NB_F64, TU_VALS(4), 1), *rs3 = nb_scalar(c, NB_F64, 0);
  assert_int_equal(nb_fused_batch_norm_grad(c, dy, x, scale, mean, var, rs3, 0, NULL, false, out), NB_OK);
  tu_check(out[0], NB_F64, 4, TU_SHAPE(1, 1, 2, 1), TU_VALS(1.5, -3), 1e-15);
  tu_check(out[1], NB_F64, 1, TU_SHAPE(1), TU_VALS((1 * -1 + -2 * 1) / 2.0), 1e-15);
  tu_check(out[2], NB_F64, 1, TU_SHAPE(1), TU_VALS(-1), 0);
  tu_check_shape(out[3], NB_F64, 1, TU_SHAPE(0));
  tu_check_shape(out[4], NB_F64, 1, TU_SHAPE(0));
  /* training with the batch's own statistics: dy - mean(dy) - xc mean(dy xc) / var, times
     scale / sqrt(var): mean(dy) = -0.5, xc = -1, 1, mean(dy xc) = -1.5, var 1 */
  assert_int_equal(
      nb_fused_batch_norm_grad(c, dy, x, scale, mean, vec(c, NB_F64, TU_VALS(1), 1), rs3, 0, NULL, true, out), NB_OK);
  tu_check_vals(out[0], TU_VALS(3 * (1 + 0.5 - 1.5), 3 * (-2 + 0.5 + 1.5)), 1e-15);
}

/* ---- TensorFlow's values ------------------------------------------------------------ */

typedef struct golden_case {
  const char *format;
  bool training;
  double factor;
  int64_t shape[4], channels;
  const double *x, *scale, *offset, *mean, *variance, *w;
  const double *y, *batch_mean, *batch_variance, *reserve_1, *reserve_2, *dx, *dscale, *doffset;
  const double *v, *ddx, *ddscale; /* second order: d sum(dx * v) / d(x, scale) */
} golden_case;

#define GOLDEN(name, fmt, tr, f, s0, s1, s2, s3, ch, r1, r2)                                                         \
  {                                                                                                                  \
    fmt, tr, f, {s0, s1, s2, s3}, ch, name##_x, name##_scale, name##_offset, name##_mean, name##_variance, name##_w, \
        name##_y, name##_batch_mean, name##_batch_variance, r1, r2, name##_dx, name##_dscale, name##_doffset,        \
        name##_v, name##_ddx, name##_ddscale                                                                         \
  }

static const golden_case golden_cases[] = {
    GOLDEN(train_nhwc, "NHWC", true, 1.0, 2, 3, 2, 3, 3, train_nhwc_reserve_1, train_nhwc_reserve_2),
    GOLDEN(train_nhwc_avg, "NHWC", true, 0.1, 2, 3, 2, 3, 3, train_nhwc_avg_reserve_1, train_nhwc_avg_reserve_2),
    GOLDEN(train_nchw, "NCHW", true, 1.0, 2, 3, 2, 2, 3, train_nchw_reserve_1, train_nchw_reserve_2),
    GOLDEN(train_nchw_avg, "NCHW", true, 0.1, 2, 3, 2, 2, 3, train_nchw_avg_reserve_1, train_nchw_avg_reserve_2),
    GOLDEN(infer_nhwc, "NHWC", false, 1.0, 2, 3, 2, 3, 3, NULL, NULL),
    GOLDEN(infer_nchw, "NCHW", false, 1.0, 2, 3, 2, 2, 3, NULL, NULL),
};

/* Outputs and the tape's gradients of sum(y * w) with respect to x, scale and offset. */
static void check_golden(nb_ctx *c, const golden_case *g) {
  int64_t ch = g->channels;
  nb_tensor *x = tu_make(c, NB_F32, 4, g->shape, g->x), *scale = vec(c, NB_F32, g->scale, ch);
  nb_tensor *offset = vec(c, NB_F32, g->offset, ch), *w = tu_make(c, NB_F32, 4, g->shape, g->w), *out[6];
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tape_watch(t, x);
  nb_tape_watch(t, scale);
  nb_tape_watch(t, offset);
  assert_int_equal(nb_fused_batch_norm(c, x, scale, offset, vec(c, NB_F32, g->mean, ch),
                                       vec(c, NB_F32, g->variance, ch), 0.001, g->factor, g->format, g->training, out),
                   NB_OK);
  nb_tensor *loss = nb_sum(c, nb_mul(c, out[0], w), NULL, 0, false), *src[3] = {x, scale, offset}, *d[3];
  assert_int_equal(nb_tape_gradient(t, &loss, 1, src, 3, NULL, d), NB_OK);
  nb_tape_end(t);
  tu_check(out[0], NB_F32, 4, g->shape, g->y, GOLDEN_TOL);
  tu_check_vals(out[1], g->batch_mean, GOLDEN_TOL);
  tu_check_vals(out[2], g->batch_variance, GOLDEN_TOL);
  if (g->reserve_1) tu_check_vals(out[3], g->reserve_1, GOLDEN_TOL);
  if (g->reserve_2) tu_check_vals(out[4], g->reserve_2, GOLDEN_TOL);
  tu_check(d[0], NB_F32, 4, g->shape, g->dx, GOLDEN_TOL);
  tu_check_vals(d[1], g->dscale, GOLDEN_TOL);
  tu_check_vals(d[2], g->doffset, GOLDEN_TOL);
}

/* Second order under two tapes: the gradient of sum(dx * v), dx = d sum(y * w) / dx, with
   respect to x and scale, against TF's _FusedBatchNormGradGrad. */
static void check_golden_second_order(nb_ctx *c, const golden_case *g) {
  int64_t ch = g->channels;
  nb_tensor *x = tu_make(c, NB_F32, 4, g->shape, g->x), *scale = vec(c, NB_F32, g->scale, ch);
  nb_tensor *offset = vec(c, NB_F32, g->offset, ch), *w = tu_make(c, NB_F32, 4, g->shape, g->w), *out[6], *dx;
  nb_tensor *src[2] = {x, scale}, *d2[2];
  nb_tape *outer = nb_tape_begin(c, 0), *inner = nb_tape_begin(c, 0);
  for (int i = 0; i < 2; i++) nb_tape_watch(outer, src[i]), nb_tape_watch(inner, src[i]);
  assert_int_equal(nb_fused_batch_norm(c, x, scale, offset, vec(c, NB_F32, g->mean, ch),
                                       vec(c, NB_F32, g->variance, ch), 0.001, g->factor, g->format, g->training, out),
                   NB_OK);
  nb_tensor *loss = nb_sum(c, nb_mul(c, out[0], w), NULL, 0, false);
  assert_int_equal(nb_tape_gradient(inner, &loss, 1, &x, 1, NULL, &dx), NB_OK);
  nb_tensor *hvp = nb_sum(c, nb_mul(c, dx, tu_make(c, NB_F32, 4, g->shape, g->v)), NULL, 0, false);
  assert_int_equal(nb_tape_gradient(outer, &hvp, 1, src, 2, NULL, d2), NB_OK);
  nb_tape_end(inner);
  nb_tape_end(outer);
  tu_check(d2[0], NB_F32, 4, g->shape, g->ddx, 1e-4);
  tu_check_vals(d2[1], g->ddscale, 1e-4);
}

static void test_golden_forward_and_gradients(void **state) {
  for (int i = 0; i < (int)N(golden_cases); i++) {
    check_golden(*state, &golden_cases[i]);
    check_golden_second_order(*state, &golden_cases[i]);
  }
}

static void check_grad_op(nb_ctx *c, const char *format, bool training, const int64_t *shape, const double *dy,
                          const double *x, const double *scale, const double *mean, const double *var, const double *dx,
                          const double *dscale, const double *doffset) {
  nb_tensor *out[5];
  assert_int_equal(nb_fused_batch_norm_grad(c, tu_make(c, NB_F32, 4, shape, dy), tu_make(c, NB_F32, 4, shape, x),
                                            vec(c, NB_F32, scale, 3), vec(c, NB_F32, mean, 3), vec(c, NB_F32, var, 3),
                                            nb_scalar(c, NB_F32, 0), 0.001, format, training, out),
                   NB_OK);
  tu_check(out[0], NB_F32, 4, shape, dx, GOLDEN_TOL);
  tu_check_vals(out[1], dscale, GOLDEN_TOL);
  tu_check_vals(out[2], doffset, GOLDEN_TOL);
}

static void test_golden_grad_op(void **state) {
  check_grad_op(*state, "NCHW", true, TU_SHAPE(2, 3, 2, 2), grad_train_dy, grad_train_x, grad_train_scale,
                grad_train_mean, grad_train_variance, grad_train_x_backprop, grad_train_scale_backprop,
                grad_train_offset_backprop);
  check_grad_op(*state, "NHWC", false, TU_SHAPE(2, 2, 2, 3), grad_infer_dy, grad_infer_x, grad_infer_scale,
                grad_infer_mean, grad_infer_variance, grad_infer_x_backprop, grad_infer_scale_backprop,
                grad_infer_offset_backprop);
}

/* ---- layouts, NaN, empty, threads ------------------------------------------------------ */

/* NCHW and NCDHW equal NHWC and NDHWC on the transposed data. */
static void check_layouts_agree(nb_ctx *c, int rank, const char *first, const char *last) {
  int64_t shape[5] = {2, 3, 2, 2, 2}, n = rank == 4 ? 24 : 48;
  double v[48];
  for (int i = 0; i < n; i++) v[i] = sin(i * 1.7) * 3 + i % 5;
  nb_tensor *x = tu_make(c, NB_F64, rank, shape, v), *a[6], *b[6];
  nb_tensor *scale = vec(c, NB_F64, TU_VALS(1, 2, 0.5), 3), *offset = vec(c, NB_F64, TU_VALS(0, 1, -1), 3);
  int to_last[5] = {0, 2, 3, rank - 1, 1}, to_first[5] = {0, rank - 1, 1, 2, 3};
  to_last[rank - 1] = 1;
  assert_int_equal(nb_fused_batch_norm(c, x, scale, offset, NULL, NULL, 0.01, 1, first, true, a), NB_OK);
  nb_tensor *xt = nb_transpose(c, x, to_last, rank);
  assert_int_equal(nb_fused_batch_norm(c, xt, scale, offset, NULL, NULL, 0.01, 1, last, true, b), NB_OK);
  nb_tensor *back = nb_transpose(c, b[0], to_first, rank);
  double ya[48], yb[48];
  assert_int_equal(nb_read(a[0], ya, (size_t)n * 8), NB_OK);
  assert_int_equal(nb_read(back, yb, (size_t)n * 8), NB_OK);
  for (int i = 0; i < n; i++) assert_true(fabs(ya[i] - yb[i]) < 1e-12);
  for (int o = 1; o < 5; o++)
    for (int i = 0; i < 3; i++) assert_true(fabs(nb_item(a[o], i) - nb_item(b[o], i)) < 1e-12);
}

static void test_layouts_agree(void **state) {
  check_layouts_agree(*state, 4, "NCHW", "NHWC");
  check_layouts_agree(*state, 5, "NCDHW", "NDHWC");
}

/* A NaN poisons its channel's statistics, so that whole channel of y; others stay finite. */
static void test_nan_stays_in_its_channel(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F32, 4, TU_SHAPE(1, 1, 3, 2), TU_VALS(NAN, 1, 2, 2, 3, 3)), *out[6];
  nb_tensor *ones = vec(c, NB_F32, TU_VALS(1, 1), 2), *zeros = vec(c, NB_F32, TU_VALS(0, 0), 2);
  assert_int_equal(nb_fused_batch_norm(c, x, ones, zeros, NULL, NULL, 0, 1, "NHWC", true, out), NB_OK);
  double s = sqrt(2.0 / 3);
  tu_check_vals(out[0], TU_VALS(NAN, -1 / s, NAN, 0, NAN, 1 / s), 1e-6);
  tu_check_vals(out[1], TU_VALS(NAN, 2), 1e-7);
  tu_check_vals(out[2], TU_VALS(NAN, 1), 1e-7);
}

/* No elements per channel: y is empty and batch_mean/batch_variance are NaN in both
   modes, as in TF. */
static void test_empty_batch(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = nb_tensor_from(c, NB_F32, 4, TU_SHAPE(0, 2, 2, 2), NULL), *out[6];
  nb_tensor *ones = vec(c, NB_F32, TU_VALS(1, 1), 2), *zeros = vec(c, NB_F32, TU_VALS(0, 0), 2);
  assert_int_equal(nb_fused_batch_norm(c, x, ones, zeros, NULL, NULL, 0.001, 1, NULL, true, out), NB_OK);
  tu_check_shape(out[0], NB_F32, 4, TU_SHAPE(0, 2, 2, 2));
  tu_check_vals(out[1], TU_VALS(NAN, NAN), 0);
  tu_check_vals(out[2], TU_VALS(NAN, NAN), 0);
  assert_int_equal(nb_fused_batch_norm(c, x, ones, zeros, zeros, ones, 0.001, 1, NULL, false, out), NB_OK);
  tu_check_vals(out[1], TU_VALS(NAN, NAN), 0);
  tu_check_vals(out[2], TU_VALS(NAN, NAN), 0);
}

/* Zero channels: everything is empty, in both layouts, forward and gradient. */
static void test_no_channels(void **state) {
  nb_ctx *c = *state;
  const char *formats[2] = {"NHWC", "NCHW"};
  for (int f = 0; f < 2; f++) {
    const int64_t *shape = f ? TU_SHAPE(2, 0, 2, 2) : TU_SHAPE(2, 2, 2, 0);
    nb_tensor *x = nb_tensor_from(c, NB_F32, 4, shape, NULL), *v = nb_tensor_from(c, NB_F32, 1, TU_SHAPE(0), NULL);
    nb_tensor *out[6], *g[5];
    assert_int_equal(nb_fused_batch_norm(c, x, v, v, NULL, NULL, 0.001, 1, formats[f], true, out), NB_OK);
    tu_check_shape(out[0], NB_F32, 4, shape);
    tu_check_shape(out[1], NB_F32, 1, TU_SHAPE(0));
    assert_int_equal(nb_fused_batch_norm_grad(c, x, x, v, out[3], out[4], out[5], 0.001, formats[f], true, g), NB_OK);
    tu_check_shape(g[0], NB_F32, 4, shape);
    tu_check_shape(g[1], NB_F32, 1, TU_SHAPE(0));
    assert_int_equal(nb_fused_batch_norm(c, x, v, v, v, v, 0.001, 1, formats[f], false, out), NB_OK);
    tu_check_shape(out[0], NB_F32, 4, shape);
  }
}

/* The sums run over fixed blocks added in order: any thread count gives the same bits. */
static void check_threads_agree(nb_ctx *c, const int64_t *shape, const char *format, int64_t ch) {
  int64_t n = shape[0] * shape[1] * shape[2] * shape[3];
  float *v = malloc((size_t)n * sizeof *v), *ya = malloc((size_t)n * sizeof *v), *yb = malloc((size_t)n * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = (float)(sin((double)i * 0.37) * 2 + (double)(i % 7));
  nb_tensor *x = nb_tensor_from(c, NB_F32, 4, shape, v), *sv = nb_tensor_from(c, NB_F32, 1, &ch, NULL);
  nb_tensor *scale = nb_add(c, sv, nb_scalar(c, NB_F32, 1.5)), *a[6], *b[6], *ga[5], *gb[5];
  nb_ctx_set_threads(c, 1);
  assert_int_equal(nb_fused_batch_norm(c, x, scale, sv, NULL, NULL, 0.001, 1, format, true, a), NB_OK);
  assert_int_equal(nb_fused_batch_norm_grad(c, x, x, scale, a[3], a[4], a[5], 0.001, format, true, ga), NB_OK);
  nb_ctx_set_threads(c, 2); /* blocks split differently */
  assert_int_equal(nb_fused_batch_norm(c, x, scale, sv, NULL, NULL, 0.001, 1, format, true, b), NB_OK);
  assert_int_equal(nb_fused_batch_norm_grad(c, x, x, scale, b[3], b[4], b[5], 0.001, format, true, gb), NB_OK);
  assert_int_equal(nb_read(a[0], ya, (size_t)n * 4), NB_OK);
  assert_int_equal(nb_read(b[0], yb, (size_t)n * 4), NB_OK);
  assert_memory_equal(ya, yb, (size_t)n * 4);
  assert_int_equal(nb_read(ga[0], ya, (size_t)n * 4), NB_OK);
  assert_int_equal(nb_read(gb[0], yb, (size_t)n * 4), NB_OK);
  assert_memory_equal(ya, yb, (size_t)n * 4);
  for (int64_t i = 0; i < ch; i++) {
    assert_true(nb_item(a[2], i) == nb_item(b[2], i));
    assert_true(nb_item(ga[1], i) == nb_item(gb[1], i));
  }
  free(v), free(ya), free(yb);
}

static void test_thread_count_does_not_change_bits(void **state) {
  tu_two_threads_or_skip(*state);
  check_threads_agree(*state, TU_SHAPE(64, 24, 24, 6), "NHWC", 6);
  check_threads_agree(*state, TU_SHAPE(64, 6, 24, 24), "NCHW", 6);
}

/* ---- errors ------------------------------------------------------------------------------ */

typedef struct bn_inputs {
  nb_tensor *x, *scale, *offset, *mean, *var;
} bn_inputs;

static bn_inputs good_inputs(nb_ctx *c, nb_dtype t) {
  bn_inputs in = {tu_make(c, t, 4, TU_SHAPE(1, 2, 2, 3), NULL), vec(c, t, TU_VALS(1, 1, 1), 3),
                  vec(c, t, TU_VALS(0, 0, 0), 3), vec(c, t, TU_VALS(0, 0, 0), 3), vec(c, t, TU_VALS(1, 1, 1), 3)};
  return in;
}

static void expect_bn_error(nb_ctx *c, bn_inputs in, double eps, double factor, const char *format, bool training,
                            nb_code code, const char *frag1, const char *frag2) {
  nb_tensor *out[6];
  assert_int_equal(
      nb_fused_batch_norm(c, in.x, in.scale, in.offset, in.mean, in.var, eps, factor, format, training, out), code);
  assert_null(out[0]);
  tu_check_error(c, code, frag1, frag2);
}

static void test_forward_errors(void **state) {
  nb_ctx *c = *state;
  bn_inputs in = good_inputs(c, NB_F32), bad = in;
  bad.x = tu_make(c, NB_F32, 3, TU_SHAPE(2, 2, 3), NULL);
  expect_bn_error(c, bad, 0.001, 1, "NHWC", true, NB_SHAPE,
                  "FusedBatchNormV3: x must be 4-dimensional for data_format NHWC", "[2,2,3]");
  expect_bn_error(c, in, 0.001, 1, "NDHWC", true, NB_SHAPE, "x must be 5-dimensional for data_format NDHWC",
                  "[1,2,2,3]");
  expect_bn_error(c, in, 0.001, 1, "NWHC", true, NB_INVALID,
                  "data_format must be \"NHWC\", \"NCHW\", \"NDHWC\" or \"NCDHW\"", "got \"NWHC\"");
  expect_bn_error(c, in, -0.5, 1, "NHWC", true, NB_INVALID, "FusedBatchNormV3: epsilon must be >= 0", "-0.5");
  bad = in, bad.scale = vec(c, NB_F32, TU_VALS(1, 1), 2);
  expect_bn_error(c, bad, 0.001, 1, "NHWC", true, NB_SHAPE,
                  "scale must have the same number of elements as the channels of x, got 2 and 3", "[1,2,2,3]");
  bad = in, bad.offset = tu_make(c, NB_F32, 2, TU_SHAPE(1, 3), NULL);
  expect_bn_error(c, bad, 0.001, 1, "NHWC", true, NB_SHAPE, "offset must be 1-dimensional", "[1,3]");
  /* NCHW: the channels are dim 1, 2 here */
  expect_bn_error(c, in, 0.001, 1, "NCHW", true, NB_SHAPE, "scale must have the same number", "got 3 and 2");
  bad = in, bad.mean = vec(c, NB_F32, TU_VALS(0), 1);
  expect_bn_error(c, bad, 0.001, 1, "NHWC", false, NB_SHAPE, "When is_training=false, mean must have the same",
                  "got 1 and 3");
  expect_bn_error(c, bad, 0.001, 0.5, "NHWC", true, NB_SHAPE, "When exponential_avg_factor != 1, mean", "got 1 and 3");
  bad = in, bad.var = vec(c, NB_F32, TU_VALS(1), 1);
  expect_bn_error(c, bad, 0.001, 1, "NHWC", false, NB_SHAPE, "variance must have the same number", "got 1 and 3");
  bn_inputs ints = good_inputs(c, NB_I32);
  expect_bn_error(c, ints, 0.001, 1, "NHWC", true, NB_DTYPE, "x has dtype int32", "float32, float64");
  bad = in, bad.scale = vec(c, NB_F64, TU_VALS(1, 1, 1), 3);
  expect_bn_error(c, bad, 0.001, 1, "NHWC", true, NB_DTYPE, "scale has dtype float64",
                  "U must equal x's dtype float32");
  /* training with factor 1 reads no statistics: empty ones are fine */
  bad = in, bad.mean = bad.var = vec(c, NB_F32, NULL, 0);
  nb_tensor *out[6];
  assert_int_equal(nb_fused_batch_norm(c, bad.x, bad.scale, bad.offset, bad.mean, bad.var, 0.001, 1, NULL, true, out),
                   NB_OK);
}

/* Through nb_op: TF's attr names, an explicit U and T checked against the inputs. */
static void test_generic_entry(void **state) {
  nb_ctx *c = *state;
  bn_inputs in = good_inputs(c, NB_F32);
  nb_tensor *ins[5] = {in.x, in.scale, in.offset, in.mean, in.var}, *out[6];
  nb_attr ok[4] = {nb_attr_type("T", NB_F32), nb_attr_type("U", NB_F32), nb_attr_str("data_format", "NHWC"),
                   nb_attr_bool("is_training", false)};
  assert_int_equal(nb_op(c, "FusedBatchNormV3", ins, 5, ok, 4, out, 6), NB_OK);
  tu_check_shape(out[5], NB_F32, 0, NULL);
  nb_attr bad_u = nb_attr_type("U", NB_F64);
  assert_int_equal(nb_op(c, "FusedBatchNormV3", ins, 5, &bad_u, 1, out, 6), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "attr U=float64 does not match input 1 of dtype float32", NULL);
  assert_int_equal(nb_op(c, "FusedBatchNormV3", ins, 5, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "FusedBatchNormV3: has 6 outputs, caller asked for 1", NULL);
}

static void test_grad_op_errors(void **state) {
  nb_ctx *c = *state;
  bn_inputs in = good_inputs(c, NB_F32);
  nb_tensor *rs3 = nb_scalar(c, NB_F32, 0), *out[5];
  nb_tensor *dy = tu_make(c, NB_F32, 4, TU_SHAPE(1, 2, 3, 2), NULL);
  assert_int_equal(nb_fused_batch_norm_grad(c, dy, in.x, in.scale, in.mean, in.var, rs3, 0.001, NULL, true, out),
                   NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "FusedBatchNormGradV3: x and y_backprop must have same shape",
                 "x has shape [1,2,2,3] and y_backprop has shape [1,2,3,2]");
  assert_int_equal(nb_fused_batch_norm_grad(c, in.x, in.x, in.scale, vec(c, NB_F32, TU_VALS(0), 1), in.var, rs3, 0.001,
                                            NULL, true, out),
                   NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "reserve_space_1 must have the same number of elements as the channels of x",
                 "got 1 and 3");
  assert_int_equal(nb_fused_batch_norm_grad(c, nb_cast(c, in.x, NB_F64), in.x, in.scale, in.mean, in.var, rs3, 0.001,
                                            NULL, true, out),
                   NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "y_backprop has dtype float64, x has float32", NULL);
  assert_int_equal(nb_fused_batch_norm_grad(c, in.x, in.x, in.scale, in.mean, in.var, rs3, 0.001, "HWCN", true, out),
                   NB_INVALID);
  tu_check_error(c, NB_INVALID, "FusedBatchNormGradV3: data_format must be", "got \"HWCN\"");
  assert_int_equal(nb_fused_batch_norm_grad(c, in.x, in.x, in.scale, in.mean, in.var, rs3, -1, NULL, true, out),
                   NB_INVALID);
  tu_check_error(c, NB_INVALID, "epsilon must be >= 0", NULL);
}

/* A graph names the failing node. */
static void test_graph_error_names_node(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *x = nb_placeholder(c, NB_F32, 4, TU_SHAPE(2, 4, 4, 3), "x"), *out[6];
  nb_tensor *scale = nb_placeholder(c, NB_F32, 1, TU_SHAPE(2), "scale");
  assert_int_equal(nb_fused_batch_norm(c, x, scale, scale, NULL, NULL, 0.001, 1, NULL, true, out), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "FusedBatchNormV3 (node 'FusedBatchNormV3')",
                 "scale must have the same number of elements");
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* A graph refuses bad attrs, dtypes and ranks of the batch norm ops when it is built,
   though every dim (or the rank) of their inputs is unknown; so no gradient ever reads
   an unchecked data_format (an empty one once read before its first byte). */
static void test_graph_validation(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->c;
  nb_tensor *x = tu_unknown_dims(c, NB_F32, 4), *v = tu_unknown_dims(c, NB_F32, 1), *xr = tu_unknown_rank(c, NB_F32);
  nb_tensor *out[6];
  assert_int_equal(nb_fused_batch_norm(c, x, tu_unknown_rank(c, NB_F64), v, v, v, 0.001, 1, NULL, true, out), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "FusedBatchNormV3 (node 'FusedBatchNormV3'): scale has dtype float64", NULL);
  assert_int_equal(nb_fused_batch_norm(c, xr, v, v, v, v, 0.001, 1, "bogus", true, out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "FusedBatchNormV3 (node",
                 "data_format must be \"NHWC\", \"NCHW\", \"NDHWC\" or \"NCDHW\", got \"bogus\"");
  assert_int_equal(nb_fused_batch_norm(c, x, v, v, v, v, 0.001, 1, "NCDHW", true, out), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "FusedBatchNormV3 (node",
                 "x must be 5-dimensional for data_format NCDHW, got shape [-1,-1,-1,-1]");
  assert_int_equal(nb_fused_batch_norm(c, xr, v, v, v, v, -1, 1, NULL, true, out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "FusedBatchNormV3 (node", "epsilon must be >= 0, got -1");
  assert_int_equal(nb_fused_batch_norm(c, x, v, x, v, v, 0.001, 1, NULL, true, out), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "FusedBatchNormV3 (node", "offset must be 1-dimensional, got shape [-1,-1,-1,-1]");
  nb_tensor *ins[5] = {x, v, v, v, v};
  nb_attr u = nb_attr_type("U", NB_I32);
  assert_int_equal(nb_op(c, "FusedBatchNormV3", ins, 5, &u, 1, out, 6), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "FusedBatchNormV3 (node", "attr U=int32 is not supported; expected float32, float64");
  /* the gradient op: an empty data_format, mismatched shapes, a bad reserve space */
  assert_int_equal(nb_fused_batch_norm_grad(c, x, x, v, v, v, v, 0.001, "", true, out), NB_INVALID);
  tu_check_error(c, NB_INVALID, "FusedBatchNormGradV3 (node 'FusedBatchNormGradV3')", "got \"\"");
  nb_tensor *dy = nb_placeholder(c, NB_F32, 4, TU_SHAPE(-1, 2, -1, -1), "dy");
  nb_tensor *x3 = nb_placeholder(c, NB_F32, 4, TU_SHAPE(-1, 3, -1, -1), "x3");
  assert_int_equal(nb_fused_batch_norm_grad(c, dy, x3, v, v, v, v, 0.001, "NCHW", true, out), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "FusedBatchNormGradV3 (node",
                 "x has shape [-1,3,-1,-1] and y_backprop has shape [-1,2,-1,-1]");
  assert_int_equal(nb_fused_batch_norm_grad(c, xr, xr, v, tu_unknown_dims(c, NB_F32, 0), v, v, 0.001, NULL, true, out),
                   NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "FusedBatchNormGradV3 (node", "reserve_space_1 must be 1-dimensional, got shape []");
  /* valid ones build */
  assert_int_equal(nb_fused_batch_norm_grad(c, xr, x, v, v, v, v, 0.001, "NCHW", false, out), NB_OK);
  assert_int_equal(nb_fused_batch_norm(c, xr, v, v, v, v, 0.001, 1, "NDHWC", true, out), NB_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_graph_validation, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_training_by_hand, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_running_average_by_hand, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_inference_by_hand, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_op_by_hand, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_golden_forward_and_gradients, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_golden_grad_op, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_layouts_agree, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_nan_stays_in_its_channel, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_empty_batch, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_no_channels, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_thread_count_does_not_change_bits, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_forward_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_generic_entry, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_grad_op_errors, tu_setup, tu_teardown),
      cmocka_unit_test(test_graph_error_names_node),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
