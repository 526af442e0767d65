/* bench/fusion: elementwise fusion on and off in one run (sessions running the optimizer's
   pipeline with and without NB_PASS_FUSE), 1 and 2 threads, float32, ms per nb_run (median
   of RUNS after a warm-up):
     nb_fusion_layernorm  layer norm of 1024 x 1024 over the last dim, (x - mean) rsqrt(var
                          + eps) gamma + beta, and loss = sum(y w): forward and the gradients
                          to x, gamma and beta
     nb_fusion_gelu_mlp   x 1024x256 -> 1024 -> 256, GELU as tf.nn.gelu(approximate=True)
                          composes it (0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))),
                          loss = mean((y - t)^2): forward and the gradients to every weight
   Each line has the nodes a run's plan holds (nodes=: nb_session_stats.steps_last_run, a fused
   node counting one), and the speedup of fused over unfused at that thread count; for the
   GELU MLP, nb_fusion_gelu_mlp_gemms times its products alone (the library's GEMM, back to
   back) and max_speedup, the unfused time over that: what fusion would give if every
   elementwise op and reduction cost nothing. The unfused run, the fused one and the
   products take turns each round, and both ratios are medians of per-round ratios. A
   _memory line per session gives the data blocks a step took from malloc after the first
   (allocs_per_step), those of the first (allocs_first: every run after it took as many as
   the last), and the last step's peak block bytes (nb_session_get_stats). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "products.h" /* the GELU MLP's products alone */

#include <math.h>
#include <string.h>

#define RUNS 15
#define MAX_IO 8

typedef struct workload {
  const char *name;
  bench_products_fn products; /* its products alone, or NULL */
  nb_graph *g;
  nb_ctx *c;
  nb_tensor *feed[MAX_IO], *val[MAX_IO], *fetch[MAX_IO];
  int nfeed, nfetch;
} workload;

static nb_tensor *input(workload *w, nb_ctx *e, int rank, const int64_t *shape, float scale) {
  w->val[w->nfeed] = bench_uniform(e, rank, shape, scale);
  return w->feed[w->nfeed++] = nb_placeholder(w->c, NB_F32, rank, shape, NULL);
}

static void layernorm(workload *w, nb_ctx *e) {
  nb_ctx *c = w->c;
  const int64_t full[2] = {1024, 1024}, row[1] = {1024};
  nb_tensor *x = input(w, e, 2, full, 1), *gamma = input(w, e, 1, row, 1), *beta = input(w, e, 1, row, 1);
  nb_tensor *wt = input(w, e, 2, full, 1);
  int axis = 1;
  nb_tensor *xc = nb_sub(c, x, nb_mean(c, x, &axis, 1, true));
  nb_tensor *var = nb_mean(c, nb_square(c, xc), &axis, 1, true);
  nb_tensor *y =
      nb_add(c, nb_mul(c, nb_mul(c, xc, nb_rsqrt(c, nb_add(c, var, nb_scalar(c, NB_F32, 1e-5)))), gamma), beta);
  nb_tensor *loss = nb_sum(c, nb_mul(c, y, wt), NULL, 0, false);
  nb_tensor *xs[3] = {x, gamma, beta};
  nb_gradients(c, &loss, 1, xs, 3, NULL, w->fetch);
  w->fetch[3] = loss;
  w->nfetch = 4;
}

/* The GELU MLP step's products: the forward ones, the weight gradients and the hidden
   layer's input gradient. */
static void gelu_mlp_products(const void *user, const float *a, const float *b, float *c) {
  (void)user;
  nbop_gemm(NB_F32, false, false, 1024, 1024, 256, a, 256, b, 1024, 0, c, 1024); /* x w1 */
  nbop_gemm(NB_F32, false, false, 1024, 256, 1024, a, 1024, b, 256, 0, c, 256);  /* h w2 */
  nbop_gemm(NB_F32, true, false, 1024, 256, 1024, a, 1024, b, 256, 0, c, 256);   /* h^T dy */
  nbop_gemm(NB_F32, false, true, 1024, 1024, 256, a, 256, b, 256, 0, c, 1024);   /* dy w2^T */
  nbop_gemm(NB_F32, true, false, 256, 1024, 1024, a, 256, b, 1024, 0, c, 1024);  /* x^T dz */
}

static nb_tensor *gelu_composed(nb_ctx *c, nb_tensor *x) {
  nb_tensor *cube = nb_mul(c, nb_mul(c, x, x), x);
  nb_tensor *u = nb_mul(c, nb_scalar(c, NB_F32, 0.7978845608028654),
                        nb_add(c, x, nb_mul(c, nb_scalar(c, NB_F32, 0.044715), cube)));
  return nb_mul(c, nb_mul(c, nb_scalar(c, NB_F32, 0.5), x), nb_add(c, nb_scalar(c, NB_F32, 1), nb_tanh(c, u)));
}

static void gelu_mlp(workload *w, nb_ctx *e) {
  nb_ctx *c = w->c;
  w->products = gelu_mlp_products;
  const int64_t xs_[2] = {1024, 256}, w1s[2] = {256, 1024}, b1s[1] = {1024}, w2s[2] = {1024, 256}, b2s[1] = {256};
  nb_tensor *x = input(w, e, 2, xs_, 1), *t = input(w, e, 2, xs_, 1);
  nb_tensor *w1 = input(w, e, 2, w1s, 0.06f), *b1 = input(w, e, 1, b1s, 0.1f);
  nb_tensor *w2 = input(w, e, 2, w2s, 0.03f), *b2 = input(w, e, 1, b2s, 0.1f);
  nb_tensor *h = gelu_composed(c, nb_add(c, nb_matmul(c, x, w1, false, false), b1));
  nb_tensor *y = nb_add(c, nb_matmul(c, h, w2, false, false), b2);
  nb_tensor *loss = nb_mean(c, nb_square(c, nb_sub(c, y, t)), NULL, 0, false);
  nb_tensor *params[4] = {w1, b1, w2, b2};
  nb_gradients(c, &loss, 1, params, 4, NULL, w->fetch);
  w->fetch[4] = loss;
  w->nfetch = 5;
}

