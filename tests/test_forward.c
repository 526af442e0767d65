/* Forward mode on graphs: nb_jvp (each op's forward rule, or its gradient transposed),
   Hessian-vector products and Hessians, against closed forms and reverse mode. Every op's JVP is checked against
   differences in test_gradcheck_all. */
#include "testutil.h"

typedef struct fixture {
  nb_graph *g;
  nb_ctx *c, *e;
  nb_session *s;
} fixture;

static fixture open_graph(void) {
  fixture f = {.g = nb_graph_new(), .e = nb_eager_new()};
  f.c = nb_graph_ctx_new(f.g);
  f.s = nb_session_new(f.g);
  return f;
}

static void close_graph(fixture *f) {
  nb_session_free(f->s);
  nb_ctx_free(f->c);
  nb_ctx_free(f->e);
  nb_graph_free(f->g);
}

/* t's value with x fed xv, as a tensor of the eager context (freed with it). */
static nb_tensor *eval(fixture *f, nb_tensor *x, nb_tensor *xv, nb_tensor *t) {
  nb_tensor *out = NULL;
  assert_non_null(t);
  if (nb_run(f->s, &x, &xv, x ? 1 : 0, &t, 1, &out) != NB_OK) fail_msg("run: %s", nb_session_error(f->s));
  size_t bytes = (size_t)nb_num_elements(out) * nb_dtype_size(nb_dtype_of(out));
  void *data = malloc(bytes ? bytes : 1); /* nb_read: a fetched IndexedSlices reads dense */
  assert_non_null(data);
  assert_int_equal(nb_read(out, data, bytes), NB_OK);
  nb_tensor *copy = nb_tensor_from(f->e, nb_dtype_of(out), nb_rank(out), nb_shape(out), data);
  free(data);
  nb_tensor_free(out);
  return copy;
}

static const double x3[] = {0.5, -1.25, 2.0};
static const double v3[] = {1.5, 0.75, -2.0};

/* y = sin(x) * w, w broadcast from [1]: J (vx, vw) = cos(x) w vx + sin(x) vw. */
static void test_jvp_closed_form(void **state) {
  (void)state;
  fixture f = open_graph();
  nb_tensor *x = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *w = tu_make(f.c, NB_F64, 1, TU_SHAPE(1), TU_VALS(0.7));
  nb_tensor *y = nb_mul(f.c, nb_sin(f.c, x), w), *xs[] = {x, w}, *out = NULL;
  nb_tensor *ts[] = {tu_make(f.c, NB_F64, 1, TU_SHAPE(3), v3), tu_make(f.c, NB_F64, 1, TU_SHAPE(1), TU_VALS(-0.4))};
  assert_int_equal(nb_jvp(f.c, &y, 1, xs, 2, ts, &out), NB_OK);
  nb_tensor *got = eval(&f, x, tu_make(f.e, NB_F64, 1, TU_SHAPE(3), x3), out);
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = cos(x3[i]) * 0.7 * v3[i] + sin(x3[i]) * -0.4;
  tu_check_shape(got, NB_F64, 1, TU_SHAPE(3));
  tu_check_vals(got, want, 1e-12);
  close_graph(&f);
}

