/* Gradients of the slicing ops (TF's array_grad.py and math_grad.py): a slice's gradient
   puts dy back where the slice came from, a gather's scatters it (summing repeats), and a
   segment sum's gathers it. Index inputs are used only through ops, which constant
   folding evaluates at build time when they are constants. */
#include "grad.h"

#include <stdint.h>
#include <stdlib.h>

/* The one output of the op `type` on in[0..nin). */
static nb_tensor *call(nb_ctx *c, const char *type, nb_tensor *const *in, int nin, const nb_attr *attrs,
                       int nattrs) {
  nb_tensor *out = NULL;
  nb_op(c, type, in, nin, attrs, nattrs, &out, 1);
  return out;
}

/* x as int64 (index inputs may be int32). */
static nb_tensor *as_i64(nb_ctx *c, nb_tensor *x) {
  return x && nb_dtype_of(x) != NB_I64 ? nb_cast(c, x, NB_I64) : x;
}

static nb_tensor *flatten(nb_ctx *c, nb_tensor *x) { return nb_reshape(c, x, (const int64_t[]){-1}, 1); }

/* y = slice(x, b, s) is x's window at b, so dx = pad(dy, [[b, shape(x) - b - shape(y)]])
   (TF's _SliceGrad); begin and size get none. */
static nb_code slice_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *x = nb_fwd_input(op, 0), *y = nb_fwd_output(op, 0);
  nb_tensor *before = as_i64(c, nb_fwd_input(op, 1));
  nb_tensor *rest = nb_sub(c, nb_shape_op(c, x, NB_I64), before);
  nb_tensor *sides[2] = {before, nb_sub(c, rest, nb_shape_op(c, y, NB_I64))};
  nb_tensor *in[2] = {dys[0], nb_pack(c, sides, 2, 1)};
  dxs[0] = call(c, "Pad", in, 2, NULL, 0);
  return nb_status(c);
}

/* x's flat positions 0..n-1 laid out in x's (static) shape; int32 when they fit. */
static nb_tensor *positions(nb_ctx *c, nb_tensor *x) {
  int64_t n = nb_num_elements(x);
  bool narrow = n <= INT32_MAX;
  size_t esz = narrow ? sizeof(int32_t) : sizeof(int64_t);
  void *v = malloc((size_t)(n > 0 ? n : 1) * esz);
  if (!v) return NULL;
  for (int64_t i = 0; i < n; i++) {
    if (narrow)
      ((int32_t *)v)[i] = (int32_t)i;
    else
      ((int64_t *)v)[i] = i;
  }
  nb_tensor *t = nb_tensor_from(c, narrow ? NB_I32 : NB_I64, nb_rank(x), nb_shape(x), v);
  free(v);
  return t;
}

/* y = strided_slice(x, begin, end, strides) picks distinct elements of x, so dx scatters dy
   back onto them (TF's StridedSliceGrad op, which nabla lacks). Which elements: the same
   StridedSlice (same begin/end/strides inputs and masks) applied to x's flat positions;
   then dx = reshape(UnsortedSegmentSum(flat(dy), flat(picked), size(x)), shape(x)). The
   positions are a constant, so x's shape must be static. */
static nb_code strided_slice_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *x = nb_fwd_input(op, 0);
  if (!nbg_static(x)) /* no Range op to number x's elements at run time */
    return nb_set_error(c, NB_UNIMPLEMENTED, "StridedSlice gradient: the input's shape must be known when the graph is built");
  nb_tensor *pos = positions(c, x);
  if (!pos) return nb_status(c) ? nb_status(c) : NB_NOMEM;
  static const char *const masks[5] = {"begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                       "shrink_axis_mask"};
  nb_attr attrs[5];
  for (int i = 0; i < 5; i++) attrs[i] = nb_attr_int(masks[i], nb_fwd_attr_int(op, masks[i]));
  nb_tensor *in[4] = {pos, nb_fwd_input(op, 1), nb_fwd_input(op, 2), nb_fwd_input(op, 3)};
  nb_tensor *picked = call(c, "StridedSlice", in, 4, attrs, 5);
  nb_tensor_free(pos);
  nb_tensor *scattered = nb_unsorted_segment_sum(c, flatten(c, dys[0]), flatten(c, picked), nb_num_elements(x));
  dxs[0] = nb_reshape(c, scattered, nb_shape(x), nb_rank(x));
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
  nb_tensor *in[3] = {s, begin, size};
  return nb_prod(c, call(c, "Slice", in, 3, NULL, 0), (const int[]){0}, 1, false);
}

static nb_tensor *vec1(nb_ctx *c, nb_tensor *scalar) { return nb_reshape(c, scalar, (const int64_t[]){1}, 1); }

/* The gather axis as an int64 scalar in [0, rank(params)): the static one when known, else
   the axis input plus the rank when negative, computed at run time. */
static nb_tensor *gather_axis(nb_ctx *c, const nb_fwd_op *op, int known, nb_tensor *pshape) {
  if (known >= 0) return nb_scalar(c, NB_I64, known);
  nb_tensor *raw = as_i64(c, nb_fwd_input(op, 2));
  nb_tensor *rank = nb_reshape(c, nb_shape_op(c, pshape, NB_I64), NULL, 0);
  nb_tensor *negative = nb_cast(c, nb_less(c, raw, nb_scalar(c, NB_I64, 0)), NB_I64);
  return nb_add(c, raw, nb_mul(c, negative, rank));
}

