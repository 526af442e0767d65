/* bench/forward: forward mode and checkpointed gradients in graph mode (one nb_run per
   call), float32, beside bench/peers/forward.py (torch.func, TensorFlow, JAX) on the same
   workloads:
     jvp   MLP 784-512-512-10 (ReLU), batch 128, loss the mean sparse softmax
           cross-entropy: the loss alone (fwd_ms) against the loss and its JVP along random
           tangents of every parameter (nb_jvp, jvp_ms); ratio = jvp_ms / fwd_ms
     hvp   the same loss: its gradient (nb_gradients, grad_ms) against a Hessian-vector
           product, forward over reverse (nb_hvp, hvp_ms); ratio = hvp_ms / grad_ms
     ckpt  64 layers h = tanh(h W_i) of width 1024, batch 64: the gradient of sum(h^2) with
           respect to the input alone (wrt=input: the backward pass holds activations and
           little else, the memory checkpointing saves; recomputing costs about one
           forward pass on top of two) and to every W_i too (wrt=weights+input: the usual
           gradient, one forward pass on top of three; each W_i's 4 MB gradient summed as
           soon as made, so none outlives its step), plain and with checkpoint_segments =
           NB_CHECKPOINT_SQRT; grad_ms (median of 3 after a warm-up), and memory two ways:
             pool_mb    the most bytes of blocks the gradient run held at once
                        (nb_session_get_stats' peak_bytes_last_run: activations, gradient
                        temporaries, the forward pass's own, and the results being made)
             result_mb  the largest gradient result (one W_i's 4 MB, or the input's): a
                        result must exist whatever the checkpointing, and this bench sums
                        each as made, so at least one is held at a time (a training step
                        that kept all 64 would hold 256 MB of results on top)
             act_mb     pool_mb - result_mb: what checkpointing can save
             peak_mb    the peak resident set above the one before the first run, and
             over_fwd_mb  above the forward pass's own peak (ru_maxrss: includes the
                        allocator's and the kernels' scratch, as the peers' figures do),
           each configuration in a process of its own
   flop_ratio beside each ratio: the ratio of GEMM FLOPs (2 m k n per product, from the
   layer sizes; elementwise ops and softmax left out), the cost the ratio cannot go below:
     jvp   a MatMul whose operands both carry tangents has tangent dA B + A dB, two more
           products; the first layer's input has none (one more)
     hvp   forward over reverse differentiates each product of the gradient the same way
     ckpt  the plain gradient's products plus one more forward pass (recomputation)
   Lines: name=forward_jvp|forward_hvp|forward_ckpt ... threads=N metric=value, threads 1
   and 2, medians of runs after a warm-up (bench_per_call).
   Usage: forward [jvp|hvp|ckpt|all] [threads] */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, fork */
#include <nabla.h>

#include "benchutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUNS 5
#define MIN_SECONDS 1.0
#define MLP_BATCH 128
#define DEEP_LAYERS 64
#define DEEP_WIDTH 1024
#define DEEP_BATCH 64
#define DEEP_RUNS 3 /* timed gradients per configuration (seconds each): the median */

/* A session, its feeds and the tensors one call fetches. */
typedef struct call {
  nb_session *s;
  nb_tensor *const *feed, *const *vals;
  int nfeed, nfetch;
  nb_tensor *fetch[8];
} call;

static void run_call(nb_ctx *c, const void *arg) {
  (void)c;
  const call *k = arg;
  nb_tensor *out[8];
  if (nb_run(k->s, k->feed, k->vals, k->nfeed, k->fetch, k->nfetch, out) != NB_OK) {
    fprintf(stderr, "forward: %s\n", nb_session_error(k->s));
    exit(1);
  }
  for (int i = 0; i < k->nfetch; i++) nb_tensor_free(out[i]);
}

static double ms_per_call(nb_ctx *e, const call *k) { return 1e3 * bench_per_call(e, run_call, k, RUNS, MIN_SECONDS); }

