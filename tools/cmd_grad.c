/* nabla grad: tf.gradients as a command. */
#include "tool.h"

#include <stdio.h>

static int grad_graph(tool_graph *tg, tool_graph_args *a) {
  nb_tensor *ys[TOOL_MAX_NAMES], *xs[TOOL_MAX_NAMES], *gys[TOOL_MAX_NAMES], *dxs[TOOL_MAX_NAMES];
  int ny = tool_tensor_list(&tool_grad, tg, "--ys", a->ys, ys),
      nx = ny < 0 ? -1 : tool_tensor_list(&tool_grad, tg, "--xs", a->xs, xs);
  int ngy = nx < 0 || !a->grad_ys ? 0 : tool_tensor_list(&tool_grad, tg, "--grad-ys", a->grad_ys, gys);
  if (ny < 0 || nx < 0 || ngy < 0) return TOOL_ERROR;
  if (a->grad_ys && ngy != ny)
    return tool_fail(&tool_grad, "--grad-ys names %d tensors for %d --ys (one each)", ngy, ny);
  nb_grad_opts o = {.grad_ys = a->grad_ys ? gys : NULL};
  if (nb_gradients(tg->c, ys, ny, xs, nx, &o, dxs)) return tool_fail(&tool_grad, "%s", nb_error(tg->c));
  if (nb_graph_write_graphdef(tg->g, a->out)) return tool_fail(&tool_grad, "%s", nb_graph_error(tg->g));
  printf("%s: %d nodes; the gradients:\n", a->out, nb_graph_num_nodes(tg->g));
  for (int i = 0; i < nx; i++) {
    if (dxs[i])
      printf("  %s:%d  %s:%d\n", nb_tensor_node_name(xs[i]), nb_tensor_output_index(xs[i]), nb_tensor_node_name(dxs[i]),
             nb_tensor_output_index(dxs[i]));
    else
      printf("  %s:%d  (not connected to the ys: no gradient)\n", nb_tensor_node_name(xs[i]),
             nb_tensor_output_index(xs[i]));
  }
  return TOOL_OK;
}

static int grad_main(int argc, char **argv) {
  tool_graph_args a;
  int rc = tool_graph_args_parse(&tool_grad, argc, argv, "--ys --xs --grad-ys -o", &a);
  if (!rc) rc = tool_check_list(&tool_grad, "--ys", a.ys, true);
  if (!rc) rc = tool_check_list(&tool_grad, "--xs", a.xs, true);
  if (!rc) rc = tool_check_list(&tool_grad, "--grad-ys", a.grad_ys, false);
  if (!rc && !a.out) rc = tool_usage_error(&tool_grad, "needs -o OUT.pb");
  tool_graph tg = {0};
  if (!rc) rc = tool_graph_open(&tool_grad, a.graph, &tg) ? grad_graph(&tg, &a) : TOOL_ERROR;
  tool_graph_close(&tg);
  tool_graph_args_free(&a);
  return rc;
}

const tool_cmd tool_grad = {"grad", "tf.gradients as a command: writes the graph with the gradient nodes added",
                            "GRAPH --ys NAME[,NAME...] --xs NAME[,NAME...] [--grad-ys NAME[,NAME...]] -o OUT.pb\n"
                            "  --ys       the tensors differentiated (several: their gradients summed)\n"
                            "  --xs       the tensors differentiated with respect to; each gradient's name is printed\n"
                            "  --grad-ys  tensors of the graph weighting each y (default: ones)\n"
                            "  -o OUT.pb  the GraphDef written: GRAPH's nodes and the gradients' (under gradients/)\n",
                            grad_main};
