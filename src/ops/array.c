/* Array (shape) ops: Reshape, ExpandDims and Squeeze (views of their input), Transpose,
   BroadcastTo, ConcatV2, Pack, Unpack, Tile, Pad, Fill, ZerosLike, OnesLike, Shape,
   BroadcastGradientArgs (which computes on shape vectors) and Range.
   These ops only move data, so one kernel serves every dtype by element size. Most of
   them are a plan for the strided copy engine (strided.h): per output dim an input
   stride (0 repeats a value) and an output stride. */
#include "strided.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TILE 32 /* edge of the blocks of the 2-D transpose */

/* The value 1 of dtype t, in v. */
static void one_of(nb_dtype t, char *v) {
  const float f = 1;
  const double d = 1;
  const int32_t i = 1;
  const int64_t l = 1;
  switch (t) {
    case NB_F32: memcpy(v, &f, sizeof f); break;
    case NB_F64: memcpy(v, &d, sizeof d); break;
    case NB_I32: memcpy(v, &i, sizeof i); break;
    case NB_I64: memcpy(v, &l, sizeof l); break;
    case NB_BOOL: v[0] = 1; break;
  }
}

/* ---- reading const inputs -------------------------------------------------------------- */

/* validate's reads: the values of int input i where known (NBOP_DEFER where not), which
   must be 1-D with at most cap values (a shape: at most NB_MAX_RANK). */
static nb_code known_vector(nbop_kargs *k, int i, const char *what, int64_t *v, int cap, int *n) {
  nb_code code = nbop_kcheck_dtype(k, i, NBOP_M_INT);
  if (code) return code;
  if (k->in[i]->rank >= 0 && k->in[i]->rank != 1)
    return nbop_kfail(k, NB_SHAPE, "%s must be 1-D, got shape %s", what, nbop_tstr(k->in[i]));
  return nbop_kints(k, i, 1, v, cap, n);
}

/* The value of int input i, which must hold exactly one value (of any rank); NBOP_DEFER
   where it is not known. */
static nb_code read_single(nbop_kargs *k, int i, const char *what, int64_t *v) {
  nb_code code = nbop_kcheck_dtype(k, i, NBOP_M_INT);
  if (code) return code;
  if (k->in[i]->size >= 0 && k->in[i]->size != 1)
    return nbop_kfail(k, NB_SHAPE, "%s must be a tensor with a single value, got shape %s", what, nbop_tstr(k->in[i]));
  int n;
  return nbop_kints(k, i, NB_MAX_RANK, v, 1, &n);
}

/* What validate makes of a read: a value not known yet passes. */
static nb_code known_or_later(nb_code code) { return code == NBOP_DEFER ? NB_OK : code; }

/* Sets output meta i; the dispatcher then checks that its element count fits. */
static nb_code set_out(nbop_kargs *k, int i, nb_dtype t, int rank, const int64_t *shape) {
  nbop_meta_set(&k->out[i], t, rank, shape);
  return NB_OK;
}

/* ---- Reshape, ExpandDims, Squeeze: views ------------------------------------------------ */

/* Input elements for inferring a -1: zero dims are skipped when the request has a zero
   dim too, so the other dims can still be inferred (TF's rule); *skipped tells whether
   the input had any. */
static int64_t reshape_known_elements(const nb_tensor *x, bool request_has_zero, bool *skipped) {
  *skipped = false;
  if (!request_has_zero) return x->size;
  int64_t n = 1;
  for (int i = 0; i < x->rank; i++) {
    if (x->shape[i] > 0)
      n *= x->shape[i];
    else
      *skipped = true;
  }
  return n;
}

/* The requested sizes: 1-D (or a scalar for rank 0), each >= 0 but for one -1. */
static nb_code reshape_validate(nbop_kargs *k) {
  int64_t dims[NB_MAX_RANK];
  int n, unknown = -1;
  nb_code code = nbop_kcheck_dtype(k, 1, NBOP_M_INT);
  if (!code && k->in[1]->rank > 1)
    code = nbop_kfail(k, NB_SHAPE, "sizes input must be 1-D, not %s", nbop_tstr(k->in[1]));
  if (!code) code = nbop_kints(k, 1, 1, dims, NB_MAX_RANK, &n);
  for (int i = 0; !code && i < n; i++) {
    if (dims[i] == -1 && unknown >= 0)
      return nbop_kfail(k, NB_INVALID, "Only one input size may be -1, not both %d and %d", unknown, i);
    if (dims[i] == -1)
      unknown = i;
    else if (dims[i] < 0)
      return nbop_kfail(k, NB_INVALID, "Size %d must be non-negative, not %lld", i, (long long)dims[i]);
  }
  return known_or_later(code);
}

static nb_code reshape_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t dims[NB_MAX_RANK], size;
  int n, unknown = -1;
  nb_code code = nbop_kints(k, 1, 1, dims, NB_MAX_RANK, &n);
  if (code) return code;
  int64_t product = 1; /* of the known nonzero sizes */
  bool has_zero = false;
  for (int i = 0; i < n; i++) {
    if (dims[i] == -1) {
      unknown = i;
    } else if (dims[i] == 0) {
      has_zero = true;
    } else if (product > INT64_MAX / dims[i]) {
      return nbop_kfail(k, NB_SHAPE, "requested shape %s is too large", nbop_sstr(n, dims));
    } else {
      product *= dims[i];
    }
  }
  if (unknown >= 0) {
    bool skipped;
    int64_t known = reshape_known_elements(x, has_zero, &skipped);
    /* Zero dims on both sides leave the result empty whatever -1 becomes, so TF asks
       no divisibility then and rounds down: [0,3] to [0,-1,2] gives [0,1,2]. */
    if (!skipped && known % product)
      return nbop_kfail(
          k, NB_SHAPE,
          "Input to reshape is a tensor with %lld values, but the requested shape requires a multiple of %lld",
          (long long)x->size, (long long)product);
    dims[unknown] = known / product;
  }
  if (!nbcore_shape_checked_size(n, dims, &size))
    return nbop_kfail(k, NB_SHAPE, "requested shape %s is too large", nbop_sstr(n, dims));
  if (size != x->size)
    return nbop_kfail(k, NB_SHAPE, "Input to reshape is a tensor with %lld values, but the requested shape has %lld",
                      (long long)x->size, (long long)size);
  nbop_meta_set(&k->out[0], x->dtype, n, dims);
  return NB_OK;
}

/* dim holds one value, in [-rank - 1, rank] where x's rank is known; the result's rank
   rank + 1 fits. */
static nb_code expand_dims_validate(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t axis;
  nb_code code = read_single(k, 1, "'dim'", &axis);
  if (!code && x->rank >= 0 && (axis < -x->rank - 1 || axis > x->rank))
    return nbop_kfail(k, NB_INVALID, "Tried to expand dim index %lld for tensor with %d dimensions.", (long long)axis,
                      x->rank);
  if (!code || code == NBOP_DEFER) code = nbop_kcheck_out_rank(k, x->rank + 1, "output");
  return code;
}

static nb_code expand_dims_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t axis;
  nb_code code = read_single(k, 1, "'dim'", &axis);
  if (code) return code;
  int a = (int)(axis < 0 ? axis + x->rank + 1 : axis);
  nbop_meta *m = &k->out[0];
  m->dtype = x->dtype;
  m->rank = x->rank + 1;
  for (int i = 0, j = 0; i < m->rank; i++) m->shape[i] = i == a ? 1 : x->shape[j++];
  return NB_OK;
}

enum { SQUEEZE_DIMS };

/* squeeze_dims name dims of x where its rank is known. */
static nb_code squeeze_validate(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  const nbop_attrval *dims = &k->attr[SQUEEZE_DIMS];
  int d;
  for (int i = 0; i < dims->n && x->rank >= 0; i++)
    if (!nbcore_norm_axis(dims->ints[i], x->rank, &d))
      return nbop_kfail(k, NB_INVALID, "Tried to squeeze dim index %lld for tensor with %d dimensions.",
                        (long long)dims->ints[i], x->rank);
  return NB_OK;
}

