/* Gradients of MatMul, BatchMatMulV2 and _MatMulAdd (TF's math_grad.py: _MatMulGrad,
   _BatchMatMulV2Grad). With C = op(A) op(B), dC/dA = dy op(B)^T mapped back through op
   on A; each of the four transpose cases is one product with transpose flags, never an
   explicit Transpose. */
#include "grad.h"

/* C = op_a(A) op_b(B) with op = transpose when the flag is set:
     ta=0 tb=0: dA = dy B^T        dB = A^T dy
     ta=0 tb=1: dA = dy B          dB = dy^T A
     ta=1 tb=0: dA = B dy^T        dB = A dy
     ta=1 tb=1: dA = B^T dy^T      dB = dy^T A^T
   prod(c, u, v, tu, tv, acc) is the (batch) matrix product of op(u) and op(v), plus acc
   when acc is not NULL. */
typedef nb_tensor *(*product_fn)(nb_ctx *c, nb_tensor *u, nb_tensor *v, bool tu, bool tv, nb_tensor *acc);

/* dA from the table: dy op(B) when A is not transposed, else op(B) dy^T; plus acc (NULL:
   none) when prod adds one. */
static nb_tensor *grad_a(nb_ctx *c, product_fn prod, nb_tensor *b, bool ta, bool tb, nb_tensor *dy, nb_tensor *acc) {
  return ta ? prod(c, b, dy, tb, true, acc) : prod(c, dy, b, false, !tb, acc);
}

/* dB from the table: op(A) dy when B is not transposed, else dy^T op(A); plus acc. */
static nb_tensor *grad_b(nb_ctx *c, product_fn prod, nb_tensor *a, bool ta, bool tb, nb_tensor *dy, nb_tensor *acc) {
  return tb ? prod(c, dy, a, true, ta, acc) : prod(c, a, dy, !ta, false, acc);
}

/* The batched product (its callers pass no acc). */
static nb_tensor *batch_product(nb_ctx *c, nb_tensor *u, nb_tensor *v, bool tu, bool tv, nb_tensor *acc) {
  (void)acc;
  return nb_batch_matmul(c, u, v, tu, tv);
}

/* y = op(a) op(b) for matrices: the table above with MatMul; an input whose gradient the
   pass does not need gets no ops. */
static nb_code matmul_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *a = nb_fwd_input(op, 0), *b = nb_fwd_input(op, 1);
  bool ta = nb_fwd_attr_bool(op, "transpose_a"), tb = nb_fwd_attr_bool(op, "transpose_b");
  if (nb_fwd_input_needs_grad(op, 0)) dxs[0] = grad_a(c, nb_matmul_add, b, ta, tb, dys[0], NULL);
  if (nb_fwd_input_needs_grad(op, 1)) dxs[1] = grad_b(c, nb_matmul_add, a, ta, tb, dys[0], NULL);
  return nb_status(c);
}

/* acc + the table's dA or dB as one _MatMulAdd (a GEMM with beta = 1 over acc). */
static nb_tensor *matmul_sum_into(nb_ctx *c, const nb_fwd_op *op, nb_tensor *dy, int i, nb_tensor *acc) {
  nb_tensor *a = nb_fwd_input(op, 0), *b = nb_fwd_input(op, 1);
  bool ta = nb_fwd_attr_bool(op, "transpose_a"), tb = nb_fwd_attr_bool(op, "transpose_b");
  return i == 0 ? grad_a(c, nb_matmul_add, b, ta, tb, dy, acc) : grad_b(c, nb_matmul_add, a, ta, tb, dy, acc);
}

/* y = adj(x) adj(y) batched, batch dims broadcast: the table with BatchMatMulV2, each
   gradient then summed over the batch dims its input was broadcast along and reshaped to
   the input's shape (the last two dims already match). */
static nb_code batch_matmul_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *x = nb_fwd_input(op, 0), *y = nb_fwd_input(op, 1);
  bool adj_x = nb_fwd_attr_bool(op, "adj_x"), adj_y = nb_fwd_attr_bool(op, "adj_y");
  if (nb_fwd_input_needs_grad(op, 0))
    dxs[0] = nbg_reduce_to(c, grad_a(c, batch_product, y, adj_x, adj_y, dys[0], NULL), x);
  if (nb_fwd_input_needs_grad(op, 1))
    dxs[1] = nbg_reduce_to(c, grad_b(c, batch_product, x, adj_x, adj_y, dys[0], NULL), y);
  return nb_status(c);
}

/* y = acc + op(a) op(b): a and b as MatMul's, and d acc = dy. */
static nb_code matmul_add_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  if (nb_fwd_input_needs_grad(op, 2)) dxs[2] = dys[0];
  return matmul_grad(c, op, dys, dxs);
}

void nbg_register_linalg_grads(void) {
  static const nbg_entry rules[] = {
      {"MatMul", matmul_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"BatchMatMulV2", batch_matmul_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"_MatMulAdd", matmul_add_grad, NBG_IN(0) | NBG_IN(1), 0},
  };
  nbad_register_table(rules, sizeof rules / sizeof *rules);
  nbad_register_sum_into("MatMul", matmul_sum_into);
}

void nbg_register_linalg_fwd(void) {
  /* products are bilinear: t(a b) = ta b + a tb, the op itself on each tangent */
  static const nbg_fwd_entry table[] = {
      {"MatMul", NBG_FWD_BILINEAR, NULL, 0, 1},
      {"BatchMatMulV2", NBG_FWD_BILINEAR, NULL, 0, 1},
  };
  nbad_register_fwd_table(table, sizeof table / sizeof table[0]);
}
