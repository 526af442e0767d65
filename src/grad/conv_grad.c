/* Gradients of the convolution, pooling and bias ops (TF's nn_grad.py). Each is built
   from the family's own ops, which have gradients in turn, so higher orders work:
   Conv2D's two backprops are linear in each of their tensor operands, MaxPool's gradient
   ops are piecewise linear in grad, AvgPool's gradient is linear. */
#include "grad.h"

#include <string.h>

static nb_conv2d_attrs conv_attrs_of(const nb_fwd_op *op) {
  int n;
  nb_conv2d_attrs a = {.strides = nb_fwd_attr_ints(op, "strides", &n),
                       .padding = nb_fwd_attr_str(op, "padding"),
                       .data_format = nb_fwd_attr_str(op, "data_format"),
                       .dilations = nb_fwd_attr_ints(op, "dilations", &n)};
  const int64_t *pads = nb_fwd_attr_ints(op, "explicit_paddings", &n);
  a.explicit_paddings = n ? pads : NULL;
  return a;
}

static nb_tensor *shape_of(nb_ctx *c, nb_tensor *x) { return nb_shape_op(c, x, NB_I32); }

/* y = conv(x, W), linear in each: dx = Conv2DBackpropInput(shape(x), W, dy),
   dW = Conv2DBackpropFilter(x, shape(W), dy). */
static nb_code conv2d_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *x = nb_fwd_input(op, 0), *w = nb_fwd_input(op, 1);
  nb_conv2d_attrs a = conv_attrs_of(op);
  if (nb_fwd_input_needs_grad(op, 0)) dxs[0] = nb_conv2d_backprop_input(c, shape_of(c, x), w, dys[0], &a);
  if (nb_fwd_input_needs_grad(op, 1)) dxs[1] = nb_conv2d_backprop_filter(c, x, shape_of(c, w), dys[0], &a);
  return nb_status(c);
}

/* dx = B(W, g) with B bilinear, the adjoint of conv(., W) applied to g: its gradient wrt
   W is the filter gradient of a conv whose input is dy and out gradient g, and its
   gradient wrt g is the conv of dy with W (the adjoint's adjoint). */
static nb_code backprop_input_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *w = nb_fwd_input(op, 1), *g = nb_fwd_input(op, 2);
  nb_conv2d_attrs a = conv_attrs_of(op);
  if (nb_fwd_input_needs_grad(op, 1)) dxs[1] = nb_conv2d_backprop_filter(c, dys[0], shape_of(c, w), g, &a);
  if (nb_fwd_input_needs_grad(op, 2)) dxs[2] = nb_conv2d(c, dys[0], w, &a);
  return nb_status(c);
}

/* dW = F(x, g) = sum of x patches times g: wrt x it is the input gradient of a conv with
   filter dy and out gradient g; wrt g it is the conv of x with dy. */
static nb_code backprop_filter_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *x = nb_fwd_input(op, 0), *g = nb_fwd_input(op, 2);
  nb_conv2d_attrs a = conv_attrs_of(op);
  if (nb_fwd_input_needs_grad(op, 0)) dxs[0] = nb_conv2d_backprop_input(c, shape_of(c, x), dys[0], g, &a);
  if (nb_fwd_input_needs_grad(op, 2)) dxs[2] = nb_conv2d(c, x, dys[0], &a);
  return nb_status(c);
}

/* explicit_paddings only where the op has that attr (MaxPool, MaxPoolGrad). */
static nb_pool_attrs pool_attrs_of(const nb_fwd_op *op, bool keep_explicit) {
  int n;
  nb_pool_attrs a = {.ksize = nb_fwd_attr_ints(op, "ksize", &n),
                     .strides = nb_fwd_attr_ints(op, "strides", &n),
                     .padding = nb_fwd_attr_str(op, "padding"),
                     .data_format = nb_fwd_attr_str(op, "data_format")};
  const int64_t *pads = nb_fwd_attr_ints(op, "explicit_paddings", &n);
  a.explicit_paddings = keep_explicit && n ? pads : NULL;
  return a;
}

/* y = max over each window: dy goes to the window's (first) maximum. */
static nb_code max_pool_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_pool_attrs a = pool_attrs_of(op, true);
  dxs[0] = nb_max_pool_grad(c, nb_fwd_input(op, 0), nb_fwd_output(op, 0), dys[0], &a);
  return nb_status(c);
}

/* nb_max_pool_grad or nb_max_pool_grad_grad: (orig_input, orig_output, grad) -> tensor. */
typedef nb_tensor *max_pool_grad_op(nb_ctx *, nb_tensor *, nb_tensor *, nb_tensor *, const nb_pool_attrs *);

/* The gradient of a MaxPool gradient op: linear in g, locally constant in x and y (zeros,
   as TF). adjoint is the op's adjoint in g, with the same pool attrs. */
