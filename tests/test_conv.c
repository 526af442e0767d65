/* Conv2D and its backprops, MaxPool/AvgPool and their gradient ops, BiasAdd/BiasAddGrad:
   hand-checked values, TensorFlow golden data (eager float64 and float32, graph mode
   through nb_gradients), NaN and empty batches, thread-count independence, error paths. */
#include "graphutil.h"

#include "../src/ops/onednn.h" /* both kernel paths */

#include <omp.h>
#include <stdlib.h>

#include "golden/conv_golden.h"

/* The golden inputs are multiples of 1/64 in [-2, 2], so every product of two is a multiple
   of 2^-12 of magnitude <= 4 and every partial sum of Conv2D, its backprops (at most 84
   terms here) and BiasAddGrad one below 2^12: float32 holds them all exactly, so every
   summation order (each OpenBLAS kernel, any thread split) gives TensorFlow's float64
   values bit for bit. Only AvgPool and its gradient round (a quotient by the window size,
   then sums of a few such), which these relative tolerances cover many times over. */
#define POOL_F32_TOL 1e-5
#define POOL_F64_TOL 1e-10

static const nb_dtype float_types[2] = {NB_F32, NB_F64};

static int64_t size4(const int64_t *s) { return s[0] * s[1] * s[2] * s[3]; }

static nb_tensor *shape_tensor(nb_ctx *c, const int64_t *s) {
  int32_t v[4] = {(int32_t)s[0], (int32_t)s[1], (int32_t)s[2], (int32_t)s[3]};
  return nb_tensor_from(c, NB_I32, 1, TU_SHAPE(4), v);
}

/* sum(y * w) as a scalar. */
static nb_tensor *weighted_sum(nb_ctx *c, nb_tensor *y, nb_tensor *w) {
  nb_tensor *flat = nb_reshape(c, nb_mul(c, y, w), TU_SHAPE(-1), 1);
  return nb_sum(c, flat, (const int[]){0}, 1, false);
}

static const int64_t unit4[4] = {1, 1, 1, 1};
static const int64_t two4[4] = {1, 2, 2, 1};

/* ---- hand-checked values --------------------------------------------------------------- */

/* x = 1..9 as 3x3, W = [[1, 0], [0, 1]]: each output is x[i][j] + x[i+1][j+1]. */
static void test_conv2d_by_hand(void **state) {
  nb_ctx *c = *state;
  for (int t = 0; t < 2; t++) {
    nb_tensor *x = tu_make(c, float_types[t], 4, TU_SHAPE(1, 3, 3, 1), TU_VALS(1, 2, 3, 4, 5, 6, 7, 8, 9));
    nb_tensor *w = tu_make(c, float_types[t], 4, TU_SHAPE(2, 2, 1, 1), TU_VALS(1, 0, 0, 1));
    nb_conv2d_attrs a = {.strides = unit4, .padding = "VALID"};
    tu_check(nb_conv2d(c, x, w, &a), float_types[t], 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(6, 8, 12, 14), 0);
    /* SAME pads one zero row and column after (the odd one goes after) */
    a.padding = "SAME";
    tu_check(nb_conv2d(c, x, w, &a), float_types[t], 4, TU_SHAPE(1, 3, 3, 1), TU_VALS(6, 8, 3, 12, 14, 6, 7, 8, 9), 0);
    /* dy = ones: dx counts how many outputs read each input through W's ones */
    a.padding = "VALID";
    nb_tensor *dy = tu_make(c, float_types[t], 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(1, 1, 1, 1));
    tu_check(nb_conv2d_backprop_input(c, shape_tensor(c, TU_SHAPE(1, 3, 3, 1)), w, dy, &a), float_types[t], 4,
             TU_SHAPE(1, 3, 3, 1), TU_VALS(1, 1, 0, 1, 2, 1, 0, 1, 1), 0);
    /* dW[i][j] = sum of the 2x2 block of x starting at (i, j) */
    tu_check(nb_conv2d_backprop_filter(c, x, shape_tensor(c, TU_SHAPE(2, 2, 1, 1)), dy, &a), float_types[t], 4,
             TU_SHAPE(2, 2, 1, 1), TU_VALS(12, 16, 24, 28), 0);
  }
  assert_int_equal(nb_status(c), NB_OK);
}

static void test_pools_by_hand(void **state) {
  nb_ctx *c = *state;
  double v[16];
  for (int i = 0; i < 16; i++) v[i] = i + 1;
  for (int t = 0; t < 2; t++) {
    nb_tensor *x = tu_make(c, float_types[t], 4, TU_SHAPE(1, 4, 4, 1), v);
    nb_pool_attrs a = {.ksize = two4, .strides = two4, .padding = "VALID"};
    nb_tensor *y = nb_max_pool(c, x, &a);
    tu_check(y, float_types[t], 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(6, 8, 14, 16), 0);
    tu_check(nb_avg_pool(c, x, &a), float_types[t], 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(3.5, 5.5, 11.5, 13.5), 0);
    nb_tensor *dy = tu_make(c, float_types[t], 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(1, 2, 3, 4));
    tu_check(nb_max_pool_grad(c, x, y, dy, &a), float_types[t], 4, TU_SHAPE(1, 4, 4, 1),
             TU_VALS(0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4), 0);
    tu_check(nb_max_pool_grad_grad(c, x, y, x, &a), float_types[t], 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(6, 8, 14, 16), 0);
    tu_check(nb_avg_pool_grad(c, shape_tensor(c, TU_SHAPE(1, 4, 4, 1)), dy, &a), float_types[t], 4,
             TU_SHAPE(1, 4, 4, 1), TU_VALS(.25, .25, .5, .5, .25, .25, .5, .5, .75, .75, 1, 1, .75, .75, 1, 1), 0);
    /* SAME average pooling of 3x3 with 2x2 windows: edge windows divide by their real elements */
    nb_tensor *x3 = tu_make(c, float_types[t], 4, TU_SHAPE(1, 3, 3, 1), v);
    a.padding = "SAME";
    tu_check(nb_avg_pool(c, x3, &a), float_types[t], 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(3, 4.5, 7.5, 9), 0);
  }
  assert_int_equal(nb_status(c), NB_OK);
}

/* A tie routes the whole gradient to the window's first maximum in row-major order. */
static void test_max_pool_tie_goes_to_first(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(1, 3, 3, 2));
  nb_pool_attrs a = {.ksize = two4, .strides = unit4, .padding = "VALID"};
  nb_tensor *y = nb_max_pool(c, x, &a);
  nb_tensor *g = nb_max_pool_grad(c, x, y, tu_make(c, NB_F64, 4, TU_SHAPE(1, 1, 1, 1), TU_VALS(5)), &a);
  tu_check(g, NB_F64, 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(0, 5, 0, 0), 0);
}

static void test_bias_by_hand(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 3, TU_SHAPE(1, 2, 2), TU_VALS(1, 2, 3, 4));
  nb_tensor *b = tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(10, 20));
  tu_check(nb_bias_add(c, x, b, NULL), NB_F64, 3, TU_SHAPE(1, 2, 2), TU_VALS(11, 22, 13, 24), 0);
  tu_check(nb_bias_add(c, x, b, "NCHW"), NB_F64, 3, TU_SHAPE(1, 2, 2), TU_VALS(11, 12, 23, 24), 0);
  tu_check(nb_bias_add_grad(c, x, "NHWC"), NB_F64, 1, TU_SHAPE(2), TU_VALS(4, 6), 0);
  tu_check(nb_bias_add_grad(c, x, "NCHW"), NB_F64, 1, TU_SHAPE(2), TU_VALS(3, 7), 0);
}

