/* Internal autodiff: the gradient registry and the forward-op view gradient functions get. */
#ifndef NBAD_H
#define NBAD_H

#include "../graph/graph.h"

#include "../grad/grad.h" /* nbg_sum_fn */

/* TF's ForwardOperation: what a gradient function sees of the op it differentiates. */
struct nb_fwd_op {
  const nbop_def *def;
  const char *name;
  int nin, nout;
  nb_tensor *const *in;
  nb_tensor *const *out;
  const nbop_attrval *attr;
  const bool *needs_grad; /* per input; NULL: every input */
};

typedef enum { NBAD_GRAD_NONE, NBAD_GRAD_FN, NBAD_GRAD_STOP } nbad_grad_kind;

/* The gradient of def (or of the override name, when given): a function, a registered
   "no gradient", or nothing registered. */
nbad_grad_kind nbad_grad_lookup(const nbop_def *def, const char *override_name, nb_grad_fn *fn);
/* def's fused sum of a gradient into a held one (nbg_sum_fn), or NULL. */
nbg_sum_fn nbad_grad_sum_into(const nbop_def *def);
/* dxs slots past a forward op's inputs, which catch a function returning extra gradients. */
#define NBAD_GRAD_GUARDS 8
/* Handles one op's gradient call needs: inputs, outputs, dys, and dxs with guards. */
static inline int32_t nbad_grad_width(int32_t nin, int32_t nout) { return 2 * (nin + nout) + NBAD_GRAD_GUARDS; }
/* Calls fn on op (dxs has nin + NBAD_GRAD_GUARDS slots), failing like TF when it returns more
   gradients than the op has inputs or a gradient whose dtype or static shape does not fit
   its float input, and naming the op when it fails without a message. Every mode (graph
   pass, tape, custom and overridden gradients) calls gradient functions through it. */
nb_code nbad_grad_invoke(nb_ctx *c, nb_grad_fn fn, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs);

/* nb_custom_gradient, with who naming the caller in errors (a composite op's name). */
nb_code nbad_custom_gradient(nb_ctx *c, const char *who, nb_custom_fn fwd, nb_custom_grad_fn grad, void *user,
                             nb_tensor *const *in, int nin, nb_tensor **out, int nout);

/* The gradient of _RecomputeGrad (recompute.c). */
nb_code nbad_recompute_gradient(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs);

/* Forward mode (forward_rules.c): tout[o] = the tangent of output o of op given tin[i],
   the tangents of its inputs (NULL: zero); tout NULL: zero, always for int/bool outputs.
   The op's forward rule, or TF's fallback (the gradient rule transposed: nb_gradients in
   a graph, a tape eagerly); override_name: a graph node's gradient override, whose
   transposition is then used. On a tape's record (views without the values the tape did
   not keep) a rule reading a missing value gives way to the transposition too. */
nb_code nbad_jvp_op(nb_ctx *c, const nb_fwd_op *op, const char *override_name, nb_tensor *const *tin, nb_tensor **tout);
/* Whether def has a forward rule of its own (registers the built-in ones once). */
bool nbad_has_forward_rule(const nbop_def *def);

/* The record hook of an eager context with tapes or forward accumulators: the tapes record
   the op (tape.c), then the accumulators compute its outputs' tangents (accumulator.c). */
void nbad_record(nb_ctx *c, struct nbop_kargs *k, nb_tensor *const *out);
void nbad_tape_record(nb_ctx *c, struct nbop_kargs *k, nb_tensor *const *out);
/* Frees c's tapes and accumulators (the context's release_tapes hook). */
void nbad_release_tapes(nb_ctx *c);
void nbad_release_accumulators(nb_ctx *c);

/* Registers the built-in gradient functions once. */
void nbad_grad_builtins_init(void);
/* Which of def's inputs and outputs (bit i, as nbg_entry's) its gradient rule reads the
   values of: what a tape keeps. None for an op without a rule; after nbad_grad_builtins_init. */
void nbad_grad_reads(const nbop_def *def, uint32_t *reads_in, uint32_t *reads_out);

#endif
