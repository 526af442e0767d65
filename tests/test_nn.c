/* The nn family: values against TensorFlow (tests/golden/nn_golden.h, float32 and float64),
   graph mode against eager, the Hessian of the softmax cross-entropy (graph and nested
   tapes), numerical stability, OneHot, and every error path. Gradients are checked
   registry-wide in test_gradcheck_all.c. */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include "graphutil.h"

#include <stdio.h>
#include <unistd.h>

#include "golden/nn_golden.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define TOL_F32 2e-6
#define TOL_F64 1e-13

static double tol_of(nb_dtype t) { return t == NB_F32 ? TOL_F32 : TOL_F64; }

/* ---- TensorFlow's values ------------------------------------------------------------------ */

typedef struct dtype_golden {
  nb_dtype t;
  const double *softmax, *log_softmax, *xent_loss, *xent_backprop, *sparse_loss, *sparse_backprop, *l2_loss;
} dtype_golden;

static const dtype_golden goldens[] = {
    {NB_F32, nn_softmax_f32, nn_log_softmax_f32, nn_xent_loss_f32, nn_xent_backprop_f32, nn_sparse_loss_f32,
     nn_sparse_backprop_f32, nn_l2_loss_f32},
    {NB_F64, nn_softmax_f64, nn_log_softmax_f64, nn_xent_loss_f64, nn_xent_backprop_f64, nn_sparse_loss_f64,
     nn_sparse_backprop_f64, nn_l2_loss_f64},
};

#define LOGITS_SHAPE TU_SHAPE(3, 5)

static void test_softmax_golden(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < COUNT(goldens); i++) {
    const dtype_golden *g = &goldens[i];
    nb_tensor *x = tu_make(c, g->t, 2, LOGITS_SHAPE, nn_logits);
    tu_check(nb_softmax(c, x), g->t, 2, LOGITS_SHAPE, g->softmax, tol_of(g->t));
    tu_check(nb_log_softmax(c, x), g->t, 2, LOGITS_SHAPE, g->log_softmax, tol_of(g->t));
    tu_check(nb_l2_loss(c, x), g->t, 0, NULL, g->l2_loss, tol_of(g->t));
  }
}

static void test_xent_golden(void **state) {
  nb_ctx *c = *state;
  for (int i = 0; i < COUNT(goldens); i++) {
    const dtype_golden *g = &goldens[i];
    nb_tensor *x = tu_make(c, g->t, 2, LOGITS_SHAPE, nn_logits), *loss, *bp;
    nb_tensor *labels = tu_make(c, g->t, 2, LOGITS_SHAPE, nn_labels);
    assert_int_equal(nb_softmax_cross_entropy_with_logits(c, x, labels, &loss, &bp), NB_OK);
    tu_check(loss, g->t, 1, TU_SHAPE(3), g->xent_loss, tol_of(g->t));
    tu_check(bp, g->t, 2, LOGITS_SHAPE, g->xent_backprop, tol_of(g->t));
    double labels_v[3];
    for (int j = 0; j < 3; j++) labels_v[j] = (double)nn_sparse_labels[j];
    for (int li = 0; li < 2; li++) {
      nb_tensor *sparse = tu_make(c, li ? NB_I64 : NB_I32, 1, TU_SHAPE(3), labels_v);
      assert_int_equal(nb_sparse_softmax_cross_entropy_with_logits(c, x, sparse, &loss, &bp), NB_OK);
      tu_check(loss, g->t, 1, TU_SHAPE(3), g->sparse_loss, tol_of(g->t));
      tu_check(bp, g->t, 2, LOGITS_SHAPE, g->sparse_backprop, tol_of(g->t));
    }
  }
}

typedef struct act_golden {
  const char *what;
  nb_tensor *(*fn)(nb_ctx *c, nb_tensor *x);
  const double *y[2], *dx[2]; /* float32, float64 */
} act_golden;

static nb_tensor *leaky_relu_01(nb_ctx *c, nb_tensor *x) { return nb_leaky_relu(c, x, 0.1); }
static nb_tensor *gelu_exact(nb_ctx *c, nb_tensor *x) { return nb_gelu(c, x, false); }
static nb_tensor *gelu_tanh(nb_ctx *c, nb_tensor *x) { return nb_gelu(c, x, true); }

/* LeakyRelu with TF's default alpha, through the generic entry with no attrs */
static nb_tensor *leaky_relu_default(nb_ctx *c, nb_tensor *x) {
  nb_tensor *y = NULL;
  nb_op(c, "LeakyRelu", &x, 1, NULL, 0, &y, 1);
  return y;
}

static const act_golden act_goldens[] = {
    {"relu6", nb_relu6, {nn_relu6_f32, nn_relu6_f64}, {nn_relu6_dx_f32, nn_relu6_dx_f64}},
    {"leaky_relu",
     leaky_relu_default,
     {nn_leaky_relu_f32, nn_leaky_relu_f64},
     {nn_leaky_relu_dx_f32, nn_leaky_relu_dx_f64}},
    {"leaky_relu_01",
     leaky_relu_01,
     {nn_leaky_relu_01_f32, nn_leaky_relu_01_f64},
     {nn_leaky_relu_01_dx_f32, nn_leaky_relu_01_dx_f64}},
    {"selu", nb_selu, {nn_selu_f32, nn_selu_f64}, {nn_selu_dx_f32, nn_selu_dx_f64}},
    {"gelu", gelu_exact, {nn_gelu_f32, nn_gelu_f64}, {nn_gelu_dx_f32, nn_gelu_dx_f64}},
    {"gelu_tanh", gelu_tanh, {nn_gelu_tanh_f32, nn_gelu_tanh_f64}, {nn_gelu_tanh_dx_f32, nn_gelu_tanh_dx_f64}},
};

