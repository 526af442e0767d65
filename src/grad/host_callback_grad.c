/* The gradient of PyFunc and PyFuncStateless. TF registers both NotDifferentiable: a
   function without a gradient callback gives its inputs gradient none. With one
   (tf.py_function's behaviour) the gradient is a host-callback node of the same
   statefulness calling it on (inputs, outputs, upstream gradients); that node's own
   function has no gradient callback, so differentiating it again gives none. */
#include "grad.h"

#include <stdlib.h>
#include <string.h>

static nb_host_func *node_func(const nb_fwd_op *op) {
  int64_t bits = nb_fwd_attr_int(op, "_func");
  nb_host_func *f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* The gradient node's inputs, args[0..nin + 2 nout): the op's inputs, its outputs, and the
   upstream gradients, zeros for int/bool outputs (a node input cannot be absent). */
static nb_code gradient_args(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **args) {
  int nin = nb_fwd_num_inputs(op), nout = nb_fwd_num_outputs(op);
  for (int i = 0; i < nin; i++) args[i] = nb_fwd_input(op, i);
  for (int i = 0; i < nout; i++) {
    args[nin + i] = nb_fwd_output(op, i);
    args[nin + nout + i] = dys[i] ? dys[i] : nb_zeros_like(c, args[nin + i]);
  }
  return nb_status(c);
}

/* Each gradient is declared like its input: same dtype, its static shape. */
static void gradient_spec(const nb_fwd_op *op, nb_host_output *spec) {
  for (int i = 0; i < nb_fwd_num_inputs(op); i++) {
    nb_tensor *x = nb_fwd_input(op, i);
    spec[i].dtype = nb_dtype_of(x);
    spec[i].rank = nb_rank(x);
    if (spec[i].rank > 0) memcpy(spec[i].shape, nb_shape(x), (size_t)spec[i].rank * sizeof *spec[i].shape);
  }
}

static nb_code call_gradient(nb_ctx *c, const nb_fwd_op *op, nb_host_func *grad, nb_tensor *const *dys,
                             nb_tensor **dxs) {
  int nin = nb_fwd_num_inputs(op), nout = nb_fwd_num_outputs(op);
  nb_tensor **args = malloc((size_t)(2 * nin + 2 * nout) * sizeof *args), **res = NULL;
  nb_host_output *spec = malloc((size_t)nin * sizeof *spec);
  nb_code code = args && spec ? gradient_args(c, op, dys, args)
                              : nb_set_error(c, NB_NOMEM, "%s gradient: out of memory", nb_fwd_type(op));
  if (!code) {
    res = args + nin + 2 * nout;
    gradient_spec(op, spec);
    code = nb_py_func(c, grad, strcmp(nb_fwd_type(op), "PyFunc") == 0, args, nin + 2 * nout, spec, res, nin);
  }
  for (int i = 0; i < nin && !code; i++) { /* int and bool inputs get none */
    bool is_float = nb_dtype_of(res[i]) == NB_F32 || nb_dtype_of(res[i]) == NB_F64;
    dxs[i] = is_float ? res[i] : NULL;
    if (!is_float) nb_tensor_free(res[i]);
  }
  free(args);
  free(spec);
  return code;
}

static nb_code py_func_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_host_func *grad;
  if (nb_fwd_num_inputs(op) == 0) return NB_OK; /* nothing to differentiate */
  if (nb_host_func_gradient(node_func(op), &grad))
    return nb_set_error(c, NB_NOMEM, "%s gradient: out of memory", nb_fwd_type(op));
  if (!grad) return NB_OK; /* NotDifferentiable: every input's gradient is none */
  nb_code code = call_gradient(c, op, grad, dys, dxs);
  nb_host_func_release(grad); /* a graph node made of it holds its own reference */
  return code;
}

void nbg_register_host_callback_grads(void) {
  /* a gradient callback may read any input or output */
  static const nbg_entry rules[] = {{"PyFunc", py_func_grad, NBG_ALL, NBG_ALL},
                                    {"PyFuncStateless", py_func_grad, NBG_ALL, NBG_ALL}};
  nbad_register_table(rules, 2);
}
