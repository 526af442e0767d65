/* bench/formats: GraphDef export (nb_graph_write_graphdef_buffer) of a graph of 10^5 nodes,
   in µs per node, median of RUNS runs after one untimed run:
     name=graphdef_export nodes=100000 bytes=... threads=1 runs=5 ms_median=... us_per_node=...
   The graph: a placeholder x [16] and a chain of 99997 elementwise ops cycling Mul (by a
   Const), AddV2 (a second Const) and Tanh: what TF's as_graph_def of the same graph
   (bench/peers/formats.py) is set beside. argv[1], when given, is a file the graph is
   written to, which the peer imports (tf.compat.v1.import_graph_def). One thread: the
   export is serial. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <nabla.h>

#include "benchutil.h"

#include <stdio.h>
#include <stdlib.h>

#define NODES 100000
#define RUNS 5

/* x, two Consts and NODES - 3 chained ops. */
static nb_graph *chain_graph(void) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  nb_tensor *h = nb_placeholder(c, NB_F32, 1, (int64_t[]){16}, "x");
  nb_tensor *scale = nb_const(c, nb_scalar(e, NB_F32, 0.5)), *shift = nb_const(c, nb_scalar(e, NB_F32, 0.25));
  for (int i = 0; i < NODES - 3 && nb_status(c) == NB_OK; i++) {
    nb_tensor *next = i % 3 == 0 ? nb_mul(c, h, scale) : i % 3 == 1 ? nb_add(c, h, shift) : nb_tanh(c, h);
    nb_tensor_free(h == next ? NULL : h);
    h = next;
  }
  if (nb_status(c) != NB_OK) {
    fprintf(stderr, "formats: %s\n", nb_error(c));
    nb_ctx_free(c);
    nb_ctx_free(e);
    nb_graph_free(g);
    return NULL;
  }
  nb_ctx_free(c);
  nb_ctx_free(e);
  return g;
}

int main(int argc, char **argv) {
  bench_print_build_info();
  nb_graph *g = chain_graph();
  if (!g) return 1;
  double t[RUNS];
  size_t bytes = 0;
  for (int r = -1; r < RUNS; r++) {
    void *data = NULL;
    double t0 = bench_now();
    nb_code code = nb_graph_write_graphdef_buffer(g, &data, &bytes);
    if (r >= 0) t[r] = bench_now() - t0;
    free(data);
    if (code) {
      fprintf(stderr, "formats: %s\n", nb_graph_error(g));
      nb_graph_free(g);
      return 1;
    }
  }
  double median = bench_median(t, RUNS);
  printf("name=graphdef_export nodes=%d bytes=%zu threads=1 runs=%d ms_median=%.3f us_per_node=%.3f\n",
         nb_graph_num_nodes(g), bytes, RUNS, median * 1e3, median * 1e6 / nb_graph_num_nodes(g));
  if (argc > 1 && nb_graph_write_graphdef(g, argv[1])) {
    fprintf(stderr, "formats: %s\n", nb_graph_error(g));
    nb_graph_free(g);
    return 1;
  }
  nb_graph_free(g);
  return 0;
}
