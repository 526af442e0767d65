/* The gradient of _CustomGradient: the user's function, found in the node's attrs, gets
   the wrapped function's inputs and outputs; its results go to those inputs only. */
#include "grad.h"

#include <stdlib.h>
#include <string.h>

/* Pointers travel through int attrs: the bits are copied, not converted. */
static nb_custom_grad_fn as_fn(int64_t bits) {
  nb_custom_grad_fn fn;
  memcpy(&fn, &bits, sizeof fn);
  return fn;
}

static void *as_ptr(int64_t bits) {
  void *p;
  memcpy(&p, &bits, sizeof p);
  return p;
}

static nb_code custom_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  int nout = (int)nb_fwd_attr_int(op, "num_outputs"), nin = nb_fwd_num_inputs(op) - nout;
  nb_tensor **ins = malloc((size_t)(nin + nout + 1) * sizeof *ins), **outs = ins + nin;
  if (!ins) return nb_set_error(c, NB_NOMEM, "custom gradient: out of memory");
  for (int i = 0; i < nin; i++) ins[i] = nb_fwd_input(op, nout + i);
  for (int i = 0; i < nout; i++) outs[i] = nb_fwd_output(op, i);
  nb_code code = as_fn(nb_fwd_attr_int(op, "_grad_fn"))(c, ins, nin, outs, nout, dys, dxs + nout,
                                                        as_ptr(nb_fwd_attr_int(op, "_user")));
  free(ins);
  return code ? code : nb_status(c);
}

void nbg_register_custom_grads(void) {
  /* the user's gradient may read any input or output */
  static const nbg_entry rules[] = {{"_CustomGradient", custom_grad, NBG_ALL, NBG_ALL}};
  nbad_register_table(rules, 1);
}
