/* nb_register_op: user ops run like built-ins (eager, graphs, sessions, While bodies, DOT),
   with the same attr and dtype validation, and every way a spec can be wrong is refused
   with a message. Their gradients: registered ones (first and second order, graphs and
   tapes, what a tape keeps), TF's error without one, NotDifferentiable. */
#define _POSIX_C_SOURCE 200809L
#include "graphutil.h"
#include "tempdir.h"

#include "../src/ops/op.h" /* NBOP_MAX_ATTRS, nbop_lookup */

#include <stdio.h>

/* ---- kernels ------------------------------------------------------------------------------- */

/* UserScale: y = alpha * x, x float32 or float64 (attr T). */
static nb_code scale_kernel(nb_op_ctx *k) {
  const nb_tensor *x = nb_opctx_input(k, 0);
  double alpha = nb_opctx_attr_float(k, "alpha");
  int64_t n = nb_num_elements(x);
  if (nb_dtype_of(x) == NB_F32) {
    const float *a = nb_opctx_input_value(k, 0);
    float *y = nb_opctx_output_data(k, 0);
    for (int64_t i = 0; i < n; i++) y[i] = (float)alpha * a[i];
  } else {
    const double *a = nb_opctx_input_value(k, 0);
    double *y = nb_opctx_output_data(k, 0);
    for (int64_t i = 0; i < n; i++) y[i] = alpha * a[i];
  }
  return NB_OK;
}

static int stateful_calls; /* kernel runs of UserTick */
static nb_code tick_kernel(nb_op_ctx *k) {
  stateful_calls++;
  return scale_kernel(k);
}

static const nb_op_arg x_t = {"x", NB_F32, "T", NULL}, y_t = {"y", NB_F32, "T", NULL};

static nb_op_attr_def float_attr(const char *name, double v) {
  return (nb_op_attr_def){name, NB_ATTR_FLOAT, false, nb_attr_float(name, v), 0};
}
static nb_op_attr_def type_attr(const char *name, unsigned allowed) {
  return (nb_op_attr_def){name, NB_ATTR_TYPE, true, {0}, allowed};
}

static nb_code register_scale(const char *name, nb_code (*kernel)(nb_op_ctx *), bool stateful) {
  nb_op_attr_def attrs[2] = {type_attr("T", NBOP_M_FLOAT), float_attr("alpha", 2)};
  nb_op_spec spec = {name, &x_t, 1, &y_t, 1, attrs, 2, NULL, kernel, stateful};
  return nb_register_op(&spec);
}

/* UserRowSums: float64 [a, b] -> [a], each row's sum: a shape function of its own. */
static nb_code row_sums_shape(nb_op_ctx *k) {
  const nb_tensor *x = nb_opctx_input(k, 0);
  if (nb_rank(x) != 2) return nb_opctx_fail(k, NB_SHAPE, "x must be a matrix, got rank %d", nb_rank(x));
  return nb_opctx_set_output_shape(k, 0, 1, nb_shape(x));
}
static nb_code row_sums_kernel(nb_op_ctx *k) {
  const nb_tensor *x = nb_opctx_input(k, 0);
  const double *a = nb_opctx_input_value(k, 0);
  double *y = nb_opctx_output_data(k, 0);
  int64_t rows = nb_shape(x)[0], cols = nb_shape(x)[1];
  for (int64_t r = 0; r < rows; r++) {
    y[r] = 0;
    for (int64_t j = 0; j < cols; j++) y[r] += a[r * cols + j];
  }
  return NB_OK;
}

/* UserIota: int32 scalar n -> float64 [n] of 0, 1, ...: its shape needs the value of n. */
static nb_code iota_shape(nb_op_ctx *k) {
  const int32_t *n = nb_opctx_input_value(k, 0);
  if (!n) return NB_OK; /* not known yet: the shape waits for run time */
  if (*n < 0) return nb_opctx_fail(k, NB_INVALID, "n must be >= 0, got %d", (int)*n);
  return nb_opctx_set_output_shape(k, 0, 1, (const int64_t[]){*n});
}
static nb_code iota_kernel(nb_op_ctx *k) {
  double *y = nb_opctx_output_data(k, 0);
  int64_t n = nb_num_elements(nb_opctx_output(k, 0));
  for (int64_t i = 0; i < n; i++) y[i] = (double)i;
  return NB_OK;
}

