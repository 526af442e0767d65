/* bench/conv: the LeNet-5 convolution and pooling layers at batch 64, float32, NHWC,
   VALID: conv1 (28x28x1 input, 5x5x1x6 filter) forward and filter backprop (its input
   gradient is never needed), conv2 (12x12x6 input, 5x5x6x16 filter) forward, input and
   filter backprop, 2x2/2 max pools of 24x24x6 and 8x8x16 forward and gradient, and both
   as average pools (TF's other choice for LeNet); on 1 and 2 threads. Each op runs on
   the library's own choice of kernel, then on its own kernels with oneDNN switched off
   (backend=im2col for convolutions, backend=own for pools), so one run shows both.
   Prints name=... threads=N backend=... us_per_op=... gflops=... lines (the median of
   RUNS runs of at least MIN_SECONDS each) and, per thread count and path, their sum as
   name=lenet_conv_total. An argument runs only the ops whose name contains it (no total
   then).

   FLOPs: a convolution and each of its backprops is 2 n oh ow kh kw c oc (a multiply and
   an add per filter tap per output element, for dx and dW the same products regrouped);
   a pool or its gradient counts n oh ow c kh kw (one compare or add per window element). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "../src/ops/onednn.h"
#include "benchutil.h"
#include "peak.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNS 7
#define MIN_SECONDS 0.2
#define BATCH 64

typedef enum {
  CONV_FORWARD,
  CONV_BACKPROP_INPUT,
  CONV_BACKPROP_FILTER,
  POOL_FORWARD,
  POOL_GRAD,
  AVG_FORWARD,
  AVG_GRAD
} kind;

/* One benchmarked op with its operands. */
typedef struct bench_op {
  const char *name;
  kind k;
  nb_tensor *a, *b, *d; /* the op's inputs in TF's order */
  double flops;         /* per call, as the header counts them */
} bench_op;

static const int64_t unit4[4] = {1, 1, 1, 1}, two4[4] = {1, 2, 2, 1};

static void run_op(nb_ctx *c, const bench_op *op) {
  nb_conv2d_attrs ca = {.strides = unit4, .padding = "VALID"};
  nb_pool_attrs pa = {.ksize = two4, .strides = two4, .padding = "VALID"};
  switch (op->k) {
    case CONV_FORWARD: nb_conv2d(c, op->a, op->b, &ca); break;
    case CONV_BACKPROP_INPUT: nb_conv2d_backprop_input(c, op->a, op->b, op->d, &ca); break;
    case CONV_BACKPROP_FILTER: nb_conv2d_backprop_filter(c, op->a, op->b, op->d, &ca); break;
    case POOL_FORWARD: nb_max_pool(c, op->a, &pa); break;
    case POOL_GRAD: nb_max_pool_grad(c, op->a, op->b, op->d, &pa); break;
    case AVG_FORWARD: nb_avg_pool(c, op->a, &pa); break;
    case AVG_GRAD: nb_avg_pool_grad(c, op->a, op->b, &pa); break;
  }
}

static void call_op(nb_ctx *c, const void *op) { run_op(c, op); }

static nb_tensor *random_tensor(nb_ctx *c, int64_t n, int64_t h, int64_t w, int64_t ch) {
  int64_t shape[4] = {n, h, w, ch}, size = n * h * w * ch;
  float *v = malloc((size_t)size * sizeof *v);
  if (!v) return NULL;
  for (int64_t i = 0; i < size; i++) v[i] = (float)rand() / (float)RAND_MAX * 2.0f - 1.0f;
  nb_tensor *x = nb_tensor_from(c, NB_F32, 4, shape, v);
  free(v);
  return x;
}

/* FLOPs of a convolution over batch BATCH: oh x ow outputs of oc channels, kh x kw x c
   taps each. */
static double conv_flops(int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t ch, int64_t oc) {
  return 2.0 * BATCH * (double)(oh * ow * kh * kw * ch * oc);
}

/* Compares (or adds) of a 2x2 pool over batch BATCH with oh x ow outputs of c channels. */
static double pool_flops(int64_t oh, int64_t ow, int64_t ch) { return 4.0 * BATCH * (double)(oh * ow * ch); }

/* One output line; every figure a benchmark line carries is printed here. */
static void print_line(const char *name, int threads, const char *backend, double seconds, double flops) {
  double gflops = seconds > 0 ? flops / seconds / 1e9 : 0;
  printf("name=%s threads=%d backend=%s us_per_op=%.1f gflops=%.2f frac_peak=%.3f\n", name, threads, backend,
         seconds * 1e6, gflops, bench_frac_peak(gflops, threads));
}

