/* Elementwise fusion (src/opt/fuse.c, src/ops/fused.c): a graph run with its elementwise
   groups fused gives the same results as the graph run as built. Every fused member runs
   its own op's loop on each block, element for element, so the results must be bitwise
   equal (the comparison is exact: no reassociation, no other implementation), on one
   thread and on two; errors name the member node, as unfused. Sums fused as epilogues
   (test_reduction_epilogues) add in another order: within the bound of two orders of a
   sum, and the same bits on one thread and on two. */
#include "graphutil.h"

#include "../src/graph/graph.h"
#include "../src/ops/fused.h"
#include "../src/opt/fuse.h"

#include <stdio.h>

#define N_ROWS 37 /* not a multiple of anything: blocks straddle rows */
#define N_COLS 29
#define MAX_VALS 64
#define MAX_FETCH 8

typedef struct run_case {
  nb_tensor *feed[6], *val[6];
  int nfeed;
  nb_tensor *fetch[MAX_FETCH];
  int nfetch;
} run_case;

/* xorshift32: the same draws on every platform (rand_r is POSIX, not C11). */
static unsigned next_rand(unsigned *seed) {
  unsigned x = *seed ? *seed : 1;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *seed = x;
}

static nb_tensor *random_values(nb_ctx *e, nb_dtype t, int rank, const int64_t *shape, unsigned *seed) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= shape[i];
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  assert_non_null(v);
  for (int64_t i = 0; i < n; i++) v[i] = 2.0 * next_rand(seed) / 4294967296.0 - 1.0;
  nb_tensor *x = tu_make_float(e, t, rank, shape, v);
  free(v);
  return x;
}

/* Runs rc in a new session on g with fetches fetch (threads threads); the results in res, or
   the session's error in err. */
static nb_code run(nb_graph *g, const run_case *rc, nb_tensor *const *fetch, int threads, nb_tensor **res, char *err) {
  nb_session_opts opts = nb_session_opts_default();
  opts.passes = 0; /* as built (the optimizer's pipeline would fuse the unfused graph) */
  nb_session *s = nb_session_new_with_opts(g, &opts);
  assert_non_null(s);
  nb_session_set_threads(s, threads);
  nb_code code = nb_run(s, rc->feed, rc->val, rc->nfeed, fetch, rc->nfetch, res);
  snprintf(err, NBCORE_ERR_CAP, "%s", nb_session_error(s));
  nb_session_free(s);
  return code;
}

static int count_fused(const nb_graph *g) {
  int n = 0;
  for (int32_t i = 0; i < g->nnodes; i++) n += g->nodes[i].def == nbop_fused_def();
  return n;
}

static void assert_same_tensors(nb_tensor *const *a, nb_tensor *const *b, int n) {
  for (int i = 0; i < n; i++) {
    assert_int_equal(nb_dtype_of(a[i]), nb_dtype_of(b[i]));
    assert_int_equal(nb_rank(a[i]), nb_rank(b[i]));
    assert_memory_equal(nb_shape(a[i]), nb_shape(b[i]), (size_t)nb_rank(a[i]) * sizeof(int64_t));
    size_t bytes = (size_t)nb_num_elements(a[i]) * nb_dtype_size(nb_dtype_of(a[i]));
    if (memcmp(nb_data(a[i]), nb_data(b[i]), bytes) == 0) continue;
    for (int64_t j = 0; j < nb_num_elements(a[i]); j++) {
      double va = nb_item(a[i], j), vb = nb_item(b[i], j);
      if (memcmp(&va, &vb, sizeof va) != 0)
        fail_msg("fetch %d element %lld: unfused %.17g, fused %.17g", i, (long long)j, va, vb);
    }
  }
}

/* Runs rc as built, then fuses g and runs it again on 1 and 2 threads: the same bits each
   time. Returns the number of fused nodes made. */
static int check_fused_matches(nb_ctx *c, nb_graph *g, const run_case *rc) {
  nb_tensor *plain[MAX_FETCH], *fused[MAX_FETCH], *fetch[MAX_FETCH];
  char err[NBCORE_ERR_CAP];
  nb_code code = run(g, rc, rc->fetch, 2, plain, err);
  if (code) fail_msg("unfused run: %s", err);
  int64_t keys[6 + MAX_FETCH];
  for (int i = 0; i < rc->nfeed; i++) keys[i] = nbgraph_key_of(rc->feed[i]);
  for (int i = 0; i < rc->nfetch; i++) keys[rc->nfeed + i] = nbgraph_key_of(rc->fetch[i]);
  assert_int_equal(nbopt_fuse_elementwise(g, keys, rc->nfeed, rc->nfetch, false), NB_OK);
  for (int i = 0; i < rc->nfetch; i++)
    fetch[i] = nbgraph_handle(c, g, nbgraph_key_node(keys[rc->nfeed + i]), nbgraph_key_out(keys[rc->nfeed + i]));
  for (int threads = 1; threads <= 2; threads++) {
    code = run(g, rc, fetch, threads, fused, err);
    if (code) fail_msg("fused run (%d threads): %s", threads, err);
    assert_same_tensors(plain, fused, rc->nfetch);
    for (int i = 0; i < rc->nfetch; i++) nb_tensor_free(fused[i]);
  }
  for (int i = 0; i < rc->nfetch; i++) nb_tensor_free(plain[i]);
  return count_fused(g);
}

/* ---- random elementwise DAGs ------------------------------------------------------------ */

typedef struct dag {
  nb_ctx *c;
  unsigned seed;
  nb_tensor *full[MAX_VALS]; /* values of the output's shape [N_ROWS, N_COLS] */
  int nfull;
  nb_tensor *bcast[MAX_VALS]; /* a row [N_COLS], a column [N_ROWS, 1], a scalar, row sums */
  int nbcast;
  bool opaque; /* some results pass through a Reshape to their own shape: a node no group
                  takes in, so paths leave groups and come back */
} dag;

