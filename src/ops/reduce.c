/* Reductions: Sum, Mean, Max, Min, Prod over a list of axes, ArgMax over one, and the
   scans Cumsum and Cumprod along one.
   Infer turns the axes into a plan: size-1 dims dropped, neighbouring dims with the
   same kept/reduced status merged, so every reduction becomes an alternating run
   pattern such as [R], [K,R] (row sums), [R,K] (column sums) or [K,R,K]. When the
   innermost run is reduced, each output is a reduction of contiguous segments; when
   it is kept, whole rows are accumulated into a block of output accumulators, so
   column sums vectorize across the kept dim instead of striding down columns.
   Float32 sums accumulate in double, so they stay exact far beyond 2^24 terms. Large
   reductions to few outputs are split into a fixed number of pieces, so results do
   not depend on the thread count. */
#include "op.h"
#include "strided.h" /* nbop_row_major_strides */

#include <float.h>
#include <math.h>
#include <string.h>

#define LANES 8             /* independent accumulators in a contiguous reduction */
#define TILE 1024           /* output accumulators a kernel keeps on its stack */
#define NCHUNK 16           /* partial results a large reduction to few outputs uses */
#define SPLIT_MIN (1 << 16) /* input elements from which that split is made */
#define SPLIT_COLS 256      /* the most columns a split column reduction keeps */
#define MAX_AXES 64         /* values the axis input may hold (repeats included) */

/* ---- element loops ------------------------------------------------------------------ */

/* A reducer works on accumulators of type ACC (wider than T for float32 sums; unsigned
   for integer sums and products, so overflow wraps as in TF instead of being UB). */
typedef struct reducer {
  void (*init)(void *acc, int64_t n);                                /* acc[j] = identity */
  void (*rows)(void *acc, const void *x, int64_t n);                 /* acc[j] op= x[j] */
  void (*seg)(void *acc, const void *x, int64_t n);                  /* acc[0] op= every x[j] */
  void (*segs)(void *acc, const void *x, int64_t nseg, int64_t len); /* seg, nseg times */
  void (*merge)(void *acc, const void *part, int64_t n);             /* acc[j] op= part[j] */
  void (*finish)(void *out, const void *acc, int64_t n, int64_t count);
  size_t acc_size;
} reducer;

#define ADD(a, v) ((a) + (v))
#define MUL(a, v) ((a) * (v))
/* NaN in either operand wins, as in TF's CPU reducers. */
#define FMAX(a, v) ((v) > (a) || isnan(v) ? (v) : (a))
#define FMIN(a, v) ((v) < (a) || isnan(v) ? (v) : (a))
#define IMAX(a, v) ((v) > (a) ? (v) : (a))
#define IMIN(a, v) ((v) < (a) ? (v) : (a))

#define REDUCER_LOOPS(op, sfx, T, ACC, INIT, OP)                                                          \
  static void op##_init_##sfx(void *pa, int64_t n) {                                                      \
    ACC *a = pa;                                                                                          \
    for (int64_t j = 0; j < n; j++) a[j] = INIT;                                                          \
  }                                                                                                       \
  static void op##_rows_##sfx(void *pa, const void *px, int64_t n) {                                      \
    ACC *a = pa;                                                                                          \
    const T *x = px;                                                                                      \
    for (int64_t j = 0; j < n; j++) a[j] = OP(a[j], (ACC)x[j]);                                           \
  }                                                                                                       \
  static void op##_merge_##sfx(void *pa, const void *pb, int64_t n) {                                     \
    ACC *a = pa;                                                                                          \
    const ACC *b = pb;                                                                                    \
    for (int64_t j = 0; j < n; j++) a[j] = OP(a[j], b[j]);                                                \
  }                                                                                                       \
  static inline __attribute__((always_inline)) void op##_seg_##sfx(void *pa, const void *px, int64_t n) { \
    const T *x = px;                                                                                      \
    if (n < 2 * LANES) {                                                                                  \
      ACC a = *(ACC *)pa;                                                                                 \
      for (int64_t i = 0; i < n; i++) a = OP(a, (ACC)x[i]);                                               \
      *(ACC *)pa = a;                                                                                     \
      return;                                                                                             \
    }                                                                                                     \
    ACC lane[LANES];                                                                                      \
    for (int j = 0; j < LANES; j++) lane[j] = INIT;                                                       \
    int64_t i = 0;                                                                                        \
    for (; i + LANES <= n; i += LANES)                                                                    \
      for (int j = 0; j < LANES; j++) lane[j] = OP(lane[j], (ACC)x[i + j]);                               \
    for (; i < n; i++) lane[0] = OP(lane[0], (ACC)x[i]);                                                  \
    ACC a = *(ACC *)pa;                                                                                   \
    for (int j = 0; j < LANES; j++) a = OP(a, lane[j]);                                                   \
    *(ACC *)pa = a;                                                                                       \
  }                                                                                                       \
  static void op##_segs_##sfx(void *pa, const void *px, int64_t nseg, int64_t len) {                      \
    for (int64_t s = 0; s < nseg; s++) op##_seg_##sfx((ACC *)pa + s, (const T *)px + s * len, len);       \
  }

/* Sum, Prod, Max, Min: the accumulator converted back to T. */
#define REDUCER(op, sfx, T, ACC, INIT, OP)                                                                 \
  REDUCER_LOOPS(op, sfx, T, ACC, INIT, OP)                                                                 \
  static void op##_finish_##sfx(void *po, const void *pa, int64_t n, int64_t count) {                      \
    (void)count;                                                                                           \
    T *o = po;                                                                                             \
    const ACC *a = pa;                                                                                     \
    for (int64_t j = 0; j < n; j++) o[j] = (T)a[j];                                                        \
  }                                                                                                        \
  static const reducer op##_##sfx = {op##_init_##sfx,  op##_rows_##sfx,   op##_seg_##sfx, op##_segs_##sfx, \
                                     op##_merge_##sfx, op##_finish_##sfx, sizeof(ACC)};

