/* The graph optimizer (src/opt): each pass on small graphs whose rewritten form is known
   (the layout seed case as a golden: the exact graph), and properties over random graphs
   (gradients, second order, loops, conds): the optimized graph gives the unoptimized one's
   results and errors. */
#include "graphutil.h"

#include "../src/graph/graph.h" /* the optimized graph's nodes, edges and attrs */

#include <string.h>

static const nb_session_opts no_passes = {0}, all_passes = {NB_PASS_ALL};

/* ---- reading an optimized graph ------------------------------------------------------------ */

static int count_op(const nb_graph *g, const char *type) {
  int n = 0;
  for (int32_t i = 0; i < g->nnodes; i++) n += strcmp(g->nodes[i].def->name, type) == 0;
  return n;
}

/* Nodes of op type whose outputs are not known when the graph is built: they run. */
static int count_running(const nb_graph *g, const char *type) {
  int n = 0;
  for (int32_t i = 0; i < g->nnodes; i++)
    n += strcmp(g->nodes[i].def->name, type) == 0 && !nbgraph_node_values_known(g, &g->nodes[i]);
  return n;
}

static const nbgraph_node *node_named(const nb_graph *g, const char *name) {
  for (int32_t i = 0; i < g->nnodes; i++)
    if (strcmp(g->nodes[i].name, name) == 0) return &g->nodes[i];
  fail_msg("no node '%s'", name);
  return NULL;
}

/* The name of the node input i of n reads. */
static const char *input_name(const nb_graph *g, const nbgraph_node *n, int i) {
  return g->nodes[g->edges[n->in0 + i].src].name;
}

static const char *str_attr(const nbgraph_node *n, const char *attr) {
  for (int a = 0; a < n->def->nattrs; a++)
    if (strcmp(n->def->attrs[a].name, attr) == 0) return n->attr[a].s;
  fail_msg("%s has no attr %s", n->def->name, attr);
  return NULL;
}

/* The graph a session with opts runs for these feeds and one fetch; valid until s is freed. */
static const nb_graph *planned(nb_session **s, nb_graph *g, const nb_session_opts *opts, nb_tensor *const *feed,
                               int nfeed, nb_tensor *fetch) {
  *s = nb_session_new_with_opts(g, opts);
  const nb_graph *og = NULL;
  if (nb_session_planned_graph(*s, feed, nfeed, &fetch, 1, &og)) fail_msg("%s", nb_session_error(*s));
  return og;
}

/* Runs fetch[0..n) in sessions without and with every pass: want and got (caller frees). */
static void run_both(nb_graph *g, nb_tensor *const *feed, nb_tensor *const *vals, int nfeed, nb_tensor *const *fetch,
                     int n, nb_tensor **want, nb_tensor **got) {
  nb_session *plain = nb_session_new_with_opts(g, &no_passes), *opt = nb_session_new_with_opts(g, &all_passes);
  if (nb_run(plain, feed, vals, nfeed, fetch, n, want)) fail_msg("unoptimized: %s", nb_session_error(plain));
  if (nb_run(opt, feed, vals, nfeed, fetch, n, got)) fail_msg("optimized: %s", nb_session_error(opt));
  nb_session_free(plain);
  nb_session_free(opt);
}

/* Elementwise equality: the passes that ran did not reassociate anything (-0 == +0: x + 0
   bypassed keeps x's zero's sign). */
static void check_same(const nb_tensor *got, const nb_tensor *want) {
  assert_int_equal(nb_num_elements(got), nb_num_elements(want));
  assert_int_equal(nb_rank(got), nb_rank(want));
  for (int64_t i = 0; i < nb_num_elements(want); i++) {
    double g = nb_item(got, i), w = nb_item(want, i);
    if (!(g == w || (g != g && w != w))) fail_msg("element %lld: got %.17g, want %.17g", (long long)i, g, w);
  }
}

/* ---- layout --------------------------------------------------------------------------------- */

static nb_tensor *nchw(nb_ctx *c, nb_tensor *x) { return nb_transpose(c, x, (const int[]){0, 3, 1, 2}, 4); }

/* The seed case: an NCHW Conv2DBackpropFilter of Transposes of NHWC tensors becomes the
   NHWC op on those tensors, filter_sizes as it was (HWIO in both layouts), no Transpose. */
static void test_layout_seed_golden(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F32, 4, TU_SHAPE(2, 6, 5, 3), "x");
  nb_tensor *dy = nb_placeholder(f->c, NB_F32, 4, TU_SHAPE(2, 4, 3, 4), "dy");
  nb_name_next(f->c, "filter_sizes");
  nb_tensor *sizes = nb_tensor_from(f->c, NB_I32, 1, TU_SHAPE(4), (const int32_t[]){3, 3, 3, 4});
  nb_conv2d_attrs a = {.strides = TU_SHAPE(1, 1, 1, 1), .padding = "VALID", .data_format = "NCHW"};
  nb_tensor *x_nchw = nchw(f->c, x), *dy_nchw = nchw(f->c, dy);
  nb_name_next(f->c, "df");
  nb_tensor *df = nb_conv2d_backprop_filter(f->c, x_nchw, sizes, dy_nchw, &a);
  assert_int_equal(nb_status(f->c), NB_OK);
  nb_tensor *feed[2] = {x, dy};
  nb_graph *og = NULL;
  nb_session_opts layout = {NB_PASS_LAYOUT | NB_PASS_TRANSPOSE};
  assert_int_equal(nb_graph_optimize(f->g, feed, 2, &df, 1, &layout, &og), NB_OK);
  assert_int_equal(nb_graph_num_nodes(og), 4); /* x, dy, filter_sizes, df */
  const nbgraph_node *n = node_named(og, "df");
  assert_string_equal(n->def->name, "Conv2DBackpropFilter");
  assert_string_equal(str_attr(n, "data_format"), "NHWC");
  assert_string_equal(input_name(og, n, 0), "x");
  assert_string_equal(input_name(og, n, 1), "filter_sizes");
  assert_string_equal(input_name(og, n, 2), "dy");
  const nb_tensor *fs = og->outs[node_named(og, "filter_sizes")->out0].value;
  tu_check(fs, NB_I32, 1, TU_SHAPE(4), TU_VALS(3, 3, 3, 4), 0);
  assert_int_equal(count_op(og, "Transpose"), 0);
  nb_graph_free(og);
}