/* y = gather(p, indices, axis) copies p's slices along axis a, so dp scatter-adds dy's
   slices back (TF's _GatherV2Grad, made dense). With p viewed as [outer, p.shape[a],
   inner], dy is [outer, n, inner] for n = size(indices): move n to the front, take
   UnsortedSegmentSum over the flat indices into p.shape[a] rows, move the rows back and
   reshape to p's shape. The views are rank 3 whatever p's rank, so only the axis value is
   needed, computed with ops from the axis input; the transposes are skipped when the
   static shapes prove a == 0. batch_dims != 0 is not supported. */
static nb_code gather_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *params = nb_fwd_input(op, 0), *indices = nb_fwd_input(op, 1);
  int64_t batch_dims = nb_fwd_attr_int(op, "batch_dims");
  if (batch_dims < 0 && nb_rank(indices) >= 0) batch_dims += nb_rank(indices);
  if (batch_dims != 0) return nb_set_error(c, NB_UNIMPLEMENTED, "GatherV2 gradient: batch_dims != 0 is not supported");
  int known = static_gather_axis(params, indices, nb_fwd_output(op, 0));
  nb_tensor *pshape = nb_shape_op(c, params, NB_I64), *a = gather_axis(c, op, known, pshape);
  nb_tensor *zero = nb_scalar(c, NB_I64, 0), *one = nb_scalar(c, NB_I64, 1);
  nb_tensor *n = nb_prod(c, nb_shape_op(c, indices, NB_I64), (const int[]){0}, 1, false);
  nb_tensor *inner = dims_product(c, pshape, vec1(c, nb_add(c, a, one)), vec1(c, nb_scalar(c, NB_I64, -1)));
  nb_tensor *rows_in[3] = {pshape, a, zero};
  nb_tensor *rows = call(c, "GatherV2", rows_in, 3, NULL, 0), *ids = flatten(c, indices), *summed;
  if (known == 0) {
    nb_tensor *dims[2] = {n, inner};
    nb_tensor *rs_in[2] = {dys[0], nb_pack(c, dims, 2, 0)};
    nb_tensor *seg_in[3] = {call(c, "Reshape", rs_in, 2, NULL, 0), ids, rows};
    summed = call(c, "UnsortedSegmentSum", seg_in, 3, NULL, 0);
  } else {
    static const int swap[3] = {1, 0, 2};
    nb_tensor *dims[3] = {dims_product(c, pshape, vec1(c, zero), vec1(c, a)), n, inner};
    nb_tensor *rs_in[2] = {dys[0], nb_pack(c, dims, 3, 0)};
    nb_tensor *seg_in[3] = {nb_transpose(c, call(c, "Reshape", rs_in, 2, NULL, 0), swap, 3), ids, rows};
    summed = nb_transpose(c, call(c, "UnsortedSegmentSum", seg_in, 3, NULL, 0), swap, 3);
  }
  nb_tensor *back_in[2] = {summed, pshape};
  dxs[0] = call(c, "Reshape", back_in, 2, NULL, 0);
  return nb_status(c);
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
    nb_tensor *in[2] = {nb_sub(c, rank_data, nb_shape_op(c, nb_shape_op(c, ids, NB_I64), NB_I64)),
                        nb_scalar(c, NB_I64, 1)};
    ones = call(c, "Fill", in, 2, NULL, 0);
  }
  nb_tensor *parts[2] = {nb_shape_op(c, ids, NB_I64), ones};
  return nb_concat(c, parts, 2, 0);
}

/* y[s] = sum of data[i] over ids[i] == s: row i feeds only segment ids[i], and rows with
   negative ids are dropped, so ddata[i] = ids[i] >= 0 ? dy[ids[i]] : 0 (TF's
   GatherDropNegatives); ids and num_segments get none. */
static nb_code segment_sum_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *data = nb_fwd_input(op, 0), *ids = nb_fwd_input(op, 1), *dy = dys[0];
  int inner = nb_rank(dy) >= 0 ? nb_rank(dy) - 1
              : nb_rank(data) >= 0 && nb_rank(ids) >= 0 ? nb_rank(data) - nb_rank(ids) : -1;
  nb_tensor *zero = nb_scalar(c, nb_dtype_of(ids), 0);
  nb_tensor *gathered = nb_gather(c, dy, nb_maximum(c, ids, zero), 0, 0);
  nb_tensor *keep = nb_greater_equal(c, ids, zero);
  if (inner != 0) { /* align the mask with data's leading (ids) dims */
    nb_tensor *in[2] = {keep, mask_shape(c, data, ids, inner)};
    keep = call(c, "Reshape", in, 2, NULL, 0);
  }
  dxs[0] = nb_select(c, keep, gathered, nb_scalar(c, nb_dtype_of(dy), 0));
  return nb_status(c);
}

void nb_register_slicing_grads(void) {
  nb_register_builtin("Slice", slice_grad);
  nb_register_builtin("StridedSlice", strided_slice_grad);
  nb_register_builtin("GatherV2", gather_grad);
  nb_register_builtin("UnsortedSegmentSum", segment_sum_grad);
}