/* Each activation and its gradient d sum(w f(x))/dx (nabla's fused gradient op against TF's
   autodiff), on both sides of every kink. */
static void test_activations_golden(void **state) {
  nb_ctx *c = *state;
  const int64_t *shape = TU_SHAPE(COUNT(nn_act_x));
  for (int i = 0; i < COUNT(act_goldens); i++)
    for (int d = 0; d < 2; d++) {
      const act_golden *a = &act_goldens[i];
      nb_dtype t = d ? NB_F64 : NB_F32;
      nb_tensor *x = tu_make(c, t, 1, shape, nn_act_x), *w = tu_make(c, t, 1, shape, nn_act_w), *dx = NULL;
      nb_tape *tape = nb_tape_begin(c, 0);
      nb_tape_watch(tape, x);
      nb_tensor *y = a->fn(c, x), *s = nb_sum(c, nb_mul(c, y, w), (const int[]){0}, 1, false);
      assert_int_equal(nb_tape_gradient(tape, &s, 1, &x, 1, NULL, &dx), NB_OK);
      nb_tape_end(tape);
      tu_check(y, t, 1, shape, a->y[d], tol_of(t));
      tu_check(dx, t, 1, shape, a->dx[d], tol_of(t));
    }
}

/* Float32 Gelu and GeluGrad (vectorized erfc, exp, tanh) against float64 (libm) over
   [-9, 9), down to the tail where gelu is ~1e-19: within a few ulp times the conditioning
   of erfc(-x/sqrt 2) to its float32 argument, about x^2 for negative x. */
static void test_gelu_f32_accuracy(void **state) {
  nb_ctx *c = *state;
  enum { N = 1800 };
  static double x[N];
  for (int i = 0; i < N; i++) x[i] = -9 + 0.01 * i + 0.003;
  for (int approximate = 0; approximate < 2; approximate++) {
    nb_tensor *x32 = tu_make(c, NB_F32, 1, TU_SHAPE(N), x), *x64 = nb_cast(c, x32, NB_F64);
    nb_tensor *y32 = nb_gelu(c, x32, approximate), *y64 = nb_gelu(c, x64, approximate);
    nb_tensor *g32 = nb_gelu_grad(c, nb_ones_like(c, x32), x32, approximate);
    nb_tensor *g64 = nb_gelu_grad(c, nb_ones_like(c, x64), x64, approximate);
    for (int i = 0; i < N; i++) {
      double want = nb_item(y64, i), got = nb_item(y32, i), rel = 3e-7 * (4 + x[i] * x[i]);
      if (fabs(got - want) > rel * fabs(want) + 1e-37) fail_msg("gelu(%g): %.9g, want %.9g", x[i], got, want);
      want = nb_item(g64, i), got = nb_item(g32, i);
      if (fabs(got - want) > rel * fabs(want) + 1e-7) fail_msg("gelu'(%g): %.9g, want %.9g", x[i], got, want);
    }
  }
}

/* Far tails and NaN: no inf * 0 inside the slopes. */
static void test_gelu_extremes(void **state) {
  nb_ctx *c = *state;
  for (int d = 0; d < 2; d++)
    for (int approximate = 0; approximate < 2; approximate++) {
      nb_dtype t = d ? NB_F64 : NB_F32;
      nb_tensor *x = tu_make(c, t, 1, TU_SHAPE(5), TU_VALS(-1e4, -30, 30, 1e4, NAN));
      tu_check_vals(nb_gelu(c, x, approximate), TU_VALS(0, 0, 30, 1e4, NAN), 1e-7);
      tu_check_vals(nb_gelu_grad(c, nb_ones_like(c, x), x, approximate), TU_VALS(0, 0, 1, 1, NAN), 1e-7);
    }
}

static void test_relu6_int(void **state) {
  nb_ctx *c = *state;
  for (int d = 0; d < 2; d++) {
    nb_dtype t = d ? NB_I64 : NB_I32;
    nb_tensor *x = tu_make(c, t, 1, TU_SHAPE(4), TU_VALS(-3, 2, 6, 9));
    tu_check(nb_relu6(c, x), t, 1, TU_SHAPE(4), TU_VALS(0, 2, 6, 6), 0);
    nb_tensor *g = tu_make(c, t, 1, TU_SHAPE(4), TU_VALS(5, 5, 5, 5));
    tu_check(nb_relu6_grad(c, g, x), t, 1, TU_SHAPE(4), TU_VALS(0, 5, 0, 0), 0);
  }
}

/* ---- graph mode ---------------------------------------------------------------------------- */