/* A LeNet-style NCHW block (conv, bias, relu, max pool) and its gradients: every conv and
   pool op runs NHWC and the Transposes between them cancel. The float64 convolutions run
   NHWC loops in both layouts (NCHW operands transposed into scratch), so only BiasAddGrad
   sums in another order: db within the bound of sums of its 2*8*8 terms, the rest equal. */
static void test_layout_lenet_block(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(2, 3, 8, 8), "x");
  nb_tensor *w = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(3, 3, 3, 4), "w");
  nb_tensor *b = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(4), "b"), *grads[4];
  nb_conv2d_attrs ca = {.strides = TU_SHAPE(1, 1, 1, 1), .padding = "SAME", .data_format = "NCHW"};
  nb_pool_attrs pa = {
      .ksize = TU_SHAPE(1, 1, 2, 2), .strides = TU_SHAPE(1, 1, 2, 2), .padding = "VALID", .data_format = "NCHW"};
  nb_tensor *pre = nb_bias_add(f->c, nb_conv2d(f->c, x, w, &ca), b, "NCHW");
  nb_tensor *h = nb_max_pool(f->c, nb_relu(f->c, pre), &pa);
  nb_tensor *loss = nb_sum(f->c, nb_square(f->c, h), NULL, 0, false), *xs[4] = {x, w, b, pre};
  assert_int_equal(nb_gradients(f->c, &loss, 1, xs, 4, NULL, grads), NB_OK);
  nb_tensor *feed[3] = {x, w, b}, *fetch[5] = {loss, grads[0], grads[1], grads[2], grads[3]}, *vals[3];
  double xv[2 * 3 * 8 * 8], wv[3 * 3 * 3 * 4];
  for (int i = 0; i < 384; i++) xv[i] = sin(0.37 * i);
  for (int i = 0; i < 108; i++) wv[i] = cos(0.91 * i) * 0.3;
  vals[0] = tu_make(f->e, NB_F64, 4, TU_SHAPE(2, 3, 8, 8), xv);
  vals[1] = tu_make(f->e, NB_F64, 4, TU_SHAPE(3, 3, 3, 4), wv);
  vals[2] = tu_make(f->e, NB_F64, 1, TU_SHAPE(4), TU_VALS(0.1, -0.2, 0.05, 0));
  nb_tensor *want[5], *got[5];
  run_both(f->g, feed, vals, 3, fetch, 5, want, got);
  for (int k = 0; k < 3; k++) check_same(got[k], want[k]);
  double db[4], abs_sums[4] = {0};
  for (int ch = 0; ch < 4; ch++) db[ch] = nb_item(want[3], ch);
  for (int64_t i = 0; i < 2 * 4 * 8 * 8; i++) abs_sums[i / 64 % 4] += fabs(nb_item(want[4], i));
  tu_check_sums(got[3], db, NB_F64, 2 * 8 * 8, abs_sums);
  for (int k = 0; k < 5; k++) nb_tensor_free(want[k]), nb_tensor_free(got[k]);
  nb_session *s;
  const nb_graph *og = planned(&s, f->g, &all_passes, feed, 3, grads[0]);
  assert_int_equal(count_op(og, "Conv2D"), 1);
  for (int32_t i = 0; i < og->nnodes; i++) {
    const nbgraph_node *n = &og->nodes[i];
    for (int a = 0; a < n->def->nattrs; a++)
      if (strcmp(n->def->attrs[a].name, "data_format") == 0) assert_string_equal(n->attr[a].s, "NHWC");
  }
  /* NCHW stays at the edges: the fed x (one Transpose in) and the fetched dx (one out).
     The loss sums all of h, in any layout, so the Transpose of h moves past the Square and
     vanishes in the Sum; the Square's gradient 2 * h * ones then runs NHWC on h, its
     constant ones transposed when the graph is written (folded, not run). */
  assert_int_equal(count_running(og, "Transpose"), 2);
  nb_session_free(s);
}

/* ---- CSE, simplification, dead nodes, folding -------------------------------------------- */

static void test_cse(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(-1, 3), "x");
  nb_tensor *a = nb_mul(f->c, nb_shape_op(f->c, x, NB_I32), nb_shape_op(f->c, x, NB_I32));
  nb_tensor *s1 = nb_tanh(f->c, x), *s2 = nb_tanh(f->c, x);
  /* random ops of a shape known only when run (else they are folded when built) */
  nb_tensor *r[2], *seed = nb_tensor_from(f->c, NB_I64, 1, TU_SHAPE(2), (const int64_t[]){1, 2});
  nb_tensor *rin[2] = {nb_shape_op(f->c, x, NB_I32), seed};
  nb_attr dtype = nb_attr_type("dtype", NB_F64);
  for (int i = 0; i < 2; i++)
    assert_int_equal(nb_op(f->c, "StatelessRandomUniform", rin, 2, &dtype, 1, &r[i], 1), NB_OK);
  nb_tensor *y = nb_add(f->c, nb_add(f->c, nb_mul(f->c, s1, s2), nb_mul(f->c, r[0], r[1])),
                        nb_cast(f->c, nb_reshape(f->c, a, TU_SHAPE(2, 1), 2), NB_F64));
  nb_session *s;
  const nb_graph *og = planned(&s, f->g, &(nb_session_opts){NB_PASS_CSE}, &x, 1, y);
  assert_int_equal(count_op(og, "Shape"), 1); /* three Shape(x) nodes merged */
  assert_int_equal(count_op(og, "Tanh"), 1);
  assert_int_equal(count_op(og, "StatelessRandomUniform"), 2); /* random ops never merge */
  nb_session_free(s);
  nb_tensor *xv = tu_make(f->e, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(0.1, 0.2, 0.3, 0.4, 0.5, 0.6)), *want, *got;
  run_both(f->g, &x, &xv, 1, &y, 1, &want, &got);
  check_same(got, want);
  nb_tensor_free(want);
  nb_tensor_free(got);
}

