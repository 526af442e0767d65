/* _CustomGradient: the node that carries a user's gradient function (tf.custom_gradient).
   Its inputs are the forward function's outputs followed by the function's inputs; its
   outputs pass the first num_outputs inputs through. Its gradient (src/grad/custom_grad.c)
   calls the user's function, which the attrs _grad_fn and _user hold, and hands the
   results to the function's inputs, so nothing flows into the forward's own ops. The
   leading underscore keeps it internal: nb_op refuses such types. */
#include "op.h"

#include <string.h>

static nb_code custom_validate(nbop_kargs *k) {
  int64_t n = k->attr[NBOP_CUSTOM_NUM_OUTPUTS].i;
  if (n < 1 || n > k->nin || n != k->nout)
    return nbop_kfail(k, NB_INVALID, "num_outputs %lld must be in [1, %d] and match the %d outputs", (long long)n,
                      k->nin, k->nout);
  return NB_OK;
}

/* Each output like its input, whatever the ranks (the op is any_rank: outputs of several
   dtypes must not take one). */
static nb_code custom_infer(nbop_kargs *k) {
  for (int i = 0; i < k->nout; i++) nbop_meta_like(&k->out[i], k->in[i]);
  return NB_OK;
}

static nb_code custom_kernel(nbop_kargs *k) {
  for (int i = 0; i < k->nout; i++)
    memcpy(nbcore_tdata(k->res[i]), nbcore_tdata(k->in[i]), (size_t)k->in[i]->size * nb_dtype_size(k->in[i]->dtype));
  return NB_OK;
}

static nbop_def custom_ops[] = {
    {.name = "_CustomGradient",
     .nin = 0,
     .variadic = true,
     .nout = NBOP_VARIADIC,
     .alias = -1,
     .any_rank = true,
     .nattrs = 4,
     .attrs = {{"N", NB_ATTR_INT, {.i = 1}, true},
               {"num_outputs", NB_ATTR_INT, {.i = 1}, true},
               {"_grad_fn", NB_ATTR_INT, {.i = 0}, true},
               {"_user", NB_ATTR_INT, {.i = 0}, false}},
     .validate = custom_validate,
     .infer = custom_infer,
     .kernel = custom_kernel},
    /* nb_recompute_grad's node: the same pass-through, its attrs the forward function
       (_fn) and its user pointer; its gradient reruns the function (src/autodiff/recompute.c). */
    {.name = "_RecomputeGrad",
     .nin = 0,
     .variadic = true,
     .nout = NBOP_VARIADIC,
     .alias = -1,
     .any_rank = true,
     .nattrs = 4,
     .attrs = {{"N", NB_ATTR_INT, {.i = 1}, true},
               {"num_outputs", NB_ATTR_INT, {.i = 1}, true},
               {"_fn", NB_ATTR_INT, {.i = 0}, true},
               {"_user", NB_ATTR_INT, {.i = 0}, false}},
     .validate = custom_validate,
     .infer = custom_infer,
     .kernel = custom_kernel},
};

nbop_family nbop_custom_family(void) { return (nbop_family){custom_ops, 2}; }

const nbop_def *nbop_custom_gradient_def(void) { return &custom_ops[0]; }

const nbop_def *nbop_recompute_grad_def(void) { return &custom_ops[1]; }