/* ---- the MLP ---------------------------------------------------------------------------- */

typedef struct mlp {
  nb_graph *g;
  nb_ctx *c;
  nb_tensor *p[6], *t[6], *x, *labels, *loss;
} mlp;

static nb_tensor *uniform(nb_ctx *c, int rank, const int64_t *shape, double limit, int64_t seed) {
  nb_tensor *u = nb_stateless_random_uniform(c, shape, rank, (const int64_t[]){seed, 1}, NB_F32);
  return nb_sub(c, nb_mul(c, u, nb_scalar(c, NB_F32, 2 * limit)), nb_scalar(c, NB_F32, limit));
}

/* Glorot-uniform weights and zero biases as constants, random tangents, synthetic data. */
static const int64_t mlp_dims[4] = {784, 512, 512, 10};

static void make_mlp(mlp *m) {
  const int64_t *dims = mlp_dims;
  m->g = nb_graph_new();
  m->c = nb_graph_ctx_new(m->g);
  nb_ctx *c = m->c;
  for (int l = 0; l < 3; l++) {
    const int64_t w[2] = {dims[l], dims[l + 1]};
    m->p[2 * l] = uniform(c, 2, w, sqrt(6.0 / (double)(dims[l] + dims[l + 1])), 10 + l);
    m->p[2 * l + 1] = nb_zeros_like(c, nb_tensor_from(c, NB_F32, 1, &dims[l + 1], NULL));
    m->t[2 * l] = uniform(c, 2, w, 1, 20 + l);
    m->t[2 * l + 1] = uniform(c, 1, &dims[l + 1], 1, 30 + l);
  }
  m->x = uniform(c, 2, (const int64_t[]){MLP_BATCH, 784}, 0.5, 40);
  int32_t labels[MLP_BATCH];
  for (int i = 0; i < MLP_BATCH; i++) labels[i] = i * 7 % 10;
  m->labels = nb_tensor_from(c, NB_I32, 1, (const int64_t[]){MLP_BATCH}, labels);
  nb_tensor *h = m->x;
  for (int l = 0; l < 3; l++) {
    h = nb_bias_add(c, nb_matmul(c, h, m->p[2 * l], false, false), m->p[2 * l + 1], NULL);
    if (l < 2) h = nb_relu(c, h);
  }
  nb_tensor *loss = NULL;
  nb_sparse_softmax_cross_entropy_with_logits(c, h, m->labels, &loss, NULL);
  m->loss = nb_mean(c, loss, NULL, 0, false);
}

/* GEMM FLOPs of the MLP with these layer sizes: a forward pass, its JVP along tangents of
   every parameter, the gradient for the parameters, and forward over reverse (the HVP).
   Layer l multiplies h_l [batch, d_l] by W_l [d_l, d_l+1], one product of u = 2 batch d_l
   d_l+1 FLOPs; h_0 (the data) has no tangent and needs no gradient. */
typedef struct mlp_flops {
  double fwd, jvp, grad, hvp;
} mlp_flops;

static mlp_flops count_mlp_flops(const int64_t *dims, int layers, int64_t batch) {
  mlp_flops f = {0};
  for (int l = 0; l < layers; l++) {
    double u = 2.0 * (double)batch * (double)dims[l] * (double)dims[l + 1];
    double below = l > 0;                      /* h_l carries a tangent and takes a gradient */
    double fwd_tangent = u * (1 + below);      /* d(h W) = dh W + h dW */
    double backward = u * (1 + below);         /* dW = h^T dz; dh = dz W^T */
    double back_tangent = u * (1 + 3 * below); /* d(h^T dz) = dh^T dz + h^T d(dz); d(dz W^T) likewise */
    f.fwd += u;
    f.jvp += u + fwd_tangent;
    f.grad += u + backward;
    f.hvp += u + backward + fwd_tangent + back_tangent;
  }
  return f;
}