/* Mean: the sum's loops, then a division. 0/0 is NaN for floats. */
#define MEAN_FLOAT(sfx, T, ACC)                                                                         \
  static void mean_finish_##sfx(void *po, const void *pa, int64_t n, int64_t count) {                   \
    T *o = po;                                                                                          \
    const ACC *a = pa;                                                                                  \
    for (int64_t j = 0; j < n; j++) o[j] = (T)(a[j] / (ACC)count);                                      \
  }                                                                                                     \
  static const reducer mean_##sfx = {sum_init_##sfx,  sum_rows_##sfx,    sum_seg_##sfx, sum_segs_##sfx, \
                                     sum_merge_##sfx, mean_finish_##sfx, sizeof(ACC)};
/* Integer means sum in 64 bits (as TF does for int32) and truncate like TF; TF divides
   by zero on an empty integer mean (a crash), so nabla returns 0 there. */
#define MEAN_INT(sfx, T)                                                                                    \
  REDUCER_LOOPS(mean, sfx, T, uint64_t, 0, ADD)                                                             \
  static void mean_finish_##sfx(void *po, const void *pa, int64_t n, int64_t count) {                       \
    T *o = po;                                                                                              \
    const uint64_t *a = pa;                                                                                 \
    for (int64_t j = 0; j < n; j++) o[j] = count ? (T)((int64_t)a[j] / count) : 0;                          \
  }                                                                                                         \
  static const reducer mean_##sfx = {mean_init_##sfx,  mean_rows_##sfx,   mean_seg_##sfx,  mean_segs_##sfx, \
                                     mean_merge_##sfx, mean_finish_##sfx, sizeof(uint64_t)};

REDUCER(sum, f32, float, double, 0, ADD)
REDUCER(sum, f64, double, double, 0, ADD)
REDUCER(sum, i32, int32_t, uint32_t, 0, ADD)
REDUCER(sum, i64, int64_t, uint64_t, 0, ADD)
REDUCER(prod, f32, float, float, 1, MUL)
REDUCER(prod, f64, double, double, 1, MUL)
REDUCER(prod, i32, int32_t, uint32_t, 1, MUL)
REDUCER(prod, i64, int64_t, uint64_t, 1, MUL)
REDUCER(max, f32, float, float, -INFINITY, FMAX)
REDUCER(max, f64, double, double, -INFINITY, FMAX)
REDUCER(max, i32, int32_t, int32_t, INT32_MIN, IMAX)
REDUCER(max, i64, int64_t, int64_t, INT64_MIN, IMAX)
REDUCER(min, f32, float, float, INFINITY, FMIN)
REDUCER(min, f64, double, double, INFINITY, FMIN)
REDUCER(min, i32, int32_t, int32_t, INT32_MAX, IMIN)
REDUCER(min, i64, int64_t, int64_t, INT64_MAX, IMIN)
MEAN_FLOAT(f32, float, double)
MEAN_FLOAT(f64, double, double)
MEAN_INT(i32, int32_t)
MEAN_INT(i64, int64_t)

typedef struct reduce_impl {
  const reducer *by[NB_I64 + 1]; /* by dtype */
} reduce_impl;

/* The four numeric dtypes' versions of op (reducers, scan loops) as an impl table. */
#define BY_DTYPE(op)                                                                           \
  {                                                                                            \
    { [NB_F32] = &op##_f32, [NB_F64] = &op##_f64, [NB_I32] = &op##_i32, [NB_I64] = &op##_i64 } \
  }
static const reduce_impl sum_impl = BY_DTYPE(sum);
static const reduce_impl mean_impl = BY_DTYPE(mean);
static const reduce_impl max_impl = BY_DTYPE(max);
static const reduce_impl min_impl = BY_DTYPE(min);
static const reduce_impl prod_impl = BY_DTYPE(prod);

/* ---- the plan ----------------------------------------------------------------------- */

/* The input's dims with size-1 dims dropped and same-status neighbours merged. */
typedef struct reduce_plan {
  int m;
  int64_t dims[NB_MAX_RANK];
  int64_t strides[NB_MAX_RANK]; /* input element strides */
  bool reduced[NB_MAX_RANK];
  int64_t count; /* input elements per output element (for Mean) */
} reduce_plan;
_Static_assert(sizeof(reduce_plan) <= NBOP_SCRATCH_BYTES, "reduce plan must fit the scratch");

static void plan_build(reduce_plan *p, const nb_tensor *x, unsigned mask) {
  p->m = 0;
  p->count = 1;
  for (int d = 0; d < x->rank; d++) {
    bool red = mask >> d & 1u;
    if (red) p->count *= x->shape[d];
    if (x->shape[d] == 1) continue;
    if (p->m > 0 && p->reduced[p->m - 1] == red) {
      p->dims[p->m - 1] *= x->shape[d];
    } else {
      p->dims[p->m] = x->shape[d];
      p->reduced[p->m++] = red;
    }
  }
  nbop_row_major_strides(p->m, p->dims, p->strides);
}

static bool plan_reduces(const reduce_plan *p) {
  for (int d = 0; d < p->m; d++)
    if (p->reduced[d]) return true;
  return false;
}

/* A row-major walk over a subset of the merged dims, yielding input offsets. */
typedef struct dimset {
  int n;
  int64_t dims[NB_MAX_RANK], strides[NB_MAX_RANK];
  int64_t total;
} dimset;

static void dimset_add(dimset *s, int64_t dim, int64_t stride) {
  s->dims[s->n] = dim;
  s->strides[s->n++] = stride;
  s->total *= dim;
}

/* The offset of the i-th position; idx receives its multi-index. */
static int64_t dimset_at(const dimset *s, int64_t i, int64_t *idx) {
  int64_t off = 0;
  for (int d = s->n - 1; d >= 0; d--) {
    idx[d] = i % s->dims[d];
    i /= s->dims[d];
    off += idx[d] * s->strides[d];
  }
  return off;
}

static void dimset_step(const dimset *s, int64_t *idx, int64_t *off) {
  for (int d = s->n - 1; d >= 0; d--) {
    *off += s->strides[d];
    if (++idx[d] < s->dims[d]) return;
    *off -= s->dims[d] * s->strides[d];
    idx[d] = 0;
  }
}

/* ---- infer ------------------------------------------------------------------------- */

enum { ATTR_KEEP_DIMS };

/* Reads reduction_indices into a bitmap of input dims; repeats count once. Every axis
   is in range where x's rank is known (NBOP_DEFER while the axes are not known). */
static nb_code read_axes(nbop_kargs *k, unsigned *mask) {
  int64_t v[MAX_AXES];
  int n;
  nb_code code = nbop_kints(k, 1, 1, v, MAX_AXES, &n);
  if (code) return code;
  int rank = k->in[0]->rank;
  *mask = 0;
  for (int i = 0; i < n && rank >= 0; i++) {
    int a;
    if (!nbcore_norm_axis(v[i], rank, &a))
      return nbop_kfail(k, NB_INVALID, "Invalid reduction dimension (%lld for input with %d dimension(s)",
                        (long long)v[i], rank);
    *mask |= 1u << a;
  }
  return NB_OK;
}

static nb_code reduce_validate(nbop_kargs *k) {
  unsigned mask;
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_NUM);
  if (!code) code = read_axes(k, &mask);
  return code == NBOP_DEFER ? NB_OK : code;
}