/* <u, J v> = <J^T u, v>: the JVP is the transpose of the gradient, for y = tanh(A) B. */
static void test_transposition_identity(void **state) {
  (void)state;
  fixture f = open_graph();
  nb_tensor *a = nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(2, 3), "a");
  nb_tensor *b = tu_make(f.c, NB_F64, 2, TU_SHAPE(3, 2), TU_VALS(0.3, -1, 0.8, 0.2, -0.5, 1.1));
  nb_tensor *y = nb_matmul(f.c, nb_tanh(f.c, a), b, false, false), *jv = NULL, *jtu = NULL;
  nb_tensor *v = tu_make(f.c, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(1, -2, 0.5, 0.25, 1.5, -1));
  nb_tensor *u = tu_make(f.c, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(0.6, -0.9, 1.2, 0.4));
  assert_int_equal(nb_jvp(f.c, &y, 1, &a, 1, &v, &jv), NB_OK);
  assert_int_equal(nb_gradients(f.c, &y, 1, &a, 1, &(nb_grad_opts){.grad_ys = &u}, &jtu), NB_OK);
  const int all[] = {0, 1};
  nb_tensor *lhs = nb_sum(f.c, nb_mul(f.c, u, jv), all, 2, false);
  nb_tensor *rhs = nb_sum(f.c, nb_mul(f.c, jtu, v), all, 2, false);
  nb_tensor *av = tu_make(f.e, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(0.1, -0.7, 1.3, 0.9, -1.1, 0.2));
  double l = nb_item(eval(&f, a, av, lhs), 0), r = nb_item(eval(&f, a, av, rhs), 0);
  assert_true(fabs(l) > 0.1);
  assert_true(fabs(l - r) <= 1e-12 * fabs(r));
  close_graph(&f);
}

/* Second order by nesting: y = x^3, J v = 3 x^2 v, and its JVP along w is 6 x v w. */
static void test_jvp_of_jvp(void **state) {
  (void)state;
  fixture f = open_graph();
  nb_tensor *x = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *y = nb_mul(f.c, x, nb_square(f.c, x)), *j1 = NULL, *j2 = NULL;
  nb_tensor *v = tu_make(f.c, NB_F64, 1, TU_SHAPE(3), v3);
  nb_tensor *w = tu_make(f.c, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.5, 2, -1));
  assert_int_equal(nb_jvp(f.c, &y, 1, &x, 1, &v, &j1), NB_OK);
  assert_int_equal(nb_jvp(f.c, &j1, 1, &x, 1, &w, &j2), NB_OK);
  nb_tensor *got = eval(&f, x, tu_make(f.e, NB_F64, 1, TU_SHAPE(3), x3), j2);
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = 6 * x3[i] * v3[i] * nb_item(nb_constant_value(w), i);
  tu_check_vals(got, want, 1e-12);
  close_graph(&f);
}

/* y = sum(x^3): H v = 6 x v. */
static void test_hvp_cubic(void **state) {
  (void)state;
  fixture f = open_graph();
  nb_tensor *x = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *y = nb_sum(f.c, nb_mul(f.c, x, nb_square(f.c, x)), (const int[]){0}, 1, false), *hv = NULL;
  nb_tensor *v = tu_make(f.c, NB_F64, 1, TU_SHAPE(3), v3);
  assert_int_equal(nb_hvp(f.c, y, &x, 1, &v, &hv), NB_OK);
  nb_tensor *got = eval(&f, x, tu_make(f.e, NB_F64, 1, TU_SHAPE(3), x3), hv);
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = 6 * x3[i] * v3[i];
  tu_check_vals(got, want, 1e-12);
  close_graph(&f);
}

static const double a33[] = {1, 2, -1, 0.5, 3, 4, -2, 0, 1.5};

/* x^T A x for x of shape [3, 1], as a [1, 1] matrix. */
static nb_tensor *quadratic_form(fixture *f, nb_tensor *x) {
  nb_tensor *a = tu_make(f->c, NB_F64, 2, TU_SHAPE(3, 3), a33);
  return nb_matmul(f->c, x, nb_matmul(f->c, a, x, false, false), true, false);
}

/* y = x^T A x: H v = (A + A^T) v, and mixed xs sum their blocks: y = sum(x z^2) with
   tangents (vx, vz) gives (2 z vz, 2 z vx + 2 x vz). */
