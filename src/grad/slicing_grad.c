/* Gradients of the slicing ops (TF's array_grad.py and math_grad.py): a slice's gradient
   puts dy back where the slice came from, a gather's scatters it (summing repeats), and a
   segment sum's gathers it. Index inputs are used only through ops, which constant
   folding evaluates at build time when they are constants. */
#include "grad.h"

#include <stdint.h>

static nb_tensor *flatten(nb_ctx *c, nb_tensor *x) { return nb_reshape(c, x, (const int64_t[]){-1}, 1); }

/* y = slice(x, b, s) is x's window at b, so dx = pad(dy, [[b, shape(x) - b - shape(y)]])
   (TF's _SliceGrad); begin and size get none. */
static nb_code slice_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *x = nb_fwd_input(op, 0), *y = nb_fwd_output(op, 0);
  nb_tensor *before = nbg_as_i64(c, nb_fwd_input(op, 1));
  nb_tensor *rest = nb_sub(c, nb_shape_op(c, x, NB_I64), before);
  nb_tensor *sides[2] = {before, nb_sub(c, rest, nb_shape_op(c, y, NB_I64))};
  dxs[0] = nb_pad_t(c, dys[0], nb_pack(c, sides, 2, 1));
  return nb_status(c);
}

/* op's five mask attrs, for a StridedSlice or StridedSliceGrad with the same selection. */
static nb_slice_masks masks_of(const nb_fwd_op *op) {
  return (nb_slice_masks){nb_fwd_attr_int(op, "begin_mask"), nb_fwd_attr_int(op, "end_mask"),
                          nb_fwd_attr_int(op, "ellipsis_mask"), nb_fwd_attr_int(op, "new_axis_mask"),
                          nb_fwd_attr_int(op, "shrink_axis_mask")};
}

/* y = strided_slice(x, begin, end, strides) picks distinct elements of x, so dx is zeros
   with dy written back at them: StridedSliceGrad(shape(x), begin, end, strides, dy) with
   the same masks (TF's _StridedSliceGrad); x's shape is taken at run time when unknown. */
static nb_code strided_slice_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *begin = nb_fwd_input(op, 1);
  nb_slice_masks masks = masks_of(op);
  dxs[0] = nb_strided_slice_grad_t(c, nb_shape_op(c, nb_fwd_input(op, 0), nb_dtype_of(begin)), begin,
                                   nb_fwd_input(op, 2), nb_fwd_input(op, 3), dys[0], &masks);
  return nb_status(c);
}

/* dx = StridedSliceGrad(shape, b, e, s, dy) is linear in dy and reads dy's values at the
   slice's positions of dx, so d(dy) = StridedSlice(d(dx), b, e, s) (TF's
   _StridedSliceGradGrad); shape, begin, end and strides get none. */
static nb_code strided_slice_grad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_slice_masks masks = masks_of(op);
  dxs[4] = nb_strided_slice_t(c, dys[0], nb_fwd_input(op, 1), nb_fwd_input(op, 2), nb_fwd_input(op, 3), &masks);
  return nb_status(c);
}

/* The axis of GatherV2 (batch_dims 0) when x's and y's static shapes allow exactly one:
   y.shape == p.shape[:a] + indices.shape + p.shape[a+1:]; -1 when none or several fit. */
static int static_gather_axis(nb_tensor *params, nb_tensor *indices, nb_tensor *y) {
  int r = nb_rank(params), ri = nb_rank(indices), found = -1;
  if (r < 1 || ri < 0 || nb_rank(y) != r - 1 + ri) return -1;
  const int64_t *p = nb_shape(params), *ix = nb_shape(indices), *ys = nb_shape(y);
  for (int a = 0; a < r; a++) {
    bool fits = true;
    for (int i = 0; i < nb_rank(y) && fits; i++) {
      int64_t want = i < a ? p[i] : i < a + ri ? ix[i - a] : p[i - ri + 1];
      fits = want < 0 || ys[i] < 0 || want == ys[i];
    }
    if (fits && found >= 0) return -1;
    if (fits) found = a;
  }
  return found;
}

/* The product of the dims of the 1-D shape vector s in [begin, begin + size) (size -1: to
   the end), begin and size as 1-element int64 vectors. */
static nb_tensor *dims_product(nb_ctx *c, nb_tensor *s, nb_tensor *begin, nb_tensor *size) {
  return nb_prod(c, nb_slice_t(c, s, begin, size), (const int[]){0}, 1, false);
}