static nb_code reduce_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  unsigned mask;
  nb_code code = read_axes(k, &mask);
  if (code) return code;
  nbop_meta *m = &k->out[0];
  m->dtype = x->dtype;
  m->rank = 0;
  for (int d = 0; d < x->rank; d++) {
    if (!(mask >> d & 1u))
      m->shape[m->rank++] = x->shape[d];
    else if (k->attr[ATTR_KEEP_DIMS].b)
      m->shape[m->rank++] = 1;
  }
  plan_build((reduce_plan *)k->scratch, x, mask);
  return NB_OK;
}

/* ---- kernels ------------------------------------------------------------------------ */

typedef struct reduce_job {
  const reducer *r;
  const char *x;
  char *y;
  size_t esz; /* input and output element size */
  int64_t count;
  int64_t inner;        /* length of the innermost merged run */
  dimset kept, red;     /* the outer runs (all but the innermost), by status */
  int64_t tile, ntiles; /* column blocks of a kept inner run */
  unsigned char *parts; /* NCHUNK partial accumulator blocks of a split reduction, */
  size_t part_stride;   /* part_stride bytes apart */
} reduce_job;

static void job_init(reduce_job *j, const nbop_kargs *k, const reduce_plan *p) {
  j->r = ((const reduce_impl *)k->def->impl)->by[k->in[0]->dtype];
  j->x = nbcore_tdata(k->in[0]);
  j->y = nbcore_tdata(k->res[0]);
  j->esz = nb_dtype_size(k->in[0]->dtype);
  j->count = p->count;
  j->inner = p->dims[p->m - 1];
  j->kept = (dimset){.total = 1};
  j->red = (dimset){.total = 1};
  for (int d = 0; d < p->m - 1; d++) dimset_add(p->reduced[d] ? &j->red : &j->kept, p->dims[d], p->strides[d]);
}

/* Every output is the identity (or NaN for a float Mean): the input is empty. */
static void fill_identity(const reducer *r, char *y, size_t esz, int64_t n, int64_t count) {
  _Alignas(8) unsigned char acc[TILE * 8];
  for (int64_t o = 0; o < n; o += TILE) {
    int64_t len = n - o < TILE ? n - o : TILE;
    r->init(acc, len);
    r->finish(y + (size_t)o * esz, acc, len, count);
  }
}

/* Innermost run reduced: output o reduces one contiguous segment per reduced row. */
static void inner_range(void *arg, int64_t lo, int64_t hi) {
  const reduce_job *j = arg;
  const reducer *r = j->r;
  _Alignas(8) unsigned char acc[TILE * 8];
  int64_t kidx[NB_MAX_RANK], ridx[NB_MAX_RANK];
  int64_t koff = dimset_at(&j->kept, lo, kidx);
  for (int64_t o = lo; o < hi; o += TILE) {
    int64_t len = hi - o < TILE ? hi - o : TILE;
    r->init(acc, len);
    if (j->red.n == 0) { /* [K,R]: the block's segments lie back to back */
      r->segs(acc, j->x + (size_t)(o * j->inner) * j->esz, len, j->inner);
    } else {
      for (int64_t i = 0; i < len; i++) {
        unsigned char *a = acc + (size_t)i * r->acc_size;
        int64_t roff = dimset_at(&j->red, 0, ridx);
        for (int64_t row = 0; row < j->red.total; row++) {
          r->seg(a, j->x + (size_t)(koff + roff) * j->esz, j->inner);
          dimset_step(&j->red, ridx, &roff);
        }
        dimset_step(&j->kept, kidx, &koff);
      }
    }
    r->finish(j->y + (size_t)o * j->esz, acc, len, j->count);
  }
}