/* UserAddN: a list of N float64 tensors of one shape -> their sum. */
static nb_code add_n_kernel(nb_op_ctx *k) {
  int64_t n = nb_num_elements(nb_opctx_output(k, 0));
  double *y = nb_opctx_output_data(k, 0);
  for (int64_t i = 0; i < n; i++) y[i] = 0;
  for (int j = 0; j < nb_opctx_num_inputs(k); j++) {
    const double *a = nb_opctx_input_value(k, j);
    for (int64_t i = 0; i < n; i++) y[i] += a[i];
  }
  return NB_OK;
}

static nb_code refusing_kernel(nb_op_ctx *k) { return nb_opctx_fail(k, NB_INVALID, "this kernel refuses"); }
static nb_code silent_kernel(nb_op_ctx *k) {
  (void)k;
  return NB_UNIMPLEMENTED;
}
static nb_code unknown_attr_kernel(nb_op_ctx *k) {
  nb_opctx_attr_int(k, "alpha"); /* alpha is a float */
  return NB_OK;
}
static nb_code no_shape(nb_op_ctx *k) {
  (void)k;
  return NB_OK;
}

/* UserPoly: y = sum_j coeffs[j] x^j + the number of dtypes in tags (float64): list attrs. */
static nb_code poly_kernel(nb_op_ctx *k) {
  int nc, nt;
  const double *c = nb_opctx_attr_floats(k, "coeffs", &nc), *x = nb_opctx_input_value(k, 0);
  nb_opctx_attr_types(k, "tags", &nt);
  double *y = nb_opctx_output_data(k, 0);
  for (int64_t i = 0, n = nb_num_elements(nb_opctx_input(k, 0)); i < n; i++) {
    y[i] = nt;
    for (int j = nc - 1; j >= 0; j--) y[i] += c[j] * pow(x[i], j);
  }
  return NB_OK;
}

static void register_all(void) {
  static bool done;
  if (done) return;
  done = true;
  assert_int_equal(register_scale("UserScale", scale_kernel, false), NB_OK);
  assert_int_equal(register_scale("UserTick", tick_kernel, true), NB_OK);
  static const nb_op_arg xm = {"x", NB_F64, NULL, NULL}, rows = {"rows", NB_F64, NULL, NULL};
  nb_op_spec sums = {"UserRowSums", &xm, 1, &rows, 1, NULL, 0, row_sums_shape, row_sums_kernel, false};
  assert_int_equal(nb_register_op(&sums), NB_OK);
  static const nb_op_arg n = {"n", NB_I32, NULL, NULL}, r = {"r", NB_F64, NULL, NULL};
  nb_op_spec iota = {"UserIota", &n, 1, &r, 1, NULL, 0, iota_shape, iota_kernel, false};
  assert_int_equal(nb_register_op(&iota), NB_OK);
  static const nb_op_arg xs = {"xs", NB_F64, NULL, "N"}, sum = {"sum", NB_F64, NULL, NULL};
  nb_op_attr_def count = {"N", NB_ATTR_INT, true, {0}, 0};
  nb_op_spec add_n = {"UserAddN", &xs, 1, &sum, 1, &count, 1, NULL, add_n_kernel, false};
  assert_int_equal(nb_register_op(&add_n), NB_OK);
  nb_op_spec bad = {"UserRefuses",   &x_t, 1, &y_t, 1, (nb_op_attr_def[]){type_attr("T", 0)}, 1, NULL,
                    refusing_kernel, false};
  assert_int_equal(nb_register_op(&bad), NB_OK);
  bad.name = "UserSilent", bad.kernel = silent_kernel;
  assert_int_equal(nb_register_op(&bad), NB_OK);
  nb_op_attr_def attrs[2] = {type_attr("T", 0), float_attr("alpha", 1)};
  bad.name = "UserAsksInt", bad.kernel = unknown_attr_kernel, bad.attrs = attrs, bad.nattrs = 2;
  assert_int_equal(nb_register_op(&bad), NB_OK);
  bad.name = "UserNoShape", bad.kernel = scale_kernel, bad.shape_fn = no_shape;
  assert_int_equal(nb_register_op(&bad), NB_OK);
  static const double identity[2] = {0, 1};
  nb_op_attr_def lists[2] = {{"coeffs", NB_ATTR_FLOATS, false, nb_attr_floats("coeffs", identity, 2), 0},
                             {"tags", NB_ATTR_TYPES, false, nb_attr_types("tags", NULL, 0), NBOP_M_FLOAT}};
  nb_op_spec poly = {"UserPoly", &xm, 1, &rows, 1, lists, 2, NULL, poly_kernel, false};
  assert_int_equal(nb_register_op(&poly), NB_OK);
  assert_string_equal(nb_registry_error(), "");
}

static nb_tensor *op1(nb_ctx *c, const char *type, nb_tensor *x, const nb_attr *attrs, int nattrs) {
  nb_tensor *y = NULL;
  nb_op(c, type, &x, 1, attrs, nattrs, &y, 1);
  return y;
}

