/* tf.gradients in C: build a graph, differentiate it (twice), run it in a session.
   loss(x, w) = sum(tanh(x w)^2); prints the loss, d loss / d w and a Hessian-vector
   product, and the gradient graph as Graphviz DOT (gradients.dot). */
#include <nabla.h>

#include <stdio.h>

int main(void) {
  nb_graph *g = nb_graph_new();
  nb_ctx *c = nb_graph_ctx_new(g), *e = nb_eager_new();
  const int64_t xs[2] = {-1, 3}, ws[2] = {3, 2}; /* batch size unknown until run time */
  nb_tensor *x = nb_placeholder(c, NB_F64, 2, xs, "x");
  nb_tensor *w = nb_placeholder(c, NB_F64, 2, ws, "w");
  const int axes[2] = {0, 1};
  nb_tensor *loss = nb_sum(c, nb_square(c, nb_tanh(c, nb_matmul(c, x, w, false, false))), axes, 2, false);
  nb_tensor *dw, *hv;
  nb_gradients(c, &loss, 1, &w, 1, NULL, &dw);
  /* Hessian-vector product: the gradient of <dw, v> */
  const double v[6] = {1, 0, 0, 1, 1, 1};
  nb_tensor *dot = nb_sum(c, nb_mul(c, dw, nb_tensor_from(c, NB_F64, 2, ws, v)), axes, 2, false);
  nb_gradients(c, &dot, 1, &w, 1, NULL, &hv);
  if (nb_status(c)) {
    fprintf(stderr, "build: %s\n", nb_error(c));
    return 1;
  }
  const double xv[6] = {0.5, -1, 2, 0.1, 0.2, -0.3}, wv[6] = {0.3, -0.2, 0.1, 0.4, -0.5, 0.2};
  const int64_t xshape[2] = {2, 3};
  nb_tensor *feeds[2] = {x, w};
  nb_tensor *values[2] = {nb_tensor_from(e, NB_F64, 2, xshape, xv), nb_tensor_from(e, NB_F64, 2, ws, wv)};
  nb_tensor *fetch[3] = {loss, dw, hv}, *out[3];
  nb_session *s = nb_session_new(g);
  if (nb_run(s, feeds, values, 2, fetch, 3, out)) {
    fprintf(stderr, "run: %s\n", nb_session_error(s));
    return 1;
  }
  const char *names[3] = {"loss", "dloss/dw", "H v"};
  for (int i = 0; i < 3; i++) {
    printf("%-9s", names[i]);
    for (int64_t j = 0; j < nb_num_elements(out[i]); j++) printf(" % .6f", nb_item(out[i], j));
    printf("\n");
    nb_tensor_free(out[i]);
  }
  nb_graph_to_dot(g, "gradients.dot");
  printf("%d nodes; graph written to gradients.dot\n", nb_graph_num_nodes(g));
  nb_session_free(s);
  nb_ctx_free(c);
  nb_ctx_free(e);
  nb_graph_free(g);
  return 0;
}
