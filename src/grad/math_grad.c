/* Gradients of the math family, after TF's math_grad.py and nn_grad.py. Every rule is
   written with public op calls only, so it builds graph nodes, runs on a tape and can be
   differentiated again (the fused gradient ops have gradients of their own below). */
#include "grad.h"

static nb_tensor *out0(const nb_fwd_op *op) { return nb_fwd_output(op, 0); }
static bool is_float(nb_dtype t) { return t == NB_F32 || t == NB_F64; }

/* The gradients gx, gy of a broadcasting binary op, each summed down to its input's shape. */
static nb_code reduced_pair(nb_ctx *c, const nb_fwd_op *op, nb_tensor **dxs, nb_tensor *gx, nb_tensor *gy) {
  dxs[0] = NEED(0) ? nbg_reduce_to(c, gx, in0(op)) : NULL;
  dxs[1] = NEED(1) ? nbg_reduce_to(c, gy, in1(op)) : NULL;
  return nb_status(c);
}

/* ---- unary ----------------------------------------------------------------------------- */

/* y = -x: dx = -dy */
static nb_code neg_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  (void)op;
  dxs[0] = nb_neg(c, dy);
  return nb_status(c);
}

/* y = e^x: dy/dx = y */
static nb_code exp_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_mul(c, dy, out0(op));
  return nb_status(c);
}

/* y = ln x: dy/dx = 1/x */
static nb_code log_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_mul(c, dy, nb_reciprocal(c, in0(op)));
  return nb_status(c);
}

/* y = ln(1 + x): dy/dx = 1/(1 + x) */
static nb_code log1p_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *x = in0(op);
  dxs[0] = nb_mul(c, dy, nb_reciprocal(c, nb_add(c, scalar(c, x, 1), x)));
  return nb_status(c);
}

/* y = sqrt(x): dy/dx = 1/(2y), so dx = SqrtGrad(y, dy) */
static nb_code sqrt_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_sqrt_grad(c, out0(op), dy);
  return nb_status(c);
}

/* y = x^(-1/2): dy/dx = -y^3/2, so dx = RsqrtGrad(y, dy) */
static nb_code rsqrt_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_rsqrt_grad(c, out0(op), dy);
  return nb_status(c);
}

/* y = 1/x: dy/dx = -y^2, so dx = ReciprocalGrad(y, dy) */
static nb_code reciprocal_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_reciprocal_grad(c, out0(op), dy);
  return nb_status(c);
}

/* y = x^2: dy/dx = 2x */
static nb_code square_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *x = in0(op);
  dxs[0] = nb_mul(c, dy, nb_mul(c, x, scalar(c, x, 2)));
  return nb_status(c);
}

/* y = |x|: dy/dx = sign(x) (0 at x = 0) */
static nb_code abs_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_mul(c, dy, nb_sign(c, in0(op)));
  return nb_status(c);
}

/* y = sign(x) is piecewise constant: TF gives zeros, not "no gradient" */
static nb_code sign_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  (void)dy;
  dxs[0] = nb_zeros_like(c, in0(op));
  return nb_status(c);
}

/* y = tanh x: dy/dx = 1 - y^2, so dx = TanhGrad(y, dy) */
static nb_code tanh_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_tanh_grad(c, out0(op), dy);
  return nb_status(c);
}

/* y = sigmoid(x): dy/dx = y (1 - y), so dx = SigmoidGrad(y, dy) */
static nb_code sigmoid_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_sigmoid_grad(c, out0(op), dy);
  return nb_status(c);
}

/* y = max(x, 0): dy/dx = [y > 0] (TF reads the output), so dx = ReluGrad(dy, y) */
static nb_code relu_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_relu_grad(c, dy, out0(op));
  return nb_status(c);
}

/* y = elu(x): dy/dx = y + 1 where y < 0, else 1, so dx = EluGrad(dy, y) */
static nb_code elu_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_elu_grad(c, dy, out0(op));
  return nb_status(c);
}