static const double x4[4] = {1, -2, 0.5, 3};

/* Runs fetch (feeding value to p, unless p is NULL), checks the result exactly and frees it. */
static void check_run(gu_fixture *f, nb_tensor *p, nb_tensor *value, nb_tensor *fetch, nb_dtype t, int rank,
                      const int64_t *shape, const double *want) {
  nb_tensor *r = gu_run1(f, p, value, fetch);
  tu_check(r, t, rank, shape, want, 0);
  nb_tensor_free(r);
}

/* ---- running them ---------------------------------------------------------------------------- */

static void test_eager_values_and_attrs(void **state) {
  nb_ctx *c = *state;
  register_all();
  nb_tensor *x = tu_make(c, NB_F64, 2, TU_SHAPE(2, 2), x4);
  tu_check(op1(c, "UserScale", x, NULL, 0), NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(2, -4, 1, 6), 0);
  nb_attr a[2] = {nb_attr_float("alpha", -0.5), nb_attr_type("T", NB_F64)};
  tu_check(op1(c, "UserScale", x, a, 2), NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(-0.5, 1, -0.25, -1.5), 0);
  nb_tensor *x32 = tu_make(c, NB_F32, 1, TU_SHAPE(4), x4);
  tu_check(op1(c, "UserScale", x32, NULL, 0), NB_F32, 1, TU_SHAPE(4), TU_VALS(2, -4, 1, 6), 0);
  tu_check(op1(c, "UserRowSums", x, NULL, 0), NB_F64, 1, TU_SHAPE(2), TU_VALS(-1, 3.5), 0);
  tu_check(op1(c, "UserIota", nb_scalar(c, NB_I32, 3), NULL, 0), NB_F64, 1, TU_SHAPE(3), TU_VALS(0, 1, 2), 0);
  nb_tensor *three[3] = {x, x, x}, *sum = NULL;
  assert_int_equal(nb_op(c, "UserAddN", three, 3, NULL, 0, &sum, 1), NB_OK);
  tu_check(sum, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(3, -6, 1.5, 9), 0);
}

/* The built-ins' validation, by the spec: kinds, allowed dtypes, declared dtypes, arity. */
static void test_eager_validation(void **state) {
  nb_ctx *c = *state;
  register_all();
  nb_tensor *x = tu_make(c, NB_F64, 1, TU_SHAPE(4), x4), *i = nb_scalar(c, NB_I32, 2);
  nb_attr alpha_int = nb_attr_int("alpha", 2);
  assert_null(op1(c, "UserScale", x, &alpha_int, 1));
  tu_check_error(c, NB_INVALID, "UserScale", "attr 'alpha' has the wrong kind");
  nb_attr beta = nb_attr_float("beta", 2);
  assert_null(op1(c, "UserScale", x, &beta, 1));
  tu_check_error(c, NB_INVALID, "UserScale", "unknown attr 'beta'");
  assert_null(op1(c, "UserScale", i, NULL, 0));
  tu_check_error(c, NB_DTYPE, "UserScale", "attr T=int32 is not supported; expected float32, float64");
  nb_attr t32 = nb_attr_type("T", NB_F32);
  assert_null(op1(c, "UserScale", x, &t32, 1));
  tu_check_error(c, NB_DTYPE, "input 0 ('x') has dtype float64; expected float32", "attr T");
  assert_null(op1(c, "UserRowSums", i, NULL, 0));
  tu_check_error(c, NB_DTYPE, "UserRowSums", "input 0 ('x') has dtype int32; expected float64");
  assert_null(op1(c, "UserRowSums", x, NULL, 0));
  tu_check_error(c, NB_SHAPE, "UserRowSums: x must be a matrix, got rank 1", NULL);
  assert_null(op1(c, "UserIota", nb_scalar(c, NB_I32, -1), NULL, 0));
  tu_check_error(c, NB_INVALID, "UserIota: n must be >= 0, got -1", NULL);
  nb_tensor *two[2] = {x, x}, *out[2];
  assert_int_equal(nb_op(c, "UserScale", two, 2, NULL, 0, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "UserScale: expected 1 inputs, got 2", NULL);
  assert_int_equal(nb_op(c, "UserScale", &x, 1, NULL, 0, out, 2), NB_INVALID);
  tu_check_error(c, NB_INVALID, "has 1 outputs, caller asked for 2", NULL);
  nb_attr n5 = nb_attr_int("N", 5);
  assert_int_equal(nb_op(c, "UserAddN", two, 2, &n5, 1, out, 1), NB_INVALID);
  tu_check_error(c, NB_INVALID, "attr N=5 does not match 2 list inputs", NULL);
}

/* list(float) and list(type) attrs: defaults, given values (copied by graphs), dtype checks. */
static void test_list_attrs(void **state) {
  gu_fixture *f = *state;
  register_all();
  nb_tensor *x = tu_make(f->e, NB_F64, 1, TU_SHAPE(4), x4);
  tu_check(op1(f->e, "UserPoly", x, NULL, 0), NB_F64, 1, TU_SHAPE(4), x4, 0);
  double coeffs[3] = {1, 0, 2};
  nb_dtype tags[2] = {NB_F32, NB_F64};
  nb_attr given[2] = {nb_attr_floats("coeffs", coeffs, 3), nb_attr_types("tags", tags, 2)};
  tu_check(op1(f->e, "UserPoly", x, given, 2), NB_F64, 1, TU_SHAPE(4), TU_VALS(5, 11, 3.5, 21), 0);
  nb_tensor *p = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(4), "x"), *y = op1(f->c, "UserPoly", p, given, 2);
  coeffs[2] = 100, tags[1] = NB_I32; /* the node holds its own copies */
  check_run(f, p, x, y, NB_F64, 1, TU_SHAPE(4), TU_VALS(5, 11, 3.5, 21));
  assert_null(op1(f->e, "UserPoly", x, given, 2));
  tu_check_error(f->e, NB_DTYPE, "UserPoly", "attr tags[1]=int32 is not supported; expected float32, float64");
  given[0].v.floats = NULL;
  assert_null(op1(f->e, "UserPoly", x, given, 1));
  tu_check_error(f->e, NB_INVALID, "UserPoly", "attr 'coeffs' has a NULL value");
}

