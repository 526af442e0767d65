/* Gradients of the array ops (TF's array_grad.py). All of them are linear in their float
   input: shape changes give the gradient back its input's shape, joins and splits trade
   places, and broadcasts and tiles sum over the copies. Index, axis and shape inputs are
   read only through ops (their values are not known while a graph is built), which
   constant folding turns back into constants when they are static. */
#include "grad.h"

/* The int64 vector [0, 1, ..., n-1], n <= NB_MAX_RANK. */
static nb_tensor *iota(nb_ctx *c, int n) {
  int64_t v[NB_MAX_RANK], len = n;
  for (int i = 0; i < n; i++) v[i] = i;
  return nb_tensor_from(c, NB_I64, 1, &len, v);
}

/* dy reshaped to x's shape: a constant shape when it is static, else Shape(x) at run time. */
static nb_tensor *reshape_like(nb_ctx *c, nb_tensor *dy, nb_tensor *x) {
  if (nbg_static(x)) return nb_reshape(c, dy, nb_shape(x), nb_rank(x));
  return nb_reshape_t(c, dy, nb_shape_op(c, x, NB_I64));
}

/* Reshape, ExpandDims and Squeeze only relabel x's elements, so dx = reshape(dy, shape(x));
   the shape/axis input gets none. */
static nb_code reshape_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  dxs[0] = reshape_like(c, dys[0], nb_fwd_input(op, 0));
  return nb_status(c);
}

/* y = transpose(x, p) moves x's axis p[i] to axis i, so dx = transpose(dy, q) with q the
   inverse permutation, q[p[i]] = i. n is the length of p (x's rank), static in practice. */
static nb_code transpose_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *x = nb_fwd_input(op, 0), *perm = nb_fwd_input(op, 1);
  int n = nb_rank(perm) == 1 && nb_shape(perm)[0] >= 0 ? (int)nb_shape(perm)[0] : nb_rank(x);
  if (n < 0 || n > NB_MAX_RANK) /* unknown rank: no static [0..n) */
    return nb_set_error(c, NB_UNIMPLEMENTED, "Transpose gradient: the permutation's length must be known");
  nb_tensor *inverse = nbg_invert_perm(c, perm, nb_scalar(c, nb_dtype_of(perm), n));
  dxs[0] = nb_transpose_t(c, dys[0], inverse);
  return nb_status(c);
}

/* y = broadcast_to(x, s) copies x along the broadcast axes: dx sums dy over them. */
static nb_code broadcast_to_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  dxs[0] = nbg_reduce_to(c, dys[0], nb_fwd_input(op, 0));
  return nb_status(c);
}

/* The 0/1 int64 mask of `axis` (a scalar tensor, possibly negative) among r axes:
   position i is 1 where i == axis or i - r == axis. */
static nb_tensor *axis_mask(nb_ctx *c, nb_tensor *axis, int r) {
  nb_tensor *pos = iota(c, r), *a = nbg_as_i64(c, axis);
  nb_tensor *neg = nb_sub(c, pos, nb_scalar(c, NB_I64, r));
  nb_tensor *hit = nb_logical_or(c, nb_equal(c, pos, a), nb_equal(c, neg, a));
  return nb_cast(c, hit, NB_I64);
}

/* y = concat(x_0..x_{N-1}, axis): x_i is the window of y starting at o_i = shape(x_0)[axis]
   + ... + shape(x_{i-1})[axis] along axis, so dx_i = slice(dy, o_i * onehot(axis),
   shape(x_i)). The running sum of the shape vectors, masked to the axis, gives the begins;
   with static shapes all of it folds to constants. */