/* y = ln(1 + e^x): dy/dx = sigmoid(x), so dx = SoftplusGrad(dy, x) */
static nb_code softplus_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_softplus_grad(c, dy, in0(op));
  return nb_status(c);
}

/* y = sin x: dy/dx = cos x */
static nb_code sin_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_mul(c, dy, nb_cos(c, in0(op)));
  return nb_status(c);
}

/* y = cos x: dy/dx = -sin x */
static nb_code cos_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  dxs[0] = nb_mul(c, nb_neg(c, dy), nb_sin(c, in0(op)));
  return nb_status(c);
}

/* ---- binary (broadcasting) ---------------------------------------------------------------- */

/* z = x + y (AddV2 and Add): dz/dx = dz/dy = 1 */
static nb_code add_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  return reduced_pair(c, op, dxs, dy, dy);
}

/* z = x - y: dz/dx = 1, dz/dy = -1 */
static nb_code sub_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  return reduced_pair(c, op, dxs, dy, NEED(1) ? nb_neg(c, dy) : NULL);
}

/* z = x y: dz/dx = y, dz/dy = x */
static nb_code mul_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *x = in0(op), *y = in1(op);
  return reduced_pair(c, op, dxs, NEED(0) ? nb_mul(c, dy, y) : NULL, NEED(1) ? nb_mul(c, x, dy) : NULL);
}

/* z = x / y: dz/dx = 1/y, dz/dy = -x/y^2 (as (-x/y)/y, TF's order, which cannot overflow y^2) */
static nb_code real_div_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *x = in0(op), *y = in1(op);
  nb_tensor *gy = NEED(1) ? nb_mul(c, dy, nb_real_div(c, nb_real_div(c, nb_neg(c, x), y), y)) : NULL;
  return reduced_pair(c, op, dxs, NEED(0) ? nb_real_div(c, dy, y) : NULL, gy);
}

/* TF's ln x for the exponent's gradient: 0 where x <= 0 (no real logarithm there), computed
   on a safe input so the unused branch holds no NaN that a second derivative would spread. */
static nb_tensor *log_where_positive(nb_ctx *c, nb_tensor *x) {
  nb_tensor *positive = nb_greater(c, x, scalar(c, x, 0));
  nb_tensor *safe_x = nb_select(c, positive, x, nb_ones_like(c, x));
  return nb_select(c, positive, nb_log(c, safe_x), nb_zeros_like(c, x));
}

/* z = x^y: dz/dx = y x^(y-1), dz/dy = z ln x (taken as 0 where x <= 0) */
static nb_code pow_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *x = in0(op), *y = in1(op);
  nb_tensor *gx = NEED(0) ? nb_mul(c, nb_mul(c, dy, y), nb_pow(c, x, nb_sub(c, y, scalar(c, y, 1)))) : NULL;
  nb_tensor *gy = NEED(1) ? nb_mul(c, nb_mul(c, dy, out0(op)), log_where_positive(c, x)) : NULL;
  return reduced_pair(c, op, dxs, gx, gy);
}

/* z = (x - y)^2: dz/dx = 2 (x - y) = -dz/dy */
static nb_code squared_difference_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *x = in0(op), *y = in1(op);
  nb_tensor *gx = nb_mul(c, nb_mul(c, scalar(c, dy, 2), dy), nb_sub(c, x, y));
  return reduced_pair(c, op, dxs, gx, NEED(1) ? nb_neg(c, gx) : NULL);
}

/* z = x where x_wins else y: dz goes to the selected input; ties go to x as in TF. */
static nb_code select_between(nb_ctx *c, const nb_fwd_op *op, nb_tensor *dy, nb_tensor **dxs, nb_tensor *x_wins) {
  nb_tensor *zero = scalar(c, dy, 0);
  return reduced_pair(c, op, dxs, NEED(0) ? nb_select(c, x_wins, dy, zero) : NULL,
                      NEED(1) ? nb_select(c, x_wins, zero, dy) : NULL);
}