static nb_code squeeze_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  const nbop_attrval *dims = &k->attr[SQUEEZE_DIMS];
  bool drop[NB_MAX_RANK] = {false};
  for (int i = 0; i < dims->n; i++) {
    int d;
    nbcore_norm_axis(dims->ints[i], x->rank, &d);
    if (x->shape[d] != 1)
      return nbop_kfail(k, NB_SHAPE, "Can not squeeze dim[%d], expected a dimension of 1, got %lld", d,
                        (long long)x->shape[d]);
    drop[d] = true;
  }
  nbop_meta *m = &k->out[0];
  m->dtype = x->dtype;
  m->rank = 0;
  for (int i = 0; i < x->rank; i++)
    if (!(dims->n ? drop[i] : x->shape[i] == 1)) m->shape[m->rank++] = x->shape[i];
  return NB_OK;
}

/* ---- Transpose ------------------------------------------------------------------------- */

/* perm is a vector of x's rank (where both are known) holding a permutation (where known). */
static nb_code transpose_validate(nbop_kargs *k) {
  const nb_tensor *x = k->in[0], *p = k->in[1];
  int64_t perm[NB_MAX_RANK];
  int n;
  nb_code code = nbop_kcheck_dtype(k, 1, NBOP_M_INT);
  if (code) return code;
  if (p->rank >= 0 && p->rank != 1) return nbop_kfail(k, NB_SHAPE, "perm must be rank 1, got shape %s", nbop_tstr(p));
  if (p->size >= 0 && x->rank >= 0 && p->size != x->rank)
    return nbop_kfail(k, NB_INVALID, "transpose expects a vector of size %d. But input(1) is a vector of size %lld",
                      x->rank, (long long)p->size);
  code = nbop_kints(k, 1, 1, perm, NB_MAX_RANK, &n);
  if (code) return known_or_later(code);
  bool seen[NB_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    if (perm[i] < 0 || perm[i] >= n)
      return nbop_kfail(k, NB_INVALID, "%lld is out of range [0 .. %d)", (long long)perm[i], n);
    seen[perm[i]] = true;
  }
  for (int i = 0; i < n; i++)
    if (!seen[i]) return nbop_kfail(k, NB_INVALID, "%d is missing from perm %s", i, nbop_sstr(n, perm));
  return NB_OK;
}

static nb_code transpose_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t *perm = (int64_t *)k->scratch;
  int n;
  nb_code code = nbop_kints(k, 1, 1, perm, NB_MAX_RANK, &n);
  if (code) return code;
  nbop_meta *m = &k->out[0];
  m->dtype = x->dtype;
  m->rank = n;
  for (int i = 0; i < n; i++) m->shape[i] = x->shape[perm[i]];
  return NB_OK;
}

#define TRANSPOSE_BLOCK(NAME, T)                                                                               \
  static void NAME(const char *pin, char *pout, int64_t q0, int64_t q1, int64_t l0, int64_t l1, int64_t in_ld, \
                   int64_t out_ld) {                                                                           \
    const T *in = (const T *)pin;                                                                              \
    T *out = (T *)pout;                                                                                        \
    for (int64_t q = q0; q < q1; q++)                                                                          \
      for (int64_t l = l0; l < l1; l++) out[q * out_ld + l] = in[l * in_ld + q];                               \
  }
TRANSPOSE_BLOCK(block_1, uint8_t)
TRANSPOSE_BLOCK(block_4, nbop_u32a)
TRANSPOSE_BLOCK(block_8, nbop_u64a)

/* A batch of 2-D transposes: dim q is contiguous in the input, dim l in the output;
   every other dim is walked. One unit of work is TILE indices of q for one batch. */
typedef struct tiled_job {
  nbop_strided batch;
  int64_t nq, nl, in_ld, out_ld, nblk;
  const char *in;
  char *out;
  size_t esz;
} tiled_job;

static void tiled_range(void *arg, int64_t lo, int64_t hi) {
  const tiled_job *j = arg;
  void (*block)(const char *, char *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t) = j->esz == 1   ? block_1
                                                                                              : j->esz == 4 ? block_4
                                                                                                            : block_8;
  nbop_odometer w;
  nbop_odometer_seek(&w, &j->batch, j->batch.rank, lo / j->nblk);
  int64_t blk = lo % j->nblk;
  for (int64_t u = lo; u < hi; u++) {
    int64_t q0 = blk * TILE, q1 = q0 + TILE < j->nq ? q0 + TILE : j->nq;
    const char *in = j->in + (size_t)w.in * j->esz;
    char *out = j->out + (size_t)w.out * j->esz;
    for (int64_t l0 = 0; l0 < j->nl; l0 += TILE)
      block(in, out, q0, q1, l0, l0 + TILE < j->nl ? l0 + TILE : j->nl, j->in_ld, j->out_ld);
    if (++blk == j->nblk) {
      blk = 0;
      nbop_odometer_next(&w);
    }
  }
}

/* p's innermost dim is strided in the input. */
static void run_tiled(const nbop_kargs *k, const nbop_strided *p, const void *in, void *out, size_t esz) {
  int last = p->rank - 1, q = 0;
  while (p->in_st[q] != 1) q++; /* the input's innermost dim (size-1 dims are gone) */
  tiled_job j = {.nq = p->dims[q],
                 .nl = p->dims[last],
                 .in_ld = p->in_st[last],
                 .out_ld = p->out_st[q],
                 .in = in,
                 .out = out,
                 .esz = esz};
  int64_t batches = 1;
  for (int d = 0; d < last; d++)
    if (d != q) {
      nbop_strided_add(&j.batch, p->dims[d], p->in_st[d], p->out_st[d]);
      batches *= p->dims[d];
    }
  j.nblk = (j.nq + TILE - 1) / TILE;
  nbop_parallel_range(nbop_kthreads(k, batches * j.nq * j.nl), batches * j.nblk, tiled_range, &j);
}

static nb_code transpose_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  nb_tensor *y = k->res[0];
  const int64_t *perm = (const int64_t *)k->scratch;
  if (y->size == 0) return NB_OK;
  int64_t in_st[NB_MAX_RANK], out_st[NB_MAX_RANK];
  nbop_row_major_strides(x->rank, x->shape, in_st);
  nbop_row_major_strides(y->rank, y->shape, out_st);
  nbop_strided p = {0};
  for (int i = 0; i < y->rank; i++) nbop_strided_add(&p, y->shape[i], in_st[perm[i]], out_st[i]);
  size_t esz = nb_dtype_size(x->dtype);
  if (p.rank > 0 && p.in_st[p.rank - 1] != 1)
    run_tiled(k, &p, nbcore_tdata(x), nbcore_tdata(y), esz);
  else
    nbop_strided_run(k, &p, nbcore_tdata(x), nbcore_tdata(y), esz);
  return NB_OK;
}

/* ---- BroadcastTo, Tile, Pad -------------------------------------------------------------- */

/* Dims that a known shape vector of length n holds: each >= 0. */
static nb_code check_dims(nbop_kargs *k, const int64_t *dims, int n) {
  for (int i = 0; i < n; i++)
    if (dims[i] < 0) return nbop_kfail(k, NB_INVALID, "Dimension %lld must be >= 0", (long long)dims[i]);
  return NB_OK;
}

/* shape (where known) has dims >= 0 and at least x's rank. */
static nb_code broadcast_to_validate(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t shape[NB_MAX_RANK];
  int n;
  nb_code code = known_vector(k, 1, "shape", shape, NB_MAX_RANK, &n);
  if (!code) code = check_dims(k, shape, n);
  if (!code && x->rank > n)
    return nbop_kfail(k, NB_SHAPE, "Rank of input (%d) must be no greater than rank of output shape (%d): %s vs. %s",
                      x->rank, n, nbop_tstr(x), nbop_sstr(n, shape));
  return known_or_later(code);
}

static nb_code broadcast_to_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t shape[NB_MAX_RANK];
  int n;
  nb_code code = nbop_kints(k, 1, 1, shape, NB_MAX_RANK, &n);
  if (code) return code;
  for (int i = 0; i < x->rank; i++) {
    int64_t d = x->shape[i], o = shape[n - x->rank + i];
    if (d != o && d != 1)
      return nbop_kfail(k, NB_SHAPE, "Unable to broadcast tensor of shape %s to tensor of shape %s", nbop_tstr(x),
                        nbop_sstr(n, shape));
  }
  return set_out(k, 0, x->dtype, n, shape);
}

