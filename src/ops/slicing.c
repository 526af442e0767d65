/* Slicing and indexing: Slice, StridedSlice, StridedSliceGrad, GatherV2,
   UnsortedSegmentSum. Slice and StridedSlice both reduce to one plan for the strided copy
   engine (strided.h): per input dim a first index, a step and a count; StridedSliceGrad
   runs StridedSlice's plan backwards, scattering into zeros. Gather copies whole
   contiguous slices with memcpy; UnsortedSegmentSum accumulates rows into a zeroed
   output. */
#include "strided.h"

#include <string.h>

/* The largest begin/end/strides length: TF's masks are 32-bit. */
#define MAX_SPARSE 31

/* ---- shared helpers ------------------------------------------------------------------ */

static inline int64_t int_at(const nb_tensor *x, int64_t i) {
  return x->dtype == NB_I32 ? ((const int32_t *)nbcore_tdata(x))[i] : ((const int64_t *)nbcore_tdata(x))[i];
}

/* Reads scalar int input i into *v: NBOP_DEFER while not known. */
static nb_code scalar_int(nbop_kargs *k, int i, const char *what, int64_t *v) {
  nb_code code = nbop_kcheck_dtype(k, i, NBOP_M_INT);
  if (code) return code;
  if (k->in[i]->rank > 0)
    return nbop_kfail(k, NB_SHAPE, "%s must be a scalar, got shape %s", what, nbop_tstr(k->in[i]));
  int n;
  return nbop_kints(k, i, 0, v, 1, &n);
}

/* What validate makes of a read: a value not known yet passes. */
static nb_code known_or_later(nb_code code) { return code == NBOP_DEFER ? NB_OK : code; }

/* Inputs first..last are int vectors of one dtype and one length (at most cap), where
   known; their length, when known, in *n (else -1). */
static bool same_length_vectors(const nbop_kargs *k, int first, int last, int cap, int64_t *n) {
  bool ok = true;
  *n = -1;
  for (int i = first; i <= last; i++) {
    const nb_tensor *v = k->in[i];
    ok &= v->rank < 0 || v->rank == 1;
    if (v->size >= 0 && *n >= 0) ok &= v->size == *n;
    if (v->size >= 0) *n = v->size;
  }
  return ok && *n <= cap;
}

static nb_code check_int_vectors(nbop_kargs *k, int first, int last) {
  nb_code code = nbop_kcheck_dtype(k, first, NBOP_M_INT);
  for (int i = first + 1; i <= last && !code; i++) code = nbop_kcheck_same_dtype(k, first, i);
  return code;
}

/* TF's element position in messages: "" for a scalar, "[i]" or "[i,j,...]" otherwise. */
static const char *position_str(const nb_tensor *x, int64_t flat) {
  if (x->rank == 0) return "";
  int64_t pos[NB_MAX_RANK];
  for (int d = x->rank - 1; d >= 0; d--) {
    pos[d] = flat % x->shape[d];
    flat /= x->shape[d];
  }
  return nbop_sstr(x->rank, pos);
}

/* ---- strided copy (Slice, StridedSlice) ------------------------------------------------ */

/* What infer hands the kernel: per input dim the first index, the stride and the count. */
typedef struct slice_spec {
  int rank;
  int64_t begin[NB_MAX_RANK], stride[NB_MAX_RANK], size[NB_MAX_RANK];
} slice_spec;
_Static_assert(sizeof(slice_spec) <= NBOP_SCRATCH_BYTES, "slice_spec must fit in the kernel scratch");

/* Per input dim the input steps stride * (row-major stride) from begin; the output is
   contiguous. Size-1 dims are skipped: they only move the origin, and their stride may be
   any value, too large to multiply. */
static nb_code strided_copy_kernel(nbop_kargs *k) {
  const slice_spec *s = (const slice_spec *)k->scratch;
  const nb_tensor *x = k->in[0], *out = k->res[0];
  if (out->size == 0) return NB_OK;
  int64_t in_st[NB_MAX_RANK], out_st[NB_MAX_RANK], origin = 0;
  nbop_row_major_strides(x->rank, x->shape, in_st);
  nbop_row_major_strides(s->rank, s->size, out_st);
  nbop_strided p = {0};
  for (int d = 0; d < s->rank; d++) {
    origin += s->begin[d] * in_st[d];
    if (s->size[d] > 1) nbop_strided_add(&p, s->size[d], s->stride[d] * in_st[d], out_st[d]);
  }
  size_t esz = nb_dtype_size(out->dtype);
  nbop_strided_run(k, &p, (const char *)nbcore_tdata(x) + (size_t)origin * esz, nbcore_tdata(out), esz);
  return NB_OK;
}

/* ---- Slice ------------------------------------------------------------------------------ */

enum { SLICE_INDEX };