/* z = max(x, y): x is selected where x >= y */
static nb_code maximum_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  return select_between(c, op, dy, dxs, nb_greater_equal(c, in0(op), in1(op)));
}

/* z = min(x, y): x is selected where x <= y */
static nb_code minimum_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  return select_between(c, op, dy, dxs, nb_less_equal(c, in0(op), in1(op)));
}

/* ---- selection, casts, sums, identity ---------------------------------------------------------- */

/* z = cond ? t : e (all broadcasting): dz goes to the branch taken, none to the bool cond */
static nb_code select_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *cond = in0(op), *zero = scalar(c, dy, 0);
  dxs[0] = NULL;
  dxs[1] = NEED(1) ? nbg_reduce_to(c, nb_select(c, cond, dy, zero), nb_fwd_input(op, 1)) : NULL;
  dxs[2] = NEED(2) ? nbg_reduce_to(c, nb_select(c, cond, zero, dy), nb_fwd_input(op, 2)) : NULL;
  return nb_status(c);
}

/* y = cast(x): the gradient casts back, only between float types (none to or from ints/bool) */
static nb_code cast_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_dtype src = nb_dtype_of(in0(op));
  dxs[0] = is_float(src) && is_float(nb_dtype_of(dy)) ? nb_cast(c, dy, src) : NULL;
  return nb_status(c);
}

/* y = x_1 + ... + x_n (AddN, AccumulateNV2): each input gets dy */
static nb_code add_n_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  (void)c;
  for (int i = 0; i < nb_fwd_num_inputs(op); i++) dxs[i] = dy;
  return NB_OK;
}

/* y = x: dx = dy */
static nb_code identity_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  (void)c;
  (void)op;
  dxs[0] = dy;
  return NB_OK;
}

/* PreventGradient exists to make differentiating through it an error (TF's LookupError,
   as for an op without a gradient), quoting the reason its builder gave. */
static nb_code prevent_gradient_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  (void)dys, (void)dxs;
  const char *reason = nb_fwd_attr_str(op, "message");
  return nb_set_error(c, NB_NO_GRADIENT, "Gradient explicitly disabled. Reason: %s (operation '%s', op type: %s)",
                      reason ? reason : "", nb_fwd_name(op), nb_fwd_type(op));
}

/* ---- the fused gradient ops (second order) ---------------------------------------------------------
   Each is g(y, dy) (or g(dy, x)) written d below; its gradient takes the incoming ddx. */

/* d = dy (1 - y^2): dd/dy = -2 y dy, dd/d(dy) = 1 - y^2, i.e. TanhGrad(y, ddx) */
static nb_code tanh_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *y = in0(op), *g = in1(op);
  dxs[0] = NEED(0) ? nb_mul(c, nb_mul(c, nb_mul(c, dy, scalar(c, dy, -2)), g), y) : NULL;
  dxs[1] = NEED(1) ? nb_tanh_grad(c, y, dy) : NULL;
  return nb_status(c);
}

/* d = dy y (1 - y): dd/dy = dy (1 - 2y), dd/d(dy) = y (1 - y), i.e. SigmoidGrad(y, ddx) */
static nb_code sigmoid_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *y = in0(op), *gb = NEED(0) ? nb_mul(c, dy, in1(op)) : NULL;
  dxs[0] = NEED(0) ? nb_sub(c, gb, nb_mul(c, nb_mul(c, scalar(c, gb, 2), gb), y)) : NULL;
  dxs[1] = NEED(1) ? nb_sigmoid_grad(c, y, dy) : NULL;
  return nb_status(c);
}

/* d = -dy y^3 / 2: dd/dy = -3/2 dy y^2, dd/d(dy) = -y^3 / 2, i.e. RsqrtGrad(y, ddx) */
static nb_code rsqrt_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *y = in0(op), *g = in1(op);
  dxs[0] = NEED(0) ? nb_mul(c, nb_mul(c, nb_mul(c, scalar(c, dy, -1.5), dy), g), nb_square(c, y)) : NULL;
  dxs[1] = NEED(1) ? nb_rsqrt_grad(c, y, dy) : NULL;
  return nb_status(c);
}