static nb_code broadcast_to_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  nb_tensor *y = k->res[0];
  int64_t in_st[NB_MAX_RANK], out_st[NB_MAX_RANK];
  nbop_row_major_strides(x->rank, x->shape, in_st);
  nbop_row_major_strides(y->rank, y->shape, out_st);
  nbop_strided p = {0};
  int lead = y->rank - x->rank;
  for (int i = 0; i < y->rank; i++) {
    bool repeat = i < lead || x->shape[i - lead] != y->shape[i];
    nbop_strided_add(&p, y->shape[i], repeat ? 0 : in_st[i - lead], out_st[i]);
  }
  nbop_strided_run(k, &p, nbcore_tdata(x), nbcore_tdata(y), nb_dtype_size(x->dtype));
  return NB_OK;
}

/* multiples: a vector of x's rank (where both are known) of values >= 0 (where known). */
static nb_code tile_validate(nbop_kargs *k) {
  const nb_tensor *x = k->in[0], *m = k->in[1];
  int64_t mult[NB_MAX_RANK];
  int n;
  nb_code code = nbop_kcheck_dtype(k, 1, NBOP_M_INT);
  if (code) return code;
  if (m->rank >= 0 && m->rank != 1)
    return nbop_kfail(k, NB_SHAPE, "Expected multiples to be 1-D, but got shape %s", nbop_tstr(m));
  if (m->size >= 0 && x->rank >= 0 && m->size != x->rank)
    return nbop_kfail(k, NB_INVALID, "Expected multiples argument to be a vector of length %d but got length %lld",
                      x->rank, (long long)m->size);
  code = nbop_kints(k, 1, 1, mult, NB_MAX_RANK, &n);
  for (int i = 0; !code && i < n; i++)
    if (mult[i] < 0)
      return nbop_kfail(k, NB_INVALID, "Expected multiples[%d] >= 0, but got %lld", i, (long long)mult[i]);
  return known_or_later(code);
}

static nb_code tile_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t mult[NB_MAX_RANK], shape[NB_MAX_RANK];
  int n;
  nb_code code = nbop_kints(k, 1, 1, mult, NB_MAX_RANK, &n);
  if (code) return code;
  for (int i = 0; i < n; i++) {
    if (x->shape[i] && mult[i] > INT64_MAX / x->shape[i])
      return nbop_kfail(k, NB_SHAPE, "tiling %s by %s is too large", nbop_tstr(x), nbop_sstr(n, mult));
    shape[i] = x->shape[i] * mult[i];
  }
  return set_out(k, 0, x->dtype, n, shape);
}

/* Output dim i of size m*d is a (multiple, index) pair: the multiple repeats the input. */
static nb_code tile_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  nb_tensor *y = k->res[0];
  int64_t in_st[NB_MAX_RANK], out_st[NB_MAX_RANK];
  nbop_row_major_strides(x->rank, x->shape, in_st);
  nbop_row_major_strides(y->rank, y->shape, out_st);
  if (y->size == 0) return NB_OK;
  nbop_strided p = {0};
  for (int i = 0; i < x->rank; i++) {
    nbop_strided_add(&p, y->shape[i] / x->shape[i], 0, x->shape[i] * out_st[i]);
    nbop_strided_add(&p, x->shape[i], in_st[i], out_st[i]);
  }
  nbop_strided_run(k, &p, nbcore_tdata(x), nbcore_tdata(y), nb_dtype_size(x->dtype));
  return NB_OK;
}

/* paddings: [x's rank, 2] (where known) of values >= 0 (where known). */
static nb_code pad_validate(nbop_kargs *k) {
  const nb_tensor *x = k->in[0], *pads = k->in[1];
  int64_t v[2 * NB_MAX_RANK];
  int n;
  nb_code code = nbop_kcheck_dtype(k, 1, NBOP_M_INT);
  if (code) return code;
  if (pads->rank >= 0 && (pads->rank != 2 || (pads->shape[1] >= 0 && pads->shape[1] != 2)))
    return nbop_kfail(k, NB_SHAPE, "paddings must be a matrix with 2 columns: %s", nbop_tstr(pads));
  if (pads->rank == 2 && pads->shape[0] >= 0 && x->rank >= 0 && pads->shape[0] != x->rank)
    return nbop_kfail(k, NB_SHAPE, "The first dimension of paddings must be the rank of inputs%s %s", nbop_tstr(pads),
                      nbop_tstr(x));
  code = nbop_kints(k, 1, 2, v, 2 * NB_MAX_RANK, &n);
  for (int i = 0; !code && i < n; i++)
    if (v[i] < 0)
      return nbop_kfail(k, NB_INVALID, "Paddings must be non-negative: %lld %lld", (long long)v[i & ~1],
                        (long long)v[i | 1]);
  return known_or_later(code);
}

static nb_code pad_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t v[2 * NB_MAX_RANK], shape[NB_MAX_RANK];
  int64_t *before = (int64_t *)k->scratch;
  int n;
  nb_code code = nbop_kints(k, 1, 2, v, 2 * NB_MAX_RANK, &n);
  if (code) return code;
  for (int i = 0; i < x->rank; i++) {
    int64_t b = v[2 * i], a = v[2 * i + 1];
    if (b > INT64_MAX / 16 - a - x->shape[i])
      return nbop_kfail(k, NB_SHAPE, "padding %s by %lld %lld is too large", nbop_tstr(x), (long long)b, (long long)a);
    before[i] = b;
    shape[i] = b + x->shape[i] + a;
  }
  return set_out(k, 0, x->dtype, x->rank, shape);
}

/* Zeros everywhere, then the input copied into the interior. */
static nb_code pad_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  nb_tensor *y = k->res[0];
  const int64_t *before = (const int64_t *)k->scratch;
  size_t esz = nb_dtype_size(x->dtype);
  const char zero[8] = {0};
  nbop_strided_fill(k, nbcore_tdata(y), zero, esz, y->size);
  int64_t in_st[NB_MAX_RANK], out_st[NB_MAX_RANK], origin = 0;
  nbop_row_major_strides(x->rank, x->shape, in_st);
  nbop_row_major_strides(y->rank, y->shape, out_st);
  nbop_strided p = {0};
  for (int i = 0; i < x->rank; i++) {
    nbop_strided_add(&p, x->shape[i], in_st[i], out_st[i]);
    origin += before[i] * out_st[i];
  }
  nbop_strided_run(k, &p, nbcore_tdata(x), (char *)nbcore_tdata(y) + (size_t)origin * esz, esz);
  return NB_OK;
}

/* ---- ConcatV2, Pack, Unpack ----------------------------------------------------------------- */

/* What the concat/pack kernel needs: the output axis and, for Pack, that every input
   fills one index of it. */
typedef struct join_plan {
  int axis;
  bool pack;
} join_plan;

/* The first of inputs 0..n-1 whose rank is known (its index), -1 if none is. */
static int known_rank_input(const nbop_kargs *k, int n) {
  for (int i = 0; i < n; i++)
    if (k->in[i]->rank >= 0) return i;
  return -1;
}

#define NO_SKIP (-1)      /* Pack: every dim must match */
#define AXIS_UNKNOWN (-2) /* Concat's axis is not known yet: no dim is compared */

/* Inputs 0..n-1 of Concat or Pack: one dtype, and, where known, one rank and the dims of
   input ref (a known rank's) on every dim but skip. */
static nb_code check_joined(nbop_kargs *k, int n, int ref, int skip, const char *ranks_msg, const char *dims_msg) {
  for (int i = 1; i < n; i++) {
    nb_code code = nbop_kcheck_same_dtype(k, 0, i);
    if (code) return code;
  }
  const nb_tensor *x0 = ref >= 0 ? k->in[ref] : NULL;
  for (int i = 0; x0 && i < n; i++) {
    const nb_tensor *x = k->in[i];
    bool fits = x->rank < 0 || x->rank == x0->rank;
    if (!fits) return nbop_kfail(k, NB_SHAPE, ranks_msg, ref, nbop_tstr(x0), i, nbop_tstr(x));
    for (int d = 0; skip != AXIS_UNKNOWN && x->rank >= 0 && d < x->rank; d++)
      if (d != skip && x->shape[d] >= 0 && x0->shape[d] >= 0 && x->shape[d] != x0->shape[d])
        return nbop_kfail(k, NB_SHAPE, dims_msg, ref, nbop_tstr(x0), i, nbop_tstr(x));
  }
  return NB_OK;
}