static void test_hvp_quadratic_and_mixed(void **state) {
  (void)state;
  fixture f = open_graph();
  nb_tensor *x = nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(3, 1), "x"), *hv = NULL;
  nb_tensor *v = tu_make(f.c, NB_F64, 2, TU_SHAPE(3, 1), v3);
  assert_int_equal(nb_hvp(f.c, quadratic_form(&f, x), &x, 1, &v, &hv), NB_OK);
  nb_tensor *got = eval(&f, x, tu_make(f.e, NB_F64, 2, TU_SHAPE(3, 1), x3), hv);
  double want[3] = {0};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) want[i] += (a33[i * 3 + j] + a33[j * 3 + i]) * v3[j];
  tu_check_vals(got, want, 1e-12);

  nb_tensor *z = tu_make(f.c, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.3, -0.6, 0.9));
  nb_tensor *xz = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(3), "xz"), *xs[] = {xz, z}, *out[2] = {0};
  nb_tensor *y = nb_sum(f.c, nb_mul(f.c, xz, nb_square(f.c, z)), (const int[]){0}, 1, false);
  nb_tensor *vx = tu_make(f.c, NB_F64, 1, TU_SHAPE(3), v3),
            *vz = tu_make(f.c, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3));
  assert_int_equal(nb_hvp(f.c, y, xs, 2, (nb_tensor *const[]){vx, vz}, out), NB_OK);
  nb_tensor *xv = tu_make(f.e, NB_F64, 1, TU_SHAPE(3), x3);
  nb_tensor *gx = eval(&f, xz, xv, out[0]), *gz = eval(&f, xz, xv, out[1]);
  double wx[3], wz[3];
  for (int i = 0; i < 3; i++) {
    double zi = nb_item(nb_constant_value(z), i), vzi = i + 1.0;
    wx[i] = 2 * zi * vzi;
    wz[i] = 2 * zi * v3[i] + 2 * x3[i] * vzi;
  }
  tu_check_vals(gx, wx, 1e-12);
  tu_check_vals(gz, wz, 1e-12);
  close_graph(&f);
}

/* Hessians: sum(x^3) over x [2, 2] gives diag(6x) as [2, 2, 2, 2]; x^T A x gives A + A^T
   as [3, 1, 3, 1]. */
static void test_hessian_closed_forms(void **state) {
  (void)state;
  fixture f = open_graph();
  nb_tensor *x = nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(2, 2), "x"), *h = NULL;
  nb_tensor *y = nb_sum(f.c, nb_mul(f.c, x, nb_square(f.c, x)), (const int[]){0, 1}, 2, false);
  assert_int_equal(nb_hessian(f.c, y, &x, 1, &h), NB_OK);
  tu_check_shape(h, NB_F64, 4, TU_SHAPE(2, 2, 2, 2));
  static const double x4[] = {0.5, -1, 2, 1.5};
  nb_tensor *got = eval(&f, x, tu_make(f.e, NB_F64, 2, TU_SHAPE(2, 2), x4), h);
  double want[16] = {0};
  for (int i = 0; i < 4; i++) want[i * 4 + i] = 6 * x4[i];
  tu_check_vals(got, want, 1e-12);

  nb_tensor *q = nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(3, 1), "q");
  assert_int_equal(nb_hessian(f.c, quadratic_form(&f, q), &q, 1, &h), NB_OK);
  tu_check_shape(h, NB_F64, 4, TU_SHAPE(3, 1, 3, 1));
  got = eval(&f, q, tu_make(f.e, NB_F64, 2, TU_SHAPE(3, 1), x3), h);
  double sym[9];
  for (int i = 0; i < 9; i++) sym[i] = a33[i] + a33[(i % 3) * 3 + i / 3];
  tu_check_vals(got, sym, 1e-12);
  close_graph(&f);
}

/* tf.hessians over several xs: one block d^2y/dxs[i]^2 per x, of shape x.shape + x.shape;
   NULL for an x y does not depend on. y = sum(a^3) sum(b^2): H_aa = diag(6 a) sum(b^2),
   H_bb = 2 sum(a^3) I (each element a handful of roundings, within gamma_16 of the closed
   form's magnitude). */