/* ---- TensorFlow golden data ------------------------------------------------------------ */

static nb_conv2d_attrs golden_conv_attrs(const conv_golden *g) {
  bool expl = !strcmp(g->padding, "EXPLICIT");
  return (nb_conv2d_attrs){.strides = g->strides,
                           .padding = g->padding,
                           .data_format = g->data_format,
                           .dilations = g->dilations,
                           .explicit_paddings = expl ? g->explicit_paddings : NULL};
}

static void test_conv_golden_eager(void **state) {
  nb_ctx *c = *state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++)
    for (int t = 0; t < 2; t++) {
      const conv_golden *g = &conv_cases[i];
      nb_conv2d_attrs a = golden_conv_attrs(g);
      nb_tensor *x = tu_make_float(c, float_types[t], 4, g->x_shape, g->x),
                *f = tu_make_float(c, float_types[t], 4, g->f_shape, g->f);
      nb_tensor *dy = tu_make_float(c, float_types[t], 4, g->y_shape, g->dy);
      print_message("conv case %s %s\n", g->name, nb_dtype_name(float_types[t]));
      tu_check(nb_conv2d(c, x, f, &a), float_types[t], 4, g->y_shape, g->y, 0);
      tu_check(nb_conv2d_backprop_input(c, shape_tensor(c, g->x_shape), f, dy, &a), float_types[t], 4, g->x_shape,
               g->dx, 0);
      tu_check(nb_conv2d_backprop_filter(c, x, shape_tensor(c, g->f_shape), dy, &a), float_types[t], 4, g->f_shape,
               g->df, 0);
      assert_int_equal(nb_status(c), NB_OK);
    }
}

/* Graph mode: the gradients of sum(conv(x, f) * dy) through nb_gradients and a session. */
static void test_conv_golden_graph(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++) {
    const conv_golden *g = &conv_cases[i];
    nb_graph *gr = nb_graph_new();
    nb_ctx *c = nb_graph_ctx_new(gr), *e = nb_eager_new();
    nb_conv2d_attrs a = golden_conv_attrs(g);
    nb_tensor *xs[2] = {nb_placeholder(c, NB_F64, 4, g->x_shape, "x"), nb_placeholder(c, NB_F64, 4, g->f_shape, "f")};
    nb_tensor *y = nb_conv2d(c, xs[0], xs[1], &a), *d[2];
    nb_tensor *loss = weighted_sum(c, y, tu_make_float(c, NB_F64, 4, g->y_shape, g->dy));
    assert_int_equal(nb_gradients(c, &loss, 1, xs, 2, NULL, d), NB_OK);
    nb_session *s = nb_session_new(gr);
    nb_tensor *vals[2] = {tu_make_float(e, NB_F64, 4, g->x_shape, g->x), tu_make_float(e, NB_F64, 4, g->f_shape, g->f)};
    nb_tensor *fetch[3] = {y, d[0], d[1]}, *out[3];
    assert_int_equal(nb_run(s, xs, vals, 2, fetch, 3, out), NB_OK);
    tu_check(out[0], NB_F64, 4, g->y_shape, g->y, 0);
    tu_check(out[1], NB_F64, 4, g->x_shape, g->dx, 0);
    tu_check(out[2], NB_F64, 4, g->f_shape, g->df, 0);
    for (int j = 0; j < 3; j++) nb_tensor_free(out[j]);
    nb_session_free(s);
    nb_ctx_free(c);
    nb_ctx_free(e);
    nb_graph_free(gr);
  }
}

static nb_pool_attrs golden_pool_attrs(const pool_golden *g) {
  bool expl = !strcmp(g->padding, "EXPLICIT");
  return (nb_pool_attrs){.ksize = g->ksize,
                         .strides = g->strides,
                         .padding = g->padding,
                         .data_format = g->data_format,
                         .explicit_paddings = expl ? g->explicit_paddings : NULL};
}

static void test_pool_golden_eager(void **state) {
  nb_ctx *c = *state;
  for (size_t i = 0; i < sizeof pool_cases / sizeof *pool_cases; i++)
    for (int t = 0; t < 2; t++) {
      const pool_golden *g = &pool_cases[i];
      double tol = float_types[t] == NB_F32 ? POOL_F32_TOL : POOL_F64_TOL;
      nb_pool_attrs a = golden_pool_attrs(g);
      nb_tensor *x = tu_make_float(c, float_types[t], 4, g->x_shape, g->x),
                *dy = tu_make_float(c, float_types[t], 4, g->y_shape, g->dy);
      print_message("pool case %s %s\n", g->name, nb_dtype_name(float_types[t]));
      if (g->is_max) {
        nb_tensor *y = nb_max_pool(c, x, &a);
        tu_check(y, float_types[t], 4, g->y_shape, g->y, tol);
        tu_check(nb_max_pool_grad(c, x, y, dy, &a), float_types[t], 4, g->x_shape, g->dx, tol);
        if (!a.explicit_paddings)
          tu_check(nb_max_pool_grad_grad(c, x, y, tu_make_float(c, float_types[t], 4, g->x_shape, g->ddx), &a),
                   float_types[t], 4, g->y_shape, g->gg, tol);
      } else {
        tu_check(nb_avg_pool(c, x, &a), float_types[t], 4, g->y_shape, g->y, tol);
        tu_check(nb_avg_pool_grad(c, shape_tensor(c, g->x_shape), dy, &a), float_types[t], 4, g->x_shape, g->dx, tol);
      }
      assert_int_equal(nb_status(c), NB_OK);
    }
}

static void test_pool_golden_graph(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof pool_cases / sizeof *pool_cases; i++) {
    const pool_golden *g = &pool_cases[i];
    nb_graph *gr = nb_graph_new();
    nb_ctx *c = nb_graph_ctx_new(gr), *e = nb_eager_new();
    nb_pool_attrs a = golden_pool_attrs(g);
    nb_tensor *x = nb_placeholder(c, NB_F64, 4, g->x_shape, "x"), *dx = NULL;
    nb_tensor *y = g->is_max ? nb_max_pool(c, x, &a) : nb_avg_pool(c, x, &a);
    nb_tensor *loss = weighted_sum(c, y, tu_make_float(c, NB_F64, 4, g->y_shape, g->dy));
    assert_int_equal(nb_gradients(c, &loss, 1, &x, 1, NULL, &dx), NB_OK);
    nb_session *s = nb_session_new(gr);
    nb_tensor *val = tu_make_float(e, NB_F64, 4, g->x_shape, g->x), *fetch[2] = {y, dx}, *out[2];
    assert_int_equal(nb_run(s, &x, &val, 1, fetch, 2, out), NB_OK);
    tu_check(out[0], NB_F64, 4, g->y_shape, g->y, POOL_F64_TOL);
    tu_check(out[1], NB_F64, 4, g->x_shape, g->dx, POOL_F64_TOL);
    for (int j = 0; j < 2; j++) nb_tensor_free(out[j]);
    nb_session_free(s);
    nb_ctx_free(c);
    nb_ctx_free(e);
    nb_graph_free(gr);
  }
}