/* The losses built in a graph over placeholders of unknown batch size give the eager values. */
static void test_graph_equals_eager(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(-1, 5), "logits");
  nb_tensor *l = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(-1, 5), "labels");
  nb_tensor *sl = nb_placeholder(f->c, NB_I64, 1, TU_SHAPE(-1), "sparse");
  nb_tensor *loss, *bp, *sloss, *sbp;
  assert_int_equal(nb_softmax_cross_entropy_with_logits(f->c, x, l, &loss, &bp), NB_OK);
  assert_int_equal(nb_sparse_softmax_cross_entropy_with_logits(f->c, x, sl, &sloss, &sbp), NB_OK);
  assert_int_equal(nb_rank(loss), 1);
  assert_int_equal(nb_rank(sbp), 2);
  assert_int_equal(nb_shape(sbp)[1], 5);
  nb_tensor *ph[3] = {x, l, sl};
  nb_tensor *vals[3] = {tu_make(f->e, NB_F64, 2, LOGITS_SHAPE, nn_logits),
                        tu_make(f->e, NB_F64, 2, LOGITS_SHAPE, nn_labels),
                        nb_tensor_from(f->e, NB_I64, 1, TU_SHAPE(3), nn_sparse_labels)};
  nb_tensor *fetch[5] = {loss, bp, sloss, sbp, nb_softmax(f->c, x)}, *out[5];
  assert_int_equal(nb_run(f->s, ph, vals, 3, fetch, 5, out), NB_OK);
  tu_check(out[0], NB_F64, 1, TU_SHAPE(3), nn_xent_loss_f64, TOL_F64);
  tu_check(out[1], NB_F64, 2, LOGITS_SHAPE, nn_xent_backprop_f64, TOL_F64);
  tu_check(out[2], NB_F64, 1, TU_SHAPE(3), nn_sparse_loss_f64, TOL_F64);
  tu_check(out[3], NB_F64, 2, LOGITS_SHAPE, nn_sparse_backprop_f64, TOL_F64);
  tu_check(out[4], NB_F64, 2, LOGITS_SHAPE, nn_softmax_f64, TOL_F64);
  for (int i = 0; i < 5; i++) nb_tensor_free(out[i]);
}

/* ---- the Hessian of the loss w.r.t. the logits: diag(p) - p p^T per row ------------------- */

#define HB 2
#define HC 3
static const double hess_logits[HB * HC] = {0.3, -1.2, 0.8, 2.0, 0.1, -0.5};
static const double hess_labels[HB * HC] = {0.2, 0.5, 0.3, 0, 1, 0};
static const double hess_sparse[HB] = {2, 0};

/* The expected [HB*HC, HB*HC] Hessian of sum(loss): rows do not couple. */
static void expected_hessian(double *h) {
  memset(h, 0, sizeof(double) * HB * HC * HB * HC);
  for (int r = 0; r < HB; r++) {
    double p[HC], m = -INFINITY, s = 0;
    for (int j = 0; j < HC; j++) m = fmax(m, hess_logits[r * HC + j]);
    for (int j = 0; j < HC; j++) s += p[j] = exp(hess_logits[r * HC + j] - m);
    for (int j = 0; j < HC; j++) p[j] /= s;
    for (int i = 0; i < HC; i++)
      for (int j = 0; j < HC; j++) h[(r * HC + i) * HB * HC + r * HC + j] = (i == j ? p[i] : 0) - p[i] * p[j];
  }
}

/* sum(loss) of the dense (sparse false) or sparse loss over logits x. */
static nb_tensor *total_loss(nb_ctx *c, nb_tensor *x, bool sparse) {
  nb_tensor *loss = NULL;
  if (sparse)
    nb_sparse_softmax_cross_entropy_with_logits(c, x, tu_make(c, NB_I32, 1, TU_SHAPE(HB), hess_sparse), &loss, NULL);
  else
    nb_softmax_cross_entropy_with_logits(c, x, tu_make(c, NB_F64, 2, TU_SHAPE(HB, HC), hess_labels), &loss, NULL);
  return nb_sum(c, loss, (const int[]){0}, 1, false);
}

/* Graph mode: g = d loss/dx, then row k of the Hessian = d g/dx weighted by the one-hot e_k. */
static void test_xent_hessian_graph(void **state) {
  gu_fixture *f = *state;
  double want[HB * HC * HB * HC];
  expected_hessian(want);
  for (int sparse = 0; sparse < 2; sparse++) {
    nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(HB, HC), sparse ? "xs" : "xd"), *g = NULL;
    nb_tensor *y = total_loss(f->c, x, sparse);
    assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &g), NB_OK);
    nb_tensor *xv = tu_make(f->e, NB_F64, 2, TU_SHAPE(HB, HC), hess_logits);
    for (int k = 0; k < HB * HC; k++) {
      double e[HB * HC] = {0};
      e[k] = 1;
      nb_tensor *ek = tu_make(f->c, NB_F64, 2, TU_SHAPE(HB, HC), e), *row = NULL;
      nb_grad_opts o = {.grad_ys = &ek};
      assert_int_equal(nb_gradients(f->c, &g, 1, &x, 1, &o, &row), NB_OK);
      nb_tensor *v = gu_run1(f, x, xv, row);
      tu_check(v, NB_F64, 2, TU_SHAPE(HB, HC), want + k * HB * HC, 1e-14);
      nb_tensor_free(v);
    }
  }
}