/* d = dy / (2y): dd/dy = -d / y, dd/d(dy) = 1 / (2y) */
static nb_code sqrt_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *ga = nb_real_div(c, dy, in0(op));
  dxs[0] = NEED(0) ? nb_mul(c, nb_neg(c, ga), out0(op)) : NULL;
  dxs[1] = NEED(1) ? nb_mul(c, scalar(c, ga, 0.5), ga) : NULL;
  return nb_status(c);
}

/* d = -dy y^2: dd/dy = -2 y dy, dd/d(dy) = -y^2, i.e. ReciprocalGrad(y, ddx) */
static nb_code reciprocal_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *y = in0(op), *g = in1(op);
  dxs[0] = NEED(0) ? nb_mul(c, nb_mul(c, nb_mul(c, dy, scalar(c, dy, -2)), g), y) : NULL;
  dxs[1] = NEED(1) ? nb_reciprocal_grad(c, y, dy) : NULL;
  return nb_status(c);
}

/* d = gradients [features > 0]: linear in gradients (ReluGrad(ddx, features)), piecewise
   constant in features (zeros) */
static nb_code relu_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *features = in1(op);
  dxs[0] = NEED(0) ? nb_relu_grad(c, dy, features) : NULL;
  dxs[1] = NEED(1) ? nb_zeros_like(c, features) : NULL;
  return nb_status(c);
}

/* d = gradients (outputs + 1) where outputs < 0, else gradients: linear in gradients
   (EluGrad(ddx, outputs)); dd/d(outputs) = gradients where outputs < 0, else 0 */
static nb_code elu_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  return nbg_exp_linear_grad_grad(c, op, dy, dxs, nb_elu_grad);
}

/* d = gradients sigmoid(x): linear in gradients (SoftplusGrad(ddx, x)); dd/dx =
   gradients sigmoid'(x) = gradients / (e^-x + 2 + e^x) */
static nb_code softplus_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *dy = dys[0];
  if (!dy) return NB_OK;
  nb_tensor *g = in0(op), *x = in1(op);
  dxs[0] = NEED(0) ? nb_softplus_grad(c, dy, x) : NULL;
  if (NEED(1)) {
    nb_tensor *denom = nb_add(c, nb_add(c, nb_exp(c, nb_neg(c, x)), scalar(c, x, 2)), nb_exp(c, x));
    dxs[1] = nb_real_div(c, nb_mul(c, dy, g), denom);
  }
  return nb_status(c);
}

