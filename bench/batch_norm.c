/* bench/batch_norm: FusedBatchNormV3 (training) and FusedBatchNormGradV3 on f32 tensors
   of [64,24,24,6] (NHWC and NCHW) and [128,1,1,512] (a dense layer's [128,512]), 1 and 2
   threads. Prints name=... lines with the kernel's backend (onednn when it ran a oneDNN
   primitive, else own), microseconds per call and the effective bandwidth
   of one pass over x (x's bytes / time): a kernel making k passes shows about 1/k of the
   machine's stream bandwidth. Each figure is the median of RUNS timed batches. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "../src/ops/onednn.h"
#include "benchutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define RUNS 7
#define REPS 20

typedef struct shape_case {
  const char *name, *format;
  int64_t shape[4], channels;
} shape_case;

typedef struct bn_call {
  nb_tensor *x, *scale, *stats[3]; /* stats: the forward's reserve spaces, for the gradient */
  const char *format;
} bn_call;

static void run_once(nb_ctx *c, const bn_call *b, bool grad) {
  nb_tensor *out[6];
  if (grad)
    nb_fused_batch_norm_grad(c, b->x, b->x, b->scale, b->stats[0], b->stats[1], b->stats[2], 0.001, b->format, true,
                             out);
  else
    nb_fused_batch_norm(c, b->x, b->scale, b->scale, NULL, NULL, 0.001, 1, b->format, true, out);
}

/* Median seconds per call. */
static double time_calls(nb_ctx *c, const bn_call *b, bool grad) {
  double per_call[RUNS];
  for (int r = 0; r < RUNS; r++) {
    double t0 = bench_now();
    for (int i = 0; i < REPS; i++) {
      nb_scope_begin(c);
      run_once(c, b, grad);
      nb_scope_end(c, NULL, 0);
    }
    per_call[r] = (bench_now() - t0) / REPS;
  }
  return bench_median(per_call, RUNS);
}

int main(void) {
  static const shape_case cases[] = {{"nhwc_64x24x24x6", "NHWC", {64, 24, 24, 6}, 6},
                                     {"nchw_64x6x24x24", "NCHW", {64, 6, 24, 24}, 6},
                                     {"nhwc_128x512", "NHWC", {128, 1, 1, 512}, 512}};
  nb_ctx *c = nb_eager_new();
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const shape_case *s = &cases[k];
    int64_t n = s->shape[0] * s->shape[1] * s->shape[2] * s->shape[3];
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)sin((double)i);
    bn_call b = {nb_tensor_from(c, NB_F32, 4, s->shape, v), NULL, {NULL}, s->format};
    b.scale = nb_add(c, nb_tensor_from(c, NB_F32, 1, &s->channels, NULL), nb_scalar(c, NB_F32, 1));
    nb_tensor *out[6];
    nb_fused_batch_norm(c, b.x, b.scale, b.scale, NULL, NULL, 0.001, 1, s->format, true, out);
    for (int i = 0; i < 3; i++) b.stats[i] = out[3 + i];
    for (int threads = 1; threads <= 2; threads++) {
      nb_ctx_set_threads(c, threads);
      for (int grad = 0; grad <= 1; grad++) {
        uint64_t before = nbop_onednn_executions();
        double t = time_calls(c, &b, grad);
        printf("name=%s_%s_t%d backend=%s us=%.1f pass_gbps=%.2f\n", grad ? "bn_grad" : "bn_fwd", s->name, threads,
               nbop_onednn_executions() > before ? "onednn" : "own", t * 1e6, (double)n * 4 / t / 1e9);
      }
    }
    free(v);
  }
  if (nb_status(c) != NB_OK) fprintf(stderr, "%s\n", nb_error(c));
  int code = nb_status(c) != NB_OK;
  nb_ctx_free(c);
  return code;
}