/* x * 1, x + 0, Neg(Neg x), Identity chains, Reshape of Reshape and sums with zeros leave x;
   the fetched node keeps its name and reads x directly. */
static void test_simplify(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "x");
  nb_tensor *t = nb_add(f->c, nb_mul(f->c, x, nb_scalar(f->c, NB_F64, 1)), nb_scalar(f->c, NB_F64, 0));
  t = nb_identity(f->c, nb_identity(f->c, nb_neg(f->c, nb_neg(f->c, t))));
  nb_tensor *parts[3] = {nb_zeros_like(f->c, x), t, nb_zeros_like(f->c, x)};
  t = nb_add_n(f->c, parts, 3);
  nb_tensor *r = nb_reshape(f->c, nb_reshape(f->c, t, TU_SHAPE(-1), 1), TU_SHAPE(-1, 6), 2);
  nb_name_next(f->c, "y");
  nb_tensor *y = nb_identity(f->c, r);
  assert_int_equal(nb_status(f->c), NB_OK);
  nb_session *s;
  const nb_graph *og = planned(&s, f->g, &(nb_session_opts){NB_PASS_SIMPLIFY}, &x, 1, y);
  const nbgraph_node *n = node_named(og, "y");
  const nbgraph_node *reshape = &og->nodes[og->edges[n->in0].src];
  assert_string_equal(reshape->def->name, "Reshape"); /* one Reshape of x */
  assert_string_equal(input_name(og, reshape, 0), "x");
  assert_int_equal(count_op(og, "Reshape"), 1);
  assert_int_equal(count_op(og, "Neg") + count_op(og, "Mul") + count_op(og, "AddV2") + count_op(og, "AddN"), 0);
  nb_session_free(s);
  nb_tensor *xv = tu_make(f->e, NB_F64, 2, TU_SHAPE(2, 3), TU_VALS(-1, 2, -3, 4, 0, 6)), *want, *got;
  run_both(f->g, &x, &xv, 1, &y, 1, &want, &got);
  check_same(got, want);
  nb_tensor_free(want);
  nb_tensor_free(got);
}

/* x * ones of a larger shape broadcasts: not an identity. */
static void test_simplify_keeps_broadcast(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *ones = nb_tensor_from(f->c, NB_F64, 2, TU_SHAPE(2, 3), (const double[]){1, 1, 1, 1, 1, 1});
  nb_tensor *y = nb_mul(f->c, x, ones);
  nb_session *s;
  const nb_graph *og = planned(&s, f->g, &all_passes, &x, 1, y);
  assert_int_equal(count_op(og, "Mul"), 1);
  nb_session_free(s);
}

/* Nodes the fetches do not need are gone. */
static void test_dead_nodes(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "x");
  nb_tensor *unused = nb_exp(f->c, x), *y = nb_tanh(f->c, x);
  nb_placeholder(f->c, NB_F64, 0, NULL, "unfed");
  assert_non_null(unused);
  nb_session *s;
  const nb_graph *og = planned(&s, f->g, &all_passes, &x, 1, y);
  assert_int_equal(nb_graph_num_nodes(og), 2);
  assert_int_equal(count_op(og, "Exp"), 0);
  nb_session_free(s);
}

/* Relu(Transpose(x, p)) read by Transpose(., p^-1): the Transpose moves past the Relu and
   meets its inverse; Sum(Transpose(x, p), axes, keep_dims) reduces x's permuted axes. */
static void test_sink_transposes(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(2, 3, 4), "x");
  const int p[3] = {2, 0, 1}, inv[3] = {1, 2, 0};
  nb_tensor *r = nb_relu(f->c, nb_mul(f->c, nb_transpose(f->c, x, p, 3), nb_scalar(f->c, NB_F64, 2)));
  nb_tensor *y = nb_sum(f->c, nb_transpose(f->c, r, inv, 3), (const int[]){1}, 1, false);
  nb_tensor *z = nb_identity(f->c, nb_sum(f->c, nb_transpose(f->c, x, p, 3), (const int[]){0, 2}, 2, true));
  assert_int_equal(nb_status(f->c), NB_OK);
  nb_session *s;
  const nb_graph *og = planned(&s, f->g, &(nb_session_opts){NB_PASS_TRANSPOSE}, &x, 1, y);
  assert_int_equal(count_op(og, "Transpose"), 0);
  nb_session_free(s);
  og = planned(&s, f->g, &(nb_session_opts){NB_PASS_TRANSPOSE}, &x, 1, z);
  /* after the Sum, on its [2, 1, 1] result: moving dims of 1 only, a Reshape */
  assert_int_equal(count_op(og, "Transpose"), 0);
  assert_int_equal(count_op(og, "Reshape"), 1);
  nb_session_free(s);
  double xv[24], abs_x[24];
  for (int i = 0; i < 24; i++) xv[i] = sin(1.3 * i), abs_x[i] = fabs(xv[i]);
  nb_tensor *val = tu_make(f->e, NB_F64, 3, TU_SHAPE(2, 3, 4), xv), *want[2], *got[2], *fetch[2] = {y, z};
  run_both(f->g, &x, &val, 1, fetch, 2, want, got);
  check_same(got[0], want[0]); /* y: the same sums, no transposed reduction */
  /* z: sums of 4 * 3 terms in another order */
  nb_session *plain = nb_session_new_with_opts(f->g, &no_passes);
  nb_tensor *abs_val = tu_make(f->e, NB_F64, 3, TU_SHAPE(2, 3, 4), abs_x), *abs_z;
  assert_int_equal(nb_run(plain, &x, &abs_val, 1, &z, 1, &abs_z), NB_OK);
  double w[2], sums[2];
  for (int i = 0; i < 2; i++) w[i] = nb_item(want[1], i), sums[i] = nb_item(abs_z, i);
  tu_check_sums(got[1], w, NB_F64, 12, sums);
  nb_tensor_free(abs_z);
  nb_session_free(plain);
  for (int k = 0; k < 2; k++) nb_tensor_free(want[k]), nb_tensor_free(got[k]);
}

