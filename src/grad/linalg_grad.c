/* Gradients of MatMul and BatchMatMulV2 (TF's math_grad.py: _MatMulGrad,
   _BatchMatMulV2Grad). With C = op(A) op(B), dC/dA = dy op(B)^T mapped back through op
   on A; each of the four transpose cases is one product with transpose flags, never an
   explicit Transpose. */
#include "grad.h"

/* C = op_a(A) op_b(B) with op = transpose when the flag is set:
     ta=0 tb=0: dA = dy B^T        dB = A^T dy
     ta=0 tb=1: dA = dy B          dB = dy^T A
     ta=1 tb=0: dA = B dy^T        dB = A dy
     ta=1 tb=1: dA = B^T dy^T      dB = dy^T A^T
   prod(c, u, v, tu, tv) is the (batch) matrix product of op(u) and op(v). */
typedef nb_tensor *(*product_fn)(nb_ctx *c, nb_tensor *u, nb_tensor *v, bool tu, bool tv);

static void product_grads(nb_ctx *c, product_fn prod, nb_tensor *a, nb_tensor *b, bool ta, bool tb,
                          nb_tensor *dy, nb_tensor **da, nb_tensor **db) {
  if (!ta && !tb) {
    *da = prod(c, dy, b, false, true);
    *db = prod(c, a, dy, true, false);
  } else if (!ta && tb) {
    *da = prod(c, dy, b, false, false);
    *db = prod(c, dy, a, true, false);
  } else if (ta && !tb) {
    *da = prod(c, b, dy, false, true);
    *db = prod(c, a, dy, false, false);
  } else {
    *da = prod(c, b, dy, true, true);
    *db = prod(c, dy, a, true, true);
  }
}

/* y = op(a) op(b) for matrices: the four cases above with MatMul. */
static nb_code matmul_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  product_grads(c, nb_matmul, nb_fwd_input(op, 0), nb_fwd_input(op, 1), nb_fwd_attr_bool(op, "transpose_a"),
                nb_fwd_attr_bool(op, "transpose_b"), dys[0], &dxs[0], &dxs[1]);
  return nb_status(c);
}

/* y = adj(x) adj(y) batched, batch dims broadcast: the four cases with BatchMatMulV2, each
   gradient then summed over the batch dims its input was broadcast along and reshaped to
   the input's shape (the last two dims already match). */
static nb_code batch_matmul_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *x = nb_fwd_input(op, 0), *y = nb_fwd_input(op, 1), *dx = NULL, *dy = NULL;
  product_grads(c, nb_batch_matmul, x, y, nb_fwd_attr_bool(op, "adj_x"), nb_fwd_attr_bool(op, "adj_y"), dys[0],
                &dx, &dy);
  dxs[0] = nbg_reduce_to(c, dx, x);
  dxs[1] = nbg_reduce_to(c, dy, y);
  return nb_status(c);
}

void nb_register_linalg_grads(void) {
  nb_register_builtin("MatMul", matmul_grad);
  nb_register_builtin("BatchMatMulV2", batch_matmul_grad);
}
