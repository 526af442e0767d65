/* bench/rnn: a tanh RNN, h_t = tanh(x_t W_ih + h_{t-1} W_hh + b), h_0 = 0, hidden 256,
   input 64, 100 steps, batch 32, float32, loss = mean(h_T^2); one forward + backward to
   W_ih, W_hh and b, median of RUNS runs after a warm-up, on 1 and 2 threads. Each round
   runs every measurement at every thread count in turn, so all of them see the machine
   alike however its speed moves:
     nb_rnn_graph   ms   nb_while in a graph, nb_gradients (the while_v2 gradient loop), one nb_run
     nb_rnn_eager   ms   nb_while in an eager context under a tape, nb_tape_gradient
     nb_rnn_accumulators  what the graph loop stacks for its gradient: count, and bytes
                          held after a run (stacks sharing one block count it once)
     nb_rnn_graph_memory  the graph session's last run: data blocks it took from malloc
                          and its peak block bytes (nb_session_get_stats)
     nb_rnn_gemms   ms   the products alone: per step x_t W_ih and h W_hh forward, and
                          x_t^T dz, h^T dz (accumulated) and dz W_hh^T backward, through the
                          library's GEMM back to back: the floor it puts under both modes
     nb_rnn_scaling  speedup_over_1  a mode's (or the products') time on 1 thread over its
                          time on T, the median of the ratios taken within a round;
                          peak_speedup: T threads' FMA rate over one's in the same rounds
                          (bench_peak_scaling_now), the most threads could give then
   Each timing line names the float32 GEMM's backend and kernel.
   bench/peers/rnn.py times the same computation in PyTorch, TensorFlow and JAX. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "../src/graph/graph.h" /* the While node's accumulators and the blocks behind them */
#include "../src/ops/blas.h"    /* the float32 GEMM's backend and kernel */
#include "peak.h"
#include "products.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define HIDDEN 256
#define INPUT 64
#define SEQ 100
#define BATCH 32
#define RUNS 9
#define MAX_THREADS 2

static const char *const MODES[3] = {"graph", "eager", "gemms"};

typedef struct rnn {
  nb_tensor *wih, *whh, *b, *xs;
} rnn;

static nb_code step_cond(nb_ctx *c, nb_tensor *const *v, nb_tensor **pred, void *user) {
  (void)user;
  *pred = nb_less(c, v[0], nb_scalar(c, NB_I64, SEQ));
  return nb_status(c);
}

/* vars: [t, h] */
static nb_code step_body(nb_ctx *c, nb_tensor *const *v, nb_tensor **next, void *user) {
  rnn *r = user;
  nb_tensor *xt = nb_gather(c, r->xs, v[0], 0, 0);
  nb_tensor *z =
      nb_add(c, nb_add(c, nb_matmul(c, xt, r->wih, false, false), nb_matmul(c, v[1], r->whh, false, false)), r->b);
  next[0] = nb_add(c, v[0], nb_scalar(c, NB_I64, 1));
  next[1] = nb_tanh(c, z);
  return nb_status(c);
}

static nb_tensor *loss_of(nb_ctx *c, rnn *r, nb_tensor **final_h) {
  int64_t hs[2] = {BATCH, HIDDEN};
  nb_tensor *vars[2] = {nb_scalar(c, NB_I64, 0), nb_tensor_from(c, NB_F32, 2, hs, NULL)}, *out[2] = {NULL, NULL};
  nb_while(c, step_cond, step_body, r, vars, 2, -1, out);
  if (final_h) *final_h = out[1];
  return nb_mean(c, nb_square(c, out[1]), NULL, 0, false);
}

/* The bytes of the blocks behind the accumulators, each block counted once (from the
   lowest to the highest byte its views cover). */
static long long stacked_bytes(nb_tensor *const *acc, int n) {
  long long total = 0;
  for (int i = 0; i < n; i++) {
    const nbcore_buffer *block = acc[i]->buf->size_class == NBCORE_VIEW_CLASS ? acc[i]->buf->next : acc[i]->buf;
    bool seen = false;
    for (int j = 0; j < i && !seen; j++)
      seen = (acc[j]->buf->size_class == NBCORE_VIEW_CLASS ? acc[j]->buf->next : acc[j]->buf) == block;
    if (seen) continue;
    const char *lo = NULL, *hi = NULL;
    for (int j = i; j < n; j++) {
      const nbcore_buffer *b = acc[j]->buf;
      if ((b->size_class == NBCORE_VIEW_CLASS ? b->next : b) != block) continue;
      const char *start = b->data, *end = start + nb_num_elements(acc[j]) * (int64_t)nb_dtype_size(nb_dtype_of(acc[j]));
      if (!lo || start < lo) lo = start;
      if (!hi || end > hi) hi = end;
    }
    total += hi - lo;
  }
  return total;
}