/* Pad, Slice and ConcatV2 of Transposes by p take their paddings, begin, size and axis
   permuted, so the Transposes meet their inverse after them. */
static void test_sink_pad_slice_concat(void **state) {
  gu_fixture *f = *state;
  const int p[3] = {2, 0, 1}, inv[3] = {1, 2, 0};
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(2, 3, 4), "x");
  nb_tensor *z = nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(3, 5, 4), "z");
  nb_tensor *a = nb_pad(f->c, nb_transpose(f->c, x, p, 3), TU_SHAPE(1, 0, 0, 1, 2, 2), 3); /* [5, 3, 7] */
  nb_tensor *b = nb_slice(f->c, a, TU_SHAPE(1, 0, 1), TU_SHAPE(4, 3, 5), 3);               /* [4, 3, 5] */
  nb_tensor *cat = nb_concat(f->c, (nb_tensor *[]){b, nb_transpose(f->c, z, p, 3)}, 2, -1);
  nb_tensor *y = nb_identity(f->c, nb_transpose(f->c, cat, inv, 3));
  assert_int_equal(nb_status(f->c), NB_OK);
  nb_tensor *feed[2] = {x, z};
  nb_session *s;
  const nb_graph *og = planned(&s, f->g, &(nb_session_opts){NB_PASS_TRANSPOSE}, feed, 2, y);
  assert_int_equal(count_op(og, "Transpose"), 0);
  nb_session_free(s);
  double xv[24], zv[60];
  for (int i = 0; i < 60; i++) zv[i] = cos(0.7 * i), xv[i % 24] = sin(1.1 * i);
  nb_tensor *vals[2] = {tu_make(f->e, NB_F64, 3, TU_SHAPE(2, 3, 4), xv),
                        tu_make(f->e, NB_F64, 3, TU_SHAPE(3, 5, 4), zv)};
  nb_tensor *want, *got;
  run_both(f->g, feed, vals, 2, &y, 1, &want, &got);
  check_same(got, want); /* copies only */
  nb_tensor_free(want);
  nb_tensor_free(got);
}

static const int to_nhwc[4] = {0, 2, 3, 1}, to_nchw[4] = {0, 3, 1, 2};

/* A float64 tensor of shape of small integers (from seed): every sum of them is exact, in
   any order. */
static nb_tensor *small_ints(nb_ctx *e, int seed, int rank, const int64_t *shape) {
  double v[256];
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= shape[d];
  assert_true(n <= 256);
  for (int64_t i = 0; i < n; i++) v[i] = (double)((i * (7 + seed) + seed) % 11 - 5);
  return tu_make(e, NB_F64, rank, shape, v);
}

/* The node input i of n reads, and the value (known when built) of input i. */
static const nbgraph_node *input_node(const nb_graph *g, const nbgraph_node *n, int i) {
  return &g->nodes[g->edges[n->in0 + i].src];
}

static const nb_tensor *input_value(const nb_graph *g, const nbgraph_node *n, int i) {
  return g->outs[input_node(g, n, i)->out0 + g->edges[n->in0 + i].out].value;
}

/* n is an op of type reading inputs named in[0..nin). */
static void check_node(const nb_graph *g, const nbgraph_node *n, const char *type, const char *const *in, int nin) {
  assert_string_equal(n->def->name, type);
  assert_int_equal(n->nin, nin);
  for (int i = 0; i < nin; i++)
    if (in[i]) assert_string_equal(input_name(g, n, i), in[i]);
}

/* Feeds vals, fetches fetch[0..n) with and without the passes: the same values. */
static void check_runs_same(nb_graph *g, nb_tensor *const *feed, nb_tensor *const *vals, int nfeed,
                            nb_tensor *const *fetch, int n) {
  nb_tensor *want[4], *got[4];
  run_both(g, feed, vals, nfeed, fetch, n, want, got);
  for (int k = 0; k < n; k++) {
    check_same(got[k], want[k]);
    nb_tensor_free(want[k]);
    nb_tensor_free(got[k]);
  }
}

/* out = Tanh(Transpose(*sum, NHWC -> NCHW)), *sum = AddV2(Transpose(x, NCHW -> NHWC), y)
   named `name`. */
static nb_tensor *nhwc_add_back(nb_ctx *c, nb_tensor *x, nb_tensor *y, const char *name, nb_tensor **sum) {
  nb_tensor *t = nb_transpose(c, x, to_nhwc, 4);
  nb_name_next(c, name);
  *sum = nb_add(c, t, y);
  t = nb_transpose(c, *sum, to_nchw, 4);
  nb_name_next(c, "out");
  nb_tensor *out = nb_tanh(c, t);
  assert_int_equal(nb_status(c), NB_OK);
  return out;
}

/* AddV2(Transpose(x, p), y), y a placeholder of the op's rank, read by Transpose(., p^-1):
   the AddV2 runs on x and Transpose(y, p^-1), and its reader's Transpose cancels with the
   one after it (two Transposes become one). */