/* Checks one dim's begin and size (size -1: the rest) as TF does and records it. */
static nb_code slice_dim(nbop_kargs *k, int i, int64_t b, int64_t s, slice_spec *spec) {
  int64_t dim = k->in[0]->shape[i];
  if (dim == 0) {
    if (b != 0 || (s != 0 && s != -1))
      return nbop_kfail(k, NB_INVALID,
                        "Expected begin[%d] == 0 (got %lld) and size[%d] == 0 (got %lld) when input.dim_size(%d) == 0",
                        i, (long long)b, i, (long long)s, i);
    s = 0;
  } else {
    if (b < 0 || b > dim)
      return nbop_kfail(k, NB_INVALID, "Expected begin[%d] in [0, %lld], but got %lld", i, (long long)dim,
                        (long long)b);
    if (s == -1) s = dim - b;
    if (s < 0 || s > dim - b)
      return nbop_kfail(k, NB_INVALID, "Expected size[%d] in [0, %lld], but got %lld", i, (long long)(dim - b),
                        (long long)s);
  }
  spec->begin[i] = b;
  spec->stride[i] = 1;
  spec->size[i] = s;
  return NB_OK;
}

/* begin and size: int vectors of x's rank, where known (Index is checked by its spec). */
static nb_code slice_validate(nbop_kargs *k) {
  const nb_tensor *x = k->in[0], *bt = k->in[1], *st = k->in[2];
  int64_t n;
  nb_code code = check_int_vectors(k, 1, 2);
  if (code) return code;
  if (!same_length_vectors(k, 1, 2, NB_MAX_RANK, &n) || (x->rank >= 0 && n >= 0 && n != x->rank))
    return nbop_kfail(k, NB_INVALID,
                      "Expected begin and size arguments to be 1-D tensors of size %d, "
                      "but got shapes %s and %s instead.",
                      x->rank, nbop_tstr(bt), nbop_tstr(st));
  return NB_OK;
}

static nb_code slice_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t begin[NB_MAX_RANK], size[NB_MAX_RANK];
  int n;
  nb_code code = nbop_kints(k, 1, 1, begin, NB_MAX_RANK, &n);
  if (!code) code = nbop_kints(k, 2, 1, size, NB_MAX_RANK, &n);
  if (code) return code;
  slice_spec *spec = (slice_spec *)k->scratch;
  spec->rank = x->rank;
  for (int i = 0; i < x->rank; i++) {
    code = slice_dim(k, i, begin[i], size[i], spec);
    if (code) return code;
  }
  nbop_meta_set(&k->out[0], x->dtype, x->rank, spec->size);
  return NB_OK;
}

/* ---- StridedSlice ------------------------------------------------------------------------ */

enum { SS_INDEX, SS_BEGIN_MASK, SS_END_MASK, SS_ELLIPSIS_MASK, SS_NEW_AXIS_MASK, SS_SHRINK_AXIS_MASK };

/* The spec as given: one entry per begin/end/strides element, plus an implicit trailing
   ellipsis when none was given. */
typedef struct sparse_spec {
  int n;
  int64_t begin[MAX_SPARSE], end[MAX_SPARSE], stride[MAX_SPARSE];
  uint32_t begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_mask;
  int new_after_ellipsis;
} sparse_spec;

#define DIM_NEW (-1)

/* The spec with the ellipsis expanded: one entry per input dim, masks by input dim, and
   per output dim the input dim it comes from (DIM_NEW for a new axis). */
typedef struct dense_spec {
  int64_t begin[NB_MAX_RANK], end[NB_MAX_RANK], stride[NB_MAX_RANK];
  uint32_t begin_mask, end_mask, shrink_mask;
  int nfinal;
  int final_dims[MAX_SPARSE + NB_MAX_RANK + 1];
} dense_spec;

static nb_code read_mask(nbop_kargs *k, int slot, uint32_t *mask) {
  int64_t v = k->attr[slot].i;
  if (v < INT32_MIN || v > INT32_MAX)
    return nbop_kfail(k, NB_INVALID, "attr %s = %lld is out of range for an int32", k->def->attrs[slot].name,
                      (long long)v);
  *mask = (uint32_t)v;
  return NB_OK;
}

/* The masks (int32 values, at most one ellipsis), then begin, end and strides (NBOP_DEFER
   while not known) into s. */
static nb_code read_sparse(nbop_kargs *k, sparse_spec *s) {
  int n;
  nb_code code = read_mask(k, SS_BEGIN_MASK, &s->begin_mask);
  if (!code) code = read_mask(k, SS_END_MASK, &s->end_mask);
  if (!code) code = read_mask(k, SS_ELLIPSIS_MASK, &s->ellipsis_mask);
  if (!code) code = read_mask(k, SS_NEW_AXIS_MASK, &s->new_axis_mask);
  if (!code) code = read_mask(k, SS_SHRINK_AXIS_MASK, &s->shrink_mask);
  if (!code && (s->ellipsis_mask & (s->ellipsis_mask - 1)))
    return nbop_kfail(k, NB_INVALID, "Multiple ellipses in slice spec not allowed");
  if (!code) code = nbop_kints(k, 1, 1, s->begin, MAX_SPARSE, &n);
  if (!code) code = nbop_kints(k, 2, 1, s->end, MAX_SPARSE, &n);
  if (!code) code = nbop_kints(k, 3, 1, s->stride, MAX_SPARSE, &n);
  if (code) return code;
  s->n = n;
  bool seen = false;
  s->new_after_ellipsis = 0;
  for (int i = 0; i < n; i++) {
    if (seen && (s->new_axis_mask >> i & 1)) s->new_after_ellipsis++;
    if (s->ellipsis_mask >> i & 1) seen = true;
  }
  if (!seen) s->ellipsis_mask |= 1u << s->n++;
  return NB_OK;
}

