/* IndexedSlices: TF's sparse gradient (tf.IndexedSlices). The gradient of an embedding
   lookup (GatherV2 on axis 0) touches only the gathered rows of a possibly huge table;
   as slices it costs the rows, not the table. A slices tensor is a handle of the dense
   shape that owns two parts, values [N, dense dims 1..] and int indices [N], and has no
   data or node of its own. Gradient passes keep it sparse while every contribution is
   sparse (concatenating the parts), optimizers apply it row by row, and any op given one
   as an input densifies it first, as tf.convert_to_tensor does. */
#include "training.h"

#include <stdlib.h>
#include <string.h>

bool nb_is_indexed_slices(const nb_tensor *x) { return x && x->slice_values; }
nb_tensor *nb_indexed_slices_values(const nb_tensor *x) { return x ? x->slice_values : NULL; }
nb_tensor *nb_indexed_slices_indices(const nb_tensor *x) { return x ? x->slice_indices : NULL; }

/* Every index of concrete indices within [0, rows). */
static nb_code check_index_range(nb_ctx *c, const nb_tensor *indices, int64_t rows) {
  int64_t bad = nbop_first_bad_index(indices, rows);
  if (bad < 0) return NB_OK;
  return nbcore_fail(c, NB_INVALID, "nb_indexed_slices: indices[%lld] = %lld is not in [0, %lld)", (long long)bad,
                     (long long)nbop_index_at(indices, bad), (long long)rows);
}

/* values [N, dense_shape[1:]] and indices [N] fit the dense shape (dims unknown at graph
   build time pass). */
static nb_code check_parts(nb_ctx *c, const nb_tensor *values, const nb_tensor *indices, int rank,
                           const int64_t *dense) {
  if (!nbcore_is_float(values->dtype) || (indices->dtype != NB_I32 && indices->dtype != NB_I64))
    return nbcore_fail(c, NB_DTYPE, "nb_indexed_slices: values must be float and indices int32 or int64, got %s and %s",
                       nb_dtype_name(values->dtype), nb_dtype_name(indices->dtype));
  bool fits = values->rank == rank && indices->rank == 1 &&
              (values->shape[0] < 0 || indices->shape[0] < 0 || values->shape[0] == indices->shape[0]);
  for (int d = 1; d < rank && fits; d++) fits = values->shape[d] < 0 || values->shape[d] == dense[d];
  if (!fits)
    return nbcore_fail(c, NB_SHAPE, "nb_indexed_slices: values %s and indices %s do not fit dense shape %s",
                       nbop_tstr(values), nbop_tstr(indices), nbop_sstr(rank, dense));
  return NB_OK;
}

static nb_code check_args(nb_ctx *c, const nb_tensor *values, const nb_tensor *indices, int rank,
                          const int64_t *dense) {
  if (!values || !indices || (rank > 0 && !dense) || values->slice_values || indices->slice_values)
    return nbcore_fail(c, NB_INVALID, "nb_indexed_slices: values and indices must be dense tensors");
  if (nbcore_released(values) || nbcore_released(indices))
    return nbcore_fail(c, NB_INVALID, "nb_indexed_slices: values and indices must be live (%s was released)",
                       nbcore_released(values) ? "values" : "indices");
  if (rank < 1 || rank > NB_MAX_RANK)
    return nbcore_fail(c, NB_SHAPE, "nb_indexed_slices: the dense rank %d must be in [1, %d]", rank, NB_MAX_RANK);
  for (int d = 0; d < rank; d++)
    if (dense[d] < 0)
      return nbcore_fail(c, NB_SHAPE, "nb_indexed_slices: dense shape %s must be fully known", nbop_sstr(rank, dense));
  bool symbolic = values->graph || indices->graph;
  if (symbolic != (c->graph != NULL) || (symbolic && (values->graph != c->graph || indices->graph != c->graph)))
    return nbcore_fail(c, NB_INVALID, "nb_indexed_slices: values and indices must belong to the context (%s)",
                       c->graph ? "graph tensors of its graph" : "concrete tensors");
  nb_code code = check_parts(c, values, indices, rank, dense);
  return code || symbolic ? code : check_index_range(c, indices, dense[0]);
}