static nb_tensor *vec1(nb_ctx *c, nb_tensor *scalar) { return nb_reshape(c, scalar, (const int64_t[]){1}, 1); }

/* The gather axis as an int64 scalar in [0, rank(params)): the static one when known, else
   the axis input plus the rank when negative, computed at run time. */
static nb_tensor *gather_axis(nb_ctx *c, const nb_fwd_op *op, int known, nb_tensor *pshape) {
  if (known >= 0) return nb_scalar(c, NB_I64, known);
  nb_tensor *raw = nbg_as_i64(c, nb_fwd_input(op, 2));
  return nbg_positive_axes(c, raw, nb_reshape(c, nb_shape_op(c, pshape, NB_I64), NULL, 0));
}

/* Axis 0 of a params tensor of static shape (an embedding lookup): y's rows are p's rows
   at the indices, so dp is dy's rows put back at those indices, as IndexedSlices (TF's
   _GatherV2Grad): the cost follows the rows gathered, not the size of p. NULL when the
   rows' rank is known only at run time (the caller then takes the dense gradient). */
static nb_tensor *gathered_rows_grad(nb_ctx *c, nb_tensor *params, nb_tensor *indices, nb_tensor *dy) {
  int64_t dims[NB_MAX_RANK] = {-1};
  for (int d = 1; d < nb_rank(params); d++) dims[d] = nb_shape(params)[d];
  /* a vector of indices: dy is the rows already */
  nb_tensor *rows = nb_rank(indices) == 1 ? dy : nb_reshape(c, dy, dims, nb_rank(params));
  if (nb_rank(rows) != nb_rank(params)) return NULL; /* a rank known only at run time */
  return nb_indexed_slices(c, rows, flatten(c, indices), nb_shape(params), nb_rank(params));
}

/* The gather axis when known at build time: the axis input's constant value (an embedding
   lookup's 0 with indices of unknown length, which the shapes alone leave ambiguous), else
   what the static shapes allow; -1 when unknown. */
static int known_gather_axis(const nb_fwd_op *op) {
  nb_tensor *params = nb_fwd_input(op, 0);
  const nb_tensor *axis = nb_constant_value(nb_fwd_input(op, 2));
  int64_t r = nb_rank(params), a = axis && nb_num_elements(axis) == 1 ? (int64_t)nb_item(axis, 0) : -r - 1;
  if (r >= 1 && a >= -r && a < r) return (int)(a < 0 ? a + r : a);
  return static_gather_axis(params, nb_fwd_input(op, 1), nb_fwd_output(op, 0));
}

/* y = gather(p, indices, axis) copies p's slices along axis a, so dp scatter-adds dy's
   slices back (TF's _GatherV2Grad, made dense). With p viewed as [outer, p.shape[a],
   inner], dy is [outer, n, inner] for n = size(indices): move n to the front, take
   UnsortedSegmentSum over the flat indices into p.shape[a] rows, move the rows back and
   reshape to p's shape (axis 0 of a static p: gathered_rows_grad's IndexedSlices
   instead). The views are rank 3 whatever p's rank, so only the axis value is
   needed, computed with ops from the axis input; the transposes are skipped when the
   axis is known to be 0. */
static nb_code plain_gather_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *params = nb_fwd_input(op, 0), *indices = nb_fwd_input(op, 1);
  int known = known_gather_axis(op);
  if (known == 0 && nbg_static(params) && (dxs[0] = gathered_rows_grad(c, params, indices, dys[0])))
    return nb_status(c);
  nb_tensor *pshape = nb_shape_op(c, params, NB_I64), *a = gather_axis(c, op, known, pshape);
  nb_tensor *zero = nb_scalar(c, NB_I64, 0), *one = nb_scalar(c, NB_I64, 1);
  nb_tensor *n = nb_prod(c, nb_shape_op(c, indices, NB_I64), (const int[]){0}, 1, false);
  nb_tensor *inner = dims_product(c, pshape, vec1(c, nb_add(c, a, one)), vec1(c, nb_scalar(c, NB_I64, -1)));
  nb_tensor *rows = nb_gather_t(c, pshape, a, zero, 0), *ids = flatten(c, indices), *summed;
  if (known == 0) {
    nb_tensor *dims[2] = {n, inner};
    nb_tensor *data = nb_reshape_t(c, dys[0], nb_pack(c, dims, 2, 0));
    summed = nb_unsorted_segment_sum_t(c, data, ids, rows);
  } else {
    static const int swap[3] = {1, 0, 2};
    nb_tensor *dims[3] = {dims_product(c, pshape, vec1(c, zero), vec1(c, a)), n, inner};
    nb_tensor *data = nb_transpose(c, nb_reshape_t(c, dys[0], nb_pack(c, dims, 3, 0)), swap, 3);
    summed = nb_transpose(c, nb_unsorted_segment_sum_t(c, data, ids, rows), swap, 3);
  }
  dxs[0] = nb_reshape_t(c, summed, pshape);
  return nb_status(c);
}

