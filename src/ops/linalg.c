/* Linear algebra: MatMul and BatchMatMulV2, each product one GEMM (oneDNN for float32,
   OpenBLAS for float64) on row-major data (a transpose is a GEMM flag, not a copy; an
   operand with a stride oneDNN reads slowly is copied: see copies_for).
   BatchMatMulV2's batch dims broadcast through per-dim strides of 0; a batch of small
   products is split across threads with one single-threaded GEMM each, while a large
   product uses the GEMM's own threads. */
#include "blas.h"

#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- GEMM ------------------------------------------------------------------------- */

/* Both backends are built on this OpenMP runtime and give a GEMM as many threads as the
   calling thread's OpenMP nthreads-var: oneDNN reads omp_get_max_threads() at each call;
   OpenBLAS keeps one count for the whole process (openblas_set_num_threads sets it
   together with the calling thread's nthreads-var), which openblas_follow_omp brings to
   nthreads-var right before an OpenBLAS call. Setting that count is not free (OpenBLAS
   frees or allocates a buffer per thread it drops or adds), so it is left alone while only
   oneDNN runs: a one-thread op between two-thread ones would otherwise set it twice per
   GEMM. Inside a parallel region (a kernel's workers, a pair of session steps) it is not
   touched at all: OpenBLAS runs one thread there anyway, and its buffer table is not safe
   to resize from several threads at once. */
void nbop_blas_set_threads(int n) {
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

static void openblas_follow_omp(void) {
  if (omp_in_parallel()) return;
  int n = omp_get_max_threads();
  if (openblas_get_num_threads() != n) openblas_set_num_threads(n);
}

static _Atomic nbop_gemm_backend f32_backend = NBOP_GEMM_ONEDNN;

void nbop_gemm_set_f32_backend(nbop_gemm_backend b) { f32_backend = b; }

static bool f32_on_onednn(nb_dtype t) { return t == NB_F32 && f32_backend == NBOP_GEMM_ONEDNN; }

const char *nbop_gemm_backend_name(nb_dtype t) { return f32_on_onednn(t) ? "oneDNN" : "OpenBLAS"; }

const char *nbop_gemm_kernel_name(nb_dtype t) {
  return f32_on_onednn(t) ? nbop_onednn_isa_name() : openblas_get_corename();
}

const char *nbop_onednn_isa_name(void) {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "generic";
  }
}

/* C = beta C, the whole product when k == 0. */
static void scale_rows(nb_dtype t, int64_t m, int64_t n, double beta, void *c, int64_t ldc) {
  size_t esz = nb_dtype_size(t);
  if (beta != 0) openblas_follow_omp(); /* only the scal calls run OpenBLAS */
  for (int64_t i = 0; i < m; i++) {
    char *row = (char *)c + (size_t)(i * ldc) * esz;
    if (beta == 0)
      memset(row, 0, (size_t)n * esz);
    else if (t == NB_F32)
      cblas_sscal((int)n, (float)beta, (float *)row, 1);
    else
      cblas_dscal((int)n, beta, (double *)row, 1);
  }
}

/* oneDNN's sgemm, row-major like nbop_gemm. Its matmul primitive (cached per shape) was
   measured too: on AVX2 it runs the same JIT GEMM ("gemm:jit"; with weights in format
   "any" it keeps them plain, so there are no packed weights to cache) at the same speed,
   plus a primitive lookup per call, so sgemm it is. */
static bool onednn_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *b,
                         int64_t ldb, float beta, float *c, int64_t ldc) {
  return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc) == dnnl_success;
}

/* oneDNN 2.x's AVX2 sgemm runs an m x n product on its no-copy kernels, which read the
   operands in place, when 1/m + 1/n >= 0.0038 (both below about 526: its gemm driver's
   nocopy_checker_avx2; otherwise it packs them first). In place, an operand stored with
   its k index along rows (A when transposed, B when not) whose row stride is a power of
   two of 2 KiB or more runs at about 2/3 of the speed: the rows walked fall into few
   cache sets. One thread, thread CPU time, GFLOP/s direct -> with that operand copied to
   rows 16 floats longer (copy included): NN 512^3 43 -> 62, TN 512x512x128 51 -> 80
   (both operands), NN m=128 n=512 k=512 59 -> 82, m=128 n=1024 k=1024 36 -> 64, TN
   512x10x128 36 either way; NN 256^3 (1 KiB rows) and 128x768x768 (768 floats) run at
   full speed direct, and the packed 512x1536x512, 1024^3 and 2048^3 the same or slower
   copied. So exactly such operands of such products are copied; the choice depends on the
   shape and strides alone. */