/* Expands the ellipsis over the input dims not named by the entries after it. */
static void expand_ellipsis(const sparse_spec *s, int i, int rank, int *full, dense_spec *d) {
  int next = rank - (s->n - i) + 1 + s->new_after_ellipsis;
  if (next > rank) next = rank;
  for (; *full < next; (*full)++) {
    d->stride[*full] = 1;
    d->begin_mask |= 1u << *full;
    d->end_mask |= 1u << *full;
    d->final_dims[d->nfinal++] = *full;
  }
}

static nb_code build_dense(nbop_kargs *k, const sparse_spec *s, int rank, dense_spec *d) {
  memset(d, 0, sizeof *d);
  int full = 0;
  for (int i = 0; i < s->n; i++) {
    if (s->ellipsis_mask >> i & 1) {
      expand_ellipsis(s, i, rank, &full, d);
    } else if (s->new_axis_mask >> i & 1) {
      d->final_dims[d->nfinal++] = DIM_NEW;
    } else {
      if (full == rank)
        return nbop_kfail(k, NB_INVALID, "Index out of range using input dim %d; input has only %d dims", full, rank);
      d->begin[full] = s->begin[i];
      d->end[full] = s->end[i];
      d->stride[full] = s->stride[i];
      d->begin_mask |= (s->begin_mask >> i & 1u) << full;
      d->end_mask |= (s->end_mask >> i & 1u) << full;
      if (s->shrink_mask >> i & 1)
        d->shrink_mask |= 1u << full;
      else
        d->final_dims[d->nfinal++] = full;
      full++;
    }
  }
  return NB_OK;
}

/* Negative indices count from the end; the result is clamped to [lo, hi]. */
static int64_t clamp_index(int64_t x, int64_t dim, int64_t lo, int64_t hi) {
  int64_t fwd = x < 0 ? dim + x : x;
  return fwd < lo ? lo : fwd > hi ? hi : fwd;
}

/* Elements in [b, e) taken every s (s may be negative): ceil((e - b) / s), at least 0. */
static int64_t range_count(int64_t b, int64_t e, int64_t s) {
  int64_t len = e - b;
  if (len == 0 || (len < 0) != (s < 0)) return 0;
  return len / s + (len % s != 0);
}

/* Turns dense dim i of an input dim of size dim into a first index, stride and count,
   with TF's clamping and checks. */
static nb_code canonical_dim(nbop_kargs *k, const dense_spec *d, int i, int64_t dim, slice_spec *out) {
  int64_t s = d->stride[i];
  out->stride[i] = s;
  if (d->shrink_mask >> i & 1) {
    int64_t b = d->begin[i] < 0 ? dim + d->begin[i] : d->begin[i];
    if (b < 0 || b >= dim)
      return nbop_kfail(k, NB_INVALID, "slice index %lld of dimension %d out of bounds.", (long long)d->begin[i], i);
    out->begin[i] = b;
    out->size[i] = 1;
    return NB_OK;
  }
  /* a positive stride walks [0, dim], a negative one [-1, dim - 1] (-1: before the start) */
  int64_t lo = s > 0 ? 0 : -1, hi = s > 0 ? dim : dim - 1;
  int64_t b = d->begin_mask >> i & 1 ? (s > 0 ? lo : hi) : clamp_index(d->begin[i], dim, lo, hi);
  int64_t e = d->end_mask >> i & 1 ? (s > 0 ? hi : lo) : clamp_index(d->end[i], dim, lo, hi);
  out->begin[i] = b;
  out->size[i] = range_count(b, e, s);
  return NB_OK;
}

/* validate's part of TF's ValidateStridedSliceOp, for an input of rank rank (-1:
   unknown): begin, end and strides (inputs 1..3) int vectors of one length, the masks,
   and where the values and the rank are known the spec's fit to the rank, non-zero
   strides (positive where a dim shrinks) and the result's rank. */
static nb_code check_strided_slice(nbop_kargs *k, int rank) {
  int64_t n;
  sparse_spec sparse;
  dense_spec dense;
  nb_code code = check_int_vectors(k, 1, 3);
  if (code) return code;
  if (!same_length_vectors(k, 1, 3, MAX_SPARSE, &n))
    return nbop_kfail(k, NB_INVALID,
                      "Expected begin, end, and strides to be 1D equal size tensors of at most %d values, "
                      "but got shapes %s, %s, and %s instead.",
                      MAX_SPARSE, nbop_tstr(k->in[1]), nbop_tstr(k->in[2]), nbop_tstr(k->in[3]));
  code = read_sparse(k, &sparse);
  if (code || rank < 0) return known_or_later(code);
  code = build_dense(k, &sparse, rank, &dense);
  for (int i = 0; i < rank && !code; i++) {
    if (dense.stride[i] == 0) return nbop_kfail(k, NB_INVALID, "strides[%d] must be non-zero", i);
    if ((dense.shrink_mask >> i & 1) && dense.stride[i] < 0)
      return nbop_kfail(k, NB_INVALID, "only stride 1 allowed on non-range indexing.");
  }
  return code ? code : nbop_kcheck_out_rank(k, dense.nfinal, "output");
}

/* The rest of ValidateStridedSliceOp, for an input of the given shape: fills spec (per
   input dim) and m's rank and shape (the slice's). */