static void test_kernel_failures(void **state) {
  nb_ctx *c = *state;
  register_all();
  nb_tensor *x = tu_make(c, NB_F64, 1, TU_SHAPE(4), x4);
  assert_null(op1(c, "UserRefuses", x, NULL, 0));
  tu_check_error(c, NB_INVALID, "UserRefuses: this kernel refuses", NULL);
  assert_null(op1(c, "UserSilent", x, NULL, 0));
  tu_check_error(c, NB_UNIMPLEMENTED, "UserSilent: the kernel", "without setting an error message");
  assert_null(op1(c, "UserAsksInt", x, NULL, 0));
  tu_check_error(c, NB_INVALID, "UserAsksInt: the op has no int attr 'alpha'", NULL);
  assert_null(op1(c, "UserNoShape", x, NULL, 0));
  tu_check_error(c, NB_INVALID, "UserNoShape: the shape function did not set output 0's shape", NULL);
}

/* Graph nodes: shapes inferred through unknown dims, deferred when a value is unknown, run
   by a session; named in the DOT export. */
static void test_graph_and_session(void **state) {
  gu_fixture *f = *state;
  register_all();
  nb_tensor *p = tu_unknown_dims(f->c, NB_F64, 2), *y = op1(f->c, "UserRowSums", p, NULL, 0);
  assert_non_null(y);
  tu_check_shape(y, NB_F64, 1, TU_SHAPE(-1));
  nb_tensor *np = nb_placeholder(f->c, NB_I32, 0, NULL, "n"), *r = op1(f->c, "UserIota", np, NULL, 0);
  assert_non_null(r);
  assert_int_equal(nb_rank(r), -1);
  nb_tensor *known = op1(f->c, "UserIota", nb_scalar(f->c, NB_I32, 2), NULL, 0);
  tu_check_shape(known, NB_F64, 1, TU_SHAPE(2));
  nb_tensor *v = tu_make(f->e, NB_F64, 2, TU_SHAPE(2, 2), x4);
  check_run(f, p, v, y, NB_F64, 1, TU_SHAPE(2), TU_VALS(-1, 3.5));
  check_run(f, np, nb_scalar(f->e, NB_I32, 4), r, NB_F64, 1, TU_SHAPE(4), TU_VALS(0, 1, 2, 3));
  nb_tensor *s = op1(f->c, "UserScale", p, NULL, 0);
  check_run(f, p, v, s, NB_F64, 2, TU_SHAPE(2, 2), TU_VALS(2, -4, 1, 6));
  char dir[256], path[320];
  assert_true(tu_make_temp_dir(dir, sizeof dir));
  snprintf(path, sizeof path, "%s/user.dot", dir);
  assert_int_equal(nb_graph_to_dot(f->g, path), NB_OK);
  FILE *fp = fopen(path, "r");
  char text[8192] = {0};
  assert_non_null(fp);
  assert_true(fread(text, 1, sizeof text - 1, fp) > 0);
  fclose(fp);
  unlink(path);
  rmdir(dir);
  assert_non_null(strstr(text, "UserRowSums"));
  assert_non_null(strstr(text, "UserIota"));
}