#define NOCOPY_THRESHOLD 0.0038
#define ALIASING_LD_MIN 512
#define PADDED_LD_EXTRA 16 /* one 64-byte cache line */

/* Which operands of a float32 product nbop_gemm copies before oneDNN's sgemm. */
typedef struct operand_copies {
  bool a, b;
} operand_copies;

static bool aliasing_ld(int64_t ld) { return ld >= ALIASING_LD_MIN && (ld & (ld - 1)) == 0; }

static operand_copies copies_for(bool ta, bool tb, int64_t m, int64_t n, int64_t lda, int64_t ldb) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa(); /* measured on AVX2 only */
  bool avx2 = isa == dnnl_cpu_isa_avx2 || isa == dnnl_cpu_isa_avx2_vnni;
  bool in_place = avx2 && 1.0 / (double)m + 1.0 / (double)n >= NOCOPY_THRESHOLD;
  return (operand_copies){in_place && ta && aliasing_ld(lda), in_place && !tb && aliasing_ld(ldb)};
}

/* A float32 GEMM operand: rows x cols stored with row stride ld. */
typedef struct operand {
  const float *data;
  int64_t rows, cols, ld;
} operand;

/* x copied to rows PADDED_LD_EXTRA floats longer (*copy: the block to release); false
   when out of memory. The block comes from the shared pool: a fresh 1 MB malloc would be
   pages faulting in on every call. */
static bool copy_padded(operand *x, nbcore_buffer **copy) {
  int64_t ld = x->cols + PADDED_LD_EXTRA;
  nbcore_buffer *block = nbcore_buffer_new_shared((size_t)(x->rows * ld) * sizeof(float));
  if (!block) return false;
  float *buf = block->data;
  for (int64_t i = 0; i < x->rows; i++) memcpy(buf + i * ld, x->data + i * x->ld, (size_t)x->cols * sizeof *buf);
  *x = (operand){buf, x->rows, x->cols, ld};
  *copy = block;
  return true;
}

/* onednn_sgemm with the operands copies_for names copied first; false when out of memory
   or oneDNN refuses, for the caller to run the product another way. */
static bool onednn_sgemm_copying(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  operand x = {a, ta ? k : m, ta ? m : k, lda}, y = {b, tb ? n : k, tb ? k : n, ldb};
  operand_copies want = copies_for(ta, tb, m, n, lda, ldb);
  nbcore_buffer *xcopy = NULL, *ycopy = NULL;
  bool ok = (!want.a || copy_padded(&x, &xcopy)) && (!want.b || copy_padded(&y, &ycopy)) &&
            onednn_sgemm(ta, tb, m, n, k, x.data, x.ld, y.data, y.ld, beta, c, ldc);
  nbcore_buffer_release(NULL, xcopy);
  nbcore_buffer_release(NULL, ycopy);
  return ok;
}

const char *nbop_gemm_path_name(nb_dtype t, bool ta, bool tb, int64_t m, int64_t n, int64_t lda, int64_t ldb) {
  if (!f32_on_onednn(t)) return "gemm";
  operand_copies want = copies_for(ta, tb, m, n, lda, ldb);
  return want.a && want.b ? "sgemm+copy_ab" : want.a ? "sgemm+copy_a" : want.b ? "sgemm+copy_b" : "sgemm";
}