/* ConcatV2(values..., axis): axis a scalar int naming a dim of the inputs' rank (> 0),
   where both are known. */
static nb_code concat_validate(nbop_kargs *k) {
  int n = k->nin - 1, ref = known_rank_input(k, n), r = ref >= 0 ? k->in[ref]->rank : -1, a = -1, cnt;
  const nb_tensor *axis_t = k->in[n];
  int64_t axis;
  nb_code code = nbop_kcheck_dtype(k, n, NBOP_M_INT);
  if (code) return code;
  if (axis_t->rank > 0)
    return nbop_kfail(k, NB_SHAPE, "Concat dim tensor should be a scalar integer, but got shape %s", nbop_tstr(axis_t));
  if (r == 0) return nbop_kfail(k, NB_SHAPE, "Can't concatenate scalars (use tf.stack instead)");
  code = nbop_kints(k, n, 0, &axis, 1, &cnt);
  if (!code) code = nbop_kaxis(k, axis, r, "concatenating dimensions", &a);
  if (code && code != NBOP_DEFER) return code;
  return check_joined(k, n, ref, code == NBOP_DEFER || r < 0 ? AXIS_UNKNOWN : a,
                      "Ranks of all input tensors should match: shape[%d] = %s vs. shape[%d] = %s",
                      "Dimensions of inputs should match: shape[%d] = %s vs. shape[%d] = %s");
}

/* The inputs' dims but the axis are input 0's (validate compared them where known). */
static nb_code concat_infer(nbop_kargs *k) {
  int n = k->nin - 1, r = k->in[0]->rank, a, cnt;
  int64_t axis, shape[NB_MAX_RANK];
  nb_code code = nbop_kints(k, n, 0, &axis, 1, &cnt);
  if (code) return code;
  nbcore_norm_axis(axis, r, &a);
  memcpy(shape, k->in[0]->shape, sizeof shape);
  for (int i = 1; i < n; i++) {
    if (shape[a] > INT64_MAX / 16 - k->in[i]->shape[a])
      return nbop_kfail(k, NB_SHAPE, "concatenated dim %d is too large", a);
    shape[a] += k->in[i]->shape[a];
  }
  *(join_plan *)k->scratch = (join_plan){a, false};
  return set_out(k, 0, k->in[0]->dtype, r, shape);
}

enum { PACK_N, PACK_AXIS };

/* Pack(values...): one dtype and shape (where known); axis in [-(r + 1), r] and a result
   rank r + 1 that fits, r the inputs' rank where known. */
static nb_code pack_validate(nbop_kargs *k) {
  int ref = known_rank_input(k, k->nin), r = ref >= 0 ? k->in[ref]->rank : -1, a;
  int64_t axis = k->attr[PACK_AXIS].i;
  if (r >= 0 && !nbcore_norm_axis(axis, r + 1, &a))
    return nbop_kfail(k, NB_INVALID, "axis = %lld not in [%d, %d)", (long long)axis, -(r + 1), r + 1);
  nb_code code = r >= 0 ? nbop_kcheck_out_rank(k, r + 1, "output") : NB_OK;
  return code ? code
              : check_joined(k, k->nin, ref, NO_SKIP,
                             "Shapes of all inputs must match: values[%d].shape = %s != values[%d].shape = %s",
                             "Shapes of all inputs must match: values[%d].shape = %s != values[%d].shape = %s");
}

static nb_code pack_infer(nbop_kargs *k) {
  int n = k->nin, r = k->in[0]->rank, a;
  const nb_tensor *x0 = k->in[0];
  nbcore_norm_axis(k->attr[PACK_AXIS].i, r + 1, &a);
  int64_t shape[NB_MAX_RANK];
  for (int i = 0, j = 0; i <= r; i++) shape[i] = i == a ? n : x0->shape[j++];
  *(join_plan *)k->scratch = (join_plan){a, true};
  return set_out(k, 0, x0->dtype, r + 1, shape);
}

/* Each output row (the dims before the axis) is the inputs' rows side by side. */
typedef struct join_job {
  const nbop_kargs *k;
  bool pack;
  int n, axis;
  int64_t inner; /* elements per index of the axis */
  int64_t row;   /* output elements per row */
  size_t esz;
} join_job;

static int64_t segment(const join_job *j, int i) { return j->pack ? j->inner : j->k->in[i]->shape[j->axis] * j->inner; }

/* Moves to the next nonempty segment, wrapping to the next row. */
static void next_segment(const join_job *j, int *i, int64_t *row, int64_t *seg) {
  do {
    if (++*i == j->n) {
      *i = 0;
      ++*row;
    }
    *seg = segment(j, *i);
  } while (*seg == 0);
}

/* Copies output elements [lo, hi), one memcpy per segment. */
static void join_range(void *arg, int64_t lo, int64_t hi) {
  const join_job *j = arg;
  char *out = nbcore_tdata(j->k->res[0]);
  int64_t row = lo / j->row, col = lo % j->row, seg = segment(j, 0);
  int i = 0;
  while (col >= seg) {
    col -= seg;
    seg = segment(j, ++i);
  }
  for (int64_t pos = lo; pos < hi;) {
    int64_t take = seg - col < hi - pos ? seg - col : hi - pos;
    const char *src = nbcore_tdata(j->k->in[i]);
    memcpy(out + (size_t)pos * j->esz, src + (size_t)(row * seg + col) * j->esz, (size_t)take * j->esz);
    pos += take;
    col += take;
    if (col == seg && pos < hi) {
      col = 0;
      next_segment(j, &i, &row, &seg);
    }
  }
}

static nb_code join_kernel(nbop_kargs *k) {
  const join_plan *p = (const join_plan *)k->scratch;
  nb_tensor *y = k->res[0];
  if (y->size == 0) return NB_OK;
  join_job j = {.k = k,
                .pack = p->pack,
                .n = p->pack ? k->nin : k->nin - 1,
                .axis = p->axis,
                .inner = 1,
                .esz = nb_dtype_size(y->dtype)};
  for (int d = p->axis + 1; d < y->rank; d++) j.inner *= y->shape[d];
  j.row = y->shape[p->axis] * j.inner;
  nbop_parallel_range(nbop_kthreads(k, y->size), y->size, join_range, &j);
  return NB_OK;
}

enum { UNPACK_NUM, UNPACK_AXIS };

/* num is the outputs' count; axis names a dim of x of size num, where known. */
static nb_code unpack_validate(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t num = k->attr[UNPACK_NUM].i, axis = k->attr[UNPACK_AXIS].i;
  int a = -1;
  if (x->rank >= 0 && !nbcore_norm_axis(axis, x->rank, &a))
    return nbop_kfail(k, NB_INVALID, "axis = %lld not in [%d, %d)", (long long)axis, -x->rank, x->rank);
  if (num != k->nout)
    return nbop_kfail(k, NB_INVALID, "attr num = %lld does not match the %d outputs asked for", (long long)num,
                      k->nout);
  if (a >= 0 && x->shape[a] >= 0 && x->shape[a] != num)
    return nbop_kfail(k, NB_SHAPE, "Input shape axis %d must equal %lld, got shape %s", a, (long long)num,
                      nbop_tstr(x));
  return NB_OK;
}

static nb_code unpack_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int a;
  nbcore_norm_axis(k->attr[UNPACK_AXIS].i, x->rank, &a);
  int64_t shape[NB_MAX_RANK];
  for (int i = 0, j = 0; i < x->rank; i++)
    if (i != a) shape[j++] = x->shape[i];
  for (int i = 0; i < k->nout; i++) nbop_meta_set(&k->out[i], x->dtype, x->rank - 1, shape);
  *(int *)k->scratch = a;
  return NB_OK;
}

/* Output o's row r is input row r's o-th slice; one unit of work is one (o, r). */
typedef struct unpack_job {
  const nbop_kargs *k;
  int64_t rows, inner;
  size_t esz;
} unpack_job;

