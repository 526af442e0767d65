/* Variable ops and the training ops: updates are not differentiable (TF marks them so),
   and a gradient stops there instead of reaching "no gradient defined". ReadVariableOp
   has no inputs: a gradient arriving at its output is the variable's gradient. */
#include "grad.h"

void nbg_register_variable_grads(void) {
  static const char *const updates[] = {
      /* src/ops/variable.c */
      "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ResourceScatterAdd", "ResourceScatterSub",
      /* src/ops/training.c */
      "ResourceApplyGradientDescent", "ResourceApplyMomentum", "ResourceApplyAdam", "ResourceApplyAdamW",
      "ResourceApplyRMSProp", "ResourceApplyCenteredRMSProp", "ResourceSparseApplyMomentum", "ResourceSparseApplyAdam",
      "ResourceSparseApplyAdamW", "ResourceSparseApplyRMSProp", "ResourceSparseApplyCenteredRMSProp"};
  for (size_t i = 0; i < sizeof updates / sizeof *updates; i++) nbad_register_builtin(updates[i], NULL);
}