static void print_ratio(const char *name, const char *a, double ams, const char *b, double bms, double flop_ratio,
                        int threads) {
  printf("name=%s model=mlp batch=%d threads=%d %s=%.3f %s=%.3f ratio=%.3f flop_ratio=%.3f\n", name, MLP_BATCH, threads,
         a, ams, b, bms, bms / ams, flop_ratio);
  fflush(stdout);
}

static void bench_mlp(nb_ctx *e, bool jvp, int threads) {
  mlp m;
  make_mlp(&m);
  call base = {.nfetch = 1, .fetch = {m.loss}}, with = {.nfetch = 6};
  if (jvp) {
    with.nfetch = 2;
    with.fetch[0] = m.loss;
    nb_jvp(m.c, &m.loss, 1, m.p, 6, m.t, &with.fetch[1]);
  } else {
    nb_gradients(m.c, &m.loss, 1, m.p, 6, NULL, base.fetch);
    base.nfetch = 6;
    nb_hvp(m.c, m.loss, m.p, 6, m.t, with.fetch);
  }
  if (nb_status(m.c)) {
    fprintf(stderr, "forward: %s\n", nb_error(m.c));
    exit(1);
  }
  base.s = with.s = nb_session_new(m.g);
  nb_session_set_threads(base.s, threads);
  double a = ms_per_call(e, &base), b = ms_per_call(e, &with);
  mlp_flops f = count_mlp_flops(mlp_dims, 3, MLP_BATCH);
  if (jvp)
    print_ratio("forward_jvp", "fwd_ms", a, "jvp_ms", b, f.jvp / f.fwd, threads);
  else
    print_ratio("forward_hvp", "grad_ms", a, "hvp_ms", b, f.hvp / f.grad, threads);
  nb_session_free(base.s);
  nb_ctx_free(m.c);
  nb_graph_free(m.g);
}

/* ---- the deep chain, checkpointed ------------------------------------------------------------ */

static double peak_kib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss;
}

/* The GEMM FLOPs of this gradient over the plain one's: each layer's forward product
   (2 batch width^2 FLOPs), dh = dz W^T for every layer (the input's gradient needs them
   all), dW = h^T dz when the weights are wanted, and with checkpointing the forward
   products once more (an upper estimate: a kept layer is not recomputed). */
static double deep_flop_ratio(bool weights, bool checkpointed) {
  double layer = 2.0 * DEEP_BATCH * DEEP_WIDTH * DEEP_WIDTH, fwd = DEEP_LAYERS * layer;
  double plain = fwd + DEEP_LAYERS * layer * (1 + weights);
  return (plain + (checkpointed ? fwd : 0)) / plain;
}

/* One configuration, in this process: the weights and the input fed to placeholders. The
   forward pass alone runs first; its peak (weights, thread stacks, kernels' scratch: what
   does not depend on checkpointing) is the baseline the gradient's peak is measured above,
   less the gradients it returns (alive at its end whatever the checkpointing). */
