/* Built-in gradient registration and helpers shared by the gradient files. */
#include "grad.h"

void nbg_register_builtin_gradients(void) {
  nbg_register_math_grads();
  nbg_register_reduce_grads();
  nbg_register_linalg_grads();
  nbg_register_array_grads();
  nbg_register_slicing_grads();
  nbg_register_custom_grads();
  nbg_register_nn_grads();
  nbg_register_variable_grads();
  nbg_register_norm_grads();
  nbg_register_random_grads();
  nbg_register_conv_grads();
  nbg_register_host_callback_grads();
  nbg_register_collective_grads();
}

void nbg_register_builtin_forward(void) {
  nbg_register_math_fwd();
  nbg_register_nn_fwd();
  nbg_register_linalg_fwd();
  nbg_register_conv_fwd();
  nbg_register_array_fwd();
  nbg_register_reduce_fwd();
  nbg_register_slicing_fwd();
  nbg_register_norm_fwd();
}

nb_tensor *nbg_add_terms(nb_ctx *c, nb_tensor *a, nb_tensor *b) { return a && b ? nb_add(c, a, b) : a ? a : b; }

nb_tensor *nbg_as_i64(nb_ctx *c, nb_tensor *x) { return x && nb_dtype_of(x) != NB_I64 ? nb_cast(c, x, NB_I64) : x; }

nb_tensor *nbg_scalar_like(nb_ctx *c, nb_tensor *x, double v) { return nb_scalar(c, nb_dtype_of(x), v); }

nb_code nbg_exp_linear_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *dy, nb_tensor **dxs,
                                 nb_tensor *(*grad_op)(nb_ctx *, nb_tensor *, nb_tensor *)) {
  nb_tensor *g = nb_fwd_input(op, 0), *outputs = nb_fwd_input(op, 1);
  dxs[0] = nb_fwd_input_needs_grad(op, 0) ? grad_op(c, dy, outputs) : NULL;
  if (nb_fwd_input_needs_grad(op, 1)) {
    nb_tensor *negative = nb_less(c, outputs, nbg_scalar_like(c, outputs, 0));
    dxs[1] = nb_select(c, negative, nb_mul(c, dy, g), nb_zeros_like(c, outputs));
  }
  return nb_status(c);
}

bool nbg_static(const nb_tensor *x) {
  if (nb_rank(x) < 0) return false;
  for (int i = 0; i < nb_rank(x); i++)
    if (nb_shape(x)[i] < 0) return false;
  return true;
}

nb_tensor *nbg_positive_axes(nb_ctx *c, nb_tensor *axes, nb_tensor *rank) {
  nb_dtype t = nb_dtype_of(axes);
  nb_tensor *negative = nb_cast(c, nb_less(c, axes, nb_scalar(c, t, 0)), t);
  return nb_add(c, axes, nb_mul(c, negative, rank));
}

nb_tensor *nbg_invert_perm(nb_ctx *c, nb_tensor *perm, nb_tensor *n) {
  nb_dtype t = nb_dtype_of(perm);
  return nb_unsorted_segment_sum_t(c, nb_range(c, nb_scalar(c, t, 0), n, nb_scalar(c, t, 1)), perm, n);
}

/* One pass over the dims: every gradient function of a broadcasting op asks this. */
bool nbg_same_shape(const nb_tensor *x, const nb_tensor *y) {
  int rank = nb_rank(x);
  if (rank < 0 || rank != nb_rank(y)) return false;
  const int64_t *a = nb_shape(x), *b = nb_shape(y);
  for (int i = 0; i < rank; i++)
    if (a[i] < 0 || a[i] != b[i]) return false;
  return true;
}

/* The axes of dy (rank r) along which x (rank rx <= r) was broadcast: the leading r - rx
   axes, and those where x has 1 and dy does not. */
static int broadcast_axes(const nb_tensor *dy, const nb_tensor *x, int *axes) {
  int r = nb_rank(dy), lead = r - nb_rank(x), n = 0;
  for (int i = 0; i < r; i++)
    if (i < lead || (nb_shape(x)[i - lead] == 1 && nb_shape(dy)[i] != 1)) axes[n++] = i;
  return n;
}

static nb_tensor *reduce_dynamic(nb_ctx *c, nb_tensor *dy, nb_tensor *x) {
  nb_tensor *sx = nb_shape_op(c, x, NB_I32), *r[2] = {NULL, NULL};
  nb_broadcast_gradient_args(c, sx, nb_shape_op(c, dy, NB_I32), &r[0], &r[1]);
  return nb_reshape_t(c, nb_sum_t(c, dy, r[0], false), sx);
}

nb_tensor *nbg_reduce_to(nb_ctx *c, nb_tensor *dy, nb_tensor *x) {
  if (!dy || !x) return NULL;
  if (nbg_same_shape(dy, x)) return dy;
  if (!nbg_static(dy) || !nbg_static(x)) return reduce_dynamic(c, dy, x);
  int axes[NB_MAX_RANK];
  int n = broadcast_axes(dy, x, axes);
  nb_tensor *s = n ? nb_sum(c, dy, axes, n, false) : dy;
  return nbg_same_shape(s, x) ? s : nb_reshape(c, s, nb_shape(x), nb_rank(x));
}
