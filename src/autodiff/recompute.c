/* The gradient of _RecomputeGrad (nb_recompute_grad, TF's recompute_grad): the forward
   pass kept only the function's inputs and outputs, so the gradient runs the function
   again on the same inputs and differentiates that run, weighted by the incoming dys:
   under a fresh one-shot tape in an eager context, with nb_gradients in a graph (the
   recomputed ops land in the gradient graph). Either way the recomputation and its
   backward pass are ordinary ops of c, so an outer persistent tape or a later
   nb_gradients differentiates them again (higher order). */
#include "autodiff.h"

#include <stdlib.h>
#include <string.h>

static nb_custom_fn fn_of(const nb_fwd_op *op) {
  nb_custom_fn fn;
  int64_t bits = nb_fwd_attr_int(op, "_fn");
  memcpy(&fn, &bits, sizeof fn);
  return fn;
}

static void *user_of(const nb_fwd_op *op) {
  void *p;
  int64_t bits = nb_fwd_attr_int(op, "_user");
  memcpy(&p, &bits, sizeof p);
  return p;
}

/* Runs the function again (recorded, unlike the forward pass) into outs. */
static nb_code rerun(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *ins, int nin, nb_tensor **outs, int nout) {
  nb_code code = nbcore_callback_code(c, "nb_recompute_grad: the function, rerun for the gradient",
                                      fn_of(op)(c, ins, nin, outs, nout, user_of(op)));
  for (int i = 0; i < nout && !code; i++)
    if (!outs[i])
      code =
          nbcore_fail(c, NB_INVALID, "nb_recompute_grad: the function, rerun for the gradient, left output %d NULL", i);
  return code;
}

/* dxs[i] = sum_j dys[j] * d outs[j] / d ins[i], the function run again under a tape. */
static nb_code eager_vjp(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *ins, int nin, nb_tensor **outs, int nout,
                         nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tape *t = nb_tape_begin(c, 0);
  if (!t) return nb_status(c) ? nb_status(c) : nbcore_fail(c, NB_NOMEM, "nb_recompute_grad: out of memory");
  for (int i = 0; i < nin; i++) nb_tape_watch(t, ins[i]);
  nb_code code = rerun(c, op, ins, nin, outs, nout);
  if (!code) code = nb_tape_gradient(t, outs, nout, ins, nin, dys, dxs);
  nb_tape_end(t);
  return code;
}

nb_code nbad_recompute_gradient(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  int nout = op->nout, nin = op->nin - nout;
  nb_tensor **ins = calloc((size_t)(nin + nout + 1), sizeof *ins), **outs = ins + nin;
  if (!ins) return nbcore_fail(c, NB_NOMEM, "nb_recompute_grad: out of memory");
  for (int i = 0; i < nin; i++) ins[i] = op->in[nout + i];
  nb_code code;
  if (c->graph) {
    code = rerun(c, op, ins, nin, outs, nout);
    nb_grad_opts o = {.grad_ys = dys};
    if (!code) code = nb_gradients(c, outs, nout, ins, nin, &o, dxs + nout);
  } else {
    code = eager_vjp(c, op, ins, nin, outs, nout, dys, dxs + nout);
  }
  free(ins);
  return code;
}