/* A graph folds a stateless op whose inputs are known when it is built; never a stateful one. */
static void test_stateful_never_folded(void **state) {
  gu_fixture *f = *state;
  register_all();
  nb_tensor *k = nb_tensor_from(f->c, NB_F64, 1, TU_SHAPE(4), x4);
  nb_tensor *folded = op1(f->c, "UserScale", k, NULL, 0);
  assert_non_null(nb_constant_value(folded));
  int before = stateful_calls;
  nb_tensor *tick = op1(f->c, "UserTick", k, NULL, 0);
  assert_non_null(tick);
  assert_null(nb_constant_value(tick));
  assert_int_equal(stateful_calls, before);
  for (int run = 1; run <= 2; run++) {
    check_run(f, NULL, NULL, tick, NB_F64, 1, TU_SHAPE(4), TU_VALS(2, -4, 1, 6));
    assert_int_equal(stateful_calls, before + run);
  }
}

/* x <- UserScale(x) three times, in a While body (a function graph). */
static nb_code scale_cond(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)user;
  *pred = nb_less(c, v[0], nb_scalar(c, NB_I32, 3));
  return nb_status(c);
}
static nb_code scale_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  (void)user;
  next[0] = nb_add(c, v[0], nb_scalar(c, NB_I32, 1));
  next[1] = op1(c, "UserScale", v[1], NULL, 0);
  return nb_status(c);
}

static void test_inside_while(void **state) {
  gu_fixture *f = *state;
  register_all();
  nb_tensor *p = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(4), "x");
  nb_tensor *vars[2] = {nb_scalar(f->c, NB_I32, 0), p}, *out[2];
  assert_int_equal(nb_while(f->c, scale_cond, scale_body, NULL, vars, 2, -1, out), NB_OK);
  nb_tensor *v = tu_make(f->e, NB_F64, 1, TU_SHAPE(4), x4);
  check_run(f, p, v, out[1], NB_F64, 1, TU_SHAPE(4), TU_VALS(8, -16, 4, 24));
}

/* ---- refused specs --------------------------------------------------------------------------- */

static void expect_refused(const nb_op_spec *spec, nb_code code, const char *frag) {
  assert_int_equal(nb_register_op(spec), code);
  if (!strstr(nb_registry_error(), frag)) fail_msg("message '%s' lacks '%s'", nb_registry_error(), frag);
}

static void test_refused_names(void **state) {
  (void)state;
  register_all();
  nb_op_attr_def t = type_attr("T", 0);
  nb_op_spec s = {"Bad name", &x_t, 1, &y_t, 1, &t, 1, NULL, scale_kernel, false};
  expect_refused(NULL, NB_INVALID, "spec is NULL");
  expect_refused(&s, NB_INVALID, "op name 'Bad name' is not [A-Z][A-Za-z0-9_>]*");
  s.name = "lowerCase";
  expect_refused(&s, NB_INVALID, "op name 'lowerCase'");
  s.name = NULL;
  expect_refused(&s, NB_INVALID, "op name '(null)'");
  s.name = "Add";
  expect_refused(&s, NB_INVALID, "op 'Add' is already registered");
  s.name = "UserScale";
  expect_refused(&s, NB_INVALID, "op 'UserScale' is already registered");
  s.name = "Outer>Inner_2";
  s.kernel = NULL;
  expect_refused(&s, NB_INVALID, "op 'Outer>Inner_2': no kernel");
}