static void test_sink_full_rank_operand(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(2, 3, 4, 5), "x");
  nb_tensor *y = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(2, 4, 5, 3), "y");
  nb_tensor *a, *out = nhwc_add_back(f->c, x, y, "a", &a);
  nb_tensor *feed[2] = {x, y};
  nb_graph *og = NULL;
  assert_int_equal(nb_graph_optimize(f->g, feed, 2, &out, 1, &(nb_session_opts){NB_PASS_TRANSPOSE}, &og), NB_OK);
  assert_int_equal(nb_graph_num_nodes(og), 6); /* x, y, the perm, Transpose(y), a, out */
  const nbgraph_node *add = node_named(og, "a"), *ty = input_node(og, add, 1);
  check_node(og, node_named(og, "out"), "Tanh", (const char *[]){"a"}, 1);
  check_node(og, add, "AddV2", (const char *[]){"x", NULL}, 2);
  check_node(og, ty, "Transpose", (const char *[]){"y", NULL}, 2);
  tu_check(input_value(og, ty, 1), NB_I32, 1, TU_SHAPE(4), TU_VALS(0, 3, 1, 2), 0);
  nb_graph_free(og);
  nb_tensor *vals[2] = {small_ints(f->e, 1, 4, TU_SHAPE(2, 3, 4, 5)), small_ints(f->e, 2, 4, TU_SHAPE(2, 4, 5, 3))};
  check_runs_same(f->g, feed, vals, 2, &out, 1);
}

/* A bias b of shape [C] and a scale s of shape [1, 1, 1, C] against Transpose(x, NCHW ->
   NHWC), and the result back to NCHW: both take a Reshape to [1, C, 1, 1] (a view: the
   order of their elements stays), and no Transpose is left. */
static void test_sink_broadcast_operand(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(2, 3, 4, 5), "x");
  nb_tensor *b = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "b");
  nb_tensor *sc = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(1, 1, 1, 3), "s");
  nb_tensor *t = nb_transpose(f->c, x, to_nhwc, 4);
  nb_name_next(f->c, "h");
  nb_tensor *h = nb_add(f->c, t, b);
  nb_name_next(f->c, "g");
  nb_tensor *g = nb_mul(f->c, h, sc);
  t = nb_transpose(f->c, g, to_nchw, 4);
  nb_name_next(f->c, "out");
  nb_tensor *out = nb_tanh(f->c, t);
  assert_int_equal(nb_status(f->c), NB_OK);
  nb_tensor *feed[3] = {x, b, sc};
  nb_graph *og = NULL;
  assert_int_equal(nb_graph_optimize(f->g, feed, 3, &out, 1, &(nb_session_opts){NB_PASS_TRANSPOSE}, &og), NB_OK);
  assert_int_equal(nb_graph_num_nodes(og), 10); /* x, b, s, two Reshapes and their shapes, h, g, out */
  assert_int_equal(count_op(og, "Transpose"), 0);
  const nbgraph_node *hn = node_named(og, "h"), *gn = node_named(og, "g");
  check_node(og, node_named(og, "out"), "Tanh", (const char *[]){"g"}, 1);
  check_node(og, gn, "Mul", (const char *[]){"h", NULL}, 2);
  check_node(og, hn, "AddV2", (const char *[]){"x", NULL}, 2);
  const nbgraph_node *reshapes[2] = {input_node(og, hn, 1), input_node(og, gn, 1)};
  for (int k = 0; k < 2; k++) {
    check_node(og, reshapes[k], "Reshape", (const char *[]){k ? "s" : "b", NULL}, 2);
    tu_check(input_value(og, reshapes[k], 1), NB_I64, 1, TU_SHAPE(4), TU_VALS(1, 3, 1, 1), 0);
  }
  nb_graph_free(og);
  nb_tensor *vals[3] = {small_ints(f->e, 1, 4, TU_SHAPE(2, 3, 4, 5)), small_ints(f->e, 2, 1, TU_SHAPE(3)),
                        small_ints(f->e, 3, 4, TU_SHAPE(1, 1, 1, 3))};
  check_runs_same(f->g, feed, vals, 3, &out, 1);
}

/* AddV2(Transpose(x, p), y), y a placeholder of the op's rank, read by Tanh: moving the
   Transpose would remove one and add two (after the AddV2, and on y), so the graph stays
   as it is. */
static void test_sink_not_paying(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(2, 3, 4, 5), "x");
  nb_tensor *y = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(2, 4, 5, 3), "y");
  nb_name_next(f->c, "t");
  nb_tensor *t = nb_transpose(f->c, x, to_nhwc, 4);
  nb_name_next(f->c, "a");
  nb_tensor *a = nb_add(f->c, t, y);
  nb_name_next(f->c, "out");
  nb_tensor *out = nb_tanh(f->c, a);
  assert_int_equal(nb_status(f->c), NB_OK);
  nb_tensor *feed[2] = {x, y};
  nb_graph *og = NULL;
  assert_int_equal(nb_graph_optimize(f->g, feed, 2, &out, 1, &(nb_session_opts){NB_PASS_TRANSPOSE}, &og), NB_OK);
  assert_int_equal(nb_graph_num_nodes(og), 6); /* x, y, the perm, t, a, out */
  check_node(og, node_named(og, "out"), "Tanh", (const char *[]){"a"}, 1);
  check_node(og, node_named(og, "a"), "AddV2", (const char *[]){"t", "y"}, 2);
  check_node(og, node_named(og, "t"), "Transpose", (const char *[]){"x", NULL}, 2);
  nb_graph_free(og);
}

/* A fetched intermediate h = AddV2(Transpose(x, p), b), read also by Transpose(., p^-1):
   the AddV2 runs NCHW under another name, the Transpose after it is named h and gives h's
   value, and the reader's Transpose cancels with it. */