static nb_code strided_slice_spec(nbop_kargs *k, int rank, const int64_t *shape, slice_spec *spec, nbop_meta *m) {
  sparse_spec sparse;
  dense_spec dense;
  nb_code code = read_sparse(k, &sparse);
  if (!code) code = build_dense(k, &sparse, rank, &dense);
  if (code) return code;
  spec->rank = rank;
  for (int i = 0; i < rank; i++) {
    code = canonical_dim(k, &dense, i, shape[i], spec);
    if (code) return code;
  }
  m->rank = dense.nfinal;
  for (int i = 0; i < dense.nfinal; i++)
    m->shape[i] = dense.final_dims[i] == DIM_NEW ? 1 : spec->size[dense.final_dims[i]];
  return NB_OK;
}

static nb_code strided_slice_validate(nbop_kargs *k) { return check_strided_slice(k, k->in[0]->rank); }

static nb_code strided_slice_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  k->out[0].dtype = x->dtype;
  return strided_slice_spec(k, x->rank, x->shape, (slice_spec *)k->scratch, &k->out[0]);
}

/* ---- StridedSliceGrad -------------------------------------------------------------------- */

/* Reads the forward input's shape from input 0 (1-D, begin's dtype, dims >= 0; NBOP_DEFER
   while not known). */
static nb_code grad_input_shape(nbop_kargs *k, int *rank, int64_t *shape) {
  const nb_tensor *s = k->in[0];
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_INT);
  if (!code) code = nbop_kcheck_same_dtype(k, 0, 1);
  if (code) return code;
  if (s->rank >= 0 && s->rank != 1)
    return nbop_kfail(k, NB_INVALID, "shape must be 1-D, got shape.shape = %s", nbop_tstr(s));
  if (s->size > NB_MAX_RANK)
    return nbop_kfail(k, NB_SHAPE, "shape has %lld dims, more than the maximum rank %d", (long long)s->size,
                      NB_MAX_RANK);
  code = nbop_kints(k, 0, 1, shape, NB_MAX_RANK, rank);
  if (code) return code;
  for (int i = 0; i < *rank; i++)
    if (shape[i] < 0) return nbop_kfail(k, NB_INVALID, "shape %s has a negative dim", nbop_sstr(*rank, shape));
  return NB_OK;
}

/* The forward input's rank is shape's length, known with shape's values. */
static nb_code strided_slice_grad_validate(nbop_kargs *k) {
  int rank = -1;
  int64_t shape[NB_MAX_RANK];
  nb_code code = grad_input_shape(k, &rank, shape);
  if (code && code != NBOP_DEFER) return code;
  return check_strided_slice(k, code ? -1 : rank);
}

/* dx has the forward input's shape; dy must have the slice's. */
static nb_code strided_slice_grad_infer(nbop_kargs *k) {
  const nb_tensor *dy = k->in[4];
  int rank;
  int64_t shape[NB_MAX_RANK];
  nbop_meta slice;
  nb_code code = grad_input_shape(k, &rank, shape);
  if (!code) code = strided_slice_spec(k, rank, shape, (slice_spec *)k->scratch, &slice);
  if (code) return code;
  bool same = slice.rank == dy->rank;
  for (int i = 0; same && i < dy->rank; i++) same = slice.shape[i] == dy->shape[i];
  if (!same)
    return nbop_kfail(k, NB_INVALID, "shape of dy was %s instead of %s", nbop_tstr(dy),
                      nbop_sstr(slice.rank, slice.shape));
  nbop_meta_set(&k->out[0], dy->dtype, rank, shape);
  return NB_OK;
}

/* The strided copy with the roles swapped: dy is read contiguously and written at the
   slice's positions of the zeroed dx (the positions are distinct, so nothing adds up). */
static nb_code strided_scatter_kernel(nbop_kargs *k) {
  const slice_spec *s = (const slice_spec *)k->scratch;
  const nb_tensor *dy = k->in[4];
  nb_tensor *out = k->res[0];
  size_t esz = nb_dtype_size(out->dtype);
  const uint64_t zero = 0;
  nbop_strided_fill(k, nbcore_tdata(out), &zero, esz, out->size);
  if (dy->size == 0) return NB_OK;
  int64_t out_st[NB_MAX_RANK], in_st[NB_MAX_RANK], origin = 0;
  nbop_row_major_strides(out->rank, out->shape, out_st);
  nbop_row_major_strides(s->rank, s->size, in_st);
  nbop_strided p = {0};
  for (int d = 0; d < s->rank; d++) {
    origin += s->begin[d] * out_st[d];
    if (s->size[d] > 1) nbop_strided_add(&p, s->size[d], in_st[d], s->stride[d] * out_st[d]);
  }
  nbop_strided_run(k, &p, nbcore_tdata(dy), (char *)nbcore_tdata(out) + (size_t)origin * esz, esz);
  return NB_OK;
}

/* ---- GatherV2 ------------------------------------------------------------------------------ */

enum { GATHER_BATCH_DIMS };

/* params viewed as [batch, outer, gather, inner], indices as [batch, n], output as
   [batch, outer, n, inner]. */
typedef struct gather_plan {
  int64_t batch, outer, gather, inner, n;
} gather_plan;
_Static_assert(sizeof(gather_plan) <= NBOP_SCRATCH_BYTES, "gather_plan must fit in the kernel scratch");

static int64_t dims_product(const int64_t *shape, int from, int to) {
  int64_t n = 1;
  for (int i = from; i < to; i++) n *= shape[i];
  return n;
}