/* Nested tapes: the outer tape records the inner gradient; its Jacobian is the Hessian. */
static void test_xent_hessian_tapes(void **state) {
  nb_ctx *c = *state;
  double want[HB * HC * HB * HC];
  expected_hessian(want);
  for (int sparse = 0; sparse < 2; sparse++) {
    nb_tensor *x = tu_make(c, NB_F64, 2, TU_SHAPE(HB, HC), hess_logits), *g = NULL, *h = NULL;
    nb_tape *outer = nb_tape_begin(c, 1), *inner = nb_tape_begin(c, 0);
    nb_tape_watch(outer, x);
    nb_tape_watch(inner, x);
    nb_tensor *y = total_loss(c, x, sparse);
    assert_int_equal(nb_tape_gradient(inner, &y, 1, &x, 1, NULL, &g), NB_OK);
    nb_tape_end(inner);
    assert_int_equal(nb_tape_jacobian(outer, g, x, &h), NB_OK);
    nb_tape_end(outer);
    tu_check(h, NB_F64, 4, TU_SHAPE(HB, HC, HB, HC), want, 1e-14);
  }
}

/* The number of Softmax nodes in f's graph, from its DOT text ("name\nType..." labels). */
static int count_softmax_nodes(gu_fixture *f) {
  const char *dir = getenv("TMPDIR");
  char path[512];
  snprintf(path, sizeof path, "%s/nabla-nn-XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  close(fd);
  assert_int_equal(nb_graph_to_dot(f->g, path), NB_OK);
  FILE *in = fopen(path, "rb");
  assert_non_null(in);
  static char text[1 << 16];
  size_t n = fread(text, 1, sizeof text - 1, in);
  text[n] = 0;
  fclose(in);
  unlink(path);
  int count = 0;
  for (const char *p = text; (p = strstr(p, "\\nSoftmax")); p++) count += p[9] != 'C';
  return count;
}

/* A loss whose backprop output gets no gradient needs no softmax in its gradient graph:
   the pass's zeros for backprop are a folded constant, and their term is left out. Once
   backprop is used (a second derivative), the term is there. */
static void test_xent_gradient_skips_known_zeros(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(HB, HC), "x"), *g = NULL, *h = NULL;
  nb_tensor *y = total_loss(f->c, x, true);
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &g), NB_OK);
  assert_int_equal(count_softmax_nodes(f), 0);
  nb_tensor *g2 = nb_sum(f->c, nb_square(f->c, g), (const int[]){0, 1}, 2, false);
  assert_int_equal(nb_gradients(f->c, &g2, 1, &x, 1, NULL, &h), NB_OK);
  assert_int_equal(count_softmax_nodes(f), 1);
}

/* ---- numerical stability and NaN ----------------------------------------------------------- */

static void test_large_logits(void **state) {
  nb_ctx *c = *state;
  for (int d = 0; d < 2; d++) {
    nb_dtype t = d ? NB_F64 : NB_F32;
    nb_tensor *x = tu_make(c, t, 2, TU_SHAPE(2, 3), TU_VALS(1000, -1000, 0, -1000, -1000, -1000)), *loss, *bp;
    const int64_t *s = TU_SHAPE(2, 3);
    tu_check(nb_softmax(c, x), t, 2, s, TU_VALS(1, 0, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3), tol_of(t));
    tu_check(nb_log_softmax(c, x), t, 2, s, TU_VALS(0, -2000, -1000, -log(3), -log(3), -log(3)), tol_of(t));
    nb_tensor *labels = tu_make(c, t, 2, s, TU_VALS(0, 1, 0, 0, 0, 1));
    assert_int_equal(nb_softmax_cross_entropy_with_logits(c, x, labels, &loss, &bp), NB_OK);
    tu_check(loss, t, 1, TU_SHAPE(2), TU_VALS(2000, log(3)), tol_of(t));
    tu_check(bp, t, 2, s, TU_VALS(1, -1, 0, 1.0 / 3, 1.0 / 3, -2.0 / 3), tol_of(t));
    nb_tensor *sparse = tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(1, 2));
    assert_int_equal(nb_sparse_softmax_cross_entropy_with_logits(c, x, sparse, &loss, &bp), NB_OK);
    tu_check(loss, t, 1, TU_SHAPE(2), TU_VALS(2000, log(3)), tol_of(t));
  }
}

/* A NaN logit makes its row's loss and backprop NaN, as in TF; other rows are untouched. */
static void test_nan_logits(void **state) {
  nb_ctx *c = *state;
  for (int first = 0; first < 2; first++) {
    double v[6] = {0.5, 1, 2, 1, 2, 3};
    v[first ? 0 : 1] = NAN;
    nb_tensor *x = tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), v), *loss, *bp;
    nb_tensor *sparse = tu_make(c, NB_I64, 1, TU_SHAPE(2), TU_VALS(1, 2));
    assert_int_equal(nb_sparse_softmax_cross_entropy_with_logits(c, x, sparse, &loss, &bp), NB_OK);
    double lse = log(exp(1.0) + exp(2.0) + exp(3.0));
    tu_check_vals(loss, TU_VALS(NAN, lse - 3), 1e-14);
    tu_check_vals(nb_softmax(c, x), TU_VALS(NAN, NAN, NAN, exp(1 - lse), exp(2 - lse), exp(3 - lse)), 1e-14);
    nb_tensor *labels = tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(0, 1, 0, 0, 0, 1));
    assert_int_equal(nb_softmax_cross_entropy_with_logits(c, x, labels, &loss, &bp), NB_OK);
    tu_check_vals(bp, TU_VALS(NAN, NAN, NAN, exp(1 - lse), exp(2 - lse), exp(3 - lse) - 1), 1e-14);
  }
}