static void test_hessian_blocks(void **state) {
  (void)state;
  fixture f = open_graph();
  static const double av[] = {0.5, -1.5}, bv[] = {2, -0.25, 1};
  nb_tensor *a = tu_make(f.c, NB_F64, 1, TU_SHAPE(2), av), *b = tu_make(f.c, NB_F64, 2, TU_SHAPE(1, 3), bv);
  nb_tensor *u = tu_make(f.c, NB_F64, 1, TU_SHAPE(1), TU_VALS(3));
  nb_tensor *sa = nb_sum(f.c, nb_mul(f.c, a, nb_square(f.c, a)), NULL, 0, false);
  nb_tensor *y = nb_mul(f.c, sa, nb_sum(f.c, nb_square(f.c, b), NULL, 0, false));
  nb_tensor *xs[3] = {a, b, u}, *h[3] = {a, a, a};
  assert_int_equal(nb_hessian(f.c, y, xs, 3, h), NB_OK);
  tu_check_shape(h[0], NB_F64, 2, TU_SHAPE(2, 2));
  tu_check_shape(h[1], NB_F64, 4, TU_SHAPE(1, 3, 1, 3));
  assert_null(h[2]);
  double sum_a3 = 0, sum_b2 = 0, want_a[4] = {0}, want_b[9] = {0};
  for (int i = 0; i < 2; i++) sum_a3 += av[i] * av[i] * av[i];
  for (int i = 0; i < 3; i++) sum_b2 += bv[i] * bv[i];
  for (int i = 0; i < 2; i++) want_a[i * 3] = 6 * av[i] * sum_b2;
  for (int i = 0; i < 3; i++) want_b[i * 4] = 2 * sum_a3;
  nb_tensor *got_a = eval(&f, NULL, NULL, h[0]), *got_b = eval(&f, NULL, NULL, h[1]);
  double tol = tu_gamma(NB_F64, 16) * fmax(fabs(6 * av[1] * sum_b2), fabs(2 * sum_a3));
  tu_check_vals(got_a, want_a, tol);
  tu_check_vals(got_b, want_b, tol);
  close_graph(&f);
}

/* The Hessian against differences of the gradient: row k is (g(x + h e_k) - g(x - h e_k)) / 2h,
   for y = sum(exp(x) * x^2) + prod-like cross terms from a softmax. */
static void test_hessian_against_differences(void **state) {
  (void)state;
  fixture f = open_graph();
  nb_tensor *x = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(3), "x"), *h = NULL, *g = NULL;
  nb_tensor *sm = nb_softmax(f.c, nb_reshape(f.c, x, TU_SHAPE(1, 3), 2));
  nb_tensor *y =
      nb_sum(f.c, nb_mul(f.c, nb_reshape(f.c, sm, TU_SHAPE(3), 1), nb_square(f.c, x)), (const int[]){0}, 1, false);
  assert_int_equal(nb_hessian(f.c, y, &x, 1, &h), NB_OK);
  assert_int_equal(nb_gradients(f.c, &y, 1, &x, 1, NULL, &g), NB_OK);
  nb_tensor *got = eval(&f, x, tu_make(f.e, NB_F64, 1, TU_SHAPE(3), x3), h);
  const double step = 1e-5;
  for (int k = 0; k < 3; k++) {
    double up[3], down[3];
    for (int i = 0; i < 3; i++) up[i] = down[i] = x3[i];
    up[k] += step;
    down[k] -= step;
    nb_tensor *gu = eval(&f, x, tu_make(f.e, NB_F64, 1, TU_SHAPE(3), up), g);
    nb_tensor *gd = eval(&f, x, tu_make(f.e, NB_F64, 1, TU_SHAPE(3), down), g);
    for (int i = 0; i < 3; i++) {
      double fd = (nb_item(gu, i) - nb_item(gd, i)) / (2 * step);
      if (!(fabs(nb_item(got, k * 3 + i) - fd) <= 1e-7))
        fail_msg("H[%d][%d] = %g, differences %g", k, i, nb_item(got, k * 3 + i), fd);
    }
  }
  close_graph(&f);
}