static nb_tensor *pick(dag *d, nb_tensor *const *pool, int n) { return pool[next_rand(&d->seed) % (unsigned)n]; }

static nb_tensor *random_unary(dag *d, nb_tensor *x) {
  nb_ctx *c = d->c;
  switch (next_rand(&d->seed) % 10) {
    case 0: return nb_tanh(c, x);
    case 1: return nb_sigmoid(c, x);
    case 2: return nb_square(c, x);
    case 3: return nb_neg(c, x);
    case 4: return nb_softplus(c, x);
    case 5: return nb_sin(c, x);
    case 6: return nb_gelu(c, x, next_rand(&d->seed) % 2);
    case 7: return nb_leaky_relu(c, x, 0.2);
    case 8: return nb_exp(c, nb_tanh(c, x));
    default: return nb_relu(c, x);
  }
}

static nb_tensor *random_binary(dag *d, nb_tensor *a, nb_tensor *b) {
  nb_ctx *c = d->c;
  switch (next_rand(&d->seed) % 7) {
    case 0: return nb_add(c, a, b);
    case 1: return nb_sub(c, a, b);
    case 2: return nb_mul(c, a, b);
    case 3: return nb_real_div(c, a, nb_add(c, nb_square(c, b), nb_scalar(c, nb_dtype_of(b), 1)));
    case 4: return nb_maximum(c, a, b);
    case 5: return nb_minimum(c, a, b);
    default: return nb_squared_difference(c, a, b);
  }
}

static nb_tensor *random_pair(dag *d, nb_tensor *a, nb_tensor *b) {
  nb_ctx *c = d->c;
  switch (next_rand(&d->seed) % 4) {
    case 0: return nb_tanh_grad(c, nb_tanh(c, a), b);
    case 1: return nb_sigmoid_grad(c, nb_sigmoid(c, a), b);
    case 2: return nb_relu_grad(c, a, b);
    default: return nb_gelu_grad(c, a, b, true);
  }
}

/* One random node over the pools: its result joins the pool of its shape. */
static void grow(dag *d) {
  nb_ctx *c = d->c;
  nb_tensor *a = pick(d, d->full, d->nfull), *r;
  unsigned what = next_rand(&d->seed) % 8;
  if (what < 2) {
    r = random_unary(d, a);
  } else if (what < 4) {
    r = random_binary(d, a, pick(d, d->full, d->nfull));
  } else if (what < 6) { /* broadcasting, either side, or made explicit */
    nb_tensor *b = pick(d, d->bcast, d->nbcast);
    const int64_t full[2] = {N_ROWS, N_COLS};
    unsigned how = next_rand(&d->seed) % 3;
    r = how == 0 ? random_binary(d, a, b) : how == 1 ? random_binary(d, b, a) : nb_broadcast_to(c, b, full, 2);
  } else if (what == 6) {
    r = random_pair(d, a, pick(d, d->full, d->nfull));
  } else if (next_rand(&d->seed) % 2) {
    nb_tensor *xs[3] = {a, pick(d, d->full, d->nfull), pick(d, d->full, d->nfull)};
    r = nb_add_n(c, xs, 3);
  } else { /* a reduction between elementwise groups: groups must stay convex around it */
    int axis = 1;
    d->bcast[d->nbcast++] = nb_mean(c, a, &axis, 1, true);
    return;
  }
  if (d->opaque && next_rand(&d->seed) % 3 == 0) r = nb_reshape(c, r, (const int64_t[]){N_ROWS, N_COLS}, 2);
  d->full[d->nfull++] = r;
}

static void random_dag_case(nb_dtype t, unsigned seed, bool opaque) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  dag d = {.c = c, .seed = seed, .opaque = opaque};
  run_case rc = {.nfeed = 0};
  const int64_t full[2] = {N_ROWS, N_COLS}, row[1] = {N_COLS}, col[2] = {N_ROWS, 1};
  const int64_t *shapes[4] = {full, full, row, col};
  const int ranks[4] = {2, 2, 1, 2};
  for (int i = 0; i < 4; i++) {
    rc.feed[i] = nb_placeholder(c, t, ranks[i], shapes[i], NULL);
    rc.val[i] = random_values(e, t, ranks[i], shapes[i], &d.seed);
    if (i < 2)
      d.full[d.nfull++] = rc.feed[i];
    else
      d.bcast[d.nbcast++] = rc.feed[i];
  }
  rc.nfeed = 4;
  d.bcast[d.nbcast++] = nb_scalar(c, t, 0.75);
  while (d.nfull < (opaque ? 48 : 24) && d.nbcast < MAX_VALS) grow(&d);
  assert_int_equal(nb_status(c), NB_OK);
  rc.fetch[rc.nfetch++] = d.full[d.nfull - 1];
  for (int i = 0; i < 3; i++) rc.fetch[rc.nfetch++] = d.full[2 + next_rand(&d.seed) % (unsigned)(d.nfull - 2)];
  rc.fetch[rc.nfetch++] = d.bcast[d.nbcast - 1];
  if (opaque) {
    nb_tensor *loss = nb_sum(c, nb_mul(c, rc.fetch[0], rc.fetch[1]), NULL, 0, false);
    nb_tensor *grads[2];
    assert_int_equal(nb_gradients(c, &loss, 1, rc.feed, 2, NULL, grads), NB_OK);
    for (int i = 0; i < 2; i++)
      if (grads[i]) rc.fetch[rc.nfetch++] = grads[i];
  }
  int nfused = check_fused_matches(c, g, &rc);
  assert_true(opaque || nfused > 0);
  for (int i = 0; i < rc.nfeed; i++) nb_tensor_free(rc.val[i]);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

static void test_random_dags(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= 40; seed++) random_dag_case(seed % 2 ? NB_F32 : NB_F64, seed, false);
}