static void test_bias_golden(void **state) {
  nb_ctx *c = *state;
  for (size_t i = 0; i < sizeof bias_cases / sizeof *bias_cases; i++)
    for (int t = 0; t < 2; t++) {
      const bias_golden *g = &bias_cases[i];
      int64_t nc = !strcmp(g->data_format, "NCHW") && g->rank > 2 ? g->x_shape[1] : g->x_shape[g->rank - 1];
      nb_tensor *x = tu_make_float(c, float_types[t], g->rank, g->x_shape, g->x),
                *b = tu_make_float(c, float_types[t], 1, &nc, g->b);
      tu_check(nb_bias_add(c, x, b, g->data_format), float_types[t], g->rank, g->x_shape, g->y, 0);
      tu_check(nb_bias_add_grad(c, x, g->data_format), float_types[t], 1, &nc, g->db, 0);
    }
  assert_int_equal(nb_status(c), NB_OK);
}

/* ---- NaN, empty batches, threads --------------------------------------------------------- */

/* A NaN reaches exactly the outputs whose window covers it, in Conv2D and MaxPool alike. */
static void test_nan_propagates(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 4, TU_SHAPE(1, 3, 3, 1), TU_VALS(1, 2, 3, 4, 5, 6, 7, 8, NAN));
  nb_tensor *w = tu_make(c, NB_F64, 4, TU_SHAPE(2, 2, 1, 1), TU_VALS(1, 1, 1, 1));
  nb_conv2d_attrs a = {.strides = unit4, .padding = "VALID"};
  tu_check(nb_conv2d(c, x, w, &a), NB_F64, 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(12, 16, 24, NAN), 0);
  nb_pool_attrs p = {.ksize = two4, .strides = unit4, .padding = "VALID"};
  nb_tensor *y = nb_max_pool(c, x, &p);
  tu_check(y, NB_F64, 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(5, 6, 8, NAN), 0);
  /* the NaN is the maximum of its window, so its gradient goes there */
  nb_tensor *dy = tu_make(c, NB_F64, 4, TU_SHAPE(1, 2, 2, 1), TU_VALS(1, 1, 1, 1));
  tu_check(nb_max_pool_grad(c, x, y, dy, &p), NB_F64, 4, TU_SHAPE(1, 3, 3, 1), TU_VALS(0, 0, 0, 0, 1, 1, 0, 1, 1), 0);
}

static void test_empty_batch(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = nb_tensor_from(c, NB_F32, 4, TU_SHAPE(0, 5, 5, 2), NULL);
  nb_tensor *w = tu_make(c, NB_F32, 4, TU_SHAPE(3, 3, 2, 4), NULL);
  nb_conv2d_attrs a = {.strides = unit4, .padding = "SAME"};
  tu_check_shape(nb_conv2d(c, x, w, &a), NB_F32, 4, TU_SHAPE(0, 5, 5, 4));
  nb_tensor *dy = nb_tensor_from(c, NB_F32, 4, TU_SHAPE(0, 5, 5, 4), NULL);
  double zeros[72] = {0};
  tu_check(nb_conv2d_backprop_filter(c, x, shape_tensor(c, TU_SHAPE(3, 3, 2, 4)), dy, &a), NB_F32, 4,
           TU_SHAPE(3, 3, 2, 4), zeros, 0);
  tu_check_shape(nb_conv2d_backprop_input(c, shape_tensor(c, TU_SHAPE(0, 5, 5, 2)), w, dy, &a), NB_F32, 4,
                 TU_SHAPE(0, 5, 5, 2));
  a.data_format = "NCHW";
  nb_tensor *xc = nb_tensor_from(c, NB_F32, 4, TU_SHAPE(0, 2, 5, 5), NULL);
  nb_tensor *dyc = nb_tensor_from(c, NB_F32, 4, TU_SHAPE(0, 4, 5, 5), NULL);
  tu_check_shape(nb_conv2d(c, xc, w, &a), NB_F32, 4, TU_SHAPE(0, 4, 5, 5));
  tu_check(nb_conv2d_backprop_filter(c, xc, shape_tensor(c, TU_SHAPE(3, 3, 2, 4)), dyc, &a), NB_F32, 4,
           TU_SHAPE(3, 3, 2, 4), zeros, 0);
  nb_pool_attrs p = {.ksize = two4, .strides = two4, .padding = "VALID"};
  tu_check_shape(nb_max_pool(c, x, &p), NB_F32, 4, TU_SHAPE(0, 2, 2, 2));
  tu_check_shape(nb_avg_pool(c, x, &p), NB_F32, 4, TU_SHAPE(0, 2, 2, 2));
  tu_check(nb_bias_add_grad(c, x, NULL), NB_F32, 1, TU_SHAPE(2), zeros, 0);
  /* A filter with no output channels: the input gradient sums nothing, so it is zeros
     (the output buffer starts as garbage; oneDNN is not asked to write it). */
  nb_tensor *w0 = nb_tensor_from(c, NB_F32, 4, TU_SHAPE(3, 3, 2, 0), NULL);
  nb_tensor *dy0 = nb_tensor_from(c, NB_F32, 4, TU_SHAPE(1, 5, 5, 0), NULL);
  a.data_format = "NHWC";
  tu_check(nb_conv2d_backprop_input(c, shape_tensor(c, TU_SHAPE(1, 5, 5, 2)), w0, dy0, &a), NB_F32, 4,
           TU_SHAPE(1, 5, 5, 2), zeros, 0);
  assert_int_equal(nb_status(c), NB_OK);
}

/* Batches split across threads give the single thread's results, up to the order of
   sums: each output is a sum of n products (Conv2D: the kh kw ic of a window; the input
   backprop: at most kh kw oc; the filter backprop: every image's oh ow, whose per-thread
   partial sums are added last), so the two agree within tu_check_sums' bound, with S from
   the same op on |inputs|. */
static void test_threads_agree(void **state) {
  nb_ctx *c = *state;
  tu_two_threads_or_skip(c);
  const int64_t xs[4] = {16, 12, 12, 6}, fs[4] = {5, 5, 6, 16}, ys[4] = {16, 8, 8, 16};
  int64_t nv = size4(ys) + 7; /* the largest operand, read from an offset of up to 7 */
  double *v = malloc((size_t)nv * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < nv; i++) v[i] = (double)((i * 7919) % 23) / 11 - 1;
  nb_conv2d_attrs a = {.strides = unit4, .padding = "VALID"};
  nb_tensor *x = tu_make_float(c, NB_F64, 4, xs, v), *w = tu_make_float(c, NB_F64, 4, fs, v),
            *dy = tu_make_float(c, NB_F64, 4, ys, v + 7);
  nb_tensor *r[3][3];
  for (int t = 0; t < 3; t++) { /* 1 thread, 2 threads, then 1 thread on |x|, |w|, |dy| */
    nb_ctx_set_threads(c, t == 1 ? 2 : 1);
    nb_tensor *xt = t < 2 ? x : nb_abs(c, x), *wt = t < 2 ? w : nb_abs(c, w), *dyt = t < 2 ? dy : nb_abs(c, dy);
    r[t][0] = nb_conv2d(c, xt, wt, &a);
    r[t][1] = nb_conv2d_backprop_input(c, shape_tensor(c, xs), wt, dyt, &a);
    r[t][2] = nb_conv2d_backprop_filter(c, xt, shape_tensor(c, fs), dyt, &a);
  }
  assert_int_equal(nb_status(c), NB_OK);
  const int64_t terms[3] = {fs[0] * fs[1] * fs[2], fs[0] * fs[1] * fs[3], ys[0] * ys[1] * ys[2]};
  for (int k = 0; k < 3; k++) {
    int64_t n = nb_num_elements(r[0][k]);
    double *one_thread = malloc((size_t)n * sizeof *one_thread), *abs_sums = malloc((size_t)n * sizeof *abs_sums);
    assert_non_null(one_thread);
    assert_non_null(abs_sums);
    for (int64_t i = 0; i < n; i++) {
      one_thread[i] = nb_item(r[0][k], i);
      abs_sums[i] = nb_item(r[2][k], i);
    }
    tu_check_sums(r[1][k], one_thread, NB_F64, terms[k], abs_sums);
    free(one_thread);
    free(abs_sums);
  }
  free(v);
}