/* A reduce-all too big for one thread: NCHUNK pieces, merged in order so the result
   does not depend on the thread count. */
static void all_chunks(void *arg, int64_t lo, int64_t hi) {
  const reduce_job *j = arg;
  for (int64_t c = lo; c < hi; c++) {
    int64_t a = j->inner * c / NCHUNK, b = j->inner * (c + 1) / NCHUNK;
    unsigned char *part = j->parts + (size_t)c * j->part_stride;
    j->r->init(part, 1);
    j->r->seg(part, j->x + (size_t)a * j->esz, b - a);
  }
}

/* Accumulates reduced rows [lo, hi) of the len columns at base into acc. When the block
   is the whole inner run, rows adjacent in memory form one long row; that is fed to
   back-to-back copies of the accumulator block, folded at the end, so short rows still
   run as long vector loops. (The last reduced run always sits right before the kept
   inner run, so its rows are adjacent.) */
static void accumulate_rows(const reduce_job *j, unsigned char *acc, int64_t base, int64_t lo, int64_t hi,
                            int64_t len) {
  const reducer *r = j->r;
  const dimset *red = &j->red;
  int64_t ridx[NB_MAX_RANK];
  int64_t copies = len == j->inner ? TILE / len : 1;
  if (copies <= 1) {
    int64_t roff = dimset_at(red, lo, ridx);
    for (int64_t row = lo; row < hi; row++) {
      r->rows(acc, j->x + (size_t)(base + roff) * j->esz, len);
      dimset_step(red, ridx, &roff);
    }
    return;
  }
  _Alignas(8) unsigned char wide[TILE * 8];
  int64_t width = copies * len, last = red->n - 1;
  r->init(wide, width);
  for (int64_t row = lo; row < hi;) {
    int64_t roff = dimset_at(red, row, ridx);
    int64_t run = red->dims[last] - ridx[last] < hi - row ? red->dims[last] - ridx[last] : hi - row;
    const char *src = j->x + (size_t)(base + roff) * j->esz;
    int64_t full = run / copies;
    for (int64_t b = 0; b < full; b++) r->rows(wide, src + (size_t)(b * width) * j->esz, width);
    r->rows(wide, src + (size_t)(full * width) * j->esz, (run - full * copies) * len);
    row += run;
  }
  for (int64_t c = 0; c < copies; c++) r->merge(acc, wide + (size_t)(c * len) * r->acc_size, len);
}

/* Innermost run kept: unit u is one kept outer row times one tile of columns. */
static void outer_range(void *arg, int64_t lo, int64_t hi) {
  const reduce_job *j = arg;
  _Alignas(8) unsigned char acc[TILE * 8];
  int64_t kidx[NB_MAX_RANK];
  for (int64_t u = lo; u < hi; u++) {
    int64_t row = u / j->ntiles, c0 = u % j->ntiles * j->tile;
    int64_t len = j->inner - c0 < j->tile ? j->inner - c0 : j->tile;
    int64_t base = dimset_at(&j->kept, row, kidx) + c0;
    j->r->init(acc, len);
    accumulate_rows(j, acc, base, 0, j->red.total, len);
    j->r->finish(j->y + (size_t)(row * j->inner + c0) * j->esz, acc, len, j->count);
  }
}

/* Column sums with few columns and many rows: NCHUNK row ranges, merged in order. */
static void column_chunks(void *arg, int64_t lo, int64_t hi) {
  const reduce_job *j = arg;
  for (int64_t c = lo; c < hi; c++) {
    unsigned char *part = j->parts + (size_t)c * j->part_stride;
    j->r->init(part, j->inner);
    accumulate_rows(j, part, 0, j->red.total * c / NCHUNK, j->red.total * (c + 1) / NCHUNK, j->inner);
  }
}

/* Runs a split reduction and merges its NCHUNK partial blocks of n accumulators. */
static void run_chunks(const nbop_kargs *k, reduce_job *j, nbop_range_fn fn, int64_t n) {
  _Alignas(8) unsigned char parts[NCHUNK * SPLIT_COLS * 8];
  j->parts = parts;
  j->part_stride = (size_t)n * j->r->acc_size;
  nbop_parallel_range(nbop_kthreads(k, k->in[0]->size), NCHUNK, fn, j);
  for (int c = 1; c < NCHUNK; c++) j->r->merge(parts, parts + (size_t)c * j->part_stride, n);
  j->r->finish(j->y, parts, n, j->count);
}

static void reduce_inner(const nbop_kargs *k, reduce_job *j) {
  int64_t nout = k->res[0]->size;
  if (nout == 1 && j->red.total == 1 && k->in[0]->size >= SPLIT_MIN) {
    run_chunks(k, j, all_chunks, 1);
    return;
  }
  nbop_parallel_range(nbop_kthreads(k, k->in[0]->size), nout, inner_range, j);
}

static void reduce_outer(const nbop_kargs *k, reduce_job *j) {
  int64_t rows = j->kept.total;
  if (rows == 1 && j->inner <= SPLIT_COLS && k->in[0]->size >= SPLIT_MIN) {
    run_chunks(k, j, column_chunks, j->inner);
    return;
  }
  /* equal tiles, a multiple of 8 columns wide, so threads get balanced blocks */
  j->ntiles = (j->inner + TILE - 1) / TILE;
  j->tile = ((j->inner + j->ntiles - 1) / j->ntiles + 7) / 8 * 8;
  nbop_parallel_range(nbop_kthreads(k, k->in[0]->size), rows * j->ntiles, outer_range, j);
}