static void test_sink_fetched_intermediate(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(2, 3, 4, 5), "x");
  nb_tensor *b = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "b");
  nb_tensor *h, *out = nhwc_add_back(f->c, x, b, "h", &h);
  nb_tensor *feed[2] = {x, b}, *fetch[2] = {h, out};
  nb_graph *og = NULL;
  assert_int_equal(nb_graph_optimize(f->g, feed, 2, fetch, 2, &(nb_session_opts){NB_PASS_TRANSPOSE}, &og), NB_OK);
  assert_int_equal(nb_graph_num_nodes(og), 8); /* x, b, Reshape(b) and its shape, the AddV2, h and its perm, out */
  const nbgraph_node *hn = node_named(og, "h"), *add = input_node(og, hn, 0);
  check_node(og, hn, "Transpose", (const char *[]){NULL, NULL}, 2);
  tu_check(input_value(og, hn, 1), NB_I32, 1, TU_SHAPE(4), TU_VALS(0, 2, 3, 1), 0);
  check_node(og, add, "AddV2", (const char *[]){"x", NULL}, 2);
  assert_string_equal(input_node(og, add, 1)->def->name, "Reshape");
  check_node(og, node_named(og, "out"), "Tanh", (const char *[]){add->name}, 1);
  nb_graph_free(og);
  nb_tensor *vals[2] = {small_ints(f->e, 1, 4, TU_SHAPE(2, 3, 4, 5)), small_ints(f->e, 2, 1, TU_SHAPE(3))};
  check_runs_same(f->g, feed, vals, 2, fetch, 2);
}

/* CHAIN unary ops that keep small integers small integers, on x. */
enum { CHAIN = 6 };

static nb_tensor *unary_chain(nb_ctx *c, nb_tensor *x) {
  nb_tensor *(*const unary[CHAIN])(nb_ctx *, nb_tensor *) = {nb_neg, nb_abs, nb_square, nb_relu, nb_neg, nb_sign};
  for (int k = 0; k < CHAIN; k++) x = unary[k](c, x);
  return x;
}

/* A unary chain on AddN(Transpose(a, p), Transpose(b, p), y), read by Transpose(., p^-1),
   and a Sum over H and W without keep_dims of a unary chain on Transpose(a, p): of four
   Transposes one is left (on y: the AddN pays, since the Transpose after it travels down
   the chain to its inverse), and the Sum reduces a's H and W, its [N, C] result already in
   order. Each chain is longer than the pipeline's rounds: the Transpose goes down it in
   one run of the pass. */
static void test_sink_addn_chain_and_sum(void **state) {
  gu_fixture *f = *state;
  nb_tensor *a = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(2, 3, 4, 5), "a");
  nb_tensor *b = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(2, 3, 4, 5), "b");
  nb_tensor *y = nb_placeholder(f->c, NB_F64, 4, TU_SHAPE(2, 4, 5, 3), "y");
  nb_tensor *parts[3] = {nb_transpose(f->c, a, to_nhwc, 4), nb_transpose(f->c, b, to_nhwc, 4), y};
  nb_tensor *t = nb_transpose(f->c, unary_chain(f->c, nb_add_n(f->c, parts, 3)), to_nchw, 4);
  nb_name_next(f->c, "out");
  nb_tensor *out = nb_identity(f->c, t);
  t = unary_chain(f->c, nb_transpose(f->c, a, to_nhwc, 4));
  nb_name_next(f->c, "sum");
  nb_tensor *sum = nb_sum(f->c, t, (const int[]){1, 2}, 2, false);
  assert_int_equal(nb_status(f->c), NB_OK);
  nb_tensor *feed[3] = {a, b, y}, *fetch[2] = {out, sum};
  nb_graph *og = NULL;
  assert_int_equal(nb_graph_optimize(f->g, feed, 3, fetch, 2, &(nb_session_opts){NB_PASS_TRANSPOSE}, &og), NB_OK);
  assert_int_equal(count_op(og, "Transpose"), 1);
  const nbgraph_node *addn = node_named(og, "out");
  for (int k = 0; k <= CHAIN; k++) addn = input_node(og, addn, 0);
  check_node(og, addn, "AddN", (const char *[]){"a", "b", NULL}, 3);
  check_node(og, input_node(og, addn, 2), "Transpose", (const char *[]){"y", NULL}, 2);
  const nbgraph_node *sn = node_named(og, "sum"), *an = input_node(og, sn, 0);
  for (int k = 0; k < CHAIN; k++) an = input_node(og, an, 0);
  check_node(og, sn, "Sum", (const char *[]){NULL, NULL}, 2);
  assert_string_equal(an->name, "a");
  tu_check(input_value(og, sn, 1), NB_I32, 1, TU_SHAPE(2), TU_VALS(2, 3), 0);
  nb_graph_free(og);
  nb_tensor *vals[3] = {small_ints(f->e, 1, 4, TU_SHAPE(2, 3, 4, 5)), small_ints(f->e, 2, 4, TU_SHAPE(2, 3, 4, 5)),
                        small_ints(f->e, 3, 4, TU_SHAPE(2, 4, 5, 3))};
  check_runs_same(f->g, feed, vals, 3, fetch, 2);
}

/* AddV2(Transpose(x, [1, 0]), u) back through Transpose(., [1, 0]), u the second output of
   an Unpack: the pass reads u's facts ([3, 3]), so u takes the Transpose (a square u read
   as a scalar, which no permutation changes, would add the wrong elements) and the two
   around the AddV2 cancel. */
static void test_sink_second_output_operand(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(3, 3), "x");
  nb_tensor *z = nb_placeholder(f->c, NB_F64, 3, TU_SHAPE(2, 3, 3), "z"), *u[2];
  const int swap[2] = {1, 0};
  assert_int_equal(nb_unpack(f->c, z, 0, 2, u), NB_OK);
  nb_tensor *t = nb_transpose(f->c, x, swap, 2);
  nb_name_next(f->c, "a");
  nb_tensor *a = nb_add(f->c, t, u[1]);
  nb_tensor *back = nb_transpose(f->c, a, swap, 2);
  nb_name_next(f->c, "out");
  nb_tensor *out = nb_tanh(f->c, back);
  assert_int_equal(nb_status(f->c), NB_OK);
  nb_tensor *feed[2] = {x, z};
  nb_graph *og = NULL;
  assert_int_equal(nb_graph_optimize(f->g, feed, 2, &out, 1, &(nb_session_opts){NB_PASS_TRANSPOSE}, &og), NB_OK);
  assert_int_equal(count_op(og, "Transpose"), 1);
  const nbgraph_node *an = input_node(og, node_named(og, "out"), 0), *tu = input_node(og, an, 1);
  check_node(og, an, "AddV2", (const char *[]){"x", NULL}, 2);
  assert_string_equal(tu->def->name, "Transpose");
  assert_string_equal(input_node(og, tu, 0)->def->name, "Unpack");
  assert_int_equal(og->edges[tu->in0].out, 1);
  nb_graph_free(og);
  nb_tensor *vals[2] = {small_ints(f->e, 1, 2, TU_SHAPE(3, 3)), small_ints(f->e, 2, 3, TU_SHAPE(2, 3, 3))};
  check_runs_same(f->g, feed, vals, 2, &out, 1);
}