static void test_refused_specs(void **state) {
  (void)state;
  register_all();
  nb_op_attr_def attrs[NBOP_MAX_ATTRS + 1];
  for (int i = 0; i <= NBOP_MAX_ATTRS; i++) attrs[i] = float_attr("a", 1);
  attrs[0] = type_attr("T", 0);
  nb_op_spec s = {"UserBad", &x_t, 1, &y_t, 1, attrs, 1, NULL, scale_kernel, false};
  s.nattrs = NBOP_MAX_ATTRS + 1;
  expect_refused(&s, NB_INVALID, "attrs must be an array of 0 to 6 (got 7)");
  s.nattrs = 3;
  expect_refused(&s, NB_INVALID, "op 'UserBad': attr 'a' is declared twice");
  s.nattrs = 0;
  expect_refused(&s, NB_INVALID, "input 'x' names attr 'T', which is not declared");
  s.nattrs = 2;
  attrs[0] = float_attr("T", 1);
  attrs[1] = float_attr("alpha", 1);
  expect_refused(&s, NB_INVALID, "input 'x' names attr 'T' of kind float; it must be of kind type");
  attrs[0] = type_attr("T", 0);
  attrs[1].def = nb_attr_int("alpha", 1);
  expect_refused(&s, NB_INVALID, "the default of attr 'alpha' has kind int, the attr kind float");
  attrs[1] = (nb_op_attr_def){"s", NB_ATTR_STR, false, nb_attr_str("s", NULL), 0};
  expect_refused(&s, NB_INVALID, "the default of attr 's' is NULL");
  attrs[1] = (nb_op_attr_def){"v", NB_ATTR_TENSOR, true, {0}, 0};
  expect_refused(&s, NB_INVALID, "attr 'v' has kind tensor");
  attrs[1] = (nb_op_attr_def){"k", NB_ATTR_INT, false, nb_attr_int("k", 1), NBOP_M(NB_F32)};
  expect_refused(&s, NB_INVALID, "attr 'k' has allowed_types");
  attrs[1] = (nb_op_attr_def){"out", NB_ATTR_TYPE, false, nb_attr_type("out", NB_I32), NBOP_M_FLOAT};
  expect_refused(&s, NB_INVALID, "the default of attr 'out' holds a dtype it does not allow");
  attrs[1] = (nb_op_attr_def){"ws", NB_ATTR_FLOATS, false, nb_attr_floats("ws", NULL, 2), 0};
  expect_refused(&s, NB_INVALID, "the default of attr 'ws' is NULL");
  attrs[1] =
      (nb_op_attr_def){"ts", NB_ATTR_TYPES, false, nb_attr_types("ts", (nb_dtype[]){NB_F32, NB_I64}, 2), NBOP_M_FLOAT};
  expect_refused(&s, NB_INVALID, "the default of attr 'ts' holds a dtype it does not allow");
  attrs[1] = (nb_op_attr_def){"9x", NB_ATTR_INT, true, {0}, 0};
  expect_refused(&s, NB_INVALID, "attr 1's name '9x'");
}

static void test_refused_args(void **state) {
  (void)state;
  register_all();
  nb_op_attr_def attrs[2] = {type_attr("T", 0), float_attr("N", 1)};
  nb_op_arg in[2] = {{"x", NB_F64, NULL, "N"}, {"w", NB_F64, NULL, NULL}}, out = {"y", NB_F64, NULL, NULL};
  nb_op_spec s = {"UserBad", in, 2, &out, 1, attrs, 2, NULL, scale_kernel, false};
  expect_refused(&s, NB_INVALID, "input 'x' names attr 'N' of kind float; it must be of kind int");
  in[0].number_attr = NULL;
  in[1].number_attr = "N";
  expect_refused(&s, NB_UNIMPLEMENTED, "input 'w' is a list; only the first input may be one");
  in[1] = (nb_op_arg){"x", NB_F64, NULL, NULL};
  expect_refused(&s, NB_INVALID, "two inputs or outputs are named 'x'");
  in[1] = (nb_op_arg){"w", (nb_dtype)99, NULL, NULL};
  expect_refused(&s, NB_INVALID, "input 'w' has no type attr and an invalid dtype 99");
  in[1].dtype = NB_F64;
  out.number_attr = "N";
  expect_refused(&s, NB_UNIMPLEMENTED, "output 'y' is a list");
  out.number_attr = NULL;
  out.name = "";
  expect_refused(&s, NB_INVALID, "output 0's name ''");
  s.ninputs = -1;
  expect_refused(&s, NB_INVALID, "inputs and outputs must be arrays of 0 to 32 (got -1 and 1)");
  s.ninputs = 0;
  out.name = "y";
  expect_refused(&s, NB_INVALID, "no shape function, and no input whose shape the outputs could take");
  assert_null(nbop_lookup("UserBad")); /* nothing refused was registered */
}

/* ---- gradients ------------------------------------------------------------------------------- */

/* UserCube: y = x^3 (float64), and its gradient dx = 3 x^2 dy, which reads input 0 only. */
static nb_code cube_kernel(nb_op_ctx *k) {
  const double *x = nb_opctx_input_value(k, 0);
  double *y = nb_opctx_output_data(k, 0);
  for (int64_t i = 0, n = nb_num_elements(nb_opctx_input(k, 0)); i < n; i++) y[i] = x[i] * x[i] * x[i];
  return NB_OK;
}

static nb_code cube_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *x = nb_fwd_input(op, 0);
  dxs[0] = nb_mul(c, dys[0], nb_mul(c, nb_scalar(c, NB_F64, 3), nb_square(c, x)));
  return nb_status(c);
}