/* ---- oneDNN and the own kernels ----------------------------------------------------- */

/* A convolution case: input and filter dims (the input in format's order) and attrs. */
typedef struct conv_case {
  int64_t xs[4], fs[4], strides[4], dilations[4];
  const char *padding, *format;
  const int64_t *explicit_paddings;
} conv_case;

/* Conv2D and its two backprops (k = 0, 1, 2) of case cc in dtype t on the current path. */
static void conv_three(nb_ctx *c, const conv_case *cc, nb_dtype t, const double *v, bool abs_inputs, nb_tensor **r) {
  nb_conv2d_attrs a = {.strides = cc->strides,
                       .padding = cc->padding,
                       .data_format = cc->format,
                       .dilations = cc->dilations,
                       .explicit_paddings = cc->explicit_paddings};
  nb_tensor *x = tu_make_float(c, t, 4, cc->xs, v), *w = tu_make_float(c, t, 4, cc->fs, v + 3);
  if (abs_inputs) x = nb_abs(c, x), w = nb_abs(c, w);
  r[0] = nb_conv2d(c, x, w, &a);
  assert_non_null(r[0]);
  nb_tensor *dy = tu_make_float(c, t, 4, r[0]->shape, v + 5);
  if (abs_inputs) dy = nb_abs(c, dy);
  r[1] = nb_conv2d_backprop_input(c, shape_tensor(c, cc->xs), w, dy, &a);
  r[2] = nb_conv2d_backprop_filter(c, x, shape_tensor(c, cc->fs), dy, &a);
  assert_int_equal(nb_status(c), NB_OK);
}

/* Checks a float32 result against the float64 one of the own kernels: each output is a
   sum of at most n products, so tu_check_sums' bound holds with S from |inputs|. */
static void check_against_f64(const nb_tensor *got, const nb_tensor *want, const nb_tensor *abs_want, int64_t n) {
  int64_t m = nb_num_elements(want);
  assert_int_equal(nb_num_elements(got), m);
  double *w = malloc((size_t)m * sizeof *w), *s = malloc((size_t)m * sizeof *s);
  assert_non_null(w);
  assert_non_null(s);
  for (int64_t i = 0; i < m; i++) w[i] = nb_item(want, i), s[i] = nb_item(abs_want, i);
  tu_check_sums(got, w, NB_F64, n, s);
  free(w);
  free(s);
}

/* Conv2D and its backprops in float32 on the oneDNN path and on the own (im2col) path,
   each within the rounding bound of the float64 result, over the cases where TF's
   geometry differs most from a plain convolution: SAME with its odd padding element
   after, a stride beyond the window, dilation, explicit padding, batch 1, one channel,
   NHWC and NCHW. The oneDNN path must actually run (counted). */
static void test_onednn_and_own_kernels_agree(void **state) {
  nb_ctx *c = *state;
  static const int64_t pads[8] = {0, 0, 1, 2, 0, 1, 0, 0};
  static const conv_case cases[] = {
      {{2, 7, 6, 3}, {3, 3, 3, 4}, {1, 2, 2, 1}, {1, 1, 1, 1}, "SAME", "NHWC", NULL},
      {{1, 8, 9, 1}, {2, 2, 1, 5}, {1, 3, 3, 1}, {1, 1, 1, 1}, "SAME", "NHWC", NULL},
      {{1, 8, 9, 2}, {1, 1, 2, 3}, {1, 3, 3, 1}, {1, 1, 1, 1}, "VALID", "NHWC", NULL},
      {{3, 9, 9, 2}, {3, 2, 2, 3}, {1, 1, 1, 1}, {1, 2, 2, 1}, "SAME", "NHWC", NULL},
      {{2, 5, 6, 3}, {2, 3, 3, 2}, {1, 1, 1, 1}, {1, 1, 1, 1}, "EXPLICIT", "NHWC", pads},
      {{2, 3, 7, 6}, {3, 3, 3, 4}, {1, 1, 2, 2}, {1, 1, 1, 1}, "SAME", "NCHW", NULL},
      {{1, 1, 10, 9}, {2, 3, 1, 3}, {1, 1, 1, 1}, {1, 1, 2, 2}, "SAME", "NCHW", NULL},
      {{2, 4, 8, 8}, {2, 2, 4, 6}, {1, 1, 3, 3}, {1, 1, 1, 1}, "VALID", "NCHW", NULL},
  };
  double v[1024];
  for (int i = 0; i < 1024; i++) v[i] = (double)((i * 7919) % 29) / 13 - 1;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const conv_case *cc = &cases[i];
    nb_tensor *want[3], *abs_want[3], *got[3];
    nbop_onednn_set_enabled(false);
    conv_three(c, cc, NB_F64, v, false, want);
    conv_three(c, cc, NB_F64, v, true, abs_want);
    int64_t oh_ow = nb_num_elements(want[0]) / (cc->xs[0] * cc->fs[3]);
    const int64_t terms[3] = {cc->fs[0] * cc->fs[1] * cc->fs[2], cc->fs[0] * cc->fs[1] * cc->fs[3], cc->xs[0] * oh_ow};
    for (int on = 0; on <= 1; on++) {
      nbop_onednn_set_enabled(on);
      uint64_t before = nbop_onednn_executions();
      conv_three(c, cc, NB_F32, v, false, got);
      if (on) assert_int_equal(nbop_onednn_executions() - before, 3);
      for (int k = 0; k < 3; k++) check_against_f64(got[k], want[k], abs_want[k], terms[k]);
    }
  }
  nbop_onednn_set_enabled(true);
}

/* A training loop's later steps make no oneDNN primitive: a repeat of a convolution (new
   tensors, same shapes) finds its primitives cached, and other shapes make new ones. */