/* Fed and fetched tensors keep their names in nb_graph_optimize's graph. */
static void test_names_kept(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(3), "x");
  nb_tensor *m = nb_mul(f->c, x, nb_scalar(f->c, NB_F64, 1));
  nb_name_next(f->c, "out");
  nb_tensor *y = nb_identity(f->c, m);
  nb_graph *og = NULL;
  assert_int_equal(nb_graph_optimize(f->g, &x, 1, &y, 1, NULL, &og), NB_OK);
  nb_ctx *oc = nb_graph_ctx_new(og);
  nb_tensor *ox = nb_graph_tensor_by_name(oc, "x:0"), *oy = nb_graph_tensor_by_name(oc, "out:0");
  assert_non_null(ox);
  assert_non_null(oy);
  nb_session *s = nb_session_new(og);
  nb_tensor *xv = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3)), *r;
  assert_int_equal(nb_run(s, &ox, &xv, 1, &oy, 1, &r), NB_OK);
  tu_check(r, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3), 0);
  nb_tensor_free(r);
  nb_session_free(s);
  nb_ctx_free(oc);
  nb_graph_free(og);
  assert_int_equal(nb_graph_optimize(f->g, &x, 1, &y, 1, NULL, NULL), NB_INVALID);
}

/* ---- properties over random graphs -------------------------------------------------------- */

enum { NODES = 30, INPUTS = 3, WINDOW = 6 };

/* One random op on recent values ([2,3] each), with the patterns the passes rewrite:
   identities, repeated subexpressions, Transpose pairs (some with operands between them
   that are not Transposes), Reshape chains. */
static nb_tensor *random_op(nb_ctx *c, tu_rng *r, nb_tensor **vals, int n) {
  int w = n < WINDOW ? n : WINDOW;
  nb_tensor *a = vals[n - 1 - (int)(tu_rng_next(r) % (uint32_t)w)],
            *b = vals[n - 1 - (int)(tu_rng_next(r) % (uint32_t)w)];
  const int t[2] = {1, 0};
  switch (tu_rng_next(r) % 11) {
    case 0: return nb_tanh(c, a);
    case 1: return nb_mul(c, a, nb_sigmoid(c, b));
    case 2: return nb_add(c, nb_mul(c, a, nb_scalar(c, NB_F64, 1)), nb_scalar(c, NB_F64, 0));
    case 3: return nb_sub(c, nb_square(c, a), nb_square(c, a)); /* CSE: one Square */
    case 4: return nb_transpose(c, nb_sin(c, nb_transpose(c, a, t, 2)), t, 2);
    case 5: return nb_reshape(c, nb_reshape(c, nb_neg(c, nb_neg(c, a)), TU_SHAPE(6), 1), TU_SHAPE(2, 3), 2);
    case 6: return nb_add(c, a, nb_mean(c, b, (const int[]){1}, 1, true));
    case 7: return nb_identity(c, nb_mul(c, a, b));
    case 8: /* a broadcast operand that is not constant: a [2] row against [3, 2] */
      return nb_transpose(c, nb_add(c, nb_transpose(c, a, t, 2), nb_sum(c, b, (const int[]){1}, 1, false)), t, 2);
    case 9: /* an operand of full rank that is not a Transpose */
      return nb_transpose(c, nb_sub(c, nb_transpose(c, a, t, 2), nb_reshape(c, b, TU_SHAPE(3, 2), 2)), t, 2);
    default: return nb_add(c, a, nb_cos(c, b));
  }
}

static nb_tensor *random_graph(nb_ctx *c, uint64_t seed, nb_tensor *const *xs) {
  tu_rng r = {seed};
  nb_tensor *vals[INPUTS + NODES];
  for (int i = 0; i < INPUTS; i++) vals[i] = xs[i];
  for (int i = 0; i < NODES; i++) vals[INPUTS + i] = random_op(c, &r, vals, INPUTS + i);
  nb_tensor *tail[2] = {vals[INPUTS + NODES - 1], vals[INPUTS + NODES - 2]};
  return nb_sum(c, nb_add_n(c, tail, 2), NULL, 0, false);
}

/* Feeds for xs: values from the seed. */
static void random_feeds(nb_ctx *e, uint64_t seed, nb_tensor **vals) {
  tu_rng r = {seed * 7919 + 1};
  for (int i = 0; i < INPUTS; i++) {
    double v[6];
    for (int j = 0; j < 6; j++) v[j] = (double)(tu_rng_next(&r) % 2000) / 1000.0 - 1.0;
    vals[i] = tu_make(e, NB_F64, 2, TU_SHAPE(2, 3), v);
  }
}

/* y, its gradients and the gradient of the gradients' sum (second order), optimized and
   not: equal, since none of these rewrites reorders an arithmetic operation (transposes
   here are 2-D and reduce nothing). */