/* ---- broadcasting of the dense loss ----------------------------------------------------------- */

static void test_xent_broadcast(void **state) {
  nb_ctx *c = *state;
  nb_tensor *f = tu_make(c, NB_F64, 1, TU_SHAPE(2), TU_VALS(1, 2)), *loss, *bp;
  nb_tensor *l = tu_make(c, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(0, 1, 1, 0));
  assert_int_equal(nb_softmax_cross_entropy_with_logits(c, f, l, &loss, &bp), NB_OK);
  double p = 1 / (1 + exp(1.0)); /* softmax([1, 2])[0] */
  tu_check(loss, NB_F64, 1, TU_SHAPE(2), TU_VALS(-log(1 - p), -log(p)), 1e-14);
  tu_check(bp, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(p, -p, p - 1, 1 - p), 1e-14);
  /* labels [1, 2] against features [3, 2]; either output may be skipped */
  nb_tensor *f3 = tu_make(c, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(1, 2, 1, 2, 2, 1));
  nb_tensor *l1 = tu_make(c, NB_F64, 2, TU_SHAPE(1, 2), TU_VALS(0, 1));
  assert_int_equal(nb_softmax_cross_entropy_with_logits(c, f3, l1, &loss, NULL), NB_OK);
  tu_check(loss, NB_F64, 1, TU_SHAPE(3), TU_VALS(-log(1 - p), -log(1 - p), -log(p)), 1e-14);
}

/* ---- OneHot -------------------------------------------------------------------------------- */

static void test_one_hot(void **state) {
  nb_ctx *c = *state;
  nb_tensor *ind = tu_make(c, NB_I32, 2, TU_SHAPE(2, 2), TU_VALS(0, 2, -1, 3));
  nb_tensor *on = nb_scalar(c, NB_F32, 5), *off = nb_scalar(c, NB_F32, -1);
  /* axis -1: [2, 2, 3]; -1 and 3 are out of [0, 3): rows of off_value */
  tu_check(nb_one_hot(c, ind, 3, on, off, -1), NB_F32, 3, TU_SHAPE(2, 2, 3),
           TU_VALS(5, -1, -1, -1, -1, 5, -1, -1, -1, -1, -1, -1), 0);
  /* axis 0: [3, 2, 2], out[d, i, j] = ind[i, j] == d */
  tu_check(nb_one_hot(c, ind, 3, on, off, 0), NB_F32, 3, TU_SHAPE(3, 2, 2),
           TU_VALS(5, -1, -1, -1, -1, -1, -1, -1, -1, 5, -1, -1), 0);
  /* axis 1: [2, 3, 2], out[i, d, j] = ind[i, j] == d */
  tu_check(nb_one_hot(c, ind, 3, on, off, 1), NB_F32, 3, TU_SHAPE(2, 3, 2),
           TU_VALS(5, -1, -1, -1, -1, 5, -1, -1, -1, -1, -1, -1), 0);
  /* int64 indices, int32 values, depth 0 */
  nb_tensor *ind64 = tu_make(c, NB_I64, 1, TU_SHAPE(3), TU_VALS(1, 0, 1));
  tu_check(nb_one_hot(c, ind64, 2, nb_scalar(c, NB_I32, 7), nb_scalar(c, NB_I32, 0), -1), NB_I32, 2, TU_SHAPE(3, 2),
           TU_VALS(0, 7, 7, 0, 0, 7), 0);
  tu_check_shape(nb_one_hot(c, ind64, 0, on, off, -1), NB_F32, 2, TU_SHAPE(3, 0));
}

/* In a graph, depth known only at run time leaves the output shape to run time. */
static void test_one_hot_graph(void **state) {
  gu_fixture *f = *state;
  nb_tensor *ind = nb_placeholder(f->c, NB_I64, 1, TU_SHAPE(-1), "indices");
  nb_tensor *depth = nb_placeholder(f->c, NB_I32, 0, NULL, "depth"), *y = NULL;
  nb_tensor *in[4] = {ind, depth, nb_scalar(f->c, NB_F64, 1), nb_scalar(f->c, NB_F64, 0)};
  assert_int_equal(nb_op(f->c, "OneHot", in, 4, (nb_attr[]){nb_attr_int("axis", 0)}, 1, &y, 1), NB_OK);
  nb_tensor *ph[2] = {ind, depth}, *out = NULL;
  nb_tensor *vals[2] = {tu_make(f->e, NB_I64, 1, TU_SHAPE(2), TU_VALS(2, 0)), nb_scalar(f->e, NB_I32, 3)};
  assert_int_equal(nb_run(f->s, ph, vals, 2, &y, 1, &out), NB_OK);
  tu_check(out, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(0, 1, 0, 0, 1, 0), 0);
  nb_tensor_free(out);
  vals[1] = nb_scalar(f->e, NB_I32, -2);
  assert_int_equal(nb_run(f->s, ph, vals, 2, &y, 1, &out), NB_INVALID);
  assert_non_null(strstr(nb_session_error(f->s), "depth must be non-negative, got: -2"));
}