/* Which kernel op ran: oneDNN when it executed a primitive during the calls. */
static const char *backend_of(const bench_op *op, uint64_t executions_before) {
  if (nbop_onednn_executions() > executions_before) return "onednn";
  return op->k >= POOL_FORWARD ? "own" : "im2col";
}

static nb_tensor *sizes(nb_ctx *c, int64_t a, int64_t b, int64_t d, int64_t e) {
  int32_t v[4] = {(int32_t)a, (int32_t)b, (int32_t)d, (int32_t)e};
  return nb_tensor_from(c, NB_I32, 1, (const int64_t[]){4}, v);
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;
  bench_print_build_info();
  nb_ctx *c = nb_eager_new();
  if (!c) return 1;
  srand(1);
  nb_tensor *x1 = random_tensor(c, BATCH, 28, 28, 1), *w1 = random_tensor(c, 5, 5, 1, 6);
  nb_tensor *dy1 = random_tensor(c, BATCH, 24, 24, 6);
  nb_tensor *x2 = random_tensor(c, BATCH, 12, 12, 6), *w2 = random_tensor(c, 5, 5, 6, 16);
  nb_tensor *dy2 = random_tensor(c, BATCH, 8, 8, 16);
  nb_tensor *p1 = random_tensor(c, BATCH, 24, 24, 6), *dp1 = random_tensor(c, BATCH, 12, 12, 6);
  nb_tensor *p2 = random_tensor(c, BATCH, 8, 8, 16), *dp2 = random_tensor(c, BATCH, 4, 4, 16);
  nb_pool_attrs pa = {.ksize = two4, .strides = two4, .padding = "VALID"};
  nb_tensor *q1 = nb_max_pool(c, p1, &pa), *q2 = nb_max_pool(c, p2, &pa);
  const bench_op ops[] = {
      {"conv1_forward", CONV_FORWARD, x1, w1, NULL, conv_flops(24, 24, 5, 5, 1, 6)},
      {"conv1_backprop_filter", CONV_BACKPROP_FILTER, x1, sizes(c, 5, 5, 1, 6), dy1, conv_flops(24, 24, 5, 5, 1, 6)},
      {"conv2_forward", CONV_FORWARD, x2, w2, NULL, conv_flops(8, 8, 5, 5, 6, 16)},
      {"conv2_backprop_input", CONV_BACKPROP_INPUT, sizes(c, BATCH, 12, 12, 6), w2, dy2, conv_flops(8, 8, 5, 5, 6, 16)},
      {"conv2_backprop_filter", CONV_BACKPROP_FILTER, x2, sizes(c, 5, 5, 6, 16), dy2, conv_flops(8, 8, 5, 5, 6, 16)},
      {"pool1_forward", POOL_FORWARD, p1, NULL, NULL, pool_flops(12, 12, 6)},
      {"pool1_grad", POOL_GRAD, p1, q1, dp1, pool_flops(12, 12, 6)},
      {"pool2_forward", POOL_FORWARD, p2, NULL, NULL, pool_flops(4, 4, 16)},
      {"pool2_grad", POOL_GRAD, p2, q2, dp2, pool_flops(4, 4, 16)},
      {"avgpool1_forward", AVG_FORWARD, p1, NULL, NULL, pool_flops(12, 12, 6)},
      {"avgpool1_grad", AVG_GRAD, sizes(c, BATCH, 24, 24, 6), dp1, NULL, pool_flops(12, 12, 6)},
      {"avgpool2_forward", AVG_FORWARD, p2, NULL, NULL, pool_flops(4, 4, 16)},
      {"avgpool2_grad", AVG_GRAD, sizes(c, BATCH, 8, 8, 16), dp2, NULL, pool_flops(4, 4, 16)},
  };
  if (nb_status(c) != NB_OK) {
    fprintf(stderr, "setup failed: %s\n", nb_error(c));
    return 1;
  }
  for (int threads = 1; threads <= 2; threads++)
    for (int own = 0; own <= 1; own++) { /* the library's choice, then its own kernels */
      nb_ctx_set_threads(c, threads);
      nbop_onednn_set_enabled(!own);
      double total = 0;
      for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        if (only && !strstr(ops[i].name, only)) continue;
        uint64_t before = nbop_onednn_executions();
        double seconds = bench_per_call(c, call_op, &ops[i], RUNS, MIN_SECONDS);
        total += seconds;
        print_line(ops[i].name, threads, backend_of(&ops[i], before), seconds, ops[i].flops);
      }
      if (!only)
        printf("name=lenet_conv_total threads=%d path=%s us_per_op=%.1f\n", threads, own ? "own" : "default",
               total * 1e6);
      if (nb_status(c) != NB_OK) {
        fprintf(stderr, "bench failed: %s\n", nb_error(c));
        return 1;
      }
    }
  nb_ctx_free(c);
  return 0;
}
