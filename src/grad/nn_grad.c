/* Gradients of the nn family, after TF's nn_grad.py. Every rule uses public op calls
   only, so it builds graph nodes, runs on a tape and differentiates again: the fused
   gradient ops (Relu6Grad, ...) have gradients of their own, and the losses take the
   gradient arriving at their backprop output, so their Hessians are right. */
#include "grad.h"

static nb_tensor *out0(const nb_fwd_op *op) { return nb_fwd_output(op, 0); }

/* sum of x over the last dim, kept as a dim of 1 */
static nb_tensor *row_sum(nb_ctx *c, nb_tensor *x) { return nb_sum(c, x, (const int[]){-1}, 1, true); }

/* The product of v with the softmax Jacobian diag(s) - s s^T, row by row: (v - <v, s>) s. */
static nb_tensor *softmax_jvp(nb_ctx *c, nb_tensor *v, nb_tensor *s) {
  return nb_mul(c, nb_sub(c, v, row_sum(c, nb_mul(c, v, s))), s);
}

/* ---- softmax ------------------------------------------------------------------------------- */

/* y = softmax(x): dy_i/dx_j = y_i (delta_ij - y_j), so dx = (dy - sum(dy y)) y */
static nb_code softmax_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = softmax_jvp(c, dy, out0(op));
  return nb_status(c);
}

/* y = x - logsumexp(x): dy_i/dx_j = delta_ij - e^(y_j), so dx = dy - e^y sum(dy) */
static nb_code log_softmax_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_sub(c, dy, nb_mul(c, nb_exp(c, out0(op)), row_sum(c, dy)));
  return nb_status(c);
}

/* ---- the losses ----------------------------------------------------------------------------
   loss = -sum(labels log softmax(f)) per row, backprop = softmax(f) - labels (TF's
   d loss/d f). Through loss: df = g_loss backprop, dlabels = -g_loss log_softmax(f).
   Through backprop (a gradient of the gradient, g_bp): df += g_bp J_softmax(f), and for
   dense labels dlabels -= g_bp. TF leaves the labels' part out; with it the op's every
   output is differentiated exactly. Broadcast inputs get their gradients summed back. */

/* Whether g is a graph constant of zeros (the pass's zeros for an output without a
   gradient, folded when its shape is static: TF's _is_zeros_tensor). A constant depends
   on nothing, so leaving its term out is exact at every order. */
static bool known_zeros(const nb_tensor *g) {
  const nb_tensor *v = nb_is_symbolic(g) ? nb_constant_value(g) : NULL;
  if (!v) return false;
  for (int64_t i = 0; i < nb_num_elements(v); i++)
    if (nb_item(v, i) != 0) return false;
  return true;
}

/* The logits' gradient; labels_grad (dense labels only) gets the labels'. */
static nb_tensor *xent_logits_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **labels_grad) {
  nb_tensor *logits = in0(op), *g_loss = dys[0], *g_bp = dys[1] && !known_zeros(dys[1]) ? dys[1] : NULL;
  nb_tensor *df = NULL, *dl = NULL;
  if (g_loss) {
    nb_tensor *g = nb_expand_dims(c, g_loss, -1);
    df = nb_mul(c, g, nb_fwd_output(op, 1));
    if (labels_grad) dl = nb_mul(c, nb_neg(c, g), nb_log_softmax(c, logits));
  }
  if (g_bp) {
    nb_tensor *through_bp = softmax_jvp(c, g_bp, nb_softmax(c, logits));
    df = df ? nb_add(c, df, through_bp) : through_bp;
    if (labels_grad) dl = dl ? nb_sub(c, dl, g_bp) : nb_neg(c, g_bp);
  }
  if (labels_grad) *labels_grad = dl;
  return df;
}

static nb_code xent_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dl = NULL, *df = xent_logits_grad(c, op, dys, NEED(1) ? &dl : NULL);
  dxs[0] = NEED(0) ? nbg_reduce_to(c, df, in0(op)) : NULL;
  dxs[1] = NEED(1) ? nbg_reduce_to(c, dl, in1(op)) : NULL;
  return nb_status(c);
}