/* TF gives OneHot's inputs no gradient, on_value and off_value included. */
static void test_one_hot_no_gradient(void **state) {
  gu_fixture *f = *state;
  nb_tensor *on = nb_placeholder(f->c, NB_F64, 0, NULL, "on"), *off = nb_placeholder(f->c, NB_F64, 0, NULL, "off");
  nb_tensor *ind = tu_make(f->c, NB_I32, 1, TU_SHAPE(2), TU_VALS(0, 1));
  nb_tensor *y = nb_sum(f->c, nb_one_hot(f->c, ind, 2, on, off, -1), (const int[]){0, 1}, 2, false);
  nb_tensor *xs[2] = {on, off}, *dxs[2] = {NULL, NULL};
  assert_int_equal(nb_gradients(f->c, &y, 1, xs, 2, NULL, dxs), NB_OK);
  assert_null(dxs[0]);
  assert_null(dxs[1]);
}

/* ---- errors -------------------------------------------------------------------------------- */

static void test_sparse_label_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F32, 2, TU_SHAPE(2, 3), NULL), *loss, *bp;
  nb_tensor *hi = tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(0, 3));
  assert_int_equal(nb_sparse_softmax_cross_entropy_with_logits(c, x, hi, &loss, &bp), NB_INVALID);
  assert_null(loss);
  tu_check_error(c, NB_INVALID, "SparseSoftmaxCrossEntropyWithLogits: Received a label value of 3",
                 "outside the valid range of [0, 3) at labels[1]");
  nb_tensor *neg = tu_make(c, NB_I64, 1, TU_SHAPE(2), TU_VALS(-1, 1));
  nb_sparse_softmax_cross_entropy_with_logits(c, x, neg, &loss, &bp);
  tu_check_error(c, NB_INVALID, "Received a label value of -1 which is outside the valid range of [0, 3)", "labels[0]");
}

static void test_sparse_shape_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *x = tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), NULL), *loss, *bp;
  nb_sparse_softmax_cross_entropy_with_logits(c, x, tu_make(c, NB_I32, 2, TU_SHAPE(2, 1), NULL), &loss, &bp);
  tu_check_error(c, NB_SHAPE, "SparseSoftmaxCrossEntropyWithLogits: labels must be 1-D", "[2,1]");
  nb_sparse_softmax_cross_entropy_with_logits(c, x, tu_make(c, NB_F64, 1, TU_SHAPE(2), NULL), &loss, &bp);
  tu_check_error(c, NB_DTYPE, "input 1 has dtype float64", "int32");
  nb_sparse_softmax_cross_entropy_with_logits(c, tu_make(c, NB_F64, 1, TU_SHAPE(3), NULL),
                                              tu_make(c, NB_I32, 1, TU_SHAPE(3), NULL), &loss, &bp);
  tu_check_error(c, NB_SHAPE, "logits must be 2-D, but got shape [3]", NULL);
  nb_sparse_softmax_cross_entropy_with_logits(c, tu_make(c, NB_F64, 3, TU_SHAPE(2, 3, 1), NULL),
                                              tu_make(c, NB_I32, 1, TU_SHAPE(2), NULL), &loss, &bp);
  tu_check_error(c, NB_SHAPE, "logits must be 2-D, but got shape [2,3,1]", NULL);
  nb_sparse_softmax_cross_entropy_with_logits(c, x, tu_make(c, NB_I32, 1, TU_SHAPE(3), NULL), &loss, &bp);
  tu_check_error(c, NB_SHAPE, "same first dimension, got logits shape [2,3] and labels shape [3]", NULL);
  nb_sparse_softmax_cross_entropy_with_logits(c, tu_make(c, NB_F64, 2, TU_SHAPE(2, 0), NULL),
                                              tu_make(c, NB_I32, 1, TU_SHAPE(2), NULL), &loss, &bp);
  tu_check_error(c, NB_SHAPE, "Must have at least one class, but got logits shape [2,0]", NULL);
  nb_softmax_cross_entropy_with_logits(c, tu_make(c, NB_F64, 2, TU_SHAPE(2, 0), NULL),
                                       tu_make(c, NB_F64, 2, TU_SHAPE(2, 0), NULL), &loss, &bp);
  tu_check_error(c, NB_SHAPE, "SoftmaxCrossEntropyWithLogits: Must have at least one class", "[2,0]");
  nb_sparse_softmax_cross_entropy_with_logits(c, tu_make(c, NB_I32, 2, TU_SHAPE(2, 3), NULL),
                                              tu_make(c, NB_I32, 1, TU_SHAPE(2), NULL), &loss, &bp);
  tu_check_error(c, NB_DTYPE, "input 0 has dtype int32", NULL);
}