static double graph_run(nb_session *s, nb_tensor **feeds, nb_tensor **vals, nb_tensor **fetch, int nfetch) {
  nb_tensor *res[4];
  double t0 = bench_now();
  if (nb_run(s, feeds, vals, 4, fetch, nfetch, res)) {
    fprintf(stderr, "nb_run: %s\n", nb_session_error(s));
    exit(1);
  }
  double dt = bench_now() - t0;
  for (int i = 0; i < nfetch; i++) nb_tensor_free(res[i]);
  return dt;
}

static double eager_step(nb_ctx *c, rnn *r) {
  double t0 = bench_now();
  nb_scope_begin(c);
  nb_tape *t = nb_tape_begin(c, 0);
  nb_tensor *w[3] = {r->wih, r->whh, r->b}, *g[3];
  for (int i = 0; i < 3; i++) nb_tape_watch(t, w[i]);
  nb_tensor *loss = loss_of(c, r, NULL);
  if (nb_tape_gradient(t, &loss, 1, w, 3, NULL, g)) {
    fprintf(stderr, "tape: %s\n", nb_error(c));
    exit(1);
  }
  nb_tape_end(t);
  nb_scope_end(c, NULL, 0);
  return bench_now() - t0;
}

/* One forward and backward pass's products. */
static void rnn_products(const void *user, const float *a, const float *b, float *c) {
  (void)user;
  for (int t = 0; t < SEQ; t++) {
    nbop_gemm(NB_F32, false, false, BATCH, HIDDEN, INPUT, a, INPUT, b, HIDDEN, 0, c, HIDDEN);   /* x_t W_ih */
    nbop_gemm(NB_F32, false, false, BATCH, HIDDEN, HIDDEN, a, HIDDEN, b, HIDDEN, 1, c, HIDDEN); /* + h W_hh */
  }
  for (int t = 0; t < SEQ; t++) {
    nbop_gemm(NB_F32, true, false, INPUT, HIDDEN, BATCH, a, INPUT, b, HIDDEN, 1, c, HIDDEN);   /* dW_ih += x_t^T dz */
    nbop_gemm(NB_F32, true, false, HIDDEN, HIDDEN, BATCH, a, HIDDEN, b, HIDDEN, 1, c, HIDDEN); /* dW_hh += h^T dz */
    nbop_gemm(NB_F32, false, true, BATCH, HIDDEN, HIDDEN, b, HIDDEN, a, HIDDEN, 0, c, HIDDEN); /* dh = dz W_hh^T */
  }
}

static void print_time(const char *mode, int threads, double seconds) {
  printf("name=nb_rnn_%s hidden=%d input=%d seq=%d batch=%d threads=%d backend=%s kernel=%s ms_median=%.2f\n", mode,
         HIDDEN, INPUT, SEQ, BATCH, threads, nbop_gemm_backend_name(NB_F32), nbop_gemm_kernel_name(NB_F32),
         1e3 * seconds);
}

/* What one turn runs: the graph loop, the eager loop and the products alone. */
typedef struct rnn_runs {
  nb_session *s;
  nb_ctx *e;
  rnn *ev;
  nb_tensor **feeds, **vals, **fetch;
  bench_products prod;
} rnn_runs;

/* Every thread count 1..max_threads takes its turn each round, RUNS rounds after a warm-up
   one; a turn times the three in order, and beside the turns of T > 1 threads the FMA
   peak's scaling is measured. t[T - 1][mode][round] in seconds. */
static void time_rounds(rnn_runs *x, int max_threads, double t[MAX_THREADS][3][RUNS],
                        double peak_speedup[MAX_THREADS][RUNS]) {
  for (int r = -1; r < RUNS; r++)
    for (int threads = 1; threads <= max_threads; threads++) {
      if (r >= 0 && threads > 1) peak_speedup[threads - 1][r] = bench_peak_scaling_now(threads);
      nb_session_set_threads(x->s, threads);
      nb_ctx_set_threads(x->e, threads);
      double graph = graph_run(x->s, x->feeds, x->vals, x->fetch, 4);
      double eager = eager_step(x->e, x->ev);
      double gemms = bench_products_time(&x->prod, threads, 1);
      if (r < 0) continue;
      t[threads - 1][0][r] = graph;
      t[threads - 1][1][r] = eager;
      t[threads - 1][2][r] = gemms;
    }
}