static void unpack_range(void *arg, int64_t lo, int64_t hi) {
  const unpack_job *j = arg;
  const char *in = nbcore_tdata(j->k->in[0]);
  int num = j->k->nout;
  size_t run = (size_t)j->inner * j->esz;
  int o = (int)(lo / j->rows);
  int64_t r = lo % j->rows;
  for (int64_t u = lo; u < hi; u++) {
    memcpy((char *)nbcore_tdata(j->k->res[o]) + (size_t)r * run, in + (size_t)(r * num + o) * run, run);
    if (++r == j->rows) {
      r = 0;
      o++;
    }
  }
}

static nb_code unpack_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int a = *(const int *)k->scratch;
  if (x->size == 0) return NB_OK;
  unpack_job j = {k, 1, 1, nb_dtype_size(x->dtype)};
  for (int d = 0; d < a; d++) j.rows *= x->shape[d];
  for (int d = a + 1; d < x->rank; d++) j.inner *= x->shape[d];
  nbop_parallel_range(nbop_kthreads(k, x->size), j.rows * k->nout, unpack_range, &j);
  return NB_OK;
}

/* ---- Fill, ZerosLike, OnesLike, Shape ---------------------------------------------------------- */

/* Fill(dims, value): dims a vector of dims >= 0 (where known), value a scalar. */
static nb_code fill_validate(nbop_kargs *k) {
  int64_t dims[NB_MAX_RANK];
  int n;
  if (k->in[1]->rank > 0) return nbop_kfail(k, NB_SHAPE, "value must be a scalar, got shape %s", nbop_tstr(k->in[1]));
  nb_code code = known_vector(k, 0, "dims", dims, NB_MAX_RANK, &n);
  if (!code) code = check_dims(k, dims, n);
  return known_or_later(code);
}

static nb_code fill_infer(nbop_kargs *k) {
  int64_t dims[NB_MAX_RANK];
  int n;
  nb_code code = nbop_kints(k, 0, 1, dims, NB_MAX_RANK, &n);
  return code ? code : set_out(k, 0, k->in[1]->dtype, n, dims);
}

static nb_code fill_kernel(nbop_kargs *k) {
  nb_tensor *y = k->res[0];
  nbop_strided_fill(k, nbcore_tdata(y), nbcore_tdata(k->in[1]), nb_dtype_size(y->dtype), y->size);
  return NB_OK;
}

static nb_code zeros_like_kernel(nbop_kargs *k) {
  nb_tensor *y = k->res[0];
  const char zero[8] = {0};
  nbop_strided_fill(k, nbcore_tdata(y), zero, nb_dtype_size(y->dtype), y->size);
  return NB_OK;
}

static nb_code ones_like_kernel(nbop_kargs *k) {
  nb_tensor *y = k->res[0];
  _Alignas(8) char one[8];
  one_of(y->dtype, one);
  nbop_strided_fill(k, nbcore_tdata(y), one, nb_dtype_size(y->dtype), y->size);
  return NB_OK;
}

enum { SHAPE_OUT_TYPE };

static nb_code shape_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  nb_dtype t = k->attr[SHAPE_OUT_TYPE].type;
  for (int i = 0; i < x->rank && t == NB_I32; i++)
    if (x->shape[i] > INT32_MAX)
      return nbop_kfail(k, NB_INVALID, "Shape output type is 32-bit but dim %d is %lld", i, (long long)x->shape[i]);
  int64_t rank = x->rank;
  nbop_meta_set(&k->out[0], t, 1, &rank);
  return NB_OK;
}

static nb_code shape_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  void *y = nbcore_tdata(k->res[0]);
  for (int i = 0; i < x->rank; i++) {
    if (k->res[0]->dtype == NB_I32)
      ((int32_t *)y)[i] = (int32_t)x->shape[i];
    else
      ((int64_t *)y)[i] = x->shape[i];
  }
  return NB_OK;
}

/* ---- BroadcastGradientArgs ------------------------------------------------------------------ */

/* The axes of the broadcast output that each input's gradient is summed over. */
typedef struct bgrad_plan {
  int n[2];
  int64_t axes[2][NB_MAX_RANK];
} bgrad_plan;

/* TF's rule (BCast): equal shapes reduce nothing; otherwise, aligning the shapes at the
   right, an output axis is reduced for each input whose dim there is 1 (or missing), so
   an axis where both dims are 1 is reduced for both. */
static nb_code bgrad_reduction_axes(nbop_kargs *k, const int64_t *const s[2], const int n[2], bgrad_plan *p) {
  p->n[0] = p->n[1] = 0;
  if (n[0] == n[1] && !memcmp(s[0], s[1], (size_t)n[0] * sizeof(int64_t))) return NB_OK;
  int rank = n[0] > n[1] ? n[0] : n[1];
  for (int j = 0; j < rank; j++) {
    int64_t d[2];
    for (int i = 0; i < 2; i++) d[i] = j < rank - n[i] ? 1 : s[i][j - (rank - n[i])];
    if (d[0] != 1 && d[1] != 1 && d[0] != d[1])
      return nbop_kfail(k, NB_SHAPE, "Incompatible shapes: %s vs. %s", nbop_sstr(n[0], s[0]), nbop_sstr(n[1], s[1]));
    for (int i = 0; i < 2; i++)
      if (d[i] == 1) p->axes[i][p->n[i]++] = j;
  }
  return NB_OK;
}

/* The shapes s0 and s1 (where known) and the axes each reduces. */
static nb_code bgrad_plan_of(nbop_kargs *k, bgrad_plan *p) {
  int64_t v[2][NB_MAX_RANK];
  int n[2];
  nb_code code = NB_OK;
  for (int i = 0; i < 2 && !code; i++) code = nbop_kints(k, i, 1, v[i], NB_MAX_RANK, &n[i]);
  const int64_t *const s[2] = {v[0], v[1]};
  return code ? code : bgrad_reduction_axes(k, s, n, p);
}

static nb_code bgrad_validate(nbop_kargs *k) {
  static const char *const names[2] = {"s0", "s1"};
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_INT);
  if (!code) code = nbop_kcheck_same_dtype(k, 0, 1);
  for (int i = 0; i < 2 && !code; i++)
    if (k->in[i]->rank >= 0 && k->in[i]->rank != 1)
      code = nbop_kfail(k, NB_SHAPE, "%s must be a vector, got shape %s", names[i], nbop_tstr(k->in[i]));
  bgrad_plan p;
  return code ? code : known_or_later(bgrad_plan_of(k, &p));
}

static nb_code bgrad_infer(nbop_kargs *k) {
  bgrad_plan *p = (bgrad_plan *)k->scratch;
  nb_code code = bgrad_plan_of(k, p);
  if (code) return code;
  for (int i = 0; i < 2; i++) {
    int64_t len = p->n[i];
    nbop_meta_set(&k->out[i], k->in[0]->dtype, 1, &len);
  }
  return NB_OK;
}

static nb_code bgrad_kernel(nbop_kargs *k) {
  const bgrad_plan *p = (const bgrad_plan *)k->scratch;
  for (int i = 0; i < 2; i++) {
    void *r = nbcore_tdata(k->res[i]);
    for (int j = 0; j < p->n[i]; j++) {
      if (k->res[i]->dtype == NB_I32)
        ((int32_t *)r)[j] = (int32_t)p->axes[i][j];
      else
        ((int64_t *)r)[j] = p->axes[i][j];
    }
  }
  return NB_OK;
}

/* Const: attrs value (a concrete tensor) and dtype, which must agree. */
enum { CONST_VALUE, CONST_DTYPE };

static nb_code const_validate(nbop_kargs *k) {
  const nb_tensor *v = k->attr[CONST_VALUE].tensor;
  if (!v) return nbop_kfail(k, NB_INVALID, "attr 'value' is required");
  if (!v->buf) return nbop_kfail(k, NB_INVALID, "attr 'value' must be a concrete tensor");
  if (v->dtype != k->attr[CONST_DTYPE].type)
    return nbop_kfail(k, NB_DTYPE, "attr dtype=%s does not match value of dtype %s",
                      nb_dtype_name(k->attr[CONST_DTYPE].type), nb_dtype_name(v->dtype));
  return NB_OK;
}

static nb_code const_infer(nbop_kargs *k) {
  nbop_meta_like(&k->out[0], k->attr[CONST_VALUE].tensor);
  return NB_OK;
}

static nb_code const_kernel(nbop_kargs *k) {
  const nb_tensor *v = k->attr[CONST_VALUE].tensor;
  memcpy(nbcore_tdata(k->res[0]), nbcore_tdata(v), (size_t)v->size * nb_dtype_size(v->dtype));
  return NB_OK;
}

