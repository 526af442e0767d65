/* Shared by the built-in gradient files. Gradient functions are ordinary users of the
   public API (nabla.h only), which is what lets one function serve graphs, tapes and
   higher orders. */
#ifndef NBG_GRAD_H
#define NBG_GRAD_H

#include "nabla.h"

/* Registration of the built-in gradients (called once by the registry). */
void nbg_register_builtin_gradients(void);
/* A registration that reads no input or output value: "no gradient" for an op type (f NULL). */
nb_code nbad_register_builtin(const char *name, nb_grad_fn f);
/* A rule and what it reads: bit i of reads_in (reads_out) says the rule reads the value of
   input (output) i, so a tape keeps that value for it; shapes, dtypes and attrs are always
   kept. A tape that kept only an input's shape fails any op reading its value with
   NB_INTERNAL, so gradcheck_all's tape mode checks these declarations against the rules.
   NBG_ALL: every input or output (variadic ops). */
typedef struct nbg_entry {
  const char *op;
  nb_grad_fn fn;
  uint32_t reads_in, reads_out;
} nbg_entry;
#define NBG_IN(i) (1u << (i))
#define NBG_OUT(i) (1u << (i))
#define NBG_ALL (~0u)
/* Registers a family's rules (fn NULL: "no gradient"). */
void nbad_register_table(const nbg_entry *table, size_t n);
/* A rule's fused sum for one input: acc + the gradient of input i of op given dy (the
   gradient of its one output), as ops that may write the result over acc's block (acc
   goes to one op, as the sum). A tape that holds the input's gradient so far alone adds
   the next term this way, instead of making the term in a block of its own and adding
   it (a weight's gradient summed over the steps of a loop). */
typedef nb_tensor *(*nbg_sum_fn)(nb_ctx *c, const nb_fwd_op *op, nb_tensor *dy, int i, nb_tensor *acc);
/* Registers op_type's fused sum, beside its rule in the table. */
void nbad_register_sum_into(const char *op_type, nbg_sum_fn f);
/* The control-flow gradients (src/func/control_flow_grad.c), into the slots the registry
   reserves for them with the built-ins; src/func calls it once, before its first function. */
void nbad_install_function_grads(const nbg_entry *table, size_t n);
void nbg_register_math_grads(void);
void nbg_register_reduce_grads(void);
void nbg_register_linalg_grads(void);
void nbg_register_array_grads(void);
void nbg_register_slicing_grads(void);
void nbg_register_custom_grads(void);
void nbg_register_nn_grads(void);
void nbg_register_variable_grads(void);
void nbg_register_norm_grads(void);
void nbg_register_random_grads(void);
void nbg_register_conv_grads(void);
void nbg_register_host_callback_grads(void);
void nbg_register_collective_grads(void);

/* Forward mode (nb_jvp, the forward accumulator). A forward rule sets tout[o], the
   tangent of output o, from tin[i], the tangents of the inputs (NULL: zero, and always
   NULL for int/bool inputs); a tout left NULL is zero. The kinds the registry applies
   itself, from the op's own registration:
     SYMMETRIC a one-input op whose J is symmetric (elementwise ops: diagonal; Softmax:
               diag(y) - y y^T), so J t = J^T t, the gradient rule applied to t;
     LINEAR    linear in every float input jointly (int/bool inputs kept): the op itself
               on the tangents, zeros standing for NULL ones;
     BILINEAR  bilinear in inputs a and b, constant in the rest: op(ta, b) + op(a, tb);
     RULE      fn.
   An op with no entry gets TF's fallback, the gradient rule transposed. */
typedef nb_code (*nbg_fwd_fn)(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *tin, nb_tensor **tout);
typedef enum { NBG_FWD_RULE, NBG_FWD_SYMMETRIC, NBG_FWD_LINEAR, NBG_FWD_BILINEAR } nbg_fwd_kind;
typedef struct nbg_fwd_entry {
  const char *op;
  nbg_fwd_kind kind;
  nbg_fwd_fn fn; /* RULE only */
  int a, b;      /* BILINEAR only */
} nbg_fwd_entry;
/* Registers a family's forward rules (autodiff keeps them beside the gradients). */
void nbad_register_fwd_table(const nbg_fwd_entry *table, size_t n);
/* Registration of the built-in forward rules (called once by the registry). */
void nbg_register_builtin_forward(void);
void nbg_register_math_fwd(void);
void nbg_register_nn_fwd(void);
void nbg_register_linalg_fwd(void);
void nbg_register_conv_fwd(void);
void nbg_register_array_fwd(void);
void nbg_register_reduce_fwd(void);
void nbg_register_slicing_fwd(void);
void nbg_register_norm_fwd(void);

/* A rule of a one-output op (the math and nn families) starts from dy = dys[0] and returns
   NB_OK at once when it is NULL: an output without a gradient gives the inputs none. */

/* Inside a rule: the op's inputs 0 and 1, and whether the pass wants input i's gradient
   (the others need none computed). */
static inline nb_tensor *in0(const nb_fwd_op *op) { return nb_fwd_input(op, 0); }
static inline nb_tensor *in1(const nb_fwd_op *op) { return nb_fwd_input(op, 1); }
#define NEED(i) nb_fwd_input_needs_grad(op, i)

/* a + b where a NULL term is zero (NULL when both are). */
nb_tensor *nbg_add_terms(nb_ctx *c, nb_tensor *a, nb_tensor *b);
/* x as int64 (index inputs may be int32). */
nb_tensor *nbg_as_i64(nb_ctx *c, nb_tensor *x);
/* A scalar of x's dtype. */
nb_tensor *nbg_scalar_like(nb_ctx *c, nb_tensor *x, double v);
static inline nb_tensor *scalar(nb_ctx *c, nb_tensor *like, double v) { return nbg_scalar_like(c, like, v); }
/* dy summed down to x's shape: the gradient of a broadcast. Static shapes give at most a
   Sum and a Reshape (nothing when the shapes are equal); unknown shapes use Shape and
   BroadcastGradientArgs at run time. */
nb_tensor *nbg_reduce_to(nb_ctx *c, nb_tensor *dy, nb_tensor *x);
/* The gradient of EluGrad or SeluGrad (grad_op) d = gradients * f(outputs), with f a
   constant for outputs >= 0 and outputs + k below (k: 1 or scale alpha): linear in the
   gradients (grad_op(dy, outputs)), and dd/d(outputs) = gradients where outputs < 0. */
nb_code nbg_exp_linear_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *dy, nb_tensor **dxs,
                                 nb_tensor *(*grad_op)(nb_ctx *, nb_tensor *, nb_tensor *));
/* Whether every dim of x is known. */
bool nbg_static(const nb_tensor *x);
/* Whether x and y have the same known shape. */
bool nbg_same_shape(const nb_tensor *x, const nb_tensor *y);
/* axes (any shape) with rank added where negative, in axes' dtype; rank is a scalar of it. */
nb_tensor *nbg_positive_axes(nb_ctx *c, nb_tensor *axes, nb_tensor *rank);
/* The inverse of the permutation perm of n axes (n: a scalar of perm's dtype), q[perm[i]] = i:
   scattering 0..n-1 to the positions perm (UnsortedSegmentSum) hits every slot once. */
nb_tensor *nbg_invert_perm(nb_ctx *c, nb_tensor *perm, nb_tensor *n);

#endif