static nb_code reduce_kernel(nbop_kargs *k) {
  const reduce_plan *p = (const reduce_plan *)k->scratch;
  const nb_tensor *x = k->in[0];
  nb_tensor *y = k->res[0];
  size_t esz = nb_dtype_size(x->dtype);
  if (y->size == 0) return NB_OK;
  if (x->size == 0) {
    fill_identity(((const reduce_impl *)k->def->impl)->by[x->dtype], nbcore_tdata(y), esz, y->size, p->count);
    return NB_OK;
  }
  if (!plan_reduces(p)) { /* only size-1 dims (or none) are reduced: values pass through */
    memcpy(nbcore_tdata(y), nbcore_tdata(x), (size_t)x->size * esz);
    return NB_OK;
  }
  reduce_job j;
  job_init(&j, k, p);
  if (p->reduced[p->m - 1])
    reduce_inner(k, &j);
  else
    reduce_outer(k, &j);
  return NB_OK;
}

/* ---- ArgMax ------------------------------------------------------------------------- */

/* Like TF's Eigen reducer: start from the type's lowest finite value at index 0 and
   move on only to a strictly greater value. So the first maximum wins ties, NaN is
   never selected, and a slice holding only NaN or -inf gives 0. */
#define ARGMAX_LOOPS(sfx, T, LOWEST)                                                                   \
  static int64_t argmax_row_##sfx(const void *px, int64_t n) {                                         \
    const T *x = px;                                                                                   \
    T best[LANES], b = LOWEST;                                                                         \
    int64_t at[LANES], a = 0, i = 0;                                                                   \
    for (int j = 0; j < LANES; j++) best[j] = LOWEST, at[j] = 0;                                       \
    for (; i + LANES <= n; i += LANES)                                                                 \
      for (int j = 0; j < LANES; j++) {                                                                \
        bool gt = x[i + j] > best[j];                                                                  \
        best[j] = gt ? x[i + j] : best[j];                                                             \
        at[j] = gt ? i + j : at[j];                                                                    \
      }                                                                                                \
    /* each lane holds the first maximum of its elements; of the lanes with the        \
       greatest value, the lowest index is the first maximum overall */               \
    for (int j = 0; j < LANES; j++)                                                                    \
      if (best[j] > b || (best[j] == b && at[j] < a)) {                                                \
        b = best[j];                                                                                   \
        a = at[j];                                                                                     \
      }                                                                                                \
    for (; i < n; i++)                                                                                 \
      if (x[i] > b) {                                                                                  \
        b = x[i];                                                                                      \
        a = i;                                                                                         \
      }                                                                                                \
    return a;                                                                                          \
  }                                                                                                    \
  static void argmax_cols_##sfx(const void *px, int64_t n, int64_t stride, int64_t len, int64_t *at) { \
    const T *x = px;                                                                                   \
    T best[TILE];                                                                                      \
    for (int64_t j = 0; j < len; j++) best[j] = LOWEST, at[j] = 0;                                     \
    for (int64_t i = 0; i < n; i++, x += stride)                                                       \
      for (int64_t j = 0; j < len; j++) {                                                              \
        bool gt = x[j] > best[j];                                                                      \
        best[j] = gt ? x[j] : best[j];                                                                 \
        at[j] = gt ? i : at[j];                                                                        \
      }                                                                                                \
  }

ARGMAX_LOOPS(f32, float, -FLT_MAX)
ARGMAX_LOOPS(f64, double, -DBL_MAX)
ARGMAX_LOOPS(i32, int32_t, INT32_MIN)
ARGMAX_LOOPS(i64, int64_t, INT64_MIN)
ARGMAX_LOOPS(b, uint8_t, 0)

typedef struct argmax_impl {
  int64_t (*row)(const void *x, int64_t n);
  void (*cols)(const void *x, int64_t n, int64_t stride, int64_t len, int64_t *at);
} argmax_impl;

static const argmax_impl argmax_by_dtype[NB_BOOL + 1] = {[NB_F32] = {argmax_row_f32, argmax_cols_f32},
                                                         [NB_F64] = {argmax_row_f64, argmax_cols_f64},
                                                         [NB_I32] = {argmax_row_i32, argmax_cols_i32},
                                                         [NB_I64] = {argmax_row_i64, argmax_cols_i64},
                                                         [NB_BOOL] = {argmax_row_b, argmax_cols_b}};

/* The input as [outer, n, inner] around the reduced axis. */
typedef struct axis_layout {
  int64_t outer, n, inner;
} axis_layout;

enum { ATTR_OUTPUT_TYPE };

/* validate's check of the scalar axis input 1 of an op on x = input 0 (name: TF's for it,
   range_name: TF's in the range message): an int scalar in range, where known. */
static nb_code check_axis(nbop_kargs *k, const char *name, const char *range_name) {
  const nb_tensor *a = k->in[1];
  int64_t given;
  int axis, n;
  nb_code code = nbop_kcheck_dtype(k, 1, NBOP_M_INT);
  if (code) return code;
  if (a->rank > 0)
    return nbop_kfail(k, NB_SHAPE, "%s must be a scalar, but received tensor of shape: %s", name, nbop_tstr(a));
  code = nbop_kints(k, 1, 0, &given, 1, &n);
  if (!code) code = nbop_kaxis(k, given, k->in[0]->rank, range_name, &axis);
  return code == NBOP_DEFER ? NB_OK : code;
}

/* The axis input 1 as given in *given, normalized into *axis, and x's [outer, n, inner]
   around it in the scratch plan. */