/* batch_dims normalized by indices' rank (known). */
static int64_t batch_dims_of(const nbop_kargs *k) {
  int64_t b = k->attr[GATHER_BATCH_DIMS].i;
  return b < 0 ? b + k->in[1]->rank : b;
}

/* batch_dims: 0 <= *bd <= indices' rank (known), below params' rank and at most axis
   (-1: not known), the batch dims alike, where those are known. */
static nb_code gather_batch_dims(nbop_kargs *k, int axis, int *bd) {
  const nb_tensor *p = k->in[0], *ix = k->in[1];
  int64_t b = k->attr[GATHER_BATCH_DIMS].i;
  if (b < -ix->rank || b > ix->rank)
    return nbop_kfail(k, NB_INVALID, "Expected batch_dims in the range [%d, %d], but got %lld", -ix->rank, ix->rank,
                      (long long)b);
  b = batch_dims_of(k);
  if (p->rank >= 0 && b >= p->rank)
    return nbop_kfail(k, NB_INVALID, "batch_dims (%lld) must be less than rank(params) (%d).", (long long)b, p->rank);
  if (axis >= 0 && axis < b)
    return nbop_kfail(k, NB_INVALID, "batch_dims (%lld) must be less than or equal to axis (%d).", (long long)b, axis);
  for (int i = 0; p->rank >= 0 && i < b; i++)
    if (p->shape[i] >= 0 && ix->shape[i] >= 0 && p->shape[i] != ix->shape[i])
      return nbop_kfail(k, NB_INVALID, "params.shape[%d]: %lld should be equal to indices.shape[%d]: %lld", i,
                        (long long)p->shape[i], i, (long long)ix->shape[i]);
  *bd = (int)b;
  return NB_OK;
}

/* GatherV2(params, indices, axis): indices int, params at least 1-D, axis an int scalar
   in range, batch_dims in range and the result's rank, where ranks and axis are known. */
static nb_code gather_validate(nbop_kargs *k) {
  const nb_tensor *p = k->in[0], *ix = k->in[1];
  int64_t axis64;
  int axis = -1, bd = 0;
  nb_code code = nbop_kcheck_dtype(k, 1, NBOP_M_INT);
  if (code) return code;
  if (p->rank == 0)
    return nbop_kfail(k, NB_INVALID, "params must be at least 1 dimensional, got shape %s", nbop_tstr(p));
  code = scalar_int(k, 2, "axis", &axis64);
  if (!code) code = nbop_kaxis(k, axis64, p->rank, "axis", &axis);
  if (code && code != NBOP_DEFER) return code;
  if (ix->rank < 0) return NB_OK;
  code = gather_batch_dims(k, axis, &bd);
  if (!code && p->rank >= 0) code = nbop_kcheck_out_rank(k, p->rank - 1 + ix->rank - bd, "output");
  return code;
}

static nb_code gather_infer(nbop_kargs *k) {
  const nb_tensor *p = k->in[0], *ix = k->in[1];
  int64_t axis64;
  int axis, bd = (int)batch_dims_of(k);
  nb_code code = scalar_int(k, 2, "axis", &axis64);
  if (code) return code;
  nbcore_norm_axis(axis64, p->rank, &axis);
  if (ix->dtype == NB_I32 && p->shape[axis] > INT32_MAX)
    return nbop_kfail(k, NB_INVALID, "params.shape[%d] too large for int32 indexing: %lld > %d", axis,
                      (long long)p->shape[axis], INT32_MAX);
  nbop_meta *m = &k->out[0];
  m->dtype = p->dtype;
  m->rank = 0;
  for (int i = 0; i < axis; i++) m->shape[m->rank++] = p->shape[i];
  for (int i = bd; i < ix->rank; i++) m->shape[m->rank++] = ix->shape[i];
  for (int i = axis + 1; i < p->rank; i++) m->shape[m->rank++] = p->shape[i];
  gather_plan *g = (gather_plan *)k->scratch;
  *g = (gather_plan){dims_product(p->shape, 0, bd), dims_product(p->shape, bd, axis), p->shape[axis],
                     dims_product(p->shape, axis + 1, p->rank), dims_product(ix->shape, bd, ix->rank)};
  return NB_OK;
}

/* Flat position of the first index outside [0, limit), or -1. */
static int64_t first_bad_index(const nb_tensor *ix, int64_t limit) {
  for (int64_t i = 0; i < ix->size; i++) {
    int64_t v = int_at(ix, i);
    if (v < 0 || v >= limit) return i;
  }
  return -1;
}

typedef struct gather_job {
  const gather_plan *g;
  const nb_tensor *ix;
  const char *params;
  char *out;
  size_t row_bytes; /* inner * element size */
} gather_job;

/* Fixed sizes let one-element rows copy without a memcpy call. */
static inline void copy_row(char *dst, const char *src, size_t bytes) {
  switch (bytes) {
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    default: memcpy(dst, src, bytes);
  }
}

/* Output rows [lo, hi): row r is (batch*outer block r / n, index r % n). */
static void gather_range(void *arg, int64_t lo, int64_t hi) {
  const gather_job *j = arg;
  const gather_plan *g = j->g;
  int64_t block = lo / g->n, i = lo % g->n;
  int64_t b = block / g->outer;
  for (int64_t r = lo; r < hi; r++) {
    int64_t src_row = block * g->gather + int_at(j->ix, b * g->n + i);
    copy_row(j->out + (size_t)r * j->row_bytes, j->params + (size_t)src_row * j->row_bytes, j->row_bytes);
    if (++i == g->n) {
      i = 0;
      b = ++block / g->outer;
    }
  }
}