/* Placeholder: a graph input with attrs dtype and shape (dims -1 unknown; no shape
   attr: unknown rank). Eager code has values, not placeholders. */
enum { PLACEHOLDER_DTYPE, PLACEHOLDER_SHAPE };

static nb_code placeholder_validate(nbop_kargs *k) {
  if (!k->ctx->graph)
    return nbop_kfail(k, NB_INVALID, "placeholders exist only in graph contexts; eager ops take values directly");
  const nbop_attrval *shape = &k->attr[PLACEHOLDER_SHAPE];
  if (shape->n > NB_MAX_RANK) return nbop_kfail(k, NB_SHAPE, "rank %d is larger than %d", shape->n, NB_MAX_RANK);
  for (int i = 0; i < shape->n; i++)
    if (shape->ints[i] < -1)
      return nbop_kfail(k, NB_SHAPE, "dim %d is %lld; dims are >= 0, or -1 for unknown", i, (long long)shape->ints[i]);
  return NB_OK;
}

static nb_code placeholder_infer(nbop_kargs *k) {
  const nbop_attrval *shape = &k->attr[PLACEHOLDER_SHAPE];
  nb_dtype t = k->attr[PLACEHOLDER_DTYPE].type;
  k->out[0].dtype = t;
  k->out[0].rank = shape->n < 0 ? -1 : shape->n;
  for (int i = 0; i < shape->n; i++) k->out[0].shape[i] = shape->ints[i];
  return NB_OK;
}

/* ---- Range ----------------------------------------------------------------------------------- */

/* Range's plan: the first value and the step (int64 for int dtypes, double for floats). */
typedef struct range_plan {
  int64_t istart, idelta;
  double fstart, fdelta;
} range_plan;

static const char *const range_names[3] = {"start", "limit", "delta"};

/* Reads scalar input i as an int64 (int dtypes) or a double (floats); NBOP_DEFER when the
   value is only known at run time. */
static nb_code range_read(nbop_kargs *k, int i, int64_t *iv, double *fv) {
  const nb_tensor *x = k->in[i];
  if (x->dtype == NB_I32 || x->dtype == NB_I64) {
    int n;
    return nbop_kints(k, i, 0, iv, 1, &n);
  }
  if (!x->buf) return NBOP_DEFER;
  *fv = x->dtype == NB_F32 ? *(const float *)nbcore_tdata(x) : *(const double *)nbcore_tdata(x);
  return NB_OK;
}

static nb_code range_order_fail(nbop_kargs *k, bool up, const char *start, const char *limit) {
  return nbop_kfail(k, NB_INVALID, "Requires start %s limit when delta %s 0: %s/%s", up ? "<=" : ">=", up ? ">" : "<",
                    start, limit);
}

/* delta != 0 (checked first: it alone may be known). */
static nb_code range_check_delta(nbop_kargs *k) {
  int64_t iv = 1;
  double fv = 1;
  nb_code code = range_read(k, 2, &iv, &fv);
  if (!code && (iv == 0 || fv == 0)) return nbop_kfail(k, NB_INVALID, "Requires delta != 0: %g", iv == 0 ? 0.0 : fv);
  return code;
}

/* TF's size for integers: ceil(|limit - start| / |delta|), checked and computed in 64-bit
   integers (doubles would round large bounds), the difference unsigned so extreme int64
   values cannot overflow. */
static nb_code range_int_size(nbop_kargs *k, int64_t start, int64_t limit, int64_t delta, int64_t *size) {
  if (delta > 0 ? start > limit : start < limit) {
    char a[24], b[24];
    snprintf(a, sizeof a, "%lld", (long long)start);
    snprintf(b, sizeof b, "%lld", (long long)limit);
    return range_order_fail(k, delta > 0, a, b);
  }
  uint64_t diff = delta > 0 ? (uint64_t)limit - (uint64_t)start : (uint64_t)start - (uint64_t)limit;
  uint64_t step = delta > 0 ? (uint64_t)delta : 0 - (uint64_t)delta;
  uint64_t n = diff / step + (diff % step != 0);
  if (n > (uint64_t)INT64_MAX)
    return nbop_kfail(k, NB_INVALID, "Requires ((limit - start) / delta) <= %lld", (long long)INT64_MAX);
  *size = (int64_t)n;
  return NB_OK;
}

/* TF's size for floats: ceil(|(limit - start) / delta|), computed in the input's dtype. */
static nb_code range_float_size(nbop_kargs *k, double start, double limit, double delta, int64_t *size) {
  if (!isfinite(start) || !isfinite(limit) || !isfinite(delta))
    return nbop_kfail(k, NB_INVALID, "Requires start, limit and delta to be finite: %g/%g/%g", start, limit, delta);
  if (delta > 0 ? start > limit : start < limit) {
    char a[32], b[32];
    snprintf(a, sizeof a, "%g", start);
    snprintf(b, sizeof b, "%g", limit);
    return range_order_fail(k, delta > 0, a, b);
  }
  double n = k->in[0]->dtype == NB_F32 ? (double)ceilf(fabsf(((float)limit - (float)start) / (float)delta))
                                       : ceil(fabs((limit - start) / delta));
  if (!(n < 9.2e18))
    return nbop_kfail(k, NB_INVALID, "Requires ((limit - start) / delta) <= %lld", (long long)INT64_MAX);
  *size = (int64_t)n;
  return NB_OK;
}

/* The plan and size of the range the known start, limit and delta give (NBOP_DEFER while
   one is not known). */
static nb_code range_plan_of(nbop_kargs *k, range_plan *p, int64_t *size) {
  int64_t iv[3] = {0};
  double fv[3] = {0};
  nb_code code = NB_OK;
  for (int i = 0; i < 3 && !code; i++) code = range_read(k, i, &iv[i], &fv[i]);
  if (code) return code;
  bool is_int = k->in[0]->dtype == NB_I32 || k->in[0]->dtype == NB_I64;
  *p = (range_plan){iv[0], iv[2], fv[0], fv[2]};
  return is_int ? range_int_size(k, iv[0], iv[1], iv[2], size) : range_float_size(k, fv[0], fv[1], fv[2], size);
}

static nb_code range_validate(nbop_kargs *k) {
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_NUM);
  for (int i = 1; i < 3 && !code; i++) code = nbop_kcheck_same_dtype(k, 0, i);
  for (int i = 0; i < 3 && !code; i++)
    if (k->in[i]->rank > 0)
      code = nbop_kfail(k, NB_SHAPE, "%s must be a scalar, not shape %s", range_names[i], nbop_tstr(k->in[i]));
  range_plan p;
  int64_t size;
  if (!code) code = known_or_later(range_check_delta(k));
  return code ? code : known_or_later(range_plan_of(k, &p, &size));
}

static nb_code range_infer(nbop_kargs *k) {
  int64_t size = 0; /* set on success; GCC cannot always follow that */
  nb_code code = range_plan_of(k, (range_plan *)k->scratch, &size);
  return code ? code : set_out(k, 0, k->in[0]->dtype, 1, &size);
}

/* value i = start + i * delta (a product, not a running sum, so float errors do not add up;
   integers wrap as two's complement like TF's). */
#define RANGE_FILL(sfx, T, START, DELTA)                                   \
  static void range_fill_##sfx(void *py, const range_plan *p, int64_t n) { \
    T *y = py;                                                             \
    for (int64_t i = 0; i < n; i++) y[i] = (T)(START + (DELTA) * (T)i);    \
  }
RANGE_FILL(f32, float, (float)p->fstart, (float)p->fdelta)
RANGE_FILL(f64, double, p->fstart, p->fdelta)
RANGE_FILL(i32, uint32_t, (uint32_t)p->istart, (uint32_t)p->idelta)
RANGE_FILL(i64, uint64_t, (uint64_t)p->istart, (uint64_t)p->idelta)

static nb_code range_kernel(nbop_kargs *k) {
  const range_plan *p = (const range_plan *)k->scratch;
  nb_tensor *y = k->res[0];
  switch (y->dtype) {
    case NB_F32: range_fill_f32(nbcore_tdata(y), p, y->size); break;
    case NB_F64: range_fill_f64(nbcore_tdata(y), p, y->size); break;
    case NB_I32: range_fill_i32(nbcore_tdata(y), p, y->size); break;
    default: range_fill_i64(nbcore_tdata(y), p, y->size); break;
  }
  return NB_OK;
}

