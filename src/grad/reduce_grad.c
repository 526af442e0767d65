/* Gradients of the reductions (TF's math_grad.py: _SumGrad, _MeanGrad, _MinOrMaxGrad,
   _ProdGrad). Every reduction takes (input, axis) and keep_dims; the axis input never gets
   a gradient.

   The reduced axes are not readable in C (in a graph the axis is a symbolic tensor), and
   the input and output shapes alone are ambiguous (reducing [2,2] to [2] may have used
   either axis). So the shape with the reduced dims kept as 1 is computed with ops that
   take the axis tensor itself as an input (TF's reduced_shape): when the input's shape
   and the axis are known at build time these ops fold to constants, so the tensors made
   from them keep static shapes and cost nothing at run time; otherwise they run. */
#include "grad.h"

/* Where the forward reduction's axes are, as an int tensor of the axis dtype over x's dims:
   1 at every reduced axis, 0 elsewhere (negative and repeated axes allowed). The reduced
   axes are marked by a segment sum of ones at the axes (nabla has no DynamicStitch). */
static nb_tensor *reduced_mask(nb_ctx *c, const nb_fwd_op *op, nb_tensor *shape, nb_tensor *rank) {
  nb_tensor *axes = nb_fwd_input(op, 1);
  nb_dtype t = nb_dtype_of(axes);
  nb_tensor *zero = nb_scalar(c, t, 0);
  /* a scalar axis stays a scalar, a segment id of its own */
  nb_tensor *axes_pos = nbg_positive_axes(c, axes, rank);
  nb_tensor *hits = nb_unsorted_segment_sum_t(c, nb_ones_like(c, axes_pos), axes_pos, rank);
  return nb_select(c, nb_greater(c, hits, zero), nb_ones_like(c, shape), nb_zeros_like(c, shape));
}

/* x's shape and rank (a scalar), as int tensors of the axis dtype. Sum of the shape's shape
   is the rank as a scalar (a Reshape would not fold: views carry no build-time value). */
static nb_tensor *shape_and_rank(nb_ctx *c, const nb_fwd_op *op, nb_tensor **rank) {
  nb_dtype t = nb_dtype_of(nb_fwd_input(op, 1));
  nb_tensor *shape = nb_shape_op(c, nb_fwd_input(op, 0), t);
  *rank = nb_sum(c, nb_shape_op(c, shape, t), (const int[]){0}, 1, false);
  return shape;
}

/* The forward reduction's kept-dims shape, an int tensor of the axis dtype: the input's
   shape with 1 at every reduced axis. */
static nb_tensor *kept_dims_shape(nb_ctx *c, const nb_fwd_op *op) {
  nb_tensor *rank, *shape = shape_and_rank(c, op, &rank);
  return nb_select(c, nb_cast(c, reduced_mask(c, op, shape, rank), NB_BOOL), nb_ones_like(c, shape), shape);
}

/* t (an output-shaped tensor: dy or y) reshaped to the kept-dims shape, which is built
   once per gradient: *shape caches it (NULL before the first call). */
static nb_tensor *kept(nb_ctx *c, const nb_fwd_op *op, nb_tensor *t, nb_tensor **shape) {
  if (nb_fwd_attr_bool(op, "keep_dims")) return t;
  if (!*shape) *shape = kept_dims_shape(c, op);
  return nb_reshape_t(c, t, *shape);
}

/* t broadcast to x's shape (statically when x's shape is known). */
static nb_tensor *broadcast_like(nb_ctx *c, nb_tensor *t, nb_tensor *x) {
  if (nbg_same_shape(t, x)) return t;
  if (nbg_static(x)) return nb_broadcast_to(c, t, nb_shape(x), nb_rank(x));
  return nb_broadcast_to_t(c, t, nb_shape_op(c, x, NB_I64));
}

/* y = sum(x, axes): every x feeds its y once, so dx = dy broadcast back over the axes. */
static nb_code sum_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *x = nb_fwd_input(op, 0);
  nb_tensor *shape = NULL;
  dxs[0] = broadcast_like(c, kept(c, op, dys[0], &shape), x);
  return nb_status(c);
}