static nb_code gather_kernel(nbop_kargs *k) {
  const gather_plan *g = (const gather_plan *)k->scratch;
  const nb_tensor *ix = k->in[1], *out = k->res[0];
  if (out->size == 0) return NB_OK;
  int64_t bad = first_bad_index(ix, g->gather);
  if (bad >= 0)
    return nbop_kfail(k, NB_INVALID, "indices%s = %lld is not in [0, %lld)", position_str(ix, bad),
                      (long long)int_at(ix, bad), (long long)g->gather);
  gather_job j = {g, ix, nbcore_tdata(k->in[0]), nbcore_tdata(out), (size_t)g->inner * nb_dtype_size(out->dtype)};
  nbop_parallel_range(nbop_kthreads(k, out->size), g->batch * g->outer * g->n, gather_range, &j);
  return NB_OK;
}

/* ---- UnsortedSegmentSum --------------------------------------------------------------------- */

/* data.shape starts with segment_ids.shape (where known: unknown dims match any), the
   result's rank fits, num_segments is an int scalar >= 0 (where known). */
static nb_code segment_sum_validate(nbop_kargs *k) {
  const nb_tensor *data = k->in[0], *ids = k->in[1];
  int64_t num;
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_NUM);
  if (!code) code = nbop_kcheck_dtype(k, 1, NBOP_M_INT);
  if (code) return code;
  bool known = data->rank >= 0 && ids->rank >= 0, prefix = !known || ids->rank <= data->rank;
  for (int i = 0; known && prefix && i < ids->rank; i++)
    prefix = ids->shape[i] < 0 || data->shape[i] < 0 || ids->shape[i] == data->shape[i];
  if (!prefix)
    return nbop_kfail(k, NB_INVALID, "data.shape = %s does not start with segment_ids.shape = %s", nbop_tstr(data),
                      nbop_tstr(ids));
  if (known && (code = nbop_kcheck_out_rank(k, 1 + data->rank - ids->rank, "output"))) return code;
  code = scalar_int(k, 2, "num_segments", &num);
  if (!code && num < 0)
    return nbop_kfail(k, NB_INVALID, "Input num_segments == %lld must not be negative.", (long long)num);
  return known_or_later(code);
}

static nb_code segment_sum_infer(nbop_kargs *k) {
  const nb_tensor *data = k->in[0], *ids = k->in[1];
  int64_t num;
  nb_code code = scalar_int(k, 2, "num_segments", &num);
  if (code) return code;
  int rank = 1 + data->rank - ids->rank;
  nbop_meta *m = &k->out[0];
  m->dtype = data->dtype;
  m->rank = rank;
  m->shape[0] = num;
  memcpy(m->shape + 1, data->shape + ids->rank, (size_t)(rank - 1) * sizeof *m->shape);
  return NB_OK;
}

#define ADD_ROW(T, EXPR)                         \
  do {                                           \
    T *restrict o = (T *)out;                    \
    const T *restrict v = (const T *)in;         \
    for (int64_t c = 0; c < n; c++) o[c] = EXPR; \
  } while (0)

/* out[0..n) += in[0..n); integers wrap like TF's. */
static void add_row(nb_dtype t, void *out, const void *in, int64_t n) {
  switch (t) {
    case NB_F32: ADD_ROW(float, o[c] + v[c]); break;
    case NB_F64: ADD_ROW(double, o[c] + v[c]); break;
    case NB_I32: ADD_ROW(int32_t, (int32_t)((uint32_t)o[c] + (uint32_t)v[c])); break;
    default: ADD_ROW(int64_t, (int64_t)((uint64_t)o[c] + (uint64_t)v[c])); break;
  }
}

typedef struct segment_job {
  const nb_tensor *data, *ids;
  char *out;
  int64_t inner;
} segment_job;

/* Columns [lo, hi) of every row: threads own disjoint columns, so no two write one sum. */
static void segment_range(void *arg, int64_t lo, int64_t hi) {
  const segment_job *j = arg;
  size_t esz = nb_dtype_size(j->data->dtype);
  const char *data = nbcore_tdata(j->data);
  for (int64_t i = 0; i < j->ids->size; i++) {
    int64_t id = int_at(j->ids, i);
    if (id < 0) continue;
    add_row(j->data->dtype, j->out + (size_t)(id * j->inner + lo) * esz, data + (size_t)(i * j->inner + lo) * esz,
            hi - lo);
  }
}

static nb_code segment_sum_kernel(nbop_kargs *k) {
  const nb_tensor *data = k->in[0], *ids = k->in[1];
  nb_tensor *out = k->res[0];
  int64_t num = out->shape[0];
  memset(nbcore_tdata(out), 0, (size_t)out->size * nb_dtype_size(out->dtype));
  if (data->size == 0) return NB_OK;
  for (int64_t i = 0; i < ids->size; i++) {
    int64_t id = int_at(ids, i);
    if (id >= num)
      return nbop_kfail(k, NB_INVALID, "segment_ids%s = %lld is out of range [0, %lld)", position_str(ids, i),
                        (long long)id, (long long)num);
  }
  segment_job j = {data, ids, nbcore_tdata(out), data->size / ids->size};
  /* split columns only when rows are wide enough to share */
  int nt = j.inner >= 1024 ? nbop_kthreads(k, data->size) : 1;
  nbop_parallel_range(nt, j.inner, segment_range, &j);
  return NB_OK;
}