/* Paths that leave the elementwise nodes and come back, and the gradients of a sum of two
   of the values (longer chains, more groups to merge): groups merge only where no fused
   node would wait on itself, and the quotient graph's order stays topological from merge
   to merge (120 cases: a slip there showed from the 94th on). */
static void test_random_dags_with_opaque_nodes(void **state) {
  (void)state;
  for (unsigned seed = 1; seed <= 120; seed++) random_dag_case(seed % 2 ? NB_F32 : NB_F64, seed, true);
}

/* ---- gradient graphs ---------------------------------------------------------------------- */

/* Layer normalization over the last dim: (x - mean) rsqrt(var + eps) gamma + beta. */
static nb_tensor *layer_norm(nb_ctx *c, nb_tensor *x, nb_tensor *gamma, nb_tensor *beta) {
  int axis = 1;
  nb_tensor *xc = nb_sub(c, x, nb_mean(c, x, &axis, 1, true));
  nb_tensor *var = nb_mean(c, nb_square(c, xc), &axis, 1, true);
  nb_tensor *y = nb_mul(c, xc, nb_rsqrt(c, nb_add(c, var, nb_scalar(c, nb_dtype_of(x), 1e-5))));
  return nb_add(c, nb_mul(c, y, gamma), beta);
}

/* loss = sum(layer_norm(x) * w) and gelu(x W + b) (both forms): the forward graph and
   its gradients with respect to every input, fetched together. */
static void gradient_case(nb_dtype t, bool approximate) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  unsigned seed = 7;
  run_case rc = {.nfeed = 5};
  const int64_t full[2] = {N_ROWS, N_COLS}, row[1] = {N_COLS}, sq[2] = {N_COLS, N_COLS};
  const int64_t *shapes[5] = {full, row, row, full, sq};
  const int ranks[5] = {2, 1, 1, 2, 2};
  for (int i = 0; i < 5; i++) {
    rc.feed[i] = nb_placeholder(c, t, ranks[i], shapes[i], NULL);
    rc.val[i] = random_values(e, t, ranks[i], shapes[i], &seed);
  }
  nb_tensor *x = rc.feed[0], *gamma = rc.feed[1], *beta = rc.feed[2], *w = rc.feed[3], *wm = rc.feed[4];
  nb_tensor *h =
      nb_gelu(c, nb_add(c, nb_matmul(c, layer_norm(c, x, gamma, beta), wm, false, false), beta), approximate);
  nb_tensor *loss = nb_sum(c, nb_mul(c, nb_tanh(c, h), w), NULL, 0, false);
  nb_tensor *xs[4] = {x, gamma, beta, wm}, *dxs[4];
  assert_int_equal(nb_gradients(c, &loss, 1, xs, 4, NULL, dxs), NB_OK);
  rc.fetch[rc.nfetch++] = loss;
  rc.fetch[rc.nfetch++] = h;
  for (int i = 0; i < 4; i++) rc.fetch[rc.nfetch++] = dxs[i];
  assert_true(check_fused_matches(c, g, &rc) >= 4); /* forward and backward groups */
  for (int i = 0; i < rc.nfeed; i++) nb_tensor_free(rc.val[i]);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

static void test_gradient_graphs(void **state) {
  (void)state;
  gradient_case(NB_F32, false);
  gradient_case(NB_F32, true);
  gradient_case(NB_F64, true);
}

static bool is_full(const nbop_meta *m) { return m->rank == 2 && m->shape[0] == N_ROWS && m->shape[1] == N_COLS; }

/* Full-shaped tensors the fused nodes of g write, and read (but constants: at the tests'
   sizes folding makes a gradient's broadcast ones one). */
static void count_full_traffic(const nb_graph *g, int *writes, int *reads) {
  *writes = *reads = 0;
  for (int32_t i = 0; i < g->nnodes; i++) {
    const nbgraph_node *nd = &g->nodes[i];
    if (nd->def != nbop_fused_def()) continue;
    for (int32_t k = 0; k < nd->nout; k++) *writes += is_full(&g->outs[nd->out0 + k].meta);
    for (int32_t k = 0; k < nd->nin; k++) {
      const nbgraph_edge *e = &g->edges[nd->in0 + k];
      const nbgraph_out *o = &g->outs[g->nodes[e->src].out0 + e->out];
      *reads += is_full(&o->meta) && !o->value;
    }
  }
}

/* LayerNorm's loss sum(layer_norm(x) w) and its gradients as a session plans them (every
   pass): besides the mean of x (a sum of a fed value: no group's), one fused pass reads x
   and w for the variance and the row sums the gradient needs, one reads them again for
   the centered gradient and the other sums, one writes dx from it: 2 full-shaped tensors
   written, 5 read (groups merge on the quotient graph where the fixed order kept them
   apart, and recompute the centered input, the scaled upstream gradient and the broadcast
   statistic rather than read them). dx, of row sums within one block, has the unfused
   graph's bits; all fetches have the same bits on 1 and 2 threads. */