static nb_code max_pool_grad_op_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *dy, max_pool_grad_op *adjoint,
                                     nb_tensor **dxs) {
  if (!dy) return NB_OK;
  nb_tensor *x = nb_fwd_input(op, 0), *y = nb_fwd_input(op, 1);
  nb_pool_attrs a = pool_attrs_of(op, false);
  if (nb_fwd_input_needs_grad(op, 0)) dxs[0] = nb_zeros_like(c, x);
  if (nb_fwd_input_needs_grad(op, 1)) dxs[1] = nb_zeros_like(c, y);
  if (nb_fwd_input_needs_grad(op, 2)) dxs[2] = adjoint(c, x, y, dy, &a);
  return nb_status(c);
}

/* MaxPoolGrad(x, y, g) scatters g to the argmax positions: its adjoint is the gather
   MaxPoolGradGrad. */
static nb_code max_pool_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  return max_pool_grad_op_grad(c, op, dys[0], nb_max_pool_grad_grad, dxs);
}

/* MaxPoolGradGrad(x, y, g) gathers g at the argmax positions: its adjoint is the scatter
   MaxPoolGrad. */
static nb_code max_pool_grad_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  return max_pool_grad_op_grad(c, op, dys[0], nb_max_pool_grad, dxs);
}

/* y = window means: each dy spreads evenly over its window (AvgPoolGrad). */
static nb_code avg_pool_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_pool_attrs a = pool_attrs_of(op, false);
  dxs[0] = nb_avg_pool_grad(c, shape_of(c, nb_fwd_input(op, 0)), dys[0], &a);
  return nb_status(c);
}

/* AvgPoolGrad is linear in grad and the adjoint of AvgPool: its gradient is AvgPool of
   dy. The shape input gets none. */
static nb_code avg_pool_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0] || !nb_fwd_input_needs_grad(op, 1)) return NB_OK;
  nb_pool_attrs a = pool_attrs_of(op, false);
  dxs[1] = nb_avg_pool(c, dys[0], &a);
  return nb_status(c);
}

/* y = x + b broadcast along channels: dx = dy, db = dy summed over the other dims. */
static nb_code bias_add_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  if (nb_fwd_input_needs_grad(op, 0)) dxs[0] = dys[0];
  if (nb_fwd_input_needs_grad(op, 1)) dxs[1] = nb_bias_add_grad(c, dys[0], nb_fwd_attr_str(op, "data_format"));
  return nb_status(c);
}

/* db = sum of g over all but the channel dim, so dg is dy broadcast back along those
   dims: dy reshaped to [1, C, 1, ...] for NCHW (rank >= 3), then broadcast to g's shape. */
static nb_code bias_add_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *g = nb_fwd_input(op, 0), *dy = dys[0];
  const char *format = nb_fwd_attr_str(op, "data_format");
  int rank = nb_rank(g);
  if (format && !strcmp(format, "NCHW") && rank != 2) {
    if (rank < 0)
      return nb_set_error(c, NB_UNIMPLEMENTED,
                          "BiasAddGrad gradient: NCHW needs a known rank (out_backprop of node %s)", nb_fwd_name(op));
    int64_t dims[NB_MAX_RANK] = {1, -1, 1, 1, 1, 1, 1, 1};
    dy = nb_reshape(c, dy, dims, rank);
  }
  dxs[0] = nb_broadcast_to_t(c, dy, shape_of(c, g));
  return nb_status(c);
}

void nbg_register_conv_grads(void) {
  static const nbg_entry rules[] = {
      {"Conv2D", conv2d_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"Conv2DBackpropInput", backprop_input_grad, NBG_IN(1) | NBG_IN(2), 0},
      {"Conv2DBackpropFilter", backprop_filter_grad, NBG_IN(0) | NBG_IN(2), 0},
      {"MaxPool", max_pool_grad, NBG_IN(0), NBG_OUT(0)},
      {"MaxPoolGrad", max_pool_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"MaxPoolGradGrad", max_pool_grad_grad_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"AvgPool", avg_pool_grad, NBG_IN(0), 0},
      {"AvgPoolGrad", avg_pool_grad_grad, 0, 0},
      {"BiasAdd", bias_add_grad, 0, 0},
      {"BiasAddGrad", bias_add_grad_grad, NBG_IN(0), 0},
  };
  nbad_register_table(rules, sizeof rules / sizeof *rules);
}

void nbg_register_conv_fwd(void) {
  /* Convolutions are bilinear in data and filter (their backprops in filter or data and
     the incoming gradient); average pooling and bias adds are linear. MaxPool takes TF's
     fallback. */
  static const nbg_fwd_entry table[] = {
      {"Conv2D", NBG_FWD_BILINEAR, NULL, 0, 1},
      {"Conv2DBackpropInput", NBG_FWD_BILINEAR, NULL, 1, 2},
      {"Conv2DBackpropFilter", NBG_FWD_BILINEAR, NULL, 0, 2},
      {"AvgPool", NBG_FWD_LINEAR, NULL, 0, 0},
      {"AvgPoolGrad", NBG_FWD_LINEAR, NULL, 0, 0},
      {"BiasAdd", NBG_FWD_LINEAR, NULL, 0, 0},
      {"BiasAddGrad", NBG_FWD_LINEAR, NULL, 0, 0},
  };
  nbad_register_fwd_table(table, sizeof table / sizeof table[0]);
}