static void test_dense_xent_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *loss, *bp;
  nb_softmax_cross_entropy_with_logits(c, tu_make(c, NB_F64, 1, TU_SHAPE(3), NULL),
                                       tu_make(c, NB_F64, 1, TU_SHAPE(3), NULL), &loss, &bp);
  tu_check_error(c, NB_SHAPE, "SoftmaxCrossEntropyWithLogits: logits and labels must be either 2-dimensional",
                 "logits shape [3] and labels shape [3]");
  nb_softmax_cross_entropy_with_logits(c, tu_make(c, NB_F64, 3, TU_SHAPE(1, 2, 3), NULL),
                                       tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), NULL), &loss, &bp);
  tu_check_error(c, NB_SHAPE, "broadcasted to be 2-dimensional", "[1,2,3]");
  nb_softmax_cross_entropy_with_logits(c, tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), NULL),
                                       tu_make(c, NB_F64, 2, TU_SHAPE(3, 3), NULL), &loss, &bp);
  tu_check_error(c, NB_SHAPE, "must be broadcastable: logits_size=[2,3] labels_size=[3,3]", NULL);
  nb_softmax_cross_entropy_with_logits(c, tu_make(c, NB_F64, 2, TU_SHAPE(2, 3), NULL),
                                       tu_make(c, NB_F32, 2, TU_SHAPE(2, 3), NULL), &loss, &bp);
  tu_check_error(c, NB_DTYPE, "inputs 0 and 1 must have the same dtype", NULL);
}

static void test_activation_errors(void **state) {
  nb_ctx *c = *state;
  nb_softmax(c, nb_scalar(c, NB_F32, 1));
  tu_check_error(c, NB_SHAPE, "Softmax: logits must have >= 1 dimension, got shape []", NULL);
  nb_log_softmax(c, tu_make(c, NB_I32, 1, TU_SHAPE(2), NULL));
  tu_check_error(c, NB_DTYPE, "LogSoftmax: input 0 has dtype int32", NULL);
  nb_selu(c, tu_make(c, NB_I64, 1, TU_SHAPE(2), NULL));
  tu_check_error(c, NB_DTYPE, "Selu: input 0 has dtype int64", NULL);
  nb_relu6_grad(c, tu_make(c, NB_F32, 1, TU_SHAPE(2), NULL), tu_make(c, NB_F32, 1, TU_SHAPE(3), NULL));
  tu_check_error(c, NB_SHAPE, "Relu6Grad: gradients and features must have the same shape, got [2] and [3]", NULL);
  nb_gelu_grad(c, tu_make(c, NB_F32, 1, TU_SHAPE(2), NULL), tu_make(c, NB_F64, 1, TU_SHAPE(2), NULL), true);
  tu_check_error(c, NB_DTYPE, "GeluGrad: inputs 0 and 1 must have the same dtype", NULL);
  nb_l2_loss(c, tu_make(c, NB_BOOL, 1, TU_SHAPE(2), NULL));
  tu_check_error(c, NB_DTYPE, "L2Loss: input 0 has dtype bool", NULL);
  nb_tensor *x = tu_make(c, NB_F32, 1, TU_SHAPE(2), NULL), *y;
  nb_attr wrong = nb_attr_int("alpha", 1);
  nb_op(c, "LeakyRelu", &x, 1, &wrong, 1, &y, 1);
  tu_check_error(c, NB_INVALID, "LeakyRelu: attr 'alpha' has the wrong kind", NULL);
}

static void test_one_hot_errors(void **state) {
  nb_ctx *c = *state;
  nb_tensor *ind = tu_make(c, NB_I32, 1, TU_SHAPE(2), TU_VALS(0, 1));
  nb_tensor *on = nb_scalar(c, NB_F32, 1), *off = nb_scalar(c, NB_F32, 0);
  nb_one_hot(c, ind, -1, on, off, -1);
  tu_check_error(c, NB_INVALID, "OneHot: depth must be non-negative, got: -1", NULL);
  nb_one_hot(c, ind, 3, on, off, -2);
  tu_check_error(c, NB_INVALID, "OneHot: Expected axis to be -1 or between [0, 2).  But received: -2", NULL);
  nb_one_hot(c, ind, 3, on, off, 2);
  tu_check_error(c, NB_INVALID, "between [0, 2).  But received: 2", NULL);
  nb_one_hot(c, ind, 3, on, nb_scalar(c, NB_F64, 0), -1);
  tu_check_error(c, NB_DTYPE, "inputs 2 and 3 must have the same dtype", NULL);
  nb_one_hot(c, ind, 3, tu_make(c, NB_F32, 1, TU_SHAPE(1), NULL), off, -1);
  tu_check_error(c, NB_SHAPE, "on_value must be a scalar, but got: [1]", NULL);
  nb_one_hot(c, tu_make(c, NB_F32, 1, TU_SHAPE(2), NULL), 3, on, off, -1);
  tu_check_error(c, NB_DTYPE, "OneHot: input 0 has dtype float32", NULL);
  nb_tensor *in[4] = {ind, nb_scalar(c, NB_I64, 3), on, off}, *y;
  nb_op(c, "OneHot", in, 4, NULL, 0, &y, 1);
  tu_check_error(c, NB_DTYPE, "input 1 has dtype int64; expected int32", NULL);
}