static void test_onednn_primitives_cached(void **state) {
  nb_ctx *c = *state;
  static const conv_case cc = {{2, 7, 6, 3}, {3, 3, 3, 4}, {1, 2, 2, 1}, {1, 1, 1, 1}, "SAME", "NHWC", NULL};
  static const conv_case other = {{2, 8, 6, 3}, {3, 3, 3, 4}, {1, 2, 2, 1}, {1, 1, 1, 1}, "SAME", "NHWC", NULL};
  double v[1024]; /* conv_three reads inputs from offsets up to 5 */
  for (int i = 0; i < 1024; i++) v[i] = (double)(i % 11) / 5 - 1;
  nb_tensor *r[3];
  conv_three(c, &cc, NB_F32, v, false, r);
  uint64_t made = nbop_onednn_primitives_made(), runs = nbop_onednn_executions();
  conv_three(c, &cc, NB_F32, v, true, r);
  assert_int_equal(nbop_onednn_executions() - runs, 3);
  assert_int_equal(nbop_onednn_primitives_made() - made, 0);
  conv_three(c, &other, NB_F32, v, false, r);
  assert_int_equal(nbop_onednn_primitives_made() - made, 3);
}

/* The eager golden convolutions (float32 and float64) on the im2col kernels alone; by
   default their float32 cases take oneDNN. */
static void test_conv_golden_on_own_kernels(void **state) {
  nbop_onednn_set_enabled(false);
  test_conv_golden_eager(state);
  nbop_onednn_set_enabled(true);
}

/* ---- errors ------------------------------------------------------------------------------ */

static void test_conv_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F32, 4, TU_SHAPE(1, 5, 5, 3), NULL),
            *w = tu_make(c, NB_F32, 4, TU_SHAPE(3, 3, 4, 8), NULL);
  nb_conv2d_attrs a = {.strides = unit4, .padding = "VALID"};
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_SHAPE, "Conv2D: input depth 3 does not match filter in_channels 4",
                 "(input [1,5,5,3], filter [3,3,4,8])");
  w = tu_make(c, NB_F32, 4, TU_SHAPE(3, 3, 3, 2), NULL);
  assert_null(nb_conv2d(c, tu_make(c, NB_F32, 3, TU_SHAPE(5, 5, 3), NULL), w, &a));
  tu_check_error(c, NB_SHAPE, "Conv2D: input must be 4-dimensional", "[5,5,3]");
  assert_null(nb_conv2d(c, x, tu_make(c, NB_F32, 2, TU_SHAPE(9, 2), NULL), &a));
  tu_check_error(c, NB_SHAPE, "Conv2D: filter must be 4-dimensional", "[9,2]");
  assert_null(nb_conv2d(c, x, tu_make(c, NB_F64, 4, TU_SHAPE(3, 3, 3, 2), NULL), &a));
  tu_check_error(c, NB_DTYPE, "Conv2D: inputs 0 and 1 must have the same dtype", "float64");
  a.strides = (const int64_t[]){1, 0, 1, 1};
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_INVALID, "Conv2D: strides must be in [1,", "[1,0,1,1]");
  a.strides = (const int64_t[]){2, 1, 1, 1};
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_UNIMPLEMENTED, "Conv2D: strides on the batch and channel dims must be 1", "[2,1,1,1]");
  a.strides = unit4;
  a.data_format = "NCHW"; /* strides are fine, but now the channel dim is 1: x's 5 vs w's 3 */
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_SHAPE, "input depth 5 does not match filter in_channels 3", NULL);
  a.data_format = "NWHC";
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_INVALID, "Conv2D: data_format must be \"NHWC\" or \"NCHW\"", "\"NWHC\"");
  a.data_format = NULL;
  a.padding = "FULL";
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_INVALID, "Conv2D: padding must be \"SAME\", \"VALID\" or \"EXPLICIT\"", "\"FULL\"");
  a.padding = "EXPLICIT";
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_INVALID, "Conv2D: explicit_paddings must have 8 values", "got 0");
  a.explicit_paddings = (const int64_t[]){0, 0, 1, 1, 1, 1, 1, 0};
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_UNIMPLEMENTED, "explicit_paddings on the batch and channel dims must be 0", "[0,0,1,1,1,1,1,0]");
  a.padding = "VALID";
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_INVALID, "explicit_paddings must be empty unless padding is \"EXPLICIT\"", "8 values");
  a.explicit_paddings = NULL;
  a.dilations = (const int64_t[]){1, 3, 3, 1}; /* effective window 7 > 5 */
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_SHAPE, "Conv2D: computed output size would be negative", "input [1,5,5,3], filter [3,3,3,2]");
  a.dilations = NULL;
  assert_null(nb_conv2d(c, x, w, NULL));
  tu_check_error(c, NB_INVALID, "Conv2D: attrs, strides or padding is NULL", NULL);
  /* strides of the wrong length reach the op only through nb_op */
  nb_attr bad[2] = {nb_attr_ints("strides", unit4, 3), nb_attr_str("padding", "SAME")};
  nb_tensor *y = NULL;
  assert_int_equal(nb_op(c, "Conv2D", (nb_tensor *[]){x, w}, 2, bad, 2, &y, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Conv2D: strides must have 4 values", "got 3");
  nb_attr six[3] = {nb_attr_ints("strides", unit4, 4), nb_attr_str("padding", "EXPLICIT"),
                    nb_attr_ints("explicit_paddings", (const int64_t[]){0, 0, 1, 1, 1, 1}, 6)};
  assert_int_equal(nb_op(c, "Conv2D", (nb_tensor *[]){x, w}, 2, six, 3, &y, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "Conv2D: explicit_paddings must have 8 values", "got 6");
  a.strides = (const int64_t[]){1, -2, 1, 1};
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_INVALID, "Conv2D: strides must be in [1,", "[1,-2,1,1]");
}

static void test_backprop_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 4, TU_SHAPE(1, 5, 5, 3), NULL),
            *w = tu_make(c, NB_F64, 4, TU_SHAPE(3, 3, 3, 2), NULL);
  nb_tensor *dy = tu_make(c, NB_F64, 4, TU_SHAPE(1, 3, 4, 2), NULL);
  nb_conv2d_attrs a = {.strides = unit4, .padding = "VALID"};
  assert_null(nb_conv2d_backprop_input(c, shape_tensor(c, TU_SHAPE(1, 5, 5, 3)), w, dy, &a));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropInput: out_backprop has shape [1,3,4,2], expected [1,3,3,2]",
                 "input_sizes [1,5,5,3], filter [3,3,3,2]");
  assert_null(nb_conv2d_backprop_filter(c, x, shape_tensor(c, TU_SHAPE(3, 3, 3, 2)), dy, &a));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropFilter: out_backprop has shape [1,3,4,2], expected [1,3,3,2]",
                 "filter_sizes [3,3,3,2]");
  nb_tensor *three = nb_tensor_from(c, NB_I32, 1, TU_SHAPE(3), (const int32_t[]){1, 5, 5});
  assert_null(nb_conv2d_backprop_input(c, three, w, dy, &a));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropInput: input_sizes must have 4 values", "got 3");
  nb_tensor *neg = nb_tensor_from(c, NB_I32, 1, TU_SHAPE(4), (const int32_t[]){3, 3, -3, 2});
  assert_null(nb_conv2d_backprop_filter(c, x, neg, dy, &a));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropFilter: filter_sizes must be nonnegative", "[3,3,-3,2]");
  assert_null(nb_conv2d_backprop_input(c, shape_tensor(c, TU_SHAPE(1, 5, 5, 3)), x, dy, &a));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropInput: input depth 3 does not match filter in_channels 5",
                 "(input_sizes [1,5,5,3], filter [1,5,5,3], out_backprop [1,3,4,2])");
  assert_null(nb_conv2d_backprop_input(c, shape_tensor(c, TU_SHAPE(1, 5, 5, 3)), dy, w, &a));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropInput: input depth 3 does not match filter in_channels 4", NULL);
  nb_tensor *w3 = tu_make(c, NB_F64, 3, TU_SHAPE(3, 3, 3), NULL);
  assert_null(nb_conv2d_backprop_input(c, shape_tensor(c, TU_SHAPE(1, 5, 5, 3)), w3, dy, &a));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropInput: filter must be 4-dimensional", "[3,3,3]");
  assert_null(nb_conv2d_backprop_filter(c, w3, shape_tensor(c, TU_SHAPE(3, 3, 3, 2)), dy, &a));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropFilter: input must be 4-dimensional", "[3,3,3]");
  nb_tensor *dy32 = tu_make(c, NB_F32, 4, TU_SHAPE(1, 3, 3, 2), NULL);
  assert_null(nb_conv2d_backprop_input(c, shape_tensor(c, TU_SHAPE(1, 5, 5, 3)), w, dy32, &a));
  tu_check_error(c, NB_DTYPE, "Conv2DBackpropInput: inputs 1 and 2 must have the same dtype", NULL);
  assert_null(nb_conv2d_backprop_filter(c, x, shape_tensor(c, TU_SHAPE(3, 3, 3, 2)), dy32, &a));
  tu_check_error(c, NB_DTYPE, "Conv2DBackpropFilter: inputs 0 and 2 must have the same dtype", NULL);
  /* sizes the window arithmetic would overflow on: refused, not computed */
  nb_conv2d_attrs dil = {.strides = unit4, .padding = "VALID", .dilations = (const int64_t[]){1, 4, 4, 1}};
  nb_tensor *huge_filter = nb_tensor_from(c, NB_I64, 1, TU_SHAPE(4), (const int64_t[]){INT64_MAX / 2, 1, 3, 2});
  nb_tensor *huge_input = nb_tensor_from(c, NB_I64, 1, TU_SHAPE(4), (const int64_t[]){1, INT64_MAX, 4, 3});
  assert_null(nb_conv2d_backprop_filter(c, x, huge_filter, dy, &dil));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropFilter: spatial and window dims must be at most 2147483648",
                 "window 4611686018427387903x1");
  nb_conv2d_attrs same2 = {.strides = (const int64_t[]){1, 2, 2, 1}, .padding = "SAME"};
  assert_null(nb_conv2d_backprop_input(c, huge_input, w, dy, &same2));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropInput: spatial and window dims must be at most",
                 "input 9223372036854775807x4");
}