static void test_layer_norm_gradient_passes(void **state) {
  (void)state;
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  unsigned seed = 11;
  run_case rc = {.nfeed = 4};
  const int64_t full[2] = {N_ROWS, N_COLS}, row[1] = {N_COLS};
  const int64_t *shapes[4] = {full, row, row, full};
  const int ranks[4] = {2, 1, 1, 2};
  for (int i = 0; i < 4; i++) {
    rc.feed[i] = nb_placeholder(c, NB_F32, ranks[i], shapes[i], NULL);
    rc.val[i] = random_values(e, NB_F32, ranks[i], shapes[i], &seed);
  }
  nb_tensor *loss = nb_sum(c, nb_mul(c, layer_norm(c, rc.feed[0], rc.feed[1], rc.feed[2]), rc.feed[3]), NULL, 0, false);
  nb_tensor *xs[3] = {rc.feed[0], rc.feed[1], rc.feed[2]};
  assert_int_equal(nb_gradients(c, &loss, 1, xs, 3, NULL, rc.fetch), NB_OK);
  rc.fetch[3] = loss;
  rc.nfetch = 4;
  nb_tensor *res[3][MAX_FETCH]; /* unfused on 2 threads, fused on 1, fused on 2 */
  int writes = -1, reads = -1;
  for (int k = 0; k < 3; k++) {
    nb_session_opts opts = nb_session_opts_default();
    opts.passes = k ? NB_PASS_ALL : NB_PASS_ALL & ~(unsigned)NB_PASS_FUSE;
    nb_session *s = nb_session_new_with_opts(g, &opts);
    assert_non_null(s);
    nb_session_set_threads(s, k == 1 ? 1 : 2);
    if (nb_run(s, rc.feed, rc.val, rc.nfeed, rc.fetch, rc.nfetch, res[k])) fail_msg("%s", nb_session_error(s));
    const nb_graph *planned;
    assert_int_equal(nb_session_planned_graph(s, rc.feed, rc.nfeed, rc.fetch, rc.nfetch, &planned), NB_OK);
    if (k == 1) count_full_traffic(planned, &writes, &reads);
    nb_session_free(s);
  }
  assert_same_tensors(res[0], res[1], 1);
  assert_same_tensors(res[1], res[2], rc.nfetch);
  assert_int_equal(writes, 2);
  assert_int_equal(reads, 5);
  for (int k = 0; k < 3; k++)
    for (int i = 0; i < rc.nfetch; i++) nb_tensor_free(res[k][i]);
  for (int i = 0; i < rc.nfeed; i++) nb_tensor_free(rc.val[i]);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* ---- outputs, names, errors ---------------------------------------------------------------- */

/* y1 = tanh(x) is fetched and used inside the group: one fused node with both outputs, and
   the members' names are still the graph's. */
static void test_multi_output(void **state) {
  gu_fixture *f = *state;
  unsigned seed = 3;
  run_case rc = {.nfeed = 1};
  const int64_t shape[2] = {N_ROWS, N_COLS};
  rc.feed[0] = nb_placeholder(f->c, NB_F32, 2, shape, "x");
  rc.val[0] = random_values(f->e, NB_F32, 2, shape, &seed);
  assert_int_equal(nb_name_next(f->c, "y1"), NB_OK);
  nb_tensor *y1 = nb_tanh(f->c, rc.feed[0]);
  assert_int_equal(nb_name_next(f->c, "y2"), NB_OK);
  nb_tensor *y2 = nb_mul(f->c, nb_square(f->c, y1), rc.feed[0]);
  rc.fetch[rc.nfetch++] = y2;
  rc.fetch[rc.nfetch++] = y1;
  assert_int_equal(check_fused_matches(f->c, f->g, &rc), 1);
  const nbgraph_node *fused = &f->g->nodes[f->g->nnodes - 1];
  assert_ptr_equal(fused->def, nbop_fused_def());
  assert_int_equal(fused->nout, 2);
  assert_int_equal(fused->nin, 1);
  assert_string_equal(nb_tensor_node_name(y1), "y1");
  assert_non_null(nb_graph_tensor_by_name(f->c, "y2"));
  nb_tensor_free(rc.val[0]);
}

/* Shapes known only at run time that do not broadcast: the fused node fails with the
   member's own message, naming the member node. */
static void test_error_names_member(void **state) {
  gu_fixture *f = *state;
  run_case rc = {.nfeed = 3};
  const int64_t open[2] = {-1, 4}, row[1] = {4};
  rc.feed[0] = nb_placeholder(f->c, NB_F64, 2, open, "x");
  rc.feed[1] = nb_placeholder(f->c, NB_F64, 1, row, "b");
  rc.feed[2] = nb_placeholder(f->c, NB_F64, 2, open, "z");
  assert_int_equal(nb_name_next(f->c, "scaled"), NB_OK);
  nb_tensor *s = nb_mul(f->c, nb_tanh(f->c, rc.feed[0]), rc.feed[1]);
  assert_int_equal(nb_name_next(f->c, "shifted"), NB_OK);
  rc.fetch[rc.nfetch++] = nb_exp(f->c, nb_add(f->c, s, rc.feed[2]));
  unsigned seed = 5;
  rc.val[0] = random_values(f->e, NB_F64, 2, TU_SHAPE(3, 4), &seed);
  rc.val[1] = random_values(f->e, NB_F64, 1, row, &seed);
  rc.val[2] = random_values(f->e, NB_F64, 2, TU_SHAPE(5, 4), &seed);
  nb_tensor *res[1];
  char plain[NBCORE_ERR_CAP], fused[NBCORE_ERR_CAP];
  assert_int_equal(run(f->g, &rc, rc.fetch, 1, res, plain), NB_SHAPE);
  assert_non_null(strstr(plain, "node 'shifted'"));
  int64_t keys[4] = {nbgraph_key_of(rc.feed[0]), nbgraph_key_of(rc.feed[1]), nbgraph_key_of(rc.feed[2]),
                     nbgraph_key_of(rc.fetch[0])};
  assert_int_equal(nbopt_fuse_elementwise(f->g, keys, 3, 1, true), NB_OK);
  assert_int_equal(count_fused(f->g), 1);
  nb_tensor *fetch = nbgraph_handle(f->c, f->g, nbgraph_key_node(keys[3]), nbgraph_key_out(keys[3]));
  assert_int_equal(run(f->g, &rc, &fetch, 1, res, fused), NB_SHAPE);
  assert_string_equal(fused, plain);
  for (int i = 0; i < 3; i++) nb_tensor_free(rc.val[i]);
}

/* Members whose run-time shapes differ (exp(x) stays [3, 1] inside a [3, 4] group) run one
   at a time: the same results. */
static void test_uneven_shapes_run_unfused(void **state) {
  gu_fixture *f = *state;
  unsigned seed = 9;
  run_case rc = {.nfeed = 2};
  const int64_t open[2] = {-1, -1};
  rc.feed[0] = nb_placeholder(f->c, NB_F32, 2, open, "x");
  rc.feed[1] = nb_placeholder(f->c, NB_F32, 2, open, "y");
  rc.val[0] = random_values(f->e, NB_F32, 2, TU_SHAPE(3, 1), &seed);
  rc.val[1] = random_values(f->e, NB_F32, 2, TU_SHAPE(1, 4), &seed);
  nb_tensor *ex = nb_exp(f->c, rc.feed[0]);
  rc.fetch[rc.nfetch++] = nb_tanh(f->c, nb_mul(f->c, ex, rc.feed[1]));
  rc.fetch[rc.nfetch++] = ex;
  assert_int_equal(check_fused_matches(f->c, f->g, &rc), 1);
  for (int i = 0; i < 2; i++) nb_tensor_free(rc.val[i]);
}

/* A fed tensor inside a chain splits it: the feed's value is what its consumers read. */
static void test_feed_inside_chain(void **state) {
  gu_fixture *f = *state;
  unsigned seed = 11;
  run_case rc = {.nfeed = 2};
  const int64_t shape[2] = {N_ROWS, N_COLS};
  rc.feed[0] = nb_placeholder(f->c, NB_F64, 2, shape, "x");
  nb_tensor *mid = nb_tanh(f->c, nb_neg(f->c, rc.feed[0]));
  rc.feed[1] = mid;
  rc.val[0] = random_values(f->e, NB_F64, 2, shape, &seed);
  rc.val[1] = random_values(f->e, NB_F64, 2, shape, &seed);
  rc.fetch[rc.nfetch++] = nb_sigmoid(f->c, nb_square(f->c, mid));
  assert_int_equal(check_fused_matches(f->c, f->g, &rc), 1);
  for (int i = 0; i < 2; i++) nb_tensor_free(rc.val[i]);
}

/* ---- groups on the quotient graph ------------------------------------------------------- */

/* Two chains that share their inputs and nothing else: one fused node reads x and w once
   for both. */
static void test_siblings_merge(void **state) {
  gu_fixture *f = *state;
  unsigned seed = 5;
  run_case rc = {.nfeed = 2};
  const int64_t shape[2] = {N_ROWS, N_COLS};
  for (int i = 0; i < 2; i++) {
    rc.feed[i] = nb_placeholder(f->c, NB_F32, 2, shape, NULL);
    rc.val[i] = random_values(f->e, NB_F32, 2, shape, &seed);
  }
  nb_tensor *x = rc.feed[0], *w = rc.feed[1];
  rc.fetch[rc.nfetch++] = nb_mul(f->c, nb_tanh(f->c, x), w);
  rc.fetch[rc.nfetch++] = nb_add(f->c, nb_exp(f->c, x), w);
  assert_int_equal(check_fused_matches(f->c, f->g, &rc), 1);
  const nbgraph_node *fused = &f->g->nodes[f->g->nnodes - 1];
  assert_int_equal(fused->nin, 2);
  assert_int_equal(fused->nout, 2);
  for (int i = 0; i < rc.nfeed; i++) nb_tensor_free(rc.val[i]);
}

/* a = producer(x), b = 2a and y = a (b wsq) + 1, fused and checked against the unfused
   graph: y's group reads a, and b through a MatMul, so one node for both would wait on
   itself (refused, and the graph runs). The fused nodes' outputs, and in *reads_fused
   whether one reads another's. */
static int producer_case(gu_fixture *f, nb_tensor *(*producer)(nb_ctx *, nb_tensor *), bool *reads_fused) {
  unsigned seed = 9;
  run_case rc = {.nfeed = 2};
  const int64_t shape[2] = {N_ROWS, N_COLS}, sq[2] = {N_COLS, N_COLS};
  rc.feed[0] = nb_placeholder(f->c, NB_F32, 2, shape, NULL);
  rc.feed[1] = nb_placeholder(f->c, NB_F32, 2, sq, NULL);
  rc.val[0] = random_values(f->e, NB_F32, 2, shape, &seed);
  rc.val[1] = random_values(f->e, NB_F32, 2, sq, &seed);
  nb_tensor *a = producer(f->c, rc.feed[0]), *b = nb_mul(f->c, a, nb_scalar(f->c, NB_F32, 2));
  nb_tensor *n = nb_matmul(f->c, b, rc.feed[1], false, false);
  rc.fetch[rc.nfetch++] = nb_add(f->c, nb_mul(f->c, a, n), nb_scalar(f->c, NB_F32, 1));
  assert_int_equal(check_fused_matches(f->c, f->g, &rc), 2);
  int outputs = 0;
  *reads_fused = false;
  for (int32_t i = 0; i < f->g->nnodes; i++) {
    const nbgraph_node *nd = &f->g->nodes[i];
    if (nd->def != nbop_fused_def()) continue;
    outputs += nd->nout;
    for (int32_t k = 0; k < nd->nin; k++)
      *reads_fused = *reads_fused || f->g->nodes[f->g->edges[nd->in0 + k].src].def == nbop_fused_def();
  }
  for (int i = 0; i < rc.nfeed; i++) nb_tensor_free(rc.val[i]);
  return outputs;
}

/* A square is cheaper than reading it back: y's group recomputes a = x^2 from x, so a's
   group writes b alone and no fused node reads another. */
static void test_cycle_refused_producer_recomputed(void **state) {
  bool reads_fused;
  assert_int_equal(producer_case(*state, nb_square, &reads_fused), 2);
  assert_false(reads_fused);
}

/* A transcendental producer is read back, not recomputed: y's group reads a = tanh(x),
   which a's group writes beside b. */
static void test_expensive_producer_read_back(void **state) {
  bool reads_fused;
  assert_int_equal(producer_case(*state, nb_tanh, &reads_fused), 3);
  assert_true(reads_fused);
}

/* Rows of 700 (one row per block): a column input, a scalar and a BroadcastTo of a column
   are read as one element per block by the binary members (stride 0), but a column that a
   unary member reads through a BroadcastTo, or whose BroadcastTo is fetched, is expanded:
   the same bits as unfused either way. */
static void test_single_values_per_block(void **state) {
  gu_fixture *f = *state;
  unsigned seed = 13;
  run_case rc = {.nfeed = 4};
  const int64_t shape[2] = {6, 700}, col[2] = {6, 1};
  const int64_t *shapes[4] = {shape, col, col, col};
  for (int i = 0; i < 4; i++) {
    rc.feed[i] = nb_placeholder(f->c, NB_F32, 2, shapes[i], NULL);
    rc.val[i] = random_values(f->e, NB_F32, 2, shapes[i], &seed);
  }
  nb_ctx *c = f->c;
  nb_tensor *x = rc.feed[0], *c1 = rc.feed[1], *c2 = rc.feed[2], *c3 = rc.feed[3];
  nb_tensor *a = nb_mul(c, nb_sub(c, x, c1), nb_broadcast_to(c, c1, shape, 2));
  nb_tensor *b = nb_mul(c, nb_tanh(c, nb_broadcast_to(c, c2, shape, 2)), nb_sub(c, x, c2));
  nb_tensor *b3 = nb_broadcast_to(c, c3, shape, 2);
  rc.fetch[rc.nfetch++] = nb_mul(c, nb_add(c, nb_add(c, a, b), nb_add(c, b3, x)), nb_scalar(c, NB_F32, 0.5));
  rc.fetch[rc.nfetch++] = b3;
  assert_int_equal(check_fused_matches(c, f->g, &rc), 1);
  for (int i = 0; i < rc.nfeed; i++) nb_tensor_free(rc.val[i]);
}

/* ---- reductions as epilogues -------------------------------------------------------------- */

enum { RED_ROWS, RED_COLS, RED_ALL };

/* The output element of a reduction of kind `kind` that element i of a value with inner
   elements per row adds to. */
static int64_t reduced_index(int kind, int64_t i, int64_t inner) {
  return kind == RED_ROWS ? i / inner : kind == RED_COLS ? i % inner : 0;
}

/* got (fused) against want (unfused), reductions of kind `kind` of the value y (the same
   bits fused and unfused): both sum the same terms in double in two orders, each within
   gamma_n S of the exact sum (S: the sum of the terms' magnitudes, n: their count), so they
   meet tu_check_sums's bound for sums of n terms in y's dtype; a Mean's bound is its sum's
   over the count. */
static void check_reduction(const nb_tensor *got, const nb_tensor *want, const nb_tensor *y, int kind, bool mean) {
  int64_t total = nb_num_elements(y), inner = nb_shape(y)[nb_rank(y) - 1], nout = nb_num_elements(want);
  int64_t n = total / nout;
  double *abs_sums = calloc((size_t)nout, sizeof *abs_sums), *want_v = malloc((size_t)nout * sizeof *want_v);
  assert_true(abs_sums && want_v);
  for (int64_t i = 0; i < total; i++) abs_sums[reduced_index(kind, i, inner)] += fabs(nb_item(y, i));
  for (int64_t j = 0; j < nout; j++) {
    want_v[j] = nb_item(want, j);
    if (mean) abs_sums[j] /= (double)n;
  }
  assert_int_equal(nb_num_elements(got), nout);
  tu_check_sums(got, want_v, nb_dtype_of(y), n, abs_sums);
  free(abs_sums);
  free(want_v);
}

/* y = tanh(x) b + x and its sums over the last dim (Sum), the leading dims (Mean), all dims
   (Sum) and the last dim kept (Mean): one fused node computes all five; y is bitwise the
   unfused y, the reductions within the bound of two orders of their sums, and one and two
   threads give the same bits. */
static void reduction_case(nb_dtype t, int rank, const int64_t *shape) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  unsigned seed = 17;
  run_case rc = {.nfeed = 2};
  rc.feed[0] = nb_placeholder(c, t, rank, shape, NULL);
  rc.feed[1] = nb_placeholder(c, t, 1, &shape[rank - 1], NULL);
  rc.val[0] = random_values(e, t, rank, shape, &seed);
  rc.val[1] = random_values(e, t, 1, &shape[rank - 1], &seed);
  nb_tensor *y = nb_add(c, nb_mul(c, nb_tanh(c, rc.feed[0]), rc.feed[1]), rc.feed[0]);
  int last = rank - 1, leading[NB_MAX_RANK];
  for (int d = 0; d < rank - 1; d++) leading[d] = d;
  rc.fetch[rc.nfetch++] = y;
  rc.fetch[rc.nfetch++] = nb_sum(c, y, &last, 1, false);
  rc.fetch[rc.nfetch++] = nb_mean(c, y, leading, rank - 1, false);
  rc.fetch[rc.nfetch++] = nb_sum(c, y, NULL, 0, false);
  rc.fetch[rc.nfetch++] = nb_mean(c, y, (const int[]){-1}, 1, true);
  const int kind[5] = {-1, RED_ROWS, RED_COLS, RED_ALL, RED_ROWS};
  assert_int_equal(nb_status(c), NB_OK);
  nb_tensor *want[MAX_FETCH], *got[2][MAX_FETCH], *fetch[MAX_FETCH];
  char err[NBCORE_ERR_CAP];
  if (run(g, &rc, rc.fetch, 2, want, err)) fail_msg("unfused run: %s", err);
  int64_t keys[2 + MAX_FETCH] = {nbgraph_key_of(rc.feed[0]), nbgraph_key_of(rc.feed[1])};
  for (int i = 0; i < rc.nfetch; i++) keys[2 + i] = nbgraph_key_of(rc.fetch[i]);
  assert_int_equal(nbopt_fuse_elementwise(g, keys, 2, rc.nfetch, true), NB_OK);
  assert_int_equal(count_fused(g), 1);
  assert_int_equal(g->nodes[g->nnodes - 1].nout, rc.nfetch);
  for (int i = 0; i < rc.nfetch; i++)
    fetch[i] = nbgraph_handle(c, g, nbgraph_key_node(keys[2 + i]), nbgraph_key_out(keys[2 + i]));
  for (int threads = 1; threads <= 2; threads++)
    if (run(g, &rc, fetch, threads, got[threads - 1], err)) fail_msg("fused run (%d threads): %s", threads, err);
  assert_same_tensors(want, got[0], 1);
  assert_same_tensors(got[0], got[1], rc.nfetch);
  for (int i = 1; i < rc.nfetch; i++) check_reduction(got[0][i], want[i], want[0], kind[i], i % 2 == 0);
  for (int i = 0; i < rc.nfetch; i++) nb_tensor_free(want[i]), nb_tensor_free(got[0][i]), nb_tensor_free(got[1][i]);
  for (int i = 0; i < rc.nfeed; i++) nb_tensor_free(rc.val[i]);
  nb_ctx_free(e);
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* Rows within a block, rows longer than a block (each summed in pieces), rank 3 (the
   leading dims together), and enough elements for two threads. */
static void test_reduction_epilogues(void **state) {
  (void)state;
  for (int dt = 0; dt < 2; dt++) {
    nb_dtype t = dt ? NB_F64 : NB_F32;
    reduction_case(t, 2, TU_SHAPE(N_ROWS, N_COLS));
    reduction_case(t, 2, TU_SHAPE(3, 5000));
    reduction_case(t, 3, TU_SHAPE(4, 3, N_COLS));
    reduction_case(t, 2, TU_SHAPE(700, 45));
  }
}

/* ---- session memory ---------------------------------------------------------------------- */

/* A training-style loop: the first run fills the block pool, later runs of the same feeds
   and fetches take nothing from malloc, fused or not, and hold no more at their peak than
   the first. */
static void test_no_allocation_after_first_run(void **state) {
  (void)state;
  for (int fused = 0; fused < 2; fused++) {
    nb_graph *g = nb_graph_new();
    nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
    unsigned seed = 13;
    const int64_t full[2] = {N_ROWS, N_COLS}, row[1] = {N_COLS};
    nb_tensor *feed[3] = {nb_placeholder(c, NB_F32, 2, full, NULL), nb_placeholder(c, NB_F32, 1, row, NULL),
                          nb_placeholder(c, NB_F32, 1, row, NULL)};
    nb_tensor *val[3] = {random_values(e, NB_F32, 2, full, &seed), random_values(e, NB_F32, 1, row, &seed),
                         random_values(e, NB_F32, 1, row, &seed)};
    nb_tensor *loss = nb_sum(c, nb_tanh(c, layer_norm(c, feed[0], feed[1], feed[2])), NULL, 0, false), *dxs[3];
    assert_int_equal(nb_gradients(c, &loss, 1, feed, 3, NULL, dxs), NB_OK);
    int64_t keys[6];
    for (int i = 0; i < 3; i++) keys[i] = nbgraph_key_of(feed[i]), keys[3 + i] = nbgraph_key_of(dxs[i]);
    if (fused) assert_int_equal(nbopt_fuse_elementwise(g, keys, 3, 3, true), NB_OK);
    for (int i = 0; i < 3; i++)
      dxs[i] = nbgraph_handle(c, g, nbgraph_key_node(keys[3 + i]), nbgraph_key_out(keys[3 + i]));
    nb_session *s = nb_session_new(g);
    nb_session_stats st;
    int64_t first_peak = 0;
    for (int run = 0; run < 3; run++) {
      nb_tensor *res[3];
      assert_int_equal(nb_run(s, feed, val, 3, dxs, 3, res), NB_OK);
      for (int i = 0; i < 3; i++) nb_tensor_free(res[i]);
      nb_session_get_stats(s, &st);
      assert_int_equal(st.runs, run + 1);
      if (run == 0) {
        assert_true(st.allocs_last_run > 0);
        first_peak = st.peak_bytes_last_run;
        assert_true(first_peak >= (int64_t)(N_ROWS * N_COLS * sizeof(float)));
      } else {
        assert_int_equal(st.allocs_last_run, 0);
        assert_true(st.peak_bytes_last_run <= first_peak);
      }
    }
    nb_session_free(s);
    for (int i = 0; i < 3; i++) nb_tensor_free(val[i]);
    nb_ctx_free(e);
    nb_ctx_free(c);
    nb_graph_free(g);
  }
}

/* steps_last_run counts the nodes a run's plan holds, a fused node once: sigmoid(tanh(-x) * 2)
   is four nodes unfused (the constant is known when built), one fused: three fewer. */
static void test_steps_counted(void **state) {
  (void)state;
  int64_t steps[2];
  for (int fused = 0; fused < 2; fused++) {
    nb_graph *g = nb_graph_new();
    nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
    unsigned seed = 3;
    const int64_t shape[2] = {N_ROWS, N_COLS};
    nb_tensor *x = nb_placeholder(c, NB_F32, 2, shape, NULL), *val = random_values(e, NB_F32, 2, shape, &seed);
    nb_tensor *y = nb_sigmoid(c, nb_mul(c, nb_tanh(c, nb_neg(c, x)), nb_scalar(c, NB_F32, 2))), *res;
    nb_session_opts opts = nb_session_opts_default();
    opts.passes = fused ? NB_PASS_ALL : NB_PASS_ALL & ~(unsigned)NB_PASS_FUSE;
    nb_session *s = nb_session_new_with_opts(g, &opts);
    assert_int_equal(nb_run(s, &x, &val, 1, &y, 1, &res), NB_OK);
    nb_session_stats st;
    nb_session_get_stats(s, &st);
    steps[fused] = st.steps_last_run;
    nb_tensor_free(res);
    nb_session_free(s);
    nb_tensor_free(val);
    nb_ctx_free(e);
    nb_ctx_free(c);
    nb_graph_free(g);
  }
  assert_int_equal(steps[0] - steps[1], 3);
}

/* ---- steps at once ------------------------------------------------------------------------ */

#define BRANCHES 4
#define INNER 256

/* y_k = x W_k, independent products, and their AddN: with two threads the products run two
   at a time, one thread each. Runs on two threads repeat bit for bit, and match one thread
   within the bound of two orders of a sum of INNER + BRANCHES positive float64 terms
   (every term is positive, so each element is its own sum of magnitudes). */
static void test_independent_steps_run_at_once(void **state) {
  gu_fixture *f = *state;
  unsigned seed = 17;
  const int64_t xs[2] = {64, INNER}, ws[2] = {INNER, INNER};
  nb_tensor *feed[BRANCHES + 1], *val[BRANCHES + 1], *fetch[BRANCHES + 1], *ys[BRANCHES];
  for (int i = 0; i <= BRANCHES; i++) {
    feed[i] = nb_placeholder(f->c, NB_F64, 2, i ? ws : xs, NULL);
    val[i] = nb_abs(f->e, random_values(f->e, NB_F64, 2, i ? ws : xs, &seed));
  }
  for (int k = 0; k < BRANCHES; k++) fetch[k] = ys[k] = nb_matmul(f->c, feed[0], feed[1 + k], false, false);
  fetch[BRANCHES] = nb_add_n(f->c, ys, BRANCHES);
  nb_tensor *one[BRANCHES + 1], *two[2][BRANCHES + 1];
  nb_session_stats st;
  nb_session_set_threads(f->s, 1);
  assert_int_equal(nb_run(f->s, feed, val, BRANCHES + 1, fetch, BRANCHES + 1, one), NB_OK);
  nb_session_get_stats(f->s, &st);
  assert_int_equal(st.concurrent_steps_last_run, 0);
  tu_two_threads_or_skip(f->e);
  nb_session_set_threads(f->s, 2);
  for (int r = 0; r < 2; r++) {
    assert_int_equal(nb_run(f->s, feed, val, BRANCHES + 1, fetch, BRANCHES + 1, two[r]), NB_OK);
    nb_session_get_stats(f->s, &st);
    assert_int_equal(st.concurrent_steps_last_run, BRANCHES);
  }
  assert_same_tensors(two[0], two[1], BRANCHES + 1);
  double rel = 2 * tu_gamma(NB_F64, INNER + BRANCHES);
  for (int i = 0; i <= BRANCHES; i++)
    for (int64_t j = 0; j < nb_num_elements(one[i]); j++) {
      double a = nb_item(one[i], j), b = nb_item(two[0][i], j);
      if (!(fabs(a - b) <= rel * a))
        fail_msg("fetch %d element %lld: 1 thread %.17g, 2 threads %.17g", i, (long long)j, a, b);
    }
  for (int i = 0; i <= BRANCHES; i++) {
    nb_tensor_free(one[i]);
    nb_tensor_free(two[0][i]);
    nb_tensor_free(two[1][i]);
    nb_tensor_free(val[i]);
  }
}

/* A failure in either step of a pair (an integer division by zero beside an elementwise
   product of the same size: work balanced enough to pair) is the run's error, naming its
   node, whichever context ran it. */
static void test_error_in_concurrent_step(void **state) {
  gu_fixture *f = *state;
  const int64_t shape[2] = {128, 128};
  unsigned seed = 19;
  nb_tensor *feed[4], *val[4], *res[2];
  for (int i = 0; i < 4; i++) feed[i] = nb_placeholder(f->c, i < 2 ? NB_F64 : NB_I32, 2, shape, NULL);
  for (int i = 0; i < 2; i++) val[i] = random_values(f->e, NB_F64, 2, shape, &seed);
  val[2] = nb_cast(f->e, random_values(f->e, NB_F64, 2, shape, &seed), NB_I32);
  val[3] = nb_cast(f->e, random_values(f->e, NB_F64, 2, shape, &seed), NB_I32); /* (-1, 1) truncates to 0 */
  nb_tensor *product = nb_mul(f->c, feed[0], feed[1]);
  assert_int_equal(nb_name_next(f->c, "bad_quotient"), NB_OK);
  nb_tensor *quotient = nb_real_div(f->c, feed[2], feed[3]);
  tu_two_threads_or_skip(f->e);
  nb_session_set_threads(f->s, 2);
  nb_tensor *orders[2][2] = {{product, quotient}, {quotient, product}};
  for (int o = 0; o < 2; o++) {
    assert_int_equal(nb_run(f->s, feed, val, 4, orders[o], 2, res), NB_INVALID);
    assert_non_null(strstr(nb_session_error(f->s), "node 'bad_quotient'"));
    assert_non_null(strstr(nb_session_error(f->s), "Integer division by zero"));
    nb_session_stats st;
    nb_session_get_stats(f->s, &st);
    assert_int_equal(st.concurrent_steps_last_run, 2);
  }
  for (int i = 0; i < 4; i++) nb_tensor_free(val[i]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_dags),
      cmocka_unit_test(test_random_dags_with_opaque_nodes),
      cmocka_unit_test(test_gradient_graphs),
      cmocka_unit_test(test_layer_norm_gradient_passes),
      cmocka_unit_test_setup_teardown(test_multi_output, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_error_names_member, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_uneven_shapes_run_unfused, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_feed_inside_chain, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_siblings_merge, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_cycle_refused_producer_recomputed, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_expensive_producer_read_back, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_single_values_per_block, gu_setup, gu_teardown),
      cmocka_unit_test(test_reduction_epilogues),
      cmocka_unit_test(test_no_allocation_after_first_run),
      cmocka_unit_test(test_steps_counted),
      cmocka_unit_test_setup_teardown(test_independent_steps_run_at_once, gu_setup, gu_teardown),
      cmocka_unit_test_setup_teardown(test_error_in_concurrent_step, gu_setup, gu_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