static nb_code axis_plan(nbop_kargs *k, int64_t *given, int *axis) {
  const nb_tensor *x = k->in[0];
  int n;
  nb_code code = nbop_kints(k, 1, 0, given, 1, &n);
  if (code) return code;
  nbcore_norm_axis(*given, x->rank, axis);
  axis_layout *p = (axis_layout *)k->scratch;
  *p = (axis_layout){1, x->shape[*axis], 1};
  for (int d = 0; d < x->rank; d++) {
    if (d < *axis) p->outer *= x->shape[d];
    if (d > *axis) p->inner *= x->shape[d];
  }
  return NB_OK;
}

/* Unit u of a tiled walk: outer index *o and a tile of inner columns from *c0, *len wide. */
static void tile_unit(int64_t u, int64_t ntiles, int64_t inner, int64_t *o, int64_t *c0, int64_t *len) {
  *o = u / ntiles;
  *c0 = u % ntiles * TILE;
  *len = inner - *c0 < TILE ? inner - *c0 : TILE;
}

/* output_type is checked by its spec */
static nb_code argmax_validate(nbop_kargs *k) { return check_axis(k, "dim", "dimension"); }

static nb_code argmax_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  int64_t given;
  int axis;
  nb_code code = axis_plan(k, &given, &axis);
  if (code) return code;
  if (x->shape[axis] == 0)
    return nbop_kfail(k, NB_INVALID, "Reduction axis %lld is empty in shape %s", (long long)given, nbop_tstr(x));
  nbop_meta *m = &k->out[0];
  m->dtype = k->attr[ATTR_OUTPUT_TYPE].type;
  m->rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (d != axis) m->shape[m->rank++] = x->shape[d];
  return NB_OK;
}

typedef struct argmax_job {
  const argmax_impl *f;
  axis_layout p;
  const char *x;
  void *y;
  size_t esz;
  bool i32;
  int64_t ntiles;
} argmax_job;

static void put_indices(const argmax_job *j, int64_t o, const int64_t *at, int64_t len) {
  if (j->i32) {
    for (int64_t i = 0; i < len; i++) ((int32_t *)j->y)[o + i] = (int32_t)at[i];
  } else {
    memcpy((int64_t *)j->y + o, at, (size_t)len * sizeof *at);
  }
}

/* inner == 1: each output scans one contiguous row */
static void argmax_rows(void *arg, int64_t lo, int64_t hi) {
  const argmax_job *j = arg;
  for (int64_t o = lo; o < hi; o++) {
    int64_t at = j->f->row(j->x + (size_t)(o * j->p.n) * j->esz, j->p.n);
    put_indices(j, o, &at, 1);
  }
}

/* inner > 1: unit u is one outer index times one tile of inner columns */
static void argmax_tiles(void *arg, int64_t lo, int64_t hi) {
  const argmax_job *j = arg;
  int64_t at[TILE];
  for (int64_t u = lo; u < hi; u++) {
    int64_t o, c0, len;
    tile_unit(u, j->ntiles, j->p.inner, &o, &c0, &len);
    j->f->cols(j->x + (size_t)(o * j->p.n * j->p.inner + c0) * j->esz, j->p.n, j->p.inner, len, at);
    put_indices(j, o * j->p.inner + c0, at, len);
  }
}

static nb_code argmax_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  argmax_job j = {&argmax_by_dtype[x->dtype],
                  *(const axis_layout *)k->scratch,
                  nbcore_tdata(x),
                  nbcore_tdata(k->res[0]),
                  nb_dtype_size(x->dtype),
                  k->res[0]->dtype == NB_I32,
                  0};
  int nt = nbop_kthreads(k, x->size);
  if (j.p.inner == 1) {
    nbop_parallel_range(nt, j.p.outer, argmax_rows, &j);
  } else {
    j.ntiles = (j.p.inner + TILE - 1) / TILE;
    nbop_parallel_range(nt, j.p.outer * j.ntiles, argmax_tiles, &j);
  }
  return NB_OK;
}

/* ---- Cumsum, Cumprod ---------------------------------------------------------------------- */

/* A scan views x as [outer, n, inner] around the axis. Row i of the result is row i-1's
   combined with one row of x (row i, or row i-1 when exclusive), so each step is a
   contiguous loop across the inner dims that vectorizes; inner is cut into tiles so
   threads share the work even when outer is 1. Integers scan in unsigned types, so
   overflow wraps as in TF. */
typedef void (*scan_fn)(char *y, const char *x, int64_t n, int64_t stride, int64_t len, bool excl, bool rev);

#define SCAN(op, sfx, T, U, IDENT, OP)                                                                       \
  static void scan_##op##_##sfx(char *py, const char *px, int64_t n, int64_t stride, int64_t len, bool excl, \
                                bool rev) {                                                                  \
    U *y = (U *)(void *)py;                                                                                  \
    const T *x = (const T *)(const void *)px;                                                                \
    int64_t first = rev ? n - 1 : 0, step = rev ? -stride : stride;                                          \
    U *row = y + first * stride;                                                                             \
    for (int64_t j = 0; j < len; j++) row[j] = excl ? (U)(IDENT) : (U)x[first * stride + j];                 \
    for (int64_t i = 1; i < n; i++) {                                                                        \
      const U *prev = row;                                                                                   \
      row += step;                                                                                           \
      const T *src = x + (row - y) - (excl ? step : 0);                                                      \
      for (int64_t j = 0; j < len; j++) row[j] = OP(prev[j], (U)src[j]);                                     \
    }                                                                                                        \
  }