static void test_pool_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F32, 4, TU_SHAPE(1, 2, 2, 1), NULL);
  nb_pool_attrs a = {.ksize = (const int64_t[]){1, 4, 4, 1}, .strides = unit4, .padding = "VALID"};
  assert_null(nb_max_pool(c, x, &a));
  tu_check_error(c, NB_SHAPE, "MaxPool: computed output size would be negative", "input [1,2,2,1]");
  assert_null(nb_avg_pool(c, x, &a));
  tu_check_error(c, NB_SHAPE, "AvgPool: computed output size would be negative", "window 4x4");
  a.ksize = (const int64_t[]){1, 2, 2, 2};
  assert_null(nb_max_pool(c, x, &a));
  tu_check_error(c, NB_UNIMPLEMENTED, "MaxPool: ksize on the batch and channel dims must be 1", "[1,2,2,2]");
  a.ksize = two4;
  a.padding = "EXPLICIT";
  assert_null(nb_avg_pool(c, x, &a));
  tu_check_error(c, NB_INVALID, "AvgPool: padding must be \"SAME\" or \"VALID\", got", "\"EXPLICIT\"");
  a.padding = "SAME";
  a.data_format = "HWCN";
  assert_null(nb_max_pool(c, x, &a));
  tu_check_error(c, NB_INVALID, "MaxPool: data_format must be", "\"HWCN\"");
  a.data_format = NULL;
  a.explicit_paddings = (const int64_t[]){0, 0, 0, 0, 0, 0, 0, 0};
  assert_null(nb_avg_pool(c, x, &a));
  tu_check_error(c, NB_INVALID, "AvgPool: takes no explicit_paddings", NULL);
  a.explicit_paddings = NULL;
  assert_null(nb_max_pool(c, tu_make(c, NB_I32, 4, TU_SHAPE(1, 2, 2, 1), NULL), &a));
  tu_check_error(c, NB_DTYPE, "MaxPool: input 0 has dtype int32", NULL);
  a.strides = two4;
  nb_tensor *y = nb_max_pool(c, x, &a), *bad = tu_make(c, NB_F32, 4, TU_SHAPE(1, 2, 2, 1), NULL);
  assert_null(nb_max_pool_grad(c, x, y, bad, &a));
  tu_check_error(c, NB_SHAPE, "MaxPoolGrad: grad has shape [1,2,2,1], expected [1,1,1,1]", "orig_input [1,2,2,1]");
  assert_null(nb_max_pool_grad_grad(c, x, y, y, &a));
  tu_check_error(c, NB_SHAPE, "MaxPoolGradGrad: grad has shape [1,1,1,1], expected [1,2,2,1]", NULL);
  assert_null(nb_avg_pool_grad(c, shape_tensor(c, TU_SHAPE(1, 4, 4, 1)), y, &a));
  tu_check_error(c, NB_SHAPE, "AvgPoolGrad: grad has shape [1,1,1,1], expected [1,2,2,1]",
                 "orig_input_shape [1,4,4,1]");
}

static void test_bias_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F32, 2, TU_SHAPE(2, 3), NULL);
  assert_null(nb_bias_add(c, x, tu_make(c, NB_F32, 1, TU_SHAPE(2), NULL), NULL));
  tu_check_error(c, NB_SHAPE, "BiasAdd: bias must be a vector of the channel dim's size 3",
                 "got shape [2] (value [2,3])");
  assert_null(nb_bias_add(c, tu_make(c, NB_F32, 1, TU_SHAPE(3), NULL), tu_make(c, NB_F32, 1, TU_SHAPE(3), NULL), NULL));
  tu_check_error(c, NB_SHAPE, "BiasAdd: input must be at least 2-dimensional", "[3]");
  assert_null(nb_bias_add_grad(c, x, "CHWN"));
  tu_check_error(c, NB_INVALID, "BiasAddGrad: data_format must be", "\"CHWN\"");
}

/* Graph builds check attrs and shapes at once, naming the node; an unknown batch dim
   stays unknown while the others are inferred. */