/* integer labels get no gradient */
static nb_code sparse_xent_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  dxs[0] = NEED(0) ? xent_logits_grad(c, op, dys, NULL) : NULL;
  dxs[1] = NULL;
  return nb_status(c);
}

/* ---- activations and their fused gradient ops --------------------------------------------- */

/* y = relu6(x): dy/dx = [0 < y < 6] (TF reads the output), so dx = Relu6Grad(dy, y) */
static nb_code relu6_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_relu6_grad(c, dy, out0(op));
  return nb_status(c);
}

/* d = gradients [0 < features < 6]: linear in gradients, piecewise constant in features */
static nb_code relu6_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *features = in1(op);
  dxs[0] = NEED(0) ? nb_relu6_grad(c, dy, features) : NULL;
  dxs[1] = NEED(1) ? nb_zeros_like(c, features) : NULL;
  return nb_status(c);
}

/* y = x > 0 ? x : alpha x: dx = LeakyReluGrad(dy, x) */
static nb_code leaky_relu_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  double alpha = nb_fwd_attr_float(op, "alpha");
  dxs[0] = nb_leaky_relu_grad(c, dy, in0(op), alpha);
  return nb_status(c);
}

/* d = gradients (features > 0 ? 1 : alpha): linear in gradients, piecewise constant in features */
static nb_code leaky_relu_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *features = in1(op);
  dxs[0] = NEED(0) ? nb_leaky_relu_grad(c, dy, features, nb_fwd_attr_float(op, "alpha")) : NULL;
  dxs[1] = NEED(1) ? nb_zeros_like(c, features) : NULL;
  return nb_status(c);
}

/* y = selu(x): dy/dx = y + scale alpha where y < 0, scale above, so dx = SeluGrad(dy, y) */
static nb_code selu_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_selu_grad(c, dy, out0(op));
  return nb_status(c);
}

/* d = gradients (outputs + scale alpha) where outputs < 0, else gradients scale: linear in
   gradients (SeluGrad(ddx, outputs)); dd/d(outputs) = gradients where outputs < 0, else 0 */
static nb_code selu_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  return nbg_exp_linear_grad_grad(c, op, dy, dxs, nb_selu_grad);
}

/* y = gelu(x): dx = GeluGrad(dy, x) */
static nb_code gelu_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_gelu_grad(c, dy, in0(op), nb_fwd_attr_bool(op, "approximate"));
  return nb_status(c);
}

/* gelu''(x), exact: d/dx (Phi + x phi) = 2 phi + x phi' = phi(x) (2 - x^2) */
static nb_tensor *gelu_curvature_exact(nb_ctx *c, nb_tensor *x) {
  nb_tensor *x2 = nb_square(c, x);
  nb_tensor *phi = nb_mul(c, scalar(c, x, 0.39894228040143267794), nb_exp(c, nb_mul(c, x2, scalar(c, x, -0.5))));
  return nb_mul(c, phi, nb_sub(c, scalar(c, x, 2), x2));
}

/* gelu''(x), tanh form: with t = tanh u, u = k (x + b x^3), gelu' = (1 + t)/2 + x (1 - t^2) u'/2,
   so gelu'' = (1 - t^2) (u' - x t u'^2 + x u''/2) where u' = k (1 + 3 b x^2), u'' = 6 k b x */
static nb_tensor *gelu_curvature_tanh(nb_ctx *c, nb_tensor *x) {
  const double k = 0.79788456080286535588, b = 0.044715;
  nb_tensor *x2 = nb_square(c, x);
  nb_tensor *u = nb_mul(c, scalar(c, x, k), nb_add(c, x, nb_mul(c, scalar(c, x, b), nb_mul(c, x2, x))));
  nb_tensor *t = nb_tanh(c, u);
  nb_tensor *du = nb_mul(c, scalar(c, x, k), nb_add(c, scalar(c, x, 1), nb_mul(c, scalar(c, x, 3 * b), x2)));
  nb_tensor *half_x_ddu = nb_mul(c, scalar(c, x, 3 * k * b), x2);
  nb_tensor *inner = nb_add(c, nb_sub(c, du, nb_mul(c, nb_mul(c, x, t), nb_square(c, du))), half_x_ddu);
  return nb_mul(c, nb_sub(c, scalar(c, x, 1), nb_square(c, t)), inner);
}