SCAN(sum, f32, float, float, 0, ADD)
SCAN(sum, f64, double, double, 0, ADD)
SCAN(sum, i32, int32_t, uint32_t, 0, ADD)
SCAN(sum, i64, int64_t, uint64_t, 0, ADD)
SCAN(prod, f32, float, float, 1, MUL)
SCAN(prod, f64, double, double, 1, MUL)
SCAN(prod, i32, int32_t, uint32_t, 1, MUL)
SCAN(prod, i64, int64_t, uint64_t, 1, MUL)

typedef struct scan_impl {
  scan_fn by[NB_I64 + 1]; /* by dtype */
} scan_impl;

static const scan_impl cumsum_impl = BY_DTYPE(scan_sum);
static const scan_impl cumprod_impl = BY_DTYPE(scan_prod);

enum { ATTR_EXCLUSIVE, ATTR_REVERSE };

static nb_code scan_validate(nbop_kargs *k) {
  nb_code code = nbop_kcheck_dtype(k, 0, NBOP_M_NUM);
  return code ? code : check_axis(k, "axis", "scan axis");
}

/* The input as [outer, n, inner] around the scanned axis (axis_plan). */
static nb_code scan_infer(nbop_kargs *k) {
  int64_t given;
  int axis;
  nb_code code = axis_plan(k, &given, &axis);
  if (code) return code;
  nbop_meta_like(&k->out[0], k->in[0]);
  return NB_OK;
}

typedef struct scan_job {
  scan_fn f;
  axis_layout p;
  const char *x;
  char *y;
  size_t esz;
  int64_t ntiles;
  bool excl, rev;
} scan_job;

/* unit u: one outer index times one tile of inner columns */
static void scan_tiles(void *arg, int64_t lo, int64_t hi) {
  const scan_job *j = arg;
  for (int64_t u = lo; u < hi; u++) {
    int64_t o, c0, len;
    tile_unit(u, j->ntiles, j->p.inner, &o, &c0, &len);
    size_t off = (size_t)(o * j->p.n * j->p.inner + c0) * j->esz;
    j->f(j->y + off, j->x + off, j->p.n, j->p.inner, len, j->excl, j->rev);
  }
}

static nb_code scan_kernel(nbop_kargs *k) {
  const nb_tensor *x = k->in[0];
  if (x->size == 0) return NB_OK;
  scan_job j = {((const scan_impl *)k->def->impl)->by[x->dtype],
                *(const axis_layout *)k->scratch,
                nbcore_tdata(x),
                nbcore_tdata(k->res[0]),
                nb_dtype_size(x->dtype),
                0,
                k->attr[ATTR_EXCLUSIVE].b,
                k->attr[ATTR_REVERSE].b};
  j.ntiles = (j.p.inner + TILE - 1) / TILE;
  nbop_parallel_range(nbop_kthreads(k, x->size), j.p.outer * j.ntiles, scan_tiles, &j);
  return NB_OK;
}

/* ---- the table ---------------------------------------------------------------------- */

#define REDUCTION(NAME, IMPL)                                                                                        \
  {                                                                                                                  \
    .name = NAME, .nin = 2, .nout = 1, .alias = -1, .axis_input = 2, .nattrs = 1,                                    \
    .attrs = {{"keep_dims", NB_ATTR_BOOL, {.b = false}, false}}, .validate = reduce_validate, .infer = reduce_infer, \
    .kernel = reduce_kernel, .impl = &IMPL                                                                           \
  }

#define SCAN_OP(NAME, IMPL)                                                                                      \
  {                                                                                                              \
    .name = NAME, .nin = 2, .nout = 1, .alias = -1, .axis_input = 2, .nattrs = 2,                                \
    .attrs = {{"exclusive", NB_ATTR_BOOL, {.b = false}, false}, {"reverse", NB_ATTR_BOOL, {.b = false}, false}}, \
    .validate = scan_validate, .infer = scan_infer, .kernel = scan_kernel, .impl = &IMPL                         \
  }

enum { OP_SUM, OP_MEAN, OP_MAX, OP_MIN, OP_PROD, OP_ARGMAX, OP_CUMSUM, OP_CUMPROD, OP_COUNT };

static nbop_def reduce_ops[OP_COUNT] = {
    [OP_SUM] = REDUCTION("Sum", sum_impl),
    [OP_MEAN] = REDUCTION("Mean", mean_impl),
    [OP_MAX] = REDUCTION("Max", max_impl),
    [OP_MIN] = REDUCTION("Min", min_impl),
    [OP_PROD] = REDUCTION("Prod", prod_impl),
    [OP_ARGMAX] = {.name = "ArgMax",
                   .nin = 2,
                   .nout = 1,
                   .alias = -1,
                   .nattrs = 1,
                   .dtype_attr = 1 + ATTR_OUTPUT_TYPE,
                   .attrs = {{"output_type", NB_ATTR_TYPE, {.type = NB_I64}, false}},
                   .checks = {{.types = NBOP_M_INT}},
                   .validate = argmax_validate,
                   .infer = argmax_infer,
                   .kernel = argmax_kernel},
    [OP_CUMSUM] = SCAN_OP("Cumsum", cumsum_impl),
    [OP_CUMPROD] = SCAN_OP("Cumprod", cumprod_impl),
};

/* The float sums with AVX clones (the loops above inlined into each; a segment's loop
   always is): the fused kernel runs them on blocks in cache, where they are compute-bound.
   The Reduce kernel's own calls stay on the plain loops. The clones are static: clang
   emits no symbol of the plain name for an exported function with target_clones. */
NBOP_SIMD_CLONES static void float_sum_segment(nb_dtype t, double *acc, const void *x, int64_t n) {
  if (t == NB_F32)
    sum_seg_f32(acc, x, n);
  else
    sum_seg_f64(acc, x, n);
}