/* The [B, 1] int64 column 0, 1, ..., B - 1 (the batch numbers), B a scalar tensor: a
   constant when B folds at build time, else computed at run time. */
static nb_tensor *batch_numbers(nb_ctx *c, nb_tensor *nbatch) {
  return nb_reshape_t(c, nb_range(c, nb_scalar(c, NB_I64, 0), nbatch, nb_scalar(c, NB_I64, 1)),
                      nb_tensor_from(c, NB_I64, 1, (const int64_t[]){2}, (const int64_t[]){-1, 1}));
}

/* y = gather(p, indices, axis, batch_dims b): batch element i gathers from its own slice of
   p (TF's _BatchGatherGrad). With p viewed as [B, M, G, N] (B the batch dims, M those up
   to the axis, G = p.shape[axis]) and dy as [B, M, I, N] (I: indices' non-batch dims),
   move I before M, number the rows of the (B, G) space as i * G + index, take
   UnsortedSegmentSum into B * G rows, split them back to [B, G, M, N], move G after M and
   reshape to p's shape. B may be known only at run time: the batch numbers come from Range. */
static nb_code batch_gather_grad(nb_ctx *c, const nb_fwd_op *op, int b, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *params = nb_fwd_input(op, 0), *indices = nb_fwd_input(op, 1);
  static const int swap[4] = {0, 2, 1, 3};
  nb_tensor *pshape = nb_shape_op(c, params, NB_I64), *a = gather_axis(c, op, -1, pshape);
  nb_tensor *bv = vec1(c, nb_scalar(c, NB_I64, b)), *one = nb_scalar(c, NB_I64, 1);
  nb_tensor *nbatch = dims_product(c, pshape, vec1(c, nb_scalar(c, NB_I64, 0)), bv);
  nb_tensor *m = dims_product(c, pshape, bv, vec1(c, nb_sub(c, a, nb_scalar(c, NB_I64, b))));
  nb_tensor *n = dims_product(c, nb_shape_op(c, indices, NB_I64), bv, vec1(c, nb_scalar(c, NB_I64, -1)));
  nb_tensor *inner = dims_product(c, pshape, vec1(c, nb_add(c, a, one)), vec1(c, nb_scalar(c, NB_I64, -1)));
  nb_tensor *rows = nb_gather_t(c, pshape, a, nb_scalar(c, NB_I64, 0), 0);
  nb_tensor *view[4] = {nbatch, m, n, inner}, *data_dims[3] = {nb_mul(c, nbatch, n), m, inner};
  nb_tensor *by_index = nb_transpose(c, nb_reshape_t(c, dys[0], nb_pack(c, view, 4, 0)), swap, 4);
  nb_tensor *data_shape = nb_pack(c, data_dims, 3, 0);
  nb_tensor *flat_ids = nb_reshape_t(c, nbg_as_i64(c, indices), nb_pack(c, (nb_tensor *[]){nbatch, n}, 2, 0));
  nb_tensor *ids = nb_add(c, flat_ids, nb_mul(c, batch_numbers(c, nbatch), rows));
  nb_tensor *data = nb_reshape_t(c, by_index, data_shape);
  nb_tensor *summed = nb_unsorted_segment_sum_t(c, data, flatten(c, ids), nb_mul(c, nbatch, rows));
  nb_tensor *split[4] = {nbatch, rows, m, inner};
  nb_tensor *by_row = nb_transpose(c, nb_reshape_t(c, summed, nb_pack(c, split, 4, 0)), swap, 4);
  dxs[0] = nb_reshape_t(c, by_row, pshape);
  return nb_status(c);
}