nb_tensor *nb_indexed_slices(nb_ctx *c, nb_tensor *values, nb_tensor *indices, const int64_t *dense_shape, int rank) {
  if (!nbop_live(c) || check_args(c, values, indices, rank, dense_shape)) return NULL;
  nb_tensor *x = nbcore_handle_new(c, values->dtype, rank, dense_shape, NULL);
  if (!x) return NULL;
  x->slice_values = nbcore_detached_copy(values);
  x->slice_indices = nbcore_detached_copy(indices);
  if (x->slice_values && x->slice_indices) return x;
  nb_tensor_free(x);
  nbcore_fail(c, NB_NOMEM, "nb_indexed_slices: out of memory");
  return NULL;
}

nb_tensor *nb_densify(nb_ctx *c, nb_tensor *x) {
  if (!x || !x->slice_values) return x;
  return nb_unsorted_segment_sum(c, x->slice_values, x->slice_indices, x->shape[0]);
}

static bool same_slices_kind(const nb_tensor *a, const nb_tensor *b) {
  return a && b && a->slice_values && b->slice_values && a->dtype == b->dtype && a->rank == b->rank &&
         memcmp(a->shape, b->shape, (size_t)a->rank * sizeof *a->shape) == 0;
}

nb_tensor *nbop_indexed_slices_concat_n(nb_ctx *c, nb_tensor *const *x, int n) {
  if (!nbop_live(c)) return NULL;
  bool ok = n >= 1 && x, mixed = false;
  for (int i = 0; ok && i < n; i++) {
    ok = same_slices_kind(x[0], x[i]);
    mixed |= ok && x[i]->slice_indices->dtype != x[0]->slice_indices->dtype;
  }
  if (!ok) {
    nbcore_fail(c, NB_INVALID,
                "nb_indexed_slices_concat: needs two IndexedSlices (or more) of one dtype and dense shape");
    return NULL;
  }
  nb_tensor **parts = malloc((size_t)n * 2 * sizeof *parts), **values = parts, **indices = parts + n;
  if (!parts) {
    nbcore_fail(c, NB_NOMEM, "nb_indexed_slices_concat: out of memory");
    return NULL;
  }
  nb_scope_begin(c);            /* the casts and concatenations: the result copies them */
  for (int i = 0; i < n; i++) { /* int32 and int64 parts meet as int64 */
    values[i] = x[i]->slice_values;
    indices[i] = mixed ? nb_cast(c, x[i]->slice_indices, NB_I64) : x[i]->slice_indices;
  }
  nb_tensor *all_values = nb_concat(c, values, n, 0), *all_indices = nb_concat(c, indices, n, 0);
  nb_tensor *sum = nb_indexed_slices(c, all_values, all_indices, x[0]->shape, x[0]->rank);
  nb_scope_end(c, &sum, 1);
  free(parts);
  return sum;
}

nb_tensor *nb_indexed_slices_concat(nb_ctx *c, nb_tensor *a, nb_tensor *b) {
  nb_tensor *x[2] = {a, b};
  return nbop_indexed_slices_concat_n(c, x, 2);
}

nb_code nbop_densify_inputs(nb_ctx *c, nb_tensor *const *in, int nin, nb_tensor **dense) {
  for (int i = 0; i < nin; i++) dense[i] = nb_densify(c, in[i]);
  return nb_status(c);
}

nb_code nbop_densify_list(nb_ctx *c, nb_tensor *const *in, int n, nb_tensor *const **dense, nb_tensor ***owned) {
  bool sparse = false;
  for (int i = 0; in && i < n; i++) sparse |= nb_is_indexed_slices(in[i]);
  *dense = in;
  *owned = NULL;
  if (!sparse) return NB_OK;
  if (!(*owned = malloc((size_t)n * sizeof **owned)))
    return nbcore_fail(c, NB_NOMEM, "densifying IndexedSlices: out of memory");
  *dense = *owned;
  return nbop_densify_inputs(c, in, n, *owned);
}
