/* An op library (tf.load_op_library's kind): a fused Swish and its gradient, as two ops
   with kernels, registered when nb_load_op_library loads this file. docs/writing_ops.md
   walks through it.

     Swish:      y  = x sigmoid(beta x)
     SwishGrad:  dx = dy g(x),  g(x) = dy/dx of Swish = s + beta x s (1 - s),  s = sigmoid(beta x)

   Swish's gradient is SwishGrad; SwishGrad's (for second order) is written with public ops:
   d/d(dy) = ddx g(x) (SwishGrad again) and d/dx = ddx dy g'(x), where
   g'(x) = beta s (1 - s) (2 + beta x (1 - 2 s)) (differentiating s + beta x s (1 - s) with
   s' = beta s (1 - s)). */
#include <math.h>
#include <nabla.h>

#define PARALLEL_MIN 32768 /* elements below which a kernel stays on one thread */

static double sigmoid(double v) { return 1 / (1 + exp(-v)); }

/* ---- kernels: one elementwise loop per dtype, OpenMP across elements ------------------------------- */

/* What one element of an output is, from x, dy (1 for Swish itself) and beta. */
typedef double (*element_fn)(double x, double dy, double beta);

static double swish_at(double x, double dy, double beta) { return dy * x * sigmoid(beta * x); }

static double swish_grad_at(double x, double dy, double beta) {
  double s = sigmoid(beta * x);
  return dy * (s + beta * x * s * (1 - s));
}

/* out[i] = f(x[i], dy[i], beta), x being input x_index and dy input 0 when x is input 1. */
static nb_code elementwise(nb_op_ctx *k, int x_index, element_fn f) {
  int64_t n = nb_num_elements(nb_opctx_input(k, x_index));
  double beta = nb_opctx_attr_float(k, "beta");
  int threads = nb_opctx_threads(k);
  if (nb_dtype_of(nb_opctx_input(k, x_index)) == NB_F32) {
    const float *x = nb_opctx_input_value(k, x_index), *dy = x_index ? nb_opctx_input_value(k, 0) : NULL;
    float *out = nb_opctx_output_data(k, 0);
#pragma omp parallel for num_threads(threads) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = (float)f(x[i], dy ? dy[i] : 1, beta);
  } else {
    const double *x = nb_opctx_input_value(k, x_index), *dy = x_index ? nb_opctx_input_value(k, 0) : NULL;
    double *out = nb_opctx_output_data(k, 0);
#pragma omp parallel for num_threads(threads) if (n >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = f(x[i], dy ? dy[i] : 1, beta);
  }
  return NB_OK;
}

static nb_code swish_kernel(nb_op_ctx *k) { return elementwise(k, 0, swish_at); }
static nb_code swish_grad_kernel(nb_op_ctx *k) { return elementwise(k, 1, swish_grad_at); }

/* SwishGrad's dy and x have one shape (no broadcasting): the output's. */
static nb_code swish_grad_shape(nb_op_ctx *k) {
  const nb_tensor *dy = nb_opctx_input(k, 0), *x = nb_opctx_input(k, 1);
  bool same = nb_rank(dy) == nb_rank(x);
  for (int d = 0; same && d < nb_rank(x); d++) same = nb_shape(dy)[d] == nb_shape(x)[d];
  if (!same) return nb_opctx_fail(k, NB_SHAPE, "dy and x must have one shape");
  return nb_opctx_set_output_shape(k, 0, nb_rank(x), nb_shape(x));
}

/* ---- gradients ------------------------------------------------------------------------------- */

static nb_tensor *call(nb_ctx *c, const char *type, nb_tensor **in, int nin, double beta) {
  nb_attr attr = nb_attr_float("beta", beta);
  nb_tensor *out = NULL;
  nb_op(c, type, in, nin, &attr, 1, &out, 1);
  return out;
}

/* dSwish: dx = SwishGrad(dy, x). Reads input x. */
static nb_code swish_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *in[2] = {dys[0], nb_fwd_input(op, 0)};
  dxs[0] = call(c, "SwishGrad", in, 2, nb_fwd_attr_float(op, "beta"));
  return nb_status(c);
}

/* dSwishGrad (see the top): d(dy) = SwishGrad(ddx, x), dx = ddx dy g'(x). Reads dy and x. */
static nb_code swish_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  double beta = nb_fwd_attr_float(op, "beta");
  nb_tensor *dy = nb_fwd_input(op, 0), *x = nb_fwd_input(op, 1), *ddx = dys[0];
  nb_dtype t = nb_dtype_of(x);
  nb_tensor *in[2] = {ddx, x};
  dxs[0] = call(c, "SwishGrad", in, 2, beta);
  nb_tensor *bx = nb_mul(c, nb_scalar(c, t, beta), x), *s = nb_sigmoid(c, bx);
  nb_tensor *one = nb_scalar(c, t, 1), *st = nb_mul(c, s, nb_sub(c, one, s));
  nb_tensor *inner = nb_add(c, nb_scalar(c, t, 2), nb_mul(c, bx, nb_sub(c, one, nb_mul(c, nb_scalar(c, t, 2), s))));
  nb_tensor *g1 = nb_mul(c, nb_mul(c, nb_scalar(c, t, beta), st), inner);
  dxs[1] = nb_mul(c, nb_mul(c, ddx, dy), g1);
  return nb_status(c);
}

/* ---- registration ------------------------------------------------------------------------------ */

static const nb_op_arg x_arg = {"x", NB_F32, "T", NULL}, dy_arg = {"dy", NB_F32, "T", NULL};
static const nb_op_arg y_arg = {"y", NB_F32, "T", NULL}, dx_arg = {"dx", NB_F32, "T", NULL};

NB_OP_LIBRARY_EXPORT int nabla_op_library_abi(void) { return NB_ABI_VERSION; }

NB_OP_LIBRARY_EXPORT nb_code nabla_op_library_init(int host_abi) {
  if (host_abi != NB_ABI_VERSION) return NB_UNIMPLEMENTED;
  nb_op_attr_def attrs[2] = {
      {"T", NB_ATTR_TYPE, true, {0}, 1u << NB_F32 | 1u << NB_F64},
      {"beta", NB_ATTR_FLOAT, false, nb_attr_float("beta", 1.0), 0},
  };
  const nb_op_arg grad_in[2] = {dy_arg, x_arg};
  nb_op_spec swish = {"Swish", &x_arg, 1, &y_arg, 1, attrs, 2, NULL, swish_kernel, false};
  nb_op_spec swish_grad_op = {"SwishGrad",      grad_in,           2,    &dx_arg, 1, attrs, 2,
                              swish_grad_shape, swish_grad_kernel, false};
  nb_code code = nb_register_op(&swish);
  if (!code) code = nb_register_op(&swish_grad_op);
  if (!code) code = nb_register_gradient("Swish", swish_grad);
  if (!code) code = nb_register_gradient_reads("Swish", 1u << 0, 0);
  if (!code) code = nb_register_gradient("SwishGrad", swish_grad_grad);
  if (!code) code = nb_register_gradient_reads("SwishGrad", 1u << 0 | 1u << 1, 0);
  return code;
}