static void test_graph_build_errors_name_the_node(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  nb_tensor *x = nb_placeholder(c, NB_F32, 4, TU_SHAPE(2, 8, 8, 3), "x");
  nb_tensor *w = nb_placeholder(c, NB_F32, 4, TU_SHAPE(3, 3, 3, 4), "w");
  nb_conv2d_attrs a = {.strides = (const int64_t[]){1, 1, 1, 2}, .padding = "SAME"};
  assert_null(nb_conv2d(c, x, w, &a));
  tu_check_error(c, NB_UNIMPLEMENTED, "Conv2D (node 'Conv2D'): strides on the batch and channel dims must be 1", NULL);
  a.strides = two4;
  tu_check_shape(nb_conv2d(c, x, w, &a), NB_F32, 4, TU_SHAPE(2, 4, 4, 4));
  nb_tensor *y = nb_conv2d(c, nb_placeholder(c, NB_F32, 4, TU_SHAPE(-1, 8, 8, 3), "x_any_batch"), w, &a);
  tu_check_shape(y, NB_F32, 4, TU_SHAPE(-1, 4, 4, 4));
  /* an unknown height leaves the output height unknown (never a probe's guess) */
  nb_tensor *any_h = nb_placeholder(c, NB_F32, 4, TU_SHAPE(2, -1, 8, 3), "x_any_height");
  a.padding = "VALID";
  tu_check_shape(nb_conv2d(c, any_h, w, &a), NB_F32, 4, TU_SHAPE(2, -1, 3, 4));
  a.padding = "SAME";
  nb_pool_attrs p = {.ksize = two4, .strides = two4, .padding = "VALID", .data_format = "NCWH"};
  assert_null(nb_max_pool(c, nb_conv2d(c, x, w, &a), &p));
  tu_check_error(c, NB_INVALID, "MaxPool (node 'MaxPool'): data_format must be", NULL);
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* A graph refuses bad attrs, dtypes and ranks of the conv and pool ops when it is built,
   though every dim (or the rank) of their operands is unknown. */
static void test_graph_validation(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->c;
  static const int64_t zero4[4] = {1, 0, 1, 1}, three[3] = {1, 1, 1};
  nb_tensor *x = tu_unknown_dims(c, NB_F32, 4), *w = tu_unknown_rank(c, NB_F32), *sizes = tu_unknown_dims(c, NB_I32, 1);
  nb_conv2d_attrs ca = {.strides = unit4, .padding = "bogus"};
  assert_null(nb_conv2d(c, x, w, &ca));
  tu_check_error(c, NB_INVALID,
                 "Conv2D (node 'Conv2D'): padding must be \"SAME\", \"VALID\" or \"EXPLICIT\", got \"bogus\"", NULL);
  ca = (nb_conv2d_attrs){.strides = unit4, .padding = "SAME", .data_format = "NWHC"};
  assert_null(nb_conv2d_backprop_input(c, sizes, w, x, &ca));
  tu_check_error(c, NB_INVALID, "Conv2DBackpropInput (node", "data_format must be \"NHWC\" or \"NCHW\", got \"NWHC\"");
  ca = (nb_conv2d_attrs){.strides = zero4, .padding = "SAME"};
  assert_null(nb_conv2d_backprop_filter(c, x, sizes, w, &ca));
  tu_check_error(c, NB_INVALID, "Conv2DBackpropFilter (node", "strides must be in [1,");
  ca = (nb_conv2d_attrs){.strides = two4, .padding = "VALID", .data_format = "NCHW"};
  assert_null(nb_conv2d(c, x, w, &ca));
  tu_check_error(c, NB_UNIMPLEMENTED, "Conv2D (node", "strides on the batch and channel dims must be 1");
  ca = (nb_conv2d_attrs){.strides = unit4, .padding = "VALID", .dilations = zero4};
  assert_null(nb_conv2d(c, x, w, &ca));
  tu_check_error(c, NB_INVALID, "Conv2D (node", "dilations must be in [1,");
  ca = (nb_conv2d_attrs){.strides = unit4, .padding = "VALID"};
  assert_null(nb_conv2d(c, tu_unknown_dims(c, NB_F32, 3), w, &ca));
  tu_check_error(c, NB_SHAPE, "Conv2D (node", "input must be 4-dimensional, got shape [-1,-1,-1]");
  nb_tensor *x3 = nb_placeholder(c, NB_F32, 4, TU_SHAPE(-1, -1, -1, 3), "x3");
  nb_tensor *w5 = nb_placeholder(c, NB_F32, 4, TU_SHAPE(-1, -1, 5, -1), "w5");
  assert_null(nb_conv2d(c, x3, w5, &ca));
  tu_check_error(c, NB_SHAPE, "Conv2D (node", "input depth 3 does not match filter in_channels 5 (input [-1,-1,-1,3]");
  assert_null(nb_conv2d(c, x, tu_unknown_rank(c, NB_I32), &ca));
  tu_check_error(c, NB_DTYPE, "Conv2D (node", "float32 and int32");
  assert_null(nb_conv2d_backprop_input(c, nb_tensor_from(c, NB_I64, 1, TU_SHAPE(3), three), w, x, &ca));
  tu_check_error(c, NB_SHAPE, "Conv2DBackpropInput (node", "input_sizes must have 4 values, got 3");
  nb_pool_attrs pa = {.ksize = two4, .strides = two4, .padding = "bogus"};
  assert_null(nb_max_pool(c, x, &pa));
  tu_check_error(c, NB_INVALID, "MaxPool (node 'MaxPool'): padding must be", "got \"bogus\"");
  pa = (nb_pool_attrs){.ksize = two4, .strides = two4, .padding = "EXPLICIT"};
  assert_null(nb_avg_pool(c, w, &pa));
  tu_check_error(c, NB_INVALID, "AvgPool (node 'AvgPool'): padding must be \"SAME\" or \"VALID\", got \"EXPLICIT\"",
                 NULL);
  nb_attr short_ksize[3] = {nb_attr_ints("ksize", three, 3), nb_attr_ints("strides", two4, 4),
                            nb_attr_str("padding", "SAME")};
  nb_tensor *grad_in[3] = {x, w, x}, *out[1];
  assert_int_equal(nb_op(c, "MaxPoolGrad", grad_in, 3, short_ksize, 3, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "MaxPoolGrad (node", "ksize must have 4 values, got 3");
  pa = (nb_pool_attrs){.ksize = two4, .strides = two4, .padding = "SAME", .data_format = "HWCN"};
  assert_null(nb_max_pool_grad_grad(c, x, w, x, &pa));
  tu_check_error(c, NB_INVALID, "MaxPoolGradGrad (node", "data_format must be \"NHWC\" or \"NCHW\", got \"HWCN\"");
  pa = (nb_pool_attrs){.ksize = two4, .strides = zero4, .padding = "VALID"};
  assert_null(nb_avg_pool_grad(c, sizes, w, &pa));
  tu_check_error(c, NB_INVALID, "AvgPoolGrad (node", "strides must be in [1,");
  pa = (nb_pool_attrs){.ksize = two4, .strides = two4, .padding = "VALID"};
  assert_null(nb_max_pool_grad(c, x, tu_unknown_dims(c, NB_F32, 2), x, &pa));
  tu_check_error(c, NB_SHAPE, "MaxPoolGrad (node", "orig_output must be 4-dimensional, got shape [-1,-1]");
  assert_null(nb_avg_pool(c, tu_unknown_rank(c, NB_I64), &pa));
  tu_check_error(c, NB_DTYPE, "AvgPool (node", "input 0 has dtype int64");
  assert_null(nb_bias_add(c, x, w, "NWHC"));
  tu_check_error(c, NB_INVALID, "BiasAdd (node 'BiasAdd'): data_format must be", "got \"NWHC\"");
  assert_null(nb_bias_add(c, x, x, NULL));
  tu_check_error(c, NB_SHAPE, "BiasAdd (node", "bias must be 1-dimensional, got shape [-1,-1,-1,-1]");
  assert_null(nb_bias_add(c, x3, nb_placeholder(c, NB_F32, 1, TU_SHAPE(5), "b5"), NULL));
  tu_check_error(c, NB_SHAPE, "BiasAdd (node", "bias must be a vector of the channel dim's size 3, got shape [5]");
  assert_null(nb_bias_add_grad(c, tu_unknown_dims(c, NB_F32, 1), NULL));
  tu_check_error(c, NB_SHAPE, "BiasAddGrad (node", "input must be at least 2-dimensional, got shape [-1]");
  /* valid ops build, their unknown dims left to run time */
  tu_check_shape(nb_max_pool(c, x, &pa), NB_F32, 4, TU_SHAPE(-1, -1, -1, -1));
  assert_non_null(nb_conv2d(c, x, w, &ca));
  assert_int_equal(nb_status(c), NB_OK);
}

/* Runs n independent MaxPoolGrads of inputs shapes[i] on one thread, then on two (where
   there are two cores), and returns how many steps of the second run ran beside another.
   Max pooling's gradient routes values without arithmetic, so the two-thread run equals
   one thread's bit for bit. */
static int64_t run_pool_grads(int n, const int64_t (*shapes)[4]) {
  static const int64_t window[4] = {1, 2, 2, 1};
  nb_pool_attrs pool = {.ksize = window, .strides = window, .padding = "VALID"};
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  nb_tensor *x[4], *value[4], *fetch[4], *one[4], *two[4];
  assert_true(n <= 4);
  for (int i = 0; i < n; i++) {
    x[i] = nb_placeholder(c, NB_F32, 4, shapes[i], NULL);
    value[i] = nb_init_glorot_uniform(e, NB_F32, 4, shapes[i], (const int64_t[]){7, i});
    nb_tensor *y = nb_max_pool(c, x[i], &pool);
    fetch[i] = nb_max_pool_grad(c, x[i], y, nb_ones_like(c, y), &pool);
  }
  assert_int_equal(nb_status(c), NB_OK);
  nb_session *s = nb_session_new(g);
  nb_session_set_threads(s, 1);
  assert_int_equal(nb_run(s, x, value, n, fetch, n, one), NB_OK);
  bool two_cores = omp_get_num_procs() > 1; /* one under check-coretypes' single-core runs */
  nb_session_set_threads(s, two_cores ? 2 : 1);
  if (nb_run(s, x, value, n, fetch, n, two) != NB_OK) fail_msg("%s", nb_session_error(s));
  nb_session_stats stats;
  nb_session_get_stats(s, &stats);
  for (int i = 0; i < n; i++) {
    assert_memory_equal(nb_data(one[i]), nb_data(two[i]), (size_t)nb_num_elements(one[i]) * sizeof(float));
    nb_tensor_free(one[i]);
    nb_tensor_free(two[i]);
  }
  nb_session_free(s);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
  return two_cores ? stats.concurrent_steps_last_run : -1;
}

/* Two independent MaxPoolGrads, each big enough for a session on two threads to run them
   at once (one thread each): a kernel's per-thread scratch must follow the range it was
   given, not the enclosing pair's thread number (a heap overflow once). */
static void test_paired_pool_grads(void **state) {
  (void)state;
  static const int64_t shapes[2][4] = {{8, 32, 32, 16}, {8, 32, 32, 16}};
  int64_t concurrent = run_pool_grads(2, shapes);
  if (concurrent < 0) skip();   /* one core: the values matched, pairing is not there to check */
  assert_true(concurrent >= 2); /* they ran as a pair */
}

/* A step runs beside another only when their work is balanced: a pair lasts as long as its
   larger step on half the threads. A small gradient, and three 16 times its size: the small
   one runs alone on both threads (beside a large one it would leave a thread idle most of
   the pair), two large ones pair, and the third runs alone; so do the large ones' pools (the
   small one's is too small to pair). */
static void test_pairs_balance_work(void **state) {
  (void)state;
  static const int64_t shapes[4][4] = {{8, 8, 8, 16}, {8, 32, 32, 16}, {8, 32, 32, 16}, {8, 32, 32, 16}};
  int64_t concurrent = run_pool_grads(4, shapes);
  if (concurrent < 0) skip(); /* one core: the values matched, pairing is not there to check */
  assert_int_equal(concurrent, 4);
}

/* Steps that run at once write over their dying inputs as one thread's run does: here
   u_k = tanh(x_k + x_k) for two inputs, the sums and then the tanhs pairing (no pass fuses
   them), each tanh taking its sum's block. So the two-thread run holds two blocks at its
   peak, as the one-thread run does, not four, and gives the same values bit for bit (an
   elementwise loop's result does not depend on its thread split). */
static void test_pair_forwards_inputs(void **state) {
  (void)state;
  static const int64_t shape[4] = {8, 32, 32, 16};
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  nb_tensor *x[2], *value[2], *fetch[2], *res[2][2];
  for (int i = 0; i < 2; i++) {
    x[i] = nb_placeholder(c, NB_F32, 4, shape, NULL);
    value[i] = nb_init_glorot_uniform(e, NB_F32, 4, shape, (const int64_t[]){11, i});
    fetch[i] = nb_tanh(c, nb_add(c, x[i], x[i]));
  }
  assert_int_equal(nb_status(c), NB_OK);
  nb_session *s = nb_session_new_with_opts(g, &(nb_session_opts){.passes = 0});
  nb_session_stats stats[2];
  bool two_cores = omp_get_num_procs() > 1;
  for (int t = 0; t < 2; t++) {
    nb_session_set_threads(s, t && two_cores ? 2 : 1);
    if (nb_run(s, x, value, 2, fetch, 2, res[t]) != NB_OK) fail_msg("%s", nb_session_error(s));
    nb_session_get_stats(s, &stats[t]);
  }
  if (two_cores) assert_int_equal(stats[1].concurrent_steps_last_run, 4);
  assert_int_equal(stats[1].peak_bytes_last_run, stats[0].peak_bytes_last_run);
  assert_int_equal(stats[0].peak_bytes_last_run, 2 * size4(shape) * (int64_t)sizeof(float));
  for (int i = 0; i < 2; i++) {
    assert_memory_equal(nb_data(res[0][i]), nb_data(res[1][i]), (size_t)size4(shape) * sizeof(float));
    for (int t = 0; t < 2; t++) nb_tensor_free(res[t][i]);
  }
  nb_session_free(s);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_graph_validation, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_conv2d_by_hand, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_pools_by_hand, tu_setup, tu_teardown),
      cmocka_unit_test(test_paired_pool_grads),
      cmocka_unit_test(test_pairs_balance_work),
      cmocka_unit_test(test_pair_forwards_inputs),
      cmocka_unit_test_setup_teardown(test_max_pool_tie_goes_to_first, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_bias_by_hand, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_conv_golden_eager, tu_setup, tu_teardown),
      cmocka_unit_test(test_conv_golden_graph),
      cmocka_unit_test_setup_teardown(test_pool_golden_eager, tu_setup, tu_teardown),
      cmocka_unit_test(test_pool_golden_graph),
      cmocka_unit_test_setup_teardown(test_bias_golden, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_nan_propagates, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_empty_batch, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_threads_agree, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_onednn_and_own_kernels_agree, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_conv_golden_on_own_kernels, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_onednn_primitives_cached, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_conv_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_backprop_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_pool_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_bias_errors, tu_setup, tu_teardown),
      cmocka_unit_test(test_graph_build_errors_name_the_node),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