NBOP_SIMD_CLONES static void float_sum_rows(nb_dtype t, double *acc, const void *x, int64_t n) {
  if (t == NB_F32)
    sum_rows_f32(acc, x, n);
  else
    sum_rows_f64(acc, x, n);
}

void nbop_float_sum_segment(nb_dtype t, double *acc, const void *x, int64_t n) { float_sum_segment(t, acc, x, n); }

void nbop_float_sum_rows(nb_dtype t, double *acc, const void *x, int64_t n) { float_sum_rows(t, acc, x, n); }

nbop_family nbop_reduce_family(void) { return (nbop_family){reduce_ops, OP_COUNT}; }

/* ---- wrappers ----------------------------------------------------------------------- */

/* Reduction op of x over the axes tensor axes. */
static nb_tensor *reduce_over(nb_ctx *c, int op, nb_tensor *x, nb_tensor *axes, bool keepdims) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&reduce_ops[op], a);
  a[ATTR_KEEP_DIMS].b = keepdims;
  nb_tensor *in[2] = {x, axes};
  return nbop_call(c, &reduce_ops[op], in, 2, a);
}

/* axes NULL: every axis of x (x NULL is left for the dispatch to report). */
static nb_tensor *reduce_call(nb_ctx *c, int op, nb_tensor *x, const int *axes, int naxes, bool keepdims) {
  const nbop_def *def = &reduce_ops[op];
  if (!nbop_live(c)) return NULL;
  int all[NB_MAX_RANK];
  if (!axes && x && x->rank < 0) {
    nbcore_fail(c, NB_INVALID, "%s: reducing every axis needs a known rank; pass the axes", def->name);
    return NULL;
  }
  if (!axes) {
    naxes = x ? x->rank : 0;
    for (int i = 0; i < naxes; i++) all[i] = i;
    axes = all;
  } else if (naxes < 0) {
    nbcore_fail(c, NB_INVALID, "%s: negative axis count %d", def->name, naxes);
    return NULL;
  }
  nb_tensor *ax = nbop_const_int_list(c, axes, naxes);
  if (!ax) return NULL;
  nb_tensor *y = reduce_over(c, op, x, ax, keepdims);
  nb_tensor_free(ax);
  return y;
}

nb_tensor *nb_sum(nb_ctx *c, nb_tensor *x, const int *axes, int naxes, bool keepdims) {
  return reduce_call(c, OP_SUM, x, axes, naxes, keepdims);
}

nb_tensor *nb_sum_t(nb_ctx *c, nb_tensor *x, nb_tensor *axes, bool keepdims) {
  return reduce_over(c, OP_SUM, x, axes, keepdims);
}

nb_tensor *nb_mean(nb_ctx *c, nb_tensor *x, const int *axes, int naxes, bool keepdims) {
  return reduce_call(c, OP_MEAN, x, axes, naxes, keepdims);
}

nb_tensor *nb_max(nb_ctx *c, nb_tensor *x, const int *axes, int naxes, bool keepdims) {
  return reduce_call(c, OP_MAX, x, axes, naxes, keepdims);
}

nb_tensor *nb_min(nb_ctx *c, nb_tensor *x, const int *axes, int naxes, bool keepdims) {
  return reduce_call(c, OP_MIN, x, axes, naxes, keepdims);
}

nb_tensor *nb_prod(nb_ctx *c, nb_tensor *x, const int *axes, int naxes, bool keepdims) {
  return reduce_call(c, OP_PROD, x, axes, naxes, keepdims);
}

nb_tensor *nb_argmax(nb_ctx *c, nb_tensor *x, int axis, nb_dtype output_type) {
  if (!nbop_live(c)) return NULL;
  nb_tensor *dim = nb_scalar(c, NB_I32, axis);
  if (!dim) return NULL;
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&reduce_ops[OP_ARGMAX], a);
  a[ATTR_OUTPUT_TYPE].type = output_type;
  nb_tensor *in[2] = {x, dim};
  nb_tensor *y = nbop_call(c, &reduce_ops[OP_ARGMAX], in, 2, a);
  nb_tensor_free(dim);
  return y;
}

/* Scan op of x along the axis tensor axis. */
static nb_tensor *scan_over(nb_ctx *c, int op, nb_tensor *x, nb_tensor *axis, bool exclusive, bool reverse) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&reduce_ops[op], a);
  a[ATTR_EXCLUSIVE].b = exclusive;
  a[ATTR_REVERSE].b = reverse;
  nb_tensor *in[2] = {x, axis};
  return nbop_call(c, &reduce_ops[op], in, 2, a);
}

static nb_tensor *scan_call(nb_ctx *c, int op, nb_tensor *x, int axis, bool exclusive, bool reverse) {
  if (!nbop_live(c)) return NULL;
  nb_tensor *ax = nb_scalar(c, NB_I32, axis);
  if (!ax) return NULL;
  nb_tensor *y = scan_over(c, op, x, ax, exclusive, reverse);
  nb_tensor_free(ax);
  return y;
}

nb_tensor *nb_cumsum(nb_ctx *c, nb_tensor *x, int axis, bool exclusive, bool reverse) {
  return scan_call(c, OP_CUMSUM, x, axis, exclusive, reverse);
}

nb_tensor *nb_cumsum_t(nb_ctx *c, nb_tensor *x, nb_tensor *axis, bool exclusive, bool reverse) {
  return scan_over(c, OP_CUMSUM, x, axis, exclusive, reverse);
}

nb_tensor *nb_cumprod(nb_ctx *c, nb_tensor *x, int axis, bool exclusive, bool reverse) {
  return scan_call(c, OP_CUMPROD, x, axis, exclusive, reverse);
}