/* Registers UserCube under name with its gradient; reads < 0: no declaration of what it reads. */
static void register_cube(const char *name, int reads) {
  static const nb_op_arg x = {"x", NB_F64, NULL, NULL}, y = {"y", NB_F64, NULL, NULL};
  nb_op_spec spec = {name, &x, 1, &y, 1, NULL, 0, NULL, cube_kernel, false};
  assert_int_equal(nb_register_op(&spec), NB_OK);
  assert_int_equal(nb_register_gradient(name, cube_grad), NB_OK);
  if (reads >= 0) assert_int_equal(nb_register_gradient_reads(name, (uint32_t)reads, 0), NB_OK);
}

static void register_gradients(void) {
  static bool done;
  if (done) return;
  done = true;
  register_all();
  register_cube("UserCube", 1);      /* reads input 0: declared */
  register_cube("UserCubeAll", -1);  /* undeclared: the tape keeps everything */
  register_cube("UserCubeWrong", 0); /* declared as reading nothing, wrongly */
  assert_int_equal(nb_register_no_gradient("UserTick"), NB_OK);
}

/* Inputs whose gradients 3x^2 and 6x are exact in binary: compared with tolerance 0. */
static const double x3[3] = {0.5, -1.5, 2};

static nb_tensor *build_cube(gu_fixture *f, nb_tensor *const *x, const void *arg) {
  (void)arg;
  return op1(f->c, "UserCube", x[0], NULL, 0);
}

/* First and second order in a graph against central differences (graphutil's checker). */
static void test_gradient_graph_first_and_second_order(void **state) {
  (void)state;
  register_gradients();
  gu_check_grad1(2, NULL, TU_SHAPE(2, 3), build_cube, NULL, NULL);
}

/* d/dx of op(x) summed, on a tape nested in another for the second order. */
static void tape_orders(nb_ctx *c, const char *op, nb_tensor **d1, nb_tensor **d2) {
  nb_tensor *x = tu_make(c, NB_F64, 1, TU_SHAPE(3), x3);
  nb_tape *outer = nb_tape_begin(c, 0), *inner = nb_tape_begin(c, 0);
  nb_tape_watch(outer, x);
  nb_tape_watch(inner, x);
  nb_tensor *y = nb_sum(c, op1(c, op, x, NULL, 0), NULL, 0, false);
  *d1 = *d2 = NULL;
  if (!nb_tape_gradient(inner, &y, 1, &x, 1, NULL, d1)) {
    nb_tensor *s = nb_sum(c, *d1, NULL, 0, false);
    nb_tape_gradient(outer, &s, 1, &x, 1, NULL, d2);
  }
  nb_tape_end(inner);
  nb_tape_end(outer);
}

static void test_gradient_tape_and_reads(void **state) {
  nb_ctx *c = *state;
  register_gradients();
  nb_tensor *d1, *d2;
  tape_orders(c, "UserCube", &d1, &d2);
  tu_check(d1, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.75, 6.75, 12), 0);
  tu_check(d2, NB_F64, 1, TU_SHAPE(3), TU_VALS(3, -9, 12), 0);
  tape_orders(c, "UserCubeAll", &d1, &d2);
  tu_check(d1, NB_F64, 1, TU_SHAPE(3), TU_VALS(0.75, 6.75, 12), 0);
  /* what the declaration says is all a tape keeps: a rule reading more fails */
  tape_orders(c, "UserCubeWrong", &d1, &d2);
  assert_null(d1);
  tu_check_error(c, NB_INTERNAL, "input 0 has no data: a tape kept only its shape", "nb_register_gradient_reads");
}

/* Without a gradient: TF's error, in both modes, and nb_find_non_differentiable names the op.
   NotDifferentiable (nb_register_no_gradient): no gradient, no error. */