/* d = gradients gelu'(features): linear in gradients (GeluGrad(ddx, features));
   dd/d(features) = gradients gelu''(features) */
static nb_code gelu_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *g = in0(op), *x = in1(op);
  bool approximate = nb_fwd_attr_bool(op, "approximate");
  dxs[0] = NEED(0) ? nb_gelu_grad(c, dy, x, approximate) : NULL;
  if (NEED(1)) {
    nb_tensor *curvature = approximate ? gelu_curvature_tanh(c, x) : gelu_curvature_exact(c, x);
    dxs[1] = nb_mul(c, nb_mul(c, dy, g), curvature);
  }
  return nb_status(c);
}

/* ---- L2Loss ---------------------------------------------------------------------------------- */

/* y = sum(t^2) / 2: dy/dt = t (dy is a scalar) */
static nb_code l2_loss_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_mul(c, in0(op), dy);
  return nb_status(c);
}

void nbg_register_nn_grads(void) {
  /* Softmax, Relu6 and Selu rules read the output, LeakyRelu's the input; the cross
     entropies read the backprop output and the logits (for the second order). */
  static const nbg_entry table[] = {
      {"Softmax", softmax_grad, 0, NBG_OUT(0)},
      {"LogSoftmax", log_softmax_grad, 0, NBG_OUT(0)},
      {"SoftmaxCrossEntropyWithLogits", xent_grad, NBG_IN(0), NBG_OUT(1)},
      {"SparseSoftmaxCrossEntropyWithLogits", sparse_xent_grad, NBG_IN(0), NBG_OUT(1)},
      {"Relu6", relu6_grad, 0, NBG_OUT(0)},
      {"Relu6Grad", relu6_grad_grad, NBG_IN(1), 0},
      {"LeakyRelu", leaky_relu_grad, NBG_IN(0), 0},
      {"LeakyReluGrad", leaky_relu_grad_grad, NBG_IN(1), 0},
      {"Selu", selu_grad, 0, NBG_OUT(0)},
      {"SeluGrad", selu_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"Gelu", gelu_grad, NBG_IN(0), 0},
      {"GeluGrad", gelu_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"L2Loss", l2_loss_grad, NBG_IN(0), 0},
      /* TF's OneHot gradient gives no input a gradient (indices and depth are ints, and
         on_value/off_value get none either) */
      {"OneHot", NULL, 0, 0},
  };
  nbad_register_table(table, sizeof table / sizeof table[0]);
}

/* ---- forward rules ------------------------------------------------------------------------ */

/* y = x - logsumexp(x): ty = t - sum(e^y t) over the last dim */
static nb_code log_softmax_fwd(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor **tout) {
  tout[0] = nb_sub(c, tin[0], row_sum(c, nb_mul(c, nb_exp(c, out0(op)), tin[0])));
  return nb_status(c);
}

/* y = sum(x^2) / 2: ty = sum(x t) */
static nb_code l2_loss_fwd(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor **tout) {
  nb_tensor *flat = nb_reshape(c, nb_mul(c, in0(op), tin[0]), (const int64_t[]){-1}, 1);
  tout[0] = nb_sum(c, flat, (const int[]){0}, 1, false);
  return nb_status(c);
}

void nbg_register_nn_fwd(void) {
  /* The activations are elementwise and Softmax's Jacobian diag(y) - y y^T is symmetric;
     the losses and the gradient ops take TF's fallback. */
  static const nbg_fwd_entry table[] = {
      {"Softmax", NBG_FWD_SYMMETRIC, NULL, 0, 0},  {"LogSoftmax", NBG_FWD_RULE, log_softmax_fwd, 0, 0},
      {"Relu6", NBG_FWD_SYMMETRIC, NULL, 0, 0},    {"LeakyRelu", NBG_FWD_SYMMETRIC, NULL, 0, 0},
      {"Selu", NBG_FWD_SYMMETRIC, NULL, 0, 0},     {"Gelu", NBG_FWD_SYMMETRIC, NULL, 0, 0},
      {"L2Loss", NBG_FWD_RULE, l2_loss_fwd, 0, 0},
  };
  nbad_register_fwd_table(table, sizeof table / sizeof table[0]);
}