void nbop_gemm(nb_dtype t, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, const void *b,
               int64_t ldb, double beta, void *c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta != 1) scale_rows(t, m, n, beta, c, ldc);
    return;
  }
  /* oneDNN checks its arguments as OpenBLAS does; should it refuse a call nabla's
     callers consider valid, OpenBLAS computes the product rather than nothing. */
  if (f32_on_onednn(t) && onednn_sgemm_copying(ta, tb, m, n, k, a, lda, b, ldb, (float)beta, c, ldc)) return;
  enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  openblas_follow_omp();
  if (t == NB_F32)
    cblas_sgemm(CblasRowMajor, opa, opb, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, (float)beta, c,
                (int)ldc);
  else
    cblas_dgemm(CblasRowMajor, opa, opb, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* ---- plans ------------------------------------------------------------------------- */

/* What infer hands the kernel: the product's sizes and how the batch walks the inputs. */
typedef struct matmul_plan {
  bool ta, tb;
  int64_t m, n, k;
  int brank;                  /* output batch rank */
  int64_t batch;              /* output matrices */
  int64_t bdims[NB_MAX_RANK]; /* output batch dims */
  /* elements to advance x and y by per step of each batch dim; 0 where broadcast */
  int64_t xstep[NB_MAX_RANK], ystep[NB_MAX_RANK];
  bool y_shared; /* every product uses the same y matrix */
} matmul_plan;
_Static_assert(sizeof(matmul_plan) <= NBOP_SCRATCH_BYTES, "matmul_plan must fit the scratch");

/* Attr slots: both ops keep their transpose flags first. grad_* are TF's hints for
   picking kernels in gradient graphs; they do not change the result. */
enum { ATTR_TRANSPOSE_X, ATTR_TRANSPOSE_Y, ATTR_GRAD_X, ATTR_GRAD_Y };

static nb_code check_dtypes(nbop_kargs *k) {
  for (int i = 0; i < 2; i++)
    if (!(NBOP_M(k->in[i]->dtype) & NBOP_M_FLOAT))
      return nbop_kfail(k, NB_DTYPE, "input %d has dtype %s; %s supports float32 and float64 here", i,
                        nb_dtype_name(k->in[i]->dtype), k->def->name);
  return nbop_kcheck_same_dtype(k, 0, 1);
}

/* Elements per matrix in the last two dims of x. */
static int64_t matrix_size(const nb_tensor *x) { return x->shape[x->rank - 2] * x->shape[x->rank - 1]; }

/* The inner dims of the product: x's and y's (where known, they must agree). */
static void inner_dims(const nbop_kargs *k, int64_t *kx, int64_t *ky) {
  const nb_tensor *x = k->in[0], *y = k->in[1];
  *kx = x->shape[x->rank - (k->attr[ATTR_TRANSPOSE_X].b ? 2 : 1)];
  *ky = y->shape[y->rank - (k->attr[ATTR_TRANSPOSE_Y].b ? 1 : 2)];
}

/* Both operands float of one dtype, of rank 2 (MatMul) or at least 2 with batch dims that
   broadcast, and inner dims that agree, where ranks and dims are known. */
static nb_code matmul_validate_ranks(nbop_kargs *k, bool batched) {
  const nb_tensor *x = k->in[0], *y = k->in[1];
  nb_code code = check_dtypes(k);
  for (int i = 0; i < 2 && !code; i++) {
    int r = k->in[i]->rank;
    if (r >= 0 && !batched && r != 2)
      return nbop_kfail(k, NB_SHAPE, "In[%d] is not a matrix. Instead it has shape %s", i, nbop_tstr(k->in[i]));
    if (r >= 0 && r < 2)
      return nbop_kfail(k, NB_SHAPE, "In[%d] ndims must be >= 2: %d (shape %s)", i, r, nbop_tstr(k->in[i]));
  }
  if (code || x->rank < 0 || y->rank < 0) return code;
  if (!nbop_broadcastable(x->rank - 2, x->shape, y->rank - 2, y->shape))
    return nbop_kfail(k, NB_SHAPE, "In[0] and In[1] must have compatible batch dimensions: %s vs. %s", nbop_tstr(x),
                      nbop_tstr(y));
  int64_t kx, ky;
  inner_dims(k, &kx, &ky);
  if (kx >= 0 && ky >= 0 && kx != ky)
    return nbop_kfail(k, NB_SHAPE, "Matrix size-incompatible: In[0]: %s, In[1]: %s", nbop_tstr(x), nbop_tstr(y));
  return NB_OK;
}

static nb_code matmul_validate(nbop_kargs *k) { return matmul_validate_ranks(k, false); }
static nb_code batch_matmul_validate(nbop_kargs *k) { return matmul_validate_ranks(k, true); }

/* Sizes of the product and its output meta, once the batch part of p is filled (a
   graph's probe with made-up dims may give inner dims that differ: the sizes are x's). */
static nb_code finish_plan(nbop_kargs *k, matmul_plan *p) {
  const nb_tensor *x = k->in[0], *y = k->in[1];
  int64_t ky;
  p->ta = k->attr[ATTR_TRANSPOSE_X].b;
  p->tb = k->attr[ATTR_TRANSPOSE_Y].b;
  inner_dims(k, &p->k, &ky);
  p->m = x->shape[x->rank - (p->ta ? 1 : 2)];
  p->n = y->shape[y->rank - (p->tb ? 2 : 1)];
  if (p->m && p->n && p->k && (p->m > NBOP_GEMM_MAX_DIM || p->n > NBOP_GEMM_MAX_DIM || p->k > NBOP_GEMM_MAX_DIM))
    return nbop_kfail(k, NB_UNIMPLEMENTED, "matrix dims of In[0]: %s, In[1]: %s exceed the BLAS limit %d", nbop_tstr(x),
                      nbop_tstr(y), NBOP_GEMM_MAX_DIM);
  nbop_meta *o = &k->out[0];
  o->dtype = x->dtype;
  o->rank = p->brank + 2;
  memcpy(o->shape, p->bdims, (size_t)p->brank * sizeof *p->bdims);
  o->shape[p->brank] = p->m;
  o->shape[p->brank + 1] = p->n;
  return NB_OK;
}

/* Per output batch dim, the element step of input x (rank - 2 batch dims, aligned to the
   right of the output's brank dims); 0 where x has no such dim or broadcasts it. */
static void batch_steps(const nb_tensor *x, int brank, int64_t *step) {
  int xb = x->rank - 2, lead = brank - xb;
  int64_t stride = matrix_size(x);
  for (int d = brank - 1; d >= 0; d--) {
    int xd = d - lead;
    step[d] = xd >= 0 && x->shape[xd] != 1 ? stride : 0;
    if (xd >= 0) stride *= x->shape[xd];
  }
}

static nb_code matmul_infer(nbop_kargs *k) {
  matmul_plan *p = (matmul_plan *)k->scratch;
  p->brank = 0;
  p->batch = 1;
  p->y_shared = true;
  return finish_plan(k, p);
}

/* A graph's probe with made-up batch dims may not broadcast: it fails and proves nothing. */
static nb_code batch_matmul_infer(nbop_kargs *k) {
  const nb_tensor *x = k->in[0], *y = k->in[1];
  matmul_plan *p = (matmul_plan *)k->scratch;
  if (!nbcore_broadcast_shape(x->rank - 2, x->shape, y->rank - 2, y->shape, &p->brank, p->bdims))
    return nbop_kfail(k, NB_SHAPE, "In[0] and In[1] must have compatible batch dimensions: %s vs. %s", nbop_tstr(x),
                      nbop_tstr(y));
  nb_code code = finish_plan(k, p);
  if (code) return code;
  /* Broadcasting can multiply dims that each fit into a count that does not, even
     with empty matrices, e.g. batch dims [2^40,1] and [1,2^40]. */
  if (!nbcore_shape_checked_size(p->brank, p->bdims, &p->batch))
    return nbop_kfail(k, NB_SHAPE, "output shape %s is too large (In[0]: %s, In[1]: %s)",
                      nbop_sstr(k->out[0].rank, k->out[0].shape), nbop_tstr(x), nbop_tstr(y));
  batch_steps(x, p->brank, p->xstep);
  batch_steps(y, p->brank, p->ystep);
  p->y_shared = nbcore_shape_size(y->rank - 2, y->shape) == 1;
  return NB_OK;
}

/* ---- kernel ------------------------------------------------------------------------ */

/* Per-GEMM multiply-adds below which a GEMM gains little from threads of its own (OpenBLAS
   runs one thread anyway: its SMP threshold), so a batch of such products is better split
   across threads by batch. */
#define SMALL_GEMM_WORK (1 << 18)

typedef struct matmul_job {
  const matmul_plan *p;
  nb_dtype t;
  size_t esz;
  const char *x, *y;
  char *out;
  int64_t lda, ldb;
} matmul_job;

/* Products lo..hi-1 of the output batch; an odometer over the batch dims tracks the
   input offsets so no division happens per product. */
static void matmul_range(void *arg, int64_t lo, int64_t hi) {
  const matmul_job *j = arg;
  const matmul_plan *p = j->p;
  int64_t idx[NB_MAX_RANK], xo = 0, yo = 0, rest = lo;
  for (int d = p->brank - 1; d >= 0; d--) {
    idx[d] = rest % p->bdims[d];
    rest /= p->bdims[d];
    xo += idx[d] * p->xstep[d];
    yo += idx[d] * p->ystep[d];
  }
  size_t out_size = (size_t)(p->m * p->n);
  for (int64_t b = lo; b < hi; b++) {
    nbop_gemm(j->t, p->ta, p->tb, p->m, p->n, p->k, j->x + (size_t)xo * j->esz, j->lda, j->y + (size_t)yo * j->esz,
              j->ldb, 0, j->out + (size_t)b * out_size * j->esz, p->n);
    for (int d = p->brank - 1; d >= 0; d--) {
      xo += p->xstep[d];
      yo += p->ystep[d];
      if (++idx[d] < p->bdims[d]) break;
      xo -= p->xstep[d] * p->bdims[d];
      yo -= p->ystep[d] * p->bdims[d];
      idx[d] = 0;
    }
  }
}

/* One product split into blocks of output columns (of rows when x is transposed), a
   single-threaded GEMM per thread. OpenBLAS threads a product with few rows, or with a
   short inner dim, poorly (an RNN step's 32x256x256: 29 us on two of its threads, 25 us
   split here, 38 us on one); these shapes take this path. oneDNN's own two threads run
   them about as fast as the split (256x256x32 with x transposed: 42 us, split 41 us, 57 us
   on one thread), so the split stays whichever backend runs float32. */
#define SPLIT_GEMM_WORK (1 << 20)

typedef struct split_job {
  const matmul_job *j;
  double beta;
  int64_t block; /* columns (rows) per block */
} split_job;

static void split_range(void *arg, int64_t lo, int64_t hi) {
  const split_job *s = arg;
  const matmul_job *j = s->j;
  const matmul_plan *p = j->p;
  int64_t extent = p->ta ? p->m : p->n, first = lo * s->block;
  int64_t count = (hi * s->block < extent ? hi * s->block : extent) - first;
  if (p->ta) /* rows first..: columns of x, rows of the output */
    nbop_gemm(j->t, true, p->tb, count, p->n, p->k, j->x + (size_t)first * j->esz, j->lda, j->y, j->ldb, s->beta,
              j->out + (size_t)(first * p->n) * j->esz, p->n);
  else /* columns first..: of op(y) and of the output */
    nbop_gemm(j->t, false, p->tb, p->m, count, p->k, j->x, j->lda,
              j->y + (size_t)(p->tb ? first * j->ldb : first) * j->esz, j->ldb, s->beta,
              j->out + (size_t)first * j->esz, p->n);
}

/* Whether split_range beats the GEMM's own threads for one product. */
static bool split_pays(const nbop_kargs *k, const matmul_plan *p) {
  double work = (double)p->m * (double)p->n * (double)p->k;
  return k->threads > 1 && p->batch == 1 && work >= SPLIT_GEMM_WORK && (p->ta ? p->k <= 64 : p->m < 128);
}

/* The single product of p, split across threads when that pays. */
static void gemm_one(const nbop_kargs *k, const matmul_job *j, double beta) {
  const matmul_plan *p = j->p;
  if (!split_pays(k, p)) {
    nbop_gemm(j->t, p->ta, p->tb, p->m, p->n, p->k, j->x, j->lda, j->y, j->ldb, beta, j->out, p->n);
    return;
  }
  int64_t extent = p->ta ? p->m : p->n, nblocks = k->threads, block = (extent + nblocks - 1) / nblocks;
  block = (block + 15) / 16 * 16; /* whole SIMD panels */
  split_job s = {j, beta, block};
  nbop_parallel_range(k->threads, (extent + block - 1) / block, split_range, &s);
}

/* A multiply-add count for nbop_kthreads, clamped so a huge product cannot overflow. */
static int64_t saturating_work(double w) { return w >= 0x1p62 ? INT64_MAX : (int64_t)w; }

static nb_code matmul_kernel(nbop_kargs *k) {
  const matmul_plan *p = (const matmul_plan *)k->scratch;
  if (k->res[0]->size == 0) return NB_OK;
  const nb_tensor *x = k->in[0], *y = k->in[1];
  matmul_job j = {p,
                  x->dtype,
                  nb_dtype_size(x->dtype),
                  nbcore_tdata(x),
                  nbcore_tdata(y),
                  nbcore_tdata(k->res[0]),
                  x->shape[x->rank - 1],
                  y->shape[y->rank - 1]};
  int prev_threads = omp_get_max_threads();
  nbop_blas_set_threads(k->threads);
  /* One y for every x matrix, x not transposed: the x batch stacks into one tall GEMM. */
  if (p->batch == 1) {
    gemm_one(k, &j, 0);
  } else if (p->y_shared && !p->ta && p->batch * p->m <= NBOP_GEMM_MAX_DIM) {
    nbop_gemm(j.t, false, p->tb, p->batch * p->m, p->n, p->k, j.x, j.lda, j.y, j.ldb, 0, j.out, p->n);
  } else {
    double gemm_work = (double)p->m * (double)p->n * (double)p->k;
    int nt = 1;
    if (p->batch >= 2 && gemm_work < SMALL_GEMM_WORK)
      nt = nbop_kthreads(k, saturating_work(gemm_work * (double)p->batch));
    nbop_parallel_range(nt, p->batch, matmul_range, &j);
  }
  nbop_blas_set_threads(prev_threads); /* no lasting change to the caller's OpenMP settings */
  return NB_OK;
}

/* _MatMulAdd(a, b, acc) = acc + op(a) op(b): one GEMM with beta = 1 over acc's values,
   in acc's own block when acc dies here (input forwarding), so a running sum of
   products (a loop gradient summing x_t^T dz_t over iterations) costs neither a zeroed
   product nor a separate add. */
enum { MATMUL_ADD_ACC = 2 };

/* The accumulator is a matrix of the product's dtype and shape, where known. */
static nb_code matmul_add_validate(nbop_kargs *k) {
  const nb_tensor *x = k->in[0], *y = k->in[1], *acc = k->in[MATMUL_ADD_ACC];
  nb_code code = matmul_validate(k);
  if (!code) code = nbop_kcheck_same_dtype(k, 0, MATMUL_ADD_ACC);
  if (!code) code = nbop_kcheck_rank(k, MATMUL_ADD_ACC, 2, 2, "the accumulator");
  if (code || x->rank < 0 || y->rank < 0 || acc->rank < 0) return code;
  int64_t product[2] = {x->shape[k->attr[ATTR_TRANSPOSE_X].b ? 1 : 0], y->shape[k->attr[ATTR_TRANSPOSE_Y].b ? 0 : 1]};
  for (int d = 0; d < 2; d++)
    if (acc->shape[d] >= 0 && product[d] >= 0 && acc->shape[d] != product[d])
      return nbop_kfail(k, NB_SHAPE, "the accumulator %s does not match the product %s", nbop_tstr(acc),
                        nbop_sstr(2, product));
  return NB_OK;
}

static nb_code matmul_add_kernel(nbop_kargs *k) {
  const matmul_plan *p = (const matmul_plan *)k->scratch;
  const nb_tensor *x = k->in[0], *y = k->in[1], *acc = k->in[MATMUL_ADD_ACC];
  void *out = nbcore_tdata(k->res[0]);
  if (k->res[0]->size == 0) return NB_OK;
  if (out != nbcore_tdata(acc)) memcpy(out, nbcore_tdata(acc), (size_t)acc->size * nb_dtype_size(acc->dtype));
  matmul_job j = {p,           x->dtype,   nb_dtype_size(x->dtype), nbcore_tdata(x), nbcore_tdata(y), out,
                  x->shape[1], y->shape[1]};
  int prev_threads = omp_get_max_threads();
  nbop_blas_set_threads(k->threads);
  gemm_one(k, &j, 1);
  nbop_blas_set_threads(prev_threads); /* no lasting change to the caller's OpenMP settings */
  return NB_OK;
}

/* ---- the table ---------------------------------------------------------------------- */

#define BOOL_ATTR(NAME) \
  { NAME, NB_ATTR_BOOL, {.b = false}, false }

enum { OP_MATMUL, OP_BATCH_MATMUL_V2, OP_MATMUL_ADD, OP_COUNT };

static nbop_def linalg_ops[OP_COUNT] = {
    /* both gradients multiply the incoming gradient by the other input */
    [OP_MATMUL] = {.name = "MatMul",
                   .nin = 2,
                   .nout = 1,
                   .alias = -1,
                   .nattrs = 4,
                   .batched_as = "BatchMatMulV2", /* transpose_a/b as adj_x/y, grad_a/b as grad_x/y */
                   .attrs = {BOOL_ATTR("transpose_a"), BOOL_ATTR("transpose_b"), BOOL_ATTR("grad_a"),
                             BOOL_ATTR("grad_b")},
                   .validate = matmul_validate,
                   .infer = matmul_infer,
                   .kernel = matmul_kernel},
    [OP_BATCH_MATMUL_V2] = {.name = "BatchMatMulV2",
                            .nin = 2,
                            .nout = 1,
                            .alias = -1,
                            .nattrs = 4,
                            .attrs = {BOOL_ATTR("adj_x"), BOOL_ATTR("adj_y"), BOOL_ATTR("grad_x"), BOOL_ATTR("grad_y")},
                            .validate = batch_matmul_validate,
                            .infer = batch_matmul_infer,
                            .kernel = matmul_kernel},
    /* MatMul's attrs, then the accumulator as input 2, whose block output 0 may take over */
    [OP_MATMUL_ADD] = {.name = "_MatMulAdd",
                       .nin = 3,
                       .nout = 1,
                       .alias = -1,
                       .nattrs = 4,
                       .inplace_input = 1 + MATMUL_ADD_ACC,
                       .attrs = {BOOL_ATTR("transpose_a"), BOOL_ATTR("transpose_b"), BOOL_ATTR("grad_a"),
                                 BOOL_ATTR("grad_b")},
                       .validate = matmul_add_validate,
                       .infer = matmul_infer,
                       .kernel = matmul_add_kernel},
};

nbop_family nbop_linalg_family(void) { return (nbop_family){linalg_ops, OP_COUNT}; }

/* ---- wrappers ----------------------------------------------------------------------- */

/* op's product of x and y (plus acc when not NULL: _MatMulAdd). */
static nb_tensor *call_product(nb_ctx *c, int op, nb_tensor *x, nb_tensor *y, bool tx, bool ty, nb_tensor *acc) {
  nbop_attrval a[NBOP_MAX_ATTRS];
  nbop_attr_defaults(&linalg_ops[op], a);
  a[ATTR_TRANSPOSE_X].b = tx;
  a[ATTR_TRANSPOSE_Y].b = ty;
  nb_tensor *in[3] = {x, y, acc};
  return nbop_call(c, &linalg_ops[op], in, acc ? 3 : 2, a);
}

nb_tensor *nb_matmul(nb_ctx *c, nb_tensor *a, nb_tensor *b, bool ta, bool tb) {
  return call_product(c, OP_MATMUL, a, b, ta, tb, NULL);
}

nb_tensor *nb_matmul_add(nb_ctx *c, nb_tensor *a, nb_tensor *b, bool ta, bool tb, nb_tensor *acc) {
  return acc ? call_product(c, OP_MATMUL_ADD, a, b, ta, tb, acc) : nb_matmul(c, a, b, ta, tb);
}

nb_tensor *nb_batch_matmul(nb_ctx *c, nb_tensor *x, nb_tensor *y, bool adj_x, bool adj_y) {
  return call_product(c, OP_BATCH_MATMUL_V2, x, y, adj_x, adj_y, NULL);
}