static nb_code gather_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *indices = nb_fwd_input(op, 1);
  int64_t batch_dims = nb_fwd_attr_int(op, "batch_dims");
  if (batch_dims < 0 && nb_rank(indices) >= 0) batch_dims += nb_rank(indices);
  if (batch_dims == 0) return plain_gather_grad(c, op, dys, dxs);
  if (batch_dims < 0)
    return nb_set_error(c, NB_UNIMPLEMENTED,
                        "GatherV2 gradient: batch_dims < 0 needs the indices' rank when the graph is built");
  return batch_gather_grad(c, op, (int)batch_dims, dys, dxs);
}

/* The shape that aligns a mask over ids with data: ids' shape followed by one 1 per dim
   data has after ids' (`inner` of them when known, else counted at run time). */
static nb_tensor *mask_shape(nb_ctx *c, nb_tensor *data, nb_tensor *ids, int inner) {
  nb_tensor *ones;
  if (inner >= 0) {
    int64_t v[NB_MAX_RANK], len = inner;
    for (int i = 0; i < inner; i++) v[i] = 1;
    ones = nb_tensor_from(c, NB_I64, 1, &len, v);
  } else {
    nb_tensor *rank_data = nb_shape_op(c, nb_shape_op(c, data, NB_I64), NB_I64);
    ones = nb_fill_t(c, nb_sub(c, rank_data, nb_shape_op(c, nb_shape_op(c, ids, NB_I64), NB_I64)),
                     nb_scalar(c, NB_I64, 1));
  }
  nb_tensor *parts[2] = {nb_shape_op(c, ids, NB_I64), ones};
  return nb_concat(c, parts, 2, 0);
}

/* y[s] = sum of data[i] over ids[i] == s: row i feeds only segment ids[i], and rows with
   negative ids are dropped, so ddata[i] = ids[i] >= 0 ? dy[ids[i]] : 0 (TF's
   GatherDropNegatives); ids and num_segments get none. */
static nb_code segment_sum_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *data = nb_fwd_input(op, 0), *ids = nb_fwd_input(op, 1), *dy = dys[0];
  int inner = nb_rank(dy) >= 0                          ? nb_rank(dy) - 1
              : nb_rank(data) >= 0 && nb_rank(ids) >= 0 ? nb_rank(data) - nb_rank(ids)
                                                        : -1;
  nb_tensor *zero = nb_scalar(c, nb_dtype_of(ids), 0);
  nb_tensor *gathered = nb_gather(c, dy, nb_maximum(c, ids, zero), 0, 0);
  nb_tensor *keep = nb_greater_equal(c, ids, zero);
  if (inner != 0) { /* align the mask with data's leading (ids) dims */
    keep = nb_reshape_t(c, keep, mask_shape(c, data, ids, inner));
  }
  dxs[0] = nb_select(c, keep, gathered, nb_scalar(c, nb_dtype_of(dy), 0));
  return nb_status(c);
}

void nbg_register_slicing_grads(void) {
  static const nbg_entry rules[] = {
      {"Slice", slice_grad, NBG_IN(1) | NBG_IN(2), 0},
      {"StridedSlice", strided_slice_grad, NBG_IN(1) | NBG_IN(2) | NBG_IN(3), 0},
      {"StridedSliceGrad", strided_slice_grad_grad, NBG_IN(1) | NBG_IN(2) | NBG_IN(3), 0},
      {"GatherV2", gather_grad, NBG_IN(1) | NBG_IN(2), 0},
      {"UnsortedSegmentSum", segment_sum_grad, NBG_IN(1), 0},
  };
  nbad_register_table(rules, sizeof rules / sizeof *rules);
}

void nbg_register_slicing_fwd(void) {
  /* slices, gathers and scatters pick or add elements: linear in the float input */
  static const nbg_fwd_entry table[] = {
      {"Slice", NBG_FWD_LINEAR, NULL, 0, 0},
      {"StridedSlice", NBG_FWD_LINEAR, NULL, 0, 0},
      {"StridedSliceGrad", NBG_FWD_LINEAR, NULL, 0, 0},
      {"GatherV2", NBG_FWD_LINEAR, NULL, 0, 0},
      {"UnsortedSegmentSum", NBG_FWD_LINEAR, NULL, 0, 0},
  };
  nbad_register_fwd_table(table, sizeof table / sizeof table[0]);
}
