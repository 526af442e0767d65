/* Gradients of the collective ops (src/ops/collective.c). Every member runs the forward op,
   and every member runs its gradient: the backward pass is itself collective, so each rule
   is one collective on the incoming gradients, and differentiating it again gives the same
   rule (second and higher orders). */
#include "grad.h"

#include <stdio.h>
#include <string.h>

/* CollectiveReduceV2 with merge_op Add: member j gets y_j = s * sum_i x_i (s = 1 for final_op
   Id, 1/n for Div), so dL/dx_i = sum_j dL/dy_j * s: the same reduction (same group, same
   final_op) of the members' dys. The instance key is the forward's: instances of one key
   meet in the order the members issue them. Mul, Min, Max have no gradient (TF registers none). */
static nb_code reduce_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  const char *merge = nb_fwd_attr_str(op, "merge_op");
  if (strcmp(merge, "Add") != 0)
    return nb_set_error(c, NB_NO_GRADIENT, "No gradient defined for CollectiveReduceV2 with merge_op '%s' (node '%s')",
                        merge, nb_fwd_name(op));
  nb_tensor *in[4] = {dys[0], nb_fwd_input(op, 1), nb_fwd_input(op, 2), nb_fwd_input(op, 3)};
  nb_attr attrs[3] = {nb_attr_str("merge_op", "Add"), nb_attr_str("final_op", nb_fwd_attr_str(op, "final_op")),
                      nb_attr_float("timeout_seconds", nb_fwd_attr_float(op, "timeout_seconds"))};
  return nb_op(c, "CollectiveReduceV2", in, 4, attrs, 3, &dxs[0], 1);
}

/* TF's _all_sum_grad (nccl_ops.py): y_j = sum_i x_i on every device, so dL/dx_i = sum_j dy_j,
   an NcclAllReduce sum of the dys under shared_name + "_grad". Only reduction "sum" has
   one (TF raises LookupError for the others). */
static nb_code nccl_all_reduce_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  const char *reduction = nb_fwd_attr_str(op, "reduction");
  if (strcmp(reduction, "sum") != 0)
    return nb_set_error(c, NB_NO_GRADIENT,
                        "No gradient defined for NcclAllReduce except for reduction=\"sum\" (node '%s', reduction "
                        "\"%s\")",
                        nb_fwd_name(op), reduction);
  char shared_name[512];
  int n = snprintf(shared_name, sizeof shared_name, "%s_grad", nb_fwd_attr_str(op, "shared_name"));
  if (n < 0 || (size_t)n >= sizeof shared_name)
    return nb_set_error(c, NB_INVALID, "NcclAllReduce gradient: shared_name too long (node '%s')", nb_fwd_name(op));
  dxs[0] = nb_nccl_all_reduce(c, dys[0], "sum", (int)nb_fwd_attr_int(op, "num_devices"), shared_name);
  return nb_status(c);
}

void nbg_register_collective_grads(void) {
  static const nbg_entry table[] = {
      {"CollectiveReduceV2", reduce_grad, NBG_IN(1) | NBG_IN(2) | NBG_IN(3), 0}, /* the group scalars */
      {"NcclAllReduce", nccl_all_reduce_grad, 0, 0},
      /* TF registers none: the gather's and the broadcast's backward would need each
         member's position in the group, which the ops do not expose. */
      {"CollectiveGatherV2", NULL, 0, 0},
      {"CollectiveBcastSendV2", NULL, 0, 0},
      {"CollectiveBcastRecvV2", NULL, 0, 0},
  };
  nbad_register_table(table, sizeof table / sizeof *table);
}