/* The number of input elements per output element, as a scalar of x's dtype: a constant
   when both shapes are known, else Prod(Shape(x)) / max(Prod(Shape(y)), 1) at run time. */
static nb_tensor *mean_count(nb_ctx *c, nb_tensor *x, nb_tensor *y) {
  if (nbg_static(x) && nbg_static(y)) {
    int64_t nx = nb_num_elements(x), ny = nb_num_elements(y);
    return nbg_scalar_like(c, x, (double)(nx / (ny > 0 ? ny : 1)));
  }
  nb_dtype t = nb_dtype_of(x);
  const int first[1] = {0}; /* a shape is 1-D: its only axis (the rank may be unknown here) */
  nb_tensor *nx = nb_prod(c, nb_shape_op(c, x, NB_I64), first, 1, false);
  nb_tensor *ny = nb_prod(c, nb_shape_op(c, y, NB_I64), first, 1, false);
  ny = nb_maximum(c, ny, nb_scalar(c, NB_I64, 1));
  return nb_real_div(c, nb_cast(c, nx, t), nb_cast(c, ny, t));
}

/* y = sum(x, axes) / n: dx = dy broadcast back, divided by n. */
static nb_code mean_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *x = nb_fwd_input(op, 0), *y = nb_fwd_output(op, 0);
  nb_tensor *shape = NULL;
  nb_tensor *dx = broadcast_like(c, kept(c, op, dys[0], &shape), x);
  dxs[0] = nb_real_div(c, dx, mean_count(c, x, y));
  return nb_status(c);
}

/* y = max (or min) of x over the axes: the gradient goes to the elements equal to y, split
   equally among ties (TF's choice): dx = [x == y] / count(x == y) * dy, broadcast. */
static nb_code min_or_max_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *x = nb_fwd_input(op, 0), *axis = nb_fwd_input(op, 1);
  nb_tensor *shape = NULL, *y = kept(c, op, nb_fwd_output(op, 0), &shape), *dy = kept(c, op, dys[0], &shape);
  nb_tensor *hit = nb_cast(c, nb_equal(c, x, y), nb_dtype_of(x));
  nb_tensor *ties = nb_sum_t(c, hit, axis, true);
  dxs[0] = nb_mul(c, nb_real_div(c, hit, ties), dy);
  return nb_status(c);
}

/* ---- Prod ---------------------------------------------------------------------------------- */

/* p shifted by d rows along axis 0 of its [n, m] shape, the vacated rows filled with ones:
   down (rows 0..d are ones) for prefixes, up for suffixes. */
static nb_tensor *shift_rows(nb_ctx *c, nb_tensor *p, int64_t n, int64_t m, int64_t d, bool down) {
  const int64_t ones_shape[2] = {d < n ? d : n, m};
  nb_tensor *ones = nb_fill(c, ones_shape, 2, nbg_scalar_like(c, p, 1));
  if (d >= n) return ones;
  const int64_t begin[2] = {down ? 0 : d, 0}, size[2] = {n - d, m};
  nb_tensor *kept_rows = nb_slice(c, p, begin, size, 2);
  nb_tensor *parts[2] = {down ? ones : kept_rows, down ? kept_rows : ones};
  return nb_concat(c, parts, 2, 0);
}

/* Exclusive cumulative product along axis 0 of x [n, m] (from the top when down, from the
   bottom otherwise): a Hillis-Steele scan, log2(n) rounds of p *= shift(p, 2^k), then a
   shift by one. Multiplications only, so zeros stay exact. */
static nb_tensor *exclusive_cumprod(nb_ctx *c, nb_tensor *x, int64_t n, int64_t m, bool down) {
  nb_tensor *p = x;
  for (int64_t d = 1; d < n; d *= 2) p = nb_mul(c, p, shift_rows(c, p, n, m, d, down));
  return shift_rows(c, p, n, m, 1, down);
}

/* The permutation that moves the reduced axes (mask 1) to the front, both groups keeping
   their order, as an int tensor of mask's dtype; *pos gets its inverse (where each axis
   goes): reduced axis i goes to the number of reduced axes before it, kept axis i to the
   number of reduced axes plus the number of kept axes before it. */