static void test_random_graphs(void **state) {
  gu_fixture *f = *state;
  for (uint64_t seed = 1; seed <= 12; seed++) {
    nb_tensor *xs[INPUTS];
    for (int i = 0; i < INPUTS; i++) xs[i] = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), NULL);
    nb_tensor *y = random_graph(f->c, seed, xs), *dx[INPUTS], *ddx[INPUTS];
    nb_grad_opts go = {.unconnected_zero = 1};
    assert_int_equal(nb_gradients(f->c, &y, 1, xs, INPUTS, &go, dx), NB_OK);
    nb_tensor *gsum = nb_add_n(f->c,
                               (nb_tensor *[]){nb_sum(f->c, dx[0], NULL, 0, false), nb_sum(f->c, dx[1], NULL, 0, false),
                                               nb_sum(f->c, dx[2], NULL, 0, false)},
                               3);
    assert_int_equal(nb_gradients(f->c, &gsum, 1, xs, INPUTS, &go, ddx), NB_OK);
    nb_tensor *vals[INPUTS], *fetch[7] = {y, dx[0], dx[1], dx[2], ddx[0], ddx[1], ddx[2]}, *want[7], *got[7];
    random_feeds(f->e, seed, vals);
    run_both(f->g, xs, vals, INPUTS, fetch, 7, want, got);
    for (int k = 0; k < 7; k++) {
      check_same(got[k], want[k]);
      nb_tensor_free(want[k]);
      nb_tensor_free(got[k]);
    }
  }
}

/* A loop and a branch whose bodies the passes rewrite (their sessions optimize too), with
   gradients through both. */
static nb_code loop_cond(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)user;
  *pred = nb_less(c, v[0], nb_scalar(c, NB_I32, 3));
  return nb_status(c);
}

static nb_code loop_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next_vars, void *user) {
  (void)user;
  const int t[2] = {1, 0};
  next_vars[0] = nb_add(c, v[0], nb_scalar(c, NB_I32, 1));
  nb_tensor *u = nb_transpose(c, nb_tanh(c, nb_transpose(c, v[1], t, 2)), t, 2);
  next_vars[1] = nb_add(c, nb_mul(c, u, nb_scalar(c, NB_F64, 1)), nb_mul(c, nb_sin(c, v[1]), nb_sin(c, v[1])));
  return nb_status(c);
}

static nb_code then_fn(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)user;
  out[0] = nb_identity(c, nb_neg(c, nb_neg(c, nb_square(c, in[0]))));
  return nb_status(c);
}

static nb_code else_fn(nb_ctx *c, nb_tensor *const *in, nb_tensor **out, void *user) {
  (void)user;
  out[0] = nb_add(c, nb_exp(c, in[0]), nb_scalar(c, NB_F64, 0));
  return nb_status(c);
}

static void test_loops_and_conds(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 2, TU_SHAPE(2, 3), "x");
  nb_tensor *pred = nb_placeholder(f->c, NB_BOOL, 0, NULL, "pred");
  nb_tensor *vars[2] = {nb_scalar(f->c, NB_I32, 0), x}, *lo[2], *co;
  assert_int_equal(nb_while(f->c, loop_cond, loop_body, NULL, vars, 2, -1, lo), NB_OK);
  assert_int_equal(nb_cond(f->c, pred, then_fn, else_fn, NULL, &lo[1], 1, &co, 1), NB_OK);
  nb_tensor *y = nb_sum(f->c, co, NULL, 0, false), *dx;
  assert_int_equal(nb_gradients(f->c, &y, 1, &x, 1, NULL, &dx), NB_OK);
  for (int branch = 0; branch < 2; branch++) {
    nb_tensor *xv[INPUTS], *feed[2] = {x, pred}, *fetch[2] = {y, dx}, *want[2], *got[2];
    random_feeds(f->e, 5, xv);
    nb_tensor *vals[2] = {xv[0], nb_scalar(f->e, NB_BOOL, branch)};
    run_both(f->g, feed, vals, 2, fetch, 2, want, got);
    for (int k = 0; k < 2; k++) {
      check_same(got[k], want[k]);
      nb_tensor_free(want[k]);
      nb_tensor_free(got[k]);
    }
  }
}

/* Errors: an unfed placeholder and a kernel's run-time error give the same code and
   message with and without the passes (the nodes keep their names). */
static void test_same_errors(void **state) {
  gu_fixture *f = *state;
  nb_tensor *x = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(-1), "x");
  nb_tensor *q = nb_placeholder(f->c, NB_F64, 1, TU_SHAPE(-1), "q");
  nb_tensor *y = nb_reshape(f->c, nb_mul(f->c, nb_identity(f->c, x), nb_scalar(f->c, NB_F64, 1)), TU_SHAPE(2, 2), 2);
  nb_tensor *z = nb_add(f->c, y, nb_reshape(f->c, q, TU_SHAPE(2, 2), 2));
  nb_tensor *xv = tu_make(f->e, NB_F64, 1, TU_SHAPE(3), TU_VALS(1, 2, 3)), *out;
  nb_session *plain = nb_session_new_with_opts(f->g, &no_passes), *opt = nb_session_new_with_opts(f->g, &all_passes);
  nb_code want = nb_run(plain, &x, &xv, 1, &y, 1, &out);
  assert_int_not_equal(want, NB_OK); /* 3 values into [2, 2] */
  assert_int_equal(nb_run(opt, &x, &xv, 1, &y, 1, &out), want);
  assert_string_equal(nb_session_error(opt), nb_session_error(plain));
  want = nb_run(plain, &x, &xv, 1, &z, 1, &out); /* q not fed */
  assert_int_equal(want, NB_INVALID);
  assert_int_equal(nb_run(opt, &x, &xv, 1, &z, 1, &out), want);
  assert_string_equal(nb_session_error(opt), nb_session_error(plain));
  nb_session_free(plain);
  nb_session_free(opt);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_layout_seed_golden, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_layout_lenet_block, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_cse, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_simplify, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_simplify_keeps_broadcast, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_dead_nodes, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sink_transposes, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sink_pad_slice_concat, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sink_full_rank_operand, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sink_broadcast_operand, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sink_not_paying, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sink_fetched_intermediate, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sink_addn_chain_and_sum, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_sink_second_output_operand, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_names_kept, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_random_graphs, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_loops_and_conds, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_same_errors, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests_name("optimize", tests, NULL, NULL);
}
