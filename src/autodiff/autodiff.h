/* Internal autodiff: the gradient registry and the forward-op view gradient functions get. */
#ifndef NB_AUTODIFF_H
#define NB_AUTODIFF_H

#include "../graph/graph.h"

/* TF's ForwardOperation: what a gradient function sees of the op it differentiates. */
struct nb_fwd_op {
  const nb_op_def *def;
  const char *name;
  int nin, nout;
  nb_tensor *const *in;
  nb_tensor *const *out;
  const nb_attrval *attr;
  const bool *needs_grad;  /* per input; NULL: every input */
};

typedef enum { NB_GRAD_NONE, NB_GRAD_FN, NB_GRAD_STOP } nb_grad_kind;

/* The gradient of def (or of the override name, when given): a function, a registered
   "no gradient", or nothing registered. */
nb_grad_kind nb_grad_lookup(const nb_op_def *def, const char *override_name, nb_grad_fn *fn);
/* Registers the built-in gradient functions once. */
void nb_grad_builtins_init(void);

#endif