/* ---- the table ------------------------------------------------------------------------------ */

enum {
  OP_RESHAPE,
  OP_EXPAND_DIMS,
  OP_SQUEEZE,
  OP_TRANSPOSE,
  OP_BROADCAST_TO,
  OP_CONCAT,
  OP_PACK,
  OP_UNPACK,
  OP_TILE,
  OP_PAD,
  OP_FILL,
  OP_ZEROS_LIKE,
  OP_ONES_LIKE,
  OP_SHAPE,
  OP_CONST,
  OP_PLACEHOLDER,
  OP_BROADCAST_GRADIENT_ARGS,
  OP_RANGE,
  OP_COUNT
};

static nbop_def array_ops[OP_COUNT] = {
    [OP_RESHAPE] = {.name = "Reshape",
                    .nin = 2,
                    .nout = 1,
                    .alias = 0,
                    .batch_leading = true,
                    .validate = reshape_validate,
                    .infer = reshape_infer},
    [OP_EXPAND_DIMS] = {.name = "ExpandDims",
                        .nin = 2,
                        .nout = 1,
                        .alias = 0,
                        .batch_leading = true,
                        .validate = expand_dims_validate,
                        .infer = expand_dims_infer},
    [OP_SQUEEZE] = {.name = "Squeeze",
                    .nin = 1,
                    .nout = 1,
                    .alias = 0,
                    .batch_leading = true,
                    .nattrs = 1,
                    .attrs = {{"squeeze_dims", NB_ATTR_INTS, {.n = 0}, false}},
                    .validate = squeeze_validate,
                    .infer = squeeze_infer},
    [OP_TRANSPOSE] = {.name = "Transpose",
                      .nin = 2,
                      .nout = 1,
                      .alias = -1,
                      .perm_input = 2,
                      .validate = transpose_validate,
                      .infer = transpose_infer,
                      .kernel = transpose_kernel},
    [OP_BROADCAST_TO] = {.name = "BroadcastTo",
                         .nin = 2,
                         .nout = 1,
                         .alias = -1,
                         .validate = broadcast_to_validate,
                         .infer = broadcast_to_infer,
                         .kernel = broadcast_to_kernel},
    /* TF's ConcatV2 requires N >= 2; N = 1 is accepted here on purpose, returning a copy
       of the one input, as tf.concat does for a one-tensor list. */
    [OP_CONCAT] = {.name = "ConcatV2",
                   .nin = 1,
                   .variadic = true,
                   .nout = 1,
                   .alias = -1,
                   .nattrs = 1,
                   .attrs = {{"N", NB_ATTR_INT, {.i = 2}, true}},
                   .validate = concat_validate,
                   .infer = concat_infer,
                   .kernel = join_kernel},
    [OP_PACK] = {.name = "Pack",
                 .nin = 0,
                 .variadic = true,
                 .nout = 1,
                 .alias = -1,
                 .nattrs = 2,
                 .attrs = {{"N", NB_ATTR_INT, {.i = 1}, true}, {"axis", NB_ATTR_INT, {.i = 0}, false}},
                 .validate = pack_validate,
                 .infer = pack_infer,
                 .kernel = join_kernel},
    [OP_UNPACK] = {.name = "Unpack",
                   .nin = 1,
                   .nout = NBOP_VARIADIC,
                   .alias = -1,
                   .nattrs = 2,
                   .attrs = {{"num", NB_ATTR_INT, {.i = 0}, true}, {"axis", NB_ATTR_INT, {.i = 0}, false}},
                   .validate = unpack_validate,
                   .infer = unpack_infer,
                   .kernel = unpack_kernel},
    [OP_TILE] = {.name = "Tile",
                 .nin = 2,
                 .nout = 1,
                 .alias = -1,
                 .validate = tile_validate,
                 .infer = tile_infer,
                 .kernel = tile_kernel},
    [OP_PAD] = {.name = "Pad",
                .nin = 2,
                .nout = 1,
                .alias = -1,
                .validate = pad_validate,
                .infer = pad_infer,
                .kernel = pad_kernel},
    [OP_FILL] = {.name = "Fill",
                 .nin = 2,
                 .nout = 1,
                 .alias = -1,
                 .t_input = 1,
                 .validate = fill_validate,
                 .infer = fill_infer,
                 .kernel = fill_kernel},
    [OP_ZEROS_LIKE] = {.name = "ZerosLike",
                       .nin = 1,
                       .nout = 1,
                       .alias = -1,
                       .shape_only = true,
                       .infer = nbop_infer_same,
                       .kernel = zeros_like_kernel},
    [OP_ONES_LIKE] = {.name = "OnesLike",
                      .nin = 1,
                      .nout = 1,
                      .alias = -1,
                      .shape_only = true,
                      .infer = nbop_infer_same,
                      .kernel = ones_like_kernel},
    [OP_SHAPE] = {.name = "Shape",
                  .nin = 1,
                  .nout = 1,
                  .alias = -1,
                  .nattrs = 1,
                  .dtype_attr = 1 + SHAPE_OUT_TYPE,
                  .shape_only = true,
                  .attrs = {{"out_type", NB_ATTR_TYPE, {.type = NB_I32}, false}},
                  .checks = {{.types = NBOP_M_INT}},
                  .infer = shape_infer,
                  .kernel = shape_kernel},
    [OP_CONST] = {.name = "Const",
                  .nin = 0,
                  .nout = 1,
                  .alias = -1,
                  .nattrs = 2,
                  .attrs = {{"value", NB_ATTR_TENSOR, {.tensor = NULL}, true},
                            {"dtype", NB_ATTR_TYPE, {.type = NB_F32}, true}},
                  .validate = const_validate,
                  .infer = const_infer,
                  .kernel = const_kernel},
    [OP_PLACEHOLDER] = {.name = "Placeholder",
                        .nin = 0,
                        .nout = 1,
                        .alias = -1,
                        .nattrs = 2,
                        .dtype_attr = 1 + PLACEHOLDER_DTYPE,
                        .attrs = {{"dtype", NB_ATTR_TYPE, {.type = NB_F32}, true},
                                  {"shape", NB_ATTR_INTS, {.n = -1}, false}},
                        .validate = placeholder_validate,
                        .infer = placeholder_infer},
    /* reads its inputs' values, not just their shapes; has no gradient */
    [OP_BROADCAST_GRADIENT_ARGS] = {.name = "BroadcastGradientArgs",
                                    .nin = 2,
                                    .nout = 2,
                                    .alias = -1,
                                    .shape_only = false,
                                    .validate = bgrad_validate,
                                    .infer = bgrad_infer,
                                    .kernel = bgrad_kernel},
    /* reads its inputs' values; has no gradient */
    [OP_RANGE] = {.name = "Range",
                  .nin = 3,
                  .nout = 1,
                  .alias = -1,
                  .validate = range_validate,
                  .infer = range_infer,
                  .kernel = range_kernel},
};

nbop_family nbop_array_family(void) { return (nbop_family){array_ops, OP_COUNT}; }

/* ---- wrappers ------------------------------------------------------------------------------- */

/* Checks a wrapper's list argument; false (with the context failed) when unusable. */
static bool list_ok(nb_ctx *c, const char *op, const char *what, const void *v, int n) {
  if (!nbop_live(c)) return false;
  if (n < 0 || (n > 0 && !v)) {
    nbcore_fail(c, NB_INVALID, "%s: %s is NULL or has negative length %d", op, what, n);
    return false;
  }
  return true;
}

/* Calls op(x, const) and frees the temporary const. */
static nb_tensor *call_with(nb_ctx *c, int op, nb_tensor *x, nb_tensor *konst) {
  nb_tensor *y = nbop_call_pair(c, &array_ops[op], x, konst);
  nb_tensor_free(konst);
  return y;
}

static nb_tensor *call_with_ints(nb_ctx *c, int op, const char *what, nb_tensor *x, const int64_t *v, int n) {
  if (!list_ok(c, array_ops[op].name, what, v, n)) return NULL;
  return call_with(c, op, x, nbop_const_ints(c, NB_I64, v, n));
}