/* A gather's gradient is IndexedSlices: y = sum(gather(x, [0, 2, 2])^3) has H = diag(6 x_i n_i)
   with n = (1, 0, 2) the times x_i is gathered, both as a Hessian and as H v. */
static void test_sparse_gradient_second_order(void **state) {
  (void)state;
  fixture f = open_graph();
  nb_tensor *x = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(3), "x"), *h = NULL, *hv = NULL;
  nb_tensor *gx = nb_gather(f.c, x, tu_make(f.c, NB_I32, 1, TU_SHAPE(3), TU_VALS(0, 2, 2)), 0, 0);
  nb_tensor *y = nb_sum(f.c, nb_mul(f.c, gx, nb_square(f.c, gx)), (const int[]){0}, 1, false);
  nb_tensor *v = tu_make(f.c, NB_F64, 1, TU_SHAPE(3), v3);
  assert_int_equal(nb_hessian(f.c, y, &x, 1, &h), NB_OK);
  assert_int_equal(nb_hvp(f.c, y, &x, 1, &v, &hv), NB_OK);
  nb_tensor *xv = tu_make(f.e, NB_F64, 1, TU_SHAPE(3), x3);
  static const double count[] = {1, 0, 2};
  double want_h[9] = {0}, want_hv[3];
  for (int i = 0; i < 3; i++) {
    want_h[i * 4] = 6 * x3[i] * count[i];
    want_hv[i] = want_h[i * 4] * v3[i];
  }
  tu_check_vals(eval(&f, x, xv, h), want_h, 1e-12);
  tu_check_vals(eval(&f, x, xv, hv), want_hv, 1e-12);
  close_graph(&f);
}

/* An unconnected y and an integer y give NULL; a connected one beside them still works. */
static void test_unconnected_and_integer_ys(void **state) {
  (void)state;
  fixture f = open_graph();
  nb_tensor *x = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(3), "x"),
            *p = nb_placeholder(f.c, NB_F64, 1, TU_SHAPE(3), "p");
  nb_tensor *ys[] = {nb_exp(f.c, p), nb_cast(f.c, x, NB_I32), nb_exp(f.c, x)}, *out[3] = {x, x, NULL};
  nb_tensor *v = tu_make(f.c, NB_F64, 1, TU_SHAPE(3), v3);
  assert_int_equal(nb_jvp(f.c, ys, 3, &x, 1, &v, out), NB_OK);
  assert_null(out[0]);
  assert_null(out[1]);
  nb_tensor *got = eval(&f, x, tu_make(f.e, NB_F64, 1, TU_SHAPE(3), x3), out[2]);
  double want[3];
  for (int i = 0; i < 3; i++) want[i] = exp(x3[i]) * v3[i];
  tu_check_vals(got, want, 1e-12);
  close_graph(&f);
}

static void expect_error(nb_ctx *c, nb_code got, nb_code want, const char *needle) {
  assert_int_equal(got, want);
  if (!strstr(nb_error(c), needle)) fail_msg("error '%s' does not mention '%s'", nb_error(c), needle);
  nb_clear_error(c);
}