/* A bad label met at run time fails the session run, naming the node. */
static void test_graph_label_error(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 2, TU_SHAPE(-1, 3), "logits");
  nb_tensor *l = nb_placeholder(f->c, NB_I32, 1, TU_SHAPE(-1), "labels"), *loss, *out = NULL;
  assert_int_equal(nb_sparse_softmax_cross_entropy_with_logits(f->c, x, l, &loss, NULL), NB_OK);
  nb_tensor *ph[2] = {x, l};
  nb_tensor *vals[2] = {tu_make(f->e, NB_F32, 2, TU_SHAPE(1, 3), NULL),
                        tu_make(f->e, NB_I32, 1, TU_SHAPE(1), TU_VALS(7))};
  assert_int_equal(nb_run(f->s, ph, vals, 2, &loss, 1, &out), NB_INVALID);
  assert_non_null(strstr(nb_session_error(f->s), "SparseSoftmaxCrossEntropyWithLogits"));
  assert_non_null(
      strstr(nb_session_error(f->s), "Received a label value of 7 which is outside the valid range of [0, 3)"));
}

/* A graph refuses bad dtypes, ranks and attrs when it is built, whatever the dims. */
static void test_graph_validation(void **state) {
  gu_fixture *f = *state;
  nb_ctx *c = f->c;
  nb_tensor *fr = tu_unknown_rank(c, NB_F32), *ir = tu_unknown_rank(c, NB_I32), *loss = NULL, *bp = NULL;
  assert_null(nb_softmax(c, ir));
  tu_check_error(c, NB_DTYPE, "Softmax (node 'Softmax'): input 0 has dtype int32", NULL);
  assert_null(nb_log_softmax(c, nb_placeholder(c, NB_F32, 0, NULL, "s")));
  tu_check_error(c, NB_SHAPE, "LogSoftmax (node 'LogSoftmax')", "logits must have >= 1 dimension");
  assert_null(nb_leaky_relu(c, ir, 0.1));
  tu_check_error(c, NB_DTYPE, "LeakyRelu (node 'LeakyRelu')", "int32");
  assert_int_equal(nb_softmax_cross_entropy_with_logits(c, fr, tu_unknown_dims(c, NB_F64, 2), &loss, &bp), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "SoftmaxCrossEntropyWithLogits (node", "float32 and float64");
  assert_int_equal(nb_softmax_cross_entropy_with_logits(c, tu_unknown_dims(c, NB_F32, 3), fr, &loss, &bp), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "SoftmaxCrossEntropyWithLogits (node", "broadcasted to be 2-dimensional");
  assert_int_equal(nb_sparse_softmax_cross_entropy_with_logits(c, tu_unknown_dims(c, NB_F32, 3), ir, &loss, &bp),
                   NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "SparseSoftmaxCrossEntropyWithLogits (node",
                 "logits must be 2-D, but got shape [-1,-1,-1]");
  assert_int_equal(nb_sparse_softmax_cross_entropy_with_logits(c, fr, fr, &loss, &bp), NB_DTYPE);
  tu_check_error(c, NB_DTYPE, "SparseSoftmaxCrossEntropyWithLogits (node", "input 1 has dtype float32");
  nb_tensor *logits = nb_placeholder(c, NB_F32, 2, TU_SHAPE(3, -1), "logits");
  nb_tensor *labels = nb_placeholder(c, NB_I64, 1, TU_SHAPE(4), "labels");
  assert_int_equal(nb_sparse_softmax_cross_entropy_with_logits(c, logits, labels, &loss, &bp), NB_SHAPE);
  tu_check_error(c, NB_SHAPE, "SparseSoftmaxCrossEntropyWithLogits (node",
                 "the same first dimension, got logits shape [3,-1]");
  assert_null(nb_l2_loss(c, ir));
  tu_check_error(c, NB_DTYPE, "L2Loss (node 'L2Loss')", "int32");
  nb_tensor *on = nb_scalar(c, NB_F32, 1), *off = nb_scalar(c, NB_F32, 0);
  assert_null(nb_one_hot(c, tu_unknown_dims(c, NB_I32, 8), 3, on, off, -1));
  tu_check_error(c, NB_SHAPE, "OneHot (node", "output rank 9 exceeds the maximum rank 8");
  assert_null(nb_one_hot(c, tu_unknown_dims(c, NB_I32, 2), 3, on, off, 3));
  tu_check_error(c, NB_INVALID, "OneHot (node", "between [0, 3).  But received: 3");
  assert_null(nb_one_hot(c, ir, -2, on, off, -1));
  tu_check_error(c, NB_INVALID, "OneHot (node", "depth must be non-negative, got: -2");
  assert_null(nb_one_hot(c, ir, 3, on, nb_scalar(c, NB_F64, 0), -1));
  tu_check_error(c, NB_DTYPE, "OneHot (node", "inputs 2 and 3 must have the same dtype");
  /* valid ops still build, their shapes left to run time */
  assert_int_equal(nb_rank(nb_one_hot(c, ir, 3, on, off, 5)), -1);
  assert_int_equal(nb_sparse_softmax_cross_entropy_with_logits(c, fr, ir, &loss, &bp), NB_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_softmax_golden, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_xent_golden, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_activations_golden, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gelu_f32_accuracy, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_gelu_extremes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_relu6_int, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_equals_eager, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_xent_hessian_graph, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_xent_hessian_tapes, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_xent_gradient_skips_known_zeros, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_large_logits, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_nan_logits, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_xent_broadcast, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_one_hot, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_one_hot_graph, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_one_hot_no_gradient, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sparse_label_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_sparse_shape_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_dense_xent_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_activation_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_one_hot_errors, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_label_error, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_validation, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