static void test_no_gradient(void **state) {
  gu_fixture *f = *state;
  register_gradients();
  const char *tf_message = "No gradient defined for operation 'UserScale' (op type: UserScale)";
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x"), *y = op1(f->c, "UserScale", x, NULL, 0), *dx;
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_NO_GRADIENT);
  tu_check_error(f->c, NB_NO_GRADIENT, tf_message, NULL);
  char report[512];
  assert_int_equal(nb_find_non_differentiable(f->g, &x, 1, &y, 1, report, sizeof report), NB_OK);
  assert_non_null(strstr(report, tf_message));
  nb_tensor *v = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), x3);
  nb_tape *t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, v);
  nb_tensor *ye = op1(f->e, "UserScale", v, NULL, 0);
  assert_int_equal(nb_tape_gradient(t, &ye, 1, &v, 1, NULL, &dx), NB_NO_GRADIENT);
  nb_tape_end(t);
  tu_check_error(f->e, NB_NO_GRADIENT, tf_message, NULL);
  for (int mode = NB_JACOBIAN_MODE_FORWARD; mode <= NB_JACOBIAN_MODE_REVERSE; mode++) { /* Jacobians: the same */
    assert_int_equal(nb_jacobian(f->c, y, x, (nb_jacobian_mode)mode, &dx), NB_NO_GRADIENT);
    tu_check_error(f->c, NB_NO_GRADIENT, tf_message, NULL);
    t = nb_tape_begin(f->e, 0);
    nb_tape_set_jacobian_mode(t, (nb_jacobian_mode)mode);
    nb_tape_watch(t, v);
    ye = op1(f->e, "UserScale", v, NULL, 0);
    assert_int_equal(nb_tape_jacobian(t, ye, v, &dx), NB_NO_GRADIENT);
    nb_tape_end(t);
    tu_check_error(f->e, NB_NO_GRADIENT, tf_message, NULL);
  }

  nb_tensor *tick = op1(f->c, "UserTick", x, NULL, 0);
  dx = x;
  assert_int_equal(nb_gradients(f->c, &tick, 1, &x, 1, NULL, &dx), NB_OK);
  assert_null(dx);
  t = nb_tape_begin(f->e, 0);
  nb_tape_watch(t, v);
  ye = op1(f->e, "UserTick", v, NULL, 0);
  dx = v;
  assert_int_equal(nb_tape_gradient(t, &ye, 1, &v, 1, NULL, &dx), NB_OK);
  nb_tape_end(t);
  assert_null(dx);
}

static void test_gradient_registration_errors(void **state) {
  (void)state;
  register_gradients();
  assert_int_equal(nb_register_gradient("UserCube", cube_grad), NB_INVALID);
  assert_non_null(strstr(nb_registry_error(), "a gradient is already registered"));
  assert_int_equal(nb_register_no_gradient("UserTick"), NB_INVALID);
  assert_int_equal(nb_register_no_gradient("UserNoSuchOp"), NB_NOT_FOUND);
  assert_non_null(strstr(nb_registry_error(), "no op type 'UserNoSuchOp'"));
  assert_int_equal(nb_register_gradient_reads("UserScale", 1, 0), NB_NOT_FOUND);
  assert_non_null(strstr(nb_registry_error(), "'UserScale' has no gradient registered with nb_register_gradient"));
  assert_int_equal(nb_register_gradient_reads("Square", 0, 0), NB_NOT_FOUND); /* built-ins declare their own */
  assert_int_equal(nb_register_gradient_reads(NULL, 0, 0), NB_NOT_FOUND);
}

/* Registers ops until the registry is full: NB_NOMEM with a message, at exactly
   NBOP_MAX_OPS. Runs last (the registry stays full). */
static void test_registry_full(void **state) {
  (void)state;
  register_gradients();
  int before = nb_num_op_types(), added = 0;
  nb_op_attr_def t = type_attr("T", 0);
  nb_op_spec s = {NULL, &x_t, 1, &y_t, 1, &t, 1, NULL, scale_kernel, false};
  char name[32];
  nb_code code = NB_OK;
  while (code == NB_OK && added <= NBOP_MAX_OPS) {
    snprintf(name, sizeof name, "UserFiller%d", added);
    s.name = name;
    code = nb_register_op(&s);
    added += code == NB_OK;
  }
  assert_int_equal(code, NB_NOMEM);
  assert_int_equal(before + added, NBOP_MAX_OPS);
  char want[64];
  snprintf(want, sizeof want, "the op registry is full (%d ops)", NBOP_MAX_OPS);
  assert_non_null(strstr(nb_registry_error(), want));
  assert_null(nbop_lookup(name));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_eager_values_and_attrs, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_eager_validation, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_kernel_failures, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_list_attrs, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_graph_and_session, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_stateful_never_folded, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_inside_while, gu_setup, gu_teardown),
      cmocka_unit_test(test_refused_names),
      cmocka_unit_test(test_refused_specs),
      cmocka_unit_test(test_refused_args),
      cmocka_unit_test(test_gradient_graph_first_and_second_order),
      cmocka_unit_test_setup_teardown(test_gradient_tape_and_reads, tu_setup, tu_teardown),
      cmocka_unit_test_setup_teardown(test_no_gradient, gu_setup, gu_teardown),
      cmocka_unit_test(test_gradient_registration_errors),
      cmocka_unit_test(test_registry_full),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