static void test_errors(void **state) {
  (void)state;
  fixture f = open_graph();
  nb_tensor *x = nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(2, 3), "x"), *y = nb_exp(f.c, x), *out[2] = {0};
  nb_tensor *bad_shape = tu_make(f.c, NB_F64, 2, TU_SHAPE(3, 2), NULL),
            *bad_type = tu_make(f.c, NB_F32, 2, TU_SHAPE(2, 3), NULL);
  nb_tensor *xs[] = {x, x}, *ok = tu_make(f.c, NB_F64, 2, TU_SHAPE(2, 3), NULL);
  expect_error(f.c, nb_jvp(f.c, &y, 1, xs, 2, (nb_tensor *const[]){ok, bad_shape}, out), NB_SHAPE,
               "tangents[1] is float64 [3,2], xs[1] is float64 [2,3]");
  expect_error(f.c, nb_jvp(f.c, &y, 1, &x, 1, &bad_type, out), NB_DTYPE, "tangents[0] is float32 [2,3]");
  expect_error(f.c, nb_jvp(f.c, &y, -1, &x, 1, &ok, out), NB_INVALID, "ys");
  assert_int_equal(nb_jvp(f.c, NULL, 0, &x, 1, &ok, NULL), NB_OK); /* no ys: out may be NULL */
  expect_error(f.c, nb_jvp(f.c, &y, 1, &x, -2, &ok, out), NB_INVALID, "xs");
  expect_error(f.c, nb_hvp(f.c, y, &x, 1, &bad_shape, out), NB_SHAPE, "nb_hvp: tangents[0]");

  nb_tensor *u = nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(-1, 3), "u");
  expect_error(f.c, nb_hessian(f.c, nb_exp(f.c, u), &u, 1, out), NB_SHAPE, "'u'");
  nb_tensor *dims = nb_placeholder(f.c, NB_I32, 1, TU_SHAPE(-1), "dims"), *r = NULL; /* r: rank unknown */
  assert_int_equal(nb_name_next(f.c, "r"), NB_OK);
  assert_int_equal(nb_op(f.c, "Reshape", (nb_tensor *const[]){x, dims}, 2, NULL, 0, &r, 1), NB_OK);
  assert_int_equal(nb_rank(r), -1);
  nb_tensor *any_shape = tu_make(f.c, NB_F64, 1, TU_SHAPE(4), NULL);
  expect_error(f.c, nb_hessian(f.c, nb_exp(f.c, r), &r, 1, out), NB_SHAPE, "('r') has shape <unknown rank>");
  assert_int_equal(nb_jvp(f.c, (nb_tensor *const[]){nb_exp(f.c, r)}, 1, &r, 1, &any_shape, out), NB_OK);
  assert_non_null(out[0]); /* an unknown rank takes a tangent of any shape */
  nb_tensor *big = nb_placeholder(f.c, NB_F64, 2, TU_SHAPE(65, 64), "big");
  expect_error(f.c, nb_hessian(f.c, nb_exp(f.c, big), &big, 1, out), NB_SHAPE, "4096");
  assert_null(out[0]); /* a failed call leaves no stale handle in out */

  nb_tensor *ex = tu_make(f.e, NB_F64, 1, TU_SHAPE(3), x3), *ey = nb_exp(f.e, ex);
  out[0] = ex;
  expect_error(f.e, nb_jvp(f.e, &ey, 1, &ex, 1, &ex, out), NB_UNIMPLEMENTED, "eager forward mode");
  assert_null(out[0]);
  expect_error(f.e, nb_hvp(f.e, ey, &ex, 1, &ex, out), NB_UNIMPLEMENTED, "eager forward mode");
  expect_error(f.e, nb_hessian(f.e, ey, &ex, 1, out), NB_UNIMPLEMENTED, "eager forward mode");
  close_graph(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_jvp_closed_form),
      cmocka_unit_test(test_transposition_identity),
      cmocka_unit_test(test_jvp_of_jvp),
      cmocka_unit_test(test_hvp_cubic),
      cmocka_unit_test(test_hvp_quadratic_and_mixed),
      cmocka_unit_test(test_hessian_closed_forms),
      cmocka_unit_test(test_hessian_blocks),
      cmocka_unit_test(test_hessian_against_differences),
      cmocka_unit_test(test_sparse_gradient_second_order),
      cmocka_unit_test(test_unconnected_and_integer_ys),
      cmocka_unit_test(test_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