/* ---- the table ---------------------------------------------------------------------------- */

enum { OP_SLICE, OP_STRIDED_SLICE, OP_STRIDED_SLICE_GRAD, OP_GATHER_V2, OP_UNSORTED_SEGMENT_SUM, OP_COUNT };

#define MASK_ATTR(NAME) \
  { NAME, NB_ATTR_INT, {.i = 0}, false }
/* TF's Index is inferred from begin's dtype: only an explicit one must name it */
#define INDEX_ATTR \
  { "Index", NB_ATTR_TYPE, {.type = NBOP_TYPE_UNSET}, false }
#define INDEX_CHECK \
  { .types = NBOP_M_INT, .of_input = 2 }

static nbop_def slicing_ops[OP_COUNT] = {
    /* gradients: Slice and StridedSlice pad/scatter into the input's shape at begin */
    [OP_SLICE] = {.name = "Slice",
                  .nin = 3,
                  .nout = 1,
                  .alias = -1,
                  .nattrs = 1,
                  .attrs = {INDEX_ATTR},
                  .checks = {INDEX_CHECK},
                  .validate = slice_validate,
                  .infer = slice_infer,
                  .kernel = strided_copy_kernel},
    [OP_STRIDED_SLICE] = {.name = "StridedSlice",
                          .nin = 4,
                          .nout = 1,
                          .alias = -1,
                          .nattrs = 6,
                          .attrs = {INDEX_ATTR, MASK_ATTR("begin_mask"), MASK_ATTR("end_mask"),
                                    MASK_ATTR("ellipsis_mask"), MASK_ATTR("new_axis_mask"),
                                    MASK_ATTR("shrink_axis_mask")},
                          .checks = {INDEX_CHECK},
                          .validate = strided_slice_validate,
                          .infer = strided_slice_infer,
                          .kernel = strided_copy_kernel},
    /* its gradient slices the incoming gradient the same way; begin/end/strides are read */
    [OP_STRIDED_SLICE_GRAD] = {.name = "StridedSliceGrad",
                               .nin = 5,
                               .nout = 1,
                               .alias = -1,
                               .t_input = 4,
                               .nattrs = 6,
                               .attrs = {INDEX_ATTR, MASK_ATTR("begin_mask"), MASK_ATTR("end_mask"),
                                         MASK_ATTR("ellipsis_mask"), MASK_ATTR("new_axis_mask"),
                                         MASK_ATTR("shrink_axis_mask")},
                               .checks = {INDEX_CHECK},
                               .validate = strided_slice_grad_validate,
                               .infer = strided_slice_grad_infer,
                               .kernel = strided_scatter_kernel},
    /* GatherV2's gradient scatters into params' shape at the indices along axis */
    [OP_GATHER_V2] = {.name = "GatherV2",
                      .nin = 3,
                      .nout = 1,
                      .alias = -1,
                      .nattrs = 1,
                      .attrs = {{"batch_dims", NB_ATTR_INT, {.i = 0}, false}},
                      .validate = gather_validate,
                      .infer = gather_infer,
                      .kernel = gather_kernel},
    /* its gradient gathers the output gradient at segment_ids */
    [OP_UNSORTED_SEGMENT_SUM] = {.name = "UnsortedSegmentSum",
                                 .nin = 3,
                                 .nout = 1,
                                 .alias = -1,
                                 .validate = segment_sum_validate,
                                 .infer = segment_sum_infer,
                                 .kernel = segment_sum_kernel},
};

nbop_family nbop_slicing_family(void) { return (nbop_family){slicing_ops, OP_COUNT}; }

/* ---- wrappers ----------------------------------------------------------------------------- */

/* Runs a slice op on x and the temporary index vectors, freeing them after. */
static nb_tensor *call_with_lists(nb_ctx *c, int op, nb_tensor *x, const int64_t *const *lists, int nlists, int n,
                                  const nbop_attrval *attrs) {
  nb_tensor *in[4] = {x, NULL, NULL, NULL};
  for (int i = 0; i < nlists; i++) in[1 + i] = nbop_const_ints(c, NB_I64, lists[i], n);
  nb_tensor *y = nbop_call(c, &slicing_ops[op], in, 1 + nlists, attrs);
  for (int i = 0; i < nlists; i++) nb_tensor_free(in[1 + i]);
  return y;
}

nb_tensor *nb_slice(nb_ctx *c, nb_tensor *x, const int64_t *begin, const int64_t *size, int n) {
  if (!nbop_live(c)) return NULL;
  if (n < 0 || (n > 0 && (!begin || !size))) {
    nbcore_fail(c, NB_INVALID, "Slice: begin and size must be non-NULL arrays of n >= 0 values (n = %d)", n);
    return NULL;
  }
  const int64_t *lists[2] = {begin, size};
  return call_with_lists(c, OP_SLICE, x, lists, 2, n, NULL);
}