static nb_tensor *reduced_first_perm(nb_ctx *c, nb_tensor *mask, nb_tensor *rank, nb_tensor **pos) {
  nb_tensor *kept_mask = nb_sub(c, nb_ones_like(c, mask), mask);
  nb_tensor *nred = nb_sum(c, mask, (const int[]){0}, 1, false);
  nb_tensor *red_pos = nb_cumsum(c, mask, 0, true, false);
  nb_tensor *kept_pos = nb_add(c, nb_cumsum(c, kept_mask, 0, true, false), nred);
  *pos = nb_add(c, nb_mul(c, mask, red_pos), nb_mul(c, kept_mask, kept_pos));
  return nbg_invert_perm(c, *pos, rank);
}

/* Prod's gradient when x's shape or the axes are known only at run time: the same layout
   as below, with the permutation and sizes computed by ops and the exclusive products
   by Cumprod. Zeros in x are exact; the second derivative goes through Cumprod's
   gradient, which divides by x like TF's. */
static nb_tensor *prod_grad_dynamic(nb_ctx *c, const nb_fwd_op *op, nb_tensor *dy) {
  nb_tensor *x = nb_fwd_input(op, 0), *rank, *pos;
  nb_tensor *shape = shape_and_rank(c, op, &rank), *mask = reduced_mask(c, op, shape, rank);
  nb_tensor *perm = reduced_first_perm(c, mask, rank, &pos);
  const int first[1] = {0};
  /* n: the reduced elements per output, m: the outputs */
  nb_tensor *ones = nb_ones_like(c, shape), *on = nb_cast(c, mask, NB_BOOL);
  nb_tensor *n = nb_prod(c, nb_select(c, on, shape, ones), first, 1, false);
  nb_tensor *m = nb_prod(c, nb_select(c, on, ones, shape), first, 1, false);
  nb_tensor *permuted = nb_transpose_t(c, x, perm);
  nb_tensor *nm = nb_pack(c, (nb_tensor *[]){n, m}, 2, 0);
  nb_tensor *matrix = nb_reshape_t(c, permuted, nm);
  nb_tensor *others = nb_mul(c, nb_cumprod(c, matrix, 0, true, false), nb_cumprod(c, matrix, 0, true, true));
  nb_tensor *others_x = nb_transpose_t(c, nb_reshape_t(c, others, nb_shape_op(c, permuted, NB_I64)), pos);
  return nb_mul(c, others_x, broadcast_like(c, dy, x));
}

/* y = prod(x, axes) (TF's _ProdGrad): dy/dx_i is the product of all OTHER reduced
   elements, computed without dividing by x_i so zeros in x are handled: the reduced axes
   are moved to the front and flattened to one dim of size n (x becomes [n, m]), and the
   product of the others is (exclusive cumprod from the top) * (exclusive cumprod from the
   bottom). With x's shape and the axes known at build time the cumprods are scans built
   from Slice, ConcatV2 and Mul, whose own gradients stay exact at zeros (second order);
   otherwise the layout is computed at run time (prod_grad_dynamic). */