nb_tensor *nb_reshape(nb_ctx *c, nb_tensor *x, const int64_t *shape, int rank) {
  return call_with_ints(c, OP_RESHAPE, "shape", x, shape, rank);
}

nb_tensor *nb_broadcast_to(nb_ctx *c, nb_tensor *x, const int64_t *shape, int rank) {
  return call_with_ints(c, OP_BROADCAST_TO, "shape", x, shape, rank);
}

nb_tensor *nb_tile(nb_ctx *c, nb_tensor *x, const int64_t *multiples, int n) {
  return call_with_ints(c, OP_TILE, "multiples", x, multiples, n);
}

nb_tensor *nb_transpose(nb_ctx *c, nb_tensor *x, const int *perm, int n) {
  if (!list_ok(c, "Transpose", "perm", perm, n)) return NULL;
  return call_with(c, OP_TRANSPOSE, x, nbop_const_int_list(c, perm, n));
}

nb_tensor *nb_expand_dims(nb_ctx *c, nb_tensor *x, int axis) {
  if (!nbop_live(c)) return NULL;
  return call_with(c, OP_EXPAND_DIMS, x, nb_scalar(c, NB_I32, axis));
}

nb_tensor *nb_pad(nb_ctx *c, nb_tensor *x, const int64_t *paddings, int n) {
  if (!list_ok(c, "Pad", "paddings", paddings, n)) return NULL;
  int64_t shape[2] = {n, 2};
  return call_with(c, OP_PAD, x, nb_tensor_from(c, NB_I64, 2, shape, paddings));
}

nb_tensor *nb_fill(nb_ctx *c, const int64_t *dims, int rank, nb_tensor *value) {
  if (!list_ok(c, "Fill", "dims", dims, rank)) return NULL;
  nb_tensor *d = nbop_const_ints(c, NB_I64, dims, rank), *y = nb_fill_t(c, d, value);
  nb_tensor_free(d);
  return y;
}

nb_tensor *nb_reshape_t(nb_ctx *c, nb_tensor *x, nb_tensor *shape) {
  return nbop_call_pair(c, &array_ops[OP_RESHAPE], x, shape);
}

nb_tensor *nb_transpose_t(nb_ctx *c, nb_tensor *x, nb_tensor *perm) {
  return nbop_call_pair(c, &array_ops[OP_TRANSPOSE], x, perm);
}

nb_tensor *nb_broadcast_to_t(nb_ctx *c, nb_tensor *x, nb_tensor *shape) {
  return nbop_call_pair(c, &array_ops[OP_BROADCAST_TO], x, shape);
}

nb_tensor *nb_pad_t(nb_ctx *c, nb_tensor *x, nb_tensor *paddings) {
  return nbop_call_pair(c, &array_ops[OP_PAD], x, paddings);
}

nb_tensor *nb_fill_t(nb_ctx *c, nb_tensor *dims, nb_tensor *value) {
  return nbop_call_pair(c, &array_ops[OP_FILL], dims, value);
}

nb_tensor *nb_squeeze(nb_ctx *c, nb_tensor *x, const int *axes, int naxes) {
  if (!list_ok(c, "Squeeze", "axes", axes, naxes)) return NULL;
  if (naxes > NB_MAX_RANK) {
    nbcore_fail(c, NB_INVALID, "Squeeze: %d axes given, at most %d allowed", naxes, NB_MAX_RANK);
    return NULL;
  }
  int64_t dims[NB_MAX_RANK];
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&array_ops[OP_SQUEEZE], a);
  for (int i = 0; i < naxes; i++) dims[i] = axes[i];
  a[SQUEEZE_DIMS].ints = dims;
  a[SQUEEZE_DIMS].n = naxes;
  return nbop_call(c, &array_ops[OP_SQUEEZE], &x, 1, a);
}

nb_tensor *nb_concat(nb_ctx *c, nb_tensor *const *xs, int n, int axis) {
  if (!nbop_live(c)) return NULL;
  if (n < 1 || !xs) {
    nbcore_fail(c, NB_INVALID, "ConcatV2: needs at least one input, got %d", n);
    return NULL;
  }
  nb_tensor **in = malloc((size_t)(n + 1) * sizeof *in);
  if (!in) {
    nbcore_fail(c, NB_NOMEM, "ConcatV2: out of memory");
    return NULL;
  }
  memcpy(in, xs, (size_t)n * sizeof *in);
  in[n] = nb_scalar(c, NB_I32, axis);
  nb_tensor *y = nbop_call(c, &array_ops[OP_CONCAT], in, n + 1, NULL);
  nb_tensor_free(in[n]);
  free(in);
  return y;
}

nb_tensor *nb_pack(nb_ctx *c, nb_tensor *const *xs, int n, int axis) {
  if (!nbop_live(c)) return NULL;
  if (n < 1 || !xs) {
    nbcore_fail(c, NB_INVALID, "Pack: needs at least one input, got %d", n);
    return NULL;
  }
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&array_ops[OP_PACK], a);
  a[PACK_AXIS].i = axis;
  return nbop_call(c, &array_ops[OP_PACK], xs, n, a);
}

nb_code nb_unpack(nb_ctx *c, nb_tensor *x, int axis, int num, nb_tensor **out) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&array_ops[OP_UNPACK], a);
  a[UNPACK_NUM].i = num;
  a[UNPACK_AXIS].i = axis;
  return nbop_dispatch(c, &array_ops[OP_UNPACK], &x, 1, a, out, num);
}

nb_tensor *nb_zeros_like(nb_ctx *c, nb_tensor *x) { return nbop_call(c, &array_ops[OP_ZEROS_LIKE], &x, 1, NULL); }

nb_tensor *nb_ones_like(nb_ctx *c, nb_tensor *x) { return nbop_call(c, &array_ops[OP_ONES_LIKE], &x, 1, NULL); }

nb_tensor *nb_shape_op(nb_ctx *c, nb_tensor *x, nb_dtype out_type) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&array_ops[OP_SHAPE], a);
  a[SHAPE_OUT_TYPE].type = out_type;
  return nbop_call(c, &array_ops[OP_SHAPE], &x, 1, a);
}

nb_tensor *nb_const(nb_ctx *c, nb_tensor *value) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&array_ops[OP_CONST], a);
  a[CONST_VALUE].tensor = value;
  if (value) a[CONST_DTYPE].type = value->dtype;
  return nbop_call(c, &array_ops[OP_CONST], NULL, 0, a);
}

nb_tensor *nb_placeholder(nb_ctx *c, nb_dtype t, int rank, const int64_t *shape, const char *name) {
  if (!nbop_live(c)) return NULL;
  if (rank < 0 || rank > NB_MAX_RANK || (rank > 0 && !shape)) {
    nbcore_fail(c, NB_SHAPE, "Placeholder: rank %d must be in [0, %d] with a shape", rank, NB_MAX_RANK);
    return NULL;
  }
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&array_ops[OP_PLACEHOLDER], a);
  a[PLACEHOLDER_DTYPE].type = t;
  a[PLACEHOLDER_SHAPE].ints = shape;
  a[PLACEHOLDER_SHAPE].n = rank;
  if (name) c->next_name = name; /* else a name nb_name_next left pending, or the default */
  return nbop_call(c, &array_ops[OP_PLACEHOLDER], NULL, 0, a);
}

nb_code nb_broadcast_gradient_args(nb_ctx *c, nb_tensor *s0, nb_tensor *s1, nb_tensor **r0, nb_tensor **r1) {
  if (nbop_live(c) && (!r0 || !r1))
    return nbcore_fail(c, NB_INVALID, "BroadcastGradientArgs: r0 and r1 must not be NULL");
  nb_tensor *in[2] = {s0, s1}, *out[2] = {NULL, NULL};
  nb_code code = nbop_dispatch(c, &array_ops[OP_BROADCAST_GRADIENT_ARGS], in, 2, NULL, out, 2);
  if (r0) *r0 = out[0];
  if (r1) *r1 = out[1];
  return code;
}

nb_tensor *nb_range(nb_ctx *c, nb_tensor *start, nb_tensor *limit, nb_tensor *delta) {
  nb_tensor *in[3] = {start, limit, delta};
  return nbop_call(c, &array_ops[OP_RANGE], in, 3, NULL);
}