/* The graph session's block accounting after one more run on `threads` threads. */
static void print_memory(nb_session *s, nb_tensor **feeds, nb_tensor **vals, nb_tensor **fetch, int threads) {
  nb_session_stats st;
  nb_session_set_threads(s, threads);
  graph_run(s, feeds, vals, fetch, 4);
  nb_session_get_stats(s, &st);
  printf("name=nb_rnn_graph_memory threads=%d allocs_per_step=%lld peak_mib=%.2f\n", threads,
         (long long)st.allocs_last_run, (double)st.peak_bytes_last_run / (1 << 20));
}

/* Each mode's one-thread time over its T-thread time, round by round, and the peak's. */
static void print_scaling(int max_threads, double t[MAX_THREADS][3][RUNS], double peak_speedup[MAX_THREADS][RUNS]) {
  for (int threads = 2; threads <= max_threads; threads++)
    for (int m = 0; m < 3; m++)
      printf("name=nb_rnn_scaling mode=%s threads=%d speedup_over_1=%.2f peak_speedup=%.2f\n", MODES[m], threads,
             bench_ratio_median(t[0][m], t[threads - 1][m], RUNS), bench_median(peak_speedup[threads - 1], RUNS));
}

int main(int argc, char **argv) {
  int max_threads = argc > 1 ? atoi(argv[1]) : MAX_THREADS; /* rnn [max threads, 1 or 2] */
  srand(1);
  nb_ctx *e = nb_eager_new();
  int64_t swih[2] = {INPUT, HIDDEN}, swhh[2] = {HIDDEN, HIDDEN}, sb[1] = {HIDDEN}, sxs[3] = {SEQ, BATCH, INPUT};
  rnn ev = {bench_uniform(e, 2, swih, 0.125f), bench_uniform(e, 2, swhh, 0.0625f), bench_uniform(e, 1, sb, 0.0625f),
            bench_uniform(e, 3, sxs, 1)};
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  rnn gv = {nb_placeholder(c, NB_F32, 2, swih, "w_ih"), nb_placeholder(c, NB_F32, 2, swhh, "w_hh"),
            nb_placeholder(c, NB_F32, 1, sb, "b"), nb_placeholder(c, NB_F32, 3, sxs, "xs")};
  nb_tensor *h, *loss = loss_of(c, &gv, &h), *grads[3], *w[3] = {gv.wih, gv.whh, gv.b};
  if (nb_gradients(c, &loss, 1, w, 3, NULL, grads)) {
    fprintf(stderr, "nb_gradients: %s\n", nb_error(c));
    return 1;
  }
  const nbgraph_node *loop = &g->nodes[h->node];
  int nacc = loop->nout - loop->nin;
  nb_tensor *acc[8], *acc_vals[8];
  if (nacc > 8) return 1;
  for (int a = 0; a < nacc; a++) acc[a] = nbgraph_handle(c, g, h->node, loop->nin + a);
  nb_session *s = nb_session_new(g);
  nb_tensor *feeds[4] = {gv.wih, gv.whh, gv.b, gv.xs}, *vals[4] = {ev.wih, ev.whh, ev.b, ev.xs};
  if (nb_run(s, feeds, vals, 4, acc, nacc, acc_vals)) {
    fprintf(stderr, "nb_run: %s\n", nb_session_error(s));
    return 1;
  }
  printf("name=nb_rnn_accumulators count=%d bytes=%lld\n", nacc, stacked_bytes(acc_vals, nacc));
  for (int a = 0; a < nacc; a++) nb_tensor_free(acc_vals[a]);
  nb_tensor *fetch[4] = {loss, grads[0], grads[1], grads[2]};
  if (max_threads < 1 || max_threads > MAX_THREADS) max_threads = MAX_THREADS;
  rnn_runs x = {s, e, &ev, feeds, vals, fetch, {0}};
  if (!bench_products_init(&x.prod, rnn_products, NULL, HIDDEN * HIDDEN)) {
    fprintf(stderr, "rnn: out of memory for the products' operands\n");
    return 1;
  }
  double t[MAX_THREADS][3][RUNS], peak_speedup[MAX_THREADS][RUNS];
  time_rounds(&x, max_threads, t, peak_speedup);
  bench_products_free(&x.prod);
  for (int threads = 1; threads <= max_threads; threads++) {
    for (int m = 0; m < 3; m++) print_time(MODES[m], threads, bench_median(t[threads - 1][m], RUNS));
    print_memory(s, feeds, vals, fetch, threads);
  }
  print_scaling(max_threads, t, peak_speedup);
  nb_session_free(s);
  nb_ctx_free(c);
  nb_graph_free(g);
  nb_ctx_free(e);
  return 0;
}