static nb_code concat_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  int n = nb_fwd_num_inputs(op) - 1, r = nb_rank(dys[0]);
  for (int i = 0; i < n && r < 0; i++) r = nb_rank(nb_fwd_input(op, i));
  if (r < 1 || r > NB_MAX_RANK) /* unknown rank: no static [0..r) */
    return nb_set_error(c, NB_UNIMPLEMENTED, "ConcatV2 gradient: the inputs' rank must be known");
  nb_tensor *mask = axis_mask(c, nb_fwd_input(op, n), r);
  nb_tensor *offset = nb_tensor_from(c, NB_I64, 1, (const int64_t[]){r}, NULL);
  for (int i = 0; i < n; i++) {
    nb_tensor *size = nb_shape_op(c, nb_fwd_input(op, i), NB_I64);
    dxs[i] = nb_slice_t(c, dys[0], nb_mul(c, offset, mask), size);
    offset = nb_add(c, offset, size);
  }
  return nb_status(c);
}

/* y = stack(x_0..x_{N-1}, axis): x_i is y's slice i along axis, so dx = unstack(dy, axis). */
static nb_code pack_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  int n = nb_fwd_num_inputs(op);
  return nb_unpack(c, dys[0], (int)nb_fwd_attr_int(op, "axis"), n, dxs);
}

/* y_i = unstack(x, axis)[i]: dx = stack(dy_0..dy_{N-1}, axis). Both passes give float
   outputs without a gradient zeros when a sibling has one, so every dy_i is there. */
static nb_code unpack_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  dxs[0] = nb_pack(c, dys, nb_fwd_num_outputs(op), (int)nb_fwd_attr_int(op, "axis"));
  return nb_status(c);
}

/* Tile with static shapes: dy's axis i of size m*d holds m copies of x's axis i of size d,
   so for each tiled axis, view dy as [outer, m, d, inner] and sum over m. */
static nb_tensor *untile_static(nb_ctx *c, nb_tensor *dy, nb_tensor *x) {
  int r = nb_rank(x);
  int64_t cur[NB_MAX_RANK];
  for (int i = 0; i < r; i++) cur[i] = nb_shape(dy)[i];
  nb_tensor *g = dy;
  for (int i = 0; i < r; i++) {
    int64_t d = nb_shape(x)[i], m = cur[i] / d, outer = 1, inner = 1;
    if (m == 1) continue;
    for (int j = 0; j < i; j++) outer *= cur[j];
    for (int j = i + 1; j < r; j++) inner *= cur[j];
    int64_t split[4] = {outer, m, d, inner};
    g = nb_sum(c, nb_reshape(c, g, split, 4), (const int[]){1}, 1, false);
    cur[i] = d;
  }
  return nb_reshape(c, g, nb_shape(x), r);
}

/* Tile with unknown shapes (TF's _TileGrad): reshape dy to [m0, d0, m1, d1, ...] from
   stack([multiples, shape(x)], axis 1) and sum over the even axes. */
static nb_tensor *untile_dynamic(nb_ctx *c, nb_tensor *dy, nb_tensor *x, nb_tensor *multiples, int r) {
  nb_tensor *pair[2] = {nbg_as_i64(c, multiples), nb_shape_op(c, x, NB_I64)};
  nb_tensor *split = nb_reshape_t(c, dy, nb_reshape(c, nb_pack(c, pair, 2, 1), (const int64_t[]){-1}, 1));
  int axes[NB_MAX_RANK];
  for (int i = 0; i < r; i++) axes[i] = 2 * i;
  return nb_sum(c, split, axes, r, false);
}

/* y = tile(x, m): each element of x appears in m0*m1*... places, dx sums them. */
static nb_code tile_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *x = nb_fwd_input(op, 0), *multiples = nb_fwd_input(op, 1), *dy = dys[0];
  if (nbg_static(x) && nbg_static(dy) && nb_rank(x) == nb_rank(dy)) {
    dxs[0] = nb_num_elements(x) == 0 ? nb_zeros_like(c, x) : untile_static(c, dy, x);
    return nb_status(c);
  }
  int r = nb_rank(multiples) == 1 ? (int)nb_shape(multiples)[0] : -1;
  /* the split view has rank 2r; an unknown rank leaves no static list of axes to sum */
  if (r < 0 || 2 * r > NB_MAX_RANK)
    return nb_set_error(c, NB_UNIMPLEMENTED, "Tile gradient: with unknown shapes the rank must be known and <= %d",
                        NB_MAX_RANK / 2);
  dxs[0] = untile_dynamic(c, dy, x, multiples, r);
  return nb_status(c);
}