void nbg_register_math_grads(void) {
  /* What each rule reads is TF's choice: x, y or neither for y = f(x); only shapes for
     Add and Sub; Pow z too (dz/dy = z ln x); SelectV2 its condition; the fused gradient
     ops both inputs (SqrtGrad its output too). */
  static const nbg_entry table[] = {
      {"Neg", neg_grad, 0, 0},
      {"Exp", exp_grad, 0, NBG_OUT(0)},
      {"Log", log_grad, NBG_IN(0), 0},
      {"Log1p", log1p_grad, NBG_IN(0), 0},
      {"Sqrt", sqrt_grad, 0, NBG_OUT(0)},
      {"Rsqrt", rsqrt_grad, 0, NBG_OUT(0)},
      {"Reciprocal", reciprocal_grad, 0, NBG_OUT(0)},
      {"Square", square_grad, NBG_IN(0), 0},
      {"Abs", abs_grad, NBG_IN(0), 0},
      {"Sign", sign_grad, 0, 0},
      {"Tanh", tanh_grad, 0, NBG_OUT(0)},
      {"Sigmoid", sigmoid_grad, 0, NBG_OUT(0)},
      {"Relu", relu_grad, 0, NBG_OUT(0)},
      {"Elu", elu_grad, 0, NBG_OUT(0)},
      {"Softplus", softplus_grad, NBG_IN(0), 0},
      {"Sin", sin_grad, NBG_IN(0), 0},
      {"Cos", cos_grad, NBG_IN(0), 0},
      {"AddV2", add_grad, 0, 0},
      {"Add", add_grad, 0, 0},
      {"Sub", sub_grad, 0, 0},
      {"Mul", mul_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"RealDiv", real_div_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"Pow", pow_grad, NBG_IN(0) | NBG_IN(1), NBG_OUT(0)},
      {"SquaredDifference", squared_difference_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"Maximum", maximum_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"Minimum", minimum_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"SelectV2", select_grad, NBG_IN(0), 0},
      {"Cast", cast_grad, 0, 0},
      {"AddN", add_n_grad, 0, 0},
      {"AccumulateNV2", add_n_grad, 0, 0},
      {"Identity", identity_grad, 0, 0},
      {"PreventGradient", prevent_gradient_grad, 0, 0},
      {"TanhGrad", tanh_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"SigmoidGrad", sigmoid_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"RsqrtGrad", rsqrt_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"SqrtGrad", sqrt_grad_grad, NBG_IN(0) | NBG_IN(1), NBG_OUT(0)},
      {"ReciprocalGrad", reciprocal_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"ReluGrad", relu_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"EluGrad", elu_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"SoftplusGrad", softplus_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      /* TF's NotDifferentiable math ops: bool results, and StopGradient by definition */
      {"Less", NULL, 0, 0},
      {"LessEqual", NULL, 0, 0},
      {"Greater", NULL, 0, 0},
      {"GreaterEqual", NULL, 0, 0},
      {"Equal", NULL, 0, 0},
      {"NotEqual", NULL, 0, 0},
      {"LogicalAnd", NULL, 0, 0},
      {"LogicalOr", NULL, 0, 0},
      {"LogicalNot", NULL, 0, 0},
      {"StopGradient", NULL, 0, 0},
  };
  nbad_register_table(table, sizeof table / sizeof table[0]);
}

/* ---- forward rules ----------------------------------------------------------------------
   tz from the tangents ta, tb of z = f(a, b) (NULL: zero). Each term mixes an a-shaped
   and a b-shaped factor (or z), so it broadcasts to z's shape. */

/* z = a / b: tz = ta / b - z tb / b */
static nb_code real_div_fwd(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor **tout) {
  nb_tensor *b = in1(op);
  nb_tensor *from_a = tin[0] ? nb_real_div(c, tin[0], b) : NULL;
  nb_tensor *from_b = tin[1] ? nb_real_div(c, nb_mul(c, out0(op), tin[1]), b) : NULL;
  tout[0] = from_b ? (from_a ? nb_sub(c, from_a, from_b) : nb_neg(c, from_b)) : from_a;
  return nb_status(c);
}

/* z = a^b: tz = ta b a^(b-1) + tb z ln a (ln a taken as 0 where a <= 0, as the gradient) */
static nb_code pow_fwd(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor **tout) {
  nb_tensor *a = in0(op), *b = in1(op);
  nb_tensor *from_a = tin[0] ? nb_mul(c, nb_mul(c, tin[0], b), nb_pow(c, a, nb_sub(c, b, scalar(c, b, 1)))) : NULL;
  nb_tensor *from_b = tin[1] ? nb_mul(c, nb_mul(c, tin[1], out0(op)), log_where_positive(c, a)) : NULL;
  tout[0] = nbg_add_terms(c, from_a, from_b);
  return nb_status(c);
}

/* z = (a - b)^2: tz = 2 (a - b) (ta - tb) */
static nb_code squared_difference_fwd(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor **tout) {
  nb_tensor *twice = nb_mul(c, scalar(c, in0(op), 2), nb_sub(c, in0(op), in1(op)));
  nb_tensor *from_a = tin[0] ? nb_mul(c, twice, tin[0]) : NULL;
  nb_tensor *from_b = tin[1] ? nb_mul(c, twice, tin[1]) : NULL;
  tout[0] = from_b ? (from_a ? nb_sub(c, from_a, from_b) : nb_neg(c, from_b)) : from_a;
  return nb_status(c);
}

/* z = a where a_wins else b: tz is the selected input's tangent (ties to a, as the gradient) */
static nb_tensor *select_tangent(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor *a_wins) {
  nb_tensor *zero = scalar(c, in0(op), 0);
  return nb_select(c, a_wins, tin[0] ? tin[0] : zero, tin[1] ? tin[1] : zero);
}

static nb_code maximum_fwd(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor **tout) {
  tout[0] = select_tangent(c, op, tin, nb_greater_equal(c, in0(op), in1(op)));
  return nb_status(c);
}

static nb_code minimum_fwd(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor **tout) {
  tout[0] = select_tangent(c, op, tin, nb_less_equal(c, in0(op), in1(op)));
  return nb_status(c);
}

void nbg_register_math_fwd(void) {
  /* Elementwise one-input ops have diagonal Jacobians; sums, selection and casts are
     linear; Mul is bilinear. The gradient-of-gradient ops take TF's fallback. */
  static const nbg_fwd_entry table[] = {
      {"Neg", NBG_FWD_LINEAR, NULL, 0, 0},           {"Exp", NBG_FWD_SYMMETRIC, NULL, 0, 0},
      {"Log", NBG_FWD_SYMMETRIC, NULL, 0, 0},        {"Log1p", NBG_FWD_SYMMETRIC, NULL, 0, 0},
      {"Sqrt", NBG_FWD_SYMMETRIC, NULL, 0, 0},       {"Rsqrt", NBG_FWD_SYMMETRIC, NULL, 0, 0},
      {"Reciprocal", NBG_FWD_SYMMETRIC, NULL, 0, 0}, {"Square", NBG_FWD_SYMMETRIC, NULL, 0, 0},
      {"Abs", NBG_FWD_SYMMETRIC, NULL, 0, 0},        {"Sign", NBG_FWD_SYMMETRIC, NULL, 0, 0},
      {"Tanh", NBG_FWD_SYMMETRIC, NULL, 0, 0},       {"Sigmoid", NBG_FWD_SYMMETRIC, NULL, 0, 0},
      {"Relu", NBG_FWD_SYMMETRIC, NULL, 0, 0},       {"Elu", NBG_FWD_SYMMETRIC, NULL, 0, 0},
      {"Softplus", NBG_FWD_SYMMETRIC, NULL, 0, 0},   {"Sin", NBG_FWD_SYMMETRIC, NULL, 0, 0},
      {"Cos", NBG_FWD_SYMMETRIC, NULL, 0, 0},        {"AddV2", NBG_FWD_LINEAR, NULL, 0, 0},
      {"Add", NBG_FWD_LINEAR, NULL, 0, 0},           {"Sub", NBG_FWD_LINEAR, NULL, 0, 0},
      {"Mul", NBG_FWD_BILINEAR, NULL, 0, 1},         {"RealDiv", NBG_FWD_RULE, real_div_fwd, 0, 0},
      {"Pow", NBG_FWD_RULE, pow_fwd, 0, 0},          {"SquaredDifference", NBG_FWD_RULE, squared_difference_fwd, 0, 0},
      {"Maximum", NBG_FWD_RULE, maximum_fwd, 0, 0},  {"Minimum", NBG_FWD_RULE, minimum_fwd, 0, 0},
      {"SelectV2", NBG_FWD_LINEAR, NULL, 0, 0},      {"Cast", NBG_FWD_LINEAR, NULL, 0, 0},
      {"AddN", NBG_FWD_LINEAR, NULL, 0, 0},          {"AccumulateNV2", NBG_FWD_LINEAR, NULL, 0, 0},
      {"Identity", NBG_FWD_LINEAR, NULL, 0, 0},
  };
  nbad_register_fwd_table(table, sizeof table / sizeof table[0]);
}