/* The StridedSlice attrs (same slots in StridedSliceGrad) with the given masks. */
static void slice_mask_attrs(int op, const nb_slice_masks *masks, nbop_attrval *a) {
  nbop_attr_defaults(&slicing_ops[op], a);
  if (!masks) return;
  a[SS_BEGIN_MASK].i = masks->begin_mask;
  a[SS_END_MASK].i = masks->end_mask;
  a[SS_ELLIPSIS_MASK].i = masks->ellipsis_mask;
  a[SS_NEW_AXIS_MASK].i = masks->new_axis_mask;
  a[SS_SHRINK_AXIS_MASK].i = masks->shrink_axis_mask;
}

static bool check_slice_lists(nb_ctx *c, const char *op, const int64_t *begin, const int64_t *end,
                              const int64_t *strides, int n) {
  if (n >= 0 && (n == 0 || (begin && end && strides))) return true;
  nbcore_fail(c, NB_INVALID, "%s: begin, end and strides must be non-NULL arrays of n >= 0 values (n = %d)", op, n);
  return false;
}

nb_tensor *nb_slice_t(nb_ctx *c, nb_tensor *x, nb_tensor *begin, nb_tensor *size) {
  nb_tensor *in[3] = {x, begin, size};
  return nbop_call(c, &slicing_ops[OP_SLICE], in, 3, NULL);
}

nb_tensor *nb_strided_slice_t(nb_ctx *c, nb_tensor *x, nb_tensor *begin, nb_tensor *end, nb_tensor *strides,
                              const nb_slice_masks *masks) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  slice_mask_attrs(OP_STRIDED_SLICE, masks, a);
  nb_tensor *in[4] = {x, begin, end, strides};
  return nbop_call(c, &slicing_ops[OP_STRIDED_SLICE], in, 4, a);
}

nb_tensor *nb_strided_slice_grad_t(nb_ctx *c, nb_tensor *shape, nb_tensor *begin, nb_tensor *end, nb_tensor *strides,
                                   nb_tensor *dy, const nb_slice_masks *masks) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  slice_mask_attrs(OP_STRIDED_SLICE_GRAD, masks, a);
  nb_tensor *in[5] = {shape, begin, end, strides, dy};
  return nbop_call(c, &slicing_ops[OP_STRIDED_SLICE_GRAD], in, 5, a);
}

nb_tensor *nb_strided_slice(nb_ctx *c, nb_tensor *x, const int64_t *begin, const int64_t *end, const int64_t *strides,
                            int n, const nb_slice_masks *masks) {
  if (!nbop_live(c) || !check_slice_lists(c, "StridedSlice", begin, end, strides, n)) return NULL;
  nbop_attrval a[NBOP_MAX_ATTRS];
  slice_mask_attrs(OP_STRIDED_SLICE, masks, a);
  const int64_t *lists[3] = {begin, end, strides};
  return call_with_lists(c, OP_STRIDED_SLICE, x, lists, 3, n, a);
}

nb_tensor *nb_strided_slice_grad(nb_ctx *c, nb_tensor *shape, const int64_t *begin, const int64_t *end,
                                 const int64_t *strides, int n, nb_tensor *dy, const nb_slice_masks *masks) {
  if (!nbop_live(c) || !check_slice_lists(c, "StridedSliceGrad", begin, end, strides, n)) return NULL;
  /* begin/end/strides take shape's dtype, as TF's Index attr requires */
  nb_dtype t = shape && nb_dtype_of(shape) == NB_I32 ? NB_I32 : NB_I64;
  nb_tensor *lists[3] = {nbop_const_ints(c, t, begin, n), nbop_const_ints(c, t, end, n),
                         nbop_const_ints(c, t, strides, n)};
  nb_tensor *dx = nb_strided_slice_grad_t(c, shape, lists[0], lists[1], lists[2], dy, masks);
  for (int i = 0; i < 3; i++) nb_tensor_free(lists[i]);
  return dx;
}

nb_tensor *nb_gather_t(nb_ctx *c, nb_tensor *params, nb_tensor *indices, nb_tensor *axis, int batch_dims) {
  nb_tensor *in[3] = {params, indices, axis};
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&slicing_ops[OP_GATHER_V2], a);
  a[GATHER_BATCH_DIMS].i = batch_dims;
  return nbop_call(c, &slicing_ops[OP_GATHER_V2], in, 3, a);
}

nb_tensor *nb_gather(nb_ctx *c, nb_tensor *params, nb_tensor *indices, int axis, int batch_dims) {
  int32_t axis_v = axis;
  nb_tensor *ax = nb_tensor_from(c, NB_I32, 0, NULL, &axis_v), *y = nb_gather_t(c, params, indices, ax, batch_dims);
  nb_tensor_free(ax);
  return y;
}

nb_tensor *nb_unsorted_segment_sum_t(nb_ctx *c, nb_tensor *data, nb_tensor *segment_ids, nb_tensor *num_segments) {
  nb_tensor *in[3] = {data, segment_ids, num_segments};
  return nbop_call(c, &slicing_ops[OP_UNSORTED_SEGMENT_SUM], in, 3, NULL);
}

nb_tensor *nb_unsorted_segment_sum(nb_ctx *c, nb_tensor *data, nb_tensor *segment_ids, int64_t num_segments) {
  nb_tensor *n = nb_tensor_from(c, NB_I64, 0, NULL, &num_segments);
  nb_tensor *y = nb_unsorted_segment_sum_t(c, data, segment_ids, n);
  nb_tensor_free(n);
  return y;
}