/* One run of w's fetches on s, in ms. */
static double time_run(workload *w, nb_session *s) {
  nb_tensor *res[MAX_IO];
  double t0 = bench_now();
  if (nb_run(s, w->feed, w->val, w->nfeed, w->fetch, w->nfetch, res)) {
    fprintf(stderr, "%s: %s\n", w->name, nb_session_error(s));
    exit(1);
  }
  double ms = 1e3 * (bench_now() - t0);
  for (int i = 0; i < w->nfetch; i++) nb_tensor_free(res[i]);
  return ms;
}

/* What time_all measures: the unfused and fused sessions' and the products' median ms per
   run (products NAN where the workload has none), and the medians of the ratios taken
   within each round: unfused over fused, unfused over the products. */
typedef struct timings {
  double ms[3], speedup, max_speedup;
} timings;

/* The unfused session, the fused one and the workload's products alone take turns, RUNS
   rounds after a warm-up of each: a loaded machine slows the three alike, and a ratio
   taken within a round leaves out how the machine's speed moved between rounds. */
static timings time_all(workload *w, nb_session *const *s, int threads) {
  double t[3][RUNS];
  bench_products prod = {0};
  bool with_products = w->products && bench_products_init(&prod, w->products, NULL, 1024 * 1024);
  int kinds = with_products ? 3 : 2;
  for (int r = -1; r < RUNS; r++)
    for (int f = 0; f < kinds; f++) {
      double one = f < 2 ? time_run(w, s[f]) : 1e3 * bench_products_time(&prod, threads, 1);
      if (r >= 0) t[f][r] = one;
    }
  timings m = {{bench_median(t[0], RUNS), bench_median(t[1], RUNS), with_products ? bench_median(t[2], RUNS) : NAN},
               bench_ratio_median(t[0], t[1], RUNS),
               with_products ? bench_ratio_median(t[0], t[2], RUNS) : NAN};
  if (with_products) bench_products_free(&prod);
  return m;
}

/* The last run's block accounting (every run after the first: the pool holds each size). */
static void print_memory(const char *name, int fused, int threads, const nb_session *s) {
  nb_session_stats st;
  nb_session_get_stats(s, &st);
  printf(
      "name=nb_fusion_%s_memory fusion=%s threads=%d runs=%lld allocs_per_step=%lld allocs_first=%lld "
      "peak_mib=%.1f\n",
      name, fused ? "on" : "off", threads, (long long)st.runs, (long long)st.allocs_last_run,
      (long long)(st.allocs_total - st.allocs_last_run * (st.runs - 1)), (double)st.peak_bytes_last_run / (1 << 20));
}

/* The optimizer's passes with fusion on or off. */
static nb_session_opts passes(int fused) {
  nb_session_opts o = nb_session_opts_default();
  o.passes = fused ? NB_PASS_ALL : NB_PASS_ALL & ~(unsigned)NB_PASS_FUSE;
  return o;
}

/* Nodes the last run of s computed. */
static long long nodes_run(const nb_session *s) {
  nb_session_stats st;
  nb_session_get_stats(s, &st);
  return (long long)st.steps_last_run;
}

static void bench(const char *name, void (*build)(workload *, nb_ctx *), int max_threads) {
  workload w = {.name = name};
  nb_ctx *e = nb_eager_new();
  srand(1);
  w.g = nb_graph_new();
  w.c = nb_graph_ctx_new(w.g);
  build(&w, e);
  if (nb_status(w.c)) {
    fprintf(stderr, "%s: %s\n", name, nb_error(w.c));
    exit(1);
  }
  nb_session_opts opts[2] = {passes(0), passes(1)};
  for (int threads = 1; threads <= max_threads; threads++) {
    nb_session *s[2];
    for (int f = 0; f < 2; f++) {
      s[f] = nb_session_new_with_opts(w.g, &opts[f]);
      nb_session_set_threads(s[f], threads);
    }
    timings m = time_all(&w, s, threads);
    for (int f = 0; f < 2; f++)
      printf("name=nb_fusion_%s fusion=%s threads=%d ms=%.2f nodes=%lld%s", name, f ? "on" : "off", threads, m.ms[f],
             nodes_run(s[f]), f ? "" : "\n");
    printf(" speedup=%.2f\n", m.speedup);
    if (w.products)
      printf("name=nb_fusion_%s_gemms threads=%d ms=%.2f max_speedup=%.2f\n", name, threads, m.ms[2], m.max_speedup);
    for (int f = 0; f < 2; f++) {
      print_memory(name, f, threads, s[f]);
      nb_session_free(s[f]);
    }
  }
  for (int i = 0; i < w.nfeed; i++) nb_tensor_free(w.val[i]);
  nb_ctx_free(w.c);
  nb_graph_free(w.g);
  nb_ctx_free(e);
}

int main(int argc, char **argv) {
  int max_threads = argc > 1 ? atoi(argv[1]) : 2;
  bench_print_build_info();
  bench("layernorm", layernorm, max_threads);
  bench("gelu_mlp", gelu_mlp, max_threads);
  return 0;
}