static void bench_deep(nb_ctx *e, int segments, bool weights, int threads) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g);
  const int64_t wshape[2] = {DEEP_WIDTH, DEEP_WIDTH}, xshape[2] = {DEEP_BATCH, DEEP_WIDTH};
  nb_tensor *feed[DEEP_LAYERS + 1], *vals[DEEP_LAYERS + 1];
  double limit = sqrt(3.0 / DEEP_WIDTH); /* keeps tanh's inputs of order one */
  for (int l = 0; l <= DEEP_LAYERS; l++) {
    bool input = l == DEEP_LAYERS;
    feed[l] = nb_placeholder(c, NB_F32, 2, input ? xshape : wshape, NULL);
    vals[l] = uniform(e, 2, input ? xshape : wshape, input ? 1 : limit, 100 + l);
  }
  nb_tensor *h = feed[DEEP_LAYERS], *grads[DEEP_LAYERS + 1];
  for (int l = 0; l < DEEP_LAYERS; l++) h = nb_tanh(c, nb_matmul(c, h, feed[l], false, false));
  nb_tensor *y = nb_sum(c, nb_mul(c, h, h), NULL, 0, false);
  call fwd = {.feed = feed, .vals = vals, .nfeed = DEEP_LAYERS + 1, .nfetch = 1, .fetch = {y}};
  int first = weights ? 0 : DEEP_LAYERS, n = DEEP_LAYERS + 1 - first;
  nb_gradients(c, &y, 1, feed + first, n, &(nb_grad_opts){.checkpoint_segments = segments}, grads);
  for (int l = 0; l < n; l++) grads[l] = nb_sum(c, grads[l], NULL, 0, false); /* freed as made */
  nb_tensor *sum = nb_add_n(c, grads, n);                                     /* one fetch, every gradient computed */
  call grad = {.feed = feed, .vals = vals, .nfeed = DEEP_LAYERS + 1, .nfetch = 1, .fetch = {sum}};
  if (nb_status(c)) {
    fprintf(stderr, "forward: %s\n", nb_error(c));
    exit(1);
  }
  fwd.s = grad.s = nb_session_new(g);
  nb_session_set_threads(fwd.s, threads);
  double before = (double)bench_rss_kib();
  run_call(e, &fwd);
  double fwd_peak = peak_kib();
  double ms[DEEP_RUNS];
  run_call(e, &grad); /* warm-up */
  for (int r = 0; r < DEEP_RUNS; r++) {
    double t0 = bench_now();
    run_call(e, &grad);
    ms[r] = 1e3 * (bench_now() - t0);
  }
  double peak = peak_kib(), mib = 1024.0 * 1024.0;
  nb_session_stats stats;
  nb_session_get_stats(grad.s, &stats);
  double result = 4.0 * DEEP_WIDTH * (weights ? DEEP_WIDTH : DEEP_BATCH), pool = (double)stats.peak_bytes_last_run;
  printf(
      "name=forward_ckpt layers=%d width=%d batch=%d wrt=%s checkpoint=%s threads=%d grad_ms=%.3f flop_ratio=%.3f "
      "pool_mb=%.2f result_mb=%.2f act_mb=%.2f peak_mb=%.1f over_fwd_mb=%.1f\n",
      DEEP_LAYERS, DEEP_WIDTH, DEEP_BATCH, weights ? "weights+input" : "input", segments ? "sqrt" : "none", threads,
      bench_median(ms, DEEP_RUNS), deep_flop_ratio(weights, segments != 0), pool / mib, result / mib,
      (pool - result) / mib, (peak - before) / 1024.0, (peak - fwd_peak) / 1024.0);
  fflush(stdout);
  nb_session_free(fwd.s);
  nb_ctx_free(c);
  nb_graph_free(g);
}

/* Each configuration in a child process, so that its peak resident set is its own. */
static void bench_deep_isolated(int segments, bool weights, int threads) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    nb_ctx *e = nb_eager_new();
    bench_deep(e, segments, weights, threads);
    nb_ctx_free(e);
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
    fprintf(stderr, "forward: the ckpt configuration (segments %d, threads %d) failed\n", segments, threads);
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : "all";
  int only_threads = argc > 2 ? atoi(argv[2]) : 0;
  bool all = !strcmp(only, "all");
  for (int threads = 1; threads <= 2; threads++) /* children first: before this process runs any op */
    for (int k = 0; k < 4 && (all || !strcmp(only, "ckpt")) && (!only_threads || only_threads == threads); k++)
      bench_deep_isolated(k % 2 ? NB_CHECKPOINT_SQRT : 0, k >= 2, threads);
  bench_print_build_info();
  nb_ctx *e = nb_eager_new();
  for (int threads = 1; threads <= 2; threads++) {
    if (only_threads && only_threads != threads) continue;
    if (all || !strcmp(only, "jvp")) bench_mlp(e, true, threads);
    if (all || !strcmp(only, "hvp")) bench_mlp(e, false, threads);
  }
  nb_ctx_free(e);
  return 0;
}