static nb_code prod_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *shape = NULL, *x = nb_fwd_input(op, 0), *dy = kept(c, op, dys[0], &shape);
  if (!dy) return nb_status(c);
  if (!nbg_static(x) || !nbg_static(dy)) {
    dxs[0] = prod_grad_dynamic(c, op, dy);
    return nb_status(c);
  }
  int r = nb_rank(x), perm[NB_MAX_RANK], inverse[NB_MAX_RANK], nred = 0;
  int64_t n = 1, m = 1, permuted[NB_MAX_RANK];
  /* reduced axes first: those whose kept dim differs (reducing a dim of 1 changes nothing) */
  for (int pass = 0, k = 0; pass < 2; pass++)
    for (int i = 0; i < r; i++) {
      bool reduced = nb_shape(x)[i] != nb_shape(dy)[i];
      if (reduced != (pass == 0)) continue;
      perm[k++] = i;
      if (reduced) {
        nred++;
        n *= nb_shape(x)[i];
      } else {
        m *= nb_shape(x)[i];
      }
    }
  if (nred == 0 || n * m == 0) { /* nothing multiplied together, or an empty x */
    dxs[0] = nred == 0 ? nb_reshape(c, dy, nb_shape(x), r) : nb_zeros_like(c, x);
    return nb_status(c);
  }
  bool moved = false;
  for (int i = 0; i < r; i++) {
    permuted[i] = nb_shape(x)[perm[i]];
    inverse[perm[i]] = i;
    moved |= perm[i] != i;
  }
  const int64_t matrix[2] = {n, m};
  nb_tensor *xm = nb_reshape(c, moved ? nb_transpose(c, x, perm, r) : x, matrix, 2);
  nb_tensor *others = nb_mul(c, exclusive_cumprod(c, xm, n, m, true), exclusive_cumprod(c, xm, n, m, false));
  nb_tensor *others_x = nb_reshape(c, others, permuted, r);
  if (moved) others_x = nb_transpose(c, others_x, inverse, r);
  dxs[0] = nb_mul(c, others_x, dy);
  return nb_status(c);
}

/* ---- Cumsum, Cumprod ------------------------------------------------------------------------ */

/* Cumsum(t, axis) with the forward scan's exclusive attr and its reverse attr flipped. */
static nb_tensor *flipped_cumsum(nb_ctx *c, const nb_fwd_op *op, nb_tensor *t) {
  return nb_cumsum_t(c, t, nb_fwd_input(op, 1), nb_fwd_attr_bool(op, "exclusive"), !nb_fwd_attr_bool(op, "reverse"));
}

/* y_j = sum of x_i over the i the scan covers at j; x_i feeds every y_j whose scan covers
   it, which is the same scan run from the other end: dx = cumsum(dy) in reverse. */
static nb_code cumsum_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  dxs[0] = flipped_cumsum(c, op, dys[0]);
  return nb_status(c);
}

/* y_j = product of the x_i the scan covers at j, so dy_j/dx_i = y_j / x_i for covered i and
   dx_i = (reverse cumsum of y * dy)_i / x_i (TF's _CumprodGrad). Like TF's it divides by x,
   so it is not defined where x is 0 (a zero-safe form would need the product of all other
   covered elements for every pair (i, j), quadratic in the axis length). */
static nb_code cumprod_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  if (!dys[0]) return NB_OK;
  nb_tensor *x = nb_fwd_input(op, 0), *y = nb_fwd_output(op, 0);
  dxs[0] = nb_real_div(c, flipped_cumsum(c, op, nb_mul(c, y, dys[0])), x);
  return nb_status(c);
}

void nbg_register_reduce_grads(void) {
  /* Every rule reads the axes; Max, Min and Prod x's values too, Max, Min and Cumprod the
     output (TF's choices). */
  static const nbg_entry rules[] = {
      {"Sum", sum_grad, NBG_IN(1), 0},
      {"Mean", mean_grad, NBG_IN(1), 0},
      {"Max", min_or_max_grad, NBG_IN(0) | NBG_IN(1), NBG_OUT(0)},
      {"Min", min_or_max_grad, NBG_IN(0) | NBG_IN(1), NBG_OUT(0)},
      {"Prod", prod_grad, NBG_IN(0) | NBG_IN(1), 0},
      {"ArgMax", NULL, 0, 0},
      {"Cumsum", cumsum_grad, NBG_IN(1), 0},
      {"Cumprod", cumprod_grad, NBG_IN(0) | NBG_IN(1), NBG_OUT(0)},
  };
  nbad_register_table(rules, sizeof rules / sizeof *rules);
}

void nbg_register_reduce_fwd(void) {
  /* sums and means are linear; Max, Min, Prod and Cumprod take TF's fallback */
  static const nbg_fwd_entry table[] = {
      {"Sum", NBG_FWD_LINEAR, NULL, 0, 0},
      {"Mean", NBG_FWD_LINEAR, NULL, 0, 0},
      {"Cumsum", NBG_FWD_LINEAR, NULL, 0, 0},
  };
  nbad_register_fwd_table(table, sizeof table / sizeof table[0]);
}