/* y = pad(x, paddings): x is y's window at paddings[:, 0], so
   dx = slice(dy, paddings[:, 0], shape(x)); the paddings get none. */
static nb_code pad_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  nb_tensor *x = nb_fwd_input(op, 0), *paddings = nb_fwd_input(op, 1);
  nb_tensor *before = nb_slice(c, paddings, (const int64_t[]){0, 0}, (const int64_t[]){-1, 1}, 2);
  nb_tensor *begin = nbg_as_i64(c, nb_reshape(c, before, (const int64_t[]){-1}, 1));
  dxs[0] = nb_slice_t(c, dys[0], begin, nb_shape_op(c, x, NB_I64));
  return nb_status(c);
}

/* y = fill(dims, value): every element of y is value, so dvalue = sum(dy); dims gets none.
   (A dy of unknown rank is summed as a flat vector.) */
static nb_code fill_grad(nb_ctx *c, const nb_fwd_op *op, nb_tensor *const *dys, nb_tensor **dxs) {
  (void)op;
  nb_tensor *dy = dys[0];
  if (nb_rank(dy) >= 0)
    dxs[1] = nb_sum(c, dy, NULL, 0, false);
  else
    dxs[1] = nb_sum(c, nb_reshape(c, dy, (const int64_t[]){-1}, 1), (const int[]){0}, 1, false);
  return nb_status(c);
}

void nbg_register_array_grads(void) {
  static const nbg_entry rules[] = {
      {"Reshape", reshape_grad, 0, 0},
      {"ExpandDims", reshape_grad, 0, 0},
      {"Squeeze", reshape_grad, 0, 0},
      {"Transpose", transpose_grad, NBG_IN(1), 0},
      {"BroadcastTo", broadcast_to_grad, NBG_IN(1), 0},
      {"ConcatV2", concat_grad, NBG_ALL, 0},
      {"Pack", pack_grad, 0, 0},
      {"Unpack", unpack_grad, 0, 0},
      {"Tile", tile_grad, NBG_IN(1), 0},
      {"Pad", pad_grad, NBG_IN(1), 0},
      {"Fill", fill_grad, 0, 0},
  };
  nbad_register_table(rules, sizeof rules / sizeof *rules);
  /* outputs that depend on no input value, or only integer results */
  nbad_register_builtin("ZerosLike", NULL);
  nbad_register_builtin("OnesLike", NULL);
  nbad_register_builtin("Shape", NULL);
  nbad_register_builtin("Const", NULL);
  nbad_register_builtin("Placeholder", NULL);
  nbad_register_builtin("BroadcastGradientArgs", NULL);
  nbad_register_builtin("Range", NULL);
}

void nbg_register_array_fwd(void) {
  /* shape ops move or repeat elements: linear, the op itself on the tangents */
  static const nbg_fwd_entry table[] = {
      {"Reshape", NBG_FWD_LINEAR, NULL, 0, 0},     {"ExpandDims", NBG_FWD_LINEAR, NULL, 0, 0},
      {"Squeeze", NBG_FWD_LINEAR, NULL, 0, 0},     {"Transpose", NBG_FWD_LINEAR, NULL, 0, 0},
      {"BroadcastTo", NBG_FWD_LINEAR, NULL, 0, 0}, {"ConcatV2", NBG_FWD_LINEAR, NULL, 0, 0},
      {"Pack", NBG_FWD_LINEAR, NULL, 0, 0},        {"Unpack", NBG_FWD_LINEAR, NULL, 0, 0},
      {"Tile", NBG_FWD_LINEAR, NULL, 0, 0},        {"Pad", NBG_FWD_LINEAR, NULL, 0, 0},
      {"Fill", NBG_FWD_LINEAR, NULL, 0, 0},
  };
  nbad_register_fwd_table(table, sizeof table / sizeof table[0]);
}
